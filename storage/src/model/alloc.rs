//! Allocations: one placed copy of a task group on a node.
//!
//! An [`Allocation`] does **not** embed its job (Nomad's does). It names the job by
//! `(Namespace, JobID, JobVersion)` and the state store resolves that through its job-versions
//! table ([`Snapshot::alloc_job`](crate::state::Snapshot::alloc_job)), so a million
//! allocations share a handful of job specs in memory and in snapshot images.
//!
//! The servers own `DesiredStatus` (what should happen); the client owns `ClientStatus` and
//! `TaskStates` (what did happen).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thin_vec::ThinVec;

use crate::model::de;
use crate::model::deployment::AllocDeploymentStatus;
use crate::model::ids::{AllocId, DeploymentId, EvalId, JobId, Namespace, NodeId, SharedStr};
use crate::model::job::Resources;
use crate::model::time::Timestamp;

/// What the servers want an allocation to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum DesiredStatus {
    /// Run it.
    #[default]
    #[serde(rename = "run")]
    Run,
    /// Stop it (job stopped, scaled down, replaced).
    #[serde(rename = "stop")]
    Stop,
    /// Stop it to make room (preemption, drain).
    #[serde(rename = "evict")]
    Evict,
}

/// What the client reports about an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum ClientStatus {
    /// Placed, not running yet.
    #[default]
    #[serde(rename = "pending")]
    Pending,
    /// Running.
    #[serde(rename = "running")]
    Running,
    /// Finished successfully.
    #[serde(rename = "complete")]
    Complete,
    /// Finished unsuccessfully.
    #[serde(rename = "failed")]
    Failed,
    /// Its node went down (set by the servers).
    #[serde(rename = "lost")]
    Lost,
    /// Its node is disconnected (set by the servers).
    #[serde(rename = "unknown")]
    Unknown,
}

impl ClientStatus {
    /// Nomad's name for the status.
    pub fn as_str(&self) -> &'static str {
        match self {
            ClientStatus::Pending => "pending",
            ClientStatus::Running => "running",
            ClientStatus::Complete => "complete",
            ClientStatus::Failed => "failed",
            ClientStatus::Lost => "lost",
            ClientStatus::Unknown => "unknown",
        }
    }

    /// Complete, failed and lost allocations will not run again.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            ClientStatus::Complete | ClientStatus::Failed | ClientStatus::Lost
        )
    }
}

/// A task's state within an allocation (`pending`, `running`, `dead`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum TaskStateValue {
    /// Not started yet.
    #[default]
    #[serde(rename = "pending")]
    Pending,
    /// Running.
    #[serde(rename = "running")]
    Running,
    /// Exited for good.
    #[serde(rename = "dead")]
    Dead,
}

/// Something that happened to a task, as the client reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskEvent {
    /// `Received`, `Started`, `Terminated`, `Restarting`, `Killed`, `Driver Failure`, …
    #[serde(rename = "Type", deserialize_with = "de::nullable")]
    pub event_type: String,
    /// When, Unix nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub time: i64,
    /// Free-form message.
    #[serde(deserialize_with = "de::nullable")]
    pub message: String,
    /// Message for display.
    #[serde(deserialize_with = "de::nullable")]
    pub display_message: String,
    /// Structured details.
    #[serde(deserialize_with = "de::nullable")]
    pub details: BTreeMap<String, String>,
    /// This event fails the task.
    #[serde(deserialize_with = "de::nullable")]
    pub fails_task: bool,
    /// Exit code, for `Terminated`.
    #[serde(deserialize_with = "de::nullable")]
    pub exit_code: i64,
    /// Signal, for `Terminated`.
    #[serde(deserialize_with = "de::nullable")]
    pub signal: i64,
    /// Driver error text.
    #[serde(deserialize_with = "de::nullable")]
    pub driver_error: String,
    /// Kill timeout used, in nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub kill_timeout: u64,
    /// Kill error text.
    #[serde(deserialize_with = "de::nullable")]
    pub kill_error: String,
    /// Why a restart happens.
    #[serde(deserialize_with = "de::nullable")]
    pub restart_reason: String,
    /// Setup error text.
    #[serde(deserialize_with = "de::nullable")]
    pub setup_error: String,
}

/// A task's state as reported by the client.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskState {
    /// Pending, running or dead.
    #[serde(deserialize_with = "de::nullable")]
    pub state: TaskStateValue,
    /// The task failed.
    #[serde(deserialize_with = "de::nullable")]
    pub failed: bool,
    /// Restarts so far.
    #[serde(deserialize_with = "de::nullable")]
    pub restarts: u64,
    /// Last restart.
    #[serde(deserialize_with = "de::nullable")]
    pub last_restart: Timestamp,
    /// Start time.
    #[serde(deserialize_with = "de::nullable")]
    pub started_at: Timestamp,
    /// Finish time.
    #[serde(deserialize_with = "de::nullable")]
    pub finished_at: Timestamp,
    /// Recent events, oldest first.
    #[serde(deserialize_with = "de::nullable")]
    pub events: Vec<TaskEvent>,
}

/// One earlier reschedule of the allocation chain.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RescheduleEvent {
    /// When, Unix nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub reschedule_time: i64,
    /// The allocation that was replaced.
    #[serde(rename = "PrevAllocID", deserialize_with = "de::nullable")]
    pub prev_alloc_id: AllocId,
    /// Its node.
    #[serde(rename = "PrevNodeID", deserialize_with = "de::nullable")]
    pub prev_node_id: NodeId,
    /// The delay applied, in nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub delay: u64,
}

/// The reschedule history the scheduler consults against the policy.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RescheduleTracker {
    /// Earlier reschedules, oldest first.
    #[serde(deserialize_with = "de::nullable")]
    pub events: ThinVec<RescheduleEvent>,
}

/// One placed copy of a task group.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Allocation {
    /// UUID chosen by the scheduler.
    #[serde(rename = "ID", deserialize_with = "de::nullable")]
    pub id: AllocId,
    /// The job's namespace.
    #[serde(deserialize_with = "de::nullable")]
    pub namespace: Namespace,
    /// The evaluation that placed (or last updated) it.
    #[serde(rename = "EvalID", deserialize_with = "de::nullable")]
    pub eval_id: EvalId,
    /// `<job>.<group>[<index>]`.
    #[serde(deserialize_with = "de::nullable")]
    pub name: String,
    /// Where it runs.
    #[serde(rename = "NodeID", deserialize_with = "de::nullable")]
    pub node_id: NodeId,
    /// The job it belongs to.
    #[serde(rename = "JobID", deserialize_with = "de::nullable")]
    pub job_id: JobId,
    /// The job version it runs (resolve the spec through the state's job versions).
    #[serde(deserialize_with = "de::nullable")]
    pub job_version: u64,
    /// The task group it is a copy of (shared with the job's other allocations of the group).
    #[serde(deserialize_with = "de::nullable")]
    pub task_group: SharedStr,
    /// What it takes from its node (the sum of its tasks).
    #[serde(deserialize_with = "de::nullable")]
    pub resources: Resources,
    /// What the servers want.
    #[serde(deserialize_with = "de::nullable")]
    pub desired_status: DesiredStatus,
    /// Why the servers want it.
    #[serde(deserialize_with = "de::nullable")]
    pub desired_description: SharedStr,
    /// What the client reports.
    #[serde(deserialize_with = "de::nullable")]
    pub client_status: ClientStatus,
    /// The client's explanation.
    #[serde(deserialize_with = "de::nullable")]
    pub client_description: SharedStr,
    /// Per task state, reported by the client.
    #[serde(deserialize_with = "de::nullable")]
    pub task_states: BTreeMap<String, TaskState>,
    /// The allocation this one replaces.
    #[serde(deserialize_with = "de::nullable")]
    pub previous_allocation: AllocId,
    /// The allocation that replaced this one (set by the state store).
    #[serde(deserialize_with = "de::nullable")]
    pub next_allocation: AllocId,
    /// A follow-up evaluation that will reschedule it later.
    #[serde(rename = "FollowupEvalID", deserialize_with = "de::nullable")]
    pub followup_eval_id: EvalId,
    /// Earlier reschedules of this chain.
    pub reschedule_tracker: Option<RescheduleTracker>,
    /// Raft index of creation (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub create_index: u64,
    /// Raft index of the last change of any kind (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub modify_index: u64,
    /// Raft index of the last server-side change (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub alloc_modify_index: u64,
    /// Creation time, Unix nanoseconds (chosen by the proposer).
    #[serde(deserialize_with = "de::nullable")]
    pub create_time: i64,
    /// Last change time, Unix nanoseconds (chosen by the proposer).
    #[serde(deserialize_with = "de::nullable")]
    pub modify_time: i64,
    /// What the servers were asked to do with it besides its desired status
    /// (`alloc stop` marks it to migrate).
    #[serde(deserialize_with = "de::nullable")]
    pub desired_transition: DesiredTransition,
    /// The deployment that placed it (empty for none).
    #[serde(rename = "DeploymentID", deserialize_with = "de::nullable")]
    pub deployment_id: DeploymentId,
    /// Its health in that deployment or in a migration, reported by the client.
    /// Boxed: most allocations have none, and the box keeps the allocation small.
    pub deployment_status: Option<Box<AllocDeploymentStatus>>,
    /// What it holds on its node besides CPU, memory and disk: its ports.
    #[serde(deserialize_with = "de::nullable")]
    pub allocated_resources: AllocatedResources,
    /// The normalized score its node got when the scheduler placed it, in millionths (the
    /// top `NormScore` of Nomad's `Metrics.ScoreMetaData`): what a `best_score` reconnect
    /// compares.
    #[serde(deserialize_with = "de::nullable")]
    pub placement_score: i64,
    /// Its state history: when the servers marked it `unknown`, and when it reconnected.
    #[serde(deserialize_with = "de::nullable")]
    pub alloc_states: ThinVec<crate::model::AllocState>,
    /// The allocations evicted to make room for this one.
    #[serde(deserialize_with = "de::nullable")]
    pub preempted_allocations: ThinVec<AllocId>,
    /// The allocation this one was evicted for (empty unless preempted).
    #[serde(deserialize_with = "de::nullable")]
    pub preempted_by_allocation: AllocId,
    /// The sequence number of the newest client report applied (teamster's own field; see
    /// [`AllocClientReport::seq`](crate::fsm::AllocClientReport::seq)); 0 before any.
    #[serde(deserialize_with = "de::nullable")]
    pub client_report_seq: u32,
}

/// What an allocation holds on its node that is not counted in [`Resources`] (Nomad's
/// `AllocatedResources`, the part teamster keeps).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocatedResources {
    /// What the group's tasks share.
    #[serde(deserialize_with = "de::nullable")]
    pub shared: AllocatedSharedResources,
    /// What each task holds alone, by task: the cores reserved for a task that asks for
    /// `cores` (none when no task does).
    pub tasks: Option<Box<BTreeMap<String, AllocatedTaskResources>>>,
}

impl AllocatedResources {
    /// What `task` holds alone, if anything: the cores reserved for it.
    pub fn task(&self, task: &str) -> Option<&AllocatedTaskResources> {
        self.tasks
            .as_deref()
            .and_then(|t| t.get(task))
            .filter(|t| !t.cpu.reserved_cores.is_empty())
    }

    /// Every core its tasks hold.
    pub fn cores(&self) -> impl Iterator<Item = u16> + '_ {
        self.tasks
            .as_deref()
            .into_iter()
            .flat_map(|t| t.values())
            .flat_map(|t| t.cpu.reserved_cores.iter().copied())
    }
}

/// Nomad's `AllocatedTaskResources`, the part teamster keeps: its CPU.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocatedTaskResources {
    /// The task's CPU.
    #[serde(deserialize_with = "de::nullable")]
    pub cpu: AllocatedCpuResources,
}

/// Nomad's `AllocatedCpuResources`: the MHz a task is given and the cores reserved for it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocatedCpuResources {
    /// MHz (for `cores`: the cores' share of the node's MHz).
    #[serde(deserialize_with = "de::nullable")]
    pub cpu_shares: u64,
    /// The core ids reserved for the task alone.
    #[serde(deserialize_with = "de::nullable")]
    pub reserved_cores: Vec<u16>,
}

/// Nomad's `AllocatedSharedResources`: the group's ports.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocatedSharedResources {
    /// One mapping per port label of the group's network.
    #[serde(deserialize_with = "de::nullable")]
    pub ports: ThinVec<AllocatedPortMapping>,
}

/// Nomad's `AllocatedPortMapping`: a port label, the host port it got and where the task
/// listens.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocatedPortMapping {
    /// The group's port label.
    #[serde(deserialize_with = "de::nullable")]
    pub label: String,
    /// The host port.
    #[serde(deserialize_with = "de::nullable")]
    pub value: u32,
    /// The port inside the task when it differs (0: the host port).
    #[serde(deserialize_with = "de::nullable")]
    pub to: i32,
    /// The node address the port is on.
    #[serde(rename = "HostIP", deserialize_with = "de::nullable")]
    pub host_ip: String,
}

impl Allocation {
    /// A copy whose task states are `task_states`. A client's report carries every task's
    /// state, so the state store builds the updated allocation with this rather than copying
    /// the old map only to drop it. Every field is named, so a new one cannot be left out.
    pub fn with_task_states(&self, task_states: BTreeMap<String, TaskState>) -> Allocation {
        let Allocation {
            id,
            namespace,
            eval_id,
            name,
            node_id,
            job_id,
            job_version,
            task_group,
            resources,
            desired_status,
            desired_description,
            client_status,
            client_description,
            task_states: _,
            previous_allocation,
            next_allocation,
            followup_eval_id,
            reschedule_tracker,
            create_index,
            modify_index,
            alloc_modify_index,
            create_time,
            modify_time,
            desired_transition,
            deployment_id,
            deployment_status,
            allocated_resources,
            placement_score,
            alloc_states,
            preempted_allocations,
            preempted_by_allocation,
            client_report_seq,
        } = self;
        Allocation {
            id: id.clone(),
            namespace: namespace.clone(),
            eval_id: eval_id.clone(),
            name: name.clone(),
            node_id: node_id.clone(),
            job_id: job_id.clone(),
            job_version: *job_version,
            task_group: task_group.clone(),
            resources: *resources,
            desired_status: *desired_status,
            desired_description: desired_description.clone(),
            client_status: *client_status,
            client_description: client_description.clone(),
            task_states,
            previous_allocation: previous_allocation.clone(),
            next_allocation: next_allocation.clone(),
            followup_eval_id: followup_eval_id.clone(),
            reschedule_tracker: reschedule_tracker.clone(),
            create_index: *create_index,
            modify_index: *modify_index,
            alloc_modify_index: *alloc_modify_index,
            create_time: *create_time,
            modify_time: *modify_time,
            desired_transition: desired_transition.clone(),
            deployment_id: deployment_id.clone(),
            deployment_status: deployment_status.clone(),
            allocated_resources: allocated_resources.clone(),
            placement_score: *placement_score,
            alloc_states: alloc_states.clone(),
            preempted_allocations: preempted_allocations.clone(),
            preempted_by_allocation: preempted_by_allocation.clone(),
            client_report_seq: *client_report_seq,
        }
    }

    /// Whether a client report numbered `seq` is older than one already applied (an older
    /// report overtaken by a newer one). A report numbered 0 is not a client's and is never
    /// stale.
    pub fn is_stale_client_report(&self, seq: u32) -> bool {
        seq != 0 && seq < self.client_report_seq
    }

    /// When the servers last marked it `unknown`, if that is its latest recorded state
    /// (it has not reconnected since).
    pub fn unknown_since(&self) -> Option<i64> {
        let last = self
            .alloc_states
            .iter()
            .rev()
            .find(|s| s.field == crate::model::disconnect::ALLOC_STATE_CLIENT_STATUS)?;
        (last.value == ClientStatus::Unknown.as_str()).then_some(last.time)
    }

    /// Appends a `ClientStatus` entry to its state history.
    pub fn append_client_state(&mut self, status: ClientStatus, now: i64) {
        self.alloc_states.push(crate::model::AllocState {
            field: crate::model::disconnect::ALLOC_STATE_CLIENT_STATUS.to_string(),
            value: status.as_str().to_string(),
            time: now,
        });
    }

    /// The host ports it holds on its node.
    pub fn host_ports(&self) -> impl Iterator<Item = u32> + '_ {
        self.allocated_resources
            .shared
            .ports
            .iter()
            .map(|p| p.value)
    }
}

/// Nomad's `DesiredTransition`: a change of an allocation asked for outside of its job
/// (`alloc stop`), which the next evaluation of the job carries out. Unset fields are `null`
/// in JSON, as Nomad's pointers are.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DesiredTransition {
    /// Stop the allocation and place a replacement (Nomad's `Migrate`): the scheduler treats
    /// it like an allocation on a draining node.
    pub migrate: Option<bool>,
    /// Replace the allocation although it has not failed (Nomad's `Reschedule`): the
    /// deployment watcher sets it on unhealthy allocations a deployment can still replace.
    pub reschedule: Option<bool>,
}

impl DesiredTransition {
    /// Nomad's `ShouldMigrate`.
    pub fn should_migrate(&self) -> bool {
        self.migrate == Some(true)
    }

    /// Nomad's `ShouldReschedule`.
    pub fn should_reschedule(&self) -> bool {
        self.reschedule == Some(true)
    }

    /// Nomad's `Merge`: the fields `other` sets replace these.
    pub fn merge(&mut self, other: &DesiredTransition) {
        if other.migrate.is_some() {
            self.migrate = other.migrate;
        }
        if other.reschedule.is_some() {
            self.reschedule = other.reschedule;
        }
    }
}

impl Allocation {
    /// Nomad's `TerminalStatus`: the servers want it stopped, or the client says it is done.
    pub fn terminal_status(&self) -> bool {
        self.server_terminal_status() || self.client_terminal_status()
    }

    /// Desired status stop or evict.
    pub fn server_terminal_status(&self) -> bool {
        matches!(
            self.desired_status,
            DesiredStatus::Stop | DesiredStatus::Evict
        )
    }

    /// Client status complete, failed or lost.
    pub fn client_terminal_status(&self) -> bool {
        self.client_status.is_terminal()
    }

    /// Reported healthy in its deployment or migration.
    pub fn is_healthy(&self) -> bool {
        self.deployment_status
            .as_ref()
            .is_some_and(|s| s.is_healthy())
    }

    /// Reported unhealthy in its deployment or migration.
    pub fn is_unhealthy(&self) -> bool {
        self.deployment_status
            .as_ref()
            .is_some_and(|s| s.is_unhealthy())
    }

    /// Counts against its deployment: reported unhealthy, or failed on its client before
    /// any health verdict (a failed allocation is unhealthy whether or not its client said
    /// so yet). The deployment watcher replaces these or fails the deployment.
    pub fn counts_unhealthy(&self) -> bool {
        self.is_unhealthy() || (self.client_status == ClientStatus::Failed && !self.is_healthy())
    }

    /// Placed as a canary.
    pub fn is_canary(&self) -> bool {
        self.deployment_status.as_ref().is_some_and(|s| s.canary)
    }
}

/// A server-side stop of an existing allocation, as carried by plans and plan results (Nomad
/// normalises stopped allocations to such diffs so plans stay small).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocStop {
    /// The allocation.
    #[serde(rename = "ID", deserialize_with = "de::nullable")]
    pub id: AllocId,
    /// `stop` or `evict` (a `run` here is treated as `stop`).
    #[serde(deserialize_with = "de::nullable")]
    pub desired_status: DesiredStatus,
    /// Why.
    #[serde(deserialize_with = "de::nullable")]
    pub desired_description: String,
    /// `lost` or `unknown` when the servers mark it so (node down or disconnected).
    pub client_status: Option<ClientStatus>,
    /// A follow-up evaluation that will reschedule it.
    #[serde(rename = "FollowupEvalID", deserialize_with = "de::nullable")]
    pub followup_eval_id: EvalId,
    /// When, Unix nanoseconds (chosen by the proposer).
    #[serde(deserialize_with = "de::nullable")]
    pub modify_time: i64,
    /// For an eviction: the allocation it makes room for.
    #[serde(deserialize_with = "de::nullable")]
    pub preempted_by_allocation: AllocId,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AllocDeploymentStatus, AllocState};

    /// The memory aim (issue 21: at most 512 resident bytes per allocation at a million,
    /// `storage/tests/memory.rs`) has a few bytes to spare. `MemoryMaxMB` took the struct
    /// from 280 to 288 bytes; the memory test measured 500 resident bytes per allocation at
    /// both sizes, back to back (the same size class of the allocator with the `Arc`'s
    /// counts). `Cores` and the tasks' reserved cores took it to 304: 501 bytes measured. A
    /// field that grows it further may move every allocation into the next class.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn an_allocation_fits_in_304_bytes() {
        assert!(
            std::mem::size_of::<Allocation>() <= 304,
            "{} bytes",
            std::mem::size_of::<Allocation>()
        );
    }

    #[test]
    fn with_task_states_copies_every_other_field() {
        let task = |restarts| TaskState {
            restarts,
            ..TaskState::default()
        };
        let alloc = Allocation {
            id: "a1".into(),
            namespace: Namespace::new("ns"),
            eval_id: "e1".into(),
            name: "web.web[0]".into(),
            node_id: "n1".into(),
            job_id: "web".into(),
            job_version: 3,
            task_group: "web".into(),
            resources: Resources {
                cpu: 100,
                memory_mb: 64,
                ..Resources::default()
            },
            desired_status: DesiredStatus::Stop,
            desired_description: "stopping".into(),
            client_status: ClientStatus::Running,
            client_description: "running".into(),
            task_states: BTreeMap::from([("old".to_string(), task(1))]),
            previous_allocation: "a0".into(),
            next_allocation: "a2".into(),
            followup_eval_id: "e2".into(),
            reschedule_tracker: Some(RescheduleTracker::default()),
            create_index: 4,
            modify_index: 5,
            alloc_modify_index: 6,
            create_time: 7,
            modify_time: 8,
            desired_transition: DesiredTransition {
                migrate: Some(true),
                reschedule: None,
            },
            deployment_id: "d1".into(),
            deployment_status: Some(Box::new(AllocDeploymentStatus {
                healthy: Some(true),
                ..AllocDeploymentStatus::default()
            })),
            allocated_resources: AllocatedResources::default(),
            placement_score: 9,
            alloc_states: ThinVec::from(vec![AllocState {
                field: "ClientStatus".into(),
                value: "unknown".into(),
                ..AllocState::default()
            }]),
            preempted_allocations: ThinVec::from(vec![AllocId::new("p1")]),
            preempted_by_allocation: "p2".into(),
            client_report_seq: 10,
        };
        let states = BTreeMap::from([("new".to_string(), task(2))]);
        let mut expected = alloc.clone();
        expected.task_states = states.clone();
        assert_eq!(alloc.with_task_states(states), expected);
    }
}
