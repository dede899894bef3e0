//! `teamster-loadgen`: simulated nodes and a burst of jobs against a teamster cluster, measured.
//!
//! By default it starts a 3-server cluster of real processes on loopback (the `teamster`
//! binary next to this one, or `TEAMSTER_BIN`); `--http`/`--rpc` attach to a running cluster
//! instead. It prints a summary and writes the whole report as JSON (`--out`).
//!
//! ```text
//! cargo build --release -p teamster -p teamster-cluster-tests
//! target/x86_64-unknown-linux-gnu/release/teamster-loadgen --nodes 5000 --jobs 100 --count 1000 --out c1m.json
//! target/x86_64-unknown-linux-gnu/release/teamster-loadgen --failover-at 0.5 --name failover   # the leader dies mid-run
//! target/x86_64-unknown-linux-gnu/release/teamster-loadgen --shape dispatch --jobs 10000 --count 1 --run-for 2s
//! ```

use std::time::Duration;

use anyhow::Context;
use clap::{Parser, ValueEnum};
use teamster_cluster_tests::loadgen::{self, LoadConfig, Shape};
use teamster_cluster_tests::process::{
    keep_if_asked, ClusterOptions, ProcessCluster, SIMULATED_CLIENTS_LIMITS,
};
use teamster_cluster_tests::tls::TestCerts;

/// The servers' allocator, so that the scheduler-only ceiling measured here compares with
/// them (and the simulated nodes cost the machine less).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ShapeArg {
    Service,
    Batch,
    System,
    /// `--jobs` dispatches of one parameterized batch job of `--count`.
    Dispatch,
}

/// Load generator for teamster clusters.
#[derive(Debug, Parser)]
#[command(name = "teamster-loadgen")]
struct Args {
    /// Simulated client nodes.
    #[arg(long, default_value_t = 5_000)]
    nodes: usize,
    /// Jobs to register.
    #[arg(long, default_value_t = 100)]
    jobs: usize,
    /// Allocations per job (service and batch).
    #[arg(long, default_value_t = 1_000)]
    count: u32,
    /// Job type.
    #[arg(long, value_enum, default_value = "service")]
    shape: ShapeArg,
    /// Concurrent registrations.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Attach to these server HTTP addresses instead of starting a cluster.
    #[arg(long, value_delimiter = ',', requires = "rpc")]
    http: Vec<String>,
    /// The attached servers' RPC addresses.
    #[arg(long, value_delimiter = ',', requires = "http")]
    rpc: Vec<String>,
    /// Scheduler workers per server of a started cluster.
    #[arg(long)]
    num_schedulers: Option<u32>,
    /// The simulated nodes only register and heartbeat; they do not run their allocations.
    #[arg(long)]
    no_run_allocs: bool,
    /// How long the mock tasks run (`Config.run_for`).
    #[arg(long, default_value = "1h")]
    run_for: String,
    /// Kill the leader once this fraction of the allocations is placed, then restart it
    /// (only with a cluster this tool starts).
    #[arg(long, conflicts_with = "http")]
    failover_at: Option<f64>,
    /// Extra TOML lines for the started servers' `[server.raft]` table (e.g.
    /// `max_append_entries = 32`).
    #[arg(long, default_value = "", conflicts_with = "http")]
    raft_toml: String,
    /// Extra TOML lines for the started servers' `[server.workers]` table (e.g.
    /// `max_batch = 1` to schedule one evaluation per round).
    #[arg(long, default_value = "", conflicts_with = "http")]
    workers_toml: String,
    /// Give up after this long.
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Only run the placements through the schedulers in-process (no cluster, no raft).
    #[arg(long)]
    scheduler_only: bool,
    /// Write the JSON report here.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
    /// Draw SVG plots into this directory (named after `--name`).
    #[arg(long)]
    plots: Option<std::path::PathBuf>,
    /// A name for the run, used in plot titles and file names.
    #[arg(long, default_value = "run")]
    name: String,
    /// Start the cluster with ACLs on, bootstrap it, and send the management token with
    /// every API request (implies `--node-secrets`).
    #[arg(long, conflicts_with = "http")]
    acl: bool,
    /// Start the cluster with TLS on every port (certificates made by `teamster tls` in a
    /// temporary directory): the API over HTTPS with a CLI certificate, the simulated nodes
    /// over mutual TLS with a client certificate.
    #[arg(long, conflicts_with = "http")]
    tls: bool,
    /// The simulated nodes send their secrets and report per node, as real clients do
    /// (the baseline of an `--acl` run).
    #[arg(long)]
    node_secrets: bool,
    /// The ACL token of an attached cluster (`--http`).
    #[arg(long, env = "NOMAD_TOKEN", requires = "http")]
    token: Option<String>,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    if std::env::var_os("TEAMSTER_BIN").is_none() {
        let exe = std::env::current_exe()?;
        if let Some(dir) = exe.parent() {
            std::env::set_var("TEAMSTER_BIN", dir.join("teamster"));
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run(args))
}

async fn run(args: Args) -> anyhow::Result<()> {
    if args.scheduler_only {
        let cfg = load_config(&args, vec!["-".into()], vec!["-".into()]);
        let r = tokio::task::spawn_blocking(move || loadgen::scheduler_only(&cfg)).await??;
        println!(
            "scheduler only: placed {} allocations in {:.2}s: {:.0} placements/s",
            r.placed, r.seconds, r.placements_per_second
        );
        if let Some(path) = &args.out {
            std::fs::write(path, serde_json::to_vec_pretty(&r)?)?;
        }
        return Ok(());
    }
    let mut cluster = None;
    let mut scratch = tempfile::Builder::new()
        .prefix("teamster-loadgen-")
        .tempdir()?;
    // A kept cluster's configs name these certificates.
    keep_if_asked(&mut scratch);
    let certs = if args.tls {
        Some(TestCerts::make(&scratch.path().join("tls"))?)
    } else {
        None
    };
    let (http, rpc) = if args.http.is_empty() {
        let mut server_toml = String::from("max_heartbeats_per_second = 50.0\n");
        if let Some(n) = args.num_schedulers {
            server_toml.push_str(&format!("num_schedulers = {n}\n"));
        }
        if args.acl {
            // A table of its own after the [server] lines.
            server_toml.push_str("[acl]\nenabled = true\n");
        }
        let mut c = ProcessCluster::start(
            3,
            ClusterOptions {
                server_toml,
                heartbeat: "100ms",
                election_timeout: "1s",
                raft_toml: args.raft_toml.replace("\\n", "\n"),
                workers_toml: args.workers_toml.replace("\\n", "\n"),
                // Thousands of simulated clients share this host's one address.
                extra_toml: certs
                    .as_ref()
                    .map(|c| c.agent_toml("server"))
                    .unwrap_or_default()
                    + SIMULATED_CLIENTS_LIMITS,
                api_tls: certs.as_ref().map(TestCerts::cli_files),
            },
        )?;
        let leader = c.wait_leader(Duration::from_secs(30)).await?;
        // The leader first: the run follows placement on it until it fails.
        let mut order: Vec<usize> = (0..3).collect();
        order.retain(|&i| i != leader);
        order.insert(0, leader);
        let http = order.iter().map(|&i| c.servers[i].http_addr()).collect();
        let rpc = order.iter().map(|&i| c.servers[i].rpc_addr()).collect();
        cluster = Some(c);
        (http, rpc)
    } else {
        (args.http.clone(), args.rpc.clone())
    };
    let mut cfg = load_config(&args, http, rpc);
    cfg.tls = certs;
    if args.acl {
        cfg.token = Some(bootstrap(&cfg).await?);
    }
    let mut report = loadgen::run(cfg.clone(), cluster.as_mut()).await?;
    drop(cluster);
    // The ceiling, measured in the same run on the same machine, now that the cluster is gone.
    let ceiling = tokio::task::spawn_blocking(move || loadgen::scheduler_only(&cfg)).await??;
    report.scheduler_only = Some(ceiling);
    print_report(&report);
    if let Some(dir) = &args.plots {
        std::fs::create_dir_all(dir)?;
        loadgen::plot(&report, dir, &args.name)?;
    }
    if let Some(path) = &args.out {
        std::fs::write(path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The management token of a cluster started with ACLs on.
async fn bootstrap(cfg: &LoadConfig) -> anyhow::Result<String> {
    let api = cfg.api(&cfg.http[0])?;
    let token: serde_json::Value = api
        .request(
            reqwest::Method::PUT,
            "/v1/acl/bootstrap",
            Some(&serde_json::json!({})),
        )
        .await
        .context("bootstrapping the ACLs")?;
    token["SecretID"]
        .as_str()
        .map(str::to_string)
        .context("the bootstrap answered no SecretID")
}

fn load_config(args: &Args, http: Vec<String>, rpc: Vec<String>) -> LoadConfig {
    LoadConfig {
        http,
        rpc,
        nodes: args.nodes,
        jobs: args.jobs,
        count: args.count,
        shape: match args.shape {
            ShapeArg::Service => Shape::Service,
            ShapeArg::Batch => Shape::Batch,
            ShapeArg::System => Shape::System,
            ShapeArg::Dispatch => Shape::Dispatch,
        },
        concurrency: args.concurrency,
        timeout: args.timeout,
        run_allocs: !args.no_run_allocs,
        run_for: args.run_for.clone(),
        failover_at: args.failover_at,
        token: args.token.clone(),
        node_secrets: args.node_secrets || args.acl || args.token.is_some(),
        ..LoadConfig::default()
    }
}

fn print_report(report: &loadgen::Report) {
    let ms =
        |m: &std::collections::BTreeMap<String, f64>, k: &str| m.get(k).copied().unwrap_or(0.0);
    let what = if report.config.shape == Shape::Dispatch {
        "dispatched"
    } else {
        "registered"
    };
    println!(
        "security: TLS {}, ACLs {}",
        if report.config.tls.is_some() {
            "on"
        } else {
            "off"
        },
        if report.config.token.is_some() {
            "on"
        } else {
            "off"
        },
    );
    println!(
        "{what} {} jobs in {:.2}s: {:.0}/s",
        report.config.jobs,
        report.job_registration_seconds,
        report.config.jobs as f64 / report.job_registration_seconds.max(1e-9),
    );
    println!(
        "placed {} allocations in {:.2}s: {:.0} placements/s; {} evals ({:.1}/s)",
        report.placed,
        report.placement_seconds,
        report.placements_per_second,
        report.evals_completed,
        report.evals_per_second,
    );
    let over = report
        .samples
        .iter()
        .map(|s| s.over_count)
        .max()
        .unwrap_or(0);
    if over > 0 {
        println!("OVER-PLACEMENT: {over} task groups had more live allocations than their count");
    }
    let lost = report.samples.last().map_or(0, |s| s.lost);
    if lost > 0 {
        println!(
            "{lost} allocations were lost (their node went down) and replaced; both are counted"
        );
    }
    if let Some(t) = report.running_seconds {
        println!(
            "every allocation reported running by its node after {t:.2}s ({} reports in {} Node.UpdateAlloc calls)",
            report.sim.reports_accepted, report.sim.update_calls
        );
    }
    if let Some(t) = report.completed_seconds {
        println!(
            "every allocation reported complete after {t:.2}s: {:.0} completions/s",
            report.placed as f64 / t.max(1e-9)
        );
    }
    println!(
        "eval latency enqueue → ack ({} acks): p50 {:.0} ms, p95 {:.0} ms, p99 {:.0} ms, max {:.0} ms; create → complete p50 {:.0} ms, p99 {:.0} ms",
        report.evals_acked,
        ms(&report.eval_latency_ms, "p50"),
        ms(&report.eval_latency_ms, "p95"),
        ms(&report.eval_latency_ms, "p99"),
        ms(&report.eval_latency_ms, "max"),
        ms(&report.eval_completion_ms, "p50"),
        ms(&report.eval_completion_ms, "p99"),
    );
    println!(
        "{} plan node rejections; raft {:.0} entries/s, {:.1} MB/s ({} entries, {:.1} MB)",
        report.plan_node_rejections,
        report.raft_entries_per_second,
        report.raft_bytes_per_second / 1e6,
        report.raft_entries,
        report.raft_bytes as f64 / 1e6,
    );
    println!(
        "nodes registered in {:.2}s; {} heartbeats; {} allocation queries answered",
        report.node_registration_seconds, report.heartbeats, report.sim.alloc_queries
    );
    if let Some(f) = &report.failover {
        println!(
            "failover: {} killed at {:.2}s with {} placed; {} led {:.2}s later",
            f.killed, f.at_seconds, f.at_placed, f.new_leader, f.new_leader_seconds
        );
    }
    for s in &report.servers {
        println!(
            "  {}{}: {:.1} CPU s, peak RSS {:.0} MB",
            s.name,
            if s.leader { " (leader)" } else { "" },
            s.cpu_seconds,
            s.peak_rss_mb
        );
    }
    if let Some(c) = &report.scheduler_only {
        println!(
            "scheduler only (same placements in-process, no raft): {:.0} placements/s; end to end reached {:.0}% of it",
            c.placements_per_second,
            100.0 * report.placements_per_second / c.placements_per_second.max(1e-9)
        );
    }
}
