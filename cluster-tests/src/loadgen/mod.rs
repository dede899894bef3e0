//! The load generator: simulated nodes and a burst of jobs against a real cluster, measured.
//!
//! One process registers `nodes` simulated client nodes ([`crate::sim`]): they heartbeat at
//! the TTL the leader hands out, watch their allocations with blocking `Node.GetClientAllocs`
//! queries and "run" them as the mock driver does, reporting status back in batches. Then
//! it registers `jobs` jobs of `count` allocations at a chosen concurrency through the HTTP
//! API and follows placement with blocking queries on `/v1/jobs` (whose stubs carry each
//! job's summary) until every allocation is placed, and then until every one is reported
//! running by its node. With `failover_at`, the leader is SIGKILLed once that fraction of the
//! allocations is placed and restarted at once; the run goes on through the other servers.
//!
//! The [`Report`] holds placements and evaluations per second, the broker's evaluation
//! latency (enqueue → ack, from its histogram on every server) percentiles and the
//! create → complete latency of every evaluation, plan rejections, raft entries and bytes
//! appended per second, what the simulated nodes did, and the CPU time and peak RSS of every
//! server process when they are local processes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;
use serde_json::{json, Value};
use teamster::api::ApiClient;

use crate::api::{metrics_text, raft_stat};
use crate::process::ProcessCluster;
use crate::sim::{SimConfig, SimNodes, SimTotals};
use crate::tls::TestCerts;

mod metrics;
mod plot;

pub use metrics::{bucket_quantile, cpu_seconds, peak_rss_mb, prom_buckets, prom_sum};
use metrics::{buckets_add, percentile};
pub use plot::plot;

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
    /// One parameterized batch job of `count`, dispatched `jobs` times (each child a job of
    /// `count` allocations): dispatch as a queue.
    Dispatch,
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
    /// The simulated nodes run their allocations (off: placement alone is measured).
    pub run_allocs: bool,
    /// The mock tasks' `run_for` (`"1h"`: they outlive the run).
    pub run_for: String,
    /// Kill the leader once this fraction of the allocations is placed (needs a cluster of
    /// local processes), restart it at once and carry on.
    pub failover_at: Option<f64>,
    /// The ACL token every API request carries (a cluster with ACLs on); a report shows
    /// that there was one, never the secret.
    #[serde(serialize_with = "redacted")]
    pub token: Option<String>,
    /// The simulated nodes send their secrets and report per node, as real clients do (a
    /// cluster with ACLs on refuses anything else).
    pub node_secrets: bool,
    /// The cluster's certificates when it speaks TLS: the API is reached over HTTPS with the
    /// CLI certificate and the simulated nodes speak mutual TLS with the client certificate.
    pub tls: Option<TestCerts>,
}

/// A secret in a report: whether there was one.
fn redacted<S: serde::Serializer>(secret: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_some(&secret.as_ref().map(|_| "<redacted>"))
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
            run_allocs: true,
            run_for: "1h".into(),
            failover_at: None,
            token: None,
            node_secrets: false,
            tls: None,
        }
    }
}

impl LoadConfig {
    /// A client of the API at `http`, with the run's token and TLS.
    pub fn api(&self, http: &str) -> anyhow::Result<ApiClient> {
        let api = match &self.tls {
            Some(certs) => ApiClient::with_tls(
                http,
                certs
                    .cli_files()
                    .client_config(crate::tls::REGION)
                    .context("loading the CLI certificate")?,
            ),
            None => ApiClient::new(http),
        };
        Ok(api.with_scope(teamster::api::RequestScope {
            token: self.token.clone(),
            ..Default::default()
        }))
    }

    /// Whether the run follows the allocations to completion: batch and dispatch shapes whose
    /// nodes run tasks that end within a minute.
    pub fn waits_for_completion(&self) -> bool {
        self.run_allocs
            && matches!(self.shape, Shape::Batch | Shape::Dispatch)
            && humantime::parse_duration(&self.run_for).is_ok_and(|d| d < Duration::from_secs(60))
    }

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
        if let Err(e) = humantime::parse_duration(&self.run_for) {
            bail!("run_for {:?}: {e}", self.run_for);
        }
        if self.failover_at.is_some_and(|f| !(0.0..1.0).contains(&f)) {
            bail!("failover_at must be a fraction in [0, 1)");
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
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Sample {
    /// Seconds since the first job registration.
    pub t: f64,
    /// Allocations placed so far.
    pub placed: u64,
    /// Allocations their nodes reported running (or already finished) so far.
    pub running: u64,
    /// Allocations their nodes reported complete so far.
    pub complete: u64,
    /// Allocations lost so far (their node went down); each is replaced, so `placed` counts
    /// it and its replacement.
    pub lost: u64,
    /// Task groups with more allocations starting or running than their count: an
    /// over-placement, which must never happen.
    pub over_count: u64,
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
    /// Seconds from the first job registration until every allocation was reported running
    /// (or finished) by its node, when the nodes run their allocations.
    pub running_seconds: Option<f64>,
    /// Seconds until every allocation was reported complete (batch and dispatch shapes
    /// whose tasks run for less than a minute).
    pub completed_seconds: Option<f64>,
    /// Completed evaluations of the run's jobs.
    pub evals_completed: u64,
    /// Evaluations completed per second.
    pub evals_per_second: f64,
    /// The brokers' evaluation latency, enqueue → ack, milliseconds: p50, p95, p99, max
    /// (interpolated within the histogram's buckets, which are ×1.25 apart).
    pub eval_latency_ms: BTreeMap<String, f64>,
    /// Evaluations the brokers acknowledged during the run (every server, every leader).
    pub evals_acked: u64,
    /// The brokers' latency histogram over the run: (bucket bound in seconds, evaluations
    /// acknowledged within it), cumulative.
    pub eval_latency_buckets: Vec<(f64, u64)>,
    /// Evaluation create → complete latency of each completed evaluation, milliseconds:
    /// p50, p95, p99, max.
    pub eval_completion_ms: BTreeMap<String, f64>,
    /// Every completed evaluation's create → complete latency, milliseconds, sorted.
    pub eval_completion_latencies_ms: Vec<f64>,
    /// Plans whose nodes the leader's plan applier rejected (a node did not fit).
    pub plan_node_rejections: u64,
    /// Raft log entries appended during the placement phase.
    pub raft_entries: u64,
    /// Encoded bytes of those entries.
    pub raft_bytes: u64,
    /// Raft log entries appended per second of the placement phase.
    pub raft_entries_per_second: f64,
    /// Raft log bytes appended per second of the placement phase.
    pub raft_bytes_per_second: f64,
    /// Heartbeats sent by the simulated nodes during the run.
    pub heartbeats: u64,
    /// What the simulated nodes did.
    pub sim: SimTotals,
    /// The failover, when the run had one.
    pub failover: Option<Failover>,
    /// Progress over time.
    pub samples: Vec<Sample>,
    /// Server processes (when local; the leader at the end first).
    pub servers: Vec<ProcessUse>,
    /// The scheduler-only ceiling for the same placements, when measured.
    pub scheduler_only: Option<SchedulerOnly>,
}

/// The leader failover in the middle of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Failover {
    /// The server killed (the leader then).
    pub killed: String,
    /// Seconds since the first job registration when it was killed.
    pub at_seconds: f64,
    /// Allocations placed when it was killed.
    pub at_placed: u64,
    /// The server that took over.
    pub new_leader: String,
    /// Seconds from the kill until every running server named the new leader.
    pub new_leader_seconds: f64,
}

/// The job `i` of the run, as Nomad JSON.
pub fn job(cfg: &LoadConfig, i: usize) -> Value {
    let (job_type, count) = match cfg.shape {
        Shape::Service => ("service", cfg.count),
        Shape::Batch | Shape::Dispatch => ("batch", cfg.count),
        Shape::System => ("system", 1),
    };
    let mut job = json!({
        "ID": format!("{}-{i}", cfg.job_prefix),
        "Type": job_type,
        "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g",
            "Count": count,
            "Tasks": [{
                "Name": "t",
                "Driver": "mock",
                "Config": { "run_for": cfg.run_for },
                "Resources": { "CPU": cfg.alloc_cpu, "MemoryMB": cfg.alloc_memory_mb }
            }]
        }]
    });
    if cfg.shape == Shape::Dispatch {
        job["ParameterizedJob"] = json!({ "Payload": "optional", "MetaOptional": ["n"] });
    }
    job
}

/// The parameterized parent of a dispatch run: its children `<prefix>-parent/dispatch-…`
/// fall under the run's job prefix.
pub fn dispatch_parent(cfg: &LoadConfig) -> Value {
    let mut parent = job(cfg, 0);
    parent["ID"] = Value::from(format!("{}-parent", cfg.job_prefix));
    parent
}

/// The part of a job stub (`GET /v1/jobs`) the load generator reads: its summary's counts
/// per task group. Every other field is skipped unparsed, so following a run of 10 000 jobs
/// costs the load generator's CPU little beside the cluster it measures.
#[derive(Debug, Default, serde::Deserialize)]
struct StubCounts {
    #[serde(rename = "JobSummary", default)]
    summary: Option<SummaryCounts>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct SummaryCounts {
    #[serde(rename = "Summary", default)]
    groups: BTreeMap<String, GroupCounts>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "PascalCase", default)]
struct GroupCounts {
    starting: u64,
    running: u64,
    complete: u64,
    failed: u64,
    lost: u64,
}

/// Allocations placed, running (or finished), complete and lost for the run's jobs, and the
/// task groups over `group_max` live allocations, from the job stubs' summaries (the sample's
/// `t` is left for the caller), with the index.
async fn placed(
    api: &ApiClient,
    prefix: &str,
    group_max: u64,
    index: u64,
) -> anyhow::Result<(Sample, u64)> {
    let path = format!("/v1/jobs?prefix={prefix}-&index={index}&wait=5s&stale=true");
    let (stubs, index): (Vec<StubCounts>, u64) = api.get_with_index(&path).await?;
    Ok((count_stubs(&stubs, group_max), index))
}

/// Sums the stubs' group counts into a sample (see [`placed`]).
fn count_stubs(stubs: &[StubCounts], group_max: u64) -> Sample {
    let mut c = Sample::default();
    for g in stubs
        .iter()
        .filter_map(|s| s.summary.as_ref())
        .flat_map(|s| s.groups.values())
    {
        c.placed += g.starting + g.running + g.complete + g.failed + g.lost;
        c.running += g.running + g.complete + g.failed;
        c.complete += g.complete;
        c.lost += g.lost;
        if g.starting + g.running > group_max {
            c.over_count += 1;
        }
    }
    c
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
            // A dispatched child is a plain batch job.
            Shape::Batch | Shape::Dispatch => mock_batch_job(&id, cfg.count),
            Shape::System => mock_system_job(&id),
        };
        for group in job.task_groups_mut() {
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

/// One server as the run measures it.
struct Measured {
    api: ApiClient,
    name: String,
    /// Its index in the process cluster, when the run has one.
    process: Option<usize>,
    pid: Option<u32>,
    /// CPU seconds of the current process when the run started (0 for a restarted one).
    cpu_start: f64,
    /// CPU seconds and peak RSS of earlier incarnations during the run.
    cpu_before: f64,
    rss_before: f64,
    /// Counters when the run started, and what earlier incarnations added.
    start: ServerCounters,
    earlier: ServerCounters,
    restarted: bool,
}

/// The counters read off one server.
#[derive(Debug, Clone, Default)]
struct ServerCounters {
    log_entries: u64,
    log_bytes: u64,
    latency: Vec<(f64, u64)>,
    node_rejections: u64,
}

/// Read a server's counters, trying a few times; zeros (logged) if it does not answer.
async fn read_counters(api: &ApiClient) -> ServerCounters {
    for attempt in 1..=3 {
        let text = metrics_text(api).await;
        let entries = raft_stat(api, "log_appended_entries").await;
        let bytes = raft_stat(api, "log_appended_bytes").await;
        match (text, entries, bytes) {
            (Ok(text), Ok(log_entries), Ok(log_bytes)) => {
                return ServerCounters {
                    log_entries,
                    log_bytes,
                    latency: prom_buckets(&text, teamster::server::broker::EVAL_LATENCY_METRIC),
                    node_rejections: prom_sum(&text, "teamster_plan_node_rejected_total"),
                }
            }
            _ if attempt < 3 => tokio::time::sleep(Duration::from_millis(200)).await,
            _ => {}
        }
    }
    tracing::warn!("a server's counters could not be read; counted as zero");
    ServerCounters::default()
}

impl Measured {
    /// What this server counted during the run (all its incarnations).
    fn during(&self, now: &ServerCounters) -> ServerCounters {
        let fresh = |n: u64, s: u64| n.saturating_sub(s);
        let (start, earlier) = (&self.start, &self.earlier);
        ServerCounters {
            log_entries: earlier.log_entries + fresh(now.log_entries, start.log_entries),
            log_bytes: earlier.log_bytes + fresh(now.log_bytes, start.log_bytes),
            latency: buckets_add(
                &earlier.latency,
                &buckets_add(&now.latency, &start.latency, true),
                false,
            ),
            node_rejections: earlier.node_rejections
                + fresh(now.node_rejections, start.node_rejections),
        }
    }
}

/// Run the load against the servers in `cfg`. With `cluster` (the local processes behind
/// those addresses) it also measures their CPU and memory and can fail the leader over.
pub async fn run(
    cfg: LoadConfig,
    mut cluster: Option<&mut ProcessCluster>,
) -> anyhow::Result<Report> {
    cfg.validate()?;
    if cfg.failover_at.is_some() && cluster.is_none() {
        bail!("a failover needs a cluster of local processes");
    }
    let mut servers = Vec::new();
    for (i, http) in cfg.http.iter().enumerate() {
        let process = cluster
            .as_deref()
            .and_then(|c| c.servers.iter().position(|s| s.http_addr() == *http));
        let (name, pid) = match (process, cluster.as_deref()) {
            (Some(p), Some(c)) => (c.servers[p].name.clone(), c.servers[p].pid()),
            _ => (format!("server-{i}"), None),
        };
        let api = cfg.api(http)?;
        servers.push(Measured {
            start: read_counters(&api).await,
            api,
            name,
            process,
            pid,
            cpu_start: pid.map_or(0.0, cpu_seconds),
            cpu_before: 0.0,
            rss_before: 0.0,
            earlier: ServerCounters::default(),
            restarted: false,
        });
    }

    let started = Instant::now();
    let sim_config = SimConfig {
        nodes: cfg.nodes,
        cpu_mhz: cfg.node_cpu_mhz,
        memory_mb: cfg.node_memory_mb,
        concurrency: cfg.concurrency,
        run_allocs: cfg.run_allocs,
        node_secrets: cfg.node_secrets,
        tls: match &cfg.tls {
            Some(certs) => Some(certs.agent_tls("client")?),
            None => None,
        },
    };
    let sim = SimNodes::start(&sim_config, &cfg.rpc)
        .await
        .context("registering nodes")?;
    let node_registration_seconds = started.elapsed().as_secs_f64();
    tracing::info!(
        nodes = cfg.nodes,
        secs = node_registration_seconds,
        "nodes registered"
    );
    // The placement phase's counters start here.
    for s in &mut servers {
        s.start = read_counters(&s.api).await;
    }

    let t0 = Instant::now();
    let registrations = register_jobs(cfg.clone(), servers.iter().map(|s| s.api.clone()).collect());

    // Follow placement (and then the nodes' reports) while the registrations run.
    let want = cfg.expected_placements();
    // The most allocations one task group may have live.
    let group_max = want / cfg.jobs.max(1) as u64;
    let mut samples: Vec<Sample> = Vec::new();
    // Follow on a follower (the first server listed is the leader), so the leader does not
    // spend its CPU on the load generator's own queries; a query's answer lists every job
    // of the run, so the next one starts no sooner than 8× that answer's time after it was
    // asked, and 100–250 ms after: following costs at most about a ninth of one core.
    let (mut index, mut follow) = (0, usize::from(servers.len() > 1));
    let (mut placed_at, mut running_at, mut failover) = (None, None, None);
    // Short batch tasks finish within the run: follow them to completion too.
    let wait_complete = cfg.waits_for_completion();
    let mut completed_at = None;
    let mut phase_end = None;
    tokio::pin!(registrations);
    let mut registered = None;
    while t0.elapsed() < cfg.timeout {
        if registered.is_none() {
            if let Some(r) = futures::FutureExt::now_or_never(&mut registrations) {
                r?;
                registered = Some(t0.elapsed());
            }
        }
        let asked = Instant::now();
        let (mut sample, i) =
            match placed(&servers[follow].api, &cfg.job_prefix, group_max, index).await {
                Ok(v) => v,
                Err(e) => {
                    tracing::debug!(error = %e, "following placement: moving to another server");
                    follow = (follow + 1) % servers.len();
                    index = 0;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
        index = i;
        sample.t = t0.elapsed().as_secs_f64();
        samples.push(sample);
        let Sample {
            placed: n,
            running,
            complete,
            ..
        } = sample;
        let pause = (asked.elapsed() * 8)
            .clamp(Duration::from_millis(100), Duration::from_millis(250))
            .saturating_sub(asked.elapsed());
        if n >= want && placed_at.is_none() {
            placed_at = Some(t0.elapsed());
            phase_end = Some(read_all(&servers).await);
        }
        if placed_at.is_some() && cfg.run_allocs && running >= want && running_at.is_none() {
            running_at = Some(t0.elapsed());
        }
        if wait_complete && complete >= want && completed_at.is_none() {
            completed_at = Some(t0.elapsed());
        }
        if placed_at.is_some()
            && (!cfg.run_allocs || running_at.is_some())
            && (!wait_complete || completed_at.is_some())
        {
            break;
        }
        if let (Some(frac), None, Some(c)) = (cfg.failover_at, &failover, cluster.as_deref_mut()) {
            if placed_at.is_none() && n as f64 >= frac * want as f64 {
                let f = fail_over(c, &mut servers, t0, n).await?;
                let survivor = |s: &Measured| s.name != f.killed && s.name != f.new_leader;
                follow = servers
                    .iter()
                    .position(survivor)
                    .or_else(|| servers.iter().position(|s| s.name == f.new_leader))
                    .unwrap_or(0);
                index = 0;
                failover = Some(f);
                continue;
            }
        }
        // Waits on a blocking query are cut short by changes; this bounds how often.
        tokio::time::sleep(pause).await;
    }
    let Some(done) = placed_at else {
        bail!(
            "only {} of {want} allocations placed within {:?}",
            samples.last().map_or(0, |s| s.placed),
            cfg.timeout
        );
    };
    if cfg.run_allocs && running_at.is_none() {
        bail!(
            "only {} of {want} allocations reported running within {:?}",
            samples.last().map_or(0, |s| s.running),
            cfg.timeout
        );
    }
    let job_registration_seconds = match registered {
        Some(t) => t.as_secs_f64(),
        None => {
            registrations.await?;
            t0.elapsed().as_secs_f64()
        }
    };
    let placement_seconds = done.as_secs_f64();
    // The servers applied every report; let the batcher hear their answers before counting.
    let settle = Instant::now();
    while cfg.run_allocs && settle.elapsed() < Duration::from_secs(10) {
        let t = sim.counters.totals();
        if t.reports_accepted >= t.allocs_started {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sim_totals = sim.counters.totals();
    drop(sim);

    // Evaluations of the run's jobs, once the workers have written their last status (a
    // plan commits before its evaluation is marked complete).
    let follow_api = &servers[follow].api;
    let prefix = format!("{}-", cfg.job_prefix);
    let mut evals: Vec<Value>;
    let settle = Instant::now();
    loop {
        evals = follow_api
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
    let mut completion: Vec<f64> = evals
        .iter()
        .filter(|e| e["JobID"].as_str().is_some_and(|j| j.starts_with(&prefix)))
        .filter(|e| e["Status"] == "complete")
        .filter_map(|e| {
            let c = e["CreateTime"].as_i64()?;
            let m = e["ModifyTime"].as_i64()?;
            Some((m - c) as f64 / 1e6)
        })
        .collect();
    completion.sort_by(|a, b| a.total_cmp(b));
    let mut eval_completion_ms = BTreeMap::new();
    for (k, p) in [("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0)] {
        eval_completion_ms.insert(k.to_string(), percentile(&completion, p));
    }

    // The brokers' histograms and the plan appliers' rejections, summed over every server
    // (each leader's broker saw part of the run); raft volume off a server that never
    // restarted (every one appends the whole log).
    // A worker acks after it marked its evaluation complete: give the last acks a moment.
    let settle = Instant::now();
    let (end, latency, plan_node_rejections) = loop {
        let end = read_all(&servers).await;
        let mut latency: Vec<(f64, u64)> = Vec::new();
        let mut rejections = 0;
        for (s, now) in servers.iter().zip(&end) {
            let d = s.during(now);
            latency = buckets_add(&latency, &d.latency, false);
            rejections += d.node_rejections;
        }
        let acked = latency.last().map_or(0, |(_, c)| *c);
        if acked >= completion.len() as u64 || settle.elapsed() > Duration::from_secs(5) {
            break (end, latency, rejections);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let phase_end = phase_end.unwrap_or(end);
    let (raft_entries, raft_bytes) = servers
        .iter()
        .zip(&phase_end)
        .filter(|(s, _)| !s.restarted)
        .map(|(s, now)| {
            let d = s.during(now);
            (d.log_entries, d.log_bytes)
        })
        .max()
        .unwrap_or_default();
    let mut eval_latency_ms = BTreeMap::new();
    for (k, q) in [("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0)] {
        eval_latency_ms.insert(k.to_string(), 1_000.0 * bucket_quantile(&latency, q));
    }
    let evals_acked = latency.last().map_or(0, |(_, c)| *c);

    let placed_n = samples.last().map_or(0, |s| s.placed);
    let mut usage = Vec::new();
    for s in &servers {
        let Some(pid) = s.pid else { continue };
        let me: Value = s.api.get("/v1/agent/self").await.unwrap_or(Value::Null);
        usage.push(ProcessUse {
            name: s.name.clone(),
            leader: me["stats"]["nomad"]["leader"] == "true",
            cpu_seconds: s.cpu_before + cpu_seconds(pid) - s.cpu_start,
            peak_rss_mb: s.rss_before.max(peak_rss_mb(pid)),
        });
    }
    usage.sort_by_key(|u| !u.leader);
    let per_second = |n: u64| n as f64 / placement_seconds.max(1e-9);
    Ok(Report {
        node_registration_seconds,
        job_registration_seconds,
        placement_seconds,
        placed: placed_n,
        placements_per_second: per_second(placed_n),
        running_seconds: running_at.map(|t| t.as_secs_f64()),
        completed_seconds: completed_at.map(|t| t.as_secs_f64()),
        evals_completed: completion.len() as u64,
        evals_per_second: per_second(completion.len() as u64),
        eval_latency_ms,
        evals_acked,
        eval_latency_buckets: latency,
        eval_completion_ms,
        eval_completion_latencies_ms: completion,
        plan_node_rejections,
        raft_entries,
        raft_bytes,
        raft_entries_per_second: per_second(raft_entries),
        raft_bytes_per_second: per_second(raft_bytes),
        heartbeats: sim_totals.heartbeats,
        sim: sim_totals,
        failover,
        samples,
        servers: usage,
        scheduler_only: None,
        config: cfg,
    })
}

async fn read_all(servers: &[Measured]) -> Vec<ServerCounters> {
    let mut out = Vec::with_capacity(servers.len());
    for s in servers {
        out.push(read_counters(&s.api).await);
    }
    out
}

/// Register the run's jobs, `concurrency` at a time; a call that fails is retried on the
/// next server (through a failover) for up to a minute.
async fn register_jobs(cfg: LoadConfig, apis: Vec<ApiClient>) -> anyhow::Result<()> {
    let dispatch_path = if cfg.shape == Shape::Dispatch {
        let parent = dispatch_parent(&cfg);
        let path = format!(
            "/v1/job/{}/dispatch",
            parent["ID"].as_str().unwrap_or_default()
        );
        apis[0]
            .request::<_, Value>(
                reqwest::Method::POST,
                "/v1/jobs",
                Some(&json!({ "Job": parent })),
            )
            .await
            .context("registering the parameterized parent")?;
        Some(path)
    } else {
        None
    };
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for w in 0..cfg.concurrency.min(cfg.jobs) {
        let (cfg, next, apis) = (cfg.clone(), next.clone(), apis.clone());
        let dispatch_path = dispatch_path.clone();
        tasks.push(tokio::spawn(async move {
            let mut api = w % apis.len();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                if i >= cfg.jobs {
                    return anyhow::Ok(());
                }
                // A dispatch carries its number as meta and as its idempotency token, so a
                // retried call does not launch a second child.
                let (path, body) = match &dispatch_path {
                    Some(path) => (
                        path.as_str(),
                        json!({ "Meta": { "n": i.to_string() }, "IdempotencyToken": format!("n-{i}") }),
                    ),
                    None => ("/v1/jobs", json!({ "Job": job(&cfg, i) })),
                };
                let mut tries = 0;
                loop {
                    match apis[api]
                        .request::<_, Value>(reqwest::Method::POST, path, Some(&body))
                        .await
                    {
                        Ok(_) => break,
                        Err(e) if tries < 240 => {
                            tries += 1;
                            api = (api + 1) % apis.len();
                            tracing::debug!(error = %e, "job registration failed, retrying");
                            tokio::time::sleep(Duration::from_millis(250)).await;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(())
}

/// SIGKILL the leader, wait for the survivors to agree on a new one, and start the killed
/// server again (it catches up while the run goes on).
async fn fail_over(
    cluster: &mut ProcessCluster,
    servers: &mut [Measured],
    t0: Instant,
    at_placed: u64,
) -> anyhow::Result<Failover> {
    let leader = cluster.wait_leader(Duration::from_secs(30)).await?;
    let Some(s) = servers.iter_mut().find(|s| s.process == Some(leader)) else {
        bail!("the leader is not one of the measured servers");
    };
    let before = read_counters(&s.api).await;
    if let Some(pid) = s.pid {
        s.cpu_before += cpu_seconds(pid) - s.cpu_start;
        s.rss_before = s.rss_before.max(peak_rss_mb(pid));
    }
    let at = t0.elapsed();
    s.earlier = s.during(&before);
    cluster.kill(leader);
    tracing::info!(server = %s.name, placed = at_placed, "leader killed");
    let new_leader = cluster.wait_leader(Duration::from_secs(60)).await?;
    let new_leader_seconds = (t0.elapsed() - at).as_secs_f64();
    cluster.restart(leader)?;
    s.pid = cluster.servers[leader].pid();
    s.cpu_start = 0.0;
    s.start = ServerCounters::default();
    s.restarted = true;
    tracing::info!(new_leader = %cluster.servers[new_leader].name, secs = new_leader_seconds, "new leader");
    Ok(Failover {
        killed: s.name.clone(),
        at_seconds: at.as_secs_f64(),
        at_placed,
        new_leader: cluster.servers[new_leader].name.clone(),
        new_leader_seconds,
    })
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
    fn job_stubs_are_counted_from_their_summaries_alone() {
        let text = r#"[
            {"ID": "load-0", "Type": "batch", "Status": "running", "Meta": {"a": "b"},
             "JobSummary": {"JobID": "load-0", "Summary": {
                "g": {"Queued": 9, "Starting": 1, "Running": 2, "Complete": 3,
                      "Failed": 4, "Lost": 5, "Unknown": 0}}}},
            {"ID": "load-1", "JobSummary": {"Summary": {
                "a": {"Running": 1}, "b": {"Starting": 2, "Running": 1}}}},
            {"ID": "load-2", "JobSummary": null},
            {"ID": "load-3"}
        ]"#;
        let stubs: Vec<StubCounts> = serde_json::from_str(text).unwrap();
        let c = count_stubs(&stubs, 2);
        assert_eq!(c.placed, 15 + 1 + 3);
        assert_eq!(c.running, 9 + 1 + 1);
        assert_eq!(c.complete, 3);
        assert_eq!(c.lost, 5);
        // Starting + Running over 2: "g" (3) and "b" (3), not "a" (1).
        assert_eq!(c.over_count, 2);
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
