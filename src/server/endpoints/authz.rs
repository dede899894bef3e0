//! Who may make a call on the RPC port when ACLs are on.
//!
//! Every call that arrives on the RPC port is checked here, whoever claims to send it: the
//! raft id in a frame header is only a claim (mutual TLS with `verify_server_hostname` is what
//! makes a server's claim trustworthy), so a call another server forwarded is checked against
//! the credential it carries ([`credential`](crate::rpc::service::credential)) like any other.
//! Only the calls that servers alone make (the scheduler's `Eval.*`, `Plan.*` and the job
//! garbage collector's `Job.BatchDeregister`) are taken on a raft member's word, as Nomad
//! takes them.
//!
//! - Client agents send their node's secret with every call ([`crate::rpc::AuthedService`]);
//!   a call about a node must carry that node's secret, so one client cannot report for, read
//!   the allocations of, or deregister another. A node registers itself without a token (the
//!   registration itself checks the secret of a node that exists).
//! - The API's calls need what their HTTP routes need (`http::acl::route_need`):
//!   `submit-job` in the job's namespace to register it, `node` write to drain a node,
//!   `operator` write to change the scheduler's configuration, a management token for the
//!   ACL, namespace, snapshot and garbage-collection writes. A call about an object that does
//!   not exist needs nothing more: it is answered "not found" and shows nothing.
//! - `Node.Register`, `ACL.ResolveToken`, `ACL.Bootstrap` (once only, then refused) and
//!   `Operator.RaftJoin` are open. Without mutual TLS an open join lets anyone become a raft
//!   member (and read the replicated state), as Nomad's serf join does without a gossip key.
//!   A member removing itself (`Operator.RaftRemovePeer` of its own id, sent by a server
//!   with `leave_on_terminate`) is taken on its word in the same way ([`is_own_leave`]):
//!   with TLS only when its certificate names the server role.
//!
//! Calls made in process (the HTTP API, which checked the route; the workers) are not checked
//! here.

use teamster_storage::state::Snapshot;

use super::acl::denied;
use super::{Endpoints, Origin};
use crate::acl::{Capability as C, Need};
use crate::rpc::service::operator::RaftRemovePeerRequest;
use crate::rpc::{ServiceError, ServiceRequest};
use crate::server::acl::AclError;
use crate::util::tls::PeerRole;

/// What a call needs.
enum Needs<'a> {
    /// Nothing more (the call checks what it must itself).
    Open,
    /// The secret of every one of these nodes.
    NodeSecret(Vec<&'a str>),
    /// The node's secret, or an ACL token meeting the need.
    NodeSecretOr(&'a str, Need),
    /// The secret of the node of every allocation named.
    AllocNodes(Vec<&'a str>),
    /// The secret of the node of every registration named that exists, or a token that may
    /// delete registrations in the namespace.
    ServiceRegs(&'a str, Vec<(&'a str, &'a str)>),
    /// A server (refused from outside the raft members).
    ServerOnly,
    /// An ACL token meeting every need (none: anyone).
    Token(Vec<Need>),
}

/// `caps` in namespace `ns`.
fn in_ns(ns: &str, caps: &'static [C]) -> Vec<Need> {
    vec![Need::Namespace(ns.to_string(), caps)]
}

/// `caps` in the namespace of an object (none when it does not exist: "not found").
fn in_obj(ns: Option<&str>, caps: &'static [C]) -> Vec<Need> {
    ns.map(|ns| in_ns(ns, caps)).unwrap_or_default()
}

fn needs<'a>(snap: &Snapshot, call: &'a ServiceRequest) -> Needs<'a> {
    use Needs::Token;
    use ServiceRequest as Q;
    let alloc_ns = |id: &str| snap.alloc_by_id(id).map(|a| a.namespace.to_string());
    // A capability in the namespace of the deployment named (none when it does not exist).
    let in_deployment = |id: &str, caps: &'static [C]| {
        let ns = snap.deployment_by_id(id).map(|d| d.namespace.to_string());
        Token(in_obj(ns.as_deref(), caps))
    };
    match call {
        Q::NodeRegister(_)
        | Q::AclResolveToken(_)
        // The endpoints check the secrets they are given.
        | Q::AclUpsertOneTimeToken(_)
        | Q::AclExchangeOneTimeToken(_)
        | Q::AclBootstrap(_)
        // Checked per variable and namespace by the endpoint, as the caller's token allows.
        | Q::TemplateRead(_)
        // Public keys, published to anyone at /.well-known/jwks.json.
        | Q::KeyringListPublic(_)
        | Q::OperatorRaftJoin(_) => Needs::Open,
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
        Q::NodeEvaluate(_) => Needs::Token(vec![Need::NodeWrite]),
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
        | Q::PlanSubmitBatch(_)
        // The `_core` scheduler's purge of dead jobs (job GC), from any server's worker.
        | Q::JobBatchDeregister(_) => Needs::ServerOnly,
        Q::ServiceRegistrationDelete(r) => Needs::ServiceRegs(
            r.namespace.as_str(),
            r.ids
                .iter()
                .map(|(name, id)| (name.as_str(), id.as_str()))
                .collect(),
        ),
        Q::JobRegister(r) => Token(in_ns(
            r.job.namespace.as_str(),
            &[C::SubmitJob, C::RegisterJob],
        )),
        Q::JobDeregister(r) if r.purge => {
            Token(in_ns(r.namespace.as_str(), &[C::PurgeJob, C::SubmitJob]))
        }
        Q::JobDeregister(r) => Token(in_ns(
            r.namespace.as_str(),
            &[C::DeregisterJob, C::SubmitJob],
        )),
        Q::JobEvaluate(r) => Token(in_ns(r.namespace.as_str(), &[C::SubmitJob, C::EvaluateJob])),
        Q::JobRevert(r) => Token(in_ns(r.namespace.as_str(), &[C::SubmitJob, C::RevertJob])),
        Q::JobPlan(r) => Token(in_ns(r.job.namespace.as_str(), &[C::SubmitJob, C::PlanJob])),
        Q::JobScale(r) => Token(in_ns(r.namespace.as_str(), &[C::ScaleJob, C::SubmitJob])),
        Q::JobStable(r) => Token(in_ns(r.namespace.as_str(), &[C::SubmitJob, C::StableJob])),
        Q::JobPeriodicForce(r) => Token(in_ns(
            r.namespace.as_str(),
            &[C::SubmitJob, C::ForcePeriodicJob],
        )),
        Q::JobDispatch(r) => Token(in_ns(r.namespace.as_str(), &[C::DispatchJob])),
        Q::AllocSignIdentities(r) => {
            Needs::AllocNodes(r.identities.iter().map(|i| i.alloc_id.as_str()).collect())
        }
        Q::KeyringRotate(_) | Q::KeyringDelete(_) => Token(vec![Need::OperatorWrite]),
        Q::VariablesApply(r) => Token(vec![Need::Variable(
            r.namespace.clone(),
            r.path.clone(),
            match r.op {
                crate::rpc::service::variables::VariableOp::Delete => {
                    crate::acl::VarCap::Destroy
                }
                // Writes, and lock acquires and releases (Nomad's `write`).
                _ => crate::acl::VarCap::Write,
            },
        )]),
        Q::VariablesRenewLock(r) => Token(vec![Need::Variable(
            r.namespace.clone(),
            r.path.clone(),
            crate::acl::VarCap::Write,
        )]),
        Q::AllocStop(r) => Token(in_obj(
            alloc_ns(r.alloc_id.as_str()).as_deref(),
            &[C::AllocLifecycle],
        )),
        Q::DeploymentFail(r) => {
            in_deployment(r.deployment_id.as_str(), &[C::SubmitJob, C::FailDeployment])
        }
        Q::DeploymentPause(r) => in_deployment(
            r.deployment_id.as_str(),
            &[C::SubmitJob, C::PauseDeployment],
        ),
        Q::DeploymentPromote(r) => in_deployment(
            r.deployment_id.as_str(),
            &[C::SubmitJob, C::PromoteDeployment],
        ),
        Q::DeploymentSetAllocHealth(r) => in_deployment(
            r.deployment_id.as_str(),
            &[C::SubmitJob, C::SetAllocHealthDeployment],
        ),
        Q::OperatorBrokerStats(_) | Q::OperatorServerHealth(_) => {
            Token(vec![Need::OperatorRead])
        }
        Q::OperatorRaftRemovePeer(_)
        | Q::OperatorSchedulerSetConfiguration(_)
        | Q::OperatorAutopilotSetConfiguration(_) => Token(vec![Need::OperatorWrite]),
        // Garbage collection, snapshots, namespaces and the ACL writes.
        Q::SystemGc(_)
        | Q::SystemReconcileSummaries(_)
        | Q::OperatorSnapshotRestore(_)
        | Q::NamespaceUpsert(_)
        | Q::NamespaceDelete(_)
        | Q::AclUpsertPolicies(_)
        | Q::AclDeletePolicies(_)
        | Q::AclUpsertTokens(_)
        | Q::AclDeleteTokens(_) => Token(vec![Need::Management]),
    }
}

/// Whether `token` is the secret of node `node_id` in `snap` (a node that does not exist
/// has no secret to match).
fn is_node_secret(snap: &Snapshot, node_id: &str, token: &str) -> bool {
    snap.node_by_id(node_id)
        .is_some_and(|n| !n.secret_id.is_empty() && n.secret_id == token)
}

/// Whether `token` is the secret of some node (a linear scan: only for a report that names
/// no allocation the server knows).
fn is_any_node_secret(snap: &Snapshot, token: &str) -> bool {
    snap.nodes()
        .any(|n| !n.secret_id.is_empty() && n.secret_id == token)
}

/// Whether `call` is a raft member removing itself (`leave_on_terminate`), sent by a peer
/// whose claim to be that member holds as far as the transport can tell: a certificate
/// naming the server role, or plain TCP, where raft traffic is taken on the same word.
pub fn is_own_leave(
    origin: Origin,
    call: &ServiceRequest,
    tls: bool,
    role: Option<PeerRole>,
) -> bool {
    let Origin::Server(from) = origin else {
        return false;
    };
    let leaving_self = matches!(
        call,
        ServiceRequest::OperatorRaftRemovePeer(RaftRemovePeerRequest::Id(id)) if *id == from
    );
    leaving_self && (!tls || role == Some(PeerRole::Server))
}

/// Refuses a call on the RPC port, from a caller at `origin` with `token` (its own, or the
/// one a forwarding server passed on), that the token does not allow (ACLs on).
pub fn authorize(
    ep: &Endpoints,
    origin: Origin,
    token: Option<&str>,
    call: &ServiceRequest,
) -> Result<(), ServiceError> {
    let permission_denied = || denied(AclError::PermissionDenied);
    let token = token.filter(|t| !t.is_empty());
    let snap = ep.node().state().snapshot();
    match needs(&snap, call) {
        Needs::Open => Ok(()),
        Needs::ServerOnly if origin == Origin::Outside => Err(permission_denied()),
        Needs::ServerOnly => Ok(()),
        Needs::NodeSecret(nodes) => {
            let token = token.ok_or_else(permission_denied)?;
            if nodes.iter().all(|n| is_node_secret(&snap, n, token)) {
                Ok(())
            } else {
                Err(permission_denied())
            }
        }
        Needs::NodeSecretOr(node, need) => {
            if token.is_some_and(|t| is_node_secret(&snap, node, t)) {
                return Ok(());
            }
            // A token, or none (the anonymous policy), that meets the need.
            ep.resolve_token(token)
                .map_err(denied)?
                .require(&need)
                .map_err(denied)
        }
        Needs::AllocNodes(allocs) => {
            let token = token.ok_or_else(permission_denied)?;
            let known: Vec<&str> = allocs
                .iter()
                .filter_map(|id| snap.alloc_by_id(id).map(|a| a.node_id.as_str()))
                .collect();
            // Unknown allocations are skipped by the update and reported back; a report of
            // nothing but unknown ones still comes from a node.
            let ok = if known.is_empty() {
                is_any_node_secret(&snap, token)
            } else {
                known.iter().all(|node| is_node_secret(&snap, node, token))
            };
            if ok {
                Ok(())
            } else {
                Err(permission_denied())
            }
        }
        Needs::ServiceRegs(namespace, regs) => {
            let by_node = token.is_some_and(|token| {
                regs.iter().all(|(name, id)| {
                    match snap.services_by_name(namespace, name).find(|r| r.id == *id) {
                        Some(reg) => is_node_secret(&snap, reg.node_id.as_str(), token),
                        None => true,
                    }
                })
            });
            if by_node {
                return Ok(());
            }
            // An operator removing a registration (`DELETE /v1/service/:name/:id`), with a
            // token or as the anonymous policy allows.
            ep.resolve_token(token)
                .map_err(|_| permission_denied())?
                .require(&Need::Namespace(
                    namespace.to_string(),
                    &[C::SubmitJob, C::DeleteServiceRegistration],
                ))
                .map_err(denied)
        }
        Needs::Token(needs) => {
            let identity = ep.resolve_token(token).map_err(denied)?;
            needs
                .iter()
                .try_for_each(|need| identity.require(need))
                .map_err(denied)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::service::operator::RaftRemovePeerRequest as Remove;

    #[test]
    fn only_a_member_removing_itself_is_a_leave() {
        let own = ServiceRequest::OperatorRaftRemovePeer(Remove::Id(7));
        let other = ServiceRequest::OperatorRaftRemovePeer(Remove::Id(8));
        let by_addr = ServiceRequest::OperatorRaftRemovePeer(Remove::Address("a:1".into()));
        // Plain TCP: a member's word, as for its raft traffic.
        assert!(is_own_leave(Origin::Server(7), &own, false, None));
        assert!(!is_own_leave(Origin::Server(7), &other, false, None));
        assert!(!is_own_leave(Origin::Server(7), &by_addr, false, None));
        assert!(!is_own_leave(Origin::Outside, &own, false, None));
        assert!(!is_own_leave(Origin::Local, &own, false, None));
        // TLS: only with a server certificate.
        assert!(is_own_leave(
            Origin::Server(7),
            &own,
            true,
            Some(PeerRole::Server)
        ));
        assert!(!is_own_leave(
            Origin::Server(7),
            &own,
            true,
            Some(PeerRole::Client)
        ));
        assert!(!is_own_leave(Origin::Server(7), &own, true, None));
    }
}
