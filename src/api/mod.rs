//! A client of teamster's HTTP API (Nomad's `/v1` shapes): JSON in and out, Nomad's
//! plain-text error bodies turned into [`ApiError`]. The CLI talks to agents through it, and
//! the test harnesses drive clusters with it.
//!
//! It sits beside `rpc` in the layers: it knows HTTP and JSON, nothing of the server or the
//! client roles. May import: `util`.

mod client;

pub use client::{urlencode, ApiClient, ApiError, RequestScope};
