//! Allocation hooks: the work around an allocation's run as a whole, before its tasks
//! start. Nomad's order is directory, network namespace, upstream-allocation migration,
//! group services and checks; teamster's group services and checks are kept by the
//! client's service loop from the allocation's state, and the network and migration hooks
//! come with bridge networking and ephemeral disk migration.

use crate::client::allocdir::{AllocDir, AllocDirError};

/// Runs the allocation hooks before the tasks start: builds the allocation directory
/// (`alloc/{data,logs,tmp}`).
pub fn prerun(dir: &AllocDir) -> Result<(), AllocDirError> {
    dir.build()
}
