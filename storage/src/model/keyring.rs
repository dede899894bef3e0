//! The servers' root keyring, as Nomad keeps it: root keys that sign workload identities
//! (and will encrypt Variables), each with its metadata ([`RootKeyMeta`], what
//! `/v1/operator/keyring/keys` lists) and its secret material *wrapped* ([`WrappedKey`]):
//! encrypted by a key-encryption key the servers keep in their data directories, never in
//! raft. The public half of the signing key is kept in the clear, so any server verifies a
//! signature from its own state.

use serde::{Deserialize, Serialize};

use crate::model::de;

/// Nomad's only root key algorithm.
pub const ROOT_KEY_ALGORITHM: &str = "aes256-gcm";

/// Where a root key is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum RootKeyState {
    /// Signs new identities (exactly one key is active once the keyring is initialized).
    #[default]
    #[serde(rename = "active")]
    Active,
    /// Was active; still verifies what it signed.
    #[serde(rename = "inactive")]
    Inactive,
    /// Published in the JWKS ahead of its activation (`rotate -prepublish`).
    #[serde(rename = "prepublished")]
    Prepublished,
    /// Being removed.
    #[serde(rename = "deprecated")]
    Deprecated,
    /// Was active; a full rotation (`rotate -full`) is re-encrypting the variables it
    /// encrypted under the active key, then it becomes inactive. Still verifies what it
    /// signed.
    #[serde(rename = "rekeying")]
    Rekeying,
}

impl RootKeyState {
    /// Nomad's name of the state.
    pub fn as_str(self) -> &'static str {
        match self {
            RootKeyState::Active => "active",
            RootKeyState::Inactive => "inactive",
            RootKeyState::Prepublished => "prepublished",
            RootKeyState::Deprecated => "deprecated",
            RootKeyState::Rekeying => "rekeying",
        }
    }
}

/// What is known of a root key without its secret (Nomad's `RootKeyMeta`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RootKeyMeta {
    /// A UUID; the `kid` of what it signs.
    #[serde(rename = "KeyID", deserialize_with = "de::nullable")]
    pub key_id: String,
    /// Always [`ROOT_KEY_ALGORITHM`].
    #[serde(deserialize_with = "de::nullable")]
    pub algorithm: String,
    /// Creation time, Unix nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub create_time: i64,
    /// Raft index of creation (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub create_index: u64,
    /// Raft index of the last change (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub modify_index: u64,
    /// Its state.
    #[serde(deserialize_with = "de::nullable")]
    pub state: RootKeyState,
    /// For a prepublished key: when it becomes active, Unix nanoseconds (0 otherwise).
    #[serde(deserialize_with = "de::nullable")]
    pub publish_time: i64,
}

/// A root key's secret material, encrypted (AES-256-GCM) by the servers' key-encryption
/// key, and the public half of its signing key.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct WrappedKey {
    /// Which key-encryption key wrapped it (a fingerprint, not the key).
    #[serde(rename = "KEKID", deserialize_with = "de::nullable")]
    pub kek_id: String,
    /// The AES-GCM nonce.
    #[serde(deserialize_with = "de::nullable")]
    pub nonce: Vec<u8>,
    /// The encrypted material, with its tag.
    #[serde(deserialize_with = "de::nullable")]
    pub ciphertext: Vec<u8>,
    /// The Ed25519 public key that verifies what the key signs.
    #[serde(deserialize_with = "de::nullable")]
    pub public_key: Vec<u8>,
}

/// A root key: its metadata and its wrapped material.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct RootKey {
    /// What is known of it.
    #[serde(deserialize_with = "de::nullable")]
    pub meta: RootKeyMeta,
    /// Its secret, wrapped.
    #[serde(deserialize_with = "de::nullable")]
    pub wrapped: WrappedKey,
}
