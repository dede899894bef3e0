//! The docker provider: every node is a container running `teamster agent` as a client, on
//! the engine this server reaches over its unix socket (bollard), attached to the network
//! on which it reaches the servers.
//!
//! ```text
//!  create: inspect image (never pull) ─▶ create container <name> (labels, network, env
//!          TEAMSTER_NAME=<name>) ─▶ upload /etc/teamster/agent.toml ─▶ start
//!          (a failure after the create removes the container)
//!  list:   containers labelled with the cluster id and the class, running or not
//!  destroy: stop (SIGTERM, stop_timeout, SIGKILL) ─▶ remove with its anonymous volumes
//! ```
//!
//! The client config is the operator's file (`server.autoscaler.docker.client_config`),
//! read once when the server starts, with `client.enabled = true` and
//! `client.node_class = <server.autoscaler.node_class>` set; it is copied into each
//! container before it starts, so the engine needs no access to the server's files. The
//! container's name is the node's name (`TEAMSTER_NAME`), and the image's entrypoint must
//! be the teamster binary (as in `teamster:dev`).

use std::collections::HashMap;
use std::path::Path;

use bollard::models::{ContainerCreateBody, ContainerSummaryStateEnum, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, ListContainersOptions, RemoveContainerOptions, StopContainerOptions,
    UploadToContainerOptions,
};
use bollard::Docker;
use futures::future::BoxFuture;
use tracing::{info, warn};

use super::provider::{Instance, NodeSpec, Owner, Provider};
use super::AutoscalerError;
use crate::server::config::DockerProviderConfig;

/// Label: the cluster id a container was created for.
pub const LABEL_CLUSTER: &str = "io.teamster.autoscaler.cluster";
/// Label: the node class a container was created for.
pub const LABEL_CLASS: &str = "io.teamster.autoscaler.class";
/// Where the client config goes in the container (its directory, and its file name).
const CONFIG_DIR: &str = "/etc/teamster";
const CONFIG_FILE: &str = "agent.toml";
/// How long connecting to the engine may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// bollard's per-request timeout, seconds (a stop waits `stop_timeout` on top).
const REQUEST_TIMEOUT_SECS: u64 = 60;

/// The docker provider.
pub struct DockerProvider {
    cfg: DockerProviderConfig,
    /// The client config copied into every container.
    agent_toml: String,
    docker: tokio::sync::OnceCell<Docker>,
}

fn provider_err(op: &'static str) -> impl FnOnce(bollard::errors::Error) -> AutoscalerError {
    move |e| AutoscalerError::Provider {
        provider: "docker",
        op,
        reason: e.to_string(),
    }
}

fn status_of(e: &bollard::errors::Error) -> Option<u16> {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

impl DockerProvider {
    /// A provider for `cfg`, its nodes of `node_class`: reads and checks the client config
    /// (the error names `server.autoscaler.docker.client_config`). Does not connect yet.
    pub fn new(
        cfg: &DockerProviderConfig,
        node_class: &str,
    ) -> Result<DockerProvider, AutoscalerError> {
        let path = Path::new(&cfg.client_config);
        let text = std::fs::read_to_string(path).map_err(|e| AutoscalerError::Setting {
            key: "server.autoscaler.docker.client_config",
            reason: format!("{}: {e}", path.display()),
        })?;
        let agent_toml =
            client_config(&text, node_class).map_err(|reason| AutoscalerError::Setting {
                key: "server.autoscaler.docker.client_config",
                reason: format!("{}: {reason}", path.display()),
            })?;
        Ok(DockerProvider {
            cfg: cfg.clone(),
            agent_toml,
            docker: tokio::sync::OnceCell::new(),
        })
    }

    async fn docker(&self) -> Result<&Docker, AutoscalerError> {
        let unavailable = |reason: String| AutoscalerError::Provider {
            provider: "docker",
            op: "connect",
            reason: format!("{}: {reason}", self.cfg.socket),
        };
        self.docker
            .get_or_try_init(|| async {
                let socket = self.cfg.socket.trim_start_matches("unix://");
                let docker = Docker::connect_with_unix(
                    socket,
                    REQUEST_TIMEOUT_SECS,
                    bollard::API_DEFAULT_VERSION,
                )
                .map_err(|e| unavailable(e.to_string()))?;
                match tokio::time::timeout(CONNECT_TIMEOUT, docker.negotiate_version()).await {
                    Ok(Ok(d)) => Ok(d),
                    Ok(Err(e)) => Err(unavailable(e.to_string())),
                    Err(_) => Err(unavailable("no answer".into())),
                }
            })
            .await
    }

    async fn create_container(&self, spec: &NodeSpec) -> Result<Instance, AutoscalerError> {
        let docker = self.docker().await?;
        match docker.inspect_image(&self.cfg.image).await {
            Ok(_) => {}
            Err(e) if status_of(&e) == Some(404) => {
                return Err(AutoscalerError::Provider {
                    provider: "docker",
                    op: "inspect image",
                    reason: format!(
                        "no image {:?} on the engine (it is never pulled)",
                        self.cfg.image
                    ),
                })
            }
            Err(e) => return Err(provider_err("inspect image")(e)),
        }
        let labels = HashMap::from([
            (LABEL_CLUSTER.to_string(), spec.cluster_id.clone()),
            (LABEL_CLASS.to_string(), spec.node_class.clone()),
        ]);
        let body = ContainerCreateBody {
            image: Some(self.cfg.image.clone()),
            hostname: Some(spec.name.clone()),
            cmd: Some(vec![
                "agent".into(),
                "--config".into(),
                format!("{CONFIG_DIR}/{CONFIG_FILE}"),
            ]),
            env: Some(vec![format!("TEAMSTER_NAME={}", spec.name)]),
            labels: Some(labels),
            host_config: Some(HostConfig {
                network_mode: Some(self.cfg.network.clone()),
                ..HostConfig::default()
            }),
            ..ContainerCreateBody::default()
        };
        let options = CreateContainerOptions {
            name: Some(spec.name.clone()),
            ..CreateContainerOptions::default()
        };
        let created = docker
            .create_container(Some(options), body)
            .await
            .map_err(provider_err("create container"))?;
        let id = created.id;
        if let Err(e) = self.configure_and_start(docker, &id).await {
            // Nothing half-made is left behind.
            if let Err(rm) = remove(docker, &id).await {
                warn!(container_id = %id, error = %rm, "removing a container that failed to start");
            }
            return Err(e);
        }
        info!(container_id = %id, container = %spec.name, image = %self.cfg.image, "client container started");
        Ok(Instance {
            id,
            name: spec.name.clone(),
            running: true,
        })
    }

    async fn configure_and_start(&self, docker: &Docker, id: &str) -> Result<(), AutoscalerError> {
        let archive = tar_one_file(CONFIG_FILE, self.agent_toml.as_bytes());
        docker
            .upload_to_container(
                id,
                Some(UploadToContainerOptions {
                    path: CONFIG_DIR.to_string(),
                    ..UploadToContainerOptions::default()
                }),
                bollard::body_full(archive.into()),
            )
            .await
            .map_err(provider_err("copy the client config"))?;
        docker
            .start_container(id, None)
            .await
            .map_err(provider_err("start container"))
    }

    async fn destroy_container(&self, id: &str) -> Result<(), AutoscalerError> {
        let docker = self.docker().await?;
        let t = i32::try_from(self.cfg.stop_timeout.as_secs()).unwrap_or(i32::MAX);
        match docker
            .stop_container(
                id,
                Some(StopContainerOptions {
                    t: Some(t),
                    ..StopContainerOptions::default()
                }),
            )
            .await
        {
            // 304: already stopped; 404: already gone.
            Ok(()) => {}
            Err(e) if matches!(status_of(&e), Some(304 | 404)) => {}
            Err(e) => return Err(provider_err("stop container")(e)),
        }
        remove(docker, id).await?;
        info!(container_id = %id, "client container removed");
        Ok(())
    }

    async fn list_containers(&self, owner: &Owner) -> Result<Vec<Instance>, AutoscalerError> {
        let docker = self.docker().await?;
        let filters = HashMap::from([(
            "label".to_string(),
            vec![
                format!("{LABEL_CLUSTER}={}", owner.cluster_id),
                format!("{LABEL_CLASS}={}", owner.node_class),
            ],
        )]);
        let listed = docker
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(filters),
                ..ListContainersOptions::default()
            }))
            .await
            .map_err(provider_err("list containers"))?;
        Ok(listed
            .into_iter()
            .filter_map(|c| {
                let id = c.id?;
                let name = c
                    .names
                    .and_then(|n| n.into_iter().next())
                    .map(|n| n.trim_start_matches('/').to_string())?;
                let running = matches!(
                    c.state,
                    Some(
                        ContainerSummaryStateEnum::RUNNING
                            | ContainerSummaryStateEnum::PAUSED
                            | ContainerSummaryStateEnum::RESTARTING
                    )
                );
                Some(Instance { id, name, running })
            })
            .collect())
    }
}

async fn remove(docker: &Docker, id: &str) -> Result<(), AutoscalerError> {
    let options = RemoveContainerOptions {
        force: true,
        v: true,
        ..RemoveContainerOptions::default()
    };
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => Ok(()),
        // Gone already, or being removed by an earlier call.
        Err(e) if matches!(status_of(&e), Some(404 | 409)) => Ok(()),
        Err(e) => Err(provider_err("remove container")(e)),
    }
}

impl Provider for DockerProvider {
    fn name(&self) -> &'static str {
        "docker"
    }

    fn create<'a>(
        &'a self,
        spec: &'a NodeSpec,
    ) -> BoxFuture<'a, Result<Instance, AutoscalerError>> {
        Box::pin(self.create_container(spec))
    }

    fn destroy<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), AutoscalerError>> {
        Box::pin(self.destroy_container(id))
    }

    fn list<'a>(
        &'a self,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<Vec<Instance>, AutoscalerError>> {
        Box::pin(self.list_containers(owner))
    }
}

/// The client config for the containers: the operator's TOML with the client role on and
/// the class set. Refuses a file that is not TOML, enables the server role, or names
/// another class.
pub fn client_config(text: &str, node_class: &str) -> Result<String, String> {
    let mut doc: toml::Table =
        toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
    let server_on = doc
        .get("server")
        .and_then(|s| s.get("enabled"))
        .and_then(toml::Value::as_bool)
        .unwrap_or(false);
    if server_on {
        return Err("server.enabled is true: the autoscaler creates client agents only".into());
    }
    let client = doc
        .entry("client")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let Some(client) = client.as_table_mut() else {
        return Err("`client` is not a table".into());
    };
    match client.get("node_class").map(|v| v.as_str()) {
        None => {}
        Some(Some(class)) if class == node_class => {}
        Some(other) => {
            return Err(format!(
                "client.node_class is {}, not server.autoscaler.node_class ({node_class:?})",
                other.map_or_else(|| "not a string".to_string(), |c| format!("{c:?}"))
            ))
        }
    }
    client.insert("enabled".into(), toml::Value::Boolean(true));
    client.insert(
        "node_class".into(),
        toml::Value::String(node_class.to_string()),
    );
    toml::to_string(&doc).map_err(|e| e.to_string())
}

/// A tar archive (ustar) holding one regular file `name` (mode 0644) with `data`.
pub fn tar_one_file(name: &str, data: &[u8]) -> Vec<u8> {
    fn octal(field: &mut [u8], value: u64) {
        // Zero-padded octal digits, then a NUL.
        let digits = field.len() - 1;
        let text = format!("{value:0digits$o}");
        field[..digits].copy_from_slice(&text.as_bytes()[text.len() - digits..]);
        field[digits] = 0;
    }
    let mut header = [0u8; 512];
    let name = name.as_bytes();
    let n = name.len().min(100);
    header[..n].copy_from_slice(&name[..n]);
    octal(&mut header[100..108], 0o644);
    octal(&mut header[108..116], 0);
    octal(&mut header[116..124], 0);
    octal(&mut header[124..136], data.len() as u64);
    octal(&mut header[136..148], 0);
    header[156] = b'0';
    header[257..263].copy_from_slice(b"ustar\0");
    header[263..265].copy_from_slice(b"00");
    // The checksum is computed with its own field read as spaces.
    header[148..156].copy_from_slice(b"        ");
    let sum: u64 = header.iter().map(|b| u64::from(*b)).sum();
    let text = format!("{sum:06o}\0 ");
    header[148..156].copy_from_slice(text.as_bytes());
    let mut out = Vec::with_capacity(512 + data.len().div_ceil(512) * 512 + 1024);
    out.extend_from_slice(&header);
    out.extend_from_slice(data);
    out.resize(512 + data.len().div_ceil(512) * 512, 0);
    // Two zero blocks end the archive.
    out.resize(out.len() + 1024, 0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_client_config_gets_the_class_and_the_client_role() {
        let text = "data_dir = \"/var/lib/teamster\"\n[client]\nservers = [\"server1:4647\"]\n";
        let out = client_config(text, "auto").unwrap();
        let doc: toml::Table = toml::from_str(&out).unwrap();
        assert_eq!(doc["client"]["node_class"].as_str(), Some("auto"));
        assert_eq!(doc["client"]["enabled"].as_bool(), Some(true));
        assert_eq!(doc["client"]["servers"][0].as_str(), Some("server1:4647"));
        assert_eq!(doc["data_dir"].as_str(), Some("/var/lib/teamster"));
        // The same class is fine; another class or a server role is refused.
        client_config("[client]\nnode_class = \"auto\"\n", "auto").unwrap();
        let e = client_config("[client]\nnode_class = \"gpu\"\n", "auto").unwrap_err();
        assert!(e.contains("\"gpu\""), "{e}");
        let e = client_config("[server]\nenabled = true\n", "auto").unwrap_err();
        assert!(e.contains("server.enabled"), "{e}");
        assert!(client_config("not toml [", "auto").is_err());
    }

    #[test]
    fn a_missing_client_config_names_the_key() {
        let cfg = DockerProviderConfig {
            client_config: "/nonexistent/teamster-client.toml".into(),
            network: "net".into(),
            ..DockerProviderConfig::default()
        };
        let Err(e) = DockerProvider::new(&cfg, "auto") else {
            panic!("a missing file is refused");
        };
        let text = e.to_string();
        assert!(
            text.contains("server.autoscaler.docker.client_config"),
            "{text}"
        );
        assert!(text.contains("/nonexistent/teamster-client.toml"), "{text}");
    }

    #[test]
    fn the_archive_is_a_ustar_file_with_a_valid_checksum() {
        let data = b"name = \"x\"\n";
        let tar = tar_one_file("agent.toml", data);
        assert_eq!(tar.len(), 512 + 512 + 1024);
        assert_eq!(&tar[..10], b"agent.toml");
        assert_eq!(&tar[257..263], b"ustar\0");
        assert_eq!(&tar[124..135], format!("{:011o}", data.len()).as_bytes());
        let stored = u64::from_str_radix(std::str::from_utf8(&tar[148..154]).unwrap(), 8).unwrap();
        let mut header = tar[..512].to_vec();
        header[148..156].copy_from_slice(b"        ");
        assert_eq!(stored, header.iter().map(|b| u64::from(*b)).sum::<u64>());
        assert_eq!(&tar[512..512 + data.len()], data);
        assert!(tar[512 + data.len()..].iter().all(|b| *b == 0));
    }
}
