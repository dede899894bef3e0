//! `teamster acl bootstrap|policy …|token …`, as `nomad acl …`: bootstrap the ACL system,
//! apply, list, read and delete policies, and create, list, read, update and delete tokens.

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{json, Value};

use super::args::ApiArgs;
use super::output::{table, text};
use crate::api::urlencode;

/// `acl …`.
#[derive(Debug, Subcommand)]
pub enum AclCommand {
    /// Bootstrap the ACL system: the first management token (once).
    Bootstrap(BootstrapArgs),
    /// ACL policies.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// ACL tokens.
    #[command(subcommand)]
    Token(TokenCommand),
}

/// `acl policy …`.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Create or change a policy from a rules file (HCL or JSON; `-` reads standard input).
    Apply(PolicyApplyArgs),
    /// The policies.
    List(PlainArgs),
    /// One policy with its rules.
    Info(NameArgs),
    /// Delete a policy.
    Delete(NameArgs),
}

/// `acl token …`.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token.
    Create(TokenCreateArgs),
    /// Change a token's name, type or policies.
    Update(TokenUpdateArgs),
    /// The tokens (without secrets).
    List(PlainArgs),
    /// One token, by accessor ID.
    Info(AccessorArgs),
    /// The token this command runs with.
    #[command(name = "self")]
    Self_(PlainArgs),
    /// Delete a token, by accessor ID.
    Delete(AccessorArgs),
}

/// `acl bootstrap`.
#[derive(Debug, Args)]
pub struct BootstrapArgs {
    /// A file holding the secret to give the bootstrap token (a UUID; `-` reads standard
    /// input); a random one when omitted.
    path: Option<String>,
    #[command(flatten)]
    api: ApiArgs,
}

/// Commands with no arguments of their own.
#[derive(Debug, Args)]
pub struct PlainArgs {
    #[command(flatten)]
    api: ApiArgs,
}

/// `acl policy info|delete`.
#[derive(Debug, Args)]
pub struct NameArgs {
    /// The policy's name.
    name: String,
    #[command(flatten)]
    api: ApiArgs,
}

/// `acl policy apply`.
#[derive(Debug, Args)]
pub struct PolicyApplyArgs {
    /// What the policy is for.
    #[arg(long, default_value = "")]
    description: String,
    /// The policy's name.
    name: String,
    /// The rules file (`-`: standard input).
    path: String,
    #[command(flatten)]
    api: ApiArgs,
}

/// `acl token create`.
#[derive(Debug, Args)]
pub struct TokenCreateArgs {
    /// A human name.
    #[arg(long, default_value = "")]
    name: String,
    /// `client` or `management`.
    #[arg(long = "type", default_value = "client")]
    kind: String,
    /// A policy (repeatable).
    #[arg(long = "policy")]
    policies: Vec<String>,
    /// Mark the token global.
    #[arg(long)]
    global: bool,
    /// How long the token lives (`1h`, `30m`); forever when omitted.
    #[arg(long)]
    ttl: Option<String>,
    #[command(flatten)]
    api: ApiArgs,
}

/// `acl token update`.
#[derive(Debug, Args)]
pub struct TokenUpdateArgs {
    /// A new name.
    #[arg(long)]
    name: Option<String>,
    /// A new type.
    #[arg(long = "type")]
    kind: Option<String>,
    /// The policies (repeatable; replaces the token's policies when given).
    #[arg(long = "policy")]
    policies: Vec<String>,
    /// The token's accessor ID.
    accessor_id: String,
    #[command(flatten)]
    api: ApiArgs,
}

/// `acl token info|delete`.
#[derive(Debug, Args)]
pub struct AccessorArgs {
    /// The token's accessor ID.
    accessor_id: String,
    #[command(flatten)]
    api: ApiArgs,
}

/// Run an `acl` command.
pub async fn run(cmd: AclCommand) -> anyhow::Result<()> {
    match cmd {
        AclCommand::Bootstrap(a) => bootstrap(a).await,
        AclCommand::Policy(PolicyCommand::Apply(a)) => policy_apply(a).await,
        AclCommand::Policy(PolicyCommand::List(a)) => policy_list(a).await,
        AclCommand::Policy(PolicyCommand::Info(a)) => policy_info(a).await,
        AclCommand::Policy(PolicyCommand::Delete(a)) => policy_delete(a).await,
        AclCommand::Token(TokenCommand::Create(a)) => token_create(a).await,
        AclCommand::Token(TokenCommand::Update(a)) => token_update(a).await,
        AclCommand::Token(TokenCommand::List(a)) => token_list(a).await,
        AclCommand::Token(TokenCommand::Info(a)) => {
            let path = format!("/v1/acl/token/{}", urlencode(&a.accessor_id));
            show_token(&a.api, &path).await
        }
        AclCommand::Token(TokenCommand::Self_(a)) => show_token(&a.api, "/v1/acl/token/self").await,
        AclCommand::Token(TokenCommand::Delete(a)) => token_delete(a).await,
    }
}

fn read_input(path: &str) -> anyhow::Result<String> {
    if path == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .context("reading standard input")?;
        Ok(s)
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {path}"))
    }
}

async fn bootstrap(a: BootstrapArgs) -> anyhow::Result<()> {
    let api = a.api.client()?;
    let body = match &a.path {
        Some(path) => json!({ "BootstrapSecret": read_input(path)?.trim() }),
        None => json!({}),
    };
    let token: Value = api
        .request(Method::PUT, "/v1/acl/bootstrap", Some(&body))
        .await
        .context("bootstrapping the ACL system")?;
    print_token(&a.api, &token)
}

fn print_token(api: &ApiArgs, t: &Value) -> anyhow::Result<()> {
    if api.structured() {
        return api.print(t);
    }
    let expiry = match &t["ExpirationTime"] {
        Value::Null => "<none>".to_string(),
        v => text(v),
    };
    let policies: Vec<String> = t["Policies"]
        .as_array()
        .map(|p| p.iter().map(text).collect())
        .unwrap_or_default();
    let rows = vec![
        vec![
            "Accessor ID".to_string(),
            "=".into(),
            text(&t["AccessorID"]),
        ],
        vec!["Secret ID".into(), "=".into(), text(&t["SecretID"])],
        vec!["Name".into(), "=".into(), text(&t["Name"])],
        vec!["Type".into(), "=".into(), text(&t["Type"])],
        vec!["Global".into(), "=".into(), text(&t["Global"])],
        vec!["Create Time".into(), "=".into(), text(&t["CreateTime"])],
        vec!["Expiry Time".into(), "=".into(), expiry],
        vec!["Create Index".into(), "=".into(), text(&t["CreateIndex"])],
        vec!["Modify Index".into(), "=".into(), text(&t["ModifyIndex"])],
        vec!["Policies".into(), "=".into(), format!("{policies:?}")],
    ];
    print!("{}", table(&rows));
    Ok(())
}

async fn policy_apply(a: PolicyApplyArgs) -> anyhow::Result<()> {
    let api = a.api.client()?;
    let rules = read_input(&a.path)?;
    let body = json!({ "Name": a.name, "Description": a.description, "Rules": rules });
    api.request_text(
        Method::PUT,
        &format!("/v1/acl/policy/{}", urlencode(&a.name)),
        Some(&body),
    )
    .await
    .with_context(|| format!("applying policy {:?}", a.name))?;
    println!("Successfully wrote {:?} ACL policy!", a.name);
    Ok(())
}

async fn policy_list(a: PlainArgs) -> anyhow::Result<()> {
    a.api
        .print_list(
            "/v1/acl/policies",
            "policies",
            &[("Name", "Name"), ("Description", "Description")],
            Some("No policies found"),
        )
        .await
}

async fn policy_info(a: NameArgs) -> anyhow::Result<()> {
    let api = a.api.client()?;
    let p: Value = api
        .get(&format!("/v1/acl/policy/{}", urlencode(&a.name)))
        .await
        .with_context(|| format!("reading policy {:?}", a.name))?;
    if a.api.structured() {
        return a.api.print(&p);
    }
    let rows = vec![
        vec!["Name".to_string(), "=".into(), text(&p["Name"])],
        vec!["Description".into(), "=".into(), text(&p["Description"])],
        vec!["CreateIndex".into(), "=".into(), text(&p["CreateIndex"])],
        vec!["ModifyIndex".into(), "=".into(), text(&p["ModifyIndex"])],
    ];
    print!("{}", table(&rows));
    println!("\nRules\n\n{}", text(&p["Rules"]));
    Ok(())
}

async fn policy_delete(a: NameArgs) -> anyhow::Result<()> {
    let api = a.api.client()?;
    api.request_text::<()>(
        Method::DELETE,
        &format!("/v1/acl/policy/{}", urlencode(&a.name)),
        None,
    )
    .await
    .with_context(|| format!("deleting policy {:?}", a.name))?;
    println!("Successfully deleted {:?} ACL policy!", a.name);
    Ok(())
}

async fn token_create(a: TokenCreateArgs) -> anyhow::Result<()> {
    if a.kind != "client" && a.kind != "management" {
        bail!(
            "-type must be \"client\" or \"management\", not {:?}",
            a.kind
        );
    }
    let api = a.api.client()?;
    let mut body = json!({
        "Name": a.name,
        "Type": a.kind,
        "Policies": a.policies,
        "Global": a.global,
    });
    if let Some(ttl) = &a.ttl {
        body["ExpirationTTL"] = json!(ttl);
    }
    let token: Value = api
        .request(Method::PUT, "/v1/acl/token", Some(&body))
        .await
        .context("creating the token")?;
    print_token(&a.api, &token)
}

async fn token_update(a: TokenUpdateArgs) -> anyhow::Result<()> {
    let api = a.api.client()?;
    let path = format!("/v1/acl/token/{}", urlencode(&a.accessor_id));
    let current: Value = api.get(&path).await.context("reading the token")?;
    let policies = if a.policies.is_empty() {
        current["Policies"].clone()
    } else {
        json!(a.policies)
    };
    let body = json!({
        "AccessorID": a.accessor_id,
        "Name": a.name.unwrap_or_else(|| text(&current["Name"])),
        "Type": a.kind.unwrap_or_else(|| text(&current["Type"])),
        "Policies": policies,
        "Global": current["Global"],
    });
    let token: Value = api
        .request(Method::PUT, &path, Some(&body))
        .await
        .context("updating the token")?;
    print_token(&a.api, &token)
}

async fn token_list(a: PlainArgs) -> anyhow::Result<()> {
    let api = a.api.client()?;
    let all: Vec<Value> = api
        .get("/v1/acl/tokens")
        .await
        .context("listing the tokens")?;
    if a.api.structured() {
        return a.api.print(&all);
    }
    let mut rows = vec![vec![
        "Name".to_string(),
        "Type".into(),
        "Global".into(),
        "Accessor ID".into(),
        "Expired".into(),
    ]];
    for t in &all {
        rows.push(vec![
            text(&t["Name"]),
            text(&t["Type"]),
            text(&t["Global"]),
            text(&t["AccessorID"]),
            expired(&t["ExpirationTime"]).to_string(),
        ]);
    }
    print!("{}", table(&rows));
    Ok(())
}

/// Whether an `ExpirationTime` (RFC 3339, or null for never) has passed.
fn expired(v: &Value) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    serde_json::from_value::<teamster_storage::model::Timestamp>(v.clone())
        .ok()
        .and_then(|t| t.unix_nanos())
        .is_some_and(|t| t <= now)
}

async fn show_token(api_args: &ApiArgs, path: &str) -> anyhow::Result<()> {
    let api = api_args.client()?;
    let token: Value = api.get(path).await.context("reading the token")?;
    print_token(api_args, &token)
}

async fn token_delete(a: AccessorArgs) -> anyhow::Result<()> {
    let api = a.api.client()?;
    api.request_text::<()>(
        Method::DELETE,
        &format!("/v1/acl/token/{}", urlencode(&a.accessor_id)),
        None,
    )
    .await
    .with_context(|| format!("deleting token {:?}", a.accessor_id))?;
    println!("Token {} successfully deleted", a.accessor_id);
    Ok(())
}
