//! The raft node: openraft wired to the sled log store, the state machine over the state
//! store, and the RPC network; its timing profile from the server config; writes batched
//! into entries on the leader; consistent reads; membership changes.
//!
//! ```text
//!  write_local(cmd) ─▶ leader? ── yes ─▶ WriteBatcher ─▶ raft.client_write(Batch[…]) ─▶ Applied
//!                         └──── no ──▶ NotLeader { leader }
//! ```
//!
//! Only the leader writes. Requests that must reach it are forwarded whole, typed, by the
//! service layer (`server::endpoints`), never as raw commands.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ChangeMembershipError, ClientWriteError, InstallSnapshotError, RaftError};
use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, InstallSnapshotResponse};
use openraft::{ChangeMembers, ServerState, SnapshotPolicy};
use teamster_storage::fsm::Command;
use teamster_storage::log_store::LogStats;
use teamster_storage::raft_types::{EntryCommand, Raft, ServerAddr, ServerId, TypeConfig};
use teamster_storage::state::StateStore;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::rpc::{NetworkFactory, Pool, RpcError, ServiceError};

/// How long a membership change waits for an earlier one to be committed.
const MEMBERSHIP_SETTLE: Duration = Duration::from_secs(10);
use crate::server::config::{RaftTiming, ServerConfig};
use crate::server::lease::{self, Lease};
use crate::server::write_batcher::{
    Applied, BatcherConfig, Propose, ProposeFuture, WriteBatcher, WriteError,
};

/// Why the raft node could not start or a membership change failed.
#[derive(Debug, thiserror::Error)]
pub enum RaftNodeError {
    /// The storage could not be opened.
    #[error("opening the raft storage in {dir}: {reason}")]
    Storage {
        /// The directory.
        dir: String,
        /// Why.
        reason: String,
    },
    /// The timing profile is not valid for openraft.
    #[error("raft config: {0}")]
    Config(String),
    /// openraft failed.
    #[error("raft: {0}")]
    Raft(String),
    /// This server is not the leader.
    #[error("not the leader")]
    NotLeader {
        /// The leader, if known.
        leader: Option<(ServerId, ServerAddr)>,
    },
    /// No leader is known.
    #[error("No cluster leader")]
    NoLeader,
    /// The server named is not a member.
    #[error("no raft peer {0}")]
    UnknownPeer(String),
    /// A call to another server failed.
    #[error(transparent)]
    Rpc(#[from] RpcError),
}

/// The openraft config for a timing profile.
pub fn openraft_config(t: &RaftTiming) -> Result<openraft::Config, RaftNodeError> {
    let ms = |d: Duration| d.as_millis().max(1) as u64;
    let c = openraft::Config {
        cluster_name: "teamster".to_string(),
        heartbeat_interval: ms(t.heartbeat_interval),
        election_timeout_min: ms(t.election_timeout),
        election_timeout_max: ms(t.election_timeout) * 2,
        install_snapshot_timeout: ms(t.install_snapshot_timeout),
        max_payload_entries: t.max_append_entries,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(t.snapshot_threshold),
        max_in_snapshot_log_to_keep: t.trailing_logs,
        // A follower further behind than this is brought up to date with a snapshot.
        replication_lag_threshold: t.snapshot_threshold + t.trailing_logs,
        // Small enough that encoding, sending and decoding one chunk stays well within an
        // election timeout (the receiver renews the leader's contact per chunk).
        snapshot_max_chunk_size: 1 << 20,
        purge_batch_size: 256,
        ..openraft::Config::default()
    };
    c.validate()
        .map_err(|e| RaftNodeError::Config(e.to_string()))
}

/// Where the leader's log stands ([`RaftNode::replication_status`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationStatus {
    /// The leader's last log index.
    pub last_index: u64,
    /// The current term.
    pub term: u64,
    /// Per server: the last entry the leader knows it holds, as (index, term).
    pub matched: BTreeMap<ServerId, (u64, u64)>,
    /// How long ago a quorum last acknowledged this leader (`None`: not yet).
    pub since_quorum_ack: Option<std::time::Duration>,
}

/// The membership as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MembershipView {
    /// The log index of the membership entry.
    pub index: u64,
    /// Every member: id, address, voter or learner.
    pub servers: Vec<(ServerId, ServerAddr, bool)>,
}

/// A running raft node.
pub struct RaftNode {
    id: ServerId,
    addr: ServerAddr,
    raft: Raft,
    state: StateStore,
    pool: Pool,
    batcher: WriteBatcher,
    hold: Duration,
    log_stats: Arc<LogStats>,
    /// One membership change at a time (openraft refuses overlapping ones).
    membership_lock: tokio::sync::Mutex<()>,
    /// This server's leader lease ([`crate::server::lease`]).
    lease: watch::Receiver<Lease>,
    /// Stops the lease monitor.
    lease_stop: CancellationToken,
    /// Set while leadership is handed over ([`crate::server::handover`]): writes are
    /// refused as on a follower.
    handing_over: AtomicBool,
    /// Writes between the leadership check and their answer.
    writes_in_flight: AtomicUsize,
}

/// One write counted in [`RaftNode::writes_in_flight`] until dropped.
struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn count(n: &'a AtomicUsize) -> InFlight<'a> {
        n.fetch_add(1, Ordering::SeqCst);
        InFlight(n)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

struct RaftProposer {
    raft: Raft,
}

impl Propose for RaftProposer {
    fn propose(&self, cmd: Command) -> ProposeFuture {
        let raft = self.raft.clone();
        Box::pin(async move {
            match raft.client_write(EntryCommand::new(cmd)).await {
                Ok(resp) => Ok(Applied {
                    index: resp.log_id.index,
                    response: resp.data,
                }),
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                    Err(WriteError::NotLeader {
                        leader: f.leader_id.zip(f.leader_node),
                    })
                }
                Err(e) => Err(WriteError::Raft(e.to_string())),
            }
        })
    }
}

/// Whether a leader that proposed a write as `term` no longer leads that term: it is not
/// the leader now, or it leads under another vote.
fn left_the_term(
    term: &openraft::Vote<ServerId>,
    state: ServerState,
    vote: &openraft::Vote<ServerId>,
) -> bool {
    state != ServerState::Leader || vote != term
}

impl RaftNode {
    /// Open the storage under `dir` and start raft as `id`, reachable at `addr`; `instance`
    /// (a random number drawn at each start) tells this start's snapshots apart.
    pub async fn start(
        id: ServerId,
        addr: ServerAddr,
        dir: &Path,
        config: &ServerConfig,
        pool: Pool,
        instance: u64,
    ) -> Result<Arc<RaftNode>, RaftNodeError> {
        let state = StateStore::new();
        let (log_store, state_machine) = teamster_storage::open(
            dir,
            state.clone(),
            &teamster_storage::StorageConfig {
                instance,
                ..teamster_storage::StorageConfig::default()
            },
        )
        .map_err(|e| RaftNodeError::Storage {
            dir: dir.display().to_string(),
            reason: e.to_string(),
        })?;
        let log_stats = log_store.stats();
        let raft_config = Arc::new(openraft_config(&config.raft)?);
        let network = NetworkFactory::new(pool.clone());
        let raft =
            openraft::Raft::<TypeConfig>::new(id, raft_config, network, log_store, state_machine)
                .await
                .map_err(|e| RaftNodeError::Raft(e.to_string()))?;
        let batcher = WriteBatcher::spawn(
            BatcherConfig::default(),
            Arc::new(RaftProposer { raft: raft.clone() }),
        );
        let lease_stop = CancellationToken::new();
        let (lease, _) = lease::spawn(
            raft.clone(),
            config.raft.leader_lease_timeout,
            lease_stop.clone(),
        );
        info!(server_id = id, rpc = %addr.rpc_addr, "raft node started");
        Ok(Arc::new(RaftNode {
            lease,
            lease_stop,
            id,
            addr,
            raft,
            state,
            pool,
            batcher,
            hold: config.rpc_hold_timeout,
            log_stats,
            membership_lock: tokio::sync::Mutex::new(()),
            handing_over: AtomicBool::new(false),
            writes_in_flight: AtomicUsize::new(0),
        }))
    }

    /// What this server's raft log has appended since it started.
    pub fn log_stats(&self) -> &LogStats {
        &self.log_stats
    }

    /// This server's raft id.
    pub fn id(&self) -> ServerId {
        self.id
    }

    /// This server's addresses.
    pub fn addr(&self) -> &ServerAddr {
        &self.addr
    }

    /// The openraft handle.
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// Take one snapshot chunk from the leader. A leader streaming a snapshot is in contact
    /// with this server, as hashicorp/raft counts it: openraft 0.9 carries heartbeats on the
    /// replication stream the snapshot occupies, and hands chunks to the state machine
    /// without touching the election timer, so a transfer (or an install) longer than the
    /// election timeout made the receiver stand, reject the finished snapshot as coming from
    /// an older term, depose the leader and start over: a restarted server could cycle like
    /// that for minutes. While a chunk is received and installed, an empty AppendEntries
    /// under the chunk's vote is handed to raft every heartbeat interval: it matches any log
    /// (no previous entry, nothing to append, nothing to commit) and only renews the
    /// leader's contact; a vote older than this server's is refused by raft as any
    /// AppendEntries is.
    pub async fn install_snapshot_chunk(
        &self,
        req: InstallSnapshotRequest<TypeConfig>,
    ) -> Result<InstallSnapshotResponse<ServerId>, RaftError<ServerId, InstallSnapshotError>> {
        let contact = AppendEntriesRequest {
            vote: req.vote,
            prev_log_id: None,
            entries: Vec::new(),
            leader_commit: None,
        };
        let every = Duration::from_millis(self.raft.config().heartbeat_interval.max(1));
        let install = self.raft.install_snapshot(req);
        tokio::pin!(install);
        loop {
            if let Err(e) = self.raft.append_entries(contact.clone()).await {
                tracing::debug!(error = %e, "renewing the leader's contact during a snapshot failed");
            }
            tokio::select! {
                answer = &mut install => return answer,
                () = tokio::time::sleep(every) => {}
            }
        }
    }

    /// The replicated state.
    pub fn state(&self) -> &StateStore {
        &self.state
    }

    /// The RPC pool shared with the network.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The leader this server knows of, with its address.
    pub fn leader(&self) -> Option<(ServerId, ServerAddr)> {
        let m = self.raft.server_metrics();
        let m = m.borrow();
        let id = m.current_leader?;
        let node = m.membership_config.membership().get_node(&id)?.clone();
        Some((id, node))
    }

    /// On the leader, where the log stands: its last index, the current term, and for each
    /// server the last entry the leader knows it holds (index, term; its own last entry
    /// for the leader). `None` elsewhere.
    pub fn replication_status(&self) -> Option<ReplicationStatus> {
        let m = self.raft.metrics();
        let m = m.borrow();
        if m.state != ServerState::Leader {
            return None;
        }
        let last_index = m.last_log_index.unwrap_or(0);
        let mut matched: BTreeMap<ServerId, (u64, u64)> = m
            .replication
            .as_ref()
            .map(|r| {
                r.iter()
                    .map(|(id, log)| {
                        (
                            *id,
                            log.as_ref().map_or((0, 0), |l| (l.index, l.leader_id.term)),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        matched.insert(self.id, (last_index, m.current_term));
        Some(ReplicationStatus {
            last_index,
            term: m.current_term,
            matched,
            since_quorum_ack: m
                .millis_since_quorum_ack
                .map(std::time::Duration::from_millis),
        })
    }

    /// Whether this server is the leader right now (raft's view, without a quorum check).
    pub fn is_leader(&self) -> bool {
        self.raft.server_metrics().borrow().state == ServerState::Leader
    }

    /// Whether this server leads in raft's eyes but no quorum acknowledged it within the
    /// lease: it must not serve writes or default-consistency reads.
    pub fn lease_lost(&self) -> bool {
        *self.lease.borrow() == Lease::Lost && self.is_leader()
    }

    /// On the leader, milliseconds since a quorum last acknowledged it (0 elsewhere).
    pub fn millis_since_quorum_ack(&self) -> u64 {
        let m = self.raft.metrics();
        let m = m.borrow();
        match m.state {
            ServerState::Leader => m.millis_since_quorum_ack.unwrap_or(0),
            _ => 0,
        }
    }

    /// This server's lease, to watch.
    pub fn lease(&self) -> watch::Receiver<Lease> {
        self.lease.clone()
    }

    /// Wait up to `timeout` until a leader is known.
    pub async fn wait_leader(&self, timeout: Duration) -> Option<(ServerId, ServerAddr)> {
        let mut rx = self.raft.server_metrics();
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.leader() {
                return Some(l);
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                _ => return self.leader(),
            }
        }
    }

    /// Wait up to `timeout` until the leader is someone other than `stale`.
    pub(crate) async fn wait_leader_change(&self, stale: Option<ServerId>, deadline: Instant) {
        let mut rx = self.raft.server_metrics();
        loop {
            let now = rx.borrow_and_update().current_leader;
            if now.is_some() && now != stale {
                return;
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                return;
            }
        }
    }

    /// Commit `cmd` on this server as the leader (batched with concurrent writes into one
    /// entry); never forwards: a call that must reach the leader is forwarded whole by the
    /// service layer.
    pub async fn write_local(&self, cmd: Command) -> Result<Applied, WriteError> {
        let _counted = InFlight::count(&self.writes_in_flight);
        if self.handing_over.load(Ordering::SeqCst) {
            // Retried by the caller on the successor, like any write sent to a follower.
            return Err(WriteError::NotLeader { leader: None });
        }
        let mut server = self.raft.server_metrics();
        let term = {
            let m = server.borrow_and_update();
            if m.state != ServerState::Leader {
                return Err(WriteError::NotLeader {
                    leader: self.leader(),
                });
            }
            m.vote
        };
        let mut lease = self.lease.clone();
        if self.lease_lost() {
            return Err(WriteError::NoLeader);
        }
        tokio::select! {
            written = self.batcher.write(cmd) => written,
            // Proposed, but the quorum that would commit it has gone silent: answer now
            // rather than hang; it may still commit if the quorum comes back.
            _ = lease.wait_for(|l| *l == Lease::Lost) => Err(WriteError::LeadershipLost),
            // Proposed, then this server stopped leading this term (it heard of a higher
            // one). openraft answers the proposal only once the new leader reaches this
            // server, to commit or to truncate it, which may take any time: answer now.
            _ = server.wait_for(|m| left_the_term(&term, m.state, &m.vote)) => {
                Err(WriteError::LeadershipLost)
            }
        }
    }

    /// Refuse (`true`) or take again (`false`) writes while leadership is handed over.
    pub(crate) fn set_handing_over(&self, on: bool) {
        self.handing_over.store(on, Ordering::SeqCst);
    }

    /// Writes that passed the leadership check and are not answered yet.
    pub(crate) fn writes_in_flight(&self) -> usize {
        self.writes_in_flight.load(Ordering::SeqCst)
    }

    /// On the leader: confirm leadership with a quorum and return the index every earlier
    /// committed write is at or below (applied locally before this returns).
    pub async fn leader_read_index(&self) -> Result<u64, RaftNodeError> {
        if self.lease_lost() {
            return Err(RaftNodeError::NoLeader);
        }
        match self.raft.ensure_linearizable().await {
            Ok(log_id) => Ok(log_id.map_or(0, |l| l.index)),
            Err(RaftError::APIError(openraft::error::CheckIsLeaderError::ForwardToLeader(f))) => {
                Err(RaftNodeError::NotLeader {
                    leader: f.leader_id.zip(f.leader_node),
                })
            }
            Err(RaftError::APIError(openraft::error::CheckIsLeaderError::QuorumNotEnough(_))) => {
                Err(RaftNodeError::NoLeader)
            }
            Err(e) => Err(RaftNodeError::Raft(e.to_string())),
        }
    }

    /// A snapshot of the local state that reflects every write committed before the call
    /// (linearizable): the leader confirms its leadership and names an index, this server
    /// waits until it has applied that far. Waits up to the hold timeout for a leader.
    pub async fn consistent_snapshot(
        &self,
    ) -> Result<teamster_storage::state::Snapshot, RaftNodeError> {
        let deadline = Instant::now() + self.hold;
        let index = loop {
            let (leader, addr) = match self.leader() {
                Some(l) => l,
                None => {
                    self.wait_leader(deadline.saturating_duration_since(Instant::now()))
                        .await
                        .ok_or(RaftNodeError::NoLeader)?;
                    continue;
                }
            };
            let answer = if leader == self.id {
                self.leader_read_index().await
            } else {
                let timeout = deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(500));
                match self
                    .pool
                    .call(
                        leader,
                        &addr.rpc_addr,
                        crate::rpc::RpcRequest::ReadIndex,
                        timeout,
                    )
                    .await
                {
                    Ok(crate::rpc::RpcResponse::ReadIndex(r)) => r.map_err(|e| match e {
                        ServiceError::NotLeader { leader } => RaftNodeError::NotLeader { leader },
                        ServiceError::NoLeader => RaftNodeError::NoLeader,
                        e => RaftNodeError::Raft(e.to_string()),
                    }),
                    Ok(other) => Err(RaftNodeError::Rpc(other.unexpected("Status.ReadIndex"))),
                    Err(e) => Err(RaftNodeError::Rpc(e)),
                }
            };
            match answer {
                Ok(i) => break i,
                // An isolated leader answers at once, not after the hold.
                Err(RaftNodeError::NoLeader) if leader == self.id && self.lease_lost() => {
                    return Err(RaftNodeError::NoLeader)
                }
                Err(RaftNodeError::NotLeader { .. } | RaftNodeError::NoLeader)
                    if Instant::now() < deadline =>
                {
                    self.wait_leader_change(Some(leader), deadline).await;
                }
                Err(RaftNodeError::NotLeader { .. }) => return Err(RaftNodeError::NoLeader),
                Err(e) => return Err(e),
            }
        };
        let remaining = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(1));
        self.state
            .snapshot_min_index(index, remaining)
            .await
            .map_err(|e| RaftNodeError::Raft(e.to_string()))
    }

    /// The current membership.
    pub fn membership(&self) -> MembershipView {
        let m = self.raft.server_metrics();
        let m = m.borrow();
        let stored = &m.membership_config;
        let membership = stored.membership();
        let voters: BTreeSet<ServerId> = membership.voter_ids().collect();
        let servers = membership
            .nodes()
            .map(|(id, node)| (*id, node.clone(), voters.contains(id)))
            .collect();
        MembershipView {
            index: stored.log_id().map_or(0, |l| l.index),
            servers,
        }
    }

    /// Whether `id` is a member (voter or learner) of the current membership; cheaper than
    /// [`RaftNode::membership`], which copies every address.
    pub fn is_member(&self, id: ServerId) -> bool {
        self.raft
            .server_metrics()
            .borrow()
            .membership_config
            .membership()
            .get_node(&id)
            .is_some()
    }

    /// Whether this server has a membership (belongs to a cluster).
    pub async fn is_initialized(&self) -> bool {
        self.raft.is_initialized().await.unwrap_or(false)
    }

    /// Whether this server is a voter in its membership.
    pub fn is_voter(&self) -> bool {
        self.membership()
            .servers
            .iter()
            .any(|(id, _, voter)| *id == self.id && *voter)
    }

    /// On the leader: add `id` as a learner, wait until it caught up, promote it to voter.
    /// Idempotent: a voter already in the membership is left alone.
    pub async fn add_voter(&self, id: ServerId, addr: ServerAddr) -> Result<(), RaftNodeError> {
        self.require_leader()?;
        let _one_at_a_time = self.membership_lock.lock().await;
        let view = self.membership();
        match view.servers.iter().find(|(s, _, _)| *s == id) {
            Some((_, _, true)) => return Ok(()),
            Some((_, known, false)) if *known == addr => {}
            _ => {
                info!(server_id = id, rpc = %addr.rpc_addr, "adding a server as a learner");
                self.raft
                    .add_learner(id, addr, true)
                    .await
                    .map_err(|e| self.membership_error(e))?;
            }
        }
        info!(server_id = id, "promoting the server to voter");
        self.change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])))
            .await
    }

    /// Propose a membership change, waiting (up to [`MEMBERSHIP_SETTLE`]) while raft still
    /// commits an earlier one: openraft refuses a change while the last membership entry is
    /// uncommitted (a promotion that returned once applied here but before the quorum had it,
    /// or one proposed by a previous leader), and an operator asking twice in a row should not
    /// see that as an error.
    async fn change_membership(
        &self,
        change: ChangeMembers<ServerId, ServerAddr>,
    ) -> Result<(), RaftNodeError> {
        let deadline = Instant::now() + MEMBERSHIP_SETTLE;
        loop {
            match self.raft.change_membership(change.clone(), false).await {
                Ok(_) => return Ok(()),
                Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(
                    ChangeMembershipError::InProgress(busy),
                ))) if Instant::now() < deadline => {
                    tracing::debug!(%busy, "membership change waits for the previous one");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(self.membership_error(e)),
            }
        }
    }

    /// On the leader: remove `id` from the membership (voter or learner).
    pub async fn remove_server(&self, id: ServerId) -> Result<(), RaftNodeError> {
        self.require_leader()?;
        let _one_at_a_time = self.membership_lock.lock().await;
        let view = self.membership();
        let Some((_, _, voter)) = view.servers.iter().find(|(s, _, _)| *s == id) else {
            return Err(RaftNodeError::UnknownPeer(id.to_string()));
        };
        let change = if *voter {
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        };
        warn!(
            server_id = id,
            "removing a server from the raft configuration"
        );
        self.change_membership(change).await?;
        self.pool.forget(id);
        Ok(())
    }

    fn require_leader(&self) -> Result<(), RaftNodeError> {
        if self.is_leader() && !self.handing_over.load(Ordering::SeqCst) {
            Ok(())
        } else {
            match self.leader() {
                Some(l) => Err(RaftNodeError::NotLeader { leader: Some(l) }),
                None => Err(RaftNodeError::NoLeader),
            }
        }
    }

    fn membership_error(
        &self,
        e: RaftError<ServerId, ClientWriteError<ServerId, ServerAddr>>,
    ) -> RaftNodeError {
        match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => RaftNodeError::NotLeader {
                leader: f.leader_id.zip(f.leader_node),
            },
            e => RaftNodeError::Raft(e.to_string()),
        }
    }

    /// Wait until raft stops on a fatal error — a failed write to its storage (a full or
    /// failing disk: sled refuses every write after the first failed one until the database
    /// is opened again), or a panic in its core — and say why. Never returns while raft runs.
    /// The agent exits on it so that a supervisor restarts the server on storage that
    /// works again (as etcd does on a failed WAL write); what was acknowledged is on disk.
    pub async fn wait_fatal(&self) -> String {
        let mut metrics = self.raft.metrics();
        loop {
            if let Err(fatal) = &metrics.borrow_and_update().running_state {
                return fatal.to_string();
            }
            if metrics.changed().await.is_err() {
                // The core is gone without a word: only a shutdown does that.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Stop raft (the storage is flushed on every append and vote, so nothing is lost).
    pub async fn shutdown(&self) {
        self.lease_stop.cancel();
        if let Err(e) = self.raft.shutdown().await {
            warn!(error = %e, "raft did not shut down cleanly");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use openraft::{CommittedLeaderId, LogId, Membership, SnapshotMeta, StoredMembership, Vote};

    use super::*;
    use crate::rpc::RpcConfig;

    /// A raft node `id` on storage under `dir`, whose peers (if any) are unreachable: only
    /// what the test sends reaches it. Its address is "me".
    async fn start_alone(
        id: ServerId,
        dir: &Path,
        timing: RaftTiming,
    ) -> (Arc<RaftNode>, ServerAddr) {
        let config = ServerConfig {
            enabled: true,
            raft: timing,
            ..ServerConfig::default()
        };
        let pool = Pool::new(id, RpcConfig::for_tests()).unwrap();
        let me = addr("me", "127.0.0.1:2");
        let node = RaftNode::start(id, me.clone(), dir, &config, pool, 1)
            .await
            .unwrap();
        (node, me)
    }

    fn addr(name: &str, rpc: &str) -> ServerAddr {
        ServerAddr {
            name: name.into(),
            rpc_addr: rpc.into(),
            http_addr: "127.0.0.1:1".into(),
        }
    }

    /// A follower that receives a snapshot for longer than its election timeout keeps
    /// following the leader that streams it, and installs the snapshot: before, it stood
    /// for election half-way, refused the finished snapshot as coming from an older term,
    /// and a restarted server could go round that for minutes.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_snapshot_streamed_for_longer_than_an_election_timeout_keeps_the_leader_and_installs()
    {
        const LEADER: ServerId = 1;
        const ME: ServerId = 2;
        let dir = tempfile::tempdir().unwrap();
        let (node, me) = start_alone(ME, dir.path(), RaftTiming::for_tests()).await;
        // The leader is unreachable: only what this test sends reaches the node.
        let nodes = BTreeMap::from([(LEADER, addr("leader", "127.0.0.1:1")), (ME, me)]);
        let members = BTreeSet::from([LEADER, ME]);
        node.raft().initialize(nodes.clone()).await.unwrap();

        let vote = Vote::new_committed(100, LEADER);
        let last = LogId::new(CommittedLeaderId::new(100, LEADER), 10);
        // Contact first, as the leader's replication finds the follower behind its purge
        // point with an AppendEntries before it streams a snapshot.
        node.raft()
            .append_entries(AppendEntriesRequest {
                vote,
                prev_log_id: None,
                entries: Vec::new(),
                leader_commit: None,
            })
            .await
            .unwrap();
        let image = StateStore::new().snapshot().encode_image().unwrap();
        let meta = SnapshotMeta {
            last_log_id: Some(last),
            last_membership: StoredMembership::new(
                Some(LogId::new(CommittedLeaderId::new(100, LEADER), 5)),
                Membership::new(vec![members], nodes),
            ),
            snapshot_id: "100-10-test".into(),
        };
        // Six chunks 350 ms apart: about 2 s in all, past the 0.9-1.2 s a follower of a
        // committed leader waits (lease plus election timeout at 300 ms), each gap well
        // within it.
        let parts = 6;
        let step = image.len().div_ceil(parts).max(1);
        let mut offset = 0;
        let mut answer = None;
        for (k, data) in image.chunks(step).enumerate() {
            if k > 0 {
                tokio::time::sleep(Duration::from_millis(350)).await;
            }
            let done = offset + data.len() == image.len();
            let reply = node
                .install_snapshot_chunk(InstallSnapshotRequest {
                    vote,
                    meta: meta.clone(),
                    offset: offset as u64,
                    data: data.to_vec(),
                    done,
                })
                .await
                .unwrap();
            offset += data.len();
            answer = Some(reply);
        }
        assert_eq!(
            answer.unwrap().vote,
            vote,
            "the follower stood for election during the stream"
        );
        // Metrics are published after the install answers.
        let metrics = node
            .raft()
            .wait(Some(Duration::from_secs(10)))
            .applied_index(Some(10), "the snapshot installed")
            .await
            .unwrap();
        assert_eq!(metrics.vote, vote);
        assert_eq!(metrics.current_leader, Some(LEADER));
        assert_eq!(metrics.snapshot, Some(last));
        node.raft().shutdown().await.unwrap();
    }

    /// A write proposed on a leader that then hears of a higher term is answered at once
    /// ("leadership lost", its outcome unknown), long before the lease would run out:
    /// openraft itself answers it only when a new leader reaches this server, and here none
    /// ever does. Before, the write waited for that.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_pending_when_the_leader_steps_down_is_answered_at_once() {
        const ME: ServerId = 1;
        const OTHER: ServerId = 2;
        let dir = tempfile::tempdir().unwrap();
        let timing = RaftTiming {
            leader_lease_timeout: Duration::from_secs(60),
            ..RaftTiming::for_tests()
        };
        let (node, me) = start_alone(ME, dir.path(), timing).await;
        node.raft()
            .initialize(BTreeMap::from([(ME, me)]))
            .await
            .unwrap();
        node.raft()
            .wait(Some(Duration::from_secs(10)))
            .state(ServerState::Leader, "a leader of one")
            .await
            .unwrap();
        // The other voter never answers: from here on nothing commits.
        node.raft()
            .add_learner(OTHER, addr("other", "127.0.0.1:1"), false)
            .await
            .unwrap();
        let raft = node.raft().clone();
        let change = tokio::spawn(async move {
            let _ = raft
                .change_membership(BTreeSet::from([ME, OTHER]), false)
                .await;
        });
        node.raft()
            .wait(Some(Duration::from_secs(10)))
            .metrics(
                |m| m.membership_config.membership().voter_ids().count() == 2,
                "two voters",
            )
            .await
            .unwrap();
        let write = {
            let node = node.clone();
            tokio::spawn(async move {
                node.write_local(Command::EvalDelete(teamster_storage::fsm::EvalDelete {
                    evals: Vec::new(),
                    allocs: Vec::new(),
                }))
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!write.is_finished(), "a write without its quorum committed");
        let term = node.raft().metrics().borrow().current_term;
        let higher = Vote::new_committed(term + 5, OTHER);
        node.raft()
            .append_entries(AppendEntriesRequest {
                vote: higher,
                prev_log_id: None,
                entries: Vec::new(),
                leader_commit: None,
            })
            .await
            .unwrap();
        let answered = tokio::time::timeout(Duration::from_secs(10), write)
            .await
            .expect("the write was not answered after the step-down")
            .unwrap();
        assert_eq!(answered, Err(WriteError::LeadershipLost));
        change.abort();
        node.raft().shutdown().await.unwrap();
    }

    #[test]
    fn a_leader_leaves_its_term_when_it_follows_or_votes_anew() {
        let term = Vote::new_committed(4, 1);
        assert!(!left_the_term(&term, ServerState::Leader, &term));
        assert!(left_the_term(&term, ServerState::Follower, &term));
        assert!(left_the_term(
            &term,
            ServerState::Leader,
            &Vote::new_committed(5, 1)
        ));
        assert!(left_the_term(
            &term,
            ServerState::Candidate,
            &Vote::new(5, 1)
        ));
    }
}
