//! `teamster job periodic force JOB`, `teamster job dispatch JOB [PAYLOAD|-]`, and what
//! `job status` shows of a periodic or parameterized parent (its children, its next launch).

use std::io::Read;
use std::path::PathBuf;

use anyhow::{bail, Context};
use base64::Engine;
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{json, Value};
use teamster_storage::model::{PeriodicConfig, Timestamp, DISPATCH_PAYLOAD_LIMIT};

use super::args::ApiArgs;
use super::output::{table, text, unix_nanos};
use crate::api::urlencode;
use crate::api::ApiClient;
use crate::util::Clock;

/// `job periodic …`.
#[derive(Debug, Subcommand)]
pub enum PeriodicCommand {
    /// Launch a periodic job's child now, whatever `prohibit_overlap` says.
    Force(ForceArgs),
}

/// `job periodic force`.
#[derive(Debug, Args)]
pub struct ForceArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// The periodic job.
    id: String,
}

/// `job dispatch`.
#[derive(Debug, Args)]
pub struct DispatchArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// The parameterized job.
    id: String,
    /// A file whose content is the payload (at most 16 KiB); `-` reads it from stdin.
    payload: Option<PathBuf>,
    /// A meta value for the child, `key=value` (repeatable).
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    meta: Vec<String>,
    /// A dispatch with a token an existing child carries answers that child instead of
    /// launching another.
    #[arg(long)]
    idempotency_token: Option<String>,
    /// Put into the child's ID: `<job>/dispatch-<prefix>-<time>-<hex>`.
    #[arg(long)]
    id_prefix_template: Option<String>,
}

/// Runs `job periodic …`.
pub async fn periodic(cmd: PeriodicCommand) -> anyhow::Result<()> {
    match cmd {
        PeriodicCommand::Force(args) => {
            let api = args.api.client()?;
            let resp: Value = api
                .request::<(), Value>(
                    Method::POST,
                    &format!("/v1/job/{}/periodic/force", urlencode(&args.id)),
                    None,
                )
                .await
                .context("force-launching the periodic job")?;
            if args.api.structured() {
                args.api.print(&resp)?;
            } else {
                println!("Force launch of periodic job {:?} succeeded", args.id);
                println!("Evaluation ID: {}", text(&resp["EvalID"]));
            }
            Ok(())
        }
    }
}

/// Runs `job dispatch`.
pub async fn dispatch(args: DispatchArgs) -> anyhow::Result<()> {
    let payload = match &args.payload {
        None => Vec::new(),
        Some(path) if path.as_os_str() == "-" => {
            let mut buf = Vec::new();
            std::io::stdin()
                .take(DISPATCH_PAYLOAD_LIMIT as u64 + 1)
                .read_to_end(&mut buf)
                .context("reading the payload from stdin")?;
            buf
        }
        Some(path) => {
            let len = std::fs::metadata(path)
                .with_context(|| format!("reading {}", path.display()))?
                .len();
            if len > DISPATCH_PAYLOAD_LIMIT as u64 {
                bail!(
                    "{}: the payload is {len} bytes, over the limit of {DISPATCH_PAYLOAD_LIMIT}",
                    path.display()
                );
            }
            std::fs::read(path).with_context(|| format!("reading {}", path.display()))?
        }
    };
    let mut meta = serde_json::Map::new();
    for kv in &args.meta {
        let Some((k, v)) = kv.split_once('=') else {
            bail!("--meta {kv:?}: expected KEY=VALUE");
        };
        meta.insert(k.to_string(), Value::from(v));
    }
    let body = json!({
        "JobID": args.id,
        "Payload": base64::engine::general_purpose::STANDARD.encode(&payload),
        "Meta": meta,
        "IdempotencyToken": args.idempotency_token.unwrap_or_default(),
        "IdPrefixTemplate": args.id_prefix_template.unwrap_or_default(),
    });
    let api = args.api.client()?;
    let resp: Value = api
        .request(
            Method::POST,
            &format!("/v1/job/{}/dispatch", urlencode(&args.id)),
            Some(&body),
        )
        .await
        .context("dispatching the job")?;
    if args.api.structured() {
        args.api.print(&resp)?;
    } else {
        println!("Dispatched Job ID = {}", text(&resp["DispatchedJobID"]));
        let eval = text(&resp["EvalID"]);
        if eval.is_empty() {
            println!("(an existing child with this idempotency token)");
        } else {
            println!("Evaluation ID     = {eval}");
        }
    }
    Ok(())
}

/// The next launch of a periodic block after now, as RFC 3339 in UTC and in the block's
/// zone (`None` for a disabled or unschedulable block).
pub fn next_launch(periodic: &Value, now_nanos: i64) -> Option<String> {
    let config: PeriodicConfig = serde_json::from_value(periodic.clone()).ok()?;
    if !config.enabled {
        return None;
    }
    let schedule = config.schedule().ok()?;
    let secs = schedule.next_after(now_nanos)?;
    let utc = Timestamp::from_unix_nanos(secs.checked_mul(1_000_000_000)?).to_rfc3339();
    Some(match schedule.local_rfc3339(secs) {
        Some(local) if !local.ends_with('Z') => format!("{utc} ({local} {})", config.time_zone),
        _ => utc,
    })
}

/// The parent part of `job status` for a periodic or parameterized job: the next launch and
/// the children.
pub async fn print_parent_status(api: &ApiClient, job: &Value) -> anyhow::Result<()> {
    let id = text(&job["ID"]);
    if !job["Periodic"].is_null() {
        let now = crate::util::SystemClock.now_unix_nanos();
        let next = if job["Stop"].as_bool() == Some(true) {
            None
        } else {
            next_launch(&job["Periodic"], now)
        };
        println!(
            "\nNext Periodic Launch = {}",
            next.unwrap_or_else(|| "none".into())
        );
    }
    let children: Vec<Value> = api
        .get(&format!("/v1/jobs?prefix={}", urlencode(&format!("{id}/"))))
        .await
        .context("listing the children")?;
    let children: Vec<&Value> = children
        .iter()
        .filter(|c| c["ParentID"].as_str() == Some(id.as_str()))
        .collect();
    let title = if job["Periodic"].is_null() {
        "Dispatched Jobs"
    } else {
        "Previously Launched Jobs"
    };
    println!("\n{title}");
    if children.is_empty() {
        println!("No instances of the job found");
        return Ok(());
    }
    let mut rows = vec![vec![
        "ID".to_string(),
        "Status".into(),
        "Submit Time".into(),
    ]];
    for c in children {
        rows.push(vec![
            text(&c["ID"]),
            text(&c["Status"]),
            unix_nanos(&c["SubmitTime"]),
        ]);
    }
    print!("{}", table(&rows));
    Ok(())
}
