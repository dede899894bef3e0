//! Scheduler decisions checked against a [`Harness`]: the generic scheduler, the system
//! scheduler, and the concurrency property (conflicting schedulers never over-commit).

mod annotate;
mod cores;
mod deployments;
mod disconnect;
mod generic;
mod locality;
mod ports;
mod preemption;
mod properties;
mod supervisor;
mod system;

use std::collections::BTreeSet;
use std::sync::Arc;

use teamster_storage::model::{
    AllocId, Allocation, ClientStatus, EvalStatus, Evaluation, Job, Node, NodeId, Resources,
};

use crate::scheduler::harness::{fixture_uuid, mock_job, mock_node, Harness};

/// A harness with `n` mock nodes registered.
fn harness_with_nodes(n: u64) -> (Harness, Vec<Node>) {
    let mut h = Harness::new();
    let nodes: Vec<Node> = (0..n).map(mock_node).collect();
    for node in &nodes {
        h.register_node(node.clone()).expect("node registers");
    }
    (h, nodes)
}

/// A mock node changed by `f` (the computed class is recomputed).
fn node_with(n: u64, f: impl FnOnce(&mut Node)) -> Node {
    let mut node = mock_node(n);
    f(&mut node);
    node.canonicalize();
    node
}

/// The last evaluation update the scheduler made.
fn last_update(h: &Harness) -> &Evaluation {
    h.updated_evals
        .last()
        .expect("the scheduler updated the evaluation")
}

/// Registers a job that only holds foreign load, and returns it.
fn filler_job(h: &mut Harness) -> Arc<Job> {
    let (job, _) = h
        .register_job(mock_job("filler", 0))
        .expect("filler registers");
    job
}

/// A running allocation of the filler job using `cpu` MHz and `memory_mb` MB on `node`.
fn filler_alloc(job: &Job, node: &NodeId, n: u64, cpu: u64, memory_mb: u64) -> Allocation {
    Allocation {
        id: AllocId::new(fixture_uuid(9, n)),
        namespace: job.namespace.clone(),
        name: format!("filler.web[{n}]"),
        node_id: node.clone(),
        job_id: job.id.clone(),
        job_version: job.version,
        task_group: "web".into(),
        resources: Resources {
            cpu,
            memory_mb,
            disk_mb: 0,
            memory_max_mb: 0,
            cores: 0,
        },
        client_status: ClientStatus::Running,
        ..Allocation::default()
    }
}

/// The nodes the job's running allocations are on.
fn nodes_used(h: &Harness, job: &Job) -> BTreeSet<NodeId> {
    h.running_allocs(job)
        .iter()
        .map(|a| a.node_id.clone())
        .collect()
}

/// The names of the job's running allocations.
fn running_names(h: &Harness, job: &Job) -> BTreeSet<String> {
    h.running_allocs(job)
        .iter()
        .map(|a| a.name.clone())
        .collect()
}

/// Asserts the scheduler completed `eval`.
fn assert_complete(h: &Harness, eval: &Evaluation) {
    let update = last_update(h);
    assert_eq!(update.id, eval.id);
    assert_eq!(update.status, EvalStatus::Complete, "{update:?}");
}
