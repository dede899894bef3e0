//! Feasibility: can a node run a task group at all, whatever its load?
//!
//! For each task group the scheduler builds a [`GroupChecks`] once per attempt:
//!
//! - **Constraints** of the job, the group and its tasks, split by
//!   [`Constraint::escapes_computed_class`]: class-safe ones are evaluated once per computed
//!   node class and cached (job-level and group-level separately, as Nomad's
//!   `FeasibilityWrapper` does); *escaped* ones (targets on `unique.` attributes) are checked
//!   on every node.
//! - **Drivers** every task needs: a healthy detected driver, or a truthy `driver.<name>`
//!   attribute. Checked per node (node drivers are not part of the computed class).
//! - **`distinct_hosts`** and **`distinct_property`**: depend on what the plan in progress
//!   already placed, so they are checked per node against the evaluation context.
//!
//! Datacenters and node pool are applied earlier, when the candidate node list is built
//! ([`node_in_job_scope`]).
//!
//! Targets are interpolated from the node ([`resolve_target`]): `${attr.<name>}`,
//! `${meta.<name>}`, `${node.unique.id}`, `${node.unique.name}`, `${node.datacenter}`,
//! `${node.class}`, `${node.pool}`; anything not starting with `${` is a literal. Operands are
//! Nomad's ([`check_operand`]); regular expressions and version constraints come from job specs
//! (outside input), so they are compiled with size limits and cached per evaluation.

use std::collections::HashMap;

use regex::{Regex, RegexBuilder};
use teamster_storage::model::{Affinity, Constraint, Job, Node, Spread, TaskGroup, VolumeRequest};

use crate::scheduler::version::{Version, VersionConstraints};

/// Largest compiled program a `regexp` constraint may produce.
const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// Longest pattern accepted.
const REGEX_MAX_PATTERN: usize = 4096;

/// Resolves a constraint target against a node: a literal, or the node value it interpolates
/// (`None` when the node does not have it, or the interpolation is unknown).
pub(crate) fn resolve_target<'a>(target: &'a str, node: &'a Node) -> Option<&'a str> {
    if !target.starts_with("${") {
        return Some(target);
    }
    match target {
        "${node.unique.id}" => return Some(node.id.as_str()),
        "${node.unique.name}" => return Some(node.name.as_str()),
        "${node.datacenter}" => return Some(node.datacenter.as_str()),
        "${node.class}" => return Some(node.node_class.as_str()),
        "${node.pool}" => return Some(node.node_pool.as_str()),
        _ => {}
    }
    let inner = target.strip_prefix("${")?.strip_suffix('}')?;
    if let Some(attr) = inner.strip_prefix("attr.") {
        node.attributes.get(attr).map(String::as_str)
    } else if let Some(meta) = inner.strip_prefix("meta.") {
        node.meta.get(meta).map(String::as_str)
    } else {
        None
    }
}

/// Compiled regular expressions and version constraints, cached for one evaluation.
#[derive(Debug, Default)]
pub(crate) struct OperandCache {
    regexes: HashMap<String, Option<Regex>>,
    versions: HashMap<(String, bool), Option<VersionConstraints>>,
}

impl OperandCache {
    fn regex(&mut self, pattern: &str) -> Option<&Regex> {
        if !self.regexes.contains_key(pattern) {
            let compiled = if pattern.len() > REGEX_MAX_PATTERN {
                None
            } else {
                RegexBuilder::new(pattern)
                    .size_limit(REGEX_SIZE_LIMIT)
                    .dfa_size_limit(REGEX_SIZE_LIMIT)
                    .build()
                    .ok()
            };
            if compiled.is_none() {
                tracing::debug!(
                    pattern,
                    "regexp constraint does not compile; it matches nothing"
                );
            }
            self.regexes.insert(pattern.to_owned(), compiled);
        }
        self.regexes.get(pattern).and_then(Option::as_ref)
    }

    fn version_constraint(&mut self, text: &str, strict: bool) -> Option<&VersionConstraints> {
        let key = (text.to_owned(), strict);
        self.versions
            .entry(key)
            .or_insert_with(|| VersionConstraints::parse(text, strict))
            .as_ref()
    }
}

/// Nomad's `checkConstraint`: does `l operand r` hold? `None` means the target is not set on
/// the node. `distinct_hosts` and `distinct_property` are not value comparisons and pass here
/// (they are checked against the plan elsewhere); unknown operands never hold.
pub(crate) fn check_operand(
    cache: &mut OperandCache,
    operand: &str,
    l: Option<&str>,
    r: Option<&str>,
) -> bool {
    match operand {
        "distinct_hosts" | "distinct_property" => true,
        "is_set" => l.is_some(),
        "is_not_set" => l.is_none(),
        "=" | "==" | "is" => matches!((l, r), (Some(l), Some(r)) if l == r),
        "!=" | "not" => l != r,
        "<" | "<=" | ">" | ">=" => match (l, r) {
            (Some(l), Some(r)) => check_order(operand, l, r),
            _ => false,
        },
        "regexp" => match (l, r) {
            (Some(l), Some(r)) => cache.regex(r).is_some_and(|re| re.is_match(l)),
            _ => false,
        },
        "version" | "semver" => match (l, r) {
            (Some(l), Some(r)) => {
                let strict = operand == "semver";
                let Some(version) = Version::parse(l, strict) else {
                    return false;
                };
                cache
                    .version_constraint(r, strict)
                    .is_some_and(|c| c.matches(&version))
            }
            _ => false,
        },
        "set_contains" | "set_contains_all" => match (l, r) {
            (Some(l), Some(r)) => {
                let have: Vec<&str> = l.split(',').map(str::trim).collect();
                r.split(',').map(str::trim).all(|want| have.contains(&want))
            }
            _ => false,
        },
        "set_contains_any" => match (l, r) {
            (Some(l), Some(r)) => {
                let have: Vec<&str> = l.split(',').map(str::trim).collect();
                r.split(',').map(str::trim).any(|want| have.contains(&want))
            }
            _ => false,
        },
        _ => false,
    }
}

/// Nomad's `checkOrder`: numeric when both sides are integers, else when both are floats,
/// else lexical.
fn check_order(operand: &str, l: &str, r: &str) -> bool {
    let ordering = if let (Ok(a), Ok(b)) = (l.parse::<i64>(), r.parse::<i64>()) {
        a.cmp(&b)
    } else if let (Ok(a), Ok(b)) = (l.parse::<f64>(), r.parse::<f64>()) {
        match a.partial_cmp(&b) {
            Some(o) => o,
            None => return false,
        }
    } else {
        l.cmp(r)
    };
    match operand {
        "<" => ordering.is_lt(),
        "<=" => ordering.is_le(),
        ">" => ordering.is_gt(),
        ">=" => ordering.is_ge(),
        _ => false,
    }
}

/// Whether a constraint holds on a node (interpolating both targets).
pub(crate) fn constraint_holds(cache: &mut OperandCache, c: &Constraint, node: &Node) -> bool {
    let l = resolve_target(&c.l_target, node);
    let r = resolve_target(&c.r_target, node);
    check_operand(cache, &c.operand, l, r)
}

/// Whether an affinity matches a node.
pub(crate) fn affinity_matches(cache: &mut OperandCache, a: &Affinity, node: &Node) -> bool {
    let l = resolve_target(&a.l_target, node);
    let r = resolve_target(&a.r_target, node);
    check_operand(cache, &a.operand, l, r)
}

/// Nomad's `Constraint.String()`, the key of `ConstraintFiltered`.
pub(crate) fn constraint_label(c: &Constraint) -> String {
    format!("{} {} {}", c.l_target, c.operand, c.r_target)
}

/// Whether a node is in the job's datacenters (glob patterns with `*`) and node pool
/// (`all` matches every pool).
pub(crate) fn node_in_job_scope(job: &Job, node: &Node) -> bool {
    let pool_ok = job.node_pool.is_empty()
        || job.node_pool == "all"
        || job.node_pool == node.node_pool
        || (node.node_pool.is_empty() && job.node_pool == "default");
    pool_ok
        && job
            .datacenters
            .iter()
            .any(|pattern| glob_match(pattern, &node.datacenter))
}

/// `*` matches any run of characters; everything else is literal.
fn glob_match(pattern: &str, text: &str) -> bool {
    if !pattern.contains('*') {
        return pattern == text;
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

/// A task driver a group needs, with the attribute key that advertises it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DriverNeed {
    /// The driver's name (`docker`, `mock`, …).
    pub name: String,
    /// `driver.<name>`, prepared once so the per-node check does not allocate.
    pub attribute: String,
}

impl DriverNeed {
    pub fn new(name: &str) -> DriverNeed {
        DriverNeed {
            name: name.to_owned(),
            attribute: format!("driver.{name}"),
        }
    }
}

/// Whether a node can run a task driver: a detected, healthy driver, or (for nodes that
/// only advertise attributes) a truthy `driver.<name>` attribute.
pub(crate) fn driver_available(node: &Node, driver: &DriverNeed) -> bool {
    if let Some(info) = node.drivers.get(&driver.name) {
        return info.detected && info.healthy;
    }
    node.attributes
        .get(&driver.attribute)
        .is_some_and(|v| matches!(v.as_str(), "1" | "true" | "True" | "TRUE"))
}

/// A `distinct_property` constraint: at most `limit` allocations per value of `target`,
/// counted over the job (`group` is `None`) or one task group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DistinctProperty {
    pub target: String,
    pub limit: u64,
    pub group: Option<String>,
    pub label: String,
}

/// Everything the scheduler checks for one task group, prepared once per attempt.
#[derive(Debug, Clone)]
pub(crate) struct GroupChecks {
    /// The group's name.
    pub name: String,
    /// The group's count (the anti-affinity denominator).
    pub count: u32,
    /// Class-safe job-level constraints (cached per class job-wide).
    pub job_cached: Vec<Constraint>,
    /// Job-level constraints on unique attributes (checked per node).
    pub job_escaped: Vec<Constraint>,
    /// Class-safe group and task constraints (cached per class and group).
    pub group_cached: Vec<Constraint>,
    /// Group and task constraints on unique attributes.
    pub group_escaped: Vec<Constraint>,
    /// Distinct task drivers.
    pub drivers: Vec<DriverNeed>,
    /// A job-level `distinct_hosts`: no two allocations of the job on one node.
    pub distinct_hosts_job: bool,
    /// A group-level `distinct_hosts`: no two allocations of the group on one node.
    pub distinct_hosts_group: bool,
    /// `distinct_property` constraints that apply.
    pub distinct_properties: Vec<DistinctProperty>,
    /// Job, group and task affinities.
    pub affinities: Vec<Affinity>,
    /// Group and job spreads.
    pub spreads: Vec<Spread>,
    /// Per class: do the class-safe group constraints hold?
    pub class_cache: HashMap<String, bool>,
    /// The group's host volume requests (checked per node: volumes are not part of the
    /// computed class).
    pub host_volumes: Vec<VolumeRequest>,
    /// The group's CSI volume requests (teamster has no CSI volumes).
    pub csi_volumes: Vec<VolumeRequest>,
    /// The group's `cni/<name>` network mode: a node must have that network (Nomad's
    /// `NetworkChecker`, "missing network").
    pub cni_network: Option<String>,
}

/// Whether `node` has the network of mode `mode` (fingerprinted from its client's CNI
/// configuration directory).
pub(crate) fn has_network(node: &Node, mode: &str) -> bool {
    node.node_resources.networks.iter().any(|n| n.mode == mode)
}

/// Nomad's `HostVolumeChecker` for static host volumes: `node` offers every one of
/// `requests` for the allocation named `alloc_name` (`per_alloc` sources carry its index),
/// writable where the request writes. Sticky requests need dynamic host volumes, which
/// teamster does not have.
pub(crate) fn host_volumes_fit(node: &Node, requests: &[VolumeRequest], alloc_name: &str) -> bool {
    requests.iter().all(|req| {
        let source = req.source_for(alloc_name);
        node.host_volumes
            .get(&source)
            .is_some_and(|offered| !req.sticky && (req.read_only || !offered.read_only))
    })
}

impl GroupChecks {
    /// Prepares the checks of `group` of `job`.
    pub fn new(job: &Job, group: &TaskGroup) -> GroupChecks {
        let mut checks = GroupChecks {
            name: group.name.clone(),
            count: group.count,
            job_cached: Vec::new(),
            job_escaped: Vec::new(),
            group_cached: Vec::new(),
            group_escaped: Vec::new(),
            drivers: Vec::new(),
            distinct_hosts_job: false,
            distinct_hosts_group: false,
            distinct_properties: Vec::new(),
            affinities: job.affinities.clone(),
            spreads: group.spreads.clone(),
            class_cache: HashMap::new(),
            host_volumes: group
                .volumes
                .values()
                .filter(|v| v.is_host())
                .cloned()
                .collect(),
            csi_volumes: group
                .volumes
                .values()
                .filter(|v| !v.is_host())
                .cloned()
                .collect(),
            cni_network: Some(group.network_mode())
                .filter(|m| m.starts_with(teamster_storage::model::NETWORK_MODE_CNI_PREFIX))
                .map(str::to_owned),
        };
        checks.spreads.extend(job.spreads.iter().cloned());
        checks.affinities.extend(group.affinities.iter().cloned());
        for c in &job.constraints {
            checks.add_constraint(c, None);
        }
        let group_constraints = group
            .constraints
            .iter()
            .chain(group.tasks.iter().flat_map(|t| t.constraints.iter()));
        for c in group_constraints {
            checks.add_constraint(c, Some(&group.name));
        }
        for task in &group.tasks {
            checks.affinities.extend(task.affinities.iter().cloned());
            if !task.driver.is_empty() && !checks.drivers.iter().any(|d| d.name == task.driver) {
                checks.drivers.push(DriverNeed::new(&task.driver));
            }
        }
        checks
    }

    fn add_constraint(&mut self, c: &Constraint, group: Option<&str>) {
        match c.operand.as_str() {
            "distinct_hosts" => {
                // Nomad: an RTarget of "false" disables it.
                if c.r_target.eq_ignore_ascii_case("false") {
                    return;
                }
                if group.is_some() {
                    self.distinct_hosts_group = true;
                } else {
                    self.distinct_hosts_job = true;
                }
            }
            "distinct_property" => {
                let limit = if c.r_target.is_empty() {
                    1
                } else {
                    c.r_target.parse::<u64>().unwrap_or(1).max(1)
                };
                self.distinct_properties.push(DistinctProperty {
                    target: c.l_target.clone(),
                    limit,
                    group: group.map(str::to_owned),
                    label: constraint_label(c),
                });
            }
            _ => {
                let escaped = c.escapes_computed_class();
                let list = match (group.is_some(), escaped) {
                    (false, false) => &mut self.job_cached,
                    (false, true) => &mut self.job_escaped,
                    (true, false) => &mut self.group_cached,
                    (true, true) => &mut self.group_escaped,
                };
                list.push(c.clone());
            }
        }
    }

    /// True when a constraint of this group or its job targets unique attributes, so its
    /// blocked evaluation cannot be woken by class.
    pub fn escaped(&self) -> bool {
        !self.job_escaped.is_empty() || !self.group_escaped.is_empty()
    }

    /// True when affinities or spreads ask for a wider search (Nomad raises the limit).
    pub fn wants_wide_search(&self) -> bool {
        !self.affinities.is_empty() || !self.spreads.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nomad's static host volume check: every source offered, writable for a writable
    /// request, `per_alloc` sources by the allocation's index, `sticky` never (it needs
    /// dynamic host volumes).
    #[test]
    fn host_volumes_must_be_offered_and_writable_when_written() {
        use teamster_storage::model::{ClientHostVolumeConfig, VOLUME_TYPE_HOST};
        let mut n = node();
        for (name, read_only) in [("data", false), ("certs", true), ("disk[1]", false)] {
            let config = ClientHostVolumeConfig {
                name: name.into(),
                path: format!("/srv/{name}"),
                read_only,
            };
            n.host_volumes.insert(name.into(), config);
        }
        let req = |source: &str, read_only: bool| VolumeRequest {
            r#type: VOLUME_TYPE_HOST.into(),
            source: source.into(),
            read_only,
            ..VolumeRequest::default()
        };
        let fits = |reqs: &[VolumeRequest], name: &str| host_volumes_fit(&n, reqs, name);
        assert!(fits(&[], "j.g[0]"));
        assert!(fits(&[req("data", false), req("certs", true)], "j.g[0]"));
        assert!(!fits(&[req("certs", false)], "j.g[0]"));
        assert!(!fits(&[req("data", false), req("absent", true)], "j.g[0]"));
        let per_alloc = VolumeRequest {
            per_alloc: true,
            ..req("disk", false)
        };
        assert!(fits(std::slice::from_ref(&per_alloc), "j.g[1]"));
        assert!(!fits(std::slice::from_ref(&per_alloc), "j.g[0]"));
        let sticky = VolumeRequest {
            sticky: true,
            ..req("data", false)
        };
        assert!(!fits(&[sticky], "j.g[0]"));
    }
    use teamster_storage::model::DriverInfo;

    fn node() -> Node {
        let mut n = Node {
            id: "node-1".into(),
            name: "host-1".into(),
            datacenter: "dc1".into(),
            node_class: "large".into(),
            node_pool: "default".into(),
            ..Node::default()
        };
        for (k, v) in [
            ("kernel.name", "linux"),
            ("cpu.numcores", "8"),
            ("cpu.frequency", "2.5"),
            ("os.version", "22.04"),
            ("nomad.version", "1.7.3"),
            ("tags", "ssd, gpu,fast"),
            ("unique.hostname", "host-1"),
        ] {
            n.attributes.insert(k.into(), v.into());
        }
        n.meta.insert("rack".into(), "r1".into());
        n
    }

    fn holds(l: &str, op: &str, r: &str) -> bool {
        let mut cache = OperandCache::default();
        constraint_holds(&mut cache, &Constraint::new(l, op, r), &node())
    }

    #[test]
    fn targets_interpolate_attributes_meta_and_node_fields() {
        let n = node();
        assert_eq!(resolve_target("${attr.kernel.name}", &n), Some("linux"));
        assert_eq!(resolve_target("${meta.rack}", &n), Some("r1"));
        assert_eq!(resolve_target("${node.unique.id}", &n), Some("node-1"));
        assert_eq!(resolve_target("${node.unique.name}", &n), Some("host-1"));
        assert_eq!(resolve_target("${node.datacenter}", &n), Some("dc1"));
        assert_eq!(resolve_target("${node.class}", &n), Some("large"));
        assert_eq!(resolve_target("${node.pool}", &n), Some("default"));
        assert_eq!(
            resolve_target("${attr.unique.hostname}", &n),
            Some("host-1")
        );
        assert_eq!(resolve_target("${attr.missing}", &n), None);
        assert_eq!(resolve_target("${bogus.thing}", &n), None);
        assert_eq!(resolve_target("literal", &n), Some("literal"));
    }

    #[test]
    fn equality_operands() {
        assert!(holds("${attr.kernel.name}", "=", "linux"));
        assert!(holds("${attr.kernel.name}", "==", "linux"));
        assert!(holds("${attr.kernel.name}", "is", "linux"));
        assert!(!holds("${attr.kernel.name}", "=", "windows"));
        assert!(!holds("${attr.missing}", "=", "linux"));
        assert!(holds("${attr.kernel.name}", "!=", "windows"));
        assert!(holds("${attr.kernel.name}", "not", "windows"));
        assert!(!holds("${attr.kernel.name}", "!=", "linux"));
        assert!(holds("${attr.missing}", "!=", "linux"), "unset differs");
    }

    #[test]
    fn order_operands_are_numeric_then_lexical() {
        assert!(holds("${attr.cpu.numcores}", ">", "4"));
        assert!(holds("${attr.cpu.numcores}", ">=", "8"));
        assert!(!holds("${attr.cpu.numcores}", "<", "8"));
        assert!(holds("${attr.cpu.numcores}", "<=", "8"));
        // Numeric, not lexical: "8" > "10" lexically but not numerically.
        assert!(holds("${attr.cpu.numcores}", "<", "10"));
        assert!(holds("${attr.cpu.frequency}", ">", "2.25"));
        assert!(holds("${attr.kernel.name}", ">", "darwin"));
        assert!(!holds("${attr.missing}", "<", "10"));
    }

    #[test]
    fn regexp_operand() {
        assert!(holds("${attr.kernel.name}", "regexp", "^lin"));
        assert!(!holds("${attr.kernel.name}", "regexp", "^win"));
        assert!(!holds("${attr.kernel.name}", "regexp", "(unclosed"));
        assert!(!holds("${attr.missing}", "regexp", ".*"));
    }

    #[test]
    fn version_and_semver_operands() {
        assert!(holds("${attr.nomad.version}", "version", ">= 1.7, < 2.0"));
        assert!(!holds("${attr.nomad.version}", "version", "< 1.7"));
        assert!(holds("${attr.os.version}", "version", "~> 22.0"));
        assert!(holds("${attr.nomad.version}", "semver", ">= 1.7.0"));
        assert!(
            !holds("${attr.os.version}", "semver", ">= 1.0.0"),
            "22.04 is not strict semver"
        );
        assert!(!holds("${attr.missing}", "version", ">= 1.0"));
    }

    #[test]
    fn set_operands() {
        assert!(holds("${attr.tags}", "set_contains", "ssd,gpu"));
        assert!(holds("${attr.tags}", "set_contains_all", "fast"));
        assert!(!holds("${attr.tags}", "set_contains", "ssd,tpu"));
        assert!(holds("${attr.tags}", "set_contains_any", "tpu, gpu"));
        assert!(!holds("${attr.tags}", "set_contains_any", "tpu,arm"));
    }

    #[test]
    fn presence_operands() {
        assert!(holds("${meta.rack}", "is_set", ""));
        assert!(!holds("${meta.zone}", "is_set", ""));
        assert!(holds("${meta.zone}", "is_not_set", ""));
        assert!(!holds("${meta.rack}", "is_not_set", ""));
    }

    #[test]
    fn distinct_operands_pass_value_checks_and_unknown_operands_fail() {
        assert!(holds("", "distinct_hosts", ""));
        assert!(holds("${meta.rack}", "distinct_property", "2"));
        assert!(!holds("${meta.rack}", "resembles", "r1"));
    }

    #[test]
    fn datacenter_globs_and_pools_scope_the_job() {
        let n = node();
        let mut job = Job {
            datacenters: vec!["dc*".into()],
            node_pool: "default".into(),
            ..Job::default()
        };
        assert!(node_in_job_scope(&job, &n));
        job.datacenters = vec!["eu-*".into(), "*1".into()];
        assert!(node_in_job_scope(&job, &n));
        job.datacenters = vec!["dc2".into()];
        assert!(!node_in_job_scope(&job, &n));
        job.datacenters = vec!["*".into()];
        job.node_pool = "gpu".into();
        assert!(!node_in_job_scope(&job, &n));
        job.node_pool = "all".into();
        assert!(node_in_job_scope(&job, &n));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXcYYb"));
        assert!(!glob_match("ab*ba", "aba"));
    }

    #[test]
    fn drivers_need_health_or_a_truthy_attribute() {
        let mut n = node();
        let docker = DriverNeed::new("docker");
        assert!(!driver_available(&n, &docker));
        n.attributes.insert("driver.exec".into(), "1".into());
        assert!(driver_available(&n, &DriverNeed::new("exec")));
        n.drivers.insert(
            "docker".into(),
            DriverInfo {
                detected: true,
                healthy: false,
                ..DriverInfo::default()
            },
        );
        assert!(!driver_available(&n, &docker));
        n.drivers.get_mut("docker").unwrap().healthy = true;
        assert!(driver_available(&n, &docker));
    }
}
