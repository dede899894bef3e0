//! The shell every leader-only subsystem shares: the on/off flag of its core, the set of
//! tasks it runs while this server leads (or while it is enabled), and the two loops those
//! tasks are made of.
//!
//! - [`Switch`] is the on/off flag of a sans-IO core (on while this server leads).
//! - [`LeaderService`] owns one subsystem's tasks: [`start`](LeaderService::start) them on
//!   establish or enable, [`stop`](LeaderService::stop) (cancel, then wait for every task)
//!   on revoke, or only [`cancel`](LeaderService::cancel) them where the caller cannot wait
//!   (a synchronous `set_enabled` under the subsystem's lock). Every task of one start shares
//!   a [`CancellationToken`], its stop signal; a dropped service stops its tasks.
//! - [`run_deadlines`] is the timer loop of a sans-IO core: sleep until the core's next
//!   deadline, re-read it when kicked (the deadline moved earlier), fire what is due.
//! - [`run_every`] is the periodic loop (gauges, pruning, periodic evaluations) on a
//!   [`ticker`] that neither fires at once nor bursts after a stall.
//! - [`on_owner`]: a task holds its subsystem weakly and ends when the subsystem is gone.
//!
//! Everything runs on `tokio::time`, so tests drive it on paused time.
//!
//! May import: `util` only. It knows no subsystem; the subsystems (`broker`, `blocked`,
//! `pipeline`, `plan`, `heartbeat`, `reapers`, `worker`) build their shells on it.

use std::fmt;
use std::future::Future;
use std::ops::ControlFlow;
use std::sync::{Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

/// The on/off flag of a leader-only core, on while this server leads: the core answers its
/// own "disabled" error while it is off ([`Switch::check`]) and forgets its state when
/// [`Switch::set`] reports it was just turned off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Switch {
    on: bool,
}

impl Switch {
    /// True while on.
    pub fn is_on(self) -> bool {
        self.on
    }

    /// Turns the switch on or off; true if that changed it.
    pub fn set(&mut self, on: bool) -> bool {
        let changed = self.on != on;
        self.on = on;
        changed
    }

    /// `Ok` while on, the `refusal` while off.
    pub fn check<E>(self, refusal: E) -> Result<(), E> {
        if self.on {
            Ok(())
        } else {
            Err(refusal)
        }
    }
}

/// The tasks one subsystem runs while this server leads: at most one [`TaskSet`] at a time.
#[derive(Default)]
pub struct LeaderService {
    running: Mutex<Option<TaskSet>>,
}

/// The tasks started together by one [`LeaderService::start`], and their shared stop signal.
pub struct TaskSet {
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

/// A set that is dropped (replaced, or its service dropped, or its spawning closure
/// panicked) signals its tasks to stop: no task outlives the set that owns it.
impl Drop for TaskSet {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl TaskSet {
    fn new() -> TaskSet {
        TaskSet {
            stop: CancellationToken::new(),
            tasks: Vec::new(),
        }
    }

    /// Spawns `task` on the current tokio runtime, handing it the set's stop signal.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime (as `tokio::spawn` does).
    pub fn spawn<F, Fut>(&mut self, task: F)
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.tasks.push(tokio::spawn(task(self.stop.clone())));
    }

    /// Spawns a periodic chore: `chore` runs on `owner` every `period` (see [`run_every`]),
    /// as long as the set runs and the owner (held weakly, see [`on_owner`]) lives.
    pub fn spawn_every<T>(&mut self, period: Duration, owner: Weak<T>, chore: fn(&T))
    where
        T: Send + Sync + 'static,
    {
        self.spawn(move |stop| async move {
            run_every(&stop, period, || {
                std::future::ready(on_owner(&owner, chore))
            })
            .await;
        });
    }
}

impl fmt::Debug for LeaderService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let running = self.lock();
        f.debug_struct("LeaderService")
            .field("tasks", &running.as_ref().map_or(0, |set| set.tasks.len()))
            .finish()
    }
}

impl LeaderService {
    /// A service with no tasks running.
    pub fn new() -> LeaderService {
        LeaderService::default()
    }

    fn lock(&self) -> MutexGuard<'_, Option<TaskSet>> {
        // Only the set is kept under this lock, and no code unwinds half-way through it.
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts a new set of tasks, spawned by `spawn`. A set still running is signalled to
    /// stop first and left to end on its own (use [`restart`](Self::restart) to wait for it).
    pub fn start(&self, spawn: impl FnOnce(&mut TaskSet)) {
        let mut set = TaskSet::new();
        spawn(&mut set);
        // Swapped in under one lock: a concurrent start cannot slip a set in between and
        // have it overwritten unsignalled. The old set's drop signals it to stop.
        let old = self.lock().replace(set);
        drop(old);
    }

    /// Stops the running set (waiting for its tasks to end), then starts a new one.
    pub async fn restart(&self, spawn: impl FnOnce(&mut TaskSet)) {
        self.stop().await;
        self.start(spawn);
    }

    /// The enable/disable switch: [`start`](Self::start) when `on`, [`cancel`](Self::cancel)
    /// otherwise. For synchronous callers that switch under their own lock.
    pub fn switch(&self, on: bool, spawn: impl FnOnce(&mut TaskSet)) {
        if on {
            self.start(spawn);
        } else {
            self.cancel();
        }
    }

    /// Signals the running tasks to stop, without waiting for them. Returns whether a set was
    /// running.
    pub fn cancel(&self) -> bool {
        match self.lock().take() {
            Some(set) => {
                set.stop.cancel();
                true
            }
            None => false,
        }
    }

    /// Signals the running tasks to stop and waits until every one has ended (a task that
    /// panicked counts as ended).
    pub async fn stop(&self) {
        let running = self.lock().take();
        if let Some(mut set) = running {
            set.stop.cancel();
            for task in std::mem::take(&mut set.tasks) {
                let _ = task.await;
            }
        }
    }

    /// True while a set of tasks is started (and not yet cancelled or stopped).
    pub fn is_running(&self) -> bool {
        self.lock().is_some()
    }
}

/// The timer loop of a sans-IO core. Sleeps until the deadline `next` returns (as long as it
/// returns none, until kicked), re-reads it whenever `kick` is notified, and once the
/// deadline is due calls `fire` with it. Runs until `stop` fires or `fire` breaks.
///
/// The core decides what is due: `fire` reads the time itself and fires everything due by
/// then, so a late wake-up loses nothing.
pub async fn run_deadlines<Next, Fire, Fut>(
    stop: &CancellationToken,
    kick: &Notify,
    mut next: Next,
    mut fire: Fire,
) where
    Next: FnMut() -> Option<Instant>,
    Fire: FnMut(Instant) -> Fut,
    Fut: Future<Output = ControlFlow<()>>,
{
    loop {
        let deadline = next();
        let due = async {
            match deadline {
                Some(at) => {
                    tokio::time::sleep_until(at).await;
                    at
                }
                None => std::future::pending().await,
            }
        };
        let at = tokio::select! {
            _ = stop.cancelled() => return,
            _ = kick.notified() => continue,
            at = due => at,
        };
        if fire(at).await.is_break() {
            return;
        }
    }
}

/// A ticker for periodic work: its first tick is one `period` from now, and a tick missed
/// by a stalled task is delayed a full period rather than made up in a burst.
pub fn ticker(period: Duration) -> Interval {
    let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticker
}

/// Calls `tick` on every tick of a [`ticker`] of `period`, until `stop` fires or `tick`
/// breaks.
pub async fn run_every<F, Fut>(stop: &CancellationToken, period: Duration, mut tick: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ControlFlow<()>>,
{
    let mut ticker = ticker(period);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        if tick().await.is_break() {
            return;
        }
    }
}

/// Runs `f` on the owner of a task, which the task holds weakly so as not to keep it alive;
/// once the owner is gone, breaks the task's loop.
pub fn on_owner<T>(owner: &Weak<T>, f: impl FnOnce(&T)) -> ControlFlow<()> {
    match owner.upgrade() {
        Some(owner) => {
            f(&owner);
            ControlFlow::Continue(())
        }
        None => ControlFlow::Break(()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use super::*;

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    /// Lets every spawned task run until it waits on time.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[test]
    fn a_switch_reports_changes_and_refuses_while_off() {
        let mut switch = Switch::default();
        assert_eq!(switch.check("off"), Err("off"));
        assert!(switch.set(true));
        assert!(!switch.set(true), "already on");
        assert!(switch.is_on());
        assert_eq!(switch.check("off"), Ok(()));
        assert!(switch.set(false));
        assert!(!switch.is_on());
    }

    #[tokio::test(start_paused = true)]
    async fn stop_waits_for_every_task_and_cancel_only_signals() {
        let service = LeaderService::new();
        assert!(!service.is_running());
        let ended = Arc::new(AtomicUsize::new(0));
        service.start(|set| {
            for _ in 0..2 {
                let ended = ended.clone();
                set.spawn(move |stop| async move {
                    stop.cancelled().await;
                    // Winding down takes a while; `stop` must wait for it.
                    tokio::time::sleep(secs(1)).await;
                    ended.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        assert!(service.is_running());
        let start = Instant::now();
        service.stop().await;
        assert_eq!(ended.load(Ordering::SeqCst), 2);
        assert_eq!(Instant::now() - start, secs(1));
        assert!(!service.is_running());
        service.stop().await;

        let signalled = Arc::new(Mutex::new(None));
        service.switch(true, |set| {
            let signalled = signalled.clone();
            set.spawn(move |stop| async move {
                *signalled.lock().unwrap() = Some(stop);
            });
        });
        settle().await;
        let stop = signalled.lock().unwrap().clone().unwrap();
        assert!(!stop.is_cancelled());
        service.switch(false, |_| unreachable!("switching off spawns nothing"));
        assert!(stop.is_cancelled());
        assert!(!service.cancel(), "nothing left to cancel");
    }

    #[tokio::test(start_paused = true)]
    async fn starting_again_stops_the_previous_set_and_dropping_stops_all() {
        let service = LeaderService::new();
        let tokens = Arc::new(Mutex::new(Vec::new()));
        for _ in 0..2 {
            service.start(|set| {
                let tokens = tokens.clone();
                set.spawn(move |stop| async move { tokens.lock().unwrap().push(stop) });
            });
        }
        settle().await;
        let cancelled = |tokens: &Mutex<Vec<CancellationToken>>| {
            tokens
                .lock()
                .unwrap()
                .iter()
                .map(CancellationToken::is_cancelled)
                .collect::<Vec<_>>()
        };
        assert_eq!(cancelled(&tokens), [true, false]);
        service
            .restart(|set| {
                let tokens = tokens.clone();
                set.spawn(move |stop| async move { tokens.lock().unwrap().push(stop) });
            })
            .await;
        settle().await;
        assert_eq!(cancelled(&tokens), [true, true, false]);
        drop(service);
        assert_eq!(cancelled(&tokens), [true, true, true]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_loop_sleeps_until_the_next_deadline_and_rereads_it_when_kicked() {
        let start = Instant::now();
        let deadlines = Arc::new(Mutex::new(vec![start + secs(60)]));
        let fired = Arc::new(Mutex::new(Vec::new()));
        let kick = Arc::new(Notify::new());
        let service = LeaderService::new();
        service.start(|set| {
            let (deadlines, fired, kick) = (deadlines.clone(), fired.clone(), kick.clone());
            set.spawn(move |stop| async move {
                run_deadlines(
                    &stop,
                    &kick,
                    || deadlines.lock().unwrap().first().copied(),
                    |at| {
                        let mut deadlines = deadlines.lock().unwrap();
                        deadlines.retain(|d| *d > Instant::now());
                        fired.lock().unwrap().push((at, Instant::now()));
                        std::future::ready(if deadlines.is_empty() {
                            ControlFlow::Break(())
                        } else {
                            ControlFlow::Continue(())
                        })
                    },
                )
                .await
            });
        });
        settle().await;
        tokio::time::sleep(secs(10)).await;
        // An earlier deadline appears: the loop re-reads it when kicked.
        deadlines.lock().unwrap().insert(0, start + secs(20));
        kick.notify_one();
        tokio::time::sleep(secs(100)).await;
        assert_eq!(
            *fired.lock().unwrap(),
            [
                (start + secs(20), start + secs(20)),
                (start + secs(60), start + secs(60))
            ]
        );
        // `fire` broke when nothing was left: the task has ended.
        service.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn run_every_ticks_one_period_apart_until_stopped() {
        let ticks = Arc::new(Mutex::new(Vec::new()));
        let service = LeaderService::new();
        let start = Instant::now();
        service.start(|set| {
            let ticks = ticks.clone();
            set.spawn(move |stop| async move {
                run_every(&stop, secs(5), || {
                    ticks.lock().unwrap().push(Instant::now() - start);
                    std::future::ready(ControlFlow::Continue(()))
                })
                .await
            });
        });
        tokio::time::sleep(secs(16)).await;
        service.stop().await;
        tokio::time::sleep(secs(30)).await;
        assert_eq!(*ticks.lock().unwrap(), [secs(5), secs(10), secs(15)]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_periodic_chore_runs_on_its_owner_until_the_owner_is_gone() {
        let owner = Arc::new(AtomicUsize::new(0));
        let service = LeaderService::new();
        service.start(|set| {
            set.spawn_every(secs(1), Arc::downgrade(&owner), |count| {
                count.fetch_add(1, Ordering::SeqCst);
            });
        });
        let alive = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        tokio::time::sleep(secs(3) + Duration::from_millis(500)).await;
        assert_eq!(owner.load(Ordering::SeqCst), 3);
        assert_eq!(alive(), 1);
        drop(owner);
        tokio::time::sleep(secs(1)).await;
        // The task saw its owner gone at its next tick and ended on its own.
        assert_eq!(alive(), 0);
        assert!(service.is_running(), "nobody stopped the set");
    }
}
