//! Deployments: `GET /v1/deployments` (`?prefix=`, `?namespace=*`, `?reverse=`),
//! `GET /v1/deployment/:id`, `GET /v1/deployment/allocations/:id`,
//! `GET /v1/job/:id/deployments` (`?all=`), `GET /v1/job/:id/deployment`, and the writes
//! `PUT|POST /v1/deployment/{promote,fail,pause,allocation-health,unblock}/:id`.
//!
//! Reads answer from the state store as blocking queries on the deployments table; writes
//! decode Nomad's request body (whose `DeploymentID` must be the path's) and call the service
//! layer (`Deployment.*`, served by the leader), answering Nomad's
//! `{EvalID, EvalCreateIndex, DeploymentModifyIndex, RevertedJobVersion, Index}`.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::{get, put};
use axum::Router;
use serde::{Deserialize, Serialize};
use teamster_storage::model::{AllocId, Deployment, DeploymentId};
use teamster_storage::state::Table;

use super::allocs::alloc_stub;
use super::error::ApiError;
use super::jobs::decode_body;
use super::query::QueryOptions;
use super::read::{json_read, json_write};
use super::HttpContext;
use crate::rpc::service::deployment::{
    DeploymentAllocHealthRequest, DeploymentFailRequest, DeploymentPauseRequest,
    DeploymentPromoteRequest, DeploymentUpdateResponse,
};
use crate::rpc::Services;

/// The routes of this module.
pub fn routes() -> Router<HttpContext> {
    Router::new()
        .route("/v1/deployments", get(list))
        .route("/v1/deployment/{id}", get(get_one))
        .route("/v1/deployment/allocations/{id}", get(allocations))
        .route("/v1/deployment/promote/{id}", put(promote).post(promote))
        .route("/v1/deployment/fail/{id}", put(fail).post(fail))
        .route("/v1/deployment/pause/{id}", put(pause).post(pause))
        .route("/v1/deployment/unblock/{id}", put(unblock).post(unblock))
        .route(
            "/v1/deployment/allocation-health/{id}",
            put(allocation_health).post(allocation_health),
        )
        .route("/v1/job/{id}/deployments", get(job_deployments))
        .route("/v1/job/{id}/deployment", get(job_latest_deployment))
}

/// `GET /v1/deployments`: the namespace's deployments (`*`: every one's) whose ID starts
/// with `prefix`, oldest first (`reverse=true`: newest first).
pub async fn list(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let reverse = QueryOptions::flag(&q, "reverse")?;
    let (snap, meta) = ctx.read(&opts, &[Table::Deployments]).await?;
    let mut found: Vec<&Deployment> = snap
        .deployments_by_prefix(&opts.prefix)
        .map(|d| d.as_ref())
        .filter(|d| opts.in_namespace(d.namespace.as_str()))
        .collect();
    found.sort_by(|a, b| (a.create_index, &a.id).cmp(&(b.create_index, &b.id)));
    if reverse {
        found.reverse();
    }
    Ok(json_read(found, meta))
}

/// `GET /v1/deployment/:id` (404 "deployment not found").
pub async fn get_one(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Deployments]).await?;
    let deployment = snap
        .deployment_by_id(&id)
        .ok_or_else(|| ApiError::not_found("deployment not found"))?;
    Ok(json_read(deployment.as_ref(), meta))
}

/// `GET /v1/deployment/allocations/:id`: stubs of the allocations the deployment placed
/// (none for an unknown deployment, as Nomad answers).
pub async fn allocations(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx
        .read(&opts, &[Table::Deployments, Table::Allocs])
        .await?;
    let stubs: Vec<_> = snap
        .allocs_by_deployment(&id)
        .map(|a| alloc_stub(&snap, a))
        .collect();
    Ok(json_read(stubs, meta))
}

/// `GET /v1/job/:id/deployments`: the job's deployments, newest first; those of an earlier
/// job of the same ID (purged and registered again) only with `all=true`.
pub async fn job_deployments(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let all = QueryOptions::flag(&q, "all")?;
    let (snap, meta) = ctx.read(&opts, &[Table::Deployments, Table::Jobs]).await?;
    let created = snap.job_by_id(&opts.namespace, &id).map(|j| j.create_index);
    let found: Vec<_> = snap
        .deployments_by_job(&opts.namespace, &id)
        .into_iter()
        .filter(|d| {
            all || d.job_create_index == 0 || created.is_none_or(|c| c == d.job_create_index)
        })
        .collect();
    Ok(json_read(found, meta))
}

/// `GET /v1/job/:id/deployment`: the job's newest deployment, `null` when it has none.
pub async fn job_latest_deployment(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Deployments]).await?;
    Ok(json_read(
        snap.latest_deployment(&opts.namespace, &id),
        meta,
    ))
}

/// Nomad's `DeploymentUpdateResponse`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct UpdateResponse {
    #[serde(rename = "EvalID")]
    eval_id: String,
    eval_create_index: u64,
    deployment_modify_index: u64,
    reverted_job_version: Option<u64>,
    index: u64,
}

fn answer(done: DeploymentUpdateResponse) -> Response {
    json_write(
        UpdateResponse {
            eval_id: done.eval_id.map(|e| e.to_string()).unwrap_or_default(),
            eval_create_index: done.eval_create_index,
            deployment_modify_index: done.deployment_modify_index,
            reverted_job_version: done.reverted_job_version,
            index: done.index,
        },
        done.index,
    )
}

/// The body's `DeploymentID` must be given (when `required`) and be the path's.
fn check_id(path_id: &str, given: Option<&str>, required: bool) -> Result<(), ApiError> {
    match given.filter(|g| !g.is_empty()) {
        None if required => Err(ApiError::bad_request("DeploymentID must be specified")),
        Some(g) if g != path_id => Err(ApiError::bad_request("Deployment ID does not match")),
        _ => Ok(()),
    }
}

/// Nomad's `DeploymentPromoteRequest`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct PromoteBody {
    #[serde(rename = "DeploymentID", default)]
    deployment_id: Option<String>,
    #[serde(default)]
    all: Option<bool>,
    #[serde(default)]
    groups: Option<Vec<String>>,
}

/// `PUT|POST /v1/deployment/promote/:id` `{"DeploymentID", "All", "Groups"}`.
pub async fn promote(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let endpoints = ctx.endpoints()?;
    let req: PromoteBody = decode_body(&body)?;
    check_id(&id, req.deployment_id.as_deref(), true)?;
    let done = endpoints
        .deployment_promote(DeploymentPromoteRequest {
            deployment_id: DeploymentId::new(&id),
            all: req.all.unwrap_or(false),
            groups: req.groups.unwrap_or_default(),
        })
        .await?;
    Ok(answer(done))
}

/// A body that names only the deployment: Nomad's `DeploymentFailRequest` (Nomad reads no
/// body for a fail; one that names another deployment is refused) and
/// `DeploymentUnblockRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DeploymentIdBody {
    #[serde(rename = "DeploymentID", default)]
    deployment_id: Option<String>,
}

/// `PUT|POST /v1/deployment/fail/:id` (the body is optional).
pub async fn fail(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let endpoints = ctx.endpoints()?;
    let req: DeploymentIdBody = if body.iter().all(|b| b.is_ascii_whitespace()) {
        DeploymentIdBody::default()
    } else {
        decode_body(&body)?
    };
    check_id(&id, req.deployment_id.as_deref(), false)?;
    let done = endpoints
        .deployment_fail(DeploymentFailRequest {
            deployment_id: DeploymentId::new(&id),
        })
        .await?;
    Ok(answer(done))
}

/// Nomad's `DeploymentPauseRequest`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct PauseBody {
    #[serde(rename = "DeploymentID", default)]
    deployment_id: Option<String>,
    #[serde(default)]
    pause: Option<bool>,
}

/// `PUT|POST /v1/deployment/pause/:id` `{"DeploymentID", "Pause"}` (`false` resumes).
pub async fn pause(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let endpoints = ctx.endpoints()?;
    let req: PauseBody = decode_body(&body)?;
    check_id(&id, req.deployment_id.as_deref(), true)?;
    let done = endpoints
        .deployment_pause(DeploymentPauseRequest {
            deployment_id: DeploymentId::new(&id),
            pause: req.pause.unwrap_or(false),
        })
        .await?;
    Ok(answer(done))
}

/// `PUT|POST /v1/deployment/unblock/:id` `{"DeploymentID"}` (required, as Nomad's): unblocking is for multiregion
/// deployments, which wait blocked for the other regions; a single-region cluster's
/// deployments are never blocked, so, as Nomad OSS answers, an active deployment has
/// nothing to unblock (an empty update, index 0) and a finished one is refused.
pub async fn unblock(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: DeploymentIdBody = decode_body(&body)?;
    check_id(&id, req.deployment_id.as_deref(), true)?;
    let mut opts = QueryOptions::parse(&q)?;
    opts.stale = false;
    let (snap, _) = ctx.read(&opts, &[Table::Deployments]).await?;
    let deployment = snap
        .deployment_by_id(&id)
        .ok_or_else(|| ApiError::not_found("deployment not found"))?;
    if deployment.status.is_terminal() {
        return Err(ApiError::bad_request(
            crate::server::deployments::ops::TERMINAL_NO_UNBLOCK,
        ));
    }
    Ok(answer(DeploymentUpdateResponse {
        eval_id: None,
        eval_create_index: 0,
        deployment_modify_index: 0,
        reverted_job_version: None,
        index: 0,
    }))
}

/// Nomad's `DeploymentAllocHealthRequest` (Go decodes field names case-insensitively, and
/// python-nomad spells one `UnHealthyAllocationIDs`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct AllocHealthBody {
    #[serde(rename = "DeploymentID", default)]
    deployment_id: Option<String>,
    #[serde(rename = "HealthyAllocationIDs", default)]
    healthy: Option<Vec<String>>,
    #[serde(
        rename = "UnhealthyAllocationIDs",
        alias = "UnHealthyAllocationIDs",
        default
    )]
    unhealthy: Option<Vec<String>>,
}

/// `PUT|POST /v1/deployment/allocation-health/:id`
/// `{"DeploymentID", "HealthyAllocationIDs", "UnhealthyAllocationIDs"}`.
pub async fn allocation_health(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let endpoints = ctx.endpoints()?;
    let req: AllocHealthBody = decode_body(&body)?;
    check_id(&id, req.deployment_id.as_deref(), true)?;
    let ids = |v: Option<Vec<String>>| -> Vec<AllocId> {
        v.unwrap_or_default()
            .into_iter()
            .map(AllocId::new)
            .collect()
    };
    let done = endpoints
        .deployment_set_alloc_health(DeploymentAllocHealthRequest {
            deployment_id: DeploymentId::new(&id),
            healthy: ids(req.healthy),
            unhealthy: ids(req.unhealthy),
        })
        .await?;
    Ok(answer(done))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_must_name_the_paths_deployment() {
        assert!(check_id("d1", Some("d1"), true).is_ok());
        assert!(check_id("d1", None, false).is_ok());
        assert_eq!(
            check_id("d1", None, true).unwrap_err().message,
            "DeploymentID must be specified"
        );
        assert_eq!(
            check_id("d1", Some("d2"), false).unwrap_err().message,
            "Deployment ID does not match"
        );
    }

    #[test]
    fn python_nomads_spelling_of_unhealthy_ids_is_accepted() {
        let body: AllocHealthBody = serde_json::from_str(
            r#"{"DeploymentID":"d","HealthyAllocationIDs":["a"],"UnHealthyAllocationIDs":["b"]}"#,
        )
        .unwrap();
        assert_eq!(body.healthy, Some(vec!["a".to_string()]));
        assert_eq!(body.unhealthy, Some(vec!["b".to_string()]));
        let body: AllocHealthBody =
            serde_json::from_str(r#"{"DeploymentID":"d","UnhealthyAllocationIDs":null}"#).unwrap();
        assert_eq!(body.unhealthy, None);
    }
}
