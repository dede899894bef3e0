//! The workers' way to the leader inside a server: every call goes through the server's own
//! RPC handler ([`ServerRpc`]), exactly as a remote call would arrive, so the leader serves it
//! locally and a follower forwards it. Raft writes (the `_core` scheduler's deletions) go
//! through [`RaftNode::write`], which forwards to the leader too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use teamster_storage::fsm::Command;
use teamster_storage::model::{EvalId, Evaluation, Plan, PlanResult};

use super::{WorkerBackend, SCHEDULER_VERSION};
use crate::rpc::{DequeuedEval, RequestContext, RpcError, RpcHandler, RpcRequest, RpcResponse};
use crate::server::endpoints::{write_error_to_rpc, ServerRpc};
use crate::server::raft::RaftNode;

/// A [`WorkerBackend`] over the server's own RPC handler.
pub struct ServerRpcBackend {
    handler: ServerRpc,
    node: Arc<RaftNode>,
    requests: AtomicU64,
}

impl ServerRpcBackend {
    /// Calls go to `handler`; raft writes to `node`.
    pub fn new(handler: ServerRpc, node: Arc<RaftNode>) -> ServerRpcBackend {
        ServerRpcBackend {
            handler,
            node,
            requests: AtomicU64::new(0),
        }
    }

    async fn call(&self, req: RpcRequest) -> Result<RpcResponse, RpcError> {
        let ctx = RequestContext {
            request_id: self.requests.fetch_add(1, Ordering::Relaxed),
            ..RequestContext::local(self.node.id())
        };
        self.handler.handle(ctx, req).await
    }
}

impl WorkerBackend for ServerRpcBackend {
    fn dequeue(
        &self,
        schedulers: Vec<String>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Option<DequeuedEval>, RpcError>> {
        Box::pin(async move {
            let req = RpcRequest::EvalDequeue {
                schedulers,
                timeout_ms: timeout.as_millis() as u64,
                scheduler_version: SCHEDULER_VERSION,
            };
            match self.call(req).await? {
                RpcResponse::EvalDequeue(r) => r,
                other => Err(other.unexpected("Eval.Dequeue")),
            }
        })
    }

    fn ack(&self, eval_id: EvalId, token: String) -> BoxFuture<'_, Result<(), RpcError>> {
        Box::pin(async move {
            match self.call(RpcRequest::EvalAck { eval_id, token }).await? {
                RpcResponse::EvalAck(r) => r,
                other => Err(other.unexpected("Eval.Ack")),
            }
        })
    }

    fn nack(&self, eval_id: EvalId, token: String) -> BoxFuture<'_, Result<(), RpcError>> {
        Box::pin(async move {
            match self.call(RpcRequest::EvalNack { eval_id, token }).await? {
                RpcResponse::EvalNack(r) => r,
                other => Err(other.unexpected("Eval.Nack")),
            }
        })
    }

    fn submit_plan(&self, plan: Plan) -> BoxFuture<'_, Result<PlanResult, RpcError>> {
        Box::pin(async move {
            let req = RpcRequest::PlanSubmit {
                plan: Box::new(plan),
            };
            match self.call(req).await? {
                RpcResponse::PlanSubmit(r) => r.map(|b| *b),
                other => Err(other.unexpected("Plan.Submit")),
            }
        })
    }

    fn update_eval(&self, eval: Evaluation, token: String) -> BoxFuture<'_, Result<u64, RpcError>> {
        Box::pin(async move {
            let req = RpcRequest::EvalUpdate {
                eval: Box::new(eval),
                token,
            };
            match self.call(req).await? {
                RpcResponse::EvalUpdate(r) => r,
                other => Err(other.unexpected("Eval.Update")),
            }
        })
    }

    fn create_eval(&self, eval: Evaluation, token: String) -> BoxFuture<'_, Result<u64, RpcError>> {
        Box::pin(async move {
            let req = RpcRequest::EvalCreate {
                eval: Box::new(eval),
                token,
            };
            match self.call(req).await? {
                RpcResponse::EvalCreate(r) => r,
                other => Err(other.unexpected("Eval.Create")),
            }
        })
    }

    fn reblock_eval(
        &self,
        eval: Evaluation,
        token: String,
    ) -> BoxFuture<'_, Result<u64, RpcError>> {
        Box::pin(async move {
            let req = RpcRequest::EvalReblock {
                eval: Box::new(eval),
                token,
            };
            match self.call(req).await? {
                RpcResponse::EvalReblock(r) => r,
                other => Err(other.unexpected("Eval.Reblock")),
            }
        })
    }

    fn write(&self, command: Command) -> BoxFuture<'_, Result<u64, RpcError>> {
        Box::pin(async move {
            let applied = self.node.write(command).await.map_err(write_error_to_rpc)?;
            if let Some(e) = applied.response.rejection() {
                return Err(RpcError::Rejected(e.to_string()));
            }
            Ok(applied.index)
        })
    }
}
