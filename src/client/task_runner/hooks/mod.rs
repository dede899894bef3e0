//! Task hooks: the work around a task's start and stop, each in its own file, run by the
//! task runner in Nomad's order.
//!
//! ```text
//!  prestart (before every start, and when a restarted client finds the task again):
//!    validate ─▶ task_dir ─▶ logmon ─▶ dispatch_payload ─▶ identity ─▶ template ─▶ services
//!  poststart (the task runs, or was found running after a client restart)
//!  update (an in-place update of the job: `ctx.task` is the new version)
//!  pre_kill (the task is about to be killed, before its shutdown_delay)
//!  exited (after each exit) · stop (the task is dead for good)
//! ```
//!
//! A hook keeps what it must find again after a client restart in its [`HookState`], which
//! the runner persists with the allocation (`LocalAlloc::hook_state`). A prestart error
//! fails the start: recoverable errors count as one attempt of the restart policy, others
//! fail the task at once (Nomad's rule). A new runtime feature is a new hook here, added to
//! [`task_hooks`]; the runner does not change.

pub mod artifacts;
pub mod dispatch_payload;
pub mod identity;
pub mod logmon;
pub mod services;
pub mod task_dir;
pub mod template;
pub mod template_feed;
pub mod validate;

use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;
use teamster_storage::model::Task;

use crate::client::allocdir::{AllocDir, TaskDir};
use crate::client::logmon::LogSinks;
use crate::client::servers::Servers;
use crate::client::shared::Registrations;

/// Why a hook failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{hook}: {message}")]
pub struct HookError {
    /// The hook.
    pub hook: &'static str,
    /// What went wrong.
    pub message: String,
    /// Whether trying again may work (one attempt of the restart policy).
    pub recoverable: bool,
    /// The task event it is reported as (Nomad's `Setup Failure`, or the hook's own such
    /// as `Failed Artifact Download`, whose message is then the error's alone).
    pub event_type: &'static str,
}

/// The task event a failed prestart hook is reported as unless it names its own.
pub const SETUP_FAILURE: &str = "Setup Failure";

impl HookError {
    /// A failure of `hook` that a later attempt may not have.
    pub fn recoverable(hook: &'static str, message: impl Into<String>) -> HookError {
        HookError {
            hook,
            message: message.into(),
            recoverable: true,
            event_type: SETUP_FAILURE,
        }
    }

    /// A failure of `hook` that no attempt will get past.
    pub fn fatal(hook: &'static str, message: impl Into<String>) -> HookError {
        HookError {
            hook,
            message: message.into(),
            recoverable: false,
            event_type: SETUP_FAILURE,
        }
    }

    /// The same failure, reported as a task event of type `event_type`.
    pub fn reported_as(self, event_type: &'static str) -> HookError {
        HookError { event_type, ..self }
    }

    /// The failure's task event.
    pub fn event(&self, now: i64) -> teamster_storage::model::TaskEvent {
        let message = if self.event_type == SETUP_FAILURE {
            self.to_string()
        } else {
            self.message.clone()
        };
        let mut ev = crate::client::types::event(now, self.event_type, message);
        ev.setup_error = self.to_string();
        ev
    }
}

/// What a hook persists between client restarts (JSON, its own shape).
pub type HookState = Option<serde_json::Value>;

/// What every hook of one task sees.
#[derive(Debug, Clone)]
pub struct HookCtx {
    /// The allocation's ID.
    pub alloc_id: String,
    /// The task as it runs (interpolated).
    pub task: Task,
    /// The allocation's directory.
    pub alloc_dir: AllocDir,
    /// The task's directories.
    pub task_dir: TaskDir,
    /// The `teamster` program (what the log collector runs as).
    pub program: PathBuf,
    /// A dispatched child's payload (tasks with a `dispatch_payload` block), or why it could
    /// not be read.
    pub payload: Option<Result<Vec<u8>, String>>,
    /// Where the task's services are registered.
    pub services: Registrations,
    /// The servers (workload identities are signed there); `None` without servers.
    pub servers: Option<Arc<Servers>>,
    /// The task runner's control queue (a renewed identity restarts or signals the task);
    /// weak, so it never keeps the queue open.
    pub control: Option<tokio::sync::mpsc::WeakSender<crate::client::types::TaskControl>>,
    /// Where the hooks' task events go.
    pub events: EventSink,
    /// The allocation's template reads (one blocking query for all of its tasks); `None`
    /// without servers.
    pub template_feed: Option<Arc<template_feed::TemplateFeed>>,
    /// How templates are rendered (the client's `template` configuration).
    pub template_config: crate::client::config::TemplateConfig,
    /// This prestart finds the task running (a client restart), rather than starting it.
    pub restoring: bool,
    /// Limits on the task's artifacts (the client's `artifact` configuration).
    pub artifact_config: crate::client::config::ArtifactConfig,
    /// The host volumes the task mounts, or why this node cannot give them.
    pub mounts: Result<Vec<crate::client::volumes::HostMount>, String>,
}

/// Where a hook's task events go (the task's state, sent to the servers).
#[derive(Clone, Default)]
pub struct EventSink(Option<Arc<dyn Fn(teamster_storage::model::TaskEvent) + Send + Sync>>);

impl EventSink {
    /// Events go to `f`.
    pub fn new(f: impl Fn(teamster_storage::model::TaskEvent) + Send + Sync + 'static) -> Self {
        EventSink(Some(Arc::new(f)))
    }

    /// Record `event`.
    pub fn emit(&self, event: teamster_storage::model::TaskEvent) {
        if let Some(f) = &self.0 {
            f(event);
        }
    }
}

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventSink")
    }
}

/// What prestart hooks hand the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// Where the task's output goes.
    pub logs: LogSinks,
    /// Variables added to the task's environment (its workload identity tokens).
    pub env: std::collections::BTreeMap<String, String>,
}

impl Default for Prepared {
    fn default() -> Self {
        Prepared {
            logs: LogSinks::Discard,
            env: std::collections::BTreeMap::new(),
        }
    }
}

/// One piece of work around a task. Every phase does nothing unless the hook says
/// otherwise.
pub trait TaskHook: Send + Sync {
    /// Its name (the key of its state, and in errors).
    fn name(&self) -> &'static str;

    /// Before each start, and when a restarted client finds the task running again.
    fn prestart<'a>(
        &'a self,
        _ctx: &'a HookCtx,
        _state: &'a mut HookState,
        _prepared: &'a mut Prepared,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Box::pin(async { Ok(()) })
    }

    /// The task is running.
    fn poststart<'a>(
        &'a self,
        _ctx: &'a HookCtx,
        _state: &'a mut HookState,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Box::pin(async { Ok(()) })
    }

    /// An in-place update of the job: `ctx.task` is the task's new version (the task keeps
    /// running).
    fn update<'a>(
        &'a self,
        _ctx: &'a HookCtx,
        _state: &'a mut HookState,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Box::pin(async { Ok(()) })
    }

    /// The task is about to be killed: before its `shutdown_delay` and the signal.
    fn pre_kill<'a>(
        &'a self,
        _ctx: &'a HookCtx,
        _state: &'a mut HookState,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Box::pin(async { Ok(()) })
    }

    /// The task exited (it may be started again).
    fn exited<'a>(
        &'a self,
        _ctx: &'a HookCtx,
        _state: &'a mut HookState,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Box::pin(async { Ok(()) })
    }

    /// The task is dead for good: release what the hook holds.
    fn stop<'a>(
        &'a self,
        _ctx: &'a HookCtx,
        _state: &'a mut HookState,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Box::pin(async { Ok(()) })
    }
}

/// The hooks of a task, in the order they run.
pub fn task_hooks() -> Vec<Box<dyn TaskHook>> {
    vec![
        Box::new(validate::Validate),
        Box::new(task_dir::TaskDirHook),
        Box::new(logmon::LogmonHook),
        Box::new(dispatch_payload::DispatchPayload),
        Box::new(artifacts::ArtifactsHook),
        Box::new(identity::IdentityHook::default()),
        Box::new(template::TemplateHook::default()),
        Box::new(services::ServicesHook),
    ]
}
