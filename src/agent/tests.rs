//! The whole agent with a lone server: the service layer's leader-side contract on real
//! openraft, sled and the HTTP API: jobs registered over HTTP, evaluations driven by hand
//! through `Eval.*` and `Plan.Submit` called in-process the way scheduler workers call them,
//! with the real scheduler running on a snapshot behind a small synchronous Planner bridge.

use std::time::Duration;

use serde_json::{json, Value};
use teamster_storage::fsm::{Command, NodeRegister};
use teamster_storage::model::{
    AllocId, Allocation, ClientStatus, DesiredStatus, EvalId, EvalStatus, EvalTrigger, Evaluation,
    NodeId, Plan, PlanResult, Resources,
};
use teamster_storage::state::{Snapshot, StateStore};

use super::config::AgentConfig;
use super::Agent;
use crate::api::ApiClient;
use crate::rpc::service::eval::{EvalAckRequest, EvalDequeueRequest, EvalWriteRequest};
use crate::rpc::{DequeuedEval, ServiceError, Services};
use crate::scheduler::harness::mock_node;
use crate::scheduler::SCHEDULER_VERSION;
use crate::scheduler::{new_scheduler, Planner, SchedulerEnv, SchedulerError, SchedulerSettings};
use crate::server::endpoints::Endpoints;

mod deployments;

struct TestServer {
    agent: Agent,
    _dir: tempfile::TempDir,
}

impl TestServer {
    async fn start() -> TestServer {
        Self::start_with(|_| {}).await
    }

    async fn start_with(tune: impl FnOnce(&mut AgentConfig)) -> TestServer {
        let dir = tempfile::tempdir().unwrap();
        let mut config = AgentConfig::lone_server(dir.path());
        tune(&mut config);
        let agent = Agent::start(config, false).await.unwrap();
        let server = agent.server().unwrap();
        let mut rx = server.leadership().subscribe();
        tokio::time::timeout(Duration::from_secs(20), rx.wait_for(|e| *e))
            .await
            .expect("leadership established in time")
            .unwrap();
        TestServer { agent, _dir: dir }
    }

    /// The service layer, called in process as the workers call it.
    fn ep(&self) -> Endpoints {
        self.agent.server().unwrap().endpoints().clone()
    }

    fn state(&self) -> StateStore {
        self.agent.server().unwrap().node().state().clone()
    }

    fn api(&self) -> ApiClient {
        ApiClient::new(&format!("http://{}", self.agent.http_addr()))
    }

    async fn dequeue(&self, scheduler: &str) -> Option<DequeuedEval> {
        self.ep()
            .eval_dequeue(EvalDequeueRequest {
                schedulers: vec![scheduler.to_string()],
                timeout_ms: 2000,
                scheduler_version: SCHEDULER_VERSION,
            })
            .await
            .unwrap()
            .map(|d| *d)
    }

    async fn register_node(&self, n: u64) -> u64 {
        self.agent
            .server()
            .unwrap()
            .node()
            .write_local(Command::NodeRegister(NodeRegister {
                node: mock_node(n),
                evals: Vec::new(),
            }))
            .await
            .unwrap()
            .index
    }

    async fn register_job(&self, id: &str, count: u32, memory_mb: u32) {
        let job = json!({
            "ID": id,
            "Type": "service",
            "Datacenters": ["dc1"],
            "TaskGroups": [{
                "Name": "web",
                "Count": count,
                "Tasks": [{
                    "Name": "web",
                    "Driver": "mock",
                    "Resources": { "CPU": 100, "MemoryMB": memory_mb }
                }]
            }]
        });
        let _: Value = self
            .api()
            .request(
                reqwest::Method::POST,
                "/v1/jobs",
                Some(&json!({ "Job": job })),
            )
            .await
            .unwrap();
    }

    /// Dequeue → scheduler on a snapshot at WaitIndex → Plan.Submit / Eval.* → Ack.
    async fn process_one(&self, scheduler: &str) -> Evaluation {
        let d = self.dequeue(scheduler).await.expect("an evaluation");
        let snapshot = self
            .state()
            .snapshot_min_index(d.wait_index, Duration::from_secs(5))
            .await
            .unwrap();
        let planner = EndpointsPlanner {
            ep: self.ep(),
            token: d.token.clone(),
            state: self.state(),
            rt: tokio::runtime::Handle::current(),
        };
        let eval = d.eval.clone();
        tokio::task::spawn_blocking(move || run_scheduler(planner, snapshot, eval))
            .await
            .unwrap()
            .unwrap();
        self.ep()
            .eval_ack(EvalAckRequest {
                eval_id: d.eval.id.clone(),
                token: d.token,
            })
            .await
            .unwrap();
        d.eval
    }
}

fn run_scheduler(
    mut planner: EndpointsPlanner,
    snapshot: Snapshot,
    eval: Evaluation,
) -> Result<(), SchedulerError> {
    let mut rng = rand::rngs::mock::StepRng::new(7, 13);
    let env = SchedulerEnv {
        now: 1_700_000_000_000_000_000,
        rng: &mut rng,
        settings: SchedulerSettings::default(),
        ready_nodes: None,
    };
    let mut scheduler = new_scheduler(eval.eval_type, snapshot, &mut planner, env)?;
    scheduler.process(&eval)
}

/// The synchronous Planner over the in-process service layer (what a worker does).
struct EndpointsPlanner {
    ep: Endpoints,
    token: String,
    state: StateStore,
    rt: tokio::runtime::Handle,
}

fn planner_err(operation: &'static str, e: ServiceError) -> SchedulerError {
    SchedulerError::Planner {
        operation,
        reason: e.to_string(),
    }
}

impl EndpointsPlanner {
    fn write(&self, eval: Evaluation) -> Box<EvalWriteRequest> {
        Box::new(EvalWriteRequest {
            eval,
            token: self.token.clone(),
        })
    }
}

impl Planner for EndpointsPlanner {
    fn submit_plan(
        &mut self,
        mut plan: Plan,
    ) -> Result<(PlanResult, Option<Snapshot>), SchedulerError> {
        plan.eval_token = self.token.clone();
        let result = *self
            .rt
            .block_on(self.ep.plan_submit(Box::new(plan)))
            .map_err(|e| planner_err("submit plan", e))?;
        if result.refresh_index == 0 {
            return Ok((result, None));
        }
        let snapshot = self
            .rt
            .block_on(
                self.state
                    .snapshot_min_index(result.refresh_index, Duration::from_secs(5)),
            )
            .map_err(|e| planner_err("submit plan", ServiceError::internal(e.to_string())))?;
        Ok((result, Some(snapshot)))
    }

    fn update_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        let req = self.write(eval);
        self.rt
            .block_on(self.ep.eval_update(req))
            .map(|_| ())
            .map_err(|e| planner_err("update eval", e))
    }

    fn create_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        let req = self.write(eval);
        self.rt
            .block_on(self.ep.eval_create(req))
            .map(|_| ())
            .map_err(|e| planner_err("create eval", e))
    }

    fn reblock_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        let req = self.write(eval);
        self.rt
            .block_on(self.ep.eval_reblock(req))
            .map(|_| ())
            .map_err(|e| planner_err("reblock eval", e))
    }
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_job_is_placed_through_dequeue_plan_submit_and_ack() {
    let s = TestServer::start().await;
    s.register_node(1).await;
    s.register_node(2).await;
    s.register_job("web", 3, 256).await;

    let eval = s.process_one("service").await;
    assert_eq!(eval.job_id.as_str(), "web");

    let snap = s.state().snapshot();
    let allocs: Vec<_> = snap.allocs_by_job(&eval.namespace, &eval.job_id).collect();
    assert_eq!(allocs.len(), 3, "three allocations committed");
    let stored = snap.eval_by_id(&eval.id).unwrap();
    assert_eq!(stored.status, EvalStatus::Complete);
    let ep = s.ep();
    eventually("broker drained", || {
        let st = ep.broker().stats();
        st.total_unacked == 0 && st.total_ready == 0
    })
    .await;

    // The same through the HTTP API.
    let api = s.api();
    let stubs: Vec<Value> = api.get("/v1/job/web/allocations").await.unwrap();
    assert_eq!(stubs.len(), 3);
    assert!(stubs.iter().all(|a| a["EvalID"] == eval.id.as_str()));
    let one: Value = api
        .get(&format!(
            "/v1/allocation/{}",
            stubs[0]["ID"].as_str().unwrap()
        ))
        .await
        .unwrap();
    assert_eq!(one["Job"]["ID"], "web");
    let all: Vec<Value> = api.get("/v1/allocations").await.unwrap();
    assert_eq!(all.len(), 3);
    let evals: Vec<Value> = api.get("/v1/job/web/evaluations").await.unwrap();
    assert_eq!(evals.len(), 1);
    assert_eq!(evals[0]["Status"], "complete");
    let prefix = &eval.id.as_str()[..4];
    let by_prefix: Vec<Value> = api
        .get(&format!("/v1/evaluations?prefix={prefix}"))
        .await
        .unwrap();
    assert!(by_prefix.iter().any(|e| e["ID"] == eval.id.as_str()));
    let got: Value = api
        .get(&format!("/v1/evaluation/{}", eval.id))
        .await
        .unwrap();
    assert_eq!(got["JobID"], "web");
    assert!(api.get::<Value>("/v1/evaluation/nope").await.is_err());
    let stats: Value = api.get("/v1/operator/scheduler/broker").await.unwrap();
    assert_eq!(stats["Leader"], true);
    assert_eq!(stats["TotalReady"], 0);

    // Scheduler configuration: read, CAS-write with a stale index (refused), write.
    let conf: Value = api
        .get("/v1/operator/scheduler/configuration")
        .await
        .unwrap();
    let mut sc = conf["SchedulerConfig"].clone();
    let modify = sc["ModifyIndex"].as_u64().unwrap();
    sc["SchedulerAlgorithm"] = "spread".into();
    let r: Value = api
        .request(
            reqwest::Method::PUT,
            &format!("/v1/operator/scheduler/configuration?cas={}", modify + 1000),
            Some(&sc),
        )
        .await
        .unwrap();
    assert_eq!(r["Updated"], false);
    let r: Value = api
        .request(
            reqwest::Method::PUT,
            "/v1/operator/scheduler/configuration",
            Some(&sc),
        )
        .await
        .unwrap();
    assert_eq!(r["Updated"], true);
    let conf: Value = api
        .get("/v1/operator/scheduler/configuration")
        .await
        .unwrap();
    assert_eq!(conf["SchedulerConfig"]["SchedulerAlgorithm"], "spread");
    assert_eq!(conf["SchedulerConfig"]["SupervisorFraction"], 0.3);
    assert_eq!(
        conf["SchedulerConfig"]["PreemptionConfig"]["SystemSchedulerEnabled"],
        true
    );
    // A preemption setting for an unknown scheduler or a supervisor fraction outside (0, 1]
    // is a 400 naming the field, and changes nothing.
    let index = conf["SchedulerConfig"]["ModifyIndex"].clone();
    let mut unknown = conf["SchedulerConfig"].clone();
    unknown["PreemptionConfig"]["GpuSchedulerEnabled"] = true.into();
    let mut fraction = conf["SchedulerConfig"].clone();
    fraction["SupervisorFraction"] = 1.5.into();
    for (bad, field) in [
        (unknown, "GpuSchedulerEnabled"),
        (fraction, "SupervisorFraction"),
    ] {
        let e = api
            .request::<Value, Value>(
                reqwest::Method::PUT,
                "/v1/operator/scheduler/configuration",
                Some(&bad),
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("400") && e.contains(field), "{e}");
    }
    let conf: Value = api
        .get("/v1/operator/scheduler/configuration")
        .await
        .unwrap();
    assert_eq!(conf["SchedulerConfig"]["ModifyIndex"], index);
    s.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_tokens_and_wrong_versions_are_refused() {
    let s = TestServer::start().await;
    s.register_node(1).await;
    s.register_job("web", 1, 256).await;

    match s
        .ep()
        .eval_dequeue(EvalDequeueRequest {
            schedulers: vec!["service".into()],
            timeout_ms: 100,
            scheduler_version: SCHEDULER_VERSION + 1,
        })
        .await
    {
        Err(ServiceError::SchedulerVersion { caller, leader }) => {
            assert_eq!((caller, leader), (SCHEDULER_VERSION + 1, SCHEDULER_VERSION));
        }
        other => panic!("{other:?}"),
    }
    let d = s.dequeue("service").await.unwrap();
    assert!(d.wait_index >= d.eval.modify_index && d.wait_index > 0);
    let wrong = "not-the-token".to_string();
    match s
        .ep()
        .eval_ack(EvalAckRequest {
            eval_id: d.eval.id.clone(),
            token: wrong.clone(),
        })
        .await
    {
        Err(ServiceError::Rejected { reason }) => assert!(reason.contains("token"), "{reason}"),
        other => panic!("{other:?}"),
    }
    let plan = Plan {
        eval_id: d.eval.id.clone(),
        eval_token: wrong.clone(),
        priority: 50,
        ..Plan::default()
    };
    match s.ep().plan_submit(Box::new(plan)).await {
        Err(ServiceError::Rejected { .. }) => {}
        other => panic!("{other:?}"),
    }
    let mut created = d.eval.clone();
    created.id = EvalId::new("00000000-0000-4000-8000-000000000001");
    created.previous_eval = d.eval.id.clone();
    match s
        .ep()
        .eval_create(Box::new(EvalWriteRequest {
            eval: created,
            token: wrong,
        }))
        .await
    {
        Err(ServiceError::Rejected { .. }) => {}
        other => panic!("{other:?}"),
    }
    // The right token nacks; the eval comes back after the nack delay with a new token.
    s.ep()
        .eval_nack(EvalAckRequest {
            eval_id: d.eval.id.clone(),
            token: d.token.clone(),
        })
        .await
        .unwrap();
    let again = s.dequeue("service").await.expect("redelivered");
    assert_eq!(again.eval.id, d.eval.id);
    assert_ne!(again.token, d.token);
    s.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_without_room_blocks_and_a_new_node_releases_it() {
    let s = TestServer::start().await;
    s.register_node(1).await;
    // 8192 MB per node: two allocations of 5000 MB need two nodes.
    s.register_job("big", 2, 5000).await;
    let eval = s.process_one("service").await;
    let snap = s.state().snapshot();
    assert_eq!(snap.allocs_by_job(&eval.namespace, &eval.job_id).count(), 1);
    let blocked: Vec<_> = snap
        .evals_by_job(&eval.namespace, &eval.job_id)
        .filter(|e| e.status == EvalStatus::Blocked)
        .map(|e| e.id.clone())
        .collect();
    assert_eq!(blocked.len(), 1, "a blocked eval was created");
    let ep = s.ep();
    eventually("the blocked eval is tracked", || {
        ep.blocked().stats().total_blocked == 1
    })
    .await;
    assert_eq!(ep.broker().stats().total_ready, 0);

    // A second node: the blocked eval goes back to the broker and places the rest.
    s.register_node(2).await;
    let released = s.process_one("service").await;
    assert_eq!(released.id, blocked[0]);
    let snap = s.state().snapshot();
    assert_eq!(snap.allocs_by_job(&eval.namespace, &eval.job_id).count(), 2);
    assert_eq!(ep.blocked().stats().total_blocked, 0);
    s.agent.shutdown().await;
}

fn delivery(d: &DequeuedEval) -> EvalAckRequest {
    EvalAckRequest {
        eval_id: d.eval.id.clone(),
        token: d.token.clone(),
    }
}

async fn ack(s: &TestServer, d: &DequeuedEval) {
    s.ep().eval_ack(delivery(d)).await.unwrap();
}

async fn nack(s: &TestServer, d: &DequeuedEval) {
    s.ep().eval_nack(delivery(d)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eval_past_the_delivery_limit_is_marked_failed_with_a_delayed_follow_up() {
    let s = TestServer::start_with(|c| {
        let b = &mut c.server.eval_broker;
        b.delivery_limit = 2;
        b.nack_initial_reenqueue_delay = Duration::from_millis(20);
        b.nack_subsequent_reenqueue_delay = Duration::from_millis(20);
        b.failed_followup_baseline_delay = Duration::from_millis(300);
        b.failed_followup_delay_range = Duration::from_millis(100);
    })
    .await;
    s.register_job("flaky", 1, 64).await;
    let first = s.dequeue("service").await.unwrap();
    nack(&s, &first).await;
    let second = s.dequeue("service").await.unwrap();
    assert_eq!(second.eval.id, first.eval.id);
    nack(&s, &second).await;

    // The reaper writes it failed, linked to a follow-up that waits before it is delivered.
    let state = s.state();
    let id = first.eval.id.clone();
    eventually("the eval is marked failed", || {
        state
            .snapshot()
            .eval_by_id(&id)
            .is_some_and(|e| e.status == EvalStatus::Failed)
    })
    .await;
    let snap = state.snapshot();
    let failed = snap.eval_by_id(&id).unwrap();
    assert_eq!(
        failed.status_description,
        "evaluation reached delivery limit (2)"
    );
    let follow_up = snap.eval_by_id(&failed.next_eval).expect("a follow-up");
    assert_eq!(follow_up.triggered_by, EvalTrigger::FailedFollowUp);
    assert_eq!(follow_up.status, EvalStatus::Pending);
    assert!(follow_up.wait >= 300_000_000);
    let next = s
        .dequeue("service")
        .await
        .expect("the follow-up, after its wait");
    assert_eq!(next.eval.id, follow_up.id);
    s.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evals_superseded_while_their_job_was_busy_are_written_canceled() {
    let s = TestServer::start_with(|c| {
        c.server.eval_broker.reap_cancelable_interval = Duration::from_millis(100);
    })
    .await;
    for count in 1..=3 {
        s.register_job("busy", count, 64).await;
    }
    let state = s.state();
    let snap = state.snapshot();
    let mut evals: Vec<_> = snap.evals_by_job("default", "busy").cloned().collect();
    evals.sort_by_key(|e| e.create_index);
    assert_eq!(evals.len(), 3);
    // The broker takes evals from the change stream: wait until it holds all three (one
    // ready, two pending behind it) before racing it.
    let ep = s.ep();
    eventually("all three evals in the broker", || {
        let st = ep.broker().stats();
        st.total_ready == 1 && st.total_pending == 2
    })
    .await;
    let d = s.dequeue("service").await.unwrap();
    assert_eq!(d.eval.id, evals[0].id, "one eval per job in flight");
    ack(&s, &d).await;
    // The newest takes the slot; the middle one was covered by it and is canceled.
    let next = s.dequeue("service").await.unwrap();
    assert_eq!(next.eval.id, evals[2].id);
    let middle = evals[1].id.clone();
    eventually("the superseded eval is canceled", || {
        state
            .snapshot()
            .eval_by_id(&middle)
            .is_some_and(|e| e.status == EvalStatus::Canceled)
    })
    .await;
    s.agent.shutdown().await;
}

fn big_alloc(
    s: &TestServer,
    d: &DequeuedEval,
    node: &NodeId,
    n: u64,
    memory_mb: u64,
) -> Allocation {
    let job = s
        .state()
        .snapshot()
        .job_by_id(&d.eval.namespace, &d.eval.job_id)
        .unwrap()
        .clone();
    Allocation {
        id: AllocId::new(crate::scheduler::harness::fixture_uuid(9, n)),
        namespace: d.eval.namespace.clone(),
        eval_id: d.eval.id.clone(),
        name: format!("{}.web[0]", job.id),
        node_id: node.clone(),
        job_id: job.id.clone(),
        job_version: job.version,
        task_group: "web".into(),
        resources: Resources {
            cpu: 100,
            memory_mb,
            disk_mb: 0,
            memory_max_mb: 0,
            cores: 0,
        },
        desired_status: DesiredStatus::Run,
        client_status: ClientStatus::Pending,
        ..Allocation::default()
    }
}

fn plan_for(d: &DequeuedEval, allocs: Vec<Allocation>, all_at_once: bool) -> Plan {
    let mut plan = Plan {
        eval_id: d.eval.id.clone(),
        eval_token: d.token.clone(),
        priority: 50,
        all_at_once,
        ..Plan::default()
    };
    for a in allocs {
        plan.node_allocation
            .entry(a.node_id.clone())
            .or_default()
            .push(a);
    }
    plan
}

async fn submit(s: &TestServer, plan: Plan) -> PlanResult {
    *s.ep().plan_submit(Box::new(plan)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_conflicting_plans_never_overcommit_a_node_and_all_at_once_is_all_or_nothing() {
    let s = TestServer::start().await;
    s.register_node(1).await;
    s.register_node(2).await;
    let n1 = mock_node(1).id;
    let n2 = mock_node(2).id;
    for j in ["a", "b", "c"] {
        s.register_job(j, 1, 64).await;
    }
    let da = s.dequeue("service").await.unwrap();
    let db = s.dequeue("service").await.unwrap();
    let dc = s.dequeue("service").await.unwrap();

    // Two plans of 6000 MB each for node 1 (8192 MB), submitted together: one fits.
    let pa = plan_for(&da, vec![big_alloc(&s, &da, &n1, 1, 6000)], false);
    let pb = plan_for(&db, vec![big_alloc(&s, &db, &n1, 2, 6000)], false);
    let (ra, rb) = tokio::join!(submit(&s, pa), submit(&s, pb));
    let (won, lost) = if ra.rejected_nodes.is_empty() {
        (ra, rb)
    } else {
        (rb, ra)
    };
    assert_eq!(won.node_allocation[&n1].len(), 1);
    assert!(won.alloc_index > 0 && won.refresh_index == 0);
    assert_eq!(lost.rejected_nodes, vec![n1.clone()]);
    assert!(lost.node_allocation.values().all(Vec::is_empty));
    assert!(
        lost.refresh_index > 0,
        "a partial result asks for a refresh"
    );

    // All at once: node 2 would fit, node 1 is full, so nothing is committed.
    let pc = plan_for(
        &dc,
        vec![
            big_alloc(&s, &dc, &n1, 3, 6000),
            big_alloc(&s, &dc, &n2, 4, 1000),
        ],
        true,
    );
    let rc = submit(&s, pc).await;
    assert!(rc.node_allocation.values().all(Vec::is_empty), "{rc:?}");
    assert!(rc.refresh_index > 0);
    let snap = s.state().snapshot();
    let on_n1: u64 = snap
        .allocs_by_node(n1.as_str())
        .filter(|a| !a.terminal_status())
        .map(|a| a.resources.memory_mb)
        .sum();
    assert_eq!(on_n1, 6000);
    assert_eq!(snap.allocs_by_node(n2.as_str()).count(), 0);
    for d in [&da, &db, &dc] {
        ack(&s, d).await;
    }
    s.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_blocked_eval_of_a_job_is_canceled_as_a_duplicate() {
    let s = TestServer::start().await;
    let blocked = |id: &str, snapshot_index: u64| Evaluation {
        id: EvalId::new(id),
        namespace: "default".into(),
        priority: 50,
        eval_type: teamster_storage::model::JobType::Service,
        triggered_by: EvalTrigger::QueuedAllocs,
        job_id: "dup".into(),
        status: EvalStatus::Blocked,
        snapshot_index,
        ..Evaluation::default()
    };
    let node = s.agent.server().unwrap().node().clone();
    let write = |e: Evaluation| {
        let node = node.clone();
        async move {
            node.write_local(Command::EvalUpsert(teamster_storage::fsm::EvalUpsert {
                evals: vec![e],
            }))
            .await
            .unwrap()
            .index
        }
    };
    let first = write(blocked("00000000-0000-4000-8000-0000000000d1", 1)).await;
    write(blocked("00000000-0000-4000-8000-0000000000d2", first)).await;
    let state = s.state();
    eventually("the older blocked eval is canceled", || {
        state
            .snapshot()
            .eval_by_id("00000000-0000-4000-8000-0000000000d1")
            .is_some_and(|e| e.status == EvalStatus::Canceled)
    })
    .await;
    let snap = state.snapshot();
    let older = snap
        .eval_by_id("00000000-0000-4000-8000-0000000000d1")
        .unwrap();
    assert!(older
        .status_description
        .contains("existing blocked evaluation"));
    let newer = snap
        .eval_by_id("00000000-0000-4000-8000-0000000000d2")
        .unwrap();
    assert_eq!(newer.status, EvalStatus::Blocked);
    let ep = s.ep();
    assert_eq!(ep.blocked().stats().total_blocked, 1);
    s.agent.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_eval_broker_in_the_scheduler_configuration_stops_and_restores_the_broker() {
    let s = TestServer::start().await;
    s.register_job("paused", 1, 64).await;
    let api = s.api();
    let set = |pause: bool| {
        let api = api.clone();
        async move {
            let conf: Value = api
                .get("/v1/operator/scheduler/configuration")
                .await
                .unwrap();
            let mut sc = conf["SchedulerConfig"].clone();
            sc["PauseEvalBroker"] = pause.into();
            let r: Value = api
                .request(
                    reqwest::Method::PUT,
                    "/v1/operator/scheduler/configuration",
                    Some(&sc),
                )
                .await
                .unwrap();
            assert_eq!(r["Updated"], true);
        }
    };
    set(true).await;
    let ep = s.ep();
    eventually("the broker is paused", || !ep.broker().enabled()).await;
    match s
        .ep()
        .eval_dequeue(EvalDequeueRequest {
            schedulers: vec!["service".into()],
            timeout_ms: 100,
            scheduler_version: SCHEDULER_VERSION,
        })
        .await
    {
        Err(ServiceError::Disabled { reason }) => assert_eq!(reason, "eval broker disabled"),
        other => panic!("{other:?}"),
    }
    set(false).await;
    eventually("the broker is back", || ep.broker().enabled()).await;
    let d = s.dequeue("service").await.expect("the restored eval");
    assert_eq!(d.eval.job_id.as_str(), "paused");
    s.agent.shutdown().await;
}

#[tokio::test]
async fn client_alloc_queries_wake_on_server_changes_not_on_the_clients_own_reports() {
    use crate::rpc::service::node::{NodeGetClientAllocsRequest, NodeUpdateAllocRequest};
    use teamster_storage::fsm::AllocClientReport;

    let s = TestServer::start().await;
    s.register_node(1).await;
    s.register_job("web", 2, 256).await;
    s.process_one("service").await;
    let node_id = mock_node(1).id;
    let query = |min_index: u64, wait_ms: u64| NodeGetClientAllocsRequest {
        node_id: node_id.clone(),
        min_index,
        wait_ms,
    };
    let first = s.ep().node_get_client_allocs(query(0, 0)).await.unwrap();
    assert_eq!(
        first.changed.len(),
        2,
        "the first answer carries everything"
    );
    assert!(first.changed.iter().all(|c| c.job.is_some()));

    // The client reports both running: the allocations change, but only on its side.
    let reports = first
        .changed
        .iter()
        .map(|c| AllocClientReport {
            id: c.alloc.id.clone(),
            client_status: ClientStatus::Running,
            client_description: "Tasks are running".into(),
            task_states: Default::default(),
            modify_time: 1,
            seq: 0,
            deployment_status: None,
        })
        .collect();
    let reported_at = s
        .ep()
        .node_update_alloc(NodeUpdateAllocRequest { allocs: reports })
        .await
        .unwrap();
    assert!(reported_at > first.index);
    let running = s.state().snapshot();
    assert!(running
        .allocs_by_node(node_id.as_str())
        .all(|a| a.client_status == ClientStatus::Running && a.modify_index == reported_at));

    // The next query waits its whole (short) wait and sends nothing back in full.
    let quiet = s
        .ep()
        .node_get_client_allocs(query(first.index, 300))
        .await
        .unwrap();
    assert!(quiet.changed.is_empty(), "{:?}", quiet.changed);
    assert_eq!(quiet.alloc_indexes.len(), 2, "both still listed");

    // A server-side change (the job stopped) wakes a waiting query and is sent in full.
    let waiting = {
        let ep = s.ep();
        let req = query(quiet.index, 30_000);
        tokio::spawn(async move { ep.node_get_client_allocs(req).await })
    };
    let _: Value = s
        .api()
        .request::<(), Value>(reqwest::Method::DELETE, "/v1/job/web", None)
        .await
        .unwrap();
    s.process_one("service").await;
    let woken = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the query answered before its wait")
        .unwrap()
        .unwrap();
    assert_eq!(woken.changed.len(), 2);
    assert!(woken
        .changed
        .iter()
        .all(|c| c.alloc.desired_status == DesiredStatus::Stop));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_accepted_in_full_writes_its_evaluation_state_in_the_same_commit() {
    let s = TestServer::start().await;
    s.register_node(1).await;
    let n1 = mock_node(1).id;
    for j in ["a", "b"] {
        s.register_job(j, 1, 64).await;
    }
    let da = s.dequeue("service").await.unwrap();
    let db = s.dequeue("service").await.unwrap();
    let complete = |d: &DequeuedEval| Evaluation {
        status: EvalStatus::Complete,
        status_description: "batched".into(),
        ..d.eval.clone()
    };
    // Two plans of 6000 MB for one 8192 MB node, each carrying its evaluation's final state.
    let mut pa = plan_for(&da, vec![big_alloc(&s, &da, &n1, 1, 6000)], false);
    pa.eval_update = Some(complete(&da));
    let mut pb = plan_for(&db, vec![big_alloc(&s, &db, &n1, 2, 6000)], false);
    pb.eval_update = Some(complete(&db));
    let (ra, rb) = tokio::join!(submit(&s, pa), submit(&s, pb));
    let ((won, dw), (lost, dl)) = if ra.rejected_nodes.is_empty() {
        ((ra, &da), (rb, &db))
    } else {
        ((rb, &db), (ra, &da))
    };
    assert!(won.refresh_index == 0 && lost.refresh_index > 0);
    let snapshot = s.state().snapshot();
    // The winner's evaluation was written complete by its plan's own commit.
    let w = snapshot.eval_by_id(&dw.eval.id).unwrap();
    assert_eq!(w.status, EvalStatus::Complete);
    assert_eq!(w.status_description, "batched");
    assert_eq!(w.modify_index, won.alloc_index);
    // The refused one's state was not written: its worker must schedule it again.
    let l = snapshot.eval_by_id(&dl.eval.id).unwrap();
    assert_eq!(l.status, EvalStatus::Pending);
    let _ = lost;
    // A plan with nothing to place still writes the state it carries.
    s.register_job("c", 1, 64).await;
    let dc = s.dequeue("service").await.unwrap();
    let mut pc = plan_for(&dc, Vec::new(), false);
    pc.eval_update = Some(complete(&dc));
    let rc = submit(&s, pc).await;
    assert!(rc.alloc_index > 0, "committed: {rc:?}");
    let c = s
        .state()
        .snapshot()
        .eval_by_id(&dc.eval.id)
        .unwrap()
        .clone();
    assert_eq!(c.status, EvalStatus::Complete);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_plans_and_acks_is_answered_item_by_item() {
    let s = TestServer::start().await;
    s.register_node(1).await;
    let n1 = mock_node(1).id;
    for j in ["a", "b"] {
        s.register_job(j, 1, 64).await;
    }
    let da = s.dequeue("service").await.unwrap();
    let db = s.dequeue("service").await.unwrap();
    let pa = plan_for(&da, vec![big_alloc(&s, &da, &n1, 1, 6000)], false);
    let pb = plan_for(&db, vec![big_alloc(&s, &db, &n1, 2, 6000)], false);
    let mut stale = pb.clone();
    stale.eval_token = "not-the-token".into();
    let answers = s.ep().plan_submit_batch(vec![pa, pb, stale]).await.unwrap();
    assert_eq!(answers.len(), 3);
    // The first fits, the second finds the node full, the third is refused by its token.
    let first = answers[0].as_ref().unwrap();
    assert!(
        first.refresh_index == 0 && first.alloc_index > 0,
        "{first:?}"
    );
    let second = answers[1].as_ref().unwrap();
    assert_eq!(second.rejected_nodes, vec![n1.clone()]);
    assert!(answers[2].is_err(), "{:?}", answers[2]);
    let acks = s
        .ep()
        .eval_ack_batch(vec![
            EvalAckRequest {
                eval_id: da.eval.id.clone(),
                token: da.token.clone(),
            },
            EvalAckRequest {
                eval_id: db.eval.id.clone(),
                token: "not-the-token".into(),
            },
        ])
        .await
        .unwrap();
    assert!(acks[0].is_ok());
    assert!(acks[1].is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_servers_of_a_client_are_listed_and_replaced() {
    use reqwest::Method;
    // A server-only agent lists the raft members and has no client's list to replace.
    let lone = TestServer::start().await;
    let members: Vec<String> = lone.api().get("/v1/agent/servers").await.unwrap();
    assert_eq!(members.len(), 1, "{members:?}");
    let refused = lone
        .api()
        .request_text::<()>(Method::PUT, "/v1/agent/servers?address=10.1.1.1:4647", None)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("Client only endpoint"),
        "{refused}"
    );

    // With a client: its servers, replaced by PUT (or POST, as python-nomad sends it).
    let s = TestServer::start_with(|c| c.client.enabled = true).await;
    let api = s.api();
    let before: Vec<String> = api.get("/v1/agent/servers").await.unwrap();
    assert_eq!(before.len(), 1, "the local server: {before:?}");
    api.request_text::<()>(
        Method::POST,
        "/v1/agent/servers?address=10.1.1.1:4647&address=srv-2.example:4647",
        None,
    )
    .await
    .unwrap();
    // The given list, in order; a heartbeat answered meanwhile may append the servers it
    // names (a client learns servers from its heartbeats).
    let given = ["10.1.1.1:4647", "srv-2.example:4647"];
    let after: Vec<String> = api.get("/v1/agent/servers").await.unwrap();
    assert!(after.starts_with(&given.map(String::from)), "{after:?}");
    for bad in ["/v1/agent/servers", "/v1/agent/servers?address=10.1.1.1"] {
        let e = api
            .request_text::<()>(Method::PUT, bad, None)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("400"), "{bad}: {e}");
    }
    let unchanged: Vec<String> = api.get("/v1/agent/servers").await.unwrap();
    assert!(
        unchanged.starts_with(&given.map(String::from)),
        "{unchanged:?}"
    );
    // Put the real server back before the agent shuts down.
    api.request_text::<()>(
        Method::PUT,
        &format!("/v1/agent/servers?address={}", before[0]),
        None,
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_may_carry_only_its_own_evaluations_state() {
    let s = TestServer::start().await;
    s.register_node(1).await;
    for j in ["a", "b"] {
        s.register_job(j, 1, 64).await;
    }
    let da = s.dequeue("service").await.unwrap();
    let db = s.dequeue("service").await.unwrap();
    let mut plan = plan_for(&da, Vec::new(), false);
    plan.eval_update = Some(Evaluation {
        status: EvalStatus::Complete,
        ..db.eval.clone()
    });
    let e = s.ep().plan_submit(Box::new(plan)).await.unwrap_err();
    assert!(
        e.to_string().contains("must be the plan's own evaluation"),
        "{e}"
    );
    let other = s
        .state()
        .snapshot()
        .eval_by_id(&db.eval.id)
        .unwrap()
        .clone();
    assert_eq!(other.status, EvalStatus::Pending, "nothing written");
}

/// The client role judges a service allocation healthy by its group's `migrate` block (no
/// deployment placed it) and its status sync carries the verdict to the state store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reports_a_running_service_allocation_healthy_to_the_servers() {
    let s = TestServer::start_with(|c| c.client.enabled = true).await;
    let node_id = s.agent.client().unwrap().node_id();
    eventually("the client's node is registered", || {
        s.state()
            .snapshot()
            .nodes()
            .any(|n| n.id.as_str() == node_id)
    })
    .await;
    let job = json!({
        "ID": "web",
        "Type": "service",
        "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "web",
            "Count": 1,
            "Update": { "MinHealthyTime": 1_000_000_000u64, "HealthyDeadline": 30_000_000_000u64 },
            "Tasks": [{
                "Name": "web",
                "Driver": "mock",
                "Config": { "run_for": "1h" },
                "Resources": { "CPU": 100, "MemoryMB": 64 }
            }]
        }]
    });
    let _: Value = s
        .api()
        .request(
            reqwest::Method::POST,
            "/v1/jobs",
            Some(&json!({ "Job": job })),
        )
        .await
        .unwrap();
    s.process_one("service").await;
    let alloc = || {
        s.state()
            .snapshot()
            .allocs_by_job("default", "web")
            .next()
            .map(|a| (**a).clone())
    };
    eventually("the allocation is reported healthy", || {
        alloc().is_some_and(|a| a.is_healthy())
    })
    .await;
    let a = alloc().unwrap();
    assert_eq!(a.node_id.as_str(), node_id);
    let deployment = s
        .state()
        .snapshot()
        .latest_deployment("default", "web")
        .expect("the first version rolls out through a deployment");
    assert_eq!(a.deployment_id, deployment.id, "the deployment placed it");
    assert_eq!(a.client_status, ClientStatus::Running);
    let status = a.deployment_status.unwrap();
    assert!(!status.timestamp.is_zero());
    assert!(status.modify_index > 0, "written by the client's report");
    s.agent.shutdown().await;
}
