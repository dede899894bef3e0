//! The Nomad-compatible HTTP API (axum).
//!
//! Conventions (Nomad's): PascalCase JSON with Go initialisms (`ID`, `CPU`); errors as plain
//! text with Nomad's status codes; Go-style booleans in queries (`True`, `false`, `1`);
//! blocking queries with `index` and `wait`; writes on a follower forwarded to the leader,
//! never redirected.

pub mod error;
pub mod query;

use std::sync::Arc;

use axum::Router;

use crate::agent::config::AgentConfig;

/// What the handlers can reach.
#[derive(Clone)]
pub struct HttpContext {
    inner: Arc<Inner>,
}

struct Inner {
    config: AgentConfig,
}

impl HttpContext {
    /// A context for an agent with this configuration.
    pub fn new(config: AgentConfig) -> HttpContext {
        HttpContext {
            inner: Arc::new(Inner { config }),
        }
    }

    /// The agent's configuration.
    pub fn config(&self) -> &AgentConfig {
        &self.inner.config
    }
}

/// The API's routes.
pub fn router(ctx: HttpContext) -> Router {
    Router::new().with_state(ctx)
}
