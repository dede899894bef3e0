//! `teamster node status [ID]`, `teamster node eligibility --enable|--disable ID`,
//! `teamster node drain -enable|-disable|-monitor [-deadline D|-force|-no-deadline]
//! [-ignore-system] [-keep-ineligible] [-detach] [-m k=v] [-yes] ID` (Nomad's flags; without
//! `-detach` an enabled drain is followed until it ends).

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::args::ApiArgs;
use super::output::{short_id, table, text};

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

/// `node drain` (Nomad's flags).
#[derive(Debug, Args)]
pub struct DrainArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Start draining (or update a running drain).
    #[arg(long, conflicts_with_all = ["disable", "monitor"])]
    enable: bool,
    /// Cancel the drain.
    #[arg(long, conflicts_with = "monitor")]
    disable: bool,
    /// Follow a running drain until it ends, without changing it.
    #[arg(long)]
    monitor: bool,
    /// How long the drain may take; what is left is stopped then (default 1h).
    #[arg(long, conflicts_with_all = ["force", "no_deadline"])]
    deadline: Option<String>,
    /// Stop everything at once (a deadline of -1s).
    #[arg(long, conflicts_with = "no_deadline")]
    force: bool,
    /// Let the drain take as long as it needs (a deadline of 0).
    #[arg(long)]
    no_deadline: bool,
    /// Leave system jobs running.
    #[arg(long)]
    ignore_system: bool,
    /// When cancelling, leave the node ineligible.
    #[arg(long)]
    keep_ineligible: bool,
    /// Return once the drain is set, without following it.
    #[arg(long)]
    detach: bool,
    /// Metadata for the drain, `key=value` (repeatable): the node's `LastDrain.Meta`.
    #[arg(short = 'm', value_name = "KEY=VALUE")]
    meta: Vec<String>,
    /// Do not ask for confirmation when the ID is a prefix.
    #[arg(long)]
    yes: bool,
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
                // Only the detected ones, as Nomad lists them (docker without an engine is
                // offered but not detected).
                node["Drivers"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .filter(|(_, d)| d["Detected"].as_bool().unwrap_or(true))
                            .map(|(k, _)| k.clone())
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_default()
            ],
            vec![
                "Host Volumes".into(),
                node["HostVolumes"]
                    .as_object()
                    .filter(|m| !m.is_empty())
                    .map(|m| m.keys().cloned().collect::<Vec<_>>().join(","))
                    .unwrap_or_else(|| "<none>".into())
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

const NANOS_PER_SEC: i64 = 1_000_000_000;

/// The drain's `Deadline` in nanoseconds from the flags: `-force` −1 s, `-no-deadline` 0,
/// else `-deadline` (default 1h).
fn drain_deadline(a: &DrainArgs) -> anyhow::Result<i64> {
    if a.force {
        return Ok(-NANOS_PER_SEC);
    }
    if a.no_deadline {
        return Ok(0);
    }
    let text = a.deadline.as_deref().unwrap_or("1h");
    let d = humantime::parse_duration(text.trim())
        .with_context(|| format!("-deadline {text:?}: not a duration"))?;
    if d.is_zero() {
        bail!("-deadline must be positive (use -no-deadline for none)");
    }
    Ok(d.as_nanos().min(i64::MAX as u128) as i64)
}

fn drain_meta(pairs: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    pairs
        .iter()
        .map(|p| match p.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
            _ => bail!("-m {p:?}: expected key=value"),
        })
        .collect()
}

async fn drain(a: DrainArgs) -> anyhow::Result<()> {
    if !a.enable && !a.disable && !a.monitor {
        bail!("give one of -enable, -disable or -monitor");
    }
    if a.disable && (a.deadline.is_some() || a.force || a.no_deadline || a.ignore_system) {
        bail!("-disable can't be combined with flags configuring the drain strategy");
    }
    let meta = drain_meta(&a.meta)?;
    let api = a.api.client()?;
    let node: Value = api
        .get(&format!("/v1/node/{}", a.id))
        .await
        .with_context(|| format!("reading node {}", a.id))?;
    let node_id = text(&node["ID"]);
    if a.monitor {
        return monitor_drain(&api, &node_id, 0, a.ignore_system).await;
    }
    if node_id != a.id && !a.yes {
        let verb = if a.enable { "enable" } else { "disable" };
        print!("Are you sure you want to {verb} drain mode for node {node_id:?}? [y/N] ");
        std::io::Write::flush(&mut std::io::stdout())?;
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer)?;
        if !matches!(answer.trim().to_lowercase().as_str(), "y" | "yes") {
            println!("Canceling drain toggle");
            return Ok(());
        }
    }
    let meta = (!meta.is_empty()).then_some(meta);
    let body = if a.enable {
        let deadline = drain_deadline(&a)?;
        json!({
            "NodeID": node_id,
            "DrainSpec": {"Deadline": deadline, "IgnoreSystemJobs": a.ignore_system},
            "Meta": meta,
        })
    } else {
        json!({
            "NodeID": node_id,
            "DrainSpec": null,
            "MarkEligible": !a.keep_ineligible,
            "Meta": meta,
        })
    };
    let r: Value = api
        .request(
            reqwest::Method::PUT,
            &format!("/v1/node/{node_id}/drain"),
            Some(&body),
        )
        .await
        .with_context(|| format!("updating node {node_id}"))?;
    if a.enable && !a.detach {
        let index = r["Index"].as_u64().unwrap_or(0);
        println!(
            "{}: Ctrl-C to stop monitoring: will not cancel the node drain",
            now_rfc3339()
        );
        println!("{}: Node {node_id:?} drain strategy set", now_rfc3339());
        return monitor_drain(&api, &node_id, index, a.ignore_system).await;
    }
    let what = if a.enable { "set" } else { "unset" };
    println!("Node {node_id:?} drain strategy {what}");
    Ok(())
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// Follows a node's drain as Nomad's `MonitorDrain` does: allocation migrations and stops as
/// they happen, "Drain complete for node …" once the drain ends, then "All allocations on
/// node … have stopped." once none is left running (system ones aside with
/// `-ignore-system`).
async fn monitor_drain(
    api: &crate::api::ApiClient,
    node_id: &str,
    index: u64,
    ignore_system: bool,
) -> anyhow::Result<()> {
    let say = |msg: String| println!("{}: {msg}", now_rfc3339());
    let mut index = index;
    let mut seen: BTreeMap<String, (bool, String, String)> = BTreeMap::new();
    let mut first = true;
    let mut drain_over = false;
    let mut system_jobs: BTreeMap<String, bool> = BTreeMap::new();
    loop {
        let (allocs, new_index) = api
            .get_with_index::<Vec<Value>>(&format!(
                "/v1/node/{node_id}/allocations?index={index}&wait=10s"
            ))
            .await
            .context("reading the node's allocations")?;
        let node: Value = api
            .get(&format!("/v1/node/{node_id}"))
            .await
            .context("reading the node")?;
        let mut running = 0;
        for al in &allocs {
            let id = text(&al["ID"]);
            let migrate = al["DesiredTransition"]["Migrate"] == true;
            let desired = text(&al["DesiredStatus"]);
            let client = text(&al["ClientStatus"]);
            if let Some((was_migrate, was_desired, was_client)) = seen.get(&id) {
                if migrate && !was_migrate {
                    say(format!("Alloc {id:?} marked for migration"));
                }
                if desired == "stop" && was_desired != "stop" && migrate {
                    say(format!("Alloc {id:?} draining"));
                }
                if &client != was_client {
                    say(format!("Alloc {id:?} status {was_client} -> {client}"));
                }
            } else if migrate && client != "complete" && client != "failed" && client != "lost" {
                say(format!("Alloc {id:?} marked for migration"));
            }
            let terminal = matches!(client.as_str(), "complete" | "failed" | "lost");
            if !terminal {
                let job = text(&al["JobID"]);
                let system = match system_jobs.get(&job) {
                    _ if !ignore_system => false,
                    Some(s) => *s,
                    None => {
                        let j: Value = api
                            .get(&format!(
                                "/v1/job/{job}?namespace={}",
                                text(&al["Namespace"])
                            ))
                            .await
                            .unwrap_or(Value::Null);
                        let s = j["Type"] == "system";
                        system_jobs.insert(job, s);
                        s
                    }
                };
                if !system {
                    running += 1;
                }
            }
            seen.insert(id, (migrate, desired, client));
        }
        if node["Status"] == "down" {
            say(format!("Node {node_id:?} down"));
        }
        if !drain_over && node["DrainStrategy"].is_null() {
            drain_over = true;
            match node["LastDrain"]["Status"].as_str() {
                Some("canceled") => {
                    say(format!("Drain canceled for node {node_id}"));
                    return Ok(());
                }
                _ if first && index == 0 => {
                    say(format!("No drain strategy set for node {node_id}"));
                    return Ok(());
                }
                _ => say(format!("Drain complete for node {node_id}")),
            }
        }
        if drain_over && running == 0 {
            say(format!("All allocations on node {node_id:?} have stopped."));
            return Ok(());
        }
        first = false;
        index = new_index.max(1);
    }
}
