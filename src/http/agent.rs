//! `/v1/agent/self`, `/v1/agent/members`, `/v1/agent/join`, `/v1/agent/force-leave`,
//! `/v1/agent/health`, `/v1/regions` and `/v1/metrics`; `/v1/system/gc` and
//! `/v1/system/reconcile/summaries`.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::error::ApiError;
use super::HttpContext;

/// 501 "Invalid method": a server route on a client-only agent (Nomad's answer for join
/// and force-leave there).
fn server_only_501() -> ApiError {
    ApiError {
        status: StatusCode::NOT_IMPLEMENTED,
        message: "Invalid method".into(),
    }
}

/// `PUT|POST /v1/agent/join?address=…[&address=…]`: `{"num_joined", "error"}` (see
/// [`crate::server::endpoints::operator::agent_join`]); servers only.
pub async fn join(
    State(ctx): State<HttpContext>,
    Query(q): Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    let endpoints = ctx.endpoints().map_err(|_| server_only_501())?;
    let addrs: Vec<String> = q
        .into_iter()
        .filter(|(k, _)| k == "address")
        .map(|(_, v)| v)
        .filter(|v| !v.trim().is_empty())
        .collect();
    if addrs.is_empty() {
        return Err(ApiError::bad_request("missing address to join"));
    }
    if addrs.len() > 64 {
        return Err(ApiError::bad_request("at most 64 addresses per join"));
    }
    let (joined, errors) = crate::server::endpoints::operator::agent_join(endpoints, &addrs).await;
    Ok(Json(
        json!({ "num_joined": joined, "error": errors.join("; ") }),
    ))
}

/// `PUT|POST /v1/agent/force-leave?node=NAME[&prune=true]`: a server that does not
/// answer leaves the raft configuration; servers only.
pub async fn force_leave(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<StatusCode, ApiError> {
    let endpoints = ctx.endpoints().map_err(|_| server_only_501())?;
    let name = q
        .get("node")
        .filter(|n| !n.trim().is_empty())
        .ok_or_else(|| ApiError::bad_request("missing node to force leave"))?;
    if let Some(p) = q.get("prune") {
        if !p.is_empty() && p.parse::<bool>().is_err() {
            return Err(ApiError::bad_request("invalid prune value"));
        }
    }
    let removed = crate::server::endpoints::operator::force_leave(endpoints, name).await?;
    if removed {
        tracing::info!(server = %name, "force-leave: removed from the raft configuration");
    }
    Ok(StatusCode::OK)
}

/// The agent's configuration, member entry and stats (Nomad's lower-case top level).
pub async fn agent_self(State(ctx): State<HttpContext>) -> Result<Json<Value>, ApiError> {
    let config = ctx.agent().config.clone();
    let mut stats = serde_json::Map::new();
    let member = match ctx.server() {
        Ok(s) => {
            let node = &s.node;
            let m = node.raft().metrics().borrow().clone();
            let leader = node.leader();
            stats.insert(
                "raft".into(),
                json!({
                    "server_id": node.id().to_string(),
                    "state": format!("{:?}", m.state),
                    "term": m.current_term.to_string(),
                    "last_log_index": m.last_log_index.unwrap_or(0).to_string(),
                    "applied_index": m.last_applied.map_or(0, |l| l.index).to_string(),
                    "snapshot_index": m.snapshot.map_or(0, |l| l.index).to_string(),
                    "purged_index": m.purged.map_or(0, |l| l.index).to_string(),
                    "leader_addr": leader.map(|(_, a)| a.rpc_addr).unwrap_or_default(),
                    "num_peers": node.membership().servers.len().to_string(),
                    "log_appended_entries": node.log_stats().appended_entries().to_string(),
                    "log_appended_bytes": node.log_stats().appended_bytes().to_string(),
                }),
            );
            stats.insert(
                "nomad".into(),
                json!({
                    "server": "true",
                    "leader": s.leadership.is_established().to_string(),
                    "known_regions": "1",
                }),
            );
            let addr = node.addr();
            let (ip, port) = split_host_port(&addr.rpc_addr);
            json!({
                "Name": format!("{}.global", addr.name),
                "Addr": ip,
                "Port": port,
                "Status": "alive",
                "Tags": {
                    "role": "teamster",
                    "region": "global",
                    "dc": ctx.agent().datacenter,
                    "id": node.id().to_string(),
                    "rpc_addr": addr.rpc_addr,
                    "http_addr": addr.http_addr,
                }
            })
        }
        Err(_) => Value::Null,
    };
    if let Some(client) = ctx.client() {
        stats.insert(
            "client".into(),
            json!({
                "node_id": client.node_id(),
                "num_allocations": client.num_allocs().to_string(),
            }),
        );
    }
    Ok(Json(
        json!({ "config": config, "member": member, "stats": stats }),
    ))
}

/// How long `/v1/agent/members` waits for each server to answer a ping.
const MEMBER_PING_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// `GET /v1/agent/servers`: the RPC addresses of the servers this agent knows: on an agent
/// that runs a client, the servers the client calls (as configured in `client.servers`,
/// grown by what servers name, or as last set by `PUT`), as Nomad; on a server-only agent,
/// the raft members.
pub async fn servers(State(ctx): State<HttpContext>) -> Json<Vec<String>> {
    if let Some(client) = ctx.client() {
        return Json(client.servers());
    }
    if let Ok(node) = ctx.node() {
        return Json(
            node.membership()
                .servers
                .into_iter()
                .map(|(_, addr, _)| addr.rpc_addr)
                .collect(),
        );
    }
    let configured = ctx.agent().config["client"]["servers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    Json(configured)
}

/// `PUT|POST /v1/agent/servers?address=host:port&address=…`: replace the servers this
/// agent's client calls (Nomad's `SetServers`; python-nomad's `agent.update_servers`); the
/// servers its later heartbeats name are learned after them, as before. 400
/// when no address is given, one is not `host:port`, or the agent runs no client.
pub async fn update_servers(
    State(ctx): State<HttpContext>,
    Query(params): Query<Vec<(String, String)>>,
) -> Result<StatusCode, ApiError> {
    let Some(client) = ctx.client() else {
        return Err(ApiError::bad_request(
            "Client only endpoint: this agent runs no client",
        ));
    };
    let addrs: Vec<String> = params
        .into_iter()
        .filter(|(k, _)| k == "address")
        .map(|(_, v)| v)
        .collect();
    client
        .set_servers(addrs.clone())
        .map_err(ApiError::bad_request)?;
    tracing::info!(servers = ?addrs, "the client's servers were replaced");
    Ok(StatusCode::OK)
}

/// `/v1/agent/members`: the servers of the raft configuration, each pinged over RPC
/// (`alive` when it answered with its own id, `failed` otherwise), in Nomad's shape.
pub async fn members(State(ctx): State<HttpContext>) -> Result<Json<Value>, ApiError> {
    let node = ctx.node()?.clone();
    let servers = node.membership().servers;
    let pings = servers.iter().map(|(id, addr, _)| {
        let node = node.clone();
        let (id, rpc_addr) = (*id, addr.rpc_addr.clone());
        async move {
            if id == node.id() {
                return true;
            }
            matches!(
                node.pool().ping_addr(&rpc_addr, MEMBER_PING_TIMEOUT).await,
                Ok(answered) if answered == id
            )
        }
    });
    let alive = futures::future::join_all(pings).await;
    let leader = node.leader().map(|(id, _)| id);
    let dc = ctx.agent().datacenter.clone();
    let members: Vec<Value> = servers
        .iter()
        .zip(alive)
        .map(|((id, addr, voter), alive)| {
            let (ip, port) = split_host_port(&addr.rpc_addr);
            json!({
                "Name": format!("{}.global", addr.name),
                "Addr": ip,
                "Port": port,
                "Status": if alive { "alive" } else { "failed" },
                "Tags": {
                    "role": "teamster",
                    "region": "global",
                    "dc": dc,
                    "id": id.to_string(),
                    "rpc_addr": addr.rpc_addr,
                    "http_addr": addr.http_addr,
                    "voter": voter.to_string(),
                    "leader": (leader == Some(*id)).to_string(),
                },
                "ProtocolMin": 1, "ProtocolMax": 5, "ProtocolCur": 2,
                "DelegateMin": 2, "DelegateMax": 5, "DelegateCur": 4,
            })
        })
        .collect();
    Ok(Json(json!({
        "ServerName": format!("{}.global", node.addr().name),
        "ServerRegion": "global",
        "ServerDC": dc,
        "Members": members,
    })))
}

/// `"10.0.0.1:4647"` → `("10.0.0.1", 4647)`; an unparsable port is 0.
fn split_host_port(addr: &str) -> (String, u16) {
    addr.rsplit_once(':')
        .map(|(i, p)| (i.to_string(), p.parse::<u16>().unwrap_or(0)))
        .unwrap_or_default()
}

/// Health: 200 when every role of this agent is fine, 500 otherwise (a server is fine when
/// it knows a leader).
pub async fn health(State(ctx): State<HttpContext>) -> Response {
    let mut body = serde_json::Map::new();
    let mut ok = true;
    if let Ok(s) = ctx.server() {
        let (server_ok, message) = match s.node.leader() {
            Some(_) => (true, "ok".to_string()),
            None => (false, "No cluster leader".to_string()),
        };
        ok &= server_ok;
        body.insert(
            "server".into(),
            json!({ "ok": server_ok, "message": message }),
        );
    }
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    (status, Json(Value::Object(body))).into_response()
}

/// The regions: only "global".
pub async fn regions() -> Json<Vec<&'static str>> {
    Json(vec!["global"])
}

/// The agent's metrics: JSON by default, as Nomad ([`super::metrics_json`]), Prometheus text
/// with `?format=prometheus`.
pub async fn metrics(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let prometheus = match q.get("format").map(String::as_str) {
        Some("prometheus") => true,
        None | Some("") | Some("json") => false,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "format {other:?}: use prometheus, or leave it out for JSON"
            )))
        }
    };
    let handle = ctx
        .inner
        .metrics
        .as_ref()
        .ok_or_else(|| ApiError::internal("metrics are not enabled"))?;
    let mut text = handle.render();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&super::metrics_nomad::render(&ctx).await);
    if prometheus {
        return Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response());
    }
    let now = teamster_storage::model::Timestamp::from_unix_nanos(ctx.clock().now_unix_nanos());
    let stamp = serde_json::to_value(now)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    Ok(Json(super::metrics_json::from_prometheus(&text, &stamp)).into_response())
}

/// `PUT /v1/system/gc`: collect every terminal evaluation and every stopped job whose
/// allocations are all terminal, whatever their age; answers once the `force-gc` evaluation
/// is written (the `_core` scheduler then does the work), as Nomad does.
pub async fn system_gc(State(ctx): State<HttpContext>) -> Result<Response, ApiError> {
    use crate::rpc::Services;
    let done = ctx
        .endpoints()?
        .system_gc(crate::rpc::service::operator::SystemGcRequest)
        .await?;
    Ok(super::read::json_write(
        json!({ "EvalID": done.eval_id, "Index": done.index }),
        done.index,
    ))
}

/// `PUT /v1/system/reconcile/summaries`: every job's summary recomputed from its allocations
/// through raft (`System.ReconcileJobSummaries`); answers 200 with no body once committed,
/// as Nomad does.
pub async fn reconcile_summaries(State(ctx): State<HttpContext>) -> Result<Response, ApiError> {
    use crate::rpc::Services;
    let index = ctx
        .endpoints()?
        .system_reconcile_summaries(crate::rpc::service::operator::ReconcileSummariesRequest)
        .await?;
    let mut resp = StatusCode::OK.into_response();
    resp.headers_mut()
        .insert("X-Nomad-Index", axum::http::HeaderValue::from(index));
    Ok(resp)
}
