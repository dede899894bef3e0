//! `teamster node status [ID]`, `teamster node eligibility --enable|--disable ID`,
//! `teamster node drain --enable|--disable ID`.

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::output::{short_id, table, text};
use super::ApiArgs;

/// `node …`.
#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// List the nodes, or show one (ID or unique prefix) with its allocations.
    Status(StatusArgs),
    /// Allow or forbid new placements on a node.
    Eligibility(ToggleArgs),
    /// Start or cancel a drain: the node becomes ineligible and its allocations migrate.
    Drain(DrainArgs),
}

/// `node status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// A node ID or unique prefix.
    id: Option<String>,
}

/// `node eligibility`.
#[derive(Debug, Args)]
pub struct ToggleArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Make the node eligible.
    #[arg(long, conflicts_with = "disable")]
    enable: bool,
    /// Make the node ineligible.
    #[arg(long)]
    disable: bool,
    /// A node ID or unique prefix.
    id: String,
}

/// `node drain`.
#[derive(Debug, Args)]
pub struct DrainArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Start draining.
    #[arg(long, conflicts_with = "disable")]
    enable: bool,
    /// Cancel the drain.
    #[arg(long)]
    disable: bool,
    /// How long the drain may take ("1h", "-1" for no deadline).
    #[arg(long, default_value = "1h", allow_hyphen_values = true)]
    deadline: String,
    /// Leave system jobs running.
    #[arg(long)]
    ignore_system: bool,
    /// When cancelling, make the node eligible again.
    #[arg(long)]
    keep_ineligible: bool,
    /// A node ID or unique prefix.
    id: String,
}

/// Run a `node` command.
pub async fn run(cmd: NodeCommand) -> anyhow::Result<()> {
    match cmd {
        NodeCommand::Status(a) => status(a).await,
        NodeCommand::Eligibility(a) => eligibility(a).await,
        NodeCommand::Drain(a) => drain(a).await,
    }
}

async fn status(a: StatusArgs) -> anyhow::Result<()> {
    let api = a.api.client()?;
    let Some(id) = a.id else {
        let nodes: Vec<Value> = api.get("/v1/nodes").await.context("listing nodes")?;
        if a.api.structured() {
            a.api.print(&nodes)?;
            return Ok(());
        }
        let mut rows = vec![vec![
            "ID".into(),
            "DC".into(),
            "Name".into(),
            "Class".into(),
            "Drain".into(),
            "Eligibility".into(),
            "Status".into(),
        ]];
        for n in &nodes {
            rows.push(vec![
                short_id(&n["ID"]),
                text(&n["Datacenter"]),
                text(&n["Name"]),
                text(&n["NodeClass"]),
                text(&n["Drain"]),
                text(&n["SchedulingEligibility"]),
                text(&n["Status"]),
            ]);
        }
        print!("{}", table(&rows));
        return Ok(());
    };
    let node: Value = api
        .get(&format!("/v1/node/{id}"))
        .await
        .with_context(|| format!("reading node {id}"))?;
    let full_id = text(&node["ID"]);
    let allocs: Vec<Value> = api
        .get(&format!("/v1/node/{full_id}/allocations"))
        .await
        .context("reading the node's allocations")?;
    if a.api.structured() {
        // `-t` renders the node itself, as Nomad's `node status -t ID` does.
        let v = match a.api.template {
            Some(_) => node,
            None => json!({"Node": node, "Allocations": allocs}),
        };
        a.api.print(&v)?;
        return Ok(());
    }
    let r = &node["NodeResources"];
    print!(
        "{}",
        table(&[
            vec!["ID".into(), full_id.clone()],
            vec!["Name".into(), text(&node["Name"])],
            vec!["Class".into(), text(&node["NodeClass"])],
            vec!["DC".into(), text(&node["Datacenter"])],
            vec!["Drain".into(), text(&node["Drain"])],
            vec!["Eligibility".into(), text(&node["SchedulingEligibility"])],
            vec!["Status".into(), text(&node["Status"])],
            vec![
                "CPU".into(),
                format!("{} MHz", text(&r["Cpu"]["CpuShares"]))
            ],
            vec![
                "Memory".into(),
                format!("{} MiB", text(&r["Memory"]["MemoryMB"]))
            ],
            vec![
                "Drivers".into(),
                node["Drivers"]
                    .as_object()
                    .map(|m| m.keys().cloned().collect::<Vec<_>>().join(","))
                    .unwrap_or_default()
            ],
        ])
    );
    println!("\nAllocations");
    let mut rows = vec![vec![
        "ID".into(),
        "Job ID".into(),
        "Task Group".into(),
        "Desired".into(),
        "Status".into(),
    ]];
    for al in &allocs {
        rows.push(vec![
            short_id(&al["ID"]),
            text(&al["JobID"]),
            text(&al["TaskGroup"]),
            text(&al["DesiredStatus"]),
            text(&al["ClientStatus"]),
        ]);
    }
    print!("{}", table(&rows));
    Ok(())
}

async fn eligibility(a: ToggleArgs) -> anyhow::Result<()> {
    if a.enable == a.disable {
        bail!("give exactly one of --enable or --disable");
    }
    let api = a.api.client()?;
    let value = if a.enable { "eligible" } else { "ineligible" };
    let r: Value = api
        .request(
            reqwest::Method::POST,
            &format!("/v1/node/{}/eligibility", a.id),
            Some(&json!({"Eligibility": value})),
        )
        .await
        .with_context(|| format!("updating node {}", a.id))?;
    println!(
        "Node {:?} scheduling eligibility set: {value} (index {})",
        a.id,
        text(&r["Index"])
    );
    Ok(())
}

async fn drain(a: DrainArgs) -> anyhow::Result<()> {
    if a.enable == a.disable {
        bail!("give exactly one of --enable or --disable");
    }
    let api = a.api.client()?;
    let body = if a.enable {
        let deadline: i64 = if a.deadline.trim() == "-1" {
            -1
        } else {
            humantime::parse_duration(&a.deadline)
                .with_context(|| format!("--deadline {:?}", a.deadline))?
                .as_nanos()
                .min(i64::MAX as u128) as i64
        };
        json!({"DrainSpec": {"Deadline": deadline, "IgnoreSystemJobs": a.ignore_system}})
    } else {
        json!({"DrainSpec": null, "MarkEligible": !a.keep_ineligible})
    };
    let r: Value = api
        .request(
            reqwest::Method::POST,
            &format!("/v1/node/{}/drain", a.id),
            Some(&body),
        )
        .await
        .with_context(|| format!("updating node {}", a.id))?;
    let what = if a.enable { "started" } else { "cancelled" };
    println!("Node {:?} drain {what} (index {})", a.id, text(&r["Index"]));
    Ok(())
}
