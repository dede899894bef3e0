//! The pause container of an allocation in bridge mode with docker tasks, as Nomad's docker
//! driver makes one: a container that does nothing, with no network of its own
//! (`network_mode = "none"`: the engine gives it a namespace with only `lo`), whose network
//! namespace the CNI plugins then attach to the bridge. The allocation's docker tasks join
//! it (`network_mode = "container:<pause>"`), its other tasks join the same namespace by path.
//!
//! Nothing is pulled: the image `teamster/pause:1` is made here, once per engine, from a
//! 129-byte static program that calls `pause(2)` forever, loaded as a `docker save` archive.

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::CreateContainerOptions;
use bollard::Docker;
use sha2::Digest;
use tracing::info;

use super::{config, engine, is_not_found, remove, Connector, DockerError};

/// The image the pause containers run.
pub const PAUSE_IMAGE: &str = "teamster/pause:1";

/// The task name a pause container is labelled with (no task has it: a name with a space).
pub const PAUSE_TASK: &str = "teamster pause";

/// The pause container of allocation `alloc_id`.
pub fn pause_name(alloc_id: &str) -> String {
    format!("teamster-pause-{alloc_id}")
}

/// The network mode of a docker task in allocation `alloc_id`'s namespace.
pub fn network_mode(alloc_id: &str) -> String {
    format!("container:{}", pause_name(alloc_id))
}

/// A static x86-64 Linux program: `loop { pause() }` (one ELF header, one loadable segment,
/// nine bytes of code).
fn pause_program() -> Vec<u8> {
    const BASE: u64 = 0x40_0000;
    const HEADERS: u64 = 64 + 56;
    let code: [u8; 9] = [
        0xb8, 0x22, 0x00, 0x00, 0x00, // mov eax, 34 (pause)
        0x0f, 0x05, // syscall
        0xeb, 0xf7, // jmp back to the mov
    ];
    let size = HEADERS + code.len() as u64;
    let mut elf = Vec::with_capacity(size as usize);
    // e_ident: magic, 64-bit, little-endian, version 1, System V ABI, padding.
    elf.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    elf.extend_from_slice(&[0; 8]);
    elf.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    elf.extend_from_slice(&0x3eu16.to_le_bytes()); // EM_X86_64
    elf.extend_from_slice(&1u32.to_le_bytes()); // EV_CURRENT
    elf.extend_from_slice(&(BASE + HEADERS).to_le_bytes()); // e_entry
    elf.extend_from_slice(&64u64.to_le_bytes()); // e_phoff
    elf.extend_from_slice(&0u64.to_le_bytes()); // e_shoff
    elf.extend_from_slice(&0u32.to_le_bytes()); // e_flags
    elf.extend_from_slice(&64u16.to_le_bytes()); // e_ehsize
    elf.extend_from_slice(&56u16.to_le_bytes()); // e_phentsize
    elf.extend_from_slice(&1u16.to_le_bytes()); // e_phnum
    elf.extend_from_slice(&[0; 6]); // e_shentsize, e_shnum, e_shstrndx
                                    // The program header: PT_LOAD, readable and executable, the whole file at BASE.
    elf.extend_from_slice(&1u32.to_le_bytes());
    elf.extend_from_slice(&5u32.to_le_bytes());
    elf.extend_from_slice(&0u64.to_le_bytes());
    elf.extend_from_slice(&BASE.to_le_bytes());
    elf.extend_from_slice(&BASE.to_le_bytes());
    elf.extend_from_slice(&size.to_le_bytes());
    elf.extend_from_slice(&size.to_le_bytes());
    elf.extend_from_slice(&0x1000u64.to_le_bytes());
    elf.extend_from_slice(&code);
    elf
}

fn tar_entry(
    builder: &mut tar::Builder<Vec<u8>>,
    path: &str,
    mode: u32,
    data: &[u8],
) -> std::io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_size(data.len() as u64);
    header.set_mode(mode);
    header.set_mtime(0);
    header.set_cksum();
    builder.append_data(&mut header, path, data)
}

/// The image as `docker save` writes it: one layer holding `/pause`, its config (entrypoint
/// `/pause`) and the manifest tagging it [`PAUSE_IMAGE`].
fn image_archive() -> std::io::Result<Vec<u8>> {
    let mut layer = tar::Builder::new(Vec::new());
    tar_entry(&mut layer, "pause", 0o755, &pause_program())?;
    let layer = layer.into_inner()?;
    let diff_id = format!("sha256:{:x}", sha2::Sha256::digest(&layer));
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": { "Entrypoint": ["/pause"] },
        "rootfs": { "type": "layers", "diff_ids": [diff_id] },
        "history": [{ "created_by": "teamster" }],
    });
    let config = serde_json::to_vec(&config).map_err(std::io::Error::other)?;
    let config_name = format!("{:x}.json", sha2::Sha256::digest(&config));
    let manifest = serde_json::json!([{
        "Config": config_name,
        "RepoTags": [PAUSE_IMAGE],
        "Layers": ["layer.tar"],
    }]);
    let manifest = serde_json::to_vec(&manifest).map_err(std::io::Error::other)?;
    let mut archive = tar::Builder::new(Vec::new());
    tar_entry(&mut archive, "layer.tar", 0o644, &layer)?;
    tar_entry(&mut archive, &config_name, 0o644, &config)?;
    tar_entry(&mut archive, "manifest.json", 0o644, &manifest)?;
    archive.into_inner()
}

/// Loads [`PAUSE_IMAGE`] into the engine unless it is there.
async fn ensure_image(docker: &Docker) -> Result<(), DockerError> {
    match docker.inspect_image(PAUSE_IMAGE).await {
        Ok(_) => return Ok(()),
        Err(e) if is_not_found(&e) => {}
        Err(e) => return Err(engine("inspect image")(e)),
    }
    if !cfg!(target_arch = "x86_64") {
        return Err(DockerError::NoImage {
            image: format!("{PAUSE_IMAGE} (teamster makes it on x86-64 only)"),
        });
    }
    let archive = image_archive().map_err(|e| DockerError::Load {
        path: PAUSE_IMAGE.into(),
        reason: e.to_string(),
    })?;
    super::import_archive(docker, archive)
        .await
        .map_err(|reason| DockerError::Load {
            path: PAUSE_IMAGE.into(),
            reason,
        })?;
    info!(image = PAUSE_IMAGE, "pause image made");
    Ok(())
}

/// A running pause container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paused {
    /// Its process id, whose `/proc/<pid>/ns/net` is the allocation's namespace.
    pub pid: u32,
    /// Its hostname, which the containers joining it share (the engine's default, its
    /// short ID, unless one was asked for).
    pub hostname: String,
}

/// Starts allocation `alloc_id`'s pause container (finding a running one again), named
/// `hostname` when one is given.
pub async fn start(
    connector: &Connector,
    alloc_id: &str,
    job_name: &str,
    node_id: &str,
    hostname: Option<&str>,
) -> Result<Paused, DockerError> {
    let docker = connector.get().await?;
    let name = pause_name(alloc_id);
    if let Some(found) = running_pid(&docker, &name).await? {
        return Ok(found);
    }
    // A stopped one (the engine restarted) is replaced: its namespace is gone.
    remove(&docker, &name).await?;
    ensure_image(&docker).await?;
    let labels: HashMap<String, String> = HashMap::from([
        (config::LABEL_ALLOC_ID.to_string(), alloc_id.to_string()),
        (config::LABEL_TASK_NAME.to_string(), PAUSE_TASK.to_string()),
        (config::LABEL_JOB_NAME.to_string(), job_name.to_string()),
        (config::LABEL_NODE_ID.to_string(), node_id.to_string()),
    ]);
    let body = ContainerCreateBody {
        image: Some(PAUSE_IMAGE.to_string()),
        hostname: hostname.map(str::to_string),
        labels: Some(labels),
        // `lo` only: the CNI plugins add the rest.
        host_config: Some(HostConfig {
            network_mode: Some("none".into()),
            ..HostConfig::default()
        }),
        ..ContainerCreateBody::default()
    };
    let id = docker
        .create_container(
            Some(CreateContainerOptions {
                name: Some(name.clone()),
                ..CreateContainerOptions::default()
            }),
            body,
        )
        .await
        .map_err(engine("create container"))?
        .id;
    if let Err(e) = docker.start_container(&id, None).await {
        let _ = remove(&docker, &id).await;
        return Err(engine("start container")(e));
    }
    match running_pid(&docker, &id).await? {
        Some(paused) => {
            info!(container = %name, pid = paused.pid, hostname = %paused.hostname, "pause container started");
            Ok(paused)
        }
        None => {
            let _ = remove(&docker, &id).await;
            Err(DockerError::Pause(format!("{name} exited at once")))
        }
    }
}

/// The process id and hostname of container `name` when it runs.
async fn running_pid(docker: &Docker, name: &str) -> Result<Option<Paused>, DockerError> {
    match docker.inspect_container(name, None).await {
        Ok(c) => {
            let state = c.state.unwrap_or_default();
            let hostname = c.config.and_then(|c| c.hostname).unwrap_or_default();
            Ok(match (state.running, state.pid) {
                (Some(true), Some(pid)) if pid > 0 => Some(Paused {
                    pid: pid as u32,
                    hostname,
                }),
                _ => None,
            })
        }
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(engine("inspect container")(e)),
    }
}

/// The process id of allocation `alloc_id`'s pause container when it runs.
pub async fn running(connector: &Connector, alloc_id: &str) -> Result<Option<u32>, DockerError> {
    let docker = connector.get().await?;
    Ok(running_pid(&docker, &pause_name(alloc_id))
        .await?
        .map(|p| p.pid))
}

/// Removes allocation `alloc_id`'s pause container (absent is removed).
pub async fn stop(connector: &Connector, alloc_id: &str) -> Result<(), DockerError> {
    let docker = connector.get().await?;
    remove(&docker, &pause_name(alloc_id)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_program_is_a_small_static_executable() {
        let elf = pause_program();
        assert_eq!(&elf[..4], b"\x7fELF");
        assert_eq!(elf.len(), 64 + 56 + 9);
        let entry = u64::from_le_bytes(elf[24..32].try_into().unwrap());
        assert_eq!(entry, 0x40_0000 + 120);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_pause_program_runs_until_killed() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pause");
        std::fs::write(&path, pause_program()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut child = std::process::Command::new(&path).spawn().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(child.try_wait().unwrap().is_none(), "it exited by itself");
        child.kill().unwrap();
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    }

    #[test]
    fn the_archive_holds_a_manifest_naming_the_image_and_its_layer() {
        let archive = image_archive().unwrap();
        let mut names = Vec::new();
        let mut manifest = String::new();
        let mut reader = tar::Archive::new(archive.as_slice());
        for entry in reader.entries().unwrap() {
            let mut entry = entry.unwrap();
            let name = entry.path().unwrap().display().to_string();
            if name == "manifest.json" {
                use std::io::Read;
                entry.read_to_string(&mut manifest).unwrap();
            }
            names.push(name);
        }
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(names.contains(&"layer.tar".to_string()));
        let m: serde_json::Value = serde_json::from_str(&manifest).unwrap();
        assert_eq!(m[0]["RepoTags"][0], PAUSE_IMAGE);
        assert_eq!(m[0]["Layers"][0], "layer.tar");
        assert!(names.contains(&m[0]["Config"].as_str().unwrap().to_string()));
    }
}
