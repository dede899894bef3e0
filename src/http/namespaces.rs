//! Namespaces: `GET /v1/namespaces` (`?prefix=`), `GET /v1/namespace/:name` (404
//! "namespace not found"), `PUT|POST /v1/namespace` and `/v1/namespace/:name` (Nomad's
//! `Namespace` body: `Name`, `Description`, `Meta`; `Quota`, `Capabilities` and
//! `NodePoolConfiguration` are refused by name, as teamster does not act on them), `DELETE
//! /v1/namespace/:name` (refused for `default` and for a namespace that still holds jobs).

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use serde_json::{json, Value};
use teamster_storage::model::NamespaceSpec;
use teamster_storage::state::Table;

use super::error::ApiError;
use super::jobs::decode_body;
use super::query::QueryOptions;
use super::read::{json_read, json_write};
use super::HttpContext;
use crate::rpc::service::namespace::{NamespaceDeleteRequest, NamespaceUpsertRequest};
use crate::rpc::Services;

/// The routes of this module.
pub fn routes() -> Router<HttpContext> {
    Router::new()
        .route("/v1/namespaces", get(list))
        .route("/v1/namespace", axum::routing::put(apply).post(apply))
        .route(
            "/v1/namespace/{name}",
            get(get_one)
                .put(apply_named)
                .post(apply_named)
                .delete(delete),
        )
}

/// Nomad's `Namespace` as a request carries it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Body {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    meta: Option<std::collections::BTreeMap<String, String>>,
    #[serde(default)]
    quota: Option<String>,
    #[serde(default)]
    capabilities: Option<Value>,
    #[serde(default)]
    node_pool_configuration: Option<Value>,
}

/// `GET /v1/namespaces`: every namespace whose name starts with `prefix`, by name.
pub async fn list(
    State(ctx): State<HttpContext>,
    identity: Option<axum::Extension<crate::server::acl::Identity>>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Namespaces]).await?;
    let found: Vec<Value> = snap
        .namespaces()
        .iter()
        .filter(|n| n.name.starts_with(opts.prefix.as_str()))
        // With ACLs on, only the namespaces the token can see.
        .filter(|n| {
            identity
                .as_ref()
                .is_none_or(|id| id.acl.namespace_visible(&n.name))
        })
        .map(|n| render(n))
        .collect();
    Ok(json_read(found, meta))
}

/// `GET /v1/namespace/:name`.
pub async fn get_one(
    State(ctx): State<HttpContext>,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Namespaces]).await?;
    let ns = snap
        .namespace(&name)
        .ok_or_else(|| ApiError::not_found("namespace not found"))?;
    Ok(json_read(render(&ns), meta))
}

/// A namespace as Nomad answers it.
fn render(ns: &NamespaceSpec) -> Value {
    json!({
        "Name": ns.name,
        "Description": ns.description,
        "Quota": "",
        "Meta": ns.meta,
        "Capabilities": null,
        "NodePoolConfiguration": null,
        "CreateIndex": ns.create_index,
        "ModifyIndex": ns.modify_index,
    })
}

/// `PUT|POST /v1/namespace`: the body names the namespace.
pub async fn apply(State(ctx): State<HttpContext>, body: Bytes) -> Result<Response, ApiError> {
    upsert(ctx, None, body).await
}

/// `PUT|POST /v1/namespace/:name`: the body's `Name`, if any, must be the path's.
pub async fn apply_named(
    State(ctx): State<HttpContext>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    upsert(ctx, Some(name), body).await
}

async fn upsert(ctx: HttpContext, path: Option<String>, body: Bytes) -> Result<Response, ApiError> {
    let endpoints = ctx.endpoints()?;
    let body: Body = decode_body(&body)?;
    let mut refused = Vec::new();
    if body.quota.as_deref().is_some_and(|q| !q.is_empty()) {
        refused.push("Quota (resource quotas are Nomad Enterprise's)");
    }
    if body.capabilities.as_ref().is_some_and(|c| !c.is_null()) {
        refused.push("Capabilities (driver restrictions are not acted on)");
    }
    if body
        .node_pool_configuration
        .as_ref()
        .is_some_and(|c| !c.is_null())
    {
        refused.push("NodePoolConfiguration (not acted on)");
    }
    if !refused.is_empty() {
        return Err(ApiError::bad_request(format!(
            "teamster does not support these namespace fields yet; remove them: {}",
            refused.join(", ")
        )));
    }
    let name = match (path, body.name.filter(|n| !n.is_empty())) {
        (Some(p), Some(b)) if p != b => {
            return Err(ApiError::bad_request(format!(
                "Namespace name {b:?} does not match the path's {p:?}"
            )))
        }
        (Some(p), _) => p,
        (None, Some(b)) => b,
        (None, None) => return Err(ApiError::bad_request("Namespace name must be given")),
    };
    let ns = NamespaceSpec {
        name,
        description: body.description.unwrap_or_default(),
        meta: body.meta.unwrap_or_default(),
        ..NamespaceSpec::default()
    };
    let index = endpoints
        .namespace_upsert(NamespaceUpsertRequest {
            namespaces: vec![ns],
        })
        .await?;
    Ok(json_write(json!({ "Index": index }), index))
}

/// `DELETE /v1/namespace/:name`.
pub async fn delete(
    State(ctx): State<HttpContext>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let endpoints = ctx.endpoints()?;
    let index = endpoints
        .namespace_delete(NamespaceDeleteRequest { names: vec![name] })
        .await?;
    Ok(json_write(json!({ "Index": index }), index))
}
