//! The payloads of the `Node.*` calls between client agents and servers: what a client asks
//! and what it is answered, and the limits a registration must respect
//! ([`validate_node`]). Everything here is bincode-safe (no `skip_serializing_if`, `flatten`
//! or untagged enums).
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

/// The most attributes or meta entries a node may carry.
pub const MAX_NODE_ENTRIES: usize = 1024;
/// The longest attribute or meta key.
pub const MAX_KEY_LEN: usize = 256;
/// The longest attribute or meta value.
pub const MAX_VALUE_LEN: usize = 4096;
/// More CPU than any machine has (MHz): 10 THz.
pub const MAX_CPU_MHZ: u64 = 10_000_000;
/// More memory than any machine has (MB): 1 EB.
pub const MAX_MEMORY_MB: u64 = 1 << 40;
/// More disk than any machine has (MB): 1 EB.
pub const MAX_DISK_MB: u64 = 1 << 40;
/// More cores than any machine has.
pub const MAX_CPU_CORES: u32 = 1 << 16;

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
    /// Where its migrating `ephemeral_disk` comes from, when it replaces an allocation of
    /// another node and its group's disk has `migrate` set.
    pub migrate: Option<MigrateFrom>,
}

/// The previous allocation of a migrating disk: its node's HTTP address and the token that
/// node accepts for its data ([`crate::util::migrate`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrateFrom {
    /// The previous allocation.
    pub alloc_id: String,
    /// Its node's HTTP API (`ip:port`).
    pub http_addr: String,
    /// The token, signed with that node's secret.
    pub token: String,
}

/// The answer to `Node.GetClientAllocs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeClientAllocsResponse {
    /// The index to ask with next time.
    pub index: u64,
    /// Every allocation on the node with its `AllocModifyIndex` (the client drops what is
    /// not listed).
    pub alloc_indexes: Vec<(teamster_storage::model::AllocId, u64)>,
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

/// `Node.Evaluate`: evaluate again every job with allocations on a node, and the system
/// jobs that could run there (Nomad's `POST /v1/node/:id/evaluate`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeEvaluateRequest {
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
    /// The drain to start or update (`None`: cancel the drain). Its `Deadline`: < 0 stops
    /// everything at once, 0 means no deadline, > 0 is how long the drain may take.
    pub drain: Option<DrainStrategy>,
    /// When cancelling, make the node eligible again.
    pub mark_eligible: bool,
    /// Operator metadata for the drain's `LastDrain.Meta` (`None`: keep what it holds).
    pub meta: Option<std::collections::BTreeMap<String, String>>,
}

/// The answer to `Node.Deregister`, `Node.Evaluate`, `Node.UpdateEligibility` and
/// `Node.UpdateDrain`: the raft index and the evaluations the change created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeEvalsResponse {
    /// The raft index of the write.
    pub index: u64,
    /// The evaluations created (empty when nothing needs scheduling).
    pub eval_ids: Vec<teamster_storage::model::EvalId>,
}

/// Refuse registrations no real client sends: missing identity, malformed attributes or
/// meta, absurd resources.
pub fn validate_node(node: &Node) -> Result<(), String> {
    let mut errors = Vec::new();
    if let Err(e) = node.validate() {
        errors.push(e.to_string());
    }
    if node.id.len() > 128 {
        errors.push("node ID longer than 128 bytes".into());
    }
    if node.status == NodeStatus::Down {
        errors.push("a node cannot register as down".into());
    }
    for (what, map) in [("attribute", &node.attributes), ("meta", &node.meta)] {
        if map.len() > MAX_NODE_ENTRIES {
            errors.push(format!(
                "{} {what} entries exceed the limit of {MAX_NODE_ENTRIES}",
                map.len()
            ));
        }
        for (k, v) in map {
            if k.is_empty()
                || k.len() > MAX_KEY_LEN
                || k.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                errors.push(format!(
                    "malformed {what} key {:?}: 1 to {MAX_KEY_LEN} bytes without spaces or control characters",
                    truncate(k)
                ));
            }
            if v.len() > MAX_VALUE_LEN || v.chars().any(|c| c.is_control()) {
                errors.push(format!(
                    "malformed {what} value for {:?}: at most {MAX_VALUE_LEN} bytes without control characters",
                    truncate(k)
                ));
            }
        }
    }
    let r = &node.node_resources;
    if r.cpu.cpu_shares == 0 || r.cpu.cpu_shares > MAX_CPU_MHZ {
        errors.push(format!(
            "NodeResources.Cpu.CpuShares {} must be between 1 and {MAX_CPU_MHZ} MHz",
            r.cpu.cpu_shares
        ));
    }
    if r.cpu.total_cpu_cores > MAX_CPU_CORES {
        errors.push(format!(
            "NodeResources.Cpu.TotalCpuCores {} exceeds {MAX_CPU_CORES}",
            r.cpu.total_cpu_cores
        ));
    }
    if r.memory.memory_mb == 0 || r.memory.memory_mb > MAX_MEMORY_MB {
        errors.push(format!(
            "NodeResources.Memory.MemoryMB {} must be between 1 and {MAX_MEMORY_MB}",
            r.memory.memory_mb
        ));
    }
    if r.disk.disk_mb > MAX_DISK_MB {
        errors.push(format!(
            "NodeResources.Disk.DiskMB {} exceeds {MAX_DISK_MB}",
            r.disk.disk_mb
        ));
    }
    let res = &node.reserved_resources;
    if res.cpu.cpu_shares > r.cpu.cpu_shares {
        errors.push(format!(
            "ReservedResources.Cpu.CpuShares {} exceeds the node's {}",
            res.cpu.cpu_shares, r.cpu.cpu_shares
        ));
    }
    if res.memory.memory_mb > r.memory.memory_mb {
        errors.push(format!(
            "ReservedResources.Memory.MemoryMB {} exceeds the node's {}",
            res.memory.memory_mb, r.memory.memory_mb
        ));
    }
    if res.disk.disk_mb > r.disk.disk_mb {
        errors.push(format!(
            "ReservedResources.Disk.DiskMB {} exceeds the node's {}",
            res.disk.disk_mb, r.disk.disk_mb
        ));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("invalid node: {}", errors.join("; ")))
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(40).collect()
}
