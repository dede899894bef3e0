//! The plan applier's pure core: verify a plan against the newest state, node by node, and
//! turn the part that fits into the raft command to commit and the result to return. It lives
//! with the schedulers because it is the same kind of code: a pure function of a snapshot,
//! using the fit arithmetic the schedulers rank with.
//!
//! The leader's single plan applier (the async shell around this, with the plan queue and
//! the raft pipeline) calls [`evaluate_plan`] for each dequeued plan with the newest
//! [`Snapshot`] it has and a [`PlanOverlay`] of the plans it already accepted whose commits
//! are not visible in that snapshot yet (pipelining: plan N+1 is checked while N commits).
//!
//! ```text
//!  plan ─▶ evaluate_plan(snapshot, overlay, plan) ─▶ PlanEvaluation ─┬▶ apply_command() ─▶ raft
//!                 ▲                                                  ├▶ plan_result()  ─▶ worker
//!                 └──── overlay.record(&evaluation) ◀────────────────┘   (caller fills
//!                       overlay.release(token) once the snapshot shows it  AllocIndex and
//!                                                                          RefreshIndex)
//! ```
//!
//! Per node (Nomad's `evaluateNodePlan`), in order:
//!
//! 1. Every eviction must name an allocation on the node whose job's priority is at least
//!    ten below the plan's ([`crate::scheduler::preempt`]), else → rejected. (An eviction
//!    of an allocation that has ended meanwhile is dropped from the accepted part.)
//! 2. Only stops or evictions for the node → it fits.
//! 3. A placement naming another node than its key → rejected (malformed plan).
//! 4. The node is missing → rejected. `down` → fits only if every allocation is being marked
//!    `lost`; `disconnected` → only if every one is marked `unknown`; any other status but
//!    `ready` → rejected — unless (5) applies.
//! 5. Every planned allocation updates an allocation already on the node (in-place or
//!    attribute updates) → readiness and eligibility do not matter, and the update fits if the
//!    node stays within capacity or its usage does not grow.
//! 6. Ineligible or draining → rejected.
//! 7. Proposed = the node's non-terminal allocations (snapshot, then the overlay's accepted
//!    plans in order) − the plan's stops and evictions − updated ids + the planned allocations;
//!    it must fit ([`crate::scheduler::fit`], the same arithmetic the scheduler ranks with),
//!    and when a planned allocation holds host ports, no port may be held twice among the
//!    proposed allocations and the node's reserved ports ([`crate::scheduler::ports`]).
//!    The sum starts from the state store's usage of the node
//!    ([`Snapshot::node_usage`]) and looks up only the allocations the overlay or the plan
//!    touch; the node's allocations are walked only for the port check.
//!
//! A rejected node drops that node's whole part (stops included). With `AllAtOnce` any
//! rejection drops everything. A partial result tells the worker to refresh: the caller sets
//! `RefreshIndex` to at least [`PlanEvaluation::refresh_index_floor`] (Nomad: the snapshot's
//! allocs/nodes index) and the commit index.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

use teamster_storage::fsm::ApplyPlanResults;
use teamster_storage::model::{
    AllocId, AllocStop, Allocation, ClientStatus, Deployment, DeploymentStatusUpdate, EvalId,
    Evaluation, NodeId, NodeStatus, Plan, PlanResult, Resources, SchedulingEligibility,
};
use teamster_storage::state::{NodeAllocIds, Snapshot, Table};

use crate::scheduler::fit::{self, Dimension};
use crate::scheduler::{ports, preempt};

/// Why the part of a plan for one node was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RejectReason {
    /// The node is not registered.
    NodeNotFound,
    /// The node is not `ready` (initializing, down, disconnected) for placements.
    NodeNotReady {
        /// Its status.
        status: NodeStatus,
    },
    /// The node is ineligible for new placements, or draining.
    NodeIneligible,
    /// The proposed allocations do not fit.
    Exhausted {
        /// The first dimension over capacity.
        dimension: Dimension,
    },
    /// Two live allocations (or one and the node's reservation) would hold one host port.
    PortCollision {
        /// The port.
        port: u32,
    },
    /// Two live tasks would hold one core, or a task a core the node does not let tasks
    /// reserve.
    CoreUnavailable {
        /// The core.
        core: u16,
    },
    /// A planned allocation names a different node than the plan entry it is in.
    MisplacedAllocation {
        /// The allocation.
        alloc_id: AllocId,
    },
    /// An eviction the plan may not make: the allocation is unknown, on another node, or
    /// its job's priority is not at least ten below the plan's.
    PreemptionRefused {
        /// The allocation.
        alloc_id: AllocId,
    },
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RejectReason::NodeNotFound => f.write_str("node does not exist"),
            RejectReason::NodeNotReady { status } => {
                write!(
                    f,
                    "node is not ready for placements (status {})",
                    status.as_str()
                )
            }
            RejectReason::NodeIneligible => f.write_str("node is not eligible"),
            RejectReason::Exhausted { dimension } => write!(f, "resources exhausted: {dimension}"),
            RejectReason::CoreUnavailable { core } => {
                write!(f, "core {core} is not free on the node")
            }
            RejectReason::PortCollision { port } => {
                write!(f, "network: port collision on host port {port}")
            }
            RejectReason::MisplacedAllocation { alloc_id } => {
                write!(f, "allocation {alloc_id} names another node")
            }
            RejectReason::PreemptionRefused { alloc_id } => {
                write!(f, "allocation {alloc_id} may not be preempted by this plan")
            }
        }
    }
}

/// One refused node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRejection {
    /// The node.
    pub node_id: NodeId,
    /// Why.
    pub reason: RejectReason,
}

/// What [`evaluate_plan`] accepted and refused of a plan.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PlanEvaluation {
    /// The evaluation the plan is for.
    pub eval_id: EvalId,
    /// Accepted stops, per node.
    pub node_update: BTreeMap<NodeId, Vec<AllocStop>>,
    /// Accepted placements and updates, per node.
    pub node_allocation: BTreeMap<NodeId, Vec<Allocation>>,
    /// Accepted evictions, per node.
    pub node_preemptions: BTreeMap<NodeId, Vec<AllocStop>>,
    /// Evaluations to create with the commit (only when some eviction was accepted).
    pub preemption_evals: Vec<Evaluation>,
    /// Refused nodes, in node order.
    pub rejected: Vec<NodeRejection>,
    /// An `AllAtOnce` plan had a refused node, so nothing was accepted.
    pub all_at_once_failed: bool,
    /// The least `RefreshIndex` a partial result may carry: the snapshot's index of the
    /// allocations and nodes tables (the state the rejection was judged on).
    pub refresh_index_floor: u64,
    /// The plan's deployment, committed with whatever part is accepted.
    pub deployment: Option<Deployment>,
    /// The plan's deployment status changes.
    pub deployment_updates: Vec<DeploymentStatusUpdate>,
}

impl PlanEvaluation {
    /// True when some node was refused (the worker must refresh and re-plan).
    pub fn is_partial(&self) -> bool {
        !self.rejected.is_empty()
    }

    /// True when nothing was accepted (nothing to commit).
    pub fn is_no_op(&self) -> bool {
        self.node_update.values().all(Vec::is_empty)
            && self.node_allocation.values().all(Vec::is_empty)
            && self.node_preemptions.values().all(Vec::is_empty)
            && self.deployment.is_none()
            && self.deployment_updates.is_empty()
    }

    /// How many placements and updates were accepted.
    pub fn accepted_allocs(&self) -> usize {
        self.node_allocation.values().map(Vec::len).sum()
    }

    /// Accepted placements, updates, stops and evictions together.
    pub fn change_count(&self) -> usize {
        self.accepted_allocs()
            + self.node_update.values().map(Vec::len).sum::<usize>()
            + self.node_preemptions.values().map(Vec::len).sum::<usize>()
    }

    /// The raft command committing the accepted part. `now` (Unix nanoseconds) stamps the
    /// modify times (and the create time of allocations that have none).
    pub fn apply_command(&self, now: i64) -> ApplyPlanResults {
        let allocs_updated = self
            .node_allocation
            .values()
            .flatten()
            .map(|alloc| {
                let mut alloc = alloc.clone();
                if alloc.create_time == 0 {
                    alloc.create_time = now;
                }
                alloc.modify_time = now;
                alloc
            })
            .collect();
        let stamp = |stops: &BTreeMap<NodeId, Vec<AllocStop>>| -> Vec<AllocStop> {
            stops
                .values()
                .flatten()
                .map(|stop| AllocStop {
                    modify_time: now,
                    ..stop.clone()
                })
                .collect()
        };
        ApplyPlanResults {
            eval_id: self.eval_id.clone(),
            allocs_updated,
            allocs_stopped: stamp(&self.node_update),
            allocs_preempted: stamp(&self.node_preemptions),
            evals: self.preemption_evals.clone(),
            ineligible_nodes: Vec::new(),
            updated_at: now.div_euclid(1_000_000_000),
            deployment: self.deployment.clone(),
            deployment_updates: self.deployment_updates.clone(),
        }
    }

    /// The result to return to the worker. `AllocIndex` and `RefreshIndex` are left 0 for
    /// the caller, who knows the commit index.
    pub fn plan_result(&self) -> PlanResult {
        PlanResult {
            node_update: self.node_update.clone(),
            node_allocation: self.node_allocation.clone(),
            node_preemptions: self.node_preemptions.clone(),
            rejected_nodes: self.rejected.iter().map(|r| r.node_id.clone()).collect(),
            refresh_index: 0,
            alloc_index: 0,
            deployment: self.deployment.clone(),
            deployment_updates: self.deployment_updates.clone(),
        }
    }
}

/// Opaque handle of a plan recorded in a [`PlanOverlay`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OverlayToken(u64);

/// What a live allocation holds on its node: resources and host ports.
#[derive(Debug, Clone, Default, PartialEq)]
struct Held {
    resources: Resources,
    ports: Vec<u32>,
    cores: Vec<u16>,
}

impl Held {
    fn of(alloc: &Allocation) -> Held {
        Held {
            resources: alloc.resources,
            ports: alloc.host_ports().collect(),
            cores: alloc.allocated_resources.cores().collect(),
        }
    }
}

/// One accepted plan's effect on one node.
#[derive(Debug, Clone, Default)]
struct NodeDelta {
    /// Upserted allocations: id, what it holds, still running.
    upserts: Vec<(AllocId, Held, bool)>,
    /// Stopped or evicted allocations.
    stops: Vec<AllocId>,
}

/// The allocations of plans accepted but not yet visible in the applier's snapshot
/// (Nomad applies them optimistically to its snapshot; an overlay keeps the snapshot
/// immutable). Entries are replayed in acceptance order over the snapshot, by allocation
/// id, so a plan that is *also* visible in the snapshot is not counted twice.
#[derive(Debug, Clone, Default)]
pub struct PlanOverlay {
    next: u64,
    /// Per node: accepted plans' deltas in acceptance order.
    nodes: HashMap<NodeId, BTreeMap<u64, NodeDelta>>,
    /// Per plan: the nodes it touched.
    plans: BTreeMap<u64, Vec<NodeId>>,
}

impl PlanOverlay {
    /// An empty overlay.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records an accepted plan; release it once the snapshot the applier evaluates against
    /// contains its commit (or the commit failed).
    pub fn record(&mut self, evaluation: &PlanEvaluation) -> OverlayToken {
        let token = self.next;
        self.next += 1;
        let mut deltas: BTreeMap<NodeId, NodeDelta> = BTreeMap::new();
        for (node, allocs) in &evaluation.node_allocation {
            let delta = deltas.entry(node.clone()).or_default();
            for alloc in allocs {
                delta
                    .upserts
                    .push((alloc.id.clone(), Held::of(alloc), !alloc.terminal_status()));
            }
        }
        for stops in [&evaluation.node_update, &evaluation.node_preemptions] {
            for (node, stops) in stops {
                let delta = deltas.entry(node.clone()).or_default();
                delta.stops.extend(stops.iter().map(|s| s.id.clone()));
            }
        }
        let touched: Vec<NodeId> = deltas.keys().cloned().collect();
        for (node, delta) in deltas {
            self.nodes.entry(node).or_default().insert(token, delta);
        }
        self.plans.insert(token, touched);
        OverlayToken(token)
    }

    /// Forgets a recorded plan. Returns false if it was not recorded.
    pub fn release(&mut self, token: OverlayToken) -> bool {
        let Some(touched) = self.plans.remove(&token.0) else {
            return false;
        };
        for node in touched {
            if let Some(deltas) = self.nodes.get_mut(&node) {
                deltas.remove(&token.0);
                if deltas.is_empty() {
                    self.nodes.remove(&node);
                }
            }
        }
        true
    }

    /// Forgets every recorded plan (e.g. after a snapshot that contains them all).
    pub fn clear(&mut self) {
        self.nodes.clear();
        self.plans.clear();
    }

    /// How many plans are recorded.
    pub fn len(&self) -> usize {
        self.plans.len()
    }

    /// True when no plan is recorded.
    pub fn is_empty(&self) -> bool {
        self.plans.is_empty()
    }

    /// Replays the recorded plans for `node` over its running allocations (and the set of
    /// every allocation id known on it).
    fn apply(&self, node: &NodeId, running: &mut NodeAllocs<'_>) {
        let Some(deltas) = self.nodes.get(node) else {
            return;
        };
        for delta in deltas.values() {
            // The FSM applies a plan's upserts before its stops; so does the replay.
            for (id, held, live) in &delta.upserts {
                running.mark_known(id);
                running.set(id, live.then(|| held.clone()));
            }
            for id in &delta.stops {
                running.set(id, None);
            }
        }
    }
}

/// A node's running allocations as the snapshot, the overlay and the plan leave them. The
/// snapshot's are counted through the state store's node usage, and only the allocations
/// the overlay or the plan touch are looked up, so a node holding many allocations is not
/// walked (unless the plan asks for ports, which are checked against every allocation).
struct NodeAllocs<'a> {
    snapshot: &'a Snapshot,
    node_id: &'a NodeId,
    /// What the snapshot's running allocations on the node take.
    base: Resources,
    /// Touched allocations: what the snapshot runs for each on this node, and what runs now.
    touched: HashMap<AllocId, (Option<Held>, Option<Held>)>,
    /// Allocations the overlay placed on the node (known, whatever the snapshot says).
    upserted: BTreeSet<AllocId>,
    /// The ids of the snapshot's allocations on the node.
    ids: NodeAllocIds<'a>,
}

impl<'a> NodeAllocs<'a> {
    fn new(snapshot: &'a Snapshot, node_id: &'a NodeId) -> Self {
        NodeAllocs {
            snapshot,
            node_id,
            base: snapshot.node_usage(node_id),
            touched: HashMap::new(),
            upserted: BTreeSet::new(),
            ids: snapshot.alloc_ids_on_node(node_id),
        }
    }

    /// The snapshot's allocation `id`, if it is on this node (in any status).
    fn in_snapshot(&self, id: &AllocId) -> Option<&'a Allocation> {
        let snapshot: &'a Snapshot = self.snapshot;
        // Most ids a plan names are new: the node's own few ids answer that cheaply.
        if !self.ids.contains(id.as_str()) {
            return None;
        }
        snapshot
            .alloc_by_id(id)
            .filter(|a| a.node_id == *self.node_id)
            .map(|a| &**a)
    }

    /// Sets what `id` holds now (`None`: not running on the node).
    fn set(&mut self, id: &AllocId, now: Option<Held>) {
        if let Some(entry) = self.touched.get_mut(id) {
            entry.1 = now;
            return;
        }
        let was = self
            .in_snapshot(id)
            .filter(|a| !a.terminal_status())
            .map(Held::of);
        self.touched.insert(id.clone(), (was, now));
    }

    fn mark_known(&mut self, id: &AllocId) {
        self.upserted.insert(id.clone());
    }

    /// True when the allocation is on the node in the snapshot or the overlay put it there.
    fn is_known(&self, id: &AllocId) -> bool {
        self.upserted.contains(id) || self.in_snapshot(id).is_some()
    }

    /// What the running allocations take.
    fn total(&self) -> Resources {
        self.touched.values().fold(self.base, |total, (was, now)| {
            let total = match was {
                Some(held) => fit::subtract(&total, &held.resources),
                None => total,
            };
            match now {
                Some(held) => total.add(&held.resources),
                None => total,
            }
        })
    }

    /// The host ports each running allocation holds.
    fn ports(&self) -> Vec<Vec<u32>> {
        let untouched = self
            .snapshot
            .allocs_by_node(self.node_id)
            .filter(|a| !a.terminal_status() && !self.touched.contains_key(&a.id))
            .map(|a| a.host_ports().collect());
        let touched = self
            .touched
            .values()
            .filter_map(|(_, now)| now.as_ref().map(|h| h.ports.clone()));
        untouched.chain(touched).collect()
    }

    /// Whether `core` was held, before the plan and the overlay, by an allocation they
    /// update (an in-place update keeps its cores).
    fn held_before(&self, core: u16) -> bool {
        self.touched
            .values()
            .any(|(was, _)| was.as_ref().is_some_and(|h| h.cores.contains(&core)))
    }

    /// Every core a running allocation holds, as many times as it is held.
    fn cores(&self) -> Vec<u16> {
        let untouched = self
            .snapshot
            .allocs_by_node(self.node_id)
            .filter(|a| !a.terminal_status() && !self.touched.contains_key(&a.id))
            .flat_map(|a| a.allocated_resources.cores().collect::<Vec<_>>());
        let touched = self
            .touched
            .values()
            .filter_map(|(_, now)| now.as_ref().map(|h| h.cores.clone()))
            .flatten();
        untouched.chain(touched).collect()
    }
}

/// Verifies `plan` against `snapshot` plus `overlay`, node by node (see the module docs).
pub fn evaluate_plan(snapshot: &Snapshot, overlay: &PlanOverlay, plan: &Plan) -> PlanEvaluation {
    let mut evaluation = PlanEvaluation {
        eval_id: plan.eval_id.clone(),
        refresh_index_floor: snapshot.max_index(&[Table::Allocs, Table::Nodes]),
        deployment: plan.deployment.clone(),
        deployment_updates: plan.deployment_updates.clone(),
        ..PlanEvaluation::default()
    };
    let nodes: BTreeSet<&NodeId> = plan
        .node_update
        .keys()
        .chain(plan.node_allocation.keys())
        .chain(plan.node_preemptions.keys())
        .collect();
    for node_id in nodes {
        match evaluate_node(snapshot, overlay, plan, node_id) {
            Ok(()) => {
                if let Some(stops) = plan.node_update.get(node_id).filter(|s| !s.is_empty()) {
                    evaluation
                        .node_update
                        .insert(node_id.clone(), stops.clone());
                }
                if let Some(allocs) = plan.node_allocation.get(node_id).filter(|a| !a.is_empty()) {
                    evaluation
                        .node_allocation
                        .insert(node_id.clone(), allocs.clone());
                }
                // An allocation that ended meanwhile needs no eviction (its status stays).
                let evicts: Vec<AllocStop> = plan
                    .node_preemptions
                    .get(node_id)
                    .into_iter()
                    .flatten()
                    .filter(|e| {
                        snapshot
                            .alloc_by_id(&e.id)
                            .is_some_and(|a| !a.terminal_status())
                    })
                    .cloned()
                    .collect();
                if !evicts.is_empty() {
                    evaluation.node_preemptions.insert(node_id.clone(), evicts);
                }
            }
            Err(reason) => {
                tracing::info!(
                    eval_id = %plan.eval_id,
                    node_id = %node_id,
                    %reason,
                    "plan for node rejected"
                );
                evaluation.rejected.push(NodeRejection {
                    node_id: node_id.clone(),
                    reason,
                });
                if plan.all_at_once {
                    evaluation.node_update.clear();
                    evaluation.node_allocation.clear();
                    evaluation.node_preemptions.clear();
                    evaluation.deployment = None;
                    evaluation.deployment_updates.clear();
                    evaluation.all_at_once_failed = true;
                    break;
                }
            }
        }
    }
    if !evaluation.node_preemptions.is_empty() {
        evaluation.preemption_evals = plan.preemption_evals.clone();
    }
    evaluation
}

/// Nomad's `evaluateNodePlan` for one node.
fn evaluate_node(
    snapshot: &Snapshot,
    overlay: &PlanOverlay,
    plan: &Plan,
    node_id: &NodeId,
) -> Result<(), RejectReason> {
    // Evictions: each of an allocation on this node whose job is at least ten priority
    // points below the plan's (the scheduler's rule, checked against the newest state).
    for evict in plan.node_preemptions.get(node_id).into_iter().flatten() {
        let allowed = snapshot.alloc_by_id(&evict.id).is_some_and(|victim| {
            victim.node_id == *node_id
                && snapshot
                    .alloc_job(victim)
                    .is_some_and(|job| preempt::may_preempt(plan.priority, job.priority))
        });
        if !allowed {
            return Err(RejectReason::PreemptionRefused {
                alloc_id: evict.id.clone(),
            });
        }
    }
    let allocs = plan
        .node_allocation
        .get(node_id)
        .map_or(&[][..], Vec::as_slice);
    if allocs.is_empty() {
        return Ok(());
    }
    if let Some(misplaced) = allocs.iter().find(|a| a.node_id != *node_id) {
        return Err(RejectReason::MisplacedAllocation {
            alloc_id: misplaced.id.clone(),
        });
    }
    let Some(node) = snapshot.node_by_id(node_id) else {
        return Err(RejectReason::NodeNotFound);
    };

    let mut running = NodeAllocs::new(snapshot, node_id);
    overlay.apply(node_id, &mut running);
    let update_only = allocs.iter().all(|a| running.is_known(&a.id));

    if !update_only {
        match node.status {
            NodeStatus::Ready => {}
            NodeStatus::Down if allocs.iter().all(|a| a.client_status == ClientStatus::Lost) => {}
            NodeStatus::Disconnected
                if allocs
                    .iter()
                    .all(|a| a.client_status == ClientStatus::Unknown) => {}
            status => return Err(RejectReason::NodeNotReady { status }),
        }
        if node.status == NodeStatus::Ready
            && (node.scheduling_eligibility == SchedulingEligibility::Ineligible
                || node.drain_strategy.is_some())
        {
            return Err(RejectReason::NodeIneligible);
        }
    }

    let before = running.total();
    let empty = Vec::new();
    for stop in plan
        .node_update
        .get(node_id)
        .unwrap_or(&empty)
        .iter()
        .chain(plan.node_preemptions.get(node_id).unwrap_or(&empty))
    {
        running.set(&stop.id, None);
    }
    for alloc in allocs {
        running.set(
            &alloc.id,
            (!alloc.terminal_status()).then(|| Held::of(alloc)),
        );
    }
    // No host port held twice: the plan's live allocations against each other, the rest of
    // the node's and the ports the node reserves.
    let asks_ports = allocs
        .iter()
        .any(|a| !a.terminal_status() && !a.allocated_resources.shared.ports.is_empty());
    if asks_ports {
        let reserved = ports::node_reserved_ports(node);
        let running_ports = running.ports();
        let held = running_ports
            .iter()
            .map(Vec::as_slice)
            .chain(std::iter::once(reserved.as_slice()));
        if let Some(port) = ports::first_collision(held) {
            return Err(RejectReason::PortCollision { port });
        }
    }
    // No core held twice, and only cores the node lets tasks reserve.
    let asks_cores = allocs
        .iter()
        .any(|a| !a.terminal_status() && a.allocated_resources.tasks.is_some());
    if asks_cores {
        // The plan's own cores must be ones the node lets tasks reserve now (an older
        // allocation keeps what it was given when the node offered more).
        let reservable = fit::reservable_cores(node);
        let asked = allocs
            .iter()
            .filter(|a| !a.terminal_status())
            .flat_map(|a| a.allocated_resources.cores());
        for core in asked {
            if reservable.binary_search(&core).is_err() && !running.held_before(core) {
                return Err(RejectReason::CoreUnavailable { core });
            }
        }
        let mut seen = BTreeSet::new();
        for core in running.cores() {
            if !seen.insert(core) {
                return Err(RejectReason::CoreUnavailable { core });
            }
        }
    }
    let after = running.total();
    match fit::check_fit(&fit::node_capacity(node), &after) {
        Ok(()) => Ok(()),
        Err(_) if update_only && fit::within(&after, &before) => Ok(()),
        Err(dimension) => Err(RejectReason::Exhausted { dimension }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::sync::Arc;
    use teamster_storage::fsm::{Command, JobRegister, NodeRegister, NodeUpdateStatus};
    use teamster_storage::model::{
        DesiredStatus, EvalStatus, Job, JobId, Node, NodeResources, Task, TaskGroup,
    };
    use teamster_storage::state::StateStore;

    struct World {
        store: StateStore,
        index: u64,
        job: Arc<Job>,
        next_alloc: Cell<u64>,
    }

    fn node(n: u64, cpu: u64, mem: u64) -> Node {
        let mut node = Node {
            id: NodeId::new(format!("node-{n}")),
            name: format!("node-{n}"),
            datacenter: "dc1".into(),
            status: NodeStatus::Ready,
            node_resources: NodeResources::default(),
            ..Node::default()
        };
        node.node_resources.cpu.cpu_shares = cpu;
        node.node_resources.memory.memory_mb = mem;
        node.node_resources.cpu.reservable_cpu_cores = vec![0, 1];
        node.canonicalize();
        node
    }

    impl World {
        fn new(nodes: &[(u64, u64)]) -> World {
            let store = StateStore::new();
            let mut index = 0;
            for (i, (cpu, mem)) in nodes.iter().enumerate() {
                index += 1;
                store.apply(
                    index,
                    Command::NodeRegister(NodeRegister {
                        node: node(i as u64, *cpu, *mem),
                        evals: Vec::new(),
                    }),
                );
            }
            let mut job = Job {
                id: JobId::new("web"),
                datacenters: vec!["dc1".into()],
                task_groups: vec![TaskGroup {
                    name: "g".into(),
                    count: 10,
                    tasks: vec![Task {
                        name: "t".into(),
                        driver: "mock".into(),
                        ..Task::default()
                    }],
                    ..TaskGroup::default()
                }]
                .into(),
                ..Job::default()
            };
            job.canonicalize();
            index += 1;
            let eval = Evaluation {
                id: "eval-1".into(),
                namespace: job.namespace.clone(),
                job_id: job.id.clone(),
                status: EvalStatus::Pending,
                ..Evaluation::default()
            };
            store.apply(
                index,
                Command::JobRegister(JobRegister {
                    job: job.clone(),
                    eval: Some(eval),
                    enforce_index: None,
                    tracked_versions: 0,
                }),
            );
            let job = store
                .snapshot()
                .job_by_id("default", "web")
                .unwrap()
                .clone();
            World {
                store,
                index,
                job,
                next_alloc: Cell::new(0),
            }
        }

        fn alloc(&self, node: u64, cpu: u64, mem: u64) -> Allocation {
            let n = self.next_alloc.get() + 1;
            self.next_alloc.set(n);
            Allocation {
                id: AllocId::new(format!("alloc-{n}")),
                namespace: self.job.namespace.clone(),
                eval_id: "eval-1".into(),
                name: format!("web.g[{n}]"),
                node_id: NodeId::new(format!("node-{node}")),
                job_id: self.job.id.clone(),
                job_version: self.job.version,
                task_group: "g".into(),
                resources: Resources {
                    cpu,
                    memory_mb: mem,
                    disk_mb: 0,
                    memory_max_mb: 0,
                    cores: 0,
                },
                ..Allocation::default()
            }
        }

        fn plan(&self, allocs: Vec<Allocation>, stops: Vec<(u64, AllocId)>) -> Plan {
            let mut plan = Plan {
                eval_id: "eval-1".into(),
                job: Some(self.job.clone()),
                ..Plan::default()
            };
            for a in allocs {
                plan.node_allocation
                    .entry(a.node_id.clone())
                    .or_default()
                    .push(a);
            }
            for (node, id) in stops {
                plan.node_update
                    .entry(NodeId::new(format!("node-{node}")))
                    .or_default()
                    .push(AllocStop {
                        id,
                        desired_status: DesiredStatus::Stop,
                        ..AllocStop::default()
                    });
            }
            plan
        }

        fn commit(&mut self, evaluation: &PlanEvaluation) {
            self.index += 1;
            let response = self.store.apply(
                self.index,
                Command::ApplyPlanResults(evaluation.apply_command(1_000)),
            );
            assert!(response.rejection().is_none(), "{response:?}");
        }

        fn apply(&mut self, command: Command) {
            self.index += 1;
            let response = self.store.apply(self.index, command);
            assert!(response.rejection().is_none(), "{response:?}");
        }
    }

    #[test]
    fn fitting_plans_are_accepted_whole_and_commit() {
        let mut w = World::new(&[(1000, 1000), (1000, 1000)]);
        let plan = w.plan(vec![w.alloc(0, 500, 500), w.alloc(1, 1000, 1000)], vec![]);
        let ev = evaluate_plan(&w.store.snapshot(), &PlanOverlay::new(), &plan);
        assert!(!ev.is_partial());
        assert_eq!(ev.accepted_allocs(), 2);
        let result = ev.plan_result();
        assert!(result.full_commit(&plan));
        w.commit(&ev);
        assert_eq!(w.store.snapshot().allocs_by_node("node-0").count(), 1);
    }

    /// `alloc` holding host `ports`.
    fn with_ports(mut alloc: Allocation, ports: &[u32]) -> Allocation {
        alloc.allocated_resources.shared.ports = ports
            .iter()
            .map(|p| teamster_storage::model::AllocatedPortMapping {
                label: format!("p{p}"),
                value: *p,
                ..Default::default()
            })
            .collect();
        alloc
    }

    /// `alloc` whose task `t` holds `cores`.
    fn with_cores(mut alloc: Allocation, cores: &[u16]) -> Allocation {
        let task = teamster_storage::model::AllocatedTaskResources {
            cpu: teamster_storage::model::AllocatedCpuResources {
                cpu_shares: 0,
                reserved_cores: cores.to_vec(),
            },
        };
        alloc.allocated_resources.tasks = Some(Box::new(BTreeMap::from([("t".to_string(), task)])));
        alloc
    }

    #[test]
    fn a_core_held_twice_or_not_reservable_on_a_node_is_rejected() {
        let mut w = World::new(&[(1000, 1000)]);
        let first = with_cores(w.alloc(0, 10, 10), &[0]);
        let ev = evaluate_plan(
            &w.store.snapshot(),
            &PlanOverlay::new(),
            &w.plan(vec![first], vec![]),
        );
        assert!(!ev.is_partial());
        w.commit(&ev);
        for (cores, rejected) in [(&[0u16][..], Some(0)), (&[5], Some(5)), (&[1], None)] {
            let plan = w.plan(vec![with_cores(w.alloc(0, 10, 10), cores)], vec![]);
            let ev = evaluate_plan(&w.store.snapshot(), &PlanOverlay::new(), &plan);
            match rejected {
                Some(core) => assert!(
                    matches!(
                        ev.rejected[0].reason,
                        RejectReason::CoreUnavailable { core: c } if c == core
                    ),
                    "{cores:?}: {:?}",
                    ev.rejected
                ),
                None => assert!(!ev.is_partial(), "{cores:?}: {:?}", ev.rejected),
            }
        }
        // Two in one plan asking for the same core: one of them is refused.
        let plan = w.plan(
            vec![
                with_cores(w.alloc(0, 10, 10), &[1]),
                with_cores(w.alloc(0, 10, 10), &[1]),
            ],
            vec![],
        );
        let ev = evaluate_plan(&w.store.snapshot(), &PlanOverlay::new(), &plan);
        assert!(ev.is_partial());
    }

    #[test]
    fn a_host_port_held_twice_on_a_node_is_rejected() {
        let mut w = World::new(&[(1000, 1000), (1000, 1000)]);
        let existing = with_ports(w.alloc(0, 10, 10), &[8080]);
        let existing_id = existing.id.clone();
        let ev = evaluate_plan(
            &w.store.snapshot(),
            &PlanOverlay::new(),
            &w.plan(vec![existing], vec![]),
        );
        w.commit(&ev);
        // The same port on the same node is refused, on another node it is fine.
        let plan = w.plan(
            vec![
                with_ports(w.alloc(0, 10, 10), &[8080]),
                with_ports(w.alloc(1, 10, 10), &[8080]),
            ],
            vec![],
        );
        let ev = evaluate_plan(&w.store.snapshot(), &PlanOverlay::new(), &plan);
        assert_eq!(
            ev.rejected,
            vec![NodeRejection {
                node_id: "node-0".into(),
                reason: RejectReason::PortCollision { port: 8080 },
            }]
        );
        // Two placements of one plan may not share a port either, even on a fresh node.
        let plan = w.plan(
            vec![
                with_ports(w.alloc(1, 10, 10), &[9000, 9001]),
                with_ports(w.alloc(1, 10, 10), &[9001]),
            ],
            vec![],
        );
        let ev = evaluate_plan(&w.store.snapshot(), &PlanOverlay::new(), &plan);
        assert_eq!(ev.rejected.len(), 1, "{:?}", ev.rejected);
        // A plan that stops the holder frees its port for the replacement.
        let plan = w.plan(
            vec![with_ports(w.alloc(0, 10, 10), &[8080])],
            vec![(0, existing_id)],
        );
        let ev = evaluate_plan(&w.store.snapshot(), &PlanOverlay::new(), &plan);
        assert!(ev.rejected.is_empty(), "{:?}", ev.rejected);
        // An accepted plan not yet in the snapshot holds its port through the overlay.
        let mut overlay = PlanOverlay::new();
        let first = w.plan(vec![with_ports(w.alloc(1, 10, 10), &[7000])], vec![]);
        overlay.record(&evaluate_plan(&w.store.snapshot(), &overlay, &first));
        let second = w.plan(vec![with_ports(w.alloc(1, 10, 10), &[7000])], vec![]);
        let ev = evaluate_plan(&w.store.snapshot(), &overlay, &second);
        assert_eq!(ev.rejected.len(), 1, "{:?}", ev.rejected);
    }

    #[test]
    fn over_capacity_nodes_are_rejected_with_the_dimension() {
        let mut w = World::new(&[(1000, 1000), (1000, 1000)]);
        let existing = w.alloc(0, 600, 100);
        let ev = evaluate_plan(
            &w.store.snapshot(),
            &PlanOverlay::new(),
            &w.plan(vec![existing], vec![]),
        );
        w.commit(&ev);
        let plan = w.plan(vec![w.alloc(0, 500, 100), w.alloc(1, 100, 1001)], vec![]);
        let ev = evaluate_plan(&w.store.snapshot(), &PlanOverlay::new(), &plan);
        assert_eq!(
            ev.rejected,
            vec![
                NodeRejection {
                    node_id: "node-0".into(),
                    reason: RejectReason::Exhausted {
                        dimension: Dimension::Cpu
                    }
                },
                NodeRejection {
                    node_id: "node-1".into(),
                    reason: RejectReason::Exhausted {
                        dimension: Dimension::Memory
                    }
                },
            ]
        );
        assert!(ev.is_no_op());
        assert!(ev.refresh_index_floor > 0);
        assert_eq!(ev.plan_result().rejected_nodes.len(), 2);
    }

    #[test]
    fn planned_stops_make_room_on_the_same_node() {
        let mut w = World::new(&[(1000, 1000)]);
        let old = w.alloc(0, 800, 100);
        let ev = evaluate_plan(
            &w.store.snapshot(),
            &PlanOverlay::new(),
            &w.plan(vec![old.clone()], vec![]),
        );
        w.commit(&ev);
        let without_stop = w.plan(vec![w.alloc(0, 800, 100)], vec![]);
        assert!(
            evaluate_plan(&w.store.snapshot(), &PlanOverlay::new(), &without_stop).is_partial()
        );
        let with_stop = w.plan(vec![w.alloc(0, 800, 100)], vec![(0, old.id.clone())]);
        let ev = evaluate_plan(&w.store.snapshot(), &PlanOverlay::new(), &with_stop);
        assert!(!ev.is_partial());
        w.commit(&ev);
        let snap = w.store.snapshot();
        let running: Vec<_> = snap
            .allocs_by_node("node-0")
            .filter(|a| !a.terminal_status())
            .collect();
        assert_eq!(running.len(), 1);
        assert_ne!(running[0].id, old.id);
    }

    #[test]
    fn partial_plans_keep_the_fitting_nodes_unless_all_at_once() {
        let w = World::new(&[(1000, 1000), (100, 100)]);
        let mut plan = w.plan(vec![w.alloc(0, 500, 10), w.alloc(1, 500, 10)], vec![]);
        let ev = evaluate_plan(&w.store.snapshot(), &PlanOverlay::new(), &plan);
        assert_eq!(ev.accepted_allocs(), 1);
        assert_eq!(ev.rejected.len(), 1);
        assert_eq!(ev.rejected[0].node_id, NodeId::new("node-1"));
        assert!(!ev.plan_result().full_commit(&plan));
        plan.all_at_once = true;
        let ev = evaluate_plan(&w.store.snapshot(), &PlanOverlay::new(), &plan);
        assert!(ev.all_at_once_failed);
        assert!(ev.is_no_op());
    }

    #[test]
    fn node_status_and_eligibility_gate_new_placements() {
        let mut w = World::new(&[(1000, 1000), (1000, 1000), (1000, 1000)]);
        let running = w.alloc(2, 100, 100);
        let ev = evaluate_plan(
            &w.store.snapshot(),
            &PlanOverlay::new(),
            &w.plan(vec![running.clone()], vec![]),
        );
        w.commit(&ev);
        w.apply(Command::NodeUpdateStatus(NodeUpdateStatus {
            node_id: "node-0".into(),
            status: NodeStatus::Down,
            updated_at: 1,
            evals: Vec::new(),
        }));
        w.apply(Command::NodeUpdateEligibility(
            teamster_storage::fsm::NodeUpdateEligibility {
                node_id: "node-1".into(),
                eligibility: SchedulingEligibility::Ineligible,
                updated_at: 1,
                evals: Vec::new(),
            },
        ));
        w.apply(Command::NodeUpdateEligibility(
            teamster_storage::fsm::NodeUpdateEligibility {
                node_id: "node-2".into(),
                eligibility: SchedulingEligibility::Ineligible,
                updated_at: 1,
                evals: Vec::new(),
            },
        ));
        let mut inplace = running.clone();
        inplace.desired_description = "updated in place".into();
        let plan = w.plan(
            vec![
                w.alloc(0, 100, 100),
                w.alloc(1, 100, 100),
                inplace,
                w.alloc(5, 1, 1),
            ],
            vec![],
        );
        let ev = evaluate_plan(&w.store.snapshot(), &PlanOverlay::new(), &plan);
        let reasons: Vec<_> = ev.rejected.iter().map(|r| r.reason.clone()).collect();
        assert_eq!(
            reasons,
            vec![
                RejectReason::NodeNotReady {
                    status: NodeStatus::Down
                },
                RejectReason::NodeIneligible,
                RejectReason::NodeNotFound,
            ]
        );
        assert_eq!(
            ev.node_allocation.keys().collect::<Vec<_>>(),
            vec![&NodeId::new("node-2")],
            "in-place updates ignore eligibility"
        );
        assert!(ev.rejected[0].reason.to_string().contains("not ready"));
    }

    #[test]
    fn evict_only_parts_always_fit_and_misplaced_allocations_are_refused() {
        let mut w = World::new(&[(1000, 1000)]);
        let a = w.alloc(0, 100, 100);
        let ev = evaluate_plan(
            &w.store.snapshot(),
            &PlanOverlay::new(),
            &w.plan(vec![a.clone()], vec![]),
        );
        w.commit(&ev);
        w.apply(Command::NodeUpdateStatus(NodeUpdateStatus {
            node_id: "node-0".into(),
            status: NodeStatus::Down,
            updated_at: 1,
            evals: Vec::new(),
        }));
        let mut stop_plan = w.plan(vec![], vec![(0, a.id.clone())]);
        stop_plan
            .node_update
            .get_mut(&NodeId::new("node-0"))
            .unwrap()[0]
            .client_status = Some(ClientStatus::Lost);
        let ev = evaluate_plan(&w.store.snapshot(), &PlanOverlay::new(), &stop_plan);
        assert!(!ev.is_partial());
        w.commit(&ev);
        assert_eq!(
            w.store.snapshot().alloc_by_id(&a.id).unwrap().client_status,
            ClientStatus::Lost
        );
        let mut misplaced = w.plan(vec![w.alloc(0, 1, 1)], vec![]);
        let entry = misplaced
            .node_allocation
            .remove(&NodeId::new("node-0"))
            .unwrap();
        misplaced.node_allocation.insert("node-9".into(), entry);
        let ev = evaluate_plan(&w.store.snapshot(), &PlanOverlay::new(), &misplaced);
        assert!(matches!(
            ev.rejected[0].reason,
            RejectReason::MisplacedAllocation { .. }
        ));
    }

    #[test]
    fn evictions_are_rechecked_against_the_newest_state() {
        let mut w = World::new(&[(1000, 1000), (1000, 1000)]);
        // The job runs at priority 50; its 800 MHz allocation fills node 0.
        let victim = w.alloc(0, 800, 100);
        let ended = w.alloc(1, 100, 100);
        let ev = evaluate_plan(
            &w.store.snapshot(),
            &PlanOverlay::new(),
            &w.plan(vec![victim.clone(), ended.clone()], vec![]),
        );
        w.commit(&ev);
        let evicting = |w: &World, priority: u32, node: u64, id: &AllocId| {
            let newcomer = w.alloc(node, 800, 100);
            let mut plan = w.plan(vec![newcomer.clone()], vec![]);
            plan.priority = priority;
            plan.node_preemptions
                .entry(NodeId::new(format!("node-{node}")))
                .or_default()
                .push(AllocStop {
                    id: id.clone(),
                    desired_status: DesiredStatus::Evict,
                    desired_description: format!("Preempted by alloc ID {}", newcomer.id),
                    preempted_by_allocation: newcomer.id.clone(),
                    ..AllocStop::default()
                });
            plan
        };
        let refused = |ev: &PlanEvaluation| {
            matches!(
                ev.rejected.as_slice(),
                [NodeRejection {
                    reason: RejectReason::PreemptionRefused { .. },
                    ..
                }]
            ) && ev.is_no_op()
        };
        let snapshot = w.store.snapshot();
        // Less than ten points above the victim's job, an unknown allocation, an allocation
        // on another node: refused, nothing accepted.
        for plan in [
            evicting(&w, 59, 0, &victim.id),
            evicting(&w, 50, 0, &victim.id),
            evicting(&w, 90, 0, &AllocId::new("alloc-missing")),
            evicting(&w, 90, 1, &victim.id),
        ] {
            let ev = evaluate_plan(&snapshot, &PlanOverlay::new(), &plan);
            assert!(refused(&ev), "{ev:?}");
        }
        // Ten points above: the eviction makes room and commits with who it was for.
        let plan = evicting(&w, 60, 0, &victim.id);
        let ev = evaluate_plan(&snapshot, &PlanOverlay::new(), &plan);
        assert!(!ev.is_partial(), "{ev:?}");
        w.commit(&ev);
        let evicted = w.store.snapshot().alloc_by_id(&victim.id).unwrap().clone();
        assert_eq!(evicted.desired_status, DesiredStatus::Evict);
        assert_eq!(
            evicted.preempted_by_allocation,
            plan.node_allocation[&NodeId::new("node-0")][0].id
        );
        // An allocation that ended meanwhile is not evicted: its stop stands as it was.
        let stop = w.plan(vec![], vec![(1, ended.id.clone())]);
        let ev = evaluate_plan(&w.store.snapshot(), &PlanOverlay::new(), &stop);
        w.commit(&ev);
        let plan = evicting(&w, 90, 1, &ended.id);
        let ev = evaluate_plan(&w.store.snapshot(), &PlanOverlay::new(), &plan);
        assert!(!ev.is_partial());
        assert!(ev.node_preemptions.is_empty(), "{ev:?}");
        assert_eq!(ev.accepted_allocs(), 1);
    }

    #[test]
    fn the_overlay_counts_accepted_plans_once_and_forgets_released_ones() {
        let mut w = World::new(&[(1000, 1000)]);
        let snapshot = w.store.snapshot();
        let mut overlay = PlanOverlay::new();
        let first = w.plan(vec![w.alloc(0, 600, 100)], vec![]);
        let ev1 = evaluate_plan(&snapshot, &overlay, &first);
        assert!(!ev1.is_partial());
        let token = overlay.record(&ev1);
        // Same stale snapshot: without the overlay the second plan would fit.
        let second = w.plan(vec![w.alloc(0, 600, 100)], vec![]);
        assert!(!evaluate_plan(&snapshot, &PlanOverlay::new(), &second).is_partial());
        let ev2 = evaluate_plan(&snapshot, &overlay, &second);
        assert!(ev2.is_partial());
        // Once the first plan is committed and visible, the overlay entry is redundant and
        // does not count twice.
        w.commit(&ev1);
        let fresh = w.store.snapshot();
        let small = w.plan(vec![w.alloc(0, 400, 100)], vec![]);
        assert!(!evaluate_plan(&fresh, &overlay, &small).is_partial());
        assert!(overlay.release(token));
        assert!(!overlay.release(token));
        assert!(overlay.is_empty());
        // A stop recorded in the overlay frees room on the stale snapshot.
        let first_id = ev1.node_allocation.values().next().unwrap()[0].id.clone();
        let stop = w.plan(vec![], vec![(0, first_id)]);
        let ev_stop = evaluate_plan(&fresh, &overlay, &stop);
        overlay.record(&ev_stop);
        let big = w.plan(vec![w.alloc(0, 1000, 100)], vec![]);
        assert!(!evaluate_plan(&fresh, &overlay, &big).is_partial());
        assert_eq!(overlay.len(), 1);
        overlay.clear();
        assert!(evaluate_plan(&fresh, &overlay, &big).is_partial());
    }

    #[test]
    fn the_command_stamps_times_and_carries_the_eval() {
        let w = World::new(&[(1000, 1000)]);
        let mut a = w.alloc(0, 1, 1);
        a.create_time = 5;
        let plan = w.plan(vec![a, w.alloc(0, 2, 2)], vec![(0, "gone".into())]);
        let ev = evaluate_plan(&w.store.snapshot(), &PlanOverlay::new(), &plan);
        let cmd = ev.apply_command(3_000_000_000);
        assert_eq!(cmd.eval_id, EvalId::new("eval-1"));
        assert_eq!(cmd.updated_at, 3);
        assert_eq!(cmd.allocs_updated.len(), 2);
        let creates: Vec<i64> = cmd.allocs_updated.iter().map(|a| a.create_time).collect();
        assert!(creates.contains(&5) && creates.contains(&3_000_000_000));
        assert!(cmd
            .allocs_updated
            .iter()
            .all(|a| a.modify_time == 3_000_000_000));
        assert_eq!(cmd.allocs_stopped[0].modify_time, 3_000_000_000);
    }
}
