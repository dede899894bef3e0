//! ACL policies and tokens in the write transaction. A token's policies must exist when it
//! is written (a policy deleted later is skipped by whoever resolves the token); a secret
//! belongs to one token; the bootstrap happens once, or again only with the reset index.

use std::sync::Arc;

use crate::fsm::ApplyError;
use crate::model::{AclPolicy, AclToken, OneTimeToken};
use crate::state::tables::Table;
use crate::state::txn::WriteTxn;
use crate::state::StateChange;

impl WriteTxn {
    /// Publishes one [`StateChange::AclChanged`] for a run of ACL writes (a command writing
    /// many tokens or policies makes each stream check its token once).
    fn acl_changed(&mut self) {
        if !matches!(self.changes.last(), Some(StateChange::AclChanged)) {
            self.changes.push(StateChange::AclChanged);
        }
    }

    /// Creates or changes a policy; the same one again writes nothing.
    pub fn upsert_acl_policy(&mut self, mut policy: AclPolicy) -> Result<(), ApplyError> {
        policy
            .validate_name()
            .map_err(|reason| ApplyError::AclRefused { reason })?;
        match self.t.acl_policies.get(&policy.name) {
            Some(existing) if existing.same_as(&policy) => return Ok(()),
            Some(existing) => policy.create_index = existing.create_index,
            None => policy.create_index = self.index(),
        }
        policy.modify_index = self.index();
        self.t
            .acl_policies
            .insert(policy.name.clone(), Arc::new(policy));
        self.touch(Table::AclPolicies);
        self.acl_changed();
        Ok(())
    }

    /// Deletes a policy by name.
    pub fn delete_acl_policy(&mut self, name: &str) -> Result<(), ApplyError> {
        if self.t.acl_policies.remove(name).is_none() {
            return Err(ApplyError::AclNotFound {
                kind: "ACL policy".into(),
                id: name.to_string(),
            });
        }
        self.touch(Table::AclPolicies);
        self.acl_changed();
        Ok(())
    }

    /// Creates or changes a token: valid, its secret its own. A policy it names need not
    /// exist yet (as Nomad's): it grants nothing until it is written. A change keeps the
    /// token's secret, creation time and create index.
    pub fn upsert_acl_token(&mut self, mut token: AclToken) -> Result<(), ApplyError> {
        token
            .validate()
            .map_err(|reason| ApplyError::AclRefused { reason })?;
        match self.t.acl_tokens.get(&token.accessor_id) {
            Some(existing) => {
                token.secret_id = existing.secret_id.clone();
                token.create_time = existing.create_time;
                token.create_index = existing.create_index;
            }
            None => {
                if self.t.acl_secrets.contains_key(&token.secret_id) {
                    return Err(ApplyError::AclRefused {
                        reason: "a token with this secret already exists".into(),
                    });
                }
                token.create_index = self.index();
            }
        }
        token.modify_index = self.index();
        self.t
            .acl_secrets
            .insert(token.secret_id.clone(), token.accessor_id.clone());
        self.t
            .acl_tokens
            .insert(token.accessor_id.clone(), Arc::new(token));
        self.touch(Table::AclTokens);
        self.acl_changed();
        Ok(())
    }

    /// Writes a one-time token, dropping those expired at `now`.
    pub fn upsert_one_time_token(
        &mut self,
        mut token: OneTimeToken,
        now: i64,
    ) -> Result<(), ApplyError> {
        if !self.t.acl_tokens.contains_key(&token.accessor_id) {
            return Err(ApplyError::AclNotFound {
                kind: "ACL token".into(),
                id: token.accessor_id.clone(),
            });
        }
        let expired: Vec<String> = self
            .t
            .one_time_tokens
            .iter()
            .filter(|(_, t)| t.expires_at.unix_nanos().is_some_and(|at| at <= now))
            .map(|(secret, _)| secret.clone())
            .collect();
        for secret in expired {
            self.t.one_time_tokens.remove(&secret);
        }
        token.create_index = self.index();
        token.modify_index = self.index();
        self.t
            .one_time_tokens
            .insert(token.one_time_secret_id.clone(), Arc::new(token));
        self.touch(Table::AclTokens);
        Ok(())
    }

    /// Uses up a one-time token: refused unless it exists, has not expired at `now` and its
    /// ACL token exists; then every one-time token of that ACL token is removed.
    pub fn exchange_one_time_token(&mut self, secret: &str, now: i64) -> Result<(), ApplyError> {
        let refused = || ApplyError::AclRefused {
            reason: "Permission denied".into(),
        };
        let ott = self
            .t
            .one_time_tokens
            .get(secret)
            .cloned()
            .ok_or_else(refused)?;
        if ott.expires_at.unix_nanos().is_none_or(|at| at <= now)
            || !self.t.acl_tokens.contains_key(&ott.accessor_id)
        {
            return Err(refused());
        }
        self.delete_one_time_tokens(std::slice::from_ref(&ott.accessor_id));
        Ok(())
    }

    /// Removes every one-time token of these ACL tokens.
    pub fn delete_one_time_tokens(&mut self, accessor_ids: &[String]) {
        let gone: Vec<String> = self
            .t
            .one_time_tokens
            .iter()
            .filter(|(_, t)| accessor_ids.contains(&t.accessor_id))
            .map(|(secret, _)| secret.clone())
            .collect();
        for secret in &gone {
            self.t.one_time_tokens.remove(secret);
        }
        if !gone.is_empty() {
            self.touch(Table::AclTokens);
        }
    }

    /// Deletes a token by accessor ID.
    pub fn delete_acl_token(&mut self, accessor_id: &str) -> Result<(), ApplyError> {
        let Some(token) = self.t.acl_tokens.remove(accessor_id) else {
            return Err(ApplyError::AclNotFound {
                kind: "ACL token".into(),
                id: accessor_id.to_string(),
            });
        };
        self.t.acl_secrets.remove(&token.secret_id);
        self.delete_one_time_tokens(&[accessor_id.to_string()]);
        self.touch(Table::AclTokens);
        self.acl_changed();
        Ok(())
    }

    /// The one-time bootstrap: refused once done unless `reset_index` is the index the
    /// bootstrap was done at (Nomad's reset procedure). Earlier tokens stay (as Nomad's).
    pub fn acl_bootstrap(&mut self, token: AclToken, reset_index: u64) -> Result<(), ApplyError> {
        let done = self.t.acl_bootstrap_index;
        if done != 0 && reset_index != done {
            return Err(ApplyError::AclBootstrapDone {
                reset_index: done,
                given: reset_index,
            });
        }
        if !token.is_management() {
            return Err(ApplyError::AclRefused {
                reason: "the bootstrap token must be a management token".into(),
            });
        }
        self.upsert_acl_token(token)?;
        self.t.acl_bootstrap_index = self.index();
        Ok(())
    }
}
