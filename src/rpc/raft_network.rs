//! openraft's network on the RPC pool.
//!
//! [`NetworkFactory`] owns a shared [`Pool`]; openraft calls `new_client` often (twice per
//! replication stream, once per peer per election round and per linearizable read), so it
//! only clones the pool handle and the peer's address — it never dials. [`PeerNetwork`] sends
//! each raft RPC to its target *by raft id*, so the server at the other end refuses it if it
//! is not that server, and bounds it by `RPCOption::hard_ttl()`. Snapshot chunks take the
//! bulk lane (see [`Lane`](crate::rpc::Lane)).
//!
//! Errors map onto what openraft expects:
//!
//! | transport outcome                               | openraft error                       |
//! |-------------------------------------------------|--------------------------------------|
//! | refused / reset / EOF / backing off             | `RPCError::Unreachable` (openraft backs off; no log storm) |
//! | no answer within the deadline                   | `RPCError::Timeout` (openraft retries at once) |
//! | the follower's `Err(RaftError)`                 | `RPCError::RemoteError` (with the target's `ServerAddr`)   |
//! | AppendEntries of several entries too large for a frame | `RPCError::PayloadTooLarge` with an entries hint that fits |
//! | anything else (handler failure, wrong response, a snapshot chunk or single entry too large) | `RPCError::Network` |
//!
//! A slow answer is a timeout, not an unreachable peer: openraft's `heartbeat_interval` is
//! also its AppendEntries deadline, and an `Unreachable` makes it stop replicating to that
//! follower for half a second. One append that took longer than a heartbeat (a disk stall on
//! the follower) then cost the leader its last follower's acknowledgements for a whole
//! backoff, twice in a row losing it its lease with one server down. A peer that keeps
//! failing is still backed off: the pool itself refuses calls to it for a while, and that
//! refusal is `Unreachable`.
//!
//! A single entry that cannot fit in a frame can never be replicated; that is logged as an
//! error. Keep commands far below [`RpcConfig::max_frame_len`](crate::rpc::RpcConfig) (the
//! HTTP body limit does) and check `snapshot_max_chunk_size` with
//! [`RpcConfig::validate_for_raft`](crate::rpc::RpcConfig::validate_for_raft).

use openraft::error::{
    InstallSnapshotError, NetworkError, PayloadTooLarge, RPCError, RaftError, RemoteError, Timeout,
    Unreachable,
};
use openraft::network::RPCTypes;
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use teamster_storage::raft_types::{ServerAddr, ServerId, TypeConfig};

use crate::rpc::message::{RpcRequest, RpcResponse};
use crate::rpc::{Pool, RpcError};

/// The raft network factory: hands openraft a [`PeerNetwork`] per target, all sharing one
/// [`Pool`].
#[derive(Debug, Clone)]
pub struct NetworkFactory {
    pool: Pool,
}

impl NetworkFactory {
    /// A factory on `pool`, whose id must be this server's raft id.
    pub fn new(pool: Pool) -> Self {
        Self { pool }
    }

    /// The pool, for the server's own calls (forwarding, join).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerNetwork;

    async fn new_client(&mut self, target: ServerId, node: &ServerAddr) -> PeerNetwork {
        PeerNetwork {
            pool: self.pool.clone(),
            target,
            node: node.clone(),
        }
    }
}

/// openraft's handle on one peer: a target id and address over the shared pool.
#[derive(Debug, Clone)]
pub struct PeerNetwork {
    pool: Pool,
    target: ServerId,
    node: ServerAddr,
}

type RaftRpcError<E = openraft::error::Infallible> =
    RPCError<ServerId, ServerAddr, RaftError<ServerId, E>>;

impl PeerNetwork {
    async fn call(&self, req: RpcRequest, option: &RPCOption) -> Result<RpcResponse, RpcError> {
        self.pool
            .call(self.target, &self.node.rpc_addr, req, option.hard_ttl())
            .await
    }

    fn remote<E: std::error::Error>(&self, e: RaftError<ServerId, E>) -> RaftRpcError<E> {
        RPCError::RemoteError(RemoteError::new_with_node(
            self.target,
            self.node.clone(),
            e,
        ))
    }

    /// Map a transport failure (no raft answer) onto openraft's error.
    fn failed<E: std::error::Error>(&self, kind: &'static str, e: RpcError) -> RaftRpcError<E> {
        if let RpcError::Timeout { after_ms, .. } = &e {
            tracing::debug!(target_id = self.target, kind, error = %e, "raft peer slow to answer");
            return RPCError::Timeout(Timeout {
                action: match kind {
                    "Raft.Vote" => RPCTypes::Vote,
                    "Raft.InstallSnapshot" => RPCTypes::InstallSnapshot,
                    _ => RPCTypes::AppendEntries,
                },
                id: self.pool.my_id(),
                target: self.target,
                timeout: std::time::Duration::from_millis(*after_ms),
            });
        }
        if e.is_transport() {
            tracing::debug!(target_id = self.target, kind, error = %e, "raft peer unreachable");
            RPCError::Unreachable(Unreachable::new(&e))
        } else {
            tracing::warn!(target_id = self.target, kind, error = %e, "raft rpc failed");
            RPCError::Network(NetworkError::new(&e))
        }
    }
}

/// How many of `entries` should fit in one frame, given that all of them took `len` bytes
/// against a `max`: proportional, with a tenth of slack for uneven entry sizes, at least 1
/// and fewer than before.
fn entries_hint(entries: usize, len: u64, max: u64) -> u64 {
    let entries = entries as u64;
    let fit = (u128::from(entries) * u128::from(max) * 9 / 10 / u128::from(len.max(1))) as u64;
    fit.clamp(1, entries.saturating_sub(1).max(1))
}

impl RaftNetwork<TypeConfig> for PeerNetwork {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<ServerId>, RaftRpcError> {
        let entries = rpc.entries.len();
        match self.call(RpcRequest::AppendEntries(rpc), &option).await {
            Ok(RpcResponse::AppendEntries(Ok(resp))) => Ok(resp),
            Ok(RpcResponse::AppendEntries(Err(e))) => Err(self.remote(e)),
            Ok(other) => {
                Err(self.failed("Raft.AppendEntries", other.unexpected("Raft.AppendEntries")))
            }
            Err(e @ RpcError::TooLarge { len, max }) if entries > 1 => {
                let hint = entries_hint(entries, len, max);
                tracing::info!(
                    target_id = self.target,
                    entries,
                    hint,
                    len,
                    max,
                    "AppendEntries too large for one frame; asking openraft for fewer entries"
                );
                Err(RPCError::PayloadTooLarge(
                    PayloadTooLarge::new_entries_hint(hint).with_source_error(&e),
                ))
            }
            Err(e @ RpcError::TooLarge { .. }) => {
                tracing::error!(
                    target_id = self.target,
                    error = %e,
                    "a single raft entry exceeds the rpc frame limit and cannot be replicated"
                );
                Err(RPCError::Network(NetworkError::new(&e)))
            }
            Err(e) => Err(self.failed("Raft.AppendEntries", e)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<ServerId>, RaftRpcError<InstallSnapshotError>> {
        match self.call(RpcRequest::InstallSnapshot(rpc), &option).await {
            Ok(RpcResponse::InstallSnapshot(Ok(resp))) => Ok(resp),
            Ok(RpcResponse::InstallSnapshot(Err(e))) => Err(self.remote(e)),
            Ok(other) => Err(self.failed(
                "Raft.InstallSnapshot",
                other.unexpected("Raft.InstallSnapshot"),
            )),
            Err(e) => Err(self.failed("Raft.InstallSnapshot", e)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<ServerId>,
        option: RPCOption,
    ) -> Result<VoteResponse<ServerId>, RaftRpcError> {
        match self.call(RpcRequest::Vote(rpc), &option).await {
            Ok(RpcResponse::Vote(Ok(resp))) => Ok(resp),
            Ok(RpcResponse::Vote(Err(e))) => Err(self.remote(e)),
            Ok(other) => Err(self.failed("Raft.Vote", other.unexpected("Raft.Vote"))),
            Err(e) => Err(self.failed("Raft.Vote", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_hint_shrinks_proportionally_and_stays_in_range() {
        // Twice too large: a bit under half.
        assert_eq!(entries_hint(100, 2000, 1000), 45);
        // Barely too large: still fewer than before.
        assert_eq!(entries_hint(10, 1001, 1000), 8);
        assert_eq!(entries_hint(2, 1001, 1000), 1);
        // Hugely too large: at least one.
        assert_eq!(entries_hint(300, u64::MAX, 1000), 1);
    }
}
