//! `/v1/operator/raft/*`: the raft configuration and removing a peer.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::Json;
use serde::Serialize;

use super::error::ApiError;
use super::query::QueryOptions;
use super::HttpContext;
use crate::rpc::service::operator::RaftRemovePeerRequest;
use crate::rpc::Services;

/// The raft configuration, Nomad's shape.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct RaftConfigurationResponse {
    servers: Vec<RaftServerResponse>,
    index: u64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct RaftServerResponse {
    #[serde(rename = "ID")]
    id: String,
    node: String,
    address: String,
    leader: bool,
    voter: bool,
    raft_protocol: String,
}

/// `GET /v1/operator/raft/configuration`. Without `stale` it needs a known leader (500 "No
/// cluster leader" otherwise); it then answers from this server's membership, which follows
/// the leader's.
pub async fn raft_configuration(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<RaftConfigurationResponse>, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let node = ctx.node()?;
    let leader = if opts.stale {
        node.leader()
    } else {
        Some(
            node.wait_leader(ctx.agent().rpc_hold_timeout)
                .await
                .ok_or_else(ApiError::no_leader)?,
        )
    };
    let view = node.membership();
    let servers = view
        .servers
        .into_iter()
        .map(|(id, addr, voter)| RaftServerResponse {
            id: id.to_string(),
            node: addr.name.clone(),
            leader: leader.as_ref().is_some_and(|(l, _)| *l == id),
            address: addr.rpc_addr,
            voter,
            raft_protocol: "3".to_string(),
        })
        .collect();
    Ok(Json(RaftConfigurationResponse {
        servers,
        index: view.index,
    }))
}

/// `DELETE /v1/operator/raft/peer?address=ip:port` or `?id=<raft id>`: remove a server from
/// the raft configuration (`Operator.RaftRemovePeer`: the leader resolves the peer in its own
/// configuration, so a follower that has not seen a recent change yet cannot refuse it).
pub async fn remove_peer(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<(), ApiError> {
    let endpoints = ctx.endpoints()?;
    let req = match (q.get("id"), q.get("address")) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "Must specify only one of 'id' or 'address'",
            ))
        }
        (Some(id), None) => RaftRemovePeerRequest::Id(
            id.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid raft id {id:?}")))?,
        ),
        (None, Some(addr)) => RaftRemovePeerRequest::Address(addr.clone()),
        (None, None) => {
            return Err(ApiError::bad_request(
                "Must specify either ?id with the server's ID or ?address with IP:port of peer to remove",
            ))
        }
    };
    endpoints.operator_raft_remove_peer(req).await?;
    Ok(())
}
