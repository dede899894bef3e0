//! Periodic and parameterized jobs: `PUT|POST /v1/job/:id/periodic/force` (`Job.PeriodicForce`)
//! and `PUT|POST /v1/job/:id/dispatch` (`Job.Dispatch`), in Nomad's shapes.

use std::collections::{BTreeMap, HashMap};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::put;
use axum::Router;
use base64::Engine;
use serde::{Deserialize, Serialize};

use super::error::ApiError;
use super::jobs::decode_body;
use super::query::QueryOptions;
use super::read::json_write;
use super::HttpContext;
use crate::rpc::{service, Services};

/// The routes.
pub fn routes() -> Router<HttpContext> {
    Router::new()
        .route(
            "/v1/job/{id}/periodic/force",
            put(periodic_force).post(periodic_force),
        )
        .route("/v1/job/{id}/dispatch", put(dispatch).post(dispatch))
}

/// Nomad's `PeriodicForceResponse`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct PeriodicForceResponse {
    #[serde(rename = "EvalID")]
    eval_id: String,
    eval_create_index: u64,
    index: u64,
}

/// `PUT|POST /v1/job/:id/periodic/force`: launch the periodic job's child now.
async fn periodic_force(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let endpoints = ctx.endpoints()?;
    let opts = QueryOptions::parse(&q)?;
    let done = endpoints
        .job_periodic_force(service::job::JobPeriodicForceRequest {
            namespace: opts.namespace.as_str().into(),
            job_id: id.as_str().into(),
        })
        .await?;
    Ok(json_write(
        PeriodicForceResponse {
            eval_id: done.eval_id.to_string(),
            eval_create_index: done.index,
            index: done.index,
        },
        done.index,
    ))
}

/// Nomad's `JobDispatchRequest`. python-nomad sends the token as `idempotency_token` in the
/// body; Nomad's own client sends it as a query parameter; both are read.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct DispatchRequest {
    #[serde(rename = "JobID")]
    job_id: Option<String>,
    /// Base64, as Go encodes a `[]byte`.
    payload: Option<String>,
    meta: Option<BTreeMap<String, String>>,
    idempotency_token: Option<String>,
    #[serde(rename = "idempotency_token")]
    idempotency_token_snake: Option<String>,
    id_prefix_template: Option<String>,
    priority: Option<u32>,
}

/// Nomad's `JobDispatchResponse`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct DispatchResponse {
    #[serde(rename = "DispatchedJobID")]
    dispatched_job_id: String,
    #[serde(rename = "EvalID")]
    eval_id: String,
    eval_create_index: u64,
    job_create_index: u64,
    index: u64,
}

/// `PUT|POST /v1/job/:id/dispatch`: launch a child of the parameterized job.
async fn dispatch(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let endpoints = ctx.endpoints()?;
    let opts = QueryOptions::parse(&q)?;
    let req: DispatchRequest = if body.iter().all(u8::is_ascii_whitespace) {
        DispatchRequest::default()
    } else {
        decode_body(&body)?
    };
    if let Some(job_id) = req.job_id.as_deref().filter(|j| !j.is_empty()) {
        if job_id != id {
            return Err(ApiError::bad_request("Job ID does not match"));
        }
    }
    let payload = match req.payload.as_deref() {
        None | Some("") => Vec::new(),
        Some(text) => base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| ApiError::bad_request(format!("Payload is not valid base64: {e}")))?,
    };
    let idempotency_token = [
        q.get("idempotency_token").cloned(),
        req.idempotency_token,
        req.idempotency_token_snake,
    ]
    .into_iter()
    .flatten()
    .find(|t| !t.is_empty())
    .unwrap_or_default();
    let done = endpoints
        .job_dispatch(Box::new(service::job::JobDispatchRequest {
            namespace: opts.namespace.as_str().into(),
            job_id: id.as_str().into(),
            payload,
            meta: req.meta.unwrap_or_default(),
            idempotency_token,
            id_prefix_template: req.id_prefix_template.unwrap_or_default(),
            priority: req.priority.unwrap_or(0),
        }))
        .await?;
    Ok(json_write(
        DispatchResponse {
            dispatched_job_id: done.dispatched_job_id.to_string(),
            eval_id: done.eval_id.map(|e| e.to_string()).unwrap_or_default(),
            eval_create_index: done.eval_create_index,
            job_create_index: done.job_create_index,
            index: done.index,
        },
        done.index,
    ))
}
