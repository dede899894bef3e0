//! `teamster operator scheduler get-config | set-config`.

use anyhow::{bail, Context};
use clap::Args;
use reqwest::Method;
use serde_json::Value;

use super::args::ApiArgs;

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
    /// Let system jobs preempt lower-priority allocations.
    #[arg(long = "preempt-system-scheduler")]
    preempt_system: Option<bool>,
    /// Let sysbatch jobs preempt lower-priority allocations.
    #[arg(long = "preempt-sysbatch-scheduler")]
    preempt_sysbatch: Option<bool>,
    /// Let batch jobs preempt lower-priority allocations.
    #[arg(long = "preempt-batch-scheduler")]
    preempt_batch: Option<bool>,
    /// Let service jobs preempt lower-priority allocations.
    #[arg(long = "preempt-service-scheduler")]
    preempt_service: Option<bool>,
    /// The share of the cluster supervisor jobs may hold, in (0, 1] (a teamster extension).
    #[arg(long = "supervisor-fraction")]
    supervisor_fraction: Option<f64>,
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
    let preemption = &sc["PreemptionConfig"];
    for (label, key) in [
        ("Preemption System Scheduler  ", "SystemSchedulerEnabled"),
        ("Preemption Service Scheduler ", "ServiceSchedulerEnabled"),
        ("Preemption Batch Scheduler   ", "BatchSchedulerEnabled"),
        ("Preemption SysBatch Scheduler", "SysBatchSchedulerEnabled"),
    ] {
        println!("{label} = {}", preemption[key]);
    }
    println!(
        "Supervisor Fraction           = {}",
        sc["SupervisorFraction"]
    );
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
    for (value, key) in [
        (args.preempt_system, "SystemSchedulerEnabled"),
        (args.preempt_sysbatch, "SysBatchSchedulerEnabled"),
        (args.preempt_batch, "BatchSchedulerEnabled"),
        (args.preempt_service, "ServiceSchedulerEnabled"),
    ] {
        if let Some(v) = value {
            sc["PreemptionConfig"][key] = v.into();
        }
    }
    if let Some(f) = args.supervisor_fraction {
        if !(f > 0.0 && f <= 1.0) {
            bail!("--supervisor-fraction must be in (0, 1], not {f}");
        }
        sc["SupervisorFraction"] = f.into();
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
