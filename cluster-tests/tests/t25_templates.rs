//! Templates (issue 49, part 3) with real `raw_exec` tasks, on a dev agent and on three
//! servers with ACLs on and a separate client:
//!
//! - a task whose templates read a variable (`nomadVar`) and another job's service
//!   (`nomadService`) into a config file and, with `env = true`, into its environment waits
//!   with Nomad's `Missing: nomad.var.block(…)` event until the variable exists, then starts
//!   with the rendered values;
//! - two quick writes of the variable re-render it and restart the task exactly once, with
//!   the last values (the changes settle within the template's `wait`);
//! - with ACLs, a task of another job, whose identity may not read that variable, stays
//!   pending with the same `Missing` event;
//! - a template that does not parse is refused at submit with a 400 naming the problem;
//! - an allocation's three templated tasks wait on one blocking query, and a change of one
//!   task's variable restarts that task only;
//! - Variables' locks (acquire, renew, release, a real lapse) on a dev agent, and a
//!   workload identity with a `ttl` renewed before it expires.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use teamster_cluster_tests::client_process::{wait_node_status, ClientProcess};
use teamster_cluster_tests::dev::{dev_agent, dev_ip_at};
use teamster_cluster_tests::process::{ClusterOptions, ProcessCluster};
use teamster_cluster_tests::wait_for;

async fn call(
    method: Method,
    url: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = reqwest::Client::new().request(method, url);
    if let Some(t) = token {
        req = req.header("X-Nomad-Token", t);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    match req.send().await {
        Ok(resp) => {
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
            (status, value)
        }
        Err(e) => (StatusCode::BAD_GATEWAY, Value::String(e.to_string())),
    }
}

/// A `raw_exec` job of one task running `script`, with `templates`, and `services`.
fn job(id: &str, script: &str, templates: Value, services: Value) -> Value {
    json!({ "Job": {
        "ID": id, "Type": "service", "Datacenters": ["*"],
        "TaskGroups": [{
            "Name": "g", "Count": 1,
            "Networks": [{ "DynamicPorts": [{ "Label": "http" }] }],
            "Services": services,
            "Tasks": [{
                "Name": "t", "Driver": "raw_exec",
                "Config": { "command": "/bin/sh", "args": ["-c", script] },
                "Resources": { "CPU": 20, "MemoryMB": 16 },
                "KillTimeout": 1_000_000_000u64,
                "Templates": templates
            }]
        }]
    }})
}

/// The templates of the `tpl` job: a config file from a variable and a service, and the
/// environment from the variable; restarts on change, settling for 1 s (at most 3 s).
fn templates(var_path: &str) -> Value {
    json!([
        {
            "EmbeddedTmpl": format!(
                "{{{{ with nomadVar \"{var_path}\" }}}}password={{{{ .password }}}}{{{{ end }}}}\n\
                 {{{{ range nomadService \"backend-svc\" }}}}backend={{{{ .Address }}}}:{{{{ .Port }}}}{{{{ end }}}}\n"
            ),
            "DestPath": "local/app.conf",
            "ChangeMode": "restart",
            "Splay": 0,
            "Wait": { "Min": 1_000_000_000u64, "Max": 3_000_000_000u64 }
        },
        {
            "EmbeddedTmpl": format!(
                "APP_COLOR={{{{ with nomadVar \"{var_path}\" }}}}{{{{ .color }}}}{{{{ end }}}}\n"
            ),
            "DestPath": "local/app.env",
            "Envvars": true
        }
    ])
}

/// Each start appends a line: the color from its environment and the rendered config.
const RECORD_STARTS: &str =
    "echo \"start $APP_COLOR $(tr '\\n' ' ' < local/app.conf)\" >> local/starts; exec sleep 600";

/// What one API (a dev agent's, or a server's with a token) is asked.
struct Api {
    base: String,
    token: Option<String>,
}

impl Api {
    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        call(
            method,
            &format!("{}{path}", self.base),
            self.token.as_deref(),
            body,
        )
        .await
    }

    /// `job`'s allocation (the first), once it has one.
    async fn alloc(&self, job: &str) -> anyhow::Result<Value> {
        wait_for(
            Duration::from_secs(60),
            &format!("{job} placed"),
            || async {
                let (_, allocs) = self
                    .call(Method::GET, &format!("/v1/job/{job}/allocations"), None)
                    .await;
                let id = allocs.as_array()?.first()?["ID"].as_str()?.to_string();
                let (s, a) = self
                    .call(Method::GET, &format!("/v1/allocation/{id}"), None)
                    .await;
                (s == StatusCode::OK).then_some(a)
            },
        )
        .await
    }

    async fn alloc_by_id(&self, id: &str) -> Option<Value> {
        let (s, a) = self
            .call(Method::GET, &format!("/v1/allocation/{id}"), None)
            .await;
        (s == StatusCode::OK).then_some(a)
    }

    /// The task's file `local/<file>`, once it is not empty.
    async fn read(&self, alloc: &str, file: &str) -> Option<String> {
        let (s, v) = self
            .call(
                Method::GET,
                &format!("/v1/client/fs/cat/{alloc}?path=t/local/{file}"),
                None,
            )
            .await;
        (s == StatusCode::OK)
            .then(|| v.as_str().map(str::to_string))
            .flatten()
            .filter(|t| !t.trim().is_empty())
    }

    async fn put_var(&self, path: &str, items: Value) {
        let (s, v) = self
            .call(
                Method::PUT,
                &format!("/v1/var/{path}"),
                Some(json!({ "Items": items })),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }
}

/// The task's events' display messages.
fn events(alloc: &Value) -> Vec<String> {
    alloc["TaskStates"]["t"]["Events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["DisplayMessage"].as_str().map(str::to_string))
        .collect()
}

/// The scenario both setups run: missing, rendered, re-rendered once; `diag` is the agent
/// or client log for failures.
async fn renders_waits_and_restarts_once(
    api: &Api,
    diag: &dyn Fn() -> String,
) -> anyhow::Result<()> {
    // The service a template reads, from another job.
    let (s, v) = api
        .call(
            Method::PUT,
            "/v1/jobs",
            Some(job(
                "backend",
                "exec sleep 600",
                json!([]),
                json!([{ "Name": "backend-svc", "PortLabel": "http", "Provider": "nomad" }]),
            )),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let backend_port = wait_for(
        Duration::from_secs(60),
        "backend-svc registered",
        || async {
            let (_, regs) = api.call(Method::GET, "/v1/service/backend-svc", None).await;
            regs.as_array()?.first()?["Port"].as_u64()
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", diag()))?;

    // A template that does not parse is refused at submit.
    let (s, v) = api
        .call(
            Method::PUT,
            "/v1/jobs",
            Some(job(
                "broken",
                "exec sleep 600",
                json!([{ "EmbeddedTmpl": "{{ nosuch }}", "DestPath": "local/x" }]),
                json!([]),
            )),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v.to_string()
            .contains("function \\\"nosuch\\\" not defined"),
        "{v}"
    );

    // Before the variable exists, the task waits and says for what.
    let (s, v) = api
        .call(
            Method::PUT,
            "/v1/jobs",
            Some(job(
                "tpl",
                RECORD_STARTS,
                templates("nomad/jobs/tpl"),
                json!([]),
            )),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let alloc = api.alloc("tpl").await?;
    let alloc_id = alloc["ID"].as_str().unwrap_or_default().to_string();
    let missing = "Missing: nomad.var.block(nomad/jobs/tpl@default.global)";
    wait_for(Duration::from_secs(30), "the Missing event", || async {
        let a = api.alloc_by_id(&alloc_id).await?;
        events(&a).iter().any(|e| e == missing).then_some(())
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", diag()))?;
    let a = api.alloc_by_id(&alloc_id).await.unwrap_or_default();
    assert_eq!(a["TaskStates"]["t"]["State"], "pending", "{a}");

    // The variable appears: the task starts with it in its file and environment.
    api.put_var(
        "nomad/jobs/tpl",
        json!({ "password": "p1", "color": "blue" }),
    )
    .await;
    let starts = wait_for(Duration::from_secs(30), "the first start", || {
        api.read(&alloc_id, "starts")
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", diag()))?;
    let first = "start blue password=p1 backend=";
    assert!(starts.starts_with(first), "{starts}");
    assert!(
        starts.trim_end().ends_with(&format!(":{backend_port}")),
        "{starts}"
    );

    // Two quick writes: one render with the last values, one restart.
    api.put_var(
        "nomad/jobs/tpl",
        json!({ "password": "p2", "color": "green" }),
    )
    .await;
    api.put_var(
        "nomad/jobs/tpl",
        json!({ "password": "p3", "color": "red" }),
    )
    .await;
    let starts = wait_for(Duration::from_secs(30), "the restart", || async {
        let s = api.read(&alloc_id, "starts").await?;
        (s.lines().count() >= 2).then_some(s)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", diag()))?;
    let second = starts.lines().nth(1).unwrap_or_default();
    assert!(
        second.starts_with("start red password=p3 backend="),
        "{starts}"
    );
    // A quiet period longer than the settle window: no second restart comes.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let a = api.alloc_by_id(&alloc_id).await.unwrap_or_default();
    let starts = api.read(&alloc_id, "starts").await.unwrap_or_default();
    assert_eq!(starts.lines().count(), 2, "{starts}");
    assert_eq!(a["TaskStates"]["t"]["Restarts"], 1, "{a}");
    let restarts: Vec<String> = events(&a)
        .into_iter()
        .filter(|e| e == "Template with change_mode restart re-rendered")
        .collect();
    assert_eq!(restarts.len(), 1, "{:?}", events(&a));
    Ok(())
}

/// A gauge of the agent's Prometheus metrics.
async fn gauge(api: &Api, name: &str) -> u64 {
    let (_, text) = api
        .call(Method::GET, "/v1/metrics?format=prometheus", None)
        .await;
    teamster_cluster_tests::loadgen::prom_sum(text.as_str().unwrap_or_default(), name)
}

/// An allocation of three tasks, each with a template reading its own variable, waits on
/// one blocking query (one feed, three subscriptions); a change of one task's variable
/// re-renders and restarts that task only.
async fn one_query_per_allocation(api: &Api, diag: &dyn Fn() -> String) -> anyhow::Result<()> {
    let feeds_before = gauge(api, "teamster_client_template_feeds").await;
    let subs_before = gauge(api, "teamster_client_template_subscriptions").await;
    let tasks: Vec<Value> = ["a", "b", "c"]
        .iter()
        .map(|t| {
            json!({
                "Name": t, "Driver": "raw_exec",
                "Config": { "command": "/bin/sh", "args": ["-c",
                    "echo \"start $(cat local/v)\" >> local/starts; exec sleep 600"] },
                "Resources": { "CPU": 20, "MemoryMB": 16 },
                "KillTimeout": 1_000_000_000u64,
                "Templates": [{
                    "EmbeddedTmpl": format!(
                        "{{{{ with nomadVar \"nomad/jobs/multi/g/{t}\" }}}}{{{{ .v }}}}{{{{ end }}}}"
                    ),
                    "DestPath": "local/v",
                    "ChangeMode": "restart",
                    "Splay": 0,
                    "Wait": { "Min": 200_000_000u64, "Max": 1_000_000_000u64 }
                }]
            })
        })
        .collect();
    for t in ["a", "b", "c"] {
        api.put_var(
            &format!("nomad/jobs/multi/g/{t}"),
            json!({ "v": format!("{t}1") }),
        )
        .await;
    }
    let (s, v) = api
        .call(
            Method::PUT,
            "/v1/jobs",
            Some(json!({ "Job": {
                "ID": "multi", "Type": "service", "Datacenters": ["*"],
                "TaskGroups": [{ "Name": "g", "Count": 1, "Tasks": tasks }]
            }})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let alloc = api.alloc("multi").await?;
    let alloc_id = alloc["ID"].as_str().unwrap_or_default().to_string();
    let cat = |task: &'static str| {
        let alloc_id = alloc_id.clone();
        async move {
            let (s, v) = api
                .call(
                    Method::GET,
                    &format!("/v1/client/fs/cat/{alloc_id}?path={task}/local/starts"),
                    None,
                )
                .await;
            (s == StatusCode::OK)
                .then(|| v.as_str().map(str::to_string))
                .flatten()
        }
    };
    for t in ["a", "b", "c"] {
        let starts = wait_for(Duration::from_secs(30), "every task started", || cat(t))
            .await
            .map_err(|e| anyhow::anyhow!("{e}\n{}", diag()))?;
        assert_eq!(starts, format!("start {t}1\n"));
    }
    wait_for(
        Duration::from_secs(30),
        "three tasks waiting on one query",
        || async {
            let feeds = gauge(api, "teamster_client_template_feeds").await;
            let subs = gauge(api, "teamster_client_template_subscriptions").await;
            (feeds == feeds_before + 1 && subs == subs_before + 3).then_some(())
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", diag()))?;

    api.put_var("nomad/jobs/multi/g/b", json!({ "v": "b2" }))
        .await;
    wait_for(Duration::from_secs(30), "b restarted", || async {
        cat("b").await.filter(|s| s == "start b1\nstart b2\n")
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", diag()))?;
    // Past the settle window: a and c neither re-rendered nor restarted.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(cat("a").await.as_deref(), Some("start a1\n"));
    assert_eq!(cat("c").await.as_deref(), Some("start c1\n"));
    let a = api.alloc_by_id(&alloc_id).await.unwrap_or_default();
    for (t, restarts) in [("a", 0), ("b", 1), ("c", 0)] {
        assert_eq!(a["TaskStates"][t]["Restarts"], restarts, "{t}: {a}");
    }

    // Stopped: the query ends with the allocation.
    let (s, v) = api.call(Method::DELETE, "/v1/job/multi", None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    wait_for(Duration::from_secs(30), "the feed ended", || async {
        let feeds = gauge(api, "teamster_client_template_feeds").await;
        let subs = gauge(api, "teamster_client_template_subscriptions").await;
        (feeds == feeds_before && subs == subs_before).then_some(())
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", diag()))?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templates_render_variables_and_services_on_a_dev_agent() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let ip = dev_ip_at(25);
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, _) = dev_agent(&ip, &log).await?;
    let api = Api {
        base: format!("http://{ip}:4646"),
        token: None,
    };
    let diag = || {
        let text = std::fs::read_to_string(log.path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    };
    renders_waits_and_restarts_once(&api, &diag).await?;
    one_query_per_allocation(&api, &diag).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templates_read_with_the_tasks_identity_on_three_servers() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let mut c = ProcessCluster::start(
        3,
        ClusterOptions {
            extra_toml: "\n[acl]\nenabled = true\n".into(),
            ..ClusterOptions::default()
        },
    )?;
    let leader = c.wait_leader(Duration::from_secs(30)).await?;
    let base = c.servers[leader].http_addr();
    let (status, boot) = call(Method::PUT, &format!("{base}/v1/acl/bootstrap"), None, None).await;
    assert_eq!(status, StatusCode::OK, "{boot}");
    let root = boot["SecretID"].as_str().unwrap_or_default().to_string();
    let client_ip = {
        let (block, _) = c.servers[0].ip.rsplit_once('.').expect("IPv4");
        format!("{block}.78")
    };
    let rpcs: Vec<String> = c.servers.iter().map(|s| s.rpc_addr()).collect();
    let mut client = ClientProcess::start(
        c.dir(),
        "tpl-client",
        &client_ip,
        &rpcs,
        "\n[acl]\nenabled = true\n",
    )?;
    let root_api = c.servers[leader]
        .api()
        .with_scope(teamster::api::RequestScope {
            token: Some(root.clone()),
            ..Default::default()
        });
    let node_id = wait_for(Duration::from_secs(20), "the node registered", || {
        client.node_id_via(&root_api)
    })
    .await?;
    wait_node_status(&root_api, &node_id, "ready", Duration::from_secs(20)).await?;
    // Through a follower: reads and writes are forwarded.
    let follower = (leader + 1) % 3;
    let api = Api {
        base: c.servers[follower].http_addr(),
        token: Some(root.clone()),
    };
    let diag = || client.log_tail(60);
    renders_waits_and_restarts_once(&api, &diag).await?;

    // A client restart finds the task running: its templates render to the same files, so
    // nothing is restarted; the watcher takes over again and acts on the next change.
    let alloc_id = api.alloc("tpl").await?["ID"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    client.restart()?;
    wait_for(
        Duration::from_secs(30),
        "the restarted client's agent",
        || client.node_id_via(&root_api),
    )
    .await?;
    wait_node_status(&root_api, &node_id, "ready", Duration::from_secs(30)).await?;
    // A quiet window longer than the settle window: no restart comes from the restart.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let starts = api.read(&alloc_id, "starts").await.unwrap_or_default();
    assert_eq!(
        starts.lines().count(),
        2,
        "a client restart re-triggered: {starts}"
    );
    api.put_var(
        "nomad/jobs/tpl",
        json!({ "password": "p4", "color": "purple" }),
    )
    .await;
    let starts = wait_for(
        Duration::from_secs(30),
        "the restart after the client's",
        || async {
            let s = api.read(&alloc_id, "starts").await?;
            (s.lines().count() >= 3).then_some(s)
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", client.log_tail(60)))?;
    assert!(
        starts
            .lines()
            .nth(2)
            .unwrap_or_default()
            .starts_with("start purple password=p4"),
        "{starts}"
    );

    // Another job's task may not read `nomad/jobs/tpl`: it waits, never starts.
    let (s, v) = api
        .call(
            Method::PUT,
            "/v1/jobs",
            Some(job(
                "intruder",
                RECORD_STARTS,
                templates("nomad/jobs/tpl"),
                json!([]),
            )),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let alloc = api.alloc("intruder").await?;
    let alloc_id = alloc["ID"].as_str().unwrap_or_default().to_string();
    let missing = "Missing: nomad.var.block(nomad/jobs/tpl@default.global)";
    wait_for(
        Duration::from_secs(30),
        "the intruder's Missing event",
        || async {
            let a = api.alloc_by_id(&alloc_id).await?;
            events(&a).iter().any(|e| e == missing).then_some(())
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", client.log_tail(60)))?;
    // The servers answered the read: denied (the client says so), and it stays pending.
    wait_for(Duration::from_secs(30), "the denied read", || async {
        client
            .log_tail(400)
            .contains("the task's identity may not read what its templates read")
            .then_some(())
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", client.log_tail(60)))?;
    let a = api.alloc_by_id(&alloc_id).await.unwrap_or_default();
    assert_eq!(a["TaskStates"]["t"]["State"], "pending", "{a}");
    assert!(api.read(&alloc_id, "starts").await.is_none());
    // Stopping it while it waits kills it before it started.
    let (s, v) = api.call(Method::DELETE, "/v1/job/intruder", None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    wait_for(
        Duration::from_secs(30),
        "the waiting task killed",
        || async {
            let a = api.alloc_by_id(&alloc_id).await?;
            (a["TaskStates"]["t"]["State"] == "dead"
                && events(&a)
                    .iter()
                    .any(|e| e == "Task killed before it started"))
            .then_some(())
        },
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", client.log_tail(60)))?;
    Ok(())
}

/// Nomad 1.7's variable locks on a dev agent: acquire (the ID only to the holder), a second
/// acquire and writes without the ID refused, the holder's write, renew, release, and a
/// lock that is not renewed released by the leader two TTLs and its delay later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variable_locks_are_held_renewed_released_and_lapse() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let ip = dev_ip_at(26);
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, _) = dev_agent(&ip, &log).await?;
    let api = Api {
        base: format!("http://{ip}:4646"),
        token: None,
    };
    let put = |q: &str, body: Value| {
        let api = &api;
        let path = format!("/v1/var/app/leader{q}");
        async move { api.call(Method::PUT, &path, Some(body)).await }
    };
    // Nomad's refusals before anything is written.
    let (s, v) = put("?lock-acquire&lock-release", json!({})).await;
    assert_eq!(
        (s, v.as_str()),
        (StatusCode::BAD_REQUEST, Some("multiple lock operations"))
    );
    let (s, v) = put("?lock-acquire&cas=0", json!({})).await;
    assert_eq!(
        (s, v.as_str()),
        (
            StatusCode::BAD_REQUEST,
            Some("CAS can't be used with lock operations")
        )
    );
    let (s, v) = put("?lock-acquire", json!({ "Lock": { "TTL": "5s" } })).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(
        v.to_string()
            .contains("TTL must be between 10 seconds and 24 hours"),
        "{v}"
    );

    // Acquired: the holder gets the ID.
    let (s, v) = put(
        "?lock-acquire",
        json!({ "Items": { "who": "a" }, "Lock": { "TTL": "10s", "LockDelay": "1s" } }),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let id = v["Lock"]["ID"].as_str().unwrap_or_default().to_string();
    assert!(!id.is_empty(), "{v}");
    assert_eq!(
        (v["Lock"]["TTL"].as_str(), v["Lock"]["LockDelay"].as_str()),
        (Some("10s"), Some("1s"))
    );
    assert_eq!(v["Items"]["who"], "a");
    let (s, v) = put("?lock-acquire", json!({ "Items": { "who": "b" } })).await;
    assert_eq!(
        (s, v.as_str()),
        (StatusCode::CONFLICT, Some("variable already locked"))
    );
    let (s, v) = put("", json!({ "Items": { "who": "c" } })).await;
    assert_eq!(
        (s, v.as_str()),
        (
            StatusCode::CONFLICT,
            Some("attempting to modify locked variable")
        )
    );
    let (s, v) = api.call(Method::DELETE, "/v1/var/app/leader", None).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    let (s, v) = put(
        "",
        json!({ "Items": { "who": "a2" }, "Lock": { "ID": id } }),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "the holder writes: {v}");
    let (s, v) = put("?lock-renew", json!({ "Lock": { "ID": "someone-else" } })).await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    let (s, v) = put("?lock-renew", json!({ "Lock": { "ID": id } })).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["Lock"]["ID"], id.as_str());
    let (s, v) = put("?lock-release", json!({ "Lock": { "ID": id } })).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v.get("Lock").is_none(), "{v}");
    assert_eq!(v["Items"]["who"], "a2", "a release keeps the items");
    let (s, v) = put("?lock-release", json!({ "Lock": { "ID": id } })).await;
    assert_eq!(
        (s, v.as_str()),
        (StatusCode::CONFLICT, Some("variable doesn't hold a lock"))
    );
    // An acquire without items keeps the variable's; one without an ID gets a new one,
    // one with an ID holds the lock with it (as Nomad); a long ID is refused.
    let (s, v) = put("?lock-acquire", json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["Items"]["who"], "a2", "{v}");
    let fresh = v["Lock"]["ID"].as_str().unwrap_or_default().to_string();
    assert!(!fresh.is_empty() && fresh != id, "{v}");
    let (s, v) = put("?lock-release", json!({ "Lock": { "ID": fresh } })).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, v) = put(
        "?lock-acquire",
        json!({ "Lock": { "ID": "x".repeat(129) } }),
    )
    .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert!(v.to_string().contains("Lock.ID"), "{v}");
    let again = "chosen-by-the-caller";
    let (s, v) = put("?lock-acquire", json!({ "Lock": { "ID": again } })).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["Lock"]["ID"], again, "{v}");
    let (s, v) = put("?lock-acquire", json!({ "Lock": { "ID": again } })).await;
    assert_eq!(
        (s, v.as_str()),
        (StatusCode::CONFLICT, Some("variable already locked"))
    );
    let (s, v) = put("?lock-release", json!({ "Lock": { "ID": again } })).await;
    assert_eq!(s, StatusCode::OK, "{v}");

    // Not renewed: it lapses after two TTLs and, its delay later, the leader releases it.
    let (s, v) = put(
        "?lock-acquire",
        json!({ "Items": { "who": "d" }, "Lock": { "TTL": "10s", "LockDelay": "1s" } }),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let id = v["Lock"]["ID"].as_str().unwrap_or_default().to_string();
    let acquired = std::time::Instant::now();
    wait_for(
        Duration::from_secs(40),
        "the lapsed lock released",
        || async {
            let (s, v) = api.call(Method::GET, "/v1/var/app/leader", None).await;
            (s == StatusCode::OK && v.get("Lock").is_none()).then_some(())
        },
    )
    .await?;
    assert!(
        acquired.elapsed() >= Duration::from_secs(20),
        "released after {:?}, before two TTLs",
        acquired.elapsed()
    );
    let (s, _) = put("?lock-renew", json!({ "Lock": { "ID": id } })).await;
    assert_eq!(s, StatusCode::CONFLICT);
    let (s, _) = api.call(Method::DELETE, "/v1/var/app/leader", None).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    Ok(())
}

/// A workload identity with a `ttl` is renewed before it expires (issue 49, part 2): a
/// task's named identity lives 20 s; the file it is given holds a new token, expiring later,
/// well before the first one expires, and the task was not restarted (`change_mode` noop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_with_a_ttl_is_renewed_before_it_expires() -> anyhow::Result<()> {
    use base64::Engine as _;
    teamster_cluster_tests::init_test_tracing();
    let ip = dev_ip_at(27);
    let log = tempfile::NamedTempFile::new()?;
    let (_agent, _) = dev_agent(&ip, &log).await?;
    let api = Api {
        base: format!("http://{ip}:4646"),
        token: None,
    };
    let mut body = job(
        "renewed",
        "while true; do cp secrets/nomad_short.jwt local/tok 2>/dev/null; sleep 1; done",
        json!([]),
        json!([]),
    );
    body["Job"]["TaskGroups"][0]["Tasks"][0]["Identities"] = json!([{
        "Name": "short", "Audience": ["x.example"], "File": true, "TTL": 20_000_000_000u64
    }]);
    let (s, v) = api.call(Method::PUT, "/v1/jobs", Some(body)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let alloc_id = api.alloc("renewed").await?["ID"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let exp = |jwt: &str| -> Option<i64> {
        let payload = jwt.trim().split('.').nth(1)?;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .ok()?;
        serde_json::from_slice::<Value>(&bytes).ok()?["exp"].as_i64()
    };
    let first = wait_for(Duration::from_secs(30), "the first token", || async {
        let t = api.read(&alloc_id, "tok").await?;
        exp(&t).map(|e| (t, e))
    })
    .await?;
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or_default()
    };
    let (second, second_exp) = wait_for(Duration::from_secs(30), "a renewed token", || async {
        let t = api.read(&alloc_id, "tok").await?;
        let e = exp(&t)?;
        (t.trim() != first.0.trim()).then_some((t, e))
    })
    .await?;
    assert!(
        second_exp > first.1,
        "the renewed token expires later: {second}"
    );
    assert!(
        now() < first.1,
        "renewed only after the first token expired"
    );
    let a = api.alloc_by_id(&alloc_id).await.unwrap_or_default();
    assert_eq!(a["TaskStates"]["t"]["Restarts"], 0, "noop: no restart");
    Ok(())
}
