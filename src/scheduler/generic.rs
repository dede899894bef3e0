//! The generic scheduler for service and batch jobs (Nomad's `GenericScheduler`).
//!
//! One [`process`](crate::scheduler::Scheduler::process) runs attempts until a plan is fully
//! committed or nothing is left to do:
//!
//! 1. Reconcile the job with its allocations ([`crate::scheduler::reconcile`]).
//! 2. Plan the stops, the follow-up markers of delayed reschedules, the in-place updates
//!    (each re-checked for feasibility on its node, else made destructive) and the
//!    placements. A destructive update, reschedule or migration stops the old allocation
//!    first, so its node may take the replacement, and takes the stop back if nothing fits.
//!    After a task group's first failure its further placements are coalesced into that
//!    failure's metrics instead of searching again.
//! 3. Failed placements: record `FailedTGAllocs` and create one blocked evaluation
//!    (`queued-allocs`) — unless the evaluation itself is blocked (it is reblocked at the end)
//!    or delayed reschedules will retry anyway.
//! 4. Create the follow-up evaluations, submit the plan. A partial commit comes back with a
//!    fresh snapshot: start again from 1. The attempt counter (5 for service, 2 for batch)
//!    resets whenever a result made progress; exhausted, a `max-plan-attempts` blocked eval
//!    is created and the evaluation fails.
//! 5. Update the evaluation: complete (or reblocked when it was a blocked one and still could
//!    not place everything), with `QueuedAllocations`, class eligibility and the snapshot index.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use teamster_storage::model::{
    AllocMetric, Allocation, ClientStatus, DesiredStatus, EvalStatus, Evaluation, Job, NodeId, Plan,
};
use teamster_storage::state::Snapshot;

use crate::scheduler::context::{Eligibility, EvalContext};
use crate::scheduler::reconcile::{PlaceRequest, Reconciler, ALLOC_IN_PLACE, ALLOC_UPDATING};
use crate::scheduler::stack::{GroupPlacer, Stack, Verdict};
use crate::scheduler::util::{
    alloc_reschedule_policy, blocked_eval, generate_uuid, progress_made, ready_nodes,
    reschedule_tracker_for, PlanSize,
};
use crate::scheduler::{Planner, Scheduler, SchedulerEnv, SchedulerError};

/// Hard cap on attempts in one `process`, progress or not (bounded retries).
const MAX_TOTAL_ATTEMPTS: u32 = 64;

/// Schedules service (`batch == false`) or batch jobs.
pub struct GenericScheduler<'a> {
    batch: bool,
    snapshot: Snapshot,
    planner: &'a mut dyn Planner,
    env: SchedulerEnv<'a>,
}

/// What one `process` accumulates across attempts.
struct Run {
    eval: Evaluation,
    blocked: Option<Evaluation>,
    failed_tg_allocs: BTreeMap<String, AllocMetric>,
    queued: BTreeMap<String, u64>,
    eligibility: Eligibility,
}

impl<'a> GenericScheduler<'a> {
    /// A generic scheduler over `snapshot`; `batch` selects batch semantics.
    pub fn new(
        batch: bool,
        snapshot: Snapshot,
        planner: &'a mut dyn Planner,
        env: SchedulerEnv<'a>,
    ) -> Self {
        GenericScheduler {
            batch,
            snapshot,
            planner,
            env,
        }
    }

    fn max_attempts(&self) -> u32 {
        if self.batch {
            self.env.settings.batch_max_attempts
        } else {
            self.env.settings.service_max_attempts
        }
    }

    /// One attempt: plan on the current snapshot and submit. Returns (done, progress made).
    fn attempt(&mut self, run: &mut Run) -> Result<(bool, bool), SchedulerError> {
        let now = self.env.now;
        let eval = &run.eval;
        let job: Option<Arc<Job>> = self
            .snapshot
            .job_by_id(&eval.namespace, &eval.job_id)
            .cloned();
        run.queued = job
            .iter()
            .flat_map(|j| j.task_groups.iter())
            .map(|g| (g.name.clone(), 0))
            .collect();
        run.failed_tg_allocs.clear();
        let plan = Plan {
            eval_id: eval.id.clone(),
            priority: eval.priority,
            all_at_once: job.as_ref().is_some_and(|j| j.all_at_once),
            job: job.clone(),
            snapshot_index: self.snapshot.latest_index(),
            ..Plan::default()
        };
        let mut ctx = EvalContext::new(self.snapshot.clone(), plan, job.as_deref());
        let allocs: Vec<Arc<Allocation>> = self
            .snapshot
            .allocs_by_job(&eval.namespace, &eval.job_id)
            .cloned()
            .collect();
        let reconciler = Reconciler {
            snapshot: &self.snapshot,
            job: job.as_ref(),
            eval,
            batch: self.batch,
            now,
        };
        let recon = reconciler.compute(&allocs, self.env.rng);
        tracing::debug!(
            eval_id = %eval.id,
            job_id = %eval.job_id,
            stop = recon.stop.len(),
            place = recon.place.len(),
            inplace = recon.inplace.len(),
            followups = recon.followup_evals.len(),
            "reconciled"
        );
        for stop in &recon.stop {
            ctx.plan_stop(&stop.alloc, stop.description, stop.client_status, now);
        }
        for updated in recon.attribute_updates {
            if let Some(old) = self.snapshot.alloc_by_id(&updated.id).cloned() {
                ctx.plan_update(&old, updated);
            }
        }
        if let Some(job) = job.as_ref().filter(|j| !j.stopped()) {
            self.place(run, &mut ctx, job, recon.inplace, recon.place);
        }
        run.eligibility = ctx.eligibility.clone();

        let delay_instead = !recon.followup_evals.is_empty() && run.eval.wait_until.is_zero();
        if run.eval.status != EvalStatus::Blocked
            && !run.failed_tg_allocs.is_empty()
            && run.blocked.is_none()
            && !delay_instead
        {
            let blocked = blocked_eval(
                &run.eval,
                generate_uuid(self.env.rng),
                &run.failed_tg_allocs,
                &run.eligibility,
                false,
                self.snapshot.latest_index(),
                now,
            );
            self.planner.create_eval(blocked.clone())?;
            run.blocked = Some(blocked);
        }
        if ctx.plan.is_no_op() {
            return Ok((true, false));
        }
        for followup in recon.followup_evals {
            self.planner.create_eval(followup)?;
        }
        let plan = ctx.plan;
        let size = PlanSize::of_plan(&plan);
        let (result, fresh) = self.planner.submit_plan(plan)?;
        let progress = progress_made(&result);
        if let Some(fresh) = fresh {
            tracing::debug!(
                eval_id = %run.eval.id,
                rejected = result.rejected_nodes.len(),
                refresh_index = result.refresh_index,
                "plan partially committed; planning again on a fresh snapshot"
            );
            self.snapshot = fresh;
            return Ok((false, progress));
        }
        if PlanSize::of_result(&result) != size {
            return Err(SchedulerError::MissingRefresh);
        }
        Ok((true, progress))
    }

    /// Plans in-place updates and placements.
    fn place(
        &mut self,
        run: &mut Run,
        ctx: &mut EvalContext,
        job: &Arc<Job>,
        inplace: Vec<Arc<Allocation>>,
        place: Vec<PlaceRequest>,
    ) {
        let now = self.env.now;
        let (nodes, by_dc) = ready_nodes(&self.snapshot, job);
        let algorithm = self.snapshot.scheduler_config().scheduler_algorithm;
        let mut stack = Stack::new(
            nodes,
            by_dc,
            self.batch,
            algorithm,
            self.env.settings.affinity_spread_node_limit,
            self.env.rng,
        );
        let mut placers: HashMap<String, GroupPlacer> = HashMap::new();
        for group in &job.task_groups {
            let placer = GroupPlacer::new(ctx, job, group);
            ctx.eligibility.set_escaped(placer.checks.escaped());
            placers.insert(group.name.clone(), placer);
        }

        let mut requests = Vec::new();
        for old in inplace {
            let Some(placer) = placers.get_mut(&old.task_group) else {
                continue;
            };
            if !self.try_inplace(ctx, &mut stack, placer, job, &old) {
                requests.push(PlaceRequest {
                    group: old.task_group.clone(),
                    name: old.name.clone(),
                    previous: Some(old),
                    stop_previous: Some(ALLOC_UPDATING),
                    reschedule: false,
                });
            }
        }
        requests.extend(place);

        for request in requests {
            let Some(placer) = placers.get_mut(&request.group) else {
                continue;
            };
            if let Some(metric) = run.failed_tg_allocs.get_mut(&request.group) {
                metric.coalesced_failures += 1;
                *run.queued.entry(request.group.clone()).or_default() += 1;
                continue;
            }
            if let (Some(prev), Some(description)) = (&request.previous, request.stop_previous) {
                ctx.plan_stop(prev, description, None, now);
            }
            let penalty: Vec<NodeId> = match &request.previous {
                Some(prev) if request.reschedule => {
                    let mut nodes = vec![prev.node_id.clone()];
                    if let Some(tracker) = &prev.reschedule_tracker {
                        nodes.extend(tracker.events.iter().map(|e| e.prev_node_id.clone()));
                    }
                    nodes
                }
                _ => Vec::new(),
            };
            match stack.select(ctx, placer, &penalty) {
                Some(node) => {
                    let reschedule_tracker = match &request.previous {
                        Some(prev) if request.reschedule => {
                            let policy = alloc_reschedule_policy(&self.snapshot, prev, job);
                            Some(reschedule_tracker_for(prev, policy, now))
                        }
                        _ => None,
                    };
                    let alloc = Allocation {
                        id: generate_uuid(self.env.rng).into(),
                        namespace: job.namespace.clone(),
                        eval_id: run.eval.id.clone(),
                        name: request.name,
                        node_id: node.id.clone(),
                        job_id: job.id.clone(),
                        job_version: job.version,
                        task_group: request.group,
                        resources: placer.ask,
                        desired_status: DesiredStatus::Run,
                        client_status: ClientStatus::Pending,
                        previous_allocation: request
                            .previous
                            .as_ref()
                            .map(|p| p.id.clone())
                            .unwrap_or_default(),
                        reschedule_tracker,
                        create_time: now,
                        modify_time: now,
                        ..Allocation::default()
                    };
                    ctx.plan_place(alloc);
                }
                None => {
                    if let (Some(prev), Some(_)) = (&request.previous, request.stop_previous) {
                        ctx.pop_stop(prev);
                    }
                    tracing::debug!(
                        eval_id = %run.eval.id,
                        task_group = %request.group,
                        nodes_evaluated = ctx.metrics.nodes_evaluated,
                        nodes_exhausted = ctx.metrics.nodes_exhausted,
                        nodes_filtered = ctx.metrics.nodes_filtered,
                        "no node for allocation"
                    );
                    *run.queued.entry(request.group.clone()).or_default() += 1;
                    run.failed_tg_allocs
                        .insert(request.group, std::mem::take(&mut ctx.metrics));
                }
            }
        }
    }

    /// Moves `old` to the job's new version where it runs, if its node still takes it
    /// (feasibility and fit with `old`'s own resources freed).
    fn try_inplace(
        &mut self,
        ctx: &mut EvalContext,
        stack: &mut Stack,
        placer: &mut GroupPlacer,
        job: &Job,
        old: &Arc<Allocation>,
    ) -> bool {
        let now = self.env.now;
        let Some(node) = self.snapshot.node_by_id(&old.node_id).cloned() else {
            return false;
        };
        ctx.plan_stop(old, ALLOC_IN_PLACE, None, now);
        let verdict = stack.evaluate(ctx, placer, &node, &[]);
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

    fn set_status(
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
        if let Some(blocked) = &run.blocked {
            eval.blocked_eval = blocked.id.clone();
        }
        eval.class_eligibility = run.eligibility.classes();
        eval.escaped_computed_class = run.eligibility.escaped();
        eval.snapshot_index = self.snapshot.latest_index();
        eval.modify_time = self.env.now;
        self.planner.update_eval(eval)
    }
}

impl Scheduler for GenericScheduler<'_> {
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
            blocked: None,
            failed_tg_allocs: BTreeMap::new(),
            queued: BTreeMap::new(),
            eligibility: Eligibility::default(),
        };
        let limit = self.max_attempts();
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
                let blocked = blocked_eval(
                    &run.eval,
                    generate_uuid(self.env.rng),
                    &run.failed_tg_allocs,
                    &run.eligibility,
                    true,
                    self.snapshot.latest_index(),
                    self.env.now,
                );
                self.planner.create_eval(blocked.clone())?;
                run.blocked = Some(blocked);
                return self.set_status(
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
        if eval.status == EvalStatus::Blocked && !run.failed_tg_allocs.is_empty() {
            let mut reblocked = run.eval.clone();
            reblocked.failed_tg_allocs = run.failed_tg_allocs.clone();
            reblocked.queued_allocations = run.queued.clone();
            reblocked.class_eligibility = run.eligibility.classes();
            reblocked.escaped_computed_class = run.eligibility.escaped();
            reblocked.snapshot_index = self.snapshot.latest_index();
            reblocked.modify_time = self.env.now;
            return self.planner.reblock_eval(reblocked);
        }
        self.set_status(&run, EvalStatus::Complete, String::new())
    }
}
