//! Group networking in bridge mode, as Nomad's client does it: every allocation of a group
//! with `network { mode = "bridge" }` gets a network namespace of its own
//! (`/var/run/netns/<alloc ID>`, [`netns`]) attached to a host bridge by the CNI plugins
//! ([`cni`]): `loopback`, `bridge` with `host-local` addresses from
//! `client.bridge_network_subnet`, `firewall` (with teamster's admin chain) and `portmap`,
//! which publishes the group's ports from the node's address into the namespace
//! (`port "http" { to = 8080 }`). Its tasks join the namespace and reach each other on
//! `localhost`.
//!
//! ```text
//!  network hook prerun ─▶ record the namespace's path (state written) ─▶ create it
//!      ─▶ CNI ADD (each plugin in order) ─▶ admin chain rule ─▶ address recorded
//!  tasks start ─▶ setns(the namespace) in the child, before it drops privileges
//!  network hook postrun ─▶ CNI DEL (in reverse, with ADD's result) ─▶ namespace removed
//!  client start ─▶ finished allocations still holding a namespace are torn down
//! ```
//!
//! The record is written before anything is made, so a client killed at any point finds
//! what it made: a complete record is kept (the running allocation stays reachable), an
//! incomplete one is torn down and made again.

pub mod cni;
pub mod files;
pub mod netns;

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};
use teamster_storage::model::{Allocation, Job, NetworkResource};

use crate::client::config::ClientConfig;
pub use crate::client::types::AllocNetwork;

/// Nomad's mode name for a namespace attached to the host bridge.
pub use teamster_storage::model::NETWORK_MODE_BRIDGE as MODE_BRIDGE;

/// The interface made inside each namespace (Nomad's).
pub const IFNAME: &str = "eth0";

/// The filter-table chain the `firewall` plugin jumps to first, where the client lets in
/// traffic for the bridge's subnet (Nomad's is `NOMAD-ADMIN`).
pub const ADMIN_CHAIN: &str = "TEAMSTER-ADMIN";

/// Where the `host-local` plugin keeps its leases (Nomad's): shared by every client on the
/// host, so two never hand out one address.
pub const IPAM_DATA_DIR: &str = "/var/run/cni";

/// Why an allocation's network could not be made or removed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetworkError {
    /// A plugin is on no directory of the path.
    #[error("CNI plugin {plugin:?} not found in {path}")]
    MissingPlugin {
        /// Its type.
        plugin: String,
        /// The directories searched.
        path: String,
    },
    /// A plugin failed.
    #[error("CNI plugin {plugin:?} failed on {command}: {message}")]
    Plugin {
        /// Its type.
        plugin: String,
        /// `ADD` or `DEL`.
        command: &'static str,
        /// What it said.
        message: String,
    },
    /// The namespace could not be made, found or removed.
    #[error("network namespace {path}: {message}")]
    Namespace {
        /// Its path.
        path: String,
        /// Why.
        message: String,
    },
    /// The admin chain could not be set up.
    #[error("iptables: {0}")]
    Iptables(String),
    /// What was made could not be recorded (the allocation is gone): nothing more is made.
    #[error("the allocation's network could not be recorded in the client state")]
    NotRecorded,
    /// The plugins' result gives the allocation's interface no address (Nomad's words).
    #[error("network {0:?}: no interface with an address")]
    NoAddress(String),
    /// A `cni/<name>` mode names no configuration of the client's directory.
    #[error("no CNI network configuration named {name:?} in {dir}")]
    UnknownNetwork {
        /// The network's name.
        name: String,
        /// The configuration directory.
        dir: String,
    },
}

/// The client's bridge network settings (Nomad's `bridge_network_*`, `cni_path`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeSettings {
    /// The bridge's name (`client.bridge_network_name`).
    pub name: String,
    /// The subnet addresses are taken from (`client.bridge_network_subnet`).
    pub subnet: String,
    /// Whether a task reaches itself through its own published port
    /// (`client.bridge_network_hairpin_mode`).
    pub hairpin_mode: bool,
    /// Where the plugins are looked for, in order (`client.cni_path`).
    pub cni_path: Vec<PathBuf>,
    /// Where namespaces are made.
    pub netns_dir: PathBuf,
    /// Where `cni/<name>` networks are configured (`client.cni_config_dir`).
    pub cni_config_dir: PathBuf,
}

impl BridgeSettings {
    /// The settings of a client's configuration; namespaces under `/var/run/netns`.
    pub fn of(config: &ClientConfig) -> BridgeSettings {
        BridgeSettings {
            name: config.bridge_network_name.clone(),
            subnet: config.bridge_network_subnet.clone(),
            hairpin_mode: config.bridge_network_hairpin_mode,
            cni_path: config.cni_path(),
            netns_dir: PathBuf::from(netns::NETNS_DIR),
            cni_config_dir: PathBuf::from(&config.cni_config_dir),
        }
    }

    /// The network configuration list of group network `mode`: Nomad's bridge list, or
    /// the client's configuration of the `cni/<name>` network, read now.
    pub fn conflist_for(&self, mode: &str) -> Result<cni::NetworkConfigList, NetworkError> {
        let Some(name) = mode.strip_prefix(teamster_storage::model::NETWORK_MODE_CNI_PREFIX) else {
            return Ok(self.conflist());
        };
        cni::load_config_dir(&self.cni_config_dir)
            .0
            .remove(name)
            .ok_or_else(|| NetworkError::UnknownNetwork {
                name: name.to_string(),
                dir: self.cni_config_dir.display().to_string(),
            })
    }

    /// Nomad's network configuration list for bridge mode: loopback, the bridge with
    /// host-local addresses (masqueraded, the bridge as gateway), the firewall with the
    /// admin chain, and portmap with SNAT so the node itself reaches published ports.
    pub fn conflist(&self) -> cni::NetworkConfigList {
        cni::NetworkConfigList {
            name: self.name.clone(),
            cni_version: cni::CNI_VERSION.into(),
            plugins: vec![
                json!({ "type": "loopback" }),
                json!({
                    "type": "bridge",
                    "bridge": self.name,
                    "ipMasq": true,
                    "isGateway": true,
                    "forceAddress": true,
                    "hairpinMode": self.hairpin_mode,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{ "subnet": self.subnet }]],
                        "routes": [{ "dst": "0.0.0.0/0" }],
                        "dataDir": IPAM_DATA_DIR,
                    },
                }),
                json!({
                    "type": "firewall",
                    "backend": "iptables",
                    "iptablesAdminChainName": ADMIN_CHAIN,
                }),
                json!({
                    "type": "portmap",
                    "capabilities": { "portMappings": true },
                    "snat": true,
                }),
            ],
        }
    }

    /// The admin chain's rule: traffic out of the bridge to its subnet is let in.
    pub fn admin_rule(&self) -> Vec<String> {
        ["-o", &self.name, "-d", &self.subnet, "-j", "ACCEPT"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }
}

/// Whether everything of `network` was made (a restarted client keeps it): an address was
/// given and the namespace is still mounted.
pub fn is_complete(network: &AllocNetwork) -> bool {
    !network.address.is_empty() && netns::is_netns(&network.netns)
}

/// Whether network `mode` gives each allocation a namespace of its own.
pub use teamster_storage::model::is_namespaced_mode as is_namespaced;

/// The group network of an allocation (its group's first network block).
pub fn group_network<'a>(alloc: &Allocation, job: &'a Job) -> Option<&'a NetworkResource> {
    job.task_group(&alloc.task_group)
        .and_then(|g| g.networks.first())
}

/// The group network's mode of an allocation (`""` for host).
pub fn group_mode<'a>(alloc: &Allocation, job: &'a Job) -> &'a str {
    group_network(alloc, job)
        .map(|n| n.mode.as_str())
        .unwrap_or_default()
}

/// Whether allocation `alloc`'s group has a docker task: its namespace is then a pause
/// container's, removed with it.
pub fn has_docker_tasks(alloc: &Allocation, job: &Job) -> bool {
    job.task_group(&alloc.task_group)
        .is_some_and(|g| g.tasks.iter().any(|t| t.driver == "docker"))
}

/// The namespace allocation `local`'s tasks join: none in host mode; in bridge or cni mode
/// its namespace, or why there is none.
pub fn task_netns(local: &crate::client::types::LocalAlloc) -> Result<Option<PathBuf>, String> {
    if !is_namespaced(group_mode(&local.alloc, &local.job)) {
        return Ok(None);
    }
    match &local.network {
        Some(net) if !net.address.is_empty() => Ok(Some(net.netns.clone())),
        Some(net) if !net.error.is_empty() => Err(format!(
            "the allocation's network could not be set up: {}",
            net.error
        )),
        _ => Err("the allocation's network is not set up".into()),
    }
}

/// The group network's own CNI arguments (`cni { args { … } }`), then Nomad's (the plugins
/// ignore those they do not know).
pub fn cni_args(alloc: &Allocation, job: &Job) -> Vec<(String, String)> {
    let own = group_network(alloc, job)
        .and_then(|n| n.cni.as_ref())
        .map(|c| c.args.clone())
        .unwrap_or_default();
    let nomad = [
        ("NOMAD_REGION", job.region.clone()),
        ("NOMAD_NAMESPACE", job.namespace.to_string()),
        ("NOMAD_JOB_ID", job.id.to_string()),
        ("NOMAD_GROUP_NAME", alloc.task_group.to_string()),
        ("NOMAD_ALLOC_ID", alloc.id.to_string()),
    ];
    // The job's own first: plugins take the last of a key, so Nomad's cannot be faked.
    own.into_iter()
        .chain(nomad.into_iter().map(|(k, v)| (k.to_string(), v)))
        // `CNI_ARGS` is `k=v` pairs joined by `;`, with no escaping: a pair holding either is
        // left out (the plugins would refuse the whole list).
        .filter(|(k, v)| !k.is_empty() && !k.contains([';', '=']) && !v.contains([';', '=']))
        .collect()
}

/// The published ports, as the `portmap` plugin takes them: each of the group's ports from
/// its host address and port to its `to` port (the host port when `to` is unset), TCP and
/// UDP.
pub fn port_mappings(alloc: &Allocation) -> Vec<Value> {
    let mut out = Vec::new();
    for port in &alloc.allocated_resources.shared.ports {
        let inside = if port.to > 0 {
            port.to as u32
        } else {
            port.value
        };
        for protocol in ["tcp", "udp"] {
            let mut m = Map::new();
            m.insert("hostPort".into(), json!(port.value));
            m.insert("containerPort".into(), json!(inside));
            m.insert("protocol".into(), json!(protocol));
            if !port.host_ip.is_empty() {
                m.insert("hostIP".into(), json!(port.host_ip));
            }
            out.push(Value::Object(m));
        }
    }
    out
}

/// The attachment of allocation `alloc` to the network through the namespace at `netns`.
pub fn attachment(alloc: &Allocation, job: &Job, netns: &Path) -> cni::Attachment {
    let mut runtime_config = Map::new();
    runtime_config.insert("portMappings".into(), Value::Array(port_mappings(alloc)));
    cni::Attachment {
        container_id: alloc.id.to_string(),
        netns: netns.to_path_buf(),
        ifname: IFNAME.into(),
        args: cni_args(alloc, job),
        runtime_config,
    }
}

/// One plugin run at a time on this host: the plugins check for their shared chains and
/// jumps, then add them, so two at once (two allocations, or two clients on one host)
/// would add them twice. A tokio lock orders this client's own runs; an `flock` on
/// [`LOCK_FILE`] orders the clients.
static PLUGINS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The host-wide lock of the plugin runs.
pub const LOCK_FILE: &str = "/var/run/cni/teamster.lock";

/// Holds the plugin lock while it lives.
struct PluginLock {
    _local: tokio::sync::MutexGuard<'static, ()>,
    _host: Option<std::fs::File>,
}

async fn plugin_lock() -> PluginLock {
    let local = PLUGINS.lock().await;
    let host = tokio::task::spawn_blocking(|| {
        use std::os::fd::AsRawFd;
        let _ = std::fs::create_dir_all(IPAM_DATA_DIR);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(LOCK_FILE)
            .ok()?;
        // SAFETY: flock on a descriptor this function owns.
        (unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0).then_some(file)
    })
    .await
    .ok()
    .flatten();
    PluginLock {
        _local: local,
        _host: host,
    }
}

/// Makes allocation `alloc`'s namespace (a new one, or the one at `source`, a pause
/// container's, named; `hostname` is recorded with it) and attaches it (CNI `ADD`), then lets the bridge's subnet in
/// through the admin chain. `record` is handed what is made as it is made — the
/// namespace's path and the configuration first, then ADD's result — and says whether it
/// was written durably: when it was not (the allocation is gone), nothing more is made. On
/// failure the error comes with the record of what may have been made, which
/// [`teardown`] removes.
pub async fn setup(
    settings: &BridgeSettings,
    alloc: &Allocation,
    job: &Job,
    source: Option<&Path>,
    hostname: &str,
    mut record: impl FnMut(&AllocNetwork) -> bool,
) -> Result<AllocNetwork, (NetworkError, AllocNetwork)> {
    let path = settings.netns_dir.join(alloc.id.as_ref());
    let mode = group_mode(alloc, job);
    let list = match settings.conflist_for(mode) {
        Ok(list) => list,
        Err(e) => return Err((e, AllocNetwork::default())),
    };
    let mut network = AllocNetwork {
        mode: mode.to_string(),
        netns: path.clone(),
        interface: IFNAME.into(),
        address: String::new(),
        result: Value::Null,
        error: String::new(),
        conflist: list.to_json(),
        deleted: false,
        hostname: hostname.to_string(),
    };
    if !record(&network) {
        return Err((NetworkError::NotRecorded, network));
    }
    let dir = settings.netns_dir.clone();
    let name = alloc.id.to_string();
    let source = source.map(Path::to_path_buf);
    let made = tokio::task::spawn_blocking(move || match source {
        Some(source) => netns::pin(&dir, &name, &source),
        None => netns::create(&dir, &name),
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r.map_err(|e| e.to_string()));
    if let Err(e) = made {
        return Err((namespace_error(&path, e), network));
    }
    let attachment = attachment(alloc, job, &path);
    let _lock = plugin_lock().await;
    let result = match cni::run_add(&settings.cni_path, &list, &attachment).await {
        Ok(result) => result,
        Err(e) => return Err((e, network)),
    };
    let address = cni::parse_result(&result, IFNAME);
    network.address = address.clone().unwrap_or_default();
    network.result = result;
    // Written before anything else can fail: a later DEL needs ADD's result (the firewall
    // plugin removes its rules by the addresses it holds).
    if !record(&network) {
        return Err((NetworkError::NotRecorded, network));
    }
    if address.is_none() {
        return Err((NetworkError::NoAddress(list.name.clone()), network));
    }
    // The admin chain is the bridge list's; a named network's firewall is its own.
    if mode == MODE_BRIDGE {
        if let Err(e) = ensure_admin_rule(settings).await {
            return Err((e, network));
        }
    }
    Ok(network)
}

/// Detaches the allocation (CNI `DEL`, with the configuration and result `ADD` had, unless
/// an earlier teardown did it) and removes its namespace. Returns the record of what is
/// left (`deleted` once the plugins' DEL succeeded) with the first error; both steps are
/// tried every time, so a retry does only what failed.
pub async fn teardown(
    settings: &BridgeSettings,
    alloc: &Allocation,
    job: &Job,
    network: &AllocNetwork,
) -> (Result<(), NetworkError>, AllocNetwork) {
    let mut left = network.clone();
    let mut first = None;
    if !left.deleted {
        let list = cni::NetworkConfigList::from_json(&left.conflist)
            // A named network's own list, never the bridge's in its place.
            .or_else(|_| settings.conflist_for(&left.mode));
        let attachment = attachment(alloc, job, &left.netns);
        let result = (!left.result.is_null()).then_some(&left.result);
        let deleted = match list {
            Ok(list) => {
                let _lock = plugin_lock().await;
                cni::run_del(&settings.cni_path, &list, &attachment, result).await
            }
            Err(e) => Err(e),
        };
        match deleted {
            Ok(()) => left.deleted = true,
            Err(e) => first = Some(e),
        }
    }
    if let Err(e) = remove_netns(&left.netns).await {
        first.get_or_insert(e);
    }
    (first.map_or(Ok(()), Err), left)
}

async fn remove_netns(path: &Path) -> Result<(), NetworkError> {
    let owned = path.to_path_buf();
    tokio::task::spawn_blocking(move || netns::remove(&owned))
        .await
        .map_err(|e| namespace_error(path, e.to_string()))?
        .map_err(|e| namespace_error(path, e.to_string()))
}

fn namespace_error(path: &Path, message: String) -> NetworkError {
    NetworkError::Namespace {
        path: path.display().to_string(),
        message,
    }
}

/// Makes sure the admin chain lets the bridge's subnet in (the `firewall` plugin made the
/// chain and jumps to it): `iptables -C`, then `-A` when missing.
async fn ensure_admin_rule(settings: &BridgeSettings) -> Result<(), NetworkError> {
    let rule = settings.admin_rule();
    let iptables = |op: &str| {
        let mut cmd = tokio::process::Command::new("iptables");
        cmd.args(["-w", "-t", "filter", op, ADMIN_CHAIN])
            .args(&rule)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        cmd
    };
    let present = iptables("-C")
        .output()
        .await
        .map_err(|e| NetworkError::Iptables(format!("cannot run iptables: {e}")))?;
    if present.status.success() {
        return Ok(());
    }
    let added = iptables("-A")
        .output()
        .await
        .map_err(|e| NetworkError::Iptables(format!("cannot run iptables: {e}")))?;
    if added.status.success() {
        Ok(())
    } else {
        Err(NetworkError::Iptables(
            String::from_utf8_lossy(&added.stderr).trim().to_string(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> BridgeSettings {
        BridgeSettings {
            name: "teamster".into(),
            subnet: "172.26.64.0/20".into(),
            hairpin_mode: false,
            cni_path: vec![PathBuf::from("/opt/cni/bin")],
            netns_dir: PathBuf::from(netns::NETNS_DIR),
            cni_config_dir: PathBuf::from("/opt/cni/config"),
        }
    }

    fn alloc() -> (Allocation, Job) {
        let job: Job = serde_json::from_value(json!({
            "ID": "web", "Region": "global", "Namespace": "default",
            "TaskGroups": [{ "Name": "g", "Networks": [{ "Mode": "bridge" }] }]
        }))
        .unwrap();
        let alloc: Allocation = serde_json::from_value(json!({
            "ID": "a-1", "TaskGroup": "g",
            "AllocatedResources": { "Shared": { "Ports": [
                { "Label": "http", "Value": 23000, "To": 8080, "HostIP": "127.0.0.5" },
                { "Label": "raw", "Value": 23001, "To": 0, "HostIP": "" }
            ] } }
        }))
        .unwrap();
        (alloc, job)
    }

    #[test]
    fn the_conflist_is_nomads_with_teamsters_bridge_and_chain() {
        let list = settings().conflist();
        assert_eq!(list.types(), ["loopback", "bridge", "firewall", "portmap"]);
        let bridge = &list.plugins[1];
        assert_eq!(bridge["bridge"], "teamster");
        assert_eq!(bridge["ipMasq"], true);
        assert_eq!(bridge["isGateway"], true);
        assert_eq!(bridge["hairpinMode"], false);
        assert_eq!(
            bridge["ipam"]["ranges"],
            json!([[{ "subnet": "172.26.64.0/20" }]])
        );
        assert_eq!(bridge["ipam"]["dataDir"], IPAM_DATA_DIR);
        assert_eq!(list.plugins[2]["iptablesAdminChainName"], ADMIN_CHAIN);
        assert_eq!(list.plugins[3]["capabilities"]["portMappings"], true);
        assert_eq!(
            settings().admin_rule(),
            ["-o", "teamster", "-d", "172.26.64.0/20", "-j", "ACCEPT"]
        );
    }

    #[test]
    fn ports_map_from_the_host_port_to_the_to_port_for_tcp_and_udp() {
        let (alloc, job) = alloc();
        assert_eq!(group_mode(&alloc, &job), "bridge");
        let maps = port_mappings(&alloc);
        assert_eq!(maps.len(), 4);
        assert_eq!(
            maps[0],
            json!({"hostPort": 23000, "containerPort": 8080, "protocol": "tcp",
                   "hostIP": "127.0.0.5"})
        );
        assert_eq!(maps[1]["protocol"], "udp");
        // No `to`: the same port inside; no host address: every address.
        assert_eq!(
            maps[2],
            json!({"hostPort": 23001, "containerPort": 23001, "protocol": "tcp"})
        );
        let mut odd = job.clone();
        odd.id = teamster_storage::model::JobId::new("a;b=c");
        assert!(!cni_args(&alloc, &odd)
            .iter()
            .any(|(k, _)| k == "NOMAD_JOB_ID"));
        let a = attachment(&alloc, &job, Path::new("/var/run/netns/a-1"));
        assert_eq!(a.container_id, "a-1");
        assert_eq!(a.ifname, "eth0");
        assert!(a.args.contains(&("NOMAD_JOB_ID".into(), "web".into())));
        assert_eq!(
            a.runtime_config["portMappings"].as_array().unwrap().len(),
            4
        );
    }

    #[test]
    fn the_group_s_cni_args_follow_nomad_s_and_bad_pairs_are_left_out() {
        let (alloc, mut job) = alloc();
        job.task_groups_mut()[0].networks[0].cni = Some(teamster_storage::model::CniConfig {
            args: [
                ("IgnoreUnknown", "1"),
                ("K8S_POD_NAME", "web"),
                ("bad", "x=y"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        });
        let args = cni_args(&alloc, &job);
        let keys: Vec<&str> = args.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "IgnoreUnknown",
                "K8S_POD_NAME",
                "NOMAD_REGION",
                "NOMAD_NAMESPACE",
                "NOMAD_JOB_ID",
                "NOMAD_GROUP_NAME",
                "NOMAD_ALLOC_ID"
            ]
        );
    }

    #[test]
    fn a_cni_mode_takes_its_list_from_the_configuration_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = settings();
        s.cni_config_dir = dir.path().to_path_buf();
        std::fs::write(
            dir.path().join("10-lan.conflist"),
            r#"{"cniVersion": "0.4.0", "name": "lan", "plugins": [{"type": "bridge"}]}"#,
        )
        .unwrap();
        assert_eq!(s.conflist_for("cni/lan").unwrap().plugins.len(), 1);
        assert_eq!(s.conflist_for("bridge").unwrap(), s.conflist());
        let e = s.conflist_for("cni/wan").unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "no CNI network configuration named \"wan\" in {}",
                dir.path().display()
            )
        );
        assert!(is_namespaced("cni/lan") && is_namespaced("bridge"));
        assert!(!is_namespaced("cni/") && !is_namespaced("host") && !is_namespaced(""));
    }
}
