//! A docker-compose cluster of `teamster:dev` containers (deploy/docker-compose.yml), with
//! fault injection, for scenarios that need real containers: separate network stacks, kills
//! by the container runtime, network disconnects.
//!
//! ```text
//!  ComposeCluster::up ──▶ deploy/build-image.sh (once per process, incremental)
//!                     ──▶ configs from deploy/config/ (+ overrides) in a temp dir
//!                     ──▶ docker-compose -p <unique> up -d   (own /24, loopback-only ports)
//!                     ──▶ wait for a leader every server agrees on
//!  faults: kill, pause (SIGSTOP) / resume (SIGCONT), disconnect / connect, restart,
//!          stop / start                                        all by container id
//!          fill_disk / free_disk      server3's small tmpfs (`small_disk`, the variant of
//!                                     deploy/docker-compose.faults.yml)
//!  autoscale variant (deploy/docker-compose.autoscale.yml): the servers reach the engine,
//!          one client starts, the leader's docker provider adds and removes the others
//!          ([`ComposeCluster::autoscaled`] lists them)
//!  Drop  ──▶ resume paused containers, print logs if panicking, stop, remove the
//!            autoscaled containers, down -v (always)
//! ```
//!
//! The host reaches every container at its fixed address on the project's bridge network,
//! so tests talk to `http://<ip>:4646` directly; a disconnected container is probed from
//! inside with busybox `wget` ([`ComposeCluster::exec_get`]). Both `docker compose` (v2)
//! and `docker-compose` (v1.29) work. One compose cluster runs at a time per test process.
//!
//! The image is `teamster:dev`, or `TEAMSTER_TEST_IMAGE` when set (so two worktrees on one
//! engine do not run each other's builds).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use teamster::api::ApiClient;

use crate::wait_for;

/// The image every compose cluster runs by default.
pub const IMAGE: &str = "teamster:dev";

/// The image compose clusters run and [`build_image`] builds: `TEAMSTER_TEST_IMAGE`, or
/// [`IMAGE`].
pub fn image() -> &'static str {
    static IMAGE_NAME: OnceLock<String> = OnceLock::new();
    IMAGE_NAME.get_or_init(|| {
        std::env::var("TEAMSTER_TEST_IMAGE")
            .ok()
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| IMAGE.to_string())
    })
}

/// The label every container the docker autoscaler creates carries (with the cluster id).
pub const AUTOSCALED_LABEL: &str = "io.teamster.autoscaler.cluster";

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
static NEXT: AtomicU32 = AtomicU32::new(0);

/// The repository root (the workspace).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cluster-tests lives in the workspace")
        .to_path_buf()
}

/// How to run compose here: `["docker", "compose"]` or `["docker-compose"]`.
pub fn compose_tool() -> Option<Vec<String>> {
    static TOOL: OnceLock<Option<Vec<String>>> = OnceLock::new();
    TOOL.get_or_init(|| {
        let ok = |cmd: &[&str]| {
            std::process::Command::new(cmd[0])
                .args(&cmd[1..])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !ok(&["docker", "info", "--format", "{{.ServerVersion}}"]) {
            return None;
        }
        if ok(&["docker", "compose", "version"]) {
            Some(vec!["docker".into(), "compose".into()])
        } else if ok(&["docker-compose", "version"]) {
            Some(vec!["docker-compose".into()])
        } else {
            None
        }
    })
    .clone()
}

/// Why Docker cannot be used, or `None` when it can.
pub fn docker_unavailable() -> Option<String> {
    match compose_tool() {
        Some(_) => None,
        None => Some(
            "docker (a reachable daemon) and docker compose / docker-compose are required".into(),
        ),
    }
}

/// True when a compose scenario must be skipped: Docker is missing and this is not CI
/// (a loud `SKIP` line says so). Under `CI=true` a missing Docker is a failure: panics.
pub fn skip_without_docker(test: &str) -> bool {
    let Some(why) = docker_unavailable() else {
        return false;
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test}: CI=true but {why}");
    }
    eprintln!("SKIP {test}: {why}");
    true
}

/// Build `teamster:dev` with deploy/build-image.sh, once per process. Returns how long it
/// took (a few seconds when nothing changed).
pub fn build_image() -> anyhow::Result<Duration> {
    static BUILT: OnceLock<Result<Duration, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let start = Instant::now();
            // The (static) binary the process tests run too, built once by `teamster_bin`.
            let out = std::process::Command::new(repo_root().join("deploy/build-image.sh"))
                .env("IMAGE", image())
                .env("BIN", crate::process::teamster_bin())
                .env("SKIP_CARGO", "1")
                .output()
                .map_err(|e| format!("running deploy/build-image.sh: {e}"))?;
            if !out.status.success() {
                let err = String::from_utf8_lossy(&out.stderr);
                let tail: Vec<&str> = err.lines().rev().take(30).collect();
                return Err(format!(
                    "deploy/build-image.sh failed ({}):\n{}",
                    out.status,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                ));
            }
            let took = start.elapsed();
            eprintln!("compose: image {} ready in {took:.1?}", image());
            Ok(took)
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// Options for a compose cluster.
#[derive(Debug, Clone, Default)]
pub struct ComposeOptions {
    /// Extra lines for the `[server.raft]` table of every server (e.g. a small
    /// `snapshot_threshold`).
    pub raft_toml: String,
    /// Extra lines for the `[server]` table of every server.
    pub server_toml: String,
    /// The TLS variant (deploy/docker-compose.tls.yml, deploy/config-tls): certificates made
    /// by `teamster tls` into the mounted config directory, mutual TLS on RPC, HTTPS with
    /// client certificates on the API.
    pub tls: bool,
    /// The fault variant (deploy/docker-compose.faults.yml): server3's data on a small
    /// tmpfs (`disk_size`, e.g. "256m") kept mounted by a sleeping `server3-disk`
    /// container, and server3 restarted by docker when it exits non-zero.
    pub small_disk: Option<String>,
    /// The autoscale variant (deploy/docker-compose.autoscale.yml): capacity on demand with
    /// the docker provider, and one client (`client1`) to begin with.
    pub autoscale: Option<AutoscaleOptions>,
}

/// The autoscale variant's settings.
#[derive(Debug, Clone, Default)]
pub struct AutoscaleOptions {
    /// Lines for every server's `[server.autoscaler]` table (`node_class`, `max_nodes`,
    /// timings). The harness adds `enabled = true` and the `[server.autoscaler.docker]`
    /// table: the image, the project's network, and the client config below.
    pub autoscaler_toml: String,
    /// Lines for the `[client]` table of client1 and of the autoscaled clients (their
    /// config is `/etc/teamster/autoscaled-client.toml`, deploy/config/client.toml with
    /// these lines).
    pub client_toml: String,
}

/// A container the docker autoscaler created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Autoscaled {
    /// The container id.
    pub id: String,
    /// Its name, which is its node's name.
    pub name: String,
    /// Its state (`running`, `exited`, …).
    pub state: String,
}

/// One service of the cluster.
#[derive(Debug, Clone)]
pub struct Service {
    /// The compose service name (`server1`, `client2`).
    pub name: String,
    /// Its fixed address on the cluster network.
    pub ip: String,
    /// Its container id.
    pub container: String,
    /// How the harness speaks HTTPS to it (the TLS variant); `None`: HTTP.
    pub api_tls: Option<teamster::util::tls::ApiTlsFiles>,
}

impl Service {
    /// The HTTP API, `http://ip:4646` (`https://` in the TLS variant).
    pub fn http_addr(&self) -> String {
        let scheme = if self.api_tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}:4646", self.ip)
    }

    /// The raft/RPC address other servers know it by, `ip:4647`.
    pub fn rpc_addr(&self) -> String {
        format!("{}:4647", self.ip)
    }

    /// A client of its HTTP API.
    pub fn api(&self) -> ApiClient {
        match &self.api_tls {
            None => ApiClient::new(&self.http_addr()),
            Some(files) => ApiClient::with_tls(
                &self.http_addr(),
                files
                    .client_config("global")
                    .expect("the compose cluster's CLI certificate loads"),
            ),
        }
    }
}

/// A running compose cluster; torn down (volumes included) when dropped.
pub struct ComposeCluster {
    _turn: MutexGuard<'static, ()>,
    tool: Vec<String>,
    project: String,
    subnet: String,
    config_dir: tempfile::TempDir,
    /// `server1..3`.
    pub servers: Vec<Service>,
    /// `client1..2`.
    pub clients: Vec<Service>,
    paused: Mutex<Vec<String>>,
    down: bool,
    tls: bool,
    small_disk: Option<String>,
    /// The container keeping server3's small disk mounted (the fault variant).
    disk_holder: Option<String>,
    autoscale: bool,
}

fn compose_file() -> PathBuf {
    repo_root().join("deploy/docker-compose.yml")
}

/// The checked-in config with `extra` lines inserted at the top of `[table]` (a table the
/// file does not have is added at its end).
fn with_lines(text: &str, table: &str, extra: &str) -> anyhow::Result<String> {
    if extra.trim().is_empty() {
        return Ok(text.to_string());
    }
    let header = format!("[{table}]\n");
    let Some(at) = text.find(&header).map(|at| at + header.len()) else {
        return Ok(format!(
            "{}\n\n{header}{}\n",
            text.trim_end(),
            extra.trim_end()
        ));
    };
    Ok(format!(
        "{}{}\n{}",
        &text[..at],
        extra.trim_end(),
        &text[at..]
    ))
}

impl ComposeCluster {
    /// Build the image (once), then bring up three servers and two clients under a unique
    /// project name on their own subnet, and wait until the servers agree on a leader.
    pub async fn up(options: ComposeOptions) -> anyhow::Result<ComposeCluster> {
        let tool = compose_tool().context("docker compose is not available")?;
        build_image()?;
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let config_dir = tempfile::Builder::new()
            .prefix("teamster-compose-")
            .tempdir()?;
        let base = repo_root().join(if options.tls {
            "deploy/config-tls"
        } else {
            "deploy/config"
        });
        let api_tls = if options.tls {
            let certs = crate::tls::TestCerts::make(&config_dir.path().join("tls"))?;
            Some(certs.cli_files())
        } else {
            None
        };
        let server = std::fs::read_to_string(base.join("server.toml"))?;
        let server = with_lines(&server, "server.raft", &options.raft_toml)?;
        let server = with_lines(&server, "server", &options.server_toml)?;
        std::fs::write(config_dir.path().join("server.toml"), &server)?;
        let client = std::fs::read_to_string(base.join("client.toml"))?;
        let client_lines = options
            .autoscale
            .as_ref()
            .map_or("", |a| a.client_toml.as_str());
        let client = with_lines(&client, "client", client_lines)?;
        std::fs::write(config_dir.path().join("client.toml"), &client)?;
        if options.autoscale.is_some() {
            std::fs::write(config_dir.path().join("autoscaled-client.toml"), &client)?;
        }
        // The bind-mounted directory must be readable by the container's root.
        let _ = std::fs::set_permissions(
            config_dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        );

        let mut c = ComposeCluster {
            _turn: turn,
            tool,
            project: String::new(),
            subnet: String::new(),
            config_dir,
            servers: Vec::new(),
            clients: Vec::new(),
            paused: Mutex::new(Vec::new()),
            down: true,
            tls: options.tls,
            small_disk: options.small_disk.clone(),
            disk_holder: None,
            autoscale: options.autoscale.is_some(),
        };
        // A subnet may already be taken by another network: try a few.
        let mut attempt = 0;
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let pid = std::process::id();
            c.project = format!("teamster{pid}n{n}");
            c.subnet = format!("172.30.{}", (pid + n * 37) % 200 + 20);
            if let Some(a) = &options.autoscale {
                // The provider's network is the project's: known only now.
                let text = autoscaler_config(&server, a, &c.network());
                std::fs::write(c.config_dir.path().join("server.toml"), text)?;
            }
            c.down = false;
            let mut up = vec!["up", "-d", "--no-build"];
            if c.autoscale {
                up.extend(["server1", "server2", "server3", "client1"]);
            }
            match c.compose(&up).await {
                Ok(_) => break,
                Err(e) if attempt < 3 && format!("{e:#}").contains("overlap") => {
                    c.teardown();
                    attempt += 1;
                }
                Err(e) => return Err(e.context("docker compose up")),
            }
        }
        for (names, ips, into_servers) in [
            (
                ["server1", "server2", "server3"].as_slice(),
                [11, 12, 13].as_slice(),
                true,
            ),
            (
                if c.autoscale {
                    ["client1"].as_slice()
                } else {
                    ["client1", "client2"].as_slice()
                },
                [21, 22].as_slice(),
                false,
            ),
        ] {
            for (name, last) in names.iter().zip(ips) {
                let id = c.compose(&["ps", "-q", name]).await?.trim().to_string();
                if id.is_empty() {
                    bail!("compose started no container for {name}");
                }
                let s = Service {
                    name: name.to_string(),
                    ip: format!("{}.{last}", c.subnet),
                    container: id,
                    api_tls: api_tls.clone(),
                };
                if into_servers {
                    c.servers.push(s);
                } else {
                    c.clients.push(s);
                }
            }
        }
        if c.small_disk.is_some() {
            let id = c.compose(&["ps", "-q", "server3-disk"]).await?;
            c.disk_holder = Some(id.trim().to_string());
        }
        let start = Instant::now();
        c.wait_leader(&[0, 1, 2], Duration::from_secs(60)).await?;
        eprintln!(
            "compose: project {} up on {}.0/24, leader after {:.1?}",
            c.project,
            c.subnet,
            start.elapsed()
        );
        Ok(c)
    }

    /// The compose project name.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The project's network, as docker names it.
    pub fn network(&self) -> String {
        format!("{}_cluster", self.project)
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("TEAMSTER_IMAGE", image().to_string()),
            ("TEAMSTER_SUBNET", self.subnet.clone()),
            (
                "TEAMSTER_CONFIG_DIR",
                self.config_dir.path().display().to_string(),
            ),
            ("TEAMSTER_PUBLISH_1", "127.0.0.1:".into()),
            ("TEAMSTER_PUBLISH_2", "127.0.0.1:".into()),
            ("TEAMSTER_PUBLISH_3", "127.0.0.1:".into()),
        ];
        if let Some(size) = &self.small_disk {
            env.push(("TEAMSTER_DISK_SIZE", size.clone()));
        }
        env
    }

    fn compose_command(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(&self.tool[0]);
        cmd.args(&self.tool[1..])
            .arg("-p")
            .arg(&self.project)
            .arg("-f")
            .arg(compose_file());
        if self.tls {
            cmd.arg("-f")
                .arg(repo_root().join("deploy/docker-compose.tls.yml"));
        }
        if self.small_disk.is_some() {
            cmd.arg("-f")
                .arg(repo_root().join("deploy/docker-compose.faults.yml"));
        }
        if self.autoscale {
            cmd.arg("-f")
                .arg(repo_root().join("deploy/docker-compose.autoscale.yml"));
        }
        cmd.args(args).envs(self.env());
        cmd
    }

    /// Run `docker compose -p <project> -f deploy/docker-compose.yml <args>`; its stdout.
    pub async fn compose(&self, args: &[&str]) -> anyhow::Result<String> {
        let cmd = self.compose_command(args);
        run(tokio::process::Command::from(cmd)).await
    }

    /// Run `docker <args>`; its stdout.
    pub async fn docker(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut cmd = tokio::process::Command::new("docker");
        cmd.args(args);
        run(cmd).await
    }

    fn service(&self, name: &str) -> &Service {
        self.servers
            .iter()
            .chain(&self.clients)
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("no service {name}"))
    }

    /// SIGKILL a service's container (`docker kill`): a crash, no shutdown path.
    pub async fn kill(&self, name: &str) -> anyhow::Result<()> {
        let id = self.service(name).container.clone();
        self.docker(&["kill", &id]).await.map(drop)
    }

    /// SIGSTOP (`pause = true`) or SIGCONT a service's process: a stall.
    pub async fn pause(&self, name: &str, pause: bool) -> anyhow::Result<()> {
        let id = self.service(name).container.clone();
        let sig = if pause { "STOP" } else { "CONT" };
        self.docker(&["kill", "-s", sig, &id]).await?;
        let mut paused = self.paused.lock().unwrap_or_else(|p| p.into_inner());
        if pause {
            paused.push(id);
        } else {
            paused.retain(|p| *p != id);
        }
        Ok(())
    }

    /// Remove a service from the cluster network: total isolation, host included.
    pub async fn disconnect(&self, name: &str) -> anyhow::Result<()> {
        let id = self.service(name).container.clone();
        self.docker(&["network", "disconnect", "--force", &self.network(), &id])
            .await
            .map(drop)
    }

    /// Put a disconnected service back on the network at its fixed address.
    pub async fn connect(&self, name: &str) -> anyhow::Result<()> {
        let s = self.service(name).clone();
        self.docker(&[
            "network",
            "connect",
            "--ip",
            &s.ip,
            &self.network(),
            &s.container,
        ])
        .await
        .map(drop)
    }

    /// `docker stop` (SIGTERM, then SIGKILL after the grace period).
    pub async fn stop(&self, name: &str) -> anyhow::Result<()> {
        let id = self.service(name).container.clone();
        self.docker(&["stop", "-t", "20", &id]).await.map(drop)
    }

    /// `docker start` a stopped or killed service (same container, same volume, same IP).
    pub async fn start(&self, name: &str) -> anyhow::Result<()> {
        let id = self.service(name).container.clone();
        self.docker(&["start", &id]).await.map(drop)
    }

    /// `docker restart` (graceful stop, then start).
    pub async fn restart(&self, name: &str) -> anyhow::Result<()> {
        let id = self.service(name).container.clone();
        self.docker(&["restart", "-t", "20", &id]).await.map(drop)
    }

    /// Whether a service's container is running (a paused one is).
    pub async fn is_running(&self, name: &str) -> anyhow::Result<bool> {
        let id = self.service(name).container.clone();
        let out = self
            .docker(&["inspect", "-f", "{{.State.Running}}", &id])
            .await?;
        Ok(out.trim() == "true")
    }

    /// Fill server3's small disk (the fault variant) to the last byte with a ballast file.
    /// Written from the container that holds the disk, so it works whatever state server3
    /// is in.
    pub async fn fill_disk(&self) -> anyhow::Result<()> {
        let holder = self
            .disk_holder
            .as_deref()
            .context("not the small-disk variant")?;
        // dd ends with "No space left on device" (exit 1): that is the point.
        let _ = self
            .docker(&[
                "exec",
                holder,
                "dd",
                "if=/dev/zero",
                "of=/var/lib/teamster/ballast",
                "bs=64k",
            ])
            .await;
        let free = self.disk_free_kb().await?;
        if free > 64 {
            bail!("the disk still has {free} KiB free after filling it");
        }
        Ok(())
    }

    /// Remove the ballast [`ComposeCluster::fill_disk`] wrote.
    pub async fn free_disk(&self) -> anyhow::Result<()> {
        let holder = self
            .disk_holder
            .as_deref()
            .context("not the small-disk variant")?;
        self.docker(&["exec", holder, "rm", "-f", "/var/lib/teamster/ballast"])
            .await
            .map(drop)
    }

    /// Free KiB on server3's small disk.
    async fn disk_free_kb(&self) -> anyhow::Result<u64> {
        let holder = self
            .disk_holder
            .as_deref()
            .context("not the small-disk variant")?;
        let out = self
            .docker(&["exec", holder, "df", "-k", "/var/lib/teamster"])
            .await?;
        // "Filesystem 1K-blocks Used Available Use% Mounted on" then one line.
        out.lines()
            .nth(1)
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("unexpected df output: {out}"))
    }

    /// GET `path` on a service's API from inside its container (busybox `wget` on
    /// 127.0.0.1), which works while it is disconnected. `Err` carries wget's complaint
    /// (e.g. "server returned error: HTTP/1.1 500").
    pub async fn exec_get(&self, name: &str, path: &str) -> anyhow::Result<String> {
        let id = self.service(name).container.clone();
        let url = format!("http://127.0.0.1:4646{path}");
        // busybox 1.35's static `wget -T` segfaults; `timeout` bounds it instead.
        self.docker(&["exec", &id, "timeout", "10", "wget", "-q", "-O", "-", &url])
            .await
    }

    /// POST a JSON body on a service's API from inside its container; an error when it is
    /// refused or not answered within 10 s.
    pub async fn exec_post(&self, name: &str, path: &str, body: &str) -> anyhow::Result<String> {
        let id = self.service(name).container.clone();
        let url = format!("http://127.0.0.1:4646{path}");
        self.docker(&[
            "exec",
            &id,
            "timeout",
            "10",
            "wget",
            "-q",
            "-O",
            "-",
            "--header",
            "Content-Type: application/json",
            "--post-data",
            body,
            &url,
        ])
        .await
    }

    /// The index in `servers` of the leader that every listed server agrees on (asked over
    /// their published addresses, `stale`), waiting up to `timeout`.
    pub async fn wait_leader(&self, among: &[usize], timeout: Duration) -> anyhow::Result<usize> {
        let apis: Vec<(usize, ApiClient, String)> = among
            .iter()
            .map(|&i| (i, self.servers[i].api(), self.servers[i].rpc_addr()))
            .collect();
        let leader = wait_for(timeout, "a leader the servers agree on", || {
            let apis = apis.clone();
            async move {
                let mut seen = None;
                for (_, api, _) in &apis {
                    let l: String = api.get("/v1/status/leader?stale=true").await.ok()?;
                    if l.is_empty() || seen.as_ref().is_some_and(|s| s != &l) {
                        return None;
                    }
                    seen = Some(l);
                }
                seen.filter(|l| apis.iter().any(|(_, _, rpc)| rpc == l))
            }
        })
        .await?;
        apis.iter()
            .find(|(_, _, rpc)| *rpc == leader)
            .map(|(i, _, _)| *i)
            .with_context(|| format!("the leader {leader} is not among the servers asked"))
    }

    /// The containers the docker autoscaler created on this cluster's network, running or
    /// not.
    pub async fn autoscaled(&self) -> anyhow::Result<Vec<Autoscaled>> {
        let out = self
            .docker(&[
                "ps",
                "-a",
                "--filter",
                &format!("label={AUTOSCALED_LABEL}"),
                "--filter",
                &format!("network={}", self.network()),
                "--format",
                "{{.ID}} {{.Names}} {{.State}}",
            ])
            .await?;
        Ok(out
            .lines()
            .filter_map(|l| {
                let mut parts = l.split_whitespace();
                Some(Autoscaled {
                    id: parts.next()?.to_string(),
                    name: parts.next()?.to_string(),
                    state: parts.next().unwrap_or("").to_string(),
                })
            })
            .collect())
    }

    /// The ids of the autoscaled containers, asked synchronously (for `Drop`).
    fn autoscaled_ids_sync(&self) -> Vec<String> {
        std::process::Command::new("docker")
            .args([
                "ps",
                "-aq",
                "--filter",
                &format!("label={AUTOSCALED_LABEL}"),
                "--filter",
                &format!("network={}", self.network()),
            ])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The last `lines` of every service's log, to stderr.
    pub fn dump_logs(&self, lines: usize) {
        for s in self.servers.iter().chain(&self.clients) {
            let out = std::process::Command::new("docker")
                .args(["logs", "--tail", &lines.to_string(), &s.container])
                .output();
            eprintln!("----- {} ({}) -----", s.name, s.ip);
            if let Ok(out) = out {
                eprint!("{}", String::from_utf8_lossy(&out.stdout));
                eprint!("{}", String::from_utf8_lossy(&out.stderr));
            }
        }
        if self.autoscale {
            for id in self.autoscaled_ids_sync() {
                let out = std::process::Command::new("docker")
                    .args(["logs", "--tail", &lines.to_string(), &id])
                    .output();
                eprintln!("----- autoscaled {id} -----");
                if let Ok(out) = out {
                    eprint!("{}", String::from_utf8_lossy(&out.stdout));
                    eprint!("{}", String::from_utf8_lossy(&out.stderr));
                }
            }
        }
    }

    /// Every service's whole log into a directory that is kept (with
    /// `TEAMSTER_KEEP_CLUSTER_DIR=1`), named on stderr.
    fn save_logs(&self) {
        let Ok(dir) = tempfile::Builder::new()
            .prefix(&format!("{}-logs-", self.project))
            .tempdir()
        else {
            return;
        };
        let dir = dir.keep();
        for s in self.servers.iter().chain(&self.clients) {
            if let Ok(out) = std::process::Command::new("docker")
                .args(["logs", &s.container])
                .output()
            {
                let mut text = out.stdout;
                text.extend_from_slice(&out.stderr);
                let _ = std::fs::write(dir.join(format!("{}.log", s.name)), text);
            }
        }
        eprintln!("compose: every service's log kept in {}", dir.display());
    }

    fn teardown(&mut self) {
        if self.down {
            return;
        }
        let paused = std::mem::take(self.paused.get_mut().unwrap_or_else(|p| p.into_inner()));
        for id in paused {
            let _ = std::process::Command::new("docker")
                .args(["kill", "-s", "CONT", &id])
                .output();
        }
        if self.autoscale {
            // The servers first, so no leader starts another client meanwhile; then the
            // containers the autoscaler made (not compose's: `down` would leave them, and
            // the network, behind).
            let _ = self
                .compose_command(&["stop", "-t", "2", "server1", "server2", "server3"])
                .output();
            let ids = self.autoscaled_ids_sync();
            if !ids.is_empty() {
                let out = std::process::Command::new("docker")
                    .args(["rm", "-fv"])
                    .args(&ids)
                    .output();
                if let Some(o) = out.ok().filter(|o| !o.status.success()) {
                    eprintln!(
                        "compose: removing autoscaled containers failed: {}",
                        String::from_utf8_lossy(&o.stderr)
                    );
                }
            }
        }
        let out = self
            .compose_command(&["down", "-v", "--remove-orphans", "-t", "1"])
            .output();
        match out {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "compose: down of {} failed: {}",
                self.project,
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("compose: down of {} failed: {e}", self.project),
        }
        self.down = true;
    }
}

impl Drop for ComposeCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dump_logs(80);
            if crate::process::keep_dirs() {
                self.save_logs();
            }
        }
        self.teardown();
    }
}

/// The server config of the autoscale variant: `server` with the autoscaler on, its
/// `options`, and the docker provider on `network` with the harness's image and client
/// config.
fn autoscaler_config(server: &str, options: &AutoscaleOptions, network: &str) -> String {
    format!(
        "{}\n\n[server.autoscaler]\nenabled = true\n{}\n\n[server.autoscaler.docker]\n\
         image = {:?}\nnetwork = {:?}\nclient_config = \"/etc/teamster/autoscaled-client.toml\"\n",
        server.trim_end(),
        options.autoscaler_toml.trim_end(),
        image(),
        network,
    )
}

async fn run(mut cmd: tokio::process::Command) -> anyhow::Result<String> {
    let desc = format!("{:?}", cmd.as_std());
    let out = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .with_context(|| format!("running {desc}"))?;
    if !out.status.success() {
        bail!(
            "{desc} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::with_lines;

    #[test]
    fn extra_lines_go_at_the_top_of_their_table_or_in_a_new_one() {
        let text = "a = 1\n\n[server]\nenabled = true\n";
        assert_eq!(
            with_lines(text, "server", "num_schedulers = 1").unwrap(),
            "a = 1\n\n[server]\nnum_schedulers = 1\nenabled = true\n"
        );
        let added = with_lines(text, "server.raft", "snapshot_threshold = 200\n").unwrap();
        assert_eq!(
            added,
            "a = 1\n\n[server]\nenabled = true\n\n[server.raft]\nsnapshot_threshold = 200\n"
        );
        assert_eq!(with_lines(text, "server", "  ").unwrap(), text);
    }
}
