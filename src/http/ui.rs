//! The web UI at `/ui/`: a single-page application written by hand in plain HTML, CSS and
//! JavaScript (`src/http/ui/`), embedded in the binary and served by every agent.
//!
//! - `/ui` redirects to `/ui/`; `/ui/assets/<file>` serves the embedded files with their
//!   content type, an `ETag` and `Cache-Control: no-cache` (the browser revalidates and gets
//!   a 304 while the binary is the same); every other `/ui/...` path answers the app shell,
//!   so a deep link (`/ui/jobs/web`) opens that page.
//! - `/ui/server/{name}/self` and `/ui/server/{name}/schedulers`: `/v1/agent/self` and
//!   `/v1/agent/schedulers` of the raft member named `name`, asked at its HTTP address with
//!   the caller's token (those routes describe the agent that answers, and the overview
//!   shows every server's workers and raft indexes through whichever server it talks to).
//!
//! The asset routes are public (`acl::PUBLIC`); every API call the page makes carries the
//! token typed into it, and the member route passes that token on, so the server asked
//! checks it as for a direct call.
//!
//! ```text
//! browser ──/ui/...──> any agent ──(shell, assets)
//!    └─────/v1/...  (X-Nomad-Token) ──> API (followers forward writes to the leader)
//! ```

use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

use super::error::ApiError;
use super::HttpContext;

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

const INDEX: Asset = Asset {
    name: "index.html",
    content_type: "text/html; charset=utf-8",
    body: include_bytes!("ui/index.html"),
};

const ASSETS: &[Asset] = &[
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_bytes!("ui/app.js"),
    },
    Asset {
        name: "app.css",
        content_type: "text/css; charset=utf-8",
        body: include_bytes!("ui/app.css"),
    },
    Asset {
        name: "favicon.svg",
        content_type: "image/svg+xml",
        body: include_bytes!("ui/favicon.svg"),
    },
];

/// How long the member route waits for the member's answer.
const MEMBER_TIMEOUT: Duration = Duration::from_secs(5);

/// The UI's routes.
pub fn routes() -> Router<HttpContext> {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/", get(shell))
        .route("/ui/assets/{file}", get(asset))
        .route("/ui/server/{name}/{what}", get(member))
        .route("/ui/{*rest}", get(shell))
}

/// A strong `ETag` of an embedded file: its FNV-1a hash, computed once per file.
fn etag(asset: &Asset) -> &'static str {
    static TAGS: OnceLock<Vec<(&'static str, String)>> = OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        std::iter::once(&INDEX)
            .chain(ASSETS.iter())
            .map(|a| {
                let mut h: u64 = 0xcbf2_9ce4_8422_2325;
                for b in a.body {
                    h ^= u64::from(*b);
                    h = h.wrapping_mul(0x0100_0000_01b3);
                }
                (a.name, format!("\"{h:016x}\""))
            })
            .collect()
    });
    tags.iter()
        .find(|(n, _)| *n == asset.name)
        .map(|(_, t)| t.as_str())
        .unwrap_or("\"\"")
}

fn serve(asset: &'static Asset, headers: &HeaderMap) -> Response {
    let tag = etag(asset);
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == tag));
    let mut resp = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut r = Body::from(asset.body).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(asset.content_type),
        );
        r
    };
    let h = resp.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(v) = HeaderValue::from_str(tag) {
        h.insert(header::ETAG, v);
    }
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}

async fn shell(headers: HeaderMap) -> Response {
    serve(&INDEX, &headers)
}

async fn asset(Path(file): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().find(|a| a.name == file) {
        Some(a) => serve(a, &headers),
        None => ApiError::not_found(format!("no UI asset {file:?}")).into_response(),
    }
}

/// `/v1/agent/self` or `/v1/agent/schedulers` of the raft member `name`, asked with the
/// caller's token; that server's answer (or refusal) comes back as it is.
async fn member(
    State(ctx): State<HttpContext>,
    Path((name, what)): Path<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let path = match what.as_str() {
        "self" => "/v1/agent/self",
        "schedulers" => "/v1/agent/schedulers",
        _ => return Err(ApiError::not_found("Invalid URL")),
    };
    let node = ctx.node()?;
    let addr = node
        .membership()
        .servers
        .into_iter()
        .map(|(_, a, _)| a)
        .find(|a| a.name == name)
        .ok_or_else(|| ApiError::not_found(format!("no server named {name:?}")))?;
    // HTTPS with this agent's certificate when its `tls.http` is on.
    let (scheme, client) = super::client_route::outgoing()?;
    let mut req = client
        .get(format!("{scheme}://{}{path}", addr.http_addr))
        .timeout(MEMBER_TIMEOUT);
    if let Some(token) = super::acl::request_token(&headers) {
        req = req.header("X-Nomad-Token", token);
    }
    let resp = req.send().await.map_err(|e| {
        ApiError::internal(format!(
            "cannot reach server {name} at {}: {e}",
            addr.http_addr
        ))
    })?;
    let status = resp.status();
    let body = resp
        .bytes()
        .await
        .map_err(|e| ApiError::internal(format!("reading server {name}'s answer: {e}")))?;
    if !status.is_success() {
        return Err(ApiError {
            status,
            message: String::from_utf8_lossy(&body).into_owned(),
        });
    }
    let mut out = Body::from(body).into_response();
    out.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn assets_are_served_with_type_and_revalidation() {
        let resp = asset(Path("app.js".into()), HeaderMap::new()).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(
            resp.headers()[header::CONTENT_TYPE],
            "text/javascript; charset=utf-8"
        );
        assert_eq!(resp.headers()[header::CACHE_CONTROL], "no-cache");
        let tag = resp.headers()[header::ETAG].clone();
        let mut again = HeaderMap::new();
        again.insert(header::IF_NONE_MATCH, tag);
        let resp = asset(Path("app.js".into()), again).await;
        assert_eq!(resp.status(), StatusCode::NOT_MODIFIED);
        let missing = asset(Path("nope.js".into()), HeaderMap::new()).await;
        assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn any_other_path_is_the_shell() {
        let resp = shell(HeaderMap::new()).await;
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(
            resp.headers()[header::CONTENT_TYPE],
            "text/html; charset=utf-8"
        );
    }
}
