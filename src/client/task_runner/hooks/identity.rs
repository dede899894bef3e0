//! Workload identities (Nomad's `identity` hook): before each start, the task's identities
//! that ask to be given to it (`env`, `file`) are signed by the servers
//! (`Alloc.SignIdentities`) and put in its environment (`NOMAD_TOKEN`,
//! `NOMAD_TOKEN_<name>`) and/or written to its secrets directory (`secrets/nomad_token`,
//! `secrets/nomad_<name>.jwt`, or `filepath`). While the task runs, an identity with a `ttl`
//! is renewed at about half its remaining life ([`renew_after`]); the new token is written
//! and the task restarted or signalled as its `change_mode` says.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::future::BoxFuture;
use rand::Rng as _;
use teamster_storage::model::{Task, WorkloadIdentity};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{HookCtx, HookError, HookState, Prepared, TaskHook};
use crate::client::allocdir::write_task_file;
use crate::client::servers::Servers;
use crate::client::types::TaskControl;
use crate::rpc::service::alloc::{
    AllocSignIdentitiesRequest, SignedWorkloadIdentity, WorkloadIdentityRequest,
};
use crate::rpc::Services;

/// How long a start waits for its first tokens (Nomad's minute).
const FIRST_TOKENS_WAIT: Duration = Duration::from_secs(60);
/// The shortest wait before a renewal (Nomad's 10 s).
const MIN_RENEW_WAIT: Duration = Duration::from_secs(10);
/// The wait between failed attempts.
const RETRY: Duration = Duration::from_secs(2);

/// The `identity` hook of one task.
#[derive(Default)]
pub struct IdentityHook {
    /// Stops the renewal loop of the current run.
    renewing: Mutex<Option<CancellationToken>>,
    /// When each identity given at the last start expires (Unix nanoseconds), by name.
    expires: Mutex<BTreeMap<String, i64>>,
}

impl std::fmt::Debug for IdentityHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdentityHook").finish_non_exhaustive()
    }
}

/// The identities of `task` given to it: those with `env` or `file`.
pub fn given(task: &Task) -> Vec<&WorkloadIdentity> {
    task.identity
        .iter()
        .chain(task.identities.iter())
        .filter(|i| i.env || i.file)
        .collect()
}

/// How long to wait before renewing a token that expires at `expires` (Unix nanoseconds),
/// at `now`: half its remaining life plus `jitter` (a fraction in [0, 0.1) of it), at least
/// [`MIN_RENEW_WAIT`].
pub fn renew_after(now: i64, expires: i64, jitter: f64) -> Duration {
    let remaining = Duration::from_nanos(u64::try_from(expires.saturating_sub(now)).unwrap_or(0));
    let wait = remaining / 2 + remaining.mul_f64(jitter.clamp(0.0, 0.1));
    wait.max(MIN_RENEW_WAIT)
}

/// Why identities were not signed.
#[derive(Debug)]
enum SignError {
    /// The servers could not be asked, or failed: asking again may work.
    Unavailable(String),
    /// The servers refused (the allocation is gone or finished, the identity unknown):
    /// asking again will not help.
    Refused(String),
}

impl std::fmt::Display for SignError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SignError::Unavailable(e) | SignError::Refused(e) => f.write_str(e),
        }
    }
}

/// The token of `task`'s default identity (what its templates read Nomad with).
pub(super) async fn default_token(
    servers: &Servers,
    alloc_id: &str,
    task: &str,
) -> Result<String, String> {
    let names = [teamster_storage::model::DEFAULT_IDENTITY_NAME.to_string()];
    match sign(servers, alloc_id, task, &names).await {
        Ok(mut signed) if !signed.is_empty() => Ok(signed.remove(0).jwt),
        Ok(_) => Err("the default identity was not signed".into()),
        Err(e) => Err(e.to_string()),
    }
}

async fn sign(
    servers: &Servers,
    alloc_id: &str,
    task: &str,
    names: &[String],
) -> Result<Vec<SignedWorkloadIdentity>, SignError> {
    let answer = servers
        .alloc_sign_identities(AllocSignIdentitiesRequest {
            identities: names
                .iter()
                .map(|name| WorkloadIdentityRequest {
                    alloc_id: alloc_id.to_string(),
                    task: task.to_string(),
                    identity: name.clone(),
                })
                .collect(),
        })
        .await
        .map_err(|e| SignError::Unavailable(e.to_string()))?;
    if let Some((req, why)) = answer.rejections.first() {
        return Err(SignError::Refused(format!(
            "identity {:?} refused: {why}",
            req.identity
        )));
    }
    Ok(answer.signed)
}

/// Gives `identity` its token: in its file (if it asks for one), and in `env`.
fn deliver(
    ctx: &HookCtx,
    identity: &WorkloadIdentity,
    jwt: &str,
    env: &mut BTreeMap<String, String>,
) -> Result<(), String> {
    if identity.file {
        write_task_file(&ctx.task_dir, &identity.file_path(), jwt.as_bytes(), 0o600)
            .map_err(|e| format!("writing identity {:?}: {e}", identity.name))?;
    }
    if identity.env {
        env.insert(identity.env_var(), jwt.to_string());
    }
    Ok(())
}

impl TaskHook for IdentityHook {
    fn name(&self) -> &'static str {
        "identity"
    }

    fn prestart<'a>(
        &'a self,
        ctx: &'a HookCtx,
        _state: &'a mut HookState,
        prepared: &'a mut Prepared,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Box::pin(async move {
            let identities = given(&ctx.task);
            if identities.is_empty() {
                return Ok(());
            }
            let servers = ctx.servers.as_ref().ok_or_else(|| {
                HookError::recoverable(self.name(), "no servers to sign workload identities")
            })?;
            let names: Vec<String> = identities.iter().map(|i| i.name.clone()).collect();
            let deadline = tokio::time::Instant::now() + FIRST_TOKENS_WAIT;
            let signed = loop {
                match sign(servers, &ctx.alloc_id, &ctx.task.name, &names).await {
                    Ok(signed) => break signed,
                    Err(SignError::Unavailable(e))
                        if tokio::time::Instant::now() + RETRY < deadline =>
                    {
                        debug!(error = %e, "workload identities not signed yet; retrying");
                        tokio::time::sleep(RETRY).await;
                    }
                    Err(e) => {
                        return Err(HookError::recoverable(
                            self.name(),
                            format!("failed to sign workload identities: {e}"),
                        ))
                    }
                }
            };
            let mut expires = BTreeMap::new();
            for identity in identities {
                let Some(token) = signed.iter().find(|s| s.identity == identity.name) else {
                    return Err(HookError::recoverable(
                        self.name(),
                        format!("identity {:?} was not signed", identity.name),
                    ));
                };
                deliver(ctx, identity, &token.jwt, &mut prepared.env)
                    .map_err(|e| HookError::recoverable(self.name(), e))?;
                if let Some(at) = token.expiration {
                    expires.insert(identity.name.clone(), at);
                }
            }
            *self.expires.lock().unwrap_or_else(|p| p.into_inner()) = expires;
            Ok(())
        })
    }

    fn poststart<'a>(
        &'a self,
        ctx: &'a HookCtx,
        _state: &'a mut HookState,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        Box::pin(async move {
            let renewable: Vec<WorkloadIdentity> = given(&ctx.task)
                .into_iter()
                .filter(|i| i.ttl > 0)
                .cloned()
                .collect();
            let (Some(servers), false) = (ctx.servers.clone(), renewable.is_empty()) else {
                return Ok(());
            };
            let stop = CancellationToken::new();
            if let Some(old) = self
                .renewing
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .replace(stop.clone())
            {
                old.cancel();
            }
            let expires = self
                .expires
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            for identity in renewable {
                // Counted from when the token given at start was signed (before the start).
                let ttl = i64::try_from(identity.ttl).unwrap_or(i64::MAX);
                let first_expiry = expires
                    .get(&identity.name)
                    .copied()
                    .unwrap_or_else(|| now_nanos().saturating_add(ttl));
                tokio::spawn(renew_loop(
                    ctx.clone(),
                    servers.clone(),
                    identity,
                    first_expiry,
                    stop.clone(),
                ));
            }
            Ok(())
        })
    }

    fn exited<'a>(
        &'a self,
        _ctx: &'a HookCtx,
        _state: &'a mut HookState,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        self.stop_renewing();
        Box::pin(async { Ok(()) })
    }

    fn stop<'a>(
        &'a self,
        _ctx: &'a HookCtx,
        _state: &'a mut HookState,
    ) -> BoxFuture<'a, Result<(), HookError>> {
        self.stop_renewing();
        Box::pin(async { Ok(()) })
    }
}

impl IdentityHook {
    fn stop_renewing(&self) {
        if let Some(stop) = self
            .renewing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            stop.cancel();
        }
    }
}

/// Renews `identity` before it expires, for as long as the task runs this time.
fn now_nanos() -> i64 {
    crate::util::system_clock().now_unix_nanos()
}

/// Renews `identity` (whose current token expires at `expires`) before it expires, for as
/// long as the task runs this time; a refusal (the allocation finished, the identity gone)
/// ends it.
async fn renew_loop(
    ctx: HookCtx,
    servers: std::sync::Arc<Servers>,
    identity: WorkloadIdentity,
    mut expires: i64,
    stop: CancellationToken,
) {
    loop {
        let jitter = rand::thread_rng().gen_range(0.0..0.1);
        let wait = renew_after(now_nanos(), expires, jitter);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        let names = [identity.name.clone()];
        let signed = loop {
            match sign(&servers, &ctx.alloc_id, &ctx.task.name, &names).await {
                Ok(mut signed) if !signed.is_empty() => break signed.remove(0),
                Ok(_) => warn!(identity = %identity.name, "identity renewal answered nothing"),
                Err(SignError::Refused(e)) => {
                    info!(identity = %identity.name, reason = %e, "identity no longer renewed");
                    return;
                }
                Err(e) => {
                    warn!(identity = %identity.name, error = %e, "identity renewal failed; retrying")
                }
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(RETRY) => {}
            }
        };
        expires = signed.expiration.unwrap_or(i64::MAX);
        let mut env = BTreeMap::new();
        if let Err(e) = deliver(&ctx, &identity, &signed.jwt, &mut env) {
            warn!(identity = %identity.name, error = %e, "renewed identity not delivered");
            continue;
        }
        info!(identity = %identity.name, "workload identity renewed");
        let Some(control) = ctx.control.as_ref().and_then(mpsc::WeakSender::upgrade) else {
            return;
        };
        let (reply, _answer) = tokio::sync::oneshot::channel();
        let reason = format!("Identity[{}]: new token acquired", identity.name);
        let control_msg = match identity.change_mode.as_str() {
            "restart" => Some(TaskControl::Restart {
                reason: Some(reason),
                reply,
            }),
            "signal" => {
                crate::client::signal::parse(&identity.change_signal).map(|(name, signal)| {
                    TaskControl::Signal {
                        name,
                        signal,
                        reply,
                    }
                })
            }
            _ => None,
        };
        if let Some(msg) = control_msg {
            let _ = control.send(msg).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_comes_at_half_the_remaining_life_with_a_little_jitter_and_not_too_soon() {
        let s = 1_000_000_000i64;
        assert_eq!(renew_after(0, 3600 * s, 0.0), Duration::from_secs(1800));
        assert_eq!(renew_after(0, 3600 * s, 0.05), Duration::from_secs(1980));
        // Jitter is capped at 10 %.
        assert_eq!(renew_after(0, 3600 * s, 0.5), Duration::from_secs(2160));
        assert_eq!(renew_after(0, 4 * s, 0.0), MIN_RENEW_WAIT);
        assert_eq!(renew_after(10 * s, 0, 0.0), MIN_RENEW_WAIT);
    }

    #[test]
    fn only_identities_asking_for_env_or_file_are_given() {
        let mut task = Task {
            identity: Some(WorkloadIdentity {
                name: "default".into(),
                ..WorkloadIdentity::default()
            }),
            ..Task::default()
        };
        task.identities = vec![
            WorkloadIdentity {
                name: "vault".into(),
                file: true,
                ..WorkloadIdentity::default()
            },
            WorkloadIdentity {
                name: "other".into(),
                ..WorkloadIdentity::default()
            },
        ];
        let names: Vec<&str> = given(&task).iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["vault"]);
        task.identity.as_mut().unwrap().env = true;
        assert_eq!(given(&task).len(), 2);
        assert_eq!(task.identity.as_ref().unwrap().env_var(), "NOMAD_TOKEN");
        assert_eq!(task.identities[0].file_path(), "secrets/nomad_vault.jwt");
        assert_eq!(task.identities[0].env_var(), "NOMAD_TOKEN_vault");
    }
}
