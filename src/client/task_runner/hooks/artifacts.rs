//! Fetches the task's artifacts into its directory before it starts (Nomad's `artifacts`
//! hook), one after the other, each once: its state records the ones fetched, so a restart
//! of the task or of the client does not fetch them again. A failed fetch is a `Failed
//! Artifact Download` event and an attempt of the restart policy, as in Nomad.

use futures::future::BoxFuture;

use super::{HookCtx, HookError, HookState, Prepared, TaskHook};
use crate::client::artifacts::{fetch, ArtifactLimits, FetchPlace};
use crate::client::types::event;

/// The task event of a failed fetch.
const DOWNLOAD_FAILED: &str = "Failed Artifact Download";

/// The `artifacts` hook.
#[derive(Debug)]
pub struct ArtifactsHook;

impl TaskHook for ArtifactsHook {
    fn name(&self) -> &'static str {
        "artifacts"
    }

    fn prestart<'a>(
        &'a self,
        ctx: &'a HookCtx,
        state: &'a mut HookState,
        _prepared: &'a mut Prepared,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Box::pin(async move {
            let artifacts = &ctx.task.artifacts;
            if artifacts.is_empty() {
                return Ok(());
            }
            // What an earlier start fetched, by the artifact as it was given.
            let key = |a: &teamster_storage::model::TaskArtifact| {
                serde_json::to_string(a).unwrap_or_default()
            };
            let mut fetched: Vec<String> = state
                .as_ref()
                .and_then(|s| serde_json::from_value(s["fetched"].clone()).ok())
                .unwrap_or_default();
            if artifacts.iter().all(|a| fetched.contains(&key(a))) {
                return Ok(());
            }
            let now = crate::util::system_clock().now_unix_nanos();
            ctx.events.emit(event(
                now,
                "Downloading Artifacts",
                "Client is downloading artifacts".into(),
            ));
            let limits = ArtifactLimits::of(&ctx.artifact_config);
            let place = FetchPlace {
                task_dir: ctx.task_dir.dir().to_path_buf(),
                owner: ctx.task_dir.owner(),
            };
            for artifact in artifacts {
                if fetched.contains(&key(artifact)) {
                    continue;
                }
                if let Err(e) = fetch(artifact, &place, &limits).await {
                    let message = format!(
                        "failed to download artifact {:?}: {e}",
                        artifact.getter_source
                    );
                    return Err(
                        HookError::recoverable(self.name(), message).reported_as(DOWNLOAD_FAILED)
                    );
                }
                fetched.push(key(artifact));
                *state = Some(serde_json::json!({ "fetched": fetched }));
            }
            Ok(())
        })
    }
}
