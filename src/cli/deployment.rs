//! `teamster deployment list|status|promote|fail|pause|resume`, like `nomad deployment …`:
//! a deployment is named by its ID or an unambiguous prefix of it; `--verbose` shows full
//! IDs; `--json` and `-t` print the API's values. `promote`, `fail` and `resume` follow the
//! evaluation they create unless `--detach`; `status --monitor` follows the deployment to
//! its end. [`follow`] is also what `job run` uses to follow a job's deployment.

use std::time::{Duration, SystemTime};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::args::ApiArgs;
use super::output::{table, text};
use crate::api::urlencode;
use crate::api::{ApiClient, ApiError};

/// `deployment …`.
#[derive(Debug, Subcommand)]
pub enum DeploymentCommand {
    /// List the deployments, newest first.
    List(ListArgs),
    /// Show a deployment: its status and each task group's progress.
    Status(StatusArgs),
    /// Promote a deployment's canaries (every group's, or those of `--group`).
    Promote(PromoteArgs),
    /// Mark a deployment failed (auto-reverting when a group asks for it).
    Fail(WriteArgs),
    /// Pause a deployment: nothing more is replaced until it is resumed.
    Pause(PauseArgs),
    /// Resume a paused deployment.
    Resume(WriteArgs),
}

/// `deployment list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Show full IDs.
    #[arg(long)]
    verbose: bool,
}

/// `deployment status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// The deployment: its ID or a prefix of it.
    id: String,
    /// Show full IDs.
    #[arg(long)]
    verbose: bool,
    /// Follow the deployment until it ends.
    #[arg(long)]
    monitor: bool,
}

/// `deployment promote`.
#[derive(Debug, Args)]
pub struct PromoteArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// The deployment: its ID or a prefix of it.
    id: String,
    /// Promote this task group's canaries only (repeatable); every group's when absent.
    #[arg(long = "group", value_name = "GROUP")]
    groups: Vec<String>,
    /// Return without following the evaluation.
    #[arg(long)]
    detach: bool,
    /// Show full IDs.
    #[arg(long)]
    verbose: bool,
}

/// `deployment fail` and `deployment resume`.
#[derive(Debug, Args)]
pub struct WriteArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// The deployment: its ID or a prefix of it.
    id: String,
    /// Return without following the evaluation.
    #[arg(long)]
    detach: bool,
    /// Show full IDs.
    #[arg(long)]
    verbose: bool,
}

/// `deployment pause`.
#[derive(Debug, Args)]
pub struct PauseArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// The deployment: its ID or a prefix of it.
    id: String,
    /// Show full IDs.
    #[arg(long)]
    verbose: bool,
}

/// How long `promote`, `fail` and `resume` follow their evaluation.
const EVAL_TIMEOUT: Duration = Duration::from_secs(300);

/// Run one `deployment` command; the exit code is 0, 1 (an error, or a followed
/// deployment that did not succeed) or 2 (the evaluation could not place everything).
pub async fn run(cmd: DeploymentCommand) -> anyhow::Result<std::process::ExitCode> {
    use std::process::ExitCode;
    match cmd {
        DeploymentCommand::List(a) => list(a).await.map(|()| ExitCode::SUCCESS),
        DeploymentCommand::Status(a) => status(a).await,
        DeploymentCommand::Promote(a) => promote(a).await,
        DeploymentCommand::Fail(a) => fail(a).await,
        DeploymentCommand::Pause(a) => pause(a).await.map(|()| ExitCode::SUCCESS),
        DeploymentCommand::Resume(a) => resume(a).await,
    }
}

/// How many characters of an ID to show.
fn id_len(verbose: bool) -> usize {
    if verbose {
        usize::MAX
    } else {
        8
    }
}

fn limit(v: &Value, len: usize) -> String {
    text(v).chars().take(len).collect()
}

async fn list(args: ListArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let mut found: Vec<Value> = api
        .get("/v1/deployments?namespace=*")
        .await
        .context("listing the deployments")?;
    found.sort_by_key(|d| std::cmp::Reverse(d["CreateIndex"].as_u64().unwrap_or(0)));
    if args.api.structured() {
        return args.api.print(&found);
    }
    if found.is_empty() {
        println!("No deployments found");
        return Ok(());
    }
    print!("{}", deployments_table(&found, id_len(args.verbose)));
    Ok(())
}

/// Nomad's `formatDeployments`.
fn deployments_table(found: &[Value], len: usize) -> String {
    let mut rows = vec![["ID", "Job ID", "Job Version", "Status", "Description"]
        .map(String::from)
        .to_vec()];
    for d in found {
        rows.push(vec![
            limit(&d["ID"], len),
            text(&d["JobID"]),
            text(&d["JobVersion"]),
            text(&d["Status"]),
            text(&d["StatusDescription"]),
        ]);
    }
    table(&rows)
}

/// The deployment an ID or ID prefix names (Nomad's `getDeployment`): one exact match, or
/// the only one with the prefix; several are listed in the error.
async fn resolve(api: &ApiClient, id: &str, len: usize) -> anyhow::Result<Value> {
    match api
        .get::<Value>(&format!("/v1/deployment/{}", urlencode(id)))
        .await
    {
        Ok(d) => return Ok(d),
        Err(ApiError::Status { status, .. }) if status == StatusCode::NOT_FOUND => {}
        Err(e) => return Err(e).context("reading the deployment"),
    }
    let mut found: Vec<Value> = api
        .get(&format!(
            "/v1/deployments?namespace=*&prefix={}",
            urlencode(id)
        ))
        .await
        .context("listing the deployments")?;
    match found.len() {
        0 => bail!("No deployment(s) with prefix or id {id:?} found"),
        1 => Ok(found.remove(0)),
        _ => bail!(
            "Prefix matched multiple deployments\n\n{}",
            deployments_table(&found, len).trim_end()
        ),
    }
}

/// A `RequireProgressBy` as Nomad's CLI shows it: to the second, "N/A" when unset.
fn progress_time(v: &Value) -> String {
    let s = text(v);
    if s.is_empty() || s.starts_with("0001-01-01") {
        return "N/A".into();
    }
    match (s.find('.'), s.rfind(['Z', '+', '-'])) {
        (Some(dot), Some(zone)) if zone > dot => format!("{}{}", &s[..dot], &s[zone..]),
        _ => s,
    }
}

/// Nomad's `formatDeploymentGroups`: a row per task group, with the `Auto Revert`,
/// `Promoted`/`Canaries` and `Progress Deadline` columns only when some group has them.
pub(super) fn groups_table(d: &Value) -> String {
    let groups: Vec<(&String, &Value)> = d["TaskGroups"]
        .as_object()
        .map(|m| m.iter().collect())
        .unwrap_or_default();
    let any = |f: &dyn Fn(&Value) -> bool| groups.iter().any(|(_, g)| f(g));
    let autorevert = any(&|g| g["AutoRevert"].as_bool() == Some(true));
    let canaries = any(&|g| g["DesiredCanaries"].as_u64().unwrap_or(0) > 0);
    let deadline = any(&|g| g["ProgressDeadline"].as_u64().unwrap_or(0) != 0);
    let mut head = vec!["Task Group"];
    if autorevert {
        head.push("Auto Revert");
    }
    if canaries {
        head.push("Promoted");
    }
    head.push("Desired");
    if canaries {
        head.push("Canaries");
    }
    head.extend(["Placed", "Healthy", "Unhealthy"]);
    if deadline {
        head.push("Progress Deadline");
    }
    let mut rows = vec![head.into_iter().map(String::from).collect::<Vec<_>>()];
    for (name, g) in groups {
        let mut row = vec![name.clone()];
        if autorevert {
            row.push(text(&g["AutoRevert"]));
        }
        if canaries {
            row.push(if g["DesiredCanaries"].as_u64().unwrap_or(0) > 0 {
                text(&g["Promoted"])
            } else {
                "N/A".into()
            });
        }
        row.push(text(&g["DesiredTotal"]));
        if canaries {
            row.push(text(&g["DesiredCanaries"]));
        }
        row.extend([
            text(&g["PlacedAllocs"]),
            text(&g["HealthyAllocs"]),
            text(&g["UnhealthyAllocs"]),
        ]);
        if deadline {
            row.push(progress_time(&g["RequireProgressBy"]));
        }
        rows.push(row);
    }
    table(&rows)
}

/// `key = value` lines, aligned.
fn kv(rows: &[(&str, String)]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|(k, v)| vec![k.to_string(), "=".into(), v.clone()])
        .collect();
    table(&rows)
}

/// Nomad's `formatDeployment`: the deployment's facts and its groups.
fn format_deployment(d: &Value, len: usize) -> String {
    let mut out = kv(&[
        ("ID", limit(&d["ID"], len)),
        ("Job ID", text(&d["JobID"])),
        ("Job Version", text(&d["JobVersion"])),
        ("Status", text(&d["Status"])),
        ("Description", text(&d["StatusDescription"])),
    ]);
    if d["TaskGroups"].as_object().is_some_and(|m| !m.is_empty()) {
        out.push_str("\nDeployed\n");
        out.push_str(&groups_table(d));
    }
    out
}

/// The "Latest Deployment" section of `job status` (Nomad's `JobStatusCommand.
/// formatDeployment`).
pub(super) fn latest_deployment_section(d: &Value) -> String {
    let mut out = kv(&[
        ("ID", limit(&d["ID"], 8)),
        ("Status", text(&d["Status"])),
        ("Description", text(&d["StatusDescription"])),
    ]);
    if d["TaskGroups"].as_object().is_some_and(|m| !m.is_empty()) {
        out.push_str("\nDeployed\n");
        out.push_str(&groups_table(d));
    }
    out
}

/// Now, as the monitors print it.
pub(super) fn now_text() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

fn is_terminal(status: &str) -> bool {
    matches!(status, "successful" | "failed" | "cancelled")
}

/// Follows a deployment with blocking queries until it ends, printing it whenever it
/// changes (nothing when `quiet`); a failed deployment whose auto-revert started another
/// deployment is followed on to that one, as Nomad's CLI does. Answers the final status of
/// the deployment followed first.
pub(super) async fn follow(
    api: &ApiClient,
    id: &str,
    len: usize,
    quiet: bool,
) -> anyhow::Result<String> {
    let mut index = 0u64;
    let mut shown = String::new();
    loop {
        let path = format!("/v1/deployment/{}?index={index}&wait=10s", urlencode(id));
        let (d, new_index) = api
            .get_with_index::<Value>(&path)
            .await
            .context("reading the deployment")?;
        let rendered = format_deployment(&d, len);
        if !quiet && rendered != shown {
            println!("{}\n{rendered}", now_text());
            shown = rendered;
        }
        let status = text(&d["Status"]);
        if !is_terminal(&status) {
            index = new_index.max(index);
            continue;
        }
        let reverting = d["TaskGroups"]
            .as_object()
            .is_some_and(|m| m.values().any(|g| g["AutoRevert"].as_bool() == Some(true)));
        if status == "failed" && reverting {
            // The revert's deployment appears once the scheduler acted on the revert.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let job = urlencode(&text(&d["JobID"]));
            let ns = urlencode(&text(&d["Namespace"]));
            let latest: Value = api
                .get(&format!("/v1/job/{job}/deployment?namespace={ns}"))
                .await
                .context("reading the job's latest deployment")?;
            let next = text(&latest["ID"]);
            if !next.is_empty() && next != text(&d["ID"]) {
                if !quiet {
                    println!(
                        "\n==> {}: Monitoring the rollback's deployment {:?}",
                        now_text(),
                        limit(&latest["ID"], len)
                    );
                }
                Box::pin(follow(api, &next, len, quiet)).await?;
            }
        }
        return Ok(status);
    }
}

async fn status(args: StatusArgs) -> anyhow::Result<std::process::ExitCode> {
    use std::process::ExitCode;
    let api = args.api.client()?;
    let len = id_len(args.verbose);
    let d = resolve(&api, &args.id, len).await?;
    if args.api.structured() {
        args.api.print(&d)?;
        return Ok(ExitCode::SUCCESS);
    }
    if !args.monitor {
        print!("{}", format_deployment(&d, len));
        return Ok(ExitCode::SUCCESS);
    }
    let status = follow(&api, &text(&d["ID"]), len, false).await?;
    Ok(if status == "successful" {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Prints a write's answer as `--json`/`-t` ask, or follows (or names) its evaluation.
async fn after_write(
    api: &ApiClient,
    out: &ApiArgs,
    d: &Value,
    resp: &Value,
    detach: bool,
) -> anyhow::Result<std::process::ExitCode> {
    use std::process::ExitCode;
    if out.structured() {
        out.print(resp)?;
        return Ok(ExitCode::SUCCESS);
    }
    let eval_id = text(&resp["EvalID"]);
    if eval_id.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    if detach {
        println!("Evaluation ID: {eval_id}");
        return Ok(ExitCode::SUCCESS);
    }
    println!("==> Monitoring evaluation \"{eval_id}\"");
    super::monitor::monitor(api, &text(&d["JobID"]), &eval_id, EVAL_TIMEOUT, out).await
}

async fn promote(args: PromoteArgs) -> anyhow::Result<std::process::ExitCode> {
    let api = args.api.client()?;
    let len = id_len(args.verbose);
    let d = resolve(&api, &args.id, len).await?;
    let id = text(&d["ID"]);
    let body = if args.groups.is_empty() {
        json!({ "DeploymentID": id, "All": true })
    } else {
        json!({ "DeploymentID": id, "Groups": args.groups })
    };
    let resp: Value = api
        .request(
            Method::POST,
            &format!("/v1/deployment/promote/{}", urlencode(&id)),
            Some(&body),
        )
        .await
        .with_context(|| format!("promoting deployment {:?}", limit(&d["ID"], len)))?;
    after_write(&api, &args.api, &d, &resp, args.detach).await
}

async fn fail(args: WriteArgs) -> anyhow::Result<std::process::ExitCode> {
    let api = args.api.client()?;
    let len = id_len(args.verbose);
    let d = resolve(&api, &args.id, len).await?;
    let id = text(&d["ID"]);
    let resp: Value = api
        .request(
            Method::POST,
            &format!("/v1/deployment/fail/{}", urlencode(&id)),
            Some(&json!({ "DeploymentID": id })),
        )
        .await
        .with_context(|| format!("failing deployment {:?}", limit(&d["ID"], len)))?;
    if !args.api.structured() {
        match resp["RevertedJobVersion"].as_u64() {
            Some(v) => println!(
                "Deployment {:?} failed. Auto-reverted to job version {v}.\n",
                limit(&d["ID"], len)
            ),
            None => println!("Deployment {:?} failed\n", limit(&d["ID"], len)),
        }
    }
    after_write(&api, &args.api, &d, &resp, args.detach).await
}

async fn pause(args: PauseArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let len = id_len(args.verbose);
    let d = resolve(&api, &args.id, len).await?;
    let id = text(&d["ID"]);
    let resp: Value = api
        .request(
            Method::POST,
            &format!("/v1/deployment/pause/{}", urlencode(&id)),
            Some(&json!({ "DeploymentID": id, "Pause": true })),
        )
        .await
        .with_context(|| format!("pausing deployment {:?}", limit(&d["ID"], len)))?;
    if args.api.structured() {
        return args.api.print(&resp);
    }
    println!("Deployment {:?} paused", limit(&d["ID"], len));
    Ok(())
}

async fn resume(args: WriteArgs) -> anyhow::Result<std::process::ExitCode> {
    let api = args.api.client()?;
    let len = id_len(args.verbose);
    let d = resolve(&api, &args.id, len).await?;
    let id = text(&d["ID"]);
    let resp: Value = api
        .request(
            Method::POST,
            &format!("/v1/deployment/pause/{}", urlencode(&id)),
            Some(&json!({ "DeploymentID": id, "Pause": false })),
        )
        .await
        .with_context(|| format!("resuming deployment {:?}", limit(&d["ID"], len)))?;
    if !args.api.structured() {
        println!("Deployment {:?} resumed\n", limit(&d["ID"], len));
    }
    after_write(&api, &args.api, &d, &resp, args.detach).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(canaries: u64, auto_revert: bool) -> Value {
        json!({
            "ID": "0b23b149-7dbe-0e11-8a80-7f0d1ba2ad31",
            "JobID": "web",
            "JobVersion": 3,
            "Status": "running",
            "StatusDescription": "Deployment is running but requires manual promotion",
            "TaskGroups": {
                "web": {
                    "AutoRevert": auto_revert,
                    "Promoted": false,
                    "DesiredCanaries": canaries,
                    "DesiredTotal": 3,
                    "PlacedAllocs": 1,
                    "HealthyAllocs": 1,
                    "UnhealthyAllocs": 0,
                    "ProgressDeadline": 600_000_000_000u64,
                    "RequireProgressBy": "2026-01-02T03:04:05.123456Z",
                },
                "api": {
                    "AutoRevert": false,
                    "Promoted": false,
                    "DesiredCanaries": 0,
                    "DesiredTotal": 1,
                    "PlacedAllocs": 0,
                    "HealthyAllocs": 0,
                    "UnhealthyAllocs": 0,
                    "ProgressDeadline": 600_000_000_000u64,
                    "RequireProgressBy": "0001-01-01T00:00:00Z",
                },
            },
        })
    }

    #[test]
    fn status_is_formatted_as_nomad_formats_it() {
        let out = format_deployment(&deployment(1, true), 8);
        let expected = "\
ID          = 0b23b149
Job ID      = web
Job Version = 3
Status      = running
Description = Deployment is running but requires manual promotion

Deployed
Task Group  Auto Revert  Promoted  Desired  Canaries  Placed  Healthy  Unhealthy  Progress Deadline
api         false        N/A       1        0         0       0        0          N/A
web         true         false     3        1         1       1        0          2026-01-02T03:04:05Z
";
        assert_eq!(out, expected);
        // Without canaries or auto-revert, those columns are left out.
        let out = groups_table(&deployment(0, false));
        assert!(
            out.starts_with("Task Group  Desired  Placed  Healthy  Unhealthy  Progress Deadline\n"),
            "{out}"
        );
    }

    #[test]
    fn the_list_shows_short_ids_unless_verbose() {
        let d = deployment(0, false);
        let short = deployments_table(std::slice::from_ref(&d), 8);
        assert!(short.contains("0b23b149  web     3"), "{short}");
        let long = deployments_table(&[d], usize::MAX);
        assert!(
            long.contains("0b23b149-7dbe-0e11-8a80-7f0d1ba2ad31"),
            "{long}"
        );
        assert_eq!(
            progress_time(&json!("2026-01-02T03:04:05+02:00")),
            "2026-01-02T03:04:05+02:00"
        );
        assert_eq!(
            progress_time(&json!("2026-01-02T03:04:05.5-07:00")),
            "2026-01-02T03:04:05-07:00"
        );
    }
}
