//! The Nomad-compatible HTTP API (axum).
//!
//! Conventions (Nomad's): PascalCase JSON with Go initialisms (`ID`, `CPU`); errors as plain
//! text with Nomad's status codes; Go-style booleans in queries (`True`, `false`, `1`);
//! blocking queries with `index` and `wait`; writes on a follower forwarded to the leader,
//! never redirected; request bodies capped at [`MAX_BODY_BYTES`] (413 beyond, after the body
//! is read and dropped so that the client sees the answer).
//!
//! - [`error`], [`query`]: the conventions.
//! - `status`, `operator`, `agent`, [`schedulers`], `snapshot`: the routes, one file per group.
//! - `ui`: the web UI at `/ui/`.

pub mod acl;
mod acl_routes;
mod agent;
mod allocs;
mod autopilot;
mod client_alloc;
mod client_exec;
pub mod client_fs;
mod client_logs;
pub mod client_route;
mod deployments;
mod dispatch;
mod enterprise;
pub mod error;
pub mod evals;
pub mod events;
mod jobs;
mod keyring;
mod metrics_json;
pub mod metrics_nomad;
mod namespaces;
pub mod nodes;
mod operator;
mod plan;
pub mod query;
pub mod read;
mod scaling;
mod scheduler_config;
pub mod schedulers;
mod search;
pub mod serve;
mod services;
mod snapshot;
mod status;
mod stub_cache;
pub mod tls;
mod ui;
mod variables;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;

use crate::server::leader::LeadershipState;
use crate::server::raft::RaftNode;
use crate::util::{RngSource, SharedClock};
use error::ApiError;

/// The largest request body accepted (Nomad job files are far smaller).
pub const MAX_BODY_BYTES: usize = 4 << 20;

/// What the handlers can reach.
#[derive(Clone)]
pub struct HttpContext {
    inner: Arc<Inner>,
}

struct Inner {
    agent: AgentInfo,
    server: Option<ServerHandles>,
    metrics: Option<PrometheusHandle>,
    clock: SharedClock,
    rng: RngSource,
    /// The client role's handle, set once it has started (the API starts first).
    client: std::sync::OnceLock<crate::client::ops::ClientHandle>,
    /// Tokens resolved through the servers (a client-only agent with ACLs on).
    remote_tokens: acl::RemoteTokens,
    /// The job list's stubs, kept serialized.
    job_stubs: stub_cache::StubCache,
}

/// What the API tells about the agent that serves it (the agent fills it in).
#[derive(Debug, Clone)]
pub struct AgentInfo {
    /// The agent's name.
    pub name: String,
    /// The datacenter its client role (if any) registers in.
    pub datacenter: String,
    /// The data directory; task directories are under `<data_dir>/alloc/`.
    pub data_dir: std::path::PathBuf,
    /// Whether the agent runs a client role (tasks may be found locally).
    pub client_enabled: bool,
    /// How long a request waits for a leader during an election.
    pub rpc_hold_timeout: std::time::Duration,
    /// The agent's whole configuration as `/v1/agent/self` shows it.
    pub config: serde_json::Value,
    /// ACL enforcement.
    pub acl: crate::acl::AclConfig,
    /// The Nomad-named families `/v1/metrics` computes when read.
    pub nomad_metrics: metrics_nomad::NomadMetrics,
}

/// The server role's parts the API uses.
#[derive(Clone)]
pub struct ServerHandles {
    /// The raft node.
    pub node: Arc<RaftNode>,
    /// Whether leader duties are established here.
    pub leadership: LeadershipState,
    /// The scheduler workers.
    pub workers: std::sync::Arc<crate::server::worker::pool::WorkerPool>,
    /// The service layer: every write goes through it.
    pub endpoints: crate::server::endpoints::Endpoints,
}

impl HttpContext {
    /// A context for an agent with this configuration and, when it runs one, its server.
    pub fn new(
        agent: AgentInfo,
        server: Option<ServerHandles>,
        metrics: Option<PrometheusHandle>,
        clock: SharedClock,
        rng: RngSource,
    ) -> HttpContext {
        HttpContext {
            inner: Arc::new(Inner {
                agent,
                server,
                metrics,
                clock,
                rng,
                client: std::sync::OnceLock::new(),
                remote_tokens: acl::RemoteTokens::default(),
                job_stubs: stub_cache::StubCache::default(),
            }),
        }
    }

    /// Give the API this agent's client role (once; later calls change nothing).
    pub fn set_client(&self, client: crate::client::ops::ClientHandle) {
        let _ = self.inner.client.set(client);
    }

    /// This agent's client role, once it has started.
    pub fn client(&self) -> Option<&crate::client::ops::ClientHandle> {
        self.inner.client.get()
    }

    /// Tokens resolved through the servers.
    pub(crate) fn remote_tokens(&self) -> &acl::RemoteTokens {
        &self.inner.remote_tokens
    }

    /// The job list's stubs, kept serialized.
    pub(crate) fn job_stubs(&self) -> &stub_cache::StubCache {
        &self.inner.job_stubs
    }

    /// The wall clock for timestamps.
    pub fn clock(&self) -> &SharedClock {
        &self.inner.clock
    }

    /// The randomness seam (jitter, IDs).
    pub fn rng(&self) -> &RngSource {
        &self.inner.rng
    }

    /// What the API tells about its agent.
    pub fn agent(&self) -> &AgentInfo {
        &self.inner.agent
    }

    /// The server role, or 400 "Server only endpoint" on a client-only agent.
    pub fn server(&self) -> Result<&ServerHandles, ApiError> {
        self.inner.server.as_ref().ok_or_else(ApiError::server_only)
    }

    /// The raft node, or 400 "Server only endpoint".
    pub fn node(&self) -> Result<&Arc<RaftNode>, ApiError> {
        Ok(&self.server()?.node)
    }

    /// The service layer, or 400 "Server only endpoint".
    pub fn endpoints(&self) -> Result<&crate::server::endpoints::Endpoints, ApiError> {
        Ok(&self.server()?.endpoints)
    }
}

/// A job from Nomad's API JSON as the servers take it at registration: a group without a
/// `Count` starts at its `scaling` minimum, and a wrong type is named by its path. For tools
/// and tests that read job files as the cluster would.
pub fn job_from_api_json(job: serde_json::Value) -> Result<teamster_storage::model::Job, ApiError> {
    jobs::decode_job(job)
}

/// The API's routes.
pub fn router(ctx: HttpContext) -> Router {
    Router::new()
        .route(
            "/v1/jobs",
            get(jobs::list).put(jobs::register).post(jobs::register),
        )
        .route(
            "/v1/job/{id}",
            get(jobs::get)
                .put(jobs::register)
                .post(jobs::register)
                .delete(jobs::deregister),
        )
        .route("/v1/job/{id}/summary", get(jobs::summary))
        .route("/v1/job/{id}/versions", get(jobs::versions))
        .route("/v1/job/{id}/actions", get(jobs::actions))
        .route(
            "/v1/job/{id}/evaluate",
            axum::routing::put(jobs::evaluate).post(jobs::evaluate),
        )
        .route(
            "/v1/job/{id}/revert",
            axum::routing::put(jobs::revert).post(jobs::revert),
        )
        .route(
            "/v1/job/{id}/plan",
            axum::routing::put(plan::plan).post(plan::plan),
        )
        .route(
            "/v1/job/{id}/stable",
            axum::routing::put(jobs::stable).post(jobs::stable),
        )
        .route(
            "/v1/jobs/parse",
            axum::routing::put(jobs::parse).post(jobs::parse),
        )
        .route(
            "/v1/validate/job",
            axum::routing::put(jobs::validate).post(jobs::validate),
        )
        .route("/v1/status/leader", get(status::leader))
        .route("/v1/status/peers", get(status::peers))
        .route(
            "/v1/operator/raft/configuration",
            get(operator::raft_configuration),
        )
        .route(
            "/v1/operator/raft/peer",
            axum::routing::delete(operator::remove_peer),
        )
        .route("/v1/agent/self", get(agent::agent_self))
        .route("/v1/agent/members", get(agent::members))
        .route(
            "/v1/agent/join",
            axum::routing::put(agent::join).post(agent::join),
        )
        .route(
            "/v1/agent/force-leave",
            axum::routing::put(agent::force_leave).post(agent::force_leave),
        )
        .route(
            "/v1/agent/servers",
            get(agent::servers)
                .put(agent::update_servers)
                .post(agent::update_servers),
        )
        .route(
            "/v1/system/gc",
            axum::routing::put(agent::system_gc).post(agent::system_gc),
        )
        .route(
            "/v1/system/reconcile/summaries",
            axum::routing::put(agent::reconcile_summaries).post(agent::reconcile_summaries),
        )
        .route("/v1/agent/health", get(agent::health))
        .route("/v1/metrics", get(agent::metrics))
        .route("/v1/regions", get(agent::regions))
        .route("/v1/event/stream", get(events::stream))
        .route(
            "/v1/search",
            axum::routing::put(search::prefix).post(search::prefix),
        )
        .route(
            "/v1/search/fuzzy",
            axum::routing::put(search::fuzzy).post(search::fuzzy),
        )
        .merge(scaling::routes())
        .merge(dispatch::routes())
        .merge(schedulers::routes())
        .merge(snapshot::routes())
        .merge(evals::routes())
        .merge(deployments::routes())
        .merge(services::routes())
        .merge(namespaces::routes())
        .merge(allocs::routes())
        .merge(scheduler_config::routes())
        .merge(autopilot::routes())
        .merge(nodes::routes())
        .merge(client_fs::routes())
        .merge(client_alloc::routes())
        .merge(client_exec::routes())
        .merge(acl_routes::routes())
        .merge(keyring::routes())
        .merge(variables::routes())
        .merge(ui::routes())
        .merge(enterprise::routes())
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .fallback(|| async { ApiError::not_found("Invalid URL") })
        .layer(axum::middleware::from_fn_with_state(
            ctx.clone(),
            acl::enforce,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(refuse_oversized))
        .layer(axum::middleware::from_fn(refuse_other_regions))
        .with_state(ctx)
}

/// How long an oversized request's body is read and dropped before the 413 goes out.
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(2);
/// How much of an oversized request's body is read and dropped at most.
const DRAIN_BYTES: usize = 32 << 20;

/// The body limit of a route: snapshots are large, everything else is [`MAX_BODY_BYTES`].
fn max_body(path: &str) -> usize {
    if path == snapshot::PATH {
        snapshot::MAX_SNAPSHOT_BYTES
    } else {
        MAX_BODY_BYTES
    }
}

/// The one region this cluster is.
pub const REGION: &str = "global";

/// Answers a request for another region (`?region=eu`) as Nomad answers one it has no path
/// to, `500 No path to region`, instead of this region's data.
async fn refuse_other_regions(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    // Decoded as every query parameter is (`?region=glob%61l` is this region).
    let other = req.uri().query().and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, r)| k == "region" && !r.is_empty() && r != REGION)
            .map(|(_, r)| r.into_owned())
    });
    match other {
        None => next.run(req).await,
        Some(region) => ApiError::internal(format!(
            "No path to region: {region:?} (this cluster is the {REGION:?} region)"
        ))
        .into_response(),
    }
}

/// Answers 413 to a request whose declared `Content-Length` is over its route's limit, before
/// any handler runs, after reading and dropping what the client sends (up to [`DRAIN_BYTES`]
/// within [`DRAIN_TIME`]). Closing a connection with unread data resets it, and a client
/// still sending its body then sees a broken pipe instead of the answer (the lingering close
/// of nginx, for the same reason). Bodies without a length are capped by `DefaultBodyLimit`.
async fn refuse_oversized(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    use futures::StreamExt;
    let max = max_body(req.uri().path());
    let declared = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let Some(len) = declared.filter(|len| *len > max as u64) else {
        return next.run(req).await;
    };
    let mut body = req.into_body().into_data_stream();
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        let mut read = 0;
        while let Some(Ok(chunk)) = body.next().await {
            read += chunk.len();
            if read > DRAIN_BYTES {
                break;
            }
        }
    })
    .await;
    ApiError {
        status: axum::http::StatusCode::PAYLOAD_TOO_LARGE,
        message: format!("Request body of {len} bytes exceeds the limit of {max} bytes"),
    }
    .into_response()
}
