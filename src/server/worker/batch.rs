//! Evaluations scheduled together: a worker that dequeued several `service` or `batch`
//! evaluations at once (`Eval.DequeueBatch`) schedules them in one round instead of one
//! round each.
//!
//! ```text
//!  wait for the highest WaitIndex ─▶ one snapshot
//!  one scheduler thread: speculate(eval 1..n) on a private view, each eval planning on the
//!      view with the plans of those before it applied (Snapshot::with_applied), through a
//!      planner that records instead of calling the leader
//!  then, one call for the whole batch: Plan.SubmitBatch (each plan carrying its eval's
//!      final state) ─▶ Eval.AckBatch
//!      (the plans share the plan applier's pipeline and raft entries; the applier writes
//!      an eval's state in its plan's entry when it accepts every node; an eval without a
//!      plan is written by Eval.Update)
//!  the rest, one at a time, on the ordinary path:
//!      evals that created or reblocked evaluations, planned twice or failed (speculation
//!      keeps nothing of them), and evals whose real plan came back partial (they wait for
//!      the commit's index first, so they see what was placed)
//!  evals whose plan's submission failed are nacked: the plan may still commit, and the
//!      broker delivers the eval again only once it is back from the plan queue
//! ```
//!
//! Speculation is sound because the applier re-checks every plan against the latest state
//! and the plans still committing: a speculative plan that no longer fits is refused node by
//! node like any other, and its evaluation is scheduled again on the ordinary path. Within
//! a batch the jobs are distinct (the broker hands out one evaluation per job at a time).

use futures::future::join_all;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use teamster_storage::fsm::Command;
use teamster_storage::model::{EvalId, Evaluation, JobType, Plan, PlanResult};
use teamster_storage::state::{Snapshot, StateError};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{debug, warn, Instrument};

use super::runner::Runner;
use super::{Backoff, SchedulerFactory, WorkerError, WorkloadStatus};
use crate::rpc::{DequeuedEval, ServiceError};
use crate::scheduler::verify::PlanEvaluation;
use crate::scheduler::{Planner, ReadyNodesCache, SchedulerEnv, SchedulerError, SchedulerSettings};

/// What scheduling one evaluation on the shared view produced.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Speculation {
    /// One plan at most and a final status update: submit the plan, then write the update.
    Ready {
        /// The plan, if the evaluation changes anything.
        plan: Option<Box<Plan>>,
        /// The evaluation with its outcome (status, queued allocations).
        update: Box<Evaluation>,
    },
    /// Scheduled again on its own: it created or reblocked evaluations, submitted more than
    /// one plan, did not finish its evaluation, or failed.
    Alone,
}

/// Whether an evaluation of this type may be scheduled in a batch.
pub(super) fn batchable(eval_type: JobType) -> bool {
    matches!(eval_type, JobType::Service | JobType::Batch)
}

/// The planner of speculation: records the calls and answers every plan as fully committed.
#[derive(Default)]
struct Recorder {
    plan: Option<Plan>,
    update: Option<Evaluation>,
    /// A call the batch cannot replay (create, reblock, a second plan).
    unbatchable: bool,
}

impl Planner for Recorder {
    fn submit_plan(
        &mut self,
        plan: Plan,
    ) -> Result<(PlanResult, Option<Snapshot>), SchedulerError> {
        let result = PlanResult::all_committed(&plan);
        if self.plan.is_some() {
            self.unbatchable = true;
        }
        self.plan = Some(plan);
        Ok((result, None))
    }

    fn update_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        if self.update.is_some() {
            self.unbatchable = true;
        }
        self.update = Some(eval);
        Ok(())
    }

    fn create_eval(&mut self, _eval: Evaluation) -> Result<(), SchedulerError> {
        self.unbatchable = true;
        Ok(())
    }

    fn reblock_eval(&mut self, _eval: Evaluation) -> Result<(), SchedulerError> {
        self.unbatchable = true;
        Ok(())
    }
}

/// Schedules `evals` in order on a private view of `snapshot`: each on the view with the
/// plans of the `Ready` ones before it applied, so they do not count the same free capacity
/// twice. Pure and synchronous (the scheduler thread runs it); nothing is written.
pub(super) fn speculate(
    factory: &dyn SchedulerFactory,
    evals: &[Evaluation],
    snapshot: Snapshot,
    settings: &SchedulerSettings,
    now: i64,
    rng: &mut dyn rand::RngCore,
    cache: &ReadyNodesCache,
) -> Vec<Speculation> {
    let mut view = snapshot;
    // The plans leave the nodes table alone, so every view shares the snapshot's ready nodes.
    evals
        .iter()
        .map(|eval| {
            if !batchable(eval.eval_type) {
                return Speculation::Alone;
            }
            let mut recorder = Recorder::default();
            let env = SchedulerEnv {
                now,
                rng: &mut *rng,
                settings: settings.clone(),
                ready_nodes: Some(cache),
            };
            // A panic here sends the evaluation down the ordinary path, which fails it.
            let outcome = crate::scheduler::catch_panic(|| {
                factory.process(eval, view.clone(), &mut recorder, env)
            });
            let Recorder {
                plan,
                update,
                unbatchable,
            } = recorder;
            let update = match (outcome, update) {
                (Ok(()), Some(update)) if !unbatchable && update.status.is_terminal() => update,
                (Err(e), _) => {
                    debug!(eval_id = %eval.id, error = %e, "speculation failed; scheduling alone");
                    return Speculation::Alone;
                }
                _ => return Speculation::Alone,
            };
            if let Some(plan) = &plan {
                let accepted = PlanEvaluation {
                    eval_id: plan.eval_id.clone(),
                    node_update: plan.node_update.clone(),
                    node_allocation: plan.node_allocation.clone(),
                    node_preemptions: plan.node_preemptions.clone(),
                    preemption_evals: plan.preemption_evals.clone(),
                    ..PlanEvaluation::default()
                };
                view = view
                    .with_applied(Command::ApplyPlanResults(accepted.apply_command(now)))
                    .0;
            }
            Speculation::Ready {
                plan: plan.map(Box::new),
                update: Box::new(update),
            }
        })
        .collect()
}

/// How committing one speculated evaluation ended.
#[derive(Debug, Clone, Copy)]
enum Committed {
    /// Planned, updated and acked; the index its plan committed at (0 without a plan).
    Done(u64),
    /// To be scheduled again on its own, on a state at or after this index.
    Again(u64),
    /// Its plan's submission failed without an answer to trust: the plan may still commit.
    /// Nacked, not scheduled again here: the broker delivers it again once that plan is back
    /// from the plan queue, on a state that shows what it committed.
    Unknown,
}

impl Runner {
    /// Schedules a batch of deliveries in one round (see the module docs).
    pub(super) async fn process_batch(&mut self, batch: Vec<DequeuedEval>) {
        metrics::histogram!("teamster_worker_batch_size").record(batch.len() as f64);
        self.set_workload(WorkloadStatus::WaitingForRaft);
        let wait_index = batch.iter().map(|d| d.wait_index).max().unwrap_or(1);
        let waited = Instant::now();
        let snapshot = match self
            .snapshot_min_index(wait_index, self.ctx.raft_sync_limit)
            .await
        {
            Ok(s) => s,
            Err(WorkerError::State(StateError::MinIndexTimeout { .. })) => {
                // The ordinary path knows how to wait and nack; each eval takes it.
                return self
                    .alone(batch.into_iter().map(|d| (d, 0)).collect())
                    .await;
            }
            Err(e) => {
                warn!(error = %e, evals = batch.len(), "nacking a batch of evaluations");
                for d in batch {
                    self.nack(d.eval.id, d.token).await;
                }
                return;
            }
        };
        metrics::histogram!("teamster_worker_wait_for_index_seconds")
            .record(waited.elapsed().as_secs_f64());
        self.set_workload(WorkloadStatus::Scheduling);
        let started = Instant::now();
        let base_index = snapshot.latest_index();
        let evals: Vec<Evaluation> = batch.iter().map(|d| d.eval.clone()).collect();
        let speculations = match self.speculate_on_thread(evals, snapshot).await {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "speculation failed; scheduling the batch one at a time");
                vec![Speculation::Alone; batch.len()]
            }
        };
        metrics::histogram!("teamster_worker_schedule_seconds", "type" => "batch_round")
            .record(started.elapsed().as_secs_f64());

        self.set_workload(WorkloadStatus::Submitting);
        let mut alone = Vec::new();
        let mut ready = Vec::new();
        for (d, s) in batch.into_iter().zip(speculations) {
            match s {
                Speculation::Ready { plan, update } => ready.push((d, plan, update)),
                Speculation::Alone => alone.push((d, 0)),
            }
        }
        let speculated = ready.len();
        let mut again = 0;
        // Evaluations scheduled alone wait for the batch's commits, so they see them.
        let mut committed_index = 0;
        for (d, outcome) in self.commit_all(ready, base_index).await {
            match outcome {
                Committed::Done(index) => {
                    committed_index = committed_index.max(index);
                    metrics::counter!("teamster_worker_batch_evals_total", "outcome" => "committed")
                        .increment(1);
                }
                Committed::Again(index) => {
                    again += 1;
                    metrics::counter!("teamster_worker_batch_evals_total", "outcome" => "again")
                        .increment(1);
                    alone.push((d, index));
                }
                Committed::Unknown => {
                    metrics::counter!("teamster_worker_batch_evals_total", "outcome" => "nack")
                        .increment(1);
                    self.nack(d.eval.id, d.token).await;
                }
            }
        }
        metrics::counter!("teamster_worker_batch_evals_total", "outcome" => "alone")
            .increment((alone.len() - again) as u64);
        debug!(
            speculated,
            alone = alone.len(),
            base_index,
            "batch of evaluations scheduled"
        );
        let alone = alone
            .into_iter()
            .map(|(d, index)| (d, index.max(committed_index)))
            .collect();
        self.alone(alone).await;
    }

    /// The ordinary path, one evaluation at a time, each waiting for at least `index`.
    async fn alone(&mut self, evals: Vec<(DequeuedEval, u64)>) {
        for (mut d, index) in evals {
            d.wait_index = d.wait_index.max(index);
            let span = tracing::info_span!(
                "eval",
                eval_id = %d.eval.id,
                job_id = %d.eval.job_id,
                eval_type = d.eval.eval_type.as_str(),
            );
            self.process(d).instrument(span).await;
        }
    }

    /// Runs [`speculate`] on a scheduler thread, off the async runtime.
    async fn speculate_on_thread(
        &mut self,
        evals: Vec<Evaluation>,
        snapshot: Snapshot,
    ) -> Result<Vec<Speculation>, WorkerError> {
        let (done_tx, done) = oneshot::channel();
        let now = self.ctx.clock.now_unix_nanos();
        let seed: u64 = self.rng.gen();
        let settings = self.ctx.settings.clone();
        let factory = self.ctx.schedulers.clone();
        let cache = self.ctx.ready_nodes.clone();
        std::thread::Builder::new()
            .name("scheduler".into())
            .spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed);
                let r = speculate(
                    &*factory, &evals, snapshot, &settings, now, &mut rng, &cache,
                );
                let _ = done_tx.send(r);
            })
            .map_err(|e| WorkerError::Thread(e.to_string()))?;
        done.await
            .map_err(|_| WorkerError::Thread("the scheduler panicked".into()))
    }

    /// Commits the speculated evaluations: every plan in one `Plan.SubmitBatch`, each
    /// carrying its evaluation's final state (written with the plan when every node is
    /// accepted); an evaluation without a plan is written by `Eval.Update`; then one
    /// `Eval.AckBatch` for those done. A partial or failed plan leaves its evaluation to be
    /// scheduled again.
    async fn commit_all(
        &self,
        ready: Vec<(DequeuedEval, Option<Box<Plan>>, Box<Evaluation>)>,
        base_index: u64,
    ) -> Vec<(DequeuedEval, Committed)> {
        let now = self.ctx.clock.now_unix_nanos();
        let mut outcomes = vec![Committed::Again(0); ready.len()];
        let mut plans = Vec::new();
        let mut planned = Vec::new();
        let mut updates = Vec::new();
        for (i, (d, plan, update)) in ready.iter().enumerate() {
            let mut update = (**update).clone();
            update.snapshot_index = base_index;
            update.modify_time = now;
            match plan {
                Some(plan) => {
                    let mut plan = (**plan).clone();
                    plan.eval_token = d.token.clone();
                    plan.snapshot_index = base_index;
                    plan.eval_update = Some(update);
                    plans.push(plan);
                    planned.push(i);
                }
                None => updates.push((i, update)),
            }
        }
        let backend = self.ctx.backend.clone();
        if !plans.is_empty() {
            let mut backoff = Backoff::new(
                self.ctx.config.plan_backoff_base,
                self.ctx.config.plan_backoff_limit,
            );
            let started = Instant::now();
            let r = self
                .retry("submit plans", &mut backoff, || {
                    backend.submit_plans(plans.clone())
                })
                .await;
            metrics::histogram!("teamster_worker_submit_plan_seconds")
                .record(started.elapsed().as_secs_f64());
            match r {
                Ok(results) => {
                    for (&i, result) in planned.iter().zip(results) {
                        let eval_id = &ready[i].0.eval.id;
                        outcomes[i] = match result {
                            Ok(r) if r.refresh_index == 0 => Committed::Done(r.alloc_index),
                            Ok(r) => {
                                debug!(
                                    %eval_id,
                                    rejected = r.rejected_nodes.len(),
                                    refresh_index = r.refresh_index,
                                    "speculative plan partially committed; scheduling the evaluation again"
                                );
                                Committed::Again(r.refresh_index.max(r.alloc_index))
                            }
                            // Refused before the applier took it: nothing committed.
                            Err(
                                e @ (ServiceError::Rejected { .. }
                                | ServiceError::Invalid { .. }
                                | ServiceError::NotFound { .. }),
                            ) => {
                                debug!(%eval_id, error = %e, "speculative plan refused; scheduling the evaluation again");
                                Committed::Again(0)
                            }
                            Err(e) => {
                                debug!(%eval_id, error = %e, "speculative plan failed; nacking the evaluation");
                                Committed::Unknown
                            }
                        };
                    }
                }
                Err(e) => {
                    debug!(error = %e, "submitting a batch of plans failed; nacking their evaluations");
                    for &i in &planned {
                        outcomes[i] = Committed::Unknown;
                    }
                }
            }
        }
        let written = join_all(updates.into_iter().map(|(i, update)| {
            let backend = backend.clone();
            let token = ready[i].0.token.clone();
            async move {
                let mut backoff = Backoff::new(
                    self.ctx.config.plan_backoff_base,
                    self.ctx.config.plan_backoff_limit,
                );
                let r = self
                    .retry("update eval", &mut backoff, || {
                        backend.update_eval(update.clone(), token.clone())
                    })
                    .await;
                (i, r)
            }
        }))
        .await;
        for (i, r) in written {
            match r {
                Ok(_) => outcomes[i] = Committed::Done(0),
                Err(e) => {
                    debug!(error = %e, "updating a batched evaluation failed; scheduling it again")
                }
            }
        }
        let acks: Vec<(EvalId, String)> = ready
            .iter()
            .zip(&outcomes)
            .filter(|(_, o)| matches!(o, Committed::Done(_)))
            .map(|((d, _, _), _)| (d.eval.id.clone(), d.token.clone()))
            .collect();
        if !acks.is_empty() {
            let n = acks.len() as u64;
            metrics::counter!("teamster_worker_evals_scheduled_total").increment(n);
            let started = Instant::now();
            let r =
                tokio::time::timeout(self.ctx.config.rpc_timeout, backend.ack_batch(acks)).await;
            metrics::histogram!("teamster_worker_ack_seconds")
                .record(started.elapsed().as_secs_f64());
            metrics::counter!("teamster_worker_evals_total", "outcome" => "ack").increment(n);
            match r {
                Ok(Ok(answers)) => {
                    for e in answers.into_iter().filter_map(Result::err) {
                        warn!(error = %e, "acking a batched evaluation failed");
                    }
                }
                Ok(Err(e)) => warn!(error = %e, "acking a batch of evaluations failed"),
                Err(_) => warn!("acking a batch of evaluations timed out"),
            }
        }
        ready
            .into_iter()
            .zip(outcomes)
            .map(|((d, _, _), o)| (d, o))
            .collect()
    }
}
