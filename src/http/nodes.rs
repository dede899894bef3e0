//! Nodes: `GET /v1/nodes`, `GET /v1/node/:id`, `GET /v1/node/:id/allocations`,
//! `POST /v1/node/:id/eligibility`, `POST /v1/node/:id/drain`.
//!
//! Reads honour `stale`, `index`/`wait` and `prefix` like every read; a node's `SecretID` is
//! never shown. Writes go through raft (forwarded to the leader by the raft node).

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};
use teamster_storage::fsm::Command;
use teamster_storage::model::{DrainStrategy, Node, SchedulingEligibility};
use teamster_storage::state::{Snapshot, Table};

use super::error::ApiError;
use super::jobs::{decode_body, write_error};
use super::query::QueryOptions;
use super::read::{json_read, json_write};
use super::HttpContext;
use crate::rpc::node_api::{NodeUpdateDrainRequest, NodeUpdateEligibilityRequest};
use crate::server::endpoints::node::{drain_command, eligibility_command};

/// The node routes.
pub fn routes() -> Router<HttpContext> {
    Router::new()
        .route("/v1/nodes", get(list))
        .route("/v1/node/{id}", get(get_node))
        .route("/v1/node/{id}/allocations", get(allocations))
        .route(
            "/v1/node/{id}/eligibility",
            post(eligibility).put(eligibility),
        )
        .route("/v1/node/{id}/drain", post(drain).put(drain))
}

fn stub(n: &Node) -> Value {
    let drivers: serde_json::Map<String, Value> = n
        .drivers
        .iter()
        .map(|(k, d)| {
            (
                k.clone(),
                json!({"Detected": d.detected, "Healthy": d.healthy, "HealthDescription": d.health_description}),
            )
        })
        .collect();
    json!({
        "Address": n.http_addr.rsplit_once(':').map_or(n.http_addr.as_str(), |(h, _)| h),
        "ID": n.id,
        "Datacenter": n.datacenter,
        "Name": n.name,
        "NodeClass": n.node_class,
        "NodePool": n.node_pool,
        "Version": n.attributes.get("teamster.version").cloned().unwrap_or_default(),
        "Drain": n.drain_strategy.is_some(),
        "SchedulingEligibility": n.scheduling_eligibility,
        "Status": n.status,
        "StatusDescription": n.status_description,
        "Drivers": drivers,
        "CreateIndex": n.create_index,
        "ModifyIndex": n.modify_index,
    })
}

fn full(n: &Node) -> Value {
    let mut v = serde_json::to_value(n).unwrap_or(Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.insert("SecretID".into(), Value::String(String::new()));
        o.insert("Drain".into(), Value::Bool(n.drain_strategy.is_some()));
    }
    v
}

/// Find a node by full id or unique prefix.
fn find<'a>(snap: &'a Snapshot, id: &'a str) -> Result<&'a std::sync::Arc<Node>, ApiError> {
    if let Some(n) = snap.node_by_id(id) {
        return Ok(n);
    }
    let matches: Vec<_> = snap.nodes_by_prefix(id).take(2).collect();
    match matches.as_slice() {
        [one] => Ok(one),
        [] => Err(ApiError::not_found("node not found")),
        _ => Err(ApiError::bad_request(format!(
            "node ID prefix {id:?} matches several nodes"
        ))),
    }
}

/// `GET /v1/nodes`.
async fn list(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Nodes]).await?;
    let nodes: Vec<Value> = snap
        .nodes_by_prefix(&opts.prefix)
        .map(|n| stub(n))
        .collect();
    Ok(json_read(nodes, meta))
}

/// `GET /v1/node/:id`.
async fn get_node(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Nodes]).await?;
    Ok(json_read(full(find(&snap, &id)?), meta))
}

/// `GET /v1/node/:id/allocations`.
async fn allocations(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Nodes, Table::Allocs]).await?;
    let node = find(&snap, &id)?;
    let allocs: Vec<Value> = snap
        .allocs_by_node(node.id.as_str())
        .map(|a| {
            let mut v = serde_json::to_value(a.as_ref()).unwrap_or(Value::Null);
            if let Some(o) = v.as_object_mut() {
                o.insert("NodeName".into(), Value::String(node.name.clone()));
            }
            v
        })
        .collect();
    Ok(json_read(allocs, meta))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct EligibilityBody {
    #[serde(default)]
    eligibility: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct DrainSpec {
    deadline: Option<i64>,
    ignore_system_jobs: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DrainBody {
    #[serde(default)]
    drain_spec: Option<DrainSpec>,
    #[serde(default)]
    mark_eligible: Option<bool>,
}

async fn apply(
    ctx: &HttpContext,
    build: impl FnOnce(&Snapshot, i64) -> Result<Command, String>,
) -> Result<Response, ApiError> {
    let node = ctx.node()?.clone();
    let snap = node
        .consistent_snapshot()
        .await
        .map_err(super::read::node_error)?;
    let cmd = build(&snap, ctx.clock().now_unix_nanos()).map_err(|e| {
        if e.ends_with("not found") {
            ApiError::not_found(e)
        } else {
            ApiError::bad_request(e)
        }
    })?;
    let eval_ids: Vec<String> = match &cmd {
        Command::NodeUpdateEligibility(c) => c.evals.iter().map(|e| e.id.to_string()).collect(),
        Command::NodeUpdateDrain(c) => c.evals.iter().map(|e| e.id.to_string()).collect(),
        _ => Vec::new(),
    };
    let applied = node.write(cmd).await.map_err(write_error)?;
    if let Some(e) = applied.response.rejection() {
        return Err(ApiError::bad_request(e.to_string()));
    }
    Ok(json_write(
        json!({
            "EvalIDs": eval_ids,
            "EvalCreateIndex": applied.index,
            "NodeModifyIndex": applied.index,
            "Index": applied.index,
        }),
        applied.index,
    ))
}

/// `POST /v1/node/:id/eligibility` with `{"Eligibility": "eligible" | "ineligible"}`.
async fn eligibility(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let b: EligibilityBody = decode_body(&body)?;
    let eligibility = match b.eligibility.as_deref() {
        Some("eligible") => SchedulingEligibility::Eligible,
        Some("ineligible") => SchedulingEligibility::Ineligible,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Eligibility: invalid value {other:?} (eligible or ineligible)"
            )))
        }
        None => return Err(ApiError::bad_request("Eligibility: missing")),
    };
    apply(&ctx, |snap, now| {
        let node = find(snap, &id).map_err(|e| e.message)?;
        eligibility_command(
            snap,
            NodeUpdateEligibilityRequest {
                node_id: node.id.clone(),
                eligibility,
            },
            now,
        )
    })
    .await
}

/// `POST /v1/node/:id/drain` with `{"DrainSpec": {"Deadline": ns, "IgnoreSystemJobs": b}}`
/// (or `"DrainSpec": null` and `"MarkEligible"` to cancel).
async fn drain(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let b: DrainBody = decode_body(&body)?;
    let drain = b.drain_spec.map(|s| DrainStrategy {
        deadline: s.deadline.unwrap_or(3_600_000_000_000),
        ignore_system_jobs: s.ignore_system_jobs.unwrap_or(false),
        ..DrainStrategy::default()
    });
    if let Some(d) = &drain {
        if d.deadline < -1 {
            return Err(ApiError::bad_request(format!(
                "DrainSpec.Deadline: {} must be -1 (no deadline), 0 (force) or positive",
                d.deadline
            )));
        }
    }
    let mark_eligible = b.mark_eligible.unwrap_or(false);
    apply(&ctx, |snap, now| {
        let node = find(snap, &id).map_err(|e| e.message)?;
        drain_command(
            snap,
            NodeUpdateDrainRequest {
                node_id: node.id.clone(),
                drain,
                mark_eligible,
            },
            now,
        )
    })
    .await
}
