//! `Namespace.*`: namespaces are created or described and deleted through raft; the state
//! store refuses deleting `default` or a namespace that still holds jobs, and registering a
//! job in a namespace that does not exist.

use teamster_storage::fsm::{Command, NamespaceDelete, NamespaceUpsert};

use super::Endpoints;
use crate::rpc::service::namespace::{NamespaceDeleteRequest, NamespaceUpsertRequest};
use crate::rpc::ServiceError;

/// The most namespaces one call may carry.
const MAX_NAMESPACES: usize = 256;

/// `Namespace.UpsertNamespaces`: the raft index.
pub async fn upsert(ep: &Endpoints, req: NamespaceUpsertRequest) -> Result<u64, ServiceError> {
    if req.namespaces.is_empty() || req.namespaces.len() > MAX_NAMESPACES {
        return Err(ServiceError::invalid(
            "Namespaces",
            format!("between 1 and {MAX_NAMESPACES} namespaces"),
        ));
    }
    for ns in &req.namespaces {
        ns.validate()
            .map_err(|reason| ServiceError::invalid("Namespace", reason))?;
    }
    let (index, _) = ep
        .write(Command::NamespaceUpsert(NamespaceUpsert {
            namespaces: req.namespaces,
        }))
        .await?;
    Ok(index)
}

/// `Namespace.DeleteNamespaces`: the raft index.
pub async fn delete(ep: &Endpoints, req: NamespaceDeleteRequest) -> Result<u64, ServiceError> {
    if req.names.is_empty() || req.names.len() > MAX_NAMESPACES {
        return Err(ServiceError::invalid(
            "Namespaces",
            format!("between 1 and {MAX_NAMESPACES} namespaces"),
        ));
    }
    let (index, _) = ep
        .write(Command::NamespaceDelete(NamespaceDelete {
            names: req.names,
        }))
        .await?;
    Ok(index)
}
