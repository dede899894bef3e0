//! `teamster server members`: the servers of the cluster and whether they answer.

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::Value;

use super::args::ApiArgs;
use super::output::table;

/// `server …`.
#[derive(Debug, Subcommand)]
pub enum ServerCommand {
    /// List the servers of the cluster with their status, leader and voter flags.
    Members(MembersArgs),
}

/// `server members`.
#[derive(Debug, Args)]
pub struct MembersArgs {
    #[command(flatten)]
    api: ApiArgs,
}

/// Run one `server` command.
pub async fn run(cmd: ServerCommand) -> anyhow::Result<()> {
    match cmd {
        ServerCommand::Members(args) => members(args).await,
    }
}

async fn members(args: MembersArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let resp: Value = api
        .get("/v1/agent/members")
        .await
        .context("reading the members")?;
    if args.api.structured() {
        args.api.print(&resp)?;
        return Ok(());
    }
    let mut rows = vec![vec![
        "Name".to_string(),
        "Address".into(),
        "Port".into(),
        "Status".into(),
        "Leader".into(),
        "Voter".into(),
        "ID".into(),
    ]];
    for m in resp["Members"].as_array().into_iter().flatten() {
        let tag = |k: &str| m["Tags"][k].as_str().unwrap_or_default().to_string();
        rows.push(vec![
            m["Name"].as_str().unwrap_or_default().to_string(),
            m["Addr"].as_str().unwrap_or_default().to_string(),
            m["Port"].to_string(),
            m["Status"].as_str().unwrap_or_default().to_string(),
            tag("leader"),
            tag("voter"),
            tag("id"),
        ]);
    }
    print!("{}", table(&rows));
    Ok(())
}
