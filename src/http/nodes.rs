//! Nodes: `GET /v1/nodes`, `GET /v1/node/:id`, `GET /v1/node/:id/allocations`,
//! `POST /v1/node/:id/eligibility`, `PUT /v1/node/:id/drain`, `POST /v1/node/:id/evaluate`,
//! `POST /v1/node/:id/purge`.
//!
//! Reads honour `stale`, `index`/`wait` and `prefix` like every read; a node's `SecretID` is
//! never shown. Writes call the service layer (`Node.UpdateEligibility`, `Node.UpdateDrain`,
//! `Node.Evaluate`, `Node.Deregister`) with the node's full ID.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};
use teamster_storage::model::{DrainStrategy, Node, NodeId, SchedulingEligibility};
use teamster_storage::state::{Snapshot, Table};

use super::error::ApiError;
use super::jobs::decode_body;
use super::query::QueryOptions;
use super::read::{json_read, json_write};
use super::HttpContext;
use crate::rpc::service::node::{
    NodeDeregisterRequest, NodeEvalsResponse, NodeEvaluateRequest, NodeUpdateDrainRequest,
    NodeUpdateEligibilityRequest,
};
use crate::rpc::Services;

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
        .route("/v1/node/{id}/evaluate", post(evaluate).put(evaluate))
        .route("/v1/node/{id}/purge", post(purge).put(purge))
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
    // Nomad's field selection: `resources` adds `NodeResources` and `ReservedResources`,
    // `os` an `Attributes` map with `os.name`.
    let resources = QueryOptions::opt_flag(&q, "resources")?.unwrap_or(false);
    let os = QueryOptions::opt_flag(&q, "os")?.unwrap_or(false);
    let (snap, meta) = ctx.read(&opts, &[Table::Nodes]).await?;
    let mut nodes = Vec::new();
    for n in snap.nodes_by_prefix(&opts.prefix) {
        let mut v = stub(n);
        if resources {
            let to_value = |r: Result<Value, serde_json::Error>| {
                r.map_err(|e| ApiError::internal(e.to_string()))
            };
            v["NodeResources"] = to_value(serde_json::to_value(&n.node_resources))?;
            v["ReservedResources"] = to_value(serde_json::to_value(&n.reserved_resources))?;
        }
        if os {
            let name = n.attributes.get("os.name").cloned().unwrap_or_default();
            v["Attributes"] = json!({ "os.name": name });
        }
        nodes.push(v);
    }
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
    #[serde(default)]
    meta: Option<std::collections::BTreeMap<String, String>>,
}

/// The full ID of the node `id` names (a prefix is fine when it is unique), read
/// consistently.
async fn resolve(ctx: &HttpContext, id: &str) -> Result<NodeId, ApiError> {
    let snap = ctx
        .node()?
        .consistent_snapshot()
        .await
        .map_err(super::read::node_error)?;
    Ok(find(&snap, id)?.id.clone())
}

/// A node change's answer: the evaluations it created and its index.
fn node_change(done: NodeEvalsResponse) -> Response {
    let eval_ids: Vec<String> = done.eval_ids.iter().map(|e| e.to_string()).collect();
    json_write(
        json!({
            "EvalIDs": eval_ids,
            "EvalCreateIndex": done.index,
            "NodeModifyIndex": done.index,
            "Index": done.index,
        }),
        done.index,
    )
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
    let node_id = resolve(&ctx, &id).await?;
    let done = ctx
        .endpoints()?
        .node_update_eligibility(NodeUpdateEligibilityRequest {
            node_id,
            eligibility,
        })
        .await?;
    Ok(node_change(done))
}

/// `PUT /v1/node/:id/drain` with Nomad's body `{"DrainSpec": {"Deadline": ns,
/// "IgnoreSystemJobs": b} | null, "MarkEligible": b, "Meta": {…}}`: a spec starts or updates
/// the drain (`Deadline` < 0 stops everything at once, 0 or absent means no deadline, as
/// Go's zero value does in Nomad), null cancels it; `Meta` goes to the node's
/// `LastDrain.Meta`.
async fn drain(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let b: DrainBody = decode_body(&body)?;
    let drain = b.drain_spec.map(|s| DrainStrategy {
        deadline: s.deadline.unwrap_or(0),
        ignore_system_jobs: s.ignore_system_jobs.unwrap_or(false),
        ..DrainStrategy::default()
    });
    let mark_eligible = b.mark_eligible.unwrap_or(false);
    let node_id = resolve(&ctx, &id).await?;
    let done = ctx
        .endpoints()?
        .node_update_drain(NodeUpdateDrainRequest {
            node_id,
            drain,
            mark_eligible,
            meta: b.meta,
        })
        .await?;
    Ok(node_change(done))
}

/// `POST|PUT /v1/node/:id/evaluate`: evaluate again every job with allocations on the node
/// and the system jobs in its scope (Nomad's `Node.Evaluate`); `EvalIDs` names them.
async fn evaluate(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let node_id = resolve(&ctx, &id).await?;
    let done = ctx
        .endpoints()?
        .node_evaluate(NodeEvaluateRequest { node_id })
        .await?;
    Ok(node_change(done))
}

/// `POST|PUT /v1/node/:id/purge` (the node's full ID): remove the node from the cluster (Nomad's
/// `Node.Deregister`), with evaluations for what ran on it. A client that is still running
/// registers again at its next heartbeat, as with Nomad.
async fn purge(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    // The full ID only, as Nomad takes it: a prefix never removes a node.
    let node_id = resolve(&ctx, &id).await?;
    if node_id.as_str() != id {
        return Err(ApiError::not_found(format!(
            "node {id:?} not found: purge takes a node's full ID"
        )));
    }
    let done = ctx
        .endpoints()?
        .node_deregister(NodeDeregisterRequest { node_id })
        .await?;
    Ok(node_change(done))
}
