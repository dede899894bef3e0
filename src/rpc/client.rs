//! The calling side of the RPC port: one [`Pool`] per process, shared by every caller.
//!
//! The pool keeps one connection per *slot*: a peer (a raft id, or an address for calls to
//! "whichever server listens there") and a [`Lane`] (control or bulk). A slot connects lazily
//! on its first call, is reused by every later call — calls are multiplexed by request id
//! and complete in whatever order the server answers — and is re-dialled after the
//! connection dies. Failed dials back off (doubling from
//! [`RpcConfig::reconnect_backoff_min`] to [`RpcConfig::reconnect_backoff_max`]); while a
//! slot backs off, calls fail at once with [`RpcError::Unreachable`] instead of waiting, so
//! openraft's own backoff and the callers' retry loops stay in charge of pacing. A connection
//! that dies before the peer answered anything on it (a server refusing our frames, a port
//! that accepts and hangs up) counts as a failed dial too. The address
//! is given with every call (from the raft membership), so a changed address takes effect on
//! the next call and a host name is resolved again on every dial.
//!
//! Per connection, a writer task sends queued frames (one flush per drained queue) and a
//! reader task completes the waiting callers through a map of oneshot senders keyed by
//! request id. When the connection ends — EOF, reset, a malformed or foreign response — every
//! pending call fails at once with [`RpcError::ConnectionLost`] (its request may have been
//! served); nobody waits for a deadline.
//! Every call has a deadline covering dial, queueing and answer; a call that gives up removes
//! its entry, and a late answer is dropped.
//!
//! With [`RpcConfig::tls`] every dial is a TLS client handshake (within the connect
//! timeout) presenting this agent's certificate; the server must present a certificate from
//! the CA naming `server.<region>.nomad` (with `verify_server_hostname`). A failed handshake
//! is a failed dial.
//!
//! Bounds: at most [`RpcConfig::max_in_flight_per_conn`] calls await answers per connection
//! (more wait for a slot within their deadline), at most [`RpcConfig::max_peers`] slots, a
//! bounded write queue, and the frame limit on both directions.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use teamster_storage::raft_types::ServerId;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::time::Instant;
use tokio_util::codec::FramedRead;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::rpc::conn::{count_received, write_loop};
use crate::rpc::frame::{decode_body, encode_frame, FrameCodec, FrameError, FrameKind, Header};
use crate::rpc::message::{Lane, RpcRequest, RpcResponse};
use crate::rpc::{metric, RpcConfig, RpcError, ServiceError, ServiceRequest, ServiceResponse};

const SIDE: &str = "client";

/// The connection pool every caller of one process shares; cloning it is cheap (an `Arc`).
#[derive(Clone)]
pub struct Pool {
    inner: Arc<PoolInner>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("my_id", &self.inner.my_id)
            .field("slots", &lock(&self.inner.slots).len())
            .finish()
    }
}

struct PoolInner {
    my_id: ServerId,
    config: RpcConfig,
    slots: Mutex<HashMap<SlotKey, Arc<Slot>>>,
}

/// Whom a slot talks to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Peer {
    /// A raft member, by id; responses must come from that id.
    Server(ServerId),
    /// Whichever server listens on an address (target 0).
    Addr(String),
}

type SlotKey = (Peer, Lane);

/// One peer × lane: its live connection, if any, and its dial backoff.
struct Slot {
    state: tokio::sync::Mutex<SlotState>,
}

struct SlotState {
    addr: String,
    conn: Option<Arc<Connection>>,
    backoff: Backoff,
}

/// The doubling wait between failed dials of one slot. Deterministic (no jitter): the
/// callers — openraft, retry loops — add their own pacing on top.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    failures: u32,
    retry_at: Option<Instant>,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max,
            failures: 0,
            retry_at: None,
        }
    }

    /// Record a failed dial at `now`; returns the wait before the next one.
    pub(crate) fn failed(&mut self, now: Instant) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let factor = 1u32 << (self.failures - 1).min(16);
        let wait = self.min.saturating_mul(factor).min(self.max);
        self.retry_at = Some(now + wait);
        wait
    }

    /// How long until a dial is allowed again, if it is not yet.
    pub(crate) fn remaining(&self, now: Instant) -> Option<Duration> {
        self.retry_at
            .filter(|at| *at > now)
            .map(|at| at.duration_since(now))
    }

    pub(crate) fn reset(&mut self) {
        self.failures = 0;
        self.retry_at = None;
    }
}

impl Pool {
    /// A pool calling as raft id `my_id` (0 for a client agent, which is no raft member).
    pub fn new(my_id: ServerId, config: RpcConfig) -> Result<Pool, RpcError> {
        config.validate()?;
        Ok(Pool {
            inner: Arc::new(PoolInner {
                my_id,
                config,
                slots: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The raft id this pool sends as.
    pub fn my_id(&self) -> ServerId {
        self.inner.my_id
    }

    /// The pool's configuration.
    pub fn config(&self) -> &RpcConfig {
        &self.inner.config
    }

    /// Call server `target`, reachable at `addr` (`ip:port` or `host:port`, taken from its
    /// `ServerAddr::rpc_addr`), with a deadline. A `target` of 0 calls by address, like
    /// [`Pool::call_addr`].
    ///
    /// Errors: [`RpcError::Timeout`] when the deadline passes, [`RpcError::Unreachable`] when
    /// there is no connection (refused, backing off), [`RpcError::ConnectionLost`] when the
    /// connection closed while the call waited for its answer,
    /// [`RpcError::TooLarge`] when the request does not fit in a frame (nothing is sent), or
    /// whatever error the server answered with.
    pub async fn call(
        &self,
        target: ServerId,
        addr: &str,
        req: RpcRequest,
        timeout: Duration,
    ) -> Result<RpcResponse, RpcError> {
        let peer = if target == 0 {
            Peer::Addr(addr.to_string())
        } else {
            Peer::Server(target)
        };
        self.call_peer(peer, target, addr, req, timeout).await
    }

    /// Call whichever server listens on `addr` (target id 0), for client agents and for
    /// bootstrap/join before a peer's raft id is known. Requests that
    /// [require a target](RpcRequest::requires_target) are refused with
    /// [`RpcError::TargetRequired`] without being sent.
    pub async fn call_addr(
        &self,
        addr: &str,
        req: RpcRequest,
        timeout: Duration,
    ) -> Result<RpcResponse, RpcError> {
        self.call_peer(Peer::Addr(addr.to_string()), 0, addr, req, timeout)
            .await
    }

    /// The raft id of the server listening on `addr`.
    pub async fn ping_addr(&self, addr: &str, timeout: Duration) -> Result<ServerId, RpcError> {
        match self.call_addr(addr, RpcRequest::Ping, timeout).await? {
            RpcResponse::Ping { server_id } => Ok(server_id),
            other => Err(other.unexpected("Status.Ping")),
        }
    }

    /// Send a service call to `target` at `addr` (0: whichever server listens there) and wait
    /// up to `timeout` for its answer. A transport failure (no connection, no answer in time)
    /// comes back as [`ServiceError::Unavailable`](crate::rpc::ServiceError::Unavailable).
    pub async fn service(
        &self,
        target: ServerId,
        addr: &str,
        req: ServiceRequest,
        timeout: Duration,
    ) -> Result<ServiceResponse, ServiceError> {
        self.service_as(target, addr, None, req, timeout).await
    }

    /// [`Pool::service`] with the caller's credential (a node secret or an ACL token's
    /// secret), which the server checks when ACLs are on.
    pub async fn service_as(
        &self,
        target: ServerId,
        addr: &str,
        token: Option<&str>,
        req: ServiceRequest,
        timeout: Duration,
    ) -> Result<ServiceResponse, ServiceError> {
        let name = req.method().name;
        let request = match token {
            Some(token) => RpcRequest::AuthService(crate::rpc::AuthedService {
                token: token.to_string(),
                call: req,
            }),
            None => RpcRequest::Service(req),
        };
        match self.call(target, addr, request, timeout).await? {
            RpcResponse::Service(result) => result,
            other => Err(ServiceError::unexpected(name, other.kind())),
        }
    }

    /// Connections currently open (slots in the middle of a dial are not counted); for
    /// diagnostics and tests.
    pub fn open_connections(&self) -> usize {
        lock(&self.inner.slots)
            .values()
            .filter(|slot| match slot.state.try_lock() {
                Ok(state) => state.conn.as_ref().is_some_and(|c| c.is_open()),
                Err(_) => false,
            })
            .count()
    }

    /// Drop the connections to server `target` (e.g. after it left the cluster). Calls in
    /// flight on them fail with [`RpcError::ConnectionLost`].
    pub fn forget(&self, target: ServerId) {
        let removed: Vec<Arc<Slot>> = {
            let mut slots = lock(&self.inner.slots);
            let keys: Vec<SlotKey> = slots
                .keys()
                .filter(|(peer, _)| *peer == Peer::Server(target))
                .cloned()
                .collect();
            keys.iter().filter_map(|k| slots.remove(k)).collect()
        };
        for slot in removed {
            if let Ok(mut state) = slot.state.try_lock() {
                state.conn = None;
            }
        }
    }

    async fn call_peer(
        &self,
        peer: Peer,
        target: ServerId,
        addr: &str,
        req: RpcRequest,
        timeout: Duration,
    ) -> Result<RpcResponse, RpcError> {
        let kind = req.kind();
        metrics::counter!(metric::REQUESTS, "side" => SIDE, "kind" => kind).increment(1);
        let result = if target == 0 && req.requires_target() {
            Err(RpcError::TargetRequired {
                kind: kind.to_string(),
            })
        } else {
            let lane = req.lane();
            let call = async {
                let conn = self.connection((peer, lane), addr).await?;
                conn.call(target, req).await
            };
            match tokio::time::timeout(timeout, call).await {
                Ok(result) => result,
                Err(_) => Err(RpcError::Timeout {
                    peer: addr.to_string(),
                    after_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                }),
            }
        };
        let outcome = match &result {
            Ok(_) => "ok",
            Err(RpcError::Timeout { .. }) => "timeout",
            Err(RpcError::Unreachable { .. }) => "unreachable",
            Err(RpcError::ConnectionLost { .. }) => "connection_lost",
            Err(_) => "error",
        };
        metrics::counter!(metric::RESPONSES, "side" => SIDE, "kind" => kind, "outcome" => outcome)
            .increment(1);
        result
    }

    /// The live connection of a slot, dialling if there is none and the backoff allows.
    async fn connection(&self, key: SlotKey, addr: &str) -> Result<Arc<Connection>, RpcError> {
        let slot = self.slot(&key, addr)?;
        let mut state = slot.state.lock().await;
        if state.addr != addr {
            tracing::info!(old = %state.addr, new = %addr, "rpc peer address changed");
            state.addr = addr.to_string();
            state.conn = None;
            state.backoff.reset();
        }
        if let Some(conn) = state.conn.take() {
            if conn.is_open() {
                state.conn = Some(conn.clone());
                return Ok(conn);
            }
            if conn.shared.answered.load(Ordering::Relaxed) {
                // It worked until it died (a restart, a network blip): redial at once.
                state.backoff.reset();
            } else {
                let wait = state.backoff.failed(Instant::now());
                tracing::debug!(%addr, ?wait, "rpc connection died before any answer");
            }
        }
        let now = Instant::now();
        if let Some(wait) = state.backoff.remaining(now) {
            return Err(RpcError::Unreachable {
                peer: addr.to_string(),
                reason: format!(
                    "backing off after {} failed attempts; next attempt in {wait:?}",
                    state.backoff.failures
                ),
            });
        }
        let expected_sender = match &key.0 {
            Peer::Server(id) => *id,
            Peer::Addr(_) => 0,
        };
        match Connection::open(
            addr,
            self.inner.my_id,
            expected_sender,
            key.1,
            &self.inner.config,
        )
        .await
        {
            Ok(conn) => {
                // The backoff is reset once the connection has proved itself (see above).
                state.conn = Some(conn.clone());
                Ok(conn)
            }
            Err(e) => {
                let wait = state.backoff.failed(Instant::now());
                tracing::debug!(%addr, error = %e, ?wait, "rpc connect failed");
                metrics::counter!(metric::ERRORS, "side" => SIDE, "reason" => "connect")
                    .increment(1);
                Err(e)
            }
        }
    }

    /// The slot for `key`, created if missing (evicting dead idle slots when full).
    fn slot(&self, key: &SlotKey, addr: &str) -> Result<Arc<Slot>, RpcError> {
        let mut slots = lock(&self.inner.slots);
        if let Some(slot) = slots.get(key) {
            return Ok(slot.clone());
        }
        if slots.len() >= self.inner.config.max_peers {
            // Keep slots that are busy (locked) or hold a live connection.
            slots.retain(|_, slot| match slot.state.try_lock() {
                Ok(state) => state.conn.as_ref().is_some_and(|c| c.is_open()),
                Err(_) => true,
            });
            if slots.len() >= self.inner.config.max_peers {
                return Err(RpcError::Overloaded(format!(
                    "{} rpc peers connected, the configured maximum",
                    slots.len()
                )));
            }
        }
        let config = &self.inner.config;
        let slot = Arc::new(Slot {
            state: tokio::sync::Mutex::new(SlotState {
                addr: addr.to_string(),
                conn: None,
                backoff: Backoff::new(config.reconnect_backoff_min, config.reconnect_backoff_max),
            }),
        });
        slots.insert(key.clone(), slot.clone());
        Ok(slot)
    }
}

/// Lock a std mutex, ignoring poisoning: the maps it guards stay consistent at every await
/// point, and a panicking caller must not wedge the pool.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

type Reply = Result<RpcResponse, RpcError>;

/// The calls awaiting answers on one connection, and whether it is still open.
struct Pending {
    waiting: HashMap<u64, oneshot::Sender<Reply>>,
    /// Set once when the connection ends; later calls fail with it.
    closed: Option<String>,
}

/// State shared by a connection's handle, its reader task and its waiting callers.
struct ConnShared {
    peer: String,
    pending: Mutex<Pending>,
    in_flight: Semaphore,
    token: CancellationToken,
    /// Whether the peer ever answered on this connection. A connection that dies without
    /// one (a server refusing our frames, a port that accepts and hangs up) counts as a failed
    /// dial, so the slot backs off instead of redialling on every call.
    answered: AtomicBool,
}

impl ConnShared {
    /// End the connection: fail every waiting call and refuse new ones.
    fn close(&self, reason: String) {
        let waiting = {
            let mut pending = lock(&self.pending);
            if pending.closed.is_some() {
                return;
            }
            pending.closed = Some(reason.clone());
            std::mem::take(&mut pending.waiting)
        };
        self.in_flight.close();
        self.token.cancel();
        metrics::gauge!(metric::CONNECTIONS, "side" => SIDE).decrement(1.0);
        for (_, tx) in waiting {
            let _ = tx.send(Err(self.lost(&reason)));
        }
    }

    /// The error of a call whose request was sent: it may have been served.
    fn lost(&self, reason: &str) -> RpcError {
        RpcError::ConnectionLost {
            peer: self.peer.clone(),
            reason: reason.to_string(),
        }
    }

    /// The error of a call whose request never left: the connection was already closed.
    fn unreachable(&self, reason: &str) -> RpcError {
        RpcError::Unreachable {
            peer: self.peer.clone(),
            reason: reason.to_string(),
        }
    }
}

/// What a connection being started knows of its peer.
struct ConnContext<'a> {
    addr: &'a str,
    peer_addr: std::net::SocketAddr,
    local_addr: std::net::SocketAddr,
    my_id: ServerId,
    expected_sender: ServerId,
    lane: Lane,
}

/// One open TCP connection of the pool. Dropping the last handle closes it.
struct Connection {
    shared: Arc<ConnShared>,
    writer: mpsc::Sender<Bytes>,
    next_id: AtomicU64,
    my_id: ServerId,
    max_frame_len: usize,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.shared.close("connection dropped by the pool".into());
    }
}

impl Connection {
    async fn open(
        addr: &str,
        my_id: ServerId,
        expected_sender: ServerId,
        lane: Lane,
        config: &RpcConfig,
    ) -> Result<Arc<Connection>, RpcError> {
        let unreachable = |reason: String| RpcError::Unreachable {
            peer: addr.to_string(),
            reason,
        };
        let stream =
            match tokio::time::timeout(config.connect_timeout, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => return Err(unreachable(format!("connect failed: {e}"))),
                Err(_) => {
                    return Err(unreachable(format!(
                        "connect timed out after {:?}",
                        config.connect_timeout
                    )))
                }
            };
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "set_nodelay failed");
        }
        let peer_addr = stream
            .peer_addr()
            .map_err(|e| unreachable(format!("connection lost at once: {e}")))?;
        let local_addr = stream
            .local_addr()
            .map_err(|e| unreachable(format!("connection lost at once: {e}")))?;
        let context = ConnContext {
            addr,
            peer_addr,
            local_addr,
            my_id,
            expected_sender,
            lane,
        };
        let Some(tls) = &config.tls else {
            let (read_half, write_half) = stream.into_split();
            return Ok(Connection::start(read_half, write_half, context, config));
        };
        let connector = tokio_rustls::TlsConnector::from(tls.configs().rpc_client.clone());
        let handshake = connector.connect(tls.server_name(), stream);
        let stream = match tokio::time::timeout(config.connect_timeout, handshake).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => return Err(unreachable(format!("tls handshake failed: {e}"))),
            Err(_) => {
                return Err(unreachable(format!(
                    "tls handshake timed out after {:?}",
                    config.connect_timeout
                )))
            }
        };
        let (read_half, write_half) = tokio::io::split(stream);
        Ok(Connection::start(read_half, write_half, context, config))
    }

    /// Start the reader and writer of a connected stream's halves.
    fn start<R, W>(
        read_half: R,
        write_half: W,
        cx: ConnContext<'_>,
        config: &RpcConfig,
    ) -> Arc<Connection>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let ConnContext {
            addr,
            peer_addr,
            local_addr,
            my_id,
            expected_sender,
            lane,
        } = cx;
        let shared = Arc::new(ConnShared {
            peer: addr.to_string(),
            pending: Mutex::new(Pending {
                waiting: HashMap::new(),
                closed: None,
            }),
            in_flight: Semaphore::new(config.max_in_flight_per_conn),
            token: CancellationToken::new(),
            answered: AtomicBool::new(false),
        });
        metrics::gauge!(metric::CONNECTIONS, "side" => SIDE).increment(1.0);
        let (tx, rx) = mpsc::channel::<Bytes>(config.write_queue);
        let frames = FramedRead::new(read_half, FrameCodec::new(config.max_frame_len));
        let span = tracing::info_span!(
            "rpc_conn",
            side = SIDE,
            peer = %addr,
            %peer_addr,
            %local_addr,
            lane = lane.name(),
        );
        let task_shared = shared.clone();
        tokio::spawn(
            async move {
                let token = task_shared.token.clone();
                let reason = tokio::select! {
                    _ = token.cancelled() => "closed locally".to_string(),
                    reason = read_loop(frames, &task_shared, my_id, expected_sender) => reason,
                    reason = write_loop(write_half, rx, token.clone(), SIDE) => reason,
                };
                tracing::debug!(%reason, "rpc connection closed");
                task_shared.close(reason);
            }
            .instrument(span),
        );
        tracing::debug!(%addr, %peer_addr, %local_addr, lane = lane.name(), "rpc connection opened");
        Arc::new(Connection {
            shared,
            writer: tx,
            next_id: AtomicU64::new(1),
            my_id,
            max_frame_len: config.max_frame_len,
        })
    }

    fn is_open(&self) -> bool {
        !self.shared.token.is_cancelled()
    }

    /// Send one request and wait for its answer (no deadline here: the caller has one).
    async fn call(&self, target: ServerId, req: RpcRequest) -> Result<RpcResponse, RpcError> {
        let _permit = self
            .shared
            .in_flight
            .acquire()
            .await
            .map_err(|_| self.shared.unreachable(&self.closed_reason()))?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = encode_frame(
            &Header::request(id, self.my_id, target),
            &req,
            self.max_frame_len,
        )
        .map_err(|e| match e {
            FrameError::TooLarge { len, max } => RpcError::TooLarge {
                len: len as u64,
                max: max as u64,
            },
            other => RpcError::Remote(format!("request does not encode: {other}")),
        })?;
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = lock(&self.shared.pending);
            if let Some(reason) = &pending.closed {
                return Err(self.shared.unreachable(reason));
            }
            pending.waiting.insert(id, tx);
        }
        // Removes the entry if this call is abandoned (deadline) or fails before its answer.
        let _guard = PendingGuard {
            shared: &self.shared,
            id,
        };
        self.writer
            .send(frame)
            .await
            .map_err(|_| self.shared.unreachable(&self.closed_reason()))?;
        match rx.await {
            Ok(reply) => reply,
            Err(_) => Err(self.shared.lost(&self.closed_reason())),
        }
    }

    fn closed_reason(&self) -> String {
        lock(&self.shared.pending)
            .closed
            .clone()
            .unwrap_or_else(|| "connection closed".to_string())
    }
}

struct PendingGuard<'a> {
    shared: &'a ConnShared,
    id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        lock(&self.shared.pending).waiting.remove(&self.id);
    }
}

/// Read responses and complete their callers until the connection ends; returns why.
async fn read_loop<R: AsyncRead + Unpin>(
    mut frames: FramedRead<R, FrameCodec>,
    shared: &ConnShared,
    my_id: ServerId,
    expected_sender: ServerId,
) -> String {
    loop {
        let frame = match frames.next().await {
            None => return "peer closed the connection".to_string(),
            Some(Err(FrameError::Io(e))) => return format!("read failed: {e}"),
            Some(Err(e)) => return refused(&shared.peer, e),
            Some(Ok(frame)) => frame,
        };
        count_received(SIDE, frame.body.len());
        let header = frame.header;
        if header.kind != FrameKind::Response {
            return refused(
                &shared.peer,
                FrameError::Unexpected("a request frame on a client connection".into()),
            );
        }
        if header.target != my_id {
            return refused(
                &shared.peer,
                FrameError::WrongTarget {
                    target: header.target,
                    me: my_id,
                },
            );
        }
        if expected_sender != 0 && header.sender != expected_sender {
            return refused(
                &shared.peer,
                FrameError::Unexpected(format!(
                    "response from server {} on a connection to server {expected_sender}",
                    header.sender
                )),
            );
        }
        let reply: Reply = match decode_body(&frame.body) {
            Ok(reply) => reply,
            Err(e) => return refused(&shared.peer, e),
        };
        let waiter = lock(&shared.pending).waiting.remove(&header.request_id);
        match waiter {
            Some(tx) => {
                shared.answered.store(true, Ordering::Relaxed);
                let _ = tx.send(reply);
            }
            None => tracing::debug!(
                request_id = header.request_id,
                "rpc answer after its caller gave up; dropped"
            ),
        }
    }
}

fn refused(peer: &str, e: FrameError) -> String {
    metrics::counter!(metric::FRAMES_REFUSED, "reason" => e.reason()).increment(1);
    tracing::warn!(%peer, reason = %e, "closing rpc connection: response refused");
    format!("response refused: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn backoff_doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(10), Duration::from_millis(50));
        let t0 = Instant::now();
        assert_eq!(b.remaining(t0), None, "a fresh slot may dial at once");
        assert_eq!(b.failed(t0), Duration::from_millis(10));
        assert_eq!(b.remaining(t0), Some(Duration::from_millis(10)));
        tokio::time::advance(Duration::from_millis(10)).await;
        assert_eq!(b.remaining(Instant::now()), None);
        assert_eq!(b.failed(Instant::now()), Duration::from_millis(20));
        assert_eq!(b.failed(Instant::now()), Duration::from_millis(40));
        assert_eq!(b.failed(Instant::now()), Duration::from_millis(50));
        for _ in 0..100 {
            assert_eq!(b.failed(Instant::now()), Duration::from_millis(50));
        }
        b.reset();
        assert_eq!(b.remaining(Instant::now()), None);
        assert_eq!(b.failed(Instant::now()), Duration::from_millis(10));
    }

    #[tokio::test]
    async fn target_zero_raft_requests_are_refused_without_sending() {
        let pool = Pool::new(1, RpcConfig::for_tests()).expect("pool");
        // Nothing listens there; the refusal must come before any dial.
        let req = RpcRequest::Vote(openraft::raft::VoteRequest::new(
            openraft::Vote::new(1, 1),
            None,
        ));
        let err = pool
            .call_addr("127.0.0.1:1", req, Duration::from_secs(1))
            .await
            .expect_err("refused");
        assert!(matches!(err, RpcError::TargetRequired { .. }), "{err:?}");
    }

    #[test]
    fn invalid_config_is_refused() {
        let config = RpcConfig {
            max_frame_len: 10,
            ..RpcConfig::default()
        };
        assert!(matches!(
            Pool::new(1, config),
            Err(RpcError::InvalidConfig(_))
        ));
    }
}
