//! The operations on a deployment, as pure builders of raft commands (Nomad's
//! `deploymentWatcher.{FailDeployment, PromoteDeployment, PauseDeployment, SetAllocHealth}`).
//!
//! Each takes the state as a [`Snapshot`], the deployment, the time (Unix nanoseconds) and
//! an RNG for the evaluation's ID, and answers a [`DeploymentWrite`]: the [`Command`] to
//! commit, the evaluation it creates and the job version an auto-revert registers again.
//! Refusals are [`DeploymentOpError`]s with Nomad's messages; nothing is written for them.
//!
//! The evaluation (`TriggeredBy` `deployment-watcher`, the deployment's `EvalPriority` or
//! else the job's priority) makes the scheduler act on the change: roll on after a resume
//! or a promotion, stop placing for a failed deployment, place the reverted version.
//!
//! Auto-revert: when a deployment fails and one of its groups has `auto_revert`, the newest
//! **stable** version of the job older than the deployment's is registered again as a new
//! version (Nomad's `Job.Revert`: the current job's identity and indexes with the stable
//! version's spec), in the same raft entry as the failure — unless its spec is the current
//! one, which would only fail again.

use rand::RngCore;
use teamster_storage::fsm::{
    Command, DeploymentAllocHealth, DeploymentPromote, DeploymentStatusUpdateCommand, JobRegister,
};
use teamster_storage::model::deployment::{
    desc_no_rollback_target, desc_rollback, desc_rollback_noop, DESC_FAILED_ALLOCATIONS,
    DESC_PAUSED,
};
use teamster_storage::model::{
    AllocId, Deployment, DeploymentStatus, DeploymentStatusUpdate, EvalId, EvalStatus, EvalTrigger,
    Evaluation, Job, JobType, DEFAULT_JOB_PRIORITY,
};
use teamster_storage::state::Snapshot;

/// A deployment change ready to commit.
#[derive(Debug, Clone, PartialEq)]
pub struct DeploymentWrite {
    /// The raft command.
    pub command: Command,
    /// The evaluation it creates (none for a pause).
    pub eval_id: Option<EvalId>,
    /// The stable job version an auto-revert registers again.
    pub reverted_job_version: Option<u64>,
}

/// Why an operation on a deployment is refused (Nomad's messages where Nomad has them).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeploymentOpError {
    /// The deployment is over: Nomad's words for the operation refused ("can't pause
    /// terminal deployment"), which its clients match.
    #[error("{0}")]
    Terminal(&'static str),
    /// Promotion of a deployment without canaries.
    #[error("no canaries to promote")]
    NoCanaries,
    /// Promotion naming no group, without `All`.
    #[error("no task groups to promote: set All or name the Groups")]
    NoGroups,
    /// Promotion of a group the deployment does not have.
    #[error("Deployment {deployment_id:?} has no task group {group:?}")]
    UnknownGroup {
        /// The deployment.
        deployment_id: String,
        /// The group named.
        group: String,
    },
    /// Promotion of a group that places no canaries.
    #[error("Task group {group:?} has no canaries to promote")]
    GroupWithoutCanaries {
        /// The group.
        group: String,
    },
    /// Promotion of a group before its canaries are healthy.
    #[error("Task group {group:?} has {healthy}/{desired} healthy allocations")]
    UnhealthyCanaries {
        /// The group.
        group: String,
        /// Its healthy canaries.
        healthy: u32,
        /// The canaries it wants.
        desired: u32,
    },
    /// An allocation-health request naming no allocation.
    #[error("must specify at least one healthy/unhealthy allocation ID")]
    NoAllocations,
    /// An allocation that does not exist.
    #[error("unknown alloc {alloc_id:?}")]
    UnknownAlloc {
        /// The allocation.
        alloc_id: String,
    },
    /// An allocation of another deployment.
    #[error("alloc {alloc_id:?} is not part of deployment {deployment_id:?}")]
    NotInDeployment {
        /// The allocation.
        alloc_id: String,
        /// The deployment.
        deployment_id: String,
    },
    /// An allocation named both healthy and unhealthy.
    #[error("alloc {alloc_id:?} is named both healthy and unhealthy")]
    HealthyAndUnhealthy {
        /// The allocation.
        alloc_id: String,
    },
}

/// Fails an active deployment with `description` (Nomad's `FailDeployment`; the watcher
/// passes its own reason, an operator
/// [`DESC_FAILED_BY_USER`](teamster_storage::model::deployment::DESC_FAILED_BY_USER)). When a group auto-reverts,
/// the newest stable older version is registered again in the same command (see the module
/// documentation); the description says what was done. `job_max_versions` is the leader's
/// `server.job_max_versions`, carried by the revert's registration.
pub fn fail(
    snapshot: &Snapshot,
    deployment: &Deployment,
    description: &str,
    now: i64,
    rng: &mut dyn RngCore,
    job_max_versions: u32,
) -> Result<DeploymentWrite, DeploymentOpError> {
    ensure_active(deployment, TERMINAL_NO_FAIL)?;
    let failure = failure(
        snapshot,
        deployment,
        description,
        deployment.has_auto_revert(),
        now,
        job_max_versions,
    );
    let eval = evaluation(snapshot, deployment, now, rng);
    let eval_id = Some(eval.id.clone());
    let reverted_job_version = failure.reverted;
    let (revert, eval) = failure.attach(eval);
    Ok(DeploymentWrite {
        command: Command::DeploymentStatusUpdate(DeploymentStatusUpdateCommand {
            update: DeploymentStatusUpdate {
                deployment_id: deployment.id.clone(),
                status: DeploymentStatus::Failed,
                status_description: failure.description,
            },
            revert,
            eval,
            modify_time: now,
        }),
        eval_id,
        reverted_job_version,
    })
}

/// Promotes the canaries of `groups`, or of every group with canaries when `all` (Nomad's
/// `PromoteDeployment`): each group must have all its desired canaries placed, running and
/// healthy. The evaluation rolls the rest of the groups out.
pub fn promote(
    snapshot: &Snapshot,
    deployment: &Deployment,
    all: bool,
    groups: &[String],
    now: i64,
    rng: &mut dyn RngCore,
) -> Result<DeploymentWrite, DeploymentOpError> {
    ensure_active(deployment, TERMINAL_NO_PROMOTE)?;
    let chosen: Vec<&String> = if all {
        let with_canaries: Vec<&String> = deployment
            .task_groups
            .iter()
            .filter(|(_, g)| g.desired_canaries > 0)
            .map(|(name, _)| name)
            .collect();
        if with_canaries.is_empty() {
            return Err(DeploymentOpError::NoCanaries);
        }
        with_canaries
    } else {
        if groups.is_empty() {
            return Err(DeploymentOpError::NoGroups);
        }
        if !deployment
            .task_groups
            .values()
            .any(|g| g.desired_canaries > 0)
        {
            return Err(DeploymentOpError::NoCanaries);
        }
        groups.iter().collect()
    };
    for name in chosen {
        let Some(group) = deployment.task_groups.get(name) else {
            return Err(DeploymentOpError::UnknownGroup {
                deployment_id: deployment.id.to_string(),
                group: name.clone(),
            });
        };
        if group.desired_canaries == 0 {
            return Err(DeploymentOpError::GroupWithoutCanaries {
                group: name.clone(),
            });
        }
        let healthy = group
            .placed_canaries
            .iter()
            .filter_map(|id| snapshot.alloc_by_id(id.as_str()))
            .filter(|a| a.is_healthy() && !a.terminal_status())
            .count() as u32;
        if healthy < group.desired_canaries {
            return Err(DeploymentOpError::UnhealthyCanaries {
                group: name.clone(),
                healthy,
                desired: group.desired_canaries,
            });
        }
    }
    let eval = evaluation(snapshot, deployment, now, rng);
    Ok(DeploymentWrite {
        eval_id: Some(eval.id.clone()),
        command: Command::DeploymentPromote(DeploymentPromote {
            deployment_id: deployment.id.clone(),
            all,
            groups: if all { Vec::new() } else { groups.to_vec() },
            eval: Some(eval),
            modify_time: now,
        }),
        reverted_job_version: None,
    })
}

/// Pauses an active deployment (`pause`), or resumes it (Nomad's `PauseDeployment`): paused
/// is "Deployment is paused" and creates no evaluation; running takes the description of
/// its promotion state and creates the evaluation that rolls on (the state restarts the
/// progress deadlines).
pub fn pause(
    snapshot: &Snapshot,
    deployment: &Deployment,
    pause: bool,
    now: i64,
    rng: &mut dyn RngCore,
) -> Result<DeploymentWrite, DeploymentOpError> {
    ensure_active(
        deployment,
        if pause {
            TERMINAL_NO_PAUSE
        } else {
            TERMINAL_NO_RESUME
        },
    )?;
    let (status, description, eval) = if pause {
        (DeploymentStatus::Paused, DESC_PAUSED.to_owned(), None)
    } else {
        (
            DeploymentStatus::Running,
            deployment.running_description().to_owned(),
            Some(evaluation(snapshot, deployment, now, rng)),
        )
    };
    Ok(DeploymentWrite {
        eval_id: eval.as_ref().map(|e| e.id.clone()),
        command: Command::DeploymentStatusUpdate(DeploymentStatusUpdateCommand {
            update: DeploymentStatusUpdate {
                deployment_id: deployment.id.clone(),
                status,
                status_description: description,
            },
            revert: None,
            eval,
            modify_time: now,
        }),
        reverted_job_version: None,
    })
}

/// Marks allocations of the deployment healthy or unhealthy (Nomad's `SetAllocHealth`, for
/// `health_check = "manual"` and operators): each must be an allocation of this
/// deployment. An unhealthy one fails the deployment ("Failed due to unhealthy
/// allocations"), auto-reverting as [`fail`] does when its group has `auto_revert`.
pub fn set_alloc_health(
    snapshot: &Snapshot,
    deployment: &Deployment,
    healthy: &[AllocId],
    unhealthy: &[AllocId],
    now: i64,
    rng: &mut dyn RngCore,
    job_max_versions: u32,
) -> Result<DeploymentWrite, DeploymentOpError> {
    ensure_active(deployment, TERMINAL_NO_SET_HEALTH)?;
    if healthy.is_empty() && unhealthy.is_empty() {
        return Err(DeploymentOpError::NoAllocations);
    }
    if let Some(both) = healthy.iter().find(|id| unhealthy.contains(id)) {
        return Err(DeploymentOpError::HealthyAndUnhealthy {
            alloc_id: both.to_string(),
        });
    }
    let mut reverting = false;
    for (id, is_unhealthy) in healthy
        .iter()
        .map(|id| (id, false))
        .chain(unhealthy.iter().map(|id| (id, true)))
    {
        let alloc =
            snapshot
                .alloc_by_id(id.as_str())
                .ok_or_else(|| DeploymentOpError::UnknownAlloc {
                    alloc_id: id.to_string(),
                })?;
        if alloc.deployment_id != deployment.id {
            return Err(DeploymentOpError::NotInDeployment {
                alloc_id: id.to_string(),
                deployment_id: deployment.id.to_string(),
            });
        }
        reverting |= is_unhealthy
            && deployment
                .task_groups
                .get(alloc.task_group.as_str())
                .is_some_and(|g| g.auto_revert);
    }
    let eval = evaluation(snapshot, deployment, now, rng);
    let eval_id = Some(eval.id.clone());
    let (update, revert, eval, reverted_job_version) = if unhealthy.is_empty() {
        (None, None, Some(eval), None)
    } else {
        let failure = failure(
            snapshot,
            deployment,
            DESC_FAILED_ALLOCATIONS,
            reverting,
            now,
            job_max_versions,
        );
        let reverted = failure.reverted;
        let update = DeploymentStatusUpdate {
            deployment_id: deployment.id.clone(),
            status: DeploymentStatus::Failed,
            status_description: failure.description.clone(),
        };
        let (revert, eval) = failure.attach(eval);
        (Some(update), revert, eval, reverted)
    };
    Ok(DeploymentWrite {
        command: Command::DeploymentAllocHealth(DeploymentAllocHealth {
            deployment_id: deployment.id.clone(),
            healthy: healthy.to_vec(),
            unhealthy: unhealthy.to_vec(),
            update,
            revert,
            eval,
            timestamp: now,
        }),
        eval_id,
        reverted_job_version,
    })
}

/// Nomad's refusals of an operation on a finished deployment.
const TERMINAL_NO_FAIL: &str = "can't fail terminal deployment";
const TERMINAL_NO_PAUSE: &str = "can't pause terminal deployment";
const TERMINAL_NO_RESUME: &str = "can't resume terminal deployment";
const TERMINAL_NO_PROMOTE: &str = "can't promote terminal deployment";
const TERMINAL_NO_SET_HEALTH: &str = "can't set health of allocations for a terminal deployment";
/// Refused by `Deployment.Unblock` (the only refusal of a single-region cluster's unblock).
pub const TERMINAL_NO_UNBLOCK: &str = "can't unblock terminal deployment";

fn ensure_active(deployment: &Deployment, refusal: &'static str) -> Result<(), DeploymentOpError> {
    if deployment.status.is_terminal() {
        return Err(DeploymentOpError::Terminal(refusal));
    }
    Ok(())
}

/// The evaluation a deployment change creates (Nomad's `deploymentWatcher.getEval`).
fn evaluation(
    snapshot: &Snapshot,
    deployment: &Deployment,
    now: i64,
    rng: &mut dyn RngCore,
) -> Evaluation {
    let job = snapshot.job_by_id(deployment.namespace.as_str(), deployment.job_id.as_str());
    let priority = if deployment.eval_priority > 0 {
        deployment.eval_priority
    } else {
        job.map_or(DEFAULT_JOB_PRIORITY, |j| j.priority)
    };
    Evaluation {
        id: EvalId::new(crate::util::new_uuid(rng)),
        namespace: deployment.namespace.clone(),
        priority,
        // Deployments are made for service jobs only.
        eval_type: job.map_or(JobType::Service, |j| j.job_type),
        triggered_by: EvalTrigger::DeploymentWatcher,
        job_id: deployment.job_id.clone(),
        job_modify_index: job.map_or(0, |j| j.job_modify_index),
        deployment_id: deployment.id.to_string(),
        status: EvalStatus::Pending,
        create_time: now,
        modify_time: now,
        ..Evaluation::default()
    }
}

/// The description of a failure and the registration its auto-revert makes.
struct Failure {
    description: String,
    revert: Option<JobRegister>,
    reverted: Option<u64>,
}

impl Failure {
    /// The evaluation goes with the revert's registration when there is one (so it is
    /// stamped with the reverted version's `JobModifyIndex`), else with the command.
    fn attach(&self, eval: Evaluation) -> (Option<JobRegister>, Option<Evaluation>) {
        match &self.revert {
            Some(register) => (
                Some(JobRegister {
                    eval: Some(eval),
                    ..register.clone()
                }),
                None,
            ),
            None => (None, Some(eval)),
        }
    }
}

/// What failing `deployment` with `description` does about its job version: with
/// `auto_revert`, register the newest stable version older than the deployment's again
/// when its spec differs from the current job's.
fn failure(
    snapshot: &Snapshot,
    deployment: &Deployment,
    description: &str,
    auto_revert: bool,
    now: i64,
    job_max_versions: u32,
) -> Failure {
    let plain = |description: String| Failure {
        description,
        revert: None,
        reverted: None,
    };
    if !auto_revert {
        return plain(description.to_owned());
    }
    let (ns, id) = (deployment.namespace.as_str(), deployment.job_id.as_str());
    let Some(current) = snapshot.job_by_id(ns, id) else {
        return plain(desc_no_rollback_target(description));
    };
    let stable = snapshot
        .job_versions(ns, id)
        .into_iter()
        .find(|j| j.stable && j.version < deployment.job_version);
    match stable {
        None => plain(desc_no_rollback_target(description)),
        Some(stable) if !current.spec_changed(&stable) => {
            plain(desc_rollback_noop(description, stable.version))
        }
        Some(stable) => Failure {
            description: desc_rollback(description, stable.version),
            revert: Some(JobRegister {
                job: reverted_job(current, &stable, now),
                eval: None,
                // A registration racing the failure wins: the revert never overwrites it.
                enforce_index: Some(current.job_modify_index),
                tracked_versions: job_max_versions,
            }),
            reverted: Some(stable.version),
        },
    }
}

/// The stable version's spec as the job's next version: the current job's identity,
/// indexes and status (the state store numbers the version).
fn reverted_job(current: &Job, stable: &Job, now: i64) -> Job {
    Job {
        namespace: current.namespace.clone(),
        id: current.id.clone(),
        version: current.version,
        create_index: current.create_index,
        modify_index: current.modify_index,
        job_modify_index: current.job_modify_index,
        status: current.status,
        status_description: current.status_description.clone(),
        stable: false,
        submit_time: now,
        ..stable.clone()
    }
}
