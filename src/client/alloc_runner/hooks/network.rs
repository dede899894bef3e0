//! The allocation's network namespace in bridge mode ([`crate::client::network`]): made and
//! attached before the tasks start, found again after a client restart, detached and
//! removed once every task is dead. What it made is recorded in the allocation's state
//! (written before it is made), so a client killed midway neither leaks nor duplicates it.
//! A failure is recorded too: the tasks then fail to start with it.

use futures::future::BoxFuture;
use tracing::{info, warn};

use super::{AllocCtx, AllocHook, AllocHookError};
use crate::client::network::{self, AllocNetwork, MODE_BRIDGE};
use crate::client::shared::Shared;
use crate::client::types::LocalAlloc;

/// The `network` hook.
#[derive(Debug)]
pub struct Network;

const NAME: &str = "network";

fn set_record(shared: &Shared, alloc_id: &str, record: Option<AllocNetwork>) {
    // Not a change the servers hear of: the state is written, nothing reported.
    shared.update_alloc_if(alloc_id, |local| {
        local.network = record;
        false
    });
    shared.persist();
}

impl AllocHook for Network {
    fn name(&self) -> &'static str {
        NAME
    }

    fn prerun<'a>(&'a self, ctx: &'a AllocCtx) -> BoxFuture<'a, Result<(), AllocHookError>> {
        Box::pin(async move {
            let Some((alloc, job, existing)) = ctx
                .with_local(|l| {
                    (network::group_mode(&l.alloc, &l.job) == MODE_BRIDGE)
                        .then(|| (l.alloc.clone(), l.job.clone(), l.network.clone()))
                })
                .flatten()
            else {
                return Ok(());
            };
            let settings = network::BridgeSettings::of(&ctx.shared.config);
            if let Some(found) = existing {
                if network::is_complete(&found) {
                    info!(netns = %found.netns.display(), address = %found.address, "found the allocation's network again");
                    return Ok(());
                }
                // Made halfway by a client that was killed, or failed: undone, made anew.
                let _ = network::teardown(&settings, &alloc, &job, &found).await;
                set_record(&ctx.shared, &ctx.alloc_id, None);
            }
            let made = network::setup(&settings, &alloc, &job, |record| {
                set_record(&ctx.shared, &ctx.alloc_id, Some(record.clone()))
            })
            .await;
            match made {
                Ok(net) => {
                    info!(netns = %net.netns.display(), address = %net.address, "allocation network ready");
                    set_record(&ctx.shared, &ctx.alloc_id, Some(net));
                    Ok(())
                }
                Err(e) => {
                    let failed = AllocNetwork {
                        mode: MODE_BRIDGE.into(),
                        error: e.to_string(),
                        ..AllocNetwork::default()
                    };
                    set_record(&ctx.shared, &ctx.alloc_id, Some(failed));
                    Err(AllocHookError {
                        hook: NAME,
                        message: e.to_string(),
                    })
                }
            }
        })
    }

    fn postrun<'a>(&'a self, ctx: &'a AllocCtx) -> BoxFuture<'a, Result<(), AllocHookError>> {
        Box::pin(async move {
            let Some(Some((alloc, job, net))) = ctx.with_local(|l| {
                l.network
                    .clone()
                    .map(|n| (l.alloc.clone(), l.job.clone(), n))
            }) else {
                return Ok(());
            };
            release(&ctx.shared, &alloc.id, &alloc, &job, &net)
                .await
                .map_err(|message| AllocHookError {
                    hook: NAME,
                    message,
                })
        })
    }
}

/// Detaches and removes what the allocation's record says was made, then forgets the
/// record (kept when the namespace could not be removed, so a later start tries again).
async fn release(
    shared: &Shared,
    alloc_id: &str,
    alloc: &teamster_storage::model::Allocation,
    job: &teamster_storage::model::Job,
    net: &AllocNetwork,
) -> Result<(), String> {
    if net.netns.as_os_str().is_empty() {
        set_record(shared, alloc_id, None);
        return Ok(());
    }
    let settings = network::BridgeSettings::of(&shared.config);
    let done = network::teardown(&settings, alloc, job, net).await;
    match &done {
        Err(network::NetworkError::Namespace { .. }) => {}
        _ => set_record(shared, alloc_id, None),
    }
    done.map_err(|e| e.to_string())
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
        match release(shared, &local.alloc.id, &local.alloc, &local.job, &net).await {
            Ok(()) => info!(alloc_id = %local.alloc.id, "removed a finished allocation's network"),
            Err(e) => {
                warn!(alloc_id = %local.alloc.id, error = %e, "cannot remove a finished allocation's network")
            }
        }
    }
}
