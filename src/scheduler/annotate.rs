//! `job plan`: the real scheduler run on a private copy of the state with a planner that
//! commits nothing, and what it would do, counted per task group and written onto the job
//! diff (Nomad's `Job.Plan` with `AnnotatePlan`).
//!
//! ```text
//!  snapshot ── with_applied(JobRegister job + eval) ──▶ what-if snapshot (never published)
//!     new_scheduler(type, what-if, DryRun, env).process(eval)
//!        DryRun::submit_plan: record, answer "all committed" (no refresh, no retry)
//!        DryRun::update_eval / create_eval / reblock_eval: record
//!     plans ──▶ DesiredUpdates per group ──▶ JobDiff group `Updates`, task annotations
//! ```
//!
//! The counts are read off the plans the scheduler submitted: an allocation that already
//! exists is an in-place update; a new one replacing an allocation stopped "for update" is a
//! destructive update, "for migration" a migration; other new ones (and the ones it could
//! not place, from the evaluation's queued counts) are placements; stops without a
//! replacement are stops; live allocations not touched are ignored.

use std::collections::{BTreeMap, BTreeSet};

use teamster_storage::fsm::{Command, JobRegister};
use teamster_storage::model::{
    AllocMetric, Allocation, ClientStatus, DesiredUpdates, DiffType, EvalStatus, EvalTrigger,
    Evaluation, Job, JobDiff, Plan, PlanAnnotations, PlanResult,
};
use teamster_storage::state::Snapshot;

use crate::scheduler::reconcile::{ALLOC_MIGRATING, ALLOC_RESCHEDULED, ALLOC_UPDATING};
use crate::scheduler::util::tasks_updated;
use crate::scheduler::{new_scheduler, Planner, SchedulerEnv, SchedulerError, SchedulerSettings};

/// What a registration of the job would do.
#[derive(Debug, Clone, Default)]
pub struct DryRun {
    /// Counts per task group.
    pub annotations: PlanAnnotations,
    /// The groups that could not be placed, with why.
    pub failed_tg_allocs: BTreeMap<String, AllocMetric>,
    /// The evaluations the scheduler would create (blocked, follow-ups).
    pub created_evals: Vec<Evaluation>,
    /// The state index planned against.
    pub index: u64,
}

/// A planner that records and commits nothing.
#[derive(Default)]
struct Recorder {
    plans: Vec<Plan>,
    updated: Option<Evaluation>,
    created: Vec<Evaluation>,
}

impl Planner for Recorder {
    fn submit_plan(
        &mut self,
        plan: Plan,
    ) -> Result<(PlanResult, Option<Snapshot>), SchedulerError> {
        let result = PlanResult::all_committed(&plan);
        self.plans.push(plan);
        Ok((result, None))
    }

    fn update_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        self.updated = Some(eval);
        Ok(())
    }

    fn create_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        self.created.push(eval);
        Ok(())
    }

    fn reblock_eval(&mut self, _eval: Evaluation) -> Result<(), SchedulerError> {
        Ok(())
    }
}

/// Schedules `job` (canonicalized and valid) on a private copy of `snapshot` as if it were
/// registered now, and reports what would happen. Nothing is written anywhere.
pub fn dry_run(
    snapshot: &Snapshot,
    job: &Job,
    eval_id: String,
    now: i64,
    rng: &mut dyn rand::RngCore,
    settings: SchedulerSettings,
) -> Result<DryRun, SchedulerError> {
    let eval = Evaluation {
        id: eval_id.into(),
        namespace: job.namespace.clone(),
        priority: job.priority,
        eval_type: job.job_type,
        triggered_by: EvalTrigger::JobRegister,
        job_id: job.id.clone(),
        status: EvalStatus::Pending,
        create_time: now,
        modify_time: now,
        ..Evaluation::default()
    };
    let (what_if, response) = snapshot.with_applied(Command::JobRegister(JobRegister {
        job: job.clone(),
        eval: Some(eval.clone()),
        enforce_index: None,
        tracked_versions: 0,
    }));
    if let Some(error) = response.rejection() {
        return Err(SchedulerError::Planner {
            operation: "stage the job",
            reason: error.to_string(),
        });
    }
    let eval = what_if
        .eval_by_id(&eval.id)
        .map(|e| (**e).clone())
        .unwrap_or(eval);
    let mut recorder = Recorder::default();
    {
        let env = SchedulerEnv {
            now,
            rng,
            settings,
            ready_nodes: None,
        };
        new_scheduler(job.job_type, what_if.clone(), &mut recorder, env)?.process(&eval)?;
    }
    let final_eval = recorder.updated.clone().unwrap_or(eval);
    Ok(DryRun {
        annotations: PlanAnnotations {
            desired_tg_updates: desired_updates(&what_if, job, &recorder.plans, &final_eval),
            preempted_allocs: preempted(&what_if, &recorder.plans),
        },
        failed_tg_allocs: final_eval.failed_tg_allocs.clone(),
        created_evals: recorder.created,
        index: snapshot.latest_index(),
    })
}

/// The allocations the plans would evict, as they would read after the eviction.
fn preempted(state: &Snapshot, plans: &[Plan]) -> Vec<Allocation> {
    plans
        .iter()
        .flat_map(|p| p.node_preemptions.values().flatten())
        .filter_map(|evict| {
            let mut alloc = (**state.alloc_by_id(&evict.id)?).clone();
            alloc.desired_status = evict.desired_status;
            alloc.desired_description = evict.desired_description.clone().into();
            alloc.preempted_by_allocation = evict.preempted_by_allocation.clone();
            Some(alloc)
        })
        .collect()
}

/// Counts what the plans do per task group of `job`.
fn desired_updates(
    state: &Snapshot,
    job: &Job,
    plans: &[Plan],
    eval: &Evaluation,
) -> BTreeMap<String, DesiredUpdates> {
    let mut out: BTreeMap<String, DesiredUpdates> = job
        .task_groups
        .iter()
        .map(|g| (g.name.clone(), DesiredUpdates::default()))
        .collect();
    let mut stops: BTreeMap<String, &str> = BTreeMap::new();
    for stop in plans.iter().flat_map(|p| p.node_update.values().flatten()) {
        stops.insert(stop.id.to_string(), stop.desired_description.as_str());
    }
    let mut touched: BTreeSet<String> = BTreeSet::new();
    for alloc in plans
        .iter()
        .flat_map(|p| p.node_allocation.values().flatten())
    {
        let group = out.entry(alloc.task_group.to_string()).or_default();
        group.preemptions += alloc.preempted_allocations.len() as u64;
        if let Some(existing) = state.alloc_by_id(&alloc.id) {
            // A live one moves to the new version; a failed one only gets its follow-up
            // evaluation recorded.
            if !existing.terminal_status() {
                if alloc.client_status == ClientStatus::Unknown
                    && existing.client_status != ClientStatus::Unknown
                {
                    group.disconnect += 1;
                } else if existing.unknown_since().is_some() && alloc.unknown_since().is_none() {
                    group.reconnect += 1;
                } else {
                    group.in_place_update += 1;
                }
                touched.insert(alloc.id.to_string());
            }
            continue;
        }
        let previous = alloc.previous_allocation.to_string();
        match stops.remove(&previous) {
            Some(why) if why == ALLOC_UPDATING => group.destructive_update += 1,
            Some(why) if why == ALLOC_MIGRATING => group.migrate += 1,
            Some(why) if why == ALLOC_RESCHEDULED => {
                group.place += 1;
                group.reschedule_now += 1;
            }
            _ if alloc.is_canary() => group.canary += 1,
            _ => group.place += 1,
        }
        if !previous.is_empty() {
            touched.insert(previous);
        }
    }
    // Stops without a replacement.
    for id in stops.keys() {
        touched.insert(id.clone());
        if let Some(alloc) = state.alloc_by_id(id) {
            out.entry(alloc.task_group.to_string()).or_default().stop += 1;
        }
    }
    // What could not be placed is still a placement the scheduler wants.
    for (group, queued) in &eval.queued_allocations {
        out.entry(group.clone()).or_default().place += queued;
    }
    for alloc in state.allocs_by_job(&job.namespace, &job.id) {
        if !alloc.terminal_status() && !touched.contains(alloc.id.as_ref()) {
            out.entry(alloc.task_group.to_string()).or_default().ignore += 1;
        }
    }
    out
}

/// Writes the plan's counts and what each change forces onto `diff` (Nomad's
/// `annotate.go`): a group's `Updates`, `forces create`/`forces destroy` on a changed
/// `Count`, and on the tasks of a changed group `forces create/destroy update` or
/// `forces in-place update`, as the scheduler itself decides between them.
pub fn annotate(diff: &mut JobDiff, annotations: &PlanAnnotations, old: Option<&Job>, new: &Job) {
    for group in &mut diff.task_groups {
        if let Some(u) = annotations.desired_tg_updates.get(&group.name) {
            for (key, n) in [
                ("ignore", u.ignore),
                ("create", u.place),
                ("migrate", u.migrate),
                ("destroy", u.stop),
                ("canary", u.canary),
                ("in-place update", u.in_place_update),
                ("create/destroy update", u.destructive_update),
            ] {
                if n > 0 {
                    group.updates.insert(key.to_owned(), n);
                }
            }
        }
        for field in &mut group.fields {
            if field.name != "Count" || field.diff_type != DiffType::Edited {
                continue;
            }
            let (o, n) = (
                field.old.parse::<u64>().unwrap_or(0),
                field.new.parse::<u64>().unwrap_or(0),
            );
            if n > o {
                field.annotations.push("forces create".to_owned());
            } else if n < o {
                field.annotations.push("forces destroy".to_owned());
            }
        }
        let note = match group.diff_type {
            DiffType::Added => "forces create",
            DiffType::Deleted => "forces destroy",
            DiffType::None => continue,
            DiffType::Edited => match old {
                Some(old) if !tasks_updated(old, new, &group.name) => "forces in-place update",
                _ => "forces create/destroy update",
            },
        };
        for task in &mut group.tasks {
            if task.diff_type != DiffType::None {
                task.annotations.push(note.to_owned());
            }
        }
    }
}
