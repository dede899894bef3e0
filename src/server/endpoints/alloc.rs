//! `Alloc.Stop`: an operator stops one allocation (Nomad's `alloc stop`). The allocation is
//! marked to migrate (`DesiredTransition.Migrate`) and an `alloc-stop` evaluation of its job
//! is written in the same raft entry; the scheduler then stops it and places a replacement,
//! as it does for an allocation on a draining node.

use std::collections::BTreeMap;

use rand::RngCore;
use teamster_storage::fsm::{AllocUpdateDesiredTransition, Command};
use teamster_storage::model::{DesiredTransition, EvalTrigger};
use teamster_storage::state::Snapshot;

use super::Endpoints;
use crate::rpc::service::alloc::{AllocStopRequest, AllocStopResponse};
use crate::rpc::ServiceError;
use crate::server::evals::job_eval;

/// The raft command that stops `alloc_id`, with its evaluation's ID, or why it is refused.
pub fn stop_command(
    snapshot: &Snapshot,
    alloc_id: &str,
    now: i64,
    rng: &mut dyn RngCore,
) -> Result<(Command, String), ServiceError> {
    let alloc = snapshot
        .alloc_by_id(alloc_id)
        .ok_or_else(|| ServiceError::not_found("allocation", alloc_id))?;
    // The job as it is now (its priority and modify index), else the version the
    // allocation runs.
    let job = snapshot
        .job_by_id(alloc.namespace.as_str(), alloc.job_id.as_str())
        .or_else(|| snapshot.alloc_job(alloc))
        .ok_or_else(|| ServiceError::not_found("job", alloc.job_id.as_str()))?;
    let eval = job_eval(job, EvalTrigger::AllocStop, now, rng);
    let eval_id = eval.id.to_string();
    let mut allocs = BTreeMap::new();
    allocs.insert(
        alloc.id.clone(),
        DesiredTransition {
            migrate: Some(true),
            reschedule: None,
        },
    );
    let cmd = Command::AllocUpdateDesiredTransition(AllocUpdateDesiredTransition {
        allocs,
        evals: vec![eval],
    });
    Ok((cmd, eval_id))
}

/// `Alloc.Stop`.
pub async fn stop(
    ep: &Endpoints,
    req: AllocStopRequest,
) -> Result<AllocStopResponse, ServiceError> {
    let (cmd, eval_id) = {
        let snapshot = ep
            .node()
            .consistent_snapshot()
            .await
            .map_err(super::node_error)?;
        stop_command(&snapshot, &req.alloc_id, ep.now(), &mut ep.rng().fork())?
    };
    let (index, _) = ep.write(cmd).await?;
    Ok(AllocStopResponse { eval_id, index })
}
