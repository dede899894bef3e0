//! `Command::SnapshotRestore`: replacing the whole state with a saved image through the log.

mod common;

use common::*;
use teamster_storage::fsm::{ApplyError, Command, CommandResponse, SnapshotRestore};
use teamster_storage::state::{StateChange, StateStore, Table};

fn applied(resp: CommandResponse) -> CommandResponse {
    assert!(resp.rejection().is_none(), "unexpected rejection: {resp:?}");
    resp
}

fn job_ids(store: &StateStore) -> Vec<String> {
    store.snapshot().jobs().map(|j| j.id.to_string()).collect()
}

#[test]
fn a_restore_brings_back_the_saved_tables_at_the_entry_index() {
    let store = StateStore::new();
    applied(store.apply(1, register_node(&node(1))));
    let web = job("web", 2);
    applied(store.apply(2, register(&web, Some(eval_for(&web, 1)))));
    let saved = store.snapshot();
    let image = saved.encode_image().unwrap();

    // Changes after the save: another job, a second node.
    let api = job("api", 1);
    applied(store.apply(3, register(&api, Some(eval_for(&api, 2)))));
    applied(store.apply(4, register_node(&node(2))));
    assert_eq!(job_ids(&store), vec!["api", "web"]);

    let mut events = store.subscribe();
    let resp = store.apply(5, Command::SnapshotRestore(SnapshotRestore { image }));
    assert_eq!(resp, CommandResponse::Applied);

    let now = store.snapshot();
    assert_eq!(job_ids(&store), vec!["web"]);
    assert_eq!(now.node_count(), 1);
    assert_eq!(now.eval_count(), saved.eval_count());
    // The objects are the saved ones, indexes included…
    assert_eq!(
        now.job_by_id("default", "web").unwrap(),
        saved.job_by_id("default", "web").unwrap()
    );
    // …but the state's indexes move forward, so blocking queries wake and never go back.
    assert_eq!(now.latest_index(), 5);
    assert_eq!(store.latest_index(), 5);
    for table in Table::ALL {
        assert_eq!(now.table_index(table), 5, "{table:?}");
    }
    let event = events.try_recv().unwrap().expect("a Restored event");
    assert_eq!(event.index, 5);
    assert_eq!(event.change, StateChange::Restored);
}

#[test]
fn a_bad_image_is_rejected_and_changes_nothing() {
    let store = StateStore::new();
    let web = job("web", 1);
    applied(store.apply(1, register(&web, Some(eval_for(&web, 1)))));
    let before = store.snapshot().encode_image().unwrap();

    let resp = store.apply(
        2,
        Command::SnapshotRestore(SnapshotRestore {
            image: b"not an image".to_vec(),
        }),
    );
    match resp.rejection() {
        Some(ApplyError::InvalidCommand { reason }) => {
            assert!(reason.contains("snapshot restore"), "{reason}")
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert_eq!(job_ids(&store), vec!["web"]);
    // Only the applied index moved (every entry moves it).
    let after = store.snapshot();
    assert_eq!(after.table_index(Table::Jobs), 1);
    let mut image = before.clone();
    image.truncate(image.len() - 1);
    let resp = store.apply(3, Command::SnapshotRestore(SnapshotRestore { image }));
    assert!(resp.rejection().is_some());
    assert_eq!(job_ids(&store), vec!["web"]);
}

#[test]
fn a_restore_inside_a_batch_applies_in_order() {
    let store = StateStore::new();
    let web = job("web", 1);
    applied(store.apply(1, register(&web, Some(eval_for(&web, 1)))));
    let image = store.snapshot().encode_image().unwrap();
    let api = job("api", 1);
    let late = job("late", 1);
    let resp = store.apply(
        2,
        Command::Batch(vec![
            register(&api, Some(eval_for(&api, 2))),
            Command::SnapshotRestore(SnapshotRestore { image }),
            register(&late, Some(eval_for(&late, 3))),
        ]),
    );
    assert!(matches!(resp, CommandResponse::Batch(ref r) if r.len() == 3));
    // `api` was written before the restore and is gone; `late` came after it and stays.
    assert_eq!(job_ids(&store), vec!["late", "web"]);
}
