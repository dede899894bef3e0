//! The domain model in Nomad's vocabulary: [`Job`], [`TaskGroup`], [`Task`], [`Node`],
//! [`Evaluation`], [`Allocation`], [`Plan`], [`PlanResult`], plus ids, statuses and the
//! cluster-wide settings.
//!
//! # One type, two encodings
//!
//! Each type serves both Nomad's JSON API and the bincode raft log and snapshots:
//!
//! - **JSON**: PascalCase names with Go's initialisms (`ID`, `JobID`, `CPU`, `MemoryMB`),
//!   durations as integer nanoseconds, Go `time.Time` fields as RFC 3339 ([`Timestamp`]),
//!   `Task.Config` as free-form JSON ([`ConfigValue`]). As input every field is optional:
//!   absent takes the struct's `Default` (Nomad's defaults where they are not zero: Count 1,
//!   Priority 50, CPU 100, MemoryMB 300), explicit `null` is the same as absent (see `de`),
//!   unknown keys are ignored. [`Job::canonicalize`] fills the context-dependent defaults the
//!   API applies before proposing (Name ← ID, policies by job type, …).
//! - **bincode**: structs encode as their fields in order; enums by variant index. So no
//!   `skip_serializing_if`, `flatten`, untagged or internally tagged enums, nothing that needs
//!   `deserialize_any`; the null-leniency helpers and [`ConfigValue`] switch on
//!   `is_human_readable()`. Adding a field or variant changes the bytes: the raft command enum
//!   and the snapshot image carry their own versions (see [`crate::fsm`], [`crate::state`]).
//!
//! # Sharing
//!
//! Ids are one-pointer shared-string newtypes ([`ids`]); allocations refer to their job by
//! `(Namespace, JobID, JobVersion)` and never embed it.

pub mod acl;
pub mod alloc;
pub mod artifact;
pub mod cluster;
pub mod connect;
pub(crate) mod de;
pub mod deployment;
pub mod diff;
pub mod disconnect;
pub mod eval;
pub mod ids;
pub mod integrations;
pub mod job;
pub mod keyring;
pub mod namespace;
pub mod node;
pub mod periodic;
pub mod plan;
pub mod service;
pub mod task_runtime;
pub mod time;
pub mod value;
pub mod variables;
pub mod volume;

pub use acl::{
    is_uuid, AclPolicy, AclToken, OneTimeToken, ANONYMOUS_POLICY, ONE_TIME_TOKEN_TTL_NANOS,
    TOKEN_TYPE_CLIENT, TOKEN_TYPE_MANAGEMENT,
};
pub use alloc::{
    AllocStop, AllocatedCpuResources, AllocatedPortMapping, AllocatedResources,
    AllocatedSharedResources, AllocatedTaskResources, Allocation, ClientStatus, DesiredStatus,
    DesiredTransition, RescheduleEvent, RescheduleTracker, TaskEvent, TaskState, TaskStateValue,
};
pub use artifact::{dest_escapes_alloc_dir, parse_checksum, TaskArtifact};
pub use cluster::{
    AutopilotConfig, ClusterMeta, PreemptionConfig, SchedulerAlgorithm, SchedulerConfiguration,
    DEFAULT_SUPERVISOR_FRACTION,
};
pub use deployment::{
    AllocDeploymentStatus, Deployment, DeploymentState, DeploymentStatus, DeploymentStatusUpdate,
    MigrateStrategy, UpdateStrategy,
};
pub use diff::{DiffType, FieldDiff, JobDiff, ObjectDiff, TaskDiff, TaskGroupDiff};
pub use disconnect::{AllocState, DisconnectStrategy};
pub use eval::{AllocMetric, EvalStatus, EvalTrigger, Evaluation};
pub use ids::{AllocId, DeploymentId, EvalId, JobId, Namespace, NodeId, SharedStr};
pub use integrations::imply_integration_constraints;
pub use job::{
    is_dns_name, is_namespaced_mode, memory_limits, Affinity, CniConfig, Constraint, DelayFunction,
    DnsConfig, Job, JobChildrenSummary, JobStatus, JobSummary, JobType, JobUiConfig, JobUiLink,
    Locality, LocalityLevel, NetworkResource, Port, ReschedulePolicy, Resources, RestartMode,
    RestartPolicy, ScalingEvent, ScalingPolicy, Spread, SpreadTarget, Task, TaskGroup,
    TaskGroupSummary, ADDRESS_MODE_ALLOC, DEFAULT_CPU_MHZ, DEFAULT_JOB_PRIORITY, DEFAULT_MEMORY_MB,
    DEFAULT_NODE_POOL, DEFAULT_REGION, MAX_JOB_PRIORITY, MAX_LOCALITY_WAIT, MAX_SCALING_EVENTS,
    MEMORY_NO_LIMIT, MIN_JOB_PRIORITY, NETWORK_MODE_BRIDGE, NETWORK_MODE_CNI_PREFIX,
    SCALING_HORIZONTAL, SUPERVISOR_META,
};
pub use keyring::{RootKey, RootKeyMeta, RootKeyState, WrappedKey, ROOT_KEY_ALGORITHM};
pub use namespace::{NamespaceSpec, DEFAULT_NAMESPACE};
pub use node::{
    format_cpuset, parse_cpuset, parse_port_ranges, DrainMetadata, DrainStatus, DrainStrategy,
    DriverInfo, Node, NodeCpuResources, NodeDiskResources, NodeMemoryResources,
    NodeNetworkResource, NodeReservedCpuResources, NodeReservedNetworkResources,
    NodeReservedResources, NodeResources, NodeStatus, SchedulingEligibility, CPU_CORES_ENV,
};
pub use periodic::{
    CronSchedule, DispatchPayload, DispatchPayloadConfig, ParameterizedJobConfig, PeriodicConfig,
    PeriodicError, PeriodicLaunch, DISPATCH_PAYLOAD_LIMIT,
};
pub use plan::{DesiredUpdates, Plan, PlanAnnotations, PlanResult};
pub use service::{
    valid_service_name, CheckRestart, CheckStatus, Service, ServiceCheck, ServiceRegistration,
    CHECK_FAILURE, CHECK_PENDING, CHECK_SUCCESS, PROVIDER_CONSUL, PROVIDER_NOMAD,
};
pub use task_runtime::{
    ChangeScript, EphemeralDisk, LogConfig, TaskLifecycle, Template, TemplateWait,
    WorkloadIdentity, DEFAULT_IDENTITY_AUDIENCE, DEFAULT_IDENTITY_NAME,
};
pub use thin_vec::{thin_vec, ThinVec};
pub use time::Timestamp;
pub use value::ConfigValue;
pub use variables::{
    validate_items as validate_variable_items, validate_path as validate_variable_path,
    variable_aad, VariableData, VariableEncrypted, VariableLock, VariableMetadata,
    DEFAULT_LOCK_DELAY, DEFAULT_LOCK_TTL, MAX_LOCK_TTL, MAX_VARIABLE_BYTES, MIN_LOCK_TTL,
};
pub use volume::{
    ClientHostVolumeConfig, CsiMountOptions, VolumeMount, VolumeRequest, FILTER_HOST_VOLUMES,
    VOLUME_TYPE_CSI, VOLUME_TYPE_HOST,
};

/// Why a model value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// Validation found problems; all of them are listed (Nomad's multi-error text).
    #[error("{} error(s) occurred:{}", errors.len(), errors.iter().map(|e| format!("\n\t* {e}")).collect::<String>())]
    Invalid {
        /// One line per problem.
        errors: Vec<String>,
    },
    /// A time string is not RFC 3339.
    #[error("invalid RFC 3339 time {text:?}")]
    InvalidTimestamp {
        /// The offending text (truncated).
        text: String,
    },
}
