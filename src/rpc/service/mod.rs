//! The service calls: every request a server's service layer (`server::endpoints`) accepts —
//! `Job.*`, `Node.*`, `Eval.*`, `Alloc.*`, `Plan.Submit`, `Operator.*`, `Deployment.*`,
//! `ServiceRegistration.*`, `Namespace.*` — typed, with typed
//! answers and a typed [`ServiceError`]. The HTTP API, the scheduler workers and client
//! agents all speak them; a follower forwards the *request* to the leader unchanged and hands
//! the leader's answer (or error) back unchanged.
//!
//! Everything the code needs to know about a call is in ONE table, the `service_calls!`
//! invocation below: its variant, payload, answer, Nomad-style name, where it is served
//! ([`Route`]), how long a caller waits for it, and the name of its typed helper on
//! [`Services`]. The macro turns the table into [`ServiceRequest`], [`ServiceResponse`],
//! [`ServiceRequest::method`] and the [`Services`] helpers, so adding a call is adding a row
//! (at the end: the variant index is the wire encoding).
//!
//! ```text
//!  HTTP handler ─┐                         ┌─ Route::Local ─────────── served here
//!  worker ───────┼─▶ ServiceCaller::call ──┼─ Route::Leader ── leader? served : forward (hold)
//!  client agent ─┘   (Services helpers)    └─ Route::LeaderSubsystem ─ established? served : forward once
//! ```
//!
//! May import: `rpc` (the transport), `util`, the storage crate's model.

pub mod acl;
pub mod alloc;
pub mod credential;
pub mod deployment;
pub mod error;
pub mod eval;
pub mod job;
pub mod namespace;
pub mod node;
pub mod operator;
pub mod roles;
pub mod service_reg;
pub mod variables;

use std::future::Future;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use teamster_storage::model::{Plan, PlanResult};

use acl::{
    AclBootstrapRequest, AclDeletePoliciesRequest, AclDeleteTokensRequest, AclResolveTokenRequest,
    AclResolvedToken, AclUpsertPoliciesRequest, AclUpsertTokensRequest,
};
use alloc::{
    AllocSignIdentitiesRequest, AllocSignIdentitiesResponse, AllocStopRequest, AllocStopResponse,
};
use deployment::{
    DeploymentAllocHealthRequest, DeploymentFailRequest, DeploymentPauseRequest,
    DeploymentPromoteRequest, DeploymentUpdateResponse,
};
pub use error::ServiceError;
use eval::{
    DequeuedEval, EvalAckRequest, EvalDequeueBatchRequest, EvalDequeueRequest, EvalReapRequest,
    EvalWriteRequest,
};
use job::{
    JobBatchDeregisterRequest, JobDeregisterRequest, JobDeregisterResponse, JobDispatchRequest,
    JobDispatchResponse, JobEvaluateRequest, JobEvaluateResponse, JobPeriodicForceRequest,
    JobPeriodicForceResponse, JobPlanRequest, JobPlanResponse, JobRegisterRequest,
    JobRegisterResponse, JobRevertRequest, JobScaleRequest, JobScaleResponse, JobStabilityRequest,
};
use namespace::{NamespaceDeleteRequest, NamespaceUpsertRequest};
use node::{
    NodeClientAllocsResponse, NodeDeregisterRequest, NodeEvalsResponse, NodeEvaluateRequest,
    NodeGetClientAllocsRequest, NodeHeartbeatResponse, NodeRegisterRequest, NodeUpdateAllocRequest,
    NodeUpdateDrainRequest, NodeUpdateEligibilityRequest, NodeUpdateStatusRequest,
};
use operator::{
    AutopilotSetConfigRequest, BrokerStatsRequest, BrokerStatsResponse, ClusterHealth,
    KeyringDeleteRequest, KeyringListPublicRequest, KeyringPublicKeys, KeyringRotateRequest,
    RaftJoinRequest, RaftRemovePeerRequest, ReconcileSummariesRequest, SchedulerSetConfigRequest,
    SchedulerSetConfigResponse, ServerHealthRequest, SnapshotRestoreRequest, SystemGcRequest,
    SystemGcResponse,
};
use service_reg::{
    ServiceRegistrationDeleteRequest, ServiceRegistrationListRequest,
    ServiceRegistrationUpsertRequest,
};

/// Where a call is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// By the raft leader (it writes through raft). A follower forwards it, waiting up to
    /// the hold timeout for a leader and retrying while leadership moves.
    Leader,
    /// By the leader's established subsystems (the eval broker, the plan queue). A follower
    /// forwards it once and does not wait; elsewhere it is refused as
    /// [`ServiceError::Disabled`], and the caller retries with backoff.
    LeaderSubsystem,
    /// By whichever server is asked, from its local state.
    Local,
}

/// What a call is, for routing, forwarding and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Method {
    /// Its name, Nomad's `Endpoint.Method` style (`Job.Register`).
    pub name: &'static str,
    /// Where it is served.
    pub route: Route,
    /// How long a caller (or a forwarding server) waits for its answer.
    pub timeout: Duration,
}

/// Deadline of calls that write through raft.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Deadline of the client agents' node calls.
pub const NODE_TIMEOUT: Duration = Duration::from_secs(10);
/// Deadline of a `Plan.Submit` (the plan may wait behind others and a commit).
pub const PLAN_TIMEOUT: Duration = Duration::from_secs(60);
/// Deadline of a membership change or a restore (a joining server catches up first).
pub const OPERATOR_TIMEOUT: Duration = Duration::from_secs(60);
/// What a blocking call gets on top of its own wait.
pub const WAIT_MARGIN: Duration = Duration::from_secs(10);
/// The dequeue wait when the caller names none (Nomad's `DefaultDequeueTimeout`).
pub const DEFAULT_DEQUEUE_TIMEOUT: Duration = Duration::from_secs(1);
/// The longest dequeue wait a caller may ask for.
pub const MAX_DEQUEUE_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest a client's allocation query may wait.
pub const MAX_CLIENT_ALLOCS_WAIT: Duration = Duration::from_secs(300);

/// The wait of an `Eval.Dequeue` asking for `timeout_ms`.
pub fn dequeue_wait(timeout_ms: u64) -> Duration {
    if timeout_ms == 0 {
        DEFAULT_DEQUEUE_TIMEOUT
    } else {
        Duration::from_millis(timeout_ms).min(MAX_DEQUEUE_TIMEOUT)
    }
}

/// Something that serves service calls: the local service layer, or a remote server
/// through the RPC pool (with failover, for client agents).
pub trait ServiceCaller: Send + Sync {
    /// Serve `req`.
    fn call(&self, req: ServiceRequest) -> BoxFuture<'_, Result<ServiceResponse, ServiceError>>;
}

macro_rules! service_calls {
    ($(
        $(#[$doc:meta])*
        $variant:ident($req:ty) -> $resp:ty {
            name: $name:literal,
            route: $route:ident,
            timeout: |$r:pat_param| $timeout:expr,
            helper: $helper:ident $(,)?
        }
    )*) => {
        /// A service call. A wire enum: rows are only ever appended to the table.
        #[derive(Debug, Clone, Serialize, Deserialize)]
        pub enum ServiceRequest {
            $( $(#[$doc])* $variant($req), )*
        }

        /// The answer to the [`ServiceRequest`] variant of the same name.
        #[derive(Debug, Clone, Serialize, Deserialize)]
        pub enum ServiceResponse {
            $( #[doc = concat!("The answer to `", $name, "`.")] $variant($resp), )*
        }

        impl ServiceRequest {
            /// The name of every call in the table, in table (wire) order.
            pub const NAMES: &'static [&'static str] = &[$($name),*];

            /// What this call is.
            pub fn method(&self) -> Method {
                match self {
                    $( ServiceRequest::$variant($r) => Method {
                        name: $name,
                        route: Route::$route,
                        timeout: $timeout,
                    }, )*
                }
            }
        }

        impl ServiceResponse {
            /// The name of the call this answers.
            pub fn name(&self) -> &'static str {
                match self {
                    $( ServiceResponse::$variant(_) => $name, )*
                }
            }
        }

        /// Typed helpers over any [`ServiceCaller`]: one per call.
        pub trait Services: ServiceCaller {
            $(
                #[doc = concat!("`", $name, "`.")]
                fn $helper(
                    &self,
                    req: $req,
                ) -> impl Future<Output = Result<$resp, ServiceError>> + Send {
                    async move {
                        match self.call(ServiceRequest::$variant(req)).await? {
                            ServiceResponse::$variant(answer) => Ok(answer),
                            other => Err(ServiceError::unexpected($name, other.name())),
                        }
                    }
                }
            )*
        }

        impl<T: ServiceCaller + ?Sized> Services for T {}
    };
}

service_calls! {
    /// Register a job and create its evaluation.
    JobRegister(Box<JobRegisterRequest>) -> JobRegisterResponse {
        name: "Job.Register", route: Leader, timeout: |_| WRITE_TIMEOUT, helper: job_register,
    }
    /// Stop or purge a job, with an evaluation.
    JobDeregister(JobDeregisterRequest) -> JobDeregisterResponse {
        name: "Job.Deregister", route: Leader, timeout: |_| WRITE_TIMEOUT, helper: job_deregister,
    }
    /// Create a new evaluation of a job.
    JobEvaluate(JobEvaluateRequest) -> JobEvaluateResponse {
        name: "Job.Evaluate", route: Leader, timeout: |_| WRITE_TIMEOUT, helper: job_evaluate,
    }
    /// Purge jobs without evaluations (garbage collection): the raft index.
    JobBatchDeregister(JobBatchDeregisterRequest) -> u64 {
        name: "Job.BatchDeregister", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: job_batch_deregister,
    }
    /// An evaluation for a worker, or `None` when the wait ended without work.
    EvalDequeue(EvalDequeueRequest) -> Option<Box<DequeuedEval>> {
        name: "Eval.Dequeue", route: LeaderSubsystem,
        timeout: |r| dequeue_wait(r.timeout_ms) + WAIT_MARGIN, helper: eval_dequeue,
    }
    /// The evaluation was processed.
    EvalAck(EvalAckRequest) -> () {
        name: "Eval.Ack", route: LeaderSubsystem, timeout: |_| WRITE_TIMEOUT, helper: eval_ack,
    }
    /// The evaluation failed; redeliver it later.
    EvalNack(EvalAckRequest) -> () {
        name: "Eval.Nack", route: LeaderSubsystem, timeout: |_| WRITE_TIMEOUT, helper: eval_nack,
    }
    /// The scheduler updates the evaluation it holds: the raft index.
    EvalUpdate(Box<EvalWriteRequest>) -> u64 {
        name: "Eval.Update", route: LeaderSubsystem, timeout: |_| WRITE_TIMEOUT,
        helper: eval_update,
    }
    /// The scheduler creates a follow-up or blocked evaluation: the raft index.
    EvalCreate(Box<EvalWriteRequest>) -> u64 {
        name: "Eval.Create", route: LeaderSubsystem, timeout: |_| WRITE_TIMEOUT,
        helper: eval_create,
    }
    /// The scheduler puts a blocked evaluation it dequeued back to blocked.
    EvalReblock(Box<EvalWriteRequest>) -> u64 {
        name: "Eval.Reblock", route: LeaderSubsystem, timeout: |_| WRITE_TIMEOUT,
        helper: eval_reblock,
    }
    /// Delete terminal evaluations and allocations (garbage collection): the raft index.
    EvalReap(EvalReapRequest) -> u64 {
        name: "Eval.Reap", route: Leader, timeout: |_| WRITE_TIMEOUT, helper: eval_reap,
    }
    /// A worker submits a plan to the leader's plan queue: what the applier committed.
    PlanSubmit(Box<Plan>) -> Box<PlanResult> {
        name: "Plan.Submit", route: LeaderSubsystem, timeout: |_| PLAN_TIMEOUT,
        helper: plan_submit,
    }
    /// A client registers its node.
    NodeRegister(Box<NodeRegisterRequest>) -> NodeHeartbeatResponse {
        name: "Node.Register", route: Leader, timeout: |_| NODE_TIMEOUT, helper: node_register,
    }
    /// A client's heartbeat.
    NodeUpdateStatus(NodeUpdateStatusRequest) -> NodeHeartbeatResponse {
        name: "Node.UpdateStatus", route: Leader, timeout: |_| NODE_TIMEOUT,
        helper: node_update_status,
    }
    /// Batched client allocation updates: the raft index.
    NodeUpdateAlloc(NodeUpdateAllocRequest) -> u64 {
        name: "Node.UpdateAlloc", route: Leader, timeout: |_| NODE_TIMEOUT,
        helper: node_update_alloc,
    }
    /// A client's blocking query for its allocations.
    NodeGetClientAllocs(NodeGetClientAllocsRequest) -> Box<NodeClientAllocsResponse> {
        name: "Node.GetClientAllocs", route: Local,
        timeout: |r| Duration::from_millis(r.wait_ms).min(MAX_CLIENT_ALLOCS_WAIT) + WAIT_MARGIN,
        helper: node_get_client_allocs,
    }
    /// Remove a node, with evaluations for what ran on it.
    NodeDeregister(NodeDeregisterRequest) -> NodeEvalsResponse {
        name: "Node.Deregister", route: Leader, timeout: |_| NODE_TIMEOUT,
        helper: node_deregister,
    }
    /// Evaluate again what runs or could run on a node.
    NodeEvaluate(NodeEvaluateRequest) -> NodeEvalsResponse {
        name: "Node.Evaluate", route: Leader, timeout: |_| NODE_TIMEOUT,
        helper: node_evaluate,
    }
    /// Allow or forbid new placements on a node.
    NodeUpdateEligibility(NodeUpdateEligibilityRequest) -> NodeEvalsResponse {
        name: "Node.UpdateEligibility", route: Leader, timeout: |_| NODE_TIMEOUT,
        helper: node_update_eligibility,
    }
    /// Start or cancel a drain.
    NodeUpdateDrain(NodeUpdateDrainRequest) -> NodeEvalsResponse {
        name: "Node.UpdateDrain", route: Leader, timeout: |_| NODE_TIMEOUT,
        helper: node_update_drain,
    }
    /// Add a server to the cluster.
    OperatorRaftJoin(RaftJoinRequest) -> () {
        name: "Operator.RaftJoin", route: Leader, timeout: |_| OPERATOR_TIMEOUT,
        helper: operator_raft_join,
    }
    /// Remove a server from the raft configuration.
    OperatorRaftRemovePeer(RaftRemovePeerRequest) -> () {
        name: "Operator.RaftRemovePeer", route: Leader, timeout: |_| OPERATOR_TIMEOUT,
        helper: operator_raft_remove_peer,
    }
    /// Change the scheduler configuration.
    OperatorSchedulerSetConfiguration(SchedulerSetConfigRequest) -> SchedulerSetConfigResponse {
        name: "Operator.SchedulerSetConfiguration", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: operator_scheduler_set_configuration,
    }
    /// Replace the state with a snapshot image: the raft index.
    OperatorSnapshotRestore(SnapshotRestoreRequest) -> u64 {
        name: "Operator.SnapshotRestore", route: Leader, timeout: |_| OPERATOR_TIMEOUT,
        helper: operator_snapshot_restore,
    }
    /// The leader's broker, blocked-evals and plan-queue counts.
    OperatorBrokerStats(BrokerStatsRequest) -> BrokerStatsResponse {
        name: "Operator.BrokerStats", route: Leader, timeout: |_| NODE_TIMEOUT,
        helper: operator_broker_stats,
    }
    /// Register an earlier version of a job again, as a new version, with its evaluation.
    JobRevert(JobRevertRequest) -> JobRegisterResponse {
        name: "Job.Revert", route: Leader, timeout: |_| WRITE_TIMEOUT, helper: job_revert,
    }
    /// What registering a job would do, with its diff; nothing is written.
    JobPlan(Box<JobPlanRequest>) -> Box<JobPlanResponse> {
        name: "Job.Plan", route: Leader, timeout: |_| WRITE_TIMEOUT, helper: job_plan,
    }
    /// Scale a task group within its bounds, or record a scaling event.
    JobScale(Box<JobScaleRequest>) -> JobScaleResponse {
        name: "Job.Scale", route: Leader, timeout: |_| WRITE_TIMEOUT, helper: job_scale,
    }
    /// Mark a job version stable or not: the raft index.
    JobStable(JobStabilityRequest) -> u64 {
        name: "Job.Stable", route: Leader, timeout: |_| WRITE_TIMEOUT, helper: job_stable,
    }
    /// Launch a periodic job's child now.
    JobPeriodicForce(JobPeriodicForceRequest) -> JobPeriodicForceResponse {
        name: "Job.PeriodicForce", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: job_periodic_force,
    }
    /// Launch a child of a parameterized job.
    JobDispatch(Box<JobDispatchRequest>) -> JobDispatchResponse {
        name: "Job.Dispatch", route: Leader, timeout: |_| WRITE_TIMEOUT, helper: job_dispatch,
    }
    /// Garbage-collect now, whatever the age thresholds: writes a `force-gc` evaluation.
    SystemGc(SystemGcRequest) -> SystemGcResponse {
        name: "System.GarbageCollect", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: system_gc,
    }
    /// Up to `max` evaluations for a worker, waiting for the first; empty when the wait
    /// ended without work.
    EvalDequeueBatch(EvalDequeueBatchRequest) -> Vec<DequeuedEval> {
        name: "Eval.DequeueBatch", route: LeaderSubsystem,
        timeout: |r| dequeue_wait(r.timeout_ms) + WAIT_MARGIN, helper: eval_dequeue_batch,
    }
    /// Stop an allocation and place a replacement: marks it to migrate, with an evaluation.
    AllocStop(AllocStopRequest) -> AllocStopResponse {
        name: "Alloc.Stop", route: Leader, timeout: |_| WRITE_TIMEOUT, helper: alloc_stop,
    }
    /// Recompute every job's summary from its allocations: the raft index.
    SystemReconcileSummaries(ReconcileSummariesRequest) -> u64 {
        name: "System.ReconcileJobSummaries", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: system_reconcile_summaries,
    }
    /// A worker's batch of plans, one per evaluation, in one call: each plan's own result
    /// or error, in order.
    PlanSubmitBatch(Vec<Plan>) -> Vec<Result<PlanResult, ServiceError>> {
        name: "Plan.SubmitBatch", route: LeaderSubsystem, timeout: |_| PLAN_TIMEOUT,
        helper: plan_submit_batch,
    }
    /// A worker's batch of acknowledgements: each one's outcome, in order.
    EvalAckBatch(Vec<EvalAckRequest>) -> Vec<Result<(), ServiceError>> {
        name: "Eval.AckBatch", route: LeaderSubsystem, timeout: |_| WRITE_TIMEOUT,
        helper: eval_ack_batch,
    }
    /// Mark a deployment failed (auto-reverting when a group asks), with an evaluation.
    DeploymentFail(DeploymentFailRequest) -> DeploymentUpdateResponse {
        name: "Deployment.Fail", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: deployment_fail,
    }
    /// Pause a deployment, or resume it with an evaluation.
    DeploymentPause(DeploymentPauseRequest) -> DeploymentUpdateResponse {
        name: "Deployment.Pause", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: deployment_pause,
    }
    /// Promote a deployment's canaries, with an evaluation.
    DeploymentPromote(DeploymentPromoteRequest) -> DeploymentUpdateResponse {
        name: "Deployment.Promote", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: deployment_promote,
    }
    /// Mark allocations of a deployment healthy or unhealthy, with an evaluation.
    DeploymentSetAllocHealth(DeploymentAllocHealthRequest) -> DeploymentUpdateResponse {
        name: "Deployment.SetAllocHealth", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: deployment_set_alloc_health,
    }
    /// Register services of running allocations; the raft index.
    ServiceRegistrationUpsert(ServiceRegistrationUpsertRequest) -> u64 {
        name: "ServiceRegistration.Upsert", route: Leader, timeout: |_| NODE_TIMEOUT,
        helper: service_registration_upsert,
    }
    /// Remove service registrations by name and ID; the raft index.
    ServiceRegistrationDelete(ServiceRegistrationDeleteRequest) -> u64 {
        name: "ServiceRegistration.DeleteByID", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: service_registration_delete,
    }
    /// Create or describe namespaces; the raft index.
    NamespaceUpsert(NamespaceUpsertRequest) -> u64 {
        name: "Namespace.UpsertNamespaces", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: namespace_upsert,
    }
    /// Delete namespaces that hold no job; the raft index.
    NamespaceDelete(NamespaceDeleteRequest) -> u64 {
        name: "Namespace.DeleteNamespaces", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: namespace_delete,
    }
    /// The service registrations of a node's allocations, from the answering server's state.
    ServiceRegistrationListByNode(ServiceRegistrationListRequest) -> Vec<teamster_storage::model::ServiceRegistration> {
        name: "ServiceRegistration.ListByNode", route: Local, timeout: |_| NODE_TIMEOUT,
        helper: service_registration_list_by_node,
    }
    /// The one-time ACL bootstrap: the management token made.
    AclBootstrap(AclBootstrapRequest) -> teamster_storage::model::AclToken {
        name: "ACL.Bootstrap", route: Leader, timeout: |_| WRITE_TIMEOUT, helper: acl_bootstrap,
    }
    /// Create or change ACL policies; the raft index.
    AclUpsertPolicies(AclUpsertPoliciesRequest) -> u64 {
        name: "ACL.UpsertPolicies", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: acl_upsert_policies,
    }
    /// Delete ACL policies; the raft index.
    AclDeletePolicies(AclDeletePoliciesRequest) -> u64 {
        name: "ACL.DeletePolicies", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: acl_delete_policies,
    }
    /// Create or change ACL tokens: the tokens as written, secrets included.
    AclUpsertTokens(AclUpsertTokensRequest) -> Vec<teamster_storage::model::AclToken> {
        name: "ACL.UpsertTokens", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: acl_upsert_tokens,
    }
    /// Delete ACL tokens; the raft index.
    AclDeleteTokens(AclDeleteTokensRequest) -> u64 {
        name: "ACL.DeleteTokens", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: acl_delete_tokens,
    }
    /// What a secret may do, from the answering server's state (for client agents).
    AclResolveToken(AclResolveTokenRequest) -> AclResolvedToken {
        name: "ACL.ResolveToken", route: Local, timeout: |_| NODE_TIMEOUT,
        helper: acl_resolve_token,
    }
    /// A client's tasks' workload identities, signed by the active root key.
    AllocSignIdentities(AllocSignIdentitiesRequest) -> AllocSignIdentitiesResponse {
        name: "Alloc.SignIdentities", route: Leader, timeout: |_| NODE_TIMEOUT,
        helper: alloc_sign_identities,
    }
    /// A new root key: its metadata.
    KeyringRotate(KeyringRotateRequest) -> teamster_storage::model::RootKeyMeta {
        name: "Keyring.Rotate", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: keyring_rotate,
    }
    /// Remove a root key: the raft index.
    KeyringDelete(KeyringDeleteRequest) -> u64 {
        name: "Keyring.Delete", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: keyring_delete,
    }
    /// Write or delete a variable (encrypted by the leader).
    VariablesApply(variables::VariablesApplyRequest) -> variables::VariablesApplyResponse {
        name: "Variables.Apply", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: variables_apply,
    }
    /// A one-time token for the caller's ACL token.
    AclUpsertOneTimeToken(acl::OneTimeTokenUpsertRequest) -> teamster_storage::model::OneTimeToken {
        name: "ACL.UpsertOneTimeToken", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: acl_upsert_one_time_token,
    }
    /// A one-time token exchanged (once) for its ACL token.
    AclExchangeOneTimeToken(acl::OneTimeTokenExchangeRequest) -> (teamster_storage::model::AclToken, u64) {
        name: "ACL.ExchangeOneTimeToken", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: acl_exchange_one_time_token,
    }
    /// What a task's templates read (variables and services), made with its workload
    /// identity; blocking.
    TemplateRead(variables::TemplateReadRequest) -> variables::TemplateReadResponse {
        name: "Template.Read", route: Local,
        timeout: |r| Duration::from_millis(r.wait_ms).min(MAX_TEMPLATE_WAIT) + WAIT_MARGIN,
        helper: template_read,
    }
    /// Renew a variable's lock (its holder); the answer is the variable's metadata.
    VariablesRenewLock(variables::VariablesRenewLockRequest) -> variables::VariablesRenewLockResponse {
        name: "Variables.RenewLock", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: variables_renew_lock,
    }
    /// The public keys that verify workload identities (for client agents' JWKS).
    KeyringListPublic(KeyringListPublicRequest) -> KeyringPublicKeys {
        name: "Keyring.ListPublic", route: Local, timeout: |_| NODE_TIMEOUT,
        helper: keyring_list_public,
    }
    /// Set autopilot's configuration (check-and-set optional): whether it was written.
    OperatorAutopilotSetConfiguration(AutopilotSetConfigRequest) -> SchedulerSetConfigResponse {
        name: "Operator.AutopilotSetConfiguration", route: Leader, timeout: |_| WRITE_TIMEOUT,
        helper: operator_autopilot_set_configuration,
    }
    /// The servers' health as the leader's autopilot judged it.
    OperatorServerHealth(ServerHealthRequest) -> ClusterHealth {
        name: "Operator.ServerHealth", route: Leader, timeout: |_| NODE_TIMEOUT,
        helper: operator_server_health,
    }
}

/// The longest a `Template.Read` blocks (Nomad's template `block_query_wait`, 5 minutes).
pub const MAX_TEMPLATE_WAIT: Duration = Duration::from_secs(300);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_gives_every_call_its_facts() {
        let dequeue = ServiceRequest::EvalDequeue(EvalDequeueRequest {
            schedulers: vec!["service".into()],
            timeout_ms: 0,
            scheduler_version: 1,
        });
        let m = dequeue.method();
        assert_eq!(m.name, "Eval.Dequeue");
        assert_eq!(m.route, Route::LeaderSubsystem);
        assert_eq!(m.timeout, DEFAULT_DEQUEUE_TIMEOUT + WAIT_MARGIN);
        let allocs = ServiceRequest::NodeGetClientAllocs(NodeGetClientAllocsRequest {
            node_id: "n".into(),
            min_index: 3,
            wait_ms: 1_000_000_000,
        });
        assert_eq!(allocs.method().route, Route::Local);
        assert_eq!(
            allocs.method().timeout,
            MAX_CLIENT_ALLOCS_WAIT + WAIT_MARGIN
        );
        assert_eq!(ServiceResponse::EvalAck(()).name(), "Eval.Ack");
    }

    #[test]
    fn errors_survive_the_wire_and_say_whether_to_retry() {
        let cfg = crate::rpc::frame::wire_config();
        for e in [
            ServiceError::NoLeader,
            ServiceError::invalid("Job.ID", "Job ID hasn't been provided"),
            ServiceError::not_found("job", "web"),
            ServiceError::disabled("eval broker disabled"),
        ] {
            let bytes = bincode::serde::encode_to_vec(&e, cfg).unwrap();
            let (back, _): (ServiceError, usize) =
                bincode::serde::decode_from_slice(&bytes, cfg).unwrap();
            assert_eq!(back, e);
        }
        assert!(ServiceError::NoLeader.is_retryable());
        assert!(ServiceError::disabled("plan queue is disabled").is_retryable());
        assert!(!ServiceError::rejected("evaluation token does not match").is_retryable());
        assert_eq!(
            ServiceError::not_found("job", "web").to_string(),
            "job not found"
        );
    }
}
