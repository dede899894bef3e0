//! The payloads of the `Eval.*` calls the scheduler workers make to the leader's eval broker
//! and blocked-evals tracker, and of `Eval.Reap`, the garbage collector's deletions.

use serde::{Deserialize, Serialize};
use teamster_storage::model::{AllocId, EvalId, Evaluation};

/// `Eval.Dequeue`: an evaluation of one of the worker's scheduler types.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvalDequeueRequest {
    /// Scheduler types the worker serves.
    pub schedulers: Vec<String>,
    /// How long the broker may wait for work (0: the default, 1 s).
    pub timeout_ms: u64,
    /// The worker's scheduler version; a mismatch is refused.
    pub scheduler_version: u32,
}

/// `Eval.DequeueBatch`: up to `max` evaluations at once, so a worker schedules evaluations
/// that arrive together in one round (one snapshot, plans submitted together).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvalDequeueBatchRequest {
    /// Scheduler types the worker serves.
    pub schedulers: Vec<String>,
    /// How long the broker may wait for the first evaluation (0: the default, 1 s).
    pub timeout_ms: u64,
    /// The worker's scheduler version; a mismatch is refused.
    pub scheduler_version: u32,
    /// Most evaluations to hand out (at least 1). Only the first may be of any type; the
    /// others are `service` or `batch` evaluations already waiting.
    pub max: u32,
}

/// An evaluation handed to a worker by `Eval.Dequeue`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DequeuedEval {
    /// The evaluation.
    pub eval: Evaluation,
    /// The delivery token every later call about it must carry.
    pub token: String,
    /// The index the worker's state must reach before scheduling: the highest
    /// `ModifyIndex` among the job's evaluations.
    pub wait_index: u64,
}

/// `Eval.Ack` and `Eval.Nack`: the delivery of an evaluation ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvalAckRequest {
    /// The evaluation.
    pub eval_id: EvalId,
    /// The delivery token from the dequeue.
    pub token: String,
}

/// `Eval.Update`, `Eval.Create` and `Eval.Reblock`: the scheduler writes an evaluation while
/// it holds the delivery of the one it processes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalWriteRequest {
    /// The evaluation to write (for `Eval.Create`, its `PreviousEval` is the one being
    /// processed).
    pub eval: Evaluation,
    /// The delivery token of the evaluation being processed.
    pub token: String,
}

/// `Eval.Reap`: delete terminal evaluations and allocations (the `_core` garbage collector).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvalReapRequest {
    /// Evaluations to delete.
    pub evals: Vec<EvalId>,
    /// Allocations to delete.
    pub allocs: Vec<AllocId>,
}
