//! The node drainer's shell: one task, started while leadership is established, that plans
//! from the state, writes the marks and completions through raft, and sleeps until the next
//! force deadline or a change of the nodes, allocations or jobs.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use teamster_storage::fsm::{Command, CommandResponse};
use teamster_storage::state::{Snapshot, StateStore, Table};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use super::core::{self, DrainPlan};
use crate::server::leader::LeaderDuty;
use crate::server::leader_service::LeaderService;
use crate::server::raft::RaftNode;
use crate::util::{RngSource, SharedClock};

/// The longest sleep between two passes (the wall clock may be stepped).
const MAX_SLEEP: Duration = Duration::from_secs(60);
/// Pause after a failed raft write before the drainer tries again.
const WRITE_BACKOFF: Duration = Duration::from_secs(1);
/// After a change, how long the drainer lets further changes gather before it plans (a
/// client reporting many allocations, a plan stopping many): Nomad batches its marks over
/// one second.
const COALESCE: Duration = Duration::from_millis(200);
/// The tables whose changes can move a drain.
const WATCHED: [Table; 3] = [Table::Nodes, Table::Allocs, Table::Jobs];

/// Where the drainer writes: the raft node on a server; tests apply to a state store
/// directly.
pub trait DrainWriter: Send + Sync + 'static {
    /// Commit `cmd`; the state's answer, or why it could not be written.
    fn write(&self, cmd: Command) -> BoxFuture<'_, Result<CommandResponse, String>>;
    /// The state the drains are planned from.
    fn state(&self) -> &StateStore;
}

impl DrainWriter for RaftNode {
    fn write(&self, cmd: Command) -> BoxFuture<'_, Result<CommandResponse, String>> {
        Box::pin(async move {
            self.write_local(cmd)
                .await
                .map(|applied| applied.response)
                .map_err(|e| e.to_string())
        })
    }

    fn state(&self) -> &StateStore {
        RaftNode::state(self)
    }
}

/// The node drainer as a leader duty.
pub struct DrainerDuty {
    writer: Arc<dyn DrainWriter>,
    clock: SharedClock,
    rng: RngSource,
    tasks: LeaderService,
}

impl DrainerDuty {
    /// A drainer writing through `writer`.
    pub fn new(writer: Arc<dyn DrainWriter>, clock: SharedClock, rng: RngSource) -> DrainerDuty {
        DrainerDuty {
            writer,
            clock,
            rng,
            tasks: LeaderService::new(),
        }
    }
}

impl LeaderDuty for DrainerDuty {
    fn name(&self) -> &'static str {
        "node drainer"
    }

    fn establish(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let drainer = Drainer {
                writer: self.writer.clone(),
                clock: self.clock.clone(),
                rng: self.rng.clone(),
            };
            self.tasks
                .restart(|set| {
                    set.spawn(|stop| {
                        drainer
                            .run(stop)
                            .instrument(tracing::info_span!("node_drainer"))
                    });
                })
                .await;
            Ok(())
        })
    }

    fn revoke(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.tasks.stop())
    }
}

struct Drainer {
    writer: Arc<dyn DrainWriter>,
    clock: SharedClock,
    rng: RngSource,
}

impl Drainer {
    async fn run(self, stop: CancellationToken) {
        loop {
            let snapshot = self.writer.state().snapshot();
            let now = self.clock.now_unix_nanos();
            let planned = core::plan(&snapshot, now);
            // Without a draining node only a node change can start work: allocation and job
            // changes (every placement) do not wake the drainer to walk the nodes again.
            let watched: &[Table] = if planned.draining > 0 {
                &WATCHED
            } else {
                &[Table::Nodes]
            };
            let seen = snapshot.max_index(watched);
            metrics::gauge!("teamster_drainer_draining_nodes").set(planned.draining as f64);
            if !planned.is_idle() {
                if stop.is_cancelled() {
                    return;
                }
                if !self.carry_out(&snapshot, &planned, now).await {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(WRITE_BACKOFF) => {}
                    }
                }
                // Plan again from the state the writes made.
                continue;
            }
            let sleep = planned.next_deadline.map_or(MAX_SLEEP, |at| {
                let nanos = at.saturating_sub(now).max(0);
                Duration::from_nanos(u64::try_from(nanos).unwrap_or(0)).min(MAX_SLEEP)
            });
            debug!(draining = planned.draining, ?sleep, "node drainer waiting");
            // (`wait_tables` answers at once for index 0: wait for anything after 1.)
            let waited = tokio::select! {
                _ = stop.cancelled() => return,
                waited = self.writer.state().wait_tables(watched, seen.max(1), sleep) => waited,
            };
            match waited {
                Err(_) => return, // the store is closed: the server is shutting down
                Ok(w) if !w.timed_out && planned.draining > 0 => {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(COALESCE) => {}
                    }
                }
                Ok(_) => {}
            }
        }
    }

    /// Writes the marks (one entry, one evaluation per job), then the completions; false
    /// when something must be retried.
    async fn carry_out(&self, snapshot: &Snapshot, planned: &DrainPlan, now: i64) -> bool {
        if let Some(cmd) = core::mark_command(snapshot, &planned.marks, now, &mut self.rng.fork()) {
            if let Err(error) = self.write(cmd).await {
                warn!(%error, allocs = planned.marks.len(), "marking allocations to migrate failed; retrying");
                metrics::counter!("teamster_drainer_write_errors_total").increment(1);
                return false;
            }
            for m in &planned.marks {
                info!(
                    node_id = %m.node_id,
                    alloc_id = %m.alloc_id,
                    job_id = %m.job_id,
                    reason = m.reason.as_str(),
                    "allocation marked to migrate"
                );
                metrics::counter!("teamster_drainer_allocs_marked_total", "reason" => m.reason.as_str())
                    .increment(1);
            }
        }
        let mut ok = true;
        for completion in &planned.completions {
            let span = tracing::info_span!("drain_complete", node_id = %completion.node_id);
            let written = self
                .write(core::complete_command(completion, now))
                .instrument(span)
                .await;
            match written {
                Ok(()) => {
                    info!(
                        node_id = %completion.node_id,
                        deadline_reached = completion.deadline_reached,
                        "node drain complete"
                    );
                    let deadline = if completion.deadline_reached {
                        "true"
                    } else {
                        "false"
                    };
                    metrics::counter!("teamster_drainer_drains_completed_total", "deadline_reached" => deadline)
                        .increment(1);
                }
                Err(error) => {
                    warn!(node_id = %completion.node_id, %error, "completing the drain failed; retrying");
                    metrics::counter!("teamster_drainer_write_errors_total").increment(1);
                    ok = false;
                }
            }
        }
        ok
    }

    async fn write(&self, cmd: Command) -> Result<(), String> {
        match self.writer.write(cmd).await {
            Ok(CommandResponse::Rejected(e)) => Err(e.to_string()),
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
