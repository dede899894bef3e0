//! Committed writes per second through a three-server cluster on loopback, durable on sled.
//!
//! Starts three servers in this process (each with its own data directory, sled log and RPC
//! listener on its own loopback address), then runs N concurrent writers against the
//! leader's raft node for a fixed time. Every write is one small command (an evaluation
//! upsert of a few hundred bytes) acknowledged only once it is committed by a quorum and
//! applied. Prints writes/s and the latency percentiles, per writer count.
//!
//! ```sh
//! cargo run --release -p teamster-cluster-tests --bin raft-bench -- --seconds 10 --writers 1,64
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use teamster::agent::config::AgentConfig;
use teamster::agent::Agent;
use teamster_storage::fsm::{Command, EvalUpsert};
use teamster_storage::model::{EvalStatus, EvalTrigger, Evaluation, JobType};

struct Args {
    seconds: u64,
    writers: Vec<usize>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        seconds: 10,
        writers: vec![1, 64],
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seconds" => args.seconds = it.next().context("--seconds N")?.parse()?,
            "--writers" => {
                args.writers = it
                    .next()
                    .context("--writers 1,64")?
                    .split(',')
                    .map(|s| s.trim().parse())
                    .collect::<Result<_, _>>()?
            }
            "--bench" => {}
            other => anyhow::bail!("unknown argument {other:?} (use --seconds N --writers 1,64)"),
        }
    }
    Ok(args)
}

fn eval(writer: usize, n: u64) -> Evaluation {
    Evaluation {
        id: format!("{writer:08x}-0000-4000-8000-{n:012x}").into(),
        namespace: "default".into(),
        priority: 50,
        eval_type: JobType::Service,
        triggered_by: EvalTrigger::JobRegister,
        job_id: format!("bench-job-{writer}-{n}").into(),
        status: EvalStatus::Complete,
        ..Evaluation::default()
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let dir = tempfile::tempdir()?;
    let block = 200 + (std::process::id() % 50) as u8;
    let ips: Vec<String> = (1..=3).map(|i| format!("127.{block}.7.{i}")).collect();
    let mut agents = Vec::new();
    for (i, ip) in ips.iter().enumerate() {
        let mut c = AgentConfig::default();
        c.name = format!("bench-{}", i + 1);
        c.data_dir = Some(dir.path().join(&c.name));
        c.bind_addr = ip.parse()?;
        c.log_level = "warn".into();
        c.server.enabled = true;
        c.server.bootstrap_expect = 3;
        c.server.join = ips
            .iter()
            .filter(|o| *o != ip)
            .map(|o| format!("{o}:4647"))
            .collect();
        c.server.join_retry_interval = Duration::from_millis(200);
        c.validate("raft-bench")?;
        agents.push(Agent::start(c, false).await?);
    }
    let leader = loop {
        if let Some(a) = agents.iter().find(|a| {
            a.server()
                .is_some_and(|s| s.node().is_leader() && s.leadership().is_established())
        }) {
            break a.server().expect("a server").node().clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!(
        "machine: {} cores",
        std::thread::available_parallelism()?.get()
    );
    println!("writers  writes/s    p50 ms   p99 ms   entries");
    for &writers in &args.writers {
        let done = Arc::new(AtomicU64::new(0));
        let deadline = Instant::now() + Duration::from_secs(args.seconds);
        let first_index = leader.raft().metrics().borrow().last_log_index.unwrap_or(0);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for w in 0..writers {
            let node = leader.clone();
            let done = done.clone();
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    let cmd = Command::EvalUpsert(EvalUpsert {
                        evals: vec![eval(w + writers * 1000, n)],
                    });
                    node.write_local(cmd).await.expect("write");
                    lat.push(t.elapsed());
                    n += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                lat
            }));
        }
        let mut lat = Vec::new();
        for t in tasks {
            lat.extend(t.await?);
        }
        let secs = started.elapsed().as_secs_f64();
        lat.sort();
        let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
        let entries = leader.raft().metrics().borrow().last_log_index.unwrap_or(0) - first_index;
        println!(
            "{writers:>7}  {:>8.0}  {:>8.2}  {:>7.2}  {entries:>8}",
            done.load(Ordering::Relaxed) as f64 / secs,
            pct(0.50).as_secs_f64() * 1e3,
            pct(0.99).as_secs_f64() * 1e3,
        );
    }
    for a in agents {
        a.shutdown().await;
    }
    Ok(())
}
