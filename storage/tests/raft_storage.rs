//! The sled log store and the snapshotting state machine: openraft's own storage suite,
//! durability across reopen, snapshot files, and a single-server raft end to end.

mod common;

use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use openraft::error::{InstallSnapshotError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::{RaftLogReader, RaftLogStorage, RaftSnapshotBuilder, RaftStateMachine};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{CommittedLeaderId, EntryPayload, LogId, Membership, Vote};
use teamster_storage::fsm::{Command, CommandResponse};
use teamster_storage::log_store::LogStore;
use teamster_storage::raft_types::{Entry, ServerAddr, StorageError, TypeConfig};
use teamster_storage::state::StateStore;
use teamster_storage::state_machine::{SnapshotStoreError, StateMachine};
use teamster_storage::{open, OpenError, StorageConfig};
use tempfile::TempDir;

struct SledBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for SledBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError> {
        let dir = tempfile::tempdir().expect("temp dir");
        let (log, sm) =
            open(dir.path(), StateStore::new(), &StorageConfig::default()).expect("storage opens");
        Ok((dir, log, sm))
    }
}

/// openraft's conformance suite against the real sled log store and state machine.
#[test]
fn openraft_storage_suite() {
    Suite::test_all(SledBuilder).unwrap();
}

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn entry(term: u64, index: u64, payload: EntryPayload<TypeConfig>) -> Entry {
    Entry {
        log_id: log_id(term, index),
        payload,
    }
}

fn command_entry(index: u64, command: Command) -> Entry {
    entry(1, index, EntryPayload::Normal(command.into()))
}

async fn append(log: &mut LogStore, entries: Vec<Entry>) {
    // Appends and waits for the flush callback, as openraft's core does.
    use openraft::storage::RaftLogStorageExt;
    log.blocking_append(entries).await.unwrap();
}

#[tokio::test]
async fn the_log_survives_a_reopen_with_vote_committed_and_purge() {
    let dir = tempfile::tempdir().unwrap();
    {
        let (mut log, _) = open(dir.path(), StateStore::new(), &StorageConfig::default()).unwrap();
        let stats = log.stats();
        let entries: Vec<Entry> = (1..=10)
            .map(|i| command_entry(i, register_node(&node(i))))
            .collect();
        let encoded: u64 = entries
            .iter()
            .map(|e| {
                bincode::serde::encode_to_vec(e, bincode::config::standard())
                    .unwrap()
                    .len() as u64
            })
            .sum();
        append(&mut log, entries).await;
        // The counters hold what was written: ten entries, their encoded size.
        assert_eq!(stats.appended_entries(), 10);
        assert_eq!(stats.appended_bytes(), encoded);
        assert!(
            encoded > 10 * 100,
            "a node registration is not tiny: {encoded}"
        );
        log.save_vote(&Vote::new(3, 2)).await.unwrap();
        log.save_committed(Some(log_id(1, 8))).await.unwrap();
        log.purge(log_id(1, 4)).await.unwrap();
        log.truncate(log_id(1, 9)).await.unwrap();
    }
    let (mut log, _) = open(dir.path(), StateStore::new(), &StorageConfig::default()).unwrap();
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(3, 2)));
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 8)));
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 4)));
    assert_eq!(state.last_log_id, Some(log_id(1, 8)));
    let entries = log.try_get_log_entries(0..100).await.unwrap();
    assert_eq!(
        entries.iter().map(|e| e.log_id.index).collect::<Vec<_>>(),
        vec![5, 6, 7, 8]
    );
    assert!(
        matches!(&entries[0].payload, EntryPayload::Normal(c) if matches!(&**c, Command::NodeRegister(r) if r.node.id == node_id(5)))
    );

    // Purging everything leaves the last purged id as the last log id.
    log.purge(log_id(1, 8)).await.unwrap();
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(1, 8)));
    assert!(log.try_get_log_entries(..).await.unwrap().is_empty());
}

#[tokio::test]
async fn replication_reads_are_limited_in_bytes_but_never_empty() {
    let entries: Vec<Entry> = (1..=10)
        .map(|i| command_entry(i, register_node(&node(i))))
        .collect();
    let size = |e: &Entry| {
        bincode::serde::encode_to_vec(e, bincode::config::standard())
            .unwrap()
            .len()
    };
    let two = size(&entries[0]) + size(&entries[1]);
    for (limit, expected) in [(usize::MAX, 10), (two, 2), (two - 1, 1), (1, 1)] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = StorageConfig::default();
        config.log.max_payload_bytes = limit;
        let (mut log, _) = open(dir.path(), StateStore::new(), &config).unwrap();
        append(&mut log, entries.clone()).await;
        let sent = log.limited_get_log_entries(1, 11).await.unwrap();
        assert_eq!(sent.len(), expected, "limit {limit}");
        assert!(sent.iter().zip(1..).all(|(e, i)| e.log_id.index == i));
        // Plain reads are never limited.
        assert_eq!(log.try_get_log_entries(1..11).await.unwrap().len(), 10);
    }
    // The limit is a checked setting.
    let mut zero = StorageConfig::default();
    zero.log.max_payload_bytes = 0;
    assert!(zero.validate().is_err());
}

async fn apply(sm: &mut StateMachine, entries: Vec<Entry>) -> Vec<CommandResponse> {
    sm.apply(entries).await.unwrap()
}

#[tokio::test]
async fn snapshots_are_durable_and_loaded_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let job = job("snappy", 2);
    let image_before;
    let current_id;
    {
        let state = StateStore::new();
        let (_, mut sm) = open(dir.path(), state.clone(), &StorageConfig::default()).unwrap();
        let membership = Membership::new(
            vec![[1u64].into_iter().collect()],
            BTreeMap::from([(1u64, ServerAddr::default())]),
        );
        let responses = apply(
            &mut sm,
            vec![
                entry(1, 1, EntryPayload::Blank),
                entry(1, 2, EntryPayload::Membership(membership)),
                command_entry(3, register_node(&node(1))),
                command_entry(4, register(&job, Some(eval_for(&job, 1)))),
                command_entry(
                    5,
                    place(
                        &eval_id(1),
                        vec![alloc(0, &job, &node_id(1), &eval_id(1), 0)],
                    ),
                ),
            ],
        )
        .await;
        assert_eq!(responses.len(), 5);
        assert_eq!(state.latest_index(), 5);
        let first = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert_eq!(first.meta.last_log_id, Some(log_id(1, 5)));
        apply(&mut sm, vec![command_entry(6, register_node(&node(2)))]).await;
        let second = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert_ne!(first.meta.snapshot_id, second.meta.snapshot_id);
        let current = sm.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(current.meta, second.meta);
        current_id = current.meta.snapshot_id.clone();
        image_before = state.snapshot().encode_image().unwrap();
        assert_eq!(current.snapshot.into_inner(), image_before);
        // Only the newest snapshot file is kept; leftovers of a crash are cleaned at start-up.
        let files: Vec<_> = std::fs::read_dir(sm.snapshot_dir()).unwrap().collect();
        assert_eq!(files.len(), 1);
        std::fs::write(
            sm.snapshot_dir().join("snapshot-00000000000000000099.tmp"),
            b"half",
        )
        .unwrap();
    }
    let state = StateStore::new();
    let (_, mut sm) = open(dir.path(), state.clone(), &StorageConfig::default()).unwrap();
    let (applied, membership) = sm.applied_state().await.unwrap();
    assert_eq!(applied, Some(log_id(1, 6)));
    assert_eq!(membership.log_id(), &Some(log_id(1, 2)));
    assert_eq!(state.latest_index(), 6);
    assert_eq!(state.snapshot().encode_image().unwrap(), image_before);
    assert_eq!(state.snapshot().alloc_count(), 1);
    let files: Vec<_> = std::fs::read_dir(sm.snapshot_dir()).unwrap().collect();
    assert_eq!(files.len(), 1, "the unfinished file was removed");
    let third = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    assert_eq!(third.meta.last_log_id, Some(log_id(1, 6)));
    assert_ne!(
        third.meta.snapshot_id, current_id,
        "ids stay unique across restarts"
    );
}

#[tokio::test]
async fn install_snapshot_replaces_the_whole_state() {
    let leader_dir = tempfile::tempdir().unwrap();
    let follower_dir = tempfile::tempdir().unwrap();
    let (_, mut leader) = open(
        leader_dir.path(),
        StateStore::new(),
        &StorageConfig::default(),
    )
    .unwrap();
    let job = job("moved", 1);
    apply(
        &mut leader,
        vec![
            command_entry(1, register_node(&node(1))),
            command_entry(2, register(&job, Some(eval_for(&job, 1)))),
        ],
    )
    .await;
    let snapshot = leader
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();

    let follower_state = StateStore::new();
    let (_, mut follower) = open(
        follower_dir.path(),
        follower_state.clone(),
        &StorageConfig::default(),
    )
    .unwrap();
    apply(
        &mut follower,
        vec![command_entry(1, register_node(&node(9)))],
    )
    .await;
    let mut sub = follower_state.subscribe();
    let mut data = follower.begin_receiving_snapshot().await.unwrap();
    *data = *snapshot.snapshot;
    follower
        .install_snapshot(&snapshot.meta, data)
        .await
        .unwrap();
    let snap = follower_state.snapshot();
    assert!(
        snap.node_by_id(&node_id(9)).is_none(),
        "install replaces, it does not merge"
    );
    assert!(snap.node_by_id(&node_id(1)).is_some());
    assert_eq!(snap.latest_index(), 2);
    assert_eq!(
        follower.applied_state().await.unwrap().0,
        Some(log_id(1, 2))
    );
    assert_eq!(
        sub.try_recv().unwrap().unwrap().change,
        teamster_storage::state::StateChange::Restored
    );
    // A garbage snapshot is refused and changes nothing.
    let mut bad = follower.begin_receiving_snapshot().await.unwrap();
    *bad = Cursor::new(b"not an image".to_vec());
    let mut meta = snapshot.meta.clone();
    meta.last_log_id = Some(log_id(2, 10));
    assert!(follower.install_snapshot(&meta, bad).await.is_err());
    assert_eq!(follower_state.latest_index(), 2);
    assert_eq!(
        follower.applied_state().await.unwrap().0,
        Some(log_id(1, 2))
    );
}

#[tokio::test]
async fn a_slow_build_never_replaces_a_newer_installed_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    let (_, mut sm) = open(dir.path(), StateStore::new(), &StorageConfig::default()).unwrap();
    apply(&mut sm, vec![command_entry(1, register_node(&node(1)))]).await;
    // A build captured at index 1 ...
    let mut slow = sm.get_snapshot_builder().await;
    // ... while a snapshot at index 3 arrives from the leader and is installed.
    let (_, mut leader) = open(
        other_dir.path(),
        StateStore::new(),
        &StorageConfig::default(),
    )
    .unwrap();
    apply(
        &mut leader,
        (1..=3)
            .map(|i| command_entry(i, register_node(&node(i))))
            .collect(),
    )
    .await;
    let newer = leader
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    let mut data = sm.begin_receiving_snapshot().await.unwrap();
    *data = *newer.snapshot;
    sm.install_snapshot(&newer.meta, data).await.unwrap();
    // The slow build finishes last: it is returned, but the installed one stays current.
    let built = slow.build_snapshot().await.unwrap();
    assert_eq!(built.meta.last_log_id, Some(log_id(1, 1)));
    let current = sm.get_current_snapshot().await.unwrap().unwrap();
    assert_eq!(current.meta, newer.meta);
    let files: Vec<_> = std::fs::read_dir(sm.snapshot_dir()).unwrap().collect();
    assert_eq!(files.len(), 1);
    // And a restart loads the installed one.
    drop(sm);
    let state = StateStore::new();
    let (_, mut sm) = open(dir.path(), state.clone(), &StorageConfig::default()).unwrap();
    assert_eq!(sm.applied_state().await.unwrap().0, Some(log_id(1, 3)));
    assert_eq!(state.snapshot().node_count(), 3);
}

#[test]
fn a_corrupt_snapshot_file_is_a_typed_error_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("snapshots")).unwrap();
    std::fs::write(
        dir.path()
            .join("snapshots/snapshot-00000000000000000001.bin"),
        b"TMSTSNAP\x01\x00\x00\x00\xff\xff\xff\x7fgarbage",
    )
    .unwrap();
    let err = open(dir.path(), StateStore::new(), &StorageConfig::default()).unwrap_err();
    assert!(
        matches!(err, OpenError::Snapshots(SnapshotStoreError::Format { .. })),
        "{err}"
    );
}

/// A network for a one-server cluster: there is never anyone to talk to.
#[derive(Clone)]
struct NoPeers;

impl RaftNetworkFactory<TypeConfig> for NoPeers {
    type Network = NoPeers;
    async fn new_client(&mut self, _target: u64, _node: &ServerAddr) -> NoPeers {
        NoPeers
    }
}

fn unreachable<E: std::error::Error>() -> RPCError<u64, ServerAddr, E> {
    RPCError::Unreachable(Unreachable::new(&std::io::Error::other(
        "single-server test cluster",
    )))
}

impl RaftNetwork<TypeConfig> for NoPeers {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, ServerAddr, RaftError<u64>>> {
        Err(unreachable())
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, ServerAddr, RaftError<u64, InstallSnapshotError>>,
    > {
        Err(unreachable())
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<u64>,
        _option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, ServerAddr, RaftError<u64>>> {
        Err(unreachable())
    }
}

/// Every table's index and rows, without the applied index.
fn content(snap: &teamster_storage::state::Snapshot) -> String {
    use teamster_storage::state::Table;
    let indexes: Vec<u64> = Table::ALL.iter().map(|t| snap.table_index(*t)).collect();
    format!(
        "{indexes:?}\n{}\n{}\n{}\n{}\n{}",
        serde_json::to_string(&snap.jobs().collect::<Vec<_>>()).unwrap(),
        serde_json::to_string(&snap.nodes().collect::<Vec<_>>()).unwrap(),
        serde_json::to_string(&snap.evals().collect::<Vec<_>>()).unwrap(),
        serde_json::to_string(&snap.allocs().collect::<Vec<_>>()).unwrap(),
        serde_json::to_string(&snap.job_summaries().collect::<Vec<_>>()).unwrap(),
    )
}

async fn start(dir: &std::path::Path, state: StateStore) -> teamster_storage::raft_types::Raft {
    let config = openraft::Config {
        heartbeat_interval: 100,
        election_timeout_min: 300,
        election_timeout_max: 600,
        snapshot_policy: openraft::SnapshotPolicy::Never,
        ..openraft::Config::default()
    };
    let (log, sm) = open(dir, state, &StorageConfig::default()).unwrap();
    openraft::Raft::new(1, Arc::new(config.validate().unwrap()), NoPeers, log, sm)
        .await
        .unwrap()
}

/// End to end with openraft: writes through a one-server raft, a snapshot, more writes, a
/// restart: the state comes back from the snapshot plus the replayed log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_server_raft_recovers_its_state_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let deadline = Some(Duration::from_secs(20));
    let state = StateStore::new();
    let raft = start(dir.path(), state.clone()).await;
    raft.initialize(BTreeMap::from([(
        1u64,
        ServerAddr {
            name: "s1".into(),
            rpc_addr: "127.0.0.1:4647".into(),
            http_addr: "127.0.0.1:4646".into(),
        },
    )]))
    .await
    .unwrap();
    raft.wait(deadline)
        .current_leader(1, "leader")
        .await
        .unwrap();
    let job = job("durable", 2);
    let mut commands = vec![
        register_node(&node(1)),
        register(&job, Some(eval_for(&job, 1))),
    ];
    commands.push(place(
        &eval_id(1),
        vec![
            alloc(0, &job, &node_id(1), &eval_id(1), 0),
            alloc(1, &job, &node_id(1), &eval_id(1), 1),
        ],
    ));
    let mut last = None;
    for command in commands {
        let written = raft.client_write(command.into()).await.unwrap();
        assert!(written.data.rejection().is_none(), "{:?}", written.data);
        last = Some(written.log_id.index);
    }
    raft.trigger().snapshot().await.unwrap();
    raft.wait(deadline)
        .metrics(|m| m.snapshot.map(|s| s.index) >= last, "snapshot")
        .await
        .unwrap();
    let snapshot_index = last.unwrap();
    // After the snapshot: a batch whose second command is rejected.
    let written = raft
        .client_write(
            Command::Batch(vec![
                client_update(&alloc_id(0), teamster_storage::model::ClientStatus::Running),
                register_node(&teamster_storage::model::Node::default()),
            ])
            .into(),
        )
        .await
        .unwrap();
    let CommandResponse::Batch(responses) = written.data else {
        panic!("batch expected");
    };
    assert!(responses[1].rejection().is_some());
    let expected = content(&state.snapshot());
    let last_index = state.latest_index();
    assert!(last_index > snapshot_index);
    raft.shutdown().await.unwrap();
    drop(raft);

    let restarted = StateStore::new();
    let raft = start(dir.path(), restarted.clone()).await;
    raft.wait(deadline)
        .applied_index_at_least(Some(last_index), "replayed")
        .await
        .unwrap();
    let snap = restarted
        .snapshot_min_index(last_index, Duration::from_secs(20))
        .await
        .unwrap();
    // The new term's blank entry may have moved the applied index, nothing else.
    assert_eq!(content(&snap), expected);
    assert_eq!(
        snap.alloc_by_id(&alloc_id(0)).unwrap().client_status,
        teamster_storage::model::ClientStatus::Running
    );
    raft.shutdown().await.unwrap();
}
