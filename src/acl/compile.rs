//! A token's policies compiled into one [`Acl`], and what a request needs of it ([`Need`]).
//!
//! Policies merge as Nomad's: for each namespace rule the capabilities add up and a deny
//! wipes them; for `node`, `agent` and `operator` deny wins, then the higher grant. A
//! namespace is matched exactly first, else by the closest glob (the one whose literal part
//! is longest). A management token is allowed everything.

use std::collections::HashMap;

use crate::acl::policy::{CapSet, Capability, Level, Policy, VarCap, VarCaps};

/// What a request needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// Nothing: public (status, health, metrics).
    Nothing,
    /// Any of these capabilities in this namespace.
    Namespace(String, &'static [Capability]),
    /// Any capability at all in this namespace (it is visible).
    NamespaceVisible(String),
    /// `node` read.
    NodeRead,
    /// `node` write.
    NodeWrite,
    /// `agent` read.
    AgentRead,
    /// `agent` write.
    AgentWrite,
    /// `operator` read.
    OperatorRead,
    /// `operator` write.
    OperatorWrite,
    /// Reading service registrations in this namespace: `read-job` there, or any workload
    /// identity (Nomad lets every workload look services up, for its templates).
    ServiceRead(String),
    /// A variables capability at a path of a namespace.
    Variable(String, String, VarCap),
    /// A management token.
    Management,
}

/// What one caller may do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acl {
    management: bool,
    /// A workload identity's (no policy of its own yet).
    workload: bool,
    /// A workload's own place: namespace, job, group, task (its implicit variables).
    claim: Option<WorkloadClaim>,
    /// Variables rules by `<namespace>\0<path>`, exact ones and globs.
    variables_exact: HashMap<String, VarCaps>,
    variables_globs: Vec<(String, VarCaps)>,
    exact: HashMap<String, CapSet>,
    globs: Vec<(String, CapSet)>,
    node: Level,
    agent: Level,
    operator: Level,
}

impl Acl {
    /// A management token's: everything.
    pub fn management() -> Acl {
        Acl {
            management: true,
            ..Acl::default()
        }
    }

    /// A workload identity's: service lookups, and reading the variables of its own job's
    /// paths (`nomad/jobs`, `nomad/jobs/<job>[/<group>[/<task>]]`), nothing else.
    pub fn workload(claim: WorkloadClaim) -> Acl {
        Acl {
            workload: true,
            claim: Some(claim),
            ..Acl::default()
        }
    }

    /// The union of `policies` (none: nothing is allowed).
    pub fn from_policies<'a>(policies: impl IntoIterator<Item = &'a Policy>) -> Acl {
        let mut acl = Acl::default();
        let mut namespaces: HashMap<String, CapSet> = HashMap::new();
        let mut variables: HashMap<String, VarCaps> = HashMap::new();
        for p in policies {
            for (ns, path, caps) in &p.variables {
                let key = format!("{ns}\0{path}");
                let merged = variables
                    .get(&key)
                    .copied()
                    .unwrap_or_default()
                    .merge(*caps);
                variables.insert(key, merged);
            }
            for (name, caps) in &p.namespaces {
                let merged = namespaces
                    .get(name)
                    .copied()
                    .unwrap_or_default()
                    .merge(*caps);
                namespaces.insert(name.clone(), merged);
            }
            acl.node = acl.node.merge(p.node);
            acl.agent = acl.agent.merge(p.agent);
            acl.operator = acl.operator.merge(p.operator);
        }
        for (key, caps) in variables {
            if key.contains('*') {
                acl.variables_globs.push((key, caps));
            } else {
                acl.variables_exact.insert(key, caps);
            }
        }
        acl.variables_globs.sort();
        for (name, caps) in namespaces {
            if name.contains('*') {
                acl.globs.push((name, caps));
            } else {
                acl.exact.insert(name, caps);
            }
        }
        acl.globs.sort();
        acl
    }

    /// Whether it is a management token's.
    pub fn is_management(&self) -> bool {
        self.management
    }

    /// The capabilities it has in `namespace`.
    pub fn namespace_caps(&self, namespace: &str) -> CapSet {
        if let Some(caps) = self.exact.get(namespace) {
            return *caps;
        }
        self.globs
            .iter()
            .filter(|(glob, _)| glob_match(glob, namespace))
            .min_by_key(|(glob, _)| namespace.len() - glob.replace('*', "").len())
            .map(|(_, caps)| *caps)
            .unwrap_or_default()
    }

    /// Whether it has any of `caps` in `namespace`.
    pub fn allows_namespace(&self, namespace: &str, caps: &[Capability]) -> bool {
        if self.management {
            return true;
        }
        let have = self.namespace_caps(namespace);
        !have.is_deny() && caps.iter().any(|c| have.has(*c))
    }

    /// Whether it can see `namespace` at all.
    pub fn namespace_visible(&self, namespace: &str) -> bool {
        self.management || self.namespace_caps(namespace).grants_any()
    }

    /// Whether it meets `need`.
    pub fn allows(&self, need: &Need) -> bool {
        if self.management {
            return true;
        }
        match need {
            Need::Nothing => true,
            Need::Namespace(ns, caps) => self.allows_namespace(ns, caps),
            Need::NamespaceVisible(ns) => self.namespace_visible(ns),
            Need::NodeRead => self.node.can_read(),
            Need::NodeWrite => self.node.can_write(),
            Need::AgentRead => self.agent.can_read(),
            Need::AgentWrite => self.agent.can_write(),
            Need::OperatorRead => self.operator.can_read(),
            Need::OperatorWrite => self.operator.can_write(),
            Need::ServiceRead(ns) => {
                self.workload || self.allows_namespace(ns, &[Capability::ReadJob])
            }
            Need::Variable(ns, path, cap) => {
                self.variable_caps(ns, path).is_some_and(|c| c.has(*cap))
            }
            Need::Management => false,
        }
    }
}

/// Where a workload identity's task runs: its implicit variables are its job's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkloadClaim {
    /// The allocation's namespace.
    pub namespace: String,
    /// The job (the parent's ID for a child).
    pub job: String,
    /// The group.
    pub group: String,
    /// The task.
    pub task: String,
}

impl WorkloadClaim {
    /// Whether `path` in `namespace` is one of the paths a workload reads without a policy
    /// (Nomad's: `nomad/jobs`, `nomad/jobs/<job>`, `…/<group>`, `…/<group>/<task>`,
    /// exactly).
    pub fn owns_variable(&self, namespace: &str, path: &str) -> bool {
        namespace == self.namespace
            && (path == "nomad/jobs"
                || path == format!("nomad/jobs/{}", self.job)
                || path == format!("nomad/jobs/{}/{}", self.job, self.group)
                || path == format!("nomad/jobs/{}/{}/{}", self.job, self.group, self.task))
    }
}

impl Acl {
    /// What may be done with the variable at `path` in `namespace`: the exact rule, else a
    /// workload's own paths (read and list), else the closest glob (Nomad's order).
    pub fn variable_caps(&self, namespace: &str, path: &str) -> Option<VarCaps> {
        if self.management {
            return Some(VarCaps::of(&[
                VarCap::Read,
                VarCap::Write,
                VarCap::List,
                VarCap::Destroy,
            ]));
        }
        let key = format!("{namespace}\0{path}");
        if let Some(caps) = self.variables_exact.get(&key) {
            return Some(*caps);
        }
        if self
            .claim
            .as_ref()
            .is_some_and(|c| c.owns_variable(namespace, path))
        {
            return Some(VarCaps::of(&[VarCap::Read, VarCap::List]));
        }
        // Among equally close globs the last (in order) wins, as in Nomad's stable sort.
        self.variables_globs
            .iter()
            .rev()
            .filter(|(glob, _)| glob_match(glob, &key))
            .min_by_key(|(glob, _)| key.len() - glob.replace('*', "").len())
            .map(|(_, caps)| *caps)
    }
}

/// Whether `name` matches `glob`, where `*` stands for any run of characters.
fn glob_match(glob: &str, name: &str) -> bool {
    let parts: Vec<&str> = glob.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return glob == name;
    }
    if !name.starts_with(first) || !name.ends_with(last) || name.len() < first.len() + last.len() {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {

    #[test]
    fn variables_rules_match_exactly_then_the_workload_s_own_paths_then_the_closest_glob() {
        use crate::acl::parse_policy;
        let p = parse_policy(
            r#"namespace "default" {
                 variables {
                   path "*" { capabilities = ["list"] }
                   path "app/*" { capabilities = ["read", "write"] }
                   path "app/secret" { capabilities = ["deny"] }
                 }
               }
               namespace "team-*" {
                 variables {
                   path "shared/*" { capabilities = ["read"] }
                 }
               }"#,
        )
        .unwrap();
        let acl = Acl::from_policies([&p]);
        let can =
            |ns: &str, path: &str, cap| acl.allows(&Need::Variable(ns.into(), path.into(), cap));
        assert!(can("default", "app/db", VarCap::Read));
        assert!(can("default", "app/db", VarCap::Write));
        assert!(!can("default", "app/db", VarCap::Destroy));
        assert!(
            !can("default", "app/secret", VarCap::Read),
            "deny wins on its path"
        );
        assert!(!can("default", "app/secret", VarCap::List));
        assert!(can("default", "other", VarCap::List));
        assert!(!can("default", "other", VarCap::Read));
        assert!(can("team-a", "shared/x", VarCap::Read));
        assert!(!can("team-a", "app/db", VarCap::Read));
        assert!(!can("prod", "app/db", VarCap::List));

        // A workload reads its own job's paths, exactly, in its namespace, and no more.
        let w = Acl::workload(WorkloadClaim {
            namespace: "default".into(),
            job: "web".into(),
            group: "g".into(),
            task: "t".into(),
        });
        let wcan =
            |ns: &str, path: &str, cap| w.allows(&Need::Variable(ns.into(), path.into(), cap));
        for own in [
            "nomad/jobs",
            "nomad/jobs/web",
            "nomad/jobs/web/g",
            "nomad/jobs/web/g/t",
        ] {
            assert!(wcan("default", own, VarCap::Read), "{own}");
            assert!(!wcan("default", own, VarCap::Write), "{own}");
        }
        for other in [
            "nomad/jobs/web2",
            "nomad/jobs/web/g/t/x",
            "nomad/jobs/other",
            "app/db",
        ] {
            assert!(!wcan("default", other, VarCap::Read), "{other}");
        }
        assert!(!wcan("prod", "nomad/jobs/web", VarCap::Read));
        assert!(Acl::management().allows(&Need::Variable("x".into(), "y".into(), VarCap::Destroy)));
        assert!(!Acl::default().allows(&Need::Variable(
            "default".into(),
            "a".into(),
            VarCap::List
        )));
    }
    use super::*;
    use crate::acl::policy::parse_policy;

    fn acl(rules: &[&str]) -> Acl {
        let policies: Vec<Policy> = rules.iter().map(|r| parse_policy(r).unwrap()).collect();
        Acl::from_policies(&policies)
    }

    #[test]
    fn globs_match_and_the_closest_wins() {
        assert!(glob_match("team-*", "team-a"));
        assert!(glob_match("*", "anything"));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXcYYb"));
        assert!(!glob_match("team-*", "tea"));
        assert!(glob_match("ab*ab", "abab"));
        assert!(!glob_match("ab*ab", "aba"));
        let a = acl(&[
            r#"namespace "*" { policy = "write" }"#,
            r#"namespace "prod-*" { policy = "read" }"#,
            r#"namespace "prod-secret" { policy = "deny" }"#,
        ]);
        assert!(a.allows_namespace("dev", &[Capability::SubmitJob]));
        assert!(a.allows_namespace("prod-web", &[Capability::ReadJob]));
        assert!(!a.allows_namespace("prod-web", &[Capability::SubmitJob]));
        assert!(!a.namespace_visible("prod-secret"));
        assert!(a.namespace_visible("prod-web"));
    }

    #[test]
    fn policies_merge_and_deny_wins() {
        let a = acl(&[
            r#"namespace "default" { policy = "read" }"#,
            r#"namespace "default" { capabilities = ["submit-job"] }"#,
            r#"node { policy = "read" }"#,
            r#"node { policy = "write" }"#,
            r#"agent { policy = "write" }"#,
            r#"agent { policy = "deny" }"#,
        ]);
        assert!(a.allows(&Need::Namespace("default".into(), &[Capability::SubmitJob])));
        assert!(a.allows(&Need::NodeWrite));
        assert!(!a.allows(&Need::AgentRead));
        assert!(!a.allows(&Need::OperatorRead));
        assert!(!a.allows(&Need::Management));
        assert!(!a.allows(&Need::NamespaceVisible("other".into())));
        let denied = acl(&[
            r#"namespace "default" { policy = "write" }"#,
            r#"namespace "default" { policy = "deny" }"#,
        ]);
        assert!(!denied.allows(&Need::Namespace("default".into(), &[Capability::ReadJob])));
    }

    #[test]
    fn nothing_is_allowed_without_policies_and_management_is_allowed_everything() {
        let none = Acl::from_policies(&[]);
        assert!(none.allows(&Need::Nothing));
        assert!(!none.allows(&Need::NodeRead));
        assert!(!none.allows(&Need::NamespaceVisible("default".into())));
        let m = Acl::management();
        assert!(m.allows(&Need::Management));
        assert!(m.allows(&Need::Namespace("x".into(), &[Capability::PurgeJob])));
    }
}
