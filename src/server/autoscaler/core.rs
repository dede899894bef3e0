//! The autoscaler's decisions, without I/O: [`AutoscalerCore`] takes what the shell
//! observed (the provider's instances, the nodes of the class, the blocked evaluations) and
//! `now`, and returns [`Action`]s; the shell reports each action's outcome back
//! ([`AutoscalerCore::created`], [`AutoscalerCore::stopped`], …).
//!
//! An instance goes through these phases:
//!
//! ```text
//!  create ─▶ Starting ──node ready──▶ Ready ──idle for idle_timeout──▶ Cordoning ─▶ Cordoned
//!               │                      │  ▲                                          │
//!               │ not ready in          │  └── busy again (no stop) ◀─────────────────┤
//!               │ register_timeout,     │                         idle for one interval
//!               │ exited, node down     │ exited, node down                          ▼
//!               └──────────────▶ Stopping (failed) ◀──┘               Stopping (idle)
//!                                       └──── destroy, deregister the node ────┘
//! ```
//!
//! Rules:
//! - **Create** one node when a blocked evaluation those nodes could help has been blocked
//!   for `blocked_for`, the last node created became ready at least `blocked_for` ago (so
//!   its capacity is used before more is asked for), no created node is still starting,
//!   and the quota (`max_nodes`, counting every instance: starting, ready, stopping) has
//!   room. Nodes missing below `min_nodes` are created without demand.
//! - An evaluation counts unless it marks a computed class of this node class ineligible
//!   (its job cannot run there); escaped evaluations (constraints on unique attributes)
//!   always count. The core remembers the computed classes its nodes had.
//! - **Idle**: a ready node with no allocation (system jobs aside) for `idle_timeout` is
//!   marked ineligible (cordoned), and stopped once it has stayed idle for one more
//!   `interval` (a plan in flight may still land on it); never below `min_nodes`.
//! - **Failed**: an instance whose node is not ready within `register_timeout`, whose
//!   instance stopped running, or whose node went down, is stopped at once and counted
//!   failed. Create errors and failed instances in a row back off creation exponentially
//!   (`backoff` doubling up to `max_backoff`); a node turning ready resets the count.
//!   Failed stops and cordons are retried with the same back-off, per instance.
//! - A `down` node of the class with one of this autoscaler's names and no instance (its
//!   stop was cut short, or the instance vanished) is purged.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use rand::RngCore;
use teamster_storage::model::{EvalId, NodeId, NodeStatus};
use tokio::time::Instant;

use super::provider::Instance;
use crate::server::config::AutoscalerConfig;

/// A node of the autoscaler's class, as the state has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    /// The node.
    pub id: NodeId,
    /// Its name: an instance's name for the nodes the autoscaler created.
    pub name: String,
    /// Its status.
    pub status: NodeStatus,
    /// Its computed class (what blocked evaluations' eligibility is keyed by).
    pub computed_class: String,
    /// Whether an allocation of a service or batch job is running or about to run on it.
    pub busy: bool,
}

/// A blocked evaluation (not of a system job), as the state has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockedView {
    /// The evaluation.
    pub id: EvalId,
    /// Computed classes the scheduler found eligible (true) or not for the job.
    pub class_eligibility: BTreeMap<String, bool>,
    /// The job's constraints escape computed classes.
    pub escaped: bool,
}

/// What the shell saw in one round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observation {
    /// The provider's instances; `None` when listing them failed this round.
    pub instances: Option<Vec<Instance>>,
    /// The nodes of the class.
    pub nodes: Vec<NodeView>,
    /// The blocked evaluations.
    pub blocked: Vec<BlockedView>,
}

/// Why an instance is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Its node ran nothing for `idle_timeout`.
    Idle,
    /// Its node was not ready within `register_timeout`.
    NeverReady,
    /// The instance stopped running.
    Exited,
    /// Its node went down.
    NodeDown,
}

impl StopReason {
    /// The reason as a metric label and log field.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Idle => "idle",
            StopReason::NeverReady => "never_ready",
            StopReason::Exited => "exited",
            StopReason::NodeDown => "node_down",
        }
    }

    /// Whether the instance is failed capacity (anything but idle).
    pub fn is_failure(self) -> bool {
        self != StopReason::Idle
    }
}

/// What the shell is to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create one instance per name (report each with [`AutoscalerCore::created`] or
    /// [`AutoscalerCore::create_failed`]).
    Create {
        /// The names of the new nodes.
        names: Vec<String>,
    },
    /// Mark the node ineligible (report with [`AutoscalerCore::cordoned`]).
    Cordon {
        /// The instance.
        instance: String,
        /// Its node.
        node: NodeId,
    },
    /// Destroy the instance, then deregister its node if it has one (report with
    /// [`AutoscalerCore::stopped`] or [`AutoscalerCore::stop_failed`]).
    Stop {
        /// The instance.
        instance: String,
        /// Its name.
        name: String,
        /// Its node, if it registered.
        node: Option<NodeId>,
        /// Why.
        reason: StopReason,
        /// False the first time (count it), true for a retry.
        retry: bool,
    },
    /// Deregister a down node left without an instance (report with
    /// [`AutoscalerCore::purge_failed`] when it fails).
    Purge {
        /// The node.
        node: NodeId,
    },
    /// An instance disappeared from the provider without being stopped (counted failed;
    /// its node goes down and is purged).
    Lost {
        /// The instance.
        instance: String,
        /// Its name.
        name: String,
    },
}

/// The counts the shell exports as gauges.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreStats {
    /// Every instance the autoscaler has (or is creating).
    pub owned: usize,
    /// Of those, created and not yet ready.
    pub starting: usize,
    /// Of those, being stopped.
    pub stopping: usize,
    /// Blocked evaluations its nodes could help.
    pub demand: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Starting,
    Ready,
    Cordoning,
    Cordoned {
        at: Instant,
    },
    /// `retry_at`: `None` while an attempt is outstanding.
    Stopping {
        reason: StopReason,
        retry_at: Option<Instant>,
    },
}

#[derive(Debug, Clone)]
struct Tracked {
    name: String,
    running: bool,
    node: Option<NodeId>,
    /// Created, adopted, or lost its node: when the register deadline started.
    since: Instant,
    phase: Phase,
    idle_since: Option<Instant>,
    /// Failed cordons and stops of this instance in a row.
    failures: u32,
    /// No cordon before this (after a failed one).
    retry_at: Option<Instant>,
}

/// The autoscaler's state machine for one node class.
#[derive(Debug)]
pub struct AutoscalerCore {
    cfg: AutoscalerConfig,
    prefix: String,
    instances: BTreeMap<String, Tracked>,
    creating: usize,
    blocked_seen: HashMap<EvalId, Instant>,
    classes: BTreeSet<String>,
    last_ready: Option<Instant>,
    failures: u32,
    create_after: Option<Instant>,
    purge_after: HashMap<NodeId, Instant>,
    demand: usize,
    /// Since when the oldest blocked evaluation the class could help has been blocked.
    demand_since: Option<Instant>,
}

impl AutoscalerCore {
    /// A core for `cfg` whose instances are named `<prefix><8 hex digits>`.
    pub fn new(cfg: AutoscalerConfig, prefix: String) -> AutoscalerCore {
        AutoscalerCore {
            cfg,
            prefix,
            instances: BTreeMap::new(),
            creating: 0,
            blocked_seen: HashMap::new(),
            classes: BTreeSet::new(),
            last_ready: None,
            failures: 0,
            create_after: None,
            purge_after: HashMap::new(),
            demand: 0,
            demand_since: None,
        }
    }

    /// The counts.
    pub fn stats(&self) -> CoreStats {
        CoreStats {
            owned: self.instances.len() + self.creating,
            starting: self.creating
                + self
                    .instances
                    .values()
                    .filter(|t| t.phase == Phase::Starting)
                    .count(),
            stopping: self
                .instances
                .values()
                .filter(|t| matches!(t.phase, Phase::Stopping { .. }))
                .count(),
            demand: self.demand,
        }
    }

    /// The pause after `n` failures in a row: `backoff × 2^(n−1)`, at most `max_backoff`.
    pub fn backoff(&self, n: u32) -> Duration {
        let doublings = n.saturating_sub(1).min(31);
        self.cfg
            .backoff
            .saturating_mul(1 << doublings)
            .min(self.cfg.max_backoff)
    }

    fn fail_once(&mut self, now: Instant) {
        self.failures = self.failures.saturating_add(1);
        self.create_after = Some(now + self.backoff(self.failures));
    }

    /// One round: take in what was observed, return what to do.
    pub fn step(&mut self, obs: &Observation, now: Instant, rng: &mut dyn RngCore) -> Vec<Action> {
        let mut actions = Vec::new();
        self.reconcile_instances(obs, now, &mut actions);
        for node in &obs.nodes {
            self.classes.insert(node.computed_class.clone());
        }
        let nodes: HashMap<&str, &NodeView> =
            obs.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        self.advance_instances(&nodes, now, &mut actions);
        self.purge_orphans(obs, now, &mut actions);
        self.track_demand(obs, now);
        self.decide_creates(now, rng, &mut actions);
        actions
    }

    fn reconcile_instances(&mut self, obs: &Observation, now: Instant, out: &mut Vec<Action>) {
        let Some(listed) = &obs.instances else {
            return;
        };
        let listed_ids: BTreeSet<&str> = listed.iter().map(|i| i.id.as_str()).collect();
        let lost: Vec<String> = self
            .instances
            .iter()
            .filter(|(id, t)| {
                !listed_ids.contains(id.as_str()) && !matches!(t.phase, Phase::Stopping { .. })
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in lost {
            if let Some(t) = self.instances.remove(&id) {
                self.fail_once(now);
                out.push(Action::Lost {
                    instance: id,
                    name: t.name,
                });
            }
        }
        for inst in listed {
            match self.instances.get_mut(&inst.id) {
                Some(t) => t.running = inst.running,
                None => {
                    // Created by an earlier leader (or by this one before a restart):
                    // adopted, with a fresh register deadline.
                    self.instances.insert(
                        inst.id.clone(),
                        Tracked {
                            name: inst.name.clone(),
                            running: inst.running,
                            node: None,
                            since: now,
                            phase: Phase::Starting,
                            idle_since: None,
                            failures: 0,
                            retry_at: None,
                        },
                    );
                }
            }
        }
    }

    fn advance_instances(
        &mut self,
        nodes: &HashMap<&str, &NodeView>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let mut active = self
            .instances
            .values()
            .filter(|t| matches!(t.phase, Phase::Starting | Phase::Ready))
            .count();
        let ids: Vec<String> = self.instances.keys().cloned().collect();
        for id in ids {
            let mut failed = None;
            let mut became_ready = false;
            {
                let Some(t) = self.instances.get_mut(&id) else {
                    continue;
                };
                let node = nodes.get(t.name.as_str()).copied();
                if let Some(n) = node {
                    t.node = Some(n.id.clone());
                }
                match t.phase {
                    Phase::Stopping { reason, retry_at } => {
                        if retry_at.is_some_and(|at| at <= now) {
                            t.phase = Phase::Stopping {
                                reason,
                                retry_at: None,
                            };
                            out.push(Action::Stop {
                                instance: id.clone(),
                                name: t.name.clone(),
                                node: t.node.clone(),
                                reason,
                                retry: true,
                            });
                        }
                        continue;
                    }
                    _ if !t.running => failed = Some(StopReason::Exited),
                    _ if node.is_some_and(|n| n.status == NodeStatus::Down) => {
                        failed = Some(StopReason::NodeDown)
                    }
                    Phase::Starting => match node {
                        Some(n) if n.status == NodeStatus::Ready => {
                            t.phase = Phase::Ready;
                            // Idle from the moment it can take work, unless it has some.
                            t.idle_since = (!n.busy).then_some(now);
                            became_ready = true;
                        }
                        _ if now.saturating_duration_since(t.since)
                            >= self.cfg.register_timeout =>
                        {
                            failed = Some(StopReason::NeverReady)
                        }
                        _ => {}
                    },
                    Phase::Ready | Phase::Cordoning | Phase::Cordoned { .. } if node.is_none() => {
                        // Deregistered behind the autoscaler's back: its client registers
                        // again, or it fails the register deadline.
                        t.phase = Phase::Starting;
                        t.since = now;
                        t.node = None;
                    }
                    Phase::Ready => {
                        let busy = node.is_some_and(|n| n.busy);
                        if busy {
                            t.idle_since = None;
                        } else {
                            let since = *t.idle_since.get_or_insert(now);
                            let may_retry = t.retry_at.is_none_or(|at| at <= now);
                            if now.saturating_duration_since(since) >= self.cfg.idle_timeout
                                && active > self.cfg.min_nodes as usize
                                && may_retry
                            {
                                if let Some(node) = &t.node {
                                    t.phase = Phase::Cordoning;
                                    active -= 1;
                                    out.push(Action::Cordon {
                                        instance: id.clone(),
                                        node: node.clone(),
                                    });
                                }
                            }
                        }
                    }
                    Phase::Cordoning => {}
                    Phase::Cordoned { at } => {
                        let busy = node.is_some_and(|n| n.busy);
                        if busy {
                            // Something landed before the cordon: it finishes first.
                            t.idle_since = None;
                        } else if now.saturating_duration_since(at) >= self.cfg.interval {
                            t.phase = Phase::Stopping {
                                reason: StopReason::Idle,
                                retry_at: None,
                            };
                            out.push(Action::Stop {
                                instance: id.clone(),
                                name: t.name.clone(),
                                node: t.node.clone(),
                                reason: StopReason::Idle,
                                retry: false,
                            });
                        }
                    }
                }
                if let Some(reason) = failed {
                    if matches!(t.phase, Phase::Starting | Phase::Ready) {
                        active -= 1;
                    }
                    t.phase = Phase::Stopping {
                        reason,
                        retry_at: None,
                    };
                    out.push(Action::Stop {
                        instance: id.clone(),
                        name: t.name.clone(),
                        node: t.node.clone(),
                        reason,
                        retry: false,
                    });
                }
            }
            if failed.is_some() {
                self.fail_once(now);
            }
            if became_ready {
                self.failures = 0;
                self.create_after = None;
                self.last_ready = Some(now);
            }
        }
    }

    fn purge_orphans(&mut self, obs: &Observation, now: Instant, out: &mut Vec<Action>) {
        let names: BTreeSet<&str> = self.instances.values().map(|t| t.name.as_str()).collect();
        let mut orphans = BTreeSet::new();
        for node in &obs.nodes {
            if node.status == NodeStatus::Down
                && node.name.starts_with(&self.prefix)
                && !names.contains(node.name.as_str())
            {
                orphans.insert(node.id.clone());
                if self.purge_after.get(&node.id).is_none_or(|at| *at <= now) {
                    // Not again before a round has passed, unless it fails sooner.
                    self.purge_after
                        .insert(node.id.clone(), now + self.cfg.interval);
                    out.push(Action::Purge {
                        node: node.id.clone(),
                    });
                }
            }
        }
        self.purge_after.retain(|id, _| orphans.contains(id));
    }

    fn track_demand(&mut self, obs: &Observation, now: Instant) {
        let present: BTreeSet<&EvalId> = obs.blocked.iter().map(|b| &b.id).collect();
        self.blocked_seen.retain(|id, _| present.contains(id));
        for b in &obs.blocked {
            self.blocked_seen.entry(b.id.clone()).or_insert(now);
        }
        let helped: Vec<&BlockedView> = obs.blocked.iter().filter(|b| self.could_help(b)).collect();
        self.demand = helped.len();
        self.demand_since = helped
            .iter()
            .filter_map(|b| self.blocked_seen.get(&b.id).copied())
            .min();
    }

    /// Whether nodes of the class could help `eval`: unless it found one of their computed
    /// classes ineligible.
    fn could_help(&self, eval: &BlockedView) -> bool {
        eval.escaped
            || !eval
                .class_eligibility
                .iter()
                .any(|(class, eligible)| !eligible && self.classes.contains(class))
    }

    fn decide_creates(&mut self, now: Instant, rng: &mut dyn RngCore, out: &mut Vec<Action>) {
        if self.create_after.is_some_and(|at| now < at) {
            return;
        }
        let total = self.instances.len() + self.creating;
        let max = self.cfg.max_nodes as usize;
        let min = self.cfg.min_nodes as usize;
        let want = if total < min {
            min - total
        } else {
            let starting = self.instances.values().any(|t| t.phase == Phase::Starting);
            let persisted = self
                .demand_since
                .is_some_and(|since| now.saturating_duration_since(since) >= self.cfg.blocked_for);
            let settled = self
                .last_ready
                .is_none_or(|at| now.saturating_duration_since(at) >= self.cfg.blocked_for);
            usize::from(persisted && settled && !starting && total < max)
        };
        if want == 0 {
            return;
        }
        self.creating += want;
        let names = (0..want)
            .map(|_| format!("{}{:08x}", self.prefix, rng.next_u32()))
            .collect();
        out.push(Action::Create { names });
    }

    /// A create succeeded: the instance starts.
    pub fn created(&mut self, instance: Instance, now: Instant) {
        self.creating = self.creating.saturating_sub(1);
        self.instances.insert(
            instance.id,
            Tracked {
                name: instance.name,
                running: instance.running,
                node: None,
                since: now,
                phase: Phase::Starting,
                idle_since: None,
                failures: 0,
                retry_at: None,
            },
        );
    }

    /// A create failed: creation backs off.
    pub fn create_failed(&mut self, now: Instant) {
        self.creating = self.creating.saturating_sub(1);
        self.fail_once(now);
    }

    /// The outcome of a [`Action::Cordon`]: on failure the node stays ready and the cordon
    /// is retried after a back-off.
    pub fn cordoned(&mut self, instance: &str, ok: bool, now: Instant) {
        let backoff = self.instances.get(instance).map(|t| t.failures + 1);
        let delay = backoff.map(|n| self.backoff(n));
        let Some(t) = self.instances.get_mut(instance) else {
            return;
        };
        if t.phase != Phase::Cordoning {
            return;
        }
        if ok {
            t.phase = Phase::Cordoned { at: now };
            t.failures = 0;
            t.retry_at = None;
        } else {
            t.phase = Phase::Ready;
            t.failures = t.failures.saturating_add(1);
            t.retry_at = delay.map(|d| now + d);
        }
    }

    /// An instance is destroyed and its node deregistered: it is forgotten.
    pub fn stopped(&mut self, instance: &str) {
        self.instances.remove(instance);
    }

    /// Destroying an instance (or deregistering its node) failed: retried after a back-off.
    pub fn stop_failed(&mut self, instance: &str, now: Instant) {
        let Some(failures) = self.instances.get(instance).map(|t| t.failures + 1) else {
            return;
        };
        let delay = self.backoff(failures);
        if let Some(t) = self.instances.get_mut(instance) {
            t.failures = failures;
            if let Phase::Stopping { reason, .. } = t.phase {
                t.phase = Phase::Stopping {
                    reason,
                    retry_at: Some(now + delay),
                };
            }
        }
    }

    /// Deregistering an orphaned node failed: retried after a back-off.
    pub fn purge_failed(&mut self, node: &NodeId, now: Instant) {
        let delay = self.backoff(2);
        self.purge_after.insert(node.clone(), now + delay);
    }
}
