//! `Job.Register`, `Job.Deregister`, `Job.Evaluate`, `Job.Revert` and `Job.BatchDeregister` on
//! the leader:
//! the job is canonicalized and validated here (whoever sent it), stamped with its submit
//! time, and written through raft together with the evaluation that schedules it.

use teamster_storage::fsm::{ApplyError, Command, CommandResponse, EvalUpsert, JobDeregister};
use teamster_storage::model::{EvalTrigger, JobStatus, ModelError};

use super::Endpoints;
use crate::rpc::service::job::{
    JobBatchDeregisterRequest, JobDeregisterRequest, JobDeregisterResponse, JobEvaluateRequest,
    JobEvaluateResponse, JobRegisterRequest, JobRegisterResponse, JobRevertRequest,
};
use crate::rpc::ServiceError;
use crate::server::evals::job_eval;

/// A job's validation errors as one `Invalid` naming the job.
pub fn invalid_job(e: ModelError) -> ServiceError {
    ServiceError::invalid("Job", e.to_string())
}

/// `Job.Register`.
pub async fn register(
    ep: &Endpoints,
    req: JobRegisterRequest,
) -> Result<JobRegisterResponse, ServiceError> {
    let mut job = req.job;
    if job.id.is_empty() {
        return Err(ServiceError::invalid(
            "Job.ID",
            "Job ID hasn't been provided",
        ));
    }
    job.canonicalize();
    job.validate().map_err(invalid_job)?;
    let now = ep.now();
    job.submit_time = now;
    let eval = job_eval(&job, EvalTrigger::JobRegister, now, &mut ep.rng().fork());
    let eval_id = eval.id.clone();
    let (index, response) = ep
        .write(Command::JobRegister(teamster_storage::fsm::JobRegister {
            job,
            eval: Some(eval),
            enforce_index: req.enforce_index,
        }))
        .await?;
    let CommandResponse::JobRegistered {
        job_modify_index, ..
    } = response
    else {
        return Err(ServiceError::internal(format!(
            "unexpected answer {response:?}"
        )));
    };
    Ok(JobRegisterResponse {
        eval_id,
        index,
        job_modify_index,
    })
}

/// `Job.Revert`: the kept version `job_version`, registered again (compare-and-set on the
/// current `JobModifyIndex`, so a registration racing the revert is not overwritten).
pub async fn revert(
    ep: &Endpoints,
    req: JobRevertRequest,
) -> Result<JobRegisterResponse, ServiceError> {
    let snapshot = ep.node().state().snapshot();
    let (ns, id) = (req.namespace.as_str(), req.job_id.as_str());
    let current = snapshot
        .job_by_id(ns, id)
        .ok_or_else(|| ServiceError::not_found("job", id))?;
    if let Some(prior) = req.enforce_prior_version {
        if prior != current.version {
            return Err(ServiceError::invalid(
                "EnforcePriorVersion",
                format!(
                    "enforcing version {prior}, but current version is {}",
                    current.version
                ),
            ));
        }
    }
    if req.job_version == current.version {
        return Err(ServiceError::invalid(
            "JobVersion",
            format!("can't revert to current version {}", current.version),
        ));
    }
    let old = snapshot
        .job_versions(ns, id)
        .into_iter()
        .find(|j| j.version == req.job_version)
        .ok_or_else(|| {
            ServiceError::not_found("job version", format!("{id} version {}", req.job_version))
        })?;
    register(
        ep,
        JobRegisterRequest {
            job: (*old).clone(),
            enforce_index: Some(current.job_modify_index),
        },
    )
    .await
}

/// `Job.Deregister`. An unknown job answers with no evaluation, as Nomad does.
pub async fn deregister(
    ep: &Endpoints,
    req: JobDeregisterRequest,
) -> Result<JobDeregisterResponse, ServiceError> {
    let snapshot = ep.node().state().snapshot();
    let now = ep.now();
    let eval = snapshot
        .job_by_id(req.namespace.as_str(), req.job_id.as_str())
        .map(|job| job_eval(job, EvalTrigger::JobDeregister, now, &mut ep.rng().fork()));
    drop(snapshot);
    let eval_id = eval.as_ref().map(|e| e.id.clone());
    let applied = ep
        .node()
        .write_local(Command::JobDeregister(JobDeregister {
            namespace: req.namespace,
            job_id: req.job_id,
            purge: req.purge,
            eval,
            submit_time: now,
        }))
        .await
        .map_err(super::write_error)?;
    let index = applied.index;
    match applied.response {
        CommandResponse::JobRegistered {
            job_modify_index, ..
        } => Ok(JobDeregisterResponse {
            eval_id,
            index,
            job_modify_index,
        }),
        CommandResponse::Applied => Ok(JobDeregisterResponse {
            eval_id,
            index,
            job_modify_index: index,
        }),
        CommandResponse::Rejected(ApplyError::JobNotFound { .. }) => Ok(JobDeregisterResponse {
            eval_id: None,
            index,
            job_modify_index: 0,
        }),
        CommandResponse::Rejected(e) => Err(super::apply_error(&e)),
        other => Err(ServiceError::internal(format!(
            "unexpected answer {other:?}"
        ))),
    }
}

/// `Job.Evaluate`: a new evaluation of the job as the leader knows it now.
pub async fn evaluate(
    ep: &Endpoints,
    req: JobEvaluateRequest,
) -> Result<JobEvaluateResponse, ServiceError> {
    let snapshot = ep
        .node()
        .consistent_snapshot()
        .await
        .map_err(super::node_error)?;
    let job = snapshot
        .job_by_id(req.namespace.as_str(), req.job_id.as_str())
        .ok_or_else(|| ServiceError::not_found("job", req.job_id.as_str()))?;
    let eval = job_eval(
        job,
        EvalTrigger::JobRegister,
        ep.now(),
        &mut ep.rng().fork(),
    );
    let eval_id = eval.id.clone();
    let job_modify_index = job.job_modify_index;
    drop(snapshot);
    let (index, _) = ep
        .write(Command::EvalUpsert(EvalUpsert { evals: vec![eval] }))
        .await?;
    Ok(JobEvaluateResponse {
        eval_id,
        index,
        job_modify_index,
    })
}

/// `Job.BatchDeregister`: purge, in one raft entry and without evaluations, the jobs that
/// are still garbage (stopped or dead, every allocation terminal) in the leader's state; the others
/// (re-registered since the collector looked) are left alone.
pub async fn batch_deregister(
    ep: &Endpoints,
    req: JobBatchDeregisterRequest,
) -> Result<u64, ServiceError> {
    let purges: Vec<Command> = {
        let snapshot = ep.node().state().snapshot();
        req.jobs
            .into_iter()
            .filter(|(namespace, job_id)| {
                let Some(job) = snapshot.job_by_id(namespace.as_str(), job_id.as_str()) else {
                    return false;
                };
                let garbage = (job.stop || job.status == JobStatus::Dead)
                    && snapshot
                        .allocs_by_job(namespace, job_id)
                        .all(|a| a.terminal_status());
                if !garbage {
                    tracing::info!(%job_id, "not purged: the job is live again");
                }
                garbage
            })
            .map(|(namespace, job_id)| {
                Command::JobDeregister(JobDeregister {
                    namespace,
                    job_id,
                    purge: true,
                    eval: None,
                    submit_time: 0,
                })
            })
            .collect()
    };
    if purges.is_empty() {
        return Ok(ep.node().state().snapshot().latest_index());
    }
    let applied = ep
        .node()
        .write_local(Command::Batch(purges))
        .await
        .map_err(super::write_error)?;
    if let CommandResponse::Batch(answers) = &applied.response {
        for answer in answers {
            match answer {
                // Purged meanwhile by someone else: nothing left to do.
                CommandResponse::Rejected(ApplyError::JobNotFound { .. }) => {}
                CommandResponse::Rejected(e) => return Err(super::apply_error(e)),
                _ => {}
            }
        }
    }
    Ok(applied.index)
}
