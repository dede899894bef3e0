//! The log store's in-memory copy of its newest entries must never change what a read
//! returns. Random sequences of appends, truncations, purges (also past the last entry, as a
//! follower does when it installs a snapshot), term changes and reopens run against two stores
//! side by side: one keeping no entries in memory, one keeping a few entries
//! (so the copy is filled, evicted, cut and emptied again and again). Every read of a range
//! near the tail, byte-limited as replication reads and whole, and the log state must come
//! out the same from both.

mod common;

use common::*;
use openraft::storage::{RaftLogReader, RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, EntryPayload, LogId};
use proptest::prelude::*;
use teamster_storage::fsm::Command;
use teamster_storage::log_store::{LogStore, LogStoreConfig};
use teamster_storage::raft_types::Entry;

#[derive(Debug, Clone)]
enum Op {
    /// Entries after the last one (or after the purge point, when that is further).
    Append { count: u64, size: usize },
    /// Drop the entries from `back` before the last one on.
    Truncate { back: u64 },
    /// Purge up to `offset` around the last entry (past it: a snapshot was installed).
    Purge { offset: i64 },
    /// Entries written from now on differ from the ones they replace.
    NewTerm,
    /// `[last + 1 - back, + len)`, as replication reads it (limited in bytes) and whole.
    Read { back: u64, len: u64 },
    /// Close both stores and open them again (the in-memory copy starts empty).
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1..6u64, 0..4usize).prop_map(|(count, size)| Op::Append { count, size }),
        1 => (0..6u64).prop_map(|back| Op::Truncate { back }),
        1 => (-8..8i64).prop_map(|offset| Op::Purge { offset }),
        1 => Just(Op::NewTerm),
        5 => (0..10u64, 0..8u64).prop_map(|(back, len)| Op::Read { back, len }),
        1 => Just(Op::Reopen),
    ]
}

/// What the second store keeps in memory: a handful of entries.
const CACHED_BYTES: usize = 3000;

fn open_store(path: &std::path::Path, recent_entries_bytes: usize) -> LogStore {
    let config = LogStoreConfig {
        recent_entries_bytes,
        // Replication reads stop at about two entries' worth.
        max_payload_bytes: 700,
        ..LogStoreConfig::default()
    };
    LogStore::open(path, &config).expect("the log store opens")
}

/// An entry of `size + 1` node registrations (a few hundred bytes each).
fn entry(term: u64, index: u64, size: usize) -> Entry {
    let commands = (0..=size as u64)
        .map(|k| register_node(&node(index * 10 + k)))
        .collect();
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
        payload: EntryPayload::Normal(Command::Batch(commands).into()),
    }
}

/// What a read returned, comparable: each entry's id and encoded bytes.
fn seen(entries: &[Entry]) -> Vec<(LogId<u64>, Vec<u8>)> {
    entries
        .iter()
        .map(|e| {
            let bytes = bincode::serde::encode_to_vec(e, bincode::config::standard()).unwrap();
            (e.log_id, bytes)
        })
        .collect()
}

async fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let (dir_plain, dir_cached) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let mut plain = open_store(dir_plain.path(), 0);
    let mut cached = open_store(dir_cached.path(), CACHED_BYTES);
    let mut term = 1;
    for op in ops {
        let state = plain.get_log_state().await.unwrap();
        let last = state.last_log_id.map_or(0, |id| id.index);
        let purged = state.last_purged_log_id.map_or(0, |id| id.index);
        match op {
            Op::Append { count, size } => {
                let entries: Vec<Entry> = (last + 1..=last + count)
                    .map(|i| entry(term, i, size))
                    .collect();
                plain.blocking_append(entries.clone()).await.unwrap();
                cached.blocking_append(entries).await.unwrap();
            }
            Op::Truncate { back } => {
                let at = last.saturating_sub(back);
                if at > purged {
                    let id = LogId::new(CommittedLeaderId::new(term, 1), at);
                    plain.truncate(id).await.unwrap();
                    cached.truncate(id).await.unwrap();
                }
            }
            Op::Purge { offset } => {
                let at = last.saturating_add_signed(offset);
                if at > purged {
                    let id = LogId::new(CommittedLeaderId::new(term, 1), at);
                    plain.purge(id).await.unwrap();
                    cached.purge(id).await.unwrap();
                }
            }
            Op::NewTerm => term += 1,
            Op::Read { back, len } => {
                let start = (last + 1).saturating_sub(back);
                let end = start + len;
                prop_assert_eq!(
                    seen(&plain.limited_get_log_entries(start, end).await.unwrap()),
                    seen(&cached.limited_get_log_entries(start, end).await.unwrap()),
                    "limited read of [{}, {})",
                    start,
                    end
                );
                prop_assert_eq!(
                    seen(&plain.try_get_log_entries(start..end).await.unwrap()),
                    seen(&cached.try_get_log_entries(start..end).await.unwrap()),
                    "read of [{}, {})",
                    start,
                    end
                );
            }
            Op::Reopen => {
                drop((plain, cached));
                plain = open_store(dir_plain.path(), 0);
                cached = open_store(dir_cached.path(), CACHED_BYTES);
            }
        }
        let (a, b) = (
            plain.get_log_state().await.unwrap(),
            cached.get_log_state().await.unwrap(),
        );
        prop_assert_eq!(a.last_log_id, b.last_log_id);
        prop_assert_eq!(a.last_purged_log_id, b.last_purged_log_id);
    }
    // Finally every entry either holds, read whole.
    prop_assert_eq!(
        seen(&plain.try_get_log_entries(..).await.unwrap()),
        seen(&cached.try_get_log_entries(..).await.unwrap())
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_recent_entries_never_change_a_read(ops in proptest::collection::vec(op(), 1..60)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(run(ops))?;
    }
}
