//! sled 0.34 writes any item larger than a quarter of a log segment (a large value, or a
//! leaf page of up to about 20 values once it is consolidated) to a file of its own under
//! `blobs/`, and never fsyncs that file or its directory. A log entry (or a page of entries) kept in a blob would be acknowledged as
//! durable and could vanish on a power loss. The log store must therefore never make sled
//! write a blob, whatever the size of the entries, through appends, truncations, purges and
//! reopens, and must read back exactly what it wrote.

mod common;

use common::*;
use openraft::storage::{RaftLogReader, RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, EntryPayload, LogId};
use teamster_storage::fsm::Command;
use teamster_storage::log_store::{LogStore, LogStoreConfig};
use teamster_storage::raft_types::Entry;

/// An entry of `nodes` node registrations (a few hundred bytes each).
fn entry(index: u64, nodes: u64) -> Entry {
    let commands = (0..nodes)
        .map(|k| register_node(&node(index * 10_000 + k)))
        .collect();
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Command::Batch(commands).into()),
    }
}

fn blob_files(path: &std::path::Path) -> usize {
    match std::fs::read_dir(path.join("blobs")) {
        Ok(dir) => dir.count(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => panic!("reading the blob directory: {e}"),
    }
}

fn bytes_of(entries: &[Entry]) -> Vec<Vec<u8>> {
    entries
        .iter()
        .map(|e| bincode::serde::encode_to_vec(e, bincode::config::standard()).unwrap())
        .collect()
}

#[tokio::test]
async fn no_entry_size_makes_sled_write_a_file_it_never_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("raft");
    let config = LogStoreConfig {
        // Nothing served from memory: every read below goes to sled.
        recent_entries_bytes: 0,
        ..LogStoreConfig::default()
    };
    let mut store = LogStore::open(&path, &config).unwrap();
    // Small entries (a leaf of 17 of them is past sled's blob size), then large ones: a
    // plan of a thousand allocations encodes to about 600 kB.
    let sizes: Vec<u64> = (0..60)
        .map(|i| match i % 20 {
            7 => 3_000,
            13 => 600,
            _ => 40 + i,
        })
        .collect();
    let written: Vec<Entry> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| entry(i as u64 + 1, n))
        .collect();
    for chunk in written.chunks(7) {
        store.blocking_append(chunk.to_vec()).await.unwrap();
    }
    assert_eq!(blob_files(&path), 0, "appends left blob files");
    let read = store.try_get_log_entries(1..=60).await.unwrap();
    assert_eq!(bytes_of(&read), bytes_of(&written));

    // Truncate the tail, write it again with other sizes, purge the head.
    store
        .truncate(LogId::new(CommittedLeaderId::new(1, 1), 50))
        .await
        .unwrap();
    let rewritten: Vec<Entry> = (50..=70).map(|i| entry(i, 1_500)).collect();
    store.blocking_append(rewritten.clone()).await.unwrap();
    store
        .purge(LogId::new(CommittedLeaderId::new(1, 1), 20))
        .await
        .unwrap();
    assert_eq!(blob_files(&path), 0, "truncation or purge left blob files");
    drop(store);

    let mut store = LogStore::open(&path, &config).unwrap();
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id.map(|id| id.index), Some(70));
    let read = store.try_get_log_entries(21..=70).await.unwrap();
    let expected: Vec<Entry> = written[20..49].iter().cloned().chain(rewritten).collect();
    assert_eq!(bytes_of(&read), bytes_of(&expected));
    // Replication's limited read stops at the byte budget but always returns one entry.
    let limited = store.limited_get_log_entries(28, 71).await.unwrap();
    assert_eq!(limited.first().map(|e| e.log_id.index), Some(28));
    assert_eq!(blob_files(&path), 0);
}
