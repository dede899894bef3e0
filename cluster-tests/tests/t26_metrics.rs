//! Issue 48: a real Prometheus (Debian's package) scrapes a three-server cluster and a
//! client agent, and finds every Nomad metric name `docs/operations.md` lists as one a
//! standard Nomad dashboard queries; `promtool check metrics` finds nothing wrong with
//! teamster's own names, and about Nomad's only what Nomad's own names break.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use teamster_cluster_tests::client_process::{wait_node_status, ClientProcess};
use teamster_cluster_tests::packages::{find_or_install, skip_or_fail};
use teamster_cluster_tests::process::{ClusterOptions, ProcessCluster};
use teamster_cluster_tests::wait_for;

const PROMETHEUS: &str = "/usr/bin/prometheus";
const PROMTOOL: &str = "/usr/bin/promtool";

/// The Nomad names `docs/operations.md` lists between its markers.
fn documented_names() -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/operations.md"
    ))
    .expect("docs/operations.md");
    let begin = doc
        .find("<!-- nomad-metric-names: begin -->")
        .expect("the begin marker");
    let end = doc
        .find("<!-- nomad-metric-names: end -->")
        .expect("the end marker");
    let names: Vec<String> = doc[begin..end]
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|n| n.starts_with("nomad_"))
        .map(str::to_string)
        .collect();
    assert!(
        names.len() > 50,
        "too few names found in the list: {names:?}"
    );
    names
}

/// Prometheus, killed when dropped.
struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What `promtool check metrics` says of `text`: its problem lines.
fn promtool(text: &str) -> anyhow::Result<Vec<String>> {
    use std::io::Write;
    let mut child = Command::new(PROMTOOL)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())?;
    let out = child.wait_with_output()?;
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(all
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect())
}

/// The problems Nomad's own names have in Prometheus's rules (see docs/operations.md).
fn nomad_s_own(problem: &str) -> bool {
    problem.starts_with("nomad_")
        && [
            "should be written in 'snake_case' not 'camelCase'",
            "counter metrics should have \"_total\" suffix",
            "non-counter metrics should not have \"_total\" suffix",
            "metric name should not include type 'summary'",
        ]
        .iter()
        .any(|rule| problem.contains(rule))
}

/// GET `url` (with `query`) as JSON.
async fn get_json(
    http: &reqwest::Client,
    url: &str,
    query: &[(&str, &str)],
) -> anyhow::Result<Value> {
    Ok(http.get(url).query(query).send().await?.json().await?)
}

/// The samples Prometheus answers `query` with now.
async fn prom_query(http: &reqwest::Client, prom: &str, query: &str) -> anyhow::Result<Vec<Value>> {
    let v = get_json(http, &format!("{prom}/api/v1/query"), &[("query", query)]).await?;
    Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
}

#[tokio::test]
async fn prometheus_scrapes_the_cluster_and_finds_nomad_s_metric_names() -> anyhow::Result<()> {
    let installed =
        tokio::task::spawn_blocking(|| find_or_install(&[PROMETHEUS, PROMTOOL], &["prometheus"]))
            .await?;
    if let Err(why) = installed {
        return skip_or_fail("t26_metrics", &format!("no Prometheus: {why}"));
    }
    let telemetry = "[telemetry]\npublish_node_metrics = true\npublish_allocation_metrics = true\n";
    let mut c = ProcessCluster::start(
        3,
        ClusterOptions {
            extra_toml: telemetry.into(),
            ..ClusterOptions::default()
        },
    )?;
    let leader = c.wait_leader(Duration::from_secs(30)).await?;
    let (block, _) = c.servers[0].ip.rsplit_once('.').expect("an IPv4 address");
    let block = block.to_string();
    let servers: Vec<String> = c.servers.iter().map(|s| s.rpc_addr()).collect();
    let client = ClientProcess::start(
        c.dir(),
        "client-1",
        &format!("{block}.101"),
        &servers,
        &format!("drivers = [\"raw_exec\"]\n{telemetry}disable_hostname = true\n"),
    )?;
    let api = c.servers[leader].api();
    let node_id = wait_for(Duration::from_secs(30), "the client to register", || {
        client.node_id()
    })
    .await?;
    wait_node_status(&api, &node_id, "ready", Duration::from_secs(30)).await?;

    // A service job whose task runs: plans, a scheduler run, a job summary, task figures.
    let job = serde_json::json!({"Job": {
        "ID": "metrics", "Name": "metrics", "Type": "service", "Datacenters": ["*"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/sh", "args": ["-c", "exec sleep 600"]},
            "Resources": {"CPU": 100, "MemoryMB": 64}
        }]}]
    }});
    let _: Value = api
        .request(reqwest::Method::POST, "/v1/jobs", Some(&job))
        .await?;
    wait_for(Duration::from_secs(60), "the task running", || async {
        let allocs: Vec<Value> = api.get("/v1/job/metrics/allocations").await.ok()?;
        allocs
            .iter()
            .any(|a| a["ClientStatus"] == "running")
            .then_some(())
    })
    .await?;

    // Prometheus scrapes every agent each second.
    let targets: Vec<String> = c
        .servers
        .iter()
        .map(|s| s.http_addr().trim_start_matches("http://").to_string())
        .chain([format!("{}:4646", client.ip)])
        .collect();
    let tsdb = c.dir().join("prometheus-data");
    let config = c.dir().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
             scrape_configs:\n  - job_name: teamster\n    metrics_path: /v1/metrics\n\
             \x20   params:\n      format: [prometheus]\n    static_configs:\n\
             \x20     - targets: [{}]\n",
            targets
                .iter()
                .map(|t| format!("{t:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    )?;
    let listen = format!("{block}.150:9090");
    let log = std::fs::File::create(c.dir().join("prometheus.log"))?;
    let _prometheus = Prometheus(
        Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", tsdb.display()))
            .arg(format!("--web.listen-address={listen}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?,
    );
    let http = reqwest::Client::new();
    let prom = format!("http://{listen}");
    let log_of = || std::fs::read_to_string(c.dir().join("prometheus.log")).unwrap_or_default();

    // Every target is scraped without error.
    let health = wait_for(Duration::from_secs(60), "every target up", || async {
        let v = get_json(&http, &format!("{prom}/api/v1/targets"), &[])
            .await
            .ok()?;
        let active = v["data"]["activeTargets"].as_array()?.clone();
        (active.len() == targets.len() && active.iter().all(|t| t["health"] == "up"))
            .then_some(active)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\nprometheus log:\n{}", log_of()))?;
    for t in &health {
        assert_eq!(t["lastError"], "", "{t}");
    }

    // Every documented name has samples in Prometheus.
    let names = documented_names();
    let missing = std::sync::Mutex::new(names.clone());
    let waited = wait_for(Duration::from_secs(60), "every documented name", || async {
        let mut still = Vec::new();
        for name in &names {
            if prom_query(&http, &prom, name).await.ok()?.is_empty() {
                still.push(name.clone());
            }
        }
        let done = still.is_empty();
        *missing.lock().unwrap() = still;
        done.then_some(())
    })
    .await;
    if waited.is_err() {
        anyhow::bail!(
            "no samples in Prometheus for: {:?}",
            missing.lock().unwrap()
        );
    }

    // Values that must be right, through Prometheus.
    let query = |q: &'static str| prom_query(&http, &prom, q);
    let running =
        query("nomad_nomad_job_summary_running{exported_job=\"metrics\",task_group=\"g\"}").await?;
    assert_eq!(
        running.len(),
        1,
        "only the leader publishes job summaries: {running:?}"
    );
    assert_eq!(running[0]["value"][1], "1", "{running:?}");
    let allocated =
        query("nomad_client_allocs_memory_allocated{exported_job=\"metrics\",task=\"t\"}").await?;
    assert_eq!(allocated.len(), 1, "{allocated:?}");
    assert_eq!(
        allocated[0]["value"][1],
        (64u64 << 20).to_string(),
        "{allocated:?}"
    );
    let rss = query("nomad_client_allocs_memory_rss{exported_job=\"metrics\",task=\"t\"}").await?;
    let rss: f64 = rss[0]["value"][1].as_str().unwrap_or("0").parse()?;
    assert!(rss > 0.0, "the sleeping task has a resident set");
    let contact = query("nomad_raft_leader_lastContact_count").await?;
    assert_eq!(
        contact.len(),
        1,
        "only the leader samples last contact: {contact:?}"
    );
    let cpu = query("nomad_client_unallocated_cpu + nomad_client_allocated_cpu").await?;
    assert_eq!(cpu.len(), 1, "{cpu:?}");

    // promtool: nothing about teamster's names; about Nomad's, only Nomad's own breaches.
    for t in &targets {
        let text = http
            .get(format!("http://{t}/v1/metrics?format=prometheus"))
            .send()
            .await?
            .text()
            .await?;
        let problems = promtool(&text)?;
        let ours: Vec<&String> = problems.iter().filter(|p| !nomad_s_own(p)).collect();
        assert!(ours.is_empty(), "promtool on {t}: {ours:?}");
        assert!(text.contains("# HELP teamster_rpc_requests_total "), "{t}");
    }
    // Nomad's names carry the host label on the servers (the recorder's and the scrape's
    // families alike) and none on the client, whose `disable_hostname` is set.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")?;
    let label = format!("host=\"{}\"", host.trim());
    let s_text = http
        .get(format!(
            "{}/v1/metrics?format=prometheus",
            c.servers[leader].http_addr()
        ))
        .send()
        .await?
        .text()
        .await?;
    for name in [
        "nomad_raft_commitTime_count",
        "nomad_nomad_job_status_running",
    ] {
        let line = s_text
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} on the leader"));
        assert!(line.contains(&label), "{line}");
    }
    let c_text = http
        .get(format!(
            "http://{}:4646/v1/metrics?format=prometheus",
            client.ip
        ))
        .send()
        .await?
        .text()
        .await?;
    let labelled: Vec<&str> = c_text
        .lines()
        .filter(|l| l.starts_with("nomad_") && l.contains("host="))
        .collect();
    assert!(labelled.is_empty(), "disable_hostname: {labelled:?}");
    assert!(
        c_text.contains("nomad_client_allocs_memory_rss{"),
        "{c_text}"
    );
    drop(c);
    Ok(())
}
