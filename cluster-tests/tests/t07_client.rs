//! Client agents as real processes: registration, heartbeats, running a raw_exec allocation
//! placed by hand through pending → running → complete with its log served over HTTP, a
//! SIGKILLed client marked down after its TTL and back without duplicated tasks, leader
//! failover that marks no live node down, and malformed registrations refused.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use teamster::rpc::service::node::NodeRegisterRequest;
use teamster::rpc::{Pool, RpcConfig, ServiceError, ServiceRequest};
use teamster_cluster_tests::api::register;
use teamster_cluster_tests::client_process::{
    node_allocs, place_alloc, wait_node_status, ClientProcess,
};
use teamster_cluster_tests::process::{ClusterOptions, ProcessCluster};
use teamster_cluster_tests::wait_for;
use teamster_storage::model::{Node, NodeCpuResources, NodeMemoryResources, NodeStatus};

const FORMATION: Duration = Duration::from_secs(30);

/// Short heartbeats: clients are told 1–2 s and marked down 1 s after that.
fn fast_heartbeats(failover: &str) -> ClusterOptions {
    ClusterOptions {
        server_toml: format!(
            "min_heartbeat_ttl = \"1s\"\nheartbeat_grace = \"1s\"\nfailover_heartbeat_ttl = {failover:?}\n"
        ),
        ..ClusterOptions::default()
    }
}

/// A loopback IP in the cluster's block for client `n`.
fn client_ip(c: &ProcessCluster, n: u8) -> String {
    let ip = &c.servers[0].ip;
    let (block, _) = ip.rsplit_once('.').expect("an IPv4 address");
    format!("{block}.{}", 100 + n)
}

/// A job nobody schedules (its datacenter has no nodes), so only hand-placed allocations
/// run.
fn raw_exec_job(id: &str, job_type: &str, script: &str) -> Value {
    json!({
        "ID": id,
        "Type": job_type,
        "Datacenters": ["dc-unplaceable"],
        "TaskGroups": [{
            "Name": "g",
            "Count": 1,
            "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
            "Tasks": [{
                "Name": "t",
                "Driver": "raw_exec",
                "Config": {"command": "/bin/sh", "args": ["-c", script]},
                "KillTimeout": 1_000_000_000u64,
                "Resources": {"CPU": 10, "MemoryMB": 10}
            }]
        }]
    })
}

async fn alloc_status(api: &teamster::api::ApiClient, node: &str, alloc: &str) -> Option<Value> {
    node_allocs(api, node)
        .await
        .ok()?
        .into_iter()
        .find(|a| a["ID"] == alloc)
}

async fn wait_client_status(
    api: &teamster::api::ApiClient,
    node: &str,
    alloc: &str,
    status: &str,
) -> anyhow::Result<Value> {
    wait_for(
        Duration::from_secs(15),
        &format!("allocation {alloc} {status}"),
        || async {
            alloc_status(api, node, alloc)
                .await
                .filter(|a| a["ClientStatus"] == status)
        },
    )
    .await
}

fn bad_node(id: &str) -> Node {
    let mut n = Node {
        id: id.into(),
        name: "bad".into(),
        datacenter: "dc1".into(),
        status: NodeStatus::Ready,
        node_resources: teamster_storage::model::NodeResources {
            cpu: NodeCpuResources {
                cpu_shares: 1000,
                total_cpu_cores: 1,
                reservable_cpu_cores: vec![0],
            },
            memory: NodeMemoryResources { memory_mb: 1024 },
            ..Default::default()
        },
        ..Node::default()
    };
    n.attributes.insert("kernel name".into(), "linux".into());
    n
}

#[tokio::test]
async fn a_client_runs_an_allocation_goes_down_when_killed_and_comes_back_without_duplicates(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    // No scheduler workers: the test places allocations by hand, as a worker would.
    let mut options = fast_heartbeats("5m");
    options.server_toml.push_str("num_schedulers = 0\n");
    let mut c = ProcessCluster::start(1, options)?;
    let leader = c.wait_leader(FORMATION).await?;
    let server = c.servers[leader].api();
    let rpc = c.servers[leader].rpc_addr();
    let ip = client_ip(&c, 1);
    let mut client =
        ClientProcess::start(c.dir(), "client-1", &ip, std::slice::from_ref(&rpc), "")?;
    let node_id = wait_for(Duration::from_secs(10), "the client's node id", || async {
        client.node_id().await
    })
    .await?;
    wait_node_status(&server, &node_id, "ready", Duration::from_secs(15)).await?;
    let node: Value = server.get(&format!("/v1/node/{node_id}")).await?;
    assert_eq!(node["SecretID"], "", "the secret is never shown");
    assert_eq!(node["Attributes"]["driver.raw_exec"], "1");
    assert!(
        node["NodeResources"]["Memory"]["MemoryMB"]
            .as_u64()
            .unwrap_or(0)
            > 0
    );

    // The node through the CLI and the HTTP API.
    let addr = c.servers[leader].http_addr();
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(teamster_cluster_tests::process::teamster_bin())
            .args(args)
            .args(["--address", &addr])
            .output()
            .expect("the CLI runs");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let listing = cli(&["node", "status"]);
    assert!(
        listing.contains(&node_id[..8]) && listing.contains("ready"),
        "{listing}"
    );
    let one = cli(&["node", "status", &node_id[..8]]);
    assert!(one.contains("raw_exec") && one.contains(&node_id), "{one}");
    cli(&["node", "eligibility", "--disable", &node_id]);
    let n: Value = server.get(&format!("/v1/node/{node_id}")).await?;
    assert_eq!(n["SchedulingEligibility"], "ineligible");
    cli(&["node", "eligibility", "--enable", &node_id]);
    let n: Value = server.get(&format!("/v1/node/{node_id}")).await?;
    assert_eq!(n["SchedulingEligibility"], "eligible");
    let refused = server
        .request::<_, Value>(
            reqwest::Method::POST,
            &format!("/v1/node/{node_id}/eligibility"),
            Some(&json!({"Eligibility": "maybe"})),
        )
        .await
        .expect_err("a bad eligibility is refused");
    assert!(refused.to_string().contains("Eligibility"), "{refused}");

    // Malformed registrations are refused with a message naming the problem.
    let pool = Pool::new(0, RpcConfig::for_tests())?;
    let mut bad = bad_node("0b9e7c1a-0000-4000-8000-000000000001");
    let answer = pool
        .service(
            0,
            &rpc,
            ServiceRequest::NodeRegister(Box::new(NodeRegisterRequest { node: bad.clone() })),
            Duration::from_secs(5),
        )
        .await;
    match answer {
        Err(ServiceError::Invalid { reason, .. }) => {
            assert!(
                reason.contains("malformed attribute key \"kernel name\""),
                "{reason}"
            )
        }
        other => panic!("bad attributes accepted: {other:?}"),
    }
    bad.attributes.clear();
    bad.node_resources.memory.memory_mb = u64::MAX;
    match pool
        .service(
            0,
            &rpc,
            ServiceRequest::NodeRegister(Box::new(NodeRegisterRequest { node: bad })),
            Duration::from_secs(5),
        )
        .await
    {
        Err(ServiceError::Invalid { field, reason }) => {
            assert_eq!(field, "Node");
            assert!(reason.contains("MemoryMB"), "{reason}")
        }
        other => panic!("absurd memory accepted: {other:?}"),
    }

    // A raw_exec batch allocation: pending → running → complete, its log over HTTP.
    register(
        &server,
        raw_exec_job("hello", "batch", "echo hello; sleep 1"),
    )
    .await?;
    place_alloc(
        &rpc,
        "a0000000-0000-4000-8000-000000000001",
        "hello",
        &node_id,
    )
    .await?;
    let a1 = "a0000000-0000-4000-8000-000000000001";
    wait_client_status(&server, &node_id, a1, "running").await?;
    let done = wait_client_status(&server, &node_id, a1, "complete").await?;
    let task = &done["TaskStates"]["t"];
    assert_eq!(task["State"], "dead", "{done}");
    assert_eq!(task["Failed"], false);
    let events: Vec<&str> = task["Events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["Type"].as_str())
        .collect();
    assert!(
        events.contains(&"Started") && events.contains(&"Terminated"),
        "{events:?}"
    );
    // Served by the client, asked through the server.
    let log = server
        .request_text::<()>(
            reqwest::Method::GET,
            &format!("/v1/client/fs/cat/{a1}?path=alloc/logs/t.stdout.0"),
            None,
        )
        .await?;
    assert_eq!(log, "hello\n");

    // A long-running service allocation, then the client is SIGKILLed.
    register(
        &server,
        raw_exec_job("sleepy", "service", "echo started; exec sleep 30"),
    )
    .await?;
    let a2 = "a0000000-0000-4000-8000-000000000002";
    place_alloc(&rpc, a2, "sleepy", &node_id).await?;
    wait_client_status(&server, &node_id, a2, "running").await?;
    client.kill();
    let killed = Instant::now();
    wait_node_status(&server, &node_id, "down", Duration::from_secs(15)).await?;
    let to_down = killed.elapsed();
    // TTL ≤ 2 s plus 1 s of grace, plus polling.
    assert!(to_down < Duration::from_secs(6), "down after {to_down:?}");

    // Back: ready again, same node, the task found again rather than started twice.
    client.restart()?;
    wait_node_status(&server, &node_id, "ready", Duration::from_secs(15)).await?;
    assert_eq!(client.node_id().await.as_deref(), Some(node_id.as_str()));
    let stdout = client
        .data_dir
        .join(format!("alloc/{a2}/alloc/logs/t.stdout.0"));
    // Whatever the servers decided meanwhile (running on, or lost and stopped), the client
    // reports the allocation again and never starts a second copy.
    wait_for(
        Duration::from_secs(10),
        "the client to report again",
        || async {
            let a = alloc_status(&server, &node_id, a2).await?;
            let events = a["TaskStates"]["t"]["Events"].as_array()?.len();
            (events > 0).then_some(())
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = std::fs::read_to_string(&stdout)?.matches("started").count();
    assert_eq!(started, 1, "the task ran twice");
    let allocs = node_allocs(&server, &node_id).await?;
    assert_eq!(allocs.len(), 2, "{allocs:?}");
    Ok(())
}

#[tokio::test]
async fn leader_failover_marks_no_live_node_down() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    // The new leader gives live nodes only 3 s: a client that did not fail over to a live
    // server would be marked down within the observation window.
    let mut c = ProcessCluster::start(3, fast_heartbeats("3s"))?;
    let leader = c.wait_leader(FORMATION).await?;
    let servers: Vec<String> = c.servers.iter().map(|s| s.rpc_addr()).collect();
    let ip = client_ip(&c, 2);
    // The client talks to the leader first.
    let mut ordered = vec![servers[leader].clone()];
    ordered.extend(servers.iter().filter(|s| **s != servers[leader]).cloned());
    let client = ClientProcess::start(c.dir(), "client-2", &ip, &ordered, "")?;
    let node_id = wait_for(Duration::from_secs(10), "the client's node id", || async {
        client.node_id().await
    })
    .await?;
    let api = c.servers[leader].api();
    wait_node_status(&api, &node_id, "ready", Duration::from_secs(15)).await?;

    c.kill(leader);
    let new_leader = c.wait_leader(FORMATION).await?;
    let api = c.servers[new_leader].api();
    let watch_until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < watch_until {
        let n: Value = api.get(&format!("/v1/node/{node_id}?stale=true")).await?;
        assert_eq!(n["Status"], "ready", "a live node was marked down: {n}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

/// Kills every process whose environment carries `CRASH_TOKEN=<token>` when dropped: the
/// tasks of the crash test outlive its clients by design.
struct Reaper(String);

impl Reaper {
    fn pids(&self) -> Vec<i32> {
        let wanted = format!("CRASH_TOKEN={}", self.0);
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ"))
                    .map(|env| env.split(|b| *b == 0).any(|v| v == wanted.as_bytes()))
                    .unwrap_or(false)
            })
            .collect()
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        for pid in self.pids() {
            // SAFETY: kill(2) has no memory effects.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
    }
}

/// A job of `count` raw_exec allocations on dc1 whose task appends its allocation ID to
/// `starts` once, then sleeps.
fn crash_job(id: &str, count: u32, starts: &std::path::Path, token: &str) -> Value {
    json!({
        "ID": id,
        "Type": "service",
        "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g",
            "Count": count,
            "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
            "Tasks": [{
                "Name": "t",
                "Driver": "raw_exec",
                "Config": {"command": "/bin/sh", "args": ["-c", format!(
                    "echo $NOMAD_ALLOC_ID >> {}; exec sleep 600", starts.display()
                )]},
                "Env": {"CRASH_TOKEN": token},
                "KillTimeout": 1_000_000_000u64,
                "Resources": {"CPU": 10, "MemoryMB": 10}
            }]
        }]
    })
}

/// The client is killed with SIGKILL at random moments while it starts tasks and records
/// them, and at the two crash points around a launch (after recording it, before the
/// process starts; after the process started, before its handle is recorded). It is
/// restarted each time. In the end every allocation runs, each task started exactly once,
/// and exactly one process per allocation is alive.
#[tokio::test]
async fn a_client_killed_at_random_points_of_its_writes_starts_no_task_twice() -> anyhow::Result<()>
{
    use rand::{Rng, SeedableRng};
    teamster_cluster_tests::init_test_tracing();
    let seed: u64 = std::env::var("CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("CRASH_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut c = ProcessCluster::start(1, ClusterOptions::default())?;
    let leader = c.wait_leader(FORMATION).await?;
    let api = c.servers[leader].api();
    let servers = vec![c.servers[leader].rpc_addr()];
    let token = format!("{}-{seed}", std::process::id());
    let reaper = Reaper(token.clone());
    let starts = c.dir().join("starts.log");
    let mut client = ClientProcess::start(c.dir(), "client-1", &client_ip(&c, 1), &servers, "")?;
    let node_id = wait_for(Duration::from_secs(15), "the client's node id", || async {
        client.node_id().await
    })
    .await?;
    wait_node_status(&api, &node_id, "ready", Duration::from_secs(15)).await?;

    const ROUNDS: u32 = 12;
    const PER_JOB: u32 = 3;
    let crash_rounds = [
        (2, "client.task_started@2"),
        (5, "client.launch_recorded@2"),
        (8, "client.task_started@1"),
    ];
    let mut crashed_at_points = 0;
    for round in 0..ROUNDS {
        let crash = crash_rounds.iter().find(|(r, _)| *r == round);
        if let Some((_, point)) = crash {
            client.env = vec![("TEAMSTER_CRASH_AT".into(), point.to_string())];
            client.restart()?;
            wait_node_status(&api, &node_id, "ready", Duration::from_secs(15)).await?;
        }
        register(
            &api,
            crash_job(&format!("crash-{round}"), PER_JOB, &starts, &token),
        )
        .await?;
        if let Some((_, point)) = crash {
            anyhow::ensure!(
                client.wait_exited(Duration::from_secs(30)).await,
                "the client never reached {point}:\n{}",
                client.log_tail(40)
            );
            crashed_at_points += 1;
            client.env.clear();
        } else {
            // Somewhere in the launches and writes this registration causes.
            tokio::time::sleep(Duration::from_millis(rng.gen_range(0..400))).await;
        }
        client.restart()?;
    }
    assert_eq!(crashed_at_points, crash_rounds.len());

    // Everything runs, each task started once, one process each.
    let total = (ROUNDS * PER_JOB) as usize;
    let running = wait_for(
        Duration::from_secs(60),
        "every allocation running",
        || async {
            let allocs = node_allocs(&api, &node_id).await.ok()?;
            let running: Vec<String> = allocs
                .iter()
                .filter(|a| a["DesiredStatus"] == "run" && a["ClientStatus"] == "running")
                .filter_map(|a| a["ID"].as_str().map(str::to_string))
                .collect();
            (running.len() == total && allocs.len() == total).then_some(running)
        },
    )
    .await;
    let running = match running {
        Ok(r) => r,
        Err(e) => {
            let allocs = node_allocs(&api, &node_id).await.unwrap_or_default();
            let seen: Vec<String> = allocs
                .iter()
                .map(|a| {
                    format!(
                        "{} {} {}/{} {}",
                        a["ID"],
                        a["JobID"],
                        a["DesiredStatus"],
                        a["ClientStatus"],
                        a["TaskStates"]["t"]["Events"]
                    )
                })
                .collect();
            let log = client.log_tail(1_000_000);
            let about: Vec<&str> = log
                .lines()
                .filter(|l| {
                    allocs.iter().any(|a| {
                        a["ClientStatus"] != "running"
                            && l.contains(a["ID"].as_str().unwrap_or("-"))
                    })
                })
                .collect();
            anyhow::bail!(
                "{e} (seed {seed}); allocations:\n{}\nthe client's log of those not running:\n{}",
                seen.join("\n"),
                about.join("\n")
            );
        }
    };
    let log = std::fs::read_to_string(&starts)?;
    let mut started: Vec<&str> = log.lines().collect();
    started.sort_unstable();
    let mut expected: Vec<&str> = running.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(
        started, expected,
        "each allocation's task starts exactly once (seed {seed})"
    );
    assert_eq!(
        reaper.pids().len(),
        total,
        "one live process per allocation (seed {seed})"
    );
    Ok(())
}
