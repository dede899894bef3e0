//! The allocation's network namespace in bridge mode ([`crate::client::network`]): made and
//! attached before the tasks start, found again after a client restart, detached and
//! removed once every task is dead. What it made is recorded in the allocation's state
//! (written before it is made, and again with the plugins' result), so a client killed
//! midway neither leaks nor duplicates it; the hook keeps its own copy too, for an
//! allocation the servers stopped listing (its state is gone before its tasks are). A
//! failure is recorded with what may have been made: the tasks then fail to start with
//! it, and postrun removes it. A group with docker tasks gets its namespace from a pause
//! container ([`pause`]), removed with it.

use std::sync::Mutex;

use futures::future::BoxFuture;
use teamster_storage::model::{is_dns_name, Allocation, Job, Task};
use tracing::{info, warn};

use super::{AllocCtx, AllocHook, AllocHookError};
use crate::client::docker::pause;
use crate::client::network::{self, files, netns, AllocNetwork};
use crate::client::shared::{lock, Shared};
use crate::client::taskenv::{TaskDirs, TaskEnv};
use crate::client::types::{LocalAlloc, TaskHandle};

/// The `network` hook of one allocation.
#[derive(Debug, Default)]
pub struct Network {
    /// The allocation, its job and the latest record, as this hook last wrote them.
    held: Mutex<Option<(Allocation, Job, AllocNetwork)>>,
}

const NAME: &str = "network";

/// Writes `record` into allocation `alloc_id`'s state, durably: false when the allocation
/// is gone or the state could not be written.
fn set_record(shared: &Shared, alloc_id: &str, record: Option<AllocNetwork>) -> bool {
    // Not a change the servers hear of: the state is written, nothing reported.
    let kept = shared.update_alloc_if(alloc_id, |local| {
        local.network = record;
        false
    });
    kept && match shared.try_persist() {
        Ok(()) => true,
        Err(e) => {
            warn!(error = %e, "cannot record the allocation's network");
            false
        }
    }
}

impl Network {
    /// Writes `record` into the state and keeps a copy with the allocation.
    fn record(&self, ctx: &AllocCtx, alloc: &Allocation, job: &Job, record: &AllocNetwork) -> bool {
        *lock(&self.held) = Some((alloc.clone(), job.clone(), record.clone()));
        set_record(&ctx.shared, &ctx.alloc_id, Some(record.clone()))
    }

    /// Records why the network could not be made (its tasks fail with it), with what may
    /// have been made for postrun to remove.
    fn failed(
        &self,
        ctx: &AllocCtx,
        alloc: &Allocation,
        job: &Job,
        mut made: AllocNetwork,
        message: String,
    ) -> AllocHookError {
        made.address.clear();
        made.error = message.clone();
        self.record(ctx, alloc, job, &made);
        AllocHookError {
            hook: NAME,
            message,
        }
    }
}

impl AllocHook for Network {
    fn name(&self) -> &'static str {
        NAME
    }

    fn prerun<'a>(&'a self, ctx: &'a AllocCtx) -> BoxFuture<'a, Result<(), AllocHookError>> {
        Box::pin(async move {
            let Some((alloc, job, existing, pids)) = ctx
                .with_local(|l| {
                    network::is_namespaced(network::group_mode(&l.alloc, &l.job)).then(|| {
                        (
                            l.alloc.clone(),
                            l.job.clone(),
                            l.network.clone(),
                            task_pids(l),
                        )
                    })
                })
                .flatten()
            else {
                return Ok(());
            };
            let settings = network::BridgeSettings::of(&ctx.shared.config);
            let docker = network::has_docker_tasks(&alloc, &job);
            if let Some(found) = existing {
                *lock(&self.held) = Some((alloc.clone(), job.clone(), found.clone()));
                if network::is_complete(&found) {
                    info!(netns = %found.netns.display(), address = %found.address, "found the allocation's network again");
                    return write_hosts(ctx, &found, false);
                }
                // Attached, but its name is gone while a task still runs in it (unmounted
                // behind the client's back): named again from that task, never made anew
                // under it.
                if !found.address.is_empty() && found.error.is_empty() {
                    if let Some(source) = live_netns(&ctx.shared, &alloc, docker, &pids).await {
                        let dir = settings.netns_dir.clone();
                        let name = ctx.alloc_id.clone();
                        let pinned =
                            tokio::task::spawn_blocking(move || netns::pin(&dir, &name, &source))
                                .await;
                        if let Ok(Ok(path)) = pinned {
                            info!(netns = %path.display(), "named the allocation's namespace again from its task");
                            return write_hosts(ctx, &found, false);
                        }
                    }
                }
                // Made halfway by a client that was killed, failed, or lost with a reboot:
                // undone, made anew.
                let (done, left) = network::teardown(&settings, &alloc, &job, &found).await;
                if let Err(e) = done {
                    self.record(ctx, &alloc, &job, &left);
                    return Err(AllocHookError {
                        hook: NAME,
                        message: format!("cannot remove what an earlier run made: {e}"),
                    });
                }
                set_record(&ctx.shared, &ctx.alloc_id, None);
            }
            // The group's hostname, interpolated and checked as Nomad's hook does.
            let mut hostname =
                group_hostname(&ctx.shared, &alloc, &job).map_err(|message| AllocHookError {
                    hook: NAME,
                    message,
                })?;
            // Docker tasks join a pause container's namespace: the allocation's is that one
            // (its hostname theirs).
            let source = if docker {
                let node_id = ctx.shared.state().node_id.clone();
                let asked = (!hostname.is_empty()).then_some(hostname.as_str());
                match pause::start(
                    &ctx.shared.docker,
                    &ctx.alloc_id,
                    &job.name,
                    &node_id,
                    asked,
                )
                .await
                {
                    Ok(paused) => {
                        hostname = paused.hostname;
                        Some(std::path::PathBuf::from(format!(
                            "/proc/{}/ns/net",
                            paused.pid
                        )))
                    }
                    Err(e) => {
                        let _ = pause::stop(&ctx.shared.docker, &ctx.alloc_id).await;
                        return Err(AllocHookError {
                            hook: NAME,
                            message: e.to_string(),
                        });
                    }
                }
            } else {
                None
            };
            let made = network::setup(
                &settings,
                &alloc,
                &job,
                source.as_deref(),
                &hostname,
                |record| self.record(ctx, &alloc, &job, record),
            )
            .await;
            match made {
                Ok(net) => {
                    info!(netns = %net.netns.display(), address = %net.address, hostname = %net.hostname, "allocation network ready");
                    // Made anew: an earlier file names an earlier address or pause container.
                    write_hosts(ctx, &net, true)
                        .map_err(|e| self.failed(ctx, &alloc, &job, net, e.message))
                }
                Err((network::NetworkError::NotRecorded, made)) => {
                    // The allocation is gone: what was made goes at once.
                    let _ = release(&ctx.shared, &alloc, &job, &made).await;
                    *lock(&self.held) = None;
                    Err(AllocHookError {
                        hook: NAME,
                        message: network::NetworkError::NotRecorded.to_string(),
                    })
                }
                Err((e, made)) => Err(self.failed(ctx, &alloc, &job, made, e.to_string())),
            }
        })
    }

    fn postrun<'a>(&'a self, ctx: &'a AllocCtx) -> BoxFuture<'a, Result<(), AllocHookError>> {
        Box::pin(async move {
            // The allocation's own record, or this hook's copy when the client has already
            // forgotten the allocation.
            let current = ctx
                .with_local(|l| {
                    network::is_namespaced(network::group_mode(&l.alloc, &l.job))
                        .then(|| (l.alloc.clone(), l.job.clone(), l.network.clone()))
                })
                .unwrap_or_else(|| {
                    lock(&self.held)
                        .clone()
                        .map(|(alloc, job, net)| (alloc, job, Some(net)))
                });
            let Some((alloc, job, net)) = current else {
                return Ok(());
            };
            let left = release(&ctx.shared, &alloc, &job, &net.unwrap_or_default()).await;
            let kept = left.as_ref().err().map(|(_, left)| left.clone());
            *lock(&self.held) = kept.map(|left| (alloc.clone(), job.clone(), left));
            left.map_err(|(message, _)| AllocHookError {
                hook: NAME,
                message,
            })
        })
    }
}

/// Detaches and removes what `net` says was made (and the pause container), then forgets
/// the record; when a step fails the record of what is left is kept, so a later try does
/// only that.
async fn release(
    shared: &Shared,
    alloc: &Allocation,
    job: &Job,
    net: &AllocNetwork,
) -> Result<(), (String, AllocNetwork)> {
    let alloc_id: &str = alloc.id.as_ref();
    let mut outcome = Ok(());
    if !net.netns.as_os_str().is_empty() {
        let settings = network::BridgeSettings::of(&shared.config);
        let (done, left) = network::teardown(&settings, alloc, job, net).await;
        if let Err(e) = done {
            set_record(shared, alloc_id, Some(left.clone()));
            outcome = Err((e.to_string(), left));
        }
    }
    // The pause container goes after the plugins' DEL, which needs its namespace.
    if network::has_docker_tasks(alloc, job) {
        if let Err(e) = pause::stop(&shared.docker, alloc_id).await {
            warn!(alloc_id, error = %e, "cannot remove the allocation's pause container");
        }
    }
    if outcome.is_ok() {
        set_record(shared, alloc_id, None);
    }
    outcome
}

/// The group network's `hostname` interpolated in the allocation's environment (empty
/// when it has none); refused when that is not a DNS name or too long for a kernel.
fn group_hostname(shared: &Shared, alloc: &Allocation, job: &Job) -> Result<String, String> {
    let asked = network::group_network(alloc, job)
        .map(|n| n.hostname.as_str())
        .unwrap_or_default();
    if asked.is_empty() {
        return Ok(String::new());
    }
    let none = std::path::Path::new("");
    let env = TaskEnv::new(
        shared.node_values.clone(),
        alloc,
        job,
        &Task::default(),
        TaskDirs {
            alloc: none,
            task: none,
            secrets: none,
        },
    );
    let name = env.interpolate(asked);
    // The kernel's limit (HOST_NAME_MAX) is below a DNS name's.
    if !is_dns_name(&name) || name.len() > 64 {
        return Err(format!("network hostname {name:?} is not a valid DNS name"));
    }
    Ok(name)
}

/// Writes the allocation's hosts file when its namespace has a hostname: anew for a
/// network just made, else only when missing (its tasks may have changed it).
fn write_hosts(ctx: &AllocCtx, net: &AllocNetwork, fresh: bool) -> Result<(), AllocHookError> {
    if net.hostname.is_empty() {
        return Ok(());
    }
    let path = ctx.alloc_dir.root().join(files::HOSTS);
    let text = files::hosts_file(&net.address, &net.hostname);
    let written = if fresh {
        files::write_fresh(&path, &text)
    } else {
        files::write_new(&path, &text)
    };
    written.map_err(|e| AllocHookError {
        hook: NAME,
        message: format!("cannot write {}: {e}", path.display()),
    })
}

/// The process ids of the allocation's tasks, as its handles hold them.
fn task_pids(local: &LocalAlloc) -> Vec<u32> {
    local
        .handles
        .values()
        .filter_map(|h| match h {
            TaskHandle::Process { pid, .. } => u32::try_from(*pid).ok(),
            _ => None,
        })
        .collect()
}

/// The network namespace a live task of the allocation is in (its pause container's, for
/// a docker group), when it is not this client's own.
async fn live_netns(
    shared: &Shared,
    alloc: &Allocation,
    docker: bool,
    pids: &[u32],
) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let own = std::fs::metadata("/proc/self/ns/net").ok()?.ino();
    let mut candidates: Vec<u32> = pids.to_vec();
    if docker {
        if let Ok(Some(pid)) = pause::running(&shared.docker, alloc.id.as_ref()).await {
            candidates.insert(0, pid);
        }
    }
    candidates.into_iter().find_map(|pid| {
        let path = std::path::PathBuf::from(format!("/proc/{pid}/ns/net"));
        let ino = std::fs::metadata(&path).ok()?.ino();
        (ino != own).then_some(path)
    })
}

/// At client start: the networks of finished allocations an earlier run did not get to
/// remove (it was killed after their tasks died).
pub async fn release_finished(shared: &Shared) {
    let left: Vec<LocalAlloc> = shared
        .state()
        .allocs
        .values()
        .filter(|l| l.finished() && l.network.is_some())
        .cloned()
        .collect();
    for local in left {
        let net = local.network.clone().unwrap_or_default();
        match release(shared, &local.alloc, &local.job, &net).await {
            Ok(()) => info!(alloc_id = %local.alloc.id, "removed a finished allocation's network"),
            Err((e, _)) => {
                warn!(alloc_id = %local.alloc.id, error = %e, "cannot remove a finished allocation's network")
            }
        }
    }
}
