//! The allocation runner: builds the allocation's directory (its [`hooks`]), starts one
//! [task runner](crate::client::task_runner) per task, and stops them together.
//!
//! ```text
//!  alloc watcher ──new alloc──▶ alloc hooks (alloc_dir; a sticky or migrating disk: wait
//!                               for the previous allocation to stop, take its data, here
//!                               or from its node) ──▶ one task runner per task
//!                 ──stop──────▶ stop asked ─┐
//!  a task failed, or the leader died ───────┴▶ services withdrawn ─▶ group shutdown_delay
//!                                              ─▶ every task killed (its own delay, signal)
//!  every change ──▶ LocalAlloc (status recomputed, marked dirty) ──▶ updater batches it
//! ```
//!
//! Beside the task runners of a service job's allocation runs its health watcher
//! ([`health_watch`]).

mod health_watch;
pub mod hooks;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use teamster_storage::model::{JobType, Task, TaskGroup, TaskStateValue};
use tokio::sync::mpsc;
use tracing::{debug, warn, Instrument};

use crate::client::allocdir::AllocDir;
use crate::client::shared::Shared;
use crate::client::task_runner::core::TaskCore;
use crate::client::task_runner::hooks::HookCtx;
use crate::client::task_runner::{TaskRunner, TaskRunnerParts};
use crate::client::taskenv::{TaskDirs, TaskEnv};
use crate::client::types::{AllocHandle, KillReason, LocalAlloc, Siblings};

/// Requests a task runner queues at most; more wait for room.
const CONTROL_QUEUE: usize = 4;

/// `task` of `local`'s allocation as its runner starts it (config interpolated, Nomad's
/// variables in its environment), with its directory: what `alloc exec` runs in too.
pub fn prepared_task(shared: &Shared, local: &LocalAlloc, task: &Task) -> (Task, PathBuf) {
    let dir = AllocDir::new(&shared.alloc_root, local.alloc.id.as_ref());
    let task_dir = dir.task(&task.name);
    let env = TaskEnv::new(
        shared.node_values.clone(),
        &local.alloc,
        &local.job,
        task,
        TaskDirs {
            alloc: &dir.shared(),
            task: &task_dir.local(),
            secrets: &task_dir.secrets(),
        },
    );
    (env.apply(task), task_dir.dir().to_path_buf())
}

/// Start (or re-attach) every task of `local`'s allocation. Returns what stops them and
/// reaches them.
pub fn spawn(shared: &Arc<Shared>, local: &LocalAlloc) -> AllocHandle {
    let siblings = Arc::new(Siblings::default());
    let mut controls = BTreeMap::new();
    let alloc_id = local.alloc.id.to_string();
    let Some(group) = local.group() else {
        warn!(alloc_id, group = %local.alloc.task_group, "task group not in the job");
        return AllocHandle::new(siblings, controls);
    };
    // A stop begun before a client restart goes on: the services stay withdrawn and the
    // tasks left are killed.
    if let Some(reason) = unfinished_stop(local, group) {
        siblings.stop(reason);
    }
    let alloc_dir = AllocDir::new(&shared.alloc_root, &alloc_id);
    if let Err(e) = hooks::prerun(&alloc_dir) {
        // Each task's task_dir hook tries again and fails the task's start with the reason.
        warn!(alloc_id, error = %e, "allocation hook failed");
    }
    let batch = matches!(local.job.job_type, JobType::Batch | JobType::SysBatch);
    // A dispatched child's payload, for the tasks with a `dispatch_payload` block.
    let payload = if local.job.payload.is_empty() {
        Ok(Vec::new())
    } else {
        local.job.payload.decompress().map_err(|e| e.to_string())
    };
    let program = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("teamster"));
    let mut runners = Vec::new();
    for task in &group.tasks {
        let state = local.task_states.get(&task.name);
        if state.is_some_and(|s| s.state == TaskStateValue::Dead) {
            continue;
        }
        let (prepared, _) = prepared_task(shared, local, task);
        let (control_tx, control) = mpsc::channel(CONTROL_QUEUE);
        controls.insert(task.name.clone(), control_tx);
        let policy = group.task_restart_policy(task).unwrap_or_default();
        let core = TaskCore::new(
            &prepared,
            &policy,
            batch,
            shared.config.max_kill_timeout,
            state.map_or(0, |s| s.restarts),
        );
        let ctx = HookCtx {
            alloc_id: alloc_id.clone(),
            task_dir: alloc_dir.task(&task.name),
            alloc_dir: alloc_dir.clone(),
            payload: task.dispatch_payload.as_ref().map(|_| payload.clone()),
            program: program.clone(),
            task: prepared,
        };
        let runner = TaskRunner::new(TaskRunnerParts {
            control,
            shared: shared.clone(),
            ctx,
            core,
            reattach: local.handles.get(&task.name).cloned(),
            siblings: siblings.clone(),
            job_name: local.job.name.clone(),
            ports: local.alloc.allocated_resources.shared.ports.to_vec(),
            hook_state: local
                .hook_state
                .get(&task.name)
                .cloned()
                .unwrap_or_default(),
        });
        let span = tracing::info_span!("task", alloc_id = %alloc_id, task = %task.name);
        runners.push((runner, span));
    }
    // A sticky disk's replacement starts its tasks once it holds its previous allocation's
    // data (only on its first start: a client restarted later finds it done).
    let upstream = upstream_of(local, group);
    let tasks: Vec<String> = group.tasks.iter().map(|t| t.name.clone()).collect();
    let disk_bytes = group
        .ephemeral_disk
        .as_ref()
        .map_or(0, |d| d.size_mb.saturating_mul(1 << 20));
    let judged = local.job.job_type == JobType::Service;
    let start = {
        let shared = shared.clone();
        let stop = siblings.stop_asked.clone();
        let alloc_dir = alloc_dir.clone();
        let health_id = alloc_id.clone();
        async move {
            match upstream {
                Some(Upstream::Here(previous)) => {
                    hooks::take_previous_disk(&shared, &previous, &alloc_dir, &tasks, &stop).await
                }
                Some(Upstream::Elsewhere(from)) => {
                    hooks::fetch_previous_disk(&from, &alloc_dir, &tasks, disk_bytes, &stop).await
                }
                None => {}
            }
            for (runner, span) in runners {
                tokio::spawn(runner.run().instrument(span));
            }
            // Its health is judged from when its tasks may start, not while it waited for
            // its previous allocation's disk (as Nomad's health hook runs after migration).
            // Neither deployments nor migrations judge other jobs' allocations.
            if judged {
                let span = tracing::info_span!("alloc_health", alloc_id = %health_id);
                tokio::spawn(health_watch::watch_health(shared, health_id, stop).instrument(span));
            }
        }
    };
    tokio::spawn(start.instrument(tracing::info_span!("alloc_start", alloc_id = %alloc_id)));
    let delay = Duration::from_nanos(group.shutdown_delay);
    let span = tracing::info_span!("alloc_stop", alloc_id = %alloc_id);
    tokio::spawn(
        stop_when_asked(shared.clone(), alloc_id.clone(), siblings.clone(), delay).instrument(span),
    );
    AllocHandle::new(siblings, controls)
}

/// Where an allocation's kept disk comes from.
enum Upstream {
    /// Its previous allocation on this node.
    Here(String),
    /// Its previous allocation on another node.
    Elsewhere(crate::rpc::service::node::MigrateFrom),
}

/// The allocation whose disk `local`'s takes before its tasks first start (no task of it
/// has started yet): its previous allocation, when the group's `ephemeral_disk` is sticky
/// or migrates; from another node only when it migrates (the servers then said where).
fn upstream_of(local: &LocalAlloc, group: &TaskGroup) -> Option<Upstream> {
    let disk = group.ephemeral_disk.as_ref()?;
    let previous = local.alloc.previous_allocation.to_string();
    let fresh =
        local.handles.is_empty() && local.task_states.values().all(|s| s.started_at.is_zero());
    if !fresh || previous.is_empty() || !(disk.sticky || disk.migrate) {
        return None;
    }
    match &local.migrate_from {
        Some(from) if disk.migrate && from.alloc_id == previous => {
            Some(Upstream::Elsewhere(from.clone()))
        }
        _ => Some(Upstream::Here(previous)),
    }
}

/// Why `local`'s tasks were being stopped when an earlier run of the client ended, if they
/// were: a failed task, a dead leader, or a stop in progress.
fn unfinished_stop(local: &LocalAlloc, group: &TaskGroup) -> Option<KillReason> {
    let dead = |name: &str| {
        local
            .task_states
            .get(name)
            .is_some_and(|s| s.state == TaskStateValue::Dead)
    };
    if let Some((name, _)) = local.task_states.iter().find(|(_, s)| s.failed) {
        return Some(KillReason::SiblingFailed(name.clone()));
    }
    if group.tasks.iter().any(|t| t.leader && dead(&t.name)) {
        return Some(KillReason::LeaderDead);
    }
    local.shutting_down.then_some(KillReason::Stopped)
}

/// Once a stop is asked: the allocation's services are withdrawn, the group's
/// `shutdown_delay` waited out (while a task still runs), and every task killed.
async fn stop_when_asked(
    shared: Arc<Shared>,
    alloc_id: String,
    siblings: Arc<Siblings>,
    delay: Duration,
) {
    // The client asks it for every allocation it stops or forgets (an allocation it forgot
    // is gone from the state: its tasks are killed at once).
    siblings.stop_asked.cancelled().await;
    let mut running = false;
    shared.update_alloc_if(&alloc_id, |local| {
        running = local
            .task_states
            .values()
            .any(|s| s.state == TaskStateValue::Running);
        // Nothing to withdraw, nor to report, once every task is dead.
        let changed = !local.shutting_down && !local.finished();
        local.shutting_down |= changed;
        changed
    });
    if running && !delay.is_zero() && siblings.reason().waits_shutdown_delay() {
        debug!(delay = ?delay, reason = ?siblings.reason(), "waiting for the group's shutdown delay");
        tokio::time::sleep(delay).await;
    }
    siblings.kill.cancel();
}
