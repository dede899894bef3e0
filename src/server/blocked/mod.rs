//! The blocked-evals tracker: evaluations that could not place everything, parked until the
//! cluster gains capacity that could help them.
//!
//! When a scheduler cannot place some allocations it writes a `blocked` eval carrying what it
//! learned: which computed node classes were eligible or ineligible for the job
//! (`ClassEligibility`), whether the job's constraints escaped classes altogether
//! (`EscapedComputedClass`, constraints on unique attributes), and the state index it saw
//! (`SnapshotIndex`). The tracker (leader only, semantics of Nomad's
//! `nomad/blocked_evals.go`) holds those evals and hands them back to the [`EvalBroker`] when
//! a capacity change could let them make progress:
//!
//! - **One blocked eval per job** — per job *and node* for `system` jobs, whose scheduler
//!   blocks per node. The newer (by `max(CreateIndex, SnapshotIndex)`) wins; the loser goes to
//!   the duplicates list, which the leader's reaper writes as canceled.
//! - **Unblock by class** ([`BlockedEvals::unblock`], a node became ready or eligible, or an
//!   allocation on it finished): every *escaped* eval is released (a class says nothing about
//!   them), and every *captured* eval unless its eligibility map explicitly marks that class
//!   ineligible (a class it never saw is released, for correctness).
//! - **Unblock by node** ([`BlockedEvals::unblock_node`]): the system evals parked on that node.
//! - **Missed unblock**: an eval blocked by a scheduler that ran on a snapshot older than an
//!   unblock that could have helped it goes straight back to the broker. Each unblock records
//!   its raft index per class (and, beyond Nomad, per node, so a system eval blocked on a node
//!   that freed capacity meanwhile is caught too); indexes older than the prune threshold are
//!   dropped.
//! - **Failed placements** ([`BlockedEvals::unblock_failed`]): evals blocked because the plan
//!   never made progress (`max-plan-attempts`) are released periodically (every minute), as
//!   capacity changes are not what they wait for.
//!
//! Quota and non-node-resource (CSI, host volume) unblocking are not modelled: the evaluation
//! model carries neither a quota nor missing resources.
//!
//! # Shape
//!
//! [`BlockedEvalsCore`] is a sans-IO struct: calls take the eval or the event plus `now` (a
//! `tokio::time::Instant` value, used only to age unblock indexes) and return the evals to
//! release as [`ReleasedEval`]s. [`BlockedEvals`] is the tokio shell: a `Clone` handle that
//! forwards released evals to its [`EvalBroker`] (under its own lock, so releases reach the
//! broker in the order they happened), and while enabled runs the periodic chores (pruning,
//! the failed unblock, the gauges) on a [`LeaderService`].
//!
//! ```text
//!  FSM: blocked eval ──────────block────┐
//!  Eval.Reblock (token checked) ─reblock┤
//!                                       ▼
//!                  one per job (and node)? ──older one──▶ duplicates ──▶ reaper (canceled)
//!                                       ▼
//!                  missed an unblock since its snapshot? ──yes──▶ EvalBroker (at once)
//!                                       ▼ no
//!                  tracked: captured (class eligibility) · escaped · system by node
//!                                       │
//!  node ready / eligible, alloc done ──unblock(class), unblock_node(node)──┐
//!  every minute ──unblock_failed (max-plan-attempts)───────────────────────┤
//!                                                                          ▼
//!                                          released ──enqueue_all──▶ EvalBroker
//! ```
//!
//! # Files
//!
//! - [`types`]: the settings, what the core returns ([`ReleasedEval`], [`BlockOutcome`]) and
//!   the counts.
//! - [`core`](self::core): [`BlockedEvalsCore`], the state machine.
//! - [`shell`]: [`BlockedEvals`], the handle on tokio.
//!
//! May import: the bottom of `server` (`config`, `leader_service`), `util`, and the `broker`
//! it releases into; never `pipeline`, `reapers`, `endpoints` or `worker`.
//!
//! [`EvalBroker`]: crate::server::broker::EvalBroker
//! [`LeaderService`]: crate::server::leader_service::LeaderService

pub mod core;
pub mod shell;
pub mod types;

#[cfg(test)]
mod tests;

pub use self::core::BlockedEvalsCore;
pub use self::shell::BlockedEvals;
pub use self::types::{BlockOutcome, BlockedEvalsConfig, BlockedStats, ReleasedEval};
