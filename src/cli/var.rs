//! `teamster var list|get|put|purge`, as `nomad var …`: the cluster's Variables.
//!
//! - `var list [PREFIX]`: `Namespace  Path  Last Updated` (`-out json` for the metadata).
//! - `var get PATH [-item KEY]`: the variable as JSON (`-out table` for `Key  Value` rows),
//!   or one item's value.
//! - `var put PATH [KEY=VALUE | KEY=@FILE]... [-check-index N]`, or `var put PATH -` / `@FILE`
//!   for a JSON variable (`{"Items": {...}}`): the variable's items replaced.
//! - `var purge PATH [-check-index N]`.
//!
//! A stale `-check-index` is Nomad's "Check-and-Set conflict", naming the server's index.

use std::collections::BTreeMap;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::args::ApiArgs;
use super::output::{table, unix_nanos};
use crate::api::{urlencode, ApiError};

/// `var …`.
#[derive(Debug, Subcommand)]
pub enum VarCommand {
    /// The variables (by path prefix).
    List(ListArgs),
    /// One variable, or one of its items.
    Get(GetArgs),
    /// Write a variable's items.
    Put(PutArgs),
    /// Delete a variable.
    Purge(PurgeArgs),
}

/// `var list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only paths starting with this.
    #[arg(default_value = "")]
    prefix: String,
    /// `table` or `json`.
    #[arg(long, default_value = "table", value_parser = ["table", "json"])]
    out: String,
    #[command(flatten)]
    api: ApiArgs,
}

/// `var get`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// The variable's path.
    path: String,
    /// Print only this item's value.
    #[arg(long)]
    item: Option<String>,
    /// `json` or `table`.
    #[arg(long, default_value = "json", value_parser = ["json", "table"])]
    out: String,
    #[command(flatten)]
    api: ApiArgs,
}

/// `var put`.
#[derive(Debug, Args)]
pub struct PutArgs {
    /// The variable's path.
    path: String,
    /// `KEY=VALUE` items (`KEY=@FILE` reads the value from a file); or one `-` (stdin) or
    /// `@FILE` holding the variable as JSON.
    items: Vec<String>,
    /// Write only if the variable's modify index is this (0: only if it does not exist).
    #[arg(long = "check-index")]
    check_index: Option<u64>,
    /// `none` (a line saying what was written) or `json` (the variable).
    #[arg(long, default_value = "none", value_parser = ["none", "json"])]
    out: String,
    #[command(flatten)]
    api: ApiArgs,
}

/// `var purge`.
#[derive(Debug, Args)]
pub struct PurgeArgs {
    /// The variable's path.
    path: String,
    /// Delete only if the variable's modify index is this.
    #[arg(long = "check-index")]
    check_index: Option<u64>,
    #[command(flatten)]
    api: ApiArgs,
}

/// Run a `var` command.
pub async fn run(cmd: VarCommand) -> anyhow::Result<()> {
    match cmd {
        VarCommand::List(a) => list(a).await,
        VarCommand::Get(a) => get(a).await,
        VarCommand::Put(a) => put(a).await,
        VarCommand::Purge(a) => purge(a).await,
    }
}

fn var_path(path: &str) -> String {
    let path = path.trim_start_matches('/');
    let encoded: Vec<String> = path.split('/').map(urlencode).collect();
    format!("/v1/var/{}", encoded.join("/"))
}

/// Nomad's words for a refused check-and-set.
fn cas_conflict(e: ApiError, given: Option<u64>) -> anyhow::Error {
    match e {
        ApiError::Status { status, message } if status == StatusCode::CONFLICT => {
            let current: Value = serde_json::from_str(&message).unwrap_or(Value::Null);
            let server = current["ModifyIndex"].as_u64().unwrap_or(0);
            anyhow::anyhow!(
                "Check-and-Set conflict\n\n    Your provided check-index ({}) does not match the server-side index ({server}).",
                given.unwrap_or(0)
            )
        }
        other => anyhow::Error::new(other),
    }
}

async fn list(a: ListArgs) -> anyhow::Result<()> {
    let api = a.api.client()?;
    let vars: Vec<Value> = api
        .get(&format!("/v1/vars?prefix={}", urlencode(&a.prefix)))
        .await
        .context("listing variables")?;
    if a.out == "json" || a.api.structured() {
        println!("{}", serde_json::to_string_pretty(&vars)?);
        return Ok(());
    }
    if vars.is_empty() {
        println!("No matching variables found");
        return Ok(());
    }
    let mut rows = vec![vec![
        "Namespace".to_string(),
        "Path".to_string(),
        "Last Updated".to_string(),
    ]];
    for v in &vars {
        rows.push(vec![
            v["Namespace"].as_str().unwrap_or_default().to_string(),
            v["Path"].as_str().unwrap_or_default().to_string(),
            unix_nanos(&v["ModifyTime"]),
        ]);
    }
    print!("{}", table(&rows));
    Ok(())
}

async fn get(a: GetArgs) -> anyhow::Result<()> {
    let api = a.api.client()?;
    let var: Value = match api.get(&var_path(&a.path)).await {
        Ok(v) => v,
        Err(ApiError::Status { status, .. }) if status == StatusCode::NOT_FOUND => {
            bail!("Variable not found")
        }
        Err(e) => return Err(e).context("reading the variable"),
    };
    if let Some(item) = &a.item {
        match var["Items"].get(item).and_then(Value::as_str) {
            Some(value) => println!("{value}"),
            None => bail!("Variable does not contain {item:?} item"),
        }
        return Ok(());
    }
    if a.out == "table" {
        let mut rows = vec![vec!["Key".to_string(), "Value".to_string()]];
        if let Some(items) = var["Items"].as_object() {
            for (k, v) in items {
                rows.push(vec![k.clone(), v.as_str().unwrap_or_default().to_string()]);
            }
        }
        print!("{}", table(&rows));
        return Ok(());
    }
    println!("{}", serde_json::to_string_pretty(&var)?);
    Ok(())
}

/// The items `args` give: `KEY=VALUE` pairs (`@FILE` values read), or one JSON variable
/// from stdin (`-`) or a file (`@FILE`).
fn items_of(args: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    if let [only] = args {
        let spec = if only == "-" {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
            Some(text)
        } else if let Some(file) = only.strip_prefix('@') {
            Some(std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?)
        } else {
            None
        };
        if let Some(spec) = spec {
            let v: Value = serde_json::from_str(&spec).context("the variable is not JSON")?;
            let items = v.get("Items").cloned().unwrap_or(v);
            return serde_json::from_value(items)
                .context("a variable's Items are a map of strings");
        }
    }
    let mut items = BTreeMap::new();
    for arg in args {
        let Some((k, v)) = arg.split_once('=') else {
            bail!("item {arg:?} is not KEY=VALUE");
        };
        if k.is_empty() {
            bail!("item {arg:?} has no key");
        }
        let value = match v.strip_prefix('@') {
            Some(file) => {
                std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?
            }
            None => v.to_string(),
        };
        items.insert(k.to_string(), value);
    }
    Ok(items)
}

async fn put(a: PutArgs) -> anyhow::Result<()> {
    let items = items_of(&a.items)?;
    if items.is_empty() {
        bail!("A variable needs at least one item: KEY=VALUE");
    }
    let api = a.api.client()?;
    let mut path = var_path(&a.path);
    if let Some(index) = a.check_index {
        path.push_str(&format!("?cas={index}"));
    }
    let written: Value = api
        .request(Method::PUT, &path, Some(&json!({ "Items": items })))
        .await
        .map_err(|e| cas_conflict(e, a.check_index))?;
    if a.out == "json" || a.api.structured() {
        println!("{}", serde_json::to_string_pretty(&written)?);
    } else {
        println!(
            "Created variable {:?} with modify index {}",
            written["Path"].as_str().unwrap_or(&a.path),
            written["ModifyIndex"]
        );
    }
    Ok(())
}

async fn purge(a: PurgeArgs) -> anyhow::Result<()> {
    let api = a.api.client()?;
    let mut path = var_path(&a.path);
    if let Some(index) = a.check_index {
        path.push_str(&format!("?cas={index}"));
    }
    api.request_text::<()>(Method::DELETE, &path, None)
        .await
        .map_err(|e| cas_conflict(e, a.check_index))?;
    println!("Successfully purged variable {:?}!", a.path);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_come_from_pairs_files_or_a_json_variable() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("v.txt");
        std::fs::write(&file, "from-file").unwrap();
        let items = items_of(&[
            "user=app".into(),
            format!("cert=@{}", file.display()),
            "eq=a=b".into(),
        ])
        .unwrap();
        assert_eq!(items["user"], "app");
        assert_eq!(items["cert"], "from-file");
        assert_eq!(items["eq"], "a=b");
        let spec = dir.path().join("v.json");
        std::fs::write(&spec, r#"{"Items": {"k": "v"}}"#).unwrap();
        let items = items_of(&[format!("@{}", spec.display())]).unwrap();
        assert_eq!(items["k"], "v");
        assert!(items_of(&["novalue".into()]).is_err());
        assert!(items_of(&["=v".into()]).is_err());
        assert_eq!(var_path("/app/db x"), "/v1/var/app/db%20x");
    }
}
