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
//!   non-task fields changed and the node still takes it) or replaced (with an `update`
//!   block, at most `max_parallel` per evaluation, the rest by a `rolling-update`
//!   evaluation `stagger` later, as Nomad's system scheduler); a missing one is
//!   placed — sysbatch groups that already finished on the node for this job version are not
//!   run again.
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

use teamster_storage::model::{
    Allocation, ClientStatus, DeploymentId, DesiredStatus, EvalStatus, EvalTrigger, Evaluation,
    Job, Node, NodeId, NodeStatus, Timestamp,
};

use crate::scheduler::context::EvalContext;
use crate::scheduler::feasible::node_in_job_scope;
use crate::scheduler::placement::{
    self, inplace_update, place_preempting, Attempt, Blocking, Family, Run, Session,
};
use crate::scheduler::reconcile::{
    ALLOC_LOST, ALLOC_MIGRATING, ALLOC_NODE_TAINTED, ALLOC_NOT_NEEDED, ALLOC_UPDATING,
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
    /// Whether this evaluation made its rolling update's next step already.
    rolling_step_made: bool,
}

/// One placement the diff asks for.
struct Placement {
    node: Arc<Node>,
    group: String,
    /// A destructive update: the allocation it replaces.
    replaces: Option<Arc<Allocation>>,
}

impl<'a> SystemScheduler<'a> {
    /// A system scheduler working in `session`; `sysbatch` selects run-to-completion
    /// semantics.
    pub(crate) fn new(sysbatch: bool, session: Session<'a>) -> Self {
        SystemScheduler {
            sysbatch,
            session,
            blocked_nodes: BTreeSet::new(),
            rolling_step_made: false,
        }
    }

    /// Stops the live allocations of a stopped or purged job, as lost on lost nodes.
    fn stop_all(&self, ctx: &mut EvalContext, allocs: &[Arc<Allocation>]) {
        let now = self.session.env.now;
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

    /// The per-node diff, then the placements it asks for.
    fn diff_and_place(
        &mut self,
        run: &mut Run,
        ctx: &mut EvalContext,
        job: &Arc<Job>,
        allocs: &[Arc<Allocation>],
    ) -> Result<Option<Evaluation>, SchedulerError> {
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
                    finished.insert((alloc.node_id.clone(), alloc.task_group.to_string()));
                }
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

        let mut placements: Vec<Placement> = Vec::new();
        let mut node_ids: Vec<&NodeId> = eligible.keys().collect();
        node_ids.sort();
        // A group with an update block replaces at most `max_parallel` allocations per
        // evaluation (Nomad's system rolling update); the rest wait for the next one,
        // `stagger` later. What an earlier attempt of this evaluation committed (a plan
        // partly applied, then retried) counts against it.
        let mut budget: HashMap<String, u32> = job
            .task_groups
            .iter()
            .filter_map(|g| {
                let update = g.update.as_ref().filter(|u| u.max_parallel() > 0)?;
                let done = allocs
                    .iter()
                    .filter(|a| {
                        a.eval_id == run.eval.id
                            && a.task_group.as_str() == g.name
                            && !a.previous_allocation.is_empty()
                    })
                    .count();
                let left = update.max_parallel().saturating_sub(done as u32);
                Some((g.name.clone(), left))
            })
            .collect();
        let mut next_roll: Option<u64> = None;
        for node_id in node_ids {
            let node = &eligible[node_id];
            for group in job.task_groups.iter().filter(|g| g.count > 0) {
                let key = (node.id.clone(), group.name.clone());
                match live.get(&key) {
                    Some(alloc) if alloc.job_version == job.version => {}
                    Some(alloc) => {
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
                                &DeploymentId::default(),
                                now,
                            )
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
            // A replacement spends the group's budget only once it takes effect (placed, or
            // the node no longer takes the group); none left: the next step does it.
            let rolling = placement.replaces.is_some() && budget.contains_key(&placement.group);
            if rolling && budget[&placement.group] == 0 {
                let stagger = job
                    .task_group(&placement.group)
                    .and_then(|g| g.update.as_ref())
                    .map_or(0, |u| u.stagger());
                next_roll = Some(next_roll.map_or(stagger, |n| n.min(stagger)));
                continue;
            }
            let mut spend = || {
                if rolling {
                    if let Some(left) = budget.get_mut(&placement.group) {
                        *left = left.saturating_sub(1);
                    }
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
                    spend();
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
                    spend();
                }
                None => {
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
        // Nomad's `NextRollingEval`: the rest of the rolling update, `stagger` from now.
        // One per evaluation (not again when a plan is retried), and none while another
        // step of this job's roll is pending (another evaluation started it).
        let pending_step = self
            .session
            .snapshot
            .evals_by_job(&job.namespace, &job.id)
            .any(|e| {
                e.triggered_by == EvalTrigger::RollingUpdate
                    && e.status == EvalStatus::Pending
                    && e.id != run.eval.id
            });
        if self.rolling_step_made || pending_step {
            return Ok(None);
        }
        self.rolling_step_made = next_roll.is_some();
        Ok(next_roll.map(|stagger| Evaluation {
            id: crate::util::new_uuid(self.session.env.rng).into(),
            namespace: job.namespace.clone(),
            priority: run.eval.priority,
            eval_type: job.job_type,
            triggered_by: EvalTrigger::RollingUpdate,
            job_id: job.id.clone(),
            job_modify_index: job.job_modify_index,
            status: EvalStatus::Pending,
            wait_until: Timestamp::from_unix_nanos(
                now.saturating_add(i64::try_from(stagger).unwrap_or(i64::MAX)),
            ),
            previous_eval: run.eval.id.clone(),
            create_time: now,
            modify_time: now,
            ..Evaluation::default()
        }))
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
                self.stop_all(&mut attempt.ctx, &attempt.allocs);
                Ok(Vec::new())
            }
            Some(job) => Ok(self
                .diff_and_place(run, &mut attempt.ctx, job, &attempt.allocs)?
                .into_iter()
                .collect()),
        }
    }
}

impl Scheduler for SystemScheduler<'_> {
    fn process(&mut self, eval: &Evaluation) -> Result<(), SchedulerError> {
        self.blocked_nodes.clear();
        self.rolling_step_made = false;
        placement::process(self, eval)
    }
}
