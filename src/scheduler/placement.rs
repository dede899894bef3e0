//! The placement loop the [`GenericScheduler`] and the [`SystemScheduler`] share: Nomad's
//! `Process`, `retryMax` and `setStatus`, and the start and end of `computeJobAllocs`. Each
//! scheduler, as a [`Family`], supplies only what differs: its attempt limit, how it blocks
//! what it could not place, and how it decides the job's stops, updates and placements.
//!
//! ```text
//!  process(eval)
//!   └─ attempt, until done (limit reset whenever a result made progress; 64 at most):
//!        snapshot → job, allocations, empty plan, EvalContext
//!        Family::compute_job_allocs        stops, updates, placements, failures → follow-ups
//!        per-job blocking: one queued-allocs blocked eval for the failed placements
//!        no-op plan → done · create the follow-ups · Planner::submit_plan
//!        partial commit → plan again on the fresh snapshot
//!   exhausted → (per-job blocking: max-plan-attempts blocked eval) · eval failed
//!   done → (per-job blocking: a blocked eval that still fails is reblocked) · eval complete
//! ```
//!
//! It also holds the pieces of planning both families use alike: the stack and the task
//! groups' placers of an attempt, a new allocation, and the in-place update of an
//! allocation whose node still takes the job's new version.
//!
//! [`GenericScheduler`]: crate::scheduler::GenericScheduler
//! [`SystemScheduler`]: crate::scheduler::SystemScheduler

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use teamster_storage::model::{
    AllocMetric, AllocatedCpuResources, AllocatedResources, AllocatedSharedResources,
    AllocatedTaskResources, Allocation, ClientStatus, DeploymentId, DesiredStatus, EvalStatus,
    EvalTrigger, Evaluation, Job, JobId, JobType, Namespace, Node, NodeId, Plan, Resources,
    Timestamp,
};
use teamster_storage::state::Snapshot;

use crate::scheduler::context::{Eligibility, EvalContext};
use crate::scheduler::preempt::Candidate;
use crate::scheduler::reconcile::ALLOC_IN_PLACE;
use crate::scheduler::stack::{GroupPlacer, Stack, Verdict};
use crate::scheduler::util::{blocked_eval, progress_made, PlanSize, ReadyScope};
use crate::scheduler::{fit, ports};
use crate::scheduler::{Planner, SchedulerEnv, SchedulerError};

/// Hard cap on attempts in one `process`, progress or not (bounded retries).
const MAX_TOTAL_ATTEMPTS: u32 = 64;

/// What a scheduler works with: the state it plans on (replaced by the fresh snapshot a
/// partial commit hands back), the planner it writes through, and the time and randomness.
pub(crate) struct Session<'a> {
    /// The state the next attempt plans on.
    pub snapshot: Snapshot,
    /// Where plans and evaluations go.
    pub planner: &'a mut dyn Planner,
    /// "Now", the RNG and the settings.
    pub env: SchedulerEnv<'a>,
}

/// What one `process` accumulates across attempts.
pub(crate) struct Run {
    /// The evaluation being processed.
    pub eval: Evaluation,
    /// The blocked evaluation created for it, linked from its final status.
    pub blocked: Option<Evaluation>,
    /// Per task group, the metrics of the placements that failed in the last attempt.
    pub failed_tg_allocs: BTreeMap<String, AllocMetric>,
    /// Per task group, the allocations the last attempt could not place.
    pub queued: BTreeMap<String, u64>,
    /// The classes the last attempt found (in)eligible.
    pub eligibility: Eligibility,
    /// When a locality level opens for a placement the last attempt made wait.
    pub widening: Option<i64>,
    /// Whether the evaluation for that widening was created.
    pub widening_eval: bool,
}

/// One attempt: what it plans on, and the plan it builds.
pub(crate) struct Attempt {
    /// The job, or `None` once purged.
    pub job: Option<Arc<Job>>,
    /// All the job's allocations in the snapshot.
    pub allocs: Vec<Arc<Allocation>>,
    /// The plan in progress and the views derived from it.
    pub ctx: EvalContext,
}

/// How a family makes sure that what it could not place is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blocking {
    /// The loop creates one blocked evaluation for the job: `queued-allocs` for failed
    /// placements (unless the evaluation is itself blocked or delayed reschedules will retry
    /// anyway), `max-plan-attempts` when the attempts are exhausted; a blocked evaluation
    /// that still cannot place everything is reblocked (service and batch).
    PerJob,
    /// The family creates a blocked evaluation per node that lacked resources while it
    /// places; the loop creates none (system and sysbatch).
    PerNode,
}

/// What a scheduler family supplies to the placement loop.
pub(crate) trait Family<'a> {
    /// How the family blocks what it could not place.
    const BLOCKING: Blocking;

    /// The scheduler's snapshot, planner and environment.
    fn session(&mut self) -> &mut Session<'a>;

    /// Plan attempts without progress before the evaluation fails.
    fn max_attempts(&self) -> u32;

    /// Decides the job's stops, updates and placements into the attempt's plan and records
    /// the failed placements in `run`. Returns the follow-up evaluations to create if the
    /// plan is submitted.
    fn compute_job_allocs(
        &mut self,
        run: &mut Run,
        attempt: &mut Attempt,
    ) -> Result<Vec<Evaluation>, SchedulerError>;
}

/// Schedules `eval` to completion with `family`'s decisions (see the module docs).
pub(crate) fn process<'a, F: Family<'a>>(
    family: &mut F,
    eval: &Evaluation,
) -> Result<(), SchedulerError> {
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
        widening: None,
        widening_eval: false,
    };
    let limit = family.max_attempts();
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
            let session = family.session();
            if F::BLOCKING == Blocking::PerJob {
                let blocked = blocked_eval(
                    &run.eval,
                    crate::util::new_uuid(session.env.rng),
                    &run.failed_tg_allocs,
                    &run.eligibility,
                    true,
                    session.snapshot.latest_index(),
                    session.env.now,
                );
                session.planner.create_eval(blocked.clone())?;
                run.blocked = Some(blocked);
            }
            return session.set_status(
                &run,
                EvalStatus::Failed,
                format!("maximum attempts reached ({limit})"),
            );
        }
        total += 1;
        let (done, progress) = attempt(family, &mut run)?;
        if done {
            break;
        }
        attempts = if progress { 0 } else { attempts + 1 };
    }
    let session = family.session();
    if F::BLOCKING == Blocking::PerJob
        && eval.status == EvalStatus::Blocked
        && !run.failed_tg_allocs.is_empty()
    {
        let reblocked = session.outcome(&run);
        return session.planner.reblock_eval(reblocked);
    }
    session.set_status(&run, EvalStatus::Complete, String::new())
}

/// One attempt: plan on the current snapshot and submit. Returns (done, progress made).
fn attempt<'a, F: Family<'a>>(
    family: &mut F,
    run: &mut Run,
) -> Result<(bool, bool), SchedulerError> {
    let session = family.session();
    let job: Option<Arc<Job>> = session
        .snapshot
        .job_by_id(&run.eval.namespace, &run.eval.job_id)
        .cloned();
    run.queued = job
        .iter()
        .flat_map(|j| j.task_groups.iter())
        .map(|g| (g.name.clone(), 0))
        .collect();
    run.failed_tg_allocs.clear();
    run.widening = None;
    let plan = Plan {
        eval_id: run.eval.id.clone(),
        priority: run.eval.priority,
        all_at_once: job.as_ref().is_some_and(|j| j.all_at_once),
        job: job.clone(),
        snapshot_index: session.snapshot.latest_index(),
        ..Plan::default()
    };
    let ctx = EvalContext::new(session.snapshot.clone(), plan, job.as_deref());
    let allocs: Vec<Arc<Allocation>> = session
        .snapshot
        .allocs_by_job(&run.eval.namespace, &run.eval.job_id)
        .cloned()
        .collect();
    let mut attempt = Attempt { job, allocs, ctx };
    let followups = family.compute_job_allocs(run, &mut attempt)?;
    let mut ctx = attempt.ctx;
    ctx.plan.preemption_evals = family.session().preemption_evals(&ctx, &run.eval);
    run.eligibility = ctx.eligibility.clone();

    let session = family.session();
    let delay_instead = !followups.is_empty() && run.eval.wait_until.is_zero();
    if F::BLOCKING == Blocking::PerJob
        && run.eval.status != EvalStatus::Blocked
        && !run.failed_tg_allocs.is_empty()
        && run.blocked.is_none()
        && !delay_instead
    {
        let blocked = blocked_eval(
            &run.eval,
            crate::util::new_uuid(session.env.rng),
            &run.failed_tg_allocs,
            &run.eligibility,
            false,
            session.snapshot.latest_index(),
            session.env.now,
        );
        session.planner.create_eval(blocked.clone())?;
        run.blocked = Some(blocked);
    }
    // A placement waiting for a preferred node is tried again when its next locality
    // level opens (a blocked evaluation already waits for capacity; it is not the one to
    // schedule this, nor does a blocked evaluation make another).
    if let Some(at) = run.widening {
        if !run.widening_eval && run.eval.status != EvalStatus::Blocked {
            let widening = widening_eval(
                &run.eval,
                crate::util::new_uuid(session.env.rng),
                at,
                session.env.now,
            );
            session.planner.create_eval(widening)?;
            run.widening_eval = true;
        }
    }
    if ctx.plan.is_no_op() {
        return Ok((true, false));
    }
    for followup in followups {
        session.planner.create_eval(followup)?;
    }
    let plan = ctx.plan;
    let size = PlanSize::of_plan(&plan);
    let (result, fresh) = session.planner.submit_plan(plan)?;
    let progress = progress_made(&result);
    if let Some(fresh) = fresh {
        tracing::debug!(
            eval_id = %run.eval.id,
            rejected = result.rejected_nodes.len(),
            refresh_index = result.refresh_index,
            "plan partially committed; planning again on a fresh snapshot"
        );
        session.snapshot = fresh;
        return Ok((false, progress));
    }
    if PlanSize::of_result(&result) != size {
        return Err(SchedulerError::MissingRefresh);
    }
    Ok((true, progress))
}

impl<'a> Session<'a> {
    /// A session on `snapshot`, writing through `planner`.
    pub fn new(snapshot: Snapshot, planner: &'a mut dyn Planner, env: SchedulerEnv<'a>) -> Self {
        Session {
            snapshot,
            planner,
            env,
        }
    }

    /// `run`'s evaluation with what the last attempt found: failed task groups, queued
    /// allocations, the blocked-eval link, class eligibility and the snapshot index.
    fn outcome(&self, run: &Run) -> Evaluation {
        let mut eval = run.eval.clone();
        eval.failed_tg_allocs = run.failed_tg_allocs.clone();
        eval.queued_allocations = run.queued.clone();
        if let Some(blocked) = &run.blocked {
            eval.blocked_eval = blocked.id.clone();
        }
        eval.class_eligibility = run.eligibility.classes();
        eval.escaped_computed_class = run.eligibility.escaped();
        eval.snapshot_index = self.snapshot.latest_index();
        eval.modify_time = self.env.now;
        eval
    }

    /// Nomad's `setStatus`: records the evaluation's final status and outcome.
    fn set_status(
        &mut self,
        run: &Run,
        status: EvalStatus,
        description: String,
    ) -> Result<(), SchedulerError> {
        let mut eval = self.outcome(run);
        eval.status = status;
        eval.status_description = description;
        self.planner.update_eval(eval)
    }

    /// The stack of one attempt over the job's candidate `nodes` (shuffled with the RNG), and
    /// a placer per task group of `job`, by name.
    pub fn stack(
        &mut self,
        ctx: &mut EvalContext,
        job: &Arc<Job>,
        scope: Arc<ReadyScope>,
        batch: bool,
    ) -> (Stack, HashMap<String, GroupPlacer>) {
        let algorithm = self.snapshot.scheduler_config().scheduler_algorithm;
        let stack = Stack::new(
            scope,
            batch,
            algorithm,
            self.env.settings.affinity_spread_node_limit,
            self.env.rng,
        );
        let mut placers = HashMap::new();
        for group in job.task_groups.iter() {
            let placer = GroupPlacer::new(ctx, job, group, self.env.now);
            ctx.eligibility.set_escaped(placer.checks.escaped());
            placers.insert(group.name.clone(), placer);
        }
        (stack, placers)
    }

    /// Whether the scheduler configuration lets `job_type`'s scheduler preempt.
    pub fn preemption_enabled(&self, job_type: JobType) -> bool {
        let config = self.snapshot.scheduler_config().preemption_config;
        match job_type {
            JobType::Service => config.service_scheduler_enabled,
            JobType::Batch => config.batch_scheduler_enabled,
            JobType::System => config.system_scheduler_enabled,
            JobType::SysBatch => config.sys_batch_scheduler_enabled,
            JobType::Core => false,
        }
    }

    /// One pending evaluation (`TriggeredBy: preemption`) per job whose allocations the plan
    /// evicts, so their schedulers replace them; committed with the plan only when some
    /// eviction is accepted.
    fn preemption_evals(&mut self, ctx: &EvalContext, eval: &Evaluation) -> Vec<Evaluation> {
        let mut jobs: BTreeMap<(Namespace, JobId), Arc<Job>> = BTreeMap::new();
        for stop in ctx.plan.node_preemptions.values().flatten() {
            let Some(alloc) = self.snapshot.alloc_by_id(&stop.id) else {
                continue;
            };
            let Some(job) = self
                .snapshot
                .job_by_id(&alloc.namespace, &alloc.job_id)
                .cloned()
            else {
                continue;
            };
            jobs.insert((alloc.namespace.clone(), alloc.job_id.clone()), job);
        }
        let now = self.env.now;
        jobs.into_values()
            .map(|job| Evaluation {
                id: crate::util::new_uuid(self.env.rng).into(),
                namespace: job.namespace.clone(),
                priority: job.priority,
                eval_type: job.job_type,
                triggered_by: EvalTrigger::Preemption,
                job_id: job.id.clone(),
                job_modify_index: job.job_modify_index,
                status: EvalStatus::Pending,
                previous_eval: eval.id.clone(),
                create_time: now,
                modify_time: now,
                ..Evaluation::default()
            })
            .collect()
    }

    /// What an allocation of `placer`'s group holds on `node` with the plan so far: its host
    /// ports, dynamic ones drawn with the RNG (none for a group without a network), and the
    /// cores of each task that reserves some, the lowest free ones first. `None` when the
    /// node cannot give them (ranking already checked it does).
    pub fn alloc_holdings(
        &mut self,
        ctx: &mut EvalContext,
        placer: &GroupPlacer,
        node: &Node,
    ) -> Option<AllocatedResources> {
        let mut held = AllocatedResources::default();
        if let Some(network) = &placer.network {
            let used = ctx.ports_in_use(node);
            match ports::assign(network, node, &used, self.env.rng) {
                Ok(ports) => {
                    held.shared = AllocatedSharedResources {
                        ports: ports.into(),
                    }
                }
                Err(reason) => {
                    tracing::warn!(node_id = %node.id, %reason, "ports ranked free could not be assigned");
                    return None;
                }
            }
        }
        if !placer.cores.is_empty() {
            let mut free = ctx.free_cores(node).into_iter();
            let mut tasks = BTreeMap::new();
            for (task, wanted) in &placer.cores {
                let reserved: Vec<u16> = free.by_ref().take(*wanted as usize).collect();
                if reserved.len() < *wanted as usize {
                    tracing::warn!(node_id = %node.id, task, "cores ranked free could not be reserved");
                    return None;
                }
                let cpu = AllocatedCpuResources {
                    cpu_shares: fit::cores_mhz(node, *wanted),
                    reserved_cores: reserved,
                };
                tasks.insert(task.clone(), AllocatedTaskResources { cpu });
            }
            held.tasks = Some(Box::new(tasks));
        }
        Some(held)
    }

    /// A new pending allocation of `job`'s `group` on `node_id` for `eval`, asking
    /// `resources` and holding `allocated` (its ports), with an id drawn from the RNG; the
    /// caller names it and sets what it replaces.
    pub fn new_alloc(
        &mut self,
        job: &Job,
        eval: &Evaluation,
        node_id: &NodeId,
        group: String,
        resources: Resources,
        allocated: AllocatedResources,
    ) -> Allocation {
        let now = self.env.now;
        Allocation {
            id: crate::util::new_uuid(self.env.rng).into(),
            namespace: job.namespace.clone(),
            eval_id: eval.id.clone(),
            node_id: node_id.clone(),
            job_id: job.id.clone(),
            job_version: job.version,
            task_group: group.into(),
            resources,
            allocated_resources: allocated,
            desired_status: DesiredStatus::Run,
            client_status: ClientStatus::Pending,
            create_time: now,
            modify_time: now,
            ..Allocation::default()
        }
    }
}

/// A pending evaluation of `eval`'s job held back until `at` (Unix nanoseconds), when a
/// locality level opens (`TriggeredBy: locality-wait`).
fn widening_eval(eval: &Evaluation, id: String, at: i64, now: i64) -> Evaluation {
    Evaluation {
        id: id.into(),
        namespace: eval.namespace.clone(),
        priority: eval.priority,
        eval_type: eval.eval_type,
        triggered_by: EvalTrigger::LocalityWait,
        job_id: eval.job_id.clone(),
        job_modify_index: eval.job_modify_index,
        status: EvalStatus::Pending,
        previous_eval: eval.id.clone(),
        wait_until: Timestamp::from_unix_nanos(at),
        create_time: now,
        modify_time: now,
        ..Evaluation::default()
    }
}

/// Places `alloc` with the evictions it needs: each victim is evicted for it, and it lists
/// them in `PreemptedAllocations`.
pub(crate) fn place_preempting(
    ctx: &mut EvalContext,
    mut alloc: Allocation,
    victims: &[Candidate],
    now: i64,
) {
    for victim in victims {
        ctx.plan_preempt(&victim.alloc, &alloc.id, now);
    }
    alloc.preempted_allocations = victims.iter().map(|v| v.alloc.id.clone()).collect();
    ctx.plan_place(alloc);
}

/// Nomad's `inplaceUpdate` for one allocation: moves `old` to `job`'s version on `node`
/// where it runs, if the node still takes it (feasibility and fit with `old`'s own resources
/// freed). False: the update must be destructive.
#[allow(clippy::too_many_arguments)]
pub(crate) fn inplace_update(
    ctx: &mut EvalContext,
    stack: &mut Stack,
    placer: &mut GroupPlacer,
    job: &Job,
    node: &Node,
    old: &Arc<Allocation>,
    deployment_id: &DeploymentId,
    now: i64,
) -> bool {
    ctx.plan_stop(old, ALLOC_IN_PLACE, None, now);
    placer.alloc_name.clone_from(&old.name);
    let verdict = stack.evaluate(ctx, placer, node, &[], false);
    ctx.pop_stop(old);
    if !matches!(verdict, Verdict::Feasible(_)) {
        return false;
    }
    let mut updated = (**old).clone();
    updated.job_version = job.version;
    updated.eval_id = ctx.plan.eval_id.clone();
    updated.resources = placer.ask_on(node);
    updated.modify_time = now;
    // It joins the version's deployment, whose health its client judges anew.
    if !deployment_id.is_empty() && updated.deployment_id != *deployment_id {
        updated.deployment_id = deployment_id.clone();
        updated.deployment_status = None;
    }
    ctx.plan_update(old, updated);
    true
}
