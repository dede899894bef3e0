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
        self.t.variables.insert(key, Arc::new(var));
        self.touch(Table::Variables);
        Ok(())
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
        if self.t.variables.remove(&key).is_some() {
            self.touch(Table::Variables);
        }
        Ok(())
    }
}
