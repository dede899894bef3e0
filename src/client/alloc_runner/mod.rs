//! The allocation runner: runs the allocation's [`hooks`] around one
//! [task runner](crate::client::task_runner) per task, hands them in-place updates of the
//! job, and stops them together.
//!
//! ```text
//!  alloc watcher ──new alloc──▶ prerun hooks (alloc_dir, upstream_allocs: a sticky or
//!                               migrating disk's data, alloc_health_watcher,
//!                               group_services) ──▶ one task runner per task, each
//!                               waiting for its turn in the lifecycle (prestart, main,
//!                               poststart, poststop: [`crate::client::lifecycle`])
//!                ──job changed in place──▶ update hooks, and each task runner's
//!                ──stop──────▶ stop asked ─┐
//!  a task failed, the leader died, ─────────┤
//!  only sidecars are left ──────────────────┴▶ pre_kill hooks (group services withdrawn)
//!                                              ─▶ group shutdown_delay ─▶ the tasks killed
//!                                                 in waves: the leader, the others, the
//!                                                 sidecars (each: its own services, delay,
//!                                                 signal) ─▶ poststop tasks run
//!  every task dead ──▶ postrun hooks
//!  every change ──▶ LocalAlloc (status recomputed, marked dirty) ──▶ updater batches it
//! ```

pub mod hooks;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use teamster_storage::model::{JobType, Task, TaskGroup, TaskStateValue, Timestamp};
use tokio::sync::{mpsc, watch};
use tracing::{debug, info, warn, Instrument, Span};

use crate::client::allocdir::AllocDir;
use crate::client::lifecycle::{self, Allowed, Coordinator, Stage};
use crate::client::shared::{Registrations, Shared};
use crate::client::task_runner::core::TaskCore;
use crate::client::task_runner::hooks::template_feed::TemplateFeed;
use crate::client::task_runner::hooks::{EventSink, HookCtx};
use crate::client::task_runner::{TaskRunner, TaskRunnerParts};
use crate::client::types::{
    event, push_event, AllocHandle, KillReason, KillWave, LocalAlloc, RestartAll, Siblings,
    TaskControls,
};
use hooks::{AllocCtx, AllocHook};

/// Requests a task runner queues at most; more wait for room.
const CONTROL_QUEUE: usize = 4;

/// The phases of the allocation hooks.
#[derive(Debug, Clone, Copy)]
enum Phase {
    Prerun,
    Update,
    PreKill,
    Postrun,
}

/// A task's part in its allocation: its lifecycle stage and the wave a stop kills it in,
/// fixed when the allocation runner starts (as Nomad builds its coordinator once): an
/// in-place update that changes a task's `lifecycle` or `leader` applies to the next
/// allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Role {
    stage: Stage,
    wave: KillWave,
}

/// Every task's [`Role`], by name.
type Roles = Arc<BTreeMap<String, Role>>;

fn role_of(roles: &Roles, task: &Task) -> Role {
    roles.get(&task.name).copied().unwrap_or(Role {
        stage: Stage::of(task),
        wave: KillWave::of(task),
    })
}

/// Builds the task runners of one allocation: at its start, and again for a completed task
/// an operator's restart of every task starts anew.
struct RunnerFactory {
    roles: Roles,
    shared: Arc<Shared>,
    siblings: Arc<Siblings>,
    alloc_id: String,
    alloc_dir: AllocDir,
    /// A dispatched child's payload, for the tasks with a `dispatch_payload` block.
    payload: Result<Vec<u8>, String>,
    program: PathBuf,
    services: Registrations,
    batch: bool,
    updates: watch::Receiver<u64>,
    gate: watch::Receiver<Allowed>,
    controls: TaskControls,
    /// What the tasks' templates read, one blocking query for all of them.
    template_feed: Option<Arc<TemplateFeed>>,
}

impl RunnerFactory {
    /// The runner of `task` of `local`'s allocation (whose group is `group`), reachable
    /// through the allocation's handle from now on.
    fn build(&self, local: &LocalAlloc, group: &TaskGroup, task: &Task) -> (TaskRunner, Span) {
        let state = local.task_states.get(&task.name);
        let (mut prepared, _) = self.shared.prepared_task(local, task);
        let (control_tx, control) = mpsc::channel(CONTROL_QUEUE);
        let control_weak = control_tx.downgrade();
        self.controls.insert(&task.name, control_tx);
        let policy = group.task_restart_policy(task).unwrap_or_default();
        // The hooks see the policy in force (the group's, merged under the task's own).
        prepared.restart_policy = Some(policy.clone());
        let role = role_of(&self.roles, task);
        let core = TaskCore::new(
            &prepared,
            &policy,
            role.stage.success_is_final(self.batch),
            self.shared.config.max_kill_timeout,
            state.map_or(0, |s| s.restarts),
        );
        // Its mounts as interpolated (Nomad interpolates a `volume_mount`).
        let mounts = crate::client::volumes::task_mounts(
            group,
            &prepared,
            &local.alloc.name,
            &self.shared.config.host_volumes(),
        );
        let ctx =
            HookCtx {
                alloc_id: self.alloc_id.clone(),
                task_dir: self.alloc_dir.task(&task.name).owned_by(
                    crate::client::users::dir_owner(&prepared.driver, &prepared.user),
                ),
                alloc_dir: self.alloc_dir.clone(),
                payload: task.dispatch_payload.as_ref().map(|_| self.payload.clone()),
                program: self.program.clone(),
                task: prepared,
                services: self.services.clone(),
                servers: self.shared.servers.clone(),
                control: Some(control_weak),
                events: {
                    let (shared, alloc_id, name) = (
                        self.shared.clone(),
                        self.alloc_id.clone(),
                        task.name.clone(),
                    );
                    EventSink::new(move |ev| {
                        shared.update_alloc(&alloc_id, |local| {
                            push_event(local.task_states.entry(name.clone()).or_default(), ev);
                        });
                    })
                },
                template_feed: self.template_feed.clone(),
                template_config: self.shared.config.template.clone(),
                restoring: false,
                artifact_config: self.shared.config.artifact.clone(),
                mounts,
            };
        let runner = TaskRunner::new(TaskRunnerParts {
            control,
            updates: self.updates.clone(),
            gate: self.gate.clone(),
            stage: role.stage,
            wave: role.wave,
            shared: self.shared.clone(),
            ctx,
            core,
            reattach: local.handles.get(&task.name).cloned(),
            siblings: self.siblings.clone(),
            job_name: local.job.name.clone(),
            ports: local.alloc.allocated_resources.shared.ports.to_vec(),
            hook_state: local
                .hook_state
                .get(&task.name)
                .cloned()
                .unwrap_or_default(),
        });
        let span = tracing::info_span!("task", alloc_id = %self.alloc_id, task = %task.name);
        (runner, span)
    }
}

/// Start (or re-attach) every task of `local`'s allocation. Returns what stops them,
/// reaches them, and hands them in-place updates.
pub fn spawn(shared: &Arc<Shared>, local: &LocalAlloc) -> AllocHandle {
    let siblings = Arc::new(Siblings::default());
    let (updates, _) = watch::channel(local.job.job_modify_index);
    let (restart_all, restarts) = mpsc::channel(CONTROL_QUEUE);
    let controls = TaskControls::default();
    let handle = AllocHandle::new(
        siblings.clone(),
        controls.clone(),
        updates.clone(),
        restart_all,
    );
    let alloc_id = local.alloc.id.to_string();
    let Some(group) = local.group() else {
        warn!(alloc_id, group = %local.alloc.task_group, "task group not in the job");
        return handle;
    };
    // A stop begun before a client restart goes on: the services stay withdrawn and the
    // tasks left are killed.
    if let Some(reason) = unfinished_stop(local, group) {
        if reason == KillReason::MaxRunDuration {
            siblings.kill(KillWave::Poststop);
        }
        siblings.stop(reason);
    }
    // A fresh allocation starts its lifecycle from the beginning; one an earlier run of the
    // client started resumes where its tasks are.
    let fresh = local.handles.is_empty()
        && local
            .task_states
            .values()
            .all(|s| s.state == TaskStateValue::Pending && s.started_at.is_zero());
    let mut coordinator = if fresh {
        Coordinator::new(&group.tasks)
    } else {
        Coordinator::restored(&group.tasks, &local.task_states)
    };
    let (gate, _) = watch::channel(coordinator.update(&local.task_states));
    let roles: Roles = Arc::new(
        group
            .tasks
            .iter()
            .map(|t| {
                let role = Role {
                    stage: Stage::of(t),
                    wave: KillWave::of(t),
                };
                (t.name.clone(), role)
            })
            .collect(),
    );
    let factory = RunnerFactory {
        roles: roles.clone(),
        shared: shared.clone(),
        siblings: siblings.clone(),
        alloc_id: alloc_id.clone(),
        alloc_dir: AllocDir::new(&shared.alloc_root, &alloc_id),
        payload: if local.job.payload.is_empty() {
            Ok(Vec::new())
        } else {
            local.job.payload.decompress().map_err(|e| e.to_string())
        },
        program: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("teamster")),
        services: Registrations::new(shared.clone(), alloc_id.clone()),
        batch: matches!(local.job.job_type, JobType::Batch | JobType::SysBatch),
        updates: updates.subscribe(),
        gate: gate.subscribe(),
        controls,
        template_feed: shared.servers.clone().map(TemplateFeed::new),
    };
    let runners: Vec<_> = group
        .tasks
        .iter()
        .filter(|t| {
            local
                .task_states
                .get(&t.name)
                .is_none_or(|s| s.state != TaskStateValue::Dead)
        })
        .map(|t| factory.build(local, group, t))
        .collect();
    let ctx = Arc::new(AllocCtx {
        shared: shared.clone(),
        alloc_id: alloc_id.clone(),
        alloc_dir: factory.alloc_dir.clone(),
        siblings: siblings.clone(),
        services: factory.services.clone(),
    });
    let hooks: Arc<[Box<dyn AllocHook>]> = hooks::alloc_hooks().into();
    let span = tracing::info_span!("alloc_run", alloc_id = %alloc_id);
    let lifecycle = Lifecycle {
        coordinator,
        gate,
        roles: roles.clone(),
    };
    let run = Run {
        ctx: ctx.clone(),
        hooks: hooks.clone(),
        updates: updates.subscribe(),
        restarts,
        lifecycle,
        factory,
    };
    tokio::spawn(run.run(runners).instrument(span));
    let span = tracing::info_span!("max_run_duration", alloc_id = %alloc_id);
    tokio::spawn(enforce_max_run_duration(ctx.clone(), updates.subscribe()).instrument(span));
    let span = tracing::info_span!("alloc_stop", alloc_id = %alloc_id);
    tokio::spawn(stop_when_asked(ctx, hooks, roles).instrument(span));
    handle
}

/// `runner` on a task of its own (a panic in the allocation runner leaves it running);
/// resolves to its task's name and how it ended.
fn detached(
    (runner, span): (TaskRunner, Span),
) -> impl std::future::Future<Output = (String, Result<(), tokio::task::JoinError>)> {
    let name = runner.task_name().to_string();
    let handle = tokio::spawn(runner.run().instrument(span));
    async move { (name, handle.await) }
}

/// Runs every hook's `phase`; errors are logged.
async fn run_hooks(ctx: &AllocCtx, hooks: &[Box<dyn AllocHook>], phase: Phase) {
    for hook in hooks {
        let r = match phase {
            Phase::Prerun => hook.prerun(ctx).await,
            Phase::Update => hook.update(ctx).await,
            Phase::PreKill => hook.pre_kill(ctx).await,
            Phase::Postrun => hook.postrun(ctx).await,
        };
        if let Err(e) = r {
            warn!(hook = hook.name(), ?phase, error = %e, "allocation hook failed");
        }
    }
}

/// The order of the allocation's tasks ([`crate::client::lifecycle`]).
struct Lifecycle {
    coordinator: Coordinator,
    /// What the task runners wait on before each start.
    gate: watch::Sender<Allowed>,
    roles: Roles,
}

impl Lifecycle {
    /// Follows the tasks' states: opens the gates their lifecycle allows, and once only
    /// sidecars are left alive, stops them ("Main Tasks Dead").
    fn follow(&mut self, ctx: &AllocCtx) {
        let Some(states) = ctx.with_local(|l| l.task_states.clone()) else {
            return;
        };
        let allowed = self.coordinator.update(&states);
        self.gate.send_if_modified(|held| {
            let changed = *held != allowed;
            if changed {
                debug!(phase = ?self.coordinator.phase(), "lifecycle moved on");
            }
            *held = allowed;
            changed
        });
        // Nomad's Main Tasks Dead only when no task failed and the leader lives: those
        // reasons come first (a dying task's runner gives its own right after its state).
        let mut stages = Vec::new();
        let mut other_reason = false;
        for (name, role) in self.roles.iter() {
            let state = states.get(name);
            let dead = state.is_some_and(|s| s.state == TaskStateValue::Dead);
            let failed = state.is_some_and(|s| s.failed);
            if role.wave != KillWave::Poststop
                && (failed || (dead && role.wave == KillWave::Leader))
            {
                other_reason = true;
            }
            stages.push((role.stage, dead));
        }
        if !other_reason && lifecycle::only_sidecars_left(&stages) {
            ctx.siblings.stop(KillReason::MainDead);
        }
    }
}

/// The allocation's run: prerun hooks, then the task runners (each hands itself in-place
/// updates; the update hooks run here too) in their lifecycle's order, then, once every task
/// is dead, postrun hooks.
struct Run {
    ctx: Arc<AllocCtx>,
    hooks: Arc<[Box<dyn AllocHook>]>,
    updates: watch::Receiver<u64>,
    /// An operator's restart of every task.
    restarts: mpsc::Receiver<RestartAll>,
    lifecycle: Lifecycle,
    factory: RunnerFactory,
}

impl Run {
    async fn run(mut self, runners: Vec<(TaskRunner, Span)>) {
        let ctx = self.ctx.clone();
        run_hooks(&ctx, &self.hooks, Phase::Prerun).await;
        let mut changes = ctx.shared.alloc_changes.subscribe();
        self.lifecycle.follow(&ctx);
        let mut tasks: FuturesUnordered<_> = runners.into_iter().map(detached).collect();
        let mut handle_held = true;
        loop {
            tokio::select! {
                done = tasks.next() => match done {
                    None => break,
                    Some((task, Err(e))) => self.runner_lost(&task, &e),
                    Some((_, Ok(()))) => {}
                },
                Ok(()) = changes.changed() => self.lifecycle.follow(&ctx),
                Some(RestartAll { reply }) = self.restarts.recv() => {
                    let again = self.restart_all();
                    let _ = reply.send(());
                    tasks.extend(again.into_iter().map(detached));
                }
                changed = self.updates.changed(), if handle_held => match changed {
                    Ok(()) => {
                        debug!(job_modify_index = *self.updates.borrow_and_update(), "job updated in place");
                        run_hooks(&ctx, &self.hooks, Phase::Update).await;
                    }
                    // The client let the allocation go: its stop is under way.
                    Err(_) => handle_held = false,
                },
            }
        }
        run_hooks(&ctx, &self.hooks, Phase::Postrun).await;
    }

    /// `task`'s runner ended abnormally (a panic): the task is recorded dead and failed, so
    /// its siblings stop and a stop does not wait for it.
    fn runner_lost(&self, task: &str, e: &tokio::task::JoinError) {
        warn!(task, error = %e, "a task runner ended abnormally");
        let now = self.ctx.shared.clock.now_unix_nanos();
        self.ctx.shared.update_alloc(&self.ctx.alloc_id, |local| {
            let state = local.task_states.entry(task.to_string()).or_default();
            state.state = TaskStateValue::Dead;
            state.failed = true;
            state.finished_at = Timestamp::from_unix_nanos(now);
            let mut ev = event(now, "Task hook failed", format!("task runner failed: {e}"));
            ev.fails_task = true;
            push_event(state, ev);
        });
        let wave = self
            .lifecycle
            .roles
            .get(task)
            .map_or(KillWave::Main, |r| r.wave);
        self.ctx.siblings.task_dead(task, wave, true);
    }

    /// An operator's restart of every task (Nomad's `AllTasks`), before the running tasks
    /// are restarted: the lifecycle starts again from the beginning (nothing starts until
    /// every task is pending), and each completed task gets a new runner, pending, so the
    /// prestart tasks run again before the main tasks start again. Returns those runners.
    fn restart_all(&mut self) -> Vec<(TaskRunner, Span)> {
        self.lifecycle.coordinator.restart();
        self.lifecycle
            .gate
            .send_replace(self.lifecycle.coordinator.allowed());
        let now = self.ctx.shared.clock.now_unix_nanos();
        let mut completed = Vec::new();
        self.ctx.shared.update_alloc(&self.ctx.alloc_id, |local| {
            for (name, state) in local.task_states.iter_mut() {
                if state.state != TaskStateValue::Dead || state.failed {
                    continue;
                }
                state.state = TaskStateValue::Pending;
                state.finished_at = Timestamp::default();
                state.restarts += 1;
                state.last_restart = Timestamp::from_unix_nanos(now);
                let mut ev = event(now, "Restart Signaled", "User requested restart".into());
                ev.restart_reason = "User requested restart".into();
                push_event(state, ev);
                completed.push(name.clone());
            }
        });
        info!(tasks = ?completed, "every task restarted: the lifecycle starts again");
        let Some(local) = self.ctx.with_local(Clone::clone) else {
            return Vec::new();
        };
        let Some(group) = local.group() else {
            return Vec::new();
        };
        group
            .tasks
            .iter()
            .filter(|t| completed.contains(&t.name))
            .map(|t| self.factory.build(&local, group, t))
            .collect()
    }
}

/// When `local`'s group's `max_run_duration` runs out (Unix nanoseconds): its creation plus
/// the duration, for a batch or sysbatch job, as Nomad counts it (stable across restarts of
/// its tasks and of the client).
fn max_run_deadline(local: &LocalAlloc) -> Option<i64> {
    if !matches!(local.job.job_type, JobType::Batch | JobType::SysBatch)
        || local.alloc.create_time == 0
    {
        return None;
    }
    let limit = local.group()?.max_run_duration.filter(|d| *d > 0)?;
    Some(
        local
            .alloc
            .create_time
            .saturating_add(i64::try_from(limit).unwrap_or(i64::MAX)),
    )
}

/// Nomad's `max_run_duration`: once the group's limit is over, every task is killed (a
/// poststop task that has not started never does) and the allocation ends `complete`,
/// "allocation exceeded max_run_duration". An in-place update of the limit moves the
/// deadline; a stop asked first ends the watch.
async fn enforce_max_run_duration(ctx: Arc<AllocCtx>, mut updates: watch::Receiver<u64>) {
    loop {
        let Some(deadline) = ctx.with_local(max_run_deadline) else {
            return;
        };
        let wait = deadline.map(|at| {
            let now = ctx.shared.clock.now_unix_nanos();
            Duration::from_nanos(u64::try_from(at.saturating_sub(now)).unwrap_or(0))
        });
        let due = async {
            match wait {
                Some(wait) => tokio::time::sleep(wait).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = ctx.siblings.stop_asked.cancelled() => return,
            changed = updates.changed() => match changed {
                Ok(()) => continue,
                Err(_) => return,
            },
            () = due => break,
        }
    }
    let mut fired = false;
    ctx.shared.update_alloc_if(&ctx.alloc_id, |local| {
        fired = !local.finished()
            && !local.max_run_exceeded
            && !local.shutting_down
            && !ctx.siblings.stop_asked.is_cancelled();
        local.max_run_exceeded |= fired;
        fired
    });
    if fired {
        info!("the group's max_run_duration is over: killing every task");
        ctx.siblings.stop(KillReason::MaxRunDuration);
        ctx.siblings.kill(KillWave::Poststop);
    }
}

/// Why `local`'s tasks were being stopped when an earlier run of the client ended, if they
/// were: a failed task, a dead leader, or a stop in progress.
fn unfinished_stop(local: &LocalAlloc, group: &TaskGroup) -> Option<KillReason> {
    // The deadline first: its stop kills the poststop tasks too.
    if local.max_run_exceeded && !local.finished() {
        return Some(KillReason::MaxRunDuration);
    }
    let dead = |name: &str| {
        local
            .task_states
            .get(name)
            .is_some_and(|s| s.state == TaskStateValue::Dead)
    };
    let failed = group
        .tasks
        .iter()
        .find(|t| !t.is_poststop() && local.task_states.get(&t.name).is_some_and(|s| s.failed));
    if let Some(task) = failed {
        return Some(KillReason::SiblingFailed(task.name.clone()));
    }
    if group.tasks.iter().any(|t| t.leader && dead(&t.name)) {
        return Some(KillReason::LeaderDead);
    }
    local.shutting_down.then_some(KillReason::Stopped)
}

/// Once a stop is asked: the pre_kill hooks (the group's services withdrawn), the group's
/// `shutdown_delay` as the job says now (while a task still runs), and every task killed.
async fn stop_when_asked(ctx: Arc<AllocCtx>, hooks: Arc<[Box<dyn AllocHook>]>, roles: Roles) {
    // The client asks it for every allocation it stops or forgets (an allocation it forgot
    // is gone from the state: its tasks are killed at once).
    let siblings = &ctx.siblings;
    siblings.stop_asked.cancelled().await;
    let mut running = false;
    let mut delay = Duration::ZERO;
    ctx.shared.update_alloc_if(&ctx.alloc_id, |local| {
        // What the stop kills (poststop tasks run after it).
        running = local.task_states.iter().any(|(name, s)| {
            s.state == TaskStateValue::Running
                && roles.get(name).is_none_or(|r| r.wave != KillWave::Poststop)
        });
        delay = Duration::from_nanos(local.group().map_or(0, |g| g.shutdown_delay));
        // Nothing to withdraw, nor to report, once every task is dead.
        let changed = !local.shutting_down && !local.finished();
        local.shutting_down |= changed;
        changed
    });
    run_hooks(&ctx, &hooks, Phase::PreKill).await;
    if running && !delay.is_zero() && siblings.reason().waits_shutdown_delay() {
        debug!(delay = ?delay, reason = ?siblings.reason(), "waiting for the group's shutdown delay");
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = siblings.hurry.cancelled() => {}
        }
    }
    // An allocation the client forgot, or an agent going away with its tasks: everything at
    // once, poststop tasks too.
    let gone = ctx.with_local(|_| ()).is_none();
    if gone || matches!(siblings.reason(), KillReason::AgentShutdown) {
        siblings.kill_all();
        return;
    }
    for wave in KillWave::STOP {
        siblings.kill(wave);
        if !wave_dead(&ctx, &roles, wave).await {
            // Forgotten meanwhile: nothing is left to run after the stop.
            siblings.kill_all();
            return;
        }
    }
}

/// Waits until every task of `wave` is dead: false when the allocation is forgotten first.
async fn wave_dead(ctx: &AllocCtx, roles: &Roles, wave: KillWave) -> bool {
    let mut changes = ctx.shared.alloc_changes.subscribe();
    loop {
        changes.borrow_and_update();
        let dead = ctx.with_local(|l| {
            roles
                .iter()
                .filter(|(_, r)| r.wave == wave)
                .all(|(name, _)| {
                    l.task_states
                        .get(name)
                        .is_none_or(|s| s.state == TaskStateValue::Dead)
                })
        });
        match dead {
            None => return false,
            Some(true) => return true,
            Some(false) => {}
        }
        if changes.changed().await.is_err() {
            return false;
        }
    }
}
