//! HTTPS on the API port: a listener that hands axum only connections whose TLS handshake
//! completed.
//!
//! An accept task takes TCP connections and runs each handshake in its own task, at most
//! [`MAX_HANDSHAKES`] at once and each within the agent's `limits.https_handshake_timeout`;
//! a plain-HTTP request, garbage,
//! an oversized handshake or a missing or foreign client certificate (with
//! `verify_https_client`) closes that connection with a `warn!` and nothing else. Each
//! handshake uses the configuration in force when it starts, so a certificate reloaded on
//! SIGHUP serves every later connection.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::server::TlsStream;

use crate::util::tls::AgentTls;

/// Handshakes in progress at once; further connections wait in the kernel's backlog.
pub const MAX_HANDSHAKES: usize = 256;

/// A TLS listener for `axum::serve`. Dropping it stops its accept task.
#[derive(Debug)]
pub struct TlsListener {
    local_addr: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    accept_task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accept_task.abort();
    }
}

impl TlsListener {
    /// Serve HTTPS on `listener` with the HTTP configuration of `tls`.
    /// Each handshake must end within `handshake_timeout` (`limits.https_handshake_timeout`).
    pub fn new(
        listener: TcpListener,
        tls: AgentTls,
        handshake_timeout: std::time::Duration,
    ) -> std::io::Result<TlsListener> {
        let local_addr = listener.local_addr()?;
        let (tx, ready) = mpsc::channel(64);
        let accept_task = tokio::spawn(accept_loop(listener, tls, handshake_timeout, tx));
        Ok(TlsListener {
            local_addr,
            ready,
            accept_task,
        })
    }
}

async fn accept_loop(
    listener: TcpListener,
    tls: AgentTls,
    handshake_timeout: std::time::Duration,
    tx: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    let mut errors: u32 = 0;
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(a) => {
                errors = 0;
                a
            }
            Err(e) => {
                errors = errors.saturating_add(1);
                let pause = std::time::Duration::from_millis(10 << errors.min(7));
                tracing::warn!(error = %e, ?pause, "https accept failed");
                tokio::time::sleep(pause).await;
                continue;
            }
        };
        if tx.is_closed() {
            return;
        }
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.configs().http_server.clone());
        let tx = tx.clone();
        tokio::spawn(async move {
            let _permit = permit;
            match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => {
                    let _ = tx.send((stream, peer)).await;
                }
                Ok(Err(e)) => {
                    tracing::warn!(%peer, reason = %e, "closing https connection: tls handshake failed")
                }
                Err(_) => {
                    tracing::warn!(%peer, "closing https connection: tls handshake timed out")
                }
            }
        });
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept task ended (the listener is being dropped): no more connections.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}
