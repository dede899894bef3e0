//! Crash points: named places where a test may have the process killed, to prove that what
//! it writes survives a crash at exactly that place (the client's task launches, say).
//!
//! Off unless the environment variable `TEAMSTER_CRASH_AT` names a point, as
//! `name` (the first time the point is reached) or `name@n` (the n-th time). The process
//! then sends itself SIGKILL: no destructor runs and nothing buffered is flushed, as when
//! an operator or the kernel kills it. Reading the variable happens once; a point that is
//! not named costs one comparison.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The environment variable naming the point.
pub const ENV: &str = "TEAMSTER_CRASH_AT";

struct Armed {
    name: String,
    nth: u64,
    seen: AtomicU64,
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| std::env::var(ENV).ok().and_then(|v| parse(&v)))
        .as_ref()
}

fn parse(value: &str) -> Option<Armed> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    let (name, nth) = match value.split_once('@') {
        Some((name, n)) => (name, n.trim().parse().ok().filter(|n| *n > 0)?),
        None => (value, 1),
    };
    Some(Armed {
        name: name.trim().to_string(),
        nth,
        seen: AtomicU64::new(0),
    })
}

/// Reached the point `name`: when it is the armed point and this is its n-th time, the
/// process is killed here.
pub fn point(name: &str) {
    let Some(armed) = armed() else {
        return;
    };
    if armed.name != name || armed.seen.fetch_add(1, Ordering::SeqCst) + 1 != armed.nth {
        return;
    }
    tracing::warn!(point = name, "crash point reached: killing this process");
    // SAFETY: kill(2) on our own pid has no memory effects.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_is_named_with_an_optional_count() {
        let a = parse("client.task_launched@3").unwrap();
        assert_eq!((a.name.as_str(), a.nth), ("client.task_launched", 3));
        let a = parse("client.task_launched").unwrap();
        assert_eq!(a.nth, 1);
        assert!(parse("").is_none());
        assert!(parse("x@0").is_none(), "counts start at 1");
        assert!(parse("x@many").is_none());
    }
}
