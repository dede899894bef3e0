//! `teamster status`: the cluster's leader and peers.

use anyhow::Context;
use clap::Args;

use super::{ApiArgs, ApiClient};

/// `status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    api: ApiArgs,
}

/// Print the leader and the peers.
pub async fn run(args: StatusArgs) -> anyhow::Result<()> {
    let api = ApiClient::new(&args.api.address);
    let leader: String = api
        .get("/v1/status/leader")
        .await
        .context("reading the leader")?;
    let peers: Vec<String> = api
        .get("/v1/status/peers")
        .await
        .context("reading the peers")?;
    if args.api.json {
        let v = serde_json::json!({ "Leader": leader, "Peers": peers });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("Leader: {leader}");
    println!("Peers:");
    for p in peers {
        let mark = if p == leader { " (leader)" } else { "" };
        println!("  {p}{mark}");
    }
    Ok(())
}
