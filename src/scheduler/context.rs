//! The evaluation context: one scheduling attempt's view of the state plus the plan in
//! progress.
//!
//! Every change a scheduler proposes goes through [`EvalContext`]'s plan methods
//! ([`plan_stop`](EvalContext::plan_stop), [`pop_stop`](EvalContext::pop_stop),
//! [`plan_place`](EvalContext::plan_place), [`plan_update`](EvalContext::plan_update)), which
//! keep three derived views current **incrementally**, so ranking a candidate node costs
//! O(1) map lookups instead of a scan of the node's allocations:
//!
//! - **Usage per node**: the resources of the node's non-terminal allocations in the
//!   snapshot (computed on first use, once per node) plus the plan's placements minus its
//!   stops.
//! - **The job's allocations per node and task group** (job anti-affinity, `distinct_hosts`).
//! - **Property counts** (`distinct_property`, spreads): for a node attribute and a scope
//!   (the job or one task group), how many of the job's proposed allocations run on nodes
//!   with each value.
//! - **Host ports per node**: the node's reserved ports and its non-terminal allocations'
//!   (computed on first use) with the plan's placements and stops counted in.
//!
//! It also records which computed node classes were found eligible or not (for blocked
//! evaluations) and the metrics of the placement being attempted.

use std::collections::{BTreeMap, HashMap, HashSet};
use teamster_storage::model::{
    AllocId, AllocMetric, AllocStop, Allocation, ClientStatus, DesiredStatus, Job, Node, NodeId,
    Plan, Resources, SharedStr,
};
use teamster_storage::state::Snapshot;

use crate::scheduler::feasible::{resolve_target, OperandCache};
use crate::scheduler::{fit, preempt};

/// Counts of the job's proposed allocations per value of a node attribute.
#[derive(Debug, Clone)]
pub(crate) struct PropertyCounts {
    /// The attribute, as a constraint target (`${meta.rack}`).
    pub target: String,
    /// `None` counts the whole job; `Some(group)` one task group.
    pub group: Option<String>,
    /// Allocations per value.
    pub counts: HashMap<String, u64>,
}

/// Which computed node classes were found (in)eligible, job-wide and per task group
/// (Nomad's `EvalEligibility`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Eligibility {
    job: BTreeMap<String, bool>,
    groups: BTreeMap<String, BTreeMap<String, bool>>,
    escaped: bool,
}

impl Eligibility {
    pub fn set_job(&mut self, class: &str, eligible: bool) {
        self.job.insert(class.to_owned(), eligible);
    }

    pub fn set_group(&mut self, group: &str, class: &str, eligible: bool) {
        self.groups
            .entry(group.to_owned())
            .or_default()
            .insert(class.to_owned(), eligible);
    }

    pub fn set_escaped(&mut self, escaped: bool) {
        self.escaped |= escaped;
    }

    /// True when some constraint targets unique attributes.
    pub fn escaped(&self) -> bool {
        self.escaped
    }

    /// Nomad's `GetClasses`: a class is eligible if some group found it eligible and the job
    /// did not rule it out.
    pub fn classes(&self) -> BTreeMap<String, bool> {
        let mut out = BTreeMap::new();
        for classes in self.groups.values() {
            for (class, eligible) in classes {
                if *eligible {
                    out.insert(class.clone(), true);
                } else {
                    out.entry(class.clone()).or_insert(false);
                }
            }
        }
        for (class, eligible) in &self.job {
            if *eligible {
                out.entry(class.clone()).or_insert(true);
            } else {
                out.insert(class.clone(), false);
            }
        }
        out
    }
}

/// One attempt's state: snapshot, plan in progress and the views derived from both.
pub(crate) struct EvalContext {
    /// The state this attempt plans against.
    pub snapshot: Snapshot,
    /// The plan being built.
    pub plan: Plan,
    /// Regular expressions and version constraints compiled so far.
    pub operands: OperandCache,
    /// Classes found (in)eligible.
    pub eligibility: Eligibility,
    /// Metrics of the placement being attempted.
    pub metrics: AllocMetric,
    /// Snapshot usage per node (non-terminal allocations), filled on first use.
    base_usage: HashMap<NodeId, Resources>,
    /// Resources the plan adds per node.
    added: HashMap<NodeId, Resources>,
    /// Resources the plan frees per node.
    removed: HashMap<NodeId, Resources>,
    /// The job's proposed allocations per node and task group.
    job_counts: HashMap<NodeId, HashMap<SharedStr, u32>>,
    /// Property counters, registered by the stacks.
    properties: Vec<PropertyCounts>,
    /// Host ports held per node in the snapshot (reserved by the node or by non-terminal
    /// allocations), how many times each; filled on first use.
    base_ports: HashMap<NodeId, HashMap<u32, i64>>,
    /// Host ports the plan takes (+) and frees (−) per node.
    port_delta: HashMap<NodeId, HashMap<u32, i64>>,
    /// Cores held per node in the snapshot by non-terminal allocations, how many times
    /// each; filled on first use.
    base_cores: HashMap<NodeId, HashMap<u16, i64>>,
    /// Cores the plan takes (+) and frees (−) per node.
    core_delta: HashMap<NodeId, HashMap<u16, i64>>,
}

impl EvalContext {
    /// A context over `snapshot` for `job`'s allocations, with an empty `plan`.
    pub fn new(snapshot: Snapshot, plan: Plan, job: Option<&Job>) -> EvalContext {
        let mut job_counts: HashMap<NodeId, HashMap<SharedStr, u32>> = HashMap::new();
        if let Some(job) = job {
            for alloc in snapshot.allocs_by_job(&job.namespace, &job.id) {
                if !alloc.terminal_status() {
                    *job_counts
                        .entry(alloc.node_id.clone())
                        .or_default()
                        .entry(alloc.task_group.clone())
                        .or_default() += 1;
                }
            }
        }
        EvalContext {
            snapshot,
            plan,
            operands: OperandCache::default(),
            eligibility: Eligibility::default(),
            metrics: AllocMetric::default(),
            base_usage: HashMap::new(),
            added: HashMap::new(),
            removed: HashMap::new(),
            job_counts,
            properties: Vec::new(),
            base_ports: HashMap::new(),
            port_delta: HashMap::new(),
            base_cores: HashMap::new(),
            core_delta: HashMap::new(),
        }
    }

    /// The cores of `node` no live allocation holds with the plan so far, ascending.
    pub fn free_cores(&mut self, node: &Node) -> Vec<u16> {
        let snapshot = &self.snapshot;
        let base = self.base_cores.entry(node.id.clone()).or_insert_with(|| {
            let mut held: HashMap<u16, i64> = HashMap::new();
            for alloc in snapshot
                .allocs_by_node(&node.id)
                .filter(|a| !a.terminal_status())
            {
                for core in alloc.allocated_resources.cores() {
                    *held.entry(core).or_default() += 1;
                }
            }
            held
        });
        let delta = self.core_delta.get(&node.id);
        fit::reservable_cores(node)
            .into_iter()
            .filter(|core| {
                let held = base.get(core).copied().unwrap_or(0)
                    + delta.and_then(|d| d.get(core)).copied().unwrap_or(0);
                held <= 0
            })
            .collect()
    }

    /// The host ports in use on `node` with the plan so far: reserved by the node, or held
    /// by one of its live allocations.
    pub fn ports_in_use(&mut self, node: &Node) -> HashSet<u32> {
        let snapshot = &self.snapshot;
        let base = self.base_ports.entry(node.id.clone()).or_insert_with(|| {
            let mut held: HashMap<u32, i64> = HashMap::new();
            for port in crate::scheduler::ports::node_reserved_ports(node) {
                *held.entry(port).or_default() += 1;
            }
            for alloc in snapshot
                .allocs_by_node(&node.id)
                .filter(|a| !a.terminal_status())
            {
                for port in alloc.host_ports() {
                    *held.entry(port).or_default() += 1;
                }
            }
            held
        });
        let mut counts = base.clone();
        for (port, delta) in self.port_delta.get(&node.id).into_iter().flatten() {
            *counts.entry(*port).or_default() += delta;
        }
        counts
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(p, _)| p)
            .collect()
    }

    /// The resources the node's allocations would use with the plan so far.
    pub fn node_usage(&mut self, node_id: &NodeId) -> Resources {
        let base = match self.base_usage.get(node_id) {
            Some(usage) => *usage,
            None => {
                let usage = self.snapshot.node_usage(node_id);
                self.base_usage.insert(node_id.clone(), usage);
                usage
            }
        };
        let mut usage = base;
        if let Some(added) = self.added.get(node_id) {
            usage = usage.add(added);
        }
        if let Some(removed) = self.removed.get(node_id) {
            usage = fit::subtract(&usage, removed);
        }
        usage
    }

    /// How many of the job's proposed allocations of `group` run on the node.
    pub fn group_count_on_node(&self, node_id: &NodeId, group: &str) -> u32 {
        self.job_counts
            .get(node_id)
            .and_then(|groups| groups.get(group))
            .copied()
            .unwrap_or(0)
    }

    /// How many of the job's proposed allocations run on the node.
    pub fn job_count_on_node(&self, node_id: &NodeId) -> u32 {
        self.job_counts
            .get(node_id)
            .map_or(0, |groups| groups.values().sum())
    }

    /// Registers (or finds) a property counter for `target` over `group` (the job for
    /// `None`) and returns its handle. Counts start from the job's allocations in the
    /// snapshot and the plan so far.
    pub fn property(&mut self, job: &Job, target: &str, group: Option<&str>) -> usize {
        if let Some(at) = self
            .properties
            .iter()
            .position(|p| p.target == target && p.group.as_deref() == group)
        {
            return at;
        }
        // The job's proposed allocations: snapshot non-terminal ones, minus plan stops,
        // with plan placements and updates on top.
        let mut proposed: HashMap<AllocId, (NodeId, String)> = HashMap::new();
        for alloc in self.snapshot.allocs_by_job(&job.namespace, &job.id) {
            if !alloc.terminal_status() {
                proposed.insert(
                    alloc.id.clone(),
                    (alloc.node_id.clone(), alloc.task_group.to_string()),
                );
            }
        }
        for stops in self.plan.node_update.values() {
            for stop in stops {
                proposed.remove(&stop.id);
            }
        }
        for allocs in self.plan.node_allocation.values() {
            for alloc in allocs {
                if alloc.job_id == job.id && !alloc.terminal_status() {
                    proposed.insert(
                        alloc.id.clone(),
                        (alloc.node_id.clone(), alloc.task_group.to_string()),
                    );
                }
            }
        }
        let mut counts: HashMap<String, u64> = HashMap::new();
        for (node_id, alloc_group) in proposed.values() {
            if group.is_some_and(|g| g != alloc_group) {
                continue;
            }
            if let Some(node) = self.snapshot.node_by_id(node_id) {
                if let Some(value) = resolve_target(target, node) {
                    *counts.entry(value.to_owned()).or_default() += 1;
                }
            }
        }
        self.properties.push(PropertyCounts {
            target: target.to_owned(),
            group: group.map(str::to_owned),
            counts,
        });
        self.properties.len() - 1
    }

    /// A property counter registered with [`property`](Self::property).
    pub fn property_counts(&self, handle: usize) -> &PropertyCounts {
        &self.properties[handle]
    }

    /// Adds a stop of `alloc` to the plan. Freed resources and counts move only for an
    /// allocation that was still running in the snapshot.
    pub fn plan_stop(
        &mut self,
        alloc: &Allocation,
        description: &str,
        client_status: Option<ClientStatus>,
        now: i64,
    ) {
        self.plan
            .node_update
            .entry(alloc.node_id.clone())
            .or_default()
            .push(AllocStop {
                id: alloc.id.clone(),
                desired_status: DesiredStatus::Stop,
                desired_description: description.to_owned(),
                client_status,
                followup_eval_id: Default::default(),
                modify_time: now,
                preempted_by_allocation: Default::default(),
            });
        if !alloc.terminal_status() {
            self.account(alloc, -1);
        }
    }

    /// Takes back the latest planned stop of `alloc` (its replacement could not be placed).
    pub fn pop_stop(&mut self, alloc: &Allocation) {
        let Some(stops) = self.plan.node_update.get_mut(&alloc.node_id) else {
            return;
        };
        let Some(at) = stops.iter().rposition(|s| s.id == alloc.id) else {
            return;
        };
        stops.remove(at);
        if stops.is_empty() {
            self.plan.node_update.remove(&alloc.node_id);
        }
        if !alloc.terminal_status() {
            self.account(alloc, 1);
        }
    }

    /// Adds a new allocation to the plan.
    pub fn plan_place(&mut self, alloc: Allocation) {
        if !alloc.terminal_status() {
            self.account(&alloc, 1);
        }
        self.plan
            .node_allocation
            .entry(alloc.node_id.clone())
            .or_default()
            .push(alloc);
    }

    /// Adds an update of an existing allocation (in place, or an attribute such as the
    /// follow-up evaluation) to the plan.
    pub fn plan_update(&mut self, old: &Allocation, new: Allocation) {
        if !old.terminal_status() {
            self.account(old, -1);
        }
        if !new.terminal_status() {
            self.account(&new, 1);
        }
        self.plan
            .node_allocation
            .entry(new.node_id.clone())
            .or_default()
            .push(new);
    }

    /// The live allocations on `node_id` that an allocation of `job` at `priority` may evict:
    /// other jobs' allocations, at least [`PRIORITY_DELTA`](preempt::PRIORITY_DELTA) lower,
    /// that the plan neither stops nor already evicts.
    pub fn preemption_candidates(
        &self,
        node_id: &NodeId,
        job: &Job,
        priority: u32,
    ) -> Vec<preempt::Candidate> {
        let planned = |stops: Option<&Vec<AllocStop>>, id: &AllocId| {
            stops.is_some_and(|stops| stops.iter().any(|s| s.id == *id))
        };
        self.snapshot
            .allocs_by_node(node_id)
            .filter(|a| !a.terminal_status())
            .filter(|a| !(a.namespace == job.namespace && a.job_id == job.id))
            .filter(|a| {
                !planned(self.plan.node_update.get(node_id), &a.id)
                    && !planned(self.plan.node_preemptions.get(node_id), &a.id)
            })
            .filter_map(|a| {
                let victim = self.snapshot.alloc_job(a)?.priority;
                preempt::may_preempt(priority, victim).then(|| preempt::Candidate {
                    alloc: a.clone(),
                    priority: victim,
                })
            })
            .collect()
    }

    /// Adds the eviction of `victim` (another job's allocation) to make room for the new
    /// allocation `by`. Frees its resources and ports; the job's own counts do not move.
    pub fn plan_preempt(&mut self, victim: &Allocation, by: &AllocId, now: i64) {
        self.plan
            .node_preemptions
            .entry(victim.node_id.clone())
            .or_default()
            .push(AllocStop {
                id: victim.id.clone(),
                desired_status: DesiredStatus::Evict,
                desired_description: format!("Preempted by alloc ID {by}"),
                client_status: None,
                followup_eval_id: Default::default(),
                modify_time: now,
                preempted_by_allocation: by.clone(),
            });
        self.account_resources(victim, -1);
    }

    /// Moves resources and host ports for one allocation entering (`+1`) or leaving (`-1`)
    /// its node.
    fn account_resources(&mut self, alloc: &Allocation, direction: i8) {
        let side = if direction > 0 {
            &mut self.added
        } else {
            &mut self.removed
        };
        let entry = side.entry(alloc.node_id.clone()).or_insert(Resources::ZERO);
        *entry = entry.add(&alloc.resources);
        if !alloc.allocated_resources.shared.ports.is_empty() {
            let ports = self.port_delta.entry(alloc.node_id.clone()).or_default();
            for port in alloc.host_ports() {
                *ports.entry(port).or_default() += i64::from(direction);
            }
        }
        if alloc.allocated_resources.tasks.is_some() {
            let cores = self.core_delta.entry(alloc.node_id.clone()).or_default();
            for core in alloc.allocated_resources.cores() {
                *cores.entry(core).or_default() += i64::from(direction);
            }
        }
    }

    /// Moves usage, job counts and property counts for one of the job's allocations entering
    /// (`+1`) or leaving (`-1`) its node.
    fn account(&mut self, alloc: &Allocation, direction: i8) {
        self.account_resources(alloc, direction);
        let count = self
            .job_counts
            .entry(alloc.node_id.clone())
            .or_default()
            .entry(alloc.task_group.clone())
            .or_default();
        *count = if direction > 0 {
            count.saturating_add(1)
        } else {
            count.saturating_sub(1)
        };
        if self.properties.is_empty() {
            return;
        }
        let Some(node) = self.snapshot.node_by_id(&alloc.node_id).cloned() else {
            return;
        };
        for property in &mut self.properties {
            if property
                .group
                .as_deref()
                .is_some_and(|g| g != alloc.task_group)
            {
                continue;
            }
            if let Some(value) = resolve_target(&property.target, &node) {
                let n = property.counts.entry(value.to_owned()).or_default();
                *n = if direction > 0 {
                    n.saturating_add(1)
                } else {
                    n.saturating_sub(1)
                };
            }
        }
    }
}
