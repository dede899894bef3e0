//! The leader's plan queue and its single plan applier.
//!
//! ```text
//!  Plan.Submit ──enqueue──▶ PlanQueue (priority, then enqueue order) ──dequeue──▶ applier
//!      ▲                                                                          │
//!      │   evaluate_plan(newest snapshot, overlay of plans still committing, plan)│
//!      │                         │ no-op / all rejected: answer at once            │
//!      │                         ▼                                                 │
//!      │   overlay.record ─▶ spawn commit: RaftNode::write_local(ApplyPlanResults) │
//!      └──────── PlanResult (AllocIndex, RefreshIndex when partial) ◀──────────────┘
//! ```
//!
//! - [`PlanQueueCore`] is the sans-IO heap: higher plan priority first, then older; disabled
//!   it refuses plans ("plan queue is disabled"), and disabling flushes every queued plan with
//!   "plan queue flushed".
//! - [`PlanQueue`] is the shell: a `Clone` handle, each plan carrying a oneshot for its answer.
//! - [`PlanApplier`] is the loop the [`PlanQueueDuty`] runs on the leader. It evaluates plan
//!   N+1 while plan N is committing (pipelining, up to [`EvalBrokerConfig::plan_apply_pipeline`]
//!   commits at once); plans that commit at the same time ride in one raft entry through the
//!   raft node's group commit. Accepted plans stay in a [`PlanOverlay`] until the state store
//!   shows their commit, so the next plan is checked against them too.
//!
//! Metrics: gauge `teamster_plan_queue_depth`; histograms `teamster_plan_evaluate_seconds`,
//! `teamster_plan_apply_seconds`, `teamster_plan_wait_seconds`; counters
//! `teamster_plan_node_rejected_total`, `teamster_plan_allocs_committed_total`,
//! `teamster_plan_applied_total{outcome}`.
//!
//! # Files
//!
//! - [`queue`]: [`PlanQueueCore`] and the [`PlanQueue`] handle, with [`PlanQueueError`].
//! - [`applier`]: [`PlanApplier`] and [`PlanQueueDuty`], which runs it on a
//!   [`LeaderService`] while this server leads.
//!
//! May import: the bottom of `server` (`config`, `raft`, `leader`, `leader_service`), `util`,
//! and `scheduler::verify`; never another subsystem, `endpoints` or `worker`.
//!
//! [`LeaderService`]: crate::server::leader_service::LeaderService
//! [`EvalBrokerConfig::plan_apply_pipeline`]: crate::server::config::EvalBrokerConfig::plan_apply_pipeline
//! [`PlanOverlay`]: crate::scheduler::verify::PlanOverlay

pub mod applier;
pub mod queue;

pub use self::applier::{PlanApplier, PlanQueueDuty};
pub use self::queue::{PendingPlan, PlanQueue, PlanQueueCore, PlanQueueError, PlanReply};
