//! Builds the task's directories (`local/`, `secrets/` readable by its owner only, `tmp/`)
//! before every start; the allocation's shared ones are the allocation runner's `alloc_dir`
//! hook's, built here only when that hook could not. Building is idempotent, and a
//! restarted client finds what a reboot removed built again.

use futures::future::BoxFuture;

use super::{HookCtx, HookError, HookState, Prepared, TaskHook};

/// The `task_dir` hook.
#[derive(Debug)]
pub struct TaskDirHook;

impl TaskHook for TaskDirHook {
    fn name(&self) -> &'static str {
        "task_dir"
    }

    fn prestart<'a>(
        &'a self,
        ctx: &'a HookCtx,
        _state: &'a mut HookState,
        _prepared: &'a mut Prepared,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Box::pin(async move {
            let shared = if ctx.alloc_dir.data().is_dir() {
                Ok(())
            } else {
                ctx.alloc_dir.build()
            };
            shared
                .and_then(|()| ctx.task_dir.build())
                .map_err(|e| HookError::recoverable(self.name(), e.to_string()))
        })
    }
}
