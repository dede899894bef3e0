//! # teamster-storage: what the cluster knows and how it is kept
//!
//! Everything here is replicated through Raft or describes what is. This crate knows nothing
//! of leadership, workers or HTTP: the server's leader-only parts subscribe to what the state
//! store publishes.
//!
//! - [`model`]: the domain model in Nomad's vocabulary — Job, TaskGroup, Task, Node,
//!   Evaluation, Allocation, Plan — with Nomad's JSON shapes, and bincode-safe for the log.
//! - [`state`]: the in-memory [`state::StateStore`] on `imbl` persistent maps: O(1) snapshots,
//!   secondary indexes, a watch of the applied index and a stream of applied changes.
//! - [`fsm`]: the versioned [`fsm::Command`] enum and its deterministic application.
//! - [`raft_types`]: the openraft type configuration shared by the store and the network.
//! - [`log_store`]: the openraft `RaftLogStorage` on sled.
//! - [`state_machine`]: the openraft `RaftStateMachine` over the state store, with durable
//!   snapshot files.
//! - [`data_dir`]: [`open`] — the log store and state machine of a data directory, with the
//!   newest snapshot loaded; what the raft node calls at start-up.
//!
//! ```text
//!  raft log (sled) ──entries──▶ state_machine ──StateStore::apply──▶ fsm ──▶ tables (imbl)
//!                                    │                                          │
//!                     snapshot files ◀── images                  snapshot(), watch, events
//! ```
//!
//! Everything persisted or replicated is bincode 2 (`standard()` configuration) behind a
//! format version, and every decode is bounded by a byte budget.

#![warn(missing_docs)]

mod codec;
pub mod data_dir;
pub mod fsm;
pub mod log_store;
pub mod model;
pub mod raft_types;
pub mod sled_repair;
pub mod state;
pub mod state_machine;

pub use data_dir::{open, OpenError, StorageConfig};
