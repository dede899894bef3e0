//! Node drains end to end (a server, two real client agents, raw_exec tasks): the leader's
//! node drainer migrates a service job off the drained node `max_parallel` at a time, leaves
//! a batch job running until the drain's deadline, stops what is left then, and ends the
//! drain as complete (`LastDrain.Status` "complete", `DrainStrategy` null, the node still
//! ineligible).
//!
//! Deterministic without client health reports: the service group's `migrate` block asks
//! for 60 s of `min_healthy_time`, far beyond the 5 s deadline, so no replacement is
//! reported healthy during the test (whether or not the client reports health): exactly one
//! allocation (max_parallel) migrates early, the rest at the deadline.

use std::cell::Cell;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use teamster::api::ApiClient;
use teamster_cluster_tests::api::register;
use teamster_cluster_tests::client_process::{wait_node_status, ClientProcess};
use teamster_cluster_tests::process::{ClusterOptions, ProcessCluster};
use teamster_cluster_tests::wait_for;

const FORMATION: Duration = Duration::from_secs(30);
const SEC: u64 = 1_000_000_000;

fn client_ip(c: &ProcessCluster, n: u8) -> String {
    let ip = &c.servers[0].ip;
    let (block, _) = ip.rsplit_once('.').expect("an IPv4 address");
    format!("{block}.{}", 120 + n)
}

fn raw_exec_job(id: &str, job_type: &str, count: u32, group_extra: Value) -> Value {
    let mut group = json!({
        "Name": "g",
        "Count": count,
        "Tasks": [{
            "Name": "t",
            "Driver": "raw_exec",
            "Config": {"command": "/bin/sh", "args": ["-c", "exec sleep 600"]},
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

async fn job_allocs(api: &ApiClient, job: &str) -> Vec<Value> {
    api.get(&format!("/v1/job/{job}/allocations"))
        .await
        .unwrap_or_default()
}

async fn node_allocs(api: &ApiClient, node: &str) -> Vec<Value> {
    api.get(&format!("/v1/node/{node}/allocations"))
        .await
        .unwrap_or_default()
}

async fn set_eligibility(api: &ApiClient, node: &str, value: &str) -> anyhow::Result<()> {
    api.request::<Value, Value>(
        reqwest::Method::PUT,
        &format!("/v1/node/{node}/eligibility"),
        Some(&json!({"Eligibility": value})),
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_drain_migrates_by_max_parallel_stops_the_rest_at_the_deadline_and_completes(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let mut c = ProcessCluster::start(1, ClusterOptions::default())?;
    let leader = c.wait_leader(FORMATION).await?;
    let api = c.servers[leader].api();
    let rpc = c.servers[leader].rpc_addr();
    let clients = [
        ClientProcess::start(
            c.dir(),
            "client-a",
            &client_ip(&c, 1),
            std::slice::from_ref(&rpc),
            "",
        )?,
        ClientProcess::start(
            c.dir(),
            "client-b",
            &client_ip(&c, 2),
            std::slice::from_ref(&rpc),
            "",
        )?,
    ];
    let mut ids = Vec::new();
    for cl in &clients {
        let id = wait_for(Duration::from_secs(10), "node id", || async {
            cl.node_id().await
        })
        .await?;
        wait_node_status(&api, &id, "ready", Duration::from_secs(15)).await?;
        ids.push(id);
    }
    let (a, b) = (ids[0].clone(), ids[1].clone());
    // Everything starts on a.
    set_eligibility(&api, &b, "ineligible").await?;
    let migrate = json!({"Migrate": {
        "MaxParallel": 1,
        "HealthCheck": "task_states",
        "MinHealthyTime": 60 * SEC,
        "HealthyDeadline": 300 * SEC
    }});
    register(&api, raw_exec_job("web", "service", 3, migrate)).await?;
    register(&api, raw_exec_job("report", "batch", 1, json!({}))).await?;
    for job in ["web", "report"] {
        wait_for(
            Duration::from_secs(30),
            &format!("{job} running on a"),
            || async {
                let allocs = job_allocs(&api, job).await;
                let want = if job == "web" { 3 } else { 1 };
                (allocs.len() == want
                    && allocs
                        .iter()
                        .all(|x| x["ClientStatus"] == "running" && x["NodeID"] == a.as_str()))
                .then_some(())
            },
        )
        .await?;
    }
    let originals: Vec<String> = job_allocs(&api, "web")
        .await
        .iter()
        .map(|x| x["ID"].as_str().unwrap_or_default().to_string())
        .collect();
    set_eligibility(&api, &b, "eligible").await?;

    // Drain a with a 5 s deadline.
    let started = Instant::now();
    let answer: Value = api
        .request(
            reqwest::Method::PUT,
            &format!("/v1/node/{a}/drain"),
            Some(&json!({
                "NodeID": a,
                "DrainSpec": {"Deadline": 5 * SEC, "IgnoreSystemJobs": false},
                "Meta": {"reason": "kernel upgrade"}
            })),
        )
        .await?;
    assert!(answer["Index"].as_u64().unwrap_or(0) > 0, "{answer}");
    let n: Value = api.get(&format!("/v1/node/{a}")).await?;
    assert_eq!(n["LastDrain"]["Status"], "draining", "{n}");
    assert_eq!(n["LastDrain"]["Meta"]["reason"], "kernel upgrade", "{n}");
    assert_eq!(n["SchedulingEligibility"], "ineligible");

    // Before the deadline (with a second of margin): at most max_parallel originals marked,
    // and the batch allocation left alone; one migration seen.
    let max_marked_early = Cell::new(0);
    let batch_marked_early = Cell::new(false);
    let (api, originals, a, b) = (&api, &originals, &a, &b);
    let (max_cell, batch_cell) = (&max_marked_early, &batch_marked_early);
    let done = wait_for(
        Duration::from_secs(60),
        "the drain complete and web on b",
        || async move {
            let web = job_allocs(api, "web").await;
            let report = job_allocs(api, "report").await;
            if started.elapsed() < Duration::from_secs(4) {
                // (Allocation stubs carry no DesiredTransition: read the node's allocations.)
                let on_a = node_allocs(api, a).await;
                let marked = on_a
                    .iter()
                    .filter(|x| {
                        originals.contains(&x["ID"].as_str().unwrap_or_default().to_string())
                            && x["DesiredTransition"]["Migrate"] == true
                    })
                    .count();
                max_cell.set(max_cell.get().max(marked));
                if on_a
                    .iter()
                    .any(|x| x["JobID"] == "report" && x["DesiredTransition"]["Migrate"] == true)
                {
                    batch_cell.set(true);
                }
                return None;
            }
            let n: Value = api.get(&format!("/v1/node/{a}")).await.ok()?;
            let on_b = web
                .iter()
                .filter(|x| {
                    x["NodeID"] == b.as_str()
                        && x["DesiredStatus"] == "run"
                        && x["ClientStatus"] == "running"
                })
                .count();
            let left_on_a = web
                .iter()
                .chain(report.iter())
                .filter(|x| {
                    x["NodeID"] == a.as_str()
                        && !matches!(
                            x["ClientStatus"].as_str(),
                            Some("complete" | "failed" | "lost")
                        )
                })
                .count();
            (n["LastDrain"]["Status"] == "complete" && on_b == 3 && left_on_a == 0).then_some(n)
        },
    )
    .await?;
    assert_eq!(
        max_marked_early.get(),
        1,
        "exactly max_parallel allocation migrates before the deadline"
    );
    assert!(
        !batch_marked_early.get(),
        "the batch allocation runs until the deadline"
    );
    assert!(done["DrainStrategy"].is_null(), "{done}");
    assert_eq!(done["Drain"], false);
    assert_eq!(done["SchedulingEligibility"], "ineligible");
    assert_eq!(done["LastDrain"]["Meta"]["reason"], "kernel upgrade");
    // The batch allocation was stopped at the deadline and replaced on b.
    let on_a = node_allocs(api, a).await;
    assert!(
        on_a.iter()
            .any(|x| x["JobID"] == "report" && x["DesiredTransition"]["Migrate"] == true),
        "{on_a:?}"
    );
    let report = job_allocs(api, "report").await;
    assert!(
        report
            .iter()
            .any(|x| x["NodeID"] == b.as_str() && x["DesiredStatus"] == "run"),
        "the batch allocation is replaced on b: {report:?}"
    );
    Ok(())
}
