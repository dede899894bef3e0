//! `teamster operator …`: raft peers; the root keyring; snapshots (in `snapshot.rs`).

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
    /// The root keyring (the keys that sign workload identities).
    #[command(subcommand)]
    Root(RootCommand),
    /// Autopilot: its configuration and the servers' health.
    #[command(subcommand)]
    Autopilot(super::autopilot::AutopilotCommand),
}

/// `operator root …`.
#[derive(Debug, Subcommand)]
pub enum RootCommand {
    /// List, rotate and remove root keys.
    #[command(subcommand)]
    Keyring(KeyringCommand),
}

/// `operator root keyring …`.
#[derive(Debug, Subcommand)]
pub enum KeyringCommand {
    /// List the root keys.
    List(KeyringListArgs),
    /// Make a new root key: active at once (`-now`) or prepublished (`-prepublish <dur>`).
    Rotate(KeyringRotateArgs),
    /// Remove a root key (not the active one).
    Remove(KeyringRemoveArgs),
}

/// `operator root keyring list`.
#[derive(Debug, Args)]
pub struct KeyringListArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Show full key IDs.
    #[arg(long)]
    verbose: bool,
}

/// `operator root keyring rotate`.
#[derive(Debug, Args)]
pub struct KeyringRotateArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Activate the new key at once (a leaked key).
    #[arg(long)]
    now: bool,
    /// Publish the new key in the JWKS for this long before it becomes active (`1h`).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    prepublish: Option<std::time::Duration>,
    /// Re-encrypt every variable with the new key (refused: there are no variables yet).
    #[arg(long)]
    full: bool,
    /// Show full key IDs.
    #[arg(long)]
    verbose: bool,
}

/// `operator root keyring remove`.
#[derive(Debug, Args)]
pub struct KeyringRemoveArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// The key's ID or a unique prefix of it.
    key_id: String,
}

/// A root key's metadata, as `/v1/operator/keyring/keys` lists it.
#[derive(Debug, Deserialize, serde::Serialize)]
#[serde(rename_all = "PascalCase")]
pub struct RootKeyMeta {
    /// Its ID.
    #[serde(rename = "KeyID")]
    pub key_id: String,
    /// `active`, `inactive`, `prepublished`.
    pub state: String,
    /// Unix nanoseconds.
    pub create_time: i64,
    /// Unix nanoseconds (0: none).
    #[serde(default)]
    pub publish_time: i64,
}

/// Nomad's table of keys: `Key  State  Create Time  Publish Time`.
fn keys_table(keys: &[RootKeyMeta], verbose: bool) -> String {
    let time = |t: i64| {
        if t > 0 {
            super::output::unix_nanos(&serde_json::json!(t))
        } else {
            String::new()
        }
    };
    let mut rows = vec![vec![
        "Key".to_string(),
        "State".to_string(),
        "Create Time".to_string(),
        "Publish Time".to_string(),
    ]];
    for k in keys {
        let id = if verbose {
            k.key_id.clone()
        } else {
            k.key_id.chars().take(8).collect()
        };
        rows.push(vec![
            id,
            k.state.clone(),
            time(k.create_time),
            time(k.publish_time),
        ]);
    }
    table(&rows)
}

async fn keyring(cmd: KeyringCommand) -> anyhow::Result<()> {
    match cmd {
        KeyringCommand::List(args) => {
            let api = args.api.client()?;
            let keys: Vec<RootKeyMeta> = api
                .get("/v1/operator/keyring/keys")
                .await
                .context("listing the root keys")?;
            if args.api.structured() {
                return args.api.print(&keys);
            }
            print!("{}", keys_table(&keys, args.verbose));
            Ok(())
        }
        KeyringCommand::Rotate(args) => {
            if args.now == args.prepublish.is_some() {
                anyhow::bail!(
                    "One of \"-now\" or \"-prepublish\" must be used.\n\nIf a key has been leaked use \"-now\" to force immediate rotation.\n\nOtherwise please use \"-prepublish <duration>\" to ensure the new key is not used\nto sign workload identities before JWKS endpoints are updated."
                );
            }
            let mut query = Vec::new();
            if let Some(d) = args.prepublish {
                let at = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)?
                    .saturating_add(d);
                query.push(format!("publish_time={}", at.as_nanos()));
            }
            if args.full {
                query.push("full=true".to_string());
            }
            let path = format!("/v1/operator/keyring/rotate?{}", query.join("&"));
            #[derive(Deserialize)]
            #[serde(rename_all = "PascalCase")]
            struct Rotated {
                key: RootKeyMeta,
            }
            let api = args.api.client()?;
            let done: Rotated = api
                .request(Method::PUT, &path, None::<&()>)
                .await
                .context("rotating the root key")?;
            if args.api.structured() {
                return args.api.print(&done.key);
            }
            print!("{}", keys_table(&[done.key], args.verbose));
            Ok(())
        }
        KeyringCommand::Remove(args) => {
            let api = args.api.client()?;
            let mut key_id = args.key_id.clone();
            if !teamster_storage::model::is_uuid(&key_id) {
                let keys: Vec<RootKeyMeta> = api
                    .get("/v1/operator/keyring/keys")
                    .await
                    .context("listing the root keys")?;
                let matches: Vec<RootKeyMeta> = keys
                    .into_iter()
                    .filter(|k| k.key_id.starts_with(&key_id))
                    .collect();
                match matches.len() {
                    0 => anyhow::bail!("No encryption key(s) with prefix or ID {key_id:?} found"),
                    1 => key_id = matches[0].key_id.clone(),
                    _ => anyhow::bail!(
                        "Prefix matched multiple keys\n\n{}",
                        keys_table(&matches, true)
                    ),
                }
            }
            api.request_text::<()>(
                Method::DELETE,
                &format!("/v1/operator/keyring/key/{key_id}"),
                None,
            )
            .await
            .context("removing the root key")?;
            println!("Removed encryption key {key_id}");
            Ok(())
        }
    }
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
        OperatorCommand::Root(RootCommand::Keyring(cmd)) => keyring(cmd).await,
        OperatorCommand::Autopilot(cmd) => super::autopilot::run(cmd).await,
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
