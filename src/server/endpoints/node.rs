//! The `Node.*` RPC handlers: registration, heartbeats, client allocation updates, the
//! client's blocking query for its allocations, deregistration, eligibility and drains.
//!
//! Writes are served on the leader (its heartbeat timers live there); a follower forwards
//! them once. `Node.GetClientAllocs` is answered by whichever server the client asks, from
//! its local state: the client's `min_index` keeps its view from going backwards.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};
use teamster_storage::fsm::{
    AllocClientUpdate, Command, CommandResponse, EvalUpsert, NodeDeregister, NodeRegister,
    NodeUpdateDrain, NodeUpdateEligibility, NodeUpdateStatus,
};
use teamster_storage::model::{
    ClientStatus, EvalStatus, EvalTrigger, Evaluation, JobType, Node, NodeStatus,
    SchedulingEligibility, Timestamp,
};
use teamster_storage::state::{Snapshot, Table};
use tracing::{debug, info};

use crate::rpc::node_api::{
    ClientAlloc, NodeClientAllocsResponse, NodeDeregisterRequest, NodeGetClientAllocsRequest,
    NodeHeartbeatResponse, NodeRegisterRequest, NodeUpdateAllocRequest, NodeUpdateDrainRequest,
    NodeUpdateEligibilityRequest, NodeUpdateStatusRequest,
};
use crate::rpc::{RpcError, RpcRequest, RpcResponse};
use crate::server::endpoints::write_error_to_rpc;
use crate::server::heartbeat::Heartbeats;
use crate::server::raft::RaftNode;
use crate::util::SharedClock;

/// The longest a client's blocking query may wait.
pub const MAX_CLIENT_ALLOCS_WAIT: Duration = Duration::from_secs(300);
/// How long a call forwarded to the leader may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);
/// The most allocation reports one `Node.UpdateAlloc` may carry.
pub const MAX_ALLOC_UPDATES: usize = 10_000;
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

/// What the node handlers need.
#[derive(Clone)]
pub struct NodeEndpoints {
    node: Arc<RaftNode>,
    heartbeats: Heartbeats,
    clock: SharedClock,
}

impl NodeEndpoints {
    /// Handlers on `node`, resetting `heartbeats`.
    pub fn new(node: Arc<RaftNode>, heartbeats: Heartbeats, clock: SharedClock) -> Self {
        NodeEndpoints {
            node,
            heartbeats,
            clock,
        }
    }

    /// Serve one `Node.*` request (others are answered `Unsupported`).
    pub async fn handle(&self, req: RpcRequest) -> Result<RpcResponse, RpcError> {
        if let RpcRequest::NodeGetClientAllocs(r) = req {
            return Ok(RpcResponse::NodeGetClientAllocs(
                self.get_client_allocs(r).await.map(Box::new),
            ));
        }
        if !self.node.is_leader() {
            return self.forward(req).await;
        }
        Ok(match req {
            RpcRequest::NodeRegister(r) => RpcResponse::NodeRegister(self.register(*r).await),
            RpcRequest::NodeUpdateStatus(r) => {
                RpcResponse::NodeUpdateStatus(self.update_status(r).await)
            }
            RpcRequest::NodeUpdateAlloc(r) => {
                RpcResponse::NodeUpdateAlloc(self.update_alloc(r).await)
            }
            RpcRequest::NodeDeregister(r) => RpcResponse::NodeDeregister(self.deregister(r).await),
            RpcRequest::NodeUpdateEligibility(r) => {
                RpcResponse::NodeUpdateEligibility(self.update_eligibility(r).await)
            }
            RpcRequest::NodeUpdateDrain(r) => {
                RpcResponse::NodeUpdateDrain(self.update_drain(r).await)
            }
            other => {
                return Err(RpcError::Unsupported {
                    kind: other.kind().to_string(),
                })
            }
        })
    }

    async fn forward(&self, req: RpcRequest) -> Result<RpcResponse, RpcError> {
        let Some((id, addr)) = self.node.wait_leader(FORWARD_TIMEOUT).await else {
            return Err(RpcError::NotLeader { leader: None });
        };
        if id == self.node.id() {
            // Became leader meanwhile; the caller retries.
            return Err(RpcError::NotLeader { leader: None });
        }
        self.node
            .pool()
            .call(id, &addr.rpc_addr, req, FORWARD_TIMEOUT)
            .await
    }

    fn now(&self) -> i64 {
        self.clock.now_unix_nanos()
    }

    async fn write(&self, cmd: Command) -> Result<u64, RpcError> {
        let applied = self
            .node
            .write_local(cmd)
            .await
            .map_err(write_error_to_rpc)?;
        if let Some(e) = first_rejection(&applied.response) {
            return Err(RpcError::Rejected(e));
        }
        Ok(applied.index)
    }

    fn ttl(&self, node: &Node) -> Result<Duration, RpcError> {
        self.heartbeats.reset(&node.id).map_err(|_| {
            RpcError::Disabled("heartbeat timers are not running on this server yet".into())
        })
    }

    fn servers(&self) -> Vec<String> {
        self.node
            .membership()
            .servers
            .into_iter()
            .filter(|(_, _, voter)| *voter)
            .map(|(_, addr, _)| addr.rpc_addr)
            .collect()
    }

    async fn register(&self, req: NodeRegisterRequest) -> Result<NodeHeartbeatResponse, RpcError> {
        let mut node = req.node;
        validate_node(&node).map_err(RpcError::Rejected)?;
        node.canonicalize();
        let snapshot = self.node.state().snapshot();
        let existing = snapshot.node_by_id(node.id.as_str()).cloned();
        if let Some(ex) = &existing {
            if !ex.secret_id.is_empty() && ex.secret_id != node.secret_id {
                return Err(RpcError::Rejected(format!(
                    "node {} exists with a different secret ID",
                    node.id
                )));
            }
        }
        let now = self.now();
        node.status_updated_at = now / 1_000_000_000;
        let evals = if should_create_evals(existing.as_ref().map(|n| n.status), node.status) {
            node_evals(&snapshot, &node, now, &mut StdRng::from_entropy())
        } else {
            Vec::new()
        };
        let index = self
            .write(Command::NodeRegister(NodeRegister {
                node: node.clone(),
                evals,
            }))
            .await?;
        let ttl = if node.status == NodeStatus::Down {
            self.heartbeats.remove(&node.id);
            Duration::ZERO
        } else {
            self.ttl(&node)?
        };
        info!(node_id = %node.id, name = %node.name, status = node.status.as_str(), "node registered");
        Ok(NodeHeartbeatResponse {
            index,
            heartbeat_ttl_ms: ttl.as_millis() as u64,
            servers: self.servers(),
        })
    }

    async fn update_status(
        &self,
        req: NodeUpdateStatusRequest,
    ) -> Result<NodeHeartbeatResponse, RpcError> {
        let snapshot = self.node.state().snapshot();
        let Some(node) = snapshot.node_by_id(req.node_id.as_str()).cloned() else {
            return Err(RpcError::Rejected(format!(
                "node {} not found",
                req.node_id
            )));
        };
        let mut index = node.modify_index;
        if node.status != req.status {
            let now = self.now();
            let evals = if should_create_evals(Some(node.status), req.status) {
                node_evals(&snapshot, &node, now, &mut StdRng::from_entropy())
            } else {
                Vec::new()
            };
            debug!(node_id = %node.id, from = node.status.as_str(), to = req.status.as_str(), "node status change");
            index = self
                .write(Command::NodeUpdateStatus(NodeUpdateStatus {
                    node_id: node.id.clone(),
                    status: req.status,
                    updated_at: now / 1_000_000_000,
                    evals,
                }))
                .await?;
        }
        let ttl = if req.status == NodeStatus::Down {
            self.heartbeats.remove(&node.id);
            Duration::ZERO
        } else {
            self.ttl(&node)?
        };
        debug!(node_id = %node.id, ttl_ms = ttl.as_millis() as u64, "heartbeat");
        Ok(NodeHeartbeatResponse {
            index,
            heartbeat_ttl_ms: ttl.as_millis() as u64,
            servers: self.servers(),
        })
    }

    async fn update_alloc(&self, req: NodeUpdateAllocRequest) -> Result<u64, RpcError> {
        if req.allocs.is_empty() {
            return Err(RpcError::Rejected("no allocation updates given".into()));
        }
        if req.allocs.len() > MAX_ALLOC_UPDATES {
            return Err(RpcError::Rejected(format!(
                "{} allocation updates exceed the limit of {MAX_ALLOC_UPDATES}",
                req.allocs.len()
            )));
        }
        let snapshot = self.node.state().snapshot();
        let now = self.now();
        let mut rng = StdRng::from_entropy();
        let mut jobs = BTreeSet::new();
        let mut evals = Vec::new();
        for report in &req.allocs {
            if report.client_status != ClientStatus::Failed {
                continue;
            }
            let Some(alloc) = snapshot.alloc_by_id(report.id.as_str()) else {
                continue;
            };
            if alloc.client_status == ClientStatus::Failed {
                continue;
            }
            let Some(job) = snapshot.job_by_id(alloc.namespace.as_str(), alloc.job_id.as_str())
            else {
                continue;
            };
            if job.stopped() || !jobs.insert((job.namespace.clone(), job.id.clone())) {
                continue;
            }
            evals.push(Evaluation {
                id: crate::util::new_uuid(&mut rng).into(),
                namespace: job.namespace.clone(),
                priority: job.priority,
                eval_type: job.job_type,
                triggered_by: EvalTrigger::AllocFailure,
                job_id: job.id.clone(),
                job_modify_index: job.job_modify_index,
                status: EvalStatus::Pending,
                create_time: now,
                modify_time: now,
                ..Evaluation::default()
            });
        }
        self.write(Command::AllocClientUpdate(AllocClientUpdate {
            allocs: req.allocs,
            evals,
        }))
        .await
    }

    async fn get_client_allocs(
        &self,
        req: NodeGetClientAllocsRequest,
    ) -> Result<NodeClientAllocsResponse, RpcError> {
        let wait = Duration::from_millis(req.wait_ms).min(MAX_CLIENT_ALLOCS_WAIT);
        if req.min_index == 0 {
            return Ok(client_allocs(&self.node.state().snapshot(), &req));
        }
        // Woken only by server-side changes to this node's allocations, not by every write.
        let waited = self
            .node
            .state()
            .wait_node_allocs(&req.node_id, req.min_index, wait, |snapshot| {
                snapshot
                    .allocs_by_node(req.node_id.as_str())
                    .any(|a| a.alloc_modify_index > req.min_index)
            })
            .await
            .map_err(|e| RpcError::Remote(e.to_string()))?;
        Ok(client_allocs(&waited.snapshot, &req))
    }

    async fn deregister(&self, req: NodeDeregisterRequest) -> Result<u64, RpcError> {
        let snapshot = self.node.state().snapshot();
        let Some(node) = snapshot.node_by_id(req.node_id.as_str()).cloned() else {
            return Err(RpcError::Rejected(format!(
                "node {} not found",
                req.node_id
            )));
        };
        let evals = node_evals(&snapshot, &node, self.now(), &mut StdRng::from_entropy());
        let index = self
            .write(Command::NodeDeregister(NodeDeregister {
                node_ids: vec![node.id.clone()],
            }))
            .await?;
        self.heartbeats.remove(&node.id);
        if !evals.is_empty() {
            self.write(Command::EvalUpsert(EvalUpsert { evals }))
                .await?;
        }
        info!(node_id = %node.id, "node deregistered");
        Ok(index)
    }

    async fn update_eligibility(&self, req: NodeUpdateEligibilityRequest) -> Result<u64, RpcError> {
        let snapshot = self.node.state().snapshot();
        let cmd = eligibility_command(&snapshot, req, self.now()).map_err(RpcError::Rejected)?;
        self.write(cmd).await
    }

    async fn update_drain(&self, req: NodeUpdateDrainRequest) -> Result<u64, RpcError> {
        let snapshot = self.node.state().snapshot();
        let cmd = drain_command(&snapshot, req, self.now()).map_err(RpcError::Rejected)?;
        self.write(cmd).await
    }
}

/// The raft command for `Node.UpdateEligibility` (evaluations when a node becomes
/// eligible), or why it is refused.
pub fn eligibility_command(
    snapshot: &Snapshot,
    req: NodeUpdateEligibilityRequest,
    now: i64,
) -> Result<Command, String> {
    let Some(node) = snapshot.node_by_id(req.node_id.as_str()).cloned() else {
        return Err(format!("node {} not found", req.node_id));
    };
    if node.drain_strategy.is_some() && req.eligibility == SchedulingEligibility::Eligible {
        return Err(format!(
            "can not set node {} eligible while it is draining",
            node.id
        ));
    }
    let evals = if req.eligibility == SchedulingEligibility::Eligible
        && node.scheduling_eligibility != SchedulingEligibility::Eligible
    {
        node_evals(snapshot, &node, now, &mut StdRng::from_entropy())
    } else {
        Vec::new()
    };
    Ok(Command::NodeUpdateEligibility(NodeUpdateEligibility {
        node_id: node.id.clone(),
        eligibility: req.eligibility,
        updated_at: now / 1_000_000_000,
        evals,
    }))
}

/// The raft command for `Node.UpdateDrain`: a started drain makes the node ineligible and
/// creates `node-drain` evaluations that migrate its allocations; or why it is refused.
pub fn drain_command(
    snapshot: &Snapshot,
    req: NodeUpdateDrainRequest,
    now: i64,
) -> Result<Command, String> {
    let Some(node) = snapshot.node_by_id(req.node_id.as_str()).cloned() else {
        return Err(format!("node {} not found", req.node_id));
    };
    let mut drain = req.drain;
    let mut evals = Vec::new();
    if let Some(d) = &mut drain {
        if d.deadline < -1 {
            return Err(format!(
                "drain deadline {} must be -1 (none), 0 (force) or positive",
                d.deadline
            ));
        }
        d.started_at = Timestamp::from_unix_nanos(now);
        if d.deadline > 0 {
            d.force_deadline = Timestamp::from_unix_nanos(now.saturating_add(d.deadline));
        }
        evals = node_evals(snapshot, &node, now, &mut StdRng::from_entropy());
        for e in &mut evals {
            e.triggered_by = EvalTrigger::NodeDrain;
        }
    }
    Ok(Command::NodeUpdateDrain(NodeUpdateDrain {
        node_id: node.id.clone(),
        drain_strategy: drain,
        mark_eligible: req.mark_eligible,
        updated_at: now / 1_000_000_000,
        evals,
    }))
}

fn client_allocs(
    snapshot: &Snapshot,
    req: &NodeGetClientAllocsRequest,
) -> NodeClientAllocsResponse {
    let mut alloc_indexes = Vec::new();
    let mut changed = Vec::new();
    for alloc in snapshot.allocs_by_node(req.node_id.as_str()) {
        alloc_indexes.push((alloc.id.to_string(), alloc.alloc_modify_index));
        if alloc.alloc_modify_index > req.min_index {
            changed.push(ClientAlloc {
                alloc: (**alloc).clone(),
                job: snapshot.alloc_job(alloc).cloned(),
            });
        }
    }
    NodeClientAllocsResponse {
        index: snapshot.table_index(Table::Allocs).max(1),
        alloc_indexes,
        changed,
    }
}

fn first_rejection(resp: &CommandResponse) -> Option<String> {
    match resp {
        CommandResponse::Rejected(e) => Some(e.to_string()),
        CommandResponse::Batch(all) => all.iter().find_map(first_rejection),
        _ => None,
    }
}

/// Nomad's `shouldCreateNodeEval` on a status change `from` → `to` (`from` `None`: a new
/// node).
pub fn should_create_evals(from: Option<NodeStatus>, to: NodeStatus) -> bool {
    use NodeStatus::*;
    match (from, to) {
        (_, Down) => from != Some(Down),
        (_, Disconnected) => from != Some(Disconnected),
        (Some(Disconnected), _) => true,
        (None | Some(Initializing) | Some(Down), Ready) => true,
        _ => false,
    }
}

/// Nomad's `createNodeEvals`: one `node-update` evaluation per job with an allocation on the
/// node that may need rescheduling, plus one per non-stopped system job whose datacenters
/// and node pool cover the node.
pub fn node_evals(
    snapshot: &Snapshot,
    node: &Node,
    now: i64,
    rng: &mut dyn RngCore,
) -> Vec<Evaluation> {
    let mut seen = BTreeSet::new();
    let mut evals = Vec::new();
    let mut push = |job: &teamster_storage::model::Job, rng: &mut dyn RngCore| {
        evals.push(Evaluation {
            id: crate::util::new_uuid(rng).into(),
            namespace: job.namespace.clone(),
            priority: job.priority,
            eval_type: job.job_type,
            triggered_by: EvalTrigger::NodeUpdate,
            job_id: job.id.clone(),
            job_modify_index: job.job_modify_index,
            node_id: node.id.clone(),
            node_modify_index: node.modify_index,
            status: EvalStatus::Pending,
            create_time: now,
            modify_time: now,
            ..Evaluation::default()
        });
    };
    for alloc in snapshot.allocs_by_node(node.id.as_str()) {
        let Some(job) = snapshot.job_by_id(alloc.namespace.as_str(), alloc.job_id.as_str()) else {
            continue;
        };
        let skip = match job.job_type {
            JobType::Service => alloc.server_terminal_status() && alloc.client_terminal_status(),
            JobType::Batch => alloc.client_terminal_status(),
            JobType::System | JobType::SysBatch | JobType::Core => true,
        };
        if skip || !seen.insert((job.namespace.clone(), job.id.clone())) {
            continue;
        }
        push(job, rng);
    }
    for job in snapshot.jobs() {
        if job.job_type != JobType::System
            || job.stopped()
            || !crate::scheduler::feasible::node_in_job_scope(job, node)
            || !seen.insert((job.namespace.clone(), job.id.clone()))
        {
            continue;
        }
        push(job, rng);
    }
    evals
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

#[cfg(test)]
mod tests {
    use super::*;
    use teamster_storage::model::{NodeCpuResources, NodeMemoryResources, NodeResources};

    fn good_node() -> Node {
        let mut n = Node {
            id: "5b8f2c3e-1111-4222-8333-444455556666".into(),
            name: "n1".into(),
            datacenter: "dc1".into(),
            status: NodeStatus::Ready,
            node_resources: NodeResources {
                cpu: NodeCpuResources {
                    cpu_shares: 4000,
                    total_cpu_cores: 4,
                    reservable_cpu_cores: vec![0, 1, 2, 3],
                },
                memory: NodeMemoryResources { memory_mb: 8192 },
                ..NodeResources::default()
            },
            ..Node::default()
        };
        n.attributes.insert("kernel.name".into(), "linux".into());
        n
    }

    #[test]
    fn a_sane_node_is_accepted() {
        validate_node(&good_node()).unwrap();
    }

    #[test]
    fn malformed_attributes_are_refused_with_the_key_named() {
        let mut n = good_node();
        n.attributes.insert("bad key".into(), "x".into());
        let e = validate_node(&n).unwrap_err();
        assert!(e.contains("malformed attribute key \"bad key\""), "{e}");
        let mut n = good_node();
        n.meta.insert("rack".into(), "r1\u{0}".into());
        let e = validate_node(&n).unwrap_err();
        assert!(e.contains("malformed meta value for \"rack\""), "{e}");
    }

    #[test]
    fn absurd_resources_are_refused() {
        let mut n = good_node();
        n.node_resources.memory.memory_mb = u64::MAX;
        n.node_resources.cpu.cpu_shares = 0;
        let e = validate_node(&n).unwrap_err();
        assert!(e.contains("MemoryMB"), "{e}");
        assert!(e.contains("CpuShares 0"), "{e}");
        let mut n = good_node();
        n.reserved_resources.memory.memory_mb = 9000;
        assert!(validate_node(&n).unwrap_err().contains("ReservedResources"));
    }

    #[test]
    fn missing_identity_is_refused() {
        let mut n = good_node();
        n.id = "".into();
        n.datacenter.clear();
        let e = validate_node(&n).unwrap_err();
        assert!(e.contains("missing node ID"), "{e}");
        assert!(e.contains("missing datacenter"), "{e}");
    }

    fn job(id: &str, job_type: JobType) -> teamster_storage::model::Job {
        let mut job = teamster_storage::model::Job {
            id: id.into(),
            job_type,
            datacenters: vec!["dc1".into()],
            task_groups: vec![teamster_storage::model::TaskGroup {
                name: "g".into(),
                count: 1,
                tasks: vec![teamster_storage::model::Task {
                    name: "t".into(),
                    driver: "mock".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        job.canonicalize();
        job
    }

    fn state_with_allocs() -> (teamster_storage::state::StateStore, Node) {
        use teamster_storage::fsm::{ApplyPlanResults, JobRegister, NodeRegister};
        use teamster_storage::model::Allocation;
        let store = teamster_storage::state::StateStore::new();
        let mut node = good_node();
        node.canonicalize();
        let mut index = 0;
        let mut apply = |c: Command| {
            index += 1;
            let r = store.apply(index, c);
            assert!(r.rejection().is_none(), "{r:?}");
        };
        apply(Command::NodeRegister(NodeRegister {
            node: node.clone(),
            evals: vec![],
        }));
        for (id, t) in [
            ("web", JobType::Service),
            ("report", JobType::Batch),
            ("done", JobType::Batch),
            ("agent", JobType::System),
            ("elsewhere", JobType::System),
        ] {
            let mut j = job(id, t);
            if id == "elsewhere" {
                j.datacenters = vec!["dc9".into()];
            }
            apply(Command::JobRegister(JobRegister {
                job: j,
                eval: None,
                enforce_index: None,
            }));
        }
        let allocs: Vec<Allocation> = ["web", "report", "done", "agent"]
            .iter()
            .enumerate()
            .map(|(i, j)| Allocation {
                id: format!("a{i}").into(),
                namespace: "default".into(),
                node_id: node.id.clone(),
                job_id: (*j).into(),
                task_group: "g".into(),
                ..Allocation::default()
            })
            .collect();
        apply(Command::ApplyPlanResults(ApplyPlanResults {
            eval_id: "".into(),
            allocs_updated: allocs,
            allocs_stopped: vec![],
            allocs_preempted: vec![],
            evals: vec![],
            ineligible_nodes: vec![],
            updated_at: 0,
        }));
        apply(Command::AllocClientUpdate(
            teamster_storage::fsm::AllocClientUpdate {
                allocs: vec![teamster_storage::fsm::AllocClientReport {
                    id: "a2".into(),
                    client_status: ClientStatus::Complete,
                    client_description: String::new(),
                    task_states: Default::default(),
                    modify_time: 0,
                }],
                evals: vec![],
            },
        ));
        let node = (**store.snapshot().node_by_id(node.id.as_str()).unwrap()).clone();
        (store, node)
    }

    #[test]
    fn node_evals_cover_jobs_with_live_allocs_and_system_jobs_in_scope() {
        let (store, node) = state_with_allocs();
        let mut rng = StdRng::seed_from_u64(1);
        let evals = node_evals(&store.snapshot(), &node, 7, &mut rng);
        let mut jobs: Vec<&str> = evals.iter().map(|e| e.job_id.as_str()).collect();
        jobs.sort();
        // web (service, running), report (batch, not finished), agent (system job in dc1);
        // not "done" (batch, complete) nor "elsewhere" (system job in another datacenter).
        assert_eq!(jobs, vec!["agent", "report", "web"]);
        for e in &evals {
            assert_eq!(e.triggered_by, EvalTrigger::NodeUpdate);
            assert_eq!(e.status, EvalStatus::Pending);
            assert_eq!(e.node_id, node.id);
            assert_eq!(e.node_modify_index, node.modify_index);
        }
    }

    #[test]
    fn a_drain_makes_the_node_ineligible_and_creates_drain_evals() {
        let (store, node) = state_with_allocs();
        let cmd = drain_command(
            &store.snapshot(),
            NodeUpdateDrainRequest {
                node_id: node.id.clone(),
                drain: Some(teamster_storage::model::DrainStrategy {
                    deadline: 60_000_000_000,
                    ..Default::default()
                }),
                mark_eligible: false,
            },
            1_000,
        )
        .unwrap();
        let Command::NodeUpdateDrain(d) = &cmd else {
            panic!("{cmd:?}")
        };
        assert_eq!(d.evals.len(), 3);
        assert!(d
            .evals
            .iter()
            .all(|e| e.triggered_by == EvalTrigger::NodeDrain));
        store.apply(100, cmd);
        let after = store
            .snapshot()
            .node_by_id(node.id.as_str())
            .cloned()
            .unwrap();
        assert_eq!(
            after.scheduling_eligibility,
            SchedulingEligibility::Ineligible
        );
        let strategy = after.drain_strategy.clone().unwrap();
        assert_eq!(
            strategy.force_deadline.unix_nanos(),
            Some(1_000 + 60_000_000_000)
        );
        // Eligible while draining is refused; cancelling with MarkEligible restores it.
        let refused = eligibility_command(
            &store.snapshot(),
            NodeUpdateEligibilityRequest {
                node_id: node.id.clone(),
                eligibility: SchedulingEligibility::Eligible,
            },
            2_000,
        );
        assert!(refused.unwrap_err().contains("while it is draining"));
        let cancel = drain_command(
            &store.snapshot(),
            NodeUpdateDrainRequest {
                node_id: node.id.clone(),
                drain: None,
                mark_eligible: true,
            },
            3_000,
        )
        .unwrap();
        store.apply(101, cancel);
        let after = store
            .snapshot()
            .node_by_id(node.id.as_str())
            .cloned()
            .unwrap();
        assert!(after.drain_strategy.is_none());
        assert_eq!(
            after.scheduling_eligibility,
            SchedulingEligibility::Eligible
        );
    }

    #[test]
    fn evals_follow_nomad_s_status_transitions() {
        use NodeStatus::*;
        assert!(should_create_evals(None, Ready));
        assert!(should_create_evals(Some(Down), Ready));
        assert!(should_create_evals(Some(Initializing), Ready));
        assert!(should_create_evals(Some(Ready), Down));
        assert!(!should_create_evals(Some(Down), Down));
        assert!(!should_create_evals(Some(Ready), Ready));
        assert!(!should_create_evals(None, Initializing));
    }
}
