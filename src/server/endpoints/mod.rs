//! RPC handlers on the server port: raft traffic handed to openraft, writes forwarded from
//! followers, cluster formation and operator calls. Leader-only calls arriving at a follower
//! are forwarded to the leader once (never redirected back to the caller).

pub mod eval;
pub mod node;
pub mod plan;
#[cfg(test)]
mod tests;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use teamster_storage::raft_types::{ServerAddr, ServerId};

use crate::rpc::{RequestContext, RpcError, RpcHandler, RpcRequest, RpcResponse};
use crate::server::formation::{my_info, Discovered};
use crate::server::raft::{RaftNode, RaftNodeError};
use crate::server::write_batcher::WriteError;

/// How long a membership change forwarded to the leader may take (a joining server catches
/// up before it is promoted).
const MEMBERSHIP_TIMEOUT: Duration = Duration::from_secs(60);

/// The server's RPC handler. The raft node is set once it has started; until then every
/// request is answered `Unsupported`, which callers treat as "not ready, retry".
#[derive(Clone, Default)]
pub struct ServerRpc {
    node: Arc<OnceLock<Arc<RaftNode>>>,
    discovered: Discovered,
    leader_side: Arc<OnceLock<eval::LeaderSide>>,
    nodes: Arc<OnceLock<node::NodeEndpoints>>,
}

impl ServerRpc {
    /// A handler whose node is set later with [`ServerRpc::set_node`].
    pub fn new(discovered: Discovered) -> ServerRpc {
        ServerRpc {
            node: Arc::new(OnceLock::new()),
            discovered,
            leader_side: Arc::new(OnceLock::new()),
            nodes: Arc::new(OnceLock::new()),
        }
    }

    /// Start serving the `Node.*` calls with `endpoints`.
    pub fn set_node_endpoints(&self, endpoints: node::NodeEndpoints) {
        let _ = self.nodes.set(endpoints);
    }

    /// Start serving with `node`.
    pub fn set_node(&self, node: Arc<RaftNode>) {
        let _ = self.node.set(node);
    }

    /// Serve `Eval.*` and `Plan.Submit` from these leader-side subsystems (until set they are
    /// answered "eval broker disabled" / "plan queue is disabled", or forwarded).
    pub fn set_leader_side(&self, side: eval::LeaderSide) {
        let _ = self.leader_side.set(side);
    }
}

impl RpcHandler for ServerRpc {
    fn handle(
        &self,
        ctx: RequestContext,
        req: RpcRequest,
    ) -> BoxFuture<'static, Result<RpcResponse, RpcError>> {
        let node = self.node.get().cloned();
        let discovered = self.discovered.clone();
        let leader_side = self.leader_side.get().cloned();
        let nodes = self.nodes.get().cloned();
        Box::pin(async move {
            if is_node_call(&req) {
                return match nodes {
                    Some(n) => n.handle(req).await,
                    None => Err(RpcError::Unsupported {
                        kind: req.kind().to_string(),
                    }),
                };
            }
            let Some(node) = node else {
                return Err(RpcError::Unsupported {
                    kind: req.kind().to_string(),
                });
            };
            if eval::is_leader_side(&req) {
                return eval::serve(node, leader_side, ctx.from, req).await;
            }
            dispatch(node, discovered, req).await
        })
    }
}

async fn dispatch(
    node: Arc<RaftNode>,
    discovered: Discovered,
    req: RpcRequest,
) -> Result<RpcResponse, RpcError> {
    Ok(match req {
        RpcRequest::AppendEntries(r) => {
            RpcResponse::AppendEntries(node.raft().append_entries(r).await)
        }
        RpcRequest::Vote(r) => RpcResponse::Vote(node.raft().vote(r).await),
        RpcRequest::InstallSnapshot(r) => {
            RpcResponse::InstallSnapshot(node.raft().install_snapshot(r).await)
        }
        RpcRequest::Ping => RpcResponse::Ping {
            server_id: node.id(),
        },
        RpcRequest::ClientWrite(cmd) => RpcResponse::ClientWrite(
            node.write_local(*cmd)
                .await
                .map(|a| (a.index, a.response))
                .map_err(write_error_to_rpc),
        ),
        RpcRequest::ServerInfo => RpcResponse::ServerInfo(my_info(&node, &discovered).await),
        RpcRequest::JoinCluster { id, addr } => {
            RpcResponse::JoinCluster(join(&node, id, addr).await)
        }
        RpcRequest::RemovePeer { id } => RpcResponse::RemovePeer(remove_peer(&node, id).await),
        RpcRequest::ReadIndex => {
            RpcResponse::ReadIndex(node.leader_read_index().await.map_err(node_error_to_rpc))
        }
        // Served by `eval::serve` before dispatching.
        other @ (RpcRequest::EvalDequeue { .. }
        | RpcRequest::EvalAck { .. }
        | RpcRequest::EvalNack { .. }
        | RpcRequest::EvalUpdate { .. }
        | RpcRequest::EvalCreate { .. }
        | RpcRequest::EvalReblock { .. }
        | RpcRequest::PlanSubmit { .. }) => {
            return Err(RpcError::Unsupported {
                kind: other.kind().to_string(),
            })
        }
        other @ (RpcRequest::NodeRegister(_)
        | RpcRequest::NodeUpdateStatus(_)
        | RpcRequest::NodeUpdateAlloc(_)
        | RpcRequest::NodeGetClientAllocs(_)
        | RpcRequest::NodeDeregister(_)
        | RpcRequest::NodeUpdateEligibility(_)
        | RpcRequest::NodeUpdateDrain(_)) => {
            return Err(RpcError::Unsupported {
                kind: other.kind().to_string(),
            })
        }
    })
}

/// The `Node.*` calls, served by [`node::NodeEndpoints`].
fn is_node_call(req: &RpcRequest) -> bool {
    matches!(
        req,
        RpcRequest::NodeRegister(_)
            | RpcRequest::NodeUpdateStatus(_)
            | RpcRequest::NodeUpdateAlloc(_)
            | RpcRequest::NodeGetClientAllocs(_)
            | RpcRequest::NodeDeregister(_)
            | RpcRequest::NodeUpdateEligibility(_)
            | RpcRequest::NodeUpdateDrain(_)
    )
}

/// Add a server, on the leader or forwarded to it.
pub async fn join(node: &RaftNode, id: ServerId, addr: ServerAddr) -> Result<(), RpcError> {
    match node.add_voter(id, addr.clone()).await {
        Err(RaftNodeError::NotLeader {
            leader: Some((leader, laddr)),
        }) => {
            let req = RpcRequest::JoinCluster { id, addr };
            match node
                .pool()
                .call(leader, &laddr.rpc_addr, req, MEMBERSHIP_TIMEOUT)
                .await?
            {
                RpcResponse::JoinCluster(r) => r,
                other => Err(other.unexpected("Operator.JoinCluster")),
            }
        }
        other => other.map_err(node_error_to_rpc),
    }
}

/// Remove a server, on the leader or forwarded to it.
pub async fn remove_peer(node: &RaftNode, id: ServerId) -> Result<(), RpcError> {
    match node.remove_server(id).await {
        Err(RaftNodeError::NotLeader {
            leader: Some((leader, laddr)),
        }) => {
            match node
                .pool()
                .call(
                    leader,
                    &laddr.rpc_addr,
                    RpcRequest::RemovePeer { id },
                    MEMBERSHIP_TIMEOUT,
                )
                .await?
            {
                RpcResponse::RemovePeer(r) => r,
                other => Err(other.unexpected("Operator.RaftRemovePeer")),
            }
        }
        other => other.map_err(node_error_to_rpc),
    }
}

/// A write's failure as it travels back to a forwarding server.
pub fn write_error_to_rpc(e: WriteError) -> RpcError {
    match e {
        WriteError::NotLeader { leader } => RpcError::NotLeader { leader },
        WriteError::NoLeader => RpcError::NotLeader { leader: None },
        other => RpcError::Remote(other.to_string()),
    }
}

fn node_error_to_rpc(e: RaftNodeError) -> RpcError {
    match e {
        RaftNodeError::NotLeader { leader } => RpcError::NotLeader { leader },
        RaftNodeError::NoLeader => RpcError::NotLeader { leader: None },
        RaftNodeError::Rpc(e) => e,
        other => RpcError::Remote(other.to_string()),
    }
}
