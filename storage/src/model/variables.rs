//! Nomad Variables as the replicated state keeps them: a path in a namespace, its metadata
//! ([`VariableMetadata`], what lists show), and its items encrypted
//! ([`VariableData`]: AES-256-GCM under the data key of the root key it names). The state
//! never holds an item in the clear; the servers encrypt before proposing and decrypt when
//! they answer. Nomad's rules for paths and sizes are here ([`validate_path`],
//! [`validate_items`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::de;

/// The most bytes a variable's keys and values may add up to (Nomad's 64 KiB).
pub const MAX_VARIABLE_BYTES: usize = 64 * 1024;
/// The longest path.
pub const MAX_VARIABLE_PATH: usize = 128;

/// What is known of a variable without its items (Nomad's `VariableMetadata`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct VariableMetadata {
    /// Its namespace.
    #[serde(deserialize_with = "de::nullable")]
    pub namespace: String,
    /// Its path.
    #[serde(deserialize_with = "de::nullable")]
    pub path: String,
    /// Raft index of creation.
    #[serde(deserialize_with = "de::nullable")]
    pub create_index: u64,
    /// Creation time, Unix nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub create_time: i64,
    /// Raft index of the last change.
    #[serde(deserialize_with = "de::nullable")]
    pub modify_index: u64,
    /// Last change, Unix nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub modify_time: i64,
    /// Its lock, while one is held (Nomad 1.7's variable locks).
    #[serde(deserialize_with = "de::nullable")]
    pub lock: Option<VariableLock>,
}

/// The shortest lock TTL (Nomad's 10 s).
pub const MIN_LOCK_TTL: u64 = 10_000_000_000;
/// The longest lock TTL (Nomad's 24 h).
pub const MAX_LOCK_TTL: u64 = 24 * 3600 * 1_000_000_000;
/// A lock's TTL when none is given (Nomad's 15 s).
pub const DEFAULT_LOCK_TTL: u64 = 15_000_000_000;
/// A lock's delay when none is given (Nomad's 15 s).
pub const DEFAULT_LOCK_DELAY: u64 = 15_000_000_000;

/// A variable's lock (Nomad's `VariableLock`): held by whoever knows its ID, for as long as
/// they renew it within its TTL; once it lapses, nobody may take it for `lock_delay` more.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct VariableLock {
    /// Its ID: the holder's proof.
    #[serde(rename = "ID", deserialize_with = "de::nullable")]
    pub id: String,
    /// How long it lives without a renewal, in nanoseconds.
    #[serde(rename = "TTL", deserialize_with = "de::nullable")]
    pub ttl: u64,
    /// How long it stays taken after it lapsed, in nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub lock_delay: u64,
}

/// The longest lock ID a caller may choose.
pub const MAX_LOCK_ID: usize = 128;

impl VariableLock {
    /// Nomad's defaults for what is unset (a zero TTL or delay).
    pub fn canonicalize(&mut self) {
        if self.ttl == 0 {
            self.ttl = DEFAULT_LOCK_TTL;
        }
        if self.lock_delay == 0 {
            self.lock_delay = DEFAULT_LOCK_DELAY;
        }
    }

    /// Nomad's check of the TTL.
    pub fn validate(&self) -> Result<(), String> {
        if !(MIN_LOCK_TTL..=MAX_LOCK_TTL).contains(&self.ttl) {
            return Err("TTL must be between 10 seconds and 24 hours".into());
        }
        // Nomad sets no bound; a lock that stays taken for centuries is refused here.
        if self.lock_delay > MAX_LOCK_TTL {
            return Err("LockDelay must be at most 24 hours".into());
        }
        // Nor on a caller's lock ID; a long one is refused here.
        if self.id.len() > MAX_LOCK_ID {
            return Err(format!("Lock.ID is longer than {MAX_LOCK_ID} bytes"));
        }
        Ok(())
    }
}

/// A variable's items, encrypted.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct VariableData {
    /// The root key whose data key encrypted them.
    #[serde(rename = "KeyID", deserialize_with = "de::nullable")]
    pub key_id: String,
    /// The AES-GCM nonce.
    #[serde(deserialize_with = "de::nullable")]
    pub nonce: Vec<u8>,
    /// The items (JSON), encrypted, with the tag.
    #[serde(deserialize_with = "de::nullable")]
    pub ciphertext: Vec<u8>,
}

/// A variable as the state keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct VariableEncrypted {
    /// Its metadata.
    #[serde(deserialize_with = "de::nullable")]
    pub meta: VariableMetadata,
    /// Its items, encrypted.
    #[serde(deserialize_with = "de::nullable")]
    pub data: VariableData,
}

/// The bytes that bind a variable's ciphertext to its place: a ciphertext moved to another
/// path or namespace does not decrypt.
pub fn variable_aad(namespace: &str, path: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(namespace.len() + path.len() + 1);
    aad.extend_from_slice(namespace.as_bytes());
    aad.push(0);
    aad.extend_from_slice(path.as_bytes());
    aad
}

/// Nomad's path rules: 1 to 128 of `a-zA-Z0-9-_~/`; under the reserved `nomad/` only
/// `nomad/jobs[/…]`, `nomad/sentinel[/…]` and `nomad/job-templates/<name>`.
pub fn validate_path(path: &str) -> Result<(), String> {
    let valid = !path.is_empty()
        && path.len() <= MAX_VARIABLE_PATH
        && path
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'~' | b'/'));
    if !valid {
        return Err(format!("invalid path {path:?}"));
    }
    let parts: Vec<&str> = path.split('/').collect();
    if parts[0] != "nomad" {
        return Ok(());
    }
    match parts.as_slice() {
        ["nomad", "jobs", ..] | ["nomad", "sentinel", ..] => Ok(()),
        ["nomad", "job-templates", name] if !name.is_empty() => Ok(()),
        ["nomad", "job-templates", ..] => Err(
            "\"nomad/job-templates\" is a reserved top-level directory path, but you may write variables to \"nomad/job-templates/*\"".to_string()
        ),
        ["nomad"] => Err("\"nomad\" is a reserved top-level directory path, but you may write variables to \"nomad/jobs\", \"nomad/job-templates\", or below".to_string()),
        _ => Err(format!(
            "only paths at \"nomad/jobs\", \"nomad/job-templates\" or below are valid paths under the top-level \"nomad\" directory, not {path:?}"
        )),
    }
}

/// Nomad's item rules: at least one, at most [`MAX_VARIABLE_BYTES`] of keys and values.
pub fn validate_items(items: &BTreeMap<String, String>) -> Result<(), String> {
    if items.is_empty() {
        return Err("empty variables are invalid".into());
    }
    let size: usize = items.iter().map(|(k, v)| k.len() + v.len()).sum();
    if size > MAX_VARIABLE_BYTES {
        return Err("variables are limited to 64KiB in total size".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_items_follow_nomad_s_rules() {
        for ok in [
            "a",
            "app/db",
            "nomad/jobs",
            "nomad/jobs/web/g/t",
            "nomad/job-templates/x",
            "a~b-c_d",
        ] {
            assert_eq!(validate_path(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "a b",
            "a.b",
            "nomad",
            "nomad/other",
            "nomad/job-templates",
            "nomad/job-templates/a/b",
        ] {
            assert!(validate_path(bad).is_err(), "{bad}");
        }
        assert!(validate_path(&"a".repeat(129)).is_err());
        assert!(validate_items(&BTreeMap::new()).is_err());
        let big = BTreeMap::from([("k".to_string(), "v".repeat(MAX_VARIABLE_BYTES))]);
        assert!(validate_items(&big).is_err());
        let fits = BTreeMap::from([("k".to_string(), "v".repeat(MAX_VARIABLE_BYTES - 1))]);
        assert!(validate_items(&fits).is_ok());
    }
}
