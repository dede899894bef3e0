//! The HTTP client: one agent's address, JSON bodies, Nomad's plain-text error bodies turned
//! into [`ApiError`], and `X-Nomad-Index` for blocking queries.

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

/// A client of one agent's HTTP API.
#[derive(Debug, Clone)]
pub struct ApiClient {
    base: String,
    http: reqwest::Client,
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
        let address = address.trim_end_matches('/');
        let base = if address.starts_with("http://") || address.starts_with("https://") {
            address.to_string()
        } else {
            format!("http://{address}")
        };
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(330))
            .connect_timeout(Duration::from_secs(5))
            .build()
            .expect("a reqwest client with only timeouts set always builds");
        ApiClient { base, http }
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
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| self.unreachable(&e))?;
        let resp = http
            .get(format!("{}{}", self.base, path))
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
        let url = format!("{}{}", self.base, path);
        let mut req = self.http.request(method, &url);
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
