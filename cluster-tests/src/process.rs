//! A cluster of real `teamster` processes on loopback.
//!
//! Each cluster gets its own `127.x.y.0/24`-style block of loopback addresses (Linux routes
//! all of 127/8 to `lo`), one address per server, so every server listens on the standard
//! ports 4646 and 4647 and clusters in parallel tests never collide on a port. Each server's
//! log goes to a file in the cluster's temporary directory; [`ProcessCluster::dump_logs`]
//! prints their tails when a test fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use teamster::api::ApiClient;

use crate::wait_for;

static NEXT_BLOCK: AtomicU32 = AtomicU32::new(0);

/// `teamster alloc exec -address <address> <args…>` run to its end, with `stdin` written
/// to it (else none): its output and exit status.
pub fn alloc_exec(address: &str, args: &[&str], stdin: Option<&str>) -> std::process::Output {
    use std::process::{Command, Stdio};
    let mut cmd = Command::new(teamster_bin());
    cmd.args(["alloc", "exec", "-address", address])
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("teamster runs");
    if let Some(text) = stdin {
        use std::io::Write;
        let mut input = child.stdin.take().expect("piped stdin");
        input.write_all(text.as_bytes()).expect("stdin written");
    }
    child.wait_with_output().expect("teamster ends")
}

/// The path of the `teamster` binary: `TEAMSTER_BIN`, or `target/…/<profile>/teamster` next to
/// this test executable. Run under cargo (which sets `CARGO`), the first call in a process
/// builds it with `cargo build -p teamster --bin teamster` in the same profile and target
/// directory: `cargo test --workspace` does not build another package's binaries, and a
/// `cargo test -p teamster-cluster-tests` after an edit must not run a stale one. Cargo has
/// released its build lock by the time tests run, and the build is a link at most.
pub fn teamster_bin() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    if let Ok(p) = std::env::var("TEAMSTER_BIN") {
        return PathBuf::from(p);
    }
    BUILT.get_or_init(build_teamster).clone()
}

/// The directory of this test executable's profile: `target/[<triple>/]<profile>`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable has a path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("test executables live in target/<profile>/deps")
        .to_path_buf()
}

/// The cargo profile this test executable was built with (`dev` for `target/…/debug`).
fn test_profile() -> String {
    match profile_dir().file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev".to_string(),
        Some(other) => other.to_string(),
    }
}

/// The target directory holding `profile_dir`: its parent, or its grandparent when a build
/// target (set in `.cargo/config.toml`) adds a `<triple>` level (a name like
/// `x86_64-unknown-linux-gnu`).
fn target_root(profile_dir: &Path) -> PathBuf {
    let parent = profile_dir.parent().unwrap_or(profile_dir);
    let triple = parent
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.split('-').count() >= 3 && n.contains("linux"));
    match parent.parent() {
        Some(grand) if triple => grand.to_path_buf(),
        _ => parent.to_path_buf(),
    }
}

fn build_teamster() -> PathBuf {
    let profile_dir = profile_dir();
    let bin = profile_dir.join("teamster");
    if let Ok(cargo) = std::env::var("CARGO") {
        let target_dir = target_root(&profile_dir);
        let profile = test_profile();
        let status = Command::new(cargo)
            .args(["build", "--quiet", "-p", "teamster", "--bin", "teamster"])
            .arg("--profile")
            .arg(&profile)
            .arg("--target-dir")
            .arg(target_dir)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the teamster binary failed");
    }
    assert!(
        bin.exists(),
        "{} is missing: run the tests with cargo, which builds it, or set TEAMSTER_BIN",
        bin.display()
    );
    bin
}

/// A fresh loopback block: `127.<a>.<b>.*`, distinct per cluster in this process and unlikely
/// to collide with another test process.
fn loopback_block() -> (u8, u8) {
    let n = NEXT_BLOCK.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let a = 10 + (pid % 200) as u8;
    let b = ((pid / 200 + n) % 250) as u8 + 1;
    (a, b)
}

/// The `[limits]` of a cluster that simulated clients reach from this host's one address:
/// no per-address connection limit (the default 100 counts every simulated node as one
/// client).
pub const SIMULATED_CLIENTS_LIMITS: &str =
    "\n[limits]\nrpc_max_conns_per_client = 0\nhttp_max_conns_per_client = 0\n";

/// Options for a process cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Extra TOML lines for every server's `[server]` table.
    pub server_toml: String,
    /// Raft heartbeat interval.
    pub heartbeat: &'static str,
    /// Raft election timeout (the minimum; elections wait up to twice this).
    pub election_timeout: &'static str,
    /// Extra TOML lines for every server's `[server.raft]` table (e.g. snapshot thresholds).
    pub raft_toml: String,
    /// Extra TOML lines for every server's `[server.workers]` table (e.g. `max_batch = 1`).
    pub workers_toml: String,
    /// Extra TOML at the end of every server's file: further tables (e.g. `[tls]`).
    pub extra_toml: String,
    /// How the harness reaches the servers' HTTPS API (their `tls.http`); `None`: HTTP.
    pub api_tls: Option<teamster::util::tls::ApiTlsFiles>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            server_toml: String::new(),
            heartbeat: "50ms",
            election_timeout: "300ms",
            raft_toml: String::new(),
            workers_toml: String::new(),
            extra_toml: String::new(),
            api_tls: None,
        }
    }
}

/// Cluster scenarios in one test binary run one at a time: the machine is small and raft
/// timings are short.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// One server process.
pub struct ServerProcess {
    /// Its name, `server-<n>`.
    pub name: String,
    /// Its loopback IP.
    pub ip: String,
    /// Its data directory.
    pub data_dir: PathBuf,
    config_path: PathBuf,
    log_path: PathBuf,
    child: Option<Child>,
    api_tls: Option<teamster::util::tls::ApiTlsFiles>,
}

impl ServerProcess {
    /// The HTTP API address, `http://ip:4646` (`https://` with TLS).
    pub fn http_addr(&self) -> String {
        let scheme = if self.api_tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}:4646", self.ip)
    }

    /// The RPC address, `ip:4647`.
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
                    .expect("the cluster's API TLS files load"),
            ),
        }
    }

    /// Its log file.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Its config file (edit it, then [`ProcessCluster::reload`]).
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// Whether its process is running.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }
}

/// A cluster of server processes.
pub struct ProcessCluster {
    _turn: std::sync::MutexGuard<'static, ()>,
    dir: tempfile::TempDir,
    block: (u8, u8),
    options: ClusterOptions,
    /// The servers, in start order.
    pub servers: Vec<ServerProcess>,
}

/// Whether `TEAMSTER_KEEP_CLUSTER_DIR` asks to keep the directories of a run.
pub fn keep_dirs() -> bool {
    std::env::var_os("TEAMSTER_KEEP_CLUSTER_DIR").is_some_and(|v| !v.is_empty())
}

/// Keep `dir` after the run (its path printed to stderr) when [`keep_dirs`] says so.
pub fn keep_if_asked(dir: &mut tempfile::TempDir) {
    if keep_dirs() {
        dir.disable_cleanup(true);
        eprintln!("keeping {}", dir.path().display());
    }
}

impl ProcessCluster {
    /// Start `n` servers at once, each with `bootstrap_expect = n` and every other server in
    /// its join list.
    ///
    /// With `TEAMSTER_KEEP_CLUSTER_DIR` set (to anything but empty), the cluster's directory
    /// (configs, data, each server's log) stays after the cluster is dropped, and its path
    /// is printed to stderr: for a run that must be looked at afterwards ([`keep_dirs`]).
    pub fn start(n: usize, options: ClusterOptions) -> anyhow::Result<ProcessCluster> {
        let mut dir = tempfile::Builder::new()
            .prefix("teamster-cluster-")
            .tempdir()?;
        keep_if_asked(&mut dir);
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let mut c = ProcessCluster {
            _turn: turn,
            dir,
            block: loopback_block(),
            options,
            servers: Vec::new(),
        };
        let ips: Vec<String> = (1..=n).map(|i| c.ip(i)).collect();
        for i in 1..=n {
            let join: Vec<String> = ips
                .iter()
                .enumerate()
                .filter(|(k, _)| k + 1 != i)
                .map(|(_, ip)| format!("{ip}:4647"))
                .collect();
            c.add(i, n, &join)?;
        }
        for i in 0..n {
            c.spawn(i)?;
        }
        Ok(c)
    }

    /// Add a server that joins the cluster through `server.join` (no bootstrap).
    pub fn add_joining_server(&mut self) -> anyhow::Result<usize> {
        let i = self.servers.len() + 1;
        let join: Vec<String> = self.servers.iter().map(|s| s.rpc_addr()).collect();
        self.add(i, 0, &join)?;
        self.spawn(i - 1)?;
        Ok(i - 1)
    }

    /// Add a server that knows no other (no `server.join`, no bootstrap): it waits, in no
    /// cluster, until one adds it (`/v1/agent/join`).
    pub fn add_lone_server(&mut self) -> anyhow::Result<usize> {
        let i = self.servers.len() + 1;
        self.add(i, 0, &[])?;
        self.spawn(i - 1)?;
        Ok(i - 1)
    }

    fn ip(&self, i: usize) -> String {
        format!("127.{}.{}.{}", self.block.0, self.block.1, i)
    }

    fn add(&mut self, i: usize, expect: usize, join: &[String]) -> anyhow::Result<()> {
        let name = format!("server-{i}");
        let ip = self.ip(i);
        let data_dir = self.dir.path().join(&name);
        std::fs::create_dir_all(&data_dir)?;
        let join_list = join
            .iter()
            .map(|j| format!("{j:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        let o = &self.options;
        let config = format!(
            "name = {name:?}\ndata_dir = {data:?}\nbind_addr = {ip:?}\nlog_level = \"info\"\n\
             [server]\nenabled = true\nbootstrap_expect = {expect}\njoin = [{join_list}]\n\
             join_retry_interval = \"200ms\"\n{extra}\n\
             [server.raft]\nheartbeat_interval = {hb:?}\nelection_timeout = {et:?}\n{raft}\n\
             [server.workers]\n{workers}\n{tail}\n",
            data = data_dir.display().to_string(),
            extra = o.server_toml,
            hb = o.heartbeat,
            et = o.election_timeout,
            raft = o.raft_toml,
            workers = o.workers_toml,
            tail = o.extra_toml,
        );
        let config_path = self.dir.path().join(format!("{name}.toml"));
        std::fs::write(&config_path, config)?;
        let log_path = self.dir.path().join(format!("{name}.log"));
        self.servers.push(ServerProcess {
            name,
            ip,
            data_dir,
            config_path,
            log_path,
            child: None,
            api_tls: o.api_tls.clone(),
        });
        Ok(())
    }

    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let s = &mut self.servers[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&s.log_path)?;
        let child = Command::new(teamster_bin())
            .arg("agent")
            .arg("--config")
            .arg(&s.config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawning {}", s.name))?;
        s.child = Some(child);
        Ok(())
    }

    /// SIGKILL server `i` and wait for it to exit.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.servers[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM server `i` and wait for it to exit cleanly; fails if it does not within 20 s.
    pub fn stop(&mut self, i: usize) -> anyhow::Result<()> {
        let Some(mut c) = self.servers[i].child.take() else {
            return Ok(());
        };
        signal(&c, libc::SIGTERM)?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = c.try_wait()? {
                if !status.success() {
                    bail!(
                        "{} exited with {status} after SIGTERM",
                        self.servers[i].name
                    );
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                bail!(
                    "{} did not stop within 20 s of SIGTERM",
                    self.servers[i].name
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Send `sig` to server `i`, which must be running.
    fn signal_running(&self, i: usize, sig: libc::c_int) -> anyhow::Result<()> {
        let c = self.servers[i]
            .child
            .as_ref()
            .with_context(|| format!("{} is not running", self.servers[i].name))?;
        signal(c, sig)
    }

    /// SIGTERM server `i` without waiting (see [`ProcessCluster::wait_stopped`]).
    pub fn terminate(&mut self, i: usize) -> anyhow::Result<()> {
        self.signal_running(i, libc::SIGTERM)
    }

    /// Wait (without blocking the runtime) until server `i` has exited cleanly; fails if it
    /// exits with an error or is still running after `timeout` (then it is killed).
    pub async fn wait_stopped(&mut self, i: usize, timeout: Duration) -> anyhow::Result<()> {
        let name = self.servers[i].name.clone();
        let Some(mut c) = self.servers[i].child.take() else {
            return Ok(());
        };
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = c.try_wait()? {
                if !status.success() {
                    bail!("{name} exited with {status}");
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                bail!("{name} did not stop within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Start server `i` again after [`ProcessCluster::wait_stopped`] (same config and data).
    pub fn start_again(&mut self, i: usize) -> anyhow::Result<()> {
        self.spawn(i)
    }

    /// SIGSTOP (`pause = true`) or SIGCONT server `i`.
    pub fn pause(&mut self, i: usize, pause: bool) -> anyhow::Result<()> {
        self.signal_running(i, if pause { libc::SIGSTOP } else { libc::SIGCONT })
    }

    /// SIGHUP server `i`: it re-reads its config file (see [`ServerProcess::config_path`]).
    pub fn reload(&mut self, i: usize) -> anyhow::Result<()> {
        self.signal_running(i, libc::SIGHUP)
    }

    /// Start server `i` again with the same config and data.
    pub fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.kill(i);
        self.spawn(i)
    }

    /// The index of the running server every running server agrees is the leader, waiting
    /// up to `timeout`.
    pub async fn wait_leader(&mut self, timeout: Duration) -> anyhow::Result<usize> {
        let running: Vec<usize> = (0..self.servers.len())
            .filter(|&i| self.servers[i].is_running())
            .collect();
        let apis: Vec<(usize, ApiClient, String)> = running
            .iter()
            .map(|&i| (i, self.servers[i].api(), self.servers[i].rpc_addr()))
            .collect();
        let leader = wait_for(timeout, "a leader all running servers agree on", || {
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
                // Survivors keep naming a dead leader until they elect another.
                seen.filter(|l| apis.iter().any(|(_, _, rpc)| rpc == l))
            }
        })
        .await?;
        apis.iter()
            .find(|(_, _, rpc)| *rpc == leader)
            .map(|(i, _, _)| *i)
            .with_context(|| format!("the leader {leader} is not a running server"))
    }

    /// The cluster's temporary directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Print the last lines of every server's log to stderr.
    pub fn dump_logs(&self, lines: usize) {
        for s in &self.servers {
            let text = std::fs::read_to_string(&s.log_path).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            let tail = &all[all.len().saturating_sub(lines)..];
            eprintln!("----- {} ({}) -----", s.name, s.log_path.display());
            for l in tail {
                eprintln!("{l}");
            }
        }
    }
}

impl Drop for ProcessCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dump_logs(60);
        }
        for i in 0..self.servers.len() {
            self.kill(i);
        }
    }
}

fn signal(child: &Child, sig: libc::c_int) -> anyhow::Result<()> {
    // SAFETY: kill(2) on the pid of a child we own and have not reaped.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
    if rc != 0 {
        bail!(
            "kill({}, {sig}): {}",
            child.id(),
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}
