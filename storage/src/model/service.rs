//! Native service discovery (Nomad's `provider = "nomad"`): the `service` blocks of a job's
//! groups and tasks, and the [`ServiceRegistration`]s that clients write while an
//! allocation runs and that the servers remove when it stops, when its node goes down or
//! when it is garbage-collected.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::model::connect::ConsulConnect;
use crate::model::de;
use crate::model::ids::{AllocId, JobId, Namespace, NodeId};

/// The only provider teamster registers services with (Nomad's default is Consul, which
/// teamster does not talk to).
pub const PROVIDER_NOMAD: &str = "nomad";

/// Nomad's default provider. A job with a Consul service is accepted as Nomad accepts it and
/// constrained to nodes that fingerprint Consul (`${attr.consul.version}`), which no teamster
/// node does: it stays pending, and nothing is registered anywhere.
pub const PROVIDER_CONSUL: &str = "consul";

/// A `service` block (Nomad's `Service`): a name for the allocation's address and port.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct Service {
    /// The service's name (RFC 1123: letters, digits and dashes; `${…}` interpolated by the
    /// client).
    #[serde(deserialize_with = "de::nullable")]
    pub name: String,
    /// Tags, listed with the service.
    #[serde(deserialize_with = "de::nullable")]
    pub tags: Vec<String>,
    /// The tags a canary registers instead of `tags` until its deployment promotes it (as
    /// Nomad's native service discovery; empty: `tags`).
    #[serde(deserialize_with = "de::nullable")]
    pub canary_tags: Vec<String>,
    /// The group network's port label whose host port is registered (or a port number);
    /// empty registers port 0.
    #[serde(deserialize_with = "de::nullable")]
    pub port_label: String,
    /// How the address is chosen: `auto` or `host` (the node's address and host port of its
    /// port label), or `alloc` (the allocation's own address and port inside, bridge mode).
    #[serde(deserialize_with = "de::nullable")]
    pub address_mode: String,
    /// A fixed address instead of the node's.
    #[serde(deserialize_with = "de::nullable")]
    pub address: String,
    /// `nomad`.
    #[serde(deserialize_with = "de::nullable")]
    pub provider: String,
    /// Free-form metadata. Kept with the job; a native registration carries none, as in
    /// Nomad, where it goes to Consul only — as do `canary_meta`, `tagged_addresses` and
    /// `enable_tag_override` below.
    #[serde(deserialize_with = "de::nullable")]
    pub meta: BTreeMap<String, String>,
    /// A canary's metadata (Consul's).
    #[serde(deserialize_with = "de::nullable")]
    pub canary_meta: BTreeMap<String, String>,
    /// Named addresses (Consul's).
    #[serde(deserialize_with = "de::nullable")]
    pub tagged_addresses: BTreeMap<String, String>,
    /// Let Consul's anti-entropy keep tags changed outside Nomad (Consul's).
    #[serde(deserialize_with = "de::nullable")]
    pub enable_tag_override: bool,
    /// For a group service, the task it belongs to (empty: the allocation's).
    #[serde(deserialize_with = "de::nullable")]
    pub task_name: String,
    /// Health checks the client runs against the service.
    #[serde(deserialize_with = "de::nullable")]
    pub checks: Vec<ServiceCheck>,
    /// Restart the task when its checks keep failing (the default of each check).
    pub check_restart: Option<CheckRestart>,
    /// Nomad's `on_update`: [`ON_UPDATE_REQUIRE_HEALTHY`] (the default) or
    /// [`ON_UPDATE_IGNORE`]; the default of each of its checks.
    #[serde(deserialize_with = "de::nullable")]
    pub on_update: String,
    /// Consul Connect (a group's Consul service only): kept, acted on by no teamster node
    /// (`connect`).
    pub connect: Option<ConsulConnect>,
}

/// A check whose results decide whether an allocation is healthy (Nomad's default).
pub const ON_UPDATE_REQUIRE_HEALTHY: &str = "require_healthy";
/// A readiness check: run and shown, not counted in an allocation's health.
pub const ON_UPDATE_IGNORE: &str = "ignore";
/// Consul's: warnings count as healthy (refused for native checks, which never warn).
pub const ON_UPDATE_IGNORE_WARNINGS: &str = "ignore_warnings";

/// A `check` of a service (Nomad's `ServiceCheck`): native service discovery runs `http` and
/// `tcp` checks; a Consul service's may also be `grpc` or `script`, with Consul's thresholds
/// (kept with the job: a Consul service is never registered by teamster).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ServiceCheck {
    /// Its name (default `service: "<service>" check`).
    #[serde(deserialize_with = "de::nullable")]
    pub name: String,
    /// `http` or `tcp`.
    #[serde(deserialize_with = "de::nullable")]
    pub r#type: String,
    /// The HTTP path (`http`).
    #[serde(deserialize_with = "de::nullable")]
    pub path: String,
    /// The HTTP method (default `GET`).
    #[serde(deserialize_with = "de::nullable")]
    pub method: String,
    /// `http` (the default) or `https` (verified against the node's roots unless
    /// `tls_skip_verify`).
    #[serde(deserialize_with = "de::nullable")]
    pub protocol: String,
    /// The port label to check (default: the service's).
    #[serde(deserialize_with = "de::nullable")]
    pub port_label: String,
    /// How often, nanoseconds (at least 1 s).
    #[serde(deserialize_with = "de::nullable")]
    pub interval: u64,
    /// How long one check may take, nanoseconds (at least 1 s).
    #[serde(deserialize_with = "de::nullable")]
    pub timeout: u64,
    /// HTTP headers sent.
    #[serde(deserialize_with = "de::nullable")]
    pub header: BTreeMap<String, Vec<String>>,
    /// An HTTP body sent.
    #[serde(deserialize_with = "de::nullable")]
    pub body: String,
    /// For a group service, the task a restart applies to.
    #[serde(deserialize_with = "de::nullable")]
    pub task_name: String,
    /// Restart the task when this check keeps failing.
    pub check_restart: Option<CheckRestart>,
    /// Nomad's `on_update` (the service's when empty): a check set to
    /// [`ON_UPDATE_IGNORE`] is a readiness check.
    #[serde(deserialize_with = "de::nullable")]
    pub on_update: String,
    /// The status Consul gives the check before its first run (`passing`, `warning`,
    /// `critical`); a native check starts `pending` whatever it says, as in Nomad.
    #[serde(deserialize_with = "de::nullable")]
    pub initial_status: String,
    /// A `script` check's command, run inside its task (Consul's).
    #[serde(deserialize_with = "de::nullable")]
    pub command: String,
    /// The command's arguments.
    #[serde(deserialize_with = "de::nullable")]
    pub args: Vec<String>,
    /// A `grpc` check's service (Consul's).
    #[serde(rename = "GRPCService", deserialize_with = "de::nullable")]
    pub grpc_service: String,
    /// Whether a `grpc` check uses TLS (Consul's).
    #[serde(rename = "GRPCUseTLS", deserialize_with = "de::nullable")]
    pub grpc_use_tls: bool,
    /// The server name TLS verifies (Consul's).
    #[serde(rename = "TLSServerName", deserialize_with = "de::nullable")]
    pub tls_server_name: String,
    /// Skip verifying the certificate of an `https` check (a plain `http` native check has
    /// none to verify, as in Nomad).
    #[serde(rename = "TLSSkipVerify", deserialize_with = "de::nullable")]
    pub tls_skip_verify: bool,
    /// Consul's successes in a row before `passing`.
    #[serde(deserialize_with = "de::nullable")]
    pub success_before_passing: u32,
    /// Consul's failures in a row before `critical`.
    #[serde(deserialize_with = "de::nullable")]
    pub failures_before_critical: u32,
    /// Consul's failures in a row before `warning`.
    #[serde(deserialize_with = "de::nullable")]
    pub failures_before_warning: u32,
    /// Consul's free-form notes (at most 255 characters).
    #[serde(deserialize_with = "de::nullable")]
    pub notes: String,
    /// Have the Connect sidecar's Envoy expose the check's path (an `http` or `grpc` check
    /// of a group service with a sidecar; Consul's, see `connect`).
    #[serde(deserialize_with = "de::nullable")]
    pub expose: bool,
}

impl ServiceCheck {
    /// Whether the check only tells readiness (`on_update = "ignore"`): its results do not
    /// count in the allocation's health.
    pub fn is_readiness(&self) -> bool {
        self.on_update == ON_UPDATE_IGNORE
    }

    /// Its name, or Nomad's default for `service`.
    pub fn name_in(&self, service: &str) -> String {
        if self.name.is_empty() {
            format!("service: {service:?} check")
        } else {
            self.name.clone()
        }
    }
}

/// Nomad's `CheckRestart`: restart the task after `limit` failing checks in a row, not
/// counting the first `grace` after it (re)started.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct CheckRestart {
    /// Failing checks in a row before a restart (0: never).
    #[serde(deserialize_with = "de::nullable")]
    pub limit: u32,
    /// How long after a (re)start failures do not count, nanoseconds.
    #[serde(deserialize_with = "de::nullable")]
    pub grace: u64,
    /// Count warnings as passing (Consul's; native checks have no warnings).
    #[serde(deserialize_with = "de::nullable")]
    pub ignore_warnings: bool,
}

/// The status of one check as a registration carries it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct CheckStatus {
    /// The check's name.
    #[serde(deserialize_with = "de::nullable")]
    pub name: String,
    /// `pending`, `success` or `failure` (Nomad's native check statuses).
    #[serde(deserialize_with = "de::nullable")]
    pub status: String,
}

/// A check that has not run yet.
pub const CHECK_PENDING: &str = "pending";
/// A check that passed.
pub const CHECK_SUCCESS: &str = "success";
/// A check that failed.
pub const CHECK_FAILURE: &str = "failure";

/// One registered instance of a service (Nomad's `ServiceRegistration`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ServiceRegistration {
    /// `_nomad-task-<alloc>-<task | group-<group>>-<service>-<port label>`.
    #[serde(rename = "ID", deserialize_with = "de::nullable")]
    pub id: String,
    /// The service's name.
    #[serde(deserialize_with = "de::nullable")]
    pub service_name: String,
    /// The job's namespace.
    #[serde(deserialize_with = "de::nullable")]
    pub namespace: Namespace,
    /// Where the allocation runs.
    #[serde(rename = "NodeID", deserialize_with = "de::nullable")]
    pub node_id: NodeId,
    /// The node's datacenter.
    #[serde(deserialize_with = "de::nullable")]
    pub datacenter: String,
    /// The job.
    #[serde(rename = "JobID", deserialize_with = "de::nullable")]
    pub job_id: JobId,
    /// The allocation.
    #[serde(rename = "AllocID", deserialize_with = "de::nullable")]
    pub alloc_id: AllocId,
    /// The service's tags.
    #[serde(deserialize_with = "de::nullable")]
    pub tags: Vec<String>,
    /// The address to reach it on.
    #[serde(deserialize_with = "de::nullable")]
    pub address: String,
    /// The port to reach it on.
    #[serde(deserialize_with = "de::nullable")]
    pub port: u32,
    /// Its checks' latest statuses, as its client last sent them (teamster's addition to
    /// Nomad's registration; empty for a service without checks).
    #[serde(deserialize_with = "de::nullable")]
    pub checks: Vec<CheckStatus>,
    /// Raft index of creation (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub create_index: u64,
    /// Raft index of the last change (server-set).
    #[serde(deserialize_with = "de::nullable")]
    pub modify_index: u64,
}

impl ServiceRegistration {
    /// Nomad's registration ID for `service` of `alloc_id`, registered by `task` (a task
    /// service) or by the group `group` (a group service).
    pub fn make_id(alloc_id: &str, task: Option<&str>, group: &str, service: &Service) -> String {
        let owner = match task {
            Some(t) => t.to_string(),
            None => format!("group-{group}"),
        };
        format!(
            "_nomad-task-{alloc_id}-{owner}-{}-{}",
            service.name, service.port_label
        )
    }

    /// Whether the registration is the same but for its indexes.
    pub fn same_as(&self, other: &ServiceRegistration) -> bool {
        let strip = |r: &ServiceRegistration| ServiceRegistration {
            create_index: 0,
            modify_index: 0,
            ..r.clone()
        };
        strip(self) == strip(other)
    }
}

impl Service {
    /// Registered by teamster's clients (`provider = "nomad"`); any other service is never
    /// registered.
    pub fn is_nomad(&self) -> bool {
        self.provider == PROVIDER_NOMAD
    }

    /// Registered in Consul (`provider = "consul"`, Nomad's default).
    pub fn is_consul(&self) -> bool {
        self.provider.is_empty() || self.provider == PROVIDER_CONSUL
    }
}

/// Nomad's rule for a service name: 1 to 63 letters, digits and dashes, not starting or
/// ending with a dash (RFC 1123). Names still holding a `${…}` interpolation are checked
/// once the client has filled them in.
pub fn valid_service_name(name: &str) -> bool {
    if name.contains("${") {
        return true;
    }
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_nomads_shape() {
        let s = Service {
            name: "web".into(),
            port_label: "http".into(),
            ..Service::default()
        };
        assert_eq!(
            ServiceRegistration::make_id("a1", Some("server"), "g", &s),
            "_nomad-task-a1-server-web-http"
        );
        assert_eq!(
            ServiceRegistration::make_id("a1", None, "g", &s),
            "_nomad-task-a1-group-g-web-http"
        );
    }

    #[test]
    fn service_names_are_rfc_1123_labels() {
        for ok in ["web", "web-1", "A9", "${NOMAD_JOB_NAME}-api"] {
            assert!(valid_service_name(ok), "{ok}");
        }
        for bad in ["", "-web", "web-", "web_1", "web.api", &"a".repeat(64)] {
            assert!(!valid_service_name(bad), "{bad}");
        }
    }
}
