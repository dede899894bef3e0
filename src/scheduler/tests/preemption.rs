//! Preemption against the harness: who may be evicted (never an equal or higher priority,
//! never within ten points), which set is chosen (lowest priority, then fewest), what the
//! plan, the state and the evicted job's follow-up evaluation look like, the configuration
//! per scheduler, and `job plan`.

use std::collections::BTreeSet;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::SeedableRng;
use teamster_storage::fsm::{Command, SchedulerConfigUpdate};
use teamster_storage::model::{
    AllocId, Allocation, DesiredStatus, EvalStatus, EvalTrigger, Job, JobType, NodeId,
    PreemptionConfig, SchedulerConfiguration,
};

use super::*;
use crate::scheduler::annotate::dry_run;
use crate::scheduler::harness::{mock_batch_job, mock_system_job};
use crate::scheduler::SchedulerSettings;

/// Turns preemption on for every scheduler (or off, with `false`).
fn preemption(h: &mut Harness, on: bool) {
    h.apply(Command::SchedulerConfig(SchedulerConfigUpdate {
        config: SchedulerConfiguration {
            preemption_config: PreemptionConfig {
                system_scheduler_enabled: on,
                sys_batch_scheduler_enabled: on,
                batch_scheduler_enabled: on,
                service_scheduler_enabled: on,
            },
            ..SchedulerConfiguration::default()
        },
        cas_index: None,
    }))
    .unwrap();
}

/// A job `id` of priority `priority` holding only allocations the test adds.
fn low_job(h: &mut Harness, id: &str, priority: u32) -> Arc<Job> {
    let mut job = mock_job(id, 0);
    job.priority = priority;
    h.register_job(job).expect("registers").0
}

/// A running allocation `n` of `job` on `node` taking `cpu` MHz (and 256 MB).
fn running_alloc(job: &Job, node: &NodeId, n: u64, cpu: u64) -> Allocation {
    Allocation {
        id: AllocId::new(fixture_uuid(7, n)),
        name: format!("{}.web[{n}]", job.id),
        ..filler_alloc(job, node, n, cpu, 256)
    }
}

/// A job `id` at `priority` whose `count` running allocations of `cpu` MHz each fill
/// `node` (the test adds them; the job itself asks for none).
fn fill_node(
    h: &mut Harness,
    node: &NodeId,
    id: &str,
    priority: u32,
    count: u64,
    cpu: u64,
) -> Arc<Job> {
    let job = low_job(h, id, priority);
    h.upsert_allocs(
        (0..count)
            .map(|n| running_alloc(&job, node, n, cpu))
            .collect(),
    )
    .unwrap();
    job
}

/// A job of `count` allocations asking `cpu` MHz each, at `priority`.
fn big_job(id: &str, count: u32, cpu: u64, priority: u32) -> Job {
    let mut job = mock_job(id, count);
    job.priority = priority;
    job.task_groups_mut()[0].tasks[0].resources.cpu = cpu;
    job.canonicalize();
    job
}

/// The allocations the state marks evicted.
fn evicted(h: &Harness) -> BTreeSet<AllocId> {
    h.snapshot()
        .allocs()
        .filter(|a| a.desired_status == DesiredStatus::Evict)
        .map(|a| a.id.clone())
        .collect()
}

fn ids(allocs: &[&Allocation]) -> BTreeSet<AllocId> {
    allocs.iter().map(|a| a.id.clone()).collect()
}

#[test]
fn a_service_job_evicts_lower_priority_work_when_enabled() {
    let (mut h, nodes) = harness_with_nodes(1);
    preemption(&mut h, true);
    // Four 1000 MHz allocations of a priority-20 job fill the 4000 MHz node.
    let (low, low_eval) = h.register_job(big_job("low", 4, 1000, 20)).unwrap();
    h.process(&low_eval).unwrap();
    assert_eq!(h.running_allocs(&low).len(), 4);

    let (job, eval) = h.register_job(big_job("high", 1, 1500, 70)).unwrap();
    h.process(&eval).unwrap();
    assert_complete(&h, &eval);

    let placed = h.running_allocs(&job);
    assert_eq!(placed.len(), 1);
    let placed = &placed[0];
    assert_eq!(placed.node_id, nodes[0].id);
    // 1500 MHz on the full node: two 1000 MHz allocations make room, not one or three.
    assert_eq!(placed.preempted_allocations.len(), 2, "{placed:?}");
    let gone = evicted(&h);
    assert_eq!(
        gone,
        placed.preempted_allocations.iter().cloned().collect(),
        "the state evicts exactly what the allocation lists"
    );
    let snapshot = h.snapshot();
    for id in &gone {
        let victim = snapshot.alloc_by_id(id).unwrap();
        assert_eq!(victim.job_id, low.id);
        assert_eq!(victim.preempted_by_allocation, placed.id);
        assert_eq!(
            victim.desired_description,
            format!("Preempted by alloc ID {}", placed.id)
        );
    }
    assert_eq!(h.running_allocs(&low).len(), 2);
    // The plan carried the evictions and one evaluation for the evicted job.
    let plan = h.plans.last().unwrap();
    assert_eq!(plan.node_preemptions[&nodes[0].id].len(), 2);
    assert_eq!(plan.preemption_evals.len(), 1);
    let followup = snapshot
        .eval_by_id(&plan.preemption_evals[0].id)
        .expect("the follow-up evaluation is committed with the plan");
    assert_eq!(followup.job_id, low.id);
    assert_eq!(followup.triggered_by, EvalTrigger::Preemption);
    assert_eq!(followup.status, EvalStatus::Pending);
    assert_eq!(followup.priority, 20);
    assert_eq!(followup.previous_eval, eval.id);

    // The evicted job's evaluation tries to replace them, finds no room and blocks; a lower
    // priority never takes the room back by preempting.
    let followup = (**followup).clone();
    h.process(&followup).unwrap();
    let update = last_update(&h);
    assert_eq!(update.id, followup.id);
    assert_eq!(update.queued_allocations["web"], 2, "{update:?}");
    assert!(h
        .created_evals
        .iter()
        .any(|e| e.status == EvalStatus::Blocked && e.job_id == low.id));
    assert_eq!(evicted(&h), gone);
    assert_eq!(h.running_allocs(&job).len(), 1);
}

#[test]
fn nothing_is_preempted_when_the_scheduler_is_not_enabled() {
    // Nomad's defaults: only the system scheduler preempts.
    let (mut h, nodes) = harness_with_nodes(1);
    fill_node(&mut h, &nodes[0].id, "low", 20, 4, 1000);
    for (job, eval_type) in [
        (big_job("service", 1, 1500, 90), JobType::Service),
        (
            {
                let mut j = big_job("batch", 1, 1500, 90);
                j.retype(JobType::Batch);
                j
            },
            JobType::Batch,
        ),
    ] {
        let (job, eval) = h.register_job(job).unwrap();
        assert_eq!(eval.eval_type, eval_type);
        h.process(&eval).unwrap();
        assert!(h.running_allocs(&job).is_empty());
        assert_eq!(last_update(&h).queued_allocations["web"], 1);
        assert!(last_update(&h).failed_tg_allocs["web"].dimension_exhausted["cpu"] > 0);
    }
    assert!(evicted(&h).is_empty());
    // Turned off for every scheduler, a system job does not preempt either.
    preemption(&mut h, false);
    let mut system = mock_system_job("agent");
    system.priority = 90;
    system.task_groups_mut()[0].tasks[0].resources.cpu = 1500;
    let (system, eval) = h.register_job(system).unwrap();
    h.process(&eval).unwrap();
    assert!(h.running_allocs(&system).is_empty());
    assert!(evicted(&h).is_empty());
}

#[test]
fn a_system_job_preempts_by_default() {
    let (mut h, nodes) = harness_with_nodes(2);
    // Node 0 is full of low-priority work; node 1 has room.
    fill_node(&mut h, &nodes[0].id, "low", 30, 4, 1000);
    let mut job = mock_system_job("agent");
    job.priority = 80;
    let (job, eval) = h.register_job(job).unwrap();
    h.process(&eval).unwrap();
    assert_complete(&h, &eval);
    assert_eq!(nodes_used(&h, &job).len(), 2, "one on every node");
    let gone = evicted(&h);
    assert_eq!(gone.len(), 1, "500 MHz needs one 1000 MHz eviction");
    let victim = h.snapshot().alloc_by_id(gone.first().unwrap()).cloned();
    assert_eq!(victim.unwrap().node_id, nodes[0].id);
    assert!(h
        .created_evals
        .iter()
        .all(|e| e.status != EvalStatus::Blocked));
}

#[test]
fn equal_higher_and_near_priorities_are_never_preempted() {
    for victim_priority in [61, 65, 70, 90] {
        let (mut h, nodes) = harness_with_nodes(1);
        preemption(&mut h, true);
        fill_node(&mut h, &nodes[0].id, "other", victim_priority, 4, 1000);
        let (job, eval) = h.register_job(big_job("high", 1, 1000, 70)).unwrap();
        h.process(&eval).unwrap();
        assert!(
            h.running_allocs(&job).is_empty(),
            "priority {victim_priority} must not be evicted by 70"
        );
        assert!(evicted(&h).is_empty());
        assert_eq!(last_update(&h).queued_allocations["web"], 1);
    }
    // Exactly ten points below may be.
    let (mut h, nodes) = harness_with_nodes(1);
    preemption(&mut h, true);
    fill_node(&mut h, &nodes[0].id, "other", 60, 4, 1000);
    let (job, eval) = h.register_job(big_job("high", 1, 1000, 70)).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), 1);
    assert_eq!(evicted(&h).len(), 1);
}

#[test]
fn the_job_never_preempts_itself() {
    let (mut h, _) = harness_with_nodes(1);
    preemption(&mut h, true);
    // 8 × 500 MHz fill the node; the ninth of the same job cannot evict a sibling.
    let (job, eval) = h.register_job(big_job("web", 9, 500, 90)).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), 8);
    assert!(evicted(&h).is_empty());
}

#[test]
fn the_lowest_priority_goes_first_then_the_fewest_evictions() {
    let (mut h, nodes) = harness_with_nodes(1);
    preemption(&mut h, true);
    let lowest = low_job(&mut h, "lowest", 10);
    let middle = low_job(&mut h, "middle", 30);
    // 4000 MHz: lowest holds 2 × 500 and 1 × 1000, middle 1 × 2000.
    let a = running_alloc(&lowest, &nodes[0].id, 1, 500);
    let b = running_alloc(&lowest, &nodes[0].id, 2, 500);
    let c = running_alloc(&lowest, &nodes[0].id, 3, 1000);
    let d = running_alloc(&middle, &nodes[0].id, 4, 2000);
    h.upsert_allocs(vec![a.clone(), b.clone(), c.clone(), d.clone()])
        .unwrap();

    // 1000 MHz: one eviction of the lowest priority (c), not two (a and b), not middle's.
    let (job, eval) = h.register_job(big_job("one", 1, 1000, 90)).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), 1);
    assert_eq!(evicted(&h), ids(&[&c]));

    // 1000 MHz more: the rest of the lowest priority (a and b, two evictions) rather than
    // middle's one allocation (one eviction, higher priority).
    let (job, eval) = h.register_job(big_job("two", 1, 1000, 90)).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), 1);
    assert_eq!(evicted(&h), ids(&[&a, &b, &c]));

    // Only middle's is left: 2000 MHz takes it.
    let (job, eval) = h.register_job(big_job("three", 1, 2000, 90)).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), 1);
    assert_eq!(evicted(&h), ids(&[&a, &b, &c, &d]));
}

#[test]
fn a_node_with_room_is_chosen_over_one_that_needs_evictions() {
    let (mut h, nodes) = harness_with_nodes(2);
    preemption(&mut h, true);
    fill_node(&mut h, &nodes[0].id, "low", 10, 4, 1000);
    let (job, eval) = h.register_job(big_job("high", 1, 1000, 90)).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(nodes_used(&h, &job), BTreeSet::from([nodes[1].id.clone()]));
    assert!(evicted(&h).is_empty());
}

#[test]
fn batch_jobs_preempt_when_their_scheduler_is_enabled() {
    let (mut h, nodes) = harness_with_nodes(1);
    h.apply(Command::SchedulerConfig(SchedulerConfigUpdate {
        config: SchedulerConfiguration {
            preemption_config: PreemptionConfig {
                batch_scheduler_enabled: true,
                ..PreemptionConfig::default()
            },
            ..SchedulerConfiguration::default()
        },
        cas_index: None,
    }))
    .unwrap();
    fill_node(&mut h, &nodes[0].id, "low", 20, 8, 500);
    let mut batch = mock_batch_job("crunch", 1);
    batch.priority = 60;
    let (batch, eval) = h.register_job(batch).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&batch).len(), 1);
    assert_eq!(evicted(&h).len(), 1);
    // A service job of the same priority still does not (its scheduler is off).
    let (service, eval) = h.register_job(big_job("svc", 1, 500, 60)).unwrap();
    h.process(&eval).unwrap();
    assert!(h.running_allocs(&service).is_empty());
    assert_eq!(evicted(&h).len(), 1);
}

#[test]
fn job_plan_shows_what_would_be_preempted_and_writes_nothing() {
    let (mut h, nodes) = harness_with_nodes(1);
    preemption(&mut h, true);
    let low = low_job(&mut h, "low", 20);
    let victims: Vec<Allocation> = (0..4)
        .map(|n| running_alloc(&low, &nodes[0].id, n, 1000))
        .collect();
    h.upsert_allocs(victims.clone()).unwrap();
    let before = h.store().latest_index();
    let run = dry_run(
        &h.snapshot(),
        &big_job("high", 1, 2000, 70),
        "00000000-0000-4000-8000-00000000ffff".into(),
        h.now,
        &mut StdRng::seed_from_u64(7),
        SchedulerSettings::default(),
    )
    .unwrap();
    assert_eq!(h.store().latest_index(), before);
    assert!(evicted(&h).is_empty(), "a plan evicts nothing");
    assert_eq!(run.annotations.desired_tg_updates["web"].preemptions, 2);
    assert_eq!(run.annotations.desired_tg_updates["web"].place, 1);
    let shown = &run.annotations.preempted_allocs;
    assert_eq!(shown.len(), 2);
    for alloc in shown {
        assert_eq!(alloc.job_id, low.id);
        assert_eq!(alloc.desired_status, DesiredStatus::Evict);
        assert!(victims.iter().any(|v| v.id == alloc.id));
    }
}
