//! The randomness seam. Every random choice in production code — UUIDs, delivery tokens,
//! node shuffling, jitter, heartbeat stagger, server ids — comes from one [`RngSource`]
//! handed down from the agent, never from `thread_rng` or a fresh `from_entropy`. The agent
//! seeds it from the operating system once; a test seeds it with a number and gets the same
//! choices every run.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

/// A cheap-to-clone handle to one seedable generator.
///
/// A component that draws often takes its own generator with [`RngSource::fork`] (seeded
/// from this one, so the whole process still follows the root seed) and keeps it; one that
/// draws rarely borrows the shared one with [`RngSource::with`].
#[derive(Clone)]
pub struct RngSource {
    inner: Arc<Mutex<StdRng>>,
}

impl fmt::Debug for RngSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RngSource")
    }
}

impl RngSource {
    /// A source seeded from the operating system: the agent's root.
    pub fn from_entropy() -> RngSource {
        RngSource::from_rng(StdRng::from_entropy())
    }

    /// A source that makes the same choices every time, for tests and simulations.
    pub fn seeded(seed: u64) -> RngSource {
        RngSource::from_rng(StdRng::seed_from_u64(seed))
    }

    fn from_rng(rng: StdRng) -> RngSource {
        RngSource {
            inner: Arc::new(Mutex::new(rng)),
        }
    }

    /// Runs `f` with the shared generator.
    pub fn with<T>(&self, f: impl FnOnce(&mut StdRng) -> T) -> T {
        let mut rng = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut rng)
    }

    /// An independent generator seeded from this one.
    pub fn fork(&self) -> StdRng {
        self.with(|rng| {
            let mut seed = <StdRng as SeedableRng>::Seed::default();
            rng.fill_bytes(&mut seed);
            StdRng::from_seed(seed)
        })
    }

    /// A child source seeded from this one (for a component that hands out its own forks).
    pub fn child(&self) -> RngSource {
        RngSource::from_rng(self.fork())
    }

    /// A random 64-bit number.
    pub fn next_u64(&self) -> u64 {
        self.with(|rng| rng.next_u64())
    }

    /// A new version-4 UUID.
    pub fn uuid(&self) -> String {
        self.with(super::ids::new_uuid)
    }
}

#[cfg(test)]
mod tests {
    use rand::Rng;

    use super::*;

    #[test]
    fn a_seeded_source_repeats_its_choices_and_forks_follow_the_seed() {
        let a = RngSource::seeded(42);
        let b = RngSource::seeded(42);
        assert_eq!(a.uuid(), b.uuid());
        assert_eq!(a.next_u64(), b.next_u64());
        let (mut fa, mut fb) = (a.fork(), b.fork());
        assert_eq!(fa.gen::<u64>(), fb.gen::<u64>());
        assert_eq!(a.child().uuid(), b.child().uuid());
        assert_ne!(RngSource::seeded(1).uuid(), RngSource::seeded(2).uuid());
    }
}
