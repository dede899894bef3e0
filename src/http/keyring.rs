//! The root keyring's routes, Nomad's shapes: `GET /v1/operator/keyring/keys` (the keys'
//! metadata), `PUT|POST /v1/operator/keyring/rotate[?publish_time=<unix ns>]` (`{"Key",
//! "Index"}`), `DELETE /v1/operator/keyring/key/:id` (`{"Index"}`); and the public
//! `GET /.well-known/jwks.json` (the keys that verify workload identities) and
//! `GET /.well-known/openid-configuration` (only with `server.oidc_issuer` set).

use std::collections::HashMap;

use axum::extract::{Path, Query, State};
use axum::http::header::CACHE_CONTROL;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde_json::json;
use teamster_storage::model::RootKeyMeta;
use teamster_storage::state::Table;

use super::error::ApiError;
use super::query::QueryOptions;
use super::read::{json_read, json_write, ReadMeta};
use super::HttpContext;
use crate::rpc::service::operator::{
    KeyringDeleteRequest, KeyringPublicKeys, KeyringRotateRequest,
};
use crate::rpc::Services;

/// The routes of this module.
pub fn routes() -> Router<HttpContext> {
    Router::new()
        .route("/v1/operator/keyring/keys", get(list))
        .route("/v1/operator/keyring/rotate", post(rotate).put(rotate))
        .route("/v1/operator/keyring/key/{id}", delete(remove))
        .route("/.well-known/jwks.json", get(jwks))
        .route("/.well-known/openid-configuration", get(oidc_discovery))
}

/// The shortest `max-age` the JWKS is cached for (Nomad's).
const JWKS_MIN_MAX_AGE_SECS: i64 = 15 * 60;

/// `GET /v1/operator/keyring/keys`.
pub async fn list(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::RootKeys]).await?;
    let keys: Vec<RootKeyMeta> = snap.root_keys().map(|k| k.meta.clone()).collect();
    Ok(json_read(keys, meta))
}

/// `PUT|POST /v1/operator/keyring/rotate`.
pub async fn rotate(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    if let Some(algo) = q.get("algo").filter(|a| !a.is_empty()) {
        if algo != teamster_storage::model::ROOT_KEY_ALGORITHM {
            return Err(ApiError::bad_request(format!(
                "unsupported algorithm {algo:?}: only aes256-gcm"
            )));
        }
    }
    // `?full` (`full=true`): every variable re-encrypted under the new key, in the
    // background.
    let full = q
        .get("full")
        .is_some_and(|v| v.is_empty() || v.parse::<bool>().unwrap_or(false));
    let publish_time = match q.get("publish_time").filter(|v| !v.is_empty()) {
        None => None,
        Some(v) => Some(
            v.parse::<i64>()
                .map_err(|e| ApiError::bad_request(format!("invalid publish_time: {e}")))?,
        ),
    };
    let meta = ctx
        .endpoints()?
        .keyring_rotate(KeyringRotateRequest { publish_time, full })
        .await?;
    let index = meta.modify_index;
    Ok(json_write(json!({ "Key": meta, "Index": index }), index))
}

/// `DELETE /v1/operator/keyring/key/:id`.
pub async fn remove(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    match q.get("force").map(|f| f.parse::<bool>()) {
        None | Some(Ok(false)) => {}
        // Nomad's force removes a key that still encrypts variables; teamster never does
        // (the variables would be lost), so the flag is refused rather than ignored.
        Some(Ok(true)) => {
            return Err(ApiError::bad_request(
                "force is not supported: a root key still in use by variables is never removed",
            ))
        }
        Some(Err(_)) => {
            return Err(ApiError {
                status: axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                ..ApiError::bad_request("invalid force parameter")
            })
        }
    }
    let index = ctx
        .endpoints()?
        .keyring_delete(KeyringDeleteRequest { key_id: id })
        .await?;
    Ok(json_write(json!({ "Index": index }), index))
}

/// The public keys, when the set was last changed (its index) and the settings that shape
/// the answers: from this server's state, or on a client-only agent from the servers.
async fn public_keys(
    ctx: &HttpContext,
    opts: &QueryOptions,
) -> Result<(KeyringPublicKeys, Option<ReadMeta>), ApiError> {
    if let Ok(endpoints) = ctx.endpoints() {
        let (snap, meta) = ctx.read(opts, &[Table::RootKeys]).await?;
        let keys = crate::server::endpoints::keyring::public_keys(endpoints, &snap);
        return Ok((keys, Some(meta)));
    }
    let client = ctx
        .client()
        .ok_or_else(|| ApiError::internal("the agent is starting"))?;
    Ok((client.public_keys().await?, None))
}

/// `GET /.well-known/jwks.json`: cached for half the time left until the newest key's
/// rotation, at least 15 minutes. A client-only agent asks the servers.
pub async fn jwks(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (keys, meta) = public_keys(&ctx, &opts).await?;
    let set = crate::keyring::jwks(
        keys.keys
            .iter()
            .map(|k| (k.key_id.as_str(), k.public_key.as_slice())),
    );
    let mut response = match meta {
        Some(meta) => json_read(set, meta),
        None => json_write(set, keys.index),
    };
    if let Some(newest) = keys.keys.iter().map(|k| k.create_time).max() {
        let threshold = i64::try_from(keys.rotation_threshold_secs).unwrap_or(i64::MAX);
        let rotation = (newest / 1_000_000_000).saturating_add(threshold);
        let now = ctx.clock().now_unix_nanos() / 1_000_000_000;
        let max_age = ((rotation - now) / 2).max(JWKS_MIN_MAX_AGE_SECS);
        if let Ok(value) = format!("max-age={max_age}").parse() {
            response.headers_mut().insert(CACHE_CONTROL, value);
        }
    }
    Ok(response)
}

/// `GET /.well-known/openid-configuration` (a client-only agent asks the servers for the
/// issuer).
pub async fn oidc_discovery(State(ctx): State<HttpContext>) -> Result<Response, ApiError> {
    let issuer = match ctx.endpoints() {
        Ok(endpoints) => endpoints.keyring().settings().oidc_issuer.clone(),
        Err(_) => {
            ctx.client()
                .ok_or_else(|| ApiError::internal("the agent is starting"))?
                .public_keys()
                .await?
                .oidc_issuer
        }
    };
    if issuer.is_empty() {
        return Err(ApiError::not_found("OIDC Discovery endpoint disabled"));
    }
    let base = issuer.trim_end_matches('/');
    Ok(Json(json!({
        "issuer": issuer,
        "jwks_uri": format!("{base}/.well-known/jwks.json"),
        "id_token_signing_alg_values_supported": ["EdDSA"],
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
    }))
    .into_response())
}
