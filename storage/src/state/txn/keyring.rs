//! The root keyring in the write transaction: a key is added or changed, one key at most is
//! active (activating one makes the former active key inactive), and the active key cannot
//! be removed.

use std::sync::Arc;

use crate::fsm::ApplyError;
use crate::model::{RootKey, RootKeyState};
use crate::state::tables::Table;
use crate::state::txn::WriteTxn;

impl WriteTxn {
    /// Adds or changes a root key; with `activate` it becomes the one active key.
    pub fn upsert_root_key(&mut self, mut key: RootKey, activate: bool) -> Result<(), ApplyError> {
        if key.meta.key_id.is_empty() {
            return Err(ApplyError::KeyringRefused {
                reason: "root key without a key ID".into(),
            });
        }
        let index = self.index();
        match self.t.root_keys.get(&key.meta.key_id) {
            Some(existing) => key.meta.create_index = existing.meta.create_index,
            None => key.meta.create_index = index,
        }
        key.meta.modify_index = index;
        if activate {
            key.meta.state = RootKeyState::Active;
            key.meta.publish_time = 0;
            let others: Vec<Arc<RootKey>> = self
                .t
                .root_keys
                .values()
                .filter(|k| {
                    k.meta.state == RootKeyState::Active && k.meta.key_id != key.meta.key_id
                })
                .cloned()
                .collect();
            for old in others {
                let mut old = (*old).clone();
                old.meta.state = RootKeyState::Inactive;
                old.meta.modify_index = index;
                self.t
                    .root_keys
                    .insert(old.meta.key_id.clone(), Arc::new(old));
            }
        } else if key.meta.state == RootKeyState::Active
            && self
                .t
                .root_keys
                .get(&key.meta.key_id)
                .is_none_or(|k| k.meta.state != RootKeyState::Active)
        {
            return Err(ApplyError::KeyringRefused {
                reason: "a root key becomes active only by activation".into(),
            });
        }
        self.t
            .root_keys
            .insert(key.meta.key_id.clone(), Arc::new(key));
        self.touch(Table::RootKeys);
        Ok(())
    }

    /// Removes a root key; the active key is refused (rotate first).
    pub fn delete_root_key(&mut self, key_id: &str) -> Result<(), ApplyError> {
        match self.t.root_keys.get(key_id) {
            None => Err(ApplyError::RootKeyNotFound {
                key_id: key_id.to_string(),
            }),
            Some(k) if k.meta.state == RootKeyState::Active => Err(ApplyError::KeyringRefused {
                reason: "active root key cannot be deleted - call rotate first".into(),
            }),
            Some(_) if self.t.variables.values().any(|v| v.data.key_id == key_id) => {
                Err(ApplyError::KeyringRefused {
                    reason: "root key in use by variables, cannot delete".into(),
                })
            }
            Some(_) => {
                self.t.root_keys.remove(key_id);
                self.touch(Table::RootKeys);
                Ok(())
            }
        }
    }
}
