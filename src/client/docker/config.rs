//! The `docker` driver's reading of a task's `Config`, and the container it asks the engine
//! for. Pure: no engine, no files, no clock — every function here is a plain transformation
//! tested without Docker.
//!
//! ```text
//!  Task.Config ──parse──▶ DockerConfig ──container_spec(+ ContainerFacts)──▶ ContainerCreateBody
//!  (free-form)            (typed, checked)   (env, ports, dirs, resources)    (what the engine gets)
//! ```
//!
//! Keys teamster acts on: `image` (required), `load`, `command`, `args`, `entrypoint`,
//! `ports`, `volumes`, `labels`, `network_mode`. `auth_soft_fail` (in Nomad's `job init`
//! example) is taken as a boolean: it only changes what happens when registry
//! authentication fails, and teamster never pulls (and refuses `auth`). Every other key is
//! refused by name: an option silently ignored (`privileged`, `force_pull`, `auth`, …)
//! would look like success while doing something else.

use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};

use bollard::models::{ContainerCreateBody, HostConfig, PortBinding};
use teamster_storage::model::{AllocatedPortMapping, ConfigValue};

/// The config keys the driver knows, in the order the docs list them.
pub const KNOWN_KEYS: &[&str] = &[
    "image",
    "load",
    "command",
    "args",
    "entrypoint",
    "ports",
    "volumes",
    "labels",
    "network_mode",
    "auth_soft_fail",
];

/// Label carrying the allocation id on every container the driver makes (Nomad's name, so
/// tools written for Nomad's containers find teamster's).
pub const LABEL_ALLOC_ID: &str = "com.hashicorp.nomad.alloc_id";
/// Label carrying the task name.
pub const LABEL_TASK_NAME: &str = "com.hashicorp.nomad.task_name";
/// Label carrying the job name.
pub const LABEL_JOB_NAME: &str = "com.hashicorp.nomad.job_name";
/// Label carrying the node id: a client removes orphans only among its own containers, so
/// several clients may share one engine.
pub const LABEL_NODE_ID: &str = "com.hashicorp.nomad.node_id";

/// Where the allocation's shared directory appears in the container.
pub const ALLOC_MOUNT: &str = "/alloc";
/// Where the task's `local` directory appears in the container.
pub const LOCAL_MOUNT: &str = "/local";
/// Where the task's secrets directory appears in the container.
pub const SECRETS_MOUNT: &str = "/secrets";

/// Docker's minimum CPU shares.
const MIN_CPU_SHARES: u64 = 2;

/// Why a task's docker config cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DockerConfigError {
    /// A key the driver does not act on.
    #[error(
        "docker config key {key:?} is not supported by teamster; remove it (supported: {})",
        KNOWN_KEYS.join(", ")
    )]
    UnknownKey {
        /// The key.
        key: String,
    },
    /// `env` inside the config block: the task's own `env` block is the place.
    #[error("docker config key \"env\" is not a docker option; set the task's env block (it reaches the container with the NOMAD_* variables)")]
    EnvInConfig,
    /// `image` is missing or empty.
    #[error("docker config needs an image")]
    MissingImage,
    /// A value of the wrong shape.
    #[error("docker config key {key:?} must be {expected}, got {got}")]
    WrongType {
        /// The key.
        key: &'static str,
        /// What it must be.
        expected: &'static str,
        /// What it was.
        got: String,
    },
    /// A port label the group's network does not have.
    #[error("Port {label:?} not found, check network block")]
    UnknownPort {
        /// The label.
        label: String,
    },
    /// Ports asked for with no network to map them on.
    #[error("ports cannot be mapped with network_mode \"none\"")]
    PortsWithoutNetwork,
    /// `network_mode` in a group with a network of its own (bridge or cni mode).
    #[error(
        "network_mode cannot be set in a group with a network namespace of its own (bridge \
         or cni mode): the task joins the allocation's namespace"
    )]
    GroupNetworkMode,
    /// A volume naming a host path outside the task directory.
    #[error("volumes are not enabled; cannot mount host path: {source_path:?}")]
    VolumesNotEnabled {
        /// The host path asked for.
        source_path: String,
    },
    /// A volume that is not `src:dst[:opts]`.
    #[error(
        "invalid volume {volume:?}: must be \"src:dst\" or \"src:dst:opts\" with an absolute dst"
    )]
    BadVolume {
        /// The entry.
        volume: String,
    },
    /// A network mode teamster does not offer.
    #[error("network_mode {mode:?} is not supported (use \"bridge\", \"host\" or \"none\")")]
    BadNetworkMode {
        /// The mode.
        mode: String,
    },
    /// `load` outside the task directory.
    #[error("load {path:?} must be a relative path inside the task directory")]
    BadLoadPath {
        /// The path.
        path: String,
    },
}

/// How the container is networked (`network_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NetworkMode {
    /// Docker's default bridge; ports are published on the node's address.
    #[default]
    Bridge,
    /// The host's network stack; the task binds its ports itself.
    Host,
    /// No network at all.
    None,
}

impl NetworkMode {
    fn as_docker(self) -> &'static str {
        match self {
            NetworkMode::Bridge => "bridge",
            NetworkMode::Host => "host",
            NetworkMode::None => "none",
        }
    }
}

/// A `volumes` entry: a path inside the task directory mounted at `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// Relative to the task directory.
    pub source: PathBuf,
    /// Absolute, in the container.
    pub target: String,
    /// Docker's bind options (`ro`, `rw`, …), if any.
    pub options: Option<String>,
}

/// A task's docker config, checked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DockerConfig {
    /// The image; it must be present on the node (teamster never pulls).
    pub image: String,
    /// An image archive (`docker save` format), relative to the task directory, loaded into
    /// the engine before the image is looked up.
    pub load: Option<PathBuf>,
    /// The container's command (the first word of `Cmd`).
    pub command: Option<String>,
    /// Arguments after the command (or the whole `Cmd` without one).
    pub args: Vec<String>,
    /// Replaces the image's entrypoint.
    pub entrypoint: Option<Vec<String>>,
    /// Port labels of the group's network to publish.
    pub ports: Vec<String>,
    /// Extra mounts from inside the task directory.
    pub volumes: Vec<Volume>,
    /// The operator's labels (teamster's own win on a clash).
    pub labels: BTreeMap<String, String>,
    /// The network mode.
    pub network_mode: NetworkMode,
    /// Whether the task set `network_mode` (it may not in a bridge group).
    pub network_mode_set: bool,
}

fn describe(v: &ConfigValue) -> String {
    match v {
        ConfigValue::Null => "null".into(),
        ConfigValue::Bool(b) => format!("the boolean {b}"),
        ConfigValue::Int(i) => format!("the number {i}"),
        ConfigValue::Float(f) => format!("the number {f}"),
        ConfigValue::String(s) => format!("the string {s:?}"),
        ConfigValue::List(_) => "a list".into(),
        ConfigValue::Map(_) => "a map".into(),
    }
}

fn scalar(v: &ConfigValue) -> Option<String> {
    match v {
        ConfigValue::String(s) => Some(s.clone()),
        ConfigValue::Int(i) => Some(i.to_string()),
        ConfigValue::Float(f) => Some(f.to_string()),
        ConfigValue::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn string(key: &'static str, v: &ConfigValue) -> Result<Option<String>, DockerConfigError> {
    match v {
        ConfigValue::Null => Ok(None),
        ConfigValue::String(s) => Ok(Some(s.clone())),
        other => Err(DockerConfigError::WrongType {
            key,
            expected: "a string",
            got: describe(other),
        }),
    }
}

fn strings(key: &'static str, v: &ConfigValue) -> Result<Vec<String>, DockerConfigError> {
    let wrong = |got: &ConfigValue| DockerConfigError::WrongType {
        key,
        expected: "a list of strings",
        got: describe(got),
    };
    match v {
        ConfigValue::Null => Ok(Vec::new()),
        ConfigValue::List(items) => items
            .iter()
            .map(|i| match i {
                ConfigValue::Map(_) | ConfigValue::List(_) | ConfigValue::Null => Err(wrong(i)),
                other => Ok(scalar(other).unwrap_or_default()),
            })
            .collect(),
        other => Err(wrong(other)),
    }
}

/// `path` as a relative path that stays inside the directory it is joined to.
fn inside(path: &str) -> Option<PathBuf> {
    let p = Path::new(path);
    if path.is_empty() || p.is_absolute() {
        return None;
    }
    let mut depth = 0i32;
    for c in p.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(p.to_path_buf())
}

/// One `volumes` entry, `src:dst[:opts]`: a relative `src` inside the task directory is
/// mounted; any other host path is refused (teamster has no `volumes { enabled = true }`).
pub fn parse_volume(entry: &str) -> Result<Volume, DockerConfigError> {
    let bad = || DockerConfigError::BadVolume {
        volume: entry.to_string(),
    };
    let parts: Vec<&str> = entry.split(':').collect();
    let (source, target, options) = match parts.as_slice() {
        [s, t] => (*s, *t, None),
        [s, t, o] if !o.is_empty() => (*s, *t, Some(o.to_string())),
        _ => return Err(bad()),
    };
    if source.is_empty() || !target.starts_with('/') {
        return Err(bad());
    }
    let Some(source) = inside(source) else {
        return Err(DockerConfigError::VolumesNotEnabled {
            source_path: source.to_string(),
        });
    };
    Ok(Volume {
        source,
        target: target.to_string(),
        options,
    })
}

/// Read a task's `Config` as the docker driver does; every key is checked.
pub fn parse(config: &BTreeMap<String, ConfigValue>) -> Result<DockerConfig, DockerConfigError> {
    let mut out = DockerConfig::default();
    for (key, value) in config {
        match key.as_str() {
            "image" => out.image = string("image", value)?.unwrap_or_default(),
            "load" => {
                if let Some(path) = string("load", value)?.filter(|p| !p.is_empty()) {
                    out.load = Some(
                        inside(&path)
                            .ok_or(DockerConfigError::BadLoadPath { path: path.clone() })?,
                    );
                }
            }
            "command" => out.command = string("command", value)?.filter(|c| !c.is_empty()),
            "args" => out.args = strings("args", value)?,
            "entrypoint" => {
                let e = strings("entrypoint", value)?;
                out.entrypoint = (!e.is_empty()).then_some(e);
            }
            "ports" => out.ports = strings("ports", value)?,
            "volumes" => {
                out.volumes = strings("volumes", value)?
                    .iter()
                    .map(|v| parse_volume(v))
                    .collect::<Result<_, _>>()?
            }
            "labels" => {
                out.labels = match value {
                    ConfigValue::Null => BTreeMap::new(),
                    ConfigValue::Map(m) => m
                        .iter()
                        .map(|(k, v)| match scalar(v) {
                            Some(s) => Ok((k.clone(), s)),
                            None => Err(DockerConfigError::WrongType {
                                key: "labels",
                                expected: "a map of strings",
                                got: format!("{} for label {k:?}", describe(v)),
                            }),
                        })
                        .collect::<Result<_, _>>()?,
                    // HCL's `labels { a = "b" }` block may arrive as a list of one map.
                    ConfigValue::List(items) => {
                        let mut labels = BTreeMap::new();
                        for item in items {
                            let ConfigValue::Map(m) = item else {
                                return Err(DockerConfigError::WrongType {
                                    key: "labels",
                                    expected: "a map of strings",
                                    got: describe(value),
                                });
                            };
                            for (k, v) in m {
                                let s = scalar(v).ok_or_else(|| DockerConfigError::WrongType {
                                    key: "labels",
                                    expected: "a map of strings",
                                    got: format!("{} for label {k:?}", describe(v)),
                                })?;
                                labels.insert(k.clone(), s);
                            }
                        }
                        labels
                    }
                    other => {
                        return Err(DockerConfigError::WrongType {
                            key: "labels",
                            expected: "a map of strings",
                            got: describe(other),
                        })
                    }
                }
            }
            "network_mode" => {
                let mode = string("network_mode", value)?;
                out.network_mode_set = mode.as_deref().is_some_and(|m| !m.is_empty());
                out.network_mode = match mode.as_deref() {
                    None | Some("") | Some("bridge") | Some("default") => NetworkMode::Bridge,
                    Some("host") => NetworkMode::Host,
                    Some("none") => NetworkMode::None,
                    Some(other) => {
                        return Err(DockerConfigError::BadNetworkMode {
                            mode: other.to_string(),
                        })
                    }
                }
            }
            "auth_soft_fail" => match value {
                ConfigValue::Bool(_) | ConfigValue::Null => {}
                other => {
                    return Err(DockerConfigError::WrongType {
                        key: "auth_soft_fail",
                        expected: "true or false",
                        got: describe(other),
                    })
                }
            },
            "env" => return Err(DockerConfigError::EnvInConfig),
            other => {
                return Err(DockerConfigError::UnknownKey {
                    key: other.to_string(),
                })
            }
        }
    }
    if out.image.trim().is_empty() {
        return Err(DockerConfigError::MissingImage);
    }
    if out.network_mode == NetworkMode::None && !out.ports.is_empty() {
        return Err(DockerConfigError::PortsWithoutNetwork);
    }
    Ok(out)
}

/// The container of `task` in `alloc_id`: `<task>-<alloc id>`, with `/` (not allowed in a
/// container name) as `_`.
pub fn container_name(task: &str, alloc_id: &str) -> String {
    format!("{task}-{alloc_id}").replace('/', "_")
}

/// Host directories the container sees.
#[derive(Debug, Clone, Copy)]
pub struct MountDirs<'a> {
    /// The allocation's shared directory, at [`ALLOC_MOUNT`].
    pub alloc: &'a Path,
    /// The task directory (where `volumes` sources are).
    pub task: &'a Path,
    /// The task's `local` directory, at [`LOCAL_MOUNT`].
    pub local: &'a Path,
    /// The task's secrets, at [`SECRETS_MOUNT`].
    pub secrets: &'a Path,
}

/// What the container is made of besides the task's config.
#[derive(Debug, Clone, Copy)]
pub struct ContainerFacts<'a> {
    /// The task's name.
    pub task_name: &'a str,
    /// The allocation's id.
    pub alloc_id: &'a str,
    /// The job's name.
    pub job_name: &'a str,
    /// This node's id.
    pub node_id: &'a str,
    /// The task's environment (taskenv: `NOMAD_*` and its own `env`).
    pub env: &'a BTreeMap<String, String>,
    /// The group's allocated ports.
    pub ports: &'a [AllocatedPortMapping],
    /// Host directories to mount.
    pub dirs: MountDirs<'a>,
    /// `resources.cpu`, MHz.
    pub cpu_mhz: u64,
    /// `resources.memory_mb`.
    pub memory_mb: u64,
    /// `resources.memory_max` where it applies (memory oversubscription), else 0: the
    /// container's hard limit, with `memory_mb` its reservation.
    pub memory_max_mb: u64,
    /// The task's `user` (the engine finds it in the image); empty for the image's own.
    pub user: &'a str,
    /// The host volumes it mounts.
    pub mounts: &'a [crate::client::volumes::HostMount],
    /// The network mode of its group's namespace (bridge mode: `container:<pause>`).
    pub group_network: Option<&'a str>,
    /// The file bound read-only at `/etc/resolv.conf` (its group network's `dns` block).
    pub resolv_conf: Option<&'a Path>,
    /// The file bound at `/etc/hosts` (its allocation's namespace's hosts file).
    pub hosts: Option<&'a Path>,
}

/// The labels teamster puts on a container.
pub fn own_labels(facts: &ContainerFacts) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_ALLOC_ID.to_string(), facts.alloc_id.to_string()),
        (LABEL_TASK_NAME.to_string(), facts.task_name.to_string()),
        (LABEL_JOB_NAME.to_string(), facts.job_name.to_string()),
        (LABEL_NODE_ID.to_string(), facts.node_id.to_string()),
    ])
}

/// The container create request for `cfg` with `facts`. Fails on a port label the group's
/// network lacks.
pub fn container_spec(
    cfg: &DockerConfig,
    facts: &ContainerFacts,
) -> Result<ContainerCreateBody, DockerConfigError> {
    // The task sees its directories where they are mounted, not where the host keeps them.
    let mut env = facts.env.clone();
    env.insert("NOMAD_ALLOC_DIR".into(), ALLOC_MOUNT.into());
    env.insert("NOMAD_TASK_DIR".into(), LOCAL_MOUNT.into());
    env.insert("NOMAD_SECRETS_DIR".into(), SECRETS_MOUNT.into());
    let env: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();

    let cmd: Vec<String> = cfg
        .command
        .iter()
        .cloned()
        .chain(cfg.args.iter().cloned())
        .collect();

    let mut labels: HashMap<String, String> = cfg
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    labels.extend(own_labels(facts));

    if facts.group_network.is_some() && cfg.network_mode_set {
        return Err(DockerConfigError::GroupNetworkMode);
    }
    let mut exposed = Vec::new();
    let mut bindings: HashMap<String, Option<Vec<PortBinding>>> = HashMap::new();
    for label in &cfg.ports {
        let port = facts
            .ports
            .iter()
            .find(|p| &p.label == label)
            .ok_or_else(|| DockerConfigError::UnknownPort {
                label: label.clone(),
            })?;
        let inside = if port.to > 0 {
            port.to as u32
        } else {
            port.value
        };
        for proto in ["tcp", "udp"] {
            let key = format!("{inside}/{proto}");
            exposed.push(key.clone());
            let binding = PortBinding {
                host_ip: (!port.host_ip.is_empty()).then(|| port.host_ip.clone()),
                host_port: Some(port.value.to_string()),
            };
            bindings
                .entry(key)
                .or_default()
                .get_or_insert_with(Vec::new)
                .push(binding);
        }
    }
    // The host network has no mapping: the task binds the host ports itself. In a group's
    // own namespace the group's network publishes every port (Nomad's driver maps none).
    let publish = cfg.network_mode == NetworkMode::Bridge
        && facts.group_network.is_none()
        && !exposed.is_empty();

    let bind = |host: &Path, target: &str, opts: Option<&str>| match opts {
        Some(o) => format!("{}:{target}:{o}", host.display()),
        None => format!("{}:{target}", host.display()),
    };
    let mut binds = vec![
        bind(facts.dirs.alloc, ALLOC_MOUNT, None),
        // The collector writes the logs; the task reads them.
        bind(
            &facts.dirs.alloc.join(crate::client::allocdir::LOGS_DIR),
            &format!("{ALLOC_MOUNT}/{}", crate::client::allocdir::LOGS_DIR),
            Some("ro"),
        ),
        bind(facts.dirs.local, LOCAL_MOUNT, None),
        bind(facts.dirs.secrets, SECRETS_MOUNT, None),
    ];
    for v in &cfg.volumes {
        binds.push(bind(
            &facts.dirs.task.join(&v.source),
            &v.target,
            v.options.as_deref(),
        ));
    }

    for m in facts.mounts {
        binds.push(format!(
            "{}:{}:{}",
            m.host_path,
            m.destination,
            m.bind_options()
        ));
    }
    // Bound over the engine's own (it writes neither where a mount is): the dns block's
    // resolver read-only, the hosts file as Nomad binds it (the tasks may change it).
    if let Some(path) = facts.resolv_conf {
        binds.push(bind(path, "/etc/resolv.conf", Some("ro")));
    }
    if let Some(path) = facts.hosts {
        binds.push(bind(path, "/etc/hosts", None));
    }

    // With memory_max: the most it may use, and memory_mb what it is guaranteed; with
    // Nomad's `-1`, no limit at all (Docker's 0) and memory_mb guaranteed.
    let (limit, reservation) =
        teamster_storage::model::memory_limits(facts.memory_mb, facts.memory_max_mb);
    Ok(ContainerCreateBody {
        image: Some(cfg.image.clone()),
        cmd: (!cmd.is_empty()).then_some(cmd),
        entrypoint: cfg.entrypoint.clone(),
        env: Some(env),
        user: (!facts.user.is_empty()).then(|| facts.user.to_string()),
        labels: Some(labels),
        exposed_ports: publish.then_some(exposed),
        host_config: Some(HostConfig {
            binds: Some(binds),
            port_bindings: publish.then_some(bindings),
            network_mode: Some(
                facts
                    .group_network
                    .unwrap_or(cfg.network_mode.as_docker())
                    .to_string(),
            ),
            cpu_shares: Some(facts.cpu_mhz.max(MIN_CPU_SHARES).min(i64::MAX as u64) as i64),
            // A task that reserves whole cores runs on them alone.
            cpuset_cpus: facts
                .env
                .get(teamster_storage::model::CPU_CORES_ENV)
                .cloned(),
            memory: limit.map(|l| l.min(i64::MAX as u64) as i64),
            memory_reservation: reservation.map(|r| r.min(i64::MAX as u64) as i64),
            ..HostConfig::default()
        }),
        ..ContainerCreateBody::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, ConfigValue)]) -> BTreeMap<String, ConfigValue> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    fn list(items: &[&str]) -> ConfigValue {
        ConfigValue::List(items.iter().map(|i| (*i).into()).collect())
    }

    fn port(label: &str, value: u32, to: i32) -> AllocatedPortMapping {
        AllocatedPortMapping {
            label: label.into(),
            value,
            to,
            host_ip: "10.0.0.5".into(),
        }
    }

    fn spec(
        c: &DockerConfig,
        ports: &[AllocatedPortMapping],
    ) -> Result<ContainerCreateBody, DockerConfigError> {
        spec_with_max(c, ports, 0)
    }

    fn spec_with_max(
        c: &DockerConfig,
        ports: &[AllocatedPortMapping],
        memory_max_mb: u64,
    ) -> Result<ContainerCreateBody, DockerConfigError> {
        spec_as(c, ports, memory_max_mb, "")
    }

    fn spec_as(
        c: &DockerConfig,
        ports: &[AllocatedPortMapping],
        memory_max_mb: u64,
        user: &str,
    ) -> Result<ContainerCreateBody, DockerConfigError> {
        let env = BTreeMap::from([
            (
                "NOMAD_TASK_DIR".to_string(),
                "/host/a1/web/local".to_string(),
            ),
            ("GREETING".to_string(), "hi".to_string()),
        ]);
        let facts = ContainerFacts {
            task_name: "web",
            alloc_id: "a1",
            job_name: "site",
            node_id: "n1",
            env: &env,
            ports,
            dirs: MountDirs {
                alloc: Path::new("/data/alloc/a1/alloc"),
                task: Path::new("/data/alloc/a1/web"),
                local: Path::new("/data/alloc/a1/web/local"),
                secrets: Path::new("/data/alloc/a1/web/secrets"),
            },
            cpu_mhz: 500,
            memory_mb: 256,
            memory_max_mb,
            user,
            mounts: &[],
            group_network: None,
            resolv_conf: None,
            hosts: None,
        };
        container_spec(c, &facts)
    }

    #[test]
    fn in_a_bridge_group_the_container_joins_the_pause_container_and_publishes_nothing() {
        let env = BTreeMap::new();
        let facts = |group_network| ContainerFacts {
            task_name: "web",
            alloc_id: "a1",
            job_name: "site",
            node_id: "n1",
            env: &env,
            ports: &[],
            dirs: MountDirs {
                alloc: Path::new("/a"),
                task: Path::new("/t"),
                local: Path::new("/t/local"),
                secrets: Path::new("/t/secrets"),
            },
            cpu_mhz: 100,
            memory_mb: 64,
            memory_max_mb: 0,
            user: "",
            mounts: &[],
            group_network,
            resolv_conf: Some(Path::new("/t/resolv.conf")),
            hosts: Some(Path::new("/a1/hosts")),
        };
        let c = parse(&cfg(&[("image", "teamster:dev".into())])).unwrap();
        let body = container_spec(&c, &facts(Some("container:teamster-pause-a1"))).unwrap();
        let host = body.host_config.unwrap();
        assert_eq!(
            host.network_mode.as_deref(),
            Some("container:teamster-pause-a1")
        );
        assert!(host.port_bindings.is_none());
        assert!(body.exposed_ports.is_none());
        // The network's files over the engine's; the hostname is the pause container's.
        let binds = host.binds.unwrap_or_default();
        for wanted in ["/t/resolv.conf:/etc/resolv.conf:ro", "/a1/hosts:/etc/hosts"] {
            assert!(binds.iter().any(|b| b == wanted), "{wanted} in {binds:?}");
        }
        assert!(body.hostname.is_none());
        let c = parse(&cfg(&[
            ("image", "teamster:dev".into()),
            ("network_mode", "host".into()),
        ]))
        .unwrap();
        let e = container_spec(&c, &facts(Some("container:x"))).unwrap_err();
        assert!(
            e.to_string().starts_with("network_mode cannot be set"),
            "{e}"
        );
        // `ports` names group ports, which the group's network publishes already: nothing
        // is mapped by the engine (as Nomad's driver), an unknown label is still refused.
        let c = parse(&cfg(&[
            ("image", "teamster:dev".into()),
            ("ports", list(&["http"])),
        ]))
        .unwrap();
        let e = container_spec(&c, &facts(Some("container:x"))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Port \"http\" not found, check network block"
        );
        let ports = [port("http", 23000, 8080)];
        let with_port = ContainerFacts {
            ports: &ports,
            ..facts(Some("container:x"))
        };
        let body = container_spec(&c, &with_port).unwrap();
        let host = body.host_config.unwrap();
        assert!(host.port_bindings.is_none());
        assert!(body.exposed_ports.is_none());
        // An empty network_mode is no setting.
        let c = parse(&cfg(&[
            ("image", "teamster:dev".into()),
            ("network_mode", "".into()),
        ]))
        .unwrap();
        assert!(container_spec(&c, &facts(Some("container:x"))).is_ok());
    }

    #[test]
    fn the_task_user_is_the_containers() {
        let c = parse(&cfg(&[("image", "teamster:dev".into())])).unwrap();
        assert_eq!(
            spec_as(&c, &[], 0, "1000:50").unwrap().user.as_deref(),
            Some("1000:50")
        );
        assert_eq!(spec_as(&c, &[], 0, "").unwrap().user, None);
    }

    #[test]
    fn a_full_config_is_read() {
        let c = parse(&cfg(&[
            ("image", "teamster:dev".into()),
            ("entrypoint", list(&["/bin/busybox"])),
            ("args", list(&["sh", "-c", "echo hello"])),
            ("ports", list(&["http"])),
            ("volumes", list(&["local/data:/data:ro"])),
            (
                "labels",
                ConfigValue::Map(BTreeMap::from([("team".to_string(), "web".into())])),
            ),
            ("network_mode", "host".into()),
        ]))
        .unwrap();
        assert_eq!(c.image, "teamster:dev");
        assert_eq!(c.entrypoint, Some(vec!["/bin/busybox".to_string()]));
        assert_eq!(c.args, ["sh", "-c", "echo hello"]);
        assert_eq!(c.ports, ["http"]);
        assert_eq!(
            c.volumes,
            [Volume {
                source: "local/data".into(),
                target: "/data".into(),
                options: Some("ro".into())
            }]
        );
        assert_eq!(c.labels["team"], "web");
        assert_eq!(c.network_mode, NetworkMode::Host);
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        for key in ["privileged", "force_pull", "auth", "cap_add", "logging"] {
            let e = parse(&cfg(&[
                ("image", "x".into()),
                (key, ConfigValue::Bool(true)),
            ]))
            .unwrap_err();
            assert_eq!(e, DockerConfigError::UnknownKey { key: key.into() });
            assert!(e.to_string().contains(&format!("{key:?}")), "{e}");
        }
        let e = parse(&cfg(&[("image", "x".into()), ("env", list(&[]))])).unwrap_err();
        assert_eq!(e, DockerConfigError::EnvInConfig);
        // Nomad's `job init` example sets it; it changes nothing where nothing is pulled.
        assert!(parse(&cfg(&[
            ("image", "x".into()),
            ("auth_soft_fail", ConfigValue::Bool(true))
        ]))
        .is_ok());
        assert!(parse(&cfg(&[
            ("image", "x".into()),
            ("auth_soft_fail", "yes".into())
        ]))
        .is_err());
    }

    #[test]
    fn image_is_required_and_values_are_typed() {
        assert_eq!(parse(&cfg(&[])), Err(DockerConfigError::MissingImage));
        assert_eq!(
            parse(&cfg(&[("image", "".into())])),
            Err(DockerConfigError::MissingImage)
        );
        let e = parse(&cfg(&[("image", ConfigValue::Int(3))])).unwrap_err();
        assert!(
            matches!(e, DockerConfigError::WrongType { key: "image", .. }),
            "{e}"
        );
        let e = parse(&cfg(&[("image", "x".into()), ("args", "echo".into())])).unwrap_err();
        assert!(
            matches!(e, DockerConfigError::WrongType { key: "args", .. }),
            "{e}"
        );
        let e = parse(&cfg(&[
            ("image", "x".into()),
            ("network_mode", "container:x".into()),
        ]))
        .unwrap_err();
        assert_eq!(
            e,
            DockerConfigError::BadNetworkMode {
                mode: "container:x".into()
            }
        );
        // Numbers in argument lists are taken as their text, as HCL users write them.
        let c = parse(&cfg(&[
            ("image", "x".into()),
            (
                "args",
                ConfigValue::List(vec!["sleep".into(), ConfigValue::Int(30)]),
            ),
        ]))
        .unwrap();
        assert_eq!(c.args, ["sleep", "30"]);
    }

    #[test]
    fn host_paths_are_refused_and_task_dir_paths_mounted() {
        for v in [
            "/etc:/etc",
            "/var/run/docker.sock:/sock",
            "../../x:/x",
            "local/../../x:/x",
        ] {
            let e = parse(&cfg(&[("image", "x".into()), ("volumes", list(&[v]))])).unwrap_err();
            assert!(
                matches!(e, DockerConfigError::VolumesNotEnabled { .. }),
                "{v}: {e}"
            );
            assert!(
                e.to_string()
                    .starts_with("volumes are not enabled; cannot mount host path"),
                "{e}"
            );
        }
        for v in ["nocolon", "a:relative", "a:/b:c:d", ":/x"] {
            let e = parse_volume(v).unwrap_err();
            assert!(matches!(e, DockerConfigError::BadVolume { .. }), "{v}: {e}");
        }
        let c = parse(&cfg(&[
            ("image", "x".into()),
            ("volumes", list(&["local/conf:/etc/app"])),
        ]))
        .unwrap();
        let s = spec(&c, &[]).unwrap();
        let binds = s.host_config.unwrap().binds.unwrap();
        assert_eq!(
            binds,
            [
                "/data/alloc/a1/alloc:/alloc",
                "/data/alloc/a1/alloc/logs:/alloc/logs:ro",
                "/data/alloc/a1/web/local:/local",
                "/data/alloc/a1/web/secrets:/secrets",
                "/data/alloc/a1/web/local/conf:/etc/app",
            ]
        );
    }

    #[test]
    fn load_must_stay_in_the_task_dir() {
        let c = parse(&cfg(&[
            ("image", "x".into()),
            ("load", "local/img.tar".into()),
        ]))
        .unwrap();
        assert_eq!(c.load, Some(PathBuf::from("local/img.tar")));
        for bad in ["/tmp/img.tar", "../img.tar"] {
            assert_eq!(
                parse(&cfg(&[("image", "x".into()), ("load", bad.into())])),
                Err(DockerConfigError::BadLoadPath { path: bad.into() })
            );
        }
    }

    #[test]
    fn ports_map_labels_to_container_ports() {
        let c = parse(&cfg(&[
            ("image", "x".into()),
            ("ports", list(&["http", "db"])),
        ]))
        .unwrap();
        let s = spec(
            &c,
            &[
                port("http", 23456, 8080),
                port("db", 25000, 0),
                port("x", 1, 0),
            ],
        )
        .unwrap();
        let mut exposed = s.exposed_ports.clone().unwrap();
        exposed.sort();
        assert_eq!(exposed, ["25000/tcp", "25000/udp", "8080/tcp", "8080/udp"]);
        let hc = s.host_config.unwrap();
        let b = hc.port_bindings.unwrap();
        assert_eq!(b.len(), 4, "{b:?}");
        assert_eq!(
            b["8080/tcp"],
            Some(vec![PortBinding {
                host_ip: Some("10.0.0.5".into()),
                host_port: Some("23456".into())
            }])
        );
        assert_eq!(
            b["25000/udp"].as_ref().unwrap()[0].host_port.as_deref(),
            Some("25000")
        );
        assert_eq!(hc.network_mode.as_deref(), Some("bridge"));
    }

    #[test]
    fn an_unknown_port_label_is_named() {
        let c = parse(&cfg(&[("image", "x".into()), ("ports", list(&["admin"]))])).unwrap();
        let e = spec(&c, &[port("http", 23456, 0)]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Port \"admin\" not found, check network block"
        );
        let e = parse(&cfg(&[
            ("image", "x".into()),
            ("ports", list(&["http"])),
            ("network_mode", "none".into()),
        ]))
        .unwrap_err();
        assert_eq!(e, DockerConfigError::PortsWithoutNetwork);
    }

    #[test]
    fn host_networking_publishes_nothing() {
        let c = parse(&cfg(&[
            ("image", "x".into()),
            ("ports", list(&["http"])),
            ("network_mode", "host".into()),
        ]))
        .unwrap();
        let s = spec(&c, &[port("http", 23456, 0)]).unwrap();
        assert_eq!(s.exposed_ports, None);
        let hc = s.host_config.unwrap();
        assert_eq!(hc.port_bindings, None);
        assert_eq!(hc.network_mode.as_deref(), Some("host"));
        // An unknown label is an error in host mode too.
        assert!(spec(&c, &[]).is_err());
    }

    #[test]
    fn the_container_gets_env_labels_command_and_resources() {
        let c = parse(&cfg(&[
            ("image", "app:1".into()),
            ("command", "/bin/app".into()),
            ("args", list(&["--port", "80"])),
            (
                "labels",
                ConfigValue::Map(BTreeMap::from([
                    ("team".to_string(), "web".into()),
                    (LABEL_ALLOC_ID.to_string(), "forged".into()),
                ])),
            ),
        ]))
        .unwrap();
        let s = spec(&c, &[]).unwrap();
        assert_eq!(s.image.as_deref(), Some("app:1"));
        assert_eq!(s.cmd.unwrap(), ["/bin/app", "--port", "80"]);
        assert_eq!(s.entrypoint, None);
        let env = s.env.unwrap();
        assert!(env.contains(&"GREETING=hi".to_string()), "{env:?}");
        assert!(
            env.contains(&"NOMAD_TASK_DIR=/local".to_string()),
            "{env:?}"
        );
        assert!(
            env.contains(&"NOMAD_ALLOC_DIR=/alloc".to_string()),
            "{env:?}"
        );
        let labels = s.labels.unwrap();
        assert_eq!(labels["team"], "web");
        assert_eq!(labels[LABEL_ALLOC_ID], "a1", "teamster's labels win");
        assert_eq!(labels[LABEL_TASK_NAME], "web");
        assert_eq!(labels[LABEL_JOB_NAME], "site");
        assert_eq!(labels[LABEL_NODE_ID], "n1");
        let hc = s.host_config.unwrap();
        assert_eq!(hc.cpu_shares, Some(500));
        assert_eq!(hc.memory, Some(256 * 1024 * 1024));
        assert_eq!(hc.memory_reservation, None);
    }

    #[test]
    fn memory_max_is_the_hard_limit_and_memory_the_reservation() {
        let c = parse(&cfg(&[("image", "busybox".into())])).unwrap();
        let hc = spec_with_max(&c, &[], 1024).unwrap().host_config.unwrap();
        assert_eq!(hc.memory, Some(1024 * 1024 * 1024));
        assert_eq!(hc.memory_reservation, Some(256 * 1024 * 1024));
        // A memory_max below memory (refused at submit) never lowers the limit.
        let hc = spec_with_max(&c, &[], 100).unwrap().host_config.unwrap();
        assert_eq!(hc.memory, Some(256 * 1024 * 1024));
        assert_eq!(hc.memory_reservation, None);
        // Nomad's -1: no hard limit, memory guaranteed.
        let hc = spec_with_max(&c, &[], teamster_storage::model::MEMORY_NO_LIMIT)
            .unwrap()
            .host_config
            .unwrap();
        assert_eq!(hc.memory, None);
        assert_eq!(hc.memory_reservation, Some(256 * 1024 * 1024));
    }

    #[test]
    fn container_names_follow_nomad() {
        assert_eq!(container_name("web", "0a1b"), "web-0a1b");
        assert_eq!(container_name("a/b", "x"), "a_b-x");
    }
}
