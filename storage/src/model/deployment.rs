//! Deployments: the rollout of one job version, and the `update` and `migrate` strategies that
//! shape it.
//!
//! A service job whose task group has an update strategy (`MaxParallel > 0`) gets a
//! [`Deployment`] per job version. The scheduler's reconciler replaces at most `MaxParallel`
//! allocations of the old version at a time, places `Canary` new ones beside the old version
//! and waits for their promotion, and records its progress in the deployment; the clients
//! report each allocation's health ([`AllocDeploymentStatus`]); the leader's deployment
//! watcher fails deployments past their progress deadline, auto-promotes and auto-reverts.
//! The `migrate` strategy paces a node drain the same way.
//!
//! Fields are optional as in Nomad's API so a group's partial block merges over the job's
//! ([`Job::canonicalize`](crate::model::Job::canonicalize)); after that, all are set and the
//! accessors read them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::de;
use crate::model::ids::{AllocId, DeploymentId, JobId, Namespace};
use crate::model::time::Timestamp;

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Health is judged by the task states and the service checks (without service checks, the
/// same as [`HEALTH_CHECK_TASK_STATES`]).
pub const HEALTH_CHECK_CHECKS: &str = "checks";
/// Health is judged by the task states only.
pub const HEALTH_CHECK_TASK_STATES: &str = "task_states";
/// The client never reports health; an operator sets it (`allocation-health`).
pub const HEALTH_CHECK_MANUAL: &str = "manual";

/// A task group's `update` block (Nomad's `UpdateStrategy`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct UpdateStrategy {
    /// A system job's pause between the steps of its rolling update; a service job's is
    /// validated and kept, as Nomad does (its pacing comes from `MaxParallel` and health).
    pub stagger: Option<u64>,
    /// Allocations replaced at once; 0 turns deployments off.
    pub max_parallel: Option<i64>,
    /// `checks`, `task_states` or `manual`.
    pub health_check: Option<String>,
    /// How long every task must run before the allocation is healthy, nanoseconds.
    pub min_healthy_time: Option<u64>,
    /// How long an allocation has to become healthy, nanoseconds.
    pub healthy_deadline: Option<u64>,
    /// How long the deployment may go without a newly healthy allocation, nanoseconds
    /// (0: fail on the first unhealthy one).
    pub progress_deadline: Option<u64>,
    /// On failure, register the newest stable version again.
    pub auto_revert: Option<bool>,
    /// Promote the canaries once they are all healthy.
    pub auto_promote: Option<bool>,
    /// New-version allocations placed beside the old ones before promotion.
    pub canary: Option<i64>,
}

impl UpdateStrategy {
    /// Nomad's `DefaultUpdateStrategy`, which every service job gets when it says nothing:
    /// one at a time, healthy after 10 s, within 5 min, progress within 10 min.
    pub fn nomad_default() -> Self {
        Self {
            stagger: Some(30 * NANOS_PER_SEC),
            max_parallel: Some(1),
            health_check: Some(HEALTH_CHECK_CHECKS.to_owned()),
            min_healthy_time: Some(10 * NANOS_PER_SEC),
            healthy_deadline: Some(300 * NANOS_PER_SEC),
            progress_deadline: Some(600 * NANOS_PER_SEC),
            auto_revert: Some(false),
            auto_promote: Some(false),
            canary: Some(0),
        }
    }

    /// True when no field is set (Nomad's `Empty`): a group does not inherit such a block.
    pub fn is_unset(&self) -> bool {
        *self == Self::default()
    }

    /// The fields `self` sets, over `base`.
    pub fn merged_over(&self, base: &Self) -> Self {
        Self {
            stagger: self.stagger.or(base.stagger),
            max_parallel: self.max_parallel.or(base.max_parallel),
            health_check: self.health_check.clone().or(base.health_check.clone()),
            min_healthy_time: self.min_healthy_time.or(base.min_healthy_time),
            healthy_deadline: self.healthy_deadline.or(base.healthy_deadline),
            progress_deadline: self.progress_deadline.or(base.progress_deadline),
            auto_revert: self.auto_revert.or(base.auto_revert),
            auto_promote: self.auto_promote.or(base.auto_promote),
            canary: self.canary.or(base.canary),
        }
    }

    /// `MaxParallel` (0 when unset).
    pub fn max_parallel(&self) -> u32 {
        self.max_parallel.unwrap_or(0).clamp(0, i64::from(u32::MAX)) as u32
    }

    /// `Canary` (0 when unset).
    pub fn canary(&self) -> u32 {
        self.canary.unwrap_or(0).clamp(0, i64::from(u32::MAX)) as u32
    }

    /// `HealthCheck` (`checks` when unset).
    pub fn health_check(&self) -> &str {
        self.health_check.as_deref().unwrap_or(HEALTH_CHECK_CHECKS)
    }

    /// `MinHealthyTime`, nanoseconds.
    pub fn min_healthy_time(&self) -> u64 {
        self.min_healthy_time.unwrap_or(10 * NANOS_PER_SEC)
    }

    /// `HealthyDeadline`, nanoseconds.
    pub fn healthy_deadline(&self) -> u64 {
        self.healthy_deadline.unwrap_or(300 * NANOS_PER_SEC)
    }

    /// `ProgressDeadline`, nanoseconds.
    pub fn progress_deadline(&self) -> u64 {
        self.progress_deadline.unwrap_or(600 * NANOS_PER_SEC)
    }

    /// `AutoRevert`.
    pub fn auto_revert(&self) -> bool {
        self.auto_revert.unwrap_or(false)
    }

    /// `AutoPromote`.
    pub fn auto_promote(&self) -> bool {
        self.auto_promote.unwrap_or(false)
    }

    /// Nomad's `IsEmpty` negated: the group rolls out through deployments.
    pub fn rolls(&self) -> bool {
        self.max_parallel() > 0
    }

    /// Nomad's `UpdateStrategy.Validate`, plus teamster's refusal of canaries a deployment
    /// could not place (with `max_parallel = 0`, which turns deployments off, or, in a
    /// service job, more than the count). `count` is the group's count for a service job
    /// and `None` for a system job, whose `canary` is a percentage of its nodes.
    pub(crate) fn validate(&self, at: &str, count: Option<u32>, errors: &mut Vec<String>) {
        let at = format!("{at}, update");
        match self.max_parallel {
            Some(n) if n < 0 => errors.push(format!("{at}: max_parallel must be at least 0")),
            // Nomad's: 0 turns deployments off (updates go all at once); canaries need one.
            Some(0) if self.canary() > 0 => errors.push(format!(
                "{at}: canary needs max_parallel of at least 1 (max_parallel = 0 turns \
                 deployments off)"
            )),
            _ => {}
        }
        if self.canary.is_some_and(|c| c < 0) {
            errors.push(format!("{at}: canary must be at least 0"));
        }
        match count {
            Some(count) if self.canary() > count => errors.push(format!(
                "{at}: canary ({}) must not exceed the group's count ({count})",
                self.canary()
            )),
            None if self.canary() > 100 => errors.push(format!(
                "{at}: canary ({}) is a percentage of the nodes in a system job: at most 100",
                self.canary()
            )),
            _ => {}
        }
        if self.auto_promote() && self.canary() == 0 {
            errors.push(format!(
                "{at}: auto_promote needs a canary count greater than zero"
            ));
        }
        validate_health_check(&at, self.health_check(), errors);
        if self.min_healthy_time() >= self.healthy_deadline() {
            errors.push(format!(
                "{at}: min_healthy_time must be less than healthy_deadline"
            ));
        }
        if self.progress_deadline() != 0 && self.healthy_deadline() >= self.progress_deadline() {
            errors.push(format!(
                "{at}: healthy_deadline must be less than progress_deadline"
            ));
        }
        if self.stagger == Some(0) {
            errors.push(format!("{at}: stagger must be greater than zero"));
        }
    }
}

fn validate_health_check(at: &str, value: &str, errors: &mut Vec<String>) {
    if ![
        HEALTH_CHECK_CHECKS,
        HEALTH_CHECK_TASK_STATES,
        HEALTH_CHECK_MANUAL,
    ]
    .contains(&value)
    {
        errors.push(format!(
            "{at}: health_check {value:?} is not one of \"checks\", \"task_states\", \"manual\""
        ));
    }
}

/// A task group's `migrate` block (Nomad's `MigrateStrategy`): how a node drain replaces the
/// group's allocations.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct MigrateStrategy {
    /// Allocations of the group migrated at once.
    pub max_parallel: Option<i64>,
    /// `checks`, `task_states` or `manual`.
    pub health_check: Option<String>,
    /// How long every task must run before the replacement is healthy, nanoseconds.
    pub min_healthy_time: Option<u64>,
    /// How long a replacement has to become healthy, nanoseconds.
    pub healthy_deadline: Option<u64>,
}

impl MigrateStrategy {
    /// Nomad's `DefaultMigrateStrategy` (service jobs): one at a time, healthy after 10 s,
    /// within 5 min.
    pub fn nomad_default() -> Self {
        Self {
            max_parallel: Some(1),
            health_check: Some(HEALTH_CHECK_CHECKS.to_owned()),
            min_healthy_time: Some(10 * NANOS_PER_SEC),
            healthy_deadline: Some(300 * NANOS_PER_SEC),
        }
    }

    /// The fields `self` sets, over `base`.
    pub fn merged_over(&self, base: &Self) -> Self {
        Self {
            max_parallel: self.max_parallel.or(base.max_parallel),
            health_check: self.health_check.clone().or(base.health_check.clone()),
            min_healthy_time: self.min_healthy_time.or(base.min_healthy_time),
            healthy_deadline: self.healthy_deadline.or(base.healthy_deadline),
        }
    }

    /// `MaxParallel` (1 when unset).
    pub fn max_parallel(&self) -> u32 {
        self.max_parallel.unwrap_or(1).clamp(0, i64::from(u32::MAX)) as u32
    }

    /// `HealthCheck` (`checks` when unset).
    pub fn health_check(&self) -> &str {
        self.health_check.as_deref().unwrap_or(HEALTH_CHECK_CHECKS)
    }

    /// `MinHealthyTime`, nanoseconds.
    pub fn min_healthy_time(&self) -> u64 {
        self.min_healthy_time.unwrap_or(10 * NANOS_PER_SEC)
    }

    /// `HealthyDeadline`, nanoseconds.
    pub fn healthy_deadline(&self) -> u64 {
        self.healthy_deadline.unwrap_or(300 * NANOS_PER_SEC)
    }

    /// Nomad's `MigrateStrategy.Validate`.
    pub(crate) fn validate(&self, at: &str, errors: &mut Vec<String>) {
        let at = format!("{at}, migrate");
        if self.max_parallel.is_some_and(|n| n < 1) {
            errors.push(format!("{at}: max_parallel must be at least 1"));
        }
        validate_health_check(&at, self.health_check(), errors);
        if self.min_healthy_time() >= self.healthy_deadline() {
            errors.push(format!(
                "{at}: min_healthy_time must be less than healthy_deadline"
            ));
        }
    }
}

/// A deployment's life cycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum DeploymentStatus {
    /// Rolling out.
    #[default]
    #[serde(rename = "running")]
    Running,
    /// Held by an operator; nothing is replaced until resumed.
    #[serde(rename = "paused")]
    Paused,
    /// Every group reached its desired healthy allocations.
    #[serde(rename = "successful")]
    Successful,
    /// Unhealthy allocations, a missed progress deadline or an operator failed it.
    #[serde(rename = "failed")]
    Failed,
    /// A newer job version or a stop replaced it.
    #[serde(rename = "cancelled")]
    Cancelled,
    /// Multiregion only in Nomad; kept for the API's vocabulary.
    #[serde(rename = "blocked")]
    Blocked,
    /// Multiregion only in Nomad; kept for the API's vocabulary.
    #[serde(rename = "pending")]
    Pending,
}

impl DeploymentStatus {
    /// Nomad's name for the status.
    pub fn as_str(&self) -> &'static str {
        match self {
            DeploymentStatus::Running => "running",
            DeploymentStatus::Paused => "paused",
            DeploymentStatus::Successful => "successful",
            DeploymentStatus::Failed => "failed",
            DeploymentStatus::Cancelled => "cancelled",
            DeploymentStatus::Blocked => "blocked",
            DeploymentStatus::Pending => "pending",
        }
    }

    /// Successful, failed and cancelled deployments are over.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            DeploymentStatus::Successful | DeploymentStatus::Failed | DeploymentStatus::Cancelled
        )
    }
}

/// Nomad's `DeploymentStatusDescriptionRunning`.
pub const DESC_RUNNING: &str = "Deployment is running";
/// Running and waiting for an operator to promote the canaries.
pub const DESC_RUNNING_NEEDS_PROMOTION: &str =
    "Deployment is running but requires manual promotion";
/// Running and waiting for the canaries to be healthy to promote them.
pub const DESC_RUNNING_AUTO_PROMOTION: &str = "Deployment is running pending automatic promotion";
/// Paused by an operator.
pub const DESC_PAUSED: &str = "Deployment is paused";
/// Done.
pub const DESC_SUCCESSFUL: &str = "Deployment completed successfully";
/// The job was stopped.
pub const DESC_STOPPED_JOB: &str = "Cancelled because job is stopped";
/// A newer version of the job was registered.
pub const DESC_NEWER_JOB: &str = "Cancelled due to newer version of job";
/// An allocation was unhealthy.
pub const DESC_FAILED_ALLOCATIONS: &str = "Failed due to unhealthy allocations";
/// No progress within the progress deadline.
pub const DESC_PROGRESS_DEADLINE: &str = "Failed due to progress deadline";
/// An operator failed it.
pub const DESC_FAILED_BY_USER: &str = "Deployment marked as failed";

/// The suffix of a failed deployment's description that reverts to `version`.
pub fn desc_rollback(description: &str, version: u64) -> String {
    format!("{description} - rolling back to job version {version}")
}

/// The suffix when the stable version's spec is the current one.
pub fn desc_rollback_noop(description: &str, version: u64) -> String {
    format!(
        "{description} - not rolling back to stable job version {version} as current job has same specification"
    )
}

/// The suffix when there is no stable version to revert to.
pub fn desc_no_rollback_target(description: &str) -> String {
    format!("{description} - no stable job version to auto revert to")
}

/// One task group's progress in a deployment (Nomad's `DeploymentState`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DeploymentState {
    /// Revert to the stable version on failure.
    #[serde(deserialize_with = "de::nullable")]
    pub auto_revert: bool,
    /// Promote the canaries once healthy.
    #[serde(deserialize_with = "de::nullable")]
    pub auto_promote: bool,
    /// Nanoseconds; 0 fails on the first unhealthy allocation.
    #[serde(deserialize_with = "de::nullable")]
    pub progress_deadline: u64,
    /// Fail when no allocation became healthy by then (zero before the first placement).
    #[serde(deserialize_with = "de::nullable")]
    pub require_progress_by: Timestamp,
    /// The canaries were promoted.
    #[serde(deserialize_with = "de::nullable")]
    pub promoted: bool,
    /// The canaries placed so far.
    #[serde(deserialize_with = "de::nullable")]
    pub placed_canaries: Vec<AllocId>,
    /// The canaries wanted.
    #[serde(deserialize_with = "de::nullable")]
    pub desired_canaries: u32,
    /// The allocations of the new version wanted.
    #[serde(deserialize_with = "de::nullable")]
    pub desired_total: u32,
    /// Allocations placed by this deployment.
    #[serde(deserialize_with = "de::nullable")]
    pub placed_allocs: u32,
    /// Of those, reported healthy.
    #[serde(deserialize_with = "de::nullable")]
    pub healthy_allocs: u32,
    /// Of those, reported unhealthy.
    #[serde(deserialize_with = "de::nullable")]
    pub unhealthy_allocs: u32,
}

/// The rollout of one job version (Nomad's `Deployment`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Deployment {
    /// UUID chosen by the scheduler.
    #[serde(rename = "ID", deserialize_with = "de::nullable")]
    pub id: DeploymentId,
    /// The job's namespace.
    #[serde(deserialize_with = "de::nullable")]
    pub namespace: Namespace,
    /// The job.
    #[serde(rename = "JobID", deserialize_with = "de::nullable")]
    pub job_id: JobId,
    /// The version rolled out.
    #[serde(deserialize_with = "de::nullable")]
    pub job_version: u64,
    /// The job's `ModifyIndex` when the deployment was made.
    #[serde(deserialize_with = "de::nullable")]
    pub job_modify_index: u64,
    /// The job's `JobModifyIndex` (its spec's) when the deployment was made.
    #[serde(deserialize_with = "de::nullable")]
    pub job_spec_modify_index: u64,
    /// The job's `CreateIndex`.
    #[serde(deserialize_with = "de::nullable")]
    pub job_create_index: u64,
    /// Always false: teamster is one region.
    #[serde(deserialize_with = "de::nullable")]
    pub is_multiregion: bool,
    /// The priority of the evaluations it creates.
    #[serde(deserialize_with = "de::nullable")]
    pub eval_priority: u32,
    /// Per task group progress.
    #[serde(deserialize_with = "de::nullable")]
    pub task_groups: BTreeMap<String, DeploymentState>,
    /// Where it stands.
    #[serde(deserialize_with = "de::nullable")]
    pub status: DeploymentStatus,
    /// Why.
    #[serde(deserialize_with = "de::nullable")]
    pub status_description: String,
    /// Raft index of creation (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub create_index: u64,
    /// Raft index of the last change (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub modify_index: u64,
    /// Creation time, Unix nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub create_time: i64,
    /// Last change, Unix nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub modify_time: i64,
}

impl Deployment {
    /// Running or paused (Nomad's `Active`).
    pub fn active(&self) -> bool {
        !self.status.is_terminal()
    }

    /// True when some group waits for its canaries to be promoted.
    pub fn requires_promotion(&self) -> bool {
        self.task_groups
            .values()
            .any(|g| g.desired_canaries > 0 && !g.promoted)
    }

    /// True when some group has canaries and every such group auto-promotes.
    pub fn has_auto_promote(&self) -> bool {
        let mut canary_groups = self
            .task_groups
            .values()
            .filter(|g| g.desired_canaries > 0)
            .peekable();
        canary_groups.peek().is_some() && canary_groups.all(|g| g.auto_promote)
    }

    /// True when some group reverts on failure.
    pub fn has_auto_revert(&self) -> bool {
        self.task_groups.values().any(|g| g.auto_revert)
    }

    /// The description of a running deployment in its current state.
    pub fn running_description(&self) -> &'static str {
        if self.requires_promotion() {
            if self.has_auto_promote() {
                DESC_RUNNING_AUTO_PROMOTION
            } else {
                DESC_RUNNING_NEEDS_PROMOTION
            }
        } else {
            DESC_RUNNING
        }
    }
}

/// An allocation's health within its deployment (or migration), reported by its client.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocDeploymentStatus {
    /// `None` until judged; then healthy or not.
    pub healthy: Option<bool>,
    /// When it was judged.
    #[serde(deserialize_with = "de::nullable")]
    pub timestamp: Timestamp,
    /// Placed as a canary.
    #[serde(deserialize_with = "de::nullable")]
    pub canary: bool,
    /// Raft index of the last change (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub modify_index: u64,
}

impl AllocDeploymentStatus {
    /// Reported healthy.
    pub fn is_healthy(&self) -> bool {
        self.healthy == Some(true)
    }

    /// Reported unhealthy.
    pub fn is_unhealthy(&self) -> bool {
        self.healthy == Some(false)
    }
}

/// A change of a deployment's status (Nomad's `DeploymentStatusUpdate`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DeploymentStatusUpdate {
    /// The deployment.
    #[serde(rename = "DeploymentID", deserialize_with = "de::nullable")]
    pub deployment_id: DeploymentId,
    /// Its new status.
    #[serde(deserialize_with = "de::nullable")]
    pub status: DeploymentStatus,
    /// Why.
    #[serde(deserialize_with = "de::nullable")]
    pub status_description: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_block_merges_over_the_jobs_field_by_field() {
        let job = UpdateStrategy {
            max_parallel: Some(2),
            canary: Some(1),
            ..UpdateStrategy::default()
        }
        .merged_over(&UpdateStrategy::nomad_default());
        let group = UpdateStrategy {
            canary: Some(0),
            min_healthy_time: Some(1),
            ..UpdateStrategy::default()
        }
        .merged_over(&job);
        assert_eq!(group.max_parallel(), 2);
        assert_eq!(group.canary(), 0);
        assert_eq!(group.min_healthy_time(), 1);
        assert_eq!(group.healthy_deadline(), 300 * NANOS_PER_SEC);
        assert!(group.rolls());
        assert!(UpdateStrategy::default().is_unset());
        assert!(!UpdateStrategy::default().rolls());
    }

    #[test]
    fn validation_names_every_problem() {
        let bad = UpdateStrategy {
            max_parallel: Some(0),
            canary: Some(4),
            auto_promote: Some(true),
            health_check: Some("http".into()),
            min_healthy_time: Some(10),
            healthy_deadline: Some(5),
            stagger: Some(0),
            ..UpdateStrategy::default()
        };
        let mut errors = Vec::new();
        bad.validate("group \"web\"", Some(3), &mut errors);
        let text = errors.join("\n");
        for needle in [
            "max_parallel = 0",
            "canary (4) must not exceed",
            "health_check \"http\"",
            "min_healthy_time must be less",
            "stagger",
        ] {
            assert!(text.contains(needle), "{needle} missing from {text}");
        }
        let mut errors = Vec::new();
        UpdateStrategy {
            canary: Some(0),
            auto_promote: Some(true),
            ..UpdateStrategy::nomad_default()
        }
        .validate("g", Some(3), &mut errors);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("auto_promote"));
        let mut errors = Vec::new();
        UpdateStrategy::nomad_default().validate("g", Some(3), &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
    }

    #[test]
    fn a_system_jobs_canary_is_a_percentage_of_its_nodes() {
        let with = |canary, max_parallel| {
            let mut errors = Vec::new();
            UpdateStrategy {
                canary: Some(canary),
                max_parallel: Some(max_parallel),
                ..UpdateStrategy::nomad_default()
            }
            .validate("g", None, &mut errors);
            errors
        };
        // More canaries than a service group's count is fine here: it is a percentage.
        assert!(with(50, 1).is_empty(), "{:?}", with(50, 1));
        assert!(with(100, 2).is_empty());
        assert!(
            with(101, 2)[0].contains("at most 100"),
            "{:?}",
            with(101, 2)
        );
        assert!(
            with(50, 0)[0].contains("max_parallel = 0"),
            "{:?}",
            with(50, 0)
        );
    }

    #[test]
    fn descriptions_follow_promotion_state() {
        let mut d = Deployment::default();
        d.task_groups.insert(
            "web".into(),
            DeploymentState {
                desired_canaries: 1,
                ..DeploymentState::default()
            },
        );
        assert_eq!(d.running_description(), DESC_RUNNING_NEEDS_PROMOTION);
        d.task_groups.get_mut("web").unwrap().auto_promote = true;
        assert_eq!(d.running_description(), DESC_RUNNING_AUTO_PROMOTION);
        d.task_groups.get_mut("web").unwrap().promoted = true;
        assert_eq!(d.running_description(), DESC_RUNNING);
        assert!(!d.requires_promotion());
    }

    #[test]
    fn bincode_round_trip() {
        let d = Deployment {
            id: DeploymentId::new("d1"),
            status: DeploymentStatus::Paused,
            task_groups: BTreeMap::from([(
                "web".to_owned(),
                DeploymentState {
                    placed_canaries: vec![AllocId::new("a")],
                    require_progress_by: Timestamp::from_unix_nanos(5),
                    ..DeploymentState::default()
                },
            )]),
            ..Deployment::default()
        };
        let bytes = bincode::serde::encode_to_vec(&d, bincode::config::standard()).unwrap();
        let (back, _): (Deployment, usize) =
            bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).unwrap();
        assert_eq!(back, d);
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["Status"], "paused");
        assert_eq!(json["TaskGroups"]["web"]["PlacedCanaries"][0], "a");
    }
}
