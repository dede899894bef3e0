//! Volumes: what a task group asks for ([`VolumeRequest`], a group's `volume "<name>"`),
//! where its tasks see them ([`VolumeMount`], a task's `volume_mount`), and what a client
//! offers ([`ClientHostVolumeConfig`], its `host_volume "<name>"`, carried in the node as
//! `HostVolumes`).
//!
//! Host volumes are acted on: the scheduler places a group only on a node offering each
//! requested `source` (a writable request needs a writable volume), and the docker driver
//! bind-mounts them. CSI volumes are accepted as Nomad accepts them; teamster has no CSI
//! plugins or volume registry, so a group asking for one is never placed and says why with
//! Nomad's words (`missing CSI volume(s) <source>`).

use serde::{Deserialize, Serialize};

use super::de;

/// `Type` of a host volume request.
pub const VOLUME_TYPE_HOST: &str = "host";
/// `Type` of a CSI volume request.
pub const VOLUME_TYPE_CSI: &str = "csi";

/// Nomad's placement reason for a node without the requested host volumes.
pub const FILTER_HOST_VOLUMES: &str = "missing compatible host volumes";

/// A volume a task group needs (`volume "<name>" { … }`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct VolumeRequest {
    /// The name tasks mount it by (the block's label).
    #[serde(deserialize_with = "de::nullable")]
    pub name: String,
    /// `host` or `csi`.
    #[serde(deserialize_with = "de::nullable")]
    pub r#type: String,
    /// The client's host volume, or the CSI volume's id.
    #[serde(deserialize_with = "de::nullable")]
    pub source: String,
    /// Mounted read-only.
    #[serde(deserialize_with = "de::nullable")]
    pub read_only: bool,
    /// Keep allocations on the volume they first claimed (dynamic host volumes).
    #[serde(deserialize_with = "de::nullable")]
    pub sticky: bool,
    /// Access mode (`single-node-writer`, …).
    #[serde(deserialize_with = "de::nullable")]
    pub access_mode: String,
    /// Attachment mode (`file-system`, `block-device`).
    #[serde(deserialize_with = "de::nullable")]
    pub attachment_mode: String,
    /// CSI mount options.
    pub mount_options: Option<CsiMountOptions>,
    /// One volume per allocation: `source` gets the allocation's index (`data[0]`).
    #[serde(deserialize_with = "de::nullable")]
    pub per_alloc: bool,
}

/// A CSI volume's `mount_options`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiMountOptions {
    /// Filesystem type.
    #[serde(rename = "FSType", deserialize_with = "de::nullable")]
    pub fs_type: String,
    /// Mount flags.
    #[serde(rename = "MountFlags", deserialize_with = "de::nullable")]
    pub mount_flags: Vec<String>,
}

/// Where a task sees one of its group's volumes (`volume_mount { … }`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct VolumeMount {
    /// The group volume's name.
    #[serde(deserialize_with = "de::nullable")]
    pub volume: String,
    /// The path inside the task.
    #[serde(deserialize_with = "de::nullable")]
    pub destination: String,
    /// Mounted read-only (whatever the request says).
    #[serde(deserialize_with = "de::nullable")]
    pub read_only: bool,
    /// `private` (default), `host-to-task` or `bidirectional`.
    #[serde(deserialize_with = "de::nullable")]
    pub propagation_mode: String,
    /// `z` or `Z` (relabel for SELinux), or empty.
    #[serde(rename = "SELinuxLabel", deserialize_with = "de::nullable")]
    pub selinux_label: String,
}

/// A host volume a client offers (`client.host_volume.<name>`), as the node carries it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ClientHostVolumeConfig {
    /// Its name (what a request's `source` names).
    #[serde(deserialize_with = "de::nullable")]
    pub name: String,
    /// The directory on the host.
    #[serde(deserialize_with = "de::nullable")]
    pub path: String,
    /// Only read-only requests may use it.
    #[serde(deserialize_with = "de::nullable")]
    pub read_only: bool,
}

impl VolumeRequest {
    /// Whether it is a host volume.
    pub fn is_host(&self) -> bool {
        self.r#type == VOLUME_TYPE_HOST
    }

    /// The volume an allocation named `alloc_name` (`job.group[3]`) uses: `source`, with
    /// the allocation's index when `per_alloc` (`source[3]`, Nomad's `AllocSuffix`).
    pub fn source_for(&self, alloc_name: &str) -> String {
        if !self.per_alloc {
            return self.source.clone();
        }
        let suffix = alloc_name
            .rfind('[')
            .map(|i| &alloc_name[i..])
            .unwrap_or_default();
        format!("{}{suffix}", self.source)
    }

    /// Nomad's checks of one request of a group of `count` in a job of `job_type`
    /// (`canaries`: the group's update canaries); each error as Nomad words it.
    pub fn validate(&self, system: bool, count: u32, canaries: u32) -> Vec<String> {
        if self.r#type != VOLUME_TYPE_HOST && self.r#type != VOLUME_TYPE_CSI {
            return vec![format!("volume has unrecognized type {}", self.r#type)];
        }
        let mut errors = Vec::new();
        if self.source.is_empty() {
            errors.push("volume has an empty source".to_owned());
        }
        if self.per_alloc {
            if system {
                errors.push("volume cannot be per_alloc for system or sysbatch jobs".to_owned());
            }
            if canaries > 0 {
                errors.push("volume cannot be per_alloc when canaries are in use".to_owned());
            }
            if self.sticky {
                errors.push("volume cannot be per_alloc and sticky at the same time".to_owned());
            }
        }
        let mode = self.access_mode.as_str();
        let read_only_mode = |errors: &mut Vec<String>| {
            if !self.read_only {
                errors.push(format!("{mode} volumes must be read-only"));
            }
        };
        if self.is_host() {
            if self.mount_options.is_some() {
                errors.push("host volumes cannot have mount options".to_owned());
            }
            match mode {
                "single-node-reader-only" => read_only_mode(&mut errors),
                ""
                | "single-node-writer"
                | "single-node-single-writer"
                | "single-node-multi-writer" => {}
                other => errors.push(format!(
                    "host volumes cannot be mounted with {other} access mode"
                )),
            }
            return errors;
        }
        match self.attachment_mode.as_str() {
            "" => errors.push("CSI volumes must have an attachment mode".to_owned()),
            "block-device" if self.mount_options.is_some() => {
                errors.push("block devices cannot have mount options".to_owned())
            }
            _ => {}
        }
        let shared = count > 1 && !self.per_alloc;
        match mode {
            "" => errors.push("CSI volumes must have an access mode".to_owned()),
            "single-node-reader-only" => {
                read_only_mode(&mut errors);
                if shared {
                    errors.push(format!(
                        "volume with {mode} access mode allows only one reader"
                    ));
                }
            }
            "single-node-writer" if shared => errors.push(format!(
                "volume with {mode} access mode allows only one reader or writer"
            )),
            "multi-node-reader-only" => read_only_mode(&mut errors),
            "multi-node-single-writer" if !self.read_only && shared => errors.push(format!(
                "volume with {mode} access mode allows only one writer"
            )),
            _ => {}
        }
        errors
    }
}

impl VolumeMount {
    /// Fills Nomad's default propagation mode.
    pub fn canonicalize(&mut self) {
        if self.propagation_mode.is_empty() {
            self.propagation_mode = "private".to_owned();
        }
    }

    /// Nomad's checks of one mount (the volume it names is checked by the group).
    pub fn validate(&self) -> Vec<String> {
        let mut errors = Vec::new();
        if self.volume.is_empty() {
            errors.push("volume mount references an empty volume".to_owned());
        }
        if !matches!(
            self.propagation_mode.as_str(),
            "" | "private" | "host-to-task" | "bidirectional"
        ) {
            errors.push(format!(
                "volume mount has an invalid propagation mode: {:?}",
                self.propagation_mode
            ));
        }
        if !matches!(self.selinux_label.as_str(), "" | "z" | "Z") {
            errors.push(format!(
                "volume mount has an invalid SELinux label: \"{}\"",
                self.selinux_label
            ));
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(source: &str) -> VolumeRequest {
        VolumeRequest {
            name: "data".into(),
            r#type: VOLUME_TYPE_HOST.into(),
            source: source.into(),
            ..VolumeRequest::default()
        }
    }

    #[test]
    fn per_alloc_sources_take_the_allocation_index() {
        let mut v = host("data");
        assert_eq!(v.source_for("web.api[3]"), "data");
        v.per_alloc = true;
        assert_eq!(v.source_for("web.api[3]"), "data[3]");
        assert_eq!(v.source_for("web.a[b].api[12]"), "data[12]");
    }

    #[test]
    fn requests_are_checked_with_nomad_s_words() {
        assert!(host("data").validate(false, 3, 0).is_empty());
        assert_eq!(
            host("").validate(false, 1, 0),
            vec!["volume has an empty source"]
        );
        let odd = VolumeRequest {
            r#type: "nfs".into(),
            ..host("x")
        };
        assert_eq!(
            odd.validate(false, 1, 0),
            vec!["volume has unrecognized type nfs"]
        );
        let per_alloc = VolumeRequest {
            per_alloc: true,
            sticky: true,
            ..host("x")
        };
        assert_eq!(
            per_alloc.validate(true, 1, 1),
            vec![
                "volume cannot be per_alloc for system or sysbatch jobs",
                "volume cannot be per_alloc when canaries are in use",
                "volume cannot be per_alloc and sticky at the same time",
            ]
        );
        let reader = VolumeRequest {
            access_mode: "single-node-reader-only".into(),
            mount_options: Some(CsiMountOptions::default()),
            ..host("x")
        };
        assert_eq!(
            reader.validate(false, 1, 0),
            vec![
                "host volumes cannot have mount options",
                "single-node-reader-only volumes must be read-only",
            ]
        );
        let csi = VolumeRequest {
            r#type: VOLUME_TYPE_CSI.into(),
            ..host("db")
        };
        assert_eq!(
            csi.validate(false, 1, 0),
            vec![
                "CSI volumes must have an attachment mode",
                "CSI volumes must have an access mode",
            ]
        );
        let shared_writer = VolumeRequest {
            attachment_mode: "file-system".into(),
            access_mode: "single-node-writer".into(),
            ..csi
        };
        assert!(shared_writer.validate(false, 1, 0).is_empty());
        assert_eq!(
            shared_writer.validate(false, 2, 0),
            vec!["volume with single-node-writer access mode allows only one reader or writer"]
        );
    }

    #[test]
    fn mounts_are_checked_with_nomad_s_words() {
        let mut m = VolumeMount {
            volume: "data".into(),
            destination: "/data".into(),
            ..VolumeMount::default()
        };
        m.canonicalize();
        assert_eq!(m.propagation_mode, "private");
        assert!(m.validate().is_empty());
        let bad = VolumeMount {
            volume: String::new(),
            propagation_mode: "sideways".into(),
            selinux_label: "q".into(),
            ..m
        };
        assert_eq!(
            bad.validate(),
            vec![
                "volume mount references an empty volume",
                "volume mount has an invalid propagation mode: \"sideways\"",
                "volume mount has an invalid SELinux label: \"q\"",
            ]
        );
    }
}
