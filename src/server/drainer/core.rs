//! The node drainer's decisions, without I/O: from a snapshot and the time, which
//! allocations on draining nodes to mark `DesiredTransition.Migrate` now, which drains are
//! complete, and when the next force deadline falls; and the raft commands that carry that
//! out.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rand::RngCore;
use teamster_storage::fsm::{AllocUpdateDesiredTransition, Command, NodeDrainComplete};
use teamster_storage::model::{
    AllocId, Allocation, ClientStatus, DesiredTransition, DrainStrategy, EvalTrigger, Job, JobId,
    JobType, MigrateStrategy, Namespace, Node, NodeId,
};
use teamster_storage::state::Snapshot;

use crate::server::evals::job_eval;

/// Why an allocation is marked to migrate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MarkReason {
    /// A service allocation, paced by its group's `migrate.max_parallel` and health.
    Migrate,
    /// The drain's force deadline passed: everything left goes.
    Deadline,
    /// Everything else left the node: its system allocations go last.
    System,
}

impl MarkReason {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            MarkReason::Migrate => "migrate",
            MarkReason::Deadline => "deadline",
            MarkReason::System => "system",
        }
    }
}

/// One allocation to mark `DesiredTransition.Migrate`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// The allocation.
    pub alloc_id: AllocId,
    /// The draining node it is on.
    pub node_id: NodeId,
    /// Its job's namespace.
    pub namespace: Namespace,
    /// Its job.
    pub job_id: JobId,
    /// Why now.
    pub reason: MarkReason,
}

/// A drain to end as complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The node.
    pub node_id: NodeId,
    /// It ended because its force deadline passed (Nomad's `deadline_reached` detail).
    pub deadline_reached: bool,
}

/// What [`plan`] decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainPlan {
    /// Allocations to mark now, by node, then job, then allocation.
    pub marks: Vec<Mark>,
    /// Drains that end now (written after the marks).
    pub completions: Vec<Completion>,
    /// The earliest force deadline still ahead, Unix nanoseconds.
    pub next_deadline: Option<i64>,
    /// How many nodes drain.
    pub draining: usize,
}

impl DrainPlan {
    /// True when nothing is to be written.
    pub fn is_idle(&self) -> bool {
        self.marks.is_empty() && self.completions.is_empty()
    }
}

/// Nomad's `DrainStrategy.DeadlineTime`: `None` when the drain has no deadline (`Deadline`
/// 0), else when the rest is force-stopped (a negative `Deadline` forces at once: the
/// drain's start).
pub fn force_deadline(strategy: &DrainStrategy) -> Option<i64> {
    match strategy.deadline {
        0 => None,
        d if d < 0 => Some(strategy.started_at.unix_nanos().unwrap_or(i64::MIN)),
        d => Some(strategy.force_deadline.unix_nanos().unwrap_or_else(|| {
            // A strategy written without its force deadline: its start plus the deadline.
            strategy
                .started_at
                .unix_nanos()
                .unwrap_or(0)
                .saturating_add(d)
        })),
    }
}

/// How the drain treats an allocation, by its job's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Migrated early, paced by the group's `migrate` block.
    Service,
    /// Left to finish; stopped at the deadline (batch and sysbatch).
    RunToCompletion,
    /// Stopped last, unless the drain ignores system jobs.
    System,
}

fn kind(snapshot: &Snapshot, alloc: &Allocation) -> Kind {
    let job_type = snapshot
        .job_by_id(alloc.namespace.as_str(), alloc.job_id.as_str())
        .or_else(|| snapshot.alloc_job(alloc))
        .map_or(JobType::Service, |j| j.job_type);
    match job_type {
        JobType::Service | JobType::Core => Kind::Service,
        JobType::Batch | JobType::SysBatch => Kind::RunToCompletion,
        JobType::System => Kind::System,
    }
}

/// Whether an allocation counts as healthy for pacing migrations (the group's allocations
/// anywhere in the cluster are counted):
///
/// - it is not terminal and not itself marked to migrate (it is on its way out; Nomad counts
///   it until the scheduler stops it, which lets a second pass mark more than `max_parallel`);
/// - and its client gave a health verdict (Nomad's `DeploymentStatus.HasHealth`: an
///   unhealthy replacement settles the migration as a healthy one does, and the reschedule
///   policy takes it from there); or, without a verdict, it runs and was created before the
///   earliest running drain started (teamster's clients report health for deployments and
///   for the replacements of migrated allocations, not for allocations that were running
///   before: those count as settled, a replacement never does until it is reported).
fn counts_healthy(alloc: &Allocation, drains_began: i64) -> bool {
    if alloc.terminal_status() || alloc.desired_transition.should_migrate() {
        return false;
    }
    match alloc.deployment_status.as_ref().and_then(|s| s.healthy) {
        Some(_) => true,
        None => alloc.client_status == ClientStatus::Running && alloc.create_time < drains_began,
    }
}

/// Nomad's `migrate.max_parallel` of a group (its default, 1, when it gives none).
fn max_parallel(migrate: Option<&MigrateStrategy>) -> i64 {
    migrate
        .and_then(|m| m.max_parallel)
        .or(MigrateStrategy::nomad_default().max_parallel)
        .unwrap_or(1)
}

/// What the drainer does at `now` (Unix nanoseconds), given the state.
///
/// Per draining node:
/// - past its force deadline: every allocation left (system ones too unless the drain
///   ignores them) is marked, and the drain completes;
/// - no service, batch or sysbatch allocation left that its client has not stopped (Nomad's
///   `IsDone`): the system allocations are marked (unless ignored) and the drain completes;
/// - otherwise, per service group with unmarked allocations on draining nodes, at most
///   `min(drainable, healthy − (count − migrate.max_parallel))` are marked; batch and
///   sysbatch allocations are left to finish.
pub fn plan(snapshot: &Snapshot, now: i64) -> DrainPlan {
    let mut out = DrainPlan::default();
    let draining: Vec<(&Arc<Node>, &DrainStrategy)> = snapshot
        .nodes()
        .filter_map(|n| n.drain_strategy.as_ref().map(|d| (n, d)))
        .collect();
    out.draining = draining.len();
    let drains_began = draining
        .iter()
        .map(|(_, d)| d.started_at.unix_nanos().unwrap_or(i64::MIN))
        .min()
        .unwrap_or(i64::MAX);
    // Service allocations waiting to be migrated, by group, in node order.
    let mut drainable: BTreeMap<(Namespace, JobId, String), Vec<(NodeId, AllocId)>> =
        BTreeMap::new();
    for (node, strategy) in &draining {
        let ignore_system = strategy.ignore_system_jobs;
        let deadline = force_deadline(strategy);
        let mark = |alloc: &Allocation, reason| Mark {
            alloc_id: alloc.id.clone(),
            node_id: node.id.clone(),
            namespace: alloc.namespace.clone(),
            job_id: alloc.job_id.clone(),
            reason,
        };
        // Past the deadline: everything left goes at once.
        if deadline.is_some_and(|d| d <= now) {
            for alloc in snapshot.allocs_by_node(node.id.as_str()) {
                if alloc.terminal_status()
                    || alloc.desired_transition.should_migrate()
                    || (ignore_system && kind(snapshot, alloc) == Kind::System)
                {
                    continue;
                }
                out.marks.push(mark(alloc, MarkReason::Deadline));
            }
            out.completions.push(Completion {
                node_id: node.id.clone(),
                deadline_reached: true,
            });
            continue;
        }
        if let Some(d) = deadline {
            out.next_deadline = Some(out.next_deadline.map_or(d, |n: i64| n.min(d)));
        }
        let mut done = true;
        for alloc in snapshot.allocs_by_node(node.id.as_str()) {
            let kind = kind(snapshot, alloc);
            if kind == Kind::System || alloc.client_terminal_status() {
                continue;
            }
            done = false;
            if kind == Kind::Service
                && !alloc.terminal_status()
                && !alloc.desired_transition.should_migrate()
            {
                drainable
                    .entry((
                        alloc.namespace.clone(),
                        alloc.job_id.clone(),
                        alloc.task_group.to_string(),
                    ))
                    .or_default()
                    .push((node.id.clone(), alloc.id.clone()));
            }
        }
        if done {
            if !ignore_system {
                for alloc in snapshot.allocs_by_node(node.id.as_str()) {
                    if !alloc.terminal_status()
                        && !alloc.desired_transition.should_migrate()
                        && kind(snapshot, alloc) == Kind::System
                    {
                        out.marks.push(mark(alloc, MarkReason::System));
                    }
                }
            }
            out.completions.push(Completion {
                node_id: node.id.clone(),
                deadline_reached: false,
            });
        }
    }
    for ((namespace, job_id, group), waiting) in drainable {
        let Some(job) = snapshot.job_by_id(namespace.as_str(), job_id.as_str()) else {
            continue; // purged: its deregistration stops what is left
        };
        let Some(tg) = job.task_group(&group) else {
            continue; // a removed group: the scheduler stops it
        };
        let healthy = snapshot
            .allocs_by_job(namespace.as_str(), job_id.as_str())
            .filter(|a| a.task_group == group && counts_healthy(a, drains_began))
            .count() as i64;
        let threshold = i64::from(tg.count) - max_parallel(tg.migrate.as_ref());
        let allowed = (healthy - threshold).min(waiting.len() as i64);
        for (node_id, alloc_id) in waiting.into_iter().take(allowed.max(0) as usize) {
            out.marks.push(Mark {
                alloc_id,
                node_id,
                namespace: namespace.clone(),
                job_id: job_id.clone(),
                reason: MarkReason::Migrate,
            });
        }
    }
    out.marks.sort_by(|a, b| {
        (&a.node_id, &a.namespace, &a.job_id, &a.alloc_id).cmp(&(
            &b.node_id,
            &b.namespace,
            &b.job_id,
            &b.alloc_id,
        ))
    });
    out
}

/// The raft command that marks `marks`, with one `node-drain` evaluation per job (Nomad's
/// `drainAllocs`), or `None` when there is nothing to mark.
pub fn mark_command(
    snapshot: &Snapshot,
    marks: &[Mark],
    now: i64,
    rng: &mut dyn RngCore,
) -> Option<Command> {
    if marks.is_empty() {
        return None;
    }
    let mut allocs = BTreeMap::new();
    let mut jobs: BTreeSet<(&Namespace, &JobId)> = BTreeSet::new();
    for m in marks {
        allocs.insert(
            m.alloc_id.clone(),
            DesiredTransition {
                migrate: Some(true),
                reschedule: None,
            },
        );
        jobs.insert((&m.namespace, &m.job_id));
    }
    let evals = jobs
        .into_iter()
        .filter_map(|(namespace, job_id)| {
            let job: &Job = snapshot
                .job_by_id(namespace.as_str(), job_id.as_str())
                .or_else(|| {
                    let alloc = marks
                        .iter()
                        .find(|m| &m.namespace == namespace && &m.job_id == job_id)
                        .and_then(|m| snapshot.alloc_by_id(m.alloc_id.as_str()))?;
                    snapshot.alloc_job(alloc)
                })?;
            Some(job_eval(job, EvalTrigger::NodeDrain, now, rng))
        })
        .collect();
    Some(Command::AllocUpdateDesiredTransition(
        AllocUpdateDesiredTransition { allocs, evals },
    ))
}

/// The raft command that ends `completion`'s drain.
pub fn complete_command(completion: &Completion, now: i64) -> Command {
    Command::NodeDrainComplete(NodeDrainComplete {
        node_id: completion.node_id.clone(),
        updated_at: now / 1_000_000_000,
    })
}
