//! `Variables.Apply` on the leader: a variable's items encrypted with the active root key's
//! data key, then written (or the variable deleted) through raft with Nomad's check-and-set.
//! The replicated state and the raft log only ever hold the ciphertext.

use teamster_storage::fsm::{ApplyError, Command, VariableDelete, VariableUpsert};
use teamster_storage::model::{
    validate_variable_items, validate_variable_path, VariableEncrypted, VariableMetadata,
};

use super::keyring::keyring_error;
use super::Endpoints;
use crate::rpc::service::variables::{VariableOp, VariablesApplyRequest, VariablesApplyResponse};
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
