//! Host volumes on the client: which of this node's `host_volume`s a task mounts, where, and
//! how ([`task_mounts`], pure), as Nomad's volume hook resolves them. The docker driver
//! bind-mounts them; `raw_exec` has no filesystem of its own and sees the host's paths.

use std::collections::BTreeMap;

use teamster_storage::model::{ClientHostVolumeConfig, Task, TaskGroup};

/// One host directory a task sees at `destination`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostMount {
    /// The directory on the host.
    pub host_path: String,
    /// Where the task sees it.
    pub destination: String,
    /// Mounted read-only: the node's volume, the group's request or the mount says so.
    pub read_only: bool,
    /// `private`, `host-to-task` or `bidirectional`.
    pub propagation_mode: String,
    /// `z`, `Z` or empty.
    pub selinux_label: String,
}

impl HostMount {
    /// The mount's options as a docker bind lists them after the paths (`ro,rslave,z`).
    pub fn bind_options(&self) -> String {
        let mut opts = vec![if self.read_only { "ro" } else { "rw" }];
        opts.push(match self.propagation_mode.as_str() {
            "host-to-task" => "rslave",
            "bidirectional" => "rshared",
            _ => "rprivate",
        });
        if !self.selinux_label.is_empty() {
            opts.push(&self.selinux_label);
        }
        opts.join(",")
    }
}

/// The host volumes `task` of `group` mounts in the allocation named `alloc_name`, found
/// among this node's `offered` ones. A host volume the group asks for that this node lacks
/// (its configuration changed since the placement) is an error naming it, as Nomad's hook
/// reports it; CSI volumes mount nothing (teamster never places them).
pub fn task_mounts(
    group: &TaskGroup,
    task: &Task,
    alloc_name: &str,
    offered: &BTreeMap<String, ClientHostVolumeConfig>,
) -> Result<Vec<HostMount>, String> {
    let missing: Vec<String> = group
        .volumes
        .values()
        .filter(|v| v.is_host())
        .map(|v| v.source_for(alloc_name))
        .filter(|source| !offered.contains_key(source))
        .map(|source| format!("missing {source}"))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "host volume validation error: {}",
            missing.join(", ")
        ));
    }
    let mut mounts = Vec::new();
    for mount in &task.volume_mounts {
        let Some(request) = group.volumes.get(&mount.volume).filter(|v| v.is_host()) else {
            continue;
        };
        let Some(volume) = offered.get(&request.source_for(alloc_name)) else {
            continue;
        };
        mounts.push(HostMount {
            host_path: volume.path.clone(),
            destination: mount.destination.clone(),
            read_only: volume.read_only || request.read_only || mount.read_only,
            propagation_mode: mount.propagation_mode.clone(),
            selinux_label: mount.selinux_label.clone(),
        });
    }
    Ok(mounts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use teamster_storage::model::{VolumeMount, VolumeRequest, VOLUME_TYPE_CSI, VOLUME_TYPE_HOST};

    fn offered(pairs: &[(&str, &str, bool)]) -> BTreeMap<String, ClientHostVolumeConfig> {
        pairs
            .iter()
            .map(|(name, path, read_only)| {
                let config = ClientHostVolumeConfig {
                    name: name.to_string(),
                    path: path.to_string(),
                    read_only: *read_only,
                };
                (name.to_string(), config)
            })
            .collect()
    }

    fn group(volumes: &[(&str, &str, bool, bool)]) -> TaskGroup {
        TaskGroup {
            volumes: volumes
                .iter()
                .map(|(name, source, read_only, per_alloc)| {
                    let request = VolumeRequest {
                        name: name.to_string(),
                        r#type: VOLUME_TYPE_HOST.into(),
                        source: source.to_string(),
                        read_only: *read_only,
                        per_alloc: *per_alloc,
                        ..VolumeRequest::default()
                    };
                    (name.to_string(), request)
                })
                .collect(),
            ..TaskGroup::default()
        }
    }

    fn mounting(pairs: &[(&str, &str, bool)]) -> Task {
        Task {
            volume_mounts: pairs
                .iter()
                .map(|(volume, destination, read_only)| VolumeMount {
                    volume: volume.to_string(),
                    destination: destination.to_string(),
                    read_only: *read_only,
                    propagation_mode: "private".into(),
                    ..VolumeMount::default()
                })
                .collect(),
            ..Task::default()
        }
    }

    #[test]
    fn a_task_mounts_the_node_s_directory_read_only_if_anyone_says_so() {
        let node = offered(&[("data", "/srv/data", false), ("certs", "/etc/certs", true)]);
        let g = group(&[("d", "data", false, false), ("c", "certs", false, false)]);
        let t = mounting(&[
            ("d", "/data", false),
            ("c", "/certs", false),
            ("d", "/ro", true),
        ]);
        let mounts = task_mounts(&g, &t, "web.api[0]", &node).unwrap();
        let seen: Vec<(&str, &str, bool)> = mounts
            .iter()
            .map(|m| (m.host_path.as_str(), m.destination.as_str(), m.read_only))
            .collect();
        assert_eq!(
            seen,
            vec![
                ("/srv/data", "/data", false),
                ("/etc/certs", "/certs", true),
                ("/srv/data", "/ro", true),
            ]
        );
        assert_eq!(mounts[0].bind_options(), "rw,rprivate");
        assert_eq!(mounts[1].bind_options(), "ro,rprivate");
    }

    #[test]
    fn per_alloc_volumes_follow_the_allocation_index() {
        let node = offered(&[("data[0]", "/srv/d0", false), ("data[1]", "/srv/d1", false)]);
        let g = group(&[("d", "data", false, true)]);
        let t = mounting(&[("d", "/data", false)]);
        let mounts = task_mounts(&g, &t, "web.api[1]", &node).unwrap();
        assert_eq!(mounts[0].host_path, "/srv/d1");
        assert_eq!(
            task_mounts(&g, &t, "web.api[2]", &node).unwrap_err(),
            "host volume validation error: missing data[2]"
        );
    }

    #[test]
    fn csi_volumes_mount_nothing_and_modes_map_to_docker_s() {
        let mut g = group(&[]);
        g.volumes.insert(
            "db".into(),
            VolumeRequest {
                r#type: VOLUME_TYPE_CSI.into(),
                source: "db".into(),
                ..VolumeRequest::default()
            },
        );
        let t = mounting(&[("db", "/db", false)]);
        assert!(task_mounts(&g, &t, "a.b[0]", &offered(&[]))
            .unwrap()
            .is_empty());
        let m = HostMount {
            host_path: "/x".into(),
            destination: "/y".into(),
            read_only: true,
            propagation_mode: "host-to-task".into(),
            selinux_label: "Z".into(),
        };
        assert_eq!(m.bind_options(), "ro,rslave,Z");
        let both = HostMount {
            propagation_mode: "bidirectional".into(),
            selinux_label: String::new(),
            read_only: false,
            ..m
        };
        assert_eq!(both.bind_options(), "rw,rshared");
    }
}
