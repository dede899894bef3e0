//! `teamster node status [ID]`, `teamster node eligibility --enable|--disable ID`,
//! `teamster node drain --enable|--disable ID`.

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::output::table;
use super::{ApiArgs, ApiClient};

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

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn short(id: &Value) -> String {
    s(id).chars().take(8).collect()
}

async fn status(a: StatusArgs) -> anyhow::Result<()> {
    let api = ApiClient::new(&a.api.address);
    let Some(id) = a.id else {
        let nodes: Vec<Value> = api.get("/v1/nodes").await.context("listing nodes")?;
        if a.api.json {
            println!("{}", serde_json::to_string_pretty(&nodes)?);
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
                short(&n["ID"]),
                s(&n["Datacenter"]),
                s(&n["Name"]),
                s(&n["NodeClass"]),
                s(&n["Drain"]),
                s(&n["SchedulingEligibility"]),
                s(&n["Status"]),
            ]);
        }
        print!("{}", table(&rows));
        return Ok(());
    };
    let node: Value = api
        .get(&format!("/v1/node/{id}"))
        .await
        .with_context(|| format!("reading node {id}"))?;
    let full_id = s(&node["ID"]);
    let allocs: Vec<Value> = api
        .get(&format!("/v1/node/{full_id}/allocations"))
        .await
        .context("reading the node's allocations")?;
    if a.api.json {
        let v = json!({"Node": node, "Allocations": allocs});
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let r = &node["NodeResources"];
    print!(
        "{}",
        table(&[
            vec!["ID".into(), full_id.clone()],
            vec!["Name".into(), s(&node["Name"])],
            vec!["Class".into(), s(&node["NodeClass"])],
            vec!["DC".into(), s(&node["Datacenter"])],
            vec!["Drain".into(), s(&node["Drain"])],
            vec!["Eligibility".into(), s(&node["SchedulingEligibility"])],
            vec!["Status".into(), s(&node["Status"])],
            vec!["CPU".into(), format!("{} MHz", s(&r["Cpu"]["CpuShares"]))],
            vec![
                "Memory".into(),
                format!("{} MiB", s(&r["Memory"]["MemoryMB"]))
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
            short(&al["ID"]),
            s(&al["JobID"]),
            s(&al["TaskGroup"]),
            s(&al["DesiredStatus"]),
            s(&al["ClientStatus"]),
        ]);
    }
    print!("{}", table(&rows));
    Ok(())
}

async fn eligibility(a: ToggleArgs) -> anyhow::Result<()> {
    if a.enable == a.disable {
        bail!("give exactly one of --enable or --disable");
    }
    let api = ApiClient::new(&a.api.address);
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
        s(&r["Index"])
    );
    Ok(())
}

async fn drain(a: DrainArgs) -> anyhow::Result<()> {
    if a.enable == a.disable {
        bail!("give exactly one of --enable or --disable");
    }
    let api = ApiClient::new(&a.api.address);
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
    println!("Node {:?} drain {what} (index {})", a.id, s(&r["Index"]));
    Ok(())
}
