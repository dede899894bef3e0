//! Group networking in bridge mode on a real client (root, Debian's CNI plugins, installed
//! when missing): a two-task group whose `exec` task serves on port 8080 inside the
//! allocation's network namespace and whose `raw_exec` task reaches it on `localhost`; the
//! port published as a dynamic host port and answered from the host; two allocations on
//! one node, each with its own address and its own port 8080; a client killed with
//! SIGKILL and restarted keeps the running allocations reachable and makes nothing twice;
//! `job stop` removes the namespaces and every iptables rule that names the allocations.
//! The group's `hostname` and `dns` block reach its exec and docker tasks: their hostname,
//! `/etc/resolv.conf` and an `/etc/hosts` naming the allocation's address.
//! Traffic goes only to loopback and to the namespaces the test made.
//!
//! Without root or the plugins the test prints a `SKIP` line and passes; with `CI=true` it
//! fails instead.

use std::time::Duration;

use serde_json::{json, Value};
use teamster::api::ApiClient;
use teamster_cluster_tests::api::register;
use teamster_cluster_tests::client_process::{wait_node_status, ClientProcess};
use teamster_cluster_tests::packages::{find_or_install, skip_or_fail};
use teamster_cluster_tests::process::{ClusterOptions, ProcessCluster};
use teamster_cluster_tests::wait_for;

const FORMATION: Duration = Duration::from_secs(30);

/// What a server task prints first: its hostname, then its `/etc/resolv.conf` and
/// `/etc/hosts`.
const SHOW_NETWORK_FILES: &str =
    "echo \"hostname=$(cat /proc/sys/kernel/hostname)\"; cat /etc/resolv.conf /etc/hosts; ";

/// The `exec` task: an HTTP server on port 8080 of the namespace (every address in it),
/// answering with its allocation's ID.
const SERVER: &str = "cd /local && echo \"$NOMAD_ALLOC_ID\" > index.html && \
     exec /usr/bin/python3 -m http.server 8080";

/// The `raw_exec` task: fetches `localhost:8080` every half second and prints what it got,
/// after its allocation's address.
const CLIENT: &str = "echo \"ip=$NOMAD_ALLOC_IP_http port=$NOMAD_PORT_http host=$NOMAD_HOST_PORT_http\"; \
     while :; do /usr/bin/python3 -c \"import urllib.request as u; \
     print('got=' + u.urlopen('http://localhost:8080/', timeout=2).read().decode().strip(), flush=True)\" \
     2>/dev/null; sleep 0.5; done";

fn bridge_job(id: &str, count: u32) -> Value {
    json!({
        "ID": id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "web", "Count": count,
            // The resolver named is the namespace's own loopback: nothing leaves it.
            "Networks": [{ "Mode": "bridge",
                           "Hostname": "web-${NOMAD_ALLOC_INDEX}",
                           "DNS": { "Servers": ["127.0.0.1"], "Searches": ["teamster.test"],
                                    "Options": ["ndots:2"] },
                           "DynamicPorts": [{ "Label": "http", "To": 8080 }] }],
            "Services": [
                { "Name": "bridged-inside", "PortLabel": "http", "Provider": "nomad",
                  "AddressMode": "alloc" },
                { "Name": "bridged-outside", "PortLabel": "http", "Provider": "nomad" }
            ],
            "Tasks": [
                { "Name": "server", "Driver": "exec",
                  "Config": { "command": "/bin/sh",
                              "args": ["-c", format!("{SHOW_NETWORK_FILES}{SERVER}")] },
                  "KillTimeout": 1_000_000_000u64,
                  "Resources": { "CPU": 50, "MemoryMB": 64 } },
                { "Name": "client", "Driver": "raw_exec", "User": "nobody",
                  "Config": { "command": "/bin/sh", "args": ["-c", CLIENT] },
                  "KillTimeout": 1_000_000_000u64,
                  "Resources": { "CPU": 20, "MemoryMB": 32 } }
            ]
        }]
    })
}

async fn job_allocs(api: &ApiClient, job: &str) -> Vec<Value> {
    api.get(&format!("/v1/job/{job}/allocations?stale=true"))
        .await
        .unwrap_or_default()
}

async fn client_stdout(client: &ApiClient, alloc_id: &str) -> String {
    task_stdout(client, alloc_id, "client").await
}

async fn task_stdout(client: &ApiClient, alloc_id: &str, task: &str) -> String {
    client
        .request_text::<()>(
            reqwest::Method::GET,
            &format!("/v1/client/fs/logs/{alloc_id}?task={task}&type=stdout&plain=true"),
            None,
        )
        .await
        .unwrap_or_default()
}

/// The server task of allocation `alloc_id` (index `index`, address `addr`) printed the
/// group's hostname, the dns block's resolver configuration and a hosts file naming it.
async fn assert_network_files(client: &ApiClient, alloc_id: &str, index: usize, addr: &str) {
    let out = task_stdout(client, alloc_id, "server").await;
    let lines: Vec<&str> = out.lines().map(str::trim).collect();
    for wanted in [
        format!("hostname=web-{index}"),
        "search teamster.test".to_string(),
        "nameserver 127.0.0.1".to_string(),
        "options ndots:2".to_string(),
        "127.0.0.1 localhost".to_string(),
        format!("{addr} web-{index}"),
    ] {
        assert!(lines.contains(&wanted.as_str()), "{wanted:?} in {out}");
    }
    // The dns block's servers only: not the node's.
    let servers = lines.iter().filter(|l| l.starts_with("nameserver")).count();
    assert_eq!(servers, 1, "{out}");
}

/// The running allocation of one-allocation job `job` once its client task has reached its
/// server task: the allocation, its ID, its address and its published host port.
async fn serving(
    api: &ApiClient,
    client: &ClientProcess,
    job: &str,
) -> anyhow::Result<(Value, String, String, u32)> {
    let client_api = client.api();
    wait_for(
        Duration::from_secs(60),
        "the allocation serving",
        || async {
            let a = job_allocs(api, job)
                .await
                .into_iter()
                .find(|a| a["ClientStatus"] == "running")?;
            let id = a["ID"].as_str()?.to_string();
            let (addr, host_port, reached) =
                parse_client(&client_stdout(&client_api, &id).await, &id)?;
            reached.then_some((a, id, addr, host_port))
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", client.log_tail(40)))
}

/// The index in an allocation's name (`job.group[N]`).
fn alloc_index(alloc: &Value) -> usize {
    let name = alloc["Name"].as_str().unwrap_or_default();
    name.rsplit('[')
        .next()
        .and_then(|n| n.trim_end_matches(']').parse().ok())
        .unwrap_or(usize::MAX)
}

/// What the allocation's client task printed: its address and port line, and whether it
/// has reached the server task (which answers with the allocation's ID).
fn parse_client(out: &str, alloc_id: &str) -> Option<(String, u32, bool)> {
    let first = out.lines().next()?;
    let mut ip = None;
    let mut host = None;
    for word in first.split_whitespace() {
        if let Some(v) = word.strip_prefix("ip=") {
            ip = Some(v.to_string());
        }
        if let Some(v) = word.strip_prefix("host=") {
            host = v.parse().ok();
        }
    }
    let reached = out.lines().any(|l| l == format!("got={alloc_id}"));
    Some((ip?, host?, reached))
}

/// GET `url` (a published port on the host), with a short timeout.
async fn fetch(url: &str) -> Option<String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()
        .ok()?;
    let r = client.get(url).send().await.ok()?;
    r.status().is_success().then_some(())?;
    Some(r.text().await.ok()?.trim().to_string())
}

/// The host's iptables rules (every table) that mention `needle`.
fn rules_naming(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for table in ["filter", "nat", "mangle"] {
        let out = std::process::Command::new("iptables")
            .args(["-w", "-t", table, "-S"])
            .output();
        if let Ok(o) = out {
            for line in String::from_utf8_lossy(&o.stdout).lines() {
                if line.contains(needle) {
                    found.push(format!("{table}: {line}"));
                }
            }
        }
    }
    found
}

/// A server and a client (root, plugins installed) whose node offers bridge networking and
/// the exec driver: the cluster, the server's API, the client and its address; `None` when
/// the test is skipped.
async fn bridge_cluster(
    test: &str,
    name: &str,
    host: u8,
) -> anyhow::Result<Option<(ProcessCluster, ApiClient, ClientProcess, String)>> {
    cluster_with_networks(test, name, host, &[]).await
}

/// [`bridge_cluster`] whose client's CNI configuration directory holds `networks`
/// (configuration lists).
async fn cluster_with_networks(
    test: &str,
    name: &str,
    host: u8,
    networks: &[Value],
) -> anyhow::Result<Option<(ProcessCluster, ApiClient, ClientProcess, String)>> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip_or_fail(test, "bridge networking needs root")?;
        return Ok(None);
    }
    // Debian's package, where the client's default cni_path finds it.
    if let Err(why) = find_or_install(
        &["/usr/lib/cni/bridge", "/usr/lib/cni/portmap"],
        &["containernetworking-plugins"],
    ) {
        skip_or_fail(test, &why)?;
        return Ok(None);
    }
    let mut c = ProcessCluster::start(1, ClusterOptions::default())?;
    let leader = c.wait_leader(FORMATION).await?;
    let api = c.servers[leader].api();
    let rpc = c.servers[leader].rpc_addr();
    let (block, _) = c.servers[0].ip.rsplit_once('.').expect("IPv4");
    let ip = format!("{block}.{host}");
    let conf_dir = c.dir().join(format!("{name}-cni"));
    std::fs::create_dir_all(&conf_dir)?;
    for list in networks {
        let file = format!("{}.conflist", list["name"].as_str().unwrap_or("unnamed"));
        std::fs::write(conf_dir.join(file), serde_json::to_vec_pretty(list)?)?;
    }
    let extra = format!("cni_config_dir = {:?}", conf_dir.display().to_string());
    let client = ClientProcess::start(c.dir(), name, &ip, &[rpc], &extra)?;
    let node_id = wait_for(Duration::from_secs(15), "the node id", || async {
        client.node_id().await
    })
    .await?;
    wait_node_status(&api, &node_id, "ready", Duration::from_secs(15)).await?;
    let node: Value = api.get(&format!("/v1/node/{node_id}")).await?;
    for plugin in ["bridge", "firewall", "host-local", "loopback", "portmap"] {
        let attr = &node["Attributes"][format!("plugins.cni.version.{plugin}")];
        assert!(
            attr.is_string(),
            "no {plugin} attribute: {:#}",
            node["Attributes"]
        );
    }
    if node["Drivers"]["exec"]["Detected"] != true {
        skip_or_fail(
            test,
            &format!(
                "the exec driver is not detected: {}",
                node["Drivers"]["exec"]
            ),
        )?;
        return Ok(None);
    }
    Ok(Some((c, api, client, ip)))
}

#[tokio::test]
async fn bridge_groups_share_a_namespace_publish_ports_survive_a_client_kill_and_leave_nothing(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let test =
        "bridge_groups_share_a_namespace_publish_ports_survive_a_client_kill_and_leave_nothing";
    let Some((_c, api, mut client, ip)) = bridge_cluster(test, "bridge-client", 101).await? else {
        return Ok(());
    };
    register(&api, bridge_job("bridged", 2)).await?;
    let client_api = client.api();
    // Both allocations run, and in each the client task has reached its own server task.
    let seen = wait_for(
        Duration::from_secs(60),
        "both allocations serving",
        || async {
            let allocs = job_allocs(&api, "bridged").await;
            let mut seen = Vec::new();
            for a in allocs.iter().filter(|a| a["ClientStatus"] == "running") {
                let id = a["ID"].as_str()?.to_string();
                let (addr, host_port, reached) =
                    parse_client(&client_stdout(&client_api, &id).await, &id)?;
                reached.then_some(())?;
                seen.push((id, addr, host_port, alloc_index(a)));
            }
            (seen.len() == 2).then_some(seen)
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", client.log_tail(40)))?;
    // The exec task sees its group's hostname, its dns block and a hosts file naming it.
    for (id, addr, _, index) in &seen {
        assert_network_files(&client_api, id, *index, addr).await;
    }
    let seen: Vec<(String, String, u32)> = seen
        .into_iter()
        .map(|(id, addr, port, _)| (id, addr, port))
        .collect();
    // Each its own address, in the bridge's subnet.
    assert_ne!(seen[0].1, seen[1].1, "{seen:?}");
    for (_, addr, _) in &seen {
        let a: std::net::Ipv4Addr = addr.parse()?;
        let o = a.octets();
        assert!(
            o[0] == 172 && o[1] == 26 && (64..80).contains(&o[2]),
            "{addr}"
        );
    }
    // The published port answers from the host, each with its own allocation.
    for (id, _, host_port) in &seen {
        let url = format!("http://{ip}:{host_port}/");
        let got = wait_for(Duration::from_secs(10), "the published port", || async {
            fetch(&url).await
        })
        .await?;
        assert_eq!(&got, id, "{url}");
    }
    // Services: `alloc` registers the allocation's address and the port inside; the default
    // the node's address and the host port.
    let inside: Vec<Value> = wait_for(
        Duration::from_secs(15),
        "the services registered",
        || async {
            let regs: Vec<Value> = api.get("/v1/service/bridged-inside").await.ok()?;
            (regs.len() == 2).then_some(regs)
        },
    )
    .await?;
    for reg in &inside {
        let alloc = reg["AllocID"].as_str().unwrap_or_default();
        let own = seen
            .iter()
            .find(|(id, _, _)| id == alloc)
            .expect("one of ours");
        assert_eq!(reg["Address"], own.1.as_str(), "{reg}");
        assert_eq!(reg["Port"], 8080, "{reg}");
    }
    let outside: Vec<Value> = api.get("/v1/service/bridged-outside").await?;
    assert_eq!(outside.len(), 2);
    for reg in &outside {
        let alloc = reg["AllocID"].as_str().unwrap_or_default();
        let own = seen
            .iter()
            .find(|(id, _, _)| id == alloc)
            .expect("one of ours");
        assert_eq!(reg["Address"], ip.as_str(), "{reg}");
        assert_eq!(reg["Port"], own.2, "{reg}");
    }
    // The namespaces are where Nomad keeps them.
    for (id, _, _) in &seen {
        assert!(
            std::path::Path::new(&format!("/var/run/netns/{id}")).exists(),
            "no namespace for {id}"
        );
    }

    // A client killed and restarted finds its namespaces again: the same namespaces and
    // addresses, still reachable, nothing made twice.
    let inode = |id: &str| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/var/run/netns/{id}"))
            .map(|m| m.ino())
            .ok()
    };
    let leases = || {
        std::fs::read_dir("/var/run/cni/teamster")
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("172."))
                    .count()
            })
            .unwrap_or(0)
    };
    let before: Vec<Option<u64>> = seen.iter().map(|(id, _, _)| inode(id)).collect();
    let leases_before = leases();
    assert!(leases_before >= 2, "{leases_before} leases");
    let found_again = |log: &str| log.matches("found the allocation's network again").count();
    let found_before = found_again(&client.log_tail(100_000));
    client.kill();
    client.restart()?;
    wait_for(
        Duration::from_secs(20),
        "both networks found again",
        || async { (found_again(&client.log_tail(100_000)) >= found_before + 2).then_some(()) },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", client.log_tail(40)))?;
    let after: Vec<Option<u64>> = seen.iter().map(|(id, _, _)| inode(id)).collect();
    assert_eq!(before, after, "the namespaces were made again");
    assert_eq!(leases(), leases_before, "addresses were leased again");
    for (id, _, host_port) in &seen {
        let url = format!("http://{ip}:{host_port}/");
        let got = wait_for(
            Duration::from_secs(20),
            "the published port after the restart",
            || async { fetch(&url).await },
        )
        .await?;
        assert_eq!(&got, id);
        let dnat: Vec<String> = rules_naming(&format!("--dport {host_port} "))
            .into_iter()
            .filter(|r| r.contains("DNAT"))
            .collect();
        assert_eq!(dnat.len(), 2, "one DNAT rule per protocol: {dnat:#?}");
    }
    let running: Vec<Value> = job_allocs(&api, "bridged")
        .await
        .into_iter()
        .filter(|a| a["ClientStatus"] == "running")
        .collect();
    assert_eq!(running.len(), 2);

    // job stop: no namespace, no rule naming an allocation or its address.
    api.request::<(), Value>(reqwest::Method::DELETE, "/v1/job/bridged", None)
        .await?;
    wait_for(
        Duration::from_secs(30),
        "both allocations stopped",
        || async {
            let allocs = job_allocs(&api, "bridged").await;
            (allocs.len() == 2 && allocs.iter().all(|a| a["ClientStatus"] == "complete"))
                .then_some(())
        },
    )
    .await?;
    for (id, addr, _) in &seen {
        let gone = wait_for(Duration::from_secs(15), "the namespace removed", || async {
            (!std::path::Path::new(&format!("/var/run/netns/{id}")).exists()).then_some(())
        })
        .await;
        assert!(gone.is_ok(), "the namespace of {id} is left");
        let left = rules_naming(id);
        assert!(left.is_empty(), "rules left for {id}: {left:#?}");
        let left = rules_naming(&format!("{addr}/32"));
        assert!(left.is_empty(), "rules left for {addr}: {left:#?}");
    }
    Ok(())
}

/// The docker task: busybox's HTTP server on port 8080 of the namespace, answering with its
/// allocation's ID.
const DOCKER_SERVER: &str = "mkdir -p /srv && echo \"$NOMAD_ALLOC_ID\" > /srv/index.html && \
     exec httpd -f -p 8080 -h /srv";

#[tokio::test]
async fn a_docker_task_joins_the_namespace_through_a_pause_container_removed_with_it(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let test = "a_docker_task_joins_the_namespace_through_a_pause_container_removed_with_it";
    if teamster_cluster_tests::compose::skip_without_docker(test) {
        return Ok(());
    }
    teamster_cluster_tests::compose::build_image()?;
    let Some((_c, api, client, ip)) = bridge_cluster(test, "bridge-docker", 102).await? else {
        return Ok(());
    };
    let mut job = bridge_job("dockered", 1);
    job["TaskGroups"][0]["Services"] = json!([]);
    job["TaskGroups"][0]["Tasks"][0] = json!({
        "Name": "server", "Driver": "docker",
        "Config": { "image": teamster_cluster_tests::compose::image(),
                    "entrypoint": ["/bin/sh", "-c",
                                   format!("{SHOW_NETWORK_FILES}{DOCKER_SERVER}")] },
        "KillTimeout": 1_000_000_000u64,
        "Resources": { "CPU": 50, "MemoryMB": 64 }
    });
    register(&api, job).await?;
    let client_api = client.api();
    let (_, id, addr, host_port) = serving(&api, &client, "dockered").await?;
    assert!(addr.starts_with("172.26."), "{addr}");
    // The container shares the pause container's hostname, the group's; the dns block and
    // the hosts file are bound over the engine's own.
    assert_network_files(&client_api, &id, 0, &addr).await;
    // The container is in the pause container's namespace, which is the allocation's.
    let pause = format!("teamster-pause-{id}");
    let inspect = |what: &str, of: &str| -> anyhow::Result<String> {
        let out = std::process::Command::new("docker")
            .args(["inspect", "-f", what, of])
            .output()?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let pause_id = inspect("{{.Id}}", &pause)?;
    assert!(!pause_id.is_empty(), "no pause container {pause}");
    let mode = inspect("{{.HostConfig.NetworkMode}}", &format!("server-{id}"))?;
    // The engine keeps the name it was given, or the container's ID.
    assert!(
        mode == format!("container:{pause}") || mode == format!("container:{pause_id}"),
        "{mode}"
    );
    let url = format!("http://{ip}:{host_port}/");
    let got = wait_for(Duration::from_secs(10), "the published port", || async {
        fetch(&url).await
    })
    .await?;
    assert_eq!(got, id);

    api.request::<(), Value>(reqwest::Method::DELETE, "/v1/job/dockered", None)
        .await?;
    let netns = format!("/var/run/netns/{id}");
    wait_for(
        Duration::from_secs(30),
        "the pause container and namespace removed",
        || async {
            let listed = std::process::Command::new("docker")
                .args(["ps", "-aq", "--filter", &format!("name={pause}")])
                .output()
                .ok()?;
            (String::from_utf8_lossy(&listed.stdout).trim().is_empty()
                && !std::path::Path::new(&netns).exists())
            .then_some(())
        },
    )
    .await?;
    let left = rules_naming(&id);
    assert!(left.is_empty(), "rules left for {id}: {left:#?}");
    Ok(())
}

/// A network of the client's own configuration: its own bridge and subnet, published ports.
fn lan_network() -> Value {
    json!({
        "cniVersion": "0.4.0", "name": "tstlan",
        "plugins": [
            { "type": "loopback" },
            { "type": "bridge", "bridge": "tstlan0", "isGateway": true, "ipMasq": true,
              "ipam": { "type": "host-local", "ranges": [[{ "subnet": "10.213.7.0/24" }]],
                        "routes": [{ "dst": "0.0.0.0/0" }], "dataDir": "/var/run/cni" } },
            { "type": "firewall", "backend": "iptables" },
            { "type": "portmap", "capabilities": { "portMappings": true }, "snat": true }
        ]
    })
}

#[tokio::test]
async fn a_cni_network_by_name_attaches_from_the_client_s_directory_and_is_placed_only_there(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let test =
        "a_cni_network_by_name_attaches_from_the_client_s_directory_and_is_placed_only_there";
    let Some((_c, api, client, ip)) =
        cluster_with_networks(test, "cni-client", 103, &[lan_network()]).await?
    else {
        return Ok(());
    };
    let result = async {
        // The node offers the network by its mode.
        let node_id = client.node_id().await.unwrap_or_default();
        let node: Value = api.get(&format!("/v1/node/{node_id}")).await?;
        let modes: Vec<&str> = node["NodeResources"]["Networks"]
            .as_array()
            .map(|a| a.iter().filter_map(|n| n["Mode"].as_str()).collect())
            .unwrap_or_default();
        assert!(modes.contains(&"cni/tstlan"), "{modes:?}");

        // A network no client has: the job is placed nowhere, and Nomad's reason says why.
        let mut absent = bridge_job("absent", 1);
        absent["TaskGroups"][0]["Networks"][0]["Mode"] = json!("cni/tstwan");
        register(&api, absent).await?;
        let reasons = wait_for(Duration::from_secs(20), "the placement failure", || async {
            let evals: Vec<Value> = api.get("/v1/job/absent/evaluations").await.ok()?;
            evals
                .iter()
                .find_map(|e| e["FailedTGAllocs"]["web"].as_object().cloned())
        })
        .await?;
        assert_eq!(
            reasons["ConstraintFiltered"]["missing network"], 1,
            "{reasons:?}"
        );
        assert!(job_allocs(&api, "absent").await.is_empty());

        let mut job = bridge_job("lan", 1);
        job["TaskGroups"][0]["Networks"][0]["Mode"] = json!("cni/tstlan");
        job["TaskGroups"][0]["Networks"][0]["CNI"] = json!({ "Args": { "IgnoreUnknown": "1" } });
        register(&api, job).await?;
        let client_api = client.api();
        let (a, id, addr, host_port) = serving(&api, &client, "lan").await?;
        // Its address is the named network's.
        assert!(addr.starts_with("10.213.7."), "{addr}");
        assert_network_files(&client_api, &id, alloc_index(&a), &addr).await;
        let url = format!("http://{ip}:{host_port}/");
        let got = wait_for(Duration::from_secs(10), "the published port", || async {
            fetch(&url).await
        })
        .await?;
        assert_eq!(got, id);

        api.request::<(), Value>(reqwest::Method::DELETE, "/v1/job/lan", None)
            .await?;
        let netns = format!("/var/run/netns/{id}");
        wait_for(Duration::from_secs(30), "the namespace removed", || async {
            (!std::path::Path::new(&netns).exists()).then_some(())
        })
        .await?;
        let left = rules_naming(&id);
        assert!(left.is_empty(), "rules left for {id}: {left:#?}");
        anyhow::Ok(())
    }
    .await;
    // The bridge the plugin made stays on the host otherwise.
    let _ = std::process::Command::new("ip")
        .args(["link", "del", "tstlan0"])
        .output();
    result
}
