//! The leader's evaluation pipeline: the eval broker and the blocked-evals tracker switched on
//! with leadership, restored from the state store, and fed by its change stream.
//!
//! ```text
//!  StateStore ──subscribe_with_snapshot──▶ restore: every pending eval ─▶ EvalBroker
//!       │                                           every blocked eval ─▶ BlockedEvals
//!       └── change stream ──▶ feeder: EvalUpserted pending  ─▶ EvalBroker::enqueue
//!                                     EvalUpserted blocked  ─▶ BlockedEvals::block
//!                                     EvalUpserted complete ─▶ BlockedEvals::untrack
//!                                     node became schedulable, alloc terminal
//!                                                           ─▶ BlockedEvals::unblock(_node)
//!                                     Lagged / Restored     ─▶ resync from a fresh snapshot
//! ```
//!
//! [`BrokerDuty`] is the [`LeaderDuty`] for it: `establish` enables both, restores from a
//! snapshot taken together with the subscription (so no change falls between them) and
//! starts the feeder (on a [`LeaderService`]); `revoke` stops the feeder and disables
//! (flushes) both, blocked evals first. The scheduler configuration's `PauseEvalBroker` keeps
//! both disabled on the leader; turning it off at run time enables them and restores from a
//! fresh snapshot. The missed-unblock check lives in the tracker: every unblock records its
//! raft index, and a blocked eval whose `SnapshotIndex` is older than a matching unblock goes
//! straight back to the broker.
//!
//! A blocked eval that is also outstanding in the broker (released, being processed by a
//! worker) is not re-tracked when the worker writes it: the worker either reblocks it with its
//! token (`Eval.Reblock`) or completes it.
//!
//! May import: the bottom of `server` (`config`, `leader`, `leader_service`), `util`, and the
//! two subsystems it switches (`broker`, `blocked`); never `reapers`, `endpoints` or
//! `worker`.

use std::sync::Arc;

use futures::future::BoxFuture;
use teamster_storage::model::{EvalStatus, Evaluation};
use teamster_storage::state::{
    Snapshot, StateChange, StateEvent, StateStore, Subscription, SubscriptionError,
};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use crate::server::blocked::{BlockedEvals, BlockedEvalsConfig};
use crate::server::broker::{BrokerError, EvalBroker};
use crate::server::config::EvalBrokerConfig;
use crate::server::leader::LeaderDuty;
use crate::server::leader_service::LeaderService;
use crate::util::{RngSource, SharedClock};

/// The broker and the tracker of one server (disabled on followers).
#[derive(Debug, Clone)]
pub struct EvalPipeline {
    broker: EvalBroker,
    blocked: BlockedEvals,
}

impl EvalPipeline {
    /// A disabled broker and tracker with the given settings.
    pub fn new(
        broker: EvalBrokerConfig,
        blocked: BlockedEvalsConfig,
        rng: &RngSource,
        clock: SharedClock,
    ) -> Result<EvalPipeline, BrokerError> {
        let broker = EvalBroker::new(broker, rng.fork(), clock)?;
        let blocked = BlockedEvals::new(broker.clone(), blocked)?;
        Ok(EvalPipeline { broker, blocked })
    }

    /// The eval broker.
    pub fn broker(&self) -> &EvalBroker {
        &self.broker
    }

    /// The blocked-evals tracker.
    pub fn blocked(&self) -> &BlockedEvals {
        &self.blocked
    }

    /// Enables or disables (flushing) the broker and the tracker together; blocked evals
    /// are switched off first and on last, since they release into the broker.
    fn set_enabled(&self, enabled: bool) {
        if enabled {
            self.broker.set_enabled(true);
            self.blocked.set_enabled(true);
        } else {
            self.blocked.set_enabled(false);
            self.broker.set_enabled(false);
        }
    }

    /// Hands one eval to the broker or the tracker according to its status. Returns what
    /// happened, for counting.
    fn route(&self, eval: &Evaluation) -> Routed {
        match eval.status {
            EvalStatus::Pending => match self.broker.enqueue(eval.clone()) {
                Ok(_) => Routed::Enqueued,
                Err(e) => {
                    debug!(eval_id = %eval.id, error = %e, "eval not enqueued");
                    Routed::Skipped
                }
            },
            EvalStatus::Blocked => {
                // Being processed right now (released from blocked): the worker reblocks or
                // completes it; tracking it again would make a second copy.
                if matches!(self.broker.outstanding(&eval.id), Ok(Some(_))) {
                    return Routed::Skipped;
                }
                match self.blocked.block(eval.clone()) {
                    Ok(_) => Routed::Blocked,
                    Err(e) => {
                        debug!(eval_id = %eval.id, error = %e, "eval not blocked");
                        Routed::Skipped
                    }
                }
            }
            EvalStatus::Complete if eval.failed_tg_allocs.is_empty() => {
                let _ = self.blocked.untrack(&eval.namespace, &eval.job_id);
                Routed::Skipped
            }
            _ => Routed::Skipped,
        }
    }

    /// Routes every pending and blocked eval of `snapshot`, higher priority first so woken
    /// dequeuers see the most urgent work. Returns (enqueued, blocked).
    fn restore(&self, snapshot: &Snapshot) -> (usize, usize) {
        let mut evals: Vec<&Arc<Evaluation>> = snapshot
            .evals()
            .filter(|e| matches!(e.status, EvalStatus::Pending | EvalStatus::Blocked))
            .collect();
        evals.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then(a.create_index.cmp(&b.create_index))
        });
        let (mut enqueued, mut blocked) = (0, 0);
        for eval in evals {
            match self.route(eval) {
                Routed::Enqueued => enqueued += 1,
                Routed::Blocked => blocked += 1,
                Routed::Skipped => {}
            }
        }
        (enqueued, blocked)
    }

    /// Applies one change from the stream.
    fn on_change(&self, index: u64, change: &StateChange) {
        if change.node_became_schedulable() {
            if let StateChange::NodeUpserted { node, .. } = change {
                let class = node.computed_class.clone();
                let released = self.blocked.unblock(&class, index).unwrap_or(0)
                    + self.blocked.unblock_node(&node.id, index).unwrap_or(0);
                if released > 0 {
                    info!(node_id = %node.id, class = %class, released, "node became schedulable; unblocked evals");
                }
            }
            return;
        }
        match change {
            StateChange::EvalUpserted { eval } => {
                self.route(eval);
            }
            StateChange::AllocTerminal {
                node_id,
                node_class,
                ..
            } => {
                let mut released = 0;
                if let Some(class) = node_class {
                    released += self.blocked.unblock(class.as_ref(), index).unwrap_or(0);
                }
                released += self.blocked.unblock_node(node_id, index).unwrap_or(0);
                if released > 0 {
                    debug!(node_id = %node_id, released, "allocation finished; unblocked evals");
                }
            }
            _ => {}
        }
    }
}

enum Routed {
    Enqueued,
    Blocked,
    Skipped,
}

/// The leader duty that switches the [`EvalPipeline`] on and off.
pub struct BrokerDuty {
    pipeline: EvalPipeline,
    state: StateStore,
    /// The feeder task, running while this server leads.
    feeder: LeaderService,
}

impl BrokerDuty {
    /// A duty over `pipeline`, fed by `state`.
    pub fn new(pipeline: EvalPipeline, state: StateStore) -> BrokerDuty {
        BrokerDuty {
            pipeline,
            state,
            feeder: LeaderService::new(),
        }
    }
}

impl LeaderDuty for BrokerDuty {
    fn name(&self) -> &'static str {
        "eval broker"
    }

    fn establish(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            self.feeder.stop().await;
            let (snapshot, subscription) = self.state.subscribe_with_snapshot();
            if snapshot.scheduler_config().pause_eval_broker {
                info!("the eval broker is paused by the scheduler configuration");
            } else {
                self.pipeline.set_enabled(true);
                let (enqueued, blocked) = self.pipeline.restore(&snapshot);
                info!(
                    enqueued,
                    blocked,
                    index = snapshot.latest_index(),
                    "restored evaluations"
                );
            }
            let (pipeline, state) = (self.pipeline.clone(), self.state.clone());
            let floor = snapshot.latest_index();
            self.feeder.start(|set| {
                set.spawn(|stop| {
                    feed(pipeline, state, subscription, floor, stop)
                        .instrument(tracing::info_span!("eval_feeder"))
                })
            });
            Ok(())
        })
    }

    fn revoke(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.feeder.stop().await;
            self.pipeline.set_enabled(false);
        })
    }
}

/// Routes the change stream into the pipeline until cancelled; resyncs from a fresh snapshot
/// when the subscription lagged or the state was restored from a raft snapshot.
async fn feed(
    pipeline: EvalPipeline,
    state: StateStore,
    mut subscription: Subscription,
    mut floor: u64,
    cancel: CancellationToken,
) {
    loop {
        let event: Result<StateEvent, SubscriptionError> = tokio::select! {
            _ = cancel.cancelled() => return,
            e = subscription.recv() => e,
        };
        match event {
            Ok(StateEvent {
                change: StateChange::Restored,
                ..
            })
            | Err(SubscriptionError::Lagged { .. }) => {
                warn!("change stream lagged or state restored; resyncing evaluations");
                let (snapshot, fresh) = state.subscribe_with_snapshot();
                subscription = fresh;
                floor = snapshot.latest_index();
                pipeline.restore(&snapshot);
            }
            Ok(event) => {
                if event.index <= floor && floor != 0 {
                    continue;
                }
                if let StateChange::SchedulerConfigUpdated { config } = &event.change {
                    let enabled = pipeline.broker.enabled();
                    if config.pause_eval_broker && enabled {
                        info!("the scheduler configuration pauses the eval broker");
                        pipeline.set_enabled(false);
                    } else if !config.pause_eval_broker && !enabled {
                        info!("the scheduler configuration resumes the eval broker");
                        pipeline.set_enabled(true);
                        let (snapshot, fresh) = state.subscribe_with_snapshot();
                        subscription = fresh;
                        floor = snapshot.latest_index();
                        pipeline.restore(&snapshot);
                    }
                    continue;
                }
                pipeline.on_change(event.index, &event.change);
            }
            Err(SubscriptionError::Closed) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use teamster_storage::fsm::{Command, EvalUpsert};
    use teamster_storage::model::{EvalId, JobId, JobType};

    use super::*;
    use std::time::Duration;

    fn eval(id: &str, job: &str, status: EvalStatus) -> Evaluation {
        Evaluation {
            id: EvalId::new(id),
            job_id: JobId::new(job),
            namespace: "default".into(),
            priority: 50,
            eval_type: JobType::Service,
            status,
            ..Evaluation::default()
        }
    }

    fn upsert(state: &StateStore, index: u64, evals: Vec<Evaluation>) {
        state.apply(index, Command::EvalUpsert(EvalUpsert { evals }));
    }

    fn pipeline() -> EvalPipeline {
        EvalPipeline::new(
            EvalBrokerConfig::for_tests(),
            BlockedEvalsConfig::for_tests(),
            &RngSource::seeded(1),
            crate::util::system_clock(),
        )
        .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn establish_restores_pending_and_blocked_evals_and_feeds_new_ones() {
        let state = StateStore::new();
        upsert(
            &state,
            1,
            vec![
                eval("e1", "a", EvalStatus::Pending),
                eval("e2", "b", EvalStatus::Blocked),
                eval("e3", "c", EvalStatus::Complete),
            ],
        );
        let p = pipeline();
        let duty = BrokerDuty::new(p.clone(), state.clone());
        assert!(!p.broker().enabled());
        duty.establish().await.unwrap();
        assert_eq!(p.broker().stats().total_ready, 1);
        assert_eq!(p.blocked().stats().total_blocked, 1);

        upsert(&state, 2, vec![eval("e4", "d", EvalStatus::Pending)]);
        crate_wait(|| p.broker().stats().total_ready == 2).await;

        duty.revoke().await;
        assert!(!p.broker().enabled());
        assert!(!p.blocked().enabled());
        assert_eq!(p.broker().stats().total_ready, 0);

        // Re-establishing restores again, each eval exactly once.
        duty.establish().await.unwrap();
        assert_eq!(p.broker().stats().total_ready, 2);
        assert_eq!(p.blocked().stats().total_blocked, 1);
        duty.revoke().await;
    }

    async fn crate_wait(mut cond: impl FnMut() -> bool) {
        for _ in 0..200 {
            if cond() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("condition not reached");
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_becoming_ready_releases_blocked_evals_and_missed_unblocks_are_caught() {
        use std::sync::Arc as StdArc;

        use teamster_storage::model::{Node, NodeStatus};

        let state = StateStore::new();
        let p = pipeline();
        let duty = BrokerDuty::new(p.clone(), state.clone());
        duty.establish().await.unwrap();

        let mut blocked = eval("b1", "j1", EvalStatus::Blocked);
        blocked.snapshot_index = 1;
        blocked.create_index = 1;
        p.on_change(
            2,
            &StateChange::EvalUpserted {
                eval: StdArc::new(blocked.clone()),
            },
        );
        assert_eq!(p.blocked().stats().total_blocked, 1);
        assert_eq!(p.broker().stats().total_ready, 0);

        // A node turning ready (it was initializing) releases it.
        let node = Node {
            status: NodeStatus::Ready,
            computed_class: "v1:c".into(),
            ..Node::default()
        };
        let previous = Some(teamster_storage::state::NodeCondition {
            status: NodeStatus::Initializing,
            ..teamster_storage::state::NodeCondition::of(&node)
        });
        p.on_change(
            3,
            &StateChange::NodeUpserted {
                node: StdArc::new(node),
                previous,
            },
        );
        assert_eq!(p.blocked().stats().total_blocked, 0);
        assert_eq!(p.broker().stats().total_ready, 1);

        // An eval blocked on a snapshot older than that unblock goes straight to the broker.
        let mut late = eval("b2", "j2", EvalStatus::Blocked);
        late.snapshot_index = 2;
        late.create_index = 4;
        p.on_change(
            4,
            &StateChange::EvalUpserted {
                eval: StdArc::new(late),
            },
        );
        assert_eq!(p.blocked().stats().total_blocked, 0);
        crate_wait(|| p.broker().stats().total_ready == 2).await;

        // A blocked eval that is being processed (outstanding) is not tracked twice.
        let (delivered, _token) = p
            .broker()
            .dequeue(&["service"], Duration::ZERO)
            .await
            .unwrap()
            .unwrap();
        p.on_change(
            5,
            &StateChange::EvalUpserted {
                eval: StdArc::new(delivered),
            },
        );
        assert_eq!(p.blocked().stats().total_blocked, 0);
        duty.revoke().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_ready_node_whose_class_changes_releases_blocked_evals() {
        use std::sync::Arc as StdArc;

        use teamster_storage::model::{Node, NodeStatus};
        use teamster_storage::state::NodeCondition;

        let state = StateStore::new();
        let p = pipeline();
        let duty = BrokerDuty::new(p.clone(), state.clone());
        duty.establish().await.unwrap();
        let mut blocked = eval("b1", "j1", EvalStatus::Blocked);
        blocked.snapshot_index = 10;
        blocked.create_index = 10;
        p.on_change(
            11,
            &StateChange::EvalUpserted {
                eval: StdArc::new(blocked),
            },
        );
        assert_eq!(p.blocked().stats().total_blocked, 1);
        let node = |class: &str| Node {
            status: NodeStatus::Ready,
            computed_class: class.into(),
            ..Node::default()
        };
        // Re-registered ready with the same attributes: nothing new to try.
        let before = NodeCondition::of(&node("v1:old"));
        p.on_change(
            12,
            &StateChange::NodeUpserted {
                node: StdArc::new(node("v1:old")),
                previous: Some(before),
            },
        );
        assert_eq!(p.blocked().stats().total_blocked, 1);
        // New metadata (a cache key arrived): its class changed, so the eval is tried again.
        p.on_change(
            13,
            &StateChange::NodeUpserted {
                node: StdArc::new(node("v1:new")),
                previous: Some(before),
            },
        );
        assert_eq!(p.blocked().stats().total_blocked, 0);
        assert_eq!(p.broker().stats().total_ready, 1);
        duty.revoke().await;
    }
}
