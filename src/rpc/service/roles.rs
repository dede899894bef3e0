//! Who may send what on the RPC port, by the role the peer's TLS certificate names
//! (`server.<region>.nomad`, `client.<region>.nomad`, `cli.<region>.nomad`).
//!
//! Raft traffic, cluster formation and every call that only servers make (scheduler workers'
//! `Eval.*` and `Plan.*`, `Operator.*`, the writes the HTTP API forwards to the leader) need a
//! server certificate; the calls a client agent makes (`Node.Register`, heartbeats, its
//! allocation query and updates, its service registrations, resolving an ACL token,
//! `Status.Ping`; with or without an ACL credential) are allowed to
//! clients and servers. A peer that is not a server must also send as raft id 0: a client
//! cannot pass itself off as a server in the frame header.
//!
//! The matches are exhaustive on purpose: a new call or request does not compile until it is
//! given a place here. Enforced by the transport only with `verify_server_hostname`.

use teamster_storage::raft_types::ServerId;

use crate::rpc::message::RpcRequest;
use crate::rpc::service::ServiceRequest;
use crate::rpc::RpcError;
use crate::util::tls::PeerRole;

/// Who may send a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowed {
    /// Servers only.
    Servers,
    /// Client agents and servers.
    ClientsAndServers,
}

/// Who may send `req` on the RPC port.
pub fn allowed(req: &RpcRequest) -> Allowed {
    match req {
        RpcRequest::AppendEntries(_)
        | RpcRequest::Vote(_)
        | RpcRequest::InstallSnapshot(_)
        | RpcRequest::ServerInfo
        | RpcRequest::ReadIndex
        | RpcRequest::KeyringKek(_)
        | RpcRequest::TimeoutNow => Allowed::Servers,
        RpcRequest::Ping => Allowed::ClientsAndServers,
        RpcRequest::Service(call) => service_allowed(call),
        RpcRequest::AuthService(authed) => service_allowed(&authed.call),
    }
}

/// Who may send the service call `call` on the RPC port.
pub fn service_allowed(call: &ServiceRequest) -> Allowed {
    use ServiceRequest as S;
    match call {
        // What a client agent calls (src/client).
        S::NodeRegister(_)
        | S::NodeUpdateStatus(_)
        | S::NodeUpdateAlloc(_)
        | S::NodeGetClientAllocs(_)
        | S::ServiceRegistrationUpsert(_)
        | S::ServiceRegistrationDelete(_)
        | S::ServiceRegistrationListByNode(_)
        | S::AllocSignIdentities(_)
        // A task's templates, read with its workload identity.
        | S::TemplateRead(_)
        // A client agent resolves the tokens its own HTTP API is called with.
        | S::AclResolveToken(_)
        // and serves the keys that verify workload identities.
        | S::KeyringListPublic(_) => Allowed::ClientsAndServers,
        // Scheduler workers, the leader's subsystems, operators and the HTTP API's writes
        // forwarded by a server.
        S::JobRegister(_)
        | S::JobDeregister(_)
        | S::JobEvaluate(_)
        | S::JobBatchDeregister(_)
        | S::EvalDequeue(_)
        | S::EvalAck(_)
        | S::EvalNack(_)
        | S::EvalUpdate(_)
        | S::EvalCreate(_)
        | S::EvalReblock(_)
        | S::EvalReap(_)
        | S::PlanSubmit(_)
        | S::NodeDeregister(_)
        | S::NodeEvaluate(_)
        | S::NodeUpdateEligibility(_)
        | S::NodeUpdateDrain(_)
        | S::OperatorRaftJoin(_)
        | S::OperatorRaftRemovePeer(_)
        | S::OperatorSchedulerSetConfiguration(_)
        | S::OperatorAutopilotSetConfiguration(_)
        | S::OperatorServerHealth(_)
        | S::OperatorSnapshotRestore(_)
        | S::OperatorBrokerStats(_)
        | S::JobRevert(_)
        | S::JobPlan(_)
        | S::JobScale(_)
        | S::JobStable(_)
        | S::JobPeriodicForce(_)
        | S::JobDispatch(_)
        | S::SystemGc(_)
        | S::EvalDequeueBatch(_)
        | S::AllocStop(_)
        | S::KeyringRotate(_)
        | S::KeyringDelete(_)
        | S::VariablesApply(_)
        | S::VariablesRenewLock(_)
        | S::AclUpsertOneTimeToken(_)
        | S::AclExchangeOneTimeToken(_)
        | S::SystemReconcileSummaries(_)
        | S::PlanSubmitBatch(_)
        | S::EvalAckBatch(_)
        | S::DeploymentFail(_)
        | S::DeploymentPause(_)
        | S::DeploymentPromote(_)
        | S::DeploymentSetAllocHealth(_)
        | S::NamespaceUpsert(_)
        | S::NamespaceDelete(_)
        | S::AclBootstrap(_)
        | S::AclUpsertPolicies(_)
        | S::AclDeletePolicies(_)
        | S::AclUpsertTokens(_)
        | S::AclDeleteTokens(_) => Allowed::Servers,
    }
}

/// Whether a peer whose certificate names `role` may send `req` as raft id `sender`; the
/// refusal otherwise.
pub fn permit(req: &RpcRequest, sender: ServerId, role: Option<PeerRole>) -> Result<(), RpcError> {
    let ok = match role {
        Some(PeerRole::Server) => true,
        Some(PeerRole::Client) => sender == 0 && allowed(req) == Allowed::ClientsAndServers,
        // An operator's certificate is for the HTTP API; on the RPC port it may only ping.
        Some(PeerRole::Cli) | None => sender == 0 && matches!(req, RpcRequest::Ping),
    };
    if ok {
        Ok(())
    } else {
        Err(RpcError::PermissionDenied {
            kind: req.kind().to_string(),
            role: role.map_or("no role", PeerRole::name).to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::service::node::NodeGetClientAllocsRequest;
    use crate::rpc::service::operator::RaftJoinRequest;

    fn vote() -> RpcRequest {
        RpcRequest::Vote(openraft::raft::VoteRequest::new(
            openraft::Vote::new(1, 1),
            None,
        ))
    }

    fn client_allocs() -> RpcRequest {
        RpcRequest::Service(ServiceRequest::NodeGetClientAllocs(
            NodeGetClientAllocsRequest {
                node_id: "n".into(),
                min_index: 0,
                wait_ms: 0,
            },
        ))
    }

    #[test]
    fn clients_may_not_send_raft_or_server_calls() {
        let client = Some(PeerRole::Client);
        let server = Some(PeerRole::Server);
        assert!(permit(&vote(), 0, client).is_err());
        assert!(permit(&RpcRequest::ServerInfo, 0, client).is_err());
        assert!(permit(&RpcRequest::ReadIndex, 0, client).is_err());
        assert!(permit(&RpcRequest::TimeoutNow, 0, client).is_err());
        let join = RpcRequest::Service(ServiceRequest::OperatorRaftJoin(RaftJoinRequest {
            id: 9,
            addr: Default::default(),
        }));
        let e = permit(&join, 0, client).unwrap_err();
        assert!(
            matches!(&e, RpcError::PermissionDenied { kind, role } if kind == "Operator.RaftJoin" && role == "client"),
            "{e:?}"
        );
        assert!(permit(&join, 0, server).is_ok());
        assert!(permit(&vote(), 2, server).is_ok());
    }

    #[test]
    fn clients_may_send_their_own_calls_as_id_zero_only() {
        let client = Some(PeerRole::Client);
        assert!(permit(&client_allocs(), 0, client).is_ok());
        assert!(permit(&RpcRequest::Ping, 0, client).is_ok());
        // Claiming a server's raft id in the header is refused.
        assert!(permit(&client_allocs(), 7, client).is_err());
        // An operator's certificate or one with no role may only ping.
        assert!(permit(&client_allocs(), 0, Some(PeerRole::Cli)).is_err());
        assert!(permit(&RpcRequest::Ping, 0, Some(PeerRole::Cli)).is_ok());
        assert!(permit(&RpcRequest::Ping, 0, None).is_ok());
        assert!(permit(&client_allocs(), 0, None).is_err());
    }
}
