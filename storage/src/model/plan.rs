//! Plans: what a scheduler worker proposes, and what the leader's plan applier commits.
//!
//! A [`Plan`] carries its job **once** (`Job`), never per allocation: the allocations in it
//! name the job by ID and version like every other allocation. The plan applier re-checks
//! each node's fit against the newest state and answers with a [`PlanResult`] holding the
//! part it committed; a partial commit carries a `RefreshIndex` the worker must wait for
//! before it retries.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::alloc::{AllocStop, Allocation};
use crate::model::de;
use crate::model::deployment::{Deployment, DeploymentStatusUpdate};
use crate::model::eval::Evaluation;
use crate::model::ids::{EvalId, NodeId};
use crate::model::job::Job;

/// A scheduler's proposed changes for one evaluation.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Plan {
    /// The evaluation being processed.
    #[serde(rename = "EvalID", deserialize_with = "de::nullable")]
    pub eval_id: EvalId,
    /// The broker's delivery token, so a plan from a stale delivery is refused.
    #[serde(deserialize_with = "de::nullable")]
    pub eval_token: String,
    /// The evaluation's priority; orders the plan queue.
    #[serde(deserialize_with = "de::nullable")]
    pub priority: u32,
    /// Commit only if every placement fits.
    #[serde(deserialize_with = "de::nullable")]
    pub all_at_once: bool,
    /// The job, once for the whole plan (absent for plans that only stop allocations).
    pub job: Option<Arc<Job>>,
    /// Allocations to stop, per node.
    #[serde(deserialize_with = "de::nullable")]
    pub node_update: BTreeMap<NodeId, Vec<AllocStop>>,
    /// Allocations to place or update in place, per node.
    #[serde(deserialize_with = "de::nullable")]
    pub node_allocation: BTreeMap<NodeId, Vec<Allocation>>,
    /// Allocations to evict to make room, per node.
    #[serde(deserialize_with = "de::nullable")]
    pub node_preemptions: BTreeMap<NodeId, Vec<AllocStop>>,
    /// Evaluations to create with the plan (e.g. for jobs whose allocations are preempted).
    #[serde(deserialize_with = "de::nullable")]
    pub preemption_evals: Vec<Evaluation>,
    /// The state index the scheduler planned against.
    #[serde(deserialize_with = "de::nullable")]
    pub snapshot_index: u64,
    /// The evaluation's final state, written in the same raft entry as the plan when the
    /// applier accepts every node (a result without `RefreshIndex`), instead of by a later
    /// `Eval.Update`; not written when some node is refused. A worker's batch sets it.
    pub eval_update: Option<Evaluation>,
    /// A deployment created or updated with the plan.
    pub deployment: Option<Deployment>,
    /// Status changes of deployments (cancelled, successful).
    #[serde(deserialize_with = "de::nullable")]
    pub deployment_updates: Vec<DeploymentStatusUpdate>,
}

impl Plan {
    /// True when the plan changes nothing (the applier answers at once).
    pub fn is_no_op(&self) -> bool {
        self.node_update.values().all(Vec::is_empty)
            && self.node_allocation.values().all(Vec::is_empty)
            && self.node_preemptions.values().all(Vec::is_empty)
            && self.deployment.is_none()
            && self.deployment_updates.is_empty()
    }
}

/// What the plan applier committed of a [`Plan`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PlanResult {
    /// Stops committed, per node.
    #[serde(deserialize_with = "de::nullable")]
    pub node_update: BTreeMap<NodeId, Vec<AllocStop>>,
    /// Placements and updates committed, per node.
    #[serde(deserialize_with = "de::nullable")]
    pub node_allocation: BTreeMap<NodeId, Vec<Allocation>>,
    /// Evictions committed, per node.
    #[serde(deserialize_with = "de::nullable")]
    pub node_preemptions: BTreeMap<NodeId, Vec<AllocStop>>,
    /// Nodes whose part was refused because it did not fit.
    #[serde(deserialize_with = "de::nullable")]
    pub rejected_nodes: Vec<NodeId>,
    /// Non-zero after a partial commit: the index the worker must wait for before retrying.
    #[serde(deserialize_with = "de::nullable")]
    pub refresh_index: u64,
    /// The raft index at which the result was committed.
    #[serde(deserialize_with = "de::nullable")]
    pub alloc_index: u64,
    /// The deployment committed with the plan.
    pub deployment: Option<Deployment>,
    /// The deployment status changes committed with the plan.
    #[serde(deserialize_with = "de::nullable")]
    pub deployment_updates: Vec<DeploymentStatusUpdate>,
}

impl PlanResult {
    /// `plan` committed in full at its snapshot index: what a planner that commits nothing
    /// (a dry run, a speculation) answers.
    pub fn all_committed(plan: &Plan) -> PlanResult {
        PlanResult {
            node_update: plan.node_update.clone(),
            node_allocation: plan.node_allocation.clone(),
            node_preemptions: plan.node_preemptions.clone(),
            rejected_nodes: Vec::new(),
            refresh_index: 0,
            alloc_index: plan.snapshot_index,
            deployment: plan.deployment.clone(),
            deployment_updates: plan.deployment_updates.clone(),
        }
    }

    /// True when the result holds every change the plan asked for.
    pub fn full_commit(&self, plan: &Plan) -> bool {
        let planned =
            |m: &BTreeMap<NodeId, Vec<Allocation>>| m.values().map(Vec::len).sum::<usize>();
        let stops = |m: &BTreeMap<NodeId, Vec<AllocStop>>| m.values().map(Vec::len).sum::<usize>();
        planned(&plan.node_allocation) == planned(&self.node_allocation)
            && stops(&plan.node_update) == stops(&self.node_update)
            && stops(&plan.node_preemptions) == stops(&self.node_preemptions)
    }

    /// True when nothing was committed.
    pub fn is_no_op(&self) -> bool {
        self.node_update.values().all(Vec::is_empty)
            && self.node_allocation.values().all(Vec::is_empty)
            && self.node_preemptions.values().all(Vec::is_empty)
            && self.deployment.is_none()
            && self.deployment_updates.is_empty()
    }
}

/// What the scheduler would do for one task group (Nomad's `DesiredUpdates`), as `job plan`
/// reports it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DesiredUpdates {
    /// Allocations left as they are.
    pub ignore: u64,
    /// New allocations.
    pub place: u64,
    /// Allocations moved off draining nodes.
    pub migrate: u64,
    /// Allocations stopped.
    pub stop: u64,
    /// Allocations moved to the new version where they run.
    pub in_place_update: u64,
    /// Allocations replaced by new ones.
    pub destructive_update: u64,
    /// Canaries placed.
    pub canary: u64,
    /// Allocations evicted to make room.
    pub preemptions: u64,
    /// Allocations on disconnected nodes marked unknown.
    pub disconnect: u64,
    /// Allocations reconnecting.
    pub reconnect: u64,
    /// Failed allocations replaced now.
    pub reschedule_now: u64,
    /// Failed allocations to be replaced later.
    pub reschedule_later: u64,
}

impl DesiredUpdates {
    /// Whether allocations would be created or destroyed (`job plan` exits 1).
    pub fn creates_or_destroys(&self) -> bool {
        self.stop + self.place + self.migrate + self.destructive_update + self.canary > 0
    }
}

/// A plan's annotations (Nomad's `PlanAnnotations`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct PlanAnnotations {
    /// What would happen to each task group.
    #[serde(rename = "DesiredTGUpdates")]
    pub desired_tg_updates: BTreeMap<String, DesiredUpdates>,
    /// Allocations that would be preempted, as they would read once evicted.
    pub preempted_allocs: Vec<Allocation>,
}
