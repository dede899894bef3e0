//! `teamster system gc`: garbage-collect now (terminal evaluations, stopped jobs whose
//! allocations are all terminal), whatever the age thresholds, as `nomad system gc`; and
//! `teamster system reconcile summaries`: recompute every job's summary from its
//! allocations, as `nomad system reconcile summaries`.

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::Value;

use super::args::ApiArgs;

/// `system …`.
#[derive(Debug, Subcommand)]
pub enum SystemCommand {
    /// Garbage-collect terminal evaluations and stopped jobs now.
    Gc(GcArgs),
    /// Reconcile what the cluster keeps with what it knows.
    #[command(subcommand)]
    Reconcile(ReconcileCommand),
}

/// `system reconcile …`.
#[derive(Debug, Subcommand)]
pub enum ReconcileCommand {
    /// Recompute every job's summary from its allocations.
    Summaries(GcArgs),
}

/// `system gc`, `system reconcile summaries`.
#[derive(Debug, Args)]
pub struct GcArgs {
    #[command(flatten)]
    api: ApiArgs,
}

/// Run a `system` command.
pub async fn run(cmd: SystemCommand) -> anyhow::Result<()> {
    match cmd {
        SystemCommand::Gc(a) => {
            let api = a.api.client()?;
            let done: Value = api
                .request::<(), Value>(reqwest::Method::PUT, "/v1/system/gc", None)
                .await
                .context("starting the garbage collection")?;
            if a.api.structured() {
                a.api.print(&done)?;
            }
            Ok(())
        }
        SystemCommand::Reconcile(ReconcileCommand::Summaries(a)) => {
            let api = a.api.client()?;
            api.request_text::<()>(reqwest::Method::PUT, "/v1/system/reconcile/summaries", None)
                .await
                .context("reconciling the job summaries")?;
            Ok(())
        }
    }
}
