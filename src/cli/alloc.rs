//! `teamster alloc …`: the dispatch of the allocation commands to their files
//! (`alloc_status`, `alloc_logs`, `alloc_fs`, `alloc_ops`, `alloc_exec`).

use std::process::ExitCode;

use clap::Subcommand;

/// `alloc …`.
#[derive(Debug, Subcommand)]
pub enum AllocCommand {
    /// Show one allocation (an ID or a unique ID prefix).
    Status(super::alloc_status::StatusArgs),
    /// Print a task's log (stdout, or stderr with `--stderr`).
    Logs(super::alloc_logs::LogsArgs),
    /// List, print, stat or follow a file of an allocation's directory.
    Fs(super::alloc_fs::FsArgs),
    /// Stop an allocation and place a replacement; follows the evaluation unless `-detach`.
    Stop(super::alloc_ops::StopArgs),
    /// Restart an allocation's tasks in place (every running one unless a task is named).
    Restart(super::alloc_ops::RestartArgs),
    /// Send a signal to an allocation's tasks (SIGKILL unless `-s` names one).
    Signal(super::alloc_ops::SignalArgs),
    /// Run a command in the place of a running task; exits with the command's code.
    Exec(super::alloc_exec::ExecArgs),
}

/// Run an `alloc` command; the exit code is 0, 1 (an error) or 2 (`alloc stop` whose
/// replacement could not be placed), or the command's own for `alloc exec`.
pub async fn run_alloc(cmd: AllocCommand) -> anyhow::Result<ExitCode> {
    let done = match cmd {
        AllocCommand::Status(args) => super::alloc_status::status(args).await,
        AllocCommand::Logs(args) => super::alloc_logs::logs(args).await,
        AllocCommand::Fs(args) => super::alloc_fs::fs(args).await,
        AllocCommand::Stop(args) => return super::alloc_ops::stop(args).await,
        AllocCommand::Restart(args) => return super::alloc_ops::restart(args).await,
        AllocCommand::Signal(args) => return super::alloc_ops::signal(args).await,
        AllocCommand::Exec(args) => return super::alloc_exec::exec(args).await,
    };
    done.map(|()| ExitCode::SUCCESS)
}
