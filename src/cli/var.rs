//! `teamster var list|get|put|purge`, as `nomad var …`: the cluster's Variables.
//!
//! - `var list [PREFIX]`: `Namespace  Path  Last Updated` (`-out json` for the metadata).
//! - `var get PATH [-item KEY]`: the variable as JSON (`-out table` for `Key  Value` rows),
//!   or one item's value.
//! - `var put PATH [KEY=VALUE | KEY=@FILE]... [-check-index N]`, or `var put PATH -` / `@FILE`
//!   for a JSON variable (`{"Items": {...}}`): the variable's items replaced.
//! - `var purge PATH [-check-index N]`.
//! - `var init [FILE] [-out hcl|json]`: an example specification (`spec.nv.hcl`).
//! - `var lock [-ttl D] [-delay D] [-shell=false] [-early-return] [-backoff D] PATH [@SPEC]
//!   CHILD...`: runs the child while holding the variable's lock, renewing it every
//!   0.7 TTL, and releases it when the child exits (Nomad's lock leaser).
//!
//! Specification files (`@FILE`) are JSON (`{"Items": {...}}`) or, named `*.hcl`, HCL
//! (`items { key = "value" }`), as Nomad's.
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
    /// Write an example variable specification.
    Init(InitArgs),
    /// Run a command while holding a variable's lock.
    Lock(LockArgs),
}

/// `var init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Where to write it (`spec.nv.hcl`, or `spec.nv.json` with `-out json`).
    file: Option<String>,
    /// `hcl` or `json`.
    #[arg(long, default_value = "hcl", value_parser = ["hcl", "json"])]
    out: String,
    /// Print nothing.
    #[arg(long)]
    quiet: bool,
}

/// `var lock`.
#[derive(Debug, Args)]
pub struct LockArgs {
    /// The lock's TTL (Nomad's 15s when unset).
    #[arg(long)]
    ttl: Option<String>,
    /// The lock's delay (Nomad's 15s when unset).
    #[arg(long)]
    delay: Option<String>,
    /// Run the child through `$SHELL -c` (`--shell=false`: run it directly).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    shell: bool,
    /// Give up (exit 0, running nothing) when another holds the lock.
    #[arg(long = "early-return")]
    early_return: bool,
    /// The wait between attempts to acquire (1.1 TTL when unset).
    #[arg(long)]
    backoff: Option<String>,
    /// Say what happens, on stderr.
    #[arg(long)]
    verbose: bool,
    /// The variable's path (or `@SPEC`), an optional `@SPEC` for its items, then the
    /// command to run.
    #[arg(required = true, num_args = 2.., trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
    #[command(flatten)]
    api: ApiArgs,
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
    /// `json`, `table`, `hcl` (a specification), `go-template` (with `-t`) or `none`.
    #[arg(long, default_value = "json", value_parser = OUT_FORMATS)]
    out: String,
    #[command(flatten)]
    api: ApiArgs,
}

/// The `-out` formats of `var get` and `var put`.
const OUT_FORMATS: [&str; 5] = ["json", "table", "hcl", "go-template", "none"];

/// `var` as `-out` asks: JSON, a `Key  Value` table, an HCL specification (`path`,
/// `namespace`, `items`), the global `-t` template (`go-template`), or nothing.
fn print_var(api: &ApiArgs, out: &str, var: &Value) -> anyhow::Result<()> {
    match out {
        "none" => {}
        "go-template" => {
            if api.template.is_none() {
                bail!("A template must be supplied using '-t' when using go-template formatting");
            }
            api.print(var)?;
        }
        "table" => {
            let mut rows = vec![vec!["Key".to_string(), "Value".to_string()]];
            if let Some(items) = var["Items"].as_object() {
                for (k, v) in items {
                    rows.push(vec![k.clone(), v.as_str().unwrap_or_default().to_string()]);
                }
            }
            print!("{}", table(&rows));
        }
        "hcl" => print!("{}", var_hcl(var)),
        _ if api.structured() => api.print(var)?,
        _ => println!("{}", serde_json::to_string_pretty(var)?),
    }
    Ok(())
}

/// A variable as an HCL specification (`var put @FILE` reads it back): an `items` block,
/// or an `items = {…}` object when a key is not an HCL identifier.
fn var_hcl(var: &Value) -> String {
    let quote =
        |v: &Value| serde_json::to_string(v.as_str().unwrap_or_default()).unwrap_or_default();
    let mut out = format!(
        "namespace = {}\npath      = {}\n\n",
        quote(&var["Namespace"]),
        quote(&var["Path"])
    );
    let empty = serde_json::Map::new();
    let items = var["Items"].as_object().unwrap_or(&empty);
    let identifier = |k: &str| {
        k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            && k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
    };
    let plain = items.keys().all(|k| identifier(k));
    out.push_str(if plain { "items {\n" } else { "items = {\n" });
    let width = items.keys().map(|k| k.len()).max().unwrap_or(0);
    for (k, v) in items {
        let key = if plain {
            k.clone()
        } else {
            serde_json::to_string(k).unwrap_or_default()
        };
        out.push_str(&format!("  {key:width$} = {}\n", quote(v)));
    }
    out.push_str("}\n");
    out
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
    /// `none` (a line saying what was written), or the variable as `json`, `table`,
    /// `hcl` or `go-template` (with `-t`).
    #[arg(long, default_value = "none", value_parser = OUT_FORMATS)]
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
        VarCommand::Init(a) => init(a),
        VarCommand::Lock(a) => lock(a).await,
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
        // A conflict answers the current variable; a lock's refusal is a message.
        ApiError::Status { status, message }
            if status == StatusCode::CONFLICT && !message.trim_start().starts_with('{') =>
        {
            anyhow::anyhow!("{message}")
        }
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
    print_var(&a.api, &a.out, &var)
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
        if let Some(text) = spec {
            let hcl = only.ends_with(".hcl");
            return Ok(spec_items(&text, hcl)?.1);
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

/// A specification's path (if it names one) and items: JSON (`{"Path", "Items"}`) or HCL
/// (`path = …`, `items { … }`).
fn spec_items(text: &str, hcl: bool) -> anyhow::Result<(Option<String>, BTreeMap<String, String>)> {
    let v: Value = if hcl {
        hcl::from_str(text).context("the specification is not HCL")?
    } else {
        serde_json::from_str(text).context("the variable is not JSON")?
    };
    let (path_key, items_key) = if hcl {
        ("path", "items")
    } else {
        ("Path", "Items")
    };
    let path = v[path_key].as_str().map(str::to_string);
    let items = v.get(items_key).cloned().unwrap_or(if hcl {
        Value::Object(Default::default())
    } else {
        v
    });
    let items = serde_json::from_value(items).context("a variable's items are a map of strings")?;
    Ok((path, items))
}

const INIT_HCL: &str = r#"# A variable path can be specified in the specification file
# and will be used when writing the variable without specifying a
# path in the command or when writing JSON directly to the `/var/`
# HTTP API endpoint
# path = "path/to/variable"

# The Namespace to write the variable can be included in the specification. This
# value can be overridden by specifying the "-namespace" flag on the "put"
# command.
# namespace = "default"

# The items map is the only strictly required part of a variable
# specification, since path and namespace can be set via other means.
# It contains the sensitive material to encrypt and store as a Nomad
# variable. The entire items map is encrypted and decrypted as a single
# unit.

# REMINDER: While keys in the items map can contain dots, using them in
# templates is easier when they do not. As a best practice, avoid dotted
# keys when possible.
items {
  key1 = "value 1"
  key2 = "value 2"
}
"#;

const INIT_JSON: &str = r#"{
  "Namespace": "default",
  "Path": "path/to/variable",
  "Items": {
    "key1": "value 1",
    "key2": "value 2"
  }
}
"#;

fn init(a: InitArgs) -> anyhow::Result<()> {
    let json = a.out == "json";
    let file = a
        .file
        .unwrap_or_else(|| if json { "spec.nv.json" } else { "spec.nv.hcl" }.to_string());
    if std::path::Path::new(&file).exists() {
        bail!("File {file:?} already exists");
    }
    std::fs::write(&file, if json { INIT_JSON } else { INIT_HCL })
        .with_context(|| format!("Failed to write {file:?}"))?;
    if !a.quiet {
        println!("Example variable specification written to {file}");
    }
    Ok(())
}

/// A Go duration flag, in nanoseconds.
fn duration_flag(name: &str, v: &Option<String>) -> anyhow::Result<Option<std::time::Duration>> {
    v.as_deref()
        .map(|s| {
            crate::util::go::parse_go_duration(s)
                .ok_or_else(|| anyhow::anyhow!("Invalid {name}: {s:?} is not a duration"))
        })
        .transpose()
}

async fn lock(a: LockArgs) -> anyhow::Result<()> {
    let say = |m: &str| {
        if a.verbose {
            eprintln!("{m}");
        }
    };
    let mut args = a.args.clone();
    let first = args.remove(0);
    let read_spec = |arg: &str| -> anyhow::Result<(Option<String>, BTreeMap<String, String>)> {
        let file = &arg[1..];
        let text =
            std::fs::read_to_string(file).with_context(|| format!("Error reading {file:?}"))?;
        spec_items(&text, file.ends_with(".hcl"))
    };
    let (mut path, mut items) = match first.strip_prefix('@') {
        Some(_) => read_spec(&first)?,
        None => (Some(first.trim_matches('/').to_string()), BTreeMap::new()),
    };
    if args.first().is_some_and(|a| a.starts_with('@')) {
        let spec = args.remove(0);
        let (p, i) = read_spec(&spec)?;
        path = path.or(p);
        items = i;
    }
    let Some(path) = path.filter(|p| !p.is_empty()) else {
        bail!("the variable's path is missing (give it, or a specification with a path)");
    };
    if args.is_empty() {
        bail!("Not enough arguments: a command to run is missing");
    }
    let ttl = duration_flag("TTL", &a.ttl)?;
    // Checked here, sent as written.
    duration_flag("Lock Delay", &a.delay)?;
    let ttl_or_default = ttl.unwrap_or(std::time::Duration::from_secs(15));
    let floor = std::time::Duration::from_secs(1);
    let backoff = duration_flag("backoff", &a.backoff)?
        .unwrap_or(ttl_or_default.mul_f64(1.1))
        .max(floor);
    let mut lock = serde_json::Map::new();
    if let Some(t) = &a.ttl {
        lock.insert("TTL".into(), json!(t));
    }
    if let Some(d) = &a.delay {
        lock.insert("LockDelay".into(), json!(d));
    }
    let api = a.api.client()?;
    let url = var_path(&path);
    tokio::time::sleep(std::time::Duration::from_millis(
        rand::random::<u64>() % 100,
    ))
    .await;
    say("Attempting to acquire lock");
    // Items only from a specification: none keep the variable's.
    let mut body = json!({ "Lock": lock });
    if !items.is_empty() {
        body["Items"] = json!(items);
    }
    let (id, held_ttl) = loop {
        match api
            .request::<_, Value>(Method::PUT, &format!("{url}?lock-acquire"), Some(&body))
            .await
        {
            Ok(v) => {
                let ttl = v["Lock"]["TTL"]
                    .as_str()
                    .and_then(crate::util::go::parse_go_duration)
                    .unwrap_or(ttl_or_default);
                break (
                    v["Lock"]["ID"].as_str().unwrap_or_default().to_string(),
                    ttl,
                );
            }
            Err(ApiError::Status { status, .. }) if status == StatusCode::CONFLICT => {
                if a.early_return {
                    say("The lock is held by another; returning early");
                    return Ok(());
                }
                say("The lock is held by another; waiting");
                tokio::time::sleep(backoff).await;
            }
            Err(e) => return Err(e).context("Lock error: acquiring the lock"),
        }
    };
    if id.is_empty() {
        bail!("Lock error: the servers answered no lock ID");
    }
    say(&format!(
        "Variable locked, ready to execute: {}",
        args.join(" ")
    ));
    let mut cmd = if a.shell {
        let shell = std::env::var("SHELL").unwrap_or_else(|_| "/bin/sh".into());
        let mut c = tokio::process::Command::new(shell);
        c.arg("-c").arg(args.join(" "));
        c
    } else {
        let mut c = tokio::process::Command::new(&args[0]);
        c.args(&args[1..]);
        c
    };
    cmd.kill_on_drop(true);
    let release = |api: crate::api::ApiClient, url: String, id: String| async move {
        api.request::<_, Value>(
            Method::PUT,
            &format!("{url}?lock-release"),
            Some(&json!({ "Lock": { "ID": id } })),
        )
        .await
    };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = release(api.clone(), url.clone(), id.clone()).await;
            bail!("Lock error: starting {:?}: {e}", args[0]);
        }
    };
    // Renewed every 0.7 TTL (the TTL the servers answered), each renewal given at most
    // the TTL to answer.
    let mut renewals = tokio::time::interval_at(
        tokio::time::Instant::now() + held_ttl.mul_f64(0.7).max(floor),
        held_ttl.mul_f64(0.7).max(floor),
    );
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let forward = |child: &tokio::process::Child, sig: i32| {
        if let Some(pid) = child.id() {
            // SAFETY: sending a signal to our own child process.
            unsafe { libc::kill(pid as i32, sig) };
        }
    };
    let outcome = loop {
        tokio::select! {
            status = child.wait() => break status.map_err(anyhow::Error::from),
            _ = sigint.recv() => forward(&child, libc::SIGINT),
            _ = sigterm.recv() => forward(&child, libc::SIGTERM),
            _ = renewals.tick() => {
                let renewed = tokio::time::timeout(
                    held_ttl,
                    api.request::<_, Value>(
                        Method::PUT,
                        &format!("{url}?lock-renew"),
                        Some(&json!({ "Lock": { "ID": id } })),
                    ),
                )
                .await;
                let failed = match renewed {
                    Ok(Ok(_)) => None,
                    Ok(Err(e)) => Some(e.to_string()),
                    Err(_) => Some(format!("no answer within {held_ttl:?}")),
                };
                if let Some(e) = failed {
                    let _ = child.kill().await;
                    break Err(anyhow::anyhow!("error renewing the lease: {e}"));
                }
            }
        }
    };
    say("Releasing the lock");
    let released = release(api, url, id).await;
    match outcome {
        Ok(status) if status.success() => {
            released.context("Lock error: releasing the lock")?;
            Ok(())
        }
        Ok(status) => bail!("Lock error: error executing protected function {status}"),
        Err(e) => bail!("Lock error: {e}"),
    }
}

async fn put(mut a: PutArgs) -> anyhow::Result<()> {
    // `var put @SPEC`: the path is the specification's.
    if let Some(file) = a.path.strip_prefix('@') {
        let text =
            std::fs::read_to_string(file).with_context(|| format!("Error reading {file:?}"))?;
        let (path, _) = spec_items(&text, file.ends_with(".hcl"))?;
        let Some(path) = path.filter(|p| !p.is_empty()) else {
            bail!("the specification {file:?} names no path: give it as the first argument");
        };
        a.items.insert(0, std::mem::replace(&mut a.path, path));
    }
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
    if a.out != "none" || a.api.structured() {
        let out = if a.out == "none" {
            "json"
        } else {
            a.out.as_str()
        };
        print_var(&a.api, out, &written)?;
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

    #[test]
    fn a_variable_printed_as_hcl_reads_back_as_a_specification() {
        let var = json!({"Namespace": "default", "Path": "app/db",
                         "Items": {"user": "app", "pass word": "a\"b"}});
        let hcl = var_hcl(&var);
        assert!(hcl.contains("path      = \"app/db\""), "{hcl}");
        let (path, items) = spec_items(&hcl, true).unwrap();
        assert_eq!(path.as_deref(), Some("app/db"));
        assert_eq!(items["pass word"], "a\"b");
        assert_eq!(items["user"], "app");
    }

    #[test]
    fn specifications_are_json_or_hcl_as_var_init_writes_them() {
        let (path, items) = spec_items(INIT_HCL, true).unwrap();
        assert_eq!(path, None, "the example's path is commented out");
        assert_eq!(items["key1"], "value 1");
        let (path, items) = spec_items(INIT_JSON, false).unwrap();
        assert_eq!(path.as_deref(), Some("path/to/variable"));
        assert_eq!(items["key2"], "value 2");
        let (path, _) = spec_items("path = \"a/b\"\nitems { k = \"v\" }\n", true).unwrap();
        assert_eq!(path.as_deref(), Some("a/b"));
        assert!(spec_items("items { k = [1] }", true).is_err());
    }
}
