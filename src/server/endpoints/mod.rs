//! The service layer: every write the cluster accepts, and the calls of the scheduler
//! workers and client agents — `Job.*` ([`job`]), `Node.*` ([`node`]), `Eval.*` ([`eval`]),
//! `Alloc.Stop` ([`alloc`]), `Plan.Submit` ([`plan`]), `Operator.*` ([`operator`]),
//! `Deployment.*` ([`deployment`]), `ServiceRegistration.*` ([`service_reg`]),
//! `Namespace.*` ([`namespace`]). The HTTP
//! API, the workers (in process) and the RPC port (client agents, other servers) all call
//! [`Endpoints`] with a typed [`ServiceRequest`]; only this layer builds raft `Command`s for
//! them.
//!
//! Routing follows each call's [`Route`] in the service table ([`crate::rpc::service`]):
//!
//! ```text
//!  call(origin, req) ─▶ Route::Local ─────────────────────────────▶ serve here
//!                     ─▶ Route::Leader ── leader? ── yes ──────────▶ serve here
//!                     │                  └─ no: forward the request to the leader, waiting
//!                     │                     up to rpc_hold_timeout while leadership moves
//!                     ─▶ Route::LeaderSubsystem ── established? ──▶ serve here
//!                                          └─ no: forward once, else Disabled
//! ```
//!
//! A call that another server already forwarded is never forwarded again ([`forward`]), so a
//! stale leader hint costs one `NotLeader` answer, not a loop.
//!
//! [`ServerRpc`] is the RPC port's handler: raft traffic goes to openraft, status calls are
//! answered here, service calls go to [`Endpoints::call`].
//!
//! May import: every server part but `worker` and `tests`; `rpc`, `scheduler`, `util`.

pub mod acl;
pub mod alloc;
pub mod authz;
pub mod deployment;
pub mod eval;
pub mod forward;
pub mod job;
pub mod keyring;
pub mod namespace;
pub mod node;
pub mod operator;
pub mod plan;
pub mod service_reg;
pub mod variables;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use teamster_storage::fsm::{ApplyError, Command, CommandResponse};
use teamster_storage::raft_types::ServerId;

use crate::rpc::service::credential::with_caller_token;
use crate::rpc::service::{Method, Route};
use crate::rpc::{
    RequestContext, RpcError, RpcHandler, RpcRequest, RpcResponse, ServiceCaller, ServiceError,
    ServiceRequest, ServiceResponse,
};
use crate::server::acl::{AclError, AclResolver, Identity};
use crate::server::blocked::BlockedEvals;
use crate::server::broker::{BrokerError, EvalBroker};
use crate::server::formation::{my_info, Discovered};
use crate::server::heartbeat::Heartbeats;
use crate::server::keyring::Keyring;
use crate::server::leader::LeadershipState;
use crate::server::pipeline::EvalPipeline;
use crate::server::plan::{PlanQueue, PlanQueueError};
use crate::server::raft::{RaftNode, RaftNodeError};
use crate::server::write_batcher::WriteError;
use crate::util::{RngSource, SharedClock};

/// Who made a call, for the forward-once rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// This server itself: its HTTP API, its scheduler workers.
    Local,
    /// Something that is not a raft member: a client agent, a tool, a joining server.
    Outside,
    /// Another raft member: the call was forwarded once already.
    Server(ServerId),
}

impl Origin {
    /// Whether a call from here may be forwarded to the leader.
    pub fn may_forward(self) -> bool {
        !matches!(self, Origin::Server(_))
    }
}

/// The service layer of one server: cheap to clone.
#[derive(Clone)]
pub struct Endpoints {
    inner: Arc<EndpointParts>,
}

/// What the service layer serves from.
pub struct EndpointParts {
    /// The raft node.
    pub node: Arc<RaftNode>,
    /// The eval broker and blocked evals (enabled while this server leads).
    pub pipeline: EvalPipeline,
    /// The plan queue (enabled while this server leads).
    pub plans: PlanQueue,
    /// Whether leader duties are established here.
    pub leadership: LeadershipState,
    /// The heartbeat timers (running while this server leads).
    pub heartbeats: Heartbeats,
    /// Wall-clock stamps.
    pub clock: SharedClock,
    /// IDs of the evaluations the layer creates.
    pub rng: RngSource,
    /// How long a call waits for a leader (`server.rpc_hold_timeout`).
    pub hold: Duration,
    /// How many versions of a job the job commands tell the state store to keep
    /// (`server.job_max_versions`).
    pub job_max_versions: u32,
    /// The most allocations one job may ask for (`server.job_max_count`; 0: no limit).
    pub job_max_count: u32,
    /// Whether ACLs are on: calls from outside the cluster's servers carry a token or a
    /// node secret, checked by [`authz`].
    pub acl_enabled: bool,
    /// Resolves tokens from this server's state.
    pub acl: Arc<AclResolver>,
    /// The root keyring: signs and verifies workload identities.
    pub keyring: Keyring,
    /// The leases of variable locks (kept by the leader).
    pub lock_leases: Arc<crate::server::variable_locks::LockLeases>,
    /// Autopilot's latest judgement of the servers (kept by the leader).
    pub autopilot: Arc<crate::server::autopilot::Autopilot>,
}

impl Endpoints {
    /// The service layer over `parts`.
    pub fn new(parts: EndpointParts) -> Endpoints {
        Endpoints {
            inner: Arc::new(parts),
        }
    }

    /// The raft node.
    pub fn node(&self) -> &Arc<RaftNode> {
        &self.inner.node
    }

    /// The root keyring.
    pub fn keyring(&self) -> &Keyring {
        &self.inner.keyring
    }

    /// The leases of variable locks.
    pub fn lock_leases(&self) -> &crate::server::variable_locks::LockLeases {
        &self.inner.lock_leases
    }

    /// Autopilot's latest judgement of the servers.
    pub fn autopilot(&self) -> &crate::server::autopilot::Autopilot {
        &self.inner.autopilot
    }

    /// The eval broker.
    pub fn broker(&self) -> &EvalBroker {
        self.inner.pipeline.broker()
    }

    /// The blocked-evals tracker.
    pub fn blocked(&self) -> &BlockedEvals {
        self.inner.pipeline.blocked()
    }

    /// The plan queue.
    pub fn plans(&self) -> &PlanQueue {
        &self.inner.plans
    }

    /// Whether this server's leader duties are established.
    pub fn leadership(&self) -> &LeadershipState {
        &self.inner.leadership
    }

    pub(crate) fn heartbeats(&self) -> &Heartbeats {
        &self.inner.heartbeats
    }

    /// `server.job_max_versions`, for the job commands.
    pub(crate) fn job_max_versions(&self) -> u32 {
        self.inner.job_max_versions
    }

    /// Refuses a job whose groups ask for more allocations than `server.job_max_count`, as
    /// Nomad's job endpoint does.
    pub(crate) fn check_job_count(
        &self,
        job: &teamster_storage::model::Job,
    ) -> Result<(), ServiceError> {
        let limit = self.inner.job_max_count;
        let total: u64 = job.task_groups.iter().map(|g| u64::from(g.count)).sum();
        if limit != 0 && total > u64::from(limit) {
            return Err(ServiceError::invalid(
                "Job",
                format!("total count was greater than configured job_max_count: {total} > {limit}"),
            ));
        }
        Ok(())
    }

    pub(crate) fn now(&self) -> i64 {
        self.inner.clock.now_unix_nanos()
    }

    pub(crate) fn rng(&self) -> &RngSource {
        &self.inner.rng
    }

    pub(crate) fn hold(&self) -> Duration {
        self.inner.hold
    }

    /// Whether ACLs are on.
    pub fn acl_enabled(&self) -> bool {
        self.inner.acl_enabled
    }

    /// Who `secret` (none: anonymous) is, from this server's state; everyone is
    /// unrestricted when ACLs are off.
    pub fn resolve_token(&self, secret: Option<&str>) -> Result<Identity, AclError> {
        if !self.inner.acl_enabled {
            return Ok(Identity::unrestricted());
        }
        let snap = self.inner.node.state().snapshot();
        if let Some(jwt) = secret.filter(|s| crate::keyring::looks_like_jwt(s)) {
            let claims = self.inner.keyring.verify(&snap, jwt);
            return crate::server::acl::workload_identity(&snap, claims);
        }
        self.inner.acl.resolve(&snap, secret)
    }

    /// Whether this server serves the leader's subsystems right now.
    pub fn established(&self) -> bool {
        self.inner.leadership.is_established() && self.inner.node.is_leader()
    }

    /// Serve `req` for a caller at `origin`: here, or forwarded to the leader.
    pub async fn call(
        &self,
        origin: Origin,
        req: ServiceRequest,
    ) -> Result<ServiceResponse, ServiceError> {
        let method = req.method();
        let started = tokio::time::Instant::now();
        let result = match method.route {
            Route::Local => self.serve(req).await,
            Route::LeaderSubsystem if self.established() => self.serve(req).await,
            Route::LeaderSubsystem if origin.may_forward() => {
                forward::once(self, req, method).await
            }
            Route::LeaderSubsystem => Err(ServiceError::disabled(disabled_reason(method))),
            Route::Leader if origin.may_forward() => forward::hold(self, req, method).await,
            Route::Leader if self.inner.node.is_leader() => self.serve(req).await,
            Route::Leader => Err(ServiceError::NotLeader {
                leader: self.inner.node.leader(),
            }),
        };
        metrics::histogram!("teamster_service_seconds", "method" => method.name)
            .record(started.elapsed().as_secs_f64());
        if let Err(e) = &result {
            tracing::debug!(method = method.name, error = %e, "service call failed");
        }
        result
    }

    /// Serve `req` on this server, whatever its role (routing is the caller's business).
    pub(crate) async fn serve(&self, req: ServiceRequest) -> Result<ServiceResponse, ServiceError> {
        use ServiceRequest as Q;
        use ServiceResponse as A;
        Ok(match req {
            Q::JobRegister(r) => A::JobRegister(job::register(self, *r).await?),
            Q::JobDeregister(r) => A::JobDeregister(job::deregister(self, r).await?),
            Q::JobEvaluate(r) => A::JobEvaluate(job::evaluate(self, r).await?),
            Q::JobBatchDeregister(r) => {
                A::JobBatchDeregister(job::batch_deregister(self, r).await?)
            }
            Q::JobRevert(r) => A::JobRevert(job::revert(self, r).await?),
            Q::JobPlan(r) => A::JobPlan(Box::new(job::plan(self, *r).await?)),
            Q::JobScale(r) => A::JobScale(job::scale(self, *r).await?),
            Q::JobStable(r) => A::JobStable(job::stable(self, r).await?),
            Q::JobPeriodicForce(r) => A::JobPeriodicForce(job::periodic_force(self, r).await?),
            Q::JobDispatch(r) => A::JobDispatch(job::dispatch(self, *r).await?),
            Q::SystemGc(_) => A::SystemGc(operator::system_gc(self).await?),
            Q::AllocStop(r) => A::AllocStop(alloc::stop(self, r).await?),
            Q::AllocSignIdentities(r) => {
                A::AllocSignIdentities(keyring::sign_identities(self, r).await?)
            }
            Q::KeyringRotate(r) => A::KeyringRotate(keyring::rotate(self, r).await?),
            Q::KeyringDelete(r) => A::KeyringDelete(keyring::delete(self, r).await?),
            Q::KeyringListPublic(_) => A::KeyringListPublic(keyring::list_public(self)),
            Q::OperatorAutopilotSetConfiguration(r) => {
                A::OperatorAutopilotSetConfiguration(operator::set_autopilot_config(self, r).await?)
            }
            Q::OperatorServerHealth(_) => A::OperatorServerHealth(operator::server_health(self)?),
            Q::VariablesApply(r) => A::VariablesApply(variables::apply(self, r).await?),
            Q::TemplateRead(r) => A::TemplateRead(variables::template_read(self, r).await?),
            Q::VariablesRenewLock(r) => A::VariablesRenewLock(variables::renew_lock(self, r)?),
            Q::AclUpsertOneTimeToken(r) => {
                A::AclUpsertOneTimeToken(acl::upsert_one_time_token(self, r).await?)
            }
            Q::AclExchangeOneTimeToken(r) => {
                A::AclExchangeOneTimeToken(acl::exchange_one_time_token(self, r).await?)
            }
            Q::SystemReconcileSummaries(_) => {
                A::SystemReconcileSummaries(operator::reconcile_summaries(self).await?)
            }
            Q::EvalDequeue(r) => A::EvalDequeue(eval::dequeue(self, r).await?),
            Q::EvalDequeueBatch(r) => A::EvalDequeueBatch(eval::dequeue_batch(self, r).await?),
            Q::EvalAck(r) => A::EvalAck(eval::ack(self, r)?),
            Q::EvalNack(r) => A::EvalNack(eval::nack(self, r)?),
            Q::EvalUpdate(r) => A::EvalUpdate(eval::update(self, *r).await?),
            Q::EvalCreate(r) => A::EvalCreate(eval::create(self, *r).await?),
            Q::EvalReblock(r) => A::EvalReblock(eval::reblock(self, *r)?),
            Q::EvalReap(r) => A::EvalReap(eval::reap(self, r).await?),
            Q::PlanSubmit(plan) => A::PlanSubmit(plan::submit(self, *plan).await?),
            Q::PlanSubmitBatch(plans) => A::PlanSubmitBatch(plan::submit_batch(self, plans).await?),
            Q::EvalAckBatch(acks) => A::EvalAckBatch(eval::ack_batch(self, acks)?),
            Q::NodeRegister(r) => A::NodeRegister(node::register(self, *r).await?),
            Q::NodeUpdateStatus(r) => A::NodeUpdateStatus(node::update_status(self, r).await?),
            Q::NodeUpdateAlloc(r) => A::NodeUpdateAlloc(node::update_alloc(self, r).await?),
            Q::NodeGetClientAllocs(r) => {
                A::NodeGetClientAllocs(Box::new(node::get_client_allocs(self, r).await?))
            }
            Q::NodeDeregister(r) => A::NodeDeregister(node::deregister(self, r).await?),
            Q::NodeEvaluate(r) => A::NodeEvaluate(node::evaluate(self, r).await?),
            Q::NodeUpdateEligibility(r) => {
                A::NodeUpdateEligibility(node::update_eligibility(self, r).await?)
            }
            Q::NodeUpdateDrain(r) => A::NodeUpdateDrain(node::update_drain(self, r).await?),
            Q::OperatorRaftJoin(r) => A::OperatorRaftJoin(operator::raft_join(self, r).await?),
            Q::OperatorRaftRemovePeer(r) => {
                A::OperatorRaftRemovePeer(operator::raft_remove_peer(self, r).await?)
            }
            Q::OperatorSchedulerSetConfiguration(r) => {
                A::OperatorSchedulerSetConfiguration(operator::set_scheduler_config(self, r).await?)
            }
            Q::OperatorSnapshotRestore(r) => {
                A::OperatorSnapshotRestore(operator::snapshot_restore(self, r).await?)
            }
            Q::OperatorBrokerStats(_) => A::OperatorBrokerStats(operator::broker_stats(self)),
            Q::DeploymentFail(r) => A::DeploymentFail(deployment::fail(self, r).await?),
            Q::DeploymentPause(r) => A::DeploymentPause(deployment::pause(self, r).await?),
            Q::DeploymentPromote(r) => A::DeploymentPromote(deployment::promote(self, r).await?),
            Q::DeploymentSetAllocHealth(r) => {
                A::DeploymentSetAllocHealth(deployment::set_alloc_health(self, r).await?)
            }
            Q::ServiceRegistrationUpsert(r) => {
                A::ServiceRegistrationUpsert(service_reg::upsert(self, r).await?)
            }
            Q::ServiceRegistrationDelete(r) => {
                A::ServiceRegistrationDelete(service_reg::delete(self, r).await?)
            }
            Q::ServiceRegistrationListByNode(r) => {
                A::ServiceRegistrationListByNode(service_reg::list_by_node(self, r))
            }
            Q::NamespaceUpsert(r) => A::NamespaceUpsert(namespace::upsert(self, r).await?),
            Q::NamespaceDelete(r) => A::NamespaceDelete(namespace::delete(self, r).await?),
            Q::AclBootstrap(r) => A::AclBootstrap(acl::bootstrap(self, r).await?),
            Q::AclUpsertPolicies(r) => A::AclUpsertPolicies(acl::upsert_policies(self, r).await?),
            Q::AclDeletePolicies(r) => A::AclDeletePolicies(acl::delete_policies(self, r).await?),
            Q::AclUpsertTokens(r) => A::AclUpsertTokens(acl::upsert_tokens(self, r).await?),
            Q::AclDeleteTokens(r) => A::AclDeleteTokens(acl::delete_tokens(self, r).await?),
            Q::AclResolveToken(r) => A::AclResolveToken(acl::resolve_token(self, r)?),
        })
    }

    /// Commit `cmd` through raft on this server as the leader: the raft index, or the
    /// state's refusal as a typed error.
    pub(crate) async fn write(&self, cmd: Command) -> Result<(u64, CommandResponse), ServiceError> {
        let applied = self
            .inner
            .node
            .write_local(cmd)
            .await
            .map_err(write_error)?;
        if let Some(e) = first_rejection(&applied.response) {
            return Err(apply_error(e));
        }
        Ok((applied.index, applied.response))
    }
}

/// The service layer called in process (the HTTP API, the scheduler workers): calls come
/// from [`Origin::Local`].
impl ServiceCaller for Endpoints {
    fn call(&self, req: ServiceRequest) -> BoxFuture<'_, Result<ServiceResponse, ServiceError>> {
        Box::pin(Endpoints::call(self, Origin::Local, req))
    }
}

/// What a leader subsystem call is told where it cannot be served, in Nomad's words.
pub(crate) fn disabled_reason(method: Method) -> &'static str {
    if method.name == "Plan.Submit" {
        "plan queue is disabled"
    } else {
        "eval broker disabled"
    }
}

pub(crate) fn first_rejection(resp: &CommandResponse) -> Option<&ApplyError> {
    match resp {
        CommandResponse::Rejected(e) => Some(e),
        CommandResponse::Batch(all) => all.iter().find_map(first_rejection),
        _ => None,
    }
}

/// A raft write's failure as the caller sees it.
pub fn write_error(e: WriteError) -> ServiceError {
    match e {
        WriteError::NotLeader { leader } => ServiceError::NotLeader { leader },
        WriteError::NoLeader => ServiceError::NoLeader,
        // The write may have been proposed: never "not served".
        WriteError::ShuttingDown | WriteError::LeadershipLost => {
            ServiceError::internal(format!("{e}; the write may or may not be committed"))
        }
        WriteError::Raft(reason) => ServiceError::internal(format!("raft error: {reason}")),
    }
}

/// The state's refusal of a command as the caller sees it.
pub fn apply_error(e: &ApplyError) -> ServiceError {
    match e {
        ApplyError::JobNotFound { job_id, .. } => ServiceError::not_found("job", job_id.as_str()),
        ApplyError::NodeNotFound { node_id } => ServiceError::not_found("node", node_id.as_str()),
        ApplyError::EvalNotFound { eval_id } => {
            ServiceError::not_found("evaluation", eval_id.as_str())
        }
        ApplyError::AllocNotFound { alloc_id } => {
            ServiceError::not_found("allocation", alloc_id.as_str())
        }
        ApplyError::JobVersionNotFound {
            job_id, version, ..
        } => ServiceError::not_found("job version", format!("{job_id} version {version}")),
        ApplyError::DeploymentNotFound { deployment_id } => {
            ServiceError::not_found("deployment", deployment_id.as_str())
        }
        ApplyError::InvalidCommand { .. } => ServiceError::invalid("", e.to_string()),
        ApplyError::NamespaceNotFound { .. } => ServiceError::invalid("Namespace", e.to_string()),
        ApplyError::ServiceRegistrationNotFound { id, .. } => {
            ServiceError::not_found("service registration", id.as_str())
        }
        ApplyError::AclRefused { .. }
        | ApplyError::KeyringRefused { .. }
        | ApplyError::VariableRefused { .. } => ServiceError::invalid("", e.to_string()),
        ApplyError::RootKeyNotFound { key_id } => {
            ServiceError::not_found("root key", key_id.as_str())
        }
        ApplyError::AclNotFound { kind, id } => ServiceError::not_found(kind, id.as_str()),
        ApplyError::AclBootstrapDone { reset_index, given } if *given != 0 => {
            ServiceError::invalid(
                "",
                format!(
                    "Invalid bootstrap reset index (specified {given}, reset index: {reset_index})"
                ),
            )
        }
        ApplyError::AclBootstrapDone { .. } => ServiceError::invalid("", e.to_string()),
        other => ServiceError::rejected(other.to_string()),
    }
}

/// A raft node failure as the caller sees it.
pub fn node_error(e: RaftNodeError) -> ServiceError {
    match e {
        RaftNodeError::NotLeader { leader } => ServiceError::NotLeader { leader },
        RaftNodeError::NoLeader => ServiceError::NoLeader,
        RaftNodeError::Rpc(e) => ServiceError::from(e),
        RaftNodeError::UnknownPeer(id) => ServiceError::not_found("raft peer", id),
        other => ServiceError::internal(other.to_string()),
    }
}

/// A broker or blocked-evals refusal as the caller sees it.
pub fn broker_error(e: BrokerError) -> ServiceError {
    match e {
        BrokerError::Disabled | BrokerError::BlockedEvalsDisabled => {
            ServiceError::disabled(e.to_string())
        }
        BrokerError::NoSchedulers => ServiceError::invalid("Schedulers", e.to_string()),
        BrokerError::InvalidConfig(_) => ServiceError::internal(e.to_string()),
        other => ServiceError::rejected(other.to_string()),
    }
}

/// A plan queue refusal as the caller sees it.
pub fn plan_error(e: PlanQueueError) -> ServiceError {
    match e {
        PlanQueueError::Disabled | PlanQueueError::Flushed => ServiceError::disabled(e.to_string()),
        other => ServiceError::internal(other.to_string()),
    }
}

/// The server's handler of the RPC port. The raft node and the service layer are set once
/// they have started; until then raft traffic is answered `Unsupported` and service calls
/// `Unavailable`, which callers treat as "not ready, retry".
#[derive(Clone, Default)]
pub struct ServerRpc {
    node: Arc<OnceLock<Arc<RaftNode>>>,
    endpoints: Arc<OnceLock<Endpoints>>,
    discovered: Discovered,
}

impl ServerRpc {
    /// A handler whose node and service layer are set later.
    pub fn new(discovered: Discovered) -> ServerRpc {
        ServerRpc {
            node: Arc::new(OnceLock::new()),
            endpoints: Arc::new(OnceLock::new()),
            discovered,
        }
    }

    /// Start serving raft and status calls with `node`.
    pub fn set_node(&self, node: Arc<RaftNode>) {
        let _ = self.node.set(node);
    }

    /// Start serving service calls with `endpoints`.
    pub fn set_endpoints(&self, endpoints: Endpoints) {
        let _ = self.endpoints.set(endpoints);
    }
}

impl RpcHandler for ServerRpc {
    fn handle(
        &self,
        ctx: RequestContext,
        req: RpcRequest,
    ) -> BoxFuture<'static, Result<RpcResponse, RpcError>> {
        let node = self.node.get().cloned();
        let endpoints = self.endpoints.get().cloned();
        let discovered = self.discovered.clone();
        Box::pin(async move {
            let (token, req) = match req {
                RpcRequest::AuthService(authed) => {
                    (Some(authed.token), RpcRequest::Service(authed.call))
                }
                other => (None, other),
            };
            if let RpcRequest::Service(call) = req {
                let Some(endpoints) = endpoints else {
                    return Ok(RpcResponse::Service(Err(ServiceError::Unavailable {
                        reason: "the server is starting".into(),
                    })));
                };
                let origin = match &call {
                    // A joining server asks any member it knows, possibly one that just
                    // stopped leading: its own join is forwarded like an outsider's.
                    ServiceRequest::OperatorRaftJoin(join) if join.id == ctx.from => {
                        Origin::Outside
                    }
                    _ => origin_of(endpoints.node(), ctx.from),
                };
                // A workload identity is trusted outside the cluster (the JWKS is public): it
                // is signed only for the node running the allocation, ACLs on or off.
                let always_checked = matches!(call, ServiceRequest::AllocSignIdentities(_));
                if (endpoints.acl_enabled() || always_checked)
                    && !authz::is_own_leave(origin, &call, ctx.tls, ctx.role)
                {
                    if let Err(e) = authz::authorize(&endpoints, origin, token.as_deref(), &call) {
                        tracing::debug!(method = call.method().name, peer = %ctx.peer_addr, ?origin, error = %e, "call refused by ACL");
                        return Ok(RpcResponse::Service(Err(e)));
                    }
                }
                // Forwarded again (to a new leader), the call keeps its credential.
                let answer = with_caller_token(token, endpoints.call(origin, call)).await;
                return Ok(RpcResponse::Service(answer));
            }
            let Some(node) = node else {
                return Err(RpcError::Unsupported {
                    kind: req.kind().to_string(),
                });
            };
            Ok(match req {
                RpcRequest::AppendEntries(r) => {
                    RpcResponse::AppendEntries(node.raft().append_entries(r).await)
                }
                RpcRequest::Vote(r) => RpcResponse::Vote(node.raft().vote(r).await),
                RpcRequest::InstallSnapshot(r) => {
                    RpcResponse::InstallSnapshot(node.install_snapshot_chunk(r).await)
                }
                RpcRequest::Ping => RpcResponse::Ping {
                    server_id: node.id(),
                },
                RpcRequest::ServerInfo => {
                    RpcResponse::ServerInfo(my_info(&node, &discovered).await)
                }
                RpcRequest::ReadIndex => {
                    RpcResponse::ReadIndex(node.leader_read_index().await.map_err(node_error))
                }
                RpcRequest::TimeoutNow => RpcResponse::TimeoutNow(
                    crate::server::handover::on_timeout_now(&node, ctx.from).await,
                ),
                // Only to another raft member (the role check has made sure of a server
                // certificate where TLS names roles).
                RpcRequest::KeyringKek(kek_id) => {
                    let member = is_peer_server(&node, &ctx);
                    let kek = endpoints
                        .filter(|_| member)
                        .and_then(|ep| ep.keyring().local_kek(&kek_id));
                    if !member {
                        tracing::warn!(peer = %ctx.peer_addr, "Keyring.Kek refused: not a raft member");
                    }
                    RpcResponse::KeyringKek(kek.map(|k| k.as_bytes().to_vec()))
                }
                // Answered above; kept here so the match stays exhaustive.
                other @ (RpcRequest::Service(_) | RpcRequest::AuthService(_)) => {
                    return Err(RpcError::Unsupported {
                        kind: other.kind().to_string(),
                    })
                }
            })
        })
    }
}

/// Whether the sender of `ctx` is another server of the cluster: with TLS, by the server
/// role of its certificate; without TLS only by the raft id in the frame header naming a
/// member, a claim anyone who can reach the port can make (as without TLS in Nomad, whose
/// keyring is then open to the same callers; docs/operations.md says to use mutual TLS).
fn is_peer_server(node: &RaftNode, ctx: &RequestContext) -> bool {
    if ctx.from == node.id() || ctx.from == 0 || !node.is_member(ctx.from) {
        return false;
    }
    !ctx.tls || ctx.role == Some(crate::util::tls::PeerRole::Server)
}

/// Where a call on the RPC port comes from: the sender's raft id from the frame header.
fn origin_of(node: &RaftNode, from: ServerId) -> Origin {
    if from == node.id() {
        Origin::Local
    } else if from != 0 && node.is_member(from) {
        Origin::Server(from)
    } else {
        Origin::Outside
    }
}
