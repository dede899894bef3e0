//! Client nodes: the machines that run allocations, as their agents register them.
//!
//! A node's [`ComputedClass`](Node::computed_class) groups nodes that are interchangeable for
//! placement (same datacenter, class, pool and non-unique attributes and meta); the scheduler
//! caches feasibility per class and blocked evaluations are woken per class.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::de;
use crate::model::ids::NodeId;
use crate::model::job::DEFAULT_NODE_POOL;
use crate::model::time::Timestamp;
use crate::model::ModelError;

/// A node's liveness as the servers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum NodeStatus {
    /// Registered, not yet ready for placements.
    #[default]
    #[serde(rename = "initializing")]
    Initializing,
    /// Heartbeating and ready.
    #[serde(rename = "ready")]
    Ready,
    /// Missed its heartbeat; its allocations are lost.
    #[serde(rename = "down")]
    Down,
    /// Missed its heartbeat, but some allocations tolerate a disconnect.
    #[serde(rename = "disconnected")]
    Disconnected,
}

impl NodeStatus {
    /// Nomad's name for the status.
    pub fn as_str(&self) -> &'static str {
        match self {
            NodeStatus::Initializing => "initializing",
            NodeStatus::Ready => "ready",
            NodeStatus::Down => "down",
            NodeStatus::Disconnected => "disconnected",
        }
    }

    /// True for `down` (terminal until the node re-registers).
    pub fn is_terminal(&self) -> bool {
        *self == NodeStatus::Down
    }
}

/// Whether the scheduler may place new work on a node (operators and drains toggle it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum SchedulingEligibility {
    /// New placements allowed.
    #[default]
    #[serde(rename = "eligible")]
    Eligible,
    /// No new placements (existing allocations keep running).
    #[serde(rename = "ineligible")]
    Ineligible,
}

/// CPU a node offers.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeCpuResources {
    /// Total CPU in MHz.
    #[serde(deserialize_with = "de::nullable")]
    pub cpu_shares: u64,
    /// Number of cores.
    #[serde(deserialize_with = "de::nullable")]
    pub total_cpu_cores: u32,
    /// Core ids that may be reserved by tasks.
    #[serde(deserialize_with = "de::nullable")]
    pub reservable_cpu_cores: Vec<u32>,
}

/// Memory a node offers.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeMemoryResources {
    /// Total memory in MB.
    #[serde(rename = "MemoryMB", deserialize_with = "de::nullable")]
    pub memory_mb: u64,
}

/// Disk a node offers.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeDiskResources {
    /// Total disk in MB.
    #[serde(rename = "DiskMB", deserialize_with = "de::nullable")]
    pub disk_mb: u64,
}

/// What a node offers in total (`NodeResources`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeResources {
    /// CPU.
    #[serde(deserialize_with = "de::nullable")]
    pub cpu: NodeCpuResources,
    /// Memory.
    #[serde(deserialize_with = "de::nullable")]
    pub memory: NodeMemoryResources,
    /// Disk.
    #[serde(deserialize_with = "de::nullable")]
    pub disk: NodeDiskResources,
    /// Lowest dynamic port.
    #[serde(deserialize_with = "de::nullable")]
    pub min_dynamic_port: u32,
    /// Highest dynamic port.
    #[serde(deserialize_with = "de::nullable")]
    pub max_dynamic_port: u32,
    /// The node's addresses that ports are reserved on (the first is the default network).
    #[serde(deserialize_with = "de::nullable")]
    pub networks: Vec<NodeNetworkResource>,
}

/// A network a node offers (Nomad's `NetworkResource` in `NodeResources.Networks`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeNetworkResource {
    /// `host`.
    #[serde(deserialize_with = "de::nullable")]
    pub mode: String,
    /// The interface, when known.
    #[serde(deserialize_with = "de::nullable")]
    pub device: String,
    /// The address allocations' ports are bound on.
    #[serde(rename = "IP", deserialize_with = "de::nullable")]
    pub ip: String,
    /// The address as a CIDR (`10.0.0.5/32`).
    #[serde(rename = "CIDR", deserialize_with = "de::nullable")]
    pub cidr: String,
}

/// Host ports a node keeps from allocations (Nomad's `NodeReservedNetworkResources`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeReservedNetworkResources {
    /// Ports and ranges, `22,80,8000-8100`.
    #[serde(deserialize_with = "de::nullable")]
    pub reserved_host_ports: String,
}

/// Parse a port list such as `22,80,8000-8100` (Nomad's `ParsePortRanges`): ports must be
/// 1..=65535 and a range's start at most its end.
pub fn parse_port_ranges(spec: &str) -> Result<Vec<u32>, String> {
    parse_ranges(spec, 1..=65535, "a port")
}

/// Parses a comma-separated list of numbers and `lo-hi` ranges, each number in `bounds`
/// (`what` names one in errors), in the order given.
fn parse_ranges(
    spec: &str,
    bounds: std::ops::RangeInclusive<u32>,
    what: &str,
) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let one = |s: &str| {
            s.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| bounds.contains(n))
                .ok_or_else(|| format!("{s:?} is not {what} ({}-{})", bounds.start(), bounds.end()))
        };
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (one(lo)?, one(hi)?);
                if lo > hi {
                    return Err(format!("range {part:?} ends before it starts"));
                }
                out.extend(lo..=hi);
            }
            None => out.push(one(part)?),
        }
    }
    Ok(out)
}

/// The most cores a cpuset names (Linux's default `NR_CPUS` ceiling).
pub const MAX_CPU_CORE: u32 = 8191;

/// Parses a Linux cpuset (`"0-3,8"`, as in `Cpus_allowed_list` and Nomad's
/// `reserved.cores`) into ascending, distinct core ids.
pub fn parse_cpuset(spec: &str) -> Result<Vec<u32>, String> {
    let mut cores = parse_ranges(spec, 0..=MAX_CPU_CORE, "a core id")?;
    cores.sort_unstable();
    cores.dedup();
    Ok(cores)
}

/// The task variable naming the cores reserved for a task (Nomad's `NOMAD_CPU_CORES`), as a
/// cpuset: drivers pin the task to them.
pub const CPU_CORES_ENV: &str = "NOMAD_CPU_CORES";

/// Writes core ids as a Linux cpuset (`[0, 1, 2, 5]` → `"0-2,5"`).
pub fn format_cpuset(cores: &[u16]) -> String {
    let mut sorted = cores.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

/// CPU held back from scheduling.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeReservedCpuResources {
    /// Reserved CPU in MHz.
    #[serde(deserialize_with = "de::nullable")]
    pub cpu_shares: u64,
    /// Reserved core ids.
    #[serde(deserialize_with = "de::nullable")]
    pub reserved_cpu_cores: Vec<u32>,
}

/// What a node holds back for itself (`ReservedResources`): subtracted before fit checks.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NodeReservedResources {
    /// Reserved CPU.
    #[serde(deserialize_with = "de::nullable")]
    pub cpu: NodeReservedCpuResources,
    /// Reserved memory.
    #[serde(deserialize_with = "de::nullable")]
    pub memory: NodeMemoryResources,
    /// Reserved disk.
    #[serde(deserialize_with = "de::nullable")]
    pub disk: NodeDiskResources,
    /// Reserved host ports.
    #[serde(deserialize_with = "de::nullable")]
    pub networks: NodeReservedNetworkResources,
}

/// A drain in progress: the node is ineligible and its allocations migrate.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DrainStrategy {
    /// How long the drain may take, in nanoseconds (< 0: stop everything at once; 0: no
    /// deadline).
    #[serde(deserialize_with = "de::nullable")]
    pub deadline: i64,
    /// Leave system jobs running.
    #[serde(deserialize_with = "de::nullable")]
    pub ignore_system_jobs: bool,
    /// When remaining allocations are force-stopped (set only for a positive deadline).
    #[serde(deserialize_with = "de::nullable")]
    pub force_deadline: Timestamp,
    /// When the drain began.
    #[serde(deserialize_with = "de::nullable")]
    pub started_at: Timestamp,
}

/// Where a node's last drain stands (Nomad's `DrainStatus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum DrainStatus {
    /// Allocations are being migrated.
    #[default]
    #[serde(rename = "draining")]
    Draining,
    /// Every allocation left the node.
    #[serde(rename = "complete")]
    Complete,
    /// An operator cancelled it.
    #[serde(rename = "canceled")]
    Canceled,
}

impl DrainStatus {
    /// Nomad's name for the status.
    pub fn as_str(&self) -> &'static str {
        match self {
            DrainStatus::Draining => "draining",
            DrainStatus::Complete => "complete",
            DrainStatus::Canceled => "canceled",
        }
    }
}

/// The record of a node's latest drain (Nomad's `DrainMetadata`), kept after it ends.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DrainMetadata {
    /// When it began.
    #[serde(deserialize_with = "de::nullable")]
    pub started_at: Timestamp,
    /// When it last changed.
    #[serde(deserialize_with = "de::nullable")]
    pub updated_at: Timestamp,
    /// Where it stands.
    #[serde(deserialize_with = "de::nullable")]
    pub status: DrainStatus,
    /// The token that started it (empty without ACLs).
    #[serde(rename = "AccessorID", deserialize_with = "de::nullable")]
    pub accessor_id: String,
    /// Operator metadata given with it.
    #[serde(deserialize_with = "de::nullable")]
    pub meta: BTreeMap<String, String>,
}

/// A task driver as fingerprinted on a node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DriverInfo {
    /// Driver attributes (also copied into node attributes as `driver.<name>.*`).
    #[serde(deserialize_with = "de::nullable")]
    pub attributes: BTreeMap<String, String>,
    /// The driver was found.
    #[serde(deserialize_with = "de::nullable")]
    pub detected: bool,
    /// The driver is usable.
    #[serde(deserialize_with = "de::nullable")]
    pub healthy: bool,
    /// Why it is (un)healthy.
    #[serde(deserialize_with = "de::nullable")]
    pub health_description: String,
    /// When it was last fingerprinted.
    #[serde(deserialize_with = "de::nullable")]
    pub update_time: Timestamp,
}

/// A client node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Node {
    /// UUID chosen by the client agent.
    #[serde(rename = "ID", deserialize_with = "de::nullable")]
    pub id: NodeId,
    /// Shared secret of the client (blanked by the HTTP API).
    #[serde(rename = "SecretID", deserialize_with = "de::nullable")]
    pub secret_id: String,
    /// Datacenter.
    #[serde(deserialize_with = "de::nullable")]
    pub datacenter: String,
    /// Node name (host name by default).
    #[serde(deserialize_with = "de::nullable")]
    pub name: String,
    /// `ip:port` of the client's HTTP API.
    #[serde(rename = "HTTPAddr", deserialize_with = "de::nullable")]
    pub http_addr: String,
    /// Whether that API uses TLS.
    #[serde(rename = "TLSEnabled", deserialize_with = "de::nullable")]
    pub tls_enabled: bool,
    /// Fingerprinted attributes (`kernel.name`, `cpu.arch`, `unique.hostname`, …).
    #[serde(deserialize_with = "de::nullable")]
    pub attributes: BTreeMap<String, String>,
    /// What the node offers.
    #[serde(deserialize_with = "de::nullable")]
    pub node_resources: NodeResources,
    /// What it keeps for itself.
    #[serde(deserialize_with = "de::nullable")]
    pub reserved_resources: NodeReservedResources,
    /// Operator metadata.
    #[serde(deserialize_with = "de::nullable")]
    pub meta: BTreeMap<String, String>,
    /// Operator-chosen class.
    #[serde(deserialize_with = "de::nullable")]
    pub node_class: String,
    /// Node pool (default `default`).
    #[serde(deserialize_with = "de::nullable")]
    pub node_pool: String,
    /// Hash of the placement-relevant, non-unique fields: `v1:<u64>`.
    #[serde(deserialize_with = "de::nullable")]
    pub computed_class: String,
    /// A drain in progress, if any.
    pub drain_strategy: Option<DrainStrategy>,
    /// The latest drain, running or ended.
    pub last_drain: Option<DrainMetadata>,
    /// Whether new placements are allowed.
    #[serde(deserialize_with = "de::nullable")]
    pub scheduling_eligibility: SchedulingEligibility,
    /// Liveness.
    #[serde(deserialize_with = "de::nullable")]
    pub status: NodeStatus,
    /// Why the status is what it is.
    #[serde(deserialize_with = "de::nullable")]
    pub status_description: String,
    /// When the status last changed, Unix seconds (Nomad's unit here).
    #[serde(deserialize_with = "de::nullable")]
    pub status_updated_at: i64,
    /// Task drivers by name.
    #[serde(deserialize_with = "de::nullable")]
    pub drivers: BTreeMap<String, DriverInfo>,
    /// The host volumes it offers, by name (`client.host_volume`).
    #[serde(deserialize_with = "de::nullable")]
    pub host_volumes: BTreeMap<String, super::ClientHostVolumeConfig>,
    /// Raft index of the first registration (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub create_index: u64,
    /// Raft index of the last change (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub modify_index: u64,
}

impl Node {
    /// Fills defaults (node pool) and recomputes the computed class. Idempotent.
    pub fn canonicalize(&mut self) {
        if self.node_pool.is_empty() {
            self.node_pool = DEFAULT_NODE_POOL.to_owned();
        }
        self.computed_class = self.compute_class();
    }

    /// Nomad's computed class: a hash of datacenter, node class, node pool and the attributes
    /// and meta whose keys are not in the `unique.` namespace. Stable across processes and
    /// versions (FNV-1a over a length-prefixed encoding).
    pub fn compute_class(&self) -> String {
        let mut h = Fnv64::new();
        h.field(b"Datacenter", self.datacenter.as_bytes());
        h.field(b"NodeClass", self.node_class.as_bytes());
        h.field(b"NodePool", self.node_pool.as_bytes());
        for (name, map) in [
            (&b"Attributes"[..], &self.attributes),
            (&b"Meta"[..], &self.meta),
        ] {
            h.write(name);
            for (k, v) in map.iter().filter(|(k, _)| !k.starts_with("unique.")) {
                h.field(k.as_bytes(), v.as_bytes());
            }
        }
        format!("v1:{}", h.finish())
    }

    /// Whether the scheduler may place new allocations here: ready, eligible, not draining.
    pub fn ready_for_placement(&self) -> bool {
        self.status == NodeStatus::Ready
            && self.scheduling_eligibility == SchedulingEligibility::Eligible
            && self.drain_strategy.is_none()
    }

    /// Checks the fields a registration must carry.
    pub fn validate(&self) -> Result<(), ModelError> {
        let mut errors = Vec::new();
        if self.id.is_empty() {
            errors.push("missing node ID".to_owned());
        }
        if self.datacenter.is_empty() {
            errors.push("missing datacenter".to_owned());
        }
        if self.name.is_empty() {
            errors.push("missing node name".to_owned());
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ModelError::Invalid { errors })
        }
    }
}

/// 64-bit FNV-1a, fed length-prefixed fields so `("ab","c")` and `("a","bc")` differ.
struct Fnv64(u64);

impl Fnv64 {
    fn new() -> Self {
        Fnv64(0xcbf2_9ce4_8422_2325)
    }

    fn write(&mut self, bytes: &[u8]) {
        for len_byte in (bytes.len() as u64).to_le_bytes() {
            self.byte(len_byte);
        }
        for &b in bytes {
            self.byte(b);
        }
    }

    fn byte(&mut self, b: u8) {
        self.0 ^= u64::from(b);
        self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
    }

    fn field(&mut self, key: &[u8], value: &[u8]) {
        self.write(key);
        self.write(value);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, hostname: &str) -> Node {
        let mut n = Node {
            id: NodeId::new(id),
            name: hostname.to_owned(),
            datacenter: "dc1".to_owned(),
            ..Node::default()
        };
        n.attributes.insert("kernel.name".into(), "linux".into());
        n.attributes
            .insert("unique.hostname".into(), hostname.into());
        n.canonicalize();
        n
    }

    #[test]
    fn computed_class_ignores_unique_attributes_only() {
        let a = node("a", "host-a");
        let b = node("b", "host-b");
        assert_eq!(a.computed_class, b.computed_class);
        assert!(a.computed_class.starts_with("v1:"));
        let mut c = node("c", "host-c");
        c.attributes.insert("cpu.arch".into(), "arm64".into());
        c.canonicalize();
        assert_ne!(a.computed_class, c.computed_class);
        let mut d = node("d", "host-d");
        d.node_class = "gpu".into();
        d.canonicalize();
        assert_ne!(a.computed_class, d.computed_class);
    }

    #[test]
    fn placement_readiness_needs_ready_eligible_and_no_drain() {
        let mut n = node("a", "h");
        assert!(!n.ready_for_placement(), "initializing");
        n.status = NodeStatus::Ready;
        assert!(n.ready_for_placement());
        n.drain_strategy = Some(DrainStrategy::default());
        assert!(!n.ready_for_placement());
        n.drain_strategy = None;
        n.scheduling_eligibility = SchedulingEligibility::Ineligible;
        assert!(!n.ready_for_placement());
    }
}
