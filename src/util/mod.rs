//! Small shared pieces every layer may use, and that import nothing of the crate: the
//! injectable wall clock ([`clock`]), the seedable randomness seam ([`rng`]), UUIDs
//! ([`ids`]), human durations in configuration files ([`duration_str`]), Go's booleans and
//! durations ([`go`]), peer addresses
//! ([`net`]), connections counted per client address ([`conn_limit`]), files opened
//! confined beneath a directory ([`beneath`]), the crash points of crash tests ([`crash`]), the HCL nesting guard of every HCL parser ([`hcl_nesting`]), the rustls
//! configurations and certificate roles of both ports ([`tls`]) and the error a configuration
//! section's `validate()` returns
//! ([`InvalidSetting`]).
//!
//! Every timer is `tokio::time`; only wall-clock *stamps* (CreateTime, SubmitTime, events)
//! come from a [`clock::Clock`], and every random choice from an [`rng::RngSource`], so tests
//! can fix both.
//!
//! May import: nothing of this crate (it is the bottom layer), and `teamster-storage` only
//! for plain data types.

pub mod beneath;
pub mod clock;
pub mod conn_limit;
pub mod crash;
pub mod duration_str;
pub mod go;
pub mod hcl_nesting;
pub mod ids;
pub mod migrate;
pub mod net;
pub mod procfs;
pub mod rng;
pub mod tls;

pub use clock::{system_clock, Clock, SharedClock, SystemClock};
pub use ids::new_uuid;
pub use rng::RngSource;

/// The message a panic carried (`panic!("…")` or a formatted one), if it is text.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
}

/// A configuration value a section's `validate()` refused: the dotted key as written in the
/// agent's TOML file (`server.raft.election_timeout`) and what is wrong with it. The agent
/// adds the file name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{key}`: {reason}")]
pub struct InvalidSetting {
    /// The dotted key.
    pub key: &'static str,
    /// What is wrong and what is allowed.
    pub reason: String,
}

impl InvalidSetting {
    /// A refusal of `key`.
    pub fn new(key: &'static str, reason: impl Into<String>) -> InvalidSetting {
        InvalidSetting {
            key,
            reason: reason.into(),
        }
    }
}
