//! ACL policies and their checks, pure: Nomad's policy language parsed ([`policy`]) and a
//! token's policies compiled into an [`Acl`] that answers "may this caller do that"
//! ([`compile`]). The server resolves tokens and caches compiled ACLs; the HTTP API and the
//! service layer ask the [`Acl`]; nothing here does I/O.
//!
//! May import: `util`, the storage crate's model.

pub mod compile;
pub mod policy;

pub use compile::{Acl, Need, WorkloadClaim};
pub use policy::{parse_policy, Capability, Level, Policy, PolicyError, VarCap, VarCaps};

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::util::{duration_str, InvalidSetting};

/// The agent's `[acl]` section: whether every API route and RPC checks a token, and how long
/// a client-only agent trusts a token it resolved through the servers.
///
/// ```toml
/// [acl]
/// enabled = true
/// token_ttl = "30s"
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AclConfig {
    /// Check tokens (every server and client of a cluster must agree).
    pub enabled: bool,
    /// How long a client-only agent caches a token the servers resolved (Nomad's
    /// `token_ttl`). Servers resolve from their own state and need no cache lifetime.
    #[serde(with = "duration_str")]
    pub token_ttl: Duration,
}

impl Default for AclConfig {
    fn default() -> Self {
        AclConfig {
            enabled: false,
            token_ttl: Duration::from_secs(30),
        }
    }
}

impl AclConfig {
    /// The longest `token_ttl` accepted: a revoked token must stop working in reasonable time.
    pub const MAX_TOKEN_TTL: Duration = Duration::from_secs(3600);

    /// Checks the section.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if self.token_ttl.is_zero() || self.token_ttl > Self::MAX_TOKEN_TTL {
            return Err(InvalidSetting::new(
                "acl.token_ttl",
                format!("must be between 1ms and {}s", Self::MAX_TOKEN_TTL.as_secs()),
            ));
        }
        Ok(())
    }
}
