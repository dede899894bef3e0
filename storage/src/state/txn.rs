//! The write transaction: table mutations with Nomad's index rules.
//!
//! A [`WriteTxn`] starts from a clone of the committed tables (O(1)), mutates it, and is
//! either committed as a whole ([`WriteTxn::finish`]) or dropped, which is how a rejected
//! command "changes nothing". The rules follow Nomad's state store:
//!
//! - `CreateIndex` is set on insert and kept on update; `ModifyIndex` is set on every change;
//!   a table's index moves to the entry's index whenever a row of it changes.
//! - A job's `Version` and `JobModifyIndex` move only when its spec changed; an unchanged
//!   re-registration writes nothing. The 6 newest versions are kept (a stable one is kept in
//!   place of the sixth), plus any version a non-terminal allocation still runs, because
//!   allocations resolve their spec through the versions table.
//! - Job summaries count allocations per task group by client status; evaluations set the
//!   queued counts. A complete evaluation without failures cancels the job's blocked ones.
//! - A job's status is derived at the end of each command for every job the command touched:
//!   system jobs run until stopped; any non-terminal allocation → running; any non-terminal
//!   evaluation → pending; else dead if it has (or had) evaluations or is stopped.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::fsm::{AllocClientReport, ApplyError};
use crate::model::{
    AllocId, AllocStop, Allocation, ClientStatus, ClusterMeta, DesiredStatus, DesiredTransition,
    DrainStrategy, EvalId, EvalStatus, Evaluation, Job, JobId, JobStatus, JobSummary, JobType,
    Namespace, Node, NodeId, NodeStatus, PeriodicLaunch, ScalingEvent, SchedulerConfiguration,
    SchedulingEligibility, SharedStr, TaskGroupSummary, MAX_SCALING_EVENTS,
};
use crate::state::events::{NodeCondition, StateChange};
use crate::state::tables::{token_key, JobKey, Table, Tables};

mod acl;
mod deployments;
mod keyring;
mod namespaces;
mod services;
mod variables;

/// How many versions of a job are kept by default (Nomad's `JobTrackedVersions`). The
/// leader's `job_max_versions` travels in each job command, so every server prunes alike.
pub const JOB_TRACKED_VERSIONS: usize = 6;

/// What registering a job did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JobUpsert {
    pub version: u64,
    pub job_modify_index: u64,
    pub spec_changed: bool,
}

/// A set of table mutations at one raft index, committed together or not at all.
pub(crate) struct WriteTxn {
    t: Tables,
    index: u64,
    changes: Vec<StateChange>,
    /// Jobs whose status must be recomputed at the end, and whether a non-terminal
    /// allocation was written for them (which forces `running`, as in Nomad).
    status_jobs: BTreeMap<JobKey, bool>,
    /// Summaries being modified, written back at the end if they differ.
    summaries: BTreeMap<JobKey, Option<JobSummary>>,
    /// Set when evaluations were deleted (a job with none left is dead, not pending).
    eval_delete: bool,
    /// Nodes whose allocations the servers changed (placed, stopped, removed): published as
    /// one [`StateChange::NodeAllocsChanged`] so that only their clients' queries wake.
    alloc_nodes: BTreeSet<NodeId>,
    /// Allocations written, published as one [`StateChange::AllocsUpserted`].
    alloc_ids: Vec<AllocId>,
    /// The task group names and descriptions written so far (at most
    /// [`RECENT_STRINGS`]): equal strings of the allocations of one command share one copy.
    recent_strings: Vec<SharedStr>,
    /// Deployments whose counts allocations moved in this transaction, written back (one
    /// write and one change each) before any other deployment is read or written and at the
    /// end: a plan of a thousand placements copies its deployment once, not a thousand
    /// times.
    deployment_counts: BTreeMap<crate::model::DeploymentId, crate::model::Deployment>,
}

/// How many distinct allocation strings a command shares ([`WriteTxn::share_str`]).
const RECENT_STRINGS: usize = 16;

impl WriteTxn {
    pub fn new(tables: Tables, index: u64) -> Self {
        Self {
            t: tables,
            index,
            changes: Vec::new(),
            status_jobs: BTreeMap::new(),
            summaries: BTreeMap::new(),
            eval_delete: false,
            alloc_nodes: BTreeSet::new(),
            alloc_ids: Vec::new(),
            recent_strings: Vec::new(),
            deployment_counts: BTreeMap::new(),
        }
    }

    /// Makes `s` a clone of an equal string written earlier in this command, or remembers it
    /// for the next ones: a plan placing a thousand allocations of one group stores its name
    /// once.
    fn share_str(&mut self, s: &mut SharedStr) {
        if s.is_empty() {
            return;
        }
        if let Some(seen) = self
            .recent_strings
            .iter()
            .find(|x| x.as_str() == s.as_str())
        {
            *s = seen.clone();
        } else if self.recent_strings.len() < RECENT_STRINGS {
            self.recent_strings.push(s.clone());
        }
    }

    /// Shares the allocation's strings: its task group name with the job's stored
    /// allocations (across commands), and its strings with those written in this command.
    fn share_alloc_strings(&mut self, alloc: &mut Allocation) {
        let known = self
            .recent_strings
            .iter()
            .any(|x| x.as_str() == alloc.task_group.as_str());
        if !known {
            let key = (alloc.namespace.clone(), alloc.job_id.clone());
            if let Some(stored) = self.t.stored_task_group(&key, alloc.task_group.as_str()) {
                alloc.task_group = stored;
            }
        }
        self.share_str(&mut alloc.task_group);
        self.share_str(&mut alloc.desired_description);
        self.share_str(&mut alloc.client_description);
    }

    /// The raft index this transaction writes at.
    pub fn index(&self) -> u64 {
        self.index
    }

    fn touch(&mut self, table: Table) {
        self.t.touch(table, self.index);
    }

    /// Commits: job summaries and statuses are brought up to date, then the tables and the
    /// changes they publish are handed back.
    pub fn finish(mut self) -> (Tables, Vec<StateChange>) {
        self.flush_deployment_counts();
        self.flush_summaries();
        self.update_job_statuses();
        if !self.alloc_ids.is_empty() {
            self.changes.push(StateChange::AllocsUpserted {
                alloc_ids: std::mem::take(&mut self.alloc_ids),
            });
        }
        if !self.alloc_nodes.is_empty() {
            self.changes.push(StateChange::NodeAllocsChanged {
                node_ids: std::mem::take(&mut self.alloc_nodes).into_iter().collect(),
            });
        }
        (self.t, self.changes)
    }

    // ---- jobs ------------------------------------------------------------------------------

    /// Writes a job (a new version when its spec changed), keeping `tracked_versions` of
    /// them (0: [`JOB_TRACKED_VERSIONS`]).
    pub fn upsert_job(&mut self, mut job: Job, tracked_versions: u32) -> JobUpsert {
        let key = (job.namespace.clone(), job.id.clone());
        let existing = self.t.jobs.get(&key).cloned();
        match &existing {
            Some(ex) if !ex.spec_changed(&job) => {
                return JobUpsert {
                    version: ex.version,
                    job_modify_index: ex.job_modify_index,
                    spec_changed: false,
                };
            }
            Some(ex) => {
                job.namespace = ex.namespace.clone();
                job.id = ex.id.clone();
                job.create_index = ex.create_index;
                job.version = ex.version + 1;
                job.status = ex.status;
            }
            None => {
                job.create_index = self.index;
                job.version = 0;
                job.status = JobStatus::Pending;
            }
        }
        job.modify_index = self.index;
        job.job_modify_index = self.index;
        let outcome = JobUpsert {
            version: job.version,
            job_modify_index: job.job_modify_index,
            spec_changed: true,
        };
        let key = (job.namespace.clone(), job.id.clone());
        let job = Arc::new(job);
        self.put_job(job.clone());
        self.ensure_summary(&job);
        self.prune_versions(&key, tracked_versions);
        self.status_jobs.entry(key).or_insert(false);
        self.changes.push(StateChange::JobUpserted {
            namespace: job.namespace.clone(),
            job_id: job.id.clone(),
            version: job.version,
            stopped: job.stop,
        });
        outcome
    }

    /// Adds a scaling event to the job's summary (newest first, the newest
    /// [`MAX_SCALING_EVENTS`] kept per group).
    pub fn record_scaling_event(
        &mut self,
        namespace: &Namespace,
        id: &JobId,
        group: String,
        mut event: ScalingEvent,
    ) {
        event.create_index = self.index;
        let key = (namespace.clone(), id.clone());
        if let Some(summary) = self.summary_slot(&key) {
            let events = summary.scaling_events.entry(group).or_default();
            events.insert(0, event);
            events.truncate(MAX_SCALING_EVENTS);
        }
    }

    /// Marks a kept version stable or not (the current job too when it is that version).
    pub fn set_job_stability(
        &mut self,
        namespace: &Namespace,
        id: &JobId,
        version: u64,
        stable: bool,
    ) -> Result<(), ApplyError> {
        let vkey = (namespace.clone(), id.clone(), version);
        let Some(kept) = self.t.job_versions.get(&vkey).cloned() else {
            return Err(ApplyError::JobVersionNotFound {
                namespace: namespace.to_string(),
                job_id: id.to_string(),
                version,
            });
        };
        if kept.stable == stable {
            return Ok(());
        }
        let mut changed = (*kept).clone();
        changed.stable = stable;
        changed.modify_index = self.index;
        let changed = Arc::new(changed);
        self.t.job_versions.insert(vkey, changed.clone());
        self.touch(Table::JobVersions);
        let key = (namespace.clone(), id.clone());
        if self.t.jobs.get(&key).is_some_and(|j| j.version == version) {
            self.t.jobs.insert(key, changed.clone());
            self.touch(Table::Jobs);
        }
        self.changes.push(StateChange::JobUpserted {
            namespace: namespace.clone(),
            job_id: id.clone(),
            version,
            stopped: changed.stop,
        });
        Ok(())
    }

    /// The dispatched child of `parent` created with idempotency `token`.
    pub fn child_by_token(
        &self,
        namespace: &Namespace,
        parent: &JobId,
        token: &str,
    ) -> Option<JobId> {
        self.t
            .dispatch_tokens
            .get(&(namespace.clone(), parent.clone(), token.to_owned()))
            .cloned()
    }

    /// The last recorded launch of a periodic parent.
    pub fn periodic_launch(
        &self,
        namespace: &Namespace,
        id: &JobId,
    ) -> Option<Arc<PeriodicLaunch>> {
        self.t
            .periodic_launches
            .get(&(namespace.clone(), id.clone()))
            .cloned()
    }

    /// Records a periodic parent's launch time (Unix nanoseconds).
    pub fn set_periodic_launch(&mut self, namespace: &Namespace, id: &JobId, launch: i64) {
        let key = (namespace.clone(), id.clone());
        let create_index = self
            .t
            .periodic_launches
            .get(&key)
            .map_or(self.index, |l| l.create_index);
        self.t.periodic_launches.insert(
            key,
            Arc::new(PeriodicLaunch {
                id: id.clone(),
                namespace: namespace.clone(),
                launch,
                create_index,
                modify_index: self.index,
            }),
        );
        self.touch(Table::PeriodicLaunches);
    }

    pub fn job(&self, namespace: &Namespace, id: &JobId) -> Option<Arc<Job>> {
        self.t.jobs.get(&(namespace.clone(), id.clone())).cloned()
    }

    fn put_job(&mut self, job: Arc<Job>) {
        let key = (job.namespace.clone(), job.id.clone());
        let old = self.t.jobs.get(&key).cloned();
        if let Some(old) = old {
            if !old.parent_id.is_empty() && old.parent_id != job.parent_id {
                self.t
                    .jobs_by_parent
                    .remove(&(job.namespace.clone(), old.parent_id.clone()), &job.id);
            }
            if let Some(token) = token_key(&old) {
                self.t.dispatch_tokens.remove(&token);
            }
        }
        if let Some(token) = token_key(&job) {
            self.t.dispatch_tokens.insert(token, job.id.clone());
        }
        if !job.parent_id.is_empty() {
            self.t.jobs_by_parent.insert(
                (job.namespace.clone(), job.parent_id.clone()),
                job.id.clone(),
            );
        }
        self.t
            .jobs
            .insert((job.namespace.clone(), job.id.clone()), job.clone());
        self.t
            .job_versions
            .insert((job.namespace.clone(), job.id.clone(), job.version), job);
        self.touch(Table::Jobs);
        self.touch(Table::JobVersions);
    }

    fn ensure_summary(&mut self, job: &Job) {
        let index = self.index;
        let key = (job.namespace.clone(), job.id.clone());
        let slot = self.summary_slot(&key);
        let summary = slot.get_or_insert_with(|| JobSummary {
            job_id: job.id.clone(),
            namespace: job.namespace.clone(),
            create_index: index,
            ..JobSummary::default()
        });
        for group in job.task_groups.iter() {
            summary.summary.entry(group.name.clone()).or_default();
        }
    }

    fn prune_versions(&mut self, key: &JobKey, tracked_versions: u32) {
        let keep_n = match tracked_versions {
            0 => JOB_TRACKED_VERSIONS,
            n => n as usize,
        };
        let (ns, id) = key;
        let versions: Vec<(u64, bool)> = self
            .t
            .job_versions
            .range((ns.clone(), id.clone(), 0)..=(ns.clone(), id.clone(), u64::MAX))
            .rev()
            .map(|((_, _, v), job)| (*v, job.stable))
            .collect();
        if versions.len() <= keep_n {
            return;
        }
        let mut keep: BTreeSet<u64> = versions.iter().take(keep_n).map(|(v, _)| *v).collect();
        if let Some((stable, _)) = versions.iter().find(|(_, stable)| *stable) {
            if !keep.contains(stable) {
                let oldest_kept = versions[keep_n - 1].0;
                keep.remove(&oldest_kept);
                keep.insert(*stable);
            }
        }
        let live: BTreeSet<u64> = self
            .t
            .allocs_by_job
            .get(key)
            .filter_map(|a| self.t.allocs.get(a))
            .filter(|a| !a.terminal_status())
            .map(|a| a.job_version)
            .collect();
        let mut removed = false;
        for (version, _) in versions {
            if !keep.contains(&version) && !live.contains(&version) {
                self.t
                    .job_versions
                    .remove(&(ns.clone(), id.clone(), version));
                removed = true;
            }
        }
        if removed {
            self.touch(Table::JobVersions);
        }
    }

    /// Purges a job: the job, its versions, its summary and its allocations go; its pending
    /// evaluations are completed ("job … deleted"), as Nomad's `DeleteJobTxn` does.
    pub fn delete_job(&mut self, namespace: &Namespace, id: &JobId) -> Result<(), ApplyError> {
        let key = (namespace.clone(), id.clone());
        let Some(job) = self.t.jobs.remove(&key) else {
            return Err(ApplyError::JobNotFound {
                namespace: namespace.to_string(),
                job_id: id.to_string(),
            });
        };
        self.touch(Table::Jobs);
        if !job.parent_id.is_empty() {
            self.t
                .jobs_by_parent
                .remove(&(namespace.clone(), job.parent_id.clone()), &job.id);
        }
        if let Some(token) = token_key(&job) {
            self.t.dispatch_tokens.remove(&token);
        }
        if self.t.periodic_launches.remove(&key).is_some() {
            self.touch(Table::PeriodicLaunches);
        }
        let versions: Vec<_> = self
            .t
            .job_versions
            .range((namespace.clone(), id.clone(), 0)..=(namespace.clone(), id.clone(), u64::MAX))
            .map(|(k, _)| k.clone())
            .collect();
        for version in versions {
            self.t.job_versions.remove(&version);
        }
        self.touch(Table::JobVersions);
        self.summaries.insert(key.clone(), None);
        self.t.job_summaries.remove(&key);
        self.touch(Table::JobSummaries);
        let pending: Vec<Arc<Evaluation>> = self
            .evals_of_job(namespace, id)
            .into_iter()
            .filter(|e| e.status == EvalStatus::Pending)
            .collect();
        for eval in pending {
            let mut eval = (*eval).clone();
            eval.status = EvalStatus::Complete;
            eval.status_description = format!("job {} deleted", job.id);
            eval.modify_index = self.index;
            self.put_eval(eval);
        }
        let allocs: Vec<AllocId> = self.alloc_ids_of_job(namespace, id);
        if !allocs.is_empty() {
            for alloc_id in allocs {
                if let Some(alloc) = self.t.allocs.remove(&alloc_id) {
                    self.t.unindex_alloc(&alloc);
                    self.remove_services_of_alloc(&alloc.id);
                    self.alloc_nodes.insert(alloc.node_id.clone());
                }
            }
            self.touch(Table::Allocs);
        }
        self.flush_deployment_counts();
        let deployments: Vec<_> = self.t.deployments_by_job.get(&key).cloned().collect();
        if !deployments.is_empty() {
            for d in deployments {
                self.t.deployments.remove(&d);
                self.t.deployments_by_job.remove(&key, &d);
            }
            self.touch(Table::Deployments);
        }
        self.status_jobs.remove(&key);
        self.changes.push(StateChange::JobDeleted {
            namespace: job.namespace.clone(),
            job_id: job.id.clone(),
        });
        Ok(())
    }

    fn evals_of_job(&self, namespace: &Namespace, id: &JobId) -> Vec<Arc<Evaluation>> {
        self.t
            .evals_by_job
            .get(&(namespace.clone(), id.clone()))
            .filter_map(|e| self.t.evals.get(e).cloned())
            .collect()
    }

    fn alloc_ids_of_job(&self, namespace: &Namespace, id: &JobId) -> Vec<AllocId> {
        self.t
            .allocs_by_job
            .get(&(namespace.clone(), id.clone()))
            .cloned()
            .collect()
    }

    // ---- summaries and statuses ------------------------------------------------------------

    /// The pending copy of a job summary (loaded from the table on first use).
    fn summary_slot(&mut self, key: &JobKey) -> &mut Option<JobSummary> {
        if !self.summaries.contains_key(key) {
            let current = self.t.job_summaries.get(key).map(|s| (**s).clone());
            self.summaries.insert(key.clone(), current);
        }
        self.summaries
            .get_mut(key)
            .expect("summary slot was just inserted")
    }

    fn flush_summaries(&mut self) {
        let summaries = std::mem::take(&mut self.summaries);
        let mut touched = false;
        for (key, pending) in summaries {
            let Some(mut summary) = pending else {
                continue;
            };
            let unchanged = self
                .t
                .job_summaries
                .get(&key)
                .is_some_and(|current| **current == summary);
            if unchanged {
                continue;
            }
            summary.modify_index = self.index;
            self.t.job_summaries.insert(key, Arc::new(summary));
            touched = true;
        }
        if touched {
            self.touch(Table::JobSummaries);
        }
    }

    /// Nomad's `ReconcileJobSummaries`: every job's allocation counts per task group
    /// recomputed from its allocations (those of its current incarnation, bins by client
    /// status), repairing counts that drifted. What allocations cannot tell is kept: each
    /// group's `Queued`, the children counts and the scaling events. Only summaries that
    /// change are written (their `ModifyIndex` moves).
    pub fn reconcile_job_summaries(&mut self) {
        let jobs: Vec<Arc<Job>> = self.t.jobs.values().cloned().collect();
        for job in jobs {
            let key = (job.namespace.clone(), job.id.clone());
            let mut summary = self
                .t
                .job_summaries
                .get(&key)
                .map(|s| (**s).clone())
                .unwrap_or_else(|| JobSummary {
                    job_id: job.id.clone(),
                    namespace: job.namespace.clone(),
                    ..JobSummary::default()
                });
            summary.create_index = job.create_index;
            summary.summary = job
                .task_groups
                .iter()
                .map(|g| {
                    let queued = summary.summary.get(&g.name).map_or(0, |tg| tg.queued);
                    let counts = TaskGroupSummary {
                        queued,
                        ..TaskGroupSummary::default()
                    };
                    (g.name.clone(), counts)
                })
                .collect();
            for alloc in self
                .t
                .allocs_by_job
                .get(&key)
                .filter_map(|id| self.t.allocs.get(id))
            {
                let incarnation = self
                    .t
                    .job_versions
                    .get(&(
                        alloc.namespace.clone(),
                        alloc.job_id.clone(),
                        alloc.job_version,
                    ))
                    .map(|j| j.create_index);
                if incarnation != Some(job.create_index) {
                    continue;
                }
                if let Some(tg) = summary.summary.get_mut(alloc.task_group.as_str()) {
                    bin(tg, alloc.client_status, |n| *n += 1);
                }
            }
            *self.summary_slot(&key) = Some(summary);
        }
    }

    /// Nomad's `updateSummaryWithAlloc`: counts move between client-status bins.
    fn summarize_alloc(&mut self, new: &Allocation, old: Option<&Allocation>) {
        let key = (new.namespace.clone(), new.job_id.clone());
        let Some(create_index) = self
            .t
            .job_versions
            .get(&(new.namespace.clone(), new.job_id.clone(), new.job_version))
            .map(|j| j.create_index)
        else {
            return;
        };
        let Some(summary) = self.summary_slot(&key).as_mut() else {
            return;
        };
        // Allocations of an earlier incarnation of a purged and re-registered job do not count.
        if summary.create_index != create_index {
            return;
        }
        let Some(tg) = summary.summary.get_mut(new.task_group.as_str()) else {
            return;
        };
        match old {
            None => {
                if new.client_status == ClientStatus::Pending {
                    tg.starting += 1;
                    tg.queued = tg.queued.saturating_sub(1);
                }
            }
            Some(old) if old.client_status != new.client_status => {
                bin(tg, new.client_status, |n| *n += 1);
                match old.client_status {
                    // Nomad never takes finished allocations out of their bins.
                    ClientStatus::Complete | ClientStatus::Failed => {}
                    status => bin(tg, status, |n| *n = n.saturating_sub(1)),
                }
            }
            Some(_) => {}
        }
    }

    fn update_job_statuses(&mut self) {
        let jobs = std::mem::take(&mut self.status_jobs);
        for (key, force_running) in jobs {
            let Some(job) = self.t.jobs.get(&key).cloned() else {
                continue;
            };
            let status = if force_running {
                JobStatus::Running
            } else {
                self.compute_job_status(&job)
            };
            if status != job.status {
                let mut updated = (*job).clone();
                updated.status = status;
                updated.modify_index = self.index;
                self.put_job(Arc::new(updated));
            }
        }
    }

    fn compute_job_status(&self, job: &Job) -> JobStatus {
        // A periodic or parameterized parent is never placed: it runs until stopped.
        if job.job_type == JobType::System || job.is_parent() {
            return if job.stop {
                JobStatus::Dead
            } else {
                JobStatus::Running
            };
        }
        let (ns, id) = (&job.namespace, &job.id);
        let running = self
            .t
            .allocs_by_job
            .get(&(ns.clone(), id.clone()))
            .filter_map(|a| self.t.allocs.get(a))
            .any(|a| !a.terminal_status());
        if running {
            return JobStatus::Running;
        }
        let mut has_eval = false;
        for eval in self.evals_of_job(ns, id) {
            if !eval.terminal_status() {
                return JobStatus::Pending;
            }
            has_eval = true;
        }
        if self.eval_delete || has_eval || job.stop {
            JobStatus::Dead
        } else {
            JobStatus::Pending
        }
    }

    // ---- evaluations -----------------------------------------------------------------------

    /// Nomad's `nestedUpsertEval`.
    pub fn upsert_eval(&mut self, mut eval: Evaluation) -> Result<(), ApplyError> {
        if eval.id.is_empty() {
            return Err(ApplyError::invalid("evaluation without an ID"));
        }
        if let Some(existing) = self.t.evals.get(eval.id.as_str()) {
            eval.id = existing.id.clone();
            eval.create_index = existing.create_index;
        } else {
            eval.create_index = self.index;
        }
        eval.modify_index = self.index;
        self.t.intern_eval_ids(&mut eval);
        let key = (eval.namespace.clone(), eval.job_id.clone());
        if !eval.queued_allocations.is_empty() {
            if let Some(summary) = self.summary_slot(&key).as_mut() {
                for (group, queued) in &eval.queued_allocations {
                    if let Some(tg) = summary.summary.get_mut(group) {
                        tg.queued = *queued;
                    }
                }
            }
        }
        if eval.status == EvalStatus::Complete && eval.failed_tg_allocs.is_empty() {
            let blocked: Vec<Arc<Evaluation>> = self
                .evals_of_job(&key.0, &key.1)
                .into_iter()
                .filter(|e| e.status == EvalStatus::Blocked && e.id != eval.id)
                .collect();
            for other in blocked {
                let mut other = (*other).clone();
                other.status = EvalStatus::Canceled;
                other.status_description = format!("evaluation {:?} successful", eval.id.as_str());
                other.modify_index = self.index;
                other.modify_time = eval.modify_time;
                self.put_eval(other);
            }
        }
        self.status_jobs.entry(key).or_insert(false);
        self.put_eval(eval);
        Ok(())
    }

    fn put_eval(&mut self, eval: Evaluation) {
        if let Some(old) = self.t.evals.get(eval.id.as_str()) {
            if old.namespace != eval.namespace || old.job_id != eval.job_id {
                let stale = (old.namespace.clone(), old.job_id.clone());
                self.t.evals_by_job.remove(&stale, &old.id);
            }
        }
        self.t.evals_by_job.insert(
            (eval.namespace.clone(), eval.job_id.clone()),
            eval.id.clone(),
        );
        let eval = Arc::new(eval);
        self.t.evals.insert(eval.id.clone(), eval.clone());
        self.touch(Table::Evals);
        self.changes.push(StateChange::EvalUpserted { eval });
    }

    /// Bumps an evaluation's `ModifyIndex` (a plan for it was applied), as Nomad does.
    pub fn touch_eval(&mut self, id: &EvalId) -> Result<(), ApplyError> {
        let Some(existing) = self.t.evals.get(id.as_str()) else {
            return Err(ApplyError::EvalNotFound {
                eval_id: id.to_string(),
            });
        };
        let mut eval = (**existing).clone();
        eval.modify_index = self.index;
        self.t.evals.insert(eval.id.clone(), Arc::new(eval));
        self.touch(Table::Evals);
        Ok(())
    }

    /// Garbage collection: evaluations and allocations that do not exist are skipped.
    pub fn delete_evals_and_allocs(&mut self, evals: &[EvalId], allocs: &[AllocId]) {
        for id in evals {
            if let Some(eval) = self.t.evals.remove(id.as_str()) {
                self.t
                    .evals_by_job
                    .remove(&(eval.namespace.clone(), eval.job_id.clone()), &eval.id);
                self.touch(Table::Evals);
                self.eval_delete = true;
                self.status_jobs
                    .entry((eval.namespace.clone(), eval.job_id.clone()))
                    .or_insert(false);
                self.changes.push(StateChange::EvalDeleted {
                    eval_id: eval.id.clone(),
                });
            }
        }
        for id in allocs {
            if let Some(alloc) = self.t.allocs.remove(id.as_str()) {
                self.t.unindex_alloc(&alloc);
                self.remove_services_of_alloc(&alloc.id);
                self.alloc_nodes.insert(alloc.node_id.clone());
                self.touch(Table::Allocs);
            }
        }
    }

    // ---- nodes -----------------------------------------------------------------------------

    /// Nomad's `upsertNodeTxn`: an existing node keeps its eligibility and drain.
    pub fn upsert_node(&mut self, mut node: Node) -> Result<(), ApplyError> {
        if node.id.is_empty() {
            return Err(ApplyError::invalid("node without an ID"));
        }
        let previous = self.t.nodes.get(node.id.as_str()).cloned();
        match &previous {
            Some(ex) => {
                node.id = ex.id.clone();
                node.create_index = ex.create_index;
                node.scheduling_eligibility = ex.scheduling_eligibility;
                node.drain_strategy = ex.drain_strategy.clone();
            }
            None => node.create_index = self.index,
        }
        node.modify_index = self.index;
        self.put_node(node, previous.as_deref());
        Ok(())
    }

    fn existing_node(&self, id: &NodeId) -> Result<Arc<Node>, ApplyError> {
        self.t
            .nodes
            .get(id.as_str())
            .cloned()
            .ok_or_else(|| ApplyError::NodeNotFound {
                node_id: id.to_string(),
            })
    }

    pub fn update_node_status(
        &mut self,
        id: &NodeId,
        status: NodeStatus,
        updated_at: i64,
    ) -> Result<(), ApplyError> {
        let existing = self.existing_node(id)?;
        let mut node = (*existing).clone();
        node.status = status;
        node.status_updated_at = updated_at;
        node.modify_index = self.index;
        self.put_node(node, Some(&existing));
        if status == NodeStatus::Down {
            self.remove_services_of_node(id);
        }
        Ok(())
    }

    pub fn update_node_eligibility(
        &mut self,
        id: &NodeId,
        eligibility: SchedulingEligibility,
        updated_at: i64,
    ) -> Result<(), ApplyError> {
        let existing = self.existing_node(id)?;
        if existing.drain_strategy.is_some() && eligibility == SchedulingEligibility::Eligible {
            return Err(ApplyError::EligibleWhileDraining {
                node_id: id.to_string(),
            });
        }
        let mut node = (*existing).clone();
        node.scheduling_eligibility = eligibility;
        node.status_updated_at = updated_at;
        node.modify_index = self.index;
        self.put_node(node, Some(&existing));
        Ok(())
    }

    /// Starts or updates a drain (the node becomes ineligible) or cancels one (eligible
    /// again only if asked); `meta`, when given, becomes the drain's `LastDrain.Meta`.
    pub fn update_node_drain(
        &mut self,
        id: &NodeId,
        drain: Option<DrainStrategy>,
        mark_eligible: bool,
        updated_at: i64,
        meta: Option<std::collections::BTreeMap<String, String>>,
    ) -> Result<(), ApplyError> {
        let existing = self.existing_node(id)?;
        let mut node = (*existing).clone();
        let at = crate::model::Timestamp::from_unix_nanos(updated_at.saturating_mul(1_000_000_000));
        match drain {
            Some(strategy) => {
                let mut last = match (&existing.drain_strategy, node.last_drain.take()) {
                    (Some(_), Some(running)) => running,
                    _ => crate::model::DrainMetadata {
                        started_at: strategy.started_at,
                        ..Default::default()
                    },
                };
                last.status = crate::model::DrainStatus::Draining;
                last.updated_at = at;
                if let Some(meta) = meta {
                    last.meta = meta;
                }
                node.last_drain = Some(last);
                node.drain_strategy = Some(strategy);
                node.scheduling_eligibility = SchedulingEligibility::Ineligible;
            }
            None => {
                if existing.drain_strategy.is_some() {
                    let mut last = node.last_drain.take().unwrap_or_default();
                    last.status = crate::model::DrainStatus::Canceled;
                    last.updated_at = at;
                    if let Some(meta) = meta {
                        last.meta = meta;
                    }
                    node.last_drain = Some(last);
                }
                node.drain_strategy = None;
                if mark_eligible {
                    node.scheduling_eligibility = SchedulingEligibility::Eligible;
                }
            }
        }
        node.status_updated_at = updated_at;
        node.modify_index = self.index;
        self.put_node(node, Some(&existing));
        Ok(())
    }

    fn put_node(&mut self, node: Node, previous: Option<&Node>) {
        let node = Arc::new(node);
        self.t.nodes.insert(node.id.clone(), node.clone());
        self.touch(Table::Nodes);
        self.changes.push(StateChange::NodeUpserted {
            node,
            previous: previous.map(NodeCondition::of),
        });
    }

    /// Removes nodes; all must exist. Their allocations stay (as in Nomad).
    pub fn delete_nodes(&mut self, ids: &[NodeId]) -> Result<(), ApplyError> {
        if ids.is_empty() {
            return Err(ApplyError::invalid("node deregistration without node IDs"));
        }
        for id in ids {
            self.existing_node(id)?;
            self.t.nodes.remove(id.as_str());
            self.remove_services_of_node(id);
            self.changes.push(StateChange::NodeDeregistered {
                node_id: id.clone(),
            });
        }
        self.touch(Table::Nodes);
        Ok(())
    }

    // ---- allocations -----------------------------------------------------------------------

    /// Nomad's `upsertAllocsImpl` for one allocation of a plan result. Returns false when a
    /// new allocation was skipped because its job is gone, stopped, or lacks that version
    /// (Nomad skips rather than fails, so the scheduler does not retry forever).
    pub fn upsert_alloc(&mut self, mut alloc: Allocation) -> Result<bool, ApplyError> {
        if alloc.id.is_empty() {
            return Err(ApplyError::invalid("allocation without an ID"));
        }
        self.existing_node(&alloc.node_id)?;
        let existing = self.t.allocs.get(alloc.id.as_str()).cloned();
        match &existing {
            None => {
                let job = self.job(&alloc.namespace, &alloc.job_id);
                let version_kept = self.t.job_versions.contains_key(&(
                    alloc.namespace.clone(),
                    alloc.job_id.clone(),
                    alloc.job_version,
                ));
                if job.is_none_or(|j| j.stopped()) || !version_kept {
                    tracing::info!(
                        alloc_id = %alloc.id,
                        job_id = %alloc.job_id,
                        namespace = %alloc.namespace,
                        "attempted to create an allocation for a stopped or missing job version; skipped"
                    );
                    return Ok(false);
                }
                alloc.create_index = self.index;
            }
            Some(ex) => {
                alloc.id = ex.id.clone();
                alloc.create_index = ex.create_index;
                if !ex.next_allocation.is_empty() {
                    alloc.next_allocation = ex.next_allocation.clone();
                }
                alloc.task_states = ex.task_states.clone();
                // The client's reports are ordered against what was applied here, not
                // against the scheduler's (older) copy.
                alloc.client_report_seq = ex.client_report_seq;
                // Health is the client's (or an operator's) to report; a server-side
                // update that keeps the deployment keeps it.
                if alloc.deployment_id == ex.deployment_id && alloc.deployment_status.is_none() {
                    alloc.deployment_status = ex.deployment_status.clone();
                }
                if !matches!(
                    alloc.client_status,
                    ClientStatus::Lost | ClientStatus::Unknown
                ) {
                    alloc.client_status = ex.client_status;
                    alloc.client_description = ex.client_description.clone();
                }
            }
        }
        alloc.modify_index = self.index;
        alloc.alloc_modify_index = self.index;
        self.alloc_nodes.insert(alloc.node_id.clone());
        self.t.intern_alloc_ids(&mut alloc);
        self.share_alloc_strings(&mut alloc);
        self.summarize_alloc(&alloc, existing.as_deref());
        self.count_in_deployment(&alloc, existing.as_deref());
        if !alloc.previous_allocation.is_empty() {
            if let Some(prev) = self
                .t
                .allocs
                .get(alloc.previous_allocation.as_str())
                .cloned()
            {
                let mut prev_copy = (*prev).clone();
                prev_copy.next_allocation = alloc.id.clone();
                prev_copy.modify_index = self.index;
                self.put_alloc(prev_copy, Some(&prev));
            }
        }
        let non_terminal = !alloc.terminal_status();
        let key = (alloc.namespace.clone(), alloc.job_id.clone());
        self.put_alloc(alloc, existing.as_deref());
        let force = self.status_jobs.entry(key).or_insert(false);
        *force |= non_terminal;
        Ok(true)
    }

    /// A server-side stop (or eviction, or lost/unknown marking) of an existing allocation.
    pub fn stop_alloc(&mut self, stop: AllocStop) -> Result<(), ApplyError> {
        let Some(existing) = self.t.allocs.get(stop.id.as_str()).cloned() else {
            return Err(ApplyError::AllocNotFound {
                alloc_id: stop.id.to_string(),
            });
        };
        let mut alloc = (*existing).clone();
        alloc.desired_status = match stop.desired_status {
            DesiredStatus::Run => DesiredStatus::Stop,
            other => other,
        };
        alloc.desired_description = stop.desired_description.into();
        match stop.client_status {
            None => {}
            Some(status @ (ClientStatus::Lost | ClientStatus::Unknown)) => {
                alloc.client_status = status;
            }
            Some(other) => {
                return Err(ApplyError::invalid(format!(
                    "a plan may only mark allocation {} lost or unknown, not {}",
                    stop.id,
                    other.as_str()
                )));
            }
        }
        if !stop.followup_eval_id.is_empty() {
            alloc.followup_eval_id = stop.followup_eval_id;
        }
        if !stop.preempted_by_allocation.is_empty() {
            alloc.preempted_by_allocation = stop.preempted_by_allocation;
        }
        alloc.modify_time = stop.modify_time;
        alloc.modify_index = self.index;
        alloc.alloc_modify_index = self.index;
        self.alloc_nodes.insert(alloc.node_id.clone());
        self.t.intern_alloc_ids(&mut alloc);
        self.share_alloc_strings(&mut alloc);
        self.summarize_alloc(&alloc, Some(&existing));
        self.status_jobs
            .entry((alloc.namespace.clone(), alloc.job_id.clone()))
            .or_insert(false);
        self.put_alloc(alloc, Some(&existing));
        Ok(())
    }

    /// Nomad's `nestedUpdateAllocDesiredTransition`: `transition` merged into the
    /// allocation's, a server-side change (both modify indexes move). Nothing else changes:
    /// the evaluation created with it makes the scheduler act on it.
    pub fn update_alloc_desired_transition(
        &mut self,
        id: &AllocId,
        transition: &DesiredTransition,
    ) -> Result<(), ApplyError> {
        let Some(existing) = self.t.allocs.get(id.as_str()).cloned() else {
            return Err(ApplyError::AllocNotFound {
                alloc_id: id.to_string(),
            });
        };
        let mut alloc = (*existing).clone();
        alloc.desired_transition.merge(transition);
        alloc.modify_index = self.index;
        alloc.alloc_modify_index = self.index;
        self.put_alloc(alloc, Some(&existing));
        Ok(())
    }

    /// Nomad's `nestedUpdateAllocFromClient`: the client's fields only. Unknown
    /// allocations (garbage collected meanwhile) are skipped; returns whether the allocation
    /// is known.
    ///
    /// Two verdicts stand against a report that the allocation is pending, running or
    /// unknown, which changes nothing then:
    /// - The servers' verdict that it is lost. Such a report was sent before the client
    ///   heard the verdict (its node went down while a report was in flight); applied, it
    ///   would make a stopped allocation read as running for good, since the client, told
    ///   that the allocation is lost, stops it without reporting again. A client's final
    ///   `complete` or `failed` is taken.
    /// - The client's own final `complete` or `failed`: its tasks are dead and an
    ///   allocation never runs again. Such a report is an older one arriving last: sent to a
    ///   server that stalled (paused, cut off), sent again to the next when the client gave
    ///   up waiting, and carried out by the first once it resumed, after the final one.
    pub fn update_alloc_from_client(&mut self, report: AllocClientReport) -> bool {
        let Some(existing) = self.t.allocs.get(report.id.as_str()).cloned() else {
            return false;
        };
        let final_report = matches!(
            report.client_status,
            ClientStatus::Complete | ClientStatus::Failed | ClientStatus::Lost
        );
        let standing = matches!(
            existing.client_status,
            ClientStatus::Lost | ClientStatus::Complete | ClientStatus::Failed
        );
        if standing && !final_report {
            tracing::debug!(
                alloc_id = %report.id,
                standing = existing.client_status.as_str(),
                reported = report.client_status.as_str(),
                "late report on a finished allocation ignored"
            );
            return true;
        }
        // A client's older report arriving after a newer one (a call retried on another
        // server while the first still carried it out) says nothing new.
        if existing.is_stale_client_report(report.seq) {
            tracing::debug!(
                alloc_id = %report.id,
                applied_seq = existing.client_report_seq,
                reported_seq = report.seq,
                reported = report.client_status.as_str(),
                "stale client report ignored"
            );
            return true;
        }
        let mut alloc = existing.with_task_states(report.task_states);
        alloc.client_status = report.client_status;
        if alloc.client_description.as_str() != report.client_description {
            alloc.client_description = report.client_description.into();
            self.share_str(&mut alloc.client_description);
        }
        alloc.modify_time = report.modify_time;
        alloc.modify_index = self.index;
        alloc.client_report_seq = alloc.client_report_seq.max(report.seq);
        self.merge_client_health(&mut alloc, report.deployment_status);
        self.count_in_deployment(&alloc, Some(&existing));
        self.summarize_alloc(&alloc, Some(&existing));
        let finished = matches!(
            alloc.client_status,
            ClientStatus::Complete | ClientStatus::Failed
        );
        if finished && existing.client_status != alloc.client_status {
            self.changes.push(StateChange::AllocTerminal {
                alloc_id: alloc.id.clone(),
                node_id: alloc.node_id.clone(),
                namespace: alloc.namespace.clone(),
                job_id: alloc.job_id.clone(),
                client_status: alloc.client_status,
                node_class: self
                    .t
                    .nodes
                    .get(alloc.node_id.as_str())
                    .map(|n| n.computed_class.clone()),
            });
        }
        self.status_jobs
            .entry((alloc.namespace.clone(), alloc.job_id.clone()))
            .or_insert(false);
        self.put_alloc(alloc, Some(&existing));
        true
    }

    fn put_alloc(&mut self, alloc: Allocation, previous: Option<&Allocation>) {
        if previous.is_none_or(|p| {
            p.alloc_modify_index != alloc.alloc_modify_index || p.node_id != alloc.node_id
        }) {
            self.t.note_node_alloc(&alloc);
        }
        if let Some(prev) = previous {
            if prev.node_id != alloc.node_id
                || prev.eval_id != alloc.eval_id
                || prev.job_id != alloc.job_id
                || prev.namespace != alloc.namespace
                || prev.deployment_id != alloc.deployment_id
            {
                self.t.unindex_alloc(prev);
                self.t.index_alloc(&alloc);
            } else {
                if prev.terminal_status() != alloc.terminal_status()
                    || prev.resources != alloc.resources
                {
                    self.t.account_usage(prev, false);
                    self.t.account_usage(&alloc, true);
                }
                if prev.counts_unhealthy() != alloc.counts_unhealthy() {
                    self.t.account_unhealthy(prev, false);
                    self.t.account_unhealthy(&alloc, true);
                }
            }
        } else {
            self.t.index_alloc(&alloc);
        }
        if alloc.client_terminal_status() {
            self.remove_services_of_alloc(&alloc.id);
        }
        self.alloc_ids.push(alloc.id.clone());
        self.t.allocs.insert(alloc.id.clone(), Arc::new(alloc));
        self.touch(Table::Allocs);
    }

    // ---- cluster ---------------------------------------------------------------------------

    pub fn set_scheduler_config(
        &mut self,
        mut config: SchedulerConfiguration,
        cas_index: Option<u64>,
    ) -> Result<(), ApplyError> {
        config
            .validate()
            .map_err(|e| ApplyError::invalid(e.to_string()))?;
        let current = self.t.scheduler_config.clone();
        (config.create_index, config.modify_index) =
            self.config_indexes(cas_index, current.create_index, current.modify_index)?;
        let config = Arc::new(config);
        self.t.scheduler_config = config.clone();
        self.touch(Table::SchedulerConfig);
        self.changes
            .push(StateChange::SchedulerConfigUpdated { config });
        Ok(())
    }

    /// The create and modify indexes of a configuration written now over one with
    /// `create`/`modify`; a check-and-set index other than `modify` refuses the write.
    fn config_indexes(
        &self,
        cas_index: Option<u64>,
        create: u64,
        modify: u64,
    ) -> Result<(u64, u64), ApplyError> {
        if let Some(expected) = cas_index {
            if expected != modify {
                return Err(ApplyError::CasMismatch {
                    expected,
                    actual: modify,
                });
            }
        }
        let create = if create == 0 { self.index } else { create };
        Ok((create, self.index))
    }

    /// Sets autopilot's configuration, with an optional check-and-set index.
    pub fn set_autopilot_config(
        &mut self,
        mut config: crate::model::AutopilotConfig,
        cas_index: Option<u64>,
    ) -> Result<(), ApplyError> {
        config
            .validate()
            .map_err(|e| ApplyError::invalid(e.to_string()))?;
        let current = self.t.autopilot_config.clone();
        (config.create_index, config.modify_index) =
            self.config_indexes(cas_index, current.create_index, current.modify_index)?;
        self.t.autopilot_config = Arc::new(config);
        self.touch(Table::AutopilotConfig);
        Ok(())
    }

    /// Writes the cluster identity once; the same identity again is a no-op.
    pub fn set_cluster_meta(&mut self, meta: ClusterMeta) -> Result<(), ApplyError> {
        if meta.cluster_id.is_empty() {
            return Err(ApplyError::invalid("cluster metadata without a cluster ID"));
        }
        match &self.t.cluster_meta {
            Some(existing) if **existing == meta => Ok(()),
            Some(existing) => Err(ApplyError::ClusterMetaConflict {
                existing: existing.cluster_id.clone(),
            }),
            None => {
                let meta = Arc::new(meta);
                self.t.cluster_meta = Some(meta.clone());
                self.touch(Table::ClusterMeta);
                self.changes.push(StateChange::ClusterMetaSet { meta });
                Ok(())
            }
        }
    }
}

/// Applies `f` to the summary bin of a client status.
fn bin(tg: &mut TaskGroupSummary, status: ClientStatus, f: impl FnOnce(&mut u64)) {
    match status {
        ClientStatus::Pending => f(&mut tg.starting),
        ClientStatus::Running => f(&mut tg.running),
        ClientStatus::Complete => f(&mut tg.complete),
        ClientStatus::Failed => f(&mut tg.failed),
        ClientStatus::Lost => f(&mut tg.lost),
        ClientStatus::Unknown => f(&mut tg.unknown),
    }
}
