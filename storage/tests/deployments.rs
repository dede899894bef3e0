//! Deployments in the state store: counts moved by placements and health reports, the
//! progress deadline, promotion, status changes with stability and auto-revert, and the
//! drain record of a node.

mod common;

use common::*;
use teamster_storage::fsm::{
    AllocClientReport, AllocClientUpdate, ApplyError, Command, DeploymentAllocHealth,
    DeploymentPromote, DeploymentStatusUpdateCommand, JobRegister, NodeDrainComplete,
    NodeUpdateDrain,
};
use teamster_storage::model::{
    AllocDeploymentStatus, ClientStatus, Deployment, DeploymentId, DeploymentState,
    DeploymentStatus, DeploymentStatusUpdate, DrainStatus, DrainStrategy, Job, Timestamp,
};
use teamster_storage::state::{StateStore, Table};

const SEC: i64 = 1_000_000_000;
const T0: i64 = 1_700_000_000 * SEC;

fn applied(response: teamster_storage::fsm::CommandResponse) {
    assert!(response.rejection().is_none(), "{response:?}");
}

fn rejected(response: teamster_storage::fsm::CommandResponse) -> ApplyError {
    response.rejection().cloned().expect("rejected")
}

fn deployment(job: &Job, canaries: u32) -> Deployment {
    Deployment {
        id: DeploymentId::new("dep-1"),
        namespace: job.namespace.clone(),
        job_id: job.id.clone(),
        job_version: job.version,
        status: DeploymentStatus::Running,
        status_description: "Deployment is running".into(),
        task_groups: [(
            "web".to_owned(),
            DeploymentState {
                desired_total: 2,
                desired_canaries: canaries,
                progress_deadline: 600 * SEC as u64,
                auto_revert: true,
                // The scheduler's counts are ignored for a new deployment.
                placed_allocs: 99,
                ..DeploymentState::default()
            },
        )]
        .into(),
        ..Deployment::default()
    }
}

/// A store with a node, the job and a plan that creates `dep` and places two allocations
/// (the first a canary when `canary`).
fn seeded(canary: bool) -> (StateStore, Job) {
    let store = StateStore::new();
    let job = job("web", 2);
    applied(store.apply(1, register_node(&node(1))));
    applied(store.apply(2, register(&job, Some(eval_for(&job, 1)))));
    let mut allocs = vec![
        alloc(0, &job, &node_id(1), &eval_id(1), 0),
        alloc(1, &job, &node_id(1), &eval_id(1), 1),
    ];
    for a in &mut allocs {
        a.deployment_id = DeploymentId::new("dep-1");
    }
    if canary {
        allocs[0].deployment_status = Some(Box::new(AllocDeploymentStatus {
            canary: true,
            ..AllocDeploymentStatus::default()
        }));
    }
    let Command::ApplyPlanResults(mut results) = place(&eval_id(1), allocs) else {
        unreachable!()
    };
    results.deployment = Some(deployment(&job, u32::from(canary)));
    applied(store.apply(3, Command::ApplyPlanResults(results)));
    (store, job)
}

fn health(n: u64, healthy: bool, at: i64) -> Command {
    Command::AllocClientUpdate(AllocClientUpdate {
        allocs: vec![AllocClientReport {
            id: alloc_id(n),
            client_status: ClientStatus::Running,
            client_description: String::new(),
            task_states: Default::default(),
            modify_time: at,
            seq: 0,
            deployment_status: Some(AllocDeploymentStatus {
                healthy: Some(healthy),
                timestamp: Timestamp::from_unix_nanos(at),
                ..AllocDeploymentStatus::default()
            }),
        }],
        evals: Vec::new(),
    })
}

fn group(store: &StateStore) -> DeploymentState {
    store
        .snapshot()
        .deployment_by_id("dep-1")
        .unwrap()
        .task_groups["web"]
        .clone()
}

#[test]
fn placements_and_health_reports_move_the_counts_and_the_progress_deadline() {
    let (store, job) = seeded(true);
    let snap = store.snapshot();
    let d = snap.deployment_by_id("dep-1").unwrap();
    assert_eq!(d.create_index, 3);
    assert_eq!(snap.table_index(Table::Deployments), 3);
    assert_eq!(snap.latest_deployment("default", "web").unwrap().id, d.id);
    assert_eq!(snap.allocs_by_deployment("dep-1").count(), 2);
    let g = &d.task_groups["web"];
    assert_eq!(
        g.placed_allocs, 2,
        "counted by the state, not taken from the plan"
    );
    assert_eq!(g.placed_canaries, vec![alloc_id(0)]);
    // The first placement starts the progress deadline.
    assert_eq!(
        g.require_progress_by.unix_nanos(),
        Some(T0 + 600 * SEC),
        "{:?}",
        g.require_progress_by
    );

    applied(store.apply(4, health(0, true, T0 + 30 * SEC)));
    let g = group(&store);
    assert_eq!((g.healthy_allocs, g.unhealthy_allocs), (1, 0));
    assert_eq!(
        g.require_progress_by.unix_nanos(),
        Some(T0 + 630 * SEC),
        "a healthy report pushes the deadline"
    );
    let a = store.snapshot().alloc_by_id(&alloc_id(0)).unwrap().clone();
    let status = a.deployment_status.as_ref().unwrap();
    assert!(status.healthy == Some(true) && status.canary, "{status:?}");
    // The same report again counts nothing; healthy turning unhealthy moves one.
    applied(store.apply(5, health(0, true, T0 + 31 * SEC)));
    assert_eq!(group(&store).healthy_allocs, 1);
    applied(store.apply(6, health(0, false, T0 + 32 * SEC)));
    let g = group(&store);
    assert_eq!((g.healthy_allocs, g.unhealthy_allocs), (0, 1));
    // A server-side update of the allocation keeps the client's verdict.
    applied(store.apply(
        7,
        place(
            &eval_id(1),
            vec![(*store.snapshot().alloc_by_id(&alloc_id(1)).unwrap().as_ref()).clone()],
        ),
    ));
    assert_eq!(group(&store).placed_allocs, 2);
    let _ = job;
}

#[test]
fn promotion_needs_healthy_canaries_and_turns_them_into_ordinary_allocations() {
    let (store, _) = seeded(true);
    let promote = |index| {
        Command::DeploymentPromote(DeploymentPromote {
            deployment_id: DeploymentId::new("dep-1"),
            all: true,
            groups: Vec::new(),
            eval: None,
            modify_time: T0 + index as i64 * SEC,
        })
    };
    let e = rejected(store.apply(4, promote(4)));
    assert_eq!(
        e.to_string(),
        "Task group \"web\" has 0/1 healthy allocations"
    );
    assert!(!group(&store).promoted, "nothing changed");

    applied(store.apply(5, health(0, true, T0 + 5 * SEC)));
    applied(store.apply(6, promote(6)));
    let g = group(&store);
    assert!(g.promoted);
    assert_eq!(g.require_progress_by.unix_nanos(), Some(T0 + 606 * SEC));
    let a = store.snapshot().alloc_by_id(&alloc_id(0)).unwrap().clone();
    assert!(!a.is_canary() && a.is_healthy());
    assert_eq!(
        store
            .snapshot()
            .deployment_by_id("dep-1")
            .unwrap()
            .status_description,
        "Deployment is running"
    );

    // A deployment without canaries cannot be promoted.
    let (store, _) = seeded(false);
    let e = rejected(store.apply(4, promote(4)));
    assert!(e.to_string().contains("no canaries"), "{e}");
}

#[test]
fn status_changes_mark_stability_revert_and_refuse_terminal_deployments() {
    let (store, job) = seeded(false);
    let update = |status, description: &str| DeploymentStatusUpdate {
        deployment_id: DeploymentId::new("dep-1"),
        status,
        status_description: description.into(),
    };
    // Pause, then resume: the deadline restarts from the resume.
    applied(store.apply(
        4,
        Command::DeploymentStatusUpdate(DeploymentStatusUpdateCommand {
            update: update(DeploymentStatus::Paused, "Deployment is paused"),
            revert: None,
            eval: None,
            modify_time: T0 + 4 * SEC,
        }),
    ));
    applied(store.apply(
        5,
        Command::DeploymentStatusUpdate(DeploymentStatusUpdateCommand {
            update: update(DeploymentStatus::Running, "Deployment is running"),
            revert: None,
            eval: Some(eval_for(&job, 5)),
            modify_time: T0 + 50 * SEC,
        }),
    ));
    assert_eq!(
        group(&store).require_progress_by.unix_nanos(),
        Some(T0 + 650 * SEC)
    );
    assert!(store.snapshot().eval_by_id(&eval_id(5)).is_some());

    // Failing with a revert registers the given job as a new version in the same entry.
    let mut stable = job.clone();
    stable.meta.insert("v".into(), "old".into());
    applied(store.apply(
        6,
        Command::DeploymentStatusUpdate(DeploymentStatusUpdateCommand {
            update: update(
                DeploymentStatus::Failed,
                "Failed due to unhealthy allocations",
            ),
            revert: Some(JobRegister {
                job: stable,
                eval: Some(eval_for(&job, 6)),
                enforce_index: None,
                tracked_versions: 0,
            }),
            eval: None,
            modify_time: T0 + 60 * SEC,
        }),
    ));
    let snap = store.snapshot();
    assert_eq!(
        snap.deployment_by_id("dep-1").unwrap().status,
        DeploymentStatus::Failed
    );
    assert_eq!(snap.job_by_id("default", "web").unwrap().version, 1);
    // A terminal deployment refuses further changes, and nothing moves.
    let e = rejected(store.apply(
        7,
        Command::DeploymentStatusUpdate(DeploymentStatusUpdateCommand {
            update: update(DeploymentStatus::Successful, "x"),
            revert: None,
            eval: None,
            modify_time: T0,
        }),
    ));
    assert!(e.to_string().contains("terminal status \"failed\""), "{e}");

    // Success marks the version stable.
    let (store, _) = seeded(false);
    applied(store.apply(
        4,
        Command::DeploymentStatusUpdate(DeploymentStatusUpdateCommand {
            update: update(
                DeploymentStatus::Successful,
                "Deployment completed successfully",
            ),
            revert: None,
            eval: None,
            modify_time: T0,
        }),
    ));
    assert!(store.snapshot().job_by_id("default", "web").unwrap().stable);
}

#[test]
fn operator_health_must_name_allocations_of_the_deployment() {
    let (store, job) = seeded(false);
    applied(store.apply(
        4,
        place(
            &eval_id(1),
            vec![alloc(7, &job, &node_id(1), &eval_id(1), 7)],
        ),
    ));
    let cmd = |ids: Vec<u64>| {
        Command::DeploymentAllocHealth(DeploymentAllocHealth {
            deployment_id: DeploymentId::new("dep-1"),
            healthy: ids.into_iter().map(alloc_id).collect(),
            unhealthy: Vec::new(),
            update: None,
            revert: None,
            eval: None,
            timestamp: T0,
        })
    };
    let e = rejected(store.apply(5, cmd(vec![0, 7])));
    assert!(e.to_string().contains("is not part of deployment"), "{e}");
    assert_eq!(group(&store).healthy_allocs, 0, "all or nothing");
    applied(store.apply(6, cmd(vec![0, 1])));
    assert_eq!(group(&store).healthy_allocs, 2);
}

#[test]
fn a_drain_is_recorded_started_cancelled_and_completed() {
    let store = StateStore::new();
    applied(store.apply(1, register_node(&node(1))));
    let drain = |index: i64, strategy: Option<DrainStrategy>| {
        let meta = strategy
            .is_some()
            .then(|| [("reason".to_owned(), "kernel".to_owned())].into());
        Command::NodeUpdateDrain(NodeUpdateDrain {
            node_id: node_id(1),
            drain_strategy: strategy,
            mark_eligible: false,
            updated_at: 1_700_000_000 + index,
            evals: Vec::new(),
            meta,
        })
    };
    let strategy = DrainStrategy {
        deadline: 5 * SEC,
        started_at: Timestamp::from_unix_nanos(T0),
        ..DrainStrategy::default()
    };
    applied(store.apply(2, drain(2, Some(strategy.clone()))));
    let last = |s: &StateStore| {
        s.snapshot()
            .node_by_id(&node_id(1))
            .unwrap()
            .last_drain
            .clone()
            .unwrap()
    };
    assert_eq!(last(&store).status, DrainStatus::Draining);
    assert_eq!(last(&store).started_at, Timestamp::from_unix_nanos(T0));
    assert_eq!(last(&store).meta["reason"], "kernel");
    applied(store.apply(3, drain(3, None)));
    assert_eq!(last(&store).status, DrainStatus::Canceled);
    applied(store.apply(4, drain(4, Some(strategy))));
    applied(store.apply(
        5,
        Command::NodeDrainComplete(NodeDrainComplete {
            node_id: node_id(1),
            updated_at: 1_700_000_009,
        }),
    ));
    let node = store.snapshot().node_by_id(&node_id(1)).unwrap().clone();
    assert!(node.drain_strategy.is_none());
    assert_eq!(
        node.last_drain.as_ref().unwrap().status,
        DrainStatus::Complete
    );
}

#[test]
fn new_commands_are_appended_and_survive_an_image() {
    let (store, _) = seeded(true);
    let restored = StateStore::new();
    restored
        .restore_image(&store.snapshot().encode_image().unwrap())
        .unwrap();
    let snap = restored.snapshot();
    assert_eq!(
        snap.deployment_by_id("dep-1").unwrap().task_groups["web"].placed_allocs,
        2
    );
    assert_eq!(snap.deployments_by_job("default", "web").len(), 1);
    assert_eq!(snap.allocs_by_deployment("dep-1").count(), 2);
    let index =
        |c: &Command| bincode::serde::encode_to_vec(c, bincode::config::standard()).unwrap()[0];
    let complete = Command::NodeDrainComplete(NodeDrainComplete {
        node_id: node_id(1),
        updated_at: 0,
    });
    assert_eq!(index(&complete), 23);
}

#[test]
fn purging_the_job_deletes_its_deployments() {
    let (store, job) = seeded(false);
    applied(store.apply(
        4,
        Command::JobDeregister(teamster_storage::fsm::JobDeregister {
            namespace: job.namespace.clone(),
            job_id: job.id.clone(),
            purge: true,
            eval: None,
            submit_time: 0,
            tracked_versions: 0,
        }),
    ));
    let snap = store.snapshot();
    assert!(snap.deployment_by_id("dep-1").is_none());
    assert!(snap.deployments_by_job("default", "web").is_empty());
    assert_eq!(snap.table_index(Table::Deployments), 4);
}

#[test]
fn one_command_moving_many_counts_writes_the_deployment_once() {
    let (store, _job) = seeded(false);
    let mut sub = store.subscribe();
    // Both allocations report healthy in one command.
    let (Command::AllocClientUpdate(mut both), Command::AllocClientUpdate(second)) = (
        health(0, true, T0 + 30 * SEC),
        health(1, true, T0 + 40 * SEC),
    ) else {
        unreachable!()
    };
    both.allocs.extend(second.allocs);
    applied(store.apply(4, Command::AllocClientUpdate(both)));
    let g = group(&store);
    assert_eq!((g.healthy_allocs, g.unhealthy_allocs), (2, 0));
    assert_eq!(
        g.require_progress_by.unix_nanos(),
        Some(T0 + 640 * SEC),
        "the later report pushes the deadline further"
    );
    let d = store.snapshot().deployment_by_id("dep-1").unwrap().clone();
    assert_eq!(d.modify_index, 4);
    let mut upserts = Vec::new();
    while let Ok(Some(event)) = sub.try_recv() {
        if let teamster_storage::state::StateChange::DeploymentUpserted { deployment } =
            event.change
        {
            upserts.push(deployment);
        }
    }
    assert_eq!(upserts.len(), 1, "one write of the deployment per command");
    assert_eq!(upserts[0], d, "the change carries the final counts");
}
