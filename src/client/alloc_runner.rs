//! Allocation and task runners: run every task of an allocation with its driver, apply the
//! RestartPolicy, record TaskStates with events, and derive the allocation's ClientStatus.
//!
//! ```text
//!  alloc watcher ──new alloc──▶ spawn one task runner per task ──▶ driver start / re-attach
//!                 ──stop──────▶ cancel the alloc's token ──▶ Killing → SIGTERM … → Killed
//!  task exit ──▶ RestartTracker ──▶ Restarting (delay) | Not Restarting (dead, failed)
//!  TaskControl ─▶ restart: Restart Signaled → kill → Restarting (no delay, not counted)
//!              ─▶ signal: Signaling → the signal to the task's process group (or container)
//!  every change ──▶ LocalAlloc (status recomputed, marked dirty) ──▶ updater batches it
//! ```
//!
//! A failed task kills its siblings (the allocation failed). Killed tasks are dead, not
//! failed. An operator's restart (`alloc restart`) is not held against the restart policy,
//! as in Nomad, but counts in the task's `Restarts`.
//!
//! Beside the task runners of a service job's allocation runs its health watcher, the shell
//! of [`health::HealthWatch`](crate::client::health::HealthWatch): it steps the watch on
//! every change of the allocation and at the time the watch asks to look again, and records
//! a verdict (with its `Alloc Unhealthy` task events) as a change the updater reports.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use teamster_storage::model::{
    Allocation, ClientStatus, DeploymentId, Job, JobType, Task, TaskEvent, TaskState,
    TaskStateValue, Timestamp,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use crate::client::driver::{self, ExitResult, TaskHandle};
use crate::client::health::{HealthWatch, JudgedHealth, Step, Verdict, ALLOC_UNHEALTHY};
use crate::client::restart::{RestartDecision, RestartTracker};
use crate::client::taskenv::{TaskDirs, TaskEnv};
use crate::client::Shared;

/// Events kept per task (oldest dropped first), as Nomad does.
pub const MAX_TASK_EVENTS: usize = 10;
/// How often the engine is asked again about a launch it could not account for.
const RETRY_LAUNCH_LOOKUP: Duration = Duration::from_secs(1);
/// Kill timeout when a task names none.
pub const DEFAULT_KILL_TIMEOUT: Duration = Duration::from_secs(5);

/// An allocation as this client runs it; persisted in the client's state file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LocalAlloc {
    /// The servers' latest view of it.
    pub alloc: Allocation,
    /// Its job at its version.
    pub job: Job,
    /// What this client reports.
    pub client_status: ClientStatus,
    /// Why.
    pub client_description: String,
    /// Per task.
    pub task_states: BTreeMap<String, TaskState>,
    /// How to find each running task again after a restart.
    pub handles: BTreeMap<String, TaskHandle>,
    /// Bumped on every change the servers have not heard of yet.
    pub version: u64,
    /// The version last acknowledged by a server.
    pub reported: u64,
    /// The health this client judged in the allocation's deployment or migration
    /// ([`health`](crate::client::health)).
    #[serde(default)]
    pub health: Option<JudgedHealth>,
}

impl LocalAlloc {
    /// A freshly received allocation: every task pending with a `Received` event.
    pub fn received(alloc: Allocation, job: Job, now: i64) -> LocalAlloc {
        // Above what the servers applied, in case this client reported on it before (and
        // forgot it, or lost its state).
        let version = u64::from(alloc.client_report_seq) + 1;
        let tasks = job
            .task_groups
            .iter()
            .find(|g| g.name == alloc.task_group)
            .map(|g| g.tasks.clone())
            .unwrap_or_default();
        let task_states = tasks
            .iter()
            .map(|t| {
                let mut s = TaskState::default();
                push_event(
                    &mut s,
                    event(now, "Received", "Task received by client".into()),
                );
                (t.name.clone(), s)
            })
            .collect();
        LocalAlloc {
            alloc,
            job,
            client_status: ClientStatus::Pending,
            client_description: "No tasks have started".into(),
            task_states,
            handles: BTreeMap::new(),
            version,
            reported: 0,
            health: None,
        }
    }

    /// Recompute the allocation's status from its tasks.
    pub fn recompute(&mut self) {
        let (status, desc) = client_status(&self.task_states);
        self.client_status = status;
        self.client_description = desc.into();
    }

    /// Whether every task is dead.
    pub fn finished(&self) -> bool {
        self.task_states
            .values()
            .all(|s| s.state == TaskStateValue::Dead)
    }
}

/// Nomad's `getClientStatus`: failed if a task failed; else running if one runs; else pending
/// if one is pending; else complete.
pub fn client_status(tasks: &BTreeMap<String, TaskState>) -> (ClientStatus, &'static str) {
    if tasks.values().any(|t| t.failed) {
        return (ClientStatus::Failed, "Failed tasks");
    }
    if tasks.values().any(|t| t.state == TaskStateValue::Running) {
        return (ClientStatus::Running, "Tasks are running");
    }
    if tasks.values().any(|t| t.state == TaskStateValue::Pending) {
        return (ClientStatus::Pending, "No tasks have started");
    }
    (ClientStatus::Complete, "All tasks have completed")
}

/// A task event of `kind` at `now`.
pub fn event(now: i64, kind: &str, message: String) -> TaskEvent {
    TaskEvent {
        event_type: kind.to_string(),
        time: now,
        display_message: message.clone(),
        message,
        ..TaskEvent::default()
    }
}

fn push_event(state: &mut TaskState, e: TaskEvent) {
    state.events.push(e);
    if state.events.len() > MAX_TASK_EVENTS {
        let extra = state.events.len() - MAX_TASK_EVENTS;
        state.events.drain(..extra);
    }
}

/// The allocation's directory its tasks share (`NOMAD_ALLOC_DIR`), under its own.
pub const ALLOC_SHARED_DIR: &str = "alloc";
/// A task's secrets directory (`NOMAD_SECRETS_DIR`), under its task directory.
pub const SECRETS_DIR: &str = "secrets";

/// Why an operator's request to a task was not carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskOpError {
    /// The task is not running (dead, or waiting to restart).
    #[error("task {0:?} is not running")]
    NotRunning(String),
    /// The signal could not be delivered.
    #[error("cannot send {signal} to task {task:?}: {reason}")]
    Signal {
        /// The task.
        task: String,
        /// The signal's name.
        signal: String,
        /// Why.
        reason: String,
    },
}

/// The answer a [`TaskControl`] gets once carried out.
pub type TaskReply = oneshot::Sender<Result<(), TaskOpError>>;

/// What an operator asks of a running task.
#[derive(Debug)]
pub enum TaskControl {
    /// Stop it and start it again at once (`alloc restart`); answered once it is stopped.
    Restart {
        /// Where the answer goes.
        reply: TaskReply,
    },
    /// Its service check keeps failing (`check_restart`): kill it and let the restart
    /// policy decide, as for a crash; answered once it is stopped.
    CheckRestart {
        /// The check's name.
        check: String,
        /// Where the answer goes.
        reply: TaskReply,
    },
    /// Send it a signal (`alloc signal`).
    Signal {
        /// The signal's name (`SIGUSR1`).
        name: &'static str,
        /// Its number.
        signal: i32,
        /// Where the answer goes.
        reply: TaskReply,
    },
}

/// Requests a task runner queues at most; more wait for room.
const CONTROL_QUEUE: usize = 4;

/// What the client keeps of a running allocation: the token that stops it and a way to
/// reach each of its task runners.
#[derive(Debug)]
pub struct AllocRunner {
    stop: CancellationToken,
    tasks: BTreeMap<String, mpsc::Sender<TaskControl>>,
}

impl AllocRunner {
    /// Stop every task of the allocation.
    pub fn cancel(&self) {
        self.stop.cancel();
    }

    /// Whether it was told to stop.
    pub fn is_cancelled(&self) -> bool {
        self.stop.is_cancelled()
    }

    /// Where to send requests to `task`, while its runner lives.
    pub fn task(&self, task: &str) -> Option<&mpsc::Sender<TaskControl>> {
        self.tasks.get(task).filter(|tx| !tx.is_closed())
    }
}

/// The directory of `task` of `alloc_id`.
pub fn task_dir(alloc_root: &std::path::Path, alloc_id: &str, task: &str) -> PathBuf {
    alloc_root.join(alloc_id).join(task)
}

/// `task` of `local`'s allocation as its runner starts it (config interpolated, Nomad's
/// variables in its environment), with its directory: what `alloc exec` runs in too.
pub fn prepared_task(shared: &Shared, local: &LocalAlloc, task: &Task) -> (Task, PathBuf) {
    let alloc_id = local.alloc.id.to_string();
    let alloc_dir = shared.alloc_root.join(&alloc_id).join(ALLOC_SHARED_DIR);
    let dir = task_dir(&shared.alloc_root, &alloc_id, &task.name);
    let secrets = dir.join(SECRETS_DIR);
    let env = TaskEnv::new(
        shared.node_values.clone(),
        &local.alloc,
        &local.job,
        task,
        TaskDirs {
            alloc: &alloc_dir,
            task: &dir,
            secrets: &secrets,
        },
    );
    (env.apply(task), dir)
}

/// Start (or re-attach) every task of `local`'s allocation. Returns what stops them and
/// reaches them.
pub fn spawn(shared: &Arc<Shared>, local: &LocalAlloc) -> AllocRunner {
    let stop = CancellationToken::new();
    let mut controls = BTreeMap::new();
    let alloc_id = local.alloc.id.to_string();
    let Some(group) = local
        .job
        .task_groups
        .iter()
        .find(|g| g.name == local.alloc.task_group)
    else {
        warn!(alloc_id, group = %local.alloc.task_group, "task group not in the job");
        return AllocRunner {
            stop,
            tasks: controls,
        };
    };
    let batch = matches!(local.job.job_type, JobType::Batch | JobType::SysBatch);
    let policy = group.restart_policy.clone().unwrap_or_default();
    // A dispatched child's payload, for the tasks with a `dispatch_payload` block.
    let payload = if local.job.payload.is_empty() {
        Ok(Vec::new())
    } else {
        local.job.payload.decompress().map_err(|e| e.to_string())
    };
    let alloc_dir = shared.alloc_root.join(&alloc_id).join(ALLOC_SHARED_DIR);
    for task in &group.tasks {
        let state = local.task_states.get(&task.name);
        if state.is_some_and(|s| s.state == TaskStateValue::Dead) {
            continue;
        }
        let (prepared, dir) = prepared_task(shared, local, task);
        let secrets = dir.join(SECRETS_DIR);
        let (control_tx, control) = mpsc::channel(CONTROL_QUEUE);
        controls.insert(task.name.clone(), control_tx);
        let runner = TaskRunner {
            control,
            shared: shared.clone(),
            alloc_id: alloc_id.clone(),
            task: prepared,
            payload: task.dispatch_payload.as_ref().map(|_| payload.clone()),
            setup_dirs: vec![alloc_dir.clone(), secrets],
            alloc_dir: alloc_dir.clone(),
            job_name: local.job.name.clone(),
            ports: local.alloc.allocated_resources.shared.ports.to_vec(),
            tracker: RestartTracker::new(&policy, batch),
            reattach: local.handles.get(&task.name).cloned(),
            stop: stop.clone(),
            restarts: state.map_or(0, |s| s.restarts),
        };
        let span = tracing::info_span!("task", alloc_id = %alloc_id, task = %task.name);
        tokio::spawn(runner.run().instrument(span));
    }
    // Neither deployments nor migrations judge other jobs' allocations.
    if local.job.job_type == JobType::Service {
        let span = tracing::info_span!("alloc_health", alloc_id = %alloc_id);
        tokio::spawn(watch_health(shared.clone(), alloc_id, stop.clone()).instrument(span));
    }
    AllocRunner {
        stop,
        tasks: controls,
    }
}

/// The health watcher's shell: step the allocation's [`HealthWatch`] on every change of the
/// allocation (and when it asks to look again), record its verdicts. Ends once the
/// allocation is gone, stopped or finished.
async fn watch_health(shared: Arc<Shared>, alloc_id: String, stop: CancellationToken) {
    let mut changes = shared.alloc_changes.subscribe();
    let mut watch = HealthWatch::new();
    let mut watching: Option<DeploymentId> = None;
    loop {
        // Seen before looking, so a change made meanwhile wakes the wait below.
        changes.borrow_and_update();
        let now = shared.clock.now_unix_nanos();
        let stopping = stop.is_cancelled();
        let mut step = Step::Idle;
        let mut over = false;
        let mut deployment_id = DeploymentId::default();
        let checks = {
            let st = shared.state();
            st.allocs
                .get(&alloc_id)
                .and_then(|l| crate::client::checks::passing_since(&shared, &st.node_id, l))
        };
        let present = shared.update_alloc_if(&alloc_id, |local| {
            step = watch.step_with_checks(local, stopping, checks, now);
            over = local.finished() || local.alloc.server_terminal_status();
            deployment_id = local.alloc.deployment_id.clone();
            match &step {
                Step::Judged(verdict) => {
                    record_verdict(local, verdict);
                    true
                }
                _ => false,
            }
        });
        if !present {
            return;
        }
        if watching.as_ref() != Some(&deployment_id) {
            match watch.tracker() {
                Some(t) => debug!(
                    deployment_id = %deployment_id,
                    deployment = t.policy().deployment,
                    health_check = %t.policy().health_check,
                    min_healthy_time_ns = t.policy().min_healthy_time,
                    healthy_deadline_ns = t.policy().healthy_deadline,
                    "tracking allocation health"
                ),
                None => debug!(deployment_id = %deployment_id, "allocation health not tracked"),
            }
            watching = Some(deployment_id.clone());
        }
        let wake_at = match step {
            Step::Idle => None,
            Step::Wait { wake_at } => Some(wake_at),
            Step::Judged(verdict) => {
                shared.persist();
                let healthy = if verdict.healthy { "true" } else { "false" };
                metrics::counter!("teamster_client_alloc_health_total", "healthy" => healthy)
                    .increment(1);
                info!(
                    deployment_id = %deployment_id,
                    healthy = verdict.healthy,
                    reason = %verdict.reason,
                    "allocation health set"
                );
                None
            }
            Step::Stopped => {
                debug!(deployment_id = %deployment_id, "allocation stopped before its health was set");
                return;
            }
        };
        if stopping || over {
            return;
        }
        let wait = wake_at.map(|at| Duration::from_nanos(at.saturating_sub(now).max(1) as u64));
        tokio::select! {
            _ = stop.cancelled() => {}
            changed = changes.changed() => if changed.is_err() { return },
            _ = sleep_for(wait) => {}
        }
    }
}

/// `verdict` on the allocation's current deployment, kept for the updater to report, with
/// its `Alloc Unhealthy` events on the tasks it blames.
fn record_verdict(local: &mut LocalAlloc, verdict: &Verdict) {
    local.health = Some(JudgedHealth {
        deployment_id: local.alloc.deployment_id.clone(),
        healthy: verdict.healthy,
        timestamp: Timestamp::from_unix_nanos(verdict.at),
        reported: false,
    });
    for (task, message) in &verdict.task_events {
        if let Some(state) = local.task_states.get_mut(task) {
            push_event(state, event(verdict.at, ALLOC_UNHEALTHY, message.clone()));
        }
    }
}

/// Sleep for `wait`, or forever.
async fn sleep_for(wait: Option<Duration>) {
    match wait {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

struct TaskRunner {
    /// Operators' requests (`alloc restart`, `alloc signal`); `None` once every sender is
    /// gone.
    control: mpsc::Receiver<TaskControl>,
    shared: Arc<Shared>,
    alloc_id: String,
    task: Task,
    /// The dispatch payload to write before the task starts (tasks with a
    /// `dispatch_payload` block), or why it could not be read.
    payload: Option<Result<Vec<u8>, String>>,
    /// Directories made before the task starts (the allocation's shared one, its secrets).
    setup_dirs: Vec<PathBuf>,
    /// The allocation's shared directory (a container mounts it at `/alloc`).
    alloc_dir: PathBuf,
    /// The job's name (a container's label).
    job_name: String,
    /// The group's allocated ports (a container publishes them).
    ports: Vec<teamster_storage::model::AllocatedPortMapping>,
    tracker: RestartTracker,
    reattach: Option<TaskHandle>,
    stop: CancellationToken,
    restarts: u64,
}

impl TaskRunner {
    fn now(&self) -> i64 {
        self.shared.clock.now_unix_nanos()
    }

    /// Change this task's state, recompute the allocation, and wake the updater.
    fn update(&self, f: impl FnOnce(&mut TaskState, &mut BTreeMap<String, TaskHandle>)) {
        self.shared.update_alloc(&self.alloc_id, |local| {
            let state = local.task_states.entry(self.task.name.clone()).or_default();
            f(state, &mut local.handles);
        });
    }

    /// The task runs (started at `at`, Unix nanoseconds) under `handle`: its state, a
    /// `Started` event, and the handle, written at once so a restarted client finds this
    /// task and never starts a twin.
    fn record_started(&self, handle: TaskHandle, at: i64) {
        self.update(|s, handles| {
            s.state = TaskStateValue::Running;
            if s.started_at.is_zero() {
                s.started_at = Timestamp::from_unix_nanos(at);
            }
            push_event(s, event(at, "Started", "Task started by client".into()));
            handles.insert(self.task.name.clone(), handle);
        });
        self.shared.persist();
    }

    /// Writes the dispatch payload to `local/<file>` in the task directory (Nomad's
    /// `dispatch_payload` hook); nothing for tasks without the block.
    fn write_payload(&self, dir: &std::path::Path) -> Result<(), String> {
        let (Some(block), Some(payload)) = (&self.task.dispatch_payload, &self.payload) else {
            return Ok(());
        };
        let payload = payload.as_ref().map_err(Clone::clone)?;
        let path = dir.join("local").join(&block.file);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("creating {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, payload).map_err(|e| format!("writing {}: {e}", path.display()))
    }

    fn kill_timeout(&self) -> Duration {
        let asked = if self.task.kill_timeout == 0 {
            DEFAULT_KILL_TIMEOUT
        } else {
            Duration::from_nanos(self.task.kill_timeout)
        };
        asked.min(self.shared.config.max_kill_timeout)
    }

    async fn run(mut self) {
        let dir = task_dir(&self.shared.alloc_root, &self.alloc_id, &self.task.name);
        loop {
            let reattached = match self.reattach.take() {
                Some(TaskHandle::Launching { launch_id, at }) => {
                    // Never launched on a guess: while the engine cannot say, the task
                    // waits (pending), asking every second, until it can or the
                    // allocation is stopped.
                    let found = loop {
                        let found = driver::find_launch(
                            &launch_id,
                            at,
                            &self.task,
                            &dir,
                            &self.alloc_id,
                            &self.shared.docker,
                            self.now(),
                        )
                        .await;
                        let driver::Launched::EngineUnknown(why) = &found else {
                            break found;
                        };
                        warn!(launch_id, error = %why, "cannot tell whether a launch started; asking the engine again");
                        tokio::select! {
                            _ = self.stop.cancelled() => break found,
                            _ = tokio::time::sleep(RETRY_LAUNCH_LOOKUP) => {}
                        }
                    };
                    info!(launch_id, outcome = ?found, "looked for a launch of an earlier run");
                    match found {
                        driver::Launched::NotStarted => None,
                        driver::Launched::Found(running) => {
                            // Started by that run, which did not get to record it.
                            self.record_started(running.handle(), at);
                            Some(Some(*running))
                        }
                        driver::Launched::Ended => Some(None),
                        driver::Launched::EngineUnknown(_) => {
                            // Stopped while the engine could not say.
                            self.dead(
                                false,
                                event(
                                    self.now(),
                                    "Killed",
                                    "Task stopped while the container engine could not tell whether it had started".into(),
                                ),
                            );
                            return;
                        }
                    }
                }
                Some(h) => Some(
                    driver::find_again(&h, &self.task, &dir, &self.shared.docker, self.now()).await,
                ),
                None => None,
            };
            let mut running = match reattached {
                Some(Some(running)) => {
                    info!("re-attached to a running task");
                    running
                }
                Some(None) => {
                    // It ended while the client was away; its exit status is unknown.
                    let exit = ExitResult {
                        exit_code: 0,
                        signal: 0,
                        unknown: true,
                    };
                    if self.after_exit(exit).await {
                        continue;
                    }
                    return;
                }
                None => {
                    if self.stop.is_cancelled() {
                        self.dead(
                            false,
                            event(self.now(), "Killed", "Task killed before it started".into()),
                        );
                        return;
                    }
                    let now = self.now();
                    self.update(|s, _| {
                        push_event(
                            s,
                            event(now, "Task Setup", "Building Task Directory".into()),
                        )
                    });
                    let setup = self
                        .setup_dirs
                        .iter()
                        .try_for_each(|d| {
                            std::fs::create_dir_all(d)
                                .map_err(|e| format!("cannot create {}: {e}", d.display()))
                        })
                        .and_then(|()| self.write_payload(&dir));
                    if let Err(e) = setup {
                        warn!(error = %e, "task directories could not be built");
                        let mut ev = event(now, "Setup Failure", e.clone());
                        ev.fails_task = true;
                        self.dead(true, ev);
                        return;
                    }
                    let node_id = self.shared.state().node_id.clone();
                    // Recorded before it happens: a client killed from here on finds out,
                    // once restarted, whether the task started (`driver::find_launch`).
                    let launch_id = crate::util::new_uuid(&mut rand::thread_rng());
                    let recorded = self.shared.update_alloc_if(&self.alloc_id, |local| {
                        local.handles.insert(
                            self.task.name.clone(),
                            TaskHandle::Launching {
                                launch_id: launch_id.clone(),
                                at: now,
                            },
                        );
                        false
                    });
                    if !recorded || self.stop.is_cancelled() {
                        // Gone or stopped meanwhile: nothing may run unrecorded.
                        self.dead(
                            false,
                            event(now, "Killed", "Task killed before it started".into()),
                        );
                        return;
                    }
                    if let Err(e) = self.shared.try_persist() {
                        warn!(error = %e, "cannot record the launch; not starting the task");
                        let mut ev = event(
                            now,
                            "Setup Failure",
                            format!("cannot record the launch in the client state: {e}"),
                        );
                        ev.fails_task = true;
                        self.dead(true, ev);
                        return;
                    }
                    crate::util::crash::point("client.launch_recorded");
                    let ctx = driver::LaunchContext {
                        enabled: &self.shared.config.drivers,
                        docker: &self.shared.docker,
                        alloc_dir: &self.alloc_dir,
                        alloc_id: &self.alloc_id,
                        job_name: &self.job_name,
                        node_id: &node_id,
                        ports: &self.ports,
                        launch_id: &launch_id,
                    };
                    match driver::launch(&self.task, &dir, ctx, now).await {
                        Ok(running) => {
                            crate::util::crash::point("client.task_started");
                            self.record_started(running.handle(), now);
                            running
                        }
                        Err(e) => {
                            warn!(error = %e, recoverable = e.recoverable(), "task could not start");
                            let mut ev = event(now, "Driver Failure", e.to_string());
                            ev.driver_error = e.to_string();
                            if !e.recoverable() {
                                ev.fails_task = true;
                                self.dead(true, ev);
                                return;
                            }
                            // Recoverable: one attempt of the restart policy, as an exit.
                            self.update(|s, handles| {
                                push_event(s, ev);
                                handles.remove(&self.task.name);
                            });
                            let decision = self.tracker.on_start_error(tokio::time::Instant::now());
                            if self.after_decision(decision).await {
                                continue;
                            }
                            return;
                        }
                    }
                }
            };
            let mut control_open = true;
            let exit = loop {
                tokio::select! {
                    exit = running.wait() => break Some(exit),
                    _ = self.stop.cancelled() => {
                        let timeout = self.kill_timeout();
                        let now = self.now();
                        self.update(|s, _| {
                            let mut ev = event(now, "Killing", format!("Sent interrupt. Waiting {} before force killing", humantime::format_duration(timeout)));
                            ev.kill_timeout = timeout.as_nanos() as u64;
                            push_event(s, ev);
                        });
                        let exit = running.kill(timeout).await;
                        let mut ev = event(self.now(), "Killed", "Task successfully killed".into());
                        ev.exit_code = exit.exit_code;
                        ev.signal = exit.signal;
                        self.dead(false, ev);
                        return;
                    }
                    control = self.control.recv(), if control_open => match control {
                        None => control_open = false,
                        Some(TaskControl::Signal { name, signal, reply }) => {
                            let _ = reply.send(self.signal(&mut running, name, signal).await);
                        }
                        Some(TaskControl::Restart { reply }) => {
                            self.restart(&mut running).await;
                            let _ = reply.send(Ok(()));
                            break None;
                        }
                        Some(TaskControl::CheckRestart { check, reply }) => {
                            let reason = format!("healthcheck: check {check:?} unhealthy");
                            let now = self.now();
                            self.update(|s, _| {
                                let mut ev = event(now, "Restart Signaled", reason.clone());
                                ev.restart_reason = reason;
                                push_event(s, ev);
                            });
                            let exit = running.kill(self.kill_timeout()).await;
                            let _ = reply.send(Ok(()));
                            // Counted against the restart policy, as Nomad's check watcher.
                            let exit_code = if exit.successful() { 1 } else { exit.exit_code };
                            break Some(ExitResult { exit_code, ..exit });
                        }
                    },
                }
            };
            // `None`: restarted by an operator, started again at once.
            let Some(exit) = exit else {
                continue;
            };
            if !self.after_exit(exit).await {
                return;
            }
        }
    }

    /// `alloc signal`: a `Signaling` event, then the signal to the task's process group.
    async fn signal(
        &self,
        running: &mut driver::RunningTask,
        name: &str,
        signal: i32,
    ) -> Result<(), TaskOpError> {
        let now = self.now();
        self.update(|s, _| {
            let mut ev = event(now, "Signaling", format!("Task being sent signal {name}"));
            ev.details.insert("signal".into(), name.to_string());
            push_event(s, ev);
        });
        running
            .signal(signal)
            .await
            .map_err(|e| TaskOpError::Signal {
                task: self.task.name.clone(),
                signal: name.to_string(),
                reason: e.to_string(),
            })
    }

    /// `alloc restart`: `Restart Signaled`, the task killed as a stop kills it, its exit
    /// recorded, and `Restarting` without a delay. The restart policy is not consulted and
    /// not charged (Nomad's `SetRestartTriggered`), but the task's `Restarts` counts it.
    async fn restart(&mut self, running: &mut driver::RunningTask) {
        const REASON: &str = "User requested restart";
        let now = self.now();
        self.update(|s, _| {
            let mut ev = event(now, "Restart Signaled", REASON.into());
            ev.restart_reason = REASON.into();
            push_event(s, ev);
        });
        let exit = running.kill(self.kill_timeout()).await;
        let now = self.now();
        let mut terminated = event(
            now,
            "Terminated",
            format!("Exit Code: {}, Signal: {}", exit.exit_code, exit.signal),
        );
        terminated.exit_code = exit.exit_code;
        terminated.signal = exit.signal;
        self.restarts += 1;
        let restarts = self.restarts;
        self.update(|s, handles| {
            push_event(s, terminated);
            handles.remove(&self.task.name);
            s.state = TaskStateValue::Pending;
            let mut ev = event(now, "Restarting", "Task restarting in 0s".into());
            ev.restart_reason = REASON.into();
            push_event(s, ev);
            s.restarts = restarts;
            s.last_restart = Timestamp::from_unix_nanos(now);
        });
    }

    /// Record an exit and apply the restart policy: true to start the task again.
    async fn after_exit(&mut self, exit: ExitResult) -> bool {
        let now = self.now();
        let msg = if exit.unknown {
            "Task exited while the client was not watching; exit code unknown".to_string()
        } else {
            format!("Exit Code: {}, Signal: {}", exit.exit_code, exit.signal)
        };
        let mut ev = event(now, "Terminated", msg);
        ev.exit_code = exit.exit_code;
        ev.signal = exit.signal;
        if exit.unknown {
            ev.details.insert("exit_code_unknown".into(), "true".into());
        }
        self.update(|s, handles| {
            push_event(s, ev);
            handles.remove(&self.task.name);
        });
        let decision = self.tracker.on_exit(tokio::time::Instant::now(), &exit);
        self.after_decision(decision).await
    }

    /// Apply the restart policy's decision: true to start the task again (after waiting
    /// out the delay), false when the task is dead.
    async fn after_decision(&mut self, decision: RestartDecision) -> bool {
        let now = self.now();
        match decision {
            RestartDecision::Restart { delay, reason } => {
                let now = self.now();
                self.update(|s, _| {
                    s.state = TaskStateValue::Pending;
                    let mut ev = event(
                        now,
                        "Restarting",
                        format!("Task restarting in {}", humantime::format_duration(delay)),
                    );
                    ev.restart_reason = reason;
                    push_event(s, ev);
                });
                let wake = tokio::time::sleep(delay);
                tokio::pin!(wake);
                loop {
                    tokio::select! {
                        _ = &mut wake => break,
                        _ = self.stop.cancelled() => {
                            self.dead(false, event(self.now(), "Killed", "Task killed while waiting to restart".into()));
                            return false;
                        }
                        Some(control) = self.control.recv() => {
                            let (TaskControl::Restart { reply }
                            | TaskControl::CheckRestart { reply, .. }
                            | TaskControl::Signal { reply, .. }) = control;
                            let _ = reply.send(Err(TaskOpError::NotRunning(self.task.name.clone())));
                        }
                    }
                }
                self.restarts += 1;
                let restarts = self.restarts;
                let now = self.now();
                self.update(|s, _| {
                    s.restarts = restarts;
                    s.last_restart = Timestamp::from_unix_nanos(now);
                });
                true
            }
            RestartDecision::Dead { failed, reason } => {
                let mut ev = event(now, "Not Restarting", reason);
                ev.fails_task = failed;
                self.dead(failed, ev);
                false
            }
        }
    }

    fn dead(&self, failed: bool, ev: TaskEvent) {
        debug!(alloc_id = %self.alloc_id, task = %self.task.name, failed, event = %ev.event_type, "task dead");
        let now = self.now();
        self.update(|s, handles| {
            s.state = TaskStateValue::Dead;
            s.failed = failed;
            s.finished_at = Timestamp::from_unix_nanos(now);
            push_event(s, ev);
            handles.remove(&self.task.name);
        });
        if failed {
            // A failed task fails the allocation: stop its siblings.
            self.stop.cancel();
        }
        self.shared.persist();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(v: TaskStateValue, failed: bool) -> TaskState {
        TaskState {
            state: v,
            failed,
            ..TaskState::default()
        }
    }

    #[test]
    fn alloc_status_follows_its_tasks() {
        use TaskStateValue::*;
        let mut m = BTreeMap::new();
        m.insert("a".to_string(), state(Pending, false));
        assert_eq!(client_status(&m).0, ClientStatus::Pending);
        m.insert("b".to_string(), state(Running, false));
        assert_eq!(client_status(&m).0, ClientStatus::Running);
        m.insert("a".to_string(), state(Dead, false));
        m.insert("b".to_string(), state(Dead, false));
        assert_eq!(client_status(&m).0, ClientStatus::Complete);
        m.insert("b".to_string(), state(Dead, true));
        assert_eq!(client_status(&m).0, ClientStatus::Failed);
    }

    #[test]
    fn events_are_capped() {
        let mut s = TaskState::default();
        for i in 0..25 {
            push_event(&mut s, event(i, "Restarting", String::new()));
        }
        assert_eq!(s.events.len(), MAX_TASK_EVENTS);
        assert_eq!(s.events[0].time, 15);
    }
}
