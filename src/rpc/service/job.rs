//! The payloads of the `Job.*` calls: register (with its evaluation), deregister (stop or
//! purge), force-evaluate, revert to an earlier version, the garbage collector's batch
//! purge, plan (a dry run), scale and stability.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use teamster_storage::model::{
    AllocMetric, ConfigValue, EvalId, Evaluation, Job, JobDiff, JobId, Namespace, PlanAnnotations,
};

/// `Job.Register`: register a job (a new version when it changed) and create its
/// evaluation. The service canonicalizes and validates the job and stamps `SubmitTime`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRegisterRequest {
    /// The job as submitted.
    pub job: Job,
    /// Register only if the job's current `JobModifyIndex` is this (0: only if it does not
    /// exist yet); `None`: unconditionally.
    pub enforce_index: Option<u64>,
}

/// The answer to `Job.Register` (Nomad's `JobRegisterResponse`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRegisterResponse {
    /// The evaluation created for it.
    pub eval_id: EvalId,
    /// The raft index of the write (the eval's create index).
    pub index: u64,
    /// The job's `JobModifyIndex` after the write.
    pub job_modify_index: u64,
}

/// `Job.Deregister`: stop a job (it stays, `Stop: true`) or purge it, with an evaluation
/// that stops its allocations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobDeregisterRequest {
    /// The job's namespace.
    pub namespace: Namespace,
    /// The job.
    pub job_id: JobId,
    /// Remove the job from the state instead of marking it stopped.
    pub purge: bool,
}

/// The answer to `Job.Deregister`. An unknown job is not an error (Nomad answers 200 with
/// no evaluation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobDeregisterResponse {
    /// The evaluation created (none for an unknown job).
    pub eval_id: Option<EvalId>,
    /// The raft index of the write.
    pub index: u64,
    /// The job's `JobModifyIndex` after the write (0 for an unknown job).
    pub job_modify_index: u64,
}

/// `Job.Evaluate`: create a new evaluation of a registered job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEvaluateRequest {
    /// The job's namespace.
    pub namespace: Namespace,
    /// The job.
    pub job_id: JobId,
}

/// The answer to `Job.Evaluate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEvaluateResponse {
    /// The evaluation created.
    pub eval_id: EvalId,
    /// The raft index of the write.
    pub index: u64,
    /// The job's `JobModifyIndex`.
    pub job_modify_index: u64,
}

/// `Job.Revert`: register version `job_version` of a job again (Nomad's `Job.Revert`); it
/// becomes the newest version. Answered like `Job.Register`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRevertRequest {
    /// The job's namespace.
    pub namespace: Namespace,
    /// The job.
    pub job_id: JobId,
    /// The version to go back to.
    pub job_version: u64,
    /// Revert only if the job's current version is this one.
    pub enforce_prior_version: Option<u64>,
}

/// `Job.BatchDeregister`: purge jobs without evaluations (the `_core` garbage collector,
/// for stopped jobs whose allocations are all terminal).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobBatchDeregisterRequest {
    /// The jobs, by namespace and ID.
    pub jobs: Vec<(Namespace, JobId)>,
}

/// `Job.Plan`: what registering `job` would do, computed on the leader's state with a
/// planner that commits nothing (Nomad's `Job.Plan`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobPlanRequest {
    /// The job as it would be submitted.
    pub job: Job,
    /// Compute the diff against the registered version.
    pub diff: bool,
}

/// The answer to `Job.Plan` (Nomad's `JobPlanResponse`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobPlanResponse {
    /// The registered job's `JobModifyIndex` (0: not registered), for `run -check-index`.
    pub job_modify_index: u64,
    /// The state index planned against.
    pub index: u64,
    /// What the scheduler would do per task group.
    pub annotations: PlanAnnotations,
    /// The groups it could not place, with why.
    pub failed_tg_allocs: BTreeMap<String, AllocMetric>,
    /// The evaluations it would create (e.g. a blocked one).
    pub created_evals: Vec<Evaluation>,
    /// The diff from the registered version, when asked for.
    pub diff: Option<JobDiff>,
}

/// `Job.Scale`: set a task group's count within its `scaling` bounds (a new version and an
/// evaluation), or with no count only record an event (Nomad's `Job.Scale`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobScaleRequest {
    /// The job's namespace.
    pub namespace: Namespace,
    /// The job.
    pub job_id: JobId,
    /// The task group.
    pub group: String,
    /// The new count; `None` only records the event.
    pub count: Option<i64>,
    /// Why (recorded with the event).
    pub message: String,
    /// The event reports an error (then no count may be given).
    pub error: bool,
    /// Free-form event details.
    pub meta: BTreeMap<String, ConfigValue>,
    /// Scale only if the job's `JobModifyIndex` is this (0: no check).
    pub job_modify_index: u64,
}

/// The answer to `Job.Scale`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobScaleResponse {
    /// The evaluation created (none when only an event was recorded).
    pub eval_id: Option<EvalId>,
    /// The raft index of the write.
    pub index: u64,
    /// The job's `JobModifyIndex` after the write.
    pub job_modify_index: u64,
}

/// `Job.Stable`: mark a kept version of a job stable or not (Nomad's `Job.Stable`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStabilityRequest {
    /// The job's namespace.
    pub namespace: Namespace,
    /// The job.
    pub job_id: JobId,
    /// The version.
    pub version: u64,
    /// Stable or not.
    pub stable: bool,
}

/// `Job.PeriodicForce`: launch a periodic job's child now (Nomad's `Periodic.Force`),
/// whatever `prohibit_overlap` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobPeriodicForceRequest {
    /// The job's namespace.
    pub namespace: Namespace,
    /// The periodic parent.
    pub job_id: JobId,
}

/// The answer to `Job.PeriodicForce`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobPeriodicForceResponse {
    /// The child launched.
    pub child_id: JobId,
    /// The child's evaluation.
    pub eval_id: EvalId,
    /// The raft index of the write (the evaluation's create index).
    pub index: u64,
}

/// `Job.Dispatch`: launch a child of a parameterized job with a payload and meta (Nomad's
/// `Job.Dispatch`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobDispatchRequest {
    /// The job's namespace.
    pub namespace: Namespace,
    /// The parameterized parent.
    pub job_id: JobId,
    /// The payload as given (at most 16 KiB; compressed by the service).
    pub payload: Vec<u8>,
    /// Meta values, merged over the parent's meta.
    pub meta: BTreeMap<String, String>,
    /// A dispatch with the token of an existing child answers that child.
    pub idempotency_token: String,
    /// Put into the child's ID: `<parent>/dispatch-<template>-<unix>-<8 hex>`.
    pub id_prefix_template: String,
    /// The child's priority (0: the parent's).
    pub priority: u32,
}

/// The answer to `Job.Dispatch` (Nomad's `JobDispatchResponse`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobDispatchResponse {
    /// The child.
    pub dispatched_job_id: JobId,
    /// Its evaluation (none when the idempotency token found an existing child).
    pub eval_id: Option<EvalId>,
    /// The evaluation's create index (0 without one).
    pub eval_create_index: u64,
    /// The child's create index.
    pub job_create_index: u64,
    /// The raft index of the write (or of the state read, for an existing child).
    pub index: u64,
}
