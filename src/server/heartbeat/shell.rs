//! The heartbeat shell, [`Heartbeats`]: the table under a mutex, shared by the node
//! endpoints (resets) and the leader monitor (the duty), and while this server leads one
//! expiry task on a [`LeaderService`] that marks silent nodes down through raft.

use std::ops::ControlFlow;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use rand::rngs::StdRng;
use teamster_storage::fsm::{Command, NodeUpdateStatus};
use teamster_storage::model::{NodeId, NodeStatus};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use super::core::{HeartbeatError, HeartbeatTable};
use crate::server::config::ServerConfig;
use crate::server::leader::LeaderDuty;
use crate::server::leader_service::{run_deadlines, LeaderService};
use crate::server::raft::RaftNode;
use crate::util::SharedClock;

/// The async shell: shared by the node endpoints (resets) and the leader monitor (duty).
#[derive(Clone)]
pub struct Heartbeats {
    inner: Arc<Shared>,
}

struct Shared {
    node: Arc<RaftNode>,
    clock: SharedClock,
    table: Mutex<HeartbeatTable>,
    rng: Mutex<StdRng>,
    wake: Notify,
    /// The expiry task, running while this server leads.
    tasks: LeaderService,
}

impl Heartbeats {
    /// A disabled set of timers for `node`'s cluster.
    pub fn new(
        node: Arc<RaftNode>,
        config: ServerConfig,
        clock: SharedClock,
        rng: StdRng,
    ) -> Heartbeats {
        Heartbeats {
            inner: Arc::new(Shared {
                node,
                clock,
                table: Mutex::new(HeartbeatTable::new(config)),
                rng: Mutex::new(rng),
                wake: Notify::new(),
                tasks: LeaderService::new(),
            }),
        }
    }

    fn table(&self) -> MutexGuard<'_, HeartbeatTable> {
        self.inner.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A heartbeat from `id`: the TTL to hand back, or `NotLeader`.
    pub fn reset(&self, id: &NodeId) -> Result<Duration, HeartbeatError> {
        let ttl = {
            let mut rng = self.inner.rng.lock().unwrap_or_else(|p| p.into_inner());
            let mut table = self.table();
            let ttl = table.reset(id.clone(), Instant::now(), &mut *rng)?;
            metrics::gauge!("teamster_heartbeat_active").set(table.len() as f64);
            ttl
        };
        metrics::counter!("teamster_heartbeat_resets_total").increment(1);
        self.inner.wake.notify_one();
        Ok(ttl)
    }

    /// Forget `id`'s timer.
    pub fn remove(&self, id: &NodeId) {
        self.table().remove(id);
    }

    /// Nodes with a running timer.
    pub fn tracked(&self) -> usize {
        self.table().len()
    }

    /// The expiry task: sleeps until the earliest deadline, re-reads it when a heartbeat
    /// comes in, and marks down the nodes whose TTL ran out.
    async fn expiry_loop(self, stop: CancellationToken) {
        run_deadlines(
            &stop,
            &self.inner.wake,
            || self.table().next_deadline(),
            |at| self.expire(Some(at), &stop),
        )
        .await;
    }

    /// The earliest deadline (`next`) is due: every node whose TTL ran out is marked down.
    /// Breaks the loop once the table is disabled or `stop` fires.
    async fn expire(&self, next: Option<Instant>, stop: &CancellationToken) -> ControlFlow<()> {
        let expired = {
            let mut table = self.table();
            if !table.is_enabled() {
                return ControlFlow::Break(());
            }
            debug!(?next, tracked = table.len(), "heartbeat timer fired");
            let expired = table.expire(Instant::now());
            metrics::gauge!("teamster_heartbeat_active").set(table.len() as f64);
            expired
        };
        for id in expired {
            if stop.is_cancelled() {
                return ControlFlow::Break(());
            }
            self.invalidate(&id).await;
        }
        ControlFlow::Continue(())
    }

    /// A node's TTL ran out: mark it `disconnected` while some allocation there has a
    /// disconnect window open (its timer runs on, to mark it `down` once none has), else
    /// `down`, with its evaluations; nothing when leadership was lost meanwhile, the node is
    /// gone or already in that status.
    async fn invalidate(&self, id: &NodeId) {
        let snapshot = self.inner.node.state().snapshot();
        let Some(node) = snapshot.node_by_id(id.as_str()).cloned() else {
            return;
        };
        if node.status == NodeStatus::Down || !self.table().is_enabled() {
            return;
        }
        let now = self.inner.clock.now_unix_nanos();
        let status = crate::server::evals::expired_status(&snapshot, &node, now);
        if status == NodeStatus::Disconnected {
            // Checked again at its next expiry: `down` once every window has closed.
            let _ = self.reset(id);
        }
        if node.status == status {
            return;
        }
        warn!(node_id = %id, status = status.as_str(), "node TTL expired");
        metrics::counter!("teamster_heartbeat_invalidate_total").increment(1);
        let evals = {
            let mut rng = self.inner.rng.lock().unwrap_or_else(|p| p.into_inner());
            crate::server::evals::node_evals(&snapshot, &node, now, &mut *rng)
        };
        let cmd = Command::NodeUpdateStatus(NodeUpdateStatus {
            node_id: id.clone(),
            status,
            updated_at: now / 1_000_000_000,
            evals,
        });
        if let Err(e) = self.inner.node.write_local(cmd).await {
            warn!(node_id = %id, status = status.as_str(), error = %e, "could not change the node's status");
        }
    }
}

impl LeaderDuty for Heartbeats {
    fn name(&self) -> &'static str {
        "heartbeat timers"
    }

    fn establish(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            self.inner.tasks.stop().await;
            let snapshot = self.inner.node.state().snapshot();
            let live: Vec<NodeId> = snapshot
                .nodes()
                .filter(|n| n.status != NodeStatus::Down)
                .map(|n| n.id.clone())
                .collect();
            let count = live.len();
            {
                let mut table = self.table();
                table.enable(Instant::now(), live);
                metrics::gauge!("teamster_heartbeat_active").set(table.len() as f64);
            }
            self.inner.tasks.start(|set| {
                let this = self.clone();
                let span = tracing::info_span!("heartbeats");
                set.spawn(|stop| this.expiry_loop(stop).instrument(span));
            });
            info!(
                nodes = count,
                "heartbeat timers started with the failover TTL"
            );
            Ok(())
        })
    }

    fn revoke(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.table().disable();
            metrics::gauge!("teamster_heartbeat_active").set(0.0);
            self.inner.tasks.stop().await;
            debug!("heartbeat timers cleared");
        })
    }
}
