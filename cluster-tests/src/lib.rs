//! Harnesses for teamster cluster tests.
//!
//! - [`process`]: clusters of real `teamster` processes on loopback addresses.
//! - [`client_process`]: client agent processes, and allocations placed by hand.
//! - [`compose`]: docker-compose clusters of the `teamster:dev` image, with fault injection.
//! - [`dev`]: a lone `teamster agent --dev` for end-to-end tests with real tasks.
//! - [`invariants`]: checks every scenario runs against the HTTP API.
//! - [`loadgen`]: simulated nodes and bursts of jobs, measured (`teamster-loadgen`).
//! - [`tls`]: test certificates made by `teamster tls`, and what presents them.
//! - [`webdriver`]: a headless Chromium driven through `chromedriver` (the web UI test).
//! - [`wait_for`]: wait on a condition with a deadline (tests never sleep a fixed time).

pub mod client_process;
pub mod compose;
pub mod dev;
pub mod invariants;
pub mod loadgen;
pub mod packages;
pub mod process;
pub mod sim;
pub mod tls;
pub mod webdriver;

use std::future::Future;
use std::time::{Duration, Instant};

/// Poll `check` every 25 ms until it yields `Some`, or fail after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Install a test log subscriber once (honours `RUST_LOG`).
pub fn init_test_tracing() {
    use std::sync::Once;
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_test_writer()
            .try_init();
    });
}

/// Job and state helpers over the HTTP API, shared by scenarios.
pub mod api {
    use serde_json::{json, Value};
    use teamster::api::{ApiClient, ApiError};

    /// A minimal batch job with one mock task, as Nomad JSON.
    pub fn small_job(id: &str) -> Value {
        json!({
            "ID": id,
            "Type": "batch",
            "Datacenters": ["dc1"],
            "TaskGroups": [{
                "Name": "g",
                "Count": 1,
                "Tasks": [{
                    "Name": "t",
                    "Driver": "mock",
                    "Config": { "run_for": "1s" },
                    "Resources": { "CPU": 10, "MemoryMB": 10 }
                }]
            }]
        })
    }

    /// Register `job` through `api`; the raft index it was committed at.
    pub async fn register(api: &ApiClient, job: Value) -> Result<u64, ApiError> {
        let r: Value = api
            .request(
                reqwest::Method::POST,
                "/v1/jobs",
                Some(&json!({ "Job": job })),
            )
            .await?;
        Ok(r["JobModifyIndex"].as_u64().unwrap_or(0))
    }

    /// `hcl` as Nomad's JSON job, parsed by the agent (`/v1/jobs/parse`, not canonicalized).
    pub async fn parse_hcl(api: &ApiClient, hcl: &str) -> Result<Value, ApiError> {
        api.request(
            reqwest::Method::POST,
            "/v1/jobs/parse",
            Some(&json!({ "JobHCL": hcl, "Canonicalize": false })),
        )
        .await
    }

    /// Nomad's `nomad job init` example, unchanged: `deploy/jobs/example.nomad.hcl`.
    pub fn job_init_example_hcl() -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/jobs/example.nomad.hcl");
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
    }

    /// The blocks of Nomad's `job init` example that another issue builds: none (its `ui`
    /// and workload `identity` blocks are acted on).
    pub const JOB_INIT_EXAMPLE_LEFT_OUT: [&str; 0] = [];

    /// Nomad's `job init` example (parsed by `api`), its docker task turned into a `raw_exec` task running
    /// `script` (no image can be pulled here), and its commented `logs` block set to
    /// `max_files` × `max_file_size_mb`; every other block as written.
    pub async fn job_init_example_raw_exec(
        api: &ApiClient,
        id: &str,
        script: &str,
        max_files: u32,
        max_file_size_mb: u32,
    ) -> Result<Value, ApiError> {
        let mut job = parse_hcl(api, &job_init_example_hcl()).await?;
        job["ID"] = json!(id);
        job["Name"] = json!(id);
        let task = &mut job["TaskGroups"][0]["Tasks"][0];
        task["Driver"] = json!("raw_exec");
        task["Config"] = json!({ "command": "/bin/sh", "args": ["-c", script] });
        task["Resources"] = json!({ "CPU": 50, "MemoryMB": 32 });
        task["KillTimeout"] = json!(2_000_000_000u64);
        task["LogConfig"] = json!({ "MaxFiles": max_files, "MaxFileSizeMB": max_file_size_mb });
        Ok(job)
    }

    /// The IDs of every job, read from `api`'s local state.
    pub async fn job_ids_stale(api: &ApiClient) -> Result<Vec<String>, ApiError> {
        let jobs: Vec<Value> = api.get("/v1/jobs?stale=true").await?;
        let mut ids: Vec<String> = jobs
            .iter()
            .filter_map(|j| j["ID"].as_str().map(str::to_string))
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// A server's Prometheus metrics, as text.
    pub async fn metrics_text(api: &ApiClient) -> Result<String, ApiError> {
        api.request_text::<()>(reqwest::Method::GET, "/v1/metrics?format=prometheus", None)
            .await
    }

    /// A raft statistic from `/v1/agent/self` (`applied_index`, `snapshot_index`, …).
    pub async fn raft_stat(api: &ApiClient, key: &str) -> Result<u64, ApiError> {
        let v: Value = api.get("/v1/agent/self").await?;
        Ok(v["stats"]["raft"][key]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0))
    }
}
