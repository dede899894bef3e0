//! Capacity on demand: while evaluations stay blocked for want of nodes of one class, the
//! leader has an operator-configured provider create client nodes of that class, up to a
//! quota, and stops the nodes it created once they have been idle for `idle_timeout`
//! (`[server.autoscaler]`, off by default).
//!
//! ```text
//!  every interval (leader only):
//!    provider.list(cluster, class) ──┐
//!    state: nodes of the class,      ├──▶ AutoscalerCore::step(observation, now)
//!           blocked evaluations ─────┘            │
//!                                                 ▼ actions
//!    Create ──▶ provider.create ────────▶ a client agent registers as <name>, class
//!    Cordon ──▶ Node.UpdateEligibility (ineligible)     (an idle node)
//!    Stop   ──▶ provider.destroy ─▶ Node.Deregister      (idle after the cordon, or failed)
//!    Purge  ──▶ Node.Deregister                          (a down node left without instance)
//! ```
//!
//! The rules (when to create, what counts as idle or failed, the back-off) are on
//! [`core`]. A node is the autoscaler's when the provider lists its instance: instances are
//! tagged with the cluster id and the class, so a new leader adopts what the previous one
//! created; nothing is kept in the raft state. Revoking leadership stops the loop and
//! leaves the instances running.
//!
//! - [`provider`]: the [`Provider`] interface (how to add a provider).
//! - [`docker`]: [`DockerProvider`], client containers on the local engine.
//! - [`core`]: [`AutoscalerCore`], the decisions (sans-IO).
//! - [`shell`]: [`AutoscalerDuty`], the leader duty that observes and acts.
//!
//! Metrics (label `provider`): counters `teamster_autoscaler_nodes_requested_total`
//! (creates asked of the provider), `teamster_autoscaler_nodes_created_total` (instances
//! it started), `teamster_autoscaler_nodes_failed_total` (creates that failed, and
//! instances that never turned ready, stopped running, vanished or whose node went down),
//! `teamster_autoscaler_nodes_stopped_total{reason}` (instances destroyed: `idle`,
//! `never_ready`, `exited`, `node_down`), `teamster_autoscaler_provider_errors_total{op}`;
//! gauges `teamster_autoscaler_nodes_owned`, `teamster_autoscaler_nodes_starting`,
//! `teamster_autoscaler_blocked_evals` (blocked evaluations its nodes could help).
//!
//! May import: the bottom of `server` (`config`, `leader`, `leader_service`), the service
//! layer it calls like an operator (`endpoints`, `rpc::service`), `util`.

pub mod core;
pub mod docker;
pub mod provider;
pub mod shell;
#[cfg(test)]
mod tests;

use std::sync::Arc;

pub use self::core::{Action, AutoscalerCore, Observation, StopReason};
pub use self::docker::DockerProvider;
pub use self::provider::{Instance, NodeSpec, Owner, Provider};
pub use self::shell::{AutoscalerDuty, NodeOps};

use crate::server::config::AutoscalerConfig;

/// Why the autoscaler could not start, or a provider call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AutoscalerError {
    /// A setting the provider cannot run with (found when the server starts).
    #[error("`{key}`: {reason}")]
    Setting {
        /// The dotted key.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The provider failed; retried after a back-off.
    #[error("{provider} provider: {op}: {reason}")]
    Provider {
        /// The provider's name.
        provider: &'static str,
        /// What was asked.
        op: &'static str,
        /// Its answer.
        reason: String,
    },
}

/// The provider `cfg` names, built (its settings checked), or `None` when the autoscaler is
/// off.
pub fn build_provider(
    cfg: &AutoscalerConfig,
) -> Result<Option<Arc<dyn Provider>>, AutoscalerError> {
    if !cfg.enabled {
        return Ok(None);
    }
    match cfg.provider.as_str() {
        "docker" => Ok(Some(Arc::new(DockerProvider::new(
            &cfg.docker,
            &cfg.node_class,
        )?))),
        other => Err(AutoscalerError::Setting {
            key: "server.autoscaler.provider",
            reason: format!("unknown provider {other:?}"),
        }),
    }
}
