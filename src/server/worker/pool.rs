//! The pool of scheduler workers on one server: `num_schedulers` workers serving
//! `enabled_schedulers`, resized in place at run time, and on the leader the first
//! `3*n/4` (n ≥ 2) paused so the leader's CPU goes to raft and the plan applier.
//!
//! The pause set is a function of two inputs — the number of workers and whether this server
//! is the leader — and is re-applied under the pool lock after every resize and every
//! leadership change, so a worker can never stay paused on a follower (Nomad reads its worker
//! slice without the lock there, and can strand workers paused).
//!
//! Growing starts workers at the end; shrinking stops the newest ones, which finish their
//! current evaluation first. Changing the scheduler types updates every worker in place.

use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tracing::info;

use super::{Worker, WorkerContext, WorkerError, WorkerInfo, WorkerStatus};
use crate::server::config::{validate_schedulers, MAX_SCHEDULERS};
use crate::server::leader::LeaderDuty;

/// The pool's run-time configuration (Nomad's `SchedulerWorkerPoolArgs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolConfig {
    /// How many workers.
    pub num_schedulers: usize,
    /// The scheduler types they serve.
    pub enabled_schedulers: Vec<String>,
}

impl PoolConfig {
    /// 0 ≤ `num_schedulers` ≤ 256; known types, no duplicates, `_core` present.
    pub fn validate(&self) -> Result<(), WorkerError> {
        if self.num_schedulers > MAX_SCHEDULERS {
            return Err(WorkerError::Invalid(format!(
                "num_schedulers must be between 0 and {MAX_SCHEDULERS}, got {}",
                self.num_schedulers
            )));
        }
        validate_schedulers(&self.enabled_schedulers)
            .map_err(|r| WorkerError::Invalid(format!("enabled_schedulers: {r}")))
    }
}

/// How many of `n` workers the leader pauses.
pub fn paused_on_leader(n: usize) -> usize {
    if n < 2 {
        0
    } else {
        3 * n / 4
    }
}

struct PoolState {
    config: PoolConfig,
    workers: Vec<Worker>,
    /// Stopped by a shrink, finishing their evaluation.
    retiring: Vec<Worker>,
    leader: bool,
    next_seed: u64,
}

/// The server's scheduler workers.
pub struct WorkerPool {
    ctx: Arc<WorkerContext>,
    state: Mutex<PoolState>,
}

impl WorkerPool {
    /// Start `config.num_schedulers` workers (as a follower: none paused).
    pub fn start(
        ctx: Arc<WorkerContext>,
        config: PoolConfig,
    ) -> Result<Arc<WorkerPool>, WorkerError> {
        config.validate()?;
        let next_seed = ctx.rng.next_u64();
        let pool = Arc::new(WorkerPool {
            ctx,
            state: Mutex::new(PoolState {
                config: PoolConfig {
                    num_schedulers: 0,
                    enabled_schedulers: config.enabled_schedulers.clone(),
                },
                workers: Vec::new(),
                retiring: Vec::new(),
                leader: false,
                next_seed,
            }),
        });
        pool.set_config(config)?;
        Ok(pool)
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The configuration in force.
    pub fn config(&self) -> PoolConfig {
        self.lock().config.clone()
    }

    /// Apply a new configuration in place and answer the one in force afterwards. Invalid →
    /// error and nothing changes.
    pub fn set_config(&self, config: PoolConfig) -> Result<PoolConfig, WorkerError> {
        config.validate()?;
        let mut st = self.lock();
        if st.config.enabled_schedulers != config.enabled_schedulers {
            for w in &st.workers {
                w.set_enabled(config.enabled_schedulers.clone());
            }
        }
        let before = st.workers.len();
        while st.workers.len() < config.num_schedulers {
            st.next_seed = st.next_seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let w = Worker::start(
                self.ctx.clone(),
                config.enabled_schedulers.clone(),
                st.next_seed,
            );
            st.workers.push(w);
        }
        while st.workers.len() > config.num_schedulers {
            let w = st.workers.pop().expect("len > 0");
            w.stop();
            st.retiring.push(w);
        }
        st.retiring.retain(|w| !w.is_finished());
        st.config = config.clone();
        apply_pause(&st);
        if before != st.workers.len() {
            info!(
                from = before,
                to = st.workers.len(),
                leader = st.leader,
                "scheduler workers resized"
            );
        }
        Ok(config)
    }

    /// Record whether this server leads and re-apply the pause set.
    pub fn set_leader(&self, leader: bool) {
        let mut st = self.lock();
        st.leader = leader;
        apply_pause(&st);
        info!(
            leader,
            paused = paused_on_leader(st.workers.len()) * usize::from(leader),
            "scheduler worker pause set applied"
        );
    }

    /// Every worker's row for the API, oldest first.
    pub fn info(&self) -> Vec<WorkerInfo> {
        self.lock().workers.iter().map(Worker::info).collect()
    }

    /// How many workers are parked right now.
    pub fn paused(&self) -> usize {
        self.lock()
            .workers
            .iter()
            .filter(|w| w.status() == WorkerStatus::Paused)
            .count()
    }

    /// Run `f` over the workers under the pool lock (tests).
    pub fn with_workers<T>(&self, f: impl FnOnce(&[Worker]) -> T) -> T {
        f(&self.lock().workers)
    }

    /// Stop every worker (the server's shutdown token must already be cancelled for
    /// evaluations in hand to be nacked) and wait for them up to the shutdown grace.
    pub async fn shutdown(&self) {
        let workers: Vec<Worker> = {
            let mut st = self.lock();
            let mut all: Vec<Worker> = st.workers.drain(..).collect();
            all.append(&mut st.retiring);
            all
        };
        for w in &workers {
            w.stop();
        }
        let all = futures::future::join_all(workers.iter().map(Worker::join));
        if tokio::time::timeout(self.ctx.config.shutdown_grace, all)
            .await
            .is_err()
        {
            tracing::warn!("scheduler workers did not stop within the shutdown grace");
        }
    }
}

/// Pause the first `3n/4` workers on the leader, resume every other one.
fn apply_pause(st: &PoolState) {
    let k = if st.leader {
        paused_on_leader(st.workers.len())
    } else {
        0
    };
    for (i, w) in st.workers.iter().enumerate() {
        if i < k {
            w.pause();
        } else {
            w.resume();
        }
    }
}

/// The first leader duty: pause three quarters of the workers on establish, resume them all
/// on revoke.
pub struct PauseWorkersDuty {
    pool: Arc<WorkerPool>,
}

impl PauseWorkersDuty {
    /// The duty for `pool`.
    pub fn new(pool: Arc<WorkerPool>) -> PauseWorkersDuty {
        PauseWorkersDuty { pool }
    }
}

impl LeaderDuty for PauseWorkersDuty {
    fn name(&self) -> &'static str {
        "pause scheduler workers"
    }

    fn establish(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            self.pool.set_leader(true);
            Ok(())
        })
    }

    fn revoke(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move { self.pool.set_leader(false) })
    }
}
