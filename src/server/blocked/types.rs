//! The tracker's vocabulary: its settings, what its core hands back ([`ReleasedEval`],
//! [`BlockOutcome`]) and its counts. Its errors are the broker's ([`BrokerError`]).

use std::time::Duration;

use teamster_storage::model::Evaluation;

use crate::server::broker::{BrokerError, Token};

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
            Some((field, _)) => Err(BrokerError::InvalidConfig(
                crate::util::InvalidSetting::new(field, "must be greater than zero"),
            )),
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
