//! The agent: configuration, dev mode, and the start and stop of the server and client roles.
//!
//! [`Agent::start`] binds the listeners first (so port 0 works in tests and the advertised
//! addresses are the real ones), then starts the server role, the HTTP API and the client
//! role. [`Agent::shutdown`] stops them in reverse order and waits for every task.
//!
//! With a `[tls]` section the agent loads its certificates before binding anything (a bad
//! file stops the start with the file named), serves HTTPS and/or mutual-TLS RPC, and reads
//! the files again on SIGHUP: new connections use the new ones; a bad file keeps the old
//! ones and logs an error.

pub mod config;
pub mod telemetry;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::client::{Client, ClientError};
use crate::http::{AgentInfo, ServerHandles};
use crate::server::{Server, ServerError, ServerSetup};
use crate::util::net::parse_peer_addr;
use crate::util::RngSource;
use config::AgentConfig;

/// Why the agent could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// Where.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The data directory could not be prepared.
    #[error("data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The server role failed to start.
    #[error("server: {0}")]
    Server(#[from] ServerError),
    /// The client role failed to start.
    #[error("client: {0}")]
    Client(#[from] ClientError),
    /// Waiting for signals failed.
    #[error("cannot install signal handlers: {0}")]
    Signals(std::io::Error),
    /// Raft stopped on a fatal error (a storage write failed: disk full or failing); the
    /// agent stopped and exits non-zero so its supervisor restarts it.
    #[error("raft stopped: {0}; restart the agent once its data directory can be written")]
    RaftFailed(String),
    /// The TLS files could not be loaded.
    #[error("tls: {0}")]
    Tls(#[from] crate::util::tls::TlsError),
}

/// Re-reads the agent configuration on SIGHUP.
pub type Reloader = Box<dyn Fn() -> Result<AgentConfig, String> + Send + Sync>;

/// A running agent.
pub struct Agent {
    config: AgentConfig,
    http_addr: SocketAddr,
    shutdown: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    server: Option<Server>,
    reloader: Option<Reloader>,
    client: Option<Client>,
    tls: Option<crate::util::tls::AgentTls>,
    _dev_dir: Option<tempfile::TempDir>,
}

impl Agent {
    /// Start an agent from a validated configuration. In dev mode without a data dir the
    /// agent keeps its data in a temporary directory removed at shutdown.
    pub async fn start(mut config: AgentConfig, dev: bool) -> Result<Agent, AgentError> {
        let dev_dir = if dev && config.data_dir.is_none() {
            let d = tempfile::Builder::new()
                .prefix("teamster-dev-")
                .tempdir()
                .map_err(|source| AgentError::DataDir {
                    path: std::env::temp_dir(),
                    source,
                })?;
            config.data_dir = Some(d.path().to_path_buf());
            Some(d)
        } else {
            None
        };
        let tls = match config.tls.settings(crate::http::REGION) {
            Some(settings) => Some(crate::util::tls::AgentTls::load(settings)?),
            None => None,
        };
        let rpc_tls = tls.clone().filter(|_| config.tls.rpc);
        let http_tls = tls.clone().filter(|_| config.tls.http);
        config.client.rpc_tls = rpc_tls.clone();
        if let Some(t) = &http_tls {
            crate::util::tls::set_outgoing_http(t.clone());
        }
        let http_bind = config.http_bind();
        let http_listener =
            TcpListener::bind(http_bind)
                .await
                .map_err(|source| AgentError::Bind {
                    what: "http",
                    addr: http_bind,
                    source,
                })?;
        let http_addr = http_listener
            .local_addr()
            .map_err(|source| AgentError::Bind {
                what: "http",
                addr: http_bind,
                source,
            })?;
        let data_dir = config
            .data_dir
            .clone()
            .expect("validated configs and dev mode have a data dir");
        std::fs::create_dir_all(&data_dir).map_err(|source| AgentError::DataDir {
            path: data_dir.clone(),
            source,
        })?;
        let clock = crate::util::system_clock();
        // The one root of randomness in the process; every component draws from a child.
        let rng = RngSource::from_entropy();
        let server = if config.server.enabled {
            let setup = ServerSetup {
                name: config.name.clone(),
                rpc_bind: config.rpc_bind(),
                data_dir: data_dir.clone(),
                advertise: config.advertise_ip(),
                http_addr,
                clock: clock.clone(),
                rng: rng.child(),
                rpc_tls,
                rpc_limits: config.limits.rpc(),
                acl_enabled: config.acl.enabled,
            };
            Some(Server::start(&config.server, setup).await?)
        } else {
            None
        };
        let handles = server.as_ref().map(|s| ServerHandles {
            node: s.node().clone(),
            leadership: s.leadership().clone(),
            workers: s.workers().clone(),
            endpoints: s.endpoints().clone(),
        });
        let shutdown = CancellationToken::new();
        let info = AgentInfo {
            name: config.name.clone(),
            datacenter: config.client.datacenter.clone(),
            data_dir: data_dir.clone(),
            client_enabled: config.client.enabled,
            rpc_hold_timeout: config.server.rpc_hold_timeout,
            config: serde_json::to_value(&config).unwrap_or(serde_json::Value::Null),
            acl: config.acl.clone(),
            nomad_metrics: crate::http::metrics_nomad::NomadMetrics {
                enabled: config.telemetry.nomad_names,
                host: if config.telemetry.disable_hostname {
                    String::new()
                } else {
                    telemetry::hostname()
                },
                publish_allocation_metrics: config.telemetry.publish_allocation_metrics,
                publish_node_metrics: config.telemetry.publish_node_metrics,
            },
        };
        let http = crate::http::HttpContext::new(
            info,
            handles,
            {
                telemetry::configure(&config.telemetry);
                telemetry::metrics_handle()
            },
            clock.clone(),
            rng.child(),
        );
        let router = crate::http::router(http.clone());
        let token = shutdown.clone();
        let http_limits = config.limits.http();
        let http_task = match http_tls {
            None => tokio::spawn(crate::http::serve::serve(
                http_listener,
                router,
                http_limits,
                token,
            )),
            Some(t) => {
                let listener = crate::http::tls::TlsListener::new(
                    http_listener,
                    t,
                    http_limits.handshake_timeout,
                )
                .map_err(|source| AgentError::Bind {
                    what: "https",
                    addr: http_bind,
                    source,
                })?;
                tokio::spawn(crate::http::serve::serve(
                    listener,
                    router,
                    http_limits,
                    token,
                ))
            }
        };
        let client = if config.client.enabled {
            let mut servers: Vec<String> = config
                .client
                .servers
                .iter()
                .filter_map(|a| parse_peer_addr(a).ok())
                .map(|(host, port)| format!("{host}:{port}"))
                .collect();
            if let Some(s) = &server {
                if servers.is_empty() {
                    servers.push(s.node().addr().rpc_addr.clone());
                }
            }
            let advertised_http = SocketAddr::new(config.advertise_ip(), http_addr.port());
            Some(
                Client::start(
                    &config.client,
                    &config.name,
                    &data_dir,
                    advertised_http.to_string(),
                    servers,
                    clock,
                    rng.child(),
                )
                .await?,
            )
        } else {
            None
        };
        if let Some(c) = &client {
            http.set_client(c.handle());
        }
        info!(
            name = %config.name,
            http = %http_addr,
            https = config.tls.http,
            rpc_tls = config.tls.rpc,
            "agent started"
        );
        if config.acl.enabled
            && config.server.enabled
            && !(config.tls.rpc && config.tls.verify_server_hostname)
        {
            // As Nomad's security model: without certificates naming the servers, a peer on
            // the RPC port can claim to be one, and raft traffic and the servers' own calls
            // (plans, evaluations) are taken on that claim.
            tracing::warn!(
                "ACLs are on but the RPC port does not verify server certificates \
                 (tls.rpc and tls.verify_server_hostname): anyone who can reach it can pose \
                 as a server, send raft messages and submit plans; enable mutual TLS in \
                 production"
            );
        }
        Ok(Agent {
            config,
            http_addr,
            shutdown,
            tasks: vec![http_task],
            server,
            reloader: None,
            client,
            tls,
            _dev_dir: dev_dir,
        })
    }

    /// The address the HTTP API listens on.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// The server role, when this agent runs one.
    pub fn server(&self) -> Option<&Server> {
        self.server.as_ref()
    }

    /// The client role, when this agent runs one.
    pub fn client(&self) -> Option<&Client> {
        self.client.as_ref()
    }

    /// The configuration the agent runs with.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// Run until SIGINT or SIGTERM, then shut down cleanly.
    pub async fn run_until_signalled(self) -> Result<(), AgentError> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).map_err(AgentError::Signals)?;
        let mut int = signal(SignalKind::interrupt()).map_err(AgentError::Signals)?;
        let mut hup = signal(SignalKind::hangup()).map_err(AgentError::Signals)?;
        let leave = loop {
            tokio::select! {
                _ = term.recv() => {
                    info!("SIGTERM received, shutting down");
                    break self.config.leave_on_terminate;
                }
                _ = int.recv() => {
                    info!("SIGINT received, shutting down");
                    break self.config.leave_on_interrupt;
                }
                _ = hup.recv() => self.reload(),
                why = raft_fatal(self.server.as_ref()) => {
                    tracing::error!(
                        error = %why,
                        "raft stopped on a fatal error; the agent stops and exits non-zero"
                    );
                    // In-flight requests got their error; let their answers go out.
                    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                    self.shutdown().await;
                    return Err(AgentError::RaftFailed(why));
                }
            }
        };
        self.stop_gracefully(leave).await;
        Ok(())
    }

    /// Stop as on a signal: a leading server first hands leadership over and, with `leave`,
    /// the server leaves the raft configuration (while the HTTP API still forwards what
    /// arrives); then everything stops ([`Agent::shutdown`]).
    pub async fn stop_gracefully(self, leave: bool) {
        if let Some(server) = &self.server {
            server.prepare_stop(leave).await;
        }
        self.shutdown().await;
    }

    /// Set how SIGHUP re-reads the configuration.
    pub fn set_reloader(&mut self, reloader: Reloader) {
        self.reloader = Some(reloader);
    }

    /// Re-read the configuration and apply what can change at run time: the TLS
    /// certificates (the files named at start, read again) and the scheduler workers'
    /// `num_schedulers` and `enabled_schedulers`. A bad file changes nothing of its part.
    pub fn reload(&self) {
        if let Some(tls) = &self.tls {
            match tls.reload() {
                Ok(()) => info!("tls certificates reloaded; new connections use them"),
                Err(e) => tracing::error!(
                    error = %e,
                    "tls reload failed; keeping the certificates in use"
                ),
            }
        }
        let Some(reloader) = &self.reloader else {
            info!("SIGHUP received; no configuration file to reload");
            return;
        };
        let config = match reloader() {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "config reload failed; nothing changed");
                return;
            }
        };
        if let Some(server) = &self.server {
            let wanted = crate::server::worker::pool::PoolConfig {
                num_schedulers: config.server.num_schedulers,
                enabled_schedulers: config.server.enabled_schedulers.clone(),
            };
            match server.workers().set_config(wanted) {
                Ok(c) => info!(
                    num_schedulers = c.num_schedulers,
                    enabled_schedulers = ?c.enabled_schedulers,
                    "config reloaded: scheduler workers applied"
                ),
                Err(e) => tracing::error!(error = %e, "config reload refused; nothing changed"),
            }
        }
    }

    /// Stop every role and wait for their tasks.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        for t in self.tasks {
            let _ = t.await;
        }
        if let Some(client) = self.client {
            if self._dev_dir.is_some() {
                // The data dir is about to be removed: leave no task behind.
                client.shutdown_and_stop_tasks().await;
            } else {
                client.shutdown().await;
            }
        }
        if let Some(server) = self.server {
            server.shutdown().await;
        }
        info!("agent stopped");
    }
}

/// Resolves when the server's raft stops on a fatal error (never without a server).
async fn raft_fatal(server: Option<&Server>) -> String {
    match server {
        Some(server) => server.node().wait_fatal().await,
        None => std::future::pending().await,
    }
}
