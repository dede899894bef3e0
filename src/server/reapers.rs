//! The leader's eval reapers (Nomad's `reapFailedEvaluations`, `reapCancelableEvaluations`,
//! `reapDupBlockedEvaluations`), run while leadership is established:
//!
//! - **failed**: dequeues the broker's `_failed` queue (evals past the delivery limit), writes
//!   each as `failed` together with a follow-up eval delayed by 1 min + random 0–5 min (none
//!   if the job is gone) in one raft entry, then acks it. A failed write leaves the delivery
//!   unacked; its nack timer brings it back.
//! - **cancelable**: on every Ack that made evals cancelable, and every
//!   `reap_cancelable_interval` (5 s), takes one batch of at most 728 superseded evals and
//!   writes them `canceled`.
//! - **duplicate blocked**: writes the blocked evals superseded by a newer one of their job as
//!   `canceled`.
//!
//! (The periodic release of evals blocked by `max-plan-attempts` runs in the blocked-evals
//! tracker's own maintenance task.)
//!
//! Metrics: counters `teamster_reaper_failed_evals_total`, `teamster_reaper_canceled_evals_total`,
//! `teamster_reaper_duplicate_blocked_total`, `teamster_reaper_write_errors_total{reaper}`.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use rand::rngs::StdRng;
use rand::SeedableRng;
use teamster_storage::fsm::{Command, CommandResponse, EvalUpsert};
use teamster_storage::model::Evaluation;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn, Instrument};

use crate::server::blocked_evals::mark_duplicates_canceled;
use crate::server::eval_broker::{failed_eval_update, mark_canceled, FAILED_QUEUE};
use crate::server::leader::LeaderDuty;
use crate::server::pipeline::EvalPipeline;
use crate::server::raft::RaftNode;
use crate::util::SharedClock;

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
    running: Mutex<Option<(CancellationToken, Vec<JoinHandle<()>>)>>,
}

impl ReapersDuty {
    /// Reapers over `pipeline`, writing through `node`.
    pub fn new(node: Arc<RaftNode>, pipeline: EvalPipeline, clock: SharedClock) -> ReapersDuty {
        ReapersDuty {
            node,
            pipeline,
            clock,
            running: Mutex::new(None),
        }
    }

    async fn stop(&self) {
        let running = self
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some((cancel, tasks)) = running {
            cancel.cancel();
            for t in tasks {
                let _ = t.await;
            }
        }
    }
}

impl LeaderDuty for ReapersDuty {
    fn name(&self) -> &'static str {
        "eval reapers"
    }

    fn establish(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            self.stop().await;
            let cancel = CancellationToken::new();
            let r = Reaper {
                node: self.node.clone(),
                pipeline: self.pipeline.clone(),
                clock: self.clock.clone(),
                cancel: cancel.clone(),
            };
            let tasks = vec![
                tokio::spawn(
                    r.clone()
                        .failed()
                        .instrument(tracing::info_span!("reap_failed")),
                ),
                tokio::spawn(
                    r.clone()
                        .cancelable()
                        .instrument(tracing::info_span!("reap_cancelable")),
                ),
                tokio::spawn(
                    r.duplicates()
                        .instrument(tracing::info_span!("reap_duplicate_blocked")),
                ),
            ];
            *self.running.lock().unwrap_or_else(PoisonError::into_inner) = Some((cancel, tasks));
            Ok(())
        })
    }

    fn revoke(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.stop())
    }
}

#[derive(Clone)]
struct Reaper {
    node: Arc<RaftNode>,
    pipeline: EvalPipeline,
    clock: SharedClock,
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
        let mut rng = StdRng::from_entropy();
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
