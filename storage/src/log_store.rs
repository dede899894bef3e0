//! The openraft log storage on sled.
//!
//! ```text
//!  tree "log":  key = index as big-endian u64 ++ chunk number as big-endian u32 (12 bytes,
//!               so keys sort by index, then by chunk)
//!               value = the chunk's part of bincode(Entry), at most CHUNK_BYTES; chunk 0
//!               starts with the whole encoding's length (big-endian u64)
//!  tree "meta": "vote" → bincode(Vote), "committed" → bincode(LogId),
//!               "last_purged" → bincode(LogId)
//! ```
//!
//! Durability follows openraft's contract: an append is readable when
//! [`RaftLogStorage::append`] returns and durable before the flush callback fires
//! ([`LogStore::flush`]: sled's flush, whose `sync_file_range` on Linux persists neither the
//! file's size nor the disk's cache, then an `fdatasync` of sled's data file);
//! [`RaftLogStorage::save_vote`] flushes before it returns. `purge` writes and flushes
//! `last_purged` *before* deleting entries, so a crash in between leaves harmless extra
//! entries below it rather than a hole; `truncate` flushes too.
//! `save_committed` is not flushed itself: the next append or vote flush persists it, and a
//! lost one only means openraft re-applies a little less on restart.
//!
//! **Why entries are cut into chunks.** sled 0.34 writes an item larger than a quarter of a
//! log segment (about 128 KiB by default: one large value, or a leaf page of values once it
//! is consolidated) to a file of its own under `blobs/`, and never fsyncs that file or its
//! directory. A plan of a thousand allocations encodes to about 600 kB, so it would be
//! acknowledged as durable and could vanish on a power loss. A leaf page holds at most about
//! 20 values (sled splits past 16 and merges under 4), and 20 chunks of `CHUNK_BYTES` (4 KiB)
//! stay well under that size, so the log never makes sled write a blob
//! (`storage/tests/log_blobs.rs`).
//!
//! The newest entries are also kept decoded in memory ([`recent`]), so applying them and
//! replicating them to followers that keep up does not read and decode them from sled again.
//!
//! sled sits behind this type so it can be replaced. Open one [`LogStore`] per data
//! directory: sled refuses a second open of the same path.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{OptionalSend, StorageIOError};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec;
use crate::raft_types::{Entry, LogId, StorageError, TypeConfig, Vote};

mod recent;
use recent::RecentEntries;

const LOG_TREE: &str = "log";
const META_TREE: &str = "meta";
/// sled 0.34's one data file, under the database's directory.
const SLED_DATA_FILE: &str = "db";
const VOTE_KEY: &[u8] = b"vote";
const COMMITTED_KEY: &[u8] = b"committed";
const LAST_PURGED_KEY: &[u8] = b"last_purged";

/// The most bytes of an entry's encoding in one sled value (see the module docs).
const CHUNK_BYTES: usize = 4096;
/// Bytes of the length at the start of an entry's first chunk.
const LEN_PREFIX: usize = 8;

/// Decode budget for one log entry (bincode charges in-memory sizes; entries are bounded by
/// the raft payload limit long before this).
const ENTRY_DECODE_LIMIT: usize = 1 << 30;
/// Decode budget for a vote or a log id.
const META_DECODE_LIMIT: usize = 4096;

/// Settings of the sled database behind the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogStoreConfig {
    /// sled's page cache, in bytes (sled's own default is 1 GiB, too much beside the
    /// in-memory state store).
    pub cache_capacity_bytes: u64,
    /// sled's background flush period as a safety net; every append and vote is flushed
    /// explicitly anyway. `None` turns it off.
    pub flush_every_ms: Option<u64>,
    /// The most encoded bytes of entries one replication request carries (at least one entry
    /// is always sent). openraft times an AppendEntries out after the heartbeat interval, so
    /// a follower catching up on entries of hundreds of kB each (plans of 1 000 allocations)
    /// must get them in pieces it can persist within that time, or it never catches up.
    pub max_payload_bytes: usize,
    /// The encoded bytes of the newest entries also kept decoded in memory, so the state
    /// machine and replication read them without a sled read and a decode (0 keeps none).
    pub recent_entries_bytes: usize,
}

impl Default for LogStoreConfig {
    fn default() -> Self {
        Self {
            cache_capacity_bytes: 64 << 20,
            flush_every_ms: Some(1000),
            max_payload_bytes: 1 << 20,
            recent_entries_bytes: 2 << 20,
        }
    }
}

impl LogStoreConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), LogStoreError> {
        if self.cache_capacity_bytes < 1 << 20 {
            return Err(LogStoreError::Config(format!(
                "cache_capacity_bytes must be at least 1 MiB, not {}",
                self.cache_capacity_bytes
            )));
        }
        if self.max_payload_bytes == 0 {
            return Err(LogStoreError::Config(
                "max_payload_bytes must be positive".to_owned(),
            ));
        }
        if self.flush_every_ms == Some(0) {
            return Err(LogStoreError::Config(
                "flush_every_ms must be positive (or None)".to_owned(),
            ));
        }
        Ok(())
    }
}

/// Errors of the log store (mapped to openraft's `StorageError` at the trait boundary).
#[derive(Debug, thiserror::Error)]
pub enum LogStoreError {
    /// sled failed (I/O, corruption).
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
    /// A value could not be encoded.
    #[error("encoding {what}: {source}")]
    Encode {
        /// What was being encoded.
        what: &'static str,
        /// Why it failed.
        source: bincode::error::EncodeError,
    },
    /// A stored value could not be decoded (corruption or a foreign database).
    #[error("decoding {what}: {reason}")]
    Decode {
        /// What was being decoded.
        what: &'static str,
        /// Why it failed.
        reason: String,
    },
    /// The log has a hole or an entry under the wrong key.
    #[error("log is not contiguous: expected index {expected}, found {found}")]
    NotContiguous {
        /// The index that should be there.
        expected: u64,
        /// The index found.
        found: u64,
    },
    /// A setting is out of range.
    #[error("invalid log store config: {0}")]
    Config(String),
}

/// openraft's log storage on sled: cheap to clone (clones share the database).
#[derive(Clone)]
pub struct LogStore {
    db: sled::Db,
    /// sled's data file, synced after every flush of sled (see the module docs).
    data_file: Arc<std::fs::File>,
    log: sled::Tree,
    meta: sled::Tree,
    stats: Arc<LogStats>,
    max_payload_bytes: usize,
    /// Shared by every clone (openraft's log readers are clones).
    recent: Arc<Mutex<RecentEntries>>,
}

/// What a [`LogStore`] has appended since it was opened (entries written again after a
/// truncation count again): the raft write volume a server's disk sees.
#[derive(Debug, Default)]
pub struct LogStats {
    entries: AtomicU64,
    bytes: AtomicU64,
}

impl LogStats {
    /// Entries appended.
    pub fn appended_entries(&self) -> u64 {
        self.entries.load(Ordering::Relaxed)
    }

    /// Encoded bytes of the entries appended (the values written to the log tree).
    pub fn appended_bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    fn record(&self, entries: u64, bytes: u64) {
        self.entries.fetch_add(entries, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore")
            .field("values", &self.log.len())
            .finish()
    }
}

impl LogStore {
    /// Opens (or creates) the sled database at `path`.
    pub fn open(path: &Path, config: &LogStoreConfig) -> Result<Self, LogStoreError> {
        config.validate()?;
        let db = crate::sled_repair::open_repairing(path, || {
            sled::Config::new()
                .path(path)
                .cache_capacity(config.cache_capacity_bytes)
                .flush_every_ms(config.flush_every_ms)
                .open()
        })?;
        // sled's own flush is not an fsync (see the module docs): keep its data file to sync.
        let data_file = std::fs::File::open(path.join(SLED_DATA_FILE)).map_err(sled::Error::Io)?;
        let mut store = Self::from_db(db, Arc::new(data_file))?;
        store.max_payload_bytes = config.max_payload_bytes;
        store.recent = Arc::new(Mutex::new(RecentEntries::new(config.recent_entries_bytes)));
        Ok(store)
    }

    /// Uses an already open sled database (its `log` and `meta` trees) whose data file is
    /// `data_file`.
    fn from_db(db: sled::Db, data_file: Arc<std::fs::File>) -> Result<Self, LogStoreError> {
        let log = db.open_tree(LOG_TREE)?;
        let meta = db.open_tree(META_TREE)?;
        Ok(Self {
            db,
            data_file,
            log,
            meta,
            stats: Arc::default(),
            max_payload_bytes: LogStoreConfig::default().max_payload_bytes,
            recent: Arc::new(Mutex::new(RecentEntries::new(
                LogStoreConfig::default().recent_entries_bytes,
            ))),
        })
    }

    /// The append counters, shared by every clone (keep it to read them after handing the
    /// store to openraft).
    pub fn stats(&self) -> Arc<LogStats> {
        self.stats.clone()
    }

    /// Flushes every write so far to disk, on tokio's blocking pool: sled's `flush_async`
    /// holds one of sled's own IO threads while it waits for writes that need another, and
    /// sled 0.34 stops adding IO threads after its first task (a counter underflow), so
    /// enough concurrent `flush_async` calls in one process (several stores, as in tests)
    /// wait on each other for ever. sled's flush writes its buffers with `sync_file_range`
    /// on Linux, which neither persists the file's size nor flushes the disk's cache, so
    /// the data file is then `fdatasync`ed.
    pub async fn flush(&self) -> Result<(), LogStoreError> {
        let (db, file) = (self.db.clone(), self.data_file.clone());
        tokio::task::spawn_blocking(move || -> Result<(), LogStoreError> {
            db.flush()?;
            file.sync_data().map_err(sled::Error::Io)?;
            Ok(())
        })
        .await
        .map_err(|e| {
            LogStoreError::Sled(sled::Error::Io(std::io::Error::other(format!(
                "the flush task failed: {e}"
            ))))
        })??;
        Ok(())
    }

    fn read_meta<T: DeserializeOwned>(
        &self,
        key: &'static [u8],
    ) -> Result<Option<T>, LogStoreError> {
        let Some(bytes) = self.meta.get(key)? else {
            return Ok(None);
        };
        codec::decode_exact::<T, META_DECODE_LIMIT>(&bytes)
            .map(Some)
            .map_err(|e| LogStoreError::Decode {
                what: meta_name(key),
                reason: e.to_string(),
            })
    }

    fn write_meta<T: Serialize>(&self, key: &'static [u8], value: &T) -> Result<(), LogStoreError> {
        let bytes = codec::encode(value).map_err(|source| LogStoreError::Encode {
            what: meta_name(key),
            source,
        })?;
        self.meta.insert(key, bytes)?;
        Ok(())
    }

    fn read_entries(&self, start: u64, end: Option<u64>) -> Result<Vec<Entry>, LogStoreError> {
        self.read_entries_limited(start, end, usize::MAX)
    }

    /// The entries in `[start, end)`, stopping before the one that would take their encoded
    /// size past `max_bytes` (the first is always included).
    fn recent(&self) -> std::sync::MutexGuard<'_, RecentEntries> {
        self.recent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn read_entries_limited(
        &self,
        start: u64,
        end: Option<u64>,
        max_bytes: usize,
    ) -> Result<Vec<Entry>, LogStoreError> {
        if let Some(end) = end {
            if let Some(entries) = self.recent().read(start, end, max_bytes) {
                return Ok(entries);
            }
        }
        let iter = match end {
            Some(end) if end <= start => return Ok(Vec::new()),
            Some(end) => self.log.range(chunk_key(start, 0)..chunk_key(end, 0)),
            None => self.log.range(chunk_key(start, 0)..),
        };
        let mut entries = Vec::new();
        let mut expected = None;
        let mut bytes = 0usize;
        let mut pending: Option<Chunks> = None;
        for item in iter {
            let (key, value) = item?;
            let (index, chunk) = split_key(&key)?;
            if chunk > 0 {
                match pending.as_mut() {
                    Some(p) => p.add(index, chunk, &value)?,
                    // A read that starts inside an entry's chunks: none of ours do.
                    None => return Err(torn(index, "a chunk without the entry's first")),
                }
                continue;
            }
            if let Some(done) = pending.take() {
                entries.push(done.finish()?);
            }
            let len = first_chunk_len(index, &value)?;
            bytes = bytes.saturating_add(len);
            if bytes > max_bytes && !entries.is_empty() {
                break;
            }
            if let Some(expected) = expected {
                if index != expected {
                    return Err(LogStoreError::NotContiguous {
                        expected,
                        found: index,
                    });
                }
            }
            expected = Some(index + 1);
            pending = Some(Chunks::start(index, len, value));
        }
        if let Some(done) = pending.take() {
            entries.push(done.finish()?);
        }
        Ok(entries)
    }

    fn last_log_id(&self) -> Result<Option<LogId>, LogStoreError> {
        let Some((key, _)) = self.log.last()? else {
            return Ok(None);
        };
        let (index, _) = split_key(&key)?;
        let entries = self.read_entries(index, index.checked_add(1))?;
        match entries.first() {
            Some(entry) => Ok(Some(entry.log_id)),
            None => Err(torn(index, "the last key has no entry")),
        }
    }

    fn remove_range(&self, start: u64, end_inclusive: Option<u64>) -> Result<(), LogStoreError> {
        let mut batch = sled::Batch::default();
        let keys = match end_inclusive.and_then(|end| end.checked_add(1)) {
            Some(end) => self.log.range(chunk_key(start, 0)..chunk_key(end, 0)),
            None => self.log.range(chunk_key(start, 0)..),
        };
        for item in keys {
            let (key, _) = item?;
            batch.remove(key);
        }
        self.log.apply_batch(batch)?;
        Ok(())
    }
}

fn meta_name(key: &[u8]) -> &'static str {
    match key {
        VOTE_KEY => "vote",
        COMMITTED_KEY => "committed log id",
        _ => "last purged log id",
    }
}

fn decode_entry(bytes: &[u8]) -> Result<Entry, LogStoreError> {
    codec::decode_exact::<Entry, ENTRY_DECODE_LIMIT>(bytes).map_err(|e| LogStoreError::Decode {
        what: "log entry",
        reason: e.to_string(),
    })
}

/// The key of chunk `chunk` of the entry at `index`.
fn chunk_key(index: u64, chunk: u32) -> [u8; 12] {
    let mut key = [0u8; 12];
    key[..8].copy_from_slice(&index.to_be_bytes());
    key[8..].copy_from_slice(&chunk.to_be_bytes());
    key
}

/// `(index, chunk)` of a log key.
fn split_key(key: &[u8]) -> Result<(u64, u32), LogStoreError> {
    let key: [u8; 12] = key.try_into().map_err(|_| LogStoreError::Decode {
        what: "log key",
        reason: format!(
            "{} bytes instead of 12 (a log written by another version of teamster? data \
             directories are not compatible across versions before 1.0)",
            key.len()
        ),
    })?;
    let (index, chunk) = key.split_at(8);
    let index = u64::from_be_bytes(index.try_into().expect("8 bytes"));
    let chunk = u32::from_be_bytes(chunk.try_into().expect("4 bytes"));
    Ok((index, chunk))
}

/// The sled values of one encoded entry: its length, then at most [`CHUNK_BYTES`] of it
/// per value.
fn chunk_values(encoded: &[u8]) -> impl Iterator<Item = (u32, Vec<u8>)> + '_ {
    let len = (encoded.len() as u64).to_be_bytes();
    // An encoding is never empty; an empty one would still get its first chunk.
    let parts = encoded.len().div_ceil(CHUNK_BYTES).max(1);
    (0..parts).map(move |i| {
        let part = &encoded
            [(i * CHUNK_BYTES).min(encoded.len())..((i + 1) * CHUNK_BYTES).min(encoded.len())];
        let value = if i == 0 {
            [&len[..], part].concat()
        } else {
            part.to_vec()
        };
        (i as u32, value)
    })
}

/// The encoding's length, from an entry's first chunk.
fn first_chunk_len(index: u64, value: &[u8]) -> Result<usize, LogStoreError> {
    let prefix: [u8; LEN_PREFIX] = value
        .get(..LEN_PREFIX)
        .and_then(|p| p.try_into().ok())
        .ok_or_else(|| torn(index, "a first chunk shorter than its length"))?;
    match usize::try_from(u64::from_be_bytes(prefix)) {
        Ok(len) if len <= ENTRY_DECODE_LIMIT => Ok(len),
        _ => Err(torn(index, "a length past the decode budget")),
    }
}

/// A stored entry whose chunks do not fit together.
fn torn(index: u64, what: &str) -> LogStoreError {
    LogStoreError::Decode {
        what: "log entry",
        reason: format!("entry {index}: {what}"),
    }
}

/// An entry's chunks as a read meets them, in key order.
struct Chunks {
    index: u64,
    /// The whole encoding's length.
    len: usize,
    /// The chunk due next.
    next: u32,
    /// The first chunk, with its length prefix.
    first: sled::IVec,
    /// The encoding so far, once a second chunk came (a lone first chunk is decoded where
    /// it is).
    joined: Option<Vec<u8>>,
}

impl Chunks {
    fn start(index: u64, len: usize, first: sled::IVec) -> Self {
        Self {
            index,
            len,
            next: 1,
            first,
            joined: None,
        }
    }

    fn add(&mut self, index: u64, chunk: u32, value: &[u8]) -> Result<(), LogStoreError> {
        if index != self.index || chunk != self.next {
            return Err(torn(
                self.index,
                &format!(
                    "chunk {chunk} of entry {index} where chunk {} was due",
                    self.next
                ),
            ));
        }
        let joined = self.joined.get_or_insert_with(|| {
            let mut joined = Vec::with_capacity(self.len);
            joined.extend_from_slice(&self.first[LEN_PREFIX..]);
            joined
        });
        joined.extend_from_slice(value);
        self.next += 1;
        Ok(())
    }

    fn finish(self) -> Result<Entry, LogStoreError> {
        let bytes = match &self.joined {
            Some(joined) => &joined[..],
            None => &self.first[LEN_PREFIX..],
        };
        if bytes.len() != self.len {
            return Err(torn(
                self.index,
                &format!("{} bytes of its {}", bytes.len(), self.len),
            ));
        }
        let entry = decode_entry(bytes)?;
        if entry.log_id.index != self.index {
            return Err(LogStoreError::NotContiguous {
                expected: self.index,
                found: entry.log_id.index,
            });
        }
        Ok(entry)
    }
}

/// `[start, end)` of a range of log indexes (`end` None: unbounded).
fn index_bounds(range: &impl RangeBounds<u64>) -> (u64, Option<u64>) {
    let start = match range.start_bound() {
        Bound::Included(s) => *s,
        Bound::Excluded(s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(e) => e.checked_add(1),
        Bound::Excluded(e) => Some(*e),
        Bound::Unbounded => None,
    };
    (start, end)
}

fn read_logs_err(e: LogStoreError) -> StorageError {
    StorageIOError::read_logs(&e).into()
}

fn write_logs_err(e: LogStoreError) -> StorageError {
    StorageIOError::write_logs(&e).into()
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let (start, end) = index_bounds(&range);
        self.read_entries(start, end).map_err(read_logs_err)
    }

    /// What replication sends: at most `max_payload_bytes` of entries (at least one).
    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> Result<Vec<Entry>, StorageError> {
        self.read_entries_limited(start, Some(end), self.max_payload_bytes)
            .map_err(read_logs_err)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id: Option<LogId> =
            self.read_meta(LAST_PURGED_KEY).map_err(read_logs_err)?;
        let last_log_id = self
            .last_log_id()
            .map_err(read_logs_err)?
            .or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let write = |e: LogStoreError| -> StorageError { StorageIOError::write_vote(&e).into() };
        self.write_meta(VOTE_KEY, vote).map_err(write)?;
        self.flush().await.map_err(write)?;
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        self.read_meta(VOTE_KEY)
            .map_err(|e| StorageIOError::read_vote(&e).into())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        let result = match &committed {
            Some(log_id) => self.write_meta(COMMITTED_KEY, log_id),
            None => self
                .meta
                .remove(COMMITTED_KEY)
                .map(|_| ())
                .map_err(LogStoreError::from),
        };
        result.map_err(write_logs_err)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        self.read_meta(COMMITTED_KEY).map_err(read_logs_err)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let written = (|| {
            let mut batch = sled::Batch::default();
            let (mut count, mut size) = (0u64, 0u64);
            let mut kept = Vec::new();
            for entry in entries {
                let bytes = codec::encode(&entry).map_err(|source| LogStoreError::Encode {
                    what: "log entry",
                    source,
                })?;
                count += 1;
                size += bytes.len() as u64;
                let len = bytes.len();
                for (chunk, value) in chunk_values(&bytes) {
                    batch.insert(&chunk_key(entry.log_id.index, chunk), value);
                }
                kept.push((entry, len));
            }
            if let Err(e) = self.log.apply_batch(batch) {
                // Whatever part of the batch sled kept, the copy no longer matches it.
                self.recent().clear();
                return Err(e.into());
            }
            let mut recent = self.recent();
            for (entry, len) in kept {
                recent.push(entry, len);
            }
            drop(recent);
            self.stats.record(count, size);
            Ok::<(), LogStoreError>(())
        })();
        let result = match written {
            Ok(()) => self.flush().await,
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "raft log append failed");
                callback.log_io_completed(Err(io::Error::other(e.to_string())));
                Err(write_logs_err(e))
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        tracing::debug!(%log_id, "truncating the raft log");
        self.recent().truncate_from(log_id.index);
        self.remove_range(log_id.index, None)
            .map_err(write_logs_err)?;
        self.flush().await.map_err(write_logs_err)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        tracing::debug!(%log_id, "purging the raft log");
        self.write_meta(LAST_PURGED_KEY, &log_id)
            .map_err(write_logs_err)?;
        self.flush().await.map_err(write_logs_err)?;
        self.recent().purge_up_to(log_id.index);
        self.remove_range(0, Some(log_id.index))
            .map_err(write_logs_err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_bounds_cover_every_range_form() {
        assert_eq!(index_bounds(&(3..7)), (3, Some(7)));
        assert_eq!(index_bounds(&(3..=7)), (3, Some(8)));
        assert_eq!(index_bounds(&(3..)), (3, None));
        assert_eq!(index_bounds(&(..7)), (0, Some(7)));
        assert_eq!(index_bounds(&(..=u64::MAX)), (0, None));
        assert_eq!(
            index_bounds(&(Bound::Excluded(3), Bound::Excluded(5))),
            (4, Some(5))
        );
    }

    fn big_entry(index: u64) -> Entry {
        let meta = crate::model::ClusterMeta {
            cluster_id: "6b1f0e3c-3d1a-4c55-9a51-0a0a2f6c1d11".to_owned(),
            create_time: 1,
        };
        Entry {
            log_id: LogId::new(openraft::CommittedLeaderId::new(1, 1), index),
            payload: openraft::EntryPayload::Normal(
                crate::fsm::Command::Batch(vec![crate::fsm::Command::ClusterMeta(meta); 1000])
                    .into(),
            ),
        }
    }

    #[test]
    fn an_entry_is_cut_into_chunks_and_read_back_whole() {
        let encoded = codec::encode(&big_entry(7)).unwrap();
        let values: Vec<(u32, Vec<u8>)> = chunk_values(&encoded).collect();
        assert!(values.len() > 5, "{} chunks", values.len());
        assert!(values
            .iter()
            .all(|(_, v)| v.len() <= CHUNK_BYTES + LEN_PREFIX));
        let joined: Vec<u8> = values
            .iter()
            .flat_map(|(i, v)| if *i == 0 { &v[LEN_PREFIX..] } else { &v[..] })
            .copied()
            .collect();
        assert_eq!(joined, encoded);
        assert_eq!(split_key(&chunk_key(7, 3)).unwrap(), (7, 3));
        assert!(chunk_key(7, u32::MAX) < chunk_key(8, 0));
    }

    #[tokio::test]
    async fn a_missing_or_short_chunk_is_an_error_not_an_entry() {
        use openraft::storage::RaftLogStorageExt;
        let dir = tempfile::tempdir().unwrap();
        let config = LogStoreConfig {
            recent_entries_bytes: 0,
            ..LogStoreConfig::default()
        };
        let mut store = LogStore::open(dir.path(), &config).unwrap();
        store
            .blocking_append((1..=3).map(big_entry).collect::<Vec<_>>())
            .await
            .unwrap();
        assert_eq!(store.read_entries(1, Some(4)).unwrap().len(), 3);
        // A chunk gone from the middle of entry 2.
        let gone = store.log.remove(chunk_key(2, 2)).unwrap().unwrap();
        assert!(store.read_entries(1, Some(4)).is_err());
        assert!(store.read_entries(2, Some(3)).is_err());
        // Entry 1 still reads alone; entry 2 back whole reads again.
        assert_eq!(store.read_entries(1, Some(2)).unwrap().len(), 1);
        store.log.insert(chunk_key(2, 2), gone).unwrap();
        assert_eq!(store.read_entries(1, Some(4)).unwrap().len(), 3);
        // A length past the decode budget is refused before anything is allocated for it.
        let first = store.log.get(chunk_key(1, 0)).unwrap().unwrap();
        let mut forged = first.to_vec();
        forged[..LEN_PREFIX].copy_from_slice(&u64::MAX.to_be_bytes());
        store.log.insert(chunk_key(1, 0), forged).unwrap();
        assert!(store.read_entries(1, Some(2)).is_err());
        store.log.insert(chunk_key(1, 0), first).unwrap();
        assert_eq!(store.read_entries(1, Some(4)).unwrap().len(), 3);
        // The last chunk of the last entry gone: the log state cannot be read either.
        let last = store.log.last().unwrap().unwrap().0;
        store.log.remove(last).unwrap();
        assert!(store.read_entries(3, Some(4)).is_err());
        assert!(store.last_log_id().is_err());
    }

    #[test]
    fn config_is_validated() {
        LogStoreConfig::default().validate().unwrap();
        let small = LogStoreConfig {
            cache_capacity_bytes: 1,
            ..LogStoreConfig::default()
        };
        assert!(small.validate().is_err());
        let zero = LogStoreConfig {
            flush_every_ms: Some(0),
            ..LogStoreConfig::default()
        };
        assert!(zero.validate().is_err());
    }
}
