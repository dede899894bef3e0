//! Waiting on the applied index, on paused tokio time: `snapshot_min_index` and the
//! blocking-query primitive `wait_tables`.

mod common;

use std::time::Duration;

use common::*;
use teamster_storage::model::ClientStatus;
use teamster_storage::state::{StateError, StateStore, Table};
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn snapshot_min_index_returns_at_once_when_the_index_is_reached() {
    let store = StateStore::new();
    store.apply(3, register_node(&node(1)));
    let start = Instant::now();
    let snap = store
        .snapshot_min_index(2, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(snap.latest_index(), 3);
    assert_eq!(start.elapsed(), Duration::ZERO);
    let snap = store.snapshot_min_index(3, Duration::ZERO).await.unwrap();
    assert_eq!(snap.node_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn snapshot_min_index_wakes_as_soon_as_the_index_arrives() {
    let store = StateStore::new();
    let writer = store.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        writer.advance_index(4); // not enough yet
        tokio::time::sleep(Duration::from_millis(300)).await;
        writer.apply(5, register_node(&node(1)));
    });
    let start = Instant::now();
    let snap = store
        .snapshot_min_index(5, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(1000));
    assert_eq!(snap.latest_index(), 5);
    assert_eq!(
        snap.node_count(),
        1,
        "the snapshot includes the write at that index"
    );
}

#[tokio::test(start_paused = true)]
async fn snapshot_min_index_times_out_with_a_typed_error() {
    let store = StateStore::new();
    store.advance_index(7);
    let start = Instant::now();
    let err = store
        .snapshot_min_index(8, Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(5));
    assert_eq!(
        err,
        StateError::MinIndexTimeout {
            index: 8,
            latest: 7,
            timeout: Duration::from_secs(5)
        }
    );
    assert_eq!(
        err.to_string(),
        "timed out after 5s waiting for index=8 (latest 7)"
    );
}

#[tokio::test(start_paused = true)]
async fn closing_the_store_ends_every_wait() {
    let store = StateStore::new();
    let closer = store.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        closer.close();
    });
    let start = Instant::now();
    let err = store
        .snapshot_min_index(100, Duration::from_secs(60))
        .await
        .unwrap_err();
    assert_eq!(err, StateError::Closed);
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    let err = store
        .wait_tables(&[Table::Allocs], 5, Duration::from_secs(60))
        .await
        .unwrap_err();
    assert_eq!(err, StateError::Closed);
}

#[tokio::test(start_paused = true)]
async fn blocking_queries_wake_only_for_their_tables() {
    let store = StateStore::new();
    store.apply(1, register_node(&node(1)));
    let job = job("blocky", 1);
    store.apply(2, register(&job, Some(eval_for(&job, 1))));

    let writer = store.clone();
    let job2 = job.clone();
    tokio::spawn(async move {
        // A node change at t=1s must not wake a query on allocations...
        tokio::time::sleep(Duration::from_secs(1)).await;
        writer.apply(3, register_node(&node(2)));
        // ...a placement at t=2s must.
        tokio::time::sleep(Duration::from_secs(1)).await;
        writer.apply(
            4,
            place(
                &eval_id(1),
                vec![alloc(0, &job2, &node_id(1), &eval_id(1), 0)],
            ),
        );
    });

    let start = Instant::now();
    let result = store
        .wait_tables(&[Table::Allocs], 2, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    assert!(!result.timed_out);
    assert_eq!(result.index, 4);
    assert_eq!(result.snapshot.alloc_count(), 1);

    // Index 0 answers at once; an index the tables already passed too.
    let now = store
        .wait_tables(&[Table::Nodes], 0, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!((now.index, now.timed_out), (3, false));
    let passed = store
        .wait_tables(&[Table::Nodes, Table::Jobs], 2, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(
        (passed.index, passed.timed_out),
        (4, false),
        "the highest of the tables"
    );
    assert_eq!(start.elapsed(), Duration::from_secs(2));

    let jobs = store
        .wait_tables(&[Table::Jobs], 2, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(!jobs.timed_out);
    assert_eq!(
        jobs.index, 4,
        "the job's status moved to running at index 4"
    );
    // Nothing changes: the query returns the current data on timeout.
    let waited = store
        .wait_tables(&[Table::Jobs], 4, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(waited.timed_out);
    assert_eq!(waited.index, 4);
    assert_eq!(start.elapsed(), Duration::from_secs(7));
}

#[tokio::test(start_paused = true)]
async fn a_node_allocation_query_wakes_only_for_server_changes_to_that_node() {
    let store = StateStore::new();
    store.apply(1, register_node(&node(1)));
    store.apply(2, register_node(&node(2)));
    let job = job("per-node", 3);
    store.apply(3, register(&job, Some(eval_for(&job, 1))));
    store.apply(
        4,
        place(
            &eval_id(1),
            vec![alloc(0, &job, &node_id(1), &eval_id(1), 0)],
        ),
    );

    let writer = store.clone();
    let job2 = job.clone();
    tokio::spawn(async move {
        // t=1s: a placement on the other node; t=2s: node 1's client reports its
        // allocation running (a client change); t=3s: a second placement on node 1.
        tokio::time::sleep(Duration::from_secs(1)).await;
        writer.apply(
            5,
            place(
                &eval_id(1),
                vec![alloc(1, &job2, &node_id(2), &eval_id(1), 1)],
            ),
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        writer.apply(6, client_update(&alloc_id(0), ClientStatus::Running));
        tokio::time::sleep(Duration::from_secs(1)).await;
        writer.apply(
            7,
            place(
                &eval_id(1),
                vec![alloc(2, &job2, &node_id(1), &eval_id(1), 2)],
            ),
        );
    });

    let start = Instant::now();
    let never_ready = |_: &teamster_storage::state::Snapshot| false;
    let result = store
        .wait_node_allocs(&node_id(1), 4, Duration::from_secs(30), never_ready)
        .await
        .unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    assert!(!result.timed_out);
    assert_eq!(result.index, 7);
    assert_eq!(
        result.snapshot.allocs_by_node(node_id(1).as_str()).count(),
        2
    );

    // Ready at once: no wait. Nothing happening: the timeout.
    let start = Instant::now();
    let at_once = store
        .wait_node_allocs(&node_id(1), 7, Duration::from_secs(30), |_| true)
        .await
        .unwrap();
    assert_eq!(
        (start.elapsed(), at_once.timed_out),
        (Duration::ZERO, false)
    );
    let quiet = store
        .wait_node_allocs(&node_id(2), 7, Duration::from_secs(5), never_ready)
        .await
        .unwrap();
    assert_eq!(
        (start.elapsed(), quiet.timed_out),
        (Duration::from_secs(5), true)
    );

    // Closing the store ends the wait with an error.
    let closer = store.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        closer.close();
    });
    let err = store
        .wait_node_allocs(&node_id(1), 4, Duration::from_secs(30), never_ready)
        .await
        .unwrap_err();
    assert!(matches!(err, StateError::Closed), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_lagging_server_does_not_answer_a_node_query_from_an_older_state() {
    let store = StateStore::new();
    store.apply(1, register_node(&node(1)));
    let job = job("lagging", 3);
    store.apply(2, register(&job, Some(eval_for(&job, 1))));

    // The client last heard index 10 from another server; this one is at 2 and catching up.
    let writer = store.clone();
    let job2 = job.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let first = alloc(0, &job2, &node_id(1), &eval_id(1), 0);
        writer.apply(5, place(&eval_id(1), vec![first]));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let second = alloc(1, &job2, &node_id(1), &eval_id(1), 1);
        writer.apply(11, place(&eval_id(1), vec![second]));
    });
    let start = Instant::now();
    let result = store
        .wait_node_allocs(&node_id(1), 10, Duration::from_secs(30), |_| false)
        .await
        .unwrap();
    assert_eq!(
        start.elapsed(),
        Duration::from_secs(2),
        "not woken at index 5"
    );
    assert_eq!(result.index, 11);
    assert!(!result.timed_out);
}
