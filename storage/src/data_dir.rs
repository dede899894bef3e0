//! Opening a server's storage from its data directory: the one call the raft node makes.
//!
//! ```text
//!  <data_dir>/raft/        the sled database of the raft log (trees "log" and "meta")
//!  <data_dir>/snapshots/   snapshot files (see state_machine)
//! ```
//!
//! [`open`] loads the newest snapshot into the given state store, so openraft (started with
//! the returned pair) replays only the log entries after it.

use std::path::Path;

use crate::log_store::{LogStore, LogStoreConfig, LogStoreError};
use crate::state::StateStore;
use crate::state_machine::{SnapshotStoreError, StateMachine};

const RAFT_DIR: &str = "raft";

/// Storage settings of a server.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StorageConfig {
    /// The sled database behind the raft log.
    pub log: LogStoreConfig,
    /// A number that differs between starts of the same server (the server draws it from
    /// its randomness seam); it goes into snapshot ids, so two starts never name different
    /// snapshots alike. The storage reads no clock and draws no randomness of its own.
    pub instance: u64,
}

impl StorageConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), OpenError> {
        self.log.validate()?;
        Ok(())
    }
}

/// Why the storage could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The data directory could not be created.
    #[error("creating the data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The raft log could not be opened.
    #[error("opening the raft log: {0}")]
    Log(#[from] LogStoreError),
    /// The snapshots could not be read or loaded.
    #[error("opening the snapshots: {0}")]
    Snapshots(#[from] SnapshotStoreError),
}

/// Opens (creating if needed) the raft log and the snapshot directory under `data_dir`, and
/// loads the newest snapshot into `state`. Hand the pair to `openraft::Raft::new`.
pub fn open(
    data_dir: &Path,
    state: StateStore,
    config: &StorageConfig,
) -> Result<(LogStore, StateMachine), OpenError> {
    config.validate()?;
    std::fs::create_dir_all(data_dir).map_err(|source| OpenError::DataDir {
        path: data_dir.to_owned(),
        source,
    })?;
    let log = LogStore::open(&data_dir.join(RAFT_DIR), &config.log)?;
    let machine = StateMachine::open(data_dir, state, config.instance)?;
    Ok((log, machine))
}
