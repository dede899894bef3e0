//! The leader's eval broker and blocked evals on real processes: evaluations survive a leader
//! kill exactly once, `Eval.*` calls made to a follower are forwarded to the leader, and a
//! blocked evaluation is released by a node of an eligible class but not by one of a class it
//! is ineligible for.
//!
//! The first scenario runs the servers without scheduler workers (`num_schedulers = 0`); the
//! test is the worker, calling the RPCs through its own connection pool. The second runs the
//! real workers: 200 jobs registered at once all reach their full count.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;
use teamster::rpc::service::eval::{EvalAckRequest, EvalDequeueRequest, EvalWriteRequest};
use teamster::rpc::service::node::NodeRegisterRequest;
use teamster::rpc::{DequeuedEval, Pool, RpcConfig, ServiceRequest, ServiceResponse};
use teamster::scheduler::harness::mock_node;
use teamster::scheduler::SCHEDULER_VERSION;
use teamster_cluster_tests::api::{register, small_job};
use teamster_cluster_tests::process::{ClusterOptions, ProcessCluster};
use teamster_cluster_tests::sim::{SimConfig, SimNodes};
use teamster_cluster_tests::wait_for;
use teamster_storage::model::{EvalId, EvalStatus, EvalTrigger, Evaluation, JobId, JobType, Node};

const FORMATION: Duration = Duration::from_secs(30);
const CALL: Duration = Duration::from_secs(10);
/// The raft id the test's pool calls from: not a member, so followers forward for it.
const TEST_CALLER_ID: u64 = 9_999_999;

/// The raft id of every server, by index in the cluster.
async fn server_ids(c: &ProcessCluster, ask: usize) -> anyhow::Result<Vec<u64>> {
    let conf: Value = c.servers[ask]
        .api()
        .get("/v1/operator/raft/configuration")
        .await?;
    let mut ids = Vec::new();
    for s in &c.servers {
        let id = conf["Servers"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["Address"] == s.rpc_addr())
            .and_then(|v| v["ID"].as_str()?.parse().ok())
            .unwrap_or(0);
        ids.push(id);
    }
    Ok(ids)
}

/// One service call to the server `id` at `addr`, as a worker or client agent makes it.
async fn call(
    pool: &Pool,
    id: u64,
    addr: &str,
    req: ServiceRequest,
) -> anyhow::Result<ServiceResponse> {
    Ok(pool.service(id, addr, req, CALL).await?)
}

async fn dequeue(
    pool: &Pool,
    id: u64,
    addr: &str,
    timeout_ms: u64,
) -> anyhow::Result<Option<DequeuedEval>> {
    let req = ServiceRequest::EvalDequeue(EvalDequeueRequest {
        schedulers: vec!["batch".into(), "service".into()],
        timeout_ms,
        scheduler_version: SCHEDULER_VERSION,
    });
    match call(pool, id, addr, req).await? {
        ServiceResponse::EvalDequeue(r) => Ok(r.map(|d| *d)),
        other => anyhow::bail!("unexpected {}", other.name()),
    }
}

/// `Node.Register`: the raft index of the registration.
async fn register_node(pool: &Pool, id: u64, addr: &str, node: Node) -> anyhow::Result<u64> {
    let req = ServiceRequest::NodeRegister(Box::new(NodeRegisterRequest { node }));
    match call(pool, id, addr, req).await? {
        ServiceResponse::NodeRegister(r) => Ok(r.index),
        other => anyhow::bail!("unexpected {}", other.name()),
    }
}

async fn broker(c: &ProcessCluster, i: usize) -> anyhow::Result<Value> {
    Ok(c.servers[i]
        .api()
        .get("/v1/operator/scheduler/broker")
        .await?)
}

fn n(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(u64::MAX)
}

#[tokio::test]
async fn a_new_leader_holds_every_unfinished_eval_exactly_once_and_blocked_evals_wait_for_a_fitting_node(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let options = ClusterOptions {
        server_toml: "num_schedulers = 0\n".into(),
        ..ClusterOptions::default()
    };
    let mut c = ProcessCluster::start(3, options)?;
    let leader = c.wait_leader(FORMATION).await?;
    let ids = server_ids(&c, leader).await?;
    let pool = Pool::new(TEST_CALLER_ID, RpcConfig::default())?;

    // Six jobs, six pending evaluations.
    for k in 0..6 {
        register(&c.servers[leader].api(), small_job(&format!("job-{k}"))).await?;
    }
    wait_for(Duration::from_secs(10), "six ready evals", || {
        let c = &c;
        async move { (n(&broker(c, leader).await.ok()?, "TotalReady") == 6).then_some(()) }
    })
    .await?;

    // Three dequeued through a follower (forwarded to the leader) and never acked.
    let follower = (leader + 1) % 3;
    let mut taken = BTreeSet::new();
    for _ in 0..3 {
        let d = dequeue(&pool, ids[follower], &c.servers[follower].rpc_addr(), 2000)
            .await?
            .expect("an eval through the follower");
        assert!(d.wait_index >= d.eval.modify_index);
        taken.insert(d.eval.id.to_string());
    }
    assert_eq!(taken.len(), 3);
    let stats = broker(&c, follower).await?; // forwarded to the leader's numbers
    assert_eq!((n(&stats, "TotalReady"), n(&stats, "TotalUnacked")), (3, 3));

    // Kill the leader: the next one restores all six, once each, none outstanding.
    c.kill(leader);
    let leader = c.wait_leader(FORMATION).await?;
    wait_for(Duration::from_secs(10), "the new leader's broker", || {
        let c = &c;
        async move {
            let s = broker(c, leader).await.ok()?;
            (s["Leader"] == true).then_some(())
        }
    })
    .await?;
    let stats = broker(&c, leader).await?;
    assert_eq!(
        (n(&stats, "TotalReady"), n(&stats, "TotalUnacked")),
        (6, 0),
        "{stats}"
    );
    let mut delivered = BTreeSet::new();
    while let Some(d) = dequeue(&pool, ids[leader], &c.servers[leader].rpc_addr(), 300).await? {
        assert!(
            delivered.insert(d.eval.id.to_string()),
            "delivered twice: {}",
            d.eval.id
        );
    }
    assert_eq!(delivered.len(), 6, "every eval once, none lost");
    assert!(taken.is_subset(&delivered));

    // Blocked evals: a node of class A is registered, then an eval blocked with class A
    // marked ineligible (it saw the node, so no missed unblock).
    let (lid, laddr) = (ids[leader], c.servers[leader].rpc_addr());
    let node_a = mock_node(1);
    let class_a = node_a.computed_class.clone();
    let index_a = register_node(&pool, lid, &laddr, node_a).await?;
    // The test is the scheduler of "blocked-job": it found no room (class A ineligible) and
    // writes a blocked evaluation in place of the one it processed, as a worker does.
    register(&c.servers[leader].api(), small_job("blocked-job")).await?;
    let processing = dequeue(&pool, lid, &laddr, 5000)
        .await?
        .expect("the evaluation of blocked-job");
    assert_eq!(processing.eval.job_id.as_str(), "blocked-job");
    let blocked = Evaluation {
        id: EvalId::new("0b10c4ed-0000-4000-8000-000000000001"),
        namespace: "default".into(),
        priority: 50,
        eval_type: JobType::Batch,
        triggered_by: EvalTrigger::QueuedAllocs,
        job_id: JobId::new("blocked-job"),
        status: EvalStatus::Blocked,
        class_eligibility: [(class_a.clone(), false)].into_iter().collect(),
        snapshot_index: index_a,
        previous_eval: processing.eval.id.clone(),
        ..Evaluation::default()
    };
    let write = |eval: Evaluation| {
        Box::new(EvalWriteRequest {
            eval,
            token: processing.token.clone(),
        })
    };
    call(
        &pool,
        lid,
        &laddr,
        ServiceRequest::EvalCreate(write(blocked.clone())),
    )
    .await?;
    let mut done = processing.eval.clone();
    done.status = EvalStatus::Complete;
    done.blocked_eval = blocked.id.clone();
    // What could not be placed (an eval completed without failures would untrack the
    // job's blocked evals, as in Nomad).
    done.failed_tg_allocs.insert("g".into(), Default::default());
    call(&pool, lid, &laddr, ServiceRequest::EvalUpdate(write(done))).await?;
    let ack = EvalAckRequest {
        eval_id: processing.eval.id.clone(),
        token: processing.token.clone(),
    };
    call(&pool, lid, &laddr, ServiceRequest::EvalAck(ack)).await?;
    wait_for(
        Duration::from_secs(10),
        "the eval to be tracked blocked",
        || {
            let c = &c;
            async move { (n(&broker(c, leader).await.ok()?, "TotalBlocked") == 1).then_some(()) }
        },
    )
    .await?;

    // Another node of class A: still blocked. A job registered afterwards is the marker that
    // the leader has processed the node's change (the stream is in order).
    register_node(&pool, lid, &laddr, mock_node(2)).await?;
    register(&c.servers[leader].api(), small_job("marker")).await?;
    let marker = dequeue(&pool, lid, &laddr, 5000)
        .await?
        .expect("the marker eval");
    assert_eq!(marker.eval.job_id.as_str(), "marker");
    let stats = broker(&c, leader).await?;
    assert_eq!(
        n(&stats, "TotalBlocked"),
        1,
        "class A must not release it: {stats}"
    );

    // A node of another class releases it into the broker.
    let mut node_b: Node = mock_node(3);
    node_b.node_class = "class-b".into();
    node_b.canonicalize();
    assert_ne!(node_b.computed_class, class_a);
    register_node(&pool, lid, &laddr, node_b).await?;
    let released = dequeue(&pool, lid, &laddr, 5000)
        .await?
        .expect("the released blocked eval");
    assert_eq!(released.eval.id, blocked.id);
    let stats = broker(&c, leader).await?;
    assert_eq!(n(&stats, "TotalBlocked"), 0, "{stats}");
    Ok(())
}

#[tokio::test]
async fn two_hundred_jobs_registered_at_once_all_reach_their_full_count() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let mut c = ProcessCluster::start(3, ClusterOptions::default())?;
    let leader = c.wait_leader(FORMATION).await?;
    // Twenty nodes that register and heartbeat through the client RPC (8192 MB each).
    let rpc: Vec<String> = c.servers.iter().map(|s| s.rpc_addr()).collect();
    let _nodes = SimNodes::start(
        &SimConfig {
            nodes: 20,
            cpu_mhz: 8000,
            memory_mb: 8192,
            concurrency: 4,
            run_allocs: false,
            node_secrets: false,
            tls: None,
        },
        &rpc,
    )
    .await?;
    // Registered through every server (followers forward), all at once.
    const JOBS: usize = 200;
    const COUNT: u64 = 3;
    let registrations = (0..JOBS).map(|k| {
        let api = c.servers[k % 3].api();
        async move {
            let mut job = small_job(&format!("many-{k}"));
            job["Type"] = "service".into();
            job["TaskGroups"][0]["Count"] = COUNT.into();
            job["TaskGroups"][0]["Tasks"][0]["Resources"]["MemoryMB"] = 256.into();
            register(&api, job).await
        }
    });
    for r in futures::future::join_all(registrations).await {
        r?;
    }
    let api = c.servers[leader].api();
    let allocs: anyhow::Result<Vec<Value>> = wait_for(
        Duration::from_secs(45),
        "every job at its full count",
        || {
            let api = api.clone();
            async move {
                let allocs: Vec<Value> = api.get("/v1/allocations").await.ok()?;
                (allocs.len() as u64 >= JOBS as u64 * COUNT).then_some(allocs)
            }
        },
    )
    .await;
    // On a timeout, what was left and why, before failing.
    let allocs = match allocs {
        Ok(a) => a,
        Err(e) => {
            let all: Vec<Value> = api.get("/v1/allocations").await?;
            let mut per: std::collections::BTreeMap<String, u64> = Default::default();
            for a in &all {
                *per.entry(a["JobID"].as_str().unwrap_or("").into())
                    .or_default() += 1;
            }
            let short: Vec<_> = per.iter().filter(|(_, n)| **n < 3).collect();
            eprintln!(
                "at the timeout: {} allocations; jobs short of their count: {short:?}",
                all.len()
            );
            eprintln!("broker: {}", broker(&c, leader).await?);
            let evals: Vec<Value> = api.get("/v1/evaluations").await?;
            for ev in evals.iter().filter(|e| e["Status"] != "complete") {
                eprintln!(
                    "unfinished evaluation of {}: {} {} {:?}",
                    ev["JobID"], ev["Status"], ev["TriggeredBy"], ev["StatusDescription"]
                );
            }
            for (job, _) in short.iter().take(3) {
                let evs: Vec<Value> = api.get(&format!("/v1/job/{job}/evaluations")).await?;
                for ev in evs {
                    eprintln!(
                        "{job}: evaluation {} {} queued {} failed {}",
                        ev["Status"],
                        ev["TriggeredBy"],
                        ev["QueuedAllocations"],
                        ev["FailedTGAllocs"]
                    );
                }
                let d: Value = api.get(&format!("/v1/job/{job}/deployment")).await?;
                eprintln!("{job}: deployment {d}");
            }
            return Err(e);
        }
    };
    let mut per_job = std::collections::BTreeMap::<String, u64>::new();
    let mut per_node = std::collections::BTreeMap::<String, u64>::new();
    for a in &allocs {
        if a["DesiredStatus"] == "run" {
            *per_job
                .entry(a["JobID"].as_str().unwrap_or("").into())
                .or_default() += 1;
            *per_node
                .entry(a["NodeID"].as_str().unwrap_or("").into())
                .or_default() += 1;
        }
    }
    assert_eq!(per_job.len(), JOBS);
    assert!(per_job.values().all(|&n| n == COUNT), "{per_job:?}");
    // 8192 MB per node: at most 32 allocations of 256 MB.
    assert!(per_node.values().all(|&n| n <= 32), "{per_node:?}");
    // Every evaluation finished: none pending or unacked at the leader.
    wait_for(Duration::from_secs(10), "the broker to drain", || {
        let c = &c;
        async move {
            let s = broker(c, leader).await.ok()?;
            (n(&s, "TotalReady") == 0 && n(&s, "TotalUnacked") == 0).then_some(())
        }
    })
    .await?;
    Ok(())
}
