//! Scenarios on a docker-compose cluster of the `teamster:dev` image (three servers, two
//! clients; deploy/docker-compose.yml): the leader killed under load, the leader isolated
//! from the network, a server catching up by snapshot after 20 000 registrations, and a
//! rolling restart under load; and the TLS variant (deploy/docker-compose.tls.yml) forming
//! and scheduling a job. Each checks the shared invariants.
//!
//! Without Docker the scenarios print a `SKIP` line and pass; with `CI=true` they fail
//! instead. Measured times are printed as `MEASURE` lines (docs/benchmarks.md records them).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::Value;
use teamster::api::ApiClient;
use teamster_cluster_tests::api::{metrics_text, small_job};
use teamster_cluster_tests::client_process::wait_node_status;
use teamster_cluster_tests::compose::{skip_without_docker, ComposeCluster, ComposeOptions};
use teamster_cluster_tests::invariants::{self, Checked, LeaderLog};
use teamster_cluster_tests::loadgen::prom_sum;
use teamster_cluster_tests::wait_for;

/// True when the scenario must be skipped (no Docker, not CI). Panics under `CI=true`.
fn skip(test: &str) -> bool {
    skip_without_docker(test)
}

/// Job registrations acknowledged (HTTP 200) and refused, shared with a running load.
#[derive(Clone, Default)]
struct Acks {
    ids: Arc<Mutex<Vec<String>>>,
    failed: Arc<AtomicUsize>,
    /// Why attempts failed: message → count (for the report).
    errors: Arc<Mutex<std::collections::BTreeMap<String, usize>>>,
}

impl Acks {
    fn count(&self) -> usize {
        self.ids.lock().unwrap().len()
    }

    fn errors(&self) -> String {
        let e = self.errors.lock().unwrap();
        e.iter()
            .map(|(m, n)| format!("{n}× {m}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn ids(&self) -> Vec<String> {
        let mut ids = self.ids.lock().unwrap().clone();
        ids.sort();
        ids
    }
}

/// A client with a short timeout: a request to a killed container must not hang the load.
fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(4))
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// Register `n` jobs named `<prefix>-<i>`, `concurrency` at a time, spread over `bases`
/// (`http://ip:4646`), as a client would: a failed attempt is retried on the next server
/// after a short backoff, up to five attempts (registering the same job again is
/// idempotent). Acknowledged ones go
/// to `acks`; failed attempts are counted in `acks.failed`.
async fn register_jobs(
    bases: Vec<String>,
    prefix: &str,
    n: usize,
    concurrency: usize,
    acks: Acks,
    make: fn(&str) -> Value,
) {
    let http = http();
    // Servers that just timed out or refused a connection are skipped for a while, as a
    // client with several server addresses would.
    let avoid: Arc<Mutex<std::collections::HashMap<String, Instant>>> = Arc::default();
    futures::stream::iter(0..n)
        .map(|i| {
            let bases = bases.clone();
            let id = format!("{prefix}-{i:05}");
            let http = http.clone();
            let acks = acks.clone();
            let avoid = avoid.clone();
            async move {
                let body = serde_json::json!({ "Job": make(&id) });
                for attempt in 0..5 {
                    if attempt > 0 {
                        // Back off like a client would, so an election can finish.
                        tokio::time::sleep(Duration::from_millis(250 * attempt as u64)).await;
                    }
                    let base = {
                        let avoid = avoid.lock().unwrap();
                        let now = Instant::now();
                        (0..bases.len())
                            .map(|k| &bases[(i + attempt + k) % bases.len()])
                            .find(|b| avoid.get(*b).is_none_or(|until| *until <= now))
                            .unwrap_or(&bases[(i + attempt) % bases.len()])
                            .clone()
                    };
                    let sent = http
                        .post(format!("{base}/v1/jobs"))
                        .json(&body)
                        .send()
                        .await;
                    let why = match sent {
                        Ok(r) if r.status().is_success() => {
                            acks.ids.lock().unwrap().push(id);
                            return;
                        }
                        Ok(r) => {
                            let status = r.status();
                            format!("HTTP {status}: {}", r.text().await.unwrap_or_default())
                        }
                        Err(e) if e.is_timeout() || e.is_connect() => {
                            avoid
                                .lock()
                                .unwrap()
                                .insert(base.clone(), Instant::now() + Duration::from_secs(3));
                            if e.is_timeout() {
                                "timed out"
                            } else {
                                "connect failed"
                            }
                            .to_string()
                        }
                        Err(e) => e.to_string(),
                    };
                    // Short, without per-request details, so equal causes count together.
                    let why: String = why.chars().take(90).collect();
                    *acks.errors.lock().unwrap().entry(why).or_default() += 1;
                    acks.failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
        .buffer_unordered(concurrency)
        .collect::<Vec<()>>()
        .await;
}

async fn raft_stat(api: &ApiClient, key: &str) -> Option<u64> {
    let v: Value = api.get("/v1/agent/self").await.ok()?;
    v["stats"]["raft"][key].as_str()?.parse().ok()
}

/// Wait until server `i` has applied at least `index`.
async fn wait_applied(
    c: &ComposeCluster,
    i: usize,
    index: u64,
    timeout: Duration,
) -> anyhow::Result<()> {
    let api = c.servers[i].api();
    wait_for(
        timeout,
        &format!("{} to apply index {index}", c.servers[i].name),
        || {
            let api = api.clone();
            async move { (raft_stat(&api, "applied_index").await? >= index).then_some(()) }
        },
    )
    .await
}

/// Every server's state is byte-for-byte the same: their stale snapshot images match once
/// they have applied the same index.
async fn wait_identical_state(c: &ComposeCluster, timeout: Duration) -> anyhow::Result<()> {
    let http = http();
    let bases: Vec<String> = c.servers.iter().map(|s| s.http_addr()).collect();
    wait_for(timeout, "identical state on every server", || {
        let http = http.clone();
        let bases = bases.clone();
        async move {
            let mut first: Option<Vec<u8>> = None;
            for b in &bases {
                let r = http
                    .get(format!("{b}/v1/operator/snapshot?stale=true"))
                    .send()
                    .await
                    .ok()?;
                if !r.status().is_success() {
                    return None;
                }
                let bytes = r.bytes().await.ok()?.to_vec();
                match &first {
                    None => first = Some(bytes),
                    Some(f) if *f == bytes => {}
                    Some(_) => return None,
                }
            }
            Some(())
        }
    })
    .await
}

/// Run the invariants that need only the API of a live server, printing any not served.
async fn check_invariants(api: &ApiClient, acked: &[String], leaders: &LeaderLog) {
    invariants::acknowledged_present(api, acked)
        .await
        .expect("every acknowledged registration is present");
    leaders.check().expect("at most one leader per term");
    let checks: [(&str, anyhow::Result<Checked>); 3] = [
        (
            "no node over capacity",
            invariants::no_node_over_capacity(api).await,
        ),
        (
            "no task group over its count",
            invariants::no_group_over_count(api).await,
        ),
        (
            "evaluations settled",
            invariants::evals_settled(api, true).await,
        ),
    ];
    for (what, r) in checks {
        r.unwrap_or_else(|e| panic!("invariant `{what}`: {e:#}"))
            .report(what);
    }
}

async fn observe_all(c: &ComposeCluster, leaders: &mut LeaderLog) {
    for s in &c.servers {
        leaders.observe(&s.name, &s.api()).await;
    }
}

/// Whether the leader's worker pool is served and how many workers are paused, from
/// `/v1/agent/schedulers` (Nomad's shape: `schedulers[].status`).
async fn paused_workers(api: &ApiClient) -> Option<(usize, usize)> {
    let v: Value = api.get("/v1/agent/schedulers").await.ok()?;
    let list = v["schedulers"].as_array()?;
    let paused = list
        .iter()
        .filter(|w| {
            w["status"]
                .as_str()
                .is_some_and(|s| s.eq_ignore_ascii_case("paused"))
        })
        .count();
    Some((paused, list.len()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_leader_killed_while_registering_500_jobs() -> anyhow::Result<()> {
    if skip("compose_leader_killed_while_registering_500_jobs") {
        return Ok(());
    }
    let c = ComposeCluster::up(ComposeOptions::default()).await?;
    let mut leaders = LeaderLog::new();
    observe_all(&c, &mut leaders).await;
    let old = c.wait_leader(&[0, 1, 2], Duration::from_secs(30)).await?;
    let survivors: Vec<usize> = (0..3).filter(|&i| i != old).collect();

    let acks = Acks::default();
    let bases: Vec<String> = c.servers.iter().map(|s| s.http_addr()).collect();
    let load = tokio::spawn(register_jobs(
        bases,
        "kill",
        500,
        8,
        acks.clone(),
        small_job,
    ));
    {
        let acks = acks.clone();
        wait_for(Duration::from_secs(60), "100 registrations", || {
            let acks = acks.clone();
            async move { (acks.count() >= 100).then_some(()) }
        })
        .await?;
    }
    c.kill(&c.servers[old].name).await?;
    let killed = Instant::now();

    // A new leader serves: elected among the survivors and a write through it commits.
    let new = c.wait_leader(&survivors, Duration::from_secs(10)).await?;
    let elected = killed.elapsed();
    let probe = serde_json::json!({ "Job": small_job("probe-after-kill") });
    let api = c.servers[new].api();
    wait_for(Duration::from_secs(10), "a write on the new leader", || {
        let api = api.clone();
        let probe = probe.clone();
        async move {
            api.request::<_, Value>(reqwest::Method::POST, "/v1/jobs", Some(&probe))
                .await
                .ok()
        }
    })
    .await?;
    let serving = killed.elapsed();
    eprintln!("MEASURE failover (leader SIGKILLed): new leader elected {elected:.2?}, serving writes {serving:.2?}");
    assert!(
        serving < Duration::from_secs(5),
        "the new leader served after {serving:?}"
    );
    observe_all(&c, &mut leaders).await;
    load.await?;
    let acked = acks.ids();
    eprintln!(
        "kill scenario: {} of 500 acknowledged, {} failed attempts: {}",
        acked.len(),
        acks.failed.load(Ordering::Relaxed),
        acks.errors()
    );

    // Fully placed: every acknowledged job got an allocation (a mock batch task of 1 s).
    wait_fully_placed(&api, &acked, Duration::from_secs(90)).await?;
    check_invariants(&api, &acked, &leaders).await;

    // The new leader pauses 3/4 of its workers.
    if paused_workers(&api).await.is_some() {
        let api = api.clone();
        wait_for(
            Duration::from_secs(10),
            "3/4 of the new leader's workers paused",
            || {
                let api = api.clone();
                async move {
                    let (paused, total) = paused_workers(&api).await?;
                    (total > 0 && paused == 3 * total / 4).then_some(())
                }
            },
        )
        .await?;
    } else {
        eprintln!("NOTE: /v1/agent/schedulers not served: worker pause not checked");
    }

    // The old leader comes back as a follower with everything, its workers all running.
    c.start(&c.servers[old].name).await?;
    let index = raft_stat(&api, "applied_index").await.unwrap_or(0);
    wait_applied(&c, old, index, Duration::from_secs(30)).await?;
    let old_api = c.servers[old].api();
    invariants::acknowledged_present(&old_api, &acked).await?;
    if paused_workers(&old_api).await.is_some() {
        let api = old_api.clone();
        wait_for(
            Duration::from_secs(10),
            "the old leader's workers all running",
            || {
                let api = api.clone();
                async move {
                    let (paused, total) = paused_workers(&api).await?;
                    (total > 0 && paused == 0).then_some(())
                }
            },
        )
        .await?;
    }
    observe_all(&c, &mut leaders).await;
    leaders.check()?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_isolated_leader_accepts_no_write_and_rejoins_with_identical_state(
) -> anyhow::Result<()> {
    if skip("compose_isolated_leader_accepts_no_write_and_rejoins_with_identical_state") {
        return Ok(());
    }
    let c = ComposeCluster::up(ComposeOptions::default()).await?;
    let mut leaders = LeaderLog::new();
    let old = c.wait_leader(&[0, 1, 2], Duration::from_secs(30)).await?;
    observe_all(&c, &mut leaders).await;
    let survivors: Vec<usize> = (0..3).filter(|&i| i != old).collect();
    let old_name = c.servers[old].name.clone();

    c.disconnect(&old_name).await?;
    let isolated = Instant::now();
    let new = c.wait_leader(&survivors, Duration::from_secs(15)).await?;
    let elected = isolated.elapsed();
    // A write on the new leader commits.
    let probe = serde_json::json!({ "Job": small_job("probe-after-isolation") });
    let api = c.servers[new].api();
    api.request::<_, Value>(reqwest::Method::POST, "/v1/jobs", Some(&probe))
        .await?;
    eprintln!(
        "MEASURE failover (leader isolated): majority leader agreed {elected:.2?}, serving \
         writes {:.2?} after the disconnect",
        isolated.elapsed()
    );
    // The isolated server is asked to register a job from inside its container: no
    // acknowledgement (it cannot reach a quorum), and the job never appears (below).
    let body = serde_json::json!({ "Job": small_job("written-while-isolated") }).to_string();
    let refused = c.exec_post(&old_name, "/v1/jobs", &body).await;
    assert!(
        refused.is_err(),
        "the isolated server acknowledged a write: {refused:?}"
    );

    observe_all(&c, &mut leaders).await;
    let acks = Acks::default();
    let bases: Vec<String> = survivors
        .iter()
        .map(|&i| c.servers[i].http_addr())
        .collect();
    register_jobs(bases, "majority", 100, 8, acks.clone(), small_job).await;
    assert_eq!(acks.count(), 100, "the majority side accepts every write");
    // Stale reads still answer on the isolated server, from its old state.
    let stale = c.exec_get(&old_name, "/v1/jobs?stale=true").await?;
    let stale: Vec<Value> = serde_json::from_str(&stale)?;
    assert!(stale.iter().all(|j| j["ID"] != "majority-00000"));

    c.connect(&old_name).await?;
    let index = raft_stat(&c.servers[new].api(), "applied_index")
        .await
        .unwrap_or(0);
    wait_applied(&c, old, index, Duration::from_secs(30)).await?;
    wait_identical_state(&c, Duration::from_secs(30)).await?;
    let me: Value = c.servers[old].api().get("/v1/agent/self").await?;
    assert_eq!(me["stats"]["raft"]["state"], "Follower", "{me}");
    assert_eq!(
        me["stats"]["raft"]["leader_addr"],
        c.servers[new].rpc_addr().as_str()
    );
    let jobs: Vec<Value> = c.servers[old].api().get("/v1/jobs?stale=true").await?;
    assert!(
        jobs.iter().all(|j| j["ID"] != "written-while-isolated"),
        "the write sent to the isolated server must not survive"
    );
    observe_all(&c, &mut leaders).await;
    check_invariants(&c.servers[new].api(), &acks.ids(), &leaders).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_stopped_server_catches_up_by_snapshot_after_20000_jobs() -> anyhow::Result<()> {
    if skip("compose_stopped_server_catches_up_by_snapshot_after_20000_jobs") {
        return Ok(());
    }
    let options = ComposeOptions {
        raft_toml: "snapshot_threshold = 200\ntrailing_logs = 50".into(),
        ..ComposeOptions::default()
    };
    let c = ComposeCluster::up(options).await?;
    let leader = c.wait_leader(&[0, 1, 2], Duration::from_secs(30)).await?;
    let lagger = (leader + 1) % 3;
    let other = (leader + 2) % 3;
    let before = raft_stat(&c.servers[lagger].api(), "last_log_index")
        .await
        .unwrap_or(0);
    c.stop(&c.servers[lagger].name).await?;

    let acks = Acks::default();
    let bases = vec![c.servers[leader].http_addr(), c.servers[other].http_addr()];
    let start = Instant::now();
    register_jobs(bases, "bulk", 20_000, 32, acks.clone(), unplaceable_job).await;
    let took = start.elapsed();
    eprintln!(
        "MEASURE registered {} jobs in {took:.1?} ({:.0}/s) with one server down",
        acks.count(),
        acks.count() as f64 / took.as_secs_f64()
    );
    assert_eq!(acks.count(), 20_000, "every registration succeeds");
    let leader_api = c.servers[leader].api();
    let target = raft_stat(&leader_api, "applied_index").await.unwrap_or(0);
    let purged = raft_stat(&leader_api, "purged_index").await.unwrap_or(0);
    assert!(
        purged > before,
        "the leader compacted its log past the stopped server's last entry ({purged} <= {before})"
    );

    c.start(&c.servers[lagger].name).await?;
    let restarted = Instant::now();
    wait_applied(&c, lagger, target, Duration::from_secs(60)).await?;
    let caught_up = restarted.elapsed();
    let lag_api = c.servers[lagger].api();
    let snapshot_index = raft_stat(&lag_api, "snapshot_index").await.unwrap_or(0);
    eprintln!(
        "MEASURE catch-up: {} entries behind ({before} → {target}), applied the leader's index \
         {caught_up:.2?} after docker start; its snapshot index is {snapshot_index}",
        target - before
    );
    assert!(
        snapshot_index > before,
        "the restarted server installed a snapshot (snapshot index {snapshot_index})"
    );
    invariants::acknowledged_present(&lag_api, &acks.ids()).await?;
    // Its workers dequeued evaluations while it was behind: none was scheduled on a snapshot
    // below its WaitIndex (the worker counts any such eval in this metric).
    let metrics = metrics_text(&lag_api).await?;
    eprintln!(
        "MEASURE catch-up: the restarted server scheduled {} evaluations so far",
        prom_sum(&metrics, "teamster_worker_evals_scheduled_total")
    );
    assert_eq!(
        prom_sum(&metrics, "teamster_worker_stale_snapshot_total"),
        0,
        "an evaluation was scheduled on stale state"
    );
    let mut leaders = LeaderLog::new();
    observe_all(&c, &mut leaders).await;
    check_invariants(&leader_api, &acks.ids(), &leaders).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_rolling_restart_under_load_loses_no_acknowledged_write() -> anyhow::Result<()> {
    if skip("compose_rolling_restart_under_load_loses_no_acknowledged_write") {
        return Ok(());
    }
    let c = ComposeCluster::up(ComposeOptions::default()).await?;
    let mut leaders = LeaderLog::new();
    let first_leader = c.wait_leader(&[0, 1, 2], Duration::from_secs(30)).await?;
    let acks = Acks::default();
    let bases: Vec<String> = c.servers.iter().map(|s| s.http_addr()).collect();
    let done = Arc::new(AtomicUsize::new(0));
    // Load for as long as the restarts take: batches of 200 until told to stop.
    let load = {
        let acks = acks.clone();
        let done = done.clone();
        tokio::spawn(async move {
            let mut round = 0;
            while done.load(Ordering::Relaxed) == 0 {
                register_jobs(
                    bases.clone(),
                    &format!("roll{round}"),
                    200,
                    4,
                    acks.clone(),
                    small_job,
                )
                .await;
                round += 1;
            }
        })
    };
    // Followers first, the leader last.
    let order: Vec<usize> = (1..=3).map(|k| (first_leader + k) % 3).collect();
    let start = Instant::now();
    for i in order {
        observe_all(&c, &mut leaders).await;
        c.restart(&c.servers[i].name).await?;
        let others: Vec<usize> = (0..3).collect();
        let leader = c.wait_leader(&others, Duration::from_secs(30)).await?;
        let index = raft_stat(&c.servers[leader].api(), "applied_index")
            .await
            .unwrap_or(0);
        wait_applied(&c, i, index, Duration::from_secs(30)).await?;
    }
    let took = start.elapsed();
    done.store(1, Ordering::Relaxed);
    load.await?;
    eprintln!(
        "MEASURE rolling restart of 3 servers under load: {took:.1?}; {} acknowledged, {} failed attempts: {}",
        acks.count(),
        acks.failed.load(Ordering::Relaxed),
        acks.errors()
    );
    observe_all(&c, &mut leaders).await;
    let leader = c.wait_leader(&[0, 1, 2], Duration::from_secs(30)).await?;
    let acked = acks.ids();
    assert!(!acked.is_empty());
    for s in &c.servers {
        let api = s.api();
        let index = raft_stat(&c.servers[leader].api(), "applied_index")
            .await
            .unwrap_or(0);
        wait_for(Duration::from_secs(30), "caught up", || {
            let api = api.clone();
            async move { (raft_stat(&api, "applied_index").await? >= index).then_some(()) }
        })
        .await?;
        invariants::acknowledged_present(&api, &acked).await?;
    }
    check_invariants(&c.servers[leader].api(), &acked, &leaders).await;
    Ok(())
}

/// Wait until every job in `ids` has at least one allocation (placed by the scheduler).
async fn wait_fully_placed(
    api: &ApiClient,
    ids: &[String],
    timeout: Duration,
) -> anyhow::Result<()> {
    let want: std::collections::BTreeSet<String> = ids.iter().cloned().collect();
    let start = Instant::now();
    let api2 = api.clone();
    wait_for(timeout, "every acknowledged job placed", || {
        let api = api2.clone();
        let want = want.clone();
        async move {
            let allocs: Vec<Value> = api.get("/v1/allocations?stale=true").await.ok()?;
            let placed: std::collections::BTreeSet<String> = allocs
                .iter()
                .filter_map(|a| a["JobID"].as_str().map(str::to_string))
                .collect();
            want.is_subset(&placed).then_some(())
        }
    })
    .await?;
    eprintln!(
        "MEASURE {} acknowledged jobs all placed {:.1?} after the check began",
        ids.len(),
        start.elapsed()
    );
    Ok(())
}

/// A job for a datacenter no client is in: registered, evaluated and blocked, never run —
/// the catch-up scenario is about raft state, not 20 000 tasks on two clients.
fn unplaceable_job(id: &str) -> Value {
    let mut job = small_job(id);
    job["Datacenters"] = serde_json::json!(["dc-unplaceable"]);
    job
}

/// A long-running service job: `count` copies of busybox `sleep` under raw_exec.
fn sleep_job(id: &str, count: u32) -> Value {
    serde_json::json!({
        "ID": id,
        "Type": "service",
        "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "sleepers",
            "Count": count,
            "Tasks": [{
                "Name": "sleep",
                "Driver": "raw_exec",
                "Config": { "command": "/bin/sleep", "args": ["3600"] },
                "KillTimeout": 1_000_000_000u64,
                "Resources": { "CPU": 100, "MemoryMB": 32 }
            }]
        }]
    })
}

/// Client node name → ID, for the nodes whose status is `status`.
async fn nodes_with_status(api: &ApiClient, status: &str) -> Option<Vec<(String, String)>> {
    let nodes: Vec<Value> = api.get("/v1/nodes?stale=true").await.ok()?;
    Some(
        nodes
            .iter()
            .filter(|n| n["Status"] == status)
            .filter_map(|n| {
                Some((
                    n["Name"].as_str()?.to_string(),
                    n["ID"].as_str()?.to_string(),
                ))
            })
            .collect(),
    )
}

/// Running allocations of `job`, by node ID.
async fn running_by_node(
    api: &ApiClient,
    job: &str,
) -> Option<std::collections::BTreeMap<String, usize>> {
    let allocs: Vec<Value> = api
        .get(&format!("/v1/job/{job}/allocations?stale=true"))
        .await
        .ok()?;
    let mut by_node = std::collections::BTreeMap::new();
    for a in &allocs {
        if a["ClientStatus"] == "running" {
            *by_node
                .entry(a["NodeID"].as_str()?.to_string())
                .or_insert(0usize) += 1;
        }
    }
    Some(by_node)
}

/// Wait until `job` runs exactly `count` allocations, none on `not_on`, and report when.
async fn wait_running_elsewhere(
    api: &ApiClient,
    job: &str,
    count: usize,
    not_on: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    wait_for(
        timeout,
        &format!("{count} allocations of {job} running off {not_on}"),
        || {
            let api = api.clone();
            async move {
                let by_node = running_by_node(&api, job).await?;
                let total: usize = by_node.values().sum();
                (total == count && !by_node.contains_key(not_on)).then_some(())
            }
        },
    )
    .await
}

/// Fast heartbeats, so a silent client is marked down within a few seconds.
fn client_options() -> ComposeOptions {
    ComposeOptions {
        server_toml: "min_heartbeat_ttl = \"1s\"\nheartbeat_grace = \"2s\"".into(),
        ..ComposeOptions::default()
    }
}

/// Bring up a cluster, wait for both clients, run `count` sleepers; the client running most
/// of them (the victim) and its node ID.
async fn cluster_with_sleepers(count: u32) -> anyhow::Result<(ComposeCluster, String, String)> {
    let c = ComposeCluster::up(client_options()).await?;
    let leader = c.wait_leader(&[0, 1, 2], Duration::from_secs(30)).await?;
    let api = c.servers[leader].api();
    wait_for(Duration::from_secs(30), "two ready client nodes", || {
        let api = api.clone();
        async move { (nodes_with_status(&api, "ready").await?.len() == 2).then_some(()) }
    })
    .await?;
    api.request::<_, Value>(
        reqwest::Method::POST,
        "/v1/jobs",
        Some(&serde_json::json!({ "Job": sleep_job("sleepers", count) })),
    )
    .await?;
    let by_node = wait_for(Duration::from_secs(60), "the sleepers running", || {
        let api = api.clone();
        async move {
            let by_node = running_by_node(&api, "sleepers").await?;
            (by_node.values().sum::<usize>() == count as usize).then_some(by_node)
        }
    })
    .await?;
    let (victim_id, _) = by_node
        .iter()
        .max_by_key(|(_, n)| **n)
        .expect("a node runs sleepers");
    let nodes = nodes_with_status(&api, "ready").await.unwrap_or_default();
    let victim = nodes
        .iter()
        .find(|(_, id)| id == victim_id)
        .map(|(name, _)| name.clone())
        .expect("the victim is a ready node");
    eprintln!("client scenario: sleepers by node {by_node:?}; victim {victim}");
    let victim_id = victim_id.clone();
    Ok((c, victim, victim_id))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_killed_client_has_its_allocations_replaced_elsewhere() -> anyhow::Result<()> {
    if skip("compose_killed_client_has_its_allocations_replaced_elsewhere") {
        return Ok(());
    }
    let (c, victim, victim_id) = cluster_with_sleepers(4).await?;
    let api = c.servers[c.wait_leader(&[0, 1, 2], Duration::from_secs(10)).await?].api();
    c.kill(&victim).await?;
    let killed = Instant::now();
    wait_node_status(&api, &victim_id, "down", Duration::from_secs(20)).await?;
    let down = killed.elapsed();
    wait_running_elsewhere(&api, "sleepers", 4, &victim_id, Duration::from_secs(60)).await?;
    eprintln!(
        "MEASURE client SIGKILLed: node down {down:.1?}, its allocations running elsewhere {:.1?}",
        killed.elapsed()
    );
    let leaders = LeaderLog::new();
    check_invariants(&api, &[], &leaders).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_client_stopped_past_its_ttl_goes_down_then_ready_without_duplicates(
) -> anyhow::Result<()> {
    if skip("compose_client_stopped_past_its_ttl_goes_down_then_ready_without_duplicates") {
        return Ok(());
    }
    let (c, victim, victim_id) = cluster_with_sleepers(4).await?;
    let api = c.servers[c.wait_leader(&[0, 1, 2], Duration::from_secs(10)).await?].api();
    c.pause(&victim, true).await?;
    let stopped = Instant::now();
    wait_node_status(&api, &victim_id, "down", Duration::from_secs(20)).await?;
    let down = stopped.elapsed();
    wait_running_elsewhere(&api, "sleepers", 4, &victim_id, Duration::from_secs(60)).await?;
    let replaced = stopped.elapsed();
    c.pause(&victim, false).await?;
    let resumed = Instant::now();
    wait_node_status(&api, &victim_id, "ready", Duration::from_secs(20)).await?;
    eprintln!(
        "MEASURE client SIGSTOPped: node down {down:.1?}, replaced {replaced:.1?}; ready again \
         {:.1?} after SIGCONT",
        resumed.elapsed()
    );
    // No duplicates: the job settles at exactly 4 running, none on the returned node (its
    // old allocations were replaced), and stays there.
    let held_since: Arc<Mutex<Option<Instant>>> = Arc::default();
    wait_for(
        Duration::from_secs(40),
        "4 running, none on the returned node, for 2 s",
        || {
            let api = api.clone();
            let held_since = held_since.clone();
            let victim_id = victim_id.clone();
            async move {
                let by_node = running_by_node(&api, "sleepers").await?;
                let ok = by_node.values().sum::<usize>() == 4 && !by_node.contains_key(&victim_id);
                let mut since = held_since.lock().unwrap();
                if !ok {
                    *since = None;
                    return None;
                }
                let first = *since.get_or_insert_with(Instant::now);
                (first.elapsed() >= Duration::from_secs(2)).then_some(())
            }
        },
    )
    .await?;
    let leaders = LeaderLog::new();
    check_invariants(&api, &[], &leaders).await;
    Ok(())
}

/// The TLS variant (deploy/docker-compose.tls.yml with deploy/config-tls and certificates
/// made by `teamster tls` at test time): three servers form over mutual TLS, both clients
/// register over it, and a job is scheduled and runs; the API answers only HTTPS with a
/// client certificate. Every agent's health check is the CLI over HTTPS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compose_tls_cluster_forms_and_schedules_a_job() -> anyhow::Result<()> {
    if skip("compose_tls_cluster_forms_and_schedules_a_job") {
        return Ok(());
    }
    let c = ComposeCluster::up(ComposeOptions {
        tls: true,
        ..ComposeOptions::default()
    })
    .await?;
    let leader = c.wait_leader(&[0, 1, 2], Duration::from_secs(30)).await?;
    let api = c.servers[leader].api();
    assert!(api.address().starts_with("https://"), "{}", api.address());
    wait_for(
        Duration::from_secs(60),
        "two ready client nodes over TLS",
        || {
            let api = api.clone();
            async move { (nodes_with_status(&api, "ready").await?.len() == 2).then_some(()) }
        },
    )
    .await?;
    api.request::<_, Value>(
        reqwest::Method::POST,
        "/v1/jobs",
        Some(&serde_json::json!({ "Job": sleep_job("tls-sleepers", 2) })),
    )
    .await?;
    wait_for(Duration::from_secs(60), "the job running over TLS", || {
        let api = api.clone();
        async move {
            let by_node = running_by_node(&api, "tls-sleepers").await?;
            (by_node.values().sum::<usize>() == 2).then_some(())
        }
    })
    .await?;
    // Plain HTTP gets no answer from the HTTPS port.
    let plain = ApiClient::new(&format!("http://{}:4646", c.servers[leader].ip));
    assert!(
        plain.get::<Value>("/v1/status/leader").await.is_err(),
        "plain HTTP was answered"
    );
    Ok(())
}
