//! `teamster operator scheduler …`: the scheduler configuration (`get-config`, `set-config`,
//! in `scheduler_config.rs`) and a server's scheduler workers (`workers`, `set-workers`, in
//! `scheduler_workers.rs`).

use clap::Subcommand;

use super::scheduler_config::{self, SchedulerConfigCommand};
use super::scheduler_workers::{self, SetWorkersArgs, WorkersArgs};

/// `operator scheduler …`.
#[derive(Debug, Subcommand)]
pub enum SchedulerCommand {
    /// `get-config`, `set-config`.
    #[command(flatten)]
    Config(SchedulerConfigCommand),
    /// List the contacted server's scheduler workers and what they are doing.
    Workers(WorkersArgs),
    /// Change the contacted server's number of workers or their scheduler types (not
    /// persisted: a restart or SIGHUP goes back to the config file).
    SetWorkers(SetWorkersArgs),
}

/// Run an `operator scheduler` command.
pub async fn run(cmd: SchedulerCommand) -> anyhow::Result<()> {
    match cmd {
        SchedulerCommand::Config(cmd) => scheduler_config::run(cmd).await,
        SchedulerCommand::Workers(args) => scheduler_workers::workers(args).await,
        SchedulerCommand::SetWorkers(args) => scheduler_workers::set_workers(args).await,
    }
}
