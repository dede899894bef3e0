//! [`ServiceError`]: why a service call was not served, typed, and the same on both sides of
//! the wire (the transport's own failures become `Unavailable` or `NoAnswer` where the
//! transport is, in `rpc/mod.rs`): a follower that forwards a call hands the leader's error back unchanged, and the
//! HTTP API maps each kind to Nomad's status code.

use serde::{Deserialize, Serialize};
use teamster_storage::raft_types::{ServerAddr, ServerId};

/// Why a service call failed. A wire enum: variants are only ever appended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum ServiceError {
    /// The server asked is not the leader; `leader` is the one it knows of. Retry there.
    #[error("not the leader")]
    NotLeader {
        /// The leader's raft id and addresses, when known.
        leader: Option<(ServerId, ServerAddr)>,
    },
    /// No leader is known (an election is under way, or there is no quorum).
    #[error("No cluster leader")]
    NoLeader,
    /// A leader-only subsystem is switched off on the server asked (it is not, or not yet, or
    /// no longer the leader): "eval broker disabled", "plan queue is disabled". Re-resolve
    /// the leader and retry.
    #[error("{reason}")]
    Disabled {
        /// What is disabled, in Nomad's words.
        reason: String,
    },
    /// The request is malformed or breaks a rule of the data: `field` names what is wrong.
    #[error("{reason}")]
    Invalid {
        /// The field, in the API's names (`Job.TaskGroups[0].Count`, `DrainSpec.Deadline`).
        field: String,
        /// What is wrong, a sentence that names the field.
        reason: String,
    },
    /// What the request names does not exist.
    #[error("{kind} not found")]
    NotFound {
        /// What kind of thing: "job", "node", "evaluation".
        kind: String,
        /// Its ID as given.
        id: String,
    },
    /// Refused by the state it meets (a stale delivery token, an eval that is not
    /// outstanding, a check-and-set index that moved); the same request will not succeed.
    #[error("{reason}")]
    Rejected {
        /// Why, in Nomad's words where Nomad has them.
        reason: String,
    },
    /// The call was not served, and nothing of it was applied: nobody listened, the server
    /// is still starting. Sending it again (here or elsewhere) is safe.
    #[error("{reason}")]
    Unavailable {
        /// What failed.
        reason: String,
    },
    /// The server failed while serving (raft failed; a write may or may not be committed).
    #[error("{reason}")]
    Internal {
        /// What failed.
        reason: String,
    },
    /// No answer came (the deadline passed, or the connection was lost while waiting): the
    /// call may or may not have been applied.
    #[error("{reason}")]
    NoAnswer {
        /// What failed.
        reason: String,
    },
    /// The caller's token (or node secret) does not allow the call: Nomad's "Permission
    /// denied", "ACL token not found", "ACL token expired". Nothing was applied.
    #[error("{reason}")]
    PermissionDenied {
        /// Which of Nomad's messages.
        reason: String,
    },
    /// A worker's scheduler version is not the leader's (Nomad's "dequeue disallowed"):
    /// servers of two versions during an upgrade. The worker waits for the cluster to agree.
    #[error(
        "dequeue disallowed: calling scheduler version is {caller}; leader version is {leader}"
    )]
    SchedulerVersion {
        /// The worker's version.
        caller: u32,
        /// The leader's.
        leader: u32,
    },
}

impl ServiceError {
    /// An [`Invalid`](ServiceError::Invalid) naming `field`.
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> ServiceError {
        ServiceError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// A [`NotFound`](ServiceError::NotFound) of a `kind` with `id`.
    pub fn not_found(kind: &str, id: impl Into<String>) -> ServiceError {
        ServiceError::NotFound {
            kind: kind.to_string(),
            id: id.into(),
        }
    }

    /// A [`Rejected`](ServiceError::Rejected).
    pub fn rejected(reason: impl Into<String>) -> ServiceError {
        ServiceError::Rejected {
            reason: reason.into(),
        }
    }

    /// A [`Disabled`](ServiceError::Disabled).
    pub fn disabled(reason: impl Into<String>) -> ServiceError {
        ServiceError::Disabled {
            reason: reason.into(),
        }
    }

    /// An [`Internal`](ServiceError::Internal).
    pub fn internal(reason: impl Into<String>) -> ServiceError {
        ServiceError::Internal {
            reason: reason.into(),
        }
    }

    /// The answer to `request` was another call's answer: a bug or a version mismatch.
    pub fn unexpected(request: &str, response: &str) -> ServiceError {
        ServiceError::internal(format!("{request} answered with {response}"))
    }

    /// Whether the same call may succeed later or on another server: no leader, the wrong
    /// server, a subsystem switched off, a server that could not be reached, no answer. A
    /// caller that retries after [`NoAnswer`](ServiceError::NoAnswer) must know its call is
    /// idempotent (the scheduler workers' and client agents' calls are).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ServiceError::NotLeader { .. }
                | ServiceError::NoLeader
                | ServiceError::Disabled { .. }
                | ServiceError::Unavailable { .. }
                | ServiceError::NoAnswer { .. }
        )
    }
}
