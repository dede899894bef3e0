//! Backups on real processes: `teamster operator snapshot save` → change the state →
//! `operator snapshot restore` → every server holds exactly the saved state, keeps it across
//! a restart, and accepts new writes at higher indexes. Bad files are refused with a clear
//! error and change nothing.

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use teamster::api::ApiClient;
use teamster_cluster_tests::api::{register, small_job};
use teamster_cluster_tests::process::{teamster_bin, ClusterOptions, ProcessCluster};
use teamster_cluster_tests::wait_for;

const FORMATION: Duration = Duration::from_secs(30);

/// Every job's spec and indexes on one server, read from its local state. Statuses and
/// summaries are left out: schedulers may move them after a restore.
async fn state_of(api: &ApiClient) -> Option<Value> {
    let stubs: Vec<Value> = api.get("/v1/jobs?stale=true").await.ok()?;
    let mut jobs = Vec::new();
    for s in &stubs {
        let id = s["ID"].as_str()?;
        let job: Value = api.get(&format!("/v1/job/{id}?stale=true")).await.ok()?;
        jobs.push(json!({
            "ID": job["ID"],
            "Version": job["Version"],
            "CreateIndex": job["CreateIndex"],
            "JobModifyIndex": job["JobModifyIndex"],
            "SubmitTime": job["SubmitTime"],
            "TaskGroups": job["TaskGroups"],
        }));
    }
    Some(Value::Array(jobs))
}

/// Run the CLI; its stdout on success, or stderr on failure.
fn cli(args: &[&str]) -> Result<String, String> {
    let out = Command::new(teamster_bin())
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[tokio::test]
async fn a_restored_snapshot_replaces_the_state_on_every_server() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let mut c = ProcessCluster::start(3, ClusterOptions::default())?;
    let leader = c.wait_leader(FORMATION).await?;
    let follower = (leader + 1) % 3;
    let leader_api = c.servers[leader].api();

    for i in 0..20 {
        register(&leader_api, small_job(&format!("saved-{i:02}"))).await?;
    }
    let file = c.dir().join("backup.snap");
    let file_arg = file.display().to_string();
    // Saved through a follower: the save is consistent (it waits for the leader's index).
    let out = cli(&[
        "operator",
        "snapshot",
        "save",
        "--address",
        &c.servers[follower].http_addr(),
        &file_arg,
    ])
    .map_err(anyhow::Error::msg)?;
    assert!(out.starts_with("Saved snapshot of index "), "{out}");
    let saved = state_of(&leader_api).await.expect("the leader's state");
    assert_eq!(saved.as_array().map(Vec::len), Some(20));
    let size = std::fs::metadata(&file)?.len();
    assert!(size > 0);
    assert!(!c.dir().join("backup.snap.tmp").exists());

    // Change the state: new jobs and a changed saved job.
    for i in 0..5 {
        register(&leader_api, small_job(&format!("later-{i}"))).await?;
    }
    let mut changed = small_job("saved-03");
    changed["TaskGroups"][0]["Count"] = json!(4);
    register(&leader_api, changed).await?;
    assert_ne!(state_of(&leader_api).await, Some(saved.clone()));

    // A file that is not a snapshot is refused, names the problem, and changes nothing.
    let junk = c.dir().join("junk.snap");
    std::fs::write(&junk, b"definitely not a snapshot")?;
    let err = cli(&[
        "operator",
        "snapshot",
        "restore",
        "--address",
        &c.servers[follower].http_addr(),
        &junk.display().to_string(),
    ])
    .expect_err("a junk file must be refused");
    assert!(err.contains("invalid snapshot"), "{err}");
    assert!(err.contains("HTTP 400"), "{err}");
    let stubs: Vec<Value> = leader_api.get("/v1/jobs").await?;
    assert_eq!(stubs.len(), 25);

    // Restore through a follower (forwarded to the leader, committed through raft).
    let restored_at_least = {
        let v: Value = leader_api.get("/v1/agent/self").await?;
        v["stats"]["raft"]["applied_index"]
            .as_str()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let out = cli(&[
        "operator",
        "snapshot",
        "restore",
        "--address",
        &c.servers[follower].http_addr(),
        &file_arg,
    ])
    .map_err(anyhow::Error::msg)?;
    assert!(out.starts_with("Restored the snapshot of index "), "{out}");
    let restore_index: u64 = out
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|s| s.parse().ok())
        .expect("the restore index");
    assert!(restore_index > restored_at_least, "{out}");

    for s in &c.servers {
        let api = s.api();
        let want = saved.clone();
        wait_for(
            Duration::from_secs(10),
            &format!("{} to hold the saved state", s.name),
            || {
                let api = api.clone();
                let want = want.clone();
                async move { (state_of(&api).await? == want).then_some(()) }
            },
        )
        .await?;
    }

    // Indexes keep growing after a restore: a new write lands above it.
    let after = register(&leader_api, small_job("after-restore")).await?;
    assert!(after > restore_index, "{after} <= {restore_index}");

    // Durable: a restarted server comes back with the restored state plus the new job.
    let want: Vec<String> = {
        let stubs: Vec<Value> = leader_api.get("/v1/jobs").await?;
        stubs
            .iter()
            .filter_map(|s| s["ID"].as_str().map(str::to_string))
            .collect()
    };
    assert_eq!(want.len(), 21);
    c.restart(follower)?;
    let api = c.servers[follower].api();
    wait_for(
        Duration::from_secs(20),
        "the restarted server to hold the restored state",
        || {
            let api = api.clone();
            let want = want.clone();
            async move {
                let ids = teamster_cluster_tests::api::job_ids_stale(&api)
                    .await
                    .ok()?;
                (ids == want).then_some(())
            }
        },
    )
    .await?;
    let job: Value = api.get("/v1/job/saved-03?stale=true").await?;
    assert_eq!(job["TaskGroups"][0]["Count"], json!(1));
    Ok(())
}

#[tokio::test]
async fn snapshot_requests_are_checked() -> anyhow::Result<()> {
    let mut c = ProcessCluster::start(1, ClusterOptions::default())?;
    c.wait_leader(FORMATION).await?;
    let base = c.servers[0].http_addr();
    let http = reqwest::Client::new();

    let empty = http
        .put(format!("{base}/v1/operator/snapshot"))
        .send()
        .await?;
    assert_eq!(empty.status(), 400);
    assert!(empty.text().await?.contains("Request body is empty"));

    let saved = http
        .get(format!("{base}/v1/operator/snapshot"))
        .send()
        .await?;
    assert_eq!(saved.status(), 200);
    let index: u64 = saved.headers()["X-Nomad-Index"].to_str()?.parse()?;
    assert!(index > 0);
    let mut bytes = saved.bytes().await?.to_vec();
    // A truncated image is refused before it reaches the log.
    bytes.truncate(bytes.len() - 1);
    let bad = http
        .put(format!("{base}/v1/operator/snapshot"))
        .body(bytes)
        .send()
        .await?;
    assert_eq!(bad.status(), 400);
    assert!(bad.text().await?.contains("invalid snapshot"));
    Ok(())
}
