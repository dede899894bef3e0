//! Nomad compatibility with a real third-party client: the unmodified `python-nomad` 2.1.0
//! package, installed into a virtual environment this test creates, drives a live 3-server
//! cluster with one client agent — once through the leader and once through a follower
//! (`cluster-tests/python/python_nomad_flows.py` holds the flows and their assertions); then
//! `teamster alloc exec` through a follower, whose server relays the websocket (python-nomad
//! has no exec). A second test runs python-nomad's `deployments` and `deployment` calls
//! (`cluster-tests/python/python_nomad_deployments.py`) against `agent --dev`, and a third
//! its `acl` calls and tokens against `agent --dev --acl-enabled`
//! (`cluster-tests/python/python_nomad_acl.py`).
//!
//! Without `python3` the test is skipped loudly; under `CI=true` that is a failure.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use teamster_cluster_tests::client_process::{wait_node_status, ClientProcess};
use teamster_cluster_tests::process::{ClusterOptions, ProcessCluster};

const PYTHON_NOMAD: &str = "python-nomad==2.1.0";

/// The venv's python with python-nomad installed, or `None` when python3 is unavailable.
/// The tests of this file share the venv: one creates it while the others wait.
fn python_with_nomad() -> anyhow::Result<Option<PathBuf>> {
    python_venv("python-nomad-2.1.0-venv", &[PYTHON_NOMAD])
}

/// What python-nomad's own CI installs to run its whole suite (its requirements-dev.txt,
/// less coverage and docs), in a venv of its own: `flaky` changes how pytest reports, and
/// the other tests' venv stays as they expect it.
const SUITE_PACKAGES: &[&str] = &[
    PYTHON_NOMAD,
    "pytest==7.2.0",
    "mock==4.0.3",
    "flaky==3.7.0",
    "responses==0.22.0",
];

/// The python of the venv `name` under the target's temporary folder, with `packages`
/// installed, or `None` when python3 is unavailable. One test creates it while the others
/// wait.
fn python_venv(name: &str, packages: &[&str]) -> anyhow::Result<Option<PathBuf>> {
    static VENV: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = VENV.lock().unwrap_or_else(|e| e.into_inner());
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let python = venv.join("bin/python");
    // Every package at its pinned version (`name==version`), or present at all.
    let check = packages
        .iter()
        .map(|p| match p.split_once("==") {
            Some((n, v)) => format!("assert m.version({n:?}) == {v:?}"),
            None => format!("m.version({p:?})"),
        })
        .collect::<Vec<_>>()
        .join("; ");
    let installed = |py: &Path| {
        Command::new(py)
            .args(["-c", &format!("import importlib.metadata as m; {check}")])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    if python.exists() && installed(&python) {
        return Ok(Some(python));
    }
    if !python.exists() {
        let created = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .output();
        match created {
            Err(e) => {
                let msg = format!("SKIP t09_python_nomad: python3 is not available ({e})");
                if std::env::var("CI").as_deref() == Ok("true") {
                    anyhow::bail!("{msg}; CI=true requires it");
                }
                eprintln!("{msg}");
                return Ok(None);
            }
            Ok(o) if !o.status.success() => anyhow::bail!(
                "python3 -m venv failed: {}",
                String::from_utf8_lossy(&o.stderr)
            ),
            Ok(_) => {}
        }
    }
    let out = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(packages)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "pip install {packages:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    anyhow::ensure!(
        installed(&python),
        "{packages:?} are not all installed after pip install"
    );
    Ok(Some(python))
}

async fn run_flows(python: &Path, ip: &str, job_id: &str) -> anyhow::Result<()> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/python_nomad_flows.py");
    let mut cmd = Command::new(python);
    cmd.arg(&script).args([ip, "4646", job_id]);
    // python-nomad reads these; none may leak in from the environment.
    for var in [
        "NOMAD_ADDR",
        "NOMAD_TOKEN",
        "NOMAD_NAMESPACE",
        "NOMAD_REGION",
    ] {
        cmd.env_remove(var);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
    anyhow::ensure!(
        out.status.success(),
        "python-nomad flows failed against {ip}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[tokio::test]
async fn python_nomad_2_1_0_drives_the_cluster_through_leader_and_follower() -> anyhow::Result<()> {
    let Some(python) = tokio::task::spawn_blocking(python_with_nomad).await?? else {
        return Ok(());
    };
    let mut c = ProcessCluster::start(3, ClusterOptions::default())?;
    let leader = c.wait_leader(Duration::from_secs(30)).await?;
    let ip = &c.servers[0].ip;
    let (block, _) = ip.rsplit_once('.').expect("an IPv4 address");
    let servers: Vec<String> = c.servers.iter().map(|s| s.rpc_addr()).collect();
    let mut client = ClientProcess::start(
        c.dir(),
        "client-1",
        &format!("{block}.101"),
        &servers,
        "drivers = [\"mock\"]",
    )?;
    let api = c.servers[leader].api();
    let node_id =
        teamster_cluster_tests::wait_for(Duration::from_secs(30), "the client to register", || {
            client.node_id()
        })
        .await?;
    wait_node_status(&api, &node_id, "ready", Duration::from_secs(30)).await?;

    run_flows(&python, &c.servers[leader].ip, "py-leader").await?;
    let follower = (leader + 1) % 3;
    run_flows(&python, &c.servers[follower].ip, "py-follower").await?;

    // `alloc exec` through a follower: the server relays the websocket to the client.
    let mut job = teamster_cluster_tests::api::small_job("exec-me");
    job["Type"] = serde_json::json!("service");
    job["TaskGroups"][0]["Tasks"][0]["Config"]["run_for"] = serde_json::json!("10m");
    teamster_cluster_tests::api::register(&api, job).await?;
    let alloc_id = teamster_cluster_tests::wait_for(
        Duration::from_secs(30),
        "the exec-me allocation running",
        || async {
            let allocs: Vec<serde_json::Value> =
                api.get("/v1/job/exec-me/allocations").await.ok()?;
            let a = allocs
                .into_iter()
                .find(|a| a["ClientStatus"] == "running")?;
            Some(a["ID"].as_str()?.to_string())
        },
    )
    .await?;
    let follower_addr = c.servers[follower].http_addr();
    let mut cmd = Command::new(teamster_cluster_tests::process::teamster_bin());
    cmd.args(["alloc", "exec", "-address", &follower_addr, &alloc_id])
        .args(["sh", "-c", "echo hi from $NOMAD_TASK_NAME; exit 4"])
        .stdin(std::process::Stdio::null());
    let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hi from t\n");
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    client.kill();
    Ok(())
}

/// Runs `script` with python-nomad against `ip`:4646 and `arg` (the job or allocation ID
/// it works on); its output.
async fn run_script(python: &Path, script: &str, ip: &str, arg: &str) -> anyhow::Result<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("python")
        .join(script);
    let mut cmd = Command::new(python);
    cmd.arg(&script).args([ip, "4646", arg]);
    for var in [
        "NOMAD_ADDR",
        "NOMAD_TOKEN",
        "NOMAD_NAMESPACE",
        "NOMAD_REGION",
    ] {
        cmd.env_remove(var);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    anyhow::ensure!(
        out.status.success(),
        "python-nomad flows of {} failed against {ip}:\n{stdout}\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(stdout)
}

/// A `teamster agent --dev` with `extra` flags, killed when dropped, and its log.
struct DevAgent {
    child: std::process::Child,
    log: tempfile::NamedTempFile,
}

impl Drop for DevAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl DevAgent {
    fn log_text(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }
}

/// Start a dev agent on `ip` and wait until it answers `/v1/status/leader` with a leader.
async fn dev_agent(ip: &str, extra: &[&str]) -> anyhow::Result<DevAgent> {
    let log = tempfile::NamedTempFile::new()?;
    let agent = DevAgent {
        child: Command::new(teamster_cluster_tests::process::teamster_bin())
            .args(["agent", "--dev", "--bind", ip])
            .args(extra)
            .stdin(std::process::Stdio::null())
            .stdout(log.reopen()?)
            .stderr(log.reopen()?)
            .spawn()?,
        log,
    };
    let http = reqwest::Client::new();
    let url = format!("http://{ip}:4646/v1/status/leader");
    teamster_cluster_tests::wait_for(
        Duration::from_secs(30),
        "the dev agent's leader",
        || async {
            let text = http.get(&url).send().await.ok()?.text().await.ok()?;
            (text.len() > 2).then_some(())
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\nagent log:\n{}", agent.log_text()))?;
    Ok(agent)
}

/// Issue 47: the output of Nomad's `job init` example (its task run by raw_exec), read from
/// `alloc/logs/redis.stdout.0` by python-nomad's file and log calls.
#[tokio::test]
async fn python_nomad_2_1_0_reads_a_task_s_output_from_alloc_logs() -> anyhow::Result<()> {
    let Some(python) = tokio::task::spawn_blocking(python_with_nomad).await?? else {
        return Ok(());
    };
    let pid = std::process::id();
    let ip = format!("127.{}.{}.12", 10 + (pid % 200), 240 - (pid / 200 % 5));
    let agent = dev_agent(&ip, &[]).await?;
    let api = teamster::api::ApiClient::new(&format!("http://{ip}:4646"));
    teamster_cluster_tests::wait_for(Duration::from_secs(30), "the dev node ready", || async {
        let nodes: Vec<serde_json::Value> = api.get("/v1/nodes").await.ok()?;
        nodes.iter().any(|n| n["Status"] == "ready").then_some(())
    })
    .await?;
    let script = "printf 'hello from redis\\nready to serve\\nwaiting\\n'; exec sleep 600";
    let job =
        teamster_cluster_tests::api::job_init_example_raw_exec(&api, "py-logs", script, 10, 1)
            .await?;
    teamster_cluster_tests::api::register(&api, job).await?;
    let alloc_id = teamster_cluster_tests::wait_for(
        Duration::from_secs(30),
        "the example's output",
        || async {
            let allocs: Vec<serde_json::Value> =
                api.get("/v1/job/py-logs/allocations").await.ok()?;
            let id = allocs.first()?["ID"].as_str()?.to_string();
            let text = api
                .request_text::<()>(
                    reqwest::Method::GET,
                    &format!("/v1/client/fs/cat/{id}?path=alloc/logs/redis.stdout.0"),
                    None,
                )
                .await
                .ok()?;
            text.ends_with("waiting\n").then_some(id)
        },
    )
    .await?;
    let out = run_script(&python, "python_nomad_logs.py", &ip, &alloc_id).await;
    let _ = api
        .request::<(), serde_json::Value>(reqwest::Method::DELETE, "/v1/job/py-logs", None)
        .await;
    let out = out.map_err(|e| anyhow::anyhow!("{e}\nagent log:\n{}", agent.log_text()))?;
    assert!(out.contains("logs: all flows passed"), "{out}");
    Ok(())
}

#[tokio::test]
async fn python_nomad_2_1_0_reads_and_drives_deployments() -> anyhow::Result<()> {
    let Some(python) = tokio::task::spawn_blocking(python_with_nomad).await?? else {
        return Ok(());
    };
    let pid = std::process::id();
    let ip = format!("127.{}.{}.9", 10 + (pid % 200), 240 - (pid / 200 % 5));
    let agent = dev_agent(&ip, &[]).await?;
    let api = teamster::api::ApiClient::new(&format!("http://{ip}:4646"));
    teamster_cluster_tests::wait_for(Duration::from_secs(30), "the dev node ready", || async {
        let nodes: Vec<serde_json::Value> = api.get("/v1/nodes").await.ok()?;
        nodes.iter().any(|n| n["Status"] == "ready").then_some(())
    })
    .await?;
    let out = run_script(&python, "python_nomad_deployments.py", &ip, "py-deploy")
        .await
        .map_err(|e| anyhow::anyhow!("{e}\nagent log:\n{}", agent.log_text()))?;
    eprintln!("{out}");
    assert!(out.contains("deployments: all flows passed"), "{out}");
    Ok(())
}

#[tokio::test]
async fn python_nomad_2_1_0_speaks_https_with_client_certificates() -> anyhow::Result<()> {
    let Some(python) = tokio::task::spawn_blocking(python_with_nomad).await?? else {
        return Ok(());
    };
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let pid = std::process::id();
    let ip = format!("127.{}.{}.19", 10 + (pid % 200), 240 - (pid / 200 % 5));
    let dir = tempfile::tempdir()?;
    let tls = |args: &[&str]| -> anyhow::Result<()> {
        let out = Command::new(teamster_cluster_tests::process::teamster_bin())
            .arg("tls")
            .args(args)
            .current_dir(dir.path())
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "teamster tls {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    };
    tls(&["ca", "create"])?;
    // python's requests checks the address against the certificate: name the agent's IP.
    tls(&["cert", "create", "-server", "-additional-ipaddress", &ip])?;
    tls(&["cert", "create", "-cli"])?;
    let path = |f: &str| dir.path().join(f).display().to_string();
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        format!(
            "[client]\ndrivers = [\"mock\"]\n[tls]\nhttp = true\nrpc = true\n\
             ca_file = {:?}\ncert_file = {:?}\nkey_file = {:?}\n\
             verify_server_hostname = true\nverify_https_client = true\n",
            path("nomad-agent-ca.pem"),
            path("global-server-nomad.pem"),
            path("global-server-nomad-key.pem"),
        ),
    )?;
    let log = tempfile::NamedTempFile::new()?;
    let _agent = Killed(
        Command::new(teamster_cluster_tests::process::teamster_bin())
            .args(["agent", "--dev", "--bind", &ip, "--config"])
            .arg(&config)
            .stdin(std::process::Stdio::null())
            .stdout(log.reopen()?)
            .stderr(log.reopen()?)
            .spawn()?,
    );
    let files = teamster::util::tls::ApiTlsFiles {
        ca_cert: Some(dir.path().join("nomad-agent-ca.pem")),
        client_cert: Some(dir.path().join("global-cli-nomad.pem")),
        client_key: Some(dir.path().join("global-cli-nomad-key.pem")),
        skip_verify: false,
    };
    let api = teamster::api::ApiClient::with_tls(
        &format!("https://{ip}:4646"),
        files.client_config("global")?,
    );
    teamster_cluster_tests::wait_for(Duration::from_secs(30), "the dev node ready", || async {
        let nodes: Vec<serde_json::Value> = api.get("/v1/nodes").await.ok()?;
        nodes.iter().any(|n| n["Status"] == "ready").then_some(())
    })
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "{e}\nagent log:\n{}",
            std::fs::read_to_string(log.path()).unwrap_or_default()
        )
    })?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/python_nomad_tls.py");
    let mut cmd = Command::new(&python);
    cmd.arg(script).args([
        ip.as_str(),
        "4646",
        &path("nomad-agent-ca.pem"),
        &path("global-cli-nomad.pem"),
        &path("global-cli-nomad-key.pem"),
        "py-tls",
    ]);
    for var in [
        "NOMAD_ADDR",
        "NOMAD_TOKEN",
        "NOMAD_NAMESPACE",
        "NOMAD_REGION",
        "NOMAD_CACERT",
        "NOMAD_CLIENT_CERT",
        "NOMAD_CLIENT_KEY",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
    ] {
        cmd.env_remove(var);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    anyhow::ensure!(
        out.status.success() && stdout.contains("tls: all flows passed"),
        "python-nomad over TLS failed:\n{stdout}\n{}\nagent log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(log.path()).unwrap_or_default()
    );
    Ok(())
}

/// python-nomad's `acl` calls and a token on every other call, against an agent with ACLs
/// on (`cluster-tests/python/python_nomad_acl.py`).
#[tokio::test]
async fn python_nomad_2_1_0_bootstraps_and_uses_acl_tokens() -> anyhow::Result<()> {
    let Some(python) = tokio::task::spawn_blocking(python_with_nomad).await?? else {
        return Ok(());
    };
    let pid = std::process::id();
    let ip = format!("127.{}.{}.10", 10 + (pid % 200), 240 - (pid / 200 % 5));
    let agent = dev_agent(&ip, &["--acl-enabled"]).await?;
    let out = run_script(&python, "python_nomad_acl.py", &ip, "")
        .await
        .map_err(|e| anyhow::anyhow!("{e}\nagent log:\n{}", agent.log_text()))?;
    eprintln!("{out}");
    assert!(out.contains("acl: all flows passed"), "{out}");
    Ok(())
}

/// python-nomad 2.1.0's own test suite's Variables tests (`tests/test_variable.py` and
/// `tests/test_variables.py`, from its source distribution on PyPI), unmodified, run with
/// pytest (with its repository's two fixtures, which the distribution leaves out,
/// recreated in `python/python_nomad_conftest.py`) against a dev agent without ACLs and
/// against one with ACLs on and its management token (issue 49).
#[tokio::test]
async fn python_nomad_2_1_0_own_variable_tests_pass_with_and_without_acls() -> anyhow::Result<()> {
    let Some(python) = tokio::task::spawn_blocking(python_with_nomad).await?? else {
        return Ok(());
    };
    let suite = tokio::task::spawn_blocking({
        let python = python.clone();
        move || python_nomad_suite(&python)
    })
    .await??;
    let pid = std::process::id();
    for (host, acl) in [(13u8, false), (14u8, true)] {
        let ip = format!("127.{}.{}.{host}", 10 + (pid % 200), 240 - (pid / 200 % 5));
        let flags: &[&str] = if acl { &["--acl-enabled"] } else { &[] };
        let agent = dev_agent(&ip, flags).await?;
        let token = if acl {
            let boot: serde_json::Value = reqwest::Client::new()
                .post(format!("http://{ip}:4646/v1/acl/bootstrap"))
                .send()
                .await?
                .json()
                .await?;
            boot["SecretID"].as_str().map(str::to_string)
        } else {
            None
        };
        let mut cmd = pytest(
            &python,
            &suite,
            &ip,
            "1.7.0",
            token.as_deref(),
            &["tests/test_variable.py", "tests/test_variables.py"],
        );
        let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        anyhow::ensure!(
            out.status.success() && stdout.contains(" passed") && !stdout.contains("failed"),
            "python-nomad's variable tests (ACLs {}) failed:\n{stdout}\n{}\nagent log:\n{}",
            if acl { "on" } else { "off" },
            String::from_utf8_lossy(&out.stderr),
            agent.log_text()
        );
        eprintln!(
            "python-nomad variable tests, ACLs {}: {}",
            if acl { "on" } else { "off" },
            stdout.lines().last().unwrap_or_default()
        );
    }
    Ok(())
}

/// pytest in `dir` with the venv's `python`, against the agent on `ip:4646` as python-nomad's
/// tests find it (`NOMAD_IP`, `NOMAD_PORT`, `NOMAD_VERSION`, `NOMAD_TOKEN` when given; none
/// of Nomad's other variables leak in from the environment), bounded to 10 minutes: a hung
/// suite fails the test instead of holding the run.
fn pytest(
    python: &Path,
    dir: &Path,
    ip: &str,
    nomad_version: &str,
    token: Option<&str>,
    args: &[&str],
) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.current_dir(dir)
        .arg("600")
        .arg(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
        .args(args)
        .env("NOMAD_IP", ip)
        .env("NOMAD_PORT", "4646")
        .env("NOMAD_VERSION", nomad_version);
    for var in [
        "NOMAD_ADDR",
        "NOMAD_NAMESPACE",
        "NOMAD_REGION",
        "NOMAD_TOKEN",
    ] {
        cmd.env_remove(var);
    }
    if let Some(t) = token {
        cmd.env("NOMAD_TOKEN", t);
    }
    cmd
}

/// python-nomad 2.1.0's source distribution unpacked (its `tests/` folder), with pytest
/// installed in the venv: the folder.
fn python_nomad_suite(python: &Path) -> anyhow::Result<PathBuf> {
    static SUITE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = SUITE.lock().unwrap_or_else(|e| e.into_inner());
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-nomad-2.1.0-sdist");
    let suite = root.join("python_nomad-2.1.0");
    let has_pytest = Command::new(python)
        .args(["-c", "import pytest"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !has_pytest {
        let out = Command::new(python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "pytest",
            ])
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "pip install pytest failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    if !suite.join("tests/test_variable.py").exists() {
        std::fs::create_dir_all(&root)?;
        let out = Command::new(python)
            .args([
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(["--no-deps", "--no-binary", ":all:", PYTHON_NOMAD, "-d"])
            .arg(&root)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "pip download {PYTHON_NOMAD} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let tarball = root.join("python_nomad-2.1.0.tar.gz");
        let out = Command::new(python)
            .args([
                "-c",
                "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='data')",
            ])
            .arg(&tarball)
            .arg(&root)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "unpacking {} failed: {}",
            tarball.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    anyhow::ensure!(
        suite.join("tests/test_variables.py").exists(),
        "python-nomad's source distribution has no tests/test_variables.py"
    );
    // Its fixtures and settings (the distribution leaves the repository's conftest.py and
    // common.py out).
    let ours = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    std::fs::copy(
        ours.join("python_nomad_conftest.py"),
        suite.join("tests/conftest.py"),
    )?;
    std::fs::copy(
        ours.join("python_nomad_common.py"),
        suite.join("tests/common.py"),
    )?;
    Ok(suite)
}

/// The tests of python-nomad's whole suite that cannot pass here, and why (`docs/api.md`
/// lists them too).
const KNOWN_FAILURES: &[&str] = &[
    // A docker `redis` allocation of the example job: no image registry here.
    "tests/test_client.py::test_signal_allocation",
    "tests/test_client.py::test_signal_allocation_task",
    "tests/test_client.py::test_signal_allocation_invalid_signal",
    // Expects 162.16.10.102 to refuse connections; this sandbox's network answers it.
    "tests/test_base.py::test_base_get_connection_error",
    // Fail against Nomad too. This one registers a job under another job's ID in the URL,
    // which Nomad (and teamster) answer with 400 "Job ID does not match name".
    "tests/test_job.py::test_dispatch_job_idempotency",
    // This one expects `deregister_job(purge="True")` to raise InvalidParameters, which
    // python-nomad 2.1.0's deregister_job never raises.
    "tests/test_job.py::test_delete_job_with_invalid_purge_param_raises",
];

/// Issue 48: python-nomad 2.1.0's whole suite (287 tests), unmodified, as its own CI runs
/// it: against `agent -dev -node pynomad1 --acl-enabled` (its ACL tests bootstrap the token
/// the later ones use), with `example.json` made by `job init` and `job run -output`, and the
/// two fixture files its repository has and its distribution lacks written here (our own
/// `example_batch_parameterized.json`, a parameterized raw_exec job; `example.nomad`, the
/// `job init` file). Every test passes but those [`KNOWN_FAILURES`] names.
#[tokio::test]
async fn python_nomad_2_1_0_whole_suite_passes_but_for_what_this_machine_lacks(
) -> anyhow::Result<()> {
    let Some(python) = tokio::task::spawn_blocking(|| {
        python_venv("python-nomad-2.1.0-suite-venv", SUITE_PACKAGES)
    })
    .await??
    else {
        return Ok(());
    };
    let suite = tokio::task::spawn_blocking({
        let python = python.clone();
        move || python_nomad_suite(&python)
    })
    .await??;
    // A folder of its own: the files the suite opens by relative path.
    let work = tempfile::tempdir()?;
    let copy = Command::new("cp")
        .arg("-r")
        .arg(suite.join("tests"))
        .arg(suite.join("nomad"))
        .arg(work.path())
        .output()?;
    anyhow::ensure!(copy.status.success(), "copying the suite: {copy:?}");
    let bin = teamster_cluster_tests::process::teamster_bin();
    let init = Command::new(&bin)
        .current_dir(work.path())
        .args(["job", "init"])
        .output()?;
    anyhow::ensure!(init.status.success(), "job init: {init:?}");
    let output = Command::new(&bin)
        .current_dir(work.path())
        .args(["job", "run", "-output", "example.nomad.hcl"])
        .output()?;
    anyhow::ensure!(output.status.success(), "job run -output: {output:?}");
    std::fs::write(work.path().join("example.json"), &output.stdout)?;
    std::fs::copy(
        work.path().join("example.nomad.hcl"),
        work.path().join("example.nomad"),
    )?;
    std::fs::write(
        work.path().join("example_batch_parameterized.json"),
        serde_json::to_vec_pretty(&serde_json::json!({"Job": {
            "ID": "example-batch", "Name": "example-batch", "Type": "batch",
            "Datacenters": ["*"],
            "ParameterizedJob": {"Payload": "optional", "MetaRequired": ["time"]},
            "TaskGroups": [{"Name": "example-task-group", "Count": 1, "Tasks": [{
                "Name": "example-task", "Driver": "raw_exec",
                "Config": {"command": "/bin/sleep", "args": ["${NOMAD_META_TIME}"]},
                "Resources": {"CPU": 100, "MemoryMB": 64}
            }]}]
        }}))?,
    )?;

    let pid = std::process::id();
    let ip = format!("127.{}.{}.15", 10 + (pid % 200), 240 - (pid / 200 % 5));
    let agent = dev_agent(&ip, &["-node", "pynomad1", "--acl-enabled"]).await?;
    let mut cmd = pytest(
        &python,
        work.path(),
        &ip,
        "1.9.5",
        None,
        &["--runxfail", "-rfE", "tests/"],
    );
    let out = tokio::task::spawn_blocking(move || cmd.output()).await??;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    // Failures and errors (setup or teardown) alike, from pytest's short summary.
    let failed: Vec<&str> = stdout
        .lines()
        .filter_map(|l| {
            l.strip_prefix("FAILED ")
                .or_else(|| l.strip_prefix("ERROR "))
        })
        .map(|l| l.split(" - ").next().unwrap_or(l).trim())
        .collect();
    let unexpected: Vec<&&str> = failed
        .iter()
        .filter(|f| !KNOWN_FAILURES.contains(f))
        .collect();
    // "6 failed, 281 passed, 1 skipped, 7 warnings in 93.26s (0:01:33)": the counts.
    let summary = stdout.lines().last().unwrap_or_default().to_string();
    let counts = summary.split(" in ").next().unwrap_or_default();
    let count = |what: &str| -> usize {
        counts
            .split(", ")
            .find_map(|part| part.trim().strip_suffix(what))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    };
    let (passed, errors) = (count(" passed"), count(" errors") + count(" error"));
    anyhow::ensure!(
        unexpected.is_empty() && errors == 0 && passed >= 288 - KNOWN_FAILURES.len() - 1,
        "python-nomad's suite: {summary}\nunexpected failures: {unexpected:?}\n{}\nagent log:\n{}",
        stdout
            .lines()
            .rev()
            .take(200)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n"),
        agent.log_text()
    );
    eprintln!("python-nomad 2.1.0's whole suite: {summary}");
    Ok(())
}
