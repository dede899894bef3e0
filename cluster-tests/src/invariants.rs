//! Invariant checkers shared by every cluster test (process and compose clusters). They read
//! the cluster only through its Nomad-shaped HTTP API, so they hold whatever harness started
//! it.
//!
//! - [`acknowledged_present`]: every registration a client got a 200 for is in the state.
//! - [`LeaderLog`]: at most one leader per raft term, from observations collected during a
//!   scenario.
//! - [`no_node_over_capacity`]: the live allocations on a node fit its resources minus its
//!   reserved resources (the scheduler's and plan applier's own definition of fit).
//! - [`no_group_over_count`]: no task group has more running allocations than its count.
//! - [`evals_settled`]: every evaluation is complete, blocked, canceled, or failed with a
//!   follow-up evaluation.
//!
//! A check that needs an endpoint the cluster does not serve (404) answers
//! [`Checked::NotServed`] instead of passing silently; scenarios print it.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context};
use serde_json::Value;
use teamster::api::{ApiClient, ApiError};
use teamster::scheduler::fit::{check_fit, node_capacity};
use teamster_storage::model::{
    Allocation, ClientStatus, EvalStatus, Evaluation, Job, Node, Resources,
};

/// The outcome of a check that passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// The invariant holds over this many objects.
    Held(usize),
    /// The cluster does not serve the endpoint the check needs (named).
    NotServed(String),
}

impl Checked {
    /// Print a loud line when the check could not run.
    pub fn report(&self, what: &str) {
        if let Checked::NotServed(path) = self {
            eprintln!("NOTE: invariant `{what}` not checked: the cluster does not serve {path}");
        }
    }
}

/// GET `path` as JSON; `Ok(None)` on 404 (endpoint or object missing).
async fn get_opt<T: serde::de::DeserializeOwned>(
    api: &ApiClient,
    path: &str,
) -> anyhow::Result<Option<T>> {
    match api.get::<T>(path).await {
        Ok(v) => Ok(Some(v)),
        Err(ApiError::Status { status, .. }) if status == 404 => Ok(None),
        Err(e) => Err(e).with_context(|| format!("GET {path}")),
    }
}

/// How long a consistent read may keep waiting for a server still applying the leader's
/// index (one just back from a stop, under load, answers "timed out … waiting for index").
const CATCH_UP_READ: std::time::Duration = std::time::Duration::from_secs(30);

/// Every acknowledged job ID is present in `api`'s state (read consistently). Fails naming
/// up to ten missing IDs and how many are missing.
pub async fn acknowledged_present(api: &ApiClient, acked: &[String]) -> anyhow::Result<Checked> {
    let deadline = tokio::time::Instant::now() + CATCH_UP_READ;
    let jobs: Vec<Value> = loop {
        match api.get("/v1/jobs").await {
            Ok(jobs) => break jobs,
            // Still catching up: its read waits for an index it has not applied yet.
            Err(e)
                if e.to_string().contains("waiting for index")
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
            }
            Err(e) => {
                return Err(e).context("listing jobs for the acknowledged-writes check");
            }
        }
    };
    let present: BTreeSet<&str> = jobs.iter().filter_map(|j| j["ID"].as_str()).collect();
    let missing: Vec<&String> = acked
        .iter()
        .filter(|id| !present.contains(id.as_str()))
        .collect();
    if !missing.is_empty() {
        bail!(
            "{} of {} acknowledged job registrations are missing, e.g. {:?}",
            missing.len(),
            acked.len(),
            &missing[..missing.len().min(10)]
        );
    }
    Ok(Checked::Held(acked.len()))
}

/// Observations of who led which raft term, collected while a scenario runs.
#[derive(Debug, Clone, Default)]
pub struct LeaderLog {
    /// term → the servers (names) seen leading it.
    terms: BTreeMap<u64, BTreeSet<String>>,
}

impl LeaderLog {
    /// An empty log.
    pub fn new() -> LeaderLog {
        LeaderLog::default()
    }

    /// Record that `server` said it leads `term`.
    pub fn record(&mut self, term: u64, server: &str) {
        self.terms
            .entry(term)
            .or_default()
            .insert(server.to_string());
    }

    /// Ask one server (`/v1/agent/self`, local) and record it if it says it is the leader.
    /// Unreachable servers are skipped (they are being killed or isolated).
    pub async fn observe(&mut self, name: &str, api: &ApiClient) {
        let Ok(v) = api.get::<Value>("/v1/agent/self").await else {
            return;
        };
        let raft = &v["stats"]["raft"];
        if raft["state"].as_str() == Some("Leader") {
            if let Some(term) = raft["term"].as_str().and_then(|t| t.parse().ok()) {
                self.record(term, name);
            }
        }
    }

    /// The terms observed with a leader.
    pub fn terms(&self) -> usize {
        self.terms.len()
    }

    /// At most one leader per term.
    pub fn check(&self) -> anyhow::Result<Checked> {
        for (term, leaders) in &self.terms {
            if leaders.len() > 1 {
                bail!("term {term} had {} leaders: {leaders:?}", leaders.len());
            }
        }
        Ok(Checked::Held(self.terms.len()))
    }
}

/// The nodes, full objects (`/v1/nodes` then `/v1/node/:id`); `None` when not served.
async fn nodes(api: &ApiClient) -> anyhow::Result<Option<Vec<Node>>> {
    let Some(stubs) = get_opt::<Vec<Value>>(api, "/v1/nodes").await? else {
        return Ok(None);
    };
    let mut nodes = Vec::new();
    for s in stubs {
        let Some(id) = s["ID"].as_str() else { continue };
        if let Some(node) = get_opt::<Node>(api, &format!("/v1/node/{id}")).await? {
            nodes.push(node);
        }
    }
    Ok(Some(nodes))
}

/// Whether an allocation holds resources on its node (Nomad: not terminal).
fn live(a: &Allocation) -> bool {
    !a.terminal_status()
}

/// No node runs more than its capacity: the live allocations on each node fit in its
/// resources minus its reserved resources.
pub async fn no_node_over_capacity(api: &ApiClient) -> anyhow::Result<Checked> {
    let Some(nodes) = nodes(api).await? else {
        return Ok(Checked::NotServed("/v1/nodes".into()));
    };
    for node in &nodes {
        let path = format!("/v1/node/{}/allocations", node.id);
        let Some(allocs) = get_opt::<Vec<Allocation>>(api, &path).await? else {
            return Ok(Checked::NotServed(path));
        };
        // Not `Resources::default()`: that is Nomad's default task ask (100 MHz, 300 MB).
        let mut used = Resources {
            cpu: 0,
            memory_mb: 0,
            disk_mb: 0,
            memory_max_mb: 0,
            cores: 0,
        };
        for a in allocs.iter().filter(|a| live(a)) {
            used.cpu += a.resources.cpu;
            used.memory_mb += a.resources.memory_mb;
            used.disk_mb += a.resources.disk_mb;
        }
        let capacity = node_capacity(node);
        if let Err(dim) = check_fit(&capacity, &used) {
            let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
            for a in allocs.iter().filter(|a| live(a)) {
                let key = format!("{:?}/{:?}", a.desired_status, a.client_status);
                *statuses.entry(key).or_default() += 1;
            }
            bail!(
                "node {} ({}) is over capacity in {dim}: uses {used:?}, offers {capacity:?}; \
                 live allocations by desired/client status: {statuses:?}",
                node.name,
                node.id
            );
        }
    }
    Ok(Checked::Held(nodes.len()))
}

/// No task group has more running allocations than its count (among those the servers
/// still want running).
pub async fn no_group_over_count(api: &ApiClient) -> anyhow::Result<Checked> {
    // Every namespace's (the list holds the default one's otherwise).
    let Some(allocs) = get_opt::<Vec<Value>>(api, "/v1/allocations?namespace=*").await? else {
        return Ok(Checked::NotServed("/v1/allocations".into()));
    };
    let mut running: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    for a in &allocs {
        let running_status = serde_json::from_value::<ClientStatus>(a["ClientStatus"].clone()).ok();
        // An allocation the servers told to stop whose client has not stopped it yet (a
        // paused or cut-off client that came back) is on its way out, not over the count.
        let wanted = a["DesiredStatus"].as_str().is_none_or(|d| d == "run");
        if running_status == Some(ClientStatus::Running) && wanted {
            let key = (
                a["Namespace"].as_str().unwrap_or("default").to_string(),
                a["JobID"].as_str().unwrap_or_default().to_string(),
                a["TaskGroup"].as_str().unwrap_or_default().to_string(),
            );
            *running.entry(key).or_default() += 1;
        }
    }
    let mut jobs: BTreeMap<(String, String), Job> = BTreeMap::new();
    for ((ns, job_id, group), n) in &running {
        let key = (ns.clone(), job_id.clone());
        if !jobs.contains_key(&key) {
            let path = format!("/v1/job/{job_id}?namespace={ns}");
            match get_opt::<Job>(api, &path).await? {
                Some(job) => {
                    jobs.insert(key.clone(), job);
                }
                // A purged job's allocations are being stopped: no count to exceed.
                None => continue,
            }
        }
        let job = &jobs[&key];
        let count = job
            .task_groups
            .iter()
            .find(|g| g.name == *group)
            .map_or(0, |g| g.count as usize);
        let allowed = if job.stop { 0 } else { count };
        if *n > allowed && !job.stop {
            bail!("job {job_id} group {group} runs {n} allocations, count is {count}");
        }
    }
    Ok(Checked::Held(allocs.len()))
}

/// Every evaluation is complete, blocked, canceled, or failed with a follow-up (`NextEval`
/// set, or another evaluation naming it as `PreviousEval`). `pending_ok` lets pending ones
/// through (for a check taken while work is still in flight).
pub async fn evals_settled(api: &ApiClient, pending_ok: bool) -> anyhow::Result<Checked> {
    let Some(evals) = get_opt::<Vec<Evaluation>>(api, "/v1/evaluations?namespace=*").await? else {
        return Ok(Checked::NotServed("/v1/evaluations".into()));
    };
    let followed: BTreeSet<String> = evals
        .iter()
        .filter(|e| !e.previous_eval.is_empty())
        .map(|e| e.previous_eval.to_string())
        .collect();
    for e in &evals {
        let ok = match e.status {
            EvalStatus::Complete | EvalStatus::Blocked | EvalStatus::Canceled => true,
            EvalStatus::Failed => !e.next_eval.is_empty() || followed.contains(&e.id.to_string()),
            EvalStatus::Pending => pending_ok,
        };
        if !ok {
            bail!(
                "evaluation {} of job {} is {:?} ({})",
                e.id,
                e.job_id,
                e.status,
                e.status_description
            );
        }
    }
    Ok(Checked::Held(evals.len()))
}
