//! The deployment watcher's shell: one task, started while leadership is established, that
//! looks at the running deployments whenever the deployments or allocations change (counts
//! move with every placement and health report; allocations fail) or a progress deadline
//! comes due, and writes what [`watch::decide`](super::watch::decide) asks for through raft.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use teamster_storage::fsm::{AllocUpdateDesiredTransition, Command, EvalUpsert};
use teamster_storage::model::{DesiredTransition, EvalTrigger};
use teamster_storage::state::Table;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use super::ops;
use super::watch::{self, healthy_total, WatchAction, WatchMemory};
use crate::server::evals::job_eval;
use crate::server::leader::LeaderDuty;
use crate::server::leader_service::LeaderService;
use crate::server::periodic::LaunchWriter;
use crate::util::{RngSource, SharedClock};

/// The longest sleep between two looks (a look is cheap; the wall clock may be stepped).
const MAX_SLEEP: Duration = Duration::from_secs(30);
/// Pause after a failed raft write before the watcher looks again.
const WRITE_BACKOFF: Duration = Duration::from_secs(1);
/// The tables whose changes can call for a decision.
const WATCHED: [Table; 2] = [Table::Deployments, Table::Allocs];
/// Changes arriving together are handled together: after a change, wait this long for more
/// (Nomad batches the watcher's evaluations too).
const COALESCE: Duration = Duration::from_millis(100);

/// The deployment watcher as a leader duty.
pub struct DeploymentWatcherDuty {
    writer: Arc<dyn LaunchWriter>,
    clock: SharedClock,
    rng: RngSource,
    job_max_versions: u32,
    tasks: LeaderService,
}

impl DeploymentWatcherDuty {
    /// A watcher writing through `writer`; `job_max_versions` goes into auto-reverts.
    pub fn new(
        writer: Arc<dyn LaunchWriter>,
        clock: SharedClock,
        rng: RngSource,
        job_max_versions: u32,
    ) -> Self {
        Self {
            writer,
            clock,
            rng,
            job_max_versions,
            tasks: LeaderService::new(),
        }
    }
}

impl LeaderDuty for DeploymentWatcherDuty {
    fn name(&self) -> &'static str {
        "deployment watcher"
    }

    fn establish(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let watcher = Watcher {
                writer: self.writer.clone(),
                clock: self.clock.clone(),
                rng: self.rng.clone(),
                job_max_versions: self.job_max_versions,
            };
            self.tasks
                .restart(|set| {
                    set.spawn(|stop| {
                        watcher
                            .run(stop)
                            .instrument(tracing::info_span!("deployment_watcher"))
                    });
                })
                .await;
            Ok(())
        })
    }

    fn revoke(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.tasks.stop())
    }
}

struct Watcher {
    writer: Arc<dyn LaunchWriter>,
    clock: SharedClock,
    rng: RngSource,
    job_max_versions: u32,
}

impl Watcher {
    async fn run(self, stop: CancellationToken) {
        let mut memory = WatchMemory::default();
        loop {
            let snapshot = self.writer.state().snapshot();
            let seen = snapshot.max_index(&WATCHED);
            let now = self.clock.now_unix_nanos();
            let decisions = watch::decide(&snapshot, now, &mut memory);
            let mut failed = false;
            for action in &decisions.actions {
                if stop.is_cancelled() {
                    return;
                }
                failed |= !self.act(&snapshot, action, now, &mut memory).await;
            }
            if failed {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(WRITE_BACKOFF) => {}
                }
                continue;
            }
            let sleep = decisions.next_deadline.map_or(MAX_SLEEP, |at| {
                let nanos = at.saturating_sub(now).max(0);
                Duration::from_nanos(u64::try_from(nanos).unwrap_or(0)).min(MAX_SLEEP)
            });
            debug!(
                actions = decisions.actions.len(),
                ?sleep,
                "deployment watcher waiting"
            );
            tokio::select! {
                _ = stop.cancelled() => return,
                waited = self.writer.state().wait_tables(&WATCHED, seen.max(1), sleep) => {
                    if waited.is_err() {
                        return; // the store is closed: the server is shutting down
                    }
                }
            }
            if sleep > COALESCE {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(COALESCE) => {}
                }
            }
        }
    }

    /// Writes one decision; false when it must be retried.
    async fn act(
        &self,
        snapshot: &teamster_storage::state::Snapshot,
        action: &WatchAction,
        now: i64,
        memory: &mut WatchMemory,
    ) -> bool {
        let mut rng = self.rng.fork();
        let (deployment, what, command) = match action {
            WatchAction::Evaluate { deployment } => {
                let Some(job) = snapshot.job_by_id(&deployment.namespace, &deployment.job_id)
                else {
                    return true;
                };
                let mut eval = job_eval(job, EvalTrigger::DeploymentWatcher, now, &mut rng);
                if deployment.eval_priority > 0 {
                    eval.priority = deployment.eval_priority;
                }
                let command = Command::EvalUpsert(EvalUpsert { evals: vec![eval] });
                (deployment, "evaluate", command)
            }
            WatchAction::Reschedule { deployment, allocs } => {
                let Some(job) = snapshot.job_by_id(&deployment.namespace, &deployment.job_id)
                else {
                    return true;
                };
                let eval = job_eval(job, EvalTrigger::DeploymentWatcher, now, &mut rng);
                let transition = DesiredTransition {
                    reschedule: Some(true),
                    ..DesiredTransition::default()
                };
                let command = Command::AllocUpdateDesiredTransition(AllocUpdateDesiredTransition {
                    allocs: allocs
                        .iter()
                        .map(|id| (id.clone(), transition.clone()))
                        .collect(),
                    evals: vec![eval],
                });
                (deployment, "reschedule", command)
            }
            WatchAction::Fail {
                deployment,
                description,
            } => match ops::fail(
                snapshot,
                deployment,
                description,
                now,
                &mut rng,
                self.job_max_versions,
            ) {
                Ok(write) => (deployment, "fail", write.command),
                Err(e) => {
                    debug!(deployment_id = %deployment.id, error = %e, "not failing the deployment");
                    return true;
                }
            },
            WatchAction::Promote { deployment } => {
                match ops::promote(snapshot, deployment, true, &[], now, &mut rng) {
                    Ok(write) => (deployment, "promote", write.command),
                    Err(e) => {
                        debug!(deployment_id = %deployment.id, error = %e, "not promoting the deployment");
                        return true;
                    }
                }
            }
        };
        match self.writer.write(command).await {
            Ok(response) => {
                if let Some(e) = response.rejection() {
                    // The deployment moved on meanwhile (ended, promoted): look again.
                    debug!(deployment_id = %deployment.id, action = what, error = %e, "watcher write refused");
                } else {
                    info!(deployment_id = %deployment.id, job_id = %deployment.job_id, action = what, "deployment watcher acted");
                    metrics::counter!("teamster_deployment_watcher_actions_total", "action" => what)
                        .increment(1);
                }
                if what == "evaluate" {
                    memory.evaluated(&deployment.id, healthy_total(deployment));
                }
                true
            }
            Err(e) => {
                warn!(deployment_id = %deployment.id, action = what, error = %e, "deployment watcher write failed");
                false
            }
        }
    }
}
