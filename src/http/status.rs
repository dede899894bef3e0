//! `/v1/status/leader` and `/v1/status/peers`.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::Json;

use super::error::ApiError;
use super::query::QueryOptions;
use super::HttpContext;

/// The leader's RPC address as a JSON string. Without `stale`, waits up to the hold timeout
/// for a leader and answers 500 "No cluster leader" if none appears; with `stale`, answers
/// at once, `""` when no leader is known.
pub async fn leader(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<String>, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let node = ctx.node()?;
    if opts.stale {
        return Ok(Json(
            node.leader().map(|(_, a)| a.rpc_addr).unwrap_or_default(),
        ));
    }
    match node.wait_leader(ctx.agent().rpc_hold_timeout).await {
        Some((_, addr)) => Ok(Json(addr.rpc_addr)),
        None => Err(ApiError::no_leader()),
    }
}

/// The RPC addresses of the voting servers.
pub async fn peers(State(ctx): State<HttpContext>) -> Result<Json<Vec<String>>, ApiError> {
    let node = ctx.node()?;
    let peers = node
        .membership()
        .servers
        .into_iter()
        .filter(|(_, _, voter)| *voter)
        .map(|(_, addr, _)| addr.rpc_addr)
        .collect();
    Ok(Json(peers))
}
