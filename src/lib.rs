//! # teamster: a cluster workload scheduler
//!
//! One binary is the server, the client agent and the command-line tool. Servers keep the
//! cluster's state in a Raft log (openraft, log on sled) and run pausable scheduler workers;
//! the leader also runs the eval broker and the plan applier. Clients register nodes,
//! heartbeat, and run the placed tasks.
//!
//! Imports run one way (checked by a unit test, `layers.rs`):
//!
//! ```text
//!  cli ─▶ agent ─▶ http ─▶ server │ client ─▶ scheduler, rpc, api, jobspec, acl, keyring ─▶ util
//! ```
//!
//! - [`cli`]: one file per command group; `main` only parses and dispatches.
//! - [`agent`]: agent configuration (TOML, flags, environment), dev mode, start and stop of
//!   the server and client roles, signals.
//! - [`http`]: the Nomad-compatible HTTP API (axum): decodes requests and calls the server's
//!   service layer.
//! - [`server`]: the server role: raft node, leadership, the leader's subsystems (eval
//!   broker, blocked evals, plan queue and applier, heartbeats, reapers), the service layer
//!   (`server::endpoints`) and the scheduler workers.
//! - [`client`]: the client role: fingerprinting, heartbeats, alloc and task runners.
//! - [`scheduler`]: pure placement logic and the plan applier's check: no I/O, no clock, no
//!   global RNG.
//! - [`rpc`]: the server-to-server and client-to-server transport (length-delimited bincode
//!   frames over TCP, pooled and multiplexed connections) and the typed service calls.
//! - [`api`]: the HTTP API's client, for the CLI and the test harnesses.
//! - [`jobspec`]: job specifications as users write them; the Nomad fields teamster refuses.
//! - [`acl`]: ACL policies in Nomad's language and the checks of a compiled token, pure.
//! - [`keyring`]: the root keys' cryptography and workload identity tokens (JWTs), pure.
//! - [`util`]: the one wall clock, the randomness seam, UUIDs, config helpers.
//!
//! The replicated state itself lives in the `teamster-storage` crate.

pub mod acl;
pub mod agent;
pub mod api;
pub mod cli;
pub mod client;
pub mod gotemplate;
pub mod http;
pub mod jobspec;
pub mod keyring;
pub mod rpc;
pub mod scheduler;
pub mod server;
pub mod util;

#[cfg(test)]
mod layers;
