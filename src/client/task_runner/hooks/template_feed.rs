//! One blocking read per allocation for what its tasks' templates read.
//!
//! Each task's template hook subscribes with its workload identity and the dependencies its
//! templates read at their last render ([`TemplateFeed::subscribe`]). The feed keeps one
//! `Template.Read` blocking query open for the whole allocation, with a set per subscribed
//! task, and publishes every answer to all subscribers; each picks out its own part. A
//! subscription that changes (a task starts, stops, or its templates read something new)
//! interrupts the open query, and the next one answers at once, so a newcomer never waits
//! for someone else's change. The query ends when the last subscription is dropped.
//! Gauges `teamster_client_template_feeds` (open queries) and
//! `teamster_client_template_subscriptions` (tasks waiting on them) show the batching.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tracing::debug;

use crate::client::servers::Servers;
use crate::rpc::service::variables::{
    TemplateData, TemplateDep, TemplateReadRequest, TemplateReadSet,
};

/// How long one query blocks (Nomad's `block_query_wait`).
const BLOCK_WAIT: Duration = Duration::from_secs(300);
/// The wait before asking unreachable servers again.
const RETRY: Duration = Duration::from_secs(2);
/// Gauges: the feeds with a query open (one per allocation whose templates watch), and the
/// tasks subscribed to them.
const FEEDS: &str = "teamster_client_template_feeds";
const SUBSCRIPTIONS: &str = "teamster_client_template_subscriptions";

/// One answer of the feed: the index it was read at, and each subscription's data.
#[derive(Debug, Default)]
pub struct FeedAnswer {
    /// The index of the state answered from.
    pub index: u64,
    /// Per subscription: each dependency with what it holds.
    pub by_subscription: BTreeMap<u64, Vec<(TemplateDep, TemplateData)>>,
}

#[derive(Default)]
struct Subscriptions {
    /// Per subscription (its unique number): its token and dependencies.
    sets: BTreeMap<u64, TemplateReadSet>,
    next_id: u64,
    /// The query loop runs.
    running: bool,
}

/// The template reads of one allocation (see the module's documentation).
pub struct TemplateFeed {
    servers: Arc<Servers>,
    subs: Mutex<Subscriptions>,
    changed: Notify,
    answers: watch::Sender<Arc<FeedAnswer>>,
}

impl std::fmt::Debug for TemplateFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TemplateFeed").finish_non_exhaustive()
    }
}

/// A task's subscription: its answers; dropping it unsubscribes. A task may hold more than
/// one for a moment (a stopped watcher finishing while the next one starts): each is its
/// own.
pub struct FeedSubscription {
    feed: Arc<TemplateFeed>,
    id: u64,
    /// The feed's answers (every subscription's; [`FeedSubscription::mine`] picks this
    /// one's).
    pub answers: watch::Receiver<Arc<FeedAnswer>>,
}

impl FeedSubscription {
    /// This subscription's part of the latest answer: its index and data, if it was asked
    /// for.
    pub fn mine(&mut self) -> Option<(u64, Vec<(TemplateDep, TemplateData)>)> {
        let answer = self.answers.borrow_and_update();
        answer
            .by_subscription
            .get(&self.id)
            .map(|d| (answer.index, d.clone()))
    }
}

impl Drop for FeedSubscription {
    fn drop(&mut self) {
        let removed = self.feed.lock().sets.remove(&self.id).is_some();
        if removed {
            metrics::gauge!(SUBSCRIPTIONS).decrement(1.0);
            self.feed.changed.notify_one();
        }
    }
}

impl TemplateFeed {
    /// A feed reading from `servers`.
    pub fn new(servers: Arc<Servers>) -> Arc<Self> {
        Arc::new(TemplateFeed {
            servers,
            subs: Mutex::new(Subscriptions::default()),
            changed: Notify::new(),
            answers: watch::channel(Arc::new(FeedAnswer::default())).0,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Subscriptions> {
        self.subs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Subscribe to `deps`, read with `token` (a task's identity). The first answer that
    /// includes them comes at once.
    pub fn subscribe(self: &Arc<Self>, token: &str, deps: Vec<TemplateDep>) -> FeedSubscription {
        let mut answers = self.answers.subscribe();
        answers.mark_unchanged();
        let (id, start) = {
            let mut subs = self.lock();
            subs.next_id += 1;
            let id = subs.next_id;
            let set = TemplateReadSet {
                token: token.to_string(),
                deps,
            };
            subs.sets.insert(id, set);
            let start = !std::mem::replace(&mut subs.running, true);
            (id, start)
        };
        metrics::gauge!(SUBSCRIPTIONS).increment(1.0);
        if start {
            tokio::spawn(self.clone().run());
        } else {
            self.changed.notify_one();
        }
        FeedSubscription {
            feed: self.clone(),
            id,
            answers,
        }
    }

    /// The number of subscriptions.
    pub fn subscribed(&self) -> usize {
        self.lock().sets.len()
    }

    /// Keeps one query open while anyone is subscribed.
    async fn run(self: Arc<Self>) {
        metrics::gauge!(FEEDS).increment(1.0);
        let mut index = 0u64;
        loop {
            // Armed before the subscriptions are read: a change after this wakes it.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (ids, reads) = {
                let mut subs = self.lock();
                if subs.sets.is_empty() {
                    subs.running = false;
                    metrics::gauge!(FEEDS).decrement(1.0);
                    return;
                }
                subs.sets
                    .iter()
                    .map(|(id, set)| (*id, set.clone()))
                    .unzip::<_, _, Vec<u64>, Vec<TemplateReadSet>>()
            };
            let request = TemplateReadRequest {
                reads: reads.clone(),
                min_index: index,
                wait_ms: u64::try_from(BLOCK_WAIT.as_millis()).unwrap_or(u64::MAX),
            };
            tokio::select! {
                _ = &mut changed => {
                    // Someone came, went or reads something new: answer them at once.
                    index = 0;
                }
                answer = self.servers.template_read(request) => match answer {
                    Ok(answer) => {
                        // Never 0: the tables of a cluster that never wrote a variable or a
                        // service are at index 0, and a query from 0 answers at once.
                        index = answer.index.max(1);
                        let unavailable = answer
                            .data
                            .iter()
                            .flatten()
                            .any(|d| *d == TemplateData::Unavailable);
                        let by_subscription = ids
                            .into_iter()
                            .zip(reads)
                            .zip(answer.data)
                            .map(|((id, set), data)| (id, set.deps.into_iter().zip(data).collect()))
                            .collect();
                        self.answers.send_replace(Arc::new(FeedAnswer {
                            index: answer.index,
                            by_subscription,
                        }));
                        if unavailable {
                            // Something the servers could not read now: ask again soon
                            // rather than wait for a change of the tables.
                            index = 0;
                            tokio::select! {
                                _ = &mut changed => {}
                                _ = tokio::time::sleep(RETRY) => {}
                            }
                        }
                    }
                    Err(e) => {
                        debug!(error = %e, "templates' data not read; retrying");
                        index = 0;
                        tokio::select! {
                            _ = &mut changed => {}
                            _ = tokio::time::sleep(RETRY) => {}
                        }
                    }
                },
            }
        }
    }
}
