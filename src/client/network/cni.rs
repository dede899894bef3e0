//! The CNI plugins, run as the Container Network Interface specification says: each plugin
//! of a network configuration list is an executable found on the client's `cni_path`,
//! given its configuration as JSON on stdin and the operation in `CNI_*` variables; `ADD`
//! runs the plugins in order, each handed the previous one's result (`prevResult`), and
//! `DEL` runs them in reverse with the result `ADD` gave. Runtime settings (the published
//! ports) reach only the plugins that declare the capability (`portMappings`).
//!
//! Pure parts ([`NetworkConfigList::plugin_config`], [`parse_result`], [`plugin_version`])
//! build and read the JSON; [`run_add`] and [`run_del`] are the thin async shell that runs
//! the executables. teamster does none of the plugins' work itself.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::io::AsyncWriteExt;

use super::NetworkError;

/// How long one plugin may take (an `iptables` lock held elsewhere can make it wait).
const PLUGIN_TIMEOUT: Duration = Duration::from_secs(60);

/// The CNI version teamster's own configuration speaks: Nomad's, which every plugin release
/// since 2019 understands.
pub const CNI_VERSION: &str = "0.4.0";

/// A network configuration list (a "conflist"): the network's name and its plugins, run in
/// order.
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkConfigList {
    /// The network's name (the host-local IPAM keeps its leases under it).
    pub name: String,
    /// The CNI version of the configuration.
    pub cni_version: String,
    /// Each plugin's own configuration (`type` names its executable).
    pub plugins: Vec<Value>,
}

/// One container's part in an operation: who it is and where its namespace is.
#[derive(Debug, Clone, PartialEq)]
pub struct Attachment {
    /// `CNI_CONTAINERID`: the allocation's ID.
    pub container_id: String,
    /// `CNI_NETNS`: the namespace's path.
    pub netns: PathBuf,
    /// `CNI_IFNAME`: the interface made in it.
    pub ifname: String,
    /// `CNI_ARGS`: `key=value` pairs (`IgnoreUnknown=true` is always first).
    pub args: Vec<(String, String)>,
    /// Runtime settings by capability (`portMappings`).
    pub runtime_config: Map<String, Value>,
}

/// The operations teamster asks of the plugins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Attach the container to the network.
    Add,
    /// Detach it, releasing what `ADD` took.
    Del,
}

impl Command {
    fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
        }
    }
}

impl NetworkConfigList {
    /// The configuration one plugin is given: its own keys, the list's `name` and
    /// `cniVersion`, the previous plugin's result, and the runtime settings it declared a
    /// capability for.
    pub fn plugin_config(
        &self,
        plugin: &Value,
        prev_result: Option<&Value>,
        runtime_config: &Map<String, Value>,
    ) -> Value {
        let mut config = plugin.as_object().cloned().unwrap_or_default();
        config.insert("name".into(), Value::String(self.name.clone()));
        config.insert("cniVersion".into(), Value::String(self.cni_version.clone()));
        if let Some(prev) = prev_result {
            config.insert("prevResult".into(), prev.clone());
        }
        let wanted: Map<String, Value> = plugin
            .get("capabilities")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter(|(_, on)| on.as_bool() == Some(true))
            .filter_map(|(cap, _)| runtime_config.get(cap).map(|v| (cap.clone(), v.clone())))
            .collect();
        if !wanted.is_empty() {
            config.insert("runtimeConfig".into(), Value::Object(wanted));
        }
        Value::Object(config)
    }

    /// The `type` of each plugin, in order.
    pub fn types(&self) -> Vec<String> {
        self.plugins
            .iter()
            .map(|p| {
                p.get("type")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }

    /// The list as a conflist file holds it.
    pub fn to_json(&self) -> Value {
        json!({ "cniVersion": self.cni_version, "name": self.name, "plugins": self.plugins })
    }

    /// A conflist file's list (`cni/<name>` networks): `name`, `cniVersion` and `plugins`
    /// must be there.
    pub fn from_json(value: &Value) -> Result<NetworkConfigList, String> {
        let field = |k: &str| text_field(value, k);
        let plugins = value
            .get("plugins")
            .and_then(Value::as_array)
            .filter(|p| !p.is_empty())
            .ok_or("no \"plugins\"")?;
        if let Some(i) = plugins
            .iter()
            .position(|p| p.get("type").and_then(Value::as_str).is_none())
        {
            return Err(format!("plugin #{i} has no \"type\""));
        }
        Ok(NetworkConfigList {
            name: field("name")?,
            cni_version: field("cniVersion")?,
            plugins: plugins.clone(),
        })
    }
}

/// The file name endings of network configurations (libcni's).
pub const CONFIG_EXTENSIONS: &[&str] = &["conflist", "conf", "json"];

/// The network configurations of `dir` (Nomad's `cni_config_dir`) by name: each
/// `.conflist`, `.conf` and `.json` file in name order, a single plugin's configuration (no
/// `plugins`) taken as a list of one; the first file of a name wins. The second part says
/// why each file left out was left out.
pub fn load_config_dir(
    dir: &Path,
) -> (
    std::collections::BTreeMap<String, NetworkConfigList>,
    Vec<String>,
) {
    let mut found = std::collections::BTreeMap::new();
    let mut problems = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (found, problems);
    };
    let mut files: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| CONFIG_EXTENSIONS.contains(&e))
        })
        .collect();
    files.sort();
    for path in files {
        let parsed = std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).map_err(|e| e.to_string()))
            .and_then(|value| config_list(&value));
        match parsed {
            Ok(list) if found.contains_key(&list.name) => problems.push(format!(
                "{}: network {:?} is configured by an earlier file",
                path.display(),
                list.name
            )),
            Ok(list) => {
                found.insert(list.name.clone(), list);
            }
            Err(e) => problems.push(format!("{}: {e}", path.display())),
        }
    }
    (found, problems)
}

/// The non-empty string `k` of a configuration.
fn text_field(value: &Value, k: &str) -> Result<String, String> {
    value
        .get(k)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .ok_or_else(|| format!("no {k:?}"))
}

/// A configuration list, or a single plugin's configuration as a list of one.
fn config_list(value: &Value) -> Result<NetworkConfigList, String> {
    if value.get("plugins").is_some() {
        return NetworkConfigList::from_json(value);
    }
    let field = |k: &str| text_field(value, k);
    field("type")?;
    Ok(NetworkConfigList {
        name: field("name")?,
        cni_version: field("cniVersion")?,
        plugins: vec![value.clone()],
    })
}

/// The address a result gives the container's interface: the first IP on an interface
/// inside a sandbox (or, when the result names no interface, the first IP), without its
/// prefix length.
pub fn parse_result(result: &Value, ifname: &str) -> Option<String> {
    let interfaces = result
        .get("interfaces")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let in_sandbox = |i: usize| {
        interfaces.get(i).is_some_and(|iface| {
            iface
                .get("sandbox")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())
                && iface.get("name").and_then(Value::as_str) == Some(ifname)
        })
    };
    let ips = result.get("ips").and_then(Value::as_array)?;
    let pick = ips
        .iter()
        .find(|ip| {
            ip.get("interface")
                .and_then(Value::as_u64)
                .is_some_and(|i| in_sandbox(i as usize))
        })
        .or_else(|| ips.first())?;
    let address = pick.get("address").and_then(Value::as_str)?;
    Some(address.split('/').next().unwrap_or(address).to_string())
}

/// A plugin's version from what it prints when run without arguments (`CNI bridge plugin
/// v1.1.1`), as Nomad's fingerprint reads it: the first word that is a semantic version
/// (with or without a `v`).
pub fn plugin_version(output: &str) -> Option<String> {
    output
        .split_whitespace()
        .find(|token| {
            let bare = token.strip_prefix('v').unwrap_or(token);
            let core = bare.split(['-', '+']).next().unwrap_or(bare);
            let parts: Vec<&str> = core.split('.').collect();
            parts.len() == 3
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        })
        .map(str::to_string)
}

/// The executable of plugin `kind`: the first `<dir>/<kind>` on `path` that is a file.
pub fn find_plugin(path: &[PathBuf], kind: &str) -> Option<PathBuf> {
    if kind.is_empty() || kind.contains('/') || kind == "." || kind == ".." {
        return None;
    }
    path.iter().map(|dir| dir.join(kind)).find(|p| p.is_file())
}

/// Attaches a container: every plugin's `ADD`, in order. When one fails, what the earlier
/// ones did is undone (`DEL` in reverse, errors ignored) and the failure returned.
pub async fn run_add(
    path: &[PathBuf],
    list: &NetworkConfigList,
    attachment: &Attachment,
) -> Result<Value, NetworkError> {
    let mut prev: Option<Value> = None;
    for plugin in &list.plugins {
        let config = list.plugin_config(plugin, prev.as_ref(), &attachment.runtime_config);
        match run_plugin(path, Command::Add, &config, attachment).await {
            Ok(result) => prev = Some(result),
            Err(e) => {
                let _ = run_del(path, list, attachment, prev.as_ref()).await;
                return Err(e);
            }
        }
    }
    Ok(prev.unwrap_or(Value::Null))
}

/// Detaches a container: every plugin's `DEL`, in reverse, each given `result` (what `ADD`
/// gave, when it is known). Every plugin runs; the first failure is returned.
pub async fn run_del(
    path: &[PathBuf],
    list: &NetworkConfigList,
    attachment: &Attachment,
    result: Option<&Value>,
) -> Result<(), NetworkError> {
    let mut first = None;
    for plugin in list.plugins.iter().rev() {
        let config = list.plugin_config(plugin, result, &attachment.runtime_config);
        if let Err(e) = run_plugin(path, Command::Del, &config, attachment).await {
            first.get_or_insert(e);
        }
    }
    first.map_or(Ok(()), Err)
}

/// Runs one plugin: its configuration on stdin, the operation in its environment. Its
/// stdout is its result (JSON; empty for `DEL`), or on failure its error
/// (`{"code", "msg", "details"}`).
async fn run_plugin(
    path: &[PathBuf],
    command: Command,
    config: &Value,
    attachment: &Attachment,
) -> Result<Value, NetworkError> {
    let kind = config
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let exe = find_plugin(path, &kind).ok_or_else(|| NetworkError::MissingPlugin {
        plugin: kind.clone(),
        path: join_path(path),
    })?;
    let args = std::iter::once("IgnoreUnknown=true".to_string())
        .chain(attachment.args.iter().map(|(k, v)| format!("{k}={v}")))
        .collect::<Vec<_>>()
        .join(";");
    let mut child = tokio::process::Command::new(&exe)
        .env("CNI_COMMAND", command.as_str())
        .env("CNI_CONTAINERID", &attachment.container_id)
        .env("CNI_NETNS", &attachment.netns)
        .env("CNI_IFNAME", &attachment.ifname)
        .env("CNI_ARGS", args)
        .env("CNI_PATH", join_path(path))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| NetworkError::Plugin {
            plugin: kind.clone(),
            command: command.as_str(),
            message: format!("cannot run {}: {e}", exe.display()),
        })?;
    let stdin = serde_json::to_vec(config).unwrap_or_default();
    if let Some(mut pipe) = child.stdin.take() {
        // A plugin that exits without reading its input fails below with its own message.
        let _ = pipe.write_all(&stdin).await;
    }
    let output = tokio::time::timeout(PLUGIN_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| NetworkError::Plugin {
            plugin: kind.clone(),
            command: command.as_str(),
            message: format!("no answer in {}s", PLUGIN_TIMEOUT.as_secs()),
        })?
        .map_err(|e| NetworkError::Plugin {
            plugin: kind.clone(),
            command: command.as_str(),
            message: e.to_string(),
        })?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(NetworkError::Plugin {
            plugin: kind,
            command: command.as_str(),
            message: plugin_error(&stdout, &String::from_utf8_lossy(&output.stderr)),
        });
    }
    if stdout.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(&stdout).map_err(|e| NetworkError::Plugin {
        plugin: kind,
        command: command.as_str(),
        message: format!("its result is not JSON: {e}"),
    })
}

/// A failed plugin's message: its error's `msg` and `details`, or what it printed.
fn plugin_error(stdout: &str, stderr: &str) -> String {
    if let Ok(err) = serde_json::from_str::<Value>(stdout) {
        let msg = err.get("msg").and_then(Value::as_str).unwrap_or_default();
        let details = err
            .get("details")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !msg.is_empty() {
            return if details.is_empty() {
                msg.to_string()
            } else {
                format!("{msg}: {details}")
            };
        }
    }
    let text = if stdout.trim().is_empty() {
        stderr
    } else {
        stdout
    };
    let text = text.trim();
    if text.is_empty() {
        "it failed and said nothing".to_string()
    } else {
        text.chars().take(500).collect()
    }
}

/// `path` as `CNI_PATH` holds it.
pub fn join_path(path: &[PathBuf]) -> String {
    path.iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}

/// The version of each executable plugin in `path` (`plugins.cni.version.<name>`), the first
/// directory holding a name winning. A plugin that says no version is `unknown`, as in
/// Nomad's fingerprint.
pub fn detect_versions(path: &[PathBuf]) -> std::collections::BTreeMap<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let mut found = std::collections::BTreeMap::new();
    for dir in path {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().to_string();
            if found.contains_key(&name) {
                continue;
            }
            let Ok(meta) = std::fs::metadata(entry.path()) else {
                continue;
            };
            if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
                continue;
            }
            found.insert(name, version_of(&entry.path()));
        }
    }
    found
}

/// Runs a plugin with no arguments and no `CNI_COMMAND` (it prints its name and version),
/// for at most three seconds.
fn version_of(exe: &Path) -> String {
    let child = std::process::Command::new(exe)
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = child else {
        return "unknown".into();
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return "unknown".into();
            }
        }
    }
    let Ok(output) = child.wait_with_output() else {
        return "unknown".into();
    };
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    plugin_version(&text).unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list() -> NetworkConfigList {
        NetworkConfigList {
            name: "teamster".into(),
            cni_version: CNI_VERSION.into(),
            plugins: vec![
                json!({"type": "loopback"}),
                json!({"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}),
            ],
        }
    }

    #[test]
    fn each_plugin_gets_the_lists_name_the_previous_result_and_only_its_capabilities() {
        let runtime: Map<String, Value> = [
            ("portMappings".to_string(), json!([{"hostPort": 8080}])),
            ("bandwidth".to_string(), json!({})),
        ]
        .into_iter()
        .collect();
        let l = list();
        let first = l.plugin_config(&l.plugins[0], None, &runtime);
        assert_eq!(
            first,
            json!({"type": "loopback", "name": "teamster", "cniVersion": "0.4.0"})
        );
        let prev = json!({"ips": []});
        let second = l.plugin_config(&l.plugins[1], Some(&prev), &runtime);
        assert_eq!(second["prevResult"], prev);
        assert_eq!(
            second["runtimeConfig"],
            json!({"portMappings": [{"hostPort": 8080}]})
        );
        assert_eq!(second["snat"], true);
        assert_eq!(l.types(), ["loopback", "portmap"]);
    }

    #[test]
    fn the_address_is_the_one_on_the_interface_inside_the_namespace() {
        let result = json!({
            "cniVersion": "0.4.0",
            "interfaces": [
                {"name": "teamster", "mac": "aa"},
                {"name": "veth1", "mac": "bb"},
                {"name": "eth0", "mac": "cc", "sandbox": "/var/run/netns/x"}
            ],
            "ips": [
                {"version": "4", "interface": 0, "address": "172.26.64.1/20"},
                {"version": "4", "interface": 2, "address": "172.26.64.7/20",
                 "gateway": "172.26.64.1"}
            ]
        });
        assert_eq!(
            parse_result(&result, "eth0").as_deref(),
            Some("172.26.64.7")
        );
        let bare = json!({"ips": [{"address": "10.1.2.3/24"}]});
        assert_eq!(parse_result(&bare, "eth0").as_deref(), Some("10.1.2.3"));
        assert_eq!(parse_result(&json!({}), "eth0"), None);
    }

    #[test]
    fn a_plugins_version_is_its_first_semantic_version_word() {
        assert_eq!(
            plugin_version(
                "CNI bridge plugin v1.1.1\nCNI protocol versions supported: 0.1.0, 0.2.0, 1.0.0"
            )
            .as_deref(),
            Some("v1.1.1")
        );
        assert_eq!(
            plugin_version(
                "CNI portmap plugin version unknown\nCNI protocol versions supported: 0.1.0, 1.0.0"
            )
            .as_deref(),
            Some("1.0.0")
        );
        assert_eq!(plugin_version("no version here 1.2"), None);
    }

    #[test]
    fn a_conflist_needs_a_name_a_version_and_typed_plugins() {
        let good = json!({"cniVersion": "1.0.0", "name": "mine",
                          "plugins": [{"type": "bridge"}]});
        assert_eq!(NetworkConfigList::from_json(&good).unwrap().name, "mine");
        let untyped = json!({"cniVersion": "1.0.0", "name": "mine", "plugins": [{}]});
        assert!(NetworkConfigList::from_json(&untyped)
            .unwrap_err()
            .contains("#0"));
        assert!(NetworkConfigList::from_json(&json!({"name": "x"})).is_err());
    }

    #[test]
    fn a_failed_plugins_message_is_its_error_or_what_it_printed() {
        assert_eq!(
            plugin_error(
                r#"{"code": 7, "msg": "no IPs", "details": "range full"}"#,
                ""
            ),
            "no IPs: range full"
        );
        assert_eq!(plugin_error("", "boom\n"), "boom");
        assert_eq!(plugin_error("", ""), "it failed and said nothing");
    }

    #[test]
    fn a_configuration_directory_is_read_by_network_name_first_file_winning() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write(
            "10-lan.conflist",
            r#"{"cniVersion": "1.0.0", "name": "lan", "plugins": [{"type": "bridge"}, {"type": "portmap"}]}"#,
        );
        write(
            "20-lan.conflist",
            r#"{"cniVersion": "0.4.0", "name": "lan", "plugins": [{"type": "macvlan"}]}"#,
        );
        // A single plugin's configuration is a list of one.
        write(
            "30-wan.conf",
            r#"{"cniVersion": "0.4.0", "name": "wan", "type": "macvlan", "master": "eth0"}"#,
        );
        write("40-broken.json", "{not json");
        write("50-notes.txt", "ignored");
        let (found, problems) = load_config_dir(dir.path());
        assert_eq!(found.keys().collect::<Vec<_>>(), ["lan", "wan"]);
        assert_eq!(found["lan"].cni_version, "1.0.0");
        assert_eq!(found["lan"].plugins.len(), 2);
        assert_eq!(found["wan"].plugins[0]["master"], "eth0");
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("20-lan.conflist"), "{problems:?}");
        assert!(problems[1].contains("40-broken.json"), "{problems:?}");
        // A missing directory has no networks.
        let (none, problems) = load_config_dir(&dir.path().join("missing"));
        assert!(none.is_empty() && problems.is_empty());
    }

    #[test]
    fn plugins_are_found_on_the_path_by_type_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bridge"), "").unwrap();
        let path = vec![PathBuf::from("/nonexistent"), dir.path().to_path_buf()];
        assert_eq!(
            find_plugin(&path, "bridge"),
            Some(dir.path().join("bridge"))
        );
        assert_eq!(find_plugin(&path, "../bridge"), None);
        assert_eq!(find_plugin(&path, "portmap"), None);
    }
}
