//! The payloads of the `Deployment.*` calls: an operator fails, pauses or resumes a
//! deployment, promotes its canaries, or sets the health of its allocations. Each is
//! served by the leader and answered like Nomad's `DeploymentUpdateResponse`.

use serde::{Deserialize, Serialize};
use teamster_storage::model::{AllocId, DeploymentId, EvalId};

/// `Deployment.Fail`: mark a running deployment failed (auto-reverting when a group asks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeploymentFailRequest {
    /// The deployment.
    pub deployment_id: DeploymentId,
}

/// `Deployment.Pause`: pause or resume a deployment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeploymentPauseRequest {
    /// The deployment.
    pub deployment_id: DeploymentId,
    /// Pause (`true`) or resume (`false`).
    pub pause: bool,
}

/// `Deployment.Promote`: promote the canaries of some or all groups.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeploymentPromoteRequest {
    /// The deployment.
    pub deployment_id: DeploymentId,
    /// Every group with canaries.
    pub all: bool,
    /// Or these groups.
    pub groups: Vec<String>,
}

/// `Deployment.SetAllocHealth`: mark allocations of a deployment healthy or unhealthy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeploymentAllocHealthRequest {
    /// The deployment.
    pub deployment_id: DeploymentId,
    /// Allocations to mark healthy.
    pub healthy: Vec<AllocId>,
    /// Allocations to mark unhealthy (fails the deployment).
    pub unhealthy: Vec<AllocId>,
}

/// The answer to a `Deployment.*` write (Nomad's `DeploymentUpdateResponse`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeploymentUpdateResponse {
    /// The evaluation created (none for a pause).
    pub eval_id: Option<EvalId>,
    /// The raft index of the evaluation (0 without one).
    pub eval_create_index: u64,
    /// The raft index of the deployment's change.
    pub deployment_modify_index: u64,
    /// The job version an auto-revert registered again.
    pub reverted_job_version: Option<u64>,
    /// The raft index of the write.
    pub index: u64,
}
