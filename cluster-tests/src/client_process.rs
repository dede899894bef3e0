//! Client agents as real processes (`[server] enabled = false`, `[client] enabled = true`),
//! next to a [`ProcessCluster`](crate::process::ProcessCluster), and helpers that place an
//! allocation by hand (acting as a scheduler worker: `Eval.Dequeue`, `Plan.Submit`,
//! `Eval.Update`, `Eval.Ack`) for tests that do not depend on the scheduler.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::Value;
use teamster::api::ApiClient;
use teamster::rpc::service::eval::{EvalAckRequest, EvalDequeueRequest, EvalWriteRequest};
use teamster::rpc::{Pool, RpcConfig, ServiceRequest, ServiceResponse};
use teamster::scheduler::SCHEDULER_VERSION;
use teamster_storage::model::{Allocation, ClientStatus, DesiredStatus, EvalStatus, Plan};

use crate::process::teamster_bin;
use crate::wait_for;

/// One client agent process.
pub struct ClientProcess {
    /// Its name.
    pub name: String,
    /// Its loopback IP (its HTTP API listens on `ip:4646`).
    pub ip: String,
    /// Its data directory (kept across restarts).
    pub data_dir: PathBuf,
    /// Environment variables of its next starts (a crash point, say).
    pub env: Vec<(String, String)>,
    config_path: PathBuf,
    log_path: PathBuf,
    child: Option<Child>,
}

impl ClientProcess {
    /// Write the config of a client named `name` on `ip`, registering with `servers` (RPC
    /// addresses), under `dir`; `extra` is appended to its `[client]` table. Then start it.
    pub fn start(
        dir: &Path,
        name: &str,
        ip: &str,
        servers: &[String],
        extra: &str,
    ) -> anyhow::Result<ClientProcess> {
        let data_dir = dir.join(name);
        std::fs::create_dir_all(&data_dir)?;
        let list = servers
            .iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ");
        let config = format!(
            "name = {name:?}\ndata_dir = {data:?}\nbind_addr = {ip:?}\nlog_level = \"info\"\n\
             [server]\nenabled = false\n\
             [client]\nenabled = true\nservers = [{list}]\nupdate_interval = \"50ms\"\n{extra}\n",
            data = data_dir.display().to_string(),
        );
        let config_path = dir.join(format!("{name}.toml"));
        std::fs::write(&config_path, config)?;
        let mut c = ClientProcess {
            name: name.to_string(),
            ip: ip.to_string(),
            data_dir,
            env: Vec::new(),
            config_path,
            log_path: dir.join(format!("{name}.log")),
            child: None,
        };
        c.spawn()?;
        Ok(c)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)?;
        let child = Command::new(teamster_bin())
            .arg("agent")
            .arg("--config")
            .arg(&self.config_path)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawning {}", self.name))?;
        self.child = Some(child);
        Ok(())
    }

    /// SIGKILL it (its tasks keep running) and reap it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `signal` to the agent process (its tasks run in their own process groups and
    /// are not reached): SIGSTOP freezes its heartbeats, SIGCONT lets them go on.
    pub fn signal(&self, signal: i32) {
        if let Some(c) = &self.child {
            // SAFETY: kill(2) has no memory effects.
            unsafe {
                libc::kill(c.id() as i32, signal);
            }
        }
    }

    /// Wait until the process has ended by itself (killed at a crash point, say): false if
    /// it still runs after `timeout`.
    pub async fn wait_exited(&mut self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match self.child.as_mut().map(|c| c.try_wait()) {
                None | Some(Ok(Some(_))) | Some(Err(_)) => return true,
                Some(Ok(None)) if tokio::time::Instant::now() >= deadline => return false,
                Some(Ok(None)) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// Start it again with the same config and data dir.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        self.spawn()
    }

    /// Its HTTP API.
    pub fn api(&self) -> ApiClient {
        ApiClient::new(&format!("http://{}:4646", self.ip))
    }

    /// Its node id, as its agent reports it (`stats.client.node_id` of `/v1/agent/self`),
    /// once it is serving.
    pub async fn node_id(&self) -> Option<String> {
        let v: Value = self.api().get("/v1/agent/self").await.ok()?;
        v["stats"]["client"]["node_id"].as_str().map(str::to_string)
    }

    /// Its node id as the servers behind `api` list it (by node name), once it registered:
    /// for a client whose own HTTP API needs certificates.
    pub async fn node_id_via(&self, api: &ApiClient) -> Option<String> {
        let nodes: Value = api.get("/v1/nodes").await.ok()?;
        nodes
            .as_array()?
            .iter()
            .find(|n| n["Name"] == self.name.as_str())?["ID"]
            .as_str()
            .map(str::to_string)
    }

    /// The last lines of its log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for ClientProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("----- {} -----\n{}", self.name, self.log_tail(60));
        }
        self.kill();
    }
}

/// Wait until the node `node_id` has `status` as `api` sees it.
pub async fn wait_node_status(
    api: &ApiClient,
    node_id: &str,
    status: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    wait_for(timeout, &format!("node {node_id} {status}"), || async {
        let n: Value = api
            .get(&format!("/v1/node/{node_id}?stale=true"))
            .await
            .ok()?;
        (n["Status"] == status).then_some(())
    })
    .await
}

/// The allocations on `node_id`, as `api` sees them.
pub async fn node_allocs(api: &ApiClient, node_id: &str) -> anyhow::Result<Vec<Value>> {
    Ok(api
        .get(&format!("/v1/node/{node_id}/allocations?stale=true"))
        .await?)
}

/// Place an allocation of `job_id` (version 0, group `g`) on `node_id` by hand, the way a
/// scheduler worker would: dequeue the job's evaluation from the leader at `leader_rpc`,
/// submit a plan with the allocation (the leader's plan applier checks and commits it),
/// complete the evaluation and ack it. The cluster must run no scheduler workers
/// (`num_schedulers = 0`), or they would take the evaluation first.
pub async fn place_alloc(
    leader_rpc: &str,
    alloc_id: &str,
    job_id: &str,
    node_id: &str,
) -> anyhow::Result<()> {
    let pool = Pool::new(0, RpcConfig::for_tests())?;
    let call = |req: ServiceRequest| {
        let pool = &pool;
        async move {
            let timeout = req.method().timeout;
            pool.service(0, leader_rpc, req, timeout).await
        }
    };
    let dequeued = wait_for(
        Duration::from_secs(15),
        &format!("the evaluation of {job_id}"),
        || async {
            let req = ServiceRequest::EvalDequeue(EvalDequeueRequest {
                schedulers: ["service", "batch", "system", "sysbatch"]
                    .map(String::from)
                    .to_vec(),
                timeout_ms: 500,
                scheduler_version: SCHEDULER_VERSION,
            });
            match call(req).await {
                Ok(ServiceResponse::EvalDequeue(Some(d))) if d.eval.job_id == job_id => Some(*d),
                Ok(ServiceResponse::EvalDequeue(Some(other))) => {
                    // Another job's evaluation: done with nothing to do.
                    let _ = call(ServiceRequest::EvalAck(EvalAckRequest {
                        eval_id: other.eval.id.clone(),
                        token: other.token,
                    }))
                    .await;
                    None
                }
                _ => None,
            }
        },
    )
    .await?;
    let alloc = Allocation {
        id: alloc_id.into(),
        eval_id: dequeued.eval.id.clone(),
        namespace: "default".into(),
        name: format!("{job_id}.g[0]"),
        node_id: node_id.into(),
        job_id: job_id.into(),
        job_version: 0,
        task_group: "g".into(),
        desired_status: DesiredStatus::Run,
        client_status: ClientStatus::Pending,
        ..Allocation::default()
    };
    let plan = Plan {
        eval_id: dequeued.eval.id.clone(),
        eval_token: dequeued.token.clone(),
        priority: dequeued.eval.priority,
        node_allocation: [(node_id.into(), vec![alloc])].into_iter().collect(),
        snapshot_index: dequeued.wait_index,
        ..Plan::default()
    };
    match call(ServiceRequest::PlanSubmit(Box::new(plan))).await? {
        ServiceResponse::PlanSubmit(r) if r.rejected_nodes.is_empty() => {}
        other => bail!("placing {alloc_id}: {other:?}"),
    }
    let mut done = dequeued.eval.clone();
    done.status = EvalStatus::Complete;
    call(ServiceRequest::EvalUpdate(Box::new(EvalWriteRequest {
        eval: done,
        token: dequeued.token.clone(),
    })))
    .await?;
    call(ServiceRequest::EvalAck(EvalAckRequest {
        eval_id: dequeued.eval.id.clone(),
        token: dequeued.token,
    }))
    .await?;
    Ok(())
}
