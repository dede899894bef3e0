//! `/v1/agent/schedulers` and `/v1/agent/schedulers/config`: this server's scheduler workers
//! and their run-time configuration, in Nomad's exact (snake_case) shapes.
//!
//! Server agents only (a client-only agent answers 400 "Server only endpoint"); not blocking
//! queries; a change through `PUT`/`POST` is applied in place and not persisted (a restart or
//! a SIGHUP reload goes back to the config file). Other methods answer 405.

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::error::ApiError;
use super::HttpContext;
use crate::server::worker::pool::PoolConfig;
use crate::server::worker::WorkerInfo;

/// `GET /v1/agent/schedulers` (Nomad's `AgentSchedulerWorkersInfo`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulersInfo {
    /// `<name>.global`.
    pub server_id: String,
    /// Every worker, oldest first.
    pub schedulers: Vec<WorkerInfo>,
}

/// `/v1/agent/schedulers/config` (Nomad's `AgentSchedulerWorkerConfigResponse`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulersConfig {
    /// `<name>.global`.
    pub server_id: String,
    /// How many workers.
    pub num_schedulers: usize,
    /// The scheduler types they serve.
    pub enabled_schedulers: Vec<String>,
}

/// The `PUT`/`POST` body; a `server_id` (from a GET answer sent back) is ignored.
#[derive(Debug, Deserialize)]
struct ConfigRequest {
    num_schedulers: usize,
    enabled_schedulers: Vec<String>,
    #[serde(default, rename = "server_id")]
    _server_id: Option<String>,
}

/// The routes of this module.
pub fn routes() -> Router<HttpContext> {
    Router::new()
        .route("/v1/agent/schedulers", get(workers))
        .route(
            "/v1/agent/schedulers/config",
            get(config).put(set_config).post(set_config),
        )
}

fn server_id(ctx: &HttpContext) -> String {
    format!("{}.global", ctx.agent().name)
}

async fn workers(State(ctx): State<HttpContext>) -> Result<Json<SchedulersInfo>, ApiError> {
    let pool = &ctx.server()?.workers;
    Ok(Json(SchedulersInfo {
        server_id: server_id(&ctx),
        schedulers: pool.info(),
    }))
}

fn config_answer(ctx: &HttpContext, c: PoolConfig) -> SchedulersConfig {
    SchedulersConfig {
        server_id: server_id(ctx),
        num_schedulers: c.num_schedulers,
        enabled_schedulers: c.enabled_schedulers,
    }
}

async fn config(State(ctx): State<HttpContext>) -> Result<Json<SchedulersConfig>, ApiError> {
    let pool = &ctx.server()?.workers;
    Ok(Json(config_answer(&ctx, pool.config())))
}

async fn set_config(
    State(ctx): State<HttpContext>,
    body: Bytes,
) -> Result<Json<SchedulersConfig>, ApiError> {
    let pool = ctx.server()?.workers.clone();
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(ApiError::bad_request("Invalid request: the body is empty"));
    }
    let req: ConfigRequest = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("Invalid request: {e}")))?;
    let applied = pool
        .set_config(PoolConfig {
            num_schedulers: req.num_schedulers,
            enabled_schedulers: req.enabled_schedulers,
        })
        .map_err(|e| ApiError::bad_request(format!("Invalid request: {e}")))?;
    tracing::info!(
        num_schedulers = applied.num_schedulers,
        enabled_schedulers = ?applied.enabled_schedulers,
        "scheduler worker configuration changed through the API"
    );
    Ok(Json(config_answer(&ctx, applied)))
}
