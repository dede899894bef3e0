//! The one bincode configuration used for everything this crate persists or replicates
//! (log entries, votes, snapshot images), and bounded decoding.
//!
//! bincode 2's `standard()` (little-endian, variable-length integers). Every decode goes
//! through a byte budget (`with_limit`), which bounds what a forged length prefix can make
//! the decoder allocate; bincode charges the in-memory size of what it decodes, so budgets
//! are a multiple of the input size.

use bincode::config::{Configuration, Limit, LittleEndian, Varint};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The encoding configuration (no limit: encoding only writes what we hold).
pub(crate) fn config() -> Configuration {
    bincode::config::standard()
}

/// Encodes with the crate's configuration.
pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, bincode::error::EncodeError> {
    bincode::serde::encode_to_vec(value, config())
}

/// Decodes a value that must span all of `bytes`, charging at most `LIMIT` bytes.
pub(crate) fn decode_exact<T: DeserializeOwned, const LIMIT: usize>(
    bytes: &[u8],
) -> Result<T, DecodeFailure> {
    let cfg: Configuration<LittleEndian, Varint, Limit<LIMIT>> = config().with_limit::<LIMIT>();
    let (value, used) =
        bincode::serde::decode_from_slice(bytes, cfg).map_err(DecodeFailure::Bincode)?;
    if used != bytes.len() {
        return Err(DecodeFailure::TrailingBytes {
            used,
            len: bytes.len(),
        });
    }
    Ok(value)
}

/// Why a bounded decode failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DecodeFailure {
    /// bincode refused the bytes (malformed, truncated, or over the byte budget).
    #[error(transparent)]
    Bincode(bincode::error::DecodeError),
    /// The value ended before the input did.
    #[error("{} trailing bytes after a {used}-byte value", len - used)]
    TrailingBytes { used: usize, len: usize },
}
