//! The load generator in a small configuration (200 simulated nodes × 20 jobs of 10) against
//! a real 3-server cluster: it completes, the simulated nodes run what is placed on them,
//! and its report agrees with the cluster's state; then 40 jobs of 5 registered one at a time
//! with the leader killed in the middle of the run.

use std::time::Duration;

use serde_json::Value;
use teamster::api::ApiClient;
use teamster_cluster_tests::invariants::{no_group_over_count, no_node_over_capacity, Checked};
use teamster_cluster_tests::loadgen::{self, LoadConfig, Report, Shape};
use teamster_cluster_tests::process::{ClusterOptions, ProcessCluster};

/// A 3-server cluster and a small load's configuration against it, the leader listed first.
async fn small_load(prefix: &str) -> anyhow::Result<(ProcessCluster, LoadConfig)> {
    let mut c = ProcessCluster::start(3, ClusterOptions::default())?;
    let leader = c.wait_leader(Duration::from_secs(30)).await?;
    let mut order: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    order.insert(0, leader);
    let cfg = LoadConfig {
        http: order.iter().map(|&i| c.servers[i].http_addr()).collect(),
        rpc: order.iter().map(|&i| c.servers[i].rpc_addr()).collect(),
        nodes: 200,
        jobs: 20,
        count: 10,
        shape: Shape::Service,
        concurrency: 8,
        timeout: Duration::from_secs(120),
        job_prefix: prefix.into(),
        ..LoadConfig::default()
    };
    Ok((c, cfg))
}

/// The cluster holds exactly what the report says: every allocation of the run live,
/// running on its node, within capacity and counts, and every simulated node ready.
async fn check_against_cluster(
    api: &ApiClient,
    report: &Report,
    prefix: &str,
) -> anyhow::Result<()> {
    let allocs: Vec<Value> = api.get("/v1/allocations?prefix=").await?;
    let live: Vec<&Value> = allocs
        .iter()
        .filter(|a| {
            a["JobID"]
                .as_str()
                .is_some_and(|j| j.starts_with(&format!("{prefix}-")))
        })
        .filter(|a| a["DesiredStatus"] == "run")
        .collect();
    assert_eq!(live.len() as u64, report.placed);
    let not_running: Vec<&&Value> = live
        .iter()
        .filter(|a| a["ClientStatus"] != "running")
        .collect();
    assert!(not_running.is_empty(), "not running: {not_running:?}");
    let nodes: Vec<Value> = api.get("/v1/nodes").await?;
    assert_eq!(nodes.len(), 200);
    assert!(
        nodes.iter().all(|n| n["Status"] == "ready"),
        "every simulated node stays ready"
    );
    assert!(matches!(
        no_node_over_capacity(api).await?,
        Checked::Held(_)
    ));
    assert!(matches!(no_group_over_count(api).await?, Checked::Held(_)));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_load_run_places_everything_and_reports_what_the_cluster_holds(
) -> anyhow::Result<()> {
    let (mut c, cfg) = small_load("small").await?;
    let api = ApiClient::new(&cfg.http[0]);
    let report = loadgen::run(cfg, Some(&mut c)).await?;
    assert_eq!(report.placed, 200);
    assert!(report.placements_per_second > 0.0);
    assert_eq!(report.samples.last().map(|s| s.placed), Some(200));
    assert_eq!(report.samples.last().map(|s| s.running), Some(200));
    assert!(report.running_seconds.unwrap() >= report.placement_seconds);
    assert!(report.evals_completed >= 20, "{}", report.evals_completed);
    assert_eq!(
        report.eval_completion_latencies_ms.len() as u64,
        report.evals_completed
    );
    // Every completed evaluation was acknowledged by the broker, and the histogram's
    // percentiles are ordered.
    assert!(report.evals_acked >= report.evals_completed, "{report:?}");
    let l = &report.eval_latency_ms;
    assert!(
        l["p50"] > 0.0 && l["p50"] <= l["p99"] && l["p99"] <= l["max"],
        "{l:?}"
    );
    // Raft volume: entries (commands are batched into entries) carrying every placed
    // allocation, which alone takes well over 200 bytes encoded.
    eprintln!(
        "raft: {} entries, {} bytes",
        report.raft_entries, report.raft_bytes
    );
    assert!(report.raft_entries > 0);
    assert!(
        report.raft_bytes > report.placed * 200,
        "{} bytes for {} entries",
        report.raft_bytes,
        report.raft_entries
    );
    assert!(report.raft_bytes_per_second > 0.0);
    // The nodes ran everything and the servers took every report.
    assert_eq!(report.sim.allocs_started, 200);
    assert!(report.sim.reports_accepted >= 200);
    assert!(report.sim.update_calls >= 1);
    assert!(report.failover.is_none());
    assert_eq!(report.servers.len(), 3);
    assert!(report.servers[0].leader);
    assert!(report.servers.iter().all(|s| s.peak_rss_mb > 0.0));

    // The plots are drawn.
    let dir = tempfile::tempdir()?;
    loadgen::plot(&report, dir.path(), "small")?;
    for f in ["small-placements.svg", "small-eval-latency.svg"] {
        let svg = std::fs::read_to_string(dir.path().join(f))?;
        assert!(svg.contains("<svg") && svg.contains("polyline"), "{f}");
    }

    check_against_cluster(&api, &report, "small").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_run_survives_its_leader_being_killed_half_way() -> anyhow::Result<()> {
    let (mut c, mut cfg) = small_load("fo").await?;
    cfg.failover_at = Some(0.5);
    // Workers schedule waiting evaluations in batches, so twenty jobs registered at once
    // can be placed between two samples and the run never shows half of them placed:
    // register them one at a time, in forty steps of five.
    cfg.concurrency = 1;
    cfg.jobs = 40;
    cfg.count = 5;
    let old_leader = c.wait_leader(Duration::from_secs(10)).await?;
    let report = loadgen::run(cfg, Some(&mut c)).await?;
    let f = report.failover.clone().expect("a failover happened");
    assert_eq!(f.killed, c.servers[old_leader].name);
    assert_ne!(f.new_leader, f.killed);
    assert!(f.at_placed >= 100 && f.at_placed < 200, "{f:?}");
    assert_eq!(report.placed, 200);
    assert_eq!(report.samples.last().map(|s| s.running), Some(200));
    assert!(report.placement_seconds > f.at_seconds);
    assert!(report.raft_bytes > 0);

    // The killed server came back and the cluster agrees on a leader; it holds exactly
    // the run, with nothing placed twice.
    let leader = c.wait_leader(Duration::from_secs(30)).await?;
    assert!(c.servers[old_leader].is_running());
    check_against_cluster(&c.servers[leader].api(), &report, "fo").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatch_run_launches_one_child_per_dispatch_and_places_them_all() -> anyhow::Result<()>
{
    let (mut c, mut cfg) = small_load("disp").await?;
    cfg.shape = Shape::Dispatch;
    cfg.jobs = 40;
    cfg.count = 5;
    let api = ApiClient::new(&cfg.http[0]);
    let report = loadgen::run(cfg, Some(&mut c)).await?;
    assert_eq!(report.placed, 200);
    assert!(report.job_registration_seconds > 0.0);
    let children: Vec<Value> = api.get("/v1/jobs?prefix=disp-parent%2F").await?;
    assert_eq!(children.len(), 40, "one child per dispatch");
    assert!(children.iter().all(
        |j| j["ParentID"] == "disp-parent" && j["ID"].as_str().unwrap().contains("/dispatch-")
    ));
    let parent: Value = api.get("/v1/job/disp-parent/allocations").await?;
    assert_eq!(
        parent,
        serde_json::json!([]),
        "the parent itself is never placed"
    );
    check_against_cluster(&api, &report, "disp").await
}
