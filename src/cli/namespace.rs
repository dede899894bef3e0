//! `teamster namespace apply|list|status|delete`, as `nomad namespace …`: create or describe
//! a namespace, list them, show one, delete one that holds no job.

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::args::ApiArgs;
use super::output::{table, text};
use crate::api::urlencode;
use crate::api::ApiError;

/// `namespace …`.
#[derive(Debug, Subcommand)]
pub enum NamespaceCommand {
    /// Create a namespace, or change its description and metadata.
    Apply(ApplyArgs),
    /// The namespaces.
    List(ListArgs),
    /// One namespace.
    Status(NameArgs),
    /// Delete a namespace that holds no job.
    Delete(NameArgs),
}

/// `namespace apply`.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// What the namespace is for (kept as it is when not given).
    #[arg(long)]
    description: Option<String>,
    /// Metadata, `key=value` (repeatable; replaces the namespace's metadata).
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    meta: Vec<String>,
    /// The namespace's name.
    name: String,
    #[command(flatten)]
    api: ApiArgs,
}

/// `namespace list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    api: ApiArgs,
}

/// `namespace status` and `namespace delete`.
#[derive(Debug, Args)]
pub struct NameArgs {
    /// The namespace's name.
    name: String,
    #[command(flatten)]
    api: ApiArgs,
}

/// Run a `namespace` command.
pub async fn run(cmd: NamespaceCommand) -> anyhow::Result<()> {
    match cmd {
        NamespaceCommand::Apply(a) => apply(a).await,
        NamespaceCommand::List(a) => list(a).await,
        NamespaceCommand::Status(a) => status(a).await,
        NamespaceCommand::Delete(a) => delete(a).await,
    }
}

async fn apply(a: ApplyArgs) -> anyhow::Result<()> {
    let api = a.api.client()?;
    let path = format!("/v1/namespace/{}", urlencode(&a.name));
    // As Nomad's CLI: what is not given is kept from the namespace as it is.
    let existing: Option<Value> = match api.get::<Value>(&path).await {
        Ok(v) => Some(v),
        Err(ApiError::Status { status, .. }) if status == StatusCode::NOT_FOUND => None,
        Err(e) => return Err(e).context("reading the namespace"),
    };
    let description = a.description.unwrap_or_else(|| {
        existing
            .as_ref()
            .map(|e| text(&e["Description"]))
            .unwrap_or_default()
    });
    let meta: serde_json::Map<String, Value> = if a.meta.is_empty() {
        existing
            .as_ref()
            .and_then(|e| e["Meta"].as_object().cloned())
            .unwrap_or_default()
    } else {
        a.meta
            .iter()
            .map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
                    .ok_or_else(|| anyhow::anyhow!("--meta {kv:?}: expected KEY=VALUE"))
            })
            .collect::<anyhow::Result<_>>()?
    };
    let body = json!({ "Name": a.name, "Description": description, "Meta": meta });
    api.request::<_, Value>(Method::PUT, &path, Some(&body))
        .await
        .with_context(|| format!("applying namespace {:?}", a.name))?;
    println!("Successfully applied namespace {:?}!", a.name);
    Ok(())
}

async fn list(a: ListArgs) -> anyhow::Result<()> {
    a.api
        .print_list(
            "/v1/namespaces",
            "namespaces",
            &[("Name", "Name"), ("Description", "Description")],
            None,
        )
        .await
}

async fn status(a: NameArgs) -> anyhow::Result<()> {
    let api = a.api.client()?;
    let ns: Value = match api
        .get(&format!("/v1/namespace/{}", urlencode(&a.name)))
        .await
    {
        Err(ApiError::Status { status, .. }) if status == StatusCode::NOT_FOUND => {
            bail!("Namespace {:?} not found", a.name)
        }
        r => r.context("reading the namespace")?,
    };
    if a.api.structured() {
        return a.api.print(&ns);
    }
    let mut rows = vec![
        vec!["Name".to_string(), "=".into(), text(&ns["Name"])],
        vec!["Description".into(), "=".into(), text(&ns["Description"])],
    ];
    if let Some(meta) = ns["Meta"].as_object().filter(|m| !m.is_empty()) {
        for (k, v) in meta {
            rows.push(vec![format!("Meta {k}"), "=".into(), text(v)]);
        }
    }
    print!("{}", table(&rows));
    Ok(())
}

async fn delete(a: NameArgs) -> anyhow::Result<()> {
    let api = a.api.client()?;
    api.request_text::<()>(
        Method::DELETE,
        &format!("/v1/namespace/{}", urlencode(&a.name)),
        None,
    )
    .await
    .with_context(|| format!("deleting namespace {:?}", a.name))?;
    println!("Successfully deleted namespace {:?}!", a.name);
    Ok(())
}
