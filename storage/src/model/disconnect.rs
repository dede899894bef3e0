//! A task group's `disconnect` block (Nomad's `DisconnectStrategy`): how long the servers
//! wait for a client that stopped heartbeating before its allocations count as lost, whether
//! they are replaced meanwhile, and which copy survives when the client comes back; and the
//! allocation state history (`AllocStates`) that records when an allocation became
//! `unknown`.

use serde::{Deserialize, Serialize};

use crate::model::de;

/// `reconcile` values.
pub const RECONCILE_BEST_SCORE: &str = "best_score";
/// Keep the allocation that ran longest.
pub const RECONCILE_LONGEST_RUNNING: &str = "longest_running";
/// Keep the original.
pub const RECONCILE_KEEP_ORIGINAL: &str = "keep_original";
/// Keep the replacement.
pub const RECONCILE_KEEP_REPLACEMENT: &str = "keep_replacement";
/// Every `reconcile` value.
pub const RECONCILE_STRATEGIES: &[&str] = &[
    RECONCILE_BEST_SCORE,
    RECONCILE_LONGEST_RUNNING,
    RECONCILE_KEEP_ORIGINAL,
    RECONCILE_KEEP_REPLACEMENT,
];

/// The longest `lost_after` or `stop_on_client_after` accepted (a week): a window longer
/// than that is a mistake, not a plan.
pub const MAX_DISCONNECT_WINDOW_NANOS: u64 = 7 * 24 * 3600 * 1_000_000_000;

/// A group's `disconnect` block.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct DisconnectStrategy {
    /// How long an allocation on a disconnected node stays `unknown` before it is `lost`
    /// (nanoseconds; 0: lost at once, the node goes `down`).
    #[serde(deserialize_with = "de::nullable")]
    pub lost_after: u64,
    /// Whether an `unknown` allocation is replaced while its node is away (default true).
    pub replace: Option<bool>,
    /// Which copy survives a reconnect: `best_score` (default), `longest_running`,
    /// `keep_original`, `keep_replacement`.
    #[serde(deserialize_with = "de::nullable")]
    pub reconcile: String,
    /// The client stops the group's allocations after this long without the servers
    /// (nanoseconds).
    pub stop_on_client_after: Option<u64>,
}

impl DisconnectStrategy {
    /// Whether unknown allocations are replaced.
    pub fn replace(&self) -> bool {
        self.replace.unwrap_or(true)
    }

    /// The reconcile strategy, `best_score` when unset.
    pub fn reconcile(&self) -> &str {
        if self.reconcile.is_empty() {
            RECONCILE_BEST_SCORE
        } else {
            &self.reconcile
        }
    }

    /// Nomad's checks, with `at` naming the group.
    pub fn validate(&self, at: &str, errors: &mut Vec<String>) {
        if !RECONCILE_STRATEGIES.contains(&self.reconcile()) {
            errors.push(format!(
                "{at}: disconnect.reconcile {:?} is not one of {}",
                self.reconcile,
                RECONCILE_STRATEGIES.join(", ")
            ));
        }
        if self.lost_after > 0 && self.stop_on_client_after.is_some() {
            errors.push(format!(
                "{at}: disconnect.lost_after and disconnect.stop_on_client_after cannot both be set"
            ));
        }
        if self.lost_after > MAX_DISCONNECT_WINDOW_NANOS {
            errors.push(format!("{at}: disconnect.lost_after must be at most 168h"));
        }
        if self
            .stop_on_client_after
            .is_some_and(|s| s == 0 || s > MAX_DISCONNECT_WINDOW_NANOS)
        {
            errors.push(format!(
                "{at}: disconnect.stop_on_client_after must be more than 0 and at most 168h"
            ));
        }
    }
}

/// The field an [`AllocState`] records.
pub const ALLOC_STATE_CLIENT_STATUS: &str = "ClientStatus";

/// One entry of an allocation's state history (Nomad's `AllocState`): the servers append
/// one when they mark it `unknown` and when it reconnects.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AllocState {
    /// The field (`ClientStatus`).
    #[serde(deserialize_with = "de::nullable")]
    pub field: String,
    /// Its new value.
    #[serde(deserialize_with = "de::nullable")]
    pub value: String,
    /// When, Unix nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub time: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_replace_and_pick_the_best_score() {
        let d = DisconnectStrategy::default();
        assert!(d.replace());
        assert_eq!(d.reconcile(), RECONCILE_BEST_SCORE);
        let mut errors = Vec::new();
        d.validate("group \"g\"", &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
    }

    #[test]
    fn bad_values_are_named() {
        let d = DisconnectStrategy {
            lost_after: 1,
            reconcile: "coin_flip".into(),
            stop_on_client_after: Some(5),
            ..Default::default()
        };
        let mut errors = Vec::new();
        d.validate("group \"g\"", &mut errors);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].contains("disconnect.reconcile \"coin_flip\""));
        assert!(errors[1].contains("cannot both be set"));
        let long = DisconnectStrategy {
            lost_after: MAX_DISCONNECT_WINDOW_NANOS + 1,
            ..Default::default()
        };
        let mut errors = Vec::new();
        long.validate("g", &mut errors);
        assert!(errors[0].contains("at most 168h"), "{errors:?}");
    }
}
