//! The web UI (`/ui/`) in a real headless Chromium (Debian's `chromium` and
//! `chromium-driver`, installed with `apt-get` when missing and the test runs as root),
//! driven over WebDriver, against a 3-server cluster and one client agent, through a
//! follower: the overview lists the 3 servers and names the leader; a job registered through
//! the API appears in the jobs list without a reload; its allocation page shows the task's
//! log line; scaling, stopping the job, draining the node and its eligibility work from
//! their pages; the jobs list renders in under 1 s with
//! 1 000 jobs. Then, against an agent with ACLs on, the UI says that the API refused it
//! without a token and works once the token is typed into its token field.
//!
//! With `TEAMSTER_UI_SCREENSHOTS=docs/ui` (a directory, relative to the workspace) it writes a
//! screenshot of each page there (`docs/ui.md` shows them).
//!
//! Without Chromium (and no way to install it) the test is skipped loudly; under `CI=true`
//! that is a failure.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use teamster::api::ApiClient;
use teamster_cluster_tests::client_process::{wait_node_status, ClientProcess};
use teamster_cluster_tests::process::{ClusterOptions, ProcessCluster};
use teamster_cluster_tests::wait_for;
use teamster_cluster_tests::webdriver::{find_or_install, Browser};

/// The line the test job prints.
const LOG_LINE: &str = "hello from the teamster ui test";

/// How many jobs the rendering check registers.
const MANY_JOBS: usize = 1000;

/// Where screenshots go, when asked for.
fn screenshot_dir() -> Option<PathBuf> {
    let dir = std::env::var("TEAMSTER_UI_SCREENSHOTS").ok()?;
    let dir = PathBuf::from(dir);
    Some(if dir.is_absolute() {
        dir
    } else {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(dir)
    })
}

async fn shot(b: &Browser, name: &str) -> anyhow::Result<()> {
    if let Some(dir) = screenshot_dir() {
        b.screenshot(&dir.join(format!("{name}.png"))).await?;
    }
    Ok(())
}

/// A raw_exec job that prints [`LOG_LINE`] and keeps running.
fn echo_job(id: &str) -> Value {
    json!({
        "ID": id,
        "Type": "service",
        "Datacenters": ["dc1"],
        "UI": {
            "Description": "Echoes a line <b>then</b> sleeps.",
            "Links": [
                {"Label": "runbook", "URL": "https://example.com/runbook"},
                {"Label": "trap", "URL": "javascript:alert(1)"}
            ]
        },
        "TaskGroups": [{
            "Name": "web",
            "Count": 1,
            "Tasks": [{
                "Name": "echo",
                "Driver": "raw_exec",
                "Config": {"command": "/bin/sh", "args": ["-c", format!("echo '{LOG_LINE}'; exec sleep 600")]},
                "KillTimeout": 1_000_000_000u64,
                "Resources": {"CPU": 100, "MemoryMB": 64}
            }]
        }]
    })
}

/// A parameterized batch job: registered without an evaluation, it never places anything.
fn idle_job(id: &str) -> Value {
    json!({
        "ID": id,
        "Type": "batch",
        "Datacenters": ["dc1"],
        "ParameterizedJob": {"Payload": "optional"},
        "TaskGroups": [{
            "Name": "g",
            "Count": 1,
            "Tasks": [{
                "Name": "t",
                "Driver": "raw_exec",
                "Config": {"command": "/bin/true"},
                "Resources": {"CPU": 10, "MemoryMB": 10}
            }]
        }]
    })
}

/// A batch job no node can take (its constraint names an OS none has): its evaluation is
/// blocked with placement failures, which the evaluations page shows.
fn unplaceable_job(id: &str) -> Value {
    let mut j = idle_job(id);
    j.as_object_mut().map(|o| o.remove("ParameterizedJob"));
    j["Constraints"] =
        json!([{"LTarget": "${attr.kernel.name}", "RTarget": "plan9", "Operand": "="}]);
    j
}

/// Click the element `selector` in the page (a client-side navigation for links).
async fn click(b: &Browser, selector: &str) -> anyhow::Result<()> {
    let found = b
        .execute(
            "const el = document.querySelector(arguments[0]); if (!el) return false; el.click(); return true;",
            json!([selector]),
        )
        .await?;
    anyhow::ensure!(found == json!(true), "no element {selector} to click");
    Ok(())
}

/// Wait until the page `name` has rendered since the last navigation.
async fn rendered(b: &Browser, name: &str) -> anyhow::Result<Value> {
    b.wait_script(
        Duration::from_secs(30),
        &format!("the {name} page to render"),
        &format!("const r = window.__uiRendered; return r && r.page === {name:?} ? r : null;"),
    )
    .await
}

#[tokio::test]
async fn the_web_ui_in_headless_chromium() -> anyhow::Result<()> {
    let (chromium, driver) = match tokio::task::spawn_blocking(find_or_install).await? {
        Ok(bins) => bins,
        Err(why) => {
            let msg = format!("SKIP t19_ui: no headless Chromium: {why}");
            if std::env::var("CI").as_deref() == Ok("true") {
                anyhow::bail!("{msg}; CI=true requires it");
            }
            eprintln!("{msg}");
            return Ok(());
        }
    };

    // A raft append is timed out after one heartbeat interval: the test's burst of 1 000
    // registrations, replicated 64 entries at a time to a debug-build follower on a loaded
    // machine, can take more than the default 50 ms, and the follower then never catches up
    // (each retry sends the same batch). A slower heartbeat gives the batch time.
    let options = ClusterOptions {
        heartbeat: "250ms",
        election_timeout: "1500ms",
        ..ClusterOptions::default()
    };
    let mut c = ProcessCluster::start(3, options)?;
    let leader = c.wait_leader(Duration::from_secs(30)).await?;
    let ip = c.servers[0].ip.clone();
    let (block, _) = ip.rsplit_once('.').expect("an IPv4 address");
    let servers: Vec<String> = c.servers.iter().map(|s| s.rpc_addr()).collect();
    let client = ClientProcess::start(c.dir(), "client-1", &format!("{block}.101"), &servers, "")?;
    let api = c.servers[leader].api();
    let node_id = wait_for(Duration::from_secs(30), "the client to register", || {
        client.node_id()
    })
    .await?;
    wait_node_status(&api, &node_id, "ready", Duration::from_secs(30)).await?;

    // Everything through a follower: its API forwards to the leader.
    let follower = (leader + 1) % 3;
    let ui = format!("{}/ui", c.servers[follower].http_addr());
    let b = Browser::start(&chromium, &driver, 1400, 1000).await?;
    let result = scenario(&c, leader, &api, &node_id, &ui, &b).await;
    if result.is_err() {
        c.dump_logs(80);
        eprintln!("----- client-1 -----\n{}", client.log_tail(40));
        b.close().await;
        return result;
    }
    drop(client);
    drop(c);
    let result = with_acls(&b, &format!("{block}.20")).await;
    b.close().await;
    result
}

/// A dev agent killed when dropped.
struct DevAgent(std::process::Child);

impl Drop for DevAgent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// With ACLs on: the UI loads without a token, says the API refused it, and works once the
/// management token is typed into its token field.
async fn with_acls(b: &Browser, ip: &str) -> anyhow::Result<()> {
    let _agent = DevAgent(
        std::process::Command::new(teamster_cluster_tests::process::teamster_bin())
            .args(["agent", "--dev", "--acl-enabled", "--bind", ip])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?,
    );
    let base = format!("http://{ip}:4646");
    let http = reqwest::Client::new();
    let secret = wait_for(Duration::from_secs(30), "the ACL bootstrap", || async {
        let r = http
            .post(format!("{base}/v1/acl/bootstrap"))
            .send()
            .await
            .ok()?;
        let v: Value = r.json().await.ok()?;
        v["SecretID"].as_str().map(str::to_string)
    })
    .await?;
    let job = idle_job("acl-job");
    let r = http
        .post(format!("{base}/v1/jobs"))
        .header("X-Nomad-Token", &secret)
        .json(&json!({ "Job": job }))
        .send()
        .await?;
    anyhow::ensure!(r.status().is_success(), "registering with the token: {r:?}");
    b.goto(&format!("{base}/ui/jobs")).await?;
    b.execute("localStorage.clear();", json!([])).await?;
    b.goto(&format!("{base}/ui/jobs")).await?;
    b.wait_script(
        Duration::from_secs(30),
        "the UI to say that the API wants a token",
        "const el = document.getElementById('banner');
         return !el.hidden && el.textContent.includes('Permission denied') &&
           el.textContent.includes('enter an ACL token');",
    )
    .await?;
    shot(b, "acl-denied").await?;
    b.execute(
        "document.getElementById('token').value = arguments[0];
         document.getElementById('token-form').requestSubmit();",
        json!([secret]),
    )
    .await?;
    b.wait_script(
        Duration::from_secs(30),
        "the jobs list with the token",
        "return !!document.querySelector('#jobs-table tr[data-job=\"acl-job\"]') &&
           document.getElementById('banner').hidden &&
           localStorage.getItem('teamster.token') !== null;",
    )
    .await?;
    Ok(())
}

async fn scenario(
    c: &ProcessCluster,
    leader: usize,
    api: &ApiClient,
    node_id: &str,
    ui: &str,
    b: &Browser,
) -> anyhow::Result<()> {
    // The overview: 3 servers, the leader named, every server's workers.
    b.goto(&format!("{ui}/")).await?;
    rendered(b, "overview").await?;
    let leader_name = c.servers[leader].name.clone();
    b.wait_script(
        Duration::from_secs(30),
        "3 servers with their workers and the leader named",
        &format!(
            "const rows = document.querySelectorAll('#ov-servers tr[data-server]');
             const leader = document.getElementById('leader-name');
             const workers = document.querySelectorAll('#ov-servers .workers .badge').length;
             const clients = document.querySelectorAll('#ov-clients a[href^=\"/ui/nodes/\"]').length;
             return rows.length === 3 && leader && leader.textContent === {leader_name:?} &&
               document.querySelector('#ov-servers tr[data-server={leader_name:?}] .badge.leader') &&
               workers > 0 && clients === 1;"
        ),
    )
    .await?;
    shot(b, "overview").await?;

    // A job registered through the API appears in the jobs list without a reload.
    click(b, "nav a[data-tab=jobs]").await?;
    rendered(b, "jobs").await?;
    b.execute("window.__sameDocument = 'yes';", json!([]))
        .await?;
    let blocked = "ui-unplaceable";
    teamster_cluster_tests::api::register(api, unplaceable_job(blocked)).await?;
    let id = "ui-hello";
    teamster_cluster_tests::api::register(api, echo_job(id)).await?;
    b.wait_script(
        Duration::from_secs(30),
        "the new job's row in the jobs list",
        &format!(
            "return window.__sameDocument === 'yes' &&
               !!document.querySelector('#jobs-table tr[data-job={id:?}] .badge.ok');"
        ),
    )
    .await?;
    shot(b, "jobs").await?;

    // The job page, then its allocation's page with the task's log line.
    click(b, &format!("#jobs-table tr[data-job={id:?}] a")).await?;
    rendered(b, "job").await?;
    b.wait_script(
        Duration::from_secs(60),
        "a running allocation on the job page",
        "return [...document.querySelectorAll('#job-allocs tr[data-alloc]')]
           .some((r) => r.textContent.includes('running'));",
    )
    .await?;
    // The job's ui block: its description as text, an http(s) link as a link, any other
    // URL as text only.
    b.wait_script(
        Duration::from_secs(30),
        "the job's description and links",
        "const d = document.querySelector('#job-ui .job-description');
         const links = [...document.querySelectorAll('#job-ui a')];
         return d && d.textContent === 'Echoes a line <b>then</b> sleeps.' && !d.querySelector('b') &&
           links.length === 1 && links[0].href === 'https://example.com/runbook' &&
           document.getElementById('job-ui').textContent.includes('trap');",
    )
    .await?;
    shot(b, "job").await?;
    // Scale the group to 2 from the page: a new version with a second allocation.
    b.execute(
        "const i = document.querySelector('#job-groups input[data-group=web]');
         i.value = '2'; i.dispatchEvent(new Event('input'));",
        json!([]),
    )
    .await?;
    click(b, "#job-groups button[data-scale=web]").await?;
    wait_for(Duration::from_secs(30), "the group scaled to 2", || async {
        let j: Value = api.get(&format!("/v1/job/{id}")).await.ok()?;
        (j["TaskGroups"][0]["Count"] == 2).then_some(())
    })
    .await?;
    b.wait_script(
        Duration::from_secs(60),
        "two allocations on the job page",
        "return document.querySelectorAll('#job-allocs tr[data-alloc]').length === 2;",
    )
    .await?;
    click(b, "#job-allocs tr[data-alloc] a").await?;
    rendered(b, "allocation").await?;
    b.wait_script(
        Duration::from_secs(30),
        "the task's log line on the allocation page",
        &format!("return document.getElementById('alloc-log').textContent.includes({LOG_LINE:?});"),
    )
    .await?;
    shot(b, "allocation").await?;

    // The node page, and the evaluations page with the blocked job's placement failures.
    b.goto(&format!("{ui}/nodes/{node_id}")).await?;
    rendered(b, "node").await?;
    b.wait_script(
        Duration::from_secs(30),
        "the node page's allocation, attributes and actions",
        &format!(
            "return !!document.querySelector('#node-allocs tr[data-alloc]') &&
               document.getElementById('node-attrs').textContent.includes('kernel.name') &&
               !!document.getElementById('node-drain') && !!document.getElementById('node-elig') &&
               document.getElementById('node-allocs').textContent.includes({id:?});"
        ),
    )
    .await?;
    shot(b, "node").await?;
    // Eligibility both ways from the node page.
    for want in ["ineligible", "eligible"] {
        click(b, "#node-elig").await?;
        wait_for(
            Duration::from_secs(30),
            &format!("the node {want}"),
            || async {
                let n: Value = api.get(&format!("/v1/node/{node_id}")).await.ok()?;
                (n["SchedulingEligibility"] == want).then_some(())
            },
        )
        .await?;
        b.wait_script(
            Duration::from_secs(30),
            &format!("the node page to show it {want}"),
            &format!(
                "return document.getElementById('node-title').textContent.includes(' {want}') &&
                   !document.getElementById('node-elig').disabled;"
            ),
        )
        .await?;
    }
    click(b, "nav a[data-tab=evaluations]").await?;
    rendered(b, "evaluations").await?;
    b.wait_script(
        Duration::from_secs(30),
        "the blocked job's placement failure",
        "return [...document.querySelectorAll('#evals-table tr[data-eval]')]
           .some((r) => r.textContent.includes('ui-unplaceable') && r.textContent.includes('plan9'));",
    )
    .await?;
    shot(b, "evaluations").await?;

    // Stop the job from its page (the stop button asks for a second click).
    b.goto(&format!("{ui}/jobs/{id}")).await?;
    rendered(b, "job").await?;
    click(b, "#job-stop").await?;
    click(b, "#job-stop").await?;
    wait_for(Duration::from_secs(30), "the job stopped", || async {
        let j: Value = api.get(&format!("/v1/job/{id}")).await.ok()?;
        (j["Stop"] == true).then_some(())
    })
    .await?;
    wait_for(
        Duration::from_secs(60),
        "the job's allocation stopped",
        || async {
            let allocs: Vec<Value> = api.get(&format!("/v1/job/{id}/allocations")).await.ok()?;
            allocs
                .iter()
                .all(|a| a["DesiredStatus"] == "stop" && a["ClientStatus"] != "running")
                .then_some(())
        },
    )
    .await?;
    b.wait_script(
        Duration::from_secs(30),
        "the job page to show the job stopped",
        "return document.getElementById('job-sub').textContent.includes('stopped') &&
           !document.getElementById('job-stop');",
    )
    .await?;

    // Drain the node from its page (nothing runs there now, so the drain ends at once; the
    // node stays ineligible), then make it eligible again.
    b.goto(&format!("{ui}/nodes/{node_id}")).await?;
    rendered(b, "node").await?;
    click(b, "#node-drain").await?;
    click(b, "#node-drain").await?;
    wait_for(
        Duration::from_secs(30),
        "the drain to run and end",
        || async {
            let n: Value = api.get(&format!("/v1/node/{node_id}")).await.ok()?;
            (n["LastDrain"].is_object()
                && n["Drain"] == false
                && n["SchedulingEligibility"] == "ineligible")
                .then_some(())
        },
    )
    .await?;
    b.wait_script(
        Duration::from_secs(30),
        "the node page to offer to make the node eligible",
        "const b = document.getElementById('node-elig');
         return !!b && b.textContent === 'Mark eligible' && !b.disabled;",
    )
    .await?;
    click(b, "#node-elig").await?;
    wait_for(
        Duration::from_secs(30),
        "the node eligible again",
        || async {
            let n: Value = api.get(&format!("/v1/node/{node_id}")).await.ok()?;
            (n["SchedulingEligibility"] == "eligible").then_some(())
        },
    )
    .await?;

    // Variables: listed, edited with check-and-set, a conflict shown, deleted.
    let _: Value = api
        .request(
            reqwest::Method::PUT,
            "/v1/var/app/ui",
            Some(&json!({ "Items": { "color": "blue" } })),
        )
        .await?;
    b.goto(&format!("{ui}/variables")).await?;
    rendered(b, "variables").await?;
    b.wait_script(
        Duration::from_secs(30),
        "the variable's row",
        "return !!document.querySelector('#vars-table tr[data-var=\"app/ui\"] a');",
    )
    .await?;
    shot(b, "variables").await?;
    click(b, "#vars-table tr[data-var=\"app/ui\"] a").await?;
    rendered(b, "variable").await?;
    let set_and_save = |value: &'static str| {
        format!(
            "const i = document.querySelector('#var-items .var-value'); i.value = {value:?};
             document.getElementById('var-save').click(); return true;"
        )
    };
    b.execute(&set_and_save("green"), json!([])).await?;
    b.wait_script(
        Duration::from_secs(30),
        "the save",
        "return document.body.dataset.saved || null;",
    )
    .await?;
    let saved: Value = api.get("/v1/var/app/ui").await?;
    assert_eq!(saved["Items"]["color"], "green", "{saved}");
    shot(b, "variable").await?;
    // Changed behind the page: its next save is a conflict that shows the servers' value.
    let _: Value = api
        .request(
            reqwest::Method::PUT,
            "/v1/var/app/ui",
            Some(&json!({ "Items": { "color": "red" } })),
        )
        .await?;
    b.execute(&set_and_save("yellow"), json!([])).await?;
    b.wait_script(
        Duration::from_secs(30),
        "the conflict shown",
        "const n = document.getElementById('var-conflict-note');
         return !!n && n.textContent.includes('red');",
    )
    .await?;
    let kept: Value = api.get("/v1/var/app/ui").await?;
    assert_eq!(
        kept["Items"]["color"], "red",
        "a conflict writes nothing: {kept}"
    );
    click(b, "#var-reload").await?;
    rendered(b, "variable").await?;
    click(b, "#var-delete").await?;
    click(b, "#var-delete").await?;
    rendered(b, "variables").await?;
    wait_for(Duration::from_secs(30), "the variable deleted", || async {
        api.get::<Value>("/v1/var/app/ui")
            .await
            .is_err()
            .then_some(())
    })
    .await?;

    // 1 000 jobs: the jobs list renders in under 1 s.
    let t0 = Instant::now();
    let ids: Vec<String> = (0..MANY_JOBS).map(|i| format!("bulk-{i:04}")).collect();
    for chunk in ids.chunks(25) {
        let writes = chunk
            .iter()
            .map(|id| teamster_cluster_tests::api::register(api, idle_job(id)));
        for r in futures::future::join_all(writes).await {
            r?;
        }
    }
    eprintln!("t19_ui: registered {MANY_JOBS} jobs in {:?}", t0.elapsed());
    // The server the UI talks to answers with them all (a consistent read, as the UI's).
    let ui_api = c.servers[(leader + 1) % 3].api();
    wait_for(
        Duration::from_secs(60),
        "the follower to list every job",
        || async {
            let jobs: Vec<Value> = ui_api.get("/v1/jobs").await.ok()?;
            (jobs.len() > MANY_JOBS).then_some(())
        },
    )
    .await?;
    // A full load of the jobs page, then client-side navigations to it.
    b.goto(&format!("{ui}/jobs")).await?;
    let first = rendered(b, "jobs").await?;
    let mut times = vec![first];
    for _ in 0..3 {
        click(b, "nav a[data-tab=overview]").await?;
        rendered(b, "overview").await?;
        click(b, "nav a[data-tab=jobs]").await?;
        times.push(rendered(b, "jobs").await?);
    }
    for t in &times {
        anyhow::ensure!(
            t["rows"].as_u64() >= Some(MANY_JOBS as u64),
            "the jobs page rendered {} rows, not all the jobs",
            t["rows"]
        );
        let rows = b
            .execute(
                "return document.querySelectorAll('#jobs-table tr[data-job]').length;",
                json!([]),
            )
            .await?;
        anyhow::ensure!(rows.as_u64() >= Some(MANY_JOBS as u64), "{rows} rows shown");
    }
    let ms: Vec<f64> = times.iter().filter_map(|t| t["ms"].as_f64()).collect();
    let render: Vec<f64> = times
        .iter()
        .filter_map(|t| t["renderMs"].as_f64())
        .collect();
    eprintln!(
        "t19_ui: jobs page with {} jobs: {ms:.0?} ms from navigation to rows present \
         (fetch included), {render:.0?} ms of rendering",
        MANY_JOBS + 2
    );
    // Building the table is the UI's part: every time under 1 s. Fetching 1 000 jobs from a
    // debug build on a shared machine varies: the median load, fetch included, under 1 s.
    for r in &render {
        anyhow::ensure!(
            *r < 1000.0,
            "rendering {MANY_JOBS} jobs took {r:.0} ms (limit 1000 ms)"
        );
    }
    let mut sorted = ms.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    anyhow::ensure!(
        median < 1000.0,
        "the jobs page took {median:.0} ms (median) from navigation to {MANY_JOBS} rows (limit 1000 ms)"
    );
    shot(b, "jobs-1000").await?;
    Ok(())
}
