//! Who may make a call on the RPC port from outside the cluster's servers when ACLs are on.
//!
//! Client agents send their node's secret with every call ([`crate::rpc::AuthedService`]);
//! a call about a node must carry that node's secret, so one client cannot report for, read
//! the allocations of, or deregister another. A node registers itself without a token (the
//! registration itself checks the secret of a node that exists). The scheduler's calls
//! (`Eval.*`, `Plan.*`) are for servers only. Every other call (the API's writes, which the
//! CLI and tools make over HTTP) needs a management token when it arrives over RPC.
//!
//! Calls forwarded by another server and calls made in process are not checked here: the
//! server that took the request checked it (its HTTP API, or this on its RPC port), and
//! mutual TLS is what makes a server's claim to be one trustworthy.

use teamster_storage::state::Snapshot;

use super::acl::denied;
use super::Endpoints;
use crate::acl::Need;
use crate::rpc::{ServiceError, ServiceRequest};
use crate::server::acl::AclError;

/// What a call from outside needs.
enum Needs<'a> {
    /// Nothing more (the call checks what it must itself).
    Open,
    /// The secret of every one of these nodes.
    NodeSecret(Vec<&'a str>),
    /// The node's secret, or an ACL token meeting the need.
    NodeSecretOr(&'a str, Need),
    /// The secret of the node of every allocation named.
    AllocNodes(Vec<&'a str>),
    /// The secret of the node of every registration named that exists.
    ServiceRegs(&'a str, Vec<(&'a str, &'a str)>),
    /// A server (refused from outside).
    ServerOnly,
    /// A management token.
    Management,
}

fn needs(call: &ServiceRequest) -> Needs<'_> {
    use ServiceRequest as Q;
    match call {
        Q::NodeRegister(_) | Q::AclResolveToken(_) | Q::OperatorRaftJoin(_) => Needs::Open,
        Q::NodeUpdateStatus(r) => Needs::NodeSecret(vec![r.node_id.as_str()]),
        Q::NodeGetClientAllocs(r) => Needs::NodeSecret(vec![r.node_id.as_str()]),
        Q::ServiceRegistrationListByNode(r) => Needs::NodeSecret(vec![r.node_id.as_str()]),
        Q::ServiceRegistrationUpsert(r) => {
            Needs::NodeSecret(r.services.iter().map(|s| s.node_id.as_str()).collect())
        }
        Q::NodeUpdateAlloc(r) => {
            Needs::AllocNodes(r.allocs.iter().map(|a| a.id.as_str()).collect())
        }
        Q::NodeDeregister(r) => Needs::NodeSecretOr(r.node_id.as_str(), Need::NodeWrite),
        Q::NodeUpdateEligibility(r) => Needs::NodeSecretOr(r.node_id.as_str(), Need::NodeWrite),
        Q::NodeUpdateDrain(r) => Needs::NodeSecretOr(r.node_id.as_str(), Need::NodeWrite),
        Q::EvalDequeue(_)
        | Q::EvalDequeueBatch(_)
        | Q::EvalAck(_)
        | Q::EvalAckBatch(_)
        | Q::EvalNack(_)
        | Q::EvalUpdate(_)
        | Q::EvalCreate(_)
        | Q::EvalReblock(_)
        | Q::EvalReap(_)
        | Q::PlanSubmit(_)
        | Q::PlanSubmitBatch(_) => Needs::ServerOnly,
        Q::ServiceRegistrationDelete(r) => Needs::ServiceRegs(
            r.namespace.as_str(),
            r.ids
                .iter()
                .map(|(name, id)| (name.as_str(), id.as_str()))
                .collect(),
        ),
        Q::JobRegister(_)
        | Q::JobDeregister(_)
        | Q::JobEvaluate(_)
        | Q::JobBatchDeregister(_)
        | Q::JobRevert(_)
        | Q::JobPlan(_)
        | Q::JobScale(_)
        | Q::JobStable(_)
        | Q::JobPeriodicForce(_)
        | Q::JobDispatch(_)
        | Q::SystemGc(_)
        | Q::SystemReconcileSummaries(_)
        | Q::AllocStop(_)
        | Q::OperatorRaftRemovePeer(_)
        | Q::OperatorSchedulerSetConfiguration(_)
        | Q::OperatorSnapshotRestore(_)
        | Q::OperatorBrokerStats(_)
        | Q::DeploymentFail(_)
        | Q::DeploymentPause(_)
        | Q::DeploymentPromote(_)
        | Q::DeploymentSetAllocHealth(_)
        | Q::NamespaceUpsert(_)
        | Q::NamespaceDelete(_)
        | Q::AclBootstrap(_)
        | Q::AclUpsertPolicies(_)
        | Q::AclDeletePolicies(_)
        | Q::AclUpsertTokens(_)
        | Q::AclDeleteTokens(_) => Needs::Management,
    }
}

/// Whether `token` is the secret of node `node_id` in `snap` (a node that does not exist
/// has no secret to match).
fn is_node_secret(snap: &Snapshot, node_id: &str, token: &str) -> bool {
    snap.node_by_id(node_id)
        .is_some_and(|n| !n.secret_id.is_empty() && n.secret_id == token)
}

/// Refuses a call from outside the servers that `token` does not allow (ACLs on).
pub fn authorize_outside(
    ep: &Endpoints,
    token: Option<&str>,
    call: &ServiceRequest,
) -> Result<(), ServiceError> {
    let permission_denied = || denied(AclError::PermissionDenied);
    let token = token.filter(|t| !t.is_empty());
    match needs(call) {
        Needs::Open => Ok(()),
        Needs::ServerOnly => Err(permission_denied()),
        Needs::NodeSecret(nodes) => {
            let token = token.ok_or_else(permission_denied)?;
            let snap = ep.node().state().snapshot();
            if nodes.iter().all(|n| is_node_secret(&snap, n, token)) {
                Ok(())
            } else {
                Err(permission_denied())
            }
        }
        Needs::NodeSecretOr(node, need) => {
            let token = token.ok_or_else(permission_denied)?;
            if is_node_secret(&ep.node().state().snapshot(), node, token) {
                return Ok(());
            }
            ep.resolve_token(Some(token))
                .map_err(denied)?
                .require(&need)
                .map_err(denied)
        }
        Needs::AllocNodes(allocs) => {
            let token = token.ok_or_else(permission_denied)?;
            let snap = ep.node().state().snapshot();
            let ok = allocs.iter().all(|id| match snap.alloc_by_id(id) {
                Some(alloc) => is_node_secret(&snap, alloc.node_id.as_str(), token),
                // Unknown allocations are skipped by the update and reported back.
                None => true,
            });
            if ok {
                Ok(())
            } else {
                Err(permission_denied())
            }
        }
        Needs::ServiceRegs(namespace, regs) => {
            let token = token.ok_or_else(permission_denied)?;
            let snap = ep.node().state().snapshot();
            let ok = regs.iter().all(|(name, id)| {
                match snap.services_by_name(namespace, name).find(|r| r.id == *id) {
                    Some(reg) => is_node_secret(&snap, reg.node_id.as_str(), token),
                    None => true,
                }
            });
            if ok {
                Ok(())
            } else {
                Err(permission_denied())
            }
        }
        Needs::Management => ep
            .resolve_token(token)
            .map_err(denied)?
            .require(&Need::Management)
            .map_err(denied),
    }
}
