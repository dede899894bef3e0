//! The upstream-allocation hook: before the tasks of a replacement with a sticky or
//! migrating `ephemeral_disk` first start, it takes its previous allocation's `alloc/data`
//! and tasks' `local/`: on this node ([`take_previous_disk`]) or from another one
//! ([`fetch_previous_disk`]).

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use futures::future::BoxFuture;
use teamster_storage::model::TaskGroup;

use super::{AllocCtx, AllocHook, AllocHookError};
use crate::client::allocdir::AllocDir;
use crate::client::shared::Shared;
use crate::client::types::LocalAlloc;
use crate::rpc::service::node::MigrateFrom;

/// How often the previous node is asked again while its allocation still runs.
const STILL_RUNNING_RETRY: Duration = Duration::from_secs(1);
/// How many times an unreachable previous node is tried before the data is given up.
const UNREACHABLE_TRIES: u32 = 5;
/// How long one request for the previous allocation's data may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(600);

/// The `upstream_allocs` hook.
#[derive(Debug)]
pub struct UpstreamAllocs;

impl AllocHook for UpstreamAllocs {
    fn name(&self) -> &'static str {
        "upstream_allocs"
    }

    fn prerun<'a>(&'a self, ctx: &'a AllocCtx) -> BoxFuture<'a, Result<(), AllocHookError>> {
        Box::pin(async move {
            let found = ctx.with_local(|local| {
                let group = local.group()?;
                let disk_bytes = group
                    .ephemeral_disk
                    .as_ref()
                    .map_or(0, |d| d.size_mb.saturating_mul(1 << 20));
                Some((upstream_of(local, group)?, local.task_names(), disk_bytes))
            });
            let Some((upstream, tasks, disk_bytes)) = found.flatten() else {
                return Ok(());
            };
            let stop = &ctx.siblings.stop_asked;
            match upstream {
                Upstream::Here(previous) => {
                    take_previous_disk(&ctx.shared, &previous, &ctx.alloc_dir, &tasks, stop).await
                }
                Upstream::Elsewhere(from) => {
                    fetch_previous_disk(&from, &ctx.alloc_dir, &tasks, disk_bytes, stop).await
                }
            }
            Ok(())
        })
    }
}

/// Where an allocation's kept disk comes from.
pub(crate) enum Upstream {
    /// Its previous allocation on this node.
    Here(String),
    /// Its previous allocation on another node.
    Elsewhere(MigrateFrom),
}

/// The allocation whose disk `local`'s takes before its tasks first start (no task of it
/// has started yet): its previous allocation, when the group's `ephemeral_disk` is sticky
/// or migrates; from another node only when it migrates (the servers then said where).
/// Only on its first start: a client restarted later finds it done.
pub(crate) fn upstream_of(local: &LocalAlloc, group: &TaskGroup) -> Option<Upstream> {
    let disk = group.ephemeral_disk.as_ref()?;
    let previous = local.alloc.previous_allocation.to_string();
    let fresh =
        local.handles.is_empty() && local.task_states.values().all(|s| s.started_at.is_zero());
    if !fresh || previous.is_empty() || !(disk.sticky || disk.migrate) {
        return None;
    }
    match &local.migrate_from {
        Some(from) if disk.migrate && from.alloc_id == previous => {
            Some(Upstream::Elsewhere(from.clone()))
        }
        _ => Some(Upstream::Here(previous)),
    }
}

/// The upstream-allocation hook of a sticky disk: once `previous` (the allocation this one
/// replaces) has stopped on this node, its `alloc/data/` and its tasks' `local/` become
/// this allocation's. An allocation that is not on this node (or no longer known) leaves
/// nothing to take. Returns early, taking nothing, when this allocation is stopped first.
pub async fn take_previous_disk(
    shared: &Shared,
    previous: &str,
    dir: &AllocDir,
    tasks: &[String],
    stop: &CancellationToken,
) {
    let mut changes = shared.alloc_changes.subscribe();
    loop {
        let finished = shared.state().allocs.get(previous).map(|l| l.finished());
        match finished {
            None => {
                info!(
                    previous,
                    "the previous allocation is not on this node: no disk to take"
                );
                return;
            }
            Some(true) => break,
            Some(false) => {}
        }
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            () = stop.cancelled() => return,
        }
    }
    let from = AllocDir::new(&shared.alloc_root, previous);
    match dir.move_from(&from, tasks) {
        Ok(moved) => info!(previous, moved = ?moved, "took the previous allocation's sticky disk"),
        Err(e) => warn!(previous, error = %e, "cannot take the previous allocation's sticky disk"),
    }
}

/// The upstream-allocation hook of a migrating disk whose previous allocation ran on
/// another node: once that allocation has stopped there, its `alloc/data/` and its tasks'
/// `local/` are fetched from that node's agent (`/v1/client/allocation/:id/snapshot`, with
/// the servers' migrate token) and unpacked here, at most `limit` bytes (the disk). A node
/// that no longer holds it leaves nothing to take; one that cannot be reached is tried a
/// few times, then the allocation starts without the data (as Nomad's). Returns early when
/// this allocation is stopped first.
pub async fn fetch_previous_disk(
    from: &MigrateFrom,
    dir: &AllocDir,
    tasks: &[String],
    limit: u64,
    stop: &CancellationToken,
) {
    let previous = from.alloc_id.as_str();
    let (scheme, client) = match crate::util::tls::outgoing_http_client() {
        Ok(c) => c,
        Err(e) => {
            warn!(previous, error = %e, "cannot fetch the previous allocation's data");
            return;
        }
    };
    let url = format!(
        "{scheme}://{}/v1/client/allocation/{previous}/snapshot",
        from.http_addr
    );
    let archive = dir
        .shared()
        .join("tmp")
        .join(format!(".migrate-{previous}.tar"));
    let mut unreachable = 0;
    loop {
        let answer = client
            .get(&url)
            .header(crate::util::migrate::TOKEN_HEADER, &from.token)
            .timeout(FETCH_TIMEOUT)
            .send();
        let answer = tokio::select! {
            a = answer => a,
            () = stop.cancelled() => return,
        };
        let wait = match answer {
            Ok(r) if r.status() == reqwest::StatusCode::OK => {
                match download(r, &archive, limit).await {
                    Ok(()) => break,
                    Err(e) => {
                        warn!(previous, error = %e, "the previous allocation's data did not arrive");
                        let _ = tokio::fs::remove_file(&archive).await;
                        return;
                    }
                }
            }
            Ok(r) if r.status() == reqwest::StatusCode::CONFLICT => STILL_RUNNING_RETRY,
            Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => {
                info!(
                    previous,
                    "the previous node no longer holds the allocation: no data to take"
                );
                return;
            }
            Ok(r) => {
                let status = r.status();
                let body = r.text().await.unwrap_or_default();
                warn!(previous, %status, body, "the previous node refused the allocation's data");
                return;
            }
            Err(e) => {
                unreachable += 1;
                if unreachable >= UNREACHABLE_TRIES {
                    warn!(previous, error = %e, "the previous node cannot be reached: starting without its data");
                    return;
                }
                STILL_RUNNING_RETRY * 2u32.pow(unreachable)
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.cancelled() => return,
        }
    }
    let (target, owned_tasks, file) = (dir.clone(), tasks.to_vec(), archive.clone());
    let unpacked = tokio::task::spawn_blocking(move || {
        let archive = std::fs::File::open(&file)?;
        target
            .unpack_snapshot(&owned_tasks, std::io::BufReader::new(archive), limit)
            .map_err(std::io::Error::other)
    })
    .await;
    let _ = tokio::fs::remove_file(&archive).await;
    match unpacked {
        Ok(Ok(files)) => {
            info!(previous, files, from = %from.http_addr, "took the previous allocation's migrated disk")
        }
        Ok(Err(e)) => warn!(previous, error = %e, "cannot unpack the previous allocation's data"),
        Err(e) => warn!(previous, error = %e, "unpacking the previous allocation's data failed"),
    }
}

/// Writes the answer's body to `path`, refusing more than the disk can hold (with room for
/// the archive's headers).
async fn download(
    mut answer: reqwest::Response,
    path: &std::path::Path,
    limit: u64,
) -> std::io::Result<()> {
    let most = limit.saturating_add(limit / 8).saturating_add(1 << 20);
    let mut file = tokio::fs::File::create(path).await?;
    let mut written = 0u64;
    while let Some(chunk) = answer.chunk().await.map_err(std::io::Error::other)? {
        written += chunk.len() as u64;
        if written > most {
            return Err(std::io::Error::other(format!(
                "over {most} bytes, more than the allocation's disk"
            )));
        }
        file.write_all(&chunk).await?;
    }
    file.flush().await
}
