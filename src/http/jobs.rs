//! Jobs: register, list, read, stop or purge, summary, versions (with diffs), revert,
//! stability, force-evaluate, validate, parse.
//! Writes decode the request and call the service layer (`Job.*`); reads answer from the
//! state store.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use teamster_storage::model::{Job, JobId, JobStatus, JobSummary, JobType, ModelError, Namespace};
use teamster_storage::state::Table;

use super::error::ApiError;
use super::query::QueryOptions;
use super::read::{json_bytes_read, json_read, json_write};
use super::HttpContext;
use crate::jobspec;
use crate::rpc::{service, Services};

/// Nomad's `JobRegisterRequest` (only `Job` is required).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct JobRegisterRequest {
    /// Kept as JSON until the fields teamster does not implement are checked.
    #[serde(default)]
    job: Option<Value>,
    #[serde(default)]
    enforce_index: Option<bool>,
    #[serde(default)]
    job_modify_index: Option<u64>,
    #[serde(default)]
    policy_override: Option<bool>,
}

/// Nomad's `JobRegisterResponse`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct JobRegisterResponse {
    #[serde(rename = "EvalID")]
    eval_id: String,
    eval_create_index: u64,
    job_modify_index: u64,
    warnings: String,
    index: u64,
    last_contact: u64,
    known_leader: bool,
    next_token: String,
}

/// Nomad's `JobRegisterResponse` for a registration (or a revert) the service made.
fn register_answer(done: &service::job::JobRegisterResponse, warnings: String) -> Response {
    json_write(
        JobRegisterResponse {
            eval_id: done.eval_id.to_string(),
            // No evaluation for a periodic or parameterized parent: 0, as Nomad answers.
            eval_create_index: if done.eval_id.is_empty() {
                0
            } else {
                done.index
            },
            job_modify_index: done.job_modify_index,
            warnings,
            index: done.index,
            last_contact: 0,
            known_leader: true,
            next_token: String::new(),
        },
        done.index,
    )
}

/// Nomad's API: a group that gives no `Count` but a `Scaling` block with `Min` starts with
/// `Min` allocations (else 1, the model's default).
fn count_from_scaling_min(job: &mut Value) {
    let groups = job.get_mut("TaskGroups").and_then(Value::as_array_mut);
    for group in groups.into_iter().flatten() {
        let Some(g) = group.as_object_mut() else {
            continue;
        };
        if g.get("Count").is_some_and(|c| !c.is_null()) {
            continue;
        }
        if let Some(min) = g
            .get("Scaling")
            .and_then(|s| s.get("Min"))
            .filter(|m| m.is_u64())
            .cloned()
        {
            g.insert("Count".into(), min);
        }
    }
}

/// A `ui` link's URL once: the model spells it `Url` (as Nomad's servers answer) and reads
/// the API's `URL` too; a link that has both (a canonical `/v1/jobs/parse` answer overlays
/// the parsed `URL` on the model's `Url`) keeps `Url`.
fn one_link_url(job: &mut Value) {
    if let Some(links) = job.pointer_mut("/UI/Links").and_then(Value::as_array_mut) {
        for link in links.iter_mut().filter_map(Value::as_object_mut) {
            if link.contains_key("Url") {
                link.remove("URL");
            }
        }
    }
}

/// A job from its API JSON; a value of the wrong type is named by its path
/// (`TaskGroups[0].Count: invalid type: …`).
pub(super) fn decode_job(mut job: Value) -> Result<Job, ApiError> {
    count_from_scaling_min(&mut job);
    one_link_url(&mut job);
    serde_path_to_error::deserialize(job).map_err(|e| {
        let path = e.path().to_string();
        ApiError::bad_request(format!(
            "Failed to parse job: {}{}",
            if path == "." {
                String::new()
            } else {
                format!("{path}: ")
            },
            e.inner()
        ))
    })
}

/// The `Job` of a register or plan body: present, setting no field teamster refuses, well
/// typed, with an ID. A job that names no namespace is in the request's (`?namespace=`), as
/// Nomad's API places it; without either it is in `default`.
pub(super) fn body_job(
    job: Option<Value>,
    query: &HashMap<String, String>,
    acl: Option<(
        &crate::server::acl::Identity,
        &'static [crate::acl::Capability],
    )>,
) -> Result<Job, ApiError> {
    let mut job = job
        .filter(|v| !v.is_null())
        .ok_or_else(|| ApiError::bad_request("Job must be specified"))?;
    if let (Some(obj), Some(ns)) = (job.as_object_mut(), query.get("namespace")) {
        let unnamed = obj
            .get("Namespace")
            .is_none_or(|v| v.is_null() || v.as_str() == Some(""));
        if unnamed && !ns.is_empty() && ns != "*" {
            obj.insert("Namespace".into(), Value::String(ns.clone()));
        }
    }
    refuse_unsupported(&job)?;
    let mut job = decode_job(job)?;
    if job.id.is_empty() {
        return Err(ApiError::bad_request("Job ID hasn't been provided"));
    }
    if job.namespace.is_empty() {
        // Named neither in the job nor in the query: `default`, before the check below.
        job.namespace = Namespace::default_namespace();
    }
    // The route's check saw the request's namespace; the job's own may be another.
    if let Some((identity, caps)) = acl {
        let need = crate::acl::Need::Namespace(job.namespace.to_string(), caps);
        if !identity.acl.allows(&need) {
            return Err(ApiError::forbidden("Permission denied"));
        }
    }
    Ok(job)
}

/// 400 for a `PolicyOverride: true`: it overrides Sentinel policies, which teamster does not
/// have, so accepting it would pretend to act on it.
pub(super) fn refuse_policy_override(policy_override: Option<bool>) -> Result<(), ApiError> {
    if policy_override == Some(true) {
        return Err(ApiError::bad_request(
            "PolicyOverride is not supported: teamster has no Sentinel policies to override",
        ));
    }
    Ok(())
}

/// Decode a JSON body, naming the problem in a 400.
pub fn decode_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(ApiError::bad_request("Request body is empty"));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("Failed to parse request body: {e}")))
}

/// 400 naming every field of Nomad's job schema that `job` sets and teamster does not act
/// on: refused, never dropped silently.
fn refuse_unsupported(job: &Value) -> Result<(), ApiError> {
    let found = jobspec::unsupported_fields(job);
    if found.is_empty() {
        return Ok(());
    }
    let errors = found.iter().map(ToString::to_string).collect();
    Err(ApiError::bad_request(
        ModelError::Invalid { errors }.to_string(),
    ))
}

/// Nomad's warnings for `memory_max` while the scheduler configuration has memory
/// oversubscription off (as this server's state has it).
pub(super) fn memory_max_warnings(ctx: &HttpContext, job: &Job) -> Vec<String> {
    let enabled = ctx.node().is_ok_and(|n| {
        n.state()
            .snapshot()
            .scheduler_config()
            .memory_oversubscription_enabled
    });
    job.memory_max_warnings(enabled)
}

/// `PUT|POST /v1/jobs` and `/v1/job/:id`: register a job and create its evaluation
/// (`Job.Register`).
pub async fn register(
    State(ctx): State<HttpContext>,
    axum::Extension(identity): axum::Extension<crate::server::acl::Identity>,
    path_id: Option<Path<String>>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let endpoints = ctx.endpoints()?;
    let req: JobRegisterRequest = decode_body(&body)?;
    refuse_policy_override(req.policy_override)?;
    let mut warnings = req
        .job
        .as_ref()
        .map(jobspec::job_warnings)
        .unwrap_or_default();
    let job = body_job(
        req.job,
        &q,
        Some((
            &identity,
            &[
                crate::acl::Capability::SubmitJob,
                crate::acl::Capability::RegisterJob,
            ],
        )),
    )?;
    if let Some(Path(id)) = path_id {
        if id != job.id.as_str() {
            return Err(ApiError::bad_request("Job ID does not match name"));
        }
    }
    warnings.extend(job.task_warnings());
    warnings.extend(memory_max_warnings(&ctx, &job));
    let warnings = warnings.join("\n");
    let enforce_index = if req.enforce_index.unwrap_or(false) {
        Some(req.job_modify_index.unwrap_or(0))
    } else {
        None
    };
    let done = endpoints
        .job_register(Box::new(service::job::JobRegisterRequest {
            job,
            enforce_index,
        }))
        .await?;
    Ok(register_answer(&done, warnings))
}

/// `GET /v1/jobs`: job stubs, `?prefix=` filtered, of the namespace (`*`: of every one).
pub async fn list(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Jobs, Table::JobSummaries]).await?;
    let jobs: Box<dyn Iterator<Item = &std::sync::Arc<Job>>> = if opts.namespace == "*" {
        Box::new(
            snap.jobs()
                .filter(|j| j.id.as_str().starts_with(opts.prefix.as_str())),
        )
    } else {
        Box::new(snap.jobs_by_prefix(&opts.namespace, &opts.prefix))
    };
    let json = ctx
        .job_stubs()
        .list(
            jobs.map(|job| {
                let summary = snap.job_summary(job.namespace.as_str(), job.id.as_str());
                (job, summary)
            }),
            snap.job_count(),
            job_stub,
        )
        .map_err(|e| ApiError::internal(format!("serializing the job list: {e}")))?;
    Ok(json_bytes_read(json, meta))
}

/// `GET /v1/job/:id`.
pub async fn get(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Jobs]).await?;
    let job = snap
        .job_by_id(&opts.namespace, &id)
        .ok_or_else(|| ApiError::not_found("job not found"))?;
    Ok(json_read(job.as_ref(), meta))
}

/// Nomad's `JobListStub`, serialized straight from the job (a list of ten thousand jobs
/// builds no JSON tree).
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct JobListStub<'a> {
    #[serde(rename = "ID")]
    id: &'a JobId,
    #[serde(rename = "ParentID")]
    parent_id: &'a JobId,
    name: &'a str,
    namespace: &'a Namespace,
    datacenters: &'a [String],
    node_pool: &'a str,
    multiregion: Option<()>,
    #[serde(rename = "Type")]
    job_type: JobType,
    priority: u32,
    periodic: bool,
    parameterized_job: bool,
    stop: bool,
    status: JobStatus,
    status_description: &'a str,
    job_summary: Option<&'a JobSummary>,
    create_index: u64,
    modify_index: u64,
    job_modify_index: u64,
    submit_time: i64,
}

fn job_stub<'a>(job: &'a Job, summary: Option<&'a std::sync::Arc<JobSummary>>) -> JobListStub<'a> {
    JobListStub {
        id: &job.id,
        parent_id: &job.parent_id,
        name: &job.name,
        namespace: &job.namespace,
        datacenters: &job.datacenters,
        node_pool: &job.node_pool,
        multiregion: None,
        job_type: job.job_type,
        priority: job.priority,
        periodic: job.periodic.is_some(),
        parameterized_job: job.parameterized_job.is_some(),
        stop: job.stop,
        status: job.status,
        status_description: &job.status_description,
        job_summary: summary.map(|s| s.as_ref()),
        create_index: job.create_index,
        modify_index: job.modify_index,
        job_modify_index: job.job_modify_index,
        submit_time: job.submit_time,
    }
}

/// Nomad's `JobDeregisterResponse`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct JobDeregisterResponse {
    #[serde(rename = "EvalID")]
    eval_id: String,
    eval_create_index: u64,
    job_modify_index: u64,
    #[serde(rename = "VolumeEvalID")]
    volume_eval_id: String,
    volume_eval_index: u64,
    index: u64,
    last_contact: u64,
    known_leader: bool,
    next_token: String,
}

/// `DELETE /v1/job/:id[?purge=true]`: stop the job (it stays, `Stop: true`) or purge it, with
/// an evaluation that stops its allocations (`Job.Deregister`). An unknown job answers 200
/// with an empty `EvalID`, as Nomad does.
pub async fn deregister(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let endpoints = ctx.endpoints()?;
    let opts = QueryOptions::parse(&q)?;
    let purge = QueryOptions::flag(&q, "purge")?;
    let done = endpoints
        .job_deregister(service::job::JobDeregisterRequest {
            namespace: opts.namespace.as_str().into(),
            job_id: id.as_str().into(),
            purge,
        })
        .await?;
    let eval_create_index = if done.eval_id.is_some() {
        done.index
    } else {
        0
    };
    Ok(json_write(
        JobDeregisterResponse {
            eval_id: done.eval_id.map(|e| e.to_string()).unwrap_or_default(),
            eval_create_index,
            job_modify_index: done.job_modify_index,
            volume_eval_id: String::new(),
            volume_eval_index: 0,
            index: done.index,
            last_contact: 0,
            known_leader: true,
            next_token: String::new(),
        },
        done.index,
    ))
}

/// `GET /v1/job/:id/summary`.
pub async fn summary(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::JobSummaries, Table::Jobs]).await?;
    let summary = snap
        .job_summary(&opts.namespace, &id)
        .ok_or_else(|| ApiError::not_found("job not found"))?;
    let mut summary = summary.as_ref().clone();
    // A periodic or parameterized parent's children, by status (Nomad's `Children`).
    for child in snap.job_children(&opts.namespace, &id) {
        let bin = match child.status {
            JobStatus::Pending => &mut summary.children.pending,
            JobStatus::Running => &mut summary.children.running,
            JobStatus::Dead => &mut summary.children.dead,
        };
        *bin += 1;
    }
    Ok(json_read(summary, meta))
}

/// `GET /v1/job/:id/actions`: every task's actions (Nomad's `JobAction`s), in the job's
/// order.
pub async fn actions(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Jobs]).await?;
    let job = snap
        .job_by_id(&opts.namespace, &id)
        .ok_or_else(|| ApiError::not_found("job not found"))?;
    let mut out = Vec::new();
    for group in job.task_groups.iter() {
        for task in &group.tasks {
            for action in &task.actions {
                out.push(serde_json::json!({
                    "Name": action.name,
                    "Command": action.command,
                    "Args": action.args,
                    "TaskName": task.name,
                    "TaskGroupName": group.name,
                }));
            }
        }
    }
    Ok(json_read(out, meta))
}

/// `GET /v1/job/:id/versions`: every kept version, newest first.
pub async fn versions(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Jobs]).await?;
    let mut versions = snap.job_versions(&opts.namespace, &id);
    if versions.is_empty() {
        return Err(ApiError::not_found("job not found"));
    }
    versions.sort_by_key(|j| std::cmp::Reverse(j.version));
    for unsupported in ["diff_version", "diff_tag"] {
        if q.contains_key(unsupported) {
            return Err(ApiError::bad_request(format!(
                "{unsupported} is not supported: diffs are against the previous version"
            )));
        }
    }
    let diffs = match q.get("diffs").map(String::as_str) {
        None | Some("") | Some("false") => None,
        Some("true") => Some(
            // Each version against the one before it, newest first (Nomad's `Diffs`).
            versions
                .windows(2)
                .map(|pair| Job::diff_to(Some(&pair[1]), &pair[0]))
                .collect::<Vec<_>>(),
        ),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Failed to parse value of \"diffs\" ({other}) as a bool"
            )))
        }
    };
    let versions: Vec<&Job> = versions.iter().map(|j| j.as_ref()).collect();
    Ok(json_read(
        serde_json::json!({ "Versions": versions, "Diffs": diffs }),
        meta,
    ))
}

/// The version a `/v1/job/:id/{revert,stable}` body names: its `JobID`, when given, must be
/// the path's, and `JobVersion` is required.
fn body_version(
    path_id: &str,
    job_id: Option<&str>,
    version: Option<u64>,
) -> Result<u64, ApiError> {
    if job_id.is_some_and(|j| !j.is_empty() && j != path_id) {
        return Err(ApiError::bad_request("Job ID does not match"));
    }
    version.ok_or_else(|| ApiError::bad_request("JobVersion must be specified"))
}

/// Nomad's `JobStabilityRequest`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct JobStableBody {
    #[serde(rename = "JobID", default)]
    job_id: Option<String>,
    #[serde(default)]
    job_version: Option<u64>,
    #[serde(default)]
    stable: Option<bool>,
}

/// `PUT|POST /v1/job/:id/stable`: mark a kept version stable or not (`Job.Stable`).
pub async fn stable(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let endpoints = ctx.endpoints()?;
    let opts = QueryOptions::parse(&q)?;
    let req: JobStableBody = decode_body(&body)?;
    let version = body_version(&id, req.job_id.as_deref(), req.job_version)?;
    let index = endpoints
        .job_stable(service::job::JobStabilityRequest {
            namespace: opts.namespace.as_str().into(),
            job_id: id.as_str().into(),
            version,
            stable: req.stable.unwrap_or(false),
        })
        .await?;
    Ok(json_write(serde_json::json!({ "Index": index }), index))
}

/// Nomad's `JobRegisterResponse` shape for a forced evaluation.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct JobEvaluateResponse {
    #[serde(rename = "EvalID")]
    eval_id: String,
    eval_create_index: u64,
    job_modify_index: u64,
    warnings: String,
    index: u64,
}

/// `POST /v1/job/:id/evaluate`: create a new evaluation of the job (no body needed;
/// `Job.Evaluate`).
pub async fn evaluate(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let endpoints = ctx.endpoints()?;
    let opts = QueryOptions::parse(&q)?;
    let done = endpoints
        .job_evaluate(service::job::JobEvaluateRequest {
            namespace: opts.namespace.as_str().into(),
            job_id: id.as_str().into(),
        })
        .await?;
    Ok(json_write(
        JobEvaluateResponse {
            eval_id: done.eval_id.to_string(),
            eval_create_index: done.index,
            job_modify_index: done.job_modify_index,
            warnings: String::new(),
            index: done.index,
        },
        done.index,
    ))
}

/// Nomad's `JobRevertRequest` (the body of `/v1/job/:id/revert`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct JobRevertBody {
    #[serde(rename = "JobID", default)]
    job_id: Option<String>,
    #[serde(default)]
    job_version: Option<u64>,
    #[serde(default)]
    enforce_prior_version: Option<u64>,
}

/// `PUT|POST /v1/job/:id/revert`: register version `JobVersion` again, as the newest
/// (`Job.Revert`); `EnforcePriorVersion` makes it conditional on the current version.
pub async fn revert(
    State(ctx): State<HttpContext>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let endpoints = ctx.endpoints()?;
    let opts = QueryOptions::parse(&q)?;
    let req: JobRevertBody = decode_body(&body)?;
    let job_version = body_version(&id, req.job_id.as_deref(), req.job_version)?;
    let done = endpoints
        .job_revert(service::job::JobRevertRequest {
            namespace: opts.namespace.as_str().into(),
            job_id: id.as_str().into(),
            job_version,
            enforce_prior_version: req.enforce_prior_version,
        })
        .await?;
    Ok(register_answer(&done, String::new()))
}

/// Nomad's `JobsParseRequest`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct JobsParseRequest {
    #[serde(rename = "JobHCL", default)]
    job_hcl: Option<String>,
    /// The text of a var file.
    #[serde(default)]
    variables: Option<String>,
    #[serde(default)]
    canonicalize: bool,
}

/// `PUT|POST /v1/jobs/parse`: an HCL job file as Nomad's JSON job (bare, not wrapped),
/// with Nomad's defaults filled in when `Canonicalize` is set. As in Nomad, only the
/// `Variables` text gives variables their values here (no environment, no flags), and a
/// variable it names that the file does not declare is ignored.
pub async fn parse(body: Bytes) -> Result<Response, ApiError> {
    let req: JobsParseRequest = decode_body(&body)?;
    let text = req.job_hcl.unwrap_or_default();
    if text.trim().is_empty() {
        return Err(ApiError::bad_request("Job spec is empty"));
    }
    let inputs = jobspec::hcl::VarInputs {
        files: req
            .variables
            .filter(|v| !v.trim().is_empty())
            .map(|v| vec![("Variables".to_string(), v)])
            .unwrap_or_default(),
        strict: false,
        // The servers' files are not the user's: file() and friends fail here, as in Nomad.
        allow_fs: false,
        ..Default::default()
    };
    let mut job = parse_off_the_runtime(text, inputs)
        .await?
        .map_err(|e| ApiError::bad_request(format!("Failed to parse job: {e}")))?;
    if req.canonicalize {
        let mut model = decode_job(job.clone())?;
        model.canonicalize();
        let mut canonical = serde_json::to_value(&model)
            .map_err(|e| ApiError::internal(format!("encoding the job: {e}")))?;
        // Fields the model does not hold (the ones teamster refuses) stay as parsed.
        jobspec::overlay_missing(&mut canonical, &job);
        one_link_url(&mut canonical);
        job = canonical;
    }
    Ok(axum::Json(job).into_response())
}

/// How many job files this agent evaluates at once; more wait their turn.
const CONCURRENT_PARSES: usize = 2;

/// Runs [`jobspec::hcl::parse_job`] on a blocking thread, at most [`CONCURRENT_PARSES`] at
/// once: an evaluation may take its budget's wall time, which must not hold an async
/// worker (or every core) while other requests wait.
async fn parse_off_the_runtime(
    text: String,
    inputs: jobspec::hcl::VarInputs,
) -> Result<Result<Value, jobspec::hcl::JobspecError>, ApiError> {
    static PARSES: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    let _permit = PARSES
        .get_or_init(|| tokio::sync::Semaphore::new(CONCURRENT_PARSES))
        .acquire()
        .await
        .map_err(|_| ApiError::internal("the parser is closed"))?;
    tokio::task::spawn_blocking(move || jobspec::hcl::parse_job("input.hcl", &text, &inputs))
        .await
        .map_err(|e| ApiError::internal(format!("the parser failed: {e}")))
}

/// Nomad's `JobValidateResponse`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "PascalCase")]
struct JobValidateResponse {
    driver_config_validated: bool,
    validation_errors: Vec<String>,
    error: String,
    warnings: String,
}

/// `POST /v1/validate/job`: every problem of the job, none written. Accepts `{"Job": …}` or a
/// bare job object.
pub async fn validate(State(ctx): State<HttpContext>, body: Bytes) -> Result<Response, ApiError> {
    let value: Value = decode_body(&body)?;
    // Nomad's answer to a request without a job (`{}`, `{"Job": null}`); a bare job
    // object (teamster also takes one) names its ID, Name or TaskGroups.
    let job_value = match value.get("Job") {
        Some(Value::Null) => return Err(ApiError::bad_request("Job must be specified")),
        Some(job) => job.clone(),
        None => {
            let bare_job = value.as_object().is_some_and(|o| {
                ["ID", "Name", "TaskGroups"]
                    .iter()
                    .any(|k| o.contains_key(*k))
            });
            if !bare_job {
                return Err(ApiError::bad_request("Job must be specified"));
            }
            value
        }
    };
    let unsupported: Vec<String> = jobspec::unsupported_fields(&job_value)
        .iter()
        .map(ToString::to_string)
        .collect();
    let mut warnings = jobspec::job_warnings(&job_value);
    let mut job = decode_job(job_value)?;
    job.canonicalize();
    warnings.extend(job.task_warnings());
    warnings.extend(memory_max_warnings(&ctx, &job));
    let (errors, error) = match job.validate() {
        Ok(()) => (Vec::new(), String::new()),
        Err(ModelError::Invalid { errors }) => (errors, String::new()),
        Err(e) => (vec![e.to_string()], e.to_string()),
    };
    let templates = jobspec::templates::template_problems(&job);
    let errors: Vec<String> = errors
        .into_iter()
        .chain(templates)
        .chain(unsupported)
        .collect();
    let error = if error.is_empty() && !errors.is_empty() {
        ModelError::Invalid {
            errors: errors.clone(),
        }
        .to_string()
    } else {
        error
    };
    Ok(axum::Json(JobValidateResponse {
        driver_config_validated: errors.is_empty(),
        validation_errors: errors,
        error,
        warnings: warnings.join("\n"),
    })
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_without_a_count_starts_at_its_scaling_minimum() {
        let mut job = serde_json::json!({"TaskGroups": [
            {"Name": "a", "Scaling": {"Min": 3, "Max": 9}},
            {"Name": "b", "Count": 2, "Scaling": {"Min": 1}},
            {"Name": "c", "Count": null, "Scaling": {"Max": 4}},
            {"Name": "d"}
        ]});
        count_from_scaling_min(&mut job);
        assert_eq!(job["TaskGroups"][0]["Count"], 3);
        assert_eq!(job["TaskGroups"][1]["Count"], 2);
        assert!(job["TaskGroups"][2]["Count"].is_null());
        assert!(job["TaskGroups"][3].get("Count").is_none());
    }
}
