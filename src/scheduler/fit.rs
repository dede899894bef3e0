//! Resource fit and fit scores: the one definition that the scheduler's ranking and the plan
//! applier's verification ([`crate::scheduler::verify`]) share, so a node the scheduler
//! thinks has room is exactly a node the applier accepts.
//!
//! A node offers its `NodeResources` minus its `ReservedResources` ([`node_capacity`]).
//! The allocations on it fit when the sum of their resources stays within that capacity in
//! every dimension ([`check_fit`], Nomad's `AllocsFit` for CPU, memory and disk). Ranking uses
//! Nomad's fit score ([`fit_score`], `ScoreFitBinPack` / `ScoreFitSpread`):
//!
//! ```text
//!   total = 10^freeCpu% + 10^freeMem%      (free after the placement, 0..1 each)
//!   binpack: 20 − total   spread: total − 2  clamped to [0, 18]
//! ```

use std::fmt;

use teamster_storage::model::{Node, Resources, SchedulerAlgorithm};

/// The highest raw fit score (Nomad's `binPackingMaxFitScore`); ranking divides by it.
pub const MAX_FIT_SCORE: f64 = 18.0;

/// A resource dimension a node can run out of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dimension {
    /// CPU, in MHz.
    Cpu,
    /// Memory, in MB.
    Memory,
    /// Disk, in MB.
    Disk,
    /// Host ports (a static port taken, or the dynamic range used up).
    Network,
    /// Whole CPU cores a task reserves (`cores`): too few left unreserved.
    Cores,
}

impl Dimension {
    /// Nomad's name for the dimension, as used in `DimensionExhausted`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Dimension::Cpu => "cpu",
            Dimension::Memory => "memory",
            Dimension::Disk => "disk",
            Dimension::Network => "network",
            Dimension::Cores => "cores",
        }
    }
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a node offers to allocations: its resources minus what it reserves for itself.
pub fn node_capacity(node: &Node) -> Resources {
    let offered = &node.node_resources;
    let reserved = &node.reserved_resources;
    Resources {
        cpu: offered
            .cpu
            .cpu_shares
            .saturating_sub(reserved.cpu.cpu_shares),
        memory_mb: offered
            .memory
            .memory_mb
            .saturating_sub(reserved.memory.memory_mb),
        disk_mb: offered.disk.disk_mb.saturating_sub(reserved.disk.disk_mb),
        memory_max_mb: 0,
        cores: 0,
    }
}

/// The cores of `node` tasks may reserve: its reservable cores but those it keeps for
/// itself, in ascending order.
pub fn reservable_cores(node: &Node) -> Vec<u16> {
    let kept = &node.reserved_resources.cpu.reserved_cpu_cores;
    let mut cores: Vec<u16> = node
        .node_resources
        .cpu
        .reservable_cpu_cores
        .iter()
        .filter(|c| !kept.contains(c))
        .filter_map(|c| u16::try_from(*c).ok())
        .collect();
    cores.sort_unstable();
    cores.dedup();
    cores
}

/// The MHz `cores` whole cores of `node` are worth (Nomad: the node's usable compute divided
/// evenly among its usable cores, those it does not keep for itself).
pub fn cores_mhz(node: &Node, cores: u32) -> u64 {
    let cpu = &node.node_resources.cpu;
    let kept = node.reserved_resources.cpu.reserved_cpu_cores.len() as u64;
    let usable = u64::from(cpu.total_cpu_cores).saturating_sub(kept);
    if usable == 0 {
        return 0;
    }
    cpu.cpu_shares / usable * u64::from(cores)
}

/// Checks that `used` — the sum of every allocation that would run on a node — fits in the
/// node's `capacity`. On failure, names the first exhausted dimension (CPU, then memory, then
/// disk, in Nomad's order).
pub fn check_fit(capacity: &Resources, used: &Resources) -> Result<(), Dimension> {
    if used.cpu > capacity.cpu {
        Err(Dimension::Cpu)
    } else if used.memory_mb > capacity.memory_mb {
        Err(Dimension::Memory)
    } else if used.disk_mb > capacity.disk_mb {
        Err(Dimension::Disk)
    } else {
        Ok(())
    }
}

/// Nomad's fit score in `[0, MAX_FIT_SCORE]` for a node whose allocations would use `used`
/// of `capacity`: high for nearly full nodes under binpack, high for nearly empty ones under
/// spread. A dimension the node does not offer counts as fully used.
pub fn fit_score(capacity: &Resources, used: &Resources, algorithm: SchedulerAlgorithm) -> f64 {
    let free = |used: u64, capacity: u64| {
        if capacity == 0 {
            0.0
        } else {
            1.0 - used as f64 / capacity as f64
        }
    };
    let total = 10f64.powf(free(used.cpu, capacity.cpu))
        + 10f64.powf(free(used.memory_mb, capacity.memory_mb));
    let score = match algorithm {
        SchedulerAlgorithm::Binpack => 20.0 - total,
        SchedulerAlgorithm::Spread => total - 2.0,
    };
    score.clamp(0.0, MAX_FIT_SCORE)
}

/// Component-wise saturating `a − b`: usage after an allocation leaves a node.
pub fn subtract(a: &Resources, b: &Resources) -> Resources {
    Resources {
        cpu: a.cpu.saturating_sub(b.cpu),
        memory_mb: a.memory_mb.saturating_sub(b.memory_mb),
        disk_mb: a.disk_mb.saturating_sub(b.disk_mb),
        memory_max_mb: 0,
        cores: 0,
    }
}

/// True when `a` is at most `b` in every dimension.
pub fn within(a: &Resources, b: &Resources) -> bool {
    a.cpu <= b.cpu && a.memory_mb <= b.memory_mb && a.disk_mb <= b.disk_mb
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(cpu: u64, memory_mb: u64, disk_mb: u64) -> Resources {
        Resources {
            cpu,
            memory_mb,
            disk_mb,
            memory_max_mb: 0,
            cores: 0,
        }
    }

    #[test]
    fn capacity_subtracts_reserved_resources() {
        let mut node = Node::default();
        node.node_resources.cpu.cpu_shares = 4000;
        node.node_resources.memory.memory_mb = 8192;
        node.node_resources.disk.disk_mb = 100;
        node.reserved_resources.cpu.cpu_shares = 500;
        node.reserved_resources.memory.memory_mb = 192;
        node.reserved_resources.disk.disk_mb = 200;
        assert_eq!(node_capacity(&node), res(3500, 8000, 0));
    }

    #[test]
    fn fit_names_the_first_exhausted_dimension() {
        let cap = res(1000, 1000, 1000);
        assert_eq!(check_fit(&cap, &res(1000, 1000, 1000)), Ok(()));
        assert_eq!(check_fit(&cap, &res(1001, 2000, 0)), Err(Dimension::Cpu));
        assert_eq!(
            check_fit(&cap, &res(10, 1001, 2000)),
            Err(Dimension::Memory)
        );
        assert_eq!(check_fit(&cap, &res(10, 10, 1001)), Err(Dimension::Disk));
    }

    #[test]
    fn binpack_prefers_full_nodes_and_spread_empty_ones() {
        let cap = res(1000, 1000, 0);
        let nearly_empty = res(100, 100, 0);
        let nearly_full = res(900, 900, 0);
        let bp = SchedulerAlgorithm::Binpack;
        let sp = SchedulerAlgorithm::Spread;
        assert!(fit_score(&cap, &nearly_full, bp) > fit_score(&cap, &nearly_empty, bp));
        assert!(fit_score(&cap, &nearly_full, sp) < fit_score(&cap, &nearly_empty, sp));
        // A full node scores the maximum under binpack, an empty one the maximum under spread.
        assert_eq!(fit_score(&cap, &cap, bp), MAX_FIT_SCORE);
        assert_eq!(fit_score(&cap, &res(0, 0, 0), sp), MAX_FIT_SCORE);
        assert_eq!(fit_score(&cap, &res(0, 0, 0), bp), 0.0);
        // Nomad's formula at 50 % on both: 20 − 2·10^0.5.
        let half = fit_score(&cap, &res(500, 500, 0), bp);
        assert!((half - (20.0 - 2.0 * 10f64.sqrt())).abs() < 1e-9);
    }

    #[test]
    fn subtract_and_within_are_component_wise() {
        assert_eq!(subtract(&res(5, 5, 5), &res(1, 9, 5)), res(4, 0, 0));
        assert!(within(&res(1, 2, 3), &res(1, 2, 3)));
        assert!(!within(&res(1, 3, 3), &res(1, 2, 3)));
    }
}
