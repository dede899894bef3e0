//! Allocation hooks: the work around an allocation's run as a whole, before its tasks
//! start. Nomad's order is directory, network namespace, upstream-allocation migration,
//! group services and checks. teamster runs the directory hook ([`prerun`]) and, for a
//! sticky `ephemeral_disk`, the upstream-allocation hook on this node
//! ([`take_previous_disk`]); its group services and checks are kept by the client's service
//! loop from the allocation's state, and the network hook comes with bridge networking.

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::client::allocdir::{AllocDir, AllocDirError};
use crate::client::shared::Shared;

/// Runs the allocation hooks before the tasks start: builds the allocation directory
/// (`alloc/{data,logs,tmp}`).
pub fn prerun(dir: &AllocDir) -> Result<(), AllocDirError> {
    dir.build()
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
