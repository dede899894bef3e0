//! The leader's plan queue and its single plan applier.
//!
//! ```text
//!  Plan.Submit ──enqueue──▶ PlanQueue (priority, then enqueue order) ──dequeue──▶ applier
//!      ▲                                                                          │
//!      │   evaluate_plan(newest snapshot, overlay of plans still committing, plan)│
//!      │                         │ no-op / all rejected: answer at once            │
//!      │                         ▼                                                 │
//!      │   overlay.record ─▶ spawn commit: RaftNode::write_local(ApplyPlanResults) │
//!      └──────── PlanResult (AllocIndex, RefreshIndex when partial) ◀──────────────┘
//! ```
//!
//! - [`PlanQueueCore`] is the sans-IO heap: higher plan priority first, then older; disabled
//!   it refuses plans ("plan queue is disabled"), and disabling flushes every queued plan with
//!   "plan queue flushed".
//! - [`PlanQueue`] is the shell: a `Clone` handle, each plan carrying a oneshot for its answer.
//! - [`PlanApplier`] is the loop the [`PlanQueueDuty`] runs on the leader. It evaluates plan
//!   N+1 while plan N is committing (pipelining, up to [`PlanApplierConfig::max_in_flight`]
//!   commits at once); plans that commit at the same time ride in one raft entry through the
//!   raft node's group commit. Accepted plans stay in a [`PlanOverlay`] until the state store
//!   shows their commit, so the next plan is checked against them too.
//!
//! Metrics: gauge `teamster_plan_queue_depth`; histograms `teamster_plan_evaluate_seconds`,
//! `teamster_plan_apply_seconds`, `teamster_plan_wait_seconds`; counters
//! `teamster_plan_node_rejected_total`, `teamster_plan_allocs_committed_total`,
//! `teamster_plan_applied_total{outcome}`.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use teamster_storage::fsm::{Command, CommandResponse};
use teamster_storage::model::{Plan, PlanResult};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use crate::server::leader::LeaderDuty;
use crate::server::plan_apply::{evaluate_plan, OverlayToken, PlanOverlay};
use crate::server::raft::RaftNode;
use crate::util::SharedClock;

/// Why a plan was not applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanQueueError {
    /// This server is not (or no longer) the leader.
    #[error("plan queue is disabled")]
    Disabled,
    /// Leadership was lost while the plan waited.
    #[error("plan queue flushed")]
    Flushed,
    /// The applier's state did not reach the plan's snapshot index in time.
    #[error("timed out after {timeout:?} waiting for index={index}")]
    SnapshotTimeout {
        /// The index waited for.
        index: u64,
        /// How long.
        timeout: Duration,
    },
    /// Committing the accepted part failed (it may or may not be committed).
    #[error("applying the plan failed: {0}")]
    Commit(String),
    /// A setting is out of range.
    #[error("invalid plan applier configuration: {0}")]
    InvalidConfig(&'static str),
}

/// Settings of the plan applier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanApplierConfig {
    /// Accepted plans committing at once (Nomad's `plan_apply_pipeline`, settled at 6–8).
    pub max_in_flight: usize,
    /// How long the applier waits for its state to reach a plan's snapshot index (10 s).
    pub snapshot_wait: Duration,
}

impl Default for PlanApplierConfig {
    fn default() -> Self {
        PlanApplierConfig {
            max_in_flight: 8,
            snapshot_wait: Duration::from_secs(10),
        }
    }
}

impl PlanApplierConfig {
    /// Checks every value is usable.
    pub fn validate(&self) -> Result<(), PlanQueueError> {
        if self.max_in_flight == 0 {
            return Err(PlanQueueError::InvalidConfig(
                "max_in_flight must be at least 1",
            ));
        }
        if self.snapshot_wait.is_zero() {
            return Err(PlanQueueError::InvalidConfig(
                "snapshot_wait must be greater than zero",
            ));
        }
        Ok(())
    }
}

/// What a submitter waits on.
pub type PlanReply = oneshot::Receiver<Result<PlanResult, PlanQueueError>>;
type PlanReplySender = oneshot::Sender<Result<PlanResult, PlanQueueError>>;

/// A plan waiting in the queue, with where its answer goes.
#[derive(Debug)]
pub struct PendingPlan {
    /// The plan.
    pub plan: Plan,
    /// When it was enqueued.
    pub enqueued: Instant,
    seq: u64,
    reply: PlanReplySender,
}

impl PendingPlan {
    /// Answers the submitter (a submitter that gave up is ignored).
    pub fn respond(self, result: Result<PlanResult, PlanQueueError>) {
        let _ = self.reply.send(result);
    }
}

impl Ord for PendingPlan {
    fn cmp(&self, other: &Self) -> Ordering {
        self.plan
            .priority
            .cmp(&other.plan.priority)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for PendingPlan {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for PendingPlan {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
    }
}

impl Eq for PendingPlan {}

/// The queue's state, without I/O.
#[derive(Debug, Default)]
pub struct PlanQueueCore {
    enabled: bool,
    heap: BinaryHeap<PendingPlan>,
    next_seq: u64,
}

impl PlanQueueCore {
    /// A disabled, empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// True on the leader.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Enables or disables the queue; disabling answers every queued plan "flushed".
    pub fn set_enabled(&mut self, enabled: bool) {
        self.enabled = enabled;
        if !enabled {
            for pending in std::mem::take(&mut self.heap) {
                pending.respond(Err(PlanQueueError::Flushed));
            }
        }
    }

    /// Queues a plan; the receiver gets its result.
    pub fn enqueue(&mut self, plan: Plan, now: Instant) -> Result<PlanReply, PlanQueueError> {
        if !self.enabled {
            return Err(PlanQueueError::Disabled);
        }
        let (tx, rx) = oneshot::channel();
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(PendingPlan {
            plan,
            enqueued: now,
            seq,
            reply: tx,
        });
        Ok(rx)
    }

    /// The most urgent plan, if any.
    pub fn pop(&mut self) -> Result<Option<PendingPlan>, PlanQueueError> {
        if !self.enabled {
            return Err(PlanQueueError::Disabled);
        }
        Ok(self.heap.pop())
    }

    /// Plans waiting.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when no plan waits.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// The plan queue handle (clone freely).
#[derive(Debug, Clone, Default)]
pub struct PlanQueue {
    shared: Arc<QueueShared>,
}

#[derive(Debug, Default)]
struct QueueShared {
    core: Mutex<PlanQueueCore>,
    ready: Notify,
}

impl PlanQueue {
    /// A disabled queue.
    pub fn new() -> PlanQueue {
        PlanQueue::default()
    }

    fn lock(&self) -> MutexGuard<'_, PlanQueueCore> {
        self.shared
            .core
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// True on the leader.
    pub fn enabled(&self) -> bool {
        self.lock().is_enabled()
    }

    /// Enables (leader) or disables (flushing every queued plan) the queue.
    pub fn set_enabled(&self, enabled: bool) {
        let mut core = self.lock();
        core.set_enabled(enabled);
        metrics::gauge!("teamster_plan_queue_depth").set(core.len() as f64);
        drop(core);
        // Wakes a waiting applier so it sees the change.
        self.shared.ready.notify_waiters();
        info!(enabled, "plan queue enabled status changed");
    }

    /// Queues a plan; await the receiver for its result.
    pub fn enqueue(&self, plan: Plan) -> Result<PlanReply, PlanQueueError> {
        let mut core = self.lock();
        let rx = core.enqueue(plan, Instant::now())?;
        metrics::gauge!("teamster_plan_queue_depth").set(core.len() as f64);
        drop(core);
        self.shared.ready.notify_one();
        Ok(rx)
    }

    /// Waits for the most urgent plan; an error once the queue is disabled.
    pub async fn dequeue(&self) -> Result<PendingPlan, PlanQueueError> {
        loop {
            let notified = self.shared.ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut core = self.lock();
                if let Some(p) = core.pop()? {
                    metrics::gauge!("teamster_plan_queue_depth").set(core.len() as f64);
                    return Ok(p);
                }
            }
            notified.await;
        }
    }

    /// Plans waiting.
    pub fn depth(&self) -> usize {
        self.lock().len()
    }
}

/// The outcome of one commit, sent back to the applier loop.
struct Committed {
    token: OverlayToken,
    index: Option<u64>,
}

/// The plan applier loop (one per leadership term).
pub struct PlanApplier {
    node: Arc<RaftNode>,
    queue: PlanQueue,
    clock: SharedClock,
    config: PlanApplierConfig,
}

impl PlanApplier {
    /// An applier for `queue` committing through `node`.
    pub fn new(
        node: Arc<RaftNode>,
        queue: PlanQueue,
        clock: SharedClock,
        config: PlanApplierConfig,
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
        let mut in_flight = 0usize;
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
                    in_flight -= 1;
                    on_done(c, &mut overlay, &mut committed);
                    continue;
                }
            };
            while let Ok(c) = done_rx.try_recv() {
                in_flight -= 1;
                on_done(c, &mut overlay, &mut committed);
            }
            // Back-pressure: at most `max_in_flight` commits outstanding.
            while in_flight >= self.config.max_in_flight {
                match done_rx.recv().await {
                    Some(c) => {
                        in_flight -= 1;
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
                    .snapshot_min_index(pending.plan.snapshot_index, self.config.snapshot_wait)
                    .await
                {
                    Ok(s) => s,
                    Err(_) => {
                        let index = pending.plan.snapshot_index;
                        pending.respond(Err(PlanQueueError::SnapshotTimeout {
                            index,
                            timeout: self.config.snapshot_wait,
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
            if evaluation.is_no_op() {
                if evaluation.is_partial() {
                    result.refresh_index = evaluation.refresh_index_floor.max(seen).max(1);
                }
                metrics::counter!("teamster_plan_applied_total", "outcome" => "no_op").increment(1);
                pending.respond(Ok(result));
                continue;
            }
            let token = overlay.record(&evaluation);
            let command =
                Command::ApplyPlanResults(evaluation.apply_command(self.clock.now_unix_nanos()));
            let allocs = evaluation.accepted_allocs() as u64;
            let partial = evaluation.is_partial();
            let floor = evaluation.refresh_index_floor;
            let node = self.node.clone();
            let done = done_tx.clone();
            in_flight += 1;
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
                    let _ = done.send(Committed { token, index });
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
    config: PlanApplierConfig,
    applier: Mutex<Option<(CancellationToken, tokio::task::JoinHandle<()>)>>,
}

impl PlanQueueDuty {
    /// A duty for `queue` committing through `node`.
    pub fn new(
        node: Arc<RaftNode>,
        queue: PlanQueue,
        clock: SharedClock,
        config: PlanApplierConfig,
    ) -> PlanQueueDuty {
        PlanQueueDuty {
            node,
            queue,
            clock,
            config,
            applier: Mutex::new(None),
        }
    }

    fn take(&self) -> Option<(CancellationToken, tokio::task::JoinHandle<()>)> {
        self.applier
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }
}

impl LeaderDuty for PlanQueueDuty {
    fn name(&self) -> &'static str {
        "plan queue"
    }

    fn establish(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            if let Some((cancel, task)) = self.take() {
                cancel.cancel();
                let _ = task.await;
            }
            self.queue.set_enabled(true);
            let cancel = CancellationToken::new();
            let applier = PlanApplier::new(
                self.node.clone(),
                self.queue.clone(),
                self.clock.clone(),
                self.config.clone(),
            );
            let task = tokio::spawn(
                applier
                    .run(cancel.clone())
                    .instrument(tracing::info_span!("plan_applier")),
            );
            *self.applier.lock().unwrap_or_else(PoisonError::into_inner) = Some((cancel, task));
            Ok(())
        })
    }

    fn revoke(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.queue.set_enabled(false);
            if let Some((cancel, task)) = self.take() {
                cancel.cancel();
                let _ = task.await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use teamster_storage::model::EvalId;

    use super::*;

    fn plan(eval: &str, priority: u32) -> Plan {
        Plan {
            eval_id: EvalId::new(eval),
            priority,
            ..Plan::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn plans_leave_by_priority_then_age() {
        let q = PlanQueue::new();
        assert_eq!(
            q.enqueue(plan("x", 50)).unwrap_err(),
            PlanQueueError::Disabled
        );
        q.set_enabled(true);
        let _a = q.enqueue(plan("a", 50)).unwrap();
        let _b = q.enqueue(plan("b", 70)).unwrap();
        let _c = q.enqueue(plan("c", 50)).unwrap();
        let _d = q.enqueue(plan("d", 70)).unwrap();
        let mut order = Vec::new();
        for _ in 0..4 {
            order.push(q.dequeue().await.unwrap().plan.eval_id.to_string());
        }
        assert_eq!(order, ["b", "d", "a", "c"]);
        assert_eq!(q.depth(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn disabling_flushes_waiting_plans_and_stops_the_dequeuer() {
        let q = PlanQueue::new();
        q.set_enabled(true);
        let rx = q.enqueue(plan("a", 50)).unwrap();
        let waiter = {
            let q = q.clone();
            tokio::spawn(async move {
                // Takes "a", then waits for more until the queue is disabled.
                let first = q.dequeue().await.unwrap();
                let second = q.dequeue().await;
                (first, second)
            })
        };
        tokio::task::yield_now().await;
        let _queued = q.enqueue(plan("b", 50));
        tokio::task::yield_now().await;
        q.set_enabled(false);
        let (first, second) = waiter.await.unwrap();
        assert_eq!(first.plan.eval_id.as_str(), "a");
        // "b" was either taken by the dequeuer or flushed; either way the dequeuer ends.
        if let Err(e) = second {
            assert_eq!(e, PlanQueueError::Disabled);
        }
        drop(first);
        assert!(
            rx.await.is_err(),
            "the dropped pending plan closes its reply"
        );
        let q2 = PlanQueue::new();
        q2.set_enabled(true);
        let rx = q2.enqueue(plan("c", 50)).unwrap();
        q2.set_enabled(false);
        assert_eq!(rx.await.unwrap().unwrap_err(), PlanQueueError::Flushed);
    }
}
