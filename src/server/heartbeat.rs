//! Leader-only heartbeat timers: a node that stops heartbeating is marked `down`.
//!
//! Nomad's semantics (reference/nomad-semantics.md §7):
//! - the TTL handed to a node is `base + uniform[0, base)` with
//!   `base = max(tracked_nodes / max_heartbeats_per_second, min_heartbeat_ttl)`, so the
//!   leader receives about `max_heartbeats_per_second` heartbeats at any cluster size;
//! - the server's timer is that TTL plus `heartbeat_grace`;
//! - a new leader gives every node that is not down `failover_heartbeat_ttl`, so clients have
//!   time to find it;
//! - an expired timer marks the node down and creates evaluations for every job with
//!   allocations on it and every system job (see
//!   [`node_evals`](crate::server::endpoints::node::node_evals)).
//!
//! [`HeartbeatTable`] is the sans-IO core (deadlines in, expired nodes out);
//! [`Heartbeats`] is the shell: a [`LeaderDuty`] that enables the table on establish, runs
//! one expiry task, and clears every timer on revoke — so a server that lost leadership never
//! fires a status change.
//!
//! Metrics: `teamster_heartbeat_active` (gauge), `teamster_heartbeat_resets_total`,
//! `teamster_heartbeat_invalidate_total`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use teamster_storage::fsm::{Command, NodeUpdateStatus};
use teamster_storage::model::{NodeId, NodeStatus};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use crate::agent::config::ServerConfig;
use crate::server::leader::LeaderDuty;
use crate::server::raft::RaftNode;
use crate::util::SharedClock;

/// Why a heartbeat could not be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatError {
    /// Timers only run on the leader.
    #[error("failed to reset heartbeat since server is not leader")]
    NotLeader,
}

/// The heartbeat settings (from `[server]`).
#[derive(Debug, Clone, PartialEq)]
pub struct HeartbeatConfig {
    /// The smallest TTL handed out.
    pub min_ttl: Duration,
    /// Heartbeats per second the leader aims for.
    pub max_per_second: f64,
    /// Extra time past the TTL before a node is marked down.
    pub grace: Duration,
    /// The TTL every live node gets from a new leader.
    pub failover_ttl: Duration,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        HeartbeatConfig::from(&ServerConfig::default())
    }
}

impl From<&ServerConfig> for HeartbeatConfig {
    fn from(c: &ServerConfig) -> Self {
        HeartbeatConfig {
            min_ttl: c.min_heartbeat_ttl,
            max_per_second: c.max_heartbeats_per_second,
            grace: c.heartbeat_grace,
            failover_ttl: c.failover_heartbeat_ttl,
        }
    }
}

/// The sans-IO heartbeat table: one deadline per node, ordered for expiry.
#[derive(Debug)]
pub struct HeartbeatTable {
    config: HeartbeatConfig,
    enabled: bool,
    deadlines: HashMap<NodeId, Instant>,
    order: BTreeSet<(Instant, NodeId)>,
}

impl HeartbeatTable {
    /// A disabled table.
    pub fn new(config: HeartbeatConfig) -> Self {
        HeartbeatTable {
            config,
            enabled: false,
            deadlines: HashMap::new(),
            order: BTreeSet::new(),
        }
    }

    /// Whether timers run (this server leads).
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Nodes with a timer.
    pub fn len(&self) -> usize {
        self.deadlines.len()
    }

    /// Whether no node has a timer.
    pub fn is_empty(&self) -> bool {
        self.deadlines.is_empty()
    }

    /// Become the leader's table: every given (live) node gets the failover TTL from `now`.
    pub fn enable(&mut self, now: Instant, live_nodes: impl IntoIterator<Item = NodeId>) {
        self.clear();
        self.enabled = true;
        let deadline = now + self.config.failover_ttl;
        for id in live_nodes {
            self.set(id, deadline);
        }
    }

    /// Stop: forget every timer; later resets fail until [`enable`](Self::enable).
    pub fn disable(&mut self) {
        self.enabled = false;
        self.clear();
    }

    fn clear(&mut self) {
        self.deadlines.clear();
        self.order.clear();
    }

    fn set(&mut self, id: NodeId, deadline: Instant) {
        if let Some(old) = self.deadlines.insert(id.clone(), deadline) {
            self.order.remove(&(old, id.clone()));
        }
        self.order.insert((deadline, id));
    }

    /// The TTL the next heartbeat gets: `base + uniform[0, base)`, where `base` scales with
    /// the number of tracked nodes.
    pub fn next_ttl(&self, rng: &mut impl Rng) -> Duration {
        let scaled = Duration::from_secs_f64(self.len() as f64 / self.config.max_per_second);
        let base = scaled.max(self.config.min_ttl);
        let stagger = if base.is_zero() {
            Duration::ZERO
        } else {
            Duration::from_nanos(rng.gen_range(0..base.as_nanos().min(u64::MAX as u128) as u64))
        };
        base + stagger
    }

    /// A heartbeat from `id` at `now`: returns the TTL to hand back; the node is marked down
    /// if nothing arrives within TTL + grace.
    pub fn reset(
        &mut self,
        id: NodeId,
        now: Instant,
        rng: &mut impl Rng,
    ) -> Result<Duration, HeartbeatError> {
        if !self.enabled {
            return Err(HeartbeatError::NotLeader);
        }
        let ttl = self.next_ttl(rng);
        self.set(id, now + ttl + self.config.grace);
        Ok(ttl)
    }

    /// Forget a node's timer (deregistered, or marked down by an operator).
    pub fn remove(&mut self, id: &NodeId) {
        if let Some(old) = self.deadlines.remove(id) {
            self.order.remove(&(old, id.clone()));
        }
    }

    /// The earliest deadline, if any.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.order.first().map(|(at, _)| *at)
    }

    /// Remove and return every node whose deadline is at or before `now`.
    pub fn expire(&mut self, now: Instant) -> Vec<NodeId> {
        let mut out = Vec::new();
        while let Some((at, _)) = self.order.first() {
            if *at > now {
                break;
            }
            let (_, id) = self.order.pop_first().expect("checked non-empty");
            self.deadlines.remove(&id);
            out.push(id);
        }
        out
    }

    /// A node's deadline, for tests and diagnostics.
    pub fn deadline(&self, id: &NodeId) -> Option<Instant> {
        self.deadlines.get(id).copied()
    }
}

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
    task: Mutex<Option<(CancellationToken, tokio::task::JoinHandle<()>)>>,
}

impl Heartbeats {
    /// A disabled set of timers for `node`'s cluster.
    pub fn new(node: Arc<RaftNode>, config: HeartbeatConfig, clock: SharedClock) -> Heartbeats {
        Heartbeats {
            inner: Arc::new(Shared {
                node,
                clock,
                table: Mutex::new(HeartbeatTable::new(config)),
                rng: Mutex::new(StdRng::from_entropy()),
                wake: Notify::new(),
                task: Mutex::new(None),
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

    async fn expiry_loop(self, cancel: CancellationToken) {
        loop {
            let next = self.table().next_deadline();
            let sleep = async {
                match next {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = self.inner.wake.notified() => continue,
                _ = sleep => {}
            }
            let expired = {
                let mut table = self.table();
                if !table.is_enabled() {
                    return;
                }
                debug!(?next, tracked = table.len(), "heartbeat timer fired");
                let expired = table.expire(Instant::now());
                metrics::gauge!("teamster_heartbeat_active").set(table.len() as f64);
                expired
            };
            for id in expired {
                if cancel.is_cancelled() {
                    return;
                }
                self.invalidate(&id).await;
            }
        }
    }

    /// A node's TTL ran out: mark it down with its evaluations, unless leadership was lost
    /// meanwhile or the node is gone or already down.
    async fn invalidate(&self, id: &NodeId) {
        let snapshot = self.inner.node.state().snapshot();
        let Some(node) = snapshot.node_by_id(id.as_str()).cloned() else {
            return;
        };
        if node.status == NodeStatus::Down || !self.table().is_enabled() {
            return;
        }
        warn!(node_id = %id, "node TTL expired");
        metrics::counter!("teamster_heartbeat_invalidate_total").increment(1);
        let now = self.inner.clock.now_unix_nanos();
        let evals = {
            let mut rng = self.inner.rng.lock().unwrap_or_else(|p| p.into_inner());
            crate::server::endpoints::node::node_evals(&snapshot, &node, now, &mut *rng)
        };
        let cmd = Command::NodeUpdateStatus(NodeUpdateStatus {
            node_id: id.clone(),
            status: NodeStatus::Down,
            updated_at: now / 1_000_000_000,
            evals,
        });
        if let Err(e) = self.inner.node.write_local(cmd).await {
            warn!(node_id = %id, error = %e, "could not mark the node down");
        }
    }
}

impl LeaderDuty for Heartbeats {
    fn name(&self) -> &'static str {
        "heartbeat timers"
    }

    fn establish(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
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
            let cancel = CancellationToken::new();
            let span = tracing::info_span!("heartbeats");
            let task = tokio::spawn(self.clone().expiry_loop(cancel.clone()).instrument(span));
            let old = self
                .inner
                .task
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .replace((cancel, task));
            if let Some((c, t)) = old {
                c.cancel();
                t.abort();
            }
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
            let task = self
                .inner
                .task
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            if let Some((cancel, task)) = task {
                cancel.cancel();
                let _ = task.await;
            }
            debug!("heartbeat timers cleared");
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> HeartbeatConfig {
        HeartbeatConfig {
            min_ttl: Duration::from_secs(10),
            max_per_second: 50.0,
            grace: Duration::from_secs(10),
            failover_ttl: Duration::from_secs(300),
        }
    }

    fn id(n: usize) -> NodeId {
        NodeId::new(format!("node-{n}"))
    }

    #[tokio::test(start_paused = true)]
    async fn a_disabled_table_refuses_heartbeats() {
        let mut t = HeartbeatTable::new(config());
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(
            t.reset(id(1), Instant::now(), &mut rng),
            Err(HeartbeatError::NotLeader)
        );
        assert!(t.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn small_clusters_get_ten_to_twenty_seconds_plus_grace() {
        let mut t = HeartbeatTable::new(config());
        t.enable(Instant::now(), []);
        let mut rng = StdRng::seed_from_u64(2);
        for n in 0..100 {
            let now = Instant::now();
            let ttl = t.reset(id(n), now, &mut rng).unwrap();
            assert!(
                ttl >= Duration::from_secs(10) && ttl < Duration::from_secs(20),
                "{ttl:?}"
            );
            assert_eq!(
                t.deadline(&id(n)),
                Some(now + ttl + Duration::from_secs(10))
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_ttl_scales_with_the_number_of_nodes() {
        let mut t = HeartbeatTable::new(config());
        let now = Instant::now();
        t.enable(now, (0..5000).map(id));
        let mut rng = StdRng::seed_from_u64(3);
        // 5000 nodes at 50/s: base 100 s, TTL in [100, 200).
        let ttl = t.reset(id(1), now, &mut rng).unwrap();
        assert!(
            ttl >= Duration::from_secs(100) && ttl < Duration::from_secs(200),
            "{ttl:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_leader_gives_every_live_node_the_failover_ttl() {
        let mut t = HeartbeatTable::new(config());
        let start = Instant::now();
        t.enable(start, [id(1), id(2)]);
        assert_eq!(t.next_deadline(), Some(start + Duration::from_secs(300)));
        assert!(t.expire(start + Duration::from_secs(299)).is_empty());
        let mut gone = t.expire(start + Duration::from_secs(300));
        gone.sort();
        assert_eq!(gone, vec![id(1), id(2)]);
        assert!(t.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn heartbeats_postpone_expiry_and_only_silent_nodes_expire() {
        let mut t = HeartbeatTable::new(config());
        let mut rng = StdRng::seed_from_u64(4);
        let start = Instant::now();
        t.enable(start, []);
        t.reset(id(1), start, &mut rng).unwrap();
        t.reset(id(2), start, &mut rng).unwrap();
        // Node 1 keeps heartbeating every 5 s for a minute; node 2 is silent.
        let mut now = start;
        for _ in 0..12 {
            now += Duration::from_secs(5);
            assert!(t.expire(now).iter().all(|n| *n != id(1)));
            t.reset(id(1), now, &mut rng).unwrap();
        }
        assert_eq!(t.deadline(&id(2)), None, "node 2 expired on the way");
        assert!(t.deadline(&id(1)).is_some());
        t.remove(&id(1));
        assert!(t.is_empty());
        assert_eq!(t.next_deadline(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn disabling_forgets_every_timer() {
        let mut t = HeartbeatTable::new(config());
        let now = Instant::now();
        t.enable(now, [id(1)]);
        t.disable();
        assert!(t.expire(now + Duration::from_secs(3600)).is_empty());
        assert!(!t.is_enabled());
    }
}

/// The shell on a real single-server agent (openraft, sled): expiry marks a node down with
/// its evaluations, a revoked table never fires, heartbeats keep a node up.
#[cfg(test)]
mod shell_tests {
    use super::*;
    use crate::agent::config::AgentConfig;
    use crate::agent::Agent;
    use teamster_storage::fsm::{JobRegister, NodeRegister};
    use teamster_storage::model::{Job, JobType, Node, Task, TaskGroup};

    async fn server() -> (Agent, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let config = AgentConfig::lone_server(dir.path());
        let agent = Agent::start(config, false).await.unwrap();
        let mut rx = agent.server().unwrap().leadership().subscribe();
        tokio::time::timeout(Duration::from_secs(20), rx.wait_for(|e| *e))
            .await
            .unwrap()
            .unwrap();
        (agent, dir)
    }

    fn config(failover_ms: u64) -> HeartbeatConfig {
        HeartbeatConfig {
            min_ttl: Duration::from_millis(200),
            max_per_second: 50.0,
            grace: Duration::from_millis(100),
            failover_ttl: Duration::from_millis(failover_ms),
        }
    }

    /// A ready node and a system job, written straight through raft (so the agent's own
    /// timers do not track the node).
    async fn seed(node: &RaftNode, id: &str) {
        let mut n = Node {
            id: id.into(),
            name: id.into(),
            datacenter: "dc1".into(),
            status: NodeStatus::Ready,
            ..Node::default()
        };
        n.canonicalize();
        node.write(Command::NodeRegister(NodeRegister {
            node: n,
            evals: vec![],
        }))
        .await
        .unwrap();
        let mut job = Job {
            id: format!("sys-{id}").into(),
            job_type: JobType::System,
            datacenters: vec!["dc1".into()],
            task_groups: vec![TaskGroup {
                name: "g".into(),
                count: 1,
                tasks: vec![Task {
                    name: "t".into(),
                    driver: "mock".into(),
                    ..Task::default()
                }],
                ..TaskGroup::default()
            }],
            ..Job::default()
        };
        job.canonicalize();
        node.write(Command::JobRegister(JobRegister {
            job,
            eval: None,
            enforce_index: None,
        }))
        .await
        .unwrap();
    }

    fn status(node: &RaftNode, id: &str) -> NodeStatus {
        node.state().snapshot().node_by_id(id).unwrap().status
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_expired_node_is_marked_down_with_evals_and_a_revoked_table_never_fires() {
        let (agent, _dir) = server().await;
        let node = agent.server().unwrap().node().clone();
        seed(&node, "n-expire").await;
        seed(&node, "n-revoked").await;
        let clock = crate::util::system_clock();

        // Revoked right after establishing: the failover timers must not fire.
        let revoked = Heartbeats::new(node.clone(), config(300), clock.clone());
        revoked.establish().await.unwrap();
        assert_eq!(revoked.tracked(), 2);
        revoked.revoke().await;
        assert_eq!(
            revoked.reset(&"n-revoked".into()),
            Err(HeartbeatError::NotLeader)
        );

        // Established and left alone: n-expire times out; n-revoked keeps heartbeating.
        let live = Heartbeats::new(node.clone(), config(300), clock);
        live.establish().await.unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while status(&node, "n-expire") != NodeStatus::Down {
            assert!(std::time::Instant::now() < deadline, "never marked down");
            live.reset(&"n-revoked".into()).unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(status(&node, "n-revoked"), NodeStatus::Ready);
        let snap = node.state().snapshot();
        let evals: Vec<_> = snap
            .evals()
            .filter(|e| e.node_id == "n-expire")
            .map(|e| e.job_id.to_string())
            .collect();
        assert!(evals.contains(&"sys-n-expire".to_string()), "{evals:?}");
        live.revoke().await;
        agent.shutdown().await;
    }
}
