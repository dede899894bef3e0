//! Registers the group's services (the group's `service` blocks) for the allocation's run,
//! and withdraws them once a stop is asked, before the group's `shutdown_delay`, so traffic
//! leaves before any task is signalled; and when every task is dead. The client's service
//! loop sends what is registered once the allocation runs (a group service naming a `task`
//! once that task runs), built from the job as the client holds it, so an in-place update's
//! new names, tags and ports go out with the update itself.

use futures::future::BoxFuture;

use super::{AllocCtx, AllocHook, AllocHookError};
use crate::client::types::ServiceOwner;

/// The `group_services` hook.
#[derive(Debug)]
pub struct GroupServices;

impl GroupServices {
    fn set(ctx: &AllocCtx, on: bool) -> BoxFuture<'_, Result<(), AllocHookError>> {
        ctx.services.set(ServiceOwner::Group, on);
        Box::pin(async { Ok(()) })
    }
}

impl AllocHook for GroupServices {
    fn name(&self) -> &'static str {
        "group_services"
    }

    fn prerun<'a>(&'a self, ctx: &'a AllocCtx) -> BoxFuture<'a, Result<(), AllocHookError>> {
        // A stop under way (begun before a client restart, say) goes on without them.
        ctx.services.register_unless_stopping(ServiceOwner::Group);
        Box::pin(async { Ok(()) })
    }

    fn pre_kill<'a>(&'a self, ctx: &'a AllocCtx) -> BoxFuture<'a, Result<(), AllocHookError>> {
        Self::set(ctx, false)
    }

    fn postrun<'a>(&'a self, ctx: &'a AllocCtx) -> BoxFuture<'a, Result<(), AllocHookError>> {
        Self::set(ctx, false)
    }
}
