//! `alloc exec` into a docker task: a command run inside the task's container through the
//! engine's exec API, as `docker exec` runs one.
//!
//! ```text
//!  create (POST /containers/<id>/exec: the command, its streams, a terminal or not)
//!    ─▶ start, attached (POST /exec/<id>/start, upgraded: output frames in, stdin out)
//!    ─▶ resize (POST /exec/<id>/resize) while it runs
//!    ─▶ its output ends ─▶ inspect (GET /exec/<id>/json) until not running: the exit code
//! ```
//!
//! The engine has no call that stops an exec'd command. When the caller goes away first,
//! [`ContainerExec::kill`] sends SIGKILL to the command's host pid and the processes it
//! started, each only after reading `/proc/<pid>/cgroup` shows it in this container (an
//! agent in another pid namespace sees other processes under those numbers, and must not
//! touch them).

use std::pin::Pin;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::query_parameters::ResizeExecOptions;
use bollard::Docker;
use futures::Stream;
use tokio::io::AsyncWrite;
use tracing::{debug, warn};

use super::{engine, Connector, DockerError};

/// How long the engine may take to mark an exec ended once its output has closed.
const EXIT_WAIT: Duration = Duration::from_secs(5);
/// Pause between two looks at an exec that has closed its output but still runs.
const EXIT_POLL: Duration = Duration::from_millis(50);

/// The command's output, as the engine frames it.
pub type ExecOutput = Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;
/// The command's standard input.
pub type ExecInput = Pin<Box<dyn AsyncWrite + Send>>;

/// An exec created in a container, not yet started.
pub struct CreatedExec {
    docker: Docker,
    id: String,
    container_id: String,
    tty: bool,
}

impl std::fmt::Debug for CreatedExec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedExec")
            .field("id", &self.id)
            .field("container_id", &self.container_id)
            .field("tty", &self.tty)
            .finish()
    }
}

/// A running exec: its id, to resize, inspect and kill it.
#[derive(Clone)]
pub struct ContainerExec {
    docker: Docker,
    id: String,
    container_id: String,
}

/// Creates the exec of `argv` in `container_id` (a terminal with `tty`, else stdout and
/// stderr apart), with stdin attached. Fails when the container is gone or not running.
pub async fn create(
    connector: &Connector,
    container_id: &str,
    argv: &[String],
    tty: bool,
) -> Result<CreatedExec, DockerError> {
    let docker = connector.get().await?;
    let options = CreateExecOptions::<String> {
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(tty),
        cmd: Some(argv.to_vec()),
        ..CreateExecOptions::default()
    };
    let created = docker
        .create_exec(container_id, options)
        .await
        .map_err(engine("create exec"))?;
    debug!(container_id, exec_id = %created.id, tty, "exec created");
    Ok(CreatedExec {
        docker,
        id: created.id,
        container_id: container_id.to_string(),
        tty,
    })
}

impl CreatedExec {
    /// Whether it runs with a terminal.
    pub fn tty(&self) -> bool {
        self.tty
    }

    /// Starts it attached: its output frames, its stdin, and the handle that resizes,
    /// inspects and kills it.
    pub async fn start(self) -> Result<(ContainerExec, ExecOutput, ExecInput), DockerError> {
        let options = StartExecOptions {
            detach: false,
            tty: self.tty,
            output_capacity: None,
        };
        match self
            .docker
            .start_exec(&self.id, Some(options))
            .await
            .map_err(engine("start exec"))?
        {
            StartExecResults::Attached { output, input } => Ok((
                ContainerExec {
                    docker: self.docker,
                    id: self.id,
                    container_id: self.container_id,
                },
                output,
                input,
            )),
            StartExecResults::Detached => Err(DockerError::Engine {
                call: "start exec",
                source: bollard::errors::Error::IOError {
                    err: std::io::Error::other("the engine started the exec detached"),
                },
            }),
        }
    }
}

impl ContainerExec {
    /// Sets its terminal's size.
    pub async fn resize(&self, rows: u16, cols: u16) -> Result<(), DockerError> {
        self.docker
            .resize_exec(
                &self.id,
                ResizeExecOptions {
                    h: i32::from(rows),
                    w: i32::from(cols),
                },
            )
            .await
            .map_err(engine("resize exec"))
    }

    /// Its exit code, once its output has ended: the engine may mark it ended a moment
    /// later, so it is asked again for a while. `None` when it cannot be told.
    pub async fn exit_code(&self) -> Option<i64> {
        let deadline = tokio::time::Instant::now() + EXIT_WAIT;
        loop {
            match self.docker.inspect_exec(&self.id).await {
                Ok(r) if r.running != Some(true) => return r.exit_code,
                Ok(_) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(EXIT_POLL).await
                }
                Ok(_) => return None,
                Err(e) => {
                    debug!(exec_id = %self.id, error = %e, "cannot inspect the exec");
                    return None;
                }
            }
        }
    }

    /// Stops it if it still runs: SIGKILL to its host pid and its descendants, each seen to
    /// be a process of its container. Best effort: the engine offers nothing better.
    pub async fn kill(&self) {
        let pid = match self.docker.inspect_exec(&self.id).await {
            Ok(r) if r.running == Some(true) => r.pid.unwrap_or(0),
            Ok(_) => return,
            Err(e) => {
                warn!(exec_id = %self.id, error = %e, "cannot inspect the exec to kill it");
                return;
            }
        };
        let Ok(pid) = i32::try_from(pid) else {
            return;
        };
        if pid <= 0 {
            return;
        }
        let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
        if !in_container(&cgroup, &self.container_id) {
            warn!(exec_id = %self.id, pid, "the exec's pid is not visible here; left running");
            return;
        }
        // The command and what it started (the engine puts an exec in no group of its own);
        // each is checked to be in the container still.
        let tree = crate::util::procfs::tree_of(pid);
        for p in &tree {
            let cgroup = std::fs::read_to_string(format!("/proc/{p}/cgroup")).unwrap_or_default();
            if in_container(&cgroup, &self.container_id) {
                // SAFETY: kill(2) has no memory effects; the pid was just seen in the
                // container's cgroup.
                unsafe {
                    libc::kill(*p, libc::SIGKILL);
                }
            }
        }
        debug!(exec_id = %self.id, pid, ?tree, "exec killed: its caller went away");
    }
}

/// Whether a `/proc/<pid>/cgroup` text puts the process in the container (its full id in
/// a cgroup path: `/docker/<id>`, `docker-<id>.scope`, cgroup v1 or v2).
pub fn in_container(cgroup: &str, container_id: &str) -> bool {
    container_id.len() >= 12
        && cgroup.lines().any(|line| {
            let path = line.splitn(3, ':').nth(2).unwrap_or_default();
            path.split('/').any(|part| {
                part == container_id
                    || part
                        .strip_prefix("docker-")
                        .and_then(|p| p.strip_suffix(".scope"))
                        == Some(container_id)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_in_the_container_only_by_its_full_id_in_a_cgroup_path() {
        let id = "4f1c0e8d2b7a9c3e5d6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d";
        let v1 = format!("12:pids:/docker/{id}\n11:memory:/docker/{id}\n");
        let v2 = format!("0::/system.slice/docker-{id}.scope\n");
        assert!(in_container(&v1, id));
        assert!(in_container(&v2, id));
        assert!(!in_container("0::/user.slice/session-1.scope\n", id));
        // A prefix of the id, or the id inside another name, is not it.
        assert!(!in_container(&format!("0::/docker/{id}x\n"), id));
        assert!(!in_container(&v1, &id[..11]));
        assert!(!in_container(&format!("0::/docker/{}\n", &id[..12]), id));
    }
}
