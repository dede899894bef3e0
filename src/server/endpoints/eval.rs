//! `Eval.Dequeue`, `Eval.Ack`, `Eval.Nack`, `Eval.Update`, `Eval.Create`, `Eval.Reblock` and
//! `Plan.Submit`: served by the leader from its broker, blocked-evals tracker and plan queue
//! once leadership is established; forwarded to the leader from a follower, once.
//!
//! Who may be forwarded: a call made in-process by this server's own workers
//! ([`RequestContext::local`](crate::rpc::RequestContext::local)), or one from a caller that
//! is not a raft member (a client agent, a tool). A call that another server already forwarded
//! is never forwarded again: a server that is not an established leader answers it with
//! [`RpcError::Disabled`] ("eval broker disabled", "plan queue is disabled"), and the caller
//! re-resolves the leader and retries.
//!
//! Every answer travels inside the request's own response variant (`RpcResponse::EvalAck(Err(…))`),
//! so a forwarded answer is passed back unchanged.

use std::sync::Arc;
use std::time::Duration;

use teamster_storage::fsm::{Command, CommandResponse, EvalUpsert};
use teamster_storage::model::{EvalStatus, Evaluation};
use teamster_storage::raft_types::ServerId;

use crate::rpc::{DequeuedEval, RpcError, RpcRequest, RpcResponse};
use crate::server::eval_broker::{BrokerError, DEFAULT_DEQUEUE_TIMEOUT};
use crate::server::leader::LeadershipState;
use crate::server::pipeline::EvalPipeline;
use crate::server::plan_queue::{PlanQueue, PlanQueueError};

use crate::server::raft::RaftNode;

/// The scheduler version the leader accepts in `Eval.Dequeue` (Nomad's
/// `scheduler.SchedulerVersion`).
pub const SCHEDULER_VERSION: u32 = 1;

/// Longest wait one `Eval.Dequeue` may ask for.
pub const MAX_DEQUEUE_TIMEOUT: Duration = Duration::from_secs(60);

/// Extra time a forwarded call gets beyond its own wait.
const FORWARD_MARGIN: Duration = Duration::from_secs(5);
/// Deadline of a forwarded `Plan.Submit` (the plan may wait behind others and a commit).
const FORWARD_PLAN_TIMEOUT: Duration = Duration::from_secs(60);
/// Deadline of the other forwarded calls (they write through raft).
const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);

/// The leader-side subsystems the endpoints serve from.
#[derive(Debug, Clone)]
pub struct LeaderSide {
    /// Broker and blocked evals.
    pub pipeline: EvalPipeline,
    /// The plan queue.
    pub plans: PlanQueue,
    /// Whether leader duties are established on this server.
    pub leadership: LeadershipState,
}

/// True for the requests this module serves.
pub fn is_leader_side(req: &RpcRequest) -> bool {
    matches!(
        req,
        RpcRequest::EvalDequeue { .. }
            | RpcRequest::EvalAck { .. }
            | RpcRequest::EvalNack { .. }
            | RpcRequest::EvalUpdate { .. }
            | RpcRequest::EvalCreate { .. }
            | RpcRequest::EvalReblock { .. }
            | RpcRequest::PlanSubmit { .. }
    )
}

/// Serves `req` here if this server is the established leader, else forwards it (if allowed)
/// or answers that the leader-side subsystems are disabled here.
pub async fn serve(
    node: Arc<RaftNode>,
    side: Option<LeaderSide>,
    from: ServerId,
    req: RpcRequest,
) -> Result<RpcResponse, RpcError> {
    let established =
        side.as_ref().is_some_and(|s| s.leadership.is_established()) && node.is_leader();
    if let (true, Some(side)) = (established, side.as_ref()) {
        return Ok(serve_local(&node, side, req).await);
    }
    let may_forward = from == node.id()
        || from == 0
        || !node
            .membership()
            .servers
            .iter()
            .any(|(id, _, _)| *id == from);
    match node.leader() {
        Some((leader, addr)) if may_forward && leader != node.id() => {
            let timeout = match &req {
                RpcRequest::EvalDequeue { timeout_ms, .. } => {
                    dequeue_timeout(*timeout_ms) + FORWARD_MARGIN
                }
                RpcRequest::PlanSubmit { .. } => FORWARD_PLAN_TIMEOUT,
                _ => FORWARD_TIMEOUT,
            };
            let kind = req.kind();
            match node.pool().call(leader, &addr.rpc_addr, req, timeout).await {
                Ok(resp) => Ok(resp),
                // The answer of a leader that is gone or unreachable: "no leader here".
                Err(e) => Ok(error_response(
                    kind,
                    RpcError::Disabled(format!(
                        "{}: forwarding to the leader failed: {e}",
                        disabled_message(kind)
                    )),
                )),
            }
        }
        _ => {
            let kind = req.kind();
            Ok(error_response(
                kind,
                RpcError::Disabled(disabled_message(kind).to_string()),
            ))
        }
    }
}

fn dequeue_timeout(timeout_ms: u64) -> Duration {
    if timeout_ms == 0 {
        DEFAULT_DEQUEUE_TIMEOUT
    } else {
        Duration::from_millis(timeout_ms).min(MAX_DEQUEUE_TIMEOUT)
    }
}

fn disabled_message(kind: &str) -> &'static str {
    if kind == "Plan.Submit" {
        "plan queue is disabled"
    } else {
        "eval broker disabled"
    }
}

/// The response variant of `kind` carrying `err`.
fn error_response(kind: &str, err: RpcError) -> RpcResponse {
    match kind {
        "Eval.Dequeue" => RpcResponse::EvalDequeue(Err(err)),
        "Eval.Ack" => RpcResponse::EvalAck(Err(err)),
        "Eval.Nack" => RpcResponse::EvalNack(Err(err)),
        "Eval.Update" => RpcResponse::EvalUpdate(Err(err)),
        "Eval.Create" => RpcResponse::EvalCreate(Err(err)),
        "Eval.Reblock" => RpcResponse::EvalReblock(Err(err)),
        _ => RpcResponse::PlanSubmit(Err(err)),
    }
}

/// A broker or tracker refusal as the caller sees it.
pub fn broker_error(e: BrokerError) -> RpcError {
    match e {
        BrokerError::Disabled | BrokerError::BlockedEvalsDisabled => {
            RpcError::Disabled(e.to_string())
        }
        other => RpcError::Rejected(other.to_string()),
    }
}

pub(super) fn plan_error(e: PlanQueueError) -> RpcError {
    match e {
        PlanQueueError::Disabled | PlanQueueError::Flushed => RpcError::Disabled(e.to_string()),
        other => RpcError::Remote(other.to_string()),
    }
}

async fn serve_local(node: &RaftNode, side: &LeaderSide, req: RpcRequest) -> RpcResponse {
    let broker = side.pipeline.broker();
    let started = tokio::time::Instant::now();
    let kind = req.kind();
    let resp = match req {
        RpcRequest::EvalDequeue {
            schedulers,
            timeout_ms,
            scheduler_version,
        } => RpcResponse::EvalDequeue(
            dequeue(node, side, schedulers, timeout_ms, scheduler_version).await,
        ),
        RpcRequest::EvalAck { eval_id, token } => {
            RpcResponse::EvalAck(broker.ack(&eval_id, &token).map_err(broker_error))
        }
        RpcRequest::EvalNack { eval_id, token } => {
            RpcResponse::EvalNack(broker.nack(&eval_id, &token).map_err(broker_error))
        }
        RpcRequest::EvalUpdate { eval, token } => {
            RpcResponse::EvalUpdate(update(node, side, *eval, &token).await)
        }
        RpcRequest::EvalCreate { eval, token } => {
            RpcResponse::EvalCreate(create(node, side, *eval, &token).await)
        }
        RpcRequest::EvalReblock { eval, token } => {
            RpcResponse::EvalReblock(reblock(node, side, *eval, &token))
        }
        RpcRequest::PlanSubmit { plan } => {
            RpcResponse::PlanSubmit(super::plan::submit(side, *plan).await)
        }
        other => error_response(
            other.kind(),
            RpcError::Unsupported {
                kind: other.kind().to_string(),
            },
        ),
    };
    metrics::histogram!("teamster_rpc_leader_side_seconds", "kind" => kind)
        .record(started.elapsed().as_secs_f64());
    resp
}

async fn dequeue(
    node: &RaftNode,
    side: &LeaderSide,
    schedulers: Vec<String>,
    timeout_ms: u64,
    scheduler_version: u32,
) -> Result<Option<DequeuedEval>, RpcError> {
    if scheduler_version != SCHEDULER_VERSION {
        return Err(RpcError::Rejected(format!(
            "dequeue disallowed: calling scheduler version is {scheduler_version}; leader version is {SCHEDULER_VERSION}"
        )));
    }
    let broker = side.pipeline.broker();
    let found = broker
        .dequeue(&schedulers, dequeue_timeout(timeout_ms))
        .await
        .map_err(broker_error)?;
    let Some((eval, token)) = found else {
        return Ok(None);
    };
    // The highest ModifyIndex among the job's evals: the worker's state must reach it.
    let snapshot = node.state().snapshot();
    let wait_index = snapshot
        .evals_by_job(&eval.namespace, &eval.job_id)
        .map(|e| e.modify_index)
        .max()
        .unwrap_or(0)
        .max(eval.modify_index)
        .max(1);
    Ok(Some(DequeuedEval {
        eval,
        token: token.to_string(),
        wait_index,
    }))
}

/// Commits `evals` through raft on this (leader) server.
async fn write_evals(node: &RaftNode, evals: Vec<Evaluation>) -> Result<u64, RpcError> {
    let applied = node
        .write_local(Command::EvalUpsert(EvalUpsert { evals }))
        .await
        .map_err(super::write_error_to_rpc)?;
    match applied.response {
        CommandResponse::Rejected(e) => Err(RpcError::Rejected(e.to_string())),
        _ => Ok(applied.index),
    }
}

async fn update(
    node: &RaftNode,
    side: &LeaderSide,
    eval: Evaluation,
    token: &str,
) -> Result<u64, RpcError> {
    side.pipeline
        .broker()
        .outstanding_reset(&eval.id, token)
        .map_err(broker_error)?;
    write_evals(node, vec![eval]).await
}

async fn create(
    node: &RaftNode,
    side: &LeaderSide,
    eval: Evaluation,
    token: &str,
) -> Result<u64, RpcError> {
    let broker = side.pipeline.broker();
    if eval.previous_eval.is_empty() {
        return Err(RpcError::Rejected(
            "new evaluation must name its PreviousEval".into(),
        ));
    }
    match broker
        .outstanding(&eval.previous_eval)
        .map_err(broker_error)?
    {
        Some(t) if t.as_str() == token => {}
        Some(_) => {
            return Err(RpcError::Rejected(
                "previous evaluation token does not match".into(),
            ))
        }
        None => {
            return Err(RpcError::Rejected(
                "previous evaluation is not outstanding".into(),
            ))
        }
    }
    broker
        .outstanding_reset(&eval.previous_eval, token)
        .map_err(broker_error)?;
    if node.state().snapshot().eval_by_id(&eval.id).is_some() {
        return Err(RpcError::Rejected(format!(
            "evaluation {} already exists",
            eval.id
        )));
    }
    write_evals(node, vec![eval]).await
}

fn reblock(
    node: &RaftNode,
    side: &LeaderSide,
    eval: Evaluation,
    token: &str,
) -> Result<u64, RpcError> {
    side.pipeline
        .broker()
        .outstanding_reset(&eval.id, token)
        .map_err(broker_error)?;
    let snapshot = node.state().snapshot();
    let Some(stored) = snapshot.eval_by_id(&eval.id) else {
        return Err(RpcError::Rejected(format!(
            "evaluation {} does not exist",
            eval.id
        )));
    };
    if stored.status != EvalStatus::Blocked {
        return Err(RpcError::Rejected(format!(
            "evaluation {} is not blocked",
            eval.id
        )));
    }
    let index = stored.modify_index;
    side.pipeline
        .blocked()
        .reblock(eval, token)
        .map_err(broker_error)?;
    Ok(index)
}
