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
//!   leader's failed-eval reaper drains (`reapers::failed_eval_update` builds its raft write).
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
//!
//! # Files
//!
//! - [`types`]: errors, queues, tokens, counts, effects, constants.
//! - [`core`](self::core): [`EvalBrokerCore`], the state machine.
//! - [`shell`]: [`EvalBroker`], the handle on tokio.
//!
//! May import: the bottom of `server` (`config`, `leader_service`) and `util`; never another
//! subsystem (`blocked`, `pipeline`, `reapers` build on the broker), `endpoints` or `worker`.

pub mod core;
pub mod shell;
pub mod types;

#[cfg(test)]
pub(crate) mod tests;

pub use self::core::EvalBrokerCore;
pub use self::shell::EvalBroker;
pub use self::types::{
    eval_latency_buckets, BrokerError, BrokerStats, Effects, EnqueueOutcome, QueueSet, QueueStats,
    SchedulerQueue, Token, DEFAULT_DEQUEUE_TIMEOUT, EVAL_LATENCY_METRIC, FAILED_QUEUE,
};
