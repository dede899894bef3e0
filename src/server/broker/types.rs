//! The broker's vocabulary: its errors, its queues ([`SchedulerQueue`], [`QueueSet`]), the
//! delivery [`Token`], its counts, the [`Effects`] its core reports, and its constants
//! (including the name and buckets of the enqueue → ack latency histogram).

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use rand::RngCore;
use serde::{Deserialize, Serialize};
use teamster_storage::model::{EvalId, JobType};
use tokio::time::Instant;

/// Name of the pseudo scheduler type that holds evals past the delivery limit (Nomad's
/// `failedQueue`); the leader's failed-eval reaper dequeues it.
pub const FAILED_QUEUE: &str = "_failed";

/// The broker's enqueue → ack latency histogram. It is exported with fixed buckets (not as a
/// rolling summary) so that a load generator can difference two scrapes and read
/// percentiles of exactly its own run.
pub const EVAL_LATENCY_METRIC: &str = "teamster_broker_eval_latency_seconds";

/// Bucket bounds of [`EVAL_LATENCY_METRIC`]: geometric, ×1.25 from 1 ms to about 10 min,
/// so an interpolated percentile is off by at most a quarter.
pub fn eval_latency_buckets() -> Vec<f64> {
    std::iter::successors(Some(0.001f64), |b| Some(b * 1.25))
        .take_while(|b| *b < 600.0)
        .collect()
}

/// Timeout the `Eval.Dequeue` RPC uses when the caller passes none (Nomad's
/// `DefaultDequeueTimeout`).
pub const DEFAULT_DEQUEUE_TIMEOUT: Duration = Duration::from_secs(1);

/// Longest delay a timer is armed for; anything beyond (a `Wait` or `WaitUntil` decades away,
/// which only bad input produces) is clamped so instant arithmetic cannot overflow.
pub(super) const MAX_TIMER_DELAY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// Why a broker or blocked-evals call was refused.
///
/// The messages are Nomad's where Nomad has one. The RPC layer maps [`BrokerError::Disabled`]
/// and [`BrokerError::BlockedEvalsDisabled`] to "not leader".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerError {
    /// The broker is disabled: this server is not the leader (or leadership is changing).
    #[error("eval broker disabled")]
    Disabled,
    /// The blocked-evals tracker is disabled: this server is not the leader.
    #[error("blocked evals tracker disabled")]
    BlockedEvalsDisabled,
    /// `dequeue` was called without any scheduler type.
    #[error("dequeue requires at least one scheduler type")]
    NoSchedulers,
    /// Ack or Nack of an eval that has no outstanding delivery.
    #[error("Evaluation ID not found")]
    NotFound {
        /// The eval the caller named.
        eval_id: EvalId,
    },
    /// Reset, pause or resume of the nack timer of an eval that has no outstanding delivery.
    #[error("evaluation is not outstanding")]
    NotOutstanding {
        /// The eval the caller named.
        eval_id: EvalId,
    },
    /// The token belongs to another delivery of the eval (an older one, or one from before a
    /// leadership change).
    #[error("evaluation token does not match")]
    TokenMismatch {
        /// The eval the caller named.
        eval_id: EvalId,
    },
    /// The delivery's nack timer had already expired; the eval was nacked and will be (or
    /// was) delivered again.
    #[error("evaluation nack timeout reached")]
    NackTimeoutReached {
        /// The eval the caller named.
        eval_id: EvalId,
    },
    /// A configuration value is out of range.
    #[error("invalid broker configuration: {0}")]
    InvalidConfig(#[from] crate::util::InvalidSetting),
}

/// A ready queue of the broker: one per scheduler type, plus `_failed`.
///
/// Evals are queued by their `Type`; the set of types is closed, so the queues are a fixed
/// array indexed by this enum rather than a map of strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SchedulerQueue {
    /// `service` jobs.
    Service,
    /// `batch` jobs.
    Batch,
    /// `system` jobs.
    System,
    /// `sysbatch` jobs.
    SysBatch,
    /// `_core` (garbage collection) evals.
    Core,
    /// `_failed`: evals past the delivery limit, for the failed-eval reaper.
    Failed,
}

impl SchedulerQueue {
    /// Every queue, in index order.
    pub const ALL: [SchedulerQueue; 6] = [
        SchedulerQueue::Service,
        SchedulerQueue::Batch,
        SchedulerQueue::System,
        SchedulerQueue::SysBatch,
        SchedulerQueue::Core,
        SchedulerQueue::Failed,
    ];

    /// The queue an eval of this type is scheduled from.
    pub fn for_job_type(job_type: JobType) -> Self {
        match job_type {
            JobType::Service => SchedulerQueue::Service,
            JobType::Batch => SchedulerQueue::Batch,
            JobType::System => SchedulerQueue::System,
            JobType::SysBatch => SchedulerQueue::SysBatch,
            JobType::Core => SchedulerQueue::Core,
        }
    }

    /// The queue with this (Nomad) name, if any: `service`, `batch`, `system`, `sysbatch`,
    /// `_core`, `_failed`.
    pub fn from_name(name: &str) -> Option<Self> {
        SchedulerQueue::ALL.into_iter().find(|q| q.as_str() == name)
    }

    /// Nomad's name of the queue (the scheduler type, or `_failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            SchedulerQueue::Service => JobType::Service.as_str(),
            SchedulerQueue::Batch => JobType::Batch.as_str(),
            SchedulerQueue::System => JobType::System.as_str(),
            SchedulerQueue::SysBatch => JobType::SysBatch.as_str(),
            SchedulerQueue::Core => JobType::Core.as_str(),
            SchedulerQueue::Failed => FAILED_QUEUE,
        }
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }
}

impl From<JobType> for SchedulerQueue {
    fn from(job_type: JobType) -> Self {
        SchedulerQueue::for_job_type(job_type)
    }
}

impl fmt::Display for SchedulerQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of [`SchedulerQueue`]s (a bit set): the types a dequeuer asks for, or the queues
/// that just received work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QueueSet(pub(super) u8);

impl QueueSet {
    /// No queue.
    pub const EMPTY: QueueSet = QueueSet(0);
    /// Every queue, `_failed` included.
    pub const ALL: QueueSet = QueueSet(0b11_1111);

    /// The queues named in `names`; names of no queue are ignored (a dequeuer asking only for
    /// unknown types simply waits, as in Nomad).
    pub fn from_names<S: AsRef<str>>(names: &[S]) -> Self {
        names
            .iter()
            .filter_map(|n| SchedulerQueue::from_name(n.as_ref()))
            .collect()
    }

    /// The set with `queue` added.
    pub fn with(self, queue: SchedulerQueue) -> Self {
        QueueSet(self.0 | 1 << queue.index())
    }

    /// Adds `queue`.
    pub fn insert(&mut self, queue: SchedulerQueue) {
        *self = self.with(queue);
    }

    /// True if `queue` is in the set.
    pub fn contains(self, queue: SchedulerQueue) -> bool {
        self.0 & (1 << queue.index()) != 0
    }

    /// True if the sets share a queue.
    pub fn intersects(self, other: QueueSet) -> bool {
        self.0 & other.0 != 0
    }

    /// True for the empty set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The queues in the set, in index order.
    pub fn iter(self) -> impl Iterator<Item = SchedulerQueue> {
        SchedulerQueue::ALL
            .into_iter()
            .filter(move |q| self.contains(*q))
    }
}

impl FromIterator<SchedulerQueue> for QueueSet {
    fn from_iter<I: IntoIterator<Item = SchedulerQueue>>(iter: I) -> Self {
        iter.into_iter().fold(QueueSet::EMPTY, QueueSet::with)
    }
}

/// The token of one delivery of an eval: a random UUID-format string.
///
/// A new token is drawn on every delivery, so an Ack or Nack from an older delivery (before a
/// nack, or before a leadership change) can never touch a later one.
///
/// Shared (`Arc<str>`), so the copy kept with the outstanding delivery costs no allocation.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Token(Arc<str>);

impl Token {
    /// Wraps a token received from a worker.
    pub fn new(token: impl AsRef<str>) -> Self {
        Token(Arc::from(token.as_ref()))
    }

    /// A fresh random token.
    pub fn random<R: RngCore + ?Sized>(rng: &mut R) -> Self {
        Token::new(crate::util::new_uuid(rng))
    }

    /// The token as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for Token {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Token {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Token {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<String> for Token {
    fn from(token: String) -> Self {
        Token(Arc::from(token))
    }
}

impl From<&str> for Token {
    fn from(token: &str) -> Self {
        Token::new(token)
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// Counts of one queue (per scheduler type). For `ready` and `unacked` the queue is the one
/// the eval sits in or was delivered from (`_failed` included); for `pending`, `waiting` and
/// `cancelable` it is the eval's own type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Evals ready to be dequeued.
    pub ready: usize,
    /// Evals delivered and not yet acked or nacked.
    pub unacked: usize,
    /// Evals waiting for their job's in-flight eval to finish.
    pub pending: usize,
    /// Evals held back by `Wait`, `WaitUntil` or a nack backoff.
    pub waiting: usize,
    /// Superseded evals waiting to be written as canceled.
    pub cancelable: usize,
}

/// A snapshot of the broker's counts (Nomad's `BrokerStats`), exported as gauges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerStats {
    /// Evals ready to be dequeued, all queues.
    pub total_ready: usize,
    /// Outstanding deliveries.
    pub total_unacked: usize,
    /// Evals waiting behind their job's in-flight eval.
    pub total_pending: usize,
    /// Evals held back by a delay.
    pub total_waiting: usize,
    /// Superseded evals waiting for the cancelable reaper.
    pub total_cancelable: usize,
    /// The same counts per queue (every queue is present).
    pub by_scheduler: BTreeMap<SchedulerQueue, QueueStats>,
}

/// What the shell must do after a core call (see [`EvalBrokerCore::take_effects`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Effects {
    /// Queues that received ready work: wake every dequeuer waiting on one of them.
    pub wake: QueueSet,
    /// Wake every waiting dequeuer (the broker was disabled; they will get the error).
    pub wake_all: bool,
    /// The earliest timer is now earlier than the one the timer task sleeps on: re-arm it.
    pub arm_timer: Option<Instant>,
    /// Nack timers that fired (deliveries nacked because the worker went quiet).
    pub nack_timeouts: u64,
    /// Evals that became cancelable: wake the cancelable reaper.
    pub cancelable_added: usize,
    /// For every eval acknowledged: the time from its first enqueue to the ack (the eval
    /// latency the shell records as a histogram).
    pub acked_latencies: Vec<Duration>,
}

impl Effects {
    /// True when there is nothing to do.
    pub fn is_empty(&self) -> bool {
        *self == Effects::default()
    }
}

/// Where [`EvalBrokerCore::enqueue`] put an eval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnqueueOutcome {
    /// In its scheduler type's ready queue.
    Ready,
    /// Behind another eval of the same job (in the job's pending heap).
    Pending,
    /// Held back by `Wait` or `WaitUntil` until this instant.
    Waiting {
        /// When it becomes ready (or pending).
        until: Instant,
    },
    /// Parked until the outstanding delivery with the given token is acked (dropped on nack).
    Requeued,
    /// Already known to the broker: dropped.
    Duplicate,
}
