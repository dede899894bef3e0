//! The Nomad job fields teamster stores nothing for and does not act on. A job that sets one
//! is refused (`POST /v1/jobs` answers 400 naming every such field; `/v1/validate/job` lists
//! them): a canary update that silently replaced every allocation would look like success
//! while doing something else. (`Update` and `Migrate` are acted on: deployments and drains.)
//!
//! "Sets" means: an object (a block) that is present, even empty (`"Update": {}` turns
//! rolling updates on in Nomad); a scalar that is not its zero value (`false`, `0`, `""`); a
//! non-empty array. `null` and absent keys are unset, since clients send every field of
//! their own struct. Keys no Nomad version knows are not listed here: the model ignores them,
//! as Nomad does.

use serde_json::Value;

/// Fields of `Job` teamster does not implement.
pub(super) const JOB: &[&str] = &[
    "Multiregion",
    "ConsulToken",
    "ConsulNamespace",
    "VaultToken",
    "VaultNamespace",
    "VersionTag",
    "Secrets",
];

/// Fields of a group's network teamster does not implement (ports, in host and bridge mode,
/// are acted on; the mode, labels and host networks are checked by the job's validation).
pub(super) const NETWORK: &[&str] = &["Device", "CIDR", "IP", "MBits"];

/// Fields of a `service` (group or task) teamster does not implement: it registers services
/// itself (`provider = "nomad"`, checked by the job's validation) and runs `http` and `tcp`
/// checks.
pub(super) const SERVICE: &[&str] = &["Cluster", "Identity", "Weights"];

/// Fields of a `TaskGroup` teamster does not implement: none today (its `consul` block is
/// kept, see `model::connect`).
pub(super) const GROUP: &[&str] = &[];

/// Fields of a service's `check` teamster does not implement: the address modes other than
/// the service's. (Script and gRPC checks and Consul's
/// thresholds and TLS settings are kept with a Consul service, and refused by the job's
/// validation for a native one, with Nomad's words.)
pub(super) const CHECK: &[&str] = &["AddressMode", "Advertise"];

/// Fields of a network's port teamster does not implement.
pub(super) const PORT: &[&str] = &["HostNetwork", "IgnoreCollision"];

/// Fields of a `Task` teamster does not implement.
pub(super) const TASK: &[&str] = &[
    "Vault",
    "CSIPluginConfig",
    "Kind",
    "ScalingPolicies",
    "Schedule",
    "Secrets",
];

/// Fields of a task's `identity` teamster does not implement: identities for Consul
/// services and extra claims.
pub(super) const IDENTITY: &[&str] = &["ServiceName", "ExtraClaims"];

/// Fields of a task's `logs` teamster does not implement: Nomad's deprecated `enabled`
/// (`disabled` is acted on).
pub(super) const LOGS: &[&str] = &["Enabled"];

/// Values that ask for what teamster does anyway, so they count as unset: ports are on the
/// default host network, and services are in the default (only) cluster.
const SAME_AS_TEAMSTER: &[(&str, &str)] = &[("HostNetwork", "default"), ("Cluster", "default")];

/// Fields of a task's `Resources` teamster does not implement.
pub(super) const RESOURCES: &[&str] = &["Networks", "Devices", "NUMA", "SecretsMB"];

/// The warnings for fields teamster accepts, as Nomad does, without acting on them: the
/// `update` block's `Stagger` (Nomad validates it and paces nothing by it either: health and
/// `max_parallel` pace service and system deployments alike); and for
/// the deprecated group `max_client_disconnect`, `stop_after_client_disconnect` and
/// `prevent_reschedule_on_lost`, which are acted on as `disconnect.lost_after`,
/// `disconnect.stop_on_client_after` and `disconnect.replace = false`.
/// Nomad's `JobRegisterResponse.Warnings` carries them.
pub fn job_warnings(job: &Value) -> Vec<String> {
    let mut found = Vec::new();
    let stagger = |v: &Value| {
        v.get("Update")
            .and_then(|u| u.get("Stagger"))
            .is_some_and(is_set)
    };
    if stagger(job) {
        found.push(STAGGER_WARNING.replace("{at}", "job → Update"));
    }
    let groups = job.get("TaskGroups").and_then(Value::as_array);
    for (i, group) in groups.into_iter().flatten().enumerate() {
        let name = match group.get("Name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => format!("{n:?}"),
            _ => format!("#{i}"),
        };
        if stagger(group) {
            found.push(STAGGER_WARNING.replace("{at}", &format!("job → group {name} → Update")));
        }
        if group.get("MaxClientDisconnect").is_some_and(is_set) {
            let taken = if group.get("Disconnect").is_some_and(is_set) {
                "the group's disconnect block is used instead"
            } else {
                "it is used as disconnect.lost_after"
            };
            found.push(format!(
                "job → group {name}: max_client_disconnect is deprecated; {taken}"
            ));
        }
        if group.get("StopAfterClientDisconnect").is_some_and(is_set) {
            let own = group
                .get("Disconnect")
                .and_then(|d| d.get("StopOnClientAfter"))
                .is_some_and(is_set);
            let taken = if own {
                "the group's disconnect.stop_on_client_after is used instead"
            } else {
                "it is used as disconnect.stop_on_client_after"
            };
            found.push(format!(
                "job → group {name}: stop_after_client_disconnect is deprecated; {taken}"
            ));
        }
        if group.get("PreventRescheduleOnLost").is_some_and(is_set) {
            let replace = group.get("Disconnect").and_then(|d| d.get("Replace"));
            let taken = if replace.is_some_and(|r| !r.is_null()) {
                "the group's disconnect.replace is used instead"
            } else if matches!(
                job.get("Type").and_then(Value::as_str),
                Some("system" | "sysbatch")
            ) {
                "it changes nothing: a system or sysbatch job's allocations are never rescheduled"
            } else {
                "it is used as disconnect.replace = false"
            };
            found.push(format!(
                "job → group {name}: prevent_reschedule_on_lost is deprecated; {taken}"
            ));
        }
    }
    found
}

const STAGGER_WARNING: &str =
    "{at}: Stagger is accepted as Nomad accepts it and paces nothing; max_parallel and health pace a deployment";

/// One field a job sets that teamster does not act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsupportedField {
    /// Where it is: `job`, `group "web"`, `group "web" task "api"`, with `resources` for a
    /// task's resources.
    pub path: String,
    /// Nomad's JSON name of the field.
    pub field: &'static str,
    /// Why, when it is more than "not supported yet".
    pub reason: Option<String>,
}

impl std::fmt::Display for UnsupportedField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let reason = self
            .reason
            .as_deref()
            .unwrap_or("teamster does not support this field yet; remove it");
        write!(f, "{} → {}: {reason}", self.path, self.field)
    }
}

/// Why `field`, set to `value`, is refused, when Nomad itself would refuse it on a cluster
/// like this one: a task's `vault` block on servers without Vault (Nomad's admission check,
/// word for word).
fn reason_for(field: &str, value: &Value) -> Option<String> {
    match field {
        "Vault" => {
            let cluster = value
                .get("Cluster")
                .and_then(Value::as_str)
                .filter(|c| !c.is_empty())
                .unwrap_or("default");
            Some(format!(
                "Vault {cluster:?} not enabled but used in the job (teamster's servers have no \
                 Vault)"
            ))
        }
        _ => None,
    }
}

/// Every field of Nomad's job schema that `job` (the JSON of a `Job`, without the
/// `{"Job": …}` wrapper) sets and teamster does not act on, in document order.
pub fn unsupported_fields(job: &Value) -> Vec<UnsupportedField> {
    let mut found = Vec::new();
    let name = |v: &Value, i: usize| match v.get("Name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => format!("{n:?}"),
        _ => format!("#{i}"),
    };
    check(job, JOB, "job", &mut found);
    let groups = job.get("TaskGroups").and_then(Value::as_array);
    for (gi, group) in groups.into_iter().flatten().enumerate() {
        let gpath = format!("job → group {}", name(group, gi));
        check(group, GROUP, &gpath, &mut found);
        check_services(group, &gpath, &mut found);
        let networks = group.get("Networks").and_then(Value::as_array);
        for (ni, network) in networks.into_iter().flatten().enumerate() {
            let npath = format!("{gpath} → network #{ni}");
            check(network, NETWORK, &npath, &mut found);
            for kind in ["ReservedPorts", "DynamicPorts"] {
                let ports = network.get(kind).and_then(Value::as_array);
                for (pi, port) in ports.into_iter().flatten().enumerate() {
                    let label = match port.get("Label").and_then(Value::as_str) {
                        Some(l) if !l.is_empty() => format!("{l:?}"),
                        _ => format!("#{pi}"),
                    };
                    check(port, PORT, &format!("{npath} → port {label}"), &mut found);
                }
            }
        }
        let tasks = group.get("Tasks").and_then(Value::as_array);
        for (ti, task) in tasks.into_iter().flatten().enumerate() {
            let tpath = format!("{gpath} → task {}", name(task, ti));
            check(task, TASK, &tpath, &mut found);
            check_services(task, &tpath, &mut found);
            if let Some(block) = task.get("LogConfig") {
                check(block, LOGS, &format!("{tpath} → LogConfig"), &mut found);
            }
            if let Some(resources) = task.get("Resources") {
                check(
                    resources,
                    RESOURCES,
                    &format!("{tpath} → Resources"),
                    &mut found,
                );
            }
            if let Some(identity) = task.get("Identity") {
                check(
                    identity,
                    IDENTITY,
                    &format!("{tpath} → Identity"),
                    &mut found,
                );
            }
            let identities = task.get("Identities").and_then(Value::as_array);
            for (ii, identity) in identities.into_iter().flatten().enumerate() {
                let ipath = format!("{tpath} → identity {}", name(identity, ii));
                check(identity, IDENTITY, &ipath, &mut found);
            }
        }
    }
    found
}

/// The fields each of `owner`'s `Services` sets that teamster does not act on.
fn check_services(owner: &Value, path: &str, out: &mut Vec<UnsupportedField>) {
    let services = owner.get("Services").and_then(Value::as_array);
    for (i, service) in services.into_iter().flatten().enumerate() {
        let name = match service.get("Name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() => format!("{n:?}"),
            _ => format!("#{i}"),
        };
        // A Consul service (Nomad's default provider) is accepted: it keeps its job pending
        // on nodes without Consul (`model::integrations`); its fields are refused as a
        // native service's are.
        let spath = format!("{path} → service {name}");
        check(service, SERVICE, &spath, out);
        let checks = service.get("Checks").and_then(Value::as_array);
        for (j, c) in checks.into_iter().flatten().enumerate() {
            let cname = match c.get("Name").and_then(Value::as_str) {
                Some(n) if !n.is_empty() => format!("{n:?}"),
                _ => format!("#{j}"),
            };
            let cpath = format!("{spath} → check {cname}");
            check(c, CHECK, &cpath, out);
        }
    }
}

fn check(object: &Value, fields: &[&'static str], path: &str, out: &mut Vec<UnsupportedField>) {
    for &field in fields {
        let value = object.get(field);
        let what_teamster_does = SAME_AS_TEAMSTER
            .iter()
            .any(|(f, same)| *f == field && value.and_then(Value::as_str) == Some(*same));
        if let Some(value) = value.filter(|v| is_set(v) && !what_teamster_does) {
            out.push(UnsupportedField {
                path: path.to_string(),
                field,
                reason: reason_for(field, value),
            });
        }
    }
}

/// Whether a field's value asks for something (see the module's doc).
fn is_set(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(job: Value) -> Vec<String> {
        unsupported_fields(&job)
            .iter()
            .map(|u| format!("{}: {}", u.path, u.field))
            .collect()
    }

    #[test]
    fn every_level_is_checked_and_named() {
        let job = json!({
            "ID": "web",
            "Multiregion": { "Regions": [] },
            "VersionTag": { "Name": "v1" },
            "TaskGroups": [{
                "Name": "api",
                "Update": { "Canary": 1 },
                "Networks": [{ "MBits": 10, "DynamicPorts": [{ "Label": "http" }],
                               "ReservedPorts": [{ "Label": "db", "Value": 5432,
                                                   "IgnoreCollision": true }] }],
                "Tasks": [
                    { "Name": "server", "Services": [
                        { "Name": "web", "Provider": "nomad",
                          "Checks": [{ "Type": "http", "Advertise": "10.0.0.1" }] },
                        { "Name": "legacy", "Cluster": "default", "OnUpdate": "require_healthy" },
                        { "Name": "elsewhere", "Cluster": "dc2-consul" }
                      ],
                      "Resources": { "CPU": 100, "MemoryMB": 64, "MemoryMaxMB": 128, "Cores": 2,
                                     "Devices": [{ "Name": "nvidia/gpu" }] } },
                    { "Vault": { "Policies": ["x"] } }
                ]
            }]
        });
        assert_eq!(
            fields(job),
            [
                "job: Multiregion",
                "job: VersionTag",
                "job → group \"api\" → network #0: MBits",
                "job → group \"api\" → network #0 → port \"db\": IgnoreCollision",
                "job → group \"api\" → task \"server\" → service \"web\" → check #0: Advertise",
                "job → group \"api\" → task \"server\" → service \"elsewhere\": Cluster",
                "job → group \"api\" → task \"server\" → Resources: Devices",
                "job → group \"api\" → task #1: Vault",
            ]
        );
    }

    #[test]
    fn nulls_zero_values_and_empty_lists_are_unset_but_an_empty_block_is_set() {
        let job = json!({
            "ID": "quiet",
            "Multiregion": null,
            "Update": null,
            "VaultToken": "",
            "TaskGroups": [{
                "Name": "g",
                "Networks": [],
                "ShutdownDelay": 0,
                "Services": null,
                "Tasks": [{ "Name": "t", "Resources": { "CPU": 10, "Cores": 0 },
                            "Leader": false, "User": "", "KillSignal": "SIGTERM" }]
            }]
        });
        assert!(fields(job).is_empty());
        assert_eq!(fields(json!({ "Multiregion": {} })), ["job: Multiregion"]);
        assert_eq!(
            fields(json!({ "AllAtOnce": true, "Multiregion": {} })),
            ["job: Multiregion"]
        );
        // A group's `consul` block and a service's `connect` are kept (the job waits for
        // Consul; a task service's `connect` is refused by the job's validation).
        let restart = json!({ "TaskGroups": [{ "Name": "g", "Consul": {},
            "Services": [{ "Name": "s", "Connect": { "SidecarService": {} } }],
            "Tasks": [{ "Name": "t", "Consul": { "Namespace": "apple" },
                        "Services": [{ "Name": "u", "Connect": { "Native": true } }] }],
            "RestartPolicy": { "Attempts": 1, "RenderTemplates": true } }] });
        assert!(fields(restart).is_empty());
        // The lifetime fields, sticky and migrating disks and a restart's templates are
        // acted on; the deprecated `enabled` is not.
        let task = json!({ "TaskGroups": [{ "Name": "g", "ShutdownDelay": 5,
            "EphemeralDisk": { "SizeMB": 300, "Sticky": true, "Migrate": true },
            "Tasks": [{ "Name": "t", "KillSignal": "SIGINT", "Leader": true, "ShutdownDelay": 5,
                "LogConfig": { "MaxFiles": 2, "Enabled": true },
                "RestartPolicy": { "Attempts": 1, "RenderTemplates": true } }] }] });
        assert_eq!(
            fields(task),
            ["job → group \"g\" → task \"t\" → LogConfig: Enabled"]
        );
    }

    #[test]
    fn service_meta_and_canary_fields_are_kept() {
        let job = json!({ "TaskGroups": [{ "Name": "g", "Services": [{ "Name": "s",
            "Provider": "nomad", "Meta": { "k": "v" }, "CanaryMeta": { "c": "1" },
            "CanaryTags": ["canary"], "TaggedAddresses": { "lan": "10.0.0.1" },
            "EnableTagOverride": true }] }] });
        assert!(fields(job).is_empty());
    }

    #[test]
    fn supported_fields_and_unknown_keys_pass() {
        let job = json!({
            "ID": "fine",
            "Type": "service",
            "Priority": 70,
            "Datacenters": ["dc1"],
            "Constraints": [{ "LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "=" }],
            "Spreads": [{ "Attribute": "${node.datacenter}", "Weight": 50 }],
            "SomethingFromTheFuture": { "x": 1 },
            "Periodic": { "Spec": "*/5 * * * *" },
            "ParameterizedJob": { "Payload": "optional" },
            "TaskGroups": [{
                "Name": "g",
                "Count": 3,
                "RestartPolicy": { "Attempts": 2 },
                "ReschedulePolicy": { "Attempts": 1 },
                "Meta": { "k": "v" },
                "Tasks": [{ "Name": "t", "Driver": "raw_exec", "Config": { "command": "true" },
                            "Env": { "A": "b" }, "KillTimeout": 5000000000i64,
                            "Resources": { "CPU": 10, "MemoryMB": 10, "DiskMB": 5 } }]
            }]
        });
        assert!(fields(job).is_empty());
    }

    #[test]
    fn an_update_stagger_is_accepted_with_a_warning() {
        let job = json!({
            "ID": "web",
            "Update": { "MaxParallel": 2 },
            "TaskGroups": [
                { "Name": "api", "Update": { "Stagger": 30_000_000_000u64 } },
                { "Name": "db", "Update": { "Stagger": null } }
            ]
        });
        assert!(fields(job.clone()).is_empty(), "update is acted on");
        let warnings = job_warnings(&job);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with("job → group \"api\" → Update: Stagger"));
        // A system job's paces nothing either: its deployment goes by health.
        let system = json!({
            "ID": "agent", "Type": "system",
            "Update": { "MaxParallel": 1, "Stagger": 10_000_000_000u64 },
            "TaskGroups": [{ "Name": "agent" }]
        });
        let warnings = job_warnings(&system);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].starts_with("job → Update: Stagger"));
    }
}
