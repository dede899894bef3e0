//! The bodies of RPC frames: what a caller asks ([`RpcRequest`]) and what a server answers
//! ([`RpcResponse`]).
//!
//! Both are plain externally tagged enums, so bincode can carry them: the variant index is the
//! encoding, which is why variants are only ever **appended**, and why nothing in them uses
//! `skip_serializing_if`, `flatten`, internally tagged or untagged enums. A response variant
//! answers the request variant of the same name. A response frame's body is
//! `Result<RpcResponse, RpcError>`: `Err` when the server could not answer at all (handler
//! failure, unsupported request, response too large), `Ok` with the request's own answer
//! otherwise — and that answer may itself be an error of the request's domain (a raft error,
//! `NotLeader`).

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use teamster_storage::fsm::{Command, CommandResponse};
use teamster_storage::model::{EvalId, Evaluation, Plan, PlanResult};
use teamster_storage::raft_types::{ServerAddr, ServerId, TypeConfig};

use crate::rpc::node_api::{
    NodeClientAllocsResponse, NodeDeregisterRequest, NodeGetClientAllocsRequest,
    NodeHeartbeatResponse, NodeRegisterRequest, NodeUpdateAllocRequest, NodeUpdateDrainRequest,
    NodeUpdateEligibilityRequest, NodeUpdateStatusRequest,
};
use crate::rpc::RpcError;
use crate::server::formation::PeerInfo;

/// Which of a peer's two connections a request travels on.
///
/// Snapshot chunks are megabytes; on their own connection they never queue in front of a
/// heartbeat whose deadline is openraft's `heartbeat_interval`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    /// Heartbeats, AppendEntries, votes, forwarded writes and every other small call.
    Control,
    /// Snapshot transfer.
    Bulk,
}

impl Lane {
    /// A short stable name for logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Lane::Control => "control",
            Lane::Bulk => "bulk",
        }
    }
}

/// A call on the RPC port. Append new variants at the end only.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum RpcRequest {
    /// Raft log replication and heartbeat, leader → follower.
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    /// Raft election, candidate → voter.
    Vote(VoteRequest<ServerId>),
    /// One chunk of a raft snapshot, leader → lagging follower. Travels on [`Lane::Bulk`].
    /// (Encoded by a byte-slice fast path that yields the same bytes as serde's derive.)
    InstallSnapshot(#[serde(with = "snapshot_chunk")] InstallSnapshotRequest<TypeConfig>),
    /// Liveness and identity: answered by the transport itself with the server's raft id, so
    /// a joining server or a client agent can learn whom an address belongs to.
    Ping,
    /// A write forwarded from a follower to the leader, to be proposed through raft.
    ClientWrite(Box<Command>),
    /// Cluster formation: who are you, are you in a cluster, whom have you discovered.
    ServerInfo,
    /// Cluster formation: add this server to your cluster (forwarded to the leader, which adds
    /// it as a learner and promotes it to voter once it caught up).
    JoinCluster {
        /// The joining server's raft id.
        id: ServerId,
        /// How to reach it.
        addr: ServerAddr,
    },
    /// Operator: remove a server from the raft configuration (on the leader).
    RemovePeer {
        /// The raft id to remove.
        id: ServerId,
    },
    /// Consistent reads on a follower: the leader confirms its leadership with a quorum and
    /// answers the index the follower must reach before reading locally.
    ReadIndex,
    /// `Eval.Dequeue`: a worker asks the leader's broker for an evaluation of one of its
    /// scheduler types, waiting up to `timeout_ms`.
    EvalDequeue {
        /// Scheduler types the worker serves.
        schedulers: Vec<String>,
        /// How long the broker may wait for work.
        timeout_ms: u64,
        /// The worker's scheduler version; a mismatch is refused.
        scheduler_version: u32,
    },
    /// `Eval.Ack`: the evaluation was processed.
    EvalAck {
        /// The evaluation.
        eval_id: EvalId,
        /// The delivery token from the dequeue.
        token: String,
    },
    /// `Eval.Nack`: the evaluation failed; redeliver it later.
    EvalNack {
        /// The evaluation.
        eval_id: EvalId,
        /// The delivery token from the dequeue.
        token: String,
    },
    /// `Eval.Update`: the scheduler updates the evaluation it holds (status, failures…).
    EvalUpdate {
        /// The updated evaluation.
        eval: Box<Evaluation>,
        /// The delivery token of the evaluation being processed.
        token: String,
    },
    /// `Eval.Create`: the scheduler creates a follow-up or blocked evaluation.
    EvalCreate {
        /// The new evaluation (its `PreviousEval` is the one being processed).
        eval: Box<Evaluation>,
        /// The delivery token of the evaluation being processed.
        token: String,
    },
    /// `Eval.Reblock`: the scheduler puts a blocked evaluation it dequeued back to blocked.
    EvalReblock {
        /// The evaluation, still blocked.
        eval: Box<Evaluation>,
        /// Its delivery token.
        token: String,
    },
    /// `Plan.Submit`: a worker submits a plan to the leader's plan queue.
    PlanSubmit {
        /// The plan (it carries its evaluation's id and token).
        plan: Box<Plan>,
    },
    /// `Node.Register`: a client registers its node (forwarded to the leader).
    NodeRegister(Box<NodeRegisterRequest>),
    /// `Node.UpdateStatus`: a client's heartbeat (forwarded to the leader).
    NodeUpdateStatus(NodeUpdateStatusRequest),
    /// `Node.UpdateAlloc`: batched client allocation updates (forwarded to the leader).
    NodeUpdateAlloc(NodeUpdateAllocRequest),
    /// `Node.GetClientAllocs`: a client's blocking query for its allocations (answered by
    /// the server asked, from its local state).
    NodeGetClientAllocs(NodeGetClientAllocsRequest),
    /// `Node.Deregister`: remove a node (forwarded to the leader).
    NodeDeregister(NodeDeregisterRequest),
    /// `Node.UpdateEligibility` (forwarded to the leader).
    NodeUpdateEligibility(NodeUpdateEligibilityRequest),
    /// `Node.UpdateDrain` (forwarded to the leader).
    NodeUpdateDrain(NodeUpdateDrainRequest),
}

impl RpcRequest {
    /// The request's name in logs, metrics and errors (Nomad's `Endpoint.Method` style).
    pub fn kind(&self) -> &'static str {
        match self {
            RpcRequest::AppendEntries(_) => "Raft.AppendEntries",
            RpcRequest::Vote(_) => "Raft.Vote",
            RpcRequest::InstallSnapshot(_) => "Raft.InstallSnapshot",
            RpcRequest::Ping => "Status.Ping",
            RpcRequest::ClientWrite(_) => "Raft.ClientWrite",
            RpcRequest::ServerInfo => "Status.ServerInfo",
            RpcRequest::JoinCluster { .. } => "Operator.JoinCluster",
            RpcRequest::RemovePeer { .. } => "Operator.RaftRemovePeer",
            RpcRequest::ReadIndex => "Status.ReadIndex",
            RpcRequest::EvalDequeue { .. } => "Eval.Dequeue",
            RpcRequest::EvalAck { .. } => "Eval.Ack",
            RpcRequest::EvalNack { .. } => "Eval.Nack",
            RpcRequest::EvalUpdate { .. } => "Eval.Update",
            RpcRequest::EvalCreate { .. } => "Eval.Create",
            RpcRequest::EvalReblock { .. } => "Eval.Reblock",
            RpcRequest::PlanSubmit { .. } => "Plan.Submit",
            RpcRequest::NodeRegister(_) => "Node.Register",
            RpcRequest::NodeUpdateStatus(_) => "Node.UpdateStatus",
            RpcRequest::NodeUpdateAlloc(_) => "Node.UpdateAlloc",
            RpcRequest::NodeGetClientAllocs(_) => "Node.GetClientAllocs",
            RpcRequest::NodeDeregister(_) => "Node.Deregister",
            RpcRequest::NodeUpdateEligibility(_) => "Node.UpdateEligibility",
            RpcRequest::NodeUpdateDrain(_) => "Node.UpdateDrain",
        }
    }

    /// Whether the request must name its exact target server. Raft traffic must: a stale or
    /// reused address must be refused, never make a leader replicate to the wrong server (or
    /// to itself). Requests any server can serve (client agents do not know raft ids) may be
    /// sent to target 0.
    pub fn requires_target(&self) -> bool {
        match self {
            RpcRequest::AppendEntries(_)
            | RpcRequest::Vote(_)
            | RpcRequest::InstallSnapshot(_)
            | RpcRequest::ClientWrite(_)
            | RpcRequest::RemovePeer { .. }
            | RpcRequest::ReadIndex
            | RpcRequest::EvalDequeue { .. }
            | RpcRequest::EvalAck { .. }
            | RpcRequest::EvalNack { .. }
            | RpcRequest::EvalUpdate { .. }
            | RpcRequest::EvalCreate { .. }
            | RpcRequest::EvalReblock { .. }
            | RpcRequest::PlanSubmit { .. } => true,
            // A joining server knows its peers only by address.
            RpcRequest::Ping | RpcRequest::ServerInfo | RpcRequest::JoinCluster { .. } => false,
            // Client agents know servers only by address.
            RpcRequest::NodeRegister(_)
            | RpcRequest::NodeUpdateStatus(_)
            | RpcRequest::NodeUpdateAlloc(_)
            | RpcRequest::NodeGetClientAllocs(_)
            | RpcRequest::NodeDeregister(_)
            | RpcRequest::NodeUpdateEligibility(_)
            | RpcRequest::NodeUpdateDrain(_) => false,
        }
    }

    /// The connection the request travels on.
    pub fn lane(&self) -> Lane {
        match self {
            RpcRequest::InstallSnapshot(_) => Lane::Bulk,
            RpcRequest::AppendEntries(_)
            | RpcRequest::Vote(_)
            | RpcRequest::Ping
            | RpcRequest::ClientWrite(_)
            | RpcRequest::ServerInfo
            | RpcRequest::JoinCluster { .. }
            | RpcRequest::RemovePeer { .. }
            | RpcRequest::ReadIndex
            | RpcRequest::EvalDequeue { .. }
            | RpcRequest::EvalAck { .. }
            | RpcRequest::EvalNack { .. }
            | RpcRequest::EvalUpdate { .. }
            | RpcRequest::EvalCreate { .. }
            | RpcRequest::EvalReblock { .. }
            | RpcRequest::PlanSubmit { .. }
            | RpcRequest::NodeRegister(_)
            | RpcRequest::NodeUpdateStatus(_)
            | RpcRequest::NodeUpdateAlloc(_)
            | RpcRequest::NodeGetClientAllocs(_)
            | RpcRequest::NodeDeregister(_)
            | RpcRequest::NodeUpdateEligibility(_)
            | RpcRequest::NodeUpdateDrain(_) => Lane::Control,
        }
    }
}

/// The answer to an [`RpcRequest`] of the same name. Append new variants at the end only.
/// (Not `Clone`: openraft's response types are not.)
#[derive(Debug, Serialize, Deserialize)]
pub enum RpcResponse {
    /// The follower's whole answer, raft errors included.
    AppendEntries(Result<AppendEntriesResponse<ServerId>, RaftError<ServerId>>),
    /// The voter's whole answer, raft errors included.
    Vote(Result<VoteResponse<ServerId>, RaftError<ServerId>>),
    /// The follower's answer to one chunk, raft errors included.
    InstallSnapshot(
        Result<InstallSnapshotResponse<ServerId>, RaftError<ServerId, InstallSnapshotError>>,
    ),
    /// The answering server's raft id.
    Ping {
        /// The raft id of the server that answered.
        server_id: ServerId,
    },
    /// The raft log index the write was committed at and what applying it answered, or why
    /// it was not (e.g. [`RpcError::NotLeader`]).
    ClientWrite(Result<(u64, CommandResponse), RpcError>),
    /// The answering server's identity and formation state.
    ServerInfo(PeerInfo),
    /// Whether the server was added (or already was a voter).
    JoinCluster(Result<(), RpcError>),
    /// Whether the server was removed.
    RemovePeer(Result<(), RpcError>),
    /// The index to wait for before a consistent local read.
    ReadIndex(Result<u64, RpcError>),
    /// An evaluation to process, or `None` when the wait ended without work.
    EvalDequeue(Result<Option<DequeuedEval>, RpcError>),
    /// Whether the ack was accepted.
    EvalAck(Result<(), RpcError>),
    /// Whether the nack was accepted.
    EvalNack(Result<(), RpcError>),
    /// The raft index the update was committed at.
    EvalUpdate(Result<u64, RpcError>),
    /// The raft index the new evaluation was committed at.
    EvalCreate(Result<u64, RpcError>),
    /// The raft index the reblocked evaluation was committed at.
    EvalReblock(Result<u64, RpcError>),
    /// What the plan applier committed.
    PlanSubmit(Result<Box<PlanResult>, RpcError>),
    /// The registration's index and the heartbeat TTL.
    NodeRegister(Result<NodeHeartbeatResponse, RpcError>),
    /// The heartbeat's index and the next TTL.
    NodeUpdateStatus(Result<NodeHeartbeatResponse, RpcError>),
    /// The raft index the updates were committed at.
    NodeUpdateAlloc(Result<u64, RpcError>),
    /// The node's allocations.
    NodeGetClientAllocs(Result<Box<NodeClientAllocsResponse>, RpcError>),
    /// The raft index of the removal.
    NodeDeregister(Result<u64, RpcError>),
    /// The raft index of the change.
    NodeUpdateEligibility(Result<u64, RpcError>),
    /// The raft index of the change.
    NodeUpdateDrain(Result<u64, RpcError>),
}

/// An evaluation handed to a worker by `Eval.Dequeue`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DequeuedEval {
    /// The evaluation.
    pub eval: Evaluation,
    /// The delivery token every later call about it must carry.
    pub token: String,
    /// The index the worker's state must reach before scheduling: the highest
    /// `ModifyIndex` among the job's evaluations.
    pub wait_index: u64,
}

impl RpcResponse {
    /// The name of the request this answers.
    pub fn kind(&self) -> &'static str {
        match self {
            RpcResponse::AppendEntries(_) => "Raft.AppendEntries",
            RpcResponse::Vote(_) => "Raft.Vote",
            RpcResponse::InstallSnapshot(_) => "Raft.InstallSnapshot",
            RpcResponse::Ping { .. } => "Status.Ping",
            RpcResponse::ClientWrite(_) => "Raft.ClientWrite",
            RpcResponse::ServerInfo(_) => "Status.ServerInfo",
            RpcResponse::JoinCluster(_) => "Operator.JoinCluster",
            RpcResponse::RemovePeer(_) => "Operator.RaftRemovePeer",
            RpcResponse::ReadIndex(_) => "Status.ReadIndex",
            RpcResponse::EvalDequeue(_) => "Eval.Dequeue",
            RpcResponse::EvalAck(_) => "Eval.Ack",
            RpcResponse::EvalNack(_) => "Eval.Nack",
            RpcResponse::EvalUpdate(_) => "Eval.Update",
            RpcResponse::EvalCreate(_) => "Eval.Create",
            RpcResponse::EvalReblock(_) => "Eval.Reblock",
            RpcResponse::PlanSubmit(_) => "Plan.Submit",
            RpcResponse::NodeRegister(_) => "Node.Register",
            RpcResponse::NodeUpdateStatus(_) => "Node.UpdateStatus",
            RpcResponse::NodeUpdateAlloc(_) => "Node.UpdateAlloc",
            RpcResponse::NodeGetClientAllocs(_) => "Node.GetClientAllocs",
            RpcResponse::NodeDeregister(_) => "Node.Deregister",
            RpcResponse::NodeUpdateEligibility(_) => "Node.UpdateEligibility",
            RpcResponse::NodeUpdateDrain(_) => "Node.UpdateDrain",
        }
    }

    /// The error for a response that does not answer `request`.
    pub fn unexpected(&self, request: &'static str) -> RpcError {
        RpcError::UnexpectedResponse {
            request: request.to_string(),
            response: self.kind().to_string(),
        }
    }
}

/// A faster codec for a snapshot chunk that puts the same bytes on the wire as openraft's
/// serde derive: bincode writes a `u8` as one raw byte, so a byte sequence and a byte string
/// encode alike. The derive goes through serde one byte at a time (≈ 0.1 s per 3 MiB chunk in
/// a debug build, eating into openraft's `install_snapshot_timeout`); this passes the data
/// as one slice each way.
mod snapshot_chunk {
    use std::fmt;

    use openraft::raft::InstallSnapshotRequest;
    use openraft::{SnapshotMeta, Vote};
    use serde::de::{SeqAccess, Visitor};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use teamster_storage::raft_types::{ServerAddr, ServerId, TypeConfig};

    /// Field for field `InstallSnapshotRequest` (the order is the encoding).
    #[derive(Serialize)]
    struct ChunkRef<'a> {
        vote: &'a Vote<ServerId>,
        meta: &'a SnapshotMeta<ServerId, ServerAddr>,
        offset: u64,
        data: RawBytes<'a>,
        done: bool,
    }

    #[derive(Deserialize)]
    struct ChunkOwned {
        vote: Vote<ServerId>,
        meta: SnapshotMeta<ServerId, ServerAddr>,
        offset: u64,
        data: ByteBuf,
        done: bool,
    }

    struct RawBytes<'a>(&'a [u8]);

    impl Serialize for RawBytes<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_bytes(self.0)
        }
    }

    struct ByteBuf(Vec<u8>);

    impl<'de> Deserialize<'de> for ByteBuf {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer
                .deserialize_byte_buf(ByteBufVisitor)
                .map(ByteBuf)
        }
    }

    struct ByteBufVisitor;

    impl<'de> Visitor<'de> for ByteBufVisitor {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("snapshot chunk bytes")
        }

        fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }

        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            // Never trust a length hint for preallocation beyond a small bound.
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
            while let Some(b) = seq.next_element()? {
                out.push(b);
            }
            Ok(out)
        }
    }

    pub fn serialize<S: Serializer>(
        req: &InstallSnapshotRequest<TypeConfig>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        ChunkRef {
            vote: &req.vote,
            meta: &req.meta,
            offset: req.offset,
            data: RawBytes(&req.data),
            done: req.done,
        }
        .serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<InstallSnapshotRequest<TypeConfig>, D::Error> {
        let c = ChunkOwned::deserialize(deserializer)?;
        Ok(InstallSnapshotRequest {
            vote: c.vote,
            meta: c.meta,
            offset: c.offset,
            data: c.data.0,
            done: c.done,
        })
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Membership, Vote};
    use teamster_storage::raft_types::ServerAddr;

    use super::*;
    use crate::rpc::frame::{decode_body, encode_frame, Header};

    fn log_id(term: u64, index: u64) -> LogId<ServerId> {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    fn round_trip_request(req: &RpcRequest) -> RpcRequest {
        let bytes = encode_frame(&Header::request(1, 1, 2), req, 1 << 20).expect("encode");
        decode_body(&bytes[crate::rpc::frame::LENGTH_PREFIX_LEN + crate::rpc::frame::HEADER_LEN..])
            .expect("decode")
    }

    fn round_trip_response(resp: &Result<RpcResponse, RpcError>) -> Result<RpcResponse, RpcError> {
        let header = Header::response_to(&Header::request(1, 1, 2), 2);
        let bytes = encode_frame(&header, resp, 1 << 20).expect("encode");
        decode_body(&bytes[crate::rpc::frame::LENGTH_PREFIX_LEN + crate::rpc::frame::HEADER_LEN..])
            .expect("decode")
    }

    #[test]
    fn raft_requests_survive_bincode() {
        let membership = Membership::<ServerId, ServerAddr>::new(
            vec![[1u64, 2, 3].into_iter().collect()],
            [1u64, 2, 3]
                .into_iter()
                .map(|id| {
                    (
                        id,
                        ServerAddr {
                            name: format!("s{id}"),
                            rpc_addr: format!("127.0.0.{id}:4647"),
                            http_addr: format!("127.0.0.{id}:4646"),
                        },
                    )
                })
                .collect::<std::collections::BTreeMap<_, _>>(),
        );
        let append = AppendEntriesRequest::<TypeConfig> {
            vote: Vote::new_committed(3, 1),
            prev_log_id: Some(log_id(2, 9)),
            entries: vec![
                Entry {
                    log_id: log_id(3, 10),
                    payload: EntryPayload::Blank,
                },
                Entry {
                    log_id: log_id(3, 11),
                    payload: EntryPayload::Membership(membership),
                },
                Entry {
                    log_id: log_id(3, 12),
                    payload: EntryPayload::Normal(Command::Batch(vec![])),
                },
            ],
            leader_commit: Some(log_id(3, 10)),
        };
        match round_trip_request(&RpcRequest::AppendEntries(append.clone())) {
            RpcRequest::AppendEntries(got) => {
                assert_eq!(got.vote, append.vote);
                assert_eq!(got.prev_log_id, append.prev_log_id);
                assert_eq!(got.entries, append.entries);
                assert_eq!(got.leader_commit, append.leader_commit);
            }
            other => panic!("wrong variant {}", other.kind()),
        }

        let vote = VoteRequest::new(Vote::new(4, 2), Some(log_id(3, 12)));
        match round_trip_request(&RpcRequest::Vote(vote.clone())) {
            RpcRequest::Vote(got) => assert_eq!(got, vote),
            other => panic!("wrong variant {}", other.kind()),
        }
        assert!(matches!(
            round_trip_request(&RpcRequest::Ping),
            RpcRequest::Ping
        ));
    }

    #[test]
    fn responses_with_errors_survive_bincode() {
        let fatal: RaftError<ServerId> = RaftError::Fatal(openraft::error::Fatal::Stopped);
        match round_trip_response(&Ok(RpcResponse::Vote(Err(fatal.clone())))) {
            Ok(RpcResponse::Vote(Err(got))) => assert_eq!(got, fatal),
            other => panic!("got {other:?}"),
        }
        let not_leader = RpcError::NotLeader {
            leader: Some((
                3,
                ServerAddr {
                    name: "s3".into(),
                    rpc_addr: "10.0.0.3:4647".into(),
                    http_addr: "10.0.0.3:4646".into(),
                },
            )),
        };
        match round_trip_response(&Ok(RpcResponse::ClientWrite(Err(not_leader.clone())))) {
            Ok(RpcResponse::ClientWrite(Err(got))) => assert_eq!(got, not_leader),
            other => panic!("got {other:?}"),
        }
        let unsupported = RpcError::Unsupported {
            kind: "Raft.Vote".into(),
        };
        assert_eq!(
            round_trip_response(&Err(unsupported.clone())).expect_err("an error"),
            unsupported
        );
    }

    #[test]
    fn snapshot_chunks_encode_exactly_like_openraft_s_derive() {
        let chunk = InstallSnapshotRequest::<TypeConfig> {
            vote: Vote::new_committed(4, 1),
            meta: openraft::SnapshotMeta {
                last_log_id: Some(log_id(4, 99)),
                last_membership: Default::default(),
                snapshot_id: "4-99-1".into(),
            },
            offset: 3 << 20,
            data: (0..=255u8).cycle().take(70_000).collect(),
            done: false,
        };
        let cfg = crate::rpc::frame::wire_config();
        let derived = bincode::serde::encode_to_vec(&chunk, cfg).expect("encode");
        let ours = bincode::serde::encode_to_vec(RpcRequest::InstallSnapshot(chunk.clone()), cfg)
            .expect("encode");
        // Our encoding is the variant index (2) followed by the derive's bytes.
        assert_eq!(ours[0], 2);
        assert_eq!(&ours[1..], &derived[..]);
        match round_trip_request(&RpcRequest::InstallSnapshot(chunk.clone())) {
            RpcRequest::InstallSnapshot(got) => assert_eq!(got, chunk),
            other => panic!("wrong variant {}", other.kind()),
        }
        // A chunk claiming more bytes than the body holds is an error, not an allocation.
        let mut truncated = ours.clone();
        truncated.truncate(ours.len() - 1000);
        assert!(crate::rpc::frame::decode_body::<RpcRequest>(&truncated).is_err());
    }

    #[test]
    fn variant_indexes_are_the_wire_encoding() {
        // Appending variants keeps these; reordering would break every running cluster.
        let ping =
            bincode::serde::encode_to_vec(&RpcRequest::Ping, crate::rpc::frame::wire_config())
                .expect("encode");
        assert_eq!(ping, vec![3]);
        let pong = bincode::serde::encode_to_vec(
            Ok::<_, RpcError>(RpcResponse::Ping { server_id: 5 }),
            crate::rpc::frame::wire_config(),
        )
        .expect("encode");
        assert_eq!(pong, vec![0, 3, 5]);
    }

    #[test]
    fn raft_traffic_requires_a_target_and_snapshots_take_the_bulk_lane() {
        let vote = RpcRequest::Vote(VoteRequest::new(Vote::new(1, 1), None));
        assert!(vote.requires_target());
        assert_eq!(vote.lane(), Lane::Control);
        assert!(!RpcRequest::Ping.requires_target());
        let chunk = RpcRequest::InstallSnapshot(InstallSnapshotRequest {
            vote: Vote::new_committed(1, 1),
            meta: Default::default(),
            offset: 0,
            data: vec![1, 2, 3],
            done: true,
        });
        assert!(chunk.requires_target());
        assert_eq!(chunk.lane(), Lane::Bulk);
    }
}
