//! The eval broker: the leader's queue of evaluations waiting for a scheduler worker.
//!
//! Every `pending` evaluation the FSM applies on the leader is enqueued here; scheduler workers
//! on every server dequeue one (through the `Eval.Dequeue` RPC), schedule it and ack or nack it.
//! Delivery is at-least-once. The semantics and constants are Nomad's (`nomad/eval_broker.go`):
//!
//! - **Ready queues** per scheduler type ([`SchedulerQueue`]), each a heap ordered by priority
//!   (higher first) then create index (older first), plus the `_failed` queue.
//! - **Dequeue** picks, among the requested types, the ones whose *true heap roots* tie at the
//!   highest priority, and one of those at random (fairness across types). Every delivery gets a
//!   fresh random [`Token`] and a **nack timer** (default 60 s) that nacks it if the worker goes
//!   quiet. The timer is reset by [`EvalBroker::outstanding_reset`] (the worker's writes prove it
//!   is alive) and paused while the eval's plan waits in the plan queue.
//! - **Nack** re-enqueues after a delay (1 s after the first delivery, then (n−1) × 20 s); the
//!   delivery that reaches the limit (default 3) moves the eval to the `_failed` queue, which the
//!   leader's failed-eval reaper drains ([`failed_eval_update`] builds its raft write).
//! - **One eval per job in flight**: while an eval of a job is ready or unacked, newer ones wait
//!   in a per-job pending heap (highest priority, then newest `ModifyIndex`). On Ack the root of
//!   that heap is enqueued and every other pending eval of the job becomes *cancelable*: its
//!   work was covered by the acked run. The cancelable reaper drains them in batches
//!   ([`EvalBroker::cancelable`], [`CANCELABLE_BATCH_SIZE`]).
//! - **Delayed evals**: `Wait` (a duration, also used for nack backoff) and `WaitUntil` (a wall
//!   clock time) hold an eval back until it is due.
//! - An eval re-submitted with the token of its outstanding delivery (a *reblock* found a missed
//!   unblock) is parked until that delivery is acked, and dropped if it is nacked.
//!
//! Two of Nomad's quirks are deliberately not reproduced: the cross-type priority comparison
//! peeks at the real heap roots (Nomad's `Peek` returns the last slice element), and wake-ups
//! are not lossy: every dequeuer waiting on a type that receives work is woken (Nomad signals a
//! single-slot channel per type and lets the other dequeuers find out at their timeout).
//!
//! # Shape: a sans-IO core and an async shell
//!
//! [`EvalBrokerCore`] is a plain struct: no tokio runtime, no clock reads, no global RNG. Time
//! enters as `tokio::time::Instant` *values* passed to each call (plus the wall clock in Unix
//! nanoseconds on the enqueue paths, to place `WaitUntil`), and randomness comes from the
//! seedable [`StdRng`] given at construction. Timers are data inside the core (one ordered map
//! of deadlines); every call first fires what is due at its `now`, so results never depend on
//! how late a timer task runs. The core reports what the outside world must do as [`Effects`]:
//! which dequeuers to wake, when the earliest timer moved earlier, how many nack timers fired.
//!
//! [`EvalBroker`] is the shell: a `Clone` handle around `Arc<Mutex<core>>`, one timer task that
//! sleeps until the core's next deadline (`tokio::time`, so tests run on paused time), a stats
//! task, and the blocking [`EvalBroker::dequeue`]. A waiting dequeuer registers itself (its
//! types and its own `Notify`) in the same critical section in which it found nothing, so no
//! enqueue can slip between the check and the registration, and `Notify` keeps a permit if the
//! wake-up lands before the dequeuer starts waiting.
//!
//! ```text
//!  FSM: pending eval ──enqueue─────┐
//!  BlockedEvals ──────enqueue_all──┤
//!                ┌─────────────────┘
//!                ▼
//!            delayed? ──yes──▶ waiting (Wait, WaitUntil) ──due──┐
//!                │ no                                           │
//!                ▼                                              │
//!            job busy? ◀────────────────────────────────────────┘
//!                │ yes ──▶ pending heap of the job ──on Ack: best one takes the slot,
//!                │ no                                 the rest ──▶ cancelable ──▶ reaper
//!                ▼
//!            ready heap of its type ──dequeue: token, nack timer──▶ worker ──ack──▶ done
//!                ▲                                                    │
//!                └────────── nack (after 1 s, then 20 s) ◀────────────┤ (or nack timeout)
//!            ready heap `_failed` ◀── nack of the 3rd delivery ◀──────┘
//!                └──dequeue──▶ failed-eval reaper: eval failed + follow-up, ack
//! ```
//!
//! While disabled (on followers, and on a leader whose broker was just flushed) every call
//! answers [`BrokerError::Disabled`]; enabling starts empty, and the leader restores every
//! pending eval from the state store.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use serde::{Deserialize, Serialize};
use teamster_storage::model::{
    EvalId, EvalStatus, EvalTrigger, Evaluation, JobId, JobType, Namespace, Timestamp,
};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Name of the pseudo scheduler type that holds evals past the delivery limit (Nomad's
/// `failedQueue`); the leader's failed-eval reaper dequeues it.
pub const FAILED_QUEUE: &str = "_failed";

/// Most cancelable evals written as canceled in one raft entry: Nomad's
/// `MaxUUIDsPerWriteRequest` (7281) divided by ten.
pub const CANCELABLE_BATCH_SIZE: usize = 728;

/// Upper bound for [`EvalBrokerConfig::cancelable_batch_size`] (Nomad's
/// `MaxUUIDsPerWriteRequest`), so one cancel write stays a reasonable raft entry.
pub const MAX_CANCELABLE_BATCH_SIZE: usize = 7281;

/// Timeout the `Eval.Dequeue` RPC uses when the caller passes none (Nomad's
/// `DefaultDequeueTimeout`).
pub const DEFAULT_DEQUEUE_TIMEOUT: Duration = Duration::from_secs(1);

/// Status description of an eval canceled because a newer eval of its job was processed.
pub const CANCELED_DESCRIPTION: &str = "canceled after more recent eval was processed";

/// Longest delay a timer is armed for; anything beyond (a `Wait` or `WaitUntil` decades away,
/// which only bad input produces) is clamped so instant arithmetic cannot overflow.
const MAX_TIMER_DELAY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

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
    #[error("invalid broker configuration: {field} {reason}")]
    InvalidConfig {
        /// The offending field.
        field: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// Settings of the eval broker. Defaults are Nomad's (`nomad/config.go`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalBrokerConfig {
    /// How long a delivery may stay un-acked before the broker nacks it itself, so a crashed
    /// or partitioned worker cannot hold an eval forever (`EvalNackTimeout`, 60 s).
    pub nack_timeout: Duration,
    /// Deliveries before an eval is given up and moved to the `_failed` queue, so a poison
    /// eval cannot crash workers forever (`EvalDeliveryLimit`, 3).
    pub delivery_limit: u32,
    /// Delay before re-enqueueing after the first failed delivery (1 s).
    pub initial_nack_delay: Duration,
    /// Compounding delay after later failed deliveries: (n−1) × this (20 s).
    pub subsequent_nack_delay: Duration,
    /// Fixed part of the `Wait` of a failed eval's follow-up (1 min).
    pub failed_followup_baseline_delay: Duration,
    /// Random part of that `Wait`, uniform in `[0, range)` (5 min), so failed evals of many
    /// jobs do not all retry at once.
    pub failed_followup_delay_range: Duration,
    /// Most cancelable evals the reaper writes per raft entry (728).
    pub cancelable_batch_size: usize,
    /// Period of the cancelable reaper's straggler sweep; it also runs after every Ack (5 s).
    pub reap_cancelable_interval: Duration,
    /// Period of the broker's gauge emission (1 s).
    pub stats_interval: Duration,
}

impl Default for EvalBrokerConfig {
    fn default() -> Self {
        Self {
            nack_timeout: Duration::from_secs(60),
            delivery_limit: 3,
            initial_nack_delay: Duration::from_secs(1),
            subsequent_nack_delay: Duration::from_secs(20),
            failed_followup_baseline_delay: Duration::from_secs(60),
            failed_followup_delay_range: Duration::from_secs(5 * 60),
            cancelable_batch_size: CANCELABLE_BATCH_SIZE,
            reap_cancelable_interval: Duration::from_secs(5),
            stats_interval: Duration::from_secs(1),
        }
    }
}

impl EvalBrokerConfig {
    /// A profile for tests: the same logic with every delay shrunk to milliseconds or a few
    /// seconds, so real-time cluster tests finish quickly.
    pub fn for_tests() -> Self {
        Self {
            nack_timeout: Duration::from_secs(5),
            delivery_limit: 3,
            initial_nack_delay: Duration::from_millis(50),
            subsequent_nack_delay: Duration::from_millis(200),
            failed_followup_baseline_delay: Duration::from_millis(500),
            failed_followup_delay_range: Duration::from_millis(500),
            cancelable_batch_size: CANCELABLE_BATCH_SIZE,
            reap_cancelable_interval: Duration::from_millis(200),
            stats_interval: Duration::from_millis(100),
        }
    }

    /// Checks every value is usable; called by the constructors.
    pub fn validate(&self) -> Result<(), BrokerError> {
        let invalid = |field, reason| Err(BrokerError::InvalidConfig { field, reason });
        if self.nack_timeout.is_zero() {
            return invalid("nack_timeout", "must be greater than zero");
        }
        if self.delivery_limit == 0 {
            return invalid("delivery_limit", "must be at least 1");
        }
        if self.cancelable_batch_size == 0 || self.cancelable_batch_size > MAX_CANCELABLE_BATCH_SIZE
        {
            return invalid("cancelable_batch_size", "must be between 1 and 7281");
        }
        if self.reap_cancelable_interval.is_zero() {
            return invalid("reap_cancelable_interval", "must be greater than zero");
        }
        if self.stats_interval.is_zero() {
            return invalid("stats_interval", "must be greater than zero");
        }
        Ok(())
    }

    /// The delay before re-enqueueing an eval nacked after `deliveries` deliveries
    /// (Nomad's `nackReenqueueDelay`): none before any delivery, the initial delay after the
    /// first, (n−1) × the subsequent delay after the n-th.
    pub fn nack_reenqueue_delay(&self, deliveries: u32) -> Duration {
        match deliveries {
            0 => Duration::ZERO,
            1 => self.initial_nack_delay,
            n => self.subsequent_nack_delay.saturating_mul(n - 1),
        }
    }
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

    fn index(self) -> usize {
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
pub struct QueueSet(u8);

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
        Token::new(String::from_utf8_lossy(&uuid_bytes(rng)))
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

/// A random version-4 UUID string (`xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx`) drawn from `rng`,
/// so tokens and follow-up eval ids are reproducible under a seeded RNG.
pub fn random_uuid<R: RngCore + ?Sized>(rng: &mut R) -> String {
    String::from_utf8_lossy(&uuid_bytes(rng)).into_owned()
}

/// The ASCII text of a random version-4 UUID.
fn uuid_bytes<R: RngCore + ?Sized>(rng: &mut R) -> [u8; 36] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut bytes = [0u8; 16];
    rng.fill_bytes(&mut bytes);
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let mut out = [b'-'; 36];
    let mut at = 0;
    for (i, byte) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            at += 1;
        }
        out[at] = HEX[usize::from(byte >> 4)];
        out[at + 1] = HEX[usize::from(byte & 0x0f)];
        at += 2;
    }
    out
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

type JobKey = (Namespace, JobId);

fn job_key(eval: &Evaluation) -> JobKey {
    (eval.namespace.clone(), eval.job_id.clone())
}

/// `now + delay`, with the delay clamped so the arithmetic cannot overflow.
fn deadline_after(now: Instant, delay: Duration) -> Instant {
    now.checked_add(delay.min(MAX_TIMER_DELAY)).unwrap_or(now)
}

/// The monotonic instant matching the eval's `WaitUntil`, given the wall clock (`unix_nanos`)
/// at `now`; `None` when the eval has no `WaitUntil`.
fn wait_until_instant(eval: &Evaluation, now: Instant, unix_nanos: i64) -> Option<Instant> {
    if eval.wait_until.is_zero() {
        return None;
    }
    let delay = match eval.wait_until.unix_nanos() {
        Some(until) => {
            let nanos = i128::from(until) - i128::from(unix_nanos);
            if nanos <= 0 {
                Duration::ZERO
            } else {
                Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
            }
        }
        // Representable as a timestamp but not as i64 nanoseconds: before 1677 (long past)
        // or after 2262 (clamped like any far-away deadline).
        None if eval.wait_until < Timestamp::from_unix_nanos(0) => Duration::ZERO,
        None => MAX_TIMER_DELAY,
    };
    Some(deadline_after(now, delay))
}

/// A deadline in the core's timer map; `seq` makes keys unique.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct TimerKey {
    at: Instant,
    seq: u64,
}

#[derive(Debug)]
enum TimerKind {
    /// The nack timer of the eval's outstanding delivery.
    Nack(EvalId),
    /// A delayed eval (`Wait`, `WaitUntil`, nack backoff) becomes due.
    Wait(EvalId),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NackTimer {
    Running(TimerKey),
    /// Stopped while the eval's plan sits in the plan queue.
    Paused,
}

/// One outstanding delivery.
#[derive(Debug)]
struct Unacked {
    eval: Box<Evaluation>,
    token: Token,
    /// The queue it was dequeued from (its type, or `_failed`).
    queue: SchedulerQueue,
    timer: NackTimer,
}

/// What the broker knows of an eval it holds (waiting, pending, ready or unacked).
#[derive(Debug)]
struct EvalEntry {
    /// Deliveries so far (Nomad's dequeue count), against the delivery limit.
    deliveries: u32,
    /// When the broker first took the eval in (for the enqueue → ack latency).
    enqueued_at: Instant,
    /// The outstanding delivery, if the eval is out with a worker.
    unacked: Option<Unacked>,
}

/// A job with an eval in flight (ready, unacked or in nack backoff).
#[derive(Debug)]
struct JobSlot {
    /// The in-flight eval.
    holder: EvalId,
    /// The job's other evals, waiting their turn.
    pending: BinaryHeap<PendingEntry>,
}

#[derive(Debug)]
struct WaitingEval {
    eval: Box<Evaluation>,
    key: TimerKey,
}

/// An eval re-submitted with its outstanding delivery's token.
#[derive(Debug)]
struct Requeued {
    eval: Box<Evaluation>,
    /// Its `WaitUntil` converted when it was submitted (the ack carries no wall clock).
    wait_until_at: Option<Instant>,
}

/// A ready-heap entry: higher priority first, then lower create index, then arrival order.
#[derive(Debug)]
struct ReadyEntry {
    priority: u32,
    create_index: u64,
    seq: u64,
    eval: Box<Evaluation>,
}

impl Ord for ReadyEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority
            .cmp(&other.priority)
            .then_with(|| other.create_index.cmp(&self.create_index))
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for ReadyEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for ReadyEntry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for ReadyEntry {}

/// A pending-heap entry: higher priority first, then higher modify index (newest), then the
/// later arrival.
#[derive(Debug)]
struct PendingEntry {
    priority: u32,
    modify_index: u64,
    seq: u64,
    eval: Box<Evaluation>,
}

impl Ord for PendingEntry {
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority
            .cmp(&other.priority)
            .then_with(|| self.modify_index.cmp(&other.modify_index))
            .then_with(|| self.seq.cmp(&other.seq))
    }
}

impl PartialOrd for PendingEntry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for PendingEntry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PendingEntry {}

/// The broker's state machine: queues, deliveries and timers, without I/O.
///
/// Every method that takes `now` first fires the timers due at `now` (nack timeouts, delayed
/// evals), then does its work. After calls, the owner drains [`EvalBrokerCore::take_effects`]
/// and sleeps until [`EvalBrokerCore::next_timer`], calling [`EvalBrokerCore::advance`] then.
///
/// An enqueue → dequeue → ack round trip costs five hash lookups: the eval map (enqueue,
/// dequeue, ack) and the job map (enqueue, ack).
#[derive(Debug)]
pub struct EvalBrokerCore {
    config: EvalBrokerConfig,
    rng: StdRng,
    enabled: bool,
    /// Every eval the broker holds, its delivery count and outstanding delivery.
    evals: HashMap<EvalId, EvalEntry>,
    /// Jobs with an eval in flight, and their pending evals.
    jobs: HashMap<JobKey, JobSlot>,
    /// Superseded pending evals, oldest first.
    cancelable: VecDeque<Box<Evaluation>>,
    ready: [BinaryHeap<ReadyEntry>; 6],
    /// Evals parked until the delivery with this token is acked.
    requeue: HashMap<Token, Requeued>,
    waiting: HashMap<EvalId, WaitingEval>,
    timers: BTreeMap<TimerKey, TimerKind>,
    /// Per-queue counts; `ready` is read from the heaps instead.
    stats: [QueueStats; 6],
    seq: u64,
    effects: Effects,
    /// The deadline the owner's timer last armed for (see `take_effects`).
    armed: Option<Instant>,
}

impl EvalBrokerCore {
    /// A disabled, empty broker. `rng` draws tokens and breaks priority ties between types.
    pub fn new(config: EvalBrokerConfig, rng: StdRng) -> Result<Self, BrokerError> {
        config.validate()?;
        Ok(Self {
            config,
            rng,
            enabled: false,
            evals: HashMap::new(),
            jobs: HashMap::new(),
            cancelable: VecDeque::new(),
            ready: Default::default(),
            requeue: HashMap::new(),
            waiting: HashMap::new(),
            timers: BTreeMap::new(),
            stats: [QueueStats::default(); 6],
            seq: 0,
            effects: Effects::default(),
            armed: None,
        })
    }

    /// The settings.
    pub fn config(&self) -> &EvalBrokerConfig {
        &self.config
    }

    /// True on the leader.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Enables or disables the broker. Disabling flushes everything (queues, deliveries,
    /// timers, cancelable list) and wakes every dequeuer; enabling starts empty.
    pub fn set_enabled(&mut self, enabled: bool) {
        if self.enabled == enabled {
            return;
        }
        self.enabled = enabled;
        if !enabled {
            self.flush();
        }
    }

    fn flush(&mut self) {
        self.evals.clear();
        self.jobs.clear();
        self.cancelable.clear();
        for heap in &mut self.ready {
            heap.clear();
        }
        self.requeue.clear();
        self.waiting.clear();
        self.timers.clear();
        self.stats = [QueueStats::default(); 6];
        self.effects = Effects {
            wake_all: true,
            ..Effects::default()
        };
        self.armed = None;
    }

    fn ensure_enabled(&self) -> Result<(), BrokerError> {
        if self.enabled {
            Ok(())
        } else {
            Err(BrokerError::Disabled)
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn add_timer(&mut self, at: Instant, kind: TimerKind) -> TimerKey {
        let key = TimerKey {
            at,
            seq: self.next_seq(),
        };
        self.timers.insert(key, kind);
        key
    }

    fn stats_mut(&mut self, queue: SchedulerQueue) -> &mut QueueStats {
        &mut self.stats[queue.index()]
    }

    /// True if a timer is due at `now` (so `advance` has work).
    fn timer_due(&self, now: Instant) -> bool {
        self.timers
            .first_key_value()
            .is_some_and(|(key, _)| key.at <= now)
    }

    /// The outstanding delivery of an eval, if any.
    fn unacked(&self, eval_id: &EvalId) -> Option<&Unacked> {
        self.evals.get(eval_id).and_then(|e| e.unacked.as_ref())
    }

    fn unacked_mut(&mut self, eval_id: &EvalId) -> Option<&mut Unacked> {
        self.evals.get_mut(eval_id).and_then(|e| e.unacked.as_mut())
    }

    /// Enqueues a new eval (FSM apply of a pending eval, or leadership restore).
    ///
    /// `unix_nanos` is the wall clock at `now`; it places a `WaitUntil`.
    pub fn enqueue(
        &mut self,
        eval: Evaluation,
        now: Instant,
        unix_nanos: i64,
    ) -> Result<EnqueueOutcome, BrokerError> {
        self.enqueue_with_token(eval, None, now, unix_nanos)
    }

    /// Enqueues an eval, optionally with the token of its outstanding delivery: an eval that
    /// is still outstanding under that token is parked until the delivery is acked (and
    /// dropped if it is nacked), as when a reblocked eval missed an unblock.
    pub fn enqueue_with_token(
        &mut self,
        eval: Evaluation,
        token: Option<&str>,
        now: Instant,
        unix_nanos: i64,
    ) -> Result<EnqueueOutcome, BrokerError> {
        self.ensure_enabled()?;
        self.advance(now);
        let wait_until_at = wait_until_instant(&eval, now, unix_nanos);
        Ok(self.process_enqueue(Box::new(eval), token, wait_until_at, now))
    }

    fn process_enqueue(
        &mut self,
        eval: Box<Evaluation>,
        token: Option<&str>,
        wait_until_at: Option<Instant>,
        now: Instant,
    ) -> EnqueueOutcome {
        match self.evals.entry(eval.id.clone()) {
            Entry::Occupied(known) => {
                let outstanding = token.is_some_and(|token| {
                    known
                        .get()
                        .unacked
                        .as_ref()
                        .is_some_and(|u| u.token.as_str() == token)
                });
                return match token {
                    Some(token) if outstanding => {
                        self.requeue.insert(
                            Token::from(token),
                            Requeued {
                                eval,
                                wait_until_at,
                            },
                        );
                        EnqueueOutcome::Requeued
                    }
                    _ => EnqueueOutcome::Duplicate,
                };
            }
            Entry::Vacant(slot) => {
                slot.insert(EvalEntry {
                    deliveries: 0,
                    enqueued_at: now,
                    unacked: None,
                });
            }
        }

        // A deliberately delayed eval's latency counts from when it becomes ready.
        let delayed = if eval.wait > 0 {
            Some(deadline_after(now, Duration::from_nanos(eval.wait)))
        } else {
            wait_until_at.filter(|at| *at > now)
        };
        if let Some(until) = delayed {
            if let Some(entry) = self.evals.get_mut(&eval.id) {
                entry.enqueued_at = until;
            }
            self.schedule_wait(eval, until);
            return EnqueueOutcome::Waiting { until };
        }
        let queue = SchedulerQueue::for_job_type(eval.eval_type);
        self.enqueue_locked(eval, queue)
    }

    fn schedule_wait(&mut self, eval: Box<Evaluation>, until: Instant) {
        let key = self.add_timer(until, TimerKind::Wait(eval.id.clone()));
        self.stats_mut(SchedulerQueue::for_job_type(eval.eval_type))
            .waiting += 1;
        self.waiting
            .insert(eval.id.clone(), WaitingEval { eval, key });
    }

    /// Per-job serialization, then the ready queue (Nomad's `enqueueLocked`).
    fn enqueue_locked(&mut self, eval: Box<Evaluation>, queue: SchedulerQueue) -> EnqueueOutcome {
        let seq = self.next_seq();
        match self.jobs.entry(job_key(&eval)) {
            Entry::Vacant(slot) => {
                slot.insert(JobSlot {
                    holder: eval.id.clone(),
                    pending: BinaryHeap::new(),
                });
            }
            Entry::Occupied(slot) if slot.get().holder == eval.id => {}
            Entry::Occupied(mut slot) => {
                self.stats[SchedulerQueue::for_job_type(eval.eval_type).index()].pending += 1;
                slot.get_mut().pending.push(PendingEntry {
                    priority: eval.priority,
                    modify_index: eval.modify_index,
                    seq,
                    eval,
                });
                return EnqueueOutcome::Pending;
            }
        }
        self.push_ready(eval, queue, seq);
        EnqueueOutcome::Ready
    }

    /// Puts an eval that holds its job's slot on a ready queue.
    fn push_ready(&mut self, eval: Box<Evaluation>, queue: SchedulerQueue, seq: u64) {
        self.ready[queue.index()].push(ReadyEntry {
            priority: eval.priority,
            create_index: eval.create_index,
            seq,
            eval,
        });
        self.effects.wake.insert(queue);
    }

    /// Releases the job slot held by `eval_id`. The job's best pending eval (if any) takes
    /// the slot and goes to its ready queue; with `cancel_rest` every other pending eval of
    /// the job becomes cancelable.
    fn release_job_slot(&mut self, key: JobKey, eval_id: &EvalId, cancel_rest: bool) {
        let Entry::Occupied(mut slot) = self.jobs.entry(key) else {
            return;
        };
        if slot.get().holder != *eval_id {
            return;
        }
        let Some(next) = slot.get_mut().pending.pop() else {
            slot.remove();
            return;
        };
        slot.get_mut().holder = next.eval.id.clone();
        let superseded = if cancel_rest {
            std::mem::take(&mut slot.get_mut().pending)
        } else {
            BinaryHeap::new()
        };
        let queue = SchedulerQueue::for_job_type(next.eval.eval_type);
        self.stats[queue.index()].pending -= 1;
        if !superseded.is_empty() {
            self.effects.cancelable_added += superseded.len();
            for entry in superseded.into_vec() {
                // Forgotten by the broker (the reaper writes it canceled), so the eval map
                // does not grow with every superseded eval.
                self.evals.remove(&entry.eval.id);
                let stats =
                    &mut self.stats[SchedulerQueue::for_job_type(entry.eval.eval_type).index()];
                stats.pending -= 1;
                stats.cancelable += 1;
                self.cancelable.push_back(entry.eval);
            }
        }
        let seq = self.next_seq();
        self.push_ready(next.eval, queue, seq);
    }

    /// Takes the next eval from the requested queues, if any is ready: the highest priority
    /// among the queues' heap roots, a random one of the queues tied at that priority.
    /// Returns the eval and the token of this delivery; its nack timer starts at `now`.
    pub fn dequeue(
        &mut self,
        queues: QueueSet,
        now: Instant,
    ) -> Result<Option<(Evaluation, Token)>, BrokerError> {
        self.ensure_enabled()?;
        self.advance(now);

        let mut best: Option<u32> = None;
        let mut tied = [SchedulerQueue::Service; 6];
        let mut n_tied = 0;
        for queue in queues.iter() {
            let Some(root) = self.ready[queue.index()].peek() else {
                continue;
            };
            match best {
                Some(priority) if root.priority < priority => {}
                Some(priority) if root.priority == priority => {
                    tied[n_tied] = queue;
                    n_tied += 1;
                }
                _ => {
                    best = Some(root.priority);
                    tied[0] = queue;
                    n_tied = 1;
                }
            }
        }
        let queue = match n_tied {
            0 => return Ok(None),
            1 => tied[0],
            n => tied[self.rng.gen_range(0..n)],
        };
        let Some(entry) = self.ready[queue.index()].pop() else {
            return Ok(None);
        };

        let eval = entry.eval;
        let token = Token::random(&mut self.rng);
        let key = self.add_timer(
            deadline_after(now, self.config.nack_timeout),
            TimerKind::Nack(eval.id.clone()),
        );
        self.stats_mut(queue).unacked += 1;
        let delivered = (*eval).clone();
        let unacked = Unacked {
            eval,
            token: token.clone(),
            queue,
            timer: NackTimer::Running(key),
        };
        match self.evals.get_mut(&unacked.eval.id) {
            Some(entry) => {
                entry.deliveries += 1;
                entry.unacked = Some(unacked);
            }
            // Every queued eval is in the map; this only keeps the books straight if not.
            None => {
                self.evals.insert(
                    unacked.eval.id.clone(),
                    EvalEntry {
                        deliveries: 1,
                        enqueued_at: now,
                        unacked: Some(unacked),
                    },
                );
            }
        }
        Ok(Some((delivered, token)))
    }

    /// True if `eval_id`'s outstanding delivery has this token and its nack timer is due.
    fn expired_delivery(&self, eval_id: &EvalId, token: &str, now: Instant) -> bool {
        self.unacked(eval_id).is_some_and(|u| {
            u.token.as_str() == token && matches!(u.timer, NackTimer::Running(k) if k.at <= now)
        })
    }

    /// Fires due timers; an error if that expired this very delivery.
    fn advance_checking(
        &mut self,
        eval_id: &EvalId,
        token: &str,
        now: Instant,
    ) -> Result<(), BrokerError> {
        if !self.timer_due(now) {
            return Ok(());
        }
        let expired = self.expired_delivery(eval_id, token, now);
        self.advance(now);
        if expired {
            Err(BrokerError::NackTimeoutReached {
                eval_id: eval_id.clone(),
            })
        } else {
            Ok(())
        }
    }

    /// Acknowledges a delivery: the eval is done. The job's slot is released; the best of its
    /// pending evals (highest priority, newest) is enqueued and the others become cancelable;
    /// an eval parked under this token is enqueued.
    pub fn ack(&mut self, eval_id: &EvalId, token: &str, now: Instant) -> Result<(), BrokerError> {
        self.ensure_enabled()?;
        // Whatever happens, a parked re-submission under this token is resolved now.
        let requeued = if self.requeue.is_empty() {
            None
        } else {
            self.requeue.remove(token)
        };
        self.advance_checking(eval_id, token, now)?;
        let enqueued_at = self.evals.get(eval_id).map(|e| e.enqueued_at);
        let (_, unack) = self.take_delivery(eval_id, token, true, false)?;
        if let Some(at) = enqueued_at {
            self.effects
                .acked_latencies
                .push(now.saturating_duration_since(at));
        }
        if let NackTimer::Running(key) = unack.timer {
            self.timers.remove(&key);
        }
        self.stats_mut(unack.queue).unacked -= 1;
        self.release_job_slot(job_key(&unack.eval), eval_id, true);
        if let Some(requeued) = requeued {
            self.process_enqueue(requeued.eval, None, requeued.wait_until_at, now);
        }
        Ok(())
    }

    /// Takes the outstanding delivery of `eval_id` if it has this token, with the eval's
    /// delivery count. With `forget`, the eval leaves the broker altogether (Ack). One hash
    /// lookup on the success path.
    fn take_delivery(
        &mut self,
        eval_id: &EvalId,
        token: &str,
        forget: bool,
        outstanding_errors: bool,
    ) -> Result<(u32, Unacked), BrokerError> {
        let not_found = || {
            if outstanding_errors {
                BrokerError::NotOutstanding {
                    eval_id: eval_id.clone(),
                }
            } else {
                BrokerError::NotFound {
                    eval_id: eval_id.clone(),
                }
            }
        };
        let check = |entry: &EvalEntry| match &entry.unacked {
            None => Err(not_found()),
            Some(u) if u.token.as_str() != token => Err(BrokerError::TokenMismatch {
                eval_id: eval_id.clone(),
            }),
            Some(_) => Ok(entry.deliveries),
        };
        if forget {
            let entry = self.evals.remove(eval_id).ok_or_else(not_found)?;
            match check(&entry) {
                Ok(deliveries) => entry.unacked.map(|u| (deliveries, u)).ok_or_else(not_found),
                Err(error) => {
                    self.evals.insert(eval_id.clone(), entry);
                    Err(error)
                }
            }
        } else {
            let entry = self.evals.get_mut(eval_id).ok_or_else(not_found)?;
            let deliveries = check(entry)?;
            entry
                .unacked
                .take()
                .map(|u| (deliveries, u))
                .ok_or_else(not_found)
        }
    }

    /// Negatively acknowledges a delivery: the worker could not process the eval. It keeps
    /// its job's slot and is re-enqueued after the nack delay, or moved to `_failed` if this
    /// was its last allowed delivery. An eval parked under this token is dropped.
    pub fn nack(&mut self, eval_id: &EvalId, token: &str, now: Instant) -> Result<(), BrokerError> {
        self.ensure_enabled()?;
        if !self.requeue.is_empty() {
            self.requeue.remove(token);
        }
        self.advance(now);
        let (deliveries, unack) = self.take_delivery(eval_id, token, false, false)?;
        self.nack_delivery(unack, deliveries, now);
        Ok(())
    }

    fn nack_delivery(&mut self, unack: Unacked, deliveries: u32, now: Instant) {
        if let NackTimer::Running(key) = unack.timer {
            self.timers.remove(&key);
        }
        self.stats_mut(unack.queue).unacked -= 1;
        let mut eval = unack.eval;
        if deliveries >= self.config.delivery_limit {
            self.enqueue_locked(eval, SchedulerQueue::Failed);
            return;
        }
        let delay = self.config.nack_reenqueue_delay(deliveries);
        eval.wait = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        if delay.is_zero() {
            let queue = SchedulerQueue::for_job_type(eval.eval_type);
            self.enqueue_locked(eval, queue);
        } else {
            self.schedule_wait(eval, deadline_after(now, delay));
        }
    }

    /// The token of the eval's outstanding delivery, if it has one.
    pub fn outstanding(
        &mut self,
        eval_id: &EvalId,
        now: Instant,
    ) -> Result<Option<Token>, BrokerError> {
        self.ensure_enabled()?;
        self.advance(now);
        Ok(self.unacked(eval_id).map(|u| u.token.clone()))
    }

    /// Restarts the delivery's nack timer at its full length: the worker just proved it is
    /// alive (it wrote an eval update, a follow-up eval or a reblock). A paused timer stays
    /// paused.
    pub fn outstanding_reset(
        &mut self,
        eval_id: &EvalId,
        token: &str,
        now: Instant,
    ) -> Result<(), BrokerError> {
        self.ensure_enabled()?;
        self.advance_checking(eval_id, token, now)?;
        if let NackTimer::Running(key) = self.outstanding_timer(eval_id, token)? {
            self.timers.remove(&key);
            self.start_nack_timer(eval_id, now);
        }
        Ok(())
    }

    /// Stops the delivery's nack timer while its plan waits in the plan queue (an unbounded
    /// wait that says nothing about the worker's health).
    pub fn pause_nack_timeout(
        &mut self,
        eval_id: &EvalId,
        token: &str,
        now: Instant,
    ) -> Result<(), BrokerError> {
        self.ensure_enabled()?;
        self.advance_checking(eval_id, token, now)?;
        if let NackTimer::Running(key) = self.outstanding_timer(eval_id, token)? {
            self.timers.remove(&key);
            if let Some(unack) = self.unacked_mut(eval_id) {
                unack.timer = NackTimer::Paused;
            }
        }
        Ok(())
    }

    /// Restarts the delivery's nack timer at its full length once the plan is back from the
    /// plan queue.
    pub fn resume_nack_timeout(
        &mut self,
        eval_id: &EvalId,
        token: &str,
        now: Instant,
    ) -> Result<(), BrokerError> {
        self.ensure_enabled()?;
        self.advance_checking(eval_id, token, now)?;
        if let NackTimer::Running(key) = self.outstanding_timer(eval_id, token)? {
            self.timers.remove(&key);
        }
        self.start_nack_timer(eval_id, now);
        Ok(())
    }

    fn outstanding_timer(&self, eval_id: &EvalId, token: &str) -> Result<NackTimer, BrokerError> {
        match self.unacked(eval_id) {
            None => Err(BrokerError::NotOutstanding {
                eval_id: eval_id.clone(),
            }),
            Some(u) if u.token.as_str() != token => Err(BrokerError::TokenMismatch {
                eval_id: eval_id.clone(),
            }),
            Some(u) => Ok(u.timer),
        }
    }

    /// Arms a full-length nack timer for the eval's outstanding delivery.
    fn start_nack_timer(&mut self, eval_id: &EvalId, now: Instant) {
        let key = self.add_timer(
            deadline_after(now, self.config.nack_timeout),
            TimerKind::Nack(eval_id.clone()),
        );
        if let Some(unack) = self.unacked_mut(eval_id) {
            unack.timer = NackTimer::Running(key);
        }
    }

    /// Takes up to `max` superseded evals (oldest first) for the cancelable reaper to write
    /// as canceled.
    pub fn cancelable(&mut self, max: usize) -> Result<Vec<Evaluation>, BrokerError> {
        self.ensure_enabled()?;
        let n = max.min(self.cancelable.len());
        let mut out = Vec::with_capacity(n);
        for eval in self.cancelable.drain(..n) {
            self.stats[SchedulerQueue::for_job_type(eval.eval_type).index()].cancelable -= 1;
            out.push(*eval);
        }
        Ok(out)
    }

    /// Forgets a delayed eval that is no longer needed (Nomad's `DropWaiting`, used when a
    /// reconnecting node makes a disconnect-timeout eval moot). If it held its job's slot
    /// (a nack backoff), the job's best pending eval takes the slot. Returns whether the eval
    /// was waiting.
    pub fn drop_waiting(&mut self, eval_id: &EvalId, now: Instant) -> Result<bool, BrokerError> {
        self.ensure_enabled()?;
        self.advance(now);
        let Some(waiting) = self.waiting.remove(eval_id) else {
            return Ok(false);
        };
        self.timers.remove(&waiting.key);
        self.stats_mut(SchedulerQueue::for_job_type(waiting.eval.eval_type))
            .waiting -= 1;
        self.evals.remove(eval_id);
        self.release_job_slot(job_key(&waiting.eval), eval_id, false);
        Ok(true)
    }

    /// Fires every timer due at `now`: expired deliveries are nacked, delayed evals are
    /// enqueued. Called by the shell's timer task, and first thing by every other call.
    pub fn advance(&mut self, now: Instant) {
        while let Some(entry) = self.timers.first_entry() {
            if entry.key().at > now {
                break;
            }
            let (key, kind) = entry.remove_entry();
            match kind {
                TimerKind::Nack(eval_id) => self.fire_nack(&eval_id, key),
                TimerKind::Wait(eval_id) => self.fire_wait(&eval_id, key),
            }
        }
    }

    fn fire_nack(&mut self, eval_id: &EvalId, key: TimerKey) {
        let Some(entry) = self.evals.get_mut(eval_id) else {
            return;
        };
        if entry.unacked.as_ref().map(|u| u.timer) != Some(NackTimer::Running(key)) {
            return;
        }
        let deliveries = entry.deliveries;
        let Some(mut unack) = entry.unacked.take() else {
            return;
        };
        // The timer entry is already gone from the map.
        unack.timer = NackTimer::Paused;
        if !self.requeue.is_empty() {
            self.requeue.remove(&unack.token);
        }
        self.effects.nack_timeouts += 1;
        tracing::debug!(
            eval_id = %eval_id,
            job_id = %unack.eval.job_id,
            namespace = %unack.eval.namespace,
            deliveries,
            "eval delivery not acked before the nack timeout; nacking it"
        );
        // Back-off is measured from the moment the timer was due, not from when it ran.
        self.nack_delivery(unack, deliveries, key.at);
    }

    fn fire_wait(&mut self, eval_id: &EvalId, key: TimerKey) {
        if self.waiting.get(eval_id).map(|w| w.key) != Some(key) {
            return;
        }
        let Some(waiting) = self.waiting.remove(eval_id) else {
            return;
        };
        let queue = SchedulerQueue::for_job_type(waiting.eval.eval_type);
        self.stats_mut(queue).waiting -= 1;
        self.enqueue_locked(waiting.eval, queue);
    }

    /// The earliest pending timer, if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.timers.first_key_value().map(|(k, _)| k.at)
    }

    /// The earliest pending timer, recorded as the one the owner's timer now sleeps on: until
    /// a timer earlier than this appears, [`Effects::arm_timer`] stays `None`.
    pub fn next_timer(&mut self) -> Option<Instant> {
        self.armed = self.next_deadline();
        self.armed
    }

    /// Drains what the owner must do since the last call.
    pub fn take_effects(&mut self) -> Effects {
        if let Some(next) = self.next_deadline() {
            if self.armed.is_none_or(|armed| next < armed) {
                self.effects.arm_timer = Some(next);
                self.armed = Some(next);
            }
        }
        std::mem::take(&mut self.effects)
    }

    /// Number of deliveries of an eval the broker holds (`None` if it holds none).
    pub fn deliveries(&self, eval_id: &EvalId) -> Option<u32> {
        self.evals.get(eval_id).map(|e| e.deliveries)
    }

    /// The counts, in total and per queue.
    pub fn stats(&self) -> BrokerStats {
        let mut stats = BrokerStats::default();
        for queue in SchedulerQueue::ALL {
            let mut q = self.stats[queue.index()];
            q.ready = self.ready[queue.index()].len();
            stats.total_ready += q.ready;
            stats.total_unacked += q.unacked;
            stats.total_pending += q.pending;
            stats.total_waiting += q.waiting;
            stats.total_cancelable += q.cancelable;
            stats.by_scheduler.insert(queue, q);
        }
        stats
    }
}

/// What the failed-eval reaper writes for an eval taken from the `_failed` queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedEvalUpdate {
    /// The eval marked `failed`, pointing at its follow-up (if any) through `NextEval`.
    pub failed: Evaluation,
    /// A pending eval of the same job that retries after a long random delay; `None` when the
    /// job no longer exists.
    pub follow_up: Option<Evaluation>,
}

/// The raft write for an eval that reached the delivery limit (Nomad's
/// `reapFailedEvaluations`): the eval marked failed with "evaluation reached delivery limit
/// (N)", plus a follow-up eval (new id from `rng`, `TriggeredBy = failed-follow-up`,
/// `Wait` = baseline + uniform random in `[0, range)`) unless the job is gone.
///
/// Returns `None` for `_core` evals: the reaper only acks those, since the leader schedules
/// core work itself. Write both evals in one raft entry, then ack the delivery.
pub fn failed_eval_update<R: Rng + ?Sized>(
    eval: &Evaluation,
    job_exists: bool,
    config: &EvalBrokerConfig,
    rng: &mut R,
    now_unix_nanos: i64,
) -> Option<FailedEvalUpdate> {
    if eval.eval_type == JobType::Core {
        return None;
    }
    let mut failed = eval.clone();
    failed.status = EvalStatus::Failed;
    failed.status_description = format!(
        "evaluation reached delivery limit ({})",
        config.delivery_limit
    );
    failed.modify_time = now_unix_nanos.max(failed.create_time.saturating_add(1));
    let follow_up = job_exists.then(|| {
        let wait = failed_follow_up_wait(config, rng);
        failed_follow_up_eval(eval, wait, EvalId::new(random_uuid(rng)), now_unix_nanos)
    });
    if let Some(follow_up) = &follow_up {
        failed.next_eval = follow_up.id.clone();
    }
    Some(FailedEvalUpdate { failed, follow_up })
}

/// The `Wait` of a failed eval's follow-up: baseline + uniform random in `[0, range)`.
pub fn failed_follow_up_wait<R: Rng + ?Sized>(config: &EvalBrokerConfig, rng: &mut R) -> Duration {
    let range = u64::try_from(config.failed_followup_delay_range.as_nanos()).unwrap_or(u64::MAX);
    let jitter = if range == 0 {
        0
    } else {
        rng.gen_range(0..range)
    };
    config
        .failed_followup_baseline_delay
        .saturating_add(Duration::from_nanos(jitter))
}

/// The follow-up of a failed eval (Nomad's `CreateFailedFollowUpEval`): same job, namespace,
/// priority and type, pending, `TriggeredBy = failed-follow-up`, delayed by `wait`.
pub fn failed_follow_up_eval(
    failed: &Evaluation,
    wait: Duration,
    id: EvalId,
    now_unix_nanos: i64,
) -> Evaluation {
    Evaluation {
        id,
        namespace: failed.namespace.clone(),
        priority: failed.priority,
        eval_type: failed.eval_type,
        triggered_by: EvalTrigger::FailedFollowUp,
        job_id: failed.job_id.clone(),
        job_modify_index: failed.job_modify_index,
        status: EvalStatus::Pending,
        wait: u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX),
        previous_eval: failed.id.clone(),
        create_time: now_unix_nanos,
        modify_time: now_unix_nanos,
        ..Evaluation::default()
    }
}

/// Marks superseded evals (from [`EvalBroker::cancelable`]) canceled, ready for one raft
/// write.
pub fn mark_canceled(evals: Vec<Evaluation>, now_unix_nanos: i64) -> Vec<Evaluation> {
    evals
        .into_iter()
        .map(|mut eval| {
            eval.status = EvalStatus::Canceled;
            eval.status_description = CANCELED_DESCRIPTION.to_owned();
            eval.modify_time = now_unix_nanos.max(eval.create_time.saturating_add(1));
            eval
        })
        .collect()
}

/// The wall clock in Unix nanoseconds. The broker reads it only to place `WaitUntil`; tests
/// inject one that follows tokio's paused time.
pub type WallClock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The system wall clock.
pub fn system_wall_clock() -> WallClock {
    Arc::new(|| {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(since_epoch.as_nanos()).unwrap_or(i64::MAX)
    })
}

/// A dequeue call waiting for work.
struct Waiter {
    id: u64,
    queues: QueueSet,
    notify: Arc<Notify>,
}

struct BrokerState {
    core: EvalBrokerCore,
    waiters: Vec<Waiter>,
    next_waiter_id: u64,
    /// Stops the timer and stats tasks; present while enabled.
    tasks: Option<CancellationToken>,
}

struct BrokerShared {
    state: Mutex<BrokerState>,
    /// Wakes the timer task when the earliest deadline moved earlier.
    timer_kick: Arc<Notify>,
    /// Wakes the cancelable reaper when an Ack made evals cancelable.
    cancelable_ready: Notify,
    wall_clock: WallClock,
}

impl BrokerShared {
    fn lock(&self) -> MutexGuard<'_, BrokerState> {
        // The core keeps its invariants across panics of callers (none of its methods unwind
        // half-way on valid input), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the core, then carries out the effects it produced.
    fn with_core<R>(&self, f: impl FnOnce(&mut EvalBrokerCore) -> R) -> R {
        let mut state = self.lock();
        let out = f(&mut state.core);
        self.apply_effects(&mut state);
        out
    }

    fn apply_effects(&self, state: &mut BrokerState) {
        let effects = state.core.take_effects();
        if effects.wake_all {
            for waiter in state.waiters.drain(..) {
                waiter.notify.notify_one();
            }
        } else if !effects.wake.is_empty() {
            state.waiters.retain(|waiter| {
                if waiter.queues.intersects(effects.wake) {
                    waiter.notify.notify_one();
                    false
                } else {
                    true
                }
            });
        }
        if effects.arm_timer.is_some() {
            self.timer_kick.notify_one();
        }
        if effects.nack_timeouts > 0 {
            metrics::counter!("teamster.broker.nack_timeouts").increment(effects.nack_timeouts);
        }
        if effects.cancelable_added > 0 {
            self.cancelable_ready.notify_one();
        }
        for latency in effects.acked_latencies {
            metrics::histogram!(crate::agent::EVAL_LATENCY_METRIC).record(latency.as_secs_f64());
        }
    }

    fn emit_stats(&self) {
        let stats = self.lock().core.stats();
        emit_broker_gauges(&stats);
    }
}

fn emit_broker_gauges(stats: &BrokerStats) {
    // Counts are far below 2^52, so the conversions to f64 are exact.
    metrics::gauge!("teamster.broker.total_ready").set(stats.total_ready as f64);
    metrics::gauge!("teamster.broker.total_unacked").set(stats.total_unacked as f64);
    metrics::gauge!("teamster.broker.total_pending").set(stats.total_pending as f64);
    metrics::gauge!("teamster.broker.total_waiting").set(stats.total_waiting as f64);
    metrics::gauge!("teamster.broker.total_cancelable").set(stats.total_cancelable as f64);
    for (queue, q) in &stats.by_scheduler {
        let scheduler = queue.as_str();
        metrics::gauge!("teamster.broker.ready", "scheduler" => scheduler).set(q.ready as f64);
        metrics::gauge!("teamster.broker.unacked", "scheduler" => scheduler).set(q.unacked as f64);
        metrics::gauge!("teamster.broker.pending", "scheduler" => scheduler).set(q.pending as f64);
        metrics::gauge!("teamster.broker.waiting", "scheduler" => scheduler).set(q.waiting as f64);
        metrics::gauge!("teamster.broker.cancelable", "scheduler" => scheduler)
            .set(q.cancelable as f64);
    }
}

/// Removes a dequeue call's waiter registration if the call ends (timeout, cancellation)
/// while still registered.
struct WaiterGuard<'a> {
    shared: &'a BrokerShared,
    id: Option<u64>,
}

impl WaiterGuard<'_> {
    fn deregister(&mut self) {
        if let Some(id) = self.id.take() {
            self.shared.lock().waiters.retain(|w| w.id != id);
        }
    }
}

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        self.deregister();
    }
}

/// The eval broker on tokio: a cheap `Clone` handle shared by the FSM hook, the RPC
/// endpoints, the blocked-evals tracker and the leader's reapers.
///
/// Starts disabled; [`EvalBroker::set_enabled`] is called only by the leadership monitor.
#[derive(Clone)]
pub struct EvalBroker {
    shared: Arc<BrokerShared>,
}

impl fmt::Debug for EvalBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("EvalBroker")
            .field("enabled", &state.core.is_enabled())
            .field("stats", &state.core.stats())
            .field("waiting_dequeuers", &state.waiters.len())
            .finish()
    }
}

impl EvalBroker {
    /// A disabled broker with an entropy-seeded RNG and the system wall clock.
    pub fn new(config: EvalBrokerConfig) -> Result<Self, BrokerError> {
        Self::with_rng_and_clock(config, StdRng::from_entropy(), system_wall_clock())
    }

    /// A disabled broker with the given RNG (tokens, tie breaks) and wall clock (`WaitUntil`).
    pub fn with_rng_and_clock(
        config: EvalBrokerConfig,
        rng: StdRng,
        wall_clock: WallClock,
    ) -> Result<Self, BrokerError> {
        let core = EvalBrokerCore::new(config, rng)?;
        Ok(Self {
            shared: Arc::new(BrokerShared {
                state: Mutex::new(BrokerState {
                    core,
                    waiters: Vec::new(),
                    next_waiter_id: 0,
                    tasks: None,
                }),
                timer_kick: Arc::new(Notify::new()),
                cancelable_ready: Notify::new(),
                wall_clock,
            }),
        })
    }

    /// The settings.
    pub fn config(&self) -> EvalBrokerConfig {
        self.shared.lock().core.config().clone()
    }

    /// True on the leader.
    pub fn enabled(&self) -> bool {
        self.shared.lock().core.is_enabled()
    }

    /// Enables (leadership gained) or disables (leadership lost) the broker.
    ///
    /// Enabling starts the timer and stats tasks on the current tokio runtime; the broker
    /// starts empty and the leader restores the pending evals from state. Disabling flushes
    /// everything, stops the tasks, and wakes every waiting dequeuer, which then returns
    /// [`BrokerError::Disabled`].
    ///
    /// # Panics
    ///
    /// Enabling outside a tokio runtime panics (as `tokio::spawn` does).
    pub fn set_enabled(&self, enabled: bool) {
        let mut state = self.shared.lock();
        if state.core.is_enabled() == enabled {
            return;
        }
        state.core.set_enabled(enabled);
        if let Some(tasks) = state.tasks.take() {
            tasks.cancel();
        }
        if enabled {
            let cancel = CancellationToken::new();
            let stats_interval = state.core.config().stats_interval;
            tokio::spawn(run_timers(
                Arc::downgrade(&self.shared),
                Arc::clone(&self.shared.timer_kick),
                cancel.clone(),
            ));
            tokio::spawn(run_stats(
                Arc::downgrade(&self.shared),
                stats_interval,
                cancel.clone(),
            ));
            state.tasks = Some(cancel);
        }
        self.shared.apply_effects(&mut state);
        let stats = state.core.stats();
        drop(state);
        emit_broker_gauges(&stats);
        tracing::info!(enabled, "eval broker enabled status changed");
    }

    /// Enqueues a pending eval (FSM apply on the leader, and leadership restore). An eval the
    /// broker already holds is dropped.
    pub fn enqueue(&self, eval: Evaluation) -> Result<EnqueueOutcome, BrokerError> {
        let unix_nanos = (self.shared.wall_clock)();
        self.shared
            .with_core(|core| core.enqueue(eval, Instant::now(), unix_nanos))
    }

    /// Enqueues many evals under one lock, so woken dequeuers see the highest priority
    /// first. An eval with the token of its still-outstanding delivery is parked until that
    /// delivery is acked (the blocked-evals tracker releases reblocked evals this way).
    pub fn enqueue_all(&self, evals: Vec<(Evaluation, Option<Token>)>) -> Result<(), BrokerError> {
        let unix_nanos = (self.shared.wall_clock)();
        self.shared.with_core(|core| {
            let now = Instant::now();
            for (eval, token) in evals {
                core.enqueue_with_token(eval, token.as_deref(), now, unix_nanos)?;
            }
            Ok(())
        })
    }

    /// Waits up to `timeout` for an eval of one of `schedulers` (Nomad's type names, plus
    /// `_failed` for the failed-eval reaper) and delivers it with a fresh token. Returns
    /// `Ok(None)` at the timeout; `Duration::ZERO` only looks once.
    ///
    /// Every waiting dequeuer whose types receive work is woken (no wake-up is lost), and
    /// disabling the broker wakes them all with [`BrokerError::Disabled`]. Dropping the future
    /// cancels the wait cleanly.
    pub async fn dequeue<S: AsRef<str>>(
        &self,
        schedulers: &[S],
        timeout: Duration,
    ) -> Result<Option<(Evaluation, Token)>, BrokerError> {
        if schedulers.is_empty() {
            return Err(BrokerError::NoSchedulers);
        }
        let queues = QueueSet::from_names(schedulers);
        let deadline = Instant::now().checked_add(timeout);
        // Allocated only if the call has to wait.
        let mut notify: Option<Arc<Notify>> = None;
        let mut guard = WaiterGuard {
            shared: &self.shared,
            id: None,
        };
        loop {
            {
                let mut state = self.shared.lock();
                let now = Instant::now();
                let found = state.core.dequeue(queues, now);
                self.shared.apply_effects(&mut state);
                if let Some(delivery) = found? {
                    return Ok(Some(delivery));
                }
                if deadline.is_some_and(|d| d <= now) {
                    return Ok(None);
                }
                // Registered under the same lock that saw no work: an enqueue can only come
                // after this, and its wake-up either finds the waiter or leaves a permit.
                let id = state.next_waiter_id;
                state.next_waiter_id += 1;
                let notify = notify.get_or_insert_with(|| Arc::new(Notify::new()));
                state.waiters.push(Waiter {
                    id,
                    queues,
                    notify: Arc::clone(notify),
                });
                guard.id = Some(id);
            }
            let Some(notify) = notify.as_ref() else {
                return Ok(None);
            };
            let woken = match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, notify.notified())
                    .await
                    .is_ok(),
                None => {
                    notify.notified().await;
                    true
                }
            };
            if woken {
                // Whoever woke us removed the registration.
                guard.id = None;
            } else {
                guard.deregister();
                return Ok(None);
            }
        }
    }

    /// Acknowledges a delivery (see [`EvalBrokerCore::ack`]); on success the cancelable
    /// reaper is woken if the ack made evals cancelable.
    pub fn ack(&self, eval_id: &EvalId, token: &str) -> Result<(), BrokerError> {
        self.shared
            .with_core(|core| core.ack(eval_id, token, Instant::now()))
    }

    /// Negatively acknowledges a delivery (see [`EvalBrokerCore::nack`]).
    pub fn nack(&self, eval_id: &EvalId, token: &str) -> Result<(), BrokerError> {
        self.shared
            .with_core(|core| core.nack(eval_id, token, Instant::now()))
    }

    /// The token of the eval's outstanding delivery, if any (the `Eval.Create` RPC checks the
    /// previous eval's token with it).
    pub fn outstanding(&self, eval_id: &EvalId) -> Result<Option<Token>, BrokerError> {
        self.shared
            .with_core(|core| core.outstanding(eval_id, Instant::now()))
    }

    /// Restarts the delivery's nack timer (`Eval.Update`, `Eval.Create`, `Eval.Reblock` call
    /// this before touching raft).
    pub fn outstanding_reset(&self, eval_id: &EvalId, token: &str) -> Result<(), BrokerError> {
        self.shared
            .with_core(|core| core.outstanding_reset(eval_id, token, Instant::now()))
    }

    /// Stops the delivery's nack timer while its plan waits in the plan queue.
    pub fn pause_nack_timeout(&self, eval_id: &EvalId, token: &str) -> Result<(), BrokerError> {
        self.shared
            .with_core(|core| core.pause_nack_timeout(eval_id, token, Instant::now()))
    }

    /// Restarts the delivery's nack timer once the plan result is back.
    pub fn resume_nack_timeout(&self, eval_id: &EvalId, token: &str) -> Result<(), BrokerError> {
        self.shared
            .with_core(|core| core.resume_nack_timeout(eval_id, token, Instant::now()))
    }

    /// Takes up to `max` superseded evals for the cancelable reaper (use
    /// [`EvalBrokerConfig::cancelable_batch_size`]).
    pub fn cancelable(&self, max: usize) -> Result<Vec<Evaluation>, BrokerError> {
        self.shared.with_core(|core| core.cancelable(max))
    }

    /// Waits until an Ack made evals cancelable or `max_wait` passed, whichever is first:
    /// the cancelable reaper's pacing (wake per Ack, sweep every
    /// [`EvalBrokerConfig::reap_cancelable_interval`]).
    pub async fn wait_cancelable(&self, max_wait: Duration) {
        let _ = tokio::time::timeout(max_wait, self.shared.cancelable_ready.notified()).await;
    }

    /// Forgets a delayed eval that is no longer needed (see [`EvalBrokerCore::drop_waiting`]).
    pub fn drop_waiting(&self, eval_id: &EvalId) -> Result<bool, BrokerError> {
        self.shared
            .with_core(|core| core.drop_waiting(eval_id, Instant::now()))
    }

    /// The counts (all zero while disabled). Unlike the other calls this answers on followers
    /// too, for the metrics endpoint.
    pub fn stats(&self) -> BrokerStats {
        self.shared.lock().core.stats()
    }

    /// Dequeue calls currently waiting for work.
    pub fn waiting_dequeuers(&self) -> usize {
        self.shared.lock().waiters.len()
    }

    /// Sets the broker gauges now (the stats task does it every
    /// [`EvalBrokerConfig::stats_interval`] while enabled).
    pub fn emit_stats(&self) {
        self.shared.emit_stats();
    }
}

/// Sleeps until the core's next deadline and fires it; re-reads the deadline when kicked.
async fn run_timers(shared: Weak<BrokerShared>, kick: Arc<Notify>, cancel: CancellationToken) {
    loop {
        let next = match shared.upgrade() {
            Some(shared) => shared.lock().core.next_timer(),
            None => return,
        };
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = kick.notified() => {}
            _ = sleep => match shared.upgrade() {
                Some(shared) => shared.with_core(|core| core.advance(Instant::now())),
                None => return,
            },
        }
    }
}

/// Emits the broker gauges periodically.
async fn run_stats(shared: Weak<BrokerShared>, period: Duration, cancel: CancellationToken) {
    let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = ticker.tick() => match shared.upgrade() {
                Some(shared) => shared.emit_stats(),
                None => return,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use teamster_storage::model::Timestamp;

    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn eval(id: &str, job: &str, priority: u32, index: u64) -> Evaluation {
        Evaluation {
            id: EvalId::new(id),
            namespace: Namespace::default_namespace(),
            priority,
            eval_type: JobType::Service,
            triggered_by: EvalTrigger::JobRegister,
            job_id: JobId::new(job),
            status: EvalStatus::Pending,
            create_index: index,
            modify_index: index,
            ..Evaluation::default()
        }
    }

    fn typed(mut e: Evaluation, eval_type: JobType) -> Evaluation {
        e.eval_type = eval_type;
        e
    }

    fn core_with(config: EvalBrokerConfig) -> EvalBrokerCore {
        let mut core = EvalBrokerCore::new(config, StdRng::seed_from_u64(7)).unwrap();
        core.set_enabled(true);
        core
    }

    fn core() -> EvalBrokerCore {
        core_with(EvalBrokerConfig::default())
    }

    const SERVICE: QueueSet = QueueSet(1);

    fn ids(evals: &[Evaluation]) -> Vec<&str> {
        evals.iter().map(|e| e.id.as_str()).collect()
    }

    /// Dequeues everything ready in `queues` at `now`, acking each, and returns the ids.
    fn drain(core: &mut EvalBrokerCore, queues: QueueSet, now: Instant) -> Vec<String> {
        let mut out = Vec::new();
        while let Some((e, token)) = core.dequeue(queues, now).unwrap() {
            core.ack(&e.id, &token, now).unwrap();
            out.push(e.id.to_string());
        }
        out
    }

    #[test]
    fn higher_priority_first_then_fifo_by_create_index() {
        let mut core = core();
        let t0 = Instant::now();
        for e in [
            eval("a", "job-a", 50, 10),
            eval("b", "job-b", 70, 11),
            eval("c", "job-c", 50, 5),
            eval("d", "job-d", 70, 12),
            eval("e", "job-e", 50, 7),
        ] {
            assert_eq!(core.enqueue(e, t0, 0).unwrap(), EnqueueOutcome::Ready);
        }
        assert_eq!(drain(&mut core, SERVICE, t0), ["b", "d", "c", "e", "a"]);
    }

    #[test]
    fn equal_create_index_is_served_in_arrival_order() {
        let mut core = core();
        let t0 = Instant::now();
        for i in 0..20 {
            core.enqueue(eval(&format!("e{i:02}"), &format!("j{i}"), 50, 0), t0, 0)
                .unwrap();
        }
        let expected: Vec<String> = (0..20).map(|i| format!("e{i:02}")).collect();
        assert_eq!(drain(&mut core, SERVICE, t0), expected);
    }

    #[test]
    fn cross_type_choice_compares_true_heap_roots() {
        // Nomad's Peek returned the heap's last slice element; with these pushes that is
        // not the root, and the batch eval (60) would have beaten service's 90.
        let mut core = core();
        let t0 = Instant::now();
        for (id, p) in [("s90", 90), ("s10", 10), ("s20", 20), ("s5", 5)] {
            core.enqueue(eval(id, id, p, 1), t0, 0).unwrap();
        }
        core.enqueue(typed(eval("b60", "b60", 60, 1), JobType::Batch), t0, 0)
            .unwrap();
        let both = QueueSet::EMPTY
            .with(SchedulerQueue::Service)
            .with(SchedulerQueue::Batch);
        assert_eq!(
            drain(&mut core, both, t0),
            ["s90", "b60", "s20", "s10", "s5"]
        );
    }

    #[test]
    fn types_tied_at_the_top_priority_are_picked_at_random() {
        let mut core = core();
        let t0 = Instant::now();
        let both = QueueSet::from_names(&["service", "batch"]);
        let mut picked_batch = 0;
        for i in 0..400 {
            core.enqueue(eval(&format!("s{i}"), &format!("s{i}"), 50, i), t0, 0)
                .unwrap();
            let b = typed(
                eval(&format!("b{i}"), &format!("b{i}"), 50, i),
                JobType::Batch,
            );
            core.enqueue(b, t0, 0).unwrap();
            let (e, token) = core.dequeue(both, t0).unwrap().unwrap();
            if e.eval_type == JobType::Batch {
                picked_batch += 1;
            }
            core.ack(&e.id, &token, t0).unwrap();
            let (e, token) = core.dequeue(both, t0).unwrap().unwrap();
            core.ack(&e.id, &token, t0).unwrap();
        }
        assert!(
            (120..=280).contains(&picked_batch),
            "batch picked first {picked_batch} times out of 400"
        );

        // A strictly higher priority always wins over the coin.
        for i in 0..50 {
            core.enqueue(eval(&format!("S{i}"), &format!("S{i}"), 50, i), t0, 0)
                .unwrap();
            let b = typed(
                eval(&format!("B{i}"), &format!("B{i}"), 51, i),
                JobType::Batch,
            );
            core.enqueue(b, t0, 0).unwrap();
            let (e, token) = core.dequeue(both, t0).unwrap().unwrap();
            assert_eq!(e.eval_type, JobType::Batch);
            core.ack(&e.id, &token, t0).unwrap();
            let (e, token) = core.dequeue(both, t0).unwrap().unwrap();
            core.ack(&e.id, &token, t0).unwrap();
        }
    }

    #[test]
    fn dequeue_only_serves_the_requested_types() {
        let mut core = core();
        let t0 = Instant::now();
        core.enqueue(typed(eval("sys", "sys", 50, 1), JobType::System), t0, 0)
            .unwrap();
        assert!(core.dequeue(SERVICE, t0).unwrap().is_none());
        assert!(core.dequeue(QueueSet::EMPTY, t0).unwrap().is_none());
        let (e, _) = core
            .dequeue(QueueSet::from_names(&["system"]), t0)
            .unwrap()
            .unwrap();
        assert_eq!(e.id, "sys");
    }

    #[test]
    fn one_eval_per_job_in_flight() {
        let mut core = core();
        let t0 = Instant::now();
        assert_eq!(
            core.enqueue(eval("e1", "web", 50, 1), t0, 0).unwrap(),
            EnqueueOutcome::Ready
        );
        assert_eq!(
            core.enqueue(eval("e2", "web", 50, 2), t0, 0).unwrap(),
            EnqueueOutcome::Pending
        );
        assert_eq!(
            core.enqueue(eval("o1", "other", 50, 3), t0, 0).unwrap(),
            EnqueueOutcome::Ready
        );
        let stats = core.stats();
        assert_eq!((stats.total_ready, stats.total_pending), (2, 1));

        let (first, t1) = core.dequeue(SERVICE, t0).unwrap().unwrap();
        assert_eq!(first.id, "e1");
        // e2 is not deliverable while e1 is out, even though the queue has room.
        let (second, t2) = core.dequeue(SERVICE, t0).unwrap().unwrap();
        assert_eq!(second.id, "o1");
        assert!(core.dequeue(SERVICE, t0).unwrap().is_none());

        core.ack(&first.id, &t1, t0).unwrap();
        let (third, _) = core.dequeue(SERVICE, t0).unwrap().unwrap();
        assert_eq!(third.id, "e2");
        core.ack(&second.id, &t2, t0).unwrap();
        assert_eq!(core.stats().total_pending, 0);
    }

    #[test]
    fn on_ack_the_newest_pending_eval_runs_and_older_ones_become_cancelable() {
        let mut core = core();
        let t0 = Instant::now();
        core.enqueue(eval("running", "web", 50, 1), t0, 0).unwrap();
        let (running, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
        for (id, index) in [("m30", 30), ("m10", 10), ("m20", 20)] {
            assert_eq!(
                core.enqueue(eval(id, "web", 50, index), t0, 0).unwrap(),
                EnqueueOutcome::Pending
            );
        }
        core.take_effects();
        core.ack(&running.id, &token, t0).unwrap();
        assert_eq!(core.take_effects().cancelable_added, 2);

        let stats = core.stats();
        assert_eq!(stats.total_cancelable, 2);
        assert_eq!(stats.total_pending, 0);
        assert_eq!(stats.total_ready, 1);
        assert_eq!(drain(&mut core, SERVICE, t0), ["m30"]);
        assert_eq!(
            core.deliveries(&EvalId::new("m10")),
            None,
            "canceled evals are forgotten"
        );

        let mut canceled = ids(&core.cancelable(10).unwrap())
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>();
        canceled.sort();
        assert_eq!(canceled, ["m10", "m20"]);
        assert_eq!(core.stats().total_cancelable, 0);
    }

    #[test]
    fn pending_priority_beats_recency() {
        let mut core = core();
        let t0 = Instant::now();
        core.enqueue(eval("running", "web", 50, 1), t0, 0).unwrap();
        let (running, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
        core.enqueue(eval("urgent-old", "web", 80, 5), t0, 0)
            .unwrap();
        core.enqueue(eval("normal-new", "web", 50, 30), t0, 0)
            .unwrap();
        core.ack(&running.id, &token, t0).unwrap();
        assert_eq!(drain(&mut core, SERVICE, t0), ["urgent-old"]);
        assert_eq!(ids(&core.cancelable(10).unwrap()), ["normal-new"]);
    }

    #[test]
    fn cancelable_evals_are_taken_in_batches_of_at_most_728() {
        let mut core = core();
        let t0 = Instant::now();
        core.enqueue(eval("first", "sys", 50, 1), t0, 0).unwrap();
        let (first, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
        for i in 0..1000 {
            core.enqueue(eval(&format!("p{i}"), "sys", 50, 10 + i), t0, 0)
                .unwrap();
        }
        core.ack(&first.id, &token, t0).unwrap();
        assert_eq!(core.stats().total_cancelable, 999);

        let batch_size = core.config().cancelable_batch_size;
        assert_eq!(batch_size, CANCELABLE_BATCH_SIZE);
        let first_batch = core.cancelable(batch_size).unwrap();
        assert_eq!(first_batch.len(), 728);
        assert_eq!(core.stats().total_cancelable, 271);
        let second_batch = core.cancelable(batch_size).unwrap();
        assert_eq!(second_batch.len(), 271);
        assert!(core.cancelable(batch_size).unwrap().is_empty());

        let all: HashSet<String> = first_batch
            .iter()
            .chain(&second_batch)
            .map(|e| e.id.to_string())
            .collect();
        assert_eq!(all.len(), 999);
        assert!(
            !all.contains("p999"),
            "the newest eval runs, it is not canceled"
        );

        let written = mark_canceled(first_batch, 5_000);
        assert!(written.iter().all(|e| e.status == EvalStatus::Canceled
            && e.status_description == CANCELED_DESCRIPTION
            && e.modify_time == 5_000));
    }

    #[test]
    fn ack_reports_the_latency_from_first_enqueue_across_a_nack() {
        let mut core = core();
        let t0 = Instant::now();
        core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap();
        let (_, token) = core.dequeue(SERVICE, t0 + secs(1)).unwrap().unwrap();
        core.nack(&"e".into(), &token, t0 + secs(2)).unwrap();
        core.take_effects();
        // Redelivered after the nack delay; the latency still counts from the first enqueue.
        let (_, token) = core.dequeue(SERVICE, t0 + secs(5)).unwrap().unwrap();
        assert!(core.take_effects().acked_latencies.is_empty());
        core.ack(&"e".into(), &token, t0 + secs(7)).unwrap();
        assert_eq!(core.take_effects().acked_latencies, vec![secs(7)]);
        // A deliberately delayed eval counts from when it became ready.
        let mut delayed = eval("d", "api", 50, 2);
        delayed.wait = secs(10).as_nanos() as u64;
        core.enqueue(delayed, t0, 0).unwrap();
        core.advance(t0 + secs(10));
        let (_, token) = core.dequeue(SERVICE, t0 + secs(11)).unwrap().unwrap();
        core.take_effects();
        core.ack(&"d".into(), &token, t0 + secs(12)).unwrap();
        assert_eq!(core.take_effects().acked_latencies, vec![secs(2)]);
        // A refused ack reports nothing.
        assert!(core.ack(&"e".into(), &token, t0 + secs(8)).is_err());
        assert!(core.take_effects().acked_latencies.is_empty());
    }

    #[test]
    fn nack_timeout_redelivers_with_a_new_token() {
        let mut core = core();
        let t0 = Instant::now();
        core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap();
        let (e, old) = core.dequeue(SERVICE, t0).unwrap().unwrap();
        assert_eq!(core.take_effects().arm_timer, Some(t0 + secs(60)));

        core.advance(t0 + secs(60) - Duration::from_millis(1));
        assert_eq!(core.stats().total_unacked, 1);
        core.advance(t0 + secs(60));
        let stats = core.stats();
        assert_eq!((stats.total_unacked, stats.total_waiting), (0, 1));
        assert_eq!(core.take_effects().nack_timeouts, 1);

        // Re-enqueued after the initial nack delay, measured from the timeout.
        assert!(core
            .dequeue(SERVICE, t0 + secs(60) + Duration::from_millis(999))
            .unwrap()
            .is_none());
        let (again, new) = core.dequeue(SERVICE, t0 + secs(61)).unwrap().unwrap();
        assert_eq!(again.id, e.id);
        assert_eq!(
            again.wait,
            secs(1).as_nanos() as u64,
            "the backoff is recorded as Wait"
        );
        assert_ne!(new, old);
        assert_eq!(core.deliveries(&e.id), Some(2));

        // The stale delivery can neither ack nor nack the new one.
        let t = t0 + secs(62);
        assert_eq!(
            core.ack(&e.id, &old, t),
            Err(BrokerError::TokenMismatch {
                eval_id: e.id.clone()
            })
        );
        assert_eq!(
            core.nack(&e.id, &old, t),
            Err(BrokerError::TokenMismatch {
                eval_id: e.id.clone()
            })
        );
        core.ack(&e.id, &new, t).unwrap();
        assert_eq!(
            core.ack(&e.id, &new, t),
            Err(BrokerError::NotFound {
                eval_id: e.id.clone()
            })
        );
    }

    #[test]
    fn ack_after_the_nack_deadline_is_refused_even_before_the_timer_ran() {
        let mut core = core();
        let t0 = Instant::now();
        core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap();
        let (e, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
        let late = t0 + secs(60);
        assert_eq!(
            core.ack(&e.id, &token, late),
            Err(BrokerError::NackTimeoutReached {
                eval_id: e.id.clone()
            })
        );
        // It was nacked and comes back after the initial delay.
        assert_eq!(core.stats().total_waiting, 1);
        let (again, _) = core.dequeue(SERVICE, late + secs(1)).unwrap().unwrap();
        assert_eq!(again.id, e.id);
    }

    #[test]
    fn nack_delays_compound_then_the_delivery_limit_moves_the_eval_to_failed() {
        let config = EvalBrokerConfig::default();
        assert_eq!(config.nack_reenqueue_delay(0), Duration::ZERO);
        assert_eq!(config.nack_reenqueue_delay(1), secs(1));
        assert_eq!(config.nack_reenqueue_delay(2), secs(20));
        assert_eq!(config.nack_reenqueue_delay(3), secs(40));

        let mut core = core();
        let mut now = Instant::now();
        core.enqueue(eval("e", "web", 50, 1), now, 0).unwrap();
        core.enqueue(eval("later", "web", 50, 2), now, 0).unwrap();

        let (e, token) = core.dequeue(SERVICE, now).unwrap().unwrap();
        core.nack(&e.id, &token, now).unwrap();
        assert!(core
            .dequeue(SERVICE, now + secs(1) - Duration::from_nanos(1))
            .unwrap()
            .is_none());
        now += secs(1);

        let (e, token) = core.dequeue(SERVICE, now).unwrap().unwrap();
        assert_eq!(e.id, "e", "a nacked eval keeps its job's slot");
        core.nack(&e.id, &token, now).unwrap();
        assert!(core
            .dequeue(SERVICE, now + secs(20) - Duration::from_nanos(1))
            .unwrap()
            .is_none());
        now += secs(20);

        let (e, token) = core.dequeue(SERVICE, now).unwrap().unwrap();
        core.nack(&e.id, &token, now).unwrap();
        // Third failed delivery: straight to `_failed`, not back to `service`.
        assert!(core.dequeue(SERVICE, now + secs(3600)).unwrap().is_none());
        let stats = core.stats();
        assert_eq!(stats.by_scheduler[&SchedulerQueue::Failed].ready, 1);
        assert_eq!(stats.total_pending, 1, "the job's later eval still waits");

        let failed_queue = QueueSet::from_names(&[FAILED_QUEUE]);
        let (failed, token) = core.dequeue(failed_queue, now).unwrap().unwrap();
        assert_eq!(failed.id, "e");
        assert_eq!(
            core.stats().by_scheduler[&SchedulerQueue::Failed].unacked,
            1
        );

        // What the failed-eval reaper writes before acking: the eval failed, plus a
        // follow-up that retries the job after 1 min + random [0, 5 min).
        let mut rng = StdRng::seed_from_u64(9);
        let update = failed_eval_update(&failed, true, core.config(), &mut rng, 1_000).unwrap();
        assert_eq!(update.failed.status, EvalStatus::Failed);
        let follow_up = update.follow_up.unwrap();
        assert_eq!(update.failed.next_eval, follow_up.id);
        let wait = Duration::from_nanos(follow_up.wait);
        assert!(wait >= secs(60) && wait < secs(360), "{wait:?}");
        core.ack(&failed.id, &token, now).unwrap();
        let stats = core.stats();
        assert_eq!(stats.total_unacked, 0);
        assert_eq!(drain(&mut core, SERVICE, now), ["later"]);

        // The follow-up, once the FSM applies it, waits out its delay in the broker.
        let follow_up_id = follow_up.id.to_string();
        assert_eq!(
            core.enqueue(follow_up, now, 0).unwrap(),
            EnqueueOutcome::Waiting { until: now + wait }
        );
        assert!(drain(&mut core, SERVICE, now + wait - Duration::from_nanos(1)).is_empty());
        assert_eq!(drain(&mut core, SERVICE, now + wait), [follow_up_id]);
    }

    #[test]
    fn failed_eval_update_builds_the_failed_write_and_a_delayed_follow_up() {
        let config = EvalBrokerConfig::default();
        let mut rng = StdRng::seed_from_u64(42);
        let mut failed = eval("e", "web", 70, 5);
        failed.create_time = 1_000;
        let update = failed_eval_update(&failed, true, &config, &mut rng, 2_000).unwrap();
        assert_eq!(update.failed.status, EvalStatus::Failed);
        assert_eq!(
            update.failed.status_description,
            "evaluation reached delivery limit (3)"
        );
        assert_eq!(update.failed.modify_time, 2_000);
        let follow = update.follow_up.unwrap();
        assert_eq!(update.failed.next_eval, follow.id);
        assert_ne!(follow.id, failed.id);
        assert_eq!(follow.id.len(), 36);
        assert_eq!(follow.triggered_by, EvalTrigger::FailedFollowUp);
        assert_eq!(follow.status, EvalStatus::Pending);
        assert_eq!(follow.previous_eval, failed.id);
        assert_eq!((follow.priority, follow.eval_type), (70, JobType::Service));
        assert_eq!(follow.job_id, failed.job_id);
        assert_eq!((follow.create_time, follow.modify_time), (2_000, 2_000));

        // Wait = 1 min + uniform [0, 5 min).
        let waits: Vec<Duration> = (0..200)
            .map(|_| failed_follow_up_wait(&config, &mut rng))
            .collect();
        assert!(waits.iter().all(|w| *w >= secs(60) && *w < secs(360)));
        assert!(waits.iter().any(|w| *w < secs(120)) && waits.iter().any(|w| *w > secs(300)));
        assert!(Duration::from_nanos(follow.wait) >= secs(60));

        // The same seed gives the same follow-up.
        let again = failed_eval_update(
            &failed,
            true,
            &config,
            &mut StdRng::seed_from_u64(42),
            2_000,
        );
        assert_eq!(again.unwrap().follow_up.unwrap().id, follow.id);

        let orphan = failed_eval_update(&failed, false, &config, &mut rng, 2_000).unwrap();
        assert!(orphan.follow_up.is_none());
        assert!(orphan.failed.next_eval.is_empty());

        let core_eval = typed(eval("gc", "gc", 200, 1), JobType::Core);
        assert!(failed_eval_update(&core_eval, true, &config, &mut rng, 2_000).is_none());
    }

    #[test]
    fn delayed_evals_wait_for_wait_and_wait_until() {
        let mut core = core();
        let t0 = Instant::now();
        let unix_now: i64 = 1_700_000_000_000_000_000;

        let mut waiting = eval("wait", "a", 50, 1);
        waiting.wait = secs(5).as_nanos() as u64;
        assert_eq!(
            core.enqueue(waiting, t0, unix_now).unwrap(),
            EnqueueOutcome::Waiting {
                until: t0 + secs(5)
            }
        );

        let mut until = eval("until", "b", 50, 2);
        until.wait_until = Timestamp::from_unix_nanos(unix_now + secs(10).as_nanos() as i64);
        assert_eq!(
            core.enqueue(until, t0, unix_now).unwrap(),
            EnqueueOutcome::Waiting {
                until: t0 + secs(10)
            }
        );

        let mut past = eval("past", "c", 50, 3);
        past.wait_until = Timestamp::from_unix_nanos(unix_now - 1);
        assert_eq!(
            core.enqueue(past, t0, unix_now).unwrap(),
            EnqueueOutcome::Ready
        );

        assert_eq!(core.stats().total_waiting, 2);
        assert_eq!(core.next_deadline(), Some(t0 + secs(5)));
        assert_eq!(drain(&mut core, SERVICE, t0), ["past"]);
        assert!(drain(&mut core, SERVICE, t0 + secs(5) - Duration::from_nanos(1)).is_empty());
        assert_eq!(drain(&mut core, SERVICE, t0 + secs(5)), ["wait"]);
        assert!(drain(&mut core, SERVICE, t0 + secs(9)).is_empty());
        assert_eq!(drain(&mut core, SERVICE, t0 + secs(10)), ["until"]);
        assert_eq!(core.stats().total_waiting, 0);
    }

    #[test]
    fn a_delayed_eval_of_a_busy_job_becomes_pending_when_due() {
        let mut core = core();
        let t0 = Instant::now();
        core.enqueue(eval("running", "web", 50, 1), t0, 0).unwrap();
        let (running, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
        let mut delayed = eval("delayed", "web", 50, 2);
        delayed.wait = secs(1).as_nanos() as u64;
        core.enqueue(delayed, t0, 0).unwrap();
        core.advance(t0 + secs(1));
        assert_eq!(core.stats().total_pending, 1);
        core.ack(&running.id, &token, t0 + secs(2)).unwrap();
        assert_eq!(drain(&mut core, SERVICE, t0 + secs(2)), ["delayed"]);
    }

    #[test]
    fn drop_waiting_forgets_a_delayed_eval() {
        let mut core = core();
        let t0 = Instant::now();
        let mut delayed = eval("d", "web", 50, 1);
        delayed.wait_until = Timestamp::from_unix_nanos(secs(100).as_nanos() as i64);
        core.enqueue(delayed.clone(), t0, 0).unwrap();
        assert!(core.drop_waiting(&delayed.id, t0).unwrap());
        assert!(!core.drop_waiting(&delayed.id, t0).unwrap());
        assert_eq!(core.stats().total_waiting, 0);
        assert!(drain(&mut core, SERVICE, t0 + secs(200)).is_empty());
        // Forgotten entirely: it can be enqueued again.
        delayed.wait_until = Timestamp::ZERO;
        assert_eq!(core.enqueue(delayed, t0, 0).unwrap(), EnqueueOutcome::Ready);
    }

    #[test]
    fn dropping_a_nack_backoff_frees_the_job_slot() {
        let mut core = core();
        let t0 = Instant::now();
        core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap();
        core.enqueue(eval("next", "web", 50, 2), t0, 0).unwrap();
        let (e, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
        core.nack(&e.id, &token, t0).unwrap();
        assert!(core.drop_waiting(&e.id, t0).unwrap());
        assert_eq!(drain(&mut core, SERVICE, t0), ["next"]);
    }

    #[test]
    fn acking_an_undelivered_eval_is_refused_and_loses_nothing() {
        let mut core = core();
        let t0 = Instant::now();
        core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap();
        let id = EvalId::new("e");
        assert_eq!(
            core.ack(&id, "made-up", t0),
            Err(BrokerError::NotFound {
                eval_id: id.clone()
            })
        );
        assert_eq!(
            core.nack(&id, "made-up", t0),
            Err(BrokerError::NotFound {
                eval_id: id.clone()
            })
        );
        assert_eq!(core.deliveries(&id), Some(0));
        assert_eq!(drain(&mut core, SERVICE, t0), ["e"]);
    }

    #[test]
    fn duplicate_enqueues_are_dropped() {
        let mut core = core();
        let t0 = Instant::now();
        core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap();
        assert_eq!(
            core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap(),
            EnqueueOutcome::Duplicate
        );
        let (e, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
        assert_eq!(
            core.enqueue(e.clone(), t0, 0).unwrap(),
            EnqueueOutcome::Duplicate
        );
        // A token that is not the outstanding one does not park it either.
        assert_eq!(
            core.enqueue_with_token(e.clone(), Some("other"), t0, 0)
                .unwrap(),
            EnqueueOutcome::Duplicate
        );
        core.ack(&e.id, &token, t0).unwrap();
        assert_eq!(core.stats(), {
            let mut s = BrokerStats::default();
            for q in SchedulerQueue::ALL {
                s.by_scheduler.insert(q, QueueStats::default());
            }
            s
        });
    }

    #[test]
    fn a_resubmission_under_the_outstanding_token_waits_for_the_ack() {
        let mut core = core();
        let t0 = Instant::now();
        core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap();
        let (e, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
        let mut reblocked = e.clone();
        reblocked.status = EvalStatus::Blocked;
        assert_eq!(
            core.enqueue_with_token(reblocked, Some(&token), t0, 0)
                .unwrap(),
            EnqueueOutcome::Requeued
        );
        assert!(core.dequeue(SERVICE, t0).unwrap().is_none());
        core.ack(&e.id, &token, t0).unwrap();
        let (again, _) = core.dequeue(SERVICE, t0).unwrap().unwrap();
        assert_eq!(
            (again.id.as_str(), again.status),
            ("e", EvalStatus::Blocked)
        );
        assert_eq!(
            core.deliveries(&e.id),
            Some(1),
            "a fresh eval to the broker"
        );
    }

    #[test]
    fn a_resubmission_under_a_nacked_token_is_dropped() {
        let mut core = core();
        let t0 = Instant::now();
        core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap();
        let (e, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
        core.enqueue_with_token(e.clone(), Some(&token), t0, 0)
            .unwrap();
        core.nack(&e.id, &token, t0).unwrap();
        // Only the nack's own re-enqueue comes back.
        core.advance(t0 + secs(1));
        let stats = core.stats();
        assert_eq!((stats.total_ready, stats.total_waiting), (1, 0));
        let (again, token) = core.dequeue(SERVICE, t0 + secs(1)).unwrap().unwrap();
        core.ack(&again.id, &token, t0 + secs(1)).unwrap();
        assert!(core.dequeue(SERVICE, t0 + secs(100)).unwrap().is_none());
    }

    #[test]
    fn outstanding_reset_pause_and_resume_move_the_nack_deadline() {
        let mut core = core();
        let t0 = Instant::now();
        core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap();
        let (e, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
        assert_eq!(core.outstanding(&e.id, t0).unwrap(), Some(token.clone()));

        core.outstanding_reset(&e.id, &token, t0 + secs(50))
            .unwrap();
        core.advance(t0 + secs(100));
        assert_eq!(core.stats().total_unacked, 1, "reset to 60 s from t0+50");

        core.pause_nack_timeout(&e.id, &token, t0 + secs(105))
            .unwrap();
        core.advance(t0 + secs(1000));
        assert_eq!(
            core.stats().total_unacked,
            1,
            "paused while the plan is queued"
        );
        // Reset leaves a paused timer paused.
        core.outstanding_reset(&e.id, &token, t0 + secs(1000))
            .unwrap();
        core.advance(t0 + secs(2000));
        assert_eq!(core.stats().total_unacked, 1);

        core.resume_nack_timeout(&e.id, &token, t0 + secs(2000))
            .unwrap();
        core.advance(t0 + secs(2059));
        assert_eq!(core.stats().total_unacked, 1);
        core.advance(t0 + secs(2060));
        assert_eq!(core.stats().total_unacked, 0, "resumed at full length");
        assert_eq!(core.outstanding(&e.id, t0 + secs(2060)).unwrap(), None);

        let t = t0 + secs(2060);
        assert_eq!(
            core.outstanding_reset(&e.id, &token, t),
            Err(BrokerError::NotOutstanding {
                eval_id: e.id.clone()
            })
        );
        let (e, token) = core.dequeue(SERVICE, t + secs(1)).unwrap().unwrap();
        let t = t + secs(1);
        assert_eq!(
            core.outstanding_reset(&e.id, "stale", t),
            Err(BrokerError::TokenMismatch {
                eval_id: e.id.clone()
            })
        );
        assert_eq!(
            core.pause_nack_timeout(&e.id, "stale", t),
            Err(BrokerError::TokenMismatch {
                eval_id: e.id.clone()
            })
        );
        assert_eq!(
            core.outstanding_reset(&e.id, &token, t + secs(60)),
            Err(BrokerError::NackTimeoutReached {
                eval_id: e.id.clone()
            })
        );
    }

    #[test]
    fn effects_report_wake_ups_and_only_earlier_timers() {
        let mut core = core();
        let t0 = Instant::now();
        core.take_effects();
        core.enqueue(typed(eval("b", "b", 50, 1), JobType::Batch), t0, 0)
            .unwrap();
        let fx = core.take_effects();
        assert_eq!(fx.wake, QueueSet::EMPTY.with(SchedulerQueue::Batch));
        assert_eq!(fx.arm_timer, None);

        core.dequeue(QueueSet::ALL, t0).unwrap().unwrap();
        assert_eq!(core.take_effects().arm_timer, Some(t0 + secs(60)));
        core.enqueue(eval("s", "s", 50, 1), t0, 0).unwrap();
        core.dequeue(QueueSet::ALL, t0 + secs(1)).unwrap().unwrap();
        assert_eq!(
            core.take_effects().arm_timer,
            None,
            "a later deadline needs no re-arm"
        );
        let mut delayed = eval("d", "d", 50, 1);
        delayed.wait = secs(2).as_nanos() as u64;
        core.enqueue(delayed, t0 + secs(1), 0).unwrap();
        assert_eq!(core.take_effects().arm_timer, Some(t0 + secs(3)));
        assert_eq!(core.next_timer(), Some(t0 + secs(3)));
    }

    #[test]
    fn disabling_flushes_and_every_call_is_refused() {
        let mut core = core();
        let t0 = Instant::now();
        core.enqueue(eval("a", "a", 50, 1), t0, 0).unwrap();
        core.enqueue(eval("b", "b", 50, 2), t0, 0).unwrap();
        let (a, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
        core.take_effects();

        core.set_enabled(false);
        assert!(core.take_effects().wake_all);
        assert_eq!(core.next_deadline(), None);
        let disabled = Err(BrokerError::Disabled);
        assert_eq!(
            core.enqueue(eval("c", "c", 50, 3), t0, 0),
            disabled.clone().map(|()| EnqueueOutcome::Ready)
        );
        assert_eq!(core.dequeue(SERVICE, t0), Err(BrokerError::Disabled));
        assert_eq!(core.ack(&a.id, &token, t0), disabled);
        assert_eq!(core.nack(&a.id, &token, t0), disabled);
        assert_eq!(core.outstanding(&a.id, t0), Err(BrokerError::Disabled));
        assert_eq!(core.outstanding_reset(&a.id, &token, t0), disabled);
        assert_eq!(core.pause_nack_timeout(&a.id, &token, t0), disabled);
        assert_eq!(core.resume_nack_timeout(&a.id, &token, t0), disabled);
        assert_eq!(core.cancelable(1), Err(BrokerError::Disabled));
        assert_eq!(core.drop_waiting(&a.id, t0), Err(BrokerError::Disabled));
        assert_eq!(BrokerError::Disabled.to_string(), "eval broker disabled");

        core.set_enabled(true);
        assert_eq!(core.stats().total_ready + core.stats().total_unacked, 0);
        assert_eq!(
            core.ack(&a.id, &token, t0),
            Err(BrokerError::NotFound {
                eval_id: a.id.clone()
            })
        );
        assert_eq!(
            core.enqueue(eval("a", "a", 50, 1), t0, 0).unwrap(),
            EnqueueOutcome::Ready
        );
    }

    #[test]
    fn stats_count_per_scheduler_type() {
        let mut core = core();
        let t0 = Instant::now();
        core.enqueue(eval("s1", "s1", 50, 1), t0, 0).unwrap();
        core.enqueue(eval("s2", "s1", 50, 2), t0, 0).unwrap();
        core.enqueue(typed(eval("b1", "b1", 50, 3), JobType::Batch), t0, 0)
            .unwrap();
        core.enqueue(typed(eval("y1", "y1", 50, 4), JobType::System), t0, 0)
            .unwrap();
        let mut later = typed(eval("b2", "b2", 50, 5), JobType::Batch);
        later.wait = 1;
        core.enqueue(later, t0, 0).unwrap();
        core.dequeue(QueueSet::from_names(&["system"]), t0)
            .unwrap()
            .unwrap();

        let stats = core.stats();
        assert_eq!(
            (
                stats.total_ready,
                stats.total_unacked,
                stats.total_pending,
                stats.total_waiting
            ),
            (2, 1, 1, 1)
        );
        let service = stats.by_scheduler[&SchedulerQueue::Service];
        assert_eq!((service.ready, service.pending), (1, 1));
        let batch = stats.by_scheduler[&SchedulerQueue::Batch];
        assert_eq!((batch.ready, batch.waiting), (1, 1));
        assert_eq!(stats.by_scheduler[&SchedulerQueue::System].unacked, 1);
        assert_eq!(stats.by_scheduler.len(), 6);
    }

    #[test]
    fn queue_names_and_sets() {
        for q in SchedulerQueue::ALL {
            assert_eq!(SchedulerQueue::from_name(q.as_str()), Some(q));
        }
        assert_eq!(SchedulerQueue::Failed.as_str(), "_failed");
        assert_eq!(SchedulerQueue::from(JobType::SysBatch).as_str(), "sysbatch");
        let set = QueueSet::from_names(&["service", "nope", "_core"]);
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            [SchedulerQueue::Service, SchedulerQueue::Core]
        );
        assert!(set.intersects(QueueSet::EMPTY.with(SchedulerQueue::Core)));
        assert!(!set.contains(SchedulerQueue::Batch));
        assert_eq!(QueueSet::ALL.iter().count(), 6);
    }

    #[test]
    fn tokens_are_uuid_shaped_and_reproducible_from_the_seed() {
        let mut rng = StdRng::seed_from_u64(1);
        let tokens: Vec<String> = (0..100).map(|_| random_uuid(&mut rng)).collect();
        for t in &tokens {
            assert_eq!(t.len(), 36);
            let bytes = t.as_bytes();
            for (i, b) in bytes.iter().enumerate() {
                if matches!(i, 8 | 13 | 18 | 23) {
                    assert_eq!(*b, b'-');
                } else {
                    assert!(b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
                }
            }
            assert_eq!(bytes[14], b'4');
            assert!(matches!(bytes[19], b'8' | b'9' | b'a' | b'b'));
        }
        assert_eq!(tokens.iter().collect::<HashSet<_>>().len(), 100);
        assert_eq!(random_uuid(&mut StdRng::seed_from_u64(1)), tokens[0]);
    }

    #[test]
    fn config_defaults_are_nomads_and_validation_rejects_nonsense() {
        let config = EvalBrokerConfig::default();
        assert_eq!(config.nack_timeout, secs(60));
        assert_eq!(config.delivery_limit, 3);
        assert_eq!(
            (config.initial_nack_delay, config.subsequent_nack_delay),
            (secs(1), secs(20))
        );
        assert_eq!(config.failed_followup_baseline_delay, secs(60));
        assert_eq!(config.failed_followup_delay_range, secs(300));
        assert_eq!(config.reap_cancelable_interval, secs(5));
        config.validate().unwrap();
        EvalBrokerConfig::for_tests().validate().unwrap();

        let bad = [
            EvalBrokerConfig {
                nack_timeout: Duration::ZERO,
                ..config.clone()
            },
            EvalBrokerConfig {
                delivery_limit: 0,
                ..config.clone()
            },
            EvalBrokerConfig {
                cancelable_batch_size: 0,
                ..config.clone()
            },
            EvalBrokerConfig {
                cancelable_batch_size: 7282,
                ..config.clone()
            },
            EvalBrokerConfig {
                stats_interval: Duration::ZERO,
                ..config.clone()
            },
        ];
        for config in bad {
            assert!(matches!(
                EvalBrokerCore::new(config, StdRng::seed_from_u64(0)),
                Err(BrokerError::InvalidConfig { .. })
            ));
        }
    }

    // ---- the async shell, on paused tokio time ----

    fn broker() -> EvalBroker {
        let broker = EvalBroker::with_rng_and_clock(
            EvalBrokerConfig::default(),
            StdRng::seed_from_u64(3),
            paused_wall_clock(),
        )
        .unwrap();
        broker.set_enabled(true);
        broker
    }

    const UNIX_BASE: i64 = 1_700_000_000_000_000_000;

    /// A wall clock that follows tokio's (paused) clock from `UNIX_BASE`.
    fn paused_wall_clock() -> WallClock {
        let start = Instant::now();
        Arc::new(move || UNIX_BASE + (Instant::now() - start).as_nanos() as i64)
    }

    async fn until_waiting(broker: &EvalBroker, n: usize) {
        while broker.waiting_dequeuers() < n {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn every_waiting_dequeuer_is_woken_when_work_arrives() {
        let broker = broker();
        let start = Instant::now();
        let spawn = |types: &'static [&'static str]| {
            let broker = broker.clone();
            tokio::spawn(async move { broker.dequeue(types, secs(600)).await })
        };
        let service: Vec<_> = (0..6).map(|_| spawn(&["service"])).collect();
        let batch: Vec<_> = (0..2).map(|_| spawn(&["batch", "system"])).collect();
        until_waiting(&broker, 8).await;

        // One batch of six: every service dequeuer must get one, now, not at its timeout.
        let evals = (0..6)
            .map(|i| (eval(&format!("s{i}"), &format!("s{i}"), 50, i), None))
            .collect();
        broker.enqueue_all(evals).unwrap();
        let mut got = HashSet::new();
        for handle in service {
            let (e, _) = handle.await.unwrap().unwrap().expect("woken with work");
            got.insert(e.id.to_string());
        }
        assert_eq!(got.len(), 6);
        assert_eq!(Instant::now(), start, "nobody waited for a timeout");
        assert_eq!(
            broker.waiting_dequeuers(),
            2,
            "batch/system dequeuers still wait"
        );

        broker
            .enqueue(typed(eval("y", "y", 50, 1), JobType::System))
            .unwrap();
        broker
            .enqueue(typed(eval("b", "b", 50, 1), JobType::Batch))
            .unwrap();
        for handle in batch {
            assert!(handle.await.unwrap().unwrap().is_some());
        }
        assert_eq!(Instant::now(), start);
    }

    #[tokio::test(start_paused = true)]
    async fn dequeue_times_out_empty_and_deregisters() {
        let broker = broker();
        let start = Instant::now();
        assert_eq!(
            broker
                .dequeue(&["service"], Duration::from_millis(500))
                .await,
            Ok(None)
        );
        assert_eq!(Instant::now() - start, Duration::from_millis(500));
        assert_eq!(broker.waiting_dequeuers(), 0);
        assert_eq!(broker.dequeue(&["service"], Duration::ZERO).await, Ok(None));
        assert_eq!(
            broker.dequeue::<&str>(&[], secs(1)).await,
            Err(BrokerError::NoSchedulers)
        );

        // A dropped (cancelled) dequeue leaves no registration behind.
        let pending = tokio::time::timeout(secs(1), broker.dequeue(&["service"], secs(60))).await;
        assert!(pending.is_err());
        assert_eq!(broker.waiting_dequeuers(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn disabling_wakes_waiting_dequeuers_with_an_error() {
        let broker = broker();
        let waiter = {
            let broker = broker.clone();
            tokio::spawn(async move { broker.dequeue(&["service"], secs(600)).await })
        };
        until_waiting(&broker, 1).await;
        let start = Instant::now();
        broker.set_enabled(false);
        assert_eq!(waiter.await.unwrap(), Err(BrokerError::Disabled));
        assert_eq!(Instant::now(), start);
        assert_eq!(
            broker.enqueue(eval("a", "a", 50, 1)),
            Err(BrokerError::Disabled)
        );
        assert_eq!(broker.stats().total_ready, 0);
        broker.set_enabled(true);
        assert_eq!(
            broker.enqueue(eval("a", "a", 50, 1)),
            Ok(EnqueueOutcome::Ready)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_nack_timer_fires_on_tokio_time() {
        let broker = broker();
        let start = Instant::now();
        broker.enqueue(eval("e", "web", 50, 1)).unwrap();
        let (e, first) = broker
            .dequeue(&["service"], secs(1))
            .await
            .unwrap()
            .unwrap();
        // Never acked: redelivered after the 60 s nack timeout plus the 1 s backoff.
        let (again, second) = broker
            .dequeue(&["service"], secs(600))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(again.id, e.id);
        assert_eq!(Instant::now() - start, secs(61));
        assert_ne!(first, second);
        assert_eq!(
            broker.ack(&e.id, &first),
            Err(BrokerError::TokenMismatch {
                eval_id: e.id.clone()
            })
        );
        broker.ack(&e.id, &second).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn outstanding_reset_keeps_a_slow_worker_alive() {
        let broker = broker();
        broker.enqueue(eval("e", "web", 50, 1)).unwrap();
        let (e, token) = broker
            .dequeue(&["service"], secs(1))
            .await
            .unwrap()
            .unwrap();
        for _ in 0..5 {
            tokio::time::sleep(secs(50)).await;
            broker.outstanding_reset(&e.id, &token).unwrap();
        }
        broker.pause_nack_timeout(&e.id, &token).unwrap();
        tokio::time::sleep(secs(600)).await;
        broker.resume_nack_timeout(&e.id, &token).unwrap();
        tokio::time::sleep(secs(59)).await;
        assert_eq!(broker.outstanding(&e.id).unwrap(), Some(token.clone()));
        broker.ack(&e.id, &token).unwrap();
        assert_eq!(broker.stats().total_unacked, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_evals_are_released_on_tokio_time() {
        let broker = broker();
        let start = Instant::now();
        let mut e = eval("later", "web", 50, 1);
        e.wait_until = Timestamp::from_unix_nanos(UNIX_BASE + secs(30).as_nanos() as i64);
        broker.enqueue(e).unwrap();
        let mut w = eval("wait", "other", 50, 2);
        w.wait = secs(10).as_nanos() as u64;
        broker.enqueue(w).unwrap();

        let (first, _) = broker
            .dequeue(&["service"], secs(600))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (first.id.as_str(), Instant::now() - start),
            ("wait", secs(10))
        );
        let (second, _) = broker
            .dequeue(&["service"], secs(600))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (second.id.as_str(), Instant::now() - start),
            ("later", secs(30))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_cancelable_reaper_is_woken_by_an_ack() {
        let broker = broker();
        broker.enqueue(eval("a", "web", 50, 1)).unwrap();
        let (a, token) = broker
            .dequeue(&["service"], secs(1))
            .await
            .unwrap()
            .unwrap();
        broker.enqueue(eval("b", "web", 50, 2)).unwrap();
        broker.enqueue(eval("c", "web", 50, 3)).unwrap();
        let reaper = {
            let broker = broker.clone();
            tokio::spawn(async move {
                broker.wait_cancelable(secs(5)).await;
                broker.cancelable(CANCELABLE_BATCH_SIZE)
            })
        };
        tokio::task::yield_now().await;
        let start = Instant::now();
        broker.ack(&a.id, &token).unwrap();
        let canceled = reaper.await.unwrap().unwrap();
        assert_eq!(ids(&canceled), ["b"]);
        assert_eq!(Instant::now(), start);
    }
}
