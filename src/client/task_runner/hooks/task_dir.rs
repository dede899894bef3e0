//! Builds the task's directories (`local/`, `secrets/` readable by its owner only, `tmp/`)
//! and the allocation's shared ones, before every start: building is idempotent, and a
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
            ctx.alloc_dir
                .build()
                .and_then(|()| ctx.task_dir.build())
                .map_err(|e| HookError::recoverable(self.name(), e.to_string()))
        })
    }
}
