//! The openraft type configuration: what a log entry carries, what applying one answers, and
//! how a server is addressed. Membership doubles as the cluster's address book, so a
//! [`ServerAddr`] carries everything another server or a client needs to reach a member.

use std::io::Cursor;

use serde::{Deserialize, Serialize};

use crate::fsm::{Command, CommandResponse};

/// A server's raft id. Stable for the life of its data directory. (Not to be confused with
/// a client node's ID in the domain model, which is a UUID string.)
pub type ServerId = u64;

/// How to reach a server: the raft membership's per-member payload.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerAddr {
    /// The server's name (`name` in the agent config).
    pub name: String,
    /// `ip:port` of the RPC listener (raft, forwarded calls, client agents).
    pub rpc_addr: String,
    /// `ip:port` of the HTTP API.
    pub http_addr: String,
}

openraft::declare_raft_types!(
    /// teamster's raft types: commands in (shared, so the log store's copy of its newest
    /// entries hands them to replication without copying them; serde writes an `Arc<T>` as
    /// the `T`, so the encoding is that of the command), command responses out, servers
    /// addressed by [`ServerAddr`], snapshots as in-memory byte buffers.
    pub TypeConfig:
        D = std::sync::Arc<Command>,
        R = CommandResponse,
        NodeId = ServerId,
        Node = ServerAddr,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
);

/// A raft log entry of teamster.
pub type Entry = openraft::Entry<TypeConfig>;
/// A log id (term, leader, index).
pub type LogId = openraft::LogId<ServerId>;
/// A vote.
pub type Vote = openraft::Vote<ServerId>;
/// The membership as stored in the log and snapshots.
pub type StoredMembership = openraft::StoredMembership<ServerId, ServerAddr>;
/// openraft's storage error, with our node id.
pub type StorageError = openraft::StorageError<ServerId>;
/// The raft handle.
pub type Raft = openraft::Raft<TypeConfig>;
