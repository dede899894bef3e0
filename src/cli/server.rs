//! `teamster server members|join|force-leave`: the servers of the cluster and whether they
//! answer; bring a server into the cluster; remove one that does not answer.

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
    /// Join the agent's server to other servers (their RPC addresses): a server in no
    /// cluster is added to this one, or this one to theirs.
    Join(JoinArgs),
    /// Remove a server that does not answer from the raft configuration, by name.
    ForceLeave(ForceLeaveArgs),
}

/// `server join ADDRESS...`.
#[derive(Debug, Args)]
pub struct JoinArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// RPC addresses of servers (`host[:port]`, port 4647 when omitted).
    #[arg(required = true)]
    addresses: Vec<String>,
}

/// `server force-leave [-prune] NODE`.
#[derive(Debug, Args)]
pub struct ForceLeaveArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Remove the server from the member list entirely (as Nomad; there is no gossip list).
    #[arg(long)]
    prune: bool,
    /// The server's name (`server members`).
    node: String,
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
        ServerCommand::Join(args) => join(args).await,
        ServerCommand::ForceLeave(args) => force_leave(args).await,
    }
}

/// Nomad's `server join`: "Joined N servers successfully", an error when none joined.
async fn join(args: JoinArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let query: Vec<String> = args
        .addresses
        .iter()
        .map(|a| {
            format!(
                "address={}",
                form_urlencoded::byte_serialize(a.as_bytes()).collect::<String>()
            )
        })
        .collect();
    let resp: Value = api
        .request(
            reqwest::Method::PUT,
            &format!("/v1/agent/join?{}", query.join("&")),
            None::<&()>,
        )
        .await
        .context("Error joining")?;
    let joined = resp["num_joined"].as_u64().unwrap_or(0);
    let error = resp["error"].as_str().unwrap_or_default();
    match (joined, error.is_empty()) {
        (0, _) => anyhow::bail!("Error joining: {error}"),
        (n, false) => eprintln!("Joined {n} servers successfully but got warning: {error}"),
        (n, true) => println!("Joined {n} servers successfully"),
    }
    Ok(())
}

/// Nomad's `server force-leave`.
async fn force_leave(args: ForceLeaveArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let node: String = form_urlencoded::byte_serialize(args.node.as_bytes()).collect();
    let prune = if args.prune { "&prune=true" } else { "" };
    api.request_text::<()>(
        reqwest::Method::PUT,
        &format!("/v1/agent/force-leave?node={node}{prune}"),
        None,
    )
    .await
    .context("Error force-leaving server")?;
    Ok(())
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
