//! `Node.*`: registration, heartbeats, client allocation updates, the client's blocking
//! query for its allocations, deregistration, eligibility and drains.
//!
//! Writes are served on the leader (its heartbeat timers live there; the routing in
//! [`super`] forwards them). `Node.GetClientAllocs` is answered by whichever server the
//! client asks, from its local state: the client's `min_index` keeps its view from going
//! backwards.

use std::collections::BTreeSet;
use std::time::Duration;

use rand::RngCore;
use teamster_storage::fsm::{
    AllocClientReport, AllocClientUpdate, Command, EvalUpsert, NodeDeregister, NodeRegister,
    NodeUpdateDrain, NodeUpdateEligibility, NodeUpdateStatus,
};
use teamster_storage::model::{
    Allocation, ClientStatus, EvalTrigger, Node, NodeStatus, SchedulingEligibility, Timestamp,
};
use teamster_storage::state::{Snapshot, Table};
use tracing::{debug, info};

use super::Endpoints;
use crate::rpc::service::node::{
    validate_node, ClientAlloc, NodeClientAllocsResponse, NodeDeregisterRequest, NodeEvalsResponse,
    NodeEvaluateRequest, NodeGetClientAllocsRequest, NodeHeartbeatResponse, NodeRegisterRequest,
    NodeUpdateAllocRequest, NodeUpdateDrainRequest, NodeUpdateEligibilityRequest,
    NodeUpdateStatusRequest,
};
use crate::rpc::service::MAX_CLIENT_ALLOCS_WAIT;
use crate::rpc::ServiceError;
use crate::server::evals::{job_eval, node_evals, should_create_evals};

/// The most allocation reports one `Node.UpdateAlloc` may carry.
pub const MAX_ALLOC_UPDATES: usize = 10_000;

/// A heartbeat from `node`: the TTL to hand back.
fn ttl(ep: &Endpoints, node: &Node) -> Result<Duration, ServiceError> {
    ep.heartbeats()
        .reset(&node.id)
        .map_err(|_| ServiceError::disabled("heartbeat timers are not running on this server yet"))
}

/// The RPC addresses of the voting servers, for the client's failover list.
fn servers(ep: &Endpoints) -> Vec<String> {
    ep.node()
        .membership()
        .servers
        .into_iter()
        .filter(|(_, _, voter)| *voter)
        .map(|(_, addr, _)| addr.rpc_addr)
        .collect()
}

fn node_not_found(id: &str) -> ServiceError {
    ServiceError::not_found("node", id)
}

/// `Node.Register`.
pub async fn register(
    ep: &Endpoints,
    req: NodeRegisterRequest,
) -> Result<NodeHeartbeatResponse, ServiceError> {
    let mut node = req.node;
    validate_node(&node).map_err(|e| ServiceError::invalid("Node", e))?;
    node.canonicalize();
    let snapshot = ep.node().state().snapshot();
    let existing = snapshot.node_by_id(node.id.as_str()).cloned();
    if let Some(ex) = &existing {
        if !ex.secret_id.is_empty() && ex.secret_id != node.secret_id {
            return Err(ServiceError::rejected(format!(
                "node {} exists with a different secret ID",
                node.id
            )));
        }
    }
    let now = ep.now();
    node.status_updated_at = now / 1_000_000_000;
    let evals = if should_create_evals(existing.as_ref().map(|n| n.status), node.status) {
        node_evals(&snapshot, &node, now, &mut ep.rng().fork())
    } else {
        Vec::new()
    };
    drop(snapshot);
    let (index, _) = ep
        .write(Command::NodeRegister(NodeRegister {
            node: node.clone(),
            evals,
        }))
        .await?;
    let ttl = if node.status == NodeStatus::Down {
        ep.heartbeats().remove(&node.id);
        Duration::ZERO
    } else {
        ttl(ep, &node)?
    };
    info!(node_id = %node.id, name = %node.name, status = node.status.as_str(), "node registered");
    Ok(NodeHeartbeatResponse {
        index,
        heartbeat_ttl_ms: ttl.as_millis() as u64,
        servers: servers(ep),
    })
}

/// `Node.UpdateStatus`: a heartbeat, writing only when the status changed.
pub async fn update_status(
    ep: &Endpoints,
    req: NodeUpdateStatusRequest,
) -> Result<NodeHeartbeatResponse, ServiceError> {
    let snapshot = ep.node().state().snapshot();
    let Some(node) = snapshot.node_by_id(req.node_id.as_str()).cloned() else {
        return Err(node_not_found(req.node_id.as_str()));
    };
    let mut index = node.modify_index;
    if node.status != req.status {
        let now = ep.now();
        let evals = if should_create_evals(Some(node.status), req.status) {
            node_evals(&snapshot, &node, now, &mut ep.rng().fork())
        } else {
            Vec::new()
        };
        debug!(node_id = %node.id, from = node.status.as_str(), to = req.status.as_str(), "node status change");
        index = ep
            .write(Command::NodeUpdateStatus(NodeUpdateStatus {
                node_id: node.id.clone(),
                status: req.status,
                updated_at: now / 1_000_000_000,
                evals,
            }))
            .await?
            .0;
    }
    let ttl = if req.status == NodeStatus::Down {
        ep.heartbeats().remove(&node.id);
        Duration::ZERO
    } else {
        ttl(ep, &node)?
    };
    debug!(node_id = %node.id, ttl_ms = ttl.as_millis() as u64, "heartbeat");
    Ok(NodeHeartbeatResponse {
        index,
        heartbeat_ttl_ms: ttl.as_millis() as u64,
        servers: servers(ep),
    })
}

/// The evaluation a client's report on `alloc` calls for: a failure to reschedule, or an
/// allocation the servers marked unknown that its client reports again (the reconnect
/// decides which copy stays). An older report overtaken by a newer one calls for none: the
/// state machine ignores it too.
fn report_trigger(alloc: &Allocation, report: &AllocClientReport) -> Option<EvalTrigger> {
    if alloc.is_stale_client_report(report.seq) {
        return None;
    }
    if report.client_status == ClientStatus::Failed && alloc.client_status != ClientStatus::Failed {
        Some(EvalTrigger::AllocFailure)
    } else if alloc.client_status == ClientStatus::Unknown
        && report.client_status != ClientStatus::Unknown
    {
        Some(EvalTrigger::Reconnect)
    } else {
        None
    }
}

/// `Node.UpdateAlloc`: the clients' reports, with an evaluation for each job one of whose
/// allocations failed or reconnected.
pub async fn update_alloc(
    ep: &Endpoints,
    req: NodeUpdateAllocRequest,
) -> Result<u64, ServiceError> {
    if req.allocs.is_empty() {
        return Err(ServiceError::invalid(
            "Allocs",
            "no allocation updates given",
        ));
    }
    if req.allocs.len() > MAX_ALLOC_UPDATES {
        return Err(ServiceError::invalid(
            "Allocs",
            format!(
                "{} allocation updates exceed the limit of {MAX_ALLOC_UPDATES}",
                req.allocs.len()
            ),
        ));
    }
    let snapshot = ep.node().state().snapshot();
    let now = ep.now();
    let mut rng = ep.rng().fork();
    let mut jobs = BTreeSet::new();
    let mut evals = Vec::new();
    for report in &req.allocs {
        let Some(alloc) = snapshot.alloc_by_id(report.id.as_str()) else {
            continue;
        };
        let Some(trigger) = report_trigger(alloc, report) else {
            continue;
        };
        let Some(job) = snapshot.job_by_id(alloc.namespace.as_str(), alloc.job_id.as_str()) else {
            continue;
        };
        if job.stopped() || !jobs.insert((job.namespace.clone(), job.id.clone())) {
            continue;
        }
        evals.push(job_eval(job, trigger, now, &mut rng));
    }
    drop(snapshot);
    Ok(ep
        .write(Command::AllocClientUpdate(AllocClientUpdate {
            allocs: req.allocs,
            evals,
        }))
        .await?
        .0)
}

/// `Node.GetClientAllocs`: a blocking query on this server's state, woken only by
/// server-side changes to the node's allocations.
pub async fn get_client_allocs(
    ep: &Endpoints,
    req: NodeGetClientAllocsRequest,
) -> Result<NodeClientAllocsResponse, ServiceError> {
    let wait = Duration::from_millis(req.wait_ms).min(MAX_CLIENT_ALLOCS_WAIT);
    let state = ep.node().state();
    if req.min_index == 0 {
        return Ok(client_allocs(&state.snapshot(), &req));
    }
    let waited = state
        .wait_node_allocs(&req.node_id, req.min_index, wait, |snapshot| {
            snapshot.node_alloc_index(req.node_id.as_str()) > req.min_index
        })
        .await
        .map_err(|e| ServiceError::internal(e.to_string()))?;
    Ok(client_allocs(&waited.snapshot, &req))
}

/// `Node.Evaluate`: an evaluation for every job with allocations on the node and every
/// system job in its scope, as Nomad's `createNodeEvals`; none is an answer too (index 0).
pub async fn evaluate(
    ep: &Endpoints,
    req: NodeEvaluateRequest,
) -> Result<NodeEvalsResponse, ServiceError> {
    let evals = {
        let snapshot = ep.node().state().snapshot();
        let Some(node) = snapshot.node_by_id(req.node_id.as_str()) else {
            return Err(node_not_found(req.node_id.as_str()));
        };
        node_evals(&snapshot, node, ep.now(), &mut ep.rng().fork())
    };
    if evals.is_empty() {
        return Ok(NodeEvalsResponse {
            index: 0,
            eval_ids: Vec::new(),
        });
    }
    let eval_ids = evals.iter().map(|e| e.id.clone()).collect();
    let (index, _) = ep.write(Command::EvalUpsert(EvalUpsert { evals })).await?;
    Ok(NodeEvalsResponse { index, eval_ids })
}

/// `Node.Deregister`: the node goes, with evaluations for what ran on it.
pub async fn deregister(
    ep: &Endpoints,
    req: NodeDeregisterRequest,
) -> Result<NodeEvalsResponse, ServiceError> {
    let snapshot = ep.node().state().snapshot();
    let Some(node) = snapshot.node_by_id(req.node_id.as_str()).cloned() else {
        return Err(node_not_found(req.node_id.as_str()));
    };
    let evals = node_evals(&snapshot, &node, ep.now(), &mut ep.rng().fork());
    drop(snapshot);
    let eval_ids = evals.iter().map(|e| e.id.clone()).collect();
    // One entry: the node goes and its evaluations come together, or neither does.
    let deregister = Command::NodeDeregister(NodeDeregister {
        node_ids: vec![node.id.clone()],
    });
    let cmd = if evals.is_empty() {
        deregister
    } else {
        Command::Batch(vec![deregister, Command::EvalUpsert(EvalUpsert { evals })])
    };
    let (index, _) = ep.write(cmd).await?;
    ep.heartbeats().remove(&node.id);
    info!(node_id = %node.id, "node deregistered");
    Ok(NodeEvalsResponse { index, eval_ids })
}

/// `Node.UpdateEligibility`.
pub async fn update_eligibility(
    ep: &Endpoints,
    req: NodeUpdateEligibilityRequest,
) -> Result<NodeEvalsResponse, ServiceError> {
    let cmd = {
        let snapshot = ep.node().state().snapshot();
        eligibility_command(&snapshot, req, ep.now(), &mut ep.rng().fork())?
    };
    write_node_change(ep, cmd).await
}

/// `Node.UpdateDrain`.
pub async fn update_drain(
    ep: &Endpoints,
    req: NodeUpdateDrainRequest,
) -> Result<NodeEvalsResponse, ServiceError> {
    let cmd = {
        let snapshot = ep.node().state().snapshot();
        drain_command(&snapshot, req, ep.now(), &mut ep.rng().fork())?
    };
    write_node_change(ep, cmd).await
}

async fn write_node_change(
    ep: &Endpoints,
    cmd: Command,
) -> Result<NodeEvalsResponse, ServiceError> {
    let eval_ids = match &cmd {
        Command::NodeUpdateEligibility(c) => c.evals.iter().map(|e| e.id.clone()).collect(),
        Command::NodeUpdateDrain(c) => c.evals.iter().map(|e| e.id.clone()).collect(),
        _ => Vec::new(),
    };
    let (index, _) = ep.write(cmd).await?;
    Ok(NodeEvalsResponse { index, eval_ids })
}

/// The raft command for `Node.UpdateEligibility` (evaluations when a node becomes
/// eligible), or why it is refused.
pub fn eligibility_command(
    snapshot: &Snapshot,
    req: NodeUpdateEligibilityRequest,
    now: i64,
    rng: &mut dyn RngCore,
) -> Result<Command, ServiceError> {
    let Some(node) = snapshot.node_by_id(req.node_id.as_str()).cloned() else {
        return Err(node_not_found(req.node_id.as_str()));
    };
    if node.drain_strategy.is_some() && req.eligibility == SchedulingEligibility::Eligible {
        return Err(ServiceError::rejected(format!(
            "can not set node {} eligible while it is draining",
            node.id
        )));
    }
    let evals = if req.eligibility == SchedulingEligibility::Eligible
        && node.scheduling_eligibility != SchedulingEligibility::Eligible
    {
        node_evals(snapshot, &node, now, rng)
    } else {
        Vec::new()
    };
    Ok(Command::NodeUpdateEligibility(NodeUpdateEligibility {
        node_id: node.id.clone(),
        eligibility: req.eligibility,
        updated_at: now / 1_000_000_000,
        evals,
    }))
}

/// The raft command for `Node.UpdateDrain` (Nomad's `Node.UpdateDrain`): a drain makes the
/// node ineligible and the leader's node drainer migrates its allocations (no evaluation is
/// created here); an update keeps the drain's start; cancelling with `MarkEligible` creates
/// the node evaluations an eligible node gets. Or why it is refused.
pub fn drain_command(
    snapshot: &Snapshot,
    req: NodeUpdateDrainRequest,
    now: i64,
    rng: &mut dyn RngCore,
) -> Result<Command, ServiceError> {
    let Some(node) = snapshot.node_by_id(req.node_id.as_str()).cloned() else {
        return Err(node_not_found(req.node_id.as_str()));
    };
    let mut drain = req.drain;
    let mut evals = Vec::new();
    match &mut drain {
        Some(d) => {
            d.started_at = node
                .drain_strategy
                .as_ref()
                .map_or(Timestamp::from_unix_nanos(now), |running| {
                    running.started_at
                });
            // Deadline < 0 forces at once, 0 has none (the drainer reads both from
            // `Deadline`); only a positive one has a force deadline.
            d.force_deadline = if d.deadline > 0 {
                Timestamp::from_unix_nanos(now.saturating_add(d.deadline))
            } else {
                Timestamp::ZERO
            };
        }
        None => {
            if req.mark_eligible && node.scheduling_eligibility != SchedulingEligibility::Eligible {
                evals = node_evals(snapshot, &node, now, rng);
            }
        }
    }
    Ok(Command::NodeUpdateDrain(NodeUpdateDrain {
        node_id: node.id.clone(),
        drain_strategy: drain,
        mark_eligible: req.mark_eligible,
        updated_at: now / 1_000_000_000,
        evals,
        meta: req.meta,
    }))
}

fn client_allocs(
    snapshot: &Snapshot,
    req: &NodeGetClientAllocsRequest,
) -> NodeClientAllocsResponse {
    let mut alloc_indexes = Vec::new();
    let mut changed = Vec::new();
    for alloc in snapshot.allocs_by_node(req.node_id.as_str()) {
        alloc_indexes.push((alloc.id.clone(), alloc.alloc_modify_index));
        if alloc.alloc_modify_index > req.min_index {
            let job = snapshot.alloc_job(alloc).cloned();
            changed.push(ClientAlloc {
                migrate: migrate_from(snapshot, alloc, job.as_deref()),
                alloc: (**alloc).clone(),
                job,
            });
        }
    }
    NodeClientAllocsResponse {
        index: snapshot.table_index(Table::Allocs).max(1),
        alloc_indexes,
        changed,
    }
}

/// Where `alloc`'s migrating disk comes from: its previous allocation, when that ran on
/// another node (still known, not down, the allocation not lost) and `alloc`'s group
/// migrates its `ephemeral_disk`; with the token signed by that node's secret.
fn migrate_from(
    snapshot: &Snapshot,
    alloc: &Allocation,
    job: Option<&teamster_storage::model::Job>,
) -> Option<crate::rpc::service::node::MigrateFrom> {
    let migrates = job?
        .task_groups
        .iter()
        .find(|g| g.name == alloc.task_group)?
        .ephemeral_disk
        .as_ref()
        .is_some_and(|d| d.migrate);
    if !migrates || alloc.previous_allocation.is_empty() {
        return None;
    }
    let previous = snapshot.alloc_by_id(alloc.previous_allocation.as_str())?;
    // Nothing to fetch from this node, nor from a node that is down or lost the allocation.
    if previous.node_id == alloc.node_id
        || previous.client_status == teamster_storage::model::ClientStatus::Lost
    {
        return None;
    }
    let node = snapshot
        .node_by_id(previous.node_id.as_str())
        .filter(|n| n.status != NodeStatus::Down)?;
    Some(crate::rpc::service::node::MigrateFrom {
        alloc_id: previous.id.to_string(),
        http_addr: node.http_addr.clone(),
        token: crate::util::migrate::token(&node.secret_id, previous.id.as_str()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::SeedableRng;
    use teamster_storage::model::{EvalStatus, JobType};
    use teamster_storage::model::{NodeCpuResources, NodeMemoryResources, NodeResources};

    fn good_node() -> Node {
        let mut n = Node {
            id: "5b8f2c3e-1111-4222-8333-444455556666".into(),
            name: "n1".into(),
            datacenter: "dc1".into(),
            status: NodeStatus::Ready,
            node_resources: NodeResources {
                cpu: NodeCpuResources {
                    cpu_shares: 4000,
                    total_cpu_cores: 4,
                    reservable_cpu_cores: vec![0, 1, 2, 3],
                },
                memory: NodeMemoryResources { memory_mb: 8192 },
                ..NodeResources::default()
            },
            ..Node::default()
        };
        n.attributes.insert("kernel.name".into(), "linux".into());
        n
    }

    #[test]
    fn a_sane_node_is_accepted() {
        validate_node(&good_node()).unwrap();
    }

    #[test]
    fn malformed_attributes_are_refused_with_the_key_named() {
        let mut n = good_node();
        n.attributes.insert("bad key".into(), "x".into());
        let e = validate_node(&n).unwrap_err();
        assert!(e.contains("malformed attribute key \"bad key\""), "{e}");
        let mut n = good_node();
        n.meta.insert("rack".into(), "r1\u{0}".into());
        let e = validate_node(&n).unwrap_err();
        assert!(e.contains("malformed meta value for \"rack\""), "{e}");
    }

    #[test]
    fn absurd_resources_are_refused() {
        let mut n = good_node();
        n.node_resources.memory.memory_mb = u64::MAX;
        n.node_resources.cpu.cpu_shares = 0;
        let e = validate_node(&n).unwrap_err();
        assert!(e.contains("MemoryMB"), "{e}");
        assert!(e.contains("CpuShares 0"), "{e}");
        let mut n = good_node();
        n.reserved_resources.memory.memory_mb = 9000;
        assert!(validate_node(&n).unwrap_err().contains("ReservedResources"));
    }

    #[test]
    fn missing_identity_is_refused() {
        let mut n = good_node();
        n.id = "".into();
        n.datacenter.clear();
        let e = validate_node(&n).unwrap_err();
        assert!(e.contains("missing node ID"), "{e}");
        assert!(e.contains("missing datacenter"), "{e}");
    }

    fn job(id: &str, job_type: JobType) -> teamster_storage::model::Job {
        let mut job = teamster_storage::model::Job {
            id: id.into(),
            job_type,
            datacenters: vec!["dc1".into()],
            task_groups: vec![teamster_storage::model::TaskGroup {
                name: "g".into(),
                count: 1,
                tasks: vec![teamster_storage::model::Task {
                    name: "t".into(),
                    driver: "mock".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }]
            .into(),
            ..Default::default()
        };
        job.canonicalize();
        job
    }

    fn state_with_allocs() -> (teamster_storage::state::StateStore, Node) {
        use teamster_storage::fsm::{ApplyPlanResults, JobRegister, NodeRegister};
        use teamster_storage::model::Allocation;
        let store = teamster_storage::state::StateStore::new();
        let mut node = good_node();
        node.canonicalize();
        let mut index = 0;
        let mut apply = |c: Command| {
            index += 1;
            let r = store.apply(index, c);
            assert!(r.rejection().is_none(), "{r:?}");
        };
        apply(Command::NodeRegister(NodeRegister {
            node: node.clone(),
            evals: vec![],
        }));
        for (id, t) in [
            ("web", JobType::Service),
            ("report", JobType::Batch),
            ("done", JobType::Batch),
            ("agent", JobType::System),
            ("elsewhere", JobType::System),
        ] {
            let mut j = job(id, t);
            if id == "elsewhere" {
                j.datacenters = vec!["dc9".into()];
            }
            apply(Command::JobRegister(JobRegister {
                job: j,
                eval: None,
                enforce_index: None,
                tracked_versions: 0,
            }));
        }
        let allocs: Vec<Allocation> = ["web", "report", "done", "agent"]
            .iter()
            .enumerate()
            .map(|(i, j)| Allocation {
                id: format!("a{i}").into(),
                namespace: "default".into(),
                node_id: node.id.clone(),
                job_id: (*j).into(),
                task_group: "g".into(),
                ..Allocation::default()
            })
            .collect();
        apply(Command::ApplyPlanResults(ApplyPlanResults {
            eval_id: "".into(),
            allocs_updated: allocs,
            allocs_stopped: vec![],
            allocs_preempted: vec![],
            evals: vec![],
            ineligible_nodes: vec![],
            updated_at: 0,
            deployment: None,
            deployment_updates: Vec::new(),
        }));
        apply(Command::AllocClientUpdate(
            teamster_storage::fsm::AllocClientUpdate {
                allocs: vec![teamster_storage::fsm::AllocClientReport {
                    id: "a2".into(),
                    client_status: ClientStatus::Complete,
                    client_description: String::new(),
                    task_states: Default::default(),
                    modify_time: 0,
                    seq: 0,
                    deployment_status: None,
                }],
                evals: vec![],
            },
        ));
        let node = (**store.snapshot().node_by_id(node.id.as_str()).unwrap()).clone();
        (store, node)
    }

    #[test]
    fn reports_trigger_failure_and_reconnect_evaluations_unless_stale() {
        let alloc = |status, seq| Allocation {
            client_status: status,
            client_report_seq: seq,
            ..Allocation::default()
        };
        let report = |status, seq| AllocClientReport {
            id: "a1".into(),
            client_status: status,
            client_description: String::new(),
            task_states: Default::default(),
            modify_time: 0,
            deployment_status: None,
            seq,
        };
        use ClientStatus::{Failed, Running, Unknown};
        let cases = [
            (
                alloc(Running, 3),
                report(Failed, 4),
                Some(EvalTrigger::AllocFailure),
            ),
            (alloc(Failed, 3), report(Failed, 4), None),
            (
                alloc(Unknown, 3),
                report(Running, 4),
                Some(EvalTrigger::Reconnect),
            ),
            (
                alloc(Unknown, 3),
                report(Running, 3),
                Some(EvalTrigger::Reconnect),
            ),
            (
                alloc(Unknown, 3),
                report(Running, 0),
                Some(EvalTrigger::Reconnect),
            ),
            (alloc(Unknown, 3), report(Unknown, 4), None),
            // Overtaken by a newer report: the state machine ignores it, so nothing is
            // scheduled for it either.
            (alloc(Unknown, 3), report(Running, 2), None),
            (alloc(Running, 3), report(Failed, 2), None),
            (alloc(Running, 0), report(Running, 1), None),
        ];
        for (a, r, want) in cases {
            assert_eq!(
                report_trigger(&a, &r),
                want,
                "{:?}@{} on {:?}@{}",
                r.client_status,
                r.seq,
                a.client_status,
                a.client_report_seq
            );
        }
    }

    #[test]
    fn node_evals_cover_jobs_with_live_allocs_and_system_jobs_in_scope() {
        let (store, node) = state_with_allocs();
        let mut rng = StdRng::seed_from_u64(1);
        let evals = node_evals(&store.snapshot(), &node, 7, &mut rng);
        let mut jobs: Vec<&str> = evals.iter().map(|e| e.job_id.as_str()).collect();
        jobs.sort();
        // web (service, running), report (batch, not finished), agent (system job in dc1);
        // not "done" (batch, complete) nor "elsewhere" (system job in another datacenter).
        assert_eq!(jobs, vec!["agent", "report", "web"]);
        for e in &evals {
            assert_eq!(e.triggered_by, EvalTrigger::NodeUpdate);
            assert_eq!(e.status, EvalStatus::Pending);
            assert_eq!(e.node_id, node.id);
            assert_eq!(e.node_modify_index, node.modify_index);
        }
    }

    #[test]
    fn a_drain_makes_the_node_ineligible_and_leaves_the_evals_to_the_drainer() {
        let (store, node) = state_with_allocs();
        let cmd = drain_command(
            &store.snapshot(),
            NodeUpdateDrainRequest {
                node_id: node.id.clone(),
                drain: Some(teamster_storage::model::DrainStrategy {
                    deadline: 60_000_000_000,
                    ..Default::default()
                }),
                mark_eligible: false,
                meta: Some([("reason".to_owned(), "reboot".to_owned())].into()),
            },
            1_000,
            &mut StdRng::seed_from_u64(9),
        )
        .unwrap();
        let Command::NodeUpdateDrain(d) = &cmd else {
            panic!("{cmd:?}")
        };
        // The node drainer creates the evaluations as it marks allocations.
        assert!(d.evals.is_empty(), "{:?}", d.evals);
        store.apply(100, cmd);
        let after = store
            .snapshot()
            .node_by_id(node.id.as_str())
            .cloned()
            .unwrap();
        assert_eq!(
            after.scheduling_eligibility,
            SchedulingEligibility::Ineligible
        );
        let strategy = after.drain_strategy.clone().unwrap();
        assert_eq!(
            strategy.force_deadline.unix_nanos(),
            Some(1_000 + 60_000_000_000)
        );
        assert_eq!(after.last_drain.as_ref().unwrap().meta["reason"], "reboot");
        // An update keeps the start and moves the force deadline; a negative deadline forces
        // at once (no force deadline), 0 has none.
        for (deadline, force) in [(-1, None), (0, None), (5_000, Some(1_500 + 5_000))] {
            let update = drain_command(
                &store.snapshot(),
                NodeUpdateDrainRequest {
                    node_id: node.id.clone(),
                    drain: Some(teamster_storage::model::DrainStrategy {
                        deadline,
                        ..Default::default()
                    }),
                    mark_eligible: false,
                    meta: None,
                },
                1_500,
                &mut StdRng::seed_from_u64(9),
            )
            .unwrap();
            let Command::NodeUpdateDrain(d) = &update else {
                panic!("{update:?}")
            };
            let s = d.drain_strategy.as_ref().unwrap();
            assert_eq!(s.started_at.unix_nanos(), Some(1_000));
            assert_eq!(
                s.force_deadline
                    .unix_nanos()
                    .filter(|_| !s.force_deadline.is_zero()),
                force
            );
        }
        // Eligible while draining is refused; cancelling with MarkEligible restores it.
        let refused = eligibility_command(
            &store.snapshot(),
            NodeUpdateEligibilityRequest {
                node_id: node.id.clone(),
                eligibility: SchedulingEligibility::Eligible,
            },
            2_000,
            &mut StdRng::seed_from_u64(9),
        );
        assert!(refused
            .unwrap_err()
            .to_string()
            .contains("while it is draining"));
        let cancel = drain_command(
            &store.snapshot(),
            NodeUpdateDrainRequest {
                node_id: node.id.clone(),
                drain: None,
                mark_eligible: true,
                meta: None,
            },
            3_000,
            &mut StdRng::seed_from_u64(9),
        )
        .unwrap();
        let Command::NodeUpdateDrain(d) = &cancel else {
            panic!("{cancel:?}")
        };
        // Eligible again: the node evaluations (web, report, agent).
        assert_eq!(d.evals.len(), 3);
        store.apply(101, cancel);
        let after = store
            .snapshot()
            .node_by_id(node.id.as_str())
            .cloned()
            .unwrap();
        assert!(after.drain_strategy.is_none());
        assert_eq!(
            after.scheduling_eligibility,
            SchedulingEligibility::Eligible
        );
    }
}
