//! The supervisor cap (a teamster extension, after Arvados' `SupervisorFraction`): jobs that
//! launch other jobs — workflow runners, pipeline drivers, marked with the job meta key
//! `teamster.supervisor = "true"` ([`SUPERVISOR_META`]) — may together hold at most the
//! scheduler configuration's `SupervisorFraction` (default 0.3) of the cluster's CPU and of
//! its memory, so a burst of supervisors cannot take every node and starve the children
//! they wait for.
//!
//! ```text
//!  cluster  = Σ capacity of ready, eligible, non-draining nodes      (CPU, memory)
//!  held     = Σ live allocations of every other supervisor job
//!           + the job's own live allocations the plan keeps + what it places
//!  a placement of a supervisor's ask is admitted iff held + ask ≤ fraction × cluster
//!  in both dimensions; otherwise it fails with the reason in FailedTGAllocs
//!  (DimensionExhausted "supervisor fraction: …") and the job's blocked evaluation waits
//!  for capacity (an allocation ending, a node joining) like any other
//! ```
//!
//! Only the generic scheduler places supervisors: job validation refuses the mark on
//! system and sysbatch jobs.
//!
//! [`SUPERVISOR_META`]: teamster_storage::model::SUPERVISOR_META

use std::collections::BTreeSet;

use teamster_storage::model::{AllocId, Job, NodeStatus, Resources, SchedulingEligibility};
use teamster_storage::state::Snapshot;

use crate::scheduler::context::EvalContext;
use crate::scheduler::fit;

/// The cap as one evaluation of a supervisor job sees it.
#[derive(Debug, Clone)]
pub(crate) struct SupervisorCap {
    fraction: f64,
    /// CPU and memory of the cluster's schedulable nodes.
    cluster: Resources,
    /// What the other supervisor jobs' live allocations hold.
    others: Resources,
}

impl SupervisorCap {
    /// The cap for `job` on `snapshot` (the fraction comes from its scheduler configuration).
    pub fn new(snapshot: &Snapshot, job: &Job) -> SupervisorCap {
        let cluster = snapshot
            .nodes()
            .filter(|n| {
                n.status == NodeStatus::Ready
                    && n.scheduling_eligibility == SchedulingEligibility::Eligible
                    && n.drain_strategy.is_none()
            })
            .fold(Resources::ZERO, |acc, n| acc.add(&fit::node_capacity(n)));
        let others = snapshot
            .jobs()
            .filter(|j| j.is_supervisor() && !(j.namespace == job.namespace && j.id == job.id))
            .flat_map(|j| snapshot.allocs_by_job(&j.namespace, &j.id))
            .filter(|a| !a.terminal_status())
            .fold(Resources::ZERO, |acc, a| acc.add(&a.resources));
        SupervisorCap {
            fraction: snapshot.scheduler_config().supervisor_fraction,
            cluster,
            others,
        }
    }

    /// `Ok` when one more allocation asking `ask` keeps the supervisors within the cap, with
    /// `ctx`'s plan so far counted; the reason (a `DimensionExhausted` key) otherwise.
    pub fn admits(&self, ctx: &EvalContext, job: &Job, ask: &Resources) -> Result<(), String> {
        let held = self.others.add(&job_usage(ctx, job)).add(ask);
        let limit = |total: u64| (total as f64 * self.fraction).floor() as u64;
        let over = if held.cpu > limit(self.cluster.cpu) {
            Some(("cpu", held.cpu, limit(self.cluster.cpu), "MHz"))
        } else if held.memory_mb > limit(self.cluster.memory_mb) {
            Some((
                "memory",
                held.memory_mb,
                limit(self.cluster.memory_mb),
                "MB",
            ))
        } else {
            None
        };
        match over {
            None => Ok(()),
            Some((dimension, held, limit, unit)) => Err(format!(
                "supervisor fraction: supervisor jobs would hold {held} {unit} {dimension}, over \
                 {} of the cluster ({limit} {unit})",
                self.fraction
            )),
        }
    }
}

/// What `job`'s allocations hold with the plan so far: its live allocations in the snapshot
/// that the plan neither stops nor replaces, and the plan's live placements and updates.
fn job_usage(ctx: &EvalContext, job: &Job) -> Resources {
    let stopped: BTreeSet<&AllocId> = ctx
        .plan
        .node_update
        .values()
        .flatten()
        .map(|s| &s.id)
        .collect();
    let planned: Vec<_> = ctx
        .plan
        .node_allocation
        .values()
        .flatten()
        .filter(|a| a.namespace == job.namespace && a.job_id == job.id)
        .collect();
    let updated: BTreeSet<&AllocId> = planned.iter().map(|a| &a.id).collect();
    let kept = ctx
        .snapshot
        .allocs_by_job(&job.namespace, &job.id)
        .filter(|a| !a.terminal_status() && !stopped.contains(&a.id) && !updated.contains(&a.id))
        .fold(Resources::ZERO, |acc, a| acc.add(&a.resources));
    planned
        .iter()
        .filter(|a| !a.terminal_status())
        .fold(kept, |acc, a| acc.add(&a.resources))
}
