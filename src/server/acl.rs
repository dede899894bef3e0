//! Token resolution on a server: a secret (or none) becomes an [`Identity`] — the token and
//! its compiled [`Acl`] — read from this server's own replicated state, never through raft.
//! Compiled ACLs are cached by secret until the ACL tables change; parsed policies by name
//! and modify index. Unknown secrets are not cached (a flood of random secrets cannot grow
//! the cache), and the cache is bounded.
//!
//! No token is the anonymous identity: whatever a policy named `anonymous` grants, else
//! nothing. A management token is allowed everything.
//!
//! May import: `raft` (the state store), `acl`, `util`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use teamster_storage::model::{AclPolicy, AclToken, ANONYMOUS_POLICY};
use teamster_storage::state::{Snapshot, Table};

use crate::acl::{parse_policy, Acl, Policy};
use crate::keyring::IdentityClaims;
use crate::util::SharedClock;

/// Why a request's token was refused. The messages are Nomad's (the HTTP API answers 403).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    /// The secret is not a token's.
    #[error("ACL token not found")]
    TokenNotFound,
    /// The token's expiration time has passed.
    #[error("ACL token expired")]
    TokenExpired,
    /// The token does not allow the request.
    #[error("Permission denied")]
    PermissionDenied,
    /// A workload identity that does not verify, or whose allocation is gone or terminal.
    #[error("invalid workload identity: {0}")]
    InvalidIdentity(String),
}

/// Who a request comes from.
#[derive(Debug, Clone)]
pub struct Identity {
    /// What it may do.
    pub acl: Arc<Acl>,
    /// Its token; `None` for the anonymous caller and for a workload identity.
    pub token: Option<Arc<AclToken>>,
    /// A workload identity's claims.
    pub claims: Option<Arc<IdentityClaims>>,
}

impl Identity {
    /// The identity of a caller when ACLs are off, and of the cluster's own components.
    pub fn unrestricted() -> Identity {
        Identity {
            acl: Arc::new(Acl::management()),
            token: None,
            claims: None,
        }
    }

    /// Refuses with `PermissionDenied` unless the ACL meets `need`.
    pub fn require(&self, need: &crate::acl::Need) -> Result<(), AclError> {
        if self.acl.allows(need) {
            Ok(())
        } else {
            Err(AclError::PermissionDenied)
        }
    }
}

/// How many secrets the cache keeps before it starts again.
const MAX_CACHED: usize = 4096;

#[derive(Default)]
struct Cache {
    /// The ACL tables' index the entries were compiled at.
    index: u64,
    by_secret: HashMap<String, Identity>,
    anonymous: Option<Identity>,
    /// Parsed policies by name, with the modify index they were parsed at.
    policies: HashMap<String, (u64, Arc<Policy>)>,
}

/// Resolves tokens from a server's state.
pub struct AclResolver {
    clock: SharedClock,
    cache: Mutex<Cache>,
}

impl AclResolver {
    /// A resolver whose expiry checks read `clock`.
    pub fn new(clock: SharedClock) -> AclResolver {
        AclResolver {
            clock,
            cache: Mutex::new(Cache::default()),
        }
    }

    /// The identity of `secret` (none: anonymous) in `snap`.
    pub fn resolve(&self, snap: &Snapshot, secret: Option<&str>) -> Result<Identity, AclError> {
        let index = snap.max_index(&[Table::AclPolicies, Table::AclTokens]);
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.index != index {
            cache.index = index;
            cache.by_secret.clear();
            cache.anonymous = None;
        }
        let Some(secret) = secret.filter(|s| !s.is_empty()) else {
            if let Some(anon) = &cache.anonymous {
                return Ok(anon.clone());
            }
            let names = [ANONYMOUS_POLICY.to_string()];
            let acl = compile(&mut cache, snap, &names);
            let anon = Identity {
                acl: Arc::new(acl),
                token: None,
                claims: None,
            };
            cache.anonymous = Some(anon.clone());
            return Ok(anon);
        };
        let now = self.clock.now_unix_nanos();
        if let Some(hit) = cache.by_secret.get(secret) {
            if hit.token.as_ref().is_some_and(|t| t.expired(now)) {
                return Err(AclError::TokenExpired);
            }
            return Ok(hit.clone());
        }
        let token = snap
            .acl_token_by_secret(secret)
            .cloned()
            .ok_or(AclError::TokenNotFound)?;
        if token.expired(now) {
            return Err(AclError::TokenExpired);
        }
        let acl = if token.is_management() {
            Acl::management()
        } else {
            compile(&mut cache, snap, &token.policies)
        };
        let identity = Identity {
            acl: Arc::new(acl),
            token: Some(token),
            claims: None,
        };
        if cache.by_secret.len() >= MAX_CACHED {
            cache.by_secret.clear();
        }
        cache.by_secret.insert(secret.to_string(), identity.clone());
        Ok(identity)
    }
}

/// The identity of a workload identity token, from `snap`: its signature checked by
/// `verify`, its allocation existing and not terminal (Nomad treats the claims of a terminal
/// allocation as expired).
pub fn workload_identity(
    snap: &Snapshot,
    claims: Result<IdentityClaims, crate::keyring::KeyringError>,
) -> Result<Identity, AclError> {
    let claims = claims.map_err(|e| AclError::InvalidIdentity(e.to_string()))?;
    let alloc = snap
        .alloc_by_id(&claims.nomad_allocation_id)
        .ok_or_else(|| AclError::InvalidIdentity("allocation does not exist".into()))?;
    if alloc.client_terminal_status() {
        return Err(AclError::InvalidIdentity("allocation is terminal".into()));
    }
    let claim = crate::acl::WorkloadClaim {
        namespace: claims.nomad_namespace.clone(),
        job: claims.nomad_job_id.clone(),
        group: alloc.task_group.to_string(),
        task: claims.nomad_task.clone(),
    };
    Ok(Identity {
        acl: Arc::new(Acl::workload(claim)),
        token: None,
        claims: Some(Arc::new(claims)),
    })
}

/// The ACL of the policies `names` that exist in `snap` (a deleted policy grants nothing; a
/// stored policy that no longer parses grants nothing and is logged).
fn compile(cache: &mut Cache, snap: &Snapshot, names: &[String]) -> Acl {
    let mut parsed = Vec::with_capacity(names.len());
    for name in names {
        let Some(policy) = snap.acl_policy(name) else {
            continue;
        };
        if let Some(p) = parsed_policy(cache, policy) {
            parsed.push(p);
        }
    }
    Acl::from_policies(parsed.iter().map(|p| &**p))
}

fn parsed_policy(cache: &mut Cache, policy: &AclPolicy) -> Option<Arc<Policy>> {
    if let Some((at, p)) = cache.policies.get(&policy.name) {
        if *at == policy.modify_index {
            return Some(p.clone());
        }
    }
    match parse_policy(&policy.rules) {
        Ok(p) => {
            let p = Arc::new(p);
            cache
                .policies
                .insert(policy.name.clone(), (policy.modify_index, p.clone()));
            Some(p)
        }
        Err(e) => {
            tracing::error!(policy = %policy.name, error = %e, "a stored ACL policy does not parse; it grants nothing");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::{Capability, Need};
    use teamster_storage::fsm::{AclPolicyUpsert, AclTokenUpsert, Command};
    use teamster_storage::model::Timestamp;
    use teamster_storage::state::StateStore;

    fn uuid(n: u8) -> String {
        format!("00000000-0000-4000-8000-0000000000{n:02x}")
    }

    fn store_with(policies: &[(&str, &str)], tokens: Vec<AclToken>) -> StateStore {
        let store = StateStore::new();
        let policies = policies
            .iter()
            .map(|(name, rules)| AclPolicy {
                name: name.to_string(),
                rules: rules.to_string(),
                ..AclPolicy::default()
            })
            .collect();
        store.apply(1, Command::AclPolicyUpsert(AclPolicyUpsert { policies }));
        assert!(store
            .apply(2, Command::AclTokenUpsert(AclTokenUpsert { tokens }))
            .rejection()
            .is_none());
        store
    }

    fn token(n: u8, policies: &[&str]) -> AclToken {
        AclToken {
            accessor_id: uuid(n),
            secret_id: uuid(100 + n),
            r#type: "client".into(),
            policies: policies.iter().map(|p| p.to_string()).collect(),
            ..AclToken::default()
        }
    }

    fn clock_at(nanos: i64) -> SharedClock {
        crate::util::clock::ManualClock::starting_at(nanos)
    }

    #[test]
    fn secrets_resolve_to_their_policies_and_changes_are_seen() {
        let mut expiring = token(2, &["readonly"]);
        expiring.expiration_time = Some(Timestamp::from_unix_nanos(1_000));
        let store = store_with(
            &[
                ("readonly", r#"namespace "default" { policy = "read" }"#),
                ("anonymous", r#"node { policy = "read" }"#),
            ],
            vec![token(1, &["readonly"]), expiring],
        );
        let r = AclResolver::new(clock_at(2_000));
        let snap = store.snapshot();
        let id = r.resolve(&snap, Some(&uuid(101))).unwrap();
        let read = Need::Namespace("default".into(), &[Capability::ReadJob]);
        assert!(id.acl.allows(&read));
        assert!(!id.acl.allows(&Need::NodeRead));
        assert_eq!(
            r.resolve(&snap, Some(&uuid(102))).unwrap_err(),
            AclError::TokenExpired
        );
        assert_eq!(
            r.resolve(&snap, Some(&uuid(199))).unwrap_err(),
            AclError::TokenNotFound
        );
        let anon = r.resolve(&snap, None).unwrap();
        assert!(anon.token.is_none() && anon.acl.allows(&Need::NodeRead));
        assert!(!anon.acl.allows(&read));

        // The policy changes: the cached ACL is dropped.
        store.apply(
            3,
            Command::AclPolicyUpsert(AclPolicyUpsert {
                policies: vec![AclPolicy {
                    name: "readonly".into(),
                    rules: r#"node { policy = "read" }"#.into(),
                    ..AclPolicy::default()
                }],
            }),
        );
        let id = r.resolve(&store.snapshot(), Some(&uuid(101))).unwrap();
        assert!(!id.acl.allows(&read));
        assert!(id.acl.allows(&Need::NodeRead));
    }

    /// As Nomad's: a token may name a policy that does not exist yet; it grants nothing
    /// until the policy is written, then what the policy says.
    #[test]
    fn a_token_naming_a_policy_not_written_yet_gains_it_when_it_is() {
        let store = store_with(&[], vec![token(3, &["later"])]);
        let r = AclResolver::new(clock_at(0));
        let read = Need::Namespace("default".into(), &[Capability::ReadJob]);
        let id = r.resolve(&store.snapshot(), Some(&uuid(103))).unwrap();
        assert!(!id.acl.allows(&read));
        store.apply(
            3,
            Command::AclPolicyUpsert(AclPolicyUpsert {
                policies: vec![AclPolicy {
                    name: "later".into(),
                    rules: r#"namespace "default" { policy = "read" }"#.into(),
                    ..AclPolicy::default()
                }],
            }),
        );
        let id = r.resolve(&store.snapshot(), Some(&uuid(103))).unwrap();
        assert!(id.acl.allows(&read));
    }
}
