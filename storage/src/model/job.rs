//! Jobs: what a user asks to run. A [`Job`] holds [`TaskGroup`]s; a group is the unit of
//! placement (`Count` copies, each one [`Allocation`](crate::model::Allocation)) and holds
//! [`Task`]s that run together on one node.
//!
//! Input leniency follows Nomad's API (every field optional, `null` ≡ absent, unknown keys
//! ignored); [`Job::canonicalize`] then fills Nomad's defaults and [`Job::validate`] reports
//! every problem at once. The server-set fields (`Status`, `Version`, the indexes) are written
//! by the state store when the job is registered.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::artifact::TaskArtifact;
use crate::model::connect::{self, ConnectGroup, Consul};
use crate::model::de;
use crate::model::deployment::{MigrateStrategy, UpdateStrategy};
use crate::model::disconnect::DisconnectStrategy;
use crate::model::ids::{JobId, Namespace};
use crate::model::periodic::{
    DispatchPayload, DispatchPayloadConfig, ParameterizedJobConfig, PeriodicConfig,
};
use crate::model::service::{
    valid_service_name, Service, ServiceCheck, ON_UPDATE_IGNORE, ON_UPDATE_IGNORE_WARNINGS,
    ON_UPDATE_REQUIRE_HEALTHY, PROVIDER_CONSUL, PROVIDER_NOMAD,
};
use crate::model::task_runtime::{self, EphemeralDisk, LogConfig, TaskLifecycle, WorkloadIdentity};
use crate::model::value::{ConfigValue, MAX_CONFIG_DEPTH};
use crate::model::volume::{VolumeMount, VolumeRequest};
use crate::model::ModelError;

/// Nomad's default job priority.
pub const DEFAULT_JOB_PRIORITY: u32 = 50;
/// The lowest valid job priority.
pub const MIN_JOB_PRIORITY: u32 = 1;
/// The highest valid job priority.
pub const MAX_JOB_PRIORITY: u32 = 100;
/// Nomad's default task CPU, in MHz.
pub const DEFAULT_CPU_MHZ: u64 = 100;

/// A task's `memory_max` of Nomad's `-1`: no hard memory limit at all (with memory
/// oversubscription on), `memory` staying what it is guaranteed. Written back as `-1`.
pub const MEMORY_NO_LIMIT: u64 = u64::MAX;

/// The hard and soft memory limits in bytes of a task with `memory_mb` and `memory_max_mb`
/// (Nomad's rule, the same for every driver): without `memory_max`, `memory` is the hard
/// limit and there is no soft one; with it, `memory_max` is the hard limit (never below
/// `memory`) and `memory` the soft one; with [`MEMORY_NO_LIMIT`], no hard limit and
/// `memory` the soft one.
pub fn memory_limits(memory_mb: u64, memory_max_mb: u64) -> (Option<u64>, Option<u64>) {
    let memory = memory_mb.saturating_mul(1024 * 1024);
    if memory_max_mb == MEMORY_NO_LIMIT {
        return (None, (memory > 0).then_some(memory));
    }
    let hard = memory_max_mb.saturating_mul(1024 * 1024).max(memory);
    let soft = (hard > memory && memory > 0).then_some(memory);
    ((hard > 0).then_some(hard), soft)
}
/// Nomad's default task memory, in MB.
pub const DEFAULT_MEMORY_MB: u64 = 300;
/// Nomad's smallest accepted task memory, in MB.
pub const MIN_MEMORY_MB: u64 = 10;
/// The most CPU a task may ask for, in MHz (16 777 216: about 4 000 cores at 4 GHz).
/// No node offers more: a larger ask can never be placed and is a typo or an attack.
pub const MAX_CPU_MHZ: u64 = 1 << 24;
/// The most memory a task may ask for, in MB (64 TiB).
pub const MAX_MEMORY_MB: u64 = 1 << 26;
/// The most disk a task may ask for, in MB (1 PiB).
pub const MAX_DISK_MB: u64 = 1 << 30;
/// Nomad's default region.
pub const DEFAULT_REGION: &str = "global";
/// Nomad's default node pool.
pub const DEFAULT_NODE_POOL: &str = "default";

const NANOS_PER_SEC: u64 = 1_000_000_000;
/// The job meta key that marks a supervisor: a job whose allocations launch other jobs
/// (`"true"` or `"false"`). The scheduler keeps supervisors under the scheduler
/// configuration's `SupervisorFraction` of the cluster.
pub const SUPERVISOR_META: &str = "teamster.supervisor";

/// Which scheduler handles a job (`Type`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
pub enum JobType {
    /// Long-running services, rescheduled forever by default.
    #[default]
    #[serde(rename = "service")]
    Service,
    /// Run-to-completion work.
    #[serde(rename = "batch")]
    Batch,
    /// One allocation on every eligible node, long-running.
    #[serde(rename = "system")]
    System,
    /// One allocation on every eligible node, run to completion.
    #[serde(rename = "sysbatch")]
    SysBatch,
    /// The servers' own maintenance (garbage collection) evaluations.
    #[serde(rename = "_core")]
    Core,
}

impl JobType {
    /// Nomad's name for the type.
    pub fn as_str(&self) -> &'static str {
        match self {
            JobType::Service => "service",
            JobType::Batch => "batch",
            JobType::System => "system",
            JobType::SysBatch => "sysbatch",
            JobType::Core => "_core",
        }
    }
}

/// A job's derived status (`Status`), computed by the state store as Nomad does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum JobStatus {
    /// Registered, nothing placed yet (or only evaluations outstanding).
    #[default]
    #[serde(rename = "pending")]
    Pending,
    /// At least one non-terminal allocation exists.
    #[serde(rename = "running")]
    Running,
    /// Stopped, or everything it ran is terminal.
    #[serde(rename = "dead")]
    Dead,
}

/// A placement requirement on node attributes (`${attr.kernel.name} = linux`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Constraint {
    /// Left-hand side: usually an interpolation such as `${attr.kernel.name}`.
    #[serde(deserialize_with = "de::nullable")]
    pub l_target: String,
    /// Right-hand side: a literal or interpolation.
    #[serde(deserialize_with = "de::nullable")]
    pub r_target: String,
    /// `=`, `!=`, `<`, `regexp`, `distinct_hosts`, … (defaults to `=`).
    #[serde(deserialize_with = "de::nullable")]
    pub operand: String,
}

/// Operands every [`Constraint`] may use.
const CONSTRAINT_OPERANDS: &[&str] = &[
    "=",
    "==",
    "is",
    "!=",
    "not",
    "<",
    "<=",
    ">",
    ">=",
    "regexp",
    "version",
    "semver",
    "set_contains",
    "set_contains_all",
    "set_contains_any",
    "is_set",
    "is_not_set",
    "distinct_hosts",
    "distinct_property",
];

impl Constraint {
    /// A constraint `l_target operand r_target`.
    pub fn new(l_target: &str, operand: &str, r_target: &str) -> Self {
        Self {
            l_target: l_target.to_owned(),
            r_target: r_target.to_owned(),
            operand: operand.to_owned(),
        }
    }

    fn canonicalize(&mut self) {
        if self.operand.is_empty() {
            self.operand = "=".to_owned();
        }
    }

    /// True when a target refers to a node-unique attribute, so computed node classes cannot
    /// stand for it (Nomad calls such constraints "escaped").
    pub fn escapes_computed_class(&self) -> bool {
        target_escapes(&self.l_target) || target_escapes(&self.r_target)
    }

    fn validate(&self, at: &str, errors: &mut Vec<String>) {
        let op = self.operand.as_str();
        if op.is_empty() {
            errors.push(format!("{at}: missing constraint operand"));
            return;
        }
        if !CONSTRAINT_OPERANDS.contains(&op) {
            errors.push(format!("{at}: unknown constraint type {op:?}"));
            return;
        }
        match op {
            "=" | "==" | "is" | "!=" | "not" | "<" | "<=" | ">" | ">=" | "set_contains"
            | "set_contains_all" | "set_contains_any" | "regexp" | "version" | "semver"
                if self.r_target.is_empty() =>
            {
                errors.push(format!("{at}: operator {op:?} requires an RTarget"));
            }
            "is_set" | "is_not_set" if !self.r_target.is_empty() => {
                errors.push(format!("{at}: operator {op:?} does not support an RTarget"));
            }
            "distinct_property" if !self.r_target.is_empty() => {
                match self.r_target.parse::<u64>() {
                    Ok(n) if n >= 1 => {}
                    _ => errors.push(format!(
                        "{at}: distinct_property count {:?} must be an integer of 1 or more",
                        self.r_target
                    )),
                }
            }
            _ => {}
        }
        if op != "distinct_hosts" && self.l_target.is_empty() {
            errors.push(format!(
                "{at}: no attribute provided but is required by operator {op:?}"
            ));
        }
    }
}

fn target_escapes(target: &str) -> bool {
    [
        "${unique.",
        "${node.unique.",
        "${attr.unique.",
        "${meta.unique.",
    ]
    .iter()
    .any(|p| target.starts_with(p))
}

/// A placement preference: nodes matching gain (or lose) `Weight` in ranking.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Affinity {
    /// Left-hand side, as in [`Constraint`].
    #[serde(deserialize_with = "de::nullable")]
    pub l_target: String,
    /// Right-hand side, as in [`Constraint`].
    #[serde(deserialize_with = "de::nullable")]
    pub r_target: String,
    /// Comparison, as in [`Constraint`] (no distinct_* or is_set operands).
    #[serde(deserialize_with = "de::nullable")]
    pub operand: String,
    /// −100…100, not 0; Nomad's default is 50.
    #[serde(deserialize_with = "de::nullable")]
    pub weight: i32,
}

/// Spreads allocations over the values of a node attribute.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Spread {
    /// The node attribute whose values are spread over, e.g. `${node.datacenter}`.
    #[serde(deserialize_with = "de::nullable")]
    pub attribute: String,
    /// 0…100 (Nomad's default 50).
    #[serde(deserialize_with = "de::nullable")]
    pub weight: i32,
    /// Desired percentages per value; unlisted values share the rest.
    #[serde(deserialize_with = "de::nullable")]
    pub spread_target: Vec<SpreadTarget>,
}

/// One value's share of a [`Spread`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct SpreadTarget {
    /// The attribute value.
    #[serde(deserialize_with = "de::nullable")]
    pub value: String,
    /// Its share, in percent.
    #[serde(deserialize_with = "de::nullable")]
    pub percent: u32,
}

/// What the client does when a task exits: `fail` the allocation, or `delay` and retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum RestartMode {
    /// Give up once the attempts in the interval are used.
    #[default]
    #[serde(rename = "fail")]
    Fail,
    /// Wait for the next interval and keep trying.
    #[serde(rename = "delay")]
    Delay,
}

/// Restarts on the same node (client side). Fields are optional as in Nomad's API so a
/// partial policy merges over the job type's default in [`Job::canonicalize`]; after that,
/// all are set.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RestartPolicy {
    /// Restarts allowed within `Interval`.
    pub attempts: Option<u32>,
    /// Window for `Attempts`, in nanoseconds.
    pub interval: Option<u64>,
    /// Wait before a restart, in nanoseconds.
    pub delay: Option<u64>,
    /// What happens once attempts are exhausted.
    pub mode: Option<RestartMode>,
    /// Render the task's templates again before each restart.
    pub render_templates: Option<bool>,
}

impl RestartPolicy {
    /// Nomad's default for a job type (service/system: 2 in 30 min; else 3 in 24 h).
    pub fn default_for(job_type: JobType) -> Self {
        let (attempts, interval) = match job_type {
            JobType::Service | JobType::System => (2, 30 * 60 * NANOS_PER_SEC),
            _ => (3, 24 * 3600 * NANOS_PER_SEC),
        };
        Self {
            attempts: Some(attempts),
            interval: Some(interval),
            delay: Some(15 * NANOS_PER_SEC),
            mode: Some(RestartMode::Fail),
            render_templates: Some(false),
        }
    }

    fn merged_over(self, mut base: Self) -> Self {
        base.attempts = self.attempts.or(base.attempts);
        base.interval = self.interval.or(base.interval);
        base.delay = self.delay.or(base.delay);
        base.mode = self.mode.or(base.mode);
        base.render_templates = self.render_templates.or(base.render_templates);
        base
    }

    fn validate(&self, at: &str, errors: &mut Vec<String>) {
        if self.mode == Some(RestartMode::Delay) && self.delay == Some(0) {
            errors.push(format!("{at}: restart mode delay needs a non-zero delay"));
        }
    }
}

/// How the delay between reschedules grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum DelayFunction {
    /// The same delay every time.
    #[default]
    #[serde(rename = "constant")]
    Constant,
    /// Doubling, up to `MaxDelay`.
    #[serde(rename = "exponential")]
    Exponential,
    /// Fibonacci growth, up to `MaxDelay`.
    #[serde(rename = "fibonacci")]
    Fibonacci,
}

/// Replacement of failed allocations on other nodes (server side). Optional fields as in
/// [`RestartPolicy`]; system and sysbatch jobs have none.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ReschedulePolicy {
    /// Reschedules allowed within `Interval` (ignored when `Unlimited`).
    pub attempts: Option<u32>,
    /// Window for `Attempts`, in nanoseconds.
    pub interval: Option<u64>,
    /// First delay, in nanoseconds.
    pub delay: Option<u64>,
    /// Growth of the delay.
    pub delay_function: Option<DelayFunction>,
    /// Cap on the delay, in nanoseconds.
    pub max_delay: Option<u64>,
    /// Reschedule forever.
    pub unlimited: Option<bool>,
}

impl ReschedulePolicy {
    /// Nomad's default for a job type; `None` for system and sysbatch (they never reschedule).
    pub fn default_for(job_type: JobType) -> Option<Self> {
        match job_type {
            JobType::Service => Some(Self {
                attempts: Some(0),
                interval: Some(0),
                delay: Some(30 * NANOS_PER_SEC),
                delay_function: Some(DelayFunction::Exponential),
                max_delay: Some(3600 * NANOS_PER_SEC),
                unlimited: Some(true),
            }),
            JobType::Batch => Some(Self {
                attempts: Some(1),
                interval: Some(24 * 3600 * NANOS_PER_SEC),
                delay: Some(5 * NANOS_PER_SEC),
                delay_function: Some(DelayFunction::Constant),
                max_delay: Some(0),
                unlimited: Some(false),
            }),
            JobType::System | JobType::SysBatch | JobType::Core => None,
        }
    }

    fn merged_over(self, mut base: Self) -> Self {
        base.attempts = self.attempts.or(base.attempts);
        base.interval = self.interval.or(base.interval);
        base.delay = self.delay.or(base.delay);
        base.delay_function = self.delay_function.or(base.delay_function);
        base.max_delay = self.max_delay.or(base.max_delay);
        base.unlimited = self.unlimited.or(base.unlimited);
        base
    }
}

/// Compute a task asks for. Absent fields take Nomad's defaults at decode time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Resources {
    /// CPU in MHz (default 100).
    #[serde(rename = "CPU", deserialize_with = "de::cpu")]
    pub cpu: u64,
    /// Memory in MB (default 300).
    #[serde(rename = "MemoryMB", deserialize_with = "de::memory_mb")]
    pub memory_mb: u64,
    /// Disk in MB (deprecated on tasks in Nomad; kept for fit checks).
    #[serde(rename = "DiskMB", deserialize_with = "de::nullable")]
    pub disk_mb: u64,
    /// The most memory a task may use, in MB, when memory oversubscription is on (Nomad's
    /// `memory_max`; 0: `memory_mb` is the limit). Scheduling counts `memory_mb` only. On an
    /// allocation: its tasks' `memory_max` summed when the servers placed it with
    /// oversubscription on, else 0, so its node knows whether the tasks' `memory_max`
    /// applies.
    #[serde(
        rename = "MemoryMaxMB",
        deserialize_with = "de::memory_max",
        serialize_with = "de::write_memory_max"
    )]
    pub memory_max_mb: u64,
    /// Whole CPU cores reserved for the task alone (Nomad's `cores`; instead of `cpu`). On an
    /// allocation: its tasks' cores summed; which cores each task got is in its
    /// `AllocatedResources`, and their MHz are counted in `cpu`.
    #[serde(deserialize_with = "de::nullable")]
    pub cores: u32,
}

impl Default for Resources {
    fn default() -> Self {
        Self {
            cpu: DEFAULT_CPU_MHZ,
            memory_mb: DEFAULT_MEMORY_MB,
            disk_mb: 0,
            memory_max_mb: 0,
            cores: 0,
        }
    }
}

impl Resources {
    /// All zero: the neutral element for [`Resources::add`].
    pub const ZERO: Resources = Resources {
        cpu: 0,
        memory_mb: 0,
        disk_mb: 0,
        memory_max_mb: 0,
        cores: 0,
    };

    /// Component-wise maximum.
    pub fn max(&self, other: &Resources) -> Resources {
        Resources {
            cpu: self.cpu.max(other.cpu),
            memory_mb: self.memory_mb.max(other.memory_mb),
            disk_mb: self.disk_mb.max(other.disk_mb),
            memory_max_mb: self.memory_max_mb.max(other.memory_max_mb),
            cores: self.cores.max(other.cores),
        }
    }

    /// Component-wise sum (saturating).
    pub fn add(&self, other: &Resources) -> Resources {
        Resources {
            cpu: self.cpu.saturating_add(other.cpu),
            memory_mb: self.memory_mb.saturating_add(other.memory_mb),
            disk_mb: self.disk_mb.saturating_add(other.disk_mb),
            memory_max_mb: self.memory_max_mb.saturating_add(other.memory_max_mb),
            cores: self.cores.saturating_add(other.cores),
        }
    }
}

/// One process run by a driver, as part of a [`TaskGroup`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Task {
    /// Unique within the group.
    #[serde(deserialize_with = "de::nullable")]
    pub name: String,
    /// The driver that runs it (`exec`, `raw_exec`, `docker`, `mock`, …).
    #[serde(deserialize_with = "de::nullable")]
    pub driver: String,
    /// User to run as (driver-specific).
    #[serde(deserialize_with = "de::nullable")]
    pub user: String,
    /// Where the task sees its group's volumes (`volume_mount`).
    #[serde(deserialize_with = "de::nullable")]
    pub volume_mounts: Vec<VolumeMount>,
    /// Files fetched into its directory before it starts (`artifact`).
    #[serde(deserialize_with = "de::nullable")]
    pub artifacts: Vec<TaskArtifact>,
    /// Driver-specific configuration, free-form.
    #[serde(deserialize_with = "de::nullable")]
    pub config: BTreeMap<String, ConfigValue>,
    /// Environment variables.
    #[serde(deserialize_with = "de::nullable")]
    pub env: BTreeMap<String, String>,
    /// What the task needs from its node.
    #[serde(deserialize_with = "de::nullable")]
    pub resources: Resources,
    /// Task-level constraints (added to the group's for placement).
    #[serde(deserialize_with = "de::nullable")]
    pub constraints: Vec<Constraint>,
    /// Task-level affinities.
    #[serde(deserialize_with = "de::nullable")]
    pub affinities: Vec<Affinity>,
    /// Free-form metadata.
    #[serde(deserialize_with = "de::nullable")]
    pub meta: BTreeMap<String, String>,
    /// Grace period between the kill signal and a forced kill, in nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub kill_timeout: u64,
    /// Signal sent to stop the task (driver default when empty).
    #[serde(deserialize_with = "de::nullable")]
    pub kill_signal: String,
    /// Whether this task's exit stops its siblings.
    #[serde(deserialize_with = "de::nullable")]
    pub leader: bool,
    /// Wait between deregistering the task's services and sending the kill signal, in
    /// nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub shutdown_delay: u64,
    /// The task's own restart policy, merged field by field over its group's.
    pub restart_policy: Option<RestartPolicy>,
    /// How its stdout and stderr are kept (`logs`; Nomad's defaults when absent).
    #[serde(rename = "LogConfig")]
    pub log_config: Option<LogConfig>,
    /// Where a dispatched child's payload is written (parameterized jobs only).
    pub dispatch_payload: Option<DispatchPayloadConfig>,
    /// Services registered while the task runs.
    #[serde(deserialize_with = "de::nullable")]
    pub services: Vec<Service>,
    /// When it runs relative to the group's main tasks (`None`: a main task).
    pub lifecycle: Option<TaskLifecycle>,
    /// Its default workload identity (filled in by [`Job::canonicalize`]: every task has
    /// one, given to it only where `env` or `file` ask).
    pub identity: Option<WorkloadIdentity>,
    /// Its alternate workload identities.
    #[serde(deserialize_with = "de::nullable")]
    pub identities: Vec<WorkloadIdentity>,
    /// Its templates, rendered before it starts.
    #[serde(deserialize_with = "de::nullable")]
    pub templates: Vec<task_runtime::Template>,
    /// Its `consul` block (namespace, cluster, admin partition): used by Consul services
    /// and templates, which wait for a Consul no teamster node has.
    pub consul: Option<Consul>,
    /// Its actions: commands `teamster action` runs in its place on demand.
    #[serde(deserialize_with = "de::nullable")]
    pub actions: Vec<task_runtime::Action>,
}

impl Task {
    /// Its `lifecycle` hook (`""` for a main task).
    pub fn lifecycle_hook(&self) -> &str {
        self.lifecycle.as_ref().map_or("", |l| l.hook.as_str())
    }

    /// A main task: no lifecycle hook.
    pub fn is_main(&self) -> bool {
        self.lifecycle_hook().is_empty()
    }

    /// A prestart or poststart task that runs for the allocation's life.
    pub fn is_sidecar(&self) -> bool {
        self.lifecycle.as_ref().is_some_and(|l| l.sidecar)
    }

    /// A poststop task.
    pub fn is_poststop(&self) -> bool {
        self.lifecycle_hook() == task_runtime::HOOK_POSTSTOP
    }
}

/// A set of tasks placed together, `Count` times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskGroup {
    /// Unique within the job; allocations are named `<job>.<group>[<index>]`.
    #[serde(deserialize_with = "de::nullable")]
    pub name: String,
    /// How many allocations to run (default 1; 0 is valid).
    #[serde(deserialize_with = "de::count")]
    pub count: u32,
    /// Group-level constraints.
    #[serde(deserialize_with = "de::nullable")]
    pub constraints: Vec<Constraint>,
    /// Group-level affinities.
    #[serde(deserialize_with = "de::nullable")]
    pub affinities: Vec<Affinity>,
    /// Group-level spreads.
    #[serde(deserialize_with = "de::nullable")]
    pub spreads: Vec<Spread>,
    /// Client-side restarts (always set after canonicalization).
    pub restart_policy: Option<RestartPolicy>,
    /// Server-side rescheduling (`None` for system and sysbatch jobs).
    pub reschedule_policy: Option<ReschedulePolicy>,
    /// The tasks, started together on one node.
    #[serde(deserialize_with = "de::nullable")]
    pub tasks: Vec<Task>,
    /// Free-form metadata.
    #[serde(deserialize_with = "de::nullable")]
    pub meta: BTreeMap<String, String>,
    /// The bounds `job scale` (and an autoscaler) must keep `Count` within.
    pub scaling: Option<ScalingPolicy>,
    /// How a new job version rolls out (service jobs; merged over the job's block).
    pub update: Option<UpdateStrategy>,
    /// How a node drain replaces the group's allocations (service jobs).
    pub migrate: Option<MigrateStrategy>,
    /// The group's network: the ports its allocations reserve on their node (host mode; at
    /// most one, as Nomad).
    #[serde(deserialize_with = "de::nullable")]
    pub networks: Vec<NetworkResource>,
    /// Services registered while an allocation of the group runs.
    #[serde(deserialize_with = "de::nullable")]
    pub services: Vec<Service>,
    /// What happens to the group's allocations while their node is disconnected.
    pub disconnect: Option<DisconnectStrategy>,
    /// Nomad's deprecated form of `disconnect.lost_after` (nanoseconds), folded into
    /// `disconnect` by [`Job::canonicalize`].
    pub max_client_disconnect: Option<u64>,
    /// Nomad's deprecated form of `disconnect.stop_on_client_after` (nanoseconds), folded
    /// into `disconnect` by [`Job::canonicalize`].
    pub stop_after_client_disconnect: Option<u64>,
    /// Nomad's deprecated form of `disconnect.replace = false`, folded into `disconnect` by
    /// [`Job::canonicalize`].
    #[serde(deserialize_with = "de::nullable")]
    pub prevent_reschedule_on_lost: bool,
    /// How long an allocation of a batch or sysbatch group may run, counted from its
    /// creation, before its client stops it (nanoseconds; Nomad's `max_run_duration`).
    pub max_run_duration: Option<u64>,
    /// A teamster extension: delay scheduling by locality (prefer nodes matching the first
    /// level, wait for one up to its `wait`, then widen to the next level, then anyone).
    pub locality: Option<Locality>,
    /// The disk an allocation reserves for its directory (`ephemeral_disk`).
    pub ephemeral_disk: Option<EphemeralDisk>,
    /// Wait between deregistering the group's services and stopping its tasks, in
    /// nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub shutdown_delay: u64,
    /// The volumes its tasks mount, by name (`volume "<name>"`).
    #[serde(deserialize_with = "de::nullable")]
    pub volumes: BTreeMap<String, VolumeRequest>,
    /// Its `consul` block (namespace, cluster, admin partition), as a task's.
    pub consul: Option<Consul>,
}

/// The longest `wait` a [`LocalityLevel`] may have (1 hour).
pub const MAX_LOCALITY_WAIT: u64 = 3_600 * NANOS_PER_SEC;

/// Delay scheduling by locality (a teamster extension): levels of node requirements, each
/// waited for a bounded time. An allocation goes to a node matching the first level; when
/// none has room it waits up to that level's `wait` (counted from the job version's
/// submission) for one to free up, then also takes nodes of the next level, and after the
/// last level's wait any node. Nodes of earlier levels are always preferred.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default, deny_unknown_fields)]
pub struct Locality {
    /// The levels, most preferred first.
    #[serde(deserialize_with = "de::nullable")]
    pub levels: Vec<LocalityLevel>,
}

/// One level of a [`Locality`]: a constraint on node attributes and how long to wait for a
/// node that satisfies it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default, deny_unknown_fields)]
pub struct LocalityLevel {
    /// Left-hand side, e.g. `${meta.cache}`.
    #[serde(rename = "LTarget", deserialize_with = "de::nullable")]
    pub l_target: String,
    /// Right-hand side, e.g. the job's input key.
    #[serde(rename = "RTarget", deserialize_with = "de::nullable")]
    pub r_target: String,
    /// A constraint operator (`set_contains`, `=`, `regexp`, …).
    #[serde(deserialize_with = "de::nullable")]
    pub operand: String,
    /// How long to wait for a node of this level, nanoseconds (at most
    /// [`MAX_LOCALITY_WAIT`]).
    #[serde(deserialize_with = "de::nullable")]
    pub wait: u64,
}

impl LocalityLevel {
    /// The level's requirement as a constraint.
    pub fn constraint(&self) -> Constraint {
        Constraint::new(&self.l_target, &self.operand, &self.r_target)
    }
}

impl Locality {
    fn validate(&self, at: &str, job_type: JobType, errors: &mut Vec<String>) {
        let at = format!("{at}, locality");
        if !matches!(job_type, JobType::Service | JobType::Batch) {
            errors.push(format!(
                "{at}: only service and batch jobs wait for locality, not {} jobs",
                job_type.as_str()
            ));
        }
        if self.levels.is_empty() {
            errors.push(format!("{at}: needs at least one level"));
        }
        for (i, level) in self.levels.iter().enumerate() {
            let at = format!("{at} level {}", i + 1);
            if level.l_target.is_empty() {
                errors.push(format!("{at}: missing LTarget (attribute)"));
            }
            let op = level.operand.as_str();
            if op.starts_with("distinct_") {
                errors.push(format!("{at}: operator {op:?} is not a node requirement"));
            } else {
                level.constraint().validate(&at, errors);
            }
            if level.wait == 0 || level.wait > MAX_LOCALITY_WAIT {
                errors.push(format!(
                    "{at}: wait must be more than 0 and at most 1h, not {}s",
                    level.wait as f64 / NANOS_PER_SEC as f64
                ));
            }
        }
    }
}

impl TaskGroup {
    /// How long the group's allocations may stay `unknown` on a disconnected node (0: none).
    pub fn lost_after(&self) -> u64 {
        self.disconnect.as_ref().map_or(0, |d| d.lost_after)
    }

    /// Whether the group's allocations on a node that went away are replaced
    /// (`disconnect.replace`, true by default). Without it they stay `unknown` until their
    /// node is back, however long that takes, as in Nomad.
    pub fn replaces_lost(&self) -> bool {
        self.disconnect.as_ref().is_none_or(|d| d.replace())
    }
}

/// Why a job ID could be taken for a path or a pattern (it names directories on clients, keys
/// under `nomad/jobs/<job>` and URL segments), if it could. Nomad refuses only spaces and NUL;
/// teamster also refuses control characters, `.` and `..` segments, an empty segment (a
/// leading, trailing or doubled `/`), `\\` and the wildcard `*`. A `/` between other
/// characters stays allowed: periodic and dispatched children are named `<parent>/<kind>-…`.
pub fn id_reads_as_path(id: &str) -> Option<&'static str> {
    if id.chars().any(char::is_control) {
        return Some("contains a control character");
    }
    if id.contains('*') {
        return Some("contains \"*\", which reads as a wildcard");
    }
    if id.contains('\\') {
        return Some("contains \"\\\\\", which reads as a path separator");
    }
    for segment in id.split('/') {
        match segment {
            "" => return Some("has an empty path segment (a leading, trailing or doubled \"/\")"),
            "." | ".." => return Some("has a \".\" or \"..\" path segment"),
            _ => {}
        }
    }
    None
}

/// Nomad's canonical identities: the default one (unnamed or named `default`) moved from
/// `Identities` to `Identity`, and one made when there is none: every task has a default
/// identity, given to it only where its `env` or `file` ask.
fn canonicalize_identities(task: &mut Task) {
    for identity in &mut task.identities {
        identity.canonicalize();
    }
    if let Some(at) = task
        .identities
        .iter()
        .position(WorkloadIdentity::is_default)
    {
        let default = task.identities.remove(at);
        task.identity = Some(default);
    }
    let default = task.identity.get_or_insert_with(WorkloadIdentity::default);
    default.canonicalize();
}

/// Nomad's API defaults of a service: its name (`<job>-<group>` for a group's,
/// `<job>-<group>-<task>` for a task's) and Nomad's default provider, Consul.
fn canonicalize_service(service: &mut Service, default_name: impl FnOnce() -> String) {
    if service.name.is_empty() {
        service.name = default_name();
    }
    if service.provider.is_empty() {
        service.provider = PROVIDER_CONSUL.to_owned();
    }
    // Nomad's: `require_healthy` by default, and a check without its own takes the
    // service's.
    if service.on_update.is_empty() {
        service.on_update = ON_UPDATE_REQUIRE_HEALTHY.to_owned();
    }
    for check in &mut service.checks {
        if check.on_update.is_empty() {
            check.on_update = service.on_update.clone();
        }
    }
}

/// A service's address mode registering the allocation's own address and port (bridge
/// mode).
pub const ADDRESS_MODE_ALLOC: &str = "alloc";

/// Nomad's checks of a service that teamster can act on: the `nomad` provider, a valid name,
/// a port label the group's network defines (or a port number), an address mode of `auto`
/// or `host` (or `alloc` in bridge mode), and no name and port given twice in one group or
/// task.
fn validate_service(
    at: &str,
    service: &Service,
    owner: ServiceOwner<'_>,
    port_labels: &BTreeSet<&str>,
    bridge: bool,
    seen: &mut BTreeSet<(String, String)>,
    errors: &mut Vec<String>,
) {
    let name = &service.name;
    let consul = service.is_consul();
    if matches!(owner, ServiceOwner::Task(_)) && service.connect.is_some() {
        errors.push(format!(
            "{at}: service {name:?} cannot have \"connect\" block, only services defined in a \
             \"group\" block can"
        ));
    }
    // A Consul service is accepted as Nomad accepts it: it constrains its group or task to
    // nodes with Consul (`integrations`), so it is checked here and never registered.
    if !matches!(
        service.provider.as_str(),
        "" | PROVIDER_NOMAD | PROVIDER_CONSUL
    ) {
        errors.push(format!(
            "{at}: service {name:?}: Service provider must be \"consul\", or \"nomad\"; not {:?}",
            service.provider
        ));
    }
    if !valid_service_name(name) {
        errors.push(format!(
            "{at}: service name {name:?} must be 1-63 letters, digits and dashes, not starting \
             or ending with a dash"
        ));
    }
    let label = service.port_label.as_str();
    if !label.is_empty()
        && !port_labels.contains(label)
        && !label.contains("${")
        && label.parse::<u16>().map_or(true, |p| p == 0)
    {
        errors.push(format!(
            "{at}: service {name:?}: port label {label:?} is not defined by the group's network"
        ));
    }
    match service.address_mode.as_str() {
        "" | "auto" | "host" => {}
        ADDRESS_MODE_ALLOC if bridge => {}
        ADDRESS_MODE_ALLOC => errors.push(format!(
            "{at}: service {name:?}: address_mode \"alloc\" needs the group's network in \
             mode \"bridge\" or \"cni/<name>\" (the allocation has no address of its own)"
        )),
        other => errors.push(format!(
            "{at}: service {name:?}: address_mode {other:?} is not supported (auto, host, or \
             alloc in bridge or cni mode)"
        )),
    }
    if !seen.insert((name.clone(), label.to_string())) {
        errors.push(format!(
            "{at}: service {name:?} with port {label:?} is defined twice"
        ));
    }
    match service.on_update.as_str() {
        "" | ON_UPDATE_REQUIRE_HEALTHY | ON_UPDATE_IGNORE | ON_UPDATE_IGNORE_WARNINGS => {}
        other => errors.push(format!(
            "{at}: service {name:?}: Service on_update must be \"require_healthy\", \
             \"ignore_warnings\", or \"ignore\"; not {other:?}"
        )),
    }
    let mut check_names = BTreeSet::new();
    for check in &service.checks {
        let cname = check.name_in(name);
        let at = format!("{at}: service {name:?}, check {cname:?}");
        if !check_names.insert(cname.clone()) {
            errors.push(format!("{at}: defined twice"));
        }
        match check.initial_status.as_str() {
            "" | "passing" | "warning" | "critical" => {}
            other => errors.push(format!(
                "{at}: invalid initial check state ({other}), must be one of \"passing\", \
                 \"warning\", \"critical\" or empty"
            )),
        }
        match check.on_update.as_str() {
            "" | ON_UPDATE_REQUIRE_HEALTHY | ON_UPDATE_IGNORE => {}
            // Consul's; native checks never warn.
            ON_UPDATE_IGNORE_WARNINGS if !consul => errors.push(format!(
                "{at}: on_update may only be set to ignore_warnings for Consul service checks"
            )),
            ON_UPDATE_IGNORE_WARNINGS => {}
            other => errors.push(format!(
                "{at}: on_update must be \"require_healthy\", \"ignore_warnings\", or \
                 \"ignore\"; got {other:?}"
            )),
        }
        if check.is_readiness()
            && (check.check_restart.is_some() || service.check_restart.is_some())
        {
            errors.push(format!(
                "{at}: on_update value \"ignore\" is not compatible with check_restart"
            ));
        }
        validate_check_kind(&at, service, check, owner, errors);
        const SECOND: u64 = 1_000_000_000;
        if check.interval < SECOND {
            errors.push(format!("{at}: interval must be at least 1s"));
        }
        if check.timeout < SECOND {
            errors.push(format!("{at}: timeout must be at least 1s"));
        }
        if check.r#type == "http" {
            if check.path.is_empty() {
                errors.push(format!("{at}: http type must have http path"));
            } else if check.path.contains("://") || !check.path.starts_with('/') {
                errors.push(format!(
                    "{at}: path {:?} must be a path on the service (starting with /)",
                    check.path
                ));
            }
            let protocols: &[&str] = &["", "http", "https"];
            if !protocols.contains(&check.protocol.as_str()) {
                errors.push(format!(
                    "{at}: protocol {:?} is not supported ({})",
                    check.protocol,
                    protocols[1..].join(" or ")
                ));
            }
            if !check.method.bytes().all(|b| b.is_ascii_uppercase()) {
                errors.push(format!(
                    "{at}: method {:?} is not an HTTP method",
                    check.method
                ));
            }
        }
        // Nomad's `RequiresPort`: a script check runs inside its task.
        if check.r#type == "script" {
            continue;
        }
        let port = if check.port_label.is_empty() {
            label
        } else {
            check.port_label.as_str()
        };
        if port.is_empty() {
            errors.push(format!(
                "{at}: a check needs a port (its own or the service's)"
            ));
        } else if !port_labels.contains(port) && port.parse::<u16>().map_or(true, |p| p == 0) {
            errors.push(format!(
                "{at}: port label {port:?} is not defined by the group's network"
            ));
        }
    }
}

/// A group's `consul` blocks and its services' `connect` blocks (see [`connect`]).
fn validate_consul_blocks(at: &str, group: &TaskGroup, errors: &mut Vec<String>) {
    if let Some(consul) = &group.consul {
        consul.validate(at, errors);
    }
    for task in &group.tasks {
        if let Some(consul) = &task.consul {
            let at = format!("{at}, task {:?}", task.name);
            consul.validate(&at, errors);
            connect::validate_task_partition(&at, group.consul.as_ref(), consul, errors);
        }
    }
    let connect_group = ConnectGroup {
        name: &group.name,
        network_modes: group.networks.iter().map(|n| n.mode.as_str()).collect(),
        task_names: group.tasks.iter().map(|t| t.name.as_str()).collect(),
        // Nomad's `DNS.IsZero`: an empty `dns {}` block says nothing.
        has_dns: group.networks.iter().any(|n| {
            n.dns.as_ref().is_some_and(|d| {
                !(d.servers.is_empty() && d.searches.is_empty() && d.options.is_empty())
            })
        }),
        reserved_labels: group
            .networks
            .iter()
            .flat_map(|n| n.reserved_ports.iter().map(|p| p.label.as_str()))
            .collect(),
    };
    // Nomad's `jobExposeCheckHook`: `expose` on an http or grpc check of a group service
    // with a sidecar, in a group in bridge or cni mode.
    let mut exposes = false;
    for service in &group.services {
        for check in service.checks.iter().filter(|c| c.expose) {
            exposes = true;
            if !service.connect.as_ref().is_some_and(|c| c.has_sidecar()) {
                errors.push(format!(
                    "{at}: exposed service check {}->{}->{} requires use of sidecar_proxy",
                    group.name,
                    service.name,
                    check.name_in(&service.name)
                ));
            } else if check.path.starts_with('/')
                && matches!(check.r#type.as_str(), "http" | "grpc")
            {
                // The path is exposed on the service's port inside the namespace: a static
                // port's or a number (a dynamic port has none yet).
                let label = service.port_label.as_str();
                let static_port = group
                    .networks
                    .iter()
                    .flat_map(|n| n.reserved_ports.iter())
                    .any(|p| p.label == label && p.value > 0);
                let number = label.bytes().all(|b| b.is_ascii_digit())
                    && label.parse::<u16>().is_ok_and(|p| p > 0);
                if !static_port && !number {
                    errors.push(format!(
                        "{at}: unable to determine local service port for service check \
                         {}->{}->{}",
                        group.name,
                        service.name,
                        check.name_in(&service.name)
                    ));
                }
            }
        }
    }
    for task in &group.tasks {
        for service in &task.services {
            for check in service.checks.iter().filter(|c| c.expose) {
                errors.push(format!(
                    "{at}: exposed service check {}[{}]->{}->{} is not a task-group service",
                    group.name,
                    task.name,
                    service.name,
                    check.name_in(&service.name)
                ));
            }
        }
    }
    if exposes {
        connect::network_mode(at, &connect_group, "connect expose check", false, errors);
    }
    let mut services = Vec::new();
    for service in &group.services {
        let Some(c) = &service.connect else {
            continue;
        };
        let at = format!("{at}: service {:?}", service.name);
        if !service.is_consul() {
            errors.push(format!(
                "{at}: Service with provider nomad cannot include Connect blocks"
            ));
        }
        c.validate(&at, errors);
        if c.has_sidecar() {
            for check in service.checks.iter().filter(|c| c.r#type == "tcp") {
                errors.push(format!(
                    "{at}: Check {} invalid: tcp checks are not valid for Connect enabled \
                     services",
                    check.name_in(&service.name)
                ));
            }
        }
        services.push((
            service.name.as_str(),
            service.task_name.as_str(),
            service.port_label.as_str(),
            c,
        ));
    }
    if services.is_empty() {
        return;
    }
    connect::validate_group_connect(at, &connect_group, &services, errors);
}

/// Where a service is defined: in a group (with the group's task names) or in a task.
#[derive(Clone, Copy)]
enum ServiceOwner<'a> {
    /// A group's service: the group's name and its tasks' names.
    Group(&'a str, &'a BTreeSet<&'a str>),
    /// A task's service: the task's name.
    Task(&'a str),
}

/// Nomad's provider rules for a check (`validateNomad` and `validateConsul`): native checks
/// are `http` or `tcp` without Consul's thresholds and TLS server name; a Consul service's
/// may be `grpc` or `script` too. And the task a check runs in: a task service's checks run
/// in that task; a group service's `script` check names one.
fn validate_check_kind(
    at: &str,
    service: &Service,
    check: &ServiceCheck,
    owner: ServiceOwner<'_>,
    errors: &mut Vec<String>,
) {
    let consul = service.is_consul();
    let kind = check.r#type.to_ascii_lowercase();
    let allowed: &[&str] = if consul {
        &["grpc", "tcp", "http", "script"]
    } else {
        &["tcp", "http"]
    };
    if !allowed.contains(&kind.as_str()) {
        errors.push(format!(
            "{at}: invalid check type ({kind:?}), must be one of {}",
            allowed.join(", ")
        ));
    }
    if kind == "script" && check.command.is_empty() {
        errors.push(format!("{at}: script type must have a valid script path"));
    }
    let thresholds = [
        ("success_before_passing", check.success_before_passing),
        ("failures_before_critical", check.failures_before_critical),
        ("failures_before_warning", check.failures_before_warning),
    ];
    // Nomad merges the check's `check_restart` over the service's: either one's
    // `ignore_warnings` holds.
    let ignore_warnings = [&check.check_restart, &service.check_restart]
        .iter()
        .any(|r| r.as_ref().is_some_and(|r| r.ignore_warnings));
    if consul {
        for (name, value) in thresholds {
            if value > 0 && !matches!(kind.as_str(), "tcp" | "http" | "grpc") {
                errors.push(format!(
                    "{at}: {name} not supported for check of type {kind:?}"
                ));
            }
        }
        if check.notes.len() > 255 {
            errors.push(format!(
                "{at}: notes must not be longer than 255 characters"
            ));
        }
        if check.expose && !matches!(kind.as_str(), "http" | "grpc") {
            errors.push(format!(
                "{at}: expose may only be set on HTTP or gRPC checks"
            ));
        }
    } else {
        if check.expose {
            errors.push(format!(
                "{at}: expose may only be set for Consul service checks"
            ));
        }
        for (name, value) in thresholds {
            if value > 0 {
                errors.push(format!(
                    "{at}: {name} may only be set for Consul service checks"
                ));
            }
        }
        if !check.tls_server_name.is_empty() {
            errors.push(format!(
                "{at}: tls_server_name may only be set for Consul service checks"
            ));
        }
        if ignore_warnings {
            errors.push(format!(
                "{at}: ignore_warnings on check_restart only supported for Consul service checks"
            ));
        }
    }
    let has_restart = check.check_restart.is_some() || service.check_restart.is_some();
    if has_restart && check.on_update == ON_UPDATE_IGNORE_WARNINGS && !ignore_warnings {
        errors.push(format!(
            "{at}: on_update value \"ignore_warnings\" not supported with check_restart \
             ignore_warnings value \"false\""
        ));
    }
    let name = check.name_in(&service.name);
    match owner {
        ServiceOwner::Task(task) => {
            if !check.task_name.is_empty() && check.task_name != task {
                errors.push(format!(
                    "{at}: Check {name} is invalid: may only specify task the check belongs \
                     to, got {:?}",
                    check.task_name
                ));
            }
        }
        ServiceOwner::Group(group, tasks) => {
            if !check.task_name.is_empty() && !tasks.contains(check.task_name.as_str()) {
                errors.push(format!(
                    "{at}: Check {name} invalid: refers to non-existent task {}",
                    check.task_name
                ));
            }
            if kind == "script" && check.task_name.is_empty() && service.task_name.is_empty() {
                errors.push(format!(
                    "{at}: Service [{group}]->{} or Check {name} must specify task parameter",
                    service.name
                ));
            }
        }
    }
}

/// The network mode giving each allocation its own namespace on the node's bridge.
pub const NETWORK_MODE_BRIDGE: &str = "bridge";

/// The prefix of a network mode naming a CNI network of the client's configuration
/// directory (`cni/<name>`): each allocation gets its own namespace attached by it.
pub const NETWORK_MODE_CNI_PREFIX: &str = "cni/";

/// Whether network `mode` gives each allocation a namespace of its own (`bridge`,
/// `cni/<name>`).
pub fn is_namespaced_mode(mode: &str) -> bool {
    mode == NETWORK_MODE_BRIDGE
        || mode
            .strip_prefix(NETWORK_MODE_CNI_PREFIX)
            .is_some_and(|name| !name.is_empty())
}

/// Nomad's checks of a group's networks that teamster can act on: one network, in host or
/// bridge mode, on the default host network; labels unique and non-empty ("Port label %s already in use");
/// static ports in 1..=65535 and not asked twice ("Static port %d already reserved by %s");
/// `to` at least -1 and at most 65535.
fn validate_networks(at: &str, networks: &[NetworkResource], errors: &mut Vec<String>) {
    if networks.len() > 1 {
        errors.push(format!(
            "{at}: only one network block is allowed per group ({} given)",
            networks.len()
        ));
    }
    for network in networks {
        let namespaced = is_namespaced_mode(&network.mode);
        match network.mode.as_str() {
            "" | "host" => {}
            _ if namespaced => {}
            other => errors.push(format!(
                "{at}: network mode {other:?} is not supported (\"host\"; \"bridge\" or \
                 \"cni/<network name>\": a network namespace per allocation)"
            )),
        }
        // Nomad's: CNI_ARGS is `k=v` pairs joined by `;`.
        if let Some(cni) = &network.cni {
            if !namespaced && !cni.args.is_empty() {
                errors.push(format!(
                    "{at}: network cni args need network mode \"bridge\" or \"cni/<name>\" \
                     (no CNI plugin runs for mode {:?})",
                    network.mode
                ));
            }
            // Nomad refuses `;`; a plugin refuses a pair with a second `=` too, so both are
            // refused here rather than at the client.
            for (k, v) in &cni.args {
                for c in [';', '='] {
                    if k.contains(c) {
                        errors.push(format!(
                            "{at}: invalid '{c}' character in CNI arg key {k:?}"
                        ));
                    }
                    if v.contains(c) {
                        errors.push(format!(
                            "{at}: invalid '{c}' character in CNI arg value {v:?}"
                        ));
                    }
                }
                if k.is_empty() {
                    errors.push(format!("{at}: a CNI arg has an empty key"));
                }
            }
        }
        // Nomad's check: an interpolated hostname is checked by the client once resolved.
        if !network.hostname.is_empty() {
            if !namespaced {
                errors.push(format!(
                    "{at}: network hostname {:?} needs network mode \"bridge\" or \
                     \"cni/<name>\" (it names the allocation's own namespace)",
                    network.hostname
                ));
            } else if !network.hostname.contains("${") && !is_dns_name(&network.hostname) {
                errors.push(format!("{at}: Hostname is not a valid DNS name"));
            } else if network.hostname.len() > 64 {
                errors.push(format!(
                    "{at}: network hostname is {} bytes long; a kernel takes at most 64",
                    network.hostname.len()
                ));
            }
        }
        if let Some(dns) = &network.dns {
            for server in &dns.servers {
                if !server.contains("${") && server.parse::<std::net::IpAddr>().is_err() {
                    errors.push(format!("{at}: dns server {server:?} is not an IP address"));
                }
            }
        }
        let mut labels = BTreeSet::new();
        let mut statics: BTreeMap<u32, &str> = BTreeMap::new();
        for port in network.ports() {
            if port.label.is_empty() {
                errors.push(format!("{at}: a port has no label"));
            } else if !labels.insert(port.label.as_str()) {
                errors.push(format!("{at}: Port label {} already in use", port.label));
            }
            if !matches!(port.host_network.as_str(), "" | "default") {
                errors.push(format!(
                    "{at}: port {:?}: host_network {:?} is not supported (only \"default\")",
                    port.label, port.host_network
                ));
            }
            if !(-1..=65535).contains(&port.to) {
                errors.push(format!(
                    "{at}: port {:?}: to {} is not a port",
                    port.label, port.to
                ));
            }
        }
        for port in &network.reserved_ports {
            if !(1..=65535).contains(&port.value) {
                errors.push(format!(
                    "{at}: port {:?}: static port {} is not in 1-65535",
                    port.label, port.value
                ));
            } else if let Some(other) = statics.insert(port.value, &port.label) {
                errors.push(format!(
                    "{at}: Static port {} already reserved by {other}",
                    port.value
                ));
            }
        }
        for port in &network.dynamic_ports {
            if port.value != 0 {
                errors.push(format!(
                    "{at}: dynamic port {:?} must not set a value ({})",
                    port.label, port.value
                ));
            }
        }
    }
}

/// A group's `network` block (Nomad's `NetworkResource`): the ports every allocation of the
/// group reserves on its node's address, and in bridge mode where they lead inside the
/// allocation's namespace (`to`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NetworkResource {
    /// `host` (or empty, the same) or `bridge`. Other modes are refused by validation.
    #[serde(deserialize_with = "de::nullable")]
    pub mode: String,
    /// Ports with a fixed (`static`) host port.
    #[serde(deserialize_with = "de::nullable")]
    pub reserved_ports: Vec<Port>,
    /// Ports whose host port the scheduler picks from the node's dynamic range.
    #[serde(deserialize_with = "de::nullable")]
    pub dynamic_ports: Vec<Port>,
    /// The hostname of the allocation's namespace (bridge mode), interpolated by the client
    /// (`${NOMAD_ALLOC_INDEX}`, …): its `exec` and `docker` tasks see it, with an
    /// `/etc/hosts` that maps it to the allocation's address.
    #[serde(deserialize_with = "de::nullable")]
    pub hostname: String,
    /// The `dns` block: the `/etc/resolv.conf` of the group's `exec` and `docker` tasks.
    #[serde(rename = "DNS")]
    pub dns: Option<DnsConfig>,
    /// The `cni` block: arguments handed to the CNI plugins (`CNI_ARGS`).
    #[serde(rename = "CNI")]
    pub cni: Option<CniConfig>,
}

/// A group network's `cni` block (Nomad's `CNIConfig`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct CniConfig {
    /// Extra `CNI_ARGS` pairs, after Nomad's own.
    #[serde(deserialize_with = "de::nullable")]
    pub args: BTreeMap<String, String>,
}

/// A group network's `dns` block (Nomad's `DNSConfig`): what it leaves empty comes from the
/// node's own `/etc/resolv.conf`. Values may interpolate the task's environment.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DnsConfig {
    /// Name servers (addresses).
    #[serde(deserialize_with = "de::nullable")]
    pub servers: Vec<String>,
    /// Search domains.
    #[serde(deserialize_with = "de::nullable")]
    pub searches: Vec<String>,
    /// Resolver options (`ndots:2`, …).
    #[serde(deserialize_with = "de::nullable")]
    pub options: Vec<String>,
}

/// Whether `name` is a DNS name as Nomad checks a network's hostname (`dns.IsDomainName`:
/// at most 255 bytes, labels of 1 to 63 bytes separated by dots, one trailing dot allowed),
/// its labels made of letters, digits, `-` and `_` (what a kernel and a container engine
/// take as a hostname).
pub fn is_dns_name(name: &str) -> bool {
    let trimmed = name.strip_suffix('.').unwrap_or(name);
    !trimmed.is_empty()
        && name.len() <= 255
        && trimmed.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

impl NetworkResource {
    /// Every port it asks for, static ones first.
    pub fn ports(&self) -> impl Iterator<Item = &Port> {
        self.reserved_ports.iter().chain(&self.dynamic_ports)
    }
}

/// One `port "<label>"` of a network block.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Port {
    /// The name tasks and services know it by (`NOMAD_PORT_<label>`).
    #[serde(deserialize_with = "de::nullable")]
    pub label: String,
    /// The host port: fixed for a reserved port, 0 (picked at placement) for a dynamic one.
    #[serde(deserialize_with = "de::nullable")]
    pub value: u32,
    /// The port the task listens on when it differs from the host port (`to`; 0: the same).
    #[serde(deserialize_with = "de::nullable")]
    pub to: i32,
    /// The host network (only `default` is known).
    #[serde(deserialize_with = "de::nullable")]
    pub host_network: String,
}

/// A task group's `scaling` block (Nomad's horizontal `ScalingPolicy`): `Count` stays within
/// `Min..=Max` when scaled; `Policy` is kept for an external autoscaler.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ScalingPolicy {
    /// Assigned by the servers when the policy first appears; kept across versions.
    #[serde(rename = "ID", deserialize_with = "de::nullable")]
    pub id: String,
    /// `horizontal` (the only type of a group policy).
    #[serde(deserialize_with = "de::nullable")]
    pub r#type: String,
    /// What it scales: `Namespace`, `Job`, `Group` (filled by canonicalization).
    #[serde(deserialize_with = "de::nullable")]
    pub target: BTreeMap<String, String>,
    /// The lowest count (default: the group's count).
    pub min: Option<i64>,
    /// The highest count (required).
    pub max: Option<i64>,
    /// The autoscaler's policy, free-form.
    #[serde(deserialize_with = "de::nullable")]
    pub policy: BTreeMap<String, crate::model::ConfigValue>,
    /// Whether the autoscaler acts on it (default true).
    pub enabled: Option<bool>,
}

/// The type of a task group's scaling policy.
pub const SCALING_HORIZONTAL: &str = "horizontal";

impl Default for TaskGroup {
    fn default() -> Self {
        Self {
            name: String::new(),
            count: 1,
            constraints: Vec::new(),
            affinities: Vec::new(),
            spreads: Vec::new(),
            restart_policy: None,
            reschedule_policy: None,
            tasks: Vec::new(),
            meta: BTreeMap::new(),
            scaling: None,
            update: None,
            migrate: None,
            networks: Vec::new(),
            services: Vec::new(),
            disconnect: None,
            max_client_disconnect: None,
            stop_after_client_disconnect: None,
            prevent_reschedule_on_lost: false,
            max_run_duration: None,
            locality: None,
            ephemeral_disk: None,
            shutdown_delay: 0,
            volumes: BTreeMap::new(),
            consul: None,
        }
    }
}

impl TaskGroup {
    /// Its network's mode (`""` without a network; Nomad's default `host` is also `""`
    /// or `"host"`).
    pub fn network_mode(&self) -> &str {
        self.networks
            .first()
            .map(|n| n.mode.as_str())
            .unwrap_or_default()
    }

    /// What one allocation of the group needs: its tasks' resources as Nomad adds them by
    /// lifecycle (the tasks that run at once summed, the largest of those sets taken: the
    /// prestart tasks; the main tasks with the sidecars and poststart tasks; the poststop
    /// tasks). Its disk is the group's `ephemeral_disk` when it has one (as Nomad's), else
    /// its tasks' disk.
    pub fn combined_resources(&self) -> Resources {
        use task_runtime::{HOOK_POSTSTOP, HOOK_PRESTART};
        let (mut prestart, mut main, mut poststop) =
            (Resources::ZERO, Resources::ZERO, Resources::ZERO);
        for t in &self.tasks {
            match t.lifecycle_hook() {
                HOOK_PRESTART => {
                    prestart = prestart.add(&t.resources);
                    if t.is_sidecar() {
                        main = main.add(&t.resources);
                    }
                }
                HOOK_POSTSTOP => poststop = poststop.add(&t.resources),
                // Main and poststart tasks.
                _ => main = main.add(&t.resources),
            }
        }
        let mut sum = main.max(&prestart).max(&poststop);
        if let Some(disk) = &self.ephemeral_disk {
            sum.disk_mb = disk.size_mb;
        }
        sum
    }

    /// The restart policy of `task`: its own block merged over the group's.
    pub fn task_restart_policy(&self, task: &Task) -> Option<RestartPolicy> {
        match (&task.restart_policy, &self.restart_policy) {
            (Some(own), Some(group)) => Some(own.clone().merged_over(group.clone())),
            (own, group) => own.clone().or_else(|| group.clone()),
        }
    }
}

/// A job: the unit users register, version and stop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Job {
    /// Region (default `global`).
    #[serde(deserialize_with = "de::nullable")]
    pub region: String,
    /// Namespace (default `default`).
    #[serde(deserialize_with = "de::nullable")]
    pub namespace: Namespace,
    /// Unique within the namespace; required.
    #[serde(rename = "ID", deserialize_with = "de::nullable")]
    pub id: JobId,
    /// Display name (defaults to the ID).
    #[serde(deserialize_with = "de::nullable")]
    pub name: String,
    /// Which scheduler runs it (default `service`).
    #[serde(rename = "Type", deserialize_with = "de::nullable")]
    pub job_type: JobType,
    /// 1…100 (default 50); orders evaluations and plans.
    #[serde(deserialize_with = "de::priority")]
    pub priority: u32,
    /// Commit a plan only if every placement fits.
    #[serde(deserialize_with = "de::nullable")]
    pub all_at_once: bool,
    /// Datacenters it may run in (default `["*"]`, all).
    #[serde(deserialize_with = "de::nullable")]
    pub datacenters: Vec<String>,
    /// Node pool it may run in (default `default`).
    #[serde(deserialize_with = "de::nullable")]
    pub node_pool: String,
    /// Job-level constraints.
    #[serde(deserialize_with = "de::nullable")]
    pub constraints: Vec<Constraint>,
    /// Job-level affinities.
    #[serde(deserialize_with = "de::nullable")]
    pub affinities: Vec<Affinity>,
    /// Job-level spreads.
    #[serde(deserialize_with = "de::nullable")]
    pub spreads: Vec<Spread>,
    /// The task groups; at least one.
    #[serde(deserialize_with = "de::nullable")]
    pub task_groups: Arc<Vec<TaskGroup>>,
    /// Free-form metadata.
    #[serde(deserialize_with = "de::nullable")]
    pub meta: BTreeMap<String, String>,
    /// Set by a deregister without purge: the job stays, its allocations are stopped.
    #[serde(deserialize_with = "de::nullable")]
    pub stop: bool,
    /// Derived by the state store (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub status: JobStatus,
    /// Human-readable note on the status (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub status_description: String,
    /// Marked by deployments as known-good (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub stable: bool,
    /// Incremented by the state store on every changed spec (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub version: u64,
    /// When the version was submitted, Unix nanoseconds (chosen by the proposer).
    #[serde(deserialize_with = "de::nullable")]
    pub submit_time: i64,
    /// Raft index of the first registration (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub create_index: u64,
    /// Raft index of the last change of any kind (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub modify_index: u64,
    /// Raft index of the last spec change (server-set); the register CAS compares it.
    #[serde(deserialize_with = "de::nullable")]
    pub job_modify_index: u64,
    /// The `periodic` block: the job is a parent the leader launches children of.
    pub periodic: Option<PeriodicConfig>,
    /// The `parameterized` block: the job is a parent that `job dispatch` launches.
    pub parameterized_job: Option<ParameterizedJobConfig>,
    /// The parent of a periodic or dispatched child.
    #[serde(rename = "ParentID", deserialize_with = "de::nullable")]
    pub parent_id: JobId,
    /// Set on a dispatched child (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub dispatched: bool,
    /// The idempotency token a dispatched child was created with (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub dispatch_idempotency_token: String,
    /// A dispatched child's payload, compressed (server-set).
    pub payload: DispatchPayload,
    /// The job's `update` block, which groups inherit field by field (service jobs get
    /// Nomad's default when they give none).
    pub update: Option<UpdateStrategy>,
    /// The job's `migrate` block, which groups inherit field by field.
    pub migrate: Option<MigrateStrategy>,
    /// The job's `reschedule` block: merged into each group's policy by `canonicalize`
    /// (which leaves none here), as Nomad's API does.
    #[serde(rename = "Reschedule")]
    pub reschedule: Option<ReschedulePolicy>,
    /// The job's `ui` block: a description and links, shown by the web UI and `job status`.
    #[serde(rename = "UI")]
    pub ui: Option<JobUiConfig>,
}

/// A job's `ui` block (Nomad's `JobUIConfig`): what people looking at the job are told.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct JobUiConfig {
    /// Free text about the job (Nomad's web UI reads it as Markdown).
    #[serde(deserialize_with = "de::nullable")]
    pub description: String,
    /// Links shown with the job.
    #[serde(deserialize_with = "de::nullable")]
    pub links: Vec<JobUiLink>,
}

/// One `link` of a job's `ui` block.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct JobUiLink {
    /// The text shown.
    #[serde(deserialize_with = "de::nullable")]
    pub label: String,
    /// Where it leads: `Url`, as Nomad's servers answer it (`URL`, its API's spelling, is
    /// read too).
    #[serde(rename = "Url", alias = "URL", deserialize_with = "de::nullable")]
    pub url: String,
}

impl Default for Job {
    fn default() -> Self {
        Self {
            region: String::new(),
            namespace: Namespace::default(),
            id: JobId::default(),
            name: String::new(),
            job_type: JobType::Service,
            priority: DEFAULT_JOB_PRIORITY,
            all_at_once: false,
            datacenters: Vec::new(),
            node_pool: String::new(),
            constraints: Vec::new(),
            affinities: Vec::new(),
            spreads: Vec::new(),
            task_groups: Default::default(),
            meta: BTreeMap::new(),
            stop: false,
            status: JobStatus::Pending,
            status_description: String::new(),
            stable: false,
            version: 0,
            submit_time: 0,
            create_index: 0,
            modify_index: 0,
            job_modify_index: 0,
            periodic: None,
            parameterized_job: None,
            parent_id: JobId::default(),
            dispatched: false,
            dispatch_idempotency_token: String::new(),
            payload: DispatchPayload::default(),
            update: None,
            migrate: None,
            reschedule: None,
            ui: None,
        }
    }
}

impl Job {
    /// A new child of this job (a periodic launch or a dispatch) with the given ID, as its
    /// name too: the parent's spec, with `ParentID` set and the status, version and indexes of
    /// a job never registered.
    pub fn new_child(&self, id: &str, now: i64) -> Job {
        Job {
            id: JobId::new(id),
            name: id.to_string(),
            parent_id: self.id.clone(),
            stop: false,
            status: JobStatus::Pending,
            status_description: String::new(),
            stable: false,
            version: 0,
            submit_time: now,
            create_index: 0,
            modify_index: 0,
            job_modify_index: 0,
            ..self.clone()
        }
    }

    /// Fills Nomad's defaults, as `api.Job.Canonicalize` does: Name ← ID, Namespace
    /// `default`, Region `global`, node pool `default`, Datacenters `["*"]`, Priority 50,
    /// restart/reschedule policies by job type (partial policies merged over the default),
    /// affinity/spread weight 50, constraint operand `=`. Idempotent.
    pub fn canonicalize(&mut self) {
        if self.name.is_empty() {
            self.name = self.id.to_string();
        }
        if self.namespace.is_empty() {
            self.namespace = Namespace::default_namespace();
        }
        if self.region.is_empty() {
            self.region = DEFAULT_REGION.to_owned();
        }
        if self.node_pool.is_empty() {
            self.node_pool = DEFAULT_NODE_POOL.to_owned();
        }
        if self.priority == 0 {
            self.priority = DEFAULT_JOB_PRIORITY;
        }
        if self.datacenters.is_empty() {
            self.datacenters = vec!["*".to_owned()];
        }
        if let Some(periodic) = &mut self.periodic {
            periodic.canonicalize();
        }
        if let Some(parameterized) = &mut self.parameterized_job {
            parameterized.canonicalize();
        }
        canonicalize_placement(
            &mut self.constraints,
            &mut self.affinities,
            &mut self.spreads,
        );
        let job_type = self.job_type;
        // Nomad's API: a service job without an update block gets the default one; groups
        // inherit the job's block field by field unless it sets nothing.
        self.update = match self.update.take() {
            Some(given) => Some(given.merged_over(&UpdateStrategy::nomad_default())),
            None if job_type == JobType::Service => Some(UpdateStrategy::nomad_default()),
            None => None,
        };
        let job_update = self.update.clone();
        let job_migrate = self.migrate.clone();
        let job_reschedule = self.reschedule.take();
        for group in Arc::make_mut(&mut self.task_groups) {
            // Nomad's deprecated field means `disconnect { lost_after = ... }`.
            if let Some(window) = group.max_client_disconnect.take() {
                if group.disconnect.is_none() {
                    group.disconnect = Some(DisconnectStrategy {
                        lost_after: window,
                        ..DisconnectStrategy::default()
                    });
                }
            }
            // And this one `disconnect { stop_on_client_after = ... }`, unless the group's
            // block says otherwise.
            if let Some(after) = group.stop_after_client_disconnect.take() {
                let disconnect = group.disconnect.get_or_insert_with(Default::default);
                if disconnect.stop_on_client_after.is_none() {
                    disconnect.stop_on_client_after = Some(after);
                }
            }
            // And this one `disconnect { replace = false }`, unless the group's block says.
            // (System jobs are never rescheduled: there it changes nothing.)
            let prevent = std::mem::take(&mut group.prevent_reschedule_on_lost);
            if prevent && matches!(job_type, JobType::Service | JobType::Batch) {
                let disconnect = group.disconnect.get_or_insert_with(Default::default);
                if disconnect.replace.is_none() {
                    disconnect.replace = Some(false);
                }
            }
            group.update = match (&job_update, group.update.take()) {
                (Some(job), Some(given)) => Some(given.merged_over(job)),
                (Some(job), None) if !job.is_unset() => Some(job.clone()),
                (_, given) => given.map(|g| g.merged_over(&UpdateStrategy::nomad_default())),
            };
            let migrate = match (&job_migrate, group.migrate.take()) {
                (Some(job), Some(given)) => Some(given.merged_over(job)),
                (Some(job), None) => Some(job.clone()),
                (None, given) => given,
            };
            group.migrate = match (job_type, migrate) {
                (JobType::Service, m) => Some(
                    m.unwrap_or_default()
                        .merged_over(&MigrateStrategy::nomad_default()),
                ),
                (_, m) => m,
            };
            let restart = RestartPolicy::default_for(job_type);
            group.restart_policy = Some(match group.restart_policy.take() {
                Some(given) => given.merged_over(restart),
                None => restart,
            });
            // The job's `reschedule` block under the group's, field by field (Nomad's
            // API merges it into the groups and keeps none at the job level); a system or
            // sysbatch job keeps what it was given, for `validate` to refuse.
            let given = match (job_reschedule.clone(), group.reschedule_policy.take()) {
                (Some(job), Some(group)) => Some(group.merged_over(job)),
                (job, group) => group.or(job),
            };
            group.reschedule_policy = match (ReschedulePolicy::default_for(job_type), given) {
                (None, given) => given,
                (Some(default), Some(given)) => Some(given.merged_over(default)),
                (Some(default), None) => Some(default),
            };
            canonicalize_placement(
                &mut group.constraints,
                &mut group.affinities,
                &mut group.spreads,
            );
            for (name, volume) in &mut group.volumes {
                if volume.name.is_empty() {
                    volume.name.clone_from(name);
                }
            }
            for task in &mut group.tasks {
                task.volume_mounts
                    .iter_mut()
                    .for_each(VolumeMount::canonicalize);
                task.artifacts
                    .iter_mut()
                    .for_each(TaskArtifact::canonicalize);
            }
            if let Some(scaling) = &mut group.scaling {
                if scaling.r#type.is_empty() {
                    scaling.r#type = SCALING_HORIZONTAL.to_owned();
                }
                scaling.min.get_or_insert(i64::from(group.count));
                scaling.enabled.get_or_insert(true);
                scaling.target = BTreeMap::from([
                    ("Namespace".to_owned(), self.namespace.to_string()),
                    ("Job".to_owned(), self.id.to_string()),
                    ("Group".to_owned(), group.name.clone()),
                ]);
            }
            for service in &mut group.services {
                canonicalize_service(service, || format!("{}-{}", self.name, group.name));
            }
            if let Some(consul) = &mut group.consul {
                consul.canonicalize();
            }
            for task in &mut group.tasks {
                if let Some(consul) = &mut task.consul {
                    consul.canonicalize();
                }
                let mut no_spreads = Vec::new();
                canonicalize_placement(
                    &mut task.constraints,
                    &mut task.affinities,
                    &mut no_spreads,
                );
                for service in &mut task.services {
                    canonicalize_service(service, || {
                        format!("{}-{}-{}", self.name, group.name, task.name)
                    });
                }
                canonicalize_identities(task);
                // Nomad's: `cpu` takes its default only when no `cores` are asked for (a
                // task asks for one or the other).
                if task.resources.cores > 0 && task.resources.cpu == DEFAULT_CPU_MHZ {
                    task.resources.cpu = 0;
                }
                for template in &mut task.templates {
                    template.canonicalize();
                }
            }
        }
    }

    /// Nomad's warning for each task that sets `memory_max` while memory oversubscription
    /// is off (the servers place it as if it did not).
    pub fn memory_max_warnings(&self, oversubscription_enabled: bool) -> Vec<String> {
        if oversubscription_enabled {
            return Vec::new();
        }
        let mut out = Vec::new();
        for group in self.task_groups.iter() {
            for task in &group.tasks {
                if task.resources.memory_max_mb != 0 {
                    out.push(format!(
                        "Memory oversubscription is not enabled; Task \"{}.{}\" memory_max \
                         value will be ignored. Update the Scheduler Configuration to allow \
                         oversubscription.",
                        group.name, task.name
                    ));
                }
            }
        }
        out
    }

    /// Nomad's warnings about its tasks' workload identities and templates.
    pub fn task_warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for group in self.task_groups.iter() {
            for task in &group.tasks {
                let at = format!("group {:?} task {:?}", group.name, task.name);
                for identity in &task.identities {
                    out.extend(identity.warnings(&at));
                }
                for (i, template) in task.templates.iter().enumerate() {
                    if template.vault_grace != 0 {
                        out.push(format!(
                            "{at}: Template {}: VaultGrace has been deprecated as of Nomad 0.11 \
                             and ignored since Vault 0.5. Please remove VaultGrace / vault_grace \
                             from template block.",
                            i + 1
                        ));
                    }
                }
            }
        }
        out
    }

    /// The task groups to change: shared with the job's other copies until changed here
    /// (copied on first write, as [`Arc::make_mut`] does).
    pub fn task_groups_mut(&mut self) -> &mut Vec<TaskGroup> {
        Arc::make_mut(&mut self.task_groups)
    }

    /// Makes the job one of another type: the policies its old type defaulted (restart,
    /// reschedule, update, migrate) are dropped, and the job is canonicalized again.
    /// Fixtures built as one type and used as another go through it.
    pub fn retype(&mut self, job_type: JobType) {
        self.job_type = job_type;
        self.update = None;
        self.migrate = None;
        for group in Arc::make_mut(&mut self.task_groups) {
            group.restart_policy = None;
            group.reschedule_policy = None;
            group.update = None;
            group.migrate = None;
        }
        self.canonicalize();
    }

    /// Checks what Nomad's `Job.Validate` checks that this model can express, and reports
    /// every problem at once.
    pub fn validate(&self) -> Result<(), ModelError> {
        let mut errors = Vec::new();
        if self.id.is_empty() {
            errors.push("missing job ID".to_owned());
        } else if self.id.chars().any(|c| c.is_whitespace() || c == '\0') {
            errors.push("job ID contains a space or a null character".to_owned());
        } else if self.id.len() > 128 {
            errors.push("job ID must be 128 characters or fewer".to_owned());
        } else if let Some(why) = id_reads_as_path(&self.id) {
            errors.push(format!("job ID {:?} {why}", self.id));
        }
        if self.name.is_empty() {
            errors.push("missing job name".to_owned());
        }
        if self.namespace.is_empty() {
            errors.push("job must be in a namespace".to_owned());
        }
        if self.region.is_empty() {
            errors.push("missing job region".to_owned());
        } else if self.region != DEFAULT_REGION {
            errors.push(format!(
                "job region {:?}: this cluster is the {DEFAULT_REGION:?} region and does not \
                 reach others",
                self.region
            ));
        }
        if self.job_type == JobType::Core {
            errors.push("job type _core is reserved for the servers".to_owned());
        }
        if !(MIN_JOB_PRIORITY..=MAX_JOB_PRIORITY).contains(&self.priority) {
            errors.push(format!(
                "job priority must be between [{MIN_JOB_PRIORITY}, {MAX_JOB_PRIORITY}]"
            ));
        }
        if self.datacenters.is_empty() {
            errors.push("missing job datacenters".to_owned());
        }
        if self.datacenters.iter().any(String::is_empty) {
            errors.push("job datacenter must be non-empty string".to_owned());
        }
        validate_placement(
            "job",
            &self.constraints,
            &self.affinities,
            &self.spreads,
            &mut errors,
        );
        if self.task_groups.is_empty() {
            errors.push("missing job task groups".to_owned());
        }
        self.validate_parent(&mut errors);
        match self.meta.get(SUPERVISOR_META).map(String::as_str) {
            None | Some("false") => {}
            Some("true") if matches!(self.job_type, JobType::Service | JobType::Batch) => {}
            Some("true") => errors.push(format!(
                "meta {SUPERVISOR_META:?}: only service and batch jobs may be supervisors, not \
                 {} jobs",
                self.job_type.as_str()
            )),
            Some(other) => errors.push(format!(
                "meta {SUPERVISOR_META:?} must be \"true\" or \"false\", not {other:?}"
            )),
        }
        let mut group_names = BTreeSet::new();
        for (i, group) in self.task_groups.iter().enumerate() {
            let at = if group.name.is_empty() {
                format!("task group {}", i + 1)
            } else {
                format!("task group {:?}", group.name)
            };
            if group.name.is_empty() {
                errors.push(format!("{at}: missing name"));
            } else if !group_names.insert(group.name.as_str()) {
                errors.push(format!("{at}: redefines a task group of the job"));
            }
            if matches!(self.job_type, JobType::System | JobType::SysBatch)
                && group.reschedule_policy.is_some()
            {
                errors.push(format!(
                    "{at}: System or sysbatch jobs should not have a reschedule policy"
                ));
            }
            if matches!(self.job_type, JobType::System | JobType::SysBatch) && group.count > 1 {
                errors.push(format!(
                    "{at}: {} jobs place one allocation per node; count must be 0 or 1",
                    self.job_type.as_str()
                ));
            }
            validate_placement(
                &at,
                &group.constraints,
                &group.affinities,
                &group.spreads,
                &mut errors,
            );
            if let Some(policy) = &group.restart_policy {
                policy.validate(&at, &mut errors);
            }
            // A group of only a Connect gateway is Nomad's: its servers add the gateway task.
            let gateway = group
                .services
                .iter()
                .any(|s| s.connect.as_ref().is_some_and(|c| c.is_gateway()));
            if group.tasks.is_empty() && !gateway {
                errors.push(format!("{at}: missing tasks"));
            }
            if let Some(scaling) = &group.scaling {
                scaling.validate(&at, group.count, self.job_type, &mut errors);
            }
            if let Some(update) = &group.update {
                match self.job_type {
                    JobType::Service => update.validate(&at, Some(group.count), &mut errors),
                    JobType::System => update.validate(&at, None, &mut errors),
                    other => errors.push(format!(
                        "{at}: job type {} does not allow an update block",
                        other.as_str(),
                    )),
                }
            }
            validate_networks(&at, &group.networks, &mut errors);
            // The namespace's hostname and the dns block reach `exec` and `docker` tasks;
            // `raw_exec` tasks see the host's own files (Nomad's drivers alike): a group of
            // only those would not act on them.
            if let Some(network) = group.networks.first() {
                let isolated = group.tasks.iter().any(|t| t.driver != "raw_exec");
                for (field, set) in [
                    ("hostname", !network.hostname.is_empty()),
                    ("dns", network.dns.is_some()),
                ] {
                    if set && !isolated && !group.tasks.is_empty() {
                        errors.push(format!(
                            "{at}: network {field} applies to exec and docker tasks; every \
                             task of this group is raw_exec, which sees the host's own \
                             /etc/hosts, /etc/resolv.conf and hostname"
                        ));
                    }
                }
            }
            if is_namespaced_mode(group.network_mode()) {
                // A docker task joins the allocation's namespace: it has no network mode of
                // its own. (Its `ports` name group ports, which the group's network
                // publishes: the engine maps none, as Nomad's driver.)
                for task in group.tasks.iter().filter(|t| t.driver == "docker") {
                    if task
                        .config
                        .get("network_mode")
                        .is_some_and(crate::model::ConfigValue::is_set)
                    {
                        errors.push(format!(
                            "{at}: task {:?}: network_mode cannot be set in a group in network \
                             mode {:?} (the task joins the allocation's namespace)",
                            task.name,
                            group.network_mode()
                        ));
                    }
                }
            }
            if let Some(disk) = &group.ephemeral_disk {
                disk.validate(&at, &mut errors);
            }
            if group.tasks.iter().filter(|t| t.leader).count() > 1 {
                errors.push(format!("{at}: only one task may be marked as leader"));
            }
            // Nomad: a group made only of lifecycle tasks has nothing to run.
            if !group.tasks.is_empty() && !group.tasks.iter().any(Task::is_main) {
                errors.push(format!(
                    "{at}: Task group {} must have at least one main task",
                    group.name
                ));
            }
            if let Some(locality) = &group.locality {
                locality.validate(&at, self.job_type, &mut errors);
            }
            let port_labels: BTreeSet<&str> = group
                .networks
                .iter()
                .flat_map(|n| n.ports().map(|p| p.label.as_str()))
                .collect();
            let task_names: BTreeSet<&str> = group.tasks.iter().map(|t| t.name.as_str()).collect();
            let bridge = is_namespaced_mode(group.network_mode());
            let mut service_ids = BTreeSet::new();
            for service in &group.services {
                validate_service(
                    &at,
                    service,
                    ServiceOwner::Group(&group.name, &task_names),
                    &port_labels,
                    bridge,
                    &mut service_ids,
                    &mut errors,
                );
                if !service.task_name.is_empty() && !task_names.contains(service.task_name.as_str())
                {
                    errors.push(format!(
                        "{at}: service {:?} names task {:?}, which the group does not have",
                        service.name, service.task_name
                    ));
                }
            }
            for task in &group.tasks {
                let mut task_ids = BTreeSet::new();
                for service in &task.services {
                    let at = format!("{at}, task {:?}", task.name);
                    validate_service(
                        &at,
                        service,
                        ServiceOwner::Task(&task.name),
                        &port_labels,
                        bridge,
                        &mut task_ids,
                        &mut errors,
                    );
                }
            }
            for task in &group.tasks {
                let at = format!("{at}, task {:?}", task.name);
                task_runtime::validate_actions(&at, &task.actions, &mut errors);
            }
            validate_consul_blocks(&at, group, &mut errors);
            // As Nomad: one provider for every service of a group and of its tasks.
            let providers: BTreeSet<bool> = group
                .services
                .iter()
                .chain(group.tasks.iter().flat_map(|t| t.services.iter()))
                .map(Service::is_consul)
                .collect();
            if providers.len() > 1 {
                errors.push(format!(
                    "{at}: Multiple service providers used: task group services must use the \
                     same provider"
                ));
            }
            if let Some(disconnect) = &group.disconnect {
                match self.job_type {
                    JobType::Service | JobType::Batch => disconnect.validate(&at, &mut errors),
                    other => errors.push(format!(
                        "{at}: disconnect: teamster supports the block for service and batch \
                         jobs, not {}",
                        other.as_str()
                    )),
                }
            }
            let canaries = group.update.as_ref().map_or(0, UpdateStrategy::canary);
            let system = matches!(self.job_type, JobType::System | JobType::SysBatch);
            for (name, volume) in &group.volumes {
                for e in volume.validate(system, group.count, canaries) {
                    errors.push(format!(
                        "{at}: Task group volume validation for {name} failed: {e}"
                    ));
                }
            }
            if let Some(limit) = group.max_run_duration {
                if limit == 0 {
                    errors.push(format!("{at}: MaxRunDuration must be greater than zero"));
                }
                if !matches!(self.job_type, JobType::Batch | JobType::SysBatch) {
                    errors.push(format!(
                        "{at}: Job type {:?} does not allow max_run_duration",
                        self.job_type.as_str()
                    ));
                }
            }
            if let Some(migrate) = &group.migrate {
                match self.job_type {
                    JobType::Service => migrate.validate(&at, &mut errors),
                    other => errors.push(format!(
                        "{at}: job type {} does not allow a migrate block",
                        other.as_str()
                    )),
                }
            }
            let mut task_names = BTreeSet::new();
            for (j, task) in group.tasks.iter().enumerate() {
                let at = if task.name.is_empty() {
                    format!("{at}, task {}", j + 1)
                } else {
                    format!("{at}, task {:?}", task.name)
                };
                if task.name.is_empty() {
                    errors.push(format!("{at}: missing name"));
                } else if task_runtime::task_name_is_not_a_directory(&task.name) {
                    errors.push(format!(
                        "{at}: a task's name names its directory: it may not be \"alloc\", \".\" \
                         or \"..\", nor contain \"/\", \"\\\" or NUL"
                    ));
                } else if !task_names.insert(task.name.as_str()) {
                    errors.push(format!("{at}: redefines a task of the group"));
                }
                // Any driver is accepted, as Nomad accepts a task driver plugin's name: a
                // driver no node has leaves the task unplaced with "missing drivers".
                if task.driver.is_empty() {
                    errors.push(format!("{at}: missing driver"));
                }
                if task.resources.cores > 0 && task.resources.cpu > 0 {
                    errors.push(format!(
                        "{at}: Task can only ask for 'cpu' or 'cores' resource, not both."
                    ));
                } else if task.resources.cpu < 1 && task.resources.cores == 0 {
                    errors.push(format!("{at}: minimum CPU value is 1"));
                }
                if task.resources.memory_mb < MIN_MEMORY_MB {
                    errors.push(format!("{at}: minimum MemoryMB value is {MIN_MEMORY_MB}"));
                }
                let max = task.resources.memory_max_mb;
                if max != 0 && max != MEMORY_NO_LIMIT && max < task.resources.memory_mb {
                    errors.push(format!(
                        "{at}: MemoryMaxMB value ({max}) should be larger than MemoryMB value ({})",
                        task.resources.memory_mb
                    ));
                }
                for (field, value, max) in [
                    ("CPU", task.resources.cpu, MAX_CPU_MHZ),
                    ("MemoryMB", task.resources.memory_mb, MAX_MEMORY_MB),
                    ("DiskMB", task.resources.disk_mb, MAX_DISK_MB),
                    ("MemoryMaxMB", task.resources.memory_max_mb, MAX_MEMORY_MB),
                ] {
                    if value > max && !(field == "MemoryMaxMB" && value == MEMORY_NO_LIMIT) {
                        errors.push(format!(
                            "{at}: {field} {value} is more than any node offers (at most {max})"
                        ));
                    }
                }
                if task.config.values().any(|v| v.depth() > MAX_CONFIG_DEPTH) {
                    errors.push(format!(
                        "{at}: config nests deeper than {MAX_CONFIG_DEPTH} levels"
                    ));
                }
                validate_placement(&at, &task.constraints, &task.affinities, &[], &mut errors);
                if let Some(logs) = &task.log_config {
                    logs.validate(&at, &mut errors);
                }
                task_runtime::validate_log_storage(
                    &at,
                    group.ephemeral_disk.as_ref(),
                    task.log_config.as_ref(),
                    &mut errors,
                );
                if let Some(restart) = &task.restart_policy {
                    restart.validate(&at, &mut errors);
                }
                if let Some(lifecycle) = &task.lifecycle {
                    lifecycle.validate(&at, &mut errors);
                }
                for (j, artifact) in task.artifacts.iter().enumerate() {
                    for e in artifact.validate() {
                        errors.push(format!("{at}: Artifact {} validation failed: {e}", j + 1));
                    }
                }
                for (j, mount) in task.volume_mounts.iter().enumerate() {
                    if !group.volumes.contains_key(&mount.volume) {
                        errors.push(format!(
                            "{at}: Volume Mount ({j}) references undefined volume {}",
                            mount.volume
                        ));
                    }
                    for e in mount.validate() {
                        errors.push(format!("{at}: Volume Mount ({j}) is invalid: \"{e}\""));
                    }
                }
                if let Some(identity) = &task.identity {
                    identity.validate(&at, &mut errors);
                }
                let mut names = std::collections::BTreeSet::new();
                for identity in &task.identities {
                    if identity.is_default() {
                        errors.push(format!("{at}: Duplicate default identities found"));
                    } else if !names.insert(identity.name.as_str()) {
                        errors.push(format!(
                            "{at}: Duplicate identity {:?} found",
                            identity.name
                        ));
                    }
                    identity.validate(&at, &mut errors);
                }
                let mut destinations = BTreeMap::new();
                for (i, template) in task.templates.iter().enumerate() {
                    for problem in template.problems() {
                        errors.push(format!(
                            "{at}: Template {} validation failed: {problem}",
                            i + 1
                        ));
                    }
                    if let Some(other) = destinations.insert(template.dest_path.as_str(), i + 1) {
                        errors.push(format!(
                            "{at}: Template {} has same destination as {other}",
                            i + 1
                        ));
                        destinations.insert(template.dest_path.as_str(), other);
                    }
                }
                if task.templates.iter().any(|t| t.once) && !task.templates.iter().all(|t| t.once) {
                    errors.push(format!(
                        "{at}: all templates of a task must set the same once value"
                    ));
                }
                if !task.kill_signal.is_empty()
                    && task_runtime::signal_name(&task.kill_signal).is_none()
                {
                    errors.push(format!(
                        "{at}: kill_signal {:?} is not a signal this system knows",
                        task.kill_signal
                    ));
                }
                if let Some(dispatch_payload) = &task.dispatch_payload {
                    if self.parameterized_job.is_none() && !self.dispatched {
                        errors.push(format!(
                            "{at}: dispatch_payload is only for parameterized jobs"
                        ));
                    }
                    dispatch_payload.validate(&at, &mut errors);
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ModelError::Invalid { errors })
        }
    }

    /// The checks of the `periodic` and `parameterized` blocks.
    fn validate_parent(&self, errors: &mut Vec<String>) {
        let batch = matches!(self.job_type, JobType::Batch | JobType::SysBatch);
        if let Some(periodic) = &self.periodic {
            if !batch {
                errors
                    .push("periodic can only be used with the batch or sysbatch scheduler".into());
            }
            if self.parameterized_job.is_some() {
                errors.push("a job cannot be both periodic and parameterized".into());
            }
            if let Err(e) = periodic.schedule() {
                errors.push(format!("periodic: {e}"));
            }
        }
        if let Some(parameterized) = &self.parameterized_job {
            if !batch {
                errors.push(
                    "parameterized job can only be used with the batch or sysbatch scheduler"
                        .into(),
                );
            }
            parameterized.validate(errors);
        }
        if self.is_parent() && (self.dispatched || !self.parent_id.is_empty()) {
            errors.push("a periodic or parameterized job cannot itself be a child".into());
        }
    }

    /// True for a job marked as a supervisor ([`SUPERVISOR_META`]).
    pub fn is_supervisor(&self) -> bool {
        self.meta.get(SUPERVISOR_META).is_some_and(|v| v == "true")
    }

    /// True for a periodic or parameterized parent: it is never placed, only its children.
    pub fn is_parent(&self) -> bool {
        self.periodic.is_some() || self.parameterized_job.is_some()
    }

    /// True for a periodic parent the dispatcher launches children of (enabled, running).
    pub fn is_periodic_active(&self) -> bool {
        self.periodic.as_ref().is_some_and(|p| p.enabled) && !self.stop
    }

    /// The task group named `name`.
    pub fn task_group(&self, name: &str) -> Option<&TaskGroup> {
        self.task_groups.iter().find(|g| g.name == name)
    }

    /// True for a stopped job (a deregister without purge).
    pub fn stopped(&self) -> bool {
        self.stop
    }

    /// Whether the user-controlled spec differs, ignoring what the servers set (status,
    /// version, stability, submit time, indexes). A changed spec makes a new version.
    pub fn spec_changed(&self, other: &Job) -> bool {
        let mut a = self.clone();
        let mut b = other.clone();
        for job in [&mut a, &mut b] {
            job.status = JobStatus::Pending;
            job.status_description.clear();
            job.stable = false;
            job.version = 0;
            job.submit_time = 0;
            job.create_index = 0;
            job.modify_index = 0;
            job.job_modify_index = 0;
        }
        a != b
    }
}

impl ScalingPolicy {
    /// Nomad's checks of a group policy: `max` set, `0 <= min <= max`, the group's count
    /// within them, horizontal only, not on system jobs.
    fn validate(&self, at: &str, count: u32, job_type: JobType, errors: &mut Vec<String>) {
        let at = format!("{at}, scaling");
        if !self.r#type.is_empty() && self.r#type != SCALING_HORIZONTAL {
            errors.push(format!(
                "{at}: scaling policy type {:?} is not supported on a task group (only {SCALING_HORIZONTAL:?})",
                self.r#type
            ));
        }
        if matches!(job_type, JobType::System | JobType::SysBatch) {
            errors.push(format!("{at}: a {job_type:?} job cannot be scaled"));
        }
        let Some(max) = self.max else {
            errors.push(format!("{at}: maximum count must be specified"));
            return;
        };
        let min = self.min.unwrap_or(i64::from(count));
        if max < 0 {
            errors.push(format!("{at}: maximum count must not be negative"));
        }
        if min < 0 {
            errors.push(format!("{at}: minimum count must not be negative"));
        }
        if min > max {
            errors.push(format!(
                "{at}: maximum count must not be less than minimum count"
            ));
        }
        let count = i64::from(count);
        if count < min {
            errors.push(format!(
                "{at}: task group count must not be less than minimum count in scaling policy"
            ));
        }
        if count > max {
            errors.push(format!(
                "{at}: task group count must not be greater than maximum count in scaling policy"
            ));
        }
    }
}

fn canonicalize_placement(
    constraints: &mut [Constraint],
    affinities: &mut [Affinity],
    spreads: &mut [Spread],
) {
    for c in constraints.iter_mut() {
        c.canonicalize();
    }
    for a in affinities.iter_mut() {
        if a.operand.is_empty() {
            a.operand = "=".to_owned();
        }
        if a.weight == 0 {
            a.weight = 50;
        }
    }
    for s in spreads.iter_mut() {
        if s.weight == 0 {
            s.weight = 50;
        }
    }
}

fn validate_placement(
    at: &str,
    constraints: &[Constraint],
    affinities: &[Affinity],
    spreads: &[Spread],
    errors: &mut Vec<String>,
) {
    for (i, c) in constraints.iter().enumerate() {
        c.validate(&format!("{at} constraint {}", i + 1), errors);
    }
    for (i, a) in affinities.iter().enumerate() {
        let at = format!("{at} affinity {}", i + 1);
        if a.l_target.is_empty() {
            errors.push(format!("{at}: missing LTarget"));
        }
        if a.weight == 0 || !(-100..=100).contains(&a.weight) {
            errors.push(format!(
                "{at}: weight must be non-zero and within [-100, 100]"
            ));
        }
        let op = a.operand.as_str();
        if op.starts_with("distinct_")
            || op == "is_set"
            || op == "is_not_set"
            || !CONSTRAINT_OPERANDS.contains(&op)
        {
            errors.push(format!("{at}: unknown affinity operator {op:?}"));
        }
    }
    for (i, s) in spreads.iter().enumerate() {
        let at = format!("{at} spread {}", i + 1);
        if s.attribute.is_empty() {
            errors.push(format!("{at}: missing attribute"));
        }
        if !(0..=100).contains(&s.weight) {
            errors.push(format!("{at}: weight must be within [0, 100]"));
        }
        let total: u64 = s.spread_target.iter().map(|t| u64::from(t.percent)).sum();
        if total > 100 {
            errors.push(format!("{at}: target percentages sum to {total}, over 100"));
        }
        let mut seen = BTreeSet::new();
        for t in &s.spread_target {
            if !seen.insert(t.value.as_str()) {
                errors.push(format!("{at}: target value {:?} is listed twice", t.value));
            }
        }
    }
}

/// Per task group allocation counts, kept current by the state store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskGroupSummary {
    /// Placements the last evaluation could not make.
    #[serde(deserialize_with = "de::nullable")]
    pub queued: u64,
    /// Allocations that finished successfully.
    #[serde(deserialize_with = "de::nullable")]
    pub complete: u64,
    /// Allocations that failed.
    #[serde(deserialize_with = "de::nullable")]
    pub failed: u64,
    /// Allocations running.
    #[serde(deserialize_with = "de::nullable")]
    pub running: u64,
    /// Allocations placed but not yet running (client status pending).
    #[serde(deserialize_with = "de::nullable")]
    pub starting: u64,
    /// Allocations on nodes that went down.
    #[serde(deserialize_with = "de::nullable")]
    pub lost: u64,
    /// Allocations on disconnected nodes.
    #[serde(deserialize_with = "de::nullable")]
    pub unknown: u64,
}

/// Counts of child jobs by status (parameterized and periodic parents; kept for the API).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct JobChildrenSummary {
    /// Children pending.
    #[serde(deserialize_with = "de::nullable")]
    pub pending: u64,
    /// Children running.
    #[serde(deserialize_with = "de::nullable")]
    pub running: u64,
    /// Children dead.
    #[serde(deserialize_with = "de::nullable")]
    pub dead: u64,
}

/// A job's allocation counts per task group (`GET /v1/job/:id/summary`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct JobSummary {
    /// The job.
    #[serde(rename = "JobID", deserialize_with = "de::nullable")]
    pub job_id: JobId,
    /// Its namespace.
    #[serde(deserialize_with = "de::nullable")]
    pub namespace: Namespace,
    /// Counts per task group name.
    #[serde(deserialize_with = "de::nullable")]
    pub summary: BTreeMap<String, TaskGroupSummary>,
    /// Child job counts.
    #[serde(deserialize_with = "de::nullable")]
    pub children: JobChildrenSummary,
    /// Raft index at which the summary was created (with the job).
    #[serde(deserialize_with = "de::nullable")]
    pub create_index: u64,
    /// Raft index of the last count change.
    #[serde(deserialize_with = "de::nullable")]
    pub modify_index: u64,
    /// The newest scaling events per task group (at most [`MAX_SCALING_EVENTS`] each),
    /// newest first: what `job scale` and `GET /v1/job/:id/scale` show.
    #[serde(deserialize_with = "de::nullable")]
    pub scaling_events: BTreeMap<String, Vec<ScalingEvent>>,
}

/// How many scaling events are kept per task group (Nomad's `JobTrackedScalingEvents`).
pub const MAX_SCALING_EVENTS: usize = 20;

/// One scaling action or report (Nomad's `ScalingEvent`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ScalingEvent {
    /// When, Unix nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub time: i64,
    /// The count asked for (`None`: only a report, nothing changed).
    pub count: Option<i64>,
    /// The count before.
    #[serde(deserialize_with = "de::nullable")]
    pub previous_count: i64,
    /// Why.
    #[serde(deserialize_with = "de::nullable")]
    pub message: String,
    /// Whether it reports an error.
    #[serde(deserialize_with = "de::nullable")]
    pub error: bool,
    /// Free-form details.
    #[serde(deserialize_with = "de::nullable")]
    pub meta: BTreeMap<String, crate::model::ConfigValue>,
    /// The evaluation the change created.
    #[serde(rename = "EvalID")]
    pub eval_id: Option<String>,
    /// The raft index it was recorded at.
    #[serde(deserialize_with = "de::nullable")]
    pub create_index: u64,
}
