//! The files a group's network gives its `exec` and `docker` tasks, as Nomad's drivers
//! write them: a resolver configuration from the network's `dns` block (what the block
//! leaves empty comes from the node's own), bound at `/etc/resolv.conf`, and in bridge and
//! cni modes `<alloc dir>/hosts`, which maps the namespace's hostname to the allocation's
//! address, bound at `/etc/hosts`. Both live in the allocation's own directory, which only
//! the client writes (Nomad keeps `resolv.conf` in the task's directory, where anyone on
//! the node may swap it for a link before a container binds it). A `cni/<name>` network's
//! plugins may give DNS settings in their result: without a `dns` block those are used, as
//! Nomad does. `raw_exec` tasks see the host's own files.

use std::io::Write;
use std::path::{Path, PathBuf};

use teamster_storage::model::{DnsConfig, Task};

use crate::client::types::LocalAlloc;

/// The ending of a task's generated resolver configuration, `<task>.resolv.conf` in the
/// allocation's directory.
pub const RESOLV_CONF: &str = "resolv.conf";
/// The generated hosts file, in the allocation's directory (its tasks share it).
pub const HOSTS: &str = "hosts";
/// The node's resolver configuration.
pub const HOST_RESOLV_CONF: &str = "/etc/resolv.conf";
/// systemd-resolved's list of the upstream servers, used instead of a host file that
/// names only its local stub (unreachable from another network namespace).
pub const RESOLVED_UPSTREAM: &str = "/run/systemd/resolve/resolv.conf";
/// systemd-resolved's local stub address.
const RESOLVED_STUB: &str = "127.0.0.53";

/// Where a task's generated files are and what its namespace is called, for a driver.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkFiles {
    /// The file to bind at `/etc/resolv.conf` (read-only).
    pub resolv_conf: Option<PathBuf>,
    /// The file to bind at `/etc/hosts`.
    pub hosts: Option<PathBuf>,
    /// The hostname an `exec` task's UTS namespace gets (a docker task has its pause
    /// container's).
    pub hostname: Option<String>,
}

/// Why a task's network files could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilesError {
    /// The `dns` block, interpolated, names something that is not an address.
    #[error("dns server {0:?} is not an IP address")]
    BadServer(String),
    /// The file could not be written (a start may be tried again).
    #[error("cannot write {path}: {message}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        message: String,
    },
}

/// The network files of `task` (as its runner starts it) of `local`'s allocation: its
/// resolver configuration, written into the allocation's directory `alloc_root` when the
/// group's network has a `dns` block (each value interpolated by `interpolate`, the task's
/// environment) or a plugin's result gave name servers, and the allocation's hosts file
/// and hostname in bridge and cni modes. `raw_exec` tasks get none.
pub fn for_task(
    local: &LocalAlloc,
    task: &Task,
    alloc_root: &Path,
    interpolate: impl Fn(&str) -> String,
) -> Result<NetworkFiles, FilesError> {
    let mut files = NetworkFiles::default();
    if task.driver == "raw_exec" {
        return Ok(files);
    }
    let network = local.group().and_then(|g| g.networks.first());
    // The group's block, else what the plugins' result gave (Nomad's order).
    let from_result = local.network.as_ref().and_then(|n| result_dns(&n.result));
    if let Some(dns) = network
        .and_then(|n| n.dns.as_ref())
        .or(from_result.as_ref())
    {
        let each = |values: &[String]| values.iter().map(|v| interpolate(v)).collect::<Vec<_>>();
        let dns = DnsConfig {
            servers: each(&dns.servers),
            searches: each(&dns.searches),
            options: each(&dns.options),
        };
        if let Some(bad) = dns
            .servers
            .iter()
            .find(|s| s.parse::<std::net::IpAddr>().is_err())
        {
            return Err(FilesError::BadServer(bad.clone()));
        }
        // A node without a resolver configuration has nothing to fill the gaps with.
        let host = host_resolv_conf().unwrap_or_default();
        let path = alloc_root.join(format!("{}.{RESOLV_CONF}", task.name));
        write_fresh(&path, &resolv_conf(&host, &dns)).map_err(|e| FilesError::Write {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        files.resolv_conf = Some(path);
    }
    if let Some(net) = &local.network {
        if !net.hostname.is_empty() {
            let hosts = alloc_root.join(HOSTS);
            if hosts.is_file() {
                files.hosts = Some(hosts);
            }
            files.hostname = Some(net.hostname.clone());
        }
    }
    Ok(files)
}

/// The DNS settings a CNI result gives (`dns { nameservers, search, options }`), when it
/// names a server (Nomad's rule).
pub fn result_dns(result: &serde_json::Value) -> Option<DnsConfig> {
    let dns = result.get("dns")?;
    let list = |k: &str| -> Vec<String> {
        dns.get(k)
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let out = DnsConfig {
        servers: list("nameservers"),
        searches: list("search"),
        options: list("options"),
    };
    (!out.servers.is_empty()).then_some(out)
}

/// The values of `key` lines (`nameserver`, `search`, `options`) of a resolver
/// configuration, comments left out.
fn values<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    text.lines()
        .map(|l| l.split(['#', ';']).next().unwrap_or(""))
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some(key)).then_some(words)
        })
        .flatten()
        .collect()
}

/// The node's resolver configuration as a namespace of its own can use it: `/etc/resolv.conf`,
/// or systemd-resolved's upstream list when that file names only the local stub.
pub fn host_resolv_conf() -> std::io::Result<String> {
    let text = std::fs::read_to_string(HOST_RESOLV_CONF)?;
    let servers = values(&text, "nameserver");
    if !servers.is_empty() && servers.iter().all(|s| *s == RESOLVED_STUB) {
        if let Ok(upstream) = std::fs::read_to_string(RESOLVED_UPSTREAM) {
            return Ok(upstream);
        }
    }
    Ok(text)
}

/// The resolver configuration of a task whose group network has `dns`, over the node's
/// `host` one: an empty block copies the node's file; otherwise each of servers, search
/// domains and options is the block's when it gives any, else the node's.
pub fn resolv_conf(host: &str, dns: &DnsConfig) -> String {
    if dns.servers.is_empty() && dns.searches.is_empty() && dns.options.is_empty() {
        return host.to_string();
    }
    let pick = |own: &[String], key: &str| -> Vec<String> {
        if own.is_empty() {
            values(host, key).into_iter().map(str::to_string).collect()
        } else {
            own.to_vec()
        }
    };
    let mut out = String::from("# Generated by teamster from the group network's dns block\n");
    let searches = pick(&dns.searches, "search");
    if !searches.is_empty() {
        out.push_str(&format!("search {}\n", searches.join(" ")));
    }
    for server in pick(&dns.servers, "nameserver") {
        out.push_str(&format!("nameserver {server}\n"));
    }
    let options = pick(&dns.options, "options");
    if !options.is_empty() {
        out.push_str(&format!("options {}\n", options.join(" ")));
    }
    out
}

/// The hosts file of an allocation whose namespace is `hostname` at `address`.
pub fn hosts_file(address: &str, hostname: &str) -> String {
    format!(
        "# Generated by teamster for the allocation's network namespace\n\
         127.0.0.1 localhost\n\
         ::1 localhost ip6-localhost ip6-loopback\n\
         fe00::0 ip6-localnet\n\
         ff00::0 ip6-mcastprefix\n\
         ff02::1 ip6-allnodes\n\
         ff02::2 ip6-allrouters\n\
         \n\
         # The allocation's address and hostname, shared by the group's tasks\n\
         {address} {hostname}\n"
    )
}

/// Writes `content` at `path` unless a file is there already (its tasks may have changed
/// it), never through a symbolic link.
pub fn write_new(path: &Path, content: &str) -> std::io::Result<()> {
    match create(path, content) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

/// Writes `content` at `path`, replacing what is there (never following a link): a task's
/// resolver configuration follows its job's current `dns` block at every start.
pub fn write_fresh(path: &Path, content: &str) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    // Something made there meanwhile is refused, not kept.
    create(path, content)
}

fn create(path: &Path, content: &str) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    f.write_all(content.as_bytes())?;
    f.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "# from the host\nnameserver 10.0.0.2\nnameserver 10.0.0.3 # second\n\
                        search corp.example lab.example\noptions ndots:1 timeout:2\n";

    fn dns(servers: &[&str], searches: &[&str], options: &[&str]) -> DnsConfig {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        DnsConfig {
            servers: own(servers),
            searches: own(searches),
            options: own(options),
        }
    }

    #[test]
    fn an_empty_block_copies_the_node_file() {
        assert_eq!(resolv_conf(HOST, &dns(&[], &[], &[])), HOST);
    }

    #[test]
    fn what_the_block_gives_replaces_that_part_only() {
        let out = resolv_conf(HOST, &dns(&["192.0.2.1"], &[], &["ndots:3"]));
        assert_eq!(
            out.lines().skip(1).collect::<Vec<_>>(),
            [
                "search corp.example lab.example",
                "nameserver 192.0.2.1",
                "options ndots:3"
            ]
        );
        let out = resolv_conf(HOST, &dns(&[], &["svc.test"], &[]));
        assert_eq!(
            out.lines().skip(1).collect::<Vec<_>>(),
            [
                "search svc.test",
                "nameserver 10.0.0.2",
                "nameserver 10.0.0.3",
                "options ndots:1 timeout:2"
            ]
        );
    }

    #[test]
    fn a_node_without_search_or_options_gives_none() {
        let out = resolv_conf("nameserver 10.1.1.1\n", &dns(&["192.0.2.9"], &[], &[]));
        assert_eq!(
            out.lines().skip(1).collect::<Vec<_>>(),
            ["nameserver 192.0.2.9"]
        );
    }

    #[test]
    fn a_cni_result_s_dns_is_read_when_it_gives_any() {
        let r = serde_json::json!({ "dns": { "nameservers": ["10.1.0.2"], "search": ["lan"] } });
        assert_eq!(result_dns(&r), Some(dns(&["10.1.0.2"], &["lan"], &[])));
        assert_eq!(result_dns(&serde_json::json!({ "dns": {} })), None);
        let searches_only = serde_json::json!({ "dns": { "search": ["lan"] } });
        assert_eq!(result_dns(&searches_only), None);
        assert_eq!(result_dns(&serde_json::json!({ "ips": [] })), None);
    }

    #[test]
    fn the_hosts_file_maps_the_hostname_to_the_address() {
        let text = hosts_file("172.26.64.9", "web-0");
        assert!(text.lines().any(|l| l == "127.0.0.1 localhost"), "{text}");
        assert!(text.lines().any(|l| l == "172.26.64.9 web-0"), "{text}");
    }

    #[test]
    fn write_new_keeps_a_file_and_never_follows_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        write_new(&path, "one").unwrap();
        write_new(&path, "two").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "one");
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "kept").unwrap();
        let link = dir.path().join("resolv.conf");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        // Kept, and nothing written through it.
        write_new(&link, "through").unwrap();
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "kept");
        write_fresh(&link, "fresh").unwrap();
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "fresh");
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "kept");
        assert!(!std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
    }
}
