//! `/v1/operator/snapshot`: save the cluster's state to a file and restore it.
//!
//! - `GET` answers a consistent state image (the leader confirms its leadership and names
//!   an index; this server waits until it has applied that far, then encodes its state), as
//!   `application/octet-stream`, with the image's index in `X-Nomad-Index`. `?stale` skips
//!   the leader round-trip and answers this server's local state.
//! - `PUT` takes such an image as the body, checks that it decodes, and hands it to the
//!   service layer (`Operator.SnapshotRestore`), which commits it as one raft entry, so
//!   every server replaces its state at the same log index. The answer names that index.
//!
//! The image is the state store's own format (magic bytes, format version, bincode body),
//! the same bytes raft snapshots carry between servers.

use std::collections::HashMap;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Serialize;
use teamster_storage::state::StateStore;
use tracing::info;

use super::error::ApiError;
use super::query::QueryOptions;
use super::read::{json_write, node_error};
use super::HttpContext;
use crate::rpc::service::operator::SnapshotRestoreRequest;
use crate::rpc::Services;

/// The largest image `PUT` accepts: it travels as one raft entry, which must fit in an RPC
/// frame ([`crate::rpc::MAX_FRAME_LEN_CEILING`]) with room to spare.
pub const MAX_SNAPSHOT_BYTES: usize = 48 << 20;

/// The snapshot route.
pub const PATH: &str = "/v1/operator/snapshot";

/// The snapshot routes, with their own body limit.
pub fn routes() -> Router<HttpContext> {
    Router::new().route(
        PATH,
        get(save)
            .put(restore)
            .layer(DefaultBodyLimit::max(MAX_SNAPSHOT_BYTES)),
    )
}

/// What `PUT /v1/operator/snapshot` answers.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct RestoreResponse {
    /// The raft index the restore was committed at.
    index: u64,
    /// The index of the state the image was saved at.
    snapshot_index: u64,
}

/// `GET /v1/operator/snapshot`.
async fn save(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let node = ctx.node()?;
    let snap = if opts.stale {
        node.state().snapshot()
    } else {
        node.consistent_snapshot().await.map_err(node_error)?
    };
    let index = snap.latest_index();
    let image = tokio::task::spawn_blocking(move || snap.encode_image())
        .await
        .map_err(|e| ApiError::internal(format!("encoding the snapshot: {e}")))?
        .map_err(|e| ApiError::internal(e.to_string()))?;
    info!(index, bytes = image.len(), "snapshot saved");
    metrics::counter!("teamster_snapshot_saves_total").increment(1);
    let mut resp = Body::from(image).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert("X-Nomad-Index", HeaderValue::from(index));
    Ok(resp)
}

/// `PUT /v1/operator/snapshot`: `Operator.SnapshotRestore` (the leader checks the image
/// before it writes it).
async fn restore(State(ctx): State<HttpContext>, body: Bytes) -> Result<Response, ApiError> {
    let endpoints = ctx.endpoints()?;
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "Request body is empty: send the file `operator snapshot save` wrote",
        ));
    }
    // Decoded here too, so the answer can say which index the image was saved at (and a bad
    // file is refused without a round trip to the leader).
    let image = body.to_vec();
    let (image, snapshot_index) = tokio::task::spawn_blocking(move || {
        let index = StateStore::new().restore_image(&image)?;
        Ok::<_, teamster_storage::state::StateError>((image, index))
    })
    .await
    .map_err(|e| ApiError::internal(format!("checking the snapshot: {e}")))?
    .map_err(|e| ApiError::bad_request(format!("invalid snapshot: {e}")))?;
    let bytes = image.len();
    let index = endpoints
        .operator_snapshot_restore(SnapshotRestoreRequest { image })
        .await?;
    info!(index, snapshot_index, bytes, "snapshot restored");
    metrics::counter!("teamster_snapshot_restores_total").increment(1);
    Ok(json_write(
        RestoreResponse {
            index,
            snapshot_index,
        },
        index,
    ))
}
