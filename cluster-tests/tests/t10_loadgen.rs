//! The load generator in a small configuration (200 simulated nodes × 20 jobs of 10) against
//! a real 3-server cluster: it completes, and its report agrees with the cluster's state.

use std::time::Duration;

use serde_json::Value;
use teamster_cluster_tests::invariants::{no_group_over_count, no_node_over_capacity, Checked};
use teamster_cluster_tests::loadgen::{self, LoadConfig, Shape};
use teamster_cluster_tests::process::{ClusterOptions, ProcessCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_load_run_places_everything_and_reports_what_the_cluster_holds(
) -> anyhow::Result<()> {
    let mut c = ProcessCluster::start(3, ClusterOptions::default())?;
    let leader = c.wait_leader(Duration::from_secs(30)).await?;
    let mut order: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    order.insert(0, leader);
    let pids: Vec<(String, u32)> = order
        .iter()
        .filter_map(|&i| Some((c.servers[i].name.clone(), c.servers[i].pid()?)))
        .collect();
    let cfg = LoadConfig {
        http: order.iter().map(|&i| c.servers[i].http_addr()).collect(),
        rpc: order.iter().map(|&i| c.servers[i].rpc_addr()).collect(),
        nodes: 200,
        jobs: 20,
        count: 10,
        shape: Shape::Service,
        concurrency: 8,
        timeout: Duration::from_secs(120),
        job_prefix: "small".into(),
        ..LoadConfig::default()
    };
    let report = loadgen::run(cfg, &pids).await?;
    assert_eq!(report.placed, 200);
    assert!(report.placements_per_second > 0.0);
    assert_eq!(report.samples.last().map(|s| s.placed), Some(200));
    assert!(report.evals_completed >= 20, "{}", report.evals_completed);
    assert_eq!(report.servers.len(), 3);
    assert!(report.servers.iter().all(|s| s.peak_rss_mb > 0.0));
    assert_eq!(
        report.eval_latencies_ms.len() as u64,
        report.evals_completed
    );

    // The plots are drawn.
    let dir = tempfile::tempdir()?;
    loadgen::plot(&report, dir.path(), "small")?;
    for f in ["small-placements.svg", "small-eval-latency.svg"] {
        let svg = std::fs::read_to_string(dir.path().join(f))?;
        assert!(svg.contains("<svg") && svg.contains("polyline"), "{f}");
    }

    // The cluster holds exactly what the report says, within capacity and counts.
    let api = c.servers[leader].api();
    let allocs: Vec<Value> = api.get("/v1/allocations?prefix=").await?;
    let live = allocs
        .iter()
        .filter(|a| a["JobID"].as_str().is_some_and(|j| j.starts_with("small-")))
        .filter(|a| a["DesiredStatus"] == "run")
        .count();
    assert_eq!(live as u64, report.placed);
    let nodes: Vec<Value> = api.get("/v1/nodes").await?;
    assert_eq!(nodes.len(), 200);
    assert!(matches!(
        no_node_over_capacity(&api).await?,
        Checked::Held(_)
    ));
    assert!(matches!(no_group_over_count(&api).await?, Checked::Held(_)));
    Ok(())
}
