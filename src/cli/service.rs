//! `teamster service list|info|delete`, as `nomad service …`: the services registered by
//! running allocations (native service discovery), one service's instances (with their
//! checks' statuses, when they have checks), and removing a stale registration.

use anyhow::Context;
use clap::{Args, Subcommand};
use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::args::ApiArgs;
use super::output::{short_id, table, text};
use crate::api::urlencode;
use crate::api::ApiError;

/// `service …`.
#[derive(Debug, Subcommand)]
pub enum ServiceCommand {
    /// The registered services and their tags.
    List(ListArgs),
    /// The instances of one service: job, address, tags, node and allocation.
    Info(InfoArgs),
    /// Remove one registration (by its service name and registration ID).
    Delete(DeleteArgs),
}

/// `service list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    api: ApiArgs,
}

/// `service info`.
#[derive(Debug, Args)]
pub struct InfoArgs {
    /// Show each registration in full (its ID, datacenter and indexes).
    #[arg(long)]
    verbose: bool,
    /// The service's name.
    name: String,
    #[command(flatten)]
    api: ApiArgs,
}

/// `service delete`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// The service's name.
    name: String,
    /// The registration's ID (`service info -verbose` shows it).
    id: String,
    #[command(flatten)]
    api: ApiArgs,
}

/// Run a `service` command.
pub async fn run(cmd: ServiceCommand) -> anyhow::Result<()> {
    match cmd {
        ServiceCommand::List(a) => list(a).await,
        ServiceCommand::Info(a) => info(a).await,
        ServiceCommand::Delete(a) => delete(a).await,
    }
}

async fn list(a: ListArgs) -> anyhow::Result<()> {
    let api = a.api.client()?;
    let by_ns: Vec<Value> = api
        .get("/v1/services")
        .await
        .context("listing the services")?;
    if a.api.structured() {
        return a.api.print(&by_ns);
    }
    let many_namespaces = by_ns.len() > 1;
    let mut rows = vec![if many_namespaces {
        vec![
            "Service Name".to_string(),
            "Namespace".into(),
            "Tags".into(),
        ]
    } else {
        vec!["Service Name".to_string(), "Tags".into()]
    }];
    for ns in &by_ns {
        for s in ns["Services"].as_array().into_iter().flatten() {
            let mut row = vec![text(&s["ServiceName"])];
            if many_namespaces {
                row.push(text(&ns["Namespace"]));
            }
            row.push(tags(&s["Tags"]));
            rows.push(row);
        }
    }
    if rows.len() == 1 {
        println!("No services found");
        return Ok(());
    }
    print!("{}", table(&rows));
    Ok(())
}

async fn info(a: InfoArgs) -> anyhow::Result<()> {
    let api = a.api.client()?;
    let regs: Vec<Value> = api
        .get(&format!("/v1/service/{}", urlencode(&a.name)))
        .await
        .with_context(|| format!("reading service {:?}", a.name))?;
    if a.api.structured() {
        return a.api.print(&regs);
    }
    if regs.is_empty() {
        anyhow::bail!("No service registrations found for {:?}", a.name);
    }
    if a.verbose {
        for (i, r) in regs.iter().enumerate() {
            if i > 0 {
                println!();
            }
            let rows: Vec<Vec<String>> = [
                ("ID", text(&r["ID"])),
                ("Service Name", text(&r["ServiceName"])),
                ("Namespace", text(&r["Namespace"])),
                ("Job ID", text(&r["JobID"])),
                ("Alloc ID", text(&r["AllocID"])),
                ("Node ID", text(&r["NodeID"])),
                ("Datacenter", text(&r["Datacenter"])),
                ("Address", address(r)),
                ("Tags", tags(&r["Tags"])),
                ("Checks", checks(&r["Checks"])),
            ]
            .into_iter()
            .map(|(k, v)| vec![k.to_string(), "=".into(), v])
            .collect();
            print!("{}", table(&rows));
        }
        return Ok(());
    }
    let with_checks = regs
        .iter()
        .any(|r| r["Checks"].as_array().is_some_and(|c| !c.is_empty()));
    let mut header = vec![
        "Job ID".to_string(),
        "Address".into(),
        "Tags".into(),
        "Node ID".into(),
        "Alloc ID".into(),
    ];
    if with_checks {
        header.push("Checks".into());
    }
    let mut rows = vec![header];
    for r in &regs {
        let mut row = vec![
            text(&r["JobID"]),
            address(r),
            tags(&r["Tags"]),
            short_id(&r["NodeID"]),
            short_id(&r["AllocID"]),
        ];
        if with_checks {
            row.push(checks(&r["Checks"]));
        }
        rows.push(row);
    }
    print!("{}", table(&rows));
    Ok(())
}

async fn delete(a: DeleteArgs) -> anyhow::Result<()> {
    let api = a.api.client()?;
    let path = format!("/v1/service/{}/{}", urlencode(&a.name), urlencode(&a.id));
    match api.request_text::<()>(Method::DELETE, &path, None).await {
        Ok(_) => {
            println!("Successfully deleted service registration");
            Ok(())
        }
        Err(ApiError::Status { status, .. }) if status == StatusCode::NOT_FOUND => {
            anyhow::bail!(
                "No service registration {:?} of service {:?} found",
                a.id,
                a.name
            )
        }
        Err(e) => Err(e).context("deleting the service registration"),
    }
}

/// `address:port`.
fn address(r: &Value) -> String {
    format!("{}:{}", text(&r["Address"]), text(&r["Port"]))
}

/// Each check's name and status: `alive=success,db=pending`.
fn checks(v: &Value) -> String {
    let list: Vec<String> = v
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| format!("{}={}", text(&c["Name"]), text(&c["Status"])))
        .collect();
    list.join(",")
}

/// Tags as Nomad prints them: `[a,b]`.
fn tags(v: &Value) -> String {
    let list: Vec<String> = v.as_array().into_iter().flatten().map(text).collect();
    format!("[{}]", list.join(","))
}
