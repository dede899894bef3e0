//! Deployments over the HTTP API of a lone server: a deployment made by a plan (submitted
//! through `Plan.Submit` with the deployment, as the scheduler's reconciler submits it) is
//! listed, read, paused, resumed, promoted, given allocation health and failed with an
//! auto-revert through `/v1/deployment…`; bad input is a 400 naming the problem and changes
//! nothing; the event stream's `Deployment` topic carries it.

use futures::StreamExt;
use reqwest::{Method, StatusCode};
use teamster_storage::model::{
    AllocDeploymentStatus, Deployment, DeploymentId, DeploymentState, DeploymentStatus,
};

use super::*;

/// `path`'s error status and plain-text message.
async fn refused(api: &ApiClient, method: Method, path: &str, body: Value) -> (StatusCode, String) {
    let answer = if method == Method::GET {
        api.get::<Value>(path).await
    } else {
        api.request::<Value, Value>(method, path, Some(&body)).await
    };
    match answer {
        Err(crate::api::ApiError::Status { status, message }) => (status, message),
        other => panic!("{path}: expected an error, got {other:?}"),
    }
}

async fn post(api: &ApiClient, path: &str, body: Value) -> Value {
    api.request(Method::POST, path, Some(&body))
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Registers `web` at count 2 (version 0, marked stable), then at count 3 (version 1), whose
/// evaluation places two allocations (the first a canary) with a deployment through
/// `Plan.Submit`. Answers the deployment's ID and the allocations'.
async fn deployed(s: &TestServer) -> (String, Vec<String>) {
    s.register_node(1).await;
    s.register_job("web", 2, 64).await;
    let d0 = s.dequeue("service").await.expect("version 0's evaluation");
    ack(s, &d0).await;
    let _: Value = post(
        &s.api(),
        "/v1/job/web/stable",
        json!({ "JobID": "web", "JobVersion": 0, "Stable": true }),
    )
    .await;
    s.register_job("web", 3, 64).await;
    let d1 = s.dequeue("service").await.expect("version 1's evaluation");
    let job = s
        .state()
        .snapshot()
        .job_by_id("default", "web")
        .unwrap()
        .clone();
    assert_eq!(job.version, 1);
    let dep = DeploymentId::new(crate::scheduler::harness::fixture_uuid(7, 1));
    let node = mock_node(1).id;
    let allocs: Vec<Allocation> = (0..2)
        .map(|n| Allocation {
            deployment_id: dep.clone(),
            deployment_status: (n == 0).then(|| {
                Box::new(AllocDeploymentStatus {
                    canary: true,
                    ..AllocDeploymentStatus::default()
                })
            }),
            ..big_alloc(s, &d1, &node, 100 + n, 64)
        })
        .collect();
    let ids = allocs.iter().map(|a| a.id.to_string()).collect();
    let mut plan = plan_for(&d1, allocs, false);
    plan.deployment = Some(Deployment {
        id: dep.clone(),
        namespace: job.namespace.clone(),
        job_id: job.id.clone(),
        job_version: job.version,
        job_modify_index: job.modify_index,
        job_spec_modify_index: job.job_modify_index,
        job_create_index: job.create_index,
        eval_priority: job.priority,
        task_groups: [(
            "web".to_owned(),
            DeploymentState {
                auto_revert: true,
                desired_canaries: 1,
                desired_total: 3,
                progress_deadline: 600_000_000_000,
                ..DeploymentState::default()
            },
        )]
        .into(),
        status: DeploymentStatus::Running,
        status_description: "Deployment is running but requires manual promotion".into(),
        ..Deployment::default()
    });
    let result = submit(s, plan).await;
    assert!(result.deployment.is_some());
    ack(s, &d1).await;
    (dep.to_string(), ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_are_read_paused_promoted_and_failed_over_http() {
    let s = TestServer::start().await;
    let api = s.api();

    // Before any deployment: null, empty lists, 404.
    let none: Value = api.get("/v1/job/web/deployment").await.unwrap();
    assert!(none.is_null());
    let (status, msg) = refused(&api, Method::GET, "/v1/deployment/nope", Value::Null).await;
    assert_eq!(
        (status, msg.as_str()),
        (StatusCode::NOT_FOUND, "deployment not found")
    );
    let (status, msg) = refused(
        &api,
        Method::POST,
        "/v1/deployment/fail/nope",
        json!({ "DeploymentID": "nope" }),
    )
    .await;
    assert_eq!(
        (status, msg.as_str()),
        (StatusCode::NOT_FOUND, "deployment not found")
    );

    let (dep, allocs) = deployed(&s).await;
    let path = |what: &str| format!("/v1/deployment/{what}/{dep}");

    // Reads.
    let list: Vec<Value> = api.get("/v1/deployments").await.unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["ID"], dep.as_str());
    for (query, n) in [
        (format!("prefix={}", &dep[..4]), 1),
        ("prefix=ffffffff".to_string(), 0),
        ("namespace=other".to_string(), 0),
        ("namespace=*".to_string(), 1),
    ] {
        let found: Vec<Value> = api.get(&format!("/v1/deployments?{query}")).await.unwrap();
        assert_eq!(found.len(), n, "{query}");
    }
    let d: Value = api.get(&format!("/v1/deployment/{dep}")).await.unwrap();
    assert_eq!(d["Status"], "running");
    assert_eq!(d["JobVersion"], 1);
    let web = &d["TaskGroups"]["web"];
    assert_eq!(web["PlacedAllocs"], 2, "{d}");
    assert_eq!(web["PlacedCanaries"], json!([allocs[0]]));
    let stubs: Vec<Value> = api.get(&path("allocations")).await.unwrap();
    let mut ids: Vec<&str> = stubs.iter().filter_map(|a| a["ID"].as_str()).collect();
    ids.sort();
    let mut want: Vec<&str> = allocs.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(ids, want);
    let by_job: Vec<Value> = api.get("/v1/job/web/deployments").await.unwrap();
    assert_eq!(by_job.len(), 1);
    let latest: Value = api.get("/v1/job/web/deployment").await.unwrap();
    assert_eq!(latest["ID"], dep.as_str());

    // Bad input: a 400 naming the problem, and nothing changes.
    let before = d["ModifyIndex"].clone();
    let cases = [
        (
            path("promote"),
            json!({ "DeploymentID": "other", "All": true }),
            "Deployment ID does not match",
        ),
        (
            path("promote"),
            json!({ "All": true }),
            "DeploymentID must be specified",
        ),
        (
            path("promote"),
            json!({ "DeploymentID": dep, "All": true }),
            "Task group \"web\" has 0/1 healthy allocations",
        ),
        (
            path("promote"),
            json!({ "DeploymentID": dep, "Groups": ["api"] }),
            "has no task group \"api\"",
        ),
        (
            path("allocation-health"),
            json!({ "DeploymentID": dep, "HealthyAllocationIDs": ["nope"] }),
            "unknown alloc \"nope\"",
        ),
        (
            path("allocation-health"),
            json!({ "DeploymentID": dep }),
            "must specify at least one healthy/unhealthy allocation ID",
        ),
        (
            path("fail"),
            json!({ "DeploymentID": "other" }),
            "Deployment ID does not match",
        ),
        (path("pause"), json!(null), "Failed to parse request body"),
    ];
    for (p, body, want) in cases {
        let (status, msg) = refused(&api, Method::POST, &p, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{p} {body}: {msg}");
        assert!(msg.contains(want), "{p} {body}: {msg}");
    }
    let d: Value = api.get(&format!("/v1/deployment/{dep}")).await.unwrap();
    assert_eq!(d["ModifyIndex"], before, "refusals change nothing");

    // Pause (no evaluation), resume (an evaluation of the deployment watcher).
    let r = post(
        &api,
        &path("pause"),
        json!({ "DeploymentID": dep, "Pause": true }),
    )
    .await;
    assert_eq!(r["EvalID"], "");
    assert_eq!(r["EvalCreateIndex"], 0);
    assert!(r["DeploymentModifyIndex"].as_u64().unwrap() > 0);
    let d: Value = api.get(&format!("/v1/deployment/{dep}")).await.unwrap();
    assert_eq!(d["Status"], "paused");
    assert_eq!(d["StatusDescription"], "Deployment is paused");
    let r = post(
        &api,
        &path("pause"),
        json!({ "DeploymentID": dep, "Pause": false }),
    )
    .await;
    let eval: Value = api
        .get(&format!("/v1/evaluation/{}", r["EvalID"].as_str().unwrap()))
        .await
        .unwrap();
    assert_eq!(eval["TriggeredBy"], "deployment-watcher");
    assert_eq!(eval["DeploymentID"], dep.as_str());
    assert_eq!(r["EvalCreateIndex"], r["Index"]);
    let d: Value = api.get(&format!("/v1/deployment/{dep}")).await.unwrap();
    assert_eq!(d["Status"], "running");
    assert_eq!(
        d["StatusDescription"],
        "Deployment is running but requires manual promotion"
    );

    // The canary is marked healthy (python-nomad's spelling of the other list); then the
    // promotion goes through.
    let r = post(
        &api,
        &path("allocation-health"),
        json!({
            "DeploymentID": dep,
            "HealthyAllocationIDs": [allocs[0]],
            "UnHealthyAllocationIDs": [],
        }),
    )
    .await;
    assert!(!r["EvalID"].as_str().unwrap().is_empty());
    let d: Value = api.get(&format!("/v1/deployment/{dep}")).await.unwrap();
    assert_eq!(d["TaskGroups"]["web"]["HealthyAllocs"], 1);
    let r = post(
        &api,
        &path("promote"),
        json!({ "DeploymentID": dep, "All": true }),
    )
    .await;
    assert_eq!(r["RevertedJobVersion"], Value::Null);
    let d: Value = api.get(&format!("/v1/deployment/{dep}")).await.unwrap();
    assert_eq!(d["TaskGroups"]["web"]["Promoted"], true);
    assert_eq!(d["StatusDescription"], "Deployment is running");

    // Unblocking a running single-region deployment has nothing to do, as in Nomad OSS.
    let r = post(&api, &path("unblock"), json!({ "DeploymentID": dep })).await;
    assert_eq!(
        (r["EvalID"].clone(), r["Index"].clone()),
        (json!(""), json!(0))
    );
    let d: Value = api.get(&format!("/v1/deployment/{dep}")).await.unwrap();
    assert_eq!(d["Status"], "running");

    // Failing it reverts to the stable version 0, as a new version 2.
    let r = post(&api, &path("fail"), json!({})).await;
    assert_eq!(r["RevertedJobVersion"], 0);
    let d: Value = api.get(&format!("/v1/deployment/{dep}")).await.unwrap();
    assert_eq!(d["Status"], "failed");
    assert_eq!(
        d["StatusDescription"],
        "Deployment marked as failed - rolling back to job version 0"
    );
    let job: Value = api.get("/v1/job/web").await.unwrap();
    assert_eq!(job["Version"], 2);
    assert_eq!(job["TaskGroups"][0]["Count"], 2);
    // A finished deployment refuses every change.
    for (p, body, want) in [
        (path("fail"), json!({ "DeploymentID": dep }), "fail"),
        (
            path("pause"),
            json!({ "DeploymentID": dep, "Pause": true }),
            "pause",
        ),
        (
            path("promote"),
            json!({ "DeploymentID": dep, "All": true }),
            "promote",
        ),
        (path("unblock"), json!({ "DeploymentID": dep }), "unblock"),
    ] {
        let (status, msg) = refused(&api, Method::PUT, &p, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{p}: {msg}");
        assert_eq!(msg, format!("can't {want} terminal deployment"), "{p}");
    }

    // The event stream's Deployment topic, resumed from the start: the deployment's last
    // version, keyed by its ID and filtered by its job.
    let resp = api
        .get_stream("/v1/event/stream?topic=Deployment:web&index=1")
        .await
        .unwrap();
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    while !text.contains('\n') {
        let chunk = tokio::time::timeout(Duration::from_secs(10), body.next())
            .await
            .expect("a frame in time")
            .expect("the stream open")
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let frame: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let event = &frame["Events"][0];
    assert_eq!(event["Topic"], "Deployment");
    assert_eq!(event["Key"], dep.as_str());
    assert_eq!(event["FilterKeys"], json!(["web"]));
    assert_eq!(event["Payload"]["Deployment"]["Status"], "failed");
    // An open stream would hold the agent's graceful shutdown.
    drop(body);
    s.agent.shutdown().await;
}
