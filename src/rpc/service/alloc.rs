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

/// `Alloc.SignIdentities`: a client asks for the workload identities of tasks it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocSignIdentitiesRequest {
    /// One entry per identity wanted.
    pub identities: Vec<WorkloadIdentityRequest>,
}

/// One identity a client asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkloadIdentityRequest {
    /// The allocation (full ID).
    pub alloc_id: String,
    /// The task.
    pub task: String,
    /// The identity's name (`default` for the default identity).
    pub identity: String,
}

/// One identity signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignedWorkloadIdentity {
    /// The allocation.
    pub alloc_id: String,
    /// The task.
    pub task: String,
    /// The identity's name.
    pub identity: String,
    /// The token (a compact JWT).
    pub jwt: String,
    /// When it expires, Unix nanoseconds (`None`: never).
    pub expiration: Option<i64>,
}

/// The answer to `Alloc.SignIdentities`: what was signed, and the identities that were
/// refused with why (an allocation that is gone or terminal, an identity the task does not
/// have).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocSignIdentitiesResponse {
    /// The tokens.
    pub signed: Vec<SignedWorkloadIdentity>,
    /// The requests refused, with the reason.
    pub rejections: Vec<(WorkloadIdentityRequest, String)>,
}
