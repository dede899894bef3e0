//! Nomad Variables, Nomad's routes and shapes: `GET /v1/vars?prefix=` (metadata of the
//! variables the token may list, `[]` for none; `namespace=*` across namespaces),
//! `GET /v1/var/:path` (the variable with its `Items`, decrypted by this server; 404
//! `variable not found`), `PUT|POST /v1/var/:path[?cas=N]` (`{"Items": {…}}` → the written
//! metadata with the caller's items, or 409 with the current one when `cas` does not
//! match), `DELETE
//! /v1/var/:path[?cas=N]` (204, or 409). Reads are blocking queries on the variables table.
//! Locks (`?lock-acquire`, `?lock-renew`, `?lock-release`) are refused: not implemented yet.

use std::collections::{BTreeMap, HashMap};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use teamster_storage::model::VariableEncrypted;
use teamster_storage::state::{Snapshot, Table};

use super::error::ApiError;
use super::jobs::decode_body;
use super::query::QueryOptions;
use super::read::{json_read, json_write};
use super::HttpContext;
use crate::acl::{Need, VarCap};
use crate::rpc::service::variables::{VariableOp, VariablesApplyRequest, VariablesApplyResponse};
use crate::rpc::Services;
use crate::server::acl::Identity;

/// The routes of this module.
pub fn routes() -> Router<HttpContext> {
    Router::new().route("/v1/vars", get(list)).route(
        "/v1/var/{*path}",
        get(read).put(write).post(write).delete(remove),
    )
}

/// How long a write waits for this server to have applied it before answering.
const READ_BACK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

fn metadata(var: &VariableEncrypted) -> Value {
    let m = &var.meta;
    json!({
        "Namespace": m.namespace,
        "Path": m.path,
        "CreateIndex": m.create_index,
        "CreateTime": m.create_time,
        "ModifyIndex": m.modify_index,
        "ModifyTime": m.modify_time,
    })
}

/// The variable as Nomad answers it: its metadata and, when given, its items.
async fn with_items(
    ctx: &HttpContext,
    snap: &Snapshot,
    var: &VariableEncrypted,
) -> Result<Value, ApiError> {
    let items = ctx
        .endpoints()?
        .keyring()
        .decrypt_items(snap, var)
        .await
        .map_err(|e| ApiError::internal(format!("decrypting variable {:?}: {e}", var.meta.path)))?;
    let mut out = metadata(var);
    out["Items"] = json!(items);
    Ok(out)
}

/// `GET /v1/vars`.
pub async fn list(
    State(ctx): State<HttpContext>,
    Extension(identity): Extension<Identity>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Variables]).await?;
    let ns = (opts.namespace != "*").then_some(opts.namespace.as_str());
    let out: Vec<Value> = snap
        .variables(ns, &opts.prefix)
        .filter(|v| {
            identity.acl.allows(&Need::Variable(
                v.meta.namespace.clone(),
                v.meta.path.clone(),
                VarCap::List,
            ))
        })
        .map(|v| metadata(v))
        .collect();
    Ok(json_read(out, meta))
}

/// `GET /v1/var/:path`.
pub async fn read(
    State(ctx): State<HttpContext>,
    Path(path): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    if path.is_empty() {
        return Err(ApiError::bad_request("missing variable path"));
    }
    let (snap, meta) = ctx.read(&opts, &[Table::Variables]).await?;
    let var = snap
        .variable(&opts.namespace, &path)
        .cloned()
        .ok_or_else(|| ApiError::not_found("variable not found"))?;
    Ok(json_read(with_items(&ctx, &snap, &var).await?, meta))
}

/// A write's body: Nomad's `Variable`. The path and namespace come from the URL; a body
/// that names others, or asks for a lock, is refused (never silently written elsewhere).
/// Server-set fields (indexes, times) are ignored, as Nomad ignores them.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct VariableBody {
    items: Option<BTreeMap<String, String>>,
    namespace: Option<String>,
    path: Option<String>,
    lock: Option<Value>,
}

impl VariableBody {
    /// 400 for a body that names another place than the URL, or a lock.
    fn check(&self, namespace: &str, path: &str) -> Result<(), ApiError> {
        if let Some(ns) = self
            .namespace
            .as_deref()
            .filter(|n| !n.is_empty() && *n != namespace)
        {
            return Err(ApiError::bad_request(format!(
                "the body's Namespace {ns:?} is not the request's {namespace:?}; give it as ?namespace="
            )));
        }
        if let Some(p) = self.path.as_deref().filter(|p| !p.is_empty() && *p != path) {
            return Err(ApiError::bad_request(format!(
                "the body's Path {p:?} is not the URL's {path:?}"
            )));
        }
        if self.lock.as_ref().is_some_and(|l| !l.is_null()) {
            return Err(ApiError::bad_request(
                "Lock: variable locks are not supported by teamster yet",
            ));
        }
        Ok(())
    }
}

/// The lock operation the query asks for, Nomad's checks first.
fn lock_operation(q: &HashMap<String, String>) -> Result<Option<&'static str>, ApiError> {
    let asked: Vec<&'static str> = ["lock-acquire", "lock-renew", "lock-release"]
        .into_iter()
        .filter(|op| q.contains_key(*op))
        .collect();
    match asked.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        _ => Err(ApiError::bad_request("multiple lock operations")),
    }
}

/// `?cas=N`.
fn cas(q: &HashMap<String, String>) -> Result<Option<u64>, ApiError> {
    match q.get("cas").filter(|c| !c.is_empty()) {
        None => Ok(None),
        Some(c) => c
            .parse::<u64>()
            .map(Some)
            .map_err(|e| ApiError::bad_request(format!("can not parse cas: {e}"))),
    }
}

/// The 409 answer: the current variable (its items only if the caller may read them), or
/// a zero-valued one at the path when there is none.
async fn conflict(
    ctx: &HttpContext,
    identity: &Identity,
    namespace: &str,
    path: &str,
    modify_index: u64,
) -> Result<Response, ApiError> {
    let node = ctx.node()?;
    let snap = node
        .state()
        .snapshot_min_index(modify_index, READ_BACK_WAIT)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let body = match snap.variable(namespace, path).cloned() {
        // Nomad answers a zero-valued variable at the path (its clients read the index).
        None => json!({
            "Namespace": namespace,
            "Path": path,
            "CreateIndex": 0,
            "CreateTime": 0,
            "ModifyIndex": 0,
            "ModifyTime": 0,
            "Items": {},
        }),
        Some(var) => {
            let readable = identity.acl.allows(&Need::Variable(
                namespace.to_string(),
                path.to_string(),
                VarCap::Read,
            ));
            if readable {
                with_items(ctx, &snap, &var).await?
            } else {
                metadata(&var)
            }
        }
    };
    let mut resp = (StatusCode::CONFLICT, Json(body)).into_response();
    resp.headers_mut()
        .insert("X-Nomad-Index", axum::http::HeaderValue::from(modify_index));
    Ok(resp)
}

async fn apply(
    ctx: &HttpContext,
    namespace: &str,
    path: &str,
    op: VariableOp,
    cas: Option<u64>,
) -> Result<VariablesApplyResponse, ApiError> {
    Ok(ctx
        .endpoints()?
        .variables_apply(VariablesApplyRequest {
            namespace: namespace.to_string(),
            path: path.to_string(),
            op,
            cas,
        })
        .await?)
}

/// `PUT|POST /v1/var/:path`.
pub async fn write(
    State(ctx): State<HttpContext>,
    Extension(identity): Extension<Identity>,
    Path(path): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    if path.is_empty() {
        return Err(ApiError::bad_request("missing variable path"));
    }
    if lock_operation(&q)?.is_some() {
        if q.get("cas").is_some_and(|c| !c.is_empty()) {
            return Err(ApiError::bad_request(
                "CAS can't be used with lock operations",
            ));
        }
        return Err(ApiError::bad_request(
            "variable locks are not supported by teamster yet",
        ));
    }
    let body: VariableBody = decode_body(&body)?;
    body.check(&opts.namespace, &path)?;
    let items = body
        .items
        .filter(|i| !i.is_empty())
        .ok_or_else(|| ApiError::bad_request("variable missing required Items object"))?;
    let cas = cas(&q)?;
    match apply(
        &ctx,
        &opts.namespace,
        &path,
        VariableOp::Set(items.clone()),
        cas,
    )
    .await?
    {
        VariablesApplyResponse::Conflict(at) => {
            conflict(&ctx, &identity, &opts.namespace, &path, at).await
        }
        VariablesApplyResponse::Applied(index) => {
            // The written metadata and the caller's own items, as Nomad answers (never what
            // another writer put there since: this token may write without reading).
            let snap = ctx
                .node()?
                .state()
                .snapshot_min_index(index, READ_BACK_WAIT)
                .await
                .map_err(|e| ApiError::internal(e.to_string()))?;
            let mut out = match snap.variable(&opts.namespace, &path) {
                Some(v) if v.meta.modify_index == index => metadata(v),
                _ => json!({
                    "Namespace": opts.namespace,
                    "Path": path,
                    "ModifyIndex": index,
                }),
            };
            out["Items"] = json!(items);
            Ok(json_write(out, index))
        }
    }
}

/// `DELETE /v1/var/:path`.
pub async fn remove(
    State(ctx): State<HttpContext>,
    Extension(identity): Extension<Identity>,
    Path(path): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    if path.is_empty() {
        return Err(ApiError::bad_request("missing variable path"));
    }
    let cas = cas(&q)?;
    match apply(&ctx, &opts.namespace, &path, VariableOp::Delete, cas).await? {
        VariablesApplyResponse::Conflict(at) => {
            conflict(&ctx, &identity, &opts.namespace, &path, at).await
        }
        VariablesApplyResponse::Applied(index) => {
            let mut resp = StatusCode::NO_CONTENT.into_response();
            resp.headers_mut()
                .insert("X-Nomad-Index", axum::http::HeaderValue::from(index));
            Ok(resp)
        }
    }
}
