//! The replicated commands: [`Command`] is the payload of every raft log entry, answered by a
//! [`CommandResponse`] or refused with an [`ApplyError`]. Plain data: their deterministic
//! application is the state store's (`state/apply.rs`); the state machine hands each entry
//! to [`StateStore::apply`](crate::state::StateStore::apply) with its index.
//!
//! # Rules
//!
//! - **Deterministic.** Applying the same commands at the same indexes to the same state gives
//!   the same state on every server, so nothing here reads a clock or an RNG, and nothing
//!   iterates a hash map. Everything time- or random-dependent (IDs, `SubmitTime`,
//!   `CreateTime`, `UpdatedAt`) is in the command, chosen by the proposer.
//! - **All or nothing per command.** Each command runs in its own write transaction over a
//!   clone of the tables. A bad command (unknown job on deregister, allocation for a missing
//!   node, stale CAS index, …) is answered with [`CommandResponse::Rejected`] and a typed
//!   [`ApplyError`], and changes nothing; it never panics the state machine. In a
//!   [`Command::Batch`] every command stands alone: one rejected command does not undo its
//!   neighbours, and all of them share the entry's raft index.
//! - **Versioned.** Commands are bincode-encoded in the raft log, where the variant index is
//!   the encoding. Variants are only ever appended, and the tests pin the indexes. The shapes
//!   of payloads and of the model types inside them change together, with the snapshot
//!   image's format version ([`crate::state::IMAGE_FORMAT_VERSION`]): a data directory is
//!   read by the build that wrote it (there is no log compatibility across model changes
//!   before 1.0).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::{
    AclPolicy, AclToken, AllocDeploymentStatus, AllocId, AllocStop, Allocation, ClientStatus,
    ClusterMeta, Deployment, DeploymentId, DeploymentStatusUpdate, DesiredTransition,
    DrainStrategy, EvalId, Evaluation, Job, JobId, Namespace, NamespaceSpec, Node, NodeId,
    NodeStatus, OneTimeToken, RootKey, SchedulerConfiguration, SchedulingEligibility,
    ServiceRegistration, TaskState, VariableEncrypted,
};

/// A replicated command: the payload of one raft log entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// Several commands proposed together (the raft node's group commit) and applied in order
    /// in one entry. Proposers do not nest batches.
    Batch(Vec<Command>),
    /// The cluster's identity; the first command the first leader writes.
    ClusterMeta(ClusterMeta),
    /// Replace the scheduler configuration (optionally compare-and-set).
    SchedulerConfig(SchedulerConfigUpdate),
    /// Register or update a job, with its evaluation, atomically.
    JobRegister(JobRegister),
    /// Stop (or purge) a job, with its evaluation, atomically.
    JobDeregister(JobDeregister),
    /// Register or re-register a client node.
    NodeRegister(NodeRegister),
    /// A node's status changed (heartbeat missed, ready again, …), with the node evaluations.
    NodeUpdateStatus(NodeUpdateStatus),
    /// A node's scheduling eligibility changed, with the node evaluations.
    NodeUpdateEligibility(NodeUpdateEligibility),
    /// Remove client nodes.
    NodeDeregister(NodeDeregister),
    /// Create or update evaluations (workers, the broker's reapers, the leader).
    EvalUpsert(EvalUpsert),
    /// Garbage-collect evaluations and allocations.
    EvalDelete(EvalDelete),
    /// Commit what the plan applier accepted of a plan.
    ApplyPlanResults(ApplyPlanResults),
    /// Client reports about their allocations, batched across clients.
    AllocClientUpdate(AllocClientUpdate),
    /// Start or cancel a node's drain, with the node evaluations that migrate its
    /// allocations.
    NodeUpdateDrain(NodeUpdateDrain),
    /// Replace the whole state with a saved image (`operator snapshot restore`).
    SnapshotRestore(SnapshotRestore),
    /// Scale a task group (a new job version with its evaluation) and record the scaling
    /// event, atomically; or only record an event.
    JobScale(JobScale),
    /// Mark a kept job version stable or not.
    JobStability(JobStability),
    /// A periodic parent's launch: its child (with the child's evaluation) and, for a
    /// scheduled launch, the parent's new last launch time, atomically.
    PeriodicLaunch(PeriodicLaunchCommand),
    /// Change allocations' desired transitions (`alloc stop`: migrate), with the
    /// evaluations that carry them out, atomically.
    AllocUpdateDesiredTransition(AllocUpdateDesiredTransition),
    /// Recompute every job's summary from its allocations (Nomad's
    /// `ReconcileJobSummaries`, `PUT /v1/system/reconcile/summaries`).
    ReconcileJobSummaries,
    /// Appended: a deployment's status changes (an operator fails, pauses or resumes it; the
    /// deployment watcher fails it), with the job version an auto-revert registers and the
    /// evaluation that acts on it, in one entry.
    DeploymentStatusUpdate(DeploymentStatusUpdateCommand),
    /// Appended: a deployment's canaries are promoted (an operator or auto-promotion).
    DeploymentPromote(DeploymentPromote),
    /// Appended: allocations of a deployment are marked healthy or unhealthy by an operator
    /// (`allocation-health`), possibly failing the deployment.
    DeploymentAllocHealth(DeploymentAllocHealth),
    /// Appended: a node's drain ended because nothing is left to migrate or stop (Nomad's
    /// `NodeUpdateDrain` with `DrainStrategy` nil and `LastDrain.Status` complete).
    NodeDrainComplete(NodeDrainComplete),
    /// Appended: a client registers the services of its running allocations (Nomad's
    /// `ServiceRegistration.Upsert`). Registrations of allocations that are unknown or have
    /// stopped on their client are skipped.
    ServiceRegistrationUpsert(ServiceRegistrationUpsert),
    /// Appended: service registrations removed by ID (a client whose task stopped, or an
    /// operator's `service delete`).
    ServiceRegistrationDelete(ServiceRegistrationDelete),
    /// Appended: namespaces created or described (`namespace apply`).
    NamespaceUpsert(NamespaceUpsert),
    /// Appended: namespaces deleted; refused for `default` and for one that holds jobs.
    NamespaceDelete(NamespaceDelete),
    /// Appended: ACL policies created or changed (their rules already checked).
    AclPolicyUpsert(AclPolicyUpsert),
    /// Appended: ACL policies deleted by name; an unknown name is refused.
    AclPolicyDelete(AclPolicyDelete),
    /// Appended: ACL tokens created or changed; each names existing policies.
    AclTokenUpsert(AclTokenUpsert),
    /// Appended: ACL tokens deleted by accessor ID; an unknown one is refused.
    AclTokenDelete(AclTokenDelete),
    /// Appended: the one-time ACL bootstrap: a management token, refused once done unless
    /// the operator gave the current reset index.
    AclBootstrap(AclBootstrap),
    /// Appended: a root key added to the keyring or changed (its state); `activate` makes it
    /// the one active key and the former active key inactive.
    RootKeyUpsert(RootKeyUpsert),
    /// Appended: a root key removed; the active key is refused.
    RootKeyDelete(RootKeyDelete),
    /// Appended: a variable written (its items already encrypted), with an optional
    /// check-and-set index.
    VariableUpsert(VariableUpsert),
    /// Appended: a variable deleted, with an optional check-and-set index.
    VariableDelete(VariableDelete),
    /// Appended: a one-time token made (expired ones dropped at the same time).
    OneTimeTokenUpsert(OneTimeTokenUpsert),
    /// Appended: a one-time token exchanged: refused unless it exists and has not expired,
    /// then every one-time token of its ACL token removed (so it works once).
    OneTimeTokenExchange(OneTimeTokenExchange),
    /// Appended: a variable's lock released, by its holder or because it lapsed; refused
    /// unless the variable holds that lock.
    VariableLockRelease(VariableLockRelease),
    /// Appended: autopilot's configuration set, with an optional check-and-set index.
    AutopilotConfig(AutopilotConfigUpdate),
}

/// Payload of [`Command::OneTimeTokenUpsert`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneTimeTokenUpsert {
    /// The token.
    pub token: OneTimeToken,
    /// The proposer's clock, Unix nanoseconds: one-time tokens expired by then are dropped.
    pub now: i64,
}

/// Payload of [`Command::OneTimeTokenExchange`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneTimeTokenExchange {
    /// The one-time secret.
    pub one_time_secret_id: String,
    /// The proposer's clock, Unix nanoseconds.
    pub now: i64,
}

/// Payload of [`Command::VariableUpsert`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariableUpsert {
    /// The variable (indexes and times set by the state store).
    pub var: VariableEncrypted,
    /// Write only if its modify index is this (0: only if it does not exist).
    pub cas: Option<u64>,
    /// When, Unix nanoseconds (the proposer's clock).
    pub now: i64,
    /// The writer's lock ID: a locked variable is written only by its lock's holder.
    pub lock_id: Option<String>,
    /// Take this lock with the write (a lock acquire): refused while the variable is
    /// locked.
    pub acquire: Option<crate::model::VariableLock>,
    /// Keep the variable's items when it exists (an acquire that gives none); `var`'s data
    /// is used only for a new variable.
    pub keep_items: bool,
}

/// Payload of [`Command::VariableLockRelease`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariableLockRelease {
    /// Its namespace.
    pub namespace: String,
    /// Its path.
    pub path: String,
    /// The lock's ID: released only if it is still this lock.
    pub lock_id: String,
}

/// Payload of [`Command::VariableDelete`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariableDelete {
    /// Its namespace.
    pub namespace: String,
    /// Its path.
    pub path: String,
    /// Delete only if its modify index is this (0: only if it does not exist).
    pub cas: Option<u64>,
}

/// Payload of [`Command::RootKeyUpsert`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RootKeyUpsert {
    /// The key (its indexes are set by the state store).
    pub key: RootKey,
    /// Make it the active key.
    pub activate: bool,
}

/// Payload of [`Command::RootKeyDelete`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RootKeyDelete {
    /// Its key ID.
    pub key_id: String,
}

/// Payload of [`Command::AclPolicyUpsert`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AclPolicyUpsert {
    /// The policies.
    pub policies: Vec<AclPolicy>,
}

/// Payload of [`Command::AclPolicyDelete`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AclPolicyDelete {
    /// Their names.
    pub names: Vec<String>,
}

/// Payload of [`Command::AclTokenUpsert`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AclTokenUpsert {
    /// The tokens, with accessor and secret chosen by the proposer.
    pub tokens: Vec<AclToken>,
}

/// Payload of [`Command::AclTokenDelete`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AclTokenDelete {
    /// Their accessor IDs.
    pub accessor_ids: Vec<String>,
}

/// Payload of [`Command::AclBootstrap`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AclBootstrap {
    /// The management token to create.
    pub token: AclToken,
    /// The reset index the operator wrote, when bootstrapping again (0: the first time).
    pub reset_index: u64,
}

/// Payload of [`Command::NamespaceUpsert`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamespaceUpsert {
    /// The namespaces, valid.
    pub namespaces: Vec<NamespaceSpec>,
}

/// Payload of [`Command::NamespaceDelete`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamespaceDelete {
    /// Their names.
    pub names: Vec<String>,
}

/// Payload of [`Command::ServiceRegistrationUpsert`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceRegistrationUpsert {
    /// The registrations, with IDs set.
    pub services: Vec<ServiceRegistration>,
}

/// Payload of [`Command::ServiceRegistrationDelete`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceRegistrationDelete {
    /// The namespace of the registrations.
    pub namespace: Namespace,
    /// Their service names and IDs.
    pub ids: Vec<(String, String)>,
    /// Refuse the command when one of them does not exist (an operator's delete); a client's
    /// clean-up ignores registrations the servers already removed.
    pub must_exist: bool,
}

/// Payload of [`Command::DeploymentStatusUpdate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeploymentStatusUpdateCommand {
    /// The deployment and its new status; it must exist and be active.
    pub update: DeploymentStatusUpdate,
    /// An auto-revert: the stable version's spec, registered as a new version.
    pub revert: Option<JobRegister>,
    /// The evaluation that acts on the change (resume, failure, revert).
    pub eval: Option<Evaluation>,
    /// When, Unix nanoseconds.
    pub modify_time: i64,
}

/// Payload of [`Command::DeploymentPromote`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeploymentPromote {
    /// The deployment; it must be active and some group must have canaries.
    pub deployment_id: DeploymentId,
    /// Promote every group with canaries.
    pub all: bool,
    /// Or these groups.
    pub groups: Vec<String>,
    /// The evaluation that rolls the rest out.
    pub eval: Option<Evaluation>,
    /// When, Unix nanoseconds (restarts the progress deadline).
    pub modify_time: i64,
}

/// Payload of [`Command::DeploymentAllocHealth`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeploymentAllocHealth {
    /// The deployment; it must be active and every allocation must belong to it.
    pub deployment_id: DeploymentId,
    /// Allocations to mark healthy.
    pub healthy: Vec<AllocId>,
    /// Allocations to mark unhealthy.
    pub unhealthy: Vec<AllocId>,
    /// A status change made with it (failing the deployment).
    pub update: Option<DeploymentStatusUpdate>,
    /// An auto-revert made with it.
    pub revert: Option<JobRegister>,
    /// The evaluation that acts on it.
    pub eval: Option<Evaluation>,
    /// When, Unix nanoseconds.
    pub timestamp: i64,
}

/// Payload of [`Command::NodeDrainComplete`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeDrainComplete {
    /// The node; its drain (if any) ends and its `LastDrain` becomes complete.
    pub node_id: NodeId,
    /// When, Unix seconds.
    pub updated_at: i64,
}

/// Payload of [`Command::AllocUpdateDesiredTransition`] (Nomad's
/// `AllocUpdateDesiredTransitionRequest`). Every allocation must exist; the fields a
/// transition sets are merged into the allocation's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocUpdateDesiredTransition {
    /// The transitions, by allocation.
    pub allocs: BTreeMap<AllocId, DesiredTransition>,
    /// Evaluations to create with them.
    pub evals: Vec<Evaluation>,
}

/// Payload of [`Command::PeriodicLaunch`].
///
/// A scheduled launch is applied only if its time is after the parent's recorded last
/// launch, and moves that record: two leaders (or one leader retrying) can never launch the
/// same time twice, and a new leader knows where the previous one stopped. A scheduled
/// launch without a child records a launch skipped by `prohibit_overlap`. A forced launch
/// (`job periodic force`) leaves the record alone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeriodicLaunchCommand {
    /// The parent's namespace.
    pub namespace: Namespace,
    /// The periodic parent.
    pub job_id: JobId,
    /// The launch time, Unix nanoseconds (whole seconds for scheduled launches).
    pub launch: i64,
    /// `job periodic force`: not checked against, and not recorded as, the last launch.
    pub forced: bool,
    /// The child `<parent>/periodic-<unix seconds>` with its evaluation; `None`: the launch
    /// was skipped (`prohibit_overlap`) and is only recorded.
    pub child: Option<JobRegister>,
}

/// Payload of [`Command::JobScale`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobScale {
    /// The job's namespace.
    pub namespace: Namespace,
    /// The job.
    pub job_id: JobId,
    /// The task group the event is about.
    pub group: String,
    /// The job with the group's new count, registered like [`Command::JobRegister`] (with
    /// its evaluation and a compare-and-set on `JobModifyIndex`); `None`: only the event.
    pub register: Option<JobRegister>,
    /// The event to record (its eval ID and create index are set here).
    pub event: crate::model::ScalingEvent,
}

/// Payload of [`Command::JobStability`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobStability {
    /// The job's namespace.
    pub namespace: Namespace,
    /// The job.
    pub job_id: JobId,
    /// The kept version.
    pub version: u64,
    /// Stable or not.
    pub stable: bool,
}

/// Payload of [`Command::NodeUpdateDrain`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeUpdateDrain {
    /// The node.
    pub node_id: NodeId,
    /// The drain to start (the node becomes ineligible), or `None` to cancel one.
    pub drain_strategy: Option<DrainStrategy>,
    /// When cancelling, make the node eligible again.
    pub mark_eligible: bool,
    /// When, Unix seconds.
    pub updated_at: i64,
    /// Evaluations for the jobs with allocations on the node.
    pub evals: Vec<Evaluation>,
    /// Operator metadata for the drain's `LastDrain.Meta` (`None`: keep what it holds).
    pub meta: Option<BTreeMap<String, String>>,
}

/// Payload of [`Command::SchedulerConfig`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerConfigUpdate {
    /// The new configuration (its indexes are set by the state store).
    pub config: SchedulerConfiguration,
    /// Apply only if the current configuration's `ModifyIndex` equals this.
    pub cas_index: Option<u64>,
}

/// Payload of [`Command::AutopilotConfig`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AutopilotConfigUpdate {
    /// The new configuration (its indexes are set by the state store).
    pub config: crate::model::AutopilotConfig,
    /// Apply only if the current configuration's `ModifyIndex` equals this.
    pub cas_index: Option<u64>,
}

/// Payload of [`Command::JobRegister`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRegister {
    /// The canonicalized, validated job (server-set fields are overwritten).
    pub job: Job,
    /// The evaluation to create with it (`None` for jobs that are not evaluated).
    pub eval: Option<Evaluation>,
    /// Nomad's `EnforceIndex`: register only if the current `JobModifyIndex` equals this
    /// (0: the job must not exist).
    pub enforce_index: Option<u64>,
    /// How many versions of the job to keep (the leader's `job_max_versions`; 0: the
    /// default, [`crate::state::JOB_TRACKED_VERSIONS`]). In the command, not a local
    /// setting, so every server prunes alike.
    pub tracked_versions: u32,
}

/// Payload of [`Command::JobDeregister`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobDeregister {
    /// The job's namespace.
    pub namespace: Namespace,
    /// The job.
    pub job_id: JobId,
    /// Delete the job instead of marking it stopped.
    pub purge: bool,
    /// The evaluation that stops its allocations.
    pub eval: Option<Evaluation>,
    /// Unix nanoseconds recorded as the stopped version's `SubmitTime` (0: keep).
    pub submit_time: i64,
    /// As [`JobRegister::tracked_versions`], for the stopped version.
    pub tracked_versions: u32,
}

/// Payload of [`Command::NodeRegister`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRegister {
    /// The canonicalized node (eligibility and drain of an existing node are kept).
    pub node: Node,
    /// Evaluations for jobs affected by the (re-)registration.
    pub evals: Vec<Evaluation>,
}

/// Payload of [`Command::NodeUpdateStatus`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeUpdateStatus {
    /// The node.
    pub node_id: NodeId,
    /// Its new status.
    pub status: NodeStatus,
    /// When, Unix seconds (Nomad's unit for `StatusUpdatedAt`).
    pub updated_at: i64,
    /// Evaluations for the jobs with allocations on it (and system jobs).
    pub evals: Vec<Evaluation>,
}

/// Payload of [`Command::NodeUpdateEligibility`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeUpdateEligibility {
    /// The node.
    pub node_id: NodeId,
    /// Its new eligibility (`eligible` is refused while it drains).
    pub eligibility: SchedulingEligibility,
    /// When, Unix seconds.
    pub updated_at: i64,
    /// Evaluations to create with the change.
    pub evals: Vec<Evaluation>,
}

/// Payload of [`Command::NodeDeregister`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeDeregister {
    /// The nodes; all must exist.
    pub node_ids: Vec<NodeId>,
}

/// Payload of [`Command::EvalUpsert`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalUpsert {
    /// The evaluations, created or replaced whole.
    pub evals: Vec<Evaluation>,
}

/// Payload of [`Command::EvalDelete`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalDelete {
    /// Evaluations to delete (missing ones are skipped).
    pub evals: Vec<EvalId>,
    /// Allocations to delete (missing ones are skipped).
    pub allocs: Vec<AllocId>,
}

/// Payload of [`Command::ApplyPlanResults`]: the accepted part of a plan. Allocations carry
/// no job; they name `(Namespace, JobID, JobVersion)`, which must be a kept version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApplyPlanResults {
    /// The evaluation the plan was for (its `ModifyIndex` moves); empty for none.
    pub eval_id: EvalId,
    /// New placements and in-place updates. Each node must exist; a new allocation of a
    /// stopped or missing job version is skipped (reported back), as Nomad does.
    pub allocs_updated: Vec<Allocation>,
    /// Allocations to stop; each must exist.
    pub allocs_stopped: Vec<AllocStop>,
    /// Allocations evicted to make room; each must exist.
    pub allocs_preempted: Vec<AllocStop>,
    /// Evaluations created with the plan (e.g. for jobs whose allocations were preempted).
    pub evals: Vec<Evaluation>,
    /// Nodes the plan applier marks ineligible after repeated rejections.
    pub ineligible_nodes: Vec<NodeId>,
    /// When, Unix seconds (for node status updates).
    pub updated_at: i64,
    /// A deployment the plan creates or whose counts it moves (Nomad's `Deployment`).
    pub deployment: Option<Deployment>,
    /// Status changes of deployments (cancelled by a newer version, successful).
    pub deployment_updates: Vec<DeploymentStatusUpdate>,
}

/// One client's report about one allocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocClientReport {
    /// The allocation (unknown ones are skipped and reported back).
    pub id: AllocId,
    /// Its status on the client.
    pub client_status: ClientStatus,
    /// The client's explanation.
    pub client_description: String,
    /// Per task state.
    pub task_states: BTreeMap<String, TaskState>,
    /// When, Unix nanoseconds.
    pub modify_time: i64,
    /// Its health in its deployment or migration, once the client judged it.
    pub deployment_status: Option<AllocDeploymentStatus>,
    /// The client's sequence number for this allocation's state: it grows with every change
    /// the client makes to the allocation, and a report older than the one applied is
    /// ignored (a retried call that arrives after a newer report). 0 for a report that is
    /// not a client's (always applied). Four bytes, so that the allocation keeping it does
    /// not grow; a client past `u32::MAX` changes to one allocation sends `u32::MAX`, which
    /// is always applied (equal numbers are), as before there were sequence numbers.
    pub seq: u32,
}

/// Payload of [`Command::AllocClientUpdate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AllocClientUpdate {
    /// The reports, possibly from many clients.
    pub allocs: Vec<AllocClientReport>,
    /// Evaluations to create with them (e.g. to reschedule failed allocations).
    pub evals: Vec<Evaluation>,
}

/// Payload of [`Command::SnapshotRestore`]: a state image as
/// [`Snapshot::encode_image`](crate::state::Snapshot::encode_image) wrote it.
///
/// Applying it replaces every table with the image's; the restored state's index and every
/// table's index become the entry's index, so indexes keep growing and blocking queries
/// wake. Going through the log is what makes every server restore the same state at the
/// same point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotRestore {
    /// The image bytes.
    pub image: Vec<u8>,
}

/// What applying a [`Command`] (or a blank or membership entry) answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CommandResponse {
    /// One response per command of a [`Command::Batch`], in order.
    Batch(Vec<CommandResponse>),
    /// Applied; nothing more to report.
    Applied,
    /// The command was refused and changed nothing.
    Rejected(ApplyError),
    /// A job registration or deregistration was applied (for a purge: the purged job's last
    /// version and the purge's index).
    JobRegistered {
        /// The job's version now.
        version: u64,
        /// The job's `JobModifyIndex` now (the previous one if the spec did not change).
        job_modify_index: u64,
        /// Whether a new version was written.
        spec_changed: bool,
    },
    /// Plan results were applied.
    PlanApplied {
        /// New allocations skipped because their job version is stopped or gone.
        skipped: Vec<AllocId>,
    },
    /// Client allocation reports were applied.
    AllocsUpdated {
        /// Reports about allocations that no longer exist, skipped.
        unknown: Vec<AllocId>,
    },
}

impl CommandResponse {
    /// The error if the command was rejected.
    pub fn rejection(&self) -> Option<&ApplyError> {
        match self {
            CommandResponse::Rejected(e) => Some(e),
            _ => None,
        }
    }
}

/// Why a command was refused. Every variant means the state is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ApplyError {
    /// The job does not exist.
    #[error("job {job_id:?} in namespace {namespace:?} not found")]
    JobNotFound {
        /// Namespace.
        namespace: String,
        /// Job.
        job_id: String,
    },
    /// `EnforceIndex` did not match the job's `JobModifyIndex`.
    #[error("enforcing job modify index {expected}: job {job_id:?} exists with job modify index {actual}")]
    JobModifyIndexMismatch {
        /// Job.
        job_id: String,
        /// The index the command required.
        expected: u64,
        /// The job's index (0: the job does not exist).
        actual: u64,
    },
    /// The job version is not kept.
    #[error("job {job_id:?} in namespace {namespace:?} at version {version} not found")]
    JobVersionNotFound {
        /// Namespace.
        namespace: String,
        /// Job.
        job_id: String,
        /// Version.
        version: u64,
    },
    /// The node does not exist.
    #[error("node {node_id:?} not found")]
    NodeNotFound {
        /// Node.
        node_id: String,
    },
    /// The evaluation does not exist.
    #[error("evaluation {eval_id:?} not found")]
    EvalNotFound {
        /// Evaluation.
        eval_id: String,
    },
    /// The allocation does not exist.
    #[error("allocation {alloc_id:?} not found")]
    AllocNotFound {
        /// Allocation.
        alloc_id: String,
    },
    /// A draining node cannot be made eligible.
    #[error("can not set node {node_id:?} eligible while it is draining")]
    EligibleWhileDraining {
        /// Node.
        node_id: String,
    },
    /// A compare-and-set index did not match.
    #[error("compare-and-set index {expected} does not match the current modify index {actual}")]
    CasMismatch {
        /// The index the command required.
        expected: u64,
        /// The current index.
        actual: u64,
    },
    /// A different cluster identity is already written.
    #[error("cluster metadata already set to cluster {existing:?}")]
    ClusterMetaConflict {
        /// The existing cluster ID.
        existing: String,
    },
    /// The command is malformed (missing IDs, an evaluation for another job, …).
    #[error("invalid command: {reason}")]
    InvalidCommand {
        /// What is wrong.
        reason: String,
    },
    /// A scheduled periodic launch at or before the parent's recorded last launch.
    #[error(
        "periodic job {job_id:?}: launch {launch} is not after the recorded launch {recorded}"
    )]
    PeriodicLaunchRecorded {
        /// The parent.
        job_id: String,
        /// The launch refused, Unix nanoseconds.
        launch: i64,
        /// The recorded last launch, Unix nanoseconds.
        recorded: i64,
    },
    /// A dispatch's idempotency token is already used by another child of the parent.
    #[error("idempotency token already used by dispatched job {existing:?}")]
    IdempotencyTokenUsed {
        /// The child created with the token.
        existing: String,
    },
    /// The deployment does not exist.
    #[error("deployment not found: {deployment_id:?}")]
    DeploymentNotFound {
        /// Deployment.
        deployment_id: String,
    },
    /// The deployment is over (Nomad's "Deployment %q has terminal status %q").
    #[error("Deployment {deployment_id:?} has terminal status {status:?}")]
    DeploymentTerminal {
        /// Deployment.
        deployment_id: String,
        /// Its status.
        status: String,
    },
    /// The change cannot be made to this deployment (no canaries, unhealthy canaries, an
    /// allocation of another deployment, …).
    #[error("{reason}")]
    DeploymentRefused {
        /// Why.
        reason: String,
    },
    /// The namespace does not exist (Nomad's "nonexistent namespace").
    #[error("nonexistent namespace {namespace:?}")]
    NamespaceNotFound {
        /// Namespace.
        namespace: String,
    },
    /// The namespace cannot be deleted (`default`, or jobs are left in it).
    #[error("{reason}")]
    NamespaceRefused {
        /// Why.
        reason: String,
    },
    /// An ACL write that cannot be applied (an unknown policy named by a token, a bad name).
    #[error("{reason}")]
    AclRefused {
        /// Why.
        reason: String,
    },
    /// The ACL object does not exist.
    #[error("{kind} not found")]
    AclNotFound {
        /// `ACL policy` or `ACL token`.
        kind: String,
        /// Its name or accessor ID.
        id: String,
    },
    /// The ACL bootstrap was done and the reset index given does not allow another.
    #[error("ACL bootstrap already done (reset index: {reset_index})")]
    AclBootstrapDone {
        /// The index an operator must give to bootstrap again.
        reset_index: u64,
        /// The index they gave (0: none).
        given: u64,
    },
    /// A keyring change that cannot be applied (removing the active key).
    #[error("{reason}")]
    KeyringRefused {
        /// Why.
        reason: String,
    },
    /// A variable's check-and-set index is not its modify index.
    #[error("cas error: variable {path:?} is at modify index {modify_index}")]
    VariableConflict {
        /// Its namespace.
        namespace: String,
        /// Its path.
        path: String,
        /// Its modify index (0: it does not exist).
        modify_index: u64,
    },
    /// A variable lock refuses the operation, in Nomad's words; `missing`: there is no such
    /// variable.
    #[error("{reason}")]
    VariableLockRefused {
        /// Why.
        reason: String,
        /// The variable does not exist.
        missing: bool,
    },
    /// A variable that cannot be written (a bad path).
    #[error("{reason}")]
    VariableRefused {
        /// Why.
        reason: String,
    },
    /// The root key does not exist.
    #[error("root key not found")]
    RootKeyNotFound {
        /// Its key ID.
        key_id: String,
    },
    /// The service registration does not exist (Nomad's "service registration not found").
    #[error("service registration not found")]
    ServiceRegistrationNotFound {
        /// Namespace.
        namespace: String,
        /// The registration's ID.
        id: String,
    },
}

impl ApplyError {
    pub(crate) fn invalid(reason: impl Into<String>) -> Self {
        ApplyError::InvalidCommand {
            reason: reason.into(),
        }
    }
}
