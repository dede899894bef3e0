//! The job list's stubs, kept serialized: `GET /v1/jobs` answers with each job's stub as
//! JSON, and between two listings only the jobs that changed have a new stub. A listing
//! joins the stubs kept for jobs whose stored job and summary are the very same `Arc`s as
//! when their stub was made, and serializes only the others.
//!
//! Whether a stub is current is decided by identity, not by indexes: the state store
//! writes every change of a job or of its summary as a new `Arc`, so a stub made from the
//! same two `Arc`s says the same. The cache holds them as `Weak`s, which keep their
//! allocations (not their contents) alive, so an address cannot be reused by a newer
//! version while the cache still compares against it.
//!
//! The answer is byte for byte what serializing the list of stubs in one go gives (a test
//! checks it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use serde::Serialize;
use teamster_storage::model::{Job, JobId, JobSummary, Namespace};

/// Serialized stubs by job, shared by the listings of one agent.
#[derive(Default)]
pub(crate) struct StubCache {
    stubs: Mutex<HashMap<(Namespace, JobId), Cached>>,
}

struct Cached {
    job: Weak<Job>,
    summary: Option<Weak<JobSummary>>,
    json: Arc<[u8]>,
}

impl Cached {
    fn is_of(&self, job: &Arc<Job>, summary: Option<&Arc<JobSummary>>) -> bool {
        std::ptr::eq(self.job.as_ptr(), Arc::as_ptr(job))
            && match (&self.summary, summary) {
                (None, None) => true,
                (Some(kept), Some(now)) => std::ptr::eq(kept.as_ptr(), Arc::as_ptr(now)),
                _ => false,
            }
    }
}

impl StubCache {
    /// The JSON array of the stubs of `jobs` (each with its summary), in their order;
    /// `stub` makes the stub of a job whose kept one is missing or out of date. `live_jobs`
    /// is how many jobs the state holds: kept stubs of jobs gone are dropped once the cache
    /// outgrows it. The lock is held only to look stubs up and to store new ones, not
    /// while serializing, so listings run side by side.
    pub fn list<'a, S: Serialize>(
        &self,
        jobs: impl Iterator<Item = (&'a Arc<Job>, Option<&'a Arc<JobSummary>>)>,
        live_jobs: usize,
        stub: impl Fn(&'a Job, Option<&'a Arc<JobSummary>>) -> S,
    ) -> Result<Vec<u8>, serde_json::Error> {
        let jobs: Vec<_> = jobs.collect();
        let kept: Vec<Option<Arc<[u8]>>> = {
            let stubs = self.lock();
            jobs.iter()
                .map(|(job, summary)| {
                    stubs
                        .get(&(job.namespace.clone(), job.id.clone()))
                        .filter(|kept| kept.is_of(job, *summary))
                        .map(|kept| kept.json.clone())
                })
                .collect()
        };
        let mut made = Vec::new();
        let mut parts = Vec::with_capacity(jobs.len());
        for ((job, summary), kept) in jobs.iter().zip(kept) {
            let json = match kept {
                Some(json) => json,
                None => {
                    let json: Arc<[u8]> = serde_json::to_vec(&stub(job, *summary))?.into();
                    made.push((
                        (job.namespace.clone(), job.id.clone()),
                        Cached {
                            job: Arc::downgrade(job),
                            summary: summary.map(Arc::downgrade),
                            json: json.clone(),
                        },
                    ));
                    json
                }
            };
            parts.push(json);
        }
        let size = 2 + parts.iter().map(|p| p.len() + 1).sum::<usize>();
        let mut out = Vec::with_capacity(size);
        out.push(b'[');
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(part);
        }
        out.push(b']');
        metrics::counter!("teamster_http_job_stubs_serialized_total").increment(made.len() as u64);
        let mut stubs = self.lock();
        stubs.extend(made);
        if stubs.len() > 2 * live_jobs + 64 {
            // Jobs deregistered and collected since: their stored versions are gone.
            stubs.retain(|_, kept| kept.job.strong_count() > 0);
            if stubs.len() > 2 * live_jobs + 64 {
                stubs.clear();
            }
        }
        Ok(out)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(Namespace, JobId), Cached>> {
        self.stubs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many stubs are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use teamster_storage::model::{JobStatus, TaskGroupSummary};

    #[derive(Serialize)]
    #[serde(rename_all = "PascalCase")]
    struct Stub<'a> {
        #[serde(rename = "ID")]
        id: &'a JobId,
        status: JobStatus,
        job_summary: Option<&'a JobSummary>,
    }

    fn stub<'a>(job: &'a Job, summary: Option<&'a Arc<JobSummary>>) -> Stub<'a> {
        Stub {
            id: &job.id,
            status: job.status,
            job_summary: summary.map(|s| s.as_ref()),
        }
    }

    fn job(id: &str) -> Arc<Job> {
        Arc::new(Job {
            id: JobId::new(id),
            namespace: Namespace::new("default"),
            ..Job::default()
        })
    }

    /// A listing's jobs with their summaries.
    type Listing = Vec<(Arc<Job>, Option<Arc<JobSummary>>)>;

    /// What serializing the whole list at once gives.
    fn direct(jobs: &[(Arc<Job>, Option<Arc<JobSummary>>)]) -> Vec<u8> {
        let stubs: Vec<Stub<'_>> = jobs.iter().map(|(j, s)| stub(j, s.as_ref())).collect();
        serde_json::to_vec(&stubs).unwrap()
    }

    fn listed(
        cache: &StubCache,
        jobs: &[(Arc<Job>, Option<Arc<JobSummary>>)],
        made: &Cell<u32>,
    ) -> Vec<u8> {
        cache
            .list(
                jobs.iter().map(|(j, s)| (j, s.as_ref())),
                jobs.len(),
                |j, s| {
                    made.set(made.get() + 1);
                    stub(j, s)
                },
            )
            .unwrap()
    }

    #[test]
    fn a_listing_is_the_list_serialized_at_once_and_only_changed_jobs_are_serialized_again() {
        let cache = StubCache::default();
        let made = Cell::new(0);
        assert_eq!(listed(&cache, &[], &made), b"[]");

        let mut summary = JobSummary::default();
        summary
            .summary
            .insert("web".into(), TaskGroupSummary::default());
        let mut jobs: Listing = vec![
            (job("a"), Some(Arc::new(summary.clone()))),
            (job("b"), None),
            (job("c"), Some(Arc::new(summary.clone()))),
        ];
        assert_eq!(listed(&cache, &jobs, &made), direct(&jobs));
        assert_eq!(made.get(), 3, "every stub is made the first time");

        // Nothing changed: every stub is the kept one.
        assert_eq!(listed(&cache, &jobs, &made), direct(&jobs));
        assert_eq!(made.get(), 3);

        // A new version of one job (same contents, new Arc) and a new summary of another.
        let mut running = (*jobs[1].0).clone();
        running.status = JobStatus::Running;
        jobs[1].0 = Arc::new(running);
        summary.summary.get_mut("web").unwrap().running = 1;
        jobs[2].1 = Some(Arc::new(summary.clone()));
        let out = listed(&cache, &jobs, &made);
        assert_eq!(out, direct(&jobs));
        assert_eq!(
            made.get(),
            5,
            "only the two changed jobs are serialized again"
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains(r#""Status":"running""#), "{text}");
        assert!(text.contains(r#""Running":1"#), "{text}");

        // A summary that goes away counts as a change too.
        jobs[0].1 = None;
        assert_eq!(listed(&cache, &jobs, &made), direct(&jobs));
        assert_eq!(made.get(), 6);

        // A listing of a subset (a prefix) keeps the others' stubs.
        assert_eq!(listed(&cache, &jobs[..1], &made), direct(&jobs[..1]));
        assert_eq!(made.get(), 6);
        assert_eq!(cache.len(), 3);
    }

    #[test]
    fn a_new_version_allocated_where_a_freed_one_was_is_not_taken_for_it() {
        // The kept stub holds the old version's allocation: a new version of the same size,
        // allocated right after the old one is dropped, cannot get its address. (With plain
        // pointers the allocator hands the freed block straight back, and the stale stub
        // would be served: this test fails then.)
        let cache = StubCache::default();
        let made = Cell::new(0);
        let mut previous: Option<Listing> = None;
        for round in 0..20 {
            let version = Job {
                status: if round % 2 == 0 {
                    JobStatus::Pending
                } else {
                    JobStatus::Running
                },
                ..(*job("a")).clone()
            };
            drop(previous.take());
            let jobs = vec![(Arc::new(version), None)];
            assert_eq!(listed(&cache, &jobs, &made), direct(&jobs), "round {round}");
            previous = Some(jobs);
        }
        assert_eq!(made.get(), 20, "every version was serialized");
    }

    #[test]
    fn stubs_of_jobs_gone_are_dropped_once_the_cache_outgrows_the_state() {
        let cache = StubCache::default();
        let made = Cell::new(0);
        let many: Listing = (0..100).map(|i| (job(&format!("old-{i}")), None)).collect();
        listed(&cache, &many, &made);
        assert_eq!(cache.len(), 100);
        drop(many);
        // The old jobs are gone from the state; a listing of the one job left prunes them.
        let left = vec![(job("new"), None)];
        assert_eq!(listed(&cache, &left, &made), direct(&left));
        assert_eq!(cache.len(), 1);
    }
}
