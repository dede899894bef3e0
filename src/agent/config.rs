//! Agent configuration: one TOML file (every key optional), overridden by command-line flags
//! and `TEAMSTER_*` environment variables (clap reads both).
//!
//! Durations are strings such as `"10s"` or `"5m"`. Unknown keys are refused, and every error
//! names the file and the key, so a typo never silently falls back to a default.
//!
//! ```toml
//! name = "server-1"
//! data_dir = "/var/lib/teamster"
//! bind_addr = "0.0.0.0"
//! advertise_addr = "10.0.0.5"
//!
//! [ports]
//! http = 4646
//! rpc = 4647
//!
//! [server]
//! enabled = true
//! bootstrap_expect = 3
//! join = ["10.0.0.6:4647", "10.0.0.7:4647"]
//! ```

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The scheduler types a worker can serve. `_core` is the garbage-collection scheduler and
/// must always be enabled.
pub const KNOWN_SCHEDULERS: &[&str] = &["service", "batch", "system", "sysbatch", "_core"];

/// The most scheduler workers one server may run.
pub const MAX_SCHEDULERS: usize = 256;

/// What is wrong with a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML for this schema (unknown key, wrong type, bad duration…).
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// toml's message, which names the key and the line.
        message: String,
    },
    /// A key has a value the agent cannot run with.
    #[error("{origin}: `{key}`: {reason}")]
    Invalid {
        /// The file the key came from, or "command line" / "defaults".
        origin: String,
        /// The dotted key, e.g. `server.num_schedulers`.
        key: &'static str,
        /// What is wrong and what is allowed.
        reason: String,
    },
}

/// The whole agent configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// This agent's name; the host name by default.
    pub name: String,
    /// Where the server keeps its raft log and snapshots and the client its task state.
    /// Required unless in dev mode.
    pub data_dir: Option<PathBuf>,
    /// The address the HTTP and RPC listeners bind.
    pub bind_addr: IpAddr,
    /// The address other agents use to reach this one; `bind_addr` when that is not
    /// `0.0.0.0`, otherwise the address of the default route's interface.
    pub advertise_addr: Option<IpAddr>,
    /// `trace`, `debug`, `info`, `warn` or `error`, or a full `tracing` filter.
    pub log_level: String,
    /// Log lines as JSON objects.
    pub log_json: bool,
    /// Listener ports.
    pub ports: Ports,
    /// The server role.
    pub server: ServerConfig,
    /// The client role.
    pub client: ClientConfig,
}

/// Listener ports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Ports {
    /// The HTTP API.
    pub http: u16,
    /// RPC: raft between servers, forwarded calls, client agents.
    pub rpc: u16,
}

impl Default for Ports {
    fn default() -> Self {
        Ports {
            http: 4646,
            rpc: 4647,
        }
    }
}

/// The server role.
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
    /// Raft timing and log compaction.
    pub raft: RaftTiming,
    /// Scheduler worker timings and garbage-collection thresholds.
    pub workers: crate::server::worker::WorkerConfig,
    /// The leader's eval broker and plan applier (`[server.eval_broker]`).
    pub eval_broker: crate::server::pipeline::EvalBrokerSettings,
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
            raft: RaftTiming::default(),
            workers: crate::server::worker::WorkerConfig::default(),
            eval_broker: Default::default(),
        }
    }
}

/// Raft's timing profile and log compaction. Tests shrink the timings; the logic is the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RaftTiming {
    /// How often the leader sends heartbeats; also the AppendEntries timeout, so it must
    /// exceed the slowest follower's fsync.
    #[serde(with = "duration_str")]
    pub heartbeat_interval: Duration,
    /// The shortest election timeout; each election waits a random time in [min, 2 × min).
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
}

impl Default for RaftTiming {
    fn default() -> Self {
        RaftTiming {
            heartbeat_interval: Duration::from_millis(200),
            election_timeout: Duration::from_millis(1000),
            install_snapshot_timeout: Duration::from_secs(30),
            snapshot_threshold: 8192,
            trailing_logs: 2048,
            max_append_entries: 64,
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
}

/// The client role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClientConfig {
    /// Run a client in this agent.
    pub enabled: bool,
    /// RPC addresses of servers to register with (`host:port`, port 4647 when omitted).
    pub servers: Vec<String>,
    /// The node's datacenter.
    pub datacenter: String,
    /// The node's class, used in constraints and to group nodes.
    pub node_class: String,
    /// Task drivers this node offers.
    pub drivers: Vec<String>,
    /// Resources kept back from scheduling.
    pub reserved: Reserved,
    /// Free-form node metadata (`${meta.key}` in constraints).
    pub meta: BTreeMap<String, String>,
    /// Total CPU to advertise in MHz (0: fingerprinted).
    pub cpu_total_compute: u64,
    /// Total memory to advertise in MB (0: fingerprinted).
    pub memory_total_mb: u64,
    /// How often changed allocation states are sent to the servers, in one batch.
    #[serde(with = "duration_str")]
    pub update_interval: Duration,
    /// The longest kill timeout a task may ask for.
    #[serde(with = "duration_str")]
    pub max_kill_timeout: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            enabled: false,
            servers: Vec::new(),
            datacenter: "dc1".to_string(),
            node_class: String::new(),
            drivers: vec!["raw_exec".to_string(), "mock".to_string()],
            reserved: Reserved::default(),
            meta: BTreeMap::new(),
            cpu_total_compute: 0,
            memory_total_mb: 0,
            update_interval: Duration::from_millis(200),
            max_kill_timeout: Duration::from_secs(30),
        }
    }
}

/// Resources a client keeps back from scheduling.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Reserved {
    /// CPU in MHz.
    pub cpu: u64,
    /// Memory in MiB.
    pub memory_mb: u64,
    /// Disk in MiB.
    pub disk_mb: u64,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            name: default_name(),
            data_dir: None,
            bind_addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            advertise_addr: None,
            log_level: "info".to_string(),
            log_json: false,
            ports: Ports::default(),
            server: ServerConfig::default(),
            client: ClientConfig::default(),
        }
    }
}

fn default_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "teamster".to_string())
}

impl AgentConfig {
    /// Read a config file, refusing unknown keys and bad values with the file and key named.
    pub fn from_file(path: &Path) -> Result<AgentConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml(&text, path)
    }

    /// Parse config text; `path` is only used in messages.
    pub fn from_toml(text: &str, path: &Path) -> Result<AgentConfig, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })
    }

    /// The dev profile: one server and one client in this process, bootstrap 1, loopback.
    pub fn dev() -> AgentConfig {
        let mut c = AgentConfig {
            name: format!("{}-dev", default_name()),
            bind_addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
            ..AgentConfig::default()
        };
        c.server.enabled = true;
        c.server.bootstrap_expect = 1;
        c.client.enabled = true;
        c
    }

    /// A lone server for in-process tests and benchmarks: the dev profile without the client
    /// role or scheduler workers (evaluations are driven by hand), on ephemeral ports, with
    /// its data under `data_dir`.
    pub fn lone_server(data_dir: &std::path::Path) -> AgentConfig {
        let mut c = AgentConfig::dev();
        c.client.enabled = false;
        c.server.num_schedulers = 0;
        c.ports.http = 0;
        c.ports.rpc = 0;
        c.data_dir = Some(data_dir.to_path_buf());
        c
    }

    /// Check every value; `origin` names where the config came from for the message.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        let bad = |key: &'static str, reason: String| ConfigError::Invalid {
            origin: origin.to_string(),
            key,
            reason,
        };
        if self.name.trim().is_empty() {
            return Err(bad("name", "must not be empty".into()));
        }
        if !self.server.enabled && !self.client.enabled {
            return Err(bad(
                "server.enabled",
                "neither the server nor the client role is enabled".into(),
            ));
        }
        if self.data_dir.is_none() {
            return Err(bad("data_dir", "is required (or run with --dev)".into()));
        }
        if self.client.enabled && !self.server.enabled && self.client.servers.is_empty() {
            return Err(bad(
                "client.servers",
                "is required when the server role is disabled".into(),
            ));
        }
        if self.ports.http == 0 && self.ports.rpc == 0 {
            // Port 0 asks the OS for a free port; allowed for tests, fine for both.
        }
        if self.ports.http != 0 && self.ports.http == self.ports.rpc {
            return Err(bad(
                "ports.rpc",
                format!("must differ from ports.http ({})", self.ports.http),
            ));
        }
        if let Some(a) = self.advertise_addr {
            if a.is_unspecified() {
                return Err(bad(
                    "advertise_addr",
                    format!("{a} is not an address others can reach"),
                ));
            }
        }
        parse_level(&self.log_level).map_err(|reason| bad("log_level", reason))?;
        self.server
            .validate()
            .map_err(|(key, reason)| bad(key, reason))?;
        self.client
            .validate()
            .map_err(|(key, reason)| bad(key, reason))?;
        Ok(())
    }

    /// The address other agents reach this one at.
    pub fn advertise_ip(&self) -> IpAddr {
        if let Some(a) = self.advertise_addr {
            return a;
        }
        if !self.bind_addr.is_unspecified() {
            return self.bind_addr;
        }
        default_route_ip().unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
    }

    /// Where the HTTP listener binds.
    pub fn http_bind(&self) -> SocketAddr {
        SocketAddr::new(self.bind_addr, self.ports.http)
    }

    /// Where the RPC listener binds.
    pub fn rpc_bind(&self) -> SocketAddr {
        SocketAddr::new(self.bind_addr, self.ports.rpc)
    }
}

impl ServerConfig {
    fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.num_schedulers > MAX_SCHEDULERS {
            return Err((
                "server.num_schedulers",
                format!(
                    "must be between 0 and {MAX_SCHEDULERS}, got {}",
                    self.num_schedulers
                ),
            ));
        }
        validate_schedulers(&self.enabled_schedulers)
            .map_err(|r| ("server.enabled_schedulers", r))?;
        for addr in &self.join {
            parse_peer_addr(addr).map_err(|r| ("server.join", r))?;
        }
        if self.join_retry_interval.is_zero() {
            return Err(("server.join_retry_interval", "must be positive".into()));
        }
        if self.raft_sync_limit.is_zero() {
            return Err(("server.raft_sync_limit", "must be positive".into()));
        }
        if self.min_heartbeat_ttl.is_zero() {
            return Err(("server.min_heartbeat_ttl", "must be positive".into()));
        }
        if !(self.max_heartbeats_per_second > 0.0 && self.max_heartbeats_per_second.is_finite()) {
            return Err((
                "server.max_heartbeats_per_second",
                format!(
                    "must be a positive number, got {}",
                    self.max_heartbeats_per_second
                ),
            ));
        }
        if self.rpc_hold_timeout.is_zero() {
            return Err(("server.rpc_hold_timeout", "must be positive".into()));
        }
        if self.failover_heartbeat_ttl.is_zero() {
            return Err(("server.failover_heartbeat_ttl", "must be positive".into()));
        }
        self.workers.validate()?;
        self.eval_broker.validate()?;
        self.raft.validate()
    }
}

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

impl RaftTiming {
    fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.heartbeat_interval.is_zero() {
            return Err(("server.raft.heartbeat_interval", "must be positive".into()));
        }
        if self.election_timeout <= self.heartbeat_interval * 2 {
            return Err((
                "server.raft.election_timeout",
                format!(
                    "must be more than twice server.raft.heartbeat_interval ({})",
                    humantime::format_duration(self.heartbeat_interval)
                ),
            ));
        }
        if self.install_snapshot_timeout < self.heartbeat_interval {
            return Err((
                "server.raft.install_snapshot_timeout",
                "must be at least server.raft.heartbeat_interval".into(),
            ));
        }
        if self.snapshot_threshold == 0 {
            return Err(("server.raft.snapshot_threshold", "must be positive".into()));
        }
        if self.max_append_entries == 0 {
            return Err(("server.raft.max_append_entries", "must be positive".into()));
        }
        Ok(())
    }
}

impl ClientConfig {
    fn validate(&self) -> Result<(), (&'static str, String)> {
        for addr in &self.servers {
            parse_peer_addr(addr).map_err(|r| ("client.servers", r))?;
        }
        if self.datacenter.trim().is_empty() {
            return Err(("client.datacenter", "must not be empty".into()));
        }
        if self.update_interval.is_zero() || self.update_interval > Duration::from_secs(60) {
            return Err((
                "client.update_interval",
                "must be between 1ms and 60s".into(),
            ));
        }
        if self.max_kill_timeout.is_zero() {
            return Err(("client.max_kill_timeout", "must be positive".into()));
        }
        for d in &self.drivers {
            if !["raw_exec", "mock"].contains(&d.as_str()) {
                return Err((
                    "client.drivers",
                    format!("unknown driver {d:?} (known: raw_exec, mock)"),
                ));
            }
        }
        Ok(())
    }
}

/// Parse a peer address `host[:port]`, defaulting the port to 4647. The host may be a name;
/// it is resolved when dialled.
pub fn parse_peer_addr(s: &str) -> Result<(String, u16), String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("an address must not be empty".into());
    }
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Ok((sa.ip().to_string(), sa.port()));
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok((ip.to_string(), 4647));
    }
    match s.rsplit_once(':') {
        Some((host, port)) => {
            let port: u16 = port
                .parse()
                .map_err(|_| format!("{s:?}: port {port:?} is not a number from 1 to 65535"))?;
            if host.is_empty() || port == 0 {
                return Err(format!("{s:?} is not host:port"));
            }
            Ok((host.to_string(), port))
        }
        None => Ok((s.to_string(), 4647)),
    }
}

fn parse_level(level: &str) -> Result<(), String> {
    match level {
        "trace" | "debug" | "info" | "warn" | "error" => Ok(()),
        other => tracing_subscriber::EnvFilter::try_new(other)
            .map(|_| ())
            .map_err(|e| format!("{other:?} is not a log level or filter: {e}")),
    }
}

/// The source address the kernel would use for the default route, found without sending a
/// packet (a UDP `connect` only picks a route).
fn default_route_ip() -> Option<IpAddr> {
    let sock = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    sock.connect("192.0.2.1:9").ok()?;
    let ip = sock.local_addr().ok()?.ip();
    (!ip.is_unspecified()).then_some(ip)
}

/// (De)serialize a `Duration` as a human string: `"10s"`, `"1m30s"`, `"250ms"`.
pub mod duration_str {
    use super::*;

    /// Write the duration as a humantime string.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    /// Read a humantime string such as `"10s"`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s).map_err(|e| {
            serde::de::Error::custom(format!("{s:?} is not a duration like \"10s\": {e}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AgentConfig, ConfigError> {
        AgentConfig::from_toml(text, Path::new("agent.toml"))
    }

    #[test]
    fn the_architecture_example_parses() {
        let c = parse(
            r#"
name = "server-1"
data_dir = "/var/lib/teamster"
bind_addr = "0.0.0.0"
advertise_addr = "10.0.0.5"
log_level = "info"
log_json = false
[ports]
http = 4646
rpc = 4647
[server]
enabled = true
bootstrap_expect = 3
join = ["10.0.0.6:4647", "10.0.0.7:4647"]
num_schedulers = 4
enabled_schedulers = ["service", "batch", "system", "sysbatch", "_core"]
raft_sync_limit = "5s"
heartbeat_grace = "10s"
failover_heartbeat_ttl = "5m"
[client]
enabled = true
servers = ["10.0.0.5:4647"]
datacenter = "dc1"
node_class = ""
drivers = ["raw_exec", "mock"]
reserved = { cpu = 100, memory_mb = 256 }
meta = { rack = "r1" }
"#,
        )
        .unwrap();
        c.validate("agent.toml").unwrap();
        assert_eq!(c.server.bootstrap_expect, 3);
        assert_eq!(c.server.failover_heartbeat_ttl, Duration::from_secs(300));
        assert_eq!(c.client.reserved.memory_mb, 256);
        assert_eq!(c.client.meta["rack"], "r1");
        assert_eq!(c.advertise_ip().to_string(), "10.0.0.5");
    }

    #[test]
    fn an_unknown_key_names_the_key_and_the_file() {
        let e = parse("[server]\nenabled = true\nbootstrap_expekt = 3\n").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("agent.toml"), "{msg}");
        assert!(msg.contains("bootstrap_expekt"), "{msg}");
    }

    #[test]
    fn a_bad_duration_names_the_key() {
        let e = parse("[server]\nraft_sync_limit = \"soon\"\n").unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("raft_sync_limit"), "{msg}");
        assert!(msg.contains("soon"), "{msg}");
    }

    #[test]
    fn a_wrong_type_names_the_key() {
        let e = parse("[ports]\nhttp = \"web\"\n").unwrap_err();
        assert!(e.to_string().contains("http"), "{e}");
    }

    #[test]
    fn validation_names_the_key() {
        let mut c = AgentConfig::dev();
        c.data_dir = Some("/tmp/x".into());
        c.validate("f").unwrap();

        c.server.num_schedulers = 300;
        let e = c.validate("f").unwrap_err().to_string();
        assert!(
            e.contains("server.num_schedulers") && e.contains("300"),
            "{e}"
        );

        c.server.num_schedulers = 4;
        c.server.enabled_schedulers = vec!["service".into()];
        let e = c.validate("f").unwrap_err().to_string();
        assert!(e.contains("_core"), "{e}");

        c.server.enabled_schedulers = vec!["_core".into(), "batch".into(), "cron".into()];
        let e = c.validate("f").unwrap_err().to_string();
        assert!(e.contains("cron"), "{e}");

        c.server.enabled_schedulers = vec!["_core".into()];
        c.server.join = vec!["host:port".into()];
        let e = c.validate("f").unwrap_err().to_string();
        assert!(e.contains("server.join"), "{e}");

        c.server.join = vec![];
        c.server.raft.election_timeout = c.server.raft.heartbeat_interval;
        let e = c.validate("f").unwrap_err().to_string();
        assert!(e.contains("server.raft.election_timeout"), "{e}");
    }

    #[test]
    fn data_dir_is_required_outside_dev_mode() {
        let mut c = AgentConfig::default();
        c.server.enabled = true;
        let e = c.validate("agent.toml").unwrap_err().to_string();
        assert!(e.contains("data_dir"), "{e}");
    }

    #[test]
    fn peer_addresses_default_the_port() {
        assert_eq!(
            parse_peer_addr("10.0.0.1").unwrap(),
            ("10.0.0.1".into(), 4647)
        );
        assert_eq!(
            parse_peer_addr("server1:5647").unwrap(),
            ("server1".into(), 5647)
        );
        assert_eq!(
            parse_peer_addr("server1").unwrap(),
            ("server1".into(), 4647)
        );
        assert!(parse_peer_addr("server1:0").is_err());
        assert!(parse_peer_addr("").is_err());
    }

    #[test]
    fn durations_round_trip_through_toml() {
        let c = AgentConfig::dev();
        let text = toml::to_string(&c).unwrap();
        let back = parse(&text).unwrap();
        assert_eq!(back, c);
    }
}
