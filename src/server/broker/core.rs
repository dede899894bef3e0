//! The broker's sans-IO core, [`EvalBrokerCore`]: ready heaps, per-job slots, deliveries
//! and timers as plain data. No tokio runtime and no clock reads: time enters as `Instant`
//! values passed to each call (and the wall clock as Unix nanoseconds where a `WaitUntil` is
//! placed), randomness from the seedable `StdRng` given at construction, and what the outside
//! world must do leaves as [`Effects`].

use std::cmp::{Ordering, Reverse};
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;
use teamster_storage::model::{EvalId, Evaluation, JobId, Namespace, Timestamp};
use tokio::time::Instant;

use super::types::{
    BrokerError, BrokerStats, Effects, EnqueueOutcome, QueueSet, QueueStats, SchedulerQueue, Token,
    MAX_TIMER_DELAY,
};
use crate::server::config::EvalBrokerConfig;
use crate::server::leader_service::Switch;

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
    /// Stopped while `plans` plans of the delivery sit in the plan queue (a worker that got
    /// no answer may submit again while the first copy still waits). With `nacked`, the
    /// worker nacked meanwhile: the nack takes effect when the last plan is back
    /// ([`EvalBrokerCore::resume_nack_timeout`]), so the eval is not scheduled again while a
    /// plan of its last delivery may still commit.
    Paused {
        plans: u32,
        nacked: bool,
    },
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

/// An eval in a heap, ordered by its `key` alone: the greatest key leaves the (max-)heap
/// first.
#[derive(Debug)]
struct HeapEntry<K> {
    key: K,
    eval: Box<Evaluation>,
}

impl<K: Ord> Ord for HeapEntry<K> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key.cmp(&other.key)
    }
}

impl<K: Ord> PartialOrd for HeapEntry<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K: Ord> PartialEq for HeapEntry<K> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<K: Ord> Eq for HeapEntry<K> {}

/// A ready-heap entry: higher priority first, then lower create index, then arrival order
/// (the key: priority, create index reversed, arrival reversed).
type ReadyEntry = HeapEntry<(u32, Reverse<u64>, Reverse<u64>)>;

fn ready_entry(eval: Box<Evaluation>, seq: u64) -> ReadyEntry {
    HeapEntry {
        key: (eval.priority, Reverse(eval.create_index), Reverse(seq)),
        eval,
    }
}

/// A pending-heap entry: higher priority first, then higher modify index (newest), then the
/// later arrival (the key: priority, modify index, arrival).
type PendingEntry = HeapEntry<(u32, u64, u64)>;

fn pending_entry(eval: Box<Evaluation>, seq: u64) -> PendingEntry {
    HeapEntry {
        key: (eval.priority, eval.modify_index, seq),
        eval,
    }
}

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
    enabled: Switch,
    /// Deliveries held back (a leader handing over): dequeues find nothing until released.
    held: bool,
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
            enabled: Switch::default(),
            held: false,
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
        self.enabled.is_on()
    }

    /// Enables or disables the broker. Disabling flushes everything (queues, deliveries,
    /// timers, cancelable list) and wakes every dequeuer; enabling starts empty.
    pub fn set_enabled(&mut self, enabled: bool) {
        if self.enabled.set(enabled) {
            if enabled {
                // A hold set while disabled belongs to an earlier leadership.
                self.held = false;
            } else {
                self.flush();
            }
        }
    }

    /// Holds back deliveries (`true`: every dequeue finds nothing, waiting dequeuers keep
    /// waiting) or releases them (waking every dequeuer). A leader handing over holds them,
    /// so that no evaluation is delivered whose plan the stopping leader would refuse.
    /// Disabling releases them too.
    pub fn set_held(&mut self, held: bool) {
        if self.held && !held {
            self.effects.wake_all = true;
        }
        self.held = held;
    }

    fn flush(&mut self) {
        self.held = false;
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
        self.enabled.check(BrokerError::Disabled)
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
                slot.get_mut().pending.push(pending_entry(eval, seq));
                return EnqueueOutcome::Pending;
            }
        }
        self.push_ready(eval, queue, seq);
        EnqueueOutcome::Ready
    }

    /// Puts an eval that holds its job's slot on a ready queue.
    fn push_ready(&mut self, eval: Box<Evaluation>, queue: SchedulerQueue, seq: u64) {
        self.ready[queue.index()].push(ready_entry(eval, seq));
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
        if self.held {
            return Ok(None);
        }

        let mut best: Option<u32> = None;
        let mut tied = [SchedulerQueue::Service; 6];
        let mut n_tied = 0;
        for queue in queues.iter() {
            let Some(root) = self.ready[queue.index()].peek() else {
                continue;
            };
            match best {
                Some(priority) if root.eval.priority < priority => {}
                Some(priority) if root.eval.priority == priority => {
                    tied[n_tied] = queue;
                    n_tied += 1;
                }
                _ => {
                    best = Some(root.eval.priority);
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
    /// was its last allowed delivery. An eval parked under this token is dropped. While the
    /// delivery's plan is in the plan queue (its timer paused) the nack waits for the plan.
    pub fn nack(&mut self, eval_id: &EvalId, token: &str, now: Instant) -> Result<(), BrokerError> {
        self.ensure_enabled()?;
        self.advance(now);
        if let Ok(NackTimer::Paused { plans, .. }) = self.outstanding_timer(eval_id, token) {
            // Its plan is still in the plan queue (the worker gave up waiting for it, or is
            // stopping): deliver the eval again only once that plan committed or failed.
            if let Some(unack) = self.unacked_mut(eval_id) {
                unack.timer = NackTimer::Paused {
                    plans,
                    nacked: true,
                };
            }
            return Ok(());
        }
        self.nack_now(eval_id, token, now)
    }

    /// [`EvalBrokerCore::nack`] without waiting for a plan: timers are already advanced.
    fn nack_now(&mut self, eval_id: &EvalId, token: &str, now: Instant) -> Result<(), BrokerError> {
        if !self.requeue.is_empty() {
            self.requeue.remove(token);
        }
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
        if let NackTimer::Running(_) = self.stop_nack_timer(eval_id, token, now)? {
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
        let paused = match self.stop_nack_timer(eval_id, token, now)? {
            NackTimer::Running(_) => NackTimer::Paused {
                plans: 1,
                nacked: false,
            },
            NackTimer::Paused { plans, nacked } => NackTimer::Paused {
                plans: plans + 1,
                nacked,
            },
        };
        if let Some(unack) = self.unacked_mut(eval_id) {
            unack.timer = paused;
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
        match self.stop_nack_timer(eval_id, token, now)? {
            // Another plan of the delivery is still queued.
            NackTimer::Paused { plans, nacked } if plans > 1 => {
                if let Some(unack) = self.unacked_mut(eval_id) {
                    unack.timer = NackTimer::Paused {
                        plans: plans - 1,
                        nacked,
                    };
                }
                Ok(())
            }
            NackTimer::Paused { nacked: true, .. } => self.nack_now(eval_id, token, now),
            NackTimer::Paused { .. } | NackTimer::Running(_) => {
                self.start_nack_timer(eval_id, now);
                Ok(())
            }
        }
    }

    /// Checks the delivery (enabled, outstanding with this token, not expired at `now`) and
    /// removes its nack timer if one runs; returns the timer as it was.
    fn stop_nack_timer(
        &mut self,
        eval_id: &EvalId,
        token: &str,
        now: Instant,
    ) -> Result<NackTimer, BrokerError> {
        self.ensure_enabled()?;
        self.advance_checking(eval_id, token, now)?;
        let timer = self.outstanding_timer(eval_id, token)?;
        if let NackTimer::Running(key) = timer {
            self.timers.remove(&key);
        }
        Ok(timer)
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
        unack.timer = NackTimer::Paused {
            plans: 0,
            nacked: false,
        };
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
