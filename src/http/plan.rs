//! `PUT|POST /v1/job/:id/plan`: what registering a job would do (Nomad's `Job.Plan`): the
//! scheduler's decisions per task group, the placements it could not make, and the diff from
//! the registered version, computed by the service layer without writing anything.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use super::jobs::{body_job, decode_body, refuse_policy_override};
use super::HttpContext;
use crate::rpc::{service, Services};

/// Nomad's `JobPlanRequest`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct JobPlanBody {
    #[serde(default)]
    job: Option<Value>,
    #[serde(default)]
    diff: Option<bool>,
    #[serde(default)]
    policy_override: Option<bool>,
}

/// `PUT|POST /v1/job/:id/plan`.
pub async fn plan(
    State(ctx): State<HttpContext>,
    axum::Extension(identity): axum::Extension<crate::server::acl::Identity>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let endpoints = ctx.endpoints()?;
    let req: JobPlanBody = decode_body(&body)?;
    refuse_policy_override(req.policy_override)?;
    let mut warnings = req
        .job
        .as_ref()
        .map(crate::jobspec::job_warnings)
        .unwrap_or_default();
    let job = body_job(
        req.job,
        &q,
        Some((
            &identity,
            &[
                crate::acl::Capability::SubmitJob,
                crate::acl::Capability::PlanJob,
            ],
        )),
    )?;
    if job.id.as_str() != id {
        return Err(ApiError::bad_request("Job ID does not match"));
    }
    warnings.extend(job.task_warnings());
    warnings.extend(super::jobs::memory_max_warnings(&ctx, &job));
    let done = endpoints
        .job_plan(Box::new(service::job::JobPlanRequest {
            job,
            diff: req.diff.unwrap_or(false),
        }))
        .await?;
    let body = json!({
        "JobModifyIndex": done.job_modify_index,
        "Index": done.index,
        "Annotations": done.annotations,
        "FailedTGAllocs": done.failed_tg_allocs,
        "CreatedEvals": done.created_evals,
        "Diff": done.diff,
        "Warnings": warnings.join("\n"),
        "NextPeriodicLaunch": "0001-01-01T00:00:00Z",
    });
    Ok(axum::Json(body).into_response())
}
