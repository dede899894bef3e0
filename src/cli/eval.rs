//! `teamster eval list` and `teamster eval status ID`, and the dispatch of the `alloc`
//! commands (`alloc_status`, `alloc_logs`, `alloc_fs`, `alloc_ops`, `alloc_exec`).

use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use serde_json::Value;

use super::output::{short_id, table, text};
use super::{ApiArgs, ApiClient};

/// `eval …`.
#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// List evaluations.
    List(EvalListArgs),
    /// Show one evaluation (an ID or a unique ID prefix).
    Status(IdArgs),
}

/// `alloc …`.
#[derive(Debug, Subcommand)]
pub enum AllocCommand {
    /// Show one allocation (an ID or a unique ID prefix).
    Status(super::alloc_status::StatusArgs),
    /// Print a task's log (stdout, or stderr with `--stderr`).
    Logs(super::alloc_logs::LogsArgs),
    /// List, print, stat or follow a file of an allocation's directory.
    Fs(super::alloc_fs::FsArgs),
    /// Stop an allocation and place a replacement; follows the evaluation unless `-detach`.
    Stop(super::alloc_ops::StopArgs),
    /// Restart an allocation's tasks in place (every running one unless a task is named).
    Restart(super::alloc_ops::RestartArgs),
    /// Send a signal to an allocation's tasks (SIGKILL unless `-s` names one).
    Signal(super::alloc_ops::SignalArgs),
    /// Run a command in the place of a running task; exits with the command's code.
    Exec(super::alloc_exec::ExecArgs),
}

/// `eval list`.
#[derive(Debug, Args)]
pub struct EvalListArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Only evaluations of this job.
    #[arg(long)]
    job: Option<String>,
    /// Only evaluations with this status (pending, blocked, complete, failed, canceled).
    #[arg(long)]
    status: Option<String>,
}

/// A command taking one ID (or prefix).
#[derive(Debug, Args)]
pub struct IdArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// The ID or a unique prefix of it.
    id: String,
}

/// Run an `eval` command.
pub async fn run_eval(cmd: EvalCommand) -> anyhow::Result<()> {
    match cmd {
        EvalCommand::List(args) => eval_list(args).await,
        EvalCommand::Status(args) => eval_status(args).await,
    }
}

/// Run an `alloc` command; the exit code is 0, 1 (an error) or 2 (`alloc stop` whose
/// replacement could not be placed), or the command's own for `alloc exec`.
pub async fn run_alloc(cmd: AllocCommand) -> anyhow::Result<ExitCode> {
    let done = match cmd {
        AllocCommand::Status(args) => super::alloc_status::status(args).await,
        AllocCommand::Logs(args) => super::alloc_logs::logs(args).await,
        AllocCommand::Fs(args) => super::alloc_fs::fs(args).await,
        AllocCommand::Stop(args) => return super::alloc_ops::stop(args).await,
        AllocCommand::Restart(args) => return super::alloc_ops::restart(args).await,
        AllocCommand::Signal(args) => return super::alloc_ops::signal(args).await,
        AllocCommand::Exec(args) => return super::alloc_exec::exec(args).await,
    };
    done.map(|()| ExitCode::SUCCESS)
}

async fn eval_list(args: EvalListArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let mut query = Vec::new();
    if let Some(job) = &args.job {
        query.push(format!("job={job}"));
    }
    if let Some(status) = &args.status {
        query.push(format!("status={status}"));
    }
    let path = format!("/v1/evaluations?{}", query.join("&"));
    let evals: Vec<Value> = api.get(&path).await.context("listing evaluations")?;
    if args.api.structured() {
        args.api.print(&evals)?;
        return Ok(());
    }
    let mut rows = vec![[
        "ID",
        "Priority",
        "Triggered By",
        "Job ID",
        "Node ID",
        "Status",
        "Placement Failures",
    ]
    .map(String::from)
    .to_vec()];
    for e in &evals {
        let failures = e["FailedTGAllocs"]
            .as_object()
            .is_some_and(|m| !m.is_empty());
        rows.push(vec![
            short_id(&e["ID"]),
            text(&e["Priority"]),
            text(&e["TriggeredBy"]),
            text(&e["JobID"]),
            short_id(&e["NodeID"]),
            text(&e["Status"]),
            failures.to_string(),
        ]);
    }
    print!("{}", table(&rows));
    Ok(())
}

/// Resolve an ID prefix through a `?prefix=` listing of every namespace (IDs are unique
/// across them).
pub(super) async fn resolve(
    api: &ApiClient,
    list: &str,
    what: &str,
    id: &str,
) -> anyhow::Result<String> {
    let found: Vec<Value> = api
        .get(&format!("{list}?prefix={id}&namespace=*"))
        .await
        .with_context(|| format!("looking up {what} {id}"))?;
    match found.as_slice() {
        [] => bail!("No {what} with prefix or id {id:?} found"),
        [one] => Ok(text(&one["ID"])),
        many => bail!(
            "Prefix matched multiple {what}s: {}",
            many.iter()
                .map(|v| text(&v["ID"]))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

async fn eval_status(args: IdArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let id = resolve(&api, "/v1/evaluations", "evaluation", &args.id).await?;
    let e: Value = api
        .get(&format!("/v1/evaluation/{id}"))
        .await
        .context("reading the evaluation")?;
    if args.api.structured() {
        args.api.print(&e)?;
        return Ok(());
    }
    let fields = [
        ("ID", "ID"),
        ("Create Index", "CreateIndex"),
        ("Modify Index", "ModifyIndex"),
        ("Status", "Status"),
        ("Status Description", "StatusDescription"),
        ("Type", "Type"),
        ("TriggeredBy", "TriggeredBy"),
        ("Job ID", "JobID"),
        ("Namespace", "Namespace"),
        ("Priority", "Priority"),
        ("Previous Eval", "PreviousEval"),
        ("Next Eval", "NextEval"),
        ("Blocked Eval", "BlockedEval"),
    ];
    for (label, key) in fields {
        println!("{label:<20}= {}", text(&e[key]));
    }
    if let Some(failed) = e["FailedTGAllocs"].as_object().filter(|m| !m.is_empty()) {
        println!("\nFailed Placements");
        for (group, metric) in failed {
            println!("Task Group {group:?}: {}", metric);
        }
    }
    Ok(())
}
