//! Worker and pool behaviour on paused time, against a fake leader and a scheduler the test
//! can hold mid-evaluation.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use teamster_storage::model::{EvalId, Evaluation, JobType, Plan, PlanResult};
use teamster_storage::state::{Snapshot, StateStore};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::pool::{paused_on_leader, PoolConfig, WorkerPool};
use super::*;
use crate::rpc::service::eval::EvalReapRequest;
use crate::rpc::service::job::JobBatchDeregisterRequest;
use crate::rpc::{DequeuedEval, ServiceError};
use crate::scheduler::{Planner, SchedulerEnv, SchedulerError, SchedulerSettings};

#[derive(Debug, Clone, PartialEq)]
enum Event {
    Dequeue(Instant),
    Ack(EvalId),
    Nack(EvalId),
    Plan(String, u64),
    Update(String),
}

enum Step {
    Fail(ServiceError),
    Empty,
}

/// A fake leader: a queue of evaluations, a script of dequeue answers, and a log of calls.
struct FakeLeader {
    queue: Mutex<VecDeque<DequeuedEval>>,
    script: Mutex<VecDeque<Step>>,
    plan_failures: Mutex<VecDeque<ServiceError>>,
    /// Whether `dequeue_batch` hands out every queued evaluation (else one at a time).
    batching: std::sync::atomic::AtomicBool,
    notify: Notify,
    events: mpsc::UnboundedSender<Event>,
    /// Every evaluation written through `update_eval`.
    updates: Mutex<Vec<Evaluation>>,
}

impl FakeLeader {
    fn new() -> (Arc<FakeLeader>, mpsc::UnboundedReceiver<Event>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Arc::new(FakeLeader {
                queue: Mutex::new(VecDeque::new()),
                script: Mutex::new(VecDeque::new()),
                plan_failures: Mutex::new(VecDeque::new()),
                batching: std::sync::atomic::AtomicBool::new(false),
                notify: Notify::new(),
                events: tx,
                updates: Mutex::new(Vec::new()),
            }),
            rx,
        )
    }

    fn push(&self, id: &str, wait_index: u64) {
        self.queue.lock().unwrap().push_back(DequeuedEval {
            eval: Evaluation {
                id: EvalId::new(id),
                eval_type: JobType::Service,
                ..Evaluation::default()
            },
            token: format!("token-{id}"),
            wait_index,
        });
        self.notify.notify_waiters();
    }
}

impl WorkerBackend for FakeLeader {
    fn dequeue(
        &self,
        _schedulers: Vec<String>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Option<DequeuedEval>, ServiceError>> {
        Box::pin(async move {
            let _ = self.events.send(Event::Dequeue(Instant::now()));
            match self.script.lock().unwrap().pop_front() {
                Some(Step::Fail(e)) => return Err(e),
                Some(Step::Empty) => return Ok(None),
                None => {}
            }
            let deadline = Instant::now() + timeout;
            loop {
                let notified = self.notify.notified();
                if let Some(d) = self.queue.lock().unwrap().pop_front() {
                    return Ok(Some(d));
                }
                if tokio::time::timeout_at(deadline, notified).await.is_err() {
                    return Ok(None);
                }
            }
        })
    }

    fn dequeue_batch(
        &self,
        schedulers: Vec<String>,
        timeout: Duration,
        max: usize,
    ) -> BoxFuture<'_, Result<Vec<DequeuedEval>, ServiceError>> {
        Box::pin(async move {
            let Some(first) = self.dequeue(schedulers, timeout).await? else {
                return Ok(Vec::new());
            };
            let mut batch = vec![first];
            if self.batching.load(std::sync::atomic::Ordering::SeqCst) {
                let mut queue = self.queue.lock().unwrap();
                while batch.len() < max {
                    match queue.pop_front() {
                        Some(d) => batch.push(d),
                        None => break,
                    }
                }
            }
            Ok(batch)
        })
    }

    fn ack(&self, eval_id: EvalId, _token: String) -> BoxFuture<'_, Result<(), ServiceError>> {
        let _ = self.events.send(Event::Ack(eval_id));
        Box::pin(async { Ok(()) })
    }

    fn nack(&self, eval_id: EvalId, _token: String) -> BoxFuture<'_, Result<(), ServiceError>> {
        let _ = self.events.send(Event::Nack(eval_id));
        Box::pin(async { Ok(()) })
    }

    fn submit_plan(&self, plan: Plan) -> BoxFuture<'_, Result<PlanResult, ServiceError>> {
        Box::pin(async move {
            if let Some(e) = self.plan_failures.lock().unwrap().pop_front() {
                return Err(e);
            }
            let _ = self
                .events
                .send(Event::Plan(plan.eval_token.clone(), plan.snapshot_index));
            // Accepted in full: the evaluation's state is written with the plan.
            if let Some(eval) = &plan.eval_update {
                let _ = self
                    .events
                    .send(Event::Update(format!("{}:{}", eval.id, plan.eval_token)));
            }
            Ok(PlanResult::default())
        })
    }

    fn update_eval(
        &self,
        eval: Evaluation,
        token: String,
    ) -> BoxFuture<'_, Result<u64, ServiceError>> {
        let _ = self
            .events
            .send(Event::Update(format!("{}:{token}", eval.id)));
        self.updates.lock().unwrap().push(eval);
        Box::pin(async { Ok(1) })
    }

    fn create_eval(&self, _: Evaluation, _: String) -> BoxFuture<'_, Result<u64, ServiceError>> {
        Box::pin(async { Ok(1) })
    }

    fn reblock_eval(&self, _: Evaluation, _: String) -> BoxFuture<'_, Result<u64, ServiceError>> {
        Box::pin(async { Ok(1) })
    }

    fn reap(&self, _: EvalReapRequest) -> BoxFuture<'_, Result<u64, ServiceError>> {
        Box::pin(async { Ok(1) })
    }

    fn purge_jobs(&self, _: JobBatchDeregisterRequest) -> BoxFuture<'_, Result<u64, ServiceError>> {
        Box::pin(async { Ok(1) })
    }
}

/// A scheduler that announces it started and then waits for the test to release it.
struct GateScheduler {
    entered: mpsc::UnboundedSender<EvalId>,
    gate: Mutex<std::sync::mpsc::Receiver<()>>,
}

impl SchedulerFactory for GateScheduler {
    fn process<'a>(
        &self,
        eval: &Evaluation,
        _: Snapshot,
        _: &'a mut dyn Planner,
        _: SchedulerEnv<'a>,
    ) -> Result<(), SchedulerError> {
        let _ = self.entered.send(eval.id.clone());
        self.gate
            .lock()
            .unwrap()
            .recv()
            .map_err(|_| SchedulerError::Planner {
                operation: "test",
                reason: "gate closed".into(),
            })
    }
}

/// A scheduler that submits one plan and completes the evaluation.
struct PlanOnce;

impl SchedulerFactory for PlanOnce {
    fn process<'a>(
        &self,
        eval: &Evaluation,
        _: Snapshot,
        planner: &'a mut dyn Planner,
        _: SchedulerEnv<'a>,
    ) -> Result<(), SchedulerError> {
        planner.submit_plan(Plan {
            eval_id: eval.id.clone(),
            ..Plan::default()
        })?;
        planner.update_eval(eval.clone())
    }
}

/// A scheduler that submits one plan and completes the evaluation, as a real one does.
struct PlanAndComplete;

impl SchedulerFactory for PlanAndComplete {
    fn process<'a>(
        &self,
        eval: &Evaluation,
        _: Snapshot,
        planner: &'a mut dyn Planner,
        _: SchedulerEnv<'a>,
    ) -> Result<(), SchedulerError> {
        planner.submit_plan(Plan {
            eval_id: eval.id.clone(),
            ..Plan::default()
        })?;
        planner.update_eval(Evaluation {
            status: teamster_storage::model::EvalStatus::Complete,
            ..eval.clone()
        })
    }
}

/// A scheduler that panics on the evaluation `poison` and completes every other one.
struct PanicsOnPoison;

impl SchedulerFactory for PanicsOnPoison {
    fn process<'a>(
        &self,
        eval: &Evaluation,
        snapshot: Snapshot,
        planner: &'a mut dyn Planner,
        env: SchedulerEnv<'a>,
    ) -> Result<(), SchedulerError> {
        if eval.id.as_str() == "poison" {
            let v: Vec<u32> = Vec::new();
            let _ = v[eval.id.len()];
        }
        PlanAndComplete.process(eval, snapshot, planner, env)
    }
}

struct Setup {
    leader: Arc<FakeLeader>,
    events: mpsc::UnboundedReceiver<Event>,
    entered: mpsc::UnboundedReceiver<EvalId>,
    gate: std::sync::mpsc::Sender<()>,
    state: StateStore,
    ctx: Arc<WorkerContext>,
}

fn setup_with(schedulers: Option<Arc<dyn SchedulerFactory>>) -> Setup {
    let (leader, events) = FakeLeader::new();
    let (entered_tx, entered) = mpsc::unbounded_channel();
    let (gate, gate_rx) = std::sync::mpsc::channel();
    let state = StateStore::new();
    let schedulers = schedulers.unwrap_or_else(|| {
        Arc::new(GateScheduler {
            entered: entered_tx,
            gate: Mutex::new(gate_rx),
        })
    });
    let ctx = Arc::new(WorkerContext {
        backend: leader.clone(),
        state: state.clone(),
        clock: crate::util::system_clock(),
        rng: crate::util::RngSource::seeded(11),
        config: WorkerConfig::default(),
        raft_sync_limit: Duration::from_secs(1),
        settings: SchedulerSettings::default(),
        schedulers,
        ready_nodes: Default::default(),
        shutdown: CancellationToken::new(),
    });
    Setup {
        leader,
        events,
        entered,
        gate,
        state,
        ctx,
    }
}

fn setup() -> Setup {
    setup_with(None)
}

fn all() -> Vec<String> {
    crate::server::config::KNOWN_SCHEDULERS
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// The next event that is not a dequeue.
async fn next_outcome(events: &mut mpsc::UnboundedReceiver<Event>) -> Event {
    loop {
        let e = events.recv().await.expect("events");
        if !matches!(e, Event::Dequeue(_)) {
            return e;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn pause_during_scheduling_finishes_the_eval_then_parks() {
    let mut s = setup();
    s.leader.push("e1", 0);
    let w = Worker::start(s.ctx.clone(), all(), 1);
    assert_eq!(s.entered.recv().await.unwrap().as_str(), "e1");
    assert_eq!(w.workload_status(), WorkloadStatus::Scheduling);
    w.pause();
    assert_eq!(w.status(), WorkerStatus::Pausing);
    s.gate.send(()).unwrap();
    assert_eq!(
        next_outcome(&mut s.events).await,
        Event::Ack(EvalId::new("e1"))
    );
    w.wait_status(|st, _| st == WorkerStatus::Paused).await;
    assert_eq!(w.workload_status(), WorkloadStatus::Paused);

    // Parked: new work waits.
    s.leader.push("e2", 0);
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(s.entered.try_recv().is_err());
    assert_eq!(w.status(), WorkerStatus::Paused);

    w.resume();
    assert_eq!(s.entered.recv().await.unwrap().as_str(), "e2");
    assert_eq!(w.status(), WorkerStatus::Started);
    s.gate.send(()).unwrap();
    assert_eq!(
        next_outcome(&mut s.events).await,
        Event::Ack(EvalId::new("e2"))
    );
    s.ctx.shutdown.cancel();
    w.join().await;
    assert_eq!(w.status(), WorkerStatus::Stopped);
}

#[tokio::test(start_paused = true)]
async fn resume_while_pausing_wins() {
    let mut s = setup();
    s.leader.push("e1", 0);
    let w = Worker::start(s.ctx.clone(), all(), 2);
    s.entered.recv().await.unwrap();
    w.pause();
    assert_eq!(w.status(), WorkerStatus::Pausing);
    w.resume();
    assert_eq!(w.status(), WorkerStatus::Started);
    s.gate.send(()).unwrap();
    assert_eq!(
        next_outcome(&mut s.events).await,
        Event::Ack(EvalId::new("e1"))
    );
    // It goes straight back to dequeuing and takes the next eval.
    s.leader.push("e2", 0);
    assert_eq!(s.entered.recv().await.unwrap().as_str(), "e2");
    assert_eq!(w.status(), WorkerStatus::Started);
    s.gate.send(()).unwrap();
    s.ctx.shutdown.cancel();
    w.join().await;
}

#[tokio::test(start_paused = true)]
async fn stop_while_paused_stops_it() {
    let s = setup();
    let w = Worker::start(s.ctx.clone(), all(), 3);
    w.pause();
    tokio::time::timeout(
        Duration::from_secs(5),
        w.wait_status(|st, _| st == WorkerStatus::Paused),
    )
    .await
    .expect("parks within a dequeue timeout");
    w.stop();
    tokio::time::timeout(Duration::from_secs(1), w.join())
        .await
        .expect("a parked worker stops at once");
    assert_eq!(w.status(), WorkerStatus::Stopped);
    assert_eq!(w.workload_status(), WorkloadStatus::Stopped);
    // Pausing a stopped worker does nothing.
    w.pause();
    assert_eq!(w.status(), WorkerStatus::Stopped);
}

#[tokio::test(start_paused = true)]
async fn stop_lets_the_current_eval_finish() {
    let mut s = setup();
    s.leader.push("e1", 0);
    let w = Worker::start(s.ctx.clone(), all(), 4);
    s.entered.recv().await.unwrap();
    w.stop();
    assert_eq!(w.status(), WorkerStatus::Stopping);
    s.gate.send(()).unwrap();
    assert_eq!(
        next_outcome(&mut s.events).await,
        Event::Ack(EvalId::new("e1"))
    );
    w.join().await;
    assert_eq!(w.status(), WorkerStatus::Stopped);
}

#[tokio::test(start_paused = true)]
async fn shutdown_nacks_an_eval_waiting_for_raft() {
    let mut s = setup();
    s.leader.push("e1", 50);
    let w = Worker::start(s.ctx.clone(), all(), 5);
    w.wait_status(|_, wl| wl == WorkloadStatus::WaitingForRaft)
        .await;
    s.ctx.shutdown.cancel();
    assert_eq!(
        next_outcome(&mut s.events).await,
        Event::Nack(EvalId::new("e1"))
    );
    w.join().await;
    assert_eq!(w.status(), WorkerStatus::Stopped);
}

#[tokio::test(start_paused = true)]
async fn the_catch_up_wait_returns_early_when_the_index_arrives() {
    let mut s = setup();
    s.leader.push("e1", 10);
    let w = Worker::start(s.ctx.clone(), all(), 6);
    let t0 = loop {
        if let Event::Dequeue(t) = s.events.recv().await.unwrap() {
            break t;
        }
    };
    // raft_sync_limit is 1 s: the eval is nacked after it.
    assert_eq!(
        next_outcome(&mut s.events).await,
        Event::Nack(EvalId::new("e1"))
    );
    let nacked = Instant::now() - t0;
    assert!(
        nacked >= Duration::from_secs(1) && nacked < Duration::from_millis(1100),
        "{nacked:?}"
    );
    assert_eq!(w.workload_status(), WorkloadStatus::WaitingForRaft);
    // The worker keeps waiting (up to 10 s) for the same index instead of dequeuing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(s.events.try_recv().is_err(), "no dequeue while catching up");
    s.state.advance_index(10);
    let Event::Dequeue(t) = s.events.recv().await.unwrap() else {
        panic!("expected a dequeue");
    };
    let resumed = t - t0;
    assert!(
        resumed >= Duration::from_secs(4) && resumed < Duration::from_millis(4100),
        "resumed after {resumed:?}, not at once when the index arrived"
    );
    // Now the state is there: the redelivered eval is scheduled.
    s.leader.push("e1", 10);
    assert_eq!(s.entered.recv().await.unwrap().as_str(), "e1");
    s.gate.send(()).unwrap();
    assert_eq!(
        next_outcome(&mut s.events).await,
        Event::Ack(EvalId::new("e1"))
    );
    s.ctx.shutdown.cancel();
    w.join().await;
}

#[tokio::test(start_paused = true)]
async fn dequeue_backoff_grows_and_resets() {
    let mut s = setup();
    {
        let mut script = s.leader.script.lock().unwrap();
        for _ in 0..5 {
            script.push_back(Step::Fail(ServiceError::disabled("eval broker disabled")));
        }
        script.push_back(Step::Empty);
        script.push_back(Step::Fail(ServiceError::disabled("eval broker disabled")));
    }
    let w = Worker::start(s.ctx.clone(), all(), 7);
    let mut times = Vec::new();
    while times.len() < 8 {
        if let Event::Dequeue(t) = s.events.recv().await.unwrap() {
            times.push(t);
        }
    }
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    // Five failures: each wait in [d/2, d] with d = 20 ms × 2^k.
    for (k, gap) in gaps[..5].iter().enumerate() {
        let d = Duration::from_millis(20 << k);
        assert!(
            *gap >= d / 2 && *gap <= d,
            "gap {k}: {gap:?} not in [{:?}, {d:?}]",
            d / 2
        );
    }
    // The empty answer is a success: the next call follows at once, and the failure after
    // it backs off from the base again.
    assert_eq!(gaps[5], Duration::ZERO);
    assert!(
        gaps[6] >= Duration::from_millis(10) && gaps[6] <= Duration::from_millis(20),
        "{:?}",
        gaps[6]
    );
    s.ctx.shutdown.cancel();
    w.join().await;
}

#[test]
fn backoff_is_capped_and_jittered() {
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(1);
    let mut b = Backoff::new(Duration::from_millis(500), Duration::from_secs(10));
    let delays: Vec<Duration> = (0..10).map(|_| b.next(&mut rng)).collect();
    assert!(delays.iter().all(|d| *d <= Duration::from_secs(10)));
    assert!(delays[9] >= Duration::from_secs(5), "{:?}", delays[9]);
    assert_eq!(b.attempts(), 10);
    b.reset();
    assert!(b.next(&mut rng) <= Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn the_planner_stamps_the_token_and_retries_transient_errors() {
    let mut s = setup_with(Some(Arc::new(PlanOnce)));
    s.state.advance_index(7);
    {
        let mut f = s.leader.plan_failures.lock().unwrap();
        f.push_back(ServiceError::disabled("plan queue is disabled"));
        f.push_back(ServiceError::NotLeader { leader: None });
    }
    s.leader.push("e1", 3);
    let w = Worker::start(s.ctx.clone(), all(), 8);
    let started = Instant::now();
    assert_eq!(
        next_outcome(&mut s.events).await,
        Event::Plan("token-e1".into(), 7)
    );
    // Two failures backed off from 500 ms: at least 250 + 500 ms.
    assert!(Instant::now() - started >= Duration::from_millis(750));
    assert_eq!(
        next_outcome(&mut s.events).await,
        Event::Update("e1:token-e1".into())
    );
    assert_eq!(
        next_outcome(&mut s.events).await,
        Event::Ack(EvalId::new("e1"))
    );
    s.ctx.shutdown.cancel();
    w.join().await;
}

#[tokio::test(start_paused = true)]
async fn a_permanent_planner_error_nacks_the_eval() {
    let mut s = setup_with(Some(Arc::new(PlanOnce)));
    s.leader
        .plan_failures
        .lock()
        .unwrap()
        .push_back(ServiceError::rejected("stale token"));
    s.leader.push("e1", 0);
    let w = Worker::start(s.ctx.clone(), all(), 9);
    assert_eq!(
        next_outcome(&mut s.events).await,
        Event::Nack(EvalId::new("e1"))
    );
    s.ctx.shutdown.cancel();
    w.join().await;
}

/// A scheduler panic fails its evaluation with the panic's message, and the worker goes on
/// with the next one (issue 52: a poisoned evaluation never takes a server down).
#[tokio::test(start_paused = true)]
async fn a_scheduler_panic_fails_the_evaluation_and_the_worker_goes_on() {
    let mut s = setup_with(Some(Arc::new(PanicsOnPoison)));
    s.leader.push("poison", 0);
    s.leader.push("fine", 0);
    let w = Worker::start(s.ctx.clone(), all(), 9);
    assert_eq!(
        next_outcome(&mut s.events).await,
        Event::Update("poison:token-poison".into())
    );
    assert_eq!(
        next_outcome(&mut s.events).await,
        Event::Ack(EvalId::new("poison"))
    );
    let failed = s.leader.updates.lock().unwrap()[0].clone();
    assert_eq!(failed.status, teamster_storage::model::EvalStatus::Failed);
    assert!(
        failed
            .status_description
            .starts_with("scheduler panicked: index out of bounds"),
        "{}",
        failed.status_description
    );
    assert!(matches!(next_outcome(&mut s.events).await, Event::Plan(..)));
    assert_eq!(
        next_outcome(&mut s.events).await,
        Event::Update("fine:token-fine".into())
    );
    assert_eq!(
        next_outcome(&mut s.events).await,
        Event::Ack(EvalId::new("fine"))
    );
    s.ctx.shutdown.cancel();
    w.join().await;
}

#[test]
fn three_quarters_pause_on_the_leader() {
    let table: Vec<usize> = [0, 1, 2, 3, 4, 8, 16]
        .iter()
        .map(|n| paused_on_leader(*n))
        .collect();
    assert_eq!(table, vec![0, 0, 1, 2, 3, 6, 12]);
}

async fn wait_paused(pool: &WorkerPool, want: usize) {
    tokio::time::timeout(Duration::from_secs(5), async {
        while pool.paused() != want {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("expected {want} paused, got {}", pool.paused()));
}

#[tokio::test(start_paused = true)]
async fn the_pool_resizes_in_place_and_reapplies_the_pause_set() {
    let s = setup();
    let cfg = |n| PoolConfig {
        num_schedulers: n,
        enabled_schedulers: all(),
    };
    let pool = WorkerPool::start(s.ctx.clone(), cfg(4)).unwrap();
    assert_eq!(pool.info().len(), 4);
    wait_paused(&pool, 0).await;
    let ids: Vec<String> = pool.info().into_iter().map(|i| i.id).collect();

    pool.set_leader(true);
    wait_paused(&pool, 3).await;
    pool.with_workers(|ws| {
        assert!(ws[..3].iter().all(|w| w.pause_requested()));
        assert!(!ws[3].pause_requested());
    });

    assert_eq!(pool.set_config(cfg(8)).unwrap(), cfg(8));
    wait_paused(&pool, 6).await;
    let grown: Vec<String> = pool.info().into_iter().map(|i| i.id).collect();
    assert_eq!(&grown[..4], &ids[..], "growing keeps the existing workers");

    pool.set_config(cfg(2)).unwrap();
    wait_paused(&pool, 1).await;
    let shrunk: Vec<String> = pool.info().into_iter().map(|i| i.id).collect();
    assert_eq!(&shrunk[..], &ids[..2], "shrinking stops the newest");

    // Invalid configurations change nothing.
    assert!(pool.set_config(cfg(257)).is_err());
    assert!(pool
        .set_config(PoolConfig {
            num_schedulers: 3,
            enabled_schedulers: vec!["service".into()],
        })
        .is_err());
    assert_eq!(pool.config(), cfg(2));

    pool.set_leader(false);
    wait_paused(&pool, 0).await;
    pool.set_config(cfg(0)).unwrap();
    assert!(pool.info().is_empty());
    s.ctx.shutdown.cancel();
    pool.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn info_has_nomads_shape() {
    let s = setup();
    let w = Worker::start(s.ctx.clone(), all(), 10);
    w.wait_status(|st, _| st == WorkerStatus::Started).await;
    let v = serde_json::to_value(w.info()).unwrap();
    assert_eq!(v["status"], "Started");
    assert_eq!(v["enabled_schedulers"][4], "_core");
    assert!(v["started"].as_str().unwrap().ends_with('Z'));
    assert!(matches!(
        v["workload_status"].as_str().unwrap(),
        "WaitingToDequeue" | "Backoff"
    ));
    s.ctx.shutdown.cancel();
    w.join().await;
}

#[tokio::test(start_paused = true)]
async fn a_version_mismatch_backs_off_long_but_a_pause_ends_the_backoff() {
    let mut s = setup();
    s.leader
        .script
        .lock()
        .unwrap()
        .push_back(Step::Fail(ServiceError::SchedulerVersion {
            caller: 2,
            leader: 1,
        }));
    let w = Worker::start(s.ctx.clone(), all(), 11);
    w.wait_status(|_, wl| wl == WorkloadStatus::Backoff).await;
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs(29)).await;
    assert_eq!(
        w.workload_status(),
        WorkloadStatus::Backoff,
        "30 s on a mismatch"
    );
    w.pause();
    w.wait_status(|st, _| st == WorkerStatus::Paused).await;
    assert!(Instant::now() - t0 < Duration::from_secs(30));
    // Exactly one dequeue happened so far.
    let mut dequeues = 0;
    while let Ok(e) = s.events.try_recv() {
        if matches!(e, Event::Dequeue(_)) {
            dequeues += 1;
        }
    }
    assert_eq!(dequeues, 1);
    s.ctx.shutdown.cancel();
    w.join().await;
}

mod core_gc {
    use teamster_storage::fsm::{Command, JobDeregister};
    use teamster_storage::model::ClientStatus;

    use super::super::gc::{plan_gc, EVAL_GC, FORCE_GC, JOB_GC};
    use super::super::WorkerConfig;
    use crate::scheduler::harness::{mock_batch_job, mock_job, mock_node, Harness};

    const HOUR: i64 = 3_600_000_000_000;

    #[test]
    fn eval_gc_collects_old_terminal_evals_whose_allocs_are_terminal() {
        let mut h = Harness::new();
        h.register_node(mock_node(1)).unwrap();
        let (job, eval) = h.register_job(mock_job("svc", 1)).unwrap();
        h.process(&eval).unwrap();
        let config = WorkerConfig::default();
        let later = h.now + 2 * HOUR;
        let allocs: Vec<_> = h
            .snapshot()
            .allocs_by_job("default", "svc")
            .map(|a| a.id.clone())
            .collect();
        assert_eq!(allocs.len(), 1);

        // The eval is complete but its allocation runs: kept.
        assert!(plan_gc(&h.snapshot(), EVAL_GC, later, &config)
            .evals
            .is_empty());
        h.client_update(&allocs, ClientStatus::Complete, h.now)
            .unwrap();
        // Terminal now, but younger than the threshold: kept.
        assert!(plan_gc(&h.snapshot(), EVAL_GC, h.now + HOUR / 2, &config)
            .evals
            .is_empty());
        let plan = plan_gc(&h.snapshot(), EVAL_GC, later, &config);
        assert_eq!(plan.evals, vec![eval.id.clone()]);
        assert_eq!(plan.allocs, allocs);
        assert!(plan.jobs.is_empty(), "eval-gc never purges jobs: {job:?}");
    }

    #[test]
    fn job_gc_collects_finished_dispatched_children_never_running_ones_or_the_parent() {
        use teamster_storage::model::ParameterizedJobConfig;
        let mut h = Harness::new();
        h.register_node(mock_node(1)).unwrap();
        let mut parent = mock_batch_job("q", 1);
        parent.parameterized_job = Some(ParameterizedJobConfig::default());
        let (parent, _) = h.register_job(parent).unwrap();
        let mut children = Vec::new();
        for n in 0..2 {
            let child = teamster_storage::model::Job {
                parameterized_job: None,
                dispatched: true,
                ..parent.new_child(&format!("q/dispatch-1700000000-0000000{n}"), h.now)
            };
            let (child, eval) = h.register_job(child).unwrap();
            h.process(&eval).unwrap();
            children.push(child);
        }
        let allocs = |h: &Harness, id: &str| -> Vec<_> {
            h.snapshot()
                .allocs_by_job("default", id)
                .map(|a| a.id.clone())
                .collect()
        };
        let done = allocs(&h, children[0].id.as_str());
        assert_eq!(done.len(), 1);
        assert_eq!(allocs(&h, children[1].id.as_str()).len(), 1);
        h.client_update(&done, ClientStatus::Complete, h.now)
            .unwrap();
        let config = WorkerConfig::default();
        // Younger than job_gc_threshold: kept.
        assert!(plan_gc(&h.snapshot(), JOB_GC, h.now + HOUR, &config)
            .jobs
            .is_empty());
        for plan in [
            plan_gc(&h.snapshot(), JOB_GC, h.now + 10 * HOUR, &config),
            plan_gc(&h.snapshot(), FORCE_GC, h.now, &config),
        ] {
            let ids: Vec<&str> = plan.jobs.iter().map(|(_, id)| id.as_str()).collect();
            assert_eq!(ids, [children[0].id.as_str()], "only the finished child");
            assert_eq!(plan.allocs, done);
        }
    }

    #[test]
    fn a_batch_jobs_results_outlive_eval_gc_and_job_gc_purges_it_when_dead() {
        let mut h = Harness::new();
        h.register_node(mock_node(1)).unwrap();
        let (_, eval) = h.register_job(mock_batch_job("b", 1)).unwrap();
        h.process(&eval).unwrap();
        let allocs: Vec<_> = h
            .snapshot()
            .allocs_by_job("default", "b")
            .map(|a| a.id.clone())
            .collect();
        let config = WorkerConfig::default();
        let later = h.now + 10 * HOUR;
        // Running: nothing to collect.
        assert!(plan_gc(&h.snapshot(), JOB_GC, later, &config)
            .jobs
            .is_empty());
        h.client_update(&allocs, ClientStatus::Complete, h.now)
            .unwrap();
        // Deleting a batch job's completed allocations while the job exists would run it
        // again: eval-gc keeps them.
        assert!(plan_gc(&h.snapshot(), EVAL_GC, later, &config)
            .evals
            .is_empty());
        // The job is dead now; job-gc purges it after the threshold, with its eval and alloc.
        assert!(plan_gc(&h.snapshot(), JOB_GC, h.now + HOUR, &config)
            .jobs
            .is_empty());
        let plan = plan_gc(&h.snapshot(), JOB_GC, later, &config);
        assert_eq!(plan.jobs.len(), 1);
        assert_eq!(plan.evals, vec![eval.id.clone()]);
        assert_eq!(plan.allocs, allocs);
        // force-gc ignores the thresholds.
        let forced = plan_gc(&h.snapshot(), FORCE_GC, h.now, &config);
        assert_eq!(forced.jobs.len(), 1);
        assert_eq!(forced.evals, vec![eval.id]);
    }

    #[test]
    fn a_stopped_job_with_running_allocations_is_not_purged() {
        let mut h = Harness::new();
        h.register_node(mock_node(1)).unwrap();
        let (_, eval) = h.register_job(mock_job("svc", 1)).unwrap();
        h.process(&eval).unwrap();
        h.apply(Command::JobDeregister(JobDeregister {
            namespace: "default".into(),
            job_id: "svc".into(),
            purge: false,
            eval: None,
            submit_time: h.now,
            tracked_versions: 0,
        }))
        .unwrap();
        let plan = plan_gc(
            &h.snapshot(),
            FORCE_GC,
            h.now + 10 * HOUR,
            &WorkerConfig::default(),
        );
        assert!(plan.jobs.is_empty(), "{plan:?}");
        assert!(plan.evals.is_empty(), "{plan:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn pause_resume_pause_while_parked_stays_parked() {
    let s = setup();
    let w = Worker::start(s.ctx.clone(), all(), 12);
    w.pause();
    w.wait_status(|st, _| st == WorkerStatus::Paused).await;
    w.resume();
    assert_eq!(w.status(), WorkerStatus::Resuming);
    w.pause();
    assert_eq!(w.status(), WorkerStatus::Paused);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(w.status(), WorkerStatus::Paused);
    assert_eq!(w.workload_status(), WorkloadStatus::Paused);
    w.resume();
    w.wait_status(|st, _| st == WorkerStatus::Started).await;
    s.ctx.shutdown.cancel();
    w.join().await;
}

/// A worker setup that batches, at index 9, whose first submitted plan fails with `error`.
fn batching_with_a_failed_plan(error: ServiceError) -> Setup {
    let s = setup_with(Some(Arc::new(PlanAndComplete)));
    s.state.advance_index(9);
    s.leader
        .batching
        .store(true, std::sync::atomic::Ordering::SeqCst);
    s.leader.plan_failures.lock().unwrap().push_back(error);
    s
}

#[tokio::test(start_paused = true)]
async fn a_batch_is_planned_on_one_snapshot_and_a_failed_plan_is_scheduled_again_alone() {
    // The first plan submitted is refused for good: its evaluation must go round again.
    let mut s = batching_with_a_failed_plan(ServiceError::rejected("plan refused"));
    for (id, index) in [("e1", 3), ("e2", 9), ("e3", 5)] {
        s.leader.push(id, index);
    }
    let w = Worker::start(s.ctx.clone(), all(), 13);
    let mut plans = Vec::new();
    let mut updates = Vec::new();
    let mut acks = Vec::new();
    while acks.len() < 3 {
        match next_outcome(&mut s.events).await {
            Event::Plan(token, index) => plans.push((token, index)),
            Event::Update(u) => updates.push(u),
            Event::Ack(id) => acks.push(id.to_string()),
            other => panic!("unexpected {other:?}"),
        }
    }
    acks.sort();
    assert_eq!(acks, ["e1", "e2", "e3"]);
    updates.sort();
    assert_eq!(updates, ["e1:token-e1", "e2:token-e2", "e3:token-e3"]);
    // Every accepted plan names its own delivery and the batch's one snapshot (index 9, the
    // highest WaitIndex); the refused one was submitted once more, alone.
    plans.sort();
    assert_eq!(plans.len(), 3, "{plans:?}");
    assert!(plans.iter().all(|(_, index)| *index == 9), "{plans:?}");
    let tokens: Vec<&str> = plans.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(tokens, ["token-e1", "token-e2", "token-e3"]);
    assert!(s.leader.plan_failures.lock().unwrap().is_empty());
    s.ctx.shutdown.cancel();
    w.join().await;
}

#[tokio::test(start_paused = true)]
async fn a_batched_plan_without_a_trusted_answer_is_nacked_not_planned_again() {
    // The leader failed while committing (its answer says nothing of the commit): planning
    // again here on this worker's state could place the allocations twice, so the
    // evaluation is nacked; the broker delivers it again once the plan is back.
    let mut s = batching_with_a_failed_plan(ServiceError::Internal {
        reason: "leadership lost while committing log".into(),
    });
    for (id, index) in [("e1", 3), ("e2", 9)] {
        s.leader.push(id, index);
    }
    let w = Worker::start(s.ctx.clone(), all(), 13);
    let mut plans = 0;
    let mut acks = Vec::new();
    let mut nacks = Vec::new();
    while acks.len() + nacks.len() < 2 {
        match next_outcome(&mut s.events).await {
            Event::Plan(..) => plans += 1,
            Event::Update(_) => {}
            Event::Ack(id) => acks.push(id.to_string()),
            Event::Nack(id) => nacks.push(id.to_string()),
            other => panic!("unexpected {other:?}"),
        }
    }
    // The fake leader logs accepted plans only: the failed one was not planned again.
    assert_eq!(plans, 1, "a plan submitted again");
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert_eq!(nacks.len(), 1, "{nacks:?}");
    assert_ne!(acks, nacks);
    s.ctx.shutdown.cancel();
    w.join().await;
}

#[test]
fn speculation_gives_each_evaluation_the_capacity_left_by_those_before_it() {
    use super::batch::{speculate, Speculation};
    use crate::scheduler::harness::{mock_batch_job, mock_node, Harness};
    use rand::SeedableRng;

    let mut h = Harness::new();
    // Three nodes with room for one allocation each.
    for n in 0..3 {
        let mut node = mock_node(n);
        node.node_resources.cpu.cpu_shares = 600;
        node.canonicalize();
        h.register_node(node).unwrap();
    }
    let mut evals = Vec::new();
    for j in 0..4 {
        let (_, eval) = h
            .register_job(mock_batch_job(&format!("job-{j}"), 1))
            .unwrap();
        evals.push(eval);
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    let out = speculate(
        &PlacementSchedulers,
        &evals,
        h.snapshot(),
        &SchedulerSettings::default(),
        h.now,
        &mut rng,
        &Default::default(),
    );
    assert_eq!(out.len(), 4);
    let mut nodes = Vec::new();
    for s in &out[..3] {
        let Speculation::Ready {
            plan: Some(plan),
            update,
        } = s
        else {
            panic!("expected a plan: {s:?}");
        };
        assert_eq!(update.status, teamster_storage::model::EvalStatus::Complete);
        assert_eq!(
            plan.node_allocation.values().map(Vec::len).sum::<usize>(),
            1
        );
        nodes.extend(plan.node_allocation.keys().cloned());
    }
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), 3, "each placement on its own node: {nodes:?}");
    // The fourth finds no room: it would create a blocked evaluation, so it goes alone.
    assert_eq!(out[3], Speculation::Alone);
    // Nothing was written: the store still has no allocation.
    assert_eq!(h.snapshot().alloc_count(), 0);
}
