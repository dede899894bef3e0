//! The payloads of `Variables.Apply`: a variable written (its items in the clear, encrypted
//! by the leader before it proposes) or deleted, with Nomad's check-and-set.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What to do with the variable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum VariableOp {
    /// Write these items.
    Set(BTreeMap<String, String>),
    /// Delete it.
    Delete,
}

/// `Variables.Apply`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VariablesApplyRequest {
    /// Its namespace.
    pub namespace: String,
    /// Its path.
    pub path: String,
    /// What to do.
    pub op: VariableOp,
    /// Only if its modify index is this (0: only if it does not exist).
    pub cas: Option<u64>,
}

/// The answer to `Variables.Apply`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum VariablesApplyResponse {
    /// Done at this raft index.
    Applied(u64),
    /// The check-and-set index did not match: the variable's modify index (0: it does not
    /// exist), nothing written.
    Conflict(u64),
}
