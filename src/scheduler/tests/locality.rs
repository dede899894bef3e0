//! Delay scheduling by locality against the harness, with time as the scheduler's `now`:
//! no waiting when a first-level node has room; each widening exactly at its deadline (a
//! `locality-wait` evaluation held until then, and a blocked one for capacity meanwhile);
//! cache information that arrives after the job; earlier levels preferred once widened;
//! bad levels refused.

use teamster_storage::model::{
    EvalStatus, EvalTrigger, Evaluation, Job, Locality, LocalityLevel, Node, Timestamp,
};

use super::*;
use crate::scheduler::harness::mock_system_job;

const SECOND: i64 = 1_000_000_000;

/// Node 0 has the job's input cached, node 1 its dependencies, node 2 nothing.
fn cluster() -> (Harness, Vec<Node>) {
    let mut h = Harness::new();
    let nodes = vec![
        node_with(0, |n| {
            n.meta.insert("cache".into(), "in-1,in-2".into());
        }),
        node_with(1, |n| {
            n.meta.insert("deps".into(), "dep-a".into());
        }),
        node_with(2, |_| {}),
    ];
    for node in &nodes {
        h.register_node(node.clone()).unwrap();
    }
    (h, nodes)
}

fn level(attribute: &str, value: &str, wait_secs: u64) -> LocalityLevel {
    LocalityLevel {
        l_target: attribute.into(),
        operand: "set_contains".into(),
        r_target: value.into(),
        wait: wait_secs * SECOND as u64,
    }
}

/// A batch job of one allocation preferring the cache (5 s), then the dependencies (10 s).
fn build_job() -> Job {
    let mut job = mock_job("build", 1);
    job.task_groups_mut()[0].locality = Some(Locality {
        levels: vec![
            level("${meta.cache}", "in-1", 5),
            level("${meta.deps}", "dep-a", 10),
        ],
    });
    job.canonicalize();
    job
}

/// Fills `node` with foreign load (4000 MHz).
fn fill(h: &mut Harness, node: &Node, n: u64) {
    let filler = filler_job(h);
    h.upsert_allocs(vec![filler_alloc(&filler, &node.id, n, 4000, 256)])
        .unwrap();
}

/// The `locality-wait` evaluations created so far.
fn widenings(h: &Harness) -> Vec<Evaluation> {
    h.created_evals
        .iter()
        .filter(|e| e.triggered_by == EvalTrigger::LocalityWait)
        .cloned()
        .collect()
}

fn at(t: i64) -> Timestamp {
    Timestamp::from_unix_nanos(t)
}

#[test]
fn a_first_level_node_with_room_is_taken_at_once() {
    let (mut h, nodes) = cluster();
    let (job, eval) = h.register_job(build_job()).unwrap();
    h.process(&eval).unwrap();
    assert_complete(&h, &eval);
    assert_eq!(nodes_used(&h, &job), BTreeSet::from([nodes[0].id.clone()]));
    assert!(widenings(&h).is_empty(), "no waiting when a match exists");
    assert!(h.created_evals.is_empty());
}

#[test]
fn each_level_opens_at_its_deadline_then_any_node() {
    let (mut h, nodes) = cluster();
    fill(&mut h, &nodes[0], 1);
    fill(&mut h, &nodes[1], 2);
    let t0 = h.now;
    let (job, eval) = h.register_job(build_job()).unwrap();
    assert_eq!(job.submit_time, t0);

    // t0: the cached node is full; the others are not open yet. It waits (blocked, for
    // capacity) and is woken when the next level opens.
    h.process(&eval).unwrap();
    assert!(h.running_allocs(&job).is_empty());
    let update = last_update(&h);
    assert_eq!(update.status, EvalStatus::Complete);
    assert_eq!(update.queued_allocations["web"], 1);
    let metric = &update.failed_tg_allocs["web"];
    assert_eq!(
        metric.constraint_filtered["locality: not of the first 1 level(s) yet"], 2,
        "{metric:?}"
    );
    assert!(h
        .created_evals
        .iter()
        .any(|e| e.status == EvalStatus::Blocked));
    let first = widenings(&h);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].wait_until, at(t0 + 5 * SECOND));
    assert_eq!(first[0].status, EvalStatus::Pending);
    assert_eq!(first[0].previous_eval, eval.id);

    // t0 + 5 s: the dependencies level opens; that node is full too, so it waits for the
    // last deadline, 10 s later.
    h.now = t0 + 5 * SECOND;
    h.process(&first[0]).unwrap();
    assert!(h.running_allocs(&job).is_empty());
    let second = widenings(&h);
    assert_eq!(second.len(), 2);
    assert_eq!(second[1].wait_until, at(t0 + 15 * SECOND));
    assert_eq!(
        last_update(&h).failed_tg_allocs["web"].constraint_filtered
            ["locality: not of the first 2 level(s) yet"],
        1
    );

    // t0 + 15 s: any node; the empty one takes it and nothing waits any more.
    h.now = t0 + 15 * SECOND;
    h.process(&second[1]).unwrap();
    assert_eq!(nodes_used(&h, &job), BTreeSet::from([nodes[2].id.clone()]));
    assert_eq!(widenings(&h).len(), 2);
    assert!(last_update(&h).failed_tg_allocs.is_empty());
}

#[test]
fn the_second_level_takes_it_when_it_opens_if_it_has_room() {
    let (mut h, nodes) = cluster();
    fill(&mut h, &nodes[0], 1);
    let t0 = h.now;
    let (job, eval) = h.register_job(build_job()).unwrap();
    h.process(&eval).unwrap();
    assert!(
        h.running_allocs(&job).is_empty(),
        "node 1 is free but not open"
    );
    // One nanosecond early changes nothing (the broker would not deliver it yet anyway).
    h.now = t0 + 5 * SECOND - 1;
    let wake = widenings(&h)[0].clone();
    h.process(&wake).unwrap();
    assert!(h.running_allocs(&job).is_empty());
    h.now = t0 + 5 * SECOND;
    h.process(&wake).unwrap();
    assert_eq!(nodes_used(&h, &job), BTreeSet::from([nodes[1].id.clone()]));
}

#[test]
fn cache_information_arriving_after_the_job_is_used() {
    let (mut h, nodes) = cluster();
    // No node has this input cached yet.
    let mut job = build_job();
    job.task_groups_mut()[0].locality.as_mut().unwrap().levels[0].r_target = "in-9".into();
    let t0 = h.now;
    let (job, eval) = h.register_job(job).unwrap();
    h.process(&eval).unwrap();
    assert!(h.running_allocs(&job).is_empty());
    let blocked = h
        .created_evals
        .iter()
        .find(|e| e.status == EvalStatus::Blocked)
        .cloned()
        .expect("a blocked evaluation");
    let created = h.created_evals.len();

    // One second later node 2 reports the input in its cache (its class changes, which
    // releases the blocked evaluation): it is placed there before any wait ran out.
    h.now = t0 + SECOND;
    let mut cached = nodes[2].clone();
    cached.meta.insert("cache".into(), "in-9".into());
    cached.canonicalize();
    assert_ne!(cached.computed_class, nodes[2].computed_class);
    h.register_node(cached.clone()).unwrap();
    h.process(&blocked).unwrap();
    assert_eq!(nodes_used(&h, &job), BTreeSet::from([cached.id.clone()]));
    assert_eq!(
        h.created_evals.len(),
        created,
        "a blocked evaluation makes no further widening evaluation"
    );
}

#[test]
fn earlier_levels_are_preferred_once_every_level_is_open() {
    let (mut h, nodes) = cluster();
    let mut job = build_job();
    job.task_groups_mut()[0].count = 2;
    job.constraints
        .push(teamster_storage::model::Constraint::new(
            "",
            "distinct_hosts",
            "",
        ));
    job.canonicalize();
    let (job, eval) = h.register_job(job).unwrap();
    // Scheduled a minute after its submission: every level is open, yet the cached node and
    // the dependencies node are chosen over the bare one.
    h.now = job.submit_time + 60 * SECOND;
    h.process(&eval).unwrap();
    assert_eq!(
        nodes_used(&h, &job),
        BTreeSet::from([nodes[0].id.clone(), nodes[1].id.clone()])
    );
    assert!(widenings(&h).is_empty());
}

#[test]
fn bad_levels_are_refused_naming_the_field() {
    type Change = Box<dyn Fn(&mut Job)>;
    let cases: Vec<(Change, &str)> = vec![
        (
            Box::new(|j| {
                j.task_groups_mut()[0].locality.as_mut().unwrap().levels[0].wait =
                    2 * 3600 * SECOND as u64
            }),
            "locality level 1: wait must be more than 0 and at most 1h, not 7200s",
        ),
        (
            Box::new(|j| j.task_groups_mut()[0].locality.as_mut().unwrap().levels[1].wait = 0),
            "locality level 2: wait must be more than 0",
        ),
        (
            Box::new(|j| {
                j.task_groups_mut()[0]
                    .locality
                    .as_mut()
                    .unwrap()
                    .levels
                    .clear()
            }),
            "locality: needs at least one level",
        ),
        (
            Box::new(|j| {
                j.task_groups_mut()[0].locality.as_mut().unwrap().levels[0].operand = "near".into()
            }),
            "unknown constraint type \"near\"",
        ),
        (
            Box::new(|j| {
                j.task_groups_mut()[0].locality.as_mut().unwrap().levels[0].operand =
                    "distinct_hosts".into()
            }),
            "is not a node requirement",
        ),
    ];
    for (change, want) in cases {
        let mut job = build_job();
        change(&mut job);
        let err = job.validate().unwrap_err().to_string();
        assert!(err.contains(want), "{want:?} in {err}");
    }
    let mut system = mock_system_job("agent");
    system.task_groups_mut()[0].locality = build_job().task_groups[0].locality.clone();
    let err = system.validate().unwrap_err().to_string();
    assert!(
        err.contains("only service and batch jobs wait for locality"),
        "{err}"
    );
}
