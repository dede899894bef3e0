//! The payloads of the `ACL.*` calls: the bootstrap, policies and tokens written through
//! raft, and the resolution of a token for a client agent (which holds no state).

use serde::{Deserialize, Serialize};
use teamster_storage::model::{AclPolicy, AclToken};

/// `ACL.Bootstrap`: create the first management token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclBootstrapRequest {
    /// The secret the operator chose (a UUID), or empty for a random one.
    pub secret_id: String,
    /// The reset index read from the answering server's data directory (0: none).
    pub reset_index: u64,
}

/// `ACL.UpsertPolicies`: create or change policies (rules checked by the server).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclUpsertPoliciesRequest {
    /// The policies.
    pub policies: Vec<AclPolicy>,
}

/// `ACL.DeletePolicies`: delete policies by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclDeletePoliciesRequest {
    /// Their names.
    pub names: Vec<String>,
}

/// `ACL.UpsertTokens`: create tokens (no accessor: new; the server picks accessor and
/// secret) or change them (by accessor).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclUpsertTokensRequest {
    /// The tokens.
    pub tokens: Vec<AclToken>,
    /// Lifetime of new tokens in nanoseconds (Nomad's `ExpirationTTL`), 0 for none.
    pub expiration_ttl_ns: i64,
}

/// `ACL.DeleteTokens`: delete tokens by accessor ID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclDeleteTokensRequest {
    /// Their accessor IDs.
    pub accessor_ids: Vec<String>,
}

/// `ACL.ResolveToken`: a client agent asks what a secret may do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclResolveTokenRequest {
    /// The secret (empty: the anonymous caller).
    pub secret_id: String,
}

/// The answer to `ACL.ResolveToken`: the token (secret blanked) and the policies it names
/// that exist; for the anonymous caller no token and the `anonymous` policy if it exists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AclResolvedToken {
    /// The token.
    pub token: Option<AclToken>,
    /// Its policies.
    pub policies: Vec<AclPolicy>,
    /// For a workload identity: its claims, as JSON (the token and policies are empty).
    pub workload_claims: Option<String>,
    /// For a workload identity: its allocation's task group (not among the claims).
    pub workload_group: String,
}

/// `ACL.UpsertOneTimeToken`: a one-time token for the caller's own ACL token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OneTimeTokenUpsertRequest {
    /// The caller's ACL token secret: the one-time token stands for it.
    pub secret_id: String,
}

/// `ACL.ExchangeOneTimeToken`: the one-time secret given back for the ACL token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OneTimeTokenExchangeRequest {
    /// The one-time secret.
    pub one_time_secret_id: String,
}
