//! Tests of the whole server role, and their fixture: a lone server, one raft member on
//! loopback with its data in a temporary directory, no scheduler workers (tests drive
//! evaluations by hand), leadership established before it is handed out. Real openraft, real
//! sled, real TCP. Tests of one part that need the whole server live here, above every part.

mod heartbeat;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use super::config::{RaftTiming, ServerConfig};
use super::{Server, ServerSetup};
use crate::util::RngSource;

/// A running lone server and the directory that holds its data.
pub struct LoneServer {
    /// The server.
    pub server: Server,
    // Its data directory, removed when dropped.
    _dir: tempfile::TempDir,
}

impl LoneServer {
    /// Start one with the default lone configuration.
    pub async fn start() -> LoneServer {
        LoneServer::start_with(|_| {}).await
    }

    /// Start one after `tune` adjusted its configuration.
    pub async fn start_with(tune: impl FnOnce(&mut ServerConfig)) -> LoneServer {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mut config = ServerConfig {
            enabled: true,
            bootstrap_expect: 1,
            num_schedulers: 0,
            raft: RaftTiming::for_tests(),
            ..ServerConfig::default()
        };
        tune(&mut config);
        let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let setup = ServerSetup {
            name: "lone".into(),
            rpc_bind: SocketAddr::new(loopback, 0),
            data_dir: dir.path().to_path_buf(),
            advertise: loopback,
            http_addr: SocketAddr::new(loopback, 0),
            clock: crate::util::system_clock(),
            rng: RngSource::seeded(7),
            rpc_tls: None,
            rpc_limits: Default::default(),
            acl_enabled: false,
        };
        let server = Server::start(&config, setup)
            .await
            .expect("the lone server starts");
        let mut rx = server.leadership().subscribe();
        tokio::time::timeout(Duration::from_secs(20), rx.wait_for(|e| *e))
            .await
            .expect("leadership within 20 s")
            .expect("the leadership monitor runs");
        LoneServer { server, _dir: dir }
    }

    /// Stop the server.
    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }
}
