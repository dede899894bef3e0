//! `Variables.Apply` on the leader: a variable's items encrypted with the active root key's
//! data key, then written (or the variable deleted) through raft with Nomad's check-and-set.
//! The replicated state and the raft log only ever hold the ciphertext.
//!
//! `Template.Read` on any server: what an allocation's tasks' templates read (variables, decrypted here,
//! and services), as its workload identity may read them; a blocking query.

use teamster_storage::fsm::{
    ApplyError, Command, VariableDelete, VariableLockRelease, VariableUpsert,
};
use teamster_storage::model::{
    validate_variable_items, validate_variable_path, VariableEncrypted, VariableMetadata,
};

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use teamster_storage::state::{Snapshot, Table};

use super::keyring::keyring_error;
use super::Endpoints;
use crate::acl::{Need, VarCap};
use crate::rpc::service::variables::{
    TemplateData, TemplateDep, TemplateReadRequest, TemplateReadResponse, TemplateReadSet,
    TemplateVar, VariableOp, VariablesApplyRequest, VariablesApplyResponse,
    VariablesRenewLockRequest, VariablesRenewLockResponse,
};
use crate::rpc::service::MAX_TEMPLATE_WAIT;
use crate::rpc::ServiceError;

/// `Variables.Apply`.
pub async fn apply(
    ep: &Endpoints,
    req: VariablesApplyRequest,
) -> Result<VariablesApplyResponse, ServiceError> {
    if req.namespace == "*" || req.namespace.is_empty() {
        return Err(ServiceError::invalid(
            "Namespace",
            "a variable's namespace must be named (not \"*\")",
        ));
    }
    if ep
        .node()
        .state()
        .snapshot()
        .namespace(&req.namespace)
        .is_none()
    {
        return Err(ServiceError::invalid(
            "Namespace",
            format!("nonexistent namespace {:?}", req.namespace),
        ));
    }
    validate_variable_path(&req.path).map_err(|e| ServiceError::invalid("Path", e))?;
    let now = ep.now();
    let lock_id = req.lock_id.clone();
    let place = (req.namespace.clone(), req.path.clone());
    let mut acquired = None;
    let released = matches!(req.op, VariableOp::LockRelease);
    let cmd = match req.op {
        VariableOp::Set(items) => {
            validate_variable_items(&items).map_err(|e| ServiceError::invalid("Items", e))?;
            let data = encrypt(ep, &req.namespace, &req.path, &items).await?;
            Command::VariableUpsert(VariableUpsert {
                var: new_var(req.namespace, req.path, data),
                cas: req.cas,
                now,
                lock_id: req.lock_id,
                acquire: None,
                keep_items: false,
            })
        }
        VariableOp::LockAcquire { items, mut lock } => {
            // No items: the variable keeps its own (a new one has none).
            let keep_items = items.is_none();
            let items = items.unwrap_or_default();
            lock.canonicalize();
            lock.validate()
                .map_err(|e| ServiceError::invalid("Lock", e))?;
            if lock.id.is_empty() {
                return Err(ServiceError::invalid("Lock", "missing lock ID"));
            }
            // A lock needs no items (Nomad's `ValidateForLock`), only the size limit.
            if !items.is_empty() {
                validate_variable_items(&items).map_err(|e| ServiceError::invalid("Items", e))?;
            }
            let data = encrypt(ep, &req.namespace, &req.path, &items).await?;
            acquired = Some(lock.id.clone());
            Command::VariableUpsert(VariableUpsert {
                var: new_var(req.namespace, req.path, data),
                cas: None,
                now,
                lock_id: Some(lock.id.clone()),
                acquire: Some(lock),
                keep_items,
            })
        }
        VariableOp::LockRelease => Command::VariableLockRelease(VariableLockRelease {
            namespace: req.namespace,
            path: req.path,
            lock_id: req
                .lock_id
                .filter(|id| !id.is_empty())
                .ok_or_else(|| ServiceError::invalid("Lock", "missing lock information"))?,
        }),
        VariableOp::Delete => Command::VariableDelete(VariableDelete {
            namespace: req.namespace,
            path: req.path,
            cas: req.cas,
        }),
    };
    let applied = ep
        .node()
        .write_local(cmd)
        .await
        .map_err(super::write_error)?;
    match super::first_rejection(&applied.response) {
        // A conflict is an answer (Nomad's 409 with the current variable), not an error.
        Some(ApplyError::VariableConflict { modify_index, .. }) => {
            Ok(VariablesApplyResponse::Conflict(*modify_index))
        }
        Some(ApplyError::VariableLockRefused { reason, missing }) => {
            Ok(VariablesApplyResponse::LockRefused {
                reason: reason.clone(),
                missing: *missing,
            })
        }
        Some(e) => Err(super::apply_error(e)),
        None => {
            // The leader keeps the leases of the locks it gave.
            if let Some(id) = acquired {
                ep.lock_leases()
                    .acquired((&place.0, &place.1), &id, tokio::time::Instant::now());
            }
            if released {
                if let Some(id) = lock_id {
                    ep.lock_leases().released((&place.0, &place.1), &id);
                }
            }
            Ok(VariablesApplyResponse::Applied(applied.index))
        }
    }
}

/// `items` encrypted for `namespace`/`path` with the active root key.
async fn encrypt(
    ep: &Endpoints,
    namespace: &str,
    path: &str,
    items: &BTreeMap<String, String>,
) -> Result<teamster_storage::model::VariableData, ServiceError> {
    let snap = ep.node().state().snapshot();
    ep.keyring()
        .encrypt_items(&snap, namespace, path, items)
        .await
        .map_err(keyring_error)
}

fn new_var(
    namespace: String,
    path: String,
    data: teamster_storage::model::VariableData,
) -> VariableEncrypted {
    VariableEncrypted {
        meta: VariableMetadata {
            namespace,
            path,
            ..VariableMetadata::default()
        },
        data,
    }
}

/// `Variables.RenewLock` on the leader: the lock's lease starts again (no raft write).
pub fn renew_lock(
    ep: &Endpoints,
    req: VariablesRenewLockRequest,
) -> Result<VariablesRenewLockResponse, ServiceError> {
    let refused = |reason: &str, missing: bool| VariablesRenewLockResponse::Refused {
        reason: reason.into(),
        missing,
    };
    // Leases live on the leader that holds a quorum: a deposed or cut-off one must not
    // keep a lock alive that the cluster's leader will release.
    if !ep.established() || ep.node().lease_lost() {
        return Err(ServiceError::NoLeader);
    }
    let snap = ep.node().state().snapshot();
    let Some(var) = snap.variable(&req.namespace, &req.path) else {
        return Ok(refused("variable doesn't exist", true));
    };
    let Some(lock) = &var.meta.lock else {
        return Ok(refused("variable doesn't hold a lock", false));
    };
    if lock.id != req.lock_id {
        return Ok(refused("attempting to modify locked variable", false));
    }
    let at = (var.meta.namespace.as_str(), var.meta.path.as_str());
    Ok(
        match ep
            .lock_leases()
            .renew(at, lock, tokio::time::Instant::now())
        {
            Ok(()) => VariablesRenewLockResponse::Renewed(var.meta.clone()),
            Err(reason) => refused(reason, false),
        },
    )
}

/// `Template.Read`: what the templates of an allocation's tasks read, each set as its
/// credential (the task's workload identity) may read it: a variable it may not read, or
/// services of a namespace it may not look up, answer [`TemplateData::Denied`]; variables it
/// may not list are left out of a listing; a credential that is no token is denied
/// everything. Blocks until the variables or services changed after `min_index`.
pub async fn template_read(
    ep: &Endpoints,
    req: TemplateReadRequest,
) -> Result<TemplateReadResponse, ServiceError> {
    let tables = [Table::Variables, Table::Services];
    let wait = Duration::from_millis(req.wait_ms).min(MAX_TEMPLATE_WAIT);
    let waited = ep
        .node()
        .state()
        .wait_tables(&tables, req.min_index, wait)
        .await
        .map_err(|e| ServiceError::internal(e.to_string()))?;
    let snap = &waited.snapshot;
    let mut data = Vec::with_capacity(req.reads.len());
    for set in &req.reads {
        data.push(read_set(ep, snap, set).await);
    }
    Ok(TemplateReadResponse {
        index: waited.index.max(snap.max_index(&tables)),
        data,
    })
}

/// What one task's set of dependencies holds, as its token may read it.
async fn read_set(ep: &Endpoints, snap: &Snapshot, set: &TemplateReadSet) -> Vec<TemplateData> {
    // A credential that is no token (unknown, expired, a workload's whose allocation is
    // gone) may read nothing: every dependency is denied, as Nomad answers each read 403.
    let identity = ep.resolve_token(Some(set.token.as_str())).ok();
    let allows = |need: &Need| identity.as_ref().is_some_and(|i| i.acl.allows(need));
    let mut data = Vec::with_capacity(set.deps.len());
    for dep in &set.deps {
        data.push(match dep {
            TemplateDep::Var { namespace, path } => {
                let need = Need::Variable(namespace.clone(), path.clone(), VarCap::Read);
                if !allows(&need) {
                    TemplateData::Denied
                } else if let Some(var) = snap.variable(namespace, path) {
                    // One variable this server cannot decrypt now leaves the others' answers
                    // alone.
                    match ep.keyring().decrypt_items(snap, var).await {
                        Ok(items) => {
                            let mut meta = var.meta.clone();
                            meta.lock = None;
                            TemplateData::Var(Some(TemplateVar { meta, items }))
                        }
                        Err(e) => {
                            tracing::warn!(namespace, path, error = %e, "a template's variable could not be decrypted");
                            TemplateData::Unavailable
                        }
                    }
                } else {
                    TemplateData::Var(None)
                }
            }
            TemplateDep::VarList { namespace, prefix } => {
                let ns = (namespace != "*").then_some(namespace.as_str());
                TemplateData::VarList(
                    snap.variables(ns, prefix)
                        .filter(|v| {
                            allows(&Need::Variable(
                                v.meta.namespace.clone(),
                                v.meta.path.clone(),
                                VarCap::List,
                            ))
                        })
                        .map(|v| VariableMetadata {
                            lock: None,
                            ..v.meta.clone()
                        })
                        .collect(),
                )
            }
            TemplateDep::Service { namespace, name } => {
                if allows(&Need::ServiceRead(namespace.clone())) {
                    TemplateData::Service(
                        snap.services_by_name(namespace, name)
                            .map(|r| (**r).clone())
                            .collect(),
                    )
                } else {
                    TemplateData::Denied
                }
            }
            TemplateDep::Services { namespace } => {
                if allows(&Need::ServiceRead(namespace.clone())) {
                    let mut by_name: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
                    for r in snap
                        .service_registrations()
                        .filter(|r| r.namespace.as_str() == namespace)
                    {
                        by_name
                            .entry(r.service_name.clone())
                            .or_default()
                            .extend(r.tags.iter().cloned());
                    }
                    TemplateData::Services(
                        by_name
                            .into_iter()
                            .map(|(name, tags)| (name, tags.into_iter().collect()))
                            .collect(),
                    )
                } else {
                    TemplateData::Denied
                }
            }
        });
    }
    data
}
