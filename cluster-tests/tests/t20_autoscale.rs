//! Capacity on demand with the docker provider, on a compose cluster (the autoscale variant,
//! deploy/docker-compose.autoscale.yml): three servers that reach the host's engine and ONE
//! client. A job of more `raw_exec` sleepers than that client holds is registered; the
//! leader's autoscaler starts client containers of `teamster:dev` on the cluster network up
//! to its quota (two) and never beyond, and the work is placed on them. The leader is then
//! stopped: the next leader adopts the two clients (same containers, no third one while
//! work still waits), and once the jobs are stopped it stops the idle clients: containers
//! gone, nodes purged.
//!
//! Every node advertises 1000 MHz and 1024 MB (`cpu_total_compute`, `memory_total_mb`);
//! each sleeper asks for 450 MHz, so a node holds two and the six sleepers need three
//! nodes: client1 and both autoscaled ones.
//!
//! ```text
//! CI=true cargo test -p teamster-cluster-tests --test t20_autoscale -- --nocapture
//! ```
//! (`TEAMSTER_TEST_IMAGE` names another image than `teamster:dev`; MEASURE lines give the
//! timings.)

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use teamster::api::ApiClient;
use teamster_cluster_tests::api::metrics_text;
use teamster_cluster_tests::compose::{
    skip_without_docker, AutoscaleOptions, ComposeCluster, ComposeOptions,
};
use teamster_cluster_tests::wait_for;

const CLASS: &str = "autoscaled";
const QUOTA: usize = 2;
const SLEEPERS: u32 = 6;

fn options() -> ComposeOptions {
    ComposeOptions {
        autoscale: Some(AutoscaleOptions {
            autoscaler_toml: format!(
                "node_class = \"{CLASS}\"\nmax_nodes = {QUOTA}\nblocked_for = \"2s\"\n\
                 idle_timeout = \"8s\"\nregister_timeout = \"60s\"\ninterval = \"1s\"\n\
                 backoff = \"1s\"\nmax_backoff = \"8s\""
            ),
            client_toml: "cpu_total_compute = 1000\nmemory_total_mb = 1024".into(),
        }),
        ..ComposeOptions::default()
    }
}

/// `count` copies of busybox `sleep` under raw_exec, two to a node.
fn sleepers(id: &str, count: u32) -> Value {
    json!({
        "ID": id,
        "Type": "service",
        "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "sleepers",
            "Count": count,
            "Tasks": [{
                "Name": "sleep",
                "Driver": "raw_exec",
                "Config": { "command": "/bin/sleep", "args": ["3600"] },
                "KillTimeout": 1_000_000_000u64,
                "Resources": { "CPU": 450, "MemoryMB": 64 }
            }]
        }]
    })
}

/// Name, status and class of every node.
async fn nodes(api: &ApiClient) -> Option<Vec<(String, String, String)>> {
    let nodes: Vec<Value> = api.get("/v1/nodes").await.ok()?;
    Some(
        nodes
            .iter()
            .filter_map(|n| {
                Some((
                    n["Name"].as_str()?.to_string(),
                    n["Status"].as_str()?.to_string(),
                    n["NodeClass"].as_str().unwrap_or("").to_string(),
                ))
            })
            .collect(),
    )
}

/// Running allocations of `job` by node ID.
async fn running_by_node(api: &ApiClient, job: &str) -> Option<BTreeMap<String, usize>> {
    let allocs: Vec<Value> = api.get(&format!("/v1/job/{job}/allocations")).await.ok()?;
    let mut by_node = BTreeMap::new();
    for a in &allocs {
        if a["ClientStatus"] == "running" {
            *by_node
                .entry(a["NodeID"].as_str()?.to_string())
                .or_insert(0usize) += 1;
        }
    }
    Some(by_node)
}

/// The sum of a counter's samples (over its labels) in Prometheus text.
fn counter(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_docker_provider_adds_clients_up_to_the_quota_and_removes_idle_ones(
) -> anyhow::Result<()> {
    if skip_without_docker(
        "compose_docker_provider_adds_clients_up_to_the_quota_and_removes_idle_ones",
    ) {
        return Ok(());
    }
    let c = ComposeCluster::up(options()).await?;
    let leader = c.wait_leader(&[0, 1, 2], Duration::from_secs(30)).await?;
    let api = c.servers[leader].api();
    assert_eq!(
        c.clients.len(),
        1,
        "the autoscale variant starts one client"
    );
    wait_for(Duration::from_secs(60), "client1 ready", || {
        let api = api.clone();
        async move {
            let n = nodes(&api).await?;
            n.iter()
                .any(|(name, status, _)| name == "client1" && status == "ready")
                .then_some(())
        }
    })
    .await?;

    // Watch the autoscaled containers and nodes throughout: never more than the quota.
    let most = Arc::new(Mutex::new((0usize, 0usize)));
    let watching = tokio_util::sync::CancellationToken::new();
    let watcher = {
        // A server that outlives the leader's stop below.
        let api = c.servers[(leader + 1) % 3].api();
        let (most, watching) = (most.clone(), watching.clone());
        let network = c.network();
        tokio::spawn(async move {
            while !watching.is_cancelled() {
                let containers = tokio::process::Command::new("docker")
                    .args([
                        "ps",
                        "-aq",
                        "--filter",
                        "label=io.teamster.autoscaler.cluster",
                        "--filter",
                        &format!("network={network}"),
                    ])
                    .output()
                    .await
                    .map(|o| {
                        String::from_utf8_lossy(&o.stdout)
                            .split_whitespace()
                            .count()
                    })
                    .unwrap_or(0);
                let scaled = nodes(&api)
                    .await
                    .map(|n| n.iter().filter(|(_, _, class)| class == CLASS).count())
                    .unwrap_or(0);
                {
                    let mut m = most.lock().unwrap();
                    m.0 = m.0.max(containers);
                    m.1 = m.1.max(scaled);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };

    let start = Instant::now();
    let register: Value = api
        .request(
            reqwest::Method::POST,
            "/v1/jobs",
            Some(&json!({ "Job": sleepers("wide", SLEEPERS) })),
        )
        .await?;
    assert!(register["EvalID"].is_string(), "{register}");

    // client1 takes two; the rest wait for the autoscaled clients.
    // When the first and the second autoscaled client turned ready.
    let marks: Mutex<(Option<Duration>, Option<Duration>)> = Mutex::new((None, None));
    let placed = wait_for(Duration::from_secs(180), "every sleeper running", || {
        let (api, marks) = (api.clone(), &marks);
        async move {
            let n = nodes(&api).await?;
            let ready = n
                .iter()
                .filter(|(_, status, class)| class == CLASS && status == "ready")
                .count();
            {
                let mut m = marks.lock().unwrap();
                if ready >= 1 && m.0.is_none() {
                    m.0 = Some(start.elapsed());
                }
                if ready >= QUOTA && m.1.is_none() {
                    m.1 = Some(start.elapsed());
                }
            }
            let by_node = running_by_node(&api, "wide").await?;
            (by_node.values().sum::<usize>() == SLEEPERS as usize).then_some(by_node)
        }
    })
    .await?;
    let all_running = start.elapsed();
    let (first_ready, both_ready) = *marks.lock().unwrap();
    eprintln!(
        "MEASURE first autoscaled client ready {:.1?}, both {:.1?}, all {SLEEPERS} sleepers \
         running {all_running:.1?} after the job was registered",
        first_ready.unwrap_or_default(),
        both_ready.unwrap_or_default(),
    );
    assert_eq!(placed.len(), 1 + QUOTA, "sleepers by node: {placed:?}");
    let scaled = c.autoscaled().await?;
    assert_eq!(scaled.len(), QUOTA, "{scaled:?}");
    assert!(scaled.iter().all(|s| s.state == "running"), "{scaled:?}");
    // The autoscaled containers are the nodes: their names are the nodes' names.
    let n = nodes(&api).await.unwrap_or_default();
    for s in &scaled {
        assert!(
            n.iter().any(|(name, status, class)| *name == s.name
                && status == "ready"
                && class == CLASS),
            "{s:?} has no ready node of class {CLASS}: {n:?}"
        );
    }
    // Demand persists (nothing more fits), but the quota holds: give the autoscaler a few
    // rounds to overstep it if it would.
    let more: Value = api
        .request(
            reqwest::Method::POST,
            "/v1/jobs",
            Some(&json!({ "Job": sleepers("more", 2) })),
        )
        .await?;
    assert!(more["EvalID"].is_string(), "{more}");
    let quota_held = wait_for(
        Duration::from_secs(10),
        "an autoscaled client beyond the quota",
        || {
            let c = &c;
            async move { (c.autoscaled().await.ok()?.len() > QUOTA).then_some(()) }
        },
    )
    .await;
    assert!(quota_held.is_err(), "the autoscaler went beyond its quota");

    // The leader's metrics tell the same story.
    let text = metrics_text(&api).await?;
    for (name, want) in [
        ("teamster_autoscaler_nodes_requested_total", QUOTA as f64),
        ("teamster_autoscaler_nodes_created_total", QUOTA as f64),
        ("teamster_autoscaler_nodes_failed_total", 0.0),
    ] {
        assert_eq!(counter(&text, name), want, "{name} on the first leader");
    }

    // The leader stops: the next one adopts the two clients (listed by their labels), and
    // neither replaces them nor adds a third while "more" still waits.
    let before: Vec<String> = c.autoscaled().await?.into_iter().map(|s| s.id).collect();
    c.stop(&c.servers[leader].name).await?;
    let others: Vec<usize> = (0..3).filter(|i| *i != leader).collect();
    let leader = c.wait_leader(&others, Duration::from_secs(30)).await?;
    let api = c.servers[leader].api();
    let changed = wait_for(
        Duration::from_secs(8),
        "the autoscaled clients changed under the new leader",
        || {
            let (c, before) = (&c, &before);
            async move {
                let now: Vec<String> = c
                    .autoscaled()
                    .await
                    .ok()?
                    .into_iter()
                    .map(|s| s.id)
                    .collect();
                (now != *before).then_some(now)
            }
        },
    )
    .await;
    assert!(
        changed.is_err(),
        "the new leader changed the clients: {changed:?}"
    );

    // The work ends: the autoscaled clients go idle, are cordoned, stopped and purged.
    let stopped_at = Instant::now();
    for job in ["wide", "more"] {
        api.request_text::<()>(reqwest::Method::DELETE, &format!("/v1/job/{job}"), None)
            .await?;
    }
    wait_for(
        Duration::from_secs(120),
        "the autoscaled clients removed",
        || {
            let (c, api) = (&c, api.clone());
            async move {
                let containers = c.autoscaled().await.ok()?;
                let n = nodes(&api).await?;
                let scaled_nodes = n.iter().filter(|(_, _, class)| class == CLASS).count();
                (containers.is_empty() && scaled_nodes == 0).then_some(())
            }
        },
    )
    .await?;
    eprintln!(
        "MEASURE autoscaled clients stopped and purged {:.1?} after the jobs were stopped \
         (idle_timeout 8s)",
        stopped_at.elapsed()
    );
    watching.cancel();
    watcher.await?;
    let (containers, scaled_nodes) = *most.lock().unwrap();
    assert_eq!(containers, QUOTA, "most autoscaled containers at once");
    assert_eq!(scaled_nodes, QUOTA, "most autoscaled nodes at once");
    // client1 is untouched.
    let n = nodes(&api).await.unwrap_or_default();
    assert!(
        n.iter()
            .any(|(name, status, _)| name == "client1" && status == "ready"),
        "{n:?}"
    );

    // The new leader created nothing and stopped both, as idle.
    let text = metrics_text(&api).await?;
    for (name, want) in [
        ("teamster_autoscaler_nodes_requested_total", 0.0),
        ("teamster_autoscaler_nodes_stopped_total", QUOTA as f64),
        ("teamster_autoscaler_nodes_failed_total", 0.0),
    ] {
        assert_eq!(counter(&text, name), want, "{name} on the new leader");
    }
    assert!(
        text.contains(
            "teamster_autoscaler_nodes_stopped_total{provider=\"docker\",reason=\"idle\"} 2"
        ),
        "stopped as idle: {}",
        text.lines()
            .filter(|l| l.contains("autoscaler"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    Ok(())
}
