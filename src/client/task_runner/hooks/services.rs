//! Registers the task's own services (its `service` blocks) once it runs, and withdraws
//! them before it is killed (ahead of its `shutdown_delay`), when it exits and when it is
//! dead for good. An in-place update re-sends them (names, tags and ports may have changed).
//! The client's service loop sends what is registered to the servers.

use futures::future::BoxFuture;

use super::{HookCtx, HookError, HookState, TaskHook};
use crate::client::types::ServiceOwner;

/// The `services` hook.
#[derive(Debug)]
pub struct ServicesHook;

impl ServicesHook {
    fn set(ctx: &HookCtx, on: bool) -> BoxFuture<'_, Result<(), HookError>> {
        ctx.services.set(ServiceOwner::Task(&ctx.task.name), on);
        Box::pin(async { Ok(()) })
    }
}

impl TaskHook for ServicesHook {
    fn name(&self) -> &'static str {
        "services"
    }

    fn poststart<'a>(
        &'a self,
        ctx: &'a HookCtx,
        _state: &'a mut HookState,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Self::set(ctx, true)
    }

    fn update<'a>(
        &'a self,
        ctx: &'a HookCtx,
        _state: &'a mut HookState,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        ctx.services.refresh();
        Box::pin(async { Ok(()) })
    }

    fn pre_kill<'a>(
        &'a self,
        ctx: &'a HookCtx,
        _state: &'a mut HookState,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Self::set(ctx, false)
    }

    fn exited<'a>(
        &'a self,
        ctx: &'a HookCtx,
        _state: &'a mut HookState,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Self::set(ctx, false)
    }

    fn stop<'a>(
        &'a self,
        ctx: &'a HookCtx,
        _state: &'a mut HookState,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Self::set(ctx, false)
    }
}
