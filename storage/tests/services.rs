//! Service registrations in the state store: written for running allocations only, listed
//! by name, removed by ID, and removed by the servers when the allocation stops on its
//! client, when its node goes down and when it is garbage-collected; they survive a snapshot
//! image.

mod common;

use common::*;
use teamster_storage::fsm::{
    ApplyError, Command, EvalDelete, NodeUpdateStatus, ServiceRegistrationDelete,
    ServiceRegistrationUpsert,
};
use teamster_storage::model::{
    Allocation, ClientStatus, Namespace, NodeStatus, ServiceRegistration,
};
use teamster_storage::state::{StateStore, Table};

fn reg(alloc: &Allocation, name: &str, port: u32) -> ServiceRegistration {
    ServiceRegistration {
        id: format!("_nomad-task-{}-group-web-{name}-http", alloc.id),
        service_name: name.into(),
        namespace: alloc.namespace.clone(),
        node_id: alloc.node_id.clone(),
        datacenter: "dc1".into(),
        job_id: alloc.job_id.clone(),
        alloc_id: alloc.id.clone(),
        tags: vec!["v1".into()],
        address: "10.0.0.1".into(),
        port,
        ..ServiceRegistration::default()
    }
}

fn upsert(regs: Vec<ServiceRegistration>) -> Command {
    Command::ServiceRegistrationUpsert(ServiceRegistrationUpsert { services: regs })
}

/// A store with job `web`, two nodes and a running allocation on each; the next index.
fn world() -> (StateStore, Vec<Allocation>, u64) {
    let store = StateStore::new();
    let job = job("web", 2);
    let eval = eval_for(&job, 1);
    let (n0, n1) = (node(0), node(1));
    let a0 = alloc(1, &job, &n0.id, &eval.id, 0);
    let a1 = alloc(2, &job, &n1.id, &eval.id, 1);
    let mut index = 0;
    for c in [
        register_node(&n0),
        register_node(&n1),
        register(&job, Some(eval.clone())),
        place(&eval.id, vec![a0.clone(), a1.clone()]),
        client_update(&a0.id, ClientStatus::Running),
        client_update(&a1.id, ClientStatus::Running),
    ] {
        index += 1;
        let r = store.apply(index, c);
        assert!(r.rejection().is_none(), "{r:?}");
    }
    (store, vec![a0, a1], index + 1)
}

#[test]
fn registrations_are_listed_by_name_and_a_rewrite_changes_nothing() {
    let (store, allocs, index) = world();
    let r = store.apply(
        index,
        upsert(vec![
            reg(&allocs[0], "web", 20001),
            reg(&allocs[1], "web", 20002),
            reg(&allocs[0], "metrics", 9100),
        ]),
    );
    assert!(r.rejection().is_none(), "{r:?}");
    let snap = store.snapshot();
    assert_eq!(snap.table_index(Table::Services), index);
    let web: Vec<u32> = snap
        .services_by_name("default", "web")
        .map(|r| r.port)
        .collect();
    assert_eq!(web.len(), 2);
    assert!(web.contains(&20001) && web.contains(&20002));
    let first = snap
        .services_by_name("default", "web")
        .next()
        .unwrap()
        .clone();
    assert_eq!((first.create_index, first.modify_index), (index, index));
    assert_eq!(snap.services_by_alloc(allocs[0].id.as_str()).len(), 2);
    assert_eq!(snap.services_by_name("other", "web").count(), 0);

    // The same registrations again: nothing changes, not even the table's index.
    store.apply(index + 1, upsert(vec![reg(&allocs[0], "web", 20001)]));
    assert_eq!(store.snapshot().table_index(Table::Services), index);
    // A changed one keeps its create index.
    store.apply(index + 2, upsert(vec![reg(&allocs[0], "web", 20005)]));
    let snap = store.snapshot();
    let changed = snap
        .services_by_name("default", "web")
        .find(|r| r.alloc_id == allocs[0].id)
        .unwrap();
    assert_eq!(
        (changed.port, changed.create_index, changed.modify_index),
        (20005, index, index + 2)
    );
}

#[test]
fn registrations_of_stopped_unknown_or_misplaced_allocations_are_skipped() {
    let (store, allocs, index) = world();
    store.apply(index, client_update(&allocs[1].id, ClientStatus::Complete));
    let mut unknown = allocs[0].clone();
    unknown.id = alloc_id(99);
    let mut elsewhere = reg(&allocs[0], "moved", 1);
    elsewhere.node_id = allocs[1].node_id.clone();
    store.apply(
        index + 1,
        upsert(vec![
            reg(&allocs[1], "web", 1),
            reg(&unknown, "web", 2),
            elsewhere,
            reg(&allocs[0], "web", 3),
        ]),
    );
    let snap = store.snapshot();
    let ports: Vec<u32> = snap.service_registrations().map(|r| r.port).collect();
    assert_eq!(ports, [3]);
}

#[test]
fn the_servers_remove_registrations_when_allocations_stop_nodes_go_down_or_allocs_go() {
    let (store, allocs, index) = world();
    store.apply(
        index,
        upsert(vec![reg(&allocs[0], "web", 1), reg(&allocs[1], "web", 2)]),
    );
    // The client reports the first allocation failed: its registration goes.
    store.apply(
        index + 1,
        client_update(&allocs[0].id, ClientStatus::Failed),
    );
    let snap = store.snapshot();
    assert_eq!(snap.services_by_alloc(allocs[0].id.as_str()).len(), 0);
    assert_eq!(snap.service_registrations().count(), 1);
    assert_eq!(snap.table_index(Table::Services), index + 1);
    // The second allocation's node goes down.
    store.apply(
        index + 2,
        Command::NodeUpdateStatus(NodeUpdateStatus {
            node_id: allocs[1].node_id.clone(),
            status: NodeStatus::Down,
            updated_at: 1,
            evals: Vec::new(),
        }),
    );
    assert_eq!(store.snapshot().service_registrations().count(), 0);

    // Garbage collection of an allocation removes what it had.
    let (store, allocs, index) = world();
    store.apply(index, upsert(vec![reg(&allocs[0], "web", 1)]));
    store.apply(
        index + 1,
        Command::EvalDelete(EvalDelete {
            evals: Vec::new(),
            allocs: vec![allocs[0].id.clone()],
        }),
    );
    assert_eq!(store.snapshot().service_registrations().count(), 0);
}

#[test]
fn a_delete_by_id_removes_one_and_an_operators_delete_of_an_unknown_one_is_refused() {
    let (store, allocs, index) = world();
    let a = reg(&allocs[0], "web", 1);
    let b = reg(&allocs[1], "web", 2);
    store.apply(index, upsert(vec![a.clone(), b.clone()]));
    let delete = |ids: Vec<(String, String)>, must_exist| {
        Command::ServiceRegistrationDelete(ServiceRegistrationDelete {
            namespace: Namespace::new("default"),
            ids,
            must_exist,
        })
    };
    let r = store.apply(index + 1, delete(vec![("web".into(), a.id.clone())], true));
    assert!(r.rejection().is_none(), "{r:?}");
    let left: Vec<String> = store
        .snapshot()
        .service_registrations()
        .map(|r| r.id.clone())
        .collect();
    assert_eq!(left, std::slice::from_ref(&b.id));
    // Gone already: an operator is told, a client's clean-up is not.
    let r = store.apply(index + 2, delete(vec![("web".into(), a.id.clone())], true));
    assert!(matches!(
        r.rejection(),
        Some(ApplyError::ServiceRegistrationNotFound { .. })
    ));
    let r = store.apply(index + 3, delete(vec![("web".into(), a.id.clone())], false));
    assert!(r.rejection().is_none(), "{r:?}");
}

#[test]
fn registrations_survive_a_snapshot_image() {
    let (store, allocs, index) = world();
    store.apply(index, upsert(vec![reg(&allocs[0], "web", 7)]));
    let image = store.snapshot().encode_image().unwrap();
    let restored = StateStore::new();
    restored.restore_image(&image).unwrap();
    let snap = restored.snapshot();
    let regs: Vec<_> = snap.service_registrations().cloned().collect();
    assert_eq!(regs.len(), 1);
    assert_eq!(regs[0].port, 7);
    // The indexes were rebuilt with it.
    assert_eq!(snap.services_by_alloc(allocs[0].id.as_str()).len(), 1);
}
