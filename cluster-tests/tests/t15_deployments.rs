//! Deployments on a real 3-server cluster with real client agents running `raw_exec` tasks:
//! a rolling update of count 6 by `max_parallel = 2` never has more than 2 allocations of
//! the old version stopped ahead of healthy replacements and ends `successful`, also when
//! the leader is killed in the middle; a canary waits beside the old version until it is
//! promoted (with the CLI), then the rest roll; a bad version (tasks exit 1) fails its
//! deployment and auto-reverts to the stable version; a system job's canary takes half the
//! nodes until promoted.

use std::time::Duration;

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
    format!("{block}.{}", 100 + n)
}

/// A service job of `count` raw_exec tasks running `script`, rolled out by `update`.
fn service(id: &str, count: u32, script: &str, update: Value) -> Value {
    json!({
        "ID": id,
        "Type": "service",
        "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g",
            "Count": count,
            "Update": update,
            "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
            "ReschedulePolicy": {"Delay": SEC, "DelayFunction": "constant", "Unlimited": true},
            "Tasks": [{
                "Name": "t",
                "Driver": "raw_exec",
                "Config": {"command": "/bin/sh", "args": ["-c", script]},
                "KillTimeout": SEC,
                "Resources": {"CPU": 10, "MemoryMB": 10}
            }]
        }]
    })
}

/// A cluster of 3 servers and 2 ready clients.
async fn cluster() -> anyhow::Result<(ProcessCluster, Vec<ClientProcess>)> {
    let mut c = ProcessCluster::start(3, ClusterOptions::default())?;
    let leader = c.wait_leader(FORMATION).await?;
    let api = c.servers[leader].api();
    let rpcs: Vec<String> = c.servers.iter().map(|s| s.rpc_addr()).collect();
    let mut clients = Vec::new();
    for n in 1..=2u8 {
        let name = format!("client-{n}");
        clients.push(ClientProcess::start(
            c.dir(),
            &name,
            &client_ip(&c, n),
            &rpcs,
            "",
        )?);
    }
    for cl in &clients {
        let id = wait_for(Duration::from_secs(10), "node id", || async {
            cl.node_id().await
        })
        .await?;
        wait_node_status(&api, &id, "ready", Duration::from_secs(20)).await?;
    }
    Ok((c, clients))
}

/// The job's latest deployment, read from `api` (any server).
async fn deployment(api: &ApiClient, job: &str) -> Option<Value> {
    let d: Value = api
        .get(&format!("/v1/job/{job}/deployment?stale=true"))
        .await
        .ok()?;
    (!d.is_null()).then_some(d)
}

async fn wait_deployment(
    api: &ApiClient,
    job: &str,
    version: u64,
    status: &str,
    timeout: Duration,
) -> anyhow::Result<Value> {
    wait_for(
        timeout,
        &format!("{job} v{version} deployment {status}"),
        // Any of the job's deployments: a failed one may be followed by its revert's at once.
        || async {
            let all: Vec<Value> = api
                .get(&format!("/v1/job/{job}/deployments?stale=true"))
                .await
                .ok()?;
            all.into_iter()
                .find(|d| d["JobVersion"] == version && d["Status"] == status)
        },
    )
    .await
}

async fn allocs(api: &ApiClient, job: &str) -> Vec<Value> {
    api.get(&format!("/v1/job/{job}/allocations?stale=true"))
        .await
        .unwrap_or_default()
}

/// Samples the allocations until the version-`version` deployment ends `successful`,
/// asserting at each sample that old allocations still meant to run plus healthy new ones
/// are never fewer than `count - max_parallel`.
async fn watch_rollout(
    apis: &[ApiClient],
    job: &str,
    version: u64,
    count: usize,
    max_parallel: usize,
    timeout: Duration,
) -> anyhow::Result<usize> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut samples = 0;
    loop {
        for api in apis {
            let all = allocs(api, job).await;
            if all.is_empty() {
                continue;
            }
            let old_running = all
                .iter()
                .filter(|a| a["JobVersion"].as_u64() < Some(version) && a["DesiredStatus"] == "run")
                .count();
            let new_healthy = all
                .iter()
                .filter(|a| {
                    a["JobVersion"] == version
                        && a["DesiredStatus"] == "run"
                        && a["DeploymentStatus"]["Healthy"] == true
                })
                .count();
            assert!(
                old_running + new_healthy >= count - max_parallel,
                "{old_running} old running + {new_healthy} new healthy < {count} - {max_parallel}"
            );
            samples += 1;
            if let Some(d) = deployment(api, job).await {
                if d["JobVersion"] == version && d["Status"] == "successful" {
                    return Ok(samples);
                }
                assert_ne!(d["Status"], "failed", "{d}");
            }
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the v{version} deployment of {job} did not end within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn rolling(min_healthy: u64) -> Value {
    json!({
        "MaxParallel": 2,
        "MinHealthyTime": min_healthy * SEC,
        "HealthyDeadline": 30 * SEC,
        "ProgressDeadline": 60 * SEC,
    })
}

#[tokio::test]
async fn a_rolling_update_keeps_count_minus_max_parallel_and_survives_a_leader_kill(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let (mut c, _clients) = cluster().await?;
    let leader = c.wait_leader(FORMATION).await?;
    let api = c.servers[leader].api();
    register(&api, service("web", 6, "exec sleep 300", rolling(1))).await?;
    wait_deployment(&api, "web", 0, "successful", Duration::from_secs(60)).await?;
    let v0: Value = api.get("/v1/job/web").await?;
    assert_eq!(
        v0["Stable"], true,
        "a successful deployment makes its version stable"
    );

    // Version 1: a new task command, rolled two at a time.
    register(
        &api,
        service("web", 6, "echo v1; exec sleep 300", rolling(1)),
    )
    .await?;
    let apis: Vec<ApiClient> = c.servers.iter().map(|s| s.api()).collect();
    watch_rollout(&apis, "web", 1, 6, 2, Duration::from_secs(120)).await?;
    let all = allocs(&api, "web").await;
    let running_v1 = all
        .iter()
        .filter(|a| a["JobVersion"] == 1 && a["ClientStatus"] == "running")
        .count();
    assert_eq!(running_v1, 6);

    // Version 2, with a leader kill once the rollout is under way.
    register(
        &api,
        service("web", 6, "echo v2; exec sleep 300", rolling(2)),
    )
    .await?;
    wait_for(Duration::from_secs(30), "v2 under way", || async {
        allocs(&api, "web")
            .await
            .iter()
            .any(|a| a["JobVersion"] == 2 && a["ClientStatus"] == "running")
            .then_some(())
    })
    .await?;
    c.kill(leader);
    let new_leader = c.wait_leader(FORMATION).await?;
    assert_ne!(new_leader, leader);
    let apis: Vec<ApiClient> = c
        .servers
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leader)
        .map(|(_, s)| s.api())
        .collect();
    watch_rollout(&apis, "web", 2, 6, 2, Duration::from_secs(120)).await?;
    Ok(())
}

#[tokio::test]
async fn a_bad_version_fails_its_deployment_and_reverts_to_the_stable_one() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let (mut c, _clients) = cluster().await?;
    let leader = c.wait_leader(FORMATION).await?;
    let api = c.servers[leader].api();
    let update = json!({
        "MaxParallel": 1,
        "MinHealthyTime": SEC,
        "HealthyDeadline": 20 * SEC,
        "ProgressDeadline": 0,
        "AutoRevert": true,
    });
    register(&api, service("api", 2, "exec sleep 300", update.clone())).await?;
    wait_deployment(&api, "api", 0, "successful", Duration::from_secs(60)).await?;

    register(
        &api,
        service("api", 2, "echo broken; exit 1", update.clone()),
    )
    .await?;
    let failed = wait_deployment(&api, "api", 1, "failed", Duration::from_secs(60)).await?;
    let description = failed["StatusDescription"].as_str().unwrap_or_default();
    assert!(
        description.starts_with("Failed due to unhealthy allocations")
            && description.contains("rolling back to job version 0"),
        "{failed}"
    );
    // The revert is version 2 with version 0's spec; its deployment succeeds.
    wait_deployment(&api, "api", 2, "successful", Duration::from_secs(90)).await?;
    let job: Value = api.get("/v1/job/api").await?;
    assert_eq!(job["Version"], 2);
    assert_eq!(
        job["TaskGroups"][0]["Tasks"][0]["Config"]["args"][1],
        "exec sleep 300"
    );
    let running = allocs(&api, "api")
        .await
        .into_iter()
        .filter(|a| a["DesiredStatus"] == "run" && a["ClientStatus"] == "running")
        .collect::<Vec<_>>();
    assert_eq!(running.len(), 2, "{running:?}");
    assert!(running.iter().all(|a| a["JobVersion"] == 2));
    Ok(())
}

#[tokio::test]
async fn a_canary_waits_for_promotion_then_the_rest_roll() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let (mut c, _clients) = cluster().await?;
    let leader = c.wait_leader(FORMATION).await?;
    let api = c.servers[leader].api();
    let update = json!({
        "MaxParallel": 1,
        "Canary": 1,
        "MinHealthyTime": SEC,
        "HealthyDeadline": 30 * SEC,
        "ProgressDeadline": 60 * SEC,
    });
    register(&api, service("canary", 3, "exec sleep 300", update.clone())).await?;
    wait_deployment(&api, "canary", 0, "successful", Duration::from_secs(60)).await?;
    register(
        &api,
        service("canary", 3, "echo v1; exec sleep 300", update.clone()),
    )
    .await?;
    // The canary turns healthy; the deployment then waits for an operator.
    let waiting = wait_for(Duration::from_secs(60), "a healthy canary", || async {
        let d = deployment(&api, "canary").await?;
        (d["JobVersion"] == 1 && d["TaskGroups"]["g"]["HealthyAllocs"] == 1).then_some(d)
    })
    .await?;
    assert_eq!(
        waiting["StatusDescription"],
        "Deployment is running but requires manual promotion"
    );
    let all = allocs(&api, "canary").await;
    let old_running = all
        .iter()
        .filter(|a| a["JobVersion"] == 0 && a["DesiredStatus"] == "run")
        .count();
    assert_eq!(old_running, 3, "nothing old is stopped before promotion");
    let canaries: Vec<&Value> = all
        .iter()
        .filter(|a| a["JobVersion"] == 1 && a["DesiredStatus"] == "run")
        .collect();
    assert_eq!(canaries.len(), 1);
    assert_eq!(canaries[0]["DeploymentStatus"]["Canary"], true);

    // Promoted with the CLI, the rest roll one at a time.
    let id = waiting["ID"].as_str().unwrap_or_default().to_string();
    let out = std::process::Command::new(teamster_cluster_tests::process::teamster_bin())
        .args([
            "deployment",
            "promote",
            "-detach",
            "-address",
            &c.servers[leader].http_addr(),
            &id,
        ])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let apis = vec![api.clone()];
    watch_rollout(&apis, "canary", 1, 3, 1, Duration::from_secs(90)).await?;
    let running = allocs(&api, "canary")
        .await
        .into_iter()
        .filter(|a| a["DesiredStatus"] == "run")
        .collect::<Vec<_>>();
    assert_eq!(running.len(), 3);
    assert!(running.iter().all(|a| a["JobVersion"] == 1), "{running:?}");
    Ok(())
}

/// A system job's deployment (Nomad 1.11): the first version is tracked to healthy on both
/// nodes; a new one puts a canary on half of them (replacing the old allocation there) and
/// waits for promotion; promoted through the API, the other node follows once the canary's
/// deployment allows, and the deployment ends `successful`. Unblocking it (Nomad's
/// multiregion call) changes nothing while it runs and is refused once it ended.
#[tokio::test]
async fn a_system_job_canary_replaces_half_the_nodes_then_the_rest_after_promotion(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let (mut c, _clients) = cluster().await?;
    let leader = c.wait_leader(FORMATION).await?;
    let api = c.servers[leader].api();
    let update = json!({
        "MaxParallel": 1,
        "Canary": 50,
        "MinHealthyTime": SEC,
        "HealthyDeadline": 30 * SEC,
        "ProgressDeadline": 60 * SEC,
    });
    let system = |script: &str| {
        let mut job = service("node-agent", 1, script, update.clone());
        job["Type"] = json!("system");
        job["TaskGroups"][0]
            .as_object_mut()
            .expect("a group")
            .remove("ReschedulePolicy");
        job
    };
    register(&api, system("exec sleep 300")).await?;
    let d0 = wait_deployment(&api, "node-agent", 0, "successful", Duration::from_secs(60)).await?;
    assert_eq!(d0["TaskGroups"]["g"]["DesiredTotal"], 2);
    assert_eq!(d0["TaskGroups"]["g"]["HealthyAllocs"], 2);

    register(&api, system("echo v1; exec sleep 300")).await?;
    let waiting = wait_for(
        Duration::from_secs(60),
        "a healthy system canary",
        || async {
            let d = deployment(&api, "node-agent").await?;
            (d["JobVersion"] == 1 && d["TaskGroups"]["g"]["HealthyAllocs"] == 1).then_some(d)
        },
    )
    .await?;
    assert_eq!(
        waiting["StatusDescription"],
        "Deployment is running but requires manual promotion"
    );
    assert_eq!(waiting["TaskGroups"]["g"]["DesiredCanaries"], 1);
    let running: Vec<Value> = allocs(&api, "node-agent")
        .await
        .into_iter()
        .filter(|a| a["DesiredStatus"] == "run")
        .collect();
    assert_eq!(running.len(), 2, "one allocation per node: {running:?}");
    let canary: Vec<&Value> = running.iter().filter(|a| a["JobVersion"] == 1).collect();
    assert_eq!(canary.len(), 1, "{running:?}");
    assert_eq!(canary[0]["DeploymentStatus"]["Canary"], true);
    assert!(running
        .iter()
        .any(|a| a["JobVersion"] == 0 && a["NodeID"] != canary[0]["NodeID"]));

    let id = waiting["ID"].as_str().unwrap_or_default().to_string();
    // Unblocking is for multiregion deployments: an active one here has nothing to unblock
    // (Nomad's community edition answers an empty update), a finished one is refused.
    let path = format!("/v1/deployment/unblock/{id}");
    let body = json!({ "DeploymentID": id });
    let unblock = || api.request::<_, Value>(reqwest::Method::PUT, &path, Some(&body));
    let nothing = unblock().await?;
    assert_eq!(nothing["DeploymentModifyIndex"], 0, "{nothing}");
    let _: Value = api
        .request(
            reqwest::Method::PUT,
            &format!("/v1/deployment/promote/{id}"),
            Some(&json!({ "DeploymentID": id, "All": true })),
        )
        .await?;
    let done =
        wait_deployment(&api, "node-agent", 1, "successful", Duration::from_secs(60)).await?;
    assert_eq!(done["TaskGroups"]["g"]["HealthyAllocs"], 2);
    let refused = unblock()
        .await
        .expect_err("a finished deployment is not unblocked");
    assert!(
        refused
            .to_string()
            .contains("can't unblock terminal deployment"),
        "{refused}"
    );
    let running: Vec<Value> = allocs(&api, "node-agent")
        .await
        .into_iter()
        .filter(|a| a["DesiredStatus"] == "run")
        .collect();
    assert_eq!(running.len(), 2);
    assert!(running.iter().all(|a| a["JobVersion"] == 1), "{running:?}");
    Ok(())
}
