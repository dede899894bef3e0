//! Deployments in the write transaction, with Nomad's state-store rules:
//!
//! - A new allocation that names a deployment counts as placed in its group
//!   (`PlacedAllocs`, and `PlacedCanaries` for a canary); the first placement starts the
//!   progress deadline (`RequireProgressBy` = its time + `ProgressDeadline`).
//! - The first health report of an allocation counts it healthy or unhealthy; a healthy one
//!   turning unhealthy moves one count; each healthy report pushes `RequireProgressBy` to
//!   its time + `ProgressDeadline`.
//! - A deployment turning `successful` marks its job version stable.
//! - Promotion marks the groups promoted, turns their canaries into ordinary allocations of
//!   the deployment and restarts the progress deadline; so does a resume.

use std::sync::Arc;

use crate::fsm::ApplyError;
use crate::model::{
    AllocDeploymentStatus, AllocId, Allocation, Deployment, DeploymentId, DeploymentStatus,
    DeploymentStatusUpdate, Timestamp,
};
use crate::state::events::StateChange;
use crate::state::tables::Table;
use crate::state::txn::WriteTxn;

impl WriteTxn {
    /// The deployment, or `DeploymentNotFound`.
    pub fn deployment(&self, id: &DeploymentId) -> Result<Arc<Deployment>, ApplyError> {
        if let Some(counted) = self.deployment_counts.get(id) {
            return Ok(Arc::new(counted.clone()));
        }
        self.t
            .deployments
            .get(id.as_str())
            .cloned()
            .ok_or_else(|| ApplyError::DeploymentNotFound {
                deployment_id: id.to_string(),
            })
    }

    /// An active deployment, or why not.
    fn active_deployment(&self, id: &DeploymentId) -> Result<Arc<Deployment>, ApplyError> {
        let d = self.deployment(id)?;
        if !d.active() {
            return Err(ApplyError::DeploymentTerminal {
                deployment_id: id.to_string(),
                status: d.status.as_str().to_owned(),
            });
        }
        Ok(d)
    }

    /// Writes a deployment: created (with its create index) or replaced. The counts a plan
    /// carries are the scheduler's view; the state's own counts (moved by allocations and
    /// health reports) and its status are kept for an existing deployment.
    pub fn upsert_deployment(&mut self, mut d: Deployment) -> Result<(), ApplyError> {
        if d.id.is_empty() || d.job_id.is_empty() {
            return Err(ApplyError::invalid("deployment without an ID or job"));
        }
        self.flush_deployment_counts();
        match self.t.deployments.get(d.id.as_str()).cloned() {
            Some(existing) => {
                d.create_index = existing.create_index;
                for (name, group) in d.task_groups.iter_mut() {
                    if let Some(old) = existing.task_groups.get(name) {
                        group.placed_allocs = old.placed_allocs;
                        group.healthy_allocs = old.healthy_allocs;
                        group.unhealthy_allocs = old.unhealthy_allocs;
                        group.placed_canaries = old.placed_canaries.clone();
                        group.promoted |= old.promoted;
                        if group.require_progress_by.is_zero() {
                            group.require_progress_by = old.require_progress_by;
                        }
                    }
                }
                // Status changes travel as status updates, never in a written deployment:
                // a scheduler's copy read before an operator paused, failed or promoted the
                // deployment must not undo it. Its description of a running deployment
                // (promotion wanted or not) is taken.
                d.status = existing.status;
                if existing.status != DeploymentStatus::Running {
                    d.status_description = existing.status_description.clone();
                }
            }
            None => {
                // The counts are the state's to keep: they move with the allocations below.
                for group in d.task_groups.values_mut() {
                    group.placed_allocs = 0;
                    group.healthy_allocs = 0;
                    group.unhealthy_allocs = 0;
                    group.placed_canaries.clear();
                }
                d.create_index = self.index;
            }
        }
        self.put_deployment(d);
        Ok(())
    }

    /// Writes the deployments whose counts moved since the last write (see
    /// `WriteTxn::deployment_counts`).
    pub(super) fn flush_deployment_counts(&mut self) {
        for (_, d) in std::mem::take(&mut self.deployment_counts) {
            self.put_deployment(d);
        }
    }

    fn put_deployment(&mut self, mut d: Deployment) {
        d.modify_index = self.index;
        let key = (d.namespace.clone(), d.job_id.clone());
        self.t.deployments_by_job.insert(key, d.id.clone());
        let d = Arc::new(d);
        self.t.deployments.insert(d.id.clone(), d.clone());
        self.touch(Table::Deployments);
        self.changes
            .push(StateChange::DeploymentUpserted { deployment: d });
    }

    /// Changes an active deployment's status; a successful one makes its version stable.
    pub fn update_deployment_status(
        &mut self,
        update: &DeploymentStatusUpdate,
        modify_time: i64,
    ) -> Result<(), ApplyError> {
        self.flush_deployment_counts();
        let existing = self.active_deployment(&update.deployment_id)?;
        let mut d = (*existing).clone();
        let resumed = existing.status == DeploymentStatus::Paused
            && update.status == DeploymentStatus::Running;
        d.status = update.status;
        d.status_description = update.status_description.clone();
        d.modify_time = modify_time;
        if resumed {
            restart_progress_deadlines(&mut d, modify_time);
        }
        let stable = d.status == DeploymentStatus::Successful;
        let (namespace, job_id, version) = (d.namespace.clone(), d.job_id.clone(), d.job_version);
        self.put_deployment(d);
        if stable {
            // The version may have been pruned meanwhile; nothing to mark then.
            match self.set_job_stability(&namespace, &job_id, version, true) {
                Ok(()) | Err(ApplyError::JobVersionNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Promotes the canaries of `groups` (every group with canaries when `all`).
    pub fn promote_deployment(
        &mut self,
        id: &DeploymentId,
        all: bool,
        groups: &[String],
        modify_time: i64,
    ) -> Result<(), ApplyError> {
        self.flush_deployment_counts();
        let existing = self.active_deployment(id)?;
        let mut d = (*existing).clone();
        let chosen: Vec<String> = if all {
            d.task_groups
                .iter()
                .filter(|(_, g)| g.desired_canaries > 0)
                .map(|(n, _)| n.clone())
                .collect()
        } else {
            groups.to_vec()
        };
        if chosen.is_empty() {
            return Err(ApplyError::DeploymentRefused {
                reason: format!("deployment {id} has no canaries to promote"),
            });
        }
        let mut promoted_allocs: Vec<AllocId> = Vec::new();
        for name in &chosen {
            let Some(group) = d.task_groups.get_mut(name) else {
                return Err(ApplyError::DeploymentRefused {
                    reason: format!("deployment {id} has no task group {name:?}"),
                });
            };
            if group.desired_canaries == 0 {
                return Err(ApplyError::DeploymentRefused {
                    reason: format!("task group {name:?} has no canaries to promote"),
                });
            }
            let healthy = group
                .placed_canaries
                .iter()
                .filter(|a| {
                    self.t
                        .allocs
                        .get(a.as_str())
                        .is_some_and(|a| a.is_healthy() && !a.terminal_status())
                })
                .count() as u32;
            if healthy < group.desired_canaries {
                return Err(ApplyError::DeploymentRefused {
                    reason: format!(
                        "Task group {name:?} has {healthy}/{} healthy allocations",
                        group.desired_canaries
                    ),
                });
            }
            group.promoted = true;
            if group.progress_deadline > 0 {
                group.require_progress_by = Timestamp::from_unix_nanos(
                    modify_time.saturating_add(group.progress_deadline as i64),
                );
            }
            promoted_allocs.extend(group.placed_canaries.iter().cloned());
        }
        d.status_description = d.running_description().to_owned();
        d.modify_time = modify_time;
        self.put_deployment(d);
        for alloc_id in promoted_allocs {
            let Some(existing) = self.t.allocs.get(alloc_id.as_str()).cloned() else {
                continue;
            };
            let mut alloc = (*existing).clone();
            if let Some(status) = &mut alloc.deployment_status {
                status.canary = false;
                status.modify_index = self.index;
            }
            alloc.modify_index = self.index;
            alloc.alloc_modify_index = self.index;
            self.alloc_nodes.insert(alloc.node_id.clone());
            self.put_alloc(alloc, Some(&existing));
        }
        Ok(())
    }

    /// Sets the health of allocations of an active deployment (an operator's
    /// `allocation-health`): every allocation must belong to it.
    pub fn set_deployment_alloc_health(
        &mut self,
        id: &DeploymentId,
        healthy: &[AllocId],
        unhealthy: &[AllocId],
        timestamp: i64,
    ) -> Result<(), ApplyError> {
        self.active_deployment(id)?;
        for (ids, value) in [(healthy, true), (unhealthy, false)] {
            for alloc_id in ids {
                let Some(existing) = self.t.allocs.get(alloc_id.as_str()).cloned() else {
                    return Err(ApplyError::AllocNotFound {
                        alloc_id: alloc_id.to_string(),
                    });
                };
                if existing.deployment_id != *id {
                    return Err(ApplyError::DeploymentRefused {
                        reason: format!("alloc {alloc_id:?} is not part of deployment {id:?}"),
                    });
                }
                let mut alloc = (*existing).clone();
                let mut status = alloc.deployment_status.take().unwrap_or_default();
                status.healthy = Some(value);
                status.timestamp = Timestamp::from_unix_nanos(timestamp);
                status.modify_index = self.index;
                alloc.deployment_status = Some(status);
                alloc.modify_index = self.index;
                self.count_in_deployment(&alloc, Some(&existing));
                self.put_alloc(alloc, Some(&existing));
            }
        }
        Ok(())
    }

    /// Nomad's `updateDeploymentWithAlloc`: moves the counts of `alloc`'s deployment for a
    /// new allocation, one that joined the deployment, or a health report.
    pub(super) fn count_in_deployment(
        &mut self,
        alloc: &Allocation,
        existing: Option<&Allocation>,
    ) {
        if alloc.deployment_id.is_empty() {
            return;
        }
        let counted = self.deployment_counts.get(&alloc.deployment_id);
        let stored = match counted {
            Some(_) => None,
            None => self.t.deployments.get(alloc.deployment_id.as_str()),
        };
        let Some(d) = counted.or(stored.map(|d| &**d)) else {
            return;
        };
        if !d.active() {
            return;
        }
        let Some(group) = d.task_groups.get(alloc.task_group.as_str()) else {
            return;
        };
        let health = |a: &Allocation| a.deployment_status.as_ref().and_then(|s| s.healthy);
        let (mut placed, mut healthy, mut unhealthy) = (0i64, 0i64, 0i64);
        let joined = existing.is_none_or(|e| e.deployment_id != alloc.deployment_id);
        if joined {
            placed = 1;
        } else {
            match (existing.and_then(health), health(alloc)) {
                (None, Some(true)) => healthy = 1,
                (None, Some(false)) => unhealthy = 1,
                (Some(true), Some(false)) => {
                    healthy = -1;
                    unhealthy = 1;
                }
                _ => {}
            }
        }
        if placed == 0 && healthy == 0 && unhealthy == 0 {
            return;
        }
        let mut group = group.clone();
        let add = |n: u32, by: i64| (i64::from(n) + by).max(0) as u32;
        group.placed_allocs = add(group.placed_allocs, placed);
        group.healthy_allocs = add(group.healthy_allocs, healthy);
        group.unhealthy_allocs = add(group.unhealthy_allocs, unhealthy);
        if joined && alloc.is_canary() && !group.placed_canaries.contains(&alloc.id) {
            group.placed_canaries.push(alloc.id.clone());
        }
        if group.progress_deadline > 0 {
            let deadline = group.progress_deadline as i64;
            if placed > 0 && group.require_progress_by.is_zero() {
                group.require_progress_by =
                    Timestamp::from_unix_nanos(alloc.modify_time.saturating_add(deadline));
            } else if healthy > 0 {
                let at = alloc
                    .deployment_status
                    .as_ref()
                    .and_then(|s| s.timestamp.unix_nanos())
                    .unwrap_or(alloc.modify_time)
                    .saturating_add(deadline);
                if Some(at) > group.require_progress_by.unix_nanos() {
                    group.require_progress_by = Timestamp::from_unix_nanos(at);
                }
            }
        }
        let d = match self.deployment_counts.entry(alloc.deployment_id.clone()) {
            std::collections::btree_map::Entry::Occupied(counted) => counted.into_mut(),
            std::collections::btree_map::Entry::Vacant(slot) => {
                let Some(stored) = self.t.deployments.get(alloc.deployment_id.as_str()) else {
                    return;
                };
                slot.insert((**stored).clone())
            }
        };
        d.task_groups.insert(alloc.task_group.to_string(), group);
    }

    /// Applies a client's health report to an allocation it already updated, keeping the
    /// server-set fields of the status (canary, index).
    pub(super) fn merge_client_health(
        &self,
        alloc: &mut Allocation,
        reported: Option<AllocDeploymentStatus>,
    ) {
        let Some(reported) = reported else {
            return;
        };
        let mut status = alloc.deployment_status.take().unwrap_or_default();
        if status.healthy == reported.healthy {
            alloc.deployment_status = Some(status);
            return;
        }
        status.healthy = reported.healthy;
        status.timestamp = reported.timestamp;
        status.modify_index = self.index;
        alloc.deployment_status = Some(status);
    }

    /// Ends a node's drain as complete.
    pub fn complete_node_drain(
        &mut self,
        node_id: &crate::model::NodeId,
        updated_at: i64,
    ) -> Result<(), ApplyError> {
        let existing = self.existing_node(node_id)?;
        if existing.drain_strategy.is_none() {
            return Ok(());
        }
        let mut node = (*existing).clone();
        node.drain_strategy = None;
        let at = Timestamp::from_unix_nanos(updated_at.saturating_mul(1_000_000_000));
        let mut last = node.last_drain.take().unwrap_or_default();
        last.status = crate::model::DrainStatus::Complete;
        last.updated_at = at;
        node.last_drain = Some(last);
        node.status_updated_at = updated_at;
        node.modify_index = self.index;
        self.put_node(node, Some(&existing));
        Ok(())
    }
}

fn restart_progress_deadlines(d: &mut Deployment, now: i64) {
    for group in d.task_groups.values_mut() {
        if group.progress_deadline > 0 {
            group.require_progress_by =
                Timestamp::from_unix_nanos(now.saturating_add(group.progress_deadline as i64));
        }
    }
}
