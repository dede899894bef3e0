//! Heartbeats per second a leader sustains: one process simulates many client nodes (each
//! registers, then heartbeats at the TTL the servers hand back, over the same RPC path a real
//! client uses) against a three-server cluster of real `teamster` processes on loopback.
//! Prints the heartbeats answered per second, failures, nodes marked down, and the leader's
//! CPU use and resident memory over the measuring window.
//!
//! ```sh
//! cargo build -p teamster --bin teamster
//! cargo run -p teamster-cluster-tests --bin heartbeat-bench -- --nodes 5000 --seconds 30 \
//!     --min-ttl 1s --rate 5000
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;
use teamster::client::config::ClientConfig;
use teamster::client::fingerprint::{self, Machine};
use teamster::client::servers::Servers;
use teamster::rpc::service::node::{NodeRegisterRequest, NodeUpdateStatusRequest};
use teamster::rpc::{Pool, RpcConfig, Services};
use teamster_cluster_tests::process::{ClusterOptions, ProcessCluster};
use teamster_storage::model::NodeStatus;

struct Args {
    nodes: usize,
    seconds: u64,
    min_ttl: String,
    rate: f64,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut a = Args {
        nodes: 5000,
        seconds: 30,
        min_ttl: "10s".into(),
        rate: 50.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        match x.as_str() {
            "--nodes" => a.nodes = it.next().context("--nodes N")?.parse()?,
            "--seconds" => a.seconds = it.next().context("--seconds N")?.parse()?,
            "--min-ttl" => a.min_ttl = it.next().context("--min-ttl 10s")?,
            "--rate" => a.rate = it.next().context("--rate 50")?.parse()?,
            "--bench" => {}
            other => anyhow::bail!(
                "unknown argument {other:?} (use --nodes N --seconds N --min-ttl 10s --rate 50)"
            ),
        }
    }
    Ok(a)
}

/// CPU seconds (user + system) and resident MiB of `pid`.
fn cpu_and_rss(pid: u32) -> (f64, f64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    // SAFETY: sysconf has no memory effects.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15; `rest` starts at field 3.
    let cpu = (ticks(11) + ticks(12)) / tck;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kb = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .unwrap_or(0.0);
    (cpu, rss_kb / 1024.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let options = ClusterOptions {
        server_toml: format!(
            "min_heartbeat_ttl = {:?}\nmax_heartbeats_per_second = {:?}\nnum_schedulers = 1\n",
            args.min_ttl, args.rate
        ),
        heartbeat: "100ms",
        election_timeout: "1s",
        // Thousands of simulated clients share this host's one address.
        extra_toml: teamster_cluster_tests::process::SIMULATED_CLIENTS_LIMITS.into(),
        ..ClusterOptions::default()
    };
    let mut c = ProcessCluster::start(3, options)?;
    let leader = c.wait_leader(Duration::from_secs(30)).await?;
    let leader_pid = c.servers[leader].pid().context("leader pid")?;
    let addrs: Vec<String> = c.servers.iter().map(|s| s.rpc_addr()).collect();
    let servers = Arc::new(Servers::new(Pool::new(0, RpcConfig::default())?, addrs));
    let machine = Machine {
        cores: 4,
        core_ids: (0..4).collect(),
        mhz_per_core: 2500,
        memory_mb: 8192,
        disk_free_mb: 100_000,
        hostname: "sim".into(),
        kernel_version: "6.0".into(),
    };
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let registered = Arc::new(AtomicU64::new(0));
    let reg_start = Instant::now();
    let config = ClientConfig::default();
    let mut tasks = Vec::new();
    for n in 0..args.nodes {
        let id = format!("{:08x}-0000-4000-8000-{:012x}", std::process::id(), n);
        let node = fingerprint::node(
            &config,
            &format!("sim-{n}"),
            &id,
            "secret",
            "127.0.0.1:4646",
            &machine,
            0,
        );
        let (servers, ok, failed, registered) = (
            servers.clone(),
            ok.clone(),
            failed.clone(),
            registered.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut ttl = loop {
                let req = Box::new(NodeRegisterRequest { node: node.clone() });
                match servers.node_register(req).await {
                    Ok(r) => break Duration::from_millis(r.heartbeat_ttl_ms),
                    Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
                }
            };
            registered.fetch_add(1, Ordering::Relaxed);
            loop {
                tokio::time::sleep(ttl).await;
                let req = NodeUpdateStatusRequest {
                    node_id: node.id.clone(),
                    status: NodeStatus::Ready,
                };
                match servers.node_update_status(req).await {
                    Ok(r) => {
                        ok.fetch_add(1, Ordering::Relaxed);
                        ttl = Duration::from_millis(r.heartbeat_ttl_ms.max(100));
                    }
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        ttl = Duration::from_secs(1);
                    }
                }
            }
        }));
    }
    while registered.load(Ordering::Relaxed) < args.nodes as u64 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let reg_time = reg_start.elapsed();
    println!(
        "{} nodes registered in {:.1} s ({:.0}/s)",
        args.nodes,
        reg_time.as_secs_f64(),
        args.nodes as f64 / reg_time.as_secs_f64()
    );
    let (cpu0, _) = cpu_and_rss(leader_pid);
    let ok0 = ok.load(Ordering::Relaxed);
    let start = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    let window = start.elapsed().as_secs_f64();
    let (cpu1, rss) = cpu_and_rss(leader_pid);
    let beats = ok.load(Ordering::Relaxed) - ok0;
    let nodes: Vec<Value> = c.servers[leader].api().get("/v1/nodes?stale=true").await?;
    let down = nodes.iter().filter(|n| n["Status"] != "ready").count();
    println!(
        "window {window:.1} s: {beats} heartbeats answered ({:.0}/s), {} failed calls, \
         {down} of {} nodes not ready; leader CPU {:.0}% of one core, RSS {rss:.0} MiB",
        beats as f64 / window,
        failed.load(Ordering::Relaxed),
        nodes.len(),
        100.0 * (cpu1 - cpu0) / window,
    );
    for t in tasks {
        t.abort();
    }
    Ok(())
}
