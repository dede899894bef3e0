//! The event stream (`GET /v1/event/stream`) on a 3-server cluster with a client: a
//! follower's stream delivers a job's life (registered, its evaluation, its allocation
//! placed, running and complete) in index order, filtered by topic and key; a stream resumed
//! from an index replays what changed after it; a bad topic is a 400.

use std::time::Duration;

use serde_json::{json, Value};
use teamster_cluster_tests::api::register;
use teamster_cluster_tests::client_process::{wait_node_status, ClientProcess};
use teamster_cluster_tests::process::{ClusterOptions, ProcessCluster};
use teamster_cluster_tests::wait_for;
use tokio::time::Instant;

const FORMATION: Duration = Duration::from_secs(30);

/// Reads NDJSON frames from a streaming response.
struct Frames {
    resp: reqwest::Response,
    buf: Vec<u8>,
}

impl Frames {
    async fn open(url: &str) -> anyhow::Result<Frames> {
        Frames::open_as(url, None).await
    }

    /// Open a stream sending `token` as `X-Nomad-Token`.
    async fn open_as(url: &str, token: Option<&str>) -> anyhow::Result<Frames> {
        let mut req = reqwest::Client::new().get(url);
        if let Some(token) = token {
            req = req.header("X-Nomad-Token", token);
        }
        let resp = req.send().await?;
        anyhow::ensure!(resp.status().is_success(), "{url}: {}", resp.status());
        Ok(Frames {
            resp,
            buf: Vec::new(),
        })
    }

    /// The next frame, or `None` at the deadline or the end of the stream.
    async fn next(&mut self, deadline: Instant) -> anyhow::Result<Option<Value>> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                return Ok(Some(serde_json::from_slice(&line)?));
            }
            match tokio::time::timeout_at(deadline, self.resp.chunk()).await {
                Err(_) => return Ok(None),
                Ok(chunk) => match chunk? {
                    Some(bytes) => self.buf.extend_from_slice(&bytes),
                    None => return Ok(None),
                },
            }
        }
    }

    /// Events until `done` says the collected ones are enough; frames' indexes must not go
    /// backward.
    async fn events_until(
        &mut self,
        within: Duration,
        done: impl Fn(&[Value]) -> bool,
    ) -> anyhow::Result<Vec<Value>> {
        let deadline = Instant::now() + within;
        let mut events = Vec::new();
        let mut last = 0;
        while !done(&events) {
            let Some(frame) = self.next(deadline).await? else {
                anyhow::bail!("the stream ended or stalled; got {events:#?}");
            };
            anyhow::ensure!(frame.get("Error").is_none(), "error frame {frame}");
            let Some(index) = frame["Index"].as_u64() else {
                continue; // a heartbeat
            };
            anyhow::ensure!(index >= last, "index went back from {last} to {index}");
            last = index;
            events.extend(frame["Events"].as_array().cloned().unwrap_or_default());
        }
        Ok(events)
    }

    /// Reads until an `{"Error": …}` frame, which must be the stream's last: its message.
    async fn error_then_end(&mut self, within: Duration) -> anyhow::Result<String> {
        let deadline = Instant::now() + within;
        loop {
            let Some(frame) = self.next(deadline).await? else {
                anyhow::bail!("the stream ended or stalled without an error frame");
            };
            if let Some(e) = frame.get("Error") {
                let message = e.as_str().unwrap_or_default().to_string();
                let after = self.next(Instant::now() + Duration::from_secs(5)).await?;
                anyhow::ensure!(after.is_none(), "a frame after the error: {after:?}");
                return Ok(message);
            }
        }
    }
}

/// A token of `policy` (expiring after `ttl`, if given): its secret and accessor.
async fn client_token(
    api: &teamster::api::ApiClient,
    policy: &str,
    ttl: Option<&str>,
) -> anyhow::Result<(String, String)> {
    let mut body = json!({ "Name": policy, "Type": "client", "Policies": [policy] });
    if let Some(ttl) = ttl {
        body["ExpirationTTL"] = json!(ttl);
    }
    let t: Value = api
        .request(reqwest::Method::PUT, "/v1/acl/token", Some(&body))
        .await?;
    Ok((
        t["SecretID"].as_str().unwrap_or_default().to_string(),
        t["AccessorID"].as_str().unwrap_or_default().to_string(),
    ))
}

/// With ACLs on, a stream ends with an error frame when its token is deleted, when its
/// policy is deleted (it no longer allows the topic), and when the token expires; a stream
/// of a token that keeps its rights goes on.
#[tokio::test]
async fn a_stream_ends_when_its_token_is_revoked_or_expires() -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let mut c = ProcessCluster::start(
        1,
        ClusterOptions {
            extra_toml: "[acl]\nenabled = true\n".into(),
            ..ClusterOptions::default()
        },
    )?;
    let leader = c.wait_leader(FORMATION).await?;
    let base = c.servers[leader].http_addr();
    let anon = c.servers[leader].api();
    let boot: Value = anon
        .request(reqwest::Method::PUT, "/v1/acl/bootstrap", Some(&json!({})))
        .await?;
    let root = anon.clone().with_scope(teamster::api::RequestScope {
        token: boot["SecretID"].as_str().map(str::to_string),
        ..Default::default()
    });
    for name in ["reader", "keeper", "dropped"] {
        let rules = r#"namespace "default" { policy = "read" }"#;
        root.request::<_, Value>(
            reqwest::Method::PUT,
            &format!("/v1/acl/policy/{name}"),
            Some(&json!({ "Name": name, "Rules": rules })),
        )
        .await?;
    }
    let (deleted, deleted_accessor) = client_token(&root, "reader", None).await?;
    let (kept, _) = client_token(&root, "keeper", None).await?;
    let (unpoliced, _) = client_token(&root, "dropped", None).await?;
    let (expiring, _) = client_token(&root, "reader", Some("4s")).await?;
    let url = format!("{base}/v1/event/stream?topic=Job");

    // Without a token the stream is refused outright.
    let none = reqwest::get(&url).await?;
    assert_eq!(none.status(), reqwest::StatusCode::FORBIDDEN);

    let mut s_deleted = Frames::open_as(&url, Some(&deleted)).await?;
    let mut s_kept = Frames::open_as(&url, Some(&kept)).await?;
    let mut s_unpoliced = Frames::open_as(&url, Some(&unpoliced)).await?;
    let mut s_expiring = Frames::open_as(&url, Some(&expiring)).await?;
    register(&root, teamster_cluster_tests::api::small_job("seen")).await?;
    let seen = |events: &[Value]| events.iter().any(|e| e["Key"] == "seen");
    for s in [&mut s_deleted, &mut s_kept, &mut s_unpoliced] {
        s.events_until(Duration::from_secs(20), seen).await?;
    }

    root.request::<Value, Value>(
        reqwest::Method::DELETE,
        &format!("/v1/acl/token/{deleted_accessor}"),
        None,
    )
    .await?;
    let why = s_deleted.error_then_end(Duration::from_secs(20)).await?;
    assert!(why.contains("ACL token"), "{why}");

    root.request::<Value, Value>(reqwest::Method::DELETE, "/v1/acl/policy/dropped", None)
        .await?;
    let why = s_unpoliced.error_then_end(Duration::from_secs(20)).await?;
    assert!(why.contains("ACL token"), "{why}");

    // The expiring token's stream ends on its own once the TTL has passed.
    let why = s_expiring.error_then_end(Duration::from_secs(30)).await?;
    assert!(why.contains("ACL token"), "{why}");

    // The stream of the token that kept its rights still delivers.
    register(&root, teamster_cluster_tests::api::small_job("later")).await?;
    s_kept
        .events_until(Duration::from_secs(20), |events| {
            events.iter().any(|e| e["Key"] == "later")
        })
        .await?;
    Ok(())
}

fn alloc_complete(events: &[Value]) -> bool {
    events.iter().any(|e| {
        e["Topic"] == "Allocation" && e["Payload"]["Allocation"]["ClientStatus"] == "complete"
    })
}

#[tokio::test]
async fn a_followers_stream_delivers_a_jobs_life_in_order_and_resumes_from_an_index(
) -> anyhow::Result<()> {
    teamster_cluster_tests::init_test_tracing();
    let mut c = ProcessCluster::start(3, ClusterOptions::default())?;
    let leader = c.wait_leader(FORMATION).await?;
    let follower = (leader + 1) % 3;
    let api = c.servers[leader].api();
    let rpcs: Vec<String> = c.servers.iter().map(|s| s.rpc_addr()).collect();
    let ip = {
        let ip = &c.servers[0].ip;
        let (block, _) = ip.rsplit_once('.').expect("an IPv4 address");
        format!("{block}.101")
    };
    let client = ClientProcess::start(c.dir(), "client-1", &ip, &rpcs, "")?;
    let node_id = wait_for(Duration::from_secs(10), "node id", || async {
        client.node_id().await
    })
    .await?;
    wait_node_status(&api, &node_id, "ready", Duration::from_secs(15)).await?;

    let base = c.servers[follower].http_addr();
    let bad = reqwest::get(format!("{base}/v1/event/stream?topic=Jobz")).await?;
    assert_eq!(bad.status(), reqwest::StatusCode::BAD_REQUEST);

    let topics = "topic=Job:ev&topic=Evaluation:ev&topic=Allocation:ev";
    let mut live = Frames::open(&format!("{base}/v1/event/stream?{topics}")).await?;
    let mut job = teamster_cluster_tests::api::small_job("ev");
    job["TaskGroups"][0]["Tasks"][0]["Config"] = json!({ "run_for": "500ms" });
    register(&api, job).await?;
    // Another job's events are filtered out by key.
    register(&api, teamster_cluster_tests::api::small_job("other")).await?;
    let events = live
        .events_until(Duration::from_secs(60), alloc_complete)
        .await?;
    for e in &events {
        let key_or_job = e["Key"] == "ev" || e["FilterKeys"][0] == "ev";
        assert!(key_or_job, "an event of another job: {e}");
    }
    let first = &events[0];
    assert_eq!(
        (&first["Topic"], &first["Type"]),
        (&json!("Job"), &json!("JobRegistered")),
        "{events:#?}"
    );
    let registered_at = first["Index"].as_u64().unwrap();
    let statuses: Vec<&str> = events
        .iter()
        .filter(|e| e["Topic"] == "Allocation")
        .filter_map(|e| e["Payload"]["Allocation"]["ClientStatus"].as_str())
        .collect();
    assert_eq!(statuses.first(), Some(&"pending"), "{statuses:?}");
    assert_eq!(statuses.last(), Some(&"complete"), "{statuses:?}");
    assert!(
        events.iter().any(|e| e["Topic"] == "Evaluation"
            && e["Type"] == "EvaluationUpdated"
            && e["Payload"]["Evaluation"]["Status"] == "complete"),
        "{events:#?}"
    );

    // Resumed from the registration: what changed after it comes first, without new writes.
    let mut resumed = Frames::open(&format!(
        "{base}/v1/event/stream?{topics}&index={registered_at}"
    ))
    .await?;
    let replayed = resumed
        .events_until(Duration::from_secs(10), alloc_complete)
        .await?;
    assert!(
        replayed
            .iter()
            .all(|e| e["Index"].as_u64().unwrap() > registered_at),
        "{replayed:#?}"
    );
    assert!(
        replayed.iter().any(|e| e["Topic"] == "Evaluation"),
        "{replayed:#?}"
    );
    Ok(())
}
