//! The periodic dispatcher on paused time: its plans, and its loop over a state store that
//! commands are applied to directly (one "raft index" per write).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use chrono::DateTime;
use futures::future::BoxFuture;
use teamster_storage::fsm::{Command, CommandResponse, JobRegister};
use teamster_storage::model::{JobType, PeriodicConfig};
use teamster_storage::state::StateStore;

use super::core::{self, Action, Parent};
use super::shell::{LaunchWriter, PeriodicDuty};
use crate::scheduler::harness::mock_batch_job;
use crate::server::leader::LeaderDuty;
use crate::util::{Clock, RngSource};

const SEC: i64 = 1_000_000_000;

fn unix(rfc3339: &str) -> i64 {
    DateTime::parse_from_rfc3339(rfc3339).unwrap().timestamp()
}

/// The wall clock of a test: `base` plus the (paused) tokio time since it was made.
struct TokioClock {
    base: i64,
    start: tokio::time::Instant,
}

impl Clock for TokioClock {
    fn now_unix_nanos(&self) -> i64 {
        self.base + self.start.elapsed().as_nanos() as i64
    }
}

fn clock_at(rfc3339: &str) -> Arc<TokioClock> {
    Arc::new(TokioClock {
        base: unix(rfc3339) * SEC,
        start: tokio::time::Instant::now(),
    })
}

/// Applies commands to a store, one index each, as raft would.
struct StoreWriter {
    store: StateStore,
    index: AtomicU64,
}

impl StoreWriter {
    fn new() -> Arc<StoreWriter> {
        Arc::new(StoreWriter {
            store: StateStore::new(),
            index: AtomicU64::new(1),
        })
    }

    fn apply(&self, cmd: Command) -> CommandResponse {
        let index = self.index.fetch_add(1, Ordering::SeqCst) + 1;
        self.store.apply(index, cmd)
    }
}

impl LaunchWriter for StoreWriter {
    fn write(&self, cmd: Command) -> BoxFuture<'_, Result<CommandResponse, String>> {
        Box::pin(async move { Ok(self.apply(cmd)) })
    }

    fn state(&self) -> &StateStore {
        &self.store
    }
}

fn periodic_job(
    id: &str,
    spec: &str,
    zone: &str,
    prohibit_overlap: bool,
) -> teamster_storage::model::Job {
    let mut job = mock_batch_job(id, 1);
    job.retype(JobType::Batch);
    job.periodic = Some(PeriodicConfig {
        spec: spec.into(),
        time_zone: zone.into(),
        prohibit_overlap,
        ..PeriodicConfig::default()
    });
    job.canonicalize();
    job.validate().unwrap();
    job
}

fn register(writer: &StoreWriter, job: teamster_storage::model::Job, now: i64) {
    let mut job = job;
    job.submit_time = now;
    let answer = writer.apply(Command::JobRegister(JobRegister {
        job,
        eval: None,
        enforce_index: None,
        tracked_versions: 0,
    }));
    assert!(answer.rejection().is_none(), "{answer:?}");
}

/// The launch times (Unix seconds) of the children of `parent`, in order.
fn launches(writer: &StoreWriter, parent: &str) -> Vec<i64> {
    let snapshot = writer.store.snapshot();
    let mut times: Vec<i64> = snapshot
        .job_children("default", parent)
        .map(|c| {
            let id = c.id.as_str();
            id.rsplit("periodic-").next().unwrap().parse().unwrap()
        })
        .collect();
    times.sort();
    times
}

fn duty(writer: &Arc<StoreWriter>, clock: &Arc<TokioClock>) -> PeriodicDuty {
    PeriodicDuty::new(writer.clone(), clock.clone(), RngSource::seeded(7))
}

#[test]
fn plan_launches_the_newest_missed_time_once_and_skips_under_overlap() {
    let job = periodic_job("p", "*/10 * * * *", "UTC", true);
    let parent = Parent {
        namespace: job.namespace.clone(),
        job_id: job.id.clone(),
        schedule: job.periodic.as_ref().unwrap().schedule().unwrap(),
        prohibit_overlap: true,
        last_launch: unix("2026-05-01T10:00:00Z") * SEC,
        child_running: false,
    };
    // Nothing due yet: the next launch is 10:10.
    let planned = core::plan(
        std::slice::from_ref(&parent),
        unix("2026-05-01T10:09:59Z") * SEC,
    );
    assert!(planned.actions.is_empty());
    assert_eq!(planned.next, Some(unix("2026-05-01T10:10:00Z")));
    // 10:10, 10:20 and 10:30 were missed: one launch, for 10:30; next 10:40.
    let planned = core::plan(
        std::slice::from_ref(&parent),
        unix("2026-05-01T10:35:00Z") * SEC,
    );
    assert_eq!(
        planned.actions,
        [Action::Launch {
            namespace: job.namespace.clone(),
            job_id: job.id.clone(),
            launch_secs: unix("2026-05-01T10:30:00Z"),
        }]
    );
    assert_eq!(planned.next, Some(unix("2026-05-01T10:40:00Z")));
    let running = Parent {
        child_running: true,
        ..parent
    };
    let planned = core::plan(&[running], unix("2026-05-01T10:10:00Z") * SEC);
    assert!(
        matches!(planned.actions[..], [Action::Skip { launch_secs, .. }] if launch_secs == unix("2026-05-01T10:10:00Z"))
    );
}

#[tokio::test(start_paused = true)]
async fn launches_happen_at_their_instants_across_a_daylight_saving_change() {
    let clock = clock_at("2026-03-06T12:00:00Z");
    let writer = StoreWriter::new();
    register(
        &writer,
        periodic_job("nightly", "30 2 * * *", "America/New_York", false),
        clock.now_unix_nanos(),
    );
    let duty = duty(&writer, &clock);
    duty.establish().await.unwrap();
    // Friday 02:30 EST, Sunday's 02:30 does not exist (03:00 EDT), Monday 02:30 EDT.
    let expected = [
        unix("2026-03-07T02:30:00-05:00"),
        unix("2026-03-08T03:00:00-04:00"),
        unix("2026-03-09T02:30:00-04:00"),
    ];
    let mut seen_at = Vec::new();
    for t in expected {
        let until = Duration::from_nanos((t * SEC - clock.now_unix_nanos()) as u64);
        tokio::time::sleep(until - Duration::from_secs(1)).await;
        assert_eq!(
            launches(&writer, "nightly").len(),
            seen_at.len(),
            "nothing early"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        seen_at.push(t);
        assert_eq!(launches(&writer, "nightly"), seen_at);
    }
    // Each child is a plain batch job with its evaluation, named by its launch time.
    let snapshot = writer.store.snapshot();
    let child = snapshot
        .job_by_id("default", &format!("nightly/periodic-{}", expected[1]))
        .unwrap();
    assert!(child.periodic.is_none());
    assert_eq!(child.parent_id.as_str(), "nightly");
    assert_eq!(
        snapshot.evals_by_job("default", child.id.as_str()).count(),
        1
    );
    let parent = snapshot.job_by_id("default", "nightly").unwrap();
    assert_eq!(parent.status, teamster_storage::model::JobStatus::Running);
    assert_eq!(
        snapshot.evals_by_job("default", "nightly").count(),
        0,
        "the parent itself is never evaluated"
    );
    duty.revoke().await;
}

#[tokio::test(start_paused = true)]
async fn prohibit_overlap_skips_a_launch_while_a_child_runs() {
    let clock = clock_at("2026-05-01T10:00:30Z");
    let writer = StoreWriter::new();
    register(
        &writer,
        periodic_job("sync", "* * * * *", "UTC", true),
        clock.now_unix_nanos(),
    );
    let duty = duty(&writer, &clock);
    duty.establish().await.unwrap();
    // 10:01 launches; its child stays pending (no scheduler here), so 10:02 and 10:03 are
    // skipped, but recorded.
    tokio::time::sleep(Duration::from_secs(60 * 3)).await;
    assert_eq!(launches(&writer, "sync"), [unix("2026-05-01T10:01:00Z")]);
    let recorded = writer
        .store
        .snapshot()
        .periodic_launch("default", "sync")
        .unwrap()
        .launch;
    assert_eq!(recorded, unix("2026-05-01T10:03:00Z") * SEC);
    // The child is stopped (dead once its eval completes): the next launch runs.
    let child = format!("sync/periodic-{}", unix("2026-05-01T10:01:00Z"));
    let answer = writer.apply(Command::JobDeregister(
        teamster_storage::fsm::JobDeregister {
            namespace: "default".into(),
            job_id: child.as_str().into(),
            purge: false,
            eval: None,
            submit_time: 0,
            tracked_versions: 0,
        },
    ));
    assert!(answer.rejection().is_none());
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(
        launches(&writer, "sync"),
        [unix("2026-05-01T10:01:00Z"), unix("2026-05-01T10:04:00Z")]
    );
    duty.revoke().await;
}

#[tokio::test(start_paused = true)]
async fn a_new_leader_neither_repeats_nor_skips_a_launch() {
    let clock = clock_at("2026-05-01T10:00:00Z");
    let writer = StoreWriter::new();
    register(
        &writer,
        periodic_job("report", "*/5 * * * *", "UTC", false),
        clock.now_unix_nanos(),
    );
    let old = duty(&writer, &clock);
    old.establish().await.unwrap();
    tokio::time::sleep(Duration::from_secs(5 * 60 + 1)).await;
    assert_eq!(launches(&writer, "report"), [unix("2026-05-01T10:05:00Z")]);
    // The leader dies one second before 10:10; the next one is up at 10:10:20.
    tokio::time::sleep(Duration::from_secs(5 * 60 - 2)).await;
    old.revoke().await;
    tokio::time::sleep(Duration::from_secs(21)).await;
    assert_eq!(launches(&writer, "report").len(), 1, "no leader, no launch");
    let new = duty(&writer, &clock);
    new.establish().await.unwrap();
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        launches(&writer, "report"),
        [unix("2026-05-01T10:05:00Z"), unix("2026-05-01T10:10:00Z")],
        "the launch missed during the failover runs once, at once"
    );
    // Two dispatchers at once (a deposed leader that has not noticed yet): the state takes
    // the 10:15 launch once.
    old.establish().await.unwrap();
    tokio::time::sleep(Duration::from_secs(5 * 60)).await;
    assert_eq!(
        launches(&writer, "report"),
        [
            unix("2026-05-01T10:05:00Z"),
            unix("2026-05-01T10:10:00Z"),
            unix("2026-05-01T10:15:00Z")
        ]
    );
    old.revoke().await;
    new.revoke().await;
}

#[tokio::test(start_paused = true)]
async fn a_parent_registered_later_wakes_the_dispatcher_and_a_stopped_one_stops_launching() {
    let clock = clock_at("2026-05-01T10:00:00Z");
    let writer = StoreWriter::new();
    let duty = duty(&writer, &clock);
    duty.establish().await.unwrap();
    tokio::time::sleep(Duration::from_secs(90)).await;
    register(
        &writer,
        periodic_job("late", "* * * * *", "UTC", false),
        clock.now_unix_nanos(),
    );
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert_eq!(launches(&writer, "late"), [unix("2026-05-01T10:02:00Z")]);
    let answer = writer.apply(Command::JobDeregister(
        teamster_storage::fsm::JobDeregister {
            namespace: "default".into(),
            job_id: "late".into(),
            purge: false,
            eval: None,
            submit_time: 0,
            tracked_versions: 0,
        },
    ));
    assert!(answer.rejection().is_none());
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(launches(&writer, "late").len(), 1);
    duty.revoke().await;
}

#[tokio::test(start_paused = true)]
async fn an_edited_schedule_starts_from_its_registration_and_makes_nothing_up() {
    let clock = clock_at("2026-05-01T10:00:00Z");
    let writer = StoreWriter::new();
    register(
        &writer,
        periodic_job("edited", "0 3 * * *", "UTC", false),
        clock.now_unix_nanos(),
    );
    let duty = duty(&writer, &clock);
    duty.establish().await.unwrap();
    tokio::time::sleep(Duration::from_secs(30 * 60 + 10)).await;
    // At 10:30:10 the schedule becomes every five minutes: 10:05…10:30 are not made up.
    register(
        &writer,
        periodic_job("edited", "*/5 * * * *", "UTC", false),
        clock.now_unix_nanos(),
    );
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(launches(&writer, "edited").is_empty());
    tokio::time::sleep(Duration::from_secs(4 * 60)).await;
    assert_eq!(launches(&writer, "edited"), [unix("2026-05-01T10:35:00Z")]);
    duty.revoke().await;
}
