//! Scheduling one evaluation: the pure, synchronous scheduler runs on a plain thread (never
//! on the async runtime, so tokio's paused test clock keeps working while it plans), and its
//! [`Planner`] calls are bridged over channels to the worker's task, which makes them through
//! the [`WorkerBackend`](super::WorkerBackend), retries transient errors with backoff and,
//! after a partial commit, waits for the plan's `RefreshIndex` and hands the scheduler a
//! fresh snapshot.

use futures::future::BoxFuture;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use teamster_storage::model::{Evaluation, Plan, PlanResult};
use teamster_storage::state::Snapshot;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::debug;

use super::runner::Runner;
use super::{is_transient, is_version_mismatch, no_answer, Backoff, WorkerError, WorkloadStatus};
use crate::rpc::ServiceError;
use crate::scheduler::{Planner, SchedulerEnv, SchedulerError};

impl Runner {
    /// Run the placement scheduler on its own thread and serve its planner calls here.
    pub(super) async fn run_scheduler(
        &mut self,
        eval: &Evaluation,
        token: &str,
        snapshot: Snapshot,
    ) -> Result<(), WorkerError> {
        let (call_tx, mut calls) = mpsc::channel::<PlannerCall>(1);
        let (done_tx, mut done) = oneshot::channel();
        let now = self.ctx.clock.now_unix_nanos();
        let seed: u64 = self.rng.gen();
        let settings = self.ctx.settings.clone();
        let factory = self.ctx.schedulers.clone();
        let cache = self.ctx.ready_nodes.clone();
        let thread_eval = eval.clone();
        let mut planning = Planning {
            token: token.to_string(),
            snapshot_index: snapshot.latest_index(),
            snapshot: snapshot.clone(),
            backoff: Backoff::new(
                self.ctx.config.plan_backoff_base,
                self.ctx.config.plan_backoff_limit,
            ),
        };
        std::thread::Builder::new()
            .name("scheduler".into())
            .spawn(move || {
                let mut planner = BridgePlanner { calls: call_tx };
                let mut rng = StdRng::seed_from_u64(seed);
                let env = SchedulerEnv {
                    now,
                    rng: &mut rng,
                    settings,
                    ready_nodes: Some(&cache),
                };
                let r = crate::scheduler::catch_panic(|| {
                    factory.process(&thread_eval, snapshot, &mut planner, env)
                });
                let _ = done_tx.send(r);
            })
            .map_err(|e| WorkerError::Thread(e.to_string()))?;
        loop {
            tokio::select! {
                Some(call) = calls.recv() => self.serve(call, &mut planning).await,
                r = &mut done => return match r {
                    Ok(r) => Ok(r?),
                    Err(_) => Err(WorkerError::Thread("the scheduler panicked".into())),
                },
            }
        }
    }

    async fn serve(&mut self, call: PlannerCall, p: &mut Planning) {
        let now = self.ctx.clock.now_unix_nanos();
        match call {
            PlannerCall::SubmitPlan(mut plan, reply) => {
                plan.eval_token = p.token.clone();
                plan.snapshot_index = p.snapshot_index;
                let started = Instant::now();
                self.set_workload(WorkloadStatus::Submitting);
                let backend = self.ctx.backend.clone();
                let r = self
                    .retry("submit plan", &mut p.backoff, || {
                        backend.submit_plan((*plan).clone())
                    })
                    .await;
                metrics::histogram!("teamster_worker_submit_plan_seconds")
                    .record(started.elapsed().as_secs_f64());
                let answer = match r {
                    Ok(result) if result.refresh_index != 0 => {
                        self.set_workload(WorkloadStatus::WaitingForRaft);
                        match self
                            .snapshot_min_index(result.refresh_index, self.ctx.raft_sync_limit)
                            .await
                        {
                            Ok(fresh) => {
                                p.snapshot_index = fresh.latest_index();
                                p.snapshot = fresh.clone();
                                Ok((result, Some(fresh)))
                            }
                            Err(e) => Err(SchedulerError::Planner {
                                operation: "submit plan",
                                reason: format!("waiting for the refresh index: {e}"),
                            }),
                        }
                    }
                    Ok(result) => Ok((result, None)),
                    Err(e) => Err(e),
                };
                self.set_workload(WorkloadStatus::Scheduling);
                let _ = reply.send(answer);
            }
            PlannerCall::UpdateEval(mut eval, reply) => {
                eval.snapshot_index = p.snapshot_index;
                eval.modify_time = now;
                let r = self.update_eval(eval, p).await;
                let _ = reply.send(r);
            }
            PlannerCall::CreateEval(mut eval, reply) => {
                eval.snapshot_index = p.snapshot_index;
                if eval.create_time == 0 {
                    eval.create_time = now;
                }
                eval.modify_time = now;
                let backend = self.ctx.backend.clone();
                let token = p.token.clone();
                let r = self
                    .retry("create eval", &mut p.backoff, || {
                        backend.create_eval(eval.clone(), token.clone())
                    })
                    .await
                    .map(|_| ());
                let _ = reply.send(r);
            }
            PlannerCall::ReblockEval(mut eval, reply) => {
                // Like Nomad: if the job's queued counts moved since the eval was written,
                // record them first so the blocked eval's numbers are current.
                let stale_counts = p
                    .snapshot
                    .job_summary(eval.namespace.as_str(), eval.job_id.as_str())
                    .is_some_and(|s| {
                        s.summary
                            .iter()
                            .any(|(tg, g)| eval.queued_allocations.get(tg) != Some(&g.queued))
                    });
                let mut r = Ok(());
                if stale_counts {
                    let mut update = eval.clone();
                    update.snapshot_index = p.snapshot_index;
                    update.modify_time = now;
                    r = self.update_eval(update, p).await;
                }
                if r.is_ok() {
                    eval.snapshot_index = p.snapshot_index;
                    eval.modify_time = now;
                    let backend = self.ctx.backend.clone();
                    let token = p.token.clone();
                    r = self
                        .retry("reblock eval", &mut p.backoff, || {
                            backend.reblock_eval(eval.clone(), token.clone())
                        })
                        .await
                        .map(|_| ());
                }
                let _ = reply.send(r);
            }
        }
    }

    async fn update_eval(&self, eval: Evaluation, p: &mut Planning) -> Result<(), SchedulerError> {
        let backend = self.ctx.backend.clone();
        let token = p.token.clone();
        self.retry("update eval", &mut p.backoff, || {
            backend.update_eval(eval.clone(), token.clone())
        })
        .await
        .map(|_| ())
    }

    /// One planner call, retried on transient errors with backoff, at most
    /// `planner_attempts` times, given up at shutdown.
    pub(super) async fn retry<'a, T, F>(
        &self,
        operation: &'static str,
        backoff: &mut Backoff,
        mut call: F,
    ) -> Result<T, SchedulerError>
    where
        F: FnMut() -> BoxFuture<'a, Result<T, ServiceError>>,
    {
        let fail = |reason: String| SchedulerError::Planner { operation, reason };
        let mut rng = self.ctx.rng.fork();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let r = tokio::select! {
                _ = self.ctx.shutdown.cancelled() => {
                    return Err(fail("shutdown while planning".into()))
                }
                r = tokio::time::timeout(self.ctx.config.rpc_timeout, call()) => {
                    r.unwrap_or_else(|_| Err(no_answer(self.ctx.config.rpc_timeout)))
                }
            };
            match r {
                Ok(v) => {
                    backoff.reset();
                    return Ok(v);
                }
                Err(e) if is_transient(&e) && attempt < self.ctx.config.planner_attempts => {
                    let delay = if is_version_mismatch(&e) {
                        self.ctx.config.version_mismatch_backoff
                    } else {
                        backoff.next(&mut rng)
                    };
                    debug!(error = %e, operation, ?delay, "planner call failed; retrying");
                    self.sleep(delay).await;
                    if self.ctx.shutdown.is_cancelled() {
                        return Err(fail("shutdown while planning".into()));
                    }
                }
                Err(e) => return Err(fail(e.to_string())),
            }
        }
    }
}

pub(super) struct Planning {
    token: String,
    snapshot_index: u64,
    snapshot: Snapshot,
    backoff: Backoff,
}

type Reply<T> = oneshot::Sender<Result<T, SchedulerError>>;

enum PlannerCall {
    SubmitPlan(Box<Plan>, Reply<(PlanResult, Option<Snapshot>)>),
    UpdateEval(Evaluation, Reply<()>),
    CreateEval(Evaluation, Reply<()>),
    ReblockEval(Evaluation, Reply<()>),
}

/// The synchronous [`Planner`] handed to a scheduler on its thread: each call is sent to the
/// worker's async task and answered over a oneshot.
struct BridgePlanner {
    calls: mpsc::Sender<PlannerCall>,
}

impl BridgePlanner {
    fn call<T>(
        &self,
        operation: &'static str,
        make: impl FnOnce(Reply<T>) -> PlannerCall,
    ) -> Result<T, SchedulerError> {
        let gone = || SchedulerError::Planner {
            operation,
            reason: "the worker is gone".into(),
        };
        let (tx, rx) = oneshot::channel();
        self.calls.blocking_send(make(tx)).map_err(|_| gone())?;
        rx.blocking_recv().map_err(|_| gone())?
    }
}

impl Planner for BridgePlanner {
    fn submit_plan(
        &mut self,
        plan: Plan,
    ) -> Result<(PlanResult, Option<Snapshot>), SchedulerError> {
        self.call("submit plan", |r| {
            PlannerCall::SubmitPlan(Box::new(plan), r)
        })
    }

    fn update_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        self.call("update eval", |r| PlannerCall::UpdateEval(eval, r))
    }

    fn create_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        self.call("create eval", |r| PlannerCall::CreateEval(eval, r))
    }

    fn reblock_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        self.call("reblock eval", |r| PlannerCall::ReblockEval(eval, r))
    }
}
