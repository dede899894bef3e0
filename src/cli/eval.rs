//! `teamster eval list` and `teamster eval status ID`.

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::Value;

use super::args::{resolve, ApiArgs};
use super::output::{short_id, table, text};

/// `eval …`.
#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// List evaluations.
    List(EvalListArgs),
    /// Show one evaluation (an ID or a unique ID prefix).
    Status(IdArgs),
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
    print!("{}", table(&list_rows(&evals)));
    Ok(())
}

/// The `eval list` table: newest first, as Nomad lists them.
fn list_rows(evals: &[Value]) -> Vec<Vec<String>> {
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
    let mut newest_first: Vec<&Value> = evals.iter().collect();
    newest_first.sort_by_key(|e| std::cmp::Reverse(e["CreateIndex"].as_u64().unwrap_or(0)));
    for e in newest_first {
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
    rows
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Issue 54: `eval list` shows the newest evaluation first, as Nomad's does.
    #[test]
    fn evaluations_are_listed_newest_first() {
        let evals = vec![
            json!({"ID": "aaaaaaaa-1", "JobID": "old", "CreateIndex": 5}),
            json!({"ID": "bbbbbbbb-2", "JobID": "new", "CreateIndex": 42}),
            json!({"ID": "cccccccc-3", "JobID": "mid", "CreateIndex": 17}),
        ];
        let jobs: Vec<String> = list_rows(&evals)[1..]
            .iter()
            .map(|r| r[3].clone())
            .collect();
        assert_eq!(jobs, ["new", "mid", "old"]);
    }
}
