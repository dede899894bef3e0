//! Nomad Enterprise's routes (Sentinel policies, quotas, recommendations), answered as
//! Nomad's community edition answers them: 501 "Nomad Enterprise only endpoint", to anyone,
//! whatever the method, so a client can tell "not in this edition" from a wrong URL (404).

use axum::http::StatusCode;
use axum::routing::any;
use axum::Router;

use super::error::ApiError;
use super::HttpContext;

/// Nomad's text for a route only its Enterprise edition serves.
pub const ENTERPRISE_ONLY: &str = "Nomad Enterprise only endpoint";

/// The route patterns Nomad's community edition answers with 501.
pub const PATTERNS: &[&str] = &[
    "/v1/sentinel/policies",
    "/v1/sentinel/policy/{*rest}",
    "/v1/quotas",
    "/v1/quota-usages",
    "/v1/quota",
    "/v1/quota/{*rest}",
    "/v1/recommendation",
    "/v1/recommendation/{*rest}",
    "/v1/recommendations",
    "/v1/recommendations/apply",
];

async fn enterprise_only() -> ApiError {
    ApiError {
        status: StatusCode::NOT_IMPLEMENTED,
        message: ENTERPRISE_ONLY.into(),
    }
}

pub(super) fn routes() -> Router<HttpContext> {
    PATTERNS
        .iter()
        .fold(Router::new(), |r, p| r.route(p, any(enterprise_only)))
}
