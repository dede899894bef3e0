//! Tests of the broker: the core on plain `#[test]`s with instants passed in, then the shell
//! on paused tokio time. The fixtures are shared with the reapers' tests.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use teamster_storage::model::{
    EvalId, EvalStatus, EvalTrigger, Evaluation, JobId, JobType, Namespace, Timestamp,
};
use tokio::time::Instant;

use super::*;
use crate::server::config::{EvalBrokerConfig, CANCELABLE_BATCH_SIZE};

pub(crate) fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

pub(crate) fn eval(id: &str, job: &str, priority: u32, index: u64) -> Evaluation {
    Evaluation {
        id: EvalId::new(id),
        namespace: Namespace::default_namespace(),
        priority,
        eval_type: JobType::Service,
        triggered_by: EvalTrigger::JobRegister,
        job_id: JobId::new(job),
        status: EvalStatus::Pending,
        create_index: index,
        modify_index: index,
        ..Evaluation::default()
    }
}

pub(crate) fn typed(mut e: Evaluation, eval_type: JobType) -> Evaluation {
    e.eval_type = eval_type;
    e
}

pub(crate) fn core_with(config: EvalBrokerConfig) -> EvalBrokerCore {
    let mut core = EvalBrokerCore::new(config, StdRng::seed_from_u64(7)).unwrap();
    core.set_enabled(true);
    core
}

pub(crate) fn core() -> EvalBrokerCore {
    core_with(EvalBrokerConfig::default())
}

pub(crate) const SERVICE: QueueSet = QueueSet(1);

pub(crate) fn ids(evals: &[Evaluation]) -> Vec<&str> {
    evals.iter().map(|e| e.id.as_str()).collect()
}

/// Dequeues everything ready in `queues` at `now`, acking each, and returns the ids.
pub(crate) fn drain(core: &mut EvalBrokerCore, queues: QueueSet, now: Instant) -> Vec<String> {
    let mut out = Vec::new();
    while let Some((e, token)) = core.dequeue(queues, now).unwrap() {
        core.ack(&e.id, &token, now).unwrap();
        out.push(e.id.to_string());
    }
    out
}

#[test]
fn higher_priority_first_then_fifo_by_create_index() {
    let mut core = core();
    let t0 = Instant::now();
    for e in [
        eval("a", "job-a", 50, 10),
        eval("b", "job-b", 70, 11),
        eval("c", "job-c", 50, 5),
        eval("d", "job-d", 70, 12),
        eval("e", "job-e", 50, 7),
    ] {
        assert_eq!(core.enqueue(e, t0, 0).unwrap(), EnqueueOutcome::Ready);
    }
    assert_eq!(drain(&mut core, SERVICE, t0), ["b", "d", "c", "e", "a"]);
}

#[test]
fn equal_create_index_is_served_in_arrival_order() {
    let mut core = core();
    let t0 = Instant::now();
    for i in 0..20 {
        core.enqueue(eval(&format!("e{i:02}"), &format!("j{i}"), 50, 0), t0, 0)
            .unwrap();
    }
    let expected: Vec<String> = (0..20).map(|i| format!("e{i:02}")).collect();
    assert_eq!(drain(&mut core, SERVICE, t0), expected);
}

#[test]
fn cross_type_choice_compares_true_heap_roots() {
    // Nomad's Peek returned the heap's last slice element; with these pushes that is
    // not the root, and the batch eval (60) would have beaten service's 90.
    let mut core = core();
    let t0 = Instant::now();
    for (id, p) in [("s90", 90), ("s10", 10), ("s20", 20), ("s5", 5)] {
        core.enqueue(eval(id, id, p, 1), t0, 0).unwrap();
    }
    core.enqueue(typed(eval("b60", "b60", 60, 1), JobType::Batch), t0, 0)
        .unwrap();
    let both = QueueSet::EMPTY
        .with(SchedulerQueue::Service)
        .with(SchedulerQueue::Batch);
    assert_eq!(
        drain(&mut core, both, t0),
        ["s90", "b60", "s20", "s10", "s5"]
    );
}

#[test]
fn types_tied_at_the_top_priority_are_picked_at_random() {
    let mut core = core();
    let t0 = Instant::now();
    let both = QueueSet::from_names(&["service", "batch"]);
    let mut picked_batch = 0;
    for i in 0..400 {
        core.enqueue(eval(&format!("s{i}"), &format!("s{i}"), 50, i), t0, 0)
            .unwrap();
        let b = typed(
            eval(&format!("b{i}"), &format!("b{i}"), 50, i),
            JobType::Batch,
        );
        core.enqueue(b, t0, 0).unwrap();
        let (e, token) = core.dequeue(both, t0).unwrap().unwrap();
        if e.eval_type == JobType::Batch {
            picked_batch += 1;
        }
        core.ack(&e.id, &token, t0).unwrap();
        let (e, token) = core.dequeue(both, t0).unwrap().unwrap();
        core.ack(&e.id, &token, t0).unwrap();
    }
    assert!(
        (120..=280).contains(&picked_batch),
        "batch picked first {picked_batch} times out of 400"
    );

    // A strictly higher priority always wins over the coin.
    for i in 0..50 {
        core.enqueue(eval(&format!("S{i}"), &format!("S{i}"), 50, i), t0, 0)
            .unwrap();
        let b = typed(
            eval(&format!("B{i}"), &format!("B{i}"), 51, i),
            JobType::Batch,
        );
        core.enqueue(b, t0, 0).unwrap();
        let (e, token) = core.dequeue(both, t0).unwrap().unwrap();
        assert_eq!(e.eval_type, JobType::Batch);
        core.ack(&e.id, &token, t0).unwrap();
        let (e, token) = core.dequeue(both, t0).unwrap().unwrap();
        core.ack(&e.id, &token, t0).unwrap();
    }
}

#[test]
fn dequeue_only_serves_the_requested_types() {
    let mut core = core();
    let t0 = Instant::now();
    core.enqueue(typed(eval("sys", "sys", 50, 1), JobType::System), t0, 0)
        .unwrap();
    assert!(core.dequeue(SERVICE, t0).unwrap().is_none());
    assert!(core.dequeue(QueueSet::EMPTY, t0).unwrap().is_none());
    let (e, _) = core
        .dequeue(QueueSet::from_names(&["system"]), t0)
        .unwrap()
        .unwrap();
    assert_eq!(e.id, "sys");
}

#[test]
fn one_eval_per_job_in_flight() {
    let mut core = core();
    let t0 = Instant::now();
    assert_eq!(
        core.enqueue(eval("e1", "web", 50, 1), t0, 0).unwrap(),
        EnqueueOutcome::Ready
    );
    assert_eq!(
        core.enqueue(eval("e2", "web", 50, 2), t0, 0).unwrap(),
        EnqueueOutcome::Pending
    );
    assert_eq!(
        core.enqueue(eval("o1", "other", 50, 3), t0, 0).unwrap(),
        EnqueueOutcome::Ready
    );
    let stats = core.stats();
    assert_eq!((stats.total_ready, stats.total_pending), (2, 1));

    let (first, t1) = core.dequeue(SERVICE, t0).unwrap().unwrap();
    assert_eq!(first.id, "e1");
    // e2 is not deliverable while e1 is out, even though the queue has room.
    let (second, t2) = core.dequeue(SERVICE, t0).unwrap().unwrap();
    assert_eq!(second.id, "o1");
    assert!(core.dequeue(SERVICE, t0).unwrap().is_none());

    core.ack(&first.id, &t1, t0).unwrap();
    let (third, _) = core.dequeue(SERVICE, t0).unwrap().unwrap();
    assert_eq!(third.id, "e2");
    core.ack(&second.id, &t2, t0).unwrap();
    assert_eq!(core.stats().total_pending, 0);
}

#[test]
fn on_ack_the_newest_pending_eval_runs_and_older_ones_become_cancelable() {
    let mut core = core();
    let t0 = Instant::now();
    core.enqueue(eval("running", "web", 50, 1), t0, 0).unwrap();
    let (running, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
    for (id, index) in [("m30", 30), ("m10", 10), ("m20", 20)] {
        assert_eq!(
            core.enqueue(eval(id, "web", 50, index), t0, 0).unwrap(),
            EnqueueOutcome::Pending
        );
    }
    core.take_effects();
    core.ack(&running.id, &token, t0).unwrap();
    assert_eq!(core.take_effects().cancelable_added, 2);

    let stats = core.stats();
    assert_eq!(stats.total_cancelable, 2);
    assert_eq!(stats.total_pending, 0);
    assert_eq!(stats.total_ready, 1);
    assert_eq!(drain(&mut core, SERVICE, t0), ["m30"]);
    assert_eq!(
        core.deliveries(&EvalId::new("m10")),
        None,
        "canceled evals are forgotten"
    );

    let mut canceled = ids(&core.cancelable(10).unwrap())
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    canceled.sort();
    assert_eq!(canceled, ["m10", "m20"]);
    assert_eq!(core.stats().total_cancelable, 0);
}

#[test]
fn pending_priority_beats_recency() {
    let mut core = core();
    let t0 = Instant::now();
    core.enqueue(eval("running", "web", 50, 1), t0, 0).unwrap();
    let (running, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
    core.enqueue(eval("urgent-old", "web", 80, 5), t0, 0)
        .unwrap();
    core.enqueue(eval("normal-new", "web", 50, 30), t0, 0)
        .unwrap();
    core.ack(&running.id, &token, t0).unwrap();
    assert_eq!(drain(&mut core, SERVICE, t0), ["urgent-old"]);
    assert_eq!(ids(&core.cancelable(10).unwrap()), ["normal-new"]);
}

#[test]
fn cancelable_evals_are_taken_in_batches_of_at_most_728() {
    let mut core = core();
    let t0 = Instant::now();
    core.enqueue(eval("first", "sys", 50, 1), t0, 0).unwrap();
    let (first, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
    for i in 0..1000 {
        core.enqueue(eval(&format!("p{i}"), "sys", 50, 10 + i), t0, 0)
            .unwrap();
    }
    core.ack(&first.id, &token, t0).unwrap();
    assert_eq!(core.stats().total_cancelable, 999);

    let batch_size = core.config().cancelable_batch_size;
    assert_eq!(batch_size, CANCELABLE_BATCH_SIZE);
    let first_batch = core.cancelable(batch_size).unwrap();
    assert_eq!(first_batch.len(), 728);
    assert_eq!(core.stats().total_cancelable, 271);
    let second_batch = core.cancelable(batch_size).unwrap();
    assert_eq!(second_batch.len(), 271);
    assert!(core.cancelable(batch_size).unwrap().is_empty());

    let all: HashSet<String> = first_batch
        .iter()
        .chain(&second_batch)
        .map(|e| e.id.to_string())
        .collect();
    assert_eq!(all.len(), 999);
    assert!(
        !all.contains("p999"),
        "the newest eval runs, it is not canceled"
    );
}

#[test]
fn ack_reports_the_latency_from_first_enqueue_across_a_nack() {
    let mut core = core();
    let t0 = Instant::now();
    core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap();
    let (_, token) = core.dequeue(SERVICE, t0 + secs(1)).unwrap().unwrap();
    core.nack(&"e".into(), &token, t0 + secs(2)).unwrap();
    core.take_effects();
    // Redelivered after the nack delay; the latency still counts from the first enqueue.
    let (_, token) = core.dequeue(SERVICE, t0 + secs(5)).unwrap().unwrap();
    assert!(core.take_effects().acked_latencies.is_empty());
    core.ack(&"e".into(), &token, t0 + secs(7)).unwrap();
    assert_eq!(core.take_effects().acked_latencies, vec![secs(7)]);
    // A deliberately delayed eval counts from when it became ready.
    let mut delayed = eval("d", "api", 50, 2);
    delayed.wait = secs(10).as_nanos() as u64;
    core.enqueue(delayed, t0, 0).unwrap();
    core.advance(t0 + secs(10));
    let (_, token) = core.dequeue(SERVICE, t0 + secs(11)).unwrap().unwrap();
    core.take_effects();
    core.ack(&"d".into(), &token, t0 + secs(12)).unwrap();
    assert_eq!(core.take_effects().acked_latencies, vec![secs(2)]);
    // A refused ack reports nothing.
    assert!(core.ack(&"e".into(), &token, t0 + secs(8)).is_err());
    assert!(core.take_effects().acked_latencies.is_empty());
}

#[test]
fn nack_timeout_redelivers_with_a_new_token() {
    let mut core = core();
    let t0 = Instant::now();
    core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap();
    let (e, old) = core.dequeue(SERVICE, t0).unwrap().unwrap();
    assert_eq!(core.take_effects().arm_timer, Some(t0 + secs(60)));

    core.advance(t0 + secs(60) - Duration::from_millis(1));
    assert_eq!(core.stats().total_unacked, 1);
    core.advance(t0 + secs(60));
    let stats = core.stats();
    assert_eq!((stats.total_unacked, stats.total_waiting), (0, 1));
    assert_eq!(core.take_effects().nack_timeouts, 1);

    // Re-enqueued after the initial nack delay, measured from the timeout.
    assert!(core
        .dequeue(SERVICE, t0 + secs(60) + Duration::from_millis(999))
        .unwrap()
        .is_none());
    let (again, new) = core.dequeue(SERVICE, t0 + secs(61)).unwrap().unwrap();
    assert_eq!(again.id, e.id);
    assert_eq!(
        again.wait,
        secs(1).as_nanos() as u64,
        "the backoff is recorded as Wait"
    );
    assert_ne!(new, old);
    assert_eq!(core.deliveries(&e.id), Some(2));

    // The stale delivery can neither ack nor nack the new one.
    let t = t0 + secs(62);
    assert_eq!(
        core.ack(&e.id, &old, t),
        Err(BrokerError::TokenMismatch {
            eval_id: e.id.clone()
        })
    );
    assert_eq!(
        core.nack(&e.id, &old, t),
        Err(BrokerError::TokenMismatch {
            eval_id: e.id.clone()
        })
    );
    core.ack(&e.id, &new, t).unwrap();
    assert_eq!(
        core.ack(&e.id, &new, t),
        Err(BrokerError::NotFound {
            eval_id: e.id.clone()
        })
    );
}

#[test]
fn ack_after_the_nack_deadline_is_refused_even_before_the_timer_ran() {
    let mut core = core();
    let t0 = Instant::now();
    core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap();
    let (e, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
    let late = t0 + secs(60);
    assert_eq!(
        core.ack(&e.id, &token, late),
        Err(BrokerError::NackTimeoutReached {
            eval_id: e.id.clone()
        })
    );
    // It was nacked and comes back after the initial delay.
    assert_eq!(core.stats().total_waiting, 1);
    let (again, _) = core.dequeue(SERVICE, late + secs(1)).unwrap().unwrap();
    assert_eq!(again.id, e.id);
}

#[test]
fn delayed_evals_wait_for_wait_and_wait_until() {
    let mut core = core();
    let t0 = Instant::now();
    let unix_now: i64 = 1_700_000_000_000_000_000;

    let mut waiting = eval("wait", "a", 50, 1);
    waiting.wait = secs(5).as_nanos() as u64;
    assert_eq!(
        core.enqueue(waiting, t0, unix_now).unwrap(),
        EnqueueOutcome::Waiting {
            until: t0 + secs(5)
        }
    );

    let mut until = eval("until", "b", 50, 2);
    until.wait_until = Timestamp::from_unix_nanos(unix_now + secs(10).as_nanos() as i64);
    assert_eq!(
        core.enqueue(until, t0, unix_now).unwrap(),
        EnqueueOutcome::Waiting {
            until: t0 + secs(10)
        }
    );

    let mut past = eval("past", "c", 50, 3);
    past.wait_until = Timestamp::from_unix_nanos(unix_now - 1);
    assert_eq!(
        core.enqueue(past, t0, unix_now).unwrap(),
        EnqueueOutcome::Ready
    );

    assert_eq!(core.stats().total_waiting, 2);
    assert_eq!(core.next_deadline(), Some(t0 + secs(5)));
    assert_eq!(drain(&mut core, SERVICE, t0), ["past"]);
    assert!(drain(&mut core, SERVICE, t0 + secs(5) - Duration::from_nanos(1)).is_empty());
    assert_eq!(drain(&mut core, SERVICE, t0 + secs(5)), ["wait"]);
    assert!(drain(&mut core, SERVICE, t0 + secs(9)).is_empty());
    assert_eq!(drain(&mut core, SERVICE, t0 + secs(10)), ["until"]);
    assert_eq!(core.stats().total_waiting, 0);
}

#[test]
fn a_delayed_eval_of_a_busy_job_becomes_pending_when_due() {
    let mut core = core();
    let t0 = Instant::now();
    core.enqueue(eval("running", "web", 50, 1), t0, 0).unwrap();
    let (running, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
    let mut delayed = eval("delayed", "web", 50, 2);
    delayed.wait = secs(1).as_nanos() as u64;
    core.enqueue(delayed, t0, 0).unwrap();
    core.advance(t0 + secs(1));
    assert_eq!(core.stats().total_pending, 1);
    core.ack(&running.id, &token, t0 + secs(2)).unwrap();
    assert_eq!(drain(&mut core, SERVICE, t0 + secs(2)), ["delayed"]);
}

#[test]
fn drop_waiting_forgets_a_delayed_eval() {
    let mut core = core();
    let t0 = Instant::now();
    let mut delayed = eval("d", "web", 50, 1);
    delayed.wait_until = Timestamp::from_unix_nanos(secs(100).as_nanos() as i64);
    core.enqueue(delayed.clone(), t0, 0).unwrap();
    assert!(core.drop_waiting(&delayed.id, t0).unwrap());
    assert!(!core.drop_waiting(&delayed.id, t0).unwrap());
    assert_eq!(core.stats().total_waiting, 0);
    assert!(drain(&mut core, SERVICE, t0 + secs(200)).is_empty());
    // Forgotten entirely: it can be enqueued again.
    delayed.wait_until = Timestamp::ZERO;
    assert_eq!(core.enqueue(delayed, t0, 0).unwrap(), EnqueueOutcome::Ready);
}

#[test]
fn dropping_a_nack_backoff_frees_the_job_slot() {
    let mut core = core();
    let t0 = Instant::now();
    core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap();
    core.enqueue(eval("next", "web", 50, 2), t0, 0).unwrap();
    let (e, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
    core.nack(&e.id, &token, t0).unwrap();
    assert!(core.drop_waiting(&e.id, t0).unwrap());
    assert_eq!(drain(&mut core, SERVICE, t0), ["next"]);
}

#[test]
fn acking_an_undelivered_eval_is_refused_and_loses_nothing() {
    let mut core = core();
    let t0 = Instant::now();
    core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap();
    let id = EvalId::new("e");
    assert_eq!(
        core.ack(&id, "made-up", t0),
        Err(BrokerError::NotFound {
            eval_id: id.clone()
        })
    );
    assert_eq!(
        core.nack(&id, "made-up", t0),
        Err(BrokerError::NotFound {
            eval_id: id.clone()
        })
    );
    assert_eq!(core.deliveries(&id), Some(0));
    assert_eq!(drain(&mut core, SERVICE, t0), ["e"]);
}

#[test]
fn duplicate_enqueues_are_dropped() {
    let mut core = core();
    let t0 = Instant::now();
    core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap();
    assert_eq!(
        core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap(),
        EnqueueOutcome::Duplicate
    );
    let (e, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
    assert_eq!(
        core.enqueue(e.clone(), t0, 0).unwrap(),
        EnqueueOutcome::Duplicate
    );
    // A token that is not the outstanding one does not park it either.
    assert_eq!(
        core.enqueue_with_token(e.clone(), Some("other"), t0, 0)
            .unwrap(),
        EnqueueOutcome::Duplicate
    );
    core.ack(&e.id, &token, t0).unwrap();
    assert_eq!(core.stats(), {
        let mut s = BrokerStats::default();
        for q in SchedulerQueue::ALL {
            s.by_scheduler.insert(q, QueueStats::default());
        }
        s
    });
}

#[test]
fn a_resubmission_under_the_outstanding_token_waits_for_the_ack() {
    let mut core = core();
    let t0 = Instant::now();
    core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap();
    let (e, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
    let mut reblocked = e.clone();
    reblocked.status = EvalStatus::Blocked;
    assert_eq!(
        core.enqueue_with_token(reblocked, Some(&token), t0, 0)
            .unwrap(),
        EnqueueOutcome::Requeued
    );
    assert!(core.dequeue(SERVICE, t0).unwrap().is_none());
    core.ack(&e.id, &token, t0).unwrap();
    let (again, _) = core.dequeue(SERVICE, t0).unwrap().unwrap();
    assert_eq!(
        (again.id.as_str(), again.status),
        ("e", EvalStatus::Blocked)
    );
    assert_eq!(
        core.deliveries(&e.id),
        Some(1),
        "a fresh eval to the broker"
    );
}

#[test]
fn a_resubmission_under_a_nacked_token_is_dropped() {
    let mut core = core();
    let t0 = Instant::now();
    core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap();
    let (e, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
    core.enqueue_with_token(e.clone(), Some(&token), t0, 0)
        .unwrap();
    core.nack(&e.id, &token, t0).unwrap();
    // Only the nack's own re-enqueue comes back.
    core.advance(t0 + secs(1));
    let stats = core.stats();
    assert_eq!((stats.total_ready, stats.total_waiting), (1, 0));
    let (again, token) = core.dequeue(SERVICE, t0 + secs(1)).unwrap().unwrap();
    core.ack(&again.id, &token, t0 + secs(1)).unwrap();
    assert!(core.dequeue(SERVICE, t0 + secs(100)).unwrap().is_none());
}

#[test]
fn outstanding_reset_pause_and_resume_move_the_nack_deadline() {
    let mut core = core();
    let t0 = Instant::now();
    core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap();
    let (e, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
    assert_eq!(core.outstanding(&e.id, t0).unwrap(), Some(token.clone()));

    core.outstanding_reset(&e.id, &token, t0 + secs(50))
        .unwrap();
    core.advance(t0 + secs(100));
    assert_eq!(core.stats().total_unacked, 1, "reset to 60 s from t0+50");

    core.pause_nack_timeout(&e.id, &token, t0 + secs(105))
        .unwrap();
    core.advance(t0 + secs(1000));
    assert_eq!(
        core.stats().total_unacked,
        1,
        "paused while the plan is queued"
    );
    // Reset leaves a paused timer paused.
    core.outstanding_reset(&e.id, &token, t0 + secs(1000))
        .unwrap();
    core.advance(t0 + secs(2000));
    assert_eq!(core.stats().total_unacked, 1);

    core.resume_nack_timeout(&e.id, &token, t0 + secs(2000))
        .unwrap();
    core.advance(t0 + secs(2059));
    assert_eq!(core.stats().total_unacked, 1);
    core.advance(t0 + secs(2060));
    assert_eq!(core.stats().total_unacked, 0, "resumed at full length");
    assert_eq!(core.outstanding(&e.id, t0 + secs(2060)).unwrap(), None);

    let t = t0 + secs(2060);
    assert_eq!(
        core.outstanding_reset(&e.id, &token, t),
        Err(BrokerError::NotOutstanding {
            eval_id: e.id.clone()
        })
    );
    let (e, token) = core.dequeue(SERVICE, t + secs(1)).unwrap().unwrap();
    let t = t + secs(1);
    assert_eq!(
        core.outstanding_reset(&e.id, "stale", t),
        Err(BrokerError::TokenMismatch {
            eval_id: e.id.clone()
        })
    );
    assert_eq!(
        core.pause_nack_timeout(&e.id, "stale", t),
        Err(BrokerError::TokenMismatch {
            eval_id: e.id.clone()
        })
    );
    assert_eq!(
        core.outstanding_reset(&e.id, &token, t + secs(60)),
        Err(BrokerError::NackTimeoutReached {
            eval_id: e.id.clone()
        })
    );
}

#[test]
fn a_nack_while_the_plan_is_queued_waits_for_the_plan() {
    // A worker that stops (or gives up) while its plan sits in the plan queue nacks; the
    // eval must not go to another worker before that plan committed or failed, or the two
    // could place the same allocations twice.
    let mut core = core();
    let t0 = Instant::now();
    core.enqueue(eval("e", "web", 50, 1), t0, 0).unwrap();
    let (e, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
    core.pause_nack_timeout(&e.id, &token, t0).unwrap();
    core.nack(&e.id, &token, t0).unwrap();
    assert!(
        core.dequeue(SERVICE, t0 + secs(100)).unwrap().is_none(),
        "delivered again while its plan was queued"
    );
    assert_eq!(core.stats().total_unacked, 1);
    // A second copy of the plan (a submission retried after no answer) is queued too, and a
    // second nack changes nothing.
    core.pause_nack_timeout(&e.id, &token, t0 + secs(100))
        .unwrap();
    core.nack(&e.id, &token, t0 + secs(100)).unwrap();
    // The first copy is back: the other may still commit.
    core.resume_nack_timeout(&e.id, &token, t0 + secs(100))
        .unwrap();
    assert_eq!(core.stats().total_unacked, 1);
    assert!(core.dequeue(SERVICE, t0 + secs(200)).unwrap().is_none());
    // The last one is back: the nack takes effect (with its re-enqueue delay).
    core.resume_nack_timeout(&e.id, &token, t0 + secs(100))
        .unwrap();
    assert_eq!(core.stats().total_unacked, 0);
    assert!(core.dequeue(SERVICE, t0 + secs(100)).unwrap().is_none());
    core.advance(t0 + secs(101));
    let (again, token2) = core.dequeue(SERVICE, t0 + secs(101)).unwrap().unwrap();
    assert_eq!(again.id, e.id);
    assert_ne!(token2, token);
    // Two plans queued, no nack: the timer runs again only once both are back.
    let t1 = t0 + secs(101);
    core.pause_nack_timeout(&again.id, &token2, t1).unwrap();
    core.pause_nack_timeout(&again.id, &token2, t1).unwrap();
    core.resume_nack_timeout(&again.id, &token2, t1).unwrap();
    core.advance(t1 + secs(1000));
    assert_eq!(
        core.stats().total_unacked,
        1,
        "timed out with a plan queued"
    );
    let t2 = t1 + secs(1000);
    core.resume_nack_timeout(&again.id, &token2, t2).unwrap();
    core.advance(t2 + secs(60));
    assert_eq!(core.stats().total_unacked, 0, "the nack timer runs again");
    // Without a plan in the queue a nack is at once.
    core.advance(t2 + secs(200));
    let (third, token3) = core.dequeue(SERVICE, t2 + secs(200)).unwrap().unwrap();
    core.nack(&third.id, &token3, t2 + secs(200)).unwrap();
    assert_eq!(core.stats().total_unacked, 0);
}

#[test]
fn effects_report_wake_ups_and_only_earlier_timers() {
    let mut core = core();
    let t0 = Instant::now();
    core.take_effects();
    core.enqueue(typed(eval("b", "b", 50, 1), JobType::Batch), t0, 0)
        .unwrap();
    let fx = core.take_effects();
    assert_eq!(fx.wake, QueueSet::EMPTY.with(SchedulerQueue::Batch));
    assert_eq!(fx.arm_timer, None);

    core.dequeue(QueueSet::ALL, t0).unwrap().unwrap();
    assert_eq!(core.take_effects().arm_timer, Some(t0 + secs(60)));
    core.enqueue(eval("s", "s", 50, 1), t0, 0).unwrap();
    core.dequeue(QueueSet::ALL, t0 + secs(1)).unwrap().unwrap();
    assert_eq!(
        core.take_effects().arm_timer,
        None,
        "a later deadline needs no re-arm"
    );
    let mut delayed = eval("d", "d", 50, 1);
    delayed.wait = secs(2).as_nanos() as u64;
    core.enqueue(delayed, t0 + secs(1), 0).unwrap();
    assert_eq!(core.take_effects().arm_timer, Some(t0 + secs(3)));
    assert_eq!(core.next_timer(), Some(t0 + secs(3)));
}

#[test]
fn disabling_flushes_and_every_call_is_refused() {
    let mut core = core();
    let t0 = Instant::now();
    core.enqueue(eval("a", "a", 50, 1), t0, 0).unwrap();
    core.enqueue(eval("b", "b", 50, 2), t0, 0).unwrap();
    let (a, token) = core.dequeue(SERVICE, t0).unwrap().unwrap();
    core.take_effects();

    core.set_enabled(false);
    assert!(core.take_effects().wake_all);
    assert_eq!(core.next_deadline(), None);
    let disabled = Err(BrokerError::Disabled);
    assert_eq!(
        core.enqueue(eval("c", "c", 50, 3), t0, 0),
        disabled.clone().map(|()| EnqueueOutcome::Ready)
    );
    assert_eq!(core.dequeue(SERVICE, t0), Err(BrokerError::Disabled));
    assert_eq!(core.ack(&a.id, &token, t0), disabled);
    assert_eq!(core.nack(&a.id, &token, t0), disabled);
    assert_eq!(core.outstanding(&a.id, t0), Err(BrokerError::Disabled));
    assert_eq!(core.outstanding_reset(&a.id, &token, t0), disabled);
    assert_eq!(core.pause_nack_timeout(&a.id, &token, t0), disabled);
    assert_eq!(core.resume_nack_timeout(&a.id, &token, t0), disabled);
    assert_eq!(core.cancelable(1), Err(BrokerError::Disabled));
    assert_eq!(core.drop_waiting(&a.id, t0), Err(BrokerError::Disabled));
    assert_eq!(BrokerError::Disabled.to_string(), "eval broker disabled");

    core.set_enabled(true);
    assert_eq!(core.stats().total_ready + core.stats().total_unacked, 0);
    assert_eq!(
        core.ack(&a.id, &token, t0),
        Err(BrokerError::NotFound {
            eval_id: a.id.clone()
        })
    );
    assert_eq!(
        core.enqueue(eval("a", "a", 50, 1), t0, 0).unwrap(),
        EnqueueOutcome::Ready
    );
}

#[test]
fn stats_count_per_scheduler_type() {
    let mut core = core();
    let t0 = Instant::now();
    core.enqueue(eval("s1", "s1", 50, 1), t0, 0).unwrap();
    core.enqueue(eval("s2", "s1", 50, 2), t0, 0).unwrap();
    core.enqueue(typed(eval("b1", "b1", 50, 3), JobType::Batch), t0, 0)
        .unwrap();
    core.enqueue(typed(eval("y1", "y1", 50, 4), JobType::System), t0, 0)
        .unwrap();
    let mut later = typed(eval("b2", "b2", 50, 5), JobType::Batch);
    later.wait = 1;
    core.enqueue(later, t0, 0).unwrap();
    core.dequeue(QueueSet::from_names(&["system"]), t0)
        .unwrap()
        .unwrap();

    let stats = core.stats();
    assert_eq!(
        (
            stats.total_ready,
            stats.total_unacked,
            stats.total_pending,
            stats.total_waiting
        ),
        (2, 1, 1, 1)
    );
    let service = stats.by_scheduler[&SchedulerQueue::Service];
    assert_eq!((service.ready, service.pending), (1, 1));
    let batch = stats.by_scheduler[&SchedulerQueue::Batch];
    assert_eq!((batch.ready, batch.waiting), (1, 1));
    assert_eq!(stats.by_scheduler[&SchedulerQueue::System].unacked, 1);
    assert_eq!(stats.by_scheduler.len(), 6);
}

#[test]
fn queue_names_and_sets() {
    for q in SchedulerQueue::ALL {
        assert_eq!(SchedulerQueue::from_name(q.as_str()), Some(q));
    }
    assert_eq!(SchedulerQueue::Failed.as_str(), "_failed");
    assert_eq!(SchedulerQueue::from(JobType::SysBatch).as_str(), "sysbatch");
    let set = QueueSet::from_names(&["service", "nope", "_core"]);
    assert_eq!(
        set.iter().collect::<Vec<_>>(),
        [SchedulerQueue::Service, SchedulerQueue::Core]
    );
    assert!(set.intersects(QueueSet::EMPTY.with(SchedulerQueue::Core)));
    assert!(!set.contains(SchedulerQueue::Batch));
    assert_eq!(QueueSet::ALL.iter().count(), 6);
}

#[test]
fn tokens_are_uuid_shaped_and_reproducible_from_the_seed() {
    let mut rng = StdRng::seed_from_u64(1);
    let tokens: Vec<String> = (0..100).map(|_| crate::util::new_uuid(&mut rng)).collect();
    for t in &tokens {
        assert_eq!(t.len(), 36);
        let bytes = t.as_bytes();
        for (i, b) in bytes.iter().enumerate() {
            if matches!(i, 8 | 13 | 18 | 23) {
                assert_eq!(*b, b'-');
            } else {
                assert!(b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
            }
        }
        assert_eq!(bytes[14], b'4');
        assert!(matches!(bytes[19], b'8' | b'9' | b'a' | b'b'));
    }
    assert_eq!(tokens.iter().collect::<HashSet<_>>().len(), 100);
    assert_eq!(
        crate::util::new_uuid(&mut StdRng::seed_from_u64(1)),
        tokens[0]
    );
}

#[test]
fn config_defaults_are_nomads_and_validation_rejects_nonsense() {
    let config = EvalBrokerConfig::default();
    assert_eq!(config.nack_timeout, secs(60));
    assert_eq!(config.delivery_limit, 3);
    assert_eq!(
        (
            config.nack_initial_reenqueue_delay,
            config.nack_subsequent_reenqueue_delay
        ),
        (secs(1), secs(20))
    );
    assert_eq!(config.failed_followup_baseline_delay, secs(60));
    assert_eq!(config.failed_followup_delay_range, secs(300));
    assert_eq!(config.reap_cancelable_interval, secs(5));
    config.validate().unwrap();
    EvalBrokerConfig::for_tests().validate().unwrap();

    let bad = [
        EvalBrokerConfig {
            nack_timeout: Duration::ZERO,
            ..config.clone()
        },
        EvalBrokerConfig {
            delivery_limit: 0,
            ..config.clone()
        },
        EvalBrokerConfig {
            cancelable_batch_size: 0,
            ..config.clone()
        },
        EvalBrokerConfig {
            cancelable_batch_size: 7282,
            ..config.clone()
        },
        EvalBrokerConfig {
            stats_interval: Duration::ZERO,
            ..config.clone()
        },
    ];
    for config in bad {
        assert!(matches!(
            EvalBrokerCore::new(config, StdRng::seed_from_u64(0)),
            Err(BrokerError::InvalidConfig(_))
        ));
    }
}

// ---- the async shell, on paused tokio time ----

fn broker() -> EvalBroker {
    let broker = EvalBroker::new(
        EvalBrokerConfig::default(),
        StdRng::seed_from_u64(3),
        paused_wall_clock(),
    )
    .unwrap();
    broker.set_enabled(true);
    broker
}

const UNIX_BASE: i64 = 1_700_000_000_000_000_000;

/// A wall clock that follows tokio's (paused) clock from `UNIX_BASE`.
/// A wall clock that moves with tokio's paused clock.
struct PausedWallClock {
    start: Instant,
}

impl crate::util::Clock for PausedWallClock {
    fn now_unix_nanos(&self) -> i64 {
        UNIX_BASE + (Instant::now() - self.start).as_nanos() as i64
    }
}

fn paused_wall_clock() -> crate::util::SharedClock {
    Arc::new(PausedWallClock {
        start: Instant::now(),
    })
}

async fn until_waiting(broker: &EvalBroker, n: usize) {
    while broker.waiting_dequeuers() < n {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn every_waiting_dequeuer_is_woken_when_work_arrives() {
    let broker = broker();
    let start = Instant::now();
    let spawn = |types: &'static [&'static str]| {
        let broker = broker.clone();
        tokio::spawn(async move { broker.dequeue(types, secs(600)).await })
    };
    let service: Vec<_> = (0..6).map(|_| spawn(&["service"])).collect();
    let batch: Vec<_> = (0..2).map(|_| spawn(&["batch", "system"])).collect();
    until_waiting(&broker, 8).await;

    // One batch of six: every service dequeuer must get one, now, not at its timeout.
    let evals = (0..6)
        .map(|i| (eval(&format!("s{i}"), &format!("s{i}"), 50, i), None))
        .collect();
    broker.enqueue_all(evals).unwrap();
    let mut got = HashSet::new();
    for handle in service {
        let (e, _) = handle.await.unwrap().unwrap().expect("woken with work");
        got.insert(e.id.to_string());
    }
    assert_eq!(got.len(), 6);
    assert_eq!(Instant::now(), start, "nobody waited for a timeout");
    assert_eq!(
        broker.waiting_dequeuers(),
        2,
        "batch/system dequeuers still wait"
    );

    broker
        .enqueue(typed(eval("y", "y", 50, 1), JobType::System))
        .unwrap();
    broker
        .enqueue(typed(eval("b", "b", 50, 1), JobType::Batch))
        .unwrap();
    for handle in batch {
        assert!(handle.await.unwrap().unwrap().is_some());
    }
    assert_eq!(Instant::now(), start);
}

#[tokio::test(start_paused = true)]
async fn dequeue_times_out_empty_and_deregisters() {
    let broker = broker();
    let start = Instant::now();
    assert_eq!(
        broker
            .dequeue(&["service"], Duration::from_millis(500))
            .await,
        Ok(None)
    );
    assert_eq!(Instant::now() - start, Duration::from_millis(500));
    assert_eq!(broker.waiting_dequeuers(), 0);
    assert_eq!(broker.dequeue(&["service"], Duration::ZERO).await, Ok(None));
    assert_eq!(
        broker.dequeue::<&str>(&[], secs(1)).await,
        Err(BrokerError::NoSchedulers)
    );

    // A dropped (cancelled) dequeue leaves no registration behind.
    let pending = tokio::time::timeout(secs(1), broker.dequeue(&["service"], secs(60))).await;
    assert!(pending.is_err());
    assert_eq!(broker.waiting_dequeuers(), 0);
}

#[tokio::test(start_paused = true)]
async fn disabling_wakes_waiting_dequeuers_with_an_error() {
    let broker = broker();
    let waiter = {
        let broker = broker.clone();
        tokio::spawn(async move { broker.dequeue(&["service"], secs(600)).await })
    };
    until_waiting(&broker, 1).await;
    let start = Instant::now();
    broker.set_enabled(false);
    assert_eq!(waiter.await.unwrap(), Err(BrokerError::Disabled));
    assert_eq!(Instant::now(), start);
    assert_eq!(
        broker.enqueue(eval("a", "a", 50, 1)),
        Err(BrokerError::Disabled)
    );
    assert_eq!(broker.stats().total_ready, 0);
    broker.set_enabled(true);
    assert_eq!(
        broker.enqueue(eval("a", "a", 50, 1)),
        Ok(EnqueueOutcome::Ready)
    );
}

#[tokio::test(start_paused = true)]
async fn the_nack_timer_fires_on_tokio_time() {
    let broker = broker();
    let start = Instant::now();
    broker.enqueue(eval("e", "web", 50, 1)).unwrap();
    let (e, first) = broker
        .dequeue(&["service"], secs(1))
        .await
        .unwrap()
        .unwrap();
    // Never acked: redelivered after the 60 s nack timeout plus the 1 s backoff.
    let (again, second) = broker
        .dequeue(&["service"], secs(600))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.id, e.id);
    assert_eq!(Instant::now() - start, secs(61));
    assert_ne!(first, second);
    assert_eq!(
        broker.ack(&e.id, &first),
        Err(BrokerError::TokenMismatch {
            eval_id: e.id.clone()
        })
    );
    broker.ack(&e.id, &second).unwrap();
}

#[tokio::test(start_paused = true)]
async fn outstanding_reset_keeps_a_slow_worker_alive() {
    let broker = broker();
    broker.enqueue(eval("e", "web", 50, 1)).unwrap();
    let (e, token) = broker
        .dequeue(&["service"], secs(1))
        .await
        .unwrap()
        .unwrap();
    for _ in 0..5 {
        tokio::time::sleep(secs(50)).await;
        broker.outstanding_reset(&e.id, &token).unwrap();
    }
    broker.pause_nack_timeout(&e.id, &token).unwrap();
    tokio::time::sleep(secs(600)).await;
    broker.resume_nack_timeout(&e.id, &token).unwrap();
    tokio::time::sleep(secs(59)).await;
    assert_eq!(broker.outstanding(&e.id).unwrap(), Some(token.clone()));
    broker.ack(&e.id, &token).unwrap();
    assert_eq!(broker.stats().total_unacked, 0);
}

#[tokio::test(start_paused = true)]
async fn delayed_evals_are_released_on_tokio_time() {
    let broker = broker();
    let start = Instant::now();
    let mut e = eval("later", "web", 50, 1);
    e.wait_until = Timestamp::from_unix_nanos(UNIX_BASE + secs(30).as_nanos() as i64);
    broker.enqueue(e).unwrap();
    let mut w = eval("wait", "other", 50, 2);
    w.wait = secs(10).as_nanos() as u64;
    broker.enqueue(w).unwrap();

    let (first, _) = broker
        .dequeue(&["service"], secs(600))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (first.id.as_str(), Instant::now() - start),
        ("wait", secs(10))
    );
    let (second, _) = broker
        .dequeue(&["service"], secs(600))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (second.id.as_str(), Instant::now() - start),
        ("later", secs(30))
    );
}

#[tokio::test(start_paused = true)]
async fn the_cancelable_reaper_is_woken_by_an_ack() {
    let broker = broker();
    broker.enqueue(eval("a", "web", 50, 1)).unwrap();
    let (a, token) = broker
        .dequeue(&["service"], secs(1))
        .await
        .unwrap()
        .unwrap();
    broker.enqueue(eval("b", "web", 50, 2)).unwrap();
    broker.enqueue(eval("c", "web", 50, 3)).unwrap();
    let reaper = {
        let broker = broker.clone();
        tokio::spawn(async move {
            broker.wait_cancelable(secs(5)).await;
            broker.cancelable(CANCELABLE_BATCH_SIZE)
        })
    };
    tokio::task::yield_now().await;
    let start = Instant::now();
    broker.ack(&a.id, &token).unwrap();
    let canceled = reaper.await.unwrap().unwrap();
    assert_eq!(ids(&canceled), ["b"]);
    assert_eq!(Instant::now(), start);
}

#[tokio::test(start_paused = true)]
async fn held_deliveries_wait_until_released_and_disabling_releases_them() {
    let broker = broker();
    broker.hold_deliveries(true);
    broker.enqueue(eval("a", "a", 50, 1)).unwrap();
    // Held: nothing is delivered, a dequeue waits out its timeout.
    assert_eq!(broker.dequeue(&["service"], Duration::ZERO).await, Ok(None));
    let waiter = {
        let broker = broker.clone();
        tokio::spawn(async move { broker.dequeue(&["service"], secs(600)).await })
    };
    until_waiting(&broker, 1).await;
    tokio::time::sleep(secs(5)).await;
    assert!(!waiter.is_finished());
    let start = Instant::now();
    broker.hold_deliveries(false);
    let (e, _) = waiter
        .await
        .unwrap()
        .unwrap()
        .expect("delivered once released");
    assert_eq!(e.id.as_str(), "a");
    assert_eq!(Instant::now(), start);

    // Disabling (stepping down) releases a hold: the next leadership starts delivering.
    broker.hold_deliveries(true);
    broker.set_enabled(false);
    broker.set_enabled(true);
    broker.enqueue(eval("b", "b", 50, 2)).unwrap();
    assert!(delivers_now(&broker).await);
    // A hold set while disabled does not outlive the next enabling.
    broker.set_enabled(false);
    broker.hold_deliveries(true);
    broker.set_enabled(true);
    broker.enqueue(eval("c", "c", 50, 3)).unwrap();
    assert!(delivers_now(&broker).await);
}

/// Whether a look at the service queue finds an evaluation to deliver.
async fn delivers_now(broker: &EvalBroker) -> bool {
    broker
        .dequeue(&["service"], Duration::ZERO)
        .await
        .unwrap()
        .is_some()
}
