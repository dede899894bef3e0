//! `Variables.Apply` on the leader: a variable's items encrypted with the active root key's
//! data key, then written (or the variable deleted) through raft with Nomad's check-and-set.
//! The replicated state and the raft log only ever hold the ciphertext.
//!
//! `Template.Read` on any server: what a task's templates read (variables, decrypted here,
//! and services), as its workload identity may read them; a blocking query.

use teamster_storage::fsm::{ApplyError, Command, VariableDelete, VariableUpsert};
use teamster_storage::model::{
    validate_variable_items, validate_variable_path, VariableEncrypted, VariableMetadata,
};

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use teamster_storage::state::Table;

use super::keyring::keyring_error;
use super::Endpoints;
use crate::acl::{Need, VarCap};
use crate::rpc::service::credential::caller_token;
use crate::rpc::service::variables::{
    TemplateData, TemplateDep, TemplateReadRequest, TemplateReadResponse, TemplateVar, VariableOp,
    VariablesApplyRequest, VariablesApplyResponse,
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
    let cmd = match req.op {
        VariableOp::Set(items) => {
            validate_variable_items(&items).map_err(|e| ServiceError::invalid("Items", e))?;
            let snap = ep.node().state().snapshot();
            let data = ep
                .keyring()
                .encrypt_items(&snap, &req.namespace, &req.path, &items)
                .await
                .map_err(keyring_error)?;
            Command::VariableUpsert(VariableUpsert {
                var: VariableEncrypted {
                    meta: VariableMetadata {
                        namespace: req.namespace,
                        path: req.path,
                        ..VariableMetadata::default()
                    },
                    data,
                },
                cas: req.cas,
                now: ep.now(),
            })
        }
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
        Some(e) => Err(super::apply_error(e)),
        None => Ok(VariablesApplyResponse::Applied(applied.index)),
    }
}

/// `Template.Read`: what a task's templates read, as the caller's credential (the task's
/// workload identity) may read it: a variable it may not read, or services of a namespace
/// it may not look up, answer [`TemplateData::Denied`]; variables it may not list are left
/// out of a listing; a credential that is no token is denied everything. Blocks until the variables or services changed after `min_index`.
pub async fn template_read(
    ep: &Endpoints,
    req: TemplateReadRequest,
) -> Result<TemplateReadResponse, ServiceError> {
    // A credential that is no token (unknown, expired, a workload's whose allocation is
    // gone) may read nothing: every dependency is denied, as Nomad answers each read 403.
    let identity = ep.resolve_token(caller_token().as_deref()).ok();
    let tables = [Table::Variables, Table::Services];
    let wait = Duration::from_millis(req.wait_ms).min(MAX_TEMPLATE_WAIT);
    let waited = ep
        .node()
        .state()
        .wait_tables(&tables, req.min_index, wait)
        .await
        .map_err(|e| ServiceError::internal(e.to_string()))?;
    let snap = &waited.snapshot;
    let allows = |need: &Need| identity.as_ref().is_some_and(|i| i.acl.allows(need));
    let mut data = Vec::with_capacity(req.deps.len());
    for dep in &req.deps {
        data.push(match dep {
            TemplateDep::Var { namespace, path } => {
                let need = Need::Variable(namespace.clone(), path.clone(), VarCap::Read);
                if !allows(&need) {
                    TemplateData::Denied
                } else if let Some(var) = snap.variable(namespace, path) {
                    let items = ep
                        .keyring()
                        .decrypt_items(snap, var)
                        .await
                        .map_err(keyring_error)?;
                    TemplateData::Var(Some(TemplateVar {
                        meta: var.meta.clone(),
                        items,
                    }))
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
                        .map(|v| v.meta.clone())
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
    Ok(TemplateReadResponse {
        index: waited.index.max(snap.max_index(&tables)),
        data,
    })
}
