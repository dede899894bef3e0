//! The ordered stream of applied changes that leader-only subsystems subscribe to.
//!
//! The FSM publishes a [`StateEvent`] per change while it applies; it never waits for a
//! subscriber. The channel is a bounded `tokio::sync::broadcast`: a subscriber that falls
//! more than the buffer behind loses the oldest events and its next [`Subscription::recv`]
//! says so ([`SubscriptionError::Lagged`]). Events also carry a gap-free sequence number.
//! The recovery in both cases — and after [`StateChange::Restored`] — is the same: take a
//! fresh [`Snapshot`](crate::state::Snapshot), rebuild from it, and skip events whose
//! `index` is not above the snapshot's `latest_index()`.
//! [`StateStore::subscribe_with_snapshot`](crate::state::StateStore::subscribe_with_snapshot)
//! gives a snapshot and a subscription that start exactly together.

use std::sync::Arc;

use tokio::sync::broadcast;

use crate::model::{
    AllocId, ClientStatus, ClusterMeta, Deployment, EvalId, Evaluation, JobId, Namespace, Node,
    NodeId, NodeStatus, SchedulerConfiguration, SchedulingEligibility,
};

/// One applied change, in apply order.
#[derive(Debug, Clone, PartialEq)]
pub struct StateEvent {
    /// Position in the stream: consecutive, starting at 1 for a new store.
    pub seq: u64,
    /// The raft index of the entry that made the change.
    pub index: u64,
    /// What changed.
    pub change: StateChange,
}

/// A node's scheduling-relevant state before a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeCondition {
    /// Status.
    pub status: NodeStatus,
    /// Eligibility.
    pub eligibility: SchedulingEligibility,
    /// Whether a drain was in progress.
    pub draining: bool,
    /// A hash of its computed class (its attributes and metadata changed when this did)
    /// and of its host volumes (checked per node, not by class: a node offering a new one
    /// may take what was blocked for want of it).
    pub class: u64,
}

impl NodeCondition {
    /// The condition of a node record.
    pub fn of(node: &Node) -> Self {
        Self {
            status: node.status,
            eligibility: node.scheduling_eligibility,
            draining: node.drain_strategy.is_some(),
            class: {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                node.computed_class.hash(&mut h);
                node.host_volumes.hash(&mut h);
                h.finish()
            },
        }
    }

    /// Ready, eligible and not draining.
    pub fn schedulable(&self) -> bool {
        self.status == NodeStatus::Ready
            && self.eligibility == SchedulingEligibility::Eligible
            && !self.draining
    }
}

/// What changed.
#[derive(Debug, Clone, PartialEq)]
pub enum StateChange {
    /// A job was registered, updated or stopped.
    JobUpserted {
        /// Namespace.
        namespace: Namespace,
        /// Job.
        job_id: JobId,
        /// Its version now.
        version: u64,
        /// Whether it is stopped.
        stopped: bool,
    },
    /// A job was purged.
    JobDeleted {
        /// Namespace.
        namespace: Namespace,
        /// Job.
        job_id: JobId,
    },
    /// A node was registered, or its status, eligibility or drain changed. The heartbeat
    /// tracker reads `previous` (None: newly registered) and `node.status`; blocked evals
    /// use [`StateChange::node_became_schedulable`] with `node.computed_class`.
    NodeUpserted {
        /// The node now.
        node: Arc<Node>,
        /// Its condition before, `None` if it was not registered.
        previous: Option<NodeCondition>,
    },
    /// A node was removed.
    NodeDeregistered {
        /// The node.
        node_id: NodeId,
    },
    /// An evaluation was created or updated (any status; the broker takes `pending`, the
    /// blocked tracker `blocked`, and a `complete` one without failures untracks its job).
    EvalUpserted {
        /// The evaluation now.
        eval: Arc<Evaluation>,
    },
    /// An evaluation was garbage collected.
    EvalDeleted {
        /// The evaluation.
        eval_id: EvalId,
    },
    /// A client reported an allocation `complete` or `failed`: capacity came free on its
    /// node, so blocked evaluations of that node's class may now fit.
    AllocTerminal {
        /// The allocation.
        alloc_id: AllocId,
        /// Its node.
        node_id: NodeId,
        /// Its job's namespace.
        namespace: Namespace,
        /// Its job.
        job_id: JobId,
        /// Complete or failed.
        client_status: ClientStatus,
        /// The node's computed class, if the node is still registered.
        node_class: Option<String>,
    },
    /// The servers changed allocations of these nodes in one command (placed, stopped,
    /// evicted or removed them; a client's own status reports do not count): what a
    /// client's `Node.GetClientAllocs` query waits for.
    NodeAllocsChanged {
        /// The nodes, sorted.
        node_ids: Vec<NodeId>,
    },
    /// Allocations written by one command (placed, updated by the servers or by a client's
    /// report), in write order: what the event stream's `Allocation` topic reports.
    AllocsUpserted {
        /// The allocations.
        alloc_ids: Vec<AllocId>,
    },
    /// The scheduler configuration changed (the leader re-checks `PauseEvalBroker`).
    SchedulerConfigUpdated {
        /// The configuration now.
        config: Arc<SchedulerConfiguration>,
    },
    /// The cluster identity was written.
    ClusterMetaSet {
        /// The identity.
        meta: Arc<ClusterMeta>,
    },
    /// A deployment was created or changed (status, counts, promotion): what the leader's
    /// deployment watcher and the event stream's `Deployment` topic follow.
    DeploymentUpserted {
        /// The deployment now.
        deployment: Arc<Deployment>,
    },
    /// ACL policies or tokens were written or deleted: whoever holds a long-lived request
    /// on behalf of a token (the event stream) checks the token again.
    AclChanged,
    /// A variable was written, locked, released or deleted (the event stream's `Variable`
    /// topic).
    VariableChanged {
        /// Its namespace.
        namespace: String,
        /// Its path.
        path: String,
        /// It was deleted.
        deleted: bool,
    },
    /// The whole state was replaced from a snapshot image: rebuild from a fresh snapshot.
    Restored,
}

impl StateChange {
    /// True when a node became able to take placements with this change: registered ready,
    /// turned ready, became eligible, finished draining, or — schedulable — changed its
    /// computed class (new attributes or metadata, which may now satisfy a job's
    /// constraints or locality). Blocked evaluations of its computed class should be
    /// reconsidered.
    pub fn node_became_schedulable(&self) -> bool {
        match self {
            StateChange::NodeUpserted { node, previous } => {
                let now = NodeCondition::of(node);
                now.schedulable()
                    && previous.is_none_or(|p| !p.schedulable() || p.class != now.class)
            }
            _ => false,
        }
    }
}

/// Why [`Subscription::recv`] returned no event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubscriptionError {
    /// The subscriber fell behind and `missed` events were dropped: resync from a snapshot.
    #[error("subscriber fell behind; {missed} events were dropped")]
    Lagged {
        /// How many events were lost.
        missed: u64,
    },
    /// The state store was closed.
    #[error("the state store is closed")]
    Closed,
}

/// A subscriber's handle on the change stream.
#[derive(Debug)]
pub struct Subscription {
    rx: broadcast::Receiver<StateEvent>,
}

impl Subscription {
    pub(crate) fn new(rx: broadcast::Receiver<StateEvent>) -> Self {
        Self { rx }
    }

    /// The next event. After `Lagged` the subscription continues with the oldest event
    /// still buffered.
    pub async fn recv(&mut self) -> Result<StateEvent, SubscriptionError> {
        match self.rx.recv().await {
            Ok(event) => Ok(event),
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                Err(SubscriptionError::Lagged { missed })
            }
            Err(broadcast::error::RecvError::Closed) => Err(SubscriptionError::Closed),
        }
    }

    /// The next event if one is buffered (`Ok(None)` when none is).
    pub fn try_recv(&mut self) -> Result<Option<StateEvent>, SubscriptionError> {
        match self.rx.try_recv() {
            Ok(event) => Ok(Some(event)),
            Err(broadcast::error::TryRecvError::Empty) => Ok(None),
            Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                Err(SubscriptionError::Lagged { missed })
            }
            Err(broadcast::error::TryRecvError::Closed) => Err(SubscriptionError::Closed),
        }
    }
}
