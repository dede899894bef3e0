//! `Operator.*` on the leader: raft membership (a joining server is added as a learner and
//! promoted once it caught up; a removed one is forgotten by the pool), the scheduler
//! configuration (with check-and-set), restoring a snapshot through raft, and the broker
//! counts of the leader.

use teamster_storage::fsm::{
    ApplyError, AutopilotConfigUpdate, Command, CommandResponse, EvalUpsert, SchedulerConfigUpdate,
    SnapshotRestore,
};
use teamster_storage::state::StateStore;

use super::{node_error, Endpoints};
use crate::rpc::service::operator::{
    AutopilotSetConfigRequest, BrokerStatsResponse, QueueCounts, RaftJoinRequest,
    RaftRemovePeerRequest, SchedulerSetConfigRequest, SchedulerSetConfigResponse,
    SnapshotRestoreRequest, SystemGcResponse,
};
use crate::rpc::ServiceError;
use crate::server::autopilot::ClusterHealth;

/// `Operator.RaftJoin`.
pub async fn raft_join(ep: &Endpoints, req: RaftJoinRequest) -> Result<(), ServiceError> {
    ep.node()
        .add_voter(req.id, req.addr)
        .await
        .map_err(node_error)
}

/// How long a server asked by `/v1/agent/join` has to answer.
const JOIN_ASK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);
/// How long the join itself may take (a learner catching up counts as joined).
const JOIN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// `/v1/agent/join` on a server (Nomad's, without gossip): each address (an RPC address,
/// port 4647 when omitted) is asked who it is. A server of this cluster counts as joined;
/// one in no cluster is added to this one (through the leader); when this server is in no
/// cluster and the other is, the other's cluster adds this one. Two servers that are both
/// in no cluster, or in different clusters, are refused. Returns how many joined and why
/// the others did not.
pub async fn agent_join(ep: &Endpoints, addrs: &[String]) -> (usize, Vec<String>) {
    use crate::rpc::{RpcRequest, RpcResponse, Services as _};
    let node = ep.node();
    let mut joined = 0;
    let mut errors = Vec::new();
    for addr in addrs {
        let addr = if addr
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            addr.clone()
        } else {
            format!("{addr}:4647")
        };
        let info = match node
            .pool()
            .call_addr(&addr, RpcRequest::ServerInfo, JOIN_ASK_TIMEOUT)
            .await
        {
            Ok(RpcResponse::ServerInfo(info)) => info,
            Ok(other) => {
                errors.push(format!("{addr}: unexpected answer {}", other.kind()));
                continue;
            }
            Err(e) => {
                errors.push(format!("{addr}: {e}"));
                continue;
            }
        };
        let members = node.membership().servers;
        let in_ours = members.iter().any(|(id, _, _)| *id == info.id);
        match (node.is_initialized().await, info.initialized) {
            _ if info.id == node.id() || in_ours => joined += 1,
            (true, true) => errors.push(format!(
                "{addr}: server {} belongs to another cluster",
                info.addr.name
            )),
            (true, false) => {
                let req = RaftJoinRequest {
                    id: info.id,
                    addr: info.addr.clone(),
                };
                match tokio::time::timeout(JOIN_TIMEOUT, ep.operator_raft_join(req)).await {
                    Ok(Ok(())) | Err(_) => joined += 1,
                    Ok(Err(e)) => errors.push(format!("{addr}: {e}")),
                }
            }
            (false, true) => {
                if crate::server::formation::join_via(node, &addr, JOIN_TIMEOUT).await {
                    joined += 1;
                } else {
                    errors.push(format!("{addr}: the join was refused (see the server's log)"));
                }
            }
            (false, false) => errors.push(format!(
                "{addr}: neither server is in a cluster yet; start them with server.join and bootstrap_expect"
            )),
        }
    }
    (joined, errors)
}

/// `/v1/agent/force-leave` (Nomad's `RemoveFailedNode`, without gossip): the server named
/// `name` (`name` or `name.<region>`) leaves the raft configuration if it does not answer;
/// one that answers, or no server of that name, is left alone, as Nomad leaves an alive
/// or unknown member. Whether a server was removed.
pub async fn force_leave(ep: &Endpoints, name: &str) -> Result<bool, ServiceError> {
    use crate::rpc::{RpcRequest, RpcResponse, Services as _};
    let node = ep.node();
    let bare = name.strip_suffix(".global").unwrap_or(name);
    let Some((id, addr, _)) = node
        .membership()
        .servers
        .into_iter()
        .find(|(_, a, _)| a.name == bare || a.name == name)
    else {
        return Ok(false);
    };
    if id == node.id() {
        return Ok(false);
    }
    let alive = matches!(
        node.pool()
            .call_addr(&addr.rpc_addr, RpcRequest::ServerInfo, JOIN_ASK_TIMEOUT)
            .await,
        Ok(RpcResponse::ServerInfo(info)) if info.id == id
    );
    if alive {
        return Ok(false);
    }
    ep.operator_raft_remove_peer(RaftRemovePeerRequest::Id(id))
        .await?;
    Ok(true)
}

/// `Operator.RaftRemovePeer`.
pub async fn raft_remove_peer(
    ep: &Endpoints,
    req: RaftRemovePeerRequest,
) -> Result<(), ServiceError> {
    let servers = ep.node().membership().servers;
    let id = match req {
        RaftRemovePeerRequest::Id(id) => servers
            .iter()
            .find(|(s, _, _)| *s == id)
            .map(|(s, _, _)| *s)
            .ok_or_else(|| {
                ServiceError::invalid(
                    "id",
                    format!("id \"{id}\" was not found in the Raft configuration"),
                )
            })?,
        RaftRemovePeerRequest::Address(addr) => servers
            .iter()
            .find(|(_, a, _)| a.rpc_addr == addr)
            .map(|(s, _, _)| *s)
            .ok_or_else(|| {
                ServiceError::invalid(
                    "address",
                    format!("address {addr:?} was not found in the Raft configuration"),
                )
            })?,
    };
    ep.node().remove_server(id).await.map_err(node_error)
}

/// `Operator.SchedulerSetConfiguration`: `updated` is false when the check-and-set index did
/// not match.
pub async fn set_scheduler_config(
    ep: &Endpoints,
    req: SchedulerSetConfigRequest,
) -> Result<SchedulerSetConfigResponse, ServiceError> {
    req.config
        .validate()
        .map_err(|e| ServiceError::invalid("SupervisorFraction", e.to_string()))?;
    write_config(
        ep,
        Command::SchedulerConfig(SchedulerConfigUpdate {
            config: req.config,
            cas_index: req.cas_index,
        }),
    )
    .await
}

/// `Operator.AutopilotSetConfiguration`: `updated` is false when the check-and-set index
/// did not match.
pub async fn set_autopilot_config(
    ep: &Endpoints,
    req: AutopilotSetConfigRequest,
) -> Result<SchedulerSetConfigResponse, ServiceError> {
    req.config
        .validate()
        .map_err(|e| ServiceError::invalid("AutopilotConfig", e.to_string()))?;
    write_config(
        ep,
        Command::AutopilotConfig(AutopilotConfigUpdate {
            config: req.config,
            cas_index: req.cas_index,
        }),
    )
    .await
}

/// A configuration written with its check-and-set: a mismatch is `updated: false`.
async fn write_config(
    ep: &Endpoints,
    cmd: Command,
) -> Result<SchedulerSetConfigResponse, ServiceError> {
    let applied = ep
        .node()
        .write_local(cmd)
        .await
        .map_err(super::write_error)?;
    let updated = match &applied.response {
        CommandResponse::Rejected(ApplyError::CasMismatch { .. }) => false,
        CommandResponse::Rejected(e) => return Err(super::apply_error(e)),
        _ => true,
    };
    Ok(SchedulerSetConfigResponse {
        updated,
        index: applied.index,
    })
}

/// `Operator.ServerHealth`: the leader autopilot's latest judgement.
pub fn server_health(ep: &Endpoints) -> Result<ClusterHealth, ServiceError> {
    ep.autopilot()
        .health()
        .ok_or_else(|| ServiceError::internal("autopilot has not judged the servers yet"))
}

/// `Operator.SnapshotRestore`: the image is decoded once here, so a bad one is refused
/// before it reaches the log.
pub async fn snapshot_restore(
    ep: &Endpoints,
    req: SnapshotRestoreRequest,
) -> Result<u64, ServiceError> {
    let image = req.image;
    let image =
        tokio::task::spawn_blocking(move || StateStore::new().restore_image(&image).map(|_| image))
            .await
            .map_err(|e| ServiceError::internal(format!("checking the snapshot: {e}")))?
            .map_err(|e| ServiceError::invalid("Snapshot", format!("invalid snapshot: {e}")))?;
    Ok(ep
        .write(Command::SnapshotRestore(SnapshotRestore { image }))
        .await?
        .0)
}

/// `System.GarbageCollect`: a `force-gc` evaluation, which the `_core` scheduler runs like
/// the periodic ones but without their age thresholds.
pub async fn system_gc(ep: &Endpoints) -> Result<SystemGcResponse, ServiceError> {
    let now = ep.now();
    let eval =
        crate::server::evals::core_eval(crate::server::evals::FORCE_GC, now, &mut ep.rng().fork());
    let eval_id = eval.id.to_string();
    let (index, _) = ep
        .write(Command::EvalUpsert(EvalUpsert { evals: vec![eval] }))
        .await?;
    Ok(SystemGcResponse { eval_id, index })
}

/// `System.ReconcileJobSummaries`: one raft entry in which every server recomputes every
/// job's summary from its allocations; the raft index.
pub async fn reconcile_summaries(ep: &Endpoints) -> Result<u64, ServiceError> {
    let (index, _) = ep.write(Command::ReconcileJobSummaries).await?;
    Ok(index)
}

/// `Operator.BrokerStats`: this server's broker, blocked-evals and plan-queue counts.
pub fn broker_stats(ep: &Endpoints) -> BrokerStatsResponse {
    let b = ep.broker().stats();
    let blocked = ep.blocked().stats();
    BrokerStatsResponse {
        leader: ep.leadership().is_established(),
        enabled: ep.broker().enabled(),
        total_ready: b.total_ready,
        total_unacked: b.total_unacked,
        total_pending: b.total_pending,
        total_waiting: b.total_waiting,
        total_cancelable: b.total_cancelable,
        by_scheduler: b
            .by_scheduler
            .iter()
            .map(|(queue, s)| {
                (
                    queue.as_str().to_string(),
                    QueueCounts {
                        ready: s.ready,
                        unacked: s.unacked,
                        pending: s.pending,
                        waiting: s.waiting,
                        cancelable: s.cancelable,
                    },
                )
            })
            .collect(),
        total_blocked: blocked.total_blocked,
        total_escaped: blocked.total_escaped,
        total_system_blocked: blocked.total_system,
        plan_queue_depth: ep.plans().depth(),
    }
}
