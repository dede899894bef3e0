//! `teamster operator scheduler workers | set-workers`: a server's scheduler workers, over
//! `/v1/agent/schedulers` and `/v1/agent/schedulers/config`.

use anyhow::Context;
use clap::Args;
use reqwest::Method;

use super::args::ApiArgs;
use super::output::table;
use crate::http::schedulers::{SchedulersConfig, SchedulersInfo};

/// `operator scheduler workers`.
#[derive(Debug, Args)]
pub struct WorkersArgs {
    #[command(flatten)]
    api: ApiArgs,
}

/// `operator scheduler set-workers`.
#[derive(Debug, Args)]
pub struct SetWorkersArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// How many workers (0 to 256).
    #[arg(long = "num-schedulers", value_name = "N")]
    num_schedulers: Option<usize>,
    /// The scheduler types, comma-separated; must include `_core`.
    #[arg(
        long = "enabled-schedulers",
        value_name = "TYPES",
        value_delimiter = ','
    )]
    enabled_schedulers: Option<Vec<String>>,
}

/// List the workers.
pub async fn workers(args: WorkersArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let info: SchedulersInfo = api
        .get("/v1/agent/schedulers")
        .await
        .context("reading the scheduler workers")?;
    if args.api.structured() {
        args.api.print(&info)?;
        return Ok(());
    }
    println!("Server: {}", info.server_id);
    let mut rows = vec![vec![
        "ID".to_string(),
        "Status".to_string(),
        "Workload".to_string(),
        "Started".to_string(),
        "Schedulers".to_string(),
    ]];
    for w in &info.schedulers {
        rows.push(vec![
            w.id.chars().take(8).collect(),
            format!("{:?}", w.status),
            format!("{:?}", w.workload_status),
            w.started.clone(),
            w.enabled_schedulers.join(","),
        ]);
    }
    print!("{}", table(&rows));
    Ok(())
}

/// Change the pool's size or scheduler types.
pub async fn set_workers(args: SetWorkersArgs) -> anyhow::Result<()> {
    if args.num_schedulers.is_none() && args.enabled_schedulers.is_none() {
        anyhow::bail!("nothing to change: give --num-schedulers and/or --enabled-schedulers");
    }
    let api = args.api.client()?;
    let mut conf: SchedulersConfig = api
        .get("/v1/agent/schedulers/config")
        .await
        .context("reading the scheduler worker configuration")?;
    if let Some(n) = args.num_schedulers {
        conf.num_schedulers = n;
    }
    if let Some(list) = args.enabled_schedulers {
        conf.enabled_schedulers = list;
    }
    let applied: SchedulersConfig = api
        .request(Method::PUT, "/v1/agent/schedulers/config", Some(&conf))
        .await
        .context("changing the scheduler worker configuration")?;
    if args.api.structured() {
        args.api.print(&applied)?;
    } else {
        println!(
            "Server {}: {} scheduler workers for {}",
            applied.server_id,
            applied.num_schedulers,
            applied.enabled_schedulers.join(", ")
        );
    }
    Ok(())
}
