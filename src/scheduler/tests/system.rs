//! The system and sysbatch scheduler against the harness.

use std::collections::BTreeSet;

use teamster_storage::fsm::{Command, NodeUpdateEligibility, NodeUpdateStatus};
use teamster_storage::model::{
    ClientStatus, Constraint, EvalStatus, EvalTrigger, JobType, NodeId, NodeStatus,
    SchedulingEligibility,
};

use super::*;
use crate::scheduler::harness::{mock_node, mock_system_job, Harness};
use crate::scheduler::reconcile::{ALLOC_LOST, ALLOC_MIGRATING, ALLOC_NODE_TAINTED};

#[test]
fn a_system_job_runs_once_on_every_eligible_node() {
    let mut h = Harness::new();
    let ready: Vec<Node> = (0..3).map(mock_node).collect();
    for node in &ready {
        h.register_node(node.clone()).unwrap();
    }
    h.register_node(node_with(3, |n| n.datacenter = "dc2".into()))
        .unwrap();
    h.register_node(mock_node(4)).unwrap();
    h.apply(Command::NodeUpdateEligibility(NodeUpdateEligibility {
        node_id: mock_node(4).id,
        eligibility: SchedulingEligibility::Ineligible,
        updated_at: 1,
        evals: Vec::new(),
    }))
    .unwrap();
    h.register_node(node_with(5, |n| n.status = NodeStatus::Initializing))
        .unwrap();

    let (job, eval) = h.register_job(mock_system_job("agent")).unwrap();
    h.process(&eval).unwrap();
    let want: BTreeSet<NodeId> = ready.iter().map(|n| n.id.clone()).collect();
    assert_eq!(nodes_used(&h, &job), want);
    assert_eq!(h.running_allocs(&job).len(), 3);
    assert!(h
        .running_allocs(&job)
        .iter()
        .all(|a| a.name == "agent.web[0]"));
    assert_complete(&h, &eval);

    // Re-evaluating changes nothing.
    let plans = h.plans.len();
    let again = h
        .create_pending_eval(&job, EvalTrigger::NodeUpdate, None)
        .unwrap();
    h.process(&again).unwrap();
    assert_eq!(h.plans.len(), plans);
}

#[test]
fn a_system_job_lands_on_a_node_once_it_is_ready() {
    let (mut h, _) = harness_with_nodes(2);
    let (job, eval) = h.register_job(mock_system_job("agent")).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), 2);

    let new = node_with(9, |n| n.status = NodeStatus::Initializing);
    h.register_node(new.clone()).unwrap();
    let eval = h
        .create_pending_eval(&job, EvalTrigger::NodeUpdate, Some(&new.id))
        .unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), 2, "not ready yet");

    h.apply(Command::NodeUpdateStatus(NodeUpdateStatus {
        node_id: new.id.clone(),
        status: NodeStatus::Ready,
        updated_at: 2,
        evals: Vec::new(),
    }))
    .unwrap();
    let eval = h
        .create_pending_eval(&job, EvalTrigger::NodeUpdate, Some(&new.id))
        .unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), 3);
    assert!(nodes_used(&h, &job).contains(&new.id));
    let plan = h.plans.last().unwrap();
    assert_eq!(
        plan.node_allocation.len(),
        1,
        "only the new node is touched"
    );
    assert_complete(&h, &eval);
}

#[test]
fn constraints_skip_nodes_but_full_nodes_get_blocked_evals() {
    let mut h = Harness::new();
    h.register_node(mock_node(0)).unwrap();
    h.register_node(node_with(1, |n| {
        n.attributes.insert("kernel.name".into(), "windows".into());
    }))
    .unwrap();
    let small = node_with(2, |n| n.node_resources.cpu.cpu_shares = 100);
    h.register_node(small.clone()).unwrap();
    let mut job = mock_system_job("agent");
    job.constraints
        .push(Constraint::new("${attr.kernel.name}", "=", "linux"));
    let (job, eval) = h.register_job(job).unwrap();
    h.process(&eval).unwrap();

    assert_eq!(nodes_used(&h, &job), BTreeSet::from([mock_node(0).id]));
    let update = last_update(&h);
    assert_eq!(update.status, EvalStatus::Complete);
    assert_eq!(
        update.queued_allocations["web"], 1,
        "only the full node counts"
    );
    let metric = &update.failed_tg_allocs["web"];
    assert_eq!(metric.dimension_exhausted["cpu"], 1);
    assert_eq!(metric.nodes_in_pool, 3);
    assert_eq!(h.created_evals.len(), 1);
    let blocked = &h.created_evals[0];
    assert_eq!(blocked.status, EvalStatus::Blocked);
    assert_eq!(blocked.node_id, small.id);
    assert_eq!(blocked.previous_eval, eval.id);
}

#[test]
fn system_allocations_on_lost_nodes_are_stopped() {
    let (mut h, nodes) = harness_with_nodes(3);
    let (job, eval) = h.register_job(mock_system_job("agent")).unwrap();
    h.process(&eval).unwrap();
    h.apply(Command::NodeUpdateStatus(NodeUpdateStatus {
        node_id: nodes[1].id.clone(),
        status: NodeStatus::Down,
        updated_at: 1,
        evals: Vec::new(),
    }))
    .unwrap();
    let eval = h
        .create_pending_eval(&job, EvalTrigger::NodeUpdate, Some(&nodes[1].id))
        .unwrap();
    h.process(&eval).unwrap();
    let snap = h.snapshot();
    let lost: Vec<_> = snap
        .allocs_by_node(&nodes[1].id)
        .filter(|a| a.job_id == job.id)
        .collect();
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].client_status, ClientStatus::Lost);
    assert_eq!(lost[0].desired_description, ALLOC_LOST);
    assert_eq!(h.running_allocs(&job).len(), 2);
}

#[test]
fn system_job_updates_replace_changed_tasks() {
    let (mut h, _) = harness_with_nodes(2);
    let (job, eval) = h.register_job(mock_system_job("agent")).unwrap();
    h.process(&eval).unwrap();
    let first: BTreeSet<String> = h
        .running_allocs(&job)
        .iter()
        .map(|a| a.id.to_string())
        .collect();
    let mut changed = (*job).clone();
    changed.task_groups_mut()[0].tasks[0]
        .env
        .insert("LEVEL".into(), "debug".into());
    let (job, eval) = h.register_job(changed).unwrap();
    h.process(&eval).unwrap();
    let running = h.running_allocs(&job);
    assert_eq!(running.len(), 2);
    for alloc in &running {
        assert_eq!(alloc.job_version, 1);
        assert!(first.contains(alloc.previous_allocation.as_str()));
    }

    let mut constrained = (*job).clone();
    constrained.task_groups_mut()[0]
        .constraints
        .push(Constraint::new("${attr.kernel.name}", "=", "linux"));
    let (job, eval) = h.register_job(constrained).unwrap();
    let ids: BTreeSet<String> = running.iter().map(|a| a.id.to_string()).collect();
    h.process(&eval).unwrap();
    let now: BTreeSet<String> = h
        .running_allocs(&job)
        .iter()
        .map(|a| a.id.to_string())
        .collect();
    assert_eq!(ids, now, "a still-satisfied constraint updates in place");
    assert!(h.running_allocs(&job).iter().all(|a| a.job_version == 2));
}

/// `mock_system_job` with an update block: `max_parallel` and a `canary` percentage.
fn rolling_system_job(max_parallel: i64, canary: i64) -> teamster_storage::model::Job {
    let mut job = mock_system_job("agent");
    job.task_groups_mut()[0].update = Some(teamster_storage::model::UpdateStrategy {
        max_parallel: Some(max_parallel),
        canary: Some(canary),
        ..teamster_storage::model::UpdateStrategy::nomad_default()
    });
    job
}

/// The job with a changed task environment: a destructive update.
fn changed(job: &teamster_storage::model::Job) -> teamster_storage::model::Job {
    let mut job = job.clone();
    job.task_groups_mut()[0].tasks[0]
        .env
        .insert("LEVEL".into(), "debug".into());
    job
}

fn system_deployment(
    h: &Harness,
    job: &teamster_storage::model::Job,
) -> Arc<teamster_storage::model::Deployment> {
    h.snapshot()
        .latest_deployment(&job.namespace, &job.id)
        .expect("a deployment")
}

fn of_version(
    h: &Harness,
    job: &teamster_storage::model::Job,
    version: u64,
) -> Vec<Arc<Allocation>> {
    h.running_allocs(job)
        .into_iter()
        .filter(|a| a.job_version == version)
        .collect()
}

/// The job registered, placed everywhere and its first deployment done healthy.
fn settled_v0(h: &mut Harness, max_parallel: i64, canary: i64) -> Arc<Job> {
    let (v0, eval) = h
        .register_job(rolling_system_job(max_parallel, canary))
        .unwrap();
    h.process(&eval).unwrap();
    healthy_then_evaluate(h, &v0);
    v0
}

/// `job` registered and its registration evaluated.
fn register_and_process(h: &mut Harness, job: Job) -> Arc<Job> {
    let (job, eval) = h.register_job(job).unwrap();
    h.process(&eval).unwrap();
    job
}

/// Reports every running allocation of the job's version healthy, then evaluates the job as
/// the deployment watcher does.
fn healthy_then_evaluate(h: &mut Harness, job: &teamster_storage::model::Job) {
    let ids: Vec<_> = of_version(h, job, job.version)
        .iter()
        .filter(|a| !a.is_healthy())
        .map(|a| a.id.clone())
        .collect();
    let now = h.now;
    h.report_health(&ids, true, now).unwrap();
    let eval = h
        .create_pending_eval(job, EvalTrigger::DeploymentWatcher, None)
        .unwrap();
    h.process(&eval).unwrap();
}

/// Nomad 1.11's system deployments: the first version is placed everywhere at once and
/// tracked; a new version replaces `max_parallel` allocations, then the next ones only as
/// those turn healthy (each evaluation the watcher makes), and the deployment succeeds
/// when every node runs it healthy. No `stagger` step is scheduled.
#[test]
fn a_system_job_rolls_out_through_a_deployment_max_parallel_healthy_at_a_time() {
    use teamster_storage::model::DeploymentStatus;
    let (mut h, _) = harness_with_nodes(3);
    let (v0, eval) = h.register_job(rolling_system_job(1, 0)).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(
        of_version(&h, &v0, 0).len(),
        3,
        "first placements are not limited"
    );
    let d0 = system_deployment(&h, &v0);
    assert_eq!(d0.task_groups["web"].desired_total, 3);
    assert!(of_version(&h, &v0, 0)
        .iter()
        .all(|a| a.deployment_id == d0.id));
    assert_eq!(d0.status, DeploymentStatus::Running);
    healthy_then_evaluate(&mut h, &v0);
    assert_eq!(
        system_deployment(&h, &v0).status,
        DeploymentStatus::Successful
    );

    let v1 = register_and_process(&mut h, changed(&v0));
    let d1 = system_deployment(&h, &v1);
    assert_ne!(d1.id, d0.id);
    assert_eq!(d1.task_groups["web"].desired_total, 3);
    assert_eq!(of_version(&h, &v1, 1).len(), 1, "max_parallel at once");
    // Not healthy yet: another evaluation replaces nothing more.
    let plans = h.plans.len();
    let eval = h
        .create_pending_eval(&v1, EvalTrigger::NodeUpdate, None)
        .unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.plans.len(), plans, "waits for health");
    for replaced in 2..=3 {
        healthy_then_evaluate(&mut h, &v1);
        assert_eq!(of_version(&h, &v1, 1).len(), replaced);
        assert_eq!(of_version(&h, &v1, 0).len(), 3 - replaced);
        assert_eq!(system_deployment(&h, &v1).status, DeploymentStatus::Running);
    }
    healthy_then_evaluate(&mut h, &v1);
    let d1 = system_deployment(&h, &v1);
    assert_eq!(d1.status, DeploymentStatus::Successful);
    assert_eq!(d1.task_groups["web"].healthy_allocs, 3);
    assert!(
        !h.created_evals
            .iter()
            .any(|e| e.triggered_by == EvalTrigger::RollingUpdate),
        "health paces the roll, not stagger"
    );
}

/// A failed deployment replaces nothing more; a node that cannot take the new version is
/// not one of the deployment's nodes, so it neither stalls the roll nor keeps it from
/// succeeding.
#[test]
fn a_system_deployment_holds_when_failed_and_skips_a_full_node() {
    use teamster_storage::fsm::DeploymentStatusUpdateCommand;
    use teamster_storage::model::{DeploymentStatus, DeploymentStatusUpdate};
    let (mut h, nodes) = harness_with_nodes(3);
    let v0 = settled_v0(&mut h, 1, 0);
    // The node visited first has no room for the new, larger version.
    let mut ids: Vec<NodeId> = nodes.iter().map(|n| n.id.clone()).collect();
    ids.sort();
    let filler = filler_job(&mut h);
    h.upsert_allocs(vec![filler_alloc(&filler, &ids[0], 1, 100, 6000)])
        .unwrap();
    let mut bigger = (*v0).clone();
    bigger.task_groups_mut()[0].tasks[0].resources.memory_mb = 4096;
    let (v1, eval) = h.register_job(bigger).unwrap();
    h.process(&eval).unwrap();
    let new = of_version(&h, &v1, 1);
    assert_eq!(new.len(), 1, "one replaced despite the full node");
    assert_ne!(new[0].node_id, ids[0]);
    assert_eq!(
        system_deployment(&h, &v1).task_groups["web"].desired_total,
        2,
        "the full node is not counted"
    );
    healthy_then_evaluate(&mut h, &v1);
    assert_eq!(of_version(&h, &v1, 1).len(), 2);
    healthy_then_evaluate(&mut h, &v1);
    assert_eq!(
        system_deployment(&h, &v1).status,
        DeploymentStatus::Successful
    );
    assert_eq!(
        of_version(&h, &v1, 0).len(),
        1,
        "the full node keeps its allocation"
    );

    // A failed deployment of the next version stops where it is.
    let v2 = register_and_process(&mut h, changed(&v1));
    assert_eq!(of_version(&h, &v2, 2).len(), 1);
    let d2 = system_deployment(&h, &v2);
    h.apply(Command::DeploymentStatusUpdate(
        DeploymentStatusUpdateCommand {
            update: DeploymentStatusUpdate {
                deployment_id: d2.id.clone(),
                status: DeploymentStatus::Failed,
                status_description: "Deployment marked as failed".into(),
            },
            revert: None,
            eval: None,
            modify_time: h.now,
        },
    ))
    .unwrap();
    healthy_then_evaluate(&mut h, &v2);
    assert_eq!(of_version(&h, &v2, 2).len(), 1, "a failed deployment holds");
}

/// `canary` is a percentage of the nodes to update: that many (rounded up, at most
/// `max_parallel`) are replaced first and the rest wait for promotion; then the roll goes
/// on `max_parallel` at a time.
#[test]
fn system_canaries_replace_a_share_of_the_nodes_until_promoted() {
    use teamster_storage::fsm::DeploymentPromote;
    use teamster_storage::model::DeploymentStatus;
    let (mut h, _) = harness_with_nodes(5);
    let (v0, eval) = h.register_job(rolling_system_job(2, 30)).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(
        system_deployment(&h, &v0).task_groups["web"].desired_canaries,
        0,
        "no canary for a first version"
    );
    healthy_then_evaluate(&mut h, &v0);

    let v1 = register_and_process(&mut h, changed(&v0));
    let d = system_deployment(&h, &v1);
    // 30 % of 5 nodes, rounded up.
    assert_eq!(d.task_groups["web"].desired_canaries, 2);
    assert_eq!(
        d.status_description,
        "Deployment is running but requires manual promotion"
    );
    let canaries = of_version(&h, &v1, 1);
    assert_eq!(canaries.len(), 2);
    assert!(canaries.iter().all(|a| a.is_canary()));
    assert_eq!(
        of_version(&h, &v1, 0).len(),
        3,
        "the canaries' nodes were replaced"
    );
    // Healthy canaries wait for promotion.
    let plans = h.plans.len();
    healthy_then_evaluate(&mut h, &v1);
    assert_eq!(h.plans.len(), plans);
    assert_eq!(of_version(&h, &v1, 1).len(), 2);

    let d = system_deployment(&h, &v1);
    assert_eq!(d.task_groups["web"].placed_canaries.len(), 2);
    h.apply(Command::DeploymentPromote(DeploymentPromote {
        deployment_id: d.id.clone(),
        all: true,
        groups: Vec::new(),
        eval: None,
        modify_time: h.now,
    }))
    .unwrap();
    healthy_then_evaluate(&mut h, &v1);
    assert_eq!(
        of_version(&h, &v1, 1).len(),
        4,
        "max_parallel more after promotion"
    );
    healthy_then_evaluate(&mut h, &v1);
    assert_eq!(of_version(&h, &v1, 1).len(), 5);
    healthy_then_evaluate(&mut h, &v1);
    let d = system_deployment(&h, &v1);
    assert_eq!(d.status, DeploymentStatus::Successful);
    assert_eq!(d.task_groups["web"].desired_total, 5);
}

fn set_status(
    h: &mut Harness,
    d: &teamster_storage::model::Deployment,
    status: teamster_storage::model::DeploymentStatus,
) {
    use teamster_storage::fsm::DeploymentStatusUpdateCommand;
    h.apply(Command::DeploymentStatusUpdate(
        DeploymentStatusUpdateCommand {
            update: teamster_storage::model::DeploymentStatusUpdate {
                deployment_id: d.id.clone(),
                status,
                status_description: "set by the test".into(),
            },
            revert: None,
            eval: None,
            modify_time: h.now,
        },
    ))
    .unwrap();
}

/// A paused deployment replaces nothing more, and a scheduler's copy of it read before the
/// pause (a plan in flight) does not resume it.
#[test]
fn a_paused_system_deployment_holds_and_a_stale_copy_does_not_resume_it() {
    use teamster_storage::fsm::ApplyPlanResults;
    use teamster_storage::model::DeploymentStatus;
    let (mut h, _) = harness_with_nodes(3);
    let v0 = settled_v0(&mut h, 1, 0);
    let v1 = register_and_process(&mut h, changed(&v0));
    let running = system_deployment(&h, &v1);
    set_status(&mut h, &running, DeploymentStatus::Paused);
    healthy_then_evaluate(&mut h, &v1);
    assert_eq!(of_version(&h, &v1, 1).len(), 1, "a paused deployment holds");
    let mut stale = (*running).clone();
    stale.task_groups.get_mut("web").unwrap().desired_total = 2;
    h.apply(Command::ApplyPlanResults(ApplyPlanResults {
        eval_id: Default::default(),
        allocs_updated: Vec::new(),
        allocs_stopped: Vec::new(),
        allocs_preempted: Vec::new(),
        evals: Vec::new(),
        ineligible_nodes: Vec::new(),
        updated_at: 1,
        deployment: Some(stale),
        deployment_updates: Vec::new(),
    }))
    .unwrap();
    let d = system_deployment(&h, &v1);
    assert_eq!(d.status, DeploymentStatus::Paused);
    assert_eq!(d.status_description, "set by the test");
    assert_eq!(
        d.task_groups["web"].desired_total, 2,
        "the counts are taken"
    );
    set_status(&mut h, &d, DeploymentStatus::Running);
    healthy_then_evaluate(&mut h, &v1);
    assert_eq!(of_version(&h, &v1, 1).len(), 2, "resumed, the roll goes on");
}

/// Canaries on every node to update still wait for promotion; a failed canary's node gets
/// a canary again without a second node being given one.
#[test]
fn system_canaries_wait_for_promotion_even_on_every_node_and_a_failed_one_is_replaced_alone() {
    use teamster_storage::model::DeploymentStatus;
    let (mut h, _) = harness_with_nodes(1);
    let v0 = settled_v0(&mut h, 1, 50);
    let v1 = register_and_process(&mut h, changed(&v0));
    assert_eq!(of_version(&h, &v1, 1).len(), 1);
    healthy_then_evaluate(&mut h, &v1);
    healthy_then_evaluate(&mut h, &v1);
    let d = system_deployment(&h, &v1);
    assert_eq!(
        d.status,
        DeploymentStatus::Running,
        "not done before promotion"
    );
    assert!(d.requires_promotion());

    let (mut h, _) = harness_with_nodes(4);
    let v0 = settled_v0(&mut h, 1, 25);
    let v1 = register_and_process(&mut h, changed(&v0));
    let canary = of_version(&h, &v1, 1);
    assert_eq!(canary.len(), 1);
    let now = h.now;
    h.client_update(&[canary[0].id.clone()], ClientStatus::Failed, now)
        .unwrap();
    let eval = h
        .create_pending_eval(&v1, EvalTrigger::AllocFailure, None)
        .unwrap();
    h.process(&eval).unwrap();
    let canaries = of_version(&h, &v1, 1);
    assert_eq!(
        canaries.len(),
        1,
        "one canary, on the failed one's node: {canaries:?}"
    );
    assert!(canaries[0].is_canary());
    assert_eq!(canaries[0].node_id, canary[0].node_id);
    assert_eq!(of_version(&h, &v1, 0).len(), 3);
}

/// A node the new version no longer fits only has its old allocation stopped: that does
/// not use up `max_parallel`, so the roll does not wait for a health report that never
/// comes; and the deployment succeeds only once every node runs the version healthy.
#[test]
fn a_system_roll_goes_past_nodes_the_new_version_filters_out() {
    use teamster_storage::model::DeploymentStatus;
    let (mut h, nodes) = harness_with_nodes(3);
    let v0 = settled_v0(&mut h, 1, 0);
    let mut ids: Vec<NodeId> = nodes.iter().map(|n| n.id.clone()).collect();
    ids.sort();
    // v1 runs only on the last node in visiting order.
    let mut narrowed = changed(&v0);
    narrowed.constraints.push(Constraint {
        l_target: "${node.unique.id}".into(),
        r_target: ids[2].to_string(),
        operand: "=".into(),
    });
    let (v1, eval) = h.register_job(narrowed).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(
        of_version(&h, &v1, 1).len(),
        1,
        "the node that fits is replaced"
    );
    assert_eq!(of_version(&h, &v1, 0).len(), 0, "the others only stop");
    assert_eq!(
        system_deployment(&h, &v1).task_groups["web"].desired_total,
        1
    );
    healthy_then_evaluate(&mut h, &v1);
    assert_eq!(
        system_deployment(&h, &v1).status,
        DeploymentStatus::Successful
    );
}

/// A crashed and replaced allocation is reported healthy twice over; the deployment still
/// waits for every node.
#[test]
fn a_system_deployment_is_not_done_while_a_node_waits() {
    use teamster_storage::model::DeploymentStatus;
    let (mut h, _) = harness_with_nodes(3);
    let v0 = settled_v0(&mut h, 1, 0);
    let v1 = register_and_process(&mut h, changed(&v0));
    healthy_then_evaluate(&mut h, &v1);
    // The first new allocation crashes after it was judged healthy, and is replaced.
    let first = of_version(&h, &v1, 1)
        .into_iter()
        .find(|a| a.is_healthy())
        .expect("a healthy new allocation");
    let now = h.now;
    h.client_update(std::slice::from_ref(&first.id), ClientStatus::Failed, now)
        .unwrap();
    let eval = h
        .create_pending_eval(&v1, EvalTrigger::AllocFailure, None)
        .unwrap();
    h.process(&eval).unwrap();
    healthy_then_evaluate(&mut h, &v1);
    let d = system_deployment(&h, &v1);
    assert!(
        d.task_groups["web"].healthy_allocs >= 3,
        "{:?}",
        d.task_groups["web"]
    );
    assert_eq!(
        d.status,
        DeploymentStatus::Running,
        "a node still runs v0 or is unjudged"
    );
    for _ in 0..3 {
        healthy_then_evaluate(&mut h, &v1);
    }
    assert_eq!(of_version(&h, &v1, 1).len(), 3);
    assert_eq!(
        system_deployment(&h, &v1).status,
        DeploymentStatus::Successful
    );
}

/// Allocations of the version already running outside any deployment (a roll begun before
/// system deployments): no deployment is made that could never count them healthy.
#[test]
fn no_system_deployment_is_made_for_a_version_already_running_outside_one() {
    let (mut h, nodes) = harness_with_nodes(2);
    let (v0, eval) = h.register_job(rolling_system_job(1, 0)).unwrap();
    // One node already runs this version, placed without a deployment.
    let mut before = filler_alloc(&v0, &nodes[0].id, 1, 500, 256);
    before.name = "agent.web[0]".into();
    h.upsert_allocs(vec![before]).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&v0).len(), 2, "the other node is placed");
    assert!(h
        .snapshot()
        .latest_deployment(&v0.namespace, &v0.id)
        .is_none());
    assert!(h
        .running_allocs(&v0)
        .iter()
        .all(|a| a.deployment_id.is_empty()));
}

#[test]
fn sysbatch_does_not_rerun_finished_allocations() {
    let (mut h, _) = harness_with_nodes(2);
    let mut job = mock_system_job("sweep");
    job.retype(JobType::SysBatch);
    let (job, eval) = h.register_job(job).unwrap();
    h.process(&eval).unwrap();
    let allocs = h.running_allocs(&job);
    assert_eq!(allocs.len(), 2);
    let ids: Vec<_> = allocs.iter().map(|a| a.id.clone()).collect();
    h.client_update(&ids, ClientStatus::Complete, h.now)
        .unwrap();
    let plans = h.plans.len();
    let eval = h
        .create_pending_eval(&job, EvalTrigger::NodeUpdate, None)
        .unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.plans.len(), plans, "finished runs are not repeated");
    assert_complete(&h, &eval);
}

#[test]
fn system_allocations_leave_datacenters_the_job_no_longer_targets() {
    let (mut h, _) = harness_with_nodes(2);
    let (job, eval) = h.register_job(mock_system_job("agent")).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), 2);
    let mut moved = (*job).clone();
    moved.datacenters = vec!["dc2".into()];
    let (job, eval) = h.register_job(moved).unwrap();
    h.process(&eval).unwrap();
    assert!(h.running_allocs(&job).is_empty());
    assert_complete(&h, &eval);
}

#[test]
fn a_system_allocation_marked_to_migrate_is_replaced_on_its_node() {
    let (mut h, _) = harness_with_nodes(2);
    let (job, eval) = h.register_job(mock_system_job("agent")).unwrap();
    h.process(&eval).unwrap();
    let victim = h.running_allocs(&job)[0].clone();
    super::generic::mark_migrate(&mut h, &victim);
    let eval = h
        .create_pending_eval(&job, EvalTrigger::AllocStop, None)
        .unwrap();
    h.process(&eval).unwrap();

    let snap = h.snapshot();
    let stopped = snap.alloc_by_id(&victim.id).unwrap();
    assert!(stopped.server_terminal_status());
    assert_eq!(stopped.desired_description, ALLOC_MIGRATING);
    let running = h.running_allocs(&job);
    assert_eq!(running.len(), 2);
    let replacement = running
        .iter()
        .find(|a| a.node_id == victim.node_id)
        .expect("a new allocation on the same node");
    assert_ne!(replacement.id, victim.id);
    assert_complete(&h, &eval);
}

#[test]
fn a_system_allocation_on_a_draining_node_stays_until_marked() {
    let (mut h, _) = harness_with_nodes(2);
    let (job, eval) = h.register_job(mock_system_job("agent")).unwrap();
    h.process(&eval).unwrap();
    let victim = h.running_allocs(&job)[0].clone();
    super::generic::start_drain(&mut h, &victim.node_id);
    let eval = h
        .create_pending_eval(&job, EvalTrigger::NodeDrain, None)
        .unwrap();
    h.process(&eval).unwrap();
    assert_eq!(
        h.running_allocs(&job).len(),
        2,
        "left running while others drain"
    );
    // The drainer marks it last: stopped as tainted, nothing new on the draining node.
    super::generic::mark_migrate(&mut h, &victim);
    let eval = h
        .create_pending_eval(&job, EvalTrigger::NodeDrain, None)
        .unwrap();
    h.process(&eval).unwrap();
    let stopped = h.snapshot().alloc_by_id(&victim.id).cloned().unwrap();
    assert!(stopped.server_terminal_status());
    assert_eq!(stopped.desired_description, ALLOC_NODE_TAINTED);
    let running = h.running_allocs(&job);
    assert_eq!(running.len(), 1);
    assert!(running.iter().all(|a| a.node_id != victim.node_id));
    assert_complete(&h, &eval);
}
