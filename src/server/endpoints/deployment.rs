//! `Deployment.Fail`, `Deployment.Pause`, `Deployment.Promote` and
//! `Deployment.SetAllocHealth` on the leader: the deployment is looked up in the leader's
//! state, the change is built by [`crate::server::deployments::ops`] (the same builders the
//! deployment watcher uses) and written through raft with its evaluation, and the answer
//! is Nomad's `DeploymentUpdateResponse`. A refusal changes nothing.

use std::sync::Arc;

use teamster_storage::model::deployment::DESC_FAILED_BY_USER;
use teamster_storage::model::{Deployment, DeploymentId};
use teamster_storage::state::Snapshot;

use super::Endpoints;
use crate::rpc::service::deployment::{
    DeploymentAllocHealthRequest, DeploymentFailRequest, DeploymentPauseRequest,
    DeploymentPromoteRequest, DeploymentUpdateResponse,
};
use crate::rpc::ServiceError;
use crate::server::deployments::{self as ops, DeploymentOpError, DeploymentWrite};

/// `Deployment.Fail`: an operator fails the deployment ("Deployment marked as failed").
pub async fn fail(
    ep: &Endpoints,
    req: DeploymentFailRequest,
) -> Result<DeploymentUpdateResponse, ServiceError> {
    let write = {
        let (snapshot, deployment) = lookup(ep, &req.deployment_id)?;
        ops::fail(
            &snapshot,
            &deployment,
            DESC_FAILED_BY_USER,
            ep.now(),
            &mut ep.rng().fork(),
            ep.job_max_versions(),
        )
        .map_err(op_error)?
    };
    commit(ep, write, "failed").await
}

/// `Deployment.Pause`: pause, or resume with an evaluation.
pub async fn pause(
    ep: &Endpoints,
    req: DeploymentPauseRequest,
) -> Result<DeploymentUpdateResponse, ServiceError> {
    let write = {
        let (snapshot, deployment) = lookup(ep, &req.deployment_id)?;
        ops::pause(
            &snapshot,
            &deployment,
            req.pause,
            ep.now(),
            &mut ep.rng().fork(),
        )
        .map_err(op_error)?
    };
    commit(ep, write, if req.pause { "paused" } else { "resumed" }).await
}

/// `Deployment.Promote`: promote the canaries of the named groups, or of all.
pub async fn promote(
    ep: &Endpoints,
    req: DeploymentPromoteRequest,
) -> Result<DeploymentUpdateResponse, ServiceError> {
    let write = {
        let (snapshot, deployment) = lookup(ep, &req.deployment_id)?;
        ops::promote(
            &snapshot,
            &deployment,
            req.all,
            &req.groups,
            ep.now(),
            &mut ep.rng().fork(),
        )
        .map_err(op_error)?
    };
    commit(ep, write, "promoted").await
}

/// `Deployment.SetAllocHealth`: an operator's health verdict on allocations of the
/// deployment; an unhealthy one fails it.
pub async fn set_alloc_health(
    ep: &Endpoints,
    req: DeploymentAllocHealthRequest,
) -> Result<DeploymentUpdateResponse, ServiceError> {
    let write = {
        let (snapshot, deployment) = lookup(ep, &req.deployment_id)?;
        ops::set_alloc_health(
            &snapshot,
            &deployment,
            &req.healthy,
            &req.unhealthy,
            ep.now(),
            &mut ep.rng().fork(),
            ep.job_max_versions(),
        )
        .map_err(op_error)?
    };
    commit(ep, write, "allocation health set").await
}

/// The leader's state and the deployment, or 404 "deployment not found".
fn lookup(ep: &Endpoints, id: &DeploymentId) -> Result<(Snapshot, Arc<Deployment>), ServiceError> {
    if id.is_empty() {
        return Err(ServiceError::invalid(
            "DeploymentID",
            "missing deployment ID",
        ));
    }
    let snapshot = ep.node().state().snapshot();
    let deployment = snapshot
        .deployment_by_id(id.as_str())
        .cloned()
        .ok_or_else(|| ServiceError::not_found("deployment", id.as_str()))?;
    Ok((snapshot, deployment))
}

/// A refusal of the operation as a 400 naming the problem.
fn op_error(e: DeploymentOpError) -> ServiceError {
    let field = match &e {
        DeploymentOpError::Terminal(_) => "DeploymentID",
        DeploymentOpError::NoCanaries
        | DeploymentOpError::NoGroups
        | DeploymentOpError::UnknownGroup { .. }
        | DeploymentOpError::GroupWithoutCanaries { .. }
        | DeploymentOpError::UnhealthyCanaries { .. } => "Groups",
        DeploymentOpError::NoAllocations
        | DeploymentOpError::UnknownAlloc { .. }
        | DeploymentOpError::NotInDeployment { .. }
        | DeploymentOpError::HealthyAndUnhealthy { .. } => "HealthyAllocationIDs",
    };
    ServiceError::invalid(field, e.to_string())
}

/// Writes the change and answers Nomad's `DeploymentUpdateResponse`.
async fn commit(
    ep: &Endpoints,
    write: DeploymentWrite,
    what: &'static str,
) -> Result<DeploymentUpdateResponse, ServiceError> {
    let DeploymentWrite {
        command,
        eval_id,
        reverted_job_version,
    } = write;
    let (index, _) = ep.write(command).await?;
    tracing::info!(
        index,
        eval_id = eval_id.as_ref().map(|e| e.as_str()).unwrap_or(""),
        reverted_job_version,
        "deployment {what}"
    );
    Ok(DeploymentUpdateResponse {
        eval_create_index: if eval_id.is_some() { index } else { 0 },
        eval_id,
        deployment_modify_index: index,
        reverted_job_version,
        index,
    })
}
