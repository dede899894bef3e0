//! Autopilot on the leader (Nomad's, without gossip): every 2 seconds the leader asks each
//! server of the raft configuration whether it answers, and judges its health as
//! raft-autopilot does, with the operator's [`AutopilotConfig`]:
//!
//! - a follower is healthy when it answered, within `LastContactThreshold`, its log is at
//!   most `MaxTrailingLogs` entries behind the leader's, and the last entry it holds is of
//!   the leader's term; the leader is healthy;
//! - `StableSince` is when a server's health last changed; the cluster is healthy when every
//!   server is; `FailureTolerance` is how many voters may fail with a quorum left (healthy
//!   voters beyond a majority of the voters);
//! - with `CleanupDeadServers`, a server that has not answered for `ServerStabilizationTime`
//!   (6 s at least) is removed from the raft configuration, never more voters than
//!   `(voters - 1) / 2` at once, never below `MinQuorum` voters, and only while a quorum of
//!   the voters answers (the change must commit).
//!
//! Where Nomad's serf says whether a server is alive, teamster pings it over RPC; a server
//! answers `alive` or `failed`. The judging is a pure function ([`judge`]) over what was
//! observed; [`AutopilotDuty`] observes, keeps the answer for `Operator.ServerHealth`, sets
//! the gauges `teamster_autopilot_healthy` and `teamster_autopilot_failure_tolerance`, and
//! removes dead servers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use teamster_storage::model::AutopilotConfig;
use teamster_storage::raft_types::ServerId;
use tokio::time::Instant;
use tracing::{info, warn};

pub use crate::rpc::service::operator::{ClusterHealth, ServerHealth};
use crate::server::leader::LeaderDuty;
use crate::server::leader_service::{run_every, LeaderService};
use crate::server::raft::RaftNode;
use crate::util::SharedClock;

/// How often the leader looks at the servers (Nomad's `ServerHealthInterval`).
const INTERVAL: Duration = Duration::from_secs(2);
/// How long a server has to answer.
const PING_TIMEOUT: Duration = Duration::from_secs(1);
/// The shortest a server must be silent before it is removed as dead, whatever
/// `ServerStabilizationTime` says (three rounds: one lost ping is no death).
const MIN_DEAD: Duration = Duration::from_secs(6);
/// How long a removal may take before this round gives up (a membership change that
/// cannot commit must not hold the leader's duties).
const REMOVE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the leader saw of one server this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// Its raft id.
    pub id: ServerId,
    /// Its name.
    pub name: String,
    /// Its RPC address.
    pub address: String,
    /// A voter.
    pub voter: bool,
    /// The leader (this server).
    pub leader: bool,
    /// It answered this round, after this long.
    pub answered_in: Option<Duration>,
    /// The last entry it holds (the leader's replication view; the leader's own log).
    pub last_index: u64,
    /// The term of that entry.
    pub last_term: u64,
}

/// What the leader remembers of a server between rounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// When it last answered (or was first seen).
    pub last_answer: Instant,
    /// Whether it answered at all since it was first seen.
    pub ever_answered: bool,
    /// Its health at the last round, and since when (Unix nanoseconds).
    pub healthy: bool,
    /// When its health last changed.
    pub stable_since: i64,
}

/// Judge the servers `seen` at `now` (`now_unix` in nanoseconds), with the leader at
/// `leader_index`/`term`: their health, and the servers to remove as dead. `memory` carries
/// what earlier rounds saw and is updated.
pub fn judge(
    config: &AutopilotConfig,
    seen: &[Observed],
    (leader_index, term): (u64, u64),
    (now, now_unix): (Instant, i64),
    memory: &mut BTreeMap<ServerId, Memory>,
) -> (ClusterHealth, Vec<ServerId>) {
    memory.retain(|id, _| seen.iter().any(|s| s.id == *id));
    let threshold = Duration::from_nanos(config.last_contact_threshold);
    let mut servers = Vec::with_capacity(seen.len());
    for s in seen {
        let m = memory.entry(s.id).or_insert(Memory {
            last_answer: now,
            ever_answered: false,
            healthy: false,
            stable_since: now_unix,
        });
        let alive = s.leader || s.answered_in.is_some();
        if alive {
            m.last_answer = now;
            m.ever_answered = true;
        }
        let last_contact = if s.leader {
            Duration::ZERO
        } else {
            s.answered_in
                .unwrap_or_else(|| now.saturating_duration_since(m.last_answer))
        };
        let healthy = s.leader
            || (alive
                && last_contact <= threshold
                && s.last_term == term
                && leader_index.saturating_sub(s.last_index) <= config.max_trailing_logs);
        if healthy != m.healthy {
            m.healthy = healthy;
            m.stable_since = now_unix;
        }
        servers.push(ServerHealth {
            id: s.id,
            name: s.name.clone(),
            address: s.address.clone(),
            status: if alive { "alive" } else { "failed" }.into(),
            leader: s.leader,
            voter: s.voter,
            last_contact_ms: u64::try_from(last_contact.as_millis()).unwrap_or(u64::MAX),
            last_term: s.last_term,
            last_index: s.last_index,
            healthy,
            stable_since: m.stable_since,
        });
    }
    let voters: Vec<ServerId> = servers.iter().filter(|s| s.voter).map(|s| s.id).collect();
    let healthy_voters = servers.iter().filter(|s| s.voter && s.healthy).count() as u64;
    let quorum = voters.len() as u64 / 2 + 1;
    let health = ClusterHealth {
        healthy: servers.iter().all(|s| s.healthy),
        failure_tolerance: healthy_voters.saturating_sub(quorum),
        leader: seen.iter().find(|s| s.leader).map_or(0, |s| s.id),
        voters: voters.clone(),
        servers,
    };
    let mut dead = Vec::new();
    // Removing a voter is a membership change the voters still answering must commit:
    // without a quorum of them, nothing is removed (the change could never commit).
    let answering_voters = seen
        .iter()
        .filter(|s| s.voter && (s.leader || s.answered_in.is_some()))
        .count();
    if config.cleanup_dead_servers && answering_voters > voters.len() / 2 {
        let stabilization = Duration::from_nanos(config.server_stabilization_time).max(MIN_DEAD);
        let gone: Vec<&Observed> = seen
            .iter()
            .filter(|s| !s.leader && s.answered_in.is_none())
            .filter(|s| {
                memory
                    .get(&s.id)
                    .is_some_and(|m| now.saturating_duration_since(m.last_answer) >= stabilization)
            })
            .collect();
        dead.extend(gone.iter().filter(|s| !s.voter).map(|s| s.id));
        let dead_voters: Vec<ServerId> = gone.iter().filter(|s| s.voter).map(|s| s.id).collect();
        let most = (voters.len().saturating_sub(1)) / 2;
        let floor = usize::try_from(config.min_quorum).unwrap_or(usize::MAX);
        let room = voters.len().saturating_sub(floor).min(most);
        dead.extend(dead_voters.into_iter().take(room));
    }
    (health, dead)
}

/// The leader's latest judgement, for `Operator.ServerHealth`; empty on other servers.
#[derive(Debug, Default)]
pub struct Autopilot {
    health: Mutex<Option<ClusterHealth>>,
}

impl Autopilot {
    /// The latest judgement (`None` before the first, or when this server does not lead).
    pub fn health(&self) -> Option<ClusterHealth> {
        self.health
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, health: Option<ClusterHealth>) {
        *self.health.lock().unwrap_or_else(PoisonError::into_inner) = health;
    }
}

/// One round: observe, judge, publish, remove the dead.
async fn round(
    node: &RaftNode,
    autopilot: &Autopilot,
    clock: &SharedClock,
    memory: &mut BTreeMap<ServerId, Memory>,
) {
    let Some(status) = node.replication_status() else {
        return;
    };
    let me = node.id();
    let pings = node
        .membership()
        .servers
        .into_iter()
        .map(|(id, addr, voter)| async move {
            let answered_in = if id == me {
                Some(Duration::ZERO)
            } else {
                let started = Instant::now();
                match node.pool().ping_addr(&addr.rpc_addr, PING_TIMEOUT).await {
                    Ok(answered) if answered == id => Some(started.elapsed()),
                    _ => None,
                }
            };
            (id, addr, voter, answered_in)
        });
    let answers = futures::future::join_all(pings).await;
    let seen: Vec<Observed> = answers
        .into_iter()
        .map(|(id, addr, voter, answered_in)| {
            let (last_index, last_term) = status.matched.get(&id).copied().unwrap_or((0, 0));
            Observed {
                id,
                name: addr.name.clone(),
                address: addr.rpc_addr.clone(),
                voter,
                leader: id == me,
                answered_in,
                last_index,
                last_term,
            }
        })
        .collect();
    let config = node.state().snapshot().autopilot_config().clone();
    let (health, dead) = judge(
        &config,
        &seen,
        (status.last_index, status.term),
        (Instant::now(), clock.now_unix_nanos()),
        memory,
    );
    if let Some(since) = status.since_quorum_ack.filter(|_| seen.len() > 1) {
        metrics::histogram!("teamster_raft_leader_last_contact_seconds")
            .record(since.as_secs_f64());
    }
    metrics::gauge!("teamster_autopilot_healthy").set(if health.healthy { 1.0 } else { 0.0 });
    metrics::gauge!("teamster_autopilot_failure_tolerance").set(health.failure_tolerance as f64);
    autopilot.set(Some(health));
    for id in dead {
        info!(
            server_id = id,
            "autopilot: removing a server that stopped answering"
        );
        match tokio::time::timeout(REMOVE_TIMEOUT, node.remove_server(id)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                warn!(server_id = id, error = %e, "autopilot could not remove a dead server")
            }
            Err(_) => warn!(server_id = id, "autopilot's removal did not commit in time"),
        }
    }
}

/// The leader's autopilot ([`round`] every 2 s).
pub struct AutopilotDuty {
    node: Arc<RaftNode>,
    autopilot: Arc<Autopilot>,
    clock: SharedClock,
    service: LeaderService,
}

impl AutopilotDuty {
    /// The duty over `node`, publishing into `autopilot`.
    pub fn new(node: Arc<RaftNode>, autopilot: Arc<Autopilot>, clock: SharedClock) -> Arc<Self> {
        Arc::new(AutopilotDuty {
            node,
            autopilot,
            clock,
            service: LeaderService::default(),
        })
    }
}

impl LeaderDuty for AutopilotDuty {
    fn name(&self) -> &'static str {
        "autopilot"
    }

    fn establish(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let (node, autopilot, clock) = (
                self.node.clone(),
                self.autopilot.clone(),
                self.clock.clone(),
            );
            self.service.start(|set| {
                set.spawn(move |stop| async move {
                    let memory = Arc::new(tokio::sync::Mutex::new(BTreeMap::new()));
                    let once = || {
                        let (node, autopilot, clock, memory) = (
                            node.clone(),
                            autopilot.clone(),
                            clock.clone(),
                            memory.clone(),
                        );
                        async move {
                            round(&node, &autopilot, &clock, &mut *memory.lock().await).await;
                            std::ops::ControlFlow::<()>::Continue(())
                        }
                    };
                    let _ = once().await;
                    run_every(&stop, INTERVAL, once).await;
                });
            });
            Ok(())
        })
    }

    fn revoke(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.service.stop().await;
            self.autopilot.set(None);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(id: ServerId, voter: bool, answered: bool, index: u64) -> Observed {
        Observed {
            id,
            name: format!("s{id}"),
            address: format!("10.0.0.{id}:4647"),
            voter,
            leader: id == 1,
            answered_in: answered.then_some(Duration::from_millis(1)),
            last_index: index,
            last_term: 3,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn health_tolerance_and_dead_server_removal_follow_the_configuration() {
        let config = AutopilotConfig::default();
        let mut memory = BTreeMap::new();
        let t0 = Instant::now();
        let all = [
            seen(1, true, true, 100),
            seen(2, true, true, 100),
            seen(3, true, true, 90),
        ];
        let (h, dead) = judge(&config, &all, (100, 3), (t0, 1_000), &mut memory);
        assert!(h.healthy, "{h:?}");
        assert_eq!(h.failure_tolerance, 1);
        assert_eq!((h.leader, h.voters.clone()), (1, vec![1, 2, 3]));
        assert!(dead.is_empty());

        // Far behind, or of an older term: unhealthy, and the tolerance drops.
        let behind = [
            seen(1, true, true, 1000),
            seen(2, true, true, 1000),
            seen(3, true, true, 700),
        ];
        let (h, _) = judge(&config, &behind, (1000, 3), (t0, 2_000), &mut memory);
        assert!(!h.healthy);
        assert_eq!(h.failure_tolerance, 0);
        let s3 = &h.servers[2];
        assert_eq!((s3.healthy, s3.stable_since), (false, 2_000));

        // Server 3 stops answering: failed at once, removed only after the stabilization
        // time (10 s by default).
        let down = [
            seen(1, true, true, 1000),
            seen(2, true, true, 1000),
            seen(3, true, false, 1000),
        ];
        let (h, dead) = judge(
            &config,
            &down,
            (1000, 3),
            (t0 + Duration::from_secs(5), 3_000),
            &mut memory,
        );
        assert_eq!(h.servers[2].status, "failed");
        assert_eq!(h.servers[2].last_contact_ms, 5_000);
        assert!(dead.is_empty());
        // A stabilization time below 6 s still waits 6 s.
        let quick = AutopilotConfig {
            server_stabilization_time: 0,
            ..AutopilotConfig::default()
        };
        let soon = (t0 + Duration::from_secs(5), 3_000);
        assert!(judge(&quick, &down, (1000, 3), soon, &mut memory)
            .1
            .is_empty());
        let later = t0 + Duration::from_secs(11);
        let (_, dead) = judge(&config, &down, (1000, 3), (later, 4_000), &mut memory);
        assert_eq!(dead, vec![3]);

        // Not below MinQuorum, not with cleanup off, never a majority of the voters.
        let strict = AutopilotConfig {
            min_quorum: 3,
            ..AutopilotConfig::default()
        };
        assert!(
            judge(&strict, &down, (1000, 3), (later, 5_000), &mut memory)
                .1
                .is_empty()
        );
        let off = AutopilotConfig {
            cleanup_dead_servers: false,
            ..AutopilotConfig::default()
        };
        assert!(judge(&off, &down, (1000, 3), (later, 6_000), &mut memory)
            .1
            .is_empty());
        let two_down = [
            seen(1, true, true, 1000),
            seen(2, true, false, 1000),
            seen(3, true, false, 1000),
        ];
        let mut fresh = BTreeMap::new();
        judge(&config, &two_down, (1000, 3), (t0, 0), &mut fresh);
        let (_, dead) = judge(&config, &two_down, (1000, 3), (later, 1), &mut fresh);
        assert!(
            dead.is_empty(),
            "no quorum answers, nothing can commit: {dead:?}"
        );
        let five = [
            seen(1, true, true, 1000),
            seen(2, true, true, 1000),
            seen(3, true, true, 1000),
            seen(4, true, false, 1000),
            seen(5, true, false, 1000),
        ];
        let mut fresh = BTreeMap::new();
        judge(&config, &five, (1000, 3), (t0, 0), &mut fresh);
        let (_, dead) = judge(&config, &five, (1000, 3), (later, 1), &mut fresh);
        assert_eq!(dead, vec![4, 5], "two of five voters at most");
    }
}
