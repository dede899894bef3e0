//! Whole cores as a scheduled resource (`resources { cores = N }`): each task gets cores
//! of its own that no other live task on the node holds, worth their share of the node's
//! MHz; a node's reserved cores are never given out; a node with too few free cores is
//! exhausted on "cores"; a stopped allocation's cores are free again.

use std::collections::BTreeSet;

use teamster_storage::model::{EvalTrigger, Node};

use super::*;
use crate::scheduler::harness::Harness;

/// A mock node of 4 cores (4000 MHz), keeping `kept` for itself.
fn core_node(n: u64, kept: &[u32]) -> Node {
    node_with(n, |node| {
        node.node_resources.cpu.cpu_shares = 4000;
        node.node_resources.cpu.total_cpu_cores = 4;
        node.node_resources.cpu.reservable_cpu_cores = vec![0, 1, 2, 3];
        node.reserved_resources.cpu.reserved_cpu_cores = kept.to_vec();
    })
}

/// `mock_job` whose task asks for `cores` whole cores instead of MHz.
fn cores_job(id: &str, count: u32, cores: u32) -> Job {
    let mut job = mock_job(id, count);
    let task = &mut job.task_groups_mut()[0].tasks[0];
    task.resources.cpu = 0;
    task.resources.cores = cores;
    job
}

fn cores_of(alloc: &Allocation) -> Vec<u16> {
    alloc.allocated_resources.cores().collect()
}

#[test]
fn each_task_gets_cores_of_its_own_and_a_full_node_is_exhausted_on_cores() {
    let mut h = Harness::new();
    h.register_node(core_node(0, &[])).unwrap();
    let (job, eval) = h.register_job(cores_job("pinned", 3, 2)).unwrap();
    h.process(&eval).unwrap();
    let running = h.running_allocs(&job);
    assert_eq!(running.len(), 2, "4 cores hold two tasks of 2");
    let mut seen = BTreeSet::new();
    for alloc in &running {
        let cores = cores_of(alloc);
        assert_eq!(cores.len(), 2);
        for core in cores {
            assert!(seen.insert(core), "core {core} given twice");
        }
        // Two of four cores of a 4000 MHz node, plus nothing else asked.
        assert_eq!(alloc.resources.cpu, 2000);
        assert_eq!(alloc.resources.cores, 2);
        let task = &alloc.allocated_resources.tasks.as_deref().unwrap()["web"];
        assert_eq!(task.cpu.cpu_shares, 2000);
    }
    assert_eq!(seen, BTreeSet::from([0, 1, 2, 3]));
    let failed = &last_update(&h).failed_tg_allocs["web"];
    assert_eq!(failed.dimension_exhausted["cores"], 1);

    // One ends: its cores are free again, and its replacement gets them.
    let ended = running[0].clone();
    let now = h.now;
    h.client_update(std::slice::from_ref(&ended.id), ClientStatus::Complete, now)
        .unwrap();
    let eval = h
        .create_pending_eval(&job, EvalTrigger::AllocStop, None)
        .unwrap();
    h.process(&eval).unwrap();
    let running = h.running_allocs(&job);
    assert_eq!(running.len(), 2);
    assert!(running.iter().all(|a| a.id != ended.id));
    let mut seen = BTreeSet::new();
    for alloc in &running {
        for core in cores_of(alloc) {
            assert!(seen.insert(core), "core {core} given twice");
        }
    }
    assert_eq!(seen, BTreeSet::from([0, 1, 2, 3]));
}

#[test]
fn a_node_s_reserved_cores_are_never_given_out() {
    let mut h = Harness::new();
    h.register_node(core_node(0, &[0, 1])).unwrap();
    let (job, eval) = h.register_job(cores_job("pinned", 2, 1)).unwrap();
    h.process(&eval).unwrap();
    let running = h.running_allocs(&job);
    assert_eq!(running.len(), 2);
    let all: BTreeSet<u16> = running.iter().flat_map(|a| cores_of(a)).collect();
    assert_eq!(all, BTreeSet::from([2, 3]));
    // A third finds none left.
    let mut more = (*job).clone();
    more.task_groups_mut()[0].count = 3;
    let (job, eval) = h.register_job(more).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), 2);
    assert_eq!(
        last_update(&h).failed_tg_allocs["web"].dimension_exhausted["cores"],
        1
    );
}

#[test]
fn a_node_without_reservable_cores_takes_no_cores_task() {
    let mut h = Harness::new();
    h.register_node(mock_node(0)).unwrap();
    let (job, eval) = h.register_job(cores_job("pinned", 1, 1)).unwrap();
    h.process(&eval).unwrap();
    assert!(h.running_allocs(&job).is_empty());
    assert_eq!(
        last_update(&h).failed_tg_allocs["web"].dimension_exhausted["cores"],
        1
    );
}
