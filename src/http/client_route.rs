//! Where a request about a client's allocation or node is served: the routes a Nomad client
//! agent hosts (`/v1/client/fs/…`, `/v1/client/allocation/:id/…`, `/v1/client/stats`) are
//! answered by the agent whose client runs the allocation (or is the node); any other agent
//! that is a server looks the allocation (by ID or unique prefix) or the node up and
//! forwards the request once to the node's HTTP address, streaming the answer back. A
//! forwarded request carries [`FORWARDED`] and is never forwarded again, and the caller's
//! ACL token, which the client agent checks again. With the agent's
//! `tls.http` on, forwarding speaks HTTPS with the agent's certificate
//! ([`crate::util::tls::set_outgoing_http`]).

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;

use super::error::ApiError;
use super::HttpContext;
use crate::rpc::service::credential::caller_token;

/// The header that carries the caller's ACL token to the client agent.
pub const TOKEN_HEADER: &str = "X-Nomad-Token";
use crate::util::net::HttpIo;

/// The scheme of the other agents' HTTP API and a client for it.
pub(super) fn outgoing() -> Result<(&'static str, reqwest::Client), ApiError> {
    crate::util::tls::outgoing_http_client().map_err(ApiError::internal)
}

/// Connect to the agent HTTP port at `addr` (`ip:port`): TLS with this agent's certificate
/// when its `tls.http` is on (`true`), plain TCP otherwise.
pub async fn dial(addr: &str) -> Result<(bool, Box<dyn HttpIo>), ApiError> {
    let unreachable =
        |e: String| ApiError::internal(format!("cannot reach the client at {addr}: {e}"));
    let tcp = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        tokio::net::TcpStream::connect(addr),
    )
    .await
    .map_err(|_| unreachable("connect timed out".into()))?
    .map_err(|e| unreachable(e.to_string()))?;
    let Some(tls) = crate::util::tls::outgoing_http() else {
        return Ok((false, Box::new(tcp)));
    };
    let host = addr
        .rsplit_once(':')
        .map_or(addr, |(host, _)| host)
        .trim_matches(['[', ']']);
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| unreachable(format!("{host}: {e}")))?;
    let connector = tokio_rustls::TlsConnector::from(tls.configs().http_client.clone());
    let stream = tokio::time::timeout(
        crate::util::tls::HANDSHAKE_TIMEOUT,
        connector.connect(name, tcp),
    )
    .await
    .map_err(|_| unreachable("tls handshake timed out".into()))?
    .map_err(|e| unreachable(format!("tls handshake failed: {e}")))?;
    Ok((true, Box::new(stream)))
}

/// Header marking a request forwarded by a server, so it is never forwarded again.
pub const FORWARDED: &str = "X-Teamster-Forwarded";

/// Where a request is served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// By this agent's client.
    Here,
    /// By the client agent at this HTTP address; the allocation's full ID when the request
    /// names one.
    Node {
        /// The agent's HTTP address (`ip:port`).
        addr: String,
        /// The allocation's full ID (empty for a node request).
        alloc_id: String,
    },
}

/// Where a request about `alloc_id` (an ID or a unique prefix) is served: here when
/// `held_here(alloc_id)` says this agent's client holds it, else on its node's agent.
pub fn locate_alloc(
    ctx: &HttpContext,
    alloc_id: &str,
    headers: &HeaderMap,
    held_here: impl FnOnce(&str) -> bool,
) -> Result<Target, ApiError> {
    if alloc_id.is_empty()
        || !alloc_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-')
    {
        return Err(ApiError::bad_request("malformed allocation ID"));
    }
    if ctx.agent().client_enabled && held_here(alloc_id) {
        return Ok(Target::Here);
    }
    if headers.contains_key(FORWARDED) {
        return Err(ApiError::not_found(format!(
            "allocation {alloc_id} is not on this client"
        )));
    }
    let server = ctx.server().map_err(|_| {
        ApiError::not_found(format!("Unknown allocation {alloc_id:?} on this client"))
    })?;
    let snap = server.node.state().snapshot();
    let alloc = match snap.alloc_by_id(alloc_id) {
        Some(a) => a.clone(),
        None => {
            let found: Vec<_> = snap.allocs_by_prefix(alloc_id).take(2).collect();
            match found.as_slice() {
                [one] => (*one).clone(),
                [] => {
                    return Err(ApiError::not_found(format!(
                        "Unknown allocation {alloc_id:?}"
                    )))
                }
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "allocation ID prefix {alloc_id:?} matches several allocations"
                    )))
                }
            }
        }
    };
    let addr = node_http_addr(&snap, alloc.node_id.as_str())?;
    Ok(Target::Node {
        addr,
        alloc_id: alloc.id.to_string(),
    })
}

/// Where a request about node `node_id` is served: here when it is this agent's client (or
/// no node is named and this agent runs one), else on that node's agent.
pub fn locate_node(
    ctx: &HttpContext,
    node_id: &str,
    headers: &HeaderMap,
) -> Result<Target, ApiError> {
    let local = ctx.client().map(|c| c.node_id());
    match (&local, node_id) {
        (Some(_), "") => return Ok(Target::Here),
        (Some(id), wanted) if id == wanted => return Ok(Target::Here),
        (None, "") => {
            return Err(ApiError::bad_request(
                "missing node_id: this agent runs no client",
            ))
        }
        _ => {}
    }
    if headers.contains_key(FORWARDED) {
        return Err(ApiError::not_found(format!(
            "node {node_id} is not this client"
        )));
    }
    let server = ctx
        .server()
        .map_err(|_| ApiError::not_found(format!("Unknown node {node_id:?} on this client")))?;
    let snap = server.node.state().snapshot();
    Ok(Target::Node {
        addr: node_http_addr(&snap, node_id)?,
        alloc_id: String::new(),
    })
}

fn node_http_addr(
    snap: &teamster_storage::state::Snapshot,
    node_id: &str,
) -> Result<String, ApiError> {
    let node = snap
        .node_by_id(node_id)
        .ok_or_else(|| ApiError::not_found(format!("node {node_id} not found")))?;
    if node.http_addr.is_empty() {
        return Err(ApiError::not_found(format!(
            "node {} has no HTTP address",
            node.id
        )));
    }
    Ok(node.http_addr.clone())
}

/// The request sent once to the client agent at `addr` (`path_and_query` as this agent
/// would serve it, `body` as JSON), its answer streamed back, its errors passed on with
/// their status.
pub async fn forward(
    addr: &str,
    method: Method,
    path_and_query: &str,
    body: Option<Bytes>,
) -> Result<Response, ApiError> {
    let (scheme, client) = outgoing()?;
    let url = format!("{scheme}://{addr}{path_and_query}");
    let mut req = client.request(method, &url).header(FORWARDED, "1");
    // The client agent checks the caller's token again; without it every forwarded call
    // under ACLs was refused, even a management token's.
    if let Some(token) = caller_token() {
        req = req.header(TOKEN_HEADER, token);
    }
    if let Some(body) = body {
        req = req
            .header(header::CONTENT_TYPE, "application/json")
            .body(body);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| ApiError::internal(format!("cannot reach the client at {addr}: {e}")))?;
    let status = resp.status();
    if !status.is_success() {
        let body = resp.text().await.unwrap_or_default();
        return Err(ApiError {
            status,
            message: body,
        });
    }
    let content_type = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .cloned()
        .unwrap_or(HeaderValue::from_static("text/plain; charset=utf-8"));
    let mut out = Body::from_stream(resp.bytes_stream()).into_response();
    out.headers_mut().insert(header::CONTENT_TYPE, content_type);
    Ok(out)
}
