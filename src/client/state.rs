//! The client's durable state: the node's identity and every allocation it runs or ran, with
//! the handles of their tasks, in a sled database at `<data_dir>/client/state.db`.
//!
//! - One key per allocation (`alloc/<id>`) and one for the identity (`node`), each a JSON
//!   document, so a write carries only what changed since the last one and a newer
//!   teamster reads what an older one wrote (fields are added with defaults).
//! - [`StateStore::write`] is atomic and durable: every changed key goes in one sled batch,
//!   flushed (fsync) before it returns. Callers serialise their writes (the client holds a
//!   lock while it encodes and writes), so the newest write always holds the newest state.
//! - A client that still has the `state.json` file of an earlier teamster imports it on its
//!   first start and removes it.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::client::types::{ClientState, LocalAlloc};

/// The key of the node's identity.
const NODE_KEY: &[u8] = b"node";
/// The prefix of every allocation's key.
const ALLOC_PREFIX: &[u8] = b"alloc/";
/// The database's directory, under the client's directory.
pub const DB_DIR: &str = "state.db";
/// The state file of earlier teamsters, imported once.
pub const LEGACY_FILE: &str = "state.json";
/// The database's page cache: the state is small and read only at start.
const CACHE_BYTES: u64 = 4 << 20;

/// Why the client's state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The database could not be opened.
    #[error("cannot open the client state database {path}: {source}")]
    Open {
        /// The database's directory.
        path: PathBuf,
        /// Why.
        source: sled::Error,
    },
    /// A key holds something that is not the state.
    #[error("corrupt client state under {key:?}: {reason}")]
    Corrupt {
        /// The key.
        key: String,
        /// Why it could not be decoded.
        reason: String,
    },
    /// The state of an earlier teamster could not be imported.
    #[error("cannot import {path}: {reason}")]
    Import {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Reading, writing or flushing failed.
    #[error("client state database: {0}")]
    Io(#[from] sled::Error),
    /// The state could not be encoded.
    #[error("cannot encode the client state: {0}")]
    Encode(#[from] serde_json::Error),
}

/// The node's identity as stored.
#[derive(Debug, Serialize, Deserialize)]
struct Identity {
    node_id: String,
    secret_id: String,
}

/// A whole state, encoded by key ([`StateStore::encode`]).
pub struct Encoded(BTreeMap<Vec<u8>, Vec<u8>>);

/// The client's database.
pub struct StateStore {
    db: sled::Db,
    path: PathBuf,
    /// A hash of each key's value as last written, so unchanged keys are not written again.
    written: Mutex<HashMap<Vec<u8>, u64>>,
}

fn alloc_key(id: &str) -> Vec<u8> {
    let mut key = ALLOC_PREFIX.to_vec();
    key.extend_from_slice(id.as_bytes());
    key
}

fn hash_of(bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

impl StateStore {
    /// Open (or create) the database in `client_dir` and read the state it holds, importing
    /// an earlier teamster's `state.json` when the database is new.
    pub fn open(client_dir: &Path) -> Result<(StateStore, ClientState), StateError> {
        let path = client_dir.join(DB_DIR);
        let db = open_db(&path).map_err(|source| StateError::Open {
            path: path.clone(),
            source,
        })?;
        let store = StateStore {
            db,
            path,
            written: Mutex::new(HashMap::new()),
        };
        let legacy = client_dir.join(LEGACY_FILE);
        let state = if store.db.is_empty() && legacy.exists() {
            let state = read_legacy(&legacy)?;
            store.write(&state)?;
            std::fs::remove_file(&legacy).map_err(|e| StateError::Import {
                path: legacy.clone(),
                reason: e.to_string(),
            })?;
            tracing::info!(path = %legacy.display(), "imported the client state file");
            state
        } else {
            store.read()?
        };
        Ok((store, state))
    }

    /// Where the database lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Read the whole state as stored.
    pub fn read(&self) -> Result<ClientState, StateError> {
        let mut state = ClientState::default();
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(bytes) = self.db.get(NODE_KEY)? {
            let id: Identity = serde_json::from_slice(&bytes).map_err(|e| StateError::Corrupt {
                key: "node".into(),
                reason: e.to_string(),
            })?;
            written.insert(NODE_KEY.to_vec(), hash_of(&bytes));
            state.node_id = id.node_id;
            state.secret_id = id.secret_id;
        }
        for item in self.db.scan_prefix(ALLOC_PREFIX) {
            let (key, bytes) = item?;
            let local: LocalAlloc =
                serde_json::from_slice(&bytes).map_err(|e| StateError::Corrupt {
                    key: String::from_utf8_lossy(&key).into_owned(),
                    reason: e.to_string(),
                })?;
            written.insert(key.to_vec(), hash_of(&bytes));
            state.allocs.insert(local.alloc.id.to_string(), local);
        }
        Ok(state)
    }

    /// Write `state`: every key whose value changed, and the removal of every allocation no
    /// longer in it, in one atomic batch, flushed to disk before this returns.
    pub fn write(&self, state: &ClientState) -> Result<(), StateError> {
        self.write_encoded(Self::encode(state)?)
    }

    /// `state` as the keys and values [`StateStore::write_encoded`] takes: what a caller
    /// holding the state's lock does before it lets go and writes.
    pub fn encode(state: &ClientState) -> Result<Encoded, StateError> {
        let mut values: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        values.insert(
            NODE_KEY.to_vec(),
            serde_json::to_vec(&Identity {
                node_id: state.node_id.clone(),
                secret_id: state.secret_id.clone(),
            })?,
        );
        for (id, local) in &state.allocs {
            values.insert(alloc_key(id), serde_json::to_vec(local)?);
        }
        Ok(Encoded(values))
    }

    /// Writes an encoded state (see [`StateStore::write`]).
    pub fn write_encoded(&self, Encoded(values): Encoded) -> Result<(), StateError> {
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        let mut batch = sled::Batch::default();
        let mut changed = Vec::new();
        let gone: Vec<Vec<u8>> = written
            .keys()
            .filter(|k| !values.contains_key(*k))
            .cloned()
            .collect();
        for key in &gone {
            batch.remove(key.as_slice());
        }
        for (key, bytes) in values {
            let hash = hash_of(&bytes);
            if written.get(&key) != Some(&hash) {
                batch.insert(key.as_slice(), bytes);
                changed.push((key, hash));
            }
        }
        if gone.is_empty() && changed.is_empty() {
            return Ok(());
        }
        self.db.apply_batch(batch)?;
        self.db.flush()?;
        for key in gone {
            written.remove(&key);
        }
        written.extend(changed);
        metrics::counter!("teamster_client_state_writes_total").increment(1);
        Ok(())
    }
}

/// Opens the client's database; `open_repairing` also waits for a file lock that a store of
/// this process, just dropped, is still releasing.
fn open_db(path: &Path) -> Result<sled::Db, sled::Error> {
    teamster_storage::sled_repair::open_repairing(path, || {
        sled::Config::new()
            .path(path)
            .cache_capacity(CACHE_BYTES)
            // Every write is flushed by `write` itself.
            .flush_every_ms(None)
            .open()
    })
}

fn read_legacy(path: &Path) -> Result<ClientState, StateError> {
    let bytes = std::fs::read(path).map_err(|e| StateError::Import {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    serde_json::from_slice(&bytes).map_err(|e| StateError::Import {
        path: path.to_path_buf(),
        reason: format!("corrupt client state: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_with(node: &str, allocs: &[&str]) -> ClientState {
        let mut st = ClientState {
            node_id: node.into(),
            secret_id: format!("{node}-secret"),
            ..ClientState::default()
        };
        for id in allocs {
            let mut alloc = teamster_storage::model::Allocation {
                id: (*id).into(),
                ..Default::default()
            };
            alloc.job_id = "j".into();
            st.allocs.insert(
                (*id).to_string(),
                LocalAlloc::received(alloc, Default::default(), 1),
            );
        }
        st
    }

    #[test]
    fn what_is_written_is_read_back_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let st = state_with("n1", &["a1", "a2"]);
        {
            let (store, empty) = StateStore::open(dir.path()).unwrap();
            assert!(empty.node_id.is_empty() && empty.allocs.is_empty());
            store.write(&st).unwrap();
        }
        let (_, back) = StateStore::open(dir.path()).unwrap();
        assert_eq!(back.node_id, "n1");
        assert_eq!(back.secret_id, "n1-secret");
        assert_eq!(back.allocs, st.allocs);
    }

    #[test]
    fn only_changed_keys_are_written_and_removed_allocations_are_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = StateStore::open(dir.path()).unwrap();
        let mut st = state_with("n1", &["a1", "a2"]);
        store.write(&st).unwrap();
        let a1_before = store.db.get(alloc_key("a1")).unwrap().unwrap();
        st.allocs.get_mut("a2").unwrap().version += 1;
        st.allocs.remove("a1");
        store.write(&st).unwrap();
        assert!(store.db.get(alloc_key("a1")).unwrap().is_none());
        assert!(!a1_before.is_empty());
        drop(store);
        let (_, back) = StateStore::open(dir.path()).unwrap();
        assert_eq!(back.allocs.keys().collect::<Vec<_>>(), vec!["a2"]);
        assert_eq!(back.allocs["a2"].version, 2);
    }

    #[test]
    fn an_earlier_state_file_is_imported_once_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let st = state_with("old", &["a1"]);
        std::fs::write(
            dir.path().join(LEGACY_FILE),
            serde_json::to_vec(&st).unwrap(),
        )
        .unwrap();
        let (_, back) = StateStore::open(dir.path()).unwrap();
        assert_eq!(back.node_id, "old");
        assert_eq!(back.allocs, st.allocs);
        assert!(!dir.path().join(LEGACY_FILE).exists());
        let (_, again) = StateStore::open(dir.path()).unwrap();
        assert_eq!(again.node_id, "old", "the database holds it now");
    }

    #[test]
    fn a_corrupt_value_is_refused_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = StateStore::open(dir.path()).unwrap();
        store.db.insert(alloc_key("a9"), &b"not json"[..]).unwrap();
        let err = store.read().expect_err("refused");
        assert!(err.to_string().contains("alloc/a9"), "{err}");
    }
}
