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
        let resp = reqwest::Client::new().get(url).send().await?;
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
        client.node_id()
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
