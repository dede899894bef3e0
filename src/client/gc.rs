//! Garbage collection of the allocations a client keeps (Nomad's client
//! `AllocGarbageCollector`): a finished allocation's directory — its tasks' files and logs —
//! stays on the node after it stops, for `alloc logs`, `alloc fs` and a sticky or migrating
//! disk's replacement, until it is collected.
//!
//! An allocation is collectable once every task is dead, the servers have its final state
//! (its last report was taken) and its runner is done. Collecting it removes its directory
//! and forgets it on this client (the servers still list it until they collect it too).
//! Collection happens, oldest allocations first:
//! - every `gc_interval`, while the allocation directory's filesystem is fuller than
//!   `gc_disk_usage_threshold` (percent of space) or `gc_inode_usage_threshold` (percent of
//!   inodes), one allocation at a time;
//! - whenever the client keeps more than `gc_max_allocs` allocations, down to that many;
//! - when asked: `/v1/client/gc` (every collectable one), `/v1/client/allocation/:id/gc`
//!   (that one).
//!
//! An allocation the servers no longer list is forgotten at once by the alloc watcher; its
//! directory is removed once its runner is done. An allocation that a kept, unfinished one
//! replaces is not collected: the replacement may still take its sticky or migrating disk.
//! At start, directories of allocations the client does not keep are removed
//! ([`sweep_orphans`]).
//!
//! [`oldest_first`] and [`over_max`] decide (pure); [`collect`] and [`gc_loop`] act.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::client::shared::{lock, Shared};
use crate::client::types::LocalAlloc;

/// One allocation as the collector sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    /// Its ID.
    pub id: String,
    /// Whether it may be collected now.
    pub collectable: bool,
    /// When it last changed on the servers (its `ModifyIndex`): older goes first.
    pub modify_index: u64,
}

/// The collectable allocations, oldest first.
pub fn oldest_first(kept: &[Kept]) -> Vec<String> {
    let mut collectable: Vec<&Kept> = kept.iter().filter(|k| k.collectable).collect();
    collectable.sort_by(|a, b| (a.modify_index, &a.id).cmp(&(b.modify_index, &b.id)));
    collectable.into_iter().map(|k| k.id.clone()).collect()
}

/// The allocations to collect so that at most `max` are kept: the oldest collectable ones,
/// as many as are over (fewer when not enough are collectable).
pub fn over_max(kept: &[Kept], max: usize) -> Vec<String> {
    let over = kept.len().saturating_sub(max);
    oldest_first(kept).into_iter().take(over).collect()
}

/// Whether the filesystem is fuller than either threshold (percent).
pub fn over_threshold(used_percent: f64, inodes_used_percent: f64, disk: f64, inodes: f64) -> bool {
    used_percent > disk || inodes_used_percent > inodes
}

/// Whether `local` may be collected: every task dead, its final state taken by a server,
/// and `runner_done` (no runner, or its runner finished).
pub fn collectable(local: &LocalAlloc, runner_done: bool) -> bool {
    local.finished()
        && local.client_status.is_terminal()
        && local.version <= local.reported
        && runner_done
}

/// The allocations whose runner still runs (never with the state's lock held: a runner's
/// end is final, so reading them first cannot let a running one through).
fn running(shared: &Shared) -> std::collections::HashSet<String> {
    lock(&shared.runners)
        .iter()
        .filter(|(_, r)| !r.finished())
        .map(|(id, _)| id.clone())
        .collect()
}

/// The allocations a kept, unfinished allocation replaces: it may still take their disk
/// (a sticky or migrating `ephemeral_disk`), so they are not collected yet.
fn replaced_by_unfinished(allocs: &std::collections::BTreeMap<String, LocalAlloc>) -> Vec<String> {
    allocs
        .values()
        .filter(|l| !l.finished())
        .map(|l| l.alloc.previous_allocation.to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// What the collector sees of the allocations `shared` keeps.
fn kept(shared: &Shared) -> Vec<Kept> {
    let running = running(shared);
    let st = shared.state();
    let replaced = replaced_by_unfinished(&st.allocs);
    st.allocs
        .values()
        .map(|l| {
            let id = l.alloc.id.to_string();
            Kept {
                collectable: collectable(l, !running.contains(&id)) && !replaced.contains(&id),
                modify_index: l.alloc.modify_index,
                id,
            }
        })
        .collect()
}

/// The directory of allocation `id`, removed off the async runtime. A missing one is fine.
pub async fn remove_alloc_dir(alloc_root: &Path, id: &str) {
    let dir: PathBuf = alloc_root.join(id);
    let alloc_id = id.to_string();
    let removed = tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    })
    .await;
    match removed {
        Ok(Ok(())) => {}
        Ok(Err(e)) => warn!(alloc_id, error = %e, "removing the allocation's directory failed"),
        Err(e) => warn!(alloc_id, error = %e, "removing the allocation's directory panicked"),
    }
}

/// Collects allocation `id` if it is collectable now: forgets it and removes its directory.
/// False when this client does not keep it or it is not collectable.
pub async fn collect(shared: &Arc<Shared>, id: &str, why: &'static str) -> bool {
    let runner_done = lock(&shared.runners).get(id).is_none_or(|r| r.finished());
    let forgotten = {
        let mut st = shared.state();
        let Some(local) = st.allocs.get(id) else {
            return false;
        };
        if !collectable(local, runner_done)
            || replaced_by_unfinished(&st.allocs).iter().any(|p| p == id)
        {
            return false;
        }
        st.allocs.remove(id)
    };
    // A network its postrun could not remove: the last chance, before it is forgotten.
    if let Some(local) = forgotten.filter(|l| l.network.is_some()) {
        let net = local.network.clone().unwrap_or_default();
        if !net.netns.as_os_str().is_empty() {
            let settings = crate::client::network::BridgeSettings::of(&shared.config);
            if let (Err(e), _) =
                crate::client::network::teardown(&settings, &local.alloc, &local.job, &net).await
            {
                warn!(alloc_id = id, error = %e, "cannot remove the allocation's network");
            }
        }
        // Its pause container, if it had one (absent is removed).
        if crate::client::network::has_docker_tasks(&local.alloc, &local.job) {
            if let Err(e) = crate::client::docker::pause::stop(&shared.docker, id).await {
                warn!(alloc_id = id, error = %e, "cannot remove the allocation's pause container");
            }
        }
    }
    lock(&shared.runners).remove(id);
    shared.persist();
    shared.alloc_changes.send_replace(());
    remove_alloc_dir(&shared.alloc_root, id).await;
    info!(
        alloc_id = id,
        reason = why,
        "garbage-collected the allocation"
    );
    metrics::counter!("teamster_client_allocs_garbage_collected_total", "reason" => why)
        .increment(1);
    true
}

/// Removes the directories under `alloc_root` of allocations the client does not keep: what
/// a crash between forgetting an allocation and removing its directory left, or what an
/// earlier version, which never removed one, did. Run at start, before any allocation
/// starts.
pub fn sweep_orphans(alloc_root: &Path, kept: &std::collections::HashSet<String>) -> usize {
    let Ok(entries) = std::fs::read_dir(alloc_root) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if !is_dir || kept.contains(&name) {
            continue;
        }
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => removed += 1,
            Err(e) => {
                warn!(alloc_id = name, error = %e, "removing an orphaned allocation directory failed")
            }
        }
    }
    removed
}

/// Collects every collectable allocation: how many were.
pub async fn collect_all(shared: &Arc<Shared>) -> usize {
    let mut n = 0;
    for id in oldest_first(&kept(shared)) {
        if collect(shared, &id, "requested").await {
            n += 1;
        }
    }
    n
}

/// Down to `gc_max_allocs`.
pub async fn collect_over_max(shared: &Arc<Shared>) {
    for id in over_max(&kept(shared), shared.config.gc_max_allocs) {
        collect(shared, &id, "max_allocs").await;
    }
}

/// One round: down to `gc_max_allocs`, then while the filesystem is over a threshold.
pub async fn collect_round(shared: &Arc<Shared>) {
    let config = &shared.config;
    collect_over_max(shared).await;
    for id in oldest_first(&kept(shared)) {
        let Some(usage) = crate::client::stats::fs_usage(&shared.alloc_root) else {
            return;
        };
        let used = crate::client::stats::used_percent(&usage);
        if !over_threshold(
            used,
            usage.inodes_used_percent,
            config.gc_disk_usage_threshold,
            config.gc_inode_usage_threshold,
        ) {
            return;
        }
        collect(shared, &id, "disk_usage").await;
    }
}

/// Runs a collection round every `gc_interval` (the first at once), and keeps the client
/// within `gc_max_allocs` whenever its allocations change (a new one may put it over), until
/// shutdown.
pub async fn gc_loop(shared: Arc<Shared>, shutdown: CancellationToken) {
    let mut changes = shared.alloc_changes.subscribe();
    let mut tick = tokio::time::interval(shared.config.gc_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tick.tick() => collect_round(&shared).await,
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                collect_over_max(&shared).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(id: &str, collectable: bool, modify_index: u64) -> Kept {
        Kept {
            id: id.into(),
            collectable,
            modify_index,
        }
    }

    #[test]
    fn the_oldest_collectable_allocations_go_first_and_only_as_many_as_are_over() {
        let all = [
            kept("new-done", true, 30),
            kept("running", false, 1),
            kept("old-done", true, 10),
            kept("mid-done", true, 20),
        ];
        assert_eq!(oldest_first(&all), ["old-done", "mid-done", "new-done"]);
        assert_eq!(over_max(&all, 2), ["old-done", "mid-done"]);
        assert_eq!(over_max(&all, 4), Vec::<String>::new());
        // Not enough collectable: what there is.
        assert_eq!(over_max(&all, 0), ["old-done", "mid-done", "new-done"]);
    }

    #[test]
    fn a_filesystem_is_full_past_either_threshold() {
        assert!(!over_threshold(80.0, 70.0, 80.0, 70.0));
        assert!(over_threshold(80.5, 10.0, 80.0, 70.0));
        assert!(over_threshold(10.0, 70.5, 80.0, 70.0));
    }
}
