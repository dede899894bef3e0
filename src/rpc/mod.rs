//! The RPC transport on the server port (4647): length-delimited bincode frames over TCP,
//! pooled and multiplexed connections, and openraft's network on top of them.
//!
//! Servers use it for raft (AppendEntries, Vote, InstallSnapshot) and for calls forwarded to
//! the leader; client agents use it to talk to any server. Nothing that arrives on it is
//! trusted: every frame is length-capped before it is buffered, every body is decoded with a
//! bincode byte budget, and a frame that is malformed, oversized, of another protocol version
//! or addressed to another server closes *that* connection with a logged reason — every other
//! connection keeps being served.
//!
//! ```text
//!  caller ──Pool::call(target, addr, req)──▶ slot (target, lane) ──▶ Connection
//!                                                                  │ writer task: feed frames, one flush per drained queue
//!                                                                  │ reader task: completes pending oneshots by request id
//!                                            TCP (one per peer and lane)
//!                                                                  ▼
//!  RpcServer: accept loop (connection semaphore) ─▶ per connection: reader → check header/target →
//!             spawn handler per request (bounded) → response frame → the connection's writer
//! ```
//!
//! - [`frame`]: the wire format (header + bincode body), the codec and [`FrameError`].
//! - [`message`]: [`RpcRequest`] / [`RpcResponse`], the bodies, and which lane each travels on.
//! - [`service`]: the service calls (`Job.*`, `Node.*`, `Eval.*`, `Plan.Submit`,
//!   `Operator.*`) in one table, their payloads and [`ServiceError`].
//! - [`server`]: [`RpcServer`] and the [`RpcHandler`] trait the server role implements.
//! - [`client`]: [`Pool`], the per-peer connection pool every caller shares.
//! - [`raft_network`]: openraft's `RaftNetworkFactory` / `RaftNetwork` on the pool.
//!
//! # TLS
//!
//! With [`RpcConfig::tls`] every connection is mutual TLS: the listener requires a
//! certificate from the CA, reads the role it names (`server.<region>.nomad`, …) into
//! [`RequestContext::role`], and — with `verify_server_hostname` — answers a request the role
//! may not send (raft traffic, server-only calls: [`service::roles`]) with
//! [`RpcError::PermissionDenied`]. The pool presents the agent's certificate and requires
//! servers to be `server.<region>.nomad`. A failed handshake closes that connection only.
//!
//! # Adding a call
//!
//! A call of the service layer is a row appended to the table in [`service`]: its payload,
//! answer, name, route and deadline; the server's service layer serves it. Only raft and the
//! transport's own status calls are variants of [`RpcRequest`] (append at the end: the
//! variant index is the wire encoding; the matches in [`RpcRequest::kind`],
//! [`RpcRequest::requires_target`] and [`RpcRequest::lane`] are exhaustive).
//!
//! # Metrics
//!
//! Counters `teamster_rpc_requests_total{side, kind}`, `teamster_rpc_responses_total{side,
//! kind, outcome}`, `teamster_rpc_errors_total{side, reason}`,
//! `teamster_rpc_frames_refused_total{reason}`, `teamster_rpc_bytes_sent_total{side}`,
//! `teamster_rpc_bytes_received_total{side}`, and the gauge `teamster_rpc_connections{side}`,
//! where `side` is `server` for the listener's connections and `client` for the pool's.

pub mod client;
pub mod frame;
pub mod message;
pub mod raft_network;
pub mod server;
pub mod service;

mod conn;

#[cfg(test)]
mod tests;

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use client::Pool;
pub use frame::FrameError;
pub use message::{AuthedService, Lane, PeerInfo, RpcRequest, RpcResponse};
pub use raft_network::{NetworkFactory, PeerNetwork};
pub use server::{RequestContext, RpcHandler, RpcServer};
pub use service::eval::DequeuedEval;
pub use service::{ServiceCaller, ServiceError, ServiceRequest, ServiceResponse, Services};

/// Why an RPC got no answer, as the caller sees it: the transport's errors (no connection, no
/// answer in time, a frame too large, a request the server does not serve). Errors of a
/// service call's own domain are [`ServiceError`](service::ServiceError)s inside the
/// answer. It travels on the wire too (a handler answers with it), so it only holds plain
/// data, and — like every wire enum — variants are only ever appended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum RpcError {
    /// No connection to the peer: refused, or still backing off after failed connects. The
    /// request was not sent. openraft treats this as "back off before retrying".
    #[error("{peer} unreachable: {reason}")]
    Unreachable {
        /// The address that was dialled.
        peer: String,
        /// What went wrong, for the log.
        reason: String,
    },
    /// The peer did not answer within the call's deadline.
    #[error("{peer} did not answer within {after_ms} ms")]
    Timeout {
        /// The address that was dialled.
        peer: String,
        /// The deadline that elapsed, in milliseconds.
        after_ms: u64,
    },
    /// The remote handler failed (it panicked): no answer to this request.
    #[error("remote error: {0}")]
    Remote(String),
    /// The request or response does not fit in one frame.
    #[error("message of {len} bytes exceeds the {max}-byte frame limit")]
    TooLarge {
        /// The encoded frame's length.
        len: u64,
        /// The frame limit in force.
        max: u64,
    },
    /// The peer answered with a response that does not belong to the request.
    #[error("{request} answered with {response}")]
    UnexpectedResponse {
        /// The request's kind.
        request: String,
        /// The response's kind.
        response: String,
    },
    /// A request that must name its target server (raft traffic) was sent by address only.
    #[error("{kind} must be sent to a known server id, not by address")]
    TargetRequired {
        /// The request's kind.
        kind: String,
    },
    /// The server does not serve this kind of request (e.g. a raft call to a server whose
    /// raft node is not running yet).
    #[error("{kind} is not served here")]
    Unsupported {
        /// The request's kind.
        kind: String,
    },
    /// A local limit was reached (too many peers in the pool).
    #[error("overloaded: {0}")]
    Overloaded(String),
    /// An [`RpcConfig`] value is out of range.
    #[error("invalid rpc config: {0}")]
    InvalidConfig(String),
    /// The listener could not be bound.
    #[error("cannot bind rpc listener on {addr}: {reason}")]
    Bind {
        /// The address asked for.
        addr: String,
        /// The operating system's reason.
        reason: String,
    },
    /// The connection ended (EOF, reset, a malformed answer) while the call waited for its
    /// answer: the request may have been served, and its answer is lost.
    #[error("{peer}: connection lost before the answer: {reason}")]
    ConnectionLost {
        /// The address that was dialled.
        peer: String,
        /// What ended the connection.
        reason: String,
    },
    /// The peer's certificate does not allow the request (a client certificate sending raft
    /// traffic or a server-only call). Nothing was served.
    #[error("permission denied: {kind} from a {role} certificate")]
    PermissionDenied {
        /// The request's kind.
        kind: String,
        /// The role the peer's certificate names (`client`, `cli`, or `no role`).
        role: String,
    },
}

impl RpcError {
    /// `true` for failures of the transport (no answer came), as opposed to answers.
    pub fn is_transport(&self) -> bool {
        matches!(
            self,
            RpcError::Unreachable { .. }
                | RpcError::Timeout { .. }
                | RpcError::ConnectionLost { .. }
        )
    }

    /// `true` when the request certainly was not served: nothing listened, or the server
    /// does not serve it (yet). Sending it again cannot apply it twice.
    pub fn not_served(&self) -> bool {
        matches!(
            self,
            RpcError::Unreachable { .. }
                | RpcError::Unsupported { .. }
                | RpcError::TargetRequired { .. }
                | RpcError::PermissionDenied { .. }
        )
    }
}

impl From<RpcError> for ServiceError {
    /// A transport failure as the caller of a service sees it: `Unavailable` when the request
    /// was not served (safe to send again, here or elsewhere), `NoAnswer` when it may have
    /// been (no answer in time, connection lost), `Internal` for the rest.
    fn from(e: RpcError) -> ServiceError {
        let reason = e.to_string();
        if e.not_served() {
            ServiceError::Unavailable { reason }
        } else if e.is_transport() {
            ServiceError::NoAnswer { reason }
        } else {
            ServiceError::Internal { reason }
        }
    }
}

/// The largest frame (header + body, without the 4-byte length prefix) any configuration may
/// allow. Well above openraft's default `snapshot_max_chunk_size` (3 MiB) and a 300-entry
/// AppendEntries batch.
pub const MAX_FRAME_LEN_CEILING: usize = 64 << 20;

/// Room a snapshot chunk needs in a frame besides its data: header, vote, snapshot meta
/// (membership included) and bincode lengths.
pub const SNAPSHOT_CHUNK_OVERHEAD: usize = 64 << 10;

/// Tuning of the transport, shared by the server and the pool.
///
/// Every server of a cluster should use the same `max_frame_len`: a sender checks a frame
/// against its own limit, and a receiver with a smaller one closes the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcConfig {
    /// Largest accepted frame (header + body) in bytes; a larger length prefix closes the
    /// connection before anything is buffered. At most [`MAX_FRAME_LEN_CEILING`].
    pub max_frame_len: usize,
    /// Connections the server serves at once; further ones wait in the kernel's backlog.
    pub max_connections: usize,
    /// Requests in flight per connection: on the server, handlers running for one
    /// connection (the reader stops reading when full); in the pool, calls awaiting an answer
    /// on one connection (callers wait for a slot within their deadline).
    pub max_in_flight_per_conn: usize,
    /// Capacity of each connection's outgoing frame queue.
    pub write_queue: usize,
    /// Deadline for establishing a TCP connection.
    pub connect_timeout: Duration,
    /// Deadline of calls that do not carry their own.
    pub call_timeout: Duration,
    /// First wait after a failed connect before the pool dials that peer again.
    pub reconnect_backoff_min: Duration,
    /// Cap of the doubling reconnect wait.
    pub reconnect_backoff_max: Duration,
    /// Peer slots (target × lane) the pool keeps; idle dead ones are evicted when full.
    pub max_peers: usize,
    /// Mutual TLS on every connection (the agent's `tls.rpc`): the listener requires a
    /// certificate from the CA and hands its role to handlers; the pool presents this
    /// agent's certificate and checks the server's. `None`: plain TCP.
    pub tls: Option<crate::util::tls::AgentTls>,
    /// The listener's per-connection deadlines and per-client connection count (the
    /// agent's `[limits]`).
    pub limits: RpcLimits,
}

/// The RPC listener's bounds on one connection and on one client address, from the agent's
/// `[limits]` block (Nomad's names where Nomad has them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpcLimits {
    /// Connections one client IP address may hold open at once (`rpc_max_conns_per_client`,
    /// Nomad's 100; 0: no limit). A connection over it is closed at once.
    pub max_conns_per_client: usize,
    /// From accept to the TLS handshake done and the first complete frame
    /// (`rpc_handshake_timeout`, Nomad's 5 s).
    pub handshake_timeout: Duration,
    /// From a frame's first byte to its last (`rpc_frame_timeout`): a frame sent in part
    /// and left there closes its connection, and no buffer waits on it.
    pub frame_timeout: Duration,
    /// How long a connection may stay with nothing received and no request running
    /// (`rpc_idle_timeout`; 0: forever).
    pub idle_timeout: Duration,
}

impl Default for RpcLimits {
    fn default() -> Self {
        RpcLimits {
            max_conns_per_client: 100,
            handshake_timeout: Duration::from_secs(5),
            frame_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(300),
        }
    }
}

impl Default for RpcConfig {
    fn default() -> Self {
        Self {
            max_frame_len: MAX_FRAME_LEN_CEILING,
            max_connections: 1024,
            max_in_flight_per_conn: 512,
            write_queue: 256,
            connect_timeout: Duration::from_secs(2),
            call_timeout: Duration::from_secs(10),
            reconnect_backoff_min: Duration::from_millis(50),
            reconnect_backoff_max: Duration::from_secs(5),
            max_peers: 256,
            tls: None,
            limits: RpcLimits::default(),
        }
    }
}

impl RpcConfig {
    /// A profile for tests: the same logic with short deadlines and backoffs.
    pub fn for_tests() -> Self {
        Self {
            connect_timeout: Duration::from_millis(500),
            call_timeout: Duration::from_secs(5),
            reconnect_backoff_min: Duration::from_millis(10),
            reconnect_backoff_max: Duration::from_millis(200),
            ..Self::default()
        }
    }

    /// Check every value is in range; call once at startup.
    pub fn validate(&self) -> Result<(), RpcError> {
        let bad = |why: String| Err(RpcError::InvalidConfig(why));
        if self.max_frame_len < 1024 || self.max_frame_len > MAX_FRAME_LEN_CEILING {
            return bad(format!(
                "max_frame_len {} must be within 1024..={MAX_FRAME_LEN_CEILING}",
                self.max_frame_len
            ));
        }
        for (name, value) in [
            ("max_connections", self.max_connections),
            ("max_in_flight_per_conn", self.max_in_flight_per_conn),
            ("write_queue", self.write_queue),
            ("max_peers", self.max_peers),
        ] {
            if value == 0 {
                return bad(format!("{name} must be at least 1"));
            }
        }
        if self.limits.handshake_timeout.is_zero() || self.limits.frame_timeout.is_zero() {
            return bad("the handshake and frame timeouts must be positive".into());
        }
        // tokio's semaphore caps permits at usize::MAX >> 3.
        if self.max_in_flight_per_conn > 1 << 20 || self.max_connections > 1 << 20 {
            return bad("max_in_flight_per_conn and max_connections must be at most 2^20".into());
        }
        for (name, value) in [
            ("connect_timeout", self.connect_timeout),
            ("call_timeout", self.call_timeout),
            ("reconnect_backoff_min", self.reconnect_backoff_min),
        ] {
            if value.is_zero() {
                return bad(format!("{name} must be positive"));
            }
        }
        if self.reconnect_backoff_max < self.reconnect_backoff_min {
            return bad("reconnect_backoff_max must be at least reconnect_backoff_min".into());
        }
        Ok(())
    }

    /// Check that openraft's snapshot chunks fit in a frame (with room for the chunk's
    /// metadata); the raft wiring calls this with its `openraft::Config`.
    pub fn validate_for_raft(&self, raft: &openraft::Config) -> Result<(), RpcError> {
        self.validate()?;
        let need = raft
            .snapshot_max_chunk_size
            .saturating_add(SNAPSHOT_CHUNK_OVERHEAD as u64);
        if need > self.max_frame_len as u64 {
            return Err(RpcError::InvalidConfig(format!(
                "snapshot_max_chunk_size {} plus {SNAPSHOT_CHUNK_OVERHEAD} bytes of overhead \
                 exceeds max_frame_len {}",
                raft.snapshot_max_chunk_size, self.max_frame_len
            )));
        }
        Ok(())
    }
}

/// Metric names, in one place so dashboards and tests agree.
pub(crate) mod metric {
    pub const REQUESTS: &str = "teamster_rpc_requests_total";
    pub const RESPONSES: &str = "teamster_rpc_responses_total";
    pub const ERRORS: &str = "teamster_rpc_errors_total";
    pub const FRAMES_REFUSED: &str = "teamster_rpc_frames_refused_total";
    pub const BYTES_SENT: &str = "teamster_rpc_bytes_sent_total";
    pub const BYTES_RECEIVED: &str = "teamster_rpc_bytes_received_total";
    pub const CONNECTIONS: &str = "teamster_rpc_connections";
}
