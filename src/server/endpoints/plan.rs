//! `Plan.Submit` on the leader: the eval's nack timer is paused while its plan waits in the
//! plan queue (the token is checked by the pause; a nack meanwhile waits for the plan), the
//! plan is queued, and the applier's result comes back with `AllocIndex` (and `RefreshIndex`
//! when nodes were rejected).

use teamster_storage::model::{Plan, PlanResult};

use super::{broker_error, plan_error, Endpoints};
use crate::rpc::ServiceError;
use crate::server::plan::PlanQueueError;

/// Queues `plan` and waits for the applier's answer.
pub async fn submit(ep: &Endpoints, plan: Plan) -> Result<Box<PlanResult>, ServiceError> {
    let broker = ep.broker().clone();
    let eval_id = plan.eval_id.clone();
    let token = plan.eval_token.clone();
    // The token proves the delivery of `EvalID` only: the state written with the plan must
    // be that evaluation's.
    if let Some(update) = &plan.eval_update {
        if update.id != eval_id {
            return Err(ServiceError::invalid(
                "Plan.EvalUpdate",
                format!(
                    "must be the plan's own evaluation {eval_id}, not {}",
                    update.id
                ),
            ));
        }
    }
    broker
        .pause_nack_timeout(&eval_id, &token)
        .map_err(broker_error)?;
    let queued = ep.plans().enqueue(plan);
    // The timer resumes (and a nack sent meanwhile takes effect) when the plan is back, even
    // if the caller is gone by then: a forwarded call whose connection closes is dropped,
    // which would leave the delivery paused for good.
    let waiting = tokio::spawn(async move {
        let outcome = match queued {
            Ok(rx) => match rx.await {
                Ok(r) => r.map_err(plan_error),
                Err(_) => Err(plan_error(PlanQueueError::Flushed)),
            },
            Err(e) => Err(plan_error(e)),
        };
        // The delivery may be gone (leadership lost): nothing to resume then.
        let _ = broker.resume_nack_timeout(&eval_id, &token);
        outcome
    });
    match waiting.await {
        Ok(outcome) => outcome.map(Box::new),
        Err(_) => Err(plan_error(PlanQueueError::Flushed)),
    }
}

/// `Plan.SubmitBatch`: every plan queued at once (so the applier evaluates them back to back
/// and their commits share raft entries), each answered on its own.
pub async fn submit_batch(
    ep: &Endpoints,
    plans: Vec<Plan>,
) -> Result<Vec<Result<PlanResult, ServiceError>>, ServiceError> {
    // A disabled queue refuses the whole call, so the worker retries it elsewhere.
    if !ep.plans().enabled() {
        return Err(plan_error(PlanQueueError::Disabled));
    }
    let answers = futures::future::join_all(plans.into_iter().map(|plan| submit(ep, plan))).await;
    Ok(answers.into_iter().map(|r| r.map(|b| *b)).collect())
}
