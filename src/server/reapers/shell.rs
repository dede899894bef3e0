//! The reapers' shell: three tasks, started while leadership is established, that take what
//! the broker and the blocked-evals tracker give up on and write it back through raft with the
//! builders of [`super::core`].

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use teamster_storage::fsm::{Command, CommandResponse, EvalUpsert};
use teamster_storage::model::Evaluation;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn, Instrument};

use super::core::{failed_eval_update, mark_canceled, mark_duplicates_canceled};
use crate::server::broker::FAILED_QUEUE;
use crate::server::leader::LeaderDuty;
use crate::server::leader_service::LeaderService;
use crate::server::pipeline::EvalPipeline;
use crate::server::raft::RaftNode;
use crate::util::{RngSource, SharedClock};

/// How long one `_failed` dequeue or duplicates wait lasts before the loop re-checks
/// cancellation (Nomad: 1 s).
const POLL: Duration = Duration::from_secs(1);
/// Pause after a failed raft write before the reaper tries again.
const WRITE_BACKOFF: Duration = Duration::from_millis(500);

/// The reapers as one leader duty.
pub struct ReapersDuty {
    node: Arc<RaftNode>,
    pipeline: EvalPipeline,
    clock: SharedClock,
    rng: RngSource,
    tasks: LeaderService,
}

impl ReapersDuty {
    /// Reapers over `pipeline`, writing through `node`.
    pub fn new(
        node: Arc<RaftNode>,
        pipeline: EvalPipeline,
        clock: SharedClock,
        rng: RngSource,
    ) -> ReapersDuty {
        ReapersDuty {
            node,
            pipeline,
            clock,
            rng,
            tasks: LeaderService::new(),
        }
    }

    fn reaper(&self, cancel: CancellationToken) -> Reaper {
        Reaper {
            node: self.node.clone(),
            pipeline: self.pipeline.clone(),
            clock: self.clock.clone(),
            rng: self.rng.clone(),
            cancel,
        }
    }
}

impl LeaderDuty for ReapersDuty {
    fn name(&self) -> &'static str {
        "eval reapers"
    }

    fn establish(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            self.tasks
                .restart(|set| {
                    set.spawn(|stop| {
                        self.reaper(stop)
                            .failed()
                            .instrument(tracing::info_span!("reap_failed"))
                    });
                    set.spawn(|stop| {
                        self.reaper(stop)
                            .cancelable()
                            .instrument(tracing::info_span!("reap_cancelable"))
                    });
                    set.spawn(|stop| {
                        self.reaper(stop)
                            .duplicates()
                            .instrument(tracing::info_span!("reap_duplicate_blocked"))
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

#[derive(Clone)]
struct Reaper {
    node: Arc<RaftNode>,
    pipeline: EvalPipeline,
    clock: SharedClock,
    rng: RngSource,
    cancel: CancellationToken,
}

impl Reaper {
    /// Writes `evals` through raft; false (logged, counted) when the write failed.
    async fn write(&self, reaper: &'static str, evals: Vec<Evaluation>) -> bool {
        let outcome = self
            .node
            .write_local(Command::EvalUpsert(EvalUpsert { evals }))
            .await;
        let error = match outcome {
            Ok(applied) => match applied.response {
                CommandResponse::Rejected(e) => e.to_string(),
                _ => return true,
            },
            Err(e) => e.to_string(),
        };
        warn!(reaper, error = %error, "reaper write failed");
        metrics::counter!("teamster_reaper_write_errors_total", "reaper" => reaper).increment(1);
        false
    }

    async fn pause(&self, d: Duration) -> bool {
        tokio::select! {
            _ = self.cancel.cancelled() => false,
            _ = tokio::time::sleep(d) => true,
        }
    }

    async fn failed(self) {
        let broker = self.pipeline.broker().clone();
        let config = broker.config();
        let mut rng = self.rng.fork();
        loop {
            let got = tokio::select! {
                _ = self.cancel.cancelled() => return,
                r = broker.dequeue(&[FAILED_QUEUE], POLL) => r,
            };
            let (eval, token) = match got {
                Ok(Some(x)) => x,
                Ok(None) => continue,
                // Disabled: leadership is being revoked.
                Err(_) => {
                    if !self.pause(POLL).await {
                        return;
                    }
                    continue;
                }
            };
            let job_exists = self
                .node
                .state()
                .snapshot()
                .job_by_id(&eval.namespace, &eval.job_id)
                .is_some();
            let now = self.clock.now_unix_nanos();
            if let Some(update) = failed_eval_update(&eval, job_exists, &config, &mut rng, now) {
                let mut evals = vec![update.failed];
                evals.extend(update.follow_up);
                if !self.write("failed", evals).await {
                    if !self.pause(WRITE_BACKOFF).await {
                        return;
                    }
                    continue;
                }
                metrics::counter!("teamster_reaper_failed_evals_total").increment(1);
                warn!(eval_id = %eval.id, job_id = %eval.job_id, "evaluation reached the delivery limit; marked failed");
            }
            if let Err(e) = broker.ack(&eval.id, &token) {
                debug!(eval_id = %eval.id, error = %e, "ack of a failed eval refused");
            }
        }
    }

    async fn cancelable(self) {
        let broker = self.pipeline.broker().clone();
        let config = broker.config();
        loop {
            tokio::select! {
                _ = self.cancel.cancelled() => return,
                _ = broker.wait_cancelable(config.reap_cancelable_interval) => {}
            }
            let batch = match broker.cancelable(config.cancelable_batch_size) {
                Ok(b) => b,
                Err(_) => continue,
            };
            if batch.is_empty() {
                continue;
            }
            let n = batch.len();
            let evals = mark_canceled(batch, self.clock.now_unix_nanos());
            if self.write("cancelable", evals).await {
                metrics::counter!("teamster_reaper_canceled_evals_total").increment(n as u64);
                debug!(canceled = n, "superseded evaluations canceled");
            } else if !self.pause(WRITE_BACKOFF).await {
                return;
            }
        }
    }

    async fn duplicates(self) {
        let blocked = self.pipeline.blocked().clone();
        loop {
            let got = tokio::select! {
                _ = self.cancel.cancelled() => return,
                r = blocked.wait_duplicates(POLL) => r,
            };
            let dups = match got {
                Ok(d) if !d.is_empty() => d,
                Ok(_) => continue,
                Err(_) => {
                    if !self.pause(POLL).await {
                        return;
                    }
                    continue;
                }
            };
            let n = dups.len();
            let evals = mark_duplicates_canceled(dups, self.clock.now_unix_nanos());
            if self.write("duplicate_blocked", evals).await {
                metrics::counter!("teamster_reaper_duplicate_blocked_total").increment(n as u64);
            } else if !self.pause(WRITE_BACKOFF).await {
                return;
            }
        }
    }
}
