//! Consul's blocks in a job: a group service's `connect` (Consul Connect: a sidecar proxy,
//! a native service or a gateway) and the group's and tasks' `consul` blocks (namespace,
//! cluster, admin partition).
//!
//! Nomad accepts them on a cluster without Consul and the job stays pending: a Connect
//! service is a Consul service, so its group gets the implied `${attr.consul.version}`
//! constraint ([`crate::model::integrations`]), and a `consul.partition` constrains
//! `${attr.consul.partition}`; no teamster node fingerprints Consul. teamster keeps the
//! blocks as they were sent, checks them with Nomad's rules and words, and acts on nothing
//! else: it does not add the proxy and gateway tasks Nomad's servers add to such a group,
//! since no node here could run them.

use serde::{Deserialize, Serialize};

use crate::model::de;
use crate::model::value::ConfigValue;

/// The only Consul cluster Nomad's community edition knows.
pub const CONSUL_DEFAULT_CLUSTER: &str = "default";

/// A group's or a task's `consul` block (Nomad's `Consul`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Consul {
    /// The Consul namespace services and templates use (Consul Enterprise's).
    #[serde(deserialize_with = "de::nullable")]
    pub namespace: String,
    /// The Consul cluster (`default`, filled in on registration).
    #[serde(deserialize_with = "de::nullable")]
    pub cluster: String,
    /// The Consul admin partition the workload must run in: constrains
    /// `${attr.consul.partition}`.
    #[serde(deserialize_with = "de::nullable")]
    pub partition: String,
}

impl Consul {
    /// Nomad's registration defaults: the default cluster.
    pub fn canonicalize(&mut self) {
        if self.cluster.is_empty() {
            self.cluster = CONSUL_DEFAULT_CLUSTER.to_owned();
        }
    }

    /// Nomad's community-edition check (`jobConsulHook`).
    pub fn validate(&self, at: &str, errors: &mut Vec<String>) {
        validate_cluster(at, &self.cluster, errors);
    }
}

/// Nomad's words for a cluster other than the default one.
pub fn validate_cluster(at: &str, cluster: &str, errors: &mut Vec<String>) {
    if !cluster.is_empty() && cluster != CONSUL_DEFAULT_CLUSTER {
        errors.push(format!(
            "{at}: non-default Consul cluster requires Nomad Enterprise"
        ));
    }
}

/// A task's `consul.partition` must be its group's, when both are set.
pub fn validate_task_partition(
    at: &str,
    group: Option<&Consul>,
    task: &Consul,
    errors: &mut Vec<String>,
) {
    let group = group.map(|c| c.partition.as_str()).unwrap_or_default();
    if !task.partition.is_empty() && !group.is_empty() && task.partition != group {
        errors.push(format!(
            "{at}: task.consul.partition {:?} must match group.consul.partition {group:?} if \
             both are set",
            task.partition
        ));
    }
}

/// A service's `connect` block (Nomad's `ConsulConnect`). Its parts are kept as sent, in
/// Nomad's JSON shape.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ConsulConnect {
    /// A Connect-native service: the task speaks Connect itself.
    #[serde(deserialize_with = "de::nullable")]
    pub native: bool,
    /// The gateway this service is (`ingress`, `terminating` or `mesh`, with its proxy).
    pub gateway: Option<ConfigValue>,
    /// The sidecar proxy's service (`port`, `tags`, `proxy { upstreams … }`).
    pub sidecar_service: Option<ConfigValue>,
    /// What to change in the sidecar proxy's task.
    pub sidecar_task: Option<ConfigValue>,
}

/// The kinds of gateway a `gateway` block may hold.
const GATEWAY_KINDS: [&str; 3] = ["Ingress", "Terminating", "Mesh"];

impl ConsulConnect {
    /// Whether the service has a sidecar proxy.
    pub fn has_sidecar(&self) -> bool {
        self.sidecar_service.is_some()
    }

    /// Whether the service is a gateway.
    pub fn is_gateway(&self) -> bool {
        self.gateway.is_some()
    }

    /// Whether the sidecar's proxy is a transparent proxy.
    pub fn has_transparent_proxy(&self) -> bool {
        self.proxy()
            .and_then(|p| field(p, "TransparentProxy"))
            .is_some()
    }

    /// The sidecar's upstreams and transparent proxy, as sent.
    fn proxy(&self) -> Option<&ConfigValue> {
        field(self.sidecar_service.as_ref()?, "Proxy")
    }

    /// Every part the block holds, for the depth check.
    pub fn parts(&self) -> impl Iterator<Item = &ConfigValue> {
        [&self.gateway, &self.sidecar_service, &self.sidecar_task]
            .into_iter()
            .flatten()
    }

    /// Nomad's `ConsulConnect.Validate`: exactly one of a sidecar, native or a gateway; a
    /// gateway of exactly one kind.
    pub fn validate(&self, at: &str, errors: &mut Vec<String>) {
        let count = [self.has_sidecar(), self.native, self.is_gateway()]
            .iter()
            .filter(|b| **b)
            .count();
        if count != 1 {
            errors.push(format!(
                "{at}: Consul Connect must be exclusively native, make use of a sidecar, or \
                 represent a Gateway"
            ));
        }
        if let Some(gateway) = &self.gateway {
            if let Err(e) = validate_gateway(gateway) {
                errors.push(format!("{at}: {e}"));
            }
        }
        for part in self.parts() {
            if part.depth() > crate::model::value::MAX_CONFIG_DEPTH {
                errors.push(format!(
                    "{at}: connect nests deeper than {} levels",
                    crate::model::value::MAX_CONFIG_DEPTH
                ));
            }
        }
    }
}

/// Nomad's `ConsulGateway.Validate`: its proxy, its one configuration (ingress listeners
/// with a port, a protocol and services; terminating services with a name and whole TLS
/// settings). The first problem, in Nomad's words.
fn validate_gateway(gateway: &ConfigValue) -> Result<(), String> {
    if let Some(proxy) = field(gateway, "Proxy") {
        let dns = text(proxy, "EnvoyDNSDiscoveryType");
        if !matches!(dns, "" | "STRICT_DNS" | "LOGICAL_DNS") {
            return Err(
                "Consul Gateway Proxy Envoy DNS Discovery type must be STRICT_DNS or LOGICAL_DNS"
                    .into(),
            );
        }
        if let Some(ConfigValue::Map(binds)) = field(proxy, "EnvoyGatewayBindAddresses") {
            for bind in binds.values() {
                if text(bind, "Address").is_empty() {
                    return Err("Consul Gateway Bind Address must be set".into());
                }
                let port = int(bind, "Port");
                // -1: filled in with a dynamic port by Nomad.
                if port <= 0 && port != -1 {
                    return Err("Consul Gateway Bind Address must set valid Port".into());
                }
            }
        }
    }
    if let Some(ingress) = field(gateway, "Ingress") {
        let listeners = list(ingress, "Listeners");
        if listeners.is_empty() {
            return Err("Consul Ingress Gateway requires at least one listener".into());
        }
        for listener in listeners {
            let port = int(listener, "Port");
            if port <= 0 {
                return Err("Consul Ingress Listener requires valid Port".into());
            }
            // Nomad's API defaults the protocol to tcp.
            let protocol = text(listener, "Protocol");
            if !matches!(protocol, "" | "tcp" | "http" | "http2" | "grpc") {
                return Err(format!(
                    "Consul Ingress Listener requires protocol of tcp, http, http2, grpc, got \
                     {protocol:?}"
                ));
            }
            let services = list(listener, "Services");
            if services.is_empty() {
                return Err("Consul Ingress Listener requires one or more services".into());
            }
            if services.iter().any(|s| text(s, "Name").is_empty()) {
                return Err("Consul Ingress Service requires a name".into());
            }
        }
    }
    if let Some(terminating) = field(gateway, "Terminating") {
        let services = list(terminating, "Services");
        if services.is_empty() {
            return Err("Consul Terminating Gateway requires at least one service".into());
        }
        for service in services {
            let set = |k| !text(service, k).is_empty();
            if !set("Name") {
                return Err("Consul Linked Service requires Name".into());
            }
            let (ca, cert, key, sni) = (set("CAFile"), set("CertFile"), set("KeyFile"), set("SNI"));
            if (cert || key) && !ca {
                return Err("Consul Linked Service TLS requires CAFile".into());
            }
            if cert != key {
                return Err("Consul Linked Service TLS Cert and Key must both be set".into());
            }
            if sni && !ca {
                return Err("Consul Linked Service TLS SNI requires CAFile".into());
            }
        }
    }
    let kinds = GATEWAY_KINDS
        .iter()
        .filter(|k| field(gateway, k).is_some())
        .count();
    if kinds != 1 {
        return Err("One Consul Gateway Configuration must be set".into());
    }
    Ok(())
}

/// The string member `key` of a map value (empty when it is not one).
fn text<'a>(value: &'a ConfigValue, key: &str) -> &'a str {
    field(value, key)
        .and_then(ConfigValue::as_str)
        .unwrap_or_default()
}

/// The whole-number member `key` of a map value (0 when it is not one).
fn int(value: &ConfigValue, key: &str) -> i64 {
    match field(value, key) {
        Some(ConfigValue::Int(n)) => *n,
        _ => 0,
    }
}

/// The list member `key` of a map value (empty when it is not one).
fn list<'a>(value: &'a ConfigValue, key: &str) -> &'a [ConfigValue] {
    match field(value, key) {
        Some(ConfigValue::List(items)) => items,
        _ => &[],
    }
}

/// The member `key` of a map value.
fn field<'a>(value: &'a ConfigValue, key: &str) -> Option<&'a ConfigValue> {
    match value {
        ConfigValue::Map(m) => m.get(key).filter(|v| !matches!(v, ConfigValue::Null)),
        _ => None,
    }
}

/// What the group's Connect checks need to know of it.
pub struct ConnectGroup<'a> {
    /// The group's name.
    pub name: &'a str,
    /// Its network modes (one per `network` block).
    pub network_modes: Vec<&'a str>,
    /// Its tasks' names.
    pub task_names: Vec<&'a str>,
    /// Whether its network has a `dns` block.
    pub has_dns: bool,
    /// Its static ports' labels.
    pub reserved_labels: Vec<&'a str>,
}

/// Nomad's `groupConnectValidate`: a sidecar needs the group's one network in bridge or cni
/// mode and lowercase names; a gateway may also run in host mode; a native service names a
/// task (or the group has one); upstreams do not share a listener; a transparent proxy is
/// the group's only Connect block. `services` are the group's: `(name, task, port, connect)`.
pub fn validate_group_connect(
    at: &str,
    group: &ConnectGroup<'_>,
    services: &[(&str, &str, &str, &ConsulConnect)],
    errors: &mut Vec<String>,
) {
    let mut listeners: Vec<(String, &str)> = Vec::new();
    let mut transparent = false;
    for (name, task, port, connect) in services {
        let name = *name;
        if connect.has_sidecar() {
            network_mode(at, group, "connect sidecar", false, errors);
            // Nomad checks the name once interpolated; one still holding `${…}` is left.
            if !name.contains("${") && name != name.to_lowercase() {
                errors.push(format!(
                    "{at}: Consul Connect service name {name:?} in group {:?} must not contain \
                     uppercase characters",
                    group.name
                ));
            }
            if group.name != group.name.to_lowercase() {
                errors.push(format!(
                    "{at}: Consul Connect group {:?} with service {name:?} must not contain \
                     uppercase characters",
                    group.name
                ));
            }
        } else if connect.native {
            // Nomad infers the task only in a group with a network (its Connect hook skips
            // the others).
            if task.is_empty() && group.network_modes.is_empty() {
                errors.push(format!(
                    "{at}: Service {name} is Connect Native and requires setting the task"
                ));
            } else if task.is_empty() && group.task_names.len() != 1 {
                errors.push(format!(
                    "{at}: task for Consul Connect Native service {}->{name} is ambiguous and \
                     must be set",
                    group.name
                ));
            } else if !task.is_empty() && !group.task_names.contains(task) {
                errors.push(format!(
                    "{at}: task {task} named by Consul Connect Native service {}->{name} does \
                     not exist",
                    group.name
                ));
            }
            if port.is_empty() {
                errors.push(format!(
                    "{at}: Service {name} is Connect Native and requires setting the port"
                ));
            }
        } else if connect.is_gateway() {
            network_mode(at, group, "connect gateway", true, errors);
            let mesh = connect
                .gateway
                .as_ref()
                .and_then(|g| field(g, "Mesh"))
                .is_some();
            if mesh && port.is_empty() {
                errors.push(format!(
                    "{at}: service.port must be set for mesh gateway service"
                ));
            }
        }
        let Some(proxy) = connect.proxy() else {
            continue;
        };
        for upstream in list(proxy, "Upstreams") {
            let listener = match text(upstream, "LocalBindSocketPath") {
                "" => {
                    let port = int(upstream, "LocalBindPort");
                    let address = text(upstream, "LocalBindAddress");
                    if address.contains(':') {
                        format!("[{address}]:{port}")
                    } else {
                        format!("{address}:{port}")
                    }
                }
                path => path.to_owned(),
            };
            if let Some((_, other)) = listeners.iter().find(|(l, _)| *l == listener) {
                errors.push(format!(
                    "{at}: Consul Connect services {name:?} and {other:?} in group {:?} using \
                     same address for upstreams ({listener})",
                    group.name
                ));
            } else {
                listeners.push((listener, name));
            }
        }
        if let Some(tproxy) = field(proxy, "TransparentProxy") {
            transparent = true;
            let no_dns = matches!(field(tproxy, "NoDNS"), Some(ConfigValue::Bool(true)));
            if group.has_dns && !no_dns {
                errors.push(format!(
                    "{at}: Consul Connect transparent proxy cannot be used with network.dns \
                     unless no_dns=true"
                ));
            }
            for port in list(tproxy, "ExcludeInboundPorts")
                .iter()
                .filter_map(ConfigValue::as_str)
            {
                let numeric =
                    port.bytes().all(|b| b.is_ascii_digit()) && port.parse::<u16>().is_ok();
                if !numeric && !group.reserved_labels.contains(&port) {
                    errors.push(format!(
                        "{at}: Consul Connect transparent proxy port {port:?} must be \
                         numeric or one of network.port labels"
                    ));
                }
            }
        }
    }
    if transparent && services.len() > 1 {
        errors.push(format!(
            "{at}: Consul Connect transparent proxy requires there is only one connect block"
        ));
    }
}

/// Nomad's `groupConnectNetworkModeValidate`.
pub fn network_mode(
    at: &str,
    group: &ConnectGroup<'_>,
    prefix: &str,
    allow_host: bool,
    errors: &mut Vec<String>,
) {
    if group.network_modes.len() != 1 {
        errors.push(format!(
            "{at}: {prefix}: must have exactly one network for Consul Connect: group {:?} has \
             {} networks",
            group.name,
            group.network_modes.len()
        ));
        return;
    }
    // As Nomad: a network without a mode is not `host` here.
    let mode = group.network_modes[0];
    if mode == "bridge" || (allow_host && mode == "host") || mode.starts_with("cni/") {
        return;
    }
    let allowed = if allow_host {
        r#""bridge", "host", or "cni/*""#
    } else {
        r#""bridge" or "cni/*""#
    };
    errors.push(format!(
        "{at}: {prefix}: invalid network mode for Consul Connect: group {:?} uses network mode \
         {mode:?}; must be {allowed}",
        group.name
    ));
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn connect(v: serde_json::Value) -> ConsulConnect {
        serde_json::from_value(v).unwrap()
    }

    fn group<'a>(modes: Vec<&'a str>, tasks: Vec<&'a str>) -> ConnectGroup<'a> {
        ConnectGroup {
            name: "api",
            network_modes: modes,
            task_names: tasks,
            has_dns: false,
            reserved_labels: vec![],
        }
    }

    fn errors_of(
        group: &ConnectGroup<'_>,
        services: &[(&str, &str, &str, &ConsulConnect)],
    ) -> Vec<String> {
        let mut errors = Vec::new();
        for (_, _, _, c) in services {
            c.validate("g", &mut errors);
        }
        validate_group_connect("g", group, services, &mut errors);
        errors
    }

    #[test]
    fn a_sidecar_needs_one_bridge_network_and_lowercase_names() {
        let sidecar = connect(json!({ "SidecarService": {} }));
        let ok = errors_of(
            &group(vec!["bridge"], vec!["web"]),
            &[("count-api", "", "9001", &sidecar)],
        );
        assert!(ok.is_empty(), "{ok:?}");
        let host = errors_of(
            &group(vec!["host"], vec!["web"]),
            &[("count-api", "", "", &sidecar)],
        );
        assert_eq!(
            host,
            [
                "g: connect sidecar: invalid network mode for Consul Connect: group \"api\" uses \
              network mode \"host\"; must be \"bridge\" or \"cni/*\""
            ]
        );
        let none = errors_of(
            &group(vec![], vec!["web"]),
            &[("count-api", "", "", &sidecar)],
        );
        assert!(
            none[0].contains("must have exactly one network for Consul Connect"),
            "{none:?}"
        );
        // A name still to be interpolated is checked by nobody here (Nomad: once filled in).
        let later = errors_of(
            &group(vec!["bridge"], vec!["web"]),
            &[("${NOMAD_JOB_NAME}-api", "", "", &sidecar)],
        );
        assert!(later.is_empty(), "{later:?}");
        let upper = errors_of(
            &group(vec!["cni/mesh"], vec!["web"]),
            &[("Count", "", "", &sidecar)],
        );
        assert!(
            upper[0].contains("must not contain uppercase characters"),
            "{upper:?}"
        );
    }

    #[test]
    fn a_connect_block_is_exactly_one_thing() {
        let both = connect(json!({ "Native": true, "SidecarService": {} }));
        let none = connect(json!({}));
        for c in [&both, &none] {
            let errors = errors_of(&group(vec!["bridge"], vec!["web"]), &[("a", "web", "1", c)]);
            assert!(
                errors[0].contains("must be exclusively native, make use of a sidecar"),
                "{errors:?}"
            );
        }
        let two_kinds = connect(json!({ "Gateway": { "Terminating": {
            "Services": [{ "Name": "db" }] }, "Mesh": {} } }));
        let errors = errors_of(&group(vec!["host"], vec![]), &[("gw", "", "1", &two_kinds)]);
        assert_eq!(errors, ["g: One Consul Gateway Configuration must be set"]);
    }

    #[test]
    fn gateways_may_run_in_host_mode_and_native_services_name_their_task() {
        let ingress = connect(json!({ "Gateway": { "Ingress": { "Listeners": [
            { "Port": 8080, "Protocol": "http", "Services": [{ "Name": "web" }] }
        ] } } }));
        assert!(errors_of(&group(vec!["host"], vec![]), &[("gw", "", "", &ingress)]).is_empty());
        // A mode left out is not host, as in Nomad.
        assert!(
            errors_of(&group(vec![""], vec![]), &[("gw", "", "", &ingress)])[0]
                .contains("uses network mode \"\"; must be \"bridge\", \"host\", or \"cni/*\"")
        );
        // Nomad's rules inside the gateway, first problem first.
        for (gateway, want) in [
            (
                json!({ "Ingress": { "Listeners": [] } }),
                "Consul Ingress Gateway requires at least one listener",
            ),
            (
                json!({ "Ingress": { "Listeners": [{ "Port": 0, "Services": [{ "Name": "w" }] }] } }),
                "Consul Ingress Listener requires valid Port",
            ),
            (
                json!({ "Ingress": { "Listeners": [{ "Port": 1, "Protocol": "udp" }] } }),
                "Consul Ingress Listener requires protocol of tcp, http, http2, grpc, got \"udp\"",
            ),
            (
                json!({ "Ingress": { "Listeners": [{ "Port": 1 }] } }),
                "Consul Ingress Listener requires one or more services",
            ),
            (
                json!({ "Terminating": { "Services": [] } }),
                "Consul Terminating Gateway requires at least one service",
            ),
            (
                json!({ "Terminating": { "Services": [{ "Name": "db", "SNI": "x" }] } }),
                "Consul Linked Service TLS SNI requires CAFile",
            ),
            (
                json!({ "Proxy": { "EnvoyDNSDiscoveryType": "DNS" }, "Mesh": {} }),
                "Consul Gateway Proxy Envoy DNS Discovery type must be STRICT_DNS or LOGICAL_DNS",
            ),
        ] {
            let c = connect(json!({ "Gateway": gateway }));
            assert_eq!(
                errors_of(&group(vec!["bridge"], vec![]), &[("gw", "", "1", &c)]),
                [format!("g: {want}")]
            );
        }
        let mesh = connect(json!({ "Gateway": { "Mesh": {} } }));
        assert_eq!(
            errors_of(&group(vec!["bridge"], vec![]), &[("mesh", "", "", &mesh)]),
            ["g: service.port must be set for mesh gateway service"]
        );
        let native = connect(json!({ "Native": true }));
        // Without a network Nomad infers no task.
        assert!(
            errors_of(&group(vec![], vec!["a"]), &[("n", "", "http", &native)])[0]
                .contains("Service n is Connect Native and requires setting the task")
        );
        assert!(errors_of(
            &group(vec!["host"], vec!["a"]),
            &[("n", "", "http", &native)]
        )
        .is_empty());
        let two_tasks = group(vec!["bridge"], vec!["a", "b"]);
        assert!(errors_of(&two_tasks, &[("n", "", "http", &native)])[0].contains("is ambiguous"));
        assert!(errors_of(&two_tasks, &[("n", "c", "http", &native)])[0].contains("does not exist"));
        assert!(errors_of(&two_tasks, &[("n", "b", "http", &native)]).is_empty());
        assert!(errors_of(&two_tasks, &[("n", "b", "", &native)])[0]
            .contains("requires setting the port"));
    }

    #[test]
    fn upstreams_may_not_share_a_listener_and_a_transparent_proxy_stands_alone() {
        let up = |port: i64| {
            connect(json!({ "SidecarService": { "Proxy": { "Upstreams": [
                { "DestinationName": "db", "LocalBindPort": port }
            ] } } }))
        };
        let (a, b, c) = (up(8080), up(8080), up(8081));
        let g = group(vec!["bridge"], vec!["web"]);
        assert!(errors_of(&g, &[("a", "", "", &a), ("c", "", "", &c)]).is_empty());
        let same = errors_of(&g, &[("a", "", "", &a), ("b", "", "", &b)]);
        assert_eq!(
            same,
            ["g: Consul Connect services \"b\" and \"a\" in group \"api\" using same address for \
              upstreams (:8080)"]
        );
        let tproxy = connect(json!({ "SidecarService": { "Proxy": {
            "TransparentProxy": { "ExcludeInboundPorts": ["9000", "nope"] } } } }));
        let errors = errors_of(&g, &[("t", "", "", &tproxy), ("c", "", "", &c)]);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].contains("port \"nope\" must be numeric"));
        assert!(errors[1].contains("requires there is only one connect block"));
    }

    /// The errors of a job whose group `api` has `services` and a task `web` with
    /// `task_services`, in network `mode`.
    fn job_errors(
        mode: &str,
        services: serde_json::Value,
        task_services: serde_json::Value,
    ) -> Vec<String> {
        let mut job: crate::model::Job = serde_json::from_value(json!({
            "ID": "app",
            "TaskGroups": [{
                "Name": "api",
                "Networks": [{ "Mode": mode }],
                "Services": services,
                "Tasks": [{ "Name": "web", "Driver": "docker", "Config": { "image": "x" },
                            "Services": task_services }]
            }]
        }))
        .unwrap();
        job.canonicalize();
        match job.validate() {
            Ok(()) => vec![],
            Err(e) => e.to_string().lines().map(str::to_owned).collect(),
        }
    }

    #[test]
    fn expose_is_for_an_http_check_of_a_sidecar_group_service_in_bridge_mode() {
        let check = |kind: &str| {
            json!([{ "Type": kind, "Path": "/health", "Expose": true,
                     "Interval": 10_000_000_000u64, "Timeout": 3_000_000_000u64 }])
        };
        let sidecar = |kind: &str| {
            json!([{ "Name": "count-api", "PortLabel": "9001", "Checks": check(kind),
                     "Connect": { "SidecarService": {} } }])
        };
        assert_eq!(
            job_errors("bridge", sidecar("http"), json!([])),
            Vec::<String>::new()
        );
        let all = |errors: Vec<String>| errors.join("\n");
        let host = all(job_errors("host", sidecar("http"), json!([])));
        assert!(
            host.contains("connect expose check: invalid network mode"),
            "{host}"
        );
        let tcp = all(job_errors("bridge", sidecar("tcp"), json!([])));
        assert!(
            tcp.contains("expose may only be set on HTTP or gRPC checks"),
            "{tcp}"
        );
        let plain = json!([{ "Name": "count-api", "PortLabel": "9001", "Checks": check("http") }]);
        let plain = all(job_errors("bridge", plain, json!([])));
        assert!(
            plain.contains(
                "api->count-api->service: \"count-api\" check requires use of sidecar_proxy"
            ),
            "{plain}"
        );
        let native = json!([{ "Name": "web", "PortLabel": "9001", "Provider": "nomad",
                              "Checks": check("http") }]);
        let native = all(job_errors("bridge", json!([]), native));
        assert!(
            native.contains("expose may only be set for Consul service checks"),
            "{native}"
        );
        assert!(native.contains("api[web]->web->"), "{native}");
    }

    #[test]
    fn only_a_group_service_may_have_connect() {
        let task_service = json!([{ "Name": "u", "PortLabel": "80",
                                    "Connect": { "Native": true } }]);
        let errors = job_errors("bridge", json!([]), task_service).join("\n");
        assert!(
            errors.contains(
                "service \"u\" cannot have \"connect\" block, only services defined in a \
                 \"group\" block can"
            ),
            "{errors}"
        );
    }

    #[test]
    fn only_the_default_consul_cluster_and_one_partition() {
        let mut errors = Vec::new();
        let mut c = Consul::default();
        c.canonicalize();
        assert_eq!(c.cluster, "default");
        c.validate("g", &mut errors);
        assert!(errors.is_empty());
        Consul {
            cluster: "east".into(),
            ..Consul::default()
        }
        .validate("g", &mut errors);
        assert_eq!(
            errors,
            ["g: non-default Consul cluster requires Nomad Enterprise"]
        );
        errors.clear();
        let group = Consul {
            partition: "a".into(),
            ..Consul::default()
        };
        let task = Consul {
            partition: "b".into(),
            ..Consul::default()
        };
        validate_task_partition("t", Some(&group), &task, &mut errors);
        validate_task_partition("t", None, &task, &mut errors);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("must match group.consul.partition \"a\""));
    }
}
