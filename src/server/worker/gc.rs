//! The `_core` scheduler: the servers' own garbage collection, run by any worker like any
//! other evaluation type, and the leader duty that creates its periodic evaluations.
//!
//! A `_core` evaluation's `JobID` names the work (Nomad's core job names):
//! - `eval-gc`: terminal evaluations older than `eval_gc_threshold` whose allocations are all
//!   terminal are deleted with those allocations. Evaluations of a batch or sysbatch job are
//!   kept until the job is stopped and dead (or gone): deleting a live batch job's completed
//!   allocations would make the scheduler run the work again.
//! - `job-gc`: stopped or dead jobs whose evaluations and allocations are all terminal, and
//!   none of which (job included) changed for `job_gc_threshold`, are purged with those
//!   evaluations and allocations.
//! - `force-gc`: both, with no age threshold.
//!
//! What to collect is decided by the pure [`plan_gc`] on a snapshot; the deletions are the
//! leader's `Eval.Reap` and `Job.BatchDeregister` calls, in bounded batches. The core evaluation
//! itself is then marked complete with `Eval.Update` and acked; it is collected by a later
//! `eval-gc` like any other.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rand::rngs::StdRng;
use teamster_storage::fsm::{Command, EvalUpsert};
use teamster_storage::model::{
    AllocId, EvalId, EvalStatus, Evaluation, JobId, JobStatus, JobType, Namespace,
};
use teamster_storage::state::Snapshot;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::{WorkerConfig, WorkerContext, WorkerError};
use crate::rpc::service::eval::EvalReapRequest;
use crate::rpc::service::job::JobBatchDeregisterRequest;
use crate::server::leader::LeaderDuty;
use crate::server::leader_service::{run_every, LeaderService};
use crate::server::raft::RaftNode;
use crate::util::{RngSource, SharedClock};

pub use crate::server::evals::{core_eval, CORE_JOB_PRIORITY, EVAL_GC, FORCE_GC, JOB_GC};
/// Most ids in one raft write.
pub const GC_BATCH: usize = 1000;

/// What one garbage collection deletes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcPlan {
    /// Evaluations to delete.
    pub evals: Vec<EvalId>,
    /// Allocations to delete.
    pub allocs: Vec<AllocId>,
    /// Jobs to purge.
    pub jobs: Vec<(Namespace, JobId)>,
}

fn older_than(stamp: i64, now: i64, threshold: Duration) -> bool {
    let threshold = i64::try_from(threshold.as_nanos()).unwrap_or(i64::MAX);
    now.saturating_sub(stamp) >= threshold
}

/// Decide what the core job `kind` collects on `snapshot` at `now` (Unix nanoseconds).
pub fn plan_gc(snapshot: &Snapshot, kind: &str, now: i64, config: &WorkerConfig) -> GcPlan {
    let force = kind == FORCE_GC;
    let (eval_threshold, job_threshold) = if force {
        (Duration::ZERO, Duration::ZERO)
    } else {
        (config.eval_gc_threshold, config.job_gc_threshold)
    };
    let mut plan = GcPlan::default();
    if force || kind == JOB_GC {
        for job in snapshot.jobs() {
            if !(job.stop || job.status == JobStatus::Dead) {
                continue;
            }
            let ns = job.namespace.as_str();
            let id = job.id.as_str();
            let evals: Vec<_> = snapshot.evals_by_job(ns, id).collect();
            let allocs: Vec<_> = snapshot.allocs_by_job(ns, id).collect();
            // Its age: since the last change to the job, its evaluations or allocations.
            let last_change = evals
                .iter()
                .map(|e| e.modify_time)
                .chain(allocs.iter().map(|a| a.modify_time))
                .fold(job.submit_time, i64::max);
            if older_than(last_change, now, job_threshold)
                && evals.iter().all(|e| e.terminal_status())
                && allocs.iter().all(|a| a.terminal_status())
            {
                plan.evals.extend(evals.iter().map(|e| e.id.clone()));
                plan.allocs.extend(allocs.iter().map(|a| a.id.clone()));
                plan.jobs.push((job.namespace.clone(), job.id.clone()));
            }
        }
    }
    if force || kind == EVAL_GC {
        for eval in snapshot.evals() {
            if !eval.terminal_status() || !older_than(eval.modify_time, now, eval_threshold) {
                continue;
            }
            if plan.evals.contains(&eval.id) {
                continue;
            }
            if let Some(job) = snapshot.job_by_id(eval.namespace.as_str(), eval.job_id.as_str()) {
                let keeps_results = matches!(job.job_type, JobType::Batch | JobType::SysBatch);
                let finished = job.stop && job.status == JobStatus::Dead;
                if keeps_results && !finished {
                    continue;
                }
            }
            let allocs: Vec<_> = snapshot.allocs_by_eval(eval.id.as_str()).collect();
            if allocs.iter().all(|a| a.terminal_status()) {
                plan.evals.push(eval.id.clone());
                plan.allocs.extend(allocs.iter().map(|a| a.id.clone()));
            }
        }
    }
    plan
}

/// Process a `_core` evaluation: collect, mark it complete, and let the worker ack it.
pub(super) async fn process(
    ctx: &WorkerContext,
    eval: &Evaluation,
    token: &str,
    snapshot: Snapshot,
) -> Result<(), WorkerError> {
    let kind = eval.job_id.as_str();
    if ![EVAL_GC, JOB_GC, FORCE_GC].contains(&kind) {
        return Err(WorkerError::Invalid(format!("unknown core job {kind:?}")));
    }
    let now = ctx.clock.now_unix_nanos();
    let plan = plan_gc(&snapshot, kind, now, &ctx.config);
    let within = |call| async {
        tokio::time::timeout(ctx.config.rpc_timeout, call)
            .await
            .unwrap_or_else(|_| Err(super::no_answer(ctx.config.rpc_timeout)))
    };
    for chunk in plan.evals.chunks(GC_BATCH) {
        within(ctx.backend.reap(EvalReapRequest {
            evals: chunk.to_vec(),
            allocs: Vec::new(),
        }))
        .await?;
    }
    for chunk in plan.allocs.chunks(GC_BATCH) {
        within(ctx.backend.reap(EvalReapRequest {
            evals: Vec::new(),
            allocs: chunk.to_vec(),
        }))
        .await?;
    }
    for chunk in plan.jobs.chunks(GC_BATCH) {
        within(ctx.backend.purge_jobs(JobBatchDeregisterRequest {
            jobs: chunk.to_vec(),
        }))
        .await?;
    }
    if !plan.evals.is_empty() || !plan.jobs.is_empty() {
        info!(
            core_job = kind,
            evals = plan.evals.len(),
            allocs = plan.allocs.len(),
            jobs = plan.jobs.len(),
            "garbage collected"
        );
    }
    metrics::counter!("teamster_core_gc_evals_total").increment(plan.evals.len() as u64);
    metrics::counter!("teamster_core_gc_jobs_total").increment(plan.jobs.len() as u64);
    let mut done = eval.clone();
    done.status = EvalStatus::Complete;
    done.status_description = String::new();
    done.snapshot_index = snapshot.latest_index();
    done.modify_time = now;
    within(ctx.backend.update_eval(done, token.to_string())).await?;
    Ok(())
}

/// The leader duty that writes an `eval-gc` and a `job-gc` evaluation every
/// `core_gc_interval` while this server leads.
pub struct CoreGcDuty {
    node: Arc<RaftNode>,
    clock: SharedClock,
    rng: RngSource,
    interval: Duration,
    /// The task writing the evaluations, running while this server leads.
    tasks: LeaderService,
}

impl CoreGcDuty {
    /// The duty for `node`.
    pub fn new(
        node: Arc<RaftNode>,
        clock: SharedClock,
        rng: RngSource,
        interval: Duration,
    ) -> CoreGcDuty {
        CoreGcDuty {
            node,
            clock,
            rng,
            interval,
            tasks: LeaderService::new(),
        }
    }
}

impl LeaderDuty for CoreGcDuty {
    fn name(&self) -> &'static str {
        "core gc scheduling"
    }

    fn establish(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let (node, clock) = (self.node.clone(), self.clock.clone());
            let (interval, rng) = (self.interval, self.rng.fork());
            self.tasks
                .restart(|set| {
                    set.spawn(move |stop| schedule_core_gc(node, clock, rng, interval, stop))
                })
                .await;
            Ok(())
        })
    }

    fn revoke(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.tasks.stop())
    }
}

/// Writes an `eval-gc` and a `job-gc` evaluation every `interval` until `stop` fires.
async fn schedule_core_gc(
    node: Arc<RaftNode>,
    clock: SharedClock,
    mut rng: StdRng,
    interval: Duration,
    stop: CancellationToken,
) {
    run_every(&stop, interval, || {
        let now = clock.now_unix_nanos();
        let evals = vec![
            core_eval(EVAL_GC, now, &mut rng),
            core_eval(JOB_GC, now, &mut rng),
        ];
        let write = node.write_local(Command::EvalUpsert(EvalUpsert { evals }));
        let stop = &stop;
        async move {
            tokio::select! {
                _ = stop.cancelled() => ControlFlow::Break(()),
                r = write => {
                    if let Err(e) = r {
                        warn!(error = %e, "creating the core gc evaluations failed");
                    }
                    ControlFlow::Continue(())
                }
            }
        }
    })
    .await;
}
