//! (De)serialize a `Duration` as a human string in configuration files: `"10s"`, `"1m30s"`,
//! `"250ms"`. Use with `#[serde(with = "crate::util::duration_str")]`.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// Write the duration as a humantime string.
pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&humantime::format_duration(*d).to_string())
}

/// Read a humantime string such as `"10s"`.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s)
        .map_err(|e| serde::de::Error::custom(format!("{s:?} is not a duration like \"10s\": {e}")))
}
