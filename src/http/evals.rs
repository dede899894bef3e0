//! Evaluations and the leader's broker: `GET /v1/evaluations` (`?prefix=`, `?job=`,
//! `?status=`), `GET /v1/evaluation/:id`, `GET /v1/evaluation/:id/allocations`,
//! `GET /v1/job/:id/evaluations`, and our own `GET /v1/operator/scheduler/broker` (broker,
//! blocked-evals and plan-queue counts of the leader, JSON).

use std::collections::{BTreeMap, HashMap};

use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::{Json, Router};
use serde::Serialize;
use teamster_storage::model::Evaluation;
use teamster_storage::state::Table;

use super::allocs::alloc_stub;
use super::error::ApiError;
use super::query::QueryOptions;
use super::read::json_read;
use super::HttpContext;

/// The routes of this module.
pub fn routes() -> Router<HttpContext> {
    Router::new()
        .route("/v1/evaluations", get(list))
        .route("/v1/evaluation/{id}", get(get_one))
        .route("/v1/evaluation/{id}/allocations", get(allocations))
        .route("/v1/job/{id}/evaluations", get(job_evaluations))
        .route("/v1/operator/scheduler/broker", get(broker_stats))
}

/// `GET /v1/evaluations`: every evaluation, filtered by `prefix` (of the ID), `job` and
/// `status`; sorted by create index.
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

/// One queue's counts.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct QueueCounts {
    /// Ready to be dequeued.
    pub ready: usize,
    /// Delivered, not yet acked.
    pub unacked: usize,
    /// Behind another eval of the same job.
    pub pending: usize,
    /// Held back by a delay.
    pub waiting: usize,
    /// Superseded, waiting to be written canceled.
    pub cancelable: usize,
}

/// The leader's broker, blocked evals and plan queue counts.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct BrokerStatsResponse {
    /// Whether the answering server's leader subsystems are established.
    pub leader: bool,
    /// Whether its broker is enabled.
    pub enabled: bool,
    /// Ready evals.
    pub total_ready: usize,
    /// Outstanding deliveries.
    pub total_unacked: usize,
    /// Evals waiting behind their job's in-flight eval.
    pub total_pending: usize,
    /// Delayed evals.
    pub total_waiting: usize,
    /// Superseded evals not yet canceled.
    pub total_cancelable: usize,
    /// Per scheduler queue.
    pub by_scheduler: BTreeMap<String, QueueCounts>,
    /// Blocked evals tracked.
    pub total_blocked: usize,
    /// Of those, escaped.
    pub total_escaped: usize,
    /// Of those, system evals parked on a node.
    pub total_system_blocked: usize,
    /// Plans waiting in the plan queue.
    pub plan_queue_depth: usize,
}

/// `GET /v1/operator/scheduler/broker`: the counts of the leader (forwarded to the leader's
/// HTTP API from a follower unless `?stale`).
pub async fn broker_stats(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Json<BrokerStatsResponse>, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let server = ctx.server()?;
    let side = &server.leader_side;
    let established = side.leadership.is_established();
    if !established && !opts.stale {
        let (leader, addr) = server
            .node
            .wait_leader(ctx.config().server.rpc_hold_timeout)
            .await
            .ok_or_else(ApiError::no_leader)?;
        if leader != server.node.id() {
            let api = crate::cli::ApiClient::new(&format!("http://{}", addr.http_addr));
            let stats: BrokerStatsResponse = api
                .get("/v1/operator/scheduler/broker?stale=true")
                .await
                .map_err(|e| ApiError::internal(format!("asking the leader: {e}")))?;
            return Ok(Json(stats));
        }
    }
    let b = side.pipeline.broker().stats();
    let blocked = side.pipeline.blocked().stats();
    Ok(Json(BrokerStatsResponse {
        leader: established,
        enabled: side.pipeline.broker().enabled(),
        total_ready: b.total_ready,
        total_unacked: b.total_unacked,
        total_pending: b.total_pending,
        total_waiting: b.total_waiting,
        total_cancelable: b.total_cancelable,
        by_scheduler: b
            .by_scheduler
            .iter()
            .map(|(queue, s)| {
                (
                    queue.as_str().to_string(),
                    QueueCounts {
                        ready: s.ready,
                        unacked: s.unacked,
                        pending: s.pending,
                        waiting: s.waiting,
                        cancelable: s.cancelable,
                    },
                )
            })
            .collect(),
        total_blocked: blocked.total_blocked,
        total_escaped: blocked.total_escaped,
        total_system_blocked: blocked.total_system,
        plan_queue_depth: side.plans.depth(),
    }))
}
