//! The `alloc_health_watcher` hook: beside the task runners of a service job's allocation
//! (neither deployments nor migrations judge other jobs' allocations), from when its tasks
//! may start (after the upstream-allocation hook, as Nomad's), it steps the allocation's
//! [`HealthWatch`] on every change of the allocation and at the time the watch asks to look
//! again, and records a verdict (with its `Alloc Unhealthy` task events) as a change the
//! updater reports. Joining a new deployment (an in-place update) is judged again by the
//! same watcher.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use teamster_storage::model::{DeploymentId, Timestamp};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, Instrument};

use super::{AllocCtx, AllocHook, AllocHookError};
use crate::client::health::{judged_job_type, HealthWatch, Step, Verdict, ALLOC_UNHEALTHY};
use crate::client::shared::Shared;
use crate::client::types::{event, push_event, JudgedHealth, LocalAlloc};

/// The `alloc_health_watcher` hook.
#[derive(Debug)]
pub struct HealthWatcher;

impl AllocHook for HealthWatcher {
    fn name(&self) -> &'static str {
        "alloc_health_watcher"
    }

    fn prerun<'a>(&'a self, ctx: &'a AllocCtx) -> BoxFuture<'a, Result<(), AllocHookError>> {
        let judged = ctx.with_local(|l| judged_job_type(l.job.job_type)) == Some(true);
        if judged {
            let span = tracing::info_span!("alloc_health", alloc_id = %ctx.alloc_id);
            tokio::spawn(
                watch_health(
                    ctx.shared.clone(),
                    ctx.alloc_id.clone(),
                    ctx.siblings.stop_asked.clone(),
                )
                .instrument(span),
            );
        }
        Box::pin(async { Ok(()) })
    }
}

/// The health watcher's shell: step the allocation's [`HealthWatch`] on every change of the
/// allocation (and when it asks to look again), record its verdicts. Ends once the
/// allocation is gone, stopped or finished.
async fn watch_health(shared: Arc<Shared>, alloc_id: String, stop: CancellationToken) {
    let mut changes = shared.alloc_changes.subscribe();
    let mut watch = HealthWatch::new();
    let mut watching: Option<DeploymentId> = None;
    loop {
        // Seen before looking, so a change made meanwhile wakes the wait below.
        changes.borrow_and_update();
        let now = shared.clock.now_unix_nanos();
        let stopping = stop.is_cancelled();
        let mut step = Step::Idle;
        let mut over = false;
        let mut deployment_id = DeploymentId::default();
        let checks = {
            let st = shared.state();
            st.allocs
                .get(&alloc_id)
                .and_then(|l| crate::client::checks::passing_since(&shared, &st.node_id, l))
        };
        let present = shared.update_alloc_if(&alloc_id, |local| {
            step = watch.step_with_checks(local, stopping, checks, now);
            over = local.finished() || local.alloc.server_terminal_status();
            deployment_id = local.alloc.deployment_id.clone();
            match &step {
                Step::Judged(verdict) => {
                    record_verdict(local, verdict);
                    true
                }
                _ => false,
            }
        });
        if !present {
            return;
        }
        if watching.as_ref() != Some(&deployment_id) {
            match watch.tracker() {
                Some(t) => debug!(
                    deployment_id = %deployment_id,
                    deployment = t.policy().deployment,
                    health_check = %t.policy().health_check,
                    min_healthy_time_ns = t.policy().min_healthy_time,
                    healthy_deadline_ns = t.policy().healthy_deadline,
                    "tracking allocation health"
                ),
                None => debug!(deployment_id = %deployment_id, "allocation health not tracked"),
            }
            watching = Some(deployment_id.clone());
        }
        let wake_at = match step {
            Step::Idle => None,
            Step::Wait { wake_at } => Some(wake_at),
            Step::Judged(verdict) => {
                shared.persist();
                let healthy = if verdict.healthy { "true" } else { "false" };
                metrics::counter!("teamster_client_alloc_health_total", "healthy" => healthy)
                    .increment(1);
                info!(
                    deployment_id = %deployment_id,
                    healthy = verdict.healthy,
                    reason = %verdict.reason,
                    "allocation health set"
                );
                None
            }
            Step::Stopped => {
                debug!(deployment_id = %deployment_id, "allocation stopped before its health was set");
                return;
            }
        };
        if stopping || over {
            return;
        }
        let wait = wake_at.map(|at| Duration::from_nanos(at.saturating_sub(now).max(1) as u64));
        tokio::select! {
            _ = stop.cancelled() => {}
            changed = changes.changed() => if changed.is_err() { return },
            _ = sleep_for(wait) => {}
        }
    }
}

/// `verdict` on the allocation's current deployment, kept for the updater to report, with
/// its `Alloc Unhealthy` events on the tasks it blames.
fn record_verdict(local: &mut LocalAlloc, verdict: &Verdict) {
    local.health = Some(JudgedHealth {
        deployment_id: local.alloc.deployment_id.clone(),
        healthy: verdict.healthy,
        timestamp: Timestamp::from_unix_nanos(verdict.at),
        reported: false,
    });
    for (task, message) in &verdict.task_events {
        if let Some(state) = local.task_states.get_mut(task) {
            push_event(state, event(verdict.at, ALLOC_UNHEALTHY, message.clone()));
        }
    }
}

/// Sleep for `wait`, or forever.
async fn sleep_for(wait: Option<Duration>) {
    match wait {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}
