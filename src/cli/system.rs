//! `teamster system gc`: garbage-collect now (terminal evaluations, stopped jobs whose
//! allocations are all terminal), whatever the age thresholds, as `nomad system gc`.

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::Value;

use super::{ApiArgs, ApiClient};

/// `system …`.
#[derive(Debug, Subcommand)]
pub enum SystemCommand {
    /// Garbage-collect terminal evaluations and stopped jobs now.
    Gc(GcArgs),
}

/// `system gc`.
#[derive(Debug, Args)]
pub struct GcArgs {
    #[command(flatten)]
    api: ApiArgs,
}

/// Run a `system` command.
pub async fn run(cmd: SystemCommand) -> anyhow::Result<()> {
    match cmd {
        SystemCommand::Gc(a) => {
            let api = ApiClient::new(&a.api.address);
            let done: Value = api
                .request::<(), Value>(reqwest::Method::PUT, "/v1/system/gc", None)
                .await
                .context("starting the garbage collection")?;
            if a.api.json {
                println!("{}", serde_json::to_string_pretty(&done)?);
            }
            Ok(())
        }
    }
}
