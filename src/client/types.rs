//! What the parts of the client share: an allocation as this client runs it
//! ([`LocalAlloc`], persisted), the handles that find a task again after a restart
//! ([`TaskHandle`]), how a task ended ([`ExitResult`]), task events, and what an operator
//! asks of a running task ([`TaskControl`]). Nothing here imports another part of the
//! client, so the runners, drivers, checks and health watchers all build on it without
//! importing each other in a circle.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use teamster_storage::model::{
    Allocation, ClientStatus, DeploymentId, Job, Task, TaskEvent, TaskState, TaskStateValue,
    Timestamp,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

/// Events kept per task (oldest dropped first), as Nomad does.
pub const MAX_TASK_EVENTS: usize = 10;

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
    /// What each task's hooks keep across client restarts, by task and hook.
    #[serde(default)]
    pub hook_state: BTreeMap<String, BTreeMap<String, serde_json::Value>>,
    /// Its tasks are being stopped: its services are withdrawn before the tasks are killed.
    #[serde(default)]
    pub shutting_down: bool,
    /// Where its migrating disk comes from (another node's allocation), as the servers
    /// said.
    #[serde(default)]
    pub migrate_from: Option<crate::rpc::service::node::MigrateFrom>,
    /// The services its hooks have registered (the service loop sends them).
    #[serde(default)]
    pub registered: Registered,
    /// Its group's `max_run_duration` ran out: once its tasks are dead it is `complete`
    /// with [`MAX_RUN_DURATION_EXCEEDED`] (kept across client restarts).
    #[serde(default)]
    pub max_run_exceeded: bool,
    /// What the client made for its group's network in bridge mode
    /// ([`crate::client::network`]), written before it is made.
    #[serde(default)]
    pub network: Option<AllocNetwork>,
}

/// What the client made for one allocation's network, kept in its state across restarts
/// (Nomad's `AllocNetworkStatus` and its CNI result).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct AllocNetwork {
    /// The group's network mode (`bridge`).
    pub mode: String,
    /// The namespace's path.
    pub netns: std::path::PathBuf,
    /// The interface inside it.
    pub interface: String,
    /// Its address (empty until the plugins have run: the record is written first).
    pub address: String,
    /// What the plugins' `ADD` gave (handed to their `DEL`).
    #[serde(default)]
    pub result: serde_json::Value,
    /// Why it could not be made (the tasks fail to start with it).
    #[serde(default)]
    pub error: String,
    /// The network configuration list `ADD` ran (its `DEL` runs the same, whatever the
    /// client's configuration says by then).
    #[serde(default)]
    pub conflist: serde_json::Value,
    /// The plugins' `DEL` succeeded (a retry only removes the namespace).
    #[serde(default)]
    pub deleted: bool,
    /// The namespace's hostname (the group's `hostname`, interpolated, or a docker group's
    /// pause container's): its hosts file names it; empty for none.
    #[serde(default)]
    pub hostname: String,
}

/// Nomad's description of an allocation its `max_run_duration` stopped.
pub const MAX_RUN_DURATION_EXCEEDED: &str = "allocation exceeded max_run_duration";

/// The services an allocation's hooks have registered: the group's (its `group_services`
/// hook) and each task's (that task's `services` hook).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registered {
    /// The group's services.
    pub group: bool,
    /// The tasks whose services are registered.
    pub tasks: std::collections::BTreeSet<String>,
}

/// Whose services a hook registers or withdraws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceOwner<'a> {
    /// The group's.
    Group,
    /// A task's.
    Task(&'a str),
}

impl Registered {
    /// Registers (`on`) or withdraws `owner`'s services: true when that changed anything.
    pub fn set(&mut self, owner: ServiceOwner<'_>, on: bool) -> bool {
        match owner {
            ServiceOwner::Group => std::mem::replace(&mut self.group, on) != on,
            ServiceOwner::Task(task) if on => self.tasks.insert(task.to_string()),
            ServiceOwner::Task(task) => self.tasks.remove(task),
        }
    }
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
            hook_state: BTreeMap::new(),
            shutting_down: false,
            migrate_from: None,
            registered: Registered::default(),
            max_run_exceeded: false,
            network: None,
        }
    }

    /// Its task group in its job (`None` if the job lacks it).
    pub fn group(&self) -> Option<&teamster_storage::model::TaskGroup> {
        self.job
            .task_groups
            .iter()
            .find(|g| g.name == self.alloc.task_group)
    }

    /// The names of its group's tasks.
    pub fn task_names(&self) -> Vec<String> {
        self.group()
            .map(|g| g.tasks.iter().map(|t| t.name.clone()).collect())
            .unwrap_or_default()
    }

    /// Recompute the allocation's status from its tasks.
    pub fn recompute(&mut self) {
        if self.max_run_exceeded && self.finished() {
            self.client_status = ClientStatus::Complete;
            self.client_description = MAX_RUN_DURATION_EXCEEDED.into();
            return;
        }
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

pub fn push_event(state: &mut TaskState, e: TaskEvent) {
    state.events.push(e);
    if state.events.len() > MAX_TASK_EVENTS {
        let extra = state.events.len() - MAX_TASK_EVENTS;
        state.events.drain(..extra);
    }
}

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
    /// Stop it and start it again at once (`alloc restart`, or a renewed workload identity
    /// with `change_mode = "restart"`); answered once it is stopped.
    Restart {
        /// Why, for the task's events (`None`: the operator asked).
        reason: Option<String>,
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
    /// Kill it for good, failed (a template's change script failed with `fail_on_error`);
    /// answered once it is dead.
    Fail {
        /// Why, for its `Killing` event.
        reason: String,
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

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitResult {
    /// The exit code (0 when killed by a signal).
    pub exit_code: i64,
    /// The signal that killed it (0: none).
    pub signal: i64,
    /// Set when the exit status could not be observed (re-attached task).
    pub unknown: bool,
    /// The kernel's OOM killer killed a process of the task.
    #[serde(default)]
    pub oom_killed: bool,
}

impl ExitResult {
    /// Exit code 0 and no signal.
    pub fn successful(&self) -> bool {
        self.exit_code == 0 && self.signal == 0
    }
}

/// What a restarted client needs to find a running task again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskHandle {
    /// A `raw_exec` process, or an `exec` task's supervisor.
    Process {
        /// Its pid (and process group id).
        pid: i32,
        /// Its start time in clock ticks since boot (`/proc/<pid>/stat` field 22), so a reused
        /// pid is not mistaken for it.
        start_ticks: u64,
        /// The directories of its cgroup, when it has one.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        cgroup: Vec<std::path::PathBuf>,
    },
    /// A `mock` task.
    Mock {
        /// When it started, Unix nanoseconds.
        started_at: i64,
        /// How long it runs, nanoseconds.
        run_for: u64,
        /// Its exit code.
        exit_code: i64,
    },
    /// A `docker` container (added last: handles are persisted).
    Docker {
        /// The container's id.
        container_id: String,
    },
    /// A launch begun and not yet known to have happened: recorded before the driver is
    /// called, replaced by the task's own handle once it has started.
    Launching {
        /// This launch's id (unique per task and attempt).
        launch_id: String,
        /// When the launch began, Unix nanoseconds.
        at: i64,
    },
}

/// The health this client judged, kept in [`LocalAlloc`] (and its state file) until a report
/// carrying it is acknowledged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgedHealth {
    /// The deployment it was judged in (empty: a migration).
    pub deployment_id: DeploymentId,
    /// Healthy or not.
    pub healthy: bool,
    /// When.
    pub timestamp: Timestamp,
    /// A server acknowledged a report carrying it.
    pub reported: bool,
}

/// What the client keeps across restarts.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClientState {
    /// This node's id.
    pub node_id: String,
    /// This node's secret.
    pub secret_id: String,
    /// Allocations this client runs or ran, by id.
    pub allocs: BTreeMap<String, LocalAlloc>,
}

/// Why the allocation's tasks are being killed, when it is more than a stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillReason {
    /// The servers stopped the allocation (or the client is told to).
    Stopped,
    /// A sibling task failed.
    SiblingFailed(String),
    /// The group's leader task is dead.
    LeaderDead,
    /// Every task but the sidecars (and poststop tasks) is dead: the sidecars go too.
    MainDead,
    /// The agent is shutting down and takes its tasks with it (dev mode): no shutdown
    /// delays.
    AgentShutdown,
    /// The group's `max_run_duration` is over: every task is killed, poststop tasks that
    /// have not started too, and the allocation completes.
    MaxRunDuration,
}

impl KillReason {
    /// Whether the shutdown delays are waited out for this kill.
    pub fn waits_shutdown_delay(&self) -> bool {
        !matches!(self, KillReason::AgentShutdown)
    }
}

/// The waves a stop kills an allocation's tasks in, Nomad's order: the leader first, then
/// every other task but the sidecars and poststop tasks, then the sidecars. Poststop tasks
/// are not killed by a stop (they run once the others are dead), only when the agent goes
/// away with its tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillWave {
    /// The `leader` task.
    Leader,
    /// Main tasks and ephemeral prestart and poststart tasks.
    Main,
    /// Prestart and poststart sidecars.
    Sidecars,
    /// Poststop tasks.
    Poststop,
}

impl KillWave {
    /// The waves a stop goes through, in order.
    pub const STOP: [KillWave; 3] = [KillWave::Leader, KillWave::Main, KillWave::Sidecars];

    /// `task`'s wave.
    pub fn of(task: &Task) -> KillWave {
        if task.leader {
            KillWave::Leader
        } else if task.is_poststop() {
            KillWave::Poststop
        } else if task.is_sidecar() {
            KillWave::Sidecars
        } else {
            KillWave::Main
        }
    }
}

/// What the task runners of one allocation share with its allocation runner: the tokens
/// that kill the tasks, wave by wave, why, and the way a task's death reaches the
/// allocation runner.
#[derive(Debug, Default)]
pub struct Siblings {
    /// Cancelled to ask the allocation runner to stop every task (it withdraws the
    /// services, waits the group's shutdown delay, then kills them wave by wave).
    pub stop_asked: CancellationToken,
    /// Cancelled when the agent goes away with its tasks: shutdown delays are cut short.
    pub hurry: CancellationToken,
    kills: [CancellationToken; 4],
    reason: Mutex<Option<KillReason>>,
}

impl Siblings {
    /// Why the tasks are killed (the first reason given; a stop if none was).
    pub fn reason(&self) -> KillReason {
        self.reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or(KillReason::Stopped)
    }

    /// Ask for every task to be stopped, for `reason` unless one was given before.
    pub fn stop(&self, reason: KillReason) {
        self.reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(reason);
        self.stop_asked.cancel();
    }

    /// `task`, of kill `wave`, is dead: a failure or a leader's death stops the others (a
    /// poststop task's does not: the others are dead already).
    pub fn task_dead(&self, task: &str, wave: KillWave, failed: bool) {
        if wave == KillWave::Poststop {
            return;
        }
        if failed {
            self.stop(KillReason::SiblingFailed(task.to_string()));
        } else if wave == KillWave::Leader {
            self.stop(KillReason::LeaderDead);
        }
    }

    /// What kills the tasks of `wave`.
    pub fn kill_token(&self, wave: KillWave) -> &CancellationToken {
        &self.kills[wave as usize]
    }

    /// Kills the tasks of `wave`.
    pub fn kill(&self, wave: KillWave) {
        self.kill_token(wave).cancel();
    }

    /// Kills every task, poststop tasks included.
    pub fn kill_all(&self) {
        for token in &self.kills {
            token.cancel();
        }
    }
}

/// Where each task runner of one allocation takes requests (a task restarted anew gets a
/// new runner, and its new queue replaces the old one here).
#[derive(Debug, Clone, Default)]
pub struct TaskControls(Arc<Mutex<BTreeMap<String, mpsc::Sender<TaskControl>>>>);

impl TaskControls {
    /// `task`'s runner takes requests on `tx` from now on.
    pub fn insert(&self, task: &str, tx: mpsc::Sender<TaskControl>) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(task.to_string(), tx);
    }

    /// Where to send requests to `task`, while its runner lives.
    pub fn get(&self, task: &str) -> Option<mpsc::Sender<TaskControl>> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(task)
            .filter(|tx| !tx.is_closed())
            .cloned()
    }
}

/// An operator's restart of every task of an allocation, asked of its runner before the
/// running tasks are restarted; answered once it is ready for them.
#[derive(Debug)]
pub struct RestartAll {
    /// Told once the runner is ready.
    pub reply: oneshot::Sender<()>,
}

/// What the client keeps of a running allocation: what stops it and a way to reach each of
/// its task runners.
#[derive(Debug)]
pub struct AllocHandle {
    siblings: Arc<Siblings>,
    tasks: TaskControls,
    updates: watch::Sender<u64>,
    restart_all: mpsc::Sender<RestartAll>,
}

impl AllocHandle {
    /// The handle of an allocation whose tasks share `siblings`, take requests on `tasks`
    /// and hear of in-place updates of the job on `updates` (its `JobModifyIndex`); its
    /// runner takes restarts of every task on `restart_all`.
    pub fn new(
        siblings: Arc<Siblings>,
        tasks: TaskControls,
        updates: watch::Sender<u64>,
        restart_all: mpsc::Sender<RestartAll>,
    ) -> AllocHandle {
        AllocHandle {
            siblings,
            tasks,
            updates,
            restart_all,
        }
    }

    /// Whether its runner has finished (it takes no request any more).
    pub fn finished(&self) -> bool {
        self.restart_all.is_closed()
    }

    /// Waits until its runner has finished.
    pub async fn done(&self) {
        self.restart_all.closed().await;
    }

    /// The allocation now holds its job at `job_modify_index` (an in-place update): its
    /// runners apply it.
    pub fn update(&self, job_modify_index: u64) {
        self.updates.send_if_modified(|held| {
            let changed = *held != job_modify_index;
            *held = job_modify_index;
            changed
        });
    }

    /// Stop every task of the allocation.
    pub fn cancel(&self) {
        self.siblings.stop(KillReason::Stopped);
    }

    /// Stop every task of the allocation now, skipping the shutdown delays (the agent is
    /// going away with them), poststop tasks too, even when a stop was under way.
    pub fn cancel_now(&self) {
        self.siblings.stop(KillReason::AgentShutdown);
        self.siblings.hurry.cancel();
        self.siblings.kill_all();
    }

    /// Whether it was told to stop (or stopped itself: a task failed, the leader died).
    pub fn is_cancelled(&self) -> bool {
        self.siblings.stop_asked.is_cancelled()
    }

    /// Where to send requests to `task`, while its runner lives.
    pub fn task(&self, task: &str) -> Option<mpsc::Sender<TaskControl>> {
        self.tasks.get(task)
    }

    /// Asks the allocation's runner to prepare a restart of every task (its completed tasks
    /// pending again, its lifecycle from the beginning); the caller then restarts the
    /// running ones. `None` when the runner is gone.
    pub fn prepare_restart_all(&self) -> Option<oneshot::Receiver<()>> {
        let (reply, answer) = oneshot::channel();
        self.restart_all.try_send(RestartAll { reply }).ok()?;
        Some(answer)
    }
}

/// The latest result of a check (Nomad's `QueryResult`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct CheckResult {
    /// The check's ID.
    #[serde(rename = "ID")]
    pub id: String,
    /// `healthiness`, or `readiness` for a check with `on_update = "ignore"` (not counted
    /// in the allocation's health).
    pub mode: String,
    /// `pending`, `success` or `failure`.
    pub status: String,
    /// The HTTP status (0 for tcp and for no answer).
    pub status_code: u16,
    /// What the probe found.
    pub output: String,
    /// When, Unix seconds.
    pub timestamp: i64,
    /// The allocation's group.
    pub group: String,
    /// The task.
    pub task: String,
    /// The service.
    pub service: String,
    /// The check's name.
    pub check: String,
    /// Since when it has passed without a failure, Unix nanoseconds (the health watcher's
    /// `min_healthy_time` counts from here).
    #[serde(skip)]
    pub success_since: Option<i64>,
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
