//! The plan applier on the real shell: allocations verified and committed per second through
//! the leader's plan queue, the pipelined applier, raft (sled, fsync) and the state store, with
//! plans of 1 000 placements over 5 000 nodes.
//!
//! Starts one server in this process (a single-voter raft: the commit is the local fsync),
//! registers the nodes and one job per plan (count 1 000, the C1M shape), then submits plans from S concurrent submitters straight
//! into the plan queue (the eval broker's token check is the `Plan.Submit` endpoint's, not the
//! applier's) and waits for every result. Prints allocations committed per second per
//! submitter count, and checks the state holds every allocation.
//!
//! ```sh
//! cargo run --release -p teamster-cluster-tests --bin plan-apply-bench -- --plans 100 --submitters 1,8
//! ```

use std::time::{Duration, Instant};

use anyhow::Context;
use futures::future::join_all;
use teamster::agent::config::AgentConfig;
use teamster::agent::Agent;
use teamster::scheduler::harness::{fixture_uuid, mock_job, mock_node};
use teamster_storage::fsm::{Command, JobRegister, NodeRegister};
use teamster_storage::model::{AllocId, Allocation, ClientStatus, NodeId, Plan, Resources};

const NODES: u64 = 5_000;
const PLAN_ALLOCS: u64 = 1_000;

struct Args {
    plans: u64,
    submitters: Vec<usize>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        plans: 100,
        submitters: vec![1, 8],
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--plans" => args.plans = it.next().context("--plans N")?.parse()?,
            "--submitters" => {
                args.submitters = it
                    .next()
                    .context("--submitters 1,8")?
                    .split(',')
                    .map(|s| s.trim().parse())
                    .collect::<Result<_, _>>()?
            }
            "--bench" => {}
            other => anyhow::bail!("unknown argument {other:?} (use --plans N --submitters 1,8)"),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let dir = tempfile::tempdir()?;
    let config = AgentConfig::lone_server(dir.path());
    let agent = Agent::start(config, false).await?;
    let server = agent.server().context("a server")?;
    let mut established = server.leadership().subscribe();
    tokio::time::timeout(Duration::from_secs(30), established.wait_for(|e| *e))
        .await
        .context("leadership")??;
    let node = server.node().clone();

    let started = Instant::now();
    let nodes: Vec<_> = (0..NODES).map(mock_node).collect();
    let node_ids: Vec<NodeId> = nodes.iter().map(|n| n.id.clone()).collect();
    for chunk in nodes.chunks(500) {
        let writes = chunk.iter().map(|n| {
            node.write_local(Command::NodeRegister(NodeRegister {
                node: n.clone(),
                evals: Vec::new(),
            }))
        });
        for r in join_all(writes).await {
            r?;
        }
    }
    // One job per plan (count 1 000 each), as in the C1M shape: 1 000 allocations per job.
    let total_plans = args.plans * args.submitters.len() as u64;
    let mut jobs = Vec::new();
    for p in 0..total_plans {
        let job = mock_job(&format!("bench-{p}"), PLAN_ALLOCS as u32);
        node.write_local(Command::JobRegister(JobRegister {
            job: job.clone(),
            eval: None,
            enforce_index: None,
            tracked_versions: 0,
        }))
        .await?;
        let job = node
            .state()
            .snapshot()
            .job_by_id(job.namespace.as_str(), job.id.as_str())
            .context("the job")?
            .clone();
        jobs.push(job);
    }
    eprintln!(
        "setup: {NODES} nodes and {total_plans} jobs in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    let plans = server.endpoints().plans().clone();
    let mut next_alloc = 0u64;
    for &submitters in &args.submitters {
        let make_plan = |first: u64| {
            let job = jobs[(first / PLAN_ALLOCS) as usize].clone();
            let mut plan = Plan {
                priority: 50,
                job: Some(job.clone()),
                ..Plan::default()
            };
            for k in first..first + PLAN_ALLOCS {
                let node_id = node_ids[(k % NODES) as usize].clone();
                let alloc = Allocation {
                    id: AllocId::new(fixture_uuid(7, k)),
                    namespace: job.namespace.clone(),
                    name: format!("{}.web[{}]", job.id, k % PLAN_ALLOCS),
                    node_id: node_id.clone(),
                    job_id: job.id.clone(),
                    job_version: job.version,
                    task_group: "web".into(),
                    resources: Resources {
                        cpu: 1,
                        memory_mb: 1,
                        disk_mb: 0,
                        memory_max_mb: 0,
                        cores: 0,
                    },
                    client_status: ClientStatus::Pending,
                    ..Allocation::default()
                };
                plan.node_allocation.entry(node_id).or_default().push(alloc);
            }
            plan
        };
        // Build every plan before the clock starts.
        let all: Vec<Plan> = (0..args.plans)
            .map(|p| make_plan(next_alloc + p * PLAN_ALLOCS))
            .collect();
        next_alloc += args.plans * PLAN_ALLOCS;
        let before = node.state().snapshot().alloc_count();
        let per_submitter = all.len().div_ceil(submitters);
        let mut batches: Vec<Vec<Plan>> = Vec::new();
        let mut all = all.into_iter();
        for _ in 0..submitters {
            batches.push(all.by_ref().take(per_submitter).collect());
        }
        let t0 = Instant::now();
        let tasks = batches.into_iter().map(|batch| {
            let plans = plans.clone();
            tokio::spawn(async move {
                let mut committed = 0usize;
                let mut latencies = Vec::new();
                for plan in batch {
                    let t = Instant::now();
                    let result = plans.enqueue(plan)?.await??;
                    latencies.push(t.elapsed());
                    anyhow::ensure!(result.rejected_nodes.is_empty(), "rejected nodes");
                    committed += result.node_allocation.values().map(Vec::len).sum::<usize>();
                }
                anyhow::Ok((committed, latencies))
            })
        });
        let mut committed = 0usize;
        let mut latencies = Vec::new();
        for r in join_all(tasks).await {
            let (c, l) = r??;
            committed += c;
            latencies.extend(l);
        }
        let elapsed = t0.elapsed();
        let after = node.state().snapshot().alloc_count();
        anyhow::ensure!(
            after - before == committed,
            "state gained {} allocations, results say {committed}",
            after - before
        );
        latencies.sort();
        let p = |q: f64| latencies[((latencies.len() as f64 - 1.0) * q) as usize];
        println!(
            "submitters {submitters:>3}: {committed} allocations in {} plans, {:.2} s → {:.0} allocs/s; plan latency p50 {:.1} ms, p99 {:.1} ms; state now {after} allocations",
            args.plans,
            elapsed.as_secs_f64(),
            committed as f64 / elapsed.as_secs_f64(),
            p(0.5).as_secs_f64() * 1e3,
            p(0.99).as_secs_f64() * 1e3,
        );
    }
    agent.shutdown().await;
    Ok(())
}
