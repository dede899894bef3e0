//! Deployments through the generic scheduler: rolling updates paced by `max_parallel` and
//! health, canaries and promotion, failed allocations held by an active deployment, and
//! cancellation by a newer version or a stop.

use teamster_storage::fsm::{
    AllocUpdateDesiredTransition, Command, DeploymentPromote, JobDeregister,
};
use teamster_storage::model::{
    Allocation, ClientStatus, Deployment, DeploymentStatus, DesiredTransition, EvalTrigger,
    Evaluation, Job,
};

use super::*;
use crate::scheduler::harness::{mock_job, Harness};
use crate::scheduler::reconcile::{ALLOC_CANARY_NOT_NEEDED, ALLOC_NOT_NEEDED, ALLOC_UPDATING};

const SECOND: i64 = 1_000_000_000;

/// `mock_job` with an update block of `max_parallel` and `canary`.
fn rolling_job(count: u32, max_parallel: i64, canary: i64) -> Job {
    let mut job = mock_job("web", count);
    let update = job.task_groups_mut()[0].update.as_mut().unwrap();
    update.max_parallel = Some(max_parallel);
    update.canary = Some(canary);
    job
}

/// The job with a changed task environment: a destructive update.
fn next_version(job: &Job, value: &str) -> Job {
    let mut job = job.clone();
    job.task_groups_mut()[0].tasks[0]
        .env
        .insert("VERSION".into(), value.into());
    job
}

fn latest(h: &Harness, job: &Job) -> Arc<Deployment> {
    h.snapshot()
        .latest_deployment(&job.namespace, &job.id)
        .expect("a deployment")
}

fn evaluate(h: &mut Harness, job: &Job) {
    let eval = h
        .create_pending_eval(job, EvalTrigger::DeploymentWatcher, None)
        .unwrap();
    h.process(&eval).unwrap();
}

fn running_of_version(h: &Harness, job: &Job, version: u64) -> Vec<Arc<Allocation>> {
    h.running_allocs(job)
        .into_iter()
        .filter(|a| a.job_version == version)
        .collect()
}

fn report_new_healthy(h: &mut Harness, job: &Job) {
    let ids: Vec<_> = running_of_version(h, job, job.version)
        .iter()
        .filter(|a| !a.is_healthy())
        .map(|a| a.id.clone())
        .collect();
    let now = h.now;
    h.report_health(&ids, true, now).unwrap();
}

#[test]
fn a_rolling_update_replaces_max_parallel_at_a_time_and_waits_for_health() {
    let (mut h, _) = harness_with_nodes(6);
    let (v0, eval) = h.register_job(rolling_job(6, 2, 0)).unwrap();
    h.process(&eval).unwrap();
    // The first version gets a deployment too; its placements are not limited.
    assert_eq!(h.running_allocs(&v0).len(), 6);
    let first = latest(&h, &v0);
    assert_eq!(first.task_groups["web"].desired_total, 6);
    assert_eq!(first.task_groups["web"].placed_allocs, 6);
    h.settle_deployment(&v0).unwrap();
    assert_eq!(latest(&h, &v0).status, DeploymentStatus::Successful);
    assert!(
        h.snapshot()
            .job_by_version("default", "web", 0)
            .unwrap()
            .stable
    );

    let (v1, eval) = h.register_job(next_version(&v0, "1")).unwrap();
    h.process(&eval).unwrap();
    let d = latest(&h, &v1);
    assert_ne!(d.id, first.id);
    assert_eq!(d.job_version, 1);
    assert_eq!(d.status, DeploymentStatus::Running);
    let mut rounds = 0;
    loop {
        let new = running_of_version(&h, &v1, 1);
        let old = running_of_version(&h, &v1, 0);
        assert_eq!(new.len() + old.len(), 6, "the count never drops");
        assert!(
            6 - old.len() <= 2 * (rounds + 1),
            "at most max_parallel replaced per round of health"
        );
        let unhealthy_new = new.iter().filter(|a| !a.is_healthy()).count();
        assert!(unhealthy_new <= 2, "never more than 2 in flight");
        // Evaluating again before anything turns healthy changes nothing.
        let plans = h.plans.len();
        evaluate(&mut h, &v1);
        assert_eq!(h.plans.len(), plans, "{:?}", h.plans.last());
        if old.is_empty() {
            break;
        }
        report_new_healthy(&mut h, &v1);
        evaluate(&mut h, &v1);
        rounds += 1;
        assert!(
            rounds <= 2,
            "the registration and two rounds of two replace six"
        );
    }
    assert_eq!(rounds, 2);
    let stops: usize = h
        .plans
        .iter()
        .flat_map(|p| p.node_update.values().flatten())
        .filter(|s| s.desired_description == ALLOC_UPDATING)
        .count();
    assert_eq!(stops, 6);
    report_new_healthy(&mut h, &v1);
    evaluate(&mut h, &v1);
    let d = latest(&h, &v1);
    assert_eq!(d.status, DeploymentStatus::Successful, "{d:?}");
    assert_eq!(d.task_groups["web"].healthy_allocs, 6);
    assert!(
        h.snapshot()
            .job_by_version("default", "web", 1)
            .unwrap()
            .stable
    );
}

#[test]
fn an_unhealthy_allocation_stops_the_rollout() {
    let (mut h, _) = harness_with_nodes(4);
    let (v0, eval) = h.register_job(rolling_job(4, 2, 0)).unwrap();
    h.process(&eval).unwrap();
    h.settle_deployment(&v0).unwrap();
    let (v1, eval) = h.register_job(next_version(&v0, "1")).unwrap();
    h.process(&eval).unwrap();
    let new = running_of_version(&h, &v1, 1);
    assert_eq!(new.len(), 2);
    let now = h.now;
    h.report_health(&[new[0].id.clone()], true, now).unwrap();
    h.report_health(&[new[1].id.clone()], false, now).unwrap();
    let plans = h.plans.len();
    evaluate(&mut h, &v1);
    assert_eq!(h.plans.len(), plans, "nothing more while one is unhealthy");
    assert_eq!(running_of_version(&h, &v1, 0).len(), 2);
    assert_eq!(latest(&h, &v1).task_groups["web"].unhealthy_allocs, 1);
}

#[test]
fn canaries_run_beside_the_old_version_until_promoted() {
    let (mut h, _) = harness_with_nodes(4);
    let (v0, eval) = h.register_job(rolling_job(3, 1, 1)).unwrap();
    h.process(&eval).unwrap();
    // No canary for a first version: nothing to compare it with.
    assert_eq!(latest(&h, &v0).task_groups["web"].desired_canaries, 0);
    h.settle_deployment(&v0).unwrap();

    let (v1, eval) = h.register_job(next_version(&v0, "1")).unwrap();
    h.process(&eval).unwrap();
    let d = latest(&h, &v1);
    assert_eq!(d.task_groups["web"].desired_canaries, 1);
    assert_eq!(
        d.status_description,
        "Deployment is running but requires manual promotion"
    );
    let canaries = running_of_version(&h, &v1, 1);
    assert_eq!(canaries.len(), 1);
    assert!(canaries[0].is_canary());
    assert_eq!(
        canaries[0].name, "web.web[0]",
        "named after the first it replaces"
    );
    assert_eq!(
        running_of_version(&h, &v1, 0).len(),
        3,
        "nothing old is stopped"
    );
    // Healthy canaries still wait for promotion.
    report_new_healthy(&mut h, &v1);
    let plans = h.plans.len();
    evaluate(&mut h, &v1);
    assert_eq!(h.plans.len(), plans);
    assert_eq!(latest(&h, &v1).status, DeploymentStatus::Running);

    let d = latest(&h, &v1);
    h.apply(Command::DeploymentPromote(DeploymentPromote {
        deployment_id: d.id.clone(),
        all: true,
        groups: Vec::new(),
        eval: None,
        modify_time: h.now,
    }))
    .unwrap();
    evaluate(&mut h, &v1);
    // The old allocation sharing the canary's name stops, and one more is replaced.
    let last = h.plans.last().unwrap();
    let stops: Vec<_> = last.node_update.values().flatten().collect();
    assert_eq!(stops.len(), 2, "{stops:?}");
    assert!(stops
        .iter()
        .any(|s| s.desired_description == ALLOC_NOT_NEEDED));
    assert!(stops
        .iter()
        .any(|s| s.desired_description == ALLOC_UPDATING));
    for _ in 0..3 {
        report_new_healthy(&mut h, &v1);
        evaluate(&mut h, &v1);
    }
    assert_eq!(running_of_version(&h, &v1, 1).len(), 3);
    assert!(running_of_version(&h, &v1, 0).is_empty());
    assert_eq!(latest(&h, &v1).status, DeploymentStatus::Successful);
}

#[test]
fn a_newer_version_cancels_the_deployment_and_its_unpromoted_canaries() {
    let (mut h, _) = harness_with_nodes(4);
    let (v0, eval) = h.register_job(rolling_job(2, 1, 1)).unwrap();
    h.process(&eval).unwrap();
    h.settle_deployment(&v0).unwrap();
    let (v1, eval) = h.register_job(next_version(&v0, "1")).unwrap();
    h.process(&eval).unwrap();
    let d1 = latest(&h, &v1);
    let canary = running_of_version(&h, &v1, 1)[0].clone();

    let (v2, eval) = h.register_job(next_version(&v1, "2")).unwrap();
    h.process(&eval).unwrap();
    let snap = h.snapshot();
    let old = snap.deployment_by_id(&d1.id).unwrap();
    assert_eq!(old.status, DeploymentStatus::Cancelled);
    assert_eq!(
        old.status_description,
        "Cancelled due to newer version of job"
    );
    let stopped = snap.alloc_by_id(&canary.id).unwrap();
    assert_eq!(stopped.desired_description, ALLOC_CANARY_NOT_NEEDED);
    assert_eq!(latest(&h, &v2).job_version, 2);
    assert_eq!(running_of_version(&h, &v2, 2).len(), 1, "a canary of v2");

    // Stopping the job cancels its deployment.
    let d2 = latest(&h, &v2);
    let mut stop_eval = h
        .create_pending_eval(&v2, EvalTrigger::JobDeregister, None)
        .unwrap();
    h.apply(Command::JobDeregister(JobDeregister {
        namespace: v2.namespace.clone(),
        job_id: v2.id.clone(),
        purge: false,
        eval: None,
        submit_time: h.now,
        tracked_versions: 0,
    }))
    .unwrap();
    stop_eval.job_modify_index = 0;
    h.process(&stop_eval).unwrap();
    let d2 = h.snapshot().deployment_by_id(&d2.id).unwrap().clone();
    assert_eq!(d2.status, DeploymentStatus::Cancelled);
    assert_eq!(d2.status_description, "Cancelled because job is stopped");
}

#[test]
fn a_failed_allocation_of_an_active_deployment_waits_for_the_watcher() {
    let (mut h, _) = harness_with_nodes(3);
    let (v0, eval) = h.register_job(rolling_job(2, 1, 0)).unwrap();
    h.process(&eval).unwrap();
    let allocs = h.running_allocs(&v0);
    let now = h.now;
    h.client_update(&[allocs[0].id.clone()], ClientStatus::Failed, now)
        .unwrap();
    let plans = h.plans.len();
    evaluate(&mut h, &v0);
    assert_eq!(h.plans.len(), plans, "held in place, not replaced");
    assert!(
        h.created_evals.is_empty(),
        "and no delayed reschedule either"
    );

    // The watcher marks it to be rescheduled: it is replaced once its policy's delay is
    // over (Nomad's reconciler; replacing it at once made a task that fails to start
    // reschedule in a tight loop, issue 52).
    h.apply(Command::AllocUpdateDesiredTransition(
        AllocUpdateDesiredTransition {
            allocs: [(
                allocs[0].id.clone(),
                DesiredTransition {
                    reschedule: Some(true),
                    ..DesiredTransition::default()
                },
            )]
            .into(),
            evals: Vec::new(),
        },
    ))
    .unwrap();
    evaluate(&mut h, &v0);
    assert_eq!(h.running_allocs(&v0).len(), 1, "not before the delay");
    let followup = h
        .created_evals
        .iter()
        .find(|e| e.triggered_by == EvalTrigger::AllocFailure)
        .expect("a follow-up evaluation at the reschedule time")
        .clone();
    assert_eq!(followup.wait_until.unix_nanos(), Some(now + 30 * SECOND));
    h.now += 31 * SECOND;
    let followup: Evaluation = (**h.snapshot().eval_by_id(&followup.id).unwrap()).clone();
    h.process(&followup).unwrap();
    assert_eq!(h.running_allocs(&v0).len(), 2);
    let replacement = h
        .running_allocs(&v0)
        .into_iter()
        .find(|a| a.previous_allocation == allocs[0].id)
        .expect("a replacement");
    assert_eq!(replacement.deployment_id, latest(&h, &v0).id);
}

#[test]
fn max_parallel_zero_turns_deployments_off_and_replaces_every_allocation_at_once() {
    let (mut h, _) = harness_with_nodes(4);
    let (v0, eval) = h.register_job(rolling_job(4, 0, 0)).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(running_of_version(&h, &v0, v0.version).len(), 4);
    assert!(
        h.snapshot()
            .latest_deployment(&v0.namespace, &v0.id)
            .is_none(),
        "no deployment"
    );
    let (v1, eval) = h.register_job(next_version(&v0, "2")).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(
        running_of_version(&h, &v1, v1.version).len(),
        4,
        "all four replaced in one evaluation"
    );
    assert!(running_of_version(&h, &v1, v0.version).is_empty());
    assert!(h
        .snapshot()
        .latest_deployment(&v1.namespace, &v1.id)
        .is_none());
}
