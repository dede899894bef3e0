//! Harnesses for teamster cluster tests.
//!
//! - [`process`]: clusters of real `teamster` processes on loopback addresses.
//! - [`wait_for`]: wait on a condition with a deadline (tests never sleep a fixed time).

pub mod process;

use std::future::Future;
use std::time::{Duration, Instant};

/// Poll `check` every 25 ms until it yields `Some`, or fail after `timeout` naming `what`.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Install a test log subscriber once (honours `RUST_LOG`).
pub fn init_test_tracing() {
    use std::sync::Once;
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_test_writer()
            .try_init();
    });
}
