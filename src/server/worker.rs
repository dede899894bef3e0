//! Scheduler workers: the long-lived tasks, on every server, that dequeue evaluations from the
//! leader's broker, wait for the local state to catch up, run the scheduler for the
//! evaluation's type and ack (or nack) it. Semantics are Nomad's `nomad/worker.go`, with its
//! pause/resume quirk fixed: pausing and resuming act on a *flag*, so a resume that arrives
//! while the worker is still `Pausing` (busy on an evaluation) wins and the worker never parks.
//!
//! ```text
//!  ┌─▶ pause point (parks while the pause flag is set; stop/shutdown end the loop)
//!  │   Eval.Dequeue(enabled types, 500 ms) ── error ─▶ backoff 20 ms → 10 s (jitter) ─┐
//!  │   snapshot_min_index(WaitIndex, raft_sync_limit)                                 │
//!  │     └ timeout ─▶ Nack, then wait up to 10 × raft_sync_limit for the same index ──┤
//!  │   scheduler on its own thread ◀── planner calls ──▶ Plan.Submit / Eval.Update /  │
//!  │        (the pure `Scheduler` is synchronous)          Eval.Create / Eval.Reblock │
//!  │   Ack (or Nack on error)                                                         │
//!  └──────────────────────────────────────────────────────────────────────────────────┘
//! ```
//!
//! - The worker talks to the leader only through a [`WorkerBackend`]: in the server it is
//!   [`backend::ServerRpcBackend`] (the server's own RPC handler, which serves locally on the
//!   leader and forwards from a follower); unit tests use a fake.
//! - The synchronous [`Planner`] the schedulers call is bridged over channels to the worker's
//!   async task, which makes the RPCs, retries transient errors with backoff (500 ms → 10 s)
//!   and, after a partial commit, waits for the plan's `RefreshIndex` and hands the scheduler
//!   a fresh snapshot. The scheduler runs on a plain thread, never on the async runtime, so
//!   tokio's paused test clock keeps working while it plans.
//! - Shutdown (the server's cancellation token) nacks the evaluation in hand and is logged as
//!   a warning. [`Worker::stop`] is gentler: the worker finishes its current evaluation first.
//! - [`pool`]: the pool of workers, resized in place, three quarters paused on the leader.
//! - [`core`]: the `_core` scheduler (evaluation and job garbage collection).

pub mod backend;
pub mod core;
pub mod pool;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use teamster_storage::fsm::Command;
use teamster_storage::model::{EvalId, Evaluation, JobType, Plan, PlanResult, Timestamp};
use teamster_storage::state::{Snapshot, StateError, StateStore};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use crate::agent::config::duration_str;
use crate::rpc::{DequeuedEval, RpcError};
use crate::scheduler::{new_scheduler, Planner, SchedulerEnv, SchedulerError, SchedulerSettings};
use crate::util::SharedClock;

/// The scheduler version workers announce on `Eval.Dequeue`; the leader refuses a mismatch
/// (its error names "scheduler version", and the worker then backs off longer).
pub use crate::server::endpoints::eval::SCHEDULER_VERSION;

/// Errors of the workers and their pool.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A worker setting or pool configuration is out of range.
    #[error("{0}")]
    Invalid(String),
    /// A call to the leader failed.
    #[error(transparent)]
    Rpc(#[from] RpcError),
    /// The local state did not reach an index, or closed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The scheduler failed.
    #[error(transparent)]
    Scheduler(#[from] SchedulerError),
    /// The scheduler thread could not start or died.
    #[error("scheduler thread: {0}")]
    Thread(String),
    /// The server is shutting down.
    #[error("the server is shutting down")]
    Shutdown,
}

/// Worker timings and garbage-collection thresholds (the `[server.workers]` table). Every
/// constant of the worker loop is here, so tests shrink them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerConfig {
    /// How long one `Eval.Dequeue` waits for work (so pause and stop are noticed).
    #[serde(with = "duration_str")]
    pub dequeue_timeout: Duration,
    /// After a raft-sync timeout, keep waiting up to this many × `raft_sync_limit` for the
    /// same index before dequeuing again (a server catching up must not churn evaluations).
    pub catch_up_factor: u32,
    /// First backoff after a failed dequeue.
    #[serde(with = "duration_str")]
    pub dequeue_backoff_base: Duration,
    /// Longest backoff after failed dequeues.
    #[serde(with = "duration_str")]
    pub dequeue_backoff_limit: Duration,
    /// First backoff after a transient planner error (no leader, plan queue disabled).
    #[serde(with = "duration_str")]
    pub plan_backoff_base: Duration,
    /// Longest backoff after transient planner errors.
    #[serde(with = "duration_str")]
    pub plan_backoff_limit: Duration,
    /// Backoff when the leader runs another scheduler version.
    #[serde(with = "duration_str")]
    pub version_mismatch_backoff: Duration,
    /// Attempts of one planner call (plan, eval update/create/reblock) on transient errors.
    pub planner_attempts: u32,
    /// Deadline of one call to the leader (a dequeue gets this on top of its own timeout).
    #[serde(with = "duration_str")]
    pub rpc_timeout: Duration,
    /// Dequeue errors in the first moments after start are expected (no leader yet) and
    /// logged at debug level only.
    #[serde(with = "duration_str")]
    pub dequeue_error_grace: Duration,
    /// How long the server waits for its workers at shutdown.
    #[serde(with = "duration_str")]
    pub shutdown_grace: Duration,
    /// Terminal evaluations (and their terminal allocations) older than this are collected.
    #[serde(with = "duration_str")]
    pub eval_gc_threshold: Duration,
    /// Stopped jobs whose allocations are all terminal are purged after this long.
    #[serde(with = "duration_str")]
    pub job_gc_threshold: Duration,
    /// How often the leader creates the periodic `_core` garbage-collection evaluations.
    #[serde(with = "duration_str")]
    pub core_gc_interval: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            dequeue_timeout: Duration::from_millis(500),
            catch_up_factor: 10,
            dequeue_backoff_base: Duration::from_millis(20),
            dequeue_backoff_limit: Duration::from_secs(10),
            plan_backoff_base: Duration::from_millis(500),
            plan_backoff_limit: Duration::from_secs(10),
            version_mismatch_backoff: Duration::from_secs(30),
            planner_attempts: 8,
            rpc_timeout: Duration::from_secs(30),
            dequeue_error_grace: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(5),
            eval_gc_threshold: Duration::from_secs(3600),
            job_gc_threshold: Duration::from_secs(4 * 3600),
            core_gc_interval: Duration::from_secs(300),
        }
    }
}

impl WorkerConfig {
    /// Checks every value; the error names the key (`server.workers.<key>`).
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        for (key, d) in [
            ("server.workers.dequeue_timeout", self.dequeue_timeout),
            (
                "server.workers.dequeue_backoff_base",
                self.dequeue_backoff_base,
            ),
            ("server.workers.plan_backoff_base", self.plan_backoff_base),
            (
                "server.workers.version_mismatch_backoff",
                self.version_mismatch_backoff,
            ),
            ("server.workers.rpc_timeout", self.rpc_timeout),
            ("server.workers.shutdown_grace", self.shutdown_grace),
            ("server.workers.core_gc_interval", self.core_gc_interval),
        ] {
            if d.is_zero() {
                return Err((key, "must be positive".into()));
            }
        }
        if self.dequeue_backoff_limit < self.dequeue_backoff_base {
            return Err((
                "server.workers.dequeue_backoff_limit",
                "must be at least server.workers.dequeue_backoff_base".into(),
            ));
        }
        if self.plan_backoff_limit < self.plan_backoff_base {
            return Err((
                "server.workers.plan_backoff_limit",
                "must be at least server.workers.plan_backoff_base".into(),
            ));
        }
        if !(1..=100).contains(&self.catch_up_factor) {
            return Err((
                "server.workers.catch_up_factor",
                format!("must be within 1..=100, not {}", self.catch_up_factor),
            ));
        }
        if !(1..=100).contains(&self.planner_attempts) {
            return Err((
                "server.workers.planner_attempts",
                format!("must be within 1..=100, not {}", self.planner_attempts),
            ));
        }
        Ok(())
    }
}

/// A worker's lifecycle status (Nomad's `WorkerStatus` strings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkerStatus {
    /// Created, its task not yet running.
    Starting,
    /// Running its loop.
    Started,
    /// Asked to pause; parks at its next pause point.
    Pausing,
    /// Parked.
    Paused,
    /// Asked to resume while parked; running again at once.
    Resuming,
    /// Asked to stop; exits after its current evaluation.
    Stopping,
    /// Its task has ended.
    Stopped,
}

/// What a worker is doing (Nomad's `SchedulerWorkerStatus` strings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WorkloadStatus {
    /// In (or about to make) an `Eval.Dequeue` call.
    WaitingToDequeue,
    /// Waiting for the local state to reach an index.
    WaitingForRaft,
    /// Running a scheduler.
    Scheduling,
    /// Waiting for the leader to answer a plan.
    Submitting,
    /// Backing off after an error.
    Backoff,
    /// Parked at a pause point.
    Paused,
    /// The loop has ended.
    Stopped,
}

/// One worker's row in `GET /v1/agent/schedulers` (Nomad's `WorkerInfo`, snake_case).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerInfo {
    /// The worker's UUID.
    pub id: String,
    /// The scheduler types it serves.
    pub enabled_schedulers: Vec<String>,
    /// When it started, RFC 3339 with nanoseconds, UTC.
    pub started: String,
    /// Its lifecycle status.
    pub status: WorkerStatus,
    /// What it is doing.
    pub workload_status: WorkloadStatus,
}

/// How a worker reaches the leader's broker and plan queue (and raft, for `_core`). Every
/// call may fail with a transient error (`Disabled`, `NotLeader`, `Unreachable`, `Timeout`,
/// `Unsupported` while the server is starting) that the worker retries with backoff.
pub trait WorkerBackend: Send + Sync + 'static {
    /// `Eval.Dequeue`: an evaluation of one of `schedulers`, waiting up to `timeout`.
    fn dequeue(
        &self,
        schedulers: Vec<String>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Option<DequeuedEval>, RpcError>>;
    /// `Eval.Ack`.
    fn ack(&self, eval_id: EvalId, token: String) -> BoxFuture<'_, Result<(), RpcError>>;
    /// `Eval.Nack`.
    fn nack(&self, eval_id: EvalId, token: String) -> BoxFuture<'_, Result<(), RpcError>>;
    /// `Plan.Submit`.
    fn submit_plan(&self, plan: Plan) -> BoxFuture<'_, Result<PlanResult, RpcError>>;
    /// `Eval.Update`: the raft index of the write.
    fn update_eval(&self, eval: Evaluation, token: String) -> BoxFuture<'_, Result<u64, RpcError>>;
    /// `Eval.Create`: the raft index of the write.
    fn create_eval(&self, eval: Evaluation, token: String) -> BoxFuture<'_, Result<u64, RpcError>>;
    /// `Eval.Reblock`: the raft index of the write.
    fn reblock_eval(&self, eval: Evaluation, token: String)
        -> BoxFuture<'_, Result<u64, RpcError>>;
    /// A raft write (forwarded to the leader): the `_core` scheduler's deletions.
    fn write(&self, command: Command) -> BoxFuture<'_, Result<u64, RpcError>>;
}

/// Runs a placement scheduler. The server uses [`PlacementSchedulers`]; tests substitute
/// schedulers they can hold mid-evaluation.
pub trait SchedulerFactory: Send + Sync + 'static {
    /// Process `eval` on `snapshot`, writing through `planner`.
    fn process<'a>(
        &self,
        eval: &Evaluation,
        snapshot: Snapshot,
        planner: &'a mut dyn Planner,
        env: SchedulerEnv<'a>,
    ) -> Result<(), SchedulerError>;
}

/// The real schedulers of [`crate::scheduler`], by evaluation type.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlacementSchedulers;

impl SchedulerFactory for PlacementSchedulers {
    fn process<'a>(
        &self,
        eval: &Evaluation,
        snapshot: Snapshot,
        planner: &'a mut dyn Planner,
        env: SchedulerEnv<'a>,
    ) -> Result<(), SchedulerError> {
        new_scheduler(eval.eval_type, snapshot, planner, env)?.process(eval)
    }
}

/// What every worker of a server shares.
pub struct WorkerContext {
    /// The way to the leader.
    pub backend: Arc<dyn WorkerBackend>,
    /// The local state store.
    pub state: StateStore,
    /// Wall-clock stamps.
    pub clock: SharedClock,
    /// Timings.
    pub config: WorkerConfig,
    /// How long to wait for the local state to reach an evaluation's index.
    pub raft_sync_limit: Duration,
    /// Scheduler tunables.
    pub settings: SchedulerSettings,
    /// The placement schedulers.
    pub schedulers: Arc<dyn SchedulerFactory>,
    /// The server's shutdown: nack what is in hand and exit.
    pub shutdown: CancellationToken,
}

/// Exponential backoff with jitter: attempt `k` waits a random time in
/// `[d/2, d]` where `d = min(base × 2^k, limit)`. Each call site keeps its own counter
/// (Nomad shares one per worker across unrelated calls).
#[derive(Debug, Clone)]
pub struct Backoff {
    base: Duration,
    limit: Duration,
    attempt: u32,
}

impl Backoff {
    /// A backoff starting at `base`, capped at `limit`.
    pub fn new(base: Duration, limit: Duration) -> Backoff {
        Backoff {
            base,
            limit,
            attempt: 0,
        }
    }

    /// The next delay; each call doubles the ceiling up to the limit.
    pub fn next(&mut self, rng: &mut impl Rng) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1u32 << self.attempt.min(20))
            .min(self.limit);
        self.attempt = self.attempt.saturating_add(1);
        ceiling.mul_f64(rng.gen_range(0.5..=1.0))
    }

    /// Back to `base` after a success.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// Failures since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }
}

/// Whether a failed call is worth retrying (leadership moving, subsystem not yet enabled,
/// peer unreachable).
pub fn is_transient(e: &RpcError) -> bool {
    matches!(
        e,
        RpcError::Disabled(_)
            | RpcError::NotLeader { .. }
            | RpcError::Unreachable { .. }
            | RpcError::Timeout { .. }
            | RpcError::Unsupported { .. }
    ) || is_version_mismatch(e)
}

/// Whether the leader refused our scheduler version.
pub fn is_version_mismatch(e: &RpcError) -> bool {
    e.to_string().contains("scheduler version")
}

#[derive(Debug, Clone)]
struct WorkerState {
    status: WorkerStatus,
    workload: WorkloadStatus,
    /// The flag pause and resume act on.
    pause: bool,
    enabled: Vec<String>,
}

struct Shared {
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
struct Runner {
    shared: Arc<Shared>,
    ctx: Arc<WorkerContext>,
    rng: StdRng,
    started_at: Instant,
}

impl Runner {
    fn set_workload(&self, w: WorkloadStatus) {
        self.shared.state.send_if_modified(|s| {
            let changed = s.workload != w;
            s.workload = w;
            changed
        });
    }

    fn workload(&self) -> WorkloadStatus {
        self.shared.state.borrow().workload
    }

    fn done(&self) -> bool {
        self.shared.stop.is_cancelled() || self.ctx.shutdown.is_cancelled()
    }

    async fn run(mut self) {
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
            let result = tokio::select! {
                biased;
                _ = self.ctx.shutdown.cancelled() => break,
                r = tokio::time::timeout(
                    deadline,
                    self.ctx.backend.dequeue(enabled, self.ctx.config.dequeue_timeout),
                ) => r.unwrap_or_else(|_| Err(RpcError::Timeout {
                    peer: "leader".into(),
                    after_ms: deadline.as_millis() as u64,
                })),
            };
            metrics::histogram!("teamster_worker_dequeue_seconds")
                .record(started.elapsed().as_secs_f64());
            match result {
                Ok(None) => backoff.reset(),
                Ok(Some(dequeued)) => {
                    backoff.reset();
                    let span = tracing::info_span!(
                        "eval",
                        eval_id = %dequeued.eval.id,
                        job_id = %dequeued.eval.job_id,
                        eval_type = dequeued.eval.eval_type.as_str(),
                    );
                    self.process(dequeued).instrument(span).await;
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
    async fn sleep(&self, delay: Duration) {
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
    async fn pause_point(&self) -> bool {
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

    async fn ack(&self, eval_id: EvalId, token: String) {
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

    async fn nack(&self, eval_id: EvalId, token: String) {
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
    async fn snapshot_min_index(
        &self,
        index: u64,
        timeout: Duration,
    ) -> Result<Snapshot, WorkerError> {
        tokio::select! {
            _ = self.ctx.shutdown.cancelled() => Err(WorkerError::Shutdown),
            r = self.ctx.state.snapshot_min_index(index, timeout) => Ok(r?),
        }
    }

    async fn process(&mut self, dequeued: DequeuedEval) {
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
            core::process(&self.ctx, &eval, &token, snapshot).await
        } else {
            self.run_scheduler(&eval, &token, snapshot).await
        };
        metrics::histogram!("teamster_worker_schedule_seconds", "type" => eval_type.as_str())
            .record(started.elapsed().as_secs_f64());
        match result {
            Ok(()) => self.ack(eval.id.clone(), token).await,
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

    /// Run the placement scheduler on its own thread and serve its planner calls here.
    async fn run_scheduler(
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
                };
                let r = factory.process(&thread_eval, snapshot, &mut planner, env);
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
                        backend.submit_plan(plan.clone())
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
    async fn retry<'a, T, F>(
        &self,
        operation: &'static str,
        backoff: &mut Backoff,
        mut call: F,
    ) -> Result<T, SchedulerError>
    where
        F: FnMut() -> BoxFuture<'a, Result<T, RpcError>>,
    {
        let fail = |reason: String| SchedulerError::Planner { operation, reason };
        let mut rng = StdRng::from_entropy();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let r = tokio::select! {
                _ = self.ctx.shutdown.cancelled() => {
                    return Err(fail("shutdown while planning".into()))
                }
                r = tokio::time::timeout(self.ctx.config.rpc_timeout, call()) => {
                    r.unwrap_or_else(|_| Err(RpcError::Timeout {
                        peer: "leader".into(),
                        after_ms: self.ctx.config.rpc_timeout.as_millis() as u64,
                    }))
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

struct Planning {
    token: String,
    snapshot_index: u64,
    snapshot: Snapshot,
    backoff: Backoff,
}

type Reply<T> = oneshot::Sender<Result<T, SchedulerError>>;

enum PlannerCall {
    SubmitPlan(Plan, Reply<(PlanResult, Option<Snapshot>)>),
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
        self.call("submit plan", |r| PlannerCall::SubmitPlan(plan, r))
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
