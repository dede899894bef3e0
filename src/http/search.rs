//! Nomad's search: `POST|PUT /v1/search` (`{Prefix, Context, Namespace}`: IDs that start with
//! the prefix) and `POST|PUT /v1/search/fuzzy` (`{Text, Context, Namespace}`: names that
//! contain the text, case-insensitively, with the scope they belong to: a job's groups and
//! tasks, allocations by name, nodes by name). Contexts `jobs`, `evals`, `allocs`, `nodes`,
//! `deployment`, `plugins`, `volumes`, `namespaces` and `all`; teamster has no deployments,
//! plugins or volumes, so those contexts are always empty. At most 20 matches per context,
//! with `Truncations` saying where more were cut. Answered from this server's state with the
//! usual read consistency (`?stale` for the local state).
//!
//! The namespace searched is the query's `?namespace=`, else the body's `Namespace`, else
//! `default` (Nomad's precedence), and the caller's token must read jobs there: the ACL
//! layer before the handler checked only the query's. `*` searches the namespaces the token
//! may read.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::response::Response;
use axum::Extension;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use teamster_storage::state::{Snapshot, Table};

use super::error::ApiError;
use super::jobs::decode_body;
use super::query::QueryOptions;
use super::read::{json_read, ReadMeta};
use super::HttpContext;
use crate::acl::{Capability, Need};
use crate::server::acl::Identity;

/// Matches kept per context (Nomad's truncation limit).
pub const MAX_MATCHES: usize = 20;
/// The shortest fuzzy search text (Nomad's `min_term_length`).
pub const MIN_FUZZY_TEXT: usize = 2;

/// The contexts searched by `all`, in Nomad's names.
const CONTEXTS: &[&str] = &[
    "jobs",
    "evals",
    "allocs",
    "nodes",
    "deployment",
    "plugins",
    "volumes",
    "namespaces",
];

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct SearchRequest {
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    text: String,
    #[serde(default)]
    context: String,
    #[serde(default)]
    namespace: String,
}

impl SearchRequest {
    /// The namespace searched, as Nomad reads it: the query's `?namespace=` when given,
    /// else the body's `Namespace`, else `default`; and refused unless `identity` may read
    /// jobs there (the ACL check before the handler saw only the query). With `*`, the
    /// namespaces it may read.
    fn namespaces(
        &self,
        q: &HashMap<String, String>,
        identity: &Identity,
        snap: &Snapshot,
    ) -> Result<Vec<String>, ApiError> {
        let ns = q
            .get("namespace")
            .filter(|n| !n.is_empty())
            .cloned()
            .or_else(|| Some(self.namespace.clone()).filter(|n| !n.is_empty()))
            .unwrap_or_else(|| "default".into());
        let readable = |n: &str| {
            identity
                .acl
                .allows(&Need::Namespace(n.to_owned(), &[Capability::ReadJob]))
        };
        if ns == "*" {
            return Ok(snap
                .namespaces()
                .iter()
                .map(|n| n.name.clone())
                .filter(|n| readable(n))
                .collect());
        }
        if !readable(&ns) {
            return Err(ApiError::forbidden("Permission denied"));
        }
        Ok(vec![ns])
    }
}

/// The contexts a request asks for; an unknown one is a 400.
fn contexts(asked: &str, fuzzy: bool) -> Result<Vec<&'static str>, ApiError> {
    let fuzzy_ok = ["jobs", "allocs", "nodes", "plugins", "namespaces"];
    match asked {
        "" | "all" => Ok(CONTEXTS.to_vec()),
        c => CONTEXTS
            .iter()
            .find(|k| **k == c && (!fuzzy || fuzzy_ok.contains(k)))
            .map(|k| vec![*k])
            .ok_or_else(|| ApiError::bad_request(format!("context {c:?} is not searchable"))),
    }
}

/// Up to [`MAX_MATCHES`] of `items`, and whether more were cut.
fn capped<T>(items: impl Iterator<Item = T>) -> (Vec<T>, bool) {
    let mut out: Vec<T> = items.take(MAX_MATCHES + 1).collect();
    let cut = out.len() > MAX_MATCHES;
    out.truncate(MAX_MATCHES);
    (out, cut)
}

/// IDs in `context` that start with `prefix`, in the namespaces `ns`.
fn prefix_matches(
    snap: &Snapshot,
    context: &str,
    prefix: &str,
    ns: &[String],
) -> (Vec<Value>, bool) {
    let in_ns = |n: &str| ns.iter().any(|x| x == n);
    match context {
        "jobs" => capped(
            ns.iter()
                .flat_map(|n| snap.jobs_by_prefix(n, prefix))
                .map(|j| json!(j.id)),
        ),
        "evals" => capped(
            snap.evals_by_prefix(prefix)
                .filter(|e| in_ns(e.namespace.as_str()))
                .map(|e| json!(e.id)),
        ),
        "allocs" => capped(
            snap.allocs_by_prefix(prefix)
                .filter(|a| in_ns(a.namespace.as_str()))
                .map(|a| json!(a.id)),
        ),
        "nodes" => capped(snap.nodes_by_prefix(prefix).map(|n| json!(n.id))),
        "namespaces" => capped(
            std::iter::once("default")
                .filter(|n| n.starts_with(prefix))
                .map(|n| json!(n)),
        ),
        _ => (Vec::new(), false),
    }
}

/// Names in `context` that contain `text` (lowercase), with their scope.
fn fuzzy_matches(
    snap: &Snapshot,
    context: &str,
    text: &str,
    ns: &[String],
    out: &mut Map<String, Value>,
    cut: &mut Map<String, Value>,
) {
    let hit = |s: &str| s.to_lowercase().contains(text);
    let in_ns = |n: &str| ns.iter().any(|x| x == n);
    let mut put = |key: &str, items: Vec<Value>| {
        let (items, more) = capped(items.into_iter());
        if !items.is_empty() {
            out.insert(key.into(), Value::Array(items));
        }
        cut.insert(key.into(), Value::Bool(more));
    };
    match context {
        "jobs" => {
            let jobs: Vec<_> = snap
                .jobs()
                .filter(|j| in_ns(j.namespace.as_str()))
                .collect();
            put(
                "jobs",
                jobs.iter()
                    .filter(|j| hit(j.id.as_str()) || hit(&j.name))
                    .map(|j| json!({ "ID": j.id, "Scope": [j.namespace] }))
                    .collect(),
            );
            put(
                "groups",
                jobs.iter()
                    .flat_map(|j| j.task_groups.iter().map(move |g| (j, g)))
                    .filter(|(_, g)| hit(&g.name))
                    .map(|(j, g)| json!({ "ID": g.name, "Scope": [j.namespace, j.id] }))
                    .collect(),
            );
            put(
                "tasks",
                jobs.iter()
                    .flat_map(|j| {
                        j.task_groups
                            .iter()
                            .flat_map(move |g| g.tasks.iter().map(move |t| (j, g, t)))
                    })
                    .filter(|(_, _, t)| hit(&t.name))
                    .map(|(j, g, t)| json!({ "ID": t.name, "Scope": [j.namespace, j.id, g.name] }))
                    .collect(),
            );
        }
        "allocs" => put(
            "allocs",
            snap.allocs()
                .filter(|a| in_ns(a.namespace.as_str()) && hit(&a.name))
                .map(|a| json!({ "ID": a.name, "Scope": [a.namespace, a.id] }))
                .collect(),
        ),
        "nodes" => put(
            "nodes",
            snap.nodes()
                .filter(|n| hit(&n.name))
                .map(|n| json!({ "ID": n.name, "Scope": [n.id] }))
                .collect(),
        ),
        "namespaces" => put(
            "namespaces",
            std::iter::once("default")
                .filter(|n| hit(n))
                .map(|n| json!({ "ID": n, "Scope": [] }))
                .collect(),
        ),
        _ => {}
    }
}

const TABLES: &[Table] = &[Table::Jobs, Table::Evals, Table::Allocs, Table::Nodes];

/// A search's answer with the read's meta, in the body too as Nomad gives it.
fn answer(matches: Map<String, Value>, cut: Map<String, Value>, meta: ReadMeta) -> Response {
    json_read(
        json!({ "Matches": matches, "Truncations": cut, "Index": meta.index,
                "KnownLeader": meta.known_leader, "LastContact": meta.last_contact_ms }),
        meta,
    )
}

/// `POST|PUT /v1/search`.
pub async fn prefix(
    State(ctx): State<HttpContext>,
    Extension(identity): Extension<Identity>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let req: SearchRequest = decode_body(&body)?;
    let asked = contexts(&req.context, false)?;
    let (snap, meta) = ctx.read(&opts, TABLES).await?;
    let ns = req.namespaces(&q, &identity, &snap)?;
    let mut matches = Map::new();
    let mut cut = Map::new();
    for c in asked {
        let (found, more) = prefix_matches(&snap, c, &req.prefix, &ns);
        matches.insert(c.into(), Value::Array(found));
        cut.insert(c.into(), Value::Bool(more));
    }
    Ok(answer(matches, cut, meta))
}

/// `POST|PUT /v1/search/fuzzy`.
pub async fn fuzzy(
    State(ctx): State<HttpContext>,
    Extension(identity): Extension<Identity>,
    Query(q): Query<HashMap<String, String>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let opts = QueryOptions::parse(&q)?;
    let req: SearchRequest = decode_body(&body)?;
    let asked = contexts(&req.context, true)?;
    let text = req.text.to_lowercase();
    if text.chars().count() < MIN_FUZZY_TEXT {
        return Err(ApiError::bad_request(format!(
            "fuzzy search query must be at least {MIN_FUZZY_TEXT} characters"
        )));
    }
    let (snap, meta) = ctx.read(&opts, TABLES).await?;
    let ns = req.namespaces(&q, &identity, &snap)?;
    let mut matches = Map::new();
    let mut cut = Map::new();
    for c in asked {
        fuzzy_matches(&snap, c, &text, &ns, &mut matches, &mut cut);
    }
    Ok(answer(matches, cut, meta))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contexts_are_nomads_and_all_means_every_one() {
        assert_eq!(contexts("jobs", false).unwrap(), ["jobs"]);
        assert_eq!(contexts("all", false).unwrap().len(), CONTEXTS.len());
        assert!(
            contexts("evals", true).is_err(),
            "no fuzzy search of evaluations"
        );
        assert!(contexts("bogus", false).is_err());
    }

    #[test]
    fn matches_are_capped_at_twenty_with_the_truncation_said() {
        let (items, cut) = capped(0..25);
        assert_eq!((items.len(), cut), (20, true));
        let (items, cut) = capped(0..20);
        assert_eq!((items.len(), cut), (20, false));
    }
}
