//! The broker's async shell, [`EvalBroker`]: a `Clone` handle around the core under a
//! mutex, the blocking [`EvalBroker::dequeue`], the metrics, and (while enabled) two tasks
//! on a [`LeaderService`]: the core's timers and the periodic gauges.
//!
//! A waiting dequeuer registers itself (its types and its own `Notify`) in the same critical
//! section in which it found nothing, so no enqueue can slip between the check and the
//! registration, and `Notify` keeps a permit if the wake-up lands before the dequeuer starts
//! waiting.

use std::fmt;
use std::future::ready;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use rand::rngs::StdRng;
use teamster_storage::model::{EvalId, Evaluation};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::core::EvalBrokerCore;
use super::types::{
    BrokerError, BrokerStats, EnqueueOutcome, QueueSet, Token, EVAL_LATENCY_METRIC,
};
use crate::server::config::EvalBrokerConfig;
use crate::server::leader_service::{on_owner, run_deadlines, LeaderService};
use crate::util::SharedClock;

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
}

struct BrokerShared {
    state: Mutex<BrokerState>,
    /// Wakes the timer task when the earliest deadline moved earlier.
    timer_kick: Arc<Notify>,
    /// Wakes the cancelable reaper when an Ack made evals cancelable.
    cancelable_ready: Notify,
    clock: SharedClock,
    /// The timer and stats tasks, running while enabled.
    tasks: LeaderService,
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
            metrics::counter!("teamster.broker.nack_timeouts_total")
                .increment(effects.nack_timeouts);
        }
        if effects.cancelable_added > 0 {
            self.cancelable_ready.notify_one();
        }
        for latency in effects.acked_latencies {
            metrics::histogram!(EVAL_LATENCY_METRIC).record(latency.as_secs_f64());
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
    /// A disabled broker that draws tokens and tie breaks from `rng` and reads `clock` to
    /// place `WaitUntil` evals.
    pub fn new(
        config: EvalBrokerConfig,
        rng: StdRng,
        clock: SharedClock,
    ) -> Result<Self, BrokerError> {
        let core = EvalBrokerCore::new(config, rng)?;
        Ok(Self {
            shared: Arc::new(BrokerShared {
                state: Mutex::new(BrokerState {
                    core,
                    waiters: Vec::new(),
                    next_waiter_id: 0,
                }),
                timer_kick: Arc::new(Notify::new()),
                cancelable_ready: Notify::new(),
                clock,
                tasks: LeaderService::new(),
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
        let stats_interval = state.core.config().stats_interval;
        self.shared.tasks.switch(enabled, |set| {
            let (shared, kick) = (
                Arc::downgrade(&self.shared),
                Arc::clone(&self.shared.timer_kick),
            );
            set.spawn(|stop| run_timers(shared, kick, stop));
            set.spawn_every(
                stats_interval,
                Arc::downgrade(&self.shared),
                BrokerShared::emit_stats,
            );
        });
        self.shared.apply_effects(&mut state);
        let stats = state.core.stats();
        drop(state);
        emit_broker_gauges(&stats);
        tracing::info!(enabled, "eval broker enabled status changed");
    }

    /// Holds back deliveries or releases them ([`EvalBrokerCore::set_held`]): a leader
    /// handing over holds them until it has stepped down or the hand-over failed.
    pub fn hold_deliveries(&self, held: bool) {
        let mut state = self.shared.lock();
        state.core.set_held(held);
        self.shared.apply_effects(&mut state);
        drop(state);
        tracing::info!(held, "eval broker deliveries held status changed");
    }

    /// Enqueues a pending eval (FSM apply on the leader, and leadership restore). An eval the
    /// broker already holds is dropped.
    pub fn enqueue(&self, eval: Evaluation) -> Result<EnqueueOutcome, BrokerError> {
        let unix_nanos = self.shared.clock.now_unix_nanos();
        self.shared
            .with_core(|core| core.enqueue(eval, Instant::now(), unix_nanos))
    }

    /// Enqueues many evals under one lock, so woken dequeuers see the highest priority
    /// first. An eval with the token of its still-outstanding delivery is parked until that
    /// delivery is acked (the blocked-evals tracker releases reblocked evals this way).
    pub fn enqueue_all(&self, evals: Vec<(Evaluation, Option<Token>)>) -> Result<(), BrokerError> {
        let unix_nanos = self.shared.clock.now_unix_nanos();
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

/// The timer task: sleeps until the core's next deadline and fires what is due; re-reads
/// the deadline when kicked.
async fn run_timers(shared: Weak<BrokerShared>, kick: Arc<Notify>, stop: CancellationToken) {
    run_deadlines(
        &stop,
        &kick,
        || {
            shared
                .upgrade()
                .and_then(|shared| shared.lock().core.next_timer())
        },
        |_| {
            ready(on_owner(&shared, |shared| {
                shared.with_core(|core| core.advance(Instant::now()));
            }))
        },
    )
    .await;
}
