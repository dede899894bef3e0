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
//!
//! [tls]
//! http = true
//! rpc = true
//! ca_file = "/etc/teamster/tls/nomad-agent-ca.pem"
//! cert_file = "/etc/teamster/tls/global-server-nomad.pem"
//! key_file = "/etc/teamster/tls/global-server-nomad-key.pem"
//! verify_server_hostname = true
//! verify_https_client = false
//! ```

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::acl::AclConfig;
use crate::client::config::ClientConfig;
use crate::server::config::ServerConfig;

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
    /// TLS on the HTTP and RPC ports.
    pub tls: TlsConfig,
    /// ACL enforcement (every server and client of a cluster must agree).
    pub acl: AclConfig,
    /// On SIGTERM, a server leaves the raft configuration after handing over any leadership
    /// (Nomad's `leave_on_terminate`): the others stop counting it in their quorum. A client
    /// agent has nothing to leave.
    pub leave_on_terminate: bool,
    /// The same on SIGINT (Nomad's `leave_on_interrupt`).
    pub leave_on_interrupt: bool,
    /// Bounds on what one client of the HTTP and RPC ports may hold (Nomad's `limits`).
    pub limits: LimitsConfig,
    /// What `/v1/metrics` publishes (Nomad's `telemetry`).
    pub telemetry: TelemetryConfig,
}

/// The `[telemetry]` section: Nomad's `telemetry` block, the part that shapes what
/// `/v1/metrics` answers (teamster has no statsd or other sinks to configure).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Publish every metric under Nomad's name and unit too (`nomad_raft_commitTime` in
    /// milliseconds beside `teamster_raft_commit_seconds`), and the families Nomad's
    /// dashboards read that teamster has no name of its own for (job summaries, client
    /// and host figures, runtime). On by default; `false` leaves only the `teamster_*`
    /// names, which follow Prometheus's naming rules throughout.
    pub nomad_names: bool,
    /// Per-allocation CPU and memory figures (`nomad_client_allocs_*`), as Nomad's option
    /// of that name; off by default, as there.
    pub publish_allocation_metrics: bool,
    /// The host's and the node's figures (`nomad_client_host_*`, `nomad_client_allocated_*`,
    /// `nomad_client_allocations_*`, …), as Nomad's option of that name; off by default.
    pub publish_node_metrics: bool,
    /// Leave the `host` label off Nomad's names (Nomad's `disable_hostname`).
    pub disable_hostname: bool,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            nomad_names: true,
            publish_allocation_metrics: false,
            publish_node_metrics: false,
            disable_hostname: false,
        }
    }
}

/// The `[limits]` section: Nomad's `limits` block, plus the deadlines teamster adds for
/// a frame sent in part and an idle RPC connection. Durations are strings such as "5s".
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// HTTP connections one client address may hold open (0: no limit). Over it a new
    /// connection is answered `429 Too Many Requests` and closed.
    pub http_max_conns_per_client: usize,
    /// RPC connections one client address may hold open (0: no limit; else more than 25,
    /// as Nomad requires). Over it a new connection is closed.
    pub rpc_max_conns_per_client: usize,
    /// The TLS handshake of an HTTPS connection.
    #[serde(with = "crate::util::duration_str")]
    pub https_handshake_timeout: Duration,
    /// The TLS handshake and first frame of an RPC connection.
    #[serde(with = "crate::util::duration_str")]
    pub rpc_handshake_timeout: Duration,
    /// Reading a request's headers; also how long a kept-alive HTTP connection may wait
    /// for its next request.
    #[serde(with = "crate::util::duration_str")]
    pub http_header_read_timeout: Duration,
    /// From the first byte of an RPC frame to its last.
    #[serde(with = "crate::util::duration_str")]
    pub rpc_frame_timeout: Duration,
    /// How long an RPC connection may stay with nothing received and no request running
    /// ("0s": forever).
    #[serde(with = "crate::util::duration_str")]
    pub rpc_idle_timeout: Duration,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let rpc = crate::rpc::RpcLimits::default();
        let http = crate::http::serve::HttpLimits::default();
        LimitsConfig {
            http_max_conns_per_client: http.max_conns_per_client,
            rpc_max_conns_per_client: rpc.max_conns_per_client,
            https_handshake_timeout: http.handshake_timeout,
            rpc_handshake_timeout: rpc.handshake_timeout,
            http_header_read_timeout: http.header_read_timeout,
            rpc_frame_timeout: rpc.frame_timeout,
            rpc_idle_timeout: rpc.idle_timeout,
        }
    }
}

impl LimitsConfig {
    /// Nomad's rules: `rpc_max_conns_per_client` 0 or more than 25; every timeout but the
    /// idle one positive.
    pub fn validate(&self) -> Result<(), crate::util::InvalidSetting> {
        use crate::util::InvalidSetting;
        if self.rpc_max_conns_per_client != 0 && self.rpc_max_conns_per_client <= 25 {
            return Err(InvalidSetting::new(
                "limits.rpc_max_conns_per_client",
                format!(
                    "must be > 25 (or 0 for no limit); found: {}",
                    self.rpc_max_conns_per_client
                ),
            ));
        }
        for (key, d) in [
            (
                "limits.https_handshake_timeout",
                self.https_handshake_timeout,
            ),
            ("limits.rpc_handshake_timeout", self.rpc_handshake_timeout),
            (
                "limits.http_header_read_timeout",
                self.http_header_read_timeout,
            ),
            ("limits.rpc_frame_timeout", self.rpc_frame_timeout),
        ] {
            if d.is_zero() {
                return Err(InvalidSetting::new(key, "must be positive"));
            }
        }
        Ok(())
    }

    /// The RPC listener's part.
    pub fn rpc(&self) -> crate::rpc::RpcLimits {
        crate::rpc::RpcLimits {
            max_conns_per_client: self.rpc_max_conns_per_client,
            handshake_timeout: self.rpc_handshake_timeout,
            frame_timeout: self.rpc_frame_timeout,
            idle_timeout: self.rpc_idle_timeout,
        }
    }

    /// The HTTP listener's part.
    pub fn http(&self) -> crate::http::serve::HttpLimits {
        crate::http::serve::HttpLimits {
            max_conns_per_client: self.http_max_conns_per_client,
            handshake_timeout: self.https_handshake_timeout,
            header_read_timeout: self.http_header_read_timeout,
        }
    }
}

/// The `[tls]` section: mutual TLS on the RPC port, HTTPS on the API port, with Nomad's
/// certificate names (`server.<region>.nomad`, `client.<region>.nomad`). Nomad keys this
/// agent does not implement (`rpc_upgrade_mode`, `tls_cipher_suites`, `tls_min_version`, …)
/// are refused by name. The files are read again on SIGHUP.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsConfig {
    /// HTTPS on the HTTP API.
    pub http: bool,
    /// Mutual TLS on every RPC connection (servers and clients alike).
    pub rpc: bool,
    /// The CA certificate (PEM) every certificate of the cluster is signed by.
    pub ca_file: Option<PathBuf>,
    /// This agent's certificate (PEM): `server.<region>.nomad` for a server,
    /// `client.<region>.nomad` for a client agent.
    pub cert_file: Option<PathBuf>,
    /// This agent's private key (PEM).
    pub key_file: Option<PathBuf>,
    /// Enforce the roles certificates name on the RPC port: servers must present
    /// `server.<region>.nomad`, and only servers may send raft traffic and server-only calls.
    pub verify_server_hostname: bool,
    /// HTTPS clients must present a certificate signed by the CA.
    pub verify_https_client: bool,
}

impl TlsConfig {
    /// Check the section; errors name the key.
    pub fn validate(&self) -> Result<(), crate::util::InvalidSetting> {
        use crate::util::InvalidSetting;
        let on = self.http || self.rpc;
        let files = [
            ("tls.ca_file", &self.ca_file),
            ("tls.cert_file", &self.cert_file),
            ("tls.key_file", &self.key_file),
        ];
        for (key, value) in files {
            match value {
                None if on => {
                    return Err(InvalidSetting::new(
                        key,
                        "is required when tls.http or tls.rpc is on",
                    ))
                }
                Some(path) if !on => {
                    return Err(InvalidSetting::new(
                        key,
                        format!(
                            "{} is set but neither tls.http nor tls.rpc is on",
                            path.display()
                        ),
                    ))
                }
                Some(path) if path.as_os_str().is_empty() => {
                    return Err(InvalidSetting::new(key, "must not be empty"))
                }
                _ => {}
            }
        }
        if self.verify_server_hostname && !self.rpc {
            return Err(InvalidSetting::new(
                "tls.verify_server_hostname",
                "has no effect without tls.rpc",
            ));
        }
        if self.verify_https_client && !self.http {
            return Err(InvalidSetting::new(
                "tls.verify_https_client",
                "has no effect without tls.http",
            ));
        }
        Ok(())
    }

    /// What the TLS material is made of, when either port uses TLS.
    pub fn settings(&self, region: &str) -> Option<crate::util::tls::TlsSettings> {
        if !(self.http || self.rpc) {
            return None;
        }
        Some(crate::util::tls::TlsSettings {
            ca_file: self.ca_file.clone()?,
            cert_file: self.cert_file.clone()?,
            key_file: self.key_file.clone()?,
            region: region.to_string(),
            verify_server_hostname: self.verify_server_hostname,
            verify_https_client: self.verify_https_client,
        })
    }
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
            tls: TlsConfig::default(),
            acl: AclConfig::default(),
            leave_on_terminate: false,
            leave_on_interrupt: false,
            limits: LimitsConfig::default(),
            telemetry: TelemetryConfig::default(),
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
        self.server.validate().map_err(|e| bad(e.key, e.reason))?;
        self.client.validate().map_err(|e| bad(e.key, e.reason))?;
        self.tls.validate().map_err(|e| bad(e.key, e.reason))?;
        self.acl.validate().map_err(|e| bad(e.key, e.reason))?;
        self.limits.validate().map_err(|e| bad(e.key, e.reason))?;
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

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

        // The client's bridge network.
        let mut c = AgentConfig::dev();
        c.data_dir = Some("/tmp/x".into());
        c.client.bridge_network_subnet = "172.26.64.0/31".into();
        let e = c.validate("f").unwrap_err().to_string();
        assert!(e.contains("client.bridge_network_subnet"), "{e}");
        c.client.bridge_network_subnet = "10.9.0.0/16".into();
        c.client.bridge_network_name = "a bridge".into();
        let e = c.validate("f").unwrap_err().to_string();
        assert!(e.contains("client.bridge_network_name"), "{e}");
        c.client.bridge_network_name = "br0".into();
        c.client.cni_path = "/opt/cni/bin:relative/cni".into();
        let e = c.validate("f").unwrap_err().to_string();
        assert!(e.contains("client.cni_path"), "{e}");
        c.client.cni_path = "/opt/cni/bin::/usr/lib/cni".into();
        c.validate("f").unwrap();
        assert_eq!(c.client.cni_path().len(), 2);
        c.client.cni_config_dir = "cni/config".into();
        let e = c.validate("f").unwrap_err().to_string();
        assert!(e.contains("client.cni_config_dir"), "{e}");
    }

    #[test]
    fn data_dir_is_required_outside_dev_mode() {
        let mut c = AgentConfig::default();
        c.server.enabled = true;
        let e = c.validate("agent.toml").unwrap_err().to_string();
        assert!(e.contains("data_dir"), "{e}");
    }

    #[test]
    fn the_tls_section_parses_and_validates() {
        let c = parse(
            r#"
data_dir = "/tmp/x"
[server]
enabled = true
[tls]
http = true
rpc = true
ca_file = "ca.pem"
cert_file = "server.pem"
key_file = "server-key.pem"
verify_server_hostname = true
verify_https_client = true
"#,
        )
        .unwrap();
        c.validate("agent.toml").unwrap();
        let s = c.tls.settings("global").unwrap();
        assert_eq!(s.ca_file, PathBuf::from("ca.pem"));
        assert!(s.verify_server_hostname && s.verify_https_client);
        assert_eq!(s.region, "global");
        assert!(AgentConfig::dev().tls.settings("global").is_none());
    }

    #[test]
    fn tls_keys_not_implemented_are_refused_by_name() {
        for key in [
            "rpc_upgrade_mode = true",
            "tls_cipher_suites = \"x\"",
            "tls_min_version = \"tls12\"",
        ] {
            let e = parse(&format!("[tls]\n{key}\n")).unwrap_err().to_string();
            let name = key.split(' ').next().unwrap();
            assert!(e.contains(name) && e.contains("agent.toml"), "{e}");
        }
    }

    #[test]
    fn tls_validation_names_the_key() {
        let base = || {
            let mut c = AgentConfig::dev();
            c.data_dir = Some("/tmp/x".into());
            c.tls = TlsConfig {
                rpc: true,
                ca_file: Some("ca.pem".into()),
                cert_file: Some("c.pem".into()),
                key_file: Some("k.pem".into()),
                ..TlsConfig::default()
            };
            c
        };
        base().validate("f").unwrap();
        let mut c = base();
        c.tls.key_file = None;
        let e = c.validate("f").unwrap_err().to_string();
        assert!(e.contains("tls.key_file") && e.contains("required"), "{e}");
        let mut c = base();
        c.tls.rpc = false;
        let e = c.validate("f").unwrap_err().to_string();
        assert!(e.contains("tls.ca_file") && e.contains("neither"), "{e}");
        let mut c = base();
        c.tls.verify_https_client = true;
        let e = c.validate("f").unwrap_err().to_string();
        assert!(e.contains("tls.verify_https_client"), "{e}");
        let mut c = base();
        c.tls.rpc = false;
        c.tls.http = true;
        c.tls.verify_server_hostname = true;
        let e = c.validate("f").unwrap_err().to_string();
        assert!(e.contains("tls.verify_server_hostname"), "{e}");
    }

    #[test]
    fn durations_round_trip_through_toml() {
        let c = AgentConfig::dev();
        let text = toml::to_string(&c).unwrap();
        let back = parse(&text).unwrap();
        assert_eq!(back, c);
    }
}
