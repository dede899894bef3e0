//! `teamster operator autopilot get-config | set-config | health` (Nomad's commands): the
//! leader's autopilot configuration, and the servers' health as it judges them.

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{json, Value};

use super::args::ApiArgs;
use super::output::table;
use crate::api::ApiError;

/// `operator autopilot …`.
#[derive(Debug, Subcommand)]
pub enum AutopilotCommand {
    /// Show the autopilot configuration.
    GetConfig(AutopilotGetArgs),
    /// Change the autopilot configuration.
    SetConfig(AutopilotSetArgs),
    /// Show the servers' health (exit 2 when the cluster is unhealthy).
    Health(AutopilotGetArgs),
}

/// `operator autopilot get-config` and `health`.
#[derive(Debug, Args)]
pub struct AutopilotGetArgs {
    #[command(flatten)]
    api: ApiArgs,
}

/// `operator autopilot set-config`.
#[derive(Debug, Args)]
pub struct AutopilotSetArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Remove servers that stopped answering.
    #[arg(long = "cleanup-dead-servers")]
    cleanup_dead_servers: Option<bool>,
    /// A follower not heard from for longer is unhealthy (`200ms`).
    #[arg(long = "last-contact-threshold")]
    last_contact_threshold: Option<String>,
    /// A follower further behind the leader's log is unhealthy.
    #[arg(long = "max-trailing-logs")]
    max_trailing_logs: Option<u64>,
    /// Never remove a dead server when fewer voters would remain.
    #[arg(long = "min-quorum")]
    min_quorum: Option<u64>,
    /// How long a server must stay healthy to be stable, and dead to be removed (`10s`).
    #[arg(long = "server-stabilization-time")]
    server_stabilization_time: Option<String>,
}

/// Run one `operator autopilot` command.
pub async fn run(cmd: AutopilotCommand) -> anyhow::Result<()> {
    match cmd {
        AutopilotCommand::GetConfig(args) => get_config(args).await,
        AutopilotCommand::SetConfig(args) => set_config(args).await,
        AutopilotCommand::Health(args) => health(args).await,
    }
}

const CONFIG: &str = "/v1/operator/autopilot/configuration";

/// The columns of `health`'s server table (the API's field names).
const COLUMNS: [&str; 10] = [
    "ID",
    "Name",
    "Address",
    "SerfStatus",
    "Voter",
    "Healthy",
    "LastContact",
    "LastTerm",
    "LastIndex",
    "StableSince",
];

async fn get_config(args: AutopilotGetArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let conf: Value = api
        .get(CONFIG)
        .await
        .context("reading the autopilot configuration")?;
    if args.api.structured() {
        return args.api.print(&conf);
    }
    for key in [
        "CleanupDeadServers",
        "LastContactThreshold",
        "MaxTrailingLogs",
        "MinQuorum",
        "ServerStabilizationTime",
        "EnableRedundancyZones",
        "DisableUpgradeMigration",
        "EnableCustomUpgrades",
    ] {
        let v = &conf[key];
        println!(
            "{key} = {}",
            v.as_str().map_or_else(|| v.to_string(), str::to_string)
        );
    }
    Ok(())
}

async fn set_config(args: AutopilotSetArgs) -> anyhow::Result<()> {
    let mut body = serde_json::Map::new();
    if let Some(v) = args.cleanup_dead_servers {
        body.insert("CleanupDeadServers".into(), json!(v));
    }
    for (key, value) in [
        ("LastContactThreshold", &args.last_contact_threshold),
        ("ServerStabilizationTime", &args.server_stabilization_time),
    ] {
        if let Some(v) = value {
            if crate::util::go::parse_go_duration(v).is_none() {
                bail!("invalid duration {v:?} for {key} (use Go's form, such as 200ms or 10s)");
            }
            body.insert(key.into(), json!(v));
        }
    }
    if let Some(v) = args.max_trailing_logs {
        body.insert("MaxTrailingLogs".into(), json!(v));
    }
    if let Some(v) = args.min_quorum {
        body.insert("MinQuorum".into(), json!(v));
    }
    let api = args.api.client()?;
    let _: Value = api
        .request(Method::PUT, CONFIG, Some(&Value::Object(body)))
        .await
        .context("Error updating Autopilot configuration")?;
    println!("Configuration updated!");
    Ok(())
}

async fn health(args: AutopilotGetArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    // An unhealthy cluster answers 429 with the same body.
    let h: Value = match api.get::<Value>("/v1/operator/autopilot/health").await {
        Ok(h) => h,
        Err(ApiError::Status { status, message }) if status.as_u16() == 429 => {
            serde_json::from_str(&message).context("reading the servers' health")?
        }
        Err(e) => return Err(anyhow::Error::new(e).context("reading the servers' health")),
    };
    if args.api.structured() {
        args.api.print(&h)?;
    } else {
        println!("Healthy: {}", h["Healthy"]);
        println!("FailureTolerance: {}", h["FailureTolerance"]);
        println!("Leader: {}", h["Leader"].as_str().unwrap_or_default());
        let mut rows = vec![COLUMNS.map(str::to_string).to_vec()];
        for s in h["Servers"].as_array().into_iter().flatten() {
            let text = |k: &str| {
                s[k].as_str()
                    .map_or_else(|| s[k].to_string(), str::to_string)
            };
            rows.push(COLUMNS.iter().map(|k| text(k)).collect());
        }
        println!("Servers:");
        print!("{}", table(&rows));
    }
    if h["Healthy"] != true {
        std::process::exit(2);
    }
    Ok(())
}
