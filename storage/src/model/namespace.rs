//! Namespaces as objects (Nomad's `Namespace`): a job, its evaluations, allocations,
//! deployments and services live in one. `default` always exists and cannot be deleted; any
//! other must be created (`namespace apply`) before a job is registered in it, and can be
//! deleted only when no job is left in it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::de;

/// Nomad's name of the namespace every cluster has.
pub const DEFAULT_NAMESPACE: &str = "default";

/// A namespace (Nomad's `Namespace` object; `Quota`, `Capabilities` and the node pool
/// configuration are Enterprise or not acted on, and refused by the API).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct NamespaceSpec {
    /// Its name: 1 to 128 letters, digits and dashes.
    #[serde(deserialize_with = "de::nullable")]
    pub name: String,
    /// What it is for.
    #[serde(deserialize_with = "de::nullable")]
    pub description: String,
    /// Free-form metadata.
    #[serde(deserialize_with = "de::nullable")]
    pub meta: BTreeMap<String, String>,
    /// Raft index of creation (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub create_index: u64,
    /// Raft index of the last change (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub modify_index: u64,
}

impl NamespaceSpec {
    /// The `default` namespace as it is before anyone describes it.
    pub fn default_namespace() -> NamespaceSpec {
        NamespaceSpec {
            name: DEFAULT_NAMESPACE.into(),
            description: "Default shared namespace".into(),
            ..NamespaceSpec::default()
        }
    }

    /// Nomad's checks: the name is 1-128 letters, digits and dashes; the description at
    /// most 256 characters.
    pub fn validate(&self) -> Result<(), String> {
        check_name_and_description(&self.name, &self.description)
    }

    /// Whether it is the same but for its indexes.
    pub fn same_as(&self, other: &NamespaceSpec) -> bool {
        self.name == other.name && self.description == other.description && self.meta == other.meta
    }
}

/// Nomad's rule for the names of namespaces and ACL policies (1-128 letters, digits and
/// dashes) and their descriptions (at most 256 characters).
pub(crate) fn check_name_and_description(name: &str, description: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !ok {
        return Err(format!(
            "invalid name {name:?}. Must match regex ^[a-zA-Z0-9-]{{1,128}}$"
        ));
    }
    if description.chars().count() > 256 {
        return Err("description longer than 256".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_nomads_rule() {
        let ns = |name: &str| NamespaceSpec {
            name: name.into(),
            ..NamespaceSpec::default()
        };
        assert!(ns("team-a").validate().is_ok());
        assert!(ns("A9").validate().is_ok());
        for bad in ["", "team a", "team_a", "é", &"a".repeat(129)] {
            assert!(ns(bad).validate().is_err(), "{bad}");
        }
        let mut long = ns("x");
        long.description = "d".repeat(257);
        assert!(long.validate().is_err());
    }
}
