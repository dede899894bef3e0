//! ACL objects in the replicated state (Nomad's `ACLPolicy` and `ACLToken`): named policies
//! whose rules are text in Nomad's policy language (parsed and checked by the server before
//! they are written, compiled by whoever resolves a token), and tokens that name policies.
//!
//! A token's `SecretID` is the credential; its `AccessorID` is the public handle lists and
//! logs use. The bootstrap token is a `management` token, which bypasses every check.

use serde::{Deserialize, Serialize};

use crate::model::de;
use crate::model::namespace::check_name_and_description;
use crate::model::Timestamp;

/// Nomad's token type that bypasses every check.
pub const TOKEN_TYPE_MANAGEMENT: &str = "management";
/// Nomad's token type whose rights are its policies'.
pub const TOKEN_TYPE_CLIENT: &str = "client";
/// The policy that tokenless requests get (whatever it grants, if an operator wrote it).
pub const ANONYMOUS_POLICY: &str = "anonymous";
/// The longest token name (Nomad's).
pub const MAX_TOKEN_NAME_LEN: usize = 256;

/// A named ACL policy (Nomad's `ACLPolicy`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AclPolicy {
    /// Its name: 1 to 128 letters, digits and dashes.
    #[serde(deserialize_with = "de::nullable")]
    pub name: String,
    /// What it is for.
    #[serde(deserialize_with = "de::nullable")]
    pub description: String,
    /// The rules, HCL or JSON in Nomad's policy language, as submitted.
    #[serde(deserialize_with = "de::nullable")]
    pub rules: String,
    /// Raft index of creation (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub create_index: u64,
    /// Raft index of the last change (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub modify_index: u64,
}

impl AclPolicy {
    /// Nomad's name rule (`^[a-zA-Z0-9-]{1,128}$`) and a description of at most 256
    /// characters. The rules are checked by the policy parser, not here.
    pub fn validate_name(&self) -> Result<(), String> {
        check_name_and_description(&self.name, &self.description)
    }

    /// Whether it is the same but for its indexes.
    pub fn same_as(&self, other: &AclPolicy) -> bool {
        self.name == other.name
            && self.description == other.description
            && self.rules == other.rules
    }
}

/// An ACL token (Nomad's `ACLToken`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct AclToken {
    /// The public handle (a UUID).
    #[serde(rename = "AccessorID", deserialize_with = "de::nullable")]
    pub accessor_id: String,
    /// The credential (a UUID). Never logged.
    #[serde(rename = "SecretID", deserialize_with = "de::nullable")]
    pub secret_id: String,
    /// A human name.
    #[serde(deserialize_with = "de::nullable")]
    pub name: String,
    /// `client` or `management`.
    #[serde(deserialize_with = "de::nullable")]
    pub r#type: String,
    /// The policies of a client token, by name.
    #[serde(deserialize_with = "de::nullable")]
    pub policies: Vec<String>,
    /// Whether it is replicated to every region (this cluster is one region: recorded only).
    #[serde(deserialize_with = "de::nullable")]
    pub global: bool,
    /// When it was made.
    pub create_time: Timestamp,
    /// When it stops working; `None` never.
    #[serde(deserialize_with = "de::nullable")]
    pub expiration_time: Option<Timestamp>,
    /// Raft index of creation (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub create_index: u64,
    /// Raft index of the last change (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub modify_index: u64,
}

/// A one-time token (Nomad's `OneTimeToken`): a secret that can be exchanged once, within
/// ten minutes, for the ACL token it was made for (`nomad ui -authenticate`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct OneTimeToken {
    /// The secret to exchange (a UUID).
    #[serde(rename = "OneTimeSecretID", deserialize_with = "de::nullable")]
    pub one_time_secret_id: String,
    /// The ACL token it stands for.
    #[serde(rename = "AccessorID", deserialize_with = "de::nullable")]
    pub accessor_id: String,
    /// When it stops working.
    pub expires_at: Timestamp,
    /// Raft index of creation (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub create_index: u64,
    /// Raft index of the last change (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub modify_index: u64,
}

/// How long a one-time token lives (Nomad's ten minutes).
pub const ONE_TIME_TOKEN_TTL_NANOS: i64 = 10 * 60 * 1_000_000_000;

impl AclToken {
    /// Whether it is a management token.
    pub fn is_management(&self) -> bool {
        self.r#type == TOKEN_TYPE_MANAGEMENT
    }

    /// Whether it has expired at `now_unix_nanos`.
    pub fn expired(&self, now_unix_nanos: i64) -> bool {
        self.expiration_time
            .and_then(|t| t.unix_nanos())
            .is_some_and(|exp| exp <= now_unix_nanos)
    }

    /// Nomad's checks of a token to be written: a type of `client` or `management`, a
    /// client token with at least one policy, a management token with none, a name of at
    /// most 256 characters, UUID accessor and secret.
    pub fn validate(&self) -> Result<(), String> {
        match self.r#type.as_str() {
            TOKEN_TYPE_CLIENT if self.policies.is_empty() => {
                return Err("client token missing policies".into())
            }
            TOKEN_TYPE_CLIENT => {}
            TOKEN_TYPE_MANAGEMENT if !self.policies.is_empty() => {
                return Err("management token cannot be associated with policies".into())
            }
            TOKEN_TYPE_MANAGEMENT => {}
            other => {
                return Err(format!(
                    "token type must be client or management, not {other:?}"
                ))
            }
        }
        if self.name.chars().count() > MAX_TOKEN_NAME_LEN {
            return Err("token name too long".into());
        }
        if !is_uuid(&self.accessor_id) || !is_uuid(&self.secret_id) {
            return Err("token accessor and secret must be UUIDs".into());
        }
        Ok(())
    }

    /// The token as lists show it: no secret.
    pub fn stub(&self) -> AclToken {
        AclToken {
            secret_id: String::new(),
            ..self.clone()
        }
    }
}

/// Whether `s` is a UUID in its 8-4-4-4-12 hexadecimal form.
pub fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "6b1f3e0a-1d2c-4b5a-8e9f-0a1b2c3d4e5f";
    const S: &str = "0f9e8d7c-6b5a-4c3d-9e2f-1a0b9c8d7e6f";

    fn token(kind: &str, policies: &[&str]) -> AclToken {
        AclToken {
            accessor_id: A.into(),
            secret_id: S.into(),
            r#type: kind.into(),
            policies: policies.iter().map(|p| p.to_string()).collect(),
            ..AclToken::default()
        }
    }

    #[test]
    fn tokens_are_checked_as_nomad_checks_them() {
        assert!(token("client", &["ops"]).validate().is_ok());
        assert!(token("management", &[]).validate().is_ok());
        assert!(token("client", &[]).validate().is_err());
        assert!(token("management", &["ops"]).validate().is_err());
        assert!(token("root", &[]).validate().is_err());
        let mut t = token("client", &["ops"]);
        t.secret_id = "not-a-uuid".into();
        assert!(t.validate().is_err());
        assert!(token("client", &["x"]).stub().secret_id.is_empty());
    }

    #[test]
    fn expiry_is_inclusive_and_none_never_expires() {
        let mut t = token("client", &["ops"]);
        assert!(!t.expired(i64::MAX));
        t.expiration_time = Some(Timestamp::from_unix_nanos(1_000));
        assert!(!t.expired(999));
        assert!(t.expired(1_000));
    }

    #[test]
    fn policy_names_follow_nomads_rule() {
        let p = |name: &str| AclPolicy {
            name: name.into(),
            ..AclPolicy::default()
        };
        assert!(p("readonly-1").validate_name().is_ok());
        for bad in ["", "a b", "a_b", &"x".repeat(129)] {
            assert!(p(bad).validate_name().is_err(), "{bad}");
        }
    }
}
