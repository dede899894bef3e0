//! `teamster alloc stop [-detach] ALLOC`: stop one allocation and let the scheduler place a
//! replacement, as `nomad alloc stop` (`POST /v1/allocation/:id/stop`). Without `-detach` it
//! follows the `alloc-stop` evaluation like `job run` (exit code 2 when the replacement
//! could not be placed).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use reqwest::Method;
use serde_json::Value;

use super::{ApiArgs, ApiClient};

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
    let api = ApiClient::new(&a.api.address);
    let alloc_id = super::eval::resolve(&api, "/v1/allocations", "allocation", &a.id).await?;
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
        if a.api.json {
            println!("{}", serde_json::to_string_pretty(&resp)?);
        } else {
            println!("{eval_id}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !a.api.json {
        println!("==> Monitoring evaluation \"{eval_id}\"");
    }
    let job_id = alloc["JobID"].as_str().unwrap_or_default();
    super::job::monitor(&api, job_id, &eval_id, a.timeout, a.api.json).await
}
