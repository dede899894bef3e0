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
//! - `mock` runs for `Config.run_for` (`"5s"` or nanoseconds) and exits with
//!   `Config.exit_code`; its handle holds its start time, so it re-attaches too.
//! - `docker` runs a container of an image already on the node; its handle is the container
//!   id. [`launch`] and [`find_again`] reach every driver; [`start`] and [`reattach`] the two
//!   that need no engine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use teamster_storage::model::{ConfigValue, Task};

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
    /// The docker driver could not start the container.
    #[error(transparent)]
    Docker(#[from] crate::client::docker::DockerError),
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitResult {
    /// The exit code (0 when killed by a signal).
    pub exit_code: i64,
    /// The signal that killed it (0: none).
    pub signal: i64,
    /// Set when the exit status could not be observed (re-attached task).
    pub unknown: bool,
}

impl ExitResult {
    /// Exit code 0 and no signal.
    pub fn successful(&self) -> bool {
        self.exit_code == 0 && self.signal == 0
    }
}

/// What a restarted client needs to find a running task again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskHandle {
    /// A `raw_exec` process.
    Process {
        /// Its pid (and process group id).
        pid: i32,
        /// Its start time in clock ticks since boot (`/proc/<pid>/stat` field 22), so a reused
        /// pid is not mistaken for it.
        start_ticks: u64,
    },
    /// A `mock` task.
    Mock {
        /// When it started, Unix nanoseconds.
        started_at: i64,
        /// How long it runs, nanoseconds.
        run_for: u64,
        /// Its exit code.
        exit_code: i64,
    },
    /// A `docker` container (added last: handles are persisted).
    Docker {
        /// The container's id.
        container_id: String,
    },
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
    },
    /// A process started by an earlier run of this client.
    Reattached {
        /// Its pid.
        pid: i32,
        /// Its start time.
        start_ticks: u64,
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
pub const DRIVERS: &[&str] = &["raw_exec", "mock", "docker"];

/// Where a task's stdout goes, relative to its task directory.
pub const STDOUT_FILE: &str = "stdout.log";
/// Where a task's stderr goes, relative to its task directory.
pub const STDERR_FILE: &str = "stderr.log";

/// Start `task` in `dir` (created if missing). `now_unix_nanos` stamps mock handles.
pub fn start(
    task: &Task,
    dir: &Path,
    enabled: &[String],
    now_unix_nanos: i64,
) -> Result<RunningTask, DriverError> {
    if !enabled.contains(&task.driver) {
        return Err(DriverError::Unknown(task.driver.clone()));
    }
    std::fs::create_dir_all(dir).map_err(|source| DriverError::Dir {
        path: dir.to_path_buf(),
        source,
    })?;
    match task.driver.as_str() {
        "raw_exec" => start_process(task, dir),
        "docker" => Err(DriverError::BadConfig(
            "docker tasks are started with driver::launch".into(),
        )),
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
}

/// Start `task` in `dir` with whichever driver it names.
pub async fn launch(
    task: &Task,
    dir: &Path,
    ctx: LaunchContext<'_>,
    now_unix_nanos: i64,
) -> Result<RunningTask, DriverError> {
    if task.driver != "docker" {
        return start(task, dir, ctx.enabled, now_unix_nanos);
    }
    if !ctx.enabled.contains(&task.driver) {
        return Err(DriverError::Unknown(task.driver.clone()));
    }
    let place = crate::client::docker::TaskPlace {
        task_dir: dir,
        alloc_dir: ctx.alloc_dir,
        alloc_id: ctx.alloc_id,
        job_name: ctx.job_name,
        node_id: ctx.node_id,
        ports: ctx.ports,
    };
    let started = crate::client::docker::start(ctx.docker, task, place).await?;
    Ok(RunningTask::Docker(started))
}

/// Find a task again after a client restart, whichever its driver: `None` when it is no
/// longer there.
pub async fn find_again(
    handle: &TaskHandle,
    task: &Task,
    dir: &Path,
    docker: &crate::client::docker::Connector,
    now_unix_nanos: i64,
) -> Option<RunningTask> {
    match handle {
        TaskHandle::Docker { container_id } => {
            let kill_signal = if task.kill_signal.is_empty() {
                "SIGTERM".to_string()
            } else {
                task.kill_signal.clone()
            };
            crate::client::docker::reattach(
                docker,
                container_id,
                dir,
                kill_signal,
                now_unix_nanos / 1_000_000_000,
            )
            .await
            .map(RunningTask::Docker)
        }
        other => reattach(other, now_unix_nanos),
    }
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

fn start_process(task: &Task, dir: &Path) -> Result<RunningTask, DriverError> {
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
    let open = |name: &str| {
        let path = dir.join(name);
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| DriverError::Dir { path, source })
    };
    let stdout = open(STDOUT_FILE)?;
    let stderr = open(STDERR_FILE)?;
    let mut cmd = task_command(task, dir, &command, &args);
    cmd.stdin(std::process::Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .kill_on_drop(false);
    let child = cmd.spawn().map_err(|source| DriverError::Spawn {
        command: command.clone(),
        source,
    })?;
    let pid = child.id().map(|p| p as i32).unwrap_or(0);
    let start_ticks = proc_start_ticks(pid).unwrap_or(0);
    Ok(RunningTask::Child {
        child,
        pid,
        start_ticks,
    })
}

/// `program` with `args` as a `raw_exec` process of `task` runs: in its directory, with its
/// environment (also what `alloc exec` runs in the task's place).
pub fn task_command(
    task: &Task,
    dir: &Path,
    program: &str,
    args: &[String],
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .envs(&task.env)
        .env("NOMAD_TASK_DIR", dir)
        .env("NOMAD_TASK_NAME", &task.name)
        .current_dir(dir);
    cmd
}

/// The kernel start time of `pid`, if it is alive and not a zombie.
fn proc_start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after it follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); field 22 is rest[19].
    if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// Find a task again after a client restart: `None` when it is no longer running.
pub fn reattach(handle: &TaskHandle, now_unix_nanos: i64) -> Option<RunningTask> {
    match handle {
        TaskHandle::Process { pid, start_ticks } => {
            let alive = *pid > 0 && proc_start_ticks(*pid) == Some(*start_ticks);
            alive.then_some(RunningTask::Reattached {
                pid: *pid,
                start_ticks: *start_ticks,
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
                pid, start_ticks, ..
            }
            | RunningTask::Reattached { pid, start_ticks } => TaskHandle::Process {
                pid: *pid,
                start_ticks: *start_ticks,
            },
            RunningTask::Mock { handle, .. } => handle.clone(),
            RunningTask::Docker(d) => TaskHandle::Docker {
                container_id: d.container_id.clone(),
            },
        }
    }

    /// Wait for the task to exit.
    pub async fn wait(&mut self) -> ExitResult {
        match self {
            RunningTask::Child { child, .. } => match child.wait().await {
                Ok(status) => {
                    use std::os::unix::process::ExitStatusExt;
                    ExitResult {
                        exit_code: status.code().unwrap_or(0) as i64,
                        signal: status.signal().unwrap_or(0) as i64,
                        unknown: false,
                    }
                }
                Err(_) => ExitResult {
                    exit_code: -1,
                    signal: 0,
                    unknown: true,
                },
            },
            RunningTask::Reattached { pid, start_ticks } => {
                while proc_start_ticks(*pid) == Some(*start_ticks) {
                    tokio::time::sleep(REATTACHED_POLL).await;
                }
                ExitResult {
                    exit_code: 0,
                    signal: 0,
                    unknown: true,
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

    /// Stop the task: SIGTERM to its process group (a container: its kill signal), SIGKILL
    /// after `kill_timeout` if it has not exited. Returns how it ended.
    pub async fn kill(&mut self, kill_timeout: Duration) -> ExitResult {
        let pid = match self {
            RunningTask::Docker(d) => return d.kill(kill_timeout).await,
            RunningTask::Child { pid, .. } | RunningTask::Reattached { pid, .. } => *pid,
            RunningTask::Mock { .. } => {
                return ExitResult {
                    exit_code: 0,
                    signal: libc::SIGTERM as i64,
                    unknown: false,
                }
            }
        };
        signal_group(pid, libc::SIGTERM);
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
        let mut task = start(&t, dir.path(), &drivers(), 0).unwrap();
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
        let mut task = start(&t, dir.path(), &drivers(), 0).unwrap();
        assert!(task.wait().await.successful());
        let out = std::fs::read_to_string(dir.path().join(STDOUT_FILE)).unwrap();
        let canon = dir.path().canonicalize().unwrap();
        assert_eq!(out, format!("hi\n{}\n", canon.display()));
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
        let mut task = start(&t, dir.path(), &drivers(), 0).unwrap();
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
        let mut task = start(&t, dir.path(), &drivers(), 0).unwrap();
        let started = std::time::Instant::now();
        let exit = task.kill(Duration::from_secs(5)).await;
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
        let mut task = start(&t, dir.path(), &drivers(), 0).unwrap();
        // Wait until the trap is installed.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::fs::read_to_string(dir.path().join(STDOUT_FILE)).unwrap_or_default() != "ready\n"
        {
            assert!(std::time::Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let started = std::time::Instant::now();
        let exit = task.kill(Duration::from_millis(300)).await;
        assert_eq!(exit.signal, libc::SIGKILL as i64);
        assert!(started.elapsed() >= Duration::from_millis(300));
    }

    #[tokio::test]
    async fn a_running_process_is_found_again_and_a_dead_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let t = raw("/bin/sleep", &["30"]);
        let mut task = start(&t, dir.path(), &drivers(), 0).unwrap();
        let handle = task.handle();
        let mut again = reattach(&handle, 0).expect("still running");
        assert!(matches!(again, RunningTask::Reattached { .. }));
        let exit = again.kill(Duration::from_secs(5)).await;
        assert!(exit.unknown);
        let _ = task.wait().await;
        assert!(reattach(&handle, 0).is_none());
    }

    #[tokio::test]
    async fn unknown_drivers_and_bad_configs_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = raw("/bin/true", &[]);
        t.driver = "qemu".into();
        assert!(matches!(
            start(&t, dir.path(), &drivers(), 0),
            Err(DriverError::Unknown(_))
        ));
        let mut t = raw("", &[]);
        t.config.remove("command");
        assert!(matches!(
            start(&t, dir.path(), &drivers(), 0),
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
        let mut task = start(&t, dir.path(), &drivers(), 1_000).unwrap();
        let exit = task.wait().await;
        assert_eq!(exit.exit_code, 2);
        assert_eq!(start_at.elapsed(), Duration::from_secs(10));
        let h = task.handle();
        assert!(reattach(&h, 1_000 + 4_000_000_000).is_some());
        assert!(reattach(&h, 1_000 + 10_000_000_000).is_none());
    }
}
