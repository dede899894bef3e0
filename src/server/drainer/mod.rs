//! The leader's node drainer (Nomad's `NodeDrainer`): while this server leads, it moves
//! the allocations off draining nodes at the pace each group's `migrate` block allows,
//! stops what is left at the drain's force deadline, and ends each drain as complete.
//!
//! ```text
//!  state (nodes, allocs, jobs) ──snapshot──▶ core::plan(snapshot, now) ──▶ marks, completions
//!        ▲                                                                  │
//!        ├── raft: AllocUpdateDesiredTransition { migrate, node-drain evals } ◀┤ shell
//!        └── raft: NodeDrainComplete { node }                              ◀─┘
//! ```
//!
//! Semantics (Nomad's `nomad/drainer`):
//! - **Service** groups: at most `min(drainable, healthy − (count − migrate.max_parallel))`
//!   of the group's unmarked allocations on draining nodes are marked
//!   `DesiredTransition.Migrate` at a time, with one `node-drain` evaluation per job, in one
//!   raft entry; the scheduler stops them and places replacements elsewhere (an allocation
//!   on a draining node that is not marked stays where it is). More are marked once the
//!   replacements are reported healthy. What counts as healthy is documented on
//!   `core::plan`'s helper: an unmarked, non-terminal allocation with a health verdict
//!   (healthy or not, as Nomad's `HasHealth`), or one running since before the drains began.
//! - **Batch** and **sysbatch** allocations are left to finish; they are marked at the
//!   deadline.
//! - **System** allocations are marked last, once every other allocation on the node has
//!   stopped on its client, and the drain completes with that; with `IgnoreSystemJobs` they
//!   are left running.
//! - At the **force deadline** (`Deadline` < 0: at once; 0: never) everything left is
//!   marked and the drain completes (Nomad's `deadline_reached`).
//! - A drain **completes** (`NodeDrainComplete`: `DrainStrategy` cleared, `LastDrain.Status`
//!   `complete`, the node stays ineligible) when no service, batch or sysbatch allocation is
//!   left on the node that its client has not stopped. teamster has no node events, so
//!   Nomad's "Node drain complete" event is a log line and a metric here.
//!
//! Nothing is kept in memory that the state does not hold: a pass plans from a snapshot,
//! the marks are in the allocations and the drains in the nodes, so a new leader carries on
//! where the old one stopped.
//!
//! - [`core`]: what to mark and complete (pure: a snapshot and the time in).
//! - [`shell`]: [`DrainerDuty`], the loop that waits for the next force deadline or a change
//!   of the nodes, allocations or jobs, and writes through a [`DrainWriter`] (the raft node).
//!
//! Metrics: counter `teamster_drainer_allocs_marked_total{reason}` (`migrate`, `deadline`,
//! `system`), counter `teamster_drainer_drains_completed_total{deadline_reached}`, counter
//! `teamster_drainer_write_errors_total`, gauge `teamster_drainer_draining_nodes`.
//!
//! May import: the bottom of `server` (`raft`, `leader`, `leader_service`, `evals`), `util`.

pub mod core;
pub mod shell;
#[cfg(test)]
mod tests;

pub use self::core::{plan, Completion, DrainPlan, Mark, MarkReason};
pub use self::shell::{DrainWriter, DrainerDuty};
