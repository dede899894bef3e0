//! The plan queue: [`PlanQueueCore`], the sans-IO heap (higher plan priority first, then
//! older), and [`PlanQueue`], its `Clone` handle on tokio that wakes the applier and carries
//! each plan's answer back on a oneshot.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use teamster_storage::model::{Plan, PlanResult};
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use tracing::info;

use crate::server::leader_service::Switch;

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
    enabled: Switch,
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
        self.enabled.is_on()
    }

    /// Enables or disables the queue; disabling answers every queued plan "flushed".
    pub fn set_enabled(&mut self, enabled: bool) {
        self.enabled.set(enabled);
        if !enabled {
            for pending in std::mem::take(&mut self.heap) {
                pending.respond(Err(PlanQueueError::Flushed));
            }
        }
    }

    /// Queues a plan; the receiver gets its result.
    pub fn enqueue(&mut self, plan: Plan, now: Instant) -> Result<PlanReply, PlanQueueError> {
        self.enabled.check(PlanQueueError::Disabled)?;
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
        self.enabled.check(PlanQueueError::Disabled)?;
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
