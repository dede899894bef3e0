//! The system scheduler for system and sysbatch jobs (Nomad's `SystemScheduler`): one
//! allocation of each task group on every ready, eligible node in the job's datacenters and
//! pool that satisfies its constraints.
//!
//! Per attempt, a per-node diff ([`SystemScheduler`]'s `diff`):
//!
//! - allocations on missing, `down` or `disconnected` nodes are stopped as `lost`; on nodes
//!   outside the job's datacenters or pool, of removed task groups, or of a stopped or purged
//!   job, they are stopped; a second live allocation of the same group on one node is
//!   stopped; one marked to migrate (`alloc stop`, or the node drainer once everything else
//!   left a draining node) is stopped, and replaced on its node like a missing one if the
//!   node still takes it;
//! - on ready nodes that are merely ineligible or draining, existing allocations are left
//!   alone;
//! - on eligible nodes, an allocation of an older job version is updated in place (if only
//!   non-task fields changed and the node still takes it) or replaced; a missing one is
//!   placed — sysbatch groups that already finished on the node for this job version are not
//!   run again.
//!
//! A system group with an `update` block (`max_parallel` > 0) rolls out through a deployment
//! (Nomad 1.11's system deployments; see [`Rollout`]): at most `max_parallel` of the
//! deployment's allocations unjudged at once, the next ones placed by the evaluation the
//! deployment watcher makes as they turn healthy; `canary` percent of the nodes to update
//! (rounded up, at most `max_parallel`) replaced by canaries first, the rest after
//! promotion; nothing more replaced while the deployment is paused or failed. Its
//! `DesiredTotal` is the group's nodes: where it runs or was placed, not where it was
//! filtered out or found no room.
//!
//! A node that filters the group out (constraints, drivers) is simply skipped; a node that
//! lacks resources is a failed placement: it is recorded in `FailedTGAllocs` and gets its own
//! blocked evaluation (`NodeID` set), so capacity freed on that node wakes it. New nodes
//! become ready → the node endpoints create node-update evaluations → this diff places on them.
//!
//! The attempts, the plan submissions and the evaluation's status are the placement loop this
//! scheduler shares with the generic one ([`crate::scheduler::placement`]).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use teamster_storage::model::deployment::{DESC_NEWER_JOB, DESC_STOPPED_JOB, DESC_SUCCESSFUL};
use teamster_storage::model::{
    AllocDeploymentStatus, Allocation, ClientStatus, Deployment, DeploymentId, DeploymentStatus,
    DeploymentStatusUpdate, DesiredStatus, EvalStatus, Evaluation, Job, Node, NodeId, NodeStatus,
    TaskGroup,
};

use crate::scheduler::context::EvalContext;
use crate::scheduler::feasible::node_in_job_scope;
use crate::scheduler::placement::{
    self, inplace_update, place_preempting, Attempt, Blocking, Family, Run, Session,
};
use crate::scheduler::reconcile::{
    new_deployment, new_group_state, ALLOC_LOST, ALLOC_MIGRATING, ALLOC_NODE_TAINTED,
    ALLOC_NOT_NEEDED, ALLOC_UPDATING,
};
use crate::scheduler::stack::Verdict;
use crate::scheduler::util::{alloc_name, blocked_eval, ready_nodes, tasks_updated};
use crate::scheduler::{Scheduler, SchedulerError};

/// Schedules system (`sysbatch == false`) or sysbatch jobs.
pub struct SystemScheduler<'a> {
    sysbatch: bool,
    session: Session<'a>,
    /// Nodes that already got a blocked evaluation in this `process`.
    blocked_nodes: BTreeSet<NodeId>,
}

/// One placement the diff asks for.
struct Placement {
    node: Arc<Node>,
    group: String,
    /// A destructive update: the allocation it replaces.
    replaces: Option<Arc<Allocation>>,
    /// Placed as a canary of the deployment.
    canary: bool,
}

impl<'a> SystemScheduler<'a> {
    /// A system scheduler working in `session`; `sysbatch` selects run-to-completion
    /// semantics.
    pub(crate) fn new(sysbatch: bool, session: Session<'a>) -> Self {
        SystemScheduler {
            sysbatch,
            session,
            blocked_nodes: BTreeSet::new(),
        }
    }

    /// Stops the live allocations of a stopped or purged job, as lost on lost nodes, and
    /// cancels its active deployment.
    fn stop_all(&self, ctx: &mut EvalContext, eval: &Evaluation, allocs: &[Arc<Allocation>]) {
        let now = self.session.env.now;
        if let Some(d) = self
            .session
            .snapshot
            .latest_deployment(&eval.namespace, &eval.job_id)
            .filter(|d| d.active())
        {
            ctx.plan.deployment_updates.push(status_update(
                &d,
                DeploymentStatus::Cancelled,
                DESC_STOPPED_JOB,
            ));
        }
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

    fn node_lost(&self, node_id: &NodeId) -> bool {
        self.session
            .snapshot
            .node_by_id(node_id)
            .is_none_or(|n| matches!(n.status, NodeStatus::Down | NodeStatus::Disconnected))
    }

    /// The job's deployment as this evaluation finds it: one of an older version that is
    /// still active is cancelled ("newer version"); a successful or cancelled one of this
    /// version means no new one is made for it.
    fn rollout(&self, ctx: &mut EvalContext, job: &Job) -> Rollout {
        let mut rollout = Rollout::default();
        if self.sysbatch {
            return rollout;
        }
        let Some(d) = self
            .session
            .snapshot
            .latest_deployment(&job.namespace, &job.id)
        else {
            return rollout;
        };
        if d.job_version != job.version || d.job_create_index != job.create_index {
            if d.active() {
                ctx.plan.deployment_updates.push(status_update(
                    &d,
                    DeploymentStatus::Cancelled,
                    DESC_NEWER_JOB,
                ));
            }
            return rollout;
        }
        match d.status {
            DeploymentStatus::Successful | DeploymentStatus::Cancelled => {
                rollout.finished = true;
            }
            _ => {
                rollout.current = Some((*d).clone());
                rollout.stored = Some(d);
            }
        }
        rollout
    }

    /// The per-node diff, then the placements it asks for.
    fn diff_and_place(
        &mut self,
        run: &mut Run,
        ctx: &mut EvalContext,
        job: &Arc<Job>,
        allocs: &[Arc<Allocation>],
    ) -> Result<(), SchedulerError> {
        let now = self.session.env.now;
        let scope = ready_nodes(&self.session.snapshot, job, self.session.env.ready_nodes);
        let eligible: HashMap<NodeId, Arc<Node>> = scope
            .nodes
            .iter()
            .map(|n| (n.id.clone(), n.clone()))
            .collect();
        // Every eligible node is visited explicitly (Nomad's static iterator); the stack
        // holds the job-wide class cache and the metrics' node counts.
        let (mut stack, mut placers) = self.session.stack(ctx, job, scope, false);
        let preempt = self.session.preemption_enabled(job.job_type);
        let mut rollout = self.rollout(ctx, job);

        // Live allocation per (node, group); nodes where the group ran this version and
        // ended (a sysbatch run finished; for a system job, a replacement, which makes no
        // deployment); the newest ended allocation per (node, group).
        let mut live: HashMap<(NodeId, String), Arc<Allocation>> = HashMap::new();
        let mut finished: BTreeSet<(NodeId, String)> = BTreeSet::new();
        let mut ran_this_version: BTreeSet<(NodeId, String)> = BTreeSet::new();
        let mut ended: HashMap<(NodeId, String), Arc<Allocation>> = HashMap::new();
        let mut sorted: Vec<&Arc<Allocation>> = allocs.iter().collect();
        sorted.sort_by(|a, b| (a.create_index, &a.id).cmp(&(b.create_index, &b.id)));
        for alloc in sorted {
            if alloc.terminal_status() {
                let key = (alloc.node_id.clone(), alloc.task_group.to_string());
                if alloc.job_version == job.version {
                    ran_this_version.insert(key.clone());
                }
                if self.sysbatch
                    && alloc.job_version == job.version
                    && alloc.desired_status == DesiredStatus::Run
                    && matches!(
                        alloc.client_status,
                        ClientStatus::Complete | ClientStatus::Failed
                    )
                {
                    finished.insert(key.clone());
                }
                ended.insert(key, alloc.clone());
                continue;
            }
            if self.node_lost(&alloc.node_id) {
                ctx.plan_stop(alloc, ALLOC_LOST, Some(ClientStatus::Lost), now);
                continue;
            }
            if alloc.desired_transition.should_migrate() {
                // `alloc stop`: stopped here; the node gets a new one below if it still
                // takes the group. Marked by the node drainer: stopped as Nomad's
                // `allocNodeTainted` (the draining node takes no new one).
                let draining = self
                    .session
                    .snapshot
                    .node_by_id(&alloc.node_id)
                    .is_some_and(|n| n.drain_strategy.is_some());
                let description = if draining {
                    ALLOC_NODE_TAINTED
                } else {
                    ALLOC_MIGRATING
                };
                ctx.plan_stop(alloc, description, None, now);
                continue;
            }
            if let Some(node) = self.session.snapshot.node_by_id(&alloc.node_id) {
                // On a draining node it stays until the node drainer marks it (last).
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

        let mut node_ids: Vec<&NodeId> = eligible.keys().collect();
        node_ids.sort();
        let groups: Vec<&TaskGroup> = job.task_groups.iter().filter(|g| g.count > 0).collect();

        // A group with an update block (`max_parallel` > 0) rolls out through a deployment
        // (Nomad 1.11's system deployments): one is made for the version when such a group
        // has work on some node (an older version to replace, or a node that never ran this
        // version), unless this version already had one, or already runs somewhere outside
        // one (Nomad's compatibility rule: a roll begun before system deployments, whose
        // allocations a new deployment could never count healthy).
        let runs_outside = live
            .values()
            .any(|a| a.job_version == job.version && a.deployment_id.is_empty());
        if !self.sysbatch {
            let rolling_with_work: Vec<&TaskGroup> = groups
                .iter()
                .copied()
                .filter(|g| g.update.as_ref().is_some_and(|u| u.rolls()))
                .filter(|g| {
                    node_ids.iter().any(|id| {
                        let key = ((*id).clone(), g.name.clone());
                        match live.get(&key) {
                            Some(alloc) => alloc.job_version != job.version,
                            None => !ran_this_version.contains(&key),
                        }
                    })
                })
                .collect();
            if rollout.current.is_none()
                && !rollout.finished
                && !runs_outside
                && !rolling_with_work.is_empty()
            {
                rollout.current = Some(new_deployment(
                    job,
                    run.eval.priority,
                    crate::util::new_uuid(self.session.env.rng).into(),
                    now,
                ));
            }
            if let Some(d) = rollout.current.as_mut().filter(|d| d.active()) {
                for group in rolling_with_work {
                    d.task_groups
                        .entry(group.name.clone())
                        .or_insert_with(|| new_group_state(group));
                }
            }
        }
        // Only the groups an active deployment tracks join it.
        let joins: HashMap<&str, DeploymentId> = groups
            .iter()
            .map(|g| {
                let id = rollout
                    .current
                    .as_ref()
                    .filter(|d| d.active() && d.task_groups.contains_key(&g.name))
                    .map(|d| d.id.clone())
                    .unwrap_or_default();
                (g.name.as_str(), id)
            })
            .collect();

        let mut counts: HashMap<String, GroupCount> = HashMap::new();
        let mut placements: Vec<Placement> = Vec::new();
        for node_id in node_ids {
            let node = &eligible[node_id];
            for group in &groups {
                let key = (node.id.clone(), group.name.clone());
                let count = counts.entry(group.name.clone()).or_default();
                let deployment_id = &joins[group.name.as_str()];
                match live.get(&key) {
                    Some(alloc) if alloc.job_version == job.version => {
                        count.candidates += 1;
                        count.healthy += u32::from(alloc.is_healthy());
                        if !deployment_id.is_empty() && alloc.deployment_id == *deployment_id {
                            count.canaries += u32::from(alloc.is_canary());
                            count.unjudged +=
                                u32::from(!alloc.is_healthy() && !alloc.is_unhealthy());
                        }
                    }
                    Some(alloc) => {
                        count.candidates += 1;
                        let destructive = match self.session.snapshot.alloc_job(alloc) {
                            Some(old) => tasks_updated(old, job, &group.name),
                            None => true,
                        };
                        let placer = placers
                            .get_mut(&group.name)
                            .expect("a placer exists for every group");
                        if destructive
                            || !inplace_update(
                                ctx,
                                &mut stack,
                                placer,
                                job,
                                node,
                                alloc,
                                deployment_id,
                                now,
                            )
                        {
                            count.destructive += 1;
                            placements.push(Placement {
                                node: node.clone(),
                                group: group.name.clone(),
                                replaces: Some(alloc.clone()),
                                canary: false,
                            });
                        }
                    }
                    None if finished.contains(&key) => {}
                    None => {
                        count.candidates += 1;
                        // A failed canary's node gets a canary again, which counts as one.
                        let canary = !deployment_id.is_empty()
                            && ended.get(&key).is_some_and(|a| {
                                a.deployment_id == *deployment_id
                                    && a.is_canary()
                                    && a.job_version == job.version
                            });
                        count.canaries += u32::from(canary);
                        placements.push(Placement {
                            node: node.clone(),
                            group: group.name.clone(),
                            replaces: None,
                            canary,
                        });
                    }
                }
            }
        }

        // What each group may replace in this evaluation.
        let mut gates: HashMap<String, Gate> = HashMap::new();
        for group in &groups {
            let count = counts.get(&group.name).cloned().unwrap_or_default();
            let update = group.update.as_ref().filter(|u| u.rolls());
            let state = rollout
                .current
                .as_ref()
                .and_then(|d| d.task_groups.get(&group.name));
            let gate = match (update, &rollout.current, state) {
                (None, _, _) => Gate::All,
                // A paused or failed deployment replaces nothing more, in any group.
                (Some(_), Some(d), _)
                    if matches!(
                        d.status,
                        DeploymentStatus::Paused | DeploymentStatus::Failed
                    ) =>
                {
                    Gate::Hold
                }
                (Some(update), Some(_), Some(state)) => {
                    if update.canary() > 0
                        && !state.promoted
                        && job.version != 0
                        && (count.destructive > 0 || count.canaries > 0)
                    {
                        let required = (update.canary() as u64
                            * u64::from(count.destructive + count.canaries))
                        .div_ceil(100)
                        .min(u64::from(update.max_parallel()))
                            as u32;
                        Gate::Canaries {
                            required,
                            left: required.saturating_sub(count.canaries),
                        }
                    } else {
                        Gate::Limit(update.max_parallel().saturating_sub(count.unjudged))
                    }
                }
                // Rolling without a deployment (this version had one already).
                (Some(update), _, _) => Gate::Limit(update.max_parallel()),
            };
            gates.insert(group.name.clone(), gate);
        }

        for mut placement in placements {
            let gate = gates
                .get_mut(&placement.group)
                .expect("a gate exists for every group");
            if placement.replaces.is_some() {
                match gate {
                    Gate::Hold | Gate::Limit(0) | Gate::Canaries { left: 0, .. } => continue,
                    Gate::Canaries { .. } => placement.canary = true,
                    Gate::All | Gate::Limit(_) => {}
                }
            }
            let placer = placers
                .get_mut(&placement.group)
                .expect("a placer exists for every group");
            let deployment_id = &joins[placement.group.as_str()];
            // A replacement spends the gate once placed. One whose node no longer takes the
            // group only stops the old allocation: nothing turns healthy to move the roll
            // on, so it spends nothing (the next nodes go in the same evaluation).
            let spend = |gate: &mut Gate| {
                if placement.replaces.is_none() {
                    return;
                }
                match gate {
                    Gate::Limit(left) | Gate::Canaries { left, .. } => {
                        *left = left.saturating_sub(1)
                    }
                    Gate::All | Gate::Hold => {}
                }
            };
            if let Some(old) = &placement.replaces {
                ctx.plan_stop(old, ALLOC_UPDATING, None, now);
            }
            stack.reset_metrics(ctx);
            placer.alloc_name = alloc_name(&job.id, &placement.group, 0);
            // System jobs preempt as part of ranking the node (when configured). A node that
            // does not take the group (for an update: any more, so the old allocation's stop
            // stands) is not a failure: the job does not want this node.
            let victims = match stack.evaluate(ctx, placer, &placement.node, &[], preempt) {
                Verdict::Filtered => {
                    uncount(&mut counts, &placement);
                    continue;
                }
                Verdict::Exhausted => None,
                Verdict::Feasible(_) => Some(Vec::new()),
                Verdict::Preempt(_, victims) => Some(victims),
            };
            let placed = victims.and_then(|victims| {
                let ports = self.session.alloc_holdings(ctx, placer, &placement.node)?;
                Some((victims, ports))
            });
            match placed {
                Some((victims, ports)) => {
                    let alloc = Allocation {
                        name: alloc_name(&job.id, &placement.group, 0),
                        previous_allocation: placement
                            .replaces
                            .as_ref()
                            .map(|a| a.id.clone())
                            .unwrap_or_default(),
                        deployment_id: deployment_id.clone(),
                        deployment_status: (placement.canary && !deployment_id.is_empty()).then(
                            || {
                                Box::new(AllocDeploymentStatus {
                                    canary: true,
                                    ..AllocDeploymentStatus::default()
                                })
                            },
                        ),
                        ..self.session.new_alloc(
                            job,
                            &run.eval,
                            &placement.node.id,
                            placement.group.clone(),
                            placer.ask_on(&placement.node),
                            ports,
                        )
                    };
                    place_preempting(ctx, alloc, &victims, now);
                    spend(gate);
                }
                None => {
                    uncount(&mut counts, &placement);
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
                        && self.blocked_nodes.insert(placement.node.id.clone())
                    {
                        let mut blocked = blocked_eval(
                            &run.eval,
                            crate::util::new_uuid(self.session.env.rng),
                            &run.failed_tg_allocs,
                            &ctx.eligibility,
                            false,
                            self.session.snapshot.latest_index(),
                            now,
                        );
                        blocked.node_id = placement.node.id.clone();
                        self.session.planner.create_eval(blocked)?;
                    }
                }
            }
        }
        rollout.settle(ctx, &counts, &gates);
        Ok(())
    }
}

/// A system job's deployment as one evaluation sees it.
#[derive(Default)]
struct Rollout {
    /// The deployment of the job's version that has not finished (running, paused or
    /// failed), or the one this evaluation makes.
    current: Option<Deployment>,
    /// `current` as stored (`None`: made by this evaluation).
    stored: Option<Arc<Deployment>>,
    /// A deployment of this version succeeded or was cancelled: no new one is made.
    finished: bool,
}

impl Rollout {
    /// Records in the plan what this evaluation learned about the deployment: each group's
    /// nodes (`DesiredTotal`, as Nomad counts them for system jobs: where the group is or
    /// could be placed) and canaries. It is done when nothing waits for promotion and every
    /// group's nodes run this version, judged healthy, with nothing placed by this
    /// evaluation (the allocations themselves are looked at, not the deployment's health
    /// count, which a crashed and replaced allocation counts twice).
    fn settle(
        self,
        ctx: &mut EvalContext,
        counts: &HashMap<String, GroupCount>,
        gates: &HashMap<String, Gate>,
    ) {
        let Some(mut d) = self.current else {
            return;
        };
        let mut complete = true;
        for (name, state) in d.task_groups.iter_mut() {
            let count = counts.get(name).cloned().unwrap_or_default();
            state.desired_total = count.candidates;
            if let Some(Gate::Canaries { required, .. }) = gates.get(name) {
                state.desired_canaries = *required;
            }
            complete &= count.healthy >= count.candidates;
        }
        complete &= !d.requires_promotion();
        match &self.stored {
            None if d.task_groups.values().all(|g| g.desired_total == 0) => return,
            None => {}
            Some(_) if complete && d.status == DeploymentStatus::Running => {
                ctx.plan.deployment_updates.push(status_update(
                    &d,
                    DeploymentStatus::Successful,
                    DESC_SUCCESSFUL,
                ));
            }
            Some(_) => {}
        }
        if d.status == DeploymentStatus::Running {
            d.status_description = d.running_description().to_owned();
        }
        if self.stored.as_deref() != Some(&d) {
            ctx.plan.deployment = Some(d);
        }
    }
}

/// A group's nodes in one evaluation.
#[derive(Debug, Default, Clone)]
struct GroupCount {
    /// Eligible nodes where the group is, or is placed.
    candidates: u32,
    /// Of those, running this version and judged healthy.
    healthy: u32,
    /// Of its live allocations of this version in the deployment: canaries.
    canaries: u32,
    /// ... and those whose health is not judged yet (they count against `max_parallel`).
    unjudged: u32,
    /// Allocations of an older version to replace.
    destructive: u32,
}

/// What a group may replace in one evaluation.
#[derive(Debug, Clone, Copy)]
enum Gate {
    /// Everything (no update block, or `max_parallel = 0`).
    All,
    /// Nothing: the deployment is paused or failed.
    Hold,
    /// This many more (`max_parallel`, less the deployment's allocations not yet judged).
    Limit(u32),
    /// Canaries, until promoted: `required` in all (the `canary` percentage of the nodes to
    /// update, rounded up, at most `max_parallel`), `left` still to place.
    Canaries { required: u32, left: u32 },
}

/// A placement that did not take (node filtered or full) is not one of its group's nodes.
fn uncount(counts: &mut HashMap<String, GroupCount>, placement: &Placement) {
    if let Some(count) = counts.get_mut(&placement.group) {
        count.candidates = count.candidates.saturating_sub(1);
        if placement.replaces.is_some() {
            count.destructive = count.destructive.saturating_sub(1);
        }
    }
}

fn status_update(d: &Deployment, status: DeploymentStatus, why: &str) -> DeploymentStatusUpdate {
    DeploymentStatusUpdate {
        deployment_id: d.id.clone(),
        status,
        status_description: why.to_owned(),
    }
}

impl<'a> Family<'a> for SystemScheduler<'a> {
    const BLOCKING: Blocking = Blocking::PerNode;

    fn session(&mut self) -> &mut Session<'a> {
        &mut self.session
    }

    fn max_attempts(&self) -> u32 {
        self.session.env.settings.system_max_attempts
    }

    /// Stops everything of a stopped or purged job (as lost on lost nodes); else the
    /// per-node diff and its placements.
    fn compute_job_allocs(
        &mut self,
        run: &mut Run,
        attempt: &mut Attempt,
    ) -> Result<Vec<Evaluation>, SchedulerError> {
        match attempt
            .job
            .as_ref()
            .filter(|j| !j.stopped() && !j.is_parent())
        {
            None => {
                self.stop_all(&mut attempt.ctx, &run.eval, &attempt.allocs);
                Ok(Vec::new())
            }
            Some(job) => {
                self.diff_and_place(run, &mut attempt.ctx, job, &attempt.allocs)?;
                Ok(Vec::new())
            }
        }
    }
}

impl Scheduler for SystemScheduler<'_> {
    fn process(&mut self, eval: &Evaluation) -> Result<(), SchedulerError> {
        self.blocked_nodes.clear();
        placement::process(self, eval)
    }
}
