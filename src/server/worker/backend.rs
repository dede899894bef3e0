//! The workers' way to the leader inside a server: the service layer itself. Any
//! [`ServiceCaller`] is a [`WorkerBackend`]; the server hands its workers its own
//! `Endpoints`, which serves a call on the leader directly and forwards it from a follower,
//! so a worker on the leader never passes through the RPC port.

use std::time::Duration;

use futures::future::BoxFuture;
use teamster_storage::model::{EvalId, Evaluation, Plan, PlanResult};

use super::WorkerBackend;
use crate::rpc::service::eval::{
    EvalAckRequest, EvalDequeueBatchRequest, EvalDequeueRequest, EvalReapRequest, EvalWriteRequest,
};
use crate::rpc::service::job::JobBatchDeregisterRequest;
use crate::rpc::{DequeuedEval, ServiceCaller, ServiceError, Services};
use crate::scheduler::SCHEDULER_VERSION;

impl<T: ServiceCaller + 'static> WorkerBackend for T {
    fn dequeue(
        &self,
        schedulers: Vec<String>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Option<DequeuedEval>, ServiceError>> {
        Box::pin(async move {
            let found = self
                .eval_dequeue(EvalDequeueRequest {
                    schedulers,
                    timeout_ms: timeout.as_millis() as u64,
                    scheduler_version: SCHEDULER_VERSION,
                })
                .await?;
            Ok(found.map(|d| *d))
        })
    }

    fn dequeue_batch(
        &self,
        schedulers: Vec<String>,
        timeout: Duration,
        max: usize,
    ) -> BoxFuture<'_, Result<Vec<DequeuedEval>, ServiceError>> {
        Box::pin(self.eval_dequeue_batch(EvalDequeueBatchRequest {
            schedulers,
            timeout_ms: timeout.as_millis() as u64,
            scheduler_version: SCHEDULER_VERSION,
            max: max.min(u32::MAX as usize) as u32,
        }))
    }

    fn ack(&self, eval_id: EvalId, token: String) -> BoxFuture<'_, Result<(), ServiceError>> {
        Box::pin(self.eval_ack(EvalAckRequest { eval_id, token }))
    }

    fn submit_plans(
        &self,
        plans: Vec<Plan>,
    ) -> BoxFuture<'_, Result<Vec<Result<PlanResult, ServiceError>>, ServiceError>> {
        Box::pin(self.plan_submit_batch(plans))
    }

    fn ack_batch(
        &self,
        acks: Vec<(EvalId, String)>,
    ) -> BoxFuture<'_, Result<Vec<Result<(), ServiceError>>, ServiceError>> {
        let acks = acks
            .into_iter()
            .map(|(eval_id, token)| EvalAckRequest { eval_id, token })
            .collect();
        Box::pin(self.eval_ack_batch(acks))
    }

    fn nack(&self, eval_id: EvalId, token: String) -> BoxFuture<'_, Result<(), ServiceError>> {
        Box::pin(self.eval_nack(EvalAckRequest { eval_id, token }))
    }

    fn submit_plan(&self, plan: Plan) -> BoxFuture<'_, Result<PlanResult, ServiceError>> {
        Box::pin(async move { self.plan_submit(Box::new(plan)).await.map(|r| *r) })
    }

    fn update_eval(
        &self,
        eval: Evaluation,
        token: String,
    ) -> BoxFuture<'_, Result<u64, ServiceError>> {
        Box::pin(self.eval_update(Box::new(EvalWriteRequest { eval, token })))
    }

    fn create_eval(
        &self,
        eval: Evaluation,
        token: String,
    ) -> BoxFuture<'_, Result<u64, ServiceError>> {
        Box::pin(self.eval_create(Box::new(EvalWriteRequest { eval, token })))
    }

    fn reblock_eval(
        &self,
        eval: Evaluation,
        token: String,
    ) -> BoxFuture<'_, Result<u64, ServiceError>> {
        Box::pin(self.eval_reblock(Box::new(EvalWriteRequest { eval, token })))
    }

    fn reap(&self, req: EvalReapRequest) -> BoxFuture<'_, Result<u64, ServiceError>> {
        Box::pin(self.eval_reap(req))
    }

    fn purge_jobs(
        &self,
        req: JobBatchDeregisterRequest,
    ) -> BoxFuture<'_, Result<u64, ServiceError>> {
        Box::pin(self.job_batch_deregister(req))
    }
}
