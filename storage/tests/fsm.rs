//! Applying commands: Nomad's index rules, job versions, summaries, statuses, typed
//! rejections that change nothing, and the change stream.

mod common;

use common::*;
use teamster_storage::fsm::{
    ApplyError, ApplyPlanResults, Command, CommandResponse, EvalDelete, EvalUpsert, JobDeregister,
    JobRegister, NodeDeregister, NodeUpdateEligibility, NodeUpdateStatus, SchedulerConfigUpdate,
};
use teamster_storage::model::{
    AllocStop, ClientStatus, ClusterMeta, DesiredStatus, DrainStrategy, EvalStatus, JobStatus,
    NodeStatus, SchedulerAlgorithm, SchedulerConfiguration, SchedulingEligibility,
};
use teamster_storage::state::{StateChange, StateStore, SubscriptionError, Table};

/// The whole state as bytes: equal images mean equal states.
fn image(store: &StateStore) -> Vec<u8> {
    store.snapshot().encode_image().unwrap()
}

fn applied(resp: CommandResponse) -> CommandResponse {
    assert!(resp.rejection().is_none(), "unexpected rejection: {resp:?}");
    resp
}

/// A store with one job (`web`, 3 allocations wanted), its eval, and two ready nodes.
fn seeded() -> (StateStore, teamster_storage::model::Job) {
    let store = StateStore::new();
    applied(store.apply(1, register_node(&node(1))));
    applied(store.apply(2, register_node(&node(2))));
    let job = job("web", 3);
    applied(store.apply(3, register(&job, Some(eval_for(&job, 1)))));
    let job = (**store.snapshot().job_by_id("default", "web").unwrap()).clone();
    (store, job)
}

/// [`seeded`] with allocation 0 of `web` placed on node 1 at index 4.
fn seeded_with_one_placed() -> (StateStore, teamster_storage::model::Job) {
    let (store, job) = seeded();
    applied(store.apply(
        4,
        place(
            &eval_id(1),
            vec![alloc(0, &job, &node_id(1), &eval_id(1), 0)],
        ),
    ));
    (store, job)
}

#[test]
fn job_register_sets_indexes_version_summary_and_eval_atomically() {
    let (store, job) = seeded();
    let snap = store.snapshot();
    assert_eq!(snap.latest_index(), 3);
    assert_eq!(
        (job.create_index, job.modify_index, job.job_modify_index),
        (3, 3, 3)
    );
    assert_eq!(job.version, 0);
    assert_eq!(
        job.status,
        JobStatus::Pending,
        "a pending eval keeps the job pending"
    );
    let eval = snap.eval_by_id(&eval_id(1)).unwrap();
    assert_eq!(
        (eval.create_index, eval.modify_index, eval.job_modify_index),
        (3, 3, 3)
    );
    assert_eq!(snap.evals_by_job("default", "web").count(), 1);
    let summary = snap.job_summary("default", "web").unwrap();
    assert_eq!(summary.create_index, 3);
    assert!(summary.summary.contains_key("web"));
    assert_eq!(snap.job_versions("default", "web").len(), 1);
    for table in [
        Table::Jobs,
        Table::JobVersions,
        Table::JobSummaries,
        Table::Evals,
    ] {
        assert_eq!(snap.table_index(table), 3, "{table:?}");
    }
    assert_eq!(snap.table_index(Table::Nodes), 2);
    assert_eq!(snap.table_index(Table::Allocs), 0);
}

#[test]
fn unchanged_spec_keeps_the_version_and_a_changed_one_bumps_it() {
    let (store, job) = seeded();
    let before = store.snapshot();
    let resp = store.apply(4, register(&job, None));
    assert_eq!(
        resp,
        CommandResponse::JobRegistered {
            version: 0,
            job_modify_index: 3,
            spec_changed: false
        }
    );
    // Nothing was written: only the applied index moved.
    let after = store.snapshot();
    assert_eq!(after.latest_index(), 4);
    assert_eq!(after.max_index(&Table::ALL), 3);
    assert!(std::sync::Arc::ptr_eq(
        before.job_by_id("default", "web").unwrap(),
        after.job_by_id("default", "web").unwrap()
    ));

    let mut changed = job.clone();
    changed.task_groups_mut()[0].count = 5;
    let resp = store.apply(5, register(&changed, None));
    assert_eq!(
        resp,
        CommandResponse::JobRegistered {
            version: 1,
            job_modify_index: 5,
            spec_changed: true
        }
    );
    let snap = store.snapshot();
    let current = snap.job_by_id("default", "web").unwrap();
    assert_eq!(
        (current.create_index, current.modify_index, current.version),
        (3, 5, 1)
    );
    let versions = snap.job_versions("default", "web");
    assert_eq!(
        versions.iter().map(|j| j.version).collect::<Vec<_>>(),
        vec![1, 0]
    );
    assert_eq!(
        versions[1].task_groups[0].count, 3,
        "old versions are kept as they were"
    );
}

#[test]
fn enforce_index_mismatch_is_rejected_and_changes_nothing() {
    let (store, job) = seeded();
    let cmd = Command::JobRegister(JobRegister {
        job: job.clone(),
        eval: None,
        enforce_index: Some(0),
        tracked_versions: 0,
    });
    let resp = store.apply(4, cmd);
    assert!(matches!(
        resp.rejection(),
        Some(ApplyError::JobModifyIndexMismatch {
            expected: 0,
            actual: 3,
            ..
        })
    ));
    let snap = store.snapshot();
    assert_eq!(snap.latest_index(), 4);
    assert_eq!(snap.max_index(&Table::ALL), 3);
    // With the right index the same command goes through.
    let cmd = Command::JobRegister(JobRegister {
        job: {
            let mut j = job.clone();
            j.priority = 70;
            j
        },
        eval: None,
        enforce_index: Some(3),
        tracked_versions: 0,
    });
    assert!(matches!(
        store.apply(5, cmd),
        CommandResponse::JobRegistered { version: 1, .. }
    ));
}

#[test]
fn bad_commands_are_rejected_with_typed_errors_and_change_nothing() {
    let (store, job) = seeded();
    let reference = StateStore::new();
    for (i, cmd) in [
        register_node(&node(1)),
        register_node(&node(2)),
        register(&job, Some(eval_for(&job, 1))),
    ]
    .into_iter()
    .enumerate()
    {
        reference.apply(i as u64 + 1, cmd);
    }
    type Expect = fn(&ApplyError) -> bool;
    let bad: Vec<(Command, Expect)> = vec![
        (
            Command::JobDeregister(JobDeregister {
                namespace: "default".into(),
                job_id: "nope".into(),
                purge: false,
                eval: None,
                submit_time: 0,
                tracked_versions: 0,
            }),
            |e| matches!(e, ApplyError::JobNotFound { .. }),
        ),
        (
            place(
                &eval_id(1),
                vec![alloc(1, &job, &node_id(99), &eval_id(1), 0)],
            ),
            |e| matches!(e, ApplyError::NodeNotFound { .. }),
        ),
        (
            place(
                &eval_id(77),
                vec![alloc(1, &job, &node_id(1), &eval_id(1), 0)],
            ),
            |e| matches!(e, ApplyError::EvalNotFound { .. }),
        ),
        (
            Command::ApplyPlanResults(ApplyPlanResults {
                eval_id: eval_id(1),
                allocs_updated: vec![alloc(1, &job, &node_id(1), &eval_id(1), 0)],
                allocs_stopped: vec![AllocStop {
                    id: alloc_id(12345),
                    ..AllocStop::default()
                }],
                allocs_preempted: vec![],
                evals: vec![],
                ineligible_nodes: vec![],
                updated_at: 0,
                deployment: None,
                deployment_updates: Vec::new(),
            }),
            |e| matches!(e, ApplyError::AllocNotFound { .. }),
        ),
        (
            Command::NodeUpdateStatus(NodeUpdateStatus {
                node_id: node_id(42),
                status: NodeStatus::Down,
                updated_at: 1,
                evals: vec![],
            }),
            |e| matches!(e, ApplyError::NodeNotFound { .. }),
        ),
        (
            Command::NodeDeregister(NodeDeregister {
                node_ids: vec![node_id(1), node_id(42)],
            }),
            |e| matches!(e, ApplyError::NodeNotFound { .. }),
        ),
        (
            Command::EvalUpsert(EvalUpsert {
                evals: vec![eval_for(&job, 5), {
                    let mut e = eval_for(&job, 6);
                    e.id = Default::default();
                    e
                }],
            }),
            |e| matches!(e, ApplyError::InvalidCommand { .. }),
        ),
        (
            Command::JobRegister(JobRegister {
                job: job.clone(),
                eval: Some({
                    let mut e = eval_for(&job, 9);
                    e.job_id = "other".into();
                    e
                }),
                enforce_index: None,
                tracked_versions: 0,
            }),
            |e| matches!(e, ApplyError::InvalidCommand { .. }),
        ),
        (
            Command::SchedulerConfig(SchedulerConfigUpdate {
                config: SchedulerConfiguration::default(),
                cas_index: Some(7),
            }),
            |e| matches!(e, ApplyError::CasMismatch { .. }),
        ),
    ];
    for (index, (cmd, expected)) in (4..).zip(bad) {
        let resp = store.apply(index, cmd.clone());
        let err = resp
            .rejection()
            .unwrap_or_else(|| panic!("{cmd:?} was applied"));
        assert!(expected(err), "unexpected error {err:?} for {cmd:?}");
        reference.advance_index(index);
        assert_eq!(
            image(&store),
            image(&reference),
            "{cmd:?} changed the state"
        );
    }
}

#[test]
fn plan_results_place_allocations_and_keep_indexes_and_summaries() {
    let (store, job) = seeded();
    let allocs: Vec<_> = (0..3)
        .map(|i| alloc(i, &job, &node_id(1 + i % 2), &eval_id(1), i as u32))
        .collect();
    let resp = store.apply(4, place(&eval_id(1), allocs));
    assert_eq!(resp, CommandResponse::PlanApplied { skipped: vec![] });
    let snap = store.snapshot();
    assert_eq!(snap.alloc_count(), 3);
    assert_eq!(snap.allocs_by_node(&node_id(1)).count(), 2);
    assert_eq!(snap.allocs_by_node(&node_id(2)).count(), 1);
    assert_eq!(snap.allocs_by_job("default", "web").count(), 3);
    assert_eq!(snap.allocs_by_eval(&eval_id(1)).count(), 3);
    let a = snap.alloc_by_id(&alloc_id(0)).unwrap();
    assert_eq!(
        (a.create_index, a.modify_index, a.alloc_modify_index),
        (4, 4, 4)
    );
    assert_eq!(snap.alloc_job(a).unwrap().version, 0);
    // Ids are interned: the allocation shares the job's and node's id allocations.
    let stored_job = snap.job_by_id("default", "web").unwrap();
    assert!(a.job_id.ptr_eq(&stored_job.id));
    assert!(a.node_id.ptr_eq(&snap.node_by_id(&node_id(1)).unwrap().id));
    assert!(a.eval_id.ptr_eq(&snap.eval_by_id(&eval_id(1)).unwrap().id));
    assert_eq!(snap.eval_by_id(&eval_id(1)).unwrap().modify_index, 4);
    assert_eq!(stored_job.status, JobStatus::Running);
    let tg = snap.job_summary("default", "web").unwrap().summary["web"];
    assert_eq!((tg.starting, tg.running), (3, 0));
    assert_eq!(snap.table_index(Table::Allocs), 4);
    assert_eq!(snap.table_index(Table::JobSummaries), 4);

    // The group name is stored once: shared within a plan, with a later plan's
    // allocations of the job, and again after a restore.
    let names = |snap: &teamster_storage::state::Snapshot| {
        snap.allocs_by_job("default", "web")
            .map(|a| a.task_group.clone())
            .collect::<Vec<_>>()
    };
    let first = &names(&snap)[0];
    assert!(names(&snap).iter().all(|g| g.ptr_eq(first)));
    applied(store.apply(
        5,
        place(
            &eval_id(1),
            vec![alloc(3, &job, &node_id(1), &eval_id(1), 3)],
        ),
    ));
    let snap = store.snapshot();
    assert_eq!(names(&snap).len(), 4);
    let first = &names(&snap)[0];
    assert!(names(&snap).iter().all(|g| g.ptr_eq(first)));
    let other = StateStore::new();
    other.restore_image(&snap.encode_image().unwrap()).unwrap();
    let restored = other.snapshot();
    let first = &names(&restored)[0];
    assert_eq!(first.as_str(), "web");
    assert!(names(&restored).iter().all(|g| g.ptr_eq(first)));
}

#[test]
fn client_updates_move_summary_bins_and_finish_the_job() {
    let (store, _) = seeded_with_one_placed();
    let mut sub = store.subscribe();
    applied(store.apply(5, client_update(&alloc_id(0), ClientStatus::Running)));
    let tg = store
        .snapshot()
        .job_summary("default", "web")
        .unwrap()
        .summary["web"];
    assert_eq!((tg.starting, tg.running), (0, 1));
    // Completing the eval and the allocation makes the job dead.
    let mut done = (**store.snapshot().eval_by_id(&eval_id(1)).unwrap()).clone();
    done.status = EvalStatus::Complete;
    applied(store.apply(6, Command::EvalUpsert(EvalUpsert { evals: vec![done] })));
    assert_eq!(
        store.snapshot().job_by_id("default", "web").unwrap().status,
        JobStatus::Running
    );
    applied(store.apply(7, client_update(&alloc_id(0), ClientStatus::Complete)));
    let snap = store.snapshot();
    let tg = snap.job_summary("default", "web").unwrap().summary["web"];
    assert_eq!((tg.running, tg.complete), (0, 1));
    let stored_job = snap.job_by_id("default", "web").unwrap();
    assert_eq!(stored_job.status, JobStatus::Dead);
    assert_eq!(stored_job.modify_index, 7);
    // The version entry carries the status too.
    assert_eq!(
        snap.job_by_version("default", "web", 0).unwrap().status,
        JobStatus::Dead
    );

    let mut terminal = None;
    while let Ok(Some(event)) = sub.try_recv() {
        if let StateChange::AllocTerminal {
            client_status,
            node_class,
            ..
        } = &event.change
        {
            terminal = Some((event.index, *client_status, node_class.clone()));
        }
    }
    assert_eq!(
        terminal,
        Some((7, ClientStatus::Complete, Some(node(1).computed_class)))
    );
    // Reports about allocations that no longer exist are skipped, not errors.
    assert_eq!(
        store.apply(8, client_update(&alloc_id(999), ClientStatus::Failed)),
        CommandResponse::AllocsUpdated {
            unknown: vec![alloc_id(999)]
        }
    );
}

#[test]
fn a_lost_allocation_is_not_brought_back_by_a_late_running_report() {
    let (store, _) = seeded_with_one_placed();
    applied(store.apply(5, client_update(&alloc_id(0), ClientStatus::Running)));
    applied(store.apply(6, client_update(&alloc_id(0), ClientStatus::Lost)));
    // A report the client sent before it heard the verdict arrives afterwards.
    for (index, late) in [(7, ClientStatus::Running), (8, ClientStatus::Pending)] {
        assert_eq!(
            applied(store.apply(index, client_update(&alloc_id(0), late))),
            CommandResponse::AllocsUpdated { unknown: vec![] }
        );
        let snap = store.snapshot();
        let a = snap.alloc_by_id(&alloc_id(0)).unwrap();
        assert_eq!(a.client_status, ClientStatus::Lost, "after {late:?}");
        assert_eq!(a.modify_index, 6);
        let tg = snap.job_summary("default", "web").unwrap().summary["web"];
        assert_eq!((tg.running, tg.lost), (0, 1));
    }
    // The client's final word is taken.
    applied(store.apply(9, client_update(&alloc_id(0), ClientStatus::Complete)));
    let snap = store.snapshot();
    assert_eq!(
        snap.alloc_by_id(&alloc_id(0)).unwrap().client_status,
        ClientStatus::Complete
    );
}

#[test]
fn a_finished_allocation_is_not_brought_back_by_an_older_report_arriving_last() {
    let (store, _) = seeded_with_one_placed();
    applied(store.apply(5, client_update(&alloc_id(0), ClientStatus::Running)));
    for (index, finished) in [(6, ClientStatus::Complete), (9, ClientStatus::Failed)] {
        applied(store.apply(index, client_update(&alloc_id(0), finished)));
        // Sent earlier to a server that stalled, carried out after the final report.
        for (late_index, late) in [
            (index + 1, ClientStatus::Running),
            (index + 2, ClientStatus::Pending),
        ] {
            assert_eq!(
                applied(store.apply(late_index, client_update(&alloc_id(0), late))),
                CommandResponse::AllocsUpdated { unknown: vec![] }
            );
            let snap = store.snapshot();
            let a = snap.alloc_by_id(&alloc_id(0)).unwrap();
            assert_eq!(a.client_status, finished, "{late:?} after {finished:?}");
            assert_eq!(a.modify_index, index, "{late:?} after {finished:?}");
            let tg = snap.job_summary("default", "web").unwrap().summary["web"];
            assert_eq!(tg.running, 0, "{late:?} after {finished:?}");
        }
    }
}

#[test]
fn an_older_client_report_arriving_after_a_newer_one_is_ignored() {
    let (store, _) = seeded_with_one_placed();
    let status = |store: &StateStore| {
        let snap = store.snapshot();
        let a = snap.alloc_by_id(&alloc_id(0)).unwrap();
        (a.client_status, a.modify_index, a.client_report_seq)
    };
    applied(store.apply(5, client_update_seq(&alloc_id(0), ClientStatus::Running, 3)));
    assert_eq!(status(&store), (ClientStatus::Running, 5, 3));
    // "pending" at 2, sent to a server that stalled and carried out after "running" at 3.
    assert_eq!(
        applied(store.apply(6, client_update_seq(&alloc_id(0), ClientStatus::Pending, 2))),
        CommandResponse::AllocsUpdated { unknown: vec![] }
    );
    assert_eq!(status(&store), (ClientStatus::Running, 5, 3));
    let summary = |store: &StateStore| {
        let tg = store
            .snapshot()
            .job_summary("default", "web")
            .unwrap()
            .summary["web"];
        (tg.starting, tg.running)
    };
    assert_eq!(summary(&store), (0, 1));
    // The same report again (a resend at the same sequence number) is applied.
    applied(store.apply(7, client_update_seq(&alloc_id(0), ClientStatus::Running, 3)));
    assert_eq!(status(&store), (ClientStatus::Running, 7, 3));
    // A newer report is, and a report that is not a client's (0) always is.
    applied(store.apply(8, client_update_seq(&alloc_id(0), ClientStatus::Pending, 4)));
    assert_eq!(status(&store), (ClientStatus::Pending, 8, 4));
    assert_eq!(summary(&store), (1, 0));
    applied(store.apply(9, client_update_seq(&alloc_id(0), ClientStatus::Running, 0)));
    assert_eq!(status(&store), (ClientStatus::Running, 9, 4));
    // An in-place update from a scheduler's older copy (sequence number 3) keeps the 4.
    let snap = store.snapshot();
    let mut copy = (**snap.alloc_by_id(&alloc_id(0)).unwrap()).clone();
    copy.client_report_seq = 3;
    copy.desired_description = "updated in place".into();
    applied(store.apply(10, place(&eval_id(1), vec![copy])));
    assert_eq!(
        store
            .snapshot()
            .alloc_by_id(&alloc_id(0))
            .unwrap()
            .desired_description
            .as_str(),
        "updated in place"
    );
    assert_eq!(status(&store), (ClientStatus::Running, 10, 4));
    applied(store.apply(
        11,
        client_update_seq(&alloc_id(0), ClientStatus::Pending, 3),
    ));
    assert_eq!(status(&store), (ClientStatus::Running, 10, 4));
    // The sequence number survives a snapshot image.
    let image = store.snapshot().encode_image().unwrap();
    let restored = StateStore::new();
    assert_eq!(restored.restore_image(&image).unwrap(), 11);
    assert_eq!(status(&restored), (ClientStatus::Running, 10, 4));
}

#[test]
fn stopping_allocations_and_links_between_them() {
    let (store, job) = seeded_with_one_placed();
    let node_index = |store: &StateStore| {
        let snap = store.snapshot();
        [1, 2].map(|n| snap.node_alloc_index(node_id(n).as_str()))
    };
    assert_eq!(node_index(&store), [4, 0]);
    // A client's report moves no allocation index, so no node's.
    applied(store.apply(5, client_update(&alloc_id(0), ClientStatus::Running)));
    assert_eq!(node_index(&store), [4, 0]);
    let mut replacement = alloc(1, &job, &node_id(2), &eval_id(1), 0);
    replacement.previous_allocation = alloc_id(0);
    let cmd = Command::ApplyPlanResults(ApplyPlanResults {
        eval_id: eval_id(1),
        allocs_updated: vec![replacement],
        allocs_stopped: vec![AllocStop {
            id: alloc_id(0),
            desired_status: DesiredStatus::Stop,
            desired_description: "alloc is lost since its node is down".into(),
            client_status: Some(ClientStatus::Lost),
            ..AllocStop::default()
        }],
        allocs_preempted: vec![],
        evals: vec![],
        ineligible_nodes: vec![],
        updated_at: 1,
        deployment: None,
        deployment_updates: Vec::new(),
    });
    applied(store.apply(6, cmd));
    let snap = store.snapshot();
    let old = snap.alloc_by_id(&alloc_id(0)).unwrap();
    assert_eq!(old.desired_status, DesiredStatus::Stop);
    assert_eq!(old.client_status, ClientStatus::Lost);
    assert_eq!(old.next_allocation, alloc_id(1));
    assert_eq!((old.create_index, old.modify_index), (4, 6));
    let tg = snap.job_summary("default", "web").unwrap().summary["web"];
    assert_eq!((tg.starting, tg.lost), (1, 1));
    // The stop and the placement move both nodes' allocation index, which a restored
    // image rebuilds.
    assert_eq!(node_index(&store), [6, 6]);
    let restored = StateStore::new();
    restored
        .restore_image(&store.snapshot().encode_image().unwrap())
        .unwrap();
    assert_eq!(node_index(&restored), [6, 6]);
}

#[test]
fn allocations_of_a_stopped_job_are_skipped_not_placed() {
    let (store, job) = seeded();
    let stop = Command::JobDeregister(JobDeregister {
        namespace: "default".into(),
        job_id: "web".into(),
        purge: false,
        eval: Some(eval_for(&job, 2)),
        submit_time: 1_700_000_100_000_000_000,
        tracked_versions: 0,
    });
    let resp = store.apply(4, stop);
    assert_eq!(
        resp,
        CommandResponse::JobRegistered {
            version: 1,
            job_modify_index: 4,
            spec_changed: true
        }
    );
    let snap = store.snapshot();
    let stopped = snap.job_by_id("default", "web").unwrap();
    assert!(stopped.stop);
    assert_eq!(stopped.submit_time, 1_700_000_100_000_000_000);
    assert_eq!(snap.eval_by_id(&eval_id(2)).unwrap().job_modify_index, 4);
    let resp = store.apply(
        5,
        place(
            &eval_id(2),
            vec![alloc(0, &job, &node_id(1), &eval_id(2), 0)],
        ),
    );
    assert_eq!(
        resp,
        CommandResponse::PlanApplied {
            skipped: vec![alloc_id(0)]
        }
    );
    assert_eq!(store.snapshot().alloc_count(), 0);
}

#[test]
fn purge_removes_the_job_its_versions_summary_and_allocations() {
    let (store, _) = seeded_with_one_placed();
    let purge = Command::JobDeregister(JobDeregister {
        namespace: "default".into(),
        job_id: "web".into(),
        purge: true,
        eval: None,
        submit_time: 0,
        tracked_versions: 0,
    });
    applied(store.apply(5, purge));
    let snap = store.snapshot();
    assert!(snap.job_by_id("default", "web").is_none());
    assert!(snap.job_versions("default", "web").is_empty());
    assert!(snap.job_summary("default", "web").is_none());
    assert_eq!(snap.alloc_count(), 0);
    assert_eq!(snap.allocs_by_node(&node_id(1)).count(), 0);
    let eval = snap.eval_by_id(&eval_id(1)).unwrap();
    assert_eq!(eval.status, EvalStatus::Complete);
    assert_eq!(eval.status_description, "job web deleted");
}

#[test]
fn a_complete_evaluation_cancels_the_jobs_blocked_ones() {
    let (store, job) = seeded();
    let mut blocked = eval_for(&job, 2);
    blocked.status = EvalStatus::Blocked;
    applied(store.apply(
        4,
        Command::EvalUpsert(EvalUpsert {
            evals: vec![blocked],
        }),
    ));
    let mut done = eval_for(&job, 1);
    done.status = EvalStatus::Complete;
    done.modify_time = 42;
    applied(store.apply(5, Command::EvalUpsert(EvalUpsert { evals: vec![done] })));
    let snap = store.snapshot();
    let canceled = snap.eval_by_id(&eval_id(2)).unwrap();
    assert_eq!(canceled.status, EvalStatus::Canceled);
    assert_eq!(
        (
            canceled.create_index,
            canceled.modify_index,
            canceled.modify_time
        ),
        (4, 5, 42)
    );
    assert_eq!(
        snap.job_by_id("default", "web").unwrap().status,
        JobStatus::Dead
    );
}

#[test]
fn queued_allocations_of_an_eval_update_the_summary() {
    let (store, job) = seeded();
    let mut eval = eval_for(&job, 1);
    eval.queued_allocations.insert("web".into(), 2);
    eval.queued_allocations.insert("no-such-group".into(), 9);
    applied(store.apply(4, Command::EvalUpsert(EvalUpsert { evals: vec![eval] })));
    let snap = store.snapshot();
    let summary = snap.job_summary("default", "web").unwrap();
    assert_eq!(summary.summary["web"].queued, 2);
    assert_eq!(summary.modify_index, 4);
    assert!(!summary.summary.contains_key("no-such-group"));
    // A placement takes one from queued.
    store.apply(
        5,
        place(
            &eval_id(1),
            vec![alloc(0, &job, &node_id(1), &eval_id(1), 0)],
        ),
    );
    let tg = store
        .snapshot()
        .job_summary("default", "web")
        .unwrap()
        .summary["web"];
    assert_eq!((tg.queued, tg.starting), (1, 1));
}

#[test]
fn nodes_keep_eligibility_on_reregistration_and_refuse_eligible_while_draining() {
    let (store, _) = seeded();
    let cmd = Command::NodeUpdateEligibility(NodeUpdateEligibility {
        node_id: node_id(1),
        eligibility: SchedulingEligibility::Ineligible,
        updated_at: 10,
        evals: vec![],
    });
    applied(store.apply(4, cmd));
    let mut again = node(1);
    again.status = NodeStatus::Initializing;
    applied(store.apply(5, register_node(&again)));
    let snap = store.snapshot();
    let n = snap.node_by_id(&node_id(1)).unwrap();
    assert_eq!(n.scheduling_eligibility, SchedulingEligibility::Ineligible);
    assert_eq!((n.create_index, n.modify_index), (1, 5));
    assert_eq!(n.status, NodeStatus::Initializing);

    // Put a drain on it through a re-registration of a fresh store, then try eligible.
    let drained = StateStore::new();
    let mut d = node(3);
    d.drain_strategy = Some(DrainStrategy::default());
    applied(drained.apply(1, register_node(&d)));
    let resp = drained.apply(
        2,
        Command::NodeUpdateEligibility(NodeUpdateEligibility {
            node_id: node_id(3),
            eligibility: SchedulingEligibility::Eligible,
            updated_at: 1,
            evals: vec![],
        }),
    );
    assert!(matches!(
        resp.rejection(),
        Some(ApplyError::EligibleWhileDraining { .. })
    ));
    applied(store.apply(
        6,
        Command::NodeDeregister(NodeDeregister {
            node_ids: vec![node_id(2)],
        }),
    ));
    assert!(store.snapshot().node_by_id(&node_id(2)).is_none());
}

#[test]
fn six_versions_are_kept_plus_any_a_live_allocation_runs() {
    let (store, mut job) = seeded();
    store.apply(
        4,
        place(
            &eval_id(1),
            vec![alloc(0, &job, &node_id(1), &eval_id(1), 0)],
        ),
    );
    let mut index = 5;
    for count in 10..20 {
        job.task_groups_mut()[0].count = count;
        applied(store.apply(index, register(&job, None)));
        index += 1;
    }
    let snap = store.snapshot();
    let versions: Vec<u64> = snap
        .job_versions("default", "web")
        .iter()
        .map(|j| j.version)
        .collect();
    assert_eq!(
        versions,
        vec![10, 9, 8, 7, 6, 5, 0],
        "v0 stays: a running allocation uses it"
    );
    let a = snap.alloc_by_id(&alloc_id(0)).unwrap();
    assert_eq!(snap.alloc_job(a).unwrap().task_groups[0].count, 3);

    // Once the allocation is terminal, the next registration prunes v0.
    applied(store.apply(index, client_update(&alloc_id(0), ClientStatus::Failed)));
    job.task_groups_mut()[0].count = 99;
    applied(store.apply(index + 1, register(&job, None)));
    let versions: Vec<u64> = store
        .snapshot()
        .job_versions("default", "web")
        .iter()
        .map(|j| j.version)
        .collect();
    assert_eq!(versions, vec![11, 10, 9, 8, 7, 6]);
}

#[test]
fn scheduler_config_and_cluster_meta() {
    let store = StateStore::new();
    let config = SchedulerConfiguration {
        scheduler_algorithm: SchedulerAlgorithm::Spread,
        ..SchedulerConfiguration::default()
    };
    applied(store.apply(
        1,
        Command::SchedulerConfig(SchedulerConfigUpdate {
            config: config.clone(),
            cas_index: Some(0),
        }),
    ));
    let snap = store.snapshot();
    assert_eq!(
        snap.scheduler_config().scheduler_algorithm,
        SchedulerAlgorithm::Spread
    );
    assert_eq!(snap.scheduler_config().modify_index, 1);
    let resp = store.apply(
        2,
        Command::SchedulerConfig(SchedulerConfigUpdate {
            config,
            cas_index: Some(0),
        }),
    );
    assert!(matches!(
        resp.rejection(),
        Some(ApplyError::CasMismatch {
            expected: 0,
            actual: 1
        })
    ));

    let meta = ClusterMeta {
        cluster_id: "c0ffee".into(),
        create_time: 5,
    };
    applied(store.apply(3, Command::ClusterMeta(meta.clone())));
    applied(store.apply(4, Command::ClusterMeta(meta)));
    let resp = store.apply(
        5,
        Command::ClusterMeta(ClusterMeta {
            cluster_id: "other".into(),
            create_time: 6,
        }),
    );
    assert!(matches!(
        resp.rejection(),
        Some(ApplyError::ClusterMetaConflict { .. })
    ));
    assert_eq!(
        store.snapshot().cluster_meta().unwrap().cluster_id,
        "c0ffee"
    );
    assert_eq!(store.snapshot().table_index(Table::ClusterMeta), 3);
}

#[test]
fn a_batch_applies_each_command_on_its_own() {
    let store = StateStore::new();
    let job = job("batchy", 1);
    let resp = store.apply(
        7,
        Command::Batch(vec![
            register_node(&node(1)),
            Command::NodeDeregister(NodeDeregister {
                node_ids: vec![node_id(9)],
            }),
            register(&job, Some(eval_for(&job, 1))),
        ]),
    );
    let CommandResponse::Batch(responses) = resp else {
        panic!("not a batch response: {resp:?}");
    };
    assert_eq!(responses.len(), 3);
    assert_eq!(responses[0], CommandResponse::Applied);
    assert!(matches!(
        responses[1].rejection(),
        Some(ApplyError::NodeNotFound { .. })
    ));
    assert!(matches!(
        responses[2],
        CommandResponse::JobRegistered { version: 0, .. }
    ));
    let snap = store.snapshot();
    assert_eq!(snap.latest_index(), 7);
    assert_eq!(snap.node_count(), 1);
    assert_eq!(snap.job_by_id("default", "batchy").unwrap().create_index, 7);
}

#[test]
fn evals_and_allocs_are_garbage_collected() {
    let (store, _) = seeded_with_one_placed();
    applied(store.apply(5, client_update(&alloc_id(0), ClientStatus::Complete)));
    applied(store.apply(
        6,
        Command::EvalDelete(EvalDelete {
            evals: vec![eval_id(1), eval_id(404)],
            allocs: vec![alloc_id(0)],
        }),
    ));
    let snap = store.snapshot();
    assert_eq!((snap.eval_count(), snap.alloc_count()), (0, 0));
    assert_eq!(snap.allocs_by_eval(&eval_id(1)).count(), 0);
    assert_eq!(
        snap.job_by_id("default", "web").unwrap().status,
        JobStatus::Dead
    );
}

#[test]
fn events_arrive_in_order_with_consecutive_sequence_numbers() {
    let store = StateStore::new();
    let (snap, mut sub) = store.subscribe_with_snapshot();
    assert_eq!(snap.latest_index(), 0);
    store.apply(1, register_node(&node(1)));
    let job = job("evented", 1);
    store.apply(2, register(&job, Some(eval_for(&job, 1))));
    store.apply(
        3,
        Command::NodeUpdateStatus(NodeUpdateStatus {
            node_id: node_id(1),
            status: NodeStatus::Down,
            updated_at: 2,
            evals: vec![],
        }),
    );
    let mut events = Vec::new();
    while let Ok(Some(event)) = sub.try_recv() {
        events.push(event);
    }
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert!(matches!(
        &events[0].change,
        StateChange::NodeUpserted { previous: None, .. }
    ));
    assert!(events[0].change.node_became_schedulable());
    assert!(events
        .iter()
        .any(|e| matches!(&e.change, StateChange::EvalUpserted { eval } if eval.should_enqueue() && e.index == 2)));
    let last = events.last().unwrap();
    assert_eq!(last.index, 3);
    match &last.change {
        StateChange::NodeUpserted { node, previous } => {
            assert_eq!(node.status, NodeStatus::Down);
            assert_eq!(previous.unwrap().status, NodeStatus::Ready);
            assert!(!last.change.node_became_schedulable());
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn a_slow_subscriber_is_told_it_missed_events_and_the_writer_never_waits() {
    let config = teamster_storage::state::StateStoreConfig { event_buffer: 4 };
    let store = StateStore::with_config(&config).unwrap();
    let mut sub = store.subscribe();
    for i in 1..=10 {
        store.apply(i, register_node(&node(i)));
    }
    assert_eq!(
        sub.recv().await,
        Err(SubscriptionError::Lagged { missed: 6 })
    );
    let next = sub.recv().await.unwrap();
    assert_eq!(next.seq, 7, "the gap is visible in the sequence too");
    store.close();
    for _ in 0..3 {
        sub.recv().await.unwrap();
    }
    assert_eq!(sub.recv().await, Err(SubscriptionError::Closed));
}

#[test]
fn a_held_snapshot_never_sees_later_writes() {
    let (store, job) = seeded();
    let held = store.snapshot();
    let held_image = held.encode_image().unwrap();
    store.apply(
        4,
        place(
            &eval_id(1),
            vec![alloc(0, &job, &node_id(1), &eval_id(1), 0)],
        ),
    );
    store.apply(5, register_node(&node(3)));
    assert_eq!(held.alloc_count(), 0);
    assert_eq!(held.node_count(), 2);
    assert_eq!(held.encode_image().unwrap(), held_image);
    assert_eq!(store.snapshot().alloc_count(), 1);
}

#[test]
fn images_restore_every_table_and_indexes() {
    let (store, _) = seeded_with_one_placed();
    let bytes = store.snapshot().encode_image().unwrap();
    let other = StateStore::new();
    other.apply(1, register_node(&node(50)));
    let mut sub = other.subscribe();
    assert_eq!(other.restore_image(&bytes).unwrap(), 4);
    assert_eq!(other.latest_index(), 4);
    assert_eq!(other.snapshot().encode_image().unwrap(), bytes);
    let snap = other.snapshot();
    assert!(
        snap.node_by_id(&node_id(50)).is_none(),
        "restore replaces, it does not merge"
    );
    assert_eq!(snap.allocs_by_node(&node_id(1)).count(), 1);
    let a = snap.alloc_by_id(&alloc_id(0)).unwrap();
    assert!(a
        .job_id
        .ptr_eq(&snap.job_by_id("default", "web").unwrap().id));
    assert_eq!(
        sub.try_recv().unwrap().unwrap().change,
        StateChange::Restored
    );

    // Corrupt images are refused with typed errors and leave the state alone.
    use teamster_storage::state::StateError;
    assert_eq!(
        other.restore_image(b"nonsense"),
        Err(StateError::ImageMagic)
    );
    let mut future = bytes.clone();
    let next = teamster_storage::state::IMAGE_FORMAT_VERSION + 1;
    future[8..12].copy_from_slice(&next.to_le_bytes());
    assert!(matches!(
        other.restore_image(&future),
        Err(StateError::ImageVersion { found, .. }) if found == next
    ));
    for cut in [13, bytes.len() / 2, bytes.len() - 1] {
        assert!(matches!(
            other.restore_image(&bytes[..cut]),
            Err(StateError::ImageDecode(_))
        ));
    }
    let mut trailing = bytes.clone();
    trailing.push(0);
    assert!(matches!(
        other.restore_image(&trailing),
        Err(StateError::ImageDecode(_))
    ));
    assert_eq!(other.snapshot().encode_image().unwrap(), bytes);
}

#[test]
fn command_variant_indexes_are_pinned() {
    // The variant index is the wire format of the raft log: these must never change.
    let cfg = bincode::config::standard();
    let tag = |c: &Command| bincode::serde::encode_to_vec(c, cfg).unwrap()[0];
    assert_eq!(tag(&Command::Batch(vec![])), 0);
    assert_eq!(tag(&Command::ClusterMeta(ClusterMeta::default())), 1);
    assert_eq!(
        tag(&Command::EvalDelete(EvalDelete {
            evals: vec![],
            allocs: vec![]
        })),
        10
    );
    assert_eq!(tag(&client_update(&alloc_id(1), ClientStatus::Running)), 12);
    let cmd = register(&job("x", 2), Some(eval_for(&job("x", 2), 3)));
    let bytes = bincode::serde::encode_to_vec(&cmd, cfg).unwrap();
    assert_eq!(bytes[0], 3);
    let (back, _): (Command, usize) = bincode::serde::decode_from_slice(&bytes, cfg).unwrap();
    assert_eq!(back, cmd);
}

#[test]
fn a_desired_transition_marks_the_allocation_with_its_evaluation_atomically() {
    use teamster_storage::fsm::AllocUpdateDesiredTransition;
    use teamster_storage::model::{DesiredTransition, EvalTrigger};
    let (store, job) = seeded();
    applied(store.apply(
        4,
        place(
            &eval_id(1),
            vec![alloc(0, &job, &node_id(1), &eval_id(1), 0)],
        ),
    ));
    let migrate = DesiredTransition {
        migrate: Some(true),
        ..DesiredTransition::default()
    };
    let mut eval = eval_for(&job, 2);
    eval.triggered_by = EvalTrigger::AllocStop;
    let cmd = |allocs: Vec<u64>, eval: &teamster_storage::model::Evaluation| {
        Command::AllocUpdateDesiredTransition(AllocUpdateDesiredTransition {
            allocs: allocs
                .into_iter()
                .map(|n| (alloc_id(n), migrate.clone()))
                .collect(),
            evals: vec![eval.clone()],
        })
    };
    // An unknown allocation refuses the whole command: no mark, no evaluation.
    let resp = store.apply(5, cmd(vec![0, 9], &eval));
    assert_eq!(
        resp.rejection(),
        Some(&ApplyError::AllocNotFound {
            alloc_id: alloc_id(9).to_string()
        })
    );
    let snap = store.snapshot();
    assert!(!snap
        .alloc_by_id(&alloc_id(0))
        .unwrap()
        .desired_transition
        .should_migrate());
    assert!(snap.eval_by_id(&eval_id(2)).is_none());

    applied(store.apply(6, cmd(vec![0], &eval)));
    let snap = store.snapshot();
    let marked = snap.alloc_by_id(&alloc_id(0)).unwrap();
    assert!(marked.desired_transition.should_migrate());
    assert_eq!(
        marked.desired_status,
        DesiredStatus::Run,
        "the scheduler stops it"
    );
    assert_eq!((marked.modify_index, marked.alloc_modify_index), (6, 6));
    assert_eq!(
        snap.eval_by_id(&eval_id(2)).unwrap().triggered_by,
        EvalTrigger::AllocStop
    );
    // The mark survives an image, and its JSON is Nomad's.
    let restored = StateStore::new();
    restored.restore_image(&image(&store)).unwrap();
    assert!(restored
        .snapshot()
        .alloc_by_id(&alloc_id(0))
        .unwrap()
        .desired_transition
        .should_migrate());
    let json = serde_json::to_value(marked.as_ref()).unwrap();
    assert_eq!(
        json["DesiredTransition"],
        serde_json::json!({"Migrate": true, "Reschedule": null})
    );
    // Its variant index is appended after every earlier one.
    let bytes =
        bincode::serde::encode_to_vec(cmd(vec![0], &eval), bincode::config::standard()).unwrap();
    assert_eq!(bytes[0], 18);
}

#[test]
fn reconciling_summaries_recounts_allocations_and_keeps_what_they_cannot_tell() {
    let (store, job) = seeded();
    applied(store.apply(
        4,
        place(
            &eval_id(1),
            vec![
                alloc(0, &job, &node_id(1), &eval_id(1), 0),
                alloc(1, &job, &node_id(2), &eval_id(1), 1),
            ],
        ),
    ));
    applied(store.apply(5, client_update(&alloc_id(0), ClientStatus::Complete)));
    // Collected: its count stays in `complete` (Nomad never takes finished ones out).
    applied(store.apply(
        6,
        Command::EvalDelete(EvalDelete {
            evals: vec![],
            allocs: vec![alloc_id(0)],
        }),
    ));
    let before = store
        .snapshot()
        .job_summary("default", "web")
        .unwrap()
        .clone();
    let tg = before.summary["web"];
    assert_eq!((tg.starting, tg.complete), (1, 1));

    applied(store.apply(7, Command::ReconcileJobSummaries));
    let after = store
        .snapshot()
        .job_summary("default", "web")
        .unwrap()
        .clone();
    let tg = after.summary["web"];
    assert_eq!((tg.starting, tg.complete, tg.running), (1, 0, 0));
    assert_eq!(tg.queued, before.summary["web"].queued);
    assert_eq!(
        (after.create_index, after.modify_index),
        (before.create_index, 7)
    );
    // Nothing to repair: nothing is written.
    applied(store.apply(8, Command::ReconcileJobSummaries));
    assert_eq!(
        store
            .snapshot()
            .job_summary("default", "web")
            .unwrap()
            .modify_index,
        7
    );
    let bytes =
        bincode::serde::encode_to_vec(Command::ReconcileJobSummaries, bincode::config::standard())
            .unwrap();
    assert_eq!(bytes, [19]);
}

#[test]
fn job_scale_registers_the_count_with_its_eval_and_records_the_event_atomically() {
    use teamster_storage::fsm::{JobScale, JobStability};
    use teamster_storage::model::{ScalingEvent, MAX_SCALING_EVENTS};
    let (store, job) = seeded();
    let mut scaled = job.clone();
    scaled.task_groups_mut()[0].count = 5;
    let eval = eval_for(&scaled, 2);
    let event = |count: Option<i64>| ScalingEvent {
        time: 7,
        count,
        previous_count: 3,
        message: "more".into(),
        ..ScalingEvent::default()
    };
    let resp = applied(store.apply(
        4,
        Command::JobScale(JobScale {
            namespace: job.namespace.clone(),
            job_id: job.id.clone(),
            group: "web".into(),
            register: Some(JobRegister {
                job: scaled.clone(),
                eval: Some(eval.clone()),
                enforce_index: Some(job.job_modify_index),
                tracked_versions: 0,
            }),
            event: event(Some(5)),
        }),
    ));
    assert!(matches!(
        resp,
        CommandResponse::JobRegistered {
            version: 1,
            job_modify_index: 4,
            spec_changed: true
        }
    ));
    let snap = store.snapshot();
    assert_eq!(
        snap.job_by_id("default", "web").unwrap().task_groups[0].count,
        5
    );
    assert!(snap.eval_by_id(&eval.id).is_some());
    let events = &snap.job_summary("default", "web").unwrap().scaling_events["web"];
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].eval_id.as_deref(), Some(eval.id.as_str()));
    assert_eq!((events[0].count, events[0].create_index), (Some(5), 4));

    // A stale compare-and-set changes nothing: no version, no eval, no event.
    let stale = store.apply(
        5,
        Command::JobScale(JobScale {
            namespace: job.namespace.clone(),
            job_id: job.id.clone(),
            group: "web".into(),
            register: Some(JobRegister {
                job: scaled.clone(),
                eval: Some(eval_for(&scaled, 3)),
                enforce_index: Some(job.job_modify_index),
                tracked_versions: 0,
            }),
            event: event(Some(6)),
        }),
    );
    assert!(matches!(
        stale.rejection(),
        Some(ApplyError::JobModifyIndexMismatch { .. })
    ));
    assert_eq!(
        store
            .snapshot()
            .job_summary("default", "web")
            .unwrap()
            .scaling_events["web"]
            .len(),
        1
    );
    assert_eq!(
        store
            .snapshot()
            .job_by_id("default", "web")
            .unwrap()
            .version,
        1
    );
    assert!(store
        .snapshot()
        .eval_by_id(&eval_for(&scaled, 3).id)
        .is_none());

    // Events only: newest first, at most MAX_SCALING_EVENTS kept.
    for i in 0..(MAX_SCALING_EVENTS as u64 + 3) {
        applied(store.apply(
            6 + i,
            Command::JobScale(JobScale {
                namespace: job.namespace.clone(),
                job_id: job.id.clone(),
                group: "web".into(),
                register: None,
                event: event(None),
            }),
        ));
    }
    let snap = store.snapshot();
    let events = &snap.job_summary("default", "web").unwrap().scaling_events["web"];
    assert_eq!(events.len(), MAX_SCALING_EVENTS);
    assert!(events[0].create_index > events[1].create_index);
    assert_eq!(snap.job_by_id("default", "web").unwrap().version, 1);

    // Stability: a kept version is marked; an unknown one is refused.
    let at = snap.latest_index() + 1;
    applied(store.apply(
        at,
        Command::JobStability(JobStability {
            namespace: job.namespace.clone(),
            job_id: job.id.clone(),
            version: 1,
            stable: true,
        }),
    ));
    let snap = store.snapshot();
    assert!(snap.job_by_id("default", "web").unwrap().stable);
    assert!(!snap.job_by_version("default", "web", 0).unwrap().stable);
    let missing = store.apply(
        at + 1,
        Command::JobStability(JobStability {
            namespace: job.namespace.clone(),
            job_id: job.id.clone(),
            version: 9,
            stable: true,
        }),
    );
    assert!(matches!(
        missing.rejection(),
        Some(ApplyError::JobVersionNotFound { version: 9, .. })
    ));
}

#[test]
fn a_job_command_keeps_as_many_versions_as_it_says() {
    let (store, job) = seeded();
    for (i, count) in (4..9).enumerate() {
        let mut next = job.clone();
        next.task_groups_mut()[0].count = count;
        let mut cmd = register(&next, None);
        if let Command::JobRegister(r) = &mut cmd {
            r.tracked_versions = 2;
        }
        applied(store.apply(4 + i as u64, cmd));
    }
    let kept: Vec<u64> = store
        .snapshot()
        .job_versions("default", "web")
        .iter()
        .map(|j| j.version)
        .collect();
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(kept.contains(&5) && kept.contains(&4), "{kept:?}");
    // 0 is the default, six.
    for (i, count) in (10..16).enumerate() {
        let mut next = job.clone();
        next.task_groups_mut()[0].count = count;
        applied(store.apply(20 + i as u64, register(&next, None)));
    }
    assert_eq!(store.snapshot().job_versions("default", "web").len(), 6);
}
