//! Evaluations and the leader's broker: `GET /v1/evaluations` (`?prefix=`, `?job=`,
//! `?status=`, `?namespace=*`), `GET /v1/evaluation/:id`,
//! `GET /v1/evaluation/:id/allocations`, `GET /v1/job/:id/evaluations`, and our own
//! `GET /v1/operator/scheduler/broker` (broker, blocked-evals and plan-queue counts of the
//! leader, JSON).

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};
use teamster_storage::model::Evaluation;
use teamster_storage::state::Table;

use super::allocs::alloc_stub;
use super::error::ApiError;
use super::query::QueryOptions;
use super::read::json_read;
use super::HttpContext;
use crate::rpc::service::operator::{BrokerStatsRequest, BrokerStatsResponse};
use crate::rpc::Services;

/// The routes of this module.
pub fn routes() -> Router<HttpContext> {
    Router::new()
        .route("/v1/evaluations", get(list))
        .route("/v1/evaluation/{id}", get(get_one))
        .route("/v1/evaluation/{id}/allocations", get(allocations))
        .route("/v1/job/{id}/evaluations", get(job_evaluations))
        .route("/v1/operator/scheduler/broker", get(broker_stats))
}

/// `GET /v1/evaluations`: the namespace's evaluations (`*`: every one's), filtered by
/// `prefix` (of the ID), `job` and `status`; sorted by create index.
pub async fn list(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Evals]).await?;
    let job = q.get("job").map(String::as_str).unwrap_or("");
    let status = q.get("status").map(String::as_str).unwrap_or("");
    let mut evals: Vec<&Evaluation> = snap
        .evals_by_prefix(&opts.prefix)
        .map(|e| e.as_ref())
        .filter(|e| opts.in_namespace(e.namespace.as_str()))
        .filter(|e| job.is_empty() || e.job_id.as_str() == job)
        .filter(|e| status.is_empty() || e.status.as_str() == status)
        .collect();
    evals.sort_by_key(|e| (e.create_index, e.id.clone()));
    Ok(json_read(evals, meta))
}

/// `GET /v1/evaluation/:id`.
pub async fn get_one(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Evals]).await?;
    let eval = snap
        .eval_by_id(&id)
        .ok_or_else(|| ApiError::not_found("eval not found"))?;
    Ok(json_read(eval.as_ref(), meta))
}

/// `GET /v1/evaluation/:id/allocations`: stubs of the allocations the evaluation made.
pub async fn allocations(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Allocs]).await?;
    let stubs: Vec<_> = snap
        .allocs_by_eval(&id)
        .map(|a| alloc_stub(&snap, a))
        .collect();
    Ok(json_read(stubs, meta))
}

/// `GET /v1/job/:id/evaluations`.
pub async fn job_evaluations(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Evals]).await?;
    let mut evals: Vec<&Evaluation> = snap
        .evals_by_job(&opts.namespace, &id)
        .map(|e| e.as_ref())
        .collect();
    evals.sort_by_key(|e| (e.create_index, e.id.clone()));
    Ok(json_read(evals, meta))
}

/// `GET /v1/operator/scheduler/broker`: the counts of the leader (`Operator.BrokerStats`,
/// forwarded to the leader from a follower), or of this server with `?stale`.
pub async fn broker_stats(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<BrokerStatsResponse>, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let endpoints = ctx.endpoints()?;
    if opts.stale {
        return Ok(Json(crate::server::endpoints::operator::broker_stats(
            endpoints,
        )));
    }
    Ok(Json(
        endpoints.operator_broker_stats(BrokerStatsRequest).await?,
    ))
}
