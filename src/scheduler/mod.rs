//! The schedulers: pure placement logic that turns an [`Evaluation`] into a [`Plan`].
//!
//! A scheduler reads a [`Snapshot`] and writes only through a [`Planner`]; it does no I/O,
//! starts no tasks, reads no clock and uses no global RNG. "Now" (Unix nanoseconds) and the
//! RNG (node shuffling, allocation and evaluation ids) come in a [`SchedulerEnv`], so a seeded
//! RNG and a fixed time replay a decision exactly.
//!
//! ```text
//!  worker ── new_scheduler(type, snapshot, planner, env) ──▶ Scheduler::process(eval)
//!                                                              │
//!     reconcile (generic) / per-node diff (system)  ◀──────────┤  what to stop, update, place
//!     Stack: shuffled nodes → feasible → fit → rank → limit ◀──┤  where
//!     Planner::submit_plan(plan) ──▶ (PlanResult, fresh snapshot if partially committed)
//!        └─ partial: re-plan on the fresh snapshot (5 attempts service/system, 2 batch,
//!           reset whenever a result made progress; exhausted → blocked eval + eval failed)
//!     Planner::create_eval (blocked, follow-up) · update_eval (complete/failed) · reblock_eval
//! ```
//!
//! - [`generic`]: service and batch jobs ([`GenericScheduler`]), with the reconciler in
//!   [`reconcile`]: placements, scale-down, lost and draining nodes, rescheduling of failed
//!   allocations under the group's `ReschedulePolicy`, in-place versus destructive updates.
//! - [`system`]: system and sysbatch jobs ([`SystemScheduler`]): one allocation per feasible
//!   ready node, per-node blocked evaluations.
//! - [`placement`]: the loop both share (attempts, plan submission, blocked evaluations, the
//!   evaluation's status) and the planning pieces they use alike.
//! - [`feasible`], [`stack`], [`fit`], [`context`]: constraints and drivers with per-class
//!   caching, ranking (binpack or spread, job anti-affinity, reschedule penalty, affinities,
//!   spreads) under a limit, the shared resource-fit arithmetic, and the evaluation context that
//!   keeps per-node usage incremental.
//! - [`verify`]: the plan applier's check of a submitted plan against the newest state, node
//!   by node, with the same fit arithmetic ([`fit`]); the leader's applier runs it.
//! - [`annotate`]: `job plan`: the scheduler on a what-if copy of the state with a planner
//!   that commits nothing, and its decisions counted per task group onto the job diff.
//! - [`harness`]: a [`Planner`] over a real state store for tests and benchmarks.
//!
//! - [`preempt`]: which lower-priority allocations to evict when a node lacks room (per
//!   the scheduler configuration's `PreemptionConfig`); [`supervisor`]: the share of the
//!   cluster supervisor jobs may hold.
//!
//! Not modelled: devices, volumes and quotas.

pub mod annotate;
pub(crate) mod context;
pub(crate) mod feasible;
pub mod fit;
pub mod generic;
pub mod harness;
pub(crate) mod placement;
pub mod ports;
pub mod preempt;
pub(crate) mod reconcile;
pub(crate) mod stack;
pub(crate) mod supervisor;
pub mod system;
pub(crate) mod util;
pub mod verify;
pub(crate) mod version;

#[cfg(test)]
mod tests;

use rand::RngCore;
use teamster_storage::model::{Evaluation, JobType, Plan, PlanResult};
use teamster_storage::state::Snapshot;

pub use generic::GenericScheduler;
use placement::Session;
pub use system::SystemScheduler;
pub use util::ReadyNodesCache;

/// The version of the schedulers' decisions. Workers announce it on `Eval.Dequeue` and the
/// leader refuses a mismatch, so servers of different versions never schedule side by side
/// (Nomad's `scheduler.SchedulerVersion`).
pub const SCHEDULER_VERSION: u32 = 1;

/// Errors of the schedulers and of the planners they call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedulerError {
    /// No scheduler handles this evaluation type here (`_core` is the server's own).
    #[error("no scheduler for evaluation type {job_type:?}")]
    UnsupportedType {
        /// The evaluation's type.
        job_type: JobType,
    },
    /// The planner failed (RPC error, leadership lost, plan queue disabled, …); the worker
    /// nacks the evaluation and it is retried.
    #[error("planner failed to {operation}: {reason}")]
    Planner {
        /// `submit plan`, `update eval`, `create eval` or `reblock eval`.
        operation: &'static str,
        /// What went wrong.
        reason: String,
    },
    /// The planner reported a partial commit without handing a fresh snapshot back.
    #[error("missing state refresh after partial commit")]
    MissingRefresh,
    /// The settings are out of range.
    #[error("invalid scheduler settings: {0}")]
    InvalidSettings(String),
    /// The scheduler panicked on this evaluation (caught by the worker, which fails the
    /// evaluation with this reason and goes on).
    #[error("scheduler panicked: {0}")]
    Panicked(String),
}

/// Runs one scheduler call, turning a panic into [`SchedulerError::Panicked`] with the
/// panic's message, so a poisoned evaluation fails alone and the server goes on.
pub fn catch_panic<T>(f: impl FnOnce() -> Result<T, SchedulerError>) -> Result<T, SchedulerError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => Err(SchedulerError::Panicked(
            crate::util::panic_message(payload.as_ref())
                .unwrap_or_else(|| "a non-text panic payload".to_owned()),
        )),
    }
}

/// How a scheduler submits its decisions. The worker implements it with RPCs to the leader
/// (synchronously: it blocks inside `spawn_blocking` or a small sync-over-async bridge); the
/// test [`harness::Harness`] with a local state store.
pub trait Planner {
    /// Submits a plan to the leader's plan applier. When the result carries a `RefreshIndex`
    /// (some nodes were rejected), the planner also returns a snapshot at or after it, and
    /// the scheduler plans again on it.
    fn submit_plan(&mut self, plan: Plan)
        -> Result<(PlanResult, Option<Snapshot>), SchedulerError>;

    /// Records the evaluation's outcome (status, failed task groups, queued allocations,
    /// blocked-eval link).
    fn update_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError>;

    /// Creates an evaluation: a blocked one for unplaced allocations, or a follow-up.
    fn create_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError>;

    /// Puts a blocked evaluation that still cannot place everything back in the blocked set.
    fn reblock_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError>;
}

/// Processes evaluations of one scheduler type.
pub trait Scheduler {
    /// Schedules `eval` to completion: plans, submits (retrying on partial commits), creates
    /// blocked or follow-up evaluations and updates `eval`'s status through the planner.
    /// An error means the evaluation should be nacked and retried.
    fn process(&mut self, eval: &Evaluation) -> Result<(), SchedulerError>;
}

/// Tunables of the schedulers (Nomad's constants and `schedConfig` defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerSettings {
    /// Plan attempts without progress before a service evaluation fails (Nomad: 5).
    pub service_max_attempts: u32,
    /// The same for batch jobs (Nomad: 2).
    pub batch_max_attempts: u32,
    /// The same for system and sysbatch jobs (Nomad: 5).
    pub system_max_attempts: u32,
    /// Candidate nodes ranked per placement when a group has affinities or spreads
    /// (Nomad's `NodeLimitForFeasibilityChecks`, 100), or its count if larger.
    pub affinity_spread_node_limit: usize,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        Self {
            service_max_attempts: 5,
            batch_max_attempts: 2,
            system_max_attempts: 5,
            affinity_spread_node_limit: 100,
        }
    }
}

impl SchedulerSettings {
    /// Checks that every attempt limit is within 1..=100 and the node limit within
    /// 2..=100 000.
    pub fn validate(&self) -> Result<(), SchedulerError> {
        for (name, value) in [
            ("service_max_attempts", self.service_max_attempts),
            ("batch_max_attempts", self.batch_max_attempts),
            ("system_max_attempts", self.system_max_attempts),
        ] {
            if !(1..=100).contains(&value) {
                return Err(SchedulerError::InvalidSettings(format!(
                    "{name} must be within 1..=100, not {value}"
                )));
            }
        }
        if !(2..=100_000).contains(&self.affinity_spread_node_limit) {
            return Err(SchedulerError::InvalidSettings(format!(
                "affinity_spread_node_limit must be within 2..=100000, not {}",
                self.affinity_spread_node_limit
            )));
        }
        Ok(())
    }
}

/// What a scheduler takes from its caller besides state: the time and the randomness.
pub struct SchedulerEnv<'a> {
    /// "Now", Unix nanoseconds: allocation and evaluation times, reschedule windows.
    pub now: i64,
    /// Shuffles candidate nodes and draws ids; seed it to replay a decision.
    pub rng: &'a mut dyn RngCore,
    /// Tunables.
    pub settings: SchedulerSettings,
    /// Ready nodes remembered across evaluations while the nodes table stays the same (a
    /// worker pool shares one); `None` scans the nodes every time.
    pub ready_nodes: Option<&'a ReadyNodesCache>,
}

impl std::fmt::Debug for SchedulerEnv<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchedulerEnv")
            .field("now", &self.now)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// A scheduler for `job_type` (Nomad's `NewScheduler`): service and batch get the
/// [`GenericScheduler`], system and sysbatch the [`SystemScheduler`]. `_core` is the
/// server's garbage collector, not a placement scheduler.
pub fn new_scheduler<'a>(
    job_type: JobType,
    snapshot: Snapshot,
    planner: &'a mut dyn Planner,
    env: SchedulerEnv<'a>,
) -> Result<Box<dyn Scheduler + 'a>, SchedulerError> {
    env.settings.validate()?;
    let session = Session::new(snapshot, planner, env);
    match job_type {
        JobType::Service => Ok(Box::new(GenericScheduler::new(false, session))),
        JobType::Batch => Ok(Box::new(GenericScheduler::new(true, session))),
        JobType::System => Ok(Box::new(SystemScheduler::new(false, session))),
        JobType::SysBatch => Ok(Box::new(SystemScheduler::new(true, session))),
        JobType::Core => Err(SchedulerError::UnsupportedType { job_type }),
    }
}
