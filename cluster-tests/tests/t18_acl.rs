//! ACLs end to end on a real agent (`teamster agent --dev --acl-enabled`, a server and a
//! client in one process, real RPC between them):
//!
//! - every public route of the HTTP API is asked with no token, an unknown token, a
//!   read-only client token and the management token, and answers as its rule says (403 or
//!   not), with nothing changed by a refused write;
//! - the bootstrap happens once, and again only with the reset index;
//! - an expired token and a deleted token are refused;
//! - the client's own calls work (it runs a job with ACLs on) while RPC calls from outside
//!   without the right node secret or token are refused;
//! - the CLI bootstraps, writes policies and tokens, and acts with `NOMAD_TOKEN`;
//! - no secret appears in the agent's log.

use std::process::{Command, Stdio};
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use teamster::rpc::service::eval::EvalDequeueRequest;
use teamster::rpc::service::node::{NodeGetClientAllocsRequest, NodeUpdateStatusRequest};
use teamster::rpc::service::operator::BrokerStatsRequest;
use teamster::rpc::{Pool, ServiceError, ServiceRequest};
use teamster_cluster_tests::wait_for;

fn teamster() -> Command {
    Command::new(teamster_cluster_tests::process::teamster_bin())
}

/// A dev agent with ACLs on, killed when dropped.
struct Agent {
    child: std::process::Child,
    ip: String,
    http: reqwest::Client,
    data_dir: tempfile::TempDir,
    log: tempfile::NamedTempFile,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    fn start(host: u32) -> anyhow::Result<Agent> {
        let pid = std::process::id();
        let ip = format!("127.{}.{}.{host}", 30 + (pid % 200), 3 + (pid / 200 % 50));
        let data_dir = tempfile::tempdir()?;
        let log = tempfile::NamedTempFile::new()?;
        let child = teamster()
            .args([
                "agent",
                "--dev",
                "--acl-enabled",
                "--bind",
                &ip,
                "--data-dir",
            ])
            .arg(data_dir.path())
            .stdin(Stdio::null())
            .stdout(log.reopen()?)
            .stderr(log.reopen()?)
            .spawn()?;
        Ok(Agent {
            child,
            ip,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(20))
                .build()?,
            data_dir,
            log,
        })
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}:4646{path}", self.ip)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }

    /// One request: its status and body (the body is not read for streams).
    async fn call(
        &self,
        method: Method,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (StatusCode, String) {
        let mut req = self.http.request(method, self.url(path));
        if let Some(t) = token {
            req = req.header("X-Nomad-Token", t);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}\n{}", self.log_text()));
        let status = resp.status();
        if path.starts_with("/v1/event/stream") && status == StatusCode::OK {
            return (status, String::new());
        }
        (status, resp.text().await.unwrap_or_default())
    }

    async fn json(&self, method: Method, path: &str, token: &str, body: Option<&Value>) -> Value {
        let (status, text) = self.call(method, path, Some(token), body).await;
        assert!(status.is_success(), "{path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    fn cli(&self, args: &[&str], token: Option<&str>) -> (Option<i32>, String, String) {
        let mut cmd = teamster();
        cmd.args(args)
            .env("TEAMSTER_ADDR", self.url(""))
            .env_remove("NOMAD_TOKEN")
            .env_remove("TEAMSTER_TOKEN");
        if let Some(t) = token {
            cmd.env("NOMAD_TOKEN", t);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// What a route needs, for the matrix.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rule {
    /// Anyone.
    Public,
    /// The read-only policy below grants it.
    Read,
    /// Write or node/agent/operator write: not the read-only token.
    Write,
    /// A management token only.
    Management,
    /// Anyone with a valid token or none (the answer shows what the caller may see).
    Filtered,
}

const READONLY: &str = r#"
namespace "default" {
  policy = "read"
}
node {
  policy = "read"
}
agent {
  policy = "read"
}
operator {
  policy = "read"
}
"#;

fn job(id: &str) -> Value {
    json!({"Job": {
        "ID": id, "Name": id, "Type": "batch", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/sh", "args": ["-c", "echo acl-hello; sleep 30"]},
            "Resources": {"CPU": 20, "MemoryMB": 16}
        }]}]
    }})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_by_its_rule_and_the_client_works_with_acls_on() {
    let agent = Agent::start(1).expect("the agent starts");
    // Tokenless: the public routes answer, the rest are refused.
    wait_for(Duration::from_secs(30), "the agent's API", || async {
        let resp = agent
            .http
            .get(agent.url("/v1/status/leader"))
            .send()
            .await
            .ok()?;
        (resp.status() == StatusCode::OK).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", agent.log_text()));
    let (s, text) = agent.call(Method::GET, "/v1/jobs", None, None).await;
    assert_eq!(
        (s, text.as_str()),
        (StatusCode::FORBIDDEN, "Permission denied")
    );

    // The bootstrap: once; again only with the reset index.
    let boot = agent.json(Method::PUT, "/v1/acl/bootstrap", "", None).await;
    let root = boot["SecretID"].as_str().unwrap().to_string();
    assert_eq!(boot["Type"], "management");
    let (s, text) = agent
        .call(Method::PUT, "/v1/acl/bootstrap", None, None)
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{text}");
    let reset: u64 = text
        .rsplit("reset index: ")
        .next()
        .and_then(|t| t.trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("no reset index in {text:?}"));
    let reset_file = agent.data_dir.path().join("server/acl-bootstrap-reset");
    std::fs::write(&reset_file, format!("{}", reset + 1000)).unwrap();
    let (s, text) = agent
        .call(Method::PUT, "/v1/acl/bootstrap", None, None)
        .await;
    assert!(
        s == StatusCode::BAD_REQUEST && text.contains("Invalid bootstrap reset index"),
        "{s} {text}"
    );
    std::fs::write(&reset_file, format!("{reset}")).unwrap();
    let second = agent.json(Method::PUT, "/v1/acl/bootstrap", "", None).await;
    let root2 = second["SecretID"].as_str().unwrap().to_string();
    std::fs::remove_file(&reset_file).unwrap();
    // Both bootstrap tokens work (a reset revokes nothing, as Nomad's).
    for t in [&root, &root2] {
        let (s, _) = agent
            .call(Method::GET, "/v1/acl/tokens", Some(t), None)
            .await;
        assert_eq!(s, StatusCode::OK);
    }

    // A read-only policy and its token; an expiring token; a token then deleted.
    agent
        .json(
            Method::PUT,
            "/v1/acl/policy/readonly",
            &root,
            Some(&json!({"Name": "readonly", "Rules": READONLY})),
        )
        .await;
    let (s, text) = agent
        .call(
            Method::PUT,
            "/v1/acl/policy/bad",
            Some(&root),
            Some(&json!({"Rules": "quota { policy = \"read\" }"})),
        )
        .await;
    assert!(
        s == StatusCode::BAD_REQUEST && text.contains("quota"),
        "{s} {text}"
    );
    let reader = agent
        .json(
            Method::PUT,
            "/v1/acl/token",
            &root,
            Some(&json!({"Name": "reader", "Type": "client", "Policies": ["readonly"]})),
        )
        .await;
    let read = reader["SecretID"].as_str().unwrap().to_string();
    let short = agent
        .json(
            Method::PUT,
            "/v1/acl/token",
            &root,
            Some(&json!({"Name": "short", "Policies": ["readonly"], "ExpirationTTL": "1s"})),
        )
        .await;
    let deleted = agent
        .json(
            Method::PUT,
            "/v1/acl/token",
            &root,
            Some(&json!({"Name": "gone", "Policies": ["readonly"]})),
        )
        .await;
    let (s, _) = agent
        .call(
            Method::DELETE,
            &format!("/v1/acl/token/{}", deleted["AccessorID"].as_str().unwrap()),
            Some(&root),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, text) = agent
        .call(Method::GET, "/v1/jobs", deleted["SecretID"].as_str(), None)
        .await;
    assert_eq!(
        (s, text.as_str()),
        (StatusCode::FORBIDDEN, "ACL token not found")
    );

    // A job placed and run by the client with ACLs on: the client's RPC carries its node
    // secret.
    agent
        .json(Method::PUT, "/v1/jobs", &root, Some(&job("acl-web")))
        .await;
    let alloc: Value = wait_for(
        Duration::from_secs(60),
        "the job's allocation running",
        || async {
            let (_, text) = agent
                .call(
                    Method::GET,
                    "/v1/job/acl-web/allocations",
                    Some(&root),
                    None,
                )
                .await;
            let allocs: Vec<Value> = serde_json::from_str(&text).ok()?;
            allocs.into_iter().find(|a| a["ClientStatus"] == "running")
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", agent.log_text()));
    let alloc_id = alloc["ID"].as_str().unwrap().to_string();
    let eval_id = alloc["EvalID"].as_str().unwrap().to_string();
    let node_id = alloc["NodeID"].as_str().unwrap().to_string();

    // The expiring token has expired by now (the job took longer than a second to run,
    // or we wait until it has).
    wait_for(
        Duration::from_secs(10),
        "the short token expiring",
        || async {
            let (s, text) = agent
                .call(Method::GET, "/v1/jobs", short["SecretID"].as_str(), None)
                .await;
            (s == StatusCode::FORBIDDEN && text == "ACL token expired").then_some(())
        },
    )
    .await
    .unwrap();

    // The matrix.
    let alloc_path = |p: &str| p.replace("{alloc}", &alloc_id);
    let routes: Vec<(Method, String, Option<Value>, Rule)> = vec![
        (Method::GET, "/v1/status/leader".into(), None, Rule::Public),
        (Method::GET, "/v1/status/peers".into(), None, Rule::Public),
        (Method::GET, "/v1/agent/health".into(), None, Rule::Public),
        (Method::GET, "/v1/metrics".into(), None, Rule::Public),
        (Method::GET, "/v1/regions".into(), None, Rule::Public),
        // Enterprise-only: 501 to anyone, as Nomad's community edition answers.
        (Method::GET, "/v1/quotas".into(), None, Rule::Public),
        (
            Method::PUT,
            "/v1/sentinel/policy/p".into(),
            None,
            Rule::Public,
        ),
        (
            Method::GET,
            "/v1/recommendations".into(),
            None,
            Rule::Public,
        ),
        (Method::GET, "/v1/jobs".into(), None, Rule::Read),
        (Method::GET, "/v1/job/acl-web".into(), None, Rule::Read),
        (
            Method::GET,
            "/v1/job/acl-web/summary".into(),
            None,
            Rule::Read,
        ),
        (
            Method::GET,
            "/v1/job/acl-web/actions".into(),
            None,
            Rule::Read,
        ),
        // Running an action is alloc-exec's (answered 400 here: no action asked for).
        (
            Method::GET,
            "/v1/job/acl-web/action".into(),
            None,
            Rule::Write,
        ),
        (
            Method::GET,
            "/v1/job/acl-web/versions".into(),
            None,
            Rule::Read,
        ),
        (
            Method::GET,
            "/v1/job/acl-web/allocations".into(),
            None,
            Rule::Read,
        ),
        (
            Method::GET,
            "/v1/job/acl-web/evaluations".into(),
            None,
            Rule::Read,
        ),
        (
            Method::GET,
            "/v1/job/acl-web/deployments".into(),
            None,
            Rule::Read,
        ),
        (
            Method::GET,
            "/v1/job/acl-web/deployment".into(),
            None,
            Rule::Read,
        ),
        (
            Method::GET,
            "/v1/job/acl-web/scale".into(),
            None,
            Rule::Read,
        ),
        (
            Method::PUT,
            "/v1/jobs/parse".into(),
            Some(json!({"JobHCL": "job \"x\" {}"})),
            Rule::Read,
        ),
        (
            Method::PUT,
            "/v1/validate/job".into(),
            Some(job("acl-v")),
            Rule::Read,
        ),
        (Method::GET, "/v1/allocations".into(), None, Rule::Read),
        (
            Method::GET,
            format!("/v1/allocation/{alloc_id}"),
            None,
            Rule::Read,
        ),
        (Method::GET, "/v1/evaluations".into(), None, Rule::Read),
        (
            Method::GET,
            format!("/v1/evaluation/{eval_id}"),
            None,
            Rule::Read,
        ),
        (
            Method::GET,
            format!("/v1/evaluation/{eval_id}/allocations"),
            None,
            Rule::Read,
        ),
        (Method::GET, "/v1/deployments".into(), None, Rule::Read),
        (Method::GET, "/v1/nodes".into(), None, Rule::Read),
        (Method::GET, format!("/v1/node/{node_id}"), None, Rule::Read),
        (
            Method::GET,
            format!("/v1/node/{node_id}/allocations"),
            None,
            Rule::Read,
        ),
        (Method::GET, "/v1/agent/members".into(), None, Rule::Read),
        (Method::GET, "/v1/agent/self".into(), None, Rule::Read),
        (Method::GET, "/v1/agent/servers".into(), None, Rule::Read),
        (Method::GET, "/v1/agent/schedulers".into(), None, Rule::Read),
        (
            Method::GET,
            "/v1/agent/schedulers/config".into(),
            None,
            Rule::Read,
        ),
        (
            Method::GET,
            "/v1/operator/raft/configuration".into(),
            None,
            Rule::Read,
        ),
        (
            Method::GET,
            "/v1/operator/scheduler/configuration".into(),
            None,
            Rule::Read,
        ),
        (
            Method::GET,
            "/v1/operator/autopilot/configuration".into(),
            None,
            Rule::Read,
        ),
        (
            Method::GET,
            "/v1/operator/autopilot/health".into(),
            None,
            Rule::Read,
        ),
        (
            Method::PUT,
            "/v1/operator/autopilot/configuration?cas=999999999".into(),
            Some(json!({})),
            Rule::Write,
        ),
        (
            Method::GET,
            "/v1/operator/scheduler/broker".into(),
            None,
            Rule::Read,
        ),
        (Method::GET, "/v1/namespaces".into(), None, Rule::Filtered),
        (
            Method::GET,
            "/v1/namespace/default".into(),
            None,
            Rule::Read,
        ),
        (Method::GET, "/v1/services".into(), None, Rule::Read),
        (Method::GET, "/v1/service/none".into(), None, Rule::Read),
        (Method::GET, "/v1/scaling/policies".into(), None, Rule::Read),
        (Method::GET, "/v1/client/stats".into(), None, Rule::Read),
        (
            Method::GET,
            alloc_path("/v1/client/allocation/{alloc}/stats"),
            None,
            Rule::Read,
        ),
        (
            Method::GET,
            alloc_path("/v1/allocation/{alloc}/services"),
            None,
            Rule::Read,
        ),
        (
            Method::GET,
            alloc_path("/v1/client/allocation/{alloc}/checks"),
            None,
            Rule::Read,
        ),
        (
            Method::PUT,
            "/v1/search".into(),
            Some(json!({"Prefix": "acl", "Context": "jobs"})),
            Rule::Read,
        ),
        (
            Method::GET,
            "/v1/event/stream?topic=Job".into(),
            None,
            Rule::Read,
        ),
        (
            Method::GET,
            "/v1/acl/policy/readonly".into(),
            None,
            Rule::Read,
        ),
        (
            Method::GET,
            alloc_path("/v1/client/fs/logs/{alloc}?task=t&type=stdout"),
            None,
            Rule::Write,
        ),
        (
            Method::GET,
            alloc_path("/v1/client/fs/ls/{alloc}"),
            None,
            Rule::Write,
        ),
        (
            Method::GET,
            alloc_path("/v1/client/fs/cat/{alloc}?path=alloc"),
            None,
            Rule::Write,
        ),
        (
            Method::PUT,
            "/v1/jobs".into(),
            Some(job("acl-other")),
            Rule::Write,
        ),
        (
            Method::PUT,
            "/v1/job/acl-web/evaluate".into(),
            Some(json!({})),
            Rule::Write,
        ),
        (
            Method::PUT,
            "/v1/job/acl-web/plan".into(),
            Some(job("acl-web")),
            Rule::Write,
        ),
        (
            Method::PUT,
            "/v1/job/acl-web/periodic/force".into(),
            None,
            Rule::Write,
        ),
        (
            Method::PUT,
            "/v1/job/acl-web/dispatch".into(),
            Some(json!({})),
            Rule::Write,
        ),
        (
            Method::PUT,
            "/v1/job/acl-web/scale".into(),
            Some(json!({"Count": 1, "Target": {"Group": "g"}})),
            Rule::Write,
        ),
        (
            Method::PUT,
            format!("/v1/node/{node_id}/eligibility"),
            Some(json!({"Eligibility": "eligible"})),
            Rule::Write,
        ),
        (
            Method::PUT,
            format!("/v1/node/{node_id}/evaluate"),
            None,
            Rule::Write,
        ),
        (
            Method::PUT,
            "/v1/agent/schedulers/config".into(),
            Some(json!({"NumSchedulers": 2})),
            Rule::Write,
        ),
        (
            Method::DELETE,
            "/v1/service/none/none".into(),
            None,
            Rule::Write,
        ),
        (
            Method::PUT,
            "/v1/agent/join?address=127.0.0.1:1".into(),
            None,
            Rule::Write,
        ),
        (
            Method::PUT,
            "/v1/agent/force-leave?node=nope".into(),
            None,
            Rule::Write,
        ),
        (
            Method::PUT,
            "/v1/system/reconcile/summaries".into(),
            None,
            Rule::Management,
        ),
        (Method::PUT, "/v1/system/gc".into(), None, Rule::Management),
        (
            Method::PUT,
            "/v1/namespace/acl-ns".into(),
            Some(json!({"Name": "acl-ns"})),
            Rule::Management,
        ),
        (Method::GET, "/v1/acl/tokens".into(), None, Rule::Management),
        (Method::GET, "/v1/acl/policies".into(), None, Rule::Filtered),
        (
            Method::PUT,
            "/v1/acl/policy/other".into(),
            Some(json!({"Rules": READONLY})),
            Rule::Management,
        ),
        (
            Method::GET,
            "/v1/event/stream".into(),
            None,
            Rule::Management,
        ),
        (
            Method::GET,
            "/v1/operator/snapshot".into(),
            None,
            Rule::Management,
        ),
    ];
    let mut failures = Vec::new();
    for (method, path, body, rule) in &routes {
        let cases: [(&str, Option<&str>, bool); 4] = [
            (
                "no token",
                None,
                matches!(rule, Rule::Public | Rule::Filtered),
            ),
            (
                "unknown token",
                Some("6f1c3a2e-0b7d-4c1e-9a8f-2d3e4f5a6b7c"),
                *rule == Rule::Public,
            ),
            (
                "read-only token",
                Some(read.as_str()),
                matches!(rule, Rule::Public | Rule::Read | Rule::Filtered),
            ),
            ("management token", Some(root.as_str()), true),
        ];
        for (who, token, allowed) in cases {
            // Refused writes first: the management token's writes come last.
            let jobs_before = agent.json(Method::GET, "/v1/jobs", &root, None).await;
            let (status, text) = agent.call(method.clone(), path, token, body.as_ref()).await;
            let refused = status == StatusCode::FORBIDDEN;
            if refused == allowed {
                failures.push(format!("{method} {path} with {who}: {status} {text:.120}"));
            }
            if refused {
                let ok = text == "Permission denied" || text == "ACL token not found";
                if !ok {
                    failures.push(format!("{method} {path} with {who}: 403 says {text:?}"));
                }
            }
            if who == "read-only token" && !allowed {
                // Nothing a refused write asked for happened.
                let jobs = agent.json(Method::GET, "/v1/jobs", &root, None).await;
                assert_eq!(
                    jobs.as_array().map(|a| a.len()),
                    jobs_before.as_array().map(|a| a.len()),
                    "{method} {path} refused but changed the jobs"
                );
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    // The read-only token sees only its own policy and itself.
    let policies = agent
        .json(Method::GET, "/v1/acl/policies", &read, None)
        .await;
    let names: Vec<&str> = policies
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["Name"].as_str())
        .collect();
    assert_eq!(names, ["readonly"]);
    let me = agent
        .json(Method::GET, "/v1/acl/token/self", &read, None)
        .await;
    assert_eq!(me["AccessorID"], reader["AccessorID"]);
    let (s, _) = agent
        .call(
            Method::GET,
            &format!("/v1/acl/token/{}", boot["AccessorID"].as_str().unwrap()),
            Some(&read),
            None,
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);

    // A token of another namespace: refused in `default`, allowed in its own, and a job
    // body naming `default` cannot ride on a request for its own namespace.
    agent
        .json(
            Method::PUT,
            "/v1/namespace/team-a",
            &root,
            Some(&json!({"Name": "team-a"})),
        )
        .await;
    agent
        .json(
            Method::PUT,
            "/v1/acl/policy/team-a",
            &root,
            Some(&json!({"Rules": "namespace \"team-a\" {\n  policy = \"write\"\n}\n"})),
        )
        .await;
    let team = agent
        .json(
            Method::PUT,
            "/v1/acl/token",
            &root,
            Some(&json!({"Policies": ["team-a"]})),
        )
        .await;
    let team = team["SecretID"].as_str().unwrap().to_string();
    let (s, _) = agent.call(Method::GET, "/v1/jobs", Some(&team), None).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _) = agent
        .call(Method::GET, "/v1/jobs?namespace=team-a", Some(&team), None)
        .await;
    assert_eq!(s, StatusCode::OK);
    let mut smuggled = job("acl-smuggled");
    smuggled["Job"]["Namespace"] = json!("default");
    let (s, text) = agent
        .call(
            Method::PUT,
            "/v1/jobs?namespace=team-a",
            Some(&team),
            Some(&smuggled),
        )
        .await;
    assert_eq!(
        (s, text.as_str()),
        (StatusCode::FORBIDDEN, "Permission denied")
    );
    let (s, _) = agent
        .call(Method::GET, "/v1/job/acl-smuggled", Some(&root), None)
        .await;
    assert_eq!(
        s,
        StatusCode::NOT_FOUND,
        "a refused registration wrote the job"
    );
    let mut own = job("acl-team");
    own["Job"]["Namespace"] = json!("team-a");
    let (s, text) = agent
        .call(
            Method::PUT,
            "/v1/jobs?namespace=team-a",
            Some(&team),
            Some(&own),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{text}");
    let visible = agent.json(Method::GET, "/v1/namespaces", &team, None).await;
    let names: Vec<&str> = visible
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["Name"].as_str())
        .collect();
    assert_eq!(names, ["team-a"]);
    // Search looks in the namespace it checks (issue 52: it checked `?namespace=` and
    // searched the body's): a default-namespace reader naming team-a in the body sees
    // nothing of it; a management token finds the job there.
    for (path, body) in [
        (
            "/v1/search",
            json!({"Prefix": "acl-t", "Context": "all", "Namespace": "team-a"}),
        ),
        (
            "/v1/search/fuzzy",
            json!({"Text": "acl-t", "Context": "all", "Namespace": "team-a"}),
        ),
    ] {
        let (s, text) = agent
            .call(Method::PUT, path, Some(&read), Some(&body))
            .await;
        assert!(!text.contains("acl-team"), "{path}: {s} {text}");
        assert_eq!(s, StatusCode::FORBIDDEN, "{path}: {text}");
        let (s, text) = agent
            .call(Method::PUT, path, Some(&root), Some(&body))
            .await;
        assert!(
            s == StatusCode::OK && text.contains("acl-team"),
            "{path}: {s} {text}"
        );
    }

    // RPC from outside the servers: the scheduler's calls are refused, a node's calls need
    // that node's secret, the API's writes a management token.
    let pool = Pool::new(0, Default::default()).unwrap();
    let rpc = format!("{}:4647", agent.ip);
    let timeout = Duration::from_secs(10);
    let dequeue = ServiceRequest::EvalDequeue(EvalDequeueRequest {
        schedulers: vec!["batch".into()],
        timeout_ms: 10,
        scheduler_version: 1,
    });
    let r = pool.service(0, &rpc, dequeue, timeout).await;
    assert!(
        matches!(r, Err(ServiceError::PermissionDenied { .. })),
        "{r:?}"
    );
    let down = ServiceRequest::NodeUpdateStatus(NodeUpdateStatusRequest {
        node_id: node_id.as_str().into(),
        status: teamster_storage::model::NodeStatus::Down,
    });
    for token in [
        None,
        Some(read.as_str()),
        Some("00000000-0000-4000-8000-000000000000"),
    ] {
        let r = pool.service_as(0, &rpc, token, down.clone(), timeout).await;
        assert!(
            matches!(r, Err(ServiceError::PermissionDenied { .. })),
            "{r:?}"
        );
    }
    let node = agent
        .json(Method::GET, &format!("/v1/node/{node_id}"), &root, None)
        .await;
    assert_eq!(node["Status"], "ready", "a refused call changed the node");
    // The API's calls over RPC need what their HTTP route needs: `operator` read for the
    // broker's statistics, which the read-only token has.
    let stats = ServiceRequest::OperatorBrokerStats(BrokerStatsRequest);
    let r = pool.service_as(0, &rpc, None, stats.clone(), timeout).await;
    assert!(
        matches!(r, Err(ServiceError::PermissionDenied { .. })),
        "{r:?}"
    );
    let r = pool
        .service_as(0, &rpc, Some(read.as_str()), stats.clone(), timeout)
        .await;
    assert!(r.is_ok(), "{r:?}");
    let r = pool.service_as(0, &rpc, Some(&root), stats, timeout).await;
    assert!(r.is_ok(), "{r:?}");
    // A node's allocations are read with that node's secret only.
    let allocs = ServiceRequest::NodeGetClientAllocs(NodeGetClientAllocsRequest {
        node_id: node_id.as_str().into(),
        min_index: 0,
        wait_ms: 0,
    });
    for token in [None, Some(root.as_str())] {
        let r = pool
            .service_as(0, &rpc, token, allocs.clone(), timeout)
            .await;
        assert!(
            matches!(r, Err(ServiceError::PermissionDenied { .. })),
            "{r:?}"
        );
    }

    // The CLI with NOMAD_TOKEN.
    let (code, _, err) = agent.cli(&["job", "status"], None);
    assert_eq!(code, Some(1));
    assert!(err.contains("Permission denied"), "{err}");
    let (code, out, err) = agent.cli(&["job", "status"], Some(&read));
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("acl-web"), "{out}");
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("ops.hcl");
    std::fs::write(&rules, "node {\n  policy = \"write\"\n}\n").unwrap();
    let (code, out, err) = agent.cli(
        &[
            "acl",
            "policy",
            "apply",
            "--description",
            "ops",
            "ops",
            rules.to_str().unwrap(),
        ],
        Some(&root),
    );
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, _, err) = agent.cli(
        &["acl", "policy", "apply", "ops2", rules.to_str().unwrap()],
        Some(&read),
    );
    assert_eq!(code, Some(1));
    assert!(err.contains("Permission denied"), "{err}");
    let (code, out, err) = agent.cli(
        &[
            "acl", "token", "create", "--name", "ops", "--policy", "ops", "--json",
        ],
        Some(&root),
    );
    assert_eq!(code, Some(0), "{err}");
    let ops: Value = serde_json::from_str(&out).expect("token JSON");
    let ops_secret = ops["SecretID"].as_str().unwrap();
    let (code, out, err) = agent.cli(&["acl", "token", "self"], Some(ops_secret));
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("ops") && out.contains("client"), "{out}");
    let (code, out, _) = agent.cli(&["acl", "policy", "list"], Some(&root));
    assert_eq!(code, Some(0));
    assert!(out.contains("readonly") && out.contains("ops"), "{out}");
    let (code, out, _) = agent.cli(&["acl", "token", "list"], Some(&root));
    assert_eq!(code, Some(0));
    assert!(out.contains("reader") && !out.contains(&read), "{out}");
    let (code, _, err) = agent.cli(
        &[
            "acl",
            "token",
            "delete",
            ops["AccessorID"].as_str().unwrap(),
        ],
        Some(&root),
    );
    assert_eq!(code, Some(0), "{err}");
    let (code, _, _) = agent.cli(&["acl", "token", "self"], Some(ops_secret));
    assert_eq!(code, Some(1));

    // No secret in the log.
    let log = agent.log_text();
    for secret in [&root, &root2, &read] {
        assert!(
            !log.contains(secret.as_str()),
            "a secret is in the agent's log"
        );
    }
}

/// Who may make an RPC call from outside the servers, for the RPC matrix (the rule of
/// `needs()` in `src/server/endpoints/authz.rs`).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Caller {
    /// Anyone, with any token or none.
    Open,
    /// The secret of the node the call is about (of its allocations or registrations), and
    /// nothing else: not even a management token.
    NodeSecret,
    /// The node's secret or a token with node write (the management token here).
    NodeSecretOrWrite,
    /// What the call's HTTP route needs (a write, an operator or a management
    /// capability): the management token has it, the read-only token and the node secrets
    /// do not.
    Management,
    /// A server only: refused from outside whatever the token.
    ServerOnly,
    /// The call checks the secret in its own arguments: every caller gets the same answer.
    SameForAll,
}

/// Who holds a token, and the token, for the RPC matrix.
type Holder<'a> = (&'a str, &'a str);

/// A fake node registered over RPC with a known secret, for the RPC matrix.
fn rpc_node(n: u64) -> teamster_storage::model::Node {
    let mut node = teamster::scheduler::harness::mock_node(n);
    node.secret_id = format!("5ec0e7a1-0000-4000-8000-{n:012x}");
    node
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_refuses_callers_its_rule_does_not_allow() {
    use std::collections::{BTreeMap, BTreeSet};

    use teamster::rpc::service::acl::{
        AclBootstrapRequest, AclDeletePoliciesRequest, AclDeleteTokensRequest,
        AclResolveTokenRequest, AclUpsertPoliciesRequest, AclUpsertTokensRequest,
    };
    use teamster::rpc::service::acl::{OneTimeTokenExchangeRequest, OneTimeTokenUpsertRequest};
    use teamster::rpc::service::alloc::AllocStopRequest;
    use teamster::rpc::service::alloc::{AllocSignIdentitiesRequest, WorkloadIdentityRequest};
    use teamster::rpc::service::deployment::{
        DeploymentAllocHealthRequest, DeploymentFailRequest, DeploymentPauseRequest,
        DeploymentPromoteRequest,
    };
    use teamster::rpc::service::eval::{
        EvalAckRequest, EvalDequeueBatchRequest, EvalReapRequest, EvalWriteRequest,
    };
    use teamster::rpc::service::job::{
        JobBatchDeregisterRequest, JobDeregisterRequest, JobDispatchRequest, JobEvaluateRequest,
        JobPeriodicForceRequest, JobPlanRequest, JobRegisterRequest, JobRevertRequest,
        JobScaleRequest, JobStabilityRequest,
    };
    use teamster::rpc::service::namespace::{NamespaceDeleteRequest, NamespaceUpsertRequest};
    use teamster::rpc::service::node::{
        NodeDeregisterRequest, NodeEvaluateRequest, NodeRegisterRequest, NodeUpdateAllocRequest,
        NodeUpdateDrainRequest, NodeUpdateEligibilityRequest,
    };
    use teamster::rpc::service::operator::{
        AutopilotSetConfigRequest, KeyringDeleteRequest, KeyringListPublicRequest,
        KeyringRotateRequest, RaftJoinRequest, RaftRemovePeerRequest, ReconcileSummariesRequest,
        SchedulerSetConfigRequest, ServerHealthRequest, SnapshotRestoreRequest, SystemGcRequest,
    };
    use teamster::rpc::service::service_reg::{
        ServiceRegistrationDeleteRequest, ServiceRegistrationListRequest,
        ServiceRegistrationUpsertRequest,
    };
    use teamster::rpc::service::variables::{
        TemplateDep, TemplateReadRequest, TemplateReadSet, VariableOp, VariablesApplyRequest,
        VariablesRenewLockRequest,
    };
    use teamster::rpc::ServiceResponse;
    use teamster_storage::fsm::AllocClientReport;
    use teamster_storage::model::{
        AclPolicy, AclToken, ClientStatus, Constraint, DeploymentId, EvalId, Evaluation, JobId,
        Namespace, NamespaceSpec, NodeStatus, Plan, SchedulerConfiguration, SchedulingEligibility,
        ServiceRegistration,
    };
    use teamster_storage::raft_types::ServerAddr;

    let agent = Agent::start(2).expect("the agent starts");
    wait_for(Duration::from_secs(30), "the agent's API", || async {
        let resp = agent
            .http
            .get(agent.url("/v1/status/leader"))
            .send()
            .await
            .ok()?;
        (resp.status() == StatusCode::OK).then_some(())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", agent.log_text()));

    // The management token, and a read-only token that is denied every write.
    let boot = agent.json(Method::PUT, "/v1/acl/bootstrap", "", None).await;
    let root = boot["SecretID"].as_str().unwrap().to_string();
    let rules = "namespace \"default\" {\n  policy = \"read\"\n}\nnode {\n  policy = \"read\"\n}\n";
    agent
        .json(
            Method::PUT,
            "/v1/acl/policy/rpc-readonly",
            &root,
            Some(&json!({"Name": "rpc-readonly", "Rules": rules})),
        )
        .await;
    let reader = agent
        .json(
            Method::PUT,
            "/v1/acl/token",
            &root,
            Some(&json!({"Name": "rpc-reader", "Type": "client", "Policies": ["rpc-readonly"]})),
        )
        .await;
    let read = reader["SecretID"].as_str().unwrap().to_string();
    let raft = agent
        .json(Method::GET, "/v1/operator/raft/configuration", &root, None)
        .await;
    let me = &raft["Servers"][0];
    let server_id: u64 = me["ID"].as_str().unwrap().parse().unwrap();
    let server_addr = ServerAddr {
        name: me["Node"].as_str().unwrap().to_string(),
        rpc_addr: me["Address"].as_str().unwrap().to_string(),
        http_addr: format!("{}:4646", agent.ip),
    };

    // Two nodes registered over RPC (open): `a` is the node the node calls are about, `b`'s
    // secret is the denied one. Both heartbeat until the end.
    let pool = Pool::new(0, Default::default()).unwrap();
    let rpc = format!("{}:4647", agent.ip);
    let timeout = Duration::from_secs(10);
    let (node_a, node_b) = (rpc_node(1), rpc_node(2));
    let (a, a_secret) = (node_a.id.clone(), node_a.secret_id.clone());
    let b_secret = node_b.secret_id.clone();
    for node in [&node_a, &node_b] {
        let req =
            ServiceRequest::NodeRegister(Box::new(NodeRegisterRequest { node: node.clone() }));
        let r = pool.service_as(0, &rpc, None, req, timeout).await;
        assert!(matches!(r, Ok(ServiceResponse::NodeRegister(_))), "{r:?}");
    }
    let heartbeats = {
        let (pool, rpc) = (pool.clone(), rpc.clone());
        let nodes = [
            (node_a.id.clone(), a_secret.clone()),
            (node_b.id.clone(), b_secret.clone()),
        ];
        tokio::spawn(async move {
            loop {
                for (id, secret) in &nodes {
                    let beat = ServiceRequest::NodeUpdateStatus(NodeUpdateStatusRequest {
                        node_id: id.clone(),
                        status: NodeStatus::Ready,
                    });
                    let _ = pool.service_as(0, &rpc, Some(secret), beat, timeout).await;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };

    // A job whose allocation the scheduler places on node `a`, and a service registration of
    // that allocation: the node calls about an allocation or a registration need them.
    let mut web = teamster::scheduler::harness::mock_job("rpc-web", 1);
    web.constraints.push(Constraint {
        l_target: "${node.unique.id}".into(),
        r_target: a.to_string(),
        operand: "=".into(),
    });
    let register = ServiceRequest::JobRegister(Box::new(JobRegisterRequest {
        job: web.clone(),
        enforce_index: None,
    }));
    let r = pool
        .service_as(0, &rpc, Some(&root), register.clone(), timeout)
        .await;
    assert!(matches!(r, Ok(ServiceResponse::JobRegister(_))), "{r:?}");
    let alloc_id = wait_for(
        Duration::from_secs(30),
        "the job's allocation on node a",
        || async {
            let req = ServiceRequest::NodeGetClientAllocs(NodeGetClientAllocsRequest {
                node_id: a.clone(),
                min_index: 0,
                wait_ms: 0,
            });
            match pool
                .service_as(0, &rpc, Some(&a_secret), req, timeout)
                .await
            {
                Ok(ServiceResponse::NodeGetClientAllocs(r)) => {
                    r.alloc_indexes.first().map(|(id, _)| id.clone())
                }
                _ => None,
            }
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", agent.log_text()));
    // The job's deployment (a service job gets Nomad's default update strategy): the
    // deployment calls need the capability in its namespace, so their rows name it.
    let deployment = wait_for(Duration::from_secs(30), "the job's deployment", || async {
        let (status, text) = agent
            .call(Method::GET, "/v1/job/rpc-web/deployment", Some(&root), None)
            .await;
        let d: Value = serde_json::from_str(&text).ok()?;
        (status == StatusCode::OK)
            .then(|| d["ID"].as_str().map(DeploymentId::new))
            .flatten()
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", agent.log_text()));
    let registration = ServiceRegistration {
        id: format!("_nomad-task-{alloc_id}-web-rpc-svc-http"),
        service_name: "rpc-svc".into(),
        namespace: Namespace::new("default"),
        node_id: a.clone(),
        datacenter: "dc1".into(),
        job_id: JobId::new("rpc-web"),
        alloc_id: alloc_id.as_str().into(),
        address: "127.0.0.1".into(),
        port: 8080,
        ..ServiceRegistration::default()
    };
    let upsert_service =
        ServiceRequest::ServiceRegistrationUpsert(ServiceRegistrationUpsertRequest {
            services: vec![registration.clone()],
        });
    let r = pool
        .service_as(0, &rpc, Some(&a_secret), upsert_service.clone(), timeout)
        .await;
    assert!(r.is_ok(), "{r:?}");
    let list_services =
        ServiceRequest::ServiceRegistrationListByNode(ServiceRegistrationListRequest {
            node_id: a.to_string(),
        });
    let r = pool
        .service_as(0, &rpc, Some(&a_secret), list_services.clone(), timeout)
        .await;
    assert!(
        matches!(&r, Ok(ServiceResponse::ServiceRegistrationListByNode(l)) if l.len() == 1),
        "{r:?}"
    );

    // One row per call, in an order where no allowed call breaks a later row (node `a` is
    // deregistered last).
    let unknown = "0badc0de-0000-4000-8000-000000000000";
    let ack = EvalAckRequest {
        eval_id: EvalId::new(unknown),
        token: unknown.into(),
    };
    let eval_write = || {
        Box::new(EvalWriteRequest {
            eval: Evaluation::default(),
            token: unknown.into(),
        })
    };
    let job_ref = |id: &str| (Namespace::new("default"), JobId::new(id));
    let rows: Vec<(ServiceRequest, Caller)> = vec![
        // Open.
        (
            ServiceRequest::NodeRegister(Box::new(NodeRegisterRequest {
                node: node_b.clone(),
            })),
            Caller::Open,
        ),
        (
            ServiceRequest::AclResolveToken(AclResolveTokenRequest {
                secret_id: read.clone(),
            }),
            Caller::Open,
        ),
        (
            // The server itself, a voter already: nothing changes.
            ServiceRequest::OperatorRaftJoin(RaftJoinRequest {
                id: server_id,
                addr: server_addr.clone(),
            }),
            Caller::Open,
        ),
        (
            // Open, as Nomad's: done already, so refused as such.
            ServiceRequest::AclBootstrap(AclBootstrapRequest {
                secret_id: String::new(),
                reset_index: 0,
            }),
            Caller::Open,
        ),
        // The scheduler's calls.
        (
            ServiceRequest::EvalDequeue(EvalDequeueRequest {
                schedulers: vec!["batch".into()],
                timeout_ms: 10,
                scheduler_version: 1,
            }),
            Caller::ServerOnly,
        ),
        (
            ServiceRequest::EvalDequeueBatch(EvalDequeueBatchRequest {
                schedulers: vec!["batch".into()],
                timeout_ms: 10,
                scheduler_version: 1,
                max: 2,
            }),
            Caller::ServerOnly,
        ),
        (ServiceRequest::EvalAck(ack.clone()), Caller::ServerOnly),
        (ServiceRequest::EvalNack(ack.clone()), Caller::ServerOnly),
        (
            ServiceRequest::EvalAckBatch(vec![ack.clone()]),
            Caller::ServerOnly,
        ),
        (ServiceRequest::EvalUpdate(eval_write()), Caller::ServerOnly),
        (ServiceRequest::EvalCreate(eval_write()), Caller::ServerOnly),
        (
            ServiceRequest::EvalReblock(eval_write()),
            Caller::ServerOnly,
        ),
        (
            ServiceRequest::EvalReap(EvalReapRequest {
                evals: vec![EvalId::new(unknown)],
                allocs: vec![],
            }),
            Caller::ServerOnly,
        ),
        (
            ServiceRequest::PlanSubmit(Box::default()),
            Caller::ServerOnly,
        ),
        (
            ServiceRequest::PlanSubmitBatch(vec![Plan::default()]),
            Caller::ServerOnly,
        ),
        // The API's calls: what their HTTP routes need, which the read-only token and the
        // node secrets lack.
        (register, Caller::Management),
        (
            ServiceRequest::JobDeregister(JobDeregisterRequest {
                namespace: Namespace::new("default"),
                job_id: JobId::new("rpc-none"),
                purge: true,
            }),
            Caller::Management,
        ),
        (
            ServiceRequest::JobEvaluate(JobEvaluateRequest {
                namespace: Namespace::new("default"),
                job_id: JobId::new("rpc-web"),
            }),
            Caller::Management,
        ),
        (
            // The job garbage collector's purge, from a server's `_core` worker.
            ServiceRequest::JobBatchDeregister(JobBatchDeregisterRequest {
                jobs: vec![job_ref("rpc-none")],
            }),
            Caller::ServerOnly,
        ),
        (
            ServiceRequest::JobRevert(JobRevertRequest {
                namespace: Namespace::new("default"),
                job_id: JobId::new("rpc-web"),
                job_version: 0,
                enforce_prior_version: Some(0),
            }),
            Caller::Management,
        ),
        (
            ServiceRequest::JobPlan(Box::new(JobPlanRequest {
                job: web.clone(),
                diff: true,
            })),
            Caller::Management,
        ),
        (
            ServiceRequest::JobScale(Box::new(JobScaleRequest {
                namespace: Namespace::new("default"),
                job_id: JobId::new("rpc-web"),
                group: "web".into(),
                count: None,
                message: "the RPC matrix".into(),
                error: false,
                meta: BTreeMap::new(),
                job_modify_index: 0,
            })),
            Caller::Management,
        ),
        (
            ServiceRequest::JobStable(JobStabilityRequest {
                namespace: Namespace::new("default"),
                job_id: JobId::new("rpc-web"),
                version: 0,
                stable: true,
            }),
            Caller::Management,
        ),
        (
            ServiceRequest::JobPeriodicForce(JobPeriodicForceRequest {
                namespace: Namespace::new("default"),
                job_id: JobId::new("rpc-web"),
            }),
            Caller::Management,
        ),
        (
            ServiceRequest::JobDispatch(Box::new(JobDispatchRequest {
                namespace: Namespace::new("default"),
                job_id: JobId::new("rpc-web"),
                payload: vec![],
                meta: BTreeMap::new(),
                idempotency_token: String::new(),
                id_prefix_template: String::new(),
                priority: 0,
            })),
            Caller::Management,
        ),
        (
            ServiceRequest::SystemGc(SystemGcRequest),
            Caller::Management,
        ),
        (
            ServiceRequest::SystemReconcileSummaries(ReconcileSummariesRequest),
            Caller::Management,
        ),
        (
            // The allocation exists: `alloc-lifecycle` in its namespace.
            ServiceRequest::AllocStop(AllocStopRequest {
                alloc_id: alloc_id.as_str().into(),
            }),
            Caller::Management,
        ),
        (
            // Not a member: refused as such.
            ServiceRequest::OperatorRaftRemovePeer(RaftRemovePeerRequest::Id(server_id + 1000)),
            Caller::Management,
        ),
        (
            // A check-and-set index that never matches: nothing is written.
            ServiceRequest::OperatorSchedulerSetConfiguration(SchedulerSetConfigRequest {
                config: SchedulerConfiguration::default(),
                cas_index: Some(u64::MAX),
            }),
            Caller::Management,
        ),
        (
            // Not an image: refused before it reaches the log.
            ServiceRequest::OperatorSnapshotRestore(SnapshotRestoreRequest {
                image: b"not a snapshot".to_vec(),
            }),
            Caller::Management,
        ),
        (
            // A check-and-set index that never matches: nothing is written.
            ServiceRequest::OperatorAutopilotSetConfiguration(AutopilotSetConfigRequest {
                config: teamster_storage::model::AutopilotConfig::default(),
                cas_index: Some(u64::MAX),
            }),
            Caller::Management,
        ),
        (
            ServiceRequest::OperatorServerHealth(ServerHealthRequest),
            Caller::Management,
        ),
        (
            ServiceRequest::OperatorBrokerStats(BrokerStatsRequest),
            Caller::Management,
        ),
        (
            ServiceRequest::DeploymentFail(DeploymentFailRequest {
                deployment_id: deployment.clone(),
            }),
            Caller::Management,
        ),
        (
            ServiceRequest::DeploymentPause(DeploymentPauseRequest {
                deployment_id: deployment.clone(),
                pause: true,
            }),
            Caller::Management,
        ),
        (
            ServiceRequest::DeploymentPromote(DeploymentPromoteRequest {
                deployment_id: deployment.clone(),
                all: true,
                groups: vec![],
            }),
            Caller::Management,
        ),
        (
            ServiceRequest::DeploymentSetAllocHealth(DeploymentAllocHealthRequest {
                deployment_id: deployment.clone(),
                healthy: vec![alloc_id.as_str().into()],
                unhealthy: vec![],
            }),
            Caller::Management,
        ),
        (
            ServiceRequest::NamespaceUpsert(NamespaceUpsertRequest {
                namespaces: vec![NamespaceSpec {
                    name: "rpc-ns".into(),
                    description: "made by the RPC matrix".into(),
                    ..NamespaceSpec::default()
                }],
            }),
            Caller::Management,
        ),
        (
            ServiceRequest::NamespaceDelete(NamespaceDeleteRequest {
                names: vec!["rpc-ns".into()],
            }),
            Caller::Management,
        ),
        (
            ServiceRequest::AclUpsertPolicies(AclUpsertPoliciesRequest {
                policies: vec![AclPolicy {
                    name: "rpc-other".into(),
                    rules: rules.into(),
                    ..AclPolicy::default()
                }],
            }),
            Caller::Management,
        ),
        (
            ServiceRequest::AclDeletePolicies(AclDeletePoliciesRequest {
                names: vec!["rpc-other".into()],
            }),
            Caller::Management,
        ),
        (
            ServiceRequest::AclUpsertTokens(AclUpsertTokensRequest {
                tokens: vec![AclToken {
                    name: "rpc-made".into(),
                    policies: vec!["rpc-readonly".into()],
                    ..AclToken::default()
                }],
                expiration_ttl_ns: 0,
            }),
            Caller::Management,
        ),
        (
            ServiceRequest::AclDeleteTokens(AclDeleteTokensRequest {
                accessor_ids: vec![unknown.into()],
            }),
            Caller::Management,
        ),
        // A node's calls: its own secret.
        (
            ServiceRequest::NodeUpdateStatus(NodeUpdateStatusRequest {
                node_id: a.clone(),
                status: NodeStatus::Ready,
            }),
            Caller::NodeSecret,
        ),
        (
            ServiceRequest::NodeGetClientAllocs(NodeGetClientAllocsRequest {
                node_id: a.clone(),
                min_index: 0,
                wait_ms: 0,
            }),
            Caller::NodeSecret,
        ),
        (list_services, Caller::NodeSecret),
        (upsert_service, Caller::NodeSecret),
        (
            ServiceRequest::NodeUpdateAlloc(NodeUpdateAllocRequest {
                allocs: vec![AllocClientReport {
                    id: alloc_id.as_str().into(),
                    client_status: ClientStatus::Running,
                    client_description: "running".into(),
                    task_states: BTreeMap::new(),
                    modify_time: 0,
                    seq: 0,
                    deployment_status: None,
                }],
            }),
            Caller::NodeSecret,
        ),
        (
            ServiceRequest::ServiceRegistrationDelete(ServiceRegistrationDeleteRequest {
                namespace: "default".into(),
                ids: vec![(registration.service_name.clone(), registration.id.clone())],
                must_exist: false,
            }),
            // Or a token that may delete registrations (`DELETE /v1/service/:name/:id`).
            Caller::NodeSecretOrWrite,
        ),
        (
            ServiceRequest::NodeUpdateEligibility(NodeUpdateEligibilityRequest {
                node_id: a.clone(),
                eligibility: SchedulingEligibility::Eligible,
            }),
            Caller::NodeSecretOrWrite,
        ),
        (
            ServiceRequest::NodeUpdateDrain(NodeUpdateDrainRequest {
                node_id: a.clone(),
                drain: None,
                mark_eligible: false,
                meta: None,
            }),
            Caller::NodeSecretOrWrite,
        ),
        (
            // An operator's call only (`POST /v1/node/:id/evaluate`): a node's secret is
            // not enough.
            ServiceRequest::NodeEvaluate(NodeEvaluateRequest { node_id: a.clone() }),
            Caller::Management,
        ),
        (
            // A workload identity for a task of node a's allocation: node a only.
            ServiceRequest::AllocSignIdentities(AllocSignIdentitiesRequest {
                identities: vec![WorkloadIdentityRequest {
                    alloc_id: alloc_id.to_string(),
                    task: "t".into(),
                    identity: "default".into(),
                }],
            }),
            Caller::NodeSecret,
        ),
        (
            // Prepublished for the far future: it never signs.
            ServiceRequest::KeyringRotate(KeyringRotateRequest {
                publish_time: Some(i64::MAX),
                full: false,
            }),
            Caller::Management,
        ),
        (
            ServiceRequest::KeyringDelete(KeyringDeleteRequest {
                key_id: "00000000-0000-4000-8000-000000000000".into(),
            }),
            Caller::Management,
        ),
        (
            ServiceRequest::VariablesApply(VariablesApplyRequest {
                namespace: "default".into(),
                path: "rpc/matrix".into(),
                op: VariableOp::Delete,
                cas: None,
                lock_id: None,
            }),
            Caller::Management,
        ),
        (
            // For the read-only token, whoever asks: it names its own secret.
            ServiceRequest::AclUpsertOneTimeToken(OneTimeTokenUpsertRequest {
                secret_id: read.clone(),
            }),
            Caller::SameForAll,
        ),
        (
            ServiceRequest::AclExchangeOneTimeToken(OneTimeTokenExchangeRequest {
                one_time_secret_id: "00000000-0000-4000-8000-00000000beef".into(),
            }),
            Caller::SameForAll,
        ),
        (
            ServiceRequest::VariablesRenewLock(VariablesRenewLockRequest {
                namespace: "default".into(),
                path: "rpc/matrix".into(),
                lock_id: "00000000-0000-4000-8000-000000000000".into(),
            }),
            Caller::Management,
        ),
        (
            // Checked per variable and service by what the token may read: never refused
            // as a call (a credential that is no token reads nothing).
            ServiceRequest::TemplateRead(TemplateReadRequest {
                reads: vec![TemplateReadSet {
                    token: String::new(),
                    deps: vec![TemplateDep::Var {
                        namespace: "default".into(),
                        path: "rpc/matrix".into(),
                    }],
                }],
                min_index: 0,
                wait_ms: 0,
            }),
            Caller::SameForAll,
        ),
        (
            // The keys published at /.well-known/jwks.json: anyone's.
            ServiceRequest::KeyringListPublic(KeyringListPublicRequest),
            Caller::SameForAll,
        ),
        (
            ServiceRequest::NodeDeregister(NodeDeregisterRequest { node_id: a.clone() }),
            Caller::NodeSecretOrWrite,
        ),
    ];

    let (read, root) = (read.as_str(), root.as_str());
    let (a_secret, b_secret) = (a_secret.as_str(), b_secret.as_str());
    let mut covered = BTreeSet::new();
    let mut failures = Vec::new();
    for (req, caller) in rows {
        let name = req.method().name;
        assert!(covered.insert(name), "{name} has two rows");
        if caller == Caller::SameForAll {
            let mut outcomes = Vec::new();
            for (who, token) in [
                ("no token", None),
                ("the read-only token", Some(read)),
                ("node b's secret", Some(b_secret)),
                ("the management token", Some(root)),
            ] {
                let r = pool
                    .service_as(0, &rpc, token, req.clone(), req.method().timeout)
                    .await;
                outcomes.push((who, matches!(r, Err(ServiceError::PermissionDenied { .. }))));
            }
            if outcomes.iter().any(|(_, d)| *d != outcomes[0].1) {
                failures.push(format!(
                    "{name}: answers depend on the caller: {outcomes:?}"
                ));
            }
            // The read-only token's own one-time token is made; an unknown secret is
            // exchanged for nothing.
            let expect_denied = matches!(req, ServiceRequest::AclExchangeOneTimeToken(_));
            if outcomes[0].1 != expect_denied {
                failures.push(format!("{name}: denied = {}", outcomes[0].1));
            }
            continue;
        }
        // Refused first: an allowed call may change what a later case sees.
        let (refused, allowed): (Vec<Holder>, Vec<Holder>) = match caller {
            Caller::Open => (
                vec![],
                vec![
                    ("the read-only token", read),
                    ("node b's secret", b_secret),
                    ("the management token", root),
                ],
            ),
            Caller::NodeSecret => (
                vec![
                    ("node b's secret", b_secret),
                    ("the read-only token", read),
                    ("the management token", root),
                ],
                vec![("node a's secret", a_secret)],
            ),
            Caller::NodeSecretOrWrite => (
                vec![("node b's secret", b_secret), ("the read-only token", read)],
                // The node's own secret first: `Node.Deregister` removes it.
                vec![
                    ("node a's secret", a_secret),
                    ("the management token", root),
                ],
            ),
            Caller::Management => (
                vec![("the read-only token", read), ("node a's secret", a_secret)],
                vec![("the management token", root)],
            ),
            Caller::ServerOnly => (
                vec![
                    ("the read-only token", read),
                    ("node a's secret", a_secret),
                    ("the management token", root),
                ],
                vec![],
            ),
            Caller::SameForAll => unreachable!("handled above"),
        };
        let cases = std::iter::once(("no token", None, caller == Caller::Open))
            .chain(refused.into_iter().map(|(who, t)| (who, Some(t), false)))
            .chain(allowed.into_iter().map(|(who, t)| (who, Some(t), true)));
        for (who, token, allowed) in cases {
            let r = pool
                .service_as(0, &rpc, token, req.clone(), req.method().timeout)
                .await;
            let denied = matches!(r, Err(ServiceError::PermissionDenied { .. }));
            if denied == allowed {
                failures.push(format!("{name} ({caller:?}) with {who}: {r:?}"));
            }
        }
    }
    heartbeats.abort();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let every: BTreeSet<&str> = ServiceRequest::NAMES.iter().copied().collect();
    assert_eq!(
        every.len(),
        ServiceRequest::NAMES.len(),
        "a name is used twice"
    );
    assert_eq!(covered, every, "every RPC has a row in the matrix");
}

/// A call one server forwards to the leader carries its caller's token and is checked again
/// there: on a three-server cluster with ACLs on (plain TCP), a token that may only submit
/// jobs registers one through a follower's HTTP API, and the same call sent straight to the
/// leader's RPC port claiming to come from the follower (its raft id in the frame) is
/// refused without a token or with a read-only one. The scheduler's calls are still taken on
/// a member's word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_calls_are_checked_against_the_callers_token() {
    use teamster::rpc::service::job::JobRegisterRequest;
    use teamster::rpc::ServiceResponse;
    use teamster_cluster_tests::process::{ClusterOptions, ProcessCluster};

    let mut cluster = ProcessCluster::start(
        3,
        ClusterOptions {
            heartbeat: "100ms",
            election_timeout: "1s",
            extra_toml: "[acl]\nenabled = true\n".into(),
            ..ClusterOptions::default()
        },
    )
    .expect("the cluster starts");
    let leader = cluster
        .wait_leader(Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| {
            cluster.dump_logs(40);
            panic!("{e}")
        });
    let follower = (leader + 1) % 3;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let url = |i: usize, path: &str| format!("{}{path}", cluster.servers[i].http_addr());
    let call = |method: Method, url: String, token: Option<String>, body: Option<Value>| {
        let http = http.clone();
        async move {
            let mut req = http.request(method, url);
            if let Some(t) = token {
                req = req.header("X-Nomad-Token", t);
            }
            if let Some(b) = body {
                req = req.json(&b);
            }
            let resp = req.send().await.expect("the server answers");
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            (
                status,
                serde_json::from_str::<Value>(&text).unwrap_or(Value::String(text)),
            )
        }
    };

    // Bootstrap through the follower: `ACL.Bootstrap` is forwarded, open, and done once.
    let (status, boot) = call(Method::PUT, url(follower, "/v1/acl/bootstrap"), None, None).await;
    assert_eq!(status, StatusCode::OK, "{boot}");
    let root = boot["SecretID"].as_str().unwrap().to_string();
    // The follower checks HTTP requests against its own state: wait until it has a token.
    let known_on_follower = |secret: String| {
        let url = url(follower, "/v1/acl/token/self");
        let call = &call;
        async move {
            wait_for(
                Duration::from_secs(20),
                "the follower knows the token",
                || {
                    let (url, secret) = (url.clone(), secret.clone());
                    async move {
                        let (status, _) = call(Method::GET, url, Some(secret), None).await;
                        (status == StatusCode::OK).then_some(())
                    }
                },
            )
            .await
            .unwrap();
        }
    };
    known_on_follower(root.clone()).await;
    let policy = |name: &str, rules: &str| json!({"Name": name, "Rules": rules});
    let token =
        |name: &str, policy: &str| json!({"Name": name, "Type": "client", "Policies": [policy]});
    for (name, rules) in [
        (
            "submit-only",
            "namespace \"default\" {\n  capabilities = [\"submit-job\"]\n}\n",
        ),
        (
            "read-only",
            "namespace \"default\" {\n  policy = \"read\"\n}\n",
        ),
    ] {
        let (status, body) = call(
            Method::PUT,
            url(follower, &format!("/v1/acl/policy/{name}")),
            Some(root.clone()),
            Some(policy(name, rules)),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "policy {name}: {body}");
    }
    let mut secrets = Vec::new();
    for name in ["submit-only", "read-only"] {
        let (status, body) = call(
            Method::PUT,
            url(follower, "/v1/acl/token"),
            Some(root.clone()),
            Some(token(name, name)),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "token {name}: {body}");
        secrets.push(body["SecretID"].as_str().unwrap().to_string());
    }
    let (submit, read) = (secrets[0].clone(), secrets[1].clone());
    for secret in [&submit, &read] {
        known_on_follower(secret.clone()).await;
    }

    // Through the follower's HTTP API: the submit-only token registers (the leader accepts
    // the forwarded token), the read-only one is refused.
    let (status, body) = call(
        Method::PUT,
        url(follower, "/v1/jobs"),
        Some(submit.clone()),
        Some(job("fwd-submit")),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::OK,
        "a submit-job token through a follower: {body}"
    );
    let (status, body) = call(
        Method::PUT,
        url(follower, "/v1/jobs"),
        Some(read.clone()),
        Some(job("fwd-read")),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");

    // Straight to the leader's RPC port, claiming the follower's raft id.
    let (status, raft) = call(
        Method::GET,
        url(leader, "/v1/operator/raft/configuration"),
        Some(root.clone()),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{raft}");
    let follower_rpc = cluster.servers[follower].rpc_addr();
    let follower_id: u64 = raft["Servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Address"].as_str() == Some(follower_rpc.as_str()))
        .and_then(|s| s["ID"].as_str())
        .expect("the follower is in the raft configuration")
        .parse()
        .unwrap();
    let posing = Pool::new(follower_id, Default::default()).unwrap();
    let leader_rpc = cluster.servers[leader].rpc_addr();
    let forged = teamster::scheduler::harness::mock_job("fwd-forged", 1);
    let register = ServiceRequest::JobRegister(Box::new(JobRegisterRequest {
        job: forged,
        enforce_index: None,
    }));
    let timeout = Duration::from_secs(10);
    for (who, token) in [
        ("no token", None),
        ("the read-only token", Some(read.as_str())),
    ] {
        let r = posing
            .service_as(0, &leader_rpc, token, register.clone(), timeout)
            .await;
        assert!(
            matches!(r, Err(ServiceError::PermissionDenied { .. })),
            "a call posing as a member with {who} must be refused: {r:?}"
        );
    }
    let r = posing
        .service_as(0, &leader_rpc, Some(&submit), register.clone(), timeout)
        .await;
    assert!(matches!(r, Ok(ServiceResponse::JobRegister(_))), "{r:?}");
    // The scheduler's calls: on a member's word (mutual TLS is what makes it worth anything).
    let dequeue = ServiceRequest::EvalDequeue(EvalDequeueRequest {
        schedulers: vec!["batch".into()],
        timeout_ms: 10,
        scheduler_version: 1,
    });
    // The job garbage collector's purge: a follower's `_core` worker forwards it without a
    // token (nothing here is garbage, so nothing is purged).
    let purge = ServiceRequest::JobBatchDeregister(
        teamster::rpc::service::job::JobBatchDeregisterRequest {
            jobs: vec![(
                teamster_storage::model::Namespace::new("default"),
                teamster_storage::model::JobId::new("fwd-submit"),
            )],
        },
    );
    for call in [dequeue, purge] {
        let name = call.method().name;
        let r = posing.service_as(0, &leader_rpc, None, call, timeout).await;
        assert!(
            !matches!(r, Err(ServiceError::PermissionDenied { .. })),
            "{name} from a member: {r:?}"
        );
    }
    let (status, jobs) = call(
        Method::GET,
        url(leader, "/v1/jobs"),
        Some(root.clone()),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let mut ids: Vec<&str> = jobs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|j| j["ID"].as_str())
        .collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        ["fwd-forged", "fwd-submit"],
        "nothing refused was written"
    );

    // A client agent of its own: its allocation's logs and files through a server, which
    // forwards the caller's token (issue 52: it used to drop it, so even a management token
    // got 403 through a server).
    let client_ip = {
        let (block, _) = cluster.servers[0].ip.rsplit_once('.').unwrap();
        format!("{block}.101")
    };
    let servers: Vec<String> = cluster.servers.iter().map(|s| s.rpc_addr()).collect();
    let client = teamster_cluster_tests::client_process::ClientProcess::start(
        cluster.dir(),
        "client-acl",
        &client_ip,
        &servers,
        "\n[acl]\nenabled = true\n",
    )
    .unwrap();
    let (status, body) = call(
        Method::PUT,
        url(follower, "/v1/jobs"),
        Some(root.clone()),
        Some(job("fwd-logs")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let alloc_id = wait_for(
        Duration::from_secs(60),
        "the job running on the client",
        || async {
            let (_, allocs) = call(
                Method::GET,
                url(leader, "/v1/job/fwd-logs/allocations"),
                Some(root.clone()),
                None,
            )
            .await;
            allocs
                .as_array()?
                .iter()
                .find(|a| a["ClientStatus"] == "running")
                .and_then(|a| a["ID"].as_str().map(String::from))
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", client.log_tail(40)));
    for server in [leader, follower] {
        for token in [root.clone()] {
            let logs = wait_for(
                Duration::from_secs(20),
                "the task's output through a server",
                || async {
                    let (status, body) = call(
                        Method::GET,
                        url(
                            server,
                            &format!("/v1/client/fs/logs/{alloc_id}?task=t&type=stdout&plain=true"),
                        ),
                        Some(token.clone()),
                        None,
                    )
                    .await;
                    assert_ne!(
                        status,
                        StatusCode::FORBIDDEN,
                        "server {server} (leader {leader}): {body}\n{}",
                        client.log_tail(30)
                    );
                    let text = body.as_str().unwrap_or_default().to_string();
                    (status == StatusCode::OK && text.contains("acl-hello")).then_some(text)
                },
            )
            .await
            .unwrap();
            assert_eq!(logs.trim(), "acl-hello");
            let (status, body) = call(
                Method::GET,
                url(server, &format!("/v1/client/fs/ls/{alloc_id}?path=/")),
                Some(token.clone()),
                None,
            )
            .await;
            assert_eq!(status, StatusCode::OK, "{body}");
        }
        // No token, or one whose policy (Nomad's `read`) has no read-fs: refused.
        for token in [None, Some(read.clone())] {
            let (status, _) = call(
                Method::GET,
                url(server, &format!("/v1/client/fs/ls/{alloc_id}?path=/")),
                token,
                None,
            )
            .await;
            assert_eq!(status, StatusCode::FORBIDDEN);
        }
    }
}
