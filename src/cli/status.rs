//! `teamster status [PREFIX]`, as `nomad status`: without an argument the jobs; with one, the
//! status of the job, allocation, evaluation or node whose ID starts with it (found through
//! `/v1/search`), or the list of matches when it names several objects.

use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Args, Parser};
use serde_json::{json, Value};

use super::{ApiArgs, Cli, Command};

/// `status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// An ID or ID prefix of a job, allocation, evaluation or node.
    prefix: Option<String>,
}

/// The command that shows one object of a search context.
fn command_for(context: &str) -> Option<&'static str> {
    match context {
        "jobs" => Some("job"),
        "allocs" => Some("alloc"),
        "evals" => Some("eval"),
        "nodes" => Some("node"),
        _ => None,
    }
}

/// Show what the prefix names (or the jobs).
pub async fn run(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let api = args.api.client()?;
    let Some(prefix) = args.prefix else {
        return show(&args.api, "job", None).await;
    };
    let found: Value = api
        .request(
            reqwest::Method::POST,
            "/v1/search",
            Some(&json!({ "Prefix": prefix, "Context": "all" })),
        )
        .await
        .with_context(|| format!("searching for {prefix:?}"))?;
    let mut matches: Vec<(&'static str, String)> = Vec::new();
    for (context, ids) in found["Matches"].as_object().into_iter().flatten() {
        let Some(cmd) = command_for(context) else {
            continue;
        };
        for id in ids.as_array().into_iter().flatten() {
            if let Some(id) = id.as_str() {
                matches.push((cmd, id.to_string()));
            }
        }
    }
    // An exact ID wins over longer ones that share the prefix.
    if let Some(exact) = matches.iter().find(|(_, id)| *id == prefix) {
        matches = vec![exact.clone()];
    }
    match matches.as_slice() {
        [] => bail!(
            "No job(s), allocation(s), evaluation(s) or node(s) with prefix or ID {prefix:?} found"
        ),
        [(cmd, id)] => show(&args.api, cmd, Some(id)).await,
        many => {
            println!("Prefix matched multiple objects:");
            for (cmd, id) in many {
                println!("  {cmd:<5}  {id}");
            }
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Run `<cmd> status [id]` with the same API flags.
async fn show(api: &ApiArgs, cmd: &str, id: Option<&String>) -> anyhow::Result<ExitCode> {
    let mut argv = vec![
        "teamster".to_string(),
        cmd.to_string(),
        "status".to_string(),
        "--address".to_string(),
        api.address.clone(),
    ];
    if api.json {
        argv.push("--json".into());
    }
    if let Some(t) = &api.template {
        argv.extend(["--template".to_string(), t.clone()]);
    }
    argv.extend(id.cloned());
    let cli = Cli::try_parse_from(argv).context("building the status command")?;
    match cli.command {
        Command::Job(c) => Box::pin(super::job::run(c)).await,
        Command::Alloc(c) => super::eval::run_alloc(c).await,
        Command::Eval(c) => super::eval::run_eval(c).await.map(|()| ExitCode::SUCCESS),
        Command::Node(c) => super::node::run(c).await.map(|()| ExitCode::SUCCESS),
        _ => bail!("no status command for {cmd}"),
    }
}
