//! The openraft log storage on sled.
//!
//! ```text
//!  tree "log":  key = index as big-endian u64 (8 bytes, so keys sort by index)
//!               value = bincode(Entry)
//!  tree "meta": "vote" → bincode(Vote), "committed" → bincode(LogId),
//!               "last_purged" → bincode(LogId)
//! ```
//!
//! Durability follows openraft's contract: an append is readable when
//! [`RaftLogStorage::append`] returns and durable (sled `flush_async`, an fsync of the whole
//! database) before the flush callback fires; [`RaftLogStorage::save_vote`] flushes before it
//! returns. `purge` writes and flushes `last_purged` *before* deleting entries, so a crash in
//! between leaves harmless extra entries below it rather than a hole; `truncate` flushes too.
//! `save_committed` is not flushed itself: the next append or vote flush persists it, and a
//! lost one only means openraft re-applies a little less on restart.
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
const VOTE_KEY: &[u8] = b"vote";
const COMMITTED_KEY: &[u8] = b"committed";
const LAST_PURGED_KEY: &[u8] = b"last_purged";

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
            .field("entries", &self.log.len())
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
        let mut store = Self::from_db(db)?;
        store.max_payload_bytes = config.max_payload_bytes;
        store.recent = Arc::new(Mutex::new(RecentEntries::new(config.recent_entries_bytes)));
        Ok(store)
    }

    /// Uses an already open sled database (its `log` and `meta` trees).
    pub fn from_db(db: sled::Db) -> Result<Self, LogStoreError> {
        let log = db.open_tree(LOG_TREE)?;
        let meta = db.open_tree(META_TREE)?;
        Ok(Self {
            db,
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
    /// wait on each other for ever.
    pub async fn flush(&self) -> Result<(), LogStoreError> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || db.flush())
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
            Some(end) => self.log.range(start.to_be_bytes()..end.to_be_bytes()),
            None => self.log.range(start.to_be_bytes()..),
        };
        let mut entries = Vec::new();
        let mut expected = None;
        let mut bytes = 0usize;
        for item in iter {
            let (key, value) = item?;
            bytes = bytes.saturating_add(value.len());
            if bytes > max_bytes && !entries.is_empty() {
                break;
            }
            let entry = decode_entry(&value)?;
            let key_index = key_index(&key)?;
            if entry.log_id.index != key_index {
                return Err(LogStoreError::NotContiguous {
                    expected: key_index,
                    found: entry.log_id.index,
                });
            }
            if let Some(expected) = expected {
                if key_index != expected {
                    return Err(LogStoreError::NotContiguous {
                        expected,
                        found: key_index,
                    });
                }
            }
            expected = Some(key_index + 1);
            entries.push(entry);
        }
        Ok(entries)
    }

    fn last_log_id(&self) -> Result<Option<LogId>, LogStoreError> {
        match self.log.last()? {
            Some((_, value)) => Ok(Some(decode_entry(&value)?.log_id)),
            None => Ok(None),
        }
    }

    fn remove_range(&self, start: u64, end_inclusive: Option<u64>) -> Result<(), LogStoreError> {
        let mut batch = sled::Batch::default();
        let keys = match end_inclusive {
            Some(end) => self.log.range(start.to_be_bytes()..=end.to_be_bytes()),
            None => self.log.range(start.to_be_bytes()..),
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

fn key_index(key: &[u8]) -> Result<u64, LogStoreError> {
    let bytes: [u8; 8] = key.try_into().map_err(|_| LogStoreError::Decode {
        what: "log key",
        reason: format!("{} bytes instead of 8", key.len()),
    })?;
    Ok(u64::from_be_bytes(bytes))
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
                batch.insert(&entry.log_id.index.to_be_bytes(), bytes);
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
