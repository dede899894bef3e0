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
mod alloc;
mod alloc_exec;
mod alloc_fs;
mod alloc_logs;
mod alloc_ops;
mod alloc_status;
mod args;
mod autopilot;
mod deployment;
mod eval;
mod event;
mod job;
mod job_action;
mod job_dispatch;
mod job_file;
pub mod job_init;
mod job_plan;
mod monitor;
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

mod tls;
mod var;
mod volume;

use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

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
    /// Run a task's action (its `action` block) in one of the job's allocations.
    Action(job_action::ActionArgs),
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
    Alloc(alloc::AllocCommand),
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
    /// Variables: list, get, put, purge.
    #[command(subcommand)]
    Var(var::VarCommand),
    /// Volumes: status (the clients' host volumes; teamster has no CSI volumes).
    #[command(subcommand)]
    Volume(VolumeCommand),
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
    /// Where new limits are read from on SIGHUP.
    #[arg(long)]
    limits_file: Option<std::path::PathBuf>,
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
    if !matches!(cli.command, Command::Agent(_) | Command::Logmon(_)) {
        quiet_on_closed_output();
    }
    match cli.command {
        Command::Agent(args) => agent::run(args),
        Command::AgentInfo(args) => run_api(|| agent_info::run(args)),
        Command::Job(cmd) => run_api_code(|| job::run(cmd)),
        Command::Action(args) => run_api_code(|| job_action::run(args)),
        Command::Server(cmd) => run_api(|| server::run(cmd)),
        Command::Operator(cmd) => run_api(|| operator::run(cmd)),
        Command::Status(args) => run_api_code(|| async {
            match status::run(args).await? {
                status::Outcome::Done(code) => Ok(code),
                status::Outcome::Show(argv) => show_status(argv).await,
            }
        }),
        Command::Eval(cmd) => run_api(|| eval::run_eval(cmd)),
        Command::Alloc(cmd) => run_api_code(|| alloc::run_alloc(cmd)),
        Command::Deployment(cmd) => run_api_code(|| deployment::run(cmd)),
        Command::Node(cmd) => run_api(|| node::run(cmd)),
        Command::System(cmd) => run_api(|| system::run(cmd)),
        Command::Event(cmd) => run_api(|| event::run(cmd)),
        Command::Service(cmd) => run_api(|| service::run(cmd)),
        Command::Namespace(cmd) => run_api(|| namespace::run(cmd)),
        Command::Var(cmd) => run_api(|| var::run(cmd)),
        Command::Volume(VolumeCommand::Status(a)) => run_api(|| volume::status(a)),
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
                limits_file: args.limits_file,
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

/// A command whose reader went away (`teamster job status web | head -1`) ends quietly with
/// exit code 0, as Unix tools end on a closed pipe, instead of panicking on its next line:
/// Rust's `println!` panics when stdout is a closed pipe (the process ignores `SIGPIPE`,
/// which the agent needs for its sockets). Any other panic is reported as before.
fn quiet_on_closed_output() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        // std's words: "failed printing to stdout: Broken pipe (os error 32)".
        let closed = message.starts_with("failed printing to std")
            && message.contains(&format!("(os error {})", libc::EPIPE));
        if closed {
            std::process::exit(0);
        }
        report(info);
    }));
}

/// Run the `<job|alloc|eval|node> status [id]` command `teamster status` chose.
async fn show_status(argv: Vec<String>) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    let cli = Cli::try_parse_from(argv).context("building the status command")?;
    match cli.command {
        Command::Job(c) => job::run(c).await,
        Command::Alloc(c) => alloc::run_alloc(c).await,
        Command::Eval(c) => eval::run_eval(c).await.map(|()| ExitCode::SUCCESS),
        Command::Node(c) => node::run(c).await.map(|()| ExitCode::SUCCESS),
        other => anyhow::bail!("no status command for {other:?}"),
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

/// `volume …`.
#[derive(Debug, Subcommand)]
pub enum VolumeCommand {
    /// The volumes jobs can ask for: host volumes by node, and CSI volumes (none).
    Status(volume::StatusArgs),
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

    // Command lines of the leaf commands, parsed whole.

    #[test]
    fn a_line_count_without_tail_is_refused() {
        let parse = |args: &[&str]| Cli::try_parse_from(args.iter().copied());
        assert!(parse(&["teamster", "alloc", "logs", "-n", "5", "abc"]).is_err());
        assert!(parse(&["teamster", "alloc", "logs", "--tail", "-n", "5", "abc"]).is_ok());
        assert!(parse(&["teamster", "alloc", "logs", "--tail", "abc"]).is_ok());
        assert!(parse(&["teamster", "alloc", "logs", "--tail", "-c", "64", "abc"]).is_ok());
        assert!(parse(&["teamster", "alloc", "logs", "-c", "64", "abc"]).is_err());
    }

    /// Whether a command line parses (Nomad's single-dash flags rewritten first).
    fn parses(args: &[&str]) -> bool {
        Cli::try_parse_from(super::nomad_flags(args.iter().map(Into::into).collect())).is_ok()
    }

    /// `nomad agent -dev -node NAME` (python-nomad's CI starts its agent so): the agent's,
    /// and so its node's, name.
    #[test]
    fn nomads_agent_node_flag_names_the_agent() {
        let args = [
            "teamster",
            "agent",
            "--dev",
            "-node",
            "pynomad1",
            "-acl-enabled",
        ];
        let cli = Cli::try_parse_from(super::nomad_flags(args.iter().map(Into::into).collect()))
            .unwrap_or_else(|e| panic!("{e}"));
        let super::Command::Agent(agent) = cli.command else {
            panic!("not the agent command");
        };
        let (config, _) = agent.load().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.name, "pynomad1");
        assert!(config.acl.enabled);
    }

    #[test]
    fn nomads_alloc_command_forms_parse() {
        assert!(parses(&["teamster", "alloc", "stop", "-detach", "abc"]));
        assert!(parses(&["teamster", "alloc", "restart", "abc"]));
        assert!(parses(&["teamster", "alloc", "restart", "abc", "web"]));
        assert!(parses(&[
            "teamster", "alloc", "restart", "-task", "web", "abc"
        ]));
        assert!(parses(&[
            "teamster",
            "alloc",
            "restart",
            "-all-tasks",
            "abc"
        ]));
        assert!(!parses(&[
            "teamster",
            "alloc",
            "restart",
            "-all-tasks",
            "abc",
            "web"
        ]));
        assert!(parses(&[
            "teamster", "alloc", "signal", "-s", "SIGUSR1", "abc", "web"
        ]));
        assert!(parses(&["teamster", "alloc", "signal", "abc"]));
        assert!(!parses(&["teamster", "alloc", "signal"]));
    }

    fn parsed(args: &[&str]) -> Option<super::alloc_exec::ExecArgs> {
        let cli =
            Cli::try_parse_from(super::nomad_flags(args.iter().map(Into::into).collect())).ok()?;
        match cli.command {
            super::Command::Alloc(super::alloc::AllocCommand::Exec(a)) => Some(a),
            _ => None,
        }
    }

    #[test]
    fn everything_after_the_allocation_is_the_command() {
        let a = parsed(&["teamster", "alloc", "exec", "abc", "sh", "-c", "exit 3"]).unwrap();
        assert_eq!((a.id.as_str(), a.stdin, a.tty), ("abc", true, None));
        assert_eq!(a.command, ["sh", "-c", "exit 3"]);
        let a = parsed(&[
            "teamster", "alloc", "exec", "-i=false", "-task", "web", "abc", "ls", "-json",
        ])
        .unwrap();
        assert_eq!((a.stdin, a.task.as_deref()), (false, Some("web")));
        assert_eq!(a.command, ["ls", "-json"]);
        let a = parsed(&["teamster", "alloc", "exec", "-i", "-t", "abc", "cat"]).unwrap();
        assert!(a.stdin && a.tty == Some(true));
        let a = parsed(&["teamster", "alloc", "exec", "-t=false", "abc", "cat"]).unwrap();
        assert_eq!(a.tty, Some(false));
        assert!(
            parsed(&["teamster", "alloc", "exec", "abc"]).is_none(),
            "a command is needed"
        );
    }

    #[test]
    fn the_path_carries_topics_and_index() {
        let cli = Cli::try_parse_from([
            "teamster", "event", "stream", "--topic", "Job:web", "--topic", "Node", "--index", "12",
        ])
        .unwrap();
        let super::Command::Event(super::event::EventCommand::Stream(a)) = cli.command else {
            panic!("not an event stream");
        };
        assert_eq!(
            super::event::stream_path(&a),
            "/v1/event/stream?index=12&topic=Job%3Aweb&topic=Node"
        );
    }
}
