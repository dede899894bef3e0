//! The task runner: one per task of a running allocation. Its decisions are in [`core`]
//! (stop rules, the restart policy, task events); the work around the task's start and stop
//! is in [`hooks`]; this shell runs both with the task's driver.
//!
//! ```text
//!  restored handle ─▶ prestart hooks (restore) ─▶ find the task again ─┐
//!  none ─▶ Task Setup ─▶ prestart hooks ─▶ launch recorded ─▶ driver ──┴▶ Started ─▶ poststart
//!  running ─▶ exit ─▶ exited hooks ─▶ restart policy ─▶ Restarting (delay) | dead
//!          ─▶ kill ─▶ [sibling / leader event] ─▶ pre_kill hooks ─▶ shutdown_delay
//!                 ─▶ Killing ─▶ signal … ─▶ Killed
//!          ─▶ TaskControl: restart (not counted by the policy), check restart, signal
//!  job updated in place (running, or waiting to restart) ─▶ the new task version (its stop
//!          rules and restart policy from now on) ─▶ update hooks
//!  dead ─▶ stop hooks (the log collector drains) ─▶ Dead ─▶ the allocation runner hears it
//! ```
//!
//! A failed task stops its siblings, and so does the death of the group's `leader` task
//! ([`Siblings`]). Killed tasks are dead, not failed. An operator's restart (`alloc
//! restart`) is not held against the restart policy, as in Nomad, but counts in the task's
//! `Restarts`.

pub mod core;
pub mod hooks;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use teamster_storage::model::{TaskEvent, TaskState, TaskStateValue, Timestamp};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::client::driver::{self, RunningTask};
use crate::client::lifecycle::{Allowed, Stage};
use crate::client::restart::{RestartDecision, WITHIN_POLICY};
use crate::client::shared::Shared;
use crate::client::types::{
    event, push_event, ExitResult, KillReason, KillWave, Siblings, TaskControl, TaskHandle,
    TaskOpError, MAX_RUN_DURATION_EXCEEDED,
};
use core::TaskCore;
use hooks::{HookCtx, HookError, HookState, Prepared, TaskHook};

/// How often the engine is asked again about a launch it could not account for.
const RETRY_LAUNCH_LOOKUP: Duration = Duration::from_secs(1);

/// Everything a task runner is made of.
pub struct TaskRunnerParts {
    /// Operators' requests.
    pub control: mpsc::Receiver<TaskControl>,
    /// In-place updates of the job (its `JobModifyIndex`).
    pub updates: watch::Receiver<u64>,
    /// What the allocation's lifecycle lets start now.
    pub gate: watch::Receiver<Allowed>,
    /// Its lifecycle stage, as the allocation runner fixed it.
    pub stage: Stage,
    /// The wave a stop kills it in, as the allocation runner fixed it.
    pub wave: KillWave,
    /// The client.
    pub shared: Arc<Shared>,
    /// What the hooks see.
    pub ctx: HookCtx,
    /// The stop and restart rules.
    pub core: TaskCore,
    /// The handle an earlier run of the client recorded.
    pub reattach: Option<TaskHandle>,
    /// The allocation's other tasks.
    pub siblings: Arc<Siblings>,
    /// The job's name (a container's label).
    pub job_name: String,
    /// The group's allocated ports (a container publishes them).
    pub ports: Vec<teamster_storage::model::AllocatedPortMapping>,
    /// The hooks' states as persisted.
    pub hook_state: BTreeMap<String, serde_json::Value>,
}

/// A task's runner.
pub struct TaskRunner {
    control: mpsc::Receiver<TaskControl>,
    updates: watch::Receiver<u64>,
    gate: watch::Receiver<Allowed>,
    stage: Stage,
    wave: KillWave,
    /// What kills this task (its wave's token).
    kill: CancellationToken,
    shared: Arc<Shared>,
    ctx: HookCtx,
    hooks: Vec<Box<dyn TaskHook>>,
    states: BTreeMap<&'static str, HookState>,
    prepared: Prepared,
    core: TaskCore,
    reattach: Option<TaskHandle>,
    siblings: Arc<Siblings>,
    job_name: String,
    ports: Vec<teamster_storage::model::AllocatedPortMapping>,
}

/// The phases hooks run in after prestart.
#[derive(Debug, Clone, Copy)]
enum Phase {
    Poststart,
    Update,
    PreKill,
    Exited,
    Stop,
}

impl TaskRunner {
    /// A runner of `parts`' task with the standard hooks.
    pub fn new(parts: TaskRunnerParts) -> TaskRunner {
        let hooks = hooks::task_hooks();
        let states = hooks
            .iter()
            .map(|h| (h.name(), parts.hook_state.get(h.name()).cloned()))
            .collect();
        let mut updates = parts.updates;
        updates.borrow_and_update();
        let kill = parts.siblings.kill_token(parts.wave).clone();
        TaskRunner {
            control: parts.control,
            updates,
            gate: parts.gate,
            stage: parts.stage,
            wave: parts.wave,
            kill,
            shared: parts.shared,
            ctx: parts.ctx,
            hooks,
            states,
            prepared: Prepared::default(),
            core: parts.core,
            reattach: parts.reattach,
            siblings: parts.siblings,
            job_name: parts.job_name,
            ports: parts.ports,
        }
    }

    fn now(&self) -> i64 {
        self.shared.clock.now_unix_nanos()
    }

    fn name(&self) -> &str {
        &self.ctx.task.name
    }

    /// The name of the task it runs.
    pub fn task_name(&self) -> &str {
        self.name()
    }

    /// Change this task's state, recompute the allocation, and wake the updater.
    fn update(&self, f: impl FnOnce(&mut TaskState, &mut BTreeMap<String, TaskHandle>)) {
        let name = self.name().to_string();
        self.shared.update_alloc(&self.ctx.alloc_id, |local| {
            let state = local.task_states.entry(name.clone()).or_default();
            f(state, &mut local.handles);
        });
    }

    fn push(&self, ev: TaskEvent) {
        self.update(|s, _| push_event(s, ev));
    }

    /// Keeps the hooks' states with the allocation and writes the client state.
    fn save_hook_states(&self) {
        let name = self.name().to_string();
        let states: BTreeMap<String, serde_json::Value> = self
            .states
            .iter()
            .filter_map(|(k, v)| v.clone().map(|v| (k.to_string(), v)))
            .collect();
        self.shared.update_alloc_if(&self.ctx.alloc_id, |local| {
            if states.is_empty() {
                local.hook_state.remove(&name);
            } else {
                local.hook_state.insert(name, states);
            }
            false
        });
        self.shared.persist();
    }

    /// Runs every prestart hook in order; the first error stops the run, unless
    /// `restoring` (the task runs already: each hook restores what it can, and every error
    /// is logged).
    async fn prestart(&mut self, restoring: bool) -> Result<(), HookError> {
        let mut prepared = Prepared::default();
        self.ctx.restoring = restoring;
        let mut result = Ok(());
        // A hook that waits (templates waiting for a variable) gives way to a stop.
        let kill = self.kill.clone();
        let stop_asked = (self.stage != Stage::Poststop).then(|| self.siblings.stop_asked.clone());
        for hook in &self.hooks {
            let state = self.states.entry(hook.name()).or_default();
            let before = state.clone();
            let stopped = async {
                match &stop_asked {
                    Some(s) => tokio::select! {
                        _ = kill.cancelled() => {}
                        _ = s.cancelled() => {}
                    },
                    None => kill.cancelled().await,
                }
            };
            let r = tokio::select! {
                r = hook.prestart(&self.ctx, state, &mut prepared) => r,
                _ = stopped => Err(HookError::recoverable(hook.name(), "the task was stopped")),
            };
            let changed = *state != before;
            if changed {
                self.save_hook_states();
            }
            if let Err(e) = r {
                if restoring {
                    warn!(hook = hook.name(), error = %e, "a task hook could not be restored");
                    continue;
                }
                result = Err(e);
                break;
            }
        }
        self.prepared = prepared;
        self.apply_prepared_env();
        result
    }

    /// What the prestart hooks add to the environment (workload identity tokens) is the
    /// task's, on top of its own (also after an in-place update replaced the task).
    fn apply_prepared_env(&mut self) {
        let added = self
            .prepared
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()));
        self.ctx.task.env.extend(added);
    }

    /// Runs every hook's `phase`; errors are logged (the task has run).
    async fn run_phase(&mut self, phase: Phase) {
        let mut changed = false;
        for hook in &self.hooks {
            let state = self.states.entry(hook.name()).or_default();
            let before = state.clone();
            let r = match phase {
                Phase::Poststart => hook.poststart(&self.ctx, state).await,
                Phase::Update => hook.update(&self.ctx, state).await,
                Phase::PreKill => hook.pre_kill(&self.ctx, state).await,
                Phase::Exited => hook.exited(&self.ctx, state).await,
                Phase::Stop => hook.stop(&self.ctx, state).await,
            };
            changed |= *state != before;
            if let Err(e) = r {
                warn!(hook = hook.name(), ?phase, error = %e, "task hook failed");
            }
        }
        if changed {
            self.save_hook_states();
        }
    }

    /// An in-place update of the job: the task's new version (interpolated again) from the
    /// allocation as the client holds it, its stop rules and restart policy from now on, and
    /// the update hooks. A restart later starts the new version.
    /// The task as the client's state gives it now (interpolated, its environment
    /// complete), with its restart policy.
    fn prepared_now(
        &self,
    ) -> Option<(
        teamster_storage::model::Task,
        teamster_storage::model::RestartPolicy,
    )> {
        let st = self.shared.state();
        st.allocs.get(&self.ctx.alloc_id).and_then(|local| {
            let group = local.group()?;
            let task = group.tasks.iter().find(|t| t.name == self.ctx.task.name)?;
            let policy = group.task_restart_policy(task).unwrap_or_default();
            Some((self.shared.prepared_task(local, task).0, policy))
        })
    }

    async fn apply_update(&mut self) {
        let index = *self.updates.borrow_and_update();
        let Some((task, policy)) = self.prepared_now() else {
            return;
        };
        debug!(job_modify_index = index, "task updated in place");
        self.core.update(&task, &policy);
        self.ctx.task = task;
        // The hooks see the policy in force, as when the runner was built.
        self.ctx.task.restart_policy = Some(policy);
        self.apply_prepared_env();
        self.run_phase(Phase::Update).await;
    }

    /// The task runs (started at `at`, Unix nanoseconds) under `handle`: its state, a
    /// `Started` event, and the handle, written at once so a restarted client finds this
    /// task and never starts a twin.
    fn record_started(&self, handle: TaskHandle, at: i64) {
        let name = self.name().to_string();
        self.update(|s, handles| {
            s.state = TaskStateValue::Running;
            if s.started_at.is_zero() {
                s.started_at = Timestamp::from_unix_nanos(at);
            }
            push_event(s, event(at, "Started", "Task started by client".into()));
            handles.insert(name, handle);
        });
        self.shared.persist();
    }

    /// Runs the task until it is dead for good.
    pub async fn run(mut self) {
        loop {
            let running = match self.reattach.take() {
                Some(handle) => match self.find_again(handle).await {
                    Found::Running(running) => Some(*running),
                    Found::Ended => {
                        // It ended while the client was away; its exit status is unknown.
                        let exit = ExitResult {
                            exit_code: 0,
                            signal: 0,
                            unknown: true,
                            oom_killed: false,
                        };
                        if self.after_exit(exit).await {
                            continue;
                        }
                        return;
                    }
                    Found::NotStarted => None,
                    Found::Dead => return,
                },
                None => None,
            };
            let running = match running {
                Some(running) => running,
                None => match self.launch().await {
                    Some(running) => running,
                    // Dead, or started again after the restart policy's delay.
                    None if self.is_dead() => return,
                    None => continue,
                },
            };
            if !self.watch(running).await {
                return;
            }
        }
    }

    /// Whether this task is being stopped: its allocation is (a poststop task only when it
    /// is killed itself: it runs once the others are dead).
    fn stopping(&self) -> bool {
        self.kill.is_cancelled()
            || (self.stage != Stage::Poststop && self.siblings.stop_asked.is_cancelled())
    }

    /// Answers an operator's request that needs the task running.
    fn not_running(&self, control: TaskControl) {
        let (TaskControl::Restart { reply, .. }
        | TaskControl::CheckRestart { reply, .. }
        | TaskControl::Fail { reply, .. }
        | TaskControl::Signal { reply, .. }) = control;
        let _ = reply.send(Err(TaskOpError::NotRunning(self.name().to_string())));
    }

    /// Waits until the allocation's lifecycle lets this task start (its prestart tasks
    /// done, its main tasks running, or the others dead for a poststop task): false when it
    /// is stopped first.
    async fn wait_for_start(&mut self) -> bool {
        let mut logged = false;
        loop {
            if self.gate.borrow_and_update().allows(self.stage) {
                return true;
            }
            if !logged {
                debug!(stage = ?self.stage, "waiting for the allocation's lifecycle to start this task");
                logged = true;
            }
            let poststop = self.stage == Stage::Poststop;
            tokio::select! {
                _ = self.kill.cancelled() => return false,
                _ = self.siblings.stop_asked.cancelled(), if !poststop => return false,
                changed = self.gate.changed() => {
                    if changed.is_err() {
                        // The allocation runner is gone: only a kill ends the wait.
                        self.kill.cancelled().await;
                        return false;
                    }
                }
                Ok(()) = self.updates.changed() => self.apply_update().await,
                Some(control) = self.control.recv() => self.not_running(control),
            }
        }
    }

    /// Whether this task has been recorded dead.
    fn is_dead(&self) -> bool {
        let st = self.shared.state();
        st.allocs
            .get(&self.ctx.alloc_id)
            .and_then(|l| l.task_states.get(self.name()))
            .is_none_or(|s| s.state == TaskStateValue::Dead)
    }

    /// After a client restart: the hooks restored, the task found again by its handle.
    async fn find_again(&mut self, handle: TaskHandle) -> Found {
        let _ = self.prestart(true).await;
        let found = match handle {
            TaskHandle::Launching { launch_id, at } => {
                // Never launched on a guess: while the engine cannot say, the task waits
                // (pending), asking every second, until it can or the allocation is stopped.
                let found = loop {
                    let found = driver::find_launch(
                        (&launch_id, at),
                        &self.ctx.task,
                        self.ctx.task_dir.dir(),
                        &self.prepared.logs,
                        &self.ctx.alloc_id,
                        &self.shared.docker,
                        self.now(),
                    )
                    .await;
                    let driver::Launched::EngineUnknown(why) = &found else {
                        break found;
                    };
                    warn!(launch_id, error = %why, "cannot tell whether a launch started; asking the engine again");
                    tokio::select! {
                        _ = self.kill.cancelled() => break found,
                        _ = tokio::time::sleep(RETRY_LAUNCH_LOOKUP) => {}
                    }
                };
                info!(launch_id, outcome = ?found, "looked for a launch of an earlier run");
                match found {
                    driver::Launched::NotStarted => return Found::NotStarted,
                    driver::Launched::Found(running) => {
                        // Started by that run, which did not get to record it.
                        self.record_started(running.handle(), at);
                        Some(*running)
                    }
                    driver::Launched::Ended => None,
                    driver::Launched::EngineUnknown(_) => {
                        // Stopped while the engine could not say.
                        let ev = event(
                            self.now(),
                            "Killed",
                            "Task stopped while the container engine could not tell whether it had started".into(),
                        );
                        self.dead(false, ev).await;
                        return Found::Dead;
                    }
                }
            }
            h => {
                driver::find_again(
                    &h,
                    &self.ctx.task,
                    &self.prepared.logs,
                    &self.shared.docker,
                    self.now(),
                )
                .await
            }
        };
        match found {
            Some(running) => {
                info!("re-attached to a running task");
                // Its services again, unless a stop was under way when the client left.
                if !self.siblings.stop_asked.is_cancelled() {
                    self.run_phase(Phase::Poststart).await;
                }
                Found::Running(Box::new(running))
            }
            None => Found::Ended,
        }
    }

    /// A start that failed before the driver ran, with event `ev`: the task is dead and
    /// failed unless the failure is `recoverable`, when the restart policy decides.
    async fn start_failed(&mut self, mut ev: TaskEvent, recoverable: bool) {
        if !recoverable {
            ev.fails_task = true;
            self.dead(true, ev).await;
            return;
        }
        self.push(ev);
        let decision = self.core.on_start_error(tokio::time::Instant::now());
        self.after_decision(decision).await;
    }

    /// Prestart hooks, then the driver: the running task, or `None` when it did not start
    /// (dead, or to be started again after the restart policy's delay).
    async fn launch(&mut self) -> Option<RunningTask> {
        // A stop asked before the start (while the allocation waited for its previous
        // allocation's disk, say) is a kill: nothing is started for it.
        if self.stopping() || !self.wait_for_start().await {
            let ev = event(self.now(), "Killed", "Task killed before it started".into());
            self.dead(false, ev).await;
            return None;
        }
        if self.updates.has_changed().unwrap_or(false) {
            self.apply_update().await;
        }
        let now = self.now();
        // The allocation's network namespace (bridge mode), made by its network hook.
        let netns = self
            .shared
            .state()
            .allocs
            .get(&self.ctx.alloc_id)
            .map_or(Ok(None), crate::client::network::task_netns);
        let netns = match netns {
            Ok(netns) => netns,
            Err(why) => {
                let mut ev = event(now, "Setup Failure", why);
                ev.fails_task = true;
                self.dead(true, ev).await;
                return None;
            }
        };
        if netns.is_some() {
            // Its address came after the runner was built: the variables that give it
            // (`NOMAD_ALLOC_IP_<label>`, …) and what interpolates them, before the hooks run.
            if let Some((task, policy)) = self.prepared_now() {
                self.ctx.task = task;
                self.ctx.task.restart_policy = Some(policy);
                self.apply_prepared_env();
            }
        }
        self.push(event(now, "Task Setup", "Building Task Directory".into()));
        if let Err(e) = self.prestart(false).await {
            if self.stopping() {
                let ev = event(self.now(), "Killed", "Task killed before it started".into());
                self.dead(false, ev).await;
                return None;
            }
            warn!(error = %e, recoverable = e.recoverable, "a prestart hook failed");
            self.start_failed(e.event(now), e.recoverable).await;
            return None;
        }
        // Its network's resolver configuration, hosts file and hostname.
        let local = self.shared.state().allocs.get(&self.ctx.alloc_id).cloned();
        let net_files = local.as_ref().map_or(Ok(Default::default()), |local| {
            crate::client::network::files::for_task(
                local,
                &self.ctx.task,
                self.ctx.alloc_dir.root(),
                |text| {
                    crate::client::taskenv::interpolate_in(
                        &self.ctx.task.env,
                        &self.shared.node_values,
                        text,
                    )
                },
            )
        });
        let net_files = match net_files {
            Ok(files) => files,
            Err(e) => {
                use crate::client::network::files::FilesError;
                // A write may work on a later start: the restart policy decides.
                let recoverable = matches!(e, FilesError::Write { .. });
                warn!(error = %e, recoverable, "the task's network files could not be made");
                let ev = event(now, "Setup Failure", e.to_string());
                self.start_failed(ev, recoverable).await;
                return None;
            }
        };
        let node_id = self.shared.state().node_id.clone();
        // Recorded before it happens: a client killed from here on finds out, once
        // restarted, whether the task started (`driver::find_launch`).
        let launch_id = crate::util::new_uuid(&mut rand::thread_rng());
        let name = self.name().to_string();
        let recorded = self.shared.update_alloc_if(&self.ctx.alloc_id, |local| {
            local.handles.insert(
                name,
                TaskHandle::Launching {
                    launch_id: launch_id.clone(),
                    at: now,
                },
            );
            false
        });
        if !recorded || self.kill.is_cancelled() {
            // Gone or stopped meanwhile: nothing may run unrecorded.
            let ev = event(now, "Killed", "Task killed before it started".into());
            self.dead(false, ev).await;
            return None;
        }
        if let Err(e) = self.shared.try_persist() {
            warn!(error = %e, "cannot record the launch; not starting the task");
            let mut ev = event(
                now,
                "Setup Failure",
                format!("cannot record the launch in the client state: {e}"),
            );
            ev.fails_task = true;
            self.dead(true, ev).await;
            return None;
        }
        crate::util::crash::point("client.launch_recorded");
        let alloc_shared = self.ctx.alloc_dir.shared();
        let ctx = driver::LaunchContext {
            enabled: &self.shared.config.drivers,
            docker: &self.shared.docker,
            alloc_dir: &alloc_shared,
            alloc_id: &self.ctx.alloc_id,
            job_name: &self.job_name,
            node_id: &node_id,
            ports: &self.ports,
            launch_id: &launch_id,
            logs: &self.prepared.logs,
            mounts: self.ctx.mounts.as_deref().unwrap_or_default(),
            isolation: &self.shared.isolation,
            netns: netns.as_deref(),
            net_files: &net_files,
        };
        match driver::launch(&self.ctx.task, self.ctx.task_dir.dir(), ctx, now).await {
            Ok(running) => {
                crate::util::crash::point("client.task_started");
                self.record_started(running.handle(), now);
                self.run_phase(Phase::Poststart).await;
                Some(running)
            }
            Err(e) => {
                warn!(error = %e, recoverable = e.recoverable(), "task could not start");
                let mut ev = event(now, "Driver Failure", e.to_string());
                ev.driver_error = e.to_string();
                if !e.recoverable() {
                    ev.fails_task = true;
                    self.dead(true, ev).await;
                    return None;
                }
                // Recoverable: one attempt of the restart policy, as an exit.
                let name = self.name().to_string();
                self.update(|s, handles| {
                    push_event(s, ev);
                    handles.remove(&name);
                });
                let decision = self.core.on_start_error(tokio::time::Instant::now());
                self.after_decision(decision).await;
                None
            }
        }
    }

    /// Watches the running task until it exits or is killed: true to start it again.
    async fn watch(&mut self, mut running: RunningTask) -> bool {
        let mut control_open = true;
        let exit = loop {
            tokio::select! {
                exit = running.wait() => break Some(exit),
                _ = self.kill.cancelled() => {
                    self.kill(&mut running).await;
                    return false;
                }
                Ok(()) = self.updates.changed() => self.apply_update().await,
                control = self.control.recv(), if control_open => match control {
                    None => control_open = false,
                    Some(TaskControl::Signal { name, signal, reply }) => {
                        let _ = reply.send(self.signal(&mut running, name, signal).await);
                    }
                    Some(TaskControl::Restart { reason, reply }) => {
                        self.restart(&mut running, reason).await;
                        let _ = reply.send(Ok(()));
                        break None;
                    }
                    Some(TaskControl::Fail { reason, reply }) => {
                        self.push(event(self.now(), "Killing", reason));
                        self.run_phase(Phase::PreKill).await;
                        let exit = running
                            .kill(self.core.kill_signal(), self.core.kill_timeout())
                            .await;
                        let mut ev = event(self.now(), "Killed", "Task successfully killed".into());
                        ev.exit_code = exit.exit_code;
                        ev.signal = exit.signal;
                        self.dead(true, ev).await;
                        let _ = reply.send(Ok(()));
                        return false;
                    }
                    Some(TaskControl::CheckRestart { check, reply }) => {
                        let reason = format!("healthcheck: check {check:?} unhealthy");
                        let mut ev = event(self.now(), "Restart Signaled", reason.clone());
                        ev.restart_reason = reason;
                        self.push(ev);
                        // Its services go first, as before any kill (Nomad waits no
                        // shutdown_delay for a restart).
                        self.run_phase(Phase::PreKill).await;
                        let exit = running
                            .kill(self.core.kill_signal(), self.core.kill_timeout())
                            .await;
                        let _ = reply.send(Ok(()));
                        // Counted against the restart policy, as Nomad's check watcher.
                        let exit_code = if exit.successful() { 1 } else { exit.exit_code };
                        break Some(ExitResult { exit_code, ..exit });
                    }
                },
            }
        };
        match exit {
            // Restarted by an operator: started again at once.
            None => true,
            Some(exit) => self.after_exit(exit).await,
        }
    }

    /// The allocation's tasks are being killed: the pre_kill hooks (the task's services
    /// withdrawn), the reason's event, the shutdown delay, `Killing`, the signal, `Killed`.
    async fn kill(&mut self, running: &mut RunningTask) {
        self.run_phase(Phase::PreKill).await;
        let (events, delay) = self.core.kill_plan(&self.siblings.reason(), self.now());
        for ev in events {
            self.push(ev);
        }
        let mut exited = None;
        if !delay.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = self.siblings.hurry.cancelled() => {}
                exit = running.wait() => {
                    debug!(?exit, "task exited during its shutdown delay");
                    exited = Some(exit);
                }
            }
        }
        let exit = match exited {
            // Gone already: nothing to signal (its pid may be another process's by now).
            Some(exit) => exit,
            None => {
                let mut killing = self.core.killing(self.now());
                if self.siblings.reason() == KillReason::MaxRunDuration {
                    killing.display_message = MAX_RUN_DURATION_EXCEEDED.into();
                }
                self.push(killing);
                running
                    .kill(self.core.kill_signal(), self.core.kill_timeout())
                    .await
            }
        };
        let mut ev = event(self.now(), "Killed", "Task successfully killed".into());
        ev.exit_code = exit.exit_code;
        ev.signal = exit.signal;
        self.dead(false, ev).await;
    }

    /// `alloc signal`: a `Signaling` event, then the signal to the task's process group.
    async fn signal(
        &self,
        running: &mut RunningTask,
        name: &str,
        signal: i32,
    ) -> Result<(), TaskOpError> {
        let mut ev = event(
            self.now(),
            "Signaling",
            format!("Task being sent signal {name}"),
        );
        ev.details.insert("signal".into(), name.to_string());
        self.push(ev);
        running
            .signal(signal)
            .await
            .map_err(|e| TaskOpError::Signal {
                task: self.name().to_string(),
                signal: name.to_string(),
                reason: e.to_string(),
            })
    }

    /// `alloc restart`: `Restart Signaled`, the task killed as a stop kills it, its exit
    /// recorded, and `Restarting` without a delay. The restart policy is not consulted and
    /// not charged (Nomad's `SetRestartTriggered`), but the task's `Restarts` counts it.
    async fn restart(&mut self, running: &mut RunningTask, reason: Option<String>) {
        let reason = reason.unwrap_or_else(|| "User requested restart".into());
        let mut ev = event(self.now(), "Restart Signaled", reason.clone());
        ev.restart_reason = reason.clone();
        self.push(ev);
        self.run_phase(Phase::PreKill).await;
        let exit = running
            .kill(self.core.kill_signal(), self.core.kill_timeout())
            .await;
        let now = self.now();
        let terminated = TaskCore::terminated(&exit, now);
        self.run_phase(Phase::Exited).await;
        let restarts = self.core.restarted();
        let name = self.name().to_string();
        self.update(|s, handles| {
            push_event(s, terminated);
            handles.remove(&name);
            s.state = TaskStateValue::Pending;
            let mut ev = event(now, "Restarting", "Task restarting in 0s".into());
            ev.restart_reason = reason;
            push_event(s, ev);
            s.restarts = restarts;
            s.last_restart = Timestamp::from_unix_nanos(now);
        });
    }

    /// Record an exit and apply the restart policy: true to start the task again.
    async fn after_exit(&mut self, exit: ExitResult) -> bool {
        let ev = TaskCore::terminated(&exit, self.now());
        let name = self.name().to_string();
        self.update(|s, handles| {
            push_event(s, ev);
            handles.remove(&name);
        });
        self.run_phase(Phase::Exited).await;
        let decision = self.core.on_exit(tokio::time::Instant::now(), &exit);
        self.after_decision(decision).await
    }

    /// Apply the restart policy's decision: true to start the task again (after waiting
    /// out the delay), false when the task is dead.
    async fn after_decision(&mut self, decision: RestartDecision) -> bool {
        match decision {
            RestartDecision::Restart { .. } if self.stopping() => {
                // The allocation is being stopped: no new start.
                let ev = event(
                    self.now(),
                    "Killed",
                    "Task not restarted: its allocation is stopping".into(),
                );
                self.dead(false, ev).await;
                false
            }
            RestartDecision::Restart { delay, reason } => {
                let now = self.now();
                self.update(|s, _| {
                    s.state = TaskStateValue::Pending;
                    // Nomad's display: the delay, after the reason unless it is the
                    // ordinary one.
                    let waiting =
                        format!("Task restarting in {}", humantime::format_duration(delay));
                    let shown = if reason.is_empty() || reason == WITHIN_POLICY {
                        waiting
                    } else {
                        format!("{reason} - {waiting}")
                    };
                    let mut ev = event(now, "Restarting", shown);
                    ev.restart_reason = reason;
                    push_event(s, ev);
                });
                let wake = tokio::time::sleep(delay);
                tokio::pin!(wake);
                loop {
                    tokio::select! {
                        _ = &mut wake => break,
                        _ = self.kill.cancelled() => {
                            let ev = event(self.now(), "Killed", "Task killed while waiting to restart".into());
                            self.dead(false, ev).await;
                            return false;
                        }
                        Ok(()) = self.updates.changed() => self.apply_update().await,
                        Some(control) = self.control.recv() => self.not_running(control),
                    }
                }
                let restarts = self.core.restarted();
                let now = self.now();
                self.update(|s, _| {
                    s.restarts = restarts;
                    s.last_restart = Timestamp::from_unix_nanos(now);
                });
                true
            }
            RestartDecision::Dead { failed, reason } => {
                let mut ev = event(self.now(), "Not Restarting", reason);
                ev.fails_task = failed;
                self.dead(failed, ev).await;
                false
            }
        }
    }

    /// The task is dead for good: its stop hooks run (the log collector drains), then its
    /// state is recorded and its siblings hear of it.
    async fn dead(&mut self, failed: bool, ev: TaskEvent) {
        debug!(alloc_id = %self.ctx.alloc_id, task = %self.name(), failed, event = %ev.event_type, "task dead");
        self.run_phase(Phase::Stop).await;
        let now = self.now();
        let name = self.name().to_string();
        self.update(|s, handles| {
            s.state = TaskStateValue::Dead;
            s.failed = failed;
            s.finished_at = Timestamp::from_unix_nanos(now);
            push_event(s, ev);
            handles.remove(&name);
        });
        self.siblings.task_dead(self.name(), self.wave, failed);
        self.shared.persist();
    }
}

/// What became of a task an earlier run of the client recorded.
enum Found {
    /// Running: watch it.
    Running(Box<RunningTask>),
    /// It ended while the client was away.
    Ended,
    /// Its launch never happened: launch it.
    NotStarted,
    /// It was recorded dead meanwhile.
    Dead,
}
