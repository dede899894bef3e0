//! # teamster: a cluster workload scheduler
//!
//! One binary is the server, the client agent and the command-line tool. Servers keep the
//! cluster's state in a Raft log (openraft, log on sled) and run pausable scheduler workers;
//! the leader also runs the eval broker and the plan applier. Clients register nodes,
//! heartbeat, and run the placed tasks.
//!
//! - [`cli`]: one file per command group; `main` only parses and dispatches.
//! - [`agent`]: agent configuration (TOML, flags, environment), dev mode, start and stop of
//!   the server and client roles, signals.
//! - [`http`]: the Nomad-compatible HTTP API (axum).
//! - [`rpc`]: the server-to-server and client-to-server transport: length-delimited bincode
//!   frames over TCP, pooled and multiplexed connections.
//! - [`server`]: the server role: raft node, leadership, eval broker, workers, plan applier.
//! - [`scheduler`]: pure placement logic: no I/O, no clock, no global RNG.
//! - [`client`]: the client role: fingerprinting, heartbeats, alloc and task runners.
//! - [`util`]: the injectable wall clock and UUIDs.
//!
//! The replicated state itself lives in the `teamster-storage` crate.

pub mod agent;
pub mod cli;
pub mod client;
pub mod http;
pub mod rpc;
pub mod scheduler;
pub mod server;
pub mod util;
