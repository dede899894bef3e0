//! Builds the allocation's directory (`alloc/{data,logs,tmp}`) before its tasks start. A
//! failure is logged: each task's `task_dir` hook tries again and fails that task's start
//! with the reason.

use futures::future::BoxFuture;

use super::{AllocCtx, AllocHook, AllocHookError};

/// The `alloc_dir` hook.
#[derive(Debug)]
pub struct AllocDirHook;

impl AllocHook for AllocDirHook {
    fn name(&self) -> &'static str {
        "alloc_dir"
    }

    fn prerun<'a>(&'a self, ctx: &'a AllocCtx) -> BoxFuture<'a, Result<(), AllocHookError>> {
        let built = ctx.alloc_dir.build().map_err(|e| AllocHookError {
            hook: self.name(),
            message: e.to_string(),
        });
        Box::pin(async move { built })
    }
}
