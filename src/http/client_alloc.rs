//! What Nomad's client agents serve about their allocations and themselves: `POST|PUT
//! /v1/client/allocation/:id/restart` (`{"TaskName", "AllTasks"}`, both optional: without a
//! task every running task restarts in place) and `POST|PUT /v1/client/allocation/:id/signal`
//! (`{"Task", "Signal": "SIGUSR1"}`, without a task every running task), both answering
//! `{"Index": 0}` as Nomad does (an unknown task or signal is a 400 naming it, an allocation
//! this client does not hold a 404); `GET /v1/client/allocation/:id/stats` (Nomad's
//! `AllocResourceUsage`), `GET /v1/client/allocation/:id/checks` (the latest result of
//! each service check), `/v1/client/allocation/:id/gc` and `/v1/client/gc?node_id=`
//! (garbage-collect finished allocations now, [`crate::client::gc`]) and `GET
//! /v1/client/stats?node_id=` (Nomad's `HostStats`).
//!
//! Served by the agent whose client runs the allocation (or is the node); a server forwards
//! them once to the node's agent ([`client_route`]).

use axum::extract::Query;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;

use super::client_route::{self, Target};
use super::error::ApiError;
use super::HttpContext;
use crate::client::ops::{AllocOpError, ClientHandle};

/// The client allocation routes.
pub fn routes() -> Router<HttpContext> {
    Router::new()
        .route(
            "/v1/client/allocation/{alloc_id}/restart",
            post(restart).put(restart),
        )
        .route(
            "/v1/client/allocation/{alloc_id}/signal",
            post(signal).put(signal),
        )
        .route("/v1/client/allocation/{alloc_id}/stats", get(alloc_stats))
        .route(
            "/v1/client/allocation/{alloc_id}/snapshot",
            get(alloc_snapshot),
        )
        .route("/v1/client/allocation/{alloc_id}/checks", get(alloc_checks))
        .route(
            "/v1/client/allocation/{alloc_id}/gc",
            get(alloc_gc).put(alloc_gc).post(alloc_gc),
        )
        .route("/v1/client/stats", get(host_stats))
        .route(
            "/v1/client/gc",
            get(client_gc).put(client_gc).post(client_gc),
        )
}

/// `restart`'s body (Nomad's `AllocRestartRequest` fields the caller may set).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RestartBody {
    #[serde(rename = "TaskName")]
    task_name: Option<String>,
    #[serde(rename = "AllTasks")]
    all_tasks: Option<bool>,
}

/// `signal`'s body (Nomad's `AllocSignalRequest` fields the caller may set).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SignalBody {
    #[serde(rename = "Task")]
    task: Option<String>,
    #[serde(rename = "Signal")]
    signal: Option<String>,
}

/// A body that may be absent (Nomad reads an empty one as no fields set).
fn optional_body<T: serde::de::DeserializeOwned + Default>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(T::default());
    }
    super::jobs::decode_body(body)
}

/// An operator request's failure with Nomad's status codes.
pub(super) fn op_error(e: AllocOpError) -> ApiError {
    let status = if matches!(e, AllocOpError::UnknownAlloc(_)) {
        StatusCode::NOT_FOUND
    } else if matches!(e, AllocOpError::MigrateToken(_)) {
        StatusCode::FORBIDDEN
    } else if matches!(e, AllocOpError::StillRunning(_)) {
        StatusCode::CONFLICT
    } else if is_failure(&e) {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::BAD_REQUEST
    };
    ApiError {
        status,
        message: e.to_string(),
    }
}

/// Whether the request was right but carrying it out failed.
fn is_failure(e: &AllocOpError) -> bool {
    matches!(
        e,
        AllocOpError::Timeout { .. }
            | AllocOpError::Exec { .. }
            | AllocOpError::Task(crate::client::types::TaskOpError::Signal { .. })
    )
}

/// Where a request about `alloc_id` is served, and this agent's client when here.
fn route(
    ctx: &HttpContext,
    alloc_id: &str,
    headers: &HeaderMap,
) -> Result<Result<ClientHandle, (String, String)>, ApiError> {
    let held = |id: &str| ctx.client().is_some_and(|c| c.has_alloc(id));
    match client_route::locate_alloc(ctx, alloc_id, headers, held)? {
        Target::Here => ctx
            .client()
            .cloned()
            .map(Ok)
            .ok_or_else(|| ApiError::not_found("this agent's client has not started")),
        Target::Node { addr, alloc_id } => Ok(Err((addr, alloc_id))),
    }
}

/// Where a request about node `node_id` (this agent's client's when empty) is served: this
/// agent's client, or the node's HTTP address.
fn route_node(
    ctx: &HttpContext,
    node_id: &str,
    headers: &HeaderMap,
) -> Result<Result<ClientHandle, String>, ApiError> {
    match client_route::locate_node(ctx, node_id, headers)? {
        Target::Here => ctx
            .client()
            .cloned()
            .map(Ok)
            .ok_or_else(|| ApiError::not_found("this agent's client has not started")),
        Target::Node { addr, .. } => Ok(Err(addr)),
    }
}

/// The answer of a request carried out here.
fn done() -> Response {
    Json(json!({ "Index": 0 })).into_response()
}

async fn restart(
    State(ctx): State<HttpContext>,
    Path(alloc_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: RestartBody = optional_body(&body)?;
    match route(&ctx, &alloc_id, &headers)? {
        Ok(client) => {
            let task = req.task_name.as_deref().filter(|t| !t.is_empty());
            client
                .restart(&alloc_id, task, req.all_tasks.unwrap_or(false))
                .await
                .map_err(op_error)?;
            Ok(done())
        }
        Err((addr, alloc_id)) => {
            let path = format!("/v1/client/allocation/{alloc_id}/restart");
            client_route::forward(&addr, Method::POST, &path, Some(body)).await
        }
    }
}

async fn signal(
    State(ctx): State<HttpContext>,
    Path(alloc_id): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: SignalBody = optional_body(&body)?;
    let Some(signal) = req.signal.filter(|s| !s.is_empty()) else {
        return Err(ApiError::bad_request("Signal must be set (e.g. SIGUSR1)"));
    };
    if crate::client::signal::parse(&signal).is_none() {
        return Err(op_error(AllocOpError::UnknownSignal(signal)));
    }
    match route(&ctx, &alloc_id, &headers)? {
        Ok(client) => {
            let task = req.task.as_deref().filter(|t| !t.is_empty());
            client
                .signal(&alloc_id, task, &signal)
                .await
                .map_err(op_error)?;
            Ok(done())
        }
        Err((addr, alloc_id)) => {
            let path = format!("/v1/client/allocation/{alloc_id}/signal");
            client_route::forward(&addr, Method::POST, &path, Some(body)).await
        }
    }
}

/// What reading usage from `/proc` gives, off the async runtime.
async fn read_stats<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, AllocOpError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("reading the usage failed: {e}")))?
        .map_err(op_error)
}

/// `GET /v1/client/allocation/:id/stats`.
async fn alloc_stats(
    State(ctx): State<HttpContext>,
    Path(alloc_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    match route(&ctx, &alloc_id, &headers)? {
        Ok(client) => {
            let usage = client.alloc_stats(&alloc_id).await.map_err(op_error)?;
            Ok(Json(usage).into_response())
        }
        Err((addr, alloc_id)) => {
            let path = format!("/v1/client/allocation/{alloc_id}/stats");
            client_route::forward(&addr, Method::GET, &path, None).await
        }
    }
}

/// Bytes per chunk of a snapshot's body.
const SNAPSHOT_CHUNK: usize = 64 << 10;
/// Chunks of a snapshot waiting to be sent.
const SNAPSHOT_QUEUE: usize = 8;

/// A writer that sends what it is given, in chunks, to a body's queue (from a blocking
/// thread); fails once the receiver is gone.
struct ChunkWriter {
    tx: tokio::sync::mpsc::Sender<std::io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl std::io::Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= SNAPSHOT_CHUNK {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::take(&mut self.buf));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| std::io::Error::other("the caller went away"))
    }
}

/// `GET /v1/client/allocation/:id/snapshot`: a stopped allocation's `alloc/data/` and its
/// tasks' `local/` as a tar stream, for its replacement on another node (a migrating
/// `ephemeral_disk`). Served by the node's own agent only (the caller dials it), to a
/// caller holding the servers' migrate token for it ([`crate::util::migrate::TOKEN_HEADER`]): 403
/// without, 409 while the allocation still runs, 404 when this node does not hold it.
async fn alloc_snapshot(
    State(ctx): State<HttpContext>,
    Path(alloc_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let client = ctx
        .client()
        .ok_or_else(|| ApiError::not_found("this agent runs no client"))?;
    let token = headers
        .get(crate::util::migrate::TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let (dir, tasks) = client.snapshot_source(&alloc_id, token).map_err(op_error)?;
    // The archive is written on a blocking thread, in chunks through a small queue; a
    // failure mid-way ends the body with an error, so the caller sees a broken transfer,
    // never a shorter archive.
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(SNAPSHOT_QUEUE);
    tokio::task::spawn_blocking(move || {
        let mut out = ChunkWriter {
            tx: tx.clone(),
            buf: Vec::with_capacity(SNAPSHOT_CHUNK),
        };
        // The archive's end flushes the last chunk.
        if let Err(e) = dir.write_snapshot(&tasks, &mut out) {
            tracing::warn!(alloc_id, error = %e, "writing the allocation's snapshot failed");
            let _ = tx.blocking_send(Err(e));
        }
    });
    let chunks = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    let body = axum::body::Body::from_stream(chunks);
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/x-tar")],
        body,
    )
        .into_response())
}

/// `GET|PUT|POST /v1/client/allocation/:id/gc`: garbage-collect the finished allocation now
/// (its directory removed, forgotten by its client; [`crate::client::gc`]). Answers `null`
/// as Nomad does; 404 for an allocation the client does not keep, 400 for one that still
/// runs or whose end the servers have not heard yet.
async fn alloc_gc(
    State(ctx): State<HttpContext>,
    Path(alloc_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    match route(&ctx, &alloc_id, &headers)? {
        Ok(client) => {
            client.gc_alloc(&alloc_id).await.map_err(op_error)?;
            Ok(Json(serde_json::Value::Null).into_response())
        }
        Err((addr, alloc_id)) => {
            let path = format!("/v1/client/allocation/{alloc_id}/gc");
            client_route::forward(&addr, Method::PUT, &path, None).await
        }
    }
}

/// `GET|PUT|POST /v1/client/gc` (`?node_id=`): garbage-collect every finished allocation
/// of this agent's client, or of the node named (a server forwards to it). Answers `null`.
async fn client_gc(
    State(ctx): State<HttpContext>,
    Query(q): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let node_id = q.get("node_id").map(String::as_str).unwrap_or_default();
    match route_node(&ctx, node_id, &headers)? {
        Ok(client) => {
            client.gc_all().await;
            Ok(Json(serde_json::Value::Null).into_response())
        }
        Err(addr) => {
            let path = format!("/v1/client/gc?node_id={}", crate::api::urlencode(node_id));
            client_route::forward(&addr, Method::PUT, &path, None).await
        }
    }
}

/// `GET /v1/client/allocation/:id/checks`: the latest result of each of the allocation's
/// service checks, by check ID (Nomad's `QueryResult`s; `{}` when it has none running).
async fn alloc_checks(
    State(ctx): State<HttpContext>,
    Path(alloc_id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    match route(&ctx, &alloc_id, &headers)? {
        Ok(client) => {
            let results = client.alloc_checks(&alloc_id).map_err(op_error)?;
            Ok(Json(results).into_response())
        }
        Err((addr, alloc_id)) => {
            let path = format!("/v1/client/allocation/{alloc_id}/checks");
            client_route::forward(&addr, Method::GET, &path, None).await
        }
    }
}

/// `GET /v1/client/stats?node_id=`: this agent's client when no node (or its own) is named.
async fn host_stats(
    State(ctx): State<HttpContext>,
    Query(q): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let node_id = q.get("node_id").map(String::as_str).unwrap_or_default();
    match route_node(&ctx, node_id, &headers)? {
        Ok(client) => {
            let usage = read_stats(move || Ok(client.host_stats())).await?;
            Ok(Json(usage).into_response())
        }
        Err(addr) => {
            let path = format!(
                "/v1/client/stats?node_id={}",
                crate::api::urlencode(node_id)
            );
            client_route::forward(&addr, Method::GET, &path, None).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_may_be_empty_or_null_and_errors_keep_nomads_codes() {
        let r: RestartBody = optional_body(&Bytes::from_static(b"")).unwrap();
        assert!(r.task_name.is_none() && r.all_tasks.is_none());
        let s: SignalBody = optional_body(&Bytes::from_static(
            br#"{"Signal": "SIGUSR1", "Task": null}"#,
        ))
        .unwrap();
        assert_eq!(
            (s.signal.as_deref(), s.task.as_deref()),
            (Some("SIGUSR1"), None)
        );
        assert!(optional_body::<SignalBody>(&Bytes::from_static(b"{")).is_err());
        assert_eq!(
            op_error(AllocOpError::UnknownAlloc("a".into())).status,
            StatusCode::NOT_FOUND
        );
        let unknown = op_error(AllocOpError::UnknownSignal("SIGNOPE".into()));
        assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            unknown.message,
            "failed to parse signal: invalid signal \"SIGNOPE\""
        );
        assert_eq!(
            op_error(AllocOpError::Timeout {
                task: "t".into(),
                waited: std::time::Duration::from_secs(1)
            })
            .status,
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
}
