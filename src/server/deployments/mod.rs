//! Deployments on the servers: the operations an operator (`/v1/deployment/…`) and the
//! leader's deployment watcher make on a running deployment, and the watcher itself.
//!
//! ```text
//!  endpoints::deployment ─┐                        ┌─ Command::DeploymentStatusUpdate
//!                         ├─▶ ops::{fail, promote, ├─ Command::DeploymentPromote
//!  watcher (shell) ───────┘    pause, set_alloc_   └─ Command::DeploymentAllocHealth
//!      ▲                       health}(snapshot)        (+ the evaluation, + a revert)
//!      └── watch::decide(snapshot, now): evaluate · reschedule · fail · promote
//! ```
//!
//! - [`ops`]: pure builders: a snapshot, the deployment, the time and an RNG in; the raft
//!   command (with the evaluation that makes the scheduler act on the change, and the job
//!   registration of an auto-revert) out, or the reason it is refused, in Nomad's words.
//! - [`watch`]: the watcher's decisions (sans-IO).
//! - [`shell`]: [`DeploymentWatcherDuty`], the leader duty that looks whenever the
//!   deployments change or a progress deadline comes due, and writes the decisions.
//!
//! Metrics: counter `teamster_deployment_watcher_actions_total{action}` (`evaluate`,
//! `reschedule`, `fail`, `promote`).
//!
//! May import: the bottom of `server` (`raft`, `leader`, `leader_service`, `evals`), the
//! periodic dispatcher's writer seam, `util`, `teamster_storage`.

pub mod ops;
pub mod shell;
#[cfg(test)]
mod tests;
pub mod watch;

pub use ops::{fail, pause, promote, set_alloc_health, DeploymentOpError, DeploymentWrite};
pub use shell::DeploymentWatcherDuty;
