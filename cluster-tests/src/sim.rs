//! Simulated client nodes for the load generator: thousands of nodes in one process, each
//! speaking the client RPC the way a real client agent does.
//!
//! ```text
//!  register   Node.Register for every node (concurrently), mock driver fingerprinted
//!  heartbeat  one task walks the nodes: each sends Node.UpdateStatus about every TTL / 2
//!             (the TTL the servers last answered)
//!  watch      per node: Node.GetClientAllocs blocking query (min index = last answer's)
//!  run        a new allocation's tasks "run" as the mock driver runs them: running at once,
//!             dead after Config.run_for with Config.exit_code (client::driver::mock_config);
//!             a stopped allocation's tasks are killed
//!  report     one batcher gathers every node's status changes for 50 ms (≤ 2 000) into a
//!             Node.UpdateAlloc call, retried through failover until a server takes it
//! ```
//!
//! Every call goes to a server picked from the node's number and moves on to the next server
//! when one fails, so the nodes ride through a leader failover. The blocking queries are
//! spread over several connection pools (one per [`NODES_PER_POOL`] nodes) so that no
//! connection carries more queries than its in-flight limit allows.
//!
//! The one shortcut against real clients: status reports of all nodes share one batcher
//! (a real client batches its own every 200 ms). The servers see the same kind of calls,
//! fewer and bigger.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde::Serialize;
use teamster::client::config::ClientConfig;
use teamster::client::driver::mock_config;
use teamster::client::fingerprint::{self, Machine};
use teamster::client::types::{client_status, event};
use teamster::rpc::service::node::{
    NodeClientAllocsResponse, NodeGetClientAllocsRequest, NodeRegisterRequest,
    NodeUpdateAllocRequest, NodeUpdateStatusRequest,
};
use teamster::rpc::{Pool, RpcConfig, ServiceRequest, ServiceResponse};
use teamster_storage::fsm::AllocClientReport;
use teamster_storage::model::{
    AllocDeploymentStatus, AllocId, ClientStatus, NodeId, NodeStatus, TaskState, TaskStateValue,
    Timestamp,
};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Simulated nodes whose blocking queries share one connection pool.
pub const NODES_PER_POOL: usize = 200;
/// The longest a blocking allocation query waits.
const QUERY_WAIT: Duration = Duration::from_secs(60);
/// Status reports gathered into one `Node.UpdateAlloc`, at most.
const MAX_REPORTS_PER_CALL: usize = 2_000;
/// How long the batcher gathers reports before sending.
const REPORT_INTERVAL: Duration = Duration::from_millis(50);
/// Pause after a failed call before the next try.
const RETRY: Duration = Duration::from_millis(100);

/// What the simulated nodes look like.
#[derive(Debug, Clone, Serialize)]
pub struct SimConfig {
    /// How many.
    pub nodes: usize,
    /// Each node's CPU, MHz.
    pub cpu_mhz: u64,
    /// Each node's memory, MB.
    pub memory_mb: u64,
    /// Concurrent registrations.
    pub concurrency: usize,
    /// Whether the nodes watch for their allocations and run them (off: they only register
    /// and heartbeat, and placement alone is measured).
    pub run_allocs: bool,
    /// Whether each node acts as a real client does with ACLs on: every call carries the
    /// node's secret, and status reports go in one call per node (off: one call may carry
    /// reports of many nodes, which servers with ACLs on refuse).
    pub node_secrets: bool,
    /// Mutual TLS with the servers (a client certificate), when they require it.
    #[serde(skip)]
    pub tls: Option<teamster::util::tls::AgentTls>,
}

impl SimConfig {
    /// The RPC configuration of the nodes' connection pools.
    fn rpc_config(&self) -> RpcConfig {
        RpcConfig {
            tls: self.tls.clone(),
            ..RpcConfig::default()
        }
    }

    /// The credential of node `id`'s calls, when the nodes send them.
    fn token(&self, id: &str) -> Option<String> {
        self.node_secrets.then(|| secret_of(id))
    }
}

/// The secret a simulated node registers with.
fn secret_of(id: &str) -> String {
    format!("secret-{id}")
}

/// Counters of what the simulated nodes did.
#[derive(Debug, Default)]
pub struct SimCounters {
    /// Heartbeats answered.
    pub heartbeats: AtomicU64,
    /// Blocking allocation queries answered.
    pub alloc_queries: AtomicU64,
    /// Allocations whose tasks were started.
    pub allocs_started: AtomicU64,
    /// Allocations whose tasks ended by themselves (`run_for` elapsed).
    pub allocs_finished: AtomicU64,
    /// Allocations stopped by the servers while running.
    pub allocs_stopped: AtomicU64,
    /// Status reports the servers accepted.
    pub reports_accepted: AtomicU64,
    /// `Node.UpdateAlloc` calls the servers accepted.
    pub update_calls: AtomicU64,
}

/// A snapshot of [`SimCounters`].
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct SimTotals {
    /// Heartbeats answered.
    pub heartbeats: u64,
    /// Blocking allocation queries answered.
    pub alloc_queries: u64,
    /// Allocations whose tasks were started.
    pub allocs_started: u64,
    /// Allocations whose tasks ended by themselves.
    pub allocs_finished: u64,
    /// Allocations stopped by the servers while running.
    pub allocs_stopped: u64,
    /// Status reports the servers accepted.
    pub reports_accepted: u64,
    /// `Node.UpdateAlloc` calls the servers accepted.
    pub update_calls: u64,
}

impl SimCounters {
    /// Read every counter.
    pub fn totals(&self) -> SimTotals {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        SimTotals {
            heartbeats: get(&self.heartbeats),
            alloc_queries: get(&self.alloc_queries),
            allocs_started: get(&self.allocs_started),
            allocs_finished: get(&self.allocs_finished),
            allocs_stopped: get(&self.allocs_stopped),
            reports_accepted: get(&self.reports_accepted),
            update_calls: get(&self.update_calls),
        }
    }
}

/// The running simulated nodes; dropping it stops them all.
pub struct SimNodes {
    /// The nodes' IDs, in order.
    pub ids: Vec<String>,
    /// What they did so far.
    pub counters: Arc<SimCounters>,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for SimNodes {
    fn drop(&mut self) {
        self.stop.cancel();
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl SimNodes {
    /// Register `cfg.nodes` nodes with the servers at `rpc` and start their heartbeats and
    /// (with `run_allocs`) their allocation watchers and the report batcher.
    pub async fn start(cfg: &SimConfig, rpc: &[String]) -> anyhow::Result<SimNodes> {
        if cfg.nodes == 0 || rpc.is_empty() {
            bail!("simulated nodes need at least one node and one server");
        }
        let rpc: Arc<Vec<String>> = Arc::new(rpc.to_vec());
        let pool = Pool::new(0, cfg.rpc_config())?;
        let ids = register(cfg, &pool, &rpc).await?;
        let counters = Arc::new(SimCounters::default());
        let stop = CancellationToken::new();
        let mut tasks = vec![tokio::spawn(heartbeat_loop(
            cfg.clone(),
            pool.clone(),
            rpc.clone(),
            ids.clone(),
            counters.clone(),
            stop.clone(),
        ))];
        if cfg.run_allocs {
            let (reports_tx, reports_rx) = mpsc::unbounded_channel();
            tasks.push(tokio::spawn(report_loop(
                cfg.clone(),
                pool.clone(),
                rpc.clone(),
                reports_rx,
                counters.clone(),
                stop.clone(),
            )));
            let mut query_pool = pool.clone();
            for (i, id) in ids.iter().enumerate() {
                if i % NODES_PER_POOL == 0 && i > 0 {
                    query_pool = Pool::new(0, cfg.rpc_config())?;
                }
                let node = SimNode {
                    id: id.as_str().into(),
                    token: cfg.token(id),
                    hint: i,
                    pool: query_pool.clone(),
                    rpc: rpc.clone(),
                    reports: reports_tx.clone(),
                    counters: counters.clone(),
                    stop: stop.clone(),
                };
                tasks.push(tokio::spawn(node.run()));
            }
        }
        Ok(SimNodes {
            ids: ids.iter().map(|n| n.to_string()).collect(),
            counters,
            stop,
            tasks,
        })
    }
}

/// Register every node; returns their IDs.
async fn register(
    cfg: &SimConfig,
    pool: &Pool,
    rpc: &Arc<Vec<String>>,
) -> anyhow::Result<Arc<Vec<String>>> {
    let machine = Machine {
        cores: 8,
        core_ids: (0..8).collect(),
        mhz_per_core: cfg.cpu_mhz / 8,
        memory_mb: cfg.memory_mb,
        disk_free_mb: 100_000,
        hostname: "sim".into(),
        kernel_version: "sim".into(),
    };
    let client_config = ClientConfig {
        drivers: vec!["mock".into()],
        ..ClientConfig::default()
    };
    let now = unix_nanos();
    let ids: Arc<Vec<String>> = Arc::new(
        (0..cfg.nodes)
            .map(|i| {
                format!(
                    "{:08x}-0000-4000-8000-{:012x}",
                    i,
                    rand::random::<u64>() >> 16
                )
            })
            .collect(),
    );
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..cfg.concurrency.clamp(1, cfg.nodes) {
        let (pool, ids, next, rpc) = (pool.clone(), ids.clone(), next.clone(), rpc.clone());
        let (machine, client_config) = (machine.clone(), client_config.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                let Some(id) = ids.get(i) else {
                    return anyhow::Ok(());
                };
                let mut node = fingerprint::node(
                    &client_config,
                    &format!("sim-{i}"),
                    id,
                    &secret_of(id),
                    "127.0.0.1:0",
                    &machine,
                    now,
                );
                node.attributes
                    .insert("unique.hostname".into(), format!("sim-{i}"));
                let req = ServiceRequest::NodeRegister(Box::new(NodeRegisterRequest { node }));
                match call_any(&pool, &rpc, req, i, Duration::from_secs(30)).await? {
                    ServiceResponse::NodeRegister(_) => {}
                    other => bail!("registering sim-{i}: {other:?}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(ids)
}

/// Walk the nodes so that each heartbeats about every TTL / 2 (the TTL the servers hand
/// out), 32 heartbeats at a time.
async fn heartbeat_loop(
    cfg: SimConfig,
    pool: Pool,
    rpc: Arc<Vec<String>>,
    ids: Arc<Vec<String>>,
    counters: Arc<SimCounters>,
    stop: CancellationToken,
) {
    // Until the first answer, the shortest TTL Nomad hands out.
    let mut ttl = Duration::from_secs(10);
    let mut i = 0usize;
    loop {
        let per_node = ttl / 2 / ids.len() as u32;
        let started = Instant::now();
        let mut batch = Vec::new();
        for _ in 0..32.min(ids.len()) {
            let id = &ids[i % ids.len()];
            i += 1;
            let req = ServiceRequest::NodeUpdateStatus(NodeUpdateStatusRequest {
                node_id: id.as_str().into(),
                status: NodeStatus::Ready,
            });
            let token = cfg.token(id);
            let (pool, rpc) = (&pool, &rpc);
            batch.push(async move {
                call_any_as(pool, rpc, token.as_deref(), req, i, Duration::from_secs(10)).await
            });
        }
        let batch_len = batch.len() as u32;
        for r in futures::future::join_all(batch).await {
            if let Ok(ServiceResponse::NodeUpdateStatus(r)) = r {
                counters.heartbeats.fetch_add(1, Ordering::Relaxed);
                if r.heartbeat_ttl_ms > 0 {
                    // The TTL the servers hand out now (it grows with the node count so
                    // that heartbeats stay under `max_heartbeats_per_second`).
                    ttl = Duration::from_millis(r.heartbeat_ttl_ms.max(1_000));
                }
            }
        }
        let due = per_node * batch_len;
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(due.saturating_sub(started.elapsed())) => {}
        }
    }
}

/// Gather status reports and send them in batches until the servers take each batch.
async fn report_loop(
    cfg: SimConfig,
    pool: Pool,
    rpc: Arc<Vec<String>>,
    mut rx: mpsc::UnboundedReceiver<(NodeId, AllocClientReport)>,
    counters: Arc<SimCounters>,
    stop: CancellationToken,
) {
    let mut hint = 0usize;
    loop {
        let first = tokio::select! {
            _ = stop.cancelled() => return,
            r = rx.recv() => match r { Some(r) => r, None => return },
        };
        let mut batch = vec![first];
        let deadline = tokio::time::Instant::now() + REPORT_INTERVAL;
        while batch.len() < MAX_REPORTS_PER_CALL {
            tokio::select! {
                r = rx.recv() => match r { Some(r) => batch.push(r), None => break },
                _ = tokio::time::sleep_until(deadline) => break,
            }
        }
        // One call for all, or one per node (each with its node's secret).
        let calls: Vec<(Option<String>, Vec<AllocClientReport>)> = if cfg.node_secrets {
            let mut by_node: HashMap<NodeId, Vec<AllocClientReport>> = HashMap::new();
            for (node, r) in batch {
                by_node.entry(node).or_default().push(r);
            }
            by_node
                .into_iter()
                .map(|(node, reports)| (cfg.token(node.as_str()), reports))
                .collect()
        } else {
            vec![(None, batch.into_iter().map(|(_, r)| r).collect())]
        };
        hint += 1;
        let sends = calls.into_iter().enumerate().map(|(k, (token, reports))| {
            let (pool, rpc, counters, stop) = (&pool, &rpc, &counters, &stop);
            async move {
                let mut hint = hint + k;
                loop {
                    hint += 1;
                    let req = ServiceRequest::NodeUpdateAlloc(NodeUpdateAllocRequest {
                        allocs: reports.clone(),
                    });
                    let timeout = Duration::from_secs(30);
                    match call_any_as(pool, rpc, token.as_deref(), req, hint, timeout).await {
                        Ok(ServiceResponse::NodeUpdateAlloc(_)) => {
                            counters
                                .reports_accepted
                                .fetch_add(reports.len() as u64, Ordering::Relaxed);
                            counters.update_calls.fetch_add(1, Ordering::Relaxed);
                            return true;
                        }
                        other => {
                            tracing::debug!(?other, "allocation updates not taken; retrying");
                            tokio::select! {
                                _ = stop.cancelled() => return false,
                                _ = tokio::time::sleep(RETRY) => {}
                            }
                        }
                    }
                }
            }
        });
        if !futures::future::join_all(sends)
            .await
            .into_iter()
            .all(|sent| sent)
        {
            return;
        }
    }
}

/// One simulated node's allocation watcher.
struct SimNode {
    id: NodeId,
    /// The node's secret, sent with its calls when the servers check it.
    token: Option<String>,
    hint: usize,
    pool: Pool,
    rpc: Arc<Vec<String>>,
    reports: mpsc::UnboundedSender<(NodeId, AllocClientReport)>,
    counters: Arc<SimCounters>,
    stop: CancellationToken,
}

/// A task "running" on a simulated node.
struct MockTask {
    name: String,
    run_for: Duration,
    exit_code: i64,
}

impl SimNode {
    async fn run(self) {
        let mut index = 0u64;
        // Allocations started here and not finished, with the timer that ends them.
        let mut running: HashMap<AllocId, Option<tokio::task::AbortHandle>> = HashMap::new();
        loop {
            let req = ServiceRequest::NodeGetClientAllocs(NodeGetClientAllocsRequest {
                node_id: self.id.clone(),
                min_index: index,
                wait_ms: QUERY_WAIT.as_millis() as u64,
            });
            let resp = tokio::select! {
                _ = self.stop.cancelled() => break,
                r = call_any_as(&self.pool, &self.rpc, self.token.as_deref(), req, self.hint, QUERY_WAIT + Duration::from_secs(30)) => r,
            };
            let resp = match resp {
                Ok(ServiceResponse::NodeGetClientAllocs(r)) => r,
                other => {
                    tracing::debug!(node_id = %self.id, ?other, "allocation query failed");
                    tokio::select! {
                        _ = self.stop.cancelled() => break,
                        _ = tokio::time::sleep(RETRY) => continue,
                    }
                }
            };
            self.counters.alloc_queries.fetch_add(1, Ordering::Relaxed);
            if resp.index < index {
                // A server behind the one asked before: its list would be short.
                continue;
            }
            index = resp.index;
            self.apply(*resp, &mut running);
        }
        for timer in running.into_values().flatten() {
            timer.abort();
        }
    }

    /// Start what is new, kill what the servers stopped, forget what they no longer list.
    fn apply(
        &self,
        resp: NodeClientAllocsResponse,
        running: &mut HashMap<AllocId, Option<tokio::task::AbortHandle>>,
    ) {
        for ca in resp.changed {
            let alloc = ca.alloc;
            let stopped =
                alloc.server_terminal_status() || alloc.client_status == ClientStatus::Lost;
            if let Some(timer) = running.get(&alloc.id) {
                if stopped {
                    // Tasks that already ended by themselves were reported then.
                    let ended = timer.as_ref().is_some_and(|t| t.is_finished());
                    if let Some(t) = timer {
                        t.abort();
                    }
                    running.remove(&alloc.id);
                    if !ended {
                        let tasks = task_names(ca.job.as_deref(), &alloc.task_group);
                        self.report(&alloc.id, dead_states(&tasks, "Killed", false));
                        self.counters.allocs_stopped.fetch_add(1, Ordering::Relaxed);
                    }
                }
                continue;
            }
            if alloc.terminal_status() || stopped {
                continue;
            }
            let Some(job) = ca.job else {
                continue;
            };
            let Some(group) = job.task_groups.iter().find(|g| g.name == alloc.task_group) else {
                continue;
            };
            let tasks: Result<Vec<MockTask>, String> = group
                .tasks
                .iter()
                .map(|t| {
                    if t.driver != "mock" {
                        return Err(format!(
                            "task {}: driver {} is not simulated",
                            t.name, t.driver
                        ));
                    }
                    let (run_for, exit_code) = mock_config(&t.config).map_err(|e| e.to_string())?;
                    Ok(MockTask {
                        name: t.name.clone(),
                        run_for,
                        exit_code,
                    })
                })
                .collect();
            let tasks = match tasks {
                Ok(tasks) => tasks,
                Err(reason) => {
                    let names: Vec<String> = group.tasks.iter().map(|t| t.name.clone()).collect();
                    self.report(&alloc.id, dead_states(&names, &reason, true));
                    continue;
                }
            };
            self.counters.allocs_started.fetch_add(1, Ordering::Relaxed);
            let now = unix_nanos();
            let states = tasks
                .iter()
                .map(|t| {
                    let state = TaskState {
                        state: TaskStateValue::Running,
                        started_at: Timestamp::from_unix_nanos(now),
                        events: vec![
                            event(now, "Received", "Task received by client".into()),
                            event(now, "Started", "Task started by client".into()),
                        ],
                        ..TaskState::default()
                    };
                    (t.name.clone(), state)
                })
                .collect();
            self.report(&alloc.id, states);
            // The allocation ends when its longest task does (sooner tasks are reported
            // with it: a simplification that changes no status the servers act on).
            let longest = tasks.iter().map(|t| t.run_for).max().unwrap_or_default();
            let timer = (longest < Duration::from_secs(24 * 3600)).then(|| {
                let (reports, counters, stop, id, node_id) = (
                    self.reports.clone(),
                    self.counters.clone(),
                    self.stop.clone(),
                    alloc.id.clone(),
                    self.id.clone(),
                );
                tokio::spawn(async move {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(longest) => {}
                    }
                    let now = unix_nanos();
                    let states = tasks
                        .iter()
                        .map(|t| {
                            let failed = t.exit_code != 0;
                            let mut ev =
                                event(now, "Terminated", format!("Exit Code: {}", t.exit_code));
                            ev.exit_code = t.exit_code;
                            let state = TaskState {
                                state: TaskStateValue::Dead,
                                failed,
                                started_at: Timestamp::from_unix_nanos(now),
                                finished_at: Timestamp::from_unix_nanos(now),
                                events: vec![ev],
                                ..TaskState::default()
                            };
                            (t.name.clone(), state)
                        })
                        .collect();
                    counters.allocs_finished.fetch_add(1, Ordering::Relaxed);
                    let _ = reports.send((node_id, report(&id, states)));
                })
                .abort_handle()
            });
            running.insert(alloc.id.clone(), timer);
        }
        let listed: HashSet<&str> = resp
            .alloc_indexes
            .iter()
            .map(|(id, _)| id.as_str())
            .collect();
        running.retain(|id, timer| {
            let keep = listed.contains(id.as_str());
            if !keep {
                if let Some(t) = timer {
                    t.abort();
                }
            }
            keep
        });
    }

    fn report(&self, id: &AllocId, states: BTreeMap<String, TaskState>) {
        let _ = self.reports.send((self.id.clone(), report(id, states)));
    }
}

/// The last sequence number a report of this process carried.
static REPORT_SEQ: AtomicU32 = AtomicU32::new(0);

/// The report of an allocation whose tasks are in `states`.
fn report(id: &AllocId, states: BTreeMap<String, TaskState>) -> AllocClientReport {
    let (status, description) = client_status(&states);
    let now = unix_nanos();
    // A simulated task is healthy the moment it runs (no min_healthy_time to wait out), so
    // service deployments complete as a real client would make them, only sooner.
    let deployment_status = (status == ClientStatus::Running).then(|| AllocDeploymentStatus {
        healthy: Some(true),
        timestamp: Timestamp::from_unix_nanos(now),
        ..AllocDeploymentStatus::default()
    });
    AllocClientReport {
        id: id.clone(),
        client_status: status,
        client_description: description.into(),
        task_states: states,
        modify_time: now,
        deployment_status,
        // A sequence number need only grow per allocation: one counter serves them all.
        seq: REPORT_SEQ.fetch_add(1, Ordering::Relaxed).saturating_add(1),
    }
}

/// Every task dead, with one event of `kind` (failed when the tasks could not start).
fn dead_states(tasks: &[String], kind: &str, failed: bool) -> BTreeMap<String, TaskState> {
    let now = unix_nanos();
    tasks
        .iter()
        .map(|name| {
            let ev = if failed {
                event(now, "Driver Failure", kind.to_string())
            } else {
                event(now, kind, "Task successfully killed".into())
            };
            let state = TaskState {
                state: TaskStateValue::Dead,
                failed,
                finished_at: Timestamp::from_unix_nanos(now),
                events: vec![ev],
                ..TaskState::default()
            };
            (name.clone(), state)
        })
        .collect()
}

fn task_names(job: Option<&teamster_storage::model::Job>, group: &str) -> Vec<String> {
    job.and_then(|j| j.task_groups.iter().find(|g| g.name == group))
        .map(|g| g.tasks.iter().map(|t| t.name.clone()).collect())
        .unwrap_or_default()
}

fn unix_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Call one of the servers (starting at `hint`), moving on when one fails or answers with
/// an error; the last error when every try failed.
pub async fn call_any(
    pool: &Pool,
    rpc: &[String],
    req: ServiceRequest,
    hint: usize,
    timeout: Duration,
) -> anyhow::Result<ServiceResponse> {
    call_any_as(pool, rpc, None, req, hint, timeout).await
}

/// [`call_any`] with a credential (a node's secret).
pub async fn call_any_as(
    pool: &Pool,
    rpc: &[String],
    token: Option<&str>,
    req: ServiceRequest,
    hint: usize,
    timeout: Duration,
) -> anyhow::Result<ServiceResponse> {
    let mut last = None;
    for k in 0..rpc.len() * 3 {
        let addr = &rpc[(hint + k) % rpc.len()];
        match pool.service_as(0, addr, token, req.clone(), timeout).await {
            Ok(r) => return Ok(r),
            Err(e) => last = Some(anyhow::anyhow!("{addr}: {e}")),
        }
        tokio::time::sleep(RETRY).await;
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no server")))
}
