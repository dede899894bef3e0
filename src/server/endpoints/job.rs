//! `Job.Register`, `Job.Deregister`, `Job.Evaluate`, `Job.Revert`, `Job.Plan`, `Job.Scale`,
//! `Job.Stable`, `Job.BatchDeregister`, `Job.PeriodicForce` and `Job.Dispatch` on the leader:
//! the job is canonicalized and validated here (whoever sent it), stamped with its submit
//! time, and written through raft together with the evaluation that schedules it.

use teamster_storage::fsm::{
    ApplyError, Command, CommandResponse, EvalUpsert, JobDeregister, JobRegister, JobScale,
    JobStability, PeriodicLaunchCommand,
};
use teamster_storage::model::periodic::dispatch_child_id;
use teamster_storage::model::{
    imply_integration_constraints, DispatchPayload, EvalTrigger, Job, JobId, JobStatus, JobType,
    ModelError, ScalingEvent, MAX_JOB_PRIORITY, MIN_JOB_PRIORITY,
};

use super::Endpoints;
use crate::rpc::service::job::{
    JobBatchDeregisterRequest, JobDeregisterRequest, JobDeregisterResponse, JobDispatchRequest,
    JobDispatchResponse, JobEvaluateRequest, JobEvaluateResponse, JobPeriodicForceRequest,
    JobPeriodicForceResponse, JobPlanRequest, JobPlanResponse, JobRegisterRequest,
    JobRegisterResponse, JobRevertRequest, JobScaleRequest, JobScaleResponse, JobStabilityRequest,
};
use crate::rpc::ServiceError;
use crate::server::evals::job_eval;

/// A job's validation errors as one `Invalid` naming the job.
pub fn invalid_job(e: ModelError) -> ServiceError {
    ServiceError::invalid("Job", e.to_string())
}

/// Nomad's checks of a job, and teamster's parse of its templates (the job's problems are
/// all listed together).
pub fn validate_job(job: &teamster_storage::model::Job) -> Result<(), ServiceError> {
    let mut errors = match job.validate() {
        Ok(()) => Vec::new(),
        Err(ModelError::Invalid { errors }) => errors,
        Err(other) => return Err(invalid_job(other)),
    };
    errors.extend(crate::jobspec::templates::template_problems(job));
    if errors.is_empty() {
        Ok(())
    } else {
        Err(invalid_job(ModelError::Invalid { errors }))
    }
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
    validate_job(&job)?;
    // Vault and Consul, which no teamster node has, keep the job pending as in Nomad.
    imply_integration_constraints(&mut job);
    ep.check_job_count(&job)?;
    if job.task_groups.iter().any(|g| g.scaling.is_some()) {
        let snapshot = ep.node().state().snapshot();
        let current = snapshot.job_by_id(job.namespace.as_str(), job.id.as_str());
        assign_scaling_ids(&mut job, current.map(|j| &**j), &mut ep.rng().fork());
    }
    refuse_server_set_fields(&job)?;
    let now = ep.now();
    job.submit_time = now;
    // A periodic or parameterized parent is never evaluated: only its children are.
    let eval = (!job.is_parent())
        .then(|| job_eval(&job, EvalTrigger::JobRegister, now, &mut ep.rng().fork()));
    let eval_id = eval.as_ref().map(|e| e.id.clone()).unwrap_or_default();
    let (index, response) = ep
        .write(Command::JobRegister(teamster_storage::fsm::JobRegister {
            job,
            eval,
            enforce_index: req.enforce_index,
            tracked_versions: ep.job_max_versions(),
        }))
        .await?;
    let job_modify_index = registered_index(response)?;
    Ok(JobRegisterResponse {
        eval_id,
        index,
        job_modify_index,
    })
}

/// The `JobModifyIndex` a registration (or a scale, which registers) was written at.
fn registered_index(response: CommandResponse) -> Result<u64, ServiceError> {
    match response {
        CommandResponse::JobRegistered {
            job_modify_index, ..
        } => Ok(job_modify_index),
        other => Err(ServiceError::internal(format!(
            "unexpected answer {other:?}"
        ))),
    }
}

/// 400 for the fields only `job dispatch` sets: a registered job is never a dispatched child.
fn refuse_server_set_fields(job: &Job) -> Result<(), ServiceError> {
    if job.dispatched || !job.payload.is_empty() || !job.dispatch_idempotency_token.is_empty() {
        return Err(ServiceError::invalid(
            "Job.Dispatched",
            "Dispatched, Payload and DispatchIdempotencyToken are set by job dispatch only",
        ));
    }
    Ok(())
}

/// Gives each group's scaling policy its ID: the one the registered version's policy of
/// that group has, else a new one, so a policy keeps its ID across versions.
fn assign_scaling_ids(job: &mut Job, current: Option<&Job>, rng: &mut dyn rand::RngCore) {
    for group in job.task_groups_mut() {
        let Some(policy) = &mut group.scaling else {
            continue;
        };
        let kept = current
            .and_then(|c| c.task_groups.iter().find(|g| g.name == group.name))
            .and_then(|g| g.scaling.as_ref())
            .map(|p| p.id.clone());
        policy.id = kept.unwrap_or_else(|| crate::util::new_uuid(rng));
    }
}

/// `Job.Plan`: the scheduler run on the leader's state with the job registered in a private
/// copy, through a planner that commits nothing; the diff from the registered version with
/// what each change forces.
pub async fn plan(ep: &Endpoints, req: JobPlanRequest) -> Result<JobPlanResponse, ServiceError> {
    let mut job = req.job;
    if job.id.is_empty() {
        return Err(ServiceError::invalid(
            "Job.ID",
            "Job ID hasn't been provided",
        ));
    }
    job.canonicalize();
    validate_job(&job)?;
    // Vault and Consul, which no teamster node has, keep the job pending as in Nomad.
    imply_integration_constraints(&mut job);
    ep.check_job_count(&job)?;
    let snapshot = ep.node().state().snapshot();
    let current = snapshot
        .job_by_id(job.namespace.as_str(), job.id.as_str())
        .cloned();
    let mut rng = ep.rng().fork();
    assign_scaling_ids(&mut job, current.as_deref(), &mut rng);
    let now = ep.now();
    job.submit_time = now;
    let eval_id = crate::util::new_uuid(&mut rng);
    let staged = job.clone();
    let run = tokio::task::spawn_blocking(move || {
        crate::scheduler::annotate::dry_run(
            &snapshot,
            &staged,
            eval_id,
            now,
            &mut rng,
            crate::scheduler::SchedulerSettings::default(),
        )
    })
    .await
    .map_err(|e| ServiceError::internal(format!("plan task failed: {e}")))?
    .map_err(|e| ServiceError::internal(format!("plan failed: {e}")))?;
    let diff = req.diff.then(|| {
        let mut diff = Job::diff_to(current.as_deref(), &job);
        crate::scheduler::annotate::annotate(&mut diff, &run.annotations, current.as_deref(), &job);
        diff
    });
    Ok(JobPlanResponse {
        job_modify_index: current.map_or(0, |j| j.job_modify_index),
        index: run.index,
        annotations: run.annotations,
        failed_tg_allocs: run.failed_tg_allocs,
        created_evals: run.created_evals,
        diff,
    })
}

/// `Job.Scale`: a task group's new count, checked against its `scaling` bounds, registered
/// as a new version with a `job-scaling` evaluation and recorded as a scaling event in one
/// raft entry (compare-and-set on the `JobModifyIndex` checked here); with no count, only
/// the event.
pub async fn scale(ep: &Endpoints, req: JobScaleRequest) -> Result<JobScaleResponse, ServiceError> {
    if req.group.is_empty() {
        return Err(ServiceError::invalid(
            "Target.Group",
            "missing task group name for scaling action",
        ));
    }
    if req.error && req.count.is_some() {
        return Err(ServiceError::invalid(
            "Count",
            "scaling action should not contain count if error is true",
        ));
    }
    if req.count.is_some_and(|c| c < 0) {
        return Err(ServiceError::invalid(
            "Count",
            "scaling action count can't be negative",
        ));
    }
    let snapshot = ep.node().state().snapshot();
    let (ns, id) = (req.namespace.as_str(), req.job_id.as_str());
    let current = snapshot
        .job_by_id(ns, id)
        .cloned()
        .ok_or_else(|| ServiceError::not_found("job", id))?;
    drop(snapshot);
    if req.job_modify_index != 0 && req.job_modify_index != current.job_modify_index {
        return Err(ServiceError::invalid(
            "JobModifyIndex",
            format!(
                "job {id:?} has job modify index {}, not {}",
                current.job_modify_index, req.job_modify_index
            ),
        ));
    }
    let Some(group) = current.task_groups.iter().find(|g| g.name == req.group) else {
        return Err(ServiceError::invalid(
            "Target.Group",
            format!(
                "task group {:?} specified for scaling does not exist in job",
                req.group
            ),
        ));
    };
    let now = ep.now();
    let event = ScalingEvent {
        time: now,
        count: req.count,
        previous_count: i64::from(group.count),
        message: req.message,
        error: req.error,
        meta: req.meta,
        eval_id: None,
        create_index: 0,
    };
    let register = match req.count {
        None => None,
        Some(count) => {
            if let Some(policy) = &group.scaling {
                if let Some(min) = policy.min.filter(|min| count < *min) {
                    return Err(ServiceError::invalid(
                        "Count",
                        format!(
                            "group count was less than scaling policy minimum: {count} < {min}"
                        ),
                    ));
                }
                if let Some(max) = policy.max.filter(|max| count > *max) {
                    return Err(ServiceError::invalid(
                        "Count",
                        format!(
                            "group count was greater than scaling policy maximum: {count} > {max}"
                        ),
                    ));
                }
            }
            if matches!(current.job_type, JobType::System | JobType::SysBatch) {
                return Err(ServiceError::invalid(
                    "Count",
                    "the task groups of system jobs run on every node and cannot be scaled",
                ));
            }
            let count = u32::try_from(count).map_err(|_| {
                ServiceError::invalid("Count", format!("count {count} is too large"))
            })?;
            let mut job = (*current).clone();
            if let Some(g) = job
                .task_groups_mut()
                .iter_mut()
                .find(|g| g.name == req.group)
            {
                g.count = count;
            }
            validate_job(&job)?;
            ep.check_job_count(&job)?;
            job.submit_time = now;
            // A periodic or parameterized parent's new count is for its next children.
            let eval = (!job.is_parent())
                .then(|| job_eval(&job, EvalTrigger::JobScaling, now, &mut ep.rng().fork()));
            Some(JobRegister {
                job,
                eval,
                enforce_index: Some(current.job_modify_index),
                tracked_versions: ep.job_max_versions(),
            })
        }
    };
    let eval_id = register
        .as_ref()
        .and_then(|r| r.eval.as_ref().map(|e| e.id.clone()));
    let (index, response) = ep
        .write(Command::JobScale(JobScale {
            namespace: req.namespace,
            job_id: req.job_id,
            group: req.group,
            register,
            event,
        }))
        .await?;
    let job_modify_index = registered_index(response)?;
    Ok(JobScaleResponse {
        eval_id,
        index,
        job_modify_index,
    })
}

/// `Job.Stable`: mark a kept version stable or not.
pub async fn stable(ep: &Endpoints, req: JobStabilityRequest) -> Result<u64, ServiceError> {
    let (index, _) = ep
        .write(Command::JobStability(JobStability {
            namespace: req.namespace,
            job_id: req.job_id,
            version: req.version,
            stable: req.stable,
        }))
        .await?;
    Ok(index)
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
        .filter(|job| !job.is_parent())
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
            tracked_versions: ep.job_max_versions(),
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
    if job.periodic.is_some() {
        return Err(ServiceError::invalid(
            "JobID",
            "can't evaluate periodic job",
        ));
    }
    if job.parameterized_job.is_some() {
        return Err(ServiceError::invalid(
            "JobID",
            "can't evaluate parameterized job",
        ));
    }
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
                    tracked_versions: ep.job_max_versions(),
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

/// `Job.PeriodicForce`: a periodic job's child launched now, whatever `prohibit_overlap`
/// says; the recorded last launch does not move, so the next scheduled launch still runs.
pub async fn periodic_force(
    ep: &Endpoints,
    req: JobPeriodicForceRequest,
) -> Result<JobPeriodicForceResponse, ServiceError> {
    let snapshot = ep.node().state().snapshot();
    let (ns, id) = (req.namespace.as_str(), req.job_id.as_str());
    let parent = snapshot
        .job_by_id(ns, id)
        .cloned()
        .ok_or_else(|| ServiceError::not_found("job", id))?;
    drop(snapshot);
    if parent.periodic.is_none() {
        return Err(ServiceError::invalid(
            "JobID",
            format!("can't force launch non-periodic job {id:?}"),
        ));
    }
    if !parent.is_periodic_active() {
        return Err(ServiceError::invalid(
            "JobID",
            format!("can't force launch periodic job {id:?}: it is stopped or not enabled"),
        ));
    }
    let now = ep.now();
    let launch_secs = now.div_euclid(1_000_000_000);
    let child = crate::server::periodic::periodic_child(&parent, launch_secs, now);
    let child_id = child.id.clone();
    let eval = job_eval(&child, EvalTrigger::PeriodicJob, now, &mut ep.rng().fork());
    let eval_id = eval.id.clone();
    let (index, _) = ep
        .write(Command::PeriodicLaunch(PeriodicLaunchCommand {
            namespace: req.namespace,
            job_id: req.job_id,
            launch: now,
            forced: true,
            child: Some(JobRegister {
                job: child,
                eval: Some(eval),
                enforce_index: None,
                tracked_versions: ep.job_max_versions(),
            }),
        }))
        .await?;
    metrics::counter!("teamster_periodic_launches_total", "result" => "forced").increment(1);
    tracing::info!(job_id = %parent.id, %child_id, "periodic job force-launched");
    Ok(JobPeriodicForceResponse {
        child_id,
        eval_id,
        index,
    })
}

/// `Job.Dispatch`: a child of a parameterized job, `<parent>/dispatch-<unix>-<8 hex>`, with
/// the payload (compressed) and the meta merged over the parent's, registered with its
/// evaluation. A dispatch whose idempotency token an existing child of the parent carries
/// answers that child and writes nothing.
pub async fn dispatch(
    ep: &Endpoints,
    req: JobDispatchRequest,
) -> Result<JobDispatchResponse, ServiceError> {
    let snapshot = ep.node().state().snapshot();
    let (ns, id) = (req.namespace.as_str(), req.job_id.as_str());
    let parent = snapshot
        .job_by_id(ns, id)
        .cloned()
        .ok_or_else(|| ServiceError::not_found("parameterized job", id))?;
    let Some(block) = parent.parameterized_job.clone() else {
        return Err(ServiceError::invalid(
            "JobID",
            format!("Specified job {id:?} is not a parameterized job"),
        ));
    };
    if parent.stop {
        return Err(ServiceError::invalid(
            "JobID",
            format!("Specified job {id:?} is stopped"),
        ));
    }
    if req.priority != 0 && !(MIN_JOB_PRIORITY..=MAX_JOB_PRIORITY).contains(&req.priority) {
        return Err(ServiceError::invalid(
            "Priority",
            format!(
                "job priority must be between [{MIN_JOB_PRIORITY}, {MAX_JOB_PRIORITY}], not {}",
                req.priority
            ),
        ));
    }
    block
        .check_dispatch(req.payload.len(), &req.meta)
        .map_err(|errors| ServiceError::invalid("Dispatch", errors.join("; ")))?;
    if !req.idempotency_token.is_empty() {
        if let Some(existing) = snapshot.dispatched_child_by_token(ns, id, &req.idempotency_token) {
            return Ok(existing_child(existing, snapshot.latest_index()));
        }
    }
    drop(snapshot);
    let payload = DispatchPayload::compress(&req.payload)
        .map_err(|e| ServiceError::invalid("Payload", e.to_string()))?;
    let now = ep.now();
    let mut rng = ep.rng().fork();
    let secs = now.div_euclid(1_000_000_000);
    let suffix = rand::RngCore::next_u32(&mut rng);
    let child_id = if req.id_prefix_template.is_empty() {
        dispatch_child_id(id, secs, suffix)
    } else {
        format!(
            "{id}/dispatch-{}-{secs}-{suffix:08x}",
            req.id_prefix_template
        )
    };
    let mut meta = parent.meta.clone();
    meta.extend(req.meta);
    let child = Job {
        parameterized_job: None,
        dispatched: true,
        dispatch_idempotency_token: req.idempotency_token,
        payload,
        meta,
        priority: if req.priority == 0 {
            parent.priority
        } else {
            req.priority
        },
        ..parent.new_child(&child_id, now)
    };
    validate_job(&child)?;
    let eval = job_eval(&child, EvalTrigger::JobRegister, now, &mut rng);
    let eval_id = eval.id.clone();
    let applied = ep
        .node()
        .write_local(Command::JobRegister(JobRegister {
            job: child,
            eval: Some(eval),
            enforce_index: None,
            tracked_versions: ep.job_max_versions(),
        }))
        .await
        .map_err(super::write_error)?;
    match &applied.response {
        CommandResponse::Rejected(ApplyError::IdempotencyTokenUsed { existing }) => {
            // A dispatch with the same token won the race: answer its child.
            let snapshot = ep.node().state().snapshot();
            let child = snapshot
                .job_by_id(ns, existing)
                .ok_or_else(|| ServiceError::not_found("job", existing.as_str()))?;
            Ok(existing_child(child, snapshot.latest_index()))
        }
        CommandResponse::Rejected(e) => Err(super::apply_error(e)),
        _ => {
            metrics::counter!("teamster_dispatches_total").increment(1);
            Ok(JobDispatchResponse {
                dispatched_job_id: JobId::new(&child_id),
                eval_id: Some(eval_id),
                eval_create_index: applied.index,
                job_create_index: applied.index,
                index: applied.index,
            })
        }
    }
}

/// The answer for a dispatch whose idempotency token an existing child carries.
fn existing_child(child: &Job, index: u64) -> JobDispatchResponse {
    JobDispatchResponse {
        dispatched_job_id: child.id.clone(),
        eval_id: None,
        eval_create_index: 0,
        job_create_index: child.create_index,
        index,
    }
}
