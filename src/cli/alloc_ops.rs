//! Operators' commands on one allocation, as nomad's:
//!
//! - `teamster alloc stop [-detach] ALLOC`: stop it and let the scheduler place a replacement
//!   (`POST /v1/allocation/:id/stop`). Without `-detach` it follows the `alloc-stop`
//!   evaluation like `job run` (exit code 2 when the replacement could not be placed).
//! - `teamster alloc restart [-all-tasks] [-task T] ALLOC [TASK]`: restart its tasks in place
//!   (`/v1/client/allocation/:id/restart`); without a task, every running one; with
//!   `-all-tasks`, every task, prestart tasks again before the main tasks.
//! - `teamster alloc signal [-s SIG] [-task T] ALLOC [TASK]`: send a signal (SIGKILL unless
//!   `-s` names one) to its tasks (`/v1/client/allocation/:id/signal`).
//!
//! The allocation may be a unique ID prefix; any agent will do (a server forwards the client
//! requests to the node that runs the allocation).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use reqwest::Method;
use serde_json::{json, Value};

use super::args::ApiArgs;

/// `alloc stop`.
#[derive(Debug, Args)]
pub struct StopArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Return once the stop is written, without following its evaluation.
    #[arg(long)]
    detach: bool,
    /// How long to follow the evaluation before giving up.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// The allocation ID (or a unique prefix).
    id: String,
}

/// Stop an allocation, then follow its evaluation unless `-detach`.
pub async fn stop(a: StopArgs) -> anyhow::Result<ExitCode> {
    let api = a.api.client()?;
    let alloc_id = super::args::resolve(&api, "/v1/allocations", "allocation", &a.id).await?;
    let alloc: Value = api
        .get(&format!("/v1/allocation/{alloc_id}"))
        .await
        .with_context(|| format!("reading allocation {alloc_id}"))?;
    let resp: Value = api
        .request::<(), Value>(
            Method::POST,
            &format!("/v1/allocation/{alloc_id}/stop"),
            None,
        )
        .await
        .with_context(|| format!("stopping allocation {alloc_id}"))?;
    let eval_id = resp["EvalID"].as_str().unwrap_or_default().to_string();
    if a.detach {
        if a.api.structured() {
            a.api.print(&resp)?;
        } else {
            println!("{eval_id}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !a.api.structured() {
        println!("==> Monitoring evaluation \"{eval_id}\"");
    }
    let job_id = alloc["JobID"].as_str().unwrap_or_default();
    super::monitor::monitor(&api, job_id, &eval_id, a.timeout, &a.api).await
}

/// The task a command names: positionally or with `-task` (not both, unless equal).
fn task_named(positional: Option<String>, flag: Option<String>) -> anyhow::Result<Option<String>> {
    match (positional, flag) {
        (Some(a), Some(b)) if a != b => {
            anyhow::bail!("the task is named twice: {a:?} and -task {b:?}")
        }
        (a, b) => Ok(a.or(b)),
    }
}

/// `alloc restart`.
#[derive(Debug, Args)]
pub struct RestartArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Restart every task of the allocation, completed lifecycle tasks too, from the
    /// lifecycle's beginning (not with a task name).
    #[arg(long, conflicts_with_all = ["task", "task_flag"])]
    all_tasks: bool,
    /// The task to restart (as the TASK argument).
    #[arg(long = "task", value_name = "TASK")]
    task_flag: Option<String>,
    /// The allocation ID (or a unique prefix).
    id: String,
    /// The task to restart; every running task when absent.
    task: Option<String>,
}

/// Restart an allocation's tasks in place.
pub async fn restart(a: RestartArgs) -> anyhow::Result<ExitCode> {
    let api = a.api.client()?;
    let alloc_id = super::args::resolve(&api, "/v1/allocations", "allocation", &a.id).await?;
    let task = task_named(a.task, a.task_flag)?;
    let body = json!({ "TaskName": task.clone().unwrap_or_default(), "AllTasks": a.all_tasks });
    let _: Value = api
        .request(
            Method::POST,
            &format!("/v1/client/allocation/{alloc_id}/restart"),
            Some(&body),
        )
        .await
        .with_context(|| match &task {
            Some(t) => format!("restarting task {t} of allocation {alloc_id}"),
            None => format!("restarting allocation {alloc_id}"),
        })?;
    Ok(ExitCode::SUCCESS)
}

/// `alloc signal`.
#[derive(Debug, Args)]
pub struct SignalArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// The signal to send (`SIGUSR1`, `USR1`, …).
    #[arg(short = 's', default_value = "SIGKILL")]
    signal: String,
    /// The task to signal (as the TASK argument).
    #[arg(long = "task", value_name = "TASK")]
    task_flag: Option<String>,
    /// The allocation ID (or a unique prefix).
    id: String,
    /// The task to signal; every running task when absent.
    task: Option<String>,
}

/// Send a signal to an allocation's tasks.
pub async fn signal(a: SignalArgs) -> anyhow::Result<ExitCode> {
    let api = a.api.client()?;
    let alloc_id = super::args::resolve(&api, "/v1/allocations", "allocation", &a.id).await?;
    let task = task_named(a.task, a.task_flag)?;
    let body = json!({ "Task": task.clone().unwrap_or_default(), "Signal": a.signal });
    let _: Value = api
        .request(
            Method::POST,
            &format!("/v1/client/allocation/{alloc_id}/signal"),
            Some(&body),
        )
        .await
        .with_context(|| format!("sending {} to allocation {alloc_id}", a.signal))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_task_is_named_once() {
        use super::task_named;
        assert_eq!(
            task_named(Some("a".into()), None).unwrap(),
            Some("a".into())
        );
        assert_eq!(
            task_named(None, Some("a".into())).unwrap(),
            Some("a".into())
        );
        assert_eq!(
            task_named(Some("a".into()), Some("a".into())).unwrap(),
            Some("a".into())
        );
        assert!(task_named(Some("a".into()), Some("b".into())).is_err());
        assert_eq!(task_named(None, None).unwrap(), None);
    }
}
