//! The listening side of the RPC port.
//!
//! [`RpcServer::bind`] starts an accept loop that serves at most
//! [`RpcConfig::max_connections`] connections at once (further ones wait in the kernel's
//! backlog until a slot frees), at most [`RpcLimits::max_conns_per_client`] of them from one
//! client address (more are closed at once). Per connection, one task reads frames and one
//! loop writes them:
//!
//! - the reader closes the connection when a deadline of [`RpcLimits`] passes: no complete
//!   first frame within the handshake timeout, a frame begun and not finished within the
//!   frame timeout, nothing received and no request running for the idle timeout.
//! - the reader checks each frame — length, version and kind (in the codec), then the target
//!   id against this server's, then the body — and refuses anything wrong by closing **that**
//!   connection with a `warn!` naming the peer and the reason. Nothing else is affected.
//! - each accepted request runs in its own task (at most
//!   [`RpcConfig::max_in_flight_per_conn`] per connection; the reader stops reading while
//!   full), so a slow request never holds up a heartbeat behind it; its response goes through
//!   the connection's write queue. `Ping` is answered here without the handler.
//! - when the connection ends (peer EOF, a refused frame, a write error, shutdown) its
//!   requests still running are dropped: their answers would have nowhere to go.
//!
//! [`RpcServer::shutdown`] (or dropping the server) stops accepting and closes every
//! connection.
//!
//! With TLS ([`RpcConfig::tls`]) each connection first completes a handshake in its own task
//! (bounded by [`RpcLimits::handshake_timeout`]); a plain-TCP
//! peer, garbage, an oversized handshake or a certificate from another CA closes that
//! connection with a `warn!`. The role the peer's certificate names rides in every
//! [`RequestContext`]; with `verify_server_hostname` a request the role may not send is
//! answered [`RpcError::PermissionDenied`] without reaching the handler.

use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use teamster_storage::raft_types::ServerId;
use tokio::io::AsyncRead;
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinSet;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::rpc::conn::{accept_tls, count_received, write_loop};
use crate::rpc::frame::{
    decode_body, encode_frame, Frame, FrameCodec, FrameError, FrameKind, Header,
};
use crate::rpc::message::{RpcRequest, RpcResponse};
use crate::rpc::service::roles;
use crate::rpc::{metric, RpcConfig, RpcError, RpcLimits};
use crate::util::tls::PeerRole;
use tokio::time::Instant;

const SIDE: &str = "server";

/// Who is asking, handed to the [`RpcHandler`] with each request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestContext {
    /// The sender's raft id from the frame header (0: a client agent).
    pub from: ServerId,
    /// The remote socket address of the connection.
    pub peer_addr: SocketAddr,
    /// The caller's request id (unique per connection).
    pub request_id: u64,
    /// This server's sequence number of the connection (unique per server run).
    pub connection: u64,
    /// Whether the connection is TLS (the agent's `tls.rpc`).
    pub tls: bool,
    /// The role the peer's certificate names (`server.<region>.nomad` → `Server`, …); `None`
    /// on plain TCP, or for a CA-signed certificate naming no role (accepted only without
    /// `verify_server_hostname`). With `verify_server_hostname` the transport has already
    /// refused what the role may not send ([`roles`]).
    pub role: Option<PeerRole>,
}

/// What the server role implements to answer requests. The transport has already checked the
/// frame (version, size, target id); the handler only decides the answer.
///
/// `Err` means "no answer to this request" (e.g. [`RpcError::Unsupported`] while the raft
/// node is not running); errors of the request's own domain belong inside the response (a
/// `RaftError` in [`RpcResponse::AppendEntries`], a
/// [`ServiceError`](super::service::ServiceError) in [`RpcResponse::Service`]). A handler that
/// panics answers `Err(Remote)`.
///
/// Any `Fn(RequestContext, RpcRequest) -> impl Future<…>` closure is a handler.
pub trait RpcHandler: Send + Sync + 'static {
    /// Answer one request. Runs in its own task; may take as long as it needs (the caller's
    /// deadline is the caller's business).
    fn handle(
        &self,
        ctx: RequestContext,
        req: RpcRequest,
    ) -> BoxFuture<'static, Result<RpcResponse, RpcError>>;
}

impl<F, Fut> RpcHandler for F
where
    F: Fn(RequestContext, RpcRequest) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<RpcResponse, RpcError>> + Send + 'static,
{
    fn handle(
        &self,
        ctx: RequestContext,
        req: RpcRequest,
    ) -> BoxFuture<'static, Result<RpcResponse, RpcError>> {
        Box::pin(self(ctx, req))
    }
}

/// A running RPC listener. Dropping it stops the server like [`RpcServer::shutdown`] does,
/// without waiting.
#[derive(Debug)]
pub struct RpcServer {
    local_addr: SocketAddr,
    server_id: ServerId,
    token: CancellationToken,
    accept_task: Option<tokio::task::JoinHandle<()>>,
}

/// What every connection task of one server shares.
struct Shared {
    server_id: ServerId,
    handler: Arc<dyn RpcHandler>,
    config: RpcConfig,
}

impl RpcServer {
    /// Bind `addr` and start serving requests as raft id `server_id` (0 for a server that does
    /// not know its id yet: it then accepts only requests addressed to target 0).
    pub async fn bind(
        addr: impl ToSocketAddrs + std::fmt::Display,
        server_id: ServerId,
        handler: Arc<dyn RpcHandler>,
        config: RpcConfig,
    ) -> Result<RpcServer, RpcError> {
        config.validate()?;
        let listener = TcpListener::bind(&addr).await.map_err(|e| RpcError::Bind {
            addr: addr.to_string(),
            reason: e.to_string(),
        })?;
        let local_addr = listener.local_addr().map_err(|e| RpcError::Bind {
            addr: addr.to_string(),
            reason: e.to_string(),
        })?;
        let token = CancellationToken::new();
        let shared = Arc::new(Shared {
            server_id,
            handler,
            config,
        });
        let span = tracing::info_span!("rpc_server", %local_addr, server_id);
        let accept_task =
            tokio::spawn(accept_loop(listener, shared, token.clone()).instrument(span));
        tracing::info!(%local_addr, server_id, "rpc server listening");
        Ok(RpcServer {
            local_addr,
            server_id,
            token,
            accept_task: Some(accept_task),
        })
    }

    /// The bound address (the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The raft id this server answers as.
    pub fn server_id(&self) -> ServerId {
        self.server_id
    }

    /// Stop accepting, close every connection, and wait until the accept loop and every
    /// connection task have ended.
    pub async fn shutdown(mut self) {
        self.token.cancel();
        if let Some(task) = self.accept_task.take() {
            if let Err(e) = task.await {
                tracing::warn!(error = %e, "rpc accept loop ended abnormally");
            }
        }
        tracing::info!(local_addr = %self.local_addr, "rpc server stopped");
    }
}

impl Drop for RpcServer {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, token: CancellationToken) {
    let slots = Arc::new(Semaphore::new(shared.config.max_connections));
    let per_client = Arc::new(crate::util::conn_limit::PerClient::default());
    let mut connections = JoinSet::new();
    let next_conn = AtomicU64::new(1);
    let mut accept_errors: u32 = 0;
    loop {
        // Reap finished connection tasks so the set does not grow.
        while connections.try_join_next().is_some() {}
        let permit = tokio::select! {
            biased;
            _ = token.cancelled() => break,
            permit = slots.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => break, // never closed while we hold `slots`
            },
        };
        let accepted = tokio::select! {
            biased;
            _ = token.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer_addr) = match accepted {
            Ok(a) => {
                accept_errors = 0;
                a
            }
            Err(e) => {
                // Out of file descriptors and the like: wait a little instead of spinning.
                accept_errors = accept_errors.saturating_add(1);
                let pause = Duration::from_millis(10 << accept_errors.min(7));
                tracing::warn!(error = %e, ?pause, "rpc accept failed");
                metrics::counter!(metric::ERRORS, "side" => SIDE, "reason" => "accept")
                    .increment(1);
                tokio::select! {
                    _ = token.cancelled() => break,
                    _ = tokio::time::sleep(pause) => continue,
                }
            }
        };
        let Some(client_slot) =
            per_client.take(peer_addr.ip(), shared.config.limits.max_conns_per_client)
        else {
            metrics::counter!(metric::ERRORS, "side" => SIDE, "reason" => "conns_per_client")
                .increment(1);
            tracing::debug!(
                %peer_addr,
                limit = shared.config.limits.max_conns_per_client,
                "closing rpc connection: its address holds rpc_max_conns_per_client already"
            );
            drop(stream);
            continue;
        };
        let connection = next_conn.fetch_add(1, Ordering::Relaxed);
        let span = tracing::info_span!("rpc_conn", side = SIDE, %peer_addr, connection);
        let shared = shared.clone();
        let token = token.child_token();
        connections.spawn(
            async move {
                let _permit = permit;
                let _client_slot = client_slot;
                serve_connection(stream, peer_addr, connection, shared, token).await;
            }
            .instrument(span),
        );
    }
    // Every connection task watches the (cancelled) token and ends promptly.
    while connections.join_next().await.is_some() {}
}

/// Counts a connection in the `teamster_rpc_connections` gauge for as long as it lives, even
/// if its task is aborted.
struct ConnectionGauge;

impl ConnectionGauge {
    fn open() -> Self {
        metrics::gauge!(metric::CONNECTIONS, "side" => SIDE).increment(1.0);
        ConnectionGauge
    }
}

impl Drop for ConnectionGauge {
    fn drop(&mut self) {
        metrics::gauge!(metric::CONNECTIONS, "side" => SIDE).decrement(1.0);
    }
}

/// Why a connection ended, for the log.
enum Closed {
    /// Expected: the peer went away or the server stopped.
    Normal(String),
    /// The peer broke the protocol; logged as a warning.
    Refused(FrameError),
    /// A deadline of the agent's `[limits]` passed.
    TimedOut(&'static str),
}

async fn serve_connection(
    stream: TcpStream,
    peer_addr: SocketAddr,
    connection: u64,
    shared: Arc<Shared>,
    token: CancellationToken,
) {
    let _gauge = ConnectionGauge::open();
    if let Err(e) = stream.set_nodelay(true) {
        tracing::debug!(error = %e, "set_nodelay failed");
    }
    let Some(tls) = shared.config.tls.clone() else {
        let (read_half, write_half) = stream.into_split();
        let peer = Peer {
            addr: peer_addr,
            connection,
            tls: false,
            role: None,
        };
        return serve_halves(read_half, write_half, peer, shared, token).await;
    };
    let handshake = shared.config.limits.handshake_timeout;
    let accepted = tokio::select! {
        _ = token.cancelled() => return,
        accepted = accept_tls(&tls, stream, handshake) => accepted,
    };
    let (stream, role) = match accepted {
        Ok(ok) => ok,
        Err(why) => {
            metrics::counter!(metric::ERRORS, "side" => SIDE, "reason" => "tls_handshake")
                .increment(1);
            tracing::warn!(%peer_addr, reason = %why, "closing rpc connection");
            return;
        }
    };
    if tls.enforce_roles() && role.is_none() {
        metrics::counter!(metric::ERRORS, "side" => SIDE, "reason" => "tls_role").increment(1);
        tracing::warn!(
            %peer_addr,
            "closing rpc connection: its certificate names no server, client or cli role of \
             this region"
        );
        return;
    }
    tracing::debug!(role = role.map(PeerRole::name), "rpc tls connection");
    let (read_half, write_half) = tokio::io::split(stream);
    let peer = Peer {
        addr: peer_addr,
        connection,
        tls: true,
        role,
    };
    serve_halves(read_half, write_half, peer, shared, token).await
}

/// Who is at the other end of a connection.
#[derive(Debug, Clone, Copy)]
struct Peer {
    addr: SocketAddr,
    connection: u64,
    tls: bool,
    role: Option<PeerRole>,
}

async fn serve_halves<R, W>(
    read_half: R,
    write_half: W,
    peer: Peer,
    shared: Arc<Shared>,
    token: CancellationToken,
) where
    R: AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let peer_addr = peer.addr;
    let (tx, rx) = mpsc::channel::<Bytes>(shared.config.write_queue);
    let reader = read_loop(
        FramedRead::new(read_half, FrameCodec::new(shared.config.max_frame_len)),
        tx,
        peer,
        &shared,
    );
    let closed = tokio::select! {
        _ = token.cancelled() => Closed::Normal("server shutting down".into()),
        closed = reader => closed,
        why = write_loop(write_half, rx, token.clone(), SIDE) => Closed::Normal(why),
    };
    match closed {
        Closed::Normal(why) => tracing::debug!(reason = %why, "rpc connection closed"),
        Closed::Refused(e) => {
            metrics::counter!(metric::FRAMES_REFUSED, "reason" => e.reason()).increment(1);
            tracing::warn!(%peer_addr, reason = %e, "closing rpc connection: frame refused");
        }
        Closed::TimedOut(which) => {
            metrics::counter!(metric::ERRORS, "side" => SIDE, "reason" => which).increment(1);
            tracing::info!(%peer_addr, deadline = which, "closing rpc connection: deadline passed");
        }
    }
}

async fn read_loop<R: AsyncRead + Unpin>(
    mut frames: FramedRead<R, FrameCodec>,
    tx: mpsc::Sender<Bytes>,
    peer: Peer,
    shared: &Arc<Shared>,
) -> Closed {
    let enforce = shared
        .config
        .tls
        .as_ref()
        .is_some_and(|tls| tls.enforce_roles());
    // Requests of this connection still running; dropped (aborted) with the connection.
    let mut in_flight = JoinSet::new();
    let mut clock = Deadlines::new(shared.config.limits);
    loop {
        while in_flight.try_join_next().is_some() {
            clock.active();
        }
        if in_flight.len() >= shared.config.max_in_flight_per_conn {
            // Full: stop reading (TCP pushes back on the caller) until one finishes.
            in_flight.join_next().await;
            clock.active();
            continue;
        }
        let idle = in_flight.is_empty();
        let wake_at = clock.wake_at(frames.decoder().partial_since(), idle);
        let next = tokio::select! {
            next = frames.next() => Some(next),
            // A request finishing may start the idle clock.
            Some(_) = in_flight.join_next(), if !idle => {
                clock.active();
                None
            }
            _ = tokio::time::sleep_until(wake_at) => None,
        };
        let Some(next) = next else {
            // `next()` is cancel-safe: what was read stays in the codec's buffer.
            match clock.passed(frames.decoder().partial_since(), in_flight.is_empty()) {
                Some(which) => return Closed::TimedOut(which),
                None => continue,
            }
        };
        clock.received();
        let frame = match next {
            None => return Closed::Normal("peer closed the connection".into()),
            Some(Err(FrameError::Io(e))) => return Closed::Normal(format!("read failed: {e}")),
            Some(Err(e)) => return Closed::Refused(e),
            Some(Ok(frame)) => frame,
        };
        count_received(SIDE, frame.body.len());
        let (header, req) = match check_request(&frame, shared.server_id) {
            Ok(ok) => ok,
            Err(e) => return Closed::Refused(e),
        };
        let kind = req.kind();
        metrics::counter!(metric::REQUESTS, "side" => SIDE, "kind" => kind).increment(1);
        let ctx = RequestContext {
            from: header.sender,
            peer_addr: peer.addr,
            request_id: header.request_id,
            connection: peer.connection,
            tls: peer.tls,
            role: peer.role,
        };
        let span = tracing::debug_span!("rpc_request", kind, request_id = header.request_id);
        if enforce {
            if let Err(denied) = roles::permit(&req, header.sender, peer.role) {
                metrics::counter!(metric::ERRORS, "side" => SIDE, "reason" => "permission_denied")
                    .increment(1);
                tracing::warn!(
                    peer_addr = %peer.addr,
                    kind,
                    role = peer.role.map_or("no role", PeerRole::name),
                    "rpc request refused: the peer's certificate does not allow it"
                );
                in_flight.spawn(
                    respond(header, kind, Err(denied), shared.clone(), tx.clone()).instrument(span),
                );
                continue;
            }
        }
        in_flight.spawn(answer(ctx, header, req, shared.clone(), tx.clone()).instrument(span));
    }
}

/// The deadlines of one connection's reader ([`RpcLimits`]): the first frame within the
/// handshake timeout, every frame complete within the frame timeout of its first byte, and
/// no connection idle (nothing received, no request running) past the idle timeout.
struct Deadlines {
    limits: RpcLimits,
    opened: Instant,
    first_frame: bool,
    last_active: Instant,
}

impl Deadlines {
    fn new(limits: RpcLimits) -> Deadlines {
        let now = Instant::now();
        Deadlines {
            limits,
            opened: now,
            first_frame: false,
            last_active: now,
        }
    }

    /// A frame arrived.
    fn received(&mut self) {
        self.first_frame = true;
        self.last_active = Instant::now();
    }

    /// A request of the connection finished.
    fn active(&mut self) {
        self.last_active = Instant::now();
    }

    /// The deadline in force, if one has passed: its `[limits]` name.
    fn passed(&self, partial_since: Option<Instant>, idle: bool) -> Option<&'static str> {
        let now = Instant::now();
        let l = &self.limits;
        if partial_since.is_some_and(|t| now >= t + l.frame_timeout) {
            return Some("rpc_frame_timeout");
        }
        if !self.first_frame && now >= self.opened + l.handshake_timeout {
            return Some("rpc_handshake_timeout");
        }
        if idle && !l.idle_timeout.is_zero() && now >= self.last_active + l.idle_timeout {
            return Some("rpc_idle_timeout");
        }
        None
    }

    /// When to look again: the earliest deadline that can pass, and at least every frame
    /// timeout (a frame may begin while the reader waits).
    fn wake_at(&self, partial_since: Option<Instant>, idle: bool) -> Instant {
        let l = &self.limits;
        let mut at = Instant::now() + l.frame_timeout;
        if let Some(t) = partial_since {
            at = at.min(t + l.frame_timeout);
        }
        if !self.first_frame {
            at = at.min(self.opened + l.handshake_timeout);
        }
        if idle && !l.idle_timeout.is_zero() {
            at = at.min(self.last_active + l.idle_timeout);
        }
        at
    }
}

/// Check a frame is a request for this server and decode it.
fn check_request(frame: &Frame, me: ServerId) -> Result<(Header, RpcRequest), FrameError> {
    let header = frame.header;
    if header.kind != FrameKind::Request {
        return Err(FrameError::Unexpected(format!(
            "a {:?} frame sent to a server",
            header.kind
        )));
    }
    if header.target != 0 && header.target != me {
        return Err(FrameError::WrongTarget {
            target: header.target,
            me,
        });
    }
    let req: RpcRequest = decode_body(&frame.body)?;
    if header.target == 0 && req.requires_target() {
        return Err(FrameError::TargetRequired { kind: req.kind() });
    }
    Ok((header, req))
}

/// Run one request and queue its response.
async fn answer(
    ctx: RequestContext,
    header: Header,
    req: RpcRequest,
    shared: Arc<Shared>,
    tx: mpsc::Sender<Bytes>,
) {
    let kind = req.kind();
    let result = match req {
        RpcRequest::Ping => Ok(RpcResponse::Ping {
            server_id: shared.server_id,
        }),
        req => AssertUnwindSafe(shared.handler.handle(ctx, req))
            .catch_unwind()
            .await
            .unwrap_or_else(|_| {
                tracing::error!(kind, "rpc handler panicked");
                Err(RpcError::Remote(format!("the {kind} handler panicked")))
            }),
    };
    respond(header, kind, result, shared, tx).await
}

/// Encode the answer to the request of `header` and queue it on the connection.
async fn respond(
    header: Header,
    kind: &'static str,
    result: Result<RpcResponse, RpcError>,
    shared: Arc<Shared>,
    tx: mpsc::Sender<Bytes>,
) {
    let outcome = match &result {
        Ok(_) => "ok",
        Err(_) => "error",
    };
    let response_header = Header::response_to(&header, shared.server_id);
    let max = shared.config.max_frame_len;
    let bytes = match encode_frame(&response_header, &result, max) {
        Ok(bytes) => bytes,
        Err(e) => {
            let err = match e {
                FrameError::TooLarge { len, max } => RpcError::TooLarge {
                    len: len as u64,
                    max: max as u64,
                },
                other => RpcError::Remote(format!("response does not encode: {other}")),
            };
            tracing::warn!(kind, error = %err, "rpc response not sendable");
            metrics::counter!(metric::ERRORS, "side" => SIDE, "reason" => "response_encode")
                .increment(1);
            match encode_frame(&response_header, &Err::<RpcResponse, _>(err), max) {
                Ok(bytes) => bytes,
                Err(e) => {
                    tracing::error!(kind, error = %e, "rpc error response does not encode");
                    return;
                }
            }
        }
    };
    metrics::counter!(metric::RESPONSES, "side" => SIDE, "kind" => kind, "outcome" => outcome)
        .increment(1);
    // Fails only when the connection is gone; the answer has nowhere to go then.
    let _ = tx.send(bytes).await;
}
