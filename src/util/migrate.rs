//! The token that lets a client fetch an allocation's data from another node (a
//! `migrate`ing `ephemeral_disk`), as Nomad's migrate token: the servers, which know every
//! node's secret, sign the previous allocation's ID with the secret of the node it ran on
//! and hand the signature to the client of its replacement; the previous node checks it
//! with its own secret. No other node, and no one without the servers' answer, can make it.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header a migrate token travels in, to the previous node's
/// `/v1/client/allocation/:id/snapshot`.
pub const TOKEN_HEADER: &str = "X-Nomad-Migrate-Token";

/// The migrate token of `alloc_id` for the node whose secret ID is `node_secret`: HMAC-SHA256,
/// hex.
pub fn token(node_secret: &str, alloc_id: &str) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(node_secret.as_bytes()).expect("HMAC takes any key");
    mac.update(alloc_id.as_bytes());
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether `given` is the migrate token of `alloc_id` for this node (compared in constant
/// time).
pub fn verify(node_secret: &str, alloc_id: &str, given: &str) -> bool {
    let want = token(node_secret, alloc_id);
    want.len() == given.len()
        && want
            .bytes()
            .zip(given.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_bound_to_the_node_secret_and_the_allocation() {
        let t = token("secret-a", "alloc-1");
        assert_eq!(t.len(), 64);
        assert!(verify("secret-a", "alloc-1", &t));
        assert!(!verify("secret-b", "alloc-1", &t));
        assert!(!verify("secret-a", "alloc-2", &t));
        assert!(!verify("secret-a", "alloc-1", ""));
        assert!(!verify("secret-a", "alloc-1", &t[..63]));
    }
}
