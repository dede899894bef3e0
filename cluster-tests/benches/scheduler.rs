//! Scheduler time alone: one evaluation of a job placing 1 000 allocations on a 5 000-node
//! cluster, and one evaluation of a small job (one allocation) on the same cluster with the
//! ready nodes remembered across evaluations as a worker pool does, with a planner that
//! accepts every plan without verifying or committing it (the plan applier has its own
//! bench, `plan_apply`).
//!
//! Run: `cargo bench -p teamster-cluster-tests --bench scheduler`. Figures go to
//! `docs/benchmarks.md`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rand::rngs::StdRng;
use rand::SeedableRng;
use teamster::scheduler::harness::{mock_batch_job, mock_job, mock_node, Harness};
use teamster::scheduler::{
    new_scheduler, Planner, ReadyNodesCache, SchedulerEnv, SchedulerError, SchedulerSettings,
};
use teamster_storage::fsm::{Command, NodeRegister};
use teamster_storage::model::{Evaluation, Job, Plan, PlanResult};
use teamster_storage::state::Snapshot;

const NODES: u64 = 5_000;
const COUNT: u32 = 1_000;

/// Accepts every plan as is: measures the scheduler, not the applier.
#[derive(Default)]
struct AcceptAll {
    placed: usize,
}

impl Planner for AcceptAll {
    fn submit_plan(
        &mut self,
        plan: Plan,
    ) -> Result<(PlanResult, Option<Snapshot>), SchedulerError> {
        self.placed += plan.node_allocation.values().map(Vec::len).sum::<usize>();
        let result = PlanResult {
            node_update: plan.node_update,
            node_allocation: plan.node_allocation,
            node_preemptions: plan.node_preemptions,
            ..PlanResult::default()
        };
        Ok((result, None))
    }

    fn update_eval(&mut self, _eval: Evaluation) -> Result<(), SchedulerError> {
        Ok(())
    }

    fn create_eval(&mut self, _eval: Evaluation) -> Result<(), SchedulerError> {
        Ok(())
    }

    fn reblock_eval(&mut self, _eval: Evaluation) -> Result<(), SchedulerError> {
        Ok(())
    }
}

/// A state with `NODES` ready nodes (registered in one batched entry) and `job` registered.
fn cluster(job: Job) -> (Snapshot, Evaluation) {
    let mut h = Harness::new();
    let nodes = (0..NODES)
        .map(|n| {
            Command::NodeRegister(NodeRegister {
                node: mock_node(n),
                evals: Vec::new(),
            })
        })
        .collect();
    h.apply(Command::Batch(nodes)).expect("nodes register");
    let (_, eval) = h.register_job(job).expect("job registers");
    (h.snapshot(), eval)
}

fn schedule(
    snapshot: &Snapshot,
    eval: &Evaluation,
    seed: u64,
    cache: Option<&ReadyNodesCache>,
) -> usize {
    let mut planner = AcceptAll::default();
    let mut rng = StdRng::seed_from_u64(seed);
    let env = SchedulerEnv {
        now: 1_704_067_200_000_000_000,
        rng: &mut rng,
        settings: SchedulerSettings::default(),
        ready_nodes: cache,
    };
    let mut scheduler =
        new_scheduler(eval.eval_type, snapshot.clone(), &mut planner, env).expect("scheduler");
    scheduler.process(eval).expect("process");
    drop(scheduler);
    planner.placed
}

fn bench_scheduler(c: &mut Criterion) {
    let mut group = c.benchmark_group("scheduler");
    group.throughput(Throughput::Elements(u64::from(COUNT)));
    group.sample_size(30);
    for (name, job) in [
        ("service_1000_on_5000_nodes", mock_job("web", COUNT)),
        ("batch_1000_on_5000_nodes", mock_batch_job("crunch", COUNT)),
    ] {
        let (snapshot, eval) = cluster(job);
        assert_eq!(schedule(&snapshot, &eval, 1, None), COUNT as usize);
        let mut seed = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                seed += 1;
                black_box(schedule(&snapshot, &eval, seed, None))
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group("scheduler_small_job");
    group.throughput(Throughput::Elements(1));
    let (snapshot, eval) = cluster(mock_batch_job("small", 1));
    let cache = ReadyNodesCache::default();
    assert_eq!(schedule(&snapshot, &eval, 1, Some(&cache)), 1);
    let mut seed = 0;
    group.bench_function("batch_1_on_5000_nodes", |b| {
        b.iter(|| {
            seed += 1;
            black_box(schedule(&snapshot, &eval, seed, Some(&cache)))
        })
    });
    group.finish();
}

criterion_group!(benches, bench_scheduler);
criterion_main!(benches);
