//! The sans-IO heartbeat table, [`HeartbeatTable`]: one deadline per node, ordered for
//! expiry, and the TTL each heartbeat hands back. Time enters as `Instant` values and
//! randomness as an RNG argument.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use rand::Rng;
use teamster_storage::model::NodeId;
use tokio::time::Instant;

use crate::server::config::ServerConfig;
use crate::server::leader_service::Switch;

/// Why a heartbeat could not be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeartbeatError {
    /// Timers only run on the leader.
    #[error("failed to reset heartbeat since server is not leader")]
    NotLeader,
}

/// The sans-IO heartbeat table: one deadline per node, ordered for expiry.
#[derive(Debug)]
pub struct HeartbeatTable {
    /// The heartbeat keys of `[server]`: TTLs, rate, grace, failover TTL.
    config: ServerConfig,
    enabled: Switch,
    deadlines: HashMap<NodeId, Instant>,
    order: BTreeSet<(Instant, NodeId)>,
}

impl HeartbeatTable {
    /// A disabled table.
    pub fn new(config: ServerConfig) -> Self {
        HeartbeatTable {
            config,
            enabled: Switch::default(),
            deadlines: HashMap::new(),
            order: BTreeSet::new(),
        }
    }

    /// Whether timers run (this server leads).
    pub fn is_enabled(&self) -> bool {
        self.enabled.is_on()
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
        self.enabled.set(true);
        let deadline = now + self.config.failover_heartbeat_ttl;
        for id in live_nodes {
            self.set(id, deadline);
        }
    }

    /// Stop: forget every timer; later resets fail until [`enable`](Self::enable).
    pub fn disable(&mut self) {
        self.enabled.set(false);
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
        let scaled =
            Duration::from_secs_f64(self.len() as f64 / self.config.max_heartbeats_per_second);
        let base = scaled.max(self.config.min_heartbeat_ttl);
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
        self.enabled.check(HeartbeatError::NotLeader)?;
        let ttl = self.next_ttl(rng);
        self.set(id, now + ttl + self.config.heartbeat_grace);
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

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::SeedableRng;

    use super::*;

    fn config() -> ServerConfig {
        ServerConfig {
            min_heartbeat_ttl: Duration::from_secs(10),
            max_heartbeats_per_second: 50.0,
            heartbeat_grace: Duration::from_secs(10),
            failover_heartbeat_ttl: Duration::from_secs(300),
            ..ServerConfig::default()
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
