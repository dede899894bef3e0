//! Query-string conventions: Go-style booleans and durations, blocking-query parameters,
//! `stale`, `prefix`, `region` and `namespace`.

use std::collections::HashMap;
use std::time::Duration;

use super::error::ApiError;
pub use crate::util::go::{parse_go_bool, parse_go_duration};

/// The longest a blocking query waits, and its default when `index` is given without `wait`.
pub const MAX_BLOCKING_WAIT: Duration = Duration::from_secs(300);

/// The common read options of a request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueryOptions {
    /// Answer from local state on any server.
    pub stale: bool,
    /// Blocking query: wait until the data's index passes this.
    pub min_index: u64,
    /// How long a blocking query may wait (capped at [`MAX_BLOCKING_WAIT`]).
    pub wait: Duration,
    /// ID prefix filter.
    pub prefix: String,
    /// Namespace ("default" when absent).
    pub namespace: String,
    /// Region ("global" when absent).
    pub region: String,
}

impl QueryOptions {
    /// Read the options from a query map, with Nomad's messages for bad values.
    pub fn parse(q: &HashMap<String, String>) -> Result<QueryOptions, ApiError> {
        let stale = match q.get("stale") {
            None => false,
            Some(v) if v.is_empty() => true,
            Some(v) => parse_go_bool(v).ok_or_else(|| {
                ApiError::bad_request("Expect `true` or `false` for `stale` query string parameter")
            })?,
        };
        let min_index = match q.get("index") {
            None => 0,
            Some(v) => v
                .parse::<u64>()
                .map_err(|_| ApiError::bad_request("Invalid index"))?,
        };
        let wait = match q.get("wait") {
            None => MAX_BLOCKING_WAIT,
            Some(v) => parse_go_duration(v)
                .ok_or_else(|| ApiError::bad_request("Invalid wait time"))?
                .min(MAX_BLOCKING_WAIT),
        };
        Ok(QueryOptions {
            stale,
            min_index,
            wait,
            prefix: q.get("prefix").cloned().unwrap_or_default(),
            namespace: q
                .get("namespace")
                .filter(|s| !s.is_empty())
                .cloned()
                .unwrap_or_else(|| "default".to_string()),
            region: q
                .get("region")
                .filter(|s| !s.is_empty())
                .cloned()
                .unwrap_or_else(|| "global".to_string()),
        })
    }

    /// Whether an object of `namespace` is listed: the request's namespace, or any with
    /// Nomad's wildcard `*`.
    pub fn in_namespace(&self, namespace: &str) -> bool {
        self.namespace == "*" || self.namespace == namespace
    }

    /// A field-selection flag, as Nomad's `parseBool` reads one: absent or empty is `None`
    /// (the default applies), else a Go boolean (`?resources=true`).
    pub fn opt_flag(q: &HashMap<String, String>, name: &str) -> Result<Option<bool>, ApiError> {
        match q.get(name).map(String::as_str) {
            None | Some("") => Ok(None),
            Some(v) => parse_go_bool(v).map(Some).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "Expect `true` or `false` for `{name}` query string parameter"
                ))
            }),
        }
    }

    /// A query flag that must be a Go boolean when present (e.g. `purge`).
    pub fn flag(q: &HashMap<String, String>, name: &str) -> Result<bool, ApiError> {
        match q.get(name) {
            None => Ok(false),
            Some(v) if v.is_empty() => Ok(true),
            Some(v) => parse_go_bool(v).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "Expect `true` or `false` for `{name}` query string parameter"
                ))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn go_booleans() {
        for t in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(t), Some(true), "{t}");
        }
        for f in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(f), Some(false), "{f}");
        }
        assert_eq!(parse_go_bool("yes"), None);
        assert_eq!(parse_go_bool("tRuE"), None);
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_go_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_go_duration("10"), None);
        assert_eq!(parse_go_duration("s"), None);
        assert_eq!(parse_go_duration("5 s"), None);
        assert_eq!(parse_go_duration(""), None);
    }

    #[test]
    fn options_have_nomads_defaults_and_messages() {
        let o = QueryOptions::parse(&q(&[])).unwrap();
        assert!(!o.stale);
        assert_eq!(o.namespace, "default");
        assert_eq!(o.region, "global");
        assert_eq!(o.min_index, 0);

        let o =
            QueryOptions::parse(&q(&[("stale", ""), ("index", "42"), ("wait", "10m")])).unwrap();
        assert!(o.stale);
        assert_eq!(o.min_index, 42);
        assert_eq!(o.wait, MAX_BLOCKING_WAIT, "capped at 5 minutes");

        let e = QueryOptions::parse(&q(&[("stale", "maybe")])).unwrap_err();
        assert_eq!(
            e.message,
            "Expect `true` or `false` for `stale` query string parameter"
        );
        assert_eq!(
            QueryOptions::parse(&q(&[("index", "-1")]))
                .unwrap_err()
                .message,
            "Invalid index"
        );
        assert_eq!(
            QueryOptions::parse(&q(&[("wait", "soon")]))
                .unwrap_err()
                .message,
            "Invalid wait time"
        );
        assert!(QueryOptions::flag(&q(&[("purge", "True")]), "purge").unwrap());
        assert!(QueryOptions::flag(&q(&[("purge", "nah")]), "purge").is_err());
    }
}
