//! Cluster formation, like Nomad's `bootstrap_expect` and `server.join`.
//!
//! A server that is not yet part of a cluster asks every address in `server.join` who it is
//! ([`PeerInfo`]) and what it has heard of, then decides with [`decide`]:
//!
//! - someone is already in a cluster → ask it to add us (it forwards to the leader, which adds
//!   us as a learner, waits for us to catch up, and promotes us to voter);
//! - otherwise, once `bootstrap_expect` servers are known, the one with the **lowest raft id**
//!   initialises the cluster with all of them; the others wait to hear from its leader.
//!   Choosing one initialiser is what makes exactly one initialisation happen even when every
//!   server starts at once. As in Nomad, `bootstrap_expect` must equal the number of servers
//!   started for the first formation.
//!
//! A restarted server already has its membership on disk and skips all of this.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use teamster_storage::raft_types::{ServerAddr, ServerId};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::rpc::service::operator::RaftJoinRequest;
use crate::rpc::{PeerInfo, RpcError, RpcRequest, RpcResponse, ServiceRequest, ServiceResponse};
use crate::server::raft::RaftNode;

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// We belong to a cluster: nothing to do.
    Done,
    /// Initialise the cluster with these voters (we have the lowest id among them).
    Initialize(BTreeMap<ServerId, ServerAddr>),
    /// Ask this server (its RPC address) to add us to its cluster.
    Join {
        /// The RPC address of a server that is in a cluster.
        via: String,
    },
    /// Keep asking.
    Wait {
        /// Servers known so far, ourselves included.
        known: usize,
        /// Servers we wait for (0: we never bootstrap; we only join).
        expect: usize,
    },
}

/// Decide the next formation step for `me` from the answers of the join addresses.
/// `discovered` accumulates across rounds: every uninitialised server heard of so far.
pub fn decide(
    me: &PeerInfo,
    expect: usize,
    answers: &[PeerInfo],
    discovered: &mut BTreeMap<ServerId, ServerAddr>,
) -> Step {
    if me.initialized {
        return Step::Done;
    }
    if let Some(p) = answers.iter().find(|p| p.initialized && p.id != me.id) {
        return Step::Join {
            via: p.addr.rpc_addr.clone(),
        };
    }
    discovered.insert(me.id, me.addr.clone());
    for p in answers {
        if p.id == me.id {
            continue;
        }
        discovered.insert(p.id, p.addr.clone());
        for (id, addr) in &p.discovered {
            discovered.entry(*id).or_insert_with(|| addr.clone());
        }
    }
    if expect == 0 || discovered.len() < expect {
        return Step::Wait {
            known: discovered.len(),
            expect,
        };
    }
    let lowest = *discovered.keys().next().expect("we are in the map");
    if lowest == me.id {
        Step::Initialize(discovered.clone())
    } else {
        Step::Wait {
            known: discovered.len(),
            expect,
        }
    }
}

/// The servers discovered so far, shared with the `ServerInfo` endpoint.
#[derive(Debug, Clone, Default)]
pub struct Discovered(Arc<Mutex<BTreeMap<ServerId, ServerAddr>>>);

impl Discovered {
    /// Every server heard of, as `ServerInfo` reports it.
    pub fn list(&self) -> Vec<(ServerId, ServerAddr)> {
        lock(&self.0)
            .iter()
            .map(|(id, a)| (*id, a.clone()))
            .collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What this server says about itself.
pub async fn my_info(node: &RaftNode, discovered: &Discovered) -> PeerInfo {
    PeerInfo {
        id: node.id(),
        addr: node.addr().clone(),
        initialized: node.is_initialized().await,
        discovered: discovered.list(),
    }
}

/// Run formation until this server is a voter of a cluster (or shutdown). A restarted
/// server is a voter already and returns at once.
pub async fn run(
    node: Arc<RaftNode>,
    expect: usize,
    join: Vec<String>,
    retry: Duration,
    discovered: Discovered,
    shutdown: CancellationToken,
) {
    let ask_timeout = retry.clamp(Duration::from_millis(200), Duration::from_secs(2));
    let mut initialised = false;
    loop {
        if node.is_voter() {
            debug!("this server is a voter; formation done");
            return;
        }
        let me = my_info(&node, &discovered).await;
        let mut answers = Vec::new();
        for addr in &join {
            match node
                .pool()
                .call_addr(addr, RpcRequest::ServerInfo, ask_timeout)
                .await
            {
                Ok(RpcResponse::ServerInfo(info)) => answers.push(info),
                Ok(other) => warn!(%addr, answer = other.kind(), "unexpected answer to ServerInfo"),
                Err(e) => debug!(%addr, error = %e, "join address not answering yet"),
            }
        }
        let step = {
            let mut d = lock(&discovered.0);
            decide(&me, expect, &answers, &mut d)
        };
        match step {
            Step::Done => {
                // In a cluster but not (yet) a voter: a learner waiting for promotion, or a
                // server added by another's initialisation. Ask to be promoted if we can.
                if let Some((_, leader)) = node.leader() {
                    if leader.rpc_addr != node.addr().rpc_addr {
                        join_via(&node, &leader.rpc_addr, ask_timeout * 10).await;
                    }
                }
            }
            Step::Initialize(members) if !initialised => {
                info!(servers = members.len(), "initialising the cluster");
                match node.raft().initialize(members).await {
                    Ok(()) => initialised = true,
                    Err(e) => warn!(error = %e, "initialising the cluster failed"),
                }
            }
            Step::Initialize(_) => {}
            Step::Join { via } => {
                join_via(&node, &via, ask_timeout * 10).await;
            }
            Step::Wait { known, expect } => {
                debug!(known, expect, "waiting for more servers");
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(retry) => {}
        }
    }
}

/// How long a server in a cluster may go without a leader before it asks to be added
/// back (it may have been removed while it was away).
const LEADERLESS_BEFORE_REJOIN: Duration = Duration::from_secs(10);

/// A server that was removed from the raft configuration while it was away (autopilot's
/// dead-server cleanup, `force-leave`, `leave_on_terminate`) still holds the old
/// configuration and hears from no leader: every `interval`, once it has known no leader
/// for [`LEADERLESS_BEFORE_REJOIN`], it asks the other servers it knows (its configuration
/// and `server.join`) to add it again (every 10 s at most), as Nomad's servers rejoin
/// through gossip. For a member this is a no-op on the leader. A server that knows a
/// leader but is only a learner asks that leader to promote it. The rejoining server's
/// term has grown meanwhile, so the leader steps down once as it takes it back (there is
/// no pre-vote in openraft 0.9): one election per rejoin.
pub async fn rejoin(
    node: Arc<RaftNode>,
    join: Vec<String>,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let mut leaderless_since: Option<tokio::time::Instant> = None;
    let mut last_attempt: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        if !node.is_initialized().await {
            continue;
        }
        // Added back as a learner whose promotion was cut short (the leader changed as it
        // rejoined): ask the leader to finish it.
        if let Some((_, leader)) = node.leader() {
            leaderless_since = None;
            if !node.is_voter() && leader.rpc_addr != node.addr().rpc_addr {
                join_via(&node, &leader.rpc_addr, Duration::from_secs(10)).await;
            }
            continue;
        }
        let since = *leaderless_since.get_or_insert_with(tokio::time::Instant::now);
        let recently = last_attempt.is_some_and(|t| t.elapsed() < LEADERLESS_BEFORE_REJOIN);
        if since.elapsed() < LEADERLESS_BEFORE_REJOIN || recently {
            continue;
        }
        last_attempt = Some(tokio::time::Instant::now());
        let me = node.addr().rpc_addr.clone();
        let mut peers: Vec<String> = node
            .membership()
            .servers
            .into_iter()
            .map(|(_, a, _)| a.rpc_addr)
            .chain(join.iter().cloned())
            .filter(|a| *a != me)
            .collect();
        peers.sort();
        peers.dedup();
        for via in peers {
            if join_via(&node, &via, Duration::from_secs(10)).await {
                break;
            }
        }
    }
}

/// Ask the server at `via` to add this one to its cluster; whether it did (or is catching
/// it up).
pub async fn join_via(node: &RaftNode, via: &str, timeout: Duration) -> bool {
    info!(%via, "asking to join the cluster");
    let req = ServiceRequest::OperatorRaftJoin(RaftJoinRequest {
        id: node.id(),
        addr: node.addr().clone(),
    });
    match node
        .pool()
        .call_addr(via, RpcRequest::Service(req), timeout)
        .await
    {
        Ok(RpcResponse::Service(Ok(ServiceResponse::OperatorRaftJoin(())))) => {
            info!(%via, "joined the cluster");
            true
        }
        Ok(RpcResponse::Service(Err(e))) => {
            warn!(%via, error = %e, "join refused");
            false
        }
        Ok(other) => {
            warn!(%via, answer = other.kind(), "unexpected answer to Operator.RaftJoin");
            false
        }
        Err(RpcError::Timeout { .. }) => {
            info!(%via, "join still in progress (catching up)");
            true
        }
        Err(e) => {
            warn!(%via, error = %e, "join failed");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(id: ServerId, initialized: bool) -> PeerInfo {
        PeerInfo {
            id,
            addr: ServerAddr {
                name: format!("s{id}"),
                rpc_addr: format!("10.0.0.{id}:4647"),
                http_addr: format!("10.0.0.{id}:4646"),
            },
            initialized,
            discovered: vec![],
        }
    }

    #[test]
    fn a_single_server_with_expect_one_initialises_itself() {
        let me = peer(7, false);
        let mut d = BTreeMap::new();
        match decide(&me, 1, &[], &mut d) {
            Step::Initialize(m) => assert_eq!(m.keys().copied().collect::<Vec<_>>(), vec![7]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn exactly_the_lowest_id_initialises_when_all_start_at_once() {
        let all = [peer(30, false), peer(10, false), peer(20, false)];
        let mut initialisers = vec![];
        for me in &all {
            let others: Vec<_> = all.iter().filter(|p| p.id != me.id).cloned().collect();
            let mut d = BTreeMap::new();
            if let Step::Initialize(m) = decide(me, 3, &others, &mut d) {
                assert_eq!(m.len(), 3);
                initialisers.push(me.id);
            }
        }
        assert_eq!(initialisers, vec![10]);
    }

    #[test]
    fn nobody_initialises_before_expect_servers_are_known() {
        let me = peer(1, false);
        let mut d = BTreeMap::new();
        assert_eq!(
            decide(&me, 3, &[peer(2, false)], &mut d),
            Step::Wait {
                known: 2,
                expect: 3
            }
        );
        // The third server shows up in a later round.
        assert!(matches!(
            decide(&me, 3, &[peer(3, false)], &mut d),
            Step::Initialize(m) if m.len() == 3
        ));
    }

    #[test]
    fn discovery_spreads_through_partial_join_lists() {
        // 1 only knows 2; 2 has heard of 3.
        let me = peer(1, false);
        let mut two = peer(2, false);
        two.discovered = vec![(3, peer(3, false).addr)];
        let mut d = BTreeMap::new();
        assert!(matches!(decide(&me, 3, &[two], &mut d), Step::Initialize(m) if m.len() == 3));
    }

    #[test]
    fn a_server_that_finds_a_cluster_joins_it() {
        let me = peer(1, false);
        let mut d = BTreeMap::new();
        assert_eq!(
            decide(&me, 3, &[peer(2, false), peer(4, true)], &mut d),
            Step::Join {
                via: "10.0.0.4:4647".into()
            }
        );
    }

    #[test]
    fn expect_zero_only_ever_joins() {
        let me = peer(1, false);
        let mut d = BTreeMap::new();
        assert!(matches!(
            decide(&me, 0, &[peer(2, false)], &mut d),
            Step::Wait { expect: 0, .. }
        ));
    }

    #[test]
    fn an_initialised_server_is_done() {
        let mut d = BTreeMap::new();
        assert_eq!(decide(&peer(1, true), 3, &[], &mut d), Step::Done);
    }
}
