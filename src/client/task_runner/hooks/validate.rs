//! The first prestart hook: what this client cannot run is refused before anything is
//! built (a kill signal this system does not have, a host volume this node lacks).

use futures::future::BoxFuture;

use super::{HookCtx, HookError, HookState, Prepared, TaskHook};

/// The `validate` hook.
#[derive(Debug)]
pub struct Validate;

impl TaskHook for Validate {
    fn name(&self) -> &'static str {
        "validate"
    }

    fn prestart<'a>(
        &'a self,
        ctx: &'a HookCtx,
        _state: &'a mut HookState,
        _prepared: &'a mut Prepared,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Box::pin(async move {
            let signal = &ctx.task.kill_signal;
            if !signal.is_empty() && crate::client::signal::parse(signal).is_none() {
                return Err(HookError::fatal(
                    self.name(),
                    format!("kill_signal {signal:?} is not a signal of this system"),
                ));
            }
            if let Err(e) = &ctx.mounts {
                return Err(HookError::fatal(self.name(), e.clone()));
            }
            Ok(())
        })
    }
}
