//! The plan applier: the one loop, on the leader, that commits placements. It evaluates
//! plan N+1 while plan N is committing, keeps accepted plans in a [`PlanOverlay`] until the
//! state store shows their commit, and answers each submitter. [`PlanQueueDuty`] enables the
//! queue and runs the applier on a [`LeaderService`] while this server leads.

use std::sync::Arc;

use futures::future::BoxFuture;
use teamster_storage::fsm::{Command, CommandResponse};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use super::queue::{PlanQueue, PlanQueueError};
use crate::scheduler::verify::{evaluate_plan, OverlayToken, PlanOverlay};
use crate::server::config::EvalBrokerConfig;
use crate::server::leader::LeaderDuty;
use crate::server::leader_service::LeaderService;
use crate::server::raft::RaftNode;
use crate::util::SharedClock;

/// The outcome of one commit, sent back to the applier loop.
struct Committed {
    token: OverlayToken,
    index: Option<u64>,
    /// The plan's weight in the pipeline ([`plan_weight`]).
    weight: usize,
}

/// Changes (placements, stops, evictions) one unit of `plan_apply_pipeline` stands for.
pub const PIPELINE_UNIT: usize = 1_000;

/// Most plans committing at once however small they are (the write batcher's largest
/// raft entry).
pub const MAX_PLANS_IN_FLIGHT: usize = 1_024;

/// What a plan weighs against the pipeline: the changes it commits, at least one.
fn plan_weight(evaluation: &crate::scheduler::verify::PlanEvaluation) -> usize {
    evaluation.change_count().max(1)
}

/// Commits in flight, bounded in changes (`plan_apply_pipeline` × [`PIPELINE_UNIT`]: eight
/// C1M-sized plans of 1 000 placements, or hundreds of one-placement plans that the write
/// batcher folds into one raft entry) and in plans ([`MAX_PLANS_IN_FLIGHT`]). A plan larger
/// than the whole budget still goes, alone.
#[derive(Debug, Default)]
struct Pipeline {
    plans: usize,
    weight: usize,
}

impl Pipeline {
    fn has_room(&self, budget: usize) -> bool {
        self.plans == 0 || (self.plans < MAX_PLANS_IN_FLIGHT && self.weight < budget)
    }

    fn start(&mut self, weight: usize) {
        self.plans += 1;
        self.weight += weight;
    }

    fn finish(&mut self, weight: usize) {
        self.plans -= 1;
        self.weight -= weight;
    }
}

/// How long a plan refused outright waits for the commits in flight before it is answered.
const IN_FLIGHT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The plan applier loop (one per leadership term).
pub struct PlanApplier {
    node: Arc<RaftNode>,
    queue: PlanQueue,
    clock: SharedClock,
    config: EvalBrokerConfig,
}

impl PlanApplier {
    /// An applier for `queue` committing through `node`.
    pub fn new(
        node: Arc<RaftNode>,
        queue: PlanQueue,
        clock: SharedClock,
        config: EvalBrokerConfig,
    ) -> PlanApplier {
        PlanApplier {
            node,
            queue,
            clock,
            config,
        }
    }

    /// Applies plans until the queue is disabled or `cancel` fires.
    pub async fn run(self, cancel: CancellationToken) {
        let mut overlay = PlanOverlay::new();
        // Accepted plans whose commit is known, with the index they committed at.
        let mut committed: Vec<(OverlayToken, u64)> = Vec::new();
        let mut in_flight = Pipeline::default();
        let budget = self.config.plan_apply_pipeline * PIPELINE_UNIT;
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Committed>();
        let on_done = |c: Committed,
                       overlay: &mut PlanOverlay,
                       committed: &mut Vec<(OverlayToken, u64)>| match c.index
        {
            Some(index) => committed.push((c.token, index)),
            None => {
                overlay.release(c.token);
            }
        };
        loop {
            let pending = tokio::select! {
                _ = cancel.cancelled() => break,
                p = self.queue.dequeue() => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
                Some(c) = done_rx.recv() => {
                    in_flight.finish(c.weight);
                    on_done(c, &mut overlay, &mut committed);
                    continue;
                }
            };
            while let Ok(c) = done_rx.try_recv() {
                in_flight.finish(c.weight);
                on_done(c, &mut overlay, &mut committed);
            }
            // Back-pressure: the pipeline's budget of commits outstanding.
            while !in_flight.has_room(budget) {
                match done_rx.recv().await {
                    Some(c) => {
                        in_flight.finish(c.weight);
                        on_done(c, &mut overlay, &mut committed);
                    }
                    None => break,
                }
            }
            metrics::histogram!("teamster_plan_wait_seconds")
                .record(pending.enqueued.elapsed().as_secs_f64());
            let state = self.node.state();
            let snapshot = if state.latest_index() >= pending.plan.snapshot_index {
                state.snapshot()
            } else {
                match state
                    .snapshot_min_index(pending.plan.snapshot_index, self.config.plan_snapshot_wait)
                    .await
                {
                    Ok(s) => s,
                    Err(_) => {
                        let index = pending.plan.snapshot_index;
                        pending.respond(Err(PlanQueueError::SnapshotTimeout {
                            index,
                            timeout: self.config.plan_snapshot_wait,
                        }));
                        continue;
                    }
                }
            };
            // Plans the snapshot already shows leave the overlay.
            let seen = snapshot.latest_index();
            committed.retain(|(token, index)| {
                if *index <= seen {
                    overlay.release(*token);
                    false
                } else {
                    true
                }
            });
            let started = Instant::now();
            let evaluation = evaluate_plan(&snapshot, &overlay, &pending.plan);
            metrics::histogram!("teamster_plan_evaluate_seconds")
                .record(started.elapsed().as_secs_f64());
            for r in &evaluation.rejected {
                metrics::counter!("teamster_plan_node_rejected_total").increment(1);
                info!(node_id = %r.node_id, eval_id = %pending.plan.eval_id, reason = %r.reason, "plan for node rejected");
            }
            let mut result = evaluation.plan_result();
            // The evaluation's final state rides with a plan accepted in full.
            let eval_update = pending
                .plan
                .eval_update
                .clone()
                .filter(|_| !evaluation.is_partial());
            if evaluation.is_no_op() && eval_update.is_none() {
                if evaluation.is_partial() {
                    // The refusal may come from accepted plans still committing (the
                    // overlay), which the snapshot does not show: the worker must plan again
                    // on a state that does, or it picks the same full node until it runs out
                    // of attempts. So the commits in flight are awaited and their index
                    // named (a conflict is rare; the pipeline waits only then).
                    // Bounded: a commit that hangs must not stall every later plan.
                    let until = tokio::time::Instant::now() + IN_FLIGHT_WAIT;
                    while in_flight.plans > 0 {
                        match tokio::time::timeout_at(until, done_rx.recv()).await {
                            Ok(Some(c)) => {
                                in_flight.finish(c.weight);
                                on_done(c, &mut overlay, &mut committed);
                            }
                            Ok(None) | Err(_) => break,
                        }
                    }
                    let committing = committed.iter().map(|(_, i)| *i).max().unwrap_or(0);
                    result.refresh_index = evaluation
                        .refresh_index_floor
                        .max(seen)
                        .max(committing)
                        .max(1);
                }
                metrics::counter!("teamster_plan_applied_total", "outcome" => "no_op").increment(1);
                pending.respond(Ok(result));
                continue;
            }
            let token = overlay.record(&evaluation);
            let mut apply = evaluation.apply_command(self.clock.now_unix_nanos());
            apply.evals.extend(eval_update);
            let command = Command::ApplyPlanResults(apply);
            let allocs = evaluation.accepted_allocs() as u64;
            let partial = evaluation.is_partial();
            let floor = evaluation.refresh_index_floor;
            let weight = plan_weight(&evaluation);
            let node = self.node.clone();
            let done = done_tx.clone();
            in_flight.start(weight);
            tokio::spawn(
                async move {
                    let started = Instant::now();
                    let outcome = node.write_local(command).await;
                    metrics::histogram!("teamster_plan_apply_seconds")
                        .record(started.elapsed().as_secs_f64());
                    let (answer, index) = match outcome {
                        Ok(applied) => match applied.response {
                            CommandResponse::Rejected(e) => {
                                warn!(error = %e, "plan results refused by the state machine");
                                (Err(PlanQueueError::Commit(e.to_string())), None)
                            }
                            _ => {
                                result.alloc_index = applied.index;
                                if partial {
                                    result.refresh_index = floor.max(applied.index);
                                }
                                metrics::counter!("teamster_plan_allocs_committed_total")
                                    .increment(allocs);
                                (Ok(result), Some(applied.index))
                            }
                        },
                        Err(e) => {
                            warn!(error = %e, "committing plan results failed");
                            (Err(PlanQueueError::Commit(e.to_string())), None)
                        }
                    };
                    let outcome = if answer.is_ok() { "applied" } else { "failed" };
                    metrics::counter!("teamster_plan_applied_total", "outcome" => outcome)
                        .increment(1);
                    pending.respond(answer);
                    let _ = done.send(Committed {
                        token,
                        index,
                        weight,
                    });
                }
                .in_current_span(),
            );
        }
        debug!("plan applier stopped");
    }
}

/// The leader duty that enables the plan queue and runs the applier.
pub struct PlanQueueDuty {
    node: Arc<RaftNode>,
    queue: PlanQueue,
    clock: SharedClock,
    config: EvalBrokerConfig,
    /// The applier task, running while this server leads.
    applier: LeaderService,
}

impl PlanQueueDuty {
    /// A duty for `queue` committing through `node`.
    pub fn new(
        node: Arc<RaftNode>,
        queue: PlanQueue,
        clock: SharedClock,
        config: EvalBrokerConfig,
    ) -> PlanQueueDuty {
        PlanQueueDuty {
            node,
            queue,
            clock,
            config,
            applier: LeaderService::new(),
        }
    }
}

impl LeaderDuty for PlanQueueDuty {
    fn name(&self) -> &'static str {
        "plan queue"
    }

    fn establish(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            self.applier.stop().await;
            self.queue.set_enabled(true);
            let applier = PlanApplier::new(
                self.node.clone(),
                self.queue.clone(),
                self.clock.clone(),
                self.config.clone(),
            );
            self.applier.start(|set| {
                set.spawn(|stop| {
                    applier
                        .run(stop)
                        .instrument(tracing::info_span!("plan_applier"))
                })
            });
            Ok(())
        })
    }

    fn revoke(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.queue.set_enabled(false);
            self.applier.stop().await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pipeline_is_bounded_in_changes_and_in_plans() {
        let budget = 8 * PIPELINE_UNIT;
        // C1M-sized plans: eight at once, as `plan_apply_pipeline = 8` always meant.
        let mut p = Pipeline::default();
        for _ in 0..8 {
            assert!(p.has_room(budget));
            p.start(1_000);
        }
        assert!(!p.has_room(budget));
        p.finish(1_000);
        assert!(p.has_room(budget));
        // One-placement plans: up to MAX_PLANS_IN_FLIGHT, far more than eight.
        let mut p = Pipeline::default();
        for _ in 0..MAX_PLANS_IN_FLIGHT {
            assert!(p.has_room(budget));
            p.start(1);
        }
        assert!(!p.has_room(budget), "the plan count bounds small plans");
        // A plan over the whole budget goes when nothing else is in flight, and alone.
        let mut p = Pipeline::default();
        assert!(p.has_room(budget));
        p.start(50_000);
        assert!(!p.has_room(budget));
        p.finish(50_000);
        assert_eq!((p.plans, p.weight), (0, 0));
    }
}
