//! What a job asks of an integration a teamster cluster does not have: Consul services; and
//! what a bridge-mode group asks of its node: the CNI plugins (Nomad's implied constraints
//! on `${attr.plugins.cni.version.<plugin>}`, which a client advertises only where it can
//! use them).
//! Nomad accepts a job with a Consul service (a service without `provider`, Nomad's default,
//! or with `provider = "consul"`) and leaves it pending until a client fingerprints Consul:
//! its servers add an implied constraint on `${attr.consul.version}`, and the scheduler
//! reports every node filtered by it. teamster does the same
//! ([`imply_integration_constraints`]); no teamster node fingerprints Consul, so such a job
//! stays pending with Nomad's placement failure, and nothing is registered anywhere. A
//! Connect service is a Consul service; a group's or task's `consul.partition` adds
//! `${attr.consul.partition}` (see [`crate::model::connect`]).
//!
//! (Vault is not like that: Nomad refuses a job with a `vault` block when its servers have
//! no Vault configured, and so does teamster, with Nomad's message, in
//! `jobspec::unsupported`.)

use crate::model::connect::{Consul, ConsulConnect};
use crate::model::job::{Constraint, Job};

/// The version a node's Consul agent must have for service registration.
const CONSUL_MIN_VERSION: &str = ">= 1.8.0";

/// The constraint Nomad adds for a Consul service (default cluster).
fn consul_constraint() -> Constraint {
    Constraint::new("${attr.consul.version}", "semver", CONSUL_MIN_VERSION)
}

/// The constraint Nomad adds for a `consul.partition` (default cluster).
fn partition_constraint(partition: &str) -> Constraint {
    Constraint::new("${attr.consul.partition}", "=", partition)
}

/// Adds `implied` to `constraints` unless one there already constrains its attribute (so a
/// job's own constraint on it wins, as in Nomad).
fn imply(constraints: &mut Vec<Constraint>, implied: Constraint) {
    if !constraints.iter().any(|c| c.l_target == implied.l_target) {
        constraints.push(implied);
    }
}

/// The CNI plugins a node needs for a group in bridge mode (Nomad's list).
const BRIDGE_PLUGINS: [&str; 5] = ["bridge", "firewall", "host-local", "loopback", "portmap"];

/// The constraint Nomad adds for each plugin of a bridge group.
fn cni_constraint(plugin: &str) -> Constraint {
    Constraint::new(
        &format!("${{attr.plugins.cni.version.{plugin}}}"),
        "semver",
        ">= 0.4.0",
    )
}

/// Adds Nomad's implied constraints, as its servers do when a job is registered or planned:
/// a group's Consul services constrain the group, a task's constrain the task; a group in
/// bridge network mode needs the CNI plugins it runs. Idempotent.
pub fn imply_integration_constraints(job: &mut Job) {
    let bridge = |g: &crate::model::job::TaskGroup| {
        g.network_mode() == crate::model::job::NETWORK_MODE_BRIDGE
    };
    let partition = |c: &Option<Consul>| {
        c.as_ref()
            .map(|c| c.partition.clone())
            .filter(|p| !p.is_empty())
    };
    let needs = job.task_groups.iter().any(|g| {
        bridge(g)
            || partition(&g.consul).is_some()
            || g.services.iter().any(|s| s.is_consul())
            || g.tasks
                .iter()
                .any(|t| partition(&t.consul).is_some() || t.services.iter().any(|s| s.is_consul()))
    });
    if !needs {
        return;
    }
    // Nomad's order (its Consul hook, then its implied constraints): the partition, the
    // Consul version, the CNI plugins. The first a node fails is the reason shown.
    for group in job.task_groups_mut() {
        if let Some(p) = partition(&group.consul) {
            imply(&mut group.constraints, partition_constraint(&p));
        }
        for task in &mut group.tasks {
            if let Some(p) = partition(&task.consul) {
                imply(&mut task.constraints, partition_constraint(&p));
            }
        }
        if group.services.iter().any(|s| s.is_consul()) {
            imply(&mut group.constraints, consul_constraint());
        }
        for task in &mut group.tasks {
            if task.services.iter().any(|s| s.is_consul()) {
                imply(&mut task.constraints, consul_constraint());
            }
        }
        // A group of only a gateway: Nomad's gateway task carries these, which no group
        // constraint lifts; here the group holds them whatever else it says, so such a
        // group is never placed without Consul.
        let gateway = group
            .services
            .iter()
            .any(|s| s.connect.as_ref().is_some_and(|c| c.is_gateway()));
        if group.tasks.is_empty() && gateway {
            for c in [
                consul_constraint(),
                Constraint::new("${attr.consul.grpc}", ">", "0"),
            ] {
                if !group.constraints.contains(&c) {
                    group.constraints.push(c);
                }
            }
        }
        if bridge(group) {
            for plugin in BRIDGE_PLUGINS {
                imply(&mut group.constraints, cni_constraint(plugin));
            }
        }
        // A transparent proxy needs Consul's CNI plugin and a Nomad 1.8 client.
        let transparent = group.services.iter().any(|s| {
            s.connect
                .as_ref()
                .is_some_and(ConsulConnect::has_transparent_proxy)
        });
        if transparent {
            imply(
                &mut group.constraints,
                Constraint::new(
                    "${attr.plugins.cni.version.consul-cni}",
                    "semver",
                    ">= 1.4.2",
                ),
            );
            imply(
                &mut group.constraints,
                Constraint::new("${attr.nomad.version}", "semver", ">= 1.8.0-dev"),
            );
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
    fn a_consul_partition_constrains_its_group_or_task_and_connect_needs_consul() {
        let mut j = job(json!({
            "ID": "app",
            "TaskGroups": [{
                "Name": "api",
                "Consul": { "Partition": "billing" },
                "Networks": [{ "Mode": "bridge" }],
                "Services": [{ "Name": "count-api", "PortLabel": "9001",
                               "Connect": { "SidecarService": {} } }],
                "Tasks": [{ "Name": "web", "Driver": "docker",
                            "Consul": { "Partition": "billing" } }]
            }]
        }));
        j.validate().unwrap();
        imply_integration_constraints(&mut j);
        let group = targets(&j.task_groups[0].constraints);
        // Nomad's order: the partition, Consul, the CNI plugins.
        assert_eq!(
            group[..3],
            [
                "${attr.consul.partition} = billing",
                "${attr.consul.version} semver >= 1.8.0",
                "${attr.plugins.cni.version.bridge} semver >= 0.4.0"
            ]
        );
        assert_eq!(
            targets(&j.task_groups[0].tasks[0].constraints),
            ["${attr.consul.partition} = billing"]
        );
        assert_eq!(j.task_groups[0].consul.as_ref().unwrap().cluster, "default");
    }

    #[test]
    fn a_gateway_alone_in_its_group_keeps_its_consul_constraints_whatever_the_group_says() {
        let mut j = job(json!({
            "ID": "gw",
            "TaskGroups": [{
                "Name": "ingress",
                "Networks": [{ "Mode": "host" }],
                "Constraints": [{ "LTarget": "${attr.consul.version}", "Operand": "is_not_set" }],
                "Services": [{ "Name": "in", "PortLabel": "8080", "Connect": { "Gateway": {
                    "Ingress": { "Listeners": [{ "Port": 8080, "Services": [{ "Name": "web" }] }] }
                } } }],
                "Tasks": []
            }]
        }));
        j.validate().unwrap();
        imply_integration_constraints(&mut j);
        imply_integration_constraints(&mut j);
        assert_eq!(
            targets(&j.task_groups[0].constraints),
            [
                "${attr.consul.version} is_not_set ",
                "${attr.consul.version} semver >= 1.8.0",
                "${attr.consul.grpc} > 0"
            ]
        );
    }

    #[test]
    fn a_transparent_proxy_needs_consul_s_cni_plugin_after_the_bridge_s() {
        let mut j = job(json!({
            "ID": "tp",
            "TaskGroups": [{
                "Name": "api",
                "Networks": [{ "Mode": "bridge" }],
                "Services": [{ "Name": "api", "PortLabel": "9001", "Connect": {
                    "SidecarService": { "Proxy": { "TransparentProxy": {} } } } }],
                "Tasks": [{ "Name": "t", "Driver": "docker", "Config": { "image": "x" } }]
            }]
        }));
        j.validate().unwrap();
        imply_integration_constraints(&mut j);
        let all = targets(&j.task_groups[0].constraints);
        assert_eq!(
            all[all.len() - 2..],
            [
                "${attr.plugins.cni.version.consul-cni} semver >= 1.4.2",
                "${attr.nomad.version} semver >= 1.8.0-dev"
            ]
        );
        assert_eq!(all[0], "${attr.consul.version} semver >= 1.8.0");
    }

    #[test]
    fn a_bridge_group_needs_the_cni_plugins_as_in_nomad() {
        let mut j = job(json!({
            "ID": "app",
            "TaskGroups": [
                { "Name": "b", "Networks": [{ "Mode": "bridge" }],
                  "Constraints": [{ "LTarget": "${attr.plugins.cni.version.bridge}",
                                    "RTarget": ">= 1.0.0", "Operand": "semver" }],
                  "Tasks": [{ "Name": "t", "Driver": "raw_exec" }] },
                { "Name": "h", "Networks": [{ "Mode": "host" }],
                  "Tasks": [{ "Name": "t", "Driver": "raw_exec" }] }
            ]
        }));
        imply_integration_constraints(&mut j);
        imply_integration_constraints(&mut j);
        // The group's own constraint on one plugin wins; the others are added once.
        assert_eq!(
            targets(&j.task_groups[0].constraints),
            [
                "${attr.plugins.cni.version.bridge} semver >= 1.0.0",
                "${attr.plugins.cni.version.firewall} semver >= 0.4.0",
                "${attr.plugins.cni.version.host-local} semver >= 0.4.0",
                "${attr.plugins.cni.version.loopback} semver >= 0.4.0",
                "${attr.plugins.cni.version.portmap} semver >= 0.4.0",
            ]
        );
        assert!(j.task_groups[1].constraints.is_empty());
    }

    #[test]
    fn bridge_mode_is_checked_with_its_drivers_and_address_modes() {
        let group = |mode: &str, driver: &str, address_mode: &str| {
            json!({
                "ID": "app",
                "TaskGroups": [{
                    "Name": "g",
                    "Networks": [{ "Mode": mode, "DynamicPorts": [{ "Label": "http", "To": 80 }] }],
                    "Services": [{ "Name": "web", "PortLabel": "http", "Provider": "nomad",
                                   "AddressMode": address_mode }],
                    "Tasks": [{ "Name": "t", "Driver": driver,
                                "Config": { "image": "x", "command": "x" } }]
                }]
            })
        };
        job(group("bridge", "raw_exec", "alloc"))
            .validate()
            .unwrap();
        job(group("bridge", "exec", "auto")).validate().unwrap();
        job(group("bridge", "docker", "")).validate().unwrap();
        // A docker task joins the allocation's namespace: no network mode of its own; its
        // `ports` name group ports (the group's network publishes them).
        let mut j = group("bridge", "docker", "");
        j["TaskGroups"][0]["Tasks"][0]["Config"]["network_mode"] = json!("host");
        let e = job(j).validate().unwrap_err().to_string();
        assert!(e.contains("task \"t\": network_mode cannot be set"), "{e}");
        let mut j = group("cni/mine", "docker", "alloc");
        j["TaskGroups"][0]["Tasks"][0]["Config"]["ports"] = json!(["http"]);
        job(j).validate().unwrap();
        let e = job(group("host", "raw_exec", "alloc"))
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("address_mode \"alloc\" needs the group's network"),
            "{e}"
        );
        let e = job(group("cni/", "raw_exec", ""))
            .validate()
            .unwrap_err()
            .to_string();
        assert!(e.contains("network mode \"cni/\" is not supported"), "{e}");
        // Only bridge mode needs the bridge plugins.
        let mut j = job(group("cni/mine", "exec", ""));
        imply_integration_constraints(&mut j);
        assert!(j.task_groups[0].constraints.is_empty());
    }

    #[test]
    fn consul_services_constrain_their_group_or_task_as_nomad_does() {
        let mut j = job(json!({
            "ID": "app",
            "TaskGroups": [{
                "Name": "web",
                "Services": [{ "Name": "web", "PortLabel": "8080" }],
                "Tasks": [
                    { "Name": "api", "Driver": "docker",
                      "Services": [{ "PortLabel": "8081" }] },
                    { "Name": "side", "Driver": "docker" }
                ]
            }, {
                "Name": "native",
                "Tasks": [{ "Name": "t", "Driver": "raw_exec",
                            "Services": [{ "Name": "own", "Provider": "nomad",
                                           "PortLabel": "8082" }] }]
            }]
        }));
        // Nomad's API defaults: Consul is the default provider; a nameless task service is
        // named after job, group and task.
        let api = &j.task_groups[0].tasks[0];
        assert_eq!(api.services[0].name, "app-web-api");
        assert!(api.services[0].is_consul());
        assert!(j.task_groups[0].services[0].is_consul());
        j.validate().unwrap();

        imply_integration_constraints(&mut j);
        let once = j.clone();
        imply_integration_constraints(&mut j);
        assert_eq!(j, once, "idempotent");
        let web = &j.task_groups[0];
        assert_eq!(
            targets(&web.constraints),
            ["${attr.consul.version} semver >= 1.8.0"]
        );
        assert_eq!(
            targets(&web.tasks[0].constraints),
            ["${attr.consul.version} semver >= 1.8.0"]
        );
        assert!(web.tasks[1].constraints.is_empty(), "no service, no Consul");
        let native = &j.task_groups[1];
        assert!(native.constraints.is_empty() && native.tasks[0].constraints.is_empty());
    }

    #[test]
    fn a_constraint_of_the_job_on_the_same_attribute_wins() {
        let mut j = job(json!({
            "ID": "app",
            "TaskGroups": [{
                "Name": "g",
                "Constraints": [{ "LTarget": "${attr.consul.version}", "RTarget": ">= 1.15.0",
                                  "Operand": "semver" }],
                "Services": [{ "Name": "s" }],
                "Tasks": [{ "Name": "t", "Driver": "exec" }]
            }]
        }));
        imply_integration_constraints(&mut j);
        assert_eq!(
            targets(&j.task_groups[0].constraints),
            ["${attr.consul.version} semver >= 1.15.0"]
        );
    }

    #[test]
    fn providers_are_checked_as_nomad_checks_them() {
        let j = job(json!({
            "ID": "app",
            "TaskGroups": [{
                "Name": "g",
                "Services": [{ "Name": "s", "Provider": "etcd" }],
                "Tasks": [{ "Name": "b", "Driver": "some-plugin-driver" }]
            }, {
                "Name": "mixed",
                "Services": [{ "Name": "a", "Provider": "nomad" }],
                "Tasks": [{ "Name": "t", "Driver": "raw_exec", "Services": [{ "Name": "b" }] }]
            }]
        }));
        let errors = j.validate().unwrap_err().to_string();
        for want in [
            "Service provider must be \"consul\", or \"nomad\"; not \"etcd\"",
            "task group \"mixed\": Multiple service providers used: task group services must \
             use the same provider",
        ] {
            assert!(errors.contains(want), "{want} in {errors}");
        }
        // A driver no teamster node has is accepted, as Nomad accepts a plugin's name.
        assert!(!errors.contains("driver"), "{errors}");
    }
}
