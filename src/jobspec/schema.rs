//! The schema of a job file: per block, the arguments it takes (HCL name, JSON name, type)
//! and the blocks nested in it (where they go in the JSON, which label names them, how their
//! content is read). Nomad's names; the parser in [`super::hcl`] walks it.

use serde_json::{Map, Value};

/// Set `key` to `value` unless the block set it.
fn default(m: &mut Map<String, Value>, key: &str, value: impl Into<Value>) {
    m.entry(key).or_insert_with(|| value.into());
}

/// What a value must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ty {
    Str,
    Int,
    Bool,
    /// A Go duration string or nanoseconds; nanoseconds in JSON.
    Dur,
    StrList,
    IntList,
}

/// An argument: HCL name, JSON name, type.
pub(super) type Arg = (&'static str, &'static str, Ty);

/// How a nested block's content is converted.
#[derive(Clone, Copy)]
pub(super) enum Content {
    /// By a schema.
    Spec(&'static Spec),
    /// A free map of strings (`meta`, `env`).
    StrMap,
    /// A free map of any values, nested blocks as lists (`config`).
    AnyMap,
    /// Every argument and block kept under its PascalCase name: for the blocks teamster
    /// refuses, so that they reach the check by name.
    Generic,
    /// `constraint` and `affinity`, with their shortcut arguments.
    Constraint { weight: bool },
    /// A task's `scaling "cpu"` / `scaling "mem"`: [`SCALING`], typed by its label
    /// (`vertical_cpu`, `vertical_mem`).
    VerticalScaling,
}

/// Where a nested block goes in its parent's JSON.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// One object; a second block is an error.
    One,
    /// Appended to a list.
    List,
    /// A map keyed by the block's label.
    ByLabel,
}

/// A nested block.
#[derive(Clone, Copy)]
pub(super) struct Nested {
    pub(super) hcl: &'static str,
    pub(super) json: &'static str,
    pub(super) place: Place,
    /// The JSON field the block's one label sets, if it takes a label.
    pub(super) label: Option<&'static str>,
    pub(super) content: Content,
}

pub(super) const fn one(hcl: &'static str, json: &'static str, content: Content) -> Nested {
    Nested {
        hcl,
        json,
        place: Place::One,
        label: None,
        content,
    }
}

pub(super) const fn list(hcl: &'static str, json: &'static str, content: Content) -> Nested {
    Nested {
        hcl,
        json,
        place: Place::List,
        label: None,
        content,
    }
}

pub(super) const fn named(
    hcl: &'static str,
    json: &'static str,
    label: &'static str,
    content: Content,
) -> Nested {
    Nested {
        hcl,
        json,
        place: Place::List,
        label: Some(label),
        content,
    }
}

pub(super) const fn generic(hcl: &'static str, json: &'static str) -> Nested {
    one(hcl, json, Content::Generic)
}

pub(super) const fn generic_list(hcl: &'static str, json: &'static str) -> Nested {
    list(hcl, json, Content::Generic)
}

/// A block's schema.
pub(super) struct Spec {
    pub(super) args: &'static [Arg],
    pub(super) blocks: &'static [Nested],
    /// What Nomad's parser does to the block once read: the defaults it fills in, fields it
    /// moves.
    pub(super) fixup: Option<fn(&mut Map<String, Value>)>,
}

pub(super) const CONSTRAINT: Content = Content::Constraint { weight: false };
pub(super) const AFFINITY: Content = Content::Constraint { weight: true };

/// A task group's `scaling` block; `policy` is free-form (for an external autoscaler).
pub(super) static SCALING: Spec = Spec {
    args: &[
        ("min", "Min", Ty::Int),
        ("max", "Max", Ty::Int),
        ("enabled", "Enabled", Ty::Bool),
        ("type", "Type", Ty::Str),
    ],
    blocks: &[one("policy", "Policy", Content::AnyMap)],
    fixup: Some(|m| default(m, "Type", "horizontal")),
};

/// A job's `periodic` block (the parser sets SpecType "cron" when `cron` or `crons` is given).
pub(super) static PERIODIC: Spec = Spec {
    args: &[
        ("cron", "Spec", Ty::Str),
        ("crons", "Specs", Ty::StrList),
        ("prohibit_overlap", "ProhibitOverlap", Ty::Bool),
        ("time_zone", "TimeZone", Ty::Str),
        ("enabled", "Enabled", Ty::Bool),
    ],
    blocks: &[],
    fixup: Some(|m| {
        if m.contains_key("Spec") || m.contains_key("Specs") {
            m.insert("SpecType".into(), "cron".into());
        }
    }),
};

pub(super) static SPREAD_TARGET: Spec = Spec {
    args: &[("percent", "Percent", Ty::Int)],
    blocks: &[],
    fixup: None,
};

pub(super) static SPREAD: Spec = Spec {
    args: &[
        ("attribute", "Attribute", Ty::Str),
        ("weight", "Weight", Ty::Int),
    ],
    blocks: &[named(
        "target",
        "SpreadTarget",
        "Value",
        Content::Spec(&SPREAD_TARGET),
    )],
    fixup: None,
};

pub(super) static RESTART: Spec = Spec {
    args: &[
        ("attempts", "Attempts", Ty::Int),
        ("interval", "Interval", Ty::Dur),
        ("delay", "Delay", Ty::Dur),
        ("mode", "Mode", Ty::Str),
        ("render_templates", "RenderTemplates", Ty::Bool),
    ],
    blocks: &[],
    fixup: None,
};

pub(super) static RESCHEDULE: Spec = Spec {
    args: &[
        ("attempts", "Attempts", Ty::Int),
        ("interval", "Interval", Ty::Dur),
        ("delay", "Delay", Ty::Dur),
        ("delay_function", "DelayFunction", Ty::Str),
        ("max_delay", "MaxDelay", Ty::Dur),
        ("unlimited", "Unlimited", Ty::Bool),
    ],
    blocks: &[],
    fixup: None,
};

/// `update` (job or group).
pub(super) static UPDATE: Spec = Spec {
    args: &[
        ("max_parallel", "MaxParallel", Ty::Int),
        ("health_check", "HealthCheck", Ty::Str),
        ("min_healthy_time", "MinHealthyTime", Ty::Dur),
        ("healthy_deadline", "HealthyDeadline", Ty::Dur),
        ("progress_deadline", "ProgressDeadline", Ty::Dur),
        ("auto_revert", "AutoRevert", Ty::Bool),
        ("auto_promote", "AutoPromote", Ty::Bool),
        ("canary", "Canary", Ty::Int),
        ("stagger", "Stagger", Ty::Dur),
    ],
    blocks: &[],
    fixup: None,
};

/// `migrate` (job or group).
pub(super) static MIGRATE: Spec = Spec {
    args: &[
        ("max_parallel", "MaxParallel", Ty::Int),
        ("health_check", "HealthCheck", Ty::Str),
        ("min_healthy_time", "MinHealthyTime", Ty::Dur),
        ("healthy_deadline", "HealthyDeadline", Ty::Dur),
    ],
    blocks: &[],
    fixup: None,
};

/// A group's `disconnect`.
pub(super) static DISCONNECT: Spec = Spec {
    args: &[
        ("lost_after", "LostAfter", Ty::Dur),
        ("replace", "Replace", Ty::Bool),
        ("reconcile", "Reconcile", Ty::Str),
        ("stop_on_client_after", "StopOnClientAfter", Ty::Dur),
    ],
    blocks: &[],
    fixup: None,
};

/// A group's `locality` (a teamster extension): `level` blocks in order.
pub(super) static LOCALITY: Spec = Spec {
    args: &[],
    blocks: &[list("level", "Levels", Content::Spec(&LOCALITY_LEVEL))],
    fixup: None,
};

/// One `level` of a group's `locality`: a constraint's `attribute`, `operator` and `value`,
/// and the `wait` for a node that satisfies it.
pub(super) static LOCALITY_LEVEL: Spec = Spec {
    args: &[
        ("attribute", "LTarget", Ty::Str),
        ("operator", "Operand", Ty::Str),
        ("value", "RTarget", Ty::Str),
        ("wait", "Wait", Ty::Dur),
    ],
    blocks: &[],
    fixup: Some(|m| default(m, "Operand", "=")),
};

/// A group's `ephemeral_disk`.
pub(super) static EPHEMERAL_DISK: Spec = Spec {
    args: &[
        ("sticky", "Sticky", Ty::Bool),
        ("migrate", "Migrate", Ty::Bool),
        ("size", "SizeMB", Ty::Int),
    ],
    blocks: &[],
    fixup: None,
};

/// A `port "<label>"` of a `network`: Nomad's parser reads every port as dynamic, then
/// moves those with a `static` value to ReservedPorts ([`NETWORK`]'s fixup).
pub(super) static PORT: Spec = Spec {
    args: &[
        ("static", "Value", Ty::Int),
        ("to", "To", Ty::Int),
        ("host_network", "HostNetwork", Ty::Str),
        ("ignore_collision", "IgnoreCollision", Ty::Bool),
    ],
    blocks: &[],
    fixup: None,
};

pub(super) static DNS: Spec = Spec {
    args: &[
        ("servers", "Servers", Ty::StrList),
        ("searches", "Searches", Ty::StrList),
        ("options", "Options", Ty::StrList),
    ],
    blocks: &[],
    fixup: None,
};

pub(super) static CNI: Spec = Spec {
    args: &[],
    blocks: &[one("args", "Args", Content::StrMap)],
    fixup: None,
};

/// A `network` (group, or a task's resources).
pub(super) static NETWORK: Spec = Spec {
    args: &[
        ("mode", "Mode", Ty::Str),
        ("hostname", "Hostname", Ty::Str),
        ("mbits", "MBits", Ty::Int),
    ],
    blocks: &[
        named("port", "DynamicPorts", "Label", Content::Spec(&PORT)),
        one("dns", "DNS", Content::Spec(&DNS)),
        one("cni", "CNI", Content::Spec(&CNI)),
    ],
    fixup: Some(|m| {
        let Some(Value::Array(ports)) = m.remove("DynamicPorts") else {
            return;
        };
        let (reserved, dynamic): (Vec<_>, Vec<_>) = ports
            .into_iter()
            .partition(|p| p.get("Value").is_some_and(|v| v.as_i64() != Some(0)));
        if !reserved.is_empty() {
            m.insert("ReservedPorts".into(), Value::Array(reserved));
        }
        if !dynamic.is_empty() {
            m.insert("DynamicPorts".into(), Value::Array(dynamic));
        }
    }),
};

/// A check's or a service's `check_restart`.
pub(super) static CHECK_RESTART: Spec = Spec {
    args: &[
        ("limit", "Limit", Ty::Int),
        ("grace", "Grace", Ty::Dur),
        ("ignore_warnings", "IgnoreWarnings", Ty::Bool),
    ],
    blocks: &[],
    fixup: None,
};

/// A service's `check`.
pub(super) static CHECK: Spec = Spec {
    args: &[
        ("name", "Name", Ty::Str),
        ("type", "Type", Ty::Str),
        ("command", "Command", Ty::Str),
        ("args", "Args", Ty::StrList),
        ("path", "Path", Ty::Str),
        ("protocol", "Protocol", Ty::Str),
        ("port", "PortLabel", Ty::Str),
        ("expose", "Expose", Ty::Bool),
        ("address_mode", "AddressMode", Ty::Str),
        ("advertise", "Advertise", Ty::Str),
        ("interval", "Interval", Ty::Dur),
        ("timeout", "Timeout", Ty::Dur),
        ("initial_status", "InitialStatus", Ty::Str),
        ("notes", "Notes", Ty::Str),
        ("tls_server_name", "TLSServerName", Ty::Str),
        ("tls_skip_verify", "TLSSkipVerify", Ty::Bool),
        ("method", "Method", Ty::Str),
        ("body", "Body", Ty::Str),
        ("grpc_service", "GRPCService", Ty::Str),
        ("grpc_use_tls", "GRPCUseTLS", Ty::Bool),
        ("task", "TaskName", Ty::Str),
        ("success_before_passing", "SuccessBeforePassing", Ty::Int),
        (
            "failures_before_critical",
            "FailuresBeforeCritical",
            Ty::Int,
        ),
        ("failures_before_warning", "FailuresBeforeWarning", Ty::Int),
        ("on_update", "OnUpdate", Ty::Str),
    ],
    blocks: &[
        one("header", "Header", Content::AnyMap),
        one(
            "check_restart",
            "CheckRestart",
            Content::Spec(&CHECK_RESTART),
        ),
    ],
    fixup: None,
};

/// A service's `connect` block (Consul Connect): kept with the job, which stays pending for
/// Consul (`model::integrations`). Nomad's API names; nothing of it is acted on without
/// Consul.
pub(super) static CONNECT: Spec = Spec {
    args: &[("native", "Native", Ty::Bool)],
    blocks: &[
        one("gateway", "Gateway", Content::Spec(&CONNECT_GATEWAY)),
        one(
            "sidecar_service",
            "SidecarService",
            Content::Spec(&CONNECT_SIDECAR_SERVICE),
        ),
        one(
            "sidecar_task",
            "SidecarTask",
            Content::Spec(&CONNECT_SIDECAR_TASK),
        ),
    ],
    fixup: None,
};

static CONNECT_SIDECAR_SERVICE: Spec = Spec {
    args: &[
        ("tags", "Tags", Ty::StrList),
        ("port", "Port", Ty::Str),
        (
            "disable_default_tcp_check",
            "DisableDefaultTCPCheck",
            Ty::Bool,
        ),
    ],
    blocks: &[
        one("proxy", "Proxy", Content::Spec(&CONNECT_PROXY)),
        one("meta", "Meta", Content::StrMap),
    ],
    fixup: None,
};

static CONNECT_PROXY: Spec = Spec {
    args: &[
        ("local_service_address", "LocalServiceAddress", Ty::Str),
        ("local_service_port", "LocalServicePort", Ty::Int),
    ],
    blocks: &[
        one("expose", "Expose", Content::Spec(&CONNECT_EXPOSE)),
        list("upstreams", "Upstreams", Content::Spec(&CONNECT_UPSTREAM)),
        one(
            "transparent_proxy",
            "TransparentProxy",
            Content::Spec(&CONNECT_TRANSPARENT_PROXY),
        ),
        one("config", "Config", Content::AnyMap),
    ],
    fixup: None,
};

static CONNECT_EXPOSE: Spec = Spec {
    args: &[],
    blocks: &[list("path", "Paths", Content::Spec(&CONNECT_EXPOSE_PATH))],
    fixup: None,
};

static CONNECT_EXPOSE_PATH: Spec = Spec {
    args: &[
        ("path", "Path", Ty::Str),
        ("protocol", "Protocol", Ty::Str),
        ("local_path_port", "LocalPathPort", Ty::Int),
        ("listener_port", "ListenerPort", Ty::Str),
    ],
    blocks: &[],
    fixup: None,
};

static CONNECT_UPSTREAM: Spec = Spec {
    args: &[
        ("destination_name", "DestinationName", Ty::Str),
        ("destination_namespace", "DestinationNamespace", Ty::Str),
        ("destination_peer", "DestinationPeer", Ty::Str),
        ("destination_partition", "DestinationPartition", Ty::Str),
        ("destination_type", "DestinationType", Ty::Str),
        ("local_bind_port", "LocalBindPort", Ty::Int),
        ("datacenter", "Datacenter", Ty::Str),
        ("local_bind_address", "LocalBindAddress", Ty::Str),
        ("local_bind_socket_path", "LocalBindSocketPath", Ty::Str),
        ("local_bind_socket_mode", "LocalBindSocketMode", Ty::Str),
    ],
    blocks: &[
        one(
            "mesh_gateway",
            "MeshGateway",
            Content::Spec(&CONNECT_MESH_GATEWAY),
        ),
        one("config", "Config", Content::AnyMap),
    ],
    fixup: None,
};

static CONNECT_MESH_GATEWAY: Spec = Spec {
    args: &[("mode", "Mode", Ty::Str)],
    blocks: &[],
    fixup: None,
};

static CONNECT_TRANSPARENT_PROXY: Spec = Spec {
    args: &[
        ("uid", "UID", Ty::Str),
        ("outbound_port", "OutboundPort", Ty::Int),
        ("exclude_inbound_ports", "ExcludeInboundPorts", Ty::StrList),
        (
            "exclude_outbound_ports",
            "ExcludeOutboundPorts",
            Ty::IntList,
        ),
        (
            "exclude_outbound_cidrs",
            "ExcludeOutboundCIDRs",
            Ty::StrList,
        ),
        ("exclude_uids", "ExcludeUIDs", Ty::StrList),
        ("no_dns", "NoDNS", Ty::Bool),
    ],
    blocks: &[],
    fixup: None,
};

/// `sidecar_task`: what Nomad merges into the proxy task it would add for the service.
static CONNECT_SIDECAR_TASK: Spec = Spec {
    args: &[
        ("name", "Name", Ty::Str),
        ("driver", "Driver", Ty::Str),
        ("user", "User", Ty::Str),
        ("kill_timeout", "KillTimeout", Ty::Dur),
        ("shutdown_delay", "ShutdownDelay", Ty::Dur),
        ("kill_signal", "KillSignal", Ty::Str),
    ],
    blocks: &[
        one("config", "Config", Content::AnyMap),
        one("env", "Env", Content::StrMap),
        one("resources", "Resources", Content::Spec(&RESOURCES)),
        one("meta", "Meta", Content::StrMap),
        one("logs", "LogConfig", Content::Spec(&LOGS)),
        list("volume_mount", "VolumeMounts", Content::Spec(&VOLUME_MOUNT)),
        list("identity", "Identities", Content::Spec(&IDENTITY)),
    ],
    fixup: None,
};

static CONNECT_GATEWAY: Spec = Spec {
    args: &[],
    blocks: &[
        one("proxy", "Proxy", Content::Spec(&CONNECT_GATEWAY_PROXY)),
        one("ingress", "Ingress", Content::Spec(&CONNECT_INGRESS)),
        one(
            "terminating",
            "Terminating",
            Content::Spec(&CONNECT_TERMINATING),
        ),
        one("mesh", "Mesh", Content::Spec(&CONNECT_EMPTY)),
    ],
    fixup: None,
};

static CONNECT_EMPTY: Spec = Spec {
    args: &[],
    blocks: &[],
    fixup: None,
};

static CONNECT_GATEWAY_PROXY: Spec = Spec {
    args: &[
        ("connect_timeout", "ConnectTimeout", Ty::Dur),
        (
            "envoy_gateway_bind_tagged_addresses",
            "EnvoyGatewayBindTaggedAddresses",
            Ty::Bool,
        ),
        (
            "envoy_gateway_no_default_bind",
            "EnvoyGatewayNoDefaultBind",
            Ty::Bool,
        ),
        ("envoy_dns_discovery_type", "EnvoyDNSDiscoveryType", Ty::Str),
    ],
    blocks: &[
        Nested {
            hcl: "envoy_gateway_bind_addresses",
            json: "EnvoyGatewayBindAddresses",
            place: Place::ByLabel,
            label: Some("Name"),
            content: Content::Spec(&CONNECT_BIND_ADDRESS),
        },
        one("config", "Config", Content::AnyMap),
    ],
    fixup: None,
};

static CONNECT_BIND_ADDRESS: Spec = Spec {
    args: &[("address", "Address", Ty::Str), ("port", "Port", Ty::Int)],
    blocks: &[],
    fixup: None,
};

static CONNECT_GATEWAY_TLS: Spec = Spec {
    args: &[
        ("enabled", "Enabled", Ty::Bool),
        ("tls_min_version", "TLSMinVersion", Ty::Str),
        ("tls_max_version", "TLSMaxVersion", Ty::Str),
        ("cipher_suites", "CipherSuites", Ty::StrList),
    ],
    blocks: &[one("sds", "SDS", Content::Spec(&CONNECT_TLS_SDS))],
    fixup: None,
};

static CONNECT_TLS_SDS: Spec = Spec {
    args: &[
        ("cluster_name", "ClusterName", Ty::Str),
        ("cert_resource", "CertResource", Ty::Str),
    ],
    blocks: &[],
    fixup: None,
};

static CONNECT_INGRESS: Spec = Spec {
    args: &[],
    blocks: &[
        one("tls", "TLS", Content::Spec(&CONNECT_GATEWAY_TLS)),
        list("listener", "Listeners", Content::Spec(&CONNECT_LISTENER)),
    ],
    fixup: None,
};

static CONNECT_LISTENER: Spec = Spec {
    args: &[("port", "Port", Ty::Int), ("protocol", "Protocol", Ty::Str)],
    blocks: &[list(
        "service",
        "Services",
        Content::Spec(&CONNECT_INGRESS_SERVICE),
    )],
    fixup: None,
};

static CONNECT_INGRESS_SERVICE: Spec = Spec {
    args: &[
        ("name", "Name", Ty::Str),
        ("hosts", "Hosts", Ty::StrList),
        ("max_connections", "MaxConnections", Ty::Int),
        ("max_pending_requests", "MaxPendingRequests", Ty::Int),
        ("max_concurrent_requests", "MaxConcurrentRequests", Ty::Int),
    ],
    blocks: &[
        one("tls", "TLS", Content::Spec(&CONNECT_GATEWAY_TLS)),
        one(
            "request_headers",
            "RequestHeaders",
            Content::Spec(&CONNECT_HEADERS),
        ),
        one(
            "response_headers",
            "ResponseHeaders",
            Content::Spec(&CONNECT_HEADERS),
        ),
    ],
    fixup: None,
};

static CONNECT_HEADERS: Spec = Spec {
    args: &[("remove", "Remove", Ty::StrList)],
    blocks: &[
        one("add", "Add", Content::StrMap),
        one("set", "Set", Content::StrMap),
    ],
    fixup: None,
};

static CONNECT_TERMINATING: Spec = Spec {
    args: &[],
    blocks: &[list(
        "service",
        "Services",
        Content::Spec(&CONNECT_LINKED_SERVICE),
    )],
    fixup: None,
};

static CONNECT_LINKED_SERVICE: Spec = Spec {
    args: &[
        ("name", "Name", Ty::Str),
        ("ca_file", "CAFile", Ty::Str),
        ("cert_file", "CertFile", Ty::Str),
        ("key_file", "KeyFile", Ty::Str),
        ("sni", "SNI", Ty::Str),
    ],
    blocks: &[],
    fixup: None,
};

/// A task's `action "<name>"`.
pub(super) static ACTION: Spec = Spec {
    args: &[
        ("command", "Command", Ty::Str),
        ("args", "Args", Ty::StrList),
    ],
    blocks: &[],
    fixup: None,
};

/// A group's or a task's `consul` block.
pub(super) static CONSUL: Spec = Spec {
    args: &[
        ("namespace", "Namespace", Ty::Str),
        ("cluster", "Cluster", Ty::Str),
        ("partition", "Partition", Ty::Str),
    ],
    blocks: &[],
    fixup: None,
};

/// A `service` (group or task).
pub(super) static SERVICE: Spec = Spec {
    args: &[
        ("name", "Name", Ty::Str),
        ("port", "PortLabel", Ty::Str),
        ("tags", "Tags", Ty::StrList),
        ("canary_tags", "CanaryTags", Ty::StrList),
        ("enable_tag_override", "EnableTagOverride", Ty::Bool),
        ("address_mode", "AddressMode", Ty::Str),
        ("address", "Address", Ty::Str),
        ("task", "TaskName", Ty::Str),
        ("provider", "Provider", Ty::Str),
        ("on_update", "OnUpdate", Ty::Str),
        ("cluster", "Cluster", Ty::Str),
    ],
    blocks: &[
        list("check", "Checks", Content::Spec(&CHECK)),
        one(
            "check_restart",
            "CheckRestart",
            Content::Spec(&CHECK_RESTART),
        ),
        one("meta", "Meta", Content::StrMap),
        one("canary_meta", "CanaryMeta", Content::StrMap),
        one("tagged_addresses", "TaggedAddresses", Content::StrMap),
        one("connect", "Connect", Content::Spec(&CONNECT)),
        generic("identity", "Identity"),
        generic("weights", "Weights"),
    ],
    fixup: None,
};

pub(super) static TEMPLATE_WAIT: Spec = Spec {
    args: &[("min", "Min", Ty::Dur), ("max", "Max", Ty::Dur)],
    blocks: &[],
    fixup: None,
};

pub(super) static CHANGE_SCRIPT: Spec = Spec {
    args: &[
        ("command", "Command", Ty::Str),
        ("args", "Args", Ty::StrList),
        ("timeout", "Timeout", Ty::Dur),
        ("fail_on_error", "FailOnError", Ty::Bool),
        ("run_on_first_render", "RunOnFirstRender", Ty::Bool),
    ],
    blocks: &[],
    fixup: None,
};

/// A task's `template`; Nomad's parser fills in its change mode, permissions, splay and
/// missing-key behaviour.
pub(super) static TEMPLATE: Spec = Spec {
    args: &[
        ("source", "SourcePath", Ty::Str),
        ("destination", "DestPath", Ty::Str),
        ("data", "EmbeddedTmpl", Ty::Str),
        ("change_mode", "ChangeMode", Ty::Str),
        ("change_signal", "ChangeSignal", Ty::Str),
        ("splay", "Splay", Ty::Dur),
        ("perms", "Perms", Ty::Str),
        ("uid", "Uid", Ty::Int),
        ("gid", "Gid", Ty::Int),
        ("left_delimiter", "LeftDelim", Ty::Str),
        ("right_delimiter", "RightDelim", Ty::Str),
        ("env", "Envvars", Ty::Bool),
        ("vault_grace", "VaultGrace", Ty::Dur),
        ("error_on_missing_key", "ErrMissingKey", Ty::Bool),
        ("once", "Once", Ty::Bool),
    ],
    blocks: &[
        one("wait", "Wait", Content::Spec(&TEMPLATE_WAIT)),
        one(
            "change_script",
            "ChangeScript",
            Content::Spec(&CHANGE_SCRIPT),
        ),
    ],
    fixup: Some(|m| {
        default(m, "ChangeMode", "restart");
        default(m, "Perms", "0644");
        default(m, "Splay", 5_000_000_000_i64);
        default(m, "ErrMissingKey", false);
    }),
};

/// A task's `artifact`.
pub(super) static ARTIFACT: Spec = Spec {
    args: &[
        ("source", "GetterSource", Ty::Str),
        ("destination", "RelativeDest", Ty::Str),
        ("mode", "GetterMode", Ty::Str),
        ("chown", "Chown", Ty::Bool),
        ("insecure", "GetterInsecure", Ty::Bool),
    ],
    blocks: &[
        one("options", "GetterOptions", Content::StrMap),
        one("headers", "GetterHeaders", Content::StrMap),
    ],
    fixup: None,
};

/// A task's (or the job's) `vault`; Nomad's parser fills in `env` and `disable_file`, and
/// the change mode.
pub(super) static VAULT: Spec = Spec {
    args: &[
        ("policies", "Policies", Ty::StrList),
        ("namespace", "Namespace", Ty::Str),
        ("cluster", "Cluster", Ty::Str),
        ("role", "Role", Ty::Str),
        ("env", "Env", Ty::Bool),
        ("disable_file", "DisableFile", Ty::Bool),
        ("change_mode", "ChangeMode", Ty::Str),
        ("change_signal", "ChangeSignal", Ty::Str),
        ("allow_token_expiration", "AllowTokenExpiration", Ty::Bool),
    ],
    blocks: &[],
    fixup: Some(|m| {
        default(m, "Env", true);
        default(m, "DisableFile", false);
        default(m, "ChangeMode", "restart");
    }),
};

/// A `device "<name>"` of a task's resources.
pub(super) static DEVICE: Spec = Spec {
    args: &[("count", "Count", Ty::Int)],
    blocks: &[
        list("constraint", "Constraints", CONSTRAINT),
        list("affinity", "Affinities", AFFINITY),
    ],
    fixup: None,
};

/// A task's `logs`.
pub(super) static LOGS: Spec = Spec {
    args: &[
        ("max_files", "MaxFiles", Ty::Int),
        ("max_file_size", "MaxFileSizeMB", Ty::Int),
        ("disabled", "Disabled", Ty::Bool),
        ("enabled", "Enabled", Ty::Bool),
    ],
    blocks: &[],
    fixup: None,
};

pub(super) static LIFECYCLE: Spec = Spec {
    args: &[("hook", "Hook", Ty::Str), ("sidecar", "Sidecar", Ty::Bool)],
    blocks: &[],
    fixup: None,
};

pub(super) static DISPATCH_PAYLOAD: Spec = Spec {
    args: &[("file", "File", Ty::Str)],
    blocks: &[],
    fixup: None,
};

/// A job's `parameterized`.
pub(super) static PARAMETERIZED: Spec = Spec {
    args: &[
        ("payload", "Payload", Ty::Str),
        ("meta_required", "MetaRequired", Ty::StrList),
        ("meta_optional", "MetaOptional", Ty::StrList),
    ],
    blocks: &[],
    fixup: None,
};

pub(super) static VOLUME_MOUNT: Spec = Spec {
    args: &[
        ("volume", "Volume", Ty::Str),
        ("destination", "Destination", Ty::Str),
        ("read_only", "ReadOnly", Ty::Bool),
        ("propagation_mode", "PropagationMode", Ty::Str),
        ("selinux_label", "SELinuxLabel", Ty::Str),
    ],
    blocks: &[],
    fixup: None,
};

pub(super) static MOUNT_OPTIONS: Spec = Spec {
    args: &[
        ("fs_type", "FSType", Ty::Str),
        ("mount_flags", "MountFlags", Ty::StrList),
    ],
    blocks: &[],
    fixup: None,
};

/// A group's `volume "<name>"`.
pub(super) static VOLUME: Spec = Spec {
    args: &[
        ("type", "Type", Ty::Str),
        ("source", "Source", Ty::Str),
        ("read_only", "ReadOnly", Ty::Bool),
        ("access_mode", "AccessMode", Ty::Str),
        ("attachment_mode", "AttachmentMode", Ty::Str),
        ("per_alloc", "PerAlloc", Ty::Bool),
        ("sticky", "Sticky", Ty::Bool),
    ],
    blocks: &[one(
        "mount_options",
        "MountOptions",
        Content::Spec(&MOUNT_OPTIONS),
    )],
    fixup: None,
};

pub(super) static UI_LINK: Spec = Spec {
    args: &[("label", "Label", Ty::Str), ("url", "URL", Ty::Str)],
    blocks: &[],
    fixup: None,
};

/// A job's `ui`.
pub(super) static UI: Spec = Spec {
    args: &[("description", "Description", Ty::Str)],
    blocks: &[list("link", "Links", Content::Spec(&UI_LINK))],
    fixup: None,
};

pub(super) static RESOURCES: Spec = Spec {
    args: &[
        ("cpu", "CPU", Ty::Int),
        ("cores", "Cores", Ty::Int),
        ("memory", "MemoryMB", Ty::Int),
        ("memory_max", "MemoryMaxMB", Ty::Int),
        ("disk", "DiskMB", Ty::Int),
        ("secrets", "SecretsMB", Ty::Int),
    ],
    blocks: &[
        named("device", "Devices", "Name", Content::Spec(&DEVICE)),
        list("network", "Networks", Content::Spec(&NETWORK)),
        generic("numa", "NUMA"),
    ],
    fixup: None,
};

pub(super) static TASK: Spec = Spec {
    args: &[
        ("driver", "Driver", Ty::Str),
        ("user", "User", Ty::Str),
        ("kill_timeout", "KillTimeout", Ty::Dur),
        ("kill_signal", "KillSignal", Ty::Str),
        ("leader", "Leader", Ty::Bool),
        ("shutdown_delay", "ShutdownDelay", Ty::Dur),
        ("kind", "Kind", Ty::Str),
    ],
    blocks: &[
        one("config", "Config", Content::AnyMap),
        one("env", "Env", Content::StrMap),
        one("meta", "Meta", Content::StrMap),
        one("resources", "Resources", Content::Spec(&RESOURCES)),
        list("constraint", "Constraints", CONSTRAINT),
        list("affinity", "Affinities", AFFINITY),
        one("restart", "RestartPolicy", Content::Spec(&RESTART)),
        one("logs", "LogConfig", Content::Spec(&LOGS)),
        list("artifact", "Artifacts", Content::Spec(&ARTIFACT)),
        list("template", "Templates", Content::Spec(&TEMPLATE)),
        list("service", "Services", Content::Spec(&SERVICE)),
        one("lifecycle", "Lifecycle", Content::Spec(&LIFECYCLE)),
        one(
            "dispatch_payload",
            "DispatchPayload",
            Content::Spec(&DISPATCH_PAYLOAD),
        ),
        list("volume_mount", "VolumeMounts", Content::Spec(&VOLUME_MOUNT)),
        one("vault", "Vault", Content::Spec(&VAULT)),
        one("consul", "Consul", Content::Spec(&CONSUL)),
        list("identity", "Identities", Content::Spec(&IDENTITY)),
        generic("csi_plugin", "CSIPluginConfig"),
        named("action", "Actions", "Name", Content::Spec(&ACTION)),
        generic_list("secret", "Secrets"),
        list("scaling", "ScalingPolicies", Content::VerticalScaling),
        generic("schedule", "Schedule"),
    ],
    fixup: Some(default_identity_to_identity),
};

/// A task's `identity` block (Nomad's `WorkloadIdentity`).
pub(super) static IDENTITY: Spec = Spec {
    args: &[
        ("name", "Name", Ty::Str),
        ("aud", "Audience", Ty::StrList),
        ("change_mode", "ChangeMode", Ty::Str),
        ("change_signal", "ChangeSignal", Ty::Str),
        ("env", "Env", Ty::Bool),
        ("file", "File", Ty::Bool),
        ("filepath", "Filepath", Ty::Str),
        ("service_name", "ServiceName", Ty::Str),
        ("ttl", "TTL", Ty::Dur),
        ("extra_claims", "ExtraClaims", Ty::StrList),
    ],
    blocks: &[],
    fixup: None,
};

/// Nomad's parser moves the default identity (unnamed or named `default`) from the task's
/// `identity` blocks to `Identity`.
fn default_identity_to_identity(task: &mut Map<String, Value>) {
    let Some(Value::Array(list)) = task.get_mut("Identities") else {
        return;
    };
    let is_default = |v: &Value| match v.get("Name") {
        None | Some(Value::Null) => true,
        Some(Value::String(n)) => n.is_empty() || n == "default",
        _ => false,
    };
    if let Some(at) = list.iter().position(is_default) {
        let default = list.remove(at);
        if list.is_empty() {
            task.remove("Identities");
        }
        task.insert("Identity".into(), default);
    }
}

pub(super) static GROUP: Spec = Spec {
    args: &[
        ("count", "Count", Ty::Int),
        ("shutdown_delay", "ShutdownDelay", Ty::Dur),
        ("max_run_duration", "MaxRunDuration", Ty::Dur),
        (
            "stop_after_client_disconnect",
            "StopAfterClientDisconnect",
            Ty::Dur,
        ),
        ("max_client_disconnect", "MaxClientDisconnect", Ty::Dur),
        (
            "prevent_reschedule_on_lost",
            "PreventRescheduleOnLost",
            Ty::Bool,
        ),
    ],
    blocks: &[
        named("task", "Tasks", "Name", Content::Spec(&TASK)),
        list("constraint", "Constraints", CONSTRAINT),
        list("affinity", "Affinities", AFFINITY),
        list("spread", "Spreads", Content::Spec(&SPREAD)),
        one("restart", "RestartPolicy", Content::Spec(&RESTART)),
        one("reschedule", "ReschedulePolicy", Content::Spec(&RESCHEDULE)),
        one("meta", "Meta", Content::StrMap),
        one(
            "ephemeral_disk",
            "EphemeralDisk",
            Content::Spec(&EPHEMERAL_DISK),
        ),
        one("update", "Update", Content::Spec(&UPDATE)),
        one("migrate", "Migrate", Content::Spec(&MIGRATE)),
        list("network", "Networks", Content::Spec(&NETWORK)),
        list("service", "Services", Content::Spec(&SERVICE)),
        Nested {
            hcl: "volume",
            json: "Volumes",
            place: Place::ByLabel,
            label: Some("Name"),
            content: Content::Spec(&VOLUME),
        },
        one("scaling", "Scaling", Content::Spec(&SCALING)),
        one("consul", "Consul", Content::Spec(&CONSUL)),
        // Copied to the group's tasks that have none, then dropped (`hcl::vault_to_tasks`).
        one("vault", "Vault", Content::Spec(&VAULT)),
        one("disconnect", "Disconnect", Content::Spec(&DISCONNECT)),
        one("locality", "Locality", Content::Spec(&LOCALITY)),
    ],
    fixup: None,
};

pub(super) static JOB: Spec = Spec {
    args: &[
        ("region", "Region", Ty::Str),
        ("namespace", "Namespace", Ty::Str),
        ("id", "ID", Ty::Str),
        ("name", "Name", Ty::Str),
        ("type", "Type", Ty::Str),
        ("priority", "Priority", Ty::Int),
        ("all_at_once", "AllAtOnce", Ty::Bool),
        ("datacenters", "Datacenters", Ty::StrList),
        ("node_pool", "NodePool", Ty::Str),
        ("vault_token", "VaultToken", Ty::Str),
        ("consul_token", "ConsulToken", Ty::Str),
    ],
    blocks: &[
        named("group", "TaskGroups", "Name", Content::Spec(&GROUP)),
        // A job-level task becomes a one-task group of its name (moved after conversion).
        named("task", "Tasks", "Name", Content::Spec(&TASK)),
        list("constraint", "Constraints", CONSTRAINT),
        list("affinity", "Affinities", AFFINITY),
        list("spread", "Spreads", Content::Spec(&SPREAD)),
        one("meta", "Meta", Content::StrMap),
        one("update", "Update", Content::Spec(&UPDATE)),
        one("migrate", "Migrate", Content::Spec(&MIGRATE)),
        one("reschedule", "Reschedule", Content::Spec(&RESCHEDULE)),
        one("periodic", "Periodic", Content::Spec(&PERIODIC)),
        one(
            "parameterized",
            "ParameterizedJob",
            Content::Spec(&PARAMETERIZED),
        ),
        generic("multiregion", "Multiregion"),
        one("ui", "UI", Content::Spec(&UI)),
        one("vault", "Vault", Content::Spec(&VAULT)),
        generic_list("secret", "Secrets"),
    ],
    fixup: None,
};
