//! The in-memory state store: every table the cluster replicates, on `imbl` persistent maps.
//!
//! ```text
//!             apply(index, Command) ──▶ WriteTxn over a clone of the tables ──commit──┐
//!  state machine (one writer)                                                          │
//!             advance_index(index) ──────────────────────────────────────────────────┤
//!                                                                                      ▼
//!   published Arc<Tables> ◀── snapshot() (O(1))         watch<Progress> ──▶ snapshot_min_index,
//!   events (broadcast)    ──▶ subscribe()                                   wait_tables
//! ```
//!
//! - **Tables** (see [`Table`]): jobs with their kept versions (periodic and dispatched
//!   children indexed by parent, dispatched ones also by idempotency token), job summaries,
//!   nodes, evaluations (indexed by job), allocations (indexed by job, node and eval), the
//!   scheduler configuration, the cluster metadata and the periodic parents' last launches,
//!   each with the raft index of its last change.
//! - **Snapshots** ([`Snapshot`]) are one `Arc` clone and never see later writes.
//! - **Waiting**: the latest applied index and per-table indexes are published through a
//!   `tokio::sync::watch`. [`StateStore::snapshot_min_index`] and the blocking-query
//!   primitive [`StateStore::wait_tables`] await it (no polling) with a timeout.
//! - **Events**: [`StateStore::subscribe`] yields the ordered stream of applied changes
//!   ([`StateEvent`]) for leader-only subsystems; publishing never blocks the writer.
//! - **Images**: [`Snapshot::encode_image`] / [`StateStore::restore_image`] carry the whole
//!   state (bincode, with a format version) for raft snapshots; restore replaces everything.
//!
//! The handle is cheap to clone and shared by readers (HTTP, workers, leader subsystems) and
//! the one writer (the raft state machine); writes are serialized by a mutex.

mod apply;
pub(crate) mod events;
pub(crate) mod image;
mod snapshot;
pub(crate) mod tables;
pub(crate) mod txn;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use tokio::sync::{broadcast, watch, Notify};

pub use events::{NodeCondition, StateChange, StateEvent, Subscription, SubscriptionError};
pub use image::IMAGE_FORMAT_VERSION;
pub use snapshot::{NodeAllocIds, NodesVersion, Snapshot};
pub use tables::Table;
pub use txn::JOB_TRACKED_VERSIONS;

use crate::fsm::{Command, CommandResponse};
use crate::model::NodeId;
use tables::Tables;

/// Settings of one server's state store (none of them affect what is replicated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateStoreConfig {
    /// Events buffered for subscribers before the slowest one starts missing some.
    pub event_buffer: usize,
}

impl Default for StateStoreConfig {
    fn default() -> Self {
        Self {
            event_buffer: 16 * 1024,
        }
    }
}

impl StateStoreConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), StateError> {
        if self.event_buffer == 0 || self.event_buffer > 1 << 24 {
            return Err(StateError::Config(format!(
                "event_buffer must be within 1..={}, not {}",
                1 << 24,
                self.event_buffer
            )));
        }
        Ok(())
    }
}

/// Errors of the state store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// The applied index did not reach the wanted one in time (Nomad's
    /// `ErrMinIndexDeadlineExceeded`).
    #[error("timed out after {timeout:?} waiting for index={index} (latest {latest})")]
    MinIndexTimeout {
        /// The index waited for.
        index: u64,
        /// The latest applied index when the wait gave up.
        latest: u64,
        /// How long it waited.
        timeout: Duration,
    },
    /// The store was closed (the server is shutting down).
    #[error("the state store is closed")]
    Closed,
    /// The bytes are not a state image.
    #[error("not a state image (bad magic bytes)")]
    ImageMagic,
    /// The image was written by a format this build does not read.
    #[error("state image format version {found} is not supported (this build reads {supported})")]
    ImageVersion {
        /// The image's version.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// Encoding an image failed.
    #[error("state image could not be encoded: {0}")]
    ImageEncode(String),
    /// The image is malformed, truncated or inconsistent.
    #[error("state image is corrupt: {0}")]
    ImageDecode(String),
    /// A setting is out of range.
    #[error("invalid state store config: {0}")]
    Config(String),
}

/// What waiters watch: the applied index and each table's index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Progress {
    index: u64,
    tables: [u64; Table::COUNT],
    closed: bool,
}

/// What readers take: the latest tables and the event channel, swapped together so a
/// subscriber can start exactly at a snapshot.
struct Published {
    tables: Arc<Tables>,
    events: Option<broadcast::Sender<StateEvent>>,
}

/// The writer's side.
struct Writer {
    tables: Tables,
    next_seq: u64,
}

struct Inner {
    writer: Mutex<Writer>,
    published: RwLock<Published>,
    progress: watch::Sender<Progress>,
    /// Per node with a waiting allocation query: woken when the servers change that node's
    /// allocations (see [`StateStore::wait_node_allocs`]). Entries go when their last
    /// waiter does.
    node_waiters: Mutex<HashMap<NodeId, Arc<Notify>>>,
}

/// The state store handle: clone it freely.
#[derive(Clone)]
pub struct StateStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore")
            .field("latest_index", &self.latest_index())
            .finish()
    }
}

impl Default for StateStore {
    fn default() -> Self {
        Self::new()
    }
}

impl StateStore {
    /// An empty store at index 0 with the default settings.
    pub fn new() -> Self {
        Self::build(&StateStoreConfig::default())
    }

    /// An empty store at index 0.
    pub fn with_config(config: &StateStoreConfig) -> Result<Self, StateError> {
        config.validate()?;
        Ok(Self::build(config))
    }

    fn build(config: &StateStoreConfig) -> Self {
        let (events, _) = broadcast::channel(config.event_buffer);
        let tables = Tables::default();
        let (progress, _) = watch::channel(Progress {
            index: 0,
            tables: tables.table_index,
            closed: false,
        });
        Self {
            inner: Arc::new(Inner {
                published: RwLock::new(Published {
                    tables: Arc::new(tables.clone()),
                    events: Some(events),
                }),
                writer: Mutex::new(Writer {
                    tables,
                    next_seq: 1,
                }),
                progress,
                node_waiters: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Applies one normal raft entry's command at `index` (a [`Command::Batch`] in order)
    /// and publishes the result. The entry point of the state machine, with
    /// [`StateStore::apply_shared`].
    pub fn apply(&self, index: u64, command: Command) -> CommandResponse {
        self.apply_with(index, |tables, changes| {
            apply::apply(tables, index, command, changes)
        })
    }

    /// [`StateStore::apply`] for a command the raft log still shares: a batch's commands
    /// are cloned one at a time as they are applied, never the whole batch at once.
    pub fn apply_shared(&self, index: u64, command: &Command) -> CommandResponse {
        self.apply_with(index, |tables, changes| {
            apply::apply_shared(tables, index, command, changes)
        })
    }

    /// Runs `apply` on the writer's tables at `index` and publishes what it changed.
    fn apply_with(
        &self,
        index: u64,
        apply: impl FnOnce(&mut Tables, &mut Vec<StateChange>) -> CommandResponse,
    ) -> CommandResponse {
        let _span = tracing::trace_span!("state_apply", index).entered();
        let mut writer = self.lock_writer();
        let mut changes = Vec::new();
        let response = apply(&mut writer.tables, &mut changes);
        writer.tables.index = index;
        self.publish(&mut writer, index, changes);
        response
    }

    /// Moves the applied index without changing a table (blank and membership entries), so
    /// waiters on that index wake.
    pub fn advance_index(&self, index: u64) {
        let mut writer = self.lock_writer();
        writer.tables.index = index;
        self.publish(&mut writer, index, Vec::new());
    }

    /// A consistent, read-only view of the latest applied state (O(1)).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::new(self.read_published().tables.clone())
    }

    /// The raft index of the last applied entry.
    pub fn latest_index(&self) -> u64 {
        self.inner.progress.borrow().index
    }

    /// A snapshot at or after `index`: at once if the store is there, else as soon as it
    /// gets there. Fails with [`StateError::MinIndexTimeout`] after `timeout`, or
    /// [`StateError::Closed`] if the store closes before reaching `index`.
    pub async fn snapshot_min_index(
        &self,
        index: u64,
        timeout: Duration,
    ) -> Result<Snapshot, StateError> {
        let mut rx = self.inner.progress.subscribe();
        let waited = tokio::time::timeout(timeout, async {
            rx.wait_for(|p| p.index >= index || p.closed)
                .await
                .map(|p| p.index < index)
        })
        .await;
        match waited {
            Err(_) => Err(StateError::MinIndexTimeout {
                index,
                latest: self.latest_index(),
                timeout,
            }),
            Ok(Err(_)) | Ok(Ok(true)) => Err(StateError::Closed),
            Ok(Ok(false)) => Ok(self.snapshot()),
        }
    }

    /// The blocking-query primitive: waits until any of `tables` changed after
    /// `min_index` (Nomad's `?index=N`), or until `timeout`. Returns the snapshot to answer
    /// from either way; [`BlockingResult::timed_out`] says which. `min_index` 0 returns at
    /// once. Fails only if the store closes.
    pub async fn wait_tables(
        &self,
        tables: &[Table],
        min_index: u64,
        timeout: Duration,
    ) -> Result<BlockingResult, StateError> {
        let passed = |p: &Progress| tables.iter().any(|t| p.tables[t.slot()] > min_index);
        let mut rx = self.inner.progress.subscribe();
        let timed_out = if min_index == 0 {
            false
        } else {
            let waited = tokio::time::timeout(timeout, async {
                rx.wait_for(|p| passed(p) || p.closed)
                    .await
                    .map(|p| p.closed)
            })
            .await;
            match waited {
                Err(_) => true,
                Ok(Err(_)) | Ok(Ok(true)) => return Err(StateError::Closed),
                Ok(Ok(false)) => false,
            }
        };
        let snapshot = self.snapshot();
        let index = snapshot.max_index(tables);
        Ok(BlockingResult {
            snapshot,
            index,
            timed_out,
        })
    }

    /// Subscribes to the change stream from now on.
    pub fn subscribe(&self) -> Subscription {
        self.subscribe_with_snapshot().1
    }

    /// A snapshot and a subscription that start together: the subscription yields exactly
    /// the changes applied after the snapshot's index.
    pub fn subscribe_with_snapshot(&self) -> (Snapshot, Subscription) {
        let published = self.read_published();
        let rx = match &published.events {
            Some(tx) => tx.subscribe(),
            None => {
                // Closed: hand out a subscription whose first `recv` reports it.
                let (tx, rx) = broadcast::channel(1);
                drop(tx);
                rx
            }
        };
        (
            Snapshot::new(published.tables.clone()),
            Subscription::new(rx),
        )
    }

    /// Replaces the whole state with a decoded image (a raft snapshot) and publishes it:
    /// the index becomes the image's, waiters wake, subscribers get
    /// [`StateChange::Restored`]. Returns the image's index.
    #[tracing::instrument(level = "info", skip_all, fields(bytes = image.len()))]
    pub fn restore_image(&self, image: &[u8]) -> Result<u64, StateError> {
        let tables = image::decode(image)?;
        let index = tables.index;
        let mut writer = self.lock_writer();
        writer.tables = tables;
        self.publish(&mut writer, index, vec![StateChange::Restored]);
        tracing::info!(index, "state restored from a snapshot image");
        Ok(index)
    }

    /// Closes the store: waiters fail with [`StateError::Closed`], subscribers get
    /// [`SubscriptionError::Closed`]. Reads keep working.
    pub fn close(&self) {
        let mut published = self
            .inner
            .published
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        published.events = None;
        drop(published);
        self.inner.progress.send_modify(|p| p.closed = true);
        self.wake_nodes(None);
    }

    /// A client's blocking query on its node's allocations: answers at once when `ready`
    /// holds on the latest state; else once the servers changed that node's allocations
    /// ([`StateChange::NodeAllocsChanged`]: placed, stopped or removed ones) or the whole
    /// state was restored, and the state is past `min_index` (a server that lags behind the
    /// one the client last asked keeps waiting rather than answer from an older state);
    /// else after `timeout`. Thousands of clients can wait at once without every write
    /// waking them all. Returns the snapshot to answer from (its `index` is the allocs
    /// table's); fails only if the store closes.
    pub async fn wait_node_allocs(
        &self,
        node_id: &NodeId,
        min_index: u64,
        timeout: Duration,
        ready: impl Fn(&Snapshot) -> bool,
    ) -> Result<BlockingResult, StateError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let answer = |snapshot: Snapshot, timed_out| {
            let index = snapshot.max_index(&[Table::Allocs]);
            BlockingResult {
                snapshot,
                index,
                timed_out,
            }
        };
        let waiter = NodeWaiter::new(self, node_id);
        let mut woken = false;
        loop {
            // Registered before looking, so a change published in between still wakes us.
            let notified = waiter.notify().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.inner.progress.borrow().closed {
                return Err(StateError::Closed);
            }
            {
                // Not held across the wait (it would pin old versions of the tables). A
                // wake past `min_index` answers without asking `ready`: it may be a removal
                // or a restore, which `ready` need not see.
                let snapshot = self.snapshot();
                if (woken && snapshot.latest_index() > min_index) || ready(&snapshot) {
                    return Ok(answer(snapshot, false));
                }
            }
            match tokio::time::timeout_at(deadline, notified).await {
                Ok(()) => woken = true,
                Err(_) => {
                    if self.inner.progress.borrow().closed {
                        return Err(StateError::Closed);
                    }
                    return Ok(answer(self.snapshot(), true));
                }
            }
        }
    }

    /// Wake the allocation queries of `nodes` (every one for `None`).
    fn wake_nodes(&self, nodes: Option<&[NodeId]>) {
        let waiters = self
            .inner
            .node_waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match nodes {
            None => waiters.values().for_each(|n| n.notify_waiters()),
            Some(nodes) => {
                for id in nodes {
                    if let Some(n) = waiters.get(id) {
                        n.notify_waiters();
                    }
                }
            }
        }
    }

    fn lock_writer(&self) -> std::sync::MutexGuard<'_, Writer> {
        // A panic while applying leaves the committed tables intact (writes happen on a
        // transaction copy), so a poisoned lock is safe to take over.
        self.inner
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn read_published(&self) -> std::sync::RwLockReadGuard<'_, Published> {
        self.inner
            .published
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn publish(&self, writer: &mut Writer, index: u64, changes: Vec<StateChange>) {
        let mut restored = false;
        let mut alloc_nodes: Vec<NodeId> = Vec::new();
        for change in &changes {
            match change {
                StateChange::Restored => restored = true,
                StateChange::NodeAllocsChanged { node_ids } => {
                    alloc_nodes.extend(node_ids.iter().cloned())
                }
                _ => {}
            }
        }
        let tables = Arc::new(writer.tables.clone());
        let table_index = tables.table_index;
        let replaced = {
            let mut published = self
                .inner
                .published
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            let replaced = std::mem::replace(&mut published.tables, tables);
            for change in changes {
                let event = StateEvent {
                    seq: writer.next_seq,
                    index,
                    change,
                };
                writer.next_seq += 1;
                if let Some(tx) = &published.events {
                    // No subscribers is fine; a full buffer drops the oldest for laggards.
                    let _ = tx.send(event);
                }
            }
            replaced
        };
        self.inner.progress.send_modify(|p| {
            p.index = index;
            p.tables = table_index;
        });
        if restored {
            self.wake_nodes(None);
        } else if !alloc_nodes.is_empty() {
            self.wake_nodes(Some(&alloc_nodes));
        }
        // Freeing the nodes only the previous version used happens outside the lock, so
        // readers taking snapshots never wait for it.
        drop(replaced);
    }
}

impl Snapshot {
    /// Encodes the whole state as an image (bincode, with a format-version header) for a
    /// raft snapshot. CPU-heavy for large states: call it off the async threads.
    pub fn encode_image(&self) -> Result<Vec<u8>, StateError> {
        image::encode(&self.tables)
    }
}

/// One waiter's registration in [`Inner::node_waiters`]; the entry goes with the node's
/// last waiter.
struct NodeWaiter<'a> {
    store: &'a StateStore,
    node_id: &'a NodeId,
    /// Always `Some` until dropped (taken under the lock so the count check is exact).
    notify: Option<Arc<Notify>>,
}

impl<'a> NodeWaiter<'a> {
    fn new(store: &'a StateStore, node_id: &'a NodeId) -> Self {
        let notify = store
            .inner
            .node_waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(node_id.clone())
            .or_default()
            .clone();
        NodeWaiter {
            store,
            node_id,
            notify: Some(notify),
        }
    }

    fn notify(&self) -> &Notify {
        self.notify.as_deref().expect("present until dropped")
    }
}

impl Drop for NodeWaiter<'_> {
    fn drop(&mut self) {
        let mut waiters = self
            .store
            .inner
            .node_waiters
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Our reference goes under the lock, where every clone is made: one left is the
        // map's own, and no other waiter holds the entry.
        drop(self.notify.take());
        if waiters
            .get(self.node_id)
            .is_some_and(|n| Arc::strong_count(n) == 1)
        {
            waiters.remove(self.node_id);
        }
    }
}

/// What [`StateStore::wait_tables`] found.
#[derive(Debug, Clone)]
pub struct BlockingResult {
    /// The state to answer from.
    pub snapshot: Snapshot,
    /// The highest index of the waited tables in that state (`X-Nomad-Index`).
    pub index: u64,
    /// True when the wait ended by timeout (the data may be unchanged; legal in Nomad).
    pub timed_out: bool,
}

#[cfg(test)]
mod tests {

    #[test]
    fn variables_are_written_and_deleted_with_check_and_set() {
        use crate::fsm::{ApplyError, VariableDelete, VariableUpsert};
        use crate::model::{VariableEncrypted, VariableMetadata};
        let store = StateStore::new();
        let mut key = crate::model::RootKey::default();
        key.meta.key_id = "k".into();
        store.apply(
            1,
            Command::RootKeyUpsert(crate::fsm::RootKeyUpsert {
                key,
                activate: true,
            }),
        );
        let var = |items: &[u8]| VariableEncrypted {
            meta: VariableMetadata {
                namespace: "default".into(),
                path: "app/db".into(),
                ..VariableMetadata::default()
            },
            data: crate::model::VariableData {
                key_id: "k".into(),
                nonce: vec![0; 12],
                ciphertext: items.to_vec(),
            },
        };
        let put = |index, cas, items: &[u8]| {
            store
                .apply(
                    index,
                    Command::VariableUpsert(VariableUpsert {
                        var: var(items),
                        cas,
                        now: index as i64,
                        lock_id: None,
                        acquire: None,
                        keep_items: false,
                    }),
                )
                .rejection()
                .cloned()
        };
        assert_eq!(put(5, Some(0), b"a"), None, "cas 0 creates");
        assert!(matches!(
            put(6, Some(0), b"b"),
            Some(ApplyError::VariableConflict {
                modify_index: 5,
                ..
            })
        ));
        assert_eq!(put(7, Some(5), b"c"), None);
        let snap = store.snapshot();
        let v = snap.variable("default", "app/db").unwrap();
        assert_eq!((v.meta.create_index, v.meta.modify_index), (5, 7));
        assert_eq!(v.data.ciphertext, b"c");
        assert_eq!(snap.variables(Some("default"), "app/").count(), 1);
        assert_eq!(snap.variables(Some("other"), "").count(), 0);
        assert_eq!(snap.variables(None, "zzz").count(), 0);
        let delete = |index, cas| {
            store
                .apply(
                    index,
                    Command::VariableDelete(VariableDelete {
                        namespace: "default".into(),
                        path: "app/db".into(),
                        cas,
                    }),
                )
                .rejection()
                .cloned()
        };
        assert!(
            delete(8, Some(5)).is_some(),
            "a stale index deletes nothing"
        );
        assert!(store.snapshot().variable("default", "app/db").is_some());
        assert_eq!(delete(9, Some(7)), None);
        assert!(store.snapshot().variable("default", "app/db").is_none());
        assert_eq!(delete(10, None), None, "deleting nothing is fine");
        let bad = VariableEncrypted {
            meta: VariableMetadata {
                namespace: "default".into(),
                path: "nomad/other".into(),
                ..VariableMetadata::default()
            },
            ..VariableEncrypted::default()
        };
        assert!(store
            .apply(
                11,
                Command::VariableUpsert(VariableUpsert {
                    var: bad,
                    cas: None,
                    now: 0,
                    lock_id: None,
                    acquire: None,
                    keep_items: false,
                })
            )
            .rejection()
            .is_some());

        // Locks: only the holder writes; nobody deletes; release by ID only.
        use crate::fsm::VariableLockRelease;
        let lock = crate::model::VariableLock {
            id: "L1".into(),
            ttl: crate::model::DEFAULT_LOCK_TTL,
            lock_delay: crate::model::DEFAULT_LOCK_DELAY,
        };
        let write =
            |index: u64, lock_id: Option<&str>, acquire: Option<&crate::model::VariableLock>| {
                store
                    .apply(
                        index,
                        Command::VariableUpsert(VariableUpsert {
                            var: var(b"x"),
                            cas: None,
                            now: index as i64,
                            lock_id: lock_id.map(String::from),
                            acquire: acquire.cloned(),
                            keep_items: false,
                        }),
                    )
                    .rejection()
                    .cloned()
            };
        let refused = |r: Option<ApplyError>, text: &str| match r {
            Some(ApplyError::VariableLockRefused { reason, .. }) => assert_eq!(reason, text),
            other => panic!("expected {text:?}, got {other:?}"),
        };
        assert_eq!(write(20, Some("L1"), Some(&lock)), None, "acquire creates");
        let held = store
            .snapshot()
            .variable("default", "app/db")
            .unwrap()
            .meta
            .lock
            .clone();
        assert_eq!(held.as_ref().map(|l| l.id.as_str()), Some("L1"));
        refused(
            write(21, None, None),
            "attempting to modify locked variable",
        );
        refused(
            write(
                22,
                Some("L2"),
                Some(&crate::model::VariableLock {
                    id: "L2".into(),
                    ..lock.clone()
                }),
            ),
            "variable already locked",
        );
        // Not even with its own ID: a held lock's parameters never change.
        refused(
            write(22, Some("L1"), Some(&lock)),
            "variable already locked",
        );
        assert_eq!(write(23, Some("L1"), None), None, "the holder writes");
        assert!(store
            .snapshot()
            .variable("default", "app/db")
            .unwrap()
            .meta
            .lock
            .is_some());
        refused(delete(24, None), "attempting to modify locked variable");
        let release = |index, id: &str, path: &str| {
            store
                .apply(
                    index,
                    Command::VariableLockRelease(VariableLockRelease {
                        namespace: "default".into(),
                        path: path.into(),
                        lock_id: id.into(),
                    }),
                )
                .rejection()
                .cloned()
        };
        refused(
            release(25, "L2", "app/db"),
            "attempting to modify locked variable",
        );
        refused(release(26, "L1", "app/none"), "variable doesn't exist");
        assert_eq!(release(27, "L1", "app/db"), None);
        let v = store
            .snapshot()
            .variable("default", "app/db")
            .unwrap()
            .clone();
        assert!(v.meta.lock.is_none());
        assert_eq!(
            (v.meta.modify_index, v.data.ciphertext.as_slice()),
            (27, &b"x"[..])
        );
        refused(release(28, "L1", "app/db"), "variable doesn't hold a lock");
        assert_eq!(delete(29, None), None, "unlocked, it may go");
    }
    use super::*;

    fn shared_handle<T: Clone + Send + Sync + 'static>() {}

    #[test]
    fn handles_are_cheap_to_share_across_tasks() {
        shared_handle::<StateStore>();
        shared_handle::<Snapshot>();
    }

    #[test]
    fn config_is_validated() {
        StateStoreConfig::default().validate().unwrap();
        let zero = StateStoreConfig { event_buffer: 0 };
        assert!(matches!(
            StateStore::with_config(&zero),
            Err(StateError::Config(_))
        ));
    }

    #[tokio::test]
    async fn a_reached_index_is_served_even_after_close() {
        let store = StateStore::new();
        store.advance_index(3);
        store.close();
        let snap = store
            .snapshot_min_index(3, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(snap.latest_index(), 3);
        assert_eq!(
            store
                .snapshot_min_index(4, Duration::from_secs(1))
                .await
                .unwrap_err(),
            StateError::Closed
        );
    }
}
