//! `ACL.*`: the bootstrap, policies and tokens are written through raft (the state store
//! checks names, that a token's policies exist and the bootstrap's reset index); rules are
//! parsed here before they are written, so the state never holds a policy that does not
//! parse. `ACL.ResolveToken` answers from this server's state for client agents.
//!
//! Secrets and accessors come from the operating system's random source (UUID v4), never
//! from the seedable randomness seam.

use teamster_storage::fsm::{
    AclBootstrap, AclPolicyDelete, AclPolicyUpsert, AclTokenDelete, AclTokenUpsert, Command,
    OneTimeTokenExchange, OneTimeTokenUpsert,
};
use teamster_storage::model::{
    is_uuid, AclToken, OneTimeToken, Timestamp, ANONYMOUS_POLICY, ONE_TIME_TOKEN_TTL_NANOS,
    TOKEN_TYPE_CLIENT, TOKEN_TYPE_MANAGEMENT,
};

use super::Endpoints;
use crate::acl::parse_policy;
use crate::rpc::service::acl::{
    AclBootstrapRequest, AclDeletePoliciesRequest, AclDeleteTokensRequest, AclResolveTokenRequest,
    AclResolvedToken, AclUpsertPoliciesRequest, AclUpsertTokensRequest,
    OneTimeTokenExchangeRequest, OneTimeTokenUpsertRequest,
};
use crate::rpc::ServiceError;
use crate::server::acl::AclError;

/// The most policies or tokens one call may carry.
const MAX_PER_CALL: usize = 256;

fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn disabled() -> ServiceError {
    ServiceError::invalid("", "ACL support disabled")
}

fn count_ok(n: usize, what: &str) -> Result<(), ServiceError> {
    if n == 0 || n > MAX_PER_CALL {
        return Err(ServiceError::invalid(
            what,
            format!("between 1 and {MAX_PER_CALL} {what}"),
        ));
    }
    Ok(())
}

/// `ACL.Bootstrap`: the management token, made once (again only with the reset index).
pub async fn bootstrap(ep: &Endpoints, req: AclBootstrapRequest) -> Result<AclToken, ServiceError> {
    if !ep.acl_enabled() {
        return Err(disabled());
    }
    let secret_id = if req.secret_id.is_empty() {
        new_uuid()
    } else if is_uuid(&req.secret_id) {
        req.secret_id
    } else {
        return Err(ServiceError::invalid(
            "BootstrapSecret",
            "invalid acl token",
        ));
    };
    let token = AclToken {
        accessor_id: new_uuid(),
        secret_id,
        name: "Bootstrap Token".into(),
        r#type: TOKEN_TYPE_MANAGEMENT.into(),
        global: true,
        create_time: Timestamp::from_unix_nanos(ep.now()),
        ..AclToken::default()
    };
    let accessor = token.accessor_id.clone();
    ep.write(Command::AclBootstrap(AclBootstrap {
        token,
        reset_index: req.reset_index,
    }))
    .await?;
    stored_token(ep, &accessor)
}

fn stored_token(ep: &Endpoints, accessor: &str) -> Result<AclToken, ServiceError> {
    ep.node()
        .state()
        .snapshot()
        .acl_token_by_accessor(accessor)
        .map(|t| (**t).clone())
        .ok_or_else(|| ServiceError::internal("the token written is not in the state"))
}

/// `ACL.UpsertPolicies`: the raft index. Every policy's rules must parse.
pub async fn upsert_policies(
    ep: &Endpoints,
    req: AclUpsertPoliciesRequest,
) -> Result<u64, ServiceError> {
    if !ep.acl_enabled() {
        return Err(disabled());
    }
    count_ok(req.policies.len(), "Policies")?;
    for p in &req.policies {
        p.validate_name()
            .map_err(|reason| ServiceError::invalid("Name", reason))?;
        parse_policy(&p.rules)
            .map_err(|e| ServiceError::invalid("Rules", format!("policy {:?}: {e}", p.name)))?;
    }
    let (index, _) = ep
        .write(Command::AclPolicyUpsert(AclPolicyUpsert {
            policies: req.policies,
        }))
        .await?;
    Ok(index)
}

/// `ACL.DeletePolicies`: the raft index.
pub async fn delete_policies(
    ep: &Endpoints,
    req: AclDeletePoliciesRequest,
) -> Result<u64, ServiceError> {
    if !ep.acl_enabled() {
        return Err(disabled());
    }
    count_ok(req.names.len(), "Names")?;
    let (index, _) = ep
        .write(Command::AclPolicyDelete(AclPolicyDelete {
            names: req.names,
        }))
        .await?;
    Ok(index)
}

/// `ACL.UpsertTokens`: the tokens as stored, secrets included. A token without an accessor
/// is new (accessor and secret are made here, its expiry from `ExpirationTTL`); one with an
/// accessor must exist and keeps its secret.
pub async fn upsert_tokens(
    ep: &Endpoints,
    req: AclUpsertTokensRequest,
) -> Result<Vec<AclToken>, ServiceError> {
    if !ep.acl_enabled() {
        return Err(disabled());
    }
    count_ok(req.tokens.len(), "Tokens")?;
    if req.expiration_ttl_ns < 0 {
        return Err(ServiceError::invalid(
            "ExpirationTTL",
            "ExpirationTTL must not be negative",
        ));
    }
    let now = ep.now();
    let snap = ep.node().state().snapshot();
    let mut tokens = Vec::with_capacity(req.tokens.len());
    for mut t in req.tokens {
        if t.r#type.is_empty() {
            t.r#type = TOKEN_TYPE_CLIENT.into();
        }
        if t.accessor_id.is_empty() {
            t.accessor_id = new_uuid();
            t.secret_id = new_uuid();
            t.create_time = Timestamp::from_unix_nanos(now);
            if req.expiration_ttl_ns > 0 {
                t.expiration_time = Some(Timestamp::from_unix_nanos(
                    now.saturating_add(req.expiration_ttl_ns),
                ));
            }
        } else {
            let Some(existing) = snap.acl_token_by_accessor(&t.accessor_id) else {
                return Err(ServiceError::not_found("ACL token", t.accessor_id));
            };
            t.secret_id = existing.secret_id.clone();
            t.expiration_time = existing.expiration_time;
        }
        t.validate()
            .map_err(|reason| ServiceError::invalid("Type", reason))?;
        tokens.push(t);
    }
    let accessors: Vec<String> = tokens.iter().map(|t| t.accessor_id.clone()).collect();
    ep.write(Command::AclTokenUpsert(AclTokenUpsert { tokens }))
        .await?;
    accessors.iter().map(|a| stored_token(ep, a)).collect()
}

/// `ACL.DeleteTokens`: the raft index.
pub async fn delete_tokens(
    ep: &Endpoints,
    req: AclDeleteTokensRequest,
) -> Result<u64, ServiceError> {
    if !ep.acl_enabled() {
        return Err(disabled());
    }
    count_ok(req.accessor_ids.len(), "AccessorIDs")?;
    let (index, _) = ep
        .write(Command::AclTokenDelete(AclTokenDelete {
            accessor_ids: req.accessor_ids,
        }))
        .await?;
    Ok(index)
}

/// `ACL.ResolveToken`: the token (secret blanked) and its policies that exist; the
/// `anonymous` policy for no secret. An unknown or expired secret is refused.
pub fn resolve_token(
    ep: &Endpoints,
    req: AclResolveTokenRequest,
) -> Result<AclResolvedToken, ServiceError> {
    let snap = ep.node().state().snapshot();
    if crate::keyring::looks_like_jwt(&req.secret_id) {
        let claims = ep.keyring().verify(&snap, &req.secret_id);
        let identity = crate::server::acl::workload_identity(&snap, claims).map_err(denied)?;
        let workload_group = identity
            .claims
            .as_ref()
            .and_then(|c| snap.alloc_by_id(&c.nomad_allocation_id))
            .map(|a| a.task_group.to_string())
            .unwrap_or_default();
        return Ok(AclResolvedToken {
            token: None,
            policies: Vec::new(),
            workload_claims: identity
                .claims
                .map(|c| serde_json::to_string(&*c).expect("claims encode")),
            workload_group,
        });
    }
    if req.secret_id.is_empty() {
        return Ok(AclResolvedToken {
            workload_claims: None,
            workload_group: String::new(),
            token: None,
            policies: snap
                .acl_policy(ANONYMOUS_POLICY)
                .map(|p| vec![(**p).clone()])
                .unwrap_or_default(),
        });
    }
    let Some(token) = snap.acl_token_by_secret(&req.secret_id) else {
        return Err(denied(AclError::TokenNotFound));
    };
    if token.expired(ep.now()) {
        return Err(denied(AclError::TokenExpired));
    }
    let policies = token
        .policies
        .iter()
        .filter_map(|name| snap.acl_policy(name).map(|p| (**p).clone()))
        .collect();
    Ok(AclResolvedToken {
        workload_claims: None,
        workload_group: String::new(),
        token: Some(token.stub()),
        policies,
    })
}

/// An ACL refusal as a service error.
pub fn denied(e: AclError) -> ServiceError {
    ServiceError::PermissionDenied {
        reason: e.to_string(),
    }
}

/// `ACL.UpsertOneTimeToken`: a one-time token, valid ten minutes, for the ACL token whose
/// secret the caller holds (Nomad's: permission denied for anything else).
pub async fn upsert_one_time_token(
    ep: &Endpoints,
    req: OneTimeTokenUpsertRequest,
) -> Result<OneTimeToken, ServiceError> {
    if !ep.acl_enabled() {
        return Err(disabled());
    }
    let snap = ep.node().state().snapshot();
    let now = ep.now();
    let token = snap
        .acl_token_by_secret(&req.secret_id)
        .filter(|t| !t.expired(now))
        .ok_or_else(|| denied(AclError::PermissionDenied))?;
    let ott = OneTimeToken {
        one_time_secret_id: new_uuid(),
        accessor_id: token.accessor_id.clone(),
        expires_at: Timestamp::from_unix_nanos(now.saturating_add(ONE_TIME_TOKEN_TTL_NANOS)),
        ..OneTimeToken::default()
    };
    let (index, _) = ep
        .write(Command::OneTimeTokenUpsert(OneTimeTokenUpsert {
            token: ott.clone(),
            now,
        }))
        .await?;
    Ok(OneTimeToken {
        create_index: index,
        modify_index: index,
        ..ott
    })
}

/// `ACL.ExchangeOneTimeToken`: the ACL token (secret included) a valid one-time secret
/// stands for, and the raft index at which its one-time tokens were removed.
pub async fn exchange_one_time_token(
    ep: &Endpoints,
    req: OneTimeTokenExchangeRequest,
) -> Result<(AclToken, u64), ServiceError> {
    if !ep.acl_enabled() {
        return Err(disabled());
    }
    let snap = ep.node().state().snapshot();
    let now = ep.now();
    let ott = snap
        .one_time_token(&req.one_time_secret_id)
        .filter(|t| t.expires_at.unix_nanos().is_some_and(|at| at > now))
        .cloned()
        .ok_or_else(|| denied(AclError::PermissionDenied))?;
    let token = snap
        .acl_token_by_accessor(&ott.accessor_id)
        .filter(|t| !t.expired(now))
        .map(|t| (**t).clone())
        .ok_or_else(|| denied(AclError::PermissionDenied))?;
    // The state machine decides: of two exchanges racing, only the first applies.
    let applied = ep
        .node()
        .write_local(Command::OneTimeTokenExchange(OneTimeTokenExchange {
            one_time_secret_id: req.one_time_secret_id,
            now,
        }))
        .await
        .map_err(super::write_error)?;
    if super::first_rejection(&applied.response).is_some() {
        return Err(denied(AclError::PermissionDenied));
    }
    Ok((token, applied.index))
}
