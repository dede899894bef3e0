//! The payloads of the `Namespace.*` calls: create, describe and delete namespaces.

use serde::{Deserialize, Serialize};
use teamster_storage::model::NamespaceSpec;

/// `Namespace.UpsertNamespaces`: create or describe namespaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceUpsertRequest {
    /// The namespaces.
    pub namespaces: Vec<NamespaceSpec>,
}

/// `Namespace.DeleteNamespaces`: delete namespaces that hold no job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamespaceDeleteRequest {
    /// Their names.
    pub names: Vec<String>,
}
