//! Preemption: which allocations of lower-priority jobs to evict from a node so that an
//! allocation of a higher-priority job fits there (Nomad's `Preemptor`), and how much a node
//! that needs evictions is worth against one that does not.
//!
//! ```text
//!  node lacks room for the ask ─▶ need = usage with the ask − capacity (per dimension)
//!     candidates: the node's live allocations of other jobs with
//!                 priority ≤ placing priority − PRIORITY_DELTA (10), not already stopped
//!     by priority, lowest first: take the candidate closest to what is still needed
//!                 until the need is covered (a higher priority only if the lower ones
//!                 cannot cover it)
//!     drop what is not needed: highest priority first, then the smallest
//!  ─▶ victims (None: evicting every candidate would not make room)
//! ```
//!
//! "Closest" is a distance between the resources still needed and a candidate's, per
//! dimension still needed, relative to the need: a candidate that frees exactly what is
//! missing is at 0, one that frees much more or much less is farther. Taking the closest
//! first gives few evictions; trimming afterwards removes any a later, larger pick made
//! unnecessary. The choice is deterministic (ties go to the smaller allocation id).
//!
//! Preemption frees CPU, memory and disk. A placement that fails on host ports is not
//! preempted for (Nomad has a separate network pass; teamster does not evict for ports).
//!
//! Which schedulers preempt is the scheduler configuration's `PreemptionConfig`: system jobs
//! by default, service, batch and sysbatch jobs when turned on. The system scheduler tries
//! preemption on a node as soon as the node lacks room; the generic scheduler only when a
//! normal selection found no node at all (Nomad's second `Select` with `Preempt`).

use std::sync::Arc;

use teamster_storage::model::{AllocId, Allocation, Resources};

/// How many priority points a victim's job must be below the placing job's (Nomad: a victim
/// must have `priority − victimPriority ≥ 10`).
pub const PRIORITY_DELTA: u32 = 10;

/// An allocation that may be evicted, with its job's priority.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    /// The allocation.
    pub alloc: Arc<Allocation>,
    /// Its job's priority.
    pub priority: u32,
}

/// What a node must free for an allocation to fit: how far `used` (its allocations with the
/// new one) is over `capacity`, per dimension.
pub(crate) fn shortfall(capacity: &Resources, used: &Resources) -> Resources {
    Resources {
        cpu: used.cpu.saturating_sub(capacity.cpu),
        memory_mb: used.memory_mb.saturating_sub(capacity.memory_mb),
        disk_mb: used.disk_mb.saturating_sub(capacity.disk_mb),
        memory_max_mb: 0,
        cores: 0,
    }
}

/// True when the placing job's `priority` may evict an allocation of a job at `victim`.
pub(crate) fn may_preempt(priority: u32, victim: u32) -> bool {
    priority >= victim.saturating_add(PRIORITY_DELTA)
}

/// Chooses the allocations to evict so that `need` is freed (see the module docs), or `None`
/// when all of `candidates` together would not free it. `candidates` must already be
/// filtered to those that may be evicted.
pub(crate) fn choose(need: &Resources, mut candidates: Vec<Candidate>) -> Option<Vec<Candidate>> {
    if is_zero(need) {
        return Some(Vec::new());
    }
    candidates.sort_by(|a, b| (a.priority, &a.alloc.id).cmp(&(b.priority, &b.alloc.id)));
    let mut chosen: Vec<Candidate> = Vec::new();
    let mut remaining = *need;
    let mut rest = candidates.as_slice();
    while !rest.is_empty() && !is_zero(&remaining) {
        let priority = rest[0].priority;
        let split = rest
            .iter()
            .position(|c| c.priority != priority)
            .unwrap_or(rest.len());
        let mut pool: Vec<Candidate> = rest[..split].to_vec();
        rest = &rest[split..];
        while !is_zero(&remaining) {
            let best = pool
                .iter()
                .enumerate()
                .filter(|(_, c)| helps(&remaining, &c.alloc.resources))
                .min_by(|(_, a), (_, b)| {
                    distance(&remaining, &a.alloc.resources)
                        .total_cmp(&distance(&remaining, &b.alloc.resources))
                        .then_with(|| a.alloc.id.cmp(&b.alloc.id))
                })
                .map(|(at, _)| at);
            let Some(at) = best else {
                break;
            };
            let victim = pool.remove(at);
            remaining = crate::scheduler::fit::subtract(&remaining, &victim.alloc.resources);
            chosen.push(victim);
        }
    }
    if !is_zero(&remaining) {
        return None;
    }
    Some(trim(need, chosen))
}

/// Drops victims the others already cover: the highest priority first, then the smallest.
fn trim(need: &Resources, mut chosen: Vec<Candidate>) -> Vec<Candidate> {
    let order: Vec<AllocId> = {
        let mut by_cost: Vec<&Candidate> = chosen.iter().collect();
        by_cost.sort_by(|a, b| {
            b.priority
                .cmp(&a.priority)
                .then_with(|| size(&a.alloc.resources).cmp(&size(&b.alloc.resources)))
                .then_with(|| a.alloc.id.cmp(&b.alloc.id))
        });
        by_cost.into_iter().map(|c| c.alloc.id.clone()).collect()
    };
    for id in order {
        let without: Resources = chosen
            .iter()
            .filter(|c| c.alloc.id != id)
            .fold(Resources::ZERO, |acc, c| acc.add(&c.alloc.resources));
        if crate::scheduler::fit::within(need, &without) {
            chosen.retain(|c| c.alloc.id != id);
        }
    }
    chosen
}

/// The score component of a node whose placement needs `victims`, in (−1, 0): the more and
/// the higher-priority the evictions, the lower. Zero without evictions.
pub(crate) fn score(victims: &[Candidate]) -> f64 {
    let net: f64 = victims.iter().map(|v| f64::from(v.priority)).sum();
    if victims.is_empty() {
        0.0
    } else {
        -(net + victims.len() as f64) / (net + victims.len() as f64 + 100.0)
    }
}

fn is_zero(r: &Resources) -> bool {
    r.cpu == 0 && r.memory_mb == 0 && r.disk_mb == 0
}

/// Whether evicting `have` reduces some dimension that is still needed.
fn helps(need: &Resources, have: &Resources) -> bool {
    (need.cpu > 0 && have.cpu > 0)
        || (need.memory_mb > 0 && have.memory_mb > 0)
        || (need.disk_mb > 0 && have.disk_mb > 0)
}

/// How far freeing `have` is from freeing exactly `need`, over the dimensions still needed.
fn distance(need: &Resources, have: &Resources) -> f64 {
    let term = |need: u64, have: u64| {
        if need == 0 {
            0.0
        } else {
            let d = (need as f64 - have as f64) / need as f64;
            d * d
        }
    };
    (term(need.cpu, have.cpu)
        + term(need.memory_mb, have.memory_mb)
        + term(need.disk_mb, have.disk_mb))
    .sqrt()
}

/// A rough size to order victims of equal priority when trimming (CPU plus memory).
fn size(r: &Resources) -> u64 {
    r.cpu.saturating_add(r.memory_mb)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(id: &str, priority: u32, cpu: u64, memory_mb: u64) -> Candidate {
        Candidate {
            alloc: Arc::new(Allocation {
                id: AllocId::new(id),
                resources: Resources {
                    cpu,
                    memory_mb,
                    disk_mb: 0,
                    memory_max_mb: 0,
                    cores: 0,
                },
                ..Allocation::default()
            }),
            priority,
        }
    }

    fn ids(chosen: Option<Vec<Candidate>>) -> Option<Vec<String>> {
        chosen.map(|c| {
            let mut ids: Vec<String> = c.iter().map(|c| c.alloc.id.to_string()).collect();
            ids.sort();
            ids
        })
    }

    fn cpu(cpu: u64) -> Resources {
        Resources {
            cpu,
            memory_mb: 0,
            disk_mb: 0,
            memory_max_mb: 0,
            cores: 0,
        }
    }

    #[test]
    fn the_priority_rule_needs_ten_points() {
        assert!(may_preempt(60, 50));
        assert!(!may_preempt(59, 50));
        assert!(!may_preempt(50, 50));
        assert!(!may_preempt(40, 50));
        assert!(!may_preempt(5, u32::MAX));
    }

    #[test]
    fn the_lowest_priority_is_taken_before_fewer_evictions() {
        let candidates = vec![
            candidate("a", 20, 500, 0),
            candidate("b", 20, 500, 0),
            candidate("c", 30, 1000, 0),
        ];
        assert_eq!(
            ids(choose(&cpu(1000), candidates)),
            Some(vec!["a".into(), "b".into()])
        );
        // The higher priority is used only when the lower one cannot cover the need.
        let candidates = vec![candidate("a", 20, 400, 0), candidate("c", 30, 1000, 0)];
        assert_eq!(
            ids(choose(&cpu(1000), candidates)),
            Some(vec!["c".into()]),
            "a is dropped once c covers the need alone"
        );
    }

    #[test]
    fn within_a_priority_the_fewest_evictions_win() {
        let candidates = vec![
            candidate("small-1", 20, 400, 0),
            candidate("small-2", 20, 400, 0),
            candidate("small-3", 20, 400, 0),
            candidate("exact", 20, 1000, 0),
        ];
        assert_eq!(
            ids(choose(&cpu(1000), candidates)),
            Some(vec!["exact".into()])
        );
        // A larger one picked last makes earlier smaller ones unnecessary: they are trimmed.
        let candidates = vec![
            candidate("small", 20, 300, 0),
            candidate("big", 20, 2000, 0),
        ];
        assert_eq!(ids(choose(&cpu(500), candidates)), Some(vec!["big".into()]));
    }

    #[test]
    fn every_needed_dimension_is_covered() {
        let need = Resources {
            cpu: 100,
            memory_mb: 512,
            disk_mb: 0,
            memory_max_mb: 0,
            cores: 0,
        };
        let candidates = vec![
            candidate("cpu-only", 20, 2000, 0),
            candidate("mem-only", 20, 0, 1024),
        ];
        assert_eq!(
            ids(choose(&need, candidates)),
            Some(vec!["cpu-only".into(), "mem-only".into()])
        );
        // Candidates that free nothing needed are never taken.
        let candidates = vec![candidate("cpu-only", 20, 2000, 0)];
        assert_eq!(ids(choose(&need, candidates)), None);
    }

    #[test]
    fn not_enough_is_none_and_nothing_needed_is_empty() {
        let candidates = vec![candidate("a", 20, 300, 0), candidate("b", 20, 300, 0)];
        assert_eq!(ids(choose(&cpu(1000), candidates.clone())), None);
        assert_eq!(ids(choose(&cpu(0), candidates)), Some(vec![]));
    }

    #[test]
    fn more_and_higher_victims_score_lower() {
        let low = vec![candidate("a", 10, 1, 0)];
        let high = vec![candidate("a", 40, 1, 0)];
        let two = vec![candidate("a", 10, 1, 0), candidate("b", 10, 1, 0)];
        assert_eq!(score(&[]), 0.0);
        assert!(score(&low) < 0.0 && score(&low) > -1.0);
        assert!(score(&high) < score(&low));
        assert!(score(&two) < score(&low));
    }

    #[test]
    fn shortfall_is_what_is_over_capacity() {
        let capacity = Resources {
            cpu: 1000,
            memory_mb: 1000,
            disk_mb: 1000,
            memory_max_mb: 0,
            cores: 0,
        };
        let used = Resources {
            cpu: 1500,
            memory_mb: 900,
            disk_mb: 1001,
            memory_max_mb: 0,
            cores: 0,
        };
        assert_eq!(
            shortfall(&capacity, &used),
            Resources {
                cpu: 500,
                memory_mb: 0,
                disk_mb: 1,
                memory_max_mb: 0,
                cores: 0,
            }
        );
    }
}
