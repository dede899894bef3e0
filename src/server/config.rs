//! The server role's configuration: the `[server]` section of the agent's TOML file and its
//! sub-sections `[server.raft]`, `[server.workers]`, `[server.eval_broker]` and
//! `[server.autoscaler]` (with its `[server.autoscaler.docker]`) — one struct
//! per section, each with Nomad's defaults, a `for_tests()` profile where tests shrink
//! timings (never logic), and a `validate()` whose error names the dotted key.
//!
//! Durations are strings such as `"10s"` ([`crate::util::duration_str`]). Unknown keys are
//! refused. `docs/configuration.md` lists every key with its default.
//!
//! May import: `util` only; every server subsystem reads its settings from here.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::util::net::parse_peer_addr;
use crate::util::{duration_str, InvalidSetting};

/// The scheduler types a worker can serve. `_core` is the garbage-collection scheduler and
/// must always be enabled.
pub const KNOWN_SCHEDULERS: &[&str] = &["service", "batch", "system", "sysbatch", "_core"];

/// The most scheduler workers one server may run.
pub const MAX_SCHEDULERS: usize = 256;

/// Most cancelable evals written as canceled in one raft entry: Nomad's
/// `MaxUUIDsPerWriteRequest` (7281) divided by ten.
pub const CANCELABLE_BATCH_SIZE: usize = 728;

/// Upper bound for [`EvalBrokerConfig::cancelable_batch_size`] (Nomad's
/// `MaxUUIDsPerWriteRequest`), so one cancel write stays a reasonable raft entry.
pub const MAX_CANCELABLE_BATCH_SIZE: usize = 7281;

/// The `[server]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Run a server in this agent.
    pub enabled: bool,
    /// How many servers to wait for before the cluster is formed. 0: never bootstrap; only
    /// join an existing cluster through `join`.
    pub bootstrap_expect: usize,
    /// RPC addresses (`host:port`, port 4647 when omitted) of other servers, retried until one
    /// answers.
    pub join: Vec<String>,
    /// How long to wait between rounds of join attempts.
    #[serde(with = "duration_str")]
    pub join_retry_interval: Duration,
    /// Scheduler workers on this server.
    pub num_schedulers: usize,
    /// The scheduler types the workers serve.
    pub enabled_schedulers: Vec<String>,
    /// How long a worker waits for its state to reach an evaluation's index before it nacks.
    #[serde(with = "duration_str")]
    pub raft_sync_limit: Duration,
    /// Extra time past a node's TTL before it is marked down.
    #[serde(with = "duration_str")]
    pub heartbeat_grace: Duration,
    /// The smallest heartbeat TTL handed to a node.
    #[serde(with = "duration_str")]
    pub min_heartbeat_ttl: Duration,
    /// Heartbeats per second the leader aims to receive from all nodes together.
    pub max_heartbeats_per_second: f64,
    /// The TTL every live node gets when a new leader takes over.
    #[serde(with = "duration_str")]
    pub failover_heartbeat_ttl: Duration,
    /// How long a request waits for a leader (during an election) before it fails with
    /// "No cluster leader".
    #[serde(with = "duration_str")]
    pub rpc_hold_timeout: Duration,
    /// How many versions of each job are kept for `job history` and `job revert` (Nomad's
    /// `job_tracked_versions`, default 6; a stable version is kept in place of the oldest).
    pub job_max_versions: u32,
    /// The most allocations one job may ask for, summed over its groups (Nomad's
    /// `job_max_count`, default 50 000; 0: no limit).
    pub job_max_count: u32,
    /// Raft timing and log compaction (`[server.raft]`).
    pub raft: RaftTiming,
    /// Scheduler worker timings and garbage-collection thresholds (`[server.workers]`).
    pub workers: WorkerConfig,
    /// The leader's eval broker, reapers and plan applier (`[server.eval_broker]`).
    pub eval_broker: EvalBrokerConfig,
    /// Capacity on demand: client nodes created and stopped by the leader
    /// (`[server.autoscaler]`).
    pub autoscaler: AutoscalerConfig,
    /// The `iss` claim of workload identities and the issuer the OIDC discovery document
    /// (`/.well-known/openid-configuration`) names; empty: no issuer, discovery off (Nomad's
    /// `oidc_issuer`).
    pub oidc_issuer: String,
    /// How old the active root key gets before the leader rotates it (Nomad's
    /// `root_key_rotation_threshold`).
    #[serde(with = "duration_str")]
    pub root_key_rotation_threshold: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            enabled: false,
            bootstrap_expect: 0,
            join: Vec::new(),
            join_retry_interval: Duration::from_secs(2),
            num_schedulers: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            enabled_schedulers: KNOWN_SCHEDULERS.iter().map(|s| s.to_string()).collect(),
            raft_sync_limit: Duration::from_secs(5),
            heartbeat_grace: Duration::from_secs(10),
            min_heartbeat_ttl: Duration::from_secs(10),
            max_heartbeats_per_second: 50.0,
            failover_heartbeat_ttl: Duration::from_secs(300),
            rpc_hold_timeout: Duration::from_secs(5),
            job_max_versions: teamster_storage::state::JOB_TRACKED_VERSIONS as u32,
            job_max_count: DEFAULT_JOB_MAX_COUNT,
            raft: RaftTiming::default(),
            workers: WorkerConfig::default(),
            eval_broker: EvalBrokerConfig::default(),
            autoscaler: AutoscalerConfig::default(),
            oidc_issuer: String::new(),
            root_key_rotation_threshold: Duration::from_secs(720 * 3600),
        }
    }
}

impl ServerConfig {
    /// Checks every value of the section and its sub-sections.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if self.num_schedulers > MAX_SCHEDULERS {
            return Err(InvalidSetting::new(
                "server.num_schedulers",
                format!(
                    "must be between 0 and {MAX_SCHEDULERS}, got {}",
                    self.num_schedulers
                ),
            ));
        }
        validate_schedulers(&self.enabled_schedulers)
            .map_err(|r| InvalidSetting::new("server.enabled_schedulers", r))?;
        for addr in &self.join {
            parse_peer_addr(addr).map_err(|r| InvalidSetting::new("server.join", r))?;
        }
        for (key, d) in [
            ("server.join_retry_interval", self.join_retry_interval),
            ("server.raft_sync_limit", self.raft_sync_limit),
            ("server.min_heartbeat_ttl", self.min_heartbeat_ttl),
            ("server.rpc_hold_timeout", self.rpc_hold_timeout),
            ("server.failover_heartbeat_ttl", self.failover_heartbeat_ttl),
            (
                "server.root_key_rotation_threshold",
                self.root_key_rotation_threshold,
            ),
        ] {
            if d.is_zero() {
                return Err(InvalidSetting::new(key, "must be positive"));
            }
        }
        let issuer = &self.oidc_issuer;
        if !(issuer.is_empty() || issuer.starts_with("https://") || issuer.starts_with("http://")) {
            return Err(InvalidSetting::new(
                "server.oidc_issuer",
                format!("must be an http(s) URL, got {:?}", self.oidc_issuer),
            ));
        }
        if !(self.max_heartbeats_per_second > 0.0 && self.max_heartbeats_per_second.is_finite()) {
            return Err(InvalidSetting::new(
                "server.max_heartbeats_per_second",
                format!(
                    "must be a positive number, got {}",
                    self.max_heartbeats_per_second
                ),
            ));
        }
        if !(1..=MAX_JOB_VERSIONS).contains(&self.job_max_versions) {
            return Err(InvalidSetting::new(
                "server.job_max_versions",
                format!(
                    "must be between 1 and {MAX_JOB_VERSIONS}, got {}",
                    self.job_max_versions
                ),
            ));
        }
        self.workers.validate()?;
        self.eval_broker.validate()?;
        self.autoscaler.validate()?;
        self.raft.validate()
    }
}

/// Nomad's default `job_max_count`.
pub const DEFAULT_JOB_MAX_COUNT: u32 = 50_000;

/// The most versions of a job `server.job_max_versions` may keep.
pub const MAX_JOB_VERSIONS: u32 = 100;

/// Check a list of scheduler types: known names, no duplicates, `_core` present.
pub fn validate_schedulers(list: &[String]) -> Result<(), String> {
    for s in list {
        if !KNOWN_SCHEDULERS.contains(&s.as_str()) {
            return Err(format!(
                "unknown scheduler {s:?} (known: {})",
                KNOWN_SCHEDULERS.join(", ")
            ));
        }
    }
    for (i, s) in list.iter().enumerate() {
        if list[..i].contains(s) {
            return Err(format!("scheduler {s:?} is listed twice"));
        }
    }
    if !list.iter().any(|s| s == "_core") {
        return Err("must include \"_core\"".into());
    }
    Ok(())
}

/// Raft's timing profile and log compaction (`[server.raft]`). Tests shrink the timings; the
/// logic is the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RaftTiming {
    /// How often the leader sends heartbeats; also the AppendEntries timeout, so it must
    /// exceed the slowest follower's fsync.
    #[serde(with = "duration_str")]
    pub heartbeat_interval: Duration,
    /// The shortest election timeout; each election waits a random time in [min, 2 × min).
    /// A follower that hears from no leader stands after 3× to 4× this (openraft adds the
    /// old leader's lease, the upper bound, before the random wait): `400ms` puts a crashed
    /// leader's successor at 1.2–1.6 s.
    #[serde(with = "duration_str")]
    pub election_timeout: Duration,
    /// Timeout for sending (and installing) the last snapshot chunk.
    #[serde(with = "duration_str")]
    pub install_snapshot_timeout: Duration,
    /// Build a snapshot after this many entries since the last one.
    pub snapshot_threshold: u64,
    /// Log entries kept behind a snapshot, so a briefly lagging follower can catch up from the
    /// log instead of a snapshot.
    pub trailing_logs: u64,
    /// Most entries in one AppendEntries (64, as hashicorp/raft's `MaxAppendEntries`). Entries
    /// can be large (a plan of 1 000 allocations is a few hundred kB), so this also bounds
    /// the memory a follower's catch-up takes and keeps each append within the heartbeat
    /// interval that is its timeout.
    pub max_append_entries: u64,
    /// A leader whose requests no quorum has acknowledged for this long (counted from when
    /// the latest acknowledged one was sent) stops serving writes and default-consistency
    /// reads (`1s`; hashicorp/raft's `LeaderLeaseTimeout` is 500 ms counted from the answers).
    /// It makes an isolated leader refuse sooner; reads do not rely on it (they confirm with a
    /// quorum), so it may exceed the election timeout where followers answer slowly.
    #[serde(with = "duration_str")]
    pub leader_lease_timeout: Duration,
    /// How long a leader that is stopping (SIGTERM, SIGINT) tries to hand leadership to an
    /// up-to-date voter before it stops anyway (`5s`; `0s`: it does not try, the others
    /// elect after their election timeout).
    #[serde(with = "duration_str")]
    pub leadership_transfer_timeout: Duration,
}

impl Default for RaftTiming {
    fn default() -> Self {
        RaftTiming {
            heartbeat_interval: Duration::from_millis(150),
            election_timeout: Duration::from_millis(400),
            install_snapshot_timeout: Duration::from_secs(30),
            snapshot_threshold: 8192,
            trailing_logs: 2048,
            max_append_entries: 64,
            leader_lease_timeout: Duration::from_secs(1),
            leadership_transfer_timeout: Duration::from_secs(5),
        }
    }
}

impl RaftTiming {
    /// A fast profile for tests on loopback: elections in a few hundred milliseconds.
    pub fn for_tests() -> Self {
        RaftTiming {
            heartbeat_interval: Duration::from_millis(50),
            election_timeout: Duration::from_millis(300),
            ..RaftTiming::default()
        }
    }

    /// Checks every value.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if self.leader_lease_timeout <= self.heartbeat_interval {
            return Err(InvalidSetting::new(
                "server.raft.leader_lease_timeout",
                format!(
                    "must be more than server.raft.heartbeat_interval ({}): a quorum answers \
                     once per heartbeat",
                    humantime::format_duration(self.heartbeat_interval)
                ),
            ));
        }
        if self.heartbeat_interval.is_zero() {
            return Err(InvalidSetting::new(
                "server.raft.heartbeat_interval",
                "must be positive",
            ));
        }
        if self.election_timeout <= self.heartbeat_interval * 2 {
            return Err(InvalidSetting::new(
                "server.raft.election_timeout",
                format!(
                    "must be more than twice server.raft.heartbeat_interval ({})",
                    humantime::format_duration(self.heartbeat_interval)
                ),
            ));
        }
        if self.install_snapshot_timeout < self.heartbeat_interval {
            return Err(InvalidSetting::new(
                "server.raft.install_snapshot_timeout",
                "must be at least server.raft.heartbeat_interval",
            ));
        }
        if self.snapshot_threshold == 0 {
            return Err(InvalidSetting::new(
                "server.raft.snapshot_threshold",
                "must be positive",
            ));
        }
        if self.max_append_entries == 0 {
            return Err(InvalidSetting::new(
                "server.raft.max_append_entries",
                "must be positive",
            ));
        }
        Ok(())
    }
}

/// Worker timings and garbage-collection thresholds (`[server.workers]`). Every constant of
/// the worker loop is here, so tests shrink them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkerConfig {
    /// How long one `Eval.Dequeue` waits for work (so pause and stop are noticed).
    #[serde(with = "duration_str")]
    pub dequeue_timeout: Duration,
    /// After a raft-sync timeout, keep waiting up to this many × `raft_sync_limit` for the
    /// same index before dequeuing again (a server catching up must not churn evaluations).
    pub catch_up_factor: u32,
    /// First backoff after a failed dequeue.
    #[serde(with = "duration_str")]
    pub dequeue_backoff_base: Duration,
    /// Longest backoff after failed dequeues.
    #[serde(with = "duration_str")]
    pub dequeue_backoff_limit: Duration,
    /// First backoff after a transient planner error (no leader, plan queue disabled).
    #[serde(with = "duration_str")]
    pub plan_backoff_base: Duration,
    /// Longest backoff after transient planner errors.
    #[serde(with = "duration_str")]
    pub plan_backoff_limit: Duration,
    /// Backoff when the leader runs another scheduler version.
    #[serde(with = "duration_str")]
    pub version_mismatch_backoff: Duration,
    /// Attempts of one planner call (plan, eval update/create/reblock) on transient errors.
    pub planner_attempts: u32,
    /// Deadline of one call to the leader (a dequeue gets this on top of its own timeout).
    #[serde(with = "duration_str")]
    pub rpc_timeout: Duration,
    /// Dequeue errors in the first moments after start are expected (no leader yet) and
    /// logged at debug level only.
    #[serde(with = "duration_str")]
    pub dequeue_error_grace: Duration,
    /// How long the server waits for its workers at shutdown.
    #[serde(with = "duration_str")]
    pub shutdown_grace: Duration,
    /// Terminal evaluations (and their terminal allocations) older than this are collected.
    #[serde(with = "duration_str")]
    pub eval_gc_threshold: Duration,
    /// Stopped jobs whose allocations are all terminal are purged after this long.
    #[serde(with = "duration_str")]
    pub job_gc_threshold: Duration,
    /// How often the leader creates the periodic `_core` garbage-collection evaluations.
    #[serde(with = "duration_str")]
    pub core_gc_interval: Duration,
    /// Most evaluations one worker takes from the broker at once (`service` and `batch`
    /// evaluations already waiting join the first): they are scheduled on one snapshot,
    /// each seeing the placements of those before it, and their plans are submitted
    /// together. 1 turns batching off.
    pub max_batch: usize,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            dequeue_timeout: Duration::from_millis(500),
            catch_up_factor: 10,
            dequeue_backoff_base: Duration::from_millis(20),
            dequeue_backoff_limit: Duration::from_secs(10),
            plan_backoff_base: Duration::from_millis(500),
            plan_backoff_limit: Duration::from_secs(10),
            version_mismatch_backoff: Duration::from_secs(30),
            planner_attempts: 8,
            rpc_timeout: Duration::from_secs(30),
            dequeue_error_grace: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(5),
            eval_gc_threshold: Duration::from_secs(3600),
            job_gc_threshold: Duration::from_secs(4 * 3600),
            core_gc_interval: Duration::from_secs(300),
            max_batch: 32,
        }
    }
}

impl WorkerConfig {
    /// Checks every value; the error names the key (`server.workers.<key>`).
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        for (key, d) in [
            ("server.workers.dequeue_timeout", self.dequeue_timeout),
            (
                "server.workers.dequeue_backoff_base",
                self.dequeue_backoff_base,
            ),
            ("server.workers.plan_backoff_base", self.plan_backoff_base),
            (
                "server.workers.version_mismatch_backoff",
                self.version_mismatch_backoff,
            ),
            ("server.workers.rpc_timeout", self.rpc_timeout),
            ("server.workers.shutdown_grace", self.shutdown_grace),
            ("server.workers.core_gc_interval", self.core_gc_interval),
        ] {
            if d.is_zero() {
                return Err(InvalidSetting::new(key, "must be positive"));
            }
        }
        if self.dequeue_backoff_limit < self.dequeue_backoff_base {
            return Err(InvalidSetting::new(
                "server.workers.dequeue_backoff_limit",
                "must be at least server.workers.dequeue_backoff_base",
            ));
        }
        if self.plan_backoff_limit < self.plan_backoff_base {
            return Err(InvalidSetting::new(
                "server.workers.plan_backoff_limit",
                "must be at least server.workers.plan_backoff_base",
            ));
        }
        if !(1..=1024).contains(&self.max_batch) {
            return Err(InvalidSetting::new(
                "server.workers.max_batch",
                format!("must be within 1..=1024, not {}", self.max_batch),
            ));
        }
        if !(1..=100).contains(&self.catch_up_factor) {
            return Err(InvalidSetting::new(
                "server.workers.catch_up_factor",
                format!("must be within 1..=100, not {}", self.catch_up_factor),
            ));
        }
        if !(1..=100).contains(&self.planner_attempts) {
            return Err(InvalidSetting::new(
                "server.workers.planner_attempts",
                format!("must be within 1..=100, not {}", self.planner_attempts),
            ));
        }
        Ok(())
    }
}

/// The leader's eval broker, its reapers and the plan applier (`[server.eval_broker]`).
/// Defaults are Nomad's (`nomad/config.go`); the two fields without a TOML key are knobs for
/// tests and benchmarks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvalBrokerConfig {
    /// How long a delivery may stay un-acked before the broker nacks it itself, so a crashed
    /// or partitioned worker cannot hold an eval forever (`EvalNackTimeout`, 60 s).
    #[serde(with = "duration_str")]
    pub nack_timeout: Duration,
    /// Deliveries before an eval is given up and moved to the `_failed` queue, so a poison
    /// eval cannot crash workers forever (`EvalDeliveryLimit`, 3).
    pub delivery_limit: u32,
    /// Delay before re-enqueueing after the first failed delivery (1 s).
    #[serde(with = "duration_str")]
    pub nack_initial_reenqueue_delay: Duration,
    /// Compounding delay after later failed deliveries: (n−1) × this (20 s).
    #[serde(with = "duration_str")]
    pub nack_subsequent_reenqueue_delay: Duration,
    /// Fixed part of the `Wait` of a failed eval's follow-up (1 min).
    #[serde(with = "duration_str")]
    pub failed_followup_baseline_delay: Duration,
    /// Random part of that `Wait`, uniform in `[0, range)` (5 min), so failed evals of many
    /// jobs do not all retry at once.
    #[serde(with = "duration_str")]
    pub failed_followup_delay_range: Duration,
    /// Period of the cancelable reaper's straggler sweep; it also runs after every Ack (5 s).
    #[serde(with = "duration_str")]
    pub reap_cancelable_interval: Duration,
    /// Accepted plans committing at once in the plan applier's pipeline, counted in units of
    /// 1 000 changes (placements, stops, evictions): 8 lets eight C1M-sized plans commit at
    /// once, or up to 1 024 small ones, which the write batcher folds into one raft entry.
    pub plan_apply_pipeline: usize,
    /// Most cancelable evals the reaper writes per raft entry (728). No TOML key.
    #[serde(skip)]
    pub cancelable_batch_size: usize,
    /// Period of the broker's gauge emission (1 s). No TOML key.
    #[serde(skip)]
    pub stats_interval: Duration,
    /// How long the plan applier waits for its state to reach a plan's snapshot index (10 s).
    /// No TOML key.
    #[serde(skip)]
    pub plan_snapshot_wait: Duration,
}

impl Default for EvalBrokerConfig {
    fn default() -> Self {
        EvalBrokerConfig {
            nack_timeout: Duration::from_secs(60),
            delivery_limit: 3,
            nack_initial_reenqueue_delay: Duration::from_secs(1),
            nack_subsequent_reenqueue_delay: Duration::from_secs(20),
            failed_followup_baseline_delay: Duration::from_secs(60),
            failed_followup_delay_range: Duration::from_secs(5 * 60),
            reap_cancelable_interval: Duration::from_secs(5),
            plan_apply_pipeline: 8,
            cancelable_batch_size: CANCELABLE_BATCH_SIZE,
            stats_interval: Duration::from_secs(1),
            plan_snapshot_wait: Duration::from_secs(10),
        }
    }
}

impl EvalBrokerConfig {
    /// A profile for tests: the same logic with every delay shrunk to milliseconds or a few
    /// seconds, so real-time cluster tests finish quickly.
    pub fn for_tests() -> Self {
        EvalBrokerConfig {
            nack_timeout: Duration::from_secs(5),
            delivery_limit: 3,
            nack_initial_reenqueue_delay: Duration::from_millis(50),
            nack_subsequent_reenqueue_delay: Duration::from_millis(200),
            failed_followup_baseline_delay: Duration::from_millis(500),
            failed_followup_delay_range: Duration::from_millis(500),
            reap_cancelable_interval: Duration::from_millis(200),
            stats_interval: Duration::from_millis(100),
            ..EvalBrokerConfig::default()
        }
    }

    /// Checks every value; the error names the key (`server.eval_broker.<key>`).
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if self.nack_timeout.is_zero() {
            return Err(InvalidSetting::new(
                "server.eval_broker.nack_timeout",
                "must be positive",
            ));
        }
        if self.delivery_limit == 0 {
            return Err(InvalidSetting::new(
                "server.eval_broker.delivery_limit",
                "must be at least 1",
            ));
        }
        if self.reap_cancelable_interval.is_zero() {
            return Err(InvalidSetting::new(
                "server.eval_broker.reap_cancelable_interval",
                "must be positive",
            ));
        }
        if self.plan_apply_pipeline == 0 || self.plan_apply_pipeline > 64 {
            return Err(InvalidSetting::new(
                "server.eval_broker.plan_apply_pipeline",
                format!("must be between 1 and 64, got {}", self.plan_apply_pipeline),
            ));
        }
        if self.cancelable_batch_size == 0 || self.cancelable_batch_size > MAX_CANCELABLE_BATCH_SIZE
        {
            return Err(InvalidSetting::new(
                "server.eval_broker.cancelable_batch_size",
                format!("must be between 1 and {MAX_CANCELABLE_BATCH_SIZE}"),
            ));
        }
        if self.stats_interval.is_zero() {
            return Err(InvalidSetting::new(
                "server.eval_broker.stats_interval",
                "must be positive",
            ));
        }
        if self.plan_snapshot_wait.is_zero() {
            return Err(InvalidSetting::new(
                "server.eval_broker.plan_snapshot_wait",
                "must be positive",
            ));
        }
        Ok(())
    }

    /// The delay before re-enqueueing an eval nacked after `deliveries` deliveries
    /// (Nomad's `nackReenqueueDelay`): none before any delivery, the initial delay after the
    /// first, (n−1) × the subsequent delay after the n-th.
    pub fn nack_reenqueue_delay(&self, deliveries: u32) -> Duration {
        match deliveries {
            0 => Duration::ZERO,
            1 => self.nack_initial_reenqueue_delay,
            n => self.nack_subsequent_reenqueue_delay.saturating_mul(n - 1),
        }
    }
}

/// The providers `server.autoscaler.provider` may name.
pub const KNOWN_PROVIDERS: &[&str] = &["docker"];

/// The most nodes `server.autoscaler.max_nodes` may allow.
pub const MAX_AUTOSCALED_NODES: u32 = 1000;

/// Capacity on demand (`[server.autoscaler]`): while blocked evaluations that nodes of
/// `node_class` could help persist, the leader has a provider create such nodes, up to
/// `max_nodes`; nodes it created that stay idle for `idle_timeout` are stopped. Off by
/// default. See `server::autoscaler` and docs/operations.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AutoscalerConfig {
    /// Run the autoscaler on the leader.
    pub enabled: bool,
    /// Who creates nodes: `docker` (client containers on the local engine).
    pub provider: String,
    /// The class the created nodes register with (their client config's `node_class`):
    /// how the autoscaler tells its nodes from the others and which blocked evaluations
    /// they could help.
    pub node_class: String,
    /// Nodes kept even with no work (created at once; idle ones are not stopped below it).
    pub min_nodes: u32,
    /// The quota: the most nodes the autoscaler has at any time, counting those still
    /// starting and those being stopped.
    pub max_nodes: u32,
    /// How long a blocked evaluation must stay blocked (and how long since the last created
    /// node became ready) before another node is created.
    #[serde(with = "duration_str")]
    pub blocked_for: Duration,
    /// How long a created node must run no allocation (of a service or batch job; system
    /// jobs run everywhere and do not count) before it is stopped.
    #[serde(with = "duration_str")]
    pub idle_timeout: Duration,
    /// How long a created node may take to register and turn ready; one that does not is
    /// shut down and counted as failed.
    #[serde(with = "duration_str")]
    pub register_timeout: Duration,
    /// How often the autoscaler looks at the state and the provider.
    #[serde(with = "duration_str")]
    pub interval: Duration,
    /// The first pause after a provider error or a failed node; it doubles with every
    /// further failure in a row, up to `max_backoff`.
    #[serde(with = "duration_str")]
    pub backoff: Duration,
    /// The longest pause after failures.
    #[serde(with = "duration_str")]
    pub max_backoff: Duration,
    /// The docker provider (`[server.autoscaler.docker]`).
    pub docker: DockerProviderConfig,
}

impl Default for AutoscalerConfig {
    fn default() -> Self {
        AutoscalerConfig {
            enabled: false,
            provider: "docker".to_string(),
            node_class: String::new(),
            min_nodes: 0,
            max_nodes: 0,
            blocked_for: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            register_timeout: Duration::from_secs(120),
            interval: Duration::from_secs(2),
            backoff: Duration::from_secs(2),
            max_backoff: Duration::from_secs(120),
            docker: DockerProviderConfig::default(),
        }
    }
}

impl AutoscalerConfig {
    /// Checks every value; the error names the key (`server.autoscaler.<key>`). The
    /// provider's name is checked even while the autoscaler is off (a typo is an error); the
    /// rest only when it is on.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if !KNOWN_PROVIDERS.contains(&self.provider.as_str()) {
            return Err(InvalidSetting::new(
                "server.autoscaler.provider",
                format!(
                    "unknown provider {:?} (known: {})",
                    self.provider,
                    KNOWN_PROVIDERS.join(", ")
                ),
            ));
        }
        if !self.enabled {
            return Ok(());
        }
        if self.node_class.trim().is_empty() {
            return Err(InvalidSetting::new(
                "server.autoscaler.node_class",
                "is required when the autoscaler is enabled",
            ));
        }
        if self.max_nodes > MAX_AUTOSCALED_NODES {
            return Err(InvalidSetting::new(
                "server.autoscaler.max_nodes",
                format!(
                    "must be between 0 and {MAX_AUTOSCALED_NODES}, got {}",
                    self.max_nodes
                ),
            ));
        }
        if self.min_nodes > self.max_nodes {
            return Err(InvalidSetting::new(
                "server.autoscaler.min_nodes",
                format!(
                    "must not exceed server.autoscaler.max_nodes ({}), got {}",
                    self.max_nodes, self.min_nodes
                ),
            ));
        }
        for (key, d) in [
            ("server.autoscaler.idle_timeout", self.idle_timeout),
            ("server.autoscaler.register_timeout", self.register_timeout),
            ("server.autoscaler.interval", self.interval),
            ("server.autoscaler.backoff", self.backoff),
        ] {
            if d.is_zero() {
                return Err(InvalidSetting::new(key, "must be positive"));
            }
        }
        if self.max_backoff < self.backoff {
            return Err(InvalidSetting::new(
                "server.autoscaler.max_backoff",
                "must be at least server.autoscaler.backoff",
            ));
        }
        match self.provider.as_str() {
            "docker" => self.docker.validate(),
            _ => Ok(()),
        }
    }
}

/// The docker provider (`[server.autoscaler.docker]`): each node is a container of `image`
/// running `teamster agent` with `client_config`, on the engine at `socket`, attached to
/// `network`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DockerProviderConfig {
    /// The engine's unix socket (a path, or `unix://path`).
    pub socket: String,
    /// The image the containers run; it must be on the engine already (never pulled).
    pub image: String,
    /// The docker network the containers join: one on which they reach the servers (in the
    /// compose cluster, `<project>_cluster`).
    pub network: String,
    /// The client agent's TOML config, read by the server at start and copied into every
    /// container as `/etc/teamster/agent.toml`. Its `client.servers` must be reachable from
    /// `network`; its `client.node_class` is set to `server.autoscaler.node_class` (a
    /// different one is refused). The container's name becomes the node's name.
    pub client_config: String,
    /// How long a stopped container gets to shut down (SIGTERM) before it is killed.
    #[serde(with = "duration_str")]
    pub stop_timeout: Duration,
}

impl Default for DockerProviderConfig {
    fn default() -> Self {
        DockerProviderConfig {
            socket: "/var/run/docker.sock".to_string(),
            image: "teamster:dev".to_string(),
            network: String::new(),
            client_config: String::new(),
            stop_timeout: Duration::from_secs(10),
        }
    }
}

impl DockerProviderConfig {
    /// Checks every value; the error names the key (`server.autoscaler.docker.<key>`).
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        for (key, value) in [
            ("server.autoscaler.docker.socket", &self.socket),
            ("server.autoscaler.docker.image", &self.image),
            ("server.autoscaler.docker.network", &self.network),
            (
                "server.autoscaler.docker.client_config",
                &self.client_config,
            ),
        ] {
            if value.trim().is_empty() {
                return Err(InvalidSetting::new(
                    key,
                    "is required with provider = \"docker\"",
                ));
            }
        }
        if self.stop_timeout.is_zero() {
            return Err(InvalidSetting::new(
                "server.autoscaler.docker.stop_timeout",
                "must be positive",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_validates_its_defaults_and_names_the_key_it_refuses() {
        ServerConfig::default().validate().unwrap();
        EvalBrokerConfig::for_tests().validate().unwrap();
        let mut c = ServerConfig {
            num_schedulers: 300,
            ..ServerConfig::default()
        };
        assert_eq!(c.validate().unwrap_err().key, "server.num_schedulers");
        c.num_schedulers = 2;
        c.eval_broker.plan_apply_pipeline = 0;
        let e = c.validate().unwrap_err();
        assert_eq!(e.key, "server.eval_broker.plan_apply_pipeline");
        assert!(e.reason.contains("got 0"), "{e}");
        c.eval_broker = EvalBrokerConfig::default();
        c.workers.catch_up_factor = 0;
        assert_eq!(
            c.validate().unwrap_err().key,
            "server.workers.catch_up_factor"
        );
        c.workers = WorkerConfig {
            max_batch: 0,
            ..WorkerConfig::default()
        };
        let e = c.validate().unwrap_err();
        assert_eq!(e.key, "server.workers.max_batch");
        assert!(e.reason.contains("not 0"), "{e}");
        c.workers = WorkerConfig::default();
        c.raft.snapshot_threshold = 0;
        assert_eq!(
            c.validate().unwrap_err().key,
            "server.raft.snapshot_threshold"
        );
        c.raft = RaftTiming {
            leader_lease_timeout: Duration::from_millis(100),
            ..RaftTiming::default()
        };
        assert_eq!(
            c.validate().unwrap_err().key,
            "server.raft.leader_lease_timeout"
        );
    }

    #[test]
    fn the_knobs_without_a_key_are_not_read_from_toml() {
        let e = toml::from_str::<EvalBrokerConfig>("stats_interval = \"1s\"\n").unwrap_err();
        assert!(e.to_string().contains("stats_interval"), "{e}");
        let c: EvalBrokerConfig =
            toml::from_str("nack_initial_reenqueue_delay = \"3s\"\nplan_apply_pipeline = 4\n")
                .unwrap();
        assert_eq!(c.nack_reenqueue_delay(1), Duration::from_secs(3));
        assert_eq!(c.plan_apply_pipeline, 4);
        assert_eq!(c.cancelable_batch_size, CANCELABLE_BATCH_SIZE);
    }

    #[test]
    fn the_autoscaler_section_names_the_key_it_refuses() {
        let on = |extra: &str| {
            let text = format!(
                "enabled = true\nnode_class = \"auto\"\nmax_nodes = 2\n{extra}\n\
                 [docker]\nnetwork = \"net\"\nclient_config = \"/etc/c.toml\"\n"
            );
            toml::from_str::<AutoscalerConfig>(&text)
        };
        on("").unwrap().validate().unwrap();
        let key = |extra: &str| on(extra).unwrap().validate().unwrap_err().key;
        assert_eq!(key("provider = \"gce\""), "server.autoscaler.provider");
        assert_eq!(key("min_nodes = 3"), "server.autoscaler.min_nodes");
        assert_eq!(
            key("idle_timeout = \"0s\""),
            "server.autoscaler.idle_timeout"
        );
        assert_eq!(key("max_backoff = \"1s\""), "server.autoscaler.max_backoff");
        // A negative quota is not a number of nodes: the parse error names the key.
        let e = toml::from_str::<AutoscalerConfig>("enabled = true\nmax_nodes = -1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_nodes"), "{e}");
        // An unknown provider is refused even while the autoscaler is off.
        let off = AutoscalerConfig {
            provider: "gce".into(),
            ..AutoscalerConfig::default()
        };
        assert_eq!(
            off.validate().unwrap_err().key,
            "server.autoscaler.provider"
        );
        AutoscalerConfig::default().validate().unwrap();
        // The docker provider's required keys.
        let mut c = on("").unwrap();
        c.docker.network.clear();
        assert_eq!(
            c.validate().unwrap_err().key,
            "server.autoscaler.docker.network"
        );
        c.docker.network = "net".into();
        c.node_class.clear();
        assert_eq!(
            c.validate().unwrap_err().key,
            "server.autoscaler.node_class"
        );
    }
}
