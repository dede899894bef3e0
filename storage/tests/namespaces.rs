//! Namespaces in the state store: `default` always exists and cannot be deleted; a job can
//! be registered only in a namespace that exists; a namespace that holds a job cannot be
//! deleted; namespaces survive a snapshot image.

mod common;

use common::*;
use teamster_storage::fsm::{ApplyError, Command, JobDeregister, NamespaceDelete, NamespaceUpsert};
use teamster_storage::model::{Namespace, NamespaceSpec};
use teamster_storage::state::{StateStore, Table};

fn upsert(name: &str, description: &str) -> Command {
    Command::NamespaceUpsert(NamespaceUpsert {
        namespaces: vec![NamespaceSpec {
            name: name.into(),
            description: description.into(),
            ..NamespaceSpec::default()
        }],
    })
}

fn delete(name: &str) -> Command {
    Command::NamespaceDelete(NamespaceDelete {
        names: vec![name.into()],
    })
}

#[test]
fn a_job_needs_its_namespace_and_a_namespace_with_a_job_stays() {
    let store = StateStore::new();
    let mut job = job("web", 1);
    job.namespace = Namespace::new("team-a");
    let r = store.apply(1, register(&job, None));
    assert!(
        matches!(r.rejection(), Some(ApplyError::NamespaceNotFound { namespace }) if namespace == "team-a"),
        "{r:?}"
    );
    assert!(store.snapshot().job_by_id("team-a", "web").is_none());

    assert!(store
        .apply(2, upsert("team-a", "the A team"))
        .rejection()
        .is_none());
    let snap = store.snapshot();
    let ns = snap.namespace("team-a").expect("created");
    assert_eq!((ns.create_index, ns.modify_index), (2, 2));
    assert_eq!(snap.table_index(Table::Namespaces), 2);
    assert!(store.apply(3, register(&job, None)).rejection().is_none());

    // The job holds the namespace.
    let r = store.apply(4, delete("team-a"));
    assert!(
        matches!(r.rejection(), Some(ApplyError::NamespaceRefused { .. })),
        "{r:?}"
    );
    let r = store.apply(
        5,
        Command::JobDeregister(JobDeregister {
            namespace: job.namespace.clone(),
            job_id: job.id.clone(),
            purge: true,
            eval: None,
            submit_time: 0,
            tracked_versions: 0,
        }),
    );
    assert!(r.rejection().is_none(), "{r:?}");
    assert!(store.apply(6, delete("team-a")).rejection().is_none());
    assert!(store.snapshot().namespace("team-a").is_none());
    // Gone: deleting it again is an error.
    assert!(matches!(
        store.apply(7, delete("team-a")).rejection(),
        Some(ApplyError::NamespaceNotFound { .. })
    ));
}

#[test]
fn default_always_exists_may_be_described_and_is_never_deleted() {
    let store = StateStore::new();
    let names: Vec<String> = store
        .snapshot()
        .namespaces()
        .iter()
        .map(|n| n.name.clone())
        .collect();
    assert_eq!(names, ["default"]);
    assert!(matches!(
        store.apply(1, delete("default")).rejection(),
        Some(ApplyError::NamespaceRefused { .. })
    ));
    store.apply(2, upsert("default", "ours"));
    store.apply(3, upsert("b", ""));
    let snap = store.snapshot();
    let all: Vec<(String, String)> = snap
        .namespaces()
        .iter()
        .map(|n| (n.name.clone(), n.description.clone()))
        .collect();
    assert_eq!(
        all,
        [("b".into(), "".into()), ("default".into(), "ours".into())]
    );
    // Writing the same again changes nothing; a bad name is refused.
    store.apply(4, upsert("b", ""));
    assert_eq!(store.snapshot().namespace("b").unwrap().modify_index, 3);
    assert!(store.apply(5, upsert("bad name", "")).rejection().is_some());
}

#[test]
fn namespaces_survive_a_snapshot_image() {
    let store = StateStore::new();
    store.apply(1, upsert("team-a", "x"));
    let image = store.snapshot().encode_image().unwrap();
    let restored = StateStore::new();
    restored.restore_image(&image).unwrap();
    assert_eq!(
        restored.snapshot().namespace("team-a").unwrap().description,
        "x"
    );
}
