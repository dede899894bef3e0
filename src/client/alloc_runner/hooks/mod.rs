//! Allocation hooks: the work around an allocation's run as a whole, each in its own file,
//! run by the allocation runner in Nomad's order.
//!
//! ```text
//!  prerun (before the tasks start, and when a restarted client finds the allocation):
//!    alloc_dir ─▶ upstream_allocs ─▶ alloc_health_watcher ─▶ network ─▶ group_services
//!  update (an in-place update of the job) · pre_kill (a stop was asked: before the group's
//!  shutdown_delay) · postrun (every task is dead)
//! ```
//!
//! `network` makes the allocation's namespace in bridge mode (and removes it in postrun).
//! Service checks follow the registrations: the client's check loop probes the checks of
//! every service a hook has registered, and stops once it is withdrawn. A new runtime
//! feature around the allocation is a new hook here, added to [`alloc_hooks`]; the runner
//! does not change.

mod alloc_dir;
mod group_services;
pub mod health;
pub mod network;
pub mod upstream;

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::client::allocdir::AllocDir;
use crate::client::shared::{Registrations, Shared};
use crate::client::types::{LocalAlloc, Siblings};

/// Why an allocation hook failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{hook}: {message}")]
pub struct AllocHookError {
    /// The hook.
    pub hook: &'static str,
    /// What went wrong.
    pub message: String,
}

/// What every hook of one allocation sees.
pub struct AllocCtx {
    /// The client.
    pub shared: Arc<Shared>,
    /// The allocation's ID.
    pub alloc_id: String,
    /// Its directory.
    pub alloc_dir: AllocDir,
    /// What stops its tasks.
    pub siblings: Arc<Siblings>,
    /// Where its services are registered.
    pub services: Registrations,
}

impl AllocCtx {
    /// `f` of the allocation as the client holds it now (`None` once it is forgotten).
    pub fn with_local<T>(&self, f: impl FnOnce(&LocalAlloc) -> T) -> Option<T> {
        self.shared.state().allocs.get(&self.alloc_id).map(f)
    }
}

/// One piece of work around an allocation. Every phase does nothing unless the hook says
/// otherwise; errors are logged (a task's own hooks fail its start when it cannot run).
pub trait AllocHook: Send + Sync {
    /// Its name (in logs and errors).
    fn name(&self) -> &'static str;

    /// Before the tasks start (again after a client restart: each hook finds what it did).
    fn prerun<'a>(&'a self, _ctx: &'a AllocCtx) -> BoxFuture<'a, Result<(), AllocHookError>> {
        Box::pin(async { Ok(()) })
    }

    /// An in-place update of the job (the allocation holds the new version).
    fn update<'a>(&'a self, _ctx: &'a AllocCtx) -> BoxFuture<'a, Result<(), AllocHookError>> {
        Box::pin(async { Ok(()) })
    }

    /// A stop was asked: before the group's `shutdown_delay` and the tasks' kill.
    fn pre_kill<'a>(&'a self, _ctx: &'a AllocCtx) -> BoxFuture<'a, Result<(), AllocHookError>> {
        Box::pin(async { Ok(()) })
    }

    /// Every task of the allocation is dead.
    fn postrun<'a>(&'a self, _ctx: &'a AllocCtx) -> BoxFuture<'a, Result<(), AllocHookError>> {
        Box::pin(async { Ok(()) })
    }
}

/// The hooks of an allocation, in the order they run.
pub fn alloc_hooks() -> Vec<Box<dyn AllocHook>> {
    vec![
        Box::new(alloc_dir::AllocDirHook),
        Box::new(upstream::UpstreamAllocs),
        Box::new(health::HealthWatcher),
        Box::new(network::Network::default()),
        Box::new(group_services::GroupServices),
    ]
}
