//! `GET`/`PUT`/`POST /v1/operator/scheduler/configuration`: the scheduler configuration in
//! Nomad's shape. Reading answers `{"SchedulerConfig": {…}, "Index", "KnownLeader",
//! "LastContact"}`; writing takes the configuration as the body (with `?cas=<ModifyIndex>`
//! for a compare-and-set) and answers `{"Updated": bool, "Index": N}`.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde_json::json;
use teamster_storage::model::SchedulerConfiguration;
use teamster_storage::state::Table;

use super::error::ApiError;
use super::jobs::decode_body;
use super::query::QueryOptions;
use super::read::{json_read, json_write};
use super::HttpContext;
use crate::rpc::service::operator::SchedulerSetConfigRequest;
use crate::rpc::Services;

/// The routes of this module.
pub fn routes() -> Router<HttpContext> {
    Router::new().route(
        "/v1/operator/scheduler/configuration",
        get(get_config).put(set_config).post(set_config),
    )
}

/// `GET /v1/operator/scheduler/configuration`.
pub async fn get_config(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::SchedulerConfig]).await?;
    Ok(json_read(
        json!({
            "SchedulerConfig": snap.scheduler_config(),
            "Index": meta.index,
            "KnownLeader": meta.known_leader,
            "LastContact": 0,
        }),
        meta,
    ))
}

/// `PUT|POST /v1/operator/scheduler/configuration[?cas=N]`.
pub async fn set_config(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let endpoints = ctx.endpoints()?;
    let config: SchedulerConfiguration = decode_body(&body)?;
    let cas_index = match q.get("cas") {
        None => None,
        Some(v) => Some(v.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!("Error parsing cas value: {v:?} is not a number"))
        })?),
    };
    let done = endpoints
        .operator_scheduler_set_configuration(SchedulerSetConfigRequest { config, cas_index })
        .await?;
    let (updated, index) = (done.updated, done.index);
    Ok(json_write(
        json!({ "Updated": updated, "Index": index }),
        index,
    ))
}
