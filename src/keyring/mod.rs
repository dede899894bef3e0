//! The root keyring's cryptography and workload identities, pure: a root key's material made
//! and wrapped by the servers' key-encryption key ([`Kek`]), unwrapped again
//! ([`UnwrappedKey`]), and the JSON Web Tokens it signs for tasks ([`IdentityClaims`],
//! [`UnwrappedKey::sign`], [`verify`]) with their public keys as a JWKS ([`jwks`]).
//!
//! ```text
//!  Kek (data_dir) ──wrap──▶ RootKey.wrapped (raft) ──unwrap──▶ UnwrappedKey ──sign──▶ JWT
//!                            RootKey.wrapped.public_key ───────────────────── verify ◀─┘
//! ```
//!
//! Tokens are signed with Ed25519 (`alg: EdDSA`, `kid`: the root key's ID), one of the two
//! algorithms Nomad signs with; verification needs only the public key kept in the clear in
//! the replicated state, so any server verifies from its own state. The server shell
//! (`server::keyring`) keeps the KEK on disk, fetches it from its peers and caches unwrapped
//! keys; nothing here does I/O.
//!
//! May import: `util`, the storage crate's model.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{Ed25519KeyPair, KeyPair as _, UnparsedPublicKey, ED25519};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use teamster_storage::model::{RootKey, RootKeyMeta, RootKeyState, WrappedKey, ROOT_KEY_ALGORITHM};

/// Why a key or a token cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyringError {
    /// The OS gave no randomness.
    #[error("no randomness for a new key")]
    Random,
    /// The wrapped key was wrapped by another KEK, or is corrupt.
    #[error("root key {key_id} cannot be unwrapped: {reason}")]
    Unwrap {
        /// The root key.
        key_id: String,
        /// Why.
        reason: String,
    },
    /// A KEK file of the wrong size.
    #[error("a key-encryption key is 32 bytes, not {0}")]
    KekLength(usize),
    /// The token is not a JWT this keyring signed, or its signature does not verify.
    #[error("invalid identity token: {0}")]
    InvalidToken(&'static str),
    /// The token's `exp` has passed or its `nbf` has not come.
    #[error("identity token expired")]
    Expired,
    /// Data does not decrypt with the key it names.
    #[error("decryption failed: {0}")]
    Decrypt(&'static str),
}

/// The servers' key-encryption key: wraps every root key's material. Kept in the servers'
/// data directories, never in raft.
#[derive(Clone, PartialEq, Eq)]
pub struct Kek([u8; 32]);

impl std::fmt::Debug for Kek {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kek({})", self.id())
    }
}

impl Kek {
    /// A new random KEK.
    pub fn generate() -> Result<Kek, KeyringError> {
        let mut bytes = [0u8; 32];
        SystemRandom::new()
            .fill(&mut bytes)
            .map_err(|_| KeyringError::Random)?;
        Ok(Kek(bytes))
    }

    /// The KEK in `bytes` (exactly 32).
    pub fn from_bytes(bytes: &[u8]) -> Result<Kek, KeyringError> {
        let array: [u8; 32] = bytes
            .try_into()
            .map_err(|_| KeyringError::KekLength(bytes.len()))?;
        Ok(Kek(array))
    }

    /// Its bytes (to write to its file, or to hand to a peer server).
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// A fingerprint naming it (not secret): the first 8 bytes of its SHA-256, in hex.
    pub fn id(&self) -> String {
        let digest = Sha256::digest(self.0);
        digest[..8].iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// `plain` encrypted with `key` (AES-256-GCM, a random nonce), bound to `aad`: the nonce and
/// the ciphertext with its tag.
fn seal(key: &[u8; 32], plain: &[u8], aad: &[u8]) -> Result<(Vec<u8>, Vec<u8>), KeyringError> {
    let mut nonce = [0u8; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| KeyringError::Random)?;
    let mut sealed = plain.to_vec();
    aes(key)
        .seal_in_place_append_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad),
            &mut sealed,
        )
        .map_err(|_| KeyringError::Random)?;
    Ok((nonce.to_vec(), sealed))
}

/// What [`seal`] encrypted with `key` for the same `aad`, or why not.
fn open(key: &[u8; 32], nonce: &[u8], sealed: &[u8], aad: &[u8]) -> Result<Vec<u8>, &'static str> {
    let nonce: [u8; NONCE_LEN] = nonce.try_into().map_err(|_| "bad nonce")?;
    let mut buf = sealed.to_vec();
    let plain = aes(key)
        .open_in_place(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad),
            &mut buf,
        )
        .map_err(|_| "authentication failed")?;
    Ok(plain.to_vec())
}

fn aes(key: &[u8; 32]) -> LessSafeKey {
    // A 32-byte key is always a valid AES-256 key.
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key).expect("32-byte AES-256 key"))
}

/// The secret material of a root key, as wrapped: the AES-256 data key (for Variables) and
/// the Ed25519 signing key (PKCS#8).
#[derive(Serialize, Deserialize)]
struct Material {
    data_key: Vec<u8>,
    signing_key_pkcs8: Vec<u8>,
}

/// A root key with its material in the clear, held in a server's memory only.
pub struct UnwrappedKey {
    meta: RootKeyMeta,
    data_key: [u8; 32],
    signer: Ed25519KeyPair,
}

impl std::fmt::Debug for UnwrappedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnwrappedKey")
            .field("key_id", &self.meta.key_id)
            .finish_non_exhaustive()
    }
}

impl UnwrappedKey {
    /// A new root key `key_id` created at `now` (Unix nanoseconds) in `state`, wrapped by
    /// `kek`: the key for raft, and its unwrapped form.
    pub fn generate(
        kek: &Kek,
        key_id: &str,
        now: i64,
        state: RootKeyState,
        publish_time: i64,
    ) -> Result<(RootKey, UnwrappedKey), KeyringError> {
        let rng = SystemRandom::new();
        let mut data_key = [0u8; 32];
        rng.fill(&mut data_key).map_err(|_| KeyringError::Random)?;
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).map_err(|_| KeyringError::Random)?;
        let signer =
            Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).map_err(|_| KeyringError::Random)?;
        let material = Material {
            data_key: data_key.to_vec(),
            signing_key_pkcs8: pkcs8.as_ref().to_vec(),
        };
        let plain = serde_json::to_vec(&material).expect("material encodes");
        let (nonce, ciphertext) = seal(&kek.0, &plain, key_id.as_bytes())?;
        let meta = RootKeyMeta {
            key_id: key_id.to_string(),
            algorithm: ROOT_KEY_ALGORITHM.to_string(),
            create_time: now,
            create_index: 0,
            modify_index: 0,
            state,
            publish_time,
        };
        let key = RootKey {
            meta: meta.clone(),
            wrapped: WrappedKey {
                kek_id: kek.id(),
                nonce,
                ciphertext,
                public_key: signer.public_key().as_ref().to_vec(),
            },
        };
        Ok((
            key,
            UnwrappedKey {
                meta,
                data_key,
                signer,
            },
        ))
    }

    /// The material of `key`, unwrapped with `kek`.
    pub fn unwrap(kek: &Kek, key: &RootKey) -> Result<UnwrappedKey, KeyringError> {
        let key_id = &key.meta.key_id;
        let fail = |reason: &str| KeyringError::Unwrap {
            key_id: key_id.clone(),
            reason: reason.to_string(),
        };
        if key.wrapped.kek_id != kek.id() {
            return Err(fail(&format!(
                "it was wrapped by key-encryption key {}, this server has {}",
                key.wrapped.kek_id,
                kek.id()
            )));
        }
        let plain = open(
            &kek.0,
            &key.wrapped.nonce,
            &key.wrapped.ciphertext,
            key_id.as_bytes(),
        )
        .map_err(|why| fail(&format!("decryption failed: {why}")))?;
        let material: Material =
            serde_json::from_slice(&plain).map_err(|_| fail("bad material"))?;
        let data_key: [u8; 32] = material
            .data_key
            .as_slice()
            .try_into()
            .map_err(|_| fail("bad data key"))?;
        let signer = Ed25519KeyPair::from_pkcs8(&material.signing_key_pkcs8)
            .map_err(|_| fail("bad signing key"))?;
        if signer.public_key().as_ref() != key.wrapped.public_key.as_slice() {
            return Err(fail("public key does not match"));
        }
        Ok(UnwrappedKey {
            meta: key.meta.clone(),
            data_key,
            signer,
        })
    }

    /// `plain` encrypted with the data key (AES-256-GCM, a random nonce), bound to `aad`:
    /// the nonce and the ciphertext with its tag.
    pub fn encrypt(&self, plain: &[u8], aad: &[u8]) -> Result<(Vec<u8>, Vec<u8>), KeyringError> {
        seal(&self.data_key, plain, aad)
    }

    /// What [`UnwrappedKey::encrypt`] encrypted, if this key did, for the same `aad`.
    pub fn decrypt(
        &self,
        nonce: &[u8],
        sealed: &[u8],
        aad: &[u8],
    ) -> Result<Vec<u8>, KeyringError> {
        open(&self.data_key, nonce, sealed, aad).map_err(KeyringError::Decrypt)
    }

    /// `claims` signed as a compact JWT (`alg: EdDSA`, `kid`: this key's ID).
    pub fn sign(&self, claims: &IdentityClaims) -> String {
        let header = serde_json::json!({
            "alg": "EdDSA",
            "kid": self.meta.key_id,
            "typ": "JWT",
        });
        let mut token = URL_SAFE_NO_PAD.encode(header.to_string());
        token.push('.');
        token.push_str(&URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).expect("claims")));
        let signature = self.signer.sign(token.as_bytes());
        token.push('.');
        token.push_str(&URL_SAFE_NO_PAD.encode(signature.as_ref()));
        token
    }
}

/// The claims of a workload identity, Nomad's names.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct IdentityClaims {
    /// The allocation's namespace.
    pub nomad_namespace: String,
    /// The job (the parent's ID for a dispatched or periodic child).
    pub nomad_job_id: String,
    /// The allocation.
    pub nomad_allocation_id: String,
    /// The task (absent for a service's identity).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub nomad_task: String,
    /// `<region>:<namespace>:<job>:<group>:<task>:<identity>`.
    pub sub: String,
    /// The audiences.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aud: Vec<String>,
    /// Issued at, Unix seconds.
    pub iat: i64,
    /// Not before, Unix seconds.
    pub nbf: i64,
    /// Expiry, Unix seconds (absent: never, for identities without a `ttl`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp: Option<i64>,
    /// A unique ID.
    pub jti: String,
    /// The issuer (the servers' `oidc_issuer`, when set).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub iss: String,
}

/// How far apart the signing and the verifying server's clocks may be (go-jose's default,
/// which Nomad uses).
pub const CLOCK_LEEWAY_SECS: i64 = 60;

/// Decodes `token` and checks its signature against the root key its `kid` names (looked up
/// by `key`), and its `nbf`/`exp` against `now_secs`.
pub fn verify<'a>(
    token: &str,
    key: impl Fn(&str) -> Option<&'a RootKey>,
    now_secs: i64,
) -> Result<IdentityClaims, KeyringError> {
    #[derive(Deserialize)]
    struct Header {
        alg: String,
        kid: String,
    }
    let mut parts = token.split('.');
    let (Some(header), Some(claims), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(KeyringError::InvalidToken("not a JWT"));
    };
    let decode = |part: &str| {
        URL_SAFE_NO_PAD
            .decode(part)
            .map_err(|_| KeyringError::InvalidToken("not base64url"))
    };
    let header: Header = serde_json::from_slice(&decode(header)?)
        .map_err(|_| KeyringError::InvalidToken("bad header"))?;
    if header.alg != "EdDSA" {
        return Err(KeyringError::InvalidToken("unexpected algorithm"));
    }
    let root = key(&header.kid).ok_or(KeyringError::InvalidToken("unknown key"))?;
    let signed_len = token.len() - signature.len() - 1;
    UnparsedPublicKey::new(&ED25519, &root.wrapped.public_key)
        .verify(&token.as_bytes()[..signed_len], &decode(signature)?)
        .map_err(|_| KeyringError::InvalidToken("bad signature"))?;
    let claims: IdentityClaims = serde_json::from_slice(&decode(claims)?)
        .map_err(|_| KeyringError::InvalidToken("bad claims"))?;
    if claims.nbf > now_secs + CLOCK_LEEWAY_SECS
        || claims
            .exp
            .is_some_and(|exp| exp + CLOCK_LEEWAY_SECS <= now_secs)
    {
        return Err(KeyringError::Expired);
    }
    Ok(claims)
}

/// Whether `secret` has the shape of a JWT (three base64url parts), not of an ACL secret.
pub fn looks_like_jwt(secret: &str) -> bool {
    secret.split('.').count() == 3
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

/// The keys of `keys` that verify identities (every key but a deprecated one): each key's
/// ID, public key and creation time.
pub fn public_keys<'a>(
    keys: impl IntoIterator<Item = &'a RootKey>,
) -> impl Iterator<Item = (&'a str, &'a [u8], i64)> {
    keys.into_iter()
        .filter(|k| k.meta.state != RootKeyState::Deprecated && !k.wrapped.public_key.is_empty())
        .map(|k| {
            (
                k.meta.key_id.as_str(),
                k.wrapped.public_key.as_slice(),
                k.meta.create_time,
            )
        })
}

/// Public keys (ID, Ed25519 public key) as a JSON Web Key Set.
pub fn jwks<'a>(keys: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> serde_json::Value {
    let keys: Vec<serde_json::Value> = keys
        .into_iter()
        .map(|(kid, public)| {
            serde_json::json!({
                "kid": kid,
                "alg": "EdDSA",
                "use": "sig",
                "kty": "OKP",
                "crv": "Ed25519",
                "x": URL_SAFE_NO_PAD.encode(public),
            })
        })
        .collect();
    serde_json::json!({ "keys": keys })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(exp: Option<i64>) -> IdentityClaims {
        IdentityClaims {
            nomad_namespace: "default".into(),
            nomad_job_id: "web".into(),
            nomad_allocation_id: "a1".into(),
            nomad_task: "app".into(),
            sub: "global:default:web:g:app:default".into(),
            aud: vec!["nomadproject.io".into()],
            iat: 100,
            nbf: 100,
            exp,
            jti: "j".into(),
            iss: String::new(),
        }
    }

    #[test]
    fn a_key_signs_what_its_public_half_verifies_and_unwraps_only_with_its_kek() {
        let kek = Kek::generate().unwrap();
        let (root, key) = UnwrappedKey::generate(&kek, "k1", 5, RootKeyState::Active, 0).unwrap();
        // The wrapped material does not hold the data key in the clear.
        let data_key_prefix = &key.data_key[..8];
        assert!(!root
            .wrapped
            .ciphertext
            .windows(8)
            .any(|w| w == data_key_prefix));
        let token = key.sign(&claims(Some(200)));
        let lookup = |id: &str| (id == "k1").then_some(&root);
        assert_eq!(verify(&token, lookup, 150).unwrap(), claims(Some(200)));
        // A minute of clock difference either way is allowed, no more.
        assert!(verify(&token, lookup, 259).is_ok());
        assert_eq!(verify(&token, lookup, 260), Err(KeyringError::Expired));
        assert!(verify(&token, lookup, 40).is_ok());
        assert_eq!(verify(&token, lookup, 39), Err(KeyringError::Expired));
        // A token changed after signing does not verify.
        let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
        let mut forged = claims(Some(200));
        forged.nomad_job_id = "other".into();
        parts[1] = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        assert_eq!(
            verify(&parts.join("."), lookup, 150),
            Err(KeyringError::InvalidToken("bad signature"))
        );
        assert_eq!(
            verify(&token, |_| None, 150),
            Err(KeyringError::InvalidToken("unknown key"))
        );
        assert!(looks_like_jwt(&token) && !looks_like_jwt("6f2a0e0e-aaaa-bbbb-cccc-0123456789ab"));

        // Unwrapped again with the KEK: the same signing key; another KEK is refused.
        let again = UnwrappedKey::unwrap(&kek, &root).unwrap();
        assert_eq!(again.data_key, key.data_key);
        assert_eq!(
            verify(&again.sign(&claims(None)), lookup, 10_000)
                .unwrap()
                .exp,
            None
        );
        let other = Kek::generate().unwrap();
        assert!(matches!(
            UnwrappedKey::unwrap(&other, &root),
            Err(KeyringError::Unwrap { .. })
        ));
        // The key ID is authenticated: the material cannot be moved to another key.
        let mut moved = root.clone();
        moved.meta.key_id = "k2".into();
        assert!(UnwrappedKey::unwrap(&kek, &moved).is_err());
        assert_eq!(Kek::from_bytes(kek.as_bytes()).unwrap(), kek);
        assert_eq!(Kek::from_bytes(&[0; 31]), Err(KeyringError::KekLength(31)));
    }

    #[test]
    fn data_decrypts_only_with_its_key_and_its_aad() {
        let kek = Kek::generate().unwrap();
        let (_, key) = UnwrappedKey::generate(&kek, "k", 1, RootKeyState::Active, 0).unwrap();
        let (_, other) = UnwrappedKey::generate(&kek, "o", 1, RootKeyState::Active, 0).unwrap();
        let (nonce, sealed) = key
            .encrypt(b"{\"password\":\"hunter2\"}", b"default\0db")
            .unwrap();
        assert!(!sealed.windows(7).any(|w| w == b"hunter2"));
        assert_eq!(
            key.decrypt(&nonce, &sealed, b"default\0db").unwrap(),
            b"{\"password\":\"hunter2\"}"
        );
        assert!(key.decrypt(&nonce, &sealed, b"default\0other").is_err());
        assert!(other.decrypt(&nonce, &sealed, b"default\0db").is_err());
    }

    #[test]
    fn the_jwks_lists_every_usable_public_key() {
        let kek = Kek::generate().unwrap();
        let (a, _) = UnwrappedKey::generate(&kek, "a", 1, RootKeyState::Active, 0).unwrap();
        let (mut b, _) = UnwrappedKey::generate(&kek, "b", 1, RootKeyState::Inactive, 0).unwrap();
        let set = jwks(public_keys([&a, &b]).map(|(k, p, _)| (k, p)));
        assert_eq!(set["keys"].as_array().unwrap().len(), 2);
        assert_eq!(set["keys"][0]["kid"], "a");
        assert_eq!(set["keys"][0]["crv"], "Ed25519");
        b.meta.state = RootKeyState::Deprecated;
        assert_eq!(public_keys([&a, &b]).count(), 1);
    }
}
