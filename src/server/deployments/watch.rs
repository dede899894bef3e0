//! The deployment watcher's decisions (sans-IO): given the state and the time, what to do
//! about each running deployment (Nomad's `deploymentwatcher`):
//!
//! 1. An evaluation of the job when more of its allocations turned healthy since the last
//!    one the watcher made, so the scheduler rolls the next ones out (and, once everything
//!    is healthy, marks the deployment successful).
//! 2. A failed allocation reported unhealthy is marked `DesiredTransition.Reschedule` (with
//!    an evaluation) so the scheduler replaces it, unless the group's `progress_deadline` is
//!    0: then the deployment fails at once.
//! 3. A group that has not reached its healthy count by its `RequireProgressBy` fails the
//!    deployment ("Failed due to progress deadline"); paused deployments never fail so.
//! 4. Canaries of groups that all `auto_promote` are promoted once every one is placed and
//!    healthy.
//!
//! A failure's auto-revert is decided where the command is built (`ops::fail`). The only
//! memory is how many healthy allocations each deployment had at the last evaluation; a new
//! leader starts without it and evaluates every running deployment once, so a deployment in
//! flight when the leader changed continues.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use teamster_storage::model::deployment::{DESC_FAILED_ALLOCATIONS, DESC_PROGRESS_DEADLINE};
use teamster_storage::model::{AllocId, ClientStatus, Deployment, DeploymentId, DeploymentStatus};
use teamster_storage::state::Snapshot;

/// What the watcher should do about one deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchAction {
    /// Evaluate the deployment's job.
    Evaluate {
        /// The deployment.
        deployment: Arc<Deployment>,
    },
    /// Mark failed allocations to be replaced, with an evaluation.
    Reschedule {
        /// The deployment.
        deployment: Arc<Deployment>,
        /// The allocations.
        allocs: Vec<AllocId>,
    },
    /// Fail the deployment (reverting where a group asks to).
    Fail {
        /// The deployment.
        deployment: Arc<Deployment>,
        /// Why (Nomad's description).
        description: &'static str,
    },
    /// Promote every group's canaries.
    Promote {
        /// The deployment.
        deployment: Arc<Deployment>,
    },
}

/// The decisions of one look, and when to look again at the latest.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Decisions {
    /// What to do now.
    pub actions: Vec<WatchAction>,
    /// The earliest progress deadline still ahead (Unix nanoseconds), if any.
    pub next_deadline: Option<i64>,
}

/// What the watcher remembers between looks: the healthy allocations each running
/// deployment had when it last asked for an evaluation.
#[derive(Debug, Default, Clone)]
pub struct WatchMemory {
    evaluated_at_healthy: BTreeMap<DeploymentId, u32>,
}

impl WatchMemory {
    /// Records that the deployment's job was evaluated with `healthy` healthy allocations.
    pub fn evaluated(&mut self, id: &DeploymentId, healthy: u32) {
        self.evaluated_at_healthy.insert(id.clone(), healthy);
    }

    /// Forgets deployments that are no longer running.
    fn retain(&mut self, running: &BTreeSet<DeploymentId>) {
        self.evaluated_at_healthy
            .retain(|id, _| running.contains(id));
    }
}

/// The healthy allocations of a deployment, over its groups.
pub fn healthy_total(d: &Deployment) -> u32 {
    d.task_groups.values().map(|g| g.healthy_allocs).sum()
}

/// Decides what to do about every active deployment of `snapshot` at `now`.
pub fn decide(snapshot: &Snapshot, now: i64, memory: &mut WatchMemory) -> Decisions {
    let mut out = Decisions::default();
    let mut running = BTreeSet::new();
    for d in snapshot.deployments().filter(|d| d.active()) {
        running.insert(d.id.clone());
        decide_one(snapshot, d, now, memory, &mut out);
    }
    memory.retain(&running);
    out
}

fn decide_one(
    snapshot: &Snapshot,
    d: &Arc<Deployment>,
    now: i64,
    memory: &mut WatchMemory,
    out: &mut Decisions,
) {
    let paused = d.status == DeploymentStatus::Paused;
    // Unhealthy allocations: replace failed ones, or fail the deployment when a group
    // allows no progress deadline.
    let mut reschedule = Vec::new();
    // The store keeps these apart: a pass costs the unhealthy allocations, not every one the
    // deployment placed.
    for alloc in snapshot.unhealthy_allocs_by_deployment(&d.id) {
        // A failed allocation is unhealthy whether or not its client said so yet.
        let failed = alloc.client_status == ClientStatus::Failed && !alloc.is_healthy();
        let Some(group) = d.task_groups.get(alloc.task_group.as_str()) else {
            continue;
        };
        if group.progress_deadline == 0 {
            if !paused {
                out.actions.push(WatchAction::Fail {
                    deployment: d.clone(),
                    description: DESC_FAILED_ALLOCATIONS,
                });
            }
            return;
        }
        let replaceable = failed
            && alloc.next_allocation.is_empty()
            && !alloc.server_terminal_status()
            && !alloc.desired_transition.should_reschedule();
        if replaceable {
            reschedule.push(alloc.id.clone());
        }
    }
    if !reschedule.is_empty() && !paused {
        out.actions.push(WatchAction::Reschedule {
            deployment: d.clone(),
            allocs: reschedule,
        });
    }

    // Progress deadlines of the groups that have not got there.
    if !paused {
        let mut missed = false;
        for group in d.task_groups.values() {
            let done = if group.desired_canaries > 0 && !group.promoted {
                group.healthy_allocs >= group.desired_canaries
            } else {
                group.healthy_allocs >= group.desired_total
            };
            let Some(deadline) = group.require_progress_by.unix_nanos() else {
                continue;
            };
            if done || group.progress_deadline == 0 {
                continue;
            }
            if deadline <= now {
                missed = true;
            } else {
                out.next_deadline = Some(out.next_deadline.map_or(deadline, |n| n.min(deadline)));
            }
        }
        if missed {
            out.actions.push(WatchAction::Fail {
                deployment: d.clone(),
                description: DESC_PROGRESS_DEADLINE,
            });
            return;
        }
    }

    // Auto-promotion once every canary is placed and healthy.
    if !paused && d.requires_promotion() && d.has_auto_promote() {
        let ready = d
            .task_groups
            .values()
            .filter(|g| g.desired_canaries > 0 && !g.promoted)
            .all(|g| {
                let healthy = g
                    .placed_canaries
                    .iter()
                    .filter(|id| {
                        snapshot
                            .alloc_by_id(id)
                            .is_some_and(|a| a.is_healthy() && !a.terminal_status())
                    })
                    .count() as u32;
                healthy >= g.desired_canaries
            });
        if ready {
            out.actions.push(WatchAction::Promote {
                deployment: d.clone(),
            });
            return;
        }
    }

    // More healthy allocations than at the last evaluation (or none made yet by this
    // leader): evaluate the job so the rollout moves on.
    let healthy = healthy_total(d);
    let evaluate = match memory.evaluated_at_healthy.get(&d.id) {
        None => healthy > 0,
        Some(seen) => healthy > *seen,
    };
    if !evaluate {
        memory
            .evaluated_at_healthy
            .entry(d.id.clone())
            .or_insert(healthy);
    }
    if evaluate && !paused {
        out.actions.push(WatchAction::Evaluate {
            deployment: d.clone(),
        });
    } else if evaluate {
        memory.evaluated(&d.id, healthy);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use teamster_storage::fsm::{ApplyPlanResults, Command};
    use teamster_storage::model::{
        AllocDeploymentStatus, Allocation, DeploymentState, Job, Node, NodeId, Resources, Task,
        TaskGroup, Timestamp,
    };
    use teamster_storage::state::StateStore;

    const SEC: i64 = 1_000_000_000;
    const T0: i64 = 1_800_000_000 * SEC;

    struct World {
        store: StateStore,
        index: u64,
    }

    impl World {
        fn new() -> World {
            let store = StateStore::new();
            let node = Node {
                id: NodeId::new("n1"),
                ..Node::default()
            };
            store.apply(
                1,
                Command::NodeRegister(teamster_storage::fsm::NodeRegister {
                    node,
                    evals: Vec::new(),
                }),
            );
            let mut job = Job {
                id: "web".into(),
                task_groups: vec![TaskGroup {
                    name: "web".into(),
                    count: 2,
                    tasks: vec![Task {
                        name: "t".into(),
                        driver: "mock".into(),
                        resources: Resources {
                            cpu: 10,
                            memory_mb: 10,
                            disk_mb: 0,
                            memory_max_mb: 0,
                            cores: 0,
                        },
                        ..Task::default()
                    }],
                    ..TaskGroup::default()
                }]
                .into(),
                ..Job::default()
            };
            job.canonicalize();
            store.apply(
                2,
                Command::JobRegister(teamster_storage::fsm::JobRegister {
                    job,
                    eval: None,
                    enforce_index: None,
                    tracked_versions: 0,
                }),
            );
            World { store, index: 2 }
        }

        fn apply(&mut self, cmd: Command) {
            self.index += 1;
            let r = self.store.apply(self.index, cmd);
            assert!(r.rejection().is_none(), "{r:?}");
        }

        /// A deployment of one group wanting `total` (and `canaries`), with allocations
        /// `(id, healthy, failed, canary)`.
        fn deploy(
            &mut self,
            total: u32,
            canaries: u32,
            progress: u64,
            auto_promote: bool,
            specs: &[(&str, Option<bool>, bool, bool)],
        ) {
            let d = Deployment {
                id: "d1".into(),
                namespace: "default".into(),
                job_id: "web".into(),
                status: DeploymentStatus::Running,
                task_groups: [(
                    "web".to_owned(),
                    DeploymentState {
                        desired_total: total,
                        desired_canaries: canaries,
                        progress_deadline: progress,
                        auto_promote,
                        ..DeploymentState::default()
                    },
                )]
                .into(),
                ..Deployment::default()
            };
            let allocs: Vec<Allocation> = specs
                .iter()
                .map(|(id, _, _, canary)| Allocation {
                    id: (*id).into(),
                    namespace: "default".into(),
                    node_id: "n1".into(),
                    job_id: "web".into(),
                    task_group: "web".into(),
                    name: format!("web.web[{id}]"),
                    deployment_id: "d1".into(),
                    deployment_status: canary.then(|| {
                        Box::new(AllocDeploymentStatus {
                            canary: true,
                            ..Default::default()
                        })
                    }),
                    modify_time: T0,
                    ..Allocation::default()
                })
                .collect();
            self.apply(Command::ApplyPlanResults(ApplyPlanResults {
                eval_id: Default::default(),
                allocs_updated: allocs,
                allocs_stopped: vec![],
                allocs_preempted: vec![],
                evals: vec![],
                ineligible_nodes: vec![],
                updated_at: T0 / SEC,
                deployment: Some(d),
                deployment_updates: vec![],
            }));
            for &(id, healthy, failed, _) in specs {
                self.apply(Command::AllocClientUpdate(
                    teamster_storage::fsm::AllocClientUpdate {
                        allocs: vec![teamster_storage::fsm::AllocClientReport {
                            id: id.into(),
                            client_status: if failed {
                                ClientStatus::Failed
                            } else {
                                ClientStatus::Running
                            },
                            client_description: String::new(),
                            task_states: Default::default(),
                            modify_time: T0 + SEC,
                            seq: 0,
                            deployment_status: healthy.map(|h| AllocDeploymentStatus {
                                healthy: Some(h),
                                timestamp: Timestamp::from_unix_nanos(T0 + SEC),
                                ..Default::default()
                            }),
                        }],
                        evals: vec![],
                    },
                ));
            }
        }
    }

    fn kinds(d: &Decisions) -> Vec<&'static str> {
        d.actions
            .iter()
            .map(|a| match a {
                WatchAction::Evaluate { .. } => "evaluate",
                WatchAction::Reschedule { .. } => "reschedule",
                WatchAction::Fail { description, .. } => description,
                WatchAction::Promote { .. } => "promote",
            })
            .collect()
    }

    #[test]
    fn a_new_leader_evaluates_once_then_only_when_more_are_healthy() {
        let mut w = World::new();
        w.deploy(
            2,
            0,
            600 * SEC as u64,
            false,
            &[("a", Some(true), false, false)],
        );
        let mut memory = WatchMemory::default();
        let first = decide(&w.store.snapshot(), T0 + 2 * SEC, &mut memory);
        assert_eq!(kinds(&first), ["evaluate"]);
        assert_eq!(first.next_deadline, Some(T0 + 601 * SEC));
        memory.evaluated(&"d1".into(), 1);
        assert!(decide(&w.store.snapshot(), T0 + 3 * SEC, &mut memory)
            .actions
            .is_empty());
        // A second healthy allocation: evaluate again.
        w.deploy(
            2,
            0,
            600 * SEC as u64,
            false,
            &[("b", Some(true), false, false)],
        );
        let again = decide(&w.store.snapshot(), T0 + 4 * SEC, &mut memory);
        assert_eq!(kinds(&again), ["evaluate"]);
    }

    #[test]
    fn the_progress_deadline_fails_an_unfinished_deployment() {
        let mut w = World::new();
        w.deploy(2, 0, 10 * SEC as u64, false, &[("a", None, false, false)]);
        let mut memory = WatchMemory::default();
        memory.evaluated(&"d1".into(), 0);
        let before = decide(&w.store.snapshot(), T0 + 9 * SEC, &mut memory);
        assert!(before.actions.is_empty());
        assert_eq!(before.next_deadline, Some(T0 + 10 * SEC));
        let after = decide(&w.store.snapshot(), T0 + 10 * SEC, &mut memory);
        assert_eq!(kinds(&after), [DESC_PROGRESS_DEADLINE]);
    }

    #[test]
    fn unhealthy_failed_allocations_are_replaced_or_fail_without_a_deadline() {
        let mut w = World::new();
        w.deploy(
            2,
            0,
            60 * SEC as u64,
            false,
            &[("a", Some(false), true, false)],
        );
        let mut memory = WatchMemory::default();
        memory.evaluated(&"d1".into(), 0);
        let d = decide(&w.store.snapshot(), T0 + 2 * SEC, &mut memory);
        assert_eq!(kinds(&d), ["reschedule"]);
        let WatchAction::Reschedule { allocs, .. } = &d.actions[0] else {
            unreachable!()
        };
        assert_eq!(allocs, &[AllocId::new("a")]);

        let mut w = World::new();
        w.deploy(2, 0, 0, false, &[("a", Some(false), true, false)]);
        let d = decide(&w.store.snapshot(), T0 + 2 * SEC, &mut memory);
        assert_eq!(kinds(&d), [DESC_FAILED_ALLOCATIONS]);
    }

    #[test]
    fn healthy_canaries_are_auto_promoted() {
        let mut w = World::new();
        w.deploy(2, 1, 600 * SEC as u64, true, &[("c", None, false, true)]);
        let mut memory = WatchMemory::default();
        memory.evaluated(&"d1".into(), 0);
        assert!(decide(&w.store.snapshot(), T0 + 2 * SEC, &mut memory)
            .actions
            .is_empty());
        w.deploy(
            2,
            1,
            600 * SEC as u64,
            true,
            &[("c", Some(true), false, true)],
        );
        let d = decide(&w.store.snapshot(), T0 + 3 * SEC, &mut memory);
        assert_eq!(kinds(&d), ["promote"]);
    }
}
