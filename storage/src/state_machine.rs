//! The openraft state machine over the in-memory [`StateStore`], with durable snapshots.
//!
//! The state machine is in memory; durability comes from snapshot files plus the raft log
//! (openraft's "persistent snapshot" model): every snapshot built or installed is written to
//! `<dir>/snapshots/` before it is reported, and at start-up the newest one is loaded into
//! the state store, so openraft replays only the log after it (up to the committed index the
//! log store saved).
//!
//! ```text
//!  snapshot-<seq, 20 digits>.bin = "TMSTSNAP" | format u32 LE | meta length u32 LE
//!                                  | bincode(SnapshotMeta) | state image (see crate::state)
//! ```
//!
//! Files are written as `.tmp`, fsynced, renamed, and the directory fsynced; then older
//! snapshots are removed. A snapshot is only made current if it is newer (by last log id)
//! than the current one, so a slow build never replaces a snapshot installed meanwhile.
//! The snapshot data openraft ships between servers is the state image alone.

use std::fs::{self, File};
use std::io::{self, Cursor, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{EntryPayload, RaftSnapshotBuilder, SnapshotMeta, StorageIOError};

use crate::codec;
use crate::fsm::CommandResponse;
use crate::raft_types::{
    Entry, LogId, ServerAddr, ServerId, StorageError, StoredMembership, TypeConfig,
};
use crate::state::{StateError, StateStore};

const SNAPSHOT_DIR: &str = "snapshots";
const MAGIC: &[u8; 8] = b"TMSTSNAP";
/// The snapshot file format this build writes and reads.
pub const SNAPSHOT_FILE_VERSION: u32 = 1;
const HEADER_LEN: usize = MAGIC.len() + 4 + 4;
/// Decode budget for the snapshot metadata (a membership of a few servers).
const META_DECODE_LIMIT: usize = 1 << 20;

/// The snapshot metadata with our types.
pub type Meta = SnapshotMeta<ServerId, ServerAddr>;

/// Errors of the snapshot store (mapped to openraft's `StorageError` at the trait boundary).
#[derive(Debug, thiserror::Error)]
pub enum SnapshotStoreError {
    /// A file operation failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// On which path.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// A snapshot file is malformed.
    #[error("snapshot file {path} is malformed: {reason}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The state image inside could not be encoded or restored.
    #[error(transparent)]
    State(#[from] StateError),
    /// A blocking task failed to complete.
    #[error("snapshot task failed: {0}")]
    Task(String),
}

fn io_err<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> SnapshotStoreError + 'a {
    move |source| SnapshotStoreError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// The snapshot currently reported to openraft.
#[derive(Clone)]
struct Current {
    meta: Meta,
    path: PathBuf,
}

/// The snapshot directory, shared by the state machine and its builders.
struct SnapshotFiles {
    dir: PathBuf,
    current: Mutex<Option<Current>>,
    next_seq: AtomicU64,
    /// Distinguishes snapshot ids across restarts of this server.
    nonce: u64,
}

impl SnapshotFiles {
    fn path(&self, seq: u64, ext: &str) -> PathBuf {
        self.dir.join(format!("snapshot-{seq:020}.{ext}"))
    }

    fn current(&self) -> Option<Current> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Writes a snapshot durably and makes it current if it is the newest. Blocking.
    fn persist(&self, meta: &Meta, image: &[u8]) -> Result<(), SnapshotStoreError> {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let tmp = self.path(seq, "tmp");
        let path = self.path(seq, "bin");
        let meta_bytes = codec::encode(meta).map_err(|e| SnapshotStoreError::Format {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        let meta_len = u32::try_from(meta_bytes.len()).map_err(|_| SnapshotStoreError::Format {
            path: path.clone(),
            reason: "metadata over 4 GiB".to_owned(),
        })?;
        {
            let mut file = File::create(&tmp).map_err(io_err("creating", &tmp))?;
            let mut header = Vec::with_capacity(HEADER_LEN + meta_bytes.len());
            header.extend_from_slice(MAGIC);
            header.extend_from_slice(&SNAPSHOT_FILE_VERSION.to_le_bytes());
            header.extend_from_slice(&meta_len.to_le_bytes());
            header.extend_from_slice(&meta_bytes);
            file.write_all(&header).map_err(io_err("writing", &tmp))?;
            file.write_all(image).map_err(io_err("writing", &tmp))?;
            file.sync_all().map_err(io_err("syncing", &tmp))?;
        }
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(existing) = current.as_ref() {
            if existing.meta.last_log_id > meta.last_log_id {
                tracing::info!(
                    built = ?meta.last_log_id,
                    current = ?existing.meta.last_log_id,
                    "a newer snapshot is already current; dropping the one just written"
                );
                let _ = fs::remove_file(&tmp);
                return Ok(());
            }
        }
        fs::rename(&tmp, &path).map_err(io_err("renaming", &tmp))?;
        sync_dir(&self.dir)?;
        let previous = current.replace(Current {
            meta: meta.clone(),
            path: path.clone(),
        });
        drop(current);
        if let Some(previous) = previous {
            if previous.path != path {
                if let Err(e) = fs::remove_file(&previous.path) {
                    tracing::warn!(path = %previous.path.display(), error = %e, "could not remove an old snapshot");
                }
            }
        }
        tracing::info!(
            snapshot_id = %meta.snapshot_id,
            last_log_id = ?meta.last_log_id,
            bytes = image.len(),
            path = %path.display(),
            "snapshot persisted"
        );
        Ok(())
    }
}

fn sync_dir(dir: &Path) -> Result<(), SnapshotStoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_err("syncing directory", dir))
}

/// Reads a snapshot file's metadata, and its image if `with_image`.
fn read_snapshot_file(
    path: &Path,
    with_image: bool,
) -> Result<(Meta, Vec<u8>), SnapshotStoreError> {
    let malformed = |reason: String| SnapshotStoreError::Format {
        path: path.to_owned(),
        reason,
    };
    let mut file = File::open(path).map_err(io_err("opening", path))?;
    let mut header = [0u8; HEADER_LEN];
    file.read_exact(&mut header)
        .map_err(|e| malformed(format!("short header: {e}")))?;
    if &header[..MAGIC.len()] != MAGIC {
        return Err(malformed("bad magic bytes".to_owned()));
    }
    let version = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
    if version != SNAPSHOT_FILE_VERSION {
        return Err(malformed(format!(
            "file format {version}, this build reads {SNAPSHOT_FILE_VERSION}"
        )));
    }
    let meta_len = u32::from_le_bytes([header[12], header[13], header[14], header[15]]) as usize;
    if meta_len > META_DECODE_LIMIT {
        return Err(malformed(format!("metadata of {meta_len} bytes")));
    }
    let mut meta_bytes = vec![0u8; meta_len];
    file.read_exact(&mut meta_bytes)
        .map_err(|e| malformed(format!("short metadata: {e}")))?;
    let meta: Meta = codec::decode_exact::<Meta, META_DECODE_LIMIT>(&meta_bytes)
        .map_err(|e| malformed(format!("metadata: {e}")))?;
    let mut image = Vec::new();
    if with_image {
        file.read_to_end(&mut image)
            .map_err(io_err("reading", path))?;
    }
    Ok((meta, image))
}

fn storage_read(e: SnapshotStoreError) -> StorageError {
    StorageIOError::read_snapshot(None, &e).into()
}

fn storage_write(e: SnapshotStoreError) -> StorageError {
    StorageIOError::write_snapshot(None, &e).into()
}

/// Runs blocking work (encoding, file I/O) off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, SnapshotStoreError> + Send + 'static,
) -> Result<T, SnapshotStoreError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SnapshotStoreError::Task(e.to_string()))?
}

/// openraft's state machine over a [`StateStore`].
pub struct StateMachine {
    state: StateStore,
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
    files: Arc<SnapshotFiles>,
}

impl std::fmt::Debug for StateMachine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateMachine")
            .field("last_applied", &self.last_applied)
            .field("snapshot_dir", &self.files.dir)
            .finish()
    }
}

impl StateMachine {
    /// Opens the snapshot directory under `dir` and, if it holds a snapshot, loads the
    /// newest into `state` (replacing whatever it held). Leftover temporary files and older
    /// snapshots are removed. `nonce` (different at every start) goes into the ids of the
    /// snapshots it builds.
    #[tracing::instrument(level = "info", skip(state), fields(dir = %dir.display()))]
    pub fn open(dir: &Path, state: StateStore, nonce: u64) -> Result<Self, SnapshotStoreError> {
        let snapshot_dir = dir.join(SNAPSHOT_DIR);
        fs::create_dir_all(&snapshot_dir).map_err(io_err("creating", &snapshot_dir))?;
        let mut found: Vec<(u64, PathBuf)> = Vec::new();
        for entry in fs::read_dir(&snapshot_dir).map_err(io_err("listing", &snapshot_dir))? {
            let entry = entry.map_err(io_err("listing", &snapshot_dir))?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix("snapshot-") else {
                continue;
            };
            if rest.ends_with(".tmp") {
                tracing::info!(path = %path.display(), "removing an unfinished snapshot");
                fs::remove_file(&path).map_err(io_err("removing", &path))?;
            } else if let Some(seq) = rest.strip_suffix(".bin") {
                if let Ok(seq) = seq.parse::<u64>() {
                    found.push((seq, path));
                }
            }
        }
        // The newest by last log id wins (ties: the later file).
        let mut best: Option<(Meta, u64, PathBuf)> = None;
        for (seq, path) in &found {
            let (meta, _) = read_snapshot_file(path, false)?;
            let newer = best
                .as_ref()
                .is_none_or(|(m, s, _)| (meta.last_log_id, *seq) > (m.last_log_id, *s));
            if newer {
                best = Some((meta, *seq, path.clone()));
            }
        }
        let next_seq = found.iter().map(|(s, _)| s + 1).max().unwrap_or(0);
        let mut machine = Self {
            state,
            last_applied: None,
            last_membership: StoredMembership::default(),
            files: Arc::new(SnapshotFiles {
                dir: snapshot_dir.clone(),
                current: Mutex::new(None),
                next_seq: AtomicU64::new(next_seq),
                nonce,
            }),
        };
        if let Some((_, _, path)) = best {
            let (meta, image) = read_snapshot_file(&path, true)?;
            let index = machine.state.restore_image(&image)?;
            tracing::info!(
                snapshot_id = %meta.snapshot_id,
                last_log_id = ?meta.last_log_id,
                index,
                "loaded the latest snapshot"
            );
            machine.last_applied = meta.last_log_id;
            machine.last_membership = meta.last_membership.clone();
            for (_, other) in found.iter().filter(|(_, p)| *p != path) {
                fs::remove_file(other).map_err(io_err("removing", other))?;
            }
            *machine
                .files
                .current
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(Current { meta, path });
        }
        Ok(machine)
    }

    /// The state store this machine applies to.
    pub fn state(&self) -> &StateStore {
        &self.state
    }

    /// The directory holding the snapshot files.
    pub fn snapshot_dir(&self) -> &Path {
        &self.files.dir
    }
}

/// Builds a snapshot from a point-in-time view taken by `get_snapshot_builder`, so it may
/// run while the state machine keeps applying.
pub struct SnapshotBuilder {
    snapshot: crate::state::Snapshot,
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
    files: Arc<SnapshotFiles>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    #[tracing::instrument(level = "info", skip_all, fields(last_applied = ?self.last_applied))]
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let view = self.snapshot.clone();
        let image = blocking(move || view.encode_image().map_err(SnapshotStoreError::from))
            .await
            .map_err(storage_write)?;
        let seq_hint = self.files.next_seq.load(Ordering::Relaxed);
        let snapshot_id = match &self.last_applied {
            Some(id) => format!(
                "{}-{}-{:x}-{}",
                id.leader_id.term, id.index, self.files.nonce, seq_hint
            ),
            None => format!("0-0-{:x}-{}", self.files.nonce, seq_hint),
        };
        let meta = Meta {
            last_log_id: self.last_applied,
            last_membership: self.last_membership.clone(),
            snapshot_id,
        };
        let files = self.files.clone();
        let (meta_for_file, image) = (meta.clone(), Arc::new(image));
        let image_for_file = image.clone();
        blocking(move || files.persist(&meta_for_file, &image_for_file))
            .await
            .map_err(storage_write)?;
        let image = Arc::try_unwrap(image).unwrap_or_else(|shared| (*shared).clone());
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(image)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        Ok((self.last_applied, self.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandResponse>, StorageError>
    where
        I: IntoIterator<Item = Entry> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        let mut responses = Vec::new();
        for entry in entries {
            let log_id = entry.log_id;
            let index = log_id.index;
            let response = match entry.payload {
                EntryPayload::Blank => {
                    self.state.advance_index(index);
                    CommandResponse::Applied
                }
                EntryPayload::Normal(command) => {
                    let started = std::time::Instant::now();
                    let response = match command.try_into_command() {
                        Ok(command) => self.state.apply(index, command),
                        // The log store's recent copy still holds it: read it there.
                        Err(shared) => self.state.apply_shared(index, &shared),
                    };
                    metrics::histogram!("teamster_raft_fsm_apply_seconds")
                        .record(started.elapsed().as_secs_f64());
                    response
                }
                EntryPayload::Membership(membership) => {
                    self.last_membership = StoredMembership::new(Some(log_id), membership);
                    self.state.advance_index(index);
                    CommandResponse::Applied
                }
            };
            self.last_applied = Some(log_id);
            responses.push(response);
        }
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            snapshot: self.state.snapshot(),
            last_applied: self.last_applied,
            last_membership: self.last_membership.clone(),
            files: self.files.clone(),
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let image = Arc::new(snapshot.into_inner());
        // Replace the state first: a corrupt image fails here and changes nothing.
        let state = self.state.clone();
        let to_restore = image.clone();
        let index = blocking(move || {
            state
                .restore_image(&to_restore)
                .map_err(SnapshotStoreError::from)
        })
        .await
        .map_err(storage_read)?;
        if let Some(log_id) = meta.last_log_id {
            if log_id.index > index {
                self.state.advance_index(log_id.index);
            }
        }
        self.last_applied = meta.last_log_id;
        self.last_membership = meta.last_membership.clone();
        let files = self.files.clone();
        let meta_for_file = meta.clone();
        blocking(move || files.persist(&meta_for_file, &image))
            .await
            .map_err(storage_write)?;
        tracing::info!(snapshot_id = %meta.snapshot_id, last_log_id = ?meta.last_log_id, "snapshot installed");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        // A concurrent build may replace (and delete) the current file while we open it:
        // then the new current one is read instead.
        let mut attempts = 0;
        loop {
            let Some(current) = self.files.current() else {
                return Ok(None);
            };
            let path = current.path.clone();
            match blocking(move || read_snapshot_file(&path, true)).await {
                Ok((meta, image)) => {
                    return Ok(Some(Snapshot {
                        meta,
                        snapshot: Box::new(Cursor::new(image)),
                    }))
                }
                Err(SnapshotStoreError::Io { source, .. })
                    if source.kind() == io::ErrorKind::NotFound && attempts < 3 =>
                {
                    attempts += 1;
                }
                Err(e) => return Err(storage_read(e)),
            }
        }
    }
}
