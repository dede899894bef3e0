//! The client role: fingerprint the machine, register it as a node with the servers,
//! heartbeat at the TTL they hand back, watch the node's allocations with a blocking query,
//! run them, and report their status in batches.
//!
//! ```text
//!  register ──▶ heartbeat every TTL ──(node unknown)──▶ register again
//!      │
//!      └──▶ alloc watcher: Node.GetClientAllocs(min_index) ──▶ new: alloc_runner::spawn
//!                                                          ──▶ stop/evict/gone: cancel
//!  task runners ──▶ LocalAlloc changes ──▶ updater: every update_interval, one
//!  health watcher ─▶ (verdict)        ──▶          Node.UpdateAlloc with every changed alloc
//! ```
//!
//! - [`fingerprint`]: the node to register.
//! - [`servers`]: calls with failover between `client.servers`.
//! - [`driver`]: `raw_exec`, `exec` (isolated by [`sandbox`]: namespaces, a chroot of bind
//!   mounts, capabilities), `mock`, and [`docker`] (containers through the engine API;
//!   fingerprinted at start, orphaned containers of this node removed at start). Every
//!   process task runs in a cgroup of its own ([`cgroups`]), killed whole on stop.
//! - [`restart`]: the RestartPolicy tracker.
//! - [`alloc_runner`]: task runners, TaskStates and the allocation's ClientStatus.
//! - [`health`]: whether an allocation became healthy in its deployment or migration, which
//!   the next status report carries.
//! - [`services`]: the services of running allocations, registered with the servers and
//!   removed when their tasks stop (native service discovery); [`checks`]: their `http`
//!   and `tcp` health checks.
//! - [`ops`]: what an operator asks of the allocations here through the HTTP API (restart a
//!   task, send it a [`signal`], read its and the host's resource usage from `/proc`,
//!   [`stats`], run a command in a task's place, with a [`pty`] if asked), reached through
//!   a [`ops::ClientHandle`].
//!
//! The client's state (node identity and every allocation with its task handles) is kept in
//! a sled database, `<data_dir>/client/state.db` ([`state`]), written atomically and flushed
//! before every task launch, after it, and after every batch of changes. A launch is
//! recorded before it happens, so a client killed at any point finds every task it started
//! again when it restarts and never starts a second copy. Task directories are
//! `<data_dir>/alloc/<alloc id>/<task>/`.

pub mod alloc_runner;
pub mod allocdir;
pub mod artifacts;
pub mod cgroups;
pub mod checks;
pub mod config;
pub mod docker;
pub mod driver;
pub mod fingerprint;
pub mod gc;
pub mod health;
pub mod lifecycle;
pub mod logmon;
pub mod network;
pub mod ops;
pub mod pty;
pub mod restart;
pub mod sandbox;
pub mod servers;
pub mod services;
pub mod shared;
pub mod signal;
pub mod state;
pub mod stats;
pub mod task_runner;
pub mod taskenv;
pub mod templates;
pub mod types;
pub mod users;
pub mod volumes;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use teamster_storage::fsm::AllocClientReport;
use teamster_storage::model::{ClientStatus, NodeStatus};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use crate::client::config::ClientConfig;
use crate::rpc::service::node::{
    NodeClientAllocsResponse, NodeGetClientAllocsRequest, NodeRegisterRequest,
    NodeUpdateAllocRequest, NodeUpdateStatusRequest,
};
use crate::rpc::{Pool, RpcConfig, RpcError, ServiceError, Services};
use crate::util::{RngSource, SharedClock};
use servers::Servers;
use shared::{lock, Shared};
use types::{ClientState, LocalAlloc};

/// How long the servers may hold an allocation query.
const ALLOC_WAIT: Duration = Duration::from_secs(30);
/// Wait after a failed call before trying again.
const RETRY: Duration = Duration::from_secs(1);

/// Why the client role could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The client's directory or state file could not be used.
    #[error("{path}: {reason}")]
    State {
        /// The path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The RPC pool could not be built.
    #[error(transparent)]
    Rpc(#[from] RpcError),
}

/// A running client role.
pub struct Client {
    shared: Arc<Shared>,
    servers: Arc<Servers>,
    shutdown: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Client {
    /// Start the client: load or create its state under `<data_dir>/client`, re-attach to the
    /// tasks it ran, and begin registering with `servers` (RPC addresses). `name` is the node
    /// name and `http_addr` the agent's HTTP address for the node's `HTTPAddr`.
    pub async fn start(
        config: &ClientConfig,
        name: &str,
        data_dir: &Path,
        http_addr: String,
        servers: Vec<String>,
        clock: SharedClock,
        rng: RngSource,
    ) -> Result<Client, ClientError> {
        let dir = data_dir.join("client");
        let io = |path: &Path, e: std::io::Error| ClientError::State {
            path: path.to_path_buf(),
            reason: e.to_string(),
        };
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        for (name, volume) in &config.host_volume {
            let path = Path::new(&volume.path);
            match std::fs::metadata(path) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    return Err(ClientError::State {
                        path: path.to_path_buf(),
                        reason: format!("host volume {name:?}: not a directory"),
                    })
                }
                Err(e) => {
                    return Err(ClientError::State {
                        path: path.to_path_buf(),
                        reason: format!("host volume {name:?}: {e}"),
                    })
                }
            }
        }
        let alloc_root = data_dir.join("alloc");
        std::fs::create_dir_all(&alloc_root).map_err(|e| io(&alloc_root, e))?;
        let (store, mut state) = state::StateStore::open(&dir).map_err(|e| ClientError::State {
            path: dir.join(state::DB_DIR),
            reason: e.to_string(),
        })?;
        if state.node_id.is_empty() {
            state.node_id = rng.uuid();
            state.secret_id = rng.uuid();
        }
        let node_id = state.node_id.clone();
        let machine = fingerprint::Machine::detect(data_dir);
        let mut node = fingerprint::node(
            config,
            name,
            &node_id,
            &state.secret_id,
            &http_addr,
            &machine,
            clock.now_unix_nanos(),
        );
        let isolation = driver::Isolation::detect(config, data_dir);
        fingerprint::apply_exec_probe(
            &mut node,
            config,
            isolation.exec_problem.as_deref(),
            clock.now_unix_nanos(),
        );
        match (&isolation.cgroups, &isolation.exec_problem) {
            (Some(h), None) => info!(cgroup_version = h.version(), "exec driver healthy"),
            (_, Some(why)) => info!(reason = %why, "exec driver not detected"),
            (None, None) => {}
        }
        let cni_path = config.cni_path();
        let cni = tokio::task::spawn_blocking(move || network::cni::detect_versions(&cni_path))
            .await
            .unwrap_or_default();
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        fingerprint::apply_cni_plugins(&mut node, &cni, root);
        if !cni.is_empty() {
            info!(plugins = cni.len(), usable = root, "CNI plugins found");
        }
        let (networks, problems) =
            network::cni::load_config_dir(std::path::Path::new(&config.cni_config_dir));
        for problem in &problems {
            warn!(problem = %problem, "CNI network configuration left out");
        }
        fingerprint::apply_cni_networks(&mut node, networks.keys(), root);
        if !networks.is_empty() {
            info!(networks = ?networks.keys().collect::<Vec<_>>(), usable = root, "CNI networks found");
        }
        let docker = docker::Connector::default();
        let docker_usable = if config.drivers.iter().any(|d| d == "docker") {
            let probe = docker::probe(&docker).await;
            match &probe {
                docker::Probe::Healthy { version } => info!(version, "docker driver healthy"),
                docker::Probe::Unavailable(why) => {
                    info!(reason = %why, "docker driver not detected")
                }
            }
            fingerprint::apply_docker_probe(&mut node, &probe, clock.now_unix_nanos());
            matches!(probe, docker::Probe::Healthy { .. })
        } else {
            false
        };
        if docker_usable {
            // Containers of allocations this client no longer knows: nothing would ever
            // stop them. Before the alloc watcher starts, so no new allocation races this.
            let known = state.allocs.keys().cloned().collect();
            match docker::remove_orphans(&docker, &node_id, &known).await {
                Ok(0) => {}
                Ok(n) => info!(removed = n, "removed orphaned containers"),
                Err(e) => warn!(error = %e, "cannot look for orphaned containers"),
            }
        }
        let rpc = RpcConfig {
            tls: config.rpc_tls.clone(),
            ..RpcConfig::default()
        };
        let pool = Pool::new(0, rpc)?;
        let servers = Arc::new(Servers::new(pool, servers));
        servers.set_token(node.secret_id.clone());
        let shared = Arc::new(Shared {
            servers: Some(servers.clone()),
            node_values: taskenv::node_values(&node),
            persist_lock: Mutex::new(()),
            check_results: Mutex::new(BTreeMap::new()),
            docker,
            isolation,
            config: config.clone(),
            store,
            alloc_root,
            clock,
            state: Mutex::new(state),
            changed: Notify::new(),
            alloc_changes: watch::Sender::new(()),
            runners: Mutex::new(HashMap::new()),
        });
        shared.persist();
        // Directories of allocations this client no longer keeps: nothing else would ever
        // remove them.
        let kept: std::collections::HashSet<String> =
            shared.state().allocs.keys().cloned().collect();
        let root = shared.alloc_root.clone();
        let orphans = tokio::task::spawn_blocking(move || gc::sweep_orphans(&root, &kept))
            .await
            .unwrap_or(0);
        if orphans > 0 {
            info!(
                removed = orphans,
                "removed the directories of allocations no longer kept"
            );
        }
        // Networks of allocations whose tasks died while no client ran to remove them.
        alloc_runner::hooks::network::release_finished(&shared).await;
        // Re-attach to (or account for) what an earlier run left behind.
        let resumed: Vec<LocalAlloc> = shared
            .state()
            .allocs
            .values()
            .filter(|l| !l.finished())
            .cloned()
            .collect();
        for local in &resumed {
            let runner = alloc_runner::spawn(&shared, local);
            if local.alloc.server_terminal_status() {
                // Stopped by the servers but not dead yet (the client went away mid-kill):
                // its runners find the tasks again and stop them, or nothing would.
                runner.cancel();
            }
            lock(&shared.runners).insert(local.alloc.id.to_string(), runner);
        }
        if !resumed.is_empty() {
            info!(
                allocs = resumed.len(),
                "resumed allocations from the client state"
            );
        }
        if shared
            .state()
            .allocs
            .values()
            .any(|l| l.version > l.reported)
        {
            // Changes an earlier run did not get to report.
            shared.changed.notify_one();
        }

        let shutdown = CancellationToken::new();
        let (registered_tx, registered_rx) = watch::channel(false);
        let span = tracing::info_span!("client", node_id = %node_id);
        let tasks = vec![
            tokio::spawn(
                heartbeat_loop(
                    shared.clone(),
                    servers.clone(),
                    node,
                    registered_tx,
                    shutdown.clone(),
                )
                .instrument(span.clone()),
            ),
            tokio::spawn(
                watch_allocs(
                    shared.clone(),
                    servers.clone(),
                    node_id.clone(),
                    registered_rx,
                    shutdown.clone(),
                )
                .instrument(span.clone()),
            ),
            tokio::spawn(
                report_loop(shared.clone(), servers.clone(), shutdown.clone())
                    .instrument(span.clone()),
            ),
            tokio::spawn(
                services::service_loop(shared.clone(), servers.clone(), shutdown.clone())
                    .instrument(span.clone()),
            ),
            tokio::spawn(
                checks::check_loop(shared.clone(), shutdown.clone()).instrument(span.clone()),
            ),
            tokio::spawn(gc::gc_loop(shared.clone(), shutdown.clone()).instrument(span)),
        ];
        info!(node_id = %node_id, cores = machine.cores, memory_mb = machine.memory_mb, "client started");
        Ok(Client {
            shared,
            servers,
            shutdown,
            tasks,
        })
    }

    /// This node's id.
    pub fn node_id(&self) -> String {
        self.shared.state().node_id.clone()
    }

    /// What the HTTP API uses to reach this client's allocations.
    pub fn handle(&self) -> ops::ClientHandle {
        ops::ClientHandle::new(self.shared.clone(), self.servers.clone())
    }

    /// Where allocation directories live.
    pub fn alloc_root(&self) -> &Path {
        &self.shared.alloc_root
    }

    /// Stop every task (SIGTERM, SIGKILL after its kill timeout), wait until they are dead
    /// (at most `max_kill_timeout` and a second), then shut down. For dev mode, whose data
    /// directory goes away with the agent.
    pub async fn shutdown_and_stop_tasks(self) {
        let runners: Vec<types::AllocHandle> =
            lock(&self.shared.runners).drain().map(|(_, r)| r).collect();
        for r in &runners {
            r.cancel_now();
        }
        let deadline = tokio::time::Instant::now() + self.shared.config.max_kill_timeout + RETRY;
        while tokio::time::Instant::now() < deadline
            && self
                .shared
                .state()
                .allocs
                .values()
                .any(|l| !l.handles.is_empty())
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.shutdown().await;
    }

    /// Stop the client's loops and save its state. Tasks keep running (a restarted client
    /// re-attaches to them), as Nomad's do.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
        self.shared.persist();
        info!("client stopped");
    }
}

/// Register, then heartbeat at the TTL the servers hand back; register again when the
/// servers no longer know the node.
async fn heartbeat_loop(
    shared: Arc<Shared>,
    servers: Arc<Servers>,
    node: teamster_storage::model::Node,
    registered: watch::Sender<bool>,
    shutdown: CancellationToken,
) {
    let node_id = node.id.clone();
    let mut need_register = true;
    let mut failures = 0u32;
    let mut last_heard = tokio::time::Instant::now();
    loop {
        let outcome = if need_register {
            servers
                .node_register(Box::new(NodeRegisterRequest { node: node.clone() }))
                .await
        } else {
            servers
                .node_update_status(NodeUpdateStatusRequest {
                    node_id: node_id.clone(),
                    status: NodeStatus::Ready,
                })
                .await
        };
        let wait = match outcome {
            Ok(resp) => {
                failures = 0;
                last_heard = tokio::time::Instant::now();
                if need_register {
                    info!(ttl_ms = resp.heartbeat_ttl_ms, "node registered");
                    need_register = false;
                    registered.send_replace(true);
                }
                servers.learn(&resp.servers);
                metrics::counter!("teamster_client_heartbeats_total").increment(1);
                Duration::from_millis(resp.heartbeat_ttl_ms.max(100))
            }
            // Unknown to the servers, or refused: register (again). Anything else (no leader,
            // raft trouble) is retried as it is, without adding registration writes.
            Err(
                reason @ (ServiceError::NotFound { .. }
                | ServiceError::Rejected { .. }
                | ServiceError::Invalid { .. }),
            ) => {
                warn!(%reason, registering = need_register, "the servers refused the node");
                need_register = true;
                RETRY
            }
            Err(e) => {
                failures += 1;
                if failures > 1 {
                    warn!(error = %e, failures, "heartbeat failed; retrying");
                } else {
                    debug!(error = %e, "heartbeat failed; retrying");
                }
                metrics::counter!("teamster_client_heartbeat_failures_total").increment(1);
                stop_after_disconnect(&shared, last_heard.elapsed());
                RETRY
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// Stops the allocations whose group's `disconnect.stop_on_client_after` is shorter than
/// `silent`, the time since the servers last answered a heartbeat.
fn stop_after_disconnect(shared: &Arc<Shared>, silent: Duration) {
    let due: Vec<String> = shared
        .state()
        .allocs
        .values()
        .filter(|l| !l.finished())
        .filter(|l| {
            l.job
                .task_group(&l.alloc.task_group)
                .and_then(|g| g.disconnect.as_ref())
                .and_then(|d| d.stop_on_client_after)
                .is_some_and(|after| silent >= Duration::from_nanos(after))
        })
        .map(|l| l.alloc.id.to_string())
        .collect();
    for id in due {
        if let Some(runner) = lock(&shared.runners).get(&id) {
            if !runner.is_cancelled() {
                warn!(alloc_id = %id, silent_ms = silent.as_millis() as u64, "no servers for longer than the group's stop_on_client_after; stopping the allocation");
                runner.cancel();
            }
        }
    }
}

/// Follow the node's allocations: start new ones, stop those the servers stop, forget those
/// the servers no longer list.
async fn watch_allocs(
    shared: Arc<Shared>,
    servers: Arc<Servers>,
    node_id: String,
    mut registered: watch::Receiver<bool>,
    shutdown: CancellationToken,
) {
    tokio::select! {
        _ = shutdown.cancelled() => return,
        r = registered.wait_for(|r| *r) => if r.is_err() { return },
    }
    let mut index = 0;
    loop {
        let call = servers.node_get_client_allocs(NodeGetClientAllocsRequest {
            node_id: node_id.as_str().into(),
            min_index: index,
            wait_ms: ALLOC_WAIT.as_millis() as u64,
        });
        let resp = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = call => r,
        };
        match resp {
            // An answer from a server that lags behind the one asked before would list
            // fewer allocations than are running: ignore it and ask again.
            Ok(resp) if resp.index < index => {
                debug!(
                    index,
                    answered = resp.index,
                    "allocation answer from a lagging server; ignored"
                );
            }
            Ok(resp) => {
                index = resp.index;
                apply_allocs(&shared, *resp);
            }
            Err(e) => {
                debug!(error = %e, "allocation query failed; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(RETRY) => {}
                }
            }
        }
    }
}

/// Reconcile the local allocations with the servers' answer.
fn apply_allocs(shared: &Arc<Shared>, resp: NodeClientAllocsResponse) {
    let now = shared.clock.now_unix_nanos();
    let mut to_start = Vec::new();
    let mut to_stop = Vec::new();
    let mut to_update = Vec::new();
    let mut forgotten = Vec::new();
    {
        let mut st = shared.state();
        for ca in resp.changed {
            let id = ca.alloc.id.to_string();
            debug!(
                alloc_id = %id,
                desired = ?ca.alloc.desired_status,
                client_status = ca.alloc.client_status.as_str(),
                alloc_modify_index = ca.alloc.alloc_modify_index,
                known = st.allocs.contains_key(&id),
                "allocation changed on the servers"
            );
            match st.allocs.get_mut(&id) {
                Some(local) => {
                    let stop = ca.alloc.server_terminal_status()
                        || ca.alloc.client_status == ClientStatus::Lost;
                    // Marked unknown while this client was away: report it again, which
                    // is how the servers learn it reconnected.
                    if ca.alloc.client_status == ClientStatus::Unknown
                        && local.alloc.client_status != ClientStatus::Unknown
                    {
                        local.version += 1;
                        shared.changed.notify_one();
                    }
                    // The servers applied a report numbered above this client's version
                    // (its state was lost or not written): go on above it, and report
                    // again, or every report would be taken for a stale one.
                    let applied = u64::from(ca.alloc.client_report_seq);
                    if applied > local.version {
                        warn!(alloc_id = %id, version = local.version, applied, "the servers applied a newer report than this client holds; reporting again above it");
                        local.version = applied + 1;
                        shared.changed.notify_one();
                    }
                    local.alloc = ca.alloc;
                    if ca.migrate.is_some() {
                        local.migrate_from = ca.migrate;
                    }
                    // An in-place update brings the job's new version: its runners apply
                    // it (its update block judges the deployment the allocation joins).
                    if let Some(job) = ca.job {
                        if !stop && job.job_modify_index != local.job.job_modify_index {
                            to_update.push((id.clone(), job.job_modify_index));
                        }
                        local.job = std::sync::Arc::unwrap_or_clone(job);
                    }
                    if stop {
                        to_stop.push(id);
                    }
                }
                None => {
                    if ca.alloc.terminal_status() {
                        continue;
                    }
                    match ca.job {
                        Some(job) => {
                            let job = std::sync::Arc::unwrap_or_clone(job);
                            let mut local = LocalAlloc::received(ca.alloc, job, now);
                            local.migrate_from = ca.migrate;
                            st.allocs.insert(id, local.clone());
                            to_start.push(local);
                        }
                        None => warn!(alloc_id = %id, "allocation without its job; ignored"),
                    }
                }
            }
        }
        let listed: std::collections::HashSet<&str> = resp
            .alloc_indexes
            .iter()
            .map(|(id, _)| id.as_str())
            .collect();
        let gone: Vec<String> = st
            .allocs
            .keys()
            .filter(|id| !listed.contains(id.as_str()))
            .cloned()
            .collect();
        for id in gone {
            debug!(alloc_id = %id, index = resp.index, "allocation no longer listed by the servers; forgotten");
            st.allocs.remove(&id);
            forgotten.push(id.clone());
            to_stop.push(id);
        }
    }
    shared.alloc_changes.send_replace(());
    for local in to_start {
        info!(alloc_id = %local.alloc.id, job_id = %local.alloc.job_id, "starting allocation");
        let runner = alloc_runner::spawn(shared, &local);
        lock(&shared.runners).insert(local.alloc.id.to_string(), runner);
        shared.changed.notify_one();
    }
    for (id, job_modify_index) in to_update {
        if let Some(runner) = lock(&shared.runners).get(&id) {
            info!(alloc_id = %id, job_modify_index, "updating allocation in place");
            runner.update(job_modify_index);
        }
    }
    for id in to_stop {
        // A stopped allocation's runner stays until the allocation is collected or
        // forgotten: its tasks may take a while to die (kill timeouts, shutdown delays,
        // poststop tasks), and nothing may remove its directory before they have.
        let forgotten_now = forgotten.contains(&id);
        let runner = {
            let mut runners = lock(&shared.runners);
            if let Some(runner) = runners.get(&id) {
                if !runner.is_cancelled() {
                    info!(alloc_id = %id, "stopping allocation");
                    runner.cancel();
                }
            }
            if forgotten_now {
                runners.remove(&id)
            } else {
                None
            }
        };
        // The servers collected it: its directory goes once its runner is done.
        if forgotten_now {
            let shared = shared.clone();
            tokio::spawn(async move {
                if let Some(runner) = runner {
                    runner.done().await;
                }
                gc::remove_alloc_dir(&shared.alloc_root, &id).await;
            });
        }
    }
    shared.persist();
}

/// The reports of the allocations changed since a server last took their report, each with
/// the version it carries (the lost ones are left out: the servers' verdict stands).
///
/// A report's sequence number is the allocation's version: every change bumps it, and the
/// state is persisted before a report is sent, so a version the servers have seen never
/// comes back lower, and a resent older report loses to a newer one that overtook it.
fn unreported(st: &ClientState, now: i64) -> Vec<(String, u64, AllocClientReport)> {
    st.allocs
        .values()
        .filter(|l| l.version > l.reported)
        .filter(|l| l.alloc.client_status != ClientStatus::Lost)
        .map(|l| {
            (
                l.alloc.id.to_string(),
                l.version,
                AllocClientReport {
                    id: l.alloc.id.clone(),
                    client_status: l.client_status,
                    client_description: l.client_description.clone(),
                    task_states: l.task_states.clone(),
                    modify_time: now,
                    deployment_status: l.health_report(),
                    seq: u32::try_from(l.version).unwrap_or(u32::MAX),
                },
            )
        })
        .collect()
}

/// Every `update_interval`, send the changed allocations in one `Node.UpdateAlloc`.
async fn report_loop(shared: Arc<Shared>, servers: Arc<Servers>, shutdown: CancellationToken) {
    let interval = shared.config.update_interval;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = shared.changed.notified() => {}
        }
        // Gather what changes within one interval into one batch.
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        loop {
            let batch = unreported(&shared.state(), shared.clock.now_unix_nanos());
            if batch.is_empty() {
                break;
            }
            debug!(
                reports = ?batch.iter().map(|(id, v, r)| format!("{id}@{v}:{}", r.client_status.as_str())).collect::<Vec<_>>(),
                "reporting allocation changes"
            );
            // The versions sent must be on disk first: a client that restarted with an older
            // version would have its newer reports taken for stale ones.
            if let Err(e) = shared.try_persist() {
                warn!(path = %shared.store.path().display(), error = %e, "cannot write the client state; allocation updates wait for it");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(RETRY) => {}
                }
                continue;
            }
            let sent = servers
                .node_update_alloc(NodeUpdateAllocRequest {
                    allocs: batch.iter().map(|(_, _, r)| r.clone()).collect(),
                })
                .await;
            match sent {
                Ok(_) => {
                    metrics::counter!("teamster_client_alloc_updates_total")
                        .increment(batch.len() as u64);
                    let mut st = shared.state();
                    for (id, version, report) in &batch {
                        if let Some(l) = st.allocs.get_mut(id) {
                            l.reported = l.reported.max(*version);
                            // The verdict reached the servers: it is not sent again.
                            if let (Some(h), Some(sent)) =
                                (l.health.as_mut(), &report.deployment_status)
                            {
                                h.reported |= sent.healthy == Some(h.healthy)
                                    && sent.timestamp == h.timestamp;
                            }
                        }
                    }
                    break;
                }
                Err(e) => {
                    warn!(error = %e, allocs = batch.len(), "allocation update failed; retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = tokio::time::sleep(RETRY) => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::types::{TaskHandle, MAX_RUN_DURATION_EXCEEDED};
    use teamster_storage::model::{
        Allocation, ConfigValue, Job, JobType, RestartMode, RestartPolicy, Task, TaskGroup,
        TaskStateValue, Timestamp,
    };

    /// Wall time that follows tokio's (paused) clock.
    struct TestClock(tokio::time::Instant);

    impl crate::util::Clock for TestClock {
        fn now_unix_nanos(&self) -> i64 {
            1_000_000_000_000 + self.0.elapsed().as_nanos() as i64
        }
    }

    fn shared(dir: &Path) -> Arc<Shared> {
        shared_with(dir, ClientConfig::default())
    }

    fn shared_with(dir: &Path, config: ClientConfig) -> Arc<Shared> {
        Arc::new(Shared {
            config,
            store: state::StateStore::open(dir).unwrap().0,
            alloc_root: dir.join("alloc"),
            clock: Arc::new(TestClock(tokio::time::Instant::now())),
            state: Mutex::new(ClientState::default()),
            changed: Notify::new(),
            alloc_changes: watch::Sender::new(()),
            runners: Mutex::new(HashMap::new()),
            node_values: BTreeMap::new(),
            persist_lock: Mutex::new(()),
            check_results: Mutex::new(BTreeMap::new()),
            docker: docker::Connector::default(),
            isolation: driver::Isolation::default(),
            servers: None,
        })
    }

    fn mock_alloc(run_for: &str, exit_code: i64, attempts: u32, job_type: JobType) -> LocalAlloc {
        let mut task = Task {
            name: "t".into(),
            driver: "mock".into(),
            ..Task::default()
        };
        task.config.insert("run_for".into(), run_for.into());
        task.config
            .insert("exit_code".into(), ConfigValue::Int(exit_code));
        let job = Job {
            id: "j".into(),
            job_type,
            task_groups: vec![TaskGroup {
                name: "g".into(),
                count: 1,
                restart_policy: Some(RestartPolicy {
                    attempts: Some(attempts),
                    interval: Some(3_600_000_000_000),
                    delay: Some(2_000_000_000),
                    mode: Some(RestartMode::Fail),
                    render_templates: None,
                }),
                tasks: vec![task],
                ..TaskGroup::default()
            }]
            .into(),
            ..Job::default()
        };
        let alloc = Allocation {
            id: "a1".into(),
            job_id: "j".into(),
            task_group: "g".into(),
            ..Allocation::default()
        };
        LocalAlloc::received(alloc, job, 0)
    }

    async fn run_until_finished(sh: &Arc<Shared>, local: LocalAlloc) -> (LocalAlloc, Duration) {
        let started = tokio::time::Instant::now();
        sh.state().allocs.insert("a1".into(), local.clone());
        let _stop = alloc_runner::spawn(sh, &local);
        (wait_finished(sh).await, started.elapsed())
    }

    fn event_types(l: &LocalAlloc) -> Vec<String> {
        l.task_states["t"]
            .events
            .iter()
            .map(|e| e.event_type.clone())
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_failing_task_is_restarted_per_policy_then_fails_the_alloc() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        let (done, took) = run_until_finished(&sh, mock_alloc("1s", 3, 2, JobType::Service)).await;
        assert_eq!(done.client_status, ClientStatus::Failed);
        let t = &done.task_states["t"];
        assert_eq!(t.state, TaskStateValue::Dead);
        assert!(t.failed);
        assert_eq!(t.restarts, 2);
        let types = event_types(&done);
        assert_eq!(types.iter().filter(|t| *t == "Restarting").count(), 2);
        assert_eq!(types.last().map(String::as_str), Some("Not Restarting"));
        let exit = done.task_states["t"]
            .events
            .iter()
            .find(|e| e.event_type == "Terminated")
            .unwrap();
        assert_eq!(exit.exit_code, 3);
        // Three runs of 1 s and two restart delays of 2 s.
        assert!(
            took >= Duration::from_secs(7) && took < Duration::from_secs(8),
            "{took:?}"
        );
        assert!(done.version > done.reported, "changes wait for the updater");
    }

    #[test]
    fn reports_carry_the_allocation_version_as_their_sequence_number() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        let mut lost = mock_alloc("1s", 0, 0, JobType::Batch);
        lost.alloc.id = "a2".into();
        lost.alloc.client_status = ClientStatus::Lost;
        lost.version = 5;
        sh.state()
            .allocs
            .insert("a1".into(), mock_alloc("1s", 0, 0, JobType::Batch));
        sh.state().allocs.insert("a2".into(), lost);
        let sent = |sh: &Shared| {
            unreported(&sh.state(), 7)
                .into_iter()
                .map(|(id, version, r)| (id, version, r.seq, r.client_status, r.modify_time))
                .collect::<Vec<_>>()
        };
        // The lost allocation is not reported; the received one is, at version 1.
        assert_eq!(
            sent(&sh),
            vec![("a1".to_string(), 1, 1, ClientStatus::Pending, 7)]
        );
        sh.update_alloc("a1", |l| {
            l.task_states.get_mut("t").unwrap().state = TaskStateValue::Running
        });
        assert_eq!(
            sent(&sh),
            vec![("a1".to_string(), 2, 2, ClientStatus::Running, 7)]
        );
        // Taken by a server: nothing until the next change, which goes out at 3.
        sh.state().allocs.get_mut("a1").unwrap().reported = 2;
        assert!(sent(&sh).is_empty());
        sh.update_alloc("a1", |l| l.client_description = "again".into());
        assert_eq!(sent(&sh)[0].2, 3);
    }

    #[test]
    fn reports_go_on_above_the_number_the_servers_applied() {
        use crate::rpc::service::node::ClientAlloc;
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        let answer = |alloc: Allocation, job: Option<Job>| NodeClientAllocsResponse {
            index: 10,
            alloc_indexes: vec![(alloc.id.clone(), 10)],
            changed: vec![ClientAlloc {
                alloc,
                job: job.map(Arc::new),
                migrate: None,
            }],
        };
        // Received again after this client forgot it, with 6 applied: it starts at 7.
        let template = mock_alloc("1h", 0, 0, JobType::Batch);
        let mut alloc = template.alloc.clone();
        alloc.client_report_seq = 6;
        let local = LocalAlloc::received(alloc.clone(), template.job.clone(), 0);
        assert_eq!(local.version, 7);
        // A client whose state went back to version 2 while the servers hold 6 (its last
        // write was lost): the next answer carrying the allocation moves it above 6, and
        // the change is reported again.
        let mut behind = template.clone();
        behind.version = 2;
        behind.reported = 2;
        sh.state().allocs.insert("a1".into(), behind);
        assert!(unreported(&sh.state(), 0).is_empty());
        apply_allocs(&sh, answer(alloc.clone(), None));
        assert_eq!(unreported(&sh.state(), 0)[0].2.seq, 7);
        // An answer at or below the client's own version changes nothing.
        sh.state().allocs.get_mut("a1").unwrap().reported = 7;
        apply_allocs(&sh, answer(alloc, None));
        assert!(unreported(&sh.state(), 0).is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_successful_batch_task_completes_the_alloc() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        let (done, took) = run_until_finished(&sh, mock_alloc("3s", 0, 2, JobType::Batch)).await;
        assert_eq!(done.client_status, ClientStatus::Complete);
        assert_eq!(done.task_states["t"].restarts, 0);
        assert!(!done.task_states["t"].failed);
        assert!(took >= Duration::from_secs(3) && took < Duration::from_secs(4));
        assert!(
            done.handles.is_empty(),
            "no handle kept for a finished task"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn stopping_an_alloc_kills_its_task_without_failing_it() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        let local = mock_alloc("1h", 0, 2, JobType::Service);
        sh.state().allocs.insert("a1".into(), local.clone());
        let stop = alloc_runner::spawn(&sh, &local);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(sh.state().allocs["a1"].client_status, ClientStatus::Running);
        stop.cancel();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let done = sh.state().allocs["a1"].clone();
        assert_eq!(done.client_status, ClientStatus::Complete);
        let types = event_types(&done);
        assert!(
            types.ends_with(&["Killing".to_string(), "Killed".to_string()]),
            "{types:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_restarted_client_reattaches_instead_of_starting_a_second_copy() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        let mut local = mock_alloc("10s", 0, 2, JobType::Batch);
        // As persisted by an earlier run: started 4 s ago, running for 10 s.
        let now = sh.clock.now_unix_nanos();
        local.handles.insert(
            "t".into(),
            TaskHandle::Mock {
                started_at: now - 4_000_000_000,
                run_for: 10_000_000_000,
                exit_code: 0,
            },
        );
        local.task_states.get_mut("t").unwrap().state = TaskStateValue::Running;
        let (done, took) = run_until_finished(&sh, local).await;
        assert_eq!(done.client_status, ClientStatus::Complete);
        assert!(
            took >= Duration::from_secs(6) && took < Duration::from_secs(7),
            "{took:?}"
        );
        assert!(
            !event_types(&done).contains(&"Started".to_string()),
            "started twice"
        );
    }

    /// Killed between recording a launch and recording what it started: the restarted
    /// client finds the task the launch started instead of starting another.
    #[tokio::test(start_paused = true)]
    async fn a_recorded_launch_is_resumed_not_repeated() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        let mut local = mock_alloc("10s", 0, 2, JobType::Batch);
        let now = sh.clock.now_unix_nanos();
        local.handles.insert(
            "t".into(),
            TaskHandle::Launching {
                launch_id: "L1".into(),
                at: now - 4_000_000_000,
            },
        );
        let (done, took) = run_until_finished(&sh, local).await;
        assert_eq!(done.client_status, ClientStatus::Complete);
        assert!(
            took >= Duration::from_secs(6) && took < Duration::from_secs(7),
            "{took:?}"
        );
        let types = event_types(&done);
        assert_eq!(
            types.iter().filter(|t| *t == "Started").count(),
            1,
            "the start the earlier run did not record, once: {types:?}"
        );
        assert_eq!(
            done.task_states["t"].started_at,
            Timestamp::from_unix_nanos(now - 4_000_000_000)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_restarted_mid_kill_stops_what_the_servers_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let clock = Arc::new(TestClock(tokio::time::Instant::now()));
        // As an earlier run left it: the servers had stopped the allocation, its task was
        // being killed when the client went away.
        let mut local = mock_alloc("1h", 0, 0, JobType::Service);
        local.alloc.desired_status = teamster_storage::model::DesiredStatus::Stop;
        local.handles.insert(
            "t".into(),
            TaskHandle::Mock {
                started_at: crate::util::Clock::now_unix_nanos(&*clock) - 1_000_000_000,
                run_for: 3_600_000_000_000,
                exit_code: 0,
            },
        );
        local.task_states.get_mut("t").unwrap().state = TaskStateValue::Running;
        let state = ClientState {
            node_id: "5b8f2c3e-1111-4222-8333-444455556666".into(),
            secret_id: "s".into(),
            allocs: BTreeMap::from([("a1".to_string(), local)]),
        };
        {
            let (store, _) = state::StateStore::open(&dir.path().join("client")).unwrap();
            store.write(&state).unwrap();
        }
        let config = ClientConfig {
            drivers: vec!["mock".into()],
            ..ClientConfig::default()
        };
        let client = Client::start(
            &config,
            "n",
            dir.path(),
            "127.0.0.1:4646".into(),
            Vec::new(),
            clock,
            RngSource::seeded(1),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let done = client.shared.state().allocs["a1"].clone();
        assert_eq!(done.client_status, ClientStatus::Complete);
        assert!(done.handles.is_empty());
        assert_eq!(done.task_states["t"].state, TaskStateValue::Dead);
        assert!(event_types(&done).contains(&"Killed".to_string()));
        client.shutdown().await;
    }

    /// A group with `disconnect.stop_on_client_after` is stopped once the servers have been
    /// silent that long, and not before; a group without it keeps running.
    #[tokio::test(start_paused = true)]
    async fn allocations_stop_after_the_servers_are_silent_for_stop_on_client_after() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        let mut local = mock_alloc("1h", 0, 0, JobType::Service);
        local.job.task_groups_mut()[0].disconnect =
            Some(teamster_storage::model::DisconnectStrategy {
                stop_on_client_after: Some(5_000_000_000),
                ..Default::default()
            });
        let mut other = mock_alloc("1h", 0, 0, JobType::Service);
        other.alloc.id = "a2".into();
        for l in [&local, &other] {
            sh.state().allocs.insert(l.alloc.id.to_string(), l.clone());
            let runner = alloc_runner::spawn(&sh, l);
            lock(&sh.runners).insert(l.alloc.id.to_string(), runner);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop_after_disconnect(&sh, Duration::from_secs(4));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(sh.state().allocs["a1"].client_status, ClientStatus::Running);
        stop_after_disconnect(&sh, Duration::from_secs(5));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let st = sh.state();
        assert_eq!(st.allocs["a1"].client_status, ClientStatus::Complete);
        assert!(event_types(&st.allocs["a1"]).contains(&"Killed".to_string()));
        assert_eq!(st.allocs["a2"].client_status, ClientStatus::Running);
    }

    #[tokio::test(start_paused = true)]
    async fn dev_mode_shutdown_stops_every_task() {
        let dir = tempfile::tempdir().unwrap();
        let client = Client::start(
            &ClientConfig::default(),
            "n",
            dir.path(),
            "127.0.0.1:4646".into(),
            Vec::new(),
            Arc::new(TestClock(tokio::time::Instant::now())),
            RngSource::seeded(1),
        )
        .await
        .unwrap();
        let local = mock_alloc("1h", 0, 0, JobType::Service);
        let sh = client.shared.clone();
        sh.state().allocs.insert("a1".into(), local.clone());
        let runner = alloc_runner::spawn(&sh, &local);
        lock(&sh.runners).insert("a1".into(), runner);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!sh.state().allocs["a1"].handles.is_empty());
        client.shutdown_and_stop_tasks().await;
        let done = sh.state().allocs["a1"].clone();
        assert_eq!(done.client_status, ClientStatus::Complete);
        assert!(done.handles.is_empty());
        let saved = sh.store.read().unwrap();
        assert!(
            saved.allocs["a1"].handles.is_empty(),
            "saved after the stop"
        );
    }

    /// The HTTP API's handle on `sh`, with no servers known.
    fn handle_of(sh: &Arc<Shared>) -> ops::ClientHandle {
        let pool = Pool::new(0, RpcConfig::default()).unwrap();
        ops::ClientHandle::new(sh.clone(), Arc::new(Servers::new(pool, Vec::new())))
    }

    #[test]
    fn the_servers_are_replaced_only_by_a_list_of_host_ports() {
        let dir = tempfile::tempdir().unwrap();
        let handle = handle_of(&shared(dir.path()));
        handle
            .set_servers(vec!["10.0.0.1:4647".into(), "srv-2:4647".into()])
            .unwrap();
        assert_eq!(handle.servers(), ["10.0.0.1:4647", "srv-2:4647"]);
        for bad in [
            vec![],
            vec!["10.0.0.9".to_string()],
            vec!["a:0".into()],
            vec![":4647".into()],
        ] {
            assert!(handle.set_servers(bad.clone()).is_err(), "{bad:?}");
        }
        assert_eq!(
            handle.servers(),
            ["10.0.0.1:4647", "srv-2:4647"],
            "unchanged"
        );
    }

    /// `local` started as the alloc watcher starts it: in the state and among the runners.
    fn start_alloc(sh: &Arc<Shared>, local: &LocalAlloc) {
        sh.state().allocs.insert("a1".into(), local.clone());
        let runner = alloc_runner::spawn(sh, local);
        lock(&sh.runners).insert("a1".into(), runner);
    }

    #[tokio::test(start_paused = true)]
    async fn an_operator_restart_is_in_place_and_not_held_against_the_policy() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        // No restart allowed by the policy: an exit would fail the allocation.
        start_alloc(&sh, &mock_alloc("1h", 0, 0, JobType::Service));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let handle = handle_of(&sh);
        handle.restart("a1", None, false).await.unwrap();
        handle.restart("a1", Some("t"), false).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = sh.state().allocs["a1"].clone();
        assert_eq!(now.client_status, ClientStatus::Running);
        let t = &now.task_states["t"];
        assert_eq!(
            (t.state, t.failed, t.restarts),
            (TaskStateValue::Running, false, 2)
        );
        let types = event_types(&now);
        let last: Vec<&str> = types
            .iter()
            .rev()
            .take(5)
            .rev()
            .map(String::as_str)
            .collect();
        assert_eq!(
            last,
            [
                "Restart Signaled",
                "Terminated",
                "Restarting",
                "Task Setup",
                "Started"
            ],
            "{types:?}"
        );
        let signaled = &t.events[t.events.len() - 5];
        assert_eq!(signaled.restart_reason, "User requested restart");
        // Every task of the allocation, by name or all at once.
        handle.restart("a1", None, true).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(sh.state().allocs["a1"].task_states["t"].restarts, 3);
    }

    /// An allocation of `tasks` (name, lifecycle hook, sidecar, mock run time, exit code),
    /// no restarts allowed.
    fn lifecycle_alloc(job_type: JobType, tasks: &[(&str, &str, bool, &str, i64)]) -> LocalAlloc {
        let template = mock_alloc("1h", 0, 0, job_type);
        let mut job = template.job.clone();
        job.task_groups_mut()[0].tasks = tasks
            .iter()
            .map(|(name, hook, sidecar, run_for, exit_code)| {
                let mut task = Task {
                    name: name.to_string(),
                    driver: "mock".into(),
                    lifecycle: (!hook.is_empty()).then(|| teamster_storage::model::TaskLifecycle {
                        hook: hook.to_string(),
                        sidecar: *sidecar,
                    }),
                    ..Task::default()
                };
                task.config.insert("run_for".into(), (*run_for).into());
                task.config
                    .insert("exit_code".into(), ConfigValue::Int(*exit_code));
                task
            })
            .collect();
        LocalAlloc::received(template.alloc, job, 0)
    }

    fn state_of(sh: &Arc<Shared>, task: &str) -> TaskStateValue {
        sh.state().allocs["a1"].task_states[task].state
    }

    fn first_event(l: &LocalAlloc, task: &str, kind: &str) -> Option<i64> {
        l.task_states[task]
            .events
            .iter()
            .find(|e| e.event_type == kind)
            .map(|e| e.time)
    }

    async fn wait_finished(sh: &Arc<Shared>) -> LocalAlloc {
        for _ in 0..10_000 {
            if sh.state().allocs["a1"].finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        sh.state().allocs["a1"].clone()
    }

    /// A finished allocation is collected only once its runner is done and the servers have
    /// its end; collecting removes its directory and forgets it. Over `gc_max_allocs`, the
    /// oldest finished ones go first and running ones never.
    #[tokio::test(start_paused = true)]
    async fn finished_allocations_are_collected_once_reported_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared_with(
            dir.path(),
            ClientConfig {
                gc_max_allocs: 1,
                ..ClientConfig::default()
            },
        );
        let local = mock_alloc("1s", 0, 0, JobType::Batch);
        sh.state().allocs.insert("a1".into(), local.clone());
        let runner = alloc_runner::spawn(&sh, &local);
        lock(&sh.runners).insert("a1".into(), runner);
        let done = wait_finished(&sh).await;
        assert_eq!(done.client_status, ClientStatus::Complete);
        let a1_dir = sh.alloc_root.join("a1");
        assert!(a1_dir.join("alloc").is_dir(), "the allocation's directory");
        for _ in 0..100 {
            if lock(&sh.runners)["a1"].finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(lock(&sh.runners)["a1"].finished());
        // The servers have not heard of its end yet: kept.
        assert!(!gc::collect(&sh, "a1", "requested").await);
        assert!(a1_dir.is_dir());
        {
            let mut st = sh.state();
            let a1 = st.allocs.get_mut("a1").unwrap();
            a1.reported = a1.version;
        }
        assert!(gc::collect(&sh, "a1", "requested").await);
        assert!(!a1_dir.exists(), "its directory is gone");
        assert!(!sh.state().allocs.contains_key("a1"));
        assert!(!lock(&sh.runners).contains_key("a1"));
        assert!(!gc::collect(&sh, "a1", "requested").await, "nothing left");

        // Four kept, one allowed: the finished ones go, oldest first; the running one stays
        // whatever its age, and so does the finished one it replaces.
        let kept = |id: &str, modify_index: u64, dead: bool| {
            let mut l = mock_alloc("1s", 0, 0, JobType::Batch);
            l.alloc.id = id.into();
            l.alloc.modify_index = modify_index;
            let state = l.task_states.entry("t".into()).or_default();
            state.state = if dead {
                TaskStateValue::Dead
            } else {
                TaskStateValue::Running
            };
            l.recompute();
            l.reported = l.version;
            std::fs::create_dir_all(sh.alloc_root.join(id).join("alloc")).unwrap();
            sh.state().allocs.insert(id.into(), l);
        };
        kept("running", 1, false);
        kept("old", 5, true);
        kept("new", 9, true);
        kept("replaced", 2, true);
        // The running one replaces "replaced": it may still take its disk.
        sh.state()
            .allocs
            .get_mut("running")
            .unwrap()
            .alloc
            .previous_allocation = "replaced".into();
        gc::collect_round(&sh).await;
        let left: Vec<String> = sh.state().allocs.keys().cloned().collect();
        assert_eq!(left, ["replaced", "running"]);
        assert!(sh.alloc_root.join("running").is_dir());
        assert!(sh.alloc_root.join("replaced").is_dir());
        assert!(!sh.alloc_root.join("old").exists() && !sh.alloc_root.join("new").exists());

        // Stopped by the servers, then no longer listed (they collected it at once, as a
        // forced GC may) while its task still waits out its 10 s shutdown delay: forgotten
        // at once, but its directory stays until the task is dead.
        let mut local = mock_alloc("1h", 0, 0, JobType::Service);
        local.job.task_groups_mut()[0].tasks[0].shutdown_delay = 10_000_000_000;
        sh.state().allocs.insert("a1".into(), local.clone());
        lock(&sh.runners).insert("a1".into(), alloc_runner::spawn(&sh, &local));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(sh.alloc_root.join("a1").is_dir());
        let mut stopped = local.alloc.clone();
        stopped.desired_status = teamster_storage::model::DesiredStatus::Stop;
        stopped.alloc_modify_index = 30;
        let listing = |ids: Vec<(teamster_storage::model::AllocId, u64)>,
                       changed: Vec<crate::rpc::service::node::ClientAlloc>| {
            NodeClientAllocsResponse {
                index: 30,
                alloc_indexes: ids,
                changed,
            }
        };
        apply_allocs(
            &sh,
            listing(
                vec![("running".into(), 1), ("a1".into(), 30)],
                vec![crate::rpc::service::node::ClientAlloc {
                    alloc: stopped,
                    job: None,
                    migrate: None,
                }],
            ),
        );
        assert!(
            lock(&sh.runners).contains_key("a1"),
            "a stopped runner is kept"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        apply_allocs(&sh, listing(vec![("running".into(), 1)], Vec::new()));
        assert!(!sh.state().allocs.contains_key("a1"));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(
            sh.alloc_root.join("a1").is_dir(),
            "removed while the task waits out its shutdown delay"
        );
        for _ in 0..600 {
            if !sh.alloc_root.join("a1").exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(!sh.alloc_root.join("a1").exists(), "its directory is gone");
        assert!(sh.alloc_root.join("running").is_dir(), "a listed one stays");

        // At start, the directories of allocations not kept are removed.
        std::fs::create_dir_all(sh.alloc_root.join("orphan").join("alloc")).unwrap();
        let kept: std::collections::HashSet<String> = ["running".to_string()].into();
        assert_eq!(gc::sweep_orphans(&sh.alloc_root, &kept), 1);
        assert!(!sh.alloc_root.join("orphan").exists());
        assert!(sh.alloc_root.join("running").is_dir());
    }

    #[tokio::test(start_paused = true)]
    async fn prestart_tasks_complete_before_the_main_task_and_poststop_runs_after_the_stop() {
        use TaskStateValue::{Dead, Pending, Running};
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        start_alloc(
            &sh,
            &lifecycle_alloc(
                JobType::Service,
                &[
                    ("init", "prestart", false, "3s", 0),
                    ("proxy", "prestart", true, "1h", 0),
                    ("web", "", false, "1h", 0),
                    ("warm", "poststart", false, "2s", 0),
                    ("cleanup", "poststop", false, "1s", 0),
                ],
            ),
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now: Vec<_> = ["init", "proxy", "web", "warm", "cleanup"]
            .iter()
            .map(|t| state_of(&sh, t))
            .collect();
        assert_eq!(now, [Running, Running, Pending, Pending, Pending]);
        // The init task completed at 3 s: the main task runs, then the poststart task.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(state_of(&sh, "init"), Dead);
        assert_eq!(state_of(&sh, "web"), Running);
        assert_eq!(state_of(&sh, "warm"), Running);
        tokio::time::sleep(Duration::from_secs(3)).await;
        let l = sh.state().allocs["a1"].clone();
        assert_eq!(l.task_states["warm"].state, Dead);
        assert!(!l.task_states["warm"].failed);
        assert_eq!(l.client_status, ClientStatus::Running);
        assert!(first_event(&l, "web", "Started") >= first_event(&l, "init", "Terminated"));
        assert_eq!(state_of(&sh, "cleanup"), Pending);

        // Stopped: the main task and the sidecar are killed, then the poststop task runs.
        lock(&sh.runners)["a1"].cancel();
        let done = wait_finished(&sh).await;
        assert_eq!(done.client_status, ClientStatus::Complete, "{done:?}");
        let cleanup_started = first_event(&done, "cleanup", "Started").expect("poststop ran");
        for task in ["web", "proxy"] {
            let killed = first_event(&done, task, "Killed").expect("killed");
            assert!(killed <= cleanup_started, "{task}");
        }
        assert!(first_event(&done, "cleanup", "Terminated").is_some());
        // The completed ephemeral tasks never ran twice.
        for task in ["init", "warm"] {
            let starts = done.task_states[task]
                .events
                .iter()
                .filter(|e| e.event_type == "Started")
                .count();
            assert_eq!(starts, 1, "{task}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_ends_after_an_in_place_update_moved_the_leader() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        let mut local = lifecycle_alloc(
            JobType::Service,
            &[
                ("a", "", false, "1h", 0),
                ("b", "", false, "1h", 0),
                ("proxy", "prestart", true, "1h", 0),
            ],
        );
        local.job.task_groups_mut()[0].tasks[0].leader = true;
        start_alloc(&sh, &local);
        tokio::time::sleep(Duration::from_secs(1)).await;
        update_in_place(&sh, 2, |g| {
            g.tasks[0].leader = false;
            g.tasks[1].leader = true;
            g.tasks[2].lifecycle = None;
        });
        tokio::time::sleep(Duration::from_secs(1)).await;
        lock(&sh.runners)["a1"].cancel();
        let done = wait_finished(&sh).await;
        assert!(done.finished(), "{:?}", done.task_states);
        // The waves of the allocation as it started: the leader a, then b, then the sidecar.
        let killed = |t| first_event(&done, t, "Killed").unwrap();
        assert!(killed("proxy") >= killed("b"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_allocation_forgotten_or_an_agent_leaving_mid_stop_runs_no_poststop_task() {
        let tasks = [
            ("web", "", false, "1h", 0),
            ("cleanup", "poststop", false, "1h", 0),
        ];
        let delayed = || {
            let mut local = lifecycle_alloc(JobType::Service, &tasks);
            local.job.task_groups_mut()[0].tasks[0].shutdown_delay = 10_000_000_000;
            local
        };
        // Forgotten by the client during the main task's shutdown delay.
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        start_alloc(&sh, &delayed());
        tokio::time::sleep(Duration::from_secs(1)).await;
        lock(&sh.runners)["a1"].cancel();
        tokio::time::sleep(Duration::from_secs(1)).await;
        sh.state().allocs.remove("a1");
        sh.alloc_changes.send_replace(());
        tokio::time::sleep(Duration::from_secs(15)).await;
        {
            let runners = lock(&sh.runners);
            assert!(
                runners["a1"].task("web").is_none(),
                "the main task's runner lives"
            );
            assert!(
                runners["a1"].task("cleanup").is_none(),
                "the poststop runner lives"
            );
        }

        // The agent leaves while a stop waits out the main task's shutdown delay.
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        start_alloc(&sh, &delayed());
        tokio::time::sleep(Duration::from_secs(1)).await;
        let stop_at = sh.clock.now_unix_nanos();
        lock(&sh.runners)["a1"].cancel();
        tokio::time::sleep(Duration::from_secs(1)).await;
        lock(&sh.runners)["a1"].cancel_now();
        let done = wait_finished(&sh).await;
        let killing = first_event(&done, "web", "Killing").expect("web killed");
        assert!(
            killing - stop_at < 5_000_000_000,
            "the delay was waited out"
        );
        assert!(
            first_event(&done, "cleanup", "Started").is_none(),
            "poststop ran"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn restarting_every_task_runs_the_prestart_task_again_before_the_main_task() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        start_alloc(
            &sh,
            &lifecycle_alloc(
                JobType::Service,
                &[
                    ("init", "prestart", false, "2s", 0),
                    ("web", "", false, "1h", 0),
                ],
            ),
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(state_of(&sh, "web"), TaskStateValue::Running);
        let handle = handle_of(&sh);
        // Only the running task: the completed prestart task stays done.
        handle.restart("a1", None, false).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let starts = |l: &LocalAlloc, t: &str| -> Vec<i64> {
            l.task_states[t]
                .events
                .iter()
                .filter(|e| e.event_type == "Started")
                .map(|e| e.time)
                .collect()
        };
        let l = sh.state().allocs["a1"].clone();
        assert_eq!((starts(&l, "init").len(), starts(&l, "web").len()), (1, 2));
        // Every task: the prestart task runs again, and the main task waits for it.
        handle.restart("a1", None, true).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(state_of(&sh, "init"), TaskStateValue::Running);
        assert_eq!(state_of(&sh, "web"), TaskStateValue::Pending);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let l = sh.state().allocs["a1"].clone();
        // (Ten events are kept per task: the main task's first start is gone.)
        let (init, web) = (starts(&l, "init"), starts(&l, "web"));
        assert_eq!(init.len(), 2, "{:?}", l.task_states);
        let last_web = *web.last().unwrap();
        assert!(last_web >= init[1] + 2_000_000_000, "{:?}", l.task_states);
        assert_eq!(l.task_states["init"].restarts, 1);
        assert_eq!(l.task_states["web"].restarts, 2);
        assert_eq!(l.client_status, ClientStatus::Running);
    }

    #[tokio::test(start_paused = true)]
    async fn sidecars_stop_once_the_main_tasks_are_done_and_a_failed_prestart_task_runs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        let done = run_until_finished(
            &sh,
            lifecycle_alloc(
                JobType::Batch,
                &[
                    ("proxy", "prestart", true, "1h", 0),
                    ("job", "", false, "2s", 0),
                ],
            ),
        )
        .await
        .0;
        assert_eq!(done.client_status, ClientStatus::Complete);
        let proxy = &done.task_states["proxy"];
        assert!(
            proxy
                .events
                .iter()
                .any(|e| e.event_type == "Main Tasks Dead"
                    && e.display_message == "Main tasks in the group died"),
            "{:?}",
            proxy.events
        );
        assert!(!proxy.failed);

        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        let done = run_until_finished(
            &sh,
            lifecycle_alloc(
                JobType::Batch,
                &[
                    ("init", "prestart", false, "1s", 1),
                    ("job", "", false, "2s", 0),
                    ("cleanup", "poststop", false, "1s", 0),
                ],
            ),
        )
        .await
        .0;
        assert_eq!(done.client_status, ClientStatus::Failed);
        assert!(
            first_event(&done, "job", "Started").is_none(),
            "the main task started"
        );
        assert!(!done.task_states["job"].failed);
        assert!(
            first_event(&done, "cleanup", "Started").is_some(),
            "no poststop"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stop_kills_the_leader_then_the_others_then_the_sidecars() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        let mut local = lifecycle_alloc(
            JobType::Service,
            &[
                ("proxy", "prestart", true, "1h", 0),
                ("main", "", false, "1h", 0),
                ("web", "", false, "1h", 0),
            ],
        );
        {
            let tasks = &mut local.job.task_groups_mut()[0].tasks;
            tasks[1].leader = true;
            // Each wave takes its time: the next one must wait for it.
            tasks[1].shutdown_delay = 2_000_000_000;
            tasks[2].shutdown_delay = 1_000_000_000;
        }
        start_alloc(&sh, &local);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(sh.state().allocs["a1"].client_status, ClientStatus::Running);
        lock(&sh.runners)["a1"].cancel();
        let done = wait_finished(&sh).await;
        let killed = |t| first_event(&done, t, "Killed").unwrap();
        let killing = |t| first_event(&done, t, "Killing").unwrap();
        assert!(killed("main") <= killing("web"));
        assert!(killed("web") <= killing("proxy"));
        assert!(killing("web") - killing("main") >= 1_000_000_000);
        assert_eq!(done.client_status, ClientStatus::Complete);
    }

    /// Nomad's `max_run_duration`: counted from the allocation's creation; an in-place
    /// update moves the deadline; when it runs out the main task is killed (its `Killing`
    /// event says why), a poststop task never starts, and the allocation is `complete`,
    /// "allocation exceeded max_run_duration".
    #[tokio::test(start_paused = true)]
    async fn max_run_duration_kills_the_tasks_and_completes_the_allocation() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        let mut local = lifecycle_alloc(
            JobType::Batch,
            &[
                ("t", "", false, "1h", 0),
                ("cleanup", "poststop", false, "1s", 0),
            ],
        );
        // Created 10 s before now, with 30 s to run.
        local.alloc.create_time = sh.clock.now_unix_nanos() - 10_000_000_000;
        local.job.task_groups_mut()[0].max_run_duration = Some(30_000_000_000);
        start_alloc(&sh, &local);
        tokio::time::sleep(Duration::from_secs(15)).await;
        // Raised to 60 s in place: the old deadline (20 s from the start) passes.
        update_in_place(&sh, 2, |g| g.max_run_duration = Some(60_000_000_000));
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(sh.state().allocs["a1"].client_status, ClientStatus::Running);
        assert!(!sh.state().allocs["a1"].max_run_exceeded);
        // Due 50 s after the start.
        tokio::time::sleep(Duration::from_secs(16)).await;
        let done = wait_finished(&sh).await;
        assert!(done.max_run_exceeded);
        assert_eq!(done.client_status, ClientStatus::Complete);
        assert_eq!(done.client_description, MAX_RUN_DURATION_EXCEEDED);
        let killing = done.task_states["t"]
            .events
            .iter()
            .find(|e| e.event_type == "Killing")
            .expect("the main task is killed");
        assert_eq!(killing.display_message, MAX_RUN_DURATION_EXCEEDED);
        assert!(
            first_event(&done, "cleanup", "Started").is_none(),
            "the poststop task never starts"
        );
        assert!(!done.task_states["t"].failed);
    }

    /// A service job's group never has a deadline (Nomad's: batch and sysbatch only).
    #[tokio::test(start_paused = true)]
    async fn max_run_duration_applies_to_batch_jobs_only() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        let mut local = mock_alloc("1h", 0, 0, JobType::Service);
        local.alloc.create_time = sh.clock.now_unix_nanos();
        local.job.task_groups_mut()[0].max_run_duration = Some(1_000_000_000);
        start_alloc(&sh, &local);
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(sh.state().allocs["a1"].client_status, ClientStatus::Running);
    }

    /// `f` applied to the job of allocation `a1` as an in-place update brings it (a new
    /// `JobModifyIndex`), handed to its runner.
    fn update_in_place(sh: &Arc<Shared>, index: u64, f: impl FnOnce(&mut TaskGroup)) {
        sh.update_alloc("a1", |local| {
            local.job.job_modify_index = index;
            f(&mut local.job.task_groups_mut()[0]);
        });
        lock(&sh.runners)["a1"].update(index);
    }

    #[tokio::test(start_paused = true)]
    async fn an_in_place_update_changes_how_the_running_task_is_stopped_and_restarted() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        // It fails at its first exit (no restart allowed), 10 s in.
        start_alloc(&sh, &mock_alloc("10s", 1, 0, JobType::Service));
        tokio::time::sleep(Duration::from_secs(1)).await;
        update_in_place(&sh, 2, |g| {
            if let Some(p) = g.restart_policy.as_mut() {
                p.attempts = Some(2);
            }
            g.shutdown_delay = 3_000_000_000;
            let t = &mut g.tasks[0];
            t.kill_timeout = 2_000_000_000;
            t.kill_signal = "SIGINT".into();
            t.shutdown_delay = 1_000_000_000;
        });
        // The exit at 10 s is restarted under the new policy (after its 2 s delay).
        tokio::time::sleep(Duration::from_secs(12)).await;
        let now = sh.state().allocs["a1"].clone();
        let t = &now.task_states["t"];
        assert_eq!(
            (t.state, t.failed, t.restarts),
            (TaskStateValue::Running, false, 1)
        );
        assert!(now.registered.group && now.registered.tasks.contains("t"));

        // Stopped: the group's services go at once, then its new 3 s delay, then the
        // task's services, its new 1 s delay and its new kill timeout.
        let stop_at = sh.clock.now_unix_nanos();
        lock(&sh.runners)["a1"].cancel();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let during = sh.state().allocs["a1"].registered.clone();
        assert!(!during.group && during.tasks.contains("t"), "{during:?}");
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert!(sh.state().allocs["a1"].registered.tasks.is_empty());
        for _ in 0..100 {
            if sh.state().allocs["a1"].finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let done = sh.state().allocs["a1"].clone();
        let events = &done.task_states["t"].events;
        let waiting = events
            .iter()
            .find(|e| e.event_type == "Waiting for shutdown delay")
            .expect("the task's shutdown delay");
        assert!(waiting.display_message.contains("1s"), "{waiting:?}");
        let killing = events
            .iter()
            .find(|e| e.event_type == "Killing")
            .expect("a Killing event");
        assert_eq!(killing.kill_timeout, 2_000_000_000);
        assert!(
            killing.time - stop_at >= 4_000_000_000,
            "signalled {} ms after the stop",
            (killing.time - stop_at) / 1_000_000
        );
        assert_eq!(done.registered, crate::client::types::Registered::default());
    }

    #[tokio::test(start_paused = true)]
    async fn signals_reach_running_tasks_and_bad_requests_are_named() {
        use ops::AllocOpError;
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        start_alloc(&sh, &mock_alloc("1h", 0, 0, JobType::Service));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let handle = handle_of(&sh);
        handle.signal("a1", None, "sigusr1").await.unwrap();
        let t = sh.state().allocs["a1"].task_states["t"].clone();
        let ev = t.events.last().unwrap();
        assert_eq!(ev.event_type, "Signaling");
        assert_eq!(ev.details["signal"], "SIGUSR1");
        assert_eq!(t.state, TaskStateValue::Running);

        assert_eq!(
            handle.signal("a1", None, "SIGNOPE").await,
            Err(AllocOpError::UnknownSignal("SIGNOPE".into()))
        );
        assert_eq!(
            handle.signal("a1", Some("web"), "SIGHUP").await,
            Err(AllocOpError::UnknownTask {
                task: "web".into(),
                alloc_id: "a1".into()
            })
        );
        assert_eq!(
            handle.restart("a2", None, false).await,
            Err(AllocOpError::UnknownAlloc("a2".into()))
        );
        assert!(matches!(
            handle.restart("a1", Some("t"), true).await,
            Err(AllocOpError::Invalid(_))
        ));

        // Once the allocation is stopped, nothing runs to restart or signal.
        lock(&sh.runners).remove("a1").unwrap().cancel();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            handle.restart("a1", None, false).await,
            Err(AllocOpError::NothingRunning("a1".into()))
        );
        assert_eq!(
            handle.signal("a1", Some("t"), "SIGHUP").await,
            Err(AllocOpError::Task(types::TaskOpError::NotRunning(
                "t".into()
            )))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn usage_is_reported_per_task_and_for_the_host() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        std::fs::create_dir_all(&sh.alloc_root).unwrap();
        start_alloc(&sh, &mock_alloc("1h", 0, 0, JobType::Service));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let handle = handle_of(&sh);
        // A mock task has no process: its usage is zero and says nothing was measured.
        let usage = handle.alloc_stats("a1").await.unwrap();
        let task = &usage["Tasks"]["t"];
        assert_eq!(task["ResourceUsage"]["MemoryStats"]["RSS"], 0);
        assert_eq!(
            task["ResourceUsage"]["CpuStats"]["Measured"],
            serde_json::json!([])
        );
        assert_eq!(task["Pids"], serde_json::json!({}));
        assert_eq!(usage["ResourceUsage"]["CpuStats"]["Percent"], 0.0);
        assert_eq!(
            handle.alloc_stats("a2").await,
            Err(ops::AllocOpError::UnknownAlloc("a2".into()))
        );
        // This process's group stands in for a raw_exec task's.
        // SAFETY: getpgrp has no effects.
        let pgrp = unsafe { libc::getpgrp() };
        sh.state().allocs.get_mut("a1").unwrap().handles.insert(
            "t".into(),
            TaskHandle::Process {
                pid: pgrp,
                start_ticks: 0,
                cgroup: Vec::new(),
            },
        );
        let usage = handle.alloc_stats("a1").await.unwrap();
        let measured = &usage["Tasks"]["t"];
        assert!(
            measured["ResourceUsage"]["MemoryStats"]["RSS"]
                .as_u64()
                .unwrap()
                > 0
        );
        assert_eq!(
            measured["ResourceUsage"]["MemoryStats"]["Measured"],
            serde_json::json!(["RSS", "Swap"])
        );
        assert!(!measured["Pids"].as_object().unwrap().is_empty());
        assert_eq!(
            usage["ResourceUsage"]["MemoryStats"]["RSS"],
            measured["ResourceUsage"]["MemoryStats"]["RSS"]
        );

        let host = handle.host_stats();
        assert!(host["Memory"]["Total"].as_u64().unwrap() > 0);
        assert!(!host["CPU"].as_array().unwrap().is_empty());
        assert!(host["Uptime"].as_u64().unwrap() > 0);
        assert!(host["AllocDirStats"]["Size"].as_u64().unwrap() > 0);
        assert!(!host["DiskStats"].as_array().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn state_survives_a_restart_of_the_client() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        sh.state().node_id = "n1".into();
        sh.state()
            .allocs
            .insert("a1".into(), mock_alloc("1s", 0, 0, JobType::Batch));
        sh.persist();
        let back = sh.store.read().unwrap();
        assert_eq!(back.node_id, "n1");
        assert_eq!(back.allocs["a1"], sh.state().allocs["a1"]);
    }

    /// Many writers at once (task runners persisting as their tasks start) each succeed, and
    /// the store ends up holding the newest state.
    #[test]
    fn concurrent_persists_all_succeed_and_the_newest_state_wins() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        std::thread::scope(|scope| {
            for t in 0..8 {
                let sh = &sh;
                scope.spawn(move || {
                    for i in 0..40 {
                        sh.state().node_id = format!("writer-{t}-{i}");
                        sh.try_persist().expect("every write succeeds");
                    }
                });
            }
        });
        sh.state().node_id = "last".into();
        sh.try_persist().unwrap();
        assert_eq!(sh.store.read().unwrap().node_id, "last");
    }

    /// `local` in deployment `d1` of a group that rolls: healthy after 10 s, within 60 s.
    fn in_deployment(mut local: LocalAlloc) -> LocalAlloc {
        use teamster_storage::model::{MigrateStrategy, UpdateStrategy};
        local.alloc.deployment_id = "d1".into();
        let group = &mut local.job.task_groups_mut()[0];
        group.update = Some(UpdateStrategy {
            min_healthy_time: Some(10_000_000_000),
            healthy_deadline: Some(60_000_000_000),
            ..UpdateStrategy::nomad_default()
        });
        group.migrate = Some(MigrateStrategy::nomad_default());
        local
    }

    fn alloc_unhealthy_messages(l: &LocalAlloc) -> Vec<String> {
        l.task_states["t"]
            .events
            .iter()
            .filter(|e| e.event_type == health::ALLOC_UNHEALTHY)
            .map(|e| e.message.clone())
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_running_service_alloc_is_judged_healthy_and_queued_for_the_next_sync() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        let started = sh.clock.now_unix_nanos();
        start_alloc(
            &sh,
            &in_deployment(mock_alloc("1h", 0, 0, JobType::Service)),
        );
        tokio::time::sleep(Duration::from_secs(9)).await;
        assert_eq!(sh.state().allocs["a1"].health, None, "too early");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let local = sh.state().allocs["a1"].clone();
        let judged = local.health.clone().expect("judged");
        assert!(judged.healthy);
        assert_eq!(judged.deployment_id.as_str(), "d1");
        let at = judged.timestamp.unix_nanos().unwrap() - started;
        assert!(
            (10_000_000_000..10_100_000_000).contains(&at),
            "{at} ns after the start"
        );
        let report = local.health_report().expect("the next report carries it");
        assert_eq!(report.healthy, Some(true));
        assert!(local.version > local.reported, "a sync is due");
        assert!(alloc_unhealthy_messages(&local).is_empty());
        // Judged once.
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(sh.state().allocs["a1"].health, Some(judged));
    }

    #[tokio::test(start_paused = true)]
    async fn batch_allocations_are_never_judged() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        start_alloc(&sh, &in_deployment(mock_alloc("1h", 0, 0, JobType::Batch)));
        tokio::time::sleep(Duration::from_secs(120)).await;
        let local = sh.state().allocs["a1"].clone();
        assert_eq!(local.client_status, ClientStatus::Running);
        assert_eq!((local.health.clone(), local.health_report()), (None, None));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_task_makes_its_deployment_alloc_unhealthy_with_an_event() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        let (done, _) =
            run_until_finished(&sh, in_deployment(mock_alloc("1s", 3, 0, JobType::Service))).await;
        // The verdict follows the task's death within the same instant.
        tokio::time::sleep(Duration::from_millis(10)).await;
        let local = sh.state().allocs["a1"].clone();
        assert_eq!(done.client_status, ClientStatus::Failed);
        let judged = local.health.clone().expect("judged");
        assert!(!judged.healthy);
        assert_eq!(
            alloc_unhealthy_messages(&local),
            ["Unhealthy because of failed task"]
        );
        assert_eq!(local.health_report().unwrap().healthy, Some(false));
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_restarting_too_often_is_unhealthy_at_the_healthy_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        // Runs 5 s, waits 2 s, runs again: never 10 s in a row.
        start_alloc(
            &sh,
            &in_deployment(mock_alloc("5s", 1, 100, JobType::Service)),
        );
        tokio::time::sleep(Duration::from_secs(59)).await;
        assert_eq!(sh.state().allocs["a1"].health, None);
        tokio::time::sleep(Duration::from_secs(2)).await;
        let local = sh.state().allocs["a1"].clone();
        assert!(local.task_states["t"].restarts >= 8);
        assert_eq!(local.health.as_ref().map(|h| h.healthy), Some(false));
        let messages = alloc_unhealthy_messages(&local);
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert!(
            messages[0].starts_with("Task not running")
                && messages[0].ends_with("by healthy_deadline of 1m0s"),
            "{messages:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn joining_a_new_deployment_is_judged_again() {
        use crate::rpc::service::node::ClientAlloc;
        let dir = tempfile::tempdir().unwrap();
        let sh = shared(dir.path());
        let local = in_deployment(mock_alloc("1h", 0, 0, JobType::Service));
        start_alloc(&sh, &local);
        tokio::time::sleep(Duration::from_secs(11)).await;
        {
            // The status sync delivered it.
            let mut st = sh.state();
            let l = st.allocs.get_mut("a1").unwrap();
            l.reported = l.version;
            l.health.as_mut().unwrap().reported = true;
            assert_eq!(l.health_report(), None);
        }
        // The servers update it in place into deployment d2.
        let mut alloc = local.alloc.clone();
        alloc.deployment_id = "d2".into();
        apply_allocs(
            &sh,
            NodeClientAllocsResponse {
                index: 10,
                alloc_indexes: vec![(teamster_storage::model::AllocId::new("a1"), 10)],
                changed: vec![ClientAlloc {
                    alloc,
                    job: None,
                    migrate: None,
                }],
            },
        );
        tokio::time::sleep(Duration::from_secs(9)).await;
        let waiting = sh.state().allocs["a1"].clone();
        assert_eq!(
            waiting.health.as_ref().unwrap().deployment_id.as_str(),
            "d1"
        );
        assert_eq!(waiting.health_report(), None, "d1's verdict is not d2's");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let local = sh.state().allocs["a1"].clone();
        let judged = local.health.clone().unwrap();
        assert_eq!(
            (judged.deployment_id.as_str(), judged.healthy),
            ("d2", true)
        );
        assert_eq!(local.health_report().unwrap().healthy, Some(true));
        assert!(local.version > local.reported);
    }
}
