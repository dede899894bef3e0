//! What an operator asks of the allocations this client runs, through the HTTP API of its
//! agent (a server forwards such requests to the node's agent): restart tasks in place
//! (`alloc restart`), send them a signal (`alloc signal`), read the resource usage of an
//! allocation's tasks or of the host ([`crate::client::stats`]), and run a command in a
//! task's place (`alloc exec`).
//!
//! ```text
//!  HTTP handler ──▶ ClientHandle::restart / signal ──▶ the task runners' TaskControl queues
//!                   (which tasks: the one named, else every running one)
//!               ◀── each runner's answer, or a timeout
//! ```

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};
use teamster_storage::model::{ClientStatus, TaskStateValue};
use tokio::sync::{mpsc, oneshot};

use crate::client::alloc_runner::hooks::upstream::{upstream_of, Upstream};
use crate::client::shared::{lock, Shared};
use crate::client::stats::{self, Readings, Usage};
use crate::client::types::TaskHandle;
use crate::client::types::{TaskControl, TaskOpError};

/// Where an allocation this client keeps stands, as Nomad's `nomad_client_allocations_*`
/// gauges count them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllocPhase {
    /// Waiting for its previous allocation on this node to stop (a sticky disk).
    Blocked,
    /// Its previous allocation ran on another node, and its disk is still to come from
    /// there (waiting for that allocation to stop counts here too; the tasks have not
    /// started yet).
    Migrating,
    /// Placed here, not running yet.
    Pending,
    /// Running.
    Running,
    /// Finished.
    Terminal,
}

/// One task of [`AllocFigures`].
#[derive(Debug, Clone)]
pub struct TaskFigures {
    /// The task's name.
    pub task: String,
    /// Its state.
    pub state: TaskStateValue,
    /// The CPU it was given, in MHz.
    pub cpu_mhz: u64,
    /// The memory it was given, in MB.
    pub memory_mb: u64,
}

/// One allocation of [`ClientFigures`].
#[derive(Debug, Clone)]
pub struct AllocFigures {
    /// Its ID.
    pub alloc_id: String,
    /// Its job.
    pub job: String,
    /// Its group.
    pub task_group: String,
    /// Its namespace.
    pub namespace: String,
    /// Where it stands.
    pub phase: AllocPhase,
    /// What it takes from the node.
    pub resources: teamster_storage::model::Resources,
    /// Its tasks.
    pub tasks: Vec<TaskFigures>,
}

/// What [`ClientHandle::figures`] reads.
#[derive(Debug, Clone)]
pub struct ClientFigures {
    /// The node's ID.
    pub node_id: String,
    /// Its datacenter.
    pub datacenter: String,
    /// Its class.
    pub node_class: String,
    /// Its node pool.
    pub node_pool: String,
    /// What it offers to allocations: its resources less the reserved ones.
    pub capacity: teamster_storage::model::Resources,
    /// The allocations it keeps.
    pub allocs: Vec<AllocFigures>,
}

/// How long the engine may take to report a container's usage.
const CONTAINER_STATS_WAIT: Duration = Duration::from_secs(5);
/// How long a task may take to carry out a request, on top of its kill timeout.
const ANSWER_MARGIN: Duration = Duration::from_secs(10);

/// Why an operator's request was refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocOpError {
    /// This client does not run (or no longer knows) the allocation.
    #[error("Unknown allocation {0:?} on this client")]
    UnknownAlloc(String),
    /// The allocation's group has no such task.
    #[error("Unknown task {task:?} in allocation {alloc_id}")]
    UnknownTask {
        /// The task named.
        task: String,
        /// The allocation.
        alloc_id: String,
    },
    /// Not a signal name (Nomad's words, which clients such as python-nomad match).
    #[error("failed to parse signal: invalid signal {0:?}")]
    UnknownSignal(String),
    /// The request contradicts itself (a task name and "all tasks").
    #[error("{0}")]
    Invalid(String),
    /// No task of the allocation is running.
    #[error("allocation {0} has no running task")]
    NothingRunning(String),
    /// A task refused or failed the request.
    #[error(transparent)]
    Task(#[from] TaskOpError),
    /// The migrate token does not sign this allocation for this node.
    #[error("invalid migrate token for allocation {0}")]
    MigrateToken(String),
    /// The allocation still runs: its data is taken once it has stopped.
    #[error("allocation {0} is still running")]
    StillRunning(String),
    /// Garbage collection asked of an allocation that still runs or whose end the servers
    /// have not heard yet (Nomad's words).
    #[error("No such allocation on client, or allocation not eligible for GC")]
    NotCollectable(String),
    /// The driver could not run the command in the task's place.
    #[error("cannot run the command in task {task:?}: {reason}")]
    Exec {
        /// The task.
        task: String,
        /// Why.
        reason: String,
    },
    /// A task did not answer in time.
    #[error("task {task:?} did not answer within {waited:?}")]
    Timeout {
        /// The task.
        task: String,
        /// How long it was waited for.
        waited: Duration,
    },
}

/// A command for `alloc exec`, ready to run.
#[derive(Debug)]
pub enum ExecProcess {
    /// A host command in the place of a `raw_exec` or `mock` task, ready to spawn.
    Host {
        /// The task it runs in the place of.
        task: String,
        /// The command (leading its own process group, or session with a terminal).
        cmd: tokio::process::Command,
        /// The agent's end of its terminal, when it has one.
        pty: Option<crate::client::pty::Master>,
    },
    /// A command created in a docker task's container, ready to start.
    Container {
        /// The task whose container it runs in.
        task: String,
        /// The engine's exec.
        exec: crate::client::docker::exec::CreatedExec,
    },
}

/// The HTTP API's way into this client's allocations: cheap to clone.
#[derive(Clone)]
pub struct ClientHandle {
    shared: Arc<Shared>,
    /// The servers it calls (`/v1/agent/servers` reads and replaces them).
    servers: Arc<super::servers::Servers>,
    /// The previous CPU readings, so usage is a rate between two requests.
    readings: Arc<Mutex<Readings>>,
    /// The previous readings of `/v1/metrics`, apart, so that a scrape and a user's
    /// `-stats` do not cut each other's intervals short.
    metric_readings: Arc<Mutex<Readings>>,
    machine: stats::Machine,
}

impl std::fmt::Debug for ClientHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientHandle")
            .field("node_id", &self.node_id())
            .finish()
    }
}

impl ClientHandle {
    /// The server RPC addresses this client calls.
    pub fn servers(&self) -> Vec<String> {
        self.servers.addrs()
    }

    /// Replace the server RPC addresses this client calls (Nomad's `SetServers`); each must
    /// be `host:port`. Nothing changes when one is not.
    pub fn set_servers(&self, addrs: Vec<String>) -> Result<(), String> {
        if addrs.is_empty() {
            return Err("missing server address".into());
        }
        for a in &addrs {
            let port = a
                .rsplit_once(':')
                .map(|(host, port)| (host, port.parse::<u16>()));
            if !matches!(port, Some((host, Ok(p))) if !host.is_empty() && p != 0) {
                return Err(format!("invalid server address {a:?}: want host:port"));
            }
        }
        self.servers.replace(addrs);
        Ok(())
    }

    pub(crate) fn new(shared: Arc<Shared>, servers: Arc<super::servers::Servers>) -> ClientHandle {
        ClientHandle {
            shared,
            servers,
            readings: Arc::new(Mutex::new(Readings::default())),
            metric_readings: Arc::new(Mutex::new(Readings::default())),
            machine: stats::Machine::detect(),
        }
    }

    /// This node's ID.
    pub fn node_id(&self) -> String {
        self.shared.state().node_id.clone()
    }

    /// How many allocations this client keeps (running or not).
    pub fn num_allocs(&self) -> usize {
        self.shared.state().allocs.len()
    }

    /// Garbage-collects every finished allocation this client keeps (`/v1/client/gc`): how
    /// many were.
    pub async fn gc_all(&self) -> usize {
        super::gc::collect_all(&self.shared).await
    }

    /// Garbage-collects one finished allocation (`/v1/client/allocation/:id/gc`).
    pub async fn gc_alloc(&self, alloc_id: &str) -> Result<(), AllocOpError> {
        if !self.has_alloc(alloc_id) {
            return Err(AllocOpError::UnknownAlloc(alloc_id.to_string()));
        }
        if super::gc::collect(&self.shared, alloc_id, "requested").await {
            Ok(())
        } else {
            Err(AllocOpError::NotCollectable(alloc_id.to_string()))
        }
    }

    /// The program and arguments of a task's `action` (Nomad's job actions), from the job
    /// the allocation runs.
    pub fn action_command(
        &self,
        alloc_id: &str,
        task: Option<&str>,
        action: &str,
    ) -> Result<Vec<String>, AllocOpError> {
        let st = self.shared.state();
        let local = st
            .allocs
            .get(alloc_id)
            .ok_or_else(|| AllocOpError::UnknownAlloc(alloc_id.to_string()))?;
        let spec = exec_target(local, alloc_id, task)?;
        spec.actions
            .iter()
            .find(|a| a.name == action)
            .map(|a| a.argv())
            .ok_or_else(|| {
                AllocOpError::Invalid(format!("action {action} not found in task {}", spec.name))
            })
    }

    /// Whether this client runs or ran the allocation (and still keeps it).
    pub fn has_alloc(&self, alloc_id: &str) -> bool {
        self.shared.state().allocs.contains_key(alloc_id)
    }

    /// Each task of an allocation this client keeps, with whether it has started (once).
    pub fn alloc_tasks(&self, alloc_id: &str) -> Option<Vec<(String, bool)>> {
        let st = self.shared.state();
        let local = st.allocs.get(alloc_id)?;
        Some(
            local
                .task_states
                .iter()
                .map(|(name, s)| (name.clone(), !s.started_at.is_zero()))
                .collect(),
        )
    }

    /// The job and group of an allocation this client keeps.
    pub fn alloc_job_and_group(&self, alloc_id: &str) -> Option<(String, String)> {
        self.shared
            .state()
            .allocs
            .get(alloc_id)
            .map(|l| (l.alloc.job_id.to_string(), l.alloc.task_group.to_string()))
    }

    /// The namespace of an allocation this client keeps.
    pub fn alloc_namespace(&self, alloc_id: &str) -> Option<String> {
        self.shared
            .state()
            .allocs
            .get(alloc_id)
            .map(|l| l.alloc.namespace.to_string())
    }

    /// What an ACL token's secret may do, asked of the servers (a client holds no state).
    pub async fn resolve_token(
        &self,
        secret_id: &str,
    ) -> Result<crate::rpc::service::acl::AclResolvedToken, crate::rpc::ServiceError> {
        use crate::rpc::Services;
        self.servers
            .acl_resolve_token(crate::rpc::service::acl::AclResolveTokenRequest {
                secret_id: secret_id.to_string(),
            })
            .await
    }

    /// The public keys that verify workload identities, from the servers.
    pub async fn public_keys(
        &self,
    ) -> Result<crate::rpc::service::operator::KeyringPublicKeys, crate::rpc::ServiceError> {
        use crate::rpc::Services;
        self.servers
            .keyring_list_public(crate::rpc::service::operator::KeyringListPublicRequest)
            .await
    }

    /// The tasks a request is for: `task`, else (`None`) every running task of the
    /// allocation; each with where to send it.
    fn targets(
        &self,
        alloc_id: &str,
        task: Option<&str>,
    ) -> Result<Vec<(String, mpsc::Sender<TaskControl>)>, AllocOpError> {
        let (group_tasks, running): (Vec<String>, Vec<String>) = {
            let st = self.shared.state();
            let local = st
                .allocs
                .get(alloc_id)
                .ok_or_else(|| AllocOpError::UnknownAlloc(alloc_id.to_string()))?;
            let group_tasks = local.task_names();
            let running = local
                .task_states
                .iter()
                .filter(|(_, s)| s.state == TaskStateValue::Running)
                .map(|(name, _)| name.clone())
                .collect();
            (group_tasks, running)
        };
        let runners = lock(&self.shared.runners);
        let runner = runners.get(alloc_id);
        let sender = |name: &str| runner.and_then(|r| r.task(name));
        match task {
            Some(name) => {
                if !group_tasks.iter().any(|t| t == name) {
                    return Err(AllocOpError::UnknownTask {
                        task: name.to_string(),
                        alloc_id: alloc_id.to_string(),
                    });
                }
                let tx = sender(name)
                    .filter(|_| running.iter().any(|t| t == name))
                    .ok_or_else(|| TaskOpError::NotRunning(name.to_string()))?;
                Ok(vec![(name.to_string(), tx)])
            }
            None => {
                let all: Vec<_> = running
                    .iter()
                    .filter_map(|name| sender(name).map(|tx| (name.clone(), tx)))
                    .collect();
                if all.is_empty() {
                    return Err(AllocOpError::NothingRunning(alloc_id.to_string()));
                }
                Ok(all)
            }
        }
    }

    /// How long a task may take to answer: its longest possible kill and a margin.
    fn answer_within(&self) -> Duration {
        self.shared.config.max_kill_timeout + ANSWER_MARGIN
    }

    /// Send one request to each target and wait for every answer (the first failure is
    /// returned).
    async fn ask(
        &self,
        targets: Vec<(String, mpsc::Sender<TaskControl>)>,
        make: impl Fn(oneshot::Sender<Result<(), TaskOpError>>) -> TaskControl,
    ) -> Result<(), AllocOpError> {
        let waited = self.answer_within();
        let mut answers = Vec::new();
        for (task, tx) in targets {
            let (reply, answer) = oneshot::channel();
            // A runner that ended meanwhile dropped its queue: the task is not running.
            if tx.send(make(reply)).await.is_err() {
                return Err(TaskOpError::NotRunning(task).into());
            }
            answers.push((task, answer));
        }
        for (task, answer) in answers {
            match tokio::time::timeout(waited, answer).await {
                Err(_) => return Err(AllocOpError::Timeout { task, waited }),
                // Dropped unanswered: the runner ended with the request queued.
                Ok(Err(_)) => return Err(TaskOpError::NotRunning(task).into()),
                Ok(Ok(result)) => result?,
            }
        }
        Ok(())
    }

    /// Restart tasks in place (Nomad's `Allocations.Restart`): `task`, or with `None` every
    /// running task. `all_tasks` restarts every task, as Nomad's `AllTasks`: the completed
    /// ones run again too, and the lifecycle from its beginning (prestart tasks before the
    /// main tasks start again); it may not be combined with a task name.
    pub async fn restart(
        &self,
        alloc_id: &str,
        task: Option<&str>,
        all_tasks: bool,
    ) -> Result<(), AllocOpError> {
        if all_tasks && task.is_some() {
            return Err(AllocOpError::Invalid(
                "task name cannot be set when restarting all tasks".into(),
            ));
        }
        let targets = self.targets(alloc_id, task)?;
        if all_tasks {
            // Something runs (or `targets` said not): the runner readies the rest first.
            let prepared = lock(&self.shared.runners)
                .get(alloc_id)
                .filter(|r| !r.is_cancelled())
                .and_then(|r| r.prepare_restart_all());
            let answer =
                prepared.ok_or_else(|| AllocOpError::NothingRunning(alloc_id.to_string()))?;
            if !matches!(
                tokio::time::timeout(self.answer_within(), answer).await,
                Ok(Ok(()))
            ) {
                return Err(AllocOpError::NothingRunning(alloc_id.to_string()));
            }
        }
        self.ask(targets, |reply| TaskControl::Restart {
            reason: None,
            reply,
        })
        .await
    }

    /// Send `signal` (a name such as `SIGUSR1`) to `task`, or with `None` to every running
    /// task (Nomad's `Allocations.Signal`).
    pub async fn signal(
        &self,
        alloc_id: &str,
        task: Option<&str>,
        signal: &str,
    ) -> Result<(), AllocOpError> {
        let (name, number) = crate::client::signal::parse(signal)
            .ok_or_else(|| AllocOpError::UnknownSignal(signal.to_string()))?;
        let targets = self.targets(alloc_id, task)?;
        self.ask(targets, |reply| TaskControl::Signal {
            name,
            signal: number,
            reply,
        })
        .await
    }

    /// What a replacement on another node takes of a stopped allocation whose disk migrates
    /// (`GET /v1/client/allocation/:id/snapshot`): the allocation's directory and its
    /// tasks, once `token` is seen to be the servers' migrate token for it on this node
    /// ([`crate::util::migrate`]) and every task of it has stopped.
    pub fn snapshot_source(
        &self,
        alloc_id: &str,
        token: &str,
    ) -> Result<(crate::client::allocdir::AllocDir, Vec<String>), AllocOpError> {
        let st = self.shared.state();
        // The token first: without it, not even whether the allocation is here is told.
        if !crate::util::migrate::verify(&st.secret_id, alloc_id, token) {
            return Err(AllocOpError::MigrateToken(alloc_id.to_string()));
        }
        let local = st
            .allocs
            .get(alloc_id)
            .ok_or_else(|| AllocOpError::UnknownAlloc(alloc_id.to_string()))?;
        if !local.finished() {
            return Err(AllocOpError::StillRunning(alloc_id.to_string()));
        }
        let tasks = local.task_names();
        let dir = crate::client::allocdir::AllocDir::new(&self.shared.alloc_root, alloc_id);
        Ok((dir, tasks))
    }

    /// The latest result of each service check of an allocation, by check ID.
    pub fn alloc_checks(
        &self,
        alloc_id: &str,
    ) -> Result<std::collections::BTreeMap<String, crate::client::types::CheckResult>, AllocOpError>
    {
        if !self.shared.state().allocs.contains_key(alloc_id) {
            return Err(AllocOpError::UnknownAlloc(alloc_id.to_string()));
        }
        Ok(crate::client::checks::results_of(&self.shared, alloc_id))
    }

    /// The resource usage of an allocation's tasks (Nomad's `AllocResourceUsage`): a
    /// process task's process group from `/proc`, per process in `Pids`; a docker task's
    /// container from the engine; and their sum.
    pub async fn alloc_stats(&self, alloc_id: &str) -> Result<Value, AllocOpError> {
        let (tasks, handles, all_containers) = {
            let st = self.shared.state();
            let local = st
                .allocs
                .get(alloc_id)
                .ok_or_else(|| AllocOpError::UnknownAlloc(alloc_id.to_string()))?;
            let tasks: Vec<String> = local.task_names();
            let all_containers: std::collections::BTreeSet<String> = st
                .allocs
                .values()
                .flat_map(|l| l.handles.values())
                .filter_map(|h| match h {
                    TaskHandle::Docker { container_id } => Some(container_id.clone()),
                    // A task's cgroup is read as a container's, by its first directory.
                    TaskHandle::Process { cgroup, .. } => {
                        cgroup.first().map(|d| d.display().to_string())
                    }
                    _ => None,
                })
                .collect();
            (tasks, local.handles.clone(), all_containers)
        };
        // The readings of containers gone are dropped; a container read before needs only
        // the engine's current figures, a first one its earlier reading too.
        let read_before = {
            let mut readings = lock(&self.readings);
            readings.retain_containers(&all_containers);
            readings.containers_read()
        };
        // The containers' readings first (the engine's answers), then /proc off the runtime.
        let mut containers = std::collections::BTreeMap::new();
        for (task, handle) in &handles {
            if let TaskHandle::Docker { container_id } = handle {
                let one_shot = read_before.contains(container_id);
                let read = tokio::time::timeout(
                    CONTAINER_STATS_WAIT,
                    crate::client::docker::sample(&self.shared.docker, container_id, one_shot),
                )
                .await;
                match read {
                    Ok(Ok(sample)) => {
                        containers.insert(task.clone(), (container_id.clone(), sample));
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(task, error = %e, "no stats for the container")
                    }
                    Err(_) => tracing::debug!(task, "the engine's stats did not come in time"),
                }
            }
        }
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.usage_of(tasks, &handles, &containers))
            .await
            .map_err(|e| AllocOpError::Invalid(format!("reading the usage failed: {e}")))
    }

    /// The usage JSON of `tasks` from their handles and their containers' readings. Reads
    /// files: call it off the async runtime.
    fn usage_of(
        &self,
        tasks: Vec<String>,
        handles: &std::collections::BTreeMap<String, TaskHandle>,
        containers: &std::collections::BTreeMap<String, (String, stats::ContainerSample)>,
    ) -> Value {
        let now = stats::uptime_seconds().unwrap_or(0.0);
        let stamp = self.shared.clock.now_unix_nanos();
        let mut readings = lock(&self.readings);
        readings.retain_procs(stats::process_alive);
        let mut total = Usage::default();
        let mut by_task = Map::new();
        for task in tasks {
            let mut usage = Usage::default();
            let mut pids = Map::new();
            if let Some(TaskHandle::Process { pid, cgroup, .. }) = handles.get(&task) {
                for (p, stat, swap) in stats::group_processes(*pid) {
                    let u = readings.process(&self.machine, p, &stat, swap, now);
                    pids.insert(p.to_string(), u.to_json());
                    usage = usage.add(&u);
                }
                // With a cgroup, the task's usage is the group's: every process it
                // started, in its process group or not.
                if let Some(group) = crate::client::cgroups::TaskCgroup::from_dirs(cgroup.clone()) {
                    let sample = group.sample(self.machine.ticks_per_second as u64);
                    let key = group.dirs[0].display().to_string();
                    usage = readings
                        .container(&self.machine, &key, &sample, now)
                        .of_task_cgroup(sample.cgroup_v2);
                }
            }
            if let Some((id, sample)) = containers.get(&task) {
                usage = readings.container(&self.machine, id, sample, now);
            }
            total = total.add(&usage);
            by_task.insert(
                task,
                json!({ "ResourceUsage": usage.to_json(), "Timestamp": stamp, "Pids": pids }),
            );
        }
        json!({
            "ResourceUsage": total.to_json(),
            "Tasks": by_task,
            "Timestamp": stamp,
        })
    }

    /// This handle, reading usage against the previous `/v1/metrics` reading rather than the
    /// previous `-stats` request's.
    pub fn for_metrics(&self) -> ClientHandle {
        ClientHandle {
            readings: self.metric_readings.clone(),
            ..self.clone()
        }
    }

    /// What `/v1/metrics` publishes of this client under Nomad's `nomad_client_*` names: the
    /// node's labels and capacity, and each allocation it keeps with its state and what its
    /// tasks were given.
    pub fn figures(&self) -> ClientFigures {
        let value = |k: &str| {
            self.shared
                .node_values
                .get(k)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let reserved = &self.shared.config.reserved;
        let capacity = teamster_storage::model::Resources {
            cpu: value("attr.cpu.totalcompute").saturating_sub(reserved.cpu),
            memory_mb: (value("attr.memory.totalbytes") >> 20).saturating_sub(reserved.memory_mb),
            disk_mb: (value("attr.unique.storage.bytesfree") >> 20)
                .saturating_sub(reserved.disk_mb),
            memory_max_mb: 0,
            cores: 0,
        };
        let label = |k: &str| self.shared.node_values.get(k).cloned().unwrap_or_default();
        let st = self.shared.state();
        let allocs = st
            .allocs
            .iter()
            .map(|(id, local)| {
                let group = local.group();
                let waiting = group
                    .filter(|_| local.client_status == ClientStatus::Pending)
                    .and_then(|g| upstream_of(local, g));
                let phase = match waiting {
                    _ if local.client_status.is_terminal() || local.finished() => {
                        AllocPhase::Terminal
                    }
                    Some(Upstream::Elsewhere(_)) => AllocPhase::Migrating,
                    Some(Upstream::Here(previous))
                        if st.allocs.get(&previous).is_some_and(|p| !p.finished()) =>
                    {
                        AllocPhase::Blocked
                    }
                    _ if local.client_status == ClientStatus::Running => AllocPhase::Running,
                    _ => AllocPhase::Pending,
                };
                let tasks = local
                    .task_names()
                    .into_iter()
                    .map(|task| {
                        let resources = group
                            .and_then(|g| g.tasks.iter().find(|t| t.name == task))
                            .map(|t| t.resources)
                            .unwrap_or(teamster_storage::model::Resources::ZERO);
                        let state = local
                            .task_states
                            .get(&task)
                            .map(|s| s.state)
                            .unwrap_or(TaskStateValue::Pending);
                        TaskFigures {
                            task,
                            state,
                            cpu_mhz: resources.cpu,
                            memory_mb: resources.memory_mb,
                        }
                    })
                    .collect();
                AllocFigures {
                    alloc_id: id.clone(),
                    job: local.alloc.job_id.to_string(),
                    task_group: local.alloc.task_group.to_string(),
                    namespace: local.alloc.namespace.to_string(),
                    phase,
                    resources: local.alloc.resources,
                    tasks,
                }
            })
            .collect();
        ClientFigures {
            node_id: st.node_id.clone(),
            datacenter: label("node.datacenter"),
            node_class: label("node.class"),
            node_pool: label("node.pool"),
            capacity,
            allocs,
        }
    }

    /// The host's usage (Nomad's `HostStats`): per-core CPU since the previous request (else
    /// since boot), memory, the disk partitions and the allocation directory's filesystem,
    /// uptime. Reads files: call it off the async runtime.
    pub fn host_stats(&self) -> Value {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let (total, available, free) = stats::parse_meminfo(&read("/proc/meminfo"));
        let cores = stats::parse_cpu_lines(&read("/proc/stat"));
        let cpu = lock(&self.readings).cores(cores);
        let busy: f64 = cpu.iter().filter_map(|c| c["Total"].as_f64()).sum();
        let mounts = read("/proc/self/mounts");
        let root = &self.shared.alloc_root;
        let alloc_dir = stats::fs_usage(root).map(|u| {
            let (device, point) = stats::mount_of(&mounts, root).unwrap_or_default();
            stats::disk_stats(&device, &point, &u)
        });
        let mut disks: Vec<Value> = stats::partitions(&mounts)
            .into_iter()
            .filter_map(|(device, point)| {
                let u = stats::fs_usage(std::path::Path::new(&point))?;
                Some(stats::disk_stats(&device, &point, &u))
            })
            .collect();
        if disks.is_empty() {
            disks.extend(alloc_dir.clone());
        }
        json!({
            "Memory": {
                "Total": total,
                "Available": available,
                "Used": total.saturating_sub(available),
                "Free": free,
            },
            "CPU": cpu,
            "CPUTicksConsumed": busy / 100.0 * self.machine.mhz_per_core,
            "DiskStats": disks,
            "AllocDirStats": alloc_dir,
            "DeviceStats": [],
            "Uptime": stats::uptime_seconds().unwrap_or(0.0) as u64,
            "Timestamp": self.shared.clock.now_unix_nanos(),
        })
    }

    /// What `alloc exec` runs: `argv` in the place of a running task of the allocation;
    /// `task` may be left out when the group has one. For a docker task, an exec in its
    /// container (with `tty`, a terminal), created here so a refusal of the engine is the
    /// answer. For the others, a host command in the task's directory and environment, as
    /// its runner starts it, in a process group of its own, killed when dropped: with `tty`
    /// it gets a terminal (and a session of its own) for its standard streams; without,
    /// they are the caller's to set.
    pub async fn exec_command(
        &self,
        alloc_id: &str,
        task: Option<&str>,
        argv: &[String],
        tty: bool,
    ) -> Result<ExecProcess, AllocOpError> {
        let Some((program, args)) = argv.split_first() else {
            return Err(AllocOpError::Invalid("command must not be empty".into()));
        };
        let (name, container_id) = {
            let st = self.shared.state();
            let local = st
                .allocs
                .get(alloc_id)
                .ok_or_else(|| AllocOpError::UnknownAlloc(alloc_id.to_string()))?;
            let spec = exec_target(local, alloc_id, task)?;
            let running = local
                .task_states
                .get(&spec.name)
                .is_some_and(|s| s.state == TaskStateValue::Running);
            if !running {
                return Err(TaskOpError::NotRunning(spec.name.clone()).into());
            }
            if spec.driver != "docker" {
                // In the allocation's namespace (bridge mode), never the host's instead.
                let netns =
                    crate::client::network::task_netns(local).map_err(AllocOpError::Invalid)?;
                let (prepared, dir) = self.shared.prepared_task(local, spec);
                let mut cmd = crate::client::driver::exec_command(
                    &prepared,
                    &dir,
                    program,
                    args,
                    local.handles.get(&spec.name),
                    &self.shared.isolation,
                    netns.as_deref(),
                )
                .map_err(|e| AllocOpError::Invalid(e.to_string()))?;
                cmd.kill_on_drop(true);
                let pty = if tty {
                    let master = crate::client::pty::attach(&mut cmd).map_err(|e| {
                        AllocOpError::Invalid(format!("cannot open a terminal: {e}"))
                    })?;
                    Some(master)
                } else {
                    cmd.process_group(0);
                    None
                };
                return Ok(ExecProcess::Host {
                    task: spec.name.clone(),
                    cmd,
                    pty,
                });
            }
            match local.handles.get(&spec.name) {
                Some(TaskHandle::Docker { container_id }) => {
                    (spec.name.clone(), container_id.clone())
                }
                _ => return Err(TaskOpError::NotRunning(spec.name.clone()).into()),
            }
        };
        let exec =
            crate::client::docker::exec::create(&self.shared.docker, &container_id, argv, tty)
                .await
                .map_err(|e| AllocOpError::Exec {
                    task: name.clone(),
                    reason: e.to_string(),
                })?;
        Ok(ExecProcess::Container { task: name, exec })
    }
}

/// The task of an allocation `alloc exec` is for: the one named, else the group's only one.
fn exec_target<'a>(
    local: &'a crate::client::types::LocalAlloc,
    alloc_id: &str,
    task: Option<&str>,
) -> Result<&'a teamster_storage::model::Task, AllocOpError> {
    let tasks: Vec<&teamster_storage::model::Task> = local
        .group()
        .map(|g| g.tasks.iter().collect())
        .unwrap_or_default();
    match (task, tasks.as_slice()) {
        (Some(name), _) => tasks
            .iter()
            .find(|t| t.name == name)
            .copied()
            .ok_or_else(|| AllocOpError::UnknownTask {
                task: name.to_string(),
                alloc_id: alloc_id.to_string(),
            }),
        (None, [one]) => Ok(one),
        (None, many) => {
            let names: Vec<&str> = many.iter().map(|t| t.name.as_str()).collect();
            Err(AllocOpError::Invalid(format!(
                "task is required: the allocation has tasks {}",
                names.join(", ")
            )))
        }
    }
}
