//! Criterion benchmarks of the eval broker (`teamster::server::broker`).
//!
//! Workload: 100 000 evaluations over 10 000 jobs (10 per job, priorities 1–100, three
//! quarters `service`, one quarter `batch`), fed in 10 waves of one eval per job, so every
//! eval makes a full round trip — enqueue, dequeue (fresh token, nack timer), ack — through
//! ready heaps of up to 10 000 evals. A round trip per eval is the unit of throughput.
//!
//! - `core/round_trips`: the sans-IO core driven in a loop (no locks, no tasks).
//!   `core_cpu_time/*` times the same core workloads by the thread's CPU time instead of the
//!   wall clock, so they hold still on a machine shared with other work.
//! - `core/all_at_once`: the 100 000 evals enqueued together, so 9 of every 10 queue behind
//!   their job's in-flight eval; acks then keep the newest pending eval of each job and make
//!   the rest cancelable (drained in batches of 728). Throughput is still per enqueued eval,
//!   but only 20 000 of them are delivered: this measures the load-shedding path.
//! - `shell/dequeuers_16` and `shell/dequeuers_1`: the async shell on a 2-thread tokio
//!   runtime, with 16 (or 1) tasks looping `dequeue` → `ack` while the main task enqueues each
//!   wave with `enqueue_all` and waits for it to be acked; dequeuers idle between waves and
//!   are woken by the next one.
//!
//! Run: `cargo bench -p teamster-cluster-tests --bench eval_broker`.

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rand::rngs::StdRng;
use rand::SeedableRng;
use teamster::server::broker::{EvalBroker, EvalBrokerCore, QueueSet, SchedulerQueue};
use teamster::server::config::{EvalBrokerConfig, CANCELABLE_BATCH_SIZE};
use teamster_storage::model::{
    EvalId, EvalStatus, EvalTrigger, Evaluation, JobId, JobType, Namespace,
};
use tokio::sync::Notify;
use tokio::time::Instant;

const EVALS: usize = 100_000;
const JOBS: usize = 10_000;
const WAVES: usize = EVALS / JOBS;
const WORKER_TYPES: [&str; 5] = ["service", "batch", "system", "sysbatch", "_core"];

/// Wave `w` of the workload: one pending eval per job.
fn wave(w: usize, job_ids: &[JobId]) -> Vec<Evaluation> {
    let namespace = Namespace::default_namespace();
    job_ids
        .iter()
        .enumerate()
        .map(|(j, job_id)| {
            let index = (w * JOBS + j + 1) as u64;
            Evaluation {
                id: EvalId::new(format!("eval-{w}-{j}")),
                namespace: namespace.clone(),
                priority: (j % 100) as u32 + 1,
                eval_type: if j % 4 == 0 {
                    JobType::Batch
                } else {
                    JobType::Service
                },
                triggered_by: EvalTrigger::JobRegister,
                job_id: job_id.clone(),
                status: EvalStatus::Pending,
                create_index: index,
                modify_index: index,
                ..Evaluation::default()
            }
        })
        .collect()
}

fn workload() -> Vec<Vec<Evaluation>> {
    let job_ids: Vec<JobId> = (0..JOBS).map(|j| JobId::new(format!("job-{j}"))).collect();
    (0..WAVES).map(|w| wave(w, &job_ids)).collect()
}

fn enabled_core() -> EvalBrokerCore {
    let mut core = EvalBrokerCore::new(EvalBrokerConfig::default(), StdRng::seed_from_u64(1))
        .expect("default config is valid");
    core.set_enabled(true);
    core
}

fn worker_queues() -> QueueSet {
    QueueSet::from_names(&WORKER_TYPES)
}

/// The `round_trips` workload: each wave enqueued, then dequeued and acked until empty.
fn round_trips(mut core: EvalBrokerCore, waves: Vec<Vec<Evaluation>>) -> EvalBrokerCore {
    let queues = worker_queues();
    let now = Instant::now();
    let mut acked = 0;
    for wave in waves {
        for eval in wave {
            core.enqueue(eval, now, 0).expect("enabled");
        }
        while let Some((eval, token)) = core.dequeue(queues, now).expect("enabled") {
            core.ack(&eval.id, &token, now).expect("outstanding");
            acked += 1;
        }
        core.take_effects();
    }
    assert_eq!(acked, EVALS);
    core
}

/// The `all_at_once` workload: everything enqueued, then drained with cancelable batches.
fn all_at_once(mut core: EvalBrokerCore, waves: Vec<Vec<Evaluation>>) -> EvalBrokerCore {
    let queues = worker_queues();
    let now = Instant::now();
    for eval in waves.into_iter().flatten() {
        core.enqueue(eval, now, 0).expect("enabled");
    }
    let (mut acked, mut canceled) = (0, 0);
    while let Some((eval, token)) = core.dequeue(queues, now).expect("enabled") {
        core.ack(&eval.id, &token, now).expect("outstanding");
        acked += 1;
        canceled += core
            .cancelable(CANCELABLE_BATCH_SIZE)
            .expect("enabled")
            .len();
    }
    assert_eq!((acked, canceled), (2 * JOBS, EVALS - 2 * JOBS));
    core
}

/// On-CPU time of the calling thread (Linux `/proc/thread-self/schedstat`, nanoseconds), so
/// the core's figures do not depend on how busy the shared machine is; `None` elsewhere.
fn thread_cpu_time() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

type Workload = fn(EvalBrokerCore, Vec<Vec<Evaluation>>) -> EvalBrokerCore;

const CORE_WORKLOADS: [(&str, Workload); 2] =
    [("round_trips", round_trips), ("all_at_once", all_at_once)];

/// Wall-clock time of the core workloads.
fn bench_core(c: &mut Criterion) {
    let mut group = c.benchmark_group("core");
    group.sample_size(10);
    group.throughput(Throughput::Elements(EVALS as u64));
    for (name, run) in CORE_WORKLOADS {
        group.bench_function(name, |b| {
            b.iter_batched(
                || (enabled_core(), workload()),
                |(core, waves)| black_box(run(core, waves)),
                BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

/// The same workloads timed by the thread's CPU time (falls back to wall-clock time where
/// that is not available).
fn bench_core_cpu(c: &mut Criterion) {
    let mut group = c.benchmark_group("core_cpu_time");
    group.sample_size(10);
    group.throughput(Throughput::Elements(EVALS as u64));
    for (name, run) in CORE_WORKLOADS {
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let (core, waves) = (enabled_core(), workload());
                    let wall = std::time::Instant::now();
                    let cpu = thread_cpu_time();
                    let core = run(core, waves);
                    total += match (cpu, thread_cpu_time()) {
                        (Some(start), Some(end)) => end.saturating_sub(start),
                        _ => wall.elapsed(),
                    };
                    drop(black_box(core));
                }
                total
            });
        });
    }
    group.finish();
}

/// Runs the wave workload through the shell with `dequeuers` concurrent dequeue → ack tasks
/// and returns the time from the first enqueue to the last ack.
async fn shell_run(dequeuers: usize, waves: Vec<Vec<Evaluation>>) -> Duration {
    let clock = teamster::util::clock::ManualClock::starting_at(0);
    let broker = EvalBroker::new(EvalBrokerConfig::default(), StdRng::seed_from_u64(1), clock)
        .expect("default config is valid");
    broker.set_enabled(true);
    let acked = Arc::new(AtomicUsize::new(0));
    let wave_done = Arc::new(Notify::new());
    let tasks: Vec<_> = (0..dequeuers)
        .map(|_| {
            let (broker, acked, wave_done) = (broker.clone(), acked.clone(), wave_done.clone());
            tokio::spawn(async move {
                // Ends when the broker is disabled.
                while let Ok(delivery) = broker
                    .dequeue(&WORKER_TYPES, Duration::from_millis(500))
                    .await
                {
                    let Some((eval, token)) = delivery else {
                        continue;
                    };
                    broker.ack(&eval.id, &token).expect("outstanding");
                    if (acked.fetch_add(1, Ordering::AcqRel) + 1) % JOBS == 0 {
                        wave_done.notify_one();
                    }
                }
            })
        })
        .collect();
    while broker.waiting_dequeuers() < dequeuers {
        tokio::task::yield_now().await;
    }

    let start = std::time::Instant::now();
    for wave in waves {
        broker
            .enqueue_all(wave.into_iter().map(|e| (e, None)).collect())
            .expect("enabled");
        wave_done.notified().await;
    }
    let elapsed = start.elapsed();
    assert_eq!(acked.load(Ordering::Acquire), EVALS);
    assert_eq!(broker.stats().total_unacked + broker.stats().total_ready, 0);
    assert_eq!(
        broker.stats().by_scheduler[&SchedulerQueue::Failed].ready,
        0
    );

    broker.set_enabled(false);
    for task in tasks {
        task.await.expect("dequeuer task");
    }
    elapsed
}

fn bench_shell(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut group = c.benchmark_group("shell");
    group.sample_size(10);
    group.throughput(Throughput::Elements(EVALS as u64));
    for dequeuers in [16, 1] {
        group.bench_function(format!("dequeuers_{dequeuers}"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| runtime.block_on(shell_run(dequeuers, workload())))
                    .sum()
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench_core, bench_core_cpu, bench_shell);
criterion_main!(benches);
