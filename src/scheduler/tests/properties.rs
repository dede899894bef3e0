//! The concurrency property: for random clusters and jobs, eight schedulers that plan on the
//! same snapshot and submit conflicting plans never get a node over capacity nor a task group
//! over its count committed.
//!
//! Each scheduler runs on its own thread with a planner that forwards to one "leader" loop
//! (the test's stand-in for the plan queue and applier). The leader works in rounds: it waits
//! until every live scheduler has a request outstanding, takes one snapshot, and verifies the
//! round's plans one after another in a random order with [`evaluate_plan`] against that
//! (increasingly stale) snapshot plus a [`PlanOverlay`] of the plans it accepted earlier in the
//! round — pipelining as the real applier does — committing each accepted part into a real
//! [`StateStore`] and checking the invariants after every commit. Partial results get a
//! `RefreshIndex` and a fresh snapshot, so the schedulers re-plan.

use std::collections::BTreeMap;
use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use teamster_storage::fsm::{Command, EvalUpsert, JobRegister, NodeRegister};
use teamster_storage::model::{
    Constraint, EvalStatus, EvalTrigger, Evaluation, JobType, Plan, PlanResult,
};
use teamster_storage::state::{Snapshot, StateStore};

use super::*;
use crate::scheduler::fit::{check_fit, node_capacity};
use crate::scheduler::harness::{fixture_uuid, mock_node, HARNESS_EPOCH};
use crate::scheduler::verify::{evaluate_plan, PlanOverlay};
use crate::scheduler::{new_scheduler, Planner, SchedulerEnv, SchedulerError, SchedulerSettings};

const WORKERS: usize = 8;
/// A stuck round fails the test instead of hanging it.
const ROUND_TIMEOUT: Duration = Duration::from_secs(60);

type PlanReply = Result<(PlanResult, Option<Snapshot>), SchedulerError>;

// A test's channel message: moved once per call, its size does not matter.
#[allow(clippy::large_enum_variant)]
enum Request {
    Plan(Plan, mpsc::Sender<PlanReply>),
    Eval(Evaluation, mpsc::Sender<Result<(), SchedulerError>>),
    Done(Result<(), SchedulerError>),
}

/// A scheduler's planner: every call is a request to the leader loop.
struct ChannelPlanner {
    tx: mpsc::Sender<Request>,
}

fn gone(operation: &'static str) -> SchedulerError {
    SchedulerError::Planner {
        operation,
        reason: "the leader loop is gone".to_owned(),
    }
}

impl ChannelPlanner {
    fn eval(&mut self, eval: Evaluation, operation: &'static str) -> Result<(), SchedulerError> {
        let (tx, rx) = mpsc::channel();
        self.tx
            .send(Request::Eval(eval, tx))
            .map_err(|_| gone(operation))?;
        rx.recv().map_err(|_| gone(operation))?
    }
}

impl Planner for ChannelPlanner {
    fn submit_plan(&mut self, plan: Plan) -> PlanReply {
        let (tx, rx) = mpsc::channel();
        self.tx
            .send(Request::Plan(plan, tx))
            .map_err(|_| gone("submit plan"))?;
        rx.recv().map_err(|_| gone("submit plan"))?
    }

    fn update_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        self.eval(eval, "update eval")
    }

    fn create_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        self.eval(eval, "create eval")
    }

    fn reblock_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        self.eval(eval, "reblock eval")
    }
}

#[derive(Debug, Clone)]
struct JobSpec {
    count: u32,
    cpu: u64,
    memory_mb: u64,
    batch: bool,
    distinct_hosts: bool,
}

fn job_spec() -> impl Strategy<Value = JobSpec> {
    (
        1u32..=10,
        1u64..=6,
        1u64..=8,
        any::<bool>(),
        prop::bool::weighted(0.25),
    )
        .prop_map(|(count, cpu, mem, batch, distinct_hosts)| JobSpec {
            count,
            cpu: cpu * 250,
            memory_mb: mem * 256,
            batch,
            distinct_hosts,
        })
}

fn node_spec() -> impl Strategy<Value = (u64, u64)> {
    (1u64..=8, 1u64..=8).prop_map(|(cpu, mem)| (cpu * 500, mem * 1024))
}

/// Asserts the invariants on the committed state.
fn check_invariants(snapshot: &Snapshot) -> Result<(), TestCaseError> {
    for node in snapshot.nodes() {
        let used = snapshot
            .allocs_by_node(&node.id)
            .filter(|a| !a.terminal_status())
            .fold(teamster_storage::model::Resources::ZERO, |acc, a| {
                acc.add(&a.resources)
            });
        prop_assert!(
            check_fit(&node_capacity(node), &used).is_ok(),
            "node {} over capacity: {used:?} of {:?}",
            node.name,
            node_capacity(node)
        );
    }
    for job in snapshot.jobs() {
        let mut running: BTreeMap<&str, u32> = BTreeMap::new();
        for alloc in snapshot.allocs_by_job(&job.namespace, &job.id) {
            if !alloc.terminal_status() {
                *running.entry(alloc.task_group.as_str()).or_default() += 1;
            }
        }
        for group in job.task_groups.iter() {
            let n = running.get(group.name.as_str()).copied().unwrap_or(0);
            prop_assert!(
                n <= group.count,
                "job {} group {} runs {n} > count {}",
                job.id,
                group.name,
                group.count
            );
        }
    }
    Ok(())
}

/// Runs one case; returns how many node parts the leader rejected.
fn run_case(nodes: &[(u64, u64)], jobs: &[JobSpec], seed: u64) -> Result<usize, TestCaseError> {
    let store = StateStore::new();
    let mut index = 0u64;
    let mut apply = |command: Command| -> Result<(), TestCaseError> {
        index += 1;
        let response = store.apply(index, command);
        prop_assert!(response.rejection().is_none(), "{response:?}");
        Ok(())
    };
    for (i, (cpu, mem)) in nodes.iter().enumerate() {
        let mut node = mock_node(i as u64);
        node.node_resources.cpu.cpu_shares = *cpu;
        node.node_resources.memory.memory_mb = *mem;
        apply(Command::NodeRegister(NodeRegister {
            node,
            evals: Vec::new(),
        }))?;
    }
    let mut evals = Vec::new();
    for (i, spec) in jobs.iter().enumerate() {
        let mut job = mock_job(&format!("job-{i}"), spec.count);
        if spec.batch {
            job.retype(JobType::Batch);
        }
        job.task_groups_mut()[0].tasks[0].resources.cpu = spec.cpu;
        job.task_groups_mut()[0].tasks[0].resources.memory_mb = spec.memory_mb;
        if spec.distinct_hosts {
            job.constraints
                .push(Constraint::new("", "distinct_hosts", ""));
        }
        let eval = Evaluation {
            id: fixture_uuid(2, i as u64).into(),
            namespace: job.namespace.clone(),
            priority: job.priority,
            eval_type: job.job_type,
            triggered_by: EvalTrigger::JobRegister,
            job_id: job.id.clone(),
            status: EvalStatus::Pending,
            ..Evaluation::default()
        };
        apply(Command::JobRegister(JobRegister {
            job,
            eval: Some(eval.clone()),
            enforce_index: None,
            tracked_versions: 0,
        }))?;
        evals.push(eval);
    }

    // Every scheduler starts from the same snapshot.
    let start = store.snapshot();
    let (tx, rx) = mpsc::channel::<Request>();
    let mut handles = Vec::new();
    for (i, eval) in evals.iter().cloned().enumerate() {
        let tx = tx.clone();
        let snapshot = start.clone();
        handles.push(std::thread::spawn(move || {
            let mut planner = ChannelPlanner { tx: tx.clone() };
            let mut rng = StdRng::seed_from_u64(seed ^ (i as u64 + 1));
            let env = SchedulerEnv {
                now: HARNESS_EPOCH,
                rng: &mut rng,
                settings: SchedulerSettings::default(),
                ready_nodes: None,
            };
            let outcome = new_scheduler(eval.eval_type, snapshot, &mut planner, env)
                .and_then(|mut scheduler| scheduler.process(&eval));
            let _ = tx.send(Request::Done(outcome));
        }));
    }
    drop(tx);

    let mut order_rng = StdRng::seed_from_u64(seed);
    let mut rejections = 0;
    let mut live = evals.len();
    let mut rounds = 0;
    while live > 0 {
        rounds += 1;
        prop_assert!(rounds < 10_000, "the schedulers never finish");
        let mut pending = Vec::new();
        while pending.len() < live {
            match rx.recv_timeout(ROUND_TIMEOUT) {
                Ok(Request::Done(outcome)) => {
                    prop_assert!(outcome.is_ok(), "a scheduler failed: {outcome:?}");
                    live -= 1;
                }
                Ok(request) => pending.push(request),
                Err(e) => {
                    return Err(TestCaseError::fail(format!("leader loop stalled: {e}")));
                }
            }
        }
        pending.shuffle(&mut order_rng);
        let round_snapshot = store.snapshot();
        let mut overlay = PlanOverlay::new();
        let mut replies = Vec::new();
        for request in pending {
            match request {
                Request::Eval(eval, reply) => {
                    index += 1;
                    let response =
                        store.apply(index, Command::EvalUpsert(EvalUpsert { evals: vec![eval] }));
                    prop_assert!(response.rejection().is_none(), "{response:?}");
                    let _ = reply.send(Ok(()));
                }
                Request::Plan(plan, reply) => {
                    let evaluation = evaluate_plan(&round_snapshot, &overlay, &plan);
                    let mut result = evaluation.plan_result();
                    if !evaluation.is_no_op() {
                        overlay.record(&evaluation);
                        index += 1;
                        let response = store.apply(
                            index,
                            Command::ApplyPlanResults(evaluation.apply_command(HARNESS_EPOCH)),
                        );
                        prop_assert!(response.rejection().is_none(), "{response:?}");
                        result.alloc_index = index;
                        check_invariants(&store.snapshot())?;
                    }
                    rejections += evaluation.rejected.len();
                    if evaluation.is_partial() {
                        result.refresh_index = evaluation.refresh_index_floor.max(index);
                    }
                    replies.push((evaluation.is_partial(), result, reply));
                }
                Request::Done(_) => unreachable!("handled while collecting"),
            }
        }
        // Replies go out once the round is committed: a refresh sees every commit in it.
        for (partial, result, reply) in replies {
            let fresh = partial.then(|| store.snapshot());
            let _ = reply.send(Ok((result, fresh)));
        }
    }
    for handle in handles {
        prop_assert!(handle.join().is_ok(), "a scheduler thread panicked");
    }

    let snapshot = store.snapshot();
    check_invariants(&snapshot)?;
    for eval in &evals {
        let stored = snapshot.eval_by_id(&eval.id).expect("eval exists");
        prop_assert!(
            stored.terminal_status(),
            "eval {} left {:?}",
            eval.id,
            stored.status
        );
        let job = snapshot.job_by_id("default", &eval.job_id).expect("job");
        let running = snapshot
            .allocs_by_job("default", &job.id)
            .filter(|a| !a.terminal_status())
            .count() as u32;
        if stored.status == EvalStatus::Complete && stored.failed_tg_allocs.is_empty() {
            prop_assert_eq!(
                running,
                job.task_groups[0].count,
                "a complete eval without failures placed the full count"
            );
        }
    }
    Ok(rejections)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn conflicting_schedulers_never_overcommit(
        nodes in prop::collection::vec(node_spec(), 1..=10),
        jobs in prop::collection::vec(job_spec(), WORKERS),
        seed in any::<u64>(),
    ) {
        run_case(&nodes, &jobs, seed)?;
    }
}

/// A fixed tight case that forces rejections: many jobs, few small nodes.
#[test]
fn conflicting_schedulers_on_a_tight_cluster() {
    let nodes = vec![(2000, 4096); 3];
    let jobs: Vec<JobSpec> = (0..WORKERS)
        .map(|i| JobSpec {
            count: 3,
            cpu: 500,
            memory_mb: 512,
            batch: i % 2 == 0,
            distinct_hosts: i % 3 == 0,
        })
        .collect();
    let mut rejections = 0;
    for seed in 0..8 {
        rejections += run_case(&nodes, &jobs, seed).unwrap();
    }
    assert!(rejections > 0, "the case must exercise conflicting plans");
}
