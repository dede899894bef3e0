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
//!  Eval.Reblock / FSM (blocked eval) ──block──▶ ┌────────── BlockedEvalsCore ──────────┐
//!  state changes: node ready / eligible,        │ jobs: (ns, job, node) → eval         │
//!    alloc complete or failed ──unblock(class)─▶│ captured (class eligibility)         │──released──▶ EvalBroker::enqueue_all
//!                             ──unblock_node───▶│ escaped · system by node             │
//!  every minute ─────────────unblock_failed────▶│ unblock indexes (missed-unblock check)│
//!                                               └──── duplicates ──▶ reaper (canceled)  ┘
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
    /// every captured eval that does not mark the class ineligible.
    pub fn unblock(
        &mut self,
        computed_class: &str,
        index: u64,
        now: Instant,
    ) -> Result<Vec<ReleasedEval>, BrokerError> {
        self.ensure_enabled()?;
        self.record_unblock(UnblockKey::Class(computed_class.to_owned()), index, now);
        if computed_class.is_empty() {
            return Ok(Vec::new());
        }
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
