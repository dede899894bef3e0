//! Writes a dispatched child's payload to `local/<file>` for a task with a
//! `dispatch_payload` block (Nomad's `dispatch_payload` hook), once: its state records that
//! it was written, so a restart of the task or of the client leaves the file as the task
//! may have changed it.

use futures::future::BoxFuture;

use super::{HookCtx, HookError, HookState, Prepared, TaskHook};

/// The `dispatch_payload` hook.
#[derive(Debug)]
pub struct DispatchPayload;

impl TaskHook for DispatchPayload {
    fn name(&self) -> &'static str {
        "dispatch_payload"
    }

    fn prestart<'a>(
        &'a self,
        ctx: &'a HookCtx,
        state: &'a mut HookState,
        _prepared: &'a mut Prepared,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Box::pin(async move {
            let (Some(block), Some(payload)) = (&ctx.task.dispatch_payload, &ctx.payload) else {
                return Ok(());
            };
            if state.is_some() {
                return Ok(());
            }
            let payload = payload
                .as_ref()
                .map_err(|e| HookError::fatal(self.name(), e.clone()))?;
            let path = ctx.task_dir.local().join(&block.file);
            let write = || -> std::io::Result<()> {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::write(&path, payload)
            };
            write().map_err(|e| {
                HookError::recoverable(self.name(), format!("writing {}: {e}", path.display()))
            })?;
            *state = Some(serde_json::json!({ "written": true }));
            Ok(())
        })
    }
}
