//! Following an evaluation to its end, as `nomad job run`, `job stop`, `alloc stop` and
//! `deployment promote` do: blocking queries on the evaluation, then what was placed and
//! what failed.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::args::ApiArgs;
use super::output::{alloc_metrics, short_id};
use crate::api::{urlencode, ApiClient, ApiError};

/// Follow an evaluation (and the blocked evaluation it may leave) with blocking queries until
/// the scheduler is done with it; print what was placed and what failed.
pub async fn monitor(
    api: &ApiClient,
    job_id: &str,
    eval_id: &str,
    timeout: Duration,
    out: &ApiArgs,
) -> anyhow::Result<ExitCode> {
    let deadline = Instant::now() + timeout;
    let mut index = 0u64;
    let eval = loop {
        if Instant::now() >= deadline {
            bail!("evaluation {eval_id} did not finish within {timeout:?}");
        }
        let path = format!("/v1/evaluation/{eval_id}?index={index}&wait=10s");
        let (eval, new_index) = match api.get_with_index::<Value>(&path).await {
            Ok(r) => r,
            // Followers may not have applied the evaluation yet.
            Err(ApiError::Status { status, .. }) if status == StatusCode::NOT_FOUND => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            Err(e) => return Err(e).context("reading the evaluation"),
        };
        let status = eval["Status"].as_str().unwrap_or_default();
        if matches!(status, "complete" | "failed" | "canceled" | "blocked") {
            break eval;
        }
        index = new_index.max(index);
    };
    let allocs: Vec<Value> = api
        .get(&format!("/v1/job/{}/allocations", urlencode(job_id)))
        .await
        .context("reading the job's allocations")?;
    let failed = eval["FailedTGAllocs"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    if out.structured() {
        out.print(&json!({ "Evaluation": eval, "Allocations": allocs }))?;
    } else {
        let status = eval["Status"].as_str().unwrap_or_default();
        println!("    Evaluation status is \"{status}\"");
        for a in allocs
            .iter()
            .filter(|a| a["EvalID"].as_str() == Some(eval_id))
        {
            println!(
                "    Allocation \"{}\" created: node \"{}\", group \"{}\"",
                short_id(&a["ID"]),
                short_id(&a["NodeID"]),
                a["TaskGroup"].as_str().unwrap_or_default()
            );
        }
        for (group, metric) in &failed {
            println!("    Task group \"{group}\" failed to place all allocations:");
            print!("{}", alloc_metrics(metric, "      "));
        }
        if let Some(desc) = eval["StatusDescription"].as_str().filter(|d| !d.is_empty()) {
            println!("    {desc}");
        }
        println!(
            "==> Evaluation \"{}\" finished with status \"{}\"",
            short_id(&Value::from(eval_id)),
            status
        );
    }
    if !failed.is_empty() || eval["Status"].as_str() == Some("failed") {
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}
