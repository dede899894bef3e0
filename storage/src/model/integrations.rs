//! What a job asks of integrations a teamster cluster does not have: a task's `vault` block
//! and Consul services. Nomad accepts such a job on a cluster without Vault or Consul and
//! leaves it pending: its servers add implied constraints on the attributes a client
//! fingerprints when it reaches Vault or Consul (`${attr.vault.version}`,
//! `${attr.consul.version}`), and the scheduler reports every node filtered by them. teamster
//! does the same ([`imply_integration_constraints`]); no teamster node fingerprints either,
//! so such a job stays pending with Nomad's placement failure, and nothing is fetched from
//! Vault or registered in Consul.

use serde::{Deserialize, Serialize};

use crate::model::de;
use crate::model::job::{Constraint, Job};
use crate::model::task_runtime::signal_name;

/// The cluster a `vault` block or Consul service names when it names none.
pub const DEFAULT_CLUSTER: &str = "default";

/// The version a node's Vault must have for a task's token (Nomad's implied constraint).
const VAULT_MIN_VERSION: &str = ">= 0.6.1";
/// The version a node's Consul agent must have for service registration.
const CONSUL_MIN_VERSION: &str = ">= 1.8.0";

/// A task's `vault` block (Nomad's `Vault`): the Vault token the task would be given.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Vault {
    /// Vault policies the token carries (legacy token workflow).
    #[serde(deserialize_with = "de::nullable")]
    pub policies: Vec<String>,
    /// The Vault role to derive the token with (workload identity workflow).
    #[serde(deserialize_with = "de::nullable")]
    pub role: String,
    /// The Vault namespace.
    #[serde(deserialize_with = "de::nullable")]
    pub namespace: String,
    /// The Vault cluster (`default`).
    #[serde(deserialize_with = "de::nullable")]
    pub cluster: String,
    /// Put the token in the task's environment as `VAULT_TOKEN`.
    pub env: Option<bool>,
    /// Do not write the token to `secrets/vault_token`.
    pub disable_file: Option<bool>,
    /// What a renewed token does to the task: `noop`, `restart` or `signal`.
    #[serde(deserialize_with = "de::nullable")]
    pub change_mode: String,
    /// The signal for `change_mode = "signal"`.
    #[serde(deserialize_with = "de::nullable")]
    pub change_signal: String,
    /// Let the token expire instead of failing the task when it cannot be renewed.
    pub allow_token_expiration: Option<bool>,
}

impl Vault {
    /// Nomad's API defaults: the `default` cluster, the token in the environment and in a
    /// file, `restart` on change (`SIGHUP` when a signal is asked for).
    pub fn canonicalize(&mut self) {
        if self.cluster.is_empty() {
            self.cluster = DEFAULT_CLUSTER.to_owned();
        }
        self.env.get_or_insert(true);
        self.disable_file.get_or_insert(false);
        if self.change_mode.is_empty() {
            self.change_mode = "restart".to_owned();
        }
        if self.change_signal.is_empty() {
            self.change_signal = "SIGHUP".to_owned();
        }
        self.allow_token_expiration.get_or_insert(false);
    }

    /// Nomad's checks of a `vault` block.
    pub fn validate(&self, at: &str, errors: &mut Vec<String>) {
        if self.policies.iter().any(|p| p == "root") {
            errors.push(format!("{at}: Vault: Can not specify \"root\" policy"));
        }
        match self.change_mode.as_str() {
            "" | "noop" | "restart" => {}
            "signal" => {
                if self.change_signal.is_empty() {
                    errors.push(format!(
                        "{at}: Vault: Signal must be specified when using change mode signal"
                    ));
                } else if signal_name(&self.change_signal).is_none() {
                    errors.push(format!(
                        "{at}: Vault: unknown change_signal {:?}",
                        self.change_signal
                    ));
                }
            }
            other => errors.push(format!("{at}: Vault: Invalid change mode {other:?}")),
        }
    }

    /// The attribute a node has when it reaches this block's Vault cluster.
    fn constraint(&self) -> Constraint {
        let target = match self.cluster.as_str() {
            "" | DEFAULT_CLUSTER => "${attr.vault.version}".to_owned(),
            cluster => format!("${{attr.vault.{cluster}.version}}"),
        };
        Constraint::new(&target, "semver", VAULT_MIN_VERSION)
    }
}

/// The constraint Nomad adds for a Consul service (default cluster).
fn consul_constraint() -> Constraint {
    Constraint::new("${attr.consul.version}", "semver", CONSUL_MIN_VERSION)
}

/// Adds `implied` to `constraints` unless one there already constrains its attribute (so a
/// job's own constraint on it wins, as in Nomad).
fn imply(constraints: &mut Vec<Constraint>, implied: Constraint) {
    if !constraints.iter().any(|c| c.l_target == implied.l_target) {
        constraints.push(implied);
    }
}

/// Adds Nomad's implied constraints for Vault and Consul, as its servers do when a job is
/// registered or planned: a group with a task that has a `vault` block is constrained to
/// nodes with that Vault; a group's Consul services constrain the group, a task's constrain
/// the task. Idempotent.
pub fn imply_integration_constraints(job: &mut Job) {
    let needs = job.task_groups.iter().any(|g| {
        g.services.iter().any(|s| s.is_consul())
            || g.tasks
                .iter()
                .any(|t| t.vault.is_some() || t.services.iter().any(|s| s.is_consul()))
    });
    if !needs {
        return;
    }
    for group in job.task_groups_mut() {
        let vaults: Vec<Constraint> = group
            .tasks
            .iter()
            .filter_map(|t| t.vault.as_ref().map(Vault::constraint))
            .collect();
        for c in vaults {
            imply(&mut group.constraints, c);
        }
        if group.services.iter().any(|s| s.is_consul()) {
            imply(&mut group.constraints, consul_constraint());
        }
        for task in &mut group.tasks {
            if task.services.iter().any(|s| s.is_consul()) {
                imply(&mut task.constraints, consul_constraint());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn job(value: serde_json::Value) -> Job {
        let mut job: Job = serde_json::from_value(value).unwrap();
        job.canonicalize();
        job
    }

    fn targets(constraints: &[Constraint]) -> Vec<String> {
        constraints
            .iter()
            .map(|c| format!("{} {} {}", c.l_target, c.operand, c.r_target))
            .collect()
    }

    #[test]
    fn vault_and_consul_constrain_their_group_or_task_as_nomad_does() {
        let mut j = job(json!({
            "ID": "app",
            "TaskGroups": [{
                "Name": "web",
                "Services": [{ "Name": "web", "PortLabel": "8080" }],
                "Tasks": [
                    { "Name": "api", "Driver": "docker",
                      "Vault": { "Role": "api" },
                      "Services": [{ "PortLabel": "8081" }] },
                    { "Name": "side", "Driver": "docker",
                      "Vault": { "Cluster": "infra" },
                      "Services": [{ "Name": "own", "Provider": "nomad", "PortLabel": "8082" }] }
                ]
            }, {
                "Name": "plain",
                "Tasks": [{ "Name": "t", "Driver": "raw_exec" }]
            }]
        }));
        // Nomad's API defaults: Consul is the default provider; a nameless task service is
        // named after job, group and task.
        let api = &j.task_groups[0].tasks[0];
        assert_eq!(api.services[0].name, "app-web-api");
        assert!(api.services[0].is_consul());
        assert!(j.task_groups[0].services[0].is_consul());
        let vault = api.vault.as_ref().unwrap();
        assert_eq!(
            (
                vault.cluster.as_str(),
                vault.env,
                vault.change_mode.as_str()
            ),
            ("default", Some(true), "restart")
        );
        j.validate().unwrap();

        imply_integration_constraints(&mut j);
        let once = j.clone();
        imply_integration_constraints(&mut j);
        assert_eq!(j, once, "idempotent");
        let web = &j.task_groups[0];
        assert_eq!(
            targets(&web.constraints),
            [
                "${attr.vault.version} semver >= 0.6.1",
                "${attr.vault.infra.version} semver >= 0.6.1",
                "${attr.consul.version} semver >= 1.8.0",
            ]
        );
        assert_eq!(
            targets(&web.tasks[0].constraints),
            ["${attr.consul.version} semver >= 1.8.0"]
        );
        assert!(
            web.tasks[1].constraints.is_empty(),
            "a nomad service needs no Consul"
        );
        assert!(j.task_groups[1].constraints.is_empty());
    }

    #[test]
    fn a_constraint_of_the_job_on_the_same_attribute_wins() {
        let mut j = job(json!({
            "ID": "app",
            "TaskGroups": [{
                "Name": "g",
                "Constraints": [{ "LTarget": "${attr.vault.version}", "RTarget": ">= 1.15.0",
                                  "Operand": "semver" }],
                "Tasks": [{ "Name": "t", "Driver": "exec", "Vault": {} }]
            }]
        }));
        imply_integration_constraints(&mut j);
        assert_eq!(
            targets(&j.task_groups[0].constraints),
            ["${attr.vault.version} semver >= 1.15.0"]
        );
    }

    #[test]
    fn vault_blocks_and_providers_are_checked_as_nomad_checks_them() {
        let j = job(json!({
            "ID": "app",
            "TaskGroups": [{
                "Name": "g",
                "Services": [{ "Name": "s", "Provider": "etcd" }],
                "Tasks": [
                    { "Name": "a", "Driver": "exec",
                      "Vault": { "Policies": ["root"], "ChangeMode": "signal", "ChangeSignal": "SIGNOPE" } },
                    { "Name": "b", "Driver": "some-plugin-driver",
                      "Vault": { "ChangeMode": "reload" } }
                ]
            }]
        }));
        let errors = j.validate().unwrap_err().to_string();
        for want in [
            "Can not specify \"root\" policy",
            "unknown change_signal \"SIGNOPE\"",
            "Invalid change mode \"reload\"",
            "Service provider must be \"consul\", or \"nomad\"; not \"etcd\"",
        ] {
            assert!(errors.contains(want), "{want} in {errors}");
        }
        // A driver no teamster node has is accepted, as Nomad accepts a plugin's name.
        assert!(!errors.contains("driver"), "{errors}");
    }
}
