//! Scheduling beyond placement, end to end on `teamster agent --dev` with real raw_exec
//! processes:
//!
//! - Preemption: with the service scheduler's preemption turned on (`operator scheduler
//!   set-config`), a high-priority job on a node full of a low-priority job's allocations
//!   evicts one of them (`job plan` shows it first); the client stops the evicted task; the
//!   low-priority job's preemption evaluation blocks for lack of room; when the
//!   high-priority job stops, the low-priority job is whole again.
//! - Delay scheduling by locality: a group whose first level no node satisfies waits, and
//!   its allocation is created once that level's wait has passed (through the broker's
//!   delayed `locality-wait` evaluation), not before; a group whose first level the node
//!   satisfies is placed at once.

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use teamster::api::ApiClient;
use teamster_cluster_tests::api::register;
use teamster_cluster_tests::dev::{dev_ip_at, Killed};
use teamster_cluster_tests::process::teamster_bin;
use teamster_cluster_tests::wait_for;

const WAIT: Duration = Duration::from_secs(30);

/// The dev agent on `ip` and its node, once ready.
async fn dev_agent(
    ip: &str,
    log: &tempfile::NamedTempFile,
) -> anyhow::Result<(Killed, ApiClient, Value)> {
    let (agent, api) = teamster_cluster_tests::dev::dev_agent(ip, log).await?;
    let nodes: Vec<Value> = api.get("/v1/nodes").await?;
    let id = nodes[0]["ID"].as_str().unwrap_or_default().to_string();
    let node: Value = api.get(&format!("/v1/node/{id}")).await?;
    Ok((agent, api, node))
}

async fn allocs(api: &ApiClient, job: &str) -> Vec<Value> {
    api.get(&format!("/v1/job/{job}/allocations"))
        .await
        .unwrap_or_default()
}

fn cli(addr: &str, args: &[&str]) -> anyhow::Result<(Option<i32>, String)> {
    let out = Command::new(teamster_bin())
        .args(args)
        .env("NOMAD_ADDR", addr)
        .output()?;
    Ok((
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

#[tokio::test]
async fn a_high_priority_job_evicts_a_low_priority_allocation_and_gives_the_room_back(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let ip = dev_ip_at(21);
    let addr = format!("http://{ip}:4646");
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api, node) = dev_agent(&ip, &log).await?;
    let capacity = node["NodeResources"]["Cpu"]["CpuShares"]
        .as_u64()
        .unwrap_or(0)
        - node["ReservedResources"]["Cpu"]["CpuShares"]
            .as_u64()
            .unwrap_or(0);
    let half = capacity / 2;
    assert!(half >= 100, "the dev node offers {capacity} MHz");

    // Service jobs do not preempt by default; the operator turns it on.
    let (code, out) = cli(
        &addr,
        &[
            "operator",
            "scheduler",
            "set-config",
            "-preempt-service-scheduler=true",
        ],
    )?;
    assert_eq!(code, Some(0), "{out}");
    let (_, out) = cli(&addr, &["operator", "scheduler", "get-config"])?;
    assert!(
        out.contains("Preemption Service Scheduler  = true"),
        "{out}"
    );

    // The low-priority job fills the node's CPU with two sleepers.
    let sleeper = |id: &str, priority: u32, count: u32| {
        json!({
            "ID": id, "Type": "service", "Priority": priority, "Datacenters": ["dc1"],
            "TaskGroups": [{
                "Name": "g", "Count": count,
                "Tasks": [{
                    "Name": "t", "Driver": "raw_exec",
                    "Config": {"command": "/bin/sh", "args": ["-c", "sleep 600"]},
                    "KillTimeout": 1_000_000_000u64,
                    "Resources": {"CPU": half, "MemoryMB": 10}
                }]
            }]
        })
    };
    register(&api, sleeper("low", 30, 2)).await?;
    wait_for(WAIT, "both low-priority sleepers running", || async {
        let a = allocs(&api, "low").await;
        (a.iter().filter(|a| a["ClientStatus"] == "running").count() == 2).then_some(())
    })
    .await?;

    // `job plan` shows the eviction before anything happens.
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("high.json");
    std::fs::write(&file, json!({"Job": sleeper("high", 80, 1)}).to_string())?;
    let file = file.display().to_string();
    let (code, out) = cli(&addr, &["job", "plan", &file])?;
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("Preemptions:") && out.contains("low") && out.contains("default"),
        "{out}"
    );
    assert_eq!(
        allocs(&api, "low")
            .await
            .iter()
            .filter(|a| a["DesiredStatus"] == "run")
            .count(),
        2,
        "a plan evicts nothing"
    );

    let (code, out) = cli(&addr, &["job", "run", "-detach", &file])?;
    assert_eq!(code, Some(0), "{out}");
    let high = wait_for(WAIT, "the high-priority job running", || async {
        let a = allocs(&api, "high").await.into_iter().next()?;
        (a["ClientStatus"] == "running").then_some(a)
    })
    .await?;
    let high_id = high["ID"].as_str().unwrap_or_default().to_string();
    let high: Value = api.get(&format!("/v1/allocation/{high_id}")).await?;
    let preempted = high["PreemptedAllocations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(preempted.len(), 1, "{high}");
    let victim_id = preempted[0].as_str().unwrap_or_default().to_string();
    // The client stops the evicted task; the survivor keeps running.
    let victim = wait_for(WAIT, "the evicted allocation stopped", || async {
        let a: Value = api.get(&format!("/v1/allocation/{victim_id}")).await.ok()?;
        (a["ClientStatus"] == "complete").then_some(a)
    })
    .await?;
    assert_eq!(victim["JobID"], "low");
    assert_eq!(victim["DesiredStatus"], "evict");
    assert_eq!(victim["PreemptedByAllocation"], high_id.as_str());
    assert_eq!(
        victim["DesiredDescription"],
        format!("Preempted by alloc ID {high_id}")
    );
    // The low job was told (a preemption evaluation) and waits for room (blocked).
    wait_for(
        WAIT,
        "the low job's preemption evaluation blocked",
        || async {
            let evals: Vec<Value> = api.get("/v1/job/low/evaluations").await.ok()?;
            let preemption = evals.iter().any(|e| e["TriggeredBy"] == "preemption");
            let blocked = evals.iter().any(|e| e["Status"] == "blocked");
            (preemption && blocked).then_some(())
        },
    )
    .await?;
    let running_low = |a: &Vec<Value>| {
        a.iter()
            .filter(|a| a["DesiredStatus"] == "run" && a["ClientStatus"] == "running")
            .count()
    };
    assert_eq!(running_low(&allocs(&api, "low").await), 1);

    // The high-priority job stops: the low one gets its room back.
    let (code, out) = cli(&addr, &["job", "stop", "high"])?;
    assert_eq!(code, Some(0), "{out}");
    wait_for(WAIT, "the low job whole again", || async {
        (running_low(&allocs(&api, "low").await) == 2).then_some(())
    })
    .await?;
    Ok(())
}

/// A batch sleeper whose group prefers nodes satisfying `level` for `wait_secs`.
fn local_sleeper(id: &str, level: Value) -> Value {
    json!({
        "ID": id, "Type": "batch", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g", "Count": 1,
            "Locality": {"Levels": [level]},
            "Tasks": [{
                "Name": "t", "Driver": "raw_exec",
                "Config": {"command": "/bin/sh", "args": ["-c", "sleep 600"]},
                "KillTimeout": 1_000_000_000u64,
                "Resources": {"CPU": 10, "MemoryMB": 10}
            }]
        }]
    })
}

#[tokio::test]
async fn a_locality_wait_places_at_its_deadline_and_a_match_at_once() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let ip = dev_ip_at(22);
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api, _node) = dev_agent(&ip, &log).await?;
    let wait_ns: i64 = 3_000_000_000;

    // No node has the input cached: the allocation waits out the first level's 3 s.
    register(
        &api,
        local_sleeper(
            "far",
            json!({"LTarget": "${meta.cache}", "Operand": "set_contains",
                   "RTarget": "input-1", "Wait": wait_ns}),
        ),
    )
    .await?;
    let job: Value = api.get("/v1/job/far").await?;
    let submitted = job["SubmitTime"].as_i64().unwrap_or(0);
    let alloc = wait_for(WAIT, "the waiting allocation placed", || async {
        allocs(&api, "far").await.into_iter().next()
    })
    .await?;
    let created = alloc["CreateTime"].as_i64().unwrap_or(0);
    assert!(
        created >= submitted + wait_ns,
        "placed {} ms after submission, before its 3 s wait",
        (created - submitted) / 1_000_000
    );
    // The plan commits before the worker acks, so the widening evaluation
    // reaches `complete` a moment after the allocation appears.
    let evals = wait_for(WAIT, "the locality-wait evaluation complete", || async {
        let evals: Vec<Value> = api.get("/v1/job/far/evaluations").await.ok()?;
        let done = evals
            .iter()
            .any(|e| e["TriggeredBy"] == "locality-wait" && e["Status"] == "complete");
        done.then_some(evals)
    })
    .await?;
    let register_eval = evals
        .iter()
        .find(|e| e["TriggeredBy"] == "job-register")
        .expect("the register evaluation");
    assert_eq!(
        register_eval["QueuedAllocations"]["g"], 1,
        "{register_eval}"
    );

    // The node satisfies the first level: placed without waiting.
    register(
        &api,
        local_sleeper(
            "near",
            json!({"LTarget": "${node.datacenter}", "Operand": "=", "RTarget": "dc1",
                   "Wait": 60_000_000_000i64}),
        ),
    )
    .await?;
    let job: Value = api.get("/v1/job/near").await?;
    let submitted = job["SubmitTime"].as_i64().unwrap_or(0);
    let alloc = wait_for(WAIT, "the matching allocation placed", || async {
        allocs(&api, "near").await.into_iter().next()
    })
    .await?;
    let created = alloc["CreateTime"].as_i64().unwrap_or(0);
    assert!(
        created - submitted < 30_000_000_000,
        "placed {} ms after submission",
        (created - submitted) / 1_000_000
    );
    let evals: Vec<Value> = api.get("/v1/job/near/evaluations").await?;
    assert!(evals.iter().all(|e| e["TriggeredBy"] != "locality-wait"));

    // A wait over an hour is refused, naming it, and nothing is registered.
    let e = register(
        &api,
        local_sleeper(
            "slow",
            json!({"LTarget": "${meta.cache}", "Operand": "=", "RTarget": "x",
                   "Wait": 7_200_000_000_000i64}),
        ),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("400") && e.contains("locality level 1: wait"),
        "{e}"
    );
    assert!(api.get::<Value>("/v1/job/slow").await.is_err());
    Ok(())
}
