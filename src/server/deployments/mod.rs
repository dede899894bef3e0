//! Deployments on the servers: the operations an operator (`/v1/deployment/…`) and the
//! leader's deployment watcher make on a running deployment — fail it (with Nomad's
//! auto-revert to the newest stable job version), promote its canaries, pause or resume it,
//! set the health of its allocations.
//!
//! ```text
//!  endpoints::deployment ─┐                        ┌─ Command::DeploymentStatusUpdate
//!                         ├─▶ ops::{fail, promote, ├─ Command::DeploymentPromote
//!  deployment watcher ────┘    pause, set_alloc_   └─ Command::DeploymentAllocHealth
//!                              health}(snapshot)        (+ the evaluation, + a revert)
//! ```
//!
//! - [`ops`]: pure builders: a snapshot, the deployment, the time and an RNG in; the raft
//!   command (with the evaluation that makes the scheduler act on the change, and the job
//!   registration of an auto-revert) out, or the reason it is refused, in Nomad's words.
//!   The state store checks the same rules again when it applies the command, so a
//!   deployment that changed between the snapshot and the commit is never corrupted.
//!
//! May import: the bottom of `server` (`evals`), `util`, `teamster_storage`.

pub mod ops;
#[cfg(test)]
mod tests;

pub use ops::{fail, pause, promote, set_alloc_health, DeploymentOpError, DeploymentWrite};
