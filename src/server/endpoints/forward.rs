//! Forwarding a service call to the leader: the request itself travels, typed, and the
//! leader's answer (or typed error) comes back unchanged.
//!
//! - [`hold`], for [`Route::Leader`](crate::rpc::service::Route::Leader) calls: serve here
//!   when this server leads, forward otherwise. While there is no leader, or the one asked
//!   has stopped leading, or nobody took the call, wait for leadership to move and try again,
//!   all within `server.rpc_hold_timeout` (Nomad's RPC hold); each forward gets what is left
//!   of it (at least a second), except the calls whose own deadline is longer than a write's
//!   (membership changes, restores). A call is sent again only when it certainly was not
//!   applied: `NotLeader`/`NoLeader` (never proposed), a connection that could not be made,
//!   or the leader's `Unavailable`. A forward that timed out or lost its connection may have
//!   been applied: it is reported (`NoAnswer`), never resent.
//! - [`once`], for [`Route::LeaderSubsystem`](crate::rpc::service::Route::LeaderSubsystem)
//!   calls: one forward to the leader raft names, no waiting; the caller (a scheduler
//!   worker) retries with its own backoff.
//!
//! A forwarded call carries the credential it was made with
//! ([`caller_token`](crate::rpc::service::credential::caller_token)), and the leader checks it
//! again ([`authz`](super::authz)): a server's word alone is not trusted without mutual TLS.

use std::time::Duration;

use tokio::time::Instant;

use super::{disabled_reason, Endpoints};
use crate::rpc::service::credential::caller_token;
use crate::rpc::service::{Method, WRITE_TIMEOUT};
use crate::rpc::{
    AuthedService, RpcError, RpcRequest, RpcResponse, ServiceError, ServiceRequest, ServiceResponse,
};

/// Pause before a forward that found nobody listening is sent again.
const RETRY_PAUSE: Duration = Duration::from_millis(250);
/// The shortest deadline one forward gets, however little of the hold is left.
const MIN_ATTEMPT: Duration = Duration::from_secs(1);

/// Serve `req` on the leader, waiting up to the hold timeout for one.
pub async fn hold(
    ep: &Endpoints,
    req: ServiceRequest,
    method: Method,
) -> Result<ServiceResponse, ServiceError> {
    let node = ep.node();
    let deadline = Instant::now() + ep.hold();
    loop {
        let Some((leader, addr)) = node.leader() else {
            let left = deadline.saturating_duration_since(Instant::now());
            if node.wait_leader(left).await.is_none() {
                return Err(ServiceError::NoLeader);
            }
            continue;
        };
        let outcome = if leader == node.id() {
            ep.serve(req.clone()).await
        } else {
            let left = deadline.saturating_duration_since(Instant::now());
            let timeout = attempt_timeout(method, left);
            match send(ep, leader, &addr.rpc_addr, req.clone(), timeout).await {
                Ok(answer) => answer,
                Err(e) => Err(ServiceError::from(e)),
            }
        };
        let now = Instant::now();
        if leader == node.id() && node.lease_lost() {
            // This server leads in name only: no quorum answers it. Say so now (the caller
            // retries) rather than wait for an election that may take the whole hold.
            return match outcome {
                Err(ServiceError::NotLeader { .. }) => Err(ServiceError::NoLeader),
                other => other,
            };
        }
        match outcome {
            // Not applied: try again once the leader moved (or, for `Unavailable`, after a
            // pause: the leader is restarting or nobody listened).
            Err(ServiceError::NotLeader { .. } | ServiceError::NoLeader) if now < deadline => {
                node.wait_leader_change(Some(leader), deadline).await;
            }
            Err(ServiceError::NotLeader { .. }) => return Err(ServiceError::NoLeader),
            Err(e @ ServiceError::Unavailable { .. }) if now < deadline => {
                tracing::debug!(leader, method = method.name, error = %e, "forward not taken, retrying");
                node.wait_leader_change(Some(leader), (now + RETRY_PAUSE).min(deadline))
                    .await;
            }
            other => return other,
        }
    }
}

/// The deadline of one forward of `method` with `left` of the hold timeout remaining.
fn attempt_timeout(method: Method, left: Duration) -> Duration {
    if method.timeout > WRITE_TIMEOUT {
        // Membership changes and restores take as long as they take (a joining server
        // catches up before it is promoted).
        method.timeout
    } else {
        method.timeout.min(left.max(MIN_ATTEMPT))
    }
}

/// Forward `req` once to the leader raft names; `Disabled` when there is none (or it is this
/// server, whose subsystems are not established) or it could not be reached.
pub async fn once(
    ep: &Endpoints,
    req: ServiceRequest,
    method: Method,
) -> Result<ServiceResponse, ServiceError> {
    let node = ep.node();
    let reason = disabled_reason(method);
    match node.leader() {
        Some((leader, addr)) if leader != node.id() => {
            match send(ep, leader, &addr.rpc_addr, req, method.timeout).await {
                Ok(answer) => answer,
                Err(e) => Err(ServiceError::disabled(format!(
                    "{reason}: forwarding to the leader failed: {e}"
                ))),
            }
        }
        _ => Err(ServiceError::disabled(reason)),
    }
}

/// One service call to `leader`: its answer, or the transport's error.
async fn send(
    ep: &Endpoints,
    leader: u64,
    addr: &str,
    req: ServiceRequest,
    timeout: Duration,
) -> Result<Result<ServiceResponse, ServiceError>, RpcError> {
    let name = req.method().name;
    // The caller's credential travels with the call: the leader checks it again.
    let request = match caller_token() {
        Some(token) => RpcRequest::AuthService(AuthedService { token, call: req }),
        None => RpcRequest::Service(req),
    };
    match ep
        .node()
        .pool()
        .call(leader, addr, request, timeout)
        .await?
    {
        RpcResponse::Service(answer) => Ok(answer),
        other => Ok(Err(ServiceError::unexpected(name, other.kind()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::service::{Route, OPERATOR_TIMEOUT};

    #[test]
    fn a_forward_gets_what_is_left_of_the_hold_but_long_calls_keep_their_deadline() {
        let write = Method {
            name: "Job.Register",
            route: Route::Leader,
            timeout: WRITE_TIMEOUT,
        };
        assert_eq!(
            attempt_timeout(write, Duration::from_secs(4)),
            Duration::from_secs(4)
        );
        assert_eq!(attempt_timeout(write, Duration::ZERO), MIN_ATTEMPT);
        let join = Method {
            name: "Operator.RaftJoin",
            route: Route::Leader,
            timeout: OPERATOR_TIMEOUT,
        };
        assert_eq!(
            attempt_timeout(join, Duration::from_secs(1)),
            OPERATOR_TIMEOUT
        );
    }
}
