//! `Eval.Dequeue`, `Eval.Ack`, `Eval.Nack`, `Eval.Update`, `Eval.Create`, `Eval.Reblock`:
//! the scheduler workers' calls, served by the leader's eval broker and blocked-evals
//! tracker once leadership is established (the routing in [`super`] forwards them from a
//! follower, once). Every write about an evaluation in hand proves its worker alive and
//! resets the delivery's nack timer; a stale token is refused.
//!
//! `Eval.Reap` is the `_core` garbage collector's deletion of terminal evaluations and
//! allocations, written through raft on the leader.

use teamster_storage::fsm::{Command, EvalDelete, EvalUpsert};
use teamster_storage::model::{EvalStatus, Evaluation};

use super::{broker_error, Endpoints};
use crate::rpc::service::dequeue_wait;
use crate::rpc::service::eval::{
    DequeuedEval, EvalAckRequest, EvalDequeueBatchRequest, EvalDequeueRequest, EvalReapRequest,
    EvalWriteRequest,
};
use crate::rpc::ServiceError;
use crate::scheduler::SCHEDULER_VERSION;

/// `Eval.Dequeue`: an evaluation of one of the worker's types and the index its state must
/// reach first, or `None` when the wait ended without work.
pub async fn dequeue(
    ep: &Endpoints,
    req: EvalDequeueRequest,
) -> Result<Option<Box<DequeuedEval>>, ServiceError> {
    check_scheduler_version(req.scheduler_version)?;
    let found = ep
        .broker()
        .dequeue(&req.schedulers, dequeue_wait(req.timeout_ms))
        .await
        .map_err(broker_error)?;
    Ok(found.map(|(eval, token)| Box::new(delivered(ep, eval, token.to_string()))))
}

/// The scheduler types whose evaluations may join a batch after the first: one job's
/// placements each, planned in a few milliseconds, so many fit one round.
const BATCHED_TYPES: [&str; 2] = ["service", "batch"];

/// The most evaluations one `Eval.DequeueBatch` hands out, whatever it asks for (the
/// workers' `max_batch` is validated to the same bound).
const MAX_DEQUEUE_BATCH: usize = 1024;

/// `Eval.DequeueBatch`: waits for one evaluation as `Eval.Dequeue` does, then takes up to
/// `max - 1` more `service` or `batch` evaluations of the worker's types that are already
/// ready (never waiting for them), in the broker's priority order. Each has its own token
/// and nack timer. A first evaluation of another type comes alone.
pub async fn dequeue_batch(
    ep: &Endpoints,
    req: EvalDequeueBatchRequest,
) -> Result<Vec<DequeuedEval>, ServiceError> {
    check_scheduler_version(req.scheduler_version)?;
    let broker = ep.broker();
    let Some((first, token)) = broker
        .dequeue(&req.schedulers, dequeue_wait(req.timeout_ms))
        .await
        .map_err(broker_error)?
    else {
        return Ok(Vec::new());
    };
    let batched: Vec<&str> = req
        .schedulers
        .iter()
        .map(String::as_str)
        .filter(|s| BATCHED_TYPES.contains(s))
        .collect();
    let alone = batched.is_empty() || !BATCHED_TYPES.contains(&first.eval_type.as_str());
    let mut found = vec![(first, token.to_string())];
    let max = (req.max as usize).clamp(1, MAX_DEQUEUE_BATCH);
    while !alone && found.len() < max {
        match broker.dequeue(&batched, std::time::Duration::ZERO).await {
            Ok(Some((eval, token))) => found.push((eval, token.to_string())),
            // What was already taken is handed out; the next dequeue sees the error.
            Ok(None) | Err(_) => break,
        }
    }
    metrics::histogram!("teamster_broker_dequeue_batch_size").record(found.len() as f64);
    Ok(found
        .into_iter()
        .map(|(eval, token)| delivered(ep, eval, token))
        .collect())
}

fn check_scheduler_version(version: u32) -> Result<(), ServiceError> {
    if version != SCHEDULER_VERSION {
        return Err(ServiceError::SchedulerVersion {
            caller: version,
            leader: SCHEDULER_VERSION,
        });
    }
    Ok(())
}

/// A delivery with the index the worker's state must reach: the highest `ModifyIndex`
/// among the job's evaluations.
fn delivered(ep: &Endpoints, eval: Evaluation, token: String) -> DequeuedEval {
    let snapshot = ep.node().state().snapshot();
    let wait_index = snapshot
        .evals_by_job(&eval.namespace, &eval.job_id)
        .map(|e| e.modify_index)
        .max()
        .unwrap_or(0)
        .max(eval.modify_index)
        .max(1);
    DequeuedEval {
        eval,
        token,
        wait_index,
    }
}

/// `Eval.Ack`.
pub fn ack(ep: &Endpoints, req: EvalAckRequest) -> Result<(), ServiceError> {
    ep.broker()
        .ack(&req.eval_id, &req.token)
        .map_err(broker_error)
}

/// `Eval.AckBatch`: each acknowledgement's own outcome, in order.
pub fn ack_batch(
    ep: &Endpoints,
    acks: Vec<EvalAckRequest>,
) -> Result<Vec<Result<(), ServiceError>>, ServiceError> {
    Ok(acks.into_iter().map(|a| ack(ep, a)).collect())
}

/// `Eval.Nack`.
pub fn nack(ep: &Endpoints, req: EvalAckRequest) -> Result<(), ServiceError> {
    ep.broker()
        .nack(&req.eval_id, &req.token)
        .map_err(broker_error)
}

/// Commits `evals` through raft on this (leader) server.
async fn write_evals(ep: &Endpoints, evals: Vec<Evaluation>) -> Result<u64, ServiceError> {
    Ok(ep.write(Command::EvalUpsert(EvalUpsert { evals })).await?.0)
}

/// `Eval.Update`: the evaluation in hand, updated by its scheduler.
pub async fn update(ep: &Endpoints, req: EvalWriteRequest) -> Result<u64, ServiceError> {
    ep.broker()
        .outstanding_reset(&req.eval.id, &req.token)
        .map_err(broker_error)?;
    write_evals(ep, vec![req.eval]).await
}

/// `Eval.Create`: a follow-up or blocked evaluation of the one in hand.
pub async fn create(ep: &Endpoints, req: EvalWriteRequest) -> Result<u64, ServiceError> {
    let EvalWriteRequest { eval, token } = req;
    let broker = ep.broker();
    if eval.previous_eval.is_empty() {
        return Err(ServiceError::invalid(
            "Eval.PreviousEval",
            "new evaluation must name its PreviousEval",
        ));
    }
    match broker
        .outstanding(&eval.previous_eval)
        .map_err(broker_error)?
    {
        Some(t) if t.as_str() == token => {}
        Some(_) => {
            return Err(ServiceError::rejected(
                "previous evaluation token does not match",
            ))
        }
        None => {
            return Err(ServiceError::rejected(
                "previous evaluation is not outstanding",
            ))
        }
    }
    broker
        .outstanding_reset(&eval.previous_eval, &token)
        .map_err(broker_error)?;
    if ep.node().state().snapshot().eval_by_id(&eval.id).is_some() {
        return Err(ServiceError::rejected(format!(
            "evaluation {} already exists",
            eval.id
        )));
    }
    write_evals(ep, vec![eval]).await
}

/// `Eval.Reblock`: the blocked evaluation in hand goes back to the tracker (no raft write:
/// it is still `blocked` in the state); answers its current modify index.
pub fn reblock(ep: &Endpoints, req: EvalWriteRequest) -> Result<u64, ServiceError> {
    let EvalWriteRequest { eval, token } = req;
    ep.broker()
        .outstanding_reset(&eval.id, &token)
        .map_err(broker_error)?;
    let snapshot = ep.node().state().snapshot();
    let Some(stored) = snapshot.eval_by_id(&eval.id) else {
        return Err(ServiceError::not_found("evaluation", eval.id.as_str()));
    };
    if stored.status != EvalStatus::Blocked {
        return Err(ServiceError::rejected(format!(
            "evaluation {} is not blocked",
            eval.id
        )));
    }
    let index = stored.modify_index;
    ep.blocked().reblock(eval, &token).map_err(broker_error)?;
    Ok(index)
}

/// `Eval.Reap`: delete evaluations and allocations that are terminal in the leader's state
/// (anything else named is left alone: the collector may have looked at an older state, and
/// nobody may delete live work through this call).
pub async fn reap(ep: &Endpoints, req: EvalReapRequest) -> Result<u64, ServiceError> {
    let (evals, allocs) = {
        let snapshot = ep.node().state().snapshot();
        let evals: Vec<_> = req
            .evals
            .into_iter()
            .filter(|id| {
                snapshot
                    .eval_by_id(id.as_str())
                    .is_some_and(|e| e.terminal_status())
            })
            .collect();
        let allocs: Vec<_> = req
            .allocs
            .into_iter()
            .filter(|id| {
                snapshot
                    .alloc_by_id(id.as_str())
                    .is_some_and(|a| a.terminal_status())
            })
            .collect();
        (evals, allocs)
    };
    if evals.is_empty() && allocs.is_empty() {
        return Ok(ep.node().state().snapshot().latest_index());
    }
    Ok(ep
        .write(Command::EvalDelete(EvalDelete { evals, allocs }))
        .await?
        .0)
}
