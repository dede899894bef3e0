//! The task runner's decisions, without I/O: how the task is stopped (signal, timeout,
//! shutdown delay), what each exit or failed start leads to (the restart policy), and the
//! task events that record it. The shell ([`super`]) runs the decisions.

use std::time::Duration;

use teamster_storage::model::{RestartPolicy, Task, TaskEvent};
use tokio::time::Instant;

use crate::client::restart::{RestartDecision, RestartTracker};
use crate::client::types::{event, ExitResult, KillReason};

/// Kill timeout when a task names none.
pub const DEFAULT_KILL_TIMEOUT: Duration = Duration::from_secs(5);
/// The exit message of a task the kernel's OOM killer ended (Nomad's words).
pub const OOM_KILLED: &str = "OOM Killed";

/// The task's stop and restart rules, and its restart count.
#[derive(Debug, Clone)]
pub struct TaskCore {
    tracker: RestartTracker,
    restarts: u64,
    kill_timeout: Duration,
    kill_signal: (&'static str, i32),
    shutdown_delay: Duration,
    max_kill_timeout: Duration,
}

impl TaskCore {
    /// The rules of `task` under `policy` (its own block over its group's); `batch` when a
    /// successful exit is final (batch and sysbatch jobs' tasks, ephemeral lifecycle and
    /// poststop tasks: [`crate::client::lifecycle::Stage::success_is_final`]); a kill
    /// timeout capped at `max_kill_timeout`; `restarts` so far.
    pub fn new(
        task: &Task,
        policy: &RestartPolicy,
        batch: bool,
        max_kill_timeout: Duration,
        restarts: u64,
    ) -> TaskCore {
        let mut core = TaskCore {
            tracker: RestartTracker::new(policy, batch),
            restarts,
            kill_timeout: DEFAULT_KILL_TIMEOUT,
            kill_signal: ("SIGTERM", libc::SIGTERM),
            shutdown_delay: Duration::ZERO,
            max_kill_timeout,
        };
        core.set_stop_rules(task);
        core
    }

    fn set_stop_rules(&mut self, task: &Task) {
        let asked = if task.kill_timeout == 0 {
            DEFAULT_KILL_TIMEOUT
        } else {
            Duration::from_nanos(task.kill_timeout)
        };
        self.kill_timeout = asked.min(self.max_kill_timeout);
        self.kill_signal =
            crate::client::signal::parse(&task.kill_signal).unwrap_or(("SIGTERM", libc::SIGTERM));
        self.shutdown_delay = Duration::from_nanos(task.shutdown_delay);
    }

    /// An in-place update brought `task` under `policy`: the next stop uses its kill signal,
    /// timeout and shutdown delay, the next exit its restart policy (the restarts counted in
    /// the current window stay counted).
    pub fn update(&mut self, task: &Task, policy: &RestartPolicy) {
        self.set_stop_rules(task);
        self.tracker.set_policy(policy);
    }

    /// The wait between the kill signal and SIGKILL.
    pub fn kill_timeout(&self) -> Duration {
        self.kill_timeout
    }

    /// The signal that asks the task to stop.
    pub fn kill_signal(&self) -> i32 {
        self.kill_signal.1
    }

    /// Restarts so far.
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// Counts one restart.
    pub fn restarted(&mut self) -> u64 {
        self.restarts += 1;
        self.restarts
    }

    /// How a kill for `reason` at `now` begins: the events recorded before the wait, and the
    /// wait (the task's `shutdown_delay`) before the signal.
    pub fn kill_plan(&self, reason: &KillReason, now: i64) -> (Vec<TaskEvent>, Duration) {
        let mut events = Vec::new();
        match reason {
            KillReason::Stopped | KillReason::AgentShutdown | KillReason::MaxRunDuration => {}
            KillReason::SiblingFailed(sibling) => {
                let mut ev = event(
                    now,
                    "Sibling Task Failed",
                    format!("Task's sibling {sibling:?} failed"),
                );
                ev.details.insert("failed_sibling".into(), sibling.clone());
                events.push(ev);
            }
            KillReason::LeaderDead => events.push(event(
                now,
                "Leader Task Dead",
                "Leader Task in Group dead".into(),
            )),
            KillReason::MainDead => events.push(event(
                now,
                "Main Tasks Dead",
                "Main tasks in the group died".into(),
            )),
        }
        if !reason.waits_shutdown_delay() {
            return (events, Duration::ZERO);
        }
        if !self.shutdown_delay.is_zero() {
            events.push(event(
                now,
                "Waiting for shutdown delay",
                format!(
                    "Waiting for shutdown_delay of {} before killing the task.",
                    humantime::format_duration(self.shutdown_delay)
                ),
            ));
        }
        (events, self.shutdown_delay)
    }

    /// The `Killing` event: the signal is sent now.
    pub fn killing(&self, now: i64) -> TaskEvent {
        let mut ev = event(
            now,
            "Killing",
            format!(
                "Sent interrupt. Waiting {} before force killing",
                humantime::format_duration(self.kill_timeout)
            ),
        );
        ev.kill_timeout = self.kill_timeout.as_nanos() as u64;
        ev
    }

    /// The `Terminated` event of an exit.
    pub fn terminated(exit: &ExitResult, now: i64) -> TaskEvent {
        // Nomad's display: the exit code, the signal when there was one, and the exit
        // message when there is one (here: only an exit nobody saw).
        let mut ev = if exit.unknown {
            event(
                now,
                "Terminated",
                "Task exited while the client was not watching; exit code unknown".to_string(),
            )
        } else {
            // An OOM kill is the exit message, as Nomad's drivers report it.
            let message = if exit.oom_killed { OOM_KILLED } else { "" };
            let mut ev = event(now, "Terminated", message.to_string());
            ev.display_message = match exit.signal {
                0 => format!("Exit Code: {}", exit.exit_code),
                signal => format!("Exit Code: {}, Signal: {signal}", exit.exit_code),
            };
            if exit.oom_killed {
                ev.display_message += &format!(", Exit Message: {OOM_KILLED:?}");
            }
            ev
        };
        ev.exit_code = exit.exit_code;
        ev.signal = exit.signal;
        if exit.unknown {
            ev.details.insert("exit_code_unknown".into(), "true".into());
        }
        if exit.oom_killed {
            ev.details.insert("oom_killed".into(), "true".into());
            metrics::counter!("teamster_client_allocs_oom_killed_total").increment(1);
        }
        ev
    }

    /// The task exited at `now`: restart it or leave it dead.
    pub fn on_exit(&mut self, now: Instant, exit: &ExitResult) -> RestartDecision {
        self.tracker.on_exit(now, exit)
    }

    /// The task could not start at `now` (a recoverable error): one attempt.
    pub fn on_start_error(&mut self, now: Instant) -> RestartDecision {
        self.tracker.on_start_error(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(kill_signal: &str, shutdown_delay: Duration, kill_timeout: Duration) -> Task {
        Task {
            name: "web".into(),
            kill_signal: kill_signal.into(),
            shutdown_delay: shutdown_delay.as_nanos() as u64,
            kill_timeout: kill_timeout.as_nanos() as u64,
            ..Task::default()
        }
    }

    /// An OOM kill is the termination's exit message and detail, as Nomad reports it.
    #[test]
    fn an_oom_kill_is_reported_in_the_terminated_event() {
        let exit = ExitResult {
            exit_code: 0,
            signal: 9,
            unknown: false,
            oom_killed: true,
        };
        let ev = TaskCore::terminated(&exit, 1);
        assert_eq!(
            ev.display_message,
            "Exit Code: 0, Signal: 9, Exit Message: \"OOM Killed\""
        );
        assert_eq!(ev.message, OOM_KILLED);
        assert_eq!(ev.details["oom_killed"], "true");
        let plain = TaskCore::terminated(
            &ExitResult {
                oom_killed: false,
                ..exit
            },
            1,
        );
        assert_eq!(plain.display_message, "Exit Code: 0, Signal: 9");
        assert!(!plain.details.contains_key("oom_killed"));
    }

    #[test]
    fn the_kill_follows_the_task_s_signal_timeout_and_delay() {
        let core = TaskCore::new(
            &task("usr1", Duration::from_secs(3), Duration::from_secs(60)),
            &RestartPolicy::default(),
            false,
            Duration::from_secs(30),
            0,
        );
        assert_eq!(core.kill_signal(), libc::SIGUSR1);
        // Capped by the client's max_kill_timeout.
        assert_eq!(core.kill_timeout(), Duration::from_secs(30));
        let (events, wait) = core.kill_plan(&KillReason::LeaderDead, 7);
        assert_eq!(wait, Duration::from_secs(3));
        let kinds: Vec<_> = events.iter().map(|e| e.event_type.as_str()).collect();
        assert_eq!(kinds, ["Leader Task Dead", "Waiting for shutdown delay"]);
        assert_eq!(core.killing(8).kill_timeout, 30_000_000_000);
    }

    #[test]
    fn defaults_are_sigterm_five_seconds_and_no_wait() {
        let core = TaskCore::new(
            &task("", Duration::ZERO, Duration::ZERO),
            &RestartPolicy::default(),
            true,
            Duration::from_secs(30),
            2,
        );
        assert_eq!(core.kill_signal(), libc::SIGTERM);
        assert_eq!(core.kill_timeout(), DEFAULT_KILL_TIMEOUT);
        let (events, wait) = core.kill_plan(&KillReason::SiblingFailed("db".into()), 1);
        assert_eq!(wait, Duration::ZERO);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].details["failed_sibling"], "db");
        let mut core = core;
        assert_eq!(core.restarted(), 3);
        // An agent taking its tasks down waits no delay.
        let delayed = TaskCore::new(
            &task("", Duration::from_secs(9), Duration::ZERO),
            &RestartPolicy::default(),
            false,
            Duration::from_secs(30),
            0,
        );
        assert_eq!(
            delayed.kill_plan(&KillReason::AgentShutdown, 1),
            (vec![], Duration::ZERO)
        );
    }
}
