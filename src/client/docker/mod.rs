//! The `docker` task driver: a thin async shell over the Docker engine API (bollard, unix
//! socket only) around the pure [`config`] module.
//!
//! ```text
//!  fingerprint: ping + version ──▶ driver.docker = "1", driver.docker.version (or undetected)
//!  start: parse config ─▶ [load archive] ─▶ inspect image (never pull) ─▶ remove a stale
//!         container of the same name ─▶ create ─▶ start ─▶ log pump (the task's log FIFOs)
//!  wait:  /containers/<id>/wait ─▶ exit code ─▶ drain the log pump ─▶ remove the container
//!  kill:  kill signal (SIGTERM) ─▶ kill_timeout ─▶ SIGKILL ─▶ wait
//!  re-attach: inspect the container of the handle; gone ─▶ exit unknown
//!  client start: remove containers labelled with this node's id whose allocation the
//!                client does not know (orphans)
//! ```
//!
//! teamster never pulls: an image must be on the node already, or be loaded from an archive
//! in the task directory with `load`. A missing image fails the task at once with a driver
//! error naming it.

pub mod config;
pub mod exec;
pub mod pause;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    CreateContainerOptions, ImportImageOptions, KillContainerOptions, ListContainersOptions,
    LogsOptions, RemoveContainerOptions, WaitContainerOptions,
};
use bollard::Docker;
use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tracing::{debug, info, warn};

use crate::client::logmon::LogSinks;
use crate::client::types::ExitResult;
pub use config::{DockerConfig, DockerConfigError};

/// Where the engine listens.
pub const DEFAULT_SOCKET: &str = "/var/run/docker.sock";
/// How long the fingerprint waits for the engine.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// bollard's per-request timeout, seconds (long-lived streams send their headers at once).
const REQUEST_TIMEOUT_SECS: u64 = 120;
/// How long an exited container's remaining logs may take to be written.
const LOG_DRAIN: Duration = Duration::from_secs(5);
/// Pause before asking again when a wait on a running container was cut short.
const WAIT_RETRY: Duration = Duration::from_secs(1);
/// How long image loads may take.
const LOAD_TIMEOUT: Duration = Duration::from_secs(300);

/// Why the docker driver could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    /// An allocation's pause container (bridge mode) did not stay up.
    #[error("pause container: {0}")]
    Pause(String),
    /// The task's config is unusable.
    #[error(transparent)]
    Config(#[from] DockerConfigError),
    /// The engine does not answer on its socket.
    #[error("Failed to connect to docker daemon at {socket}: {reason}")]
    Connect {
        /// The socket.
        socket: String,
        /// Why.
        reason: String,
    },
    /// The image is not on this node (and is never pulled).
    #[error("Failed to find docker image {image:?}: no such image (teamster never pulls)")]
    NoImage {
        /// The image.
        image: String,
    },
    /// `load` could not be read or loaded.
    #[error("Failed to load image archive {path}: {reason}")]
    Load {
        /// The archive.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A task directory could not be prepared.
    #[error("task directory {path}: {reason}")]
    Dir {
        /// The path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The engine refused a call.
    #[error("docker {call} failed: {source}")]
    Engine {
        /// What was asked (`create container`, `start container`, …).
        call: &'static str,
        /// The engine's answer.
        source: bollard::errors::Error,
    },
}

impl DockerError {
    /// Whether starting again may work: everything but a config the driver refuses (an
    /// image missing now may be loaded later, an engine down may come back), as Nomad's
    /// docker driver marks its start errors.
    pub fn recoverable(&self) -> bool {
        !matches!(self, DockerError::Config(_))
    }
}

pub(crate) fn engine(call: &'static str) -> impl FnOnce(bollard::errors::Error) -> DockerError {
    move |source| DockerError::Engine { call, source }
}

pub(crate) fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// A lazily made, shared connection to the engine (version negotiated once).
#[derive(Debug)]
pub struct Connector {
    socket: String,
    docker: tokio::sync::OnceCell<Docker>,
}

impl Default for Connector {
    fn default() -> Self {
        Connector::new(DEFAULT_SOCKET)
    }
}

impl Connector {
    /// A connector to the engine at `socket` (a path, or `unix://path`).
    pub fn new(socket: &str) -> Connector {
        Connector {
            socket: socket.to_string(),
            docker: tokio::sync::OnceCell::new(),
        }
    }

    /// The connection, made on first use; a failure is not remembered.
    pub async fn get(&self) -> Result<Docker, DockerError> {
        let connect_err = |reason: String| DockerError::Connect {
            socket: self.socket.clone(),
            reason,
        };
        self.docker
            .get_or_try_init(|| async {
                let docker = Docker::connect_with_unix(
                    &self.socket,
                    REQUEST_TIMEOUT_SECS,
                    bollard::API_DEFAULT_VERSION,
                )
                .map_err(|e| connect_err(e.to_string()))?;
                // The engine may speak an older API than bollard's default (20.10: 1.41).
                match tokio::time::timeout(PROBE_TIMEOUT, docker.negotiate_version()).await {
                    Ok(Ok(d)) => Ok(d),
                    Ok(Err(e)) => Err(connect_err(e.to_string())),
                    Err(_) => Err(connect_err(format!("no answer within {PROBE_TIMEOUT:?}"))),
                }
            })
            .await
            .cloned()
    }
}

/// What the fingerprint found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// The engine answered.
    Healthy {
        /// Its version (`driver.docker.version`).
        version: String,
    },
    /// It did not; why.
    Unavailable(String),
}

/// Ask the engine for `ping` and `version`, within a few seconds.
pub async fn probe(connector: &Connector) -> Probe {
    let asked = async {
        let docker = connector.get().await?;
        docker.ping().await.map_err(engine("ping"))?;
        let v = docker.version().await.map_err(engine("version"))?;
        Ok::<_, DockerError>(v.version.unwrap_or_default())
    };
    match tokio::time::timeout(PROBE_TIMEOUT, asked).await {
        Ok(Ok(version)) => Probe::Healthy { version },
        Ok(Err(e)) => Probe::Unavailable(e.to_string()),
        Err(_) => Probe::Unavailable(format!(
            "Failed to connect to docker daemon: no answer within {PROBE_TIMEOUT:?}"
        )),
    }
}

/// Where a task runs and what it is part of.
#[derive(Debug, Clone, Copy)]
pub struct TaskPlace<'a> {
    /// The task directory (logs, `local/`, `secrets/`).
    pub task_dir: &'a Path,
    /// The allocation's shared directory.
    pub alloc_dir: &'a Path,
    /// The allocation's id.
    pub alloc_id: &'a str,
    /// The job's name.
    pub job_name: &'a str,
    /// This node's id.
    pub node_id: &'a str,
    /// The group's allocated ports.
    pub ports: &'a [teamster_storage::model::AllocatedPortMapping],
    /// Where its output goes.
    pub logs: &'a LogSinks,
    /// The host volumes it mounts.
    pub mounts: &'a [crate::client::volumes::HostMount],
    /// The network mode of its group's namespace (bridge mode: `container:<pause>`).
    pub group_network: Option<&'a str>,
    /// The file bound read-only at `/etc/resolv.conf` (its group network's `dns` block).
    pub resolv_conf: Option<&'a Path>,
    /// The file bound at `/etc/hosts` (its allocation's namespace's hosts file).
    pub hosts: Option<&'a Path>,
}

/// A container this client runs.
#[derive(Debug)]
pub struct DockerTask {
    docker: Docker,
    /// The container's id.
    pub container_id: String,
    /// The signal that stops it (`SIGTERM` unless the task names one).
    kill_signal: String,
    /// Copies the container's output into the task's log files.
    logs: Option<tokio::task::JoinHandle<()>>,
}

fn make_dir(path: &Path) -> Result<PathBuf, DockerError> {
    std::fs::create_dir_all(path)
        .and_then(|()| std::fs::canonicalize(path))
        .map_err(|e| DockerError::Dir {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
}

/// Start `task` as a container.
pub async fn start(
    connector: &Connector,
    task: &teamster_storage::model::Task,
    place: TaskPlace<'_>,
) -> Result<DockerTask, DockerError> {
    let cfg = config::parse(&task.config)?;
    // Bind mounts need absolute host paths that exist.
    let task_dir = make_dir(place.task_dir)?;
    let alloc_dir = make_dir(place.alloc_dir)?;
    let local = make_dir(&task_dir.join(crate::client::allocdir::LOCAL_DIR))?;
    let secrets = make_dir(&task_dir.join(crate::client::allocdir::SECRETS_DIR))?;
    for v in &cfg.volumes {
        make_dir(&task_dir.join(&v.source))?;
    }
    let facts = config::ContainerFacts {
        task_name: &task.name,
        alloc_id: place.alloc_id,
        job_name: place.job_name,
        node_id: place.node_id,
        env: &task.env,
        ports: place.ports,
        dirs: config::MountDirs {
            alloc: &alloc_dir,
            task: &task_dir,
            local: &local,
            secrets: &secrets,
        },
        cpu_mhz: task.resources.cpu,
        memory_mb: task.resources.memory_mb,
        memory_max_mb: task.resources.memory_max_mb,
        user: &task.user,
        mounts: place.mounts,
        group_network: place.group_network,
        resolv_conf: place.resolv_conf,
        hosts: place.hosts,
    };
    let body = config::container_spec(&cfg, &facts)?;
    let docker = connector.get().await?;
    if let Some(archive) = &cfg.load {
        load_image(&docker, &task_dir.join(archive)).await?;
    }
    match docker.inspect_image(&cfg.image).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {
            return Err(DockerError::NoImage {
                image: cfg.image.clone(),
            })
        }
        Err(e) => return Err(engine("inspect image")(e)),
    }
    let name = config::container_name(&task.name, place.alloc_id);
    let id = create(&docker, &name, body).await?;
    if let Err(e) = docker.start_container(&id, None).await {
        let _ = remove(&docker, &id).await;
        return Err(engine("start container")(e));
    }
    info!(container_id = %id, container = %name, image = %cfg.image, "container started");
    let logs = spawn_log_pump(docker.clone(), id.clone(), place.logs, 0);
    Ok(DockerTask {
        docker,
        container_id: id,
        kill_signal: kill_signal(task),
        logs: Some(logs),
    })
}

/// The signal that stops `task`'s container (`SIGTERM` unless the task names one).
pub fn kill_signal(task: &teamster_storage::model::Task) -> String {
    if task.kill_signal.is_empty() {
        "SIGTERM".into()
    } else {
        task.kill_signal.clone()
    }
}

/// Create the container `name`, replacing a stopped or stale one of that name (left by a
/// client that crashed between create and recording the handle, or by a restart).
async fn create(
    docker: &Docker,
    name: &str,
    body: ContainerCreateBody,
) -> Result<String, DockerError> {
    let options = || {
        Some(CreateContainerOptions {
            name: Some(name.to_string()),
            ..CreateContainerOptions::default()
        })
    };
    match docker.create_container(options(), body.clone()).await {
        Ok(r) => Ok(r.id),
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409, ..
        }) => {
            warn!(container = %name, "a container of this name exists; replacing it");
            remove(docker, name).await?;
            let r = docker
                .create_container(options(), body)
                .await
                .map_err(engine("create container"))?;
            Ok(r.id)
        }
        Err(e) => Err(engine("create container")(e)),
    }
}

pub(crate) async fn remove(docker: &Docker, id: &str) -> Result<(), DockerError> {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..RemoveContainerOptions::default()
    };
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        // Already being removed by an earlier call.
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 409, ..
        }) => Ok(()),
        Err(e) => Err(engine("remove container")(e)),
    }
}

async fn load_image(docker: &Docker, archive: &Path) -> Result<(), DockerError> {
    let load_err = |reason: String| DockerError::Load {
        path: archive.to_path_buf(),
        reason,
    };
    let bytes = tokio::fs::read(archive)
        .await
        .map_err(|e| load_err(e.to_string()))?;
    import_archive(docker, bytes).await.map_err(load_err)?;
    info!(archive = %archive.display(), "image archive loaded");
    Ok(())
}

/// Loads a `docker save` archive into the engine, within [`LOAD_TIMEOUT`].
pub(crate) async fn import_archive(docker: &Docker, archive: Vec<u8>) -> Result<(), String> {
    let mut answers = docker.import_image(
        ImportImageOptions {
            quiet: true,
            ..ImportImageOptions::default()
        },
        bollard::body_full(archive.into()),
        None,
    );
    let loading = async {
        while let Some(answer) = answers.next().await {
            answer.map_err(|e| e.to_string())?;
        }
        Ok::<(), String>(())
    };
    tokio::time::timeout(LOAD_TIMEOUT, loading)
        .await
        .map_err(|_| format!("not loaded within {LOAD_TIMEOUT:?}"))?
}

/// Follow the container's output into the task's log sinks, from `since` (Unix seconds;
/// 0: from its start).
fn spawn_log_pump(
    docker: Docker,
    id: String,
    logs: &LogSinks,
    since: i32,
) -> tokio::task::JoinHandle<()> {
    let logs = logs.clone();
    tokio::spawn(async move {
        let open = |stream: &str| {
            logs.open(stream)
                .map(tokio::fs::File::from_std)
                .map_err(|e| warn!(error = %e, "cannot open the task's log sink"))
        };
        let (Ok(mut out), Ok(mut err)) = (open("stdout"), open("stderr")) else {
            return;
        };
        let mut stream = docker.logs(
            &id,
            Some(LogsOptions {
                follow: true,
                stdout: true,
                stderr: true,
                since,
                ..LogsOptions::default()
            }),
        );
        while let Some(item) = stream.next().await {
            let written = match item {
                Ok(bollard::container::LogOutput::StdErr { message }) => {
                    err.write_all(&message).await
                }
                Ok(
                    bollard::container::LogOutput::StdOut { message }
                    | bollard::container::LogOutput::Console { message },
                ) => out.write_all(&message).await,
                Ok(bollard::container::LogOutput::StdIn { .. }) => Ok(()),
                Err(e) => {
                    debug!(container_id = %id, error = %e, "log stream ended");
                    break;
                }
            };
            if let Err(e) = written {
                warn!(container_id = %id, error = %e, "cannot write the task's logs");
                break;
            }
        }
        let _ = out.flush().await;
        let _ = err.flush().await;
    })
}

/// The engine, for finding `container` again after a client restart (`None`, logged, when
/// it cannot be reached).
async fn engine_after_restart(connector: &Connector, container: &str) -> Option<Docker> {
    match connector.get().await {
        Ok(d) => Some(d),
        Err(e) => {
            warn!(container, error = %e, "cannot reach docker to find a task again");
            None
        }
    }
}

/// What [`find_launched`] found of a launch.
#[derive(Debug)]
pub enum LaunchLookup {
    /// The container is there (running or ended).
    Found(DockerTask),
    /// There is none, or it was created but never started: the launch did not happen
    /// (launching again replaces it).
    Absent,
    /// The engine could not say (unreachable, or an error other than "no such container").
    Unknown(String),
}

/// Find the container a launch of an earlier run of this client may have started, by its
/// name.
pub async fn find_launched(
    connector: &Connector,
    name: &str,
    logs: &LogSinks,
    kill_signal: String,
    now_unix_secs: i64,
) -> LaunchLookup {
    let docker = match connector.get().await {
        Ok(d) => d,
        Err(e) => return LaunchLookup::Unknown(e.to_string()),
    };
    let c = match docker.inspect_container(name, None).await {
        Ok(c) => c,
        Err(e) if is_not_found(&e) => return LaunchLookup::Absent,
        Err(e) => return LaunchLookup::Unknown(e.to_string()),
    };
    let status = c.state.as_ref().and_then(|s| s.status);
    if status == Some(bollard::models::ContainerStateStatusEnum::CREATED) {
        return LaunchLookup::Absent;
    }
    let Some(id) = c.id.as_deref() else {
        return LaunchLookup::Unknown("the engine gave the container no id".into());
    };
    match reattach(connector, id, logs, kill_signal, now_unix_secs).await {
        Some(task) => LaunchLookup::Found(task),
        // Removed between the two calls: it ran and is gone.
        None => LaunchLookup::Unknown("the container went away while being found".into()),
    }
}

/// Find the container of a handle again after a client restart: `None` when it is gone.
/// An exited container is returned too: its exit code is then read from the engine.
pub async fn reattach(
    connector: &Connector,
    container_id: &str,
    logs: &LogSinks,
    kill_signal: String,
    now_unix_secs: i64,
) -> Option<DockerTask> {
    let docker = engine_after_restart(connector, container_id).await?;
    match docker.inspect_container(container_id, None).await {
        Ok(c) => {
            let running = c.state.as_ref().and_then(|s| s.running).unwrap_or(false);
            // Output written while the client was away is not copied (the engine keeps
            // it: `docker logs`); from now on it is.
            let logs = running.then(|| {
                spawn_log_pump(
                    docker.clone(),
                    container_id.to_string(),
                    logs,
                    now_unix_secs.clamp(0, i32::MAX as i64) as i32,
                )
            });
            Some(DockerTask {
                docker,
                container_id: container_id.to_string(),
                kill_signal,
                logs,
            })
        }
        Err(e) => {
            if !is_not_found(&e) {
                warn!(container_id, error = %e, "cannot inspect the container to re-attach");
            }
            None
        }
    }
}

impl DockerTask {
    /// Wait for the container to exit, copy the rest of its output, remove it.
    pub async fn wait(&mut self) -> ExitResult {
        let ended = |exit_code: i64| ExitResult {
            exit_code,
            signal: 0,
            unknown: false,
            oom_killed: false,
        };
        let exit = loop {
            let mut waits = self.docker.wait_container(
                &self.container_id,
                Some(WaitContainerOptions {
                    condition: "not-running".into(),
                }),
            );
            let answer = waits.next().await;
            drop(waits);
            match answer {
                Some(Ok(r)) => break ended(r.status_code),
                Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => {
                    break ended(code)
                }
                other => {
                    warn!(container_id = %self.container_id, answer = ?other, "cannot wait for the container");
                    // Its state tells whether it ended, and how; a wait cut short (engine
                    // busy, connection dropped) is asked again rather than taken as an exit.
                    match self
                        .docker
                        .inspect_container(&self.container_id, None)
                        .await
                    {
                        Ok(c) => {
                            let state = c.state.unwrap_or_default();
                            if state.running == Some(true) {
                                tokio::time::sleep(WAIT_RETRY).await;
                                continue;
                            }
                            break ended(state.exit_code.unwrap_or(0));
                        }
                        Err(_) => {
                            break ExitResult {
                                exit_code: 0,
                                signal: 0,
                                unknown: true,
                                oom_killed: false,
                            }
                        }
                    }
                }
            }
        };
        if let Some(logs) = self.logs.take() {
            if tokio::time::timeout(LOG_DRAIN, logs).await.is_err() {
                debug!(container_id = %self.container_id, "log pump still running after the exit");
            }
        }
        if let Err(e) = remove(&self.docker, &self.container_id).await {
            warn!(container_id = %self.container_id, error = %e, "cannot remove the container");
        }
        debug!(container_id = %self.container_id, exit_code = exit.exit_code, "container exited");
        exit
    }

    /// Send `signal` (a number) to the container's main process (`alloc signal`).
    pub async fn signal(&self, signal: i32) -> std::io::Result<()> {
        self.send(&signal.to_string())
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))
    }

    async fn send(&self, signal: &str) -> Result<(), bollard::errors::Error> {
        self.docker
            .kill_container(
                &self.container_id,
                Some(KillContainerOptions {
                    signal: signal.to_string(),
                }),
            )
            .await
    }

    /// Stop the container: its kill signal, then SIGKILL after `kill_timeout`; then wait
    /// for it (and remove it).
    pub async fn kill(&mut self, kill_timeout: Duration) -> ExitResult {
        if let Err(e) = self.send(&self.kill_signal).await {
            // 409: not running any more; the wait below reads how it ended.
            debug!(container_id = %self.container_id, error = %e, "kill signal not delivered");
        }
        let docker = self.docker.clone();
        let id = self.container_id.clone();
        let mut waits = docker.wait_container(&id, None);
        if tokio::time::timeout(kill_timeout, waits.next())
            .await
            .is_err()
        {
            debug!(container_id = %id, "still running after the kill timeout; SIGKILL");
            if let Err(e) = self.send("SIGKILL").await {
                debug!(container_id = %id, error = %e, "SIGKILL not delivered");
            }
        }
        drop(waits);
        self.wait().await
    }
}

/// One reading of a container's CPU and memory from the engine (`GET
/// /containers/<id>/stats?stream=false`). With `one_shot` the engine answers at once;
/// without, it takes a second reading a moment after the first and sends both, so a first
/// answer can carry a CPU rate.
pub async fn sample(
    connector: &Connector,
    container_id: &str,
    one_shot: bool,
) -> Result<crate::client::stats::ContainerSample, DockerError> {
    let docker = connector.get().await?;
    let options = bollard::query_parameters::StatsOptions {
        stream: false,
        one_shot,
    };
    let mut answers = docker.stats(container_id, Some(options));
    let stats = match answers.next().await {
        Some(Ok(s)) => s,
        Some(Err(e)) => return Err(engine("container stats")(e)),
        None => {
            return Err(engine("container stats")(bollard::errors::Error::IOError {
                err: std::io::Error::other("the engine sent no stats"),
            }))
        }
    };
    Ok(container_sample(&stats))
}

/// The figures of an engine's stats answer teamster reports.
fn container_sample(
    stats: &bollard::models::ContainerStatsResponse,
) -> crate::client::stats::ContainerSample {
    let cpu_times = |c: &Option<bollard::models::ContainerCpuStats>| {
        let u = c
            .as_ref()
            .and_then(|c| c.cpu_usage.clone())
            .unwrap_or_default();
        (
            u.total_usage.unwrap_or(0),
            u.usage_in_usermode.unwrap_or(0),
            u.usage_in_kernelmode.unwrap_or(0),
        )
    };
    let when = |d: &Option<String>| {
        d.as_deref()
            .and_then(|d| humantime::parse_rfc3339_weak(d).ok())
    };
    // The engine's earlier reading, when it took one (a zero time when it did not).
    let earlier = match (when(&stats.preread), when(&stats.read)) {
        (Some(pre), Some(read)) if pre > std::time::UNIX_EPOCH => {
            let ago = read.duration_since(pre).map_or(0.0, |d| d.as_secs_f64());
            let (total, user, system) = cpu_times(&stats.precpu_stats);
            (ago > 0.0 && total > 0).then_some((total, user, system, ago))
        }
        _ => None,
    };
    let cpu = stats.cpu_stats.clone().unwrap_or_default();
    let usage = cpu.cpu_usage.unwrap_or_default();
    let throttling = cpu.throttling_data.unwrap_or_default();
    let memory = stats.memory_stats.clone().unwrap_or_default();
    let figures = memory.stats.unwrap_or_default();
    let figure = |k: &str| figures.get(k).copied().unwrap_or(0);
    // cgroup v2 reports anonymous and file memory; v1 rss and cache.
    let cgroup_v2 = figures.contains_key("anon");
    crate::client::stats::ContainerSample {
        cpu_total_ns: usage.total_usage.unwrap_or(0),
        cpu_user_ns: usage.usage_in_usermode.unwrap_or(0),
        cpu_system_ns: usage.usage_in_kernelmode.unwrap_or(0),
        throttled_periods: throttling.throttled_periods.unwrap_or(0),
        throttled_time_ns: throttling.throttled_time.unwrap_or(0),
        memory_usage: memory.usage.unwrap_or(0),
        memory_max_usage: memory.max_usage.unwrap_or(0),
        rss: figure(if cgroup_v2 { "anon" } else { "rss" }),
        cache: figure(if cgroup_v2 { "file" } else { "cache" }),
        swap: if cgroup_v2 { 0 } else { figure("swap") },
        cgroup_v2,
        earlier,
    }
}

/// Remove the containers of this node (by its id label) whose allocation is not in
/// `known`: left by allocations the client forgot (its state lost, or removed while it was
/// down). Returns how many were removed.
pub async fn remove_orphans(
    connector: &Connector,
    node_id: &str,
    known: &BTreeSet<String>,
) -> Result<usize, DockerError> {
    let docker = connector.get().await?;
    let filters = HashMap::from([(
        "label".to_string(),
        vec![format!("{}={node_id}", config::LABEL_NODE_ID)],
    )]);
    let containers = docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..ListContainersOptions::default()
        }))
        .await
        .map_err(engine("list containers"))?;
    let mut removed = 0;
    for c in containers {
        let (Some(id), Some(labels)) = (c.id, c.labels) else {
            continue;
        };
        let Some(alloc_id) = labels.get(config::LABEL_ALLOC_ID) else {
            continue;
        };
        if known.contains(alloc_id) {
            continue;
        }
        info!(container_id = %id, alloc_id = %alloc_id, "removing an orphaned container");
        remove(&docker, &id).await?;
        removed += 1;
    }
    Ok(removed)
}
