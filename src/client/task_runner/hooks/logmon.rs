//! Starts the task's log collector ([`crate::client::logmon`]) before the task starts, finds
//! it again after a client restart (or starts a new one that continues the newest file), and
//! stops it once the task is dead for good. An in-place update of the `logs` limits is
//! handed to the running collector ([`Collector::reload`]). A task with `logs { disabled = true }`, or whose
//! driver writes no output (`mock`), writes to nothing and has no collector.

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::{HookCtx, HookError, HookState, Prepared, TaskHook};
use crate::client::logmon::{self, Collector, CollectorSpec, LogSinks};

/// The `logmon` hook.
#[derive(Debug)]
pub struct LogmonHook;

/// Whether `ctx`'s task has output to collect.
fn collects(ctx: &HookCtx) -> bool {
    let disabled = ctx.task.log_config.as_ref().is_some_and(|l| l.disabled);
    !disabled && ctx.task.driver != "mock"
}

/// What the hook keeps: the collector, and the limits it follows (`None`: as it was started,
/// by an earlier version that did not record them).
#[derive(Debug, Serialize, Deserialize)]
struct Recorded {
    #[serde(flatten)]
    collector: Collector,
    #[serde(default)]
    limits: Option<(u64, u64)>,
}

fn recorded(state: &HookState) -> Option<Recorded> {
    state
        .as_ref()
        .and_then(|v| serde_json::from_value(v.clone()).ok())
}

fn spec_of(ctx: &HookCtx) -> CollectorSpec {
    let config = ctx.task.log_config.clone().unwrap_or_default();
    // Beside the task directories, where tasks cannot write (alloc/logs is theirs too).
    let limits = ctx
        .alloc_dir
        .root()
        .join(format!(".{}.logmon.limits", ctx.task.name));
    CollectorSpec::new(&ctx.alloc_dir.logs(), &ctx.task.name, &config, Some(limits))
}

/// Hands a running collector the task's `logs` limits when they changed; an error when it
/// cannot take them (started by an earlier version, or the reload failed).
fn reload(ctx: &HookCtx, state: &mut HookState) -> Result<(), String> {
    let Some(mut kept) = recorded(state) else {
        return Ok(());
    };
    let spec = spec_of(ctx);
    if !collects(ctx) || kept.limits == Some(spec.limits()) || !kept.collector.alive() {
        // A collector started later reads the task's new `logs` from its arguments.
        return Ok(());
    }
    if kept.limits.is_none() {
        return Err(
            "the log collector predates reloads: the new logs limits apply once it is started again"
                .into(),
        );
    }
    kept.collector.reload(&spec).map_err(|e| e.to_string())?;
    info!(pid = kept.collector.pid, limits = ?spec.limits(), "log collector given new limits");
    kept.limits = Some(spec.limits());
    *state = serde_json::to_value(kept).ok();
    Ok(())
}

impl TaskHook for LogmonHook {
    fn name(&self) -> &'static str {
        "logmon"
    }

    fn prestart<'a>(
        &'a self,
        ctx: &'a HookCtx,
        state: &'a mut HookState,
        prepared: &'a mut Prepared,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Box::pin(async move {
            if !collects(ctx) {
                prepared.logs = LogSinks::Discard;
                return Ok(());
            }
            let logs_dir = ctx.alloc_dir.logs();
            let sinks = LogSinks::Collector {
                logs_dir: logs_dir.clone(),
                task: ctx.task.name.clone(),
            };
            if recorded(state).is_some_and(|r| r.collector.alive()) {
                prepared.logs = sinks;
                // The job may have changed in place while the client was away; the task
                // starts whatever becomes of that.
                if let Err(e) = reload(ctx, state) {
                    warn!(error = %e, "log collector kept its limits");
                }
                return Ok(());
            }
            let spec = spec_of(ctx);
            let collector = logmon::start(&ctx.program, &spec)
                .await
                .map_err(|e| HookError::recoverable(self.name(), e.to_string()))?;
            info!(pid = collector.pid, "log collector started");
            let kept = Recorded {
                collector,
                limits: Some(spec.limits()),
            };
            *state = serde_json::to_value(kept).ok();
            prepared.logs = sinks;
            Ok(())
        })
    }

    fn update<'a>(
        &'a self,
        ctx: &'a HookCtx,
        state: &'a mut HookState,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        let reloaded = reload(ctx, state).map_err(|e| HookError::recoverable(self.name(), e));
        Box::pin(async move { reloaded })
    }

    fn stop<'a>(
        &'a self,
        _ctx: &'a HookCtx,
        state: &'a mut HookState,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Box::pin(async move {
            if let Some(Recorded { collector, .. }) = recorded(state) {
                collector.stop().await;
                if collector.alive() {
                    warn!(
                        pid = collector.pid,
                        "log collector still running after stop"
                    );
                }
            }
            *state = None;
            Ok(())
        })
    }
}
