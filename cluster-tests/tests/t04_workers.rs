//! Scheduler workers on real processes: the leader pauses three quarters of its workers and a
//! follower none; the pause set follows leadership across a failover and a restart, and the
//! pool is resized in place through the API and by SIGHUP; bad bodies change nothing.

use std::time::Duration;

use serde_json::{json, Value};
use teamster::api::ApiClient;
use teamster_cluster_tests::process::{teamster_bin, ClusterOptions, ProcessCluster};
use teamster_cluster_tests::wait_for;

const FORMATION: Duration = Duration::from_secs(30);
const SETTLE: Duration = Duration::from_secs(15);

/// (paused, started, total) workers as the server reports them.
async fn worker_counts(api: &ApiClient) -> Option<(usize, usize, usize)> {
    let v: Value = api.get("/v1/agent/schedulers").await.ok()?;
    let list = v["schedulers"].as_array()?;
    let count = |s: &str| list.iter().filter(|w| w["status"] == s).count();
    Some((count("Paused"), count("Started"), list.len()))
}

/// Wait until server `i` reports exactly `want` = (paused, started, total).
async fn wait_counts(
    c: &ProcessCluster,
    i: usize,
    want: (usize, usize, usize),
) -> anyhow::Result<()> {
    let api = c.servers[i].api();
    wait_for(
        SETTLE,
        &format!(
            "{} to report (paused, started, total) = {want:?}",
            c.servers[i].name
        ),
        || {
            let api = api.clone();
            async move { (worker_counts(&api).await? == want).then_some(()) }
        },
    )
    .await
}

/// A raw request: (status, body).
async fn raw(method: reqwest::Method, url: &str, body: &str) -> anyhow::Result<(u16, String)> {
    let r = reqwest::Client::new()
        .request(method, url)
        .body(body.to_string())
        .send()
        .await?;
    let status = r.status().as_u16();
    Ok((status, r.text().await?))
}

#[tokio::test]
async fn the_leader_pauses_three_quarters_of_its_workers_and_the_pause_set_follows_leadership(
) -> anyhow::Result<()> {
    let options = ClusterOptions {
        server_toml: "num_schedulers = 4\n".into(),
        ..ClusterOptions::default()
    };
    let mut c = ProcessCluster::start(3, options)?;
    let leader = c.wait_leader(FORMATION).await?;

    // The leader: exactly 3 paused, 1 running; the followers: none paused.
    wait_counts(&c, leader, (3, 1, 4)).await?;
    for i in (0..3).filter(|&i| i != leader) {
        wait_counts(&c, i, (0, 4, 4)).await?;
    }
    let info: Value = c.servers[leader].api().get("/v1/agent/schedulers").await?;
    assert_eq!(
        info["server_id"],
        format!("{}.global", c.servers[leader].name)
    );
    let first = &info["schedulers"][0];
    assert_eq!(first["workload_status"], "Paused");
    assert_eq!(
        first["enabled_schedulers"],
        json!(["service", "batch", "system", "sysbatch", "_core"])
    );
    assert!(first["started"].as_str().unwrap_or("").ends_with('Z'));
    // The paused ones are the first three.
    let statuses: Vec<&str> = info["schedulers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["status"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(statuses, ["Paused", "Paused", "Paused", "Started"]);

    // Kill the leader: the new leader pauses 3; the old one, restarted, is a follower with 0.
    c.kill(leader);
    let new_leader = c.wait_leader(FORMATION).await?;
    wait_counts(&c, new_leader, (3, 1, 4)).await?;
    c.restart(leader)?;
    wait_counts(&c, leader, (0, 4, 4)).await?;
    let new_leader = c.wait_leader(FORMATION).await?;
    wait_counts(&c, new_leader, (3, 1, 4)).await?;

    // Resize in place through the API: 8 workers, 6 paused on the leader.
    let api = c.servers[new_leader].api();
    let before: Value = api.get("/v1/agent/schedulers").await?;
    let answer: Value = api
        .request(
            reqwest::Method::PUT,
            "/v1/agent/schedulers/config",
            Some(&json!({
                "num_schedulers": 8,
                "enabled_schedulers": ["service", "batch", "system", "sysbatch", "_core"],
            })),
        )
        .await?;
    assert_eq!(answer["num_schedulers"], 8);
    assert_eq!(
        answer["server_id"],
        format!("{}.global", c.servers[new_leader].name)
    );
    wait_counts(&c, new_leader, (6, 2, 8)).await?;
    let after: Value = api.get("/v1/agent/schedulers").await?;
    for k in 0..4 {
        assert_eq!(
            after["schedulers"][k]["id"], before["schedulers"][k]["id"],
            "growing keeps the existing workers"
        );
    }

    // Bad bodies: 400 with the reason, and nothing changes.
    let url = format!(
        "{}/v1/agent/schedulers/config",
        c.servers[new_leader].http_addr()
    );
    for (body, reason) in [
        (
            r#"{"num_schedulers": 300, "enabled_schedulers": ["_core"]}"#,
            "num_schedulers",
        ),
        (
            r#"{"num_schedulers": -1, "enabled_schedulers": ["_core"]}"#,
            "Invalid request",
        ),
        (
            r#"{"num_schedulers": 2, "enabled_schedulers": ["service"]}"#,
            "_core",
        ),
        (
            r#"{"num_schedulers": 2, "enabled_schedulers": ["_core", "cron"]}"#,
            "cron",
        ),
        (r#"{"enabled_schedulers": ["_core"]}"#, "num_schedulers"),
        ("not json", "Invalid request"),
        ("", "Invalid request"),
    ] {
        let (status, text) = raw(reqwest::Method::PUT, &url, body).await?;
        assert_eq!(status, 400, "{body:?} → {status} {text}");
        assert!(text.contains(reason), "{body:?} → {text}");
    }
    let (status, _) = raw(reqwest::Method::DELETE, &url, "").await?;
    assert_eq!(status, 405);
    let conf: Value = api.get("/v1/agent/schedulers/config").await?;
    assert_eq!(conf["num_schedulers"], 8);
    assert_eq!(worker_counts(&api).await, Some((6, 2, 8)));

    // SIGHUP re-reads the config file: 2 workers, 1 paused.
    let path = c.servers[new_leader].config_path().to_path_buf();
    let text = std::fs::read_to_string(&path)?;
    std::fs::write(
        &path,
        text.replace("num_schedulers = 4", "num_schedulers = 2"),
    )?;
    c.reload(new_leader)?;
    wait_counts(&c, new_leader, (1, 1, 2)).await?;

    // The CLI: set-workers, then workers.
    let address = c.servers[new_leader].http_addr();
    let cli = |args: &[&str]| {
        std::process::Command::new(teamster_bin())
            .args(args)
            .args(["--address", &address])
            .output()
    };
    let out = cli(&[
        "operator",
        "scheduler",
        "set-workers",
        "--num-schedulers",
        "3",
    ])?;
    assert!(out.status.success(), "{out:?}");
    wait_counts(&c, new_leader, (2, 1, 3)).await?;
    let out = cli(&["operator", "scheduler", "workers", "--json"])?;
    assert!(out.status.success(), "{out:?}");
    let listed: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(listed["schedulers"].as_array().map(Vec::len), Some(3));
    let out = cli(&[
        "operator",
        "scheduler",
        "set-workers",
        "--num-schedulers",
        "999",
    ])?;
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("num_schedulers"));
    Ok(())
}
