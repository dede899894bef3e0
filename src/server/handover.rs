//! Leadership transfer: a leader that is about to stop (SIGTERM, a rolling restart) hands
//! leadership to an up-to-date voter first, so the cluster is without a leader for one vote
//! round trip instead of a whole election timeout.
//!
//! ```text
//!  leader: stop taking writes ─▶ wait: writes drained, a voter matched the last entry,
//!          │                           the own vote older than the lease
//!          └─▶ Raft.TimeoutNow ─▶ successor: trigger().elect() ─▶ Vote(term + 1)
//!                                   └─ the old leader grants it (its log is no longer)
//!          ◀── AppendEntries from the new leader: follower ──┘
//! ```
//!
//! openraft 0.9 has no transfer of its own. What it has is enough: a candidate needs a
//! quorum of votes, and a voter refuses one while it still hears a leader (its lease: the
//! election timeout's upper bound since the leader last reached it). The stopping leader is
//! the one voter that has heard from no leader but itself since it was elected, so it grants
//! the vote of a candidate whose log is as long as its own; with the candidate's own vote
//! that is a quorum of three. Writes are refused (`NotLeader`, which callers retry on the
//! next leader) while the transfer runs, so the leader's log cannot grow past the
//! candidate's. In a larger cluster, or when anything goes wrong, the transfer ends at its
//! deadline and the others elect as after a crash.
//!
//! [`successor`] is the choice, pure; [`hand_over`] the leader's side and
//! [`on_timeout_now`] the successor's.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use openraft::ServerState;
use teamster_storage::raft_types::ServerId;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::rpc::{RpcRequest, RpcResponse, ServiceError};
use crate::server::raft::RaftNode;

/// How long the leader waits for the successor to win once it was asked to stand.
const WIN_WAIT: Duration = Duration::from_millis(1500);
/// Margin past the own vote's lease before the successor is asked to stand.
const LEASE_MARGIN: Duration = Duration::from_millis(20);

/// Why leadership was not handed over.
#[derive(Debug, thiserror::Error)]
pub enum HandOverError {
    /// This server does not lead.
    #[error("this server is not the leader")]
    NotLeader,
    /// No other voter to hand over to.
    #[error("no other voter in the raft configuration")]
    NoVoter,
    /// No successor was elected in time.
    #[error("no successor was elected in time")]
    TimedOut,
    /// raft stopped.
    #[error("raft: {0}")]
    Raft(String),
}

/// The voter to hand leadership to: one other than `me` whose replicated log has reached
/// `last_log_index` (a candidate with a shorter log would be refused), not in `tried`; the
/// lowest id among equals, so the choice is stable.
pub fn successor(
    me: ServerId,
    voters: &BTreeSet<ServerId>,
    last_log_index: Option<u64>,
    matched: &BTreeMap<ServerId, Option<u64>>,
    tried: &BTreeSet<ServerId>,
) -> Option<ServerId> {
    voters
        .iter()
        .copied()
        .filter(|v| *v != me && !tried.contains(v))
        .find(|v| matched.get(v).copied().flatten() >= last_log_index)
}

/// On the leader: refuse writes, then hand leadership to an up-to-date voter within
/// `timeout`. Returns the new leader. Writes are served again if this server still leads
/// when it returns (the transfer failed).
pub async fn hand_over(node: &RaftNode, timeout: Duration) -> Result<ServerId, HandOverError> {
    if !node.is_leader() {
        return Err(HandOverError::NotLeader);
    }
    let started = Instant::now();
    node.set_handing_over(true);
    let outcome = transfer(node, started + timeout).await;
    node.set_handing_over(false);
    let took = started.elapsed();
    match &outcome {
        Ok(to) => {
            info!(
                to,
                took_ms = took.as_millis() as u64,
                "leadership handed over"
            );
            metrics::counter!("teamster_raft_handovers_total", "outcome" => "handed_over")
                .increment(1);
            metrics::histogram!("teamster_raft_handover_seconds").record(took.as_secs_f64());
        }
        Err(HandOverError::NoVoter) => {}
        Err(e) => {
            warn!(error = %e, took_ms = took.as_millis() as u64, "leadership not handed over; the others elect when this server stops");
            metrics::counter!("teamster_raft_handovers_total", "outcome" => "failed").increment(1);
        }
    }
    outcome
}

async fn transfer(node: &RaftNode, deadline: Instant) -> Result<ServerId, HandOverError> {
    let me = node.id();
    let mut tried = BTreeSet::new();
    // First the own lease (nothing grows the log meanwhile but membership changes, refused
    // too), then the successor: a voter picked before a long wait could be behind by then,
    // and a candidate the old leader refuses still deposes it.
    wait_own_lease(node, deadline).await?;
    loop {
        let target = ready_successor(node, deadline, &tried).await?;
        let Some(addr) = node
            .membership()
            .servers
            .into_iter()
            .find(|(id, _, _)| *id == target)
            .map(|(_, a, _)| a)
        else {
            tried.insert(target);
            continue;
        };
        let left = deadline.saturating_duration_since(Instant::now());
        let asked = node
            .pool()
            .call(
                target,
                &addr.rpc_addr,
                RpcRequest::TimeoutNow,
                left.min(Duration::from_secs(1)),
            )
            .await;
        match asked {
            Ok(RpcResponse::TimeoutNow(Ok(()))) => {
                debug!(target, "successor asked to stand");
                let until = (Instant::now() + WIN_WAIT).min(deadline);
                node.wait_leader_change(Some(me), until).await;
            }
            Ok(RpcResponse::TimeoutNow(Err(e))) => {
                debug!(target, error = %e, "successor refused to stand")
            }
            Ok(other) => {
                debug!(target, error = %other.unexpected("Raft.TimeoutNow"), "successor answered oddly")
            }
            Err(e) => debug!(target, error = %e, "successor unreachable"),
        }
        if let Some(leader) = other_leader(node, me) {
            return Ok(leader);
        }
        if Instant::now() >= deadline {
            return Err(HandOverError::TimedOut);
        }
        tried.insert(target);
    }
}

/// The leader another server than this one has become, if any.
fn other_leader(node: &RaftNode, me: ServerId) -> Option<ServerId> {
    node.leader().map(|(id, _)| id).filter(|l| *l != me)
}

/// Wait until writes have drained and a voter not in `tried` has every entry (tried ones
/// are forgotten once each was tried).
async fn ready_successor(
    node: &RaftNode,
    deadline: Instant,
    tried: &BTreeSet<ServerId>,
) -> Result<ServerId, HandOverError> {
    let me = node.id();
    let mut rx = node.raft().metrics();
    loop {
        {
            let m = rx.borrow_and_update();
            if m.state != ServerState::Leader {
                return match m.current_leader.filter(|l| *l != me) {
                    Some(l) => Err(HandOverError::Raft(format!(
                        "server {l} became leader before the hand-over"
                    ))),
                    None => Err(HandOverError::NotLeader),
                };
            }
            let voters: BTreeSet<ServerId> = m
                .membership_config
                .membership()
                .voter_ids()
                .filter(|v| *v != me)
                .collect();
            if voters.is_empty() {
                return Err(HandOverError::NoVoter);
            }
            let matched: BTreeMap<ServerId, Option<u64>> = m
                .replication
                .as_ref()
                .map(|r| r.iter().map(|(id, l)| (*id, l.map(|l| l.index))).collect())
                .unwrap_or_default();
            let applied = m.last_applied.map(|l| l.index);
            let drained = node.writes_in_flight() == 0 && applied >= m.last_log_index;
            let all_tried = voters.iter().all(|v| tried.contains(v));
            let skip = if all_tried {
                BTreeSet::new()
            } else {
                tried.clone()
            };
            if drained {
                if let Some(t) = successor(me, &voters, m.last_log_index, &matched, &skip) {
                    return Ok(t);
                }
            }
        }
        // Metrics change with every replication step; a write that drains does not show
        // there, so look again shortly either way.
        let tick = (Instant::now() + Duration::from_millis(10)).min(deadline);
        let _ = tokio::time::timeout_at(tick, rx.changed()).await;
        if Instant::now() >= deadline {
            return Err(HandOverError::TimedOut);
        }
    }
}

/// Voters grant nobody a vote within their lease of the leader they follow, and this
/// leader's own vote counts the same way: wait until it is older than the lease (the
/// election timeout's upper bound), which only a leader elected moments ago has to.
async fn wait_own_lease(node: &RaftNode, deadline: Instant) -> Result<(), HandOverError> {
    let since = node
        .raft()
        .with_raft_state(|st| st.vote_last_modified())
        .await
        .map_err(|e| HandOverError::Raft(e.to_string()))?;
    let lease = Duration::from_millis(node.raft().config().election_timeout_max);
    if let Some(since) = since {
        let ready = since + lease + LEASE_MARGIN;
        if ready > deadline {
            return Err(HandOverError::TimedOut);
        }
        tokio::time::sleep_until(ready).await;
    }
    Ok(())
}

/// On a follower asked by its leader to stand (`Raft.TimeoutNow`): start an election now.
/// Refused when the sender is not this server's leader, or this server cannot stand.
pub async fn on_timeout_now(node: &RaftNode, from: ServerId) -> Result<(), ServiceError> {
    match node.leader() {
        Some((leader, _)) if leader == from && from != node.id() => {}
        _ => {
            return Err(ServiceError::rejected(format!(
                "Raft.TimeoutNow from server {from}, which is not this server's leader"
            )))
        }
    }
    if !node.is_voter() {
        return Err(ServiceError::rejected(
            "Raft.TimeoutNow to a non-voter: it cannot stand",
        ));
    }
    info!(from, "the leader hands over: standing for election now");
    node.raft()
        .trigger()
        .elect()
        .await
        .map_err(|e| ServiceError::Unavailable {
            reason: format!("raft stopped: {e}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ids: &[ServerId]) -> BTreeSet<ServerId> {
        ids.iter().copied().collect()
    }

    #[test]
    fn the_successor_has_every_entry_and_is_not_the_leader() {
        let voters = set(&[1, 2, 3]);
        let matched = BTreeMap::from([(2, Some(9)), (3, Some(10))]);
        let none = BTreeSet::new();
        assert_eq!(successor(1, &voters, Some(10), &matched, &none), Some(3));
        // Both caught up: the lowest id.
        let both = BTreeMap::from([(2, Some(10)), (3, Some(10))]);
        assert_eq!(successor(1, &voters, Some(10), &both, &none), Some(2));
        // One tried already: the other.
        assert_eq!(successor(1, &voters, Some(10), &both, &set(&[2])), Some(3));
        // Nobody caught up, or nobody replicated to yet.
        assert_eq!(successor(1, &voters, Some(11), &both, &none), None);
        assert_eq!(
            successor(1, &voters, Some(1), &BTreeMap::new(), &none),
            None
        );
        // A lone leader has nobody.
        assert_eq!(successor(1, &set(&[1]), Some(1), &both, &none), None);
        // An empty log: everyone is as long.
        let empty = BTreeMap::from([(2, None)]);
        assert_eq!(successor(1, &set(&[1, 2]), None, &empty, &none), Some(2));
    }
}
