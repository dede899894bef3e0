//! Nomad Variables, Nomad's routes and shapes: `GET /v1/vars?prefix=` (metadata of the
//! variables the token may list, `[]` for none; `namespace=*` across namespaces),
//! `GET /v1/var/:path` (the variable with its `Items`, decrypted by this server; 404
//! `variable not found`), `PUT|POST /v1/var/:path[?cas=N]` (`{"Items": {…}}` → the written
//! metadata with the caller's items, or 409 with the current one when `cas` does not
//! match), `DELETE
//! /v1/var/:path[?cas=N]` (204, or 409). Reads are blocking queries on the variables table.
//!
//! Locks (Nomad 1.7): `PUT /v1/var/:path?lock-acquire` (`{"Items"?, "Lock"?: {"ID"?, "TTL",
//! "LockDelay"}}` → the variable with its `Lock`, the caller's ID (at most 128 bytes) or a
//! new one; no items keep the
//! variable's; 409 while it is locked), `?lock-renew` (`{"Lock": {"ID"}}` → its metadata; 409 once it lapsed),
//! `?lock-release` (`{"Lock": {"ID"}}`). A locked variable is written only by its holder
//! (the body's `Lock.ID`) and deleted by nobody; only the holder and management tokens see
//! a lock's ID.

use std::collections::{BTreeMap, HashMap};

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use teamster_storage::model::{VariableEncrypted, VariableLock};
use teamster_storage::state::{Snapshot, Table};

use super::error::ApiError;
use super::jobs::decode_body;
use super::query::QueryOptions;
use super::read::{json_read, json_write};
use super::HttpContext;
use crate::acl::{Need, VarCap};
use crate::rpc::service::variables::{
    VariableOp, VariablesApplyRequest, VariablesApplyResponse, VariablesRenewLockRequest,
    VariablesRenewLockResponse,
};
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
    meta_json(&var.meta)
}

/// A variable's metadata as Nomad's API shows it (never its lock: see [`with_lock`]).
pub(super) fn meta_json(m: &teamster_storage::model::VariableMetadata) -> Value {
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
        .map(|v| with_lock(metadata(v), v, &identity, None))
        .collect();
    Ok(json_read(out, meta))
}

/// `GET /v1/var/:path`.
pub async fn read(
    State(ctx): State<HttpContext>,
    Extension(identity): Extension<Identity>,
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
    let out = with_items(&ctx, &snap, &var).await?;
    Ok(json_read(with_lock(out, &var, &identity, None), meta))
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

/// A body's `Lock`: `ID`, and `TTL`/`LockDelay` as Go durations (`"15s"`) or nanoseconds.
fn body_lock(v: &Value) -> Result<VariableLock, ApiError> {
    let duration = |field: &str| -> Result<u64, ApiError> {
        match v.get(field) {
            None | Some(Value::Null) => Ok(0),
            Some(Value::String(s)) if s.is_empty() => Ok(0),
            Some(Value::String(s)) => crate::util::go::parse_go_duration(s)
                .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
                .ok_or_else(|| {
                    ApiError::bad_request(format!("Lock.{field}: invalid duration {s:?}"))
                }),
            Some(Value::Number(n)) => n.as_u64().ok_or_else(|| {
                ApiError::bad_request(format!("Lock.{field}: must not be negative"))
            }),
            Some(other) => Err(ApiError::bad_request(format!(
                "Lock.{field}: expected a duration, got {other}"
            ))),
        }
    };
    let id = match v.get("ID") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Lock.ID: expected a string, got {other}"
            )))
        }
    };
    Ok(VariableLock {
        id,
        ttl: duration("TTL")?,
        lock_delay: duration("LockDelay")?,
    })
}

/// A lock as Nomad's API shows it (durations as Go prints them).
fn lock_json(lock: &VariableLock) -> Value {
    let d = |ns: u64| {
        if ns == 0 {
            String::new()
        } else {
            crate::util::go::go_duration(ns)
        }
    };
    json!({ "ID": lock.id, "TTL": d(lock.ttl), "LockDelay": d(lock.lock_delay) })
}

/// `out` (a variable's JSON) with its `Lock` when `var` holds one and the caller may see
/// it: a management token, or the holder (`lock_id`).
fn with_lock(
    mut out: Value,
    var: &VariableEncrypted,
    identity: &Identity,
    lock_id: Option<&str>,
) -> Value {
    if let Some(lock) = &var.meta.lock {
        if identity.acl.is_management() || lock_id == Some(lock.id.as_str()) {
            out["Lock"] = lock_json(lock);
        }
    }
    out
}

impl VariableBody {
    /// The body's lock ID, if it names one.
    fn lock_id(&self) -> Result<Option<String>, ApiError> {
        match self.lock.as_ref().filter(|l| !l.is_null()) {
            None => Ok(None),
            Some(l) => Ok(Some(body_lock(l)?.id).filter(|id| !id.is_empty())),
        }
    }

    /// 400 for a body that names another place than the URL.
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

/// This server's state once it has applied `index` (a write it just made, or the one a
/// conflict names).
async fn read_back(ctx: &HttpContext, index: u64) -> Result<Snapshot, ApiError> {
    ctx.node()?
        .state()
        .snapshot_min_index(index, READ_BACK_WAIT)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))
}

/// `var` with its items if `identity` may read them, else its metadata alone.
async fn as_readable(
    ctx: &HttpContext,
    identity: &Identity,
    snap: &Snapshot,
    var: &VariableEncrypted,
) -> Result<Value, ApiError> {
    let readable = identity.acl.allows(&Need::Variable(
        var.meta.namespace.clone(),
        var.meta.path.clone(),
        VarCap::Read,
    ));
    if readable {
        with_items(ctx, snap, var).await
    } else {
        Ok(metadata(var))
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
    let snap = read_back(ctx, modify_index).await?;
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
        Some(var) => as_readable(ctx, identity, &snap, &var).await?,
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
    lock_id: Option<String>,
) -> Result<VariablesApplyResponse, ApiError> {
    Ok(ctx
        .endpoints()?
        .variables_apply(VariablesApplyRequest {
            namespace: namespace.to_string(),
            path: path.to_string(),
            op,
            cas,
            lock_id,
        })
        .await?)
}

/// A lock's refusal: 404 when there is no such variable, else 409, with Nomad's text.
fn lock_refused(reason: String, missing: bool) -> ApiError {
    if missing {
        ApiError::not_found(reason)
    } else {
        ApiError {
            status: StatusCode::CONFLICT,
            message: reason,
        }
    }
}

/// The variable at `index` as a lock operation answers it: metadata, items (if the caller
/// may read them) and the lock (to its holder and management).
async fn lock_answer(
    ctx: &HttpContext,
    identity: &Identity,
    namespace: &str,
    path: &str,
    index: u64,
    lock_id: Option<&str>,
) -> Result<Response, ApiError> {
    let snap = read_back(ctx, index).await?;
    let var = snap
        .variable(namespace, path)
        .cloned()
        .ok_or_else(|| ApiError::not_found("variable not found"))?;
    let out = as_readable(ctx, identity, &snap, &var).await?;
    Ok(json_write(with_lock(out, &var, identity, lock_id), index))
}

/// `PUT|POST /v1/var/:path?lock-acquire|lock-renew|lock-release`.
async fn lock_op(
    ctx: &HttpContext,
    identity: &Identity,
    namespace: &str,
    path: &str,
    op: &str,
    body: VariableBody,
) -> Result<Response, ApiError> {
    let lock = match body.lock.as_ref().filter(|l| !l.is_null()) {
        Some(l) => body_lock(l)?,
        None => VariableLock::default(),
    };
    match op {
        "lock-acquire" => {
            // The caller's lock ID when it gives one (as Nomad), else a new one; items only
            // when some are given: none keep the variable's.
            let mut lock = lock;
            if lock.id.is_empty() {
                lock.id = crate::util::new_uuid(&mut rand::thread_rng());
            }
            let id = lock.id.clone();
            let items = body.items.filter(|i| !i.is_empty());
            match apply(
                ctx,
                namespace,
                path,
                VariableOp::LockAcquire { items, lock },
                None,
                None,
            )
            .await?
            {
                VariablesApplyResponse::Applied(index) => {
                    lock_answer(ctx, identity, namespace, path, index, Some(&id)).await
                }
                VariablesApplyResponse::LockRefused { reason, missing } => {
                    Err(lock_refused(reason, missing))
                }
                VariablesApplyResponse::Conflict(at) => {
                    conflict(ctx, identity, namespace, path, at).await
                }
            }
        }
        "lock-release" => {
            if lock.id.is_empty() {
                return Err(ApiError::bad_request("missing lock information"));
            }
            if body.items.is_some() {
                return Err(ApiError::bad_request(
                    "lock release operation doesn't take variable items",
                ));
            }
            match apply(
                ctx,
                namespace,
                path,
                VariableOp::LockRelease,
                None,
                Some(lock.id),
            )
            .await?
            {
                VariablesApplyResponse::Applied(index) => {
                    lock_answer(ctx, identity, namespace, path, index, None).await
                }
                VariablesApplyResponse::LockRefused { reason, missing } => {
                    Err(lock_refused(reason, missing))
                }
                VariablesApplyResponse::Conflict(at) => {
                    conflict(ctx, identity, namespace, path, at).await
                }
            }
        }
        _ => {
            if lock.id.is_empty() {
                return Err(ApiError::bad_request("missing lock ID"));
            }
            let answer = ctx
                .endpoints()?
                .variables_renew_lock(VariablesRenewLockRequest {
                    namespace: namespace.to_string(),
                    path: path.to_string(),
                    lock_id: lock.id,
                })
                .await?;
            match answer {
                VariablesRenewLockResponse::Renewed(meta) => {
                    let var = VariableEncrypted {
                        meta,
                        ..VariableEncrypted::default()
                    };
                    let out = metadata(&var);
                    let id = var.meta.lock.as_ref().map(|l| l.id.clone());
                    Ok(Json(with_lock(out, &var, identity, id.as_deref())).into_response())
                }
                VariablesRenewLockResponse::Refused { reason, missing } => {
                    Err(lock_refused(reason, missing))
                }
            }
        }
    }
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
    let lock_op_asked = lock_operation(&q)?;
    if lock_op_asked.is_some() && q.contains_key("cas") {
        return Err(ApiError::bad_request(
            "CAS can't be used with lock operations",
        ));
    }
    let body: VariableBody = decode_body(&body)?;
    body.check(&opts.namespace, &path)?;
    if let Some(op) = lock_op_asked {
        return lock_op(&ctx, &identity, &opts.namespace, &path, op, body).await;
    }
    // A plain write names at most the holder's lock ID, never a new lock.
    if let Some(l) = body.lock.as_ref().filter(|l| !l.is_null()) {
        let lock = body_lock(l)?;
        if lock.ttl != 0 || lock.lock_delay != 0 {
            return Err(ApiError::bad_request(
                "variable should not contain lock definition",
            ));
        }
    }
    let lock_id = body.lock_id()?;
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
        lock_id.clone(),
    )
    .await?
    {
        VariablesApplyResponse::Conflict(at) => {
            conflict(&ctx, &identity, &opts.namespace, &path, at).await
        }
        VariablesApplyResponse::LockRefused { reason, missing } => {
            Err(lock_refused(reason, missing))
        }
        VariablesApplyResponse::Applied(index) => {
            // The written metadata and the caller's own items, as Nomad answers (never what
            // another writer put there since: this token may write without reading).
            let snap = read_back(&ctx, index).await?;
            let mut out = match snap.variable(&opts.namespace, &path) {
                Some(v) if v.meta.modify_index == index => {
                    with_lock(metadata(v), v, &identity, lock_id.as_deref())
                }
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
    match apply(&ctx, &opts.namespace, &path, VariableOp::Delete, cas, None).await? {
        VariablesApplyResponse::Conflict(at) => {
            conflict(&ctx, &identity, &opts.namespace, &path, at).await
        }
        VariablesApplyResponse::LockRefused { reason, missing } => {
            Err(lock_refused(reason, missing))
        }
        VariablesApplyResponse::Applied(index) => {
            let mut resp = StatusCode::NO_CONTENT.into_response();
            resp.headers_mut()
                .insert("X-Nomad-Index", axum::http::HeaderValue::from(index));
            Ok(resp)
        }
    }
}
