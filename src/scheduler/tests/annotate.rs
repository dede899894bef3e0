//! `job plan`'s dry run against the harness: what it reports for a new job, a count change,
//! in-place and destructive updates and a job that cannot be placed — and that it writes
//! nothing.

use rand::rngs::StdRng;
use rand::SeedableRng;
use teamster_storage::model::{DesiredUpdates, DiffType, Job};

use super::harness_with_nodes;
use crate::scheduler::annotate::{annotate, dry_run, DryRun};
use crate::scheduler::harness::{mock_job, Harness};
use crate::scheduler::SchedulerSettings;

fn plan(h: &Harness, job: &Job) -> DryRun {
    let mut job = job.clone();
    job.canonicalize();
    let before = h.store().latest_index();
    let snapshot = h.snapshot();
    let out = dry_run(
        &snapshot,
        &job,
        "00000000-0000-4000-8000-00000000ffff".into(),
        h.now,
        &mut StdRng::seed_from_u64(7),
        SchedulerSettings::default(),
    )
    .unwrap();
    assert_eq!(h.store().latest_index(), before, "a plan writes nothing");
    assert!(h
        .snapshot()
        .eval_by_id("00000000-0000-4000-8000-00000000ffff")
        .is_none());
    out
}

fn updates(run: &DryRun, group: &str) -> DesiredUpdates {
    run.annotations.desired_tg_updates[group].clone()
}

/// A harness with `job` registered and its allocations placed.
fn running(count: u32) -> (Harness, Job) {
    let (mut h, _) = harness_with_nodes(4);
    let (job, eval) = h.register_job(mock_job("web", count)).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), count as usize);
    (h, (*job).clone())
}

#[test]
fn a_new_job_is_all_placements() {
    let (h, _) = harness_with_nodes(4);
    let job = mock_job("web", 3);
    let run = plan(&h, &job);
    assert_eq!(
        updates(&run, "web"),
        DesiredUpdates {
            place: 3,
            ..DesiredUpdates::default()
        }
    );
    assert!(run.failed_tg_allocs.is_empty());
    assert!(
        h.running_allocs(&job).is_empty(),
        "nothing was placed for real"
    );
}

#[test]
fn a_count_change_creates_the_difference_and_updates_the_rest_in_place() {
    let (h, job) = running(2);
    let mut bigger = job.clone();
    bigger.task_groups_mut()[0].count = 5;
    let run = plan(&h, &bigger);
    let u = updates(&run, "web");
    assert_eq!((u.place, u.in_place_update, u.stop), (3, 2, 0));
    assert!(u.creates_or_destroys());

    let mut diff = Job::diff_to(Some(&job), &bigger);
    annotate(&mut diff, &run.annotations, Some(&job), &bigger);
    let group = &diff.task_groups[0];
    assert_eq!(group.updates["create"], 3);
    assert_eq!(group.updates["in-place update"], 2);
    let count = group.fields.iter().find(|f| f.name == "Count").unwrap();
    assert_eq!(count.annotations, vec!["forces create".to_string()]);

    let mut smaller = job.clone();
    smaller.task_groups_mut()[0].count = 1;
    let u = updates(&plan(&h, &smaller), "web");
    assert_eq!((u.stop, u.place), (1, 0));
}

#[test]
fn an_unchanged_job_ignores_everything_and_creates_nothing() {
    let (h, job) = running(3);
    let run = plan(&h, &job);
    let u = updates(&run, "web");
    assert_eq!(
        u,
        DesiredUpdates {
            ignore: 3,
            ..DesiredUpdates::default()
        }
    );
    assert!(!u.creates_or_destroys());
    let diff = Job::diff_to(Some(&job), &job);
    assert_eq!(diff.diff_type, DiffType::None);
}

#[test]
fn a_task_change_is_a_destructive_update_and_a_priority_change_in_place() {
    let (h, job) = running(2);
    let mut changed = job.clone();
    changed.task_groups_mut()[0].tasks[0]
        .env
        .insert("MODE".into(), "fast".into());
    let run = plan(&h, &changed);
    let u = updates(&run, "web");
    // The default update block replaces one at a time; the other is left for later.
    assert_eq!(
        (u.destructive_update, u.place, u.stop, u.ignore),
        (1, 0, 0, 1)
    );
    let mut diff = Job::diff_to(Some(&job), &changed);
    annotate(&mut diff, &run.annotations, Some(&job), &changed);
    let task = &diff.task_groups[0].tasks[0];
    assert_eq!(
        task.annotations,
        vec!["forces create/destroy update".to_string()]
    );
    assert!(task
        .fields
        .iter()
        .any(|f| f.name == "Env[MODE]" && f.diff_type == DiffType::Added));

    // Nothing a task sees changes: the allocations move to the new version where they run.
    let mut priority = job.clone();
    priority.priority = 70;
    let run = plan(&h, &priority);
    let u = updates(&run, "web");
    assert_eq!((u.in_place_update, u.destructive_update), (2, 0));
    assert!(!u.creates_or_destroys());
}

#[test]
fn a_job_that_cannot_be_placed_reports_the_failed_group() {
    let (h, _) = harness_with_nodes(2);
    let mut job = mock_job("huge", 1);
    job.task_groups_mut()[0].tasks[0].resources.memory_mb = 1 << 30;
    let run = plan(&h, &job);
    assert!(run.failed_tg_allocs.contains_key("web"), "{run:?}");
    assert_eq!(updates(&run, "web").place, 1);
    assert_eq!(
        run.created_evals.len(),
        1,
        "the blocked eval it would create"
    );
}

#[test]
fn a_canary_update_plans_canaries_and_leaves_the_old_version_running() {
    let (h, mut job) = running(3);
    job.task_groups_mut()[0].update.as_mut().unwrap().canary = Some(1);
    let mut changed = job.clone();
    changed.task_groups_mut()[0].tasks[0]
        .env
        .insert("MODE".into(), "canary".into());
    let run = plan(&h, &changed);
    let u = updates(&run, "web");
    assert_eq!(
        (u.canary, u.destructive_update, u.place, u.stop, u.ignore),
        (1, 0, 0, 0, 3)
    );
    assert!(u.creates_or_destroys());
}
