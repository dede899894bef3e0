//! The client-side RestartPolicy, as a sans-IO tracker: a task exited at `now` — restart it
//! after a delay, or leave it dead (failed or not).
//!
//! Nomad's rules: a batch task that exits 0 is done; any other exit counts against
//! `Attempts` within a window of `Interval`; within the budget the task restarts after
//! `Delay`; past it, mode `fail` leaves the task dead and failed, mode `delay` waits for the
//! window to end and starts a fresh one.

use std::time::Duration;

use teamster_storage::model::{RestartMode, RestartPolicy};
use tokio::time::Instant;

use crate::client::types::ExitResult;

/// Nomad's restart reason for a restart the policy allows (`ReasonWithinPolicy`).
pub const WITHIN_POLICY: &str = "Restart within policy";

/// What to do after an exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestartDecision {
    /// Start the task again after this delay.
    Restart {
        /// The wait before restarting.
        delay: Duration,
        /// Why (for the `Restarting` event).
        reason: String,
    },
    /// Leave the task dead.
    Dead {
        /// Whether the task failed.
        failed: bool,
        /// Why (for the event).
        reason: String,
    },
}

/// Counts restarts against a policy.
#[derive(Debug, Clone)]
pub struct RestartTracker {
    attempts: u32,
    interval: Duration,
    delay: Duration,
    mode: RestartMode,
    batch: bool,
    count: u32,
    window_start: Option<Instant>,
}

impl RestartTracker {
    /// A tracker for `policy` (unset fields: Nomad's batch defaults); `batch` for batch and
    /// sysbatch jobs, whose successful exits are final.
    pub fn new(policy: &RestartPolicy, batch: bool) -> Self {
        let mut tracker = RestartTracker {
            attempts: 0,
            interval: Duration::ZERO,
            delay: Duration::ZERO,
            mode: RestartMode::Fail,
            batch,
            count: 0,
            window_start: None,
        };
        tracker.set_policy(policy);
        tracker
    }

    /// Follow `policy` from now on (an in-place update); the restarts of the current window
    /// stay counted.
    pub fn set_policy(&mut self, policy: &RestartPolicy) {
        self.attempts = policy.attempts.unwrap_or(3);
        self.interval = Duration::from_nanos(policy.interval.unwrap_or(86_400_000_000_000));
        self.delay = Duration::from_nanos(policy.delay.unwrap_or(15_000_000_000));
        self.mode = policy.mode.unwrap_or(RestartMode::Fail);
    }

    /// Restarts counted in the current window.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The task could not start at `now` (a recoverable driver error): one failed attempt.
    pub fn on_start_error(&mut self, now: Instant) -> RestartDecision {
        let failed = ExitResult {
            exit_code: 1,
            signal: 0,
            unknown: false,
            oom_killed: false,
        };
        match self.on_exit(now, &failed) {
            RestartDecision::Restart { delay, .. } => RestartDecision::Restart {
                delay,
                reason: "restarting: the task failed to start".into(),
            },
            dead => dead,
        }
    }

    /// The task exited with `exit` at `now`.
    pub fn on_exit(&mut self, now: Instant, exit: &ExitResult) -> RestartDecision {
        if self.batch && exit.successful() {
            return RestartDecision::Dead {
                failed: false,
                reason: "task completed successfully".into(),
            };
        }
        let start = *self.window_start.get_or_insert(now);
        if now.duration_since(start) >= self.interval {
            self.window_start = Some(now);
            self.count = 0;
        }
        let window_start = self.window_start.unwrap_or(now);
        self.count += 1;
        if self.count <= self.attempts {
            return RestartDecision::Restart {
                delay: self.delay,
                reason: WITHIN_POLICY.into(),
            };
        }
        match self.mode {
            RestartMode::Fail => RestartDecision::Dead {
                failed: true,
                reason: format!(
                    "exceeded allowed attempts {} in interval {}",
                    self.attempts,
                    humantime::format_duration(self.interval)
                ),
            },
            RestartMode::Delay => {
                let window_end = window_start + self.interval;
                self.window_start = None;
                self.count = 0;
                RestartDecision::Restart {
                    delay: window_end.saturating_duration_since(now).max(self.delay),
                    reason: format!(
                        "Exceeded allowed attempts {} in interval {} and mode is \"delay\"",
                        self.attempts,
                        humantime::format_duration(self.interval)
                    ),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(attempts: u32, interval_s: u64, delay_s: u64, mode: RestartMode) -> RestartPolicy {
        RestartPolicy {
            attempts: Some(attempts),
            interval: Some(interval_s * 1_000_000_000),
            delay: Some(delay_s * 1_000_000_000),
            mode: Some(mode),
            render_templates: None,
        }
    }

    fn exit(code: i64) -> ExitResult {
        ExitResult {
            exit_code: code,
            signal: 0,
            unknown: false,
            oom_killed: false,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn batch_success_is_final() {
        let mut t = RestartTracker::new(&policy(3, 60, 1, RestartMode::Fail), true);
        assert!(matches!(
            t.on_exit(Instant::now(), &exit(0)),
            RestartDecision::Dead { failed: false, .. }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn mode_fail_gives_up_after_the_attempts() {
        let mut t = RestartTracker::new(&policy(2, 60, 1, RestartMode::Fail), false);
        let now = Instant::now();
        for _ in 0..2 {
            assert_eq!(
                t.on_exit(now, &exit(1)),
                RestartDecision::Restart {
                    delay: Duration::from_secs(1),
                    reason: WITHIN_POLICY.into()
                }
            );
        }
        assert!(matches!(
            t.on_exit(now, &exit(1)),
            RestartDecision::Dead { failed: true, .. }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_interval_resets_the_count() {
        let mut t = RestartTracker::new(&policy(1, 10, 1, RestartMode::Fail), false);
        let now = Instant::now();
        assert!(matches!(
            t.on_exit(now, &exit(1)),
            RestartDecision::Restart { .. }
        ));
        let later = now + Duration::from_secs(11);
        assert!(matches!(
            t.on_exit(later, &exit(1)),
            RestartDecision::Restart { .. }
        ));
        assert_eq!(t.count(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn mode_delay_waits_for_the_window_to_end() {
        let mut t = RestartTracker::new(&policy(1, 60, 1, RestartMode::Delay), false);
        let now = Instant::now();
        t.on_exit(now, &exit(1));
        let d = t.on_exit(now + Duration::from_secs(20), &exit(1));
        assert!(
            matches!(d, RestartDecision::Restart { delay, .. } if delay == Duration::from_secs(40)),
            "{d:?}"
        );
        // A fresh window follows.
        assert!(matches!(
            t.on_exit(now + Duration::from_secs(61), &exit(1)),
            RestartDecision::Restart { delay, .. } if delay == Duration::from_secs(1)
        ));
    }

    /// Issue 52: a task that fails to start counts against the policy as an exit does,
    /// instead of failing the allocation at once (which the scheduler then replaced).
    #[test]
    fn a_start_error_is_one_attempt_with_the_policys_delay() {
        let mut t = RestartTracker::new(&policy(2, 1800, 15, RestartMode::Fail), false);
        let now = Instant::now();
        for _ in 0..2 {
            assert_eq!(
                t.on_start_error(now),
                RestartDecision::Restart {
                    delay: Duration::from_secs(15),
                    reason: "restarting: the task failed to start".into(),
                }
            );
        }
        assert!(matches!(
            t.on_start_error(now),
            RestartDecision::Dead { failed: true, .. }
        ));
    }
}
