//! `/v1/operator/raft/*`: the raft configuration and removing a peer.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::Json;
use serde::Serialize;
use teamster_storage::raft_types::ServerId;

use super::error::ApiError;
use super::query::QueryOptions;
use super::HttpContext;
use crate::rpc::RpcError;
use crate::server::endpoints;

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
            node.wait_leader(ctx.config().server.rpc_hold_timeout)
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
/// the raft configuration (on the leader; forwarded there from a follower).
pub async fn remove_peer(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<(), ApiError> {
    let node = ctx.node()?;
    let view = node.membership();
    let id: ServerId = match (q.get("id"), q.get("address")) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                "Must specify only one of 'id' or 'address'",
            ))
        }
        (Some(id), None) => {
            let id: ServerId = id
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid raft id {id:?}")))?;
            if !view.servers.iter().any(|(s, _, _)| *s == id) {
                return Err(ApiError::bad_request(format!(
                    "id {id:?} was not found in the Raft configuration"
                )));
            }
            id
        }
        (None, Some(addr)) => view
            .servers
            .iter()
            .find(|(_, a, _)| a.rpc_addr == *addr)
            .map(|(id, _, _)| *id)
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "address {addr:?} was not found in the Raft configuration"
                ))
            })?,
        (None, None) => {
            return Err(ApiError::bad_request(
                "Must specify either ?id with the server's ID or ?address with IP:port of peer to remove",
            ))
        }
    };
    endpoints::remove_peer(node, id).await.map_err(|e| match e {
        RpcError::NotLeader { .. } => ApiError::no_leader(),
        e => ApiError::internal(e.to_string()),
    })
}
