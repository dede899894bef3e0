//! Registers the task's own services (its `service` blocks) once it runs, and withdraws
//! them before it is killed (ahead of its `shutdown_delay`), when it exits and when it is
//! dead for good. The client's service loop sends what is registered to the servers, built
//! from the allocation's job as the client holds it, so an in-place update's new names, tags
//! and ports go out with the update itself.

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
