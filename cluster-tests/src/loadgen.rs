//! The load generator: simulated nodes and a burst of jobs against a real cluster, measured.
//!
//! One process registers `nodes` simulated client nodes over the client RPC (`Node.Register`,
//! the mock driver fingerprinted) and keeps them alive with `Node.UpdateStatus` heartbeats at
//! the TTL the leader hands out; then it registers `jobs` jobs of `count` allocations at a
//! chosen concurrency through the HTTP API, and follows placement with blocking queries on
//! `/v1/jobs` (whose stubs carry each job's summary) until every allocation is placed. The
//! simulated nodes do not run anything: placement is what is measured.
//!
//! The [`Report`] holds placements and evaluations per second, evaluation latency (create →
//! last update of each completed evaluation) percentiles, plan rejections and committed
//! allocations from the leader's metrics, raft entries per second, and the CPU time and peak
//! RSS of every server process when they are local processes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::{json, Value};
use teamster::agent::config::ClientConfig;
use teamster::cli::ApiClient;

use crate::api::raft_stat;
use teamster::client::fingerprint::{self, Machine};
use teamster::rpc::node_api::{NodeRegisterRequest, NodeUpdateStatusRequest};
use teamster::rpc::{Pool, RpcConfig, RpcRequest, RpcResponse};
use teamster_storage::model::NodeStatus;

/// The shape of the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// `jobs` service jobs of `count` allocations each (C1M: 100 × 1 000).
    Service,
    /// `jobs` batch jobs of `count` each (many small jobs: 10 000 × 1).
    Batch,
    /// `jobs` system jobs: one allocation per node each.
    System,
}

/// What to run.
#[derive(Debug, Clone, Serialize)]
pub struct LoadConfig {
    /// Servers' HTTP API addresses (`http://ip:4646`).
    pub http: Vec<String>,
    /// Servers' RPC addresses (`ip:4647`).
    pub rpc: Vec<String>,
    /// Simulated nodes.
    pub nodes: usize,
    /// Jobs.
    pub jobs: usize,
    /// Allocations per job (ignored for system jobs).
    pub count: u32,
    /// The job type.
    pub shape: Shape,
    /// Concurrent registrations (nodes and jobs).
    pub concurrency: usize,
    /// Each node's CPU in MHz and memory in MB.
    pub node_cpu_mhz: u64,
    /// Memory per node, MB.
    pub node_memory_mb: u64,
    /// Each allocation's CPU (MHz) and memory (MB).
    pub alloc_cpu: u64,
    /// Memory per allocation, MB.
    pub alloc_memory_mb: u64,
    /// Give up after this long.
    pub timeout: Duration,
    /// Prefix of job IDs (several runs against one cluster must not collide).
    pub job_prefix: String,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            http: Vec::new(),
            rpc: Vec::new(),
            nodes: 5_000,
            jobs: 100,
            count: 1_000,
            shape: Shape::Service,
            concurrency: 16,
            node_cpu_mhz: 16_000,
            node_memory_mb: 32_768,
            alloc_cpu: 100,
            alloc_memory_mb: 64,
            timeout: Duration::from_secs(1_800),
            job_prefix: "load".into(),
        }
    }
}

impl LoadConfig {
    /// Check the configuration makes sense.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.http.is_empty() || self.rpc.is_empty() {
            bail!("at least one server HTTP and RPC address is needed");
        }
        if self.nodes == 0 || self.jobs == 0 || self.concurrency == 0 {
            bail!("nodes, jobs and concurrency must be positive");
        }
        if self.shape != Shape::System && self.count == 0 {
            bail!("count must be positive");
        }
        Ok(())
    }

    /// The allocations the run must end with.
    pub fn expected_placements(&self) -> u64 {
        match self.shape {
            Shape::System => (self.jobs * self.nodes) as u64,
            _ => self.jobs as u64 * self.count as u64,
        }
    }
}

/// One sample of progress.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    /// Seconds since the first job registration.
    pub t: f64,
    /// Allocations placed so far.
    pub placed: u64,
}

/// A server process's resource use.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessUse {
    /// Its name.
    pub name: String,
    /// Whether it was the leader at the end.
    pub leader: bool,
    /// User + system CPU seconds spent during the run.
    pub cpu_seconds: f64,
    /// Peak resident set size, MB.
    pub peak_rss_mb: f64,
}

/// What a run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The configuration.
    pub config: LoadConfig,
    /// Seconds to register every node.
    pub node_registration_seconds: f64,
    /// Seconds to register every job (the HTTP calls).
    pub job_registration_seconds: f64,
    /// Seconds from the first job registration until every allocation was placed.
    pub placement_seconds: f64,
    /// Allocations placed.
    pub placed: u64,
    /// Allocations placed per second.
    pub placements_per_second: f64,
    /// Completed evaluations of the run's jobs.
    pub evals_completed: u64,
    /// Evaluations completed per second.
    pub evals_per_second: f64,
    /// Evaluation latency (create → last update), milliseconds: p50, p95, p99, max.
    pub eval_latency_ms: BTreeMap<String, f64>,
    /// Every completed evaluation's latency, milliseconds, sorted (for the distribution plot).
    pub eval_latencies_ms: Vec<f64>,
    /// Plans whose nodes the leader's plan applier rejected (a node did not fit).
    pub plan_node_rejections: u64,
    /// Raft log entries appended during the placement phase, per second.
    pub raft_entries_per_second: f64,
    /// Heartbeats sent by the simulated nodes during the run.
    pub heartbeats: u64,
    /// Progress over time.
    pub samples: Vec<Sample>,
    /// Server processes (when local; the leader first).
    pub servers: Vec<ProcessUse>,
    /// The scheduler-only ceiling for the same placements, when measured.
    pub scheduler_only: Option<SchedulerOnly>,
}

/// A simulated node's identity.
struct SimNode {
    id: String,
}

/// Register the simulated nodes and keep them alive; returns their ids, the heartbeat
/// counter and a handle that stops the heartbeats when dropped.
pub async fn start_nodes(
    cfg: &LoadConfig,
) -> anyhow::Result<(Vec<String>, Arc<AtomicU64>, HeartbeatHandle)> {
    let pool = Pool::new(0, RpcConfig::default())?;
    let machine = Machine {
        cores: 8,
        mhz_per_core: cfg.node_cpu_mhz / 8,
        memory_mb: cfg.node_memory_mb,
        disk_free_mb: 100_000,
        hostname: "sim".into(),
        kernel_version: "sim".into(),
    };
    let client_config = ClientConfig {
        drivers: vec!["mock".into()],
        ..ClientConfig::default()
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0);
    let mut rng_ids = Vec::with_capacity(cfg.nodes);
    for i in 0..cfg.nodes {
        rng_ids.push(SimNode {
            id: format!(
                "{:08x}-0000-4000-8000-{:012x}",
                i,
                rand::random::<u64>() >> 16
            ),
        });
    }
    let nodes = Arc::new(rng_ids);
    let next = Arc::new(AtomicU64::new(0));
    let ttl_ms = Arc::new(AtomicU64::new(10_000));
    let mut tasks = Vec::new();
    for _ in 0..cfg.concurrency.min(cfg.nodes) {
        let (pool, nodes, next, ttl_ms) =
            (pool.clone(), nodes.clone(), next.clone(), ttl_ms.clone());
        let rpc = cfg.rpc.clone();
        let (machine, client_config) = (machine.clone(), client_config.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(n) = nodes.get(i) else {
                    return anyhow::Ok(());
                };
                let mut node = fingerprint::node(
                    &client_config,
                    &format!("sim-{i}"),
                    &n.id,
                    &format!("secret-{}", n.id),
                    "127.0.0.1:0",
                    &machine,
                    now,
                );
                node.attributes
                    .insert("unique.hostname".into(), format!("sim-{i}"));
                let req = RpcRequest::NodeRegister(Box::new(NodeRegisterRequest { node }));
                let resp = call_any(&pool, &rpc, req, i).await?;
                match resp {
                    RpcResponse::NodeRegister(Ok(r)) => {
                        ttl_ms.fetch_min(r.heartbeat_ttl_ms.max(1_000), Ordering::Relaxed);
                    }
                    other => bail!("registering sim-{i}: {other:?}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let heartbeats = Arc::new(AtomicU64::new(0));
    let stop = tokio_util::sync::CancellationToken::new();
    // One task walks the nodes so that each heartbeats about every TTL / 2.
    let task = {
        let (pool, nodes, rpc, stop, beats) = (
            pool.clone(),
            nodes.clone(),
            cfg.rpc.clone(),
            stop.clone(),
            heartbeats.clone(),
        );
        tokio::spawn(async move {
            let mut i = 0usize;
            loop {
                let period = Duration::from_millis(ttl_ms.load(Ordering::Relaxed) / 2);
                let per_node = period / nodes.len().max(1) as u32;
                let batch_started = Instant::now();
                let mut batch = Vec::new();
                // Send in groups of 32 concurrent heartbeats.
                for _ in 0..32.min(nodes.len()) {
                    let n = &nodes[i % nodes.len()];
                    i += 1;
                    let req = RpcRequest::NodeUpdateStatus(NodeUpdateStatusRequest {
                        node_id: n.id.as_str().into(),
                        status: NodeStatus::Ready,
                    });
                    batch.push(call_any(&pool, &rpc, req, i));
                }
                for r in futures::future::join_all(batch).await {
                    if r.is_ok() {
                        beats.fetch_add(1, Ordering::Relaxed);
                    }
                }
                let due = per_node * 32;
                let spent = batch_started.elapsed();
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(due.saturating_sub(spent)) => {}
                }
            }
        })
    };
    let ids = nodes.iter().map(|n| n.id.clone()).collect();
    Ok((ids, heartbeats, HeartbeatHandle { stop, task }))
}

/// Stops the simulated nodes' heartbeats when dropped.
pub struct HeartbeatHandle {
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HeartbeatHandle {
    fn drop(&mut self) {
        self.stop.cancel();
        self.task.abort();
    }
}

/// Call one of the servers (starting at `hint`), moving on when one fails.
async fn call_any(
    pool: &Pool,
    rpc: &[String],
    req: RpcRequest,
    hint: usize,
) -> anyhow::Result<RpcResponse> {
    let mut last = None;
    for k in 0..rpc.len() * 3 {
        let addr = &rpc[(hint + k) % rpc.len()];
        match pool
            .call_addr(addr, req.clone(), Duration::from_secs(30))
            .await
        {
            Ok(RpcResponse::NodeRegister(Err(e))) | Ok(RpcResponse::NodeUpdateStatus(Err(e))) => {
                last = Some(anyhow::anyhow!("{addr}: {e}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(r) => return Ok(r),
            Err(e) => {
                last = Some(anyhow::anyhow!("{addr}: {e}"));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no server")))
}

/// The job `i` of the run, as Nomad JSON.
pub fn job(cfg: &LoadConfig, i: usize) -> Value {
    let (job_type, count) = match cfg.shape {
        Shape::Service => ("service", cfg.count),
        Shape::Batch => ("batch", cfg.count),
        Shape::System => ("system", 1),
    };
    json!({
        "ID": format!("{}-{i}", cfg.job_prefix),
        "Type": job_type,
        "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g",
            "Count": count,
            "Tasks": [{
                "Name": "t",
                "Driver": "mock",
                "Config": { "run_for": "1h" },
                "Resources": { "CPU": cfg.alloc_cpu, "MemoryMB": cfg.alloc_memory_mb }
            }]
        }]
    })
}

/// Allocations placed for the run's jobs, from the job stubs' summaries, and the index.
async fn placed(api: &ApiClient, prefix: &str, index: u64) -> anyhow::Result<(u64, u64)> {
    let path = format!("/v1/jobs?prefix={prefix}-&index={index}&wait=5s&stale=true");
    let (stubs, index): (Vec<Value>, u64) = api.get_with_index(&path).await?;
    let mut n = 0u64;
    for s in &stubs {
        if let Some(groups) = s["JobSummary"]["Summary"].as_object() {
            for g in groups.values() {
                for k in ["Starting", "Running", "Complete", "Failed", "Lost"] {
                    n += g[k].as_u64().unwrap_or(0);
                }
            }
        }
    }
    Ok((n, index))
}

/// The sum of a Prometheus counter over its labels (0 when absent).
pub fn prom_sum(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| {
            l.starts_with(name) && matches!(l.as_bytes().get(name.len()), Some(b' ') | Some(b'{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// The scheduler-only ceiling: the same placements computed in-process on a state store
/// (no raft, no network, plans applied directly), one evaluation per job in turn.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SchedulerOnly {
    /// Allocations placed.
    pub placed: u64,
    /// Seconds spent scheduling and applying.
    pub seconds: f64,
    /// Allocations placed per second.
    pub placements_per_second: f64,
}

/// Run the load's placements through the schedulers alone (see [`SchedulerOnly`]).
pub fn scheduler_only(cfg: &LoadConfig) -> anyhow::Result<SchedulerOnly> {
    use teamster::scheduler::harness::Harness;
    use teamster::scheduler::harness::{mock_batch_job, mock_job, mock_node, mock_system_job};
    use teamster_storage::fsm::{Command, NodeRegister};

    let mut h = Harness::new();
    let nodes = (0..cfg.nodes as u64)
        .map(|n| {
            let mut node = mock_node(n);
            node.node_resources.cpu.cpu_shares = cfg.node_cpu_mhz;
            node.node_resources.memory.memory_mb = cfg.node_memory_mb;
            Command::NodeRegister(NodeRegister {
                node,
                evals: Vec::new(),
            })
        })
        .collect();
    h.apply(Command::Batch(nodes))?;
    let mut evals = Vec::with_capacity(cfg.jobs);
    for i in 0..cfg.jobs {
        let id = format!("{}-{i}", cfg.job_prefix);
        let mut job = match cfg.shape {
            Shape::Service => mock_job(&id, cfg.count),
            Shape::Batch => mock_batch_job(&id, cfg.count),
            Shape::System => mock_system_job(&id),
        };
        for group in &mut job.task_groups {
            for task in &mut group.tasks {
                task.resources.cpu = cfg.alloc_cpu;
                task.resources.memory_mb = cfg.alloc_memory_mb;
            }
        }
        job.canonicalize();
        let (_, eval) = h.register_job(job)?;
        evals.push(eval);
    }
    let started = Instant::now();
    for eval in &evals {
        h.process(eval)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let placed = h.snapshot().alloc_count() as u64;
    Ok(SchedulerOnly {
        placed,
        seconds,
        placements_per_second: placed as f64 / seconds.max(1e-9),
    })
}

/// Draw the report's plots as SVG into `dir`: `<name>-placements.svg` (allocations placed
/// over time) and `<name>-eval-latency.svg` (the distribution of evaluation latencies as a
/// cumulative curve).
pub fn plot(report: &Report, dir: &std::path::Path, name: &str) -> anyhow::Result<()> {
    use plotters::prelude::*;

    let placements = dir.join(format!("{name}-placements.svg"));
    {
        let root = SVGBackend::new(&placements, (800, 450)).into_drawing_area();
        root.fill(&WHITE)?;
        let t_max = report.samples.last().map_or(1.0, |s| s.t).max(0.001);
        let y_max = report
            .samples
            .iter()
            .map(|s| s.placed)
            .max()
            .unwrap_or(1)
            .max(1);
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "{name}: allocations placed ({:.0}/s overall)",
                    report.placements_per_second
                ),
                ("sans-serif", 20),
            )
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..t_max, 0u64..y_max)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the first job registration")
            .y_desc("allocations placed")
            .draw()?;
        chart.draw_series(LineSeries::new(
            report.samples.iter().map(|s| (s.t, s.placed)),
            &BLUE,
        ))?;
        root.present()?;
    }
    let latency = dir.join(format!("{name}-eval-latency.svg"));
    {
        let root = SVGBackend::new(&latency, (800, 450)).into_drawing_area();
        root.fill(&WHITE)?;
        let v = &report.eval_latencies_ms;
        let x_max = v.last().copied().unwrap_or(1.0).max(1.0);
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "{name}: evaluation latency (p50 {:.0} ms, p99 {:.0} ms)",
                    report.eval_latency_ms.get("p50").copied().unwrap_or(0.0),
                    report.eval_latency_ms.get("p99").copied().unwrap_or(0.0)
                ),
                ("sans-serif", 20),
            )
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..x_max, 0f64..1f64)?;
        chart
            .configure_mesh()
            .x_desc("milliseconds from creation to completion")
            .y_desc("fraction of evaluations")
            .draw()?;
        let n = v.len().max(1) as f64;
        chart.draw_series(LineSeries::new(
            v.iter()
                .enumerate()
                .map(|(i, ms)| (*ms, (i + 1) as f64 / n)),
            &RED,
        ))?;
        root.present()?;
    }
    Ok(())
}

/// Percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Run the load against the cluster; `pids` are the server processes to measure
/// (name, pid), when local.
pub async fn run(cfg: LoadConfig, pids: &[(String, u32)]) -> anyhow::Result<Report> {
    cfg.validate()?;
    let apis: Vec<ApiClient> = cfg.http.iter().map(|a| ApiClient::new(a)).collect();
    let cpu_before: Vec<f64> = pids.iter().map(|(_, p)| cpu_seconds(*p)).collect();

    let started = Instant::now();
    let (_ids, heartbeats, hb) = start_nodes(&cfg).await.context("registering nodes")?;
    let node_registration_seconds = started.elapsed().as_secs_f64();
    tracing::info!(
        nodes = cfg.nodes,
        secs = node_registration_seconds,
        "nodes registered"
    );

    let leader_api = &apis[0];
    let entries_before = raft_stat(leader_api, "last_log_index").await.unwrap_or(0);
    let t0 = Instant::now();
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..cfg.concurrency.min(cfg.jobs) {
        let (cfg, next) = (cfg.clone(), next.clone());
        let api = apis[w % apis.len()].clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= cfg.jobs {
                    return anyhow::Ok(());
                }
                let body = json!({ "Job": job(&cfg, i) });
                let mut tries = 0;
                loop {
                    match api
                        .request::<_, Value>(reqwest::Method::POST, "/v1/jobs", Some(&body))
                        .await
                    {
                        Ok(_) => break,
                        Err(e) if tries < 20 => {
                            tries += 1;
                            tracing::warn!(error = %e, "job registration failed, retrying");
                            tokio::time::sleep(Duration::from_millis(250)).await;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }));
    }
    // Follow placement while the registrations run.
    let want = cfg.expected_placements();
    let mut samples = Vec::new();
    let mut index = 0;
    let mut done_at = None;
    while t0.elapsed() < cfg.timeout {
        let (n, i) = placed(leader_api, &cfg.job_prefix, index).await?;
        index = i;
        samples.push(Sample {
            t: t0.elapsed().as_secs_f64(),
            placed: n,
        });
        if n >= want {
            done_at = Some(t0.elapsed());
            break;
        }
    }
    let job_registration_seconds = {
        for t in tasks {
            t.await??;
        }
        t0.elapsed().as_secs_f64()
    };
    let Some(done) = done_at else {
        bail!(
            "only {} of {want} allocations placed within {:?}",
            samples.last().map_or(0, |s| s.placed),
            cfg.timeout
        );
    };
    let placement_seconds = done.as_secs_f64();
    let entries_after = raft_stat(leader_api, "last_log_index").await.unwrap_or(0);
    let beats = heartbeats.load(Ordering::Relaxed);
    drop(hb);

    // Evaluations of the run's jobs, once the workers have written their last status (a
    // plan commits before its evaluation is marked complete): latency from creation to that
    // last update.
    let prefix = format!("{}-", cfg.job_prefix);
    let mut evals: Vec<Value>;
    let settle = Instant::now();
    loop {
        evals = leader_api
            .get("/v1/evaluations?stale=true")
            .await
            .context("listing evaluations")?;
        let pending = evals
            .iter()
            .filter(|e| e["JobID"].as_str().is_some_and(|j| j.starts_with(&prefix)))
            .any(|e| e["Status"] == "pending");
        if !pending || settle.elapsed() > Duration::from_secs(30) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut latencies: Vec<f64> = evals
        .iter()
        .filter(|e| e["JobID"].as_str().is_some_and(|j| j.starts_with(&prefix)))
        .filter(|e| e["Status"] == "complete")
        .filter_map(|e| {
            let c = e["CreateTime"].as_i64()?;
            let m = e["ModifyTime"].as_i64()?;
            Some((m - c) as f64 / 1e6)
        })
        .collect();
    latencies.sort_by(|a, b| a.total_cmp(b));
    let mut eval_latency_ms = BTreeMap::new();
    for (k, p) in [("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0)] {
        eval_latency_ms.insert(k.to_string(), percentile(&latencies, p));
    }
    // The leader's plan applier counters.
    let mut plan_node_rejections = 0;
    for api in &apis {
        let me: Value = api.get("/v1/agent/self").await.unwrap_or(Value::Null);
        if me["stats"]["nomad"]["leader"] == "true" {
            let text = api
                .request_text::<()>(reqwest::Method::GET, "/v1/metrics?format=prometheus", None)
                .await
                .unwrap_or_default();
            plan_node_rejections = prom_sum(&text, "teamster_plan_node_rejected_total");
        }
    }
    let placed_n = samples.last().map_or(0, |s| s.placed);
    let servers = pids
        .iter()
        .zip(cpu_before)
        .map(|((name, pid), before)| ProcessUse {
            name: name.clone(),
            leader: pid_is_first(pids, *pid),
            cpu_seconds: cpu_seconds(*pid) - before,
            peak_rss_mb: peak_rss_mb(*pid),
        })
        .collect();
    Ok(Report {
        node_registration_seconds,
        job_registration_seconds,
        placement_seconds,
        placed: placed_n,
        placements_per_second: placed_n as f64 / placement_seconds.max(1e-9),
        evals_completed: latencies.len() as u64,
        evals_per_second: latencies.len() as f64 / placement_seconds.max(1e-9),
        eval_latency_ms,
        eval_latencies_ms: latencies.clone(),
        plan_node_rejections,
        raft_entries_per_second: entries_after.saturating_sub(entries_before) as f64
            / placement_seconds.max(1e-9),
        heartbeats: beats,
        samples,
        servers,
        scheduler_only: None,
        config: cfg,
    })
}

/// Whether `pid` is the first listed (callers list the leader first).
fn pid_is_first(pids: &[(String, u32)], pid: u32) -> bool {
    pids.first().is_some_and(|(_, p)| *p == pid)
}

/// User + system CPU seconds of a process (0 when unreadable).
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz.max(1.0)
}

/// Peak resident set size of a process in MB (`VmHWM`; 0 when unreadable).
pub fn peak_rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_counters_are_summed_over_labels() {
        let text = "# TYPE x counter\nteamster_plan_node_rejected_total 3\n\
                    teamster_plan_node_rejected_total_other 100\n\
                    teamster_plan_applied_total{outcome=\"a\"} 2\n\
                    teamster_plan_applied_total{outcome=\"b\"} 5\n";
        assert_eq!(prom_sum(text, "teamster_plan_node_rejected_total"), 3);
        assert_eq!(prom_sum(text, "teamster_plan_applied_total"), 7);
    }

    #[test]
    fn percentiles_pick_from_sorted_values() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 51.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 1.0), 100.0);
        assert_eq!(percentile(&[], 0.5), 0.0);
    }

    #[test]
    fn the_scheduler_only_mode_places_every_allocation() {
        let cfg = LoadConfig {
            nodes: 50,
            jobs: 4,
            count: 25,
            ..LoadConfig::default()
        };
        let r = scheduler_only(&cfg).unwrap();
        assert_eq!(r.placed, 100);
        assert!(r.placements_per_second > 0.0);
        let system = LoadConfig {
            shape: Shape::System,
            jobs: 2,
            ..cfg
        };
        assert_eq!(scheduler_only(&system).unwrap().placed, 100);
    }

    #[test]
    fn expected_placements_follow_the_shape() {
        let mut c = LoadConfig {
            nodes: 10,
            jobs: 3,
            count: 7,
            ..LoadConfig::default()
        };
        assert_eq!(c.expected_placements(), 21);
        c.shape = Shape::System;
        assert_eq!(c.expected_placements(), 30);
    }
}
