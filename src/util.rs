//! Small shared pieces: the injectable wall clock and UUID generation from an injectable RNG.
//!
//! Every timer is `tokio::time`; only wall-clock *stamps* (CreateTime, SubmitTime, events)
//! come from a [`Clock`], so tests can fix them.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rand::RngCore;

/// A source of wall-clock time.
pub trait Clock: Send + Sync + 'static {
    /// Now, in Unix nanoseconds.
    fn now_unix_nanos(&self) -> i64;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_unix_nanos(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos().min(i64::MAX as u128) as i64)
            .unwrap_or(0)
    }
}

/// A shared clock handle.
pub type SharedClock = Arc<dyn Clock>;

/// The system clock as a shared handle.
pub fn system_clock() -> SharedClock {
    Arc::new(SystemClock)
}

/// A random (version 4) UUID in its lowercase `8-4-4-4-12` text form, as Nomad's IDs are.
pub fn new_uuid(rng: &mut dyn RngCore) -> String {
    let mut b = [0u8; 16];
    rng.fill_bytes(&mut b);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn uuids_are_version_4_and_seedable() {
        let mut a = rand::rngs::StdRng::seed_from_u64(7);
        let mut b = rand::rngs::StdRng::seed_from_u64(7);
        let x = new_uuid(&mut a);
        assert_eq!(x, new_uuid(&mut b));
        assert_eq!(x.len(), 36);
        assert_eq!(&x[14..15], "4");
        assert!(matches!(&x[19..20], "8" | "9" | "a" | "b"), "{x}");
        assert_ne!(x, new_uuid(&mut a));
    }
}
