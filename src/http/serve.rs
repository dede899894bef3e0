//! The HTTP listener's accept loop, with the bounds of the agent's `[limits]` block: at most
//! `http_max_conns_per_client` connections per client address (a new one over it is
//! answered `429 Too Many Requests` and closed, as Nomad answers it), and
//! `http_header_read_timeout` to send a request's headers, which is also how long a
//! kept-alive connection may wait for its next request. A client that opens connections
//! and sends half a request on each holds nothing for long.
//!
//! Connections are served by hyper's HTTP/1 connection with upgrades (the exec websocket);
//! on shutdown each finishes the request it is serving, for at most [`DRAIN`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::Listener;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::util::conn_limit::PerClient;

/// How long connections may take to finish their requests once the agent stops.
pub const DRAIN: Duration = Duration::from_secs(5);

/// The HTTP port's bounds (from the agent's `[limits]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Connections one client address may hold (0: no limit).
    pub max_conns_per_client: usize,
    /// The TLS handshake of an HTTPS connection.
    pub handshake_timeout: Duration,
    /// Reading a request's headers, and a kept-alive connection's wait for the next one.
    pub header_read_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_conns_per_client: 100,
            handshake_timeout: Duration::from_secs(5),
            header_read_timeout: Duration::from_secs(30),
        }
    }
}

/// What Nomad sends a connection over `http_max_conns_per_client`.
const TOO_MANY: &[u8] =
    b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// Serves `router` on `listener` until `shutdown`, within `limits`.
pub async fn serve<L>(
    mut listener: L,
    router: Router,
    limits: HttpLimits,
    shutdown: CancellationToken,
) where
    L: Listener<Addr = SocketAddr>,
{
    let per_client = Arc::new(PerClient::default());
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let (mut io, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let Some(slot) = per_client.take(peer.ip(), limits.max_conns_per_client) else {
            metrics::counter!("teamster_http_connections_refused_total", "reason" => "per_client")
                .increment(1);
            tracing::debug!(%peer, "http connection over http_max_conns_per_client: 429");
            connections.spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(1), async {
                    let _ = io.write_all(TOO_MANY).await;
                    let _ = io.shutdown().await;
                })
                .await;
            });
            continue;
        };
        let service = TowerToHyperService::new(router.clone());
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let _slot = slot;
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout);
            let conn = builder
                .serve_connection(TokioIo::new(io), service)
                .with_upgrades();
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(%peer, error = %e, "http connection ended");
                    }
                }
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(DRAIN, conn).await;
                }
            }
        });
    }
    let _ = tokio::time::timeout(DRAIN, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
}
