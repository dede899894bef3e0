//! What the client's loops, runners, checks and operator requests share: the client's
//! configuration and state (kept durably in [`state`](crate::client::state)), the clock,
//! the allocation runners' handles, the checks' latest results, and the docker engine.
//! Changing an allocation goes through [`Shared::update_alloc`], which recomputes its
//! status and wakes the status updater and the health watchers.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use teamster_storage::model::Task;

use tokio::sync::{watch, Notify};
use tracing::warn;

use crate::client::allocdir::AllocDir;
use crate::client::config::ClientConfig;
use crate::client::taskenv::{TaskDirs, TaskEnv};
use crate::client::types::{AllocHandle, CheckResult, ClientState, LocalAlloc, ServiceOwner};
use crate::client::{docker, state};
use crate::util::SharedClock;

/// What the loops and task runners share.
pub struct Shared {
    pub(crate) config: ClientConfig,
    pub(crate) store: state::StateStore,
    pub(crate) alloc_root: PathBuf,
    pub(crate) clock: SharedClock,
    pub(crate) state: Mutex<ClientState>,
    pub(crate) changed: Notify,
    /// Bumped on every change of an allocation, by its tasks or by the servers: what the
    /// health watchers wait on.
    pub(crate) alloc_changes: watch::Sender<()>,
    pub(crate) runners: Mutex<HashMap<String, AllocHandle>>,
    /// What `${node.*}`, `${attr.*}` and `${meta.*}` in a task's config read.
    pub(crate) node_values: BTreeMap<String, String>,
    /// Held while the state is written ([`Shared::try_persist`]).
    pub(crate) persist_lock: Mutex<()>,
    /// The latest result of each service check, by allocation and check ID ([`checks`]).
    pub(crate) check_results: Mutex<BTreeMap<String, BTreeMap<String, CheckResult>>>,
    /// The docker engine, connected on first use.
    pub(crate) docker: docker::Connector,
    /// How this client isolates tasks (cgroups, the `exec` driver's host).
    pub(crate) isolation: crate::client::driver::Isolation,
    /// The servers, for the calls task hooks make (workload identities); `None` in unit
    /// tests without servers.
    pub(crate) servers: Option<Arc<crate::client::servers::Servers>>,
}

impl Shared {
    pub(crate) fn state(&self) -> MutexGuard<'_, ClientState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Apply `f` to an allocation, recompute its status, mark it for reporting.
    pub(crate) fn update_alloc(&self, alloc_id: &str, f: impl FnOnce(&mut LocalAlloc)) {
        self.update_alloc_if(alloc_id, |local| {
            f(local);
            true
        });
    }

    /// Apply `f` to an allocation; when it says it changed something, recompute the
    /// allocation's status and mark it for reporting. False when the allocation is gone.
    pub(crate) fn update_alloc_if(
        &self,
        alloc_id: &str,
        f: impl FnOnce(&mut LocalAlloc) -> bool,
    ) -> bool {
        let changed = {
            let mut st = self.state();
            let Some(local) = st.allocs.get_mut(alloc_id) else {
                return false;
            };
            let changed = f(local);
            if changed {
                local.recompute();
                local.version += 1;
            }
            changed
        };
        if changed {
            self.changed.notify_one();
            self.alloc_changes.send_replace(());
        }
        true
    }

    /// Write the state (atomically and durably, [`state::StateStore::write`]), logging a
    /// failure.
    pub(crate) fn persist(&self) {
        if let Err(e) = self.try_persist() {
            warn!(path = %self.store.path().display(), error = %e, "cannot write the client state");
        }
    }

    /// [`Shared::persist`], one writer at a time: the state is read and written under one
    /// lock, so the last write holds the newest state.
    pub(crate) fn try_persist(&self) -> Result<(), state::StateError> {
        let _writer = lock(&self.persist_lock);
        // Encoded under the state's lock, written after it is released.
        let encoded = state::StateStore::encode(&self.state())?;
        self.store.write_encoded(encoded)
    }
}

impl Shared {
    /// `task` of `local`'s allocation as its runner starts it (config interpolated, Nomad's
    /// variables in its environment), with its directory: what `alloc exec` runs in too.
    pub(crate) fn prepared_task(&self, local: &LocalAlloc, task: &Task) -> (Task, PathBuf) {
        let dir = AllocDir::new(&self.alloc_root, local.alloc.id.as_ref());
        let task_dir = dir.task(&task.name);
        // An exec task sees its directories where its root holds them.
        let (alloc, local_dir, secrets) = if task.driver == "exec" {
            (
                PathBuf::from("/alloc"),
                PathBuf::from("/local"),
                PathBuf::from("/secrets"),
            )
        } else {
            (dir.shared(), task_dir.local(), task_dir.secrets())
        };
        let env = TaskEnv::in_network(
            self.node_values.clone(),
            &local.alloc,
            &local.job,
            task,
            TaskDirs {
                alloc: &alloc,
                task: &local_dir,
                secrets: &secrets,
            },
            local
                .network
                .as_ref()
                .filter(|n| !n.address.is_empty())
                .map(|n| (n.interface.as_str(), n.address.as_str())),
        );
        let mut prepared = env.apply(task);
        // A task's memory_max applies only if the servers placed the allocation with memory
        // oversubscription on (its own memory_max is then not 0).
        if local.alloc.resources.memory_max_mb == 0 {
            prepared.resources.memory_max_mb = 0;
        }
        // A task reserving whole cores is given their MHz, and the drivers pin it to them
        // by NOMAD_CPU_CORES, which says what the servers gave it whatever the task's own
        // `env` sets (a task without cores has none).
        match local.alloc.allocated_resources.task(&task.name) {
            Some(held) => {
                prepared.resources.cpu = held.cpu.cpu_shares;
                prepared.env.insert(
                    teamster_storage::model::CPU_CORES_ENV.into(),
                    teamster_storage::model::format_cpuset(&held.cpu.reserved_cores),
                );
            }
            None => {
                prepared.env.remove(teamster_storage::model::CPU_CORES_ENV);
            }
        }
        (prepared, task_dir.dir().to_path_buf())
    }
}

/// What a hook registers one allocation's services with: it marks them registered in the
/// allocation's state ([`LocalAlloc::registered`], kept across client restarts), and the
/// service loop sends what is marked.
#[derive(Clone)]
pub struct Registrations {
    shared: Arc<Shared>,
    alloc_id: String,
}

impl std::fmt::Debug for Registrations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registrations")
            .field("alloc_id", &self.alloc_id)
            .finish()
    }
}

impl Registrations {
    /// The registrations of allocation `alloc_id`.
    pub fn new(shared: Arc<Shared>, alloc_id: String) -> Registrations {
        Registrations { shared, alloc_id }
    }

    /// Registers (`on`) or withdraws `owner`'s services; a change wakes the service loop.
    pub fn set(&self, owner: ServiceOwner<'_>, on: bool) {
        self.set_if(owner, on, |_| true);
    }

    /// Registers `owner`'s services unless the allocation is being stopped (decided under
    /// the state's lock, so a stop's withdrawal cannot come in between and be undone).
    pub fn register_unless_stopping(&self, owner: ServiceOwner<'_>) {
        self.set_if(owner, true, |local| !local.shutting_down);
    }

    fn set_if(&self, owner: ServiceOwner<'_>, on: bool, allowed: impl Fn(&LocalAlloc) -> bool) {
        let changed = {
            let mut st = self.shared.state();
            st.allocs
                .get_mut(&self.alloc_id)
                .is_some_and(|local| allowed(local) && local.registered.set(owner, on))
        };
        if changed {
            self.shared.alloc_changes.send_replace(());
            self.shared.persist();
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
