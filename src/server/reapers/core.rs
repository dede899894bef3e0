//! The reapers' writes, without I/O: what the leader writes back to raft for the evaluations
//! its broker and blocked-evals tracker give up on. Each builder takes the evaluations, the
//! wall clock as Unix nanoseconds and (for new ids and delays) an RNG, and returns the
//! evaluations of one raft write.
//!
//! - [`failed_eval_update`]: an eval past the delivery limit, written `failed`, with its
//!   delayed follow-up ([`failed_follow_up_wait`], [`failed_follow_up_eval`]).
//! - [`mark_canceled`]: superseded evals from the broker's cancelable list.
//! - [`mark_duplicates_canceled`]: blocked evals superseded by a newer one of their job.

use std::time::Duration;

use rand::Rng;
use teamster_storage::model::{EvalId, EvalStatus, EvalTrigger, Evaluation, JobId, JobType};

use crate::server::config::EvalBrokerConfig;

/// Status description of an eval canceled because a newer eval of its job was processed.
pub const CANCELED_DESCRIPTION: &str = "canceled after more recent eval was processed";

/// What the failed-eval reaper writes for an eval taken from the `_failed` queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedEvalUpdate {
    /// The eval marked `failed`, pointing at its follow-up (if any) through `NextEval`.
    pub failed: Evaluation,
    /// A pending eval of the same job that retries after a long random delay; `None` when the
    /// job no longer exists.
    pub follow_up: Option<Evaluation>,
}

/// The raft write for an eval that reached the delivery limit (Nomad's
/// `reapFailedEvaluations`): the eval marked failed with "evaluation reached delivery limit
/// (N)", plus a follow-up eval (new id from `rng`, `TriggeredBy = failed-follow-up`,
/// `Wait` = baseline + uniform random in `[0, range)`) unless the job is gone.
///
/// Returns `None` for `_core` evals: the reaper only acks those, since the leader schedules
/// core work itself. Write both evals in one raft entry, then ack the delivery.
pub fn failed_eval_update<R: Rng + ?Sized>(
    eval: &Evaluation,
    job_exists: bool,
    config: &EvalBrokerConfig,
    rng: &mut R,
    now_unix_nanos: i64,
) -> Option<FailedEvalUpdate> {
    if eval.eval_type == JobType::Core {
        return None;
    }
    let mut failed = eval.clone();
    failed.status = EvalStatus::Failed;
    failed.status_description = format!(
        "evaluation reached delivery limit ({})",
        config.delivery_limit
    );
    failed.modify_time = modify_time(&failed, now_unix_nanos);
    let follow_up = job_exists.then(|| {
        let wait = failed_follow_up_wait(config, rng);
        failed_follow_up_eval(
            eval,
            wait,
            EvalId::new(crate::util::new_uuid(rng)),
            now_unix_nanos,
        )
    });
    if let Some(follow_up) = &follow_up {
        failed.next_eval = follow_up.id.clone();
    }
    Some(FailedEvalUpdate { failed, follow_up })
}

/// The `Wait` of a failed eval's follow-up: baseline + uniform random in `[0, range)`.
pub fn failed_follow_up_wait<R: Rng + ?Sized>(config: &EvalBrokerConfig, rng: &mut R) -> Duration {
    let range = u64::try_from(config.failed_followup_delay_range.as_nanos()).unwrap_or(u64::MAX);
    let jitter = if range == 0 {
        0
    } else {
        rng.gen_range(0..range)
    };
    config
        .failed_followup_baseline_delay
        .saturating_add(Duration::from_nanos(jitter))
}

/// The follow-up of a failed eval (Nomad's `CreateFailedFollowUpEval`): same job, namespace,
/// priority and type, pending, `TriggeredBy = failed-follow-up`, delayed by `wait`.
pub fn failed_follow_up_eval(
    failed: &Evaluation,
    wait: Duration,
    id: EvalId,
    now_unix_nanos: i64,
) -> Evaluation {
    Evaluation {
        id,
        namespace: failed.namespace.clone(),
        priority: failed.priority,
        eval_type: failed.eval_type,
        triggered_by: EvalTrigger::FailedFollowUp,
        job_id: failed.job_id.clone(),
        job_modify_index: failed.job_modify_index,
        status: EvalStatus::Pending,
        wait: u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX),
        previous_eval: failed.id.clone(),
        create_time: now_unix_nanos,
        modify_time: now_unix_nanos,
        ..Evaluation::default()
    }
}

/// Marks superseded evals (from `EvalBroker::cancelable`) canceled, ready for one raft write.
pub fn mark_canceled(evals: Vec<Evaluation>, now_unix_nanos: i64) -> Vec<Evaluation> {
    canceled(evals, now_unix_nanos, |_| CANCELED_DESCRIPTION.to_owned())
}

/// The status description of a duplicate blocked eval written as canceled.
pub fn duplicate_description(job_id: &JobId) -> String {
    format!(
        "existing blocked evaluation exists for job {:?}",
        job_id.as_str()
    )
}

/// Marks duplicate blocked evals (from `BlockedEvals::take_duplicates`) canceled, ready for
/// one raft write.
pub fn mark_duplicates_canceled(evals: Vec<Evaluation>, now_unix_nanos: i64) -> Vec<Evaluation> {
    canceled(evals, now_unix_nanos, |eval| {
        duplicate_description(&eval.job_id)
    })
}

/// `evals` marked canceled with the given status description.
fn canceled(
    evals: Vec<Evaluation>,
    now_unix_nanos: i64,
    description: impl Fn(&Evaluation) -> String,
) -> Vec<Evaluation> {
    evals
        .into_iter()
        .map(|mut eval| {
            eval.status = EvalStatus::Canceled;
            eval.status_description = description(&eval);
            eval.modify_time = modify_time(&eval, now_unix_nanos);
            eval
        })
        .collect()
}

/// The `ModifyTime` of a write at `now_unix_nanos`: never before the eval was created.
fn modify_time(eval: &Evaluation, now_unix_nanos: i64) -> i64 {
    now_unix_nanos.max(eval.create_time.saturating_add(1))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rand::rngs::StdRng;
    use rand::SeedableRng;
    use teamster_storage::model::{EvalStatus, EvalTrigger, JobType};
    use tokio::time::Instant;

    use super::*;
    use crate::server::broker::tests::{core, drain, eval, secs, typed, SERVICE};
    use crate::server::broker::{EnqueueOutcome, QueueSet, SchedulerQueue, FAILED_QUEUE};

    #[test]
    fn nack_delays_compound_then_the_delivery_limit_moves_the_eval_to_failed() {
        let config = EvalBrokerConfig::default();
        assert_eq!(config.nack_reenqueue_delay(0), Duration::ZERO);
        assert_eq!(config.nack_reenqueue_delay(1), secs(1));
        assert_eq!(config.nack_reenqueue_delay(2), secs(20));
        assert_eq!(config.nack_reenqueue_delay(3), secs(40));

        let mut core = core();
        let mut now = Instant::now();
        core.enqueue(eval("e", "web", 50, 1), now, 0).unwrap();
        core.enqueue(eval("later", "web", 50, 2), now, 0).unwrap();

        let (e, token) = core.dequeue(SERVICE, now).unwrap().unwrap();
        core.nack(&e.id, &token, now).unwrap();
        assert!(core
            .dequeue(SERVICE, now + secs(1) - Duration::from_nanos(1))
            .unwrap()
            .is_none());
        now += secs(1);

        let (e, token) = core.dequeue(SERVICE, now).unwrap().unwrap();
        assert_eq!(e.id, "e", "a nacked eval keeps its job's slot");
        core.nack(&e.id, &token, now).unwrap();
        assert!(core
            .dequeue(SERVICE, now + secs(20) - Duration::from_nanos(1))
            .unwrap()
            .is_none());
        now += secs(20);

        let (e, token) = core.dequeue(SERVICE, now).unwrap().unwrap();
        core.nack(&e.id, &token, now).unwrap();
        // Third failed delivery: straight to `_failed`, not back to `service`.
        assert!(core.dequeue(SERVICE, now + secs(3600)).unwrap().is_none());
        let stats = core.stats();
        assert_eq!(stats.by_scheduler[&SchedulerQueue::Failed].ready, 1);
        assert_eq!(stats.total_pending, 1, "the job's later eval still waits");

        let failed_queue = QueueSet::from_names(&[FAILED_QUEUE]);
        let (failed, token) = core.dequeue(failed_queue, now).unwrap().unwrap();
        assert_eq!(failed.id, "e");
        assert_eq!(
            core.stats().by_scheduler[&SchedulerQueue::Failed].unacked,
            1
        );

        // What the failed-eval reaper writes before acking: the eval failed, plus a
        // follow-up that retries the job after 1 min + random [0, 5 min).
        let mut rng = StdRng::seed_from_u64(9);
        let update = failed_eval_update(&failed, true, core.config(), &mut rng, 1_000).unwrap();
        assert_eq!(update.failed.status, EvalStatus::Failed);
        let follow_up = update.follow_up.unwrap();
        assert_eq!(update.failed.next_eval, follow_up.id);
        let wait = Duration::from_nanos(follow_up.wait);
        assert!(wait >= secs(60) && wait < secs(360), "{wait:?}");
        core.ack(&failed.id, &token, now).unwrap();
        let stats = core.stats();
        assert_eq!(stats.total_unacked, 0);
        assert_eq!(drain(&mut core, SERVICE, now), ["later"]);

        // The follow-up, once the FSM applies it, waits out its delay in the broker.
        let follow_up_id = follow_up.id.to_string();
        assert_eq!(
            core.enqueue(follow_up, now, 0).unwrap(),
            EnqueueOutcome::Waiting { until: now + wait }
        );
        assert!(drain(&mut core, SERVICE, now + wait - Duration::from_nanos(1)).is_empty());
        assert_eq!(drain(&mut core, SERVICE, now + wait), [follow_up_id]);
    }

    #[test]
    fn failed_eval_update_builds_the_failed_write_and_a_delayed_follow_up() {
        let config = EvalBrokerConfig::default();
        let mut rng = StdRng::seed_from_u64(42);
        let mut failed = eval("e", "web", 70, 5);
        failed.create_time = 1_000;
        let update = failed_eval_update(&failed, true, &config, &mut rng, 2_000).unwrap();
        assert_eq!(update.failed.status, EvalStatus::Failed);
        assert_eq!(
            update.failed.status_description,
            "evaluation reached delivery limit (3)"
        );
        assert_eq!(update.failed.modify_time, 2_000);
        let follow = update.follow_up.unwrap();
        assert_eq!(update.failed.next_eval, follow.id);
        assert_ne!(follow.id, failed.id);
        assert_eq!(follow.id.len(), 36);
        assert_eq!(follow.triggered_by, EvalTrigger::FailedFollowUp);
        assert_eq!(follow.status, EvalStatus::Pending);
        assert_eq!(follow.previous_eval, failed.id);
        assert_eq!((follow.priority, follow.eval_type), (70, JobType::Service));
        assert_eq!(follow.job_id, failed.job_id);
        assert_eq!((follow.create_time, follow.modify_time), (2_000, 2_000));

        // Wait = 1 min + uniform [0, 5 min).
        let waits: Vec<Duration> = (0..200)
            .map(|_| failed_follow_up_wait(&config, &mut rng))
            .collect();
        assert!(waits.iter().all(|w| *w >= secs(60) && *w < secs(360)));
        assert!(waits.iter().any(|w| *w < secs(120)) && waits.iter().any(|w| *w > secs(300)));
        assert!(Duration::from_nanos(follow.wait) >= secs(60));

        // The same seed gives the same follow-up.
        let again = failed_eval_update(
            &failed,
            true,
            &config,
            &mut StdRng::seed_from_u64(42),
            2_000,
        );
        assert_eq!(again.unwrap().follow_up.unwrap().id, follow.id);

        let orphan = failed_eval_update(&failed, false, &config, &mut rng, 2_000).unwrap();
        assert!(orphan.follow_up.is_none());
        assert!(orphan.failed.next_eval.is_empty());

        let core_eval = typed(eval("gc", "gc", 200, 1), JobType::Core);
        assert!(failed_eval_update(&core_eval, true, &config, &mut rng, 2_000).is_none());
    }

    #[test]
    fn superseded_evals_are_written_canceled() {
        // As the broker hands them out: superseded pending evals of one job.
        let batch = vec![eval("p0", "sys", 50, 10), eval("p1", "sys", 50, 11)];
        let written = mark_canceled(batch, 5_000);
        assert!(written.iter().all(|e| e.status == EvalStatus::Canceled
            && e.status_description == CANCELED_DESCRIPTION
            && e.modify_time == 5_000));
    }

    #[test]
    fn duplicate_blocked_evals_are_written_canceled() {
        let mut old = eval("old", "web", 50, 11);
        old.status = EvalStatus::Blocked;
        let written = mark_duplicates_canceled(vec![old], 99);
        assert_eq!(written[0].status, EvalStatus::Canceled);
        assert_eq!(
            written[0].status_description,
            "existing blocked evaluation exists for job \"web\""
        );
    }
}
