//! The generic (service and batch) scheduler against the harness.

use std::collections::{BTreeMap, BTreeSet};

use teamster_storage::fsm::{
    AllocUpdateDesiredTransition, ApplyPlanResults, Command, JobDeregister, NodeUpdateDrain,
    NodeUpdateStatus, SchedulerConfigUpdate,
};
use teamster_storage::model::{
    Affinity, ClientStatus, Constraint, DesiredStatus, DesiredTransition, EvalStatus, EvalTrigger,
    Evaluation, Job, NodeId, NodeStatus, SchedulerAlgorithm, SchedulerConfiguration, Spread,
    SpreadTarget,
};

use super::*;
use crate::scheduler::harness::{mock_batch_job, mock_job, Harness};
use crate::scheduler::reconcile::{
    ALLOC_LOST, ALLOC_MIGRATING, ALLOC_NOT_NEEDED, ALLOC_RESCHEDULED, ALLOC_UPDATING,
};
use crate::scheduler::SchedulerError;

const SECOND: i64 = 1_000_000_000;

fn with_constraint(mut job: Job, l: &str, op: &str, r: &str) -> Job {
    job.constraints.push(Constraint::new(l, op, r));
    job
}

#[test]
fn places_count_allocations_across_nodes() {
    let (mut h, nodes) = harness_with_nodes(10);
    let (job, eval) = h.register_job(mock_job("web", 10)).unwrap();
    h.process(&eval).unwrap();

    assert_eq!(h.plans.len(), 1);
    let running = h.running_allocs(&job);
    assert_eq!(running.len(), 10);
    let expected: BTreeSet<String> = (0..10).map(|i| format!("web.web[{i}]")).collect();
    assert_eq!(running_names(&h, &job), expected);
    let node_ids: BTreeSet<NodeId> = nodes.iter().map(|n| n.id.clone()).collect();
    for alloc in &running {
        assert!(node_ids.contains(&alloc.node_id));
        assert_eq!(alloc.job_version, job.version);
        assert_eq!(alloc.eval_id, eval.id);
        assert_eq!(alloc.desired_status, DesiredStatus::Run);
        assert_eq!(alloc.client_status, ClientStatus::Pending);
        assert_eq!(alloc.create_time, h.now);
        assert_eq!(alloc.resources.cpu, 500);
        assert_eq!(alloc.id.len(), 36, "UUID-shaped id {}", alloc.id);
    }
    assert_complete(&h, &eval);
    let update = last_update(&h);
    assert_eq!(
        update.queued_allocations,
        BTreeMap::from([("web".into(), 0)])
    );
    assert!(update.failed_tg_allocs.is_empty());
    assert!(update.blocked_eval.is_empty());
    assert!(update.snapshot_index > 0);
    assert!(h.created_evals.is_empty());
    assert_eq!(
        h.snapshot().job_summary("default", "web").unwrap().summary["web"].starting,
        10
    );

    // The RNG and the clock are parameters: the same seed replays the same decisions.
    let (mut again, _) = harness_with_nodes(10);
    let (job2, eval2) = again.register_job(mock_job("web", 10)).unwrap();
    again.process(&eval2).unwrap();
    let placements = |h: &Harness, job: &Job| -> BTreeSet<(String, String, String)> {
        h.running_allocs(job)
            .iter()
            .map(|a| (a.id.to_string(), a.name.clone(), a.node_id.to_string()))
            .collect()
    };
    assert_eq!(placements(&h, &job), placements(&again, &job2));
}

/// Four nodes with distinct attributes; for each operand, the job (with `distinct_hosts`
/// and one more allocation than feasible nodes) must use exactly the expected nodes.
#[test]
fn constraints_filter_nodes_per_operand() {
    let nodes = || {
        vec![
            node_with(0, |n| {
                n.attributes.insert("app.version".into(), "1.2.0".into());
                n.attributes.insert("cpu.numcores".into(), "4".into());
                n.meta.insert("rack".into(), "r1".into());
                n.meta.insert("tags".into(), "a,b".into());
            }),
            node_with(1, |n| {
                n.attributes.insert("app.version".into(), "1.5.3".into());
                n.attributes.insert("cpu.numcores".into(), "8".into());
                n.meta.insert("rack".into(), "r2".into());
                n.meta.insert("tags".into(), "b, c".into());
            }),
            node_with(2, |n| {
                n.attributes.insert("app.version".into(), "2.0.0".into());
                n.attributes.insert("cpu.numcores".into(), "16".into());
                n.meta.insert("rack".into(), "r3".into());
                n.meta.insert("tags".into(), "c".into());
            }),
            node_with(3, |n| {
                n.attributes.insert("cpu.numcores".into(), "2".into());
            }),
        ]
    };
    let cases: &[(&str, &str, &str, &[usize])] = &[
        ("${attr.cpu.numcores}", "=", "8", &[1]),
        ("${attr.cpu.numcores}", "!=", "8", &[0, 2, 3]),
        ("${attr.cpu.numcores}", ">", "4", &[1, 2]),
        ("${attr.cpu.numcores}", ">=", "8", &[1, 2]),
        ("${attr.cpu.numcores}", "<", "8", &[0, 3]),
        ("${attr.cpu.numcores}", "<=", "4", &[0, 3]),
        ("${meta.rack}", "regexp", "^r[12]$", &[0, 1]),
        ("${attr.app.version}", "version", ">= 1.5, < 2.0", &[1]),
        ("${attr.app.version}", "semver", ">= 1.2.0", &[0, 1, 2]),
        ("${meta.tags}", "set_contains", "b", &[0, 1]),
        ("${meta.tags}", "set_contains_any", "a,c", &[0, 1, 2]),
        ("${meta.rack}", "is_set", "", &[0, 1, 2]),
        ("${meta.rack}", "is_not_set", "", &[3]),
        ("${node.unique.name}", "=", "node-2", &[2]),
    ];
    for (l, op, r, expected) in cases {
        let mut h = Harness::new();
        let nodes = nodes();
        for node in &nodes {
            h.register_node(node.clone()).unwrap();
        }
        let job = with_constraint(mock_job("web", expected.len() as u32 + 1), l, op, r);
        let job = with_constraint(job, "", "distinct_hosts", "");
        let (job, eval) = h.register_job(job).unwrap();
        h.process(&eval).unwrap();
        let want: BTreeSet<NodeId> = expected.iter().map(|i| nodes[*i].id.clone()).collect();
        assert_eq!(nodes_used(&h, &job), want, "{l} {op} {r}");
        let failed = &last_update(&h).failed_tg_allocs["web"];
        assert_eq!(failed.nodes_evaluated, 4, "{l} {op} {r}");
        assert_eq!(failed.nodes_filtered, 4, "{l} {op} {r}");
        assert_eq!(
            failed.constraint_filtered.get("distinct_hosts").copied(),
            Some(expected.len() as u64),
            "{l} {op} {r}"
        );
        assert_eq!(
            failed.constraint_filtered.values().sum::<u64>(),
            4,
            "{l} {op} {r}: {:?}",
            failed.constraint_filtered
        );
    }
}

/// Nomad's way with a job that needs what no node has (Consul, a driver, the CNI plugins): it is
/// placed nowhere, its evaluation is blocked, and the failure names what is missing per
/// node; nodes are counted by their own class, and those without one are not.
#[test]
fn a_job_needing_consul_or_a_missing_driver_is_blocked_naming_it() {
    type Needs = fn(&mut Job);
    let cases: [(&str, Needs); 4] = [
        // A bridge group on nodes that advertise no CNI plugin (not root, none installed).
        (
            "${attr.plugins.cni.version.bridge} semver >= 0.4.0",
            |job| {
                job.task_groups_mut()[0].networks =
                    vec![teamster_storage::model::NetworkResource {
                        mode: "bridge".into(),
                        ..Default::default()
                    }];
            },
        ),
        ("${attr.consul.version} semver >= 1.8.0", |job| {
            job.task_groups_mut()[0].services = vec![teamster_storage::model::Service {
                name: "web".into(),
                provider: "consul".into(),
                ..Default::default()
            }];
        }),
        ("missing drivers", |job| {
            job.task_groups_mut()[0].tasks[0].driver = "podman".into();
        }),
        // A named CNI network no client has configured.
        ("missing network", |job| {
            job.task_groups_mut()[0].networks = vec![teamster_storage::model::NetworkResource {
                mode: "cni/lan".into(),
                ..Default::default()
            }];
        }),
    ];
    for (reason, needs) in cases {
        let mut h = Harness::new();
        h.register_node(node_with(0, |n| n.node_class = "edge".into()))
            .unwrap();
        h.register_node(node_with(1, |_| {})).unwrap();
        let mut job = mock_job("web", 2);
        needs(&mut job);
        teamster_storage::model::imply_integration_constraints(&mut job);
        let (job, eval) = h.register_job(job).unwrap();
        h.process(&eval).unwrap();
        assert!(h.running_allocs(&job).is_empty(), "{reason}");
        let failed = &last_update(&h).failed_tg_allocs["web"];
        assert_eq!(
            failed.constraint_filtered,
            BTreeMap::from([(reason.to_owned(), 2)]),
            "{reason}"
        );
        assert_eq!(
            failed.class_filtered,
            BTreeMap::from([("edge".to_owned(), 1)]),
            "{reason}"
        );
        assert_eq!(h.created_evals.len(), 1, "{reason}: a blocked evaluation");
        assert_eq!(h.created_evals[0].status, EvalStatus::Blocked, "{reason}");
    }
}

/// A `cni/<name>` group goes only to the nodes whose clients configured that network.
#[test]
fn a_cni_group_is_placed_only_where_its_network_is() {
    let mut h = Harness::new();
    let with = node_with(0, |n| {
        n.node_resources
            .networks
            .push(teamster_storage::model::NodeNetworkResource {
                mode: "cni/lan".into(),
                ..Default::default()
            });
    });
    let with_id = with.id.clone();
    h.register_node(with).unwrap();
    h.register_node(node_with(1, |_| {})).unwrap();
    let mut job = mock_job("web", 3);
    job.task_groups_mut()[0].networks = vec![teamster_storage::model::NetworkResource {
        mode: "cni/lan".into(),
        ..Default::default()
    }];
    let (job, eval) = h.register_job(job).unwrap();
    h.process(&eval).unwrap();
    let placed = h.running_allocs(&job);
    assert_eq!(placed.len(), 3);
    assert!(placed.iter().all(|a| a.node_id == with_id), "{placed:?}");
}

#[test]
fn binpack_fills_the_busy_node_and_spread_the_idle_one() {
    let choose = |algorithm: SchedulerAlgorithm| -> (NodeId, Vec<NodeId>) {
        let (mut h, nodes) = harness_with_nodes(2);
        h.apply(Command::SchedulerConfig(SchedulerConfigUpdate {
            config: SchedulerConfiguration {
                scheduler_algorithm: algorithm,
                ..SchedulerConfiguration::default()
            },
            cas_index: None,
        }))
        .unwrap();
        let filler = filler_job(&mut h);
        h.upsert_allocs(vec![filler_alloc(&filler, &nodes[0].id, 1, 2000, 4096)])
            .unwrap();
        let (job, eval) = h.register_job(mock_job("web", 1)).unwrap();
        h.process(&eval).unwrap();
        let used = h.running_allocs(&job)[0].node_id.clone();
        (used, nodes.iter().map(|n| n.id.clone()).collect())
    };
    let (binpack, nodes) = choose(SchedulerAlgorithm::Binpack);
    assert_eq!(binpack, nodes[0], "binpack picks the busy node");
    let (spread, nodes) = choose(SchedulerAlgorithm::Spread);
    assert_eq!(spread, nodes[1], "spread picks the idle node");
}

#[test]
fn distinct_hosts_puts_each_allocation_on_its_own_node() {
    let (mut h, _) = harness_with_nodes(5);
    let job = with_constraint(mock_job("web", 5), "", "distinct_hosts", "");
    let (job, eval) = h.register_job(job).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(nodes_used(&h, &job).len(), 5);
    assert_complete(&h, &eval);
    assert!(last_update(&h).failed_tg_allocs.is_empty());

    // One more than there are hosts: the extra one is blocked.
    let mut bigger = (*job).clone();
    bigger.task_groups_mut()[0].count = 6;
    let (job, eval) = h.register_job(bigger).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), 5);
    assert_eq!(nodes_used(&h, &job).len(), 5);
    let update = last_update(&h);
    assert_eq!(update.queued_allocations["web"], 1);
    assert_eq!(
        update.failed_tg_allocs["web"].constraint_filtered["distinct_hosts"],
        5
    );
    assert_eq!(h.created_evals.len(), 1);
}

/// A count far beyond the cluster (here 2³¹, which used to make the reconciler name every
/// allocation up front: gigabytes before the first placement) costs the placements made.
#[test]
fn a_huge_count_costs_the_placements_made_not_the_count_asked() {
    let (mut h, _) = harness_with_nodes(2);
    let count = 1u32 << 31;
    let (job, eval) = h.register_job(mock_job("web", count)).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), 16);
    let update = last_update(&h);
    assert_eq!(update.status, EvalStatus::Complete);
    assert_eq!(update.queued_allocations["web"], u64::from(count) - 16);
    assert_eq!(
        update.failed_tg_allocs["web"].coalesced_failures,
        u64::from(count) - 17
    );
    let names = running_names(&h, &job);
    let expected: BTreeSet<String> = (0..16).map(|i| format!("web.web[{i}]")).collect();
    assert_eq!(names, expected);
}

#[test]
fn a_job_too_big_for_the_cluster_leaves_a_blocked_eval() {
    let (mut h, _) = harness_with_nodes(2);
    // 8 allocations of 500 MHz fill a 4000 MHz node.
    let (job, eval) = h.register_job(mock_job("web", 20)).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), 16);

    assert_eq!(h.created_evals.len(), 1);
    let blocked = h.created_evals[0].clone();
    assert_eq!(blocked.status, EvalStatus::Blocked);
    assert_eq!(blocked.triggered_by, EvalTrigger::QueuedAllocs);
    assert_eq!(blocked.previous_eval, eval.id);
    assert_eq!(blocked.job_id, job.id);
    assert!(!blocked.escaped_computed_class);
    let class = h.snapshot().nodes().next().unwrap().computed_class.clone();
    assert_eq!(blocked.class_eligibility, BTreeMap::from([(class, true)]));
    let metric = &blocked.failed_tg_allocs["web"];
    assert_eq!(metric.nodes_evaluated, 2);
    assert_eq!(metric.nodes_exhausted, 2);
    assert_eq!(metric.dimension_exhausted["cpu"], 2);
    assert_eq!(metric.coalesced_failures, 3);

    let update = last_update(&h);
    assert_eq!(update.status, EvalStatus::Complete);
    assert_eq!(update.blocked_eval, blocked.id);
    assert_eq!(update.queued_allocations["web"], 4);
    assert_eq!(update.failed_tg_allocs["web"].coalesced_failures, 3);
    assert_eq!(
        h.snapshot().eval_by_id(&blocked.id).unwrap().status,
        EvalStatus::Blocked
    );
    assert_eq!(
        h.snapshot().job_summary("default", "web").unwrap().summary["web"].queued,
        4
    );

    // Processing the blocked eval with no new capacity reblocks it; nothing new is created.
    let blocked_eval: Evaluation = (**h.snapshot().eval_by_id(&blocked.id).unwrap()).clone();
    let updates = h.updated_evals.len();
    h.process(&blocked_eval).unwrap();
    assert_eq!(h.reblocked_evals.len(), 1);
    assert_eq!(h.reblocked_evals[0].id, blocked.id);
    assert_eq!(h.reblocked_evals[0].status, EvalStatus::Blocked);
    assert_eq!(h.reblocked_evals[0].queued_allocations["web"], 4);
    assert_eq!(h.created_evals.len(), 1);
    assert_eq!(h.updated_evals.len(), updates);

    // New capacity: the blocked eval places the rest and completes.
    h.register_node(mock_node(7)).unwrap();
    let blocked_eval: Evaluation = (**h.snapshot().eval_by_id(&blocked.id).unwrap()).clone();
    h.process(&blocked_eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), 20);
    assert_complete(&h, &blocked_eval);
    assert_eq!(
        h.snapshot().eval_by_id(&blocked.id).unwrap().status,
        EvalStatus::Complete
    );
}

#[test]
fn a_rejected_plan_is_refreshed_and_then_succeeds() {
    let (mut h, _) = harness_with_nodes(3);
    let filler = filler_job(&mut h);
    let (job, eval) = h.register_job(mock_job("web", 2)).unwrap();
    // Another worker fills the first node this plan uses, just before it is verified.
    let stolen = std::sync::Arc::new(std::sync::Mutex::new(None::<NodeId>));
    let record = stolen.clone();
    h.interfere_before_next_plan(move |plan, _| {
        let node = plan.node_allocation.keys().next().unwrap().clone();
        *record.lock().unwrap() = Some(node.clone());
        vec![Command::ApplyPlanResults(ApplyPlanResults {
            eval_id: Default::default(),
            allocs_updated: vec![filler_alloc(&filler, &node, 1, 4000, 1024)],
            allocs_stopped: Vec::new(),
            allocs_preempted: Vec::new(),
            evals: Vec::new(),
            ineligible_nodes: Vec::new(),
            updated_at: 0,
            deployment: None,
            deployment_updates: Vec::new(),
        })]
    });
    h.process(&eval).unwrap();
    let stolen = stolen.lock().unwrap().clone().unwrap();

    assert_eq!(h.plans.len(), 2, "one refresh, one retry");
    assert_eq!(h.results[0].rejected_nodes, vec![stolen.clone()]);
    assert!(h.results[0].refresh_index > 0);
    assert!(h.results[1].rejected_nodes.is_empty());
    assert_eq!(h.results[1].refresh_index, 0);
    let running = h.running_allocs(&job);
    assert_eq!(running.len(), 2);
    assert!(running.iter().all(|a| a.node_id != stolen));
    assert_eq!(
        running_names(&h, &job),
        BTreeSet::from(["web.web[0]".to_string(), "web.web[1]".to_string()])
    );
    assert_complete(&h, &eval);
}

#[test]
fn scale_down_stops_the_highest_indexes_and_updates_the_rest_in_place() {
    let (mut h, _) = harness_with_nodes(5);
    let (job, eval) = h.register_job(mock_job("web", 5)).unwrap();
    h.process(&eval).unwrap();
    let before: BTreeMap<String, String> = h
        .running_allocs(&job)
        .iter()
        .map(|a| (a.name.clone(), a.id.to_string()))
        .collect();

    let mut smaller = (*job).clone();
    smaller.task_groups_mut()[0].count = 2;
    let (job, eval) = h.register_job(smaller).unwrap();
    assert_eq!(job.version, 1);
    h.process(&eval).unwrap();

    let plan = h.plans.last().unwrap();
    let stopped: BTreeSet<String> = plan
        .node_update
        .values()
        .flatten()
        .map(|s| {
            assert_eq!(s.desired_description, ALLOC_NOT_NEEDED);
            h.snapshot().alloc_by_id(&s.id).unwrap().name.clone()
        })
        .collect();
    assert_eq!(
        stopped,
        BTreeSet::from([
            "web.web[2]".to_string(),
            "web.web[3]".to_string(),
            "web.web[4]".to_string()
        ])
    );
    let running = h.running_allocs(&job);
    assert_eq!(running.len(), 2);
    for alloc in &running {
        assert_eq!(alloc.id.as_str(), before[&alloc.name], "updated in place");
        assert_eq!(alloc.job_version, 1);
    }
    assert_complete(&h, &eval);
}

#[test]
fn allocations_on_a_down_node_are_lost_and_replaced() {
    let (mut h, _) = harness_with_nodes(3);
    let (job, eval) = h.register_job(mock_job("web", 3)).unwrap();
    h.process(&eval).unwrap();
    let victim = h
        .running_allocs(&job)
        .into_iter()
        .find(|a| a.name == "web.web[0]")
        .unwrap();
    let down = victim.node_id.clone();
    h.apply(Command::NodeUpdateStatus(NodeUpdateStatus {
        node_id: down.clone(),
        status: NodeStatus::Down,
        updated_at: 1,
        evals: Vec::new(),
    }))
    .unwrap();
    let eval = h
        .create_pending_eval(&job, EvalTrigger::NodeUpdate, Some(&down))
        .unwrap();
    h.process(&eval).unwrap();

    let snap = h.snapshot();
    let lost = snap.alloc_by_id(&victim.id).unwrap();
    assert_eq!(lost.client_status, ClientStatus::Lost);
    assert_eq!(lost.desired_status, DesiredStatus::Stop);
    assert_eq!(lost.desired_description, ALLOC_LOST);
    let running = h.running_allocs(&job);
    assert_eq!(running.len(), 3);
    assert!(running.iter().all(|a| a.node_id != down));
    let replacement = running.iter().find(|a| a.name == "web.web[0]").unwrap();
    assert_eq!(replacement.previous_allocation, victim.id);
    assert_eq!(lost.next_allocation, replacement.id);
    assert_complete(&h, &eval);
}

/// What `Alloc.Stop` writes: the allocation marked to migrate (the evaluation is made by the
/// test).
pub(super) fn mark_migrate(h: &mut Harness, alloc: &Allocation) {
    h.apply(Command::AllocUpdateDesiredTransition(
        AllocUpdateDesiredTransition {
            allocs: [(
                alloc.id.clone(),
                DesiredTransition {
                    migrate: Some(true),
                    reschedule: None,
                },
            )]
            .into(),
            evals: Vec::new(),
        },
    ))
    .unwrap();
}

#[test]
fn an_allocation_marked_to_migrate_is_stopped_and_replaced() {
    let (mut h, _) = harness_with_nodes(3);
    let (job, eval) = h.register_job(mock_job("web", 3)).unwrap();
    h.process(&eval).unwrap();
    let victim = h
        .running_allocs(&job)
        .into_iter()
        .find(|a| a.name == "web.web[1]")
        .unwrap();
    mark_migrate(&mut h, &victim);
    assert!(h
        .snapshot()
        .alloc_by_id(&victim.id)
        .unwrap()
        .desired_transition
        .should_migrate());
    let eval = h
        .create_pending_eval(&job, EvalTrigger::AllocStop, None)
        .unwrap();
    h.process(&eval).unwrap();

    let snap = h.snapshot();
    let stopped = snap.alloc_by_id(&victim.id).unwrap();
    assert_eq!(stopped.desired_status, DesiredStatus::Stop);
    assert_eq!(stopped.desired_description, ALLOC_MIGRATING);
    assert_ne!(stopped.client_status, ClientStatus::Lost);
    let running = h.running_allocs(&job);
    assert_eq!(running.len(), 3);
    let replacement = running.iter().find(|a| a.name == "web.web[1]").unwrap();
    assert_ne!(replacement.id, victim.id);
    assert_eq!(replacement.previous_allocation, victim.id);
    assert!(!replacement.desired_transition.should_migrate());
    assert_eq!(stopped.next_allocation, replacement.id);
    assert_complete(&h, &eval);

    // The stopped allocation is done with: evaluating again changes nothing.
    let plans = h.plans.len();
    let again = h
        .create_pending_eval(&job, EvalTrigger::JobRegister, None)
        .unwrap();
    h.process(&again).unwrap();
    assert_eq!(h.plans.len(), plans, "{:?}", h.plans.last());
    assert_eq!(h.running_allocs(&job).len(), 3);
}

#[test]
fn failed_allocations_are_rescheduled_after_their_delay() {
    let (mut h, _) = harness_with_nodes(3);
    let (job, eval) = h.register_job(mock_job("web", 1)).unwrap();
    h.process(&eval).unwrap();
    // The first deployment ends (an active one decides itself when its failed allocations
    // are replaced).
    h.settle_deployment(&job).unwrap();
    let first = h.running_allocs(&job)[0].clone();
    h.client_update(std::slice::from_ref(&first.id), ClientStatus::Failed, h.now)
        .unwrap();

    // Service default: 30 s exponential delay, unlimited. Not due yet: a follow-up eval.
    let eval = h
        .create_pending_eval(&job, EvalTrigger::AllocFailure, None)
        .unwrap();
    let plans = h.plans.len();
    h.process(&eval).unwrap();
    assert_eq!(h.created_evals.len(), 1);
    let followup = h.created_evals[0].clone();
    assert_eq!(followup.status, EvalStatus::Pending);
    assert_eq!(followup.triggered_by, EvalTrigger::AllocFailure);
    assert_eq!(followup.previous_eval, eval.id);
    assert_eq!(followup.wait_until.unix_nanos(), Some(h.now + 30 * SECOND));
    assert_eq!(
        h.plans.len(),
        plans + 1,
        "the follow-up is recorded on the alloc"
    );
    assert_eq!(
        h.snapshot()
            .alloc_by_id(&first.id)
            .unwrap()
            .followup_eval_id,
        followup.id
    );
    assert!(h.running_allocs(&job).is_empty());
    assert!(
        last_update(&h).failed_tg_allocs.is_empty(),
        "waiting is not failing"
    );

    // Due: the follow-up replaces it, away from the node it failed on.
    h.now += 31 * SECOND;
    let followup: Evaluation = (**h.snapshot().eval_by_id(&followup.id).unwrap()).clone();
    h.process(&followup).unwrap();
    let running = h.running_allocs(&job);
    assert_eq!(running.len(), 1);
    let second = &running[0];
    assert_eq!(second.name, first.name);
    assert_eq!(second.previous_allocation, first.id);
    assert_ne!(second.node_id, first.node_id, "rescheduling penalty");
    let tracker = second.reschedule_tracker.as_ref().unwrap();
    assert_eq!(tracker.events.len(), 1);
    assert_eq!(tracker.events[0].prev_alloc_id, first.id);
    assert_eq!(tracker.events[0].delay, 30 * SECOND as u64);
    let old = h.snapshot().alloc_by_id(&first.id).unwrap().clone();
    assert_eq!(old.desired_status, DesiredStatus::Stop);
    assert_eq!(old.desired_description, ALLOC_RESCHEDULED);
    assert_complete(&h, &followup);
}

#[test]
fn batch_reschedules_stop_when_attempts_are_used() {
    let (mut h, _) = harness_with_nodes(2);
    // Batch default: 1 attempt per 24 h, 5 s constant delay.
    let (job, eval) = h.register_job(mock_batch_job("crunch", 1)).unwrap();
    h.process(&eval).unwrap();
    let first = h.running_allocs(&job)[0].clone();
    h.client_update(std::slice::from_ref(&first.id), ClientStatus::Failed, h.now)
        .unwrap();
    h.now += 6 * SECOND;
    let eval = h
        .create_pending_eval(&job, EvalTrigger::AllocFailure, None)
        .unwrap();
    h.process(&eval).unwrap();
    let second = h.running_allocs(&job)[0].clone();
    assert_eq!(second.previous_allocation, first.id);

    h.client_update(
        std::slice::from_ref(&second.id),
        ClientStatus::Failed,
        h.now,
    )
    .unwrap();
    h.now += 6 * SECOND;
    let eval = h
        .create_pending_eval(&job, EvalTrigger::AllocFailure, None)
        .unwrap();
    let (plans, created) = (h.plans.len(), h.created_evals.len());
    h.process(&eval).unwrap();
    assert!(h.running_allocs(&job).is_empty(), "no attempts left");
    assert_eq!(h.plans.len(), plans, "nothing to do");
    assert_eq!(h.created_evals.len(), created);
    assert_complete(&h, &eval);

    // A batch allocation that completed counts: nothing is placed again.
    let (job, eval) = h.register_job(mock_batch_job("once", 1)).unwrap();
    h.process(&eval).unwrap();
    let done = h.running_allocs(&job)[0].clone();
    h.client_update(
        std::slice::from_ref(&done.id),
        ClientStatus::Complete,
        h.now,
    )
    .unwrap();
    let eval = h
        .create_pending_eval(&job, EvalTrigger::NodeUpdate, None)
        .unwrap();
    let plans = h.plans.len();
    h.process(&eval).unwrap();
    assert_eq!(h.plans.len(), plans);
}

#[test]
fn job_changes_update_in_place_or_destructively() {
    let (mut h, _) = harness_with_nodes(4);
    // Rolling four at a time: every update happens in one plan.
    let mut web = mock_job("web", 3);
    web.task_groups_mut()[0]
        .update
        .as_mut()
        .unwrap()
        .max_parallel = Some(4);
    let (job, eval) = h.register_job(web).unwrap();
    h.process(&eval).unwrap();
    let original: BTreeSet<String> = h
        .running_allocs(&job)
        .iter()
        .map(|a| a.id.to_string())
        .collect();

    // Scaling up is not a task change: the three move to version 1 in place.
    let mut scaled = (*job).clone();
    scaled.task_groups_mut()[0].count = 4;
    let (job, eval) = h.register_job(scaled).unwrap();
    h.process(&eval).unwrap();
    let running = h.running_allocs(&job);
    assert_eq!(running.len(), 4);
    assert!(running.iter().all(|a| a.job_version == 1));
    let kept: BTreeSet<String> = running.iter().map(|a| a.id.to_string()).collect();
    assert!(original.is_subset(&kept));
    assert!(h.plans.last().unwrap().node_update.is_empty());

    // The job's ui block neither: version 2 in place.
    let mut described = (*job).clone();
    described.ui = Some(teamster_storage::model::JobUiConfig {
        description: "the shop".into(),
        links: Vec::new(),
    });
    let (job, eval) = h.register_job(described).unwrap();
    h.process(&eval).unwrap();
    let running = h.running_allocs(&job);
    assert!(running.iter().all(|a| a.job_version == 2));
    assert_eq!(
        running
            .iter()
            .map(|a| a.id.to_string())
            .collect::<BTreeSet<_>>(),
        kept
    );
    assert!(h.plans.last().unwrap().node_update.is_empty());

    // A resource change is destructive: stop and replace each, keeping the names.
    let mut bigger = (*job).clone();
    bigger.task_groups_mut()[0].tasks[0].resources.cpu = 600;
    let (job, eval) = h.register_job(bigger).unwrap();
    h.process(&eval).unwrap();
    let plan = h.plans.last().unwrap();
    let stops: Vec<_> = plan.node_update.values().flatten().collect();
    assert_eq!(stops.len(), 4);
    assert!(stops
        .iter()
        .all(|s| s.desired_description == ALLOC_UPDATING));
    let running = h.running_allocs(&job);
    assert_eq!(running.len(), 4);
    for alloc in &running {
        assert_eq!(alloc.job_version, 3);
        assert_eq!(alloc.resources.cpu, 600);
        assert!(kept.contains(alloc.previous_allocation.as_str()));
    }
    assert_eq!(
        running_names(&h, &job),
        (0..4).map(|i| format!("web.web[{i}]")).collect()
    );
}

#[test]
fn a_sticky_disk_s_replacement_goes_back_to_its_node() {
    let (mut h, _) = harness_with_nodes(20);
    let mut web = mock_job("web", 3);
    let group = &mut web.task_groups_mut()[0];
    group.update.as_mut().unwrap().max_parallel = Some(3);
    group.ephemeral_disk = Some(teamster_storage::model::EphemeralDisk {
        sticky: true,
        ..Default::default()
    });
    let (job, eval) = h.register_job(web).unwrap();
    h.process(&eval).unwrap();
    let before: BTreeMap<String, NodeId> = h
        .running_allocs(&job)
        .iter()
        .map(|a| (a.id.to_string(), a.node_id.clone()))
        .collect();
    assert_eq!(before.len(), 3);
    // A destructive update: each replacement lands where its previous allocation ran.
    let mut bigger = (*job).clone();
    bigger.task_groups_mut()[0].tasks[0].resources.cpu = 600;
    let (job, eval) = h.register_job(bigger).unwrap();
    h.process(&eval).unwrap();
    let running = h.running_allocs(&job);
    assert_eq!(running.len(), 3);
    for alloc in &running {
        assert_eq!(alloc.job_version, 1);
        let previous_node = &before[alloc.previous_allocation.as_str()];
        assert_eq!(&alloc.node_id, previous_node, "{}", alloc.name);
    }
}

#[test]
fn stopping_a_job_stops_everything() {
    let (mut h, _) = harness_with_nodes(3);
    let (job, eval) = h.register_job(mock_job("web", 3)).unwrap();
    h.process(&eval).unwrap();
    let stop_eval = Evaluation {
        id: h.next_eval_id().into(),
        namespace: job.namespace.clone(),
        priority: job.priority,
        eval_type: job.job_type,
        triggered_by: EvalTrigger::JobDeregister,
        job_id: job.id.clone(),
        status: EvalStatus::Pending,
        ..Evaluation::default()
    };
    h.apply(Command::JobDeregister(JobDeregister {
        namespace: job.namespace.clone(),
        job_id: job.id.clone(),
        purge: false,
        eval: Some(stop_eval.clone()),
        submit_time: 0,
        tracked_versions: 0,
    }))
    .unwrap();
    let stop_eval: Evaluation = (**h.snapshot().eval_by_id(&stop_eval.id).unwrap()).clone();
    h.process(&stop_eval).unwrap();
    assert!(h.running_allocs(&job).is_empty());
    let plan = h.plans.last().unwrap();
    assert_eq!(plan.node_update.values().flatten().count(), 3);
    assert!(plan.node_allocation.is_empty());
    assert_complete(&h, &stop_eval);
}

#[test]
fn plan_attempts_without_progress_fail_the_eval() {
    let (mut h, _) = harness_with_nodes(2);
    let filler = filler_job(&mut h);
    let (job, eval) = h.register_job(mock_batch_job("crunch", 1)).unwrap();
    for n in 0..2 {
        let filler = filler.clone();
        h.interfere_before_next_plan(move |plan, _| {
            let node = plan.node_allocation.keys().next().unwrap().clone();
            vec![Command::ApplyPlanResults(ApplyPlanResults {
                eval_id: Default::default(),
                allocs_updated: vec![filler_alloc(&filler, &node, 10 + n, 4000, 8192)],
                allocs_stopped: Vec::new(),
                allocs_preempted: Vec::new(),
                evals: Vec::new(),
                ineligible_nodes: Vec::new(),
                updated_at: 0,
                deployment: None,
                deployment_updates: Vec::new(),
            })]
        });
    }
    h.process(&eval).unwrap();
    assert_eq!(h.plans.len(), 2, "batch: two attempts");
    assert!(h.running_allocs(&job).is_empty());
    let update = last_update(&h);
    assert_eq!(update.status, EvalStatus::Failed);
    assert_eq!(update.status_description, "maximum attempts reached (2)");
    assert_eq!(h.created_evals.len(), 1);
    let blocked = &h.created_evals[0];
    assert_eq!(blocked.triggered_by, EvalTrigger::MaxPlanAttempts);
    assert_eq!(blocked.status, EvalStatus::Blocked);
    assert_eq!(update.blocked_eval, blocked.id);
}

#[test]
fn affinities_attract_and_spreads_balance() {
    let rack_nodes = |per_rack: u64| {
        let mut h = Harness::new();
        for n in 0..per_rack * 2 {
            let rack = if n < per_rack { "r1" } else { "r2" };
            h.register_node(node_with(n, |node| {
                node.meta.insert("rack".into(), rack.into());
            }))
            .unwrap();
        }
        h
    };
    let racks_of = |h: &Harness, job: &Job| -> BTreeMap<String, usize> {
        let snap = h.snapshot();
        let mut racks = BTreeMap::new();
        for alloc in h.running_allocs(job) {
            let rack = snap.node_by_id(&alloc.node_id).unwrap().meta["rack"].clone();
            *racks.entry(rack).or_default() += 1;
        }
        racks
    };

    let mut h = rack_nodes(2);
    let mut job = mock_job("web", 2);
    job.affinities.push(Affinity {
        l_target: "${meta.rack}".into(),
        r_target: "r1".into(),
        operand: "=".into(),
        weight: 100,
    });
    let (job, eval) = h.register_job(job).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(racks_of(&h, &job), BTreeMap::from([("r1".into(), 2)]));
    assert_eq!(nodes_used(&h, &job).len(), 2, "anti-affinity within r1");

    let mut h = rack_nodes(4);
    let mut job = mock_job("web", 4);
    job.task_groups_mut()[0].spreads.push(Spread {
        attribute: "${meta.rack}".into(),
        weight: 100,
        spread_target: vec![
            SpreadTarget {
                value: "r1".into(),
                percent: 50,
            },
            SpreadTarget {
                value: "r2".into(),
                percent: 50,
            },
        ],
    });
    let (job, eval) = h.register_job(job).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(
        racks_of(&h, &job),
        BTreeMap::from([("r1".into(), 2), ("r2".into(), 2)])
    );

    let mut h = rack_nodes(4);
    let mut job = mock_job("web", 4);
    job.task_groups_mut()[0].spreads.push(Spread {
        attribute: "${meta.rack}".into(),
        weight: 50,
        spread_target: Vec::new(),
    });
    let (job, eval) = h.register_job(job).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(
        racks_of(&h, &job),
        BTreeMap::from([("r1".into(), 2), ("r2".into(), 2)]),
        "even spread"
    );
}

#[test]
fn distinct_property_caps_allocations_per_value() {
    let mut h = Harness::new();
    for n in 0..4 {
        let rack = if n % 2 == 0 { "r1" } else { "r2" };
        h.register_node(node_with(n, |node| {
            node.meta.insert("rack".into(), rack.into());
        }))
        .unwrap();
    }
    let mut job = mock_job("web", 3);
    job.task_groups_mut()[0].constraints.push(Constraint::new(
        "${meta.rack}",
        "distinct_property",
        "",
    ));
    let (job, eval) = h.register_job(job).unwrap();
    h.process(&eval).unwrap();
    let snap = h.snapshot();
    let racks: BTreeSet<String> = h
        .running_allocs(&job)
        .iter()
        .map(|a| snap.node_by_id(&a.node_id).unwrap().meta["rack"].clone())
        .collect();
    assert_eq!(h.running_allocs(&job).len(), 2);
    assert_eq!(racks.len(), 2);
    assert_eq!(last_update(&h).queued_allocations["web"], 1);
}

#[test]
fn constraints_on_unique_attributes_escape_class_caching() {
    let (mut h, nodes) = harness_with_nodes(4);
    let job = with_constraint(mock_job("web", 2), "${attr.unique.hostname}", "=", "node-2");
    let (job, eval) = h.register_job(job).unwrap();
    h.process(&eval).unwrap();
    // All nodes share one class; only the escaped check tells them apart.
    assert_eq!(nodes_used(&h, &job), BTreeSet::from([nodes[2].id.clone()]));
    let update = last_update(&h);
    assert!(update.escaped_computed_class);
    assert_eq!(update.queued_allocations["web"], 0);
    let full = with_constraint(
        mock_job("pinned", 9),
        "${attr.unique.hostname}",
        "=",
        "node-3",
    );
    let (_, eval) = h.register_job(full).unwrap();
    h.process(&eval).unwrap();
    let blocked = h.created_evals.last().unwrap();
    assert!(blocked.escaped_computed_class);
    assert!(blocked.class_eligibility.is_empty());
}

#[test]
fn core_evaluations_have_no_placement_scheduler() {
    let mut h = Harness::new();
    let eval = Evaluation {
        id: h.next_eval_id().into(),
        eval_type: teamster_storage::model::JobType::Core,
        ..Evaluation::default()
    };
    assert!(matches!(
        h.process(&eval),
        Err(SchedulerError::UnsupportedType { .. })
    ));
    h.settings.service_max_attempts = 0;
    let (_, eval) = h.register_job(mock_job("web", 1)).unwrap();
    assert!(matches!(
        h.process(&eval),
        Err(SchedulerError::InvalidSettings(_))
    ));
}

/// Starts a drain of `node` (no deadline), as `Node.UpdateDrain` writes it.
pub(super) fn start_drain(h: &mut Harness, node: &NodeId) {
    h.apply(Command::NodeUpdateDrain(NodeUpdateDrain {
        node_id: node.clone(),
        drain_strategy: Some(teamster_storage::model::DrainStrategy::default()),
        mark_eligible: false,
        updated_at: 1,
        evals: Vec::new(),
        meta: None,
    }))
    .unwrap();
}

#[test]
fn allocations_on_a_draining_node_stay_until_the_drainer_marks_them() {
    let (mut h, _) = harness_with_nodes(3);
    let (job, eval) = h.register_job(mock_job("web", 3)).unwrap();
    h.process(&eval).unwrap();
    let victim = h
        .running_allocs(&job)
        .into_iter()
        .find(|a| a.name == "web.web[2]")
        .unwrap();
    start_drain(&mut h, &victim.node_id);
    // Unmarked: untainted, left where it runs (Nomad's reconciler); nothing to plan.
    let plans = h.plans.len();
    let eval = h
        .create_pending_eval(&job, EvalTrigger::NodeDrain, None)
        .unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.plans.len(), plans, "{:?}", h.plans.last());
    assert!(h.running_allocs(&job).iter().any(|a| a.id == victim.id));
    // Marked: stopped and replaced on another node.
    mark_migrate(&mut h, &victim);
    let eval = h
        .create_pending_eval(&job, EvalTrigger::NodeDrain, None)
        .unwrap();
    h.process(&eval).unwrap();
    let stopped = h.snapshot().alloc_by_id(&victim.id).cloned().unwrap();
    assert_eq!(stopped.desired_status, DesiredStatus::Stop);
    assert_eq!(stopped.desired_description, ALLOC_MIGRATING);
    let running = h.running_allocs(&job);
    assert_eq!(running.len(), 3);
    assert!(running.iter().all(|a| a.node_id != victim.node_id));
    assert_complete(&h, &eval);
}

#[test]
fn memory_max_applies_only_with_memory_oversubscription_on() {
    let place = |enabled: bool| -> Resources {
        let (mut h, _) = harness_with_nodes(1);
        h.apply(Command::SchedulerConfig(SchedulerConfigUpdate {
            config: SchedulerConfiguration {
                memory_oversubscription_enabled: enabled,
                ..SchedulerConfiguration::default()
            },
            cas_index: None,
        }))
        .unwrap();
        // More than the node has: only `memory` counts in the fit.
        let mut job = mock_job("web", 1);
        let resources = &mut job.task_groups_mut()[0].tasks[0].resources;
        resources.memory_mb = 256;
        resources.memory_max_mb = 16384;
        let (job, eval) = h.register_job(job).unwrap();
        h.process(&eval).unwrap();
        let placed = h.running_allocs(&job);
        assert_eq!(placed.len(), 1, "placed on memory, not memory_max");
        placed[0].resources
    };
    let off = place(false);
    assert_eq!(
        off.memory_max_mb, 0,
        "off: the node is told memory_max does not apply"
    );
    assert_eq!(off.memory_mb, 256);
    let on = place(true);
    assert_eq!(on.memory_max_mb, 16384);
}
