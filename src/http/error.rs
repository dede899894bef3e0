//! API errors as Nomad writes them: `text/plain`, the bare message, Nomad's status codes.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::rpc::ServiceError;

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The plain-text body.
    pub message: String,
}

impl ApiError {
    /// 400 with a message that names the problem.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    /// 404, e.g. "job not found".
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: message.into(),
        }
    }

    /// 405 "Invalid method".
    pub fn method_not_allowed() -> ApiError {
        ApiError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: "Invalid method".into(),
        }
    }

    /// 500 "No cluster leader".
    pub fn no_leader() -> ApiError {
        ApiError::internal("No cluster leader")
    }

    /// 500 with a message.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
        }
    }

    /// 403 with one of Nomad's ACL messages ("Permission denied", "ACL token not found").
    pub fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::FORBIDDEN,
            message: message.into(),
        }
    }

    /// 400 "Server only endpoint", for server endpoints on a client-only agent.
    pub fn server_only() -> ApiError {
        ApiError::bad_request("Server only endpoint")
    }
}

impl From<ServiceError> for ApiError {
    /// A service call's failure with Nomad's status codes: 400 for what the request got
    /// wrong, 404 for what it names and does not exist, 500 "No cluster leader" while there
    /// is none, 500 for the rest.
    fn from(e: ServiceError) -> ApiError {
        match e {
            ServiceError::NotLeader { .. } | ServiceError::NoLeader => ApiError::no_leader(),
            ServiceError::Invalid { .. }
            | ServiceError::Rejected { .. }
            | ServiceError::SchedulerVersion { .. } => ApiError::bad_request(e.to_string()),
            ServiceError::NotFound { .. } => ApiError::not_found(e.to_string()),
            ServiceError::PermissionDenied { reason } => ApiError::forbidden(reason),
            ServiceError::Disabled { .. }
            | ServiceError::Unavailable { .. }
            | ServiceError::NoAnswer { .. }
            | ServiceError::Internal { .. } => ApiError::internal(e.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            self.message,
        )
            .into_response()
    }
}
