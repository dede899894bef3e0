//! Task drivers: `raw_exec` (a child process), `mock` (a timer, for tests and for
//! simulating many nodes in one process) and `docker` (a container, in
//! [`docker`](crate::client::docker)).
//!
//! - `raw_exec` runs `Config.command` with `Config.args` and the task's `Env` in the task
//!   directory, in its own process group, with stdout and stderr appended to
//!   `stdout.log` / `stderr.log` there. Stopping sends SIGTERM to the group, then SIGKILL
//!   after the kill timeout; `alloc signal` sends its signal to the group. The process id and its kernel start time are kept in a
//!   [`TaskHandle`], so a restarted client re-attaches to a task that is still running
//!   (its exit code is then unknown: the task was another process's child).
//! - `exec` runs `Config.command` isolated ([`crate::client::sandbox`]): its own mount,
//!   PID, IPC and UTS namespaces, a root of read-only binds of the client's `chroot_env`
//!   with the task's directories, the account `user` (default `nobody`) and a bounded set
//!   of capabilities. Its handle is its supervisor's pid.
//! - Every `raw_exec` and `exec` task runs in a cgroup of its own
//!   ([`crate::client::cgroups`]; `exec`: with its CPU and memory limits) when the client
//!   can make one: stopping it kills every process in the group, and its usage is read
//!   from the group. An `exec` task killed by the OOM killer exits `oom_killed`.
//! - `mock` runs for `Config.run_for` (`"5s"` or nanoseconds) and exits with
//!   `Config.exit_code`; its handle holds its start time, so it re-attaches too.
//! - `docker` runs a container of an image already on the node; its handle is the container
//!   id. [`launch`] and [`find_again`] reach every driver; [`start`] and [`reattach`] the two
//!   that need no engine.
//!
//! A launch is recorded before it happens ([`TaskHandle::Launching`], with a fresh launch
//! id), so a client killed between starting a task and recording its handle can tell, once
//! restarted, whether the task started ([`find_launch`]): a `raw_exec` process writes the
//! launch id and its pid to `.teamster-launch` in its task directory before it `exec`s and
//! carries the id in `TEAMSTER_LAUNCH_ID`; a container has a name of its allocation and
//! task; a mock task started when its launch was recorded.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use teamster_storage::model::{ConfigValue, Task, CPU_CORES_ENV};

use crate::client::cgroups::{Hierarchy, Limits, TaskCgroup};
use crate::client::config::{ClientConfig, ExecConfig};
use crate::client::docker::LaunchLookup;
use crate::client::logmon::LogSinks;
use crate::client::sandbox::{BoundFile, ExecTaskConfig, SandboxError, SandboxSpec};
use crate::client::types::{ExitResult, TaskHandle};

/// Why a driver could not start a task.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The driver is not one this client offers.
    #[error("driver {0:?} is not available on this node")]
    Unknown(String),
    /// The task's `Config` is unusable.
    #[error("invalid task config: {0}")]
    BadConfig(String),
    /// The task directory or log files could not be prepared.
    #[error("task directory {path}: {source}")]
    Dir {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The process could not be spawned.
    #[error("failed to start {command:?}: {source}")]
    Spawn {
        /// The command.
        command: String,
        /// Why.
        source: std::io::Error,
    },
    /// The task's output could not be connected to its log collector.
    #[error("task logs: {0}")]
    Logs(#[from] crate::client::logmon::LogmonError),
    /// The docker driver could not start the container.
    #[error(transparent)]
    Docker(#[from] crate::client::docker::DockerError),
    /// The task's `user` is not an account of this host.
    #[error(transparent)]
    User(#[from] crate::client::users::UserError),
    /// The `exec` driver cannot isolate the task as asked.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The task's cgroup could not be made.
    #[error(transparent)]
    Cgroup(#[from] crate::client::cgroups::CgroupError),
}

impl DriverError {
    /// Whether trying again may work, so the failure counts as one attempt of the restart
    /// policy (Nomad's recoverable start errors: the container engine's failures, an image
    /// not there yet, a directory that could not be made). A config the driver refuses, a
    /// driver this node lacks and a command that cannot be executed fail the task at once
    /// (Nomad's executor errors are unrecoverable).
    pub fn recoverable(&self) -> bool {
        match self {
            DriverError::Unknown(_)
            | DriverError::BadConfig(_)
            | DriverError::Spawn { .. }
            | DriverError::User(_)
            | DriverError::Sandbox(_) => false,
            DriverError::Dir { .. } | DriverError::Logs(_) | DriverError::Cgroup(_) => true,
            DriverError::Docker(e) => e.recoverable(),
        }
    }
}

/// The file in a task directory where a `raw_exec` process records its launch id and pid
/// before it `exec`s.
pub const LAUNCH_MARKER: &str = ".teamster-launch";
/// The environment variable carrying a `raw_exec` process's launch id.
pub const LAUNCH_ENV: &str = "TEAMSTER_LAUNCH_ID";

/// What became of a launch that an earlier run of this client recorded but did not see
/// through ([`TaskHandle::Launching`]).
#[derive(Debug)]
pub enum Launched {
    /// The task never started: launch it now.
    NotStarted,
    /// It started and is there still: re-attached.
    Found(Box<RunningTask>),
    /// It started and ended while the client was away; its exit status is unknown.
    Ended,
    /// The container engine could not say whether it started (why): ask again.
    EngineUnknown(String),
}

/// A task a driver is running.
#[derive(Debug)]
pub enum RunningTask {
    /// A child of this client.
    Child {
        /// The child.
        child: tokio::process::Child,
        /// Its pid.
        pid: i32,
        /// Its start time.
        start_ticks: u64,
        /// Its cgroup.
        cgroup: Option<TaskCgroup>,
    },
    /// A process started by an earlier run of this client.
    Reattached {
        /// Its pid.
        pid: i32,
        /// Its start time.
        start_ticks: u64,
        /// Its cgroup.
        cgroup: Option<TaskCgroup>,
    },
    /// A mock task ending at `deadline`.
    Mock {
        /// When it ends.
        deadline: tokio::time::Instant,
        /// Its handle.
        handle: TaskHandle,
        /// Its exit code.
        exit_code: i64,
    },
    /// A container.
    Docker(crate::client::docker::DockerTask),
}

/// The drivers a client knows.
pub const DRIVERS: &[&str] = &["raw_exec", "exec", "mock", "docker"];

/// What the client found, at start, that it can isolate tasks with.
#[derive(Debug, Clone, Default)]
pub struct Isolation {
    /// The hierarchy tasks' cgroups are made in (`None`: no usable one).
    pub cgroups: Option<Hierarchy>,
    /// Why the `exec` driver cannot run here, if it cannot.
    pub exec_problem: Option<String>,
    /// The host directory each `exec` task's root is mounted on, inside the task's own
    /// mount namespace (so one serves them all): `<data_dir>/exec-root`.
    pub stage: PathBuf,
    /// `client.chroot_env`.
    pub chroot_env: BTreeMap<String, String>,
    /// `client.exec`.
    pub exec: ExecConfig,
}

impl Isolation {
    /// Find the cgroup hierarchy and whether `exec` can run (root, namespaces, cgroups),
    /// and make its stage directory under `data_dir`.
    pub fn detect(config: &ClientConfig, data_dir: &Path) -> Isolation {
        let cgroups = Hierarchy::detect();
        let stage = data_dir.join("exec-root");
        let exec_problem = crate::client::sandbox::host_problem()
            .or_else(|| cgroups.as_ref().err().map(|e| e.to_string()))
            .or_else(|| {
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(&stage)
                    .err()
                    .map(|e| format!("{}: {e}", stage.display()))
            });
        Isolation {
            cgroups: cgroups.ok(),
            exec_problem,
            stage,
            chroot_env: config.chroot_env.clone(),
            exec: config.exec.clone(),
        }
    }
}

/// Start `task` in `dir` (created if missing). `now_unix_nanos` stamps mock handles;
/// `launch_id`, when given, is recorded by the process for [`find_launch`].
pub fn start(
    task: &Task,
    dir: &Path,
    enabled: &[String],
    logs: &LogSinks,
    now_unix_nanos: i64,
    launch_id: Option<&str>,
) -> Result<RunningTask, DriverError> {
    if !enabled.contains(&task.driver) {
        return Err(DriverError::Unknown(task.driver.clone()));
    }
    std::fs::create_dir_all(dir).map_err(|source| DriverError::Dir {
        path: dir.to_path_buf(),
        source,
    })?;
    match task.driver.as_str() {
        "raw_exec" => start_process(task, dir, logs, launch_id, None, None),
        "docker" | "exec" => Err(DriverError::BadConfig(format!(
            "{} tasks are started with driver::launch",
            task.driver
        ))),
        "mock" => {
            let (run_for, exit_code) = mock_config(&task.config)?;
            let handle = TaskHandle::Mock {
                started_at: now_unix_nanos,
                run_for: run_for.as_nanos() as u64,
                exit_code,
            };
            Ok(RunningTask::Mock {
                deadline: tokio::time::Instant::now() + run_for,
                handle,
                exit_code,
            })
        }
        other => Err(DriverError::Unknown(other.to_string())),
    }
}

/// What a driver needs besides the task and its directory: which drivers this client
/// offers, the engine connection, and the allocation the task belongs to.
#[derive(Debug, Clone, Copy)]
pub struct LaunchContext<'a> {
    /// The drivers this client offers (`client.drivers`).
    pub enabled: &'a [String],
    /// The docker engine.
    pub docker: &'a crate::client::docker::Connector,
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
    /// The id of this launch, as recorded before it ([`TaskHandle::Launching`]).
    pub launch_id: &'a str,
    /// Where the task's output goes.
    pub logs: &'a LogSinks,
    /// The host volumes it mounts (a container binds them).
    pub mounts: &'a [crate::client::volumes::HostMount],
    /// How this client isolates tasks.
    pub isolation: &'a Isolation,
    /// The allocation's network namespace (bridge mode): the task joins it.
    pub netns: Option<&'a Path>,
    /// Its network's `/etc/resolv.conf`, `/etc/hosts` and hostname (`exec`, `docker`).
    pub net_files: &'a crate::client::network::files::NetworkFiles,
}

/// Start `task` in `dir` with whichever driver it names.
pub async fn launch(
    task: &Task,
    dir: &Path,
    ctx: LaunchContext<'_>,
    now_unix_nanos: i64,
) -> Result<RunningTask, DriverError> {
    if !ctx.enabled.contains(&task.driver) {
        return Err(DriverError::Unknown(task.driver.clone()));
    }
    match task.driver.as_str() {
        "exec" => return start_exec(task, dir, &ctx),
        "raw_exec" => {
            let cgroup = ctx
                .isolation
                .cgroups
                .as_ref()
                .map(|h| h.task_group(ctx.alloc_id, &task.name))
                .and_then(|group| {
                    // CPU shares only: raw_exec runs unconfined, as before it had a group.
                    let limits = Limits::of(task.resources.cpu, 0, 0, None);
                    match group.create(&limits) {
                        Ok(()) => Some(group),
                        Err(e) => {
                            tracing::warn!(error = %e, "raw_exec task runs without a cgroup");
                            None
                        }
                    }
                });
            let started = start_process(
                task,
                dir,
                ctx.logs,
                Some(ctx.launch_id),
                cgroup.clone(),
                ctx.netns,
            );
            if let (Err(_), Some(group)) = (&started, &cgroup) {
                let _ = group.destroy();
            }
            return started;
        }
        "docker" => {}
        _ => {
            return start(
                task,
                dir,
                ctx.enabled,
                ctx.logs,
                now_unix_nanos,
                Some(ctx.launch_id),
            )
        }
    }
    let group_network = ctx
        .netns
        .map(|_| crate::client::docker::pause::network_mode(ctx.alloc_id));
    let place = crate::client::docker::TaskPlace {
        task_dir: dir,
        alloc_dir: ctx.alloc_dir,
        alloc_id: ctx.alloc_id,
        job_name: ctx.job_name,
        node_id: ctx.node_id,
        ports: ctx.ports,
        logs: ctx.logs,
        mounts: ctx.mounts,
        // In bridge mode the container joins the allocation's pause container.
        group_network: group_network.as_deref(),
        resolv_conf: ctx.net_files.resolv_conf.as_deref(),
        hosts: ctx.net_files.hosts.as_deref(),
    };
    let started = crate::client::docker::start(ctx.docker, task, place).await?;
    Ok(RunningTask::Docker(started))
}

/// Find a task again after a client restart, whichever its driver: `None` when it is no
/// longer there.
pub async fn find_again(
    handle: &TaskHandle,
    task: &Task,
    logs: &LogSinks,
    docker: &crate::client::docker::Connector,
    now_unix_nanos: i64,
) -> Option<RunningTask> {
    match handle {
        TaskHandle::Docker { container_id } => {
            let kill_signal = crate::client::docker::kill_signal(task);
            crate::client::docker::reattach(
                docker,
                container_id,
                logs,
                kill_signal,
                now_unix_nanos / 1_000_000_000,
            )
            .await
            .map(RunningTask::Docker)
        }
        other => reattach(other, now_unix_nanos),
    }
}

/// Whether the launch `(launch_id, at)` (its id, and when it began) of an earlier run of
/// this client started `task` (in `dir`, of allocation `alloc_id`), and if so where it is
/// now.
pub async fn find_launch(
    (launch_id, at): (&str, i64),
    task: &Task,
    dir: &Path,
    logs: &LogSinks,
    alloc_id: &str,
    docker: &crate::client::docker::Connector,
    now_unix_nanos: i64,
) -> Launched {
    match task.driver.as_str() {
        "raw_exec" | "exec" => find_process_launch(launch_id, dir, alloc_id, task),
        "docker" => {
            let name = crate::client::docker::config::container_name(&task.name, alloc_id);
            let kill_signal = crate::client::docker::kill_signal(task);
            let lookup = crate::client::docker::find_launched(
                docker,
                &name,
                logs,
                kill_signal,
                now_unix_nanos / 1_000_000_000,
            )
            .await;
            match lookup {
                LaunchLookup::Found(found) => Launched::Found(Box::new(RunningTask::Docker(found))),
                LaunchLookup::Absent => Launched::NotStarted,
                LaunchLookup::Unknown(why) => Launched::EngineUnknown(why),
            }
        }
        "mock" => {
            // A timer: it started when its launch was recorded.
            let Ok((run_for, exit_code)) = mock_config(&task.config) else {
                return Launched::NotStarted;
            };
            let handle = TaskHandle::Mock {
                started_at: at,
                run_for: run_for.as_nanos() as u64,
                exit_code,
            };
            match reattach(&handle, now_unix_nanos) {
                Some(running) => Launched::Found(Box::new(running)),
                None => Launched::Ended,
            }
        }
        _ => Launched::NotStarted,
    }
}

/// The marker a `raw_exec` launch left: its launch id and pid.
fn read_marker(dir: &Path) -> Option<(String, i32)> {
    let text = std::fs::read_to_string(dir.join(LAUNCH_MARKER)).ok()?;
    let (id, pid) = text.trim().split_once(' ')?;
    Some((id.to_string(), pid.parse().ok()?))
}

/// Whether process `pid` carries `launch_id` in its environment.
fn carries_launch(pid: i32, launch_id: &str) -> bool {
    let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    let wanted = format!("{LAUNCH_ENV}={launch_id}");
    environ.split(|b| *b == 0).any(|v| v == wanted.as_bytes())
}

fn find_process_launch(launch_id: &str, dir: &Path, alloc_id: &str, task: &Task) -> Launched {
    let Some((id, pid)) = read_marker(dir) else {
        return Launched::NotStarted;
    };
    if id != launch_id {
        // The marker of an earlier launch: this one never reached its process.
        return Launched::NotStarted;
    }
    // Its group, if the client made one (named after the allocation and the task).
    let group = Hierarchy::detect()
        .ok()
        .map(|h| h.task_group(alloc_id, &task.name))
        .filter(|g| g.dirs.iter().all(|d| d.exists()));
    let ended = || {
        if let Some(group) = &group {
            let _ = group.destroy();
        }
        Launched::Ended
    };
    let Some(start_ticks) = crate::util::procfs::start_ticks(pid) else {
        return ended();
    };
    // The process at that pid is the task if it carries the launch id (a task that rewrites
    // its environment area, as `setproctitle` does, or runs under `env -i`, may not), or
    // if it started no later than the marker was written: the task forked before it wrote
    // the marker, while another process reusing the pid started after the task ended.
    // The boot time is in whole seconds, hence a second of slack.
    let started_before_marker = || {
        let marker_written = std::fs::metadata(dir.join(LAUNCH_MARKER))
            .and_then(|m| m.modified())
            .ok()?;
        let started = proc_start_time(start_ticks)?;
        Some(started <= marker_written + Duration::from_secs(1))
    };
    if carries_launch(pid, launch_id) || started_before_marker().unwrap_or(true) {
        Launched::Found(Box::new(RunningTask::Reattached {
            pid,
            start_ticks,
            cgroup: group,
        }))
    } else {
        ended()
    }
}

/// The wall-clock time a process started, from its start in clock ticks since boot and the
/// boot time in `/proc/stat` (whole seconds).
fn proc_start_time(start_ticks: u64) -> Option<std::time::SystemTime> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let btime: u64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf has no memory effects.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks_per_second <= 0 {
        return None;
    }
    let since_boot = Duration::from_secs_f64(start_ticks as f64 / ticks_per_second as f64);
    Some(std::time::UNIX_EPOCH + Duration::from_secs(btime) + since_boot)
}

/// Record the launch in the child between `fork` and `exec`: `<launch id> <pid>` in the
/// task directory's marker file. Only async-signal-safe calls (open, write, close, getpid).
fn write_marker(path: &std::ffi::CStr, launch_id: &[u8]) -> std::io::Result<()> {
    // SAFETY: plain system calls on a path and buffers this closure owns; nothing allocates.
    unsafe {
        let fd = libc::open(
            path.as_ptr(),
            // Never through a link a task planted in its directory.
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            0o600,
        );
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut line = [0u8; 24];
        line[0] = b' ';
        let len = crate::client::sandbox::decimal(libc::getpid() as u32, &mut line[1..]);
        line[1 + len] = b'\n';
        let ok = write_all(fd, launch_id) && write_all(fd, &line[..len + 2]);
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if ok {
            Ok(())
        } else {
            Err(err)
        }
    }
}

/// write(2) until all of `bytes` is written.
///
/// # Safety
/// `fd` must be an open file descriptor.
unsafe fn write_all(fd: i32, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        if n <= 0 {
            return false;
        }
        bytes = &bytes[n as usize..];
    }
    true
}

fn config_str(config: &BTreeMap<String, ConfigValue>, key: &str) -> Option<String> {
    match config.get(key)? {
        ConfigValue::String(s) => Some(s.clone()),
        ConfigValue::Int(i) => Some(i.to_string()),
        ConfigValue::Float(f) => Some(f.to_string()),
        ConfigValue::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The `mock` driver's reading of a task's `Config`: how long the task runs (`run_for`) and
/// the exit code it ends with (`exit_code`). Public so that simulated clients (the load
/// generator's) run tasks exactly as this driver would.
pub fn mock_config(config: &BTreeMap<String, ConfigValue>) -> Result<(Duration, i64), DriverError> {
    let run_for = match config.get("run_for") {
        None | Some(ConfigValue::Null) => Duration::ZERO,
        Some(ConfigValue::Int(n)) if *n >= 0 => Duration::from_nanos(*n as u64),
        Some(ConfigValue::String(s)) => humantime::parse_duration(s)
            .map_err(|e| DriverError::BadConfig(format!("run_for {s:?}: {e}")))?,
        Some(other) => {
            return Err(DriverError::BadConfig(format!(
                "run_for must be a duration such as \"5s\", got {other:?}"
            )))
        }
    };
    let exit_code = match config.get("exit_code") {
        None | Some(ConfigValue::Null) => 0,
        Some(ConfigValue::Int(n)) => *n,
        Some(other) => {
            return Err(DriverError::BadConfig(format!(
                "exit_code must be an integer, got {other:?}"
            )))
        }
    };
    Ok((run_for, exit_code))
}

fn start_process(
    task: &Task,
    dir: &Path,
    logs: &LogSinks,
    launch_id: Option<&str>,
    cgroup: Option<TaskCgroup>,
    netns: Option<&Path>,
) -> Result<RunningTask, DriverError> {
    let command = config_str(&task.config, "command")
        .filter(|c| !c.is_empty())
        .ok_or_else(|| DriverError::BadConfig("raw_exec needs Config.command".into()))?;
    let args: Vec<String> = match task.config.get("args") {
        None | Some(ConfigValue::Null) => Vec::new(),
        Some(ConfigValue::List(items)) => items
            .iter()
            .map(|v| match v {
                ConfigValue::String(s) => Ok(s.clone()),
                ConfigValue::Int(i) => Ok(i.to_string()),
                other => Err(DriverError::BadConfig(format!(
                    "args must be strings, got {other:?}"
                ))),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(DriverError::BadConfig(format!(
                "args must be a list, got {other:?}"
            )))
        }
    };
    let stdout = logs.open("stdout")?;
    let stderr = logs.open("stderr")?;
    let mut cmd = task_command(task, dir, &command, &args, cgroup.as_ref(), netns)?;
    cmd.stdin(std::process::Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .kill_on_drop(false);
    if let Some(launch_id) = launch_id {
        record_launch(&mut cmd, dir, launch_id)?;
    }
    spawn_task(cmd, &command, cgroup)
}

/// Spawn a task's prepared command: its handle, or the failure (its group removed).
fn spawn_task(
    mut cmd: tokio::process::Command,
    command: &str,
    cgroup: Option<TaskCgroup>,
) -> Result<RunningTask, DriverError> {
    let child = match cmd.spawn() {
        Ok(child) => child,
        Err(source) => {
            if let Some(group) = &cgroup {
                let _ = group.destroy();
            }
            return Err(DriverError::Spawn {
                command: command.to_string(),
                source,
            });
        }
    };
    let pid = child.id().map(|p| p as i32).unwrap_or(0);
    let start_ticks = crate::util::procfs::start_ticks(pid).unwrap_or(0);
    Ok(RunningTask::Child {
        child,
        pid,
        start_ticks,
        cgroup,
    })
}

fn c_paths(paths: &[PathBuf]) -> Result<Vec<std::ffi::CString>, DriverError> {
    use std::os::unix::ffi::OsStrExt;
    paths
        .iter()
        .map(|p| {
            std::ffi::CString::new(p.as_os_str().as_bytes())
                .map_err(|_| DriverError::BadConfig(format!("{} holds a NUL", p.display())))
        })
        .collect()
}

/// The hook that records a launch: the marker written, absolute, by the process the client
/// spawned, and the id in the task's environment.
fn record_launch(
    cmd: &mut tokio::process::Command,
    dir: &Path,
    launch_id: &str,
) -> Result<(), DriverError> {
    use std::os::unix::ffi::OsStrExt;
    let dir = std::path::absolute(dir).map_err(|source| DriverError::Dir {
        path: dir.to_path_buf(),
        source,
    })?;
    let marker = std::ffi::CString::new(dir.join(LAUNCH_MARKER).as_os_str().as_bytes())
        .map_err(|_| DriverError::BadConfig("task directory path holds a NUL".into()))?;
    let id = launch_id.as_bytes().to_vec();
    cmd.env(LAUNCH_ENV, launch_id);
    // SAFETY: the hook only makes async-signal-safe system calls (`write_marker`).
    unsafe {
        cmd.pre_exec(move || write_marker(&marker, &id));
    }
    Ok(())
}

/// Start an `exec` task: its cgroup with its limits, then its sandbox, entered by the
/// process the client spawns ([`crate::client::sandbox::Plan::enter`]).
fn start_exec(
    task: &Task,
    dir: &Path,
    ctx: &LaunchContext<'_>,
) -> Result<RunningTask, DriverError> {
    let iso = ctx.isolation;
    if let Some(why) = &iso.exec_problem {
        return Err(DriverError::BadConfig(format!(
            "the exec driver cannot run here: {why}"
        )));
    }
    let Some(hierarchy) = &iso.cgroups else {
        return Err(DriverError::BadConfig(
            "the exec driver cannot run here: no usable cgroup hierarchy".into(),
        ));
    };
    let cfg = ExecTaskConfig::parse(&task.config)?;
    let account = crate::client::sandbox::task_account(&task.user, &iso.exec)?;
    let caps =
        crate::client::sandbox::task_caps(&iso.exec.allow_caps, &cfg.cap_add, &cfg.cap_drop)?;
    let (pid, ipc) = crate::client::sandbox::ns_modes(&cfg, &iso.exec)?;
    let group = hierarchy.task_group(ctx.alloc_id, &task.name);
    let limits = Limits::of(
        task.resources.cpu,
        task.resources.memory_mb,
        task.resources.memory_max_mb,
        task.env.get(CPU_CORES_ENV).map(String::as_str),
    );
    group.create(&limits)?;
    let plan = crate::client::sandbox::plan(&SandboxSpec {
        stage: &iso.stage,
        chroot_env: &iso.chroot_env,
        alloc_dir: ctx.alloc_dir,
        task_dir: dir,
        mounts: ctx.mounts,
        pid,
        ipc,
        work_dir: &cfg.work_dir,
        pivot_root: !iso.exec.no_pivot_root,
        cgroup_procs: group.procs_files(),
        caps,
        account,
        files: &bound_files(ctx.net_files),
        hostname: ctx.net_files.hostname.as_deref(),
    });
    let netns = ctx
        .netns
        .map(crate::client::network::netns::open)
        .transpose()
        .map_err(|e| {
            crate::client::sandbox::SandboxError::Path(format!(
                "the allocation's network namespace: {e}"
            ))
        });
    let plan = match plan.and_then(|plan| Ok((plan, netns?))) {
        Ok((mut plan, netns)) => {
            if let Some(fd) = netns {
                plan.join_network(fd);
            }
            plan
        }
        Err(e) => {
            let _ = group.destroy();
            return Err(e.into());
        }
    };
    let stdout = logs_or_cleanup(ctx.logs.open("stdout"), &group)?;
    let stderr = logs_or_cleanup(ctx.logs.open("stderr"), &group)?;
    // Its own session and process group: the supervisor calls setsid (Plan::enter).
    let mut cmd = tokio::process::Command::new(&cfg.command);
    cmd.args(&cfg.args)
        .envs(&task.env)
        .env("NOMAD_TASK_NAME", &task.name)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .kill_on_drop(false);
    if let Err(e) = record_launch(&mut cmd, dir, ctx.launch_id) {
        let _ = group.destroy();
        return Err(e);
    }
    // SAFETY: `enter` makes only system calls on data prepared before the fork; the
    // process the client spawned stays behind as the task's supervisor.
    unsafe {
        cmd.pre_exec(move || plan.enter());
    }
    spawn_task(cmd, &cfg.command, Some(group))
}

/// The network's files as an `exec` task's root binds them.
fn bound_files(files: &crate::client::network::files::NetworkFiles) -> Vec<BoundFile> {
    [
        (&files.resolv_conf, "/etc/resolv.conf", true),
        (&files.hosts, "/etc/hosts", false),
    ]
    .into_iter()
    .filter_map(|(path, inside, read_only)| {
        let path = path.as_ref()?;
        Some(BoundFile {
            parent: path.parent()?.to_path_buf(),
            name: path.file_name()?.to_string_lossy().into_owned(),
            inside,
            read_only,
        })
    })
    .collect()
}

fn logs_or_cleanup<T>(
    opened: Result<T, crate::client::logmon::LogmonError>,
    group: &TaskCgroup,
) -> Result<T, DriverError> {
    opened.map_err(|e| {
        let _ = group.destroy();
        DriverError::Logs(e)
    })
}

/// `program` with `args` as a `raw_exec` process of `task` runs: in its directory, with its
/// environment, in its `cgroup` when it has one (also what `alloc exec` runs in the task's
/// place).
///
/// With a `user` (and a driver other than `docker`, whose user lives in its image), the
/// process runs as that host account: its uid, primary gid and supplementary groups.
pub fn task_command(
    task: &Task,
    dir: &Path,
    program: &str,
    args: &[String],
    cgroup: Option<&TaskCgroup>,
    netns: Option<&Path>,
) -> Result<tokio::process::Command, DriverError> {
    let account = match task.user.as_str() {
        "" => None,
        _ if task.driver == "docker" => None,
        user => Some(crate::client::users::lookup(user)?),
    };
    let mut cmd = tokio::process::Command::new(program);
    if let Some(group) = cgroup {
        let files = c_paths(&group.procs_files())?;
        // SAFETY: the hook only opens and writes files (`join_cgroup`). Hooks run in the
        // order they are registered: this one first, while the child may still write the
        // client's files, before it becomes the task's user.
        unsafe {
            cmd.pre_exec(move || crate::client::sandbox::join_cgroup(&files));
        }
    }
    if let Some(path) = netns {
        let ns = crate::client::network::netns::open(path).map_err(|e| {
            DriverError::Sandbox(crate::client::sandbox::SandboxError::Path(format!(
                "the allocation's network namespace: {e}"
            )))
        })?;
        // SAFETY: one async-signal-safe system call on a descriptor opened before the fork,
        // while the child still has the client's privileges.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(std::os::fd::AsRawFd::as_raw_fd(&ns), libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    cmd.args(args)
        .envs(&task.env)
        .env(
            "NOMAD_TASK_DIR",
            dir.join(crate::client::allocdir::LOCAL_DIR),
        )
        .env("NOMAD_TASK_NAME", &task.name)
        .current_dir(dir);
    // A task that reserves whole cores runs on them alone (its environment names them).
    if let Some(cores) = task.env.get(CPU_CORES_ENV).and_then(|c| cpu_set_of(c)) {
        // SAFETY: the hook makes one async-signal-safe system call on a set built before
        // the fork.
        unsafe {
            cmd.pre_exec(move || {
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &cores) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    if let Some(account) = account {
        let groups: Vec<libc::gid_t> = account.groups.clone();
        let (uid, gid) = (account.uid, account.gid);
        // SAFETY: the hook makes three async-signal-safe system calls on values built before
        // the fork; groups and gid first, while the process may still change them.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    Ok(cmd)
}

/// `program` with `args` in the place of a running task (`alloc exec`): a `raw_exec` task's
/// directory, environment, cgroup and network namespace ([`task_command`]); an `exec` task's cgroup,
/// namespaces, root, user and capabilities, entered through the task's pid 1
/// ([`crate::client::sandbox::enter_plan`]).
pub fn exec_command(
    task: &Task,
    dir: &Path,
    program: &str,
    args: &[String],
    handle: Option<&TaskHandle>,
    isolation: &Isolation,
    netns: Option<&Path>,
) -> Result<tokio::process::Command, DriverError> {
    let (supervisor, cgroup) = match handle {
        Some(TaskHandle::Process { pid, cgroup, .. }) => {
            (Some(*pid), TaskCgroup::from_dirs(cgroup.clone()))
        }
        _ => (None, None),
    };
    if task.driver != "exec" {
        return task_command(task, dir, program, args, cgroup.as_ref(), netns);
    }
    let task_pid = supervisor
        .and_then(crate::client::sandbox::task_of)
        .ok_or_else(|| DriverError::BadConfig("the task has no running process".into()))?;
    let cfg = ExecTaskConfig::parse(&task.config)?;
    let account = crate::client::sandbox::task_account(&task.user, &isolation.exec)?;
    let caps =
        crate::client::sandbox::task_caps(&isolation.exec.allow_caps, &cfg.cap_add, &cfg.cap_drop)?;
    let procs = cgroup.map(|g| g.procs_files()).unwrap_or_default();
    let plan = crate::client::sandbox::enter_plan(task_pid, &procs, &cfg.work_dir, caps, &account)?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .envs(&task.env)
        .env("NOMAD_TASK_NAME", &task.name)
        .current_dir(dir);
    // SAFETY: `enter` makes only system calls on data prepared before the fork.
    unsafe {
        cmd.pre_exec(move || plan.enter());
    }
    Ok(cmd)
}

/// `cpuset` (`"0-1,4"`) as the kernel's CPU set; `None` when it names no core this set can
/// hold.
fn cpu_set_of(cpuset: &str) -> Option<libc::cpu_set_t> {
    let cores = teamster_storage::model::parse_cpuset(cpuset).ok()?;
    // SAFETY: an all-zero cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let mut any = false;
    for core in cores {
        let core = core as usize;
        if core < libc::CPU_SETSIZE as usize {
            // SAFETY: `core` is within the set's size.
            unsafe { libc::CPU_SET(core, &mut set) };
            any = true;
        }
    }
    any.then_some(set)
}

/// Find a task again after a client restart: `None` when it is no longer running.
pub fn reattach(handle: &TaskHandle, now_unix_nanos: i64) -> Option<RunningTask> {
    match handle {
        TaskHandle::Process {
            pid,
            start_ticks,
            cgroup,
        } => {
            let alive = *pid > 0 && crate::util::procfs::start_ticks(*pid) == Some(*start_ticks);
            let group = TaskCgroup::from_dirs(cgroup.clone());
            if !alive {
                // Ended while the client was away: what it left running goes with it.
                if let Some(group) = &group {
                    let _ = group.destroy();
                }
                return None;
            }
            Some(RunningTask::Reattached {
                pid: *pid,
                start_ticks: *start_ticks,
                cgroup: group,
            })
        }
        TaskHandle::Mock {
            started_at,
            run_for,
            exit_code,
        } => {
            let ends = started_at.saturating_add(*run_for as i64);
            let left = ends.saturating_sub(now_unix_nanos);
            (left > 0).then(|| RunningTask::Mock {
                deadline: tokio::time::Instant::now() + Duration::from_nanos(left as u64),
                handle: handle.clone(),
                exit_code: *exit_code,
            })
        }
        // Needs the engine: find_again.
        TaskHandle::Docker { .. } => None,
        // Needs the task: find_launch.
        TaskHandle::Launching { .. } => None,
    }
}

/// How often a re-attached process is checked for liveness.
const REATTACHED_POLL: Duration = Duration::from_millis(500);

fn signal_group(pid: i32, sig: i32) {
    if pid > 0 {
        // SAFETY: kill(2) has no memory effects; a negative pid addresses the task's own
        // process group, which it leads (spawned with process_group(0)).
        unsafe {
            libc::kill(-pid, sig);
        }
    }
}

impl RunningTask {
    /// What to persist so a restarted client finds this task again.
    pub fn handle(&self) -> TaskHandle {
        match self {
            RunningTask::Child {
                pid,
                start_ticks,
                cgroup,
                ..
            }
            | RunningTask::Reattached {
                pid,
                start_ticks,
                cgroup,
            } => TaskHandle::Process {
                pid: *pid,
                start_ticks: *start_ticks,
                cgroup: cgroup.as_ref().map(|g| g.dirs.clone()).unwrap_or_default(),
            },
            RunningTask::Mock { handle, .. } => handle.clone(),
            RunningTask::Docker(d) => TaskHandle::Docker {
                container_id: d.container_id.clone(),
            },
        }
    }

    /// The task's cgroup, when it has one.
    pub fn cgroup(&self) -> Option<&TaskCgroup> {
        match self {
            RunningTask::Child { cgroup, .. } | RunningTask::Reattached { cgroup, .. } => {
                cgroup.as_ref()
            }
            RunningTask::Mock { .. } | RunningTask::Docker(_) => None,
        }
    }

    /// Wait for the task to exit. A task with a cgroup leaves nothing behind: what its
    /// processes left running is killed and the group removed, after its OOM kills are
    /// counted.
    pub async fn wait(&mut self) -> ExitResult {
        let exit = self.wait_main().await;
        let Some(group) = self.cgroup().cloned() else {
            return exit;
        };
        let oom_killed = tokio::task::spawn_blocking(move || {
            let oom = group.oom_kills() > 0;
            if let Err(e) = group.destroy() {
                tracing::warn!(error = %e, "cannot remove the task's cgroup");
            }
            oom
        })
        .await
        .unwrap_or(false);
        ExitResult { oom_killed, ..exit }
    }

    async fn wait_main(&mut self) -> ExitResult {
        match self {
            RunningTask::Child { child, .. } => match child.wait().await {
                Ok(status) => {
                    use std::os::unix::process::ExitStatusExt;
                    ExitResult {
                        exit_code: status.code().unwrap_or(0) as i64,
                        signal: status.signal().unwrap_or(0) as i64,
                        unknown: false,
                        oom_killed: false,
                    }
                }
                Err(_) => ExitResult {
                    exit_code: -1,
                    signal: 0,
                    unknown: true,
                    oom_killed: false,
                },
            },
            RunningTask::Reattached {
                pid, start_ticks, ..
            } => {
                while crate::util::procfs::start_ticks(*pid) == Some(*start_ticks) {
                    tokio::time::sleep(REATTACHED_POLL).await;
                }
                ExitResult {
                    exit_code: 0,
                    signal: 0,
                    unknown: true,
                    oom_killed: false,
                }
            }
            RunningTask::Mock {
                deadline,
                exit_code,
                ..
            } => {
                tokio::time::sleep_until(*deadline).await;
                ExitResult {
                    exit_code: *exit_code,
                    signal: 0,
                    unknown: false,
                    oom_killed: false,
                }
            }
            RunningTask::Docker(d) => d.wait().await,
        }
    }

    /// Send `signal` to the task's process group (`alloc signal`), or to a container's main
    /// process; a mock task takes any signal and ignores it.
    pub async fn signal(&self, signal: i32) -> std::io::Result<()> {
        let pid = match self {
            RunningTask::Child { pid, .. } | RunningTask::Reattached { pid, .. } => *pid,
            RunningTask::Mock { .. } => return Ok(()),
            RunningTask::Docker(d) => return d.signal(signal).await,
        };
        if pid <= 0 {
            return Err(std::io::Error::other("the task has no process id"));
        }
        // SAFETY: kill(2) has no memory effects; a negative pid addresses the task's own
        // process group, which it leads (spawned with process_group(0)).
        let done = unsafe { libc::kill(-pid, signal) };
        if done == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// Stop the task: `kill_signal` to its process group (a container: its own kill
    /// signal), SIGKILL after `kill_timeout` if it has not exited. Returns how it ended.
    pub async fn kill(&mut self, kill_signal: i32, kill_timeout: Duration) -> ExitResult {
        let pid = match self {
            RunningTask::Docker(d) => return d.kill(kill_timeout).await,
            RunningTask::Child { pid, .. } | RunningTask::Reattached { pid, .. } => *pid,
            RunningTask::Mock { .. } => {
                return ExitResult {
                    exit_code: 0,
                    signal: i64::from(kill_signal),
                    unknown: false,
                    oom_killed: false,
                }
            }
        };
        signal_group(pid, kill_signal);
        match tokio::time::timeout(kill_timeout, self.wait()).await {
            Ok(exit) => exit,
            Err(_) => {
                signal_group(pid, libc::SIGKILL);
                self.wait().await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STDOUT_FILE: &str = "stdout.log";
    const STDERR_FILE: &str = "stderr.log";

    fn sinks(dir: &Path) -> LogSinks {
        LogSinks::Files {
            stdout: dir.join(STDOUT_FILE),
            stderr: dir.join(STDERR_FILE),
        }
    }

    fn raw(cmd: &str, args: &[&str]) -> Task {
        let mut t = Task {
            name: "t".into(),
            driver: "raw_exec".into(),
            ..Task::default()
        };
        t.config.insert("command".into(), cmd.into());
        t.config.insert(
            "args".into(),
            ConfigValue::List(args.iter().map(|a| (*a).into()).collect()),
        );
        t
    }

    fn drivers() -> Vec<String> {
        DRIVERS.iter().map(|d| d.to_string()).collect()
    }

    #[tokio::test]
    async fn raw_exec_records_exit_codes_and_logs() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = raw("/bin/sh", &["-c", "echo hello; echo oops >&2; exit 3"]);
        t.env.insert("GREETING".into(), "hi".into());
        let mut task = start(&t, dir.path(), &drivers(), &sinks(dir.path()), 0, None).unwrap();
        let exit = task.wait().await;
        assert_eq!(exit.exit_code, 3);
        assert!(!exit.successful());
        let out = std::fs::read_to_string(dir.path().join(STDOUT_FILE)).unwrap();
        let err = std::fs::read_to_string(dir.path().join(STDERR_FILE)).unwrap();
        assert_eq!(out, "hello\n");
        assert_eq!(err, "oops\n");
    }

    #[tokio::test]
    async fn raw_exec_passes_env_and_runs_in_the_task_dir() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = raw("/bin/sh", &["-c", "echo $GREETING; pwd"]);
        t.env.insert("GREETING".into(), "hi".into());
        let mut task = start(&t, dir.path(), &drivers(), &sinks(dir.path()), 0, None).unwrap();
        assert!(task.wait().await.successful());
        let out = std::fs::read_to_string(dir.path().join(STDOUT_FILE)).unwrap();
        let canon = dir.path().canonicalize().unwrap();
        assert_eq!(out, format!("hi\n{}\n", canon.display()));
    }

    /// A task that reserves cores runs on them alone: its affinity is the cpuset its
    /// environment names (here the agent's last allowed core, so the test holds on any
    /// machine).
    #[tokio::test]
    async fn raw_exec_pins_a_task_to_its_reserved_cores() {
        let allowed = std::fs::read_to_string("/proc/self/status").unwrap();
        let allowed = allowed
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap();
        let last = *teamster_storage::model::parse_cpuset(allowed)
            .unwrap()
            .last()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut t = raw(
            "/bin/sh",
            &["-c", "grep Cpus_allowed_list /proc/self/status"],
        );
        t.env.insert(CPU_CORES_ENV.into(), last.to_string());
        let mut task = start(&t, dir.path(), &drivers(), &sinks(dir.path()), 0, None).unwrap();
        assert!(task.wait().await.successful());
        let out = std::fs::read_to_string(dir.path().join(STDOUT_FILE)).unwrap();
        assert_eq!(
            out.split_whitespace().last(),
            Some(last.to_string().as_str())
        );
        assert_eq!(
            teamster_storage::model::format_cpuset(&[0, 1, 2, 5, 7, 8]),
            "0-2,5,7-8"
        );
    }

    /// A task with a `user` runs as that host account, groups and all; an account the host
    /// lacks fails the start at once, naming it.
    #[tokio::test]
    async fn raw_exec_runs_a_task_as_its_user() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED raw_exec_runs_a_task_as_its_user: needs root");
            return;
        }
        let nobody = crate::client::users::lookup("nobody").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut t = raw("/bin/sh", &["-c", "id -u; id -g; id -G"]);
        t.user = "nobody".into();
        let mut task = start(&t, dir.path(), &drivers(), &sinks(dir.path()), 0, None).unwrap();
        assert!(task.wait().await.successful());
        let out = std::fs::read_to_string(dir.path().join(STDOUT_FILE)).unwrap();
        let groups: Vec<String> = nobody.groups.iter().map(|g| g.to_string()).collect();
        assert_eq!(
            out,
            format!("{}\n{}\n{}\n", nobody.uid, nobody.gid, groups.join(" "))
        );

        t.user = "no-such-user-here".into();
        let e = start(&t, dir.path(), &drivers(), &sinks(dir.path()), 0, None).unwrap_err();
        assert!(!e.recoverable());
        assert_eq!(
            e.to_string(),
            "failed to identify user \"no-such-user-here\": user: unknown user no-such-user-here"
        );
    }

    #[tokio::test]
    async fn a_signal_reaches_the_task_s_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let t = raw(
            "/bin/sh",
            &[
                "-c",
                "trap 'echo got usr1; exit 0' USR1; echo ready; while :; do sleep 0.1; done",
            ],
        );
        let mut task = start(&t, dir.path(), &drivers(), &sinks(dir.path()), 0, None).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::fs::read_to_string(dir.path().join(STDOUT_FILE)).unwrap_or_default() != "ready\n"
        {
            assert!(std::time::Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        task.signal(libc::SIGUSR1).await.unwrap();
        let exit = tokio::time::timeout(Duration::from_secs(5), task.wait())
            .await
            .expect("the task exits on USR1");
        assert!(exit.successful(), "{exit:?}");
        let out = std::fs::read_to_string(dir.path().join(STDOUT_FILE)).unwrap();
        assert_eq!(out, "ready\ngot usr1\n");
        assert!(
            task.signal(libc::SIGUSR1).await.is_err(),
            "no group left to signal"
        );
    }

    #[tokio::test]
    async fn stop_sends_sigterm_first() {
        let dir = tempfile::tempdir().unwrap();
        let t = raw("/bin/sleep", &["30"]);
        let mut task = start(&t, dir.path(), &drivers(), &sinks(dir.path()), 0, None).unwrap();
        let started = std::time::Instant::now();
        let exit = task.kill(libc::SIGTERM, Duration::from_secs(5)).await;
        assert_eq!(exit.signal, libc::SIGTERM as i64);
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[tokio::test]
    async fn stop_escalates_to_sigkill_after_the_kill_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let t = raw(
            "/bin/sh",
            &["-c", "trap '' TERM; echo ready; sleep 30 & wait"],
        );
        let mut task = start(&t, dir.path(), &drivers(), &sinks(dir.path()), 0, None).unwrap();
        // Wait until the trap is installed.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::fs::read_to_string(dir.path().join(STDOUT_FILE)).unwrap_or_default() != "ready\n"
        {
            assert!(std::time::Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let started = std::time::Instant::now();
        let exit = task.kill(libc::SIGTERM, Duration::from_millis(300)).await;
        assert_eq!(exit.signal, libc::SIGKILL as i64);
        assert!(started.elapsed() >= Duration::from_millis(300));
    }

    #[tokio::test]
    async fn a_running_process_is_found_again_and_a_dead_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let t = raw("/bin/sleep", &["30"]);
        let mut task = start(&t, dir.path(), &drivers(), &sinks(dir.path()), 0, None).unwrap();
        let handle = task.handle();
        let mut again = reattach(&handle, 0).expect("still running");
        assert!(matches!(again, RunningTask::Reattached { .. }));
        let exit = again.kill(libc::SIGTERM, Duration::from_secs(5)).await;
        assert!(exit.unknown);
        let _ = task.wait().await;
        assert!(reattach(&handle, 0).is_none());
    }

    /// A recorded launch is told apart after a restart: never started, started and running
    /// (found by its marker and its environment), started and ended.
    #[tokio::test]
    async fn a_recorded_launch_is_found_by_its_marker() {
        let dir = tempfile::tempdir().unwrap();
        let t = raw("/bin/sleep", &["30"]);
        let connector = crate::client::docker::Connector::default();
        let find = |id: &'static str| {
            find_launch(
                (id, 0),
                &t,
                dir.path(),
                &LogSinks::Discard,
                "a1",
                &connector,
                0,
            )
        };
        assert!(
            matches!(find("L1").await, Launched::NotStarted),
            "no marker yet"
        );
        let mut task = start(
            &t,
            dir.path(),
            &drivers(),
            &sinks(dir.path()),
            0,
            Some("L1"),
        )
        .unwrap();
        let RunningTask::Child { pid, .. } = task else {
            panic!("a child")
        };
        let marker = std::fs::read_to_string(dir.path().join(LAUNCH_MARKER)).unwrap();
        assert_eq!(marker, format!("L1 {pid}\n"));
        // The spawn returns once the exec has closed the child's descriptors, a moment
        // before the kernel sets up its environment: wait (bounded) until it shows.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !carries_launch(pid, "L1") && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(carries_launch(pid, "L1"));
        match find("L1").await {
            Launched::Found(r) => match *r {
                RunningTask::Reattached { pid: found, .. } => assert_eq!(found, pid),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(find("L0").await, Launched::NotStarted),
            "the marker of another launch says nothing of this one"
        );
        task.kill(libc::SIGTERM, Duration::from_secs(5)).await;
        assert!(matches!(find("L1").await, Launched::Ended));
    }

    /// A process at the marker's pid that does not carry the launch id is the task only if
    /// it started before the marker was written (a task that rewrote its environment);
    /// one that started later reused the pid.
    #[tokio::test]
    async fn a_reused_pid_is_not_taken_for_the_launch() {
        let dir = tempfile::tempdir().unwrap();
        let mut other = start(
            &raw("/bin/sleep", &["30"]),
            dir.path(),
            &drivers(),
            &sinks(dir.path()),
            0,
            None,
        )
        .unwrap();
        let RunningTask::Child { pid, .. } = other else {
            panic!("a child")
        };
        let marker = dir.path().join(LAUNCH_MARKER);
        std::fs::write(&marker, format!("L1 {pid}\n")).unwrap();
        let set_written = |at: std::time::SystemTime| {
            std::fs::File::options()
                .write(true)
                .open(&marker)
                .unwrap()
                .set_modified(at)
                .unwrap();
        };
        let t = raw("/bin/sleep", &["30"]);
        let connector = crate::client::docker::Connector::default();
        let now = std::time::SystemTime::now();
        set_written(now - Duration::from_secs(30));
        let found = find_launch(
            ("L1", 0),
            &t,
            dir.path(),
            &LogSinks::Discard,
            "a1",
            &connector,
            0,
        )
        .await;
        assert!(
            matches!(found, Launched::Ended),
            "started after the marker: {found:?}"
        );
        set_written(now + Duration::from_secs(5));
        let found = find_launch(
            ("L1", 0),
            &t,
            dir.path(),
            &LogSinks::Discard,
            "a1",
            &connector,
            0,
        )
        .await;
        assert!(
            matches!(found, Launched::Found(_)),
            "started before the marker: {found:?}"
        );
        other.kill(libc::SIGTERM, Duration::from_secs(5)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_recorded_mock_launch_started_when_it_was_recorded() {
        let mut t = Task {
            name: "m".into(),
            driver: "mock".into(),
            ..Task::default()
        };
        t.config.insert("run_for".into(), "10s".into());
        let connector = crate::client::docker::Connector::default();
        let dir = Path::new("/nonexistent");
        let at = 1_000_000_000;
        match find_launch(
            ("L", at),
            &t,
            dir,
            &LogSinks::Discard,
            "a1",
            &connector,
            at + 4_000_000_000,
        )
        .await
        {
            Launched::Found(r) => match *r {
                RunningTask::Mock { deadline, .. } => assert_eq!(
                    deadline - tokio::time::Instant::now(),
                    Duration::from_secs(6)
                ),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
        let late = find_launch(
            ("L", at),
            &t,
            dir,
            &LogSinks::Discard,
            "a1",
            &connector,
            at + 11_000_000_000,
        )
        .await;
        assert!(matches!(late, Launched::Ended));
    }

    #[tokio::test]
    async fn unknown_drivers_and_bad_configs_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = raw("/bin/true", &[]);
        t.driver = "qemu".into();
        assert!(matches!(
            start(&t, dir.path(), &drivers(), &sinks(dir.path()), 0, None),
            Err(DriverError::Unknown(_))
        ));
        let mut t = raw("", &[]);
        t.config.remove("command");
        assert!(matches!(
            start(&t, dir.path(), &drivers(), &sinks(dir.path()), 0, None),
            Err(DriverError::BadConfig(_))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn mock_tasks_run_for_their_duration_and_reattach() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = Task {
            name: "m".into(),
            driver: "mock".into(),
            ..Task::default()
        };
        t.config.insert("run_for".into(), "10s".into());
        t.config.insert("exit_code".into(), ConfigValue::Int(2));
        let start_at = tokio::time::Instant::now();
        let mut task = start(&t, dir.path(), &drivers(), &sinks(dir.path()), 1_000, None).unwrap();
        let exit = task.wait().await;
        assert_eq!(exit.exit_code, 2);
        assert_eq!(start_at.elapsed(), Duration::from_secs(10));
        let h = task.handle();
        assert!(reattach(&h, 1_000 + 4_000_000_000).is_some());
        assert!(reattach(&h, 1_000 + 10_000_000_000).is_none());
    }

    /// A fresh allocation directory (shared `alloc/` with `logs/`, the task's `local`,
    /// `secrets`, `tmp`) and this client's isolation, when the host can run exec tasks (the
    /// test is skipped, loudly, otherwise; under CI that is a failure).
    fn exec_host(test: &str, root: &Path) -> Option<Isolation> {
        let iso = Isolation::detect(&ClientConfig::default(), root);
        if let Some(why) = &iso.exec_problem {
            assert!(
                std::env::var("CI").is_err(),
                "{test}: the exec driver must run under CI: {why}"
            );
            eprintln!("SKIPPED {test}: {why}");
            return None;
        }
        for d in [
            "alloc/alloc/logs",
            "alloc/t/local",
            "alloc/t/secrets",
            "alloc/t/tmp",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        Some(iso)
    }

    fn exec_task(script: &str) -> Task {
        let mut t = raw("/bin/sh", &["-c", script]);
        t.driver = "exec".into();
        t
    }

    async fn launch_exec(t: &Task, root: &Path, iso: &Isolation, alloc_id: &str) -> RunningTask {
        let docker = crate::client::docker::Connector::default();
        let enabled = drivers();
        let logs = sinks(root);
        let alloc_dir = root.join("alloc/alloc");
        let ctx = LaunchContext {
            enabled: &enabled,
            docker: &docker,
            alloc_dir: &alloc_dir,
            alloc_id,
            job_name: "j",
            node_id: "n",
            ports: &[],
            launch_id: "l1",
            logs: &logs,
            mounts: &[],
            isolation: iso,
            netns: None,
            net_files: &Default::default(),
        };
        match launch(t, &root.join("alloc/t"), ctx, 0).await {
            Ok(task) => task,
            Err(e) => panic!(
                "{e}: {}",
                std::fs::read_to_string(root.join(STDERR_FILE)).unwrap_or_default()
            ),
        }
    }

    /// An exec task sees only its own processes, none of the host's files outside its
    /// root, runs as nobody by default, and finds its directories where Nomad puts them.
    #[tokio::test]
    async fn an_exec_task_is_isolated_in_its_namespaces_and_root() {
        let root = tempfile::tempdir().unwrap();
        let Some(iso) = exec_host(
            "an_exec_task_is_isolated_in_its_namespaces_and_root",
            root.path(),
        ) else {
            return;
        };
        let secret = root.path().join("host-only");
        std::fs::write(&secret, "x").unwrap();
        std::fs::write(root.path().join("alloc/t/local/mine"), "mine").unwrap();
        let script = format!(
            "echo pids $(ls /proc | grep -c '^[0-9]'); echo one $(head -c 7 /proc/1/cmdline); \
             test -e {} && echo host visible; echo uid $(id -u); cat /local/mine; echo; \
             ls -d /alloc /secrets /tmp /dev/null /usr/bin; echo pwd $(pwd); \
             touch /usr/bin/x 2>/dev/null && echo usr writable; \
             grep CapEff /proc/self/status; grep -E ' /(local|usr) ' /proc/self/mounts",
            secret.display()
        );
        let id = format!("unit-exec-{}", std::process::id());
        let mut task = launch_exec(&exec_task(&script), root.path(), &iso, &id).await;
        let group = task.cgroup().cloned().expect("an exec task has a cgroup");
        let exit = task.wait().await;
        let out = std::fs::read_to_string(root.path().join(STDOUT_FILE)).unwrap();
        let err = std::fs::read_to_string(root.path().join(STDERR_FILE)).unwrap();
        assert!(exit.successful(), "{exit:?}\n{out}\n{err}");
        // sh (pid 1), the subshell, ls and grep: nothing of the host's.
        let pids: usize = out
            .lines()
            .find_map(|l| l.strip_prefix("pids "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(pids <= 4, "{out}");
        assert!(out.contains("one /bin/sh\n"), "{out}");
        assert!(!out.contains("host visible"), "{out}");
        assert!(out.contains("uid 65534\n"), "{out}");
        assert!(out.contains("mine\n"), "{out}");
        assert!(
            out.contains("/alloc\n/dev/null\n/secrets\n/tmp\n/usr/bin\n"),
            "{out}"
        );
        assert!(out.contains("pwd /\n"), "{out}");
        assert!(!out.contains("usr writable"), "{out}");
        // nobody holds Nomad's default capabilities (ambient).
        let caps = crate::client::sandbox::task_caps(&iso.exec.allow_caps, &[], &[]).unwrap();
        assert!(out.contains(&format!("CapEff:\t{caps:016x}")), "{out}");
        // Its own directories take no device and no set-id program; the host's are read-only.
        let mounts: Vec<&str> = out
            .lines()
            .filter(|l| l.contains(" /local ") || l.contains(" /usr "))
            .collect();
        let local = mounts.iter().find(|l| l.contains(" /local ")).unwrap();
        assert!(
            local.contains("nosuid") && local.contains("nodev") && local.contains(" rw"),
            "{local}"
        );
        let usr = mounts.iter().find(|l| l.contains(" /usr ")).unwrap();
        assert!(usr.contains(" ro,") && usr.contains("nodev"), "{usr}");
        // Its group is gone with it.
        assert!(group.dirs.iter().all(|d| !d.exists()));
    }

    /// With `no_pivot_root` the task's root is entered by a move mount and chroot: the host
    /// is as hidden, and its own directories are there.
    #[tokio::test]
    async fn an_exec_task_without_pivot_root_is_as_confined() {
        let root = tempfile::tempdir().unwrap();
        let test = "an_exec_task_without_pivot_root_is_as_confined";
        let Some(mut iso) = exec_host(test, root.path()) else {
            return;
        };
        iso.exec.no_pivot_root = true;
        let secret = root.path().join("host-only");
        std::fs::write(&secret, "x").unwrap();
        let script = format!(
            "test -e {} && echo host visible; ls -d /local /alloc; echo pids $(ls /proc | grep -c '^[0-9]')",
            secret.display()
        );
        let id = format!("unit-exec-chroot-{}", std::process::id());
        let mut task = launch_exec(&exec_task(&script), root.path(), &iso, &id).await;
        let exit = task.wait().await;
        let out = std::fs::read_to_string(root.path().join(STDOUT_FILE)).unwrap();
        assert!(exit.successful(), "{exit:?} {out}");
        assert!(!out.contains("host visible"), "{out}");
        assert!(out.starts_with("/alloc\n/local\npids "), "{out}");
    }

    /// A raw_exec task launched by a client that can make cgroups gets one: a process it
    /// left in a session of its own dies with it.
    #[tokio::test]
    async fn a_raw_exec_task_s_escapee_dies_with_it() {
        let root = tempfile::tempdir().unwrap();
        let Some(iso) = exec_host("a_raw_exec_task_s_escapee_dies_with_it", root.path()) else {
            return;
        };
        let id = format!("unit-raw-{}", std::process::id());
        let t = raw(
            "/bin/sh",
            &["-c", "(setsid sleep 1000 &) ; sleep 0.2; echo started"],
        );
        let mut task = launch_exec(&t, root.path(), &iso, &id).await;
        let group = task
            .cgroup()
            .cloned()
            .expect("a raw_exec task has a cgroup as root");
        let escapee = || {
            group.pids().into_iter().find(|p| {
                std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| c.starts_with("sleep"))
            })
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut left = escapee();
        while left.is_none() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            left = escapee();
        }
        let left = left.expect("the sleep it left behind");
        let exit = task.wait().await;
        assert!(exit.successful(), "{exit:?}");
        assert_eq!(
            crate::util::procfs::start_ticks(left),
            None,
            "{left} survived its task"
        );
        assert!(group.dirs.iter().all(|d| !d.exists()));
        // Its handle names the group, so a restarted client finds it again.
        assert!(matches!(task.handle(), TaskHandle::Process { cgroup, .. } if !cgroup.is_empty()));
    }

    /// Stopping an exec task kills every process it started, one in a session of its own
    /// included; an exec task over its memory is OOM-killed and says so.
    #[tokio::test]
    async fn an_exec_task_dies_whole_and_its_oom_kill_is_reported() {
        let root = tempfile::tempdir().unwrap();
        let test = "an_exec_task_dies_whole_and_its_oom_kill_is_reported";
        let Some(iso) = exec_host(test, root.path()) else {
            return;
        };
        let id = format!("unit-exec-stop-{}", std::process::id());
        let t = exec_task("(setsid sleep 1000 &) ; sleep 0.2; echo started; sleep 1000");
        let mut task = launch_exec(&t, root.path(), &iso, &id).await;
        let group = task.cgroup().cloned().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let started = || {
            std::fs::read_to_string(root.path().join(STDOUT_FILE))
                .is_ok_and(|o| o.contains("started"))
        };
        while (!started() || group.pids().len() < 4) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let pids = group.pids();
        assert_eq!(pids.len(), 4, "the supervisor, sh and two sleeps: {pids:?}");
        let exit = task.kill(libc::SIGTERM, Duration::from_millis(300)).await;
        assert!(!exit.successful());
        for p in pids {
            assert_eq!(crate::util::procfs::start_ticks(p), None, "{p} survived");
        }
        assert!(group.dirs.iter().all(|d| !d.exists()));

        let id = format!("unit-exec-oom-{}", std::process::id());
        let mut t = exec_task("head -c 300000000 /dev/zero | tail; echo survived");
        t.resources.memory_mb = 32;
        let mut task = launch_exec(&t, root.path(), &iso, &id).await;
        let exit = task.wait().await;
        assert!(exit.oom_killed, "{exit:?}");
    }
}
