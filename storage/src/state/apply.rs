//! How a [`Command`] changes the tables: each command in its own write transaction,
//! committed only when it succeeds (a batch command by command), with the changes to
//! publish. The rules (deterministic, all or nothing per command) are those of
//! [`crate::fsm`].
//!
//! A lone command runs on a clone of the tables, kept only if it succeeds, and so does each
//! command of a batch the caller owns. The commands of a batch still shared with the raft
//! log ([`apply_shared`]: they are cloned as they run anyway) run one after the other on
//! the same working tables, with one clone taken at the start as the checkpoint: the
//! persistent maps copy a path the first time a batch changes it and then change that copy
//! in place, instead of copying it again for every command. When a command fails half way,
//! the working tables go back to the checkpoint and the commands that succeeded since it
//! are applied again (apply is deterministic, so they give what they gave), which is
//! exactly the state before the failed command.

use crate::fsm::{
    AllocClientUpdate, AllocUpdateDesiredTransition, ApplyError, Command, CommandResponse,
    EvalDelete, EvalUpsert, JobDeregister, JobRegister, JobScale, JobStability, NodeDeregister,
    NodeRegister, PeriodicLaunchCommand, SnapshotRestore,
};
use crate::model::{Evaluation, JobId, Namespace, SchedulingEligibility};
use crate::state::events::StateChange;
use crate::state::tables::Tables;
use crate::state::txn::WriteTxn;

/// Applies one command (a batch recursively) at `index` to `tables`, collecting the changes
/// to publish. Only committed commands change `tables` or add changes.
pub(crate) fn apply(
    tables: &mut Tables,
    index: u64,
    command: Command,
    changes: &mut Vec<StateChange>,
) -> CommandResponse {
    match command {
        // Owned, each command moves into its own transaction; copying the commands to be
        // able to replay them would cost more than the copies of the tables it saves.
        Command::Batch(commands) => CommandResponse::Batch(
            commands
                .into_iter()
                .map(|c| apply(tables, index, c, changes))
                .collect(),
        ),
        Command::SnapshotRestore(SnapshotRestore { image }) => {
            match crate::state::image::decode(&image) {
                Ok(mut restored) => {
                    restored.index = index;
                    restored.table_index = [index; crate::state::Table::COUNT];
                    *tables = restored;
                    changes.push(StateChange::Restored);
                    tracing::info!(
                        index,
                        bytes = image.len(),
                        "state replaced by a restored snapshot"
                    );
                    CommandResponse::Applied
                }
                Err(error) => {
                    tracing::warn!(index, %error, "snapshot restore rejected");
                    CommandResponse::Rejected(ApplyError::invalid(format!(
                        "snapshot restore: {error}"
                    )))
                }
            }
        }
        command => {
            let mut txn = WriteTxn::new(tables.clone(), index);
            match execute(&mut txn, command) {
                Ok(response) => {
                    let (committed, mut made) = txn.finish();
                    *tables = committed;
                    changes.append(&mut made);
                    response
                }
                Err(error) => {
                    tracing::debug!(index, %error, "command rejected");
                    CommandResponse::Rejected(error)
                }
            }
        }
    }
}

/// Applies a command shared with the raft log: a batch without copying it whole, its
/// commands each cloned as they run; a lone command cloned once.
pub(crate) fn apply_shared(
    tables: &mut Tables,
    index: u64,
    command: &Command,
    changes: &mut Vec<StateChange>,
) -> CommandResponse {
    match command {
        Command::Batch(commands) => apply_batch(tables, index, commands, changes),
        command => apply(tables, index, command.clone(), changes),
    }
}

/// Applies a batch's commands in turn on one set of working tables (see the module doc):
/// the same responses, tables and changes as applying each alone.
fn apply_batch(
    tables: &mut Tables,
    index: u64,
    commands: &[Command],
    changes: &mut Vec<StateChange>,
) -> CommandResponse {
    let mut checkpoint = tables.clone();
    // The first command applied on top of `checkpoint`.
    let mut since = 0;
    let mut responses = Vec::with_capacity(commands.len());
    for (k, command) in commands.iter().enumerate() {
        if matches!(command, Command::Batch(_) | Command::SnapshotRestore(_)) {
            // Neither leaves a partial change behind: a nested batch commits command by
            // command, a restore replaces the tables whole or not at all.
            responses.push(apply(tables, index, command.clone(), changes));
            continue;
        }
        // The working tables go into the transaction; the checkpoint's clone holds the
        // place (cheap: it shares every node).
        let working = std::mem::replace(tables, checkpoint.clone());
        let mut txn = WriteTxn::new(working, index);
        match execute(&mut txn, command.clone()) {
            Ok(response) => {
                let (committed, mut made) = txn.finish();
                *tables = committed;
                changes.append(&mut made);
                responses.push(response);
            }
            Err(error) => {
                drop(txn);
                tracing::debug!(index, %error, "command rejected");
                // `tables` is the checkpoint: apply again what committed since it. Their
                // changes were collected the first time.
                let mut again = Vec::new();
                for earlier in &commands[since..k] {
                    let replayed = apply(tables, index, earlier.clone(), &mut again);
                    debug_assert!(
                        matches!(earlier, Command::SnapshotRestore(_))
                            || !matches!(replayed, CommandResponse::Rejected(_)),
                        "a replayed command failed: {replayed:?}"
                    );
                }
                checkpoint = tables.clone();
                since = k + 1;
                responses.push(CommandResponse::Rejected(error));
            }
        }
    }
    CommandResponse::Batch(responses)
}

fn check_eval_for_job(
    eval: &Evaluation,
    namespace: &Namespace,
    job_id: &JobId,
) -> Result<(), ApplyError> {
    if eval.job_id != *job_id || eval.namespace != *namespace {
        return Err(ApplyError::invalid(format!(
            "evaluation {} is for job {:?} in {:?}, not {:?} in {:?}",
            eval.id, eval.job_id, eval.namespace, job_id, namespace
        )));
    }
    Ok(())
}

/// Registers a job with its evaluation (`JobRegister`, and the count change of a `JobScale`).
fn register_job(txn: &mut WriteTxn, register: JobRegister) -> Result<CommandResponse, ApplyError> {
    let JobRegister {
        job,
        eval,
        enforce_index,
        tracked_versions,
    } = register;
    if job.id.is_empty() || job.namespace.is_empty() {
        return Err(ApplyError::invalid("job without an ID or namespace"));
    }
    let (namespace, job_id) = (job.namespace.clone(), job.id.clone());
    if !txn.namespace_exists(&namespace) {
        return Err(ApplyError::NamespaceNotFound {
            namespace: namespace.to_string(),
        });
    }
    if let Some(expected) = enforce_index {
        let actual = txn
            .job(&namespace, &job_id)
            .map_or(0, |j| j.job_modify_index);
        if actual != expected {
            return Err(ApplyError::JobModifyIndexMismatch {
                job_id: job_id.to_string(),
                expected,
                actual,
            });
        }
    }
    if let Some(eval) = &eval {
        check_eval_for_job(eval, &namespace, &job_id)?;
    }
    if job.dispatched && !job.dispatch_idempotency_token.is_empty() {
        let used = txn
            .child_by_token(&namespace, &job.parent_id, &job.dispatch_idempotency_token)
            .filter(|existing| *existing != job_id);
        if let Some(existing) = used {
            return Err(ApplyError::IdempotencyTokenUsed {
                existing: existing.to_string(),
            });
        }
    }
    // A periodic parent's launches count from its first registration, and again from the
    // registration that changes its `periodic` block or makes it active again (a stopped
    // or disabled parent): a launch is never made up for a time before the schedule that
    // gives it was in force.
    let recorded = txn.periodic_launch(&namespace, &job_id).map(|l| l.launch);
    let restart = job.periodic.is_some()
        && match txn.job(&namespace, &job_id) {
            None => true,
            Some(prev) => {
                prev.periodic != job.periodic
                    || (job.is_periodic_active() && !prev.is_periodic_active())
            }
        };
    let launch_from = (job.periodic.is_some() && (restart || recorded.is_none()))
        .then(|| recorded.map_or(job.submit_time, |r| r.max(job.submit_time)));
    let outcome = txn.upsert_job(job, tracked_versions);
    if let Some(launch) = launch_from.filter(|l| Some(*l) != recorded) {
        txn.set_periodic_launch(&namespace, &job_id, launch);
    }
    if let Some(mut eval) = eval {
        eval.job_modify_index = outcome.job_modify_index;
        txn.upsert_eval(eval)?;
    }
    Ok(CommandResponse::JobRegistered {
        version: outcome.version,
        job_modify_index: outcome.job_modify_index,
        spec_changed: outcome.spec_changed,
    })
}

/// The auto-revert registration and the evaluation written with a deployment change.
fn deployment_followups(
    txn: &mut WriteTxn,
    revert: Option<JobRegister>,
    eval: Option<Evaluation>,
) -> Result<CommandResponse, ApplyError> {
    let response = match revert {
        Some(register) => register_job(txn, register)?,
        None => CommandResponse::Applied,
    };
    if let Some(eval) = eval {
        txn.upsert_eval(eval)?;
    }
    Ok(response)
}

/// A periodic parent's launch (see [`PeriodicLaunchCommand`]).
fn periodic_launch(
    txn: &mut WriteTxn,
    cmd: PeriodicLaunchCommand,
) -> Result<CommandResponse, ApplyError> {
    let PeriodicLaunchCommand {
        namespace,
        job_id,
        launch,
        forced,
        child,
    } = cmd;
    let Some(parent) = txn.job(&namespace, &job_id) else {
        return Err(ApplyError::JobNotFound {
            namespace: namespace.to_string(),
            job_id: job_id.to_string(),
        });
    };
    if parent.periodic.is_none() {
        return Err(ApplyError::invalid(format!(
            "job {job_id:?} is not periodic"
        )));
    }
    if !forced {
        let recorded = txn
            .periodic_launch(&namespace, &job_id)
            .map_or(i64::MIN, |l| l.launch);
        if launch <= recorded {
            return Err(ApplyError::PeriodicLaunchRecorded {
                job_id: job_id.to_string(),
                launch,
                recorded,
            });
        }
    }
    let response = match child {
        Some(register) => {
            let child = &register.job;
            if child.parent_id != job_id || child.namespace != namespace {
                return Err(ApplyError::invalid("periodic child of another parent"));
            }
            if txn.job(&child.namespace, &child.id).is_some() {
                return Err(ApplyError::invalid(format!(
                    "periodic child {:?} already exists",
                    child.id
                )));
            }
            register_job(txn, register)?
        }
        None => CommandResponse::Applied,
    };
    if !forced {
        txn.set_periodic_launch(&namespace, &job_id, launch);
    }
    Ok(response)
}

fn execute(txn: &mut WriteTxn, command: Command) -> Result<CommandResponse, ApplyError> {
    match command {
        Command::Batch(_) => Err(ApplyError::invalid("nested batch")),
        Command::SnapshotRestore(_) => Err(ApplyError::invalid(
            "a snapshot restore is applied outside a transaction",
        )),
        Command::ClusterMeta(meta) => {
            txn.set_cluster_meta(meta)?;
            Ok(CommandResponse::Applied)
        }
        Command::AutopilotConfig(update) => {
            txn.set_autopilot_config(update.config, update.cas_index)?;
            Ok(CommandResponse::Applied)
        }
        Command::SchedulerConfig(update) => {
            txn.set_scheduler_config(update.config, update.cas_index)?;
            Ok(CommandResponse::Applied)
        }
        Command::JobRegister(register) => register_job(txn, register),
        Command::JobScale(JobScale {
            namespace,
            job_id,
            group,
            register,
            mut event,
        }) => {
            let response = match register {
                Some(register) => {
                    if register.job.namespace != namespace || register.job.id != job_id {
                        return Err(ApplyError::invalid("scaled job does not match the event"));
                    }
                    event.eval_id = register.eval.as_ref().map(|e| e.id.to_string());
                    register_job(txn, register)?
                }
                None => {
                    let Some(job) = txn.job(&namespace, &job_id) else {
                        return Err(ApplyError::JobNotFound {
                            namespace: namespace.to_string(),
                            job_id: job_id.to_string(),
                        });
                    };
                    CommandResponse::JobRegistered {
                        version: job.version,
                        job_modify_index: job.job_modify_index,
                        spec_changed: false,
                    }
                }
            };
            txn.record_scaling_event(&namespace, &job_id, group, event);
            Ok(response)
        }
        Command::PeriodicLaunch(launch) => periodic_launch(txn, launch),
        Command::JobStability(JobStability {
            namespace,
            job_id,
            version,
            stable,
        }) => {
            txn.set_job_stability(&namespace, &job_id, version, stable)?;
            Ok(CommandResponse::Applied)
        }
        Command::JobDeregister(JobDeregister {
            namespace,
            job_id,
            purge,
            eval,
            submit_time,
            tracked_versions,
        }) => {
            let Some(job) = txn.job(&namespace, &job_id) else {
                return Err(ApplyError::JobNotFound {
                    namespace: namespace.to_string(),
                    job_id: job_id.to_string(),
                });
            };
            if let Some(eval) = &eval {
                check_eval_for_job(eval, &namespace, &job_id)?;
            }
            let response = if purge {
                txn.delete_job(&namespace, &job_id)?;
                CommandResponse::JobRegistered {
                    version: job.version,
                    job_modify_index: txn.index(),
                    spec_changed: true,
                }
            } else {
                let mut stopped = (*job).clone();
                stopped.stop = true;
                if submit_time != 0 {
                    stopped.submit_time = submit_time;
                }
                let outcome = txn.upsert_job(stopped, tracked_versions);
                CommandResponse::JobRegistered {
                    version: outcome.version,
                    job_modify_index: outcome.job_modify_index,
                    spec_changed: outcome.spec_changed,
                }
            };
            if let Some(mut eval) = eval {
                eval.job_modify_index = txn.index();
                txn.upsert_eval(eval)?;
            }
            Ok(response)
        }
        Command::NodeRegister(NodeRegister { node, evals }) => {
            txn.upsert_node(node)?;
            for eval in evals {
                txn.upsert_eval(eval)?;
            }
            Ok(CommandResponse::Applied)
        }
        Command::NodeUpdateStatus(update) => {
            txn.update_node_status(&update.node_id, update.status, update.updated_at)?;
            for eval in update.evals {
                txn.upsert_eval(eval)?;
            }
            Ok(CommandResponse::Applied)
        }
        Command::NodeUpdateEligibility(update) => {
            txn.update_node_eligibility(&update.node_id, update.eligibility, update.updated_at)?;
            for eval in update.evals {
                txn.upsert_eval(eval)?;
            }
            Ok(CommandResponse::Applied)
        }
        Command::NodeDeregister(NodeDeregister { node_ids }) => {
            txn.delete_nodes(&node_ids)?;
            Ok(CommandResponse::Applied)
        }
        Command::EvalUpsert(EvalUpsert { evals }) => {
            for eval in evals {
                txn.upsert_eval(eval)?;
            }
            Ok(CommandResponse::Applied)
        }
        Command::EvalDelete(EvalDelete { evals, allocs }) => {
            txn.delete_evals_and_allocs(&evals, &allocs);
            Ok(CommandResponse::Applied)
        }
        Command::ApplyPlanResults(results) => {
            for node_id in &results.ineligible_nodes {
                txn.update_node_eligibility(
                    node_id,
                    SchedulingEligibility::Ineligible,
                    results.updated_at,
                )?;
            }
            if !results.eval_id.is_empty() {
                txn.touch_eval(&results.eval_id)?;
            }
            // The deployment first, so the placements below count in it.
            if let Some(deployment) = results.deployment {
                txn.upsert_deployment(deployment)?;
            }
            for update in &results.deployment_updates {
                // A deployment another command ended meanwhile stays as it ended.
                match txn.update_deployment_status(update, results.updated_at * 1_000_000_000) {
                    Ok(()) | Err(ApplyError::DeploymentTerminal { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            let mut skipped = Vec::new();
            for alloc in results.allocs_updated {
                let id = alloc.id.clone();
                if !txn.upsert_alloc(alloc)? {
                    skipped.push(id);
                }
            }
            for stop in results
                .allocs_stopped
                .into_iter()
                .chain(results.allocs_preempted)
            {
                txn.stop_alloc(stop)?;
            }
            for eval in results.evals {
                txn.upsert_eval(eval)?;
            }
            Ok(CommandResponse::PlanApplied { skipped })
        }
        Command::AllocClientUpdate(AllocClientUpdate { allocs, evals }) => {
            let mut unknown = Vec::new();
            for report in allocs {
                let id = report.id.clone();
                let applied = txn.update_alloc_from_client(report);
                if !applied {
                    unknown.push(id);
                }
            }
            for eval in evals {
                txn.upsert_eval(eval)?;
            }
            Ok(CommandResponse::AllocsUpdated { unknown })
        }
        Command::AllocUpdateDesiredTransition(AllocUpdateDesiredTransition { allocs, evals }) => {
            for (id, transition) in &allocs {
                txn.update_alloc_desired_transition(id, transition)?;
            }
            for eval in evals {
                txn.upsert_eval(eval)?;
            }
            Ok(CommandResponse::Applied)
        }
        Command::ReconcileJobSummaries => {
            txn.reconcile_job_summaries();
            Ok(CommandResponse::Applied)
        }
        Command::DeploymentStatusUpdate(command) => {
            txn.update_deployment_status(&command.update, command.modify_time)?;
            deployment_followups(txn, command.revert, command.eval)
        }
        Command::DeploymentPromote(command) => {
            txn.promote_deployment(
                &command.deployment_id,
                command.all,
                &command.groups,
                command.modify_time,
            )?;
            deployment_followups(txn, None, command.eval)
        }
        Command::DeploymentAllocHealth(command) => {
            txn.set_deployment_alloc_health(
                &command.deployment_id,
                &command.healthy,
                &command.unhealthy,
                command.timestamp,
            )?;
            if let Some(update) = &command.update {
                txn.update_deployment_status(update, command.timestamp)?;
            }
            deployment_followups(txn, command.revert, command.eval)
        }
        Command::NamespaceUpsert(command) => {
            for ns in command.namespaces {
                txn.upsert_namespace(ns)?;
            }
            Ok(CommandResponse::Applied)
        }
        Command::AclPolicyUpsert(command) => {
            for policy in command.policies {
                txn.upsert_acl_policy(policy)?;
            }
            Ok(CommandResponse::Applied)
        }
        Command::AclPolicyDelete(command) => {
            for name in &command.names {
                txn.delete_acl_policy(name)?;
            }
            Ok(CommandResponse::Applied)
        }
        Command::AclTokenUpsert(command) => {
            for token in command.tokens {
                txn.upsert_acl_token(token)?;
            }
            Ok(CommandResponse::Applied)
        }
        Command::AclTokenDelete(command) => {
            for id in &command.accessor_ids {
                txn.delete_acl_token(id)?;
            }
            Ok(CommandResponse::Applied)
        }
        Command::AclBootstrap(command) => {
            txn.acl_bootstrap(command.token, command.reset_index)?;
            Ok(CommandResponse::Applied)
        }
        Command::RootKeyUpsert(command) => {
            txn.upsert_root_key(command.key, command.activate)?;
            Ok(CommandResponse::Applied)
        }
        Command::RootKeyDelete(command) => {
            txn.delete_root_key(&command.key_id)?;
            Ok(CommandResponse::Applied)
        }
        Command::VariableUpsert(command) => {
            txn.upsert_variable(
                command.var,
                command.cas,
                command.now,
                command.lock_id.as_deref(),
                command.acquire,
                command.keep_items,
            )?;
            Ok(CommandResponse::Applied)
        }
        Command::VariableLockRelease(command) => {
            txn.release_variable_lock(&command.namespace, &command.path, &command.lock_id)?;
            Ok(CommandResponse::Applied)
        }
        Command::OneTimeTokenUpsert(command) => {
            txn.upsert_one_time_token(command.token, command.now)?;
            Ok(CommandResponse::Applied)
        }
        Command::OneTimeTokenExchange(command) => {
            txn.exchange_one_time_token(&command.one_time_secret_id, command.now)?;
            Ok(CommandResponse::Applied)
        }
        Command::VariableDelete(command) => {
            txn.delete_variable(&command.namespace, &command.path, command.cas)?;
            Ok(CommandResponse::Applied)
        }
        Command::NamespaceDelete(command) => {
            for name in &command.names {
                txn.delete_namespace(name)?;
            }
            Ok(CommandResponse::Applied)
        }
        Command::ServiceRegistrationUpsert(command) => {
            txn.upsert_service_registrations(command.services);
            Ok(CommandResponse::Applied)
        }
        Command::ServiceRegistrationDelete(command) => {
            txn.delete_service_registrations(&command.namespace, &command.ids, command.must_exist)?;
            Ok(CommandResponse::Applied)
        }
        Command::NodeDrainComplete(command) => {
            txn.complete_node_drain(&command.node_id, command.updated_at)?;
            Ok(CommandResponse::Applied)
        }
        Command::NodeUpdateDrain(update) => {
            txn.update_node_drain(
                &update.node_id,
                update.drain_strategy,
                update.mark_eligible,
                update.updated_at,
                update.meta,
            )?;
            for eval in update.evals {
                txn.upsert_eval(eval)?;
            }
            Ok(CommandResponse::Applied)
        }
    }
}
