//! Allocation health for deployments and migrations: Nomad's `allochealth.Tracker` and the
//! alloc runner's `alloc_health_watcher` hook, as a pure state machine. Task states and the
//! time go in; a verdict, or the time to look again, comes out. The alloc runner's shell
//! ([`alloc_runner`](crate::client::alloc_runner)) feeds it every change of the allocation,
//! sleeps until the wake-up time it asks for, records the verdict in the allocation and
//! lets the status sync carry it to the servers.
//!
//! ```text
//!  service job? ──no──▶ never judged
//!      │ DeploymentID set ─▶ group `update` (MaxParallel > 0) │ else group `migrate`
//!      │ health_check = "manual", no strategy, or the servers already hold a verdict
//!      │                                                     ─▶ never judged
//!      ▼
//!  tracking since T ─┬─ a task failed, or the allocation failed ─▶ unhealthy
//!                    ├─ a task is dead                          ─▶ unhealthy
//!                    ├─ every task running for min_healthy_time ─▶ healthy
//!                    ├─ T + healthy_deadline passed             ─▶ unhealthy
//!                    └─ stopped by the servers or the client     ─▶ no verdict
//!  verdict ─▶ LocalAlloc.health ─▶ one Node.UpdateAlloc carries it (DeploymentStatus)
//!  the servers move the allocation to another deployment ─▶ tracking starts over
//! ```
//!
//! - `checks` also waits for every service check of the allocation (its running services'
//!   `http` and `tcp` checks) to pass, and to keep passing for `min_healthy_time`; an
//!   allocation whose checks do not all pass by the deadline is unhealthy ("Services not
//!   healthy by deadline"). `task_states`, or `checks` without service checks, judge by
//!   the tasks alone.
//! - A task has run continuously since its latest start (its `Started` event, its
//!   `LastRestart`, its `StartedAt`, whichever is latest), so a restart resets the clock even
//!   when the watcher did not see the task down. As in Nomad, the runs count from when
//!   tracking started at the earliest: an allocation that joins a new deployment, or whose
//!   client restarted, is watched for `min_healthy_time` again.
//! - An unhealthy verdict in a deployment records an `Alloc Unhealthy` event on each task
//!   that made it so, with Nomad's reasons; a migration's verdict records none, as in Nomad.
//! - Each deployment (or the migration, an empty DeploymentID) is judged once: a client
//!   restart does not judge again an allocation it judged before, or whose server copy
//!   already carries a verdict (from this client or an operator's `allocation-health`).
//!
//! The shell runs in the span `alloc_health{alloc_id}`, logs each verdict with its
//! deployment and reason, and counts verdicts in `teamster_client_alloc_health_total`
//! (label `healthy`: `true` or `false`).

use crate::util::go::go_duration;
use std::collections::BTreeMap;

use teamster_storage::model::deployment::{HEALTH_CHECK_CHECKS, HEALTH_CHECK_MANUAL};
use teamster_storage::model::{
    AllocDeploymentStatus, ClientStatus, DeploymentId, JobType, TaskState, TaskStateValue,
};

use crate::client::types::LocalAlloc;

/// The task event an unhealthy verdict records (Nomad's `AllocHealthEventSource`).
pub const ALLOC_UNHEALTHY: &str = "Alloc Unhealthy";

/// Why a task made its allocation unhealthy when it failed.
pub const FAILED_TASK: &str = "Unhealthy because of failed task";
/// Why the tasks of an allocation whose service checks never all passed are blamed
/// (Nomad's words).
pub const CHECKS_UNHEALTHY: &str = "Services not healthy by deadline";
/// Why a task made its allocation unhealthy when it died.
pub const DEAD_TASK: &str = "Unhealthy because of dead task";

/// How an allocation's health is judged: by its group's `update` block in a deployment, by
/// its `migrate` block otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthPolicy {
    /// The allocation is in a deployment (Nomad's `isDeploy`).
    pub deployment: bool,
    /// `checks` or `task_states`.
    pub health_check: String,
    /// How long every task must run, nanoseconds.
    pub min_healthy_time: u64,
    /// How long after tracking starts the allocation may take, nanoseconds.
    pub healthy_deadline: u64,
}

/// Whether allocations of a job of this type ever have their health judged: service jobs
/// (deployments and migrations) and system jobs (deployments).
pub fn judged_job_type(job_type: JobType) -> bool {
    matches!(job_type, JobType::Service | JobType::System)
}

impl HealthPolicy {
    /// The policy for `local`'s allocation (as the servers last sent it), or `None` when
    /// its health is never judged by the client: not a service or system job, no strategy,
    /// or `manual`.
    pub fn of(local: &LocalAlloc) -> Option<HealthPolicy> {
        let job = &local.job;
        if !judged_job_type(job.job_type) {
            return None;
        }
        let group = job
            .task_groups
            .iter()
            .find(|g| g.name == local.alloc.task_group)?;
        let deployment = !local.alloc.deployment_id.is_empty();
        let policy = if deployment {
            let update = group.update.as_ref().filter(|u| u.rolls())?;
            HealthPolicy {
                deployment,
                health_check: update.health_check().to_owned(),
                min_healthy_time: update.min_healthy_time(),
                healthy_deadline: update.healthy_deadline(),
            }
        } else {
            let migrate = group.migrate.as_ref()?;
            HealthPolicy {
                deployment,
                health_check: migrate.health_check().to_owned(),
                min_healthy_time: migrate.min_healthy_time(),
                healthy_deadline: migrate.healthy_deadline(),
            }
        };
        (policy.health_check != HEALTH_CHECK_MANUAL).then_some(policy)
    }
}

/// The states of the tasks that judge `local`'s health, as Nomad's tracker picks them:
/// poststop tasks wait for the others to end and are left out, and so are prestart and
/// poststart tasks (sidecars too) that completed successfully; a failed one makes the
/// allocation unhealthy, and one still running counts like a main task.
pub fn judged_tasks(local: &LocalAlloc) -> BTreeMap<String, TaskState> {
    let Some(group) = local.group() else {
        return local.task_states.clone();
    };
    local
        .task_states
        .iter()
        .filter(|(name, state)| {
            let Some(task) = group.tasks.iter().find(|t| &t.name == *name) else {
                return true;
            };
            let completed = state.state == TaskStateValue::Dead && !state.failed;
            !(task.is_poststop() || (!task.is_main() && completed))
        })
        .map(|(name, state)| (name.clone(), state.clone()))
        .collect()
}

/// What the tracker sees of an allocation at one moment.
#[derive(Debug, Clone, Copy)]
pub struct AllocView<'a> {
    /// Per task.
    pub task_states: &'a BTreeMap<String, TaskState>,
    /// The allocation's status on this client.
    pub client_status: ClientStatus,
    /// The servers want it stopped or evicted.
    pub server_terminal: bool,
    /// The client is stopping its tasks (the alloc runner's stop token).
    pub stopping: bool,
    /// The allocation's service checks: `None` when it has none, else since when every one
    /// has passed (`None` inside: not all of them pass now).
    pub checks_passing_since: Option<Option<i64>>,
}

impl<'a> AllocView<'a> {
    /// `local` as it stands; `stopping` as the alloc runner knows it.
    pub fn of(local: &'a LocalAlloc, stopping: bool) -> Self {
        AllocView {
            task_states: &local.task_states,
            client_status: local.client_status,
            server_terminal: local.alloc.server_terminal_status(),
            stopping,
            checks_passing_since: None,
        }
    }
}

/// A judged allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Healthy or not.
    pub healthy: bool,
    /// When it was judged, Unix nanoseconds.
    pub at: i64,
    /// Why, for the logs.
    pub reason: String,
    /// The `Alloc Unhealthy` message for each task that made it unhealthy (deployments
    /// only).
    pub task_events: BTreeMap<String, String>,
}

/// One look at an allocation being tracked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// Not judged yet: look again when the allocation changes, or at `wake_at` (Unix
    /// nanoseconds) at the latest.
    Pending {
        /// When the verdict is due if nothing changes (healthy or the deadline).
        wake_at: i64,
    },
    /// Judged.
    Judged(Verdict),
    /// The allocation is being stopped before it was judged: no health is set.
    Stopped,
}

/// The health of one allocation in one deployment (Nomad's `allochealth.Tracker`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthTracker {
    policy: HealthPolicy,
    /// When tracking started, Unix nanoseconds: the healthy deadline counts from here.
    since: i64,
}

impl HealthTracker {
    /// Track with `policy` from `now`.
    pub fn new(policy: HealthPolicy, now: i64) -> Self {
        HealthTracker { policy, since: now }
    }

    /// The policy judged by.
    pub fn policy(&self) -> &HealthPolicy {
        &self.policy
    }

    /// When the healthy deadline passes, Unix nanoseconds.
    pub fn deadline(&self) -> i64 {
        self.since
            .saturating_add(nanos(self.policy.healthy_deadline))
    }

    /// Judge `view` at `now`.
    pub fn judge(&self, view: AllocView<'_>, now: i64) -> Judgement {
        if view.server_terminal {
            return Judgement::Stopped;
        }
        let tasks = view.task_states;
        if view.client_status == ClientStatus::Failed && !tasks.values().any(|t| t.failed) {
            // Something failed at the allocation's level: no task is to blame.
            return Judgement::Judged(self.unhealthy(now, "the allocation failed", false, tasks));
        }
        if tasks.values().any(|t| t.failed) {
            return Judgement::Judged(self.unhealthy(now, "a task failed", true, tasks));
        }
        if view.stopping {
            return Judgement::Stopped;
        }
        if tasks.values().any(|t| t.state == TaskStateValue::Dead) {
            return Judgement::Judged(self.unhealthy(now, "a task is dead", true, tasks));
        }
        let deadline = self.deadline();
        let all_running =
            !tasks.is_empty() && tasks.values().all(|t| t.state == TaskStateValue::Running);
        // With `checks`, every service check must pass too, for min_healthy_time.
        let checks = match view.checks_passing_since {
            Some(since) if self.policy.health_check == HEALTH_CHECK_CHECKS => Some(since),
            _ => None,
        };
        let checks_pass = checks.is_none_or(|since| since.is_some());
        let healthy_at = (all_running && checks_pass).then(|| {
            tasks
                .values()
                .map(running_since)
                .max()
                .unwrap_or(i64::MIN)
                .max(checks.flatten().unwrap_or(i64::MIN))
                .max(self.since)
                .saturating_add(nanos(self.policy.min_healthy_time))
        });
        match healthy_at {
            Some(at) if at <= now && at <= deadline => Judgement::Judged(Verdict {
                healthy: true,
                at: now,
                reason: "every task ran for min_healthy_time".into(),
                task_events: BTreeMap::new(),
            }),
            _ if now >= deadline && all_running && !checks_pass => {
                // Nomad's "Services not healthy by deadline": the checks never all passed.
                let mut v = self.unhealthy(
                    now,
                    "service checks not passing by healthy_deadline",
                    false,
                    tasks,
                );
                if self.policy.deployment {
                    v.task_events = tasks
                        .keys()
                        .map(|t| (t.clone(), CHECKS_UNHEALTHY.to_string()))
                        .collect();
                }
                Judgement::Judged(v)
            }
            _ if now >= deadline => Judgement::Judged(self.unhealthy(
                now,
                "not healthy by healthy_deadline",
                true,
                tasks,
            )),
            Some(at) => Judgement::Pending {
                wake_at: at.min(deadline),
            },
            None => Judgement::Pending { wake_at: deadline },
        }
    }

    /// An unhealthy verdict; `blame_tasks`: record why on each task (in deployments).
    fn unhealthy(
        &self,
        now: i64,
        reason: &str,
        blame_tasks: bool,
        tasks: &BTreeMap<String, TaskState>,
    ) -> Verdict {
        let task_events = if blame_tasks && self.policy.deployment {
            tasks
                .iter()
                .filter_map(|(name, s)| self.blame(s).map(|m| (name.clone(), m)))
                .collect()
        } else {
            BTreeMap::new()
        };
        Verdict {
            healthy: false,
            at: now,
            reason: reason.to_owned(),
            task_events,
        }
    }

    /// Why `state` made the allocation unhealthy, if it did (Nomad's `taskHealthState.event`).
    fn blame(&self, state: &TaskState) -> Option<String> {
        let deadline = go_duration(self.policy.healthy_deadline);
        if state.failed {
            return Some(FAILED_TASK.into());
        }
        match state.state {
            TaskStateValue::Pending => Some(format!(
                "Task not running by healthy_deadline of {deadline}"
            )),
            TaskStateValue::Dead => Some(DEAD_TASK.into()),
            TaskStateValue::Running => {
                let healthy_at = running_since(state)
                    .max(self.since)
                    .saturating_add(nanos(self.policy.min_healthy_time));
                (healthy_at > self.deadline()).then(|| {
                    format!(
                        "Task not running for min_healthy_time of {} by healthy_deadline of {deadline}",
                        go_duration(self.policy.min_healthy_time)
                    )
                })
            }
        }
    }
}

/// Since when `state`'s task has run without interruption, Unix nanoseconds: its latest
/// `Started` event, its last restart or its first start, whichever is latest.
pub fn running_since(state: &TaskState) -> i64 {
    let started = state
        .events
        .iter()
        .rev()
        .find(|e| e.event_type == "Started")
        .map(|e| e.time);
    [
        state.started_at.unix_nanos(),
        state.last_restart.unix_nanos(),
        started,
    ]
    .into_iter()
    .flatten()
    .max()
    .unwrap_or(i64::MIN)
}

fn nanos(d: u64) -> i64 {
    i64::try_from(d).unwrap_or(i64::MAX)
}

impl LocalAlloc {
    /// The `DeploymentStatus` the next status report carries: the verdict on the
    /// allocation's current deployment until a report carrying it is acknowledged, and never
    /// when the servers' copy already holds a verdict.
    pub fn health_report(&self) -> Option<AllocDeploymentStatus> {
        let judged = self
            .health
            .as_ref()
            .filter(|h| h.deployment_id == self.alloc.deployment_id && !h.reported)?;
        let server = self.alloc.deployment_status.as_ref();
        if server.is_some_and(|s| s.healthy.is_some()) {
            return None;
        }
        Some(AllocDeploymentStatus {
            healthy: Some(judged.healthy),
            timestamp: judged.timestamp,
            canary: server.is_some_and(|s| s.canary),
            modify_index: 0,
        })
    }
}

/// What the watcher does after a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to judge in this deployment: wait for the allocation to change.
    Idle,
    /// Tracking: look again on a change, or at `wake_at` (Unix nanoseconds) at the latest.
    Wait {
        /// When the verdict is due if nothing changes.
        wake_at: i64,
    },
    /// Record and report this verdict.
    Judged(Verdict),
    /// The allocation is being stopped: no verdict will come.
    Stopped,
}

/// One allocation's health watch across deployments (Nomad's `alloc_health_watcher` hook):
/// starts a [`HealthTracker`] for each deployment the allocation joins, unless its health
/// is never judged or is already known.
#[derive(Debug, Default)]
pub struct HealthWatch {
    /// The deployment set up for, once a step ran.
    deployment: Option<DeploymentId>,
    tracker: Option<HealthTracker>,
}

impl HealthWatch {
    /// A watch that has seen nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The tracker of the current deployment, while tracking.
    pub fn tracker(&self) -> Option<&HealthTracker> {
        self.tracker.as_ref()
    }

    /// Look at `local` at `now`; `stopping`: the alloc runner is stopping its tasks.
    pub fn step(&mut self, local: &LocalAlloc, stopping: bool, now: i64) -> Step {
        self.step_with_checks(local, stopping, None, now)
    }

    /// [`HealthWatch::step`] with what the allocation's service checks say
    /// ([`AllocView::checks_passing_since`]).
    pub fn step_with_checks(
        &mut self,
        local: &LocalAlloc,
        stopping: bool,
        checks: Option<Option<i64>>,
        now: i64,
    ) -> Step {
        let deployment = &local.alloc.deployment_id;
        if self.deployment.as_ref() != Some(deployment) {
            self.deployment = Some(deployment.clone());
            self.tracker = HealthPolicy::of(local)
                .filter(|_| !judged(local))
                .map(|policy| HealthTracker::new(policy, now));
        }
        if judged(local) {
            // The servers' copy holds a verdict (an operator's, or ours before a restart).
            self.tracker = None;
        }
        let Some(tracker) = &self.tracker else {
            return Step::Idle;
        };
        let states = judged_tasks(local);
        let view = AllocView {
            task_states: &states,
            checks_passing_since: checks,
            ..AllocView::of(local, stopping)
        };
        match tracker.judge(view, now) {
            Judgement::Pending { wake_at } => Step::Wait { wake_at },
            Judgement::Judged(v) => {
                self.tracker = None;
                Step::Judged(v)
            }
            Judgement::Stopped => {
                self.tracker = None;
                Step::Stopped
            }
        }
    }
}

/// True when `local`'s current deployment already has a verdict, from the servers or
/// from this client.
fn judged(local: &LocalAlloc) -> bool {
    local
        .alloc
        .deployment_status
        .as_ref()
        .is_some_and(|s| s.healthy.is_some())
        || local
            .health
            .as_ref()
            .is_some_and(|h| h.deployment_id == local.alloc.deployment_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::types::JudgedHealth;
    use teamster_storage::model::Timestamp;
    use teamster_storage::model::{
        Allocation, DesiredStatus, Job, MigrateStrategy, Task, TaskEvent, TaskGroup, UpdateStrategy,
    };

    const S: i64 = 1_000_000_000;

    fn update(min_healthy_secs: u64, deadline_secs: u64, check: &str) -> UpdateStrategy {
        UpdateStrategy {
            health_check: Some(check.into()),
            min_healthy_time: Some(min_healthy_secs * S as u64),
            healthy_deadline: Some(deadline_secs * S as u64),
            ..UpdateStrategy::nomad_default()
        }
    }

    fn migrate(min_healthy_secs: u64, deadline_secs: u64, check: &str) -> MigrateStrategy {
        MigrateStrategy {
            health_check: Some(check.into()),
            min_healthy_time: Some(min_healthy_secs * S as u64),
            healthy_deadline: Some(deadline_secs * S as u64),
            ..MigrateStrategy::nomad_default()
        }
    }

    /// An allocation of a group with tasks `a` and `b`, both pending.
    fn alloc_of(
        job_type: JobType,
        update: Option<UpdateStrategy>,
        migrate: Option<MigrateStrategy>,
        deployment: &str,
    ) -> LocalAlloc {
        let task = |name: &str| Task {
            name: name.into(),
            driver: "mock".into(),
            ..Task::default()
        };
        let job = Job {
            id: "web".into(),
            job_type,
            task_groups: vec![TaskGroup {
                name: "g".into(),
                count: 1,
                tasks: vec![task("a"), task("b")],
                update,
                migrate,
                ..TaskGroup::default()
            }]
            .into(),
            ..Job::default()
        };
        let alloc = Allocation {
            id: "a1".into(),
            job_id: "web".into(),
            task_group: "g".into(),
            deployment_id: deployment.into(),
            ..Allocation::default()
        };
        LocalAlloc::received(alloc, job, 0)
    }

    /// In a deployment: healthy after 10 s of running, within 60 s.
    fn deployed() -> LocalAlloc {
        alloc_of(
            JobType::Service,
            Some(update(10, 60, "checks")),
            Some(migrate(2, 30, "checks")),
            "d1",
        )
    }

    fn started(local: &mut LocalAlloc, task: &str, at: i64) {
        let s = local.task_states.get_mut(task).unwrap();
        s.state = TaskStateValue::Running;
        if s.started_at.is_zero() {
            s.started_at = Timestamp::from_unix_nanos(at);
        }
        s.events.push(TaskEvent {
            event_type: "Started".into(),
            time: at,
            ..TaskEvent::default()
        });
        local.recompute();
    }

    /// The restart policy's way: pending, then `LastRestart` once the delay is over.
    fn restarting(local: &mut LocalAlloc, task: &str, at: i64) {
        let s = local.task_states.get_mut(task).unwrap();
        s.state = TaskStateValue::Pending;
        s.restarts += 1;
        s.last_restart = Timestamp::from_unix_nanos(at);
        local.recompute();
    }

    fn dead(local: &mut LocalAlloc, task: &str, failed: bool, at: i64) {
        let s = local.task_states.get_mut(task).unwrap();
        s.state = TaskStateValue::Dead;
        s.failed = failed;
        s.finished_at = Timestamp::from_unix_nanos(at);
        local.recompute();
    }

    fn healthy(step: Step) -> bool {
        match step {
            Step::Judged(v) => v.healthy,
            other => panic!("not judged: {other:?}"),
        }
    }

    fn unhealthy_events(step: Step) -> BTreeMap<String, String> {
        match step {
            Step::Judged(v) if !v.healthy => v.task_events,
            other => panic!("not judged unhealthy: {other:?}"),
        }
    }

    /// What the shell does with a verdict.
    fn record(local: &mut LocalAlloc, step: &Step) {
        let Step::Judged(v) = step else {
            panic!("not judged: {step:?}")
        };
        local.health = Some(JudgedHealth {
            deployment_id: local.alloc.deployment_id.clone(),
            healthy: v.healthy,
            timestamp: Timestamp::from_unix_nanos(v.at),
            reported: false,
        });
    }

    #[test]
    fn with_checks_every_check_must_pass_for_min_healthy_time_too() {
        let mut local = deployed();
        started(&mut local, "a", S);
        started(&mut local, "b", S);
        let mut watch = HealthWatch::new();
        // Tasks run, a check does not pass yet: only the deadline is due.
        assert_eq!(
            watch.step_with_checks(&local, false, Some(None), 0),
            Step::Wait { wake_at: 60 * S }
        );
        assert_eq!(
            watch.step_with_checks(&local, false, Some(None), 20 * S),
            Step::Wait { wake_at: 60 * S }
        );
        // Every check passes since 25 s: healthy 10 s later, not before.
        assert_eq!(
            watch.step_with_checks(&local, false, Some(Some(25 * S)), 26 * S),
            Step::Wait { wake_at: 35 * S }
        );
        assert!(healthy(watch.step_with_checks(
            &local,
            false,
            Some(Some(25 * S)),
            35 * S
        )));

        // Checks that never all pass make it unhealthy at the deadline, blaming the tasks
        // with Nomad's words.
        let mut local = deployed();
        started(&mut local, "a", S);
        started(&mut local, "b", S);
        let mut watch = HealthWatch::new();
        watch.step_with_checks(&local, false, Some(None), 0);
        let step = watch.step_with_checks(&local, false, Some(None), 60 * S);
        let events = unhealthy_events(step);
        assert_eq!(events.get("a").map(String::as_str), Some(CHECKS_UNHEALTHY));

        // task_states ignores the checks.
        let mut local = alloc_of(
            JobType::Service,
            Some(update(10, 60, "task_states")),
            None,
            "d1",
        );
        started(&mut local, "a", S);
        started(&mut local, "b", S);
        let mut watch = HealthWatch::new();
        watch.step_with_checks(&local, false, Some(None), 0);
        assert!(healthy(watch.step_with_checks(
            &local,
            false,
            Some(None),
            11 * S
        )));
    }

    #[test]
    fn healthy_once_every_task_ran_for_min_healthy_time() {
        let mut local = deployed();
        let mut watch = HealthWatch::new();
        assert_eq!(
            watch.step(&local, false, 0),
            Step::Wait { wake_at: 60 * S },
            "nothing runs: the deadline is next"
        );
        started(&mut local, "a", S);
        assert_eq!(watch.step(&local, false, S), Step::Wait { wake_at: 60 * S });
        started(&mut local, "b", 3 * S);
        // Both run: healthy 10 s after the later start.
        assert_eq!(
            watch.step(&local, false, 3 * S),
            Step::Wait { wake_at: 13 * S }
        );
        assert_eq!(
            watch.step(&local, false, 13 * S - 1),
            Step::Wait { wake_at: 13 * S }
        );
        let step = watch.step(&local, false, 13 * S);
        assert_eq!(
            step,
            Step::Judged(Verdict {
                healthy: true,
                at: 13 * S,
                reason: "every task ran for min_healthy_time".into(),
                task_events: BTreeMap::new(),
            })
        );
        // Judged once.
        assert_eq!(watch.step(&local, false, 20 * S), Step::Idle);
        record(&mut local, &step);
        let report = local.health_report().expect("the next sync carries it");
        assert_eq!(report.healthy, Some(true));
        assert_eq!(report.timestamp, Timestamp::from_unix_nanos(13 * S));
    }

    #[test]
    fn a_restart_resets_the_min_healthy_time_clock() {
        let mut local = deployed();
        let mut watch = HealthWatch::new();
        started(&mut local, "a", 0);
        started(&mut local, "b", 0);
        assert_eq!(watch.step(&local, false, 0), Step::Wait { wake_at: 10 * S });
        restarting(&mut local, "a", 8 * S);
        assert_eq!(
            watch.step(&local, false, 8 * S),
            Step::Wait { wake_at: 60 * S }
        );
        started(&mut local, "a", 9 * S);
        assert_eq!(
            watch.step(&local, false, 9 * S),
            Step::Wait { wake_at: 19 * S }
        );
        // A restart the watcher never saw (down and up between two looks) resets it too.
        restarting(&mut local, "b", 12 * S);
        started(&mut local, "b", 12 * S + 5);
        assert_eq!(
            watch.step(&local, false, 19 * S),
            Step::Wait {
                wake_at: 22 * S + 5
            }
        );
        assert!(healthy(watch.step(&local, false, 22 * S + 5)));
    }

    #[test]
    fn a_failed_task_is_unhealthy_at_once_and_blamed() {
        let mut local = deployed();
        let mut watch = HealthWatch::new();
        started(&mut local, "a", 0);
        started(&mut local, "b", 0);
        assert_eq!(watch.step(&local, false, 0), Step::Wait { wake_at: 10 * S });
        dead(&mut local, "a", true, 4 * S);
        // The failed task stops its siblings: the failure still judges.
        let events = unhealthy_events(watch.step(&local, true, 4 * S));
        assert_eq!(
            events,
            BTreeMap::from([("a".to_string(), FAILED_TASK.to_string())]),
            "the running sibling is not to blame"
        );
    }

    #[test]
    fn a_dead_task_is_unhealthy_but_a_stop_is_no_verdict() {
        let mut local = deployed();
        started(&mut local, "a", 0);
        started(&mut local, "b", 0);
        dead(&mut local, "b", false, 2 * S);
        let mut watch = HealthWatch::new();
        let events = unhealthy_events(watch.step(&local, false, 2 * S));
        assert_eq!(events["b"], DEAD_TASK);

        // Killed by the client (its tasks stopped) or stopped by the servers: no verdict.
        let mut watch = HealthWatch::new();
        assert_eq!(watch.step(&local, true, 2 * S), Step::Stopped);
        local.alloc.desired_status = DesiredStatus::Stop;
        let mut watch = HealthWatch::new();
        assert_eq!(watch.step(&local, false, 2 * S), Step::Stopped);
        dead(&mut local, "a", true, 2 * S);
        assert_eq!(
            HealthWatch::new().step(&local, false, 2 * S),
            Step::Stopped,
            "the servers' stop comes first, as in Nomad"
        );
    }

    #[test]
    fn not_healthy_by_the_deadline_is_unhealthy_with_nomads_reasons() {
        let mut local = deployed();
        let mut watch = HealthWatch::new();
        assert_eq!(
            watch.step(&local, false, 5 * S),
            Step::Wait { wake_at: 65 * S },
            "the deadline counts from when tracking started"
        );
        started(&mut local, "a", 58 * S);
        assert_eq!(
            watch.step(&local, false, 58 * S),
            Step::Wait { wake_at: 65 * S }
        );
        let events = unhealthy_events(watch.step(&local, false, 65 * S));
        assert_eq!(
            events,
            BTreeMap::from([
                (
                    "a".to_string(),
                    "Task not running for min_healthy_time of 10s by healthy_deadline of 1m0s"
                        .to_string()
                ),
                (
                    "b".to_string(),
                    "Task not running by healthy_deadline of 1m0s".to_string()
                ),
            ])
        );
        assert_eq!(watch.step(&local, false, 70 * S), Step::Idle);
    }

    #[test]
    fn a_migration_is_judged_by_the_migrate_block_without_task_events() {
        let mut local = alloc_of(
            JobType::Service,
            Some(update(10, 60, "checks")),
            Some(migrate(2, 30, "task_states")),
            "",
        );
        let policy = HealthPolicy::of(&local).unwrap();
        assert!(!policy.deployment);
        assert_eq!(policy.min_healthy_time, 2 * S as u64);
        let mut watch = HealthWatch::new();
        started(&mut local, "a", 0);
        started(&mut local, "b", 0);
        assert_eq!(watch.step(&local, false, 0), Step::Wait { wake_at: 2 * S });
        assert!(healthy(watch.step(&local, false, 2 * S)));

        // Unhealthy migrations blame no task, as in Nomad.
        let mut local = alloc_of(JobType::Service, None, Some(migrate(2, 30, "checks")), "");
        let mut watch = HealthWatch::new();
        assert_eq!(watch.step(&local, false, 0), Step::Wait { wake_at: 30 * S });
        started(&mut local, "a", 0);
        assert!(unhealthy_events(watch.step(&local, false, 30 * S)).is_empty());
    }

    #[test]
    fn manual_health_checks_and_missing_strategies_are_never_judged() {
        let cases = [
            (
                "manual update",
                alloc_of(
                    JobType::Service,
                    Some(update(1, 5, "manual")),
                    Some(migrate(1, 5, "checks")),
                    "d1",
                ),
            ),
            (
                "manual migrate",
                alloc_of(
                    JobType::Service,
                    Some(update(1, 5, "checks")),
                    Some(migrate(1, 5, "manual")),
                    "",
                ),
            ),
            (
                "no update block",
                alloc_of(JobType::Service, None, Some(migrate(1, 5, "checks")), "d1"),
            ),
            (
                "update block that does not roll",
                alloc_of(
                    JobType::Service,
                    Some(UpdateStrategy {
                        max_parallel: Some(0),
                        ..update(1, 5, "checks")
                    }),
                    None,
                    "d1",
                ),
            ),
            (
                "no migrate block",
                alloc_of(JobType::Service, Some(update(1, 5, "checks")), None, ""),
            ),
        ];
        for (what, mut local) in cases {
            assert_eq!(HealthPolicy::of(&local), None, "{what}");
            let mut watch = HealthWatch::new();
            started(&mut local, "a", 0);
            started(&mut local, "b", 0);
            for at in [0, 5 * S, 3600 * S] {
                assert_eq!(watch.step(&local, false, at), Step::Idle, "{what}");
            }
            dead(&mut local, "a", true, 3600 * S);
            assert_eq!(watch.step(&local, false, 3600 * S), Step::Idle, "{what}");
        }
    }

    #[test]
    fn a_system_allocation_in_a_deployment_is_judged_by_its_update_block() {
        let mut local = alloc_of(JobType::System, Some(update(10, 60, "checks")), None, "d1");
        let policy = HealthPolicy::of(&local).expect("judged");
        assert!(policy.deployment);
        assert_eq!(policy.min_healthy_time, 10 * S as u64);
        let mut watch = HealthWatch::new();
        started(&mut local, "a", 0);
        started(&mut local, "b", 0);
        assert_eq!(watch.step(&local, false, 0), Step::Wait { wake_at: 10 * S });
        assert!(healthy(watch.step(&local, false, 10 * S)));
        // Outside a deployment a system allocation has nothing to report.
        let local = alloc_of(JobType::System, Some(update(10, 60, "checks")), None, "");
        assert_eq!(HealthPolicy::of(&local), None);
    }

    #[test]
    fn batch_and_sysbatch_allocations_are_never_judged() {
        for job_type in [JobType::Batch, JobType::SysBatch] {
            let mut local = alloc_of(
                job_type,
                Some(update(1, 5, "checks")),
                Some(migrate(1, 5, "checks")),
                "d1",
            );
            assert_eq!(HealthPolicy::of(&local), None, "{job_type:?}");
            let mut watch = HealthWatch::new();
            started(&mut local, "a", 0);
            started(&mut local, "b", 0);
            assert_eq!(watch.step(&local, false, 60 * S), Step::Idle);
            assert_eq!(local.health_report(), None);
        }
    }

    #[test]
    fn a_new_deployment_id_starts_tracking_again() {
        let mut local = deployed();
        let mut watch = HealthWatch::new();
        started(&mut local, "a", 0);
        started(&mut local, "b", 0);
        assert_eq!(watch.step(&local, false, 0), Step::Wait { wake_at: 10 * S });
        let step = watch.step(&local, false, 10 * S);
        assert!(healthy(step.clone()));
        record(&mut local, &step);
        assert_eq!(watch.step(&local, false, 11 * S), Step::Idle);
        assert!(local.health_report().is_some());

        // An in-place update joins deployment d2: its verdict is not d1's.
        local.alloc.deployment_id = "d2".into();
        assert_eq!(local.health_report(), None, "d1's verdict is not d2's");
        assert_eq!(
            watch.step(&local, false, 20 * S),
            Step::Wait { wake_at: 30 * S },
            "tracked again: min_healthy_time from now, although the tasks ran long before"
        );
        let step = watch.step(&local, false, 30 * S);
        assert!(healthy(step.clone()));
        record(&mut local, &step);
        let report = local.health_report().unwrap();
        assert_eq!(report.timestamp, Timestamp::from_unix_nanos(30 * S));
        assert_eq!(watch.step(&local, false, 31 * S), Step::Idle);

        // Deadline from the new tracking: d3 joined at 100 s, a task never comes back up.
        local.alloc.deployment_id = "d3".into();
        restarting(&mut local, "a", 100 * S);
        assert_eq!(
            watch.step(&local, false, 100 * S),
            Step::Wait { wake_at: 160 * S }
        );
        assert!(!unhealthy_events(watch.step(&local, false, 160 * S)).is_empty());
    }

    #[test]
    fn a_verdict_the_servers_hold_is_not_judged_or_reported_again() {
        let mut local = deployed();
        started(&mut local, "a", 0);
        started(&mut local, "b", 0);
        // A restarted client whose earlier verdict (or an operator's) reached the servers.
        local.alloc.deployment_status = Some(Box::new(AllocDeploymentStatus {
            healthy: Some(false),
            ..AllocDeploymentStatus::default()
        }));
        let mut watch = HealthWatch::new();
        assert_eq!(watch.step(&local, false, 30 * S), Step::Idle);
        local.health = Some(JudgedHealth {
            deployment_id: "d1".into(),
            healthy: true,
            timestamp: Timestamp::from_unix_nanos(S),
            reported: false,
        });
        assert_eq!(local.health_report(), None, "the servers' verdict stands");

        // Judged by this client before a restart, not yet acknowledged: reported, not
        // judged again.
        local.alloc.deployment_status = Some(Box::new(AllocDeploymentStatus {
            canary: true,
            ..AllocDeploymentStatus::default()
        }));
        let mut watch = HealthWatch::new();
        assert_eq!(watch.step(&local, false, 30 * S), Step::Idle);
        let report = local.health_report().unwrap();
        assert_eq!((report.healthy, report.canary), (Some(true), true));
        local.health.as_mut().unwrap().reported = true;
        assert_eq!(local.health_report(), None, "acknowledged once");
    }

    #[test]
    fn running_since_is_the_latest_start() {
        let mut s = TaskState {
            started_at: Timestamp::from_unix_nanos(5),
            ..TaskState::default()
        };
        assert_eq!(running_since(&s), 5);
        s.last_restart = Timestamp::from_unix_nanos(9);
        assert_eq!(running_since(&s), 9);
        s.events.push(TaskEvent {
            event_type: "Started".into(),
            time: 11,
            ..TaskEvent::default()
        });
        assert_eq!(running_since(&s), 11);
    }

    #[test]
    fn durations_read_as_go_prints_them() {
        for (ns, text) in [
            (0, "0s"),
            (999, "999ns"),
            (1_500, "1.5µs"),
            (250_000_000, "250ms"),
            (10 * S as u64, "10s"),
            (1_500_000_000, "1.5s"),
            (300 * S as u64, "5m0s"),
            (90 * S as u64, "1m30s"),
            (3600 * S as u64, "1h0m0s"),
            (3725 * S as u64 + 500_000_000, "1h2m5.5s"),
        ] {
            assert_eq!(go_duration(ns), text);
        }
    }
}
