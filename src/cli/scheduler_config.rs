//! `teamster operator scheduler get-config | set-config`.

use anyhow::{bail, Context};
use clap::Args;
use reqwest::Method;
use serde_json::Value;

use super::ApiArgs;

/// `operator scheduler get-config`.
#[derive(Debug, Args)]
pub struct GetConfigArgs {
    #[command(flatten)]
    api: ApiArgs,
}

/// `operator scheduler set-config`.
#[derive(Debug, Args)]
pub struct SetConfigArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// `binpack` or `spread`.
    #[arg(long = "scheduler-algorithm")]
    scheduler_algorithm: Option<String>,
    /// Allow tasks to use more memory than reserved.
    #[arg(long = "memory-oversubscription")]
    memory_oversubscription: Option<bool>,
    /// Refuse job registrations.
    #[arg(long = "reject-job-registration")]
    reject_job_registration: Option<bool>,
    /// Keep the eval broker paused.
    #[arg(long = "pause-eval-broker")]
    pause_eval_broker: Option<bool>,
    /// Apply only if the configuration was not changed meanwhile (compare-and-set).
    #[arg(long = "check-index")]
    check_index: Option<u64>,
}

/// `operator scheduler get-config`.
pub async fn get_config(args: GetConfigArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let conf: Value = api
        .get("/v1/operator/scheduler/configuration")
        .await
        .context("reading the scheduler configuration")?;
    let sc = &conf["SchedulerConfig"];
    if args.api.structured() {
        args.api.print(sc)?;
        return Ok(());
    }
    println!(
        "Scheduler Algorithm           = {}",
        sc["SchedulerAlgorithm"].as_str().unwrap_or("binpack")
    );
    println!(
        "Memory Oversubscription       = {}",
        sc["MemoryOversubscriptionEnabled"]
    );
    println!(
        "Reject Job Registration       = {}",
        sc["RejectJobRegistration"]
    );
    println!("Pause Eval Broker             = {}", sc["PauseEvalBroker"]);
    println!("Modify Index                  = {}", sc["ModifyIndex"]);
    Ok(())
}

/// `operator scheduler set-config`.
pub async fn set_config(args: SetConfigArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let conf: Value = api
        .get("/v1/operator/scheduler/configuration")
        .await
        .context("reading the scheduler configuration")?;
    let mut sc = conf["SchedulerConfig"].clone();
    if let Some(a) = &args.scheduler_algorithm {
        if a != "binpack" && a != "spread" {
            bail!("--scheduler-algorithm must be binpack or spread, not {a:?}");
        }
        sc["SchedulerAlgorithm"] = a.as_str().into();
    }
    if let Some(v) = args.memory_oversubscription {
        sc["MemoryOversubscriptionEnabled"] = v.into();
    }
    if let Some(v) = args.reject_job_registration {
        sc["RejectJobRegistration"] = v.into();
    }
    if let Some(v) = args.pause_eval_broker {
        sc["PauseEvalBroker"] = v.into();
    }
    let path = match args.check_index {
        Some(i) => format!("/v1/operator/scheduler/configuration?cas={i}"),
        None => "/v1/operator/scheduler/configuration".to_string(),
    };
    let r: Value = api
        .request(Method::PUT, &path, Some(&sc))
        .await
        .context("writing the scheduler configuration")?;
    if r["Updated"] == true {
        println!("Scheduler configuration updated!");
        Ok(())
    } else {
        bail!("the configuration changed meanwhile (check index mismatch); not updated")
    }
}
