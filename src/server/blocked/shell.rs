//! The tracker's async shell, [`BlockedEvals`]: a `Clone` handle around the core under a
//! mutex that hands released evals to the [`EvalBroker`] under that same lock (so they reach
//! the broker in the order they were released), wakes the duplicate reaper, and while enabled
//! runs three periodic chores on a [`LeaderService`]: pruning old unblock indexes, releasing
//! the evals blocked by `max-plan-attempts`, and the gauges.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use teamster_storage::model::{Evaluation, JobId, Namespace, NodeId};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::core::BlockedEvalsCore;
use super::types::{BlockOutcome, BlockedEvalsConfig, BlockedStats, ReleasedEval};
use crate::server::broker::{BrokerError, EvalBroker, Token};
use crate::server::leader_service::LeaderService;

struct BlockedShared {
    core: Mutex<BlockedEvalsCore>,
    broker: EvalBroker,
    /// Wakes the duplicate reaper.
    duplicates_ready: Notify,
    config: BlockedEvalsConfig,
    /// The periodic chores, running while enabled.
    tasks: LeaderService,
}

impl BlockedShared {
    fn lock(&self) -> MutexGuard<'_, BlockedEvalsCore> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the core and hands what it released to the broker while still holding the
    /// tracker's lock (lock order: tracker, then broker; the broker never calls back).
    fn with_core<R>(
        &self,
        f: impl FnOnce(&mut BlockedEvalsCore) -> Result<(R, Vec<ReleasedEval>), BrokerError>,
    ) -> Result<R, BrokerError> {
        let mut core = self.lock();
        let (out, released) = f(&mut core)?;
        if core.has_duplicates() {
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
        let stats = self.lock().stats();
        emit_blocked_gauges(&stats);
    }

    /// Forgets unblock indexes older than the prune threshold (a periodic chore).
    fn prune(&self) {
        self.lock()
            .prune(Instant::now(), self.config.prune_threshold);
    }

    /// Releases the evals blocked by `max-plan-attempts` (a periodic chore).
    fn release_failed(&self) {
        let result = self.with_core(|core| {
            let released = core.unblock_failed()?;
            Ok((released.len(), released))
        });
        match result {
            Ok(0) | Err(BrokerError::BlockedEvalsDisabled) => {}
            Ok(count) => tracing::debug!(count, "released evals blocked by max-plan-attempts"),
            Err(error) => tracing::warn!(%error, "periodic unblock of failed evals"),
        }
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
        let core = self.shared.lock();
        f.debug_struct("BlockedEvals")
            .field("enabled", &core.is_enabled())
            .field("stats", &core.stats())
            .finish()
    }
}

impl BlockedEvals {
    /// A disabled tracker that releases evals into `broker`.
    pub fn new(broker: EvalBroker, config: BlockedEvalsConfig) -> Result<Self, BrokerError> {
        config.validate()?;
        Ok(Self {
            shared: Arc::new(BlockedShared {
                core: Mutex::new(BlockedEvalsCore::new()),
                broker,
                duplicates_ready: Notify::new(),
                config,
                tasks: LeaderService::new(),
            }),
        })
    }

    /// True on the leader.
    pub fn enabled(&self) -> bool {
        self.shared.lock().is_enabled()
    }

    /// Enables (leadership gained) or disables (lost) the tracker. Enabling starts the
    /// periodic chores (prune, failed unblock, gauges) on the current tokio runtime;
    /// disabling forgets everything and wakes a waiting duplicate reaper.
    ///
    /// # Panics
    ///
    /// Enabling outside a tokio runtime panics (as `tokio::spawn` does).
    pub fn set_enabled(&self, enabled: bool) {
        let mut core = self.shared.lock();
        if core.is_enabled() == enabled {
            return;
        }
        core.set_enabled(enabled);
        self.shared.tasks.switch(enabled, |set| {
            let (config, shared) = (&self.shared.config, Arc::downgrade(&self.shared));
            set.spawn_every(config.prune_interval, shared.clone(), BlockedShared::prune);
            set.spawn_every(
                config.failed_unblock_interval,
                shared.clone(),
                BlockedShared::release_failed,
            );
            set.spawn_every(config.stats_interval, shared, BlockedShared::emit_stats);
        });
        if !enabled {
            self.shared.duplicates_ready.notify_waiters();
        }
        let stats = core.stats();
        drop(core);
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

    /// Takes the superseded blocked evals (the duplicate reaper writes them canceled).
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
        self.shared.lock().stats()
    }

    /// Sets the blocked-evals gauges now (done every
    /// [`BlockedEvalsConfig::stats_interval`] while enabled).
    pub fn emit_stats(&self) {
        self.shared.emit_stats();
    }
}
