//! The client role's configuration: the `[client]` section of the agent's TOML file, with
//! defaults and a `validate()` whose error names the dotted key.
//!
//! May import: `util`, and the storage model's port-list parser.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use teamster_storage::model::parse_port_ranges;

use crate::util::net::parse_peer_addr;
use crate::util::{duration_str, InvalidSetting};

/// The task drivers a client can offer.
pub const KNOWN_DRIVERS: &[&str] = &["raw_exec", "exec", "mock", "docker"];

/// The `[client]` section.
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
    /// Task drivers this node offers. `docker` is on by default, as in Nomad: it is
    /// fingerprinted, so a node without a reachable engine reports it undetected and is
    /// never given docker tasks.
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
    /// The lowest host port the scheduler may give a dynamic port (Nomad's default 20000).
    pub min_dynamic_port: u32,
    /// The highest host port the scheduler may give a dynamic port (Nomad's default 32000).
    pub max_dynamic_port: u32,
    /// How often finished allocations are garbage-collected when the allocation
    /// directory's filesystem is over a threshold ([`crate::client::gc`]; Nomad's 1m).
    #[serde(with = "duration_str")]
    pub gc_interval: Duration,
    /// Collect finished allocations while the filesystem holding them is fuller than this,
    /// percent of its space (Nomad's 80).
    pub gc_disk_usage_threshold: f64,
    /// The same for inodes (Nomad's 70).
    pub gc_inode_usage_threshold: f64,
    /// Collect the oldest finished allocations once the client keeps more than this many
    /// (Nomad's 50).
    pub gc_max_allocs: usize,
    /// How tasks' templates are rendered (`client.template`).
    pub template: TemplateConfig,
    /// Limits on tasks' artifacts (`client.artifact`).
    pub artifact: ArtifactConfig,
    /// Host volumes this node offers, by name (`[client.host_volume.<name>]`, Nomad's
    /// `host_volume "<name>"`): directories that must exist when the client starts.
    pub host_volume: BTreeMap<String, HostVolumeConfig>,
    /// Host paths an `exec` task sees, read-only, and where (`[client.chroot_env]`, Nomad's
    /// `chroot_env`: replaces the whole default map; a missing host path is skipped).
    pub chroot_env: BTreeMap<String, String>,
    /// The `exec` driver's options (`client.exec`).
    pub exec: ExecConfig,
    /// The host bridge that groups in bridge network mode attach to (Nomad's
    /// `bridge_network_name`; its default is `nomad`).
    pub bridge_network_name: String,
    /// The IPv4 subnet their allocations' addresses come from (Nomad's default).
    pub bridge_network_subnet: String,
    /// Let a task reach itself through its own published port.
    pub bridge_network_hairpin_mode: bool,
    /// Where the CNI plugins are looked for: directories separated by `:` (Nomad's default,
    /// then Debian's `/usr/lib/cni`).
    pub cni_path: String,
    /// Where the CNI network configurations of `cni/<name>` group networks are
    /// (`.conflist`, `.conf`, `.json` files; Nomad's default).
    pub cni_config_dir: String,
    /// Mutual TLS to the servers' RPC port: set by the agent from its `[tls]` section when
    /// `tls.rpc` is on; not a key of `[client]`.
    #[serde(skip)]
    pub rpc_tls: Option<crate::util::tls::AgentTls>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            enabled: false,
            servers: Vec::new(),
            datacenter: "dc1".to_string(),
            node_class: String::new(),
            drivers: vec![
                "raw_exec".to_string(),
                "exec".to_string(),
                "mock".to_string(),
                "docker".to_string(),
            ],
            reserved: Reserved::default(),
            meta: BTreeMap::new(),
            cpu_total_compute: 0,
            memory_total_mb: 0,
            update_interval: Duration::from_millis(200),
            max_kill_timeout: Duration::from_secs(30),
            min_dynamic_port: 20000,
            max_dynamic_port: 32000,
            gc_interval: Duration::from_secs(60),
            gc_disk_usage_threshold: 80.0,
            gc_inode_usage_threshold: 70.0,
            gc_max_allocs: 50,
            template: TemplateConfig::default(),
            artifact: ArtifactConfig::default(),
            host_volume: BTreeMap::new(),
            chroot_env: DEFAULT_CHROOT_ENV
                .iter()
                .map(|p| (p.to_string(), p.to_string()))
                .collect(),
            exec: ExecConfig::default(),
            bridge_network_name: "teamster".to_string(),
            bridge_network_subnet: "172.26.64.0/20".to_string(),
            bridge_network_hairpin_mode: false,
            cni_path: "/opt/cni/bin:/usr/libexec/cni:/usr/lib/cni".to_string(),
            cni_config_dir: "/opt/cni/config".to_string(),
            rpc_tls: None,
        }
    }
}

impl ClientConfig {
    /// The directories of [`ClientConfig::cni_path`], in order.
    pub fn cni_path(&self) -> Vec<PathBuf> {
        self.cni_path
            .split(':')
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .collect()
    }
}

/// Checks an interface name (1-15 letters, digits, `-`, `_`, `.`).
fn check_interface_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 15
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not an interface name (1-15 letters, digits, '-', '_', '.')"
        ))
    }
}

/// Checks an IPv4 subnet `a.b.c.d/n` with a prefix of 8 to 30.
fn check_ipv4_subnet(cidr: &str) -> Result<(), String> {
    let bad = || format!("{cidr:?} is not an IPv4 subnet (a.b.c.d/n)");
    let (addr, prefix) = cidr.split_once('/').ok_or_else(bad)?;
    addr.parse::<std::net::Ipv4Addr>().map_err(|_| bad())?;
    match prefix.parse::<u8>() {
        Ok(p) if (8..=30).contains(&p) => Ok(()),
        _ => Err(format!("{cidr:?}: the prefix must be 8 to 30")),
    }
}

/// How tasks' templates are rendered (`client.template`, Nomad's client `template` block).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TemplateConfig {
    /// Template functions tasks may not call (globs, e.g. `sprig_*`). Nomad's default
    /// (`executeTemplate`, `plugin`, `writeToFile`) must stay: teamster does not implement
    /// those three.
    pub function_denylist: Vec<String>,
    /// Let templates read and write outside the allocation directory (`source`,
    /// `destination`, `file`).
    pub disable_file_sandbox: bool,
}

impl Default for TemplateConfig {
    fn default() -> Self {
        TemplateConfig {
            function_denylist: crate::gotemplate::funcs::DEFAULT_DENYLIST
                .iter()
                .map(|f| f.to_string())
                .collect(),
            disable_file_sandbox: false,
        }
    }
}

/// Nomad's default `chroot_env`: each host path at the same path in the task's root.
pub const DEFAULT_CHROOT_ENV: &[&str] = &[
    "/bin",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/run/resolvconf",
    "/run/systemd/resolve",
    "/sbin",
    "/usr",
];

/// The capabilities an `exec` task gets by default (Nomad's), within `allow_caps`.
pub const DEFAULT_CAPS: &[&str] = &[
    "audit_write",
    "chown",
    "dac_override",
    "fowner",
    "fsetid",
    "kill",
    "mknod",
    "net_bind_service",
    "setfcap",
    "setgid",
    "setpcap",
    "setuid",
    "sys_chroot",
];

/// Linux's capabilities, by number.
pub const CAPABILITIES: [&str; 41] = [
    "chown",
    "dac_override",
    "dac_read_search",
    "fowner",
    "fsetid",
    "kill",
    "setgid",
    "setuid",
    "setpcap",
    "linux_immutable",
    "net_bind_service",
    "net_broadcast",
    "net_admin",
    "net_raw",
    "ipc_lock",
    "ipc_owner",
    "sys_module",
    "sys_rawio",
    "sys_chroot",
    "sys_ptrace",
    "sys_pacct",
    "sys_admin",
    "sys_boot",
    "sys_nice",
    "sys_resource",
    "sys_time",
    "sys_tty_config",
    "mknod",
    "lease",
    "audit_write",
    "audit_control",
    "setfcap",
    "mac_override",
    "mac_admin",
    "syslog",
    "wake_alarm",
    "block_suspend",
    "audit_read",
    "perfmon",
    "bpf",
    "checkpoint_restore",
];

/// A capability's number: `net_raw`, `NET_RAW` and `CAP_NET_RAW` alike.
pub fn capability(name: &str) -> Option<u32> {
    let lower = name.to_ascii_lowercase();
    let bare = lower.strip_prefix("cap_").unwrap_or(&lower);
    CAPABILITIES
        .iter()
        .position(|c| *c == bare)
        .map(|i| i as u32)
}

/// The `exec` driver's options (`client.exec`: Nomad's exec plugin config, and its client
/// option `user.denylist`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExecConfig {
    /// Enter the task's root with a move mount and `chroot` rather than `pivot_root` (for
    /// roots on a ramdisk, where `pivot_root` fails).
    pub no_pivot_root: bool,
    /// A task's PID namespace when its config does not say: `private` or `host`.
    pub default_pid_mode: String,
    /// A task's IPC namespace when its config does not say: `private` or `host`.
    pub default_ipc_mode: String,
    /// The capabilities a task may have (`cap_add` beyond them is refused); `all` for
    /// every one.
    pub allow_caps: Vec<String>,
    /// Let a task ask for `pid_mode = "host"` or `ipc_mode = "host"` (not Nomad's: its
    /// exec driver always lets it; a task in the host's PID namespace reaches other
    /// processes' roots through `/proc`). A default mode of `host` allows it too.
    pub allow_host_namespaces: bool,
    /// Accounts a task may not run as.
    pub user_denylist: Vec<String>,
}

impl Default for ExecConfig {
    fn default() -> Self {
        ExecConfig {
            no_pivot_root: false,
            default_pid_mode: "private".to_owned(),
            default_ipc_mode: "private".to_owned(),
            allow_caps: DEFAULT_CAPS.iter().map(|c| c.to_string()).collect(),
            allow_host_namespaces: false,
            user_denylist: vec!["root".to_owned(), "Administrator".to_owned()],
        }
    }
}

impl ExecConfig {
    /// The modes are `private` or `host`, the capabilities Linux's.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        for (key, mode) in [
            ("client.exec.default_pid_mode", &self.default_pid_mode),
            ("client.exec.default_ipc_mode", &self.default_ipc_mode),
        ] {
            if mode != "private" && mode != "host" {
                return Err(InvalidSetting::new(
                    key,
                    format!("must be \"private\" or \"host\", got {mode:?}"),
                ));
            }
        }
        for cap in &self.allow_caps {
            if !cap.eq_ignore_ascii_case("all") && capability(cap).is_none() {
                return Err(InvalidSetting::new(
                    "client.exec.allow_caps",
                    format!("unknown capability {cap:?}"),
                ));
            }
        }
        Ok(())
    }
}

/// Limits on tasks' artifacts (`client.artifact`, Nomad's names and defaults).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ArtifactConfig {
    /// The longest one download may take.
    #[serde(with = "duration_str")]
    pub http_read_timeout: Duration,
    /// The largest download (`"100GB"`, `"512MiB"`, or bytes).
    pub http_max_size: String,
    /// The most an archive may unpack to.
    pub decompression_size_limit: String,
    /// The most files an archive may hold.
    pub decompression_file_count_limit: u64,
}

impl Default for ArtifactConfig {
    fn default() -> Self {
        ArtifactConfig {
            http_read_timeout: Duration::from_secs(30 * 60),
            http_max_size: "100GB".to_owned(),
            decompression_size_limit: "100GB".to_owned(),
            decompression_file_count_limit: 4096,
        }
    }
}

/// A size as Nomad writes one: a number with an optional unit (`B`, `KB`/`MB`/`GB`/`TB`
/// in powers of 1000, `KiB`/`MiB`/`GiB`/`TiB` in powers of 1024; case and spaces aside).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size such as \"100GB\""))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "t" | "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        other => return Err(format!("{text:?}: unknown unit {other:?}")),
    };
    Ok((number * scale).min(u64::MAX as f64) as u64)
}

/// A host volume (`[client.host_volume.<name>]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostVolumeConfig {
    /// The directory on this host (absolute).
    pub path: String,
    /// Only jobs asking for it read-only may use it.
    pub read_only: bool,
}

impl ClientConfig {
    /// The host volumes as the node carries them.
    pub fn host_volumes(
        &self,
    ) -> BTreeMap<String, teamster_storage::model::ClientHostVolumeConfig> {
        self.host_volume
            .iter()
            .map(|(name, v)| {
                let offered = teamster_storage::model::ClientHostVolumeConfig {
                    name: name.clone(),
                    path: v.path.clone(),
                    read_only: v.read_only,
                };
                (name.clone(), offered)
            })
            .collect()
    }
}

/// Resources a client keeps back from scheduling (`client.reserved`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Reserved {
    /// CPU in MHz.
    pub cpu: u64,
    /// Memory in MiB.
    pub memory_mb: u64,
    /// Disk in MiB.
    pub disk_mb: u64,
    /// Host ports no allocation may have, Nomad's `reserved_ports`: `"22,80,8000-8100"`.
    pub reserved_ports: String,
    /// Cores no task may reserve with `cores`, Nomad's `reserved.cores`: `"0-1,4"`.
    pub cores: String,
}

impl ClientConfig {
    /// Checks every value of the section.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        for f in crate::gotemplate::funcs::DEFAULT_DENYLIST {
            let denied = self
                .template
                .function_denylist
                .iter()
                .any(|p| p == f || p.strip_suffix('*').is_some_and(|head| f.starts_with(head)));
            if !denied {
                return Err(InvalidSetting::new(
                    "client.template.function_denylist",
                    format!("must keep {f:?}: teamster does not implement it"),
                ));
            }
        }
        for addr in &self.servers {
            parse_peer_addr(addr).map_err(|r| InvalidSetting::new("client.servers", r))?;
        }
        if self.datacenter.trim().is_empty() {
            return Err(InvalidSetting::new(
                "client.datacenter",
                "must not be empty",
            ));
        }
        if self.update_interval.is_zero() || self.update_interval > Duration::from_secs(60) {
            return Err(InvalidSetting::new(
                "client.update_interval",
                "must be between 1ms and 60s",
            ));
        }
        if self.max_kill_timeout.is_zero() {
            return Err(InvalidSetting::new(
                "client.max_kill_timeout",
                "must be positive",
            ));
        }
        if !(1..=65535).contains(&self.min_dynamic_port)
            || !(1..=65535).contains(&self.max_dynamic_port)
            || self.min_dynamic_port > self.max_dynamic_port
        {
            return Err(InvalidSetting::new(
                "client.min_dynamic_port",
                format!(
                    "the dynamic range {}-{} must lie in 1-65535 and not be empty",
                    self.min_dynamic_port, self.max_dynamic_port
                ),
            ));
        }
        check_interface_name(&self.bridge_network_name)
            .map_err(|e| InvalidSetting::new("client.bridge_network_name", e))?;
        check_ipv4_subnet(&self.bridge_network_subnet)
            .map_err(|e| InvalidSetting::new("client.bridge_network_subnet", e))?;
        if self.cni_path().iter().any(|d| d.is_relative()) {
            return Err(InvalidSetting::new(
                "client.cni_path",
                "every directory must be an absolute path",
            ));
        }
        if !Path::new(&self.cni_config_dir).is_absolute() {
            return Err(InvalidSetting::new(
                "client.cni_config_dir",
                "must be an absolute path",
            ));
        }
        if self.gc_interval.is_zero() {
            return Err(InvalidSetting::new(
                "client.gc_interval",
                "must be positive",
            ));
        }
        for (key, value) in [
            (
                "client.gc_disk_usage_threshold",
                self.gc_disk_usage_threshold,
            ),
            (
                "client.gc_inode_usage_threshold",
                self.gc_inode_usage_threshold,
            ),
        ] {
            if !(0.0..=100.0).contains(&value) {
                return Err(InvalidSetting::new(key, "must be a percentage, 0 to 100"));
            }
        }
        if let Err(e) = teamster_storage::model::parse_cpuset(&self.reserved.cores) {
            return Err(InvalidSetting::new("client.reserved.cores", e));
        }
        if let Err(e) = parse_port_ranges(&self.reserved.reserved_ports) {
            return Err(InvalidSetting::new("client.reserved.reserved_ports", e));
        }
        for (key, value) in [
            (
                "client.artifact.http_max_size",
                &self.artifact.http_max_size,
            ),
            (
                "client.artifact.decompression_size_limit",
                &self.artifact.decompression_size_limit,
            ),
        ] {
            parse_bytes(value).map_err(|e| InvalidSetting::new(key, e))?;
        }
        if self.artifact.http_read_timeout.is_zero() {
            return Err(InvalidSetting::new(
                "client.artifact.http_read_timeout",
                "must be positive",
            ));
        }
        for (name, volume) in &self.host_volume {
            if !std::path::Path::new(&volume.path).is_absolute() {
                return Err(InvalidSetting::new(
                    "client.host_volume",
                    format!("{name}: path must be absolute, got {:?}", volume.path),
                ));
            }
        }
        self.exec.validate()?;
        for (host, inside) in &self.chroot_env {
            let bad = |p: &str| {
                let path = std::path::Path::new(p);
                !path.is_absolute()
                    || path
                        .components()
                        .any(|c| c == std::path::Component::ParentDir)
            };
            if bad(host) || bad(inside) {
                return Err(InvalidSetting::new(
                    "client.chroot_env",
                    format!("{host:?} = {inside:?}: both paths must be absolute, without \"..\""),
                ));
            }
        }
        for d in &self.drivers {
            if !KNOWN_DRIVERS.contains(&d.as_str()) {
                return Err(InvalidSetting::new(
                    "client.drivers",
                    format!("unknown driver {d:?} (known: {})", KNOWN_DRIVERS.join(", ")),
                ));
            }
        }
        Ok(())
    }
}
