//! `teamster status [PREFIX]`, as `nomad status`: without an argument the jobs; with one, the
//! status of the job, allocation, evaluation or node whose ID starts with it (found through
//! `/v1/search`), or the list of matches when it names several objects.

use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;
use serde_json::{json, Value};

use super::args::ApiArgs;

/// What `status` did, or which command shows what the prefix named.
#[derive(Debug)]
pub enum Outcome {
    /// Done, with this exit code.
    Done(ExitCode),
    /// Run this command line (`teamster <job|alloc|eval|node> status [id]` with the same
    /// API flags).
    Show(Vec<String>),
}

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

/// Find what the prefix names (or the jobs).
pub async fn run(args: StatusArgs) -> anyhow::Result<Outcome> {
    let api = args.api.client()?;
    let Some(prefix) = args.prefix else {
        return Ok(show(&args.api, "job", None));
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
        [(cmd, id)] => Ok(show(&args.api, cmd, Some(id))),
        many => {
            println!("Prefix matched multiple objects:");
            for (cmd, id) in many {
                println!("  {cmd:<5}  {id}");
            }
            Ok(Outcome::Done(ExitCode::FAILURE))
        }
    }
}

/// The command line of `<cmd> status [id]` with the same API flags.
fn show(api: &ApiArgs, cmd: &str, id: Option<&String>) -> Outcome {
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
    Outcome::Show(argv)
}
