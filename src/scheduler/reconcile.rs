//! The reconciler of the generic (service and batch) scheduler: compares a job's task groups
//! with its existing allocations and says what to stop, update and place. It decides *what*;
//! the generic scheduler decides *where*.
//!
//! Per task group, every allocation lands in one set (Nomad's `computeGroup`):
//!
//! | set | which allocations | outcome |
//! |---|---|---|
//! | replaced | terminal with a `NextAllocation` | ignored |
//! | ignore | service: stopped, complete or lost; batch: stopped unfinished, evicted, or terminal of an older job version | ignored, not counted |
//! | untainted | running on a healthy node; batch: finished successfully | counted; updated if the job changed |
//! | lost | non-terminal on a missing, `down` or `disconnected` node | stopped as `lost`, replaced |
//! | migrate | non-terminal and marked to migrate (`alloc stop`, or the node drainer on a draining node) | stopped and replaced |
//! | reschedule now | failed, policy allows it, due within 1 s (or this eval is its follow-up) | stopped, replaced with a reschedule penalty on its node |
//! | reschedule later | failed, policy allows it later | counted; a follow-up eval (batched per 5 s window) is created and recorded on the allocation |
//! | failed for good | failed, policy exhausted | counted, not replaced |
//!
//! Then, against the group's `Count`: extra allocations are stopped — failed ones waiting for
//! rescheduling first, then migrating ones, then the highest name indexes; a changed job version
//! updates untainted allocations in place when only non-task fields changed (re-checked for
//! feasibility by the scheduler) and destructively (stop + replace under the same name)
//! otherwise; missing ones are placed under the lowest free name indexes. A stopped or purged
//! job, or a task group removed from the job, stops everything.
//!
//! There are no deployments here (no canaries, `max_parallel` or `update` block): every
//! destructive update happens in one plan, as Nomad does for jobs without an update strategy.

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::RngCore;
use teamster_storage::model::{
    Allocation, ClientStatus, DesiredStatus, EvalStatus, EvalTrigger, Evaluation, Job, NodeStatus,
    Timestamp,
};
use teamster_storage::state::Snapshot;

use crate::scheduler::util::{
    alloc_name_index, alloc_reschedule_policy, next_reschedule_time, tasks_updated, NameIndex,
};

/// Nomad's `allocNotNeeded`.
pub(crate) const ALLOC_NOT_NEEDED: &str = "alloc not needed due to job update";
/// Nomad's `allocMigrating`.
pub(crate) const ALLOC_MIGRATING: &str = "alloc is being migrated";
/// Nomad's `allocUpdating`.
pub(crate) const ALLOC_UPDATING: &str = "alloc is being updated due to job update";
/// Nomad's `allocLost`.
pub(crate) const ALLOC_LOST: &str = "alloc is lost since its node is down";
/// Nomad's `allocInPlace`.
pub(crate) const ALLOC_IN_PLACE: &str = "alloc updating in-place";
/// Nomad's `allocNodeTainted`.
pub(crate) const ALLOC_NODE_TAINTED: &str = "alloc not needed as node is tainted";
/// Nomad's `allocRescheduled`.
pub(crate) const ALLOC_RESCHEDULED: &str = "alloc was rescheduled because it failed";
/// Nomad's `reschedulingFollowupEvalDesc`.
pub(crate) const FOLLOWUP_EVAL_DESC: &str = "created for delayed rescheduling";

/// A failed allocation due within this window is rescheduled now (`rescheduleWindowSize`).
const RESCHEDULE_WINDOW_NANOS: i64 = 1_000_000_000;
/// Delayed reschedules within this window share a follow-up eval
/// (`batchedFailedAllocWindowSize`).
const FOLLOWUP_BATCH_WINDOW_NANOS: i64 = 5_000_000_000;

/// An allocation to stop.
#[derive(Debug, Clone)]
pub(crate) struct StopRequest {
    pub alloc: Arc<Allocation>,
    pub description: &'static str,
    /// `Some(Lost)` when its node is gone.
    pub client_status: Option<ClientStatus>,
}

/// An allocation to place.
#[derive(Debug, Clone)]
pub(crate) struct PlaceRequest {
    /// The task group.
    pub group: String,
    /// Its name (`job.group[i]`).
    pub name: String,
    /// The allocation it replaces, if any.
    pub previous: Option<Arc<Allocation>>,
    /// Stop `previous` in the same plan with this description; the stop is taken back if the
    /// replacement cannot be placed.
    pub stop_previous: Option<&'static str>,
    /// A reschedule of a failed allocation (penalises its node, extends its tracker).
    pub reschedule: bool,
}

/// What the reconciler decided for a job.
#[derive(Debug, Default)]
pub(crate) struct Reconciliation {
    /// Unconditional stops (lost, scale-down, job stopped, group removed).
    pub stop: Vec<StopRequest>,
    /// Placements, destructive updates first.
    pub place: Vec<PlaceRequest>,
    /// Allocations to move to the new job version in place, if still feasible.
    pub inplace: Vec<Arc<Allocation>>,
    /// Failed allocations updated with the follow-up eval that will reschedule them.
    pub attribute_updates: Vec<Allocation>,
    /// Follow-up evaluations for delayed reschedules.
    pub followup_evals: Vec<Evaluation>,
}

/// Inputs of one reconciliation.
pub(crate) struct Reconciler<'a> {
    pub snapshot: &'a Snapshot,
    /// The job, or `None` once purged.
    pub job: Option<&'a Arc<Job>>,
    pub eval: &'a Evaluation,
    pub batch: bool,
    pub now: i64,
}

enum Taint {
    Healthy,
    Lost,
    Migrate,
}

impl Reconciler<'_> {
    fn taint(&self, alloc: &Allocation) -> Taint {
        match self.snapshot.node_by_id(&alloc.node_id) {
            None => Taint::Lost,
            Some(node) if matches!(node.status, NodeStatus::Down | NodeStatus::Disconnected) => {
                Taint::Lost
            }
            // Marked by `alloc stop` or the node drainer (Nomad's `DesiredTransition.Migrate`);
            // an unmarked allocation on a draining node stays until the drainer marks it.
            Some(_) if alloc.desired_transition.should_migrate() => Taint::Migrate,
            Some(_) => Taint::Healthy,
        }
    }

    /// Reconciles `allocs` (every allocation of the job) with the job.
    pub fn compute(&self, allocs: &[Arc<Allocation>], rng: &mut dyn RngCore) -> Reconciliation {
        let mut out = Reconciliation::default();
        let mut by_group: BTreeMap<&str, Vec<&Arc<Allocation>>> = BTreeMap::new();
        for alloc in allocs {
            by_group.entry(&alloc.task_group).or_default().push(alloc);
        }
        let job = match self.job {
            Some(job) if !job.stopped() && !job.is_parent() => job,
            _ => {
                // Stopped or purged (or a periodic or parameterized parent, which only its
                // children run for): stop everything still meant to run.
                for alloc in allocs {
                    self.stop_all(&mut out, alloc);
                }
                return out;
            }
        };
        for (group, allocs) in &by_group {
            if job.task_group(group).is_none() {
                for alloc in allocs {
                    self.stop_all(&mut out, alloc);
                }
            }
        }
        let mut later: Vec<(i64, Arc<Allocation>)> = Vec::new();
        for group in &job.task_groups {
            let allocs = by_group.remove(group.name.as_str()).unwrap_or_default();
            self.compute_group(job, group, &allocs, &mut out, &mut later);
        }
        self.followups(job, later, &mut out, rng);
        out
    }

    fn stop_all(&self, out: &mut Reconciliation, alloc: &Arc<Allocation>) {
        if alloc.terminal_status() {
            return;
        }
        let (description, client_status) = match self.taint(alloc) {
            Taint::Lost => (ALLOC_LOST, Some(ClientStatus::Lost)),
            _ => (ALLOC_NOT_NEEDED, None),
        };
        out.stop.push(StopRequest {
            alloc: alloc.clone(),
            description,
            client_status,
        });
    }

    fn compute_group(
        &self,
        job: &Arc<Job>,
        group: &teamster_storage::model::TaskGroup,
        allocs: &[&Arc<Allocation>],
        out: &mut Reconciliation,
        later: &mut Vec<(i64, Arc<Allocation>)>,
    ) {
        let mut untainted: Vec<Arc<Allocation>> = Vec::new();
        let mut lost: Vec<Arc<Allocation>> = Vec::new();
        let mut migrate: Vec<Arc<Allocation>> = Vec::new();
        let mut reschedule_now: Vec<Arc<Allocation>> = Vec::new();
        for &alloc in allocs {
            if alloc.terminal_status() {
                if !alloc.next_allocation.is_empty() {
                    continue;
                }
                if self.batch && alloc.job_version < job.version {
                    continue;
                }
                let failed = alloc.client_status == ClientStatus::Failed
                    && alloc.desired_status == DesiredStatus::Run;
                if !failed {
                    let finished_batch = self.batch
                        && alloc.client_status == ClientStatus::Complete
                        && alloc.desired_status != DesiredStatus::Evict;
                    if finished_batch {
                        untainted.push(alloc.clone());
                    }
                    continue;
                }
                let policy = alloc_reschedule_policy(self.snapshot, alloc, job);
                let (at, eligible) = next_reschedule_time(alloc, policy);
                if eligible
                    && (alloc.followup_eval_id == self.eval.id
                        || at.saturating_sub(self.now) <= RESCHEDULE_WINDOW_NANOS)
                {
                    reschedule_now.push(alloc.clone());
                    continue;
                }
                untainted.push(alloc.clone());
                if eligible && alloc.followup_eval_id.is_empty() {
                    later.push((at, alloc.clone()));
                }
                continue;
            }
            match self.taint(alloc) {
                Taint::Lost => lost.push(alloc.clone()),
                Taint::Migrate => migrate.push(alloc.clone()),
                Taint::Healthy => untainted.push(alloc.clone()),
            }
        }
        // Deterministic order: by name index, then id.
        for set in [&mut untainted, &mut lost, &mut migrate, &mut reschedule_now] {
            set.sort_by(|a, b| {
                (alloc_name_index(&a.name), &a.id).cmp(&(alloc_name_index(&b.name), &b.id))
            });
        }

        let mut names = NameIndex::new(
            &job.id,
            &group.name,
            untainted
                .iter()
                .chain(&migrate)
                .chain(&reschedule_now)
                .chain(&lost)
                .map(|a| a.name.as_str()),
        );
        for alloc in &lost {
            out.stop.push(StopRequest {
                alloc: alloc.clone(),
                description: ALLOC_LOST,
                client_status: Some(ClientStatus::Lost),
            });
        }

        // Scale down: failed ones awaiting a reschedule first, then migrating, then the
        // highest name indexes.
        let count = group.count as usize;
        let mut existing = untainted.len() + migrate.len() + reschedule_now.len();
        if existing > count {
            let mut remove = existing - count;
            while remove > 0 {
                let Some(alloc) = reschedule_now.pop() else {
                    break;
                };
                names.unset(&alloc.name);
                out.stop.push(StopRequest {
                    alloc,
                    description: ALLOC_NOT_NEEDED,
                    client_status: None,
                });
                remove -= 1;
            }
            while remove > 0 {
                let Some(alloc) = migrate.pop() else {
                    break;
                };
                names.unset(&alloc.name);
                out.stop.push(StopRequest {
                    alloc,
                    description: ALLOC_NOT_NEEDED,
                    client_status: None,
                });
                remove -= 1;
            }
            if remove > 0 {
                let running: Vec<usize> = (0..untainted.len())
                    .filter(|i| !untainted[*i].terminal_status())
                    .collect();
                let highest = names.highest(remove);
                let mut chosen: Vec<usize> = running
                    .iter()
                    .copied()
                    .filter(|i| highest.contains(&untainted[*i].name))
                    .take(remove)
                    .collect();
                // Duplicate names can leave some to pick: take the highest remaining.
                for i in running.iter().rev() {
                    if chosen.len() >= remove {
                        break;
                    }
                    if !chosen.contains(i) {
                        chosen.push(*i);
                    }
                }
                chosen.sort_unstable_by(|a, b| b.cmp(a));
                for i in chosen {
                    let alloc = untainted.remove(i);
                    names.unset(&alloc.name);
                    out.stop.push(StopRequest {
                        alloc,
                        description: ALLOC_NOT_NEEDED,
                        client_status: None,
                    });
                }
            }
            existing = untainted.len() + migrate.len() + reschedule_now.len();
        }

        // Job changed: in place or destructive.
        for alloc in &untainted {
            if alloc.terminal_status() || alloc.job_version == job.version {
                continue;
            }
            let destructive = match self.snapshot.alloc_job(alloc) {
                Some(old) => tasks_updated(old, job, &group.name),
                None => true,
            };
            if destructive {
                out.place.push(PlaceRequest {
                    group: group.name.clone(),
                    name: alloc.name.clone(),
                    previous: Some(alloc.clone()),
                    stop_previous: Some(ALLOC_UPDATING),
                    reschedule: false,
                });
            } else {
                out.inplace.push(alloc.clone());
            }
        }

        for alloc in reschedule_now {
            out.place.push(PlaceRequest {
                group: group.name.clone(),
                name: alloc.name.clone(),
                previous: Some(alloc),
                stop_previous: Some(ALLOC_RESCHEDULED),
                reschedule: true,
            });
        }
        for alloc in migrate {
            out.place.push(PlaceRequest {
                group: group.name.clone(),
                name: alloc.name.clone(),
                previous: Some(alloc),
                stop_previous: Some(ALLOC_MIGRATING),
                reschedule: false,
            });
        }
        for alloc in lost {
            if existing >= count {
                break;
            }
            existing += 1;
            out.place.push(PlaceRequest {
                group: group.name.clone(),
                name: alloc.name.clone(),
                previous: Some(alloc),
                stop_previous: None,
                reschedule: false,
            });
        }
        if existing < count {
            for name in names.next(count - existing) {
                out.place.push(PlaceRequest {
                    group: group.name.clone(),
                    name,
                    previous: None,
                    stop_previous: None,
                    reschedule: false,
                });
            }
        }
    }

    /// Batches delayed reschedules into follow-up evaluations (one per 5 s window) and
    /// records each evaluation on its allocations.
    fn followups(
        &self,
        job: &Job,
        mut later: Vec<(i64, Arc<Allocation>)>,
        out: &mut Reconciliation,
        rng: &mut dyn RngCore,
    ) {
        if later.is_empty() {
            return;
        }
        later.sort_by(|a, b| (a.0, &a.1.id).cmp(&(b.0, &b.1.id)));
        let mut batch_start = i64::MIN;
        for (at, alloc) in later {
            if out.followup_evals.is_empty()
                || at.saturating_sub(batch_start) >= FOLLOWUP_BATCH_WINDOW_NANOS
            {
                batch_start = at;
                out.followup_evals.push(Evaluation {
                    id: crate::util::new_uuid(rng).into(),
                    namespace: job.namespace.clone(),
                    priority: self.eval.priority,
                    eval_type: job.job_type,
                    triggered_by: EvalTrigger::AllocFailure,
                    job_id: job.id.clone(),
                    job_modify_index: job.job_modify_index,
                    status: EvalStatus::Pending,
                    status_description: FOLLOWUP_EVAL_DESC.to_owned(),
                    wait_until: Timestamp::from_unix_nanos(at),
                    previous_eval: self.eval.id.clone(),
                    create_time: self.now,
                    modify_time: self.now,
                    ..Evaluation::default()
                });
            }
            let Some(eval) = out.followup_evals.last() else {
                continue;
            };
            let mut updated = (*alloc).clone();
            updated.followup_eval_id = eval.id.clone();
            updated.modify_time = self.now;
            out.attribute_updates.push(updated);
        }
    }
}
