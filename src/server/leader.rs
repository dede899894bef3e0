//! The leadership monitor: watches raft's role, and when this server becomes leader runs a
//! barrier and then establishes leadership; when it stops being leader, revokes it.
//!
//! The loop is the only place leader duties are switched, and it is serial: `establish` and
//! `revoke` never overlap, and after each one the loop re-reads the role, so a flap (win, lose,
//! win) always ends with exactly one consistent set of duties — established iff leader.
//!
//! The barrier (an empty entry written and applied, as Nomad's `raft.Barrier`) guarantees
//! that everything in the log before it, earlier leaders' entries and this leader's own from
//! before a restart, is committed and applied to the local state before any duty reads it.
//!
//! Establishing, in order (ARCHITECTURE.md §4): write the cluster metadata if the cluster has
//! none yet; then every [`LeaderDuty`] in registration order. Revoking runs the duties'
//! `revoke` in reverse order.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use openraft::ServerState;
use teamster_storage::fsm::Command;
use teamster_storage::model::ClusterMeta;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

use crate::server::lease::Lease;
use crate::server::raft::RaftNode;
use crate::util::{RngSource, SharedClock};

/// How long the barrier may take before establishing is retried.
const BARRIER_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between failed attempts to establish leadership.
const RETRY_DELAY: Duration = Duration::from_millis(250);

/// A leader-only subsystem, switched on and off by the monitor.
pub trait LeaderDuty: Send + Sync + 'static {
    /// A name for logs.
    fn name(&self) -> &'static str;
    /// Start the duty. Errors abort establishing (the monitor revokes what started and
    /// retries).
    fn establish(&self) -> BoxFuture<'_, Result<(), String>>;
    /// Stop the duty. Must be idempotent and must not fail.
    fn revoke(&self) -> BoxFuture<'_, ()>;
}

/// Whether this server's leader duties are established, for whoever needs a consistent
/// leader (e.g. endpoints that must not answer from a leader still restoring state).
#[derive(Debug, Clone)]
pub struct LeadershipState {
    rx: watch::Receiver<bool>,
}

impl LeadershipState {
    /// A state that reads "not established", and the sender the monitor ([`spawn`]) sets
    /// it with. Created before the monitor so the parts that read it can be built first.
    pub fn new() -> (LeadershipState, watch::Sender<bool>) {
        let (tx, rx) = watch::channel(false);
        (LeadershipState { rx }, tx)
    }

    /// True while leader duties are established.
    pub fn is_established(&self) -> bool {
        *self.rx.borrow()
    }

    /// A receiver of changes.
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }
}

/// Start the monitor: it sets `established` (from [`LeadershipState::new`]), runs until
/// `shutdown` and revokes leadership on the way out.
pub fn spawn(
    node: Arc<RaftNode>,
    duties: Vec<Arc<dyn LeaderDuty>>,
    clock: SharedClock,
    rng: RngSource,
    established: watch::Sender<bool>,
    shutdown: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let span = tracing::info_span!("leader", server_id = node.id());
    tokio::spawn(run(node, duties, clock, rng, established, shutdown).instrument(span))
}

async fn run(
    node: Arc<RaftNode>,
    duties: Vec<Arc<dyn LeaderDuty>>,
    clock: SharedClock,
    rng: RngSource,
    established: watch::Sender<bool>,
    shutdown: CancellationToken,
) {
    let mut metrics = node.raft().server_metrics();
    let mut lease = node.lease();
    loop {
        // A leader without its lease (no quorum answers it) serves nothing.
        let leader_now = metrics.borrow_and_update().state == ServerState::Leader
            && *lease.borrow_and_update() != Lease::Lost;
        let is_established = *established.borrow();
        if leader_now && !is_established {
            match establish(&node, &duties, clock.as_ref(), &rng).await {
                Ok(()) => {
                    established.send_replace(true);
                    metrics::gauge!("teamster_leader_established").set(1.0);
                    info!("leadership established");
                }
                Err(e) => {
                    warn!(error = %e, "establishing leadership failed; retrying");
                    revoke(&duties).await;
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(RETRY_DELAY) => {}
                    }
                    continue;
                }
            }
        } else if !leader_now && is_established {
            revoke(&duties).await;
            established.send_replace(false);
            metrics::gauge!("teamster_leader_established").set(0.0);
            info!("leadership revoked");
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            changed = metrics.changed() => if changed.is_err() { break },
            changed = lease.changed() => if changed.is_err() { break },
        }
    }
    if *established.borrow() {
        revoke(&duties).await;
        established.send_replace(false);
    }
}

async fn establish(
    node: &RaftNode,
    duties: &[Arc<dyn LeaderDuty>],
    clock: &dyn crate::util::Clock,
    rng: &RngSource,
) -> Result<(), String> {
    let started = tokio::time::Instant::now();
    // An entry of its own, committed and applied: every entry before it in the log is then
    // committed and applied too. `ensure_linearizable` alone is not enough: a leader that
    // restarts takes its leadership back in the same term (openraft restores it at once,
    // without a new first entry), and entries it had appended before stopping are committed
    // only later, after duties read the state (the broker would restore an evaluation whose
    // plan, with its final state, is about to commit, and schedule it a second time).
    match tokio::time::timeout(
        BARRIER_TIMEOUT,
        node.raft().client_write(Command::Batch(Vec::new()).into()),
    )
    .await
    {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(format!("barrier: {e}")),
        Err(_) => return Err("barrier timed out".into()),
    }
    metrics::histogram!("teamster_leader_barrier_seconds").record(started.elapsed().as_secs_f64());
    if node.state().snapshot().cluster_meta().is_none() {
        let meta = ClusterMeta {
            cluster_id: rng.uuid(),
            create_time: clock.now_unix_nanos(),
        };
        info!(cluster_id = %meta.cluster_id, "writing the cluster metadata");
        node.write_local(Command::ClusterMeta(meta))
            .await
            .map_err(|e| format!("writing the cluster metadata: {e}"))?;
    }
    for duty in duties {
        duty.establish()
            .await
            .map_err(|e| format!("{}: {e}", duty.name()))?;
    }
    metrics::histogram!("teamster_leader_establish_seconds")
        .record(started.elapsed().as_secs_f64());
    Ok(())
}

async fn revoke(duties: &[Arc<dyn LeaderDuty>]) {
    for duty in duties.iter().rev() {
        duty.revoke().await;
    }
}
