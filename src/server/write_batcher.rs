//! Group commit: writes that arrive together are proposed as one raft entry.
//!
//! openraft 0.9 appends and fsyncs each `client_write` on its own, so the leader is capped at
//! one proposal per fsync. The batcher drains every write queued while the previous proposals
//! were in flight into one [`Command::Batch`], proposes it, and fans the per-command
//! responses back out to the callers.
//!
//! ```text
//!  write() ─┐                            ┌─▶ reply (index, response 0)
//!  write() ─┼─▶ queue ─▶ Batch[c0,c1,c2] ─┼─▶ reply (index, response 1)
//!  write() ─┘      (≤ max_in_flight       └─▶ reply (index, response 2)
//!                   proposals at once)
//! ```
//!
//! The batcher is generic over how a command is proposed ([`Propose`]), so its batching is
//! tested without raft.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use teamster_storage::fsm::{Command, CommandResponse};
use teamster_storage::raft_types::{ServerAddr, ServerId};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tracing::{debug, warn};

/// A committed and applied write: the raft index of its entry and its own response.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    /// The log index of the entry that carried the command.
    pub index: u64,
    /// What applying the command answered.
    pub response: CommandResponse,
}

/// Why a write was not applied.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WriteError {
    /// This server is not the leader; `leader` is the one it knows of, if any.
    #[error("not the leader")]
    NotLeader {
        /// The leader's raft id and addresses, when known.
        leader: Option<(ServerId, ServerAddr)>,
    },
    /// No leader is known (an election is under way or there is no quorum).
    #[error("No cluster leader")]
    NoLeader,
    /// Raft failed or is shutting down; the write may or may not have been committed.
    #[error("raft error: {0}")]
    Raft(String),
    /// The batcher is shutting down.
    #[error("the server is shutting down")]
    ShuttingDown,
    /// The write was proposed, then the leader lost its lease, or stopped leading, before it
    /// was committed: it may still commit.
    #[error("leadership lost while committing log")]
    LeadershipLost,
}

/// A boxed future of a proposal's outcome.
pub type ProposeFuture =
    Pin<Box<dyn Future<Output = Result<Applied, WriteError>> + Send + 'static>>;

/// Proposes one command (possibly a [`Command::Batch`]) to raft and waits until it is applied.
pub trait Propose: Send + Sync + 'static {
    /// Propose `cmd`.
    fn propose(&self, cmd: Command) -> ProposeFuture;
}

/// Batching limits.
#[derive(Debug, Clone)]
pub struct BatcherConfig {
    /// Most commands in one entry.
    pub max_batch: usize,
    /// Most proposals in flight at once; writes queue behind them and form the next batch.
    pub max_in_flight: usize,
    /// Capacity of the queue of writes waiting for a batch.
    pub queue: usize,
}

impl Default for BatcherConfig {
    fn default() -> Self {
        BatcherConfig {
            max_batch: 1024,
            max_in_flight: 1,
            queue: 16 * 1024,
        }
    }
}

struct Pending {
    cmd: Command,
    reply: oneshot::Sender<Result<Applied, WriteError>>,
}

/// The handle writers call; cheap to clone.
#[derive(Clone)]
pub struct WriteBatcher {
    tx: mpsc::Sender<Pending>,
}

impl WriteBatcher {
    /// Start the batching loop on the current runtime. It ends when every handle is dropped.
    pub fn spawn(config: BatcherConfig, proposer: Arc<dyn Propose>) -> WriteBatcher {
        let (tx, rx) = mpsc::channel(config.queue.max(1));
        tokio::spawn(run(config, proposer, rx));
        WriteBatcher { tx }
    }

    /// Propose `cmd` in the next batch and wait for it to be applied.
    pub async fn write(&self, cmd: Command) -> Result<Applied, WriteError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Pending { cmd, reply })
            .await
            .map_err(|_| WriteError::ShuttingDown)?;
        rx.await.map_err(|_| WriteError::ShuttingDown)?
    }
}

async fn run(config: BatcherConfig, proposer: Arc<dyn Propose>, mut rx: mpsc::Receiver<Pending>) {
    let slots = Arc::new(Semaphore::new(config.max_in_flight.max(1)));
    let max_batch = config.max_batch.max(1);
    while let Some(first) = rx.recv().await {
        // Waiting for a slot is what lets the next batch fill up.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(p) => batch.push(p),
                Err(_) => break,
            }
        }
        metrics::histogram!("teamster_raft_write_batch_size").record(batch.len() as f64);
        let proposer = proposer.clone();
        tokio::spawn(async move {
            let _slot = slot;
            propose_batch(proposer.as_ref(), batch).await;
        });
    }
}

/// Propose `cmd`, timing it from the proposal to its commit and apply.
async fn timed(proposer: &dyn Propose, cmd: Command) -> Result<Applied, WriteError> {
    let started = std::time::Instant::now();
    let result = proposer.propose(cmd).await;
    if result.is_ok() {
        metrics::histogram!("teamster_raft_commit_seconds").record(started.elapsed().as_secs_f64());
        metrics::counter!("teamster_raft_applies_total").increment(1);
    }
    result
}

async fn propose_batch(proposer: &dyn Propose, mut batch: Vec<Pending>) {
    if batch.len() == 1 {
        let p = batch.pop().expect("one element");
        let result = timed(proposer, p.cmd).await;
        let _ = p.reply.send(result);
        return;
    }
    let (cmds, replies): (Vec<Command>, Vec<_>) =
        batch.into_iter().map(|p| (p.cmd, p.reply)).unzip();
    let n = cmds.len();
    debug!(commands = n, "proposing a batch");
    match timed(proposer, Command::Batch(cmds)).await {
        Ok(Applied {
            index,
            response: CommandResponse::Batch(responses),
        }) if responses.len() == n => {
            for (reply, response) in replies.into_iter().zip(responses) {
                let _ = reply.send(Ok(Applied { index, response }));
            }
        }
        Ok(other) => {
            warn!(
                ?other,
                commands = n,
                "a batch was answered with the wrong shape"
            );
            let e = WriteError::Raft("a batch was answered with the wrong shape".into());
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Duration;
    use teamster_storage::fsm::CommandResponse;

    /// Answers each command of a batch with a batch of its own command echoed back, after a
    /// fixed (virtual) delay; records each proposal's size.
    struct Echo {
        sizes: Mutex<Vec<usize>>,
        next_index: Mutex<u64>,
        fail: bool,
    }

    impl Propose for Echo {
        fn propose(&self, cmd: Command) -> ProposeFuture {
            let n = match &cmd {
                Command::Batch(v) => v.len(),
                #[allow(unreachable_patterns)]
                _ => 1,
            };
            self.sizes.lock().unwrap().push(n);
            let index = {
                let mut i = self.next_index.lock().unwrap();
                *i += 1;
                *i
            };
            let fail = self.fail;
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                if fail {
                    return Err(WriteError::NoLeader);
                }
                let response = match cmd {
                    Command::Batch(v) => CommandResponse::Batch(
                        v.into_iter()
                            .map(|c| match c {
                                Command::Batch(inner) => CommandResponse::Batch(
                                    inner
                                        .iter()
                                        .map(|_| CommandResponse::Batch(vec![]))
                                        .collect(),
                                ),
                                #[allow(unreachable_patterns)]
                                _ => CommandResponse::Batch(vec![]),
                            })
                            .collect(),
                    ),
                    #[allow(unreachable_patterns)]
                    _ => CommandResponse::Batch(vec![]),
                };
                Ok(Applied { index, response })
            })
        }
    }

    /// A command that is recognisable in its response: a batch of `k` empty batches.
    fn marker(k: usize) -> Command {
        Command::Batch((0..k).map(|_| Command::Batch(vec![])).collect())
    }

    fn echo(fail: bool) -> Arc<Echo> {
        Arc::new(Echo {
            sizes: Mutex::new(vec![]),
            next_index: Mutex::new(0),
            fail,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_writes_share_entries_and_get_their_own_responses() {
        let p = echo(false);
        let b = WriteBatcher::spawn(
            BatcherConfig {
                max_batch: 1024,
                max_in_flight: 1,
                queue: 1024,
            },
            p.clone(),
        );
        let mut tasks = Vec::new();
        for k in 0..64 {
            let b = b.clone();
            tasks.push(tokio::spawn(
                async move { (k, b.write(marker(k % 7)).await) },
            ));
        }
        for t in tasks {
            let (k, r) = t.await.unwrap();
            let applied = r.unwrap();
            match applied.response {
                CommandResponse::Batch(v) => assert_eq!(v.len(), k % 7, "write {k}"),
                #[allow(unreachable_patterns)]
                _ => panic!("unexpected response"),
            }
        }
        let sizes = p.sizes.lock().unwrap().clone();
        assert_eq!(sizes.iter().sum::<usize>(), 64);
        assert!(
            sizes.len() < 64 / 4,
            "64 concurrent writes should share a few entries, got {sizes:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_write_is_proposed_unwrapped() {
        let p = echo(false);
        let b = WriteBatcher::spawn(BatcherConfig::default(), p.clone());
        let r = b.write(marker(3)).await.unwrap();
        assert_eq!(r.index, 1);
        assert_eq!(
            *p.sizes.lock().unwrap(),
            vec![3],
            "proposed as itself, not wrapped"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn batches_respect_max_batch() {
        let p = echo(false);
        let b = WriteBatcher::spawn(
            BatcherConfig {
                max_batch: 10,
                max_in_flight: 1,
                queue: 1024,
            },
            p.clone(),
        );
        let tasks: Vec<_> = (0..45)
            .map(|_| {
                let b = b.clone();
                tokio::spawn(async move { b.write(marker(0)).await })
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let sizes = p.sizes.lock().unwrap().clone();
        assert!(sizes.iter().all(|&n| n <= 10), "{sizes:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_error_reaches_every_writer_of_the_batch() {
        let p = echo(true);
        let b = WriteBatcher::spawn(BatcherConfig::default(), p);
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let b = b.clone();
                tokio::spawn(async move { b.write(marker(1)).await })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap(), Err(WriteError::NoLeader));
        }
    }
}
