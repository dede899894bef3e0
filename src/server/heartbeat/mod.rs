//! Leader-only heartbeat timers: a node that stops heartbeating is marked `down`.
//!
//! Nomad's semantics (reference/nomad-semantics.md §7):
//! - the TTL handed to a node is `base + uniform[0, base)` with
//!   `base = max(tracked_nodes / max_heartbeats_per_second, min_heartbeat_ttl)`, so the
//!   leader receives about `max_heartbeats_per_second` heartbeats at any cluster size;
//! - the server's timer is that TTL plus `heartbeat_grace`;
//! - a new leader gives every node that is not down `failover_heartbeat_ttl`, so clients have
//!   time to find it;
//! - an expired timer marks the node down and creates evaluations for every job with
//!   allocations on it and every system job (see
//!   [`node_evals`](crate::server::evals::node_evals)).
//!
//! - [`core`](self::core): [`HeartbeatTable`], the sans-IO core (deadlines in, expired nodes
//!   out), and [`HeartbeatError`].
//! - [`shell`]: [`Heartbeats`], a [`LeaderDuty`] that enables the table on establish, runs
//!   one expiry task (the deadline loop of the [`LeaderService`]), and clears every timer on
//!   revoke — so a server that lost leadership never fires a status change.
//!
//! Metrics: `teamster_heartbeat_active` (gauge), `teamster_heartbeat_resets_total`,
//! `teamster_heartbeat_invalidate_total`.
//!
//! May import: the bottom of `server` (`config`, `raft`, `evals`, `leader`,
//! `leader_service`) and `util`; never another subsystem, `endpoints` or `worker`.
//!
//! [`LeaderDuty`]: crate::server::leader::LeaderDuty
//! [`LeaderService`]: crate::server::leader_service::LeaderService

pub mod core;
pub mod shell;

pub use self::core::{HeartbeatError, HeartbeatTable};
pub use self::shell::Heartbeats;
