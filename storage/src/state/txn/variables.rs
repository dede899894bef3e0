//! Variables in the write transaction: written and deleted by path, with Nomad's
//! check-and-set (`cas`: the variable's modify index, 0 for "must not exist"); a mismatch is
//! a [`ApplyError::VariableConflict`] and writes nothing.

use std::sync::Arc;

use crate::fsm::ApplyError;
use crate::model::VariableEncrypted;
use crate::state::tables::Table;
use crate::state::txn::WriteTxn;

impl WriteTxn {
    fn check_cas(&self, key: &(String, String), cas: Option<u64>) -> Result<(), ApplyError> {
        let Some(want) = cas else {
            return Ok(());
        };
        let have = self.t.variables.get(key).map_or(0, |v| v.meta.modify_index);
        if have != want {
            return Err(ApplyError::VariableConflict {
                namespace: key.0.clone(),
                path: key.1.clone(),
                modify_index: have,
            });
        }
        Ok(())
    }

    /// Writes a variable (its create index and time kept when it exists).
    pub fn upsert_variable(
        &mut self,
        mut var: VariableEncrypted,
        cas: Option<u64>,
        now: i64,
        lock_id: Option<&str>,
        acquire: Option<crate::model::VariableLock>,
        keep_items: bool,
    ) -> Result<(), ApplyError> {
        crate::model::validate_variable_path(&var.meta.path)
            .map_err(|reason| ApplyError::VariableRefused { reason })?;
        if !self.t.root_keys.contains_key(&var.data.key_id) {
            // Removed between the leader's encryption and this entry: never decryptable.
            return Err(ApplyError::VariableRefused {
                reason: format!(
                    "root key {} was removed; write the variable again",
                    var.data.key_id
                ),
            });
        }
        let key = (var.meta.namespace.clone(), var.meta.path.clone());
        self.check_cas(&key, cas)?;
        let index = self.index();
        let existing_lock = self.t.variables.get(&key).and_then(|v| v.meta.lock.clone());
        if let Some(held) = &existing_lock {
            // Only its holder writes a locked variable; nobody acquires it again (its
            // parameters never change while it is held).
            if acquire.is_some() {
                return Err(ApplyError::VariableLockRefused {
                    reason: "variable already locked".into(),
                    missing: false,
                });
            }
            if lock_id != Some(held.id.as_str()) {
                return Err(ApplyError::VariableLockRefused {
                    reason: "attempting to modify locked variable".into(),
                    missing: false,
                });
            }
        }
        if keep_items {
            if let Some(existing) = self.t.variables.get(&key) {
                var.data = existing.data.clone();
            }
        }
        // An acquire takes its lock; the holder's write keeps the one it holds.
        var.meta.lock = acquire.or(existing_lock);
        match self.t.variables.get(&key) {
            Some(existing) => {
                var.meta.create_index = existing.meta.create_index;
                var.meta.create_time = existing.meta.create_time;
            }
            None => {
                var.meta.create_index = index;
                var.meta.create_time = now;
            }
        }
        var.meta.modify_index = index;
        var.meta.modify_time = now;
        self.t.variables.insert(key.clone(), Arc::new(var));
        self.touch(Table::Variables);
        self.variable_changed(key, false);
        Ok(())
    }

    /// Publishes a variable's change for the event stream.
    fn variable_changed(&mut self, (namespace, path): (String, String), deleted: bool) {
        self.changes
            .push(crate::state::StateChange::VariableChanged {
                namespace,
                path,
                deleted,
            });
    }

    /// Deletes a variable (none there: nothing to do, unless `cas` asks for one).
    pub fn delete_variable(
        &mut self,
        namespace: &str,
        path: &str,
        cas: Option<u64>,
    ) -> Result<(), ApplyError> {
        let key = (namespace.to_string(), path.to_string());
        self.check_cas(&key, cas)?;
        if self
            .t
            .variables
            .get(&key)
            .is_some_and(|v| v.meta.lock.is_some())
        {
            // As Nomad: a locked variable is released before it can be deleted.
            return Err(ApplyError::VariableLockRefused {
                reason: "attempting to modify locked variable".into(),
                missing: false,
            });
        }
        if self.t.variables.remove(&key).is_some() {
            self.touch(Table::Variables);
            self.variable_changed(key, true);
        }
        Ok(())
    }

    /// Releases a variable's lock `lock_id` (its items stay): refused when the variable
    /// does not exist, holds no lock, or holds another.
    pub fn release_variable_lock(
        &mut self,
        namespace: &str,
        path: &str,
        lock_id: &str,
    ) -> Result<(), ApplyError> {
        let key = (namespace.to_string(), path.to_string());
        let refuse = |reason: &str, missing: bool| ApplyError::VariableLockRefused {
            reason: reason.into(),
            missing,
        };
        let Some(existing) = self.t.variables.get(&key) else {
            return Err(refuse("variable doesn't exist", true));
        };
        match &existing.meta.lock {
            None => return Err(refuse("variable doesn't hold a lock", false)),
            Some(held) if held.id != lock_id => {
                return Err(refuse("attempting to modify locked variable", false))
            }
            Some(_) => {}
        }
        let mut var = (**existing).clone();
        var.meta.lock = None;
        var.meta.modify_index = self.index();
        self.t.variables.insert(key.clone(), Arc::new(var));
        self.touch(Table::Variables);
        self.variable_changed(key, false);
        Ok(())
    }
}
