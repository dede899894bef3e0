//! `GET /v1/client/fs/cat/:alloc_id?path=<task>/stdout.log`: a file from an allocation's
//! directory, as plain text.
//!
//! Served by the agent whose client runs the allocation (the directory is
//! `<data_dir>/alloc/<alloc id>/`). A server that does not hold the directory looks the
//! allocation up, and forwards the request once to its node's HTTP address; anything else is
//! answered 404 with the reason.

use std::collections::HashMap;
use std::path::{Component, Path as FsPath, PathBuf};

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use super::error::ApiError;
use super::HttpContext;

/// Header marking a request forwarded by a server, so it is never forwarded again.
const FORWARDED: &str = "X-Teamster-Forwarded";
/// The largest file served (a cat, not a download).
pub const MAX_CAT_BYTES: u64 = 16 << 20;

/// The client filesystem routes.
pub fn routes() -> Router<HttpContext> {
    Router::new().route("/v1/client/fs/cat/{alloc_id}", get(cat))
}

/// `path` inside `root`, refusing absolute paths and `..`.
pub fn resolve(root: &FsPath, path: &str) -> Result<PathBuf, ApiError> {
    let rel = FsPath::new(path.trim_start_matches('/'));
    if path.is_empty() {
        return Err(ApiError::bad_request("must provide a file path"));
    }
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(ApiError::bad_request(format!(
            "path {path:?} must stay inside the allocation directory"
        )));
    }
    Ok(root.join(rel))
}

async fn cat(
    State(ctx): State<HttpContext>,
    Path(alloc_id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let path = q.get("path").cloned().unwrap_or_default();
    if alloc_id.is_empty()
        || !alloc_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Err(ApiError::bad_request("malformed allocation ID"));
    }
    let data_dir = ctx.agent().data_dir.clone();
    let root = data_dir.join("alloc").join(&alloc_id);
    if ctx.agent().client_enabled && root.is_dir() {
        let file = resolve(&root, &path)?;
        let meta = tokio::fs::metadata(&file)
            .await
            .map_err(|e| ApiError::not_found(format!("{path}: {e}")))?;
        if meta.is_dir() {
            return Err(ApiError::bad_request(format!("{path} is a directory")));
        }
        if meta.len() > MAX_CAT_BYTES {
            return Err(ApiError::bad_request(format!(
                "{path} is {} bytes; cat serves at most {MAX_CAT_BYTES}",
                meta.len()
            )));
        }
        let bytes = tokio::fs::read(&file)
            .await
            .map_err(|e| ApiError::internal(format!("{path}: {e}")))?;
        let mut resp = bytes.into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        return Ok(resp);
    }
    if headers.contains_key(FORWARDED) {
        return Err(ApiError::not_found(format!(
            "allocation {alloc_id} has no directory on this client"
        )));
    }
    // A server: find the client that runs it.
    let node = ctx.server().map_err(|_| {
        ApiError::not_found(format!("Unknown allocation {alloc_id:?} on this client"))
    })?;
    let snap = node.node.state().snapshot();
    let alloc = match snap.alloc_by_id(&alloc_id) {
        Some(a) => a.clone(),
        None => {
            let found: Vec<_> = snap.allocs_by_prefix(&alloc_id).take(2).collect();
            match found.as_slice() {
                [one] => (*one).clone(),
                [] => {
                    return Err(ApiError::not_found(format!(
                        "Unknown allocation {alloc_id:?}"
                    )))
                }
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "allocation ID prefix {alloc_id:?} matches several allocations"
                    )))
                }
            }
        }
    };
    let alloc_id = alloc.id.to_string();
    let client = snap
        .node_by_id(alloc.node_id.as_str())
        .ok_or_else(|| ApiError::not_found(format!("node {} not found", alloc.node_id)))?;
    if client.http_addr.is_empty() {
        return Err(ApiError::not_found(format!(
            "node {} has no HTTP address",
            client.id
        )));
    }
    let url = format!("http://{}/v1/client/fs/cat/{alloc_id}", client.http_addr);
    let resp = reqwest::Client::new()
        .get(&url)
        .query(&[("path", path.as_str())])
        .header(FORWARDED, "1")
        .timeout(std::time::Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| ApiError::internal(format!("cannot reach node {}: {e}", client.id)))?;
    let status = resp.status();
    let body = resp
        .bytes()
        .await
        .map_err(|e| ApiError::internal(format!("reading from node {}: {e}", client.id)))?;
    if !status.is_success() {
        return Err(ApiError {
            status,
            message: String::from_utf8_lossy(&body).into_owned(),
        });
    }
    let mut out = body.into_response();
    out.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_alloc_dir() {
        let root = FsPath::new("/data/alloc/a1");
        assert_eq!(
            resolve(root, "web/stdout.log").unwrap(),
            root.join("web/stdout.log")
        );
        assert_eq!(resolve(root, "/web/x").unwrap(), root.join("web/x"));
        assert!(resolve(root, "../a2/web/stdout.log").is_err());
        assert!(resolve(root, "web/../../etc/passwd").is_err());
        assert!(resolve(root, "").is_err());
    }
}
