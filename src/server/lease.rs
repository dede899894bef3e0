//! The leader lease: a leader that has had no answer from a quorum of voters within
//! `server.raft.leader_lease_timeout` stops serving. Writes and default-consistency reads on
//! it answer a retryable `No cluster leader` at once (writes already waiting for their
//! commit are answered too), and the leader-only subsystems are revoked, until a quorum
//! answers again or another server wins an election. openraft keeps a deposed-in-all-but-name
//! leader leading until it hears of a higher term; hashicorp/raft, under Nomad, steps down
//! after the same silence.
//!
//! [`judge`] is the rule, pure; [`spawn`] is the shell that feeds it openraft's metrics
//! (`millis_since_quorum_ack`) and a clock tick, and publishes a [`Lease`] on a watch.

use std::time::Duration;

use openraft::ServerState;
use teamster_storage::raft_types::Raft;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// This server's standing as a leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lease {
    /// Not the leader.
    NotLeader,
    /// The leader, and a quorum acknowledged it within the lease.
    Held,
    /// The leader in raft's eyes, but no quorum acknowledged it within the lease.
    Lost,
}

/// What the rule looks at.
#[derive(Debug, Clone, Copy)]
pub struct Observation {
    /// Whether raft says this server leads.
    pub leader: bool,
    /// When it became leader (this term).
    pub leader_since: Instant,
    /// When the latest request a quorum acknowledged was sent, if openraft knows.
    pub quorum_acked_at: Option<Instant>,
    /// How many voters the membership has.
    pub voters: usize,
}

/// The lease at `now`: held while the last request a quorum acknowledged (or, before the
/// first one, the election) is at most `timeout` old. A lone voter is its own quorum.
pub fn judge(now: Instant, o: &Observation, timeout: Duration) -> Lease {
    if !o.leader {
        return Lease::NotLeader;
    }
    if o.voters <= 1 {
        return Lease::Held;
    }
    let last = o
        .quorum_acked_at
        .map_or(o.leader_since, |t| t.max(o.leader_since));
    if now.saturating_duration_since(last) <= timeout {
        Lease::Held
    } else {
        Lease::Lost
    }
}

/// Watch `raft` and publish its [`Lease`] until `shutdown`; `timeout` is the lease.
pub fn spawn(
    raft: Raft,
    timeout: Duration,
    shutdown: CancellationToken,
) -> (watch::Receiver<Lease>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(Lease::NotLeader);
    let task = tokio::spawn(async move {
        let mut metrics = raft.metrics();
        let mut tick = tokio::time::interval((timeout / 4).max(Duration::from_millis(5)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut leader_since: Option<Instant> = None;
        let mut acked_at: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let (leader, voters) = {
                let m = metrics.borrow_and_update();
                let leader = m.state == ServerState::Leader;
                if let (true, Some(ms)) = (leader, m.millis_since_quorum_ack) {
                    // openraft dates an acknowledgement by when the acknowledged request was
                    // sent: the lease runs from there (stricter than the answer's arrival by
                    // a round trip, and free of the jitter of when this task wakes).
                    let at = now.checked_sub(Duration::from_millis(ms)).unwrap_or(now);
                    acked_at = Some(acked_at.map_or(at, |a| a.max(at)));
                }
                (leader, m.membership_config.membership().voter_ids().count())
            };
            if !leader {
                leader_since = None;
                acked_at = None;
            } else if leader_since.is_none() {
                leader_since = Some(now);
            }
            let lease = judge(
                now,
                &Observation {
                    leader,
                    leader_since: leader_since.unwrap_or(now),
                    quorum_acked_at: acked_at,
                    voters,
                },
                timeout,
            );
            tx.send_if_modified(|old| {
                if *old == lease {
                    return false;
                }
                match (*old, lease) {
                    (Lease::Held, Lease::Lost) => {
                        metrics::counter!("teamster_raft_leader_lease_lost_total").increment(1);
                        warn!(
                            lease = %humantime::format_duration(timeout),
                            "no quorum acknowledged this leader within the lease: not serving"
                        );
                    }
                    (Lease::Lost, Lease::Held) => info!("a quorum acknowledges this leader again"),
                    _ => {}
                }
                metrics::gauge!("teamster_raft_leader_lease_held").set(if lease == Lease::Held {
                    1.0
                } else {
                    0.0
                });
                *old = lease;
                true
            });
            tokio::select! {
                _ = shutdown.cancelled() => break,
                changed = metrics.changed() => if changed.is_err() { break },
                _ = tick.tick() => {}
            }
        }
    });
    (rx, task)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(leader_since: Instant, acked: Option<Instant>, voters: usize) -> Observation {
        Observation {
            leader: true,
            leader_since,
            quorum_acked_at: acked,
            voters,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_lease_runs_from_the_last_quorum_ack_or_the_election() {
        let lease = Duration::from_millis(500);
        let t0 = Instant::now();
        tokio::time::advance(Duration::from_millis(400)).await;
        let now = Instant::now();
        // Elected 400 ms ago, no ack yet: still within the lease.
        assert_eq!(judge(now, &obs(t0, None, 3), lease), Lease::Held);
        tokio::time::advance(Duration::from_millis(200)).await;
        let now = Instant::now();
        assert_eq!(judge(now, &obs(t0, None, 3), lease), Lease::Lost);
        // An ack 100 ms ago renews it; one 600 ms ago does not.
        let recent = now - Duration::from_millis(100);
        assert_eq!(judge(now, &obs(t0, Some(recent), 3), lease), Lease::Held);
        assert_eq!(judge(now, &obs(t0, Some(t0), 3), lease), Lease::Lost);
        // A lone voter is its own quorum; a follower holds no lease.
        assert_eq!(judge(now, &obs(t0, None, 1), lease), Lease::Held);
        let follower = Observation {
            leader: false,
            ..obs(t0, Some(now), 3)
        };
        assert_eq!(judge(now, &follower, lease), Lease::NotLeader);
    }
}
