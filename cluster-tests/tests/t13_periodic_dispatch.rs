//! Periodic and parameterized jobs end to end, on real server and client processes:
//! a forced launch runs its child on a client; a dispatch's payload lands in the task's
//! `local/` directory and its meta in `NOMAD_META_*`; an idempotency token answers the
//! same child; bad input is refused with a 400 naming the problem and writes nothing; the
//! CLI's `job periodic force`, `job dispatch` and `job status` of a parent; and a leader
//! killed one second before a launch time leaves exactly one child for that time.

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use teamster::api::{ApiClient, ApiError};
use teamster_cluster_tests::api::register;
use teamster_cluster_tests::client_process::{wait_node_status, ClientProcess};
use teamster_cluster_tests::process::{teamster_bin, ClusterOptions, ProcessCluster};
use teamster_cluster_tests::wait_for;

const FORMATION: Duration = Duration::from_secs(30);

fn client_ip(c: &ProcessCluster, n: u8) -> String {
    let ip = &c.servers[0].ip;
    let (block, _) = ip.rsplit_once('.').expect("an IPv4 address");
    format!("{block}.{}", 100 + n)
}

/// Percent-encoding of a job ID in a path (children's IDs hold a `/`).
fn enc(id: &str) -> String {
    id.replace('/', "%2F")
}

fn batch_job(id: &str, task: Value) -> Value {
    json!({
        "ID": id,
        "Type": "batch",
        "Datacenters": ["dc1"],
        "TaskGroups": [{ "Name": "g", "Count": 1, "Tasks": [task] }]
    })
}

fn sh_task(name: &str, script: &str) -> Value {
    json!({
        "Name": name,
        "Driver": "raw_exec",
        "Config": { "command": "/bin/sh", "args": ["-c", script] },
        "Resources": { "CPU": 10, "MemoryMB": 10 }
    })
}

async fn post(api: &ApiClient, path: &str, body: Value) -> Result<Value, ApiError> {
    api.request(Method::POST, path, Some(&body)).await
}

/// The 400 message of a refused call.
fn bad_request(r: Result<Value, ApiError>) -> String {
    match r {
        Err(ApiError::Status { status, message }) if status == StatusCode::BAD_REQUEST => message,
        other => panic!("expected a 400, got {other:?}"),
    }
}

async fn job_count(api: &ApiClient) -> usize {
    api.get::<Vec<Value>>("/v1/jobs").await.unwrap().len()
}

/// The allocation of `job` once it is complete.
async fn completed_alloc(api: &ApiClient, job: &str) -> anyhow::Result<Value> {
    wait_for(
        Duration::from_secs(30),
        &format!("{job} complete"),
        || async {
            let allocs: Vec<Value> = api
                .get(&format!("/v1/job/{}/allocations", enc(job)))
                .await
                .ok()?;
            allocs.into_iter().find(|a| a["ClientStatus"] == "complete")
        },
    )
    .await
}

fn cli(addr: &str, args: &[&str]) -> std::process::Output {
    Command::new(teamster_bin())
        .args(args)
        .args(["--address", addr])
        .output()
        .expect("the teamster binary runs")
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[tokio::test]
async fn force_dispatch_payload_meta_idempotency_and_refusals() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let mut c = ProcessCluster::start(1, ClusterOptions::default())?;
    let leader = c.wait_leader(FORMATION).await?;
    let api = c.servers[leader].api();
    let addr = c.servers[leader].http_addr();
    let client = ClientProcess::start(
        c.dir(),
        "client-a",
        &client_ip(&c, 1),
        &[c.servers[leader].rpc_addr()],
        "",
    )?;
    let node = wait_for(Duration::from_secs(10), "node id", || async {
        client.node_id().await
    })
    .await?;
    wait_node_status(&api, &node, "ready", Duration::from_secs(15)).await?;

    // A periodic parent (yearly: nothing launches by itself here) is registered without an
    // evaluation and never placed.
    let mut cron = batch_job("cron", sh_task("t", "echo ran"));
    cron["Periodic"] = json!({ "Spec": "0 0 1 1 *", "TimeZone": "Europe/Berlin" });
    let r = post(&api, "/v1/jobs", json!({ "Job": cron })).await?;
    assert_eq!(r["EvalID"], "", "a periodic parent is not evaluated: {r}");
    let parent: Value = api.get("/v1/job/cron").await?;
    assert_eq!(parent["Status"], "running");
    assert_eq!(parent["Periodic"]["TimeZone"], "Europe/Berlin");

    // Forced: a child `cron/periodic-<now>` runs on the client.
    let forced = post(&api, "/v1/job/cron/periodic/force", json!({})).await?;
    assert!(
        !forced["EvalID"].as_str().unwrap_or("").is_empty(),
        "{forced}"
    );
    let jobs: Vec<Value> = api.get("/v1/jobs?prefix=cron%2F").await?;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let child_id = jobs[0]["ID"].as_str().unwrap().to_string();
    assert!(child_id.starts_with("cron/periodic-"), "{child_id}");
    assert_eq!(jobs[0]["ParentID"], "cron");
    let alloc = completed_alloc(&api, &child_id).await?;
    let out = client.data_dir.join(format!(
        "alloc/{}/alloc/logs/t.stdout.0",
        alloc["ID"].as_str().unwrap()
    ));
    assert_eq!(std::fs::read_to_string(out)?, "ran\n");
    let parent_allocs: Vec<Value> = api.get("/v1/job/cron/allocations").await?;
    assert!(parent_allocs.is_empty(), "the parent itself was placed");

    // A parameterized parent: payload required, meta `image` required, `width` optional
    // with a default in the job's meta.
    let mut resize = sh_task(
        "resize",
        "cat local/in/input.json; echo \" $NOMAD_META_image $NOMAD_META_width\"",
    );
    resize["DispatchPayload"] = json!({ "File": "in/input.json" });
    let mut thumbs = batch_job("thumbs", resize);
    thumbs["ParameterizedJob"] = json!({
        "Payload": "required", "MetaRequired": ["image"], "MetaOptional": ["width"]
    });
    thumbs["Meta"] = json!({ "width": "320" });
    let r = post(&api, "/v1/jobs", json!({ "Job": thumbs })).await?;
    assert_eq!(r["EvalID"], "");
    let payload = base64::engine::general_purpose::STANDARD.encode(br#"{"x":1}"#);
    let d = post(
        &api,
        "/v1/job/thumbs/dispatch",
        json!({ "Payload": payload, "Meta": { "image": "cat.png" }, "IdempotencyToken": "t1" }),
    )
    .await?;
    let dispatched = d["DispatchedJobID"].as_str().unwrap().to_string();
    let suffix = dispatched
        .strip_prefix("thumbs/dispatch-")
        .expect("child ID");
    let (secs, hex) = suffix.split_once('-').expect("<time>-<hex>");
    assert!(
        secs.parse::<u64>().is_ok() && hex.len() == 8,
        "{dispatched}"
    );
    assert!(!d["EvalID"].as_str().unwrap().is_empty());
    assert!(d["JobCreateIndex"].as_u64().unwrap() > 0 && d["Index"].as_u64().unwrap() > 0);
    let alloc = completed_alloc(&api, &dispatched).await?;
    let dir = client
        .data_dir
        .join(format!("alloc/{}/resize", alloc["ID"].as_str().unwrap()));
    assert_eq!(
        std::fs::read_to_string(dir.join("local/in/input.json"))?,
        r#"{"x":1}"#
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("../alloc/logs/resize.stdout.0"))?,
        "{\"x\":1} cat.png 320\n"
    );
    // The same token again: the same child, no new evaluation.
    let again = post(
        &api,
        "/v1/job/thumbs/dispatch",
        json!({ "Payload": payload, "Meta": { "image": "dog.png" }, "IdempotencyToken": "t1" }),
    )
    .await?;
    assert_eq!(again["DispatchedJobID"], dispatched.as_str());
    assert_eq!(again["EvalID"], "");

    // Refused, with the problem named, and nothing written.
    let before = job_count(&api).await;
    let mut bad = batch_job("bad-cron", sh_task("t", "true"));
    bad["Periodic"] = json!({ "Spec": "61 * * * *" });
    let m = bad_request(post(&api, "/v1/jobs", json!({ "Job": bad.clone() })).await);
    assert!(m.contains("invalid cron expression"), "{m}");
    bad["Periodic"] = json!({ "Spec": "* * * * *", "TimeZone": "Mars/Olympus" });
    let m = bad_request(post(&api, "/v1/jobs", json!({ "Job": bad })).await);
    assert!(m.contains("invalid time zone \"Mars/Olympus\""), "{m}");
    register(&api, batch_job("plain", sh_task("t", "true"))).await?;
    let before = before + 1;
    let m = bad_request(post(&api, "/v1/job/plain/periodic/force", json!({})).await);
    assert!(m.contains("non-periodic"), "{m}");
    let m = bad_request(post(&api, "/v1/job/plain/dispatch", json!({})).await);
    assert!(m.contains("not a parameterized job"), "{m}");
    let dispatch = |body: Value| post(&api, "/v1/job/thumbs/dispatch", body);
    let m = bad_request(dispatch(json!({ "Payload": payload })).await);
    assert!(m.contains("required meta keys: [\"image\"]"), "{m}");
    let m = bad_request(
        dispatch(json!({ "Payload": payload, "Meta": { "image": "a", "color": "red" } })).await,
    );
    assert!(m.contains("unpermitted metadata keys: [\"color\"]"), "{m}");
    let m = bad_request(dispatch(json!({ "Meta": { "image": "a" } })).await);
    assert!(m.contains("Payload is not provided but required"), "{m}");
    let big = base64::engine::general_purpose::STANDARD.encode(vec![b'x'; 16 * 1024 + 1]);
    let m = bad_request(dispatch(json!({ "Payload": big, "Meta": { "image": "a" } })).await);
    assert!(
        m.contains("Payload exceeds maximum size; 16385 > 16384"),
        "{m}"
    );
    let mut quiet = batch_job("quiet", sh_task("t", "true"));
    quiet["ParameterizedJob"] = json!({ "Payload": "forbidden" });
    register(&api, quiet).await?;
    let before = before + 1;
    let m = bad_request(
        post(
            &api,
            "/v1/job/quiet/dispatch",
            json!({ "Payload": payload }),
        )
        .await,
    );
    assert!(m.contains("Payload provided but forbidden"), "{m}");
    assert_eq!(job_count(&api).await, before, "a refused call wrote a job");

    // The CLI: dispatch with a payload file and meta, force, and a parent's status.
    let file = c.dir().join("payload.json");
    std::fs::write(&file, "{\"y\":2}")?;
    let o = cli(
        &addr,
        &[
            "job",
            "dispatch",
            "thumbs",
            file.to_str().unwrap(),
            "--meta",
            "image=dog.png",
            "--meta",
            "width=64",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let line = stdout(&o);
    let cli_child = line
        .lines()
        .find_map(|l| l.strip_prefix("Dispatched Job ID = "))
        .expect("the child's ID")
        .to_string();
    let alloc = completed_alloc(&api, &cli_child).await?;
    let log = client.data_dir.join(format!(
        "alloc/{}/alloc/logs/resize.stdout.0",
        alloc["ID"].as_str().unwrap()
    ));
    assert_eq!(std::fs::read_to_string(log)?, "{\"y\":2} dog.png 64\n");
    let o = cli(&addr, &["job", "status", "thumbs"]);
    let text = stdout(&o);
    assert!(text.contains("Dispatched Jobs"), "{text}");
    assert!(
        text.contains(&dispatched) && text.contains(&cli_child),
        "{text}"
    );
    // A second force in the same second as the first would name the same child: the CLI
    // force is retried until the clock has moved on.
    wait_for(Duration::from_secs(5), "a second forced launch", || async {
        let o = cli(&addr, &["job", "periodic", "force", "cron"]);
        o.status.success().then_some(())
    })
    .await?;
    let o = cli(&addr, &["job", "status", "cron"]);
    let text = stdout(&o);
    assert!(text.contains("Next Periodic Launch = "), "{text}");
    assert!(
        text.contains("-12-31T23:00:00Z (")
            && text.contains("-01-01T00:00:00+01:00 Europe/Berlin)"),
        "the next launch is at midnight on January 1st in Berlin: {text}"
    );
    assert_eq!(text.matches("cron/periodic-").count(), 2, "{text}");
    Ok(())
}

#[tokio::test]
async fn a_leader_killed_one_second_before_a_launch_leaves_exactly_one_child() -> anyhow::Result<()>
{
    teamster_cluster_tests::init_test_tracing();
    let mut c = ProcessCluster::start(3, ClusterOptions::default())?;
    let first = c.wait_leader(FORMATION).await?;
    let api = c.servers[first].api();
    let mut job = batch_job("minutely", sh_task("t", "true"));
    job["Periodic"] = json!({ "Spec": "* * * * *" });
    register(&api, job).await?;
    // The next minute boundary at least 5 s away.
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let mut launch = (now / 60 + 1) * 60;
    if launch - now < 5 {
        launch += 60;
    }
    let kill_at = UNIX_EPOCH + Duration::from_secs(launch - 1);
    if let Ok(wait) = kill_at.duration_since(SystemTime::now()) {
        tokio::time::sleep(wait).await;
    }
    c.kill(first);
    let second = c.wait_leader(FORMATION).await?;
    assert_ne!(second, first);
    let api = c.servers[second].api();
    let child = format!("minutely/periodic-{launch}");
    wait_for(
        Duration::from_secs(30),
        "the child of the launch around the failover",
        || async {
            api.get::<Value>(&format!("/v1/job/{}", enc(&child)))
                .await
                .ok()
        },
    )
    .await?;
    // And the launch after it, by the new leader.
    let next = format!("minutely/periodic-{}", launch + 60);
    wait_for(Duration::from_secs(90), "the next launch", || async {
        api.get::<Value>(&format!("/v1/job/{}", enc(&next)))
            .await
            .ok()
    })
    .await?;
    let children: Vec<Value> = api.get("/v1/jobs?prefix=minutely%2F").await?;
    let ids: Vec<&str> = children.iter().filter_map(|j| j["ID"].as_str()).collect();
    // (A launch before the one watched may exist when the job was registered just before a
    // minute boundary.)
    let watched: Vec<&str> = ids
        .iter()
        .copied()
        .filter(|id| *id >= child.as_str())
        .collect();
    assert_eq!(
        watched,
        [child.as_str(), next.as_str()],
        "one child per launch time"
    );
    for id in ids {
        let job: Value = api.get(&format!("/v1/job/{}", enc(id))).await?;
        assert_eq!(job["Version"], 0, "{id} was registered twice");
        let evals: Vec<Value> = api.get(&format!("/v1/job/{}/evaluations", enc(id))).await?;
        // (No client runs it: the scheduler leaves a blocked evaluation beside it.)
        let launches = evals
            .iter()
            .filter(|e| e["TriggeredBy"] == "periodic-job")
            .count();
        assert_eq!(launches, 1, "{id} was launched twice: {evals:?}");
    }
    Ok(())
}
