//! The system scheduler for system and sysbatch jobs (Nomad's `SystemScheduler`): one
//! allocation of each task group on every ready, eligible node in the job's datacenters and
//! pool that satisfies its constraints.
//!
//! Per attempt, a per-node diff ([`SystemScheduler`]'s `diff`):
//!
//! - allocations on missing, `down` or `disconnected` nodes are stopped as `lost`; on
//!   draining nodes they are stopped (unless the drain ignores system jobs); on nodes outside
//!   the job's datacenters or pool, of removed task groups, or of a stopped or purged job,
//!   they are stopped; a second live allocation of the same group on one node is stopped;
//! - on ready nodes that are merely ineligible, existing allocations are left alone;
//! - on eligible nodes, an allocation of an older job version is updated in place (if only
//!   non-task fields changed and the node still takes it) or replaced; a missing one is
//!   placed — sysbatch groups that already finished on the node for this job version are not
//!   run again.
//!
//! A node that filters the group out (constraints, drivers) is simply skipped; a node that
//! lacks resources is a failed placement: it is recorded in `FailedTGAllocs` and gets its own
//! blocked evaluation (`NodeID` set), so capacity freed on that node wakes it. New nodes
//! become ready → the node endpoints create node-update evaluations → this diff places on them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use teamster_storage::model::{
    AllocMetric, Allocation, ClientStatus, DesiredStatus, EvalStatus, Evaluation, Job, Node,
    NodeId, NodeStatus, Plan,
};
use teamster_storage::state::Snapshot;

use crate::scheduler::context::{Eligibility, EvalContext};
use crate::scheduler::feasible::node_in_job_scope;
use crate::scheduler::reconcile::{
    ALLOC_IN_PLACE, ALLOC_LOST, ALLOC_NODE_TAINTED, ALLOC_NOT_NEEDED, ALLOC_UPDATING,
};
use crate::scheduler::stack::{GroupPlacer, Stack, Verdict};
use crate::scheduler::util::{
    alloc_name, blocked_eval, generate_uuid, progress_made, ready_nodes, tasks_updated, PlanSize,
};
use crate::scheduler::{Planner, Scheduler, SchedulerEnv, SchedulerError};

/// Hard cap on attempts in one `process`, progress or not (bounded retries).
const MAX_TOTAL_ATTEMPTS: u32 = 64;

/// Schedules system (`sysbatch == false`) or sysbatch jobs.
pub struct SystemScheduler<'a> {
    sysbatch: bool,
    snapshot: Snapshot,
    planner: &'a mut dyn Planner,
    env: SchedulerEnv<'a>,
}

struct Run {
    eval: Evaluation,
    failed_tg_allocs: BTreeMap<String, AllocMetric>,
    queued: BTreeMap<String, u64>,
    eligibility: Eligibility,
    /// Nodes that already got a blocked evaluation in this `process`.
    blocked_nodes: BTreeSet<NodeId>,
}

/// One placement the diff asks for.
struct Placement {
    node: Arc<Node>,
    group: String,
    /// A destructive update: the allocation it replaces.
    replaces: Option<Arc<Allocation>>,
}

impl<'a> SystemScheduler<'a> {
    /// A system scheduler over `snapshot`; `sysbatch` selects run-to-completion semantics.
    pub fn new(
        sysbatch: bool,
        snapshot: Snapshot,
        planner: &'a mut dyn Planner,
        env: SchedulerEnv<'a>,
    ) -> Self {
        SystemScheduler {
            sysbatch,
            snapshot,
            planner,
            env,
        }
    }

    fn attempt(&mut self, run: &mut Run) -> Result<(bool, bool), SchedulerError> {
        let now = self.env.now;
        let job: Option<Arc<Job>> = self
            .snapshot
            .job_by_id(&run.eval.namespace, &run.eval.job_id)
            .cloned();
        run.queued = job
            .iter()
            .flat_map(|j| j.task_groups.iter())
            .map(|g| (g.name.clone(), 0))
            .collect();
        run.failed_tg_allocs.clear();
        let plan = Plan {
            eval_id: run.eval.id.clone(),
            priority: run.eval.priority,
            all_at_once: job.as_ref().is_some_and(|j| j.all_at_once),
            job: job.clone(),
            snapshot_index: self.snapshot.latest_index(),
            ..Plan::default()
        };
        let mut ctx = EvalContext::new(self.snapshot.clone(), plan, job.as_deref());
        let allocs: Vec<Arc<Allocation>> = self
            .snapshot
            .allocs_by_job(&run.eval.namespace, &run.eval.job_id)
            .cloned()
            .collect();

        match job.as_ref().filter(|j| !j.stopped()) {
            None => {
                for alloc in allocs.iter().filter(|a| !a.terminal_status()) {
                    let lost = self.node_lost(&alloc.node_id);
                    let (description, status) = if lost {
                        (ALLOC_LOST, Some(ClientStatus::Lost))
                    } else {
                        (ALLOC_NOT_NEEDED, None)
                    };
                    ctx.plan_stop(alloc, description, status, now);
                }
            }
            Some(job) => self.diff_and_place(run, &mut ctx, job, &allocs)?,
        }
        run.eligibility = ctx.eligibility.clone();
        if ctx.plan.is_no_op() {
            return Ok((true, false));
        }
        let plan = ctx.plan;
        let size = PlanSize::of_plan(&plan);
        let (result, fresh) = self.planner.submit_plan(plan)?;
        let progress = progress_made(&result);
        if let Some(fresh) = fresh {
            self.snapshot = fresh;
            return Ok((false, progress));
        }
        if PlanSize::of_result(&result) != size {
            return Err(SchedulerError::MissingRefresh);
        }
        Ok((true, progress))
    }

    fn node_lost(&self, node_id: &NodeId) -> bool {
        self.snapshot
            .node_by_id(node_id)
            .is_none_or(|n| matches!(n.status, NodeStatus::Down | NodeStatus::Disconnected))
    }

    /// The per-node diff, then the placements it asks for.
    fn diff_and_place(
        &mut self,
        run: &mut Run,
        ctx: &mut EvalContext,
        job: &Arc<Job>,
        allocs: &[Arc<Allocation>],
    ) -> Result<(), SchedulerError> {
        let now = self.env.now;
        let (nodes, by_dc) = ready_nodes(&self.snapshot, job);
        let eligible: HashMap<NodeId, Arc<Node>> =
            nodes.iter().map(|n| (n.id.clone(), n.clone())).collect();
        let algorithm = self.snapshot.scheduler_config().scheduler_algorithm;
        // Every eligible node is visited explicitly (Nomad's static iterator); the stack
        // holds the job-wide class cache and the metrics' node counts.
        let mut stack = Stack::new(
            nodes.clone(),
            by_dc,
            false,
            algorithm,
            self.env.settings.affinity_spread_node_limit,
            self.env.rng,
        );
        let mut placers: BTreeMap<String, GroupPlacer> = BTreeMap::new();
        for group in &job.task_groups {
            let placer = GroupPlacer::new(ctx, job, group);
            ctx.eligibility.set_escaped(placer.checks.escaped());
            placers.insert(group.name.clone(), placer);
        }

        // Live allocation per (node, group); finished sysbatch runs of this version.
        let mut live: HashMap<(NodeId, String), Arc<Allocation>> = HashMap::new();
        let mut finished: BTreeSet<(NodeId, String)> = BTreeSet::new();
        let mut sorted: Vec<&Arc<Allocation>> = allocs.iter().collect();
        sorted.sort_by(|a, b| (a.create_index, &a.id).cmp(&(b.create_index, &b.id)));
        for alloc in sorted {
            if alloc.terminal_status() {
                if self.sysbatch
                    && alloc.job_version == job.version
                    && alloc.desired_status == DesiredStatus::Run
                    && matches!(
                        alloc.client_status,
                        ClientStatus::Complete | ClientStatus::Failed
                    )
                {
                    finished.insert((alloc.node_id.clone(), alloc.task_group.clone()));
                }
                continue;
            }
            if self.node_lost(&alloc.node_id) {
                ctx.plan_stop(alloc, ALLOC_LOST, Some(ClientStatus::Lost), now);
                continue;
            }
            if let Some(node) = self.snapshot.node_by_id(&alloc.node_id) {
                let ignores = node
                    .drain_strategy
                    .as_ref()
                    .is_some_and(|d| d.ignore_system_jobs);
                if node.drain_strategy.is_some() && !ignores {
                    ctx.plan_stop(alloc, ALLOC_NODE_TAINTED, None, now);
                    continue;
                }
                if !node_in_job_scope(job, node) {
                    // The job no longer targets the node's datacenter or pool.
                    ctx.plan_stop(alloc, ALLOC_NOT_NEEDED, None, now);
                    continue;
                }
            }
            let Some(group) = job.task_group(&alloc.task_group).filter(|g| g.count > 0) else {
                ctx.plan_stop(alloc, ALLOC_NOT_NEEDED, None, now);
                continue;
            };
            let key = (alloc.node_id.clone(), group.name.clone());
            if live.contains_key(&key) {
                ctx.plan_stop(alloc, ALLOC_NOT_NEEDED, None, now);
                continue;
            }
            live.insert(key, alloc.clone());
        }

        let mut placements: Vec<Placement> = Vec::new();
        let mut node_ids: Vec<&NodeId> = eligible.keys().collect();
        node_ids.sort();
        for node_id in node_ids {
            let node = &eligible[node_id];
            for group in job.task_groups.iter().filter(|g| g.count > 0) {
                let key = (node.id.clone(), group.name.clone());
                match live.get(&key) {
                    Some(alloc) if alloc.job_version == job.version => {}
                    Some(alloc) => {
                        let destructive = match self.snapshot.alloc_job(alloc) {
                            Some(old) => tasks_updated(old, job, &group.name),
                            None => true,
                        };
                        let placer = placers
                            .get_mut(&group.name)
                            .expect("a placer exists for every group");
                        if destructive
                            || !self.try_inplace(ctx, &mut stack, placer, job, node, alloc)
                        {
                            placements.push(Placement {
                                node: node.clone(),
                                group: group.name.clone(),
                                replaces: Some(alloc.clone()),
                            });
                        }
                    }
                    None if finished.contains(&key) => {}
                    None => placements.push(Placement {
                        node: node.clone(),
                        group: group.name.clone(),
                        replaces: None,
                    }),
                }
            }
        }

        for placement in placements {
            let placer = placers
                .get_mut(&placement.group)
                .expect("a placer exists for every group");
            if let Some(old) = &placement.replaces {
                ctx.plan_stop(old, ALLOC_UPDATING, None, now);
            }
            stack.reset_metrics(ctx);
            match stack.evaluate(ctx, placer, &placement.node, &[]) {
                Verdict::Feasible(_) => {
                    let name = alloc_name(&job.id, &placement.group, 0);
                    let alloc = Allocation {
                        id: generate_uuid(self.env.rng).into(),
                        namespace: job.namespace.clone(),
                        eval_id: run.eval.id.clone(),
                        name,
                        node_id: placement.node.id.clone(),
                        job_id: job.id.clone(),
                        job_version: job.version,
                        task_group: placement.group.clone(),
                        resources: placer.ask,
                        desired_status: DesiredStatus::Run,
                        client_status: ClientStatus::Pending,
                        previous_allocation: placement
                            .replaces
                            .as_ref()
                            .map(|a| a.id.clone())
                            .unwrap_or_default(),
                        create_time: now,
                        modify_time: now,
                        ..Allocation::default()
                    };
                    ctx.plan_place(alloc);
                }
                // The node does not take the group (for an update: any more, so the old
                // allocation's stop stands). Not a failure: the job does not want this node.
                Verdict::Filtered => {}
                Verdict::Exhausted(_) => {
                    if let Some(old) = &placement.replaces {
                        ctx.pop_stop(old);
                    }
                    *run.queued.entry(placement.group.clone()).or_default() += 1;
                    let metric = std::mem::take(&mut ctx.metrics);
                    match run.failed_tg_allocs.get_mut(&placement.group) {
                        Some(existing) => {
                            existing.coalesced_failures += 1;
                            existing.nodes_evaluated += metric.nodes_evaluated;
                            existing.nodes_exhausted += metric.nodes_exhausted;
                            for (k, v) in metric.class_exhausted {
                                *existing.class_exhausted.entry(k).or_default() += v;
                            }
                            for (k, v) in metric.dimension_exhausted {
                                *existing.dimension_exhausted.entry(k).or_default() += v;
                            }
                        }
                        None => {
                            run.failed_tg_allocs.insert(placement.group.clone(), metric);
                        }
                    }
                    if run.eval.status != EvalStatus::Blocked
                        && run.blocked_nodes.insert(placement.node.id.clone())
                    {
                        let mut blocked = blocked_eval(
                            &run.eval,
                            generate_uuid(self.env.rng),
                            &run.failed_tg_allocs,
                            &ctx.eligibility,
                            false,
                            self.snapshot.latest_index(),
                            now,
                        );
                        blocked.node_id = placement.node.id.clone();
                        self.planner.create_eval(blocked)?;
                    }
                }
            }
        }
        Ok(())
    }

    fn try_inplace(
        &mut self,
        ctx: &mut EvalContext,
        stack: &mut Stack,
        placer: &mut GroupPlacer,
        job: &Job,
        node: &Node,
        old: &Arc<Allocation>,
    ) -> bool {
        let now = self.env.now;
        ctx.plan_stop(old, ALLOC_IN_PLACE, None, now);
        let verdict = stack.evaluate(ctx, placer, node, &[]);
        ctx.pop_stop(old);
        if !matches!(verdict, Verdict::Feasible(_)) {
            return false;
        }
        let mut updated = (**old).clone();
        updated.job_version = job.version;
        updated.eval_id = ctx.plan.eval_id.clone();
        updated.resources = placer.ask;
        updated.modify_time = now;
        ctx.plan_update(old, updated);
        true
    }

    fn finish(
        &mut self,
        run: &Run,
        status: EvalStatus,
        description: String,
    ) -> Result<(), SchedulerError> {
        let mut eval = run.eval.clone();
        eval.status = status;
        eval.status_description = description;
        eval.failed_tg_allocs = run.failed_tg_allocs.clone();
        eval.queued_allocations = run.queued.clone();
        eval.class_eligibility = run.eligibility.classes();
        eval.escaped_computed_class = run.eligibility.escaped();
        eval.snapshot_index = self.snapshot.latest_index();
        eval.modify_time = self.env.now;
        self.planner.update_eval(eval)
    }
}

impl Scheduler for SystemScheduler<'_> {
    fn process(&mut self, eval: &Evaluation) -> Result<(), SchedulerError> {
        let _span = tracing::debug_span!(
            "schedule",
            eval_id = %eval.id,
            job_id = %eval.job_id,
            eval_type = eval.eval_type.as_str(),
            triggered_by = ?eval.triggered_by,
        )
        .entered();
        let mut run = Run {
            eval: eval.clone(),
            failed_tg_allocs: BTreeMap::new(),
            queued: BTreeMap::new(),
            eligibility: Eligibility::default(),
            blocked_nodes: BTreeSet::new(),
        };
        let limit = self.env.settings.system_max_attempts;
        let mut attempts = 0;
        let mut total = 0;
        loop {
            if attempts >= limit || total >= MAX_TOTAL_ATTEMPTS {
                tracing::info!(
                    eval_id = %eval.id,
                    job_id = %eval.job_id,
                    attempts = total,
                    "plan attempts exhausted; evaluation failed"
                );
                return self.finish(
                    &run,
                    EvalStatus::Failed,
                    format!("maximum attempts reached ({limit})"),
                );
            }
            total += 1;
            let (done, progress) = self.attempt(&mut run)?;
            if done {
                break;
            }
            attempts = if progress { 0 } else { attempts + 1 };
        }
        self.finish(&run, EvalStatus::Complete, String::new())
    }
}
