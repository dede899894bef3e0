//! The periodic dispatcher's decisions, without I/O: which parents launch now (or skip a
//! launch under `prohibit_overlap`) and when the next launch is due; and the child job a
//! launch registers.

use teamster_storage::model::periodic::periodic_child_id;
use teamster_storage::model::{CronSchedule, Job, JobId, JobStatus, Namespace};
use teamster_storage::state::Snapshot;

const NANOS_PER_SEC: i64 = 1_000_000_000;
/// How many missed launch times are walked to find the newest one (a parent whose last
/// launch is older than this many launches catches up at the last one walked).
const MAX_CATCH_UP_STEPS: usize = 100_000;

/// One active periodic parent as the dispatcher sees it.
#[derive(Debug, Clone)]
pub struct Parent {
    /// Its namespace.
    pub namespace: Namespace,
    /// Its ID.
    pub job_id: JobId,
    /// Its cron expressions in its zone.
    pub schedule: CronSchedule,
    /// Skip a launch while a child is pending or running.
    pub prohibit_overlap: bool,
    /// The recorded last launch, Unix nanoseconds.
    pub last_launch: i64,
    /// Whether a child is pending or running.
    pub child_running: bool,
}

/// What to do for one parent now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Register the child for `launch_secs` and record the launch.
    Launch {
        /// The parent's namespace.
        namespace: Namespace,
        /// The parent.
        job_id: JobId,
        /// The launch time, Unix seconds.
        launch_secs: i64,
    },
    /// Record the launch at `launch_secs` without a child: one still runs.
    Skip {
        /// The parent's namespace.
        namespace: Namespace,
        /// The parent.
        job_id: JobId,
        /// The launch time, Unix seconds.
        launch_secs: i64,
    },
}

/// What [`plan`] decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Planned {
    /// What is due now, in parent order.
    pub actions: Vec<Action>,
    /// The earliest launch after those, Unix seconds (`None`: nothing is scheduled).
    pub next: Option<i64>,
}

/// The active periodic parents of `snapshot`: enabled, not stopped, with a recorded launch
/// (written when the parent was first registered).
pub fn parents(snapshot: &Snapshot) -> Vec<Parent> {
    snapshot
        .periodic_launches()
        .filter_map(|launch| {
            let job = snapshot.job_by_id(launch.namespace.as_str(), launch.id.as_str())?;
            if !job.is_periodic_active() {
                return None;
            }
            let periodic = job.periodic.as_ref()?;
            let schedule = match periodic.schedule() {
                Ok(s) => s,
                Err(error) => {
                    tracing::warn!(job_id = %job.id, %error, "periodic job cannot be scheduled");
                    return None;
                }
            };
            let child_running = snapshot
                .job_children(job.namespace.as_str(), job.id.as_str())
                .any(|c| !c.stop && c.status != JobStatus::Dead);
            Some(Parent {
                namespace: job.namespace.clone(),
                job_id: job.id.clone(),
                schedule,
                prohibit_overlap: periodic.prohibit_overlap,
                last_launch: launch.launch,
                child_running,
            })
        })
        .collect()
}

/// What is due at `now` (Unix nanoseconds). A parent whose next launch after its recorded
/// one has passed launches once, for the newest launch time that has passed (the others were
/// missed while no leader ran, and are not made up one by one).
pub fn plan(parents: &[Parent], now: i64) -> Planned {
    let mut planned = Planned::default();
    let mut earliest = |t: Option<i64>| {
        if let Some(t) = t {
            planned.next = Some(planned.next.map_or(t, |n: i64| n.min(t)));
        }
    };
    let mut actions = Vec::new();
    for parent in parents {
        let Some(mut due) = parent.schedule.next_after(parent.last_launch) else {
            continue;
        };
        if due.saturating_mul(NANOS_PER_SEC) > now {
            earliest(Some(due));
            continue;
        }
        for _ in 0..MAX_CATCH_UP_STEPS {
            match parent
                .schedule
                .next_after(due.saturating_mul(NANOS_PER_SEC))
            {
                Some(later) if later.saturating_mul(NANOS_PER_SEC) <= now => due = later,
                _ => break,
            }
        }
        let (namespace, job_id) = (parent.namespace.clone(), parent.job_id.clone());
        actions.push(if parent.prohibit_overlap && parent.child_running {
            Action::Skip {
                namespace,
                job_id,
                launch_secs: due,
            }
        } else {
            Action::Launch {
                namespace,
                job_id,
                launch_secs: due,
            }
        });
        earliest(
            parent
                .schedule
                .next_after(due.saturating_mul(NANOS_PER_SEC)),
        );
    }
    planned.actions = actions;
    planned
}

/// The child a launch of `parent` at `launch_secs` registers: the parent's spec as a plain
/// batch job `<parent>/periodic-<launch_secs>`, submitted at `now`.
pub fn periodic_child(parent: &Job, launch_secs: i64, now: i64) -> Job {
    Job {
        periodic: None,
        ..parent.new_child(&periodic_child_id(parent.id.as_str(), launch_secs), now)
    }
}
