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
    /// Take this lock (its ID made by the caller), writing these items (Nomad's
    /// `lock-acquire`: they replace the variable's).
    LockAcquire {
        /// The items (`None`: the variable keeps its own).
        items: Option<BTreeMap<String, String>>,
        /// The lock.
        lock: teamster_storage::model::VariableLock,
    },
    /// Release the lock `lock_id` of the request names; the items stay.
    LockRelease,
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
    /// The caller's lock ID (a lock's holder writing or releasing it).
    pub lock_id: Option<String>,
}

/// The answer to `Variables.RenewLock`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum VariablesRenewLockResponse {
    /// Renewed: the variable's metadata, its lock included.
    Renewed(teamster_storage::model::VariableMetadata),
    /// Refused (Nomad's text); `missing`: there is no such variable.
    Refused {
        /// Why.
        reason: String,
        /// The variable does not exist.
        missing: bool,
    },
}

/// `Variables.RenewLock`: the holder of a variable's lock renews it (on the leader, which
/// keeps the leases).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VariablesRenewLockRequest {
    /// The variable's namespace.
    pub namespace: String,
    /// Its path.
    pub path: String,
    /// The lock's ID.
    pub lock_id: String,
}

/// The answer to `Variables.Apply`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum VariablesApplyResponse {
    /// Done at this raft index.
    Applied(u64),
    /// The check-and-set index did not match: the variable's modify index (0: it does not
    /// exist), nothing written.
    Conflict(u64),
    /// A lock refused it (Nomad's text); `missing`: there is no such variable.
    LockRefused {
        /// Why.
        reason: String,
        /// The variable does not exist.
        missing: bool,
    },
}

/// One thing a task's templates read (consul-template's Nomad dependencies).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TemplateDep {
    /// A variable (`nomadVar`, `nomadVarExists`).
    Var {
        /// Its namespace.
        namespace: String,
        /// Its path.
        path: String,
    },
    /// The variables under a prefix (`nomadVarList`, `nomadVarListSafe`); namespace `*`:
    /// every namespace.
    VarList {
        /// The namespace, or `*`.
        namespace: String,
        /// The path prefix.
        prefix: String,
    },
    /// The registrations of a service (`nomadService`).
    Service {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The services of a namespace, by name with their tags (`nomadServices`).
    Services {
        /// The namespace.
        namespace: String,
    },
}

/// A variable as a template sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateVar {
    /// Its metadata.
    pub meta: teamster_storage::model::VariableMetadata,
    /// Its items, in the clear.
    pub items: BTreeMap<String, String>,
}

/// What one [`TemplateDep`] holds now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TemplateData {
    /// The variable, or `None` when there is none.
    Var(Option<TemplateVar>),
    /// The variables under the prefix (those the caller may list).
    VarList(Vec<teamster_storage::model::VariableMetadata>),
    /// The registrations of the service.
    Service(Vec<teamster_storage::model::ServiceRegistration>),
    /// Service names with their tags (every tag of every registration).
    Services(Vec<(String, Vec<String>)>),
    /// The caller may not read it (Nomad's 403 "Permission denied").
    Denied,
    /// The answering server could not read it now (a variable under a root key whose
    /// key-encryption key it has not fetched yet): missing, asked again shortly.
    Unavailable,
}

/// What one task's templates read, with the task's workload identity (its default
/// identity's token): the servers answer what that identity may read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateReadSet {
    /// The task's workload identity token.
    pub token: String,
    /// What to read.
    pub deps: Vec<TemplateDep>,
}

/// `Template.Read`: what the templates of an allocation's tasks read, one [`TemplateReadSet`]
/// per task; a blocking query on the variables and services tables (one per allocation,
/// however many tasks and templates it has).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateReadRequest {
    /// What to read, per task.
    pub reads: Vec<TemplateReadSet>,
    /// Answer once either table changed after this index (0: at once).
    pub min_index: u64,
    /// How long to wait for that, in milliseconds.
    pub wait_ms: u64,
}

/// The answer to `Template.Read`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TemplateReadResponse {
    /// The index of the state answered from (the next `min_index`).
    pub index: u64,
    /// What each dependency holds: per set, in the request's order.
    pub data: Vec<Vec<TemplateData>>,
}
