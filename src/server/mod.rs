//! The server role: the raft node, leadership, and (on the leader) the eval broker, blocked
//! evals, plan queue and applier, heartbeat timers; on every server the scheduler workers.
//!
//! ```text
//!  RpcServer ──▶ endpoints::ServerRpc ──▶ RaftNode (openraft + sled + StateStore)
//!                                           ▲          │ server_metrics
//!  formation (join / bootstrap) ────────────┘          ▼
//!                                          leader monitor ──▶ establish / revoke duties
//! ```
//!
//! - [`raft`]: the raft node, local writes (batched; never forwarded), membership changes.
//! - [`write_batcher`]: group commit of concurrent writes into one entry.
//! - [`formation`]: `bootstrap_expect` and `join`.
//! - [`handover`]: a stopping leader hands leadership to an up-to-date voter.
//! - [`leader`]: the leadership monitor.
//! - [`leader_service`]: the shell the leader-only subsystems share: the tasks each runs
//!   while this server leads, the deadline loop of a sans-IO core, the periodic ticker.
//! - [`broker`], [`blocked`]: the leader's queue of evaluations and the evals
//!   waiting for capacity.
//! - [`pipeline`]: the broker and blocked evals switched by leadership and fed by the state.
//! - [`plan`]: the plan queue and the plan applier.
//! - [`reapers`]: failed, cancelable and duplicate blocked evals written back by the leader.
//! - [`periodic`]: the leader's periodic dispatcher (children of periodic jobs at their
//!   cron times).
//! - [`deployments`]: the operations on deployments and the leader's deployment watcher
//!   (evaluations as allocations turn healthy, progress deadlines, auto-promotion and
//!   auto-revert).
//! - [`heartbeat`]: the leader's heartbeat timers (nodes that go silent are marked down).
//! - [`drainer`]: the leader's node drainer (allocations leave draining nodes at the pace of
//!   their `migrate` blocks; drains end at their deadline or when nothing is left).
//! - [`autoscaler`]: capacity on demand (the leader has a provider create client nodes of a
//!   class while evaluations stay blocked, and stop them once idle).
//! - [`acl`]: token resolution from the local state, cached (ACLs on).
//! - [`endpoints`]: the service calls' server side (served here, or forwarded to the
//!   leader), and the handler of every RPC request.
//! - [`worker`]: the scheduler workers and their pool.

pub mod acl;
pub mod autopilot;
pub mod autoscaler;
pub mod blocked;
pub mod broker;
pub mod config;
pub mod deployments;
pub mod drainer;
pub mod endpoints;
pub mod evals;
pub mod formation;
pub mod handover;
pub mod heartbeat;
pub mod keyring;
pub mod leader;
pub mod leader_service;
pub mod lease;
pub mod periodic;
pub mod pipeline;
pub mod plan;
pub mod raft;
pub mod reapers;
pub mod variable_locks;
pub mod worker;
pub mod write_batcher;

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use teamster_storage::raft_types::{ServerAddr, ServerId};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::rpc::{Pool, RpcConfig, RpcServer};
use crate::server::config::ServerConfig;
use crate::util::{RngSource, SharedClock};
use formation::Discovered;
use leader::LeadershipState;
use raft::RaftNode;

/// Why the server role could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The server's directory or id file could not be prepared.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The server id file holds something other than a positive number.
    #[error("{path}: not a server id: {content:?}")]
    BadServerId {
        /// The file.
        path: PathBuf,
        /// What it holds.
        content: String,
    },
    /// The RPC listener could not start.
    #[error(transparent)]
    Rpc(#[from] crate::rpc::RpcError),
    /// The raft node could not start.
    #[error(transparent)]
    Raft(#[from] raft::RaftNodeError),
    /// The scheduler workers could not start.
    #[error(transparent)]
    Workers(#[from] worker::WorkerError),
    /// The eval broker or blocked-evals settings are invalid.
    #[error(transparent)]
    Broker(#[from] broker::BrokerError),
    /// The autoscaler's provider cannot run with its settings.
    #[error(transparent)]
    Autoscaler(#[from] autoscaler::AutoscalerError),
    /// The keystore cannot be opened.
    #[error(transparent)]
    Keyring(#[from] keyring::ServerKeyringError),
}

/// How long a server stopping with `leave_on_terminate` waits for its removal to commit.
const LEAVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A running server role.
pub struct Server {
    node: Arc<RaftNode>,
    rpc: RpcServer,
    leadership: LeadershipState,
    workers: Arc<worker::pool::WorkerPool>,
    endpoints: endpoints::Endpoints,
    /// The broker (held while handing over).
    pipeline: pipeline::EvalPipeline,
    shutdown: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// `server.raft.leadership_transfer_timeout`.
    transfer_timeout: std::time::Duration,
}

/// Where a server role runs: everything it needs from the agent besides its `[server]`
/// section.
#[derive(Clone)]
pub struct ServerSetup {
    /// The agent's name (the raft address book's `name`).
    pub name: String,
    /// Where the RPC listener binds (port 0: any free port).
    pub rpc_bind: SocketAddr,
    /// The agent's data directory; the server keeps its state under `<data_dir>/server`.
    pub data_dir: PathBuf,
    /// The address other agents reach this one at.
    pub advertise: IpAddr,
    /// The bound HTTP listener (for the address book).
    pub http_addr: SocketAddr,
    /// The wall clock for stamps.
    pub clock: SharedClock,
    /// The randomness seam: server id, tokens, eval ids, jitter.
    pub rng: RngSource,
    /// Mutual TLS on the RPC port (the agent's `tls.rpc`): the listener's and the pool's.
    pub rpc_tls: Option<crate::util::tls::AgentTls>,
    /// The RPC listener's deadlines and per-client connection limit (the agent's
    /// `[limits]`).
    pub rpc_limits: crate::rpc::RpcLimits,
    /// Whether ACLs are on (the agent's `acl.enabled`).
    pub acl_enabled: bool,
}

impl Server {
    /// Start the server role: storage under `<data_dir>/server`, the RPC listener, raft,
    /// formation, the scheduler workers and the leadership monitor with its duties.
    pub async fn start(config: &ServerConfig, setup: ServerSetup) -> Result<Server, ServerError> {
        let ServerSetup {
            name,
            rpc_bind,
            data_dir,
            advertise,
            http_addr,
            clock,
            rng,
            rpc_tls,
            rpc_limits,
            acl_enabled,
        } = setup;
        let dir = data_dir.join("server");
        std::fs::create_dir_all(&dir).map_err(|source| ServerError::Io {
            path: dir.clone(),
            source,
        })?;
        let id = load_or_create_server_id(&dir, &rng)?;
        // Checked before the RPC listener and raft start: a bad provider setting (an
        // unreadable client config) stops the start with the key named.
        let scaler_provider = autoscaler::build_provider(&config.autoscaler)?;
        let discovered = Discovered::default();
        let handler = endpoints::ServerRpc::new(discovered.clone());
        let rpc_config = RpcConfig {
            tls: rpc_tls,
            limits: rpc_limits,
            ..RpcConfig::default()
        };
        let rpc =
            RpcServer::bind(rpc_bind, id, Arc::new(handler.clone()), rpc_config.clone()).await?;
        let addr = ServerAddr {
            name,
            rpc_addr: SocketAddr::new(advertise, rpc.local_addr().port()).to_string(),
            http_addr: SocketAddr::new(advertise, http_addr.port()).to_string(),
        };
        let pool = Pool::new(id, rpc_config)?;
        let node = RaftNode::start(id, addr, &dir, config, pool, rng.next_u64()).await?;
        handler.set_node(node.clone());

        let shutdown = CancellationToken::new();
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(formation::run(
            node.clone(),
            config.bootstrap_expect,
            config.join.clone(),
            config.join_retry_interval,
            discovered,
            shutdown.clone(),
        )));
        tasks.push(tokio::spawn(formation::rejoin(
            node.clone(),
            config.join.clone(),
            std::time::Duration::from_secs(2),
            shutdown.clone(),
        )));
        // The leader's subsystems (enabled by the leadership monitor) and the service layer
        // that serves from them.
        let pipeline = pipeline::EvalPipeline::new(
            config.eval_broker.clone(),
            blocked::BlockedEvalsConfig::default(),
            &rng,
            clock.clone(),
        )?;
        let held_pipeline = pipeline.clone();
        let plans = plan::PlanQueue::new();
        let heartbeats =
            heartbeat::Heartbeats::new(node.clone(), config.clone(), clock.clone(), rng.fork());
        let (leadership, established) = leader::LeadershipState::new();
        let keyring = keyring::Keyring::open(
            &dir,
            node.clone(),
            clock.clone(),
            rng.child(),
            keyring::KeyringSettings {
                oidc_issuer: config.oidc_issuer.clone(),
                rotation_threshold: config.root_key_rotation_threshold,
            },
        )?;
        let lock_leases = Arc::new(variable_locks::LockLeases::default());
        let autopilot = Arc::new(autopilot::Autopilot::default());
        let endpoints = endpoints::Endpoints::new(endpoints::EndpointParts {
            node: node.clone(),
            pipeline: pipeline.clone(),
            plans: plans.clone(),
            leadership: leadership.clone(),
            heartbeats: heartbeats.clone(),
            clock: clock.clone(),
            rng: rng.child(),
            hold: config.rpc_hold_timeout,
            job_max_versions: config.job_max_versions,
            job_max_count: config.job_max_count,
            acl_enabled,
            acl: Arc::new(acl::AclResolver::new(clock.clone())),
            keyring: keyring.clone(),
            lock_leases: lock_leases.clone(),
            autopilot: autopilot.clone(),
        });
        handler.set_endpoints(endpoints.clone());
        // Scheduler workers on every server call the service layer in process; on the leader
        // the first duty pauses 3/4 of them.
        let workers = worker::pool::WorkerPool::start(
            Arc::new(worker::WorkerContext {
                backend: Arc::new(endpoints.clone()),
                state: node.state().clone(),
                clock: clock.clone(),
                rng: rng.child(),
                config: config.workers.clone(),
                raft_sync_limit: config.raft_sync_limit,
                settings: crate::scheduler::SchedulerSettings::default(),
                schedulers: Arc::new(worker::PlacementSchedulers),
                ready_nodes: Arc::default(),
                shutdown: shutdown.clone(),
            }),
            worker::pool::PoolConfig {
                num_schedulers: config.num_schedulers,
                enabled_schedulers: config.enabled_schedulers.clone(),
            },
        )?;
        // Leader duties in establishing order (ARCHITECTURE.md §4); revoked in reverse:
        // pausing workers first, heartbeat timers last.
        let mut duties: Vec<Arc<dyn leader::LeaderDuty>> = vec![
            Arc::new(worker::pool::PauseWorkersDuty::new(workers.clone())),
            Arc::new(plan::PlanQueueDuty::new(
                node.clone(),
                plans,
                clock.clone(),
                config.eval_broker.clone(),
            )),
            Arc::new(pipeline::BrokerDuty::new(
                pipeline.clone(),
                node.state().clone(),
            )),
            Arc::new(reapers::ReapersDuty::new(
                node.clone(),
                pipeline,
                clock.clone(),
                rng.child(),
            )),
            Arc::new(worker::gc::CoreGcDuty::new(
                node.clone(),
                clock.clone(),
                rng.child(),
                config.workers.core_gc_interval,
            )),
            Arc::new(periodic::PeriodicDuty::new(
                node.clone(),
                clock.clone(),
                rng.child(),
            )),
            Arc::new(deployments::DeploymentWatcherDuty::new(
                node.clone(),
                clock.clone(),
                rng.child(),
                config.job_max_versions,
            )),
            Arc::new(drainer::DrainerDuty::new(
                node.clone(),
                clock.clone(),
                rng.child(),
            )),
        ];
        if let Some(provider) = scaler_provider {
            duties.push(Arc::new(autoscaler::AutoscalerDuty::new(
                config.autoscaler.clone(),
                provider,
                Arc::new(endpoints.clone()),
                rng.child(),
            )));
        }
        tasks.push(tokio::spawn(keyring.clone().replicate(shutdown.clone())));
        duties.push(keyring::KeyringDuty::new(keyring));
        duties.push(variable_locks::VariableLockDuty::new(
            lock_leases,
            node.clone(),
        ));
        duties.push(autopilot::AutopilotDuty::new(
            node.clone(),
            autopilot,
            clock.clone(),
        ));
        duties.push(Arc::new(heartbeats));
        tasks.push(leader::spawn(
            node.clone(),
            duties,
            clock,
            rng.child(),
            established,
            shutdown.clone(),
        ));
        tasks.push(tokio::spawn(export_raft_metrics(
            node.clone(),
            shutdown.clone(),
        )));
        info!(server_id = id, rpc = %node.addr().rpc_addr, "server started");
        Ok(Server {
            node,
            rpc,
            leadership,
            workers,
            endpoints,
            pipeline: held_pipeline,
            shutdown,
            tasks,
            transfer_timeout: config.raft.leadership_transfer_timeout,
        })
    }

    /// The raft node.
    pub fn node(&self) -> &Arc<RaftNode> {
        &self.node
    }

    /// Whether this server's leader duties are established.
    pub fn leadership(&self) -> &LeadershipState {
        &self.leadership
    }

    /// The scheduler workers.
    pub fn workers(&self) -> &Arc<worker::pool::WorkerPool> {
        &self.workers
    }

    /// The service layer: every call the server accepts (the HTTP API calls it in process).
    pub fn endpoints(&self) -> &endpoints::Endpoints {
        &self.endpoints
    }

    /// Before the agent stops on a signal, while its API still forwards: a leader hands
    /// leadership to an up-to-date voter (within `server.raft.leadership_transfer_timeout`),
    /// and with `leave` the server removes itself from the raft configuration (Nomad's
    /// `leave_on_terminate`), so the others stop counting it in their quorum.
    pub async fn prepare_stop(&self, leave: bool) {
        if !self.transfer_timeout.is_zero() && self.node.is_leader() {
            // No evaluation is handed out whose plan this leader would refuse while the
            // hand-over runs (it refuses writes meanwhile).
            let broker = self.pipeline.broker();
            broker.hold_deliveries(true);
            // Its outcome is logged; the server stops either way.
            let _ = handover::hand_over(&self.node, self.transfer_timeout).await;
            if self.node.is_leader() {
                // The hand-over failed: deliver again until the server stops. (Stepping
                // down disables the broker, which releases it too.)
                broker.hold_deliveries(false);
            }
        }
        if leave {
            let me = self.node.id();
            info!(server_id = me, "leaving the raft configuration");
            let call = crate::rpc::ServiceRequest::OperatorRaftRemovePeer(
                crate::rpc::service::operator::RaftRemovePeerRequest::Id(me),
            );
            if self.node.lease_lost() {
                // No quorum answers: the removal could never commit.
                tracing::warn!(
                    server_id = me,
                    "no quorum: not leaving the raft configuration"
                );
                return;
            }
            // Bounded: with the other servers stopping too there may be no quorum to commit it.
            let leave = self.endpoints.call(endpoints::Origin::Local, call);
            match tokio::time::timeout(LEAVE_TIMEOUT, leave).await {
                Ok(Ok(_)) => info!(server_id = me, "left the raft configuration"),
                Ok(Err(e)) => tracing::warn!(
                    server_id = me,
                    error = %e,
                    "could not leave the raft configuration"
                ),
                Err(_) => tracing::warn!(
                    server_id = me,
                    timeout = ?LEAVE_TIMEOUT,
                    "leaving the raft configuration timed out; stopping anyway"
                ),
            }
        }
    }

    /// Stop formation, revoke leadership, stop the workers (nacking what they hold), the RPC
    /// listener and raft.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
        self.workers.shutdown().await;
        self.rpc.shutdown().await;
        self.node.shutdown().await;
        info!("server stopped");
    }
}

/// The raft id of the server owning `dir`: read from `dir/server-id`, or chosen at random and
/// written (durably) on first start.
fn load_or_create_server_id(dir: &Path, rng: &RngSource) -> Result<ServerId, ServerError> {
    let path = dir.join("server-id");
    match std::fs::read_to_string(&path) {
        Ok(text) => match text.trim().parse::<ServerId>() {
            Ok(id) if id != 0 => Ok(id),
            _ => Err(ServerError::BadServerId {
                path,
                content: text.chars().take(40).collect(),
            }),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Keep ids within 2^53 so they survive JSON tooling that reads numbers as doubles.
            let id = loop {
                let id = rng.next_u64() & ((1 << 53) - 1);
                if id != 0 {
                    break id;
                }
            };
            let tmp = dir.join("server-id.tmp");
            let io = |source| ServerError::Io {
                path: path.clone(),
                source,
            };
            {
                use std::io::Write;
                let mut f = std::fs::File::create(&tmp).map_err(io)?;
                f.write_all(format!("{id}\n").as_bytes()).map_err(io)?;
                f.sync_all().map_err(io)?;
            }
            std::fs::rename(&tmp, &path).map_err(io)?;
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io)?;
            Ok(id)
        }
        Err(source) => Err(ServerError::Io { path, source }),
    }
}

/// Publish raft's progress as Prometheus gauges until shutdown.
async fn export_raft_metrics(node: Arc<RaftNode>, shutdown: CancellationToken) {
    let mut rx = node.raft().metrics();
    loop {
        {
            let m = rx.borrow_and_update();
            metrics::gauge!("teamster_raft_term").set(m.current_term as f64);
            metrics::gauge!("teamster_raft_last_log_index")
                .set(m.last_log_index.unwrap_or(0) as f64);
            metrics::gauge!("teamster_raft_applied_index")
                .set(m.last_applied.map_or(0, |l| l.index) as f64);
            metrics::gauge!("teamster_raft_snapshot_index")
                .set(m.snapshot.map_or(0, |l| l.index) as f64);
            metrics::gauge!("teamster_raft_is_leader").set(
                if m.state == openraft::ServerState::Leader {
                    1.0
                } else {
                    0.0
                },
            );
            metrics::gauge!("teamster_raft_peers")
                .set(m.membership_config.membership().voter_ids().count() as f64);
        }
        let log = node.log_stats();
        metrics::counter!("teamster_raft_log_appended_entries_total")
            .absolute(log.appended_entries());
        metrics::counter!("teamster_raft_log_appended_bytes_total").absolute(log.appended_bytes());
        tokio::select! {
            _ = shutdown.cancelled() => return,
            r = rx.changed() => if r.is_err() { return },
        }
        // Coalesce bursts of changes: at most ten updates a second.
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(std::time::Duration::from_millis(100)) => {}
        }
    }
}

#[cfg(test)]
mod server_id_tests {
    use super::*;

    #[test]
    fn the_server_id_is_stable_across_starts() {
        let dir = tempfile::tempdir().unwrap();
        let a = load_or_create_server_id(dir.path(), &RngSource::seeded(3)).unwrap();
        let b = load_or_create_server_id(dir.path(), &RngSource::seeded(3)).unwrap();
        assert_eq!(a, b);
        assert!(a != 0 && a < (1 << 53));
    }

    #[test]
    fn a_corrupt_server_id_is_refused_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("server-id"), "banana").unwrap();
        let e = load_or_create_server_id(dir.path(), &RngSource::seeded(3))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a server id"), "{e}");
    }
}

#[cfg(test)]
mod tests;
