//! The ACL API, Nomad's shapes: `PUT|POST /v1/acl/bootstrap` (optional
//! `{"BootstrapSecret"}`; the reset index is read from `<data_dir>/server/acl-bootstrap-reset`
//! of the server asked), `/v1/acl/policies`, `/v1/acl/policy/:name` (GET, PUT|POST, DELETE),
//! `/v1/acl/tokens`, `PUT|POST /v1/acl/token`, `/v1/acl/token/:accessor` (GET, PUT|POST,
//! DELETE) and `GET /v1/acl/token/self`.
//!
//! Writes and the token list need a management token. A client token may read itself and
//! the policies it names; the policy list shows a client token only its own policies. Token
//! lists never carry secrets. Roles, auth methods and binding rules are not implemented, so a
//! token naming `Roles` is refused by name.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use axum::routing::{get, put};
use axum::{Extension, Router};
use serde::Deserialize;
use serde_json::{json, Value};
use teamster_storage::model::{AclPolicy, AclToken};
use teamster_storage::state::Table;

use super::error::ApiError;
use super::jobs::decode_body;
use super::query::QueryOptions;
use super::read::{json_read, json_write};
use super::HttpContext;
use crate::rpc::service::acl::{
    AclBootstrapRequest, AclDeletePoliciesRequest, AclDeleteTokensRequest,
    AclUpsertPoliciesRequest, AclUpsertTokensRequest,
};
use crate::rpc::Services;
use crate::server::acl::Identity;

/// The routes of this module.
pub fn routes() -> Router<HttpContext> {
    Router::new()
        .route("/v1/acl/bootstrap", put(bootstrap).post(bootstrap))
        .route("/v1/acl/policies", get(list_policies))
        .route(
            "/v1/acl/policy/{name}",
            get(get_policy)
                .put(put_policy)
                .post(put_policy)
                .delete(delete_policy),
        )
        .route("/v1/acl/tokens", get(list_tokens))
        .route("/v1/acl/token", put(create_token).post(create_token))
        .route("/v1/acl/token/self", get(token_self))
        .route(
            "/v1/acl/token/onetime",
            put(upsert_one_time_token).post(upsert_one_time_token),
        )
        .route(
            "/v1/acl/token/onetime/exchange",
            put(exchange_one_time_token).post(exchange_one_time_token),
        )
        .route(
            "/v1/acl/token/{accessor_id}",
            get(get_token)
                .put(update_token)
                .post(update_token)
                .delete(delete_token),
        )
}

fn require_enabled(ctx: &HttpContext) -> Result<(), ApiError> {
    if ctx.agent().acl.enabled {
        Ok(())
    } else {
        Err(ApiError::bad_request("ACL support disabled"))
    }
}

fn require_management(id: &Identity) -> Result<(), ApiError> {
    if id.acl.is_management() {
        Ok(())
    } else {
        Err(ApiError::forbidden("Permission denied"))
    }
}

/// Nomad's bootstrap body.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct BootstrapBody {
    #[serde(default)]
    bootstrap_secret: String,
}

/// The reset index an operator wrote into `<data_dir>/server/acl-bootstrap-reset`, 0 when
/// there is none. A file that does not hold a number is an error.
fn reset_index(ctx: &HttpContext) -> Result<u64, ApiError> {
    let path = ctx
        .agent()
        .data_dir
        .join("server")
        .join("acl-bootstrap-reset");
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().map_err(|_| {
            ApiError::bad_request(format!(
                "{} does not hold a reset index: {:?}",
                path.display(),
                text.trim()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(ApiError::internal(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

/// `PUT|POST /v1/acl/bootstrap`.
async fn bootstrap(State(ctx): State<HttpContext>, body: Bytes) -> Result<Response, ApiError> {
    require_enabled(&ctx)?;
    let body: BootstrapBody = if body.iter().all(|b| b.is_ascii_whitespace()) {
        BootstrapBody::default()
    } else {
        decode_body(&body)?
    };
    let token = ctx
        .endpoints()?
        .acl_bootstrap(AclBootstrapRequest {
            secret_id: body.bootstrap_secret,
            reset_index: reset_index(&ctx)?,
        })
        .await?;
    let index = token.modify_index;
    Ok(json_write(render_token(&token, true), index))
}

/// A token as Nomad answers it (the secret only where asked for).
fn render_token(t: &AclToken, with_secret: bool) -> Value {
    json!({
        "AccessorID": t.accessor_id,
        "SecretID": if with_secret { t.secret_id.as_str() } else { "" },
        "Name": t.name,
        "Type": t.r#type,
        "Policies": t.policies,
        "Roles": null,
        "Global": t.global,
        "CreateTime": t.create_time,
        "ExpirationTime": t.expiration_time,
        "CreateIndex": t.create_index,
        "ModifyIndex": t.modify_index,
    })
}

fn render_policy(p: &AclPolicy, with_rules: bool) -> Value {
    let mut v = json!({
        "Name": p.name,
        "Description": p.description,
        "CreateIndex": p.create_index,
        "ModifyIndex": p.modify_index,
    });
    if with_rules {
        v["Rules"] = json!(p.rules);
    }
    v
}

/// `GET /v1/acl/policies`: a management token sees every policy, another token its own.
async fn list_policies(
    State(ctx): State<HttpContext>,
    Extension(id): Extension<Identity>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    require_enabled(&ctx)?;
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::AclPolicies]).await?;
    let own: Vec<String> = id
        .token
        .as_ref()
        .map(|t| t.policies.clone())
        .unwrap_or_else(|| vec![teamster_storage::model::ANONYMOUS_POLICY.to_string()]);
    let found: Vec<Value> = snap
        .acl_policies()
        .filter(|p| p.name.starts_with(opts.prefix.as_str()))
        .filter(|p| id.acl.is_management() || own.contains(&p.name))
        .map(|p| render_policy(p, false))
        .collect();
    Ok(json_read(found, meta))
}

/// `GET /v1/acl/policy/:name`: management, or a policy the token names.
async fn get_policy(
    State(ctx): State<HttpContext>,
    Extension(id): Extension<Identity>,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    require_enabled(&ctx)?;
    let named = id
        .token
        .as_ref()
        .is_some_and(|t| t.policies.contains(&name));
    if !id.acl.is_management() && !named {
        return Err(ApiError::forbidden("Permission denied"));
    }
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::AclPolicies]).await?;
    let p = snap
        .acl_policy(&name)
        .ok_or_else(|| ApiError::not_found("ACL policy not found"))?;
    Ok(json_read(render_policy(p, true), meta))
}

/// Nomad's policy body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct PolicyBody {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    rules: String,
    // Server-set: accepted and ignored, as Nomad ignores them.
    #[serde(default, rename = "CreateIndex")]
    _create_index: Option<u64>,
    #[serde(default, rename = "ModifyIndex")]
    _modify_index: Option<u64>,
    #[serde(default, rename = "JobACL")]
    job_acl: Option<Value>,
}

/// `PUT|POST /v1/acl/policy/:name`.
async fn put_policy(
    State(ctx): State<HttpContext>,
    Extension(id): Extension<Identity>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    require_enabled(&ctx)?;
    require_management(&id)?;
    let body: PolicyBody = decode_body(&body)?;
    if body.job_acl.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(ApiError::bad_request(
            "JobACL (policies attached to a job's workload identities) is not supported by teamster yet",
        ));
    }
    if let Some(n) = body.name.as_ref().filter(|n| !n.is_empty() && **n != name) {
        return Err(ApiError::bad_request(format!(
            "Policy name {n:?} does not match the URL's {name:?}"
        )));
    }
    let index = ctx
        .endpoints()?
        .acl_upsert_policies(AclUpsertPoliciesRequest {
            policies: vec![AclPolicy {
                name,
                description: body.description,
                rules: body.rules,
                ..AclPolicy::default()
            }],
        })
        .await?;
    Ok(json_write(Value::Null, index))
}

/// `DELETE /v1/acl/policy/:name`.
async fn delete_policy(
    State(ctx): State<HttpContext>,
    Extension(id): Extension<Identity>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    require_enabled(&ctx)?;
    require_management(&id)?;
    let index = ctx
        .endpoints()?
        .acl_delete_policies(AclDeletePoliciesRequest { names: vec![name] })
        .await?;
    Ok(json_write(Value::Null, index))
}

/// `GET /v1/acl/tokens`: every token, without secrets (management).
async fn list_tokens(
    State(ctx): State<HttpContext>,
    Extension(id): Extension<Identity>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    require_enabled(&ctx)?;
    require_management(&id)?;
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::AclTokens]).await?;
    let found: Vec<Value> = snap
        .acl_tokens()
        .filter(|t| t.accessor_id.starts_with(opts.prefix.as_str()))
        .map(|t| render_token(t, false))
        .collect();
    Ok(json_read(found, meta))
}

/// `GET /v1/acl/token/self`: the caller's own token.
async fn token_self(
    State(ctx): State<HttpContext>,
    Extension(id): Extension<Identity>,
) -> Result<Response, ApiError> {
    require_enabled(&ctx)?;
    let token = id
        .token
        .ok_or_else(|| ApiError::forbidden("ACL token not found"))?;
    let index = token.modify_index;
    let full = fresh_token(&ctx, &token.accessor_id)?.unwrap_or_else(|| (*token).clone());
    Ok(json_write(render_token(&full, true), index))
}

/// The token as this server's state holds it (secret included).
fn fresh_token(ctx: &HttpContext, accessor: &str) -> Result<Option<AclToken>, ApiError> {
    Ok(match ctx.node() {
        Ok(node) => node
            .state()
            .snapshot()
            .acl_token_by_accessor(accessor)
            .map(|t| (**t).clone()),
        Err(_) => None,
    })
}

/// `GET /v1/acl/token/:accessor`: management, or the caller's own token.
async fn get_token(
    State(ctx): State<HttpContext>,
    Extension(id): Extension<Identity>,
    Path(accessor): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    require_enabled(&ctx)?;
    let own = id.token.as_ref().is_some_and(|t| t.accessor_id == accessor);
    if !id.acl.is_management() && !own {
        return Err(ApiError::forbidden("Permission denied"));
    }
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::AclTokens]).await?;
    let t = snap
        .acl_token_by_accessor(&accessor)
        .ok_or_else(|| ApiError::not_found("ACL token not found"))?;
    Ok(json_read(render_token(t, true), meta))
}

/// Nomad's token body (server-set fields are accepted and ignored, as Nomad ignores them).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase", deny_unknown_fields)]
struct TokenBody {
    #[serde(default, rename = "AccessorID")]
    accessor_id: String,
    #[serde(default, rename = "SecretID")]
    secret_id: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    r#type: String,
    #[serde(default)]
    policies: Option<Vec<String>>,
    #[serde(default)]
    roles: Option<Vec<Value>>,
    #[serde(default)]
    global: bool,
    #[serde(default, rename = "ExpirationTTL")]
    expiration_ttl: Option<Value>,
    #[serde(default)]
    expiration_time: Option<Value>,
    // Server-set: accepted and ignored, as Nomad ignores them.
    #[serde(default, rename = "CreateTime")]
    _create_time: Option<Value>,
    #[serde(default, rename = "Hash")]
    _hash: Option<Value>,
    #[serde(default, rename = "CreateIndex")]
    _create_index: Option<u64>,
    #[serde(default, rename = "ModifyIndex")]
    _modify_index: Option<u64>,
}

/// `ExpirationTTL` as nanoseconds: an integer, or a Go duration string (`"1h"`).
fn ttl_nanos(v: &Option<Value>) -> Result<i64, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(0),
        Some(Value::Number(n)) => n.as_i64().ok_or_else(|| {
            ApiError::bad_request("ExpirationTTL must be an integer of nanoseconds")
        }),
        Some(Value::String(s)) if s.is_empty() => Ok(0),
        Some(Value::String(s)) => crate::util::go::parse_go_duration(s)
            .map(|d| d.as_nanos().min(i64::MAX as u128) as i64)
            .ok_or_else(|| ApiError::bad_request(format!("ExpirationTTL: invalid duration {s:?}"))),
        Some(_) => Err(ApiError::bad_request("ExpirationTTL must be a duration")),
    }
}

async fn upsert_token(
    ctx: &HttpContext,
    id: &Identity,
    accessor: Option<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    require_enabled(ctx)?;
    require_management(id)?;
    let body: TokenBody = decode_body(&body)?;
    if body.roles.as_ref().is_some_and(|r| !r.is_empty()) {
        return Err(ApiError::bad_request(
            "Roles are not supported by teamster: give the token its policies",
        ));
    }
    if body.expiration_time.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(ApiError::bad_request(
            "ExpirationTime is set by the server: give ExpirationTTL",
        ));
    }
    let accessor_id = match (accessor, body.accessor_id.as_str()) {
        (Some(path), "") => path,
        (Some(path), body_id) if body_id == path => path,
        (Some(path), body_id) => {
            return Err(ApiError::bad_request(format!(
                "AccessorID {body_id:?} does not match the URL's {path:?}"
            )))
        }
        (None, "") => String::new(),
        (None, _) => {
            return Err(ApiError::bad_request(
                "a new token's AccessorID is chosen by the server",
            ))
        }
    };
    if !body.secret_id.is_empty() && accessor_id.is_empty() {
        return Err(ApiError::bad_request(
            "a new token's SecretID is chosen by the server",
        ));
    }
    let ttl = ttl_nanos(&body.expiration_ttl)?;
    if ttl != 0 && !accessor_id.is_empty() {
        return Err(ApiError::bad_request(
            "ExpirationTTL can only be given to a new token",
        ));
    }
    let tokens = ctx
        .endpoints()?
        .acl_upsert_tokens(AclUpsertTokensRequest {
            tokens: vec![AclToken {
                accessor_id,
                name: body.name,
                r#type: body.r#type,
                policies: body.policies.unwrap_or_default(),
                global: body.global,
                ..AclToken::default()
            }],
            expiration_ttl_ns: ttl,
        })
        .await?;
    let token = tokens
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::internal("no token written"))?;
    let index = token.modify_index;
    Ok(json_write(render_token(&token, true), index))
}

/// `PUT|POST /v1/acl/token`: a new token.
async fn create_token(
    State(ctx): State<HttpContext>,
    Extension(id): Extension<Identity>,
    body: Bytes,
) -> Result<Response, ApiError> {
    upsert_token(&ctx, &id, None, body).await
}

/// `PUT|POST /v1/acl/token/:accessor`: change a token.
async fn update_token(
    State(ctx): State<HttpContext>,
    Extension(id): Extension<Identity>,
    Path(accessor): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    upsert_token(&ctx, &id, Some(accessor), body).await
}

/// `DELETE /v1/acl/token/:accessor`.
async fn delete_token(
    State(ctx): State<HttpContext>,
    Extension(id): Extension<Identity>,
    Path(accessor): Path<String>,
) -> Result<Response, ApiError> {
    require_enabled(&ctx)?;
    require_management(&id)?;
    let index = ctx
        .endpoints()?
        .acl_delete_tokens(AclDeleteTokensRequest {
            accessor_ids: vec![accessor],
        })
        .await?;
    Ok(json_write(Value::Null, index))
}

/// `PUT|POST /v1/acl/token/onetime`: a one-time token for the caller's own token →
/// `{"OneTimeToken": {OneTimeSecretID, AccessorID, ExpiresAt, CreateIndex, ModifyIndex},
/// "Index"}`; 403 without a token of the cluster's.
async fn upsert_one_time_token(
    State(ctx): State<HttpContext>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    require_enabled(&ctx)?;
    let secret = super::acl::request_token(&headers)
        .ok_or_else(|| ApiError::forbidden("Permission denied"))?;
    let ott = ctx
        .endpoints()?
        .acl_upsert_one_time_token(crate::rpc::service::acl::OneTimeTokenUpsertRequest {
            secret_id: secret,
        })
        .await?;
    let index = ott.modify_index;
    Ok(json_write(
        serde_json::json!({ "OneTimeToken": ott, "Index": index }),
        index,
    ))
}

/// `PUT|POST /v1/acl/token/onetime/exchange`: `{"OneTimeSecretID"}` → `{"Token": the ACL
/// token with its secret, "Index"}`, once; 403 for an unknown, used or expired secret.
async fn exchange_one_time_token(
    State(ctx): State<HttpContext>,
    body: Bytes,
) -> Result<Response, ApiError> {
    require_enabled(&ctx)?;
    #[derive(Deserialize)]
    struct Body {
        #[serde(rename = "OneTimeSecretID", default)]
        one_time_secret_id: String,
    }
    let body: Body = decode_body(&body)?;
    if body.one_time_secret_id.is_empty() {
        return Err(ApiError::forbidden("Permission denied"));
    }
    let (token, index) = ctx
        .endpoints()?
        .acl_exchange_one_time_token(crate::rpc::service::acl::OneTimeTokenExchangeRequest {
            one_time_secret_id: body.one_time_secret_id,
        })
        .await?;
    Ok(json_write(
        serde_json::json!({ "Token": render_token(&token, true), "Index": index }),
        index,
    ))
}
