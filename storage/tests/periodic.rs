//! Periodic launches and dispatched children in the state store: the launch record written
//! with the parent and moved with each child in one entry, launches at or before the
//! record refused, forced launches beside it, idempotency tokens, parents that run until
//! stopped, and the launches kept in a state image.

mod common;

use common::*;
use teamster_storage::fsm::{
    ApplyError, Command, CommandResponse, JobDeregister, JobRegister, PeriodicLaunchCommand,
};
use teamster_storage::model::{
    DispatchPayload, Job, JobId, JobStatus, JobType, ParameterizedJobConfig, PeriodicConfig,
};
use teamster_storage::state::{StateStore, Table};

const SEC: i64 = 1_000_000_000;
const T0: i64 = 1_780_000_000 * SEC;

fn periodic_parent(id: &str) -> Job {
    let mut job = job(id, 1);
    job.retype(JobType::Batch);
    job.periodic = Some(PeriodicConfig {
        spec: "*/5 * * * *".into(),
        ..PeriodicConfig::default()
    });
    job.submit_time = T0;
    job.canonicalize();
    job.validate().unwrap();
    job
}

fn child_of(parent: &Job, launch_secs: i64, n: u64) -> JobRegister {
    let id = format!("{}/periodic-{launch_secs}", parent.id);
    let child = Job {
        id: JobId::new(&id),
        name: id,
        parent_id: parent.id.clone(),
        periodic: None,
        ..parent.clone()
    };
    let eval = eval_for(&child, n);
    JobRegister {
        job: child,
        eval: Some(eval),
        enforce_index: None,
        tracked_versions: 0,
    }
}

fn launch(parent: &Job, launch_secs: i64, n: u64, forced: bool) -> Command {
    Command::PeriodicLaunch(PeriodicLaunchCommand {
        namespace: parent.namespace.clone(),
        job_id: parent.id.clone(),
        launch: launch_secs * SEC,
        forced,
        child: Some(child_of(parent, launch_secs, n)),
    })
}

fn children(store: &StateStore, parent: &str) -> Vec<String> {
    store
        .snapshot()
        .job_children("default", parent)
        .map(|j| j.id.to_string())
        .collect()
}

#[test]
fn a_periodic_parent_records_its_first_launch_and_runs_without_an_evaluation() {
    let store = StateStore::new();
    let parent = periodic_parent("cron");
    assert!(store
        .apply(1, register(&parent, None))
        .rejection()
        .is_none());
    let snap = store.snapshot();
    let record = snap.periodic_launch("default", "cron").unwrap();
    assert_eq!((record.launch, record.create_index), (T0, 1));
    assert_eq!(snap.table_index(Table::PeriodicLaunches), 1);
    let stored = snap.job_by_id("default", "cron").unwrap();
    assert_eq!(
        stored.status,
        JobStatus::Running,
        "a parent runs until stopped"
    );
    // Re-registering a changed parent keeps the record.
    let mut changed = parent.clone();
    changed.submit_time = T0 + 99 * SEC;
    changed.priority = 70;
    assert!(store
        .apply(2, register(&changed, None))
        .rejection()
        .is_none());
    assert_eq!(
        store
            .snapshot()
            .periodic_launch("default", "cron")
            .unwrap()
            .launch,
        T0
    );
    // A new schedule counts from its registration: nothing is made up for before it.
    let launch_of = |store: &StateStore| {
        store
            .snapshot()
            .periodic_launch("default", "cron")
            .map(|l| l.launch)
    };
    let mut rescheduled = changed.clone();
    rescheduled.submit_time = T0 + 600 * SEC;
    rescheduled.periodic.as_mut().unwrap().spec = "* * * * *".into();
    assert!(store
        .apply(3, register(&rescheduled, None))
        .rejection()
        .is_none());
    assert_eq!(launch_of(&store), Some(T0 + 600 * SEC));
    // Stopped, then registered again: from the new registration too.
    let stopping = Command::JobDeregister(JobDeregister {
        namespace: "default".into(),
        job_id: "cron".into(),
        purge: false,
        eval: None,
        submit_time: 0,
        tracked_versions: 0,
    });
    assert!(store.apply(4, stopping).rejection().is_none());
    let mut again = rescheduled.clone();
    again.submit_time = T0 + 900 * SEC;
    assert!(store.apply(5, register(&again, None)).rejection().is_none());
    assert_eq!(launch_of(&store), Some(T0 + 900 * SEC));
    // Stopped, it is dead; purged, its record goes with it.
    let stop = |purge| {
        Command::JobDeregister(JobDeregister {
            namespace: "default".into(),
            job_id: "cron".into(),
            purge,
            eval: None,
            submit_time: 0,
            tracked_versions: 0,
        })
    };
    assert!(store.apply(6, stop(false)).rejection().is_none());
    assert_eq!(
        store
            .snapshot()
            .job_by_id("default", "cron")
            .unwrap()
            .status,
        JobStatus::Dead
    );
    assert!(store.apply(7, stop(true)).rejection().is_none());
    assert!(store
        .snapshot()
        .periodic_launch("default", "cron")
        .is_none());
    assert_eq!(store.snapshot().table_index(Table::PeriodicLaunches), 7);
}

#[test]
fn a_launch_registers_the_child_and_moves_the_record_once() {
    let store = StateStore::new();
    let parent = periodic_parent("cron");
    store.apply(1, register(&parent, None));
    let t1 = T0 / SEC + 300;
    let resp = store.apply(2, launch(&parent, t1, 1, false));
    assert!(
        matches!(resp, CommandResponse::JobRegistered { version: 0, .. }),
        "{resp:?}"
    );
    let snap = store.snapshot();
    assert_eq!(
        snap.periodic_launch("default", "cron").unwrap().launch,
        t1 * SEC
    );
    assert_eq!(children(&store, "cron"), [format!("cron/periodic-{t1}")]);
    let child = snap
        .job_by_id("default", &format!("cron/periodic-{t1}"))
        .unwrap();
    assert_eq!(child.status, JobStatus::Pending);
    assert_eq!(snap.evals_by_job("default", child.id.as_str()).count(), 1);

    // The same launch again (a second leader, a retried write): refused, nothing written.
    let before = store.snapshot().encode_image().unwrap();
    let resp = store.apply(3, launch(&parent, t1, 2, false));
    assert_eq!(
        resp.rejection(),
        Some(&ApplyError::PeriodicLaunchRecorded {
            job_id: "cron".into(),
            launch: t1 * SEC,
            recorded: t1 * SEC,
        })
    );
    // An earlier one too.
    assert!(store
        .apply(4, launch(&parent, t1 - 300, 3, false))
        .rejection()
        .is_some());
    let mut after = store.snapshot();
    assert_eq!(after.table_index(Table::Jobs), 2);
    assert_eq!(children(&store, "cron").len(), 1);
    // Only the applied index moved.
    let reference = StateStore::new();
    reference.restore_image(&before).unwrap();
    reference.advance_index(4);
    after = store.snapshot();
    assert_eq!(
        after.encode_image().unwrap(),
        reference.snapshot().encode_image().unwrap()
    );

    // A launch skipped under prohibit_overlap moves the record without a child.
    let t2 = t1 + 300;
    let skip = Command::PeriodicLaunch(PeriodicLaunchCommand {
        namespace: parent.namespace.clone(),
        job_id: parent.id.clone(),
        launch: t2 * SEC,
        forced: false,
        child: None,
    });
    assert_eq!(store.apply(5, skip), CommandResponse::Applied);
    assert_eq!(
        store
            .snapshot()
            .periodic_launch("default", "cron")
            .unwrap()
            .launch,
        t2 * SEC
    );
    assert_eq!(children(&store, "cron").len(), 1);
}

#[test]
fn a_forced_launch_leaves_the_record_and_never_overwrites_a_child() {
    let store = StateStore::new();
    let parent = periodic_parent("cron");
    store.apply(1, register(&parent, None));
    let now = T0 / SEC + 42;
    assert!(store
        .apply(2, launch(&parent, now, 1, true))
        .rejection()
        .is_none());
    assert_eq!(
        store
            .snapshot()
            .periodic_launch("default", "cron")
            .unwrap()
            .launch,
        T0,
        "a forced launch does not move the record"
    );
    // A second force in the same second would replace the child: refused.
    let resp = store.apply(3, launch(&parent, now, 2, true));
    assert!(
        matches!(resp.rejection(), Some(ApplyError::InvalidCommand { reason }) if reason.contains("already exists")),
        "{resp:?}"
    );
    // A job that is not periodic cannot be launched.
    let plain = job("plain", 1);
    store.apply(4, register(&plain, None));
    let resp = store.apply(5, launch(&plain, now, 3, true));
    assert!(resp.rejection().is_some());
    assert_eq!(children(&store, "cron").len(), 1);
}

#[test]
fn an_idempotency_token_names_one_child_per_parent() {
    let store = StateStore::new();
    let mut parent = job("thumbs", 1);
    parent.retype(JobType::Batch);
    parent.parameterized_job = Some(ParameterizedJobConfig::default());
    parent.canonicalize();
    parent.validate().unwrap();
    store.apply(1, register(&parent, None));
    assert_eq!(
        store
            .snapshot()
            .job_by_id("default", "thumbs")
            .unwrap()
            .status,
        JobStatus::Running
    );
    let dispatched = |n: u32| {
        let id = format!("thumbs/dispatch-1780000000-{n:08x}");
        Job {
            id: JobId::new(&id),
            name: id,
            parent_id: parent.id.clone(),
            parameterized_job: None,
            dispatched: true,
            dispatch_idempotency_token: "tok".into(),
            payload: DispatchPayload::compress(b"hello").unwrap(),
            ..parent.clone()
        }
    };
    let first = dispatched(1);
    assert!(store
        .apply(2, register(&first, Some(eval_for(&first, 1))))
        .rejection()
        .is_none());
    let second = dispatched(2);
    let resp = store.apply(3, register(&second, Some(eval_for(&second, 2))));
    assert_eq!(
        resp.rejection(),
        Some(&ApplyError::IdempotencyTokenUsed {
            existing: first.id.to_string()
        })
    );
    assert_eq!(children(&store, "thumbs"), [first.id.to_string()]);
    let stored = store.snapshot();
    let stored = stored.job_by_id("default", first.id.as_str()).unwrap();
    assert_eq!(stored.payload.decompress().unwrap(), b"hello");
    // Re-registering the child itself is not a conflict.
    assert!(store.apply(4, register(&first, None)).rejection().is_none());
    // The token index is rebuilt from a state image.
    let restored = StateStore::new();
    restored
        .restore_image(&store.snapshot().encode_image().unwrap())
        .unwrap();
    let resp = restored.apply(5, register(&second, Some(eval_for(&second, 2))));
    assert!(resp.rejection().is_some(), "{resp:?}");
    assert_eq!(
        restored
            .snapshot()
            .dispatched_child_by_token("default", "thumbs", "tok")
            .map(|j| j.id.to_string()),
        Some(first.id.to_string())
    );
    // Once the child is purged (garbage-collected), the token is free again.
    let purge = Command::JobDeregister(JobDeregister {
        namespace: "default".into(),
        job_id: first.id.clone(),
        purge: true,
        eval: None,
        submit_time: 0,
        tracked_versions: 0,
    });
    assert!(store.apply(5, purge).rejection().is_none());
    assert!(store
        .apply(6, register(&second, Some(eval_for(&second, 2))))
        .rejection()
        .is_none());
}

#[test]
fn launches_and_children_survive_a_state_image() {
    let store = StateStore::new();
    let parent = periodic_parent("cron");
    store.apply(1, register(&parent, None));
    store.apply(2, launch(&parent, T0 / SEC + 300, 1, false));
    let image = store.snapshot().encode_image().unwrap();
    let restored = StateStore::new();
    restored.restore_image(&image).unwrap();
    let snap = restored.snapshot();
    assert_eq!(
        snap.periodic_launch("default", "cron").unwrap().launch,
        (T0 / SEC + 300) * SEC
    );
    assert_eq!(children(&restored, "cron").len(), 1);
    assert_eq!(snap.encode_image().unwrap(), image);
}

#[test]
fn the_periodic_launch_command_keeps_its_variant_index() {
    let parent = periodic_parent("cron");
    let cfg = bincode::config::standard();
    let bytes = bincode::serde::encode_to_vec(launch(&parent, 1, 1, false), cfg).unwrap();
    assert_eq!(bytes[0], 17);
    let (back, _): (Command, usize) = bincode::serde::decode_from_slice(&bytes, cfg).unwrap();
    assert_eq!(back, launch(&parent, 1, 1, false));
}
