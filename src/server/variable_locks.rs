//! Variable locks' leases on the leader (Nomad 1.7's lock TTLs): a lock lives while its
//! holder renews it; its lease runs out two TTLs after the last renewal (Nomad's grace), and
//! its lock delay later the leader releases it through raft. Until then it stays taken:
//! nobody else acquires it, and its holder can no longer renew it.
//!
//! The leases are kept in memory on the leader only ([`LockLeases`], a plain structure over
//! the instants it is given): a new leader gives every lock it finds a fresh lease, as
//! Nomad restores its timers. [`VariableLockDuty`] looks at the locks every second and
//! releases those past their lease and delay (only if the variable still holds that very
//! lock).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use teamster_storage::fsm::{Command, VariableLockRelease};
use teamster_storage::model::VariableLock;
use teamster_storage::state::Snapshot;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::server::leader::LeaderDuty;
use crate::server::leader_service::{run_every, LeaderService};
use crate::server::raft::RaftNode;

/// How often the leader looks for lapsed locks.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// A lock that lapsed past its delay, to release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lapsed {
    /// The variable's namespace.
    pub namespace: String,
    /// Its path.
    pub path: String,
    /// The lock's ID.
    pub lock_id: String,
}

/// Where a lock is and which it is: namespace, path, lock ID.
type LeaseKey = (String, String, String);

/// A variable's place: namespace and path.
pub type Place<'a> = (&'a str, &'a str);

fn key((namespace, path): Place<'_>, lock_id: &str) -> LeaseKey {
    (namespace.to_string(), path.to_string(), lock_id.to_string())
}

/// The leases of the locks the leader knows, by variable and lock ID: when each was last
/// renewed.
#[derive(Debug, Default)]
pub struct LockLeases {
    renewed: Mutex<HashMap<LeaseKey, Instant>>,
}

/// Two TTLs: how long a lease lasts after a renewal (Nomad's grace factor).
fn lease(lock: &VariableLock) -> Duration {
    Duration::from_nanos(lock.ttl).saturating_mul(2)
}

impl LockLeases {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<LeaseKey, Instant>> {
        self.renewed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forget every lease (leadership gained or lost): the locks get fresh ones.
    pub fn clear(&self) {
        self.map().clear();
    }

    /// A lock was acquired at `now`.
    pub fn acquired(&self, at: Place<'_>, lock_id: &str, now: Instant) {
        self.map().insert(key(at, lock_id), now);
    }

    /// A lock was released.
    pub fn released(&self, at: Place<'_>, lock_id: &str) {
        self.map().remove(&key(at, lock_id));
    }

    /// Renews `lock` at `now`: refused once its lease ran out (it is in its delay, about to
    /// be released). A lock without a lease yet (a new leader) gets one.
    pub fn renew(
        &self,
        at: Place<'_>,
        lock: &VariableLock,
        now: Instant,
    ) -> Result<(), &'static str> {
        let mut map = self.map();
        let renewed = map.entry(key(at, &lock.id)).or_insert(now);
        if now >= *renewed + lease(lock) {
            return Err("attempting to modify locked variable");
        }
        *renewed = now;
        Ok(())
    }

    /// The locks of `locked` (every locked variable: namespace, path, lock) past their
    /// lease and delay at `now`. Locks seen for the first time get a lease from `now`;
    /// leases of locks no longer held are forgotten.
    pub fn lapsed<'a>(
        &self,
        locked: impl Iterator<Item = (&'a str, &'a str, &'a VariableLock)>,
        now: Instant,
    ) -> Vec<Lapsed> {
        let mut map = self.map();
        let mut seen = Vec::new();
        let mut out = Vec::new();
        for (namespace, path, lock) in locked {
            let k = key((namespace, path), &lock.id);
            seen.push(k.clone());
            let renewed = *map.entry(k).or_insert(now);
            let release_at = renewed + lease(lock) + Duration::from_nanos(lock.lock_delay);
            if now >= release_at {
                out.push(Lapsed {
                    namespace: namespace.to_string(),
                    path: path.to_string(),
                    lock_id: lock.id.clone(),
                });
            }
        }
        map.retain(|id, _| seen.contains(id));
        out
    }
}

/// Every locked variable of `snap`.
fn locked(snap: &Snapshot) -> Vec<(String, String, VariableLock)> {
    snap.variables(None, "")
        .filter_map(|v| {
            v.meta
                .lock
                .clone()
                .map(|l| (v.meta.namespace.clone(), v.meta.path.clone(), l))
        })
        .collect()
}

/// The leader duty that releases lapsed variable locks.
pub struct VariableLockDuty {
    leases: Arc<LockLeases>,
    node: Arc<RaftNode>,
    service: LeaderService,
}

impl VariableLockDuty {
    /// The duty over `leases`, writing through `node`.
    pub fn new(leases: Arc<LockLeases>, node: Arc<RaftNode>) -> Arc<VariableLockDuty> {
        Arc::new(VariableLockDuty {
            leases,
            node,
            service: LeaderService::default(),
        })
    }
}

/// One look: release what lapsed.
async fn check(leases: &LockLeases, node: &RaftNode) {
    let snap = node.state().snapshot();
    let locks = locked(&snap);
    let lapsed = leases.lapsed(
        locks
            .iter()
            .map(|(ns, path, lock)| (ns.as_str(), path.as_str(), lock)),
        Instant::now(),
    );
    for l in lapsed {
        let cmd = Command::VariableLockRelease(VariableLockRelease {
            namespace: l.namespace.clone(),
            path: l.path.clone(),
            lock_id: l.lock_id.clone(),
        });
        let place = (l.namespace.as_str(), l.path.as_str());
        match node.write_local(cmd).await {
            Ok(applied) if applied.response.rejection().is_none() => {
                info!(namespace = %l.namespace, path = %l.path, "variable lock lapsed and released");
                leases.released(place, &l.lock_id);
            }
            // Released or changed meanwhile: nothing to do.
            Ok(_) => leases.released(place, &l.lock_id),
            Err(e) => {
                warn!(path = %l.path, error = %e, "lapsed variable lock not released; retrying")
            }
        }
    }
}

impl LeaderDuty for VariableLockDuty {
    fn name(&self) -> &'static str {
        "variable-locks"
    }

    fn establish(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            self.leases.clear();
            let (leases, node) = (self.leases.clone(), self.node.clone());
            self.service.start(|set| {
                set.spawn(move |stop| async move {
                    run_every(&stop, CHECK_INTERVAL, || {
                        let (leases, node) = (leases.clone(), node.clone());
                        async move {
                            check(&leases, &node).await;
                            std::ops::ControlFlow::Continue(())
                        }
                    })
                    .await;
                });
            });
            Ok(())
        })
    }

    fn revoke(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.service.stop().await;
            self.leases.clear();
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(id: &str) -> VariableLock {
        VariableLock {
            id: id.into(),
            ttl: 10_000_000_000,
            lock_delay: 15_000_000_000,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lock_lapses_two_ttls_after_its_last_renewal_and_is_released_after_its_delay() {
        let leases = LockLeases::default();
        let l = lock("L1");
        let start = Instant::now();
        leases.acquired(("default", "app"), "L1", start);
        let at = |s: u64| start + Duration::from_secs(s);
        let held = [("default", "app", &l)];
        assert!(leases.lapsed(held.into_iter(), at(19)).is_empty());
        // Renewed at 15 s: its lease runs to 35 s.
        tokio::time::advance(Duration::from_secs(15)).await;
        assert_eq!(leases.renew(("default", "app"), &l, at(15)), Ok(()));
        assert!(leases.lapsed(held.into_iter(), at(34)).is_empty());
        // Lapsed at 35 s: no renewal now, and released only after the delay (50 s).
        assert_eq!(
            leases.renew(("default", "app"), &l, at(35)),
            Err("attempting to modify locked variable")
        );
        assert!(leases.lapsed(held.into_iter(), at(49)).is_empty());
        assert_eq!(
            leases.lapsed(held.into_iter(), at(50)),
            vec![Lapsed {
                namespace: "default".into(),
                path: "app".into(),
                lock_id: "L1".into()
            }]
        );
        leases.released(("default", "app"), "L1");
        // A lock a new leader finds gets a fresh lease from when it first looks.
        let l2 = lock("L2");
        leases.clear();
        assert!(leases
            .lapsed([("default", "b", &l2)].into_iter(), at(100))
            .is_empty());
        assert_eq!(leases.renew(("default", "b"), &l2, at(119)), Ok(()));
        assert!(leases
            .lapsed([("default", "b", &l2)].into_iter(), at(150))
            .is_empty());
        assert_eq!(
            leases
                .lapsed([("default", "b", &l2)].into_iter(), at(154))
                .len(),
            1
        );
        // Leases of locks no longer held are forgotten.
        assert!(leases.lapsed(std::iter::empty(), at(200)).is_empty());
        assert!(leases.map().is_empty());
    }
}
