//! The payloads of the `ServiceRegistration.*` calls: clients register and remove the
//! services of their running allocations (native service discovery) and read back what a
//! node has when they start; an operator removes a stale registration by name and ID.

use serde::{Deserialize, Serialize};
use teamster_storage::model::ServiceRegistration;

/// `ServiceRegistration.Upsert`: write registrations of running allocations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceRegistrationUpsertRequest {
    /// The registrations (IDs set; a client sends those of its own allocations).
    pub services: Vec<ServiceRegistration>,
}

/// `ServiceRegistration.DeleteByID`: remove registrations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceRegistrationDeleteRequest {
    /// Their namespace.
    pub namespace: String,
    /// `(service name, registration ID)` pairs.
    pub ids: Vec<(String, String)>,
    /// An operator's delete: an unknown registration is an error. A client's clean-up is not
    /// told about registrations the servers removed already.
    pub must_exist: bool,
}

/// `ServiceRegistration.ListByNode`: the registrations of a node's allocations, which its
/// client reconciles with what it runs when it starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceRegistrationListRequest {
    /// The node.
    pub node_id: String,
}
