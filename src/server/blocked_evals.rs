//! The blocked-evals tracker: evaluations that could not place everything, parked until the
//! cluster gains capacity that could help them.
//!
//! When a scheduler cannot place some allocations it writes a `blocked` eval carrying what it
//! learned: which computed node classes were eligible or ineligible for the job
//! (`ClassEligibility`), whether the job's constraints escaped classes altogether
//! (`EscapedComputedClass`, constraints on unique attributes), and the state index it saw
//! (`SnapshotIndex`). The tracker (leader only, semantics of Nomad's
//! `nomad/blocked_evals.go`) holds those evals and hands them back to the [`EvalBroker`] when
//! a capacity change could let them make progress:
//!
//! - **One blocked eval per job** — per job *and node* for `system` jobs, whose scheduler
//!   blocks per node. The newer (by `max(CreateIndex, SnapshotIndex)`) wins; the loser goes to
//!   the duplicates list, which the leader's reaper writes as canceled.
//! - **Unblock by class** ([`BlockedEvals::unblock`], a node became ready or eligible, or an
//!   allocation on it finished): every *escaped* eval is released (a class says nothing about
//!   them), and every *captured* eval unless its eligibility map explicitly marks that class
//!   ineligible (a class it never saw is released, for correctness).
//! - **Unblock by node** ([`BlockedEvals::unblock_node`]): the system evals parked on that node.
//! - **Missed unblock**: an eval blocked by a scheduler that ran on a snapshot older than an
//!   unblock that could have helped it goes straight back to the broker. Each unblock records
//!   its raft index per class (and, beyond Nomad, per node, so a system eval blocked on a node
//!   that freed capacity meanwhile is caught too); indexes older than the prune threshold are
//!   dropped.
//! - **Failed placements** ([`BlockedEvals::unblock_failed`]): evals blocked because the plan
//!   never made progress (`max-plan-attempts`) are released periodically (every minute), as
//!   capacity changes are not what they wait for.
//!
//! Quota and non-node-resource (CSI, host volume) unblocking are not modelled: the evaluation
//! model carries neither a quota nor missing resources.
//!
//! # Shape
//!
//! [`BlockedEvalsCore`] is a sans-IO struct: calls take the eval or the event plus `now` (a
//! `tokio::time::Instant` value, used only to age unblock indexes) and return the evals to
//! release as [`ReleasedEval`]s. [`BlockedEvals`] is the tokio shell: a `Clone` handle that
//! forwards released evals to its [`EvalBroker`] (under its own lock, so releases reach the
//! broker in the order they happened), and while enabled runs one task for pruning, the
//! periodic failed unblock and the gauges.
//!
//! ```text
//!  FSM: blocked eval ──────────block────┐
//!  Eval.Reblock (token checked) ─reblock┤
//!                                       ▼
//!                  one per job (and node)? ──older one──▶ duplicates ──▶ reaper (canceled)
//!                                       ▼
//!                  missed an unblock since its snapshot? ──yes──▶ EvalBroker (at once)
//!                                       ▼ no
//!                  tracked: captured (class eligibility) · escaped · system by node
//!                                       │
//!  node ready / eligible, alloc done ──unblock(class), unblock_node(node)──┐
//!  every minute ──unblock_failed (max-plan-attempts)───────────────────────┤
//!                                                                          ▼
//!                                          released ──enqueue_all──▶ EvalBroker
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use teamster_storage::model::{
    EvalId, EvalStatus, EvalTrigger, Evaluation, JobId, JobType, Namespace, NodeId,
};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::server::eval_broker::{BrokerError, EvalBroker, Token};

/// Settings of the blocked-evals tracker. Defaults are Nomad's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockedEvalsConfig {
    /// How often old unblock indexes are pruned (`pruneInterval`, 5 min).
    pub prune_interval: Duration,
    /// Age after which an unblock index is dropped (`pruneThreshold`, 15 min): a scheduler
    /// snapshot older than that would have been refreshed long ago.
    pub prune_threshold: Duration,
    /// How often evals blocked by `max-plan-attempts` are released
    /// (`failedEvalUnblockInterval`, 1 min).
    pub failed_unblock_interval: Duration,
    /// Period of the gauge emission (1 s).
    pub stats_interval: Duration,
}

impl Default for BlockedEvalsConfig {
    fn default() -> Self {
        Self {
            prune_interval: Duration::from_secs(5 * 60),
            prune_threshold: Duration::from_secs(15 * 60),
            failed_unblock_interval: Duration::from_secs(60),
            stats_interval: Duration::from_secs(1),
        }
    }
}

impl BlockedEvalsConfig {
    /// A profile for tests: the same logic on sub-second periods.
    pub fn for_tests() -> Self {
        Self {
            prune_interval: Duration::from_millis(500),
            prune_threshold: Duration::from_secs(2),
            failed_unblock_interval: Duration::from_millis(200),
            stats_interval: Duration::from_millis(100),
        }
    }

    /// Checks every value is usable; called by [`BlockedEvals::new`].
    pub fn validate(&self) -> Result<(), BrokerError> {
        let fields = [
            ("prune_interval", self.prune_interval),
            ("prune_threshold", self.prune_threshold),
            ("failed_unblock_interval", self.failed_unblock_interval),
            ("stats_interval", self.stats_interval),
        ];
        match fields.into_iter().find(|(_, value)| value.is_zero()) {
            Some((field, _)) => Err(BrokerError::InvalidConfig {
                field,
                reason: "must be greater than zero",
            }),
            None => Ok(()),
        }
    }
}

/// An eval leaving the tracker for the broker, with the token of the delivery that blocked
/// it (set for reblocked evals, so the broker parks it until that delivery is acked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleasedEval {
    /// The eval, still `blocked` in the state store.
    pub eval: Evaluation,
    /// The delivery token it was reblocked under, if any.
    pub token: Option<Token>,
}

/// What became of an eval handed to [`BlockedEvalsCore::block`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockOutcome {
    /// Tracked until an unblock releases it (an older blocked eval of the job, if any, went
    /// to the duplicates).
    Tracked,
    /// The job already has a newer blocked eval: this one went to the duplicates.
    Duplicate,
    /// It missed an unblock while being scheduled: released to the broker at once.
    MissedUnblock,
}

/// The tracker's counts, exported as gauges.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockedStats {
    /// Blocked evals tracked (captured and escaped).
    pub total_blocked: usize,
    /// Of those, escaped evals (released by any class unblock).
    pub total_escaped: usize,
    /// Of those, system evals parked on a node.
    pub total_system: usize,
    /// Superseded blocked evals waiting to be written as canceled.
    pub duplicates: usize,
    /// Unblock indexes remembered for the missed-unblock check.
    pub unblock_indexes: usize,
}

/// The status description of a duplicate blocked eval written as canceled.
pub fn duplicate_description(job_id: &JobId) -> String {
    format!(
        "existing blocked evaluation exists for job {:?}",
        job_id.as_str()
    )
}

/// Marks duplicate blocked evals (from [`BlockedEvals::take_duplicates`]) canceled, ready for
/// one raft write.
pub fn mark_duplicates_canceled(evals: Vec<Evaluation>, now_unix_nanos: i64) -> Vec<Evaluation> {
    evals
        .into_iter()
        .map(|mut eval| {
            eval.status = EvalStatus::Canceled;
            eval.status_description = duplicate_description(&eval.job_id);
            eval.modify_time = now_unix_nanos.max(eval.create_time.saturating_add(1));
            eval
        })
        .collect()
}

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
    enabled: bool,
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
        self.enabled
    }

    /// Enables or disables the tracker; disabling forgets everything (the next leader
    /// restores the blocked evals from state).
    pub fn set_enabled(&mut self, enabled: bool) {
        if self.enabled == enabled {
            return;
        }
        self.enabled = enabled;
        if !enabled {
            *self = Self::default();
        }
    }

    fn ensure_enabled(&self) -> Result<(), BrokerError> {
        if self.enabled {
            Ok(())
        } else {
            Err(BrokerError::BlockedEvalsDisabled)
        }
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

struct BlockedState {
    core: BlockedEvalsCore,
    /// Stops the maintenance task; present while enabled.
    tasks: Option<CancellationToken>,
}

struct BlockedShared {
    state: Mutex<BlockedState>,
    broker: EvalBroker,
    /// Wakes the duplicate reaper.
    duplicates_ready: Notify,
    config: BlockedEvalsConfig,
}

impl BlockedShared {
    fn lock(&self) -> MutexGuard<'_, BlockedState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the core and hands what it released to the broker while still holding the
    /// tracker's lock (lock order: tracker, then broker; the broker never calls back).
    fn with_core<R>(
        &self,
        f: impl FnOnce(&mut BlockedEvalsCore) -> Result<(R, Vec<ReleasedEval>), BrokerError>,
    ) -> Result<R, BrokerError> {
        let mut state = self.lock();
        let (out, released) = f(&mut state.core)?;
        if state.core.has_duplicates() {
            self.duplicates_ready.notify_one();
        }
        if !released.is_empty() {
            let count = released.len();
            let evals = released.into_iter().map(|r| (r.eval, r.token)).collect();
            if let Err(error) = self.broker.enqueue_all(evals) {
                // Only while leadership changes: the next leader restores them from state.
                tracing::warn!(%error, count, "could not hand unblocked evals to the eval broker");
            }
        }
        Ok(out)
    }

    fn emit_stats(&self) {
        let stats = self.lock().core.stats();
        emit_blocked_gauges(&stats);
    }
}

fn emit_blocked_gauges(stats: &BlockedStats) {
    // Counts are far below 2^52, so the conversions to f64 are exact.
    metrics::gauge!("teamster.blocked_evals.total_blocked").set(stats.total_blocked as f64);
    metrics::gauge!("teamster.blocked_evals.total_escaped").set(stats.total_escaped as f64);
    metrics::gauge!("teamster.blocked_evals.total_system").set(stats.total_system as f64);
    metrics::gauge!("teamster.blocked_evals.duplicates").set(stats.duplicates as f64);
}

/// The blocked-evals tracker on tokio: a `Clone` handle for the FSM hooks, the
/// `Eval.Reblock` RPC and the leader's duplicate reaper. Released evals go to the broker.
///
/// Starts disabled; [`BlockedEvals::set_enabled`] is called only by the leadership monitor.
#[derive(Clone)]
pub struct BlockedEvals {
    shared: Arc<BlockedShared>,
}

impl fmt::Debug for BlockedEvals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("BlockedEvals")
            .field("enabled", &state.core.is_enabled())
            .field("stats", &state.core.stats())
            .finish()
    }
}

impl BlockedEvals {
    /// A disabled tracker that releases evals into `broker`.
    pub fn new(broker: EvalBroker, config: BlockedEvalsConfig) -> Result<Self, BrokerError> {
        config.validate()?;
        Ok(Self {
            shared: Arc::new(BlockedShared {
                state: Mutex::new(BlockedState {
                    core: BlockedEvalsCore::new(),
                    tasks: None,
                }),
                broker,
                duplicates_ready: Notify::new(),
                config,
            }),
        })
    }

    /// True on the leader.
    pub fn enabled(&self) -> bool {
        self.shared.lock().core.is_enabled()
    }

    /// Enables (leadership gained) or disables (lost) the tracker. Enabling starts the
    /// maintenance task (prune, periodic failed unblock, gauges) on the current tokio
    /// runtime; disabling forgets everything and wakes a waiting duplicate reaper.
    ///
    /// # Panics
    ///
    /// Enabling outside a tokio runtime panics (as `tokio::spawn` does).
    pub fn set_enabled(&self, enabled: bool) {
        let mut state = self.shared.lock();
        if state.core.is_enabled() == enabled {
            return;
        }
        state.core.set_enabled(enabled);
        if let Some(tasks) = state.tasks.take() {
            tasks.cancel();
        }
        if enabled {
            let cancel = CancellationToken::new();
            tokio::spawn(run_maintenance(
                Arc::downgrade(&self.shared),
                self.shared.config.clone(),
                cancel.clone(),
            ));
            state.tasks = Some(cancel);
        } else {
            self.shared.duplicates_ready.notify_waiters();
        }
        let stats = state.core.stats();
        drop(state);
        emit_blocked_gauges(&stats);
        tracing::info!(enabled, "blocked evals tracker enabled status changed");
    }

    /// Tracks a blocked eval (FSM apply of a `blocked` eval, leadership restore).
    pub fn block(&self, eval: Evaluation) -> Result<BlockOutcome, BrokerError> {
        self.shared.with_core(|core| {
            let (outcome, released) = core.block(eval, None)?;
            Ok((outcome, released.into_iter().collect()))
        })
    }

    /// Tracks an eval a worker reblocks while processing it (`Eval.Reblock`): the token must
    /// be the eval's outstanding delivery token, and its nack timer is reset. If the eval
    /// missed an unblock it goes back to the broker, which holds it until that delivery is
    /// acked.
    pub fn reblock(&self, eval: Evaluation, token: &str) -> Result<BlockOutcome, BrokerError> {
        if !self.enabled() {
            return Err(BrokerError::BlockedEvalsDisabled);
        }
        self.shared.broker.outstanding_reset(&eval.id, token)?;
        self.shared.with_core(|core| {
            let (outcome, released) = core.block(eval, Some(Token::from(token)))?;
            Ok((outcome, released.into_iter().collect()))
        })
    }

    /// Capacity changed for `computed_class` at raft `index` (see
    /// [`BlockedEvalsCore::unblock`]). Returns how many evals were released to the broker.
    pub fn unblock(&self, computed_class: &str, index: u64) -> Result<usize, BrokerError> {
        self.shared.with_core(|core| {
            let released = core.unblock(computed_class, index, Instant::now())?;
            Ok((released.len(), released))
        })
    }

    /// Capacity changed on `node_id` at raft `index`: releases the system evals parked on it.
    pub fn unblock_node(&self, node_id: &NodeId, index: u64) -> Result<usize, BrokerError> {
        self.shared.with_core(|core| {
            let released = core.unblock_node(node_id, index, Instant::now())?;
            Ok((released.len(), released))
        })
    }

    /// Releases evals blocked by `max-plan-attempts` (also done every
    /// [`BlockedEvalsConfig::failed_unblock_interval`] while enabled).
    pub fn unblock_failed(&self) -> Result<usize, BrokerError> {
        self.shared.with_core(|core| {
            let released = core.unblock_failed()?;
            Ok((released.len(), released))
        })
    }

    /// Drops the job's blocked evals: an eval of the job completed with everything placed.
    pub fn untrack(&self, namespace: &Namespace, job_id: &JobId) -> Result<usize, BrokerError> {
        self.shared
            .with_core(|core| Ok((core.untrack(namespace, job_id)?, Vec::new())))
    }

    /// Takes the superseded blocked evals (write them with [`mark_duplicates_canceled`]).
    pub fn take_duplicates(&self) -> Result<Vec<Evaluation>, BrokerError> {
        self.shared
            .with_core(|core| Ok((core.take_duplicates()?, Vec::new())))
    }

    /// Waits up to `timeout` for duplicates and takes them (Nomad's `GetDuplicates`); an
    /// empty list at the timeout.
    pub async fn wait_duplicates(&self, timeout: Duration) -> Result<Vec<Evaluation>, BrokerError> {
        let deadline = Instant::now().checked_add(timeout);
        loop {
            let notified = self.shared.duplicates_ready.notified();
            tokio::pin!(notified);
            // Registered before looking, so a duplicate added after the look wakes us.
            notified.as_mut().enable();
            let duplicates = self.take_duplicates()?;
            if !duplicates.is_empty() {
                return Ok(duplicates);
            }
            match deadline {
                Some(deadline) => {
                    if tokio::time::timeout_at(deadline, notified).await.is_err() {
                        return Ok(Vec::new());
                    }
                }
                None => notified.await,
            }
        }
    }

    /// The counts (zero while disabled).
    pub fn stats(&self) -> BlockedStats {
        self.shared.lock().core.stats()
    }

    /// Sets the blocked-evals gauges now (done every
    /// [`BlockedEvalsConfig::stats_interval`] while enabled).
    pub fn emit_stats(&self) {
        self.shared.emit_stats();
    }
}

/// Prunes unblock indexes, releases `max-plan-attempts` evals and emits gauges periodically.
async fn run_maintenance(
    shared: Weak<BlockedShared>,
    config: BlockedEvalsConfig,
    cancel: CancellationToken,
) {
    let every = |period: Duration| {
        let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker
    };
    let mut prune = every(config.prune_interval);
    let mut failed = every(config.failed_unblock_interval);
    let mut stats = every(config.stats_interval);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = prune.tick() => {
                let Some(shared) = shared.upgrade() else { return };
                let threshold = config.prune_threshold;
                shared.lock().core.prune(Instant::now(), threshold);
            }
            _ = failed.tick() => {
                let Some(shared) = shared.upgrade() else { return };
                let result = shared.with_core(|core| {
                    let released = core.unblock_failed()?;
                    Ok((released.len(), released))
                });
                match result {
                    Ok(0) | Err(BrokerError::BlockedEvalsDisabled) => {}
                    Ok(count) => tracing::debug!(count, "released evals blocked by max-plan-attempts"),
                    Err(error) => tracing::warn!(%error, "periodic unblock of failed evals"),
                }
            }
            _ = stats.tick() => {
                let Some(shared) = shared.upgrade() else { return };
                shared.emit_stats();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;
    use crate::server::eval_broker::{EvalBrokerConfig, WallClock};

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// A blocked eval of `job` that saw the state at `snapshot_index`, with the given class
    /// eligibility.
    fn blocked(id: &str, job: &str, snapshot_index: u64, classes: &[(&str, bool)]) -> Evaluation {
        Evaluation {
            id: EvalId::new(id),
            namespace: Namespace::default_namespace(),
            priority: 50,
            eval_type: JobType::Service,
            triggered_by: EvalTrigger::QueuedAllocs,
            job_id: JobId::new(job),
            status: EvalStatus::Blocked,
            class_eligibility: classes
                .iter()
                .map(|(c, e)| ((*c).to_owned(), *e))
                .collect::<BTreeMap<_, _>>(),
            snapshot_index,
            create_index: snapshot_index + 1,
            modify_index: snapshot_index + 1,
            ..Evaluation::default()
        }
    }

    fn escaped(mut eval: Evaluation) -> Evaluation {
        eval.escaped_computed_class = true;
        eval
    }

    fn system(mut eval: Evaluation, node: &str) -> Evaluation {
        eval.eval_type = JobType::System;
        eval.node_id = NodeId::new(node);
        eval
    }

    fn core() -> BlockedEvalsCore {
        let mut core = BlockedEvalsCore::new();
        core.set_enabled(true);
        core
    }

    fn released_ids(released: &[ReleasedEval]) -> Vec<&str> {
        released.iter().map(|r| r.eval.id.as_str()).collect()
    }

    fn track(core: &mut BlockedEvalsCore, eval: Evaluation) {
        assert_eq!(
            core.block(eval, None).unwrap(),
            (BlockOutcome::Tracked, None)
        );
    }

    #[test]
    fn released_when_a_node_of_a_usable_class_becomes_ready_and_kept_for_an_ineligible_one() {
        let mut core = core();
        let t0 = Instant::now();
        track(
            &mut core,
            blocked("wants-c1", "a", 10, &[("c1", true), ("c2", false)]),
        );
        track(&mut core, blocked("hates-c1", "b", 10, &[("c1", false)]));

        // c2 is ruled out for "wants-c1"; "hates-c1" never saw c2, so it must look again.
        assert_eq!(
            released_ids(&core.unblock("c2", 20, t0).unwrap()),
            ["hates-c1"]
        );
        track(
            &mut core,
            blocked("hates-c1-again", "b", 25, &[("c1", false), ("c2", false)]),
        );

        // A node of c1 becomes ready: only the eval that can use c1 is released.
        assert_eq!(
            released_ids(&core.unblock("c1", 30, t0).unwrap()),
            ["wants-c1"]
        );
        assert!(core.is_tracked(&EvalId::new("hates-c1-again")));
        assert_eq!(core.stats().total_blocked, 1);
        assert!(core.unblock("c1", 31, t0).unwrap().is_empty());
        assert!(core.unblock("c2", 32, t0).unwrap().is_empty());
    }

    #[test]
    fn escaped_evals_are_released_by_any_class() {
        let mut core = core();
        let t0 = Instant::now();
        track(
            &mut core,
            escaped(blocked("esc", "a", 10, &[("c1", false)])),
        );
        track(&mut core, blocked("cap", "b", 10, &[("c1", false)]));
        assert_eq!(core.stats().total_escaped, 1);
        assert_eq!(released_ids(&core.unblock("c1", 11, t0).unwrap()), ["esc"]);
        assert_eq!(core.stats().total_escaped, 0);
        assert!(
            core.unblock("", 12, t0).unwrap().is_empty(),
            "no class, nothing released"
        );
    }

    #[test]
    fn one_blocked_eval_per_job_and_the_newest_wins() {
        let mut core = core();
        track(&mut core, blocked("old", "web", 10, &[]));
        track(&mut core, blocked("new", "web", 20, &[]));
        assert_eq!(
            core.block(blocked("stale", "web", 5, &[]), None).unwrap(),
            (BlockOutcome::Duplicate, None)
        );
        assert!(core.is_tracked(&EvalId::new("new")));
        assert_eq!(core.stats().total_blocked, 1);
        assert_eq!(core.stats().duplicates, 2);
        let mut dups: Vec<String> = core
            .take_duplicates()
            .unwrap()
            .into_iter()
            .map(|e| e.id.to_string())
            .collect();
        dups.sort();
        assert_eq!(dups, ["old", "stale"]);
        assert!(core.take_duplicates().unwrap().is_empty());

        let written = mark_duplicates_canceled(vec![blocked("old", "web", 10, &[])], 99);
        assert_eq!(written[0].status, EvalStatus::Canceled);
        assert_eq!(
            written[0].status_description,
            "existing blocked evaluation exists for job \"web\""
        );
    }

    #[test]
    fn system_evals_are_tracked_per_node_and_released_by_their_node() {
        let mut core = core();
        let t0 = Instant::now();
        track(
            &mut core,
            system(blocked("n1-old", "sys", 10, &[("c1", false)]), "n1"),
        );
        track(
            &mut core,
            system(blocked("n2", "sys", 11, &[("c1", false)]), "n2"),
        );
        track(
            &mut core,
            system(blocked("n1-new", "sys", 12, &[("c1", false)]), "n1"),
        );
        let stats = core.stats();
        assert_eq!(
            (stats.total_blocked, stats.total_system, stats.duplicates),
            (2, 2, 1)
        );

        assert_eq!(
            released_ids(&core.unblock_node(&NodeId::new("n1"), 20, t0).unwrap()),
            ["n1-new"]
        );
        assert!(core
            .unblock_node(&NodeId::new("n1"), 21, t0)
            .unwrap()
            .is_empty());
        assert!(
            core.unblock("c1", 22, t0).unwrap().is_empty(),
            "c1 is ineligible"
        );
        assert_eq!(
            core.untrack(&Namespace::default_namespace(), &JobId::new("sys"))
                .unwrap(),
            1
        );
        assert_eq!(core.stats().total_system, 0);
    }

    #[test]
    fn an_eval_that_missed_an_unblock_goes_straight_back() {
        let mut core = core();
        let t0 = Instant::now();
        core.unblock("c1", 100, t0).unwrap();
        core.unblock_node(&NodeId::new("n1"), 100, t0).unwrap();

        // Saw state before c1's capacity change and c1 was usable (or unknown): release.
        for (id, classes) in [("eligible", &[("c1", true)][..]), ("unknown", &[][..])] {
            let (outcome, released) = core
                .block(blocked(id, id, 50, classes), Some(Token::from("tok")))
                .unwrap();
            assert_eq!(outcome, BlockOutcome::MissedUnblock);
            let released = released.unwrap();
            assert_eq!(released.eval.id, id);
            assert_eq!(
                released.token,
                Some(Token::from("tok")),
                "keeps its delivery token"
            );
        }
        // Ineligible for c1, or scheduled after the unblock: tracked.
        track(&mut core, blocked("ineligible", "x", 50, &[("c1", false)]));
        track(&mut core, blocked("fresh", "y", 100, &[]));
        // Escaped evals care about any class.
        let (outcome, _) = core
            .block(escaped(blocked("esc", "z", 99, &[("c1", false)])), None)
            .unwrap();
        assert_eq!(outcome, BlockOutcome::MissedUnblock);
        // A system eval whose node freed capacity after its snapshot.
        let (outcome, _) = core
            .block(
                system(blocked("sys-n1", "s", 99, &[("c1", false)]), "n1"),
                None,
            )
            .unwrap();
        assert_eq!(outcome, BlockOutcome::MissedUnblock);
        track(
            &mut core,
            system(blocked("sys-n2", "s", 99, &[("c1", false)]), "n2"),
        );
        assert_eq!(core.stats().total_blocked, 3);
    }

    #[test]
    fn unblock_failed_releases_only_max_plan_attempts_evals() {
        let mut core = core();
        let mut failed = blocked("failed", "a", 10, &[]);
        failed.triggered_by = EvalTrigger::MaxPlanAttempts;
        track(&mut core, failed);
        let mut failed_escaped = escaped(blocked("failed-esc", "b", 10, &[]));
        failed_escaped.triggered_by = EvalTrigger::MaxPlanAttempts;
        failed_escaped.priority = 80;
        track(&mut core, failed_escaped);
        track(&mut core, blocked("queued", "c", 10, &[]));
        assert_eq!(
            released_ids(&core.unblock_failed().unwrap()),
            ["failed-esc", "failed"]
        );
        assert!(core.is_tracked(&EvalId::new("queued")));
    }

    #[test]
    fn untrack_drops_the_jobs_blocked_eval() {
        let mut core = core();
        let t0 = Instant::now();
        track(&mut core, blocked("a", "web", 10, &[]));
        let ns = Namespace::default_namespace();
        // Same job id in another namespace is another job.
        let mut elsewhere = blocked("b", "web", 10, &[]);
        elsewhere.namespace = Namespace::new("prod");
        track(&mut core, elsewhere);
        assert_eq!(core.untrack(&ns, &JobId::new("web")).unwrap(), 1);
        assert_eq!(core.untrack(&ns, &JobId::new("web")).unwrap(), 0);
        assert_eq!(released_ids(&core.unblock("c9", 11, t0).unwrap()), ["b"]);
    }

    #[test]
    fn old_unblock_indexes_are_pruned() {
        let mut core = core();
        let t0 = Instant::now();
        core.unblock("c1", 100, t0).unwrap();
        core.unblock("c2", 100, t0 + secs(600)).unwrap();
        core.prune(t0 + secs(900), secs(900));
        assert_eq!(core.stats().unblock_indexes, 1);
        // c1's change is forgotten, c2's is not.
        track(
            &mut core,
            blocked("a", "a", 50, &[("c1", true), ("c2", false)]),
        );
        let (outcome, _) = core
            .block(blocked("b", "b", 50, &[("c2", true)]), None)
            .unwrap();
        assert_eq!(outcome, BlockOutcome::MissedUnblock);
    }

    #[test]
    fn a_disabled_tracker_refuses_and_forgets() {
        let mut core = core();
        let t0 = Instant::now();
        track(&mut core, blocked("a", "a", 10, &[]));
        core.set_enabled(false);
        let disabled = BrokerError::BlockedEvalsDisabled;
        assert_eq!(
            core.block(blocked("b", "b", 1, &[]), None),
            Err(disabled.clone())
        );
        assert_eq!(core.unblock("c", 1, t0), Err(disabled.clone()));
        assert_eq!(
            core.unblock_node(&NodeId::new("n"), 1, t0),
            Err(disabled.clone())
        );
        assert_eq!(core.unblock_failed(), Err(disabled.clone()));
        assert_eq!(core.take_duplicates(), Err(disabled.clone()));
        assert_eq!(
            core.untrack(&Namespace::default_namespace(), &JobId::new("a")),
            Err(disabled)
        );
        core.set_enabled(true);
        assert_eq!(core.stats(), BlockedStats::default());
    }

    #[test]
    fn config_validation() {
        BlockedEvalsConfig::default().validate().unwrap();
        BlockedEvalsConfig::for_tests().validate().unwrap();
        let bad = BlockedEvalsConfig {
            prune_threshold: Duration::ZERO,
            ..BlockedEvalsConfig::default()
        };
        assert_eq!(
            bad.validate(),
            Err(BrokerError::InvalidConfig {
                field: "prune_threshold",
                reason: "must be greater than zero"
            })
        );
    }

    // ---- the async shell, on paused tokio time ----

    fn shells() -> (EvalBroker, BlockedEvals) {
        let clock: WallClock = Arc::new(|| 0);
        let broker = EvalBroker::with_rng_and_clock(
            EvalBrokerConfig::default(),
            StdRng::seed_from_u64(5),
            clock,
        )
        .unwrap();
        broker.set_enabled(true);
        let blocked = BlockedEvals::new(broker.clone(), BlockedEvalsConfig::default()).unwrap();
        blocked.set_enabled(true);
        (broker, blocked)
    }

    #[tokio::test(start_paused = true)]
    async fn a_blocked_eval_reaches_a_waiting_worker_when_a_usable_node_becomes_ready() {
        let (broker, blocked_evals) = shells();
        let eval = blocked("b", "web", 10, &[("good", true), ("bad", false)]);
        assert_eq!(blocked_evals.block(eval).unwrap(), BlockOutcome::Tracked);

        let worker = {
            let broker = broker.clone();
            tokio::spawn(async move { broker.dequeue(&["service"], secs(600)).await })
        };
        while broker.waiting_dequeuers() == 0 {
            tokio::task::yield_now().await;
        }
        let start = Instant::now();
        assert_eq!(blocked_evals.unblock("bad", 20).unwrap(), 0);
        assert_eq!(blocked_evals.unblock("good", 21).unwrap(), 1);
        let (eval, _) = worker
            .await
            .unwrap()
            .unwrap()
            .expect("released to the worker");
        assert_eq!(eval.id, "b");
        assert_eq!(Instant::now(), start);
        assert_eq!(blocked_evals.stats().total_blocked, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_system_eval_is_released_when_its_node_frees_capacity() {
        let (broker, blocked_evals) = shells();
        blocked_evals
            .block(system(blocked("s", "sys", 10, &[]), "n1"))
            .unwrap();
        assert_eq!(
            blocked_evals.unblock_node(&NodeId::new("n2"), 11).unwrap(),
            0
        );
        assert_eq!(
            blocked_evals.unblock_node(&NodeId::new("n1"), 12).unwrap(),
            1
        );
        let (eval, _) = broker.dequeue(&["system"], secs(1)).await.unwrap().unwrap();
        assert_eq!(eval.id, "s");
    }

    #[tokio::test(start_paused = true)]
    async fn reblock_needs_the_outstanding_token_and_waits_for_the_ack() {
        let (broker, blocked_evals) = shells();
        let mut pending = blocked("e", "web", 10, &[("c1", true)]);
        pending.status = EvalStatus::Pending;
        broker.enqueue(pending).unwrap();
        let (eval, token) = broker
            .dequeue(&["service"], secs(1))
            .await
            .unwrap()
            .unwrap();

        let mut reblocked = eval.clone();
        reblocked.status = EvalStatus::Blocked;
        assert_eq!(
            blocked_evals.reblock(reblocked.clone(), "stale"),
            Err(BrokerError::TokenMismatch {
                eval_id: eval.id.clone()
            })
        );
        assert_eq!(
            blocked_evals.reblock(reblocked, &token).unwrap(),
            BlockOutcome::Tracked
        );

        // Capacity arrives while the worker still holds the delivery: the broker keeps the
        // released eval until that delivery is acked.
        assert_eq!(blocked_evals.unblock("c1", 20).unwrap(), 1);
        assert_eq!(broker.dequeue(&["service"], Duration::ZERO).await, Ok(None));
        broker.ack(&eval.id, &token).unwrap();
        let (again, _) = broker
            .dequeue(&["service"], Duration::ZERO)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((again.id, again.status), (eval.id, EvalStatus::Blocked));
    }

    #[tokio::test(start_paused = true)]
    async fn the_duplicate_reaper_is_woken_by_a_duplicate() {
        let (_broker, blocked_evals) = shells();
        let reaper = {
            let blocked_evals = blocked_evals.clone();
            tokio::spawn(async move { blocked_evals.wait_duplicates(secs(60)).await })
        };
        tokio::task::yield_now().await;
        let start = Instant::now();
        blocked_evals.block(blocked("old", "web", 10, &[])).unwrap();
        blocked_evals.block(blocked("new", "web", 20, &[])).unwrap();
        let dups = reaper.await.unwrap().unwrap();
        assert_eq!(dups.len(), 1);
        assert_eq!(dups[0].id, "old");
        assert_eq!(Instant::now(), start);
        assert_eq!(blocked_evals.wait_duplicates(secs(1)).await, Ok(Vec::new()));
        assert_eq!(Instant::now() - start, secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn max_plan_attempts_evals_are_released_every_minute() {
        let (broker, blocked_evals) = shells();
        let start = Instant::now();
        let mut failed = blocked("f", "web", 10, &[]);
        failed.triggered_by = EvalTrigger::MaxPlanAttempts;
        blocked_evals.block(failed).unwrap();
        let (eval, _) = broker
            .dequeue(&["service"], secs(600))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(eval.id, "f");
        assert_eq!(Instant::now() - start, secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn a_disabled_shell_refuses() {
        let (_broker, blocked_evals) = shells();
        blocked_evals.block(blocked("a", "a", 1, &[])).unwrap();
        blocked_evals.set_enabled(false);
        assert_eq!(blocked_evals.stats(), BlockedStats::default());
        assert_eq!(
            blocked_evals.block(blocked("a", "a", 1, &[])),
            Err(BrokerError::BlockedEvalsDisabled)
        );
        assert_eq!(
            blocked_evals.reblock(blocked("a", "a", 1, &[]), "t"),
            Err(BrokerError::BlockedEvalsDisabled)
        );
        assert_eq!(
            blocked_evals.wait_duplicates(secs(1)).await,
            Err(BrokerError::BlockedEvalsDisabled)
        );
    }
}
