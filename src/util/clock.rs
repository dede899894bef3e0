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

#[cfg(test)]
mod tests {
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
