//! The command line, in the style of the nomad CLI. Flags are clap's double-dash ones, and
//! Nomad's single-dash spelling of the same long flags is accepted too (`-purge`,
//! `-address=http://…`, `-check-index 7`): [`nomad_flags`] rewrites them before parsing. One
//! file per command group; this file only parses and dispatches. Commands that talk to a
//! cluster use the HTTP API at `--address`, else `TEAMSTER_ADDR`, else Nomad's `NOMAD_ADDR`,
//! else `http://127.0.0.1:4646`.
//!
//! Exit codes: 0 success, 1 an error (printed as one line, no backtrace), 2 bad usage.

mod acl;
mod agent;
mod agent_info;
mod alloc_exec;
mod alloc_fs;
mod alloc_logs;
mod alloc_ops;
mod alloc_status;
mod deployment;
mod eval;
mod event;
mod job;
mod job_dispatch;
mod job_plan;
mod namespace;
mod node;
mod operator;
mod output;
mod scheduler;
mod scheduler_config;
mod scheduler_workers;
mod server;
mod service;
mod snapshot;
mod status;
mod system;
mod template;
mod tls;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::api::{ApiClient, ApiError, RequestScope};

/// teamster: a cluster workload scheduler.
#[derive(Debug, Parser)]
#[command(name = "teamster", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run an agent: a server, a client, or both (`--dev`).
    Agent(agent::AgentArgs),
    /// What the agent at the address says of itself: its stats by section.
    AgentInfo(agent_info::AgentInfoArgs),
    /// Jobs: run, status, stop, inspect, validate.
    #[command(subcommand)]
    Job(job::JobCommand),
    /// Deployments: list, status, promote, fail, pause, resume.
    #[command(subcommand)]
    Deployment(deployment::DeploymentCommand),
    /// Client nodes: status, eligibility, drain.
    #[command(subcommand)]
    Node(node::NodeCommand),
    /// Servers: members of the server cluster.
    #[command(subcommand)]
    Server(server::ServerCommand),
    /// Operator commands: raft peers, snapshots, the scheduler.
    #[command(subcommand)]
    Operator(operator::OperatorCommand),
    /// The jobs, or the status of the job, allocation, evaluation or node an ID prefix names.
    Status(status::StatusArgs),
    /// Evaluations: list, status.
    #[command(subcommand)]
    Eval(eval::EvalCommand),
    /// Allocations: status, task logs, stop, restart, signal, exec.
    #[command(subcommand)]
    Alloc(eval::AllocCommand),
    /// The cluster's housekeeping: garbage collection.
    #[command(subcommand)]
    System(system::SystemCommand),
    /// The cluster's event stream.
    #[command(subcommand)]
    Event(event::EventCommand),
    /// Services registered by running allocations: list, info, delete.
    #[command(subcommand)]
    Service(service::ServiceCommand),
    /// Namespaces: apply, list, status, delete.
    #[command(subcommand)]
    Namespace(namespace::NamespaceCommand),
    /// TLS certificates: a CA, and server, client and CLI certificates signed by it.
    #[command(subcommand)]
    Tls(tls::TlsCommand),
    /// ACLs: bootstrap, policies and tokens.
    #[command(subcommand)]
    Acl(acl::AclCommand),
    /// A task's log collector, started by the client (not for people).
    #[command(hide = true)]
    Logmon(LogmonArgs),
}

/// `teamster logmon`: copy a task's output FIFOs into its rotated log files.
#[derive(Debug, Args)]
pub struct LogmonArgs {
    /// The allocation's `alloc/logs` directory.
    #[arg(long)]
    logs_dir: std::path::PathBuf,
    /// The task.
    #[arg(long)]
    task: String,
    /// Files kept per stream.
    #[arg(long)]
    max_files: u64,
    /// Bytes per file.
    #[arg(long)]
    max_file_bytes: u64,
}

/// Where and as whom a command reaches the HTTP API: the address, the request's namespace,
/// region and token, and the TLS files. Every API command has these (`alloc exec` only
/// these: its output is the command's).
#[derive(Debug, Clone, Args)]
pub struct ConnArgs {
    /// The HTTP API of any server.
    #[arg(
        long,
        env = "TEAMSTER_ADDR",
        default_value_t = default_address(),
        global = true
    )]
    pub address: String,
    /// The namespace of the request (`*` lists every namespace's objects); else
    /// `TEAMSTER_NAMESPACE`, else `NOMAD_NAMESPACE`, else the server's `default`.
    #[arg(long, env = "TEAMSTER_NAMESPACE", global = true)]
    pub namespace: Option<String>,
    /// The region to send the request to; else `TEAMSTER_REGION`, else `NOMAD_REGION`, else
    /// the agent's own.
    #[arg(long, env = "TEAMSTER_REGION", global = true)]
    pub region: Option<String>,
    /// The secret ID of an ACL token, sent as `X-Nomad-Token`; else `TEAMSTER_TOKEN`, else
    /// `NOMAD_TOKEN` (agents with ACLs on refuse what the token does not allow).
    #[arg(long, env = "TEAMSTER_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// The CA certificate (PEM) to trust for an `https://` address; else `TEAMSTER_CACERT`,
    /// else `NOMAD_CACERT`.
    #[arg(long, env = "TEAMSTER_CACERT", global = true, value_name = "FILE")]
    pub ca_cert: Option<std::path::PathBuf>,
    /// The client certificate (PEM) to present (agents with `verify_https_client`); else
    /// `TEAMSTER_CLIENT_CERT`, else `NOMAD_CLIENT_CERT`.
    #[arg(long, env = "TEAMSTER_CLIENT_CERT", global = true, value_name = "FILE")]
    pub client_cert: Option<std::path::PathBuf>,
    /// The client certificate's key (PEM); else `TEAMSTER_CLIENT_KEY`, else
    /// `NOMAD_CLIENT_KEY`.
    #[arg(long, env = "TEAMSTER_CLIENT_KEY", global = true, value_name = "FILE")]
    pub client_key: Option<std::path::PathBuf>,
    /// Do not check the agent's certificate (testing only); else `TEAMSTER_SKIP_VERIFY`,
    /// else `NOMAD_SKIP_VERIFY`.
    #[arg(long, global = true)]
    pub tls_skip_verify: bool,
}

impl ConnArgs {
    /// A client for `--address` with the request scope and TLS files.
    pub fn client(&self) -> anyhow::Result<ApiClient> {
        let tls = self.tls_files();
        let client = if tls.is_set() || self.address.starts_with("https://") {
            let region = self.scope().region.unwrap_or_else(|| "global".to_string());
            ApiClient::with_tls(&self.address, tls.client_config(&region)?)
        } else {
            ApiClient::new(&self.address)
        };
        Ok(client.with_scope(self.scope()))
    }

    /// The TLS files of the API client: the flags, else the environment (`TEAMSTER_*`
    /// through clap, then Nomad's `NOMAD_*`).
    pub fn tls_files(&self) -> crate::util::tls::ApiTlsFiles {
        let pick = |flag: &Option<std::path::PathBuf>, nomad: &str| {
            flag.clone().or_else(|| {
                std::env::var(nomad)
                    .ok()
                    .filter(|v| !v.trim().is_empty())
                    .map(std::path::PathBuf::from)
            })
        };
        let env_true = |name: &str| {
            std::env::var(name)
                .ok()
                .is_some_and(|v| matches!(v.trim(), "1" | "true" | "True" | "TRUE"))
        };
        crate::util::tls::ApiTlsFiles {
            ca_cert: pick(&self.ca_cert, "NOMAD_CACERT"),
            client_cert: pick(&self.client_cert, "NOMAD_CLIENT_CERT"),
            client_key: pick(&self.client_key, "NOMAD_CLIENT_KEY"),
            skip_verify: self.tls_skip_verify
                || env_true("TEAMSTER_SKIP_VERIFY")
                || env_true("NOMAD_SKIP_VERIFY"),
        }
    }

    /// The namespace, region and token of every request: the flags, else the environment
    /// (`TEAMSTER_*` through clap, then Nomad's `NOMAD_*`).
    pub fn scope(&self) -> RequestScope {
        let pick = |flag: &Option<String>, nomad: &str| {
            flag.clone()
                .or_else(|| std::env::var(nomad).ok())
                .filter(|v| !v.trim().is_empty())
        };
        RequestScope {
            namespace: pick(&self.namespace, "NOMAD_NAMESPACE"),
            region: pick(&self.region, "NOMAD_REGION"),
            token: pick(&self.token, "NOMAD_TOKEN"),
        }
    }
}

/// Flags shared by every command that talks to the HTTP API: the connection, and how the
/// answer is printed.
#[derive(Debug, Clone, Args)]
pub struct ApiArgs {
    /// Address, namespace, region, token and TLS.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// Print machine-readable JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// Render the value `--json` would print through this Go template (Nomad's `-t`), e.g.
    /// `-t '{{range .}}{{.ID}} {{.Status}}{{"\n"}}{{end}}'`.
    #[arg(short = 't', long = "template", global = true, value_name = "TEMPLATE")]
    pub template: Option<String>,
}

impl std::ops::Deref for ApiArgs {
    type Target = ConnArgs;

    fn deref(&self) -> &ConnArgs {
        &self.conn
    }
}

impl ApiArgs {
    /// A client for `--address`, once the output flags are known to be usable: `--json` and
    /// `-t` together, or a template that does not parse, are errors before any request.
    pub fn client(&self) -> anyhow::Result<ApiClient> {
        self.parsed_template()?;
        self.conn.client()
    }

    /// Whether the command prints its JSON value (as JSON or through `-t`) instead of tables.
    pub fn structured(&self) -> bool {
        self.json || self.template.is_some()
    }

    /// GET the list at `path` and print it as `--json`/`-t` ask, else as a table of
    /// `columns` (header, field of each item), or `empty` when there is nothing.
    pub async fn print_list(
        &self,
        path: &str,
        what: &str,
        columns: &[(&str, &str)],
        empty: Option<&str>,
    ) -> anyhow::Result<()> {
        use anyhow::Context;
        let all: Vec<serde_json::Value> = self
            .client()?
            .get(path)
            .await
            .with_context(|| format!("listing the {what}"))?;
        if self.structured() {
            return self.print(&all);
        }
        if let (true, Some(message)) = (all.is_empty(), empty) {
            println!("{message}");
            return Ok(());
        }
        let mut rows = vec![columns.iter().map(|(h, _)| h.to_string()).collect()];
        for item in &all {
            rows.push(
                columns
                    .iter()
                    .map(|(_, f)| output::text(&item[*f]))
                    .collect(),
            );
        }
        print!("{}", output::table(&rows));
        Ok(())
    }

    /// Print `value` as `--json` or `-t` asks.
    pub fn print(&self, value: &impl serde::Serialize) -> anyhow::Result<()> {
        match self.parsed_template()? {
            Some(t) => {
                let v = serde_json::to_value(value)?;
                println!("{}", t.render(&v)?);
            }
            None => println!("{}", serde_json::to_string_pretty(value)?),
        }
        Ok(())
    }

    fn parsed_template(&self) -> anyhow::Result<Option<template::Template>> {
        let Some(src) = &self.template else {
            return Ok(None);
        };
        if self.json {
            anyhow::bail!("Both json and template formatting are not allowed");
        }
        Ok(Some(template::Template::parse(src)?))
    }
}

/// The API address when neither `--address` nor `TEAMSTER_ADDR` gives one: Nomad's
/// `NOMAD_ADDR`, else the local agent.
fn default_address() -> String {
    std::env::var("NOMAD_ADDR")
        .ok()
        .filter(|a| !a.trim().is_empty())
        .unwrap_or_else(|| "http://127.0.0.1:4646".into())
}

/// Every long flag name of `cmd` and its subcommands.
fn long_flags(cmd: &clap::Command, into: &mut std::collections::BTreeSet<String>) {
    for arg in cmd.get_arguments() {
        for name in arg.get_long_and_visible_aliases().into_iter().flatten() {
            into.insert(name.to_string());
        }
    }
    for sub in cmd.get_subcommands() {
        long_flags(sub, into);
    }
}

/// Where the command of `alloc exec` starts in `args` (after its allocation argument): what
/// follows is the remote command's, not ours to rewrite.
fn exec_command_start(args: &[std::ffi::OsString]) -> Option<usize> {
    use clap::CommandFactory;
    let words: Vec<&str> = args.iter().map(|a| a.to_str().unwrap_or("")).collect();
    let exec_at = words
        .windows(2)
        .position(|w| w == ["alloc", "exec"])
        .map(|i| i + 2)?;
    let cli = Cli::command();
    let exec = cli
        .find_subcommand("alloc")
        .and_then(|a| a.find_subcommand("exec"))?;
    let takes_value: std::collections::BTreeSet<&str> = exec
        .get_arguments()
        .filter(|a| a.get_action().takes_values() && !a.is_require_equals_set())
        .filter_map(|a| a.get_long())
        .collect();
    let mut i = exec_at;
    while let Some(word) = words.get(i) {
        if *word == "--" {
            return None;
        }
        match word.trim_start_matches('-') {
            _ if !word.starts_with('-') => return Some(i + 1),
            name if takes_value.contains(name) => i += 2,
            _ => i += 1,
        }
    }
    None
}

/// `args` with Nomad's single-dash long flags (`-purge`, `-address=URL`, `-json`) spelled
/// as clap's (`--purge`, …) wherever the name is one of ours; anything else, everything
/// after `--` and the command of `alloc exec` are left as they are (`-` for stdin, `-5`,
/// values).
pub fn nomad_flags(args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    use clap::CommandFactory;
    let mut known = std::collections::BTreeSet::new();
    long_flags(&Cli::command(), &mut known);
    let literal_from = exec_command_start(&args).unwrap_or(usize::MAX);
    let mut rest_literal = false;
    args.into_iter()
        .enumerate()
        .map(|(i, arg)| {
            if i == 0 || rest_literal || i >= literal_from {
                return arg;
            }
            let Some(text) = arg.to_str() else {
                return arg;
            };
            if text == "--" {
                rest_literal = true;
                return arg;
            }
            let Some(flag) = text.strip_prefix('-').filter(|f| !f.starts_with('-')) else {
                return arg;
            };
            let name = flag.split_once('=').map_or(flag, |(n, _)| n);
            if name.len() > 1 && known.contains(name) {
                format!("-{text}").into()
            } else {
                arg
            }
        })
        .collect()
}

/// Parse the command line and run one command.
pub fn main() -> ExitCode {
    let cli = Cli::parse_from(nomad_flags(std::env::args_os().collect()));
    match cli.command {
        Command::Agent(args) => agent::run(args),
        Command::AgentInfo(args) => run_api(|| agent_info::run(args)),
        Command::Job(cmd) => run_api_code(|| job::run(cmd)),
        Command::Server(cmd) => run_api(|| server::run(cmd)),
        Command::Operator(cmd) => run_api(|| operator::run(cmd)),
        Command::Status(args) => run_api_code(|| status::run(args)),
        Command::Eval(cmd) => run_api(|| eval::run_eval(cmd)),
        Command::Alloc(cmd) => run_api_code(|| eval::run_alloc(cmd)),
        Command::Deployment(cmd) => run_api_code(|| deployment::run(cmd)),
        Command::Node(cmd) => run_api(|| node::run(cmd)),
        Command::System(cmd) => run_api(|| system::run(cmd)),
        Command::Event(cmd) => run_api(|| event::run(cmd)),
        Command::Service(cmd) => run_api(|| service::run(cmd)),
        Command::Namespace(cmd) => run_api(|| namespace::run(cmd)),
        Command::Tls(cmd) => match tls::run(cmd) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("Error: {e:#}");
                ExitCode::FAILURE
            }
        },
        Command::Acl(cmd) => run_api(|| acl::run(cmd)),
        Command::Logmon(args) => {
            let spec = crate::client::logmon::CollectorSpec {
                logs_dir: args.logs_dir,
                task: args.task,
                max_files: args.max_files,
                max_file_bytes: args.max_file_bytes,
            };
            match crate::client::logmon::run_collector(&spec) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("Error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// Run an API command on a small runtime and turn its error into one line and exit code 1.
fn run_api<F, Fut>(f: F) -> ExitCode
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    run_api_code(|| async { f().await.map(|()| ExitCode::SUCCESS) })
}

/// Like [`run_api`], for commands that choose their own exit code.
fn run_api_code<F, Fut>(f: F) -> ExitCode
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<ExitCode>>,
{
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("Error: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(f()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("Error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::Cli;

    /// clap checks every command's definition (unique names, no clash with `--version` or
    /// `--help`, valid defaults) only when it is built; a clash is a panic at run time.
    #[test]
    fn every_command_definition_is_valid() {
        Cli::command().debug_assert();
    }

    fn rewritten(args: &[&str]) -> Vec<String> {
        super::nomad_flags(args.iter().map(Into::into).collect())
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn nomads_single_dash_long_flags_are_accepted() {
        assert_eq!(
            rewritten(&[
                "teamster",
                "job",
                "stop",
                "-purge",
                "-address=http://h:4646",
                "-json",
                "web"
            ]),
            [
                "teamster",
                "job",
                "stop",
                "--purge",
                "--address=http://h:4646",
                "--json",
                "web"
            ]
        );
        assert_eq!(
            rewritten(&[
                "teamster",
                "job",
                "run",
                "-check-index",
                "7",
                "-var",
                "a=1",
                "-"
            ]),
            [
                "teamster",
                "job",
                "run",
                "--check-index",
                "7",
                "--var",
                "a=1",
                "-"
            ]
        );
        // Short flags, unknown names, numbers, values after `--` and `-` stay as written.
        assert_eq!(
            rewritten(&["teamster", "job", "scale", "-v", "-nope", "-5", "--", "-json"]),
            ["teamster", "job", "scale", "-v", "-nope", "-5", "--", "-json"]
        );
        // The command of `alloc exec` is the remote command's, whatever it looks like.
        assert_eq!(
            rewritten(&[
                "teamster",
                "alloc",
                "exec",
                "-task",
                "web",
                "-address",
                "http://h:1",
                "abc",
                "ls",
                "-json",
                "-task"
            ]),
            [
                "teamster",
                "alloc",
                "exec",
                "--task",
                "web",
                "--address",
                "http://h:1",
                "abc",
                "ls",
                "-json",
                "-task"
            ]
        );
        // And clap takes the result.
        let cli = Cli::try_parse_from(super::nomad_flags(
            [
                "teamster",
                "job",
                "stop",
                "-purge",
                "-address",
                "http://h:1",
                "web",
            ]
            .iter()
            .map(Into::into)
            .collect(),
        ));
        assert!(cli.is_ok(), "{cli:?}");
    }
}
