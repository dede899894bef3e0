//! The leader's periodic dispatcher (Nomad's `PeriodicDispatch`): while this server leads,
//! it launches the children of every active periodic parent at the times its cron
//! expressions give, in the parent's time zone.
//!
//! ```text
//!  state (jobs, periodic launches) ──snapshot──▶ core::plan(parents, now) ──▶ launches due
//!        ▲                                                              │
//!        └──── raft: Command::PeriodicLaunch { child + eval, launch } ◀─┘ shell
//! ```
//!
//! Nothing is kept in memory that the state does not hold: each scheduled launch writes the
//! child, its evaluation and the parent's new last launch time in one raft entry, and the
//! state refuses a launch time at or before the recorded one. A new leader plans from the
//! recorded launches, so a failover neither skips a launch (one missed while no leader was
//! up is launched at once, for the newest missed time) nor doubles one.
//!
//! - [`core`]: what is due (pure: parents and the time in, launches out) and the child job.
//! - [`shell`]: [`PeriodicDuty`], the loop that waits for the next launch or a change of the
//!   jobs, and writes through a [`LaunchWriter`] (the raft node).
//!
//! Metrics: counter `teamster_periodic_launches_total{result}` (`launched`, `skipped`,
//! `forced`), counter `teamster_periodic_write_errors_total`.
//!
//! May import: the bottom of `server` (`raft`, `leader`, `leader_service`, `evals`), `util`.

pub mod core;
pub mod shell;
#[cfg(test)]
mod tests;

pub use self::core::{periodic_child, plan, Action, Parent, Planned};
pub use self::shell::{LaunchWriter, PeriodicDuty};
