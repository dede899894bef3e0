//! `teamster operator scheduler …`.

use clap::Subcommand;

use super::scheduler_config::{self, GetConfigArgs, SetConfigArgs};
use super::scheduler_workers::{self, SetWorkersArgs, WorkersArgs};

/// `operator scheduler …`.
#[derive(Debug, Subcommand)]
pub enum SchedulerCommand {
    /// List the contacted server's scheduler workers and what they are doing.
    Workers(WorkersArgs),
    /// Change the contacted server's number of workers or their scheduler types (not
    /// persisted: a restart or SIGHUP goes back to the config file).
    SetWorkers(SetWorkersArgs),
    /// Show the cluster's scheduler configuration.
    GetConfig(GetConfigArgs),
    /// Change the cluster's scheduler configuration (only the given flags change).
    SetConfig(SetConfigArgs),
}

/// Run an `operator scheduler` command.
pub async fn run(cmd: SchedulerCommand) -> anyhow::Result<()> {
    match cmd {
        SchedulerCommand::Workers(args) => scheduler_workers::workers(args).await,
        SchedulerCommand::SetWorkers(args) => scheduler_workers::set_workers(args).await,
        SchedulerCommand::GetConfig(args) => scheduler_config::get_config(args).await,
        SchedulerCommand::SetConfig(args) => scheduler_config::set_config(args).await,
    }
}
