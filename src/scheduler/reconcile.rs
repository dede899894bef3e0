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
//! | lost | non-terminal on a missing or `down` node, or on a `disconnected` one past its group's `disconnect.lost_after` (or without one) | stopped as `lost`, replaced |
//! | disconnecting | on a `disconnected` node within `lost_after` | marked `unknown` once, with a `max-disconnect-timeout` follow-up eval at the window's end; replaced (`replace`, default) or counted in place |
//! | reconnecting | marked `unknown`, reported by its client again since | kept or stopped against its live replacement per `disconnect.reconcile`; the loser stopped ("alloc not needed due to disconnected client reconnect") |
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
//! # Deployments
//!
//! A service group whose `update` block rolls (`max_parallel > 0`) changes version through a
//! [`Deployment`] (Nomad's `computeGroup` rules):
//!
//! - A deployment is created for the job's version when a group with such a block has a
//!   count and either nothing of this version ran yet or an update is needed; an active
//!   deployment of an older version is cancelled ("newer version"), a stopped job's one too.
//!   A successful one of this version is done with; a failed or paused one holds the rollout.
//! - Destructive updates go at most `max_parallel` at a time, less one for every allocation
//!   of the deployment not yet healthy, none at all while one is unhealthy, paused, failed, or
//!   waiting for canaries; the rest are left running (`Ignore`). In-place updates, migrations,
//!   reschedules and lost replacements are not limited.
//! - With `canary = N`, N allocations of the new version are placed beside the old ones
//!   (under the names of the first old ones they will replace) and nothing old is touched
//!   until the deployment is promoted; then the old allocations sharing the canaries' names
//!   are stopped and the rest roll by `max_parallel`. Unpromoted canaries of an older or
//!   failed deployment are stopped.
//! - A failed allocation of an active deployment is replaced only once the deployment
//!   watcher marks it (`DesiredTransition.Reschedule`).
//! - The deployment is successful when no group has work left, every group has at least
//!   `max(DesiredTotal, DesiredCanaries)` healthy allocations, and its canaries are promoted.

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::RngCore;
use teamster_storage::model::deployment::{DESC_NEWER_JOB, DESC_STOPPED_JOB, DESC_SUCCESSFUL};
use teamster_storage::model::disconnect::{
    RECONCILE_KEEP_ORIGINAL, RECONCILE_KEEP_REPLACEMENT, RECONCILE_LONGEST_RUNNING,
};
use teamster_storage::model::{
    AllocId, Allocation, ClientStatus, Deployment, DeploymentId, DeploymentState, DeploymentStatus,
    DeploymentStatusUpdate, DesiredStatus, EvalStatus, EvalTrigger, Evaluation, Job, JobType,
    NodeStatus, TaskGroup, Timestamp,
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
/// Nomad's `allocReconnected`: the copy that lost when a disconnected node came back.
pub(crate) const ALLOC_RECONNECTED: &str = "alloc not needed due to disconnected client reconnect";
/// Nomad's `disconnectTimeoutFollowupEvalDesc`.
pub(crate) const DISCONNECT_TIMEOUT_DESC: &str = "created for delayed disconnect timeout";
/// Nomad's `allocInPlace`.
pub(crate) const ALLOC_IN_PLACE: &str = "alloc updating in-place";
/// Nomad's `allocNodeTainted`.
pub(crate) const ALLOC_NODE_TAINTED: &str = "alloc not needed as node is tainted";
/// Nomad's `allocRescheduled`.
pub(crate) const ALLOC_RESCHEDULED: &str = "alloc was rescheduled because it failed";
/// Nomad's `allocNotNeeded` for a canary of an older or failed deployment.
pub(crate) const ALLOC_CANARY_NOT_NEEDED: &str =
    "alloc not needed as it is an unpromoted canary of another deployment";
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
    /// A canary of the deployment.
    pub canary: bool,
}

/// Placements the reconciler asks for, in order.
#[derive(Debug, Clone)]
pub(crate) enum Placement {
    /// One allocation.
    One(PlaceRequest),
    /// `count` new allocations of `group`, each under the lowest name `names` has free when
    /// it is placed.
    Fresh {
        group: String,
        names: NameIndex,
        count: usize,
    },
}

impl Placement {
    /// How many allocations this asks for.
    pub fn count(&self) -> usize {
        match self {
            Placement::One(_) => 1,
            Placement::Fresh { count, .. } => *count,
        }
    }
}

/// What the reconciler decided for a job.
#[derive(Debug, Default)]
pub(crate) struct Reconciliation {
    /// Unconditional stops (lost, scale-down, job stopped, group removed).
    pub stop: Vec<StopRequest>,
    /// Placements, destructive updates first.
    pub place: Vec<Placement>,
    /// Allocations to move to the new job version in place, if still feasible.
    pub inplace: Vec<Arc<Allocation>>,
    /// Failed allocations updated with the follow-up eval that will reschedule them.
    pub attribute_updates: Vec<Allocation>,
    /// Follow-up evaluations for delayed reschedules.
    pub followup_evals: Vec<Evaluation>,
    /// A deployment this reconciliation creates.
    pub deployment: Option<Deployment>,
    /// Status changes of deployments (cancelled, successful).
    pub deployment_updates: Vec<DeploymentStatusUpdate>,
    /// The deployment placements and in-place updates join (empty: none).
    pub deployment_id: DeploymentId,
    /// Per group, destructive updates held back by the deployment (`Ignore`).
    pub held_back: BTreeMap<String, u64>,
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

/// The job's deployment as the reconciliation sees it (Nomad's `cancelUnneededDeployments`).
#[derive(Default)]
struct DeploymentView {
    /// The deployment of the job's current version that is not successful, if any.
    current: Option<Deployment>,
    /// It is paused.
    paused: bool,
    /// It failed: nothing more is rolled out for this version.
    failed: bool,
    /// Whether a group created or changed its state (so the plan must carry it).
    created: bool,
}

impl DeploymentView {
    fn id(&self) -> Option<&DeploymentId> {
        self.current.as_ref().map(|d| &d.id)
    }

    fn active_id(&self) -> Option<&DeploymentId> {
        self.current.as_ref().filter(|d| d.active()).map(|d| &d.id)
    }
}

/// What one group's reconciliation says about the deployment.
struct GroupOutcome {
    /// No work is left and the group's allocations of the deployment are healthy.
    complete: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Taint {
    Healthy,
    Lost,
    Migrate,
    /// On a disconnected node (or not heard of since), within its group's `lost_after`.
    Disconnecting,
    /// Marked `unknown` and reported again by its client since: one of it and its
    /// replacement is kept.
    Reconnecting,
}

impl Reconciler<'_> {
    fn taint(&self, alloc: &Allocation, group: Option<&TaskGroup>) -> Taint {
        let lost_after = group.map_or(0, |g| g.lost_after()) as i64;
        // Whether its disconnect window (from when it was marked unknown) is still open.
        let window_open = || {
            lost_after > 0
                && alloc
                    .unknown_since()
                    .is_none_or(|since| self.now < since.saturating_add(lost_after))
        };
        // A group that does not replace (`disconnect.replace = false`) and has no window
        // keeps its allocations `unknown` on a node that went away until the node is back
        // (Nomad's "terminal node allocations that cannot be replaced"; what
        // `prevent_reschedule_on_lost` asks). With a window, its end loses them, as it does
        // Nomad's expired allocations. A node gone from the state loses them too.
        let kept = !group.is_none_or(TaskGroup::replaces_lost);
        let held = || window_open() || (kept && lost_after == 0);
        match self.snapshot.node_by_id(&alloc.node_id) {
            None => Taint::Lost,
            Some(node) if node.status == NodeStatus::Down => {
                // One that never started is replaced all the same.
                let started = matches!(
                    alloc.client_status,
                    ClientStatus::Running | ClientStatus::Unknown
                );
                if kept && started && held() {
                    Taint::Disconnecting
                } else {
                    Taint::Lost
                }
            }
            // On a disconnected node only a window holds them (Nomad: one that never started,
            // or without a window, is lost at once).
            Some(node) if node.status == NodeStatus::Disconnected => {
                if window_open() {
                    Taint::Disconnecting
                } else {
                    Taint::Lost
                }
            }
            Some(_) if alloc.unknown_since().is_some() => {
                if alloc.client_status != ClientStatus::Unknown {
                    Taint::Reconnecting
                } else if held() {
                    // Its node is back; its client has not reported it yet.
                    Taint::Disconnecting
                } else {
                    Taint::Lost
                }
            }
            // Marked by `alloc stop` or the node drainer (Nomad's `DesiredTransition.Migrate`);
            // an unmarked allocation on a draining node stays until the drainer marks it.
            Some(_) if alloc.desired_transition.should_migrate() => Taint::Migrate,
            Some(_) => Taint::Healthy,
        }
    }

    /// Which of a reconnecting allocation and its live replacement stays (Nomad's
    /// `reconnectingPicker`): true for the original.
    fn keep_original(
        &self,
        original: &Allocation,
        replacement: &Allocation,
        strategy: &str,
    ) -> bool {
        // A replacement of a newer job version always wins.
        if replacement.job_version > original.job_version {
            return false;
        }
        let running = |a: &Allocation| a.client_status == ClientStatus::Running;
        match strategy {
            RECONCILE_KEEP_ORIGINAL => true,
            RECONCILE_KEEP_REPLACEMENT => false,
            RECONCILE_LONGEST_RUNNING => match (started_at(original), started_at(replacement)) {
                (Some(o), Some(r)) => o <= r,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => original.placement_score >= replacement.placement_score,
            },
            // best_score: the replacement only if it scored higher and it runs (or the
            // original does not).
            _ => {
                !(replacement.placement_score > original.placement_score
                    && (running(replacement) || !running(original)))
            }
        }
    }

    /// Reconciles `allocs` (every allocation of the job) with the job.
    pub fn compute(&self, allocs: &[Arc<Allocation>], rng: &mut dyn RngCore) -> Reconciliation {
        let mut out = Reconciliation::default();
        let mut by_group: BTreeMap<&str, Vec<&Arc<Allocation>>> = BTreeMap::new();
        for alloc in allocs {
            by_group.entry(&alloc.task_group).or_default().push(alloc);
        }
        let latest = self.eval_job_latest_deployment();
        let job = match self.job {
            Some(job) if !job.stopped() && !job.is_parent() => job,
            _ => {
                // Stopped or purged (or a periodic or parameterized parent, which only its
                // children run for): stop everything still meant to run.
                if let Some(d) = latest.filter(|d| d.active()) {
                    out.deployment_updates.push(DeploymentStatusUpdate {
                        deployment_id: d.id.clone(),
                        status: DeploymentStatus::Cancelled,
                        status_description: DESC_STOPPED_JOB.to_owned(),
                    });
                }
                for alloc in allocs {
                    self.stop_all(&mut out, alloc);
                }
                return out;
            }
        };
        let mut view = DeploymentView::default();
        if let Some(d) = latest {
            let current = d.job_version == job.version && d.job_create_index == job.create_index;
            if !current && d.active() {
                out.deployment_updates.push(DeploymentStatusUpdate {
                    deployment_id: d.id.clone(),
                    status: DeploymentStatus::Cancelled,
                    status_description: DESC_NEWER_JOB.to_owned(),
                });
            }
            if current && d.status != DeploymentStatus::Successful {
                view.paused = d.status == DeploymentStatus::Paused;
                view.failed = d.status == DeploymentStatus::Failed;
                view.current = Some((*d).clone());
            }
        }
        for (group, allocs) in &by_group {
            if job.task_group(group).is_none() {
                for alloc in allocs {
                    self.stop_all(&mut out, alloc);
                }
            }
        }
        let mut later: Vec<(i64, Arc<Allocation>)> = Vec::new();
        let mut complete = true;
        for group in job.task_groups.iter() {
            let allocs = by_group.remove(group.name.as_str()).unwrap_or_default();
            let outcome =
                self.compute_group(job, group, &allocs, &mut out, &mut later, &mut view, rng);
            complete &= outcome.complete;
        }
        self.followups(job, later, &mut out, rng);
        if let Some(d) = &mut view.current {
            d.status_description = d.running_description().to_owned();
            if complete && d.active() && !view.created && d.status == DeploymentStatus::Running {
                out.deployment_updates.push(DeploymentStatusUpdate {
                    deployment_id: d.id.clone(),
                    status: DeploymentStatus::Successful,
                    status_description: DESC_SUCCESSFUL.to_owned(),
                });
            }
        }
        out.deployment_id = view.id().cloned().unwrap_or_default();
        if view.created {
            out.deployment = view.current.take();
        }
        out
    }

    /// The job's newest deployment (service jobs only have them).
    fn eval_job_latest_deployment(&self) -> Option<Arc<Deployment>> {
        if self.batch {
            return None;
        }
        self.snapshot
            .latest_deployment(&self.eval.namespace, &self.eval.job_id)
    }

    /// The group's state in the current deployment, or a fresh one for a new deployment.
    fn group_state(job: &Job, group: &TaskGroup, view: &DeploymentView) -> (DeploymentState, bool) {
        if let Some(state) = view
            .current
            .as_ref()
            .and_then(|d| d.task_groups.get(&group.name))
        {
            return (state.clone(), true);
        }
        let _ = job;
        (
            DeploymentState {
                desired_total: group.count,
                ..new_group_state(group)
            },
            false,
        )
    }

    /// A new deployment of `job`'s version.
    fn new_deployment(&self, job: &Job, rng: &mut dyn RngCore) -> Deployment {
        new_deployment(
            job,
            self.eval.priority,
            crate::util::new_uuid(rng).into(),
            self.now,
        )
    }

    fn stop_all(&self, out: &mut Reconciliation, alloc: &Arc<Allocation>) {
        if alloc.terminal_status() {
            return;
        }
        let group = self.job.and_then(|j| j.task_group(&alloc.task_group));
        let (description, client_status) = match self.taint(alloc, group) {
            Taint::Lost => (ALLOC_LOST, Some(ClientStatus::Lost)),
            _ => (ALLOC_NOT_NEEDED, None),
        };
        out.stop.push(StopRequest {
            alloc: alloc.clone(),
            description,
            client_status,
        });
    }

    #[allow(clippy::too_many_arguments)]
    fn compute_group(
        &self,
        job: &Arc<Job>,
        group: &TaskGroup,
        allocs: &[&Arc<Allocation>],
        out: &mut Reconciliation,
        later: &mut Vec<(i64, Arc<Allocation>)>,
        view: &mut DeploymentView,
        rng: &mut dyn RngCore,
    ) -> GroupOutcome {
        let strategy = group
            .update
            .clone()
            .filter(|u| u.rolls() && job.job_type == JobType::Service && !self.batch);
        // Only a group that rolls is in the deployment: a group with `max_parallel = 0`
        // beside it replaces its failed allocations by its reschedule policy alone.
        let active_deployment = view.active_id().cloned().filter(|_| strategy.is_some());
        let (mut dstate, existing_state) = Self::group_state(job, group, view);
        let placed_canaries: Vec<_> = if existing_state {
            dstate.placed_canaries.clone()
        } else {
            Vec::new()
        };

        let disconnect = group.disconnect.clone().unwrap_or_default();
        // Reconnects first: a reconnecting allocation against its live replacement; the
        // loser is stopped, a kept original is marked reconnected.
        let taints: Vec<Taint> = allocs.iter().map(|a| self.taint(a, Some(group))).collect();
        let mut reconnect_losers: Vec<&AllocId> = Vec::new();
        for (&alloc, taint) in allocs.iter().zip(&taints) {
            if alloc.terminal_status() || *taint != Taint::Reconnecting {
                continue;
            }
            let replacement = live_replacement(allocs, alloc);
            let keep =
                replacement.is_none_or(|r| self.keep_original(alloc, r, disconnect.reconcile()));
            if keep {
                if let Some(r) = replacement {
                    reconnect_losers.push(&r.id);
                    out.stop.push(StopRequest {
                        alloc: (*r).clone(),
                        description: ALLOC_RECONNECTED,
                        client_status: None,
                    });
                }
                let mut updated = (**alloc).clone();
                updated.append_client_state(updated.client_status, self.now);
                updated.modify_time = self.now;
                out.attribute_updates.push(updated);
            } else {
                reconnect_losers.push(&alloc.id);
                out.stop.push(StopRequest {
                    alloc: alloc.clone(),
                    description: ALLOC_RECONNECTED,
                    client_status: None,
                });
            }
        }

        let mut untainted: Vec<Arc<Allocation>> = Vec::new();
        let mut disconnecting: Vec<Arc<Allocation>> = Vec::new();
        let mut lost: Vec<Arc<Allocation>> = Vec::new();
        let mut migrate: Vec<Arc<Allocation>> = Vec::new();
        let mut reschedule_now: Vec<Arc<Allocation>> = Vec::new();
        let mut canaries: Vec<Arc<Allocation>> = Vec::new();
        let mut stale_canaries: Vec<Arc<Allocation>> = Vec::new();
        let mut later_count = 0usize;
        let mut had_current_version = false;
        for (&alloc, &taint) in allocs.iter().zip(&taints) {
            if alloc.job_version == job.version {
                had_current_version = true;
            }
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
                // An active deployment decides when its failed allocations are replaced
                // (the deployment watcher marks them); until then they hold their place.
                if active_deployment
                    .as_ref()
                    .is_some_and(|d| *d == alloc.deployment_id)
                    && !alloc.desired_transition.should_reschedule()
                {
                    untainted.push(alloc.clone());
                    continue;
                }
                // Marked by the deployment watcher or not, a failed allocation is replaced
                // when its policy's delay is over (Nomad's `updateByReschedulable`): the
                // mark only lets a deployment's allocation be considered at all.
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
                    later_count += 1;
                }
                continue;
            }
            if reconnect_losers.contains(&&alloc.id) {
                continue;
            }
            match taint {
                Taint::Lost => lost.push(alloc.clone()),
                Taint::Migrate => migrate.push(alloc.clone()),
                // Without `replace` it holds its place until it is lost.
                Taint::Disconnecting if !disconnect.replace() => untainted.push(alloc.clone()),
                Taint::Disconnecting => disconnecting.push(alloc.clone()),
                Taint::Healthy | Taint::Reconnecting => {
                    let ours = alloc.job_version == job.version
                        && view.id().is_some_and(|d| *d == alloc.deployment_id);
                    let unpromoted_of_failed = view.failed && !dstate.promoted;
                    if ours && placed_canaries.contains(&alloc.id) && !unpromoted_of_failed {
                        canaries.push(alloc.clone());
                    } else if (ours && placed_canaries.contains(&alloc.id))
                        || (alloc.is_canary() && !ours)
                    {
                        stale_canaries.push(alloc.clone());
                    } else {
                        untainted.push(alloc.clone());
                    }
                }
            }
        }
        // Deterministic order: by name index, then id.
        for set in [
            &mut untainted,
            &mut lost,
            &mut migrate,
            &mut reschedule_now,
            &mut canaries,
        ] {
            set.sort_by(|a, b| {
                (alloc_name_index(&a.name), &a.id).cmp(&(alloc_name_index(&b.name), &b.id))
            });
        }
        for alloc in stale_canaries {
            out.stop.push(StopRequest {
                alloc,
                description: ALLOC_CANARY_NOT_NEEDED,
                client_status: None,
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
                .chain(&disconnecting)
                .map(|a| a.name.as_str()),
        );
        // Allocations of a disconnected node within their window are marked `unknown` (once)
        // with a follow-up evaluation at the window's end, when they are lost.
        self.mark_disconnecting(job, group, allocs, &taints, out, rng);
        for alloc in &lost {
            out.stop.push(StopRequest {
                alloc: alloc.clone(),
                description: ALLOC_LOST,
                client_status: Some(ClientStatus::Lost),
            });
        }

        // Which old-version allocations need an update, and of which kind.
        let mut destructive: Vec<Arc<Allocation>> = Vec::new();
        let mut inplace: Vec<Arc<Allocation>> = Vec::new();
        for alloc in &untainted {
            if alloc.terminal_status() || alloc.job_version == job.version {
                continue;
            }
            let is_destructive = match self.snapshot.alloc_job(alloc) {
                Some(old) => tasks_updated(old, job, &group.name),
                None => true,
            };
            if is_destructive {
                destructive.push(alloc.clone());
            } else {
                inplace.push(alloc.clone());
            }
        }

        let promoted = dstate.promoted;
        let wanted_canaries = strategy.as_ref().map_or(0, |s| s.canary()) as usize;
        let require_canary =
            !destructive.is_empty() && wanted_canaries > canaries.len() && !promoted;
        if require_canary {
            dstate.desired_canaries = wanted_canaries as u32;
        }
        let canarying = dstate.desired_canaries > 0 && !promoted;

        // Scale down: failed ones awaiting a reschedule first, then migrating, then (once
        // promoted) the old allocations the canaries replace, then the highest name indexes.
        // Canaries waiting for promotion do not count.
        let count = group.count as usize;
        let counted_canaries = if canarying { 0 } else { canaries.len() };
        let mut existing =
            untainted.len() + migrate.len() + reschedule_now.len() + counted_canaries;
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
            if remove > 0 && !canarying && !canaries.is_empty() {
                let canary_names: Vec<&str> = canaries.iter().map(|c| c.name.as_str()).collect();
                let mut i = 0;
                while remove > 0 && i < untainted.len() {
                    let replaced = !untainted[i].terminal_status()
                        && untainted[i].job_version != job.version
                        && canary_names.contains(&untainted[i].name.as_str());
                    if replaced {
                        let alloc = untainted.remove(i);
                        destructive.retain(|d| d.id != alloc.id);
                        inplace.retain(|d| d.id != alloc.id);
                        out.stop.push(StopRequest {
                            alloc,
                            description: ALLOC_NOT_NEEDED,
                            client_status: None,
                        });
                        remove -= 1;
                    } else {
                        i += 1;
                    }
                }
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
                    destructive.retain(|d| d.id != alloc.id);
                    inplace.retain(|d| d.id != alloc.id);
                    out.stop.push(StopRequest {
                        alloc,
                        description: ALLOC_NOT_NEEDED,
                        client_status: None,
                    });
                }
            }
            existing = untainted.len() + migrate.len() + reschedule_now.len() + counted_canaries;
        }

        // Canaries beside the old version, under the names of the first ones they replace.
        if require_canary && !view.paused && !view.failed {
            let taken: Vec<&str> = canaries.iter().map(|c| c.name.as_str()).collect();
            let new_names: Vec<String> = destructive
                .iter()
                .map(|a| a.name.clone())
                .filter(|n| !taken.contains(&n.as_str()))
                .take(wanted_canaries - canaries.len())
                .collect();
            for name in new_names {
                out.place.push(Placement::One(PlaceRequest {
                    group: group.name.clone(),
                    name,
                    previous: None,
                    stop_previous: None,
                    reschedule: false,
                    canary: true,
                }));
            }
        }

        // How many destructive updates may go now.
        let limit = match &strategy {
            None => usize::MAX,
            Some(_) if view.paused || view.failed || canarying => 0,
            Some(strategy) => {
                let mut limit = strategy.max_parallel() as i64;
                let mut unhealthy = false;
                if let Some(id) = view.id() {
                    for alloc in untainted.iter().chain(&canaries) {
                        if alloc.deployment_id != *id {
                            continue;
                        }
                        // A failed one held for the watcher counts as unhealthy too.
                        if alloc.counts_unhealthy() {
                            unhealthy = true;
                        } else if !alloc.terminal_status() && !alloc.is_healthy() {
                            limit -= 1;
                        }
                    }
                }
                if unhealthy {
                    0
                } else {
                    limit.max(0) as usize
                }
            }
        };
        let total_destructive = destructive.len();
        for alloc in destructive.iter().take(limit) {
            out.place.push(Placement::One(PlaceRequest {
                group: group.name.clone(),
                name: alloc.name.clone(),
                previous: Some(alloc.clone()),
                stop_previous: Some(ALLOC_UPDATING),
                reschedule: false,
                canary: false,
            }));
        }
        let held = total_destructive.saturating_sub(limit);
        if held > 0 {
            *out.held_back.entry(group.name.clone()).or_default() += held as u64;
        }
        let total_inplace = inplace.len();
        out.inplace.extend(inplace);

        let total_reschedule = reschedule_now.len();
        for alloc in reschedule_now {
            out.place.push(Placement::One(PlaceRequest {
                group: group.name.clone(),
                name: alloc.name.clone(),
                previous: Some(alloc),
                stop_previous: Some(ALLOC_RESCHEDULED),
                reschedule: true,
                canary: false,
            }));
        }
        let total_migrate = migrate.len();
        for alloc in migrate {
            out.place.push(Placement::One(PlaceRequest {
                group: group.name.clone(),
                name: alloc.name.clone(),
                previous: Some(alloc),
                stop_previous: Some(ALLOC_MIGRATING),
                reschedule: false,
                canary: false,
            }));
        }
        let mut missing = 0usize;
        // Replacements of disconnected allocations (`replace`) that have none running yet,
        // then of lost ones.
        let unreplaced = disconnecting
            .into_iter()
            .filter(|alloc| live_replacement(allocs, alloc).is_none());
        for alloc in unreplaced.chain(lost) {
            if existing >= count {
                break;
            }
            existing += 1;
            missing += 1;
            out.place.push(Placement::One(PlaceRequest {
                group: group.name.clone(),
                name: alloc.name.clone(),
                previous: Some(alloc),
                stop_previous: None,
                reschedule: false,
                canary: false,
            }));
        }
        // New allocations wait while the deployment is paused, failed or canarying.
        let place_ready = strategy.is_none() || !(view.paused || view.failed || canarying);
        if existing < count {
            missing += count - existing;
            if place_ready {
                // Named only as they are placed: a count far beyond what the cluster holds
                // costs the scheduler the placements it makes, not the count asked for.
                out.place.push(Placement::Fresh {
                    group: group.name.clone(),
                    names,
                    count: count - existing,
                });
            }
        }

        let Some(_) = strategy else {
            return GroupOutcome { complete: true };
        };
        // A deployment for this version, when there is something to roll out.
        if !existing_state
            && dstate.desired_total > 0
            && (!had_current_version || total_destructive > 0 || total_inplace > 0)
            && view.current.is_none()
        {
            view.current = Some(self.new_deployment(job, rng));
            view.created = true;
        }
        let Some(d) = view.current.as_mut() else {
            return GroupOutcome { complete: true };
        };
        if !existing_state && !view.created {
            // An older deployment this group is not part of (it had no count then).
            return GroupOutcome { complete: true };
        }
        if !existing_state || require_canary {
            if existing_state {
                // A canary count decided after the deployment began.
                view.created = true;
            }
            d.task_groups.insert(group.name.clone(), dstate.clone());
        }
        let work_left = total_destructive
            + total_inplace
            + total_reschedule
            + total_migrate
            + missing
            + later_count
            > 0
            || require_canary;
        let complete = !work_left
            && existing_state
            && dstate.healthy_allocs >= dstate.desired_total.max(dstate.desired_canaries)
            && (dstate.desired_canaries == 0 || dstate.promoted);
        GroupOutcome { complete }
    }

    /// A pending evaluation of `job` that follows this one at `wait_until` (Unix nanoseconds).
    fn followup_eval(
        &self,
        job: &Job,
        trigger: EvalTrigger,
        description: &str,
        wait_until: i64,
        rng: &mut dyn RngCore,
    ) -> Evaluation {
        Evaluation {
            id: crate::util::new_uuid(rng).into(),
            namespace: job.namespace.clone(),
            priority: self.eval.priority,
            eval_type: job.job_type,
            triggered_by: trigger,
            job_id: job.id.clone(),
            job_modify_index: job.job_modify_index,
            status: EvalStatus::Pending,
            status_description: description.to_owned(),
            wait_until: Timestamp::from_unix_nanos(wait_until),
            previous_eval: self.eval.id.clone(),
            create_time: self.now,
            modify_time: self.now,
            ..Evaluation::default()
        }
    }

    /// Marks the group's allocations on disconnected nodes `unknown` (those not yet marked),
    /// with one follow-up evaluation at the end of their `lost_after` window.
    fn mark_disconnecting(
        &self,
        job: &Job,
        group: &TaskGroup,
        allocs: &[&Arc<Allocation>],
        taints: &[Taint],
        out: &mut Reconciliation,
        rng: &mut dyn RngCore,
    ) {
        let lost_after = group.lost_after() as i64;
        let mut marked = Vec::new();
        for (&alloc, taint) in allocs.iter().zip(taints) {
            // Marked once per disconnect: one its client reported again while the node is
            // still disconnected is resolved as a reconnect once the node is ready.
            if alloc.terminal_status()
                || alloc.client_status == ClientStatus::Unknown
                || alloc.unknown_since().is_some()
                || *taint != Taint::Disconnecting
            {
                continue;
            }
            let mut updated = (**alloc).clone();
            updated.client_status = ClientStatus::Unknown;
            updated.client_description = "alloc is unknown since its node is disconnected".into();
            updated.append_client_state(ClientStatus::Unknown, self.now);
            updated.modify_time = self.now;
            marked.push(updated);
        }
        // Kept for good (`replace = false` without a window): nothing is due later.
        if marked.is_empty() || (!group.replaces_lost() && lost_after == 0) {
            out.attribute_updates.extend(marked);
            return;
        }
        let eval = self.followup_eval(
            job,
            EvalTrigger::MaxDisconnectTimeout,
            DISCONNECT_TIMEOUT_DESC,
            self.now.saturating_add(lost_after),
            rng,
        );
        for updated in &mut marked {
            updated.followup_eval_id = eval.id.clone();
        }
        out.followup_evals.push(eval);
        out.attribute_updates.extend(marked);
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
                let eval =
                    self.followup_eval(job, EvalTrigger::AllocFailure, FOLLOWUP_EVAL_DESC, at, rng);
                out.followup_evals.push(eval);
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

/// A new, running deployment `id` of `job`'s version, its evaluations at `priority`.
pub(crate) fn new_deployment(job: &Job, priority: u32, id: DeploymentId, now: i64) -> Deployment {
    Deployment {
        id,
        namespace: job.namespace.clone(),
        job_id: job.id.clone(),
        job_version: job.version,
        job_modify_index: job.modify_index,
        job_spec_modify_index: job.job_modify_index,
        job_create_index: job.create_index,
        is_multiregion: false,
        eval_priority: priority,
        task_groups: BTreeMap::new(),
        status: DeploymentStatus::Running,
        status_description: String::new(),
        create_index: 0,
        modify_index: 0,
        create_time: now,
        modify_time: now,
    }
}

/// A group's state in a deployment that starts tracking it: its update block's
/// auto-revert, auto-promote and progress deadline.
pub(crate) fn new_group_state(group: &TaskGroup) -> DeploymentState {
    let update = group.update.clone().unwrap_or_default();
    DeploymentState {
        auto_revert: update.auto_revert(),
        auto_promote: update.auto_promote(),
        progress_deadline: update.progress_deadline(),
        ..DeploymentState::default()
    }
}

/// When the allocation's first task started (Unix nanoseconds), if one did.
fn started_at(alloc: &Allocation) -> Option<i64> {
    alloc
        .task_states
        .values()
        .filter_map(|t| t.started_at.unix_nanos())
        .filter(|t| *t > 0)
        .min()
}

/// The live allocation that took `original`'s place: its replacement, or that one's own
/// replacement if it was replaced in turn (an update, a reschedule, a drain).
fn live_replacement<'a>(
    allocs: &[&'a Arc<Allocation>],
    original: &Allocation,
) -> Option<&'a Arc<Allocation>> {
    let mut current = *allocs
        .iter()
        .find(|a| a.previous_allocation == original.id)?;
    for _ in 0..allocs.len() {
        if !current.terminal_status() {
            return Some(current);
        }
        if current.next_allocation.is_empty() {
            return None;
        }
        current = *allocs.iter().find(|a| a.id == current.next_allocation)?;
    }
    None
}
