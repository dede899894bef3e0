//! Starts the task's log collector ([`crate::client::logmon`]) before the task starts, finds
//! it again after a client restart (or starts a new one that continues the newest file), and
//! stops it once the task is dead for good. A task with `logs { disabled = true }`, or whose
//! driver writes no output (`mock`), writes to nothing and has no collector.

use futures::future::BoxFuture;
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

fn recorded(state: &HookState) -> Option<Collector> {
    state
        .as_ref()
        .and_then(|v| serde_json::from_value(v.clone()).ok())
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
            if recorded(state).is_some_and(|c| c.alive()) {
                prepared.logs = sinks;
                return Ok(());
            }
            let config = ctx.task.log_config.clone().unwrap_or_default();
            let spec = CollectorSpec::new(&logs_dir, &ctx.task.name, &config);
            let collector = logmon::start(&ctx.program, &spec)
                .await
                .map_err(|e| HookError::recoverable(self.name(), e.to_string()))?;
            info!(pid = collector.pid, "log collector started");
            *state = serde_json::to_value(collector).ok();
            prepared.logs = sinks;
            Ok(())
        })
    }

    fn stop<'a>(
        &'a self,
        _ctx: &'a HookCtx,
        state: &'a mut HookState,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Box::pin(async move {
            if let Some(collector) = recorded(state) {
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
