//! The payloads of the `Job.*` calls: register (with its evaluation), deregister (stop or
//! purge), force-evaluate, revert to an earlier version, and the garbage collector's batch
//! purge.

use serde::{Deserialize, Serialize};
use teamster_storage::model::{EvalId, Job, JobId, Namespace};

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
