//! The HTTP client: one agent's address, JSON bodies, Nomad's plain-text error bodies turned
//! into [`ApiError`], and `X-Nomad-Index` for blocking queries. A client may carry a
//! [`RequestScope`] (Nomad's `-namespace`, `-region`, `-token`): the namespace and region go
//! in every request's query unless its path names them already, the token in `X-Nomad-Token`.
//! [`ApiClient::with_tls`] speaks HTTPS with a rustls configuration (see
//! [`ApiTlsFiles`](crate::util::tls::ApiTlsFiles)): the CA to trust, the client certificate
//! to present.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// What went wrong talking to the API.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The server could not be reached (or its answer was cut off).
    #[error(
        "cannot reach {address}: {reason} (is an agent running there? give its address with \
         --address, TEAMSTER_ADDR or NOMAD_ADDR)"
    )]
    Unreachable {
        /// The API address.
        address: String,
        /// The innermost cause, said once (`Connection refused (os error 111)`).
        reason: String,
    },
    /// The server answered with an error status; `message` is its plain-text body.
    #[error("{message} (HTTP {status})")]
    Status {
        /// The HTTP status.
        status: StatusCode,
        /// The body.
        message: String,
    },
    /// The server answered something that is not the expected JSON.
    #[error("unexpected answer from {address}: {message}")]
    Decode {
        /// The API address.
        address: String,
        /// What could not be decoded.
        message: String,
    },
}

/// What every request of a client is about, as Nomad's API client's query and write options:
/// each field, when set, is sent with every request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestScope {
    /// `?namespace=` (a name, or `*` for lists across namespaces).
    pub namespace: Option<String>,
    /// `?region=`.
    pub region: Option<String>,
    /// `X-Nomad-Token`.
    pub token: Option<String>,
}

impl RequestScope {
    /// `path` with the scope's namespace and region added to its query, each unless the path
    /// names it already (`/v1/deployments?namespace=*` keeps its `*`).
    pub fn apply(&self, path: &str) -> String {
        let mut out = path.to_string();
        let query = path.split_once('?').map(|(_, q)| q).unwrap_or("");
        let has = |key: &str| query.split('&').any(|kv| kv.split('=').next() == Some(key));
        for (key, value) in [("namespace", &self.namespace), ("region", &self.region)] {
            let Some(value) = value.as_deref().filter(|v| !v.is_empty()) else {
                continue;
            };
            if has(key) {
                continue;
            }
            out.push(if out.contains('?') { '&' } else { '?' });
            out.push_str(key);
            out.push('=');
            out.push_str(&urlencode(value));
        }
        out
    }
}

/// Percent-encode a path segment or query value (job IDs may hold characters a URL cannot);
/// only unreserved characters are kept.
pub fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A client of one agent's HTTP API.
#[derive(Debug, Clone)]
pub struct ApiClient {
    base: String,
    http: reqwest::Client,
    /// For answers read as they arrive: no overall timeout, only the connection's.
    stream: reqwest::Client,
    /// The TLS the clients speak (for connections made outside reqwest: websockets).
    tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    scope: RequestScope,
}

impl ApiClient {
    /// A transport failure as [`ApiError::Unreachable`], with the innermost cause only
    /// (reqwest's own chain repeats its wrapper).
    fn unreachable(&self, e: &reqwest::Error) -> ApiError {
        let mut cause: &dyn std::error::Error = e;
        while let Some(inner) = cause.source() {
            cause = inner;
        }
        let reason = if e.is_timeout() {
            "timed out".to_string()
        } else {
            cause.to_string()
        };
        ApiError::Unreachable {
            address: self.base.clone(),
            reason,
        }
    }

    /// A client for `address` (`http://host:port`; the scheme is added when missing).
    pub fn new(address: &str) -> ApiClient {
        Self::build(address, None)
    }

    /// A client for `address` speaking HTTPS with `tls` (`https://` is added when the
    /// address has no scheme).
    pub fn with_tls(address: &str, tls: rustls::ClientConfig) -> ApiClient {
        Self::build(address, Some(tls))
    }

    fn build(address: &str, tls: Option<rustls::ClientConfig>) -> ApiClient {
        let address = address.trim_end_matches('/');
        let base = if address.starts_with("http://") || address.starts_with("https://") {
            address.to_string()
        } else if tls.is_some() {
            format!("https://{address}")
        } else {
            format!("http://{address}")
        };
        let client = |total: Option<Duration>| {
            let mut builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(5));
            if let Some(total) = total {
                builder = builder.timeout(total);
            }
            if let Some(tls) = &tls {
                builder = builder.use_preconfigured_tls(tls.clone());
            }
            builder
                .build()
                .expect("a reqwest client with timeouts and a rustls configuration always builds")
        };
        ApiClient {
            base,
            http: client(Some(Duration::from_secs(330))),
            stream: client(None),
            tls: tls.map(std::sync::Arc::new),
            scope: RequestScope::default(),
        }
    }

    /// This client with every request sent in `scope`.
    pub fn with_scope(mut self, scope: RequestScope) -> ApiClient {
        self.scope = scope;
        self
    }

    /// The scope every request is sent in.
    pub fn scope(&self) -> &RequestScope {
        &self.scope
    }

    /// The URL of `path`, with the scope's query parameters.
    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, self.scope.apply(path))
    }

    /// `req` with the scope's token, if any.
    fn authorized(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match self.scope.token.as_deref().filter(|t| !t.is_empty()) {
            Some(token) => req.header("X-Nomad-Token", token),
            None => req,
        }
    }

    /// A request to build further (a body that is not JSON, a streamed answer), with the
    /// scope's query parameters, its token and this client's TLS; no overall timeout unless
    /// the caller sets one.
    pub fn raw(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.authorized(self.stream.request(method, self.url(path)))
    }

    /// The TLS configuration of an `https://` client, for connections made outside reqwest.
    pub fn tls_config(&self) -> Option<std::sync::Arc<rustls::ClientConfig>> {
        self.tls.clone()
    }

    /// The base address.
    pub fn address(&self) -> &str {
        &self.base
    }

    /// GET a JSON document.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ApiError> {
        self.request::<(), T>(Method::GET, path, None).await
    }

    /// GET a JSON document and its `X-Nomad-Index` (0 when absent), for blocking queries.
    pub async fn get_with_index<T: DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<(T, u64), ApiError> {
        let (text, index) = self.send::<()>(Method::GET, path, None).await?;
        let value = serde_json::from_str(&text).map_err(|e| ApiError::Decode {
            address: self.base.clone(),
            message: format!("{path}: {e}"),
        })?;
        Ok((value, index))
    }

    /// PUT/POST/DELETE with an optional JSON body, decoding a JSON answer.
    pub async fn request<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<T, ApiError> {
        let text = self.request_text(method, path, body).await?;
        let text = if text.trim().is_empty() {
            "null"
        } else {
            &text
        };
        serde_json::from_str(text).map_err(|e| ApiError::Decode {
            address: self.base.clone(),
            message: format!("{path}: {e}"),
        })
    }

    /// GET an answer to read as it arrives (a followed log): no overall timeout, only the
    /// connection's.
    pub async fn get_stream(&self, path: &str) -> Result<reqwest::Response, ApiError> {
        let resp = self
            .raw(Method::GET, path)
            .send()
            .await
            .map_err(|e| self.unreachable(&e))?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            return Err(ApiError::Status {
                status,
                message: text.trim().to_string(),
            });
        }
        Ok(resp)
    }

    /// Any method, returning the raw body of a successful answer.
    pub async fn request_text<B: Serialize>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<String, ApiError> {
        Ok(self.send(method, path, body).await?.0)
    }

    /// Send a request; the body of a successful answer and its `X-Nomad-Index` (0 when
    /// absent), or the error the server answered.
    async fn send<B: Serialize>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<(String, u64), ApiError> {
        let mut req = self.authorized(self.http.request(method, self.url(path)));
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().await.map_err(|e| self.unreachable(&e))?;
        let status = resp.status();
        let index = resp
            .headers()
            .get("X-Nomad-Index")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        let text = resp.text().await.map_err(|e| self.unreachable(&e))?;
        if !status.is_success() {
            return Err(ApiError::Status {
                status,
                message: text.trim().to_string(),
            });
        }
        Ok((text, index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scope_adds_what_the_path_does_not_name() {
        let scope = RequestScope {
            namespace: Some("team a".into()),
            region: Some("eu".into()),
            token: Some("secret".into()),
        };
        assert_eq!(
            scope.apply("/v1/jobs"),
            "/v1/jobs?namespace=team%20a&region=eu"
        );
        assert_eq!(
            scope.apply("/v1/deployments?namespace=*&prefix=ab"),
            "/v1/deployments?namespace=*&prefix=ab&region=eu"
        );
        assert_eq!(
            scope.apply("/v1/job/x?region=us"),
            "/v1/job/x?region=us&namespace=team%20a"
        );
        // A key that only starts like ours is not ours.
        assert_eq!(
            scope.apply("/v1/x?namespaces=1"),
            "/v1/x?namespaces=1&namespace=team%20a&region=eu"
        );
        assert_eq!(RequestScope::default().apply("/v1/jobs"), "/v1/jobs");
    }
}
