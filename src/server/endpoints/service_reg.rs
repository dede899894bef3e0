//! `ServiceRegistration.*`: clients write the registrations of their running allocations
//! and remove them when tasks stop; an operator removes a stale one (`service delete`). The
//! state store keeps only registrations of allocations that still run on their client and
//! removes the rest itself (see `teamster_storage::state`), so a late or repeated write from
//! a client cannot resurrect a stopped allocation's service.

use teamster_storage::fsm::{Command, ServiceRegistrationDelete, ServiceRegistrationUpsert};
use teamster_storage::model::{valid_service_name, Namespace, ServiceRegistration};

use super::Endpoints;
use crate::rpc::service::service_reg::{
    ServiceRegistrationDeleteRequest, ServiceRegistrationListRequest,
    ServiceRegistrationUpsertRequest,
};
use crate::rpc::ServiceError;

/// The most registrations one call may carry.
pub const MAX_REGISTRATIONS: usize = 1024;

/// `ServiceRegistration.Upsert`: the raft index of the write.
pub async fn upsert(
    ep: &Endpoints,
    req: ServiceRegistrationUpsertRequest,
) -> Result<u64, ServiceError> {
    if req.services.is_empty() {
        return Err(ServiceError::invalid("Services", "no registrations given"));
    }
    if req.services.len() > MAX_REGISTRATIONS {
        return Err(ServiceError::invalid(
            "Services",
            format!(
                "{} registrations exceed the limit of {MAX_REGISTRATIONS}",
                req.services.len()
            ),
        ));
    }
    for reg in &req.services {
        if reg.id.is_empty() || reg.alloc_id.is_empty() || reg.node_id.is_empty() {
            return Err(ServiceError::invalid(
                "Services",
                "a registration needs an ID, an allocation and a node",
            ));
        }
        if !valid_service_name(&reg.service_name) || reg.service_name.contains("${") {
            return Err(ServiceError::invalid(
                "ServiceName",
                format!("{:?} is not a valid service name", reg.service_name),
            ));
        }
    }
    let (index, _) = ep
        .write(Command::ServiceRegistrationUpsert(
            ServiceRegistrationUpsert {
                services: req.services,
            },
        ))
        .await?;
    Ok(index)
}

/// `ServiceRegistration.DeleteByID`: the raft index of the write.
pub async fn delete(
    ep: &Endpoints,
    req: ServiceRegistrationDeleteRequest,
) -> Result<u64, ServiceError> {
    if req.ids.is_empty() {
        return Err(ServiceError::invalid("IDs", "no registrations given"));
    }
    if req.ids.len() > MAX_REGISTRATIONS {
        return Err(ServiceError::invalid(
            "IDs",
            format!("more than {MAX_REGISTRATIONS} registrations"),
        ));
    }
    let (index, _) = ep
        .write(Command::ServiceRegistrationDelete(
            ServiceRegistrationDelete {
                namespace: Namespace::new(&req.namespace),
                ids: req.ids,
                must_exist: req.must_exist,
            },
        ))
        .await?;
    Ok(index)
}

/// `ServiceRegistration.ListByNode`: what this server's state holds for the node.
pub fn list_by_node(
    ep: &Endpoints,
    req: ServiceRegistrationListRequest,
) -> Vec<ServiceRegistration> {
    ep.node()
        .state()
        .snapshot()
        .services_by_node(&req.node_id)
        .into_iter()
        .map(|r| (*r).clone())
        .collect()
}
