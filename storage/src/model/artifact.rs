//! A task's `artifact`s: files the client fetches into the task's directory before it
//! starts (Nomad's go-getter block), checked at submit with Nomad's words.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::de;

/// `GetterMode` values.
pub const ARTIFACT_MODES: &[&str] = &["any", "file", "dir"];

/// One artifact (`artifact { source destination mode options headers chown }`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TaskArtifact {
    /// Where to fetch it from (a URL; interpolated with the task's environment).
    #[serde(rename = "GetterSource", deserialize_with = "de::nullable")]
    pub getter_source: String,
    /// go-getter options: `checksum = "sha256:…"`, `archive = "false"`, ….
    #[serde(rename = "GetterOptions", deserialize_with = "de::nullable")]
    pub getter_options: BTreeMap<String, String>,
    /// HTTP headers sent with the request.
    #[serde(rename = "GetterHeaders", deserialize_with = "de::nullable")]
    pub getter_headers: BTreeMap<String, String>,
    /// `any` (default), `file` or `dir`.
    #[serde(rename = "GetterMode", deserialize_with = "de::nullable")]
    pub getter_mode: String,
    /// Skip TLS verification.
    #[serde(rename = "GetterInsecure", deserialize_with = "de::nullable")]
    pub getter_insecure: bool,
    /// Where it goes, relative to the task's directory (default `local/`).
    #[serde(rename = "RelativeDest", deserialize_with = "de::nullable")]
    pub relative_dest: String,
    /// Give the fetched files to the task's user.
    #[serde(rename = "Chown", deserialize_with = "de::nullable")]
    pub chown: bool,
}

impl TaskArtifact {
    /// Nomad's API defaults: mode `any`; the destination `local/`, or in `file` mode
    /// `local/<the source's last path element>`.
    pub fn canonicalize(&mut self) {
        if self.getter_mode.is_empty() {
            self.getter_mode = "any".to_owned();
        }
        if self.relative_dest.is_empty() {
            self.relative_dest = if self.getter_mode == "file" {
                let path = self
                    .getter_source
                    .split(['?', '#'])
                    .next()
                    .unwrap_or_default();
                let base = path
                    .trim_end_matches('/')
                    .rsplit('/')
                    .next()
                    .unwrap_or_default();
                format!("local/{base}")
            } else {
                "local/".to_owned()
            };
        }
    }

    /// Nomad's checks, each error in its words.
    pub fn validate(&self) -> Vec<String> {
        let mut errors = Vec::new();
        if self.getter_source.is_empty() {
            errors.push("source must be specified".to_owned());
        }
        if !self.getter_mode.is_empty() && !ARTIFACT_MODES.contains(&self.getter_mode.as_str()) {
            errors.push(format!(
                "invalid artifact mode {:?}; must be one of: any, file, dir",
                self.getter_mode
            ));
        }
        if dest_escapes_alloc_dir(&self.relative_dest) {
            errors.push("destination escapes allocation directory".to_owned());
        }
        if let Some(check) = self.getter_options.get("checksum") {
            // Interpolated later: checked when it is fetched.
            if !check.contains("${") {
                if let Err(e) = parse_checksum(check) {
                    errors.push(e);
                }
            }
        }
        errors
    }
}

/// Whether `dest`, relative to a task's directory (`<alloc>/<task>/`), leaves the
/// allocation's directory (Nomad's `PathEscapesAllocViaRelative("task", dest)`).
pub fn dest_escapes_alloc_dir(dest: &str) -> bool {
    super::task_runtime::escapes_alloc_dir("task", dest)
}

/// An artifact's `checksum` option (`type:hex`): the type and the digest it names, or
/// Nomad's error.
pub fn parse_checksum(check: &str) -> Result<(String, Vec<u8>), String> {
    let check = check.trim();
    if check.is_empty() {
        return Err("checksum value cannot be empty".to_owned());
    }
    let parts: Vec<&str> = check.split(':').collect();
    let [kind, value] = parts.as_slice() else {
        return Err(format!(
            "checksum must be given as \"type:value\"; got {check:?}"
        ));
    };
    let bytes = decode_hex(value)
        .ok_or_else(|| format!("invalid checksum: encoding/hex: invalid byte in {value:?}"))?;
    let expected = match *kind {
        "md5" => 16,
        "sha1" => 20,
        "sha256" => 32,
        "sha512" => 64,
        other => return Err(format!("unsupported checksum type: {other}")),
    };
    if bytes.len() != expected {
        return Err(format!("invalid {kind} checksum: {value}"));
    }
    Ok((kind.to_string(), bytes))
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifact(source: &str, mode: &str) -> TaskArtifact {
        TaskArtifact {
            getter_source: source.into(),
            getter_mode: mode.into(),
            ..TaskArtifact::default()
        }
    }

    #[test]
    fn defaults_are_nomad_s() {
        let mut a = artifact("https://example.com/x/app.tar.gz?v=1", "");
        a.canonicalize();
        assert_eq!(
            (a.getter_mode.as_str(), a.relative_dest.as_str()),
            ("any", "local/")
        );
        let mut f = artifact("https://example.com/x/app.bin", "file");
        f.canonicalize();
        assert_eq!(f.relative_dest, "local/app.bin");
    }

    #[test]
    fn bad_artifacts_are_refused_with_nomad_s_words() {
        assert!(artifact("http://x/y", "any").validate().is_empty());
        assert_eq!(
            artifact("", "sideways").validate(),
            vec![
                "source must be specified",
                "invalid artifact mode \"sideways\"; must be one of: any, file, dir",
            ]
        );
        let mut a = artifact("http://x/y", "any");
        a.relative_dest = "../../etc".into();
        assert_eq!(
            a.validate(),
            vec!["destination escapes allocation directory"]
        );
        a.relative_dest = "../alloc/data".into();
        assert!(a.validate().is_empty());
        a.relative_dest = "/local/x".into();
        assert!(a.validate().is_empty());
        for (check, want) in [
            (
                "sha256",
                "checksum must be given as \"type:value\"; got \"sha256\"",
            ),
            ("crc32:00ff00ff", "unsupported checksum type: crc32"),
            ("md5:abcd", "invalid md5 checksum: abcd"),
            (
                "sha1:zz",
                "invalid checksum: encoding/hex: invalid byte in \"zz\"",
            ),
        ] {
            a.getter_options.insert("checksum".into(), check.into());
            assert_eq!(a.validate(), vec![want], "{check}");
        }
        a.getter_options
            .insert("checksum".into(), "sha256:${NOMAD_META_SUM}".into());
        assert!(a.validate().is_empty());
        let digest = "ab".repeat(32);
        let (kind, bytes) = parse_checksum(&format!("sha256:{digest}")).unwrap();
        assert_eq!((kind.as_str(), bytes.len()), ("sha256", 32));
    }
}
