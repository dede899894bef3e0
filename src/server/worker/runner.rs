//! One scheduler worker: its task's loop (pause point → dequeue → wait for the local state →
//! schedule → ack) and the handle the pool drives it with (pause, resume, stop, status).
//! The scheduling itself, with the planner calls bridged to this task, is in
//! [`super::bridge`].

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use teamster_storage::model::{EvalId, EvalStatus, Evaluation, JobType, Timestamp};
use teamster_storage::state::{Snapshot, StateError};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn, Instrument};

use super::{
    gc, is_transient, is_version_mismatch, no_answer, Backoff, WorkerContext, WorkerError,
    WorkerInfo, WorkerStatus, WorkloadStatus,
};
use crate::rpc::DequeuedEval;
use crate::scheduler::SchedulerError;

#[derive(Debug, Clone)]
pub(super) struct WorkerState {
    status: WorkerStatus,
    workload: WorkloadStatus,
    /// The flag pause and resume act on.
    pause: bool,
    enabled: Vec<String>,
}

pub(super) struct Shared {
    id: String,
    started: i64,
    state: watch::Sender<WorkerState>,
    /// Graceful stop: exit after the current evaluation.
    stop: CancellationToken,
}

/// One scheduler worker: a task with a status, paused, resumed and stopped through a flag.
pub struct Worker {
    shared: Arc<Shared>,
    task: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.shared.state.borrow();
        f.debug_struct("Worker")
            .field("id", &self.shared.id)
            .field("status", &s.status)
            .field("workload", &s.workload)
            .finish()
    }
}

impl Worker {
    /// Create a worker serving `enabled` and start its task (status `Starting`, then
    /// `Started` once the loop runs). `seed` drives its jitter and its schedulers' RNG.
    pub fn start(ctx: Arc<WorkerContext>, enabled: Vec<String>, seed: u64) -> Worker {
        let mut rng = StdRng::seed_from_u64(seed);
        let id = crate::util::new_uuid(&mut rng);
        let (state, _) = watch::channel(WorkerState {
            status: WorkerStatus::Starting,
            workload: WorkloadStatus::WaitingToDequeue,
            pause: false,
            enabled,
        });
        let shared = Arc::new(Shared {
            id: id.clone(),
            started: ctx.clock.now_unix_nanos(),
            state,
            stop: CancellationToken::new(),
        });
        let span = tracing::info_span!("worker", worker_id = %id);
        let task = tokio::spawn(
            Runner {
                shared: shared.clone(),
                ctx,
                rng,
                started_at: Instant::now(),
            }
            .run()
            .instrument(span),
        );
        Worker {
            shared,
            task: std::sync::Mutex::new(Some(task)),
        }
    }

    /// The worker's UUID.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// Its lifecycle status.
    pub fn status(&self) -> WorkerStatus {
        self.shared.state.borrow().status
    }

    /// What it is doing.
    pub fn workload_status(&self) -> WorkloadStatus {
        self.shared.state.borrow().workload
    }

    /// Whether the pause flag is set.
    pub fn pause_requested(&self) -> bool {
        self.shared.state.borrow().pause
    }

    /// Its row for the API.
    pub fn info(&self) -> WorkerInfo {
        let s = self.shared.state.borrow();
        WorkerInfo {
            id: self.shared.id.clone(),
            enabled_schedulers: s.enabled.clone(),
            started: Timestamp::from_unix_nanos(self.shared.started).to_rfc3339(),
            status: s.status,
            workload_status: s.workload,
        }
    }

    /// Ask the worker to park at its next pause point; an evaluation in progress is finished
    /// first. Idempotent.
    pub fn pause(&self) {
        self.shared.state.send_modify(|s| {
            if matches!(s.status, WorkerStatus::Stopping | WorkerStatus::Stopped) {
                return;
            }
            s.pause = true;
            match s.status {
                WorkerStatus::Starting | WorkerStatus::Started => s.status = WorkerStatus::Pausing,
                // Still parked: it stays parked.
                WorkerStatus::Resuming => s.status = WorkerStatus::Paused,
                _ => {}
            }
        });
    }

    /// Clear the pause flag: a parked worker runs again, a worker still `Pausing` never
    /// parks. Idempotent.
    pub fn resume(&self) {
        self.shared.state.send_modify(|s| {
            s.pause = false;
            match s.status {
                WorkerStatus::Pausing => s.status = WorkerStatus::Started,
                WorkerStatus::Paused => s.status = WorkerStatus::Resuming,
                _ => {}
            }
        });
    }

    /// Ask the worker to exit after its current evaluation (a parked worker exits at once).
    pub fn stop(&self) {
        self.shared.state.send_modify(|s| {
            s.pause = false;
            if s.status != WorkerStatus::Stopped {
                s.status = WorkerStatus::Stopping;
            }
        });
        self.shared.stop.cancel();
    }

    /// Serve a new list of scheduler types from the next dequeue on.
    pub fn set_enabled(&self, enabled: Vec<String>) {
        self.shared.state.send_modify(|s| s.enabled = enabled);
    }

    /// Whether its task has ended.
    pub fn is_finished(&self) -> bool {
        self.task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_none_or(|t| t.is_finished())
    }

    /// Wait for the task to end (after [`Worker::stop`] or the server's shutdown).
    pub async fn join(&self) {
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    /// Wait until the worker's status satisfies `f` (tests and the pool's callers).
    pub async fn wait_status(&self, mut f: impl FnMut(WorkerStatus, WorkloadStatus) -> bool) {
        let mut rx = self.shared.state.subscribe();
        let _ = rx.wait_for(|s| f(s.status, s.workload)).await;
    }
}

/// The worker's task.
pub(super) struct Runner {
    pub(super) shared: Arc<Shared>,
    pub(super) ctx: Arc<WorkerContext>,
    pub(super) rng: StdRng,
    pub(super) started_at: Instant,
}

impl Runner {
    pub(super) fn set_workload(&self, w: WorkloadStatus) {
        self.shared.state.send_if_modified(|s| {
            let changed = s.workload != w;
            s.workload = w;
            changed
        });
    }

    pub(super) fn workload(&self) -> WorkloadStatus {
        self.shared.state.borrow().workload
    }

    pub(super) fn done(&self) -> bool {
        self.shared.stop.is_cancelled() || self.ctx.shutdown.is_cancelled()
    }

    pub(super) async fn run(mut self) {
        self.shared.state.send_modify(|s| {
            if s.status == WorkerStatus::Starting {
                s.status = WorkerStatus::Started;
            }
        });
        debug!("worker started");
        let mut backoff = Backoff::new(
            self.ctx.config.dequeue_backoff_base,
            self.ctx.config.dequeue_backoff_limit,
        );
        while !self.done() {
            if !self.pause_point().await {
                break;
            }
            self.set_workload(WorkloadStatus::WaitingToDequeue);
            let enabled = self.shared.state.borrow().enabled.clone();
            let started = Instant::now();
            let deadline = self.ctx.config.dequeue_timeout + self.ctx.config.rpc_timeout;
            let max = self.ctx.config.max_batch;
            let backend = self.ctx.backend.clone();
            let wait = self.ctx.config.dequeue_timeout;
            let dequeue = async move {
                if max > 1 {
                    backend.dequeue_batch(enabled, wait, max).await
                } else {
                    let one = backend.dequeue(enabled, wait).await?;
                    Ok(one.into_iter().collect())
                }
            };
            let result = tokio::select! {
                biased;
                _ = self.ctx.shutdown.cancelled() => break,
                r = tokio::time::timeout(deadline, dequeue) => {
                    r.unwrap_or_else(|_| Err(no_answer(deadline)))
                }
            };
            metrics::histogram!("teamster_worker_dequeue_seconds")
                .record(started.elapsed().as_secs_f64());
            match result {
                Ok(mut batch) if batch.len() <= 1 => {
                    backoff.reset();
                    if let Some(dequeued) = batch.pop() {
                        let span = tracing::info_span!(
                            "eval",
                            eval_id = %dequeued.eval.id,
                            job_id = %dequeued.eval.job_id,
                            eval_type = dequeued.eval.eval_type.as_str(),
                        );
                        self.process(dequeued).instrument(span).await;
                    }
                }
                Ok(batch) => {
                    backoff.reset();
                    let span = tracing::info_span!("eval_batch", evals = batch.len());
                    self.process_batch(batch).instrument(span).await;
                }
                Err(e) => {
                    if self.started_at.elapsed() < self.ctx.config.dequeue_error_grace
                        || is_transient(&e)
                    {
                        debug!(error = %e, "dequeue failed; backing off");
                    } else {
                        warn!(error = %e, "dequeue failed; backing off");
                    }
                    let delay = if is_version_mismatch(&e) {
                        self.ctx.config.version_mismatch_backoff
                    } else {
                        backoff.next(&mut self.rng)
                    };
                    // No evaluation in hand: a pause request ends the backoff at once.
                    let mut rx = self.shared.state.subscribe();
                    tokio::select! {
                        _ = self.sleep(delay) => {}
                        _ = rx.wait_for(|s| s.pause) => {}
                    }
                    self.set_workload(WorkloadStatus::WaitingToDequeue);
                }
            }
        }
        self.shared.state.send_modify(|s| {
            s.status = WorkerStatus::Stopped;
            s.workload = WorkloadStatus::Stopped;
            s.pause = false;
        });
        debug!("worker stopped");
    }

    /// Back off for `delay` (workload `Backoff`), ending early on stop or shutdown.
    pub(super) async fn sleep(&self, delay: Duration) {
        let before = self.workload();
        self.set_workload(WorkloadStatus::Backoff);
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = self.shared.stop.cancelled() => {}
            _ = self.ctx.shutdown.cancelled() => {}
        }
        self.set_workload(before);
    }

    /// Park while the pause flag is set. False when the worker must exit.
    pub(super) async fn pause_point(&self) -> bool {
        let mut previous = self.workload();
        let parked = self.shared.state.send_if_modified(|s| {
            if s.pause && s.status != WorkerStatus::Stopping {
                previous = s.workload;
                s.status = WorkerStatus::Paused;
                s.workload = WorkloadStatus::Paused;
                true
            } else {
                false
            }
        });
        if !parked {
            return !self.done();
        }
        metrics::gauge!("teamster_worker_paused").increment(1.0);
        debug!("worker paused");
        let mut rx = self.shared.state.subscribe();
        tokio::select! {
            _ = rx.wait_for(|s| !s.pause) => {}
            _ = self.shared.stop.cancelled() => {}
            _ = self.ctx.shutdown.cancelled() => {}
        }
        metrics::gauge!("teamster_worker_paused").decrement(1.0);
        self.shared.state.send_modify(|s| {
            s.workload = previous;
            if matches!(s.status, WorkerStatus::Paused | WorkerStatus::Resuming) {
                s.status = WorkerStatus::Started;
            }
        });
        debug!("worker resumed");
        !self.done()
    }

    pub(super) async fn ack(&self, eval_id: EvalId, token: String) {
        let started = Instant::now();
        let r = tokio::time::timeout(
            self.ctx.config.rpc_timeout,
            self.ctx.backend.ack(eval_id, token),
        )
        .await;
        metrics::histogram!("teamster_worker_ack_seconds").record(started.elapsed().as_secs_f64());
        metrics::counter!("teamster_worker_evals_total", "outcome" => "ack").increment(1);
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "acking the evaluation failed"),
            Err(_) => warn!("acking the evaluation timed out"),
        }
    }

    /// Writes `eval` as failed with `reason` and acks it; nacks it if the write fails, so
    /// the broker's delivery limit fails it instead.
    async fn fail_eval(&self, eval: &Evaluation, token: &str, reason: String) {
        let mut failed = eval.clone();
        failed.status = EvalStatus::Failed;
        failed.status_description = reason;
        failed.modify_time = self.ctx.clock.now_unix_nanos();
        let r = tokio::time::timeout(
            self.ctx.config.rpc_timeout,
            self.ctx.backend.update_eval(failed, token.to_owned()),
        )
        .await;
        match r {
            Ok(Ok(_)) => self.ack(eval.id.clone(), token.to_owned()).await,
            Ok(Err(e)) => {
                warn!(error = %e, "failing the evaluation failed; nacking it");
                self.nack(eval.id.clone(), token.to_owned()).await;
            }
            Err(_) => {
                warn!("failing the evaluation timed out; nacking it");
                self.nack(eval.id.clone(), token.to_owned()).await;
            }
        }
    }

    pub(super) async fn nack(&self, eval_id: EvalId, token: String) {
        let started = Instant::now();
        let r = tokio::time::timeout(
            self.ctx.config.rpc_timeout,
            self.ctx.backend.nack(eval_id, token),
        )
        .await;
        metrics::histogram!("teamster_worker_ack_seconds").record(started.elapsed().as_secs_f64());
        metrics::counter!("teamster_worker_evals_total", "outcome" => "nack").increment(1);
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => warn!(error = %e, "nacking the evaluation failed"),
            Err(_) => warn!("nacking the evaluation timed out"),
        }
    }

    /// Wait for the local state to reach `index`, ending early on shutdown.
    pub(super) async fn snapshot_min_index(
        &self,
        index: u64,
        timeout: Duration,
    ) -> Result<Snapshot, WorkerError> {
        tokio::select! {
            _ = self.ctx.shutdown.cancelled() => Err(WorkerError::Shutdown),
            r = self.ctx.state.snapshot_min_index(index, timeout) => Ok(r?),
        }
    }

    pub(super) async fn process(&mut self, dequeued: DequeuedEval) {
        let DequeuedEval {
            eval,
            token,
            wait_index,
        } = dequeued;
        self.set_workload(WorkloadStatus::WaitingForRaft);
        let started = Instant::now();
        let limit = self.ctx.raft_sync_limit;
        if self.ctx.state.latest_index() < wait_index {
            // This server is behind the eval: the wait below is what keeps it off stale state.
            metrics::counter!("teamster_worker_index_waits_total").increment(1);
        }
        let snapshot = match self.snapshot_min_index(wait_index, limit).await {
            Ok(s) => s,
            Err(WorkerError::State(StateError::MinIndexTimeout { latest, .. })) => {
                warn!(
                    wait_index,
                    latest, "timeout waiting for Raft index required by eval; nacking it"
                );
                metrics::counter!("teamster_worker_raft_sync_timeouts_total").increment(1);
                self.nack(eval.id.clone(), token).await;
                let longer = limit.saturating_mul(self.ctx.config.catch_up_factor);
                match self.snapshot_min_index(wait_index, longer).await {
                    Ok(_) => info!(
                        wait_index,
                        waited_ms = started.elapsed().as_millis() as u64,
                        "caught up with the Raft index"
                    ),
                    Err(WorkerError::Shutdown) => {}
                    Err(e) => warn!(wait_index, error = %e, "server is unable to catch up"),
                }
                return;
            }
            Err(WorkerError::Shutdown) => {
                warn!("nacking eval because the server is shutting down");
                self.nack(eval.id.clone(), token).await;
                return;
            }
            Err(e) => {
                warn!(error = %e, "cannot read the state; nacking the evaluation");
                self.nack(eval.id.clone(), token).await;
                return;
            }
        };
        metrics::histogram!("teamster_worker_wait_for_index_seconds")
            .record(started.elapsed().as_secs_f64());
        metrics::counter!("teamster_worker_evals_scheduled_total").increment(1);
        if snapshot.latest_index() < wait_index {
            // Cannot happen by construction; counted so tests can prove it.
            metrics::counter!("teamster_worker_stale_snapshot_total").increment(1);
        }
        self.set_workload(WorkloadStatus::Scheduling);
        let started = Instant::now();
        let eval_type = eval.eval_type;
        let result = if eval_type == JobType::Core {
            gc::process(&self.ctx, &eval, &token, snapshot).await
        } else {
            self.run_scheduler(&eval, &token, snapshot).await
        };
        metrics::histogram!("teamster_worker_schedule_seconds", "type" => eval_type.as_str())
            .record(started.elapsed().as_secs_f64());
        match result {
            Ok(()) => self.ack(eval.id.clone(), token).await,
            Err(WorkerError::Scheduler(SchedulerError::Panicked(reason))) => {
                // Deterministic: delivering it again would only panic again elsewhere.
                error!(eval_id = %eval.id, %reason, "the scheduler panicked; failing the evaluation");
                metrics::counter!("teamster_worker_scheduler_panics_total").increment(1);
                self.fail_eval(&eval, &token, format!("scheduler panicked: {reason}"))
                    .await;
            }
            Err(e) if self.ctx.shutdown.is_cancelled() => {
                warn!(error = %e, "nacking eval because the server is shutting down");
                self.nack(eval.id.clone(), token).await;
            }
            Err(e) => {
                warn!(error = %e, "scheduling failed; nacking the evaluation");
                self.nack(eval.id.clone(), token).await;
            }
        }
    }
}
