//! Jobs end to end through the whole pipeline (broker, workers, plan applier, clients):
//! `teamster agent --dev` runs a raw_exec batch job to completion and `alloc logs` shows its
//! output; a SIGKILLed client's service allocation is replaced on another node and, when
//! the client returns, the old one is stopped rather than duplicated; a failing task is
//! restarted per its RestartPolicy, then rescheduled per its ReschedulePolicy; an operator
//! stops an allocation (`alloc stop`) and the scheduler replaces it, restarts its task in
//! place (`alloc restart`), sends it a signal (`alloc signal`), reads its and the host's
//! resource usage and runs commands in its place (`alloc exec`).

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use teamster::api::ApiClient;
use teamster_cluster_tests::api::register;
use teamster_cluster_tests::client_process::{wait_node_status, ClientProcess};
use teamster_cluster_tests::dev::{dev_agent, dev_ip_at, Killed};
use teamster_cluster_tests::process::{teamster_bin, ClusterOptions, ProcessCluster};
use teamster_cluster_tests::wait_for;

const FORMATION: Duration = Duration::from_secs(30);

fn client_ip(c: &ProcessCluster, n: u8) -> String {
    let ip = &c.servers[0].ip;
    let (block, _) = ip.rsplit_once('.').expect("an IPv4 address");
    format!("{block}.{}", 100 + n)
}

/// A raw_exec script serving the task directory over HTTP on the group's `http` port, with
/// `index.html` holding the allocation's ID and `health` holding `ok`.
const HTTP_SERVER: &str = "cd \"$NOMAD_TASK_DIR\" && echo \"$NOMAD_ALLOC_ID\" > index.html && \
     echo ok > health && \
     exec /usr/bin/python3 -m http.server \"$NOMAD_PORT_http\" --bind \"$NOMAD_IP_http\"";

fn raw_exec_job(id: &str, job_type: &str, script: &str, group_extra: Value) -> Value {
    let mut group = json!({
        "Name": "g",
        "Count": 1,
        "Tasks": [{
            "Name": "t",
            "Driver": "raw_exec",
            "Config": {"command": "/bin/sh", "args": ["-c", script]},
            "KillTimeout": 1_000_000_000u64,
            "Resources": {"CPU": 10, "MemoryMB": 10}
        }]
    });
    if let (Some(g), Some(extra)) = (group.as_object_mut(), group_extra.as_object()) {
        for (k, v) in extra {
            g.insert(k.clone(), v.clone());
        }
    }
    json!({"ID": id, "Type": job_type, "Datacenters": ["dc1"], "TaskGroups": [group]})
}

/// One server with fast heartbeats (1 s TTL, 1 s grace) and two client agents (`client-a`,
/// `client-b`), both ready: the cluster, the server's API, the clients and their node IDs.
async fn one_server_two_clients(
) -> anyhow::Result<(ProcessCluster, ApiClient, Vec<ClientProcess>, Vec<String>)> {
    let options = ClusterOptions {
        server_toml: "min_heartbeat_ttl = \"1s\"\nheartbeat_grace = \"1s\"\n".into(),
        ..ClusterOptions::default()
    };
    let mut c = ProcessCluster::start(1, options)?;
    let leader = c.wait_leader(FORMATION).await?;
    let api = c.servers[leader].api();
    let rpc = c.servers[leader].rpc_addr();
    let mut clients = Vec::new();
    for (n, name) in [(1, "client-a"), (2, "client-b")] {
        let ip = client_ip(&c, n);
        clients.push(ClientProcess::start(
            c.dir(),
            name,
            &ip,
            std::slice::from_ref(&rpc),
            "",
        )?);
    }
    let mut ids = Vec::new();
    for cl in &clients {
        let id = wait_for(Duration::from_secs(10), "node id", || async {
            cl.node_id().await
        })
        .await?;
        wait_node_status(&api, &id, "ready", Duration::from_secs(15)).await?;
        ids.push(id);
    }
    Ok((c, api, clients, ids))
}

async fn job_allocs(api: &ApiClient, job: &str) -> Vec<Value> {
    api.get(&format!("/v1/job/{job}/allocations?stale=true"))
        .await
        .unwrap_or_default()
}

/// The dev agent's address for the first test of this binary.
fn dev_ip() -> String {
    dev_ip_at(9)
}

/// The allocation `id` once `check` holds for it.
async fn wait_alloc(
    api: &ApiClient,
    id: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> anyhow::Result<Value> {
    wait_for(Duration::from_secs(30), what, || async {
        let a: Value = api.get(&format!("/v1/allocation/{id}")).await.ok()?;
        check(&a).then_some(a)
    })
    .await
}

#[tokio::test]
async fn dev_agent_runs_a_raw_exec_batch_job_and_alloc_logs_shows_its_output() -> anyhow::Result<()>
{
    teamster_cluster_tests::init_test_tracing();
    let ip = dev_ip();
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api) = dev_agent(&ip, &log).await?;
    let addr = format!("http://{ip}:4646");
    register(
        &api,
        raw_exec_job("hello", "batch", "echo hello; sleep 1", json!({})),
    )
    .await?;
    // pending → running → complete, each seen on the way.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let alloc = wait_for(Duration::from_secs(30), "the batch alloc complete", || {
        let api = api.clone();
        let seen = seen.clone();
        async move {
            let a = job_allocs(&api, "hello").await.into_iter().next()?;
            let status = a["ClientStatus"].as_str()?.to_string();
            let mut seen = seen.lock().unwrap();
            if seen.last() != Some(&status) {
                seen.push(status.clone());
            }
            (status == "complete").then_some(a)
        }
    })
    .await?;
    let seen = seen.lock().unwrap().clone();
    assert!(seen.contains(&"running".to_string()), "{seen:?}");
    assert_eq!(seen.last().map(String::as_str), Some("complete"));
    let id = alloc["ID"].as_str().expect("alloc id").to_string();
    let out = Command::new(teamster_bin())
        .args(["alloc", "logs", "--address", &addr, &id[..8], "t"])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    // The task may be left out (the group has one), Nomad's flag spellings work, and the
    // file API reads the same log: framed (base64, with offsets) or by offset and limit.
    let out = Command::new(teamster_bin())
        .args([
            "alloc",
            "logs",
            &format!("-address={addr}"),
            "-tail",
            "-n",
            "1",
            &id[..8],
        ])
        .output()?;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(teamster_bin())
        .args(["job", "allocs", "-address", &addr, "hello"])
        .output()?;
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed.contains(&id[..8]) && listed.contains("complete"),
        "{listed}"
    );
    let framed = reqwest::get(format!("{addr}/v1/client/fs/logs/{id}?task=t&type=stdout"))
        .await?
        .text()
        .await?;
    let frame: Value = serde_json::from_str(framed.trim())?;
    assert_eq!(
        frame,
        json!({"Offset": 6, "Data": "aGVsbG8K", "File": "alloc/logs/t.stdout.0"})
    );
    let part = reqwest::get(format!(
        "{addr}/v1/client/fs/readat/{id}?path=alloc/logs/t.stdout.0&offset=1&limit=3"
    ))
    .await?
    .text()
    .await?;
    assert_eq!(part, "ell");

    // `alloc logs -f` prints what the task writes as it writes it.
    register(
        &api,
        raw_exec_job(
            "follow",
            "batch",
            "echo one; sleep 2; echo two; sleep 60",
            json!({}),
        ),
    )
    .await?;
    let running = wait_for(Duration::from_secs(30), "the follow alloc running", || {
        let api = api.clone();
        async move {
            let a = job_allocs(&api, "follow").await.into_iter().next()?;
            (a["ClientStatus"] == "running").then_some(a)
        }
    })
    .await?;
    let follow_id = running["ID"].as_str().expect("alloc id").to_string();
    let mut follower = Killed(
        Command::new(teamster_bin())
            .args(["alloc", "logs", "-f", "--address", &addr, &follow_id])
            .stdout(Stdio::piped())
            .spawn()?,
    );
    let mut stdout = follower.0.stdout.take().expect("piped stdout");
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut seen = Vec::new();
        let mut buf = [0u8; 256];
        while !String::from_utf8_lossy(&seen).contains("two") {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
        String::from_utf8_lossy(&seen).into_owned()
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !reader.is_finished() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(follower);
    let seen = reader.join().expect("the reader thread");
    assert_eq!(seen, "one\ntwo\n");
    api.request::<(), Value>(reqwest::Method::DELETE, "/v1/job/follow?purge=true", None)
        .await?;

    // The client fills in what the parser left for run time: `${node.unique.name}` in the
    // args (a shell would refuse that name), and Nomad's variables in the environment, with
    // the allocation's shared and secrets directories made.
    let nodes: Vec<Value> = api.get("/v1/nodes").await?;
    let node_name = nodes[0]["Name"].as_str().expect("a node name").to_string();
    let mut job = raw_exec_job(
        "interp",
        "batch",
        "echo \"${node.unique.name}|${NOMAD_ALLOC_INDEX}|$NOMAD_JOB_ID|$GREETING\"; \
         test -d \"$NOMAD_ALLOC_DIR\" && test -d \"$NOMAD_SECRETS_DIR\" && echo dirs",
        json!({}),
    );
    job["TaskGroups"][0]["Tasks"][0]["Env"] = json!({"GREETING": "hi ${NOMAD_GROUP_NAME}"});
    register(&api, job).await?;
    let alloc = wait_for(Duration::from_secs(30), "the interp alloc complete", || {
        let api = api.clone();
        async move {
            let a = job_allocs(&api, "interp").await.into_iter().next()?;
            (a["ClientStatus"] == "complete" || a["ClientStatus"] == "failed").then_some(a)
        }
    })
    .await?;
    let id = alloc["ID"].as_str().expect("alloc id").to_string();
    let out = Command::new(teamster_bin())
        .args(["alloc", "logs", "--address", &addr, &id[..8], "t"])
        .output()?;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{node_name}|0|interp|hi g\ndirs\n"),
        "{alloc}"
    );
    Ok(())
}

/// A client frozen with SIGSTOP stops heartbeating while its task runs on: its node is
/// `disconnected`, its allocation `unknown` and replaced on the other client; thawed, it
/// reports the allocation again and `keep_original` stops the replacement. The original
/// task ran throughout, started once.
#[tokio::test]
async fn a_disconnected_client_s_allocation_is_unknown_replaced_and_kept_when_it_returns(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let (_cluster, api, clients, ids) = one_server_two_clients().await?;
    let group = json!({
        "Disconnect": {"LostAfter": 120_000_000_000u64, "Reconcile": "keep_original"}
    });
    register(
        &api,
        raw_exec_job("web", "service", "echo started; exec sleep 300", group),
    )
    .await?;
    let first = wait_for(Duration::from_secs(30), "web running", || async {
        job_allocs(&api, "web")
            .await
            .into_iter()
            .find(|a| a["ClientStatus"] == "running")
    })
    .await?;
    let victim = ids
        .iter()
        .position(|id| first["NodeID"] == id.as_str())
        .expect("placed on one of the clients");
    let other = &ids[1 - victim];
    let first_id = first["ID"].as_str().unwrap_or_default().to_string();
    let stdout = clients[victim]
        .data_dir
        .join(format!("alloc/{first_id}/alloc/logs/t.stdout.0"));

    clients[victim].signal(libc::SIGSTOP);
    wait_node_status(&api, &ids[victim], "disconnected", Duration::from_secs(15)).await?;
    let replacement = wait_for(
        Duration::from_secs(30),
        "the allocation unknown and a replacement running on the other client",
        || async {
            let allocs = job_allocs(&api, "web").await;
            let original = allocs.iter().find(|a| a["ID"] == first_id.as_str())?;
            if original["ClientStatus"] != "unknown" || original["DesiredStatus"] != "run" {
                return None;
            }
            allocs.into_iter().find(|a| {
                a["PreviousAllocation"] == first_id.as_str()
                    && a["NodeID"] == other.as_str()
                    && a["ClientStatus"] == "running"
            })
        },
    )
    .await?;
    let replacement_id = replacement["ID"].as_str().unwrap_or_default().to_string();

    clients[victim].signal(libc::SIGCONT);
    wait_node_status(&api, &ids[victim], "ready", Duration::from_secs(15)).await?;
    wait_for(
        Duration::from_secs(30),
        "the original kept and the replacement stopped",
        || async {
            let allocs = job_allocs(&api, "web").await;
            let original = allocs.iter().find(|a| a["ID"] == first_id.as_str())?;
            let replacement = allocs.iter().find(|a| a["ID"] == replacement_id.as_str())?;
            (original["ClientStatus"] == "running"
                && original["DesiredStatus"] == "run"
                && replacement["DesiredStatus"] == "stop")
                .then_some(())
        },
    )
    .await?;
    let original: Value = api.get(&format!("/v1/allocation/{first_id}")).await?;
    let states: Vec<&str> = original["AllocStates"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["Value"].as_str())
        .collect();
    assert_eq!(states, ["unknown", "running"], "{original}");
    assert_eq!(
        std::fs::read_to_string(&stdout)?.matches("started").count(),
        1,
        "the original task ran on, never restarted"
    );
    Ok(())
}

#[tokio::test]
async fn a_killed_client_s_allocation_is_replaced_and_not_duplicated_when_it_returns(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let (c, api, mut clients, ids) = one_server_two_clients().await?;
    register(
        &api,
        raw_exec_job("web", "service", "echo started; exec sleep 60", json!({})),
    )
    .await?;
    let first = wait_for(Duration::from_secs(30), "web running", || async {
        job_allocs(&api, "web")
            .await
            .into_iter()
            .find(|a| a["ClientStatus"] == "running")
    })
    .await?;
    let victim = ids
        .iter()
        .position(|id| first["NodeID"] == id.as_str())
        .expect("placed on one of the clients");
    let first_id = first["ID"].as_str().unwrap_or_default().to_string();
    clients[victim].kill();
    wait_node_status(&api, &ids[victim], "down", Duration::from_secs(15)).await?;
    let other = &ids[1 - victim];
    wait_for(
        Duration::from_secs(30),
        "a replacement running elsewhere",
        || async {
            job_allocs(&api, "web")
                .await
                .into_iter()
                .find(|a| a["NodeID"] == other.as_str() && a["ClientStatus"] == "running")
        },
    )
    .await?;
    // Back: ready again; the old allocation is stopped (the task is killed), not run twice.
    clients[victim].restart()?;
    wait_node_status(&api, &ids[victim], "ready", Duration::from_secs(15)).await?;
    let old: Value = api.get(&format!("/v1/allocation/{first_id}")).await?;
    assert_ne!(old["DesiredStatus"], "run", "{old}");
    let stdout = clients[victim]
        .data_dir
        .join(format!("alloc/{first_id}/alloc/logs/t.stdout.0"));
    // The process its launch recorded (`<launch id> <pid>`) is gone.
    let marker = clients[victim]
        .data_dir
        .join(format!("alloc/{first_id}/t/.teamster-launch"));
    let marker = std::fs::read_to_string(&marker)?;
    let pid: i32 = marker
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no pid in the launch marker {marker:?}"))?;
    wait_for(Duration::from_secs(15), "the old task stopped", || async {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next());
        matches!(state, None | Some("Z") | Some("X")).then_some(())
    })
    .await?;
    assert_eq!(
        std::fs::read_to_string(&stdout)?.matches("started").count(),
        1,
        "the old task ran twice"
    );
    let running = job_allocs(&api, "web")
        .await
        .into_iter()
        .filter(|a| a["DesiredStatus"] == "run" && a["ClientStatus"] == "running")
        .count();
    assert_eq!(running, 1, "exactly one copy runs");

    // Draining the node that now runs it migrates the allocation back to the other one.
    let out = Command::new(teamster_bin())
        .args([
            "node",
            "drain",
            "--enable",
            "--address",
            &c.servers[0].http_addr(),
            other,
        ])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Without `-detach` the CLI follows the drain to its end (the node drainer marks the
    // allocation, the scheduler replaces it, its client stops it).
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("marked for migration"), "{stdout}");
    assert!(
        stdout.contains(&format!("Drain complete for node {other}")),
        "{stdout}"
    );
    let n: Value = api.get(&format!("/v1/node/{other}")).await?;
    assert_eq!(n["SchedulingEligibility"], "ineligible");
    assert_eq!(n["Drain"], false);
    assert_eq!(n["LastDrain"]["Status"], "complete", "{n}");
    let back = &ids[victim];
    wait_for(
        Duration::from_secs(30),
        "the allocation migrated off the drained node",
        || async {
            let all = job_allocs(&api, "web").await;
            let on_back = all.iter().any(|a| {
                a["NodeID"] == back.as_str()
                    && a["DesiredStatus"] == "run"
                    && a["ClientStatus"] == "running"
            });
            let left = all
                .iter()
                .any(|a| a["NodeID"] == other.as_str() && a["DesiredStatus"] == "run");
            (on_back && !left).then_some(())
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_failing_task_is_restarted_then_rescheduled() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let mut c = ProcessCluster::start(1, ClusterOptions::default())?;
    let leader = c.wait_leader(FORMATION).await?;
    let api = c.servers[leader].api();
    let rpc = c.servers[leader].rpc_addr();
    let client = ClientProcess::start(
        c.dir(),
        "client-f",
        &client_ip(&c, 3),
        std::slice::from_ref(&rpc),
        "",
    )?;
    let id = wait_for(Duration::from_secs(10), "node id", || async {
        client.node_id().await
    })
    .await?;
    wait_node_status(&api, &id, "ready", Duration::from_secs(15)).await?;
    register(
        &api,
        raw_exec_job(
            "flaky",
            "batch",
            "echo try; exit 3",
            json!({
                "RestartPolicy": {"Attempts": 1, "Interval": 60_000_000_000u64, "Delay": 200_000_000u64, "Mode": "fail"},
                "ReschedulePolicy": {"Attempts": 1, "Interval": 3_600_000_000_000u64, "Delay": 1_000_000_000u64, "DelayFunction": "constant", "Unlimited": false}
            }),
        ),
    )
    .await?;
    let allocs = wait_for(
        Duration::from_secs(40),
        "two failed allocations",
        || async {
            let all = job_allocs(&api, "flaky").await;
            (all.iter().filter(|a| a["ClientStatus"] == "failed").count() >= 2).then_some(all)
        },
    )
    .await?;
    for a in &allocs {
        let full: Value = api
            .get(&format!(
                "/v1/allocation/{}",
                a["ID"].as_str().unwrap_or_default()
            ))
            .await?;
        assert_eq!(
            full["TaskStates"]["t"]["Restarts"], 1,
            "restarted once first: {full}"
        );
    }
    // One reschedule only: the replacement names the first as its previous allocation.
    assert_eq!(allocs.len(), 2, "{allocs:?}");
    // `alloc status` says why the task failed: its recent events with the exit code.
    let out = Command::new(teamster_bin())
        .args([
            "alloc",
            "status",
            "--address",
            &c.servers[0].http_addr(),
            allocs[0]["ID"].as_str().unwrap_or_default(),
        ])
        .output()?;
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        shown.contains("Recent Events:")
            && shown.contains("Exit Code: 3")
            && shown.contains("Not Restarting"),
        "{shown}"
    );
    Ok(())
}

#[tokio::test]
async fn dev_agent_alloc_stop_replaces_the_allocation() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    // Not dev_ip(): the other dev-agent test of this binary runs at the same time.
    let ip = dev_ip_at(8);
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api) = dev_agent(&ip, &log).await?;
    let addr = format!("http://{ip}:4646");
    register(
        &api,
        raw_exec_job("sleeper", "service", "sleep 600", json!({})),
    )
    .await?;
    let first = wait_for(Duration::from_secs(30), "the sleeper running", || {
        let api = api.clone();
        async move {
            let a = job_allocs(&api, "sleeper").await.into_iter().next()?;
            (a["ClientStatus"] == "running").then_some(a)
        }
    })
    .await?;
    let first_id = first["ID"].as_str().expect("alloc id").to_string();

    // `alloc stop` follows the alloc-stop evaluation to its end.
    let out = Command::new(teamster_bin())
        .args(["alloc", "stop", "-address", &addr, &first_id[..8]])
        .output()?;
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{shown}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        shown.contains("==> Monitoring evaluation") && shown.contains("\"complete\""),
        "{shown}"
    );
    let stopped = wait_alloc(&api, &first_id, "the first allocation stopped", |a| {
        a["DesiredStatus"] == "stop" && a["ClientStatus"] == "complete"
    })
    .await?;
    assert_eq!(stopped["DesiredTransition"]["Migrate"], true, "{stopped}");
    assert_eq!(stopped["DesiredDescription"], "alloc is being migrated");
    let next = stopped["NextAllocation"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!next.is_empty(), "a replacement: {stopped}");
    let replacement = wait_alloc(&api, &next, "the replacement running", |a| {
        a["ClientStatus"] == "running"
    })
    .await?;
    assert_eq!(replacement["PreviousAllocation"], first_id.as_str());
    assert_eq!(replacement["Name"], stopped["Name"]);

    // `-detach` prints the evaluation and returns; the evaluation says why it was made.
    let out = Command::new(teamster_bin())
        .args(["alloc", "stop", "-detach", "-address", &addr, &next])
        .output()?;
    let eval_id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(eval_id.len(), 36, "{eval_id:?}");
    let eval: Value = api.get(&format!("/v1/evaluation/{eval_id}")).await?;
    assert_eq!(eval["TriggeredBy"], "alloc-stop");
    assert_eq!(eval["JobID"], "sleeper");
    wait_alloc(&api, &next, "the second allocation stopped", |a| {
        a["DesiredStatus"] == "stop" && !a["NextAllocation"].as_str().unwrap_or("").is_empty()
    })
    .await?;

    // An unknown allocation: the API answers 404, the CLI names it and exits 1.
    let resp = reqwest::Client::new()
        .post(format!("{addr}/v1/allocation/{}/stop", "0".repeat(36)))
        .send()
        .await?;
    assert_eq!(resp.status(), reqwest::StatusCode::NOT_FOUND);
    let out = Command::new(teamster_bin())
        .args(["alloc", "stop", "-address", &addr, "ffffffff"])
        .output()?;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ffffffff"));
    api.request::<(), Value>(reqwest::Method::DELETE, "/v1/job/sleeper?purge=true", None)
        .await?;
    Ok(())
}

/// A task's stdout as the agent serves it.
async fn stdout_of(addr: &str, alloc_id: &str) -> String {
    let url = format!("{addr}/v1/client/fs/logs/{alloc_id}?task=t&type=stdout&plain=true");
    match reqwest::get(url).await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

#[tokio::test]
async fn dev_agent_alloc_restart_signal_stats_and_exec_reach_the_task_in_place(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let ip = dev_ip_at(7);
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api) = dev_agent(&ip, &log).await?;
    let addr = format!("http://{ip}:4646");
    // No restart allowed by the policy: an operator's restart must not be held against it.
    register(
        &api,
        raw_exec_job(
            "ops",
            "service",
            "echo start; trap 'echo got usr1' USR1; while :; do sleep 0.1; done",
            json!({"RestartPolicy": {"Attempts": 0, "Interval": 60_000_000_000u64, "Delay": 1_000_000_000u64, "Mode": "fail"}}),
        ),
    )
    .await?;
    let alloc = wait_for(Duration::from_secs(30), "the ops task started", || {
        let api = api.clone();
        let addr = addr.clone();
        async move {
            let a = job_allocs(&api, "ops").await.into_iter().next()?;
            let id = a["ID"].as_str()?.to_string();
            (a["ClientStatus"] == "running" && stdout_of(&addr, &id).await == "start\n")
                .then_some(a)
        }
    })
    .await?;
    let id = alloc["ID"].as_str().expect("alloc id").to_string();

    // `alloc signal -s SIGUSR1`: the task's trap runs; the event says which signal.
    let out = Command::new(teamster_bin())
        .args([
            "alloc",
            "signal",
            "-address",
            &addr,
            "-s",
            "SIGUSR1",
            &id[..8],
            "t",
        ])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for(Duration::from_secs(10), "the trap's output", || async {
        stdout_of(&addr, &id)
            .await
            .contains("got usr1")
            .then_some(())
    })
    .await?;
    let signaled = wait_alloc(&api, &id, "the Signaling event reported", |a| {
        a["TaskStates"]["t"]["Events"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e["Type"] == "Signaling"))
    })
    .await?;
    assert_eq!(signaled["ClientStatus"], "running");

    // An unknown signal or task is a 400 naming it; an unknown allocation a 404.
    let post = |path: String, body: Value| {
        let url = format!("{addr}{path}");
        async move {
            let r = reqwest::Client::new().post(url).json(&body).send().await?;
            anyhow::Ok((r.status(), r.text().await?))
        }
    };
    let (status, text) = post(
        format!("/v1/client/allocation/{id}/signal"),
        json!({"Signal": "SIGNOPE"}),
    )
    .await?;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST);
    assert!(text.contains("SIGNOPE"), "{text}");
    let (status, text) = post(
        format!("/v1/client/allocation/{id}/restart"),
        json!({"TaskName": "nope"}),
    )
    .await?;
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST);
    assert!(text.contains("nope"), "{text}");
    let (status, _) = post(
        format!("/v1/client/allocation/{}/restart", "0".repeat(36)),
        json!({}),
    )
    .await?;
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND);
    let out = Command::new(teamster_bin())
        .args(["alloc", "signal", "-address", &addr, "-s", "SIGNOPE", &id])
        .output()?;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("SIGNOPE"));

    // `alloc restart`: the same allocation, its task started again, counted in Restarts but
    // not against the policy (which allows none).
    let out = Command::new(teamster_bin())
        .args(["alloc", "restart", "-address", &addr, &id[..8]])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let restarted = wait_alloc(&api, &id, "the task restarted", |a| {
        a["TaskStates"]["t"]["Restarts"] == 1 && a["TaskStates"]["t"]["State"] == "running"
    })
    .await?;
    assert_eq!(restarted["ClientStatus"], "running");
    assert_eq!(restarted["TaskStates"]["t"]["Failed"], false);
    let types: Vec<String> = restarted["TaskStates"]["t"]["Events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["Type"].as_str().map(str::to_string))
        .collect();
    let from = types
        .iter()
        .position(|t| t == "Restart Signaled")
        .unwrap_or_else(|| panic!("{types:?}"));
    assert_eq!(
        types[from..from + 3],
        ["Restart Signaled", "Terminated", "Restarting"],
        "{types:?}"
    );
    wait_for(
        Duration::from_secs(10),
        "the second start's output",
        || async { (stdout_of(&addr, &id).await.matches("start").count() == 2).then_some(()) },
    )
    .await?;
    let allocs = job_allocs(&api, "ops").await;
    assert_eq!(allocs.len(), 1, "restarted in place: {allocs:?}");
    // Its usage, read from its cgroup where the agent could make one (as root), else from
    // /proc for the task's process group; and the host's.
    let usage: Value = api
        .get(&format!("/v1/client/allocation/{id}/stats"))
        .await?;
    let task = &usage["Tasks"]["t"];
    assert!(
        task["ResourceUsage"]["MemoryStats"]["RSS"].as_u64() > Some(0),
        "{usage}"
    );
    let in_cgroup = [
        "/sys/fs/cgroup/pids/teamster",
        "/sys/fs/cgroup/teamster.slice",
    ]
    .iter()
    .any(|p| {
        std::path::Path::new(p).join(format!("{id}.t")).exists()
            || std::path::Path::new(p)
                .join(format!("{id}.t.scope"))
                .exists()
    });
    let measured = if in_cgroup {
        json!([
            "System Mode",
            "User Mode",
            "Throttled Periods",
            "Throttled Time",
            "Percent"
        ])
    } else {
        json!(["System Mode", "User Mode", "Percent"])
    };
    assert_eq!(task["ResourceUsage"]["CpuStats"]["Measured"], measured);
    assert!(task["ResourceUsage"]["CpuStats"]["Percent"].as_f64() >= Some(0.0));
    assert!(
        !task["Pids"].as_object().is_none_or(|p| p.is_empty()),
        "{usage}"
    );
    assert!(usage["Timestamp"].as_i64() > Some(0));
    let host: Value = api.get("/v1/client/stats").await?;
    assert!(host["Memory"]["Total"].as_u64() > Some(0), "{host}");
    assert!(
        host["CPU"].as_array().is_some_and(|c| !c.is_empty()),
        "{host}"
    );
    assert!(host["Uptime"].as_u64() > Some(0), "{host}");
    assert!(host["AllocDirStats"]["Size"].as_u64() > Some(0), "{host}");
    let node_id = restarted["NodeID"].as_str().unwrap_or_default();
    let same: Value = api
        .get(&format!("/v1/client/stats?node_id={node_id}"))
        .await?;
    assert!(same["Memory"]["Total"].as_u64() > Some(0));
    let other = reqwest::get(format!("{addr}/v1/client/stats?node_id=nope")).await?;
    assert_eq!(other.status(), reqwest::StatusCode::NOT_FOUND);

    // `alloc exec`: a command in the task's place, its output, its exit code, its stdin.
    let exec = |args: &[&str], stdin: Option<&str>| {
        teamster_cluster_tests::process::alloc_exec(&addr, args, stdin)
    };
    let out = exec(&[&id[..8], "echo", "hi"], None);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi\n");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = exec(&[&id, "sh", "-c", "echo oops >&2; exit 3"], None);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr), "oops\n");
    let out = exec(&["-task", "t", &id, "cat"], Some("from stdin\n"));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from stdin\n");
    let out = exec(
        &[
            &id,
            "sh",
            "-c",
            "echo $NOMAD_TASK_NAME $NOMAD_ALLOC_ID; pwd",
        ],
        None,
    );
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(shown.starts_with(&format!("t {id}\n")), "{shown}");
    assert!(shown.trim_end().ends_with(&format!("{id}/t")), "{shown}");
    // With `-t` the command has a terminal of its own (output lines end in \r\n), and input
    // reaches it through the terminal (echoed), its end as the end-of-file character.
    let out = exec(&["-t", &id, "sh", "-c", "tty; test -t 1 && echo yes"], None);
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        shown.starts_with("/dev/pts/") && shown.ends_with("\r\nyes\r\n"),
        "{shown:?} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0));
    let out = exec(&["-t", &id, "cat"], Some("typed\n"));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("typed\r\n"),
        "{:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(out.status.code(), Some(0));
    let out = exec(&["-task", "nope", &id, "true"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));

    // A task name with -all-tasks is a usage error.
    let out = Command::new(teamster_bin())
        .args([
            "alloc",
            "restart",
            "-address",
            &addr,
            "-all-tasks",
            &id,
            "t",
        ])
        .output()?;
    assert_eq!(out.status.code(), Some(2));
    api.request::<(), Value>(reqwest::Method::DELETE, "/v1/job/ops?purge=true", None)
        .await?;
    Ok(())
}

/// Ports end to end on one node: two allocations of a service whose group asks for a dynamic
/// port get different host ports, each task listens on its own `NOMAD_PORT_http` and answers
/// there (the ports the API reports); a second job wanting the first's static port cannot be
/// placed on that node, and its evaluation says why.
#[tokio::test]
async fn dev_agent_gives_two_instances_their_own_dynamic_ports_and_refuses_a_taken_static_one(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let ip = dev_ip_at(6);
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api) = dev_agent(&ip, &log).await?;
    // A tiny HTTP server in the task's place: it answers with its allocation's ID.
    let server = HTTP_SERVER;
    let mut job = raw_exec_job(
        "web",
        "service",
        server,
        json!({"Count": 2, "Networks": [{"DynamicPorts": [{"Label": "http"}]}]}),
    );
    job["TaskGroups"][0]["Update"] = json!({"MaxParallel": 2});
    register(&api, job).await?;
    let allocs = wait_for(
        Duration::from_secs(60),
        "two web allocations running",
        || {
            let api = api.clone();
            async move {
                let allocs = job_allocs(&api, "web").await;
                (allocs.len() == 2 && allocs.iter().all(|a| a["ClientStatus"] == "running"))
                    .then_some(allocs)
            }
        },
    )
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "{e}\n{}",
            std::fs::read_to_string(log.path()).unwrap_or_default()
        )
    })?;
    let mut seen = std::collections::BTreeSet::new();
    for stub in &allocs {
        let id = stub["ID"].as_str().unwrap_or_default();
        let alloc: Value = api.get(&format!("/v1/allocation/{id}")).await?;
        let ports = alloc["AllocatedResources"]["Shared"]["Ports"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let http = ports
            .iter()
            .find(|p| p["Label"] == "http")
            .unwrap_or_else(|| panic!("no http port in {alloc}"));
        assert_eq!(http["HostIP"], ip.as_str(), "{alloc}");
        let port = http["Value"].as_u64().expect("a port");
        assert!((20000..=32000).contains(&port), "{port}");
        assert!(seen.insert(port), "port {port} given twice");
        // The task answers on the port the API reports, with its own allocation's ID.
        let url = format!("http://{ip}:{port}/index.html");
        let body = wait_for(
            Duration::from_secs(30),
            "the task's server answering",
            || {
                let url = url.clone();
                async move {
                    let resp = reqwest::get(&url).await.ok()?;
                    resp.text().await.ok()
                }
            },
        )
        .await?;
        assert_eq!(body.trim(), id, "{url}");
    }

    // A job that wants one of those ports as its static port has no node to go to.
    let taken = *seen.first().expect("two ports");
    let clash = raw_exec_job(
        "clash",
        "batch",
        "true",
        json!({"Networks": [{"ReservedPorts": [{"Label": "http", "Value": taken}]}]}),
    );
    register(&api, clash).await?;
    let reason = format!("network: reserved port collision http={taken}");
    let failed = wait_for(
        Duration::from_secs(30),
        "the clash's failed placement",
        || {
            let api = api.clone();
            async move {
                let evals: Vec<Value> = api.get("/v1/job/clash/evaluations").await.ok()?;
                evals
                    .into_iter()
                    .find(|e| e["Status"] == "complete" && !e["FailedTGAllocs"]["g"].is_null())
            }
        },
    )
    .await?;
    let metric = &failed["FailedTGAllocs"]["g"];
    assert_eq!(metric["DimensionExhausted"][&reason], 1, "{failed}");
    assert_eq!(metric["NodesExhausted"], 1, "{failed}");
    assert!(job_allocs(&api, "clash").await.is_empty());
    Ok(())
}

/// Native service discovery end to end: a group service on a dynamic port is registered by
/// the client for each running allocation with the port the allocation got, listed by
/// `/v1/services`, `/v1/allocation/:id/services` and `teamster service list|info`, and gone
/// when the job stops; a service naming an undefined port label, or a provider Nomad does not
/// know, is refused at registration. `POST /v1/node/:id/evaluate` evaluates the node's jobs
/// again.
#[tokio::test]
async fn dev_agent_registers_a_services_instances_and_removes_them_when_the_job_stops(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let ip = dev_ip_at(5);
    let addr = format!("http://{ip}:4646");
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api) = dev_agent(&ip, &log).await?;
    let mut job = raw_exec_job(
        "shop",
        "service",
        "sleep 600",
        json!({
            "Count": 2,
            "Networks": [{"DynamicPorts": [{"Label": "http"}]}],
            "Services": [{"Name": "shop-web", "PortLabel": "http", "Provider": "nomad",
                          "Tags": ["v1", "${NOMAD_JOB_ID}"]}]
        }),
    );
    job["TaskGroups"][0]["Update"] = json!({"MaxParallel": 2});
    register(&api, job.clone()).await?;
    let regs = wait_for(Duration::from_secs(60), "two registrations", || {
        let api = api.clone();
        async move {
            let regs: Vec<Value> = api.get("/v1/service/shop-web").await.ok()?;
            (regs.len() == 2).then_some(regs)
        }
    })
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "{e}\n{}",
            std::fs::read_to_string(log.path()).unwrap_or_default()
        )
    })?;
    for reg in &regs {
        let alloc: Value = api
            .get(&format!(
                "/v1/allocation/{}",
                reg["AllocID"].as_str().unwrap_or("")
            ))
            .await?;
        let port = &alloc["AllocatedResources"]["Shared"]["Ports"][0];
        assert_eq!(reg["Port"], port["Value"], "{reg} {alloc}");
        assert_eq!(reg["Address"], ip.as_str(), "{reg}");
        assert_eq!(reg["Tags"], json!(["v1", "shop"]), "{reg}");
        assert_eq!(reg["JobID"], "shop");
        assert_eq!(reg["NodeID"], alloc["NodeID"]);
        let id = reg["ID"].as_str().unwrap_or("");
        assert!(
            id.starts_with("_nomad-task-") && id.ends_with("-group-g-shop-web-http"),
            "{id}"
        );
    }
    // Nomad's list field selection: an allocation's resources (its ports here), no task
    // states; a node's resources and OS.
    let listed: Vec<Value> = api
        .get("/v1/allocations?resources=true&task_states=false")
        .await?;
    let one = listed
        .iter()
        .find(|a| a["ID"] == regs[0]["AllocID"])
        .expect("the allocation listed");
    assert_eq!(
        one["AllocatedResources"]["Shared"]["Ports"][0]["Value"], regs[0]["Port"],
        "{one}"
    );
    assert!(one["TaskStates"].is_null(), "{one}");
    let plain: Vec<Value> = api.get("/v1/allocations").await?;
    assert!(plain
        .iter()
        .all(|a| a.get("AllocatedResources").is_none() && !a["TaskStates"].is_null()));
    let nodes: Vec<Value> = api.get("/v1/nodes?resources=true&os=true").await?;
    assert!(
        nodes[0]["NodeResources"]["Memory"]["MemoryMB"].as_u64() > Some(0)
            && nodes[0]["ReservedResources"].is_object()
            && nodes[0]["Attributes"] == json!({"os.name": "linux"}),
        "{}",
        nodes[0]
    );
    let bad = api
        .get::<Value>("/v1/nodes?os=maybe")
        .await
        .expect_err("not a boolean");
    assert!(bad.to_string().contains("400"), "{bad}");

    // An allocation's own registrations; 404 for an allocation that does not exist.
    let alloc_id = regs[0]["AllocID"].as_str().unwrap_or("");
    let own: Vec<Value> = api
        .get(&format!("/v1/allocation/{alloc_id}/services"))
        .await?;
    assert_eq!(own, vec![regs[0].clone()]);
    let missing = api
        .get::<Value>("/v1/allocation/00000000-0000-4000-8000-000000000000/services")
        .await
        .expect_err("no such allocation");
    assert!(missing.to_string().contains("404"), "{missing}");
    // Evaluating the node again: one node-update evaluation for the job it runs.
    let node_id = regs[0]["NodeID"].as_str().unwrap_or("");
    let done: Value = api
        .request(
            reqwest::Method::POST,
            &format!("/v1/node/{node_id}/evaluate"),
            None::<&Value>,
        )
        .await?;
    let eval_ids = done["EvalIDs"].as_array().cloned().unwrap_or_default();
    assert_eq!(eval_ids.len(), 1, "{done}");
    assert!(done["EvalCreateIndex"].as_u64() > Some(0), "{done}");
    let eval: Value = api
        .get(&format!(
            "/v1/evaluation/{}",
            eval_ids[0].as_str().unwrap_or("")
        ))
        .await?;
    assert_eq!(
        (eval["JobID"].clone(), eval["TriggeredBy"].clone()),
        (json!("shop"), json!("node-update")),
        "{eval}"
    );
    let listed: Value = api.get("/v1/services").await?;
    assert_eq!(
        listed,
        json!([{"Namespace": "default",
                "Services": [{"ServiceName": "shop-web", "Tags": ["shop", "v1"]}]}])
    );
    let cli = |args: &[&str]| {
        Command::new(teamster_bin())
            .args(args)
            .env("TEAMSTER_ADDR", &addr)
            .output()
    };
    let out = cli(&["service", "list"])?;
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && shown.contains("shop-web") && shown.contains("[shop,v1]"),
        "{shown}"
    );
    let out = cli(&["service", "info", "shop-web"])?;
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert_eq!(
        shown.lines().count(),
        3,
        "a header and two instances: {shown}"
    );
    let out = cli(&["service", "delete", "shop-web", "_nomad-task-none"])?;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("No service registration"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Refused at registration, naming the problem.
    for (service, expected) in [
        (
            json!({"Name": "x", "PortLabel": "nope", "Provider": "nomad"}),
            "port label \"nope\" is not defined",
        ),
        (
            json!({"Name": "x", "PortLabel": "http", "Provider": "etcd"}),
            r#"Service provider must be "consul", or "nomad"; not "etcd""#,
        ),
    ] {
        let mut bad = job.clone();
        bad["ID"] = json!("bad");
        bad["TaskGroups"][0]["Services"] = json!([service]);
        let err = register(&api, bad).await.expect_err("refused");
        let text = err.to_string();
        assert!(text.contains("400") && text.contains(expected), "{text}");
    }

    // The job stops: every registration goes.
    let out = cli(&["job", "stop", "-detach", "shop"])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for(Duration::from_secs(60), "the registrations gone", || {
        let api = api.clone();
        async move {
            let regs: Vec<Value> = api.get("/v1/service/shop-web").await.ok()?;
            regs.is_empty().then_some(())
        }
    })
    .await?;
    let listed: Value = api.get("/v1/services").await?;
    assert_eq!(listed, json!([]));

    // Client garbage collection: a stopped allocation's directory goes once its end is
    // reported; its files are then gone (404), and the whole client's GC answers null.
    let stopped = alloc_id.to_string();
    wait_for(
        Duration::from_secs(60),
        "the stopped allocation collected",
        || {
            let api = api.clone();
            let stopped = stopped.clone();
            async move {
                let done: Value = api
                    .request(
                        reqwest::Method::PUT,
                        &format!("/v1/client/allocation/{stopped}/gc"),
                        None::<&Value>,
                    )
                    .await
                    .ok()?;
                done.is_null().then_some(())
            }
        },
    )
    .await?;
    let gone = api
        .get::<Value>(&format!("/v1/client/fs/ls/{stopped}?path=/"))
        .await
        .expect_err("collected");
    assert!(gone.to_string().contains("404"), "{gone}");
    let all: Value = api
        .request(reqwest::Method::PUT, "/v1/client/gc", None::<&Value>)
        .await?;
    assert!(all.is_null(), "{all}");

    // Purging the node removes it; its client, still running, registers it again (a new
    // node object, as with Nomad).
    let done: Value = api
        .request(
            reqwest::Method::POST,
            &format!("/v1/node/{node_id}/purge"),
            None::<&Value>,
        )
        .await?;
    let purged_at = done["Index"].as_u64().unwrap_or(0);
    assert!(purged_at > 0, "{done}");
    wait_for(
        Duration::from_secs(60),
        "the node registered again after the purge",
        || {
            let api = api.clone();
            let node_id = node_id.to_string();
            async move {
                let n: Value = api.get(&format!("/v1/node/{node_id}")).await.ok()?;
                (n["CreateIndex"].as_u64()? > purged_at).then_some(())
            }
        },
    )
    .await?;
    Ok(())
}

/// Service checks end to end: an HTTP check on the task's own server turns `success` in the
/// registration and in `/v1/client/allocation/:id/checks`; a TCP check on a port nothing
/// listens on fails with the reason, and its `check_restart` restarts the task (the restart
/// policy counting it) while the client keeps serving the other check; stopping the job
/// removes the registrations.
#[tokio::test]
async fn dev_agent_runs_http_and_tcp_checks_and_restarts_a_task_whose_check_fails(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let ip = dev_ip_at(4);
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api) = dev_agent(&ip, &log).await?;
    let server = HTTP_SERVER;
    let second = 1_000_000_000u64;
    let mut job = raw_exec_job(
        "checked",
        "service",
        server,
        json!({
            "Networks": [{"DynamicPorts": [{"Label": "http"}, {"Label": "dead"}]}],
            "RestartPolicy": {"Attempts": 10, "Interval": 600 * second, "Delay": second,
                              "Mode": "fail"},
            "Services": [
                {"Name": "checked-web", "PortLabel": "http", "Provider": "nomad",
                 "Checks": [{"Name": "alive", "Type": "http", "Path": "/health",
                             "Interval": second, "Timeout": second}]},
                {"Name": "checked-dead", "PortLabel": "dead", "Provider": "nomad",
                 "Checks": [{"Name": "nobody", "Type": "tcp", "Interval": second,
                             "Timeout": second,
                             "CheckRestart": {"Limit": 2, "Grace": second}}]}
            ]
        }),
    );
    job["TaskGroups"][0]["Update"] = json!({"MaxParallel": 1, "HealthCheck": "task_states"});
    register(&api, job).await?;
    let reg = wait_for(Duration::from_secs(60), "the http check passing", || {
        let api = api.clone();
        async move {
            let regs: Vec<Value> = api.get("/v1/service/checked-web").await.ok()?;
            let reg = regs.into_iter().next()?;
            (reg["Checks"] == json!([{"Name": "alive", "Status": "success"}])).then_some(reg)
        }
    })
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "{e}\n{}",
            std::fs::read_to_string(log.path()).unwrap_or_default()
        )
    })?;
    let alloc_id = reg["AllocID"].as_str().unwrap_or_default().to_string();
    // The dead port's check fails, with why, in the client's results and the registration.
    let results = wait_for(Duration::from_secs(30), "both check results", || {
        let api = api.clone();
        let path = format!("/v1/client/allocation/{alloc_id}/checks");
        async move {
            let results: serde_json::Map<String, Value> = api.get(&path).await.ok()?;
            let failing = results
                .values()
                .any(|r| r["Check"] == "nobody" && r["Status"] == "failure");
            (results.len() == 2 && failing).then_some(results)
        }
    })
    .await?;
    for r in results.values() {
        match r["Check"].as_str() {
            Some("alive") => {
                assert_eq!(r["StatusCode"], 200, "{r}");
                assert_eq!(r["Output"], "nomad: http ok", "{r}");
                assert_eq!(
                    (&r["Service"], &r["Group"], &r["Task"]),
                    (&json!("checked-web"), &json!("g"), &json!("t"))
                );
            }
            Some("nobody") => {
                assert!(
                    r["Output"].as_str().unwrap_or("").contains("dial tcp"),
                    "{r}"
                );
            }
            other => panic!("unexpected check {other:?}: {r}"),
        }
    }
    // check_restart: the task is restarted for its failing check, with Nomad's reason.
    let events = wait_for(
        Duration::from_secs(60),
        "a restart for the failing check",
        || {
            let api = api.clone();
            let alloc_id = alloc_id.clone();
            async move {
                let a: Value = api.get(&format!("/v1/allocation/{alloc_id}")).await.ok()?;
                let events = a["TaskStates"]["t"]["Events"].as_array()?.clone();
                events
                    .iter()
                    .any(|e| {
                        e["Type"] == "Restart Signaled"
                            && e["RestartReason"].as_str().is_some_and(|r| {
                                r.contains("healthcheck: check \"nobody\" unhealthy")
                            })
                    })
                    .then_some(events)
            }
        },
    )
    .await?;
    assert!(
        events.iter().any(|e| e["Type"] == "Restarting"),
        "the restart policy restarted it: {events:?}"
    );

    let out = Command::new(teamster_bin())
        .args([
            "job",
            "stop",
            "-detach",
            "-address",
            &format!("http://{ip}:4646"),
            "checked",
        ])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for(Duration::from_secs(60), "the registrations gone", || {
        let api = api.clone();
        async move {
            let listed: Value = api.get("/v1/services").await.ok()?;
            (listed == json!([])).then_some(())
        }
    })
    .await?;
    Ok(())
}

/// `health_check = "checks"` gates a deployment on the service checks: an allocation whose
/// HTTP check passes is healthy and the deployment succeeds; one whose check never passes
/// is unhealthy at its healthy deadline, its task blamed with Nomad's "Services not healthy
/// by deadline".
#[tokio::test]
async fn dev_agent_deployments_wait_for_service_checks() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let ip = dev_ip_at(3);
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api) = dev_agent(&ip, &log).await?;
    let second = 1_000_000_000u64;
    let server = HTTP_SERVER;
    let job = |id: &str, path: &str| {
        let mut job = raw_exec_job(
            id,
            "service",
            server,
            json!({
                "Networks": [{"DynamicPorts": [{"Label": "http"}]}],
                "Services": [{"Name": id, "PortLabel": "http", "Provider": "nomad",
                              "Checks": [{"Type": "http", "Path": path,
                                          "Interval": second, "Timeout": second}]}]
            }),
        );
        job["TaskGroups"][0]["Update"] = json!({
            "MaxParallel": 1, "HealthCheck": "checks", "MinHealthyTime": second,
            "HealthyDeadline": 4 * second, "ProgressDeadline": 0
        });
        job
    };
    register(&api, job("good", "/health")).await?;
    register(&api, job("bad", "/missing")).await?;
    // A readiness check (`on_update = "ignore"`) that never passes does not count: healthy.
    let mut ready = job("ready", "/health");
    ready["TaskGroups"][0]["Services"][0]["Checks"]
        .as_array_mut()
        .expect("checks")
        .push(
            json!({"Name": "warming", "Type": "http", "Path": "/missing",
                     "OnUpdate": "ignore", "InitialStatus": "critical",
                     "Interval": second, "Timeout": second}),
        );
    register(&api, ready).await?;
    let health = |job: &'static str| {
        let api = api.clone();
        async move {
            wait_for(Duration::from_secs(60), &format!("{job} judged"), || {
                let api = api.clone();
                async move {
                    let stub = job_allocs(&api, job).await.into_iter().next()?;
                    let id = stub["ID"].as_str()?.to_string();
                    let a: Value = api.get(&format!("/v1/allocation/{id}")).await.ok()?;
                    a["DeploymentStatus"]["Healthy"].as_bool().map(|h| (h, a))
                }
            })
            .await
        }
    };
    let (good, _) = health("good").await?;
    assert!(good, "the passing check makes it healthy");
    let (bad, alloc) = health("bad").await?;
    assert!(!bad, "a 404 check never passes");
    let (ready, ready_alloc) = health("ready").await?;
    assert!(ready, "a failing readiness check does not count");
    let ready_id = ready_alloc["ID"].as_str().unwrap_or_default();
    let results: Value = api
        .get(&format!("/v1/client/allocation/{ready_id}/checks"))
        .await?;
    let modes: Vec<(String, String)> = results
        .as_object()
        .into_iter()
        .flatten()
        .map(|(_, r)| {
            (
                r["Check"].as_str().unwrap_or("").to_string(),
                r["Mode"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert!(
        modes.contains(&("warming".to_string(), "readiness".to_string())),
        "{results}"
    );
    let events = alloc["TaskStates"]["t"]["Events"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        events.iter().any(|e| e["Type"] == "Alloc Unhealthy"
            && e["DisplayMessage"]
                .as_str()
                .unwrap_or("")
                .contains("Services not healthy by deadline")
            || e["Message"]
                .as_str()
                .unwrap_or("")
                .contains("Services not healthy by deadline")),
        "{events:?}"
    );
    let deployment = wait_for(
        Duration::from_secs(30),
        "good's deployment successful",
        || {
            let api = api.clone();
            async move {
                let d: Value = api.get("/v1/job/good/deployment").await.ok()?;
                (d["Status"] == "successful").then_some(d)
            }
        },
    )
    .await?;
    assert_eq!(deployment["TaskGroups"]["g"]["HealthyAllocs"], 1);
    Ok(())
}

/// Whole cores and batch deadlines on a real agent: a task with `cores = 1` gets the
/// agent's first allowed core (its allocation says which, its process runs on it alone,
/// `NOMAD_CPU_CORES` names it), a second such task on the same node gets another or none;
/// a batch group's `max_run_duration` kills a task that would run an hour and completes
/// the allocation "allocation exceeded max_run_duration", its poststop task never started.
#[tokio::test]
async fn dev_agent_pins_cores_and_ends_a_batch_allocation_at_its_max_run_duration(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let ip = dev_ip_at(41);
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api) = dev_agent(&ip, &log).await?;
    let addr = format!("http://{ip}:4646");
    let allowed = std::fs::read_to_string("/proc/self/status")?;
    let allowed = allowed
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list")
        .trim()
        .to_string();
    let first: u16 = allowed
        .split([',', '-'])
        .next()
        .and_then(|c| c.parse().ok())
        .expect("a core id");

    let mut job = raw_exec_job(
        "pinned",
        "service",
        "grep Cpus_allowed_list /proc/self/status; echo \"cores=$NOMAD_CPU_CORES\"; exec sleep 3600",
        json!({}),
    );
    job["TaskGroups"][0]["Tasks"][0]["Resources"] = json!({"Cores": 1, "MemoryMB": 10});
    register(&api, job).await?;
    let alloc = wait_for(Duration::from_secs(30), "the pinned alloc running", || {
        let api = api.clone();
        async move {
            let a = job_allocs(&api, "pinned").await.into_iter().next()?;
            (a["ClientStatus"] == "running").then_some(a)
        }
    })
    .await?;
    let id = alloc["ID"].as_str().expect("alloc id").to_string();
    let full: Value = api.get(&format!("/v1/allocation/{id}")).await?;
    assert_eq!(
        full["AllocatedResources"]["Tasks"]["t"]["Cpu"]["ReservedCores"],
        json!([first]),
        "{full}"
    );
    let out = wait_for(Duration::from_secs(10), "the pinned task's output", || {
        let addr = addr.clone();
        let id = id.clone();
        async move {
            let out = stdout_of(&addr, &id).await;
            out.contains("cores=").then_some(out)
        }
    })
    .await?;
    assert!(
        out.contains(&format!("Cpus_allowed_list:\t{first}\n")),
        "{out}"
    );
    assert!(out.contains(&format!("cores={first}\n")), "{out}");

    let mut job = raw_exec_job("deadline", "batch", "exec sleep 3600", json!({}));
    job["TaskGroups"][0]["MaxRunDuration"] = json!(3_000_000_000u64);
    job["TaskGroups"][0]["Tasks"]
        .as_array_mut()
        .expect("tasks")
        .push(json!({
            "Name": "report",
            "Driver": "raw_exec",
            "Lifecycle": {"Hook": "poststop"},
            "Config": {"command": "/bin/sh", "args": ["-c", "echo report"]},
            "Resources": {"CPU": 10, "MemoryMB": 10}
        }));
    register(&api, job).await?;
    let alloc = wait_for(
        Duration::from_secs(30),
        "the deadline alloc complete",
        || {
            let api = api.clone();
            async move {
                let a = job_allocs(&api, "deadline").await.into_iter().next()?;
                (a["ClientStatus"] == "complete").then_some(a)
            }
        },
    )
    .await?;
    assert_eq!(
        alloc["ClientDescription"], "allocation exceeded max_run_duration",
        "{alloc}"
    );
    let events = alloc["TaskStates"]["t"]["Events"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        events.iter().any(|e| e["Type"] == "Killing"
            && e["DisplayMessage"] == "allocation exceeded max_run_duration"),
        "{events:?}"
    );
    let report = &alloc["TaskStates"]["report"];
    assert!(report.is_object(), "the poststop task has a state: {alloc}");
    assert!(
        report["StartedAt"].is_null() || report["StartedAt"] == "0001-01-01T00:00:00Z",
        "the poststop task never started: {report}"
    );
    // Not replaced: still one allocation.
    assert_eq!(job_allocs(&api, "deadline").await.len(), 1);
    Ok(())
}

/// Serves `files` (path → body) over HTTP on loopback for the artifacts test; a request
/// without the header `X-Token: s3cret` is answered 403. Returns the base URL.
async fn serve_files(files: std::collections::BTreeMap<String, Vec<u8>>) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    let files = std::sync::Arc::new(files);
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let files = files.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&request).to_string();
                let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                let authorized = text
                    .lines()
                    .any(|l| l.eq_ignore_ascii_case("x-token: s3cret"));
                let (status, body) = match files.get(&path) {
                    Some(_) if !authorized => ("403 Forbidden", Vec::new()),
                    Some(body) => ("200 OK", body.clone()),
                    None => ("404 Not Found", Vec::new()),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes()).await;
                let _ = conn.write_all(&body).await;
            });
        }
    });
    Ok(base)
}

/// Issue 50: a task's artifacts are fetched over HTTP before it starts (its headers sent,
/// the source interpolated), a tarball checked against its checksum and unpacked into
/// `local/`; a wrong checksum fails the task with Nomad's `Failed Artifact Download` event
/// naming the reason, and the task never runs. A task with a `user` runs as that account.
#[tokio::test]
async fn dev_agent_fetches_checks_and_unpacks_artifacts_before_the_task_starts(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    // The tarball, made with the system's tar, and its digest.
    let src = tempfile::tempdir()?;
    std::fs::create_dir_all(src.path().join("app"))?;
    std::fs::write(
        src.path().join("app/hello.txt"),
        "hello from the artifact\n",
    )?;
    let tarball = src.path().join("app.tar.gz");
    let made = Command::new("tar")
        .arg("czf")
        .arg(&tarball)
        .arg("-C")
        .arg(src.path())
        .arg("app")
        .status()?;
    anyhow::ensure!(made.success(), "tar czf failed");
    let out = Command::new("sha256sum").arg(&tarball).output()?;
    let digest = String::from_utf8(out.stdout)?
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string();
    anyhow::ensure!(digest.len() == 64, "sha256sum: {digest:?}");
    let base = serve_files(std::collections::BTreeMap::from([
        ("/app.tar.gz".to_string(), std::fs::read(&tarball)?),
        ("/notes.txt".to_string(), b"plain notes\n".to_vec()),
    ]))
    .await?;

    let ip = dev_ip_at(42);
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api) = dev_agent(&ip, &log).await?;
    let addr = format!("http://{ip}:4646");
    let restart_once = json!({"RestartPolicy": {"Attempts": 0, "Mode": "fail"},
                              "ReschedulePolicy": {"Attempts": 0, "Unlimited": false}});
    let artifacts = |checksum: &str| {
        json!([
            {"GetterSource": format!("{base}/app.tar.gz"),
             "GetterOptions": {"checksum": format!("sha256:{checksum}")},
             "GetterHeaders": {"X-Token": "s3cret"}},
            {"GetterSource": format!("{base}/${{NOMAD_META_file}}"),
             "GetterHeaders": {"X-Token": "s3cret"},
             "RelativeDest": "local/docs"}
        ])
    };
    let mut job = raw_exec_job(
        "fetched",
        "batch",
        "cat local/app/hello.txt local/docs/notes.txt; id -un",
        restart_once.clone(),
    );
    job["Meta"] = json!({"file": "notes.txt"});
    job["TaskGroups"][0]["Tasks"][0]["Artifacts"] = artifacts(&digest);
    job["TaskGroups"][0]["Tasks"][0]["User"] = json!("nobody");
    register(&api, job).await?;
    let alloc = wait_for(
        Duration::from_secs(60),
        "the fetching task finished",
        || async {
            let a = job_allocs(&api, "fetched").await.into_iter().next()?;
            matches!(a["ClientStatus"].as_str(), Some("complete" | "failed")).then_some(a)
        },
    )
    .await?;
    let alloc_id = alloc["ID"].as_str().unwrap_or_default().to_string();
    let full: Value = api.get(&format!("/v1/allocation/{alloc_id}")).await?;
    assert_eq!(full["ClientStatus"], "complete", "{full:#}");
    let stderr = reqwest::get(format!(
        "{addr}/v1/client/fs/logs/{alloc_id}?task=t&type=stderr&plain=true"
    ))
    .await?
    .text()
    .await?;
    assert_eq!(
        stdout_of(&addr, &alloc_id).await,
        "hello from the artifact\nplain notes\nnobody\n",
        "stderr: {stderr}\n{full:#}"
    );
    let types: Vec<&str> = full["TaskStates"]["t"]["Events"]
        .as_array()
        .map(|e| e.iter().filter_map(|e| e["Type"].as_str()).collect())
        .unwrap_or_default();
    assert!(types.contains(&"Downloading Artifacts"), "{types:?}");

    // A wrong checksum: the download fails with the reason, the task never starts.
    let mut job = raw_exec_job("tampered", "batch", "echo ran", restart_once);
    job["TaskGroups"][0]["Tasks"][0]["Artifacts"] = artifacts(&"0".repeat(64));
    register(&api, job).await?;
    let alloc = wait_for(
        Duration::from_secs(60),
        "the tampered task failed",
        || async {
            let a = job_allocs(&api, "tampered").await.into_iter().next()?;
            (a["ClientStatus"] == "failed").then_some(a)
        },
    )
    .await?;
    let alloc_id = alloc["ID"].as_str().unwrap_or_default().to_string();
    let full: Value = api.get(&format!("/v1/allocation/{alloc_id}")).await?;
    let failure = full["TaskStates"]["t"]["Events"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["Type"] == "Failed Artifact Download"))
        .cloned()
        .unwrap_or_default();
    let message = failure["DisplayMessage"].as_str().unwrap_or_default();
    assert!(
        message.contains("failed to download artifact")
            && message.contains("checksums did not match"),
        "{full:#}"
    );
    let started = full["TaskStates"]["t"]["Events"]
        .as_array()
        .is_some_and(|e| e.iter().any(|e| e["Type"] == "Started"));
    assert!(!started, "{full:#}");
    assert!(!stdout_of(&addr, &alloc_id).await.contains("ran"));

    // Refused at submit with Nomad's words.
    let mut bad = raw_exec_job("bad-artifact", "batch", "true", json!({}));
    bad["TaskGroups"][0]["Tasks"][0]["Artifacts"] =
        json!([{"GetterSource": "http://x/y", "RelativeDest": "../../etc"}]);
    let e = register(&api, bad).await.unwrap_err().to_string();
    assert!(
        e.contains("400")
            && e.contains("Artifact 1 validation failed: destination escapes allocation directory"),
        "{e}"
    );
    Ok(())
}

/// The `exec` driver on a dev agent run as root: the task sees only its own processes and
/// none of the host's files outside its root, runs as `nobody`; `alloc exec` runs inside its
/// namespaces; `job stop` kills every process it started (one in a session of its own
/// too); a task over its memory is OOM-killed and reported so. Skipped, loudly, where the
/// exec driver is not detected (not root, no usable cgroups); under CI that fails.
#[tokio::test]
async fn dev_agent_isolates_exec_tasks_kills_them_whole_and_reports_oom_kills() -> anyhow::Result<()>
{
    teamster_cluster_tests::init_test_tracing();
    let test = "dev_agent_isolates_exec_tasks_kills_them_whole_and_reports_oom_kills";
    let ip = dev_ip_at(43);
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api) = dev_agent(&ip, &log).await?;
    let addr = format!("http://{ip}:4646");
    let nodes: Vec<Value> = api.get("/v1/nodes").await?;
    let node_id = nodes[0]["ID"].as_str().unwrap_or_default().to_string();
    let node: Value = api.get(&format!("/v1/node/{node_id}")).await?;
    let exec = &node["Drivers"]["exec"];
    if exec["Detected"] != true {
        anyhow::ensure!(
            std::env::var("CI").is_err(),
            "{test}: the exec driver must be detected under CI: {exec}"
        );
        eprintln!("SKIPPED {test}: {}", exec["HealthDescription"]);
        return Ok(());
    }
    assert_eq!(node["Attributes"]["driver.exec"], "1");

    let host_file = tempfile::NamedTempFile::new()?;
    let script = format!(
        "echo pids $(ls /proc | grep -c '^[0-9]'); test -e {} && echo host visible; \
         echo user $(id -un); (setsid sleep 1000 &); echo started; exec sleep 1000",
        host_file.path().display()
    );
    let mut job = raw_exec_job("isolated", "service", &script, json!({}));
    job["TaskGroups"][0]["Tasks"][0]["Driver"] = json!("exec");
    register(&api, job).await?;
    let alloc = wait_for(Duration::from_secs(60), "the exec task runs", || async {
        let a = job_allocs(&api, "isolated").await.into_iter().next()?;
        let id = a["ID"].as_str()?.to_string();
        (a["ClientStatus"] == "running" && stdout_of(&addr, &id).await.contains("started"))
            .then_some(a)
    })
    .await?;
    let id = alloc["ID"].as_str().unwrap_or_default().to_string();
    let out = stdout_of(&addr, &id).await;
    assert!(out.starts_with("pids "), "{out}");
    let pids: usize = out
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("pids "))
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX);
    assert!(pids <= 4, "the task saw other processes: {out}");
    assert!(!out.contains("host visible"), "{out}");
    assert!(out.contains("user nobody\n"), "{out}");

    // alloc exec runs inside the task: its pid 1 is the task, its root the task's.
    let run = |args: &[&str]| teamster_cluster_tests::process::alloc_exec(&addr, args, None);
    let inside = run(&[
        &id,
        "sh",
        "-c",
        "head -c 10 /proc/1/cmdline; echo; id -un; ls /local /alloc >/dev/null && echo dirs",
    ]);
    assert_eq!(
        String::from_utf8_lossy(&inside.stdout),
        "sleep\u{0}1000\nnobody\ndirs\n",
        "{}",
        String::from_utf8_lossy(&inside.stderr)
    );

    // With a terminal of its own too.
    let tty = run(&["-t", &id, "sh", "-c", "test -t 1 && echo yes; id -un"]);
    assert_eq!(
        String::from_utf8_lossy(&tty.stdout),
        "yes\r\nnobody\r\n",
        "{}",
        String::from_utf8_lossy(&tty.stderr)
    );

    // Every process of the task, as its cgroup holds them (the supervisor, the task, the
    // sleep that left for a session of its own).
    let procs = format!("/sys/fs/cgroup/pids/teamster/{id}.t/cgroup.procs");
    let procs = std::fs::read_to_string(&procs)
        .or_else(|_| {
            std::fs::read_to_string(format!(
                "/sys/fs/cgroup/teamster.slice/{id}.t.scope/cgroup.procs"
            ))
        })
        .unwrap_or_default();
    let held: Vec<i32> = procs.lines().filter_map(|l| l.parse().ok()).collect();
    assert!(held.len() >= 3, "{held:?}");
    let stats: Value = api
        .get(&format!("/v1/client/allocation/{id}/stats"))
        .await?;
    let measured = &stats["Tasks"]["t"]["ResourceUsage"]["MemoryStats"]["Measured"];
    assert!(
        measured
            .as_array()
            .is_some_and(|m| m.contains(&json!("Usage"))),
        "{stats:#}"
    );
    api.request::<(), Value>(reqwest::Method::DELETE, "/v1/job/isolated", None)
        .await?;
    wait_for(Duration::from_secs(30), "the exec task stopped", || async {
        let a: Value = api.get(&format!("/v1/allocation/{id}")).await.ok()?;
        (a["ClientStatus"] == "complete").then_some(())
    })
    .await?;
    for pid in &held {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z ")),
            "process {pid} of the stopped task is still running"
        );
    }

    // Over its memory: OOM-killed, reported as Nomad reports it.
    let mut job = raw_exec_job(
        "hungry",
        "batch",
        "head -c 300000000 /dev/zero | tail",
        json!({"RestartPolicy": {"Attempts": 0, "Mode": "fail"},
               "ReschedulePolicy": {"Attempts": 0, "Unlimited": false}}),
    );
    job["TaskGroups"][0]["Tasks"][0]["Driver"] = json!("exec");
    job["TaskGroups"][0]["Tasks"][0]["Resources"] = json!({"CPU": 100, "MemoryMB": 32});
    register(&api, job).await?;
    let alloc = wait_for(Duration::from_secs(60), "the hungry task ended", || async {
        let a = job_allocs(&api, "hungry").await.into_iter().next()?;
        matches!(a["ClientStatus"].as_str(), Some("failed" | "complete")).then_some(a)
    })
    .await?;
    let id = alloc["ID"].as_str().unwrap_or_default().to_string();
    let full: Value = api.get(&format!("/v1/allocation/{id}")).await?;
    let terminated = full["TaskStates"]["t"]["Events"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["Type"] == "Terminated"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(terminated["Details"]["oom_killed"], "true", "{full:#}");
    let shown = Command::new(teamster_bin())
        .args(["alloc", "status", "-address", &addr, &id])
        .output()?;
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(shown.contains("Exit Message: \"OOM Killed\""), "{shown}");
    Ok(())
}
