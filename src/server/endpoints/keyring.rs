//! `Alloc.SignIdentities` and `Keyring.*`: the workload identities a client's tasks get,
//! signed by the active root key, and the operator's rotation and removal of root keys.
//!
//! An identity is signed only for an allocation that exists and is not terminal, for a task
//! of it and an identity that task has (`default` always); its claims are Nomad's.

use teamster_storage::model::{RootKeyMeta, WorkloadIdentity, DEFAULT_IDENTITY_NAME};
use teamster_storage::state::{Snapshot, Table};

use super::Endpoints;
use crate::keyring::IdentityClaims;
use crate::rpc::service::alloc::{
    AllocSignIdentitiesRequest, AllocSignIdentitiesResponse, SignedWorkloadIdentity,
    WorkloadIdentityRequest,
};
use crate::rpc::service::operator::{
    KeyringDeleteRequest, KeyringPublicKey, KeyringPublicKeys, KeyringRotateRequest,
};
use crate::rpc::ServiceError;
use crate::server::keyring::ServerKeyringError;

/// The most identities one call may ask for.
pub const MAX_IDENTITIES_PER_CALL: usize = 1024;

const NANOS: i64 = 1_000_000_000;

/// A keyring failure as the caller sees it.
pub fn keyring_error(e: ServerKeyringError) -> ServiceError {
    match e {
        ServerKeyringError::Refused(reason) => ServiceError::invalid("", reason),
        ServerKeyringError::Write(w) => super::write_error(w),
        ServerKeyringError::NotInitialized => ServiceError::Unavailable {
            reason: e.to_string(),
        },
        other => ServiceError::internal(other.to_string()),
    }
}

/// The identity `req` names, with the claims to sign for it, or why there is none.
fn claims_for(
    snap: &Snapshot,
    req: &WorkloadIdentityRequest,
    now: i64,
    jti: String,
) -> Result<(IdentityClaims, Option<i64>), String> {
    let alloc = snap
        .alloc_by_id(&req.alloc_id)
        .ok_or("allocation does not exist")?;
    // A stopping allocation's tasks (poststop tasks, renewals during a shutdown delay)
    // still get theirs, as in Nomad: only a finished allocation is refused.
    if alloc.client_terminal_status() {
        return Err("allocation is terminal".into());
    }
    let job = snap
        .alloc_job(alloc)
        .ok_or("allocation's job does not exist")?;
    let task = job
        .task_groups
        .iter()
        .find(|g| g.name == alloc.task_group.as_str())
        .and_then(|g| g.tasks.iter().find(|t| t.name == req.task))
        .ok_or_else(|| format!("task {:?} not found", req.task))?;
    let identity = if req.identity == DEFAULT_IDENTITY_NAME {
        let mut default = task.identity.clone().unwrap_or_default();
        default.canonicalize();
        default
    } else {
        task.identities
            .iter()
            .find(|i| i.name == req.identity)
            .cloned()
            .ok_or_else(|| format!("identity {:?} not found", req.identity))?
    };
    let WorkloadIdentity {
        name,
        audience,
        ttl,
        ..
    } = identity;
    let now_secs = now / NANOS;
    let ttl_nanos = i64::try_from(ttl).unwrap_or(i64::MAX);
    let expiration = (ttl > 0).then(|| now.saturating_add(ttl_nanos));
    let job_id = if job.parent_id.is_empty() {
        job.id.to_string()
    } else {
        job.parent_id.to_string()
    };
    let claims = IdentityClaims {
        nomad_namespace: alloc.namespace.to_string(),
        nomad_job_id: job_id.clone(),
        nomad_allocation_id: alloc.id.to_string(),
        nomad_task: req.task.clone(),
        sub: format!(
            "{}:{}:{}:{}:{}:{}",
            job.region, alloc.namespace, job_id, alloc.task_group, req.task, name
        ),
        aud: audience,
        iat: now_secs,
        nbf: now_secs,
        exp: expiration.map(|e| e / NANOS),
        jti,
        iss: String::new(),
    };
    Ok((claims, expiration))
}

/// `Alloc.SignIdentities`.
pub async fn sign_identities(
    ep: &Endpoints,
    req: AllocSignIdentitiesRequest,
) -> Result<AllocSignIdentitiesResponse, ServiceError> {
    if req.identities.len() > MAX_IDENTITIES_PER_CALL {
        return Err(ServiceError::invalid(
            "Identities",
            format!("at most {MAX_IDENTITIES_PER_CALL} identities per call"),
        ));
    }
    let snap = ep.node().state().snapshot();
    let now = ep.now();
    let mut out = AllocSignIdentitiesResponse::default();
    for r in req.identities {
        match claims_for(&snap, &r, now, ep.rng().uuid()) {
            Ok((claims, expiration)) => {
                let (jwt, _) = ep
                    .keyring()
                    .sign(&snap, claims)
                    .await
                    .map_err(keyring_error)?;
                out.signed.push(SignedWorkloadIdentity {
                    alloc_id: r.alloc_id,
                    task: r.task,
                    identity: r.identity,
                    jwt,
                    expiration,
                });
            }
            Err(reason) => out.rejections.push((r, reason)),
        }
    }
    Ok(out)
}

/// `Keyring.Rotate`.
pub async fn rotate(
    ep: &Endpoints,
    req: KeyringRotateRequest,
) -> Result<RootKeyMeta, ServiceError> {
    if req.full && req.publish_time.is_some() {
        return Err(ServiceError::invalid(
            "full",
            "a full rotation re-encrypts under the new key at once: not with a publish time",
        ));
    }
    let keyring = ep.keyring();
    let meta = if req.full {
        keyring.rotate_full().await
    } else {
        keyring.rotate(req.publish_time).await
    }
    .map_err(keyring_error)?;
    if req.full {
        // In the background, as Nomad's: the rotation answers at once. Should this leader
        // stop first, the next one's keyring check carries on.
        let keyring = keyring.clone();
        tokio::spawn(async move {
            match keyring.rekey().await {
                Ok(n) => tracing::info!(variables = n, "full rotation: variables re-encrypted"),
                Err(e) => {
                    tracing::warn!(error = %e, "full rotation paused; the keyring check carries on")
                }
            }
        });
    }
    Ok(meta)
}

/// `Keyring.Delete`.
pub async fn delete(ep: &Endpoints, req: KeyringDeleteRequest) -> Result<u64, ServiceError> {
    ep.keyring()
        .remove(&req.key_id)
        .await
        .map_err(keyring_error)
}

/// `Keyring.ListPublic`: from this server's state.
pub fn list_public(ep: &Endpoints) -> KeyringPublicKeys {
    public_keys(ep, &ep.node().state().snapshot())
}

/// The public keys of `snap`, with the settings that shape their publication.
pub fn public_keys(ep: &Endpoints, snap: &Snapshot) -> KeyringPublicKeys {
    let settings = ep.keyring().settings();
    KeyringPublicKeys {
        keys: crate::keyring::public_keys(snap.root_keys().map(|k| &**k))
            .map(|(key_id, public_key, create_time)| KeyringPublicKey {
                key_id: key_id.to_string(),
                public_key: public_key.to_vec(),
                create_time,
            })
            .collect(),
        rotation_threshold_secs: settings.rotation_threshold.as_secs(),
        oidc_issuer: settings.oidc_issuer.clone(),
        index: snap.max_index(&[Table::RootKeys]),
    }
}
