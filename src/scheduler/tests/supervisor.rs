//! The supervisor cap against the harness: supervisors together stay under
//! `SupervisorFraction` of the cluster, the rest blocks with the reason, ordinary jobs are
//! not limited, freed capacity lets a blocked supervisor in, and bad marks or fractions are
//! refused.

use teamster_storage::fsm::{Command, SchedulerConfigUpdate};
use teamster_storage::model::{
    ClientStatus, EvalStatus, Job, SchedulerConfiguration, SUPERVISOR_META,
};

use super::*;
use crate::scheduler::harness::mock_system_job;

/// A supervisor job `id` of `count` allocations of 500 MHz and 256 MB.
fn supervisor(id: &str, count: u32) -> Job {
    let mut job = mock_job(id, count);
    job.meta.insert(SUPERVISOR_META.into(), "true".into());
    job.canonicalize();
    job
}

fn set_fraction(h: &mut Harness, fraction: f64) -> Result<(), String> {
    h.apply(Command::SchedulerConfig(SchedulerConfigUpdate {
        config: SchedulerConfiguration {
            supervisor_fraction: fraction,
            ..SchedulerConfiguration::default()
        },
        cas_index: None,
    }))
    .map_err(|e| e.to_string())
    .and_then(|r| match r.rejection() {
        Some(e) => Err(e.to_string()),
        None => Ok(()),
    })
}

/// The supervisor-fraction reason the last evaluation recorded for `web`, if any.
fn cap_reason(h: &Harness) -> Option<String> {
    last_update(h)
        .failed_tg_allocs
        .get("web")?
        .dimension_exhausted
        .keys()
        .find(|k| k.starts_with("supervisor fraction"))
        .cloned()
}

#[test]
fn supervisors_stay_under_the_fraction_and_block_with_the_reason() {
    // Two nodes of 4000 MHz: 8000 MHz, 30 % is 2400 MHz, four 500 MHz allocations.
    let (mut h, _) = harness_with_nodes(2);
    let (first, eval) = h.register_job(supervisor("runner", 6)).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&first).len(), 4);
    let update = last_update(&h);
    assert_eq!(update.status, EvalStatus::Complete);
    assert_eq!(update.queued_allocations["web"], 2);
    let reason = cap_reason(&h).expect("the reason is in FailedTGAllocs");
    assert!(
        reason.contains("2500 MHz cpu") && reason.contains("0.3") && reason.contains("2400"),
        "{reason}"
    );
    assert!(h
        .created_evals
        .iter()
        .any(|e| e.status == EvalStatus::Blocked && e.job_id == first.id));

    // Another supervisor finds the share taken; an ordinary job (the children) is not
    // limited by it.
    let (second, eval) = h.register_job(supervisor("runner-2", 1)).unwrap();
    h.process(&eval).unwrap();
    assert!(h.running_allocs(&second).is_empty());
    assert!(cap_reason(&h).is_some());
    let (children, eval) = h.register_job(mock_job("child", 8)).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&children).len(), 8);
    assert!(last_update(&h).failed_tg_allocs.is_empty());

    // A supervisor allocation ends: the blocked one gets its place.
    let done = h.running_allocs(&first)[0].id.clone();
    let now = h.now;
    h.client_update(&[done], ClientStatus::Complete, now)
        .unwrap();
    let (_, eval) = h.register_job(supervisor("runner-2", 1)).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&second).len(), 1);
    assert!(cap_reason(&h).is_none());
}

#[test]
fn the_fraction_is_the_operators_and_memory_counts_too() {
    let (mut h, _) = harness_with_nodes(2);
    set_fraction(&mut h, 1.0).unwrap();
    let (job, eval) = h.register_job(supervisor("runner", 6)).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), 6);
    assert!(cap_reason(&h).is_none());

    // Memory: 2 × 8192 MB at 10 % is 1638 MB, six 256 MB allocations hold 1536.
    let (mut h, _) = harness_with_nodes(2);
    set_fraction(&mut h, 0.1).unwrap();
    let mut job = supervisor("runner", 8);
    job.task_groups_mut()[0].tasks[0].resources.cpu = 10;
    job.canonicalize();
    let (job, eval) = h.register_job(job).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), 6);
    assert!(cap_reason(&h).unwrap().contains("MB memory"));
}

#[test]
fn bad_fractions_and_marks_are_refused() {
    let (mut h, _) = harness_with_nodes(1);
    for bad in [0.0, -0.1, 1.5, f64::NAN] {
        let err = set_fraction(&mut h, bad).expect_err("refused");
        assert!(err.contains("SupervisorFraction"), "{err}");
    }
    assert_eq!(
        h.snapshot().scheduler_config().supervisor_fraction,
        teamster_storage::model::DEFAULT_SUPERVISOR_FRACTION,
        "nothing changed"
    );
    let mut job = mock_job("x", 1);
    job.meta.insert(SUPERVISOR_META.into(), "yes".into());
    let err = job.validate().unwrap_err().to_string();
    assert!(
        err.contains(SUPERVISOR_META) && err.contains("\"yes\""),
        "{err}"
    );
    let mut job = mock_system_job("agent");
    job.meta.insert(SUPERVISOR_META.into(), "true".into());
    let err = job.validate().unwrap_err().to_string();
    assert!(err.contains("only service and batch"), "{err}");
    let mut job = mock_job("x", 1);
    job.meta.insert(SUPERVISOR_META.into(), "false".into());
    job.validate().unwrap();
    assert!(!job.is_supervisor());
}
