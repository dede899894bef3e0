//! The client's task runtime (issue 47) against real agents and real processes:
//!
//! - Nomad's `job init` example as written (ephemeral disk, shutdown delay, `ui`, workload
//!   `identity`) is accepted whole; run with a `raw_exec` task and logs, its output lands in
//!   `alloc/logs/redis.stdout.<n>`, rotated
//!   at `max_file_size` with `max_files` kept, and a stop withdraws its service, waits its
//!   `shutdown_delay` (10 s as written), then signals it;
//! - a client killed with SIGKILL while its task writes, then started again, loses no line
//!   and repeats none (the log collector outlives it), and the collector ends with the task;
//! - a dead `leader` stops its group (the others killed with their own `kill_signal`), and a
//!   task's `restart` block overrides its group's;
//! - a task's `secrets/` is listed but never read through the file API, a symlink to it
//!   neither, and a missing file is a bad request;
//! - an in-place update reaches the running allocation's hooks: its log collector keeps the
//!   new `max_files` at once, and its group service carries the new tags;
//! - `lifecycle`: a prestart task's file is read by the main task, which starts only after
//!   it; a prestart sidecar outlives a restart of the main task and is stopped after it;
//!   a poststop task runs once the others are dead.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use teamster::api::ApiClient;
use teamster_cluster_tests::api::{
    job_init_example_hcl, job_init_example_raw_exec, parse_hcl, register, JOB_INIT_EXAMPLE_LEFT_OUT,
};
use teamster_cluster_tests::client_process::{wait_node_status, ClientProcess};
use teamster_cluster_tests::dev::{dev_agent, dev_ip_at};
use teamster_cluster_tests::process::{ClusterOptions, ProcessCluster};
use teamster_cluster_tests::wait_for;

/// A numbered line of about 100 bytes.
const WRITER: &str = "i=0; while [ $i -lt $N ]; do \
     printf 'line %06d ........................................................................\\n' $i; \
     i=$((i+1)); if [ $((i % 500)) -eq 0 ]; then sleep 0.05; fi; done; echo done; exec sleep 600";

/// One server and one client agent named `name` on host `host` of the cluster's loopback
/// block, its node ready: the cluster (kept alive by the caller), the server's API, the
/// client and its node ID.
async fn one_server_one_client(
    name: &str,
    host: u8,
) -> anyhow::Result<(ProcessCluster, ApiClient, ClientProcess, String)> {
    let mut c = ProcessCluster::start(1, ClusterOptions::default())?;
    let leader = c.wait_leader(Duration::from_secs(30)).await?;
    let api = c.servers[leader].api();
    let rpc = c.servers[leader].rpc_addr();
    let ip = {
        let (block, _) = c.servers[0].ip.rsplit_once('.').expect("an IPv4 address");
        format!("{block}.{host}")
    };
    let client = ClientProcess::start(c.dir(), name, &ip, std::slice::from_ref(&rpc), "")?;
    let node_id = wait_for(Duration::from_secs(15), "the node id", || client.node_id()).await?;
    wait_node_status(&api, &node_id, "ready", Duration::from_secs(15)).await?;
    Ok((c, api, client, node_id))
}

fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or_default()
}

async fn job_allocs(api: &ApiClient, job: &str) -> Vec<Value> {
    api.get(&format!("/v1/job/{job}/allocations"))
        .await
        .unwrap_or_default()
}

/// The only allocation of `job` once `check` holds for it.
async fn wait_job_alloc(
    api: &ApiClient,
    job: &str,
    what: &str,
    timeout: Duration,
    check: impl Fn(&Value) -> bool,
) -> anyhow::Result<Value> {
    wait_for(timeout, what, || async {
        let stub = job_allocs(api, job).await.into_iter().next()?;
        let id = stub["ID"].as_str()?;
        let a: Value = api.get(&format!("/v1/allocation/{id}")).await.ok()?;
        check(&a).then_some(a)
    })
    .await
}

fn events<'a>(alloc: &'a Value, task: &str) -> Vec<&'a Value> {
    alloc["TaskStates"][task]["Events"]
        .as_array()
        .map(|e| e.iter().collect())
        .unwrap_or_default()
}

fn event_types(alloc: &Value, task: &str) -> Vec<String> {
    events(alloc, task)
        .iter()
        .filter_map(|e| e["Type"].as_str().map(str::to_string))
        .collect()
}

fn event_time(alloc: &Value, task: &str, kind: &str) -> Option<i64> {
    events(alloc, task)
        .iter()
        .find(|e| e["Type"] == kind)
        .and_then(|e| e["Time"].as_i64())
}

/// The names in `path` of the allocation's directory.
async fn ls(api: &ApiClient, alloc_id: &str, path: &str) -> anyhow::Result<Vec<Value>> {
    Ok(api
        .get(&format!("/v1/client/fs/ls/{alloc_id}?path={path}"))
        .await?)
}

async fn cat(
    api: &ApiClient,
    alloc_id: &str,
    path: &str,
) -> Result<String, teamster::api::ApiError> {
    api.request_text::<()>(
        reqwest::Method::GET,
        &format!("/v1/client/fs/cat/{alloc_id}?path={path}"),
        None,
    )
    .await
}

/// The rotated files of `stream` in `alloc/logs`, oldest first: (index, size).
async fn log_files(
    api: &ApiClient,
    alloc_id: &str,
    stream: &str,
) -> anyhow::Result<Vec<(u64, u64)>> {
    let mut out: Vec<(u64, u64)> = ls(api, alloc_id, "alloc/logs")
        .await?
        .iter()
        .filter_map(|f| {
            let name = f["Name"].as_str()?;
            let index = name.strip_prefix(stream)?.strip_prefix('.')?.parse().ok()?;
            Some((index, f["Size"].as_u64()?))
        })
        .collect();
    out.sort();
    Ok(out)
}

/// Lines `first..` of the writer, then `done`: the expected contents.
fn check_lines(text: &str, total: usize) -> Result<usize, String> {
    let lines: Vec<&str> = text.lines().collect();
    let Some((&last, numbered)) = lines.split_last() else {
        return Err("no lines".into());
    };
    if last != "done" {
        return Err(format!("the last line is {last:?}"));
    }
    let first = numbered
        .first()
        .and_then(|l| l.get(5..11))
        .and_then(|n| n.parse::<usize>().ok())
        .ok_or("the first line has no number")?;
    for (k, line) in numbered.iter().enumerate() {
        let want = format!("line {:06} ", first + k);
        if !line.starts_with(&want) {
            return Err(format!(
                "line {k} after {first} is {line:?}, wanted {want:?}…"
            ));
        }
    }
    if first + numbered.len() != total {
        return Err(format!(
            "lines {first}..{} of {total}",
            first + numbered.len()
        ));
    }
    Ok(first)
}

/// `job init -driver raw_exec` writes a job that runs as written on any node: run with the
/// CLI, its allocation runs and its service is registered.
#[tokio::test]
async fn the_raw_exec_job_init_example_runs_as_written() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let ip = dev_ip_at(37);
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api) = dev_agent(&ip, &log).await?;
    let dir = tempfile::tempdir()?;
    let cli = |args: &[&str]| {
        std::process::Command::new(teamster_cluster_tests::process::teamster_bin())
            .current_dir(dir.path())
            .args(args)
            .output()
    };
    let init = cli(&["job", "init", "-driver", "raw_exec"])?;
    assert!(init.status.success(), "{init:?}");
    let run = cli(&[
        "job",
        "run",
        "-detach",
        "-address",
        api.address(),
        "example.nomad.hcl",
    ])?;
    assert!(run.status.success(), "{run:?}");
    wait_job_alloc(
        &api,
        "example",
        "the written example running",
        Duration::from_secs(30),
        |a| a["ClientStatus"] == "running",
    )
    .await?;
    wait_for(
        Duration::from_secs(30),
        "its service registered",
        || async {
            let found: Vec<Value> = api.get("/v1/service/example-loop").await.ok()?;
            (!found.is_empty()).then_some(())
        },
    )
    .await?;
    // Stopped, so its loop does not outlive the test's agent.
    api.request::<(), Value>(reqwest::Method::DELETE, "/v1/job/example", None)
        .await?;
    wait_job_alloc(
        &api,
        "example",
        "the written example stopped",
        Duration::from_secs(60),
        |a| a["ClientStatus"] == "complete",
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn nomad_s_job_init_example_runs_its_logs_rotate_and_its_stop_waits_the_shutdown_delay(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let ip = dev_ip_at(31);
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api) = dev_agent(&ip, &log).await?;

    // As written (a docker task), the example is accepted whole.
    let example = parse_hcl(&api, &job_init_example_hcl()).await?;
    let checked: Value = api
        .request(
            reqwest::Method::POST,
            "/v1/validate/job",
            Some(&json!({ "Job": example })),
        )
        .await?;
    let errors: Vec<&str> = checked["ValidationErrors"]
        .as_array()
        .map(|e| e.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert_eq!(errors.len(), JOB_INIT_EXAMPLE_LEFT_OUT.len(), "{checked}");
    for (error, field) in errors.iter().zip(JOB_INIT_EXAMPLE_LEFT_OUT) {
        assert!(error.contains(&format!("→ {field}: ")), "{error}");
    }

    // 25 000 lines of 100 bytes: 2.4 MiB in files of 1 MiB, two kept.
    let script = format!("N=25000; {WRITER}");
    let job = job_init_example_raw_exec(&api, "example", &script, 2, 1).await?;
    register(&api, job).await?;
    // Its ui block is kept with it.
    let stored: Value = api.get("/v1/job/example").await?;
    assert!(
        stored["UI"]["Description"]
            .as_str()
            .is_some_and(|d| d.contains("Example")),
        "{}",
        stored["UI"]
    );
    let alloc = wait_job_alloc(
        &api,
        "example",
        "the example running",
        Duration::from_secs(30),
        |a| a["ClientStatus"] == "running",
    )
    .await?;
    let id = alloc["ID"].as_str().unwrap_or_default().to_string();
    let files = wait_for(
        Duration::from_secs(60),
        "the task to write everything",
        || async {
            let files = log_files(&api, &id, "redis.stdout").await.ok()?;
            let (last, _) = *files.last()?;
            let text = cat(&api, &id, &format!("alloc/logs/redis.stdout.{last}"))
                .await
                .ok()?;
            text.ends_with("done\n").then_some(files)
        },
    )
    .await?;
    let indexes: Vec<u64> = files.iter().map(|f| f.0).collect();
    assert_eq!(
        indexes,
        [1, 2],
        "three files written, the oldest removed: {files:?}"
    );
    assert!(files.iter().all(|f| f.1 <= 1 << 20), "{files:?}");
    let mut text = String::new();
    for (index, _) in &files {
        let part = cat(&api, &id, &format!("alloc/logs/redis.stdout.{index}")).await?;
        assert!(part.ends_with('\n'), "file {index} ends inside a line");
        text.push_str(&part);
    }
    let first = check_lines(&text, 25_000).map_err(anyhow::Error::msg)?;
    assert!(first > 0, "the first file was removed");
    // The logs endpoint reads across the kept files; `-tail`-like reads from the end.
    let tail = api
        .request_text::<()>(
            reqwest::Method::GET,
            &format!(
                "/v1/client/fs/logs/{id}?task=redis&type=stdout&plain=true&origin=end&offset=5"
            ),
            None,
        )
        .await?;
    assert_eq!(tail, "done\n");
    let all = api
        .request_text::<()>(
            reqwest::Method::GET,
            &format!("/v1/client/fs/logs/{id}?task=redis&type=stdout&plain=true"),
            None,
        )
        .await?;
    assert_eq!(all, text);

    // The service is registered while the task runs.
    let services: Vec<Value> = api.get("/v1/service/redis-cache").await?;
    assert_eq!(services.len(), 1, "{services:?}");

    // Stop: the service goes first, then the example's 10 s wait, then the signal.
    api.request::<(), Value>(reqwest::Method::DELETE, "/v1/job/example", None)
        .await?;
    let gone_at = wait_for(Duration::from_secs(10), "the service withdrawn", || async {
        let services: Vec<Value> = api.get("/v1/service/redis-cache").await.ok()?;
        services.is_empty().then(now_nanos)
    })
    .await?;
    let stopped = wait_job_alloc(
        &api,
        "example",
        "the example stopped",
        Duration::from_secs(30),
        |a| a["ClientStatus"] == "complete",
    )
    .await?;
    let kinds = event_types(&stopped, "redis");
    let waiting = event_time(&stopped, "redis", "Waiting for shutdown delay")
        .ok_or_else(|| anyhow::anyhow!("no shutdown delay event: {kinds:?}"))?;
    let killing = event_time(&stopped, "redis", "Killing")
        .ok_or_else(|| anyhow::anyhow!("no Killing event: {kinds:?}"))?;
    assert!(
        killing - waiting >= 9_900_000_000,
        "the signal came {} ms after the wait began",
        (killing - waiting) / 1_000_000
    );
    assert!(
        gone_at < killing,
        "the service was still registered when the task was signalled"
    );
    Ok(())
}

#[tokio::test]
async fn a_client_killed_while_its_task_writes_loses_no_line_and_repeats_none() -> anyhow::Result<()>
{
    teamster_cluster_tests::init_test_tracing();
    let (_cluster, api, mut client, node_id) = one_server_one_client("writer", 101).await?;

    // 40 000 lines (4 MB) at about 10 000 a second, into files of 1 MB.
    let script = format!("N=40000; {WRITER}");
    let job = json!({
        "ID": "writer", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g", "Count": 1,
            "Tasks": [{
                "Name": "t", "Driver": "raw_exec",
                "Config": {"command": "/bin/sh", "args": ["-c", script]},
                "KillTimeout": 1_000_000_000u64,
                "LogConfig": {"MaxFiles": 10, "MaxFileSizeMB": 1},
                "Resources": {"CPU": 10, "MemoryMB": 10}
            }]
        }]
    });
    register(&api, job).await?;
    let alloc = wait_job_alloc(
        &api,
        "writer",
        "the writer running",
        Duration::from_secs(30),
        |a| a["ClientStatus"] == "running",
    )
    .await?;
    let id = alloc["ID"].as_str().unwrap_or_default().to_string();
    let logs_dir = client.data_dir.join(format!("alloc/{id}/alloc/logs"));
    let written = |dir: &std::path::Path| -> u64 {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with("t.stdout."))
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .unwrap_or(0)
    };
    let dir = logs_dir.clone();
    wait_for(Duration::from_secs(30), "the task to begin writing", || {
        let dir = dir.clone();
        async move { (written(&dir) > 100_000).then_some(()) }
    })
    .await?;
    client.kill();
    // The collector goes on without the client.
    let before = written(&logs_dir);
    let dir = logs_dir.clone();
    wait_for(
        Duration::from_secs(30),
        "lines written while the client is down",
        || {
            let dir = dir.clone();
            async move { (written(&dir) > before + 200_000).then_some(()) }
        },
    )
    .await?;
    client.restart()?;
    wait_node_status(&api, &node_id, "ready", Duration::from_secs(30)).await?;
    let dir = logs_dir.clone();
    let text = wait_for(Duration::from_secs(60), "every line written", || {
        let dir = dir.clone();
        async move {
            let mut files: Vec<(u64, std::path::PathBuf)> = std::fs::read_dir(&dir)
                .ok()?
                .flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let index = name.strip_prefix("t.stdout.")?.parse().ok()?;
                    Some((index, e.path()))
                })
                .collect();
            files.sort();
            let text: String = files
                .iter()
                .map(|(_, p)| std::fs::read_to_string(p).unwrap_or_default())
                .collect();
            text.ends_with("done\n").then_some(text)
        }
    })
    .await?;
    let first = check_lines(&text, 40_000).map_err(anyhow::Error::msg)?;
    assert_eq!(
        first, 0,
        "no file was removed: every line from the first is there"
    );

    // Stopped, the task's collector ends with it.
    api.request::<(), Value>(reqwest::Method::DELETE, "/v1/job/writer", None)
        .await?;
    wait_job_alloc(
        &api,
        "writer",
        "the writer stopped",
        Duration::from_secs(30),
        |a| a["ClientStatus"] == "complete",
    )
    .await?;
    let needle = logs_dir.display().to_string();
    let collectors = wait_for(Duration::from_secs(10), "the collector to exit", || {
        let needle = needle.clone();
        async move {
            let running: Vec<String> = std::fs::read_dir("/proc")
                .ok()?
                .flatten()
                .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .filter(|c| c.contains("logmon") && c.contains(&needle))
                .collect();
            running.is_empty().then_some(running)
        }
    })
    .await?;
    assert!(collectors.is_empty());
    client.kill();
    Ok(())
}

#[tokio::test]
async fn a_stop_begun_before_a_client_restart_is_finished_after_it() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let (_cluster, api, mut client, _) = one_server_one_client("stopper", 102).await?;
    // One task fails at once; the group waits 20 s before killing its sibling.
    let job = json!({
        "ID": "half-failed", "Type": "batch", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g", "Count": 1, "ShutdownDelay": 20_000_000_000u64,
            "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
            "ReschedulePolicy": {"Attempts": 0, "Unlimited": false},
            "Tasks": [
                {"Name": "fails", "Driver": "raw_exec",
                 "Config": {"command": "/bin/sh", "args": ["-c", "sleep 1; exit 3"]},
                 "Resources": {"CPU": 10, "MemoryMB": 10}},
                {"Name": "sibling", "Driver": "raw_exec", "KillTimeout": 1_000_000_000u64,
                 "Config": {"command": "/bin/sh", "args": ["-c", "exec sleep 600"]},
                 "Resources": {"CPU": 10, "MemoryMB": 10}}
            ]
        }]
    });
    register(&api, job).await?;
    wait_job_alloc(
        &api,
        "half-failed",
        "the failed task reported",
        Duration::from_secs(30),
        |a| {
            a["TaskStates"]["fails"]["Failed"] == true
                && a["TaskStates"]["sibling"]["State"] == "running"
        },
    )
    .await?;
    // Killed during the group's shutdown delay, started again: the stop goes on.
    client.kill();
    client.restart()?;
    let done = wait_job_alloc(
        &api,
        "half-failed",
        "the sibling stopped",
        Duration::from_secs(60),
        |a| a["TaskStates"]["sibling"]["State"] == "dead",
    )
    .await?;
    let kinds = event_types(&done, "sibling");
    assert!(
        kinds.contains(&"Sibling Task Failed".to_string()),
        "{kinds:?}"
    );
    assert!(kinds.contains(&"Killed".to_string()), "{kinds:?}");
    assert_eq!(done["ClientStatus"], "failed", "{done}");
    client.kill();
    Ok(())
}

#[tokio::test]
async fn a_dead_leader_stops_its_group_and_a_task_s_restart_block_overrides_its_group_s(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let ip = dev_ip_at(32);
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api) = dev_agent(&ip, &log).await?;

    // The leader exits after a second (a batch task that succeeded is dead); its sibling is
    // stopped with its own signal, which it traps and reports.
    let follower = "trap 'echo got-usr1; exit 0' USR1; echo ready; while true; do sleep 0.1; done";
    let job = json!({
        "ID": "led", "Type": "batch", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g", "Count": 1,
            "Tasks": [
                {"Name": "leader", "Driver": "raw_exec", "Leader": true,
                 "Config": {"command": "/bin/sh", "args": ["-c", "sleep 1"]},
                 "Resources": {"CPU": 10, "MemoryMB": 10}},
                {"Name": "follower", "Driver": "raw_exec", "KillSignal": "SIGUSR1",
                 "KillTimeout": 5_000_000_000u64,
                 "Config": {"command": "/bin/sh", "args": ["-c", follower]},
                 "Resources": {"CPU": 10, "MemoryMB": 10}}
            ]
        }]
    });
    register(&api, job).await?;
    let done = wait_job_alloc(
        &api,
        "led",
        "the group stopped by its leader",
        Duration::from_secs(30),
        |a| {
            a["TaskStates"]["follower"]["State"] == "dead"
                && a["TaskStates"]["leader"]["State"] == "dead"
        },
    )
    .await?;
    let kinds = event_types(&done, "follower");
    assert!(kinds.contains(&"Leader Task Dead".to_string()), "{kinds:?}");
    assert!(kinds.contains(&"Killed".to_string()), "{kinds:?}");
    assert_eq!(done["TaskStates"]["follower"]["Failed"], false, "{done}");
    let id = done["ID"].as_str().unwrap_or_default();
    let out = api
        .request_text::<()>(
            reqwest::Method::GET,
            &format!("/v1/client/fs/logs/{id}?task=follower&type=stdout&plain=true"),
            None,
        )
        .await?;
    assert_eq!(out, "ready\ngot-usr1\n", "the kill signal was SIGUSR1");

    // The group allows three restarts; the task's own block allows none.
    let job = json!({
        "ID": "no-retry", "Type": "batch", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g", "Count": 1,
            "RestartPolicy": {"Attempts": 3, "Interval": 600_000_000_000u64,
                              "Delay": 1_000_000_000u64, "Mode": "fail"},
            "ReschedulePolicy": {"Attempts": 0, "Unlimited": false},
            "Tasks": [{"Name": "t", "Driver": "raw_exec",
                       "RestartPolicy": {"Attempts": 0},
                       "Config": {"command": "/bin/sh", "args": ["-c", "exit 3"]},
                       "Resources": {"CPU": 10, "MemoryMB": 10}}]
        }]
    });
    register(&api, job).await?;
    let failed = wait_job_alloc(
        &api,
        "no-retry",
        "the task failed",
        Duration::from_secs(30),
        |a| a["ClientStatus"] == "failed",
    )
    .await?;
    assert_eq!(failed["TaskStates"]["t"]["Restarts"], 0, "{failed}");
    let kinds = event_types(&failed, "t");
    assert!(!kinds.contains(&"Restarting".to_string()), "{kinds:?}");
    assert!(kinds.contains(&"Not Restarting".to_string()), "{kinds:?}");
    Ok(())
}

#[tokio::test]
async fn an_in_place_update_reaches_the_running_log_collector_and_services() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let ip = dev_ip_at(35);
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api) = dev_agent(&ip, &log).await?;
    // 25 000 lines of 100 bytes: three files of at most 1 MiB, all kept at first.
    let script = format!("N=25000; {WRITER}");
    let job = |max_files: u32, tag: &str| {
        json!({
            "ID": "updated", "Type": "service", "Datacenters": ["dc1"],
            "TaskGroups": [{"Name": "g", "Count": 1,
                "Services": [{"Name": "updated-web", "Provider": "nomad", "Tags": [tag]}],
                "Tasks": [{
                    "Name": "t", "Driver": "raw_exec", "KillTimeout": 1_000_000_000u64,
                    "Config": {"command": "/bin/sh", "args": ["-c", script]},
                    "LogConfig": {"MaxFiles": max_files, "MaxFileSizeMB": 1},
                    "Resources": {"CPU": 10, "MemoryMB": 10}}]}]
        })
    };
    register(&api, job(10, "v1")).await?;
    let alloc = wait_job_alloc(
        &api,
        "updated",
        "the writer running",
        Duration::from_secs(30),
        |a| a["ClientStatus"] == "running",
    )
    .await?;
    let id = alloc["ID"].as_str().unwrap_or_default().to_string();
    let files = wait_for(Duration::from_secs(60), "everything written", || async {
        let files = log_files(&api, &id, "t.stdout").await.ok()?;
        let (last, _) = *files.last()?;
        let text = cat(&api, &id, &format!("alloc/logs/t.stdout.{last}"))
            .await
            .ok()?;
        text.ends_with("done\n").then_some(files)
    })
    .await?;
    let indexes: Vec<u64> = files.iter().map(|f| f.0).collect();
    assert_eq!(indexes, [0, 1, 2], "{files:?}");
    let tags = |services: &[Value]| -> Vec<String> {
        services
            .iter()
            .flat_map(|s| s["Tags"].as_array().cloned().unwrap_or_default())
            .filter_map(|t| t.as_str().map(str::to_string))
            .collect()
    };
    let services: Vec<Value> = api.get("/v1/service/updated-web").await?;
    assert_eq!(tags(&services), ["v1"]);

    // Only the `logs` limits and the tags change: updated in place, not replaced.
    register(&api, job(1, "v2")).await?;
    let kept = wait_for(Duration::from_secs(30), "one file kept", || async {
        let files = log_files(&api, &id, "t.stdout").await.ok()?;
        (files.len() == 1).then_some(files)
    })
    .await?;
    assert_eq!(kept[0].0, 2, "the newest file is the one kept: {kept:?}");
    let retagged = wait_for(Duration::from_secs(15), "the new tags", || async {
        let services: Vec<Value> = api.get("/v1/service/updated-web").await.ok()?;
        (tags(&services) == ["v2"]).then_some(services)
    })
    .await?;
    assert_eq!(retagged.len(), 1);
    let allocs = job_allocs(&api, "updated").await;
    assert_eq!(allocs.len(), 1, "replaced instead of updated: {allocs:?}");
    let now: Value = api.get(&format!("/v1/allocation/{id}")).await?;
    assert_eq!(now["JobVersion"], 1);
    assert_eq!(now["ClientStatus"], "running");
    assert_eq!(
        event_types(&now, "t")
            .iter()
            .filter(|t| *t == "Started")
            .count(),
        1
    );
    Ok(())
}

fn count_events(alloc: &Value, task: &str, kind: &str) -> usize {
    events(alloc, task)
        .iter()
        .filter(|e| e["Type"] == kind)
        .count()
}

#[tokio::test]
async fn lifecycle_tasks_run_in_nomad_s_order() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let ip = dev_ip_at(36);
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api) = dev_agent(&ip, &log).await?;
    let task = |name: &str, lifecycle: Value, script: &str| {
        json!({
            "Name": name, "Driver": "raw_exec", "KillTimeout": 1_000_000_000u64,
            "Lifecycle": lifecycle,
            "Config": {"command": "/bin/sh", "args": ["-c", script]},
            "Resources": {"CPU": 10, "MemoryMB": 10}
        })
    };
    let job = json!({
        "ID": "ordered", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [
            task("init", json!({"Hook": "prestart"}),
                 "sleep 1; echo ready > \"$NOMAD_ALLOC_DIR/data/ready\""),
            task("proxy", json!({"Hook": "prestart", "Sidecar": true}), "exec sleep 600"),
            task("main", Value::Null,
                 "cat \"$NOMAD_ALLOC_DIR/data/ready\" && exec sleep 600"),
            task("cleanup", json!({"Hook": "poststop"}),
                 "echo cleaned > \"$NOMAD_ALLOC_DIR/data/cleaned\"")
        ]}]
    });
    register(&api, job).await?;
    let alloc = wait_job_alloc(
        &api,
        "ordered",
        "the main task running",
        Duration::from_secs(30),
        |a| a["TaskStates"]["main"]["State"] == "running",
    )
    .await?;
    let id = alloc["ID"].as_str().unwrap_or_default().to_string();
    assert_eq!(alloc["TaskStates"]["init"]["State"], "dead");
    assert_eq!(alloc["TaskStates"]["init"]["Failed"], false);
    assert_eq!(alloc["TaskStates"]["proxy"]["State"], "running");
    assert_eq!(alloc["TaskStates"]["cleanup"]["State"], "pending");
    let init_done = event_time(&alloc, "init", "Terminated").unwrap_or(i64::MAX);
    let main_started = event_time(&alloc, "main", "Started").unwrap_or(0);
    assert!(
        main_started >= init_done,
        "the main task started before init ended"
    );
    let read = wait_for(
        Duration::from_secs(10),
        "the main task's output",
        || async {
            cat(&api, &id, "alloc/logs/main.stdout.0")
                .await
                .ok()
                .filter(|t| !t.is_empty())
        },
    )
    .await?;
    assert_eq!(read, "ready\n");

    // The main task restarted: the sidecar runs on, the prestart task does not run again.
    api.request::<Value, Value>(
        reqwest::Method::POST,
        &format!("/v1/client/allocation/{id}/restart"),
        Some(&json!({"TaskName": "main"})),
    )
    .await?;
    let restarted = wait_job_alloc(
        &api,
        "ordered",
        "the main task restarted",
        Duration::from_secs(30),
        |a| {
            a["TaskStates"]["main"]["Restarts"] == 1
                && a["TaskStates"]["main"]["State"] == "running"
        },
    )
    .await?;
    assert_eq!(count_events(&restarted, "proxy", "Started"), 1);
    assert_eq!(count_events(&restarted, "init", "Started"), 1);

    // Stopped: the main task, then the sidecar, then the poststop task.
    api.request::<(), Value>(reqwest::Method::DELETE, "/v1/job/ordered", None)
        .await?;
    let stopped = wait_job_alloc(
        &api,
        "ordered",
        "every task dead",
        Duration::from_secs(30),
        |a| {
            ["init", "proxy", "main", "cleanup"]
                .iter()
                .all(|t| a["TaskStates"][t]["State"] == "dead")
        },
    )
    .await?;
    let at = |task: &str, kind: &str| {
        event_time(&stopped, task, kind)
            .ok_or_else(|| anyhow::anyhow!("{task}: no {kind}: {:?}", event_types(&stopped, task)))
    };
    assert!(at("proxy", "Killing")? >= at("main", "Killed")?);
    assert!(at("cleanup", "Started")? >= at("proxy", "Killed")?);
    assert_eq!(stopped["TaskStates"]["cleanup"]["Failed"], false);
    let cleaned = cat(&api, &id, "alloc/data/cleaned").await?;
    assert_eq!(cleaned, "cleaned\n");
    Ok(())
}

#[tokio::test]
async fn secrets_are_listed_but_never_read_and_a_missing_file_is_a_bad_request(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let ip = dev_ip_at(33);
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api) = dev_agent(&ip, &log).await?;
    let script = "echo s3cret > \"$NOMAD_SECRETS_DIR/token\" && \
                  ln -s ../secrets/token \"$NOMAD_TASK_DIR/link\" && \
                  echo visible > \"$NOMAD_TASK_DIR/plain\" && \
                  echo \"$NOMAD_ALLOC_DIR $NOMAD_TASK_DIR\" && exec sleep 600";
    let job = json!({
        "ID": "secretive", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "raw_exec", "KillTimeout": 1_000_000_000u64,
            "Config": {"command": "/bin/sh", "args": ["-c", script]},
            "Resources": {"CPU": 10, "MemoryMB": 10}}]}]
    });
    register(&api, job).await?;
    let alloc = wait_job_alloc(
        &api,
        "secretive",
        "the task running",
        Duration::from_secs(30),
        |a| a["ClientStatus"] == "running",
    )
    .await?;
    let id = alloc["ID"].as_str().unwrap_or_default().to_string();
    let plain = wait_for(Duration::from_secs(10), "the task's files", || async {
        cat(&api, &id, "t/local/plain").await.ok()
    })
    .await?;
    assert_eq!(plain, "visible\n");

    // Nomad's layout, secrets readable by their owner only.
    let names = |v: Vec<Value>| -> BTreeSet<String> {
        v.iter()
            .filter_map(|f| f["Name"].as_str().map(str::to_string))
            .collect()
    };
    let root = names(ls(&api, &id, "/").await?);
    assert!(root.contains("alloc") && root.contains("t"), "{root:?}");
    let shared = names(ls(&api, &id, "alloc").await?);
    for part in ["data", "logs", "tmp"] {
        assert!(shared.contains(part), "{shared:?}");
    }
    let task = ls(&api, &id, "t").await?;
    let secrets = task
        .iter()
        .find(|f| f["Name"] == "secrets")
        .ok_or_else(|| anyhow::anyhow!("no secrets directory: {task:?}"))?;
    assert_eq!(secrets["FileMode"], "drwx------", "{secrets}");
    assert!(names(task.clone()).contains("local") && names(task).contains("tmp"));
    let out = api
        .request_text::<()>(
            reqwest::Method::GET,
            &format!("/v1/client/fs/logs/{id}?task=t&type=stdout&plain=true"),
            None,
        )
        .await?;
    assert!(
        out.contains(&format!("{id}/alloc ")),
        "NOMAD_ALLOC_DIR is alloc/: {out}"
    );
    assert!(
        out.trim_end().ends_with(&format!("{id}/t/local")),
        "NOMAD_TASK_DIR is local/: {out}"
    );

    // Listed, stat'ed, never read: not directly, not by offset, not through a link.
    let listed = names(ls(&api, &id, "t/secrets").await?);
    assert!(listed.contains("token"), "{listed:?}");
    let stat: Value = api
        .get(&format!("/v1/client/fs/stat/{id}?path=t/secrets/token"))
        .await?;
    assert_eq!(stat["Size"], 7, "{stat}");
    for path in ["t/secrets/token", "t/local/link", "T/SECRETS/token"] {
        let e = cat(&api, &id, path)
            .await
            .expect_err(&format!("{path} must not be read"));
        let text = e.to_string();
        assert!(
            text.contains("403") || text.contains("prohibited"),
            "{path}: {text}"
        );
        assert!(!text.contains("s3cret"), "{text}");
    }
    let e = api
        .request_text::<()>(
            reqwest::Method::GET,
            &format!("/v1/client/fs/readat/{id}?path=t/secrets/token&offset=0&limit=7"),
            None,
        )
        .await
        .expect_err("readat of a secret");
    assert!(!e.to_string().contains("s3cret"), "{e}");

    // A missing file: 400 where Nomad answers 400, 404 where it answers 404.
    let base = format!("http://{ip}:4646");
    let status = |path: String| {
        let url = format!("{base}{path}");
        async move {
            reqwest::get(url)
                .await
                .map(|r| r.status().as_u16())
                .unwrap_or(0)
        }
    };
    assert_eq!(
        status(format!("/v1/client/fs/stream/{id}?path=t/nothing")).await,
        400
    );
    assert_eq!(
        status(format!("/v1/client/fs/cat/{id}?path=t/nothing")).await,
        400
    );
    assert_eq!(
        status(format!("/v1/client/fs/stat/{id}?path=t/nothing")).await,
        404
    );
    assert_eq!(
        status(format!("/v1/client/fs/logs/{id}?task=nope&type=stdout")).await,
        400
    );
    assert_eq!(
        status(format!(
            "/v1/client/fs/logs/{id}?task=t&type=stdout&origin=middle"
        ))
        .await,
        400
    );

    // `alloc fs`, as Nomad's: a directory listed, a file printed, described, its end.
    let fs = |args: &[&str]| -> anyhow::Result<String> {
        let out = std::process::Command::new(teamster_cluster_tests::process::teamster_bin())
            .args(["alloc", "fs", &format!("-address={base}")])
            .args(args)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "alloc fs {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let short = &id[..8];
    let listed = fs(&[short, "t"])?;
    assert!(
        listed.starts_with("Mode") && listed.contains("secrets/"),
        "{listed}"
    );
    assert!(listed.contains("drwx------"), "{listed}");
    assert_eq!(fs(&[short, "t/local/plain"])?, "visible\n");
    let stat = fs(&["-stat", short, "t/local/plain"])?;
    assert!(
        stat.contains("text/plain") && stat.contains("8 B"),
        "{stat}"
    );
    assert_eq!(
        fs(&["-tail", "-c", "8", short, "t/local/plain"])?,
        "visible\n"
    );
    assert_eq!(fs(&["-tail", "-c", "4", short, "t/local/plain"])?, "ble\n");
    let refused = std::process::Command::new(teamster_cluster_tests::process::teamster_bin())
        .args([
            "alloc",
            "fs",
            &format!("-address={base}"),
            short,
            "t/secrets/token",
        ])
        .output()?;
    assert!(!refused.status.success());
    assert!(!String::from_utf8_lossy(&refused.stdout).contains("s3cret"));

    api.request::<(), Value>(reqwest::Method::DELETE, "/v1/job/secretive", None)
        .await?;
    Ok(())
}

/// A task that records its allocation in the shared `alloc/data/history` and its own
/// `local/seen`, then runs.
const RECORDER: &str = "echo $NOMAD_ALLOC_ID >> $NOMAD_ALLOC_DIR/data/history; \
     echo $NOMAD_ALLOC_ID >> $NOMAD_TASK_DIR/seen; exec sleep 600";

fn sticky_job(version: &str) -> Value {
    let group = |name: &str, sticky: bool| {
        json!({
            "Name": name, "Count": 1,
            "EphemeralDisk": {"SizeMB": 300, "Sticky": sticky},
            "Tasks": [{"Name": "t", "Driver": "raw_exec",
                       "Env": {"VERSION": version},
                       "Config": {"command": "/bin/sh", "args": ["-c", RECORDER]},
                       "Resources": {"CPU": 10, "MemoryMB": 10}}]
        })
    };
    json!({
        "ID": "sticky", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [group("keep", true), group("fresh", false)]
    })
}

/// The running allocation of `group` of the `sticky` job that is not `other`.
async fn running_in(api: &ApiClient, group: &str, other: Option<&str>) -> anyhow::Result<Value> {
    wait_for(
        Duration::from_secs(40),
        &format!("a running allocation of group {group}"),
        || async {
            job_allocs(api, "sticky").await.into_iter().find(|a| {
                a["TaskGroup"] == group
                    && a["ClientStatus"] == "running"
                    && a["ID"].as_str() != other
            })
        },
    )
    .await
}

#[tokio::test]
async fn a_sticky_disk_s_data_and_local_files_pass_to_its_replacement() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let ip = dev_ip_at(34);
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, api) = dev_agent(&ip, &log).await?;
    register(&api, sticky_job("1")).await?;
    let keep = running_in(&api, "keep", None).await?;
    let fresh = running_in(&api, "fresh", None).await?;
    let (keep1, fresh1) = (
        keep["ID"].as_str().unwrap_or_default().to_string(),
        fresh["ID"].as_str().unwrap_or_default().to_string(),
    );
    let history = |id: String| {
        let api = api.clone();
        async move { cat(&api, &id, "alloc/data/history").await.ok() }
    };
    wait_for(Duration::from_secs(10), "the first history", || {
        let h = history(keep1.clone());
        let want = format!("{keep1}\n");
        async move { (h.await? == want).then_some(()) }
    })
    .await?;

    // A destructive update: the sticky group's replacement starts with what its previous
    // allocation wrote, in alloc/data and in its task's local/; the other group's starts
    // empty.
    register(&api, sticky_job("2")).await?;
    let keep2 = running_in(&api, "keep", Some(&keep1)).await?;
    let fresh2 = running_in(&api, "fresh", Some(&fresh1)).await?;
    let keep2_id = keep2["ID"].as_str().unwrap_or_default().to_string();
    let fresh2_id = fresh2["ID"].as_str().unwrap_or_default().to_string();
    let full: Value = api.get(&format!("/v1/allocation/{keep2_id}")).await?;
    assert_eq!(full["PreviousAllocation"], keep1.as_str());
    let both = format!("{keep1}\n{keep2_id}\n");
    let kept = wait_for(Duration::from_secs(20), "the kept history", || {
        let h = history(keep2_id.clone());
        let both = both.clone();
        async move { (h.await? == both).then_some(()) }
    })
    .await;
    anyhow::ensure!(
        kept.is_ok(),
        "history of {keep2_id}: {:?}",
        history(keep2_id.clone()).await
    );
    assert_eq!(cat(&api, &keep2_id, "t/local/seen").await?, both);
    let only_new = format!("{fresh2_id}\n");
    wait_for(Duration::from_secs(20), "the fresh history", || {
        let h = history(fresh2_id.clone());
        let only_new = only_new.clone();
        async move { (h.await? == only_new).then_some(()) }
    })
    .await?;
    Ok(())
}

/// The `mover` job: one group with a sticky, migrating disk, placed on the node named
/// `node`, its task recording its allocation as [`RECORDER`] does.
fn mover_job(node: &str) -> Value {
    json!({
        "ID": "mover", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g", "Count": 1,
            "Constraints": [{"LTarget": "${node.unique.name}", "RTarget": node, "Operand": "="}],
            "EphemeralDisk": {"SizeMB": 300, "Sticky": true, "Migrate": true},
            "Tasks": [{"Name": "t", "Driver": "raw_exec",
                       "Config": {"command": "/bin/sh", "args": ["-c", RECORDER]},
                       "Resources": {"CPU": 10, "MemoryMB": 10}}]
        }]
    })
}

#[tokio::test]
async fn a_migrating_disk_follows_its_allocation_to_another_node() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    // ACLs on everywhere: the data moves on the servers' migrate token, not an ACL token.
    const ACL: &str = "\n[acl]\nenabled = true\n";
    let mut c = ProcessCluster::start(
        1,
        ClusterOptions {
            extra_toml: ACL.into(),
            ..ClusterOptions::default()
        },
    )?;
    let leader = c.wait_leader(Duration::from_secs(30)).await?;
    let anonymous = c.servers[leader].api();
    let root: Value = anonymous
        .request::<Value, Value>(reqwest::Method::POST, "/v1/acl/bootstrap", Some(&json!({})))
        .await?;
    let api = anonymous.clone().with_scope(teamster::api::RequestScope {
        token: root["SecretID"].as_str().map(str::to_string),
        ..Default::default()
    });
    let rpc = c.servers[leader].rpc_addr();
    let block = c.servers[0]
        .ip
        .rsplit_once('.')
        .expect("an IPv4 address")
        .0
        .to_string();
    let first = ClientProcess::start(
        c.dir(),
        "mig-a",
        &format!("{block}.41"),
        std::slice::from_ref(&rpc),
        ACL,
    )?;
    let second = ClientProcess::start(
        c.dir(),
        "mig-b",
        &format!("{block}.42"),
        std::slice::from_ref(&rpc),
        ACL,
    )?;
    // The client agents answer no anonymous call: their nodes are read from the servers.
    let node_of = |name: &'static str| {
        let api = api.clone();
        async move {
            wait_for(
                Duration::from_secs(20),
                &format!("node {name} ready"),
                || async {
                    let nodes: Vec<Value> = api.get("/v1/nodes").await.ok()?;
                    let n = nodes
                        .iter()
                        .find(|n| n["Name"] == name && n["Status"] == "ready")?;
                    n["ID"].as_str().map(str::to_string)
                },
            )
            .await
        }
    };
    let first_node = node_of("mig-a").await?;
    let second_node = node_of("mig-b").await?;

    register(&api, mover_job("mig-a")).await?;
    let running = |other: Option<String>| {
        let api = api.clone();
        async move {
            wait_for(
                Duration::from_secs(40),
                "a running mover allocation",
                || async {
                    job_allocs(&api, "mover").await.into_iter().find(|a| {
                        a["ClientStatus"] == "running" && a["ID"].as_str() != other.as_deref()
                    })
                },
            )
            .await
        }
    };
    let a1 = running(None).await?;
    let a1_id = a1["ID"].as_str().unwrap_or_default().to_string();
    assert_eq!(a1["NodeID"], first_node.as_str());
    wait_for(Duration::from_secs(10), "the first history", || async {
        (cat(&api, &a1_id, "alloc/data/history").await.ok()? == format!("{a1_id}\n")).then_some(())
    })
    .await?;

    // Moved to the other node: the replacement starts with the data its predecessor wrote
    // there, fetched from the first node's agent with the servers' migrate token.
    register(&api, mover_job("mig-b")).await?;
    let a2 = running(Some(a1_id.clone())).await?;
    let a2_id = a2["ID"].as_str().unwrap_or_default().to_string();
    assert_eq!(a2["NodeID"], second_node.as_str());
    let both = format!("{a1_id}\n{a2_id}\n");
    let moved = wait_for(Duration::from_secs(20), "the migrated history", || async {
        (cat(&api, &a2_id, "alloc/data/history").await.ok()? == both).then_some(())
    })
    .await;
    anyhow::ensure!(
        moved.is_ok(),
        "history of {a2_id}: {:?}\nsecond client:\n{}",
        cat(&api, &a2_id, "alloc/data/history").await,
        second.log_tail(40)
    );
    assert_eq!(cat(&api, &a2_id, "t/local/seen").await?, both);

    // Without the token (or with another allocation's), the first node gives nothing.
    let snapshot = format!(
        "http://{}:4646/v1/client/allocation/{a1_id}/snapshot",
        first.ip
    );
    let http = reqwest::Client::new();
    let refused = http.get(&snapshot).send().await?;
    assert_eq!(refused.status(), reqwest::StatusCode::FORBIDDEN);
    let forged = http
        .get(&snapshot)
        .header("X-Nomad-Migrate-Token", "00".repeat(32))
        .send()
        .await?;
    assert_eq!(forged.status(), reqwest::StatusCode::FORBIDDEN);
    Ok(())
}
