//! The periodic dispatcher's shell: one task, started while leadership is established, that
//! plans from the state, writes what is due through raft, and sleeps until the next launch
//! or a change of the jobs or launches.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use teamster_storage::fsm::{
    ApplyError, Command, CommandResponse, JobRegister, PeriodicLaunchCommand,
};
use teamster_storage::model::EvalTrigger;
use teamster_storage::state::{StateStore, Table};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use super::core::{self, Action};
use crate::server::evals::job_eval;
use crate::server::leader::LeaderDuty;
use crate::server::leader_service::LeaderService;
use crate::server::raft::RaftNode;
use crate::util::{RngSource, SharedClock};

const NANOS_PER_SEC: i64 = 1_000_000_000;
/// The longest sleep between two looks at the wall clock (it may be stepped).
const MAX_SLEEP: Duration = Duration::from_secs(60);
/// Pause after a failed raft write before the dispatcher tries again.
const WRITE_BACKOFF: Duration = Duration::from_secs(1);
/// The tables whose changes can move a launch.
const WATCHED: [Table; 2] = [Table::Jobs, Table::PeriodicLaunches];

/// Where the dispatcher writes its launches: the raft node on a server; tests apply to a
/// state store directly.
pub trait LaunchWriter: Send + Sync + 'static {
    /// Commit `cmd`; the state's answer, or why it could not be written.
    fn write(&self, cmd: Command) -> BoxFuture<'_, Result<CommandResponse, String>>;
    /// The state the launches are planned from.
    fn state(&self) -> &StateStore;
}

impl LaunchWriter for RaftNode {
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

/// The periodic dispatcher as a leader duty.
pub struct PeriodicDuty {
    writer: Arc<dyn LaunchWriter>,
    clock: SharedClock,
    rng: RngSource,
    tasks: LeaderService,
}

impl PeriodicDuty {
    /// A dispatcher writing through `writer`.
    pub fn new(writer: Arc<dyn LaunchWriter>, clock: SharedClock, rng: RngSource) -> PeriodicDuty {
        PeriodicDuty {
            writer,
            clock,
            rng,
            tasks: LeaderService::new(),
        }
    }
}

impl LeaderDuty for PeriodicDuty {
    fn name(&self) -> &'static str {
        "periodic dispatcher"
    }

    fn establish(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let dispatcher = Dispatcher {
                writer: self.writer.clone(),
                clock: self.clock.clone(),
                rng: self.rng.clone(),
            };
            self.tasks
                .restart(|set| {
                    set.spawn(|stop| {
                        dispatcher
                            .run(stop)
                            .instrument(tracing::info_span!("periodic_dispatch"))
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

struct Dispatcher {
    writer: Arc<dyn LaunchWriter>,
    clock: SharedClock,
    rng: RngSource,
}

impl Dispatcher {
    async fn run(self, stop: CancellationToken) {
        loop {
            let snapshot = self.writer.state().snapshot();
            let seen = snapshot.max_index(&WATCHED);
            let now = self.clock.now_unix_nanos();
            let planned = core::plan(&core::parents(&snapshot), now);
            let mut failed = false;
            for action in &planned.actions {
                if stop.is_cancelled() {
                    return;
                }
                failed |= !self.launch(&snapshot, action, now).await;
            }
            if failed {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(WRITE_BACKOFF) => {}
                }
                continue;
            }
            if !planned.actions.is_empty() {
                // Plan again from the state the launches made.
                continue;
            }
            let sleep = planned.next.map_or(MAX_SLEEP, |next| {
                let nanos = next
                    .saturating_mul(NANOS_PER_SEC)
                    .saturating_sub(now)
                    .max(0);
                Duration::from_nanos(u64::try_from(nanos).unwrap_or(0)).min(MAX_SLEEP)
            });
            debug!(next = ?planned.next, ?sleep, "periodic dispatcher waiting");
            // (`wait_tables` answers at once for index 0: wait for anything after 1.)
            tokio::select! {
                _ = stop.cancelled() => return,
                waited = self.writer.state().wait_tables(&WATCHED, seen.max(1), sleep) => {
                    if waited.is_err() {
                        return; // the store is closed: the server is shutting down
                    }
                }
            }
        }
    }

    /// Writes one launch; false when it must be retried.
    async fn launch(
        &self,
        snapshot: &teamster_storage::state::Snapshot,
        action: &Action,
        now: i64,
    ) -> bool {
        let (namespace, job_id, launch_secs, launch) = match action {
            Action::Launch {
                namespace,
                job_id,
                launch_secs,
            } => (namespace, job_id, *launch_secs, true),
            Action::Skip {
                namespace,
                job_id,
                launch_secs,
            } => (namespace, job_id, *launch_secs, false),
        };
        let Some(parent) = snapshot.job_by_id(namespace.as_str(), job_id.as_str()) else {
            return true;
        };
        let child_id =
            teamster_storage::model::periodic::periodic_child_id(job_id.as_str(), launch_secs);
        // A forced launch in the same second already made this child: only record the time.
        let launch = launch && snapshot.job_by_id(namespace.as_str(), &child_id).is_none();
        let child = launch.then(|| {
            let child = core::periodic_child(parent, launch_secs, now);
            let eval = job_eval(&child, EvalTrigger::PeriodicJob, now, &mut self.rng.fork());
            JobRegister {
                job: child,
                eval: Some(eval),
                enforce_index: None,
                tracked_versions: 0,
            }
        });
        let cmd = Command::PeriodicLaunch(PeriodicLaunchCommand {
            namespace: namespace.clone(),
            job_id: job_id.clone(),
            launch: launch_secs.saturating_mul(NANOS_PER_SEC),
            forced: false,
            child,
        });
        let result = match self.writer.write(cmd).await {
            Ok(CommandResponse::Rejected(ApplyError::PeriodicLaunchRecorded { .. })) => {
                // Another leader (or an earlier try whose answer was lost) launched it.
                debug!(%job_id, launch_secs, "periodic launch already recorded");
                return true;
            }
            Ok(CommandResponse::Rejected(e)) => e.to_string(),
            Ok(_) => {
                let result = if launch { "launched" } else { "skipped" };
                metrics::counter!("teamster_periodic_launches_total", "result" => result)
                    .increment(1);
                info!(%job_id, launch_secs, result, "periodic launch");
                return true;
            }
            Err(e) => e,
        };
        warn!(%job_id, launch_secs, error = %result, "periodic launch failed; retrying");
        metrics::counter!("teamster_periodic_write_errors_total").increment(1);
        false
    }
}
