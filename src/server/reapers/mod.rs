//! The leader's eval reapers (Nomad's `reapFailedEvaluations`, `reapCancelableEvaluations`,
//! `reapDupBlockedEvaluations`), run while leadership is established:
//!
//! - **failed**: dequeues the broker's `_failed` queue (evals past the delivery limit), writes
//!   each as `failed` together with a follow-up eval delayed by 1 min + random 0–5 min (none
//!   if the job is gone) in one raft entry, then acks it. A failed write leaves the delivery
//!   unacked; its nack timer brings it back.
//! - **cancelable**: on every Ack that made evals cancelable, and every
//!   `reap_cancelable_interval` (5 s), takes one batch of at most 728 superseded evals and
//!   writes them `canceled`.
//! - **duplicate blocked**: writes the blocked evals superseded by a newer one of their job as
//!   `canceled`.
//!
//! (The periodic release of evals blocked by `max-plan-attempts` runs in the blocked-evals
//! tracker's own maintenance task.)
//!
//! - [`core`](self::core): the writes, without I/O (what an eval becomes when it is failed or canceled,
//!   and the failed eval's follow-up).
//! - [`shell`]: [`ReapersDuty`], the three tasks on the [`LeaderService`] of the duty.
//!
//! Metrics: counters `teamster_reaper_failed_evals_total`, `teamster_reaper_canceled_evals_total`,
//! `teamster_reaper_duplicate_blocked_total`, `teamster_reaper_write_errors_total{reaper}`.
//!
//! May import: the bottom of `server` (`config`, `raft`, `leader`, `leader_service`) and the
//! subsystems it reaps for (`broker`, `blocked`, `pipeline`); never `endpoints` or `worker`.
//!
//! [`LeaderService`]: crate::server::leader_service::LeaderService

pub mod core;
pub mod shell;

pub use self::core::{
    duplicate_description, failed_eval_update, failed_follow_up_eval, failed_follow_up_wait,
    mark_canceled, mark_duplicates_canceled, FailedEvalUpdate, CANCELED_DESCRIPTION,
};
pub use self::shell::ReapersDuty;
