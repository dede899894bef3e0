//! Service registrations in the write transaction, with Nomad's rules: a client writes the
//! registrations of its running allocations; they go when the allocation stops on its
//! client (complete, failed, lost), when it is removed (garbage collection, a purged job),
//! when its node goes down, or when the client or an operator deletes them by ID.

use std::sync::Arc;

use crate::fsm::ApplyError;
use crate::model::{AllocId, Namespace, NodeId, ServiceRegistration};
use crate::state::tables::{ServiceKey, Table};
use crate::state::txn::WriteTxn;

fn key(reg: &ServiceRegistration) -> ServiceKey {
    (
        reg.namespace.clone(),
        reg.service_name.clone(),
        reg.id.clone(),
    )
}

impl WriteTxn {
    /// Writes each registration whose allocation is known and still running on its client;
    /// one that is the same but for its indexes is left as it is.
    pub fn upsert_service_registrations(&mut self, services: Vec<ServiceRegistration>) {
        for mut reg in services {
            let live = self
                .t
                .allocs
                .get(reg.alloc_id.as_str())
                .is_some_and(|a| !a.client_terminal_status() && a.node_id == reg.node_id);
            if !live || reg.id.is_empty() {
                continue;
            }
            let k = key(&reg);
            match self.t.services.get(&k) {
                Some(existing) if existing.same_as(&reg) => continue,
                Some(existing) => reg.create_index = existing.create_index,
                None => reg.create_index = self.index(),
            }
            reg.modify_index = self.index();
            self.t
                .services_by_alloc
                .insert(reg.alloc_id.clone(), k.clone());
            self.t
                .services_by_node
                .insert(reg.node_id.clone(), k.clone());
            self.t.services.insert(k, Arc::new(reg));
            self.touch(Table::Services);
        }
    }

    /// Removes the registrations `(service name, ID)` of `namespace`; with `must_exist`, an
    /// unknown one refuses the command.
    pub fn delete_service_registrations(
        &mut self,
        namespace: &Namespace,
        ids: &[(String, String)],
        must_exist: bool,
    ) -> Result<(), ApplyError> {
        for (name, id) in ids {
            let k: ServiceKey = (namespace.clone(), name.clone(), id.clone());
            match self.t.services.contains_key(&k) {
                true => self.remove_service(&k),
                false if must_exist => {
                    return Err(ApplyError::ServiceRegistrationNotFound {
                        namespace: namespace.to_string(),
                        id: id.clone(),
                    })
                }
                false => {}
            }
        }
        Ok(())
    }

    /// Removes the registrations of an allocation (it stopped on its client or is gone).
    pub(crate) fn remove_services_of_alloc(&mut self, alloc: &AllocId) {
        let keys: Vec<ServiceKey> = self
            .t
            .services_by_alloc
            .get(alloc.as_str())
            .cloned()
            .collect();
        for k in keys {
            self.remove_service(&k);
        }
    }

    /// Removes the registrations of every allocation on a node (it went down).
    pub(crate) fn remove_services_of_node(&mut self, node: &NodeId) {
        let keys: Vec<ServiceKey> = self
            .t
            .services_by_node
            .get(node.as_str())
            .cloned()
            .collect();
        for k in keys {
            self.remove_service(&k);
        }
    }

    fn remove_service(&mut self, k: &ServiceKey) {
        if let Some(reg) = self.t.services.remove(k) {
            self.t.services_by_alloc.remove(reg.alloc_id.as_str(), k);
            self.t.services_by_node.remove(reg.node_id.as_str(), k);
            self.touch(Table::Services);
        }
    }
}
