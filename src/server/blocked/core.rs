//! The tracker's sans-IO core, [`BlockedEvalsCore`]: the blocked evals by job, node and
//! escape, the unblock indexes of the missed-unblock check, and the duplicates. No tokio
//! runtime and no clock reads: `now` is an `Instant` value, used only to age unblock indexes.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use teamster_storage::model::{EvalId, EvalTrigger, Evaluation, JobId, JobType, Namespace, NodeId};
use tokio::time::Instant;

use super::types::{BlockOutcome, BlockedStats, ReleasedEval};
use crate::server::broker::{BrokerError, Token};
use crate::server::leader_service::Switch;

type JobKey = (Namespace, JobId);

/// What an unblock index is recorded for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum UnblockKey {
    /// A computed node class.
    Class(String),
    /// A node (only system evals blocked on it are compared).
    Node(NodeId),
}

#[derive(Debug, Clone, Copy)]
struct UnblockEvent {
    index: u64,
    at: Instant,
}

#[derive(Debug)]
struct TrackedEval {
    eval: Evaluation,
    token: Option<Token>,
    /// The node a system eval is parked on; empty for all other evals.
    node: NodeId,
}

/// The newest raft index an eval reflects (Nomad's `latestEvalIndex`).
fn latest_index(eval: &Evaluation) -> u64 {
    eval.create_index.max(eval.snapshot_index)
}

/// The node a system eval is blocked on; empty for other evals (one blocked eval per job).
fn parked_node(eval: &Evaluation) -> NodeId {
    if eval.eval_type == JobType::System && !eval.node_id.is_empty() {
        eval.node_id.clone()
    } else {
        NodeId::default()
    }
}

/// The tracker's state machine, without I/O.
#[derive(Debug, Default)]
pub struct BlockedEvalsCore {
    enabled: Switch,
    /// Every tracked eval.
    tracked: HashMap<EvalId, TrackedEval>,
    /// Ids of the tracked evals that escaped computed classes.
    escaped: HashSet<EvalId>,
    /// Per job, per node (empty for non-system evals): the one tracked eval.
    jobs: HashMap<JobKey, HashMap<NodeId, EvalId>>,
    /// System evals by the node they are parked on.
    by_node: HashMap<NodeId, HashSet<EvalId>>,
    unblock_indexes: HashMap<UnblockKey, UnblockEvent>,
    duplicates: Vec<Evaluation>,
}

impl BlockedEvalsCore {
    /// A disabled, empty tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// True on the leader.
    pub fn is_enabled(&self) -> bool {
        self.enabled.is_on()
    }

    /// Enables or disables the tracker; disabling forgets everything (the next leader
    /// restores the blocked evals from state).
    pub fn set_enabled(&mut self, enabled: bool) {
        if self.enabled.set(enabled) && !enabled {
            *self = Self::default();
        }
    }

    fn ensure_enabled(&self) -> Result<(), BrokerError> {
        self.enabled.check(BrokerError::BlockedEvalsDisabled)
    }

    /// Tracks a blocked eval (`token` set when a worker reblocks the eval it is processing).
    ///
    /// First the one-per-job rule: against an existing blocked eval of the job (and node, for
    /// system evals) the newer one stays and the other goes to the duplicates. Then the
    /// missed-unblock check: if an unblock that could have helped happened after the eval's
    /// snapshot, it is returned for the broker instead of being tracked.
    pub fn block(
        &mut self,
        eval: Evaluation,
        token: Option<Token>,
    ) -> Result<(BlockOutcome, Option<ReleasedEval>), BrokerError> {
        self.ensure_enabled()?;
        let node = parked_node(&eval);
        let key = (eval.namespace.clone(), eval.job_id.clone());
        let existing = self
            .jobs
            .get(&key)
            .and_then(|nodes| nodes.get(&node))
            .cloned();
        if let Some(existing_id) = existing {
            if existing_id == eval.id {
                // The same eval again (a restore racing an FSM apply): refresh it in place.
                self.remove_tracked(&existing_id);
            } else {
                let existing_index = self
                    .tracked
                    .get(&existing_id)
                    .map_or(0, |t| latest_index(&t.eval));
                if existing_index <= latest_index(&eval) {
                    if let Some(old) = self.remove_tracked(&existing_id) {
                        self.duplicates.push(old.eval);
                    }
                } else {
                    self.duplicates.push(eval);
                    return Ok((BlockOutcome::Duplicate, None));
                }
            }
        }

        if self.missed_unblock(&eval) {
            return Ok((
                BlockOutcome::MissedUnblock,
                Some(ReleasedEval { eval, token }),
            ));
        }

        let id = eval.id.clone();
        self.jobs
            .entry(key)
            .or_default()
            .insert(node.clone(), id.clone());
        if !node.is_empty() {
            self.by_node
                .entry(node.clone())
                .or_default()
                .insert(id.clone());
        }
        if eval.escaped_computed_class {
            self.escaped.insert(id.clone());
        }
        self.tracked.insert(id, TrackedEval { eval, token, node });
        Ok((BlockOutcome::Tracked, None))
    }

    /// True if the eval's scheduler ran on a snapshot older than an unblock that could have
    /// released it: a class it found eligible or never saw, any class if it escaped, or (for
    /// a system eval) its node.
    fn missed_unblock(&self, eval: &Evaluation) -> bool {
        let mut newest_class_unblock = 0;
        let node = parked_node(eval);
        for (key, event) in &self.unblock_indexes {
            match key {
                UnblockKey::Class(class) => {
                    newest_class_unblock = newest_class_unblock.max(event.index);
                    if eval.snapshot_index < event.index
                        && eval.class_eligibility.get(class) != Some(&false)
                    {
                        return true;
                    }
                }
                UnblockKey::Node(unblocked) => {
                    if !node.is_empty() && *unblocked == node && eval.snapshot_index < event.index {
                        return true;
                    }
                }
            }
        }
        eval.escaped_computed_class && eval.snapshot_index < newest_class_unblock
    }

    fn remove_tracked(&mut self, id: &EvalId) -> Option<TrackedEval> {
        let tracked = self.tracked.remove(id)?;
        self.escaped.remove(id);
        let key = (tracked.eval.namespace.clone(), tracked.eval.job_id.clone());
        if let Some(nodes) = self.jobs.get_mut(&key) {
            if nodes.get(&tracked.node) == Some(id) {
                nodes.remove(&tracked.node);
            }
            if nodes.is_empty() {
                self.jobs.remove(&key);
            }
        }
        if !tracked.node.is_empty() {
            if let Some(ids) = self.by_node.get_mut(&tracked.node) {
                ids.remove(id);
                if ids.is_empty() {
                    self.by_node.remove(&tracked.node);
                }
            }
        }
        Some(tracked)
    }

    /// Untracks `ids` and returns them for the broker, highest priority first.
    fn release(&mut self, ids: Vec<EvalId>) -> Vec<ReleasedEval> {
        let mut released: Vec<ReleasedEval> = ids
            .iter()
            .filter_map(|id| self.remove_tracked(id))
            .map(|t| ReleasedEval {
                eval: t.eval,
                token: t.token,
            })
            .collect();
        released.sort_by(|a, b| {
            b.eval
                .priority
                .cmp(&a.eval.priority)
                .then_with(|| a.eval.create_index.cmp(&b.eval.create_index))
                .then_with(|| a.eval.id.cmp(&b.eval.id))
        });
        released
    }

    fn record_unblock(&mut self, key: UnblockKey, index: u64, now: Instant) {
        let event = self
            .unblock_indexes
            .entry(key)
            .or_insert(UnblockEvent { index, at: now });
        event.index = event.index.max(index);
        event.at = now;
    }

    /// Capacity changed on nodes of `computed_class` at raft `index` (a node of it became
    /// ready or eligible, or an allocation on one finished): releases every escaped eval and
    /// every captured eval that does not mark the class ineligible. An empty class is ignored.
    pub fn unblock(
        &mut self,
        computed_class: &str,
        index: u64,
        now: Instant,
    ) -> Result<Vec<ReleasedEval>, BrokerError> {
        self.ensure_enabled()?;
        if computed_class.is_empty() {
            // Every registered node has a computed class; an empty one carries no
            // information, so it neither releases nor counts as an unblock.
            return Ok(Vec::new());
        }
        self.record_unblock(UnblockKey::Class(computed_class.to_owned()), index, now);
        let ids = self
            .tracked
            .iter()
            .filter(|(id, t)| {
                self.escaped.contains(*id)
                    || t.eval.class_eligibility.get(computed_class) != Some(&false)
            })
            .map(|(id, _)| id.clone())
            .collect();
        Ok(self.release(ids))
    }

    /// Capacity changed on node `node_id` at raft `index`: releases the system evals parked
    /// on it.
    pub fn unblock_node(
        &mut self,
        node_id: &NodeId,
        index: u64,
        now: Instant,
    ) -> Result<Vec<ReleasedEval>, BrokerError> {
        self.ensure_enabled()?;
        if node_id.is_empty() {
            return Ok(Vec::new());
        }
        self.record_unblock(UnblockKey::Node(node_id.clone()), index, now);
        let ids = self
            .by_node
            .get(node_id)
            .map(|ids| ids.iter().cloned().collect())
            .unwrap_or_default();
        Ok(self.release(ids))
    }

    /// Releases every eval blocked because its plans never made progress
    /// (`TriggeredBy = max-plan-attempts`).
    pub fn unblock_failed(&mut self) -> Result<Vec<ReleasedEval>, BrokerError> {
        self.ensure_enabled()?;
        let ids = self
            .tracked
            .iter()
            .filter(|(_, t)| t.eval.triggered_by == EvalTrigger::MaxPlanAttempts)
            .map(|(id, _)| id.clone())
            .collect();
        Ok(self.release(ids))
    }

    /// Stops tracking the job's blocked evals (all nodes): an eval of the job completed and
    /// placed everything, so they are moot. Returns how many were dropped.
    pub fn untrack(&mut self, namespace: &Namespace, job_id: &JobId) -> Result<usize, BrokerError> {
        self.ensure_enabled()?;
        let key = (namespace.clone(), job_id.clone());
        let ids: Vec<EvalId> = self
            .jobs
            .get(&key)
            .map(|nodes| nodes.values().cloned().collect())
            .unwrap_or_default();
        Ok(ids
            .iter()
            .filter(|id| self.remove_tracked(id).is_some())
            .count())
    }

    /// Takes the superseded blocked evals, for the reaper to write as canceled.
    pub fn take_duplicates(&mut self) -> Result<Vec<Evaluation>, BrokerError> {
        self.ensure_enabled()?;
        Ok(std::mem::take(&mut self.duplicates))
    }

    /// True if duplicates wait to be taken.
    pub fn has_duplicates(&self) -> bool {
        !self.duplicates.is_empty()
    }

    /// Forgets unblock indexes recorded more than `threshold` before `now`.
    pub fn prune(&mut self, now: Instant, threshold: Duration) {
        self.unblock_indexes
            .retain(|_, event| now.saturating_duration_since(event.at) < threshold);
    }

    /// True if the eval is tracked.
    pub fn is_tracked(&self, eval_id: &EvalId) -> bool {
        self.tracked.contains_key(eval_id)
    }

    /// The counts.
    pub fn stats(&self) -> BlockedStats {
        BlockedStats {
            total_blocked: self.tracked.len(),
            total_escaped: self.escaped.len(),
            total_system: self.by_node.values().map(HashSet::len).sum(),
            duplicates: self.duplicates.len(),
            unblock_indexes: self.unblock_indexes.len(),
        }
    }
}
