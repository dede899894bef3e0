//! Helpers shared by the schedulers: ids from the injected RNG, allocation names and their
//! index bitmap, the "does this job change need a new allocation" comparison, Nomad's
//! reschedule-policy arithmetic, and the candidate node list.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use teamster_storage::model::{
    AllocMetric, Allocation, ClientStatus, DelayFunction, DesiredStatus, EvalStatus, EvalTrigger,
    Evaluation, Job, Node, Plan, PlanResult, RescheduleEvent, ReschedulePolicy, RescheduleTracker,
    TaskGroup,
};
use teamster_storage::state::{NodesVersion, Snapshot};

use crate::scheduler::context::Eligibility;
use crate::scheduler::feasible::node_in_job_scope;

/// Nomad's `maxPastRescheduleEvents`: events kept for unlimited policies.
const MAX_PAST_RESCHEDULE_EVENTS: usize = 5;

/// `<job>.<group>[<index>]`, Nomad's allocation name.
pub(crate) fn alloc_name(job_id: &str, group: &str, index: u32) -> String {
    format!("{job_id}.{group}[{index}]")
}

/// The index in an allocation name, if it has one.
pub(crate) fn alloc_name_index(name: &str) -> Option<u32> {
    let open = name.rfind('[')?;
    name[open + 1..].strip_suffix(']')?.parse().ok()
}

/// Which name indexes of a task group are taken (Nomad's `allocNameIndex`): placements take
/// the lowest free ones, scale-downs remove the highest.
#[derive(Debug, Clone)]
pub(crate) struct NameIndex {
    job_id: String,
    group: String,
    used: BTreeSet<u32>,
    /// No index below this one is free.
    lowest_free: u32,
}

impl NameIndex {
    pub fn new<'a>(
        job_id: &str,
        group: &str,
        names: impl IntoIterator<Item = &'a str>,
    ) -> NameIndex {
        NameIndex {
            job_id: job_id.to_owned(),
            group: group.to_owned(),
            used: names.into_iter().filter_map(alloc_name_index).collect(),
            lowest_free: 0,
        }
    }

    /// Frees an index (its allocation is stopped).
    pub fn unset(&mut self, name: &str) {
        if let Some(i) = alloc_name_index(name) {
            self.used.remove(&i);
            self.lowest_free = self.lowest_free.min(i);
        }
    }

    /// The `n` highest taken indexes, as names.
    pub fn highest(&self, n: usize) -> BTreeSet<String> {
        self.used
            .iter()
            .rev()
            .take(n)
            .map(|i| alloc_name(&self.job_id, &self.group, *i))
            .collect()
    }

    /// Takes the lowest free index and returns its name; `None` once every `u32` is taken.
    /// Successive calls walk up from where the last one stopped, so taking `n` names costs
    /// O(n + taken), and nothing is allocated ahead of the names actually taken.
    pub fn take_lowest(&mut self) -> Option<String> {
        let mut i = self.lowest_free;
        loop {
            if self.used.insert(i) {
                self.lowest_free = i.saturating_add(1);
                return Some(alloc_name(&self.job_id, &self.group, i));
            }
            i = i.checked_add(1)?;
        }
    }

    /// Takes the `n` lowest free indexes and returns their names.
    #[cfg(test)]
    pub fn next(&mut self, n: usize) -> Vec<String> {
        std::iter::from_fn(|| self.take_lowest()).take(n).collect()
    }
}

/// Nomad's `tasksUpdated`: whether moving an allocation from `old` to `new` needs a new
/// allocation (destructive) rather than an in-place update. Constraint changes are not here:
/// an in-place candidate is re-checked for feasibility on its node instead.
pub(crate) fn tasks_updated(old_job: &Job, new_job: &Job, group: &str) -> bool {
    let (Some(a), Some(b)) = (old_job.task_group(group), new_job.task_group(group)) else {
        return true;
    };
    // Nomad's networkUpdated: ports are bound when the tasks start, so a change of the
    // group's network needs new allocations.
    if a.tasks.len() != b.tasks.len() || a.networks != b.networks {
        return true;
    }
    // Volumes are chosen with the node and mounted when the tasks start.
    if a.volumes != b.volumes {
        return true;
    }
    // The disk is reserved, and its data kept or moved, when an allocation is placed.
    if a.ephemeral_disk.clone().unwrap_or_default() != b.ephemeral_disk.clone().unwrap_or_default()
    {
        return true;
    }
    for at in &a.tasks {
        let Some(bt) = b.tasks.iter().find(|t| t.name == at.name) else {
            return true;
        };
        if at.driver != bt.driver
            || at.user != bt.user
            || at.config != bt.config
            || at.env != bt.env
            || at.resources != bt.resources
            // Nomad's: a changed workload identity is given to a new allocation.
            || at.identity != bt.identity
            || at.identities != bt.identities
            || at.templates != bt.templates
            || at.volume_mounts != bt.volume_mounts
            || at.artifacts != bt.artifacts
        {
            return true;
        }
        // Turning log collection on or off changes where the task's output goes when it
        // starts; the other `logs` fields are updated in place (the collector reloads them).
        let disabled =
            |t: &teamster_storage::model::Task| t.log_config.as_ref().is_some_and(|l| l.disabled);
        if disabled(at) != disabled(bt) {
            return true;
        }
        if combined_meta(old_job, a, &at.meta) != combined_meta(new_job, b, &bt.meta) {
            return true;
        }
    }
    false
}

fn combined_meta<'a>(
    job: &'a Job,
    group: &'a TaskGroup,
    task: &'a BTreeMap<String, String>,
) -> BTreeMap<&'a str, &'a str> {
    let mut meta = BTreeMap::new();
    for m in [&job.meta, &group.meta, task] {
        for (k, v) in m {
            meta.insert(k.as_str(), v.as_str());
        }
    }
    meta
}

/// The task group's reschedule policy as the allocation's own job version defines it
/// (Nomad's `Allocation.ReschedulePolicy`), falling back to the current job.
pub(crate) fn alloc_reschedule_policy<'a>(
    snapshot: &'a Snapshot,
    alloc: &Allocation,
    current: &'a Job,
) -> Option<&'a ReschedulePolicy> {
    let job = snapshot
        .alloc_job(alloc)
        .map(Arc::as_ref)
        .unwrap_or(current);
    job.task_group(&alloc.task_group)
        .or_else(|| current.task_group(&alloc.task_group))
        .and_then(|g| g.reschedule_policy.as_ref())
}

/// When the allocation finished: its latest task finish time, else its last modify time
/// (Nomad's `LastEventTime`), in Unix nanoseconds.
pub(crate) fn last_event_time(alloc: &Allocation) -> i64 {
    alloc
        .task_states
        .values()
        .filter_map(|s| s.finished_at.unix_nanos())
        .filter(|t| *t != 0)
        .max()
        .unwrap_or(alloc.modify_time)
}

fn events(alloc: &Allocation) -> &[RescheduleEvent] {
    alloc
        .reschedule_tracker
        .as_ref()
        .map_or(&[][..], |t| t.events.as_slice())
}

/// Nomad's `NextDelay`: the wait before the next reschedule, in nanoseconds, grown by the
/// delay function and capped by `MaxDelay` (a chain quiet for longer than the cap resets).
pub(crate) fn next_delay(alloc: &Allocation, policy: &ReschedulePolicy) -> u64 {
    let base = policy.delay.unwrap_or(0);
    let max = policy.max_delay.unwrap_or(0);
    let events = events(alloc);
    let Some(last) = events.last() else {
        return base;
    };
    let mut delay = match policy.delay_function.unwrap_or_default() {
        DelayFunction::Constant => return base,
        DelayFunction::Exponential => last.delay.saturating_mul(2),
        DelayFunction::Fibonacci => {
            if events.len() >= 2 {
                let before = events[events.len() - 2].delay;
                if before == max && last.delay == base {
                    last.delay
                } else {
                    last.delay.saturating_add(before)
                }
            } else {
                base
            }
        }
    };
    if max > 0 && delay > max {
        delay = max;
        let quiet = last_event_time(alloc).saturating_sub(last.reschedule_time);
        if quiet > i64::try_from(delay).unwrap_or(i64::MAX) {
            delay = base;
        }
    }
    delay
}

/// Nomad's `NextRescheduleTime`: when a failed allocation may be replaced (Unix
/// nanoseconds) and whether the policy allows it at all.
pub(crate) fn next_reschedule_time(
    alloc: &Allocation,
    policy: Option<&ReschedulePolicy>,
) -> (i64, bool) {
    let Some(policy) = policy else {
        return (0, false);
    };
    if alloc.desired_status == DesiredStatus::Stop || alloc.client_status != ClientStatus::Failed {
        return (0, false);
    }
    let fail_time = last_event_time(alloc);
    let delay = next_delay(alloc, policy);
    let at = fail_time.saturating_add(i64::try_from(delay).unwrap_or(i64::MAX));
    let attempts = policy.attempts.unwrap_or(0);
    if policy.unlimited.unwrap_or(false) {
        return (at, true);
    }
    if attempts == 0 {
        return (at, false);
    }
    let events = events(alloc);
    if events.is_empty() {
        return (at, true);
    }
    let interval = policy.interval.unwrap_or(0);
    let attempted = if interval == 0 {
        0
    } else {
        events
            .iter()
            .filter(|e| {
                let since = fail_time.saturating_sub(e.reschedule_time);
                since < i64::try_from(interval).unwrap_or(i64::MAX)
            })
            .count()
    };
    let eligible = (attempted as u64) < u64::from(attempts) && delay < interval;
    (at, eligible)
}

/// Nomad's `updateRescheduleTracker`: the history a replacement of `prev` carries — the
/// previous events still inside the interval (or the last 5 for unlimited policies) plus this
/// reschedule.
pub(crate) fn reschedule_tracker_for(
    prev: &Allocation,
    policy: Option<&ReschedulePolicy>,
    now: i64,
) -> RescheduleTracker {
    let mut kept = Vec::new();
    let past = events(prev);
    let attempts = policy.and_then(|p| p.attempts).unwrap_or(0);
    let interval = policy.and_then(|p| p.interval).unwrap_or(0);
    if attempts > 0 {
        for e in past {
            let since = now.saturating_sub(e.reschedule_time);
            if interval > 0 && since <= i64::try_from(interval).unwrap_or(i64::MAX) {
                kept.push(e.clone());
            }
        }
    } else {
        let start = past.len().saturating_sub(MAX_PAST_RESCHEDULE_EVENTS);
        kept.extend(past[start..].iter().cloned());
    }
    kept.push(RescheduleEvent {
        reschedule_time: now,
        prev_alloc_id: prev.id.clone(),
        prev_node_id: prev.node_id.clone(),
        delay: policy.map_or(0, |p| next_delay(prev, p)),
    });
    RescheduleTracker {
        events: kept.into(),
    }
}

/// The candidate nodes of a job's scope (ready, eligible, not draining, in its datacenters
/// and node pool) and how many there are per datacenter (`NodesAvailable`). Shared: a cached
/// scope is handed to every evaluation of that scope until the nodes table changes.
#[derive(Debug, Default)]
pub(crate) struct ReadyScope {
    pub nodes: Vec<Arc<Node>>,
    pub by_dc: BTreeMap<String, u64>,
}

/// The candidate nodes of `job`, from `cache` when it holds them for this nodes table.
pub(crate) fn ready_nodes(
    snapshot: &Snapshot,
    job: &Job,
    cache: Option<&ReadyNodesCache>,
) -> Arc<ReadyScope> {
    match cache {
        Some(cache) => cache.scope(snapshot, job),
        None => Arc::new(scan_ready_nodes(snapshot, job)),
    }
}

fn scan_ready_nodes(snapshot: &Snapshot, job: &Job) -> ReadyScope {
    let mut scope = ReadyScope::default();
    for node in snapshot.nodes() {
        if node.ready_for_placement() && node_in_job_scope(job, node) {
            match scope.by_dc.get_mut(&node.datacenter) {
                Some(n) => *n += 1,
                None => {
                    scope.by_dc.insert(node.datacenter.clone(), 1);
                }
            }
            scope.nodes.push(node.clone());
        }
    }
    scope
}

/// How many scopes (datacenter set and node pool) the cache keeps for one nodes table.
const CACHED_SCOPES: usize = 16;

/// The ready nodes of recent scopes, remembered across evaluations for as long as the nodes
/// table is the very same ([`NodesVersion::is_of`]): finding them walks every node, which
/// would otherwise dominate a small job's evaluation on a large cluster, and the nodes table
/// changes only when a node does (registration, status, drain, eligibility), not when
/// allocations, jobs or evaluations do. A worker pool shares one cache between its workers
/// and batches; a miss (another nodes table) starts it afresh.
#[derive(Default)]
pub struct ReadyNodesCache {
    entries: std::sync::Mutex<CachedTable>,
}

impl std::fmt::Debug for ReadyNodesCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadyNodesCache").finish_non_exhaustive()
    }
}

/// The scopes computed on one nodes table.
#[derive(Default)]
struct CachedTable {
    /// The nodes table the scopes were computed on (that table only: a cache that lives as
    /// long as the server must not keep old jobs, allocations and evaluations alive).
    nodes: Option<NodesVersion>,
    /// Most recently used last.
    scopes: Vec<(Vec<String>, String, Arc<ReadyScope>)>,
}

impl ReadyNodesCache {
    fn scope(&self, snapshot: &Snapshot, job: &Job) -> Arc<ReadyScope> {
        {
            let mut table = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            if table.nodes.as_ref().is_some_and(|v| v.is_of(snapshot)) {
                let found = table
                    .scopes
                    .iter()
                    .position(|(dcs, pool, _)| *dcs == job.datacenters && *pool == job.node_pool);
                if let Some(at) = found {
                    let entry = table.scopes.remove(at);
                    let scope = entry.2.clone();
                    table.scopes.push(entry);
                    return scope;
                }
            }
        }
        // Scanned outside the lock: other workers' hits do not wait for it.
        let scope = Arc::new(scan_ready_nodes(snapshot, job));
        let mut table = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if !table.nodes.as_ref().is_some_and(|v| v.is_of(snapshot)) {
            table.nodes = Some(snapshot.nodes_version());
            table.scopes.clear();
        }
        table
            .scopes
            .retain(|(dcs, pool, _)| !(*dcs == job.datacenters && *pool == job.node_pool));
        if table.scopes.len() >= CACHED_SCOPES {
            table.scopes.remove(0);
        }
        table.scopes.push((
            job.datacenters.clone(),
            job.node_pool.clone(),
            scope.clone(),
        ));
        scope
    }
}

/// The counts [`PlanResult::full_commit`](teamster_storage::model::PlanResult::full_commit)
/// compares, taken before the plan is handed to the planner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PlanSize {
    allocs: usize,
    stops: usize,
    preemptions: usize,
}

impl PlanSize {
    pub fn of_plan(plan: &Plan) -> PlanSize {
        PlanSize {
            allocs: plan.node_allocation.values().map(Vec::len).sum(),
            stops: plan.node_update.values().map(Vec::len).sum(),
            preemptions: plan.node_preemptions.values().map(Vec::len).sum(),
        }
    }

    pub fn of_result(result: &PlanResult) -> PlanSize {
        PlanSize {
            allocs: result.node_allocation.values().map(Vec::len).sum(),
            stops: result.node_update.values().map(Vec::len).sum(),
            preemptions: result.node_preemptions.values().map(Vec::len).sum(),
        }
    }
}

/// Nomad's `progressMade`: the result committed something.
pub(crate) fn progress_made(result: &PlanResult) -> bool {
    result.node_update.values().any(|v| !v.is_empty())
        || result.node_allocation.values().any(|v| !v.is_empty())
}

/// Nomad's `CreateBlockedEval`: a blocked evaluation for what `eval` could not place.
#[allow(clippy::too_many_arguments)]
pub(crate) fn blocked_eval(
    eval: &Evaluation,
    id: String,
    failed_tg_allocs: &BTreeMap<String, AllocMetric>,
    eligibility: &Eligibility,
    max_plan_attempts: bool,
    snapshot_index: u64,
    now: i64,
) -> Evaluation {
    let (triggered_by, description) = if max_plan_attempts {
        (EvalTrigger::MaxPlanAttempts, BLOCKED_MAX_PLAN_DESC)
    } else {
        (EvalTrigger::QueuedAllocs, BLOCKED_FAILED_PLACEMENTS_DESC)
    };
    let escaped = eligibility.escaped();
    Evaluation {
        id: id.into(),
        namespace: eval.namespace.clone(),
        priority: eval.priority,
        eval_type: eval.eval_type,
        triggered_by,
        job_id: eval.job_id.clone(),
        job_modify_index: eval.job_modify_index,
        status: EvalStatus::Blocked,
        status_description: description.to_owned(),
        previous_eval: eval.id.clone(),
        failed_tg_allocs: failed_tg_allocs.clone(),
        class_eligibility: if escaped {
            BTreeMap::new()
        } else {
            eligibility.classes()
        },
        escaped_computed_class: escaped,
        snapshot_index,
        create_time: now,
        modify_time: now,
        ..Evaluation::default()
    }
}

/// Nomad's `blockedEvalMaxPlanDesc`.
pub(crate) const BLOCKED_MAX_PLAN_DESC: &str = "created due to placement conflicts";
/// Nomad's `blockedEvalFailedPlacements`.
pub(crate) const BLOCKED_FAILED_PLACEMENTS_DESC: &str = "created to place remaining allocations";

#[cfg(test)]
mod tests {
    use super::*;
    use teamster_storage::model::{Resources, Task, TaskState, Timestamp};

    #[test]
    fn ready_nodes_are_remembered_only_while_the_nodes_table_is_the_same() {
        use crate::scheduler::harness::{mock_job, mock_node, Harness};
        use crate::scheduler::verify::PlanEvaluation;
        use teamster_storage::fsm::{Command, NodeRegister};

        let mut h = Harness::new();
        for n in 0..3 {
            h.register_node(mock_node(n)).unwrap();
        }
        let job = mock_job("web", 1);
        let cache = ReadyNodesCache::default();
        let base = h.snapshot();
        let first = ready_nodes(&base, &job, Some(&cache));
        assert_eq!(first.nodes.len(), 3);
        // A view with allocations applied shares the nodes table: the cached answer holds.
        let empty = PlanEvaluation::default().apply_command(h.now);
        let (view, _) = base.with_applied(Command::ApplyPlanResults(empty));
        assert!(base.nodes_version().is_of(&view));
        let again = ready_nodes(&view, &job, Some(&cache));
        assert!(
            Arc::ptr_eq(&first, &again),
            "served from the cache, not scanned again"
        );
        // A new node changes the table: the cache must not answer the old list.
        let (grown, _) = base.with_applied(Command::NodeRegister(NodeRegister {
            node: mock_node(7),
            evals: Vec::new(),
        }));
        assert!(!base.nodes_version().is_of(&grown));
        let scope = ready_nodes(&grown, &job, Some(&cache));
        assert_eq!(scope.nodes.len(), 4);
        assert_eq!(scope.by_dc.get("dc1"), Some(&4));
        // Another scope on the same table is scanned, not served from the last one.
        let mut elsewhere = job.clone();
        elsewhere.datacenters = vec!["dc2".into()];
        assert!(ready_nodes(&grown, &elsewhere, Some(&cache))
            .nodes
            .is_empty());
        // Both scopes stay cached for that table.
        assert!(Arc::ptr_eq(
            &scope,
            &ready_nodes(&grown, &job, Some(&cache))
        ));
    }

    #[test]
    fn the_cache_keeps_only_the_nodes_table_alive() {
        use crate::scheduler::harness::{mock_job, mock_node, Harness};

        let mut h = Harness::new();
        h.register_node(mock_node(0)).unwrap();
        let job = mock_job("web", 1);
        h.register_job(job.clone()).unwrap();
        let snapshot = h.snapshot();
        let stored = snapshot
            .job_by_id(&job.namespace, &job.id)
            .expect("registered")
            .clone();
        let cache = ReadyNodesCache::default();
        assert_eq!(ready_nodes(&snapshot, &job, Some(&cache)).nodes.len(), 1);
        drop(snapshot);
        drop(h);
        // The cache lives as long as the server: it must not pin the jobs (or allocations
        // and evaluations) of the state it last scanned.
        assert_eq!(Arc::strong_count(&stored), 1);
    }

    #[test]
    fn name_index_fills_low_and_removes_high() {
        let mut idx = NameIndex::new("web", "api", ["web.api[0]", "web.api[2]", "web.api[5]"]);
        assert_eq!(idx.next(2), vec!["web.api[1]", "web.api[3]"]);
        assert_eq!(
            idx.highest(2),
            ["web.api[5]".to_string(), "web.api[3]".to_string()]
                .into_iter()
                .collect()
        );
        idx.unset("web.api[5]");
        assert_eq!(idx.next(1), vec!["web.api[4]"]);
        assert_eq!(alloc_name_index("a.b[c][12]"), Some(12));
        assert_eq!(alloc_name_index("no-index"), None);
    }

    fn job_with(task_cpu: u64, env: &str, constraint: bool) -> Job {
        let mut task = Task {
            name: "t".into(),
            driver: "mock".into(),
            resources: Resources {
                cpu: task_cpu,
                ..Resources::default()
            },
            ..Task::default()
        };
        task.env.insert("MODE".into(), env.into());
        let mut group = TaskGroup {
            name: "g".into(),
            tasks: vec![task],
            ..TaskGroup::default()
        };
        if constraint {
            group
                .constraints
                .push(teamster_storage::model::Constraint::new(
                    "${attr.kernel.name}",
                    "=",
                    "linux",
                ));
        }
        Job {
            id: "j".into(),
            task_groups: vec![group].into(),
            ..Job::default()
        }
    }

    #[test]
    fn task_changes_are_destructive_but_count_and_constraints_are_not() {
        let base = job_with(100, "a", false);
        assert!(!tasks_updated(&base, &base, "g"));
        assert!(tasks_updated(&base, &job_with(200, "a", false), "g"));
        assert!(tasks_updated(&base, &job_with(100, "b", false), "g"));
        assert!(!tasks_updated(&base, &job_with(100, "a", true), "g"));
        let mut scaled = base.clone();
        scaled.task_groups_mut()[0].count = 10;
        assert!(!tasks_updated(&base, &scaled, "g"));
        let mut meta = base.clone();
        meta.meta.insert("owner".into(), "x".into());
        assert!(tasks_updated(&base, &meta, "g"));
        assert!(tasks_updated(&base, &base, "missing"));
        // A workload identity changed (given in a file now, or a named one added) is given
        // to a new allocation, as Nomad's tasksUpdated decides.
        let mut file = base.clone();
        file.task_groups_mut()[0].tasks[0].identity =
            Some(teamster_storage::model::WorkloadIdentity {
                name: "default".into(),
                file: true,
                ..Default::default()
            });
        assert!(tasks_updated(&base, &file, "g"));
        let mut named = base.clone();
        named.task_groups_mut()[0].tasks[0].identities.push(
            teamster_storage::model::WorkloadIdentity {
                name: "vault".into(),
                ..Default::default()
            },
        );
        assert!(tasks_updated(&base, &named, "g"));
    }

    #[test]
    fn a_changed_disk_or_log_collection_switched_off_is_destructive_other_log_limits_are_not() {
        use teamster_storage::model::{EphemeralDisk, LogConfig};
        let base = job_with(100, "a", false);
        let with_disk = |disk: EphemeralDisk| {
            let mut job = base.clone();
            job.task_groups_mut()[0].ephemeral_disk = Some(disk);
            job
        };
        assert!(!tasks_updated(
            &base,
            &with_disk(EphemeralDisk::default()),
            "g"
        ));
        let sticky = EphemeralDisk {
            sticky: true,
            ..EphemeralDisk::default()
        };
        assert!(tasks_updated(&base, &with_disk(sticky), "g"));
        let bigger = EphemeralDisk {
            size_mb: 500,
            ..EphemeralDisk::default()
        };
        assert!(tasks_updated(&base, &with_disk(bigger), "g"));
        let with_logs = |logs: LogConfig| {
            let mut job = base.clone();
            job.task_groups_mut()[0].tasks[0].log_config = Some(logs);
            job
        };
        let smaller = LogConfig {
            max_files: 2,
            ..LogConfig::default()
        };
        assert!(!tasks_updated(&base, &with_logs(smaller), "g"));
        let off = LogConfig {
            disabled: true,
            ..LogConfig::default()
        };
        assert!(tasks_updated(&base, &with_logs(off), "g"));
    }

    fn failed_alloc(finished_at: i64, events: Vec<(i64, u64)>) -> Allocation {
        let mut alloc = Allocation {
            id: "a1".into(),
            node_id: "n1".into(),
            client_status: ClientStatus::Failed,
            modify_time: finished_at,
            ..Allocation::default()
        };
        alloc.task_states.insert(
            "t".into(),
            TaskState {
                finished_at: Timestamp::from_unix_nanos(finished_at),
                ..TaskState::default()
            },
        );
        if !events.is_empty() {
            alloc.reschedule_tracker = Some(RescheduleTracker {
                events: events
                    .into_iter()
                    .map(|(t, d)| RescheduleEvent {
                        reschedule_time: t,
                        delay: d,
                        ..RescheduleEvent::default()
                    })
                    .collect(),
            });
        }
        alloc
    }

    const S: u64 = 1_000_000_000;

    fn policy(
        attempts: u32,
        interval: u64,
        delay: u64,
        f: DelayFunction,
        max: u64,
        unlimited: bool,
    ) -> ReschedulePolicy {
        ReschedulePolicy {
            attempts: Some(attempts),
            interval: Some(interval),
            delay: Some(delay),
            delay_function: Some(f),
            max_delay: Some(max),
            unlimited: Some(unlimited),
        }
    }

    #[test]
    fn delay_functions_grow_and_cap() {
        let p = policy(0, 0, 5 * S, DelayFunction::Exponential, 60 * S, true);
        let t0 = 1_000 * S as i64;
        assert_eq!(next_delay(&failed_alloc(t0, vec![]), &p), 5 * S);
        let a = failed_alloc(t0, vec![(t0 - 1, 20 * S)]);
        assert_eq!(next_delay(&a, &p), 40 * S);
        let a = failed_alloc(t0, vec![(t0 - 1, 40 * S)]);
        assert_eq!(next_delay(&a, &p), 60 * S, "capped");
        let a = failed_alloc(t0, vec![(t0 - 120 * S as i64, 40 * S)]);
        assert_eq!(
            next_delay(&a, &p),
            5 * S,
            "a chain quiet past the cap resets"
        );
        let fib = policy(0, 0, 5 * S, DelayFunction::Fibonacci, 100 * S, true);
        let a = failed_alloc(t0, vec![(t0 - 2, 5 * S), (t0 - 1, 10 * S)]);
        assert_eq!(next_delay(&a, &fib), 15 * S);
        let constant = policy(0, 0, 7 * S, DelayFunction::Constant, 0, true);
        assert_eq!(next_delay(&a, &constant), 7 * S);
    }

    #[test]
    fn reschedule_eligibility_counts_attempts_inside_the_interval() {
        let t0 = 10_000 * S as i64;
        let p = policy(2, 600 * S, 5 * S, DelayFunction::Constant, 0, false);
        let fresh = failed_alloc(t0, vec![]);
        assert_eq!(
            next_reschedule_time(&fresh, Some(&p)),
            (t0 + 5 * S as i64, true)
        );
        let once = failed_alloc(t0, vec![(t0 - 100 * S as i64, 5 * S)]);
        assert!(next_reschedule_time(&once, Some(&p)).1);
        let twice = failed_alloc(
            t0,
            vec![(t0 - 200 * S as i64, 5 * S), (t0 - 100 * S as i64, 5 * S)],
        );
        assert!(!next_reschedule_time(&twice, Some(&p)).1, "attempts used");
        let long_ago = failed_alloc(
            t0,
            vec![(t0 - 2000 * S as i64, 5 * S), (t0 - 100 * S as i64, 5 * S)],
        );
        assert!(
            next_reschedule_time(&long_ago, Some(&p)).1,
            "old attempts expire"
        );
        let none = policy(0, 0, 5 * S, DelayFunction::Constant, 0, false);
        assert!(!next_reschedule_time(&fresh, Some(&none)).1);
        assert!(!next_reschedule_time(&fresh, None).1);
        let mut running = fresh.clone();
        running.client_status = ClientStatus::Running;
        assert!(!next_reschedule_time(&running, Some(&p)).1);
    }

    #[test]
    fn tracker_keeps_recent_events_and_appends_this_one() {
        let t0 = 10_000 * S as i64;
        let p = policy(3, 600 * S, 5 * S, DelayFunction::Constant, 0, false);
        let prev = failed_alloc(
            t0,
            vec![(t0 - 2000 * S as i64, 5 * S), (t0 - 100 * S as i64, 5 * S)],
        );
        let tracker = reschedule_tracker_for(&prev, Some(&p), t0);
        assert_eq!(tracker.events.len(), 2);
        assert_eq!(tracker.events[1].reschedule_time, t0);
        assert_eq!(tracker.events[1].prev_alloc_id, prev.id);
        let unlimited = policy(0, 0, 5 * S, DelayFunction::Constant, 0, true);
        let many = failed_alloc(t0, (0..9).map(|i| (t0 - 10 + i, 5 * S)).collect());
        assert_eq!(
            reschedule_tracker_for(&many, Some(&unlimited), t0)
                .events
                .len(),
            6
        );
    }
}
