//! Builders of the evaluations the servers create themselves: for a job that was registered,
//! stopped or force-evaluated, for a node whose status, eligibility or drain changed (Nomad's
//! `createNodeEvals`), for a job whose allocation failed on its client, and the `_core`
//! evaluations of garbage collection (periodic, or forced by `System.GarbageCollect`). Pure functions of
//! a snapshot, the wall-clock time and an RNG (for the IDs), shared by the endpoints and the
//! heartbeat timers.
//!
//! May import: `scheduler` (job scope of a node), `util`, `teamster_storage`.

use std::collections::BTreeSet;

use rand::RngCore;
use teamster_storage::model::{
    EvalId, EvalStatus, EvalTrigger, Evaluation, Job, JobId, JobType, Namespace, Node, NodeStatus,
};
use teamster_storage::state::Snapshot;

/// A pending evaluation of `job`, as the job endpoints create them.
pub fn job_eval(job: &Job, trigger: EvalTrigger, now: i64, rng: &mut dyn RngCore) -> Evaluation {
    Evaluation {
        id: crate::util::new_uuid(rng).into(),
        namespace: job.namespace.clone(),
        priority: job.priority,
        eval_type: job.job_type,
        triggered_by: trigger,
        job_id: job.id.clone(),
        job_modify_index: job.job_modify_index,
        status: EvalStatus::Pending,
        create_time: now,
        modify_time: now,
        ..Evaluation::default()
    }
}

/// Nomad's `shouldCreateNodeEval` on a status change `from` → `to` (`from` `None`: a new
/// node).
pub fn should_create_evals(from: Option<NodeStatus>, to: NodeStatus) -> bool {
    use NodeStatus::*;
    match (from, to) {
        (_, Down) => from != Some(Down),
        (_, Disconnected) => from != Some(Disconnected),
        (Some(Disconnected), _) => true,
        (None | Some(Initializing) | Some(Down), Ready) => true,
        _ => false,
    }
}

/// The status of a node whose heartbeat ran out (Nomad's `disconnectState`): `disconnected`
/// while an allocation there that should run has a group `disconnect.lost_after` window
/// still open (not yet marked `unknown`, or marked less than `lost_after` ago), else `down`.
pub fn expired_status(snapshot: &Snapshot, node: &Node, now: i64) -> NodeStatus {
    let open = snapshot.allocs_by_node(node.id.as_str()).any(|alloc| {
        if alloc.terminal_status() {
            return false;
        }
        let Some(group) = snapshot
            .alloc_job(alloc)
            .and_then(|job| job.task_group(&alloc.task_group))
        else {
            return false;
        };
        let lost_after = group.lost_after() as i64;
        lost_after > 0
            && alloc
                .unknown_since()
                .is_none_or(|since| now < since.saturating_add(lost_after))
    });
    if open {
        NodeStatus::Disconnected
    } else {
        NodeStatus::Down
    }
}

/// Nomad's `createNodeEvals`: one `node-update` evaluation per job with an allocation on the
/// node that may need rescheduling, plus one per non-stopped system job whose datacenters
/// and node pool cover the node.
pub fn node_evals(
    snapshot: &Snapshot,
    node: &Node,
    now: i64,
    rng: &mut dyn RngCore,
) -> Vec<Evaluation> {
    let mut seen = BTreeSet::new();
    let mut evals = Vec::new();
    let mut push = |job: &Job, rng: &mut dyn RngCore| {
        evals.push(Evaluation {
            node_id: node.id.clone(),
            node_modify_index: node.modify_index,
            ..job_eval(job, EvalTrigger::NodeUpdate, now, rng)
        });
    };
    for alloc in snapshot.allocs_by_node(node.id.as_str()) {
        let Some(job) = snapshot.job_by_id(alloc.namespace.as_str(), alloc.job_id.as_str()) else {
            continue;
        };
        let skip = match job.job_type {
            JobType::Service => alloc.server_terminal_status() && alloc.client_terminal_status(),
            JobType::Batch => alloc.client_terminal_status(),
            JobType::System | JobType::SysBatch | JobType::Core => true,
        };
        if skip || !seen.insert((job.namespace.clone(), job.id.clone())) {
            continue;
        }
        push(job, rng);
    }
    for job in snapshot.jobs() {
        if job.job_type != JobType::System
            || job.stopped()
            || !crate::scheduler::feasible::node_in_job_scope(job, node)
            || !seen.insert((job.namespace.clone(), job.id.clone()))
        {
            continue;
        }
        push(job, rng);
    }
    evals
}

/// Core job: collect old terminal evaluations.
pub const EVAL_GC: &str = "eval-gc";
/// Core job: purge old stopped jobs.
pub const JOB_GC: &str = "job-gc";
/// Core job: both, ignoring the age thresholds.
pub const FORCE_GC: &str = "force-gc";
/// Priority of core evaluations (Nomad's `CoreJobPriority`).
pub const CORE_JOB_PRIORITY: u32 = 200;

/// A pending `_core` evaluation for `kind`.
pub fn core_eval(kind: &str, now: i64, rng: &mut dyn rand::RngCore) -> Evaluation {
    Evaluation {
        id: EvalId::new(crate::util::new_uuid(rng)),
        namespace: Namespace::new("default"),
        priority: CORE_JOB_PRIORITY,
        eval_type: JobType::Core,
        triggered_by: EvalTrigger::Scheduled,
        job_id: JobId::new(kind),
        status: EvalStatus::Pending,
        create_time: now,
        modify_time: now,
        ..Evaluation::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evals_follow_nomad_s_status_transitions() {
        use NodeStatus::*;
        assert!(should_create_evals(None, Ready));
        assert!(should_create_evals(Some(Down), Ready));
        assert!(should_create_evals(Some(Initializing), Ready));
        assert!(should_create_evals(Some(Ready), Down));
        assert!(!should_create_evals(Some(Down), Down));
        assert!(!should_create_evals(Some(Ready), Ready));
        assert!(!should_create_evals(None, Initializing));
    }

    /// A silent node is `disconnected` while one of its allocations may still wait for it,
    /// then `down`.
    #[test]
    fn an_expired_node_is_disconnected_while_a_window_is_open() {
        use crate::scheduler::harness::{mock_job, mock_node, Harness};
        use teamster_storage::model::{ClientStatus, DisconnectStrategy};
        const SECOND: i64 = 1_000_000_000;
        let mut h = Harness::new();
        let node = mock_node(0);
        h.register_node(node.clone()).unwrap();
        let (plain, eval) = h.register_job(mock_job("plain", 1)).unwrap();
        h.process(&eval).unwrap();
        let status = |h: &Harness, now: i64| {
            let snap = h.snapshot();
            let node = snap.node_by_id(node.id.as_str()).unwrap().clone();
            expired_status(&snap, &node, now)
        };
        assert_eq!(status(&h, h.now), NodeStatus::Down, "no window: down");

        let mut waiting = mock_job("waiting", 1);
        waiting.task_groups_mut()[0].disconnect = Some(DisconnectStrategy {
            lost_after: 60 * SECOND as u64,
            ..DisconnectStrategy::default()
        });
        let (waiting, eval) = h.register_job(waiting).unwrap();
        h.process(&eval).unwrap();
        assert_eq!(status(&h, h.now), NodeStatus::Disconnected);

        // Marked unknown now: the window is open for 60 s.
        let mut marked = (*h.running_allocs(&waiting)[0]).clone();
        marked.client_status = ClientStatus::Unknown;
        marked.append_client_state(ClientStatus::Unknown, h.now);
        h.upsert_allocs(vec![marked]).unwrap();
        assert_eq!(status(&h, h.now + 30 * SECOND), NodeStatus::Disconnected);
        assert_eq!(status(&h, h.now + 60 * SECOND), NodeStatus::Down);
        assert_eq!(h.running_allocs(&plain).len(), 1);
    }
}
