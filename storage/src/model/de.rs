//! Lenient input for Nomad JSON that stays exact under bincode.
//!
//! Nomad's API types are all pointers, so a client may omit any field or send an explicit
//! `null`; both mean "use the default". Our model types are concrete, so every field carries
//! `#[serde(default)]` (absent → the struct's `Default`) and one of the `deserialize_with`
//! helpers here (null → a default).
//!
//! The helpers look at [`Deserializer::is_human_readable`]: JSON (human readable) goes through
//! `Option<T>` so `null` is accepted, while bincode (not human readable) decodes `T` directly,
//! because bincode encoded the field as a plain `T` and an `Option` tag byte would misread it.
//! Each helper is exercised by a bincode round trip in the tests of the types that use it.

use serde::{Deserialize, Deserializer};

/// `null` (or absent, with `#[serde(default)]`) becomes `T::default()`.
pub(crate) fn nullable<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    if deserializer.is_human_readable() {
        Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
    } else {
        T::deserialize(deserializer)
    }
}

/// A task's `MemoryMaxMB`: `null` is 0, and Nomad's `-1` (no hard limit) is
/// [`MEMORY_NO_LIMIT`](crate::model::MEMORY_NO_LIMIT); other negative values are refused.
pub(crate) fn memory_max<'de, D>(deserializer: D) -> Result<u64, D::Error>
where
    D: Deserializer<'de>,
{
    if !deserializer.is_human_readable() {
        return u64::deserialize(deserializer);
    }
    match Option::<i64>::deserialize(deserializer)? {
        None => Ok(0),
        Some(-1) => Ok(crate::model::MEMORY_NO_LIMIT),
        Some(n) => u64::try_from(n).map_err(|_| {
            serde::de::Error::custom(format!(
                "MemoryMaxMB {n}: must be -1 (no limit), 0 or a number of MB"
            ))
        }),
    }
}

/// Writes [`memory_max`]'s field back as Nomad's JSON has it (`-1` for no limit).
pub(crate) fn write_memory_max<S>(value: &u64, serializer: S) -> Result<S::Ok, S::Error>
where
    S: serde::Serializer,
{
    if serializer.is_human_readable() && *value == crate::model::MEMORY_NO_LIMIT {
        serializer.serialize_i64(-1)
    } else {
        serializer.serialize_u64(*value)
    }
}

/// Declares a helper like [`nullable`] whose `null` maps to a given non-zero default, for the
/// few fields where Nomad's default is not the zero value (Count 1, Priority 50, CPU 100, …).
macro_rules! nullable_or {
    ($(#[$meta:meta])* $name:ident, $ty:ty, $default:expr) => {
        $(#[$meta])*
        pub(crate) fn $name<'de, D>(deserializer: D) -> Result<$ty, D::Error>
        where
            D: Deserializer<'de>,
        {
            if deserializer.is_human_readable() {
                Ok(Option::<$ty>::deserialize(deserializer)?.unwrap_or($default))
            } else {
                <$ty>::deserialize(deserializer)
            }
        }
    };
}

nullable_or!(
    /// Job priority: `null` is Nomad's default, 50.
    priority,
    u32,
    crate::model::DEFAULT_JOB_PRIORITY
);
nullable_or!(
    /// Task group count: `null` is Nomad's default, 1.
    count,
    u32,
    1
);
nullable_or!(
    /// Task CPU in MHz: `null` is Nomad's default, 100.
    cpu,
    u64,
    crate::model::DEFAULT_CPU_MHZ
);
nullable_or!(
    /// Task memory in MB: `null` is Nomad's default, 300.
    memory_mb,
    u64,
    crate::model::DEFAULT_MEMORY_MB
);
nullable_or!(
    /// A periodic block's `Enabled`: `null` is Nomad's default, true.
    enabled,
    bool,
    true
);
