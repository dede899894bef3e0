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
//! - The worker talks to the leader only through a [`WorkerBackend`]: in the server it is the
//!   service layer itself ([`backend`]: it serves a call on the leader and forwards it from a
//!   follower); unit tests use a fake.
//! - The synchronous [`Planner`] the schedulers call is bridged over channels to the worker's
//!   async task, which makes the RPCs, retries transient errors with backoff (500 ms → 10 s)
//!   and, after a partial commit, waits for the plan's `RefreshIndex` and hands the scheduler
//!   a fresh snapshot. The scheduler runs on a plain thread, never on the async runtime, so
//!   tokio's paused test clock keeps working while it plans.
//! - Shutdown (the server's cancellation token) nacks the evaluation in hand and is logged as
//!   a warning. [`Worker::stop`] is gentler: the worker finishes its current evaluation first.
//! - [`Worker`] (`runner.rs`): one worker's task and the handle that pauses, resumes and stops
//!   it; `bridge.rs`: the scheduler on its thread and the planner bridge.
//! - `batch.rs`: evaluations dequeued together (`Eval.DequeueBatch`, up to
//!   [`WorkerConfig::max_batch`]) are scheduled in one round: speculated one after another on
//!   one snapshot, their plans submitted together, the ones that need it scheduled again
//!   alone.
//! - [`pool`]: the pool of workers, resized in place, three quarters paused on the leader.
//! - [`gc`]: the `_core` scheduler (evaluation and job garbage collection).
//!
//! May import: the service layer's wire types (`rpc`), `scheduler`, `server::config`,
//! `server::leader` (the pause duty), `util`; the workers are clients of `server::endpoints`
//! (through [`WorkerBackend`]), which never imports them.

pub mod backend;
mod batch;
mod bridge;
pub mod gc;
pub mod pool;
mod runner;
#[cfg(test)]
mod tests;

pub use runner::Worker;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rand::Rng;
use serde::{Deserialize, Serialize};
use teamster_storage::model::{EvalId, Evaluation, Plan, PlanResult};
use teamster_storage::state::{Snapshot, StateError, StateStore};
use tokio_util::sync::CancellationToken;

use crate::rpc::service::eval::EvalReapRequest;
use crate::rpc::service::job::JobBatchDeregisterRequest;
use crate::rpc::{DequeuedEval, ServiceError};
use crate::scheduler::{
    new_scheduler, Planner, ReadyNodesCache, SchedulerEnv, SchedulerError, SchedulerSettings,
};
use crate::util::{RngSource, SharedClock};

/// Errors of the workers and their pool.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A worker setting or pool configuration is out of range.
    #[error("{0}")]
    Invalid(String),
    /// A call to the leader failed.
    #[error(transparent)]
    Rpc(#[from] ServiceError),
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

pub use crate::server::config::WorkerConfig;

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

/// How a worker reaches the leader's broker and plan queue (and raft, for `_core`): the
/// service layer's `Eval.*`, `Plan.Submit`, `Eval.Reap` and `Job.BatchDeregister`. Every
/// call may fail with a retryable [`ServiceError`] (`Disabled`, `NotLeader`, `NoLeader`,
/// `Unavailable`) that the worker retries with backoff. In the server it is the service
/// layer itself ([`backend`]: any [`ServiceCaller`](crate::rpc::ServiceCaller)); unit
/// tests use a fake.
pub trait WorkerBackend: Send + Sync + 'static {
    /// `Eval.Dequeue`: an evaluation of one of `schedulers`, waiting up to `timeout`.
    fn dequeue(
        &self,
        schedulers: Vec<String>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Option<DequeuedEval>, ServiceError>>;
    /// `Eval.DequeueBatch`: up to `max` evaluations, waiting up to `timeout` for the first
    /// (empty when none came). By default one `Eval.Dequeue`.
    fn dequeue_batch(
        &self,
        schedulers: Vec<String>,
        timeout: Duration,
        max: usize,
    ) -> BoxFuture<'_, Result<Vec<DequeuedEval>, ServiceError>> {
        let _ = max;
        Box::pin(async move {
            Ok(self
                .dequeue(schedulers, timeout)
                .await?
                .into_iter()
                .collect())
        })
    }
    /// `Eval.Ack`.
    fn ack(&self, eval_id: EvalId, token: String) -> BoxFuture<'_, Result<(), ServiceError>>;
    /// `Plan.SubmitBatch`: each plan's result or error, in order. By default one
    /// `Plan.Submit` per plan, concurrently.
    fn submit_plans(
        &self,
        plans: Vec<Plan>,
    ) -> BoxFuture<'_, Result<Vec<Result<PlanResult, ServiceError>>, ServiceError>> {
        Box::pin(async move {
            Ok(futures::future::join_all(plans.into_iter().map(|p| self.submit_plan(p))).await)
        })
    }
    /// `Eval.AckBatch`: each acknowledgement's outcome, in order. By default one `Eval.Ack`
    /// each, concurrently.
    fn ack_batch(
        &self,
        acks: Vec<(EvalId, String)>,
    ) -> BoxFuture<'_, Result<Vec<Result<(), ServiceError>>, ServiceError>> {
        Box::pin(async move {
            Ok(futures::future::join_all(acks.into_iter().map(|(id, t)| self.ack(id, t))).await)
        })
    }
    /// `Eval.Nack`.
    fn nack(&self, eval_id: EvalId, token: String) -> BoxFuture<'_, Result<(), ServiceError>>;
    /// `Plan.Submit`.
    fn submit_plan(&self, plan: Plan) -> BoxFuture<'_, Result<PlanResult, ServiceError>>;
    /// `Eval.Update`: the raft index of the write.
    fn update_eval(
        &self,
        eval: Evaluation,
        token: String,
    ) -> BoxFuture<'_, Result<u64, ServiceError>>;
    /// `Eval.Create`: the raft index of the write.
    fn create_eval(
        &self,
        eval: Evaluation,
        token: String,
    ) -> BoxFuture<'_, Result<u64, ServiceError>>;
    /// `Eval.Reblock`: the raft index of the write.
    fn reblock_eval(
        &self,
        eval: Evaluation,
        token: String,
    ) -> BoxFuture<'_, Result<u64, ServiceError>>;
    /// `Eval.Reap`: the `_core` scheduler deletes terminal evaluations and allocations.
    fn reap(&self, req: EvalReapRequest) -> BoxFuture<'_, Result<u64, ServiceError>>;
    /// `Job.BatchDeregister`: the `_core` scheduler purges jobs.
    fn purge_jobs(
        &self,
        req: JobBatchDeregisterRequest,
    ) -> BoxFuture<'_, Result<u64, ServiceError>>;
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
    /// The randomness seam: worker seeds, backoff jitter.
    pub rng: RngSource,
    /// Timings.
    pub config: WorkerConfig,
    /// How long to wait for the local state to reach an evaluation's index.
    pub raft_sync_limit: Duration,
    /// Scheduler tunables.
    pub settings: SchedulerSettings,
    /// The placement schedulers.
    pub schedulers: Arc<dyn SchedulerFactory>,
    /// The ready nodes of recent scopes, shared by the workers while the nodes table holds.
    pub ready_nodes: Arc<ReadyNodesCache>,
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
/// leader unreachable, another scheduler version on the leader).
pub fn is_transient(e: &ServiceError) -> bool {
    e.is_retryable() || is_version_mismatch(e)
}

/// Whether the leader refused our scheduler version.
pub fn is_version_mismatch(e: &ServiceError) -> bool {
    matches!(e, ServiceError::SchedulerVersion { .. })
}

/// The error of a call to the leader that did not answer within `after`.
pub fn no_answer(after: Duration) -> ServiceError {
    ServiceError::Unavailable {
        reason: format!("the leader did not answer within {} ms", after.as_millis()),
    }
}
