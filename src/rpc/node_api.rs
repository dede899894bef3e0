//! The `Node.*` calls between client agents and servers: what a client asks and what it is
//! answered. Carried inside [`RpcRequest`](crate::rpc::RpcRequest) and
//! [`RpcResponse`](crate::rpc::RpcResponse) variants of the same names, so everything here is
//! bincode-safe (no `skip_serializing_if`, `flatten` or untagged enums).
//!
//! ```text
//!  client ── Node.Register ──────────▶ any server ──forward──▶ leader: raft + heartbeat timer
//!         ◀─ HeartbeatTTL, servers ───
//!         ── Node.UpdateStatus (TTL) ─▶ … same path, resets the timer
//!         ── Node.GetClientAllocs ────▶ the server itself: blocking query on its local state
//!         ── Node.UpdateAlloc (batch) ▶ leader: AllocClientUpdate (+ evals for failures)
//! ```

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use teamster_storage::fsm::AllocClientReport;
use teamster_storage::model::{
    Allocation, DrainStrategy, Job, Node, NodeId, NodeStatus, SchedulingEligibility,
};

/// `Node.Register`: a client registers (or re-registers) its node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRegisterRequest {
    /// The fingerprinted node; `SecretID` must match an existing registration.
    pub node: Node,
}

/// The answer to `Node.Register` and `Node.UpdateStatus`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeHeartbeatResponse {
    /// The raft index the change was committed at (the current node index when nothing
    /// changed).
    pub index: u64,
    /// Heartbeat again within this many milliseconds (0 when the node is now down).
    pub heartbeat_ttl_ms: u64,
    /// RPC addresses of every server, for failover.
    pub servers: Vec<String>,
}

/// `Node.UpdateStatus`: a heartbeat, possibly with a new status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeUpdateStatusRequest {
    /// The node.
    pub node_id: NodeId,
    /// The status the client reports (normally `ready`).
    pub status: NodeStatus,
}

/// `Node.UpdateAlloc`: a batch of client-side allocation updates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeUpdateAllocRequest {
    /// The reports.
    pub allocs: Vec<AllocClientReport>,
}

/// `Node.GetClientAllocs`: a blocking query for the allocations placed on a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeGetClientAllocsRequest {
    /// The node.
    pub node_id: NodeId,
    /// Answer once the servers changed one of the node's allocations after this index (0: at
    /// once).
    pub min_index: u64,
    /// The longest the server waits, in milliseconds.
    pub wait_ms: u64,
}

/// One allocation handed to its client, with the job version it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientAlloc {
    /// The allocation.
    pub alloc: Allocation,
    /// Its job at the allocation's version (`None` if it was garbage-collected); shared
    /// with the state store, so answering costs no copy of the job.
    pub job: Option<Arc<Job>>,
}

/// The answer to `Node.GetClientAllocs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeClientAllocsResponse {
    /// The index to ask with next time.
    pub index: u64,
    /// Every allocation on the node with its `AllocModifyIndex` (the client drops what is
    /// not listed).
    pub alloc_indexes: Vec<(String, u64)>,
    /// The allocations the servers changed after the request's `min_index` (their
    /// `AllocModifyIndex`), in full. A client's own status reports do not bump that index,
    /// so they neither wake the query nor send the allocation back, as in Nomad.
    pub changed: Vec<ClientAlloc>,
}

/// `Node.Deregister`: remove a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeDeregisterRequest {
    /// The node.
    pub node_id: NodeId,
}

/// `Node.UpdateEligibility`: allow or forbid new placements on a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeUpdateEligibilityRequest {
    /// The node.
    pub node_id: NodeId,
    /// The new eligibility.
    pub eligibility: SchedulingEligibility,
}

/// `Node.UpdateDrain`: start or cancel a drain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeUpdateDrainRequest {
    /// The node.
    pub node_id: NodeId,
    /// The drain to start (`None`: cancel the drain).
    pub drain: Option<DrainStrategy>,
    /// When cancelling, make the node eligible again.
    pub mark_eligible: bool,
}
