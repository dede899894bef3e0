//! `teamster agent`: run a server, a client, or both, until SIGINT or SIGTERM.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use tracing_subscriber::EnvFilter;

use crate::agent::config::AgentConfig;
use crate::agent::Agent;

/// `agent` flags. Every flag overrides the config file; most can also come from a
/// `TEAMSTER_*` environment variable.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The agent's TOML config file.
    #[arg(long, env = "TEAMSTER_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Dev mode: one server and one client in this process, bootstrap 1, data in a temporary
    /// directory, listening on 127.0.0.1.
    #[arg(long)]
    dev: bool,
    /// This agent's name (its client's node name); Nomad's `-node`.
    #[arg(long, visible_alias = "node", env = "TEAMSTER_NAME")]
    name: Option<String>,
    /// The data directory.
    #[arg(long, env = "TEAMSTER_DATA_DIR", value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// The address the listeners bind.
    #[arg(long = "bind", env = "TEAMSTER_BIND_ADDR", value_name = "IP")]
    bind_addr: Option<IpAddr>,
    /// The address other agents reach this one at.
    #[arg(long = "advertise", env = "TEAMSTER_ADVERTISE_ADDR", value_name = "IP")]
    advertise_addr: Option<IpAddr>,
    /// The HTTP API port.
    #[arg(long, env = "TEAMSTER_HTTP_PORT")]
    http_port: Option<u16>,
    /// The RPC port.
    #[arg(long, env = "TEAMSTER_RPC_PORT")]
    rpc_port: Option<u16>,
    /// Enable the server role.
    #[arg(long)]
    server: bool,
    /// Enable the client role.
    #[arg(long)]
    client: bool,
    /// Servers to wait for before forming the cluster.
    #[arg(long, env = "TEAMSTER_BOOTSTRAP_EXPECT")]
    bootstrap_expect: Option<usize>,
    /// A server RPC address to join (repeatable).
    #[arg(long, value_name = "ADDR")]
    join: Vec<String>,
    /// A server RPC address for the client to register with (repeatable).
    #[arg(long = "servers", value_name = "ADDR")]
    servers: Vec<String>,
    /// Scheduler workers on this server.
    #[arg(long, env = "TEAMSTER_NUM_SCHEDULERS")]
    num_schedulers: Option<usize>,
    /// Log level or tracing filter.
    #[arg(long, env = "TEAMSTER_LOG_LEVEL")]
    log_level: Option<String>,
    /// Log lines as JSON.
    #[arg(long)]
    log_json: bool,
    /// Check ACL tokens on every route and RPC (`acl.enabled`).
    #[arg(long = "acl-enabled")]
    acl_enabled: bool,
}

impl AgentArgs {
    /// The configuration these flags describe: dev or file defaults, then the flags.
    /// Returns the config and where it came from (for messages).
    pub fn load(&self) -> Result<(AgentConfig, String), crate::agent::config::ConfigError> {
        let (mut c, origin) = match (&self.config, self.dev) {
            (Some(path), dev) => {
                let mut c = AgentConfig::from_file(path)?;
                if dev {
                    let d = AgentConfig::dev();
                    c.server.enabled = true;
                    c.client.enabled = true;
                    c.server.bootstrap_expect = c.server.bootstrap_expect.max(1);
                    c.bind_addr = d.bind_addr;
                }
                (c, format!("config file {}", path.display()))
            }
            (None, true) => (AgentConfig::dev(), "dev mode".to_string()),
            (None, false) => (AgentConfig::default(), "command line".to_string()),
        };
        if let Some(v) = &self.name {
            c.name = v.clone();
        }
        if let Some(v) = &self.data_dir {
            c.data_dir = Some(v.clone());
        }
        if let Some(v) = self.bind_addr {
            c.bind_addr = v;
        }
        if let Some(v) = self.advertise_addr {
            c.advertise_addr = Some(v);
        }
        if let Some(v) = self.http_port {
            c.ports.http = v;
        }
        if let Some(v) = self.rpc_port {
            c.ports.rpc = v;
        }
        if self.server {
            c.server.enabled = true;
        }
        if self.client {
            c.client.enabled = true;
        }
        if let Some(v) = self.bootstrap_expect {
            c.server.bootstrap_expect = v;
        }
        if !self.join.is_empty() {
            c.server.join = self.join.clone();
        }
        if !self.servers.is_empty() {
            c.client.servers = self.servers.clone();
        }
        if let Some(v) = self.num_schedulers {
            c.server.num_schedulers = v;
        }
        if let Some(v) = &self.log_level {
            c.log_level = v.clone();
        }
        if self.log_json {
            c.log_json = true;
        }
        if self.acl_enabled {
            c.acl.enabled = true;
        }
        Ok((c, origin))
    }
}

/// Run the agent until a signal stops it.
pub fn run(args: AgentArgs) -> ExitCode {
    let (config, origin) = match args.load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("Error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let dev = args.dev;
    let check = if dev && config.data_dir.is_none() {
        let mut probe = config.clone();
        probe.data_dir = Some(PathBuf::from("(temporary)"));
        probe.validate(&origin)
    } else {
        config.validate(&origin)
    };
    if let Err(e) = check {
        eprintln!("Error: {e}");
        return ExitCode::FAILURE;
    }
    init_tracing(&config);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("teamster")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("Error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let agent = match Agent::start(config, dev).await {
            Ok(a) => a,
            Err(e) => {
                tracing::error!(error = %e, "agent failed to start");
                eprintln!("Error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let mut agent = agent;
        // SIGHUP re-reads the config file (and flags); the agent applies what can change at
        // run time (the scheduler workers).
        agent.set_reloader(Box::new(move || {
            args.load().map(|(c, _)| c).map_err(|e| e.to_string())
        }));
        if let Err(e) = agent.run_until_signalled().await {
            eprintln!("Error: {e}");
            return ExitCode::FAILURE;
        }
        ExitCode::SUCCESS
    })
}

fn init_tracing(config: &AgentConfig) {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| {
            let level = &config.log_level;
            EnvFilter::try_new(format!(
                "{level},sled=warn,openraft=warn,openraft::raft=warn"
            ))
            .unwrap_or_else(|_| EnvFilter::new("info"))
        });
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if config.log_json {
        builder.json().init();
    } else {
        builder.init();
    }
}
