//! Allocations: `GET /v1/allocations` (`?prefix=`, `?namespace=*`), `GET /v1/allocation/:id` (with the
//! embedded job, as Nomad answers), `GET /v1/allocation/:id/services`, `GET
//! /v1/job/:id/allocations`, and
//! `POST|PUT /v1/allocation/:id/stop` (`Alloc.Stop`: the allocation is stopped and replaced;
//! answers `{EvalID, Index}`).

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};
use teamster_storage::model::Allocation;
use teamster_storage::state::{Snapshot, Table};

use super::error::ApiError;
use super::query::QueryOptions;
use super::read::json_read;
use super::HttpContext;

/// The routes of this module.
pub fn routes() -> Router<HttpContext> {
    Router::new()
        .route("/v1/allocations", get(list))
        .route("/v1/allocation/{id}", get(get_one))
        .route("/v1/allocation/{id}/services", get(services))
        .route(
            "/v1/allocation/{id}/stop",
            axum::routing::post(stop).put(stop),
        )
        .route("/v1/job/{id}/allocations", get(job_allocations))
}

/// Nomad's `AllocListStub`.
pub fn alloc_stub(snap: &Snapshot, a: &Allocation) -> Value {
    let job_type = snap.alloc_job(a).map(|j| j.job_type);
    let node_name = snap
        .node_by_id(a.node_id.as_str())
        .map(|n| n.name.clone())
        .unwrap_or_default();
    json!({
        "ID": a.id,
        "EvalID": a.eval_id,
        "Name": a.name,
        "Namespace": a.namespace,
        "NodeID": a.node_id,
        "NodeName": node_name,
        "JobID": a.job_id,
        "JobType": job_type,
        "JobVersion": a.job_version,
        "TaskGroup": a.task_group,
        "DesiredStatus": a.desired_status,
        "DesiredDescription": a.desired_description,
        "ClientStatus": a.client_status,
        "ClientDescription": a.client_description,
        "TaskStates": a.task_states,
        "DeploymentStatus": a.deployment_status,
        "DesiredTransition": a.desired_transition,
        "FollowupEvalID": a.followup_eval_id,
        "PreviousAllocation": a.previous_allocation,
        "NextAllocation": a.next_allocation,
        "RescheduleTracker": a.reschedule_tracker,
        "CreateIndex": a.create_index,
        "ModifyIndex": a.modify_index,
        "CreateTime": a.create_time,
        "ModifyTime": a.modify_time,
    })
}

/// `allocs` in the order lists give them: by creation, then ID.
fn by_creation<'a>(allocs: impl Iterator<Item = &'a Allocation>) -> Vec<&'a Allocation> {
    let mut allocs: Vec<&Allocation> = allocs.collect();
    allocs.sort_by_key(|a| (a.create_index, a.id.clone()));
    allocs
}

fn sorted_stubs<'a>(snap: &Snapshot, allocs: impl Iterator<Item = &'a Allocation>) -> Vec<Value> {
    by_creation(allocs)
        .into_iter()
        .map(|a| alloc_stub(snap, a))
        .collect()
}

/// `GET /v1/allocations`: stubs, `?prefix=` (of the ID) filtered, of the namespace (`*`:
/// of every one); Nomad's field selection: `?resources=true` adds each allocation's
/// `AllocatedResources`, `?task_states=false` leaves its `TaskStates` out (null).
pub async fn list(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let resources = QueryOptions::opt_flag(&q, "resources")?.unwrap_or(false);
    let task_states = QueryOptions::opt_flag(&q, "task_states")?.unwrap_or(true);
    let (snap, meta) = ctx.read(&opts, &[Table::Allocs]).await?;
    let allocs = by_creation(
        snap.allocs_by_prefix(&opts.prefix)
            .filter(|a| opts.in_namespace(a.namespace.as_str()))
            .map(|a| a.as_ref()),
    );
    let mut stubs = Vec::with_capacity(allocs.len());
    for a in allocs {
        let mut stub = alloc_stub(&snap, a);
        if resources {
            stub["AllocatedResources"] = serde_json::to_value(&a.allocated_resources)
                .map_err(|e| ApiError::internal(e.to_string()))?;
        }
        if !task_states {
            stub["TaskStates"] = Value::Null;
        }
        stubs.push(stub);
    }
    Ok(json_read(stubs, meta))
}

/// `GET /v1/allocation/:id`: the allocation with its job version embedded.
pub async fn get_one(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Allocs]).await?;
    let alloc = snap
        .alloc_by_id(&id)
        .ok_or_else(|| ApiError::not_found("alloc not found"))?;
    let mut value =
        serde_json::to_value(alloc.as_ref()).map_err(|e| ApiError::internal(e.to_string()))?;
    if let Value::Object(map) = &mut value {
        let job = snap.alloc_job(alloc).map(|j| j.as_ref());
        map.insert(
            "Job".into(),
            serde_json::to_value(job).map_err(|e| ApiError::internal(e.to_string()))?,
        );
        let node_name = snap
            .node_by_id(alloc.node_id.as_str())
            .map(|n| n.name.clone())
            .unwrap_or_default();
        map.insert("NodeName".into(), Value::String(node_name));
    }
    Ok(json_read(value, meta))
}

/// `GET /v1/allocation/:id/services`: the service registrations of the allocation (an empty
/// list while it has none; 404 for an allocation that does not exist, as Nomad answers).
pub async fn services(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Allocs, Table::Services]).await?;
    let alloc = snap
        .alloc_by_id(&id)
        .ok_or_else(|| ApiError::not_found("alloc not found"))?;
    let regs: Vec<_> = snap
        .services_by_alloc(alloc.id.as_str())
        .iter()
        .map(|r| (**r).clone())
        .collect();
    Ok(json_read(regs, meta))
}

/// `GET /v1/job/:id/allocations`.
pub async fn job_allocations(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Allocs]).await?;
    let stubs = sorted_stubs(
        &snap,
        snap.allocs_by_job(&opts.namespace, &id).map(|a| a.as_ref()),
    );
    Ok(json_read(stubs, meta))
}

/// `POST|PUT /v1/allocation/:id/stop` (the full ID, as Nomad): marks the allocation to
/// migrate with an `alloc-stop` evaluation, which stops it and places a replacement.
pub async fn stop(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    use crate::rpc::Services;
    let done = ctx
        .endpoints()?
        .alloc_stop(crate::rpc::service::alloc::AllocStopRequest { alloc_id: id })
        .await?;
    Ok(super::read::json_write(
        json!({ "EvalID": done.eval_id, "Index": done.index }),
        done.index,
    ))
}
