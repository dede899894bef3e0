//! The Nomad-compatible HTTP API and the CLI against a live 3-server cluster of real
//! processes: bad input is refused with a message and changes nothing, blocking queries
//! return on a change or after `wait`, lists take `namespace=*`, job summaries are
//! reconciled through raft, and the `job`, `server`, `status`, `system` and `operator raft`
//! commands work (and fail) as a script expects.

use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};
use teamster_cluster_tests::api::{register, small_job};
use teamster_cluster_tests::process::{teamster_bin, ClusterOptions, ProcessCluster};
use teamster_cluster_tests::wait_for;

const FORMATION: Duration = Duration::from_secs(30);

fn jobs_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/jobs")
}

/// Run the CLI against `address` off the async runtime.
async fn cli(address: &str, args: &[&str]) -> anyhow::Result<Output> {
    let mut cmd = std::process::Command::new(teamster_bin());
    cmd.args(args).env("TEAMSTER_ADDR", address);
    Ok(tokio::task::spawn_blocking(move || cmd.output()).await??)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// POST a raw body; the status and the plain-text (or JSON) answer.
async fn post_raw(base: &str, path: &str, body: Vec<u8>) -> anyhow::Result<(StatusCode, String)> {
    let resp = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await?;
    let status = resp.status();
    Ok((status, resp.text().await?))
}

/// The jobs a server holds (`?stale`) and the jobs table index.
async fn jobs_and_index(base: &str) -> anyhow::Result<(Vec<String>, u64)> {
    let resp = reqwest::get(format!("{base}/v1/jobs")).await?;
    let index = resp
        .headers()
        .get("X-Nomad-Index")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let jobs: Vec<Value> = resp.json().await?;
    let mut ids: Vec<String> = jobs
        .iter()
        .map(|j| j["ID"].as_str().unwrap_or_default().to_string())
        .collect();
    ids.sort();
    Ok((ids, index))
}

/// Wait until the schedulers are done with every evaluation (none pending), so the state
/// only changes when a test changes it.
async fn settled(base: &str) -> anyhow::Result<()> {
    let api = teamster::api::ApiClient::new(base);
    wait_for(
        Duration::from_secs(30),
        "every evaluation processed",
        || {
            let api = api.clone();
            async move {
                let evals: Vec<Value> = api.get("/v1/evaluations").await.ok()?;
                let busy = evals.iter().any(|e| e["Status"] == "pending");
                (!evals.is_empty() && !busy).then_some(())
            }
        },
    )
    .await
}

#[tokio::test]
async fn bad_input_is_refused_with_a_message_and_changes_nothing() -> anyhow::Result<()> {
    let mut c = ProcessCluster::start(3, ClusterOptions::default())?;
    let leader = c.wait_leader(FORMATION).await?;
    let follower = (leader + 1) % 3;
    let base = c.servers[follower].http_addr();
    register(&c.servers[leader].api(), small_job("keep")).await?;
    settled(&base).await?;
    let before = jobs_and_index(&base).await?;
    assert_eq!(before.0, vec!["keep".to_string()]);

    // Enterprise-only routes answer as Nomad's community edition does; a wrong URL is 404.
    let http = reqwest::Client::new();
    for path in [
        "/v1/quotas",
        "/v1/sentinel/policy/p",
        "/v1/recommendation/r",
    ] {
        let resp = http.get(format!("{base}{path}")).send().await?;
        assert_eq!(resp.status(), StatusCode::NOT_IMPLEMENTED, "{path}");
        assert_eq!(resp.text().await?, "Nomad Enterprise only endpoint");
    }
    let resp = http.get(format!("{base}/v1/quotaz")).send().await?;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);

    // Malformed JSON.
    let (s, msg) = post_raw(&base, "/v1/jobs", b"{\"Job\": {".to_vec()).await?;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{msg}");
    assert!(msg.contains("Failed to parse"), "{msg}");
    // Empty body.
    let (s, msg) = post_raw(&base, "/v1/jobs", Vec::new()).await?;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{msg}");
    assert!(msg.contains("Request body is empty"), "{msg}");
    // A wrong type names the field.
    let mut job = small_job("typed");
    job["TaskGroups"][0]["Count"] = json!("three");
    let (s, msg) = post_raw(
        &base,
        "/v1/jobs",
        serde_json::to_vec(&json!({ "Job": job }))?,
    )
    .await?;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{msg}");
    assert!(msg.contains("TaskGroups[0].Count: invalid type"), "{msg}");
    // Another region: a job for it is refused, a request for it is not answered with this
    // region's data.
    let mut foreign = small_job("elsewhere");
    foreign["Region"] = json!("eu-west");
    let (s, msg) = post_raw(
        &base,
        "/v1/jobs",
        serde_json::to_vec(&json!({ "Job": foreign }))?,
    )
    .await?;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{msg}");
    assert!(msg.contains("job region \"eu-west\""), "{msg}");
    let resp = reqwest::get(format!("{base}/v1/jobs?region=eu-west")).await?;
    assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(resp.text().await?.contains("No path to region"));
    let resp = reqwest::get(format!("{base}/v1/jobs?region=global")).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    // Percent-encoded, as every parameter is read.
    let resp = reqwest::get(format!("{base}/v1/jobs?region=glob%61l")).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    let resp = reqwest::get(format!("{base}/v1/jobs?region=eu%2Dwest")).await?;
    assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert!(resp
        .text()
        .await?
        .contains("No path to region: \"eu-west\""));
    // The same through job plan and a scale outside the bounds: refused, nothing written.
    let (s, msg) = post_raw(
        &base,
        "/v1/job/typed/plan",
        serde_json::to_vec(&json!({ "Job": job, "Diff": true }))?,
    )
    .await?;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{msg}");
    assert!(msg.contains("TaskGroups[0].Count"), "{msg}");
    let (s, msg) = post_raw(
        &base,
        "/v1/job/keep/scale",
        serde_json::to_vec(&json!({ "Count": -2, "Target": { "Group": "g" } }))?,
    )
    .await?;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{msg}");
    assert!(msg.contains("can't be negative"), "{msg}");
    // Inputs teamster would have to ignore are refused by name.
    let (s, msg) = post_raw(
        &base,
        "/v1/job/keep/plan",
        serde_json::to_vec(&json!({ "Job": small_job("keep"), "PolicyOverride": true }))?,
    )
    .await?;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{msg}");
    assert!(msg.contains("PolicyOverride"), "{msg}");
    let (s, msg) = post_raw(
        &base,
        "/v1/job/keep/scale",
        serde_json::to_vec(
            &json!({ "Count": 1, "Target": { "Group": "g", "Namespace": "prod" } }),
        )?,
    )
    .await?;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{msg}");
    assert!(msg.contains("namespace"), "{msg}");
    let resp = reqwest::get(format!(
        "{base}/v1/job/keep/versions?diffs=true&diff_version=0"
    ))
    .await?;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(resp.text().await?.contains("diff_version"));
    // A negative count is a type error that names the value.
    let mut job = small_job("negative");
    job["TaskGroups"][0]["Count"] = json!(-1);
    let (s, msg) = post_raw(
        &base,
        "/v1/jobs",
        serde_json::to_vec(&json!({ "Job": job }))?,
    )
    .await?;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{msg}");
    assert!(msg.contains("-1"), "{msg}");
    // No job.
    let (s, msg) = post_raw(&base, "/v1/jobs", b"{}".to_vec()).await?;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(msg.contains("Job must be specified"), "{msg}");
    // A 10 MiB body.
    let mut big = b"{\"Job\": {\"ID\": \"big\", \"Meta\": {\"x\": \"".to_vec();
    big.extend(std::iter::repeat_n(b'a', 10 << 20));
    big.extend(b"\"}}}");
    // The server reads and drops it before answering, so the client gets the 413 instead of a
    // connection reset while it is still sending.
    let (s, msg) = post_raw(&base, "/v1/jobs", big).await?;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE, "{msg}");
    assert!(msg.contains("exceeds the limit of 4194304 bytes"), "{msg}");
    // An invalid job: every problem listed.
    let invalid = json!({ "Job": {
        "ID": "bad job",
        "Type": "service",
        "Priority": 500,
        "Datacenters": ["dc1"],
        "TaskGroups": [
            { "Name": "g", "Count": 1, "Tasks": [
                { "Name": "t", "Driver": "warp", "Resources": { "CPU": 0, "MemoryMB": 10 } } ] },
            { "Name": "g", "Count": 1, "Tasks": [
                { "Name": "t", "Driver": "mock", "Resources": { "CPU": 10, "MemoryMB": 10 } } ] }
        ]
    }});
    let (s, msg) = post_raw(&base, "/v1/jobs", serde_json::to_vec(&invalid)?).await?;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{msg}");
    assert!(msg.contains("error(s) occurred"), "{msg}");
    // Validation lists them without writing anything.
    let (s, body) = post_raw(&base, "/v1/validate/job", serde_json::to_vec(&invalid)?).await?;
    assert_eq!(s, StatusCode::OK, "{body}");
    let v: Value = serde_json::from_str(&body)?;
    let errors = v["ValidationErrors"].as_array().expect("ValidationErrors");
    assert!(errors.len() >= 3, "{v}");
    let all = errors.iter().map(|e| e.to_string()).collect::<String>();
    // A driver no node has ("warp") is not a problem: Nomad accepts any plugin's name.
    assert!(!all.contains("warp"), "{all}");
    assert!(all.contains("minimum CPU value is 1"), "{all}");
    assert!(all.contains("redefines a task group"), "{all}");
    // A valid job validates clean.
    let (s, body) = post_raw(
        &base,
        "/v1/validate/job",
        serde_json::to_vec(&json!({ "Job": small_job("fine") }))?,
    )
    .await?;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        serde_json::from_str::<Value>(&body)?["ValidationErrors"],
        json!([])
    );
    // A request without a job is Nomad's 400.
    for empty in [json!({}), json!({ "Job": null })] {
        let (s, body) = post_raw(&base, "/v1/validate/job", serde_json::to_vec(&empty)?).await?;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{empty}: {body}");
        assert!(body.contains("Job must be specified"), "{body}");
    }
    // What /v1/jobs/parse canonicalizes (a service gets an empty Meta) validates clean.
    let hcl = "job \"svc\" {\n  datacenters = [\"dc1\"]\n  group \"g\" {\n    \
               service {\n      name = \"s\"\n      provider = \"nomad\"\n    }\n    \
               task \"t\" {\n      driver = \"mock\"\n    }\n  }\n}\n";
    let (s, parsed) = post_raw(
        &base,
        "/v1/jobs/parse",
        serde_json::to_vec(&json!({ "JobHCL": hcl, "Canonicalize": true }))?,
    )
    .await?;
    assert_eq!(s, StatusCode::OK, "{parsed}");
    let parsed: Value = serde_json::from_str(&parsed)?;
    assert_eq!(parsed["TaskGroups"][0]["Services"][0]["Meta"], json!({}));
    let (s, body) = post_raw(
        &base,
        "/v1/validate/job",
        serde_json::to_vec(&json!({ "Job": parsed }))?,
    )
    .await?;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        serde_json::from_str::<Value>(&body)?["ValidationErrors"],
        json!([]),
        "{body}"
    );
    // Nomad fields teamster does not act on are refused by name, never dropped silently: a
    // multiregion job must not run in one region, a canary update must not replace everything.
    let mut cron = small_job("cron");
    cron["Multiregion"] = json!({ "Regions": [{ "Name": "west" }] });
    cron["TaskGroups"][0]["Networks"] =
        json!([{ "MBits": 10, "DynamicPorts": [{ "Label": "http" }] }]);
    cron["TaskGroups"][0]["Tasks"][0]["Services"] = json!([{ "Name": "web", "Provider": "nomad", "PortLabel": "8080", "Checks": [{
            "Type": "http", "Path": "/", "Interval": 1_000_000_000u64,
            "Timeout": 1_000_000_000u64, "Advertise": "10.0.0.1" }] }]);
    cron["Update"] = Value::Null;
    let (s, msg) = post_raw(
        &base,
        "/v1/jobs",
        serde_json::to_vec(&json!({ "Job": cron.clone() }))?,
    )
    .await?;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{msg}");
    assert!(msg.starts_with("3 error(s) occurred"), "{msg}");
    assert!(msg.contains("job → Multiregion"), "{msg}");
    assert!(
        msg.contains("job → group \"g\" → network #0 → MBits"),
        "{msg}"
    );
    assert!(
        msg.contains("job → group \"g\" → task \"t\" → service \"web\" → check #0 → Advertise"),
        "{msg}"
    );
    // An update block that could never roll out, or one on a batch job: 400 naming it.
    for (job_type, update, expected) in [
        (
            "service",
            json!({ "MaxParallel": 0, "Canary": 1 }),
            "canary needs max_parallel of at least 1",
        ),
        (
            "service",
            json!({ "MaxParallel": 1, "Canary": 5 }),
            "canary (5) must not exceed the group's count (1)",
        ),
        (
            "batch",
            json!({ "MaxParallel": 1 }),
            "job type batch does not allow an update block",
        ),
        (
            "system",
            json!({ "MaxParallel": 1, "Canary": 150 }),
            "canary (150) is a percentage of the nodes in a system job: at most 100",
        ),
        (
            "system",
            json!({ "MaxParallel": 0, "Canary": 50 }),
            "canary needs max_parallel of at least 1",
        ),
    ] {
        let mut job = json!({
            "ID": "rolling", "Type": job_type, "Datacenters": ["dc1"],
            "TaskGroups": [{ "Name": "g", "Count": 1, "Update": update, "Tasks": [{
                "Name": "t", "Driver": "mock", "Resources": { "CPU": 10, "MemoryMB": 10 }
            }]}]
        });
        job["TaskGroups"][0]["Tasks"][0]["Config"] = json!({ "run_for": "1s" });
        let (s, msg) = post_raw(
            &base,
            "/v1/jobs",
            serde_json::to_vec(&json!({ "Job": job }))?,
        )
        .await?;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{msg}");
        assert!(
            msg.contains("task group \"g\", update") || msg.contains("task group \"g\": job type"),
            "{msg}"
        );
        assert!(msg.contains(expected), "{msg}");
    }
    // The CLI's file path says the same and exits 1.
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("cron.json");
    std::fs::write(&file, serde_json::to_vec(&json!({ "Job": cron.clone() }))?)?;
    let file = file.to_str().expect("a UTF-8 path");
    let out = cli(&base, &["job", "run", "--detach", file]).await?;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("job → Multiregion"),
        "{}",
        stderr(&out)
    );
    // Validation lists them.
    let (s, body) = post_raw(&base, "/v1/validate/job", serde_json::to_vec(&cron)?).await?;
    assert_eq!(s, StatusCode::OK, "{body}");
    let v: Value = serde_json::from_str(&body)?;
    assert_eq!(
        v["ValidationErrors"].as_array().map(Vec::len),
        Some(3),
        "{v}"
    );
    assert!(
        v["Error"].as_str().unwrap_or("").contains("Multiregion"),
        "{v}"
    );

    // Bad query parameters and unknown routes.
    let resp = reqwest::get(format!("{base}/v1/jobs?stale=maybe")).await?;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let resp = reqwest::get(format!("{base}/v1/job/nope")).await?;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert_eq!(resp.text().await?, "job not found");
    let resp = reqwest::Client::new()
        .patch(format!("{base}/v1/jobs"))
        .send()
        .await?;
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);

    // Nothing changed, on any server.
    for i in 0..3 {
        let after = jobs_and_index(&c.servers[i].http_addr()).await?;
        assert_eq!(after, before, "server {i}");
    }
    Ok(())
}

#[tokio::test]
async fn blocking_queries_return_on_a_change_and_after_the_wait() -> anyhow::Result<()> {
    let mut c = ProcessCluster::start(3, ClusterOptions::default())?;
    let leader = c.wait_leader(FORMATION).await?;
    let base = c.servers[(leader + 1) % 3].http_addr();
    register(&c.servers[leader].api(), small_job("first")).await?;
    settled(&base).await?;
    let (_, index) = jobs_and_index(&base).await?;

    // No change: the answer comes after `wait` with the same index.
    let started = Instant::now();
    let resp = reqwest::get(format!("{base}/v1/jobs?index={index}&wait=1s")).await?;
    let waited = started.elapsed();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["X-Nomad-Index"].to_str()?, index.to_string());
    assert!(
        waited >= Duration::from_secs(1),
        "returned after {waited:?}"
    );

    // A change: the query returns long before its 60 s wait, with the new index.
    let url = format!("{base}/v1/jobs?index={index}&wait=60s");
    let query = tokio::spawn(async move {
        let started = Instant::now();
        let resp = reqwest::get(url).await?;
        let index: u64 = resp.headers()["X-Nomad-Index"].to_str()?.parse()?;
        let jobs: Vec<Value> = resp.json().await?;
        anyhow::Ok((started.elapsed(), index, jobs.len()))
    });
    // Register once the query is parked (a registration before it would also satisfy it).
    register(&c.servers[leader].api(), small_job("second")).await?;
    let (took, new_index, n) = query.await??;
    assert!(new_index > index);
    assert_eq!(n, 2);
    assert!(took < Duration::from_secs(30), "took {took:?}");

    // Bad blocking parameters are 400s.
    let resp = reqwest::get(format!("{base}/v1/jobs?index=abc")).await?;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let resp = reqwest::get(format!("{base}/v1/jobs?index=1&wait=forever")).await?;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    Ok(())
}

#[tokio::test]
async fn lists_take_every_namespace_and_summaries_are_reconciled_through_raft() -> anyhow::Result<()>
{
    let mut c = ProcessCluster::start(3, ClusterOptions::default())?;
    let leader = c.wait_leader(FORMATION).await?;
    let base = c.servers[(leader + 1) % 3].http_addr();
    let api = c.servers[leader].api();
    register(&api, small_job("ns-default")).await?;
    let mut other = small_job("ns-other");
    other["Namespace"] = json!("other");
    // A namespace must exist before a job goes in it (Nomad's "nonexistent namespace").
    let refused = register(&api, other.clone())
        .await
        .expect_err("no namespace yet");
    assert!(
        refused
            .to_string()
            .contains("nonexistent namespace \"other\""),
        "{refused}"
    );
    let http = reqwest::Client::new();
    let resp = http
        .put(format!("{base}/v1/namespace/other"))
        .json(&json!({"Name": "other", "Description": "the others"}))
        .send()
        .await?;
    assert_eq!(resp.status(), StatusCode::OK, "{}", resp.text().await?);
    // Enterprise quotas are refused by name, not dropped.
    let resp = http
        .put(format!("{base}/v1/namespace/quota"))
        .json(&json!({"Name": "quota", "Quota": "small"}))
        .send()
        .await?;
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(resp.text().await?.contains("Quota"));
    register(&api, other).await?;
    let all: Vec<Value> = reqwest::get(format!("{base}/v1/namespaces?stale=true"))
        .await?
        .json()
        .await?;
    let names: Vec<&str> = all.iter().filter_map(|n| n["Name"].as_str()).collect();
    assert_eq!(names, ["default", "other"]);
    let one: Value = reqwest::get(format!("{base}/v1/namespace/other?stale=true"))
        .await?
        .json()
        .await?;
    assert_eq!(one["Description"], "the others");
    let resp = reqwest::get(format!("{base}/v1/namespace/nowhere")).await?;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    // Neither default nor a namespace with a job can be deleted.
    for name in ["default", "other"] {
        let resp = http
            .delete(format!("{base}/v1/namespace/{name}"))
            .send()
            .await?;
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{name}");
    }
    settled(&base).await?;
    let eval_jobs = |query: &'static str| {
        let base = base.clone();
        async move {
            let evals: Vec<Value> = reqwest::get(format!("{base}/v1/evaluations{query}"))
                .await?
                .json()
                .await?;
            let mut jobs: Vec<String> = evals
                .iter()
                .filter_map(|e| e["JobID"].as_str().map(str::to_string))
                .collect();
            // With no client, each job has its evaluation and a blocked one.
            jobs.sort();
            jobs.dedup();
            anyhow::Ok(jobs)
        }
    };
    assert_eq!(eval_jobs("").await?, ["ns-default"]);
    assert_eq!(eval_jobs("?namespace=other").await?, ["ns-other"]);
    assert_eq!(eval_jobs("?namespace=*").await?, ["ns-default", "ns-other"]);
    let resp = reqwest::get(format!("{base}/v1/allocations?namespace=*")).await?;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.json::<Vec<Value>>().await?, Vec::<Value>::new());
    let regions: Vec<String> = reqwest::get(format!("{base}/v1/regions"))
        .await?
        .json()
        .await?;
    assert_eq!(regions, ["global"]);

    // Reconciling the summaries is a raft write (through a follower): 200 with its index,
    // and a summary that was right stays as it was.
    let summary = |base: String| async move {
        let s: Value = reqwest::get(format!("{base}/v1/job/ns-default/summary"))
            .await?
            .json()
            .await?;
        anyhow::Ok(s)
    };
    let before = summary(base.clone()).await?;
    let resp = reqwest::Client::new()
        .put(format!("{base}/v1/system/reconcile/summaries"))
        .send()
        .await?;
    assert_eq!(resp.status(), StatusCode::OK);
    let index: u64 = resp.headers()["X-Nomad-Index"].to_str()?.parse()?;
    assert!(index > 0);
    assert_eq!(summary(base.clone()).await?, before);
    let resp = reqwest::get(format!("{base}/v1/system/reconcile/summaries")).await?;
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    let out = cli(&base, &["system", "reconcile", "summaries"]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    // `eval status` finds an evaluation of another namespace by its prefix.
    let evals: Vec<Value> = reqwest::get(format!("{base}/v1/evaluations?namespace=other"))
        .await?
        .json()
        .await?;
    let other_eval = evals[0]["ID"].as_str().unwrap_or_default().to_string();
    let out = cli(&base, &["eval", "status", &other_eval[..8]]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("ns-other"), "{}", stdout(&out));
    Ok(())
}

#[tokio::test]
async fn the_cli_drives_jobs_and_reads_the_cluster() -> anyhow::Result<()> {
    let mut c = ProcessCluster::start(3, ClusterOptions::default())?;
    let leader = c.wait_leader(FORMATION).await?;
    let follower = c.servers[(leader + 1) % 3].http_addr();
    let jobs = jobs_dir();
    let sleep_file = jobs.join("sleep-mock.json");
    let sleep_file = sleep_file.to_str().unwrap();

    // Validate: a good file passes, a broken one names its problems and exits 1.
    let out = cli(&follower, &["job", "validate", sleep_file]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("Job validation successful"));
    let dir = tempfile::tempdir()?;
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"Job": {"ID": "x", "Type": "batch", "Datacenters": ["dc1"], "TaskGroups": [
            {"Name": "g", "Count": 1, "Tasks": [{"Name": "t", "Driver": ""}]}]}}"#,
    )?;
    let out = cli(&follower, &["job", "validate", bad.to_str().unwrap()]).await?;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("missing driver"), "{}", stderr(&out));
    let out = cli(&follower, &["job", "run", "/nonexistent.json"]).await?;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("/nonexistent.json"),
        "{}",
        stderr(&out)
    );

    // Run (detached, through a follower), list, inspect.
    let out = cli(&follower, &["job", "run", "--detach", sleep_file]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("Evaluation ID:"), "{}", stdout(&out));
    let out = cli(&follower, &["job", "status"]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("sleep-mock"), "{}", stdout(&out));
    let out = cli(&follower, &["job", "status", "--json"]).await?;
    let listed: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(listed[0]["ID"], "sleep-mock");
    let out = cli(&follower, &["job", "inspect", "sleep-mock"]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    let inspected: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(inspected["Job"]["TaskGroups"][0]["Count"], 10);
    let out = cli(&follower, &["job", "inspect", "missing"]).await?;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("No job with ID"), "{}", stderr(&out));

    // Following the evaluation: with no client nodes nothing can be placed, so `job run`
    // reports the failed group and exits 2, like `nomad job run`.
    let out = cli(&follower, &["job", "run", "--timeout", "60s", sleep_file]).await?;
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("failed to place all allocations"),
        "{}",
        stdout(&out)
    );
    let out = cli(&follower, &["job", "status", "sleep-mock"]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("No allocations placed"),
        "{}",
        stdout(&out)
    );
    let out = cli(&follower, &["eval", "list"]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("sleep-mock"), "{}", stdout(&out));

    // The same job from its HCL twin, sized by a variable, reaches the cluster as the count
    // asked for; the JSON job the agent holds shows it.
    let hcl_file = jobs.join("sleep-mock.nomad.hcl");
    let hcl_file = hcl_file.to_str().unwrap();
    let out = cli(
        &follower,
        &["job", "run", "--detach", "--var", "sleepers=4", hcl_file],
    )
    .await?;
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let out = cli(&follower, &["job", "inspect", "sleep-mock"]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    let inspected: Value = serde_json::from_str(&stdout(&out))?;
    assert_eq!(inspected["Job"]["TaskGroups"][0]["Count"], json!(4));
    assert_eq!(
        inspected["Job"]["TaskGroups"][0]["Tasks"][0]["Config"]["run_for"],
        json!("5s")
    );

    // History and revert: back to the version before the HCL run (count 10), as a new one.
    let current = inspected["Job"]["Version"].as_u64().expect("a version");
    assert!(current >= 1, "{inspected}");
    let out = cli(&follower, &["job", "history", "sleep-mock"]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<String> = stdout(&out).lines().map(str::to_string).collect();
    assert!(lines[0].starts_with("Version"), "{lines:?}");
    assert!(lines[1].starts_with(&current.to_string()), "{lines:?}");
    let previous = (current - 1).to_string();
    let stale = (current + 5).to_string();
    let out = cli(
        &follower,
        &[
            "job",
            "revert",
            "--enforce-prior-version",
            &stale,
            "sleep-mock",
            &previous,
        ],
    )
    .await?;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains(&format!(
            "enforcing version {stale}, but current version is {current}"
        )),
        "{}",
        stderr(&out)
    );
    let out = cli(
        &follower,
        &["job", "revert", "sleep-mock", &current.to_string()],
    )
    .await?;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("can't revert to current version"),
        "{}",
        stderr(&out)
    );
    let out = cli(&follower, &["job", "revert", "sleep-mock", &previous]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("Evaluation ID: "),
        "{}",
        stdout(&out)
    );
    let out = cli(&follower, &["job", "inspect", "sleep-mock"]).await?;
    let reverted: Value = serde_json::from_str(&stdout(&out))?;
    assert_eq!(reverted["Job"]["Version"], json!(current + 1), "{reverted}");
    assert_eq!(reverted["Job"]["TaskGroups"][0]["Count"], json!(10));
    // job plan: no client nodes here, so the job's placements would fail (exit 1, the
    // failure named); the index it prints guards `run --check-index`.
    let json_file = jobs.join("sleep-mock.json");
    let json_file = json_file.to_str().unwrap();
    let out = cli(&follower, &["job", "plan", json_file]).await?;
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let plan = stdout(&out);
    assert!(
        plan.contains("WARNING: Failed to place all allocations"),
        "{plan}"
    );
    let index: u64 = plan
        .lines()
        .find_map(|l| l.strip_prefix("Job Modify Index: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Job Modify Index in {plan}"));
    assert_eq!(
        Some(index),
        reverted["Job"]["JobModifyIndex"].as_u64(),
        "{plan}"
    );
    let stale = (index - 1).to_string();
    let out = cli(
        &follower,
        &["job", "run", "--detach", "--check-index", &stale, hcl_file],
    )
    .await?;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("job modify index"),
        "{}",
        stderr(&out)
    );
    let out = cli(&follower, &["job", "inspect", "sleep-mock"]).await?;
    let unchanged: Value = serde_json::from_str(&stdout(&out))?;
    assert_eq!(unchanged["Job"]["Version"], reverted["Job"]["Version"]);
    // A job that would place nothing exits 0; an unreadable file 255.
    let dir = tempfile::tempdir()?;
    let idle = dir.path().join("idle.json");
    std::fs::write(
        &idle,
        json!({"Job": {"ID": "idle", "TaskGroups": [{"Name": "g", "Count": 0,
            "Tasks": [{"Name": "t", "Driver": "mock"}]}]}})
        .to_string(),
    )?;
    let out = cli(&follower, &["job", "plan", idle.to_str().unwrap()]).await?;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).starts_with("+   Job: \"idle\""),
        "{}",
        stdout(&out)
    );
    let out = cli(&follower, &["job", "plan", "/nonexistent/job.hcl"]).await?;
    assert_eq!(out.status.code(), Some(255), "{}", stdout(&out));
    let out = cli(&follower, &["job", "status", "idle"]).await?;
    assert!(!out.status.success(), "a plan registers nothing");
    // job scale: within no bounds (no scaling block), a new version with the count.
    let out = cli(&follower, &["job", "scale", "sleep-mock", "sleepers", "3"]).await?;
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let out = cli(&follower, &["job", "inspect", "sleep-mock"]).await?;
    let scaled: Value = serde_json::from_str(&stdout(&out))?;
    assert_eq!(
        scaled["Job"]["TaskGroups"][0]["Count"],
        json!(3),
        "{scaled}"
    );
    let out = cli(&follower, &["job", "scale", "sleep-mock", "nope", "3"]).await?;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("does not exist in job"),
        "{}",
        stderr(&out)
    );

    // A block teamster does not act on, in HCL, is refused by name: nothing registered.

    let cron = dir.path().join("cron.nomad.hcl");
    std::fs::write(
        &cron,
        "job \"cron\" {\n  type = \"batch\"\n  multiregion {\n    strategy {\n      max_parallel = 1\n    }\n  }\n  group \"g\" {\n    task \"t\" {\n      driver = \"mock\"\n    }\n  }\n}\n",
    )?;
    let out = cli(&follower, &["job", "run", cron.to_str().unwrap()]).await?;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("job → Multiregion"),
        "{}",
        stderr(&out)
    );
    let out = cli(&follower, &["job", "status", "cron"]).await?;
    assert!(!out.status.success(), "{}", stdout(&out));
    let out = cli(&follower, &["eval", "list", "--json"]).await?;
    let evals: Value = serde_json::from_slice(&out.stdout)?;
    let eval_id = evals[0]["ID"].as_str().expect("an eval ID").to_string();
    let out = cli(&follower, &["eval", "status", &eval_id]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("sleep-mock"), "{}", stdout(&out));
    let out = cli(&follower, &["eval", "status", "ffffffff-0000"]).await?;
    assert_eq!(out.status.code(), Some(1));
    let out = cli(&follower, &["alloc", "status", "ffffffff-0000"]).await?;
    assert_eq!(out.status.code(), Some(1));
    assert!(!stderr(&out).is_empty());
    let out = cli(&follower, &["alloc", "logs", "ffffffff-0000", "t"]).await?;
    assert_eq!(out.status.code(), Some(1));
    // No client nodes here: an empty list, and a drain of an unknown node is an error.
    let out = cli(&follower, &["node", "status", "--json"]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(serde_json::from_slice::<Value>(&out.stdout)?, json!([]));
    let out = cli(&follower, &["node", "drain", "--enable", "ffffffff"]).await?;
    assert_eq!(out.status.code(), Some(1));

    // The scheduler configuration: set through a follower, read back, bad values refused.
    let out = cli(
        &follower,
        &[
            "operator",
            "scheduler",
            "set-config",
            "--scheduler-algorithm",
            "spread",
        ],
    )
    .await?;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cli(&follower, &["operator", "scheduler", "get-config"]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("spread"), "{}", stdout(&out));
    let out = cli(
        &follower,
        &[
            "operator",
            "scheduler",
            "set-config",
            "--scheduler-algorithm",
            "roulette",
        ],
    )
    .await?;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("roulette"), "{}", stderr(&out));
    let out = cli(
        &follower,
        &["operator", "scheduler", "get-config", "--json"],
    )
    .await?;
    let conf: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(conf["SchedulerAlgorithm"], "spread");

    // Stop keeps the job (Stop = true); purge removes it.
    let out = cli(&follower, &["job", "stop", "--detach", "sleep-mock"]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    let job: Value = c.servers[leader].api().get("/v1/job/sleep-mock").await?;
    assert_eq!(job["Stop"], true);
    let out = cli(
        &follower,
        &["job", "stop", "--detach", "--purge", "sleep-mock"],
    )
    .await?;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cli(&follower, &["job", "inspect", "sleep-mock"]).await?;
    assert_eq!(out.status.code(), Some(1));
    let out = cli(&follower, &["job", "stop", "sleep-mock"]).await?;
    assert_eq!(out.status.code(), Some(1));

    // Server members: three alive, one leader; a killed server shows as failed.
    let out = cli(&follower, &["server", "members", "--json"]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    let members: Value = serde_json::from_slice(&out.stdout)?;
    let list = members["Members"].as_array().expect("Members");
    assert_eq!(list.len(), 3);
    assert!(list.iter().all(|m| m["Status"] == "alive"), "{members}");
    assert_eq!(
        list.iter()
            .filter(|m| m["Tags"]["leader"] == "true")
            .count(),
        1
    );
    let out = cli(&follower, &["server", "members"]).await?;
    assert!(stdout(&out).contains("alive"));
    let victim = (leader + 2) % 3;
    c.kill(victim);
    let api = c.servers[(leader + 1) % 3].api();
    wait_for(Duration::from_secs(10), "a failed member", || {
        let api = api.clone();
        async move {
            let m: Value = api.get("/v1/agent/members").await.ok()?;
            let failed = m["Members"]
                .as_array()?
                .iter()
                .filter(|m| m["Status"] == "failed")
                .count();
            (failed == 1).then_some(())
        }
    })
    .await?;

    // `status` as Nomad's: the jobs, or the object a prefix names; the leader is in
    // `server members`, the peers in `operator raft list-peers`.
    let out = cli(&follower, &["job", "run", "--detach", sleep_file]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cli(&follower, &["status"]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("sleep-mock"), "{}", stdout(&out));
    let out = cli(&follower, &["status", "sleep-mo"]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("sleep-mock"), "{}", stdout(&out));
    let out = cli(&follower, &["status", "zzz-nothing"]).await?;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("zzz-nothing"), "{}", stderr(&out));
    let out = cli(&follower, &["server", "members"]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("Leader") && stdout(&out).contains("alive   true"),
        "{}",
        stdout(&out)
    );
    let out = cli(&follower, &["operator", "raft", "list-peers"]).await?;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).matches("4647").count(), 3, "{}", stdout(&out));
    Ok(())
}
