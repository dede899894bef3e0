//! Nomad's ACL policy language, HCL or JSON:
//!
//! ```hcl
//! namespace "default" { policy = "write" }
//! namespace "team-*"  { policy = "read"  capabilities = ["submit-job", "read-logs"] }
//! node     { policy = "read" }
//! agent    { policy = "read" }
//! operator { policy = "write" }
//! ```
//!
//! A namespace rule has a coarse `policy` (`deny`, `read`, `write`, `scale`) that expands to
//! capabilities (Nomad's expansion), plus fine-grained `capabilities`; `deny` (as either)
//! wipes every capability there. Namespace names may be globs with `*`. A namespace's
//! `variables { path "a/*" { capabilities = ["read", "write", "list", "destroy", "deny"] } }`
//! rules say what may be done with the variables at those paths (`read` brings `list`,
//! `deny` wipes the rest). `node`, `agent` and `operator` take `deny`, `read` or `write`.
//! Blocks for what teamster does not have (`quota`, `plugin`, `host_volume`, `node_pool`)
//! and any unknown block, attribute or capability are refused by name, never ignored.

use std::collections::BTreeMap;

use crate::util::hcl_nesting;

/// What is wrong with a policy's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// The text is neither valid HCL nor valid JSON.
    #[error("Failed to parse ACL policy: {0}")]
    Syntax(String),
    /// A block, attribute or value the language does not have, or teamster does not act on.
    #[error("Failed to parse ACL policy: {0}")]
    Invalid(String),
}

/// A coarse level for `node`, `agent`, `operator` (and a namespace's `policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum Level {
    /// No rule: nothing granted.
    #[default]
    None,
    /// Read only.
    Read,
    /// Read and write.
    Write,
    /// Denied, whatever other policies grant.
    Deny,
}

impl Level {
    /// Two policies' levels together: deny wins, then the higher grant.
    pub fn merge(self, other: Level) -> Level {
        self.max(other)
    }

    /// Whether it grants reading.
    pub fn can_read(self) -> bool {
        matches!(self, Level::Read | Level::Write)
    }

    /// Whether it grants writing.
    pub fn can_write(self) -> bool {
        self == Level::Write
    }

    fn parse(word: &str, what: &str) -> Result<Level, PolicyError> {
        match word {
            "deny" => Ok(Level::Deny),
            "read" => Ok(Level::Read),
            "write" => Ok(Level::Write),
            other => Err(PolicyError::Invalid(format!(
                "invalid {what} policy {other:?}: must be \"deny\", \"read\" or \"write\""
            ))),
        }
    }
}

macro_rules! capabilities {
    ($($variant:ident = $name:literal,)*) => {
        /// A namespace capability (Nomad's names).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[repr(u8)]
        pub enum Capability {
            $(
                #[doc = concat!("`", $name, "`")]
                $variant,
            )*
        }

        impl Capability {
            /// Every capability.
            pub const ALL: &'static [Capability] = &[$(Capability::$variant,)*];

            /// Its name in policies.
            pub fn name(self) -> &'static str {
                match self {
                    $(Capability::$variant => $name,)*
                }
            }

            /// The capability of this name.
            pub fn parse(name: &str) -> Option<Capability> {
                match name {
                    $($name => Some(Capability::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

capabilities! {
    Deny = "deny",
    ListJobs = "list-jobs",
    ParseJob = "parse-job",
    ReadJob = "read-job",
    SubmitJob = "submit-job",
    DispatchJob = "dispatch-job",
    ReadLogs = "read-logs",
    ReadFs = "read-fs",
    AllocExec = "alloc-exec",
    AllocNodeExec = "alloc-node-exec",
    AllocLifecycle = "alloc-lifecycle",
    ListScalingPolicies = "list-scaling-policies",
    ReadScalingPolicy = "read-scaling-policy",
    ReadJobScaling = "read-job-scaling",
    ScaleJob = "scale-job",
    RegisterJob = "register-job",
    RevertJob = "revert-job",
    DeregisterJob = "deregister-job",
    PurgeJob = "purge-job",
    EvaluateJob = "evaluate-job",
    PlanJob = "plan-job",
    StableJob = "stable-job",
    FailDeployment = "fail-deployment",
    PauseDeployment = "pause-deployment",
    PromoteDeployment = "promote-deployment",
    UnblockDeployment = "unblock-deployment",
    CancelDeployment = "cancel-deployment",
    SetAllocHealthDeployment = "set-alloc-health-deployment",
    GcAllocation = "gc-allocation",
    ForcePeriodicJob = "force-periodic-job",
    DeleteServiceRegistration = "delete-service-registration",
}

impl Capability {
    /// Its bit in a [`CapSet`].
    fn bit(self) -> u64 {
        1 << (self as u8)
    }
}

/// A set of namespace capabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct CapSet(u64);

impl CapSet {
    /// The empty set.
    pub const EMPTY: CapSet = CapSet(0);

    /// The set of `caps`.
    pub fn of(caps: &[Capability]) -> CapSet {
        CapSet(caps.iter().fold(0, |acc, c| acc | c.bit()))
    }

    /// Whether `cap` is in it.
    pub fn has(self, cap: Capability) -> bool {
        self.0 & cap.bit() != 0
    }

    /// Whether it denies everything.
    pub fn is_deny(self) -> bool {
        self.has(Capability::Deny)
    }

    /// Whether it grants anything.
    pub fn grants_any(self) -> bool {
        !self.is_deny() && self.0 != 0
    }

    /// Two policies' sets together: a deny wipes the rest.
    pub fn merge(self, other: CapSet) -> CapSet {
        if self.is_deny() || other.is_deny() {
            CapSet::of(&[Capability::Deny])
        } else {
            CapSet(self.0 | other.0)
        }
    }
}

/// What a namespace's coarse `policy` expands to (Nomad's `expandNamespacePolicy`).
fn expand_namespace_policy(word: &str) -> Result<CapSet, PolicyError> {
    use Capability::*;
    let read = [
        ListJobs,
        ParseJob,
        ReadJob,
        ReadJobScaling,
        ListScalingPolicies,
        ReadScalingPolicy,
    ];
    Ok(match word {
        "deny" => CapSet::of(&[Deny]),
        "read" => CapSet::of(&read),
        "write" => CapSet::of(&read).merge(CapSet::of(&[
            ScaleJob,
            SubmitJob,
            DispatchJob,
            ReadLogs,
            ReadFs,
            AllocExec,
            AllocLifecycle,
        ])),
        "scale" => CapSet::of(&[
            ListScalingPolicies,
            ReadScalingPolicy,
            ReadJobScaling,
            ScaleJob,
            ReadJob,
        ]),
        other => {
            return Err(PolicyError::Invalid(format!(
                "invalid namespace policy {other:?}: must be \"deny\", \"read\", \"write\" or \"scale\""
            )))
        }
    })
}

/// One parsed policy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Policy {
    /// Namespace rules by name or glob.
    pub namespaces: BTreeMap<String, CapSet>,
    /// The `node` rule.
    pub node: Level,
    /// The `agent` rule.
    pub agent: Level,
    /// The `operator` rule.
    pub operator: Level,
    /// Variables rules: namespace (name or glob), path (or glob), capabilities.
    pub variables: Vec<(String, String, VarCaps)>,
}

/// A set of variables capabilities (`read`, `write`, `list`, `destroy`, `deny`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct VarCaps(u8);

/// One variables capability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarCap {
    /// `read` (implies `list`).
    Read,
    /// `write`.
    Write,
    /// `list`.
    List,
    /// `destroy`.
    Destroy,
    /// `deny`: nothing, whatever else grants.
    Deny,
}

impl VarCap {
    fn bit(self) -> u8 {
        match self {
            VarCap::Read => 1,
            VarCap::Write => 2,
            VarCap::List => 4,
            VarCap::Destroy => 8,
            VarCap::Deny => 16,
        }
    }

    fn parse(word: &str) -> Option<VarCap> {
        Some(match word {
            "read" => VarCap::Read,
            "write" => VarCap::Write,
            "list" => VarCap::List,
            "destroy" => VarCap::Destroy,
            "deny" => VarCap::Deny,
            _ => return None,
        })
    }
}

impl VarCaps {
    /// The set of `caps`, expanded as Nomad's (`read` brings `list`; `deny` is alone).
    pub fn of(caps: &[VarCap]) -> VarCaps {
        let mut bits = caps.iter().fold(0, |acc, c| acc | c.bit());
        if bits & VarCap::Deny.bit() != 0 {
            bits = VarCap::Deny.bit();
        } else if bits & VarCap::Read.bit() != 0 {
            bits |= VarCap::List.bit();
        }
        VarCaps(bits)
    }

    /// Whether `cap` is granted (never under `deny`).
    pub fn has(self, cap: VarCap) -> bool {
        self.0 & VarCap::Deny.bit() == 0 && self.0 & cap.bit() != 0
    }

    /// Two rules for the same path together: a deny wipes the rest.
    pub fn merge(self, other: VarCaps) -> VarCaps {
        if (self.0 | other.0) & VarCap::Deny.bit() != 0 {
            VarCaps(VarCap::Deny.bit())
        } else {
            VarCaps(self.0 | other.0)
        }
    }
}

/// Blocks of Nomad's language that teamster has nothing to act on.
const NOT_ACTED_ON: &[&str] = &["quota", "plugin", "host_volume", "node_pool"];

/// Parses a policy's rules, HCL or JSON (text starting with `{`). Empty rules are a policy
/// that grants nothing, as Nomad reads them.
pub fn parse_policy(rules: &str) -> Result<Policy, PolicyError> {
    let rules = rules.trim();
    if rules.is_empty() {
        return Ok(Policy::default());
    }
    let value = if rules.starts_with('{') {
        serde_json::from_str::<serde_json::Value>(rules)
            .map_err(|e| PolicyError::Syntax(e.to_string()))?
    } else {
        if let Some(problem) = hcl_nesting::scan(rules, hcl_nesting::MAX_NESTING) {
            return Err(PolicyError::Syntax(format!("{problem:?}")));
        }
        let body = hcl::parse(rules).map_err(|e| PolicyError::Syntax(e.to_string()))?;
        hcl_body_to_json(&body)?
    };
    from_json(&value)
}

/// An HCL body as the JSON form of the language: blocks become objects keyed by their
/// identifier, then by their label (several blocks of one kind gather in one object).
fn hcl_body_to_json(body: &hcl::Body) -> Result<serde_json::Value, PolicyError> {
    use serde_json::{Map, Value};
    let mut out = Map::new();
    for attr in body.attributes() {
        out.insert(
            attr.key().to_string(),
            hcl_expr_to_json(attr.key(), attr.expr())?,
        );
    }
    for block in body.blocks() {
        let inner = hcl_body_to_json(block.body())?;
        let id = block.identifier().to_string();
        match block.labels() {
            [] => {
                if out.insert(id.clone(), inner).is_some() {
                    return Err(PolicyError::Invalid(format!("more than one {id:?} block")));
                }
            }
            [label] => {
                let entry = out
                    .entry(id.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                let Value::Object(map) = entry else {
                    return Err(PolicyError::Invalid(format!("{id:?} given twice")));
                };
                if map.insert(label.as_str().to_string(), inner).is_some() {
                    return Err(PolicyError::Invalid(format!(
                        "more than one {id} {:?} block",
                        label.as_str()
                    )));
                }
            }
            _ => {
                return Err(PolicyError::Invalid(format!(
                    "a {id:?} block takes at most one label"
                )))
            }
        }
    }
    Ok(Value::Object(out))
}

fn hcl_expr_to_json(key: &str, expr: &hcl::Expression) -> Result<serde_json::Value, PolicyError> {
    use serde_json::Value;
    match expr {
        hcl::Expression::String(s) => Ok(Value::String(s.clone())),
        hcl::Expression::Array(items) => items
            .iter()
            .map(|e| hcl_expr_to_json(key, e))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        _ => Err(PolicyError::Invalid(format!(
            "{key:?} must be a string or a list of strings"
        ))),
    }
}

fn from_json(value: &serde_json::Value) -> Result<Policy, PolicyError> {
    let top = value
        .as_object()
        .ok_or_else(|| PolicyError::Invalid("a policy is an object of rules".into()))?;
    let mut policy = Policy::default();
    for (key, rule) in top {
        match key.as_str() {
            "namespace" => {
                for (name, rule) in labelled(rule, "namespace")? {
                    let (caps, variables) = namespace_rule(&name, rule)?;
                    policy.variables.extend(
                        variables
                            .into_iter()
                            .map(|(path, caps)| (name.clone(), path, caps)),
                    );
                    let merged = policy
                        .namespaces
                        .get(&name)
                        .copied()
                        .unwrap_or(CapSet::EMPTY)
                        .merge(caps);
                    policy.namespaces.insert(name, merged);
                }
            }
            "node" => policy.node = coarse_rule(rule, "node")?,
            "agent" => policy.agent = coarse_rule(rule, "agent")?,
            "operator" => policy.operator = coarse_rule(rule, "operator")?,
            other if NOT_ACTED_ON.contains(&other) => {
                return Err(PolicyError::Invalid(format!(
                    "{other:?} rules are not supported by teamster (it has no {})",
                    match other {
                        "quota" => "quotas",
                        "plugin" => "CSI plugins",
                        "host_volume" => "host volumes",
                        _ => "node pool ACLs",
                    }
                )))
            }
            other => {
                return Err(PolicyError::Invalid(format!("unknown rule {other:?}")));
            }
        }
    }
    Ok(policy)
}

/// A labelled block's entries: `{"name": {...}}`, or a list of such objects (the JSON that
/// HCL 1 wrote).
fn labelled<'a>(
    rule: &'a serde_json::Value,
    what: &str,
) -> Result<Vec<(String, &'a serde_json::Value)>, PolicyError> {
    let one =
        |v: &'a serde_json::Value| -> Result<Vec<(String, &'a serde_json::Value)>, PolicyError> {
            v.as_object()
                .map(|m| m.iter().map(|(k, v)| (k.clone(), v)).collect())
                .ok_or_else(|| PolicyError::Invalid(format!("{what:?} rules are objects by name")))
        };
    match rule {
        serde_json::Value::Array(items) => {
            let mut out = Vec::new();
            for item in items {
                out.extend(one(item)?);
            }
            Ok(out)
        }
        other => one(other),
    }
}

fn rule_object<'a>(
    rule: &'a serde_json::Value,
    what: &str,
) -> Result<&'a serde_json::Map<String, serde_json::Value>, PolicyError> {
    match rule {
        serde_json::Value::Object(m) => Ok(m),
        // HCL 1's JSON wrapped each block in a list.
        serde_json::Value::Array(items) if items.len() == 1 => rule_object(&items[0], what),
        _ => Err(PolicyError::Invalid(format!("{what} rule must be a block"))),
    }
}

fn string_field(
    map: &serde_json::Map<String, serde_json::Value>,
    key: &str,
    what: &str,
) -> Result<Option<String>, PolicyError> {
    match map.get(key) {
        None => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(PolicyError::Invalid(format!(
            "{what}: {key:?} must be a string"
        ))),
    }
}

/// A namespace rule's capabilities and its `variables` rules (path, capabilities).
type NamespaceRule = (CapSet, Vec<(String, VarCaps)>);

fn namespace_rule(name: &str, rule: &serde_json::Value) -> Result<NamespaceRule, PolicyError> {
    let what = format!("namespace {name:?}");
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'*')
    {
        return Err(PolicyError::Invalid(format!(
            "invalid namespace name {name:?}"
        )));
    }
    let map = rule_object(rule, &what)?;
    let mut caps = CapSet::EMPTY;
    let mut variables = Vec::new();
    for key in map.keys() {
        match key.as_str() {
            "policy" | "capabilities" => {}
            "variables" => variables = variables_rule(&map[key], &what)?,
            other => {
                return Err(PolicyError::Invalid(format!(
                    "{what}: unknown attribute {other:?}"
                )))
            }
        }
    }
    if let Some(word) = string_field(map, "policy", &what)? {
        caps = caps.merge(expand_namespace_policy(&word)?);
    }
    match map.get("capabilities") {
        None => {}
        Some(serde_json::Value::Array(items)) => {
            for item in items {
                let name = item.as_str().ok_or_else(|| {
                    PolicyError::Invalid(format!("{what}: capabilities are strings"))
                })?;
                let cap = Capability::parse(name).ok_or_else(|| {
                    PolicyError::Invalid(format!("{what}: unknown capability {name:?}"))
                })?;
                caps = caps.merge(CapSet::of(&[cap]));
            }
        }
        Some(_) => {
            return Err(PolicyError::Invalid(format!(
                "{what}: capabilities must be a list"
            )))
        }
    }
    Ok((caps, variables))
}

/// A namespace's `variables { path "a/*" { capabilities = [...] } }`.
fn variables_rule(
    rule: &serde_json::Value,
    what: &str,
) -> Result<Vec<(String, VarCaps)>, PolicyError> {
    let what = format!("{what} variables");
    let map = rule_object(rule, &what)?;
    let mut out = Vec::new();
    for (key, value) in map {
        if key != "path" {
            return Err(PolicyError::Invalid(format!(
                "{what}: unknown attribute {key:?}"
            )));
        }
        for (path, rule) in labelled(value, "path")? {
            if path.starts_with('/') {
                return Err(PolicyError::Invalid(format!(
                    "{what}: path {path:?} must not start with \"/\""
                )));
            }
            let what = format!("{what} path {path:?}");
            let rule = rule_object(rule, &what)?;
            if let Some(other) = rule.keys().find(|k| *k != "capabilities") {
                return Err(PolicyError::Invalid(format!(
                    "{what}: unknown attribute {other:?}"
                )));
            }
            let words = match rule.get("capabilities") {
                Some(serde_json::Value::Array(items)) => items,
                _ => {
                    return Err(PolicyError::Invalid(format!(
                        "{what}: capabilities must be a list"
                    )))
                }
            };
            let mut caps = Vec::new();
            for word in words {
                let word = word.as_str().unwrap_or_default();
                caps.push(VarCap::parse(word).ok_or_else(|| {
                    PolicyError::Invalid(format!("{what}: unknown capability {word:?}"))
                })?);
            }
            out.push((path, VarCaps::of(&caps)));
        }
    }
    Ok(out)
}

fn coarse_rule(rule: &serde_json::Value, what: &str) -> Result<Level, PolicyError> {
    let map = rule_object(rule, what)?;
    if let Some(other) = map.keys().find(|k| *k != "policy") {
        return Err(PolicyError::Invalid(format!(
            "{what}: unknown attribute {other:?}"
        )));
    }
    let word = string_field(map, "policy", what)?
        .ok_or_else(|| PolicyError::Invalid(format!("{what} rule without a policy")))?;
    Level::parse(&word, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hcl_and_json_parse_to_the_same_policy() {
        let hcl = r#"
            namespace "default" { policy = "read" }
            namespace "team-*" {
              policy       = "read"
              capabilities = ["submit-job", "read-logs"]
            }
            node     { policy = "write" }
            agent    { policy = "read" }
            operator { policy = "deny" }
        "#;
        let json = r#"{
            "namespace": {
                "default": {"policy": "read"},
                "team-*": {"policy": "read", "capabilities": ["submit-job", "read-logs"]}
            },
            "node": {"policy": "write"},
            "agent": [{"policy": "read"}],
            "operator": {"policy": "deny"}
        }"#;
        let a = parse_policy(hcl).unwrap();
        assert_eq!(a, parse_policy(json).unwrap());
        assert_eq!(a.node, Level::Write);
        assert_eq!(a.agent, Level::Read);
        assert_eq!(a.operator, Level::Deny);
        let team = a.namespaces["team-*"];
        assert!(team.has(Capability::SubmitJob) && team.has(Capability::ReadJob));
        assert!(!team.has(Capability::AllocExec));
        assert!(!a.namespaces["default"].has(Capability::SubmitJob));
    }

    #[test]
    fn write_expands_as_nomads_and_deny_wipes() {
        let p = parse_policy(r#"namespace "x" { policy = "write" }"#).unwrap();
        let x = p.namespaces["x"];
        for cap in [
            Capability::ListJobs,
            Capability::ReadJob,
            Capability::SubmitJob,
            Capability::DispatchJob,
            Capability::ReadLogs,
            Capability::AllocExec,
            Capability::ScaleJob,
        ] {
            assert!(x.has(cap), "{cap:?}");
        }
        // The fine-grained job capabilities are not in write.
        assert!(!x.has(Capability::PurgeJob));
        let denied = parse_policy(
            r#"namespace "x" {
                 policy = "write"
                 capabilities = ["deny"]
               }"#,
        )
        .unwrap();
        assert!(!denied.namespaces["x"].grants_any());
    }

    #[test]
    fn what_is_not_acted_on_is_refused_by_name() {
        for (rules, word) in [
            (r#"quota { policy = "read" }"#, "quota"),
            (r#"plugin { policy = "list" }"#, "plugin"),
            (r#"host_volume "d" { policy = "write" }"#, "host_volume"),
            (r#"node_pool "gpu" { policy = "read" }"#, "node_pool"),
            (
                r#"namespace "x" {
                     variables {
                       path "a/*" { capabilities = ["peek"] }
                     }
                   }"#,
                "peek",
            ),
            (r#"namespace "x" { policy = "admin" }"#, "admin"),
            (r#"namespace "x" { capabilities = ["fly"] }"#, "fly"),
            (r#"node { policy = "list" }"#, "list"),
            (
                r#"node {
                     policy = "read"
                     extra  = "1"
                   }"#,
                "extra",
            ),
            (r#"nodes { policy = "read" }"#, "nodes"),
            (r#"namespace "a b" { policy = "read" }"#, "a b"),
            ("node {", "Failed to parse"),
            ("{\"node\": 1}", "block"),
        ] {
            let err = parse_policy(rules).unwrap_err().to_string();
            assert!(err.contains(word), "{rules}: {err}");
        }
        let vars = parse_policy(
            r#"namespace "x" {
                 variables {
                   path "a/*" { capabilities = ["read", "write"] }
                   path "a/secret" { capabilities = ["deny", "read"] }
                 }
               }"#,
        )
        .unwrap();
        assert_eq!(vars.variables.len(), 2);
        let (_, _, rw) = &vars.variables[0];
        assert!(rw.has(VarCap::Read) && rw.has(VarCap::List) && !rw.has(VarCap::Destroy));
        assert!(!vars.variables[1].2.has(VarCap::Read));
        // Empty rules are a policy that grants nothing, as Nomad reads them.
        for empty in ["", "  \n"] {
            assert_eq!(parse_policy(empty).unwrap(), Policy::default());
        }
    }
}
