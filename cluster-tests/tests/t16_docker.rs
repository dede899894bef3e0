//! The `docker` task driver against a real engine and a real `teamster agent --dev`: the node
//! fingerprints the engine (`driver.docker`, `driver.docker.version`); a job whose image is
//! not on the node fails at once with a driver error saying teamster never pulls; an
//! unknown config key is refused by name; a batch task's exit code is its container's and
//! the container is removed; a service task in the `teamster:dev` image (busybox) runs, its
//! output reaches `alloc logs`, its port is published, `alloc signal` reaches its shell,
//! `alloc exec` runs in its container (output, exit code, stdin, terminal; a caller that goes
//! away takes its command along), its usage is its container's (`alloc status -stats`); a
//! client killed and started again re-attaches to the running container instead of starting
//! a second one, and removes its node's containers of allocations it does not know (not
//! another node's); stopping the job stops the container within its kill timeout and leaves
//! no container with the allocation's label. `load` is checked on the driver's shell
//! directly: an archive in the task directory is loaded, then run.
//!
//! Without Docker the scenario prints a `SKIP` line and passes; with `CI=true` it fails
//! instead. The image comes from deploy/build-image.sh (incremental; the static build takes
//! minutes the first time).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use teamster::api::ApiClient;
use teamster_cluster_tests::api::register;
use teamster_cluster_tests::compose::{build_image, IMAGE};
use teamster_cluster_tests::process::teamster_bin;
use teamster_cluster_tests::wait_for;

const ALLOC_LABEL: &str = "com.hashicorp.nomad.alloc_id";
const NODE_LABEL: &str = "com.hashicorp.nomad.node_id";
/// The task's kill timeout; its shell ignores SIGTERM (PID 1), so the stop takes this long.
const KILL_TIMEOUT: Duration = Duration::from_secs(2);

/// True when the scenario must be skipped (no Docker, not CI). Panics under `CI=true`.
fn skip(test: &str) -> bool {
    teamster_cluster_tests::compose::skip_without_docker(test)
}

/// A loopback address of its own for this test process's dev agent.
fn dev_ip() -> String {
    let pid = std::process::id();
    format!("127.{}.{}.16", 10 + (pid % 200), 251 - (pid / 200 % 5))
}

/// `docker` with `args`; its stdout, trimmed.
fn docker(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("docker").args(args).output()?;
    anyhow::ensure!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Ids of the containers (running or not) labelled `label=value`. A failing `docker ps` is
/// tried again and then fails the test: read as "no containers", it would let a wait for a
/// container's removal pass while the container is still there.
fn containers(label: &str, value: &str) -> Vec<String> {
    let filter = format!("label={label}={value}");
    let mut last_error = None;
    for _ in 0..3 {
        match docker(&["ps", "-aq", "--no-trunc", "--filter", &filter]) {
            Ok(s) => return s.lines().map(str::to_string).collect(),
            Err(e) => last_error = Some(e),
        }
    }
    panic!("docker ps --filter {filter} failed three times: {last_error:?}");
}

/// Removes whatever containers the node left, however the test ends.
struct RemoveNodeContainers(Option<String>);

impl Drop for RemoveNodeContainers {
    fn drop(&mut self) {
        if let Some(node) = &self.0 {
            for id in containers(NODE_LABEL, node) {
                let _ = docker(&["rm", "-f", &id]);
            }
        }
    }
}

/// A dev agent process, SIGKILLed when dropped.
struct Agent(std::process::Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `teamster agent --dev` on `ip` keeping its data in `data` (so it can be restarted), once
/// its node is ready.
async fn dev_agent(
    ip: &str,
    data: &std::path::Path,
    log: &tempfile::NamedTempFile,
) -> anyhow::Result<(Agent, ApiClient, Value)> {
    dev_agent_with(ip, data, log, &[]).await
}

/// [`dev_agent`] with more command-line arguments (`--config FILE`).
async fn dev_agent_with(
    ip: &str,
    data: &std::path::Path,
    log: &tempfile::NamedTempFile,
    extra: &[&str],
) -> anyhow::Result<(Agent, ApiClient, Value)> {
    let agent = Agent(
        Command::new(teamster_bin())
            .args(["agent", "--dev", "--bind", ip, "--data-dir"])
            .arg(data)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.reopen()?)
            .stderr(log.reopen()?)
            .spawn()?,
    );
    let api = ApiClient::new(&format!("http://{ip}:4646"));
    let node = wait_for(Duration::from_secs(60), "the dev node ready", || async {
        let nodes: Vec<Value> = api.get("/v1/nodes").await.ok()?;
        let id = nodes.iter().find(|n| n["Status"] == "ready")?["ID"]
            .as_str()?
            .to_string();
        api.get::<Value>(&format!("/v1/node/{id}")).await.ok()
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", agent_log(log)))?;
    Ok((agent, api, node))
}

fn agent_log(log: &tempfile::NamedTempFile) -> String {
    std::fs::read_to_string(log.path()).unwrap_or_default()
}

fn docker_job(id: &str, job_type: &str, config: Value, network: Value) -> Value {
    json!({
        "ID": id,
        "Type": job_type,
        "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g",
            "Count": 1,
            "Networks": network,
            "RestartPolicy": {"Attempts": 0, "Interval": 60_000_000_000u64, "Delay": 1_000_000_000u64, "Mode": "fail"},
            "Tasks": [{
                "Name": "t",
                "Driver": "docker",
                "Config": config,
                "Env": {"GREETING": "hi from ${NOMAD_TASK_NAME}"},
                "KillTimeout": KILL_TIMEOUT.as_nanos() as u64,
                "Resources": {"CPU": 100, "MemoryMB": 64}
            }]
        }]
    })
}

async fn first_alloc(api: &ApiClient, job: &str) -> Option<Value> {
    let allocs: Vec<Value> = api
        .get(&format!("/v1/job/{job}/allocations?stale=true"))
        .await
        .ok()?;
    let id = allocs.first()?["ID"].as_str()?.to_string();
    api.get(&format!("/v1/allocation/{id}")).await.ok()
}

/// The task's events of `alloc` as `(type, message)`.
fn events(alloc: &Value) -> Vec<(String, String)> {
    alloc["TaskStates"]["t"]["Events"]
        .as_array()
        .map(|evs| {
            evs.iter()
                .map(|e| {
                    (
                        e["Type"].as_str().unwrap_or("").to_string(),
                        e["DisplayMessage"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The driver failure of `job`'s first allocation, once it failed.
async fn driver_failure(api: &ApiClient, job: &str) -> anyhow::Result<String> {
    let alloc = wait_for(Duration::from_secs(30), "the allocation failed", || async {
        let a = first_alloc(api, job).await?;
        (a["ClientStatus"] == "failed").then_some(a)
    })
    .await?;
    let failure = events(&alloc)
        .into_iter()
        .find(|(t, _)| t == "Driver Failure")
        .map(|(_, m)| m);
    failure.ok_or_else(|| anyhow::anyhow!("no Driver Failure event in {alloc:#}"))
}

async fn log_of(addr: &str, alloc_id: &str, kind: &str) -> String {
    let url = format!("{addr}/v1/client/fs/logs/{alloc_id}?task=t&type={kind}&plain=true");
    match reqwest::get(url).await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

#[tokio::test]
async fn docker_tasks_run_log_signal_reattach_and_stop_without_pulling() -> anyhow::Result<()> {
    const TEST: &str = "docker_tasks_run_log_signal_reattach_and_stop_without_pulling";
    if skip(TEST) {
        return Ok(());
    }
    teamster_cluster_tests::init_test_tracing();
    // The image with busybox in it, built offline (or already up to date).
    build_image()?;
    let busybox = docker(&["run", "--rm", "--entrypoint", "/bin/busybox", IMAGE, "true"]);
    anyhow::ensure!(busybox.is_ok(), "{IMAGE} has no /bin/busybox: {busybox:?}");

    let ip = dev_ip();
    let data = tempfile::tempdir()?;
    let log = tempfile::NamedTempFile::new()?;
    let (agent, api, node) = dev_agent(&ip, data.path(), &log).await?;
    let addr = format!("http://{ip}:4646");
    let node_id = node["ID"].as_str().expect("node id").to_string();
    let _cleanup = RemoveNodeContainers(Some(node_id.clone()));

    // The fingerprint.
    let engine_version = docker(&["version", "--format", "{{.Server.Version}}"])?;
    assert_eq!(node["Attributes"]["driver.docker"], "1", "{node:#}");
    assert_eq!(
        node["Attributes"]["driver.docker.version"],
        engine_version.as_str()
    );
    assert_eq!(node["Drivers"]["docker"]["Detected"], true);
    assert_eq!(node["Drivers"]["docker"]["Healthy"], true);

    // An image that is not on the node: failed at once, never pulled.
    register(
        &api,
        docker_job(
            "absent",
            "batch",
            json!({"image": "teamster-t16-no-such-image:never"}),
            json!([]),
        ),
    )
    .await?;
    let started = Instant::now();
    let failure = driver_failure(&api, "absent").await?;
    assert_eq!(
        failure,
        "Failed to find docker image \"teamster-t16-no-such-image:never\": no such image (teamster never pulls)"
    );
    assert!(started.elapsed() < Duration::from_secs(20), "no hang");
    assert!(docker(&["image", "inspect", "teamster-t16-no-such-image:never"]).is_err());

    // A config key the driver does not act on is refused by name.
    register(
        &api,
        docker_job(
            "privileged",
            "batch",
            json!({"image": IMAGE, "privileged": true}),
            json!([]),
        ),
    )
    .await?;
    let failure = driver_failure(&api, "privileged").await?;
    assert!(
        failure.contains("docker config key \"privileged\" is not supported"),
        "{failure}"
    );

    // A batch task's exit code is the container's; its container is removed.
    register(
        &api,
        docker_job(
            "exits",
            "batch",
            json!({
                "image": IMAGE,
                "entrypoint": ["/bin/busybox"],
                "args": ["sh", "-c", "echo bye; exit 3"]
            }),
            json!([]),
        ),
    )
    .await?;
    let exited = wait_for(Duration::from_secs(30), "the exits task failed", || async {
        let a = first_alloc(&api, "exits").await?;
        (a["ClientStatus"] == "failed").then_some(a)
    })
    .await?;
    let terminated: Vec<(String, String)> = events(&exited)
        .into_iter()
        .filter(|(t, _)| t == "Terminated")
        .collect();
    assert_eq!(
        terminated.first().map(|(_, m)| m.as_str()),
        Some("Exit Code: 3"),
        "{exited:#}"
    );
    let exited_id = exited["ID"].as_str().expect("alloc id").to_string();
    assert!(log_of(&addr, &exited_id, "stdout").await.contains("bye"));
    wait_for(
        Duration::from_secs(10),
        "the exited container removed",
        || async { containers(ALLOC_LABEL, &exited_id).is_empty().then_some(()) },
    )
    .await?;

    // A service task in the busybox image, with a published port.
    register(
        &api,
        docker_job(
            "web",
            "service",
            json!({
                "image": IMAGE,
                "entrypoint": ["/bin/busybox"],
                "args": ["sh", "-c", "trap 'echo got usr1' USR1; echo hello; echo \"$GREETING on $NOMAD_PORT_http\"; echo oops >&2; while :; do sleep 1; done"],
                "ports": ["http"],
                "labels": {"team": "t16"}
            }),
            json!([{"DynamicPorts": [{"Label": "http", "To": 8080}]}]),
        ),
    )
    .await?;
    let alloc = wait_for(Duration::from_secs(60), "the web task running", || async {
        let a = first_alloc(&api, "web").await?;
        (a["ClientStatus"] == "running").then_some(a)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", agent_log(&log)))?;
    let alloc_id = alloc["ID"].as_str().expect("alloc id").to_string();
    let host_port = alloc["AllocatedResources"]["Shared"]["Ports"][0]["Value"]
        .as_u64()
        .expect("an allocated port");
    wait_for(
        Duration::from_secs(20),
        "hello in the task's stdout",
        || async {
            let out = log_of(&addr, &alloc_id, "stdout").await;
            (out.contains("hello\n") && out.contains("hi from t on 8080\n")).then_some(())
        },
    )
    .await?;
    let err = log_of(&addr, &alloc_id, "stderr").await;
    assert!(err.contains("oops"), "{err:?}");
    let out = Command::new(teamster_bin())
        .args(["alloc", "logs", "-address", &addr, &alloc_id[..8], "t"])
        .output()?;
    assert!(String::from_utf8_lossy(&out.stdout).contains("hello\n"));

    let ids = containers(ALLOC_LABEL, &alloc_id);
    assert_eq!(ids.len(), 1, "one container for the allocation: {ids:?}");
    let container = ids[0].clone();
    let name = docker(&["inspect", "--format", "{{.Name}}", &container])?;
    assert_eq!(name, format!("/t-{alloc_id}"));
    let labels: Value = serde_json::from_str(&docker(&[
        "inspect",
        "--format",
        "{{json .Config.Labels}}",
        &container,
    ])?)?;
    assert_eq!(labels["com.hashicorp.nomad.task_name"], "t");
    assert_eq!(labels["com.hashicorp.nomad.job_name"], "web");
    assert_eq!(labels["team"], "t16");
    let bindings: Value = serde_json::from_str(&docker(&[
        "inspect",
        "--format",
        "{{json .HostConfig.PortBindings}}",
        &container,
    ])?)?;
    assert_eq!(
        bindings["8080/tcp"][0]["HostPort"],
        host_port.to_string(),
        "{bindings}"
    );
    assert_eq!(bindings["8080/tcp"][0]["HostIp"], ip.as_str(), "{bindings}");

    // `alloc signal` reaches the container's shell.
    let out = Command::new(teamster_bin())
        .args([
            "alloc",
            "signal",
            "-address",
            &addr,
            "-s",
            "SIGUSR1",
            &alloc_id[..8],
            "t",
        ])
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for(Duration::from_secs(10), "the trap's output", || async {
        log_of(&addr, &alloc_id, "stdout")
            .await
            .contains("got usr1")
            .then_some(())
    })
    .await?;

    // `alloc exec` runs inside the container through the engine: its output, its exit
    // code, its stdin, its terminal.
    let exec = |args: &[&str], stdin: Option<&str>| {
        teamster_cluster_tests::process::alloc_exec(&addr, args, stdin)
    };
    let out = exec(
        &[
            &alloc_id[..8],
            "/bin/busybox",
            "sh",
            "-c",
            "test -d /alloc/logs && test -d /local && echo inside $NOMAD_TASK_NAME",
        ],
        None,
    );
    assert_eq!(
        (
            String::from_utf8_lossy(&out.stdout).as_ref(),
            out.status.code()
        ),
        ("inside t\n", Some(0)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = exec(
        &[
            &alloc_id,
            "/bin/busybox",
            "sh",
            "-c",
            "echo oops >&2; exit 3",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(3), "the command's exit code");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "oops\n");
    let out = exec(
        &["-task", "t", &alloc_id, "/bin/busybox", "cat"],
        Some("from stdin\n"),
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from stdin\n");
    assert_eq!(out.status.code(), Some(0));
    let out = exec(
        &[
            "-t",
            &alloc_id,
            "/bin/busybox",
            "sh",
            "-c",
            "test -t 0 && test -t 1 && echo yes",
        ],
        None,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "yes\r\n");
    assert_eq!(out.status.code(), Some(0));
    let out = exec(&[&alloc_id, "/no/such/program"], None);
    assert_ne!(
        out.status.code(),
        Some(0),
        "a command that cannot run fails"
    );

    // The container's usage: memory from its cgroup, and CPU as a rate (a busy loop run in
    // it for a while shows).
    let stats_path = format!("/v1/client/allocation/{alloc_id}/stats");
    let usage: Value = api.get(&stats_path).await?;
    let task_usage = &usage["Tasks"]["t"]["ResourceUsage"];
    assert!(
        task_usage["MemoryStats"]["Usage"].as_u64() > Some(0),
        "{usage:#}"
    );
    assert_eq!(
        task_usage["CpuStats"]["Measured"],
        json!(["Throttled Periods", "Throttled Time", "Percent"]),
        "{usage:#}"
    );
    assert!(
        task_usage["MemoryStats"]["Measured"]
            .as_array()
            .is_some_and(|m| m.contains(&json!("Usage"))),
        "{usage:#}"
    );
    assert_eq!(
        usage["ResourceUsage"]["MemoryStats"]["Usage"],
        task_usage["MemoryStats"]["Usage"]
    );
    let mut busy = Command::new(teamster_bin())
        .args(["alloc", "exec", "-address", &addr, &alloc_id])
        .args(["/bin/busybox", "sh", "-c", "busy=1; while :; do :; done"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let busy_usage = wait_for(
        Duration::from_secs(30),
        "the busy loop in the container's CPU",
        || async {
            let u: Value = api.get(&stats_path).await.ok()?;
            let percent = u["Tasks"]["t"]["ResourceUsage"]["CpuStats"]["Percent"].as_f64()?;
            (percent > 20.0).then_some(u)
        },
    )
    .await?;
    assert!(
        busy_usage["Tasks"]["t"]["ResourceUsage"]["CpuStats"]["TotalTicks"].as_f64() > Some(0.0),
        "{busy_usage:#}"
    );
    let out = Command::new(teamster_bin())
        .args([
            "alloc",
            "status",
            "-address",
            &addr,
            "-stats",
            &alloc_id[..8],
        ])
        .output()?;
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The tables show what the engine measures (cgroup v1 or v2).
    let measured = &busy_usage["Tasks"]["t"]["ResourceUsage"]["MemoryStats"]["Measured"];
    let mut parts = vec![
        "Task Resources:",
        "Memory Stats",
        "CPU Stats",
        "Throttled Periods",
    ];
    parts.extend(
        measured
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str),
    );
    assert!(parts.contains(&"Usage"), "{busy_usage:#}");
    for part in parts {
        assert!(shown.contains(part), "{part:?} missing from {shown}");
    }
    // Killing the caller of `alloc exec` stops its command in the container.
    let _ = busy.kill();
    let _ = busy.wait();
    wait_for(
        Duration::from_secs(20),
        "the busy loop gone with its caller",
        || async {
            let top = docker(&["exec", &container, "/bin/busybox", "ps", "-o", "args"]).ok()?;
            (!top.contains("busy=1")).then_some(())
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", agent_log(&log)))?;

    // The client dies and comes back: it re-attaches to the running container, and removes
    // a container of this node whose allocation it does not know.
    drop(agent);
    assert_eq!(containers(ALLOC_LABEL, &alloc_id), vec![container.clone()]);
    let orphan_alloc = "0badc0de-0000-4000-8000-000000000016";
    let orphan = docker(&[
        "create",
        "--label",
        &format!("{ALLOC_LABEL}={orphan_alloc}"),
        "--label",
        &format!("{NODE_LABEL}={node_id}"),
        "--entrypoint",
        "/bin/busybox",
        IMAGE,
        "sleep",
        "300",
    ])?;
    // Another node's container is not this client's to remove.
    let foreign = docker(&[
        "create",
        "--label",
        &format!("{ALLOC_LABEL}={orphan_alloc}"),
        "--label",
        &format!("{NODE_LABEL}=another-node-{node_id}"),
        "--entrypoint",
        "/bin/busybox",
        IMAGE,
        "true",
    ])?;
    let _foreign_cleanup = RemoveNodeContainers(Some(format!("another-node-{node_id}")));
    let log = tempfile::NamedTempFile::new()?;
    let (agent, api, _) = dev_agent(&ip, data.path(), &log).await?;
    wait_for(
        Duration::from_secs(30),
        "the re-attached task running",
        || async {
            let a = first_alloc(&api, "web").await?;
            let attached = agent_log(&log).contains("re-attached to a running task");
            (a["ClientStatus"] == "running" && attached).then_some(())
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", agent_log(&log)))?;
    assert_eq!(
        containers(ALLOC_LABEL, &alloc_id),
        vec![container.clone()],
        "the same container, not a second one"
    );
    let running = docker(&["inspect", "--format", "{{.State.Running}}", &container])?;
    assert_eq!(running, "true");
    assert!(
        docker(&["inspect", &orphan]).is_err(),
        "the orphan is removed"
    );
    assert!(
        docker(&["inspect", &foreign]).is_ok(),
        "another node's is kept"
    );

    // Stopping the job stops the container within its kill timeout, and removes it.
    api.request::<(), Value>(reqwest::Method::DELETE, "/v1/job/web", None)
        .await?;
    let stopping = Instant::now();
    wait_for(
        KILL_TIMEOUT + Duration::from_secs(15),
        "no container left for the allocation",
        || async { containers(ALLOC_LABEL, &alloc_id).is_empty().then_some(()) },
    )
    .await?;
    let took = stopping.elapsed();
    assert!(
        took < KILL_TIMEOUT + Duration::from_secs(10),
        "stopped in {took:?}"
    );
    let alloc = wait_for(Duration::from_secs(20), "the web task killed", || async {
        let a = first_alloc(&api, "web").await?;
        (a["ClientStatus"] == "complete").then_some(a)
    })
    .await?;
    let kinds: Vec<String> = events(&alloc).into_iter().map(|(t, _)| t).collect();
    assert!(
        kinds.contains(&"Killing".to_string()) && kinds.contains(&"Killed".to_string()),
        "{kinds:?}"
    );
    // Nothing of this node's is left (the orphan was removed above, the task's container now).
    wait_for(
        Duration::from_secs(20),
        "no container of the node left",
        || async { containers(NODE_LABEL, &node_id).is_empty().then_some(()) },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}: {:?}", containers(NODE_LABEL, &node_id)))?;
    drop(agent);
    Ok(())
}

/// `load`: an image archive in the task directory is loaded into the engine before the
/// image is looked up, and the container runs from it (the driver's shell, called directly:
/// a task directory cannot be filled before its allocation exists).
#[tokio::test]
async fn an_image_archive_in_the_task_dir_is_loaded_then_run() -> anyhow::Result<()> {
    use teamster::client::docker::{start, Connector, TaskPlace};
    use teamster_storage::model::{ConfigValue, Task};
    const TEST: &str = "an_image_archive_in_the_task_dir_is_loaded_then_run";
    if skip(TEST) {
        return Ok(());
    }
    teamster_cluster_tests::init_test_tracing();
    build_image()?;
    let tag = format!("teamster-t16-load:{}", std::process::id());
    let alloc_id = format!("0adc0de0-0000-4000-8000-{:012}", std::process::id());
    let node_id = format!("t16-load-{}", std::process::id());
    let _cleanup = RemoveNodeContainers(Some(node_id.clone()));
    let dir = tempfile::tempdir()?;
    let task_dir = dir.path().join("t");
    std::fs::create_dir_all(task_dir.join("local"))?;
    let archive = task_dir.join("local/img.tar");
    docker(&["tag", IMAGE, &tag])?;
    let saved = docker(&["save", "-o", &archive.to_string_lossy(), &tag]);
    docker(&["rmi", &tag])?;
    saved?;
    assert!(
        docker(&["image", "inspect", &tag]).is_err(),
        "only in the archive now"
    );

    let mut task = Task {
        name: "t".into(),
        driver: "docker".into(),
        ..Task::default()
    };
    let list = |items: &[&str]| ConfigValue::List(items.iter().map(|i| (*i).into()).collect());
    task.config.insert("image".into(), tag.as_str().into());
    task.config.insert("load".into(), "local/img.tar".into());
    task.config
        .insert("entrypoint".into(), list(&["/bin/busybox"]));
    task.config.insert(
        "args".into(),
        list(&["sh", "-c", "echo loaded; ls /local; echo $NOMAD_TASK_DIR"]),
    );
    task.resources.cpu = 50;
    task.resources.memory_mb = 32;
    let place = TaskPlace {
        task_dir: &task_dir,
        alloc_dir: &dir.path().join("alloc"),
        alloc_id: &alloc_id,
        job_name: "load",
        node_id: &node_id,
        ports: &[],
        logs: &teamster::client::logmon::LogSinks::Files {
            stdout: task_dir.join("stdout.log"),
            stderr: task_dir.join("stderr.log"),
        },
        mounts: &[],
        group_network: None,
        resolv_conf: None,
        hosts: None,
    };
    let started = start(&Connector::default(), &task, place).await;
    let loaded = docker(&["image", "inspect", &tag]).is_ok();
    let _ = docker(&["rmi", "-f", &tag]);
    let mut running = started?;
    assert!(loaded, "the archive was loaded");
    let exit = tokio::time::timeout(Duration::from_secs(30), running.wait()).await?;
    assert!(exit.successful() && !exit.unknown, "{exit:?}");
    let out = std::fs::read_to_string(task_dir.join("stdout.log"))?;
    assert_eq!(out, "loaded\nimg.tar\n/local\n");
    assert!(
        containers(ALLOC_LABEL, &alloc_id).is_empty(),
        "removed after its exit"
    );
    Ok(())
}

/// Issue 52: a docker service whose image is missing made 58 failed allocations and 148
/// evaluations in 12 s, ignoring its restart and reschedule policies. Now a start failure
/// is an attempt of the restart policy (restarted after its delay), and a failed
/// allocation is replaced after its reschedule delay, no more often than the policy allows.
#[tokio::test]
async fn a_task_that_fails_to_start_is_retried_only_as_its_policies_allow() -> anyhow::Result<()> {
    const TEST: &str = "a_task_that_fails_to_start_is_retried_only_as_its_policies_allow";
    if skip(TEST) {
        return Ok(());
    }
    let ip = {
        let pid = std::process::id();
        format!("127.{}.{}.17", 10 + (pid % 200), 251 - (pid / 200 % 5))
    };
    let data = tempfile::tempdir()?;
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api, node) = dev_agent(&ip, data.path(), &log).await?;
    let _cleanup = RemoveNodeContainers(node["ID"].as_str().map(str::to_string));
    let mut job = docker_job(
        "never-starts",
        "service",
        json!({"image": "teamster-t16-no-such-image:never"}),
        json!([]),
    );
    let group = &mut job["TaskGroups"][0];
    group["RestartPolicy"] = json!({
        "Attempts": 1, "Interval": 600_000_000_000u64, "Delay": 1_000_000_000u64, "Mode": "fail"
    });
    group["ReschedulePolicy"] = json!({
        "Attempts": 1, "Interval": 3_600_000_000_000u64, "Delay": 5_000_000_000u64,
        "DelayFunction": "constant", "Unlimited": false
    });
    group["Update"] = json!({"MaxParallel": 1, "HealthCheck": "task_states",
        "MinHealthyTime": 1_000_000_000u64, "HealthyDeadline": 60_000_000_000u64,
        "ProgressDeadline": 120_000_000_000u64});
    register(&api, job).await?;
    let allocs = |api: &ApiClient| {
        let api = api.clone();
        async move {
            api.get::<Vec<Value>>("/v1/job/never-starts/allocations?stale=true")
                .await
                .unwrap_or_default()
        }
    };
    // The first allocation: a failed start, a restart after the delay, a second failed
    // start, then not restarted.
    let first = wait_for(
        Duration::from_secs(60),
        "the first allocation failed",
        || async {
            let a = first_alloc(&api, "never-starts").await?;
            (a["ClientStatus"] == "failed").then_some(a)
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", agent_log(&log)))?;
    let all = events(&first);
    let kinds: Vec<String> = all.iter().map(|(t, _)| t.clone()).collect();
    let failures = kinds.iter().filter(|t| *t == "Driver Failure").count();
    assert_eq!(
        failures,
        2,
        "one start and one restart: {all:#?}\n{}",
        agent_log(&log)
    );
    assert!(kinds.iter().any(|t| t == "Restarting"), "{kinds:?}");
    assert!(kinds.iter().any(|t| t == "Not Restarting"), "{kinds:?}");
    // Watched for 15 s more (the reschedule delay is 5 s): at most the one replacement the
    // policy allows.
    let watch_until = Instant::now() + Duration::from_secs(15);
    let mut most = 0;
    while Instant::now() < watch_until {
        most = most.max(allocs(&api).await.len());
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        (1..=2).contains(&most),
        "{most} allocations for a policy of one reschedule"
    );
    let evals: Vec<Value> = api
        .get("/v1/job/never-starts/evaluations?stale=true")
        .await?;
    assert!(evals.len() <= 8, "{} evaluations: {evals:#?}", evals.len());
    Ok(())
}

/// Issue 48: `memory_max` is the container's hard limit and `memory` its reservation when
/// memory oversubscription is on; with it off (Nomad's default) the job is accepted with
/// Nomad's warning and the container's limit is `memory`.
#[tokio::test]
async fn memory_max_is_the_containers_limit_only_with_oversubscription_on() -> anyhow::Result<()> {
    const TEST: &str = "memory_max_is_the_containers_limit_only_with_oversubscription_on";
    if skip(TEST) {
        return Ok(());
    }
    build_image()?;
    let ip = {
        let pid = std::process::id();
        format!("127.{}.{}.18", 10 + (pid % 200), 251 - (pid / 200 % 5))
    };
    let data = tempfile::tempdir()?;
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api, node) = dev_agent(&ip, data.path(), &log).await?;
    let _cleanup = RemoveNodeContainers(node["ID"].as_str().map(str::to_string));
    let job = |id: &str| {
        let mut job = docker_job(
            id,
            "service",
            json!({
                "image": IMAGE,
                "entrypoint": ["/bin/busybox"],
                "args": ["sh", "-c", "echo max=$NOMAD_MEMORY_MAX_LIMIT; exec sleep 600"]
            }),
            json!([]),
        );
        job["TaskGroups"][0]["Tasks"][0]["Resources"] =
            json!({"CPU": 100, "MemoryMB": 32, "MemoryMaxMB": 96});
        job
    };
    // The container of `id`'s allocation once it runs: (Memory, MemoryReservation).
    let limits = |id: &'static str| {
        let api = api.clone();
        async move {
            let alloc = wait_for(Duration::from_secs(60), "the task running", || async {
                let a = first_alloc(&api, id).await?;
                (a["ClientStatus"] == "running").then_some(a)
            })
            .await?;
            let alloc_id = alloc["ID"].as_str().unwrap_or_default().to_string();
            let container = containers(ALLOC_LABEL, &alloc_id)
                .pop()
                .ok_or_else(|| anyhow::anyhow!("no container for {alloc_id}"))?;
            let out = docker(&[
                "inspect",
                "-f",
                "{{.HostConfig.Memory}} {{.HostConfig.MemoryReservation}}",
                &container,
            ])?;
            let (memory, reservation) = out.split_once(' ').unwrap_or_default();
            anyhow::Ok((memory.parse::<u64>()?, reservation.parse::<u64>()?, alloc))
        }
    };
    const MB: u64 = 1024 * 1024;

    // Off (the default): accepted, with Nomad's warning; memory is the limit.
    let r: Value = api
        .request(
            reqwest::Method::POST,
            "/v1/jobs",
            Some(&json!({"Job": job("mm-off")})),
        )
        .await?;
    let warnings = r["Warnings"].as_str().unwrap_or_default();
    assert!(
        warnings.contains(
            "Memory oversubscription is not enabled; Task \"g.t\" memory_max value will be ignored"
        ),
        "{r}"
    );
    let (memory, reservation, alloc) = limits("mm-off").await?;
    assert_eq!((memory, reservation), (32 * MB, 0), "{alloc}");
    assert_eq!(alloc["Resources"]["MemoryMaxMB"], 0);

    // On: memory_max is the limit, memory the reservation, and the task is told.
    let _: Value = api
        .request(
            reqwest::Method::PUT,
            "/v1/operator/scheduler/configuration",
            Some(&json!({"MemoryOversubscriptionEnabled": true})),
        )
        .await?;
    let r: Value = api
        .request(
            reqwest::Method::POST,
            "/v1/jobs",
            Some(&json!({"Job": job("mm-on")})),
        )
        .await?;
    assert_eq!(r["Warnings"], "", "{r}");
    let (memory, reservation, alloc) = limits("mm-on").await?;
    assert_eq!((memory, reservation), (96 * MB, 32 * MB), "{alloc}");
    let alloc_id = alloc["ID"].as_str().unwrap_or_default().to_string();
    let addr = format!("http://{ip}:4646");
    let out = wait_for(Duration::from_secs(30), "the task's output", || async {
        let out = log_of(&addr, &alloc_id, "stdout").await;
        out.contains("max=").then_some(out)
    })
    .await?;
    assert!(out.contains("max=96"), "{out}");
    // A memory_max under memory is refused, as Nomad refuses it.
    let mut bad = job("mm-bad");
    bad["TaskGroups"][0]["Tasks"][0]["Resources"]["MemoryMaxMB"] = json!(16);
    let refused = api
        .request::<_, Value>(
            reqwest::Method::POST,
            "/v1/jobs",
            Some(&json!({"Job": bad})),
        )
        .await
        .expect_err("refused");
    assert!(
        refused
            .to_string()
            .contains("MemoryMaxMB value (16) should be larger than MemoryMB value (32)"),
        "{refused}"
    );
    Ok(())
}

/// Issue 50: host volumes. The client's `host_volume`s are on its node; a docker task mounts
/// one (as a numeric `user`, which owns its task directories), and the next allocation on
/// the node reads what the first wrote, through a read-only mount it cannot write through.
/// A job asking for a volume no node has, or a read-only one for writing, or a CSI volume,
/// is accepted and stays pending with Nomad's reason; a mount naming no group volume is
/// refused with Nomad's words.
#[tokio::test]
async fn host_volumes_carry_files_between_allocations_and_missing_ones_keep_jobs_pending(
) -> anyhow::Result<()> {
    const TEST: &str =
        "host_volumes_carry_files_between_allocations_and_missing_ones_keep_jobs_pending";
    if skip(TEST) {
        return Ok(());
    }
    teamster_cluster_tests::init_test_tracing();
    build_image()?;
    let ip = {
        let pid = std::process::id();
        format!("127.{}.{}.19", 10 + (pid % 200), 251 - (pid / 200 % 5))
    };
    let shared = tempfile::tempdir()?;
    let certs = tempfile::tempdir()?;
    use std::os::unix::fs::PermissionsExt;
    // The task runs as uid 1000: it must be able to write there.
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777))?;
    let config = tempfile::NamedTempFile::new()?;
    std::fs::write(
        config.path(),
        format!(
            "[client.host_volume.shared]\npath = {:?}\n\n\
             [client.host_volume.certs]\npath = {:?}\nread_only = true\n",
            shared.path(),
            certs.path()
        ),
    )?;
    let data = tempfile::tempdir()?;
    let log = tempfile::NamedTempFile::new()?;
    let config_path = config.path().to_string_lossy().to_string();
    let (_agent, api, node) =
        dev_agent_with(&ip, data.path(), &log, &["--config", &config_path]).await?;
    let _cleanup = RemoveNodeContainers(node["ID"].as_str().map(str::to_string));
    let addr = format!("http://{ip}:4646");
    assert_eq!(
        node["HostVolumes"]["shared"]["Path"],
        shared.path().to_string_lossy().as_ref(),
        "{node:#}"
    );
    assert_eq!(node["HostVolumes"]["certs"]["ReadOnly"], true);
    let out = Command::new(teamster_bin())
        .args(["volume", "status", "-address", &addr])
        .output()?;
    let listed = String::from_utf8_lossy(&out.stdout).to_string();
    let row = listed
        .lines()
        .find(|l| l.starts_with("shared "))
        .unwrap_or_default()
        .to_string();
    assert!(
        row.contains(&*shared.path().to_string_lossy()) && row.ends_with("false"),
        "{listed}"
    );
    assert!(
        listed.contains("Container Storage Interface\nNo CSI volumes"),
        "{listed}"
    );

    let job = |id: &str, script: &str, volume: Value, mount_read_only: bool| {
        let mut job = docker_job(
            id,
            "batch",
            json!({"image": IMAGE, "entrypoint": ["/bin/busybox"], "args": ["sh", "-c", script]}),
            json!([]),
        );
        job["TaskGroups"][0]["Volumes"] = json!({ "v": volume });
        job["TaskGroups"][0]["Tasks"][0]["VolumeMounts"] =
            json!([{"Volume": "v", "Destination": "/data", "ReadOnly": mount_read_only}]);
        job["TaskGroups"][0]["Tasks"][0]["User"] = json!("1000");
        job
    };
    let host = |source: &str| json!({"Type": "host", "Source": source});
    let finished = |id: &'static str| {
        let api = api.clone();
        async move {
            wait_for(
                Duration::from_secs(60),
                "the batch task finished",
                || async {
                    let a = first_alloc(&api, id).await?;
                    matches!(a["ClientStatus"].as_str(), Some("complete" | "failed")).then_some(a)
                },
            )
            .await
        }
    };

    // The writer: as uid 1000, which owns its secrets directory.
    register(
        &api,
        job(
            "writer",
            "id -u > /data/uid; stat -c %u /secrets > /data/secrets-owner; echo hello > /data/msg",
            host("shared"),
            false,
        ),
    )
    .await?;
    let alloc = finished("writer").await?;
    assert_eq!(alloc["ClientStatus"], "complete", "{alloc:#}");
    let read = |name: &str| std::fs::read_to_string(shared.path().join(name)).unwrap_or_default();
    assert_eq!(read("msg"), "hello\n");
    assert_eq!(read("uid"), "1000\n");
    assert_eq!(read("secrets-owner"), "1000\n");

    // The reader, next on the node: sees the file, cannot write through its read-only mount.
    register(
        &api,
        job(
            "reader",
            "cat /data/msg && ! touch /data/nope 2>/dev/null",
            host("shared"),
            true,
        ),
    )
    .await?;
    let alloc = finished("reader").await?;
    assert_eq!(alloc["ClientStatus"], "complete", "{alloc:#}");
    let alloc_id = alloc["ID"].as_str().unwrap_or_default().to_string();
    assert_eq!(log_of(&addr, &alloc_id, "stdout").await, "hello\n");
    assert!(!shared.path().join("nope").exists());

    // Pending, with Nomad's reasons.
    let pending = |id: &'static str| {
        let api = api.clone();
        async move {
            wait_for(Duration::from_secs(30), "a blocked evaluation", || async {
                let evals: Vec<Value> = api.get(&format!("/v1/job/{id}/evaluations")).await.ok()?;
                let failed = evals
                    .iter()
                    .find(|e| e["FailedTGAllocs"]["g"].is_object())?;
                Some(failed["FailedTGAllocs"]["g"]["ConstraintFiltered"].clone())
            })
            .await
        }
    };
    register(&api, job("absent", "true", host("absent"), false)).await?;
    let filtered = pending("absent").await?;
    assert_eq!(filtered["missing compatible host volumes"], 1, "{filtered}");
    register(&api, job("rw-certs", "true", host("certs"), false)).await?;
    let filtered = pending("rw-certs").await?;
    assert_eq!(filtered["missing compatible host volumes"], 1, "{filtered}");
    let csi = json!({"Type": "csi", "Source": "db", "AccessMode": "single-node-writer",
                     "AttachmentMode": "file-system"});
    register(&api, job("csi", "true", csi, false)).await?;
    let filtered = pending("csi").await?;
    assert_eq!(filtered["missing CSI volume(s) db"], 1, "{filtered}");
    for id in ["absent", "rw-certs", "csi"] {
        let allocs: Vec<Value> = api.get(&format!("/v1/job/{id}/allocations")).await?;
        assert!(allocs.is_empty(), "{id}: {allocs:?}");
    }

    // A mount of no group volume: refused with Nomad's words, nothing registered.
    let mut bad = job("bad-mount", "true", host("shared"), false);
    bad["TaskGroups"][0]["Tasks"][0]["VolumeMounts"][0]["Volume"] = json!("nope");
    let e = register(&api, bad).await.unwrap_err().to_string();
    assert!(
        e.contains("400") && e.contains("Volume Mount (0) references undefined volume nope"),
        "{e}"
    );
    assert!(api.get::<Value>("/v1/job/bad-mount").await.is_err());
    Ok(())
}
