//! Candidate selection: feasibility, ranking and the limit, over a shuffled node list.
//!
//! ```text
//!  shuffled ready nodes ─▶ feasible? ─▶ fits? ─▶ scores ─▶ mean ─▶ limit ─▶ best
//!  (resume where the       class cache   fit.rs,  binpack|spread,            (first max)
//!   last select stopped)   + per node    ports.rs anti-affinity, penalty,
//!                                                 affinities, spreads
//! ```
//!
//! - **Source**: the job's ready nodes in a random order drawn from the injected RNG (so
//!   concurrent workers pick different nodes), drawn lazily as the walk goes: a
//!   Fisher–Yates shuffle that stops where the walk stops, so an evaluation that looks at a
//!   few nodes costs a few draws, not O(nodes). Each [`Stack::select`] continues where the
//!   previous one stopped and visits each node at most once.
//! - **Limit** (Nomad's `LimitIterator`): it stops after `limit` feasible, fitting nodes —
//!   2 for batch jobs, `max(2, ceil(log2 n))` for services, `max(count, 100)` when the group
//!   has affinities or spreads. Nodes scoring ≤ 0 are set aside (at most 3) and used only if
//!   the source runs dry. Per placement the work is O(limit), not O(nodes).
//! - **Scores** (each in [-1, 1], averaged as Nomad's `ScoreNormalizationIterator` does):
//!   the fit score / 18 (always); job anti-affinity `−(collisions + 1) / count` when the node
//!   already runs allocations of the group; `−1` on nodes a rescheduled allocation failed
//!   on; the normalised affinity weight sum when the job has affinities; the spread boost
//!   when it has spreads.

use std::collections::HashMap;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};
use teamster_storage::model::{
    AllocMetric, Constraint, Job, Locality, NetworkResource, Node, NodeId, Resources,
    SchedulerAlgorithm,
};

use crate::scheduler::context::EvalContext;
use crate::scheduler::feasible::{
    affinity_matches, constraint_holds, constraint_label, driver_available, host_volumes_fit,
    resolve_target, GroupChecks, OperandCache,
};
use crate::scheduler::fit::{self, Dimension};
use crate::scheduler::ports;
use crate::scheduler::preempt::{self, Candidate};
use crate::scheduler::util::ReadyScope;

/// Nomad's `skipScoreThreshold`: options scoring at most this are set aside.
const SKIP_SCORE_THRESHOLD: f64 = 0.0;
/// Nomad's `maxSkip`: how many options may be set aside.
const MAX_SKIP: usize = 3;
/// The label Nomad reports for nodes filtered by a cached class result.
const CLASS_INELIGIBLE: &str = "computed class ineligible";

/// What ranking one node found.
#[derive(Debug, Clone)]
pub(crate) enum Verdict {
    /// The group can run there; the final (mean) score.
    Feasible(f64),
    /// The group can run there once these lower-priority allocations are evicted; the final
    /// score (lowered by the evictions).
    Preempt(f64, Vec<Candidate>),
    /// Constraints, drivers or distinct_* rule the node out.
    Filtered,
    /// The node lacks room (the dimension is in the metrics).
    Exhausted,
}

/// The node a select chose: its score and the evictions it needs (none unless preempting).
#[derive(Debug, Clone)]
pub(crate) struct Choice {
    /// The node.
    pub node: Arc<Node>,
    /// Its normalized score.
    pub score: f64,
    /// Allocations to evict for the placement to fit.
    pub victims: Vec<Candidate>,
}

/// One task group's placement state for an attempt: its checks plus the counters and spread
/// targets ranking needs.
#[derive(Debug, Clone)]
pub(crate) struct GroupPlacer {
    /// What the group requires of a node.
    pub checks: GroupChecks,
    /// The job the group belongs to (preemption never evicts the job's own allocations).
    job: Arc<Job>,
    /// What one allocation of the group takes (without the MHz of its `cores`, which
    /// depend on the node: [`GroupPlacer::ask_on`]).
    pub ask: Resources,
    /// The tasks that reserve whole cores, with how many, in the group's order.
    pub cores: Vec<(String, u32)>,
    /// The host ports one allocation of the group takes (`None`: the group asks for none).
    pub network: Option<NetworkResource>,
    /// Property-counter handles, parallel to `checks.distinct_properties`.
    distinct_handles: Vec<usize>,
    /// Spread state, one per spread.
    spreads: Vec<SpreadState>,
    /// Sum of the spread weights.
    spread_weight_sum: f64,
    /// Nomad's `lowestSpreadBoost`: the score of values whose desired count is zero.
    lowest_spread_boost: f64,
    /// Sum of the absolute affinity weights.
    affinity_weight_sum: f64,
    /// The group's locality levels as of this evaluation (`None`: the group has none).
    locality: Option<LocalityState>,
    /// The name of the allocation being placed (its index picks `per_alloc` volumes).
    pub alloc_name: String,
}

impl GroupPlacer {
    /// What one allocation of the group takes on `node`: its ask, with the MHz of the cores
    /// its tasks reserve there.
    pub fn ask_on(&self, node: &Node) -> Resources {
        let mut ask = self.ask;
        ask.cpu = ask.cpu.saturating_add(fit::cores_mhz(node, self.ask.cores));
        ask
    }
}

/// A group's [`Locality`] as one evaluation sees it at its "now": which levels are open
/// (the first always; each next one once the waits before it, counted from the job
/// version's submission, have passed; after the last, any node) and when the next opens.
#[derive(Debug, Clone)]
pub(crate) struct LocalityState {
    levels: Vec<Constraint>,
    /// How many levels are open; `levels.len() + 1` means any node.
    open: usize,
    /// When the next level opens (`None`: every node is open).
    next: Option<i64>,
}

impl LocalityState {
    /// The state of `locality` for waits counted from `since`, at `now` (Unix nanoseconds).
    pub fn new(locality: &Locality, since: i64, now: i64) -> LocalityState {
        let mut open = 1;
        let mut next = None;
        let mut at = since;
        for level in &locality.levels {
            at = at.saturating_add(i64::try_from(level.wait).unwrap_or(i64::MAX));
            if now >= at {
                open += 1;
            } else {
                next = Some(at);
                break;
            }
        }
        LocalityState {
            levels: locality.levels.iter().map(|l| l.constraint()).collect(),
            open,
            next,
        }
    }

    /// When the next level opens, while some node is still closed to the group.
    pub fn next_widening(&self) -> Option<i64> {
        self.next
    }

    /// The first level `node` satisfies.
    fn level_of(&self, operands: &mut OperandCache, node: &Node) -> Option<usize> {
        self.levels
            .iter()
            .position(|c| constraint_holds(operands, c, node))
    }
}

#[derive(Debug, Clone)]
struct SpreadState {
    attribute: String,
    handle: usize,
    weight: f64,
    /// Desired allocations per value (`*` for the rest); empty asks for an even spread.
    desired: HashMap<String, f64>,
}

impl GroupPlacer {
    /// When the group's next locality level opens, if some node is still closed to it.
    pub fn locality_widening(&self) -> Option<i64> {
        self.locality
            .as_ref()
            .and_then(LocalityState::next_widening)
    }

    /// Prepares `group` of `job` for an evaluation at `now`, registering the property
    /// counters it needs in `ctx`.
    pub fn new(
        ctx: &mut EvalContext,
        job: &Arc<Job>,
        group: &teamster_storage::model::TaskGroup,
        now: i64,
    ) -> Self {
        let checks = GroupChecks::new(job, group);
        let distinct_handles = checks
            .distinct_properties
            .iter()
            .map(|p| ctx.property(job, &p.target, p.group.as_deref()))
            .collect();
        let count = f64::from(group.count);
        let mut spreads = Vec::new();
        let mut spread_weight_sum = 0.0;
        for spread in &checks.spreads {
            let mut desired = HashMap::new();
            let mut sum = 0.0;
            for target in &spread.spread_target {
                let want = f64::from(target.percent) / 100.0 * count;
                desired.insert(target.value.clone(), want);
                sum += want;
            }
            if sum > 0.0 && sum < count {
                desired.insert("*".to_owned(), count - sum);
            }
            spread_weight_sum += f64::from(spread.weight);
            spreads.push(SpreadState {
                attribute: spread.attribute.clone(),
                handle: ctx.property(job, &spread.attribute, Some(&group.name)),
                weight: f64::from(spread.weight),
                desired,
            });
        }
        let affinity_weight_sum = checks
            .affinities
            .iter()
            .map(|a| f64::from(a.weight.unsigned_abs()))
            .sum();
        // A task's memory_max applies only with memory oversubscription on; the
        // allocation's memory_max (0 or not) tells its node which.
        let mut ask = group.combined_resources();
        if !ctx
            .snapshot
            .scheduler_config()
            .memory_oversubscription_enabled
        {
            ask.memory_max_mb = 0;
        }
        // Every task's cores are its own, whatever its lifecycle (Nomad's: reserved cores are
        // never shared between an allocation's tasks).
        let cores: Vec<(String, u32)> = group
            .tasks
            .iter()
            .filter(|t| t.resources.cores > 0)
            .map(|t| (t.name.clone(), t.resources.cores))
            .collect();
        ask.cores = cores.iter().map(|(_, n)| n).sum();
        GroupPlacer {
            ask,
            cores,
            network: group
                .networks
                .first()
                .filter(|n| n.ports().next().is_some())
                .cloned(),
            checks,
            job: job.clone(),
            distinct_handles,
            spreads,
            spread_weight_sum,
            lowest_spread_boost: -1.0,
            affinity_weight_sum,
            locality: group
                .locality
                .as_ref()
                .filter(|l| !l.levels.is_empty())
                .map(|l| LocalityState::new(l, job.submit_time, now)),
            alloc_name: String::new(),
        }
    }
}

/// Position at which [`ShuffledNodes`] trades its sparse swap record for a full permutation.
const DENSE_AFTER: usize = 64;

/// A scope's nodes in a random order that is drawn as it is walked: position `i` of the
/// order is fixed only when the walk first reaches it (one step of a Fisher–Yates shuffle).
/// The first [`DENSE_AFTER`] draws record their swaps sparsely, so a walk of a few nodes on a
/// large cluster touches a few entries; a longer walk switches to a full permutation. Once
/// every node was drawn the walk repeats the drawn order.
#[derive(Debug)]
struct ShuffledNodes {
    scope: Arc<ReadyScope>,
    rng: StdRng,
    /// Positions not yet drawn that hold another node than their own (sparse form).
    swapped: HashMap<u32, u32>,
    /// The whole permutation (dense form), once the walk is long.
    permutation: Vec<u32>,
    /// Node indexes in drawn order.
    drawn: Vec<u32>,
    /// Position of the next node in the order.
    cursor: usize,
}

impl ShuffledNodes {
    fn new(scope: Arc<ReadyScope>, rng: &mut dyn RngCore) -> ShuffledNodes {
        ShuffledNodes {
            scope,
            rng: StdRng::seed_from_u64(rng.next_u64()),
            swapped: HashMap::new(),
            permutation: Vec::new(),
            drawn: Vec::new(),
            cursor: 0,
        }
    }

    fn len(&self) -> usize {
        self.scope.nodes.len()
    }

    /// The next node of the order; the scope must not be empty.
    fn next(&mut self) -> &Arc<Node> {
        let n = self.len();
        let index = if self.cursor < self.drawn.len() {
            self.drawn[self.cursor]
        } else {
            self.draw(n)
        };
        self.cursor = (self.cursor + 1) % n;
        &self.scope.nodes[index as usize]
    }

    /// Fixes position `drawn.len()` of the order: swaps it with a uniformly chosen position
    /// at or after it, as Fisher–Yates does.
    fn draw(&mut self, n: usize) -> u32 {
        let i = self.drawn.len();
        let j = self.rng.gen_range(i..n);
        if self.permutation.is_empty() && i >= DENSE_AFTER {
            let mut permutation: Vec<u32> = (0..n as u32).collect();
            for (&at, &node) in &self.swapped {
                permutation[at as usize] = node;
            }
            self.swapped = HashMap::new();
            self.permutation = permutation;
        }
        let picked = if self.permutation.is_empty() {
            let (i32_, j32) = (i as u32, j as u32);
            let at_i = self.swapped.remove(&i32_).unwrap_or(i32_);
            if j == i {
                at_i
            } else {
                self.swapped.insert(j32, at_i).unwrap_or(j32)
            }
        } else {
            self.permutation.swap(i, j);
            self.permutation[i]
        };
        self.drawn.push(picked);
        picked
    }
}

/// The candidate source and the job-wide feasibility cache of one attempt.
#[derive(Debug)]
pub(crate) struct Stack {
    nodes: ShuffledNodes,
    base_limit: usize,
    wide_limit: usize,
    algorithm: SchedulerAlgorithm,
    /// Per class: do the job's class-safe constraints hold?
    job_class_cache: HashMap<String, bool>,
}

impl Stack {
    /// A stack over `scope`'s nodes, in an order drawn from `rng`; `batch` selects the
    /// two-choice limit.
    pub fn new(
        scope: Arc<ReadyScope>,
        batch: bool,
        algorithm: SchedulerAlgorithm,
        wide_limit: usize,
        rng: &mut dyn RngCore,
    ) -> Stack {
        let n = scope.nodes.len();
        let base_limit = if batch || n == 0 {
            2
        } else {
            // ceil(log2 n) without floating point.
            let log = usize::BITS - (n - 1).leading_zeros();
            (log as usize).max(2)
        };
        Stack {
            nodes: ShuffledNodes::new(scope, rng),
            base_limit,
            wide_limit,
            algorithm,
            job_class_cache: HashMap::new(),
        }
    }

    /// How many candidates a select takes before picking (without affinities or spreads).
    #[cfg(test)]
    pub fn base_limit(&self) -> usize {
        self.base_limit
    }

    /// Starts fresh metrics for one placement.
    pub fn reset_metrics(&self, ctx: &mut EvalContext) {
        ctx.metrics = AllocMetric {
            nodes_available: self.nodes.scope.by_dc.clone(),
            nodes_in_pool: self.nodes.len() as u64,
            ..AllocMetric::default()
        };
    }

    /// Picks the best node for one allocation of `placer`'s group, with its normalized score
    /// (`None`: nowhere). `penalty` lists nodes a rescheduled allocation failed on; with
    /// `preempt`, a node that lacks room counts if evicting lower-priority allocations makes
    /// it (see [`crate::scheduler::preempt`]).
    pub fn select(
        &mut self,
        ctx: &mut EvalContext,
        placer: &mut GroupPlacer,
        penalty: &[NodeId],
        preempt: bool,
    ) -> Option<Choice> {
        self.reset_metrics(ctx);
        let n = self.nodes.len();
        if n == 0 {
            return None;
        }
        let limit = if placer.checks.wants_wide_search() || placer.locality.is_some() {
            (placer.checks.count as usize).max(self.wide_limit)
        } else {
            self.base_limit
        };
        let mut seen = 0;
        let mut taken = 0;
        let mut skipped: Vec<Choice> = Vec::new();
        let mut best: Option<Choice> = None;
        while seen < n && taken < limit {
            let node = self.nodes.next().clone();
            seen += 1;
            let (score, victims) = match self.evaluate(ctx, placer, &node, penalty, preempt) {
                Verdict::Feasible(score) => (score, Vec::new()),
                Verdict::Preempt(score, victims) => (score, victims),
                Verdict::Filtered | Verdict::Exhausted => continue,
            };
            let choice = Choice {
                node,
                score,
                victims,
            };
            if score <= SKIP_SCORE_THRESHOLD && skipped.len() < MAX_SKIP {
                skipped.push(choice);
                continue;
            }
            taken += 1;
            if best.as_ref().is_none_or(|b| score > b.score) {
                best = Some(choice);
            }
        }
        for choice in skipped {
            if taken >= limit {
                break;
            }
            taken += 1;
            if best.as_ref().is_none_or(|b| choice.score > b.score) {
                best = Some(choice);
            }
        }
        best
    }

    /// The node `id` when it takes the allocation, as Nomad's `SelectPreferringNodes` tries
    /// a sticky disk's previous node before the others; `None` (not a candidate, filtered,
    /// or full) sends the caller to [`Stack::select`].
    pub fn select_preferred(
        &mut self,
        ctx: &mut EvalContext,
        placer: &mut GroupPlacer,
        id: &NodeId,
        preempt: bool,
    ) -> Option<Choice> {
        let node = self.nodes.scope.nodes.iter().find(|n| &n.id == id)?.clone();
        self.reset_metrics(ctx);
        match self.evaluate(ctx, placer, &node, &[], preempt) {
            Verdict::Feasible(score) => Some(Choice {
                node,
                score,
                victims: Vec::new(),
            }),
            Verdict::Preempt(score, victims) => Some(Choice {
                node,
                score,
                victims,
            }),
            Verdict::Filtered | Verdict::Exhausted => None,
        }
    }

    /// Feasibility, fit and score of one node, recording metrics and class eligibility.
    /// With `preempt`, a node short of CPU, memory or disk is [`Verdict::Preempt`] when
    /// evicting lower-priority allocations makes room.
    pub fn evaluate(
        &mut self,
        ctx: &mut EvalContext,
        placer: &mut GroupPlacer,
        node: &Node,
        penalty: &[NodeId],
        preempt: bool,
    ) -> Verdict {
        ctx.metrics.nodes_evaluated += 1;
        if let Err(label) = self.feasible(ctx, placer, node) {
            ctx.metrics.nodes_filtered += 1;
            // By the node's own class, as Nomad counts it (none: not counted by class).
            if !node.node_class.is_empty() {
                *ctx.metrics
                    .class_filtered
                    .entry(node.node_class.clone())
                    .or_default() += 1;
            }
            *ctx.metrics.constraint_filtered.entry(label).or_default() += 1;
            return Verdict::Filtered;
        }
        let capacity = fit::node_capacity(node);
        let mut used = ctx.node_usage(&node.id).add(&placer.ask_on(node));
        let mut victims = Vec::new();
        // Whole cores first: not made by preemption (as in Nomad).
        let cores_short =
            placer.ask.cores > 0 && ctx.free_cores(node).len() < placer.ask.cores as usize;
        let fit = if cores_short {
            Err(Dimension::Cores)
        } else {
            fit::check_fit(&capacity, &used)
        };
        if let Err(dimension) = fit {
            let preempt = preempt && !cores_short;
            let chosen = if preempt {
                self.preemption(ctx, placer, node, &capacity, &used)
            } else {
                None
            };
            let Some(chosen) = chosen else {
                ctx.metrics.nodes_exhausted += 1;
                if !node.node_class.is_empty() {
                    *ctx.metrics
                        .class_exhausted
                        .entry(node.node_class.clone())
                        .or_default() += 1;
                }
                *ctx.metrics
                    .dimension_exhausted
                    .entry(dimension.as_str().to_owned())
                    .or_default() += 1;
                return Verdict::Exhausted;
            };
            let freed = chosen
                .iter()
                .fold(Resources::ZERO, |acc, c| acc.add(&c.alloc.resources));
            used = fit::subtract(&used, &freed);
            victims = chosen;
        }
        if let Some(network) = &placer.network {
            let used = ctx.ports_in_use(node);
            if let Err(reason) = ports::check(network, node, &used) {
                ctx.metrics.nodes_exhausted += 1;
                if !node.node_class.is_empty() {
                    *ctx.metrics
                        .class_exhausted
                        .entry(node.node_class.clone())
                        .or_default() += 1;
                }
                *ctx.metrics
                    .dimension_exhausted
                    .entry(format!("network: {reason}"))
                    .or_default() += 1;
                return Verdict::Exhausted;
            }
        }
        let score = self.score(ctx, placer, node, &capacity, &used, penalty, &victims);
        if victims.is_empty() {
            Verdict::Feasible(score)
        } else {
            Verdict::Preempt(score, victims)
        }
    }

    /// The evictions that would make room for `placer`'s ask on `node`, if any do.
    fn preemption(
        &self,
        ctx: &EvalContext,
        placer: &GroupPlacer,
        node: &Node,
        capacity: &Resources,
        used: &Resources,
    ) -> Option<Vec<Candidate>> {
        let need = preempt::shortfall(capacity, used);
        let candidates = ctx.preemption_candidates(&node.id, &placer.job, placer.job.priority);
        preempt::choose(&need, candidates)
    }

    /// Whether the group may run on the node at all; the filter label otherwise.
    fn feasible(
        &mut self,
        ctx: &mut EvalContext,
        placer: &mut GroupPlacer,
        node: &Node,
    ) -> Result<(), String> {
        let class = node.computed_class.as_str();
        let checks = &mut placer.checks;
        match self.job_class_cache.get(class) {
            Some(true) => {}
            Some(false) => return Err(CLASS_INELIGIBLE.to_owned()),
            None => {
                let failed = checks
                    .job_cached
                    .iter()
                    .find(|c| !constraint_holds(&mut ctx.operands, c, node));
                let ok = failed.is_none();
                self.job_class_cache.insert(class.to_owned(), ok);
                ctx.eligibility.set_job(class, ok);
                if let Some(c) = failed {
                    return Err(constraint_label(c));
                }
            }
        }
        if let Some(c) = checks
            .job_escaped
            .iter()
            .find(|c| !constraint_holds(&mut ctx.operands, c, node))
        {
            return Err(constraint_label(c));
        }
        match checks.class_cache.get(class) {
            Some(true) => {}
            Some(false) => return Err(CLASS_INELIGIBLE.to_owned()),
            None => {
                let failed = checks
                    .group_cached
                    .iter()
                    .find(|c| !constraint_holds(&mut ctx.operands, c, node));
                let ok = failed.is_none();
                let label = failed.map(constraint_label);
                checks.class_cache.insert(class.to_owned(), ok);
                ctx.eligibility.set_group(&checks.name, class, ok);
                if let Some(label) = label {
                    return Err(label);
                }
            }
        }
        if let Some(c) = checks
            .group_escaped
            .iter()
            .find(|c| !constraint_holds(&mut ctx.operands, c, node))
        {
            return Err(constraint_label(c));
        }
        if !checks.drivers.iter().all(|d| driver_available(node, d)) {
            return Err("missing drivers".to_owned());
        }
        if let Some(mode) = &checks.cni_network {
            if !super::feasible::has_network(node, mode) {
                return Err("missing network".to_owned());
            }
        }
        if let Some(csi) = checks.csi_volumes.first() {
            // Nomad's words for a CSI volume its state does not have.
            let source = csi.source_for(&placer.alloc_name);
            return Err(format!("missing CSI volume(s) {source}"));
        }
        if !host_volumes_fit(node, &checks.host_volumes, &placer.alloc_name) {
            return Err(teamster_storage::model::FILTER_HOST_VOLUMES.to_owned());
        }
        if let Some(locality) = placer.locality.as_ref().filter(|l| l.next.is_some()) {
            let open = locality.open;
            if locality
                .level_of(&mut ctx.operands, node)
                .is_none_or(|level| level >= open)
            {
                return Err(format!("locality: not of the first {open} level(s) yet"));
            }
        }
        if checks.distinct_hosts_job && ctx.job_count_on_node(&node.id) > 0 {
            return Err("distinct_hosts".to_owned());
        }
        if checks.distinct_hosts_group && ctx.group_count_on_node(&node.id, &checks.name) > 0 {
            return Err("distinct_hosts".to_owned());
        }
        for (property, handle) in checks
            .distinct_properties
            .iter()
            .zip(&placer.distinct_handles)
        {
            let Some(value) = resolve_target(&property.target, node) else {
                return Err(property.label.clone());
            };
            let used = ctx
                .property_counts(*handle)
                .counts
                .get(value)
                .copied()
                .unwrap_or(0);
            if used >= property.limit {
                return Err(property.label.clone());
            }
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn score(
        &self,
        ctx: &mut EvalContext,
        placer: &mut GroupPlacer,
        node: &Node,
        capacity: &Resources,
        used: &Resources,
        penalty: &[NodeId],
        victims: &[Candidate],
    ) -> f64 {
        let mut sum = fit::fit_score(capacity, used, self.algorithm) / fit::MAX_FIT_SCORE;
        let mut n = 1.0;
        let collisions = ctx.group_count_on_node(&node.id, &placer.checks.name);
        if collisions > 0 {
            let desired = f64::from(placer.checks.count.max(1));
            sum += -(f64::from(collisions) + 1.0) / desired;
            n += 1.0;
        }
        if penalty.contains(&node.id) {
            sum += -1.0;
            n += 1.0;
        }
        if !placer.checks.affinities.is_empty() && placer.affinity_weight_sum > 0.0 {
            let total: f64 = placer
                .checks
                .affinities
                .iter()
                .filter(|a| affinity_matches(&mut ctx.operands, a, node))
                .map(|a| f64::from(a.weight))
                .sum();
            if total != 0.0 {
                sum += total / placer.affinity_weight_sum;
                n += 1.0;
            }
        }
        if !placer.spreads.is_empty() {
            let boost = spread_boost(ctx, placer, node);
            if boost != 0.0 {
                sum += boost;
                n += 1.0;
            }
        }
        if let Some(locality) = &placer.locality {
            // Earlier levels are preferred even once later ones are open.
            if let Some(level) = locality.level_of(&mut ctx.operands, node) {
                let levels = locality.levels.len() as f64;
                sum += (levels - level as f64) / levels;
                n += 1.0;
            }
        }
        if !victims.is_empty() {
            sum += preempt::score(victims);
            n += 1.0;
        }
        sum / n
    }
}

/// Nomad's `SpreadIterator` score for placing one more allocation of the group on `node`.
fn spread_boost(ctx: &EvalContext, placer: &mut GroupPlacer, node: &Node) -> f64 {
    let mut total = 0.0;
    for spread in &placer.spreads {
        let Some(value) = resolve_target(&spread.attribute, node) else {
            total -= 1.0;
            continue;
        };
        let counts = &ctx.property_counts(spread.handle).counts;
        if spread.desired.is_empty() {
            total += even_spread_boost(counts, value);
            continue;
        }
        let used = counts.get(value).copied().unwrap_or(0) as f64 + 1.0;
        let Some(desired) = spread
            .desired
            .get(value)
            .or_else(|| spread.desired.get("*"))
            .copied()
        else {
            total -= 1.0;
            continue;
        };
        if desired == 0.0 {
            total += placer.lowest_spread_boost;
            continue;
        }
        let weight = if placer.spread_weight_sum > 0.0 {
            spread.weight / placer.spread_weight_sum
        } else {
            0.0
        };
        let boost = (desired - used) / desired * weight;
        total += boost;
        if boost < placer.lowest_spread_boost {
            placer.lowest_spread_boost = boost;
        }
    }
    total
}

/// Nomad's `evenSpreadScoreBoost`: favour values with the fewest allocations.
fn even_spread_boost(counts: &HashMap<String, u64>, value: &str) -> f64 {
    let mut min = 0u64;
    let mut max = 0u64;
    let mut any = false;
    for n in counts.values().copied().filter(|n| *n > 0) {
        if !any || n < min {
            min = n;
        }
        if !any || n > max {
            max = n;
        }
        any = true;
    }
    if !any {
        return 0.0;
    }
    let current = counts.get(value).copied().unwrap_or(0);
    if current != min {
        return (min as f64 - current as f64) / min as f64;
    }
    if min == max {
        return -1.0;
    }
    (max - min) as f64 / min as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn even_spread_favours_the_least_used_values() {
        let counts: HashMap<String, u64> = [("a".to_owned(), 2), ("b".to_owned(), 4)]
            .into_iter()
            .collect();
        assert_eq!(even_spread_boost(&HashMap::new(), "a"), 0.0);
        assert_eq!(even_spread_boost(&counts, "c"), 1.0, "an unused value");
        assert_eq!(even_spread_boost(&counts, "b"), -1.0);
        assert_eq!(even_spread_boost(&counts, "a"), 1.0);
        let even: HashMap<String, u64> = [("a".to_owned(), 3), ("b".to_owned(), 3)]
            .into_iter()
            .collect();
        assert_eq!(even_spread_boost(&even, "a"), -1.0);
    }

    #[test]
    fn the_lazy_order_is_a_uniform_permutation_that_repeats() {
        let scope = |n: usize| {
            Arc::new(ReadyScope {
                nodes: (0..n)
                    .map(|i| {
                        Arc::new(Node {
                            id: format!("n{i}").into(),
                            ..Node::default()
                        })
                    })
                    .collect(),
                by_dc: BTreeMap::new(),
            })
        };
        let mut rng = StdRng::seed_from_u64(7);
        // Short and long walks (the long one crosses into the dense form): each node once per
        // round, the second round the same order as the first.
        for n in [1, 2, 5, DENSE_AFTER + 37, 1000] {
            let mut order = ShuffledNodes::new(scope(n), &mut rng);
            let first: Vec<String> = (0..n).map(|_| order.next().id.to_string()).collect();
            let mut distinct = first.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(distinct.len(), n, "every node once in the first {n}");
            let second: Vec<String> = (0..n).map(|_| order.next().id.to_string()).collect();
            assert_eq!(first, second, "the walk repeats the drawn order");
        }
        // Uniform: over 20 000 walks of 100 nodes, each node is drawn at positions 0 and 70
        // (past the sparse form) about 200 times.
        let (n, walks) = (100, 20_000);
        let mut at = [vec![0u32; n], vec![0u32; n]];
        for _ in 0..walks {
            let mut order = ShuffledNodes::new(scope(n), &mut rng);
            for position in 0..=70 {
                let id = order.next().id.to_string();
                let node: usize = id[1..].parse().unwrap();
                match position {
                    0 => at[0][node] += 1,
                    70 => at[1][node] += 1,
                    _ => {}
                }
            }
        }
        for counts in &at {
            let expected = f64::from(walks) / n as f64;
            for &c in counts {
                assert!(
                    (f64::from(c) - expected).abs() < expected * 0.35,
                    "count {c}, expected about {expected}"
                );
            }
        }
    }

    #[test]
    fn limits_follow_nomad() {
        let mut rng = rand::rngs::mock::StepRng::new(0, 1);
        let nodes = |n: usize| {
            Arc::new(ReadyScope {
                nodes: (0..n).map(|_| Arc::new(Node::default())).collect(),
                by_dc: BTreeMap::new(),
            })
        };
        let stack = |n, batch, rng: &mut dyn RngCore| {
            Stack::new(nodes(n), batch, SchedulerAlgorithm::Binpack, 100, rng)
        };
        assert_eq!(stack(5000, true, &mut rng).base_limit(), 2);
        assert_eq!(stack(5000, false, &mut rng).base_limit(), 13);
        assert_eq!(stack(1024, false, &mut rng).base_limit(), 10);
        assert_eq!(stack(1025, false, &mut rng).base_limit(), 11);
        assert_eq!(stack(3, false, &mut rng).base_limit(), 2);
        assert_eq!(stack(1, false, &mut rng).base_limit(), 2);
    }
}
