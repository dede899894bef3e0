//! Scaling: `GET|PUT|POST /v1/job/:id/scale` (a task group's count within its `scaling`
//! bounds, and the scaling events) and `GET /v1/scaling/policies`, `/v1/scaling/policy/:id`
//! (the groups' policies, for an autoscaler). Scaling writes go through `Job.Scale`.

use std::collections::{BTreeMap, HashMap};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};
use teamster_storage::model::{ClientStatus, ConfigValue, Job, ScalingPolicy};
use teamster_storage::state::{Snapshot, Table};

use super::error::ApiError;
use super::jobs::{decode_body, refuse_policy_override};
use super::query::QueryOptions;
use super::read::{json_read, json_write};
use super::HttpContext;
use crate::rpc::{service, Services};

/// The routes of this module.
pub fn routes() -> Router<HttpContext> {
    Router::new()
        .route("/v1/job/{id}/scale", get(status).put(scale).post(scale))
        .route("/v1/scaling/policies", get(policies))
        .route("/v1/scaling/policy/{id}", get(policy))
}

/// `GET /v1/job/:id/scale`: per task group the desired count, what is placed and running,
/// and the newest scaling events (Nomad's `JobScaleStatus`). Healthy and unhealthy counts
/// come from deployments, which teamster does not run yet: they are 0, as Nomad's are for a
/// job without a deployment.
pub async fn status(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx
        .read(&opts, &[Table::Jobs, Table::JobSummaries, Table::Allocs])
        .await?;
    let job = snap
        .job_by_id(&opts.namespace, &id)
        .ok_or_else(|| ApiError::not_found("job not found"))?;
    let summary = snap.job_summary(&opts.namespace, &id);
    // (placed, running) per group, in one pass over the job's allocations.
    let mut counts: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for alloc in snap.allocs_by_job(&job.namespace, &job.id) {
        if alloc.terminal_status() {
            continue;
        }
        let entry = counts.entry(alloc.task_group.as_str()).or_default();
        entry.0 += 1;
        if alloc.client_status == ClientStatus::Running {
            entry.1 += 1;
        }
    }
    let mut groups = serde_json::Map::new();
    for group in job.task_groups.iter() {
        let (placed, running) = counts.get(group.name.as_str()).copied().unwrap_or_default();
        let events = summary
            .and_then(|s| s.scaling_events.get(&group.name))
            .cloned()
            .unwrap_or_default();
        groups.insert(
            group.name.clone(),
            json!({
                "Desired": group.count,
                "Placed": placed,
                "Running": running,
                "Healthy": 0,
                "Unhealthy": 0,
                "Events": events,
            }),
        );
    }
    Ok(json_read(
        json!({
            "JobID": job.id,
            "Namespace": job.namespace,
            "JobCreateIndex": job.create_index,
            "JobModifyIndex": job.job_modify_index,
            "JobStopped": job.stop,
            "TaskGroups": groups,
        }),
        meta,
    ))
}

/// Nomad's `ScalingRequest`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ScaleBody {
    #[serde(default)]
    count: Option<i64>,
    #[serde(default)]
    target: Option<BTreeMap<String, String>>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    error: Option<bool>,
    #[serde(default)]
    meta: Option<BTreeMap<String, ConfigValue>>,
    #[serde(default)]
    job_modify_index: Option<u64>,
    #[serde(default)]
    policy_override: Option<bool>,
}

/// `PUT|POST /v1/job/:id/scale`: set a group's count (`Count`) within its policy, or with no
/// count record an event only (`Job.Scale`). Answered like a registration.
pub async fn scale(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let endpoints = ctx.endpoints()?;
    let opts = QueryOptions::parse(&q)?;
    let req: ScaleBody = decode_body(&body)?;
    refuse_policy_override(req.policy_override)?;
    let target = req.target.unwrap_or_default();
    if target.get("Job").is_some_and(|j| !j.is_empty() && *j != id) {
        return Err(ApiError::bad_request("job ID in payload did not match URL"));
    }
    if target
        .get("Namespace")
        .is_some_and(|n| !n.is_empty() && *n != opts.namespace)
    {
        return Err(ApiError::bad_request(
            "namespace in payload did not match the request's namespace",
        ));
    }
    if let Some(key) = target
        .keys()
        .find(|k| !matches!(k.as_str(), "Job" | "Group" | "Namespace"))
    {
        return Err(ApiError::bad_request(format!(
            "Target.{key} is not supported: a scaling target is a task group"
        )));
    }
    let group = target.get("Group").cloned().unwrap_or_default();
    let done = endpoints
        .job_scale(Box::new(service::job::JobScaleRequest {
            namespace: opts.namespace.as_str().into(),
            job_id: id.as_str().into(),
            group,
            count: req.count,
            message: req.message.unwrap_or_default(),
            error: req.error.unwrap_or(false),
            meta: req.meta.unwrap_or_default(),
            job_modify_index: req.job_modify_index.unwrap_or(0),
        }))
        .await?;
    let eval_create_index = if done.eval_id.is_some() {
        done.index
    } else {
        0
    };
    Ok(json_write(
        json!({
            "EvalID": done.eval_id.map(|e| e.to_string()).unwrap_or_default(),
            "EvalCreateIndex": eval_create_index,
            "JobModifyIndex": done.job_modify_index,
            "Warnings": "",
            "Index": done.index,
        }),
        done.index,
    ))
}

/// A policy as the API shows it, with its job's indexes.
fn policy_json(job: &Job, policy: &ScalingPolicy, full: bool) -> Value {
    let mut v = json!({
        "ID": policy.id,
        "Type": policy.r#type,
        "Target": policy.target,
        "Enabled": policy.enabled.unwrap_or(true),
        "CreateIndex": job.create_index,
        "ModifyIndex": job.job_modify_index,
    });
    if full {
        v["Min"] = json!(policy.min);
        v["Max"] = json!(policy.max);
        v["Policy"] = json!(policy.policy);
    }
    v
}

/// Every group policy of the current jobs in the namespace.
fn all_policies<'a>(
    snap: &'a Snapshot,
    namespace: &'a str,
) -> impl Iterator<Item = (&'a Job, &'a ScalingPolicy)> + 'a {
    snap.jobs_by_prefix(namespace, "").flat_map(|job| {
        job.task_groups
            .iter()
            .filter_map(move |g| g.scaling.as_ref().map(|p| (job.as_ref(), p)))
    })
}

/// `GET /v1/scaling/policies` (`?job=`, `?type=`): policy stubs.
pub async fn policies(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let job_filter = q.get("job").filter(|j| !j.is_empty());
    let type_filter = q.get("type").filter(|t| !t.is_empty());
    let (snap, meta) = ctx.read(&opts, &[Table::Jobs]).await?;
    let stubs: Vec<Value> = all_policies(&snap, &opts.namespace)
        .filter(|(job, _)| job_filter.is_none_or(|j| job.id.as_str() == j))
        .filter(|(_, p)| type_filter.is_none_or(|t| p.r#type.starts_with(t.as_str())))
        .map(|(job, p)| policy_json(job, p, false))
        .collect();
    Ok(json_read(stubs, meta))
}

/// `GET /v1/scaling/policy/:id`.
pub async fn policy(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Jobs]).await?;
    let found = all_policies(&snap, &opts.namespace)
        .find(|(_, p)| p.id == id)
        .map(|(job, p)| policy_json(job, p, true))
        .ok_or_else(|| ApiError::not_found("scaling policy not found"))?;
    Ok(json_read(found, meta))
}
