//! The replicated commands and their deterministic application to the state store.
//!
//! `Command` is the payload of every raft log entry. It is encoded with bincode, so variants
//! are only ever added at the end (the variant index is the encoding) and nothing in it uses
//! serde attributes that bincode cannot round-trip.

use serde::{Deserialize, Serialize};

/// A replicated command: the payload of one raft log entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// Several commands proposed together and applied in order in one entry.
    Batch(Vec<Command>),
}

/// What applying a [`Command`] answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CommandResponse {
    /// One response per command of a [`Command::Batch`], in order.
    Batch(Vec<CommandResponse>),
}
