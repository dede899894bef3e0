//! Evaluations: a request to (re)compute a job's placements, and its outcome.
//!
//! Every change that may need scheduling (a job registered, a node down, an allocation
//! failed) writes an [`Evaluation`]. The leader's broker hands `pending` ones to scheduler
//! workers; `blocked` ones wait in the blocked-evals tracker for capacity, keyed by
//! `ClassEligibility` / `EscapedComputedClass` and compared against `SnapshotIndex`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::de;
use crate::model::ids::{EvalId, JobId, Namespace, NodeId};
use crate::model::job::JobType;
use crate::model::time::Timestamp;

/// An evaluation's life cycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum EvalStatus {
    /// Waiting in the broker for a worker.
    #[default]
    #[serde(rename = "pending")]
    Pending,
    /// Waiting for capacity in the blocked-evals tracker.
    #[serde(rename = "blocked")]
    Blocked,
    /// Processed.
    #[serde(rename = "complete")]
    Complete,
    /// Gave up (delivery limit or plan attempts exhausted).
    #[serde(rename = "failed")]
    Failed,
    /// Superseded (a newer evaluation of the job did the work).
    #[serde(rename = "canceled")]
    Canceled,
}

impl EvalStatus {
    /// Nomad's name for the status.
    pub fn as_str(&self) -> &'static str {
        match self {
            EvalStatus::Pending => "pending",
            EvalStatus::Blocked => "blocked",
            EvalStatus::Complete => "complete",
            EvalStatus::Failed => "failed",
            EvalStatus::Canceled => "canceled",
        }
    }

    /// Complete, failed and canceled evaluations are done.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            EvalStatus::Complete | EvalStatus::Failed | EvalStatus::Canceled
        )
    }
}

/// Why an evaluation was created (`TriggeredBy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum EvalTrigger {
    /// A job was registered or updated.
    #[default]
    #[serde(rename = "job-register")]
    JobRegister,
    /// A job was stopped or purged.
    #[serde(rename = "job-deregister")]
    JobDeregister,
    /// A periodic job launched.
    #[serde(rename = "periodic-job")]
    PeriodicJob,
    /// A node started draining.
    #[serde(rename = "node-drain")]
    NodeDrain,
    /// A node changed status or eligibility.
    #[serde(rename = "node-update")]
    NodeUpdate,
    /// An allocation was stopped by an operator.
    #[serde(rename = "alloc-stop")]
    AllocStop,
    /// A scheduled (time-based) follow-up.
    #[serde(rename = "scheduled")]
    Scheduled,
    /// A rolling update step.
    #[serde(rename = "rolling-update")]
    RollingUpdate,
    /// The deployment watcher.
    #[serde(rename = "deployment-watcher")]
    DeploymentWatcher,
    /// A failed evaluation's follow-up.
    #[serde(rename = "failed-follow-up")]
    FailedFollowUp,
    /// Plan attempts were exhausted.
    #[serde(rename = "max-plan-attempts")]
    MaxPlanAttempts,
    /// An allocation failed.
    #[serde(rename = "alloc-failure")]
    AllocFailure,
    /// Placements remained (a blocked evaluation).
    #[serde(rename = "queued-allocs")]
    QueuedAllocs,
    /// Allocations were preempted.
    #[serde(rename = "preemption")]
    Preemption,
    /// A job was scaled.
    #[serde(rename = "job-scaling")]
    JobScaling,
    /// A disconnect window ran out.
    #[serde(rename = "max-disconnect-timeout")]
    MaxDisconnectTimeout,
    /// A disconnected node reconnected.
    #[serde(rename = "reconnect")]
    Reconnect,
    /// A delayed reschedule is due.
    #[serde(rename = "alloc-reschedule")]
    AllocReschedule,
    /// A locality wait ends: placements that waited for a preferred node widen.
    #[serde(rename = "locality-wait")]
    LocalityWait,
}

/// Why placements failed, per task group (`FailedTGAllocs`): the scheduler's metrics.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocMetric {
    /// Nodes looked at.
    #[serde(deserialize_with = "de::nullable")]
    pub nodes_evaluated: u64,
    /// Nodes removed by constraints or drivers.
    #[serde(deserialize_with = "de::nullable")]
    pub nodes_filtered: u64,
    /// Nodes in the job's node pool.
    #[serde(deserialize_with = "de::nullable")]
    pub nodes_in_pool: u64,
    /// Ready nodes per datacenter.
    #[serde(deserialize_with = "de::nullable")]
    pub nodes_available: BTreeMap<String, u64>,
    /// Filtered nodes per node class (`node_class`; nodes without one are not counted).
    #[serde(deserialize_with = "de::nullable")]
    pub class_filtered: BTreeMap<String, u64>,
    /// Filtered nodes per constraint.
    #[serde(deserialize_with = "de::nullable")]
    pub constraint_filtered: BTreeMap<String, u64>,
    /// Nodes without room.
    #[serde(deserialize_with = "de::nullable")]
    pub nodes_exhausted: u64,
    /// Exhausted nodes per node class (`node_class`; nodes without one are not counted).
    #[serde(deserialize_with = "de::nullable")]
    pub class_exhausted: BTreeMap<String, u64>,
    /// Exhausted nodes per resource dimension (`cpu`, `memory`, …).
    #[serde(deserialize_with = "de::nullable")]
    pub dimension_exhausted: BTreeMap<String, u64>,
    /// Quotas that were reached.
    #[serde(deserialize_with = "de::nullable")]
    pub quota_exhausted: Vec<String>,
    /// Time spent placing, in nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub allocation_time: u64,
    /// Further identical failures folded into this one.
    #[serde(deserialize_with = "de::nullable")]
    pub coalesced_failures: u64,
}

/// An evaluation.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Evaluation {
    /// UUID chosen by the proposer.
    #[serde(rename = "ID", deserialize_with = "de::nullable")]
    pub id: EvalId,
    /// The job's namespace.
    #[serde(deserialize_with = "de::nullable")]
    pub namespace: Namespace,
    /// Copied from the job; orders the broker's queues.
    #[serde(deserialize_with = "de::nullable")]
    pub priority: u32,
    /// Which scheduler processes it (the job's type, or `_core`).
    #[serde(rename = "Type", deserialize_with = "de::nullable")]
    pub eval_type: JobType,
    /// Why it exists.
    #[serde(deserialize_with = "de::nullable")]
    pub triggered_by: EvalTrigger,
    /// The job to evaluate.
    #[serde(rename = "JobID", deserialize_with = "de::nullable")]
    pub job_id: JobId,
    /// The job's `JobModifyIndex` when the evaluation was made.
    #[serde(deserialize_with = "de::nullable")]
    pub job_modify_index: u64,
    /// The node whose change triggered it (node-update, system per-node blocked evals).
    #[serde(rename = "NodeID", deserialize_with = "de::nullable")]
    pub node_id: NodeId,
    /// The node's `ModifyIndex` when the evaluation was made.
    #[serde(deserialize_with = "de::nullable")]
    pub node_modify_index: u64,
    /// Deployment being watched (unused by this scheduler; kept for the API shape).
    #[serde(rename = "DeploymentID", deserialize_with = "de::nullable")]
    pub deployment_id: String,
    /// Life cycle state.
    #[serde(deserialize_with = "de::nullable")]
    pub status: EvalStatus,
    /// Why the status is what it is.
    #[serde(deserialize_with = "de::nullable")]
    pub status_description: String,
    /// Delay before the broker hands it out, in nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub wait: u64,
    /// Absolute time before which the broker holds it back.
    #[serde(deserialize_with = "de::nullable")]
    pub wait_until: Timestamp,
    /// A follow-up evaluation (rolling updates).
    #[serde(deserialize_with = "de::nullable")]
    pub next_eval: EvalId,
    /// The evaluation this one follows (blocked and follow-up evaluations).
    #[serde(deserialize_with = "de::nullable")]
    pub previous_eval: EvalId,
    /// The blocked evaluation created for what this one could not place.
    #[serde(deserialize_with = "de::nullable")]
    pub blocked_eval: EvalId,
    /// Placement failures per task group.
    #[serde(rename = "FailedTGAllocs", deserialize_with = "de::nullable")]
    pub failed_tg_allocs: BTreeMap<String, AllocMetric>,
    /// Computed node classes found (in)eligible for the job while scheduling.
    #[serde(deserialize_with = "de::nullable")]
    pub class_eligibility: BTreeMap<String, bool>,
    /// The job has constraints on unique attributes, so classes cannot stand for nodes.
    #[serde(deserialize_with = "de::nullable")]
    pub escaped_computed_class: bool,
    /// Placements left unmade, per task group.
    #[serde(deserialize_with = "de::nullable")]
    pub queued_allocations: BTreeMap<String, u64>,
    /// The state index the scheduler saw; blocked evals compare it with unblock indexes.
    #[serde(deserialize_with = "de::nullable")]
    pub snapshot_index: u64,
    /// Raft index of creation (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub create_index: u64,
    /// Raft index of the last change (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub modify_index: u64,
    /// Creation time, Unix nanoseconds (chosen by the proposer).
    #[serde(deserialize_with = "de::nullable")]
    pub create_time: i64,
    /// Last change time, Unix nanoseconds (chosen by the proposer).
    #[serde(deserialize_with = "de::nullable")]
    pub modify_time: i64,
}

impl Evaluation {
    /// True once complete, failed or canceled.
    pub fn terminal_status(&self) -> bool {
        self.status.is_terminal()
    }

    /// True when the broker should queue it (pending).
    pub fn should_enqueue(&self) -> bool {
        self.status == EvalStatus::Pending
    }

    /// True when the blocked-evals tracker should hold it (blocked).
    pub fn should_block(&self) -> bool {
        self.status == EvalStatus::Blocked
    }
}
