//! Namespaces in the write transaction: `default` always exists (a description makes it a
//! row) and cannot be deleted; another is created by an upsert and deleted only when no job
//! is left in it, so every job's namespace exists.

use std::sync::Arc;

use crate::fsm::ApplyError;
use crate::model::{Namespace, NamespaceSpec, DEFAULT_NAMESPACE};
use crate::state::tables::Table;
use crate::state::txn::WriteTxn;

impl WriteTxn {
    /// Whether jobs may live in `namespace`.
    pub fn namespace_exists(&self, namespace: &Namespace) -> bool {
        namespace.as_str() == DEFAULT_NAMESPACE || self.t.namespaces.contains_key(namespace)
    }

    /// Creates or describes a namespace; the same one again writes nothing.
    pub fn upsert_namespace(&mut self, mut ns: NamespaceSpec) -> Result<(), ApplyError> {
        ns.validate().map_err(ApplyError::invalid)?;
        let key = Namespace::new(&ns.name);
        match self.t.namespaces.get(&key) {
            Some(existing) if existing.same_as(&ns) => return Ok(()),
            Some(existing) => ns.create_index = existing.create_index,
            None => ns.create_index = self.index(),
        }
        ns.modify_index = self.index();
        self.t.namespaces.insert(key, Arc::new(ns));
        self.touch(Table::Namespaces);
        Ok(())
    }

    /// Deletes a namespace: not `default`, not an unknown one, not one that holds a job.
    pub fn delete_namespace(&mut self, name: &str) -> Result<(), ApplyError> {
        if name == DEFAULT_NAMESPACE {
            return Err(ApplyError::NamespaceRefused {
                reason: "default namespace can not be deleted".into(),
            });
        }
        let key = Namespace::new(name);
        if !self.t.namespaces.contains_key(&key) {
            return Err(ApplyError::NamespaceNotFound {
                namespace: name.to_string(),
            });
        }
        let jobs = self
            .t
            .jobs
            .keys()
            .filter(|(ns, _)| ns.as_str() == name)
            .count();
        if jobs > 0 {
            return Err(ApplyError::NamespaceRefused {
                reason: format!(
                    "namespace {name:?} has {jobs} job(s); stop and purge them before deleting it"
                ),
            });
        }
        let variables = self
            .t
            .variables
            .keys()
            .filter(|(ns, _)| ns.as_str() == name)
            .count();
        if variables > 0 {
            return Err(ApplyError::NamespaceRefused {
                reason: format!(
                    "namespace {name:?} contains at least one variable ({variables}); delete them before deleting it"
                ),
            });
        }
        self.t.namespaces.remove(&key);
        self.touch(Table::Namespaces);
        Ok(())
    }
}
