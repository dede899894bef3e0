//! The order of an allocation's tasks by their `lifecycle` block, as Nomad's task
//! coordinator keeps it: a pure state machine over the tasks' states that says which kinds
//! of task may start now. The allocation runner feeds it every change of the tasks' states
//! and hands what it allows to the task runners, which wait for it before each start.
//!
//! ```text
//!  init ─(every task pending)─▶ prestart ─(ephemeral prestart tasks successful, prestart
//!  sidecars running)─▶ main ─(no main task pending)─▶ poststart ─(ephemeral poststart
//!  tasks dead)─▶ wait_alloc ─(every task but poststop dead; from any phase)─▶ poststop
//! ```
//!
//! | phase      | may start                                                      |
//! |------------|----------------------------------------------------------------|
//! | init       | nothing                                                        |
//! | prestart   | prestart tasks                                                 |
//! | main       | prestart sidecars, main tasks                                  |
//! | poststart  | prestart sidecars, main tasks, poststart tasks                 |
//! | wait_alloc | prestart sidecars, main tasks, poststart sidecars              |
//! | poststop   | poststop tasks                                                 |
//!
//! An ephemeral prestart task that failed for good never lets the main tasks start (its
//! failure stops the allocation); one that completed is not started again when a main task
//! restarts. A task group without prestart tasks goes straight to main.

use std::collections::BTreeMap;

use teamster_storage::model::{Task, TaskState, TaskStateValue};

/// The kind of a task by its `lifecycle` block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// `prestart`, not a sidecar: runs to completion before the main tasks start.
    PrestartEphemeral,
    /// `prestart` sidecar: runs before and beside the main tasks.
    PrestartSidecar,
    /// No `lifecycle` block.
    Main,
    /// `poststart`, not a sidecar: runs once the main tasks run, to completion.
    PoststartEphemeral,
    /// `poststart` sidecar: runs once the main tasks run, beside them.
    PoststartSidecar,
    /// `poststop`: runs once every other task is dead.
    Poststop,
}

impl Stage {
    /// `task`'s stage.
    pub fn of(task: &Task) -> Stage {
        use teamster_storage::model::task_runtime::{HOOK_POSTSTART, HOOK_POSTSTOP, HOOK_PRESTART};
        match (task.lifecycle_hook(), task.is_sidecar()) {
            (HOOK_PRESTART, false) => Stage::PrestartEphemeral,
            (HOOK_PRESTART, true) => Stage::PrestartSidecar,
            (HOOK_POSTSTART, false) => Stage::PoststartEphemeral,
            (HOOK_POSTSTART, true) => Stage::PoststartSidecar,
            (HOOK_POSTSTOP, _) => Stage::Poststop,
            _ => Stage::Main,
        }
    }

    /// Whether a successful exit ends a task of this stage for good (Nomad's restart
    /// tracker): ephemeral lifecycle tasks and poststop tasks complete, sidecars are
    /// restarted like a service's tasks, and main tasks as their job's type says (`batch`
    /// for batch and sysbatch jobs).
    pub fn success_is_final(self, batch: bool) -> bool {
        match self {
            Stage::PrestartEphemeral | Stage::PoststartEphemeral | Stage::Poststop => true,
            Stage::PrestartSidecar | Stage::PoststartSidecar => false,
            Stage::Main => batch,
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// The stages that may start now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Allowed(u8);

impl Allowed {
    /// Whether tasks of `stage` may start.
    pub fn allows(self, stage: Stage) -> bool {
        self.0 & stage.bit() != 0
    }

    fn of(stages: &[Stage]) -> Allowed {
        Allowed(stages.iter().fold(0, |bits, s| bits | s.bit()))
    }
}

/// Where the allocation is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for every task to be pending (a fresh start or a restart of them all).
    Init,
    /// Prestart tasks run.
    Prestart,
    /// Main tasks start.
    Main,
    /// Poststart tasks run.
    Poststart,
    /// Waiting for the allocation's tasks to end.
    WaitAlloc,
    /// Every task but the poststop ones is dead: they run.
    Poststop,
}

impl Phase {
    fn allowed(self) -> Allowed {
        use Stage::*;
        match self {
            Phase::Init => Allowed::default(),
            Phase::Prestart => Allowed::of(&[PrestartEphemeral, PrestartSidecar]),
            Phase::Main => Allowed::of(&[PrestartSidecar, Main]),
            Phase::Poststart => {
                Allowed::of(&[PrestartSidecar, Main, PoststartEphemeral, PoststartSidecar])
            }
            Phase::WaitAlloc => Allowed::of(&[PrestartSidecar, Main, PoststartSidecar]),
            Phase::Poststop => Allowed::of(&[Poststop]),
        }
    }
}

/// The coordinator of one allocation's tasks.
#[derive(Debug, Clone)]
pub struct Coordinator {
    tasks: Vec<(String, Stage)>,
    phase: Phase,
}

impl Coordinator {
    /// The coordinator of a fresh allocation of `tasks`: nothing may start until every task
    /// is pending.
    pub fn new(tasks: &[Task]) -> Coordinator {
        Coordinator {
            tasks: tasks
                .iter()
                .map(|t| (t.name.clone(), Stage::of(t)))
                .collect(),
            phase: Phase::Init,
        }
    }

    /// The coordinator of an allocation an earlier run of the client started, moved to
    /// where `states` put it (its tasks may run already: it does not wait for them to be
    /// pending).
    pub fn restored(tasks: &[Task], states: &BTreeMap<String, TaskState>) -> Coordinator {
        let mut c = Coordinator::new(tasks);
        c.phase = Phase::Prestart;
        c.update(states);
        c
    }

    /// Every task is started again from the beginning (a restart of all of them): back to
    /// `init`.
    pub fn restart(&mut self) {
        self.phase = Phase::Init;
    }

    /// The phase it is in.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// What may start in the current phase.
    pub fn allowed(&self) -> Allowed {
        self.phase.allowed()
    }

    /// Moves on as far as `states` allow (several phases at once when there is nothing to
    /// wait for) and says what may start now.
    pub fn update(&mut self, states: &BTreeMap<String, TaskState>) -> Allowed {
        loop {
            let next = self.next(states);
            if next == self.phase {
                return self.allowed();
            }
            self.phase = next;
        }
    }

    fn next(&self, states: &BTreeMap<String, TaskState>) -> Phase {
        if self.every(
            |s| s != Stage::Poststop,
            states,
            |t| t.state == TaskStateValue::Dead,
        ) {
            return Phase::Poststop;
        }
        match self.phase {
            Phase::Init => {
                if self.every(|_| true, states, |t| t.state == TaskStateValue::Pending) {
                    Phase::Prestart
                } else {
                    Phase::Init
                }
            }
            Phase::Prestart => {
                let ephemeral_done = self.every(
                    |s| s == Stage::PrestartEphemeral,
                    states,
                    |t| t.state == TaskStateValue::Dead && !t.failed,
                );
                let sidecars_up = self.every(
                    |s| s == Stage::PrestartSidecar,
                    states,
                    |t| t.state == TaskStateValue::Running,
                );
                if ephemeral_done && sidecars_up {
                    Phase::Main
                } else {
                    Phase::Prestart
                }
            }
            Phase::Main => {
                if self.every(
                    |s| s == Stage::Main,
                    states,
                    |t| t.state != TaskStateValue::Pending,
                ) {
                    Phase::Poststart
                } else {
                    Phase::Main
                }
            }
            Phase::Poststart => {
                if self.every(
                    |s| s == Stage::PoststartEphemeral,
                    states,
                    |t| t.state == TaskStateValue::Dead,
                ) {
                    Phase::WaitAlloc
                } else {
                    Phase::Poststart
                }
            }
            Phase::WaitAlloc => Phase::WaitAlloc,
            Phase::Poststop => Phase::Poststop,
        }
    }

    /// Whether every task whose stage `which` picks has a state that `holds` (a task without
    /// a state yet is pending).
    fn every(
        &self,
        which: impl Fn(Stage) -> bool,
        states: &BTreeMap<String, TaskState>,
        holds: impl Fn(&TaskState) -> bool,
    ) -> bool {
        let pending = TaskState::default();
        self.tasks
            .iter()
            .filter(|(_, stage)| which(*stage))
            .all(|(name, _)| holds(states.get(name).unwrap_or(&pending)))
    }
}

/// Whether only sidecars are left alive, which Nomad then kills ("Main Tasks Dead"), from
/// each task's stage and whether it is dead: every task that is neither a sidecar nor a
/// poststop task is dead, and a sidecar still lives.
pub fn only_sidecars_left(tasks: &[(Stage, bool)]) -> bool {
    let live: Vec<Stage> = tasks
        .iter()
        .filter(|(stage, dead)| *stage != Stage::Poststop && !dead)
        .map(|(stage, _)| *stage)
        .collect();
    !live.is_empty()
        && live
            .iter()
            .all(|s| matches!(s, Stage::PrestartSidecar | Stage::PoststartSidecar))
}

#[cfg(test)]
mod tests {
    use teamster_storage::model::TaskLifecycle;

    use super::*;

    fn task(name: &str, hook: &str, sidecar: bool) -> Task {
        Task {
            name: name.into(),
            lifecycle: (!hook.is_empty()).then(|| TaskLifecycle {
                hook: hook.into(),
                sidecar,
            }),
            ..Task::default()
        }
    }

    fn group() -> Vec<Task> {
        vec![
            task("init", "prestart", false),
            task("proxy", "prestart", true),
            task("web", "", false),
            task("warm", "poststart", false),
            task("log", "poststart", true),
            task("cleanup", "poststop", false),
        ]
    }

    fn states(of: &[(&str, TaskStateValue, bool)]) -> BTreeMap<String, TaskState> {
        of.iter()
            .map(|(name, state, failed)| {
                (
                    name.to_string(),
                    TaskState {
                        state: *state,
                        failed: *failed,
                        ..TaskState::default()
                    },
                )
            })
            .collect()
    }

    fn may_start(c: &Coordinator) -> Vec<Stage> {
        use Stage::*;
        [
            PrestartEphemeral,
            PrestartSidecar,
            Main,
            PoststartEphemeral,
            PoststartSidecar,
            Poststop,
        ]
        .into_iter()
        .filter(|s| c.allowed().allows(*s))
        .collect()
    }

    #[test]
    fn the_phases_follow_the_tasks_in_nomad_s_order() {
        use Stage::*;
        use TaskStateValue::{Dead, Pending, Running};
        let mut c = Coordinator::new(&group());
        assert_eq!(c.phase(), Phase::Init);
        assert!(may_start(&c).is_empty());
        // Every task pending: the prestart tasks go.
        c.update(&BTreeMap::new());
        assert_eq!(may_start(&c), [PrestartEphemeral, PrestartSidecar]);
        // The sidecar runs, the init task too: still prestart.
        let s = states(&[("init", Running, false), ("proxy", Running, false)]);
        c.update(&s);
        assert_eq!(c.phase(), Phase::Prestart);
        // The init task failed: the main tasks never start.
        c.update(&states(&[("init", Dead, true), ("proxy", Running, false)]));
        assert_eq!(c.phase(), Phase::Prestart);
        // It completed: the main tasks go, the completed prestart task may not run again.
        c.update(&states(&[("init", Dead, false), ("proxy", Running, false)]));
        assert_eq!(may_start(&c), [PrestartSidecar, Main]);
        // The main task left pending: poststart tasks go.
        let mut s = states(&[
            ("init", Dead, false),
            ("proxy", Running, false),
            ("web", Running, false),
        ]);
        c.update(&s);
        assert_eq!(
            may_start(&c),
            [PrestartSidecar, Main, PoststartEphemeral, PoststartSidecar]
        );
        // The ephemeral poststart task is done: it is not started again.
        s.extend(states(&[("warm", Dead, false), ("log", Running, false)]));
        c.update(&s);
        assert_eq!(c.phase(), Phase::WaitAlloc);
        assert_eq!(may_start(&c), [PrestartSidecar, Main, PoststartSidecar]);
        // Everything but the poststop task is dead: it runs, alone.
        let dead = states(&[
            ("init", Dead, false),
            ("proxy", Dead, false),
            ("web", Dead, false),
            ("warm", Dead, false),
            ("log", Dead, false),
            ("cleanup", Pending, false),
        ]);
        c.update(&dead);
        assert_eq!(may_start(&c), [Poststop]);
    }

    #[test]
    fn a_group_of_main_tasks_starts_at_once_and_a_stop_before_the_start_runs_poststop() {
        use TaskStateValue::Dead;
        let plain = vec![task("a", "", false), task("b", "", false)];
        let mut c = Coordinator::new(&plain);
        c.update(&BTreeMap::new());
        assert!(c.allowed().allows(Stage::Main));
        // A stop while the prestart task waited: the others are killed before they start,
        // and the poststop task still runs.
        let mut c = Coordinator::new(&group());
        c.update(&BTreeMap::new());
        let mut s = states(&[
            ("init", Dead, false),
            ("proxy", Dead, false),
            ("web", Dead, false),
            ("warm", Dead, false),
            ("log", Dead, false),
        ]);
        c.update(&s);
        assert_eq!(c.phase(), Phase::Poststop);
        // A restart of every task waits for them all to be pending again.
        c.restart();
        c.update(&s);
        assert_eq!(c.phase(), Phase::Poststop, "all dead: straight to poststop");
        s.clear();
        c.restart();
        c.update(&s);
        assert_eq!(c.phase(), Phase::Prestart);
    }

    #[test]
    fn a_restored_allocation_resumes_where_its_tasks_are() {
        use TaskStateValue::{Dead, Running};
        let s = states(&[
            ("init", Dead, false),
            ("proxy", Running, false),
            ("web", Running, false),
            ("warm", Running, false),
            ("log", Running, false),
        ]);
        let c = Coordinator::restored(&group(), &s);
        assert_eq!(c.phase(), Phase::Poststart);
        // Nomad's init would wait for every task to be pending, forever.
        assert_eq!(Coordinator::new(&group()).update(&s), Allowed::default());
    }

    #[test]
    fn sidecars_are_killed_once_only_they_are_left() {
        use Stage::*;
        let mut tasks = vec![
            (PrestartEphemeral, true),
            (PrestartSidecar, false),
            (Main, false),
            (PoststartEphemeral, true),
            (PoststartSidecar, false),
            (Poststop, false),
        ];
        assert!(!only_sidecars_left(&tasks));
        tasks[2].1 = true;
        // The pending poststop task does not count.
        assert!(only_sidecars_left(&tasks));
        assert!(!only_sidecars_left(&[(Main, true)]));
        assert!(!only_sidecars_left(&[(Main, true), (Poststop, false)]));
    }
}
