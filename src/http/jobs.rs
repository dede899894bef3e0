//! Jobs: register, list, read.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::response::Response;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use teamster_storage::fsm::{Command, CommandResponse, JobRegister};
use teamster_storage::model::{EvalStatus, EvalTrigger, Evaluation, Job, JobSummary};
use teamster_storage::state::Table;

use super::error::ApiError;
use super::query::QueryOptions;
use super::read::{json_read, json_write};
use super::HttpContext;
use crate::server::write_batcher::WriteError;

/// Nomad's `JobRegisterRequest` (only `Job` is required).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct JobRegisterRequest {
    #[serde(default)]
    job: Option<Job>,
    #[serde(default)]
    enforce_index: Option<bool>,
    #[serde(default)]
    job_modify_index: Option<u64>,
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

/// Decode a JSON body, naming the problem in a 400.
pub fn decode_body<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Err(ApiError::bad_request("Request body is empty"));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("Failed to parse request body: {e}")))
}

/// `PUT|POST /v1/jobs` and `/v1/job/:id`: register a job and create its evaluation.
pub async fn register(
    State(ctx): State<HttpContext>,
    path_id: Option<Path<String>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let node = ctx.node()?.clone();
    let req: JobRegisterRequest = decode_body(&body)?;
    let mut job = req
        .job
        .ok_or_else(|| ApiError::bad_request("Job must be specified"))?;
    if job.id.is_empty() {
        return Err(ApiError::bad_request("Job ID hasn't been provided"));
    }
    if let Some(Path(id)) = path_id {
        if id != job.id.as_str() {
            return Err(ApiError::bad_request("Job ID does not match name"));
        }
    }
    job.canonicalize();
    job.validate()
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let now = ctx.clock().now_unix_nanos();
    job.submit_time = now;
    let mut rng = rand::rngs::StdRng::from_entropy();
    let eval = Evaluation {
        id: crate::util::new_uuid(&mut rng).into(),
        namespace: job.namespace.clone(),
        priority: job.priority,
        eval_type: job.job_type,
        triggered_by: EvalTrigger::JobRegister,
        job_id: job.id.clone(),
        status: EvalStatus::Pending,
        create_time: now,
        modify_time: now,
        ..Evaluation::default()
    };
    let eval_id = eval.id.to_string();
    let enforce_index = if req.enforce_index.unwrap_or(false) {
        Some(req.job_modify_index.unwrap_or(0))
    } else {
        None
    };
    let applied = node
        .write(Command::JobRegister(JobRegister {
            job,
            eval: Some(eval),
            enforce_index,
        }))
        .await
        .map_err(write_error)?;
    let job_modify_index = match applied.response {
        CommandResponse::JobRegistered {
            job_modify_index, ..
        } => job_modify_index,
        CommandResponse::Rejected(e) => return Err(ApiError::bad_request(e.to_string())),
        other => return Err(ApiError::internal(format!("unexpected answer {other:?}"))),
    };
    Ok(json_write(
        JobRegisterResponse {
            eval_id,
            eval_create_index: applied.index,
            job_modify_index,
            warnings: String::new(),
            index: applied.index,
            last_contact: 0,
            known_leader: true,
            next_token: String::new(),
        },
        applied.index,
    ))
}

/// `GET /v1/jobs`: job stubs, `?prefix=` filtered.
pub async fn list(
    State(ctx): State<HttpContext>,
    Query(q): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let (snap, meta) = ctx.read(&opts, &[Table::Jobs, Table::JobSummaries]).await?;
    let stubs: Vec<Value> = snap
        .jobs_by_prefix(&opts.namespace, &opts.prefix)
        .map(|job| {
            job_stub(
                job,
                snap.job_summary(job.namespace.as_str(), job.id.as_str()),
            )
        })
        .collect();
    Ok(json_read(stubs, meta))
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

/// Nomad's `JobListStub`.
fn job_stub(job: &Job, summary: Option<&std::sync::Arc<JobSummary>>) -> Value {
    serde_json::json!({
        "ID": job.id,
        "ParentID": "",
        "Name": job.name,
        "Namespace": job.namespace,
        "Datacenters": job.datacenters,
        "NodePool": job.node_pool,
        "Multiregion": null,
        "Type": job.job_type,
        "Priority": job.priority,
        "Periodic": false,
        "ParameterizedJob": false,
        "Stop": job.stop,
        "Status": job.status,
        "StatusDescription": job.status_description,
        "JobSummary": summary.map(|s| s.as_ref()),
        "CreateIndex": job.create_index,
        "ModifyIndex": job.modify_index,
        "JobModifyIndex": job.job_modify_index,
        "SubmitTime": job.submit_time,
    })
}

/// A failed write as an API error.
pub fn write_error(e: WriteError) -> ApiError {
    match e {
        WriteError::NoLeader | WriteError::NotLeader { .. } => ApiError::no_leader(),
        e => ApiError::internal(e.to_string()),
    }
}
