//! Host ports as a scheduled resource: dynamic ports never collide on a node, a static port
//! takes one allocation per node and names the collision when nothing is left, a node's
//! reserved ports are never given out, and a network change replaces allocations.

use std::collections::BTreeSet;

use teamster_storage::model::{Job, NetworkResource, Node, NodeNetworkResource, Port};

use super::*;
use crate::scheduler::harness::Harness;
use crate::scheduler::reconcile::ALLOC_UPDATING;

/// A mock node with an address and the dynamic range `min..=max`.
fn port_node(n: u64, min: u32, max: u32) -> Node {
    node_with(n, |node| {
        node.node_resources.min_dynamic_port = min;
        node.node_resources.max_dynamic_port = max;
        node.node_resources.networks = vec![NodeNetworkResource {
            mode: "host".into(),
            ip: format!("10.0.0.{n}"),
            ..Default::default()
        }];
    })
}

fn harness_with_port_nodes(n: u64, min: u32, max: u32) -> Harness {
    let mut h = Harness::new();
    for i in 0..n {
        h.register_node(port_node(i, min, max)).unwrap();
    }
    h
}

/// `mock_job` whose group asks for `statics` and `dynamics`, rolled out all at once.
fn port_job(id: &str, count: u32, statics: &[(&str, u32)], dynamics: &[&str]) -> Job {
    let mut job = mock_job(id, count);
    let port = |label: &str, value| Port {
        label: label.into(),
        value,
        ..Default::default()
    };
    job.task_groups_mut()[0].networks = vec![NetworkResource {
        mode: "host".into(),
        reserved_ports: statics.iter().map(|(l, v)| port(l, *v)).collect(),
        dynamic_ports: dynamics.iter().map(|l| port(l, 0)).collect(),
        ..Default::default()
    }];
    job.task_groups_mut()[0]
        .update
        .as_mut()
        .unwrap()
        .max_parallel = Some(10);
    job
}

fn ports_of(alloc: &Allocation) -> Vec<(String, u32)> {
    alloc
        .allocated_resources
        .shared
        .ports
        .iter()
        .map(|p| (p.label.clone(), p.value))
        .collect()
}

#[test]
fn dynamic_ports_on_one_node_never_collide() {
    let mut h = harness_with_port_nodes(1, 20000, 20007);
    let (job, eval) = h
        .register_job(port_job("web", 4, &[], &["http", "admin"]))
        .unwrap();
    h.process(&eval).unwrap();
    let running = h.running_allocs(&job);
    assert_eq!(running.len(), 4);
    let mut all = BTreeSet::new();
    for alloc in &running {
        let ports = ports_of(alloc);
        assert_eq!(
            ports.iter().map(|(l, _)| l.as_str()).collect::<Vec<_>>(),
            ["http", "admin"]
        );
        for (_, value) in ports {
            assert!((20000..=20007).contains(&value), "{value}");
            assert!(all.insert(value), "port {value} given twice");
        }
        assert!(alloc
            .allocated_resources
            .shared
            .ports
            .iter()
            .all(|p| p.host_ip == "10.0.0.0"));
    }
    // The range is used up: a fifth allocation cannot be placed, and says why.
    let mut more = (*job).clone();
    more.task_groups_mut()[0].count = 5;
    let (job, eval) = h.register_job(more).unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), 4);
    let failed = &last_update(&h).failed_tg_allocs["web"];
    assert_eq!(
        failed.dimension_exhausted["network: dynamic port selection failed"],
        1
    );
}

#[test]
fn a_static_port_takes_one_allocation_per_node_and_names_the_collision() {
    let mut h = harness_with_port_nodes(3, 20000, 32000);
    let (job, eval) = h
        .register_job(port_job("web", 4, &[("http", 8080)], &[]))
        .unwrap();
    h.process(&eval).unwrap();
    let running = h.running_allocs(&job);
    assert_eq!(running.len(), 3);
    assert_eq!(nodes_used(&h, &job).len(), 3);
    assert!(running
        .iter()
        .all(|a| ports_of(a) == [("http".to_string(), 8080)]));
    let failed = &last_update(&h).failed_tg_allocs["web"];
    assert_eq!(failed.nodes_exhausted, 3);
    assert_eq!(
        failed.dimension_exhausted["network: reserved port collision http=8080"],
        3
    );
    assert_eq!(last_update(&h).queued_allocations["web"], 1);
}

#[test]
fn a_port_the_node_reserves_or_a_node_without_an_address_is_never_used() {
    let mut h = Harness::new();
    h.register_node(node_with(0, |n| {
        n.node_resources.networks = port_node(0, 0, 0).node_resources.networks;
        n.reserved_resources.networks.reserved_host_ports = "22,8000-8100".into();
    }))
    .unwrap();
    // A node without an address offers no ports.
    h.register_node(mock_node(1)).unwrap();
    let (job, eval) = h
        .register_job(port_job("web", 1, &[("http", 8080)], &[]))
        .unwrap();
    h.process(&eval).unwrap();
    assert!(h.running_allocs(&job).is_empty());
    let failed = &last_update(&h).failed_tg_allocs["web"];
    assert_eq!(
        failed.dimension_exhausted["network: reserved port collision http=8080"],
        1
    );
    assert_eq!(
        failed.dimension_exhausted["network: no networks available"],
        1
    );
    // A port outside the reservation is given.
    let (job, eval) = h
        .register_job(port_job("ok", 1, &[("http", 8101)], &[]))
        .unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), 1);
}

#[test]
fn a_network_change_replaces_allocations_and_other_changes_keep_their_ports() {
    let mut h = harness_with_port_nodes(3, 20000, 32000);
    let (job, eval) = h.register_job(port_job("web", 2, &[], &["http"])).unwrap();
    h.process(&eval).unwrap();
    let before: BTreeSet<(String, Vec<(String, u32)>)> = h
        .running_allocs(&job)
        .iter()
        .map(|a| (a.id.to_string(), ports_of(a)))
        .collect();
    assert_eq!(before.len(), 2);

    // A count change is no task change: the two move in place with their ports, a third
    // gets ports of its own.
    let mut scaled = (*job).clone();
    scaled.task_groups_mut()[0].count = 3;
    let (job, eval) = h.register_job(scaled).unwrap();
    h.process(&eval).unwrap();
    let after: BTreeSet<(String, Vec<(String, u32)>)> = h
        .running_allocs(&job)
        .iter()
        .map(|a| (a.id.to_string(), ports_of(a)))
        .collect();
    assert_eq!(after.len(), 3);
    assert!(before.is_subset(&after), "{before:?} {after:?}");

    // A new port: destructive, each allocation replaced with both ports.
    let mut wider = (*job).clone();
    wider.task_groups_mut()[0].networks[0]
        .reserved_ports
        .push(Port {
            label: "metrics".into(),
            value: 9100,
            ..Default::default()
        });
    let (job, eval) = h.register_job(wider).unwrap();
    h.process(&eval).unwrap();
    let plan = h.plans.last().unwrap();
    let stops: Vec<_> = plan.node_update.values().flatten().collect();
    assert_eq!(stops.len(), 3);
    assert!(stops
        .iter()
        .all(|s| s.desired_description == ALLOC_UPDATING));
    let running = h.running_allocs(&job);
    assert_eq!(running.len(), 3);
    for alloc in &running {
        let labels: Vec<String> = ports_of(alloc).into_iter().map(|(l, _)| l).collect();
        assert_eq!(labels, ["metrics", "http"]);
        assert!(ports_of(alloc).contains(&("metrics".into(), 9100)));
    }
}
