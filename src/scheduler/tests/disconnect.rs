//! Disconnected clients: allocations of a group with a `disconnect` block on a node that
//! stopped heartbeating are marked `unknown` and replaced (or not), lost at the end of their
//! window, and reconciled with their replacement when the node comes back.

use teamster_storage::fsm::{AllocClientReport, AllocClientUpdate, Command, NodeUpdateStatus};
use teamster_storage::model::disconnect::{
    RECONCILE_BEST_SCORE, RECONCILE_KEEP_ORIGINAL, RECONCILE_KEEP_REPLACEMENT,
    RECONCILE_LONGEST_RUNNING,
};
use teamster_storage::model::{
    DesiredStatus, DisconnectStrategy, EvalTrigger, NodeStatus, TaskState, Timestamp,
};

use super::*;
use crate::scheduler::reconcile::{ALLOC_LOST, ALLOC_RECONNECTED};

const SECOND: i64 = 1_000_000_000;

/// A service job of `count` whose group waits `lost_after` seconds for a disconnected node.
fn disconnect_job(count: u32, lost_after: u64, replace: bool, reconcile: &str) -> Job {
    let mut job = mock_job("web", count);
    job.task_groups_mut()[0].disconnect = Some(DisconnectStrategy {
        lost_after: lost_after * SECOND as u64,
        replace: Some(replace),
        reconcile: reconcile.into(),
        stop_on_client_after: None,
    });
    job
}

fn set_node_status(h: &mut Harness, node: &NodeId, status: NodeStatus) {
    h.apply(Command::NodeUpdateStatus(NodeUpdateStatus {
        node_id: node.clone(),
        status,
        updated_at: 1,
        evals: Vec::new(),
    }))
    .unwrap();
}

/// Places `job` on three nodes, disconnects the node of `web.web[0]` and runs the node's
/// evaluation: returns the allocation on it.
fn place_then_disconnect(h: &mut Harness, job: Job) -> (Arc<Job>, Arc<Allocation>) {
    let (job, eval) = h.register_job(job).unwrap();
    h.process(&eval).unwrap();
    let ids: Vec<AllocId> = h
        .running_allocs(&job)
        .iter()
        .map(|a| a.id.clone())
        .collect();
    h.client_update(&ids, ClientStatus::Running, h.now).unwrap();
    let victim = h
        .running_allocs(&job)
        .into_iter()
        .find(|a| a.name == "web.web[0]")
        .unwrap();
    set_node_status(h, &victim.node_id, NodeStatus::Disconnected);
    let eval = h
        .create_pending_eval(&job, EvalTrigger::NodeUpdate, Some(&victim.node_id))
        .unwrap();
    h.process(&eval).unwrap();
    assert_complete(h, &eval);
    (job, victim)
}

/// What a client reports: `id` running.
fn report_running(h: &mut Harness, id: &AllocId) {
    let now = h.now;
    h.client_update(std::slice::from_ref(id), ClientStatus::Running, now)
        .unwrap();
}

fn alloc(h: &Harness, id: &AllocId) -> Arc<Allocation> {
    h.snapshot().alloc_by_id(id).unwrap().clone()
}

/// The live allocation that replaced `original`, if any.
fn replacement_of(h: &Harness, job: &Job, original: &AllocId) -> Option<Arc<Allocation>> {
    h.running_allocs(job)
        .into_iter()
        .find(|a| a.previous_allocation == *original)
}

#[test]
fn an_allocation_on_a_disconnected_node_is_unknown_and_replaced_with_a_timeout_eval() {
    let (mut h, _) = harness_with_nodes(3);
    let (job, victim) = place_then_disconnect(&mut h, disconnect_job(3, 60, true, ""));
    let now = h.now;

    let marked = alloc(&h, &victim.id);
    assert_eq!(marked.client_status, ClientStatus::Unknown);
    assert_eq!(
        marked.desired_status,
        DesiredStatus::Run,
        "kept, not stopped"
    );
    assert_eq!(marked.unknown_since(), Some(now));
    let timeout = h
        .created_evals
        .iter()
        .find(|e| e.triggered_by == EvalTrigger::MaxDisconnectTimeout)
        .expect("a disconnect timeout evaluation");
    assert_eq!(
        timeout.wait_until,
        Timestamp::from_unix_nanos(now + 60 * SECOND)
    );
    assert_eq!(marked.followup_eval_id, timeout.id);

    let replacement = replacement_of(&h, &job, &victim.id).expect("replaced");
    assert_ne!(replacement.node_id, victim.node_id);
    assert_eq!(replacement.name, victim.name);
    // Three wanted, three placed elsewhere, the unknown one kept beside them.
    let live = h.running_allocs(&job);
    assert_eq!(live.len(), 4);
    assert_eq!(
        live.iter().filter(|a| a.node_id != victim.node_id).count(),
        3
    );

    // Evaluated again: nothing more is marked, placed or scheduled.
    let timeouts_before = h.created_evals.len();
    let eval = h
        .create_pending_eval(&job, EvalTrigger::NodeUpdate, Some(&victim.node_id))
        .unwrap();
    h.process(&eval).unwrap();
    assert_eq!(h.running_allocs(&job).len(), 4);
    assert_eq!(alloc(&h, &victim.id).alloc_states.len(), 1);
    assert_eq!(h.created_evals.len(), timeouts_before, "no second timeout");
}

#[test]
fn without_replace_an_unknown_allocation_holds_its_place_until_it_is_lost() {
    let (mut h, _) = harness_with_nodes(3);
    let (job, victim) = place_then_disconnect(&mut h, disconnect_job(3, 60, false, ""));
    assert_eq!(alloc(&h, &victim.id).client_status, ClientStatus::Unknown);
    assert!(replacement_of(&h, &job, &victim.id).is_none());
    assert_eq!(h.running_allocs(&job).len(), 3);
    // The window's end is evaluated, as for a group that replaces.
    assert!(h
        .created_evals
        .iter()
        .any(|e| e.triggered_by == EvalTrigger::MaxDisconnectTimeout));

    // The window ends: lost, and now replaced.
    h.now += 61 * SECOND;
    let eval = h
        .create_pending_eval(&job, EvalTrigger::MaxDisconnectTimeout, None)
        .unwrap();
    h.process(&eval).unwrap();
    let lost = alloc(&h, &victim.id);
    assert_eq!(lost.client_status, ClientStatus::Lost);
    assert_eq!(lost.desired_status, DesiredStatus::Stop);
    assert_eq!(lost.desired_description, ALLOC_LOST);
    let replacement = replacement_of(&h, &job, &victim.id).expect("replaced once lost");
    assert_ne!(replacement.node_id, victim.node_id);
    assert_eq!(h.running_allocs(&job).len(), 3);
}

#[test]
fn a_replaced_allocation_whose_window_ends_is_lost_without_a_second_replacement() {
    let (mut h, _) = harness_with_nodes(3);
    let (job, victim) = place_then_disconnect(&mut h, disconnect_job(3, 60, true, ""));
    // Before the window ends, nothing changes.
    h.now += 30 * SECOND;
    let eval = h
        .create_pending_eval(&job, EvalTrigger::MaxDisconnectTimeout, None)
        .unwrap();
    h.process(&eval).unwrap();
    assert_eq!(alloc(&h, &victim.id).client_status, ClientStatus::Unknown);
    h.now += 31 * SECOND;
    let eval = h
        .create_pending_eval(&job, EvalTrigger::MaxDisconnectTimeout, None)
        .unwrap();
    h.process(&eval).unwrap();
    assert_eq!(alloc(&h, &victim.id).client_status, ClientStatus::Lost);
    assert_eq!(h.running_allocs(&job).len(), 3);
}

#[test]
fn a_group_without_a_disconnect_block_loses_its_allocations_at_once() {
    let (mut h, _) = harness_with_nodes(3);
    let (job, victim) = place_then_disconnect(&mut h, mock_job("web", 3));
    let lost = alloc(&h, &victim.id);
    assert_eq!(lost.client_status, ClientStatus::Lost);
    assert_eq!(h.running_allocs(&job).len(), 3);
}

#[test]
fn without_replace_or_window_an_allocation_on_a_down_node_stays_unknown_until_it_is_back() {
    // What `prevent_reschedule_on_lost = true` folds into.
    let (mut h, _) = harness_with_nodes(3);
    let (job, eval) = h.register_job(disconnect_job(3, 0, false, "")).unwrap();
    h.process(&eval).unwrap();
    let placed = h.running_allocs(&job);
    let victim = placed
        .iter()
        .find(|a| a.name == "web.web[0]")
        .unwrap()
        .clone();
    // The other allocation on the same node (if any) never started: it is replaced.
    let ids: Vec<AllocId> = placed.iter().map(|a| a.id.clone()).collect();
    h.client_update(&ids, ClientStatus::Running, h.now).unwrap();
    let evals_before = h.created_evals.len();
    set_node_status(&mut h, &victim.node_id, NodeStatus::Down);
    let eval = h
        .create_pending_eval(&job, EvalTrigger::NodeUpdate, Some(&victim.node_id))
        .unwrap();
    h.process(&eval).unwrap();
    assert_complete(&h, &eval);
    let marked = alloc(&h, &victim.id);
    assert_eq!(marked.client_status, ClientStatus::Unknown);
    assert_eq!(marked.desired_status, DesiredStatus::Run);
    assert!(replacement_of(&h, &job, &victim.id).is_none());
    assert_eq!(h.running_allocs(&job).len(), 3);
    assert_eq!(
        h.created_evals.len(),
        evals_before,
        "no follow-up: nothing is due"
    );

    // An hour later, evaluated again: still unknown, still not replaced, not marked twice.
    h.now += 3_600 * SECOND;
    let eval = h
        .create_pending_eval(&job, EvalTrigger::NodeUpdate, Some(&victim.node_id))
        .unwrap();
    h.process(&eval).unwrap();
    let held = alloc(&h, &victim.id);
    assert_eq!(held.client_status, ClientStatus::Unknown);
    assert_eq!(held.alloc_states.len(), 1);
    assert!(replacement_of(&h, &job, &victim.id).is_none());

    // The node is back, its client reports the allocation running: kept, nothing placed.
    set_node_status(&mut h, &victim.node_id, NodeStatus::Ready);
    report_running(&mut h, &victim.id);
    let eval = h
        .create_pending_eval(&job, EvalTrigger::NodeUpdate, Some(&victim.node_id))
        .unwrap();
    h.process(&eval).unwrap();
    assert!(kept(&alloc(&h, &victim.id)));
    assert_eq!(h.running_allocs(&job).len(), 3);
    assert!(replacement_of(&h, &job, &victim.id).is_none());
}

#[test]
fn without_replace_a_pending_allocation_on_a_down_node_is_replaced() {
    let (mut h, _) = harness_with_nodes(3);
    let (job, eval) = h.register_job(disconnect_job(3, 0, false, "")).unwrap();
    h.process(&eval).unwrap();
    let victim = h
        .running_allocs(&job)
        .into_iter()
        .find(|a| a.name == "web.web[0]")
        .unwrap();
    set_node_status(&mut h, &victim.node_id, NodeStatus::Down);
    let eval = h
        .create_pending_eval(&job, EvalTrigger::NodeUpdate, Some(&victim.node_id))
        .unwrap();
    h.process(&eval).unwrap();
    assert_eq!(alloc(&h, &victim.id).client_status, ClientStatus::Lost);
    assert!(replacement_of(&h, &job, &victim.id).is_some());
}

/// Disconnects, replaces, brings the node back with the original reported running, and
/// runs the reconnect evaluation: returns (original, replacement) as they ended.
fn reconnect(
    reconcile: &str,
    prepare: impl FnOnce(&mut Harness, &Allocation, &Allocation),
) -> (Arc<Allocation>, Arc<Allocation>) {
    let (mut h, _) = harness_with_nodes(3);
    let (job, victim) = place_then_disconnect(&mut h, disconnect_job(3, 60, true, reconcile));
    let replacement = replacement_of(&h, &job, &victim.id).expect("replaced");
    report_running(&mut h, &replacement.id);
    h.now += 10 * SECOND;
    set_node_status(&mut h, &victim.node_id, NodeStatus::Ready);
    report_running(&mut h, &victim.id);
    let (original, replacement) = (alloc(&h, &victim.id), alloc(&h, &replacement.id));
    prepare(&mut h, &original, &replacement);
    let eval = h
        .create_pending_eval(&job, EvalTrigger::Reconnect, None)
        .unwrap();
    h.process(&eval).unwrap();
    assert_complete(&h, &eval);
    let out = (alloc(&h, &original.id), alloc(&h, &replacement.id));
    assert_eq!(
        h.running_allocs(&job).len(),
        3,
        "one of the two copies stopped"
    );
    out
}

fn kept(a: &Allocation) -> bool {
    a.desired_status == DesiredStatus::Run
}

#[test]
fn keep_original_stops_the_replacement_and_marks_the_original_reconnected() {
    let (original, replacement) = reconnect(RECONCILE_KEEP_ORIGINAL, |_, _, _| {});
    assert!(kept(&original));
    assert_eq!(original.unknown_since(), None, "reconnected");
    assert_eq!(original.alloc_states.last().unwrap().value, "running");
    assert!(!kept(&replacement));
    assert_eq!(replacement.desired_description, ALLOC_RECONNECTED);
}

#[test]
fn keep_replacement_stops_the_original() {
    let (original, replacement) = reconnect(RECONCILE_KEEP_REPLACEMENT, |_, _, _| {});
    assert!(!kept(&original));
    assert_eq!(original.desired_description, ALLOC_RECONNECTED);
    assert!(kept(&replacement));
}

/// Rewrites an allocation in the harness's state.
fn rewrite(h: &mut Harness, a: &Allocation, f: impl FnOnce(&mut Allocation)) {
    let mut a = a.clone();
    f(&mut a);
    h.upsert_allocs(vec![a]).unwrap();
}

/// What a client reports: `a` running since `at`.
fn report_started(h: &mut Harness, a: &Allocation, at: i64) {
    let task_states = [(
        "web".to_string(),
        TaskState {
            started_at: Timestamp::from_unix_nanos(at),
            ..TaskState::default()
        },
    )]
    .into();
    h.apply(Command::AllocClientUpdate(AllocClientUpdate {
        allocs: vec![AllocClientReport {
            id: a.id.clone(),
            client_status: ClientStatus::Running,
            client_description: String::new(),
            task_states,
            modify_time: at,
            seq: 0,
            deployment_status: None,
        }],
        evals: Vec::new(),
    }))
    .unwrap();
}

#[test]
fn best_score_keeps_the_replacement_only_when_it_scored_higher_and_runs() {
    let (original, replacement) = reconnect(RECONCILE_BEST_SCORE, |h, o, r| {
        rewrite(h, o, |a| a.placement_score = 400_000);
        rewrite(h, r, |a| a.placement_score = 700_000);
    });
    assert!(!kept(&original) && kept(&replacement));
    let (original, replacement) = reconnect(RECONCILE_BEST_SCORE, |h, o, r| {
        rewrite(h, o, |a| a.placement_score = 700_000);
        rewrite(h, r, |a| a.placement_score = 400_000);
    });
    assert!(kept(&original) && !kept(&replacement));
    let (original, replacement) = reconnect(RECONCILE_BEST_SCORE, |h, o, r| {
        rewrite(h, o, |a| a.placement_score = 400_000);
        rewrite(h, r, |a| a.placement_score = 700_000);
        h.client_update(std::slice::from_ref(&r.id), ClientStatus::Pending, h.now)
            .unwrap();
    });
    assert!(
        kept(&original) && !kept(&replacement),
        "a higher score that does not run yet loses to a running original"
    );
}

#[test]
fn longest_running_keeps_the_copy_that_started_first() {
    let (original, replacement) = reconnect(RECONCILE_LONGEST_RUNNING, |h, o, r| {
        let now = h.now;
        report_started(h, o, now - 100 * SECOND);
        report_started(h, r, now - 5 * SECOND);
    });
    assert!(kept(&original) && !kept(&replacement));
    let (original, replacement) = reconnect(RECONCILE_LONGEST_RUNNING, |h, o, r| {
        let now = h.now;
        report_started(h, o, now - 5 * SECOND);
        report_started(h, r, now - 100 * SECOND);
    });
    assert!(!kept(&original) && kept(&replacement));
}

#[test]
fn a_replacement_of_a_newer_job_version_always_wins() {
    let (original, replacement) = reconnect(RECONCILE_KEEP_ORIGINAL, |h, _, r| {
        rewrite(h, r, |a| a.job_version += 1);
    });
    assert!(!kept(&original) && kept(&replacement));
}

#[test]
fn a_report_while_the_node_is_still_disconnected_is_resolved_once_it_is_ready() {
    let (mut h, _) = harness_with_nodes(3);
    let (job, victim) =
        place_then_disconnect(&mut h, disconnect_job(3, 60, true, RECONCILE_KEEP_ORIGINAL));
    let replacement = replacement_of(&h, &job, &victim.id).expect("replaced");
    // The client's report lands before its node is ready again.
    report_running(&mut h, &victim.id);
    let eval = h
        .create_pending_eval(&job, EvalTrigger::Reconnect, None)
        .unwrap();
    h.process(&eval).unwrap();
    let original = alloc(&h, &victim.id);
    assert_eq!(original.alloc_states.len(), 1, "not marked unknown again");
    assert!(kept(&original) && kept(&alloc(&h, &replacement.id)));
    // Ready: the node's evaluation resolves the reconnect.
    set_node_status(&mut h, &victim.node_id, NodeStatus::Ready);
    let eval = h
        .create_pending_eval(&job, EvalTrigger::NodeUpdate, Some(&victim.node_id))
        .unwrap();
    h.process(&eval).unwrap();
    assert!(kept(&alloc(&h, &victim.id)));
    assert!(!kept(&alloc(&h, &replacement.id)));
    assert_eq!(h.running_allocs(&job).len(), 3);
}

#[test]
fn a_replacement_replaced_in_turn_is_the_one_the_original_competes_with() {
    let (mut h, _) = harness_with_nodes(3);
    let (job, victim) =
        place_then_disconnect(&mut h, disconnect_job(3, 60, true, RECONCILE_KEEP_ORIGINAL));
    let first = replacement_of(&h, &job, &victim.id).expect("replaced");
    // The replacement migrates away: its own replacement now holds the place.
    super::generic::mark_migrate(&mut h, &first);
    let eval = h
        .create_pending_eval(&job, EvalTrigger::AllocStop, None)
        .unwrap();
    h.process(&eval).unwrap();
    let second = replacement_of(&h, &job, &first.id).expect("replaced in turn");
    report_running(&mut h, &second.id);
    set_node_status(&mut h, &victim.node_id, NodeStatus::Ready);
    report_running(&mut h, &victim.id);
    let eval = h
        .create_pending_eval(&job, EvalTrigger::Reconnect, None)
        .unwrap();
    h.process(&eval).unwrap();
    assert!(kept(&alloc(&h, &victim.id)));
    let second = alloc(&h, &second.id);
    assert!(!kept(&second));
    assert_eq!(second.desired_description, ALLOC_RECONNECTED);
    assert_eq!(h.running_allocs(&job).len(), 3);
}
