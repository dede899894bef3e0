//! Fingerprinting: what this machine is and offers, as a [`Node`] to register.
//!
//! CPU (cores, MHz per core from `/proc/cpuinfo`, total compute), memory
//! (`/proc/meminfo`), free disk under the data dir (`statvfs`), OS, architecture, host name,
//! kernel release, the enabled drivers, and the operator's `client.meta`. Drivers that need
//! something outside teamster (`docker`: a reachable engine) start undetected and are set by
//! their probe ([`apply_docker_probe`]); the others are detected and healthy when enabled. Values the kernel
//! does not give fall back to conservative defaults; `client.cpu_total_compute` and
//! `client.memory_total_mb` override the measured ones.

use std::collections::BTreeMap;
use std::path::Path;

use teamster_storage::model::{
    parse_cpuset, DriverInfo, Node, NodeCpuResources, NodeDiskResources, NodeMemoryResources,
    NodeNetworkResource, NodeReservedCpuResources, NodeReservedNetworkResources,
    NodeReservedResources, NodeResources, NodeStatus, Timestamp,
};

use crate::client::config::ClientConfig;

/// MHz assumed per core when `/proc/cpuinfo` does not say.
const DEFAULT_MHZ_PER_CORE: u64 = 1000;

/// What the machine measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// Logical cores.
    pub cores: u32,
    /// The ids of the cores this agent may run on (its CPU affinity), ascending.
    pub core_ids: Vec<u32>,
    /// Average MHz per core.
    pub mhz_per_core: u64,
    /// Total memory, MB.
    pub memory_mb: u64,
    /// Free disk under the data dir, MB.
    pub disk_free_mb: u64,
    /// Host name.
    pub hostname: String,
    /// Kernel release (`uname -r`).
    pub kernel_version: String,
}

impl Machine {
    /// Measure this machine; `data_dir` is where allocation directories go.
    pub fn detect(data_dir: &Path) -> Machine {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1);
        // The cores the agent may use (a container's cpuset, taskset): tasks reserving
        // `cores` are pinned to these.
        let core_ids = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                    .and_then(|list| teamster_storage::model::parse_cpuset(list).ok())
            })
            .filter(|ids| !ids.is_empty())
            .unwrap_or_else(|| (0..cores).collect());
        let mhz_per_core = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| crate::client::stats::cpuinfo_mhz(&t))
            .unwrap_or(DEFAULT_MHZ_PER_CORE);
        let memory_mb = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| meminfo_total_mb(&t))
            .unwrap_or(1024);
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
        };
        Machine {
            cores,
            core_ids,
            mhz_per_core,
            memory_mb,
            disk_free_mb: disk_free_mb(data_dir).unwrap_or(0),
            hostname: read("/proc/sys/kernel/hostname").unwrap_or_else(|| "localhost".into()),
            kernel_version: read("/proc/sys/kernel/osrelease").unwrap_or_default(),
        }
    }
}

/// `MemTotal` in MB.
pub fn meminfo_total_mb(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024)
}

fn disk_free_mb(dir: &Path) -> Option<u64> {
    crate::client::stats::fs_usage(dir).map(|u| u.available / (1024 * 1024))
}

/// The node to register: identity from the client's state, everything else measured or
/// configured.
pub fn node(
    config: &ClientConfig,
    name: &str,
    id: &str,
    secret_id: &str,
    http_addr: &str,
    machine: &Machine,
    now_unix_nanos: i64,
) -> Node {
    let cpu_total = if config.cpu_total_compute > 0 {
        config.cpu_total_compute
    } else {
        machine.mhz_per_core * machine.cores as u64
    };
    // As in Nomad, the cores the client keeps (`reserved.cores`) are not usable compute:
    // their MHz are not offered to `cpu` tasks either.
    let kept = parse_cpuset(&config.reserved.cores).unwrap_or_default();
    let kept_count = machine.core_ids.iter().filter(|c| kept.contains(c)).count() as u64;
    let cpu_total =
        cpu_total.saturating_sub(cpu_total / u64::from(machine.cores.max(1)) * kept_count);
    let memory_mb = if config.memory_total_mb > 0 {
        config.memory_total_mb
    } else {
        machine.memory_mb
    };
    let mut attributes = BTreeMap::new();
    let mut attr = |k: &str, v: String| {
        attributes.insert(k.to_string(), v);
    };
    attr("kernel.name", std::env::consts::OS.to_string());
    attr("kernel.version", machine.kernel_version.clone());
    attr("os.name", std::env::consts::OS.to_string());
    attr("cpu.arch", go_arch(std::env::consts::ARCH).to_string());
    attr("cpu.numcores", machine.cores.to_string());
    let reservable = machine
        .core_ids
        .iter()
        .filter(|c| !kept.contains(c))
        .count();
    attr("cpu.reservablecores", reservable.to_string());
    attr("cpu.frequency", machine.mhz_per_core.to_string());
    attr("cpu.totalcompute", cpu_total.to_string());
    attr(
        "memory.totalbytes",
        memory_mb.saturating_mul(1024 * 1024).to_string(),
    );
    attr("unique.hostname", machine.hostname.clone());
    attr(
        "unique.storage.bytesfree",
        machine.disk_free_mb.saturating_mul(1024 * 1024).to_string(),
    );
    attr("teamster.version", env!("CARGO_PKG_VERSION").to_string());
    if let Some(ip) = network_ip(http_addr) {
        attr("unique.network.ip-address", ip);
    }
    let now = Timestamp::from_unix_nanos(now_unix_nanos);
    let mut drivers = BTreeMap::new();
    for d in &config.drivers {
        if d == "docker" {
            drivers.insert(
                d.clone(),
                DriverInfo {
                    attributes: BTreeMap::new(),
                    detected: false,
                    healthy: false,
                    health_description: "Docker not fingerprinted yet".into(),
                    update_time: now,
                },
            );
            continue;
        }
        attributes.insert(format!("driver.{d}"), "1".into());
        drivers.insert(
            d.clone(),
            DriverInfo {
                attributes: BTreeMap::new(),
                detected: true,
                healthy: true,
                health_description: "Healthy".into(),
                update_time: now,
            },
        );
    }
    let mut node = Node {
        id: id.into(),
        secret_id: secret_id.to_string(),
        datacenter: config.datacenter.clone(),
        name: name.to_string(),
        http_addr: http_addr.to_string(),
        attributes,
        node_resources: NodeResources {
            cpu: NodeCpuResources {
                cpu_shares: cpu_total,
                total_cpu_cores: machine.cores,
                reservable_cpu_cores: machine.core_ids.clone(),
            },
            memory: NodeMemoryResources { memory_mb },
            disk: NodeDiskResources {
                disk_mb: machine.disk_free_mb,
            },
            min_dynamic_port: config.min_dynamic_port,
            max_dynamic_port: config.max_dynamic_port,
            networks: network_ip(http_addr)
                .map(|ip| NodeNetworkResource {
                    mode: "host".into(),
                    device: String::new(),
                    cidr: format!("{ip}/{}", if ip.contains(':') { 128 } else { 32 }),
                    ip,
                })
                .into_iter()
                .collect(),
        },
        reserved_resources: NodeReservedResources {
            cpu: NodeReservedCpuResources {
                cpu_shares: config.reserved.cpu,
                reserved_cpu_cores: kept.clone(),
            },
            memory: NodeMemoryResources {
                memory_mb: config.reserved.memory_mb,
            },
            disk: NodeDiskResources {
                disk_mb: config.reserved.disk_mb,
            },
            networks: NodeReservedNetworkResources {
                reserved_host_ports: config.reserved.reserved_ports.clone(),
            },
        },
        meta: config.meta.clone(),
        node_class: config.node_class.clone(),
        drivers,
        host_volumes: config.host_volumes(),
        status: NodeStatus::Ready,
        ..Node::default()
    };
    node.canonicalize();
    node
}

/// Record what the docker probe found: `driver.docker = "1"` and `driver.docker.version`
/// with a detected, healthy driver; or an undetected one with the reason and no attribute,
/// so the scheduler treats the node as lacking the driver.
pub fn apply_docker_probe(
    node: &mut Node,
    probe: &crate::client::docker::Probe,
    now_unix_nanos: i64,
) {
    use crate::client::docker::Probe;
    let now = Timestamp::from_unix_nanos(now_unix_nanos);
    node.attributes.remove("driver.docker");
    node.attributes.remove("driver.docker.version");
    let info = match probe {
        Probe::Healthy { version } => {
            node.attributes.insert("driver.docker".into(), "1".into());
            node.attributes
                .insert("driver.docker.version".into(), version.clone());
            DriverInfo {
                attributes: BTreeMap::from([(
                    "driver.docker.version".to_string(),
                    version.clone(),
                )]),
                detected: true,
                healthy: true,
                health_description: "Healthy".into(),
                update_time: now,
            }
        }
        Probe::Unavailable(why) => DriverInfo {
            attributes: BTreeMap::new(),
            detected: false,
            healthy: false,
            health_description: why.clone(),
            update_time: now,
        },
    };
    node.drivers.insert("docker".into(), info);
}

/// Record whether the `exec` driver can run here (when the client offers it): detected and
/// healthy, or undetected with `problem` as the reason and no `driver.exec` attribute, so
/// the scheduler never gives this node an exec task.
pub fn apply_exec_probe(
    node: &mut Node,
    config: &ClientConfig,
    problem: Option<&str>,
    now_unix_nanos: i64,
) {
    if !config.drivers.iter().any(|d| d == "exec") {
        return;
    }
    let Some(why) = problem else {
        return;
    };
    node.attributes.remove("driver.exec");
    node.drivers.insert(
        "exec".into(),
        DriverInfo {
            attributes: BTreeMap::new(),
            detected: false,
            healthy: false,
            health_description: why.to_string(),
            update_time: Timestamp::from_unix_nanos(now_unix_nanos),
        },
    );
}

/// Record the CNI plugins found on the client's `cni_path` (`plugins.cni.version.<name>`,
/// as Nomad's fingerprint) when the client can use them: bridge networking makes network
/// namespaces and firewall rules, which needs root, so a client that is not root
/// advertises none and is never given a bridge group (the servers constrain those on the
/// plugins' attributes).
pub fn apply_cni_plugins(node: &mut Node, versions: &BTreeMap<String, String>, can_use: bool) {
    node.attributes
        .retain(|k, _| !k.starts_with(CNI_ATTRIBUTE_PREFIX));
    if !can_use {
        return;
    }
    for (plugin, version) in versions {
        node.attributes
            .insert(format!("{CNI_ATTRIBUTE_PREFIX}{plugin}"), version.clone());
    }
}

/// Record the CNI networks of the client's `cni_config_dir` as the node's networks of mode
/// `cni/<name>` (Nomad's fingerprint), where the servers look for a group's `cni/<name>`
/// mode ("missing network" elsewhere); none when the client cannot use them (not root).
pub fn apply_cni_networks<'a>(
    node: &mut Node,
    names: impl IntoIterator<Item = &'a String>,
    can_use: bool,
) {
    use teamster_storage::model::NETWORK_MODE_CNI_PREFIX;
    let networks = &mut node.node_resources.networks;
    networks.retain(|n| !n.mode.starts_with(NETWORK_MODE_CNI_PREFIX));
    if !can_use {
        return;
    }
    for name in names {
        networks.push(NodeNetworkResource {
            mode: format!("{NETWORK_MODE_CNI_PREFIX}{name}"),
            ..NodeNetworkResource::default()
        });
    }
}

/// The prefix of the CNI plugins' node attributes.
pub const CNI_ATTRIBUTE_PREFIX: &str = "plugins.cni.version.";

/// The address allocations' ports are bound on: the IP the node advertises its HTTP API on
/// (its advertise address; the loopback one for `agent --dev`), as Nomad fingerprints the
/// address of its network interface.
fn network_ip(http_addr: &str) -> Option<String> {
    http_addr
        .parse::<std::net::SocketAddr>()
        .ok()
        .map(|a| a.ip())
        .filter(|ip| !ip.is_unspecified())
        .map(|ip| ip.to_string())
}

/// Rust's name of a CPU architecture as Go's `GOARCH` spells it, which is what Nomad reports
/// as `attr.cpu.arch` and what job constraints test (`amd64`, not `x86_64`).
fn go_arch(rust: &str) -> &str {
    match rust {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" if cfg!(target_endian = "little") => "ppc64le",
        "powerpc64" => "ppc64",
        "loongarch64" => "loong64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cni_plugins_are_advertised_only_where_the_client_can_use_them() {
        let mut node = Node::default();
        node.attributes
            .insert("plugins.cni.version.stale".into(), "v0.1.0".into());
        let found = BTreeMap::from([
            ("bridge".to_string(), "v1.1.1".to_string()),
            ("portmap".to_string(), "1.0.0".to_string()),
        ]);
        apply_cni_plugins(&mut node, &found, false);
        assert!(!node.attributes.keys().any(|k| k.starts_with("plugins.cni")));
        apply_cni_plugins(&mut node, &found, true);
        assert_eq!(node.attributes["plugins.cni.version.bridge"], "v1.1.1");
        assert_eq!(node.attributes["plugins.cni.version.portmap"], "1.0.0");
        assert_eq!(
            node.attributes
                .keys()
                .filter(|k| k.starts_with("plugins.cni"))
                .count(),
            2
        );
    }

    #[test]
    fn cni_networks_become_node_networks_of_their_mode() {
        let mut node = Node::default();
        node.node_resources.networks = vec![
            NodeNetworkResource {
                mode: "host".into(),
                ip: "10.0.0.5".into(),
                ..NodeNetworkResource::default()
            },
            NodeNetworkResource {
                mode: "cni/stale".into(),
                ..NodeNetworkResource::default()
            },
        ];
        let names = ["lan".to_string(), "overlay".to_string()];
        apply_cni_networks(&mut node, &names, false);
        let modes = |n: &Node| -> Vec<String> {
            n.node_resources
                .networks
                .iter()
                .map(|n| n.mode.clone())
                .collect()
        };
        assert_eq!(modes(&node), ["host"]);
        apply_cni_networks(&mut node, &names, true);
        assert_eq!(modes(&node), ["host", "cni/lan", "cni/overlay"]);
        // The host network keeps its address; the named ones have none.
        let ips: Vec<&str> = node
            .node_resources
            .networks
            .iter()
            .map(|n| n.ip.as_str())
            .collect();
        assert_eq!(ips, ["10.0.0.5", "", ""]);
    }

    #[test]
    fn proc_files_are_parsed() {
        let cpu = "processor : 0\ncpu MHz\t\t: 2400.000\nprocessor : 1\ncpu MHz\t\t: 2600.5\n";
        assert_eq!(crate::client::stats::cpuinfo_mhz(cpu), Some(2500));
        assert_eq!(crate::client::stats::cpuinfo_mhz("processor : 0\n"), None);
        let mem = "MemTotal:       16303004 kB\nMemFree:         1234 kB\n";
        assert_eq!(meminfo_total_mb(mem), Some(15920));
    }

    #[test]
    fn the_fingerprint_passes_the_servers_validation() {
        let dir = tempfile::tempdir().unwrap();
        let machine = Machine::detect(dir.path());
        assert!(machine.cores >= 1);
        assert!(machine.memory_mb > 0);
        let mut config = ClientConfig::default();
        config.meta.insert("rack".into(), "r1".into());
        let n = node(
            &config,
            "n1",
            "5b8f2c3e-1111-4222-8333-444455556666",
            "s",
            "127.0.0.1:4646",
            &machine,
            0,
        );
        crate::rpc::service::node::validate_node(&n).unwrap();
        assert_eq!(n.attributes["driver.raw_exec"], "1");
        assert_eq!(n.attributes["kernel.name"], "linux");
        assert_eq!(n.meta["rack"], "r1");
        assert!(n.drivers["mock"].healthy);
        // Docker is offered by default but undetected until its probe says otherwise.
        assert!(!n.drivers["docker"].detected);
        assert!(!n.attributes.contains_key("driver.docker"));
    }

    #[test]
    fn an_exec_driver_that_cannot_run_is_undetected_with_its_reason() {
        let config = ClientConfig::default();
        let dir = tempfile::tempdir().unwrap();
        let machine = Machine::detect(dir.path());
        let mut n = node(&config, "n", "id", "s", "127.0.0.1:4646", &machine, 0);
        assert_eq!(n.attributes["driver.exec"], "1");
        apply_exec_probe(&mut n, &config, None, 0);
        assert!(n.drivers["exec"].detected);
        apply_exec_probe(&mut n, &config, Some("the exec driver must run as root"), 0);
        assert!(!n.attributes.contains_key("driver.exec"));
        let d = &n.drivers["exec"];
        assert!(!d.detected && !d.healthy);
        assert_eq!(d.health_description, "the exec driver must run as root");
    }

    #[test]
    fn the_docker_probe_sets_or_clears_the_driver() {
        use crate::client::docker::Probe;
        let dir = tempfile::tempdir().unwrap();
        let machine = Machine::detect(dir.path());
        let mut n = node(
            &ClientConfig::default(),
            "n1",
            "id",
            "s",
            "127.0.0.1:4646",
            &machine,
            0,
        );
        apply_docker_probe(
            &mut n,
            &Probe::Healthy {
                version: "20.10.24".into(),
            },
            5,
        );
        assert_eq!(n.attributes["driver.docker"], "1");
        assert_eq!(n.attributes["driver.docker.version"], "20.10.24");
        let d = &n.drivers["docker"];
        assert!(d.detected && d.healthy);
        apply_docker_probe(
            &mut n,
            &Probe::Unavailable("Failed to connect to docker daemon".into()),
            6,
        );
        assert!(!n.attributes.contains_key("driver.docker"));
        assert!(!n.attributes.contains_key("driver.docker.version"));
        let d = &n.drivers["docker"];
        assert!(!d.detected && !d.healthy);
        assert_eq!(d.health_description, "Failed to connect to docker daemon");
    }

    #[test]
    fn cpu_arch_is_named_as_nomad_names_it() {
        assert_eq!(super::go_arch("x86_64"), "amd64");
        assert_eq!(super::go_arch("aarch64"), "arm64");
        assert_eq!(super::go_arch("riscv64"), "riscv64");
    }
}
