//! `teamster job …`: run, plan, status, stop, inspect, validate, history, revert and scale,
//! like `nomad job …` (`plan` is in `job_plan`, `periodic force` and `dispatch` in
//! `job_dispatch`).
//!
//! `job run FILE` takes an HCL2 job file (`.hcl`, `.nomad`: Nomad's jobspec, with `--var`,
//! `--var-file` and `NOMAD_VAR_*` for its variables) or Nomad's JSON job (`{"Job": {...}}` or
//! a bare job object); `-` reads the file from stdin (HCL unless it starts with `{`).
//! Without `--detach` it follows the evaluation until the scheduler is done with it
//! and prints the placements and failures; it exits 2 when some allocations could not be
//! placed, like `nomad job run`. A service job's deployment is then followed to its end,
//! and the command exits 1 when it does not succeed.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::args::ApiArgs;
use super::job_file::{read_job_file, JobFileArgs};
use super::monitor::monitor;
use super::output::{alloc_metrics, short_id, table, text, unix_nanos};
use crate::api::urlencode;
use crate::api::{ApiClient, ApiError};

/// `job …`.
#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Register (or update) a job from an HCL or JSON file and follow its evaluation.
    Run(RunArgs),
    /// List the jobs, or show one job with its allocations.
    Status(StatusArgs),
    /// Stop a job (and purge it with `--purge`).
    Stop(StopArgs),
    /// Print a job as the cluster holds it, as JSON.
    Inspect(InspectArgs),
    /// Check a job file without registering it; lists every problem.
    Validate(ValidateArgs),
    /// List the versions the cluster keeps of a job.
    History(HistoryArgs),
    /// Register an earlier version of a job again, as its newest version.
    Revert(RevertArgs),
    /// Show what `job run` would change, without changing anything (exit 0: no allocation
    /// created or destroyed, 1: some would be, 255: error).
    Plan(super::job_plan::PlanArgs),
    /// Set a task group's count, within its `scaling` block's bounds.
    Scale(ScaleArgs),
    /// List a job's allocations.
    Allocs(InspectArgs),
    /// Periodic jobs: force a launch.
    #[command(subcommand)]
    Periodic(super::job_dispatch::PeriodicCommand),
    /// Launch a child of a parameterized job, with a payload and meta.
    Dispatch(super::job_dispatch::DispatchArgs),
    /// Write an example job file (`example.nomad.hcl`).
    Init(super::job_init::InitArgs),
    /// Run a task's action (its `action` block) in one of the job's allocations.
    Action(super::job_action::ActionArgs),
}

/// `job scale`.
#[derive(Debug, Args)]
pub struct ScaleArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// The job.
    id: String,
    /// `[GROUP] COUNT`: the group may be left out when the job has only one.
    #[arg(value_name = "GROUP] [COUNT", num_args = 1..=2, required = true)]
    group_and_count: Vec<String>,
    /// Why (recorded with the scaling event).
    #[arg(long, default_value = "submitted using the CLI")]
    message: String,
}

/// `job history`.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// The job.
    id: String,
    /// Show each version's changes from the one before it.
    #[arg(long = "diffs", short = 'p')]
    diffs: bool,
}

/// `job revert`.
#[derive(Debug, Args)]
pub struct RevertArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// The job.
    id: String,
    /// The version to go back to.
    #[arg(value_name = "VERSION")]
    job_version: u64,
    /// Revert only if the job's current version is this one.
    #[arg(long)]
    enforce_prior_version: Option<u64>,
}

/// `job run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    api: ApiArgs,
    #[command(flatten)]
    job: JobFileArgs,
    /// Return once the job is registered, without following its evaluation.
    #[arg(long)]
    detach: bool,
    /// How long to follow the evaluation before giving up.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Register only if the job's `JobModifyIndex` is still this one (as `job plan` printed
    /// it; 0: only if the job does not exist yet).
    #[arg(long, value_name = "INDEX")]
    check_index: Option<u64>,
    /// Print the job as the JSON the API takes (`{"Job": {...}}`) and exit without
    /// registering it (Nomad's `-output`).
    #[arg(long)]
    output: bool,
}

/// `job status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// The job; all jobs when absent.
    id: Option<String>,
}

/// `job stop`.
#[derive(Debug, Args)]
pub struct StopArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// The job.
    id: String,
    /// Delete the job from the cluster's state instead of keeping it stopped.
    #[arg(long)]
    purge: bool,
    /// Return without following the evaluation that stops the allocations.
    #[arg(long)]
    detach: bool,
    /// How long to follow the evaluation before giving up.
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

/// `job inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// The job.
    id: String,
}

/// `job validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    api: ApiArgs,
    #[command(flatten)]
    job: JobFileArgs,
}

/// Run one `job` command; the exit code is 0, 1 (an error) or 2 (placement failures).
pub async fn run(cmd: JobCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        JobCommand::Run(a) => run_job(a).await,
        JobCommand::Status(a) => status(a).await.map(|()| ExitCode::SUCCESS),
        JobCommand::Stop(a) => stop(a).await,
        JobCommand::Inspect(a) => inspect(a).await.map(|()| ExitCode::SUCCESS),
        JobCommand::Validate(a) => validate(a).await,
        JobCommand::History(a) => history(a).await.map(|()| ExitCode::SUCCESS),
        JobCommand::Revert(a) => revert(a).await.map(|()| ExitCode::SUCCESS),
        JobCommand::Plan(a) => Ok(super::job_plan::plan(a).await),
        JobCommand::Scale(a) => scale(a).await.map(|()| ExitCode::SUCCESS),
        JobCommand::Allocs(a) => allocs(a).await.map(|()| ExitCode::SUCCESS),
        JobCommand::Periodic(c) => super::job_dispatch::periodic(c)
            .await
            .map(|()| ExitCode::SUCCESS),
        JobCommand::Dispatch(a) => super::job_dispatch::dispatch(a)
            .await
            .map(|()| ExitCode::SUCCESS),
        JobCommand::Init(a) => super::job_init::run(a).map(|()| ExitCode::SUCCESS),
        JobCommand::Action(a) => super::job_action::run(a).await,
    }
}

async fn run_job(args: RunArgs) -> anyhow::Result<ExitCode> {
    let job = read_job_file(&args.job)?;
    if args.output {
        println!("{}", serde_json::to_string_pretty(&json!({ "Job": job }))?);
        return Ok(ExitCode::SUCCESS);
    }
    let api = args.api.client()?;
    let body = match args.check_index {
        Some(index) => json!({ "Job": job, "EnforceIndex": true, "JobModifyIndex": index }),
        None => json!({ "Job": job }),
    };
    let resp: Value = api
        .request(Method::POST, "/v1/jobs", Some(&body))
        .await
        .context("registering the job")?;
    // As Nomad's CLI: the server's warnings go to stderr before anything else.
    if let Some(warnings) = resp["Warnings"].as_str().filter(|w| !w.is_empty()) {
        eprintln!("Job Warnings:\n{warnings}\n");
    }
    let eval_id = resp["EvalID"].as_str().unwrap_or_default().to_string();
    let job_id = job["ID"].as_str().unwrap_or_default().to_string();
    if args.api.structured() && args.detach {
        args.api.print(&resp)?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.detach || eval_id.is_empty() {
        println!("Job registration successful");
        if !eval_id.is_empty() {
            println!("Evaluation ID: {eval_id}");
        }
        if !job["Periodic"].is_null() {
            let now = crate::util::Clock::now_unix_nanos(&crate::util::SystemClock);
            if let Some(next) = super::job_dispatch::next_launch(&job["Periodic"], now) {
                println!("Approximate next launch time: {next}");
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !args.api.structured() {
        println!("==> Monitoring evaluation \"{eval_id}\"");
    }
    let code = monitor(&api, &job_id, &eval_id, args.timeout, &args.api).await?;
    let service = matches!(job["Type"].as_str(), None | Some("" | "service"));
    if code != ExitCode::SUCCESS || !service {
        return Ok(code);
    }
    follow_deployment(&api, &job_id, &eval_id, &args.api).await
}

/// After a service job's evaluation: the deployment of the version registered, followed
/// to its end as `nomad job run` does (exit 1 unless it succeeds). The evaluation names it
/// when the scheduler made it; otherwise it is the job's latest deployment when that rolls
/// out the job's current version. A job without one is done.
async fn follow_deployment(
    api: &ApiClient,
    job_id: &str,
    eval_id: &str,
    out: &ApiArgs,
) -> anyhow::Result<ExitCode> {
    let path = urlencode(job_id);
    let eval: Value = api
        .get(&format!("/v1/evaluation/{eval_id}"))
        .await
        .context("reading the evaluation")?;
    let mut id = text(&eval["DeploymentID"]);
    if id.is_empty() {
        let job: Value = api
            .get(&format!("/v1/job/{path}"))
            .await
            .context("reading the job")?;
        let latest: Value = api
            .get(&format!("/v1/job/{path}/deployment"))
            .await
            .context("reading the job's latest deployment")?;
        let created = latest["JobCreateIndex"].as_u64().unwrap_or(0);
        let current = !latest.is_null()
            && latest["JobVersion"] == job["Version"]
            && (created == 0 || Some(created) == job["CreateIndex"].as_u64());
        if !current {
            return Ok(ExitCode::SUCCESS);
        }
        id = text(&latest["ID"]);
    }
    if !out.structured() {
        println!(
            "\n==> {}: Monitoring deployment \"{}\"",
            super::deployment::now_text(),
            short_id(&Value::from(id.as_str()))
        );
    }
    let status = super::deployment::follow(api, &id, 8, out.structured()).await?;
    Ok(if status == "successful" {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn stop(args: StopArgs) -> anyhow::Result<ExitCode> {
    let api = args.api.client()?;
    let path = format!(
        "/v1/job/{}?purge={}",
        urlencode(&args.id),
        if args.purge { "true" } else { "false" }
    );
    // A missing job is an error for a human, even though the API answers 200.
    match api
        .get::<Value>(&format!("/v1/job/{}", urlencode(&args.id)))
        .await
    {
        Err(ApiError::Status { status, .. }) if status == StatusCode::NOT_FOUND => {
            bail!("No job with ID {:?} found", args.id)
        }
        Err(e) => return Err(e).context("reading the job"),
        Ok(_) => {}
    }
    let resp: Value = api
        .request::<(), Value>(Method::DELETE, &path, None)
        .await
        .context("stopping the job")?;
    let eval_id = resp["EvalID"].as_str().unwrap_or_default().to_string();
    if args.detach || eval_id.is_empty() {
        if args.api.structured() {
            args.api.print(&resp)?;
        } else {
            println!("Evaluation ID: {eval_id}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !args.api.structured() {
        println!("==> Monitoring evaluation \"{eval_id}\"");
    }
    monitor(&api, &args.id, &eval_id, args.timeout, &args.api).await
}

async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let Some(id) = args.id else {
        let jobs: Vec<Value> = api.get("/v1/jobs").await.context("listing the jobs")?;
        if args.api.structured() {
            args.api.print(&jobs)?;
            return Ok(());
        }
        if jobs.is_empty() {
            println!("No running jobs");
            return Ok(());
        }
        let mut rows = vec![vec![
            "ID".to_string(),
            "Type".into(),
            "Priority".into(),
            "Status".into(),
        ]];
        for j in &jobs {
            rows.push(vec![
                text(&j["ID"]),
                text(&j["Type"]),
                text(&j["Priority"]),
                text(&j["Status"]),
            ]);
        }
        print!("{}", table(&rows));
        return Ok(());
    };
    let path = urlencode(&id);
    let job: Value = match api.get(&format!("/v1/job/{path}")).await {
        Err(ApiError::Status { status, .. }) if status == StatusCode::NOT_FOUND => {
            bail!("No job with ID {id:?} found")
        }
        r => r.context("reading the job")?,
    };
    let allocs: Vec<Value> = api
        .get(&format!("/v1/job/{path}/allocations"))
        .await
        .context("reading the job's allocations")?;
    let summary: Value = api
        .get(&format!("/v1/job/{path}/summary"))
        .await
        .context("reading the job summary")?;
    let latest: Value = api
        .get(&format!("/v1/job/{path}/deployment"))
        .await
        .context("reading the job's latest deployment")?;
    let evals: Vec<Value> = api
        .get(&format!("/v1/job/{path}/evaluations"))
        .await
        .context("reading the job's evaluations")?;
    if args.api.structured() {
        // `-t` renders the job itself, as Nomad's `job status -t` does.
        let v = match args.api.template {
            Some(_) => job,
            None => json!({
                "Job": job,
                "Summary": summary,
                "LatestDeployment": latest,
                "Allocations": allocs,
            }),
        };
        args.api.print(&v)?;
        return Ok(());
    }
    let rows = vec![
        vec!["ID".to_string(), "=".into(), text(&job["ID"])],
        vec!["Name".into(), "=".into(), text(&job["Name"])],
        vec!["Type".into(), "=".into(), text(&job["Type"])],
        vec!["Priority".into(), "=".into(), text(&job["Priority"])],
        vec![
            "Datacenters".into(),
            "=".into(),
            list_text(&job["Datacenters"]),
        ],
        vec!["Status".into(), "=".into(), text(&job["Status"])],
        vec!["Stop".into(), "=".into(), text(&job["Stop"])],
        vec!["Version".into(), "=".into(), text(&job["Version"])],
    ];
    print!("{}", table(&rows));
    print!("{}", ui_section(&job["UI"]));
    if !job["Periodic"].is_null() || !job["ParameterizedJob"].is_null() {
        return super::job_dispatch::print_parent_status(&api, &job).await;
    }
    println!("\nSummary");
    let mut rows = vec![vec![
        "Task Group".to_string(),
        "Queued".into(),
        "Starting".into(),
        "Running".into(),
        "Failed".into(),
        "Complete".into(),
        "Lost".into(),
    ]];
    let groups: BTreeMap<String, Value> = summary["Summary"]
        .as_object()
        .map(|m| m.clone().into_iter().collect())
        .unwrap_or_default();
    for (group, s) in groups {
        rows.push(vec![
            group,
            text(&s["Queued"]),
            text(&s["Starting"]),
            text(&s["Running"]),
            text(&s["Failed"]),
            text(&s["Complete"]),
            text(&s["Lost"]),
        ]);
    }
    print!("{}", table(&rows));
    print!("{}", placement_failure(&evals));
    if !latest.is_null() {
        println!("\nLatest Deployment");
        print!("{}", super::deployment::latest_deployment_section(&latest));
    }
    println!("\nAllocations");
    if allocs.is_empty() {
        println!("No allocations placed");
        return Ok(());
    }
    print!("{}", alloc_table(&allocs, false));
    Ok(())
}

/// A job's `ui` block: its description and links (empty without one). Whoever may submit
/// a job writes this text, so control characters (terminal escapes) are not printed; a
/// description keeps its line breaks and tabs.
fn ui_section(ui: &Value) -> String {
    let printable = |s: &str, keep_lines: bool| -> String {
        s.chars()
            .filter(|c| !c.is_control() || (keep_lines && matches!(c, '\n' | '\t')))
            .collect()
    };
    let mut out = String::new();
    if let Some(description) = ui["Description"].as_str().filter(|d| !d.is_empty()) {
        out.push_str(&format!(
            "\nDescription\n{}\n",
            printable(description, true).trim_end()
        ));
    }
    let links = ui["Links"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if !links.is_empty() {
        let mut rows = vec![vec!["Label".to_string(), "URL".into()]];
        rows.extend(links.iter().map(|l| {
            // `Url` as Nomad's servers answer it, `URL` as its API spells it.
            let url = if l["Url"].is_null() {
                &l["URL"]
            } else {
                &l["Url"]
            };
            vec![
                printable(&text(&l["Label"]), false),
                printable(&text(url), false),
            ]
        }));
        out.push_str(&format!("\nLinks\n{}", table(&rows)));
    }
    out
}

/// Nomad's "Placement Failure" section of `job status`: while an evaluation of the job is
/// blocked, why the latest evaluation that failed to place could not (empty otherwise).
fn placement_failure(evals: &[Value]) -> String {
    let blocked = evals.iter().any(|e| e["Status"] == "blocked");
    let latest = evals
        .iter()
        .filter(|e| {
            e["FailedTGAllocs"]
                .as_object()
                .is_some_and(|m| !m.is_empty())
        })
        .max_by_key(|e| e["CreateIndex"].as_u64().unwrap_or(0));
    let (true, Some(eval)) = (blocked, latest) else {
        return String::new();
    };
    let failed: BTreeMap<&String, &Value> = eval["FailedTGAllocs"]
        .as_object()
        .into_iter()
        .flatten()
        .collect();
    // Nomad shows five groups at most and tells where the rest are.
    const MAX_FAILED_GROUPS: usize = 5;
    let groups: Vec<String> = failed
        .iter()
        .take(MAX_FAILED_GROUPS)
        .map(|(group, metric)| format!("Task Group {group:?}:\n{}", alloc_metrics(metric, "  ")))
        .collect();
    let mut out = format!("\nPlacement Failure\n{}", groups.join("\n"));
    if failed.len() > MAX_FAILED_GROUPS {
        out.push_str(&format!(
            "\nPlacement failures truncated. To see remainder run:\nteamster eval status {}\n",
            text(&eval["ID"])
        ));
    }
    out
}

/// A job's allocations as `job status` and `job allocs` print them (with their times for
/// `job allocs`).
fn alloc_table(allocs: &[Value], times: bool) -> String {
    let mut head = vec![
        "ID",
        "Node ID",
        "Task Group",
        "Version",
        "Desired",
        "Status",
    ];
    if times {
        head.extend(["Created", "Modified"]);
    }
    let mut rows = vec![head.into_iter().map(String::from).collect::<Vec<_>>()];
    for a in allocs {
        let mut row = vec![
            short_id(&a["ID"]),
            short_id(&a["NodeID"]),
            text(&a["TaskGroup"]),
            text(&a["JobVersion"]),
            text(&a["DesiredStatus"]),
            text(&a["ClientStatus"]),
        ];
        if times {
            row.extend([unix_nanos(&a["CreateTime"]), unix_nanos(&a["ModifyTime"])]);
        }
        rows.push(row);
    }
    table(&rows)
}

async fn inspect(args: InspectArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let job: Value = match api.get(&format!("/v1/job/{}", urlencode(&args.id))).await {
        Err(ApiError::Status { status, .. }) if status == StatusCode::NOT_FOUND => {
            bail!("No job with ID {:?} found", args.id)
        }
        r => r.context("reading the job")?,
    };
    // As Nomad: `-t` renders the job itself, the plain output wraps it as `{"Job": …}`.
    if args.api.template.is_some() {
        args.api.print(&job)?;
    } else {
        println!("{}", serde_json::to_string_pretty(&json!({ "Job": job }))?);
    }
    Ok(())
}

async fn allocs(args: InspectArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let path = format!("/v1/job/{}/allocations", urlencode(&args.id));
    let list: Vec<Value> = match api.get(&path).await {
        Err(ApiError::Status { status, .. }) if status == StatusCode::NOT_FOUND => {
            bail!("No job with ID {:?} found", args.id)
        }
        r => r.context("listing the job's allocations")?,
    };
    if args.api.structured() {
        args.api.print(&list)?;
        return Ok(());
    }
    if list.is_empty() {
        println!("No allocations placed");
        return Ok(());
    }
    print!("{}", alloc_table(&list, true));
    Ok(())
}

async fn history(args: HistoryArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let path = format!(
        "/v1/job/{}/versions{}",
        urlencode(&args.id),
        if args.diffs { "?diffs=true" } else { "" }
    );
    let resp: Value = match api.get(&path).await {
        Err(ApiError::Status { status, .. }) if status == StatusCode::NOT_FOUND => {
            bail!("No job with ID {:?} found", args.id)
        }
        r => r.context("reading the job's versions")?,
    };
    if args.api.structured() {
        args.api.print(&resp)?;
        return Ok(());
    }
    let mut rows = vec![vec![
        "Version".to_string(),
        "Stable".to_string(),
        "Stop".to_string(),
        "Submit Time".to_string(),
    ]];
    for v in resp["Versions"].as_array().into_iter().flatten() {
        rows.push(vec![
            text(&v["Version"]),
            text(&v["Stable"]),
            text(&v["Stop"]),
            unix_nanos(&v["SubmitTime"]),
        ]);
    }
    if !args.diffs {
        print!("{}", table(&rows));
        return Ok(());
    }
    let versions = resp["Versions"].as_array().cloned().unwrap_or_default();
    let diffs = resp["Diffs"].as_array().cloned().unwrap_or_default();
    for (i, v) in versions.iter().enumerate() {
        println!("Version     = {}", text(&v["Version"]));
        println!("Stable      = {}", text(&v["Stable"]));
        println!("Submit Date = {}", unix_nanos(&v["SubmitTime"]));
        if let Some(diff) = diffs.get(i) {
            println!("Diff        =");
            print!("{}", super::job_plan::render_diff(diff, false));
        }
        println!();
    }
    Ok(())
}

async fn scale(args: ScaleArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let (group, count) = match args.group_and_count.as_slice() {
        [group, count] => (Some(group.clone()), count),
        [count] => (None, count),
        _ => bail!("expected [GROUP] COUNT"),
    };
    let count: i64 = count
        .parse()
        .with_context(|| format!("COUNT {count:?} is not a whole number"))?;
    let group = match group {
        Some(g) => g,
        None => {
            let job: Value = api
                .get(&format!("/v1/job/{}", urlencode(&args.id)))
                .await
                .context("reading the job")?;
            let groups: Vec<&str> = job["TaskGroups"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|g| g["Name"].as_str())
                .collect();
            match groups.as_slice() {
                [only] => (*only).to_string(),
                _ => bail!(
                    "job {:?} has {} task groups: name the one to scale ({})",
                    args.id,
                    groups.len(),
                    groups.join(", ")
                ),
            }
        }
    };
    let body = json!({
        "Count": count,
        "Target": { "Job": args.id, "Group": group },
        "Message": args.message,
    });
    let resp: Value = api
        .request(
            Method::POST,
            &format!("/v1/job/{}/scale", urlencode(&args.id)),
            Some(&body),
        )
        .await
        .with_context(|| format!("scaling {}/{group} to {count}", args.id))?;
    if args.api.structured() {
        args.api.print(&resp)?;
    } else {
        println!("Evaluation ID: {}", text(&resp["EvalID"]));
    }
    Ok(())
}

async fn revert(args: RevertArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let body = json!({
        "JobID": args.id,
        "JobVersion": args.job_version,
        "EnforcePriorVersion": args.enforce_prior_version,
    });
    let path = format!("/v1/job/{}/revert", urlencode(&args.id));
    let resp: Value = api
        .request(Method::POST, &path, Some(&body))
        .await
        .with_context(|| format!("reverting {} to version {}", args.id, args.job_version))?;
    if args.api.structured() {
        args.api.print(&resp)?;
    } else {
        println!("Evaluation ID: {}", text(&resp["EvalID"]));
    }
    Ok(())
}

async fn validate(args: ValidateArgs) -> anyhow::Result<ExitCode> {
    let api = args.api.client()?;
    let job = read_job_file(&args.job)?;
    let resp: Value = api
        .request(
            Method::POST,
            "/v1/validate/job",
            Some(&json!({ "Job": job })),
        )
        .await
        .context("validating the job")?;
    if args.api.structured() {
        args.api.print(&resp)?;
    }
    let errors: Vec<String> = resp["ValidationErrors"]
        .as_array()
        .map(|a| a.iter().map(text).collect())
        .unwrap_or_default();
    if errors.is_empty() {
        if !args.api.structured() {
            println!("Job validation successful");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if !args.api.structured() {
        eprintln!("Job validation errors:");
        for e in &errors {
            eprintln!("  * {e}");
        }
    }
    Ok(ExitCode::FAILURE)
}

fn list_text(v: &Value) -> String {
    v.as_array()
        .map(|a| a.iter().map(text).collect::<Vec<_>>().join(","))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_failure_shows_the_latest_failed_evaluation_while_one_is_blocked() {
        let metric = json!({"NodesEvaluated": 2, "ConstraintFiltered": {"missing drivers": 2}});
        let evals = vec![
            json!({"ID": "old", "CreateIndex": 5, "Status": "complete",
                   "FailedTGAllocs": {"web": {"NodesEvaluated": 0}}}),
            json!({"ID": "new", "CreateIndex": 9, "Status": "complete",
                   "FailedTGAllocs": {"web": metric}}),
            json!({"ID": "b", "CreateIndex": 10, "Status": "blocked"}),
        ];
        assert_eq!(
            placement_failure(&evals),
            "\nPlacement Failure\nTask Group \"web\":\n  * Constraint \"missing drivers\": 2 nodes excluded by filter\n"
        );
        // Nothing blocked: nothing to show.
        assert_eq!(placement_failure(&evals[..2]), "");
        // Five groups at most, and where the rest are.
        let many: serde_json::Map<String, Value> =
            (0..7).map(|i| (format!("g{i}"), metric.clone())).collect();
        let evals = vec![
            json!({"ID": "e1", "CreateIndex": 1, "Status": "blocked", "FailedTGAllocs": many}),
        ];
        let out = placement_failure(&evals);
        assert_eq!(out.matches("Task Group").count(), 5, "{out}");
        assert!(
            out.ends_with(
                "Placement failures truncated. To see remainder run:\nteamster eval status e1\n"
            ),
            "{out}"
        );
    }

    #[test]
    fn a_ui_block_is_printed_without_control_characters() {
        let ui = json!({
            "Description": "line one\n\u{1b}[2Jline two\twith tab",
            "Links": [{"Label": "run\u{1b}[31mbook", "Url": "https://x.example/\u{7}"},
                      {"Label": "api", "URL": "https://api.example"}]
        });
        assert_eq!(
            ui_section(&ui),
            "\nDescription\nline one\n[2Jline two\twith tab\n\nLinks\nLabel        URL\nrun[31mbook  https://x.example/\napi          https://api.example\n"
        );
        assert_eq!(ui_section(&Value::Null), "");
    }

    #[test]
    fn a_job_file_may_be_wrapped_or_bare() {
        let dir = tempfile::tempdir().unwrap();
        let wrapped = dir.path().join("w.json");
        std::fs::write(&wrapped, r#"{"Job": {"ID": "a"}}"#).unwrap();
        let bare = dir.path().join("b.json");
        std::fs::write(&bare, r#"{"ID": "b"}"#).unwrap();
        assert_eq!(read_job_file(&file(&wrapped)).unwrap()["ID"], "a");
        assert_eq!(read_job_file(&file(&bare)).unwrap()["ID"], "b");
        let bad = dir.path().join("c.json");
        std::fs::write(&bad, "[1]").unwrap();
        let err = read_job_file(&file(&bad)).unwrap_err().to_string();
        assert!(err.contains("must be a JSON object"), "{err}");
        let broken = dir.path().join("d.json");
        std::fs::write(&broken, "{").unwrap();
        let err = format!("{:#}", read_job_file(&file(&broken)).unwrap_err());
        assert!(err.contains("not valid JSON"), "{err}");
        // A 5 MB file is refused before it is read, with its size and the limit.
        let huge = dir.path().join("huge.nomad.hcl");
        std::fs::write(&huge, vec![b'#'; 5_000_000]).unwrap();
        let err = read_job_file(&file(&huge)).unwrap_err().to_string();
        assert!(
            err.contains("huge.nomad.hcl: the job file is 5000000 bytes; the limit is 4194304"),
            "{err}"
        );
    }

    fn file(path: &std::path::Path) -> JobFileArgs {
        JobFileArgs {
            file: path.to_path_buf(),
            vars: Vec::new(),
            var_files: Vec::new(),
        }
    }

    #[test]
    fn an_hcl_job_file_takes_its_variables_from_flags_and_var_files() {
        let dir = tempfile::tempdir().unwrap();
        let hcl = dir.path().join("web.nomad.hcl");
        std::fs::write(
            &hcl,
            "variable \"dc\" {}\nvariable \"n\" { type = number }\njob \"web\" {\n  datacenters = [var.dc]\n  group \"g\" {\n    count = var.n\n  }\n}\n",
        )
        .unwrap();
        let vars = dir.path().join("prod.vars");
        std::fs::write(&vars, "dc = \"dc2\"\nn = 5\n").unwrap();
        let mut args = file(&hcl);
        args.var_files.push(vars);
        args.vars.push("n=3".into());
        let job = read_job_file(&args).unwrap();
        assert_eq!(job["ID"], "web");
        assert_eq!(job["Datacenters"], json!(["dc2"]));
        assert_eq!(job["TaskGroups"][0]["Count"], json!(3));
        args.vars = vec!["n".into()];
        let err = read_job_file(&args).unwrap_err().to_string();
        assert!(err.contains("expected NAME=VALUE"), "{err}");
        // A typo names the file, the place and the block path.
        std::fs::write(
            &hcl,
            "job \"web\" {\n  group \"g\" {\n    cont = 1\n  }\n}\n",
        )
        .unwrap();
        let err = read_job_file(&file(&hcl)).unwrap_err().to_string();
        assert!(
            err.ends_with(
                "web.nomad.hcl:3:5: job \"web\" → group \"g\": unknown argument \"cont\""
            ),
            "{err}"
        );
    }

    #[test]
    fn ids_are_shortened_and_encoded() {
        assert_eq!(short_id(&json!("0123456789abcdef")), "01234567");
        assert_eq!(short_id(&json!("abc")), "abc");
        assert_eq!(urlencode("web app/1"), "web%20app%2F1");
    }
}
