//! The payloads of the `Operator.*` calls: raft membership, the scheduler configuration,
//! restoring a snapshot, and the leader's broker counts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use teamster_storage::model::SchedulerConfiguration;
use teamster_storage::raft_types::{ServerAddr, ServerId};

/// `Operator.RaftJoin`: add a server to the cluster (the leader adds it as a learner and
/// promotes it to voter once it caught up).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RaftJoinRequest {
    /// The joining server's raft id.
    pub id: ServerId,
    /// How to reach it.
    pub addr: ServerAddr,
}

/// `Operator.RaftRemovePeer`: remove a server from the raft configuration, named by its raft
/// id or its RPC address (the leader resolves it in its own, current configuration).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RaftRemovePeerRequest {
    /// By raft id.
    Id(ServerId),
    /// By RPC address (`ip:port`).
    Address(String),
}

/// `Operator.SchedulerSetConfiguration`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulerSetConfigRequest {
    /// The new configuration.
    pub config: SchedulerConfiguration,
    /// Check-and-set: write only if the configuration's modify index is this.
    pub cas_index: Option<u64>,
}

/// The answer to `Operator.SchedulerSetConfiguration`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchedulerSetConfigResponse {
    /// False when the check-and-set index did not match (nothing changed).
    pub updated: bool,
    /// The raft index of the write.
    pub index: u64,
}

/// `Operator.AutopilotSetConfiguration`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AutopilotSetConfigRequest {
    /// The new configuration.
    pub config: teamster_storage::model::AutopilotConfig,
    /// Check-and-set: write only if the configuration's modify index is this.
    pub cas_index: Option<u64>,
}

/// `Operator.ServerHealth`: the servers' health, from the leader's autopilot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerHealthRequest;

/// One server's health (Nomad's `ServerHealth`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerHealth {
    /// Its raft id.
    pub id: teamster_storage::raft_types::ServerId,
    /// Its name.
    pub name: String,
    /// Its RPC address.
    pub address: String,
    /// `alive` or `failed` (Nomad's serf status).
    pub status: String,
    /// The leader.
    pub leader: bool,
    /// A voter.
    pub voter: bool,
    /// Milliseconds since it last answered (0 for the leader).
    pub last_contact_ms: u64,
    /// The term of the last entry it holds.
    pub last_term: u64,
    /// The index of the last entry it holds.
    pub last_index: u64,
    /// Healthy by the configuration.
    pub healthy: bool,
    /// When its health last changed, Unix nanoseconds.
    pub stable_since: i64,
}

/// The cluster's health (Nomad's `OperatorHealthReply`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClusterHealth {
    /// Every server is healthy.
    pub healthy: bool,
    /// How many voters may fail with a quorum left.
    pub failure_tolerance: u64,
    /// The servers, by raft id.
    pub servers: Vec<ServerHealth>,
    /// The leader's raft id.
    pub leader: teamster_storage::raft_types::ServerId,
    /// The voters' raft ids.
    pub voters: Vec<teamster_storage::raft_types::ServerId>,
}

/// `Operator.SnapshotRestore`: replace every server's state with an image that
/// `operator snapshot save` wrote, through raft.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRestoreRequest {
    /// The image.
    pub image: Vec<u8>,
}

/// `Operator.BrokerStats` asks for nothing but the leader's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerStatsRequest;

/// One broker queue's counts.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct QueueCounts {
    /// Ready to be dequeued.
    pub ready: usize,
    /// Delivered, not yet acked.
    pub unacked: usize,
    /// Behind another eval of the same job.
    pub pending: usize,
    /// Held back by a delay.
    pub waiting: usize,
    /// Superseded, waiting to be written canceled.
    pub cancelable: usize,
}

/// The leader's broker, blocked evals and plan queue counts (also the JSON of
/// `GET /v1/operator/scheduler/broker`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "PascalCase")]
pub struct BrokerStatsResponse {
    /// Whether the answering server's leader subsystems are established.
    pub leader: bool,
    /// Whether its broker is enabled.
    pub enabled: bool,
    /// Ready evals.
    pub total_ready: usize,
    /// Outstanding deliveries.
    pub total_unacked: usize,
    /// Evals waiting behind their job's in-flight eval.
    pub total_pending: usize,
    /// Delayed evals.
    pub total_waiting: usize,
    /// Superseded evals not yet canceled.
    pub total_cancelable: usize,
    /// Per scheduler queue.
    pub by_scheduler: BTreeMap<String, QueueCounts>,
    /// Blocked evals tracked.
    pub total_blocked: usize,
    /// Of those, escaped.
    pub total_escaped: usize,
    /// Of those, system evals parked on a node.
    pub total_system_blocked: usize,
    /// Plans waiting in the plan queue.
    pub plan_queue_depth: usize,
}

/// `System.GarbageCollect`: collect every terminal evaluation and every stopped job whose
/// allocations are all terminal now, whatever their age (Nomad's `/v1/system/gc`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemGcRequest;

/// The answer to `System.GarbageCollect`: the `force-gc` evaluation that does the work.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemGcResponse {
    /// The evaluation.
    pub eval_id: String,
    /// The raft index it was written at.
    pub index: u64,
}

/// `System.ReconcileJobSummaries`: recompute every job's summary from its allocations
/// (Nomad's `/v1/system/reconcile/summaries`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileSummariesRequest;

/// `Keyring.Rotate`: a new root key, active at once or prepublished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyringRotateRequest {
    /// When a prepublished key becomes active, Unix nanoseconds (`None`: at once).
    pub publish_time: Option<i64>,
    /// Re-encrypt every variable under the new key, in the background (`-full`).
    pub full: bool,
}

/// `Keyring.ListPublic`: the public keys that verify workload identities, from the
/// answering server's state (client agents serve `/.well-known/jwks.json` with them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyringListPublicRequest;

/// One public key of [`KeyringPublicKeys`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyringPublicKey {
    /// The root key's ID (the tokens' `kid`).
    pub key_id: String,
    /// The Ed25519 public key.
    pub public_key: Vec<u8>,
    /// When the root key was made, Unix nanoseconds.
    pub create_time: i64,
}

/// The answer to `Keyring.ListPublic`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyringPublicKeys {
    /// Every key but deprecated ones.
    pub keys: Vec<KeyringPublicKey>,
    /// `server.root_key_rotation_threshold`, in seconds (how long the set is cached).
    pub rotation_threshold_secs: u64,
    /// `server.oidc_issuer` (empty: none).
    pub oidc_issuer: String,
    /// The index of the state answered from.
    pub index: u64,
}

/// `Keyring.Delete`: remove a root key (never the active one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyringDeleteRequest {
    /// The key's ID.
    pub key_id: String,
}
