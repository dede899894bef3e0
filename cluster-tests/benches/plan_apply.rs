//! The plan applier's core: allocations verified ([`evaluate_plan`]) and committed (the
//! resulting `ApplyPlanResults` applied to a real `StateStore`) per second, with plans of
//! 1 000 placements on a 5 000-node cluster. Raft and the network are not in the loop.
//!
//! Run: `cargo bench -p teamster-cluster-tests --bench plan_apply`. Figures go to
//! `docs/benchmarks.md`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use teamster::scheduler::harness::{fixture_uuid, mock_job, mock_node, Harness};
use teamster::scheduler::verify::{evaluate_plan, PlanOverlay};
use teamster_storage::fsm::{Command, NodeRegister};
use teamster_storage::model::{AllocId, Allocation, ClientStatus, Job, NodeId, Plan};
use teamster_storage::state::StateStore;

const NODES: u64 = 5_000;
const PLAN_ALLOCS: u64 = 1_000;
/// Plans committed before the store is rebuilt (outside the timing), so state size stays
/// in a steady range: at most 64 000 allocations.
const PLANS_PER_STORE: u64 = 64;
const NOW: i64 = 1_704_067_200_000_000_000;

struct World {
    harness: Harness,
    job: Arc<Job>,
    eval_id: String,
    node_ids: Vec<NodeId>,
}

fn build_world() -> World {
    let mut harness = Harness::new();
    let nodes: Vec<_> = (0..NODES)
        .map(|n| {
            let mut node = mock_node(n);
            node.node_resources.cpu.cpu_shares = 10_000_000;
            node.node_resources.memory.memory_mb = 10_000_000;
            node
        })
        .collect();
    let node_ids = nodes.iter().map(|n| n.id.clone()).collect();
    let commands = nodes
        .into_iter()
        .map(|node| {
            Command::NodeRegister(NodeRegister {
                node,
                evals: Vec::new(),
            })
        })
        .collect();
    harness
        .apply(Command::Batch(commands))
        .expect("nodes register");
    let (job, eval) = harness
        .register_job(mock_job("web", 1))
        .expect("job registers");
    World {
        harness,
        job,
        eval_id: eval.id.to_string(),
        node_ids,
    }
}

/// Plan number `seq`: `PLAN_ALLOCS` new allocations over `spread` nodes of the cluster.
fn plan(world: &World, seq: u64, spread: u64) -> Plan {
    let mut plan = Plan {
        eval_id: world.eval_id.as_str().into(),
        job: Some(world.job.clone()),
        ..Plan::default()
    };
    for i in 0..PLAN_ALLOCS {
        let n = seq * PLAN_ALLOCS + i;
        let node = world.node_ids[((seq * 7919 + i) % spread) as usize].clone();
        let alloc = Allocation {
            id: AllocId::new(fixture_uuid(3, n)),
            namespace: world.job.namespace.clone(),
            eval_id: world.eval_id.as_str().into(),
            name: format!("web.web[{n}]"),
            node_id: node.clone(),
            job_id: world.job.id.clone(),
            job_version: world.job.version,
            task_group: "web".into(),
            resources: world.job.task_groups[0].combined_resources(),
            client_status: ClientStatus::Pending,
            create_time: NOW,
            modify_time: NOW,
            ..Allocation::default()
        };
        plan.node_allocation.entry(node).or_default().push(alloc);
    }
    plan
}

/// Verifies and commits `iters` plans; only that work is timed.
fn verify_and_commit(iters: u64, spread: u64, commit: bool) -> Duration {
    let mut total = Duration::ZERO;
    let mut world = build_world();
    let mut index = world.harness.store().latest_index();
    let mut in_store = 0;
    for seq in 0..iters {
        if in_store == PLANS_PER_STORE {
            world = build_world();
            index = world.harness.store().latest_index();
            in_store = 0;
        }
        let plan = plan(&world, seq, spread);
        let store: &StateStore = world.harness.store();
        let start = Instant::now();
        let evaluation = evaluate_plan(&store.snapshot(), &PlanOverlay::new(), &plan);
        assert!(!evaluation.is_partial());
        if commit {
            index += 1;
            let response = store.apply(
                index,
                Command::ApplyPlanResults(evaluation.apply_command(NOW)),
            );
            assert!(response.rejection().is_none());
        }
        black_box(&evaluation);
        total += start.elapsed();
        in_store += 1;
    }
    total
}

fn bench_plan_apply(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan_apply");
    group.throughput(Throughput::Elements(PLAN_ALLOCS));
    group.sample_size(20);
    group.bench_function("evaluate_and_commit_1000_allocs_on_1000_nodes", |b| {
        b.iter_custom(|iters| verify_and_commit(iters, 1_000, true))
    });
    group.bench_function("evaluate_and_commit_1000_allocs_on_100_nodes", |b| {
        b.iter_custom(|iters| verify_and_commit(iters, 100, true))
    });
    group.bench_function("evaluate_only_1000_allocs_on_1000_nodes", |b| {
        b.iter_custom(|iters| verify_and_commit(iters, 1_000, false))
    });
    group.finish();
}

criterion_group!(benches, bench_plan_apply);
criterion_main!(benches);
