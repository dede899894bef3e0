//! The payloads of the `Alloc.*` calls: an operator's stop of one allocation.

use serde::{Deserialize, Serialize};

/// `Alloc.Stop`: stop one allocation and place a replacement (Nomad's `alloc stop`): the
/// allocation is marked to migrate and an `alloc-stop` evaluation of its job is created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocStopRequest {
    /// The allocation's full ID.
    pub alloc_id: String,
}

/// The answer to `Alloc.Stop`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocStopResponse {
    /// The evaluation that stops and replaces the allocation.
    pub eval_id: String,
    /// The raft index the change was written at.
    pub index: u64,
}
