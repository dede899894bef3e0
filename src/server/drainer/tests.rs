//! The node drainer: its plans over a state store that commands are applied to directly
//! (one "raft index" per write), and its loop on paused time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use rand::rngs::StdRng;
use rand::SeedableRng;
use teamster_storage::fsm::{
    AllocClientReport, AllocClientUpdate, ApplyPlanResults, Command, CommandResponse, JobRegister,
    NodeRegister, NodeUpdateDrain,
};
use teamster_storage::model::{
    AllocDeploymentStatus, AllocId, Allocation, ClientStatus, DrainStatus, DrainStrategy,
    EvalTrigger, Job, JobType, MigrateStrategy, Node, SchedulingEligibility, Timestamp,
};
use teamster_storage::state::StateStore;

use super::core::{self, Completion, DrainPlan, MarkReason};
use super::shell::{DrainWriter, DrainerDuty};
use crate::scheduler::harness::{fixture_uuid, mock_job, mock_node};
use crate::server::leader::LeaderDuty;
use crate::util::{Clock, RngSource};

const SEC: i64 = 1_000_000_000;
/// The drains in these tests start here.
const T0: i64 = 1_800_000_000 * SEC;

/// A state store written one index at a time, as raft would; the drainer's writer too.
struct World {
    store: StateStore,
    index: AtomicU64,
    allocs: AtomicU64,
}

impl DrainWriter for World {
    fn write(&self, cmd: Command) -> BoxFuture<'_, Result<CommandResponse, String>> {
        Box::pin(async move { Ok(self.store.apply(self.next_index(), cmd)) })
    }

    fn state(&self) -> &StateStore {
        &self.store
    }
}

impl World {
    fn new() -> Arc<World> {
        Arc::new(World {
            store: StateStore::new(),
            index: AtomicU64::new(1),
            allocs: AtomicU64::new(0),
        })
    }

    fn next_index(&self) -> u64 {
        self.index.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn apply(&self, cmd: Command) {
        let answer = self.store.apply(self.next_index(), cmd);
        assert!(answer.rejection().is_none(), "{answer:?}");
    }

    fn node(&self, n: u64) -> Node {
        let node = mock_node(n);
        self.apply(Command::NodeRegister(NodeRegister {
            node: node.clone(),
            evals: Vec::new(),
        }));
        node
    }

    fn job(&self, id: &str, job_type: JobType, count: u32, max_parallel: i64) -> Job {
        let mut job = mock_job(id, count);
        if job_type != JobType::Service {
            job.retype(job_type);
        }
        if job_type == JobType::Service {
            job.task_groups_mut()[0].migrate = Some(MigrateStrategy {
                max_parallel: Some(max_parallel),
                ..MigrateStrategy::nomad_default()
            });
        }
        self.apply(Command::JobRegister(JobRegister {
            job: job.clone(),
            eval: None,
            enforce_index: None,
            tracked_versions: 0,
        }));
        self.store
            .snapshot()
            .job_by_id("default", id)
            .map(|j| (**j).clone())
            .unwrap()
    }

    /// `count` running allocations of `job` on `node`, created at `created`.
    fn place(&self, job: &Job, node: &Node, count: u64, created: i64) -> Vec<AllocId> {
        let allocs: Vec<Allocation> = (0..count)
            .map(|_| {
                let n = self.allocs.fetch_add(1, Ordering::SeqCst);
                Allocation {
                    id: AllocId::new(fixture_uuid(3, n)),
                    namespace: job.namespace.clone(),
                    name: format!("{}.web[{n}]", job.id),
                    node_id: node.id.clone(),
                    job_id: job.id.clone(),
                    job_version: job.version,
                    task_group: "web".into(),
                    client_status: ClientStatus::Running,
                    create_time: created,
                    modify_time: created,
                    ..Allocation::default()
                }
            })
            .collect();
        let ids = allocs.iter().map(|a| a.id.clone()).collect();
        self.apply(Command::ApplyPlanResults(ApplyPlanResults {
            eval_id: Default::default(),
            allocs_updated: allocs,
            allocs_stopped: Vec::new(),
            allocs_preempted: Vec::new(),
            evals: Vec::new(),
            ineligible_nodes: Vec::new(),
            updated_at: created / SEC,
            deployment: None,
            deployment_updates: Vec::new(),
        }));
        ids
    }

    /// Client reports: a status, and a health verdict when given.
    fn report(&self, ids: &[AllocId], status: ClientStatus, healthy: Option<bool>) {
        let allocs = ids
            .iter()
            .map(|id| AllocClientReport {
                id: id.clone(),
                client_status: status,
                client_description: String::new(),
                task_states: Default::default(),
                modify_time: T0,
                seq: 0,
                deployment_status: healthy.map(|h| AllocDeploymentStatus {
                    healthy: Some(h),
                    timestamp: Timestamp::from_unix_nanos(T0),
                    ..AllocDeploymentStatus::default()
                }),
            })
            .collect();
        self.apply(Command::AllocClientUpdate(AllocClientUpdate {
            allocs,
            evals: Vec::new(),
        }));
    }

    fn drain(&self, node: &Node, deadline: i64, ignore_system_jobs: bool) {
        self.apply(Command::NodeUpdateDrain(NodeUpdateDrain {
            node_id: node.id.clone(),
            drain_strategy: Some(DrainStrategy {
                deadline,
                ignore_system_jobs,
                force_deadline: if deadline > 0 {
                    Timestamp::from_unix_nanos(T0 + deadline)
                } else {
                    Timestamp::ZERO
                },
                started_at: Timestamp::from_unix_nanos(T0),
            }),
            mark_eligible: false,
            updated_at: T0 / SEC,
            evals: Vec::new(),
            meta: None,
        }));
    }

    fn plan(&self, now: i64) -> DrainPlan {
        core::plan(&self.store.snapshot(), now)
    }

    /// Writes what `plan` decided, as the shell does.
    fn carry_out(&self, planned: &DrainPlan, now: i64) {
        let snapshot = self.store.snapshot();
        if let Some(cmd) = core::mark_command(
            &snapshot,
            &planned.marks,
            now,
            &mut StdRng::seed_from_u64(3),
        ) {
            self.apply(cmd);
        }
        for c in &planned.completions {
            self.apply(core::complete_command(c, now));
        }
    }

    fn alloc(&self, id: &AllocId) -> Arc<Allocation> {
        self.store
            .snapshot()
            .alloc_by_id(id.as_str())
            .cloned()
            .unwrap()
    }

    fn node_now(&self, node: &Node) -> Arc<Node> {
        self.store
            .snapshot()
            .node_by_id(node.id.as_str())
            .cloned()
            .unwrap()
    }
}

fn marked(planned: &DrainPlan) -> Vec<(AllocId, MarkReason)> {
    planned
        .marks
        .iter()
        .map(|m| (m.alloc_id.clone(), m.reason))
        .collect()
}

#[test]
fn service_allocations_migrate_max_parallel_at_a_time_as_replacements_settle() {
    let w = World::new();
    let (a, b) = (w.node(1), w.node(2));
    let job = w.job("web", JobType::Service, 4, 2);
    let old = w.place(&job, &a, 4, T0 - 60 * SEC);
    w.drain(&a, 0, false);

    // Running since before the drain: healthy 4, threshold 4 − 2: two go.
    let now = T0 + SEC;
    let planned = w.plan(now);
    assert_eq!(
        marked(&planned),
        [
            (old[0].clone(), MarkReason::Migrate),
            (old[1].clone(), MarkReason::Migrate)
        ]
    );
    assert!(planned.completions.is_empty());
    assert_eq!(planned.next_deadline, None, "no deadline");
    // One entry: the marks and one node-drain evaluation for the job.
    let cmd = core::mark_command(
        &w.store.snapshot(),
        &planned.marks,
        now,
        &mut StdRng::seed_from_u64(1),
    )
    .unwrap();
    let Command::AllocUpdateDesiredTransition(t) = &cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(t.allocs.len(), 2);
    assert_eq!(t.evals.len(), 1);
    assert_eq!(t.evals[0].triggered_by, EvalTrigger::NodeDrain);
    assert_eq!(t.evals[0].job_id, job.id);
    w.carry_out(&planned, now);
    assert!(w.alloc(&old[0]).desired_transition.should_migrate());

    // Marked allocations are on their way out: nothing more until replacements settle.
    assert!(w.plan(now).is_idle(), "{:?}", w.plan(now));
    w.report(&old[..2], ClientStatus::Complete, None);
    let new = w.place(&job, &b, 2, T0 + 2 * SEC);
    assert!(
        w.plan(T0 + 3 * SEC).is_idle(),
        "replacements have no verdict yet"
    );
    // One replacement healthy: one more may go.
    w.report(&new[..1], ClientStatus::Running, Some(true));
    let planned = w.plan(T0 + 4 * SEC);
    assert_eq!(marked(&planned), [(old[2].clone(), MarkReason::Migrate)]);
    w.carry_out(&planned, T0 + 4 * SEC);
    // A verdict of unhealthy settles a migration too (Nomad's `HasHealth`).
    w.report(&new[1..], ClientStatus::Running, Some(false));
    let planned = w.plan(T0 + 5 * SEC);
    assert_eq!(marked(&planned), [(old[3].clone(), MarkReason::Migrate)]);
    w.carry_out(&planned, T0 + 5 * SEC);

    // Done once the clients stopped every one.
    w.report(&old[2..3], ClientStatus::Complete, None);
    assert!(w.plan(T0 + 6 * SEC).is_idle(), "one still runs");
    w.report(&old[3..], ClientStatus::Complete, None);
    let planned = w.plan(T0 + 7 * SEC);
    assert_eq!(
        planned.completions,
        [Completion {
            node_id: a.id.clone(),
            deadline_reached: false
        }]
    );
    w.carry_out(&planned, T0 + 7 * SEC);
    let node = w.node_now(&a);
    assert!(node.drain_strategy.is_none());
    assert_eq!(
        node.last_drain.as_ref().unwrap().status,
        DrainStatus::Complete
    );
    assert_eq!(
        node.scheduling_eligibility,
        SchedulingEligibility::Ineligible
    );
    assert_eq!(w.plan(T0 + 8 * SEC), DrainPlan::default());
}

#[test]
fn healthy_counts_the_group_across_the_cluster() {
    let w = World::new();
    let (a, b) = (w.node(1), w.node(2));
    // Count 3, max_parallel 1: two settled allocations must stay.
    let job = w.job("web", JobType::Service, 3, 1);
    let on_a = w.place(&job, &a, 2, T0 - 60 * SEC);
    let on_b = w.place(&job, &b, 1, T0 + SEC);
    w.drain(&a, 0, false);
    // The one on b came after the drain began and has no verdict: healthy 2, none may go.
    assert!(w.plan(T0 + 2 * SEC).is_idle());
    w.report(&on_b, ClientStatus::Running, Some(true));
    assert_eq!(
        marked(&w.plan(T0 + 3 * SEC)),
        [(on_a[0].clone(), MarkReason::Migrate)]
    );
    // A pending allocation without a verdict does not count either.
    let w = World::new();
    let (a, b) = (w.node(1), w.node(2));
    let job = w.job("web", JobType::Service, 2, 1);
    w.place(&job, &a, 1, T0 - 60 * SEC);
    let pending = w.place(&job, &b, 1, T0 - 60 * SEC);
    w.report(&pending, ClientStatus::Pending, None);
    w.drain(&a, 0, false);
    assert!(w.plan(T0 + SEC).is_idle());
}

#[test]
fn batch_allocations_are_left_until_the_deadline() {
    let w = World::new();
    let a = w.node(1);
    w.node(2);
    let web = w.job("web", JobType::Service, 1, 1);
    let batch = w.job("report", JobType::Batch, 2, 1);
    let service = w.place(&web, &a, 1, T0 - 60 * SEC);
    let batches = w.place(&batch, &a, 2, T0 - 60 * SEC);
    w.drain(&a, 60 * SEC, false);

    let planned = w.plan(T0 + SEC);
    assert_eq!(
        marked(&planned),
        [(service[0].clone(), MarkReason::Migrate)]
    );
    assert_eq!(planned.next_deadline, Some(T0 + 60 * SEC));
    w.carry_out(&planned, T0 + SEC);
    w.report(&service, ClientStatus::Complete, None);
    // The batch work runs on; one finishes by itself.
    let planned = w.plan(T0 + 59 * SEC);
    assert!(planned.is_idle(), "{planned:?}");
    assert_eq!(planned.next_deadline, Some(T0 + 60 * SEC));
    w.report(&batches[..1], ClientStatus::Complete, None);
    assert!(w.plan(T0 + 59 * SEC).is_idle());
    // At the deadline the rest is stopped and the drain ends.
    let planned = w.plan(T0 + 60 * SEC);
    assert_eq!(
        marked(&planned),
        [(batches[1].clone(), MarkReason::Deadline)]
    );
    assert_eq!(
        planned.completions,
        [Completion {
            node_id: a.id.clone(),
            deadline_reached: true
        }]
    );
    w.carry_out(&planned, T0 + 60 * SEC);
    assert!(w.alloc(&batches[1]).desired_transition.should_migrate());
    assert!(w.node_now(&a).drain_strategy.is_none());

    // Finished before the deadline: the drain completes without waiting for it.
    let w = World::new();
    let a = w.node(1);
    let batch = w.job("report", JobType::Batch, 1, 1);
    let ids = w.place(&batch, &a, 1, T0 - 60 * SEC);
    w.drain(&a, 60 * SEC, false);
    assert!(w.plan(T0 + SEC).is_idle());
    w.report(&ids, ClientStatus::Complete, None);
    assert_eq!(
        w.plan(T0 + 2 * SEC).completions,
        [Completion {
            node_id: a.id.clone(),
            deadline_reached: false
        }]
    );
}

#[test]
fn system_allocations_go_last_unless_ignored() {
    for ignore in [false, true] {
        let w = World::new();
        let a = w.node(1);
        w.node(2);
        let web = w.job("web", JobType::Service, 1, 1);
        let agent = w.job("agent", JobType::System, 1, 1);
        let service = w.place(&web, &a, 1, T0 - 60 * SEC);
        let system = w.place(&agent, &a, 1, T0 - 60 * SEC);
        w.drain(&a, 0, ignore);
        let planned = w.plan(T0 + SEC);
        assert_eq!(
            marked(&planned),
            [(service[0].clone(), MarkReason::Migrate)]
        );
        assert!(planned.completions.is_empty());
        w.carry_out(&planned, T0 + SEC);
        // Marked but still running on its client: the system one waits.
        assert!(w.plan(T0 + 2 * SEC).is_idle());
        w.report(&service, ClientStatus::Complete, None);
        let planned = w.plan(T0 + 3 * SEC);
        let expected: Vec<(AllocId, MarkReason)> = if ignore {
            Vec::new()
        } else {
            vec![(system[0].clone(), MarkReason::System)]
        };
        assert_eq!(marked(&planned), expected, "ignore_system_jobs {ignore}");
        assert_eq!(planned.completions.len(), 1);
        w.carry_out(&planned, T0 + 3 * SEC);
        assert_eq!(
            w.alloc(&system[0]).desired_transition.should_migrate(),
            !ignore
        );
        assert!(w.node_now(&a).drain_strategy.is_none());
    }
}

#[test]
fn a_forced_drain_marks_everything_at_once() {
    for ignore in [false, true] {
        let w = World::new();
        let a = w.node(1);
        let web = w.job("web", JobType::Service, 3, 1);
        let batch = w.job("report", JobType::Batch, 1, 1);
        let agent = w.job("agent", JobType::System, 1, 1);
        let mut all = w.place(&web, &a, 3, T0 - 60 * SEC);
        all.extend(w.place(&batch, &a, 1, T0 - 60 * SEC));
        let system = w.place(&agent, &a, 1, T0 - 60 * SEC);
        if !ignore {
            all.extend(system);
        }
        all.sort();
        // Deadline < 0: force at once, whatever the pacing says.
        w.drain(&a, -1, ignore);
        let planned = w.plan(T0);
        let mut ids: Vec<AllocId> = planned.marks.iter().map(|m| m.alloc_id.clone()).collect();
        ids.sort();
        assert_eq!(ids, all, "ignore_system_jobs {ignore}");
        assert!(planned
            .marks
            .iter()
            .all(|m| m.reason == MarkReason::Deadline));
        assert_eq!(
            planned.completions,
            [Completion {
                node_id: a.id.clone(),
                deadline_reached: true
            }]
        );
        assert_eq!(planned.next_deadline, None);
    }
}

/// The wall clock of a test: `T0` plus the (paused) tokio time since it was made.
struct TokioClock {
    start: tokio::time::Instant,
}

impl Clock for TokioClock {
    fn now_unix_nanos(&self) -> i64 {
        T0 + self.start.elapsed().as_nanos() as i64
    }
}

#[tokio::test(start_paused = true)]
async fn the_duty_migrates_at_once_and_stops_the_rest_at_the_deadline() {
    let clock = Arc::new(TokioClock {
        start: tokio::time::Instant::now(),
    });
    let w = World::new();
    let a = w.node(1);
    w.node(2);
    let web = w.job("web", JobType::Service, 1, 1);
    let batch = w.job("report", JobType::Batch, 1, 1);
    let service = w.place(&web, &a, 1, T0 - 60 * SEC);
    let batches = w.place(&batch, &a, 1, T0 - 60 * SEC);
    w.drain(&a, 30 * SEC, false);
    let duty = DrainerDuty::new(w.clone(), clock.clone(), RngSource::seeded(5));
    duty.establish().await.unwrap();

    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(w.alloc(&service[0]).desired_transition.should_migrate());
    assert!(!w.alloc(&batches[0]).desired_transition.should_migrate());
    let evals: Vec<_> = w
        .store
        .snapshot()
        .evals()
        .filter(|e| e.triggered_by == EvalTrigger::NodeDrain)
        .map(|e| e.job_id.clone())
        .collect();
    assert_eq!(evals, std::slice::from_ref(&web.id));
    // The service allocation stops on its client; the batch one runs until the deadline.
    w.report(&service, ClientStatus::Complete, None);
    tokio::time::sleep(Duration::from_secs(27)).await;
    assert!(!w.alloc(&batches[0]).desired_transition.should_migrate());
    assert!(w.node_now(&a).drain_strategy.is_some());

    // A new leader: rebuilt from the state, it keeps the same deadline.
    duty.revoke().await;
    let duty = DrainerDuty::new(w.clone(), clock.clone(), RngSource::seeded(6));
    duty.establish().await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!w.alloc(&batches[0]).desired_transition.should_migrate());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(w.alloc(&batches[0]).desired_transition.should_migrate());
    let node = w.node_now(&a);
    assert!(node.drain_strategy.is_none());
    assert_eq!(
        node.last_drain.as_ref().unwrap().status,
        DrainStatus::Complete
    );
    duty.revoke().await;
}

#[tokio::test(start_paused = true)]
async fn the_duty_completes_a_drain_when_the_last_allocation_stops() {
    let clock = Arc::new(TokioClock {
        start: tokio::time::Instant::now(),
    });
    let w = World::new();
    let a = w.node(1);
    w.node(2);
    let web = w.job("web", JobType::Service, 1, 1);
    let service = w.place(&web, &a, 1, T0 - 60 * SEC);
    let duty = DrainerDuty::new(w.clone(), clock.clone(), RngSource::seeded(5));
    duty.establish().await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(!w.alloc(&service[0]).desired_transition.should_migrate());
    // The drain starts while the drainer waits: it reacts to the change.
    w.drain(&a, 0, false);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(w.alloc(&service[0]).desired_transition.should_migrate());
    assert!(w.node_now(&a).drain_strategy.is_some());
    w.report(&service, ClientStatus::Complete, None);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let node = w.node_now(&a);
    assert!(node.drain_strategy.is_none(), "{node:?}");
    assert_eq!(
        node.last_drain.as_ref().unwrap().status,
        DrainStatus::Complete
    );
    duty.revoke().await;
}
