//! Tests of the blocked-evals tracker: the core on plain `#[test]`s, then the shell (with a
//! real broker) on paused tokio time.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use teamster_storage::model::{
    EvalId, EvalStatus, EvalTrigger, Evaluation, JobId, JobType, Namespace, NodeId,
};
use tokio::time::Instant;

use super::*;
use crate::server::broker::{BrokerError, EvalBroker, Token};
use crate::server::config::EvalBrokerConfig;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// A blocked eval of `job` that saw the state at `snapshot_index`, with the given class
/// eligibility.
fn blocked(id: &str, job: &str, snapshot_index: u64, classes: &[(&str, bool)]) -> Evaluation {
    Evaluation {
        id: EvalId::new(id),
        namespace: Namespace::default_namespace(),
        priority: 50,
        eval_type: JobType::Service,
        triggered_by: EvalTrigger::QueuedAllocs,
        job_id: JobId::new(job),
        status: EvalStatus::Blocked,
        class_eligibility: classes
            .iter()
            .map(|(c, e)| ((*c).to_owned(), *e))
            .collect::<BTreeMap<_, _>>(),
        snapshot_index,
        create_index: snapshot_index + 1,
        modify_index: snapshot_index + 1,
        ..Evaluation::default()
    }
}

fn escaped(mut eval: Evaluation) -> Evaluation {
    eval.escaped_computed_class = true;
    eval
}

fn system(mut eval: Evaluation, node: &str) -> Evaluation {
    eval.eval_type = JobType::System;
    eval.node_id = NodeId::new(node);
    eval
}

fn core() -> BlockedEvalsCore {
    let mut core = BlockedEvalsCore::new();
    core.set_enabled(true);
    core
}

fn released_ids(released: &[ReleasedEval]) -> Vec<&str> {
    released.iter().map(|r| r.eval.id.as_str()).collect()
}

fn track(core: &mut BlockedEvalsCore, eval: Evaluation) {
    assert_eq!(
        core.block(eval, None).unwrap(),
        (BlockOutcome::Tracked, None)
    );
}

#[test]
fn released_when_a_node_of_a_usable_class_becomes_ready_and_kept_for_an_ineligible_one() {
    let mut core = core();
    let t0 = Instant::now();
    track(
        &mut core,
        blocked("wants-c1", "a", 10, &[("c1", true), ("c2", false)]),
    );
    track(&mut core, blocked("hates-c1", "b", 10, &[("c1", false)]));

    // c2 is ruled out for "wants-c1"; "hates-c1" never saw c2, so it must look again.
    assert_eq!(
        released_ids(&core.unblock("c2", 20, t0).unwrap()),
        ["hates-c1"]
    );
    track(
        &mut core,
        blocked("hates-c1-again", "b", 25, &[("c1", false), ("c2", false)]),
    );

    // A node of c1 becomes ready: only the eval that can use c1 is released.
    assert_eq!(
        released_ids(&core.unblock("c1", 30, t0).unwrap()),
        ["wants-c1"]
    );
    assert!(core.is_tracked(&EvalId::new("hates-c1-again")));
    assert_eq!(core.stats().total_blocked, 1);
    assert!(core.unblock("c1", 31, t0).unwrap().is_empty());
    assert!(core.unblock("c2", 32, t0).unwrap().is_empty());
}

#[test]
fn escaped_evals_are_released_by_any_class() {
    let mut core = core();
    let t0 = Instant::now();
    track(
        &mut core,
        escaped(blocked("esc", "a", 10, &[("c1", false)])),
    );
    track(&mut core, blocked("cap", "b", 10, &[("c1", false)]));
    assert_eq!(core.stats().total_escaped, 1);
    assert_eq!(released_ids(&core.unblock("c1", 11, t0).unwrap()), ["esc"]);
    assert_eq!(core.stats().total_escaped, 0);
    assert!(
        core.unblock("", 12, t0).unwrap().is_empty(),
        "no class, nothing released"
    );
}

#[test]
fn one_blocked_eval_per_job_and_the_newest_wins() {
    let mut core = core();
    track(&mut core, blocked("old", "web", 10, &[]));
    track(&mut core, blocked("new", "web", 20, &[]));
    assert_eq!(
        core.block(blocked("stale", "web", 5, &[]), None).unwrap(),
        (BlockOutcome::Duplicate, None)
    );
    assert!(core.is_tracked(&EvalId::new("new")));
    assert_eq!(core.stats().total_blocked, 1);
    assert_eq!(core.stats().duplicates, 2);
    let mut dups: Vec<String> = core
        .take_duplicates()
        .unwrap()
        .into_iter()
        .map(|e| e.id.to_string())
        .collect();
    dups.sort();
    assert_eq!(dups, ["old", "stale"]);
    assert!(core.take_duplicates().unwrap().is_empty());
}

#[test]
fn system_evals_are_tracked_per_node_and_released_by_their_node() {
    let mut core = core();
    let t0 = Instant::now();
    track(
        &mut core,
        system(blocked("n1-old", "sys", 10, &[("c1", false)]), "n1"),
    );
    track(
        &mut core,
        system(blocked("n2", "sys", 11, &[("c1", false)]), "n2"),
    );
    track(
        &mut core,
        system(blocked("n1-new", "sys", 12, &[("c1", false)]), "n1"),
    );
    let stats = core.stats();
    assert_eq!(
        (stats.total_blocked, stats.total_system, stats.duplicates),
        (2, 2, 1)
    );

    assert_eq!(
        released_ids(&core.unblock_node(&NodeId::new("n1"), 20, t0).unwrap()),
        ["n1-new"]
    );
    assert!(core
        .unblock_node(&NodeId::new("n1"), 21, t0)
        .unwrap()
        .is_empty());
    assert!(
        core.unblock("c1", 22, t0).unwrap().is_empty(),
        "c1 is ineligible"
    );
    assert_eq!(
        core.untrack(&Namespace::default_namespace(), &JobId::new("sys"))
            .unwrap(),
        1
    );
    assert_eq!(core.stats().total_system, 0);
}

#[test]
fn an_eval_that_missed_an_unblock_goes_straight_back() {
    let mut core = core();
    let t0 = Instant::now();
    core.unblock("c1", 100, t0).unwrap();
    core.unblock_node(&NodeId::new("n1"), 100, t0).unwrap();

    // Saw state before c1's capacity change and c1 was usable (or unknown): release.
    for (id, classes) in [("eligible", &[("c1", true)][..]), ("unknown", &[][..])] {
        let (outcome, released) = core
            .block(blocked(id, id, 50, classes), Some(Token::from("tok")))
            .unwrap();
        assert_eq!(outcome, BlockOutcome::MissedUnblock);
        let released = released.unwrap();
        assert_eq!(released.eval.id, id);
        assert_eq!(
            released.token,
            Some(Token::from("tok")),
            "keeps its delivery token"
        );
    }
    // Ineligible for c1, or scheduled after the unblock: tracked.
    track(&mut core, blocked("ineligible", "x", 50, &[("c1", false)]));
    track(&mut core, blocked("fresh", "y", 100, &[]));
    // Escaped evals care about any class.
    let (outcome, _) = core
        .block(escaped(blocked("esc", "z", 99, &[("c1", false)])), None)
        .unwrap();
    assert_eq!(outcome, BlockOutcome::MissedUnblock);
    // A system eval whose node freed capacity after its snapshot.
    let (outcome, _) = core
        .block(
            system(blocked("sys-n1", "s", 99, &[("c1", false)]), "n1"),
            None,
        )
        .unwrap();
    assert_eq!(outcome, BlockOutcome::MissedUnblock);
    track(
        &mut core,
        system(blocked("sys-n2", "s", 99, &[("c1", false)]), "n2"),
    );
    assert_eq!(core.stats().total_blocked, 3);
}

#[test]
fn unblock_failed_releases_only_max_plan_attempts_evals() {
    let mut core = core();
    let mut failed = blocked("failed", "a", 10, &[]);
    failed.triggered_by = EvalTrigger::MaxPlanAttempts;
    track(&mut core, failed);
    let mut failed_escaped = escaped(blocked("failed-esc", "b", 10, &[]));
    failed_escaped.triggered_by = EvalTrigger::MaxPlanAttempts;
    failed_escaped.priority = 80;
    track(&mut core, failed_escaped);
    track(&mut core, blocked("queued", "c", 10, &[]));
    assert_eq!(
        released_ids(&core.unblock_failed().unwrap()),
        ["failed-esc", "failed"]
    );
    assert!(core.is_tracked(&EvalId::new("queued")));
}

#[test]
fn untrack_drops_the_jobs_blocked_eval() {
    let mut core = core();
    let t0 = Instant::now();
    track(&mut core, blocked("a", "web", 10, &[]));
    let ns = Namespace::default_namespace();
    // Same job id in another namespace is another job.
    let mut elsewhere = blocked("b", "web", 10, &[]);
    elsewhere.namespace = Namespace::new("prod");
    track(&mut core, elsewhere);
    assert_eq!(core.untrack(&ns, &JobId::new("web")).unwrap(), 1);
    assert_eq!(core.untrack(&ns, &JobId::new("web")).unwrap(), 0);
    assert_eq!(released_ids(&core.unblock("c9", 11, t0).unwrap()), ["b"]);
}

#[test]
fn old_unblock_indexes_are_pruned() {
    let mut core = core();
    let t0 = Instant::now();
    core.unblock("c1", 100, t0).unwrap();
    core.unblock("c2", 100, t0 + secs(600)).unwrap();
    core.prune(t0 + secs(900), secs(900));
    assert_eq!(core.stats().unblock_indexes, 1);
    // c1's change is forgotten, c2's is not.
    track(
        &mut core,
        blocked("a", "a", 50, &[("c1", true), ("c2", false)]),
    );
    let (outcome, _) = core
        .block(blocked("b", "b", 50, &[("c2", true)]), None)
        .unwrap();
    assert_eq!(outcome, BlockOutcome::MissedUnblock);
}

#[test]
fn a_disabled_tracker_refuses_and_forgets() {
    let mut core = core();
    let t0 = Instant::now();
    track(&mut core, blocked("a", "a", 10, &[]));
    core.set_enabled(false);
    let disabled = BrokerError::BlockedEvalsDisabled;
    assert_eq!(
        core.block(blocked("b", "b", 1, &[]), None),
        Err(disabled.clone())
    );
    assert_eq!(core.unblock("c", 1, t0), Err(disabled.clone()));
    assert_eq!(
        core.unblock_node(&NodeId::new("n"), 1, t0),
        Err(disabled.clone())
    );
    assert_eq!(core.unblock_failed(), Err(disabled.clone()));
    assert_eq!(core.take_duplicates(), Err(disabled.clone()));
    assert_eq!(
        core.untrack(&Namespace::default_namespace(), &JobId::new("a")),
        Err(disabled)
    );
    core.set_enabled(true);
    assert_eq!(core.stats(), BlockedStats::default());
}

#[test]
fn config_validation() {
    BlockedEvalsConfig::default().validate().unwrap();
    BlockedEvalsConfig::for_tests().validate().unwrap();
    let bad = BlockedEvalsConfig {
        prune_threshold: Duration::ZERO,
        ..BlockedEvalsConfig::default()
    };
    assert_eq!(
        bad.validate(),
        Err(BrokerError::InvalidConfig(
            crate::util::InvalidSetting::new("prune_threshold", "must be greater than zero")
        ))
    );
}

// ---- the async shell, on paused tokio time ----

fn shells() -> (EvalBroker, BlockedEvals) {
    let clock = crate::util::clock::ManualClock::starting_at(0);
    let broker =
        EvalBroker::new(EvalBrokerConfig::default(), StdRng::seed_from_u64(5), clock).unwrap();
    broker.set_enabled(true);
    let blocked = BlockedEvals::new(broker.clone(), BlockedEvalsConfig::default()).unwrap();
    blocked.set_enabled(true);
    (broker, blocked)
}

#[tokio::test(start_paused = true)]
async fn a_blocked_eval_reaches_a_waiting_worker_when_a_usable_node_becomes_ready() {
    let (broker, blocked_evals) = shells();
    let eval = blocked("b", "web", 10, &[("good", true), ("bad", false)]);
    assert_eq!(blocked_evals.block(eval).unwrap(), BlockOutcome::Tracked);

    let worker = {
        let broker = broker.clone();
        tokio::spawn(async move { broker.dequeue(&["service"], secs(600)).await })
    };
    while broker.waiting_dequeuers() == 0 {
        tokio::task::yield_now().await;
    }
    let start = Instant::now();
    assert_eq!(blocked_evals.unblock("bad", 20).unwrap(), 0);
    assert_eq!(blocked_evals.unblock("good", 21).unwrap(), 1);
    let (eval, _) = worker
        .await
        .unwrap()
        .unwrap()
        .expect("released to the worker");
    assert_eq!(eval.id, "b");
    assert_eq!(Instant::now(), start);
    assert_eq!(blocked_evals.stats().total_blocked, 0);
}

#[tokio::test(start_paused = true)]
async fn a_system_eval_is_released_when_its_node_frees_capacity() {
    let (broker, blocked_evals) = shells();
    blocked_evals
        .block(system(blocked("s", "sys", 10, &[]), "n1"))
        .unwrap();
    assert_eq!(
        blocked_evals.unblock_node(&NodeId::new("n2"), 11).unwrap(),
        0
    );
    assert_eq!(
        blocked_evals.unblock_node(&NodeId::new("n1"), 12).unwrap(),
        1
    );
    let (eval, _) = broker.dequeue(&["system"], secs(1)).await.unwrap().unwrap();
    assert_eq!(eval.id, "s");
}

#[tokio::test(start_paused = true)]
async fn reblock_needs_the_outstanding_token_and_waits_for_the_ack() {
    let (broker, blocked_evals) = shells();
    let mut pending = blocked("e", "web", 10, &[("c1", true)]);
    pending.status = EvalStatus::Pending;
    broker.enqueue(pending).unwrap();
    let (eval, token) = broker
        .dequeue(&["service"], secs(1))
        .await
        .unwrap()
        .unwrap();

    let mut reblocked = eval.clone();
    reblocked.status = EvalStatus::Blocked;
    assert_eq!(
        blocked_evals.reblock(reblocked.clone(), "stale"),
        Err(BrokerError::TokenMismatch {
            eval_id: eval.id.clone()
        })
    );
    assert_eq!(
        blocked_evals.reblock(reblocked, &token).unwrap(),
        BlockOutcome::Tracked
    );

    // Capacity arrives while the worker still holds the delivery: the broker keeps the
    // released eval until that delivery is acked.
    assert_eq!(blocked_evals.unblock("c1", 20).unwrap(), 1);
    assert_eq!(broker.dequeue(&["service"], Duration::ZERO).await, Ok(None));
    broker.ack(&eval.id, &token).unwrap();
    let (again, _) = broker
        .dequeue(&["service"], Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((again.id, again.status), (eval.id, EvalStatus::Blocked));
}

#[tokio::test(start_paused = true)]
async fn the_duplicate_reaper_is_woken_by_a_duplicate() {
    let (_broker, blocked_evals) = shells();
    let reaper = {
        let blocked_evals = blocked_evals.clone();
        tokio::spawn(async move { blocked_evals.wait_duplicates(secs(60)).await })
    };
    tokio::task::yield_now().await;
    let start = Instant::now();
    blocked_evals.block(blocked("old", "web", 10, &[])).unwrap();
    blocked_evals.block(blocked("new", "web", 20, &[])).unwrap();
    let dups = reaper.await.unwrap().unwrap();
    assert_eq!(dups.len(), 1);
    assert_eq!(dups[0].id, "old");
    assert_eq!(Instant::now(), start);
    assert_eq!(blocked_evals.wait_duplicates(secs(1)).await, Ok(Vec::new()));
    assert_eq!(Instant::now() - start, secs(1));
}

#[tokio::test(start_paused = true)]
async fn max_plan_attempts_evals_are_released_every_minute() {
    let (broker, blocked_evals) = shells();
    let start = Instant::now();
    let mut failed = blocked("f", "web", 10, &[]);
    failed.triggered_by = EvalTrigger::MaxPlanAttempts;
    blocked_evals.block(failed).unwrap();
    let (eval, _) = broker
        .dequeue(&["service"], secs(600))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(eval.id, "f");
    assert_eq!(Instant::now() - start, secs(60));
}

#[tokio::test(start_paused = true)]
async fn a_disabled_shell_refuses() {
    let (_broker, blocked_evals) = shells();
    blocked_evals.block(blocked("a", "a", 1, &[])).unwrap();
    blocked_evals.set_enabled(false);
    assert_eq!(blocked_evals.stats(), BlockedStats::default());
    assert_eq!(
        blocked_evals.block(blocked("a", "a", 1, &[])),
        Err(BrokerError::BlockedEvalsDisabled)
    );
    assert_eq!(
        blocked_evals.reblock(blocked("a", "a", 1, &[]), "t"),
        Err(BrokerError::BlockedEvalsDisabled)
    );
    assert_eq!(
        blocked_evals.wait_duplicates(secs(1)).await,
        Err(BrokerError::BlockedEvalsDisabled)
    );
}
