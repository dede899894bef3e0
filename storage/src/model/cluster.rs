//! Cluster-wide settings kept in raft: the scheduler configuration operators change at run
//! time, and the cluster's identity written once by the first leader.

use serde::{Deserialize, Serialize};

use crate::model::de;

/// How the scheduler ranks nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum SchedulerAlgorithm {
    /// Fill nodes before using new ones.
    #[default]
    #[serde(rename = "binpack")]
    Binpack,
    /// Spread load over nodes.
    #[serde(rename = "spread")]
    Spread,
}

/// Which schedulers may preempt lower-priority allocations. An unknown scheduler name is
/// refused, not ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default, deny_unknown_fields)]
pub struct PreemptionConfig {
    /// System jobs may preempt (Nomad default: on).
    #[serde(deserialize_with = "de::nullable")]
    pub system_scheduler_enabled: bool,
    /// Sysbatch jobs may preempt.
    #[serde(deserialize_with = "de::nullable")]
    pub sys_batch_scheduler_enabled: bool,
    /// Batch jobs may preempt.
    #[serde(deserialize_with = "de::nullable")]
    pub batch_scheduler_enabled: bool,
    /// Service jobs may preempt.
    #[serde(deserialize_with = "de::nullable")]
    pub service_scheduler_enabled: bool,
}

impl Default for PreemptionConfig {
    fn default() -> Self {
        Self {
            system_scheduler_enabled: true,
            sys_batch_scheduler_enabled: false,
            batch_scheduler_enabled: false,
            service_scheduler_enabled: false,
        }
    }
}

/// The default [`SchedulerConfiguration::supervisor_fraction`] (Arvados' `SupervisorFraction`).
pub const DEFAULT_SUPERVISOR_FRACTION: f64 = 0.3;

/// The operator-tunable scheduler configuration (`/v1/operator/scheduler/configuration`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SchedulerConfiguration {
    /// Node ranking.
    #[serde(deserialize_with = "de::nullable")]
    pub scheduler_algorithm: SchedulerAlgorithm,
    /// Preemption per scheduler type.
    #[serde(deserialize_with = "de::nullable")]
    pub preemption_config: PreemptionConfig,
    /// Allow tasks to use more memory than reserved.
    #[serde(deserialize_with = "de::nullable")]
    pub memory_oversubscription_enabled: bool,
    /// Refuse job registrations (maintenance).
    #[serde(deserialize_with = "de::nullable")]
    pub reject_job_registration: bool,
    /// Keep the eval broker disabled even on the leader.
    #[serde(deserialize_with = "de::nullable")]
    pub pause_eval_broker: bool,
    /// A teamster extension: the share of the cluster's CPU and memory (ready, eligible
    /// nodes) that allocations of supervisor jobs (jobs that launch jobs, marked with the
    /// `teamster.supervisor` meta key) may hold together, in (0, 1]. Placements beyond it are
    /// blocked, so supervisors cannot starve their own children.
    pub supervisor_fraction: f64,
    /// Raft index of creation (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub create_index: u64,
    /// Raft index of the last change (server-set); the CAS update compares it.
    #[serde(deserialize_with = "de::nullable")]
    pub modify_index: u64,
}

impl Default for SchedulerConfiguration {
    fn default() -> Self {
        SchedulerConfiguration {
            scheduler_algorithm: SchedulerAlgorithm::default(),
            preemption_config: PreemptionConfig::default(),
            memory_oversubscription_enabled: false,
            reject_job_registration: false,
            pause_eval_broker: false,
            supervisor_fraction: DEFAULT_SUPERVISOR_FRACTION,
            create_index: 0,
            modify_index: 0,
        }
    }
}

impl SchedulerConfiguration {
    /// Checks the values an operator may set; the error names the field.
    pub fn validate(&self) -> Result<(), crate::model::ModelError> {
        let f = self.supervisor_fraction;
        if !(f > 0.0 && f <= 1.0) {
            return Err(crate::model::ModelError::Invalid {
                errors: vec![format!("SupervisorFraction must be in (0, 1], not {f}")],
            });
        }
        Ok(())
    }
}

/// Autopilot's configuration (Nomad's `AutopilotConfig`,
/// `/v1/operator/autopilot/configuration`): how the leader judges the servers' health and
/// whether it removes dead ones. Durations are nanoseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutopilotConfig {
    /// Remove servers that stopped answering from the raft configuration.
    pub cleanup_dead_servers: bool,
    /// A follower not heard from for longer is unhealthy.
    pub last_contact_threshold: u64,
    /// A follower further behind the leader's log is unhealthy.
    pub max_trailing_logs: u64,
    /// Never remove a dead server when fewer voters than this would remain.
    pub min_quorum: u64,
    /// How long a server must stay healthy to count as stable (and a dead server stay
    /// dead before it is removed).
    pub server_stabilization_time: u64,
    /// Raft index of creation (server-set).
    pub create_index: u64,
    /// Raft index of the last change (server-set); the CAS update compares it.
    pub modify_index: u64,
}

impl Default for AutopilotConfig {
    /// Nomad's defaults.
    fn default() -> Self {
        AutopilotConfig {
            cleanup_dead_servers: true,
            last_contact_threshold: 200_000_000,
            max_trailing_logs: 250,
            min_quorum: 0,
            server_stabilization_time: 10_000_000_000,
            create_index: 0,
            modify_index: 0,
        }
    }
}

impl AutopilotConfig {
    /// Checks the values an operator may set; the error names the field.
    pub fn validate(&self) -> Result<(), crate::model::ModelError> {
        let mut errors = Vec::new();
        if self.last_contact_threshold == 0 {
            errors.push("LastContactThreshold must be greater than 0".to_string());
        }
        if self.server_stabilization_time > 24 * 3600 * 1_000_000_000 {
            errors.push("ServerStabilizationTime must be at most 24h".to_string());
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(crate::model::ModelError::Invalid { errors })
        }
    }
}

/// The cluster's identity, written once by the first leader.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ClusterMeta {
    /// A UUID chosen by the first leader.
    #[serde(rename = "ClusterID", deserialize_with = "de::nullable")]
    pub cluster_id: String,
    /// When the cluster was created, Unix nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub create_time: i64,
}
