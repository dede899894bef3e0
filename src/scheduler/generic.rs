//! The generic scheduler for service and batch jobs (Nomad's `GenericScheduler`).
//!
//! One [`process`](crate::scheduler::Scheduler::process) runs attempts until a plan is fully
//! committed or nothing is left to do. Steps 1 and 2 are this scheduler's own; the rest is
//! the placement loop it shares with the system scheduler ([`crate::scheduler::placement`]),
//! with blocked evaluations per job:
//!
//! 1. Reconcile the job with its allocations ([`crate::scheduler::reconcile`]).
//! 2. Plan the stops, the follow-up markers of delayed reschedules, the in-place updates
//!    (each re-checked for feasibility on its node, else made destructive) and the
//!    placements. A destructive update, reschedule or migration stops the old allocation
//!    first, so its node may take the replacement, and takes the stop back if nothing fits.
//!    After a task group's first failure its further placements are coalesced into that
//!    failure's metrics instead of searching again. A supervisor job over its share of the
//!    cluster is not placed ([`crate::scheduler::supervisor`]); when no node takes an
//!    allocation and the service (batch) scheduler may preempt, a second selection counts
//!    nodes where evicting lower-priority allocations makes room
//!    ([`crate::scheduler::preempt`]).
//! 3. Failed placements: record `FailedTGAllocs` and create one blocked evaluation
//!    (`queued-allocs`) — unless the evaluation itself is blocked (it is reblocked at the end)
//!    or delayed reschedules will retry anyway.
//! 4. Create the follow-up evaluations, submit the plan. A partial commit comes back with a
//!    fresh snapshot: start again from 1. The attempt counter (5 for service, 2 for batch)
//!    resets whenever a result made progress; exhausted, a `max-plan-attempts` blocked eval
//!    is created and the evaluation fails.
//! 5. Update the evaluation: complete (or reblocked when it was a blocked one and still could
//!    not place everything), with `QueuedAllocations`, class eligibility and the snapshot index.

use std::collections::VecDeque;
use std::sync::Arc;

use teamster_storage::model::{
    AllocDeploymentStatus, Allocation, DeploymentId, Evaluation, Job, NodeId,
};

use crate::scheduler::context::EvalContext;
use crate::scheduler::placement::{
    self, inplace_update, place_preempting, Attempt, Blocking, Family, Run, Session,
};
use crate::scheduler::reconcile::{PlaceRequest, Placement, Reconciler, ALLOC_UPDATING};
use crate::scheduler::stack::Choice;
use crate::scheduler::supervisor::SupervisorCap;
use crate::scheduler::util::{alloc_reschedule_policy, ready_nodes, reschedule_tracker_for};
use crate::scheduler::{Scheduler, SchedulerError};

/// Schedules service (`batch == false`) or batch jobs.
pub struct GenericScheduler<'a> {
    batch: bool,
    session: Session<'a>,
}

impl<'a> GenericScheduler<'a> {
    /// A generic scheduler working in `session`; `batch` selects batch semantics.
    pub(crate) fn new(batch: bool, session: Session<'a>) -> Self {
        GenericScheduler { batch, session }
    }

    /// Plans in-place updates and placements.
    fn place(
        &mut self,
        run: &mut Run,
        ctx: &mut EvalContext,
        job: &Arc<Job>,
        inplace: Vec<Arc<Allocation>>,
        place: Vec<Placement>,
        deployment_id: &DeploymentId,
    ) {
        let now = self.session.env.now;
        let scope = ready_nodes(&self.session.snapshot, job, self.session.env.ready_nodes);
        let (mut stack, mut placers) = self.session.stack(ctx, job, scope, self.batch);
        let preempt = self.session.preemption_enabled(job.job_type);
        let supervisor_cap = job
            .is_supervisor()
            .then(|| SupervisorCap::new(&self.session.snapshot, job));

        let mut requests = Vec::new();
        for old in inplace {
            let Some(placer) = placers.get_mut(old.task_group.as_str()) else {
                continue;
            };
            let updated = match self.session.snapshot.node_by_id(&old.node_id).cloned() {
                Some(node) => inplace_update(
                    ctx,
                    &mut stack,
                    placer,
                    job,
                    &node,
                    &old,
                    deployment_id,
                    now,
                ),
                None => false,
            };
            if !updated {
                requests.push(PlaceRequest {
                    group: old.task_group.to_string(),
                    name: old.name.clone(),
                    previous: Some(old),
                    stop_previous: Some(ALLOC_UPDATING),
                    reschedule: false,
                    canary: false,
                });
            }
        }
        let mut requests: VecDeque<Placement> = requests.into_iter().map(Placement::One).collect();
        requests.extend(place);

        while let Some(next) = requests.pop_front() {
            let request = match next {
                Placement::One(request) => request,
                Placement::Fresh {
                    group,
                    mut names,
                    count,
                } => {
                    if count == 0 {
                        continue;
                    }
                    // Once the group failed, the rest of the batch is counted, never named.
                    if let Some(metric) = run.failed_tg_allocs.get_mut(&group) {
                        metric.coalesced_failures += count as u64;
                        *run.queued.entry(group).or_default() += count as u64;
                        continue;
                    }
                    let Some(name) = names.take_lowest() else {
                        continue;
                    };
                    let request = PlaceRequest {
                        group: group.clone(),
                        name,
                        previous: None,
                        stop_previous: None,
                        reschedule: false,
                        canary: false,
                    };
                    requests.push_front(Placement::Fresh {
                        group,
                        names,
                        count: count - 1,
                    });
                    request
                }
            };
            let Some(placer) = placers.get_mut(&request.group) else {
                continue;
            };
            if let Some(metric) = run.failed_tg_allocs.get_mut(&request.group) {
                metric.coalesced_failures += 1;
                *run.queued.entry(request.group.clone()).or_default() += 1;
                continue;
            }
            placer.alloc_name.clone_from(&request.name);
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
            // A supervisor over its share of the cluster is not placed anywhere.
            let capped = supervisor_cap
                .as_ref()
                .and_then(|cap| cap.admits(ctx, job, &placer.ask).err());
            // Preemption only when no node takes the allocation as things are (Nomad
            // selects a second time with `Preempt`); the first pass's metrics are kept if
            // that fails too.
            // A sticky disk's replacement goes back to its previous node when that node
            // takes it (Nomad's preferred node), else anywhere.
            let sticky_node = request
                .previous
                .as_ref()
                .filter(|_| group_is_sticky(job, &request.group))
                .map(|prev| prev.node_id.clone());
            let mut choice = None;
            if let Some(reason) = &capped {
                stack.reset_metrics(ctx);
                ctx.metrics.dimension_exhausted.insert(reason.clone(), 1);
            } else {
                choice = sticky_node
                    .as_ref()
                    .and_then(|id| stack.select_preferred(ctx, placer, id, false))
                    .or_else(|| stack.select(ctx, placer, &penalty, false));
            }
            if choice.is_none() && preempt && capped.is_none() {
                let first = ctx.metrics.clone();
                choice = stack.select(ctx, placer, &penalty, true);
                if choice.is_none() {
                    ctx.metrics = first;
                }
            }
            let chosen = choice.and_then(|choice| {
                let ports = self.session.alloc_holdings(ctx, placer, &choice.node)?;
                Some((choice, ports))
            });
            match chosen {
                Some((
                    Choice {
                        node,
                        score,
                        victims,
                    },
                    ports,
                )) => {
                    let reschedule_tracker = match &request.previous {
                        Some(prev) if request.reschedule => {
                            let policy = alloc_reschedule_policy(&self.session.snapshot, prev, job);
                            Some(reschedule_tracker_for(prev, policy, now))
                        }
                        _ => None,
                    };
                    let alloc = Allocation {
                        name: request.name,
                        previous_allocation: request
                            .previous
                            .as_ref()
                            .map(|p| p.id.clone())
                            .unwrap_or_default(),
                        reschedule_tracker,
                        placement_score: (score * 1e6).round() as i64,
                        deployment_id: deployment_id.clone(),
                        deployment_status: request.canary.then(|| {
                            Box::new(AllocDeploymentStatus {
                                canary: true,
                                ..AllocDeploymentStatus::default()
                            })
                        }),
                        ..self.session.new_alloc(
                            job,
                            &run.eval,
                            &node.id,
                            request.group,
                            placer.ask_on(&node),
                            ports,
                        )
                    };
                    place_preempting(ctx, alloc, &victims, now);
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
                    if let Some(at) = placer.locality_widening() {
                        run.widening = Some(run.widening.map_or(at, |w| w.min(at)));
                    }
                    run.failed_tg_allocs
                        .insert(request.group, std::mem::take(&mut ctx.metrics));
                }
            }
        }
    }
}

impl<'a> Family<'a> for GenericScheduler<'a> {
    const BLOCKING: Blocking = Blocking::PerJob;

    fn session(&mut self) -> &mut Session<'a> {
        &mut self.session
    }

    /// 5 for service, 2 for batch (by default).
    fn max_attempts(&self) -> u32 {
        let settings = &self.session.env.settings;
        if self.batch {
            settings.batch_max_attempts
        } else {
            settings.service_max_attempts
        }
    }

    /// Reconciles the job with its allocations, then plans the stops, the follow-up markers
    /// of delayed reschedules, the in-place updates and the placements.
    fn compute_job_allocs(
        &mut self,
        run: &mut Run,
        attempt: &mut Attempt,
    ) -> Result<Vec<Evaluation>, SchedulerError> {
        let Attempt { job, allocs, ctx } = attempt;
        let now = self.session.env.now;
        let eval = &run.eval;
        let reconciler = Reconciler {
            snapshot: &self.session.snapshot,
            job: job.as_ref(),
            eval,
            batch: self.batch,
            now,
        };
        let recon = reconciler.compute(allocs, self.session.env.rng);
        tracing::debug!(
            eval_id = %eval.id,
            job_id = %eval.job_id,
            stop = recon.stop.len(),
            place = recon.place.iter().map(Placement::count).sum::<usize>(),
            inplace = recon.inplace.len(),
            followups = recon.followup_evals.len(),
            "reconciled"
        );
        for stop in &recon.stop {
            ctx.plan_stop(&stop.alloc, stop.description, stop.client_status, now);
        }
        for updated in recon.attribute_updates {
            if let Some(old) = self.session.snapshot.alloc_by_id(&updated.id).cloned() {
                ctx.plan_update(&old, updated);
            }
        }
        ctx.plan.deployment = recon.deployment;
        ctx.plan.deployment_updates = recon.deployment_updates;
        if let Some(job) = job.as_ref().filter(|j| !j.stopped() && !j.is_parent()) {
            self.place(
                run,
                ctx,
                job,
                recon.inplace,
                recon.place,
                &recon.deployment_id,
            );
        }
        Ok(recon.followup_evals)
    }
}

impl Scheduler for GenericScheduler<'_> {
    fn process(&mut self, eval: &Evaluation) -> Result<(), SchedulerError> {
        placement::process(self, eval)
    }
}

/// Whether `group` of `job` keeps its ephemeral disk across replacements (`sticky`).
fn group_is_sticky(job: &Job, group: &str) -> bool {
    job.task_groups
        .iter()
        .find(|g| g.name == group)
        .is_some_and(|g| g.ephemeral_disk.as_ref().is_some_and(|d| d.sticky))
}
