//! `teamster operator …`: raft peers; snapshots (in `snapshot.rs`).

use anyhow::Context;
use clap::{Args, Subcommand};
use reqwest::Method;
use serde::Deserialize;

use super::args::ApiArgs;
use super::output::table;

/// Operator command groups.
#[derive(Debug, Subcommand)]
pub enum OperatorCommand {
    /// Raft peers of the server cluster.
    #[command(subcommand)]
    Raft(RaftCommand),
    /// Save the cluster's state to a file, or restore it.
    #[command(subcommand)]
    Snapshot(super::snapshot::SnapshotCommand),
    /// The scheduler workers of a server.
    #[command(subcommand)]
    Scheduler(super::scheduler::SchedulerCommand),
}

/// `operator raft …`.
#[derive(Debug, Subcommand)]
pub enum RaftCommand {
    /// List the raft peers and their roles.
    ListPeers(ListPeersArgs),
    /// Remove a (dead) server from the raft configuration.
    RemovePeer(RemovePeerArgs),
}

/// `operator raft list-peers`.
#[derive(Debug, Args)]
pub struct ListPeersArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Answer from the contacted server's local state, even without a leader.
    #[arg(long)]
    stale: bool,
}

/// `operator raft remove-peer`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("peer").required(true).args(["peer_address", "peer_id"])))]
pub struct RemovePeerArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// The peer's raft (RPC) address, `ip:port`.
    #[arg(long = "peer-address", value_name = "ADDR")]
    peer_address: Option<String>,
    /// The peer's raft ID.
    #[arg(long = "peer-id", visible_alias = "id", value_name = "ID")]
    peer_id: Option<String>,
}

/// `/v1/operator/raft/configuration`.
#[derive(Debug, Deserialize, serde::Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct RaftConfiguration {
    /// The servers.
    pub servers: Vec<RaftServer>,
    /// The raft index of the configuration.
    pub index: u64,
}

/// One server of the raft configuration.
#[derive(Debug, Deserialize, serde::Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct RaftServer {
    /// The raft ID.
    #[serde(rename = "ID")]
    pub id: String,
    /// The server's name.
    pub node: String,
    /// The raft (RPC) address.
    pub address: String,
    /// Whether it is the leader.
    pub leader: bool,
    /// Whether it votes.
    pub voter: bool,
    /// Always "3".
    pub raft_protocol: String,
}

/// Run an operator command.
pub async fn run(cmd: OperatorCommand) -> anyhow::Result<()> {
    match cmd {
        OperatorCommand::Raft(RaftCommand::ListPeers(args)) => list_peers(args).await,
        OperatorCommand::Raft(RaftCommand::RemovePeer(args)) => remove_peer(args).await,
        OperatorCommand::Snapshot(cmd) => super::snapshot::run(cmd).await,
        OperatorCommand::Scheduler(cmd) => super::scheduler::run(cmd).await,
    }
}

async fn list_peers(args: ListPeersArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let path = if args.stale {
        "/v1/operator/raft/configuration?stale=true"
    } else {
        "/v1/operator/raft/configuration"
    };
    let conf: RaftConfiguration = api
        .get(path)
        .await
        .context("reading the raft configuration")?;
    if args.api.structured() {
        args.api.print(&conf)?;
        return Ok(());
    }
    let mut rows = vec![vec![
        "Node".to_string(),
        "ID".to_string(),
        "Address".to_string(),
        "State".to_string(),
        "Voter".to_string(),
        "RaftProtocol".to_string(),
    ]];
    for s in &conf.servers {
        rows.push(vec![
            s.node.clone(),
            s.id.clone(),
            s.address.clone(),
            if s.leader { "leader" } else { "follower" }.to_string(),
            s.voter.to_string(),
            s.raft_protocol.clone(),
        ]);
    }
    print!("{}", table(&rows));
    Ok(())
}

async fn remove_peer(args: RemovePeerArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let query = match (&args.peer_address, &args.peer_id) {
        (Some(a), _) => format!("address={a}"),
        (None, Some(id)) => format!("id={id}"),
        (None, None) => unreachable!("clap requires one of --peer-address and --peer-id"),
    };
    api.request_text::<()>(
        Method::DELETE,
        &format!("/v1/operator/raft/peer?{query}"),
        None,
    )
    .await
    .context("removing the peer")?;
    let who = args.peer_address.or(args.peer_id).unwrap_or_default();
    println!("Removed peer {who}");
    Ok(())
}
