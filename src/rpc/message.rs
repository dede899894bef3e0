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
//! a [`ServiceError`]).

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use teamster_storage::raft_types::{ServerAddr, ServerId, TypeConfig};

use crate::rpc::service::{ServiceError, ServiceRequest, ServiceResponse};
use crate::rpc::RpcError;

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
///
/// Raft's own traffic and the transport's status calls are variants of their own; every
/// call of the service layer travels as one [`RpcRequest::Service`], whose facts (name,
/// route, deadline) are in the service table ([`crate::rpc::service`]).
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
    /// Cluster formation: who are you, are you in a cluster, whom have you discovered.
    ServerInfo,
    /// Consistent reads on a follower: the leader confirms its leadership with a quorum and
    /// answers the index the follower must reach before reading locally.
    ReadIndex,
    /// A call of the service layer (`Job.*`, `Node.*`, `Eval.*`, `Plan.Submit`,
    /// `Operator.*`), served by the server asked or forwarded by it to the leader.
    Service(ServiceRequest),
    /// Appended: a call of the service layer with the caller's credential (a client agent's
    /// node secret, or an ACL token's secret), checked when ACLs are on.
    AuthService(AuthedService),
    /// Appended: leadership transfer, leader → the follower it hands over to (Raft's
    /// `TimeoutNow`): start an election at once, without waiting for the election timeout.
    TimeoutNow,
    /// Appended: a server without the keyring's key-encryption key asks a peer member for
    /// it by its fingerprint (servers only; the answer is the key's 32 bytes, or `None` if
    /// the peer has none).
    KeyringKek(String),
}

/// A service call and the credential it is made with.
#[derive(Clone, Serialize, Deserialize)]
pub struct AuthedService {
    /// The secret: never logged (the `Debug` form hides it).
    pub token: String,
    /// The call.
    pub call: ServiceRequest,
}

impl std::fmt::Debug for AuthedService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthedService")
            .field("token", &"<redacted>")
            .field("call", &self.call)
            .finish()
    }
}

impl RpcRequest {
    /// The request's name in logs, metrics and errors (Nomad's `Endpoint.Method` style).
    pub fn kind(&self) -> &'static str {
        match self {
            RpcRequest::AppendEntries(_) => "Raft.AppendEntries",
            RpcRequest::Vote(_) => "Raft.Vote",
            RpcRequest::InstallSnapshot(_) => "Raft.InstallSnapshot",
            RpcRequest::Ping => "Status.Ping",
            RpcRequest::ServerInfo => "Status.ServerInfo",
            RpcRequest::ReadIndex => "Status.ReadIndex",
            RpcRequest::Service(call) => call.method().name,
            RpcRequest::AuthService(authed) => authed.call.method().name,
            RpcRequest::TimeoutNow => "Raft.TimeoutNow",
            RpcRequest::KeyringKek(_) => "Keyring.Kek",
        }
    }

    /// Whether the request must name its exact target server. Raft traffic must: a stale or
    /// reused address must be refused, never make a leader replicate to the wrong server (or
    /// to itself). Everything else may be sent by address (target 0): client agents and
    /// joining servers do not know raft ids, and a service call that reaches the wrong
    /// server is answered `NotLeader` or `Disabled`, never served twice.
    pub fn requires_target(&self) -> bool {
        match self {
            RpcRequest::AppendEntries(_)
            | RpcRequest::Vote(_)
            | RpcRequest::InstallSnapshot(_)
            | RpcRequest::ReadIndex
            | RpcRequest::TimeoutNow => true,
            RpcRequest::Ping
            | RpcRequest::ServerInfo
            | RpcRequest::KeyringKek(_)
            | RpcRequest::Service(_)
            | RpcRequest::AuthService(_) => false,
        }
    }

    /// The connection the request travels on.
    pub fn lane(&self) -> Lane {
        match self {
            RpcRequest::InstallSnapshot(_) => Lane::Bulk,
            RpcRequest::AppendEntries(_)
            | RpcRequest::Vote(_)
            | RpcRequest::Ping
            | RpcRequest::ServerInfo
            | RpcRequest::ReadIndex
            | RpcRequest::TimeoutNow
            | RpcRequest::KeyringKek(_)
            | RpcRequest::Service(_)
            | RpcRequest::AuthService(_) => Lane::Control,
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
    /// The answering server's identity and formation state.
    ServerInfo(PeerInfo),
    /// The index to wait for before a consistent local read.
    ReadIndex(Result<u64, ServiceError>),
    /// The service call's answer, or why it was not served.
    Service(Result<ServiceResponse, ServiceError>),
    /// Appended: whether the follower started an election, or why not.
    TimeoutNow(Result<(), ServiceError>),
    /// Appended: the peer's key-encryption key, if it has one.
    KeyringKek(Option<Vec<u8>>),
}

/// What a server says about itself when asked during formation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerInfo {
    /// Its raft id.
    pub id: ServerId,
    /// How to reach it.
    pub addr: ServerAddr,
    /// Whether it belongs to a cluster already (has a membership).
    pub initialized: bool,
    /// The uninitialised servers it has discovered, so discovery spreads through partial
    /// join lists.
    pub discovered: Vec<(ServerId, ServerAddr)>,
}

impl RpcResponse {
    /// The name of the request this answers.
    pub fn kind(&self) -> &'static str {
        match self {
            RpcResponse::AppendEntries(_) => "Raft.AppendEntries",
            RpcResponse::Vote(_) => "Raft.Vote",
            RpcResponse::InstallSnapshot(_) => "Raft.InstallSnapshot",
            RpcResponse::Ping { .. } => "Status.Ping",
            RpcResponse::ServerInfo(_) => "Status.ServerInfo",
            RpcResponse::ReadIndex(_) => "Status.ReadIndex",
            RpcResponse::Service(Ok(answer)) => answer.name(),
            RpcResponse::Service(Err(_)) => "Service",
            RpcResponse::TimeoutNow(_) => "Raft.TimeoutNow",
            RpcResponse::KeyringKek(_) => "Keyring.Kek",
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
    use teamster_storage::fsm::Command;
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
                    payload: EntryPayload::Normal(Command::Batch(vec![]).into()),
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
        let not_leader = ServiceError::NotLeader {
            leader: Some((
                3,
                ServerAddr {
                    name: "s3".into(),
                    rpc_addr: "10.0.0.3:4647".into(),
                    http_addr: "10.0.0.3:4646".into(),
                },
            )),
        };
        match round_trip_response(&Ok(RpcResponse::Service(Err(not_leader.clone())))) {
            Ok(RpcResponse::Service(Err(got))) => assert_eq!(got, not_leader),
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
