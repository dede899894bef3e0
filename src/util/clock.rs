//! The one wall clock. Timers and deadlines use `tokio::time` (pausable in tests); only
//! wall-clock *stamps* come from here: `CreateTime`, `SubmitTime`, `WaitUntil`, status times.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

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

/// A clock that reads what it was last set to, for tests and simulations.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    /// A clock standing at `unix_nanos`, as a shared handle and the handle to move it.
    pub fn starting_at(unix_nanos: i64) -> Arc<ManualClock> {
        Arc::new(ManualClock {
            now: AtomicI64::new(unix_nanos),
        })
    }

    /// Set the time.
    pub fn set(&self, unix_nanos: i64) {
        self.now.store(unix_nanos, Ordering::SeqCst);
    }

    /// Move the time forward by `nanos`.
    pub fn advance(&self, nanos: i64) {
        self.now.fetch_add(nanos, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_unix_nanos(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }
}

/// The proleptic Gregorian date of a count of days since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i32, u8, u8) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y as i32, m as u8, d as u8)
}

#[cfg(test)]
mod tests {
    #[test]
    fn civil_dates() {
        assert_eq!(super::civil_from_days(0), (1970, 1, 1));
        assert_eq!(super::civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(super::civil_from_days(19_782), (2024, 2, 29));
    }

    use super::*;

    #[test]
    fn a_manual_clock_reads_what_it_was_set_to() {
        let c = ManualClock::starting_at(5);
        let shared: SharedClock = c.clone();
        assert_eq!(shared.now_unix_nanos(), 5);
        c.advance(10);
        assert_eq!(shared.now_unix_nanos(), 15);
        c.set(2);
        assert_eq!(shared.now_unix_nanos(), 2);
        assert!(SystemClock.now_unix_nanos() > 1_600_000_000_000_000_000);
    }
}
