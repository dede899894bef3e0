//! Autopilot, Nomad's routes and shapes: `GET|PUT /v1/operator/autopilot/configuration`
//! (durations as Go strings; `?cas=<ModifyIndex>` for a check-and-set) and
//! `GET /v1/operator/autopilot/health` (429 while a server is unhealthy), answered by the
//! leader's autopilot (src/server/autopilot.rs).

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};
use teamster_storage::model::AutopilotConfig;
use teamster_storage::state::Table;

use super::error::ApiError;
use super::query::QueryOptions;
use super::read::json_read;
use super::HttpContext;
use crate::rpc::service::operator::{AutopilotSetConfigRequest, ServerHealthRequest};
use crate::rpc::Services;
use crate::util::go::{go_duration, parse_go_duration};

/// The routes of this module.
pub fn routes() -> Router<HttpContext> {
    Router::new()
        .route(
            "/v1/operator/autopilot/configuration",
            get(get_config).put(set_config).post(set_config),
        )
        .route("/v1/operator/autopilot/health", get(health))
}

/// The configuration in Nomad's shape.
fn config_json(c: &AutopilotConfig) -> Value {
    json!({
        "CleanupDeadServers": c.cleanup_dead_servers,
        "LastContactThreshold": go_duration(c.last_contact_threshold),
        "MaxTrailingLogs": c.max_trailing_logs,
        "MinQuorum": c.min_quorum,
        "ServerStabilizationTime": go_duration(c.server_stabilization_time),
        "EnableRedundancyZones": false,
        "DisableUpgradeMigration": false,
        "EnableCustomUpgrades": false,
        "CreateIndex": c.create_index,
        "ModifyIndex": c.modify_index,
    })
}

/// `GET /v1/operator/autopilot/configuration`.
pub async fn get_config(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::AutopilotConfig]).await?;
    Ok(json_read(config_json(snap.autopilot_config()), meta))
}

/// `body` over `current`: the fields given replace the current values (durations as Go
/// strings or nanoseconds); Nomad Enterprise's switches may only be off; anything else is
/// refused by name.
fn apply_body(current: &AutopilotConfig, body: &Value) -> Result<AutopilotConfig, ApiError> {
    let obj = body
        .as_object()
        .ok_or_else(|| ApiError::bad_request("Error parsing autopilot config: not an object"))?;
    let mut c = current.clone();
    let bad = |field: &str, want: &str| {
        ApiError::bad_request(format!(
            "Error parsing autopilot config: {field} must be {want}"
        ))
    };
    let duration = |field: &str, v: &Value| -> Result<u64, ApiError> {
        match v {
            Value::String(s) => parse_go_duration(s)
                .and_then(|d| u64::try_from(d.as_nanos()).ok())
                .ok_or_else(|| bad(field, "a duration such as \"200ms\"")),
            Value::Number(n) => n.as_u64().ok_or_else(|| bad(field, "a duration")),
            _ => Err(bad(field, "a duration such as \"200ms\"")),
        }
    };
    for (k, v) in obj {
        match k.as_str() {
            "CleanupDeadServers" => {
                c.cleanup_dead_servers = v.as_bool().ok_or_else(|| bad(k, "true or false"))?
            }
            "LastContactThreshold" => c.last_contact_threshold = duration(k, v)?,
            "ServerStabilizationTime" => c.server_stabilization_time = duration(k, v)?,
            "MaxTrailingLogs" => {
                c.max_trailing_logs = v.as_u64().ok_or_else(|| bad(k, "a whole number"))?
            }
            "MinQuorum" => c.min_quorum = v.as_u64().ok_or_else(|| bad(k, "a whole number"))?,
            "EnableRedundancyZones" | "DisableUpgradeMigration" | "EnableCustomUpgrades" => {
                if v.as_bool() == Some(true) {
                    return Err(ApiError::bad_request(format!(
                        "{k} is a Nomad Enterprise feature that teamster does not implement"
                    )));
                }
            }
            // Server-set; Nomad's own clients send them back.
            "CreateIndex" | "ModifyIndex" => {}
            other => {
                return Err(ApiError::bad_request(format!(
                    "Error parsing autopilot config: unknown field {other:?}"
                )))
            }
        }
    }
    Ok(c)
}

/// `PUT|POST /v1/operator/autopilot/configuration[?cas=N]`: `true` (with `cas`, whether
/// it was written), as Nomad answers.
pub async fn set_config(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let endpoints = ctx.endpoints()?;
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("Error parsing autopilot config: {e}")))?;
    let cas_index = match q.get("cas") {
        None => None,
        Some(v) => Some(v.parse::<u64>().map_err(|_| {
            ApiError::bad_request(format!("Error parsing cas value: {v:?} is not a number"))
        })?),
    };
    // The fields given go over the configuration as of a consistent read (not a lagging
    // copy); with `cas`, over exactly the version named, or nothing is written.
    let (snap, _) = ctx
        .read(&QueryOptions::default(), &[Table::AutopilotConfig])
        .await?;
    let current = snap.autopilot_config().clone();
    if cas_index.is_some_and(|i| i != current.modify_index) {
        return Ok(Json(json!(false)).into_response());
    }
    let config = apply_body(&current, &value)?;
    let done = endpoints
        .operator_autopilot_set_configuration(AutopilotSetConfigRequest { config, cas_index })
        .await?;
    Ok(Json(json!(cas_index.is_none() || done.updated)).into_response())
}

/// `GET /v1/operator/autopilot/health`: 200 when every server is healthy, else 429.
pub async fn health(State(ctx): State<HttpContext>) -> Result<Response, ApiError> {
    let endpoints = ctx.endpoints()?;
    let h = endpoints
        .operator_server_health(ServerHealthRequest)
        .await?;
    let servers: Vec<Value> = h
        .servers
        .iter()
        .map(|s| {
            json!({
                "ID": s.id.to_string(),
                "Name": format!("{}.global", s.name),
                "Address": s.address,
                "SerfStatus": s.status,
                "Version": env!("CARGO_PKG_VERSION"),
                "Leader": s.leader,
                "LastContact": go_duration(s.last_contact_ms.saturating_mul(1_000_000)),
                "LastTerm": s.last_term,
                "LastIndex": s.last_index,
                "Healthy": s.healthy,
                "Voter": s.voter,
                "StableSince": humantime::format_rfc3339_seconds(
                    std::time::UNIX_EPOCH
                        + std::time::Duration::from_nanos(
                            u64::try_from(s.stable_since).unwrap_or(0)
                        )
                )
                .to_string(),
            })
        })
        .collect();
    let body = json!({
        "Healthy": h.healthy,
        "FailureTolerance": h.failure_tolerance,
        "Leader": h.leader.to_string(),
        "Voters": h.voters.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "Servers": servers,
    });
    let status = if h.healthy {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    Ok((status, Json(body)).into_response())
}
