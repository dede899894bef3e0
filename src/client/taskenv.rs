//! What a task sees of where it runs: Nomad's `NOMAD_*` environment variables, and the
//! run-time interpolation of its `config` strings and `env` values — `${NOMAD_ALLOC_ID}` and
//! any other variable of its environment, `${node.unique.id}`, `${node.unique.name}`,
//! `${node.datacenter}`, `${node.class}`, `${node.pool}`,
//! `${attr.<attribute>}` and `${meta.<node meta key>}`. The job parser leaves exactly these
//! for the client; a reference to anything else stays as written, as Nomad leaves it.
//! Each port of the group's network gives `NOMAD_PORT_<label>`, `NOMAD_HOST_PORT_<label>`,
//! `NOMAD_IP_<label>`, `NOMAD_ADDR_<label>` (and Nomad's `ALLOC_`/`HOST_` variants, with the
//! allocation's own address in bridge mode), so `${NOMAD_PORT_http}` in a task's args is
//! its port.
//!
//! Pure: [`TaskEnv::new`] takes the facts, [`TaskEnv::apply`] gives the task to start.

use std::collections::BTreeMap;
use std::path::Path;

use teamster_storage::model::{Allocation, ConfigValue, Job, Node, Task};

/// The node facts `${node.*}`, `${attr.*}` and `${meta.*}` read, keyed as they are written.
pub fn node_values(node: &Node) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    out.insert("node.unique.id".into(), node.id.to_string());
    out.insert("node.unique.name".into(), node.name.clone());
    out.insert("node.datacenter".into(), node.datacenter.clone());
    out.insert("node.class".into(), node.node_class.clone());
    out.insert("node.pool".into(), node.node_pool.clone());
    for (k, v) in &node.attributes {
        out.insert(format!("attr.{k}"), v.clone());
    }
    for (k, v) in &node.meta {
        out.insert(format!("meta.{k}"), v.clone());
    }
    out
}

/// Where a task's directories are.
#[derive(Debug, Clone, Copy)]
pub struct TaskDirs<'a> {
    /// Shared by the allocation's tasks (`NOMAD_ALLOC_DIR`).
    pub alloc: &'a Path,
    /// The task's own (`NOMAD_TASK_DIR`, its working directory).
    pub task: &'a Path,
    /// The task's secrets (`NOMAD_SECRETS_DIR`).
    pub secrets: &'a Path,
}

/// A task's environment and the values its interpolations read.
#[derive(Debug, Clone)]
pub struct TaskEnv {
    /// `NOMAD_*` and the task's own `env`, interpolated.
    env: BTreeMap<String, String>,
    /// [`node_values`].
    node: BTreeMap<String, String>,
}

/// `text` with every `${…}` that `env` (first) or the node's values know replaced by its
/// value; unknown ones are left as written.
pub fn interpolate_in(
    env: &BTreeMap<String, String>,
    node: &BTreeMap<String, String>,
    text: &str,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let key = after[..end].trim();
        match env.get(key).or_else(|| node.get(key)) {
            Some(v) => out.push_str(v),
            None => out.push_str(&rest[start..start + 2 + end + 1]),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

impl TaskEnv {
    /// The environment of `task` of `alloc`'s group in `job`, on the node whose
    /// [`node_values`] are `node`.
    pub fn new(
        node: BTreeMap<String, String>,
        alloc: &Allocation,
        job: &Job,
        task: &Task,
        dirs: TaskDirs,
    ) -> TaskEnv {
        TaskEnv::in_network(node, alloc, job, task, dirs, None)
    }

    /// [`TaskEnv::new`] for an allocation with a network of its own (bridge mode):
    /// `alloc_network` is its interface and address, which give each port's
    /// `NOMAD_ALLOC_INTERFACE_<label>`, `NOMAD_ALLOC_IP_<label>` and
    /// `NOMAD_ALLOC_ADDR_<label>` (the address and the port inside, as Nomad sets them).
    pub fn in_network(
        node: BTreeMap<String, String>,
        alloc: &Allocation,
        job: &Job,
        task: &Task,
        dirs: TaskDirs,
        alloc_network: Option<(&str, &str)>,
    ) -> TaskEnv {
        let group = job.task_groups.iter().find(|g| g.name == alloc.task_group);
        let alloc_id = alloc.id.to_string();
        let mut env = BTreeMap::new();
        let mut set = |k: &str, v: String| {
            env.insert(k.to_string(), v);
        };
        set("NOMAD_ALLOC_DIR", dirs.alloc.display().to_string());
        set("NOMAD_TASK_DIR", dirs.task.display().to_string());
        set("NOMAD_SECRETS_DIR", dirs.secrets.display().to_string());
        set("NOMAD_ALLOC_ID", alloc_id.clone());
        set(
            "NOMAD_SHORT_ALLOC_ID",
            alloc_id.chars().take(8).collect::<String>(),
        );
        set("NOMAD_ALLOC_NAME", alloc.name.clone());
        set("NOMAD_ALLOC_INDEX", alloc_index(&alloc.name).to_string());
        set("NOMAD_TASK_NAME", task.name.clone());
        set("NOMAD_GROUP_NAME", alloc.task_group.to_string());
        set("NOMAD_JOB_ID", job.id.to_string());
        set("NOMAD_JOB_NAME", job.name.clone());
        set("NOMAD_NAMESPACE", job.namespace.to_string());
        set("NOMAD_REGION", job.region.clone());
        set(
            "NOMAD_DC",
            node.get("node.datacenter").cloned().unwrap_or_default(),
        );
        // Per port label (Nomad's client/taskenv): the port the task listens on (`to` when
        // given, else the host port), the host port, the node address and both joined.
        for port in &alloc.allocated_resources.shared.ports {
            let label = port.label.replace(['.', '-'], "_");
            let inside = if port.to > 0 {
                port.to as u32
            } else {
                port.value
            };
            let addr = format!("{}:{}", port.host_ip, port.value);
            set(&format!("NOMAD_PORT_{label}"), inside.to_string());
            set(&format!("NOMAD_ALLOC_PORT_{label}"), inside.to_string());
            set(&format!("NOMAD_HOST_PORT_{label}"), port.value.to_string());
            set(&format!("NOMAD_IP_{label}"), port.host_ip.clone());
            set(&format!("NOMAD_HOST_IP_{label}"), port.host_ip.clone());
            set(&format!("NOMAD_ADDR_{label}"), addr.clone());
            set(&format!("NOMAD_HOST_ADDR_{label}"), addr);
            if let Some((interface, ip)) = alloc_network {
                set(
                    &format!("NOMAD_ALLOC_INTERFACE_{label}"),
                    interface.to_string(),
                );
                set(&format!("NOMAD_ALLOC_IP_{label}"), ip.to_string());
                set(
                    &format!("NOMAD_ALLOC_ADDR_{label}"),
                    format!("{ip}:{inside}"),
                );
            }
        }
        // A task reserving whole cores: their share of the node's MHz, and which they are.
        match alloc.allocated_resources.task(&task.name) {
            None => set("NOMAD_CPU_LIMIT", task.resources.cpu.to_string()),
            Some(held) => {
                set("NOMAD_CPU_LIMIT", held.cpu.cpu_shares.to_string());
                set(
                    teamster_storage::model::CPU_CORES_ENV,
                    teamster_storage::model::format_cpuset(&held.cpu.reserved_cores),
                );
            }
        }
        set("NOMAD_MEMORY_LIMIT", task.resources.memory_mb.to_string());
        // Nomad's: only when the task's memory_max applies (oversubscription was on when the
        // allocation was placed).
        if task.resources.memory_max_mb > 0 && alloc.resources.memory_max_mb > 0 {
            let max = task.resources.memory_max_mb;
            set(
                "NOMAD_MEMORY_MAX_LIMIT",
                if max == teamster_storage::model::MEMORY_NO_LIMIT {
                    "-1".to_string()
                } else {
                    max.to_string()
                },
            );
        }
        // Meta: the job's, then the group's, then the task's, the innermost winning; each
        // key both as written and upper-cased, as Nomad sets them.
        let empty = BTreeMap::new();
        let group_meta = group.map_or(&empty, |g| &g.meta);
        for meta in [&job.meta, group_meta, &task.meta] {
            for (k, v) in meta {
                let key = k.replace(['.', '-'], "_");
                set(&format!("NOMAD_META_{key}"), v.clone());
                set(&format!("NOMAD_META_{}", key.to_uppercase()), v.clone());
            }
        }
        let mut out = TaskEnv { env, node };
        // The task's own variables may use the ones above (and win over them).
        let own: Vec<(String, String)> = task
            .env
            .iter()
            .map(|(k, v)| (k.clone(), out.interpolate(v)))
            .collect();
        out.env.extend(own);
        out
    }

    /// The environment to start the task with.
    pub fn env(&self) -> &BTreeMap<String, String> {
        &self.env
    }

    /// `text` with every `${…}` this environment or the node knows replaced by its value.
    pub fn interpolate(&self, text: &str) -> String {
        interpolate_in(&self.env, &self.node, text)
    }

    fn config_value(&self, v: &ConfigValue) -> ConfigValue {
        match v {
            ConfigValue::String(s) => ConfigValue::String(self.interpolate(s)),
            ConfigValue::List(items) => {
                ConfigValue::List(items.iter().map(|i| self.config_value(i)).collect())
            }
            ConfigValue::Map(map) => ConfigValue::Map(
                map.iter()
                    .map(|(k, v)| (k.clone(), self.config_value(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// `task` as it is started: its config interpolated, its environment this one.
    pub fn apply(&self, task: &Task) -> Task {
        let mut out = task.clone();
        out.config = task
            .config
            .iter()
            .map(|(k, v)| (k.clone(), self.config_value(v)))
            .collect();
        out.env = self.env.clone();
        for mount in &mut out.volume_mounts {
            mount.volume = self.interpolate(&mount.volume);
            mount.destination = self.interpolate(&mount.destination);
            mount.propagation_mode = self.interpolate(&mount.propagation_mode);
        }
        // Artifacts are fetched where and as the task's environment says (Nomad interpolates
        // every field of the block).
        for artifact in &mut out.artifacts {
            artifact.getter_source = self.interpolate(&artifact.getter_source);
            artifact.relative_dest = self.interpolate(&artifact.relative_dest);
            for map in [&mut artifact.getter_options, &mut artifact.getter_headers] {
                for value in map.values_mut() {
                    *value = self.interpolate(value);
                }
            }
        }
        out
    }
}

/// The index in an allocation name `job.group[3]`.
fn alloc_index(name: &str) -> u64 {
    name.rsplit_once('[')
        .and_then(|(_, i)| i.strip_suffix(']'))
        .and_then(|i| i.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use teamster_storage::model::{Allocation, Job, Node, Task, TaskGroup};

    use super::*;

    fn fixture() -> (Allocation, Job, Node) {
        let mut task = Task {
            name: "web".into(),
            driver: "raw_exec".into(),
            ..Default::default()
        };
        task.resources.cpu = 250;
        task.resources.memory_mb = 128;
        task.meta.insert("owner".into(), "task".into());
        task.env
            .insert("GREETING".into(), "hi from ${NOMAD_ALLOC_INDEX}".into());
        task.env.insert("NOMAD_REGION".into(), "mine".into());
        task.config.insert(
            "args".into(),
            ConfigValue::List(vec![
                ConfigValue::String("${NOMAD_ALLOC_DIR}/data".into()),
                ConfigValue::String("${node.unique.name}:${attr.kernel.name}".into()),
                ConfigValue::String("${meta.rack} ${NOMAD_META_owner} ${NOMAD_META_TEAM}".into()),
                ConfigValue::String("${unknown.thing} and ${NOMAD_NOPE} stay".into()),
                ConfigValue::Int(7),
            ]),
        );
        let mut group = TaskGroup {
            name: "api".into(),
            tasks: vec![task],
            ..Default::default()
        };
        group.meta.insert("owner".into(), "group".into());
        let mut job = Job {
            name: "shop".into(),
            region: "global".into(),
            task_groups: vec![group].into(),
            ..Default::default()
        };
        job.id = "shop".into();
        job.meta.insert("team".into(), "payments".into());
        let alloc = Allocation {
            name: "shop.api[3]".into(),
            task_group: "api".into(),
            ..Default::default()
        };
        let mut node = Node {
            name: "n1".into(),
            datacenter: "dc1".into(),
            ..Default::default()
        };
        node.attributes.insert("kernel.name".into(), "linux".into());
        node.meta.insert("rack".into(), "r7".into());
        (alloc, job, node)
    }

    #[test]
    fn a_task_gets_nomads_variables_and_its_config_is_interpolated() {
        let (alloc, job, node) = fixture();
        let task = &job.task_groups[0].tasks[0];
        let (a, t, s) = (
            PathBuf::from("/data/alloc/x/alloc"),
            PathBuf::from("/data/alloc/x/web"),
            PathBuf::from("/data/alloc/x/web/secrets"),
        );
        let dirs = TaskDirs {
            alloc: &a,
            task: &t,
            secrets: &s,
        };
        let env = TaskEnv::new(node_values(&node), &alloc, &job, task, dirs);
        let started = env.apply(task);
        let e = &started.env;
        assert_eq!(e["NOMAD_ALLOC_INDEX"], "3");
        assert_eq!(e["NOMAD_ALLOC_NAME"], "shop.api[3]");
        assert_eq!(e["NOMAD_GROUP_NAME"], "api");
        assert_eq!(e["NOMAD_JOB_ID"], "shop");
        assert_eq!(e["NOMAD_DC"], "dc1");
        assert_eq!(e["NOMAD_CPU_LIMIT"], "250");
        assert_eq!(e["NOMAD_MEMORY_LIMIT"], "128");
        assert_eq!(e["NOMAD_ALLOC_DIR"], "/data/alloc/x/alloc");
        // The task's meta wins over the group's; both spellings are set.
        assert_eq!(e["NOMAD_META_owner"], "task");
        assert_eq!(e["NOMAD_META_OWNER"], "task");
        assert_eq!(e["NOMAD_META_TEAM"], "payments");
        // The task's own variables are interpolated and win.
        assert_eq!(e["GREETING"], "hi from 3");
        assert_eq!(e["NOMAD_REGION"], "mine");
        assert_eq!(
            started.config["args"],
            ConfigValue::List(vec![
                ConfigValue::String("/data/alloc/x/alloc/data".into()),
                ConfigValue::String("n1:linux".into()),
                ConfigValue::String("r7 task payments".into()),
                ConfigValue::String("${unknown.thing} and ${NOMAD_NOPE} stay".into()),
                ConfigValue::Int(7),
            ])
        );
        assert_eq!(env.interpolate("${NOMAD_JOB_NAME"), "${NOMAD_JOB_NAME");
        assert_eq!(env.interpolate("a ${ NOMAD_JOB_NAME } b"), "a shop b");
    }

    #[test]
    fn each_port_label_gives_nomads_port_variables() {
        use teamster_storage::model::AllocatedPortMapping;
        let (mut alloc, job, node) = fixture();
        let port = |label: &str, value, to| AllocatedPortMapping {
            label: label.into(),
            value,
            to,
            host_ip: "10.0.0.5".into(),
        };
        alloc.allocated_resources.shared.ports =
            vec![port("http", 23456, 0), port("admin-ui", 8081, 9000)].into();
        let task = &job.task_groups[0].tasks[0];
        let dir = PathBuf::from("/x");
        let dirs = TaskDirs {
            alloc: &dir,
            task: &dir,
            secrets: &dir,
        };
        let env = TaskEnv::new(node_values(&node), &alloc, &job, task, dirs);
        let e = env.env();
        assert_eq!(e["NOMAD_PORT_http"], "23456");
        assert_eq!(e["NOMAD_HOST_PORT_http"], "23456");
        assert_eq!(e["NOMAD_IP_http"], "10.0.0.5");
        assert_eq!(e["NOMAD_ADDR_http"], "10.0.0.5:23456");
        // `to` is where the task listens; the host side keeps the host port.
        assert_eq!(e["NOMAD_PORT_admin_ui"], "9000");
        assert_eq!(e["NOMAD_ALLOC_PORT_admin_ui"], "9000");
        assert_eq!(e["NOMAD_HOST_PORT_admin_ui"], "8081");
        assert_eq!(e["NOMAD_HOST_ADDR_admin_ui"], "10.0.0.5:8081");
        assert_eq!(env.interpolate("--port=${NOMAD_PORT_http}"), "--port=23456");
        // Host mode: no address of the allocation's own.
        assert!(!e.contains_key("NOMAD_ALLOC_IP_http"));
        // Bridge mode: the allocation's interface and address, with the port inside.
        let bridged = TaskEnv::in_network(
            node_values(&node),
            &alloc,
            &job,
            task,
            dirs,
            Some(("eth0", "172.26.64.9")),
        );
        let e = bridged.env();
        assert_eq!(e["NOMAD_ALLOC_INTERFACE_admin_ui"], "eth0");
        assert_eq!(e["NOMAD_ALLOC_IP_admin_ui"], "172.26.64.9");
        assert_eq!(e["NOMAD_ALLOC_ADDR_admin_ui"], "172.26.64.9:9000");
        assert_eq!(e["NOMAD_ALLOC_ADDR_http"], "172.26.64.9:23456");
        assert_eq!(e["NOMAD_HOST_ADDR_admin_ui"], "10.0.0.5:8081");
    }
}
