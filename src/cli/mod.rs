//! The command line, in the style of the nomad CLI with clap's double-dash flags. One file per
//! command group; this file only parses and dispatches. Commands that talk to a cluster use
//! the HTTP API at `--address` / `TEAMSTER_ADDR` (default `http://127.0.0.1:4646`).
//!
//! Exit codes: 0 success, 1 an error (printed as one line, no backtrace), 2 bad usage.

mod agent;
mod alloc_logs;
mod eval;
mod job;
mod job_dispatch;
mod job_plan;
mod node;
mod operator;
mod output;
mod scheduler;
mod scheduler_config;
mod scheduler_workers;
mod server;
mod snapshot;
mod status;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::api::{ApiClient, ApiError};

/// teamster: a cluster workload scheduler.
#[derive(Debug, Parser)]
#[command(name = "teamster", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run an agent: a server, a client, or both (`--dev`).
    Agent(agent::AgentArgs),
    /// Jobs: run, status, stop, inspect, validate.
    #[command(subcommand)]
    Job(job::JobCommand),
    /// Client nodes: status, eligibility, drain.
    #[command(subcommand)]
    Node(node::NodeCommand),
    /// Servers: members of the server cluster.
    #[command(subcommand)]
    Server(server::ServerCommand),
    /// Operator commands: raft peers, snapshots, the scheduler.
    #[command(subcommand)]
    Operator(operator::OperatorCommand),
    /// Show the cluster's leader and peers.
    Status(status::StatusArgs),
    /// Evaluations: list, status.
    #[command(subcommand)]
    Eval(eval::EvalCommand),
    /// Allocations: status, task logs.
    #[command(subcommand)]
    Alloc(eval::AllocCommand),
}

/// Flags shared by every command that talks to the HTTP API.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// The HTTP API of any server.
    #[arg(
        long,
        env = "TEAMSTER_ADDR",
        default_value = "http://127.0.0.1:4646",
        global = true
    )]
    pub address: String,
    /// Print machine-readable JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
}

/// Parse the command line and run one command.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Agent(args) => agent::run(args),
        Command::Job(cmd) => run_api_code(|| job::run(cmd)),
        Command::Server(cmd) => run_api(|| server::run(cmd)),
        Command::Operator(cmd) => run_api(|| operator::run(cmd)),
        Command::Status(args) => run_api(|| status::run(args)),
        Command::Eval(cmd) => run_api(|| eval::run_eval(cmd)),
        Command::Alloc(cmd) => run_api(|| eval::run_alloc(cmd)),
        Command::Node(cmd) => run_api(|| node::run(cmd)),
    }
}

/// Run an API command on a small runtime and turn its error into one line and exit code 1.
fn run_api<F, Fut>(f: F) -> ExitCode
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    run_api_code(|| async { f().await.map(|()| ExitCode::SUCCESS) })
}

/// Like [`run_api`], for commands that choose their own exit code.
fn run_api_code<F, Fut>(f: F) -> ExitCode
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<ExitCode>>,
{
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("Error: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(f()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("Error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// clap checks every command's definition (unique names, no clash with `--version` or
    /// `--help`, valid defaults) only when it is built; a clash is a panic at run time.
    #[test]
    fn every_command_definition_is_valid() {
        Cli::command().debug_assert();
    }
}
