//! How reads are answered: `stale` from the local state, otherwise consistently (the leader
//! names an index, this server waits until it has applied it), and as blocking queries when
//! `index` is given (wait until one of the read's tables passes it, up to `wait` plus up to
//! `wait/16` of jitter). Answers carry Nomad's `X-Nomad-Index`, `X-Nomad-KnownLeader` and
//! `X-Nomad-LastContact` headers.

use std::time::Duration;

use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use axum::Json;
use rand::Rng;
use serde::Serialize;
use teamster_storage::state::{Snapshot, Table};

use super::error::ApiError;
use super::query::QueryOptions;
use super::HttpContext;
use crate::server::raft::RaftNodeError;

/// What a read answered from, for the response headers.
#[derive(Debug, Clone, Copy)]
pub struct ReadMeta {
    /// The highest index of the tables the read looked at.
    pub index: u64,
    /// Whether this server knows a leader (an isolated leader, whose lease is lost, does not).
    pub known_leader: bool,
    /// On the leader, milliseconds since a quorum last acknowledged it.
    pub last_contact_ms: u64,
}

impl HttpContext {
    /// A snapshot to answer a read of `tables` from, honouring `stale` and blocking-query
    /// options.
    pub async fn read(
        &self,
        opts: &QueryOptions,
        tables: &[Table],
    ) -> Result<(Snapshot, ReadMeta), ApiError> {
        let node = self.node()?;
        let mut snap = if opts.stale {
            node.state().snapshot()
        } else {
            node.consistent_snapshot().await.map_err(node_error)?
        };
        if opts.min_index > 0 && snap.max_index(tables) <= opts.min_index {
            // Not held across the wait: an old snapshot pins the state's old tree nodes, so
            // every write meanwhile would copy its path instead of updating in place.
            drop(snap);
            let jitter = if opts.wait >= Duration::from_millis(16) {
                self.rng()
                    .with(|rng| rng.gen_range(Duration::ZERO..opts.wait / 16))
            } else {
                Duration::ZERO
            };
            let r = node
                .state()
                .wait_tables(tables, opts.min_index, opts.wait + jitter)
                .await
                .map_err(|e| ApiError::internal(e.to_string()))?;
            snap = r.snapshot;
        }
        let meta = ReadMeta {
            index: snap.max_index(tables).max(1),
            known_leader: node.leader().is_some() && !node.lease_lost(),
            last_contact_ms: node.millis_since_quorum_ack(),
        };
        Ok((snap, meta))
    }
}

/// A raft node error as an API error.
pub fn node_error(e: RaftNodeError) -> ApiError {
    match e {
        RaftNodeError::NoLeader | RaftNodeError::NotLeader { .. } => ApiError::no_leader(),
        e => ApiError::internal(e.to_string()),
    }
}

/// A JSON answer with the read's meta headers.
pub fn json_read<T: Serialize>(value: T, meta: ReadMeta) -> Response {
    with_read_meta(Json(value).into_response(), meta)
}

/// An answer already serialized as JSON, with the read's meta headers.
pub fn json_bytes_read(json: Vec<u8>, meta: ReadMeta) -> Response {
    let resp = (
        [(
            axum::http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        json,
    )
        .into_response();
    with_read_meta(resp, meta)
}

fn with_read_meta(mut resp: Response, meta: ReadMeta) -> Response {
    let h = resp.headers_mut();
    h.insert("X-Nomad-Index", HeaderValue::from(meta.index));
    h.insert(
        "X-Nomad-KnownLeader",
        HeaderValue::from_static(if meta.known_leader { "true" } else { "false" }),
    );
    h.insert(
        "X-Nomad-LastContact",
        HeaderValue::from(meta.last_contact_ms),
    );
    resp
}

/// A JSON answer to a write, with `X-Nomad-Index`.
pub fn json_write<T: Serialize>(value: T, index: u64) -> Response {
    let mut resp = Json(value).into_response();
    resp.headers_mut()
        .insert("X-Nomad-Index", HeaderValue::from(index));
    resp
}
