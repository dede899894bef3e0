//! ACL enforcement on every route, in one place: [`enforce`] resolves the request's token
//! (`X-Nomad-Token`, or `Authorization: Bearer …`), works out what the matched route needs
//! ([`route_need`], one table for the whole API) and answers 403 with Nomad's message
//! ("Permission denied", "ACL token not found", "ACL token expired") before any handler runs.
//! The caller's [`Identity`] goes into the request's extensions for the handlers that filter
//! what they list (`/v1/namespaces`, `/v1/acl/*`).
//!
//! Servers resolve from their own state (cached, never a raft write); a client-only agent
//! asks the servers (`ACL.ResolveToken`) and keeps the answer for `acl.token_ttl`.
//!
//! Namespaced routes need their capability in the request's namespace (`?namespace=`,
//! default `default`); a route about one allocation, evaluation or deployment needs it in
//! that object's namespace. `?namespace=*` needs the capability in every namespace that
//! exists (stricter than Nomad, which filters the list instead). A route missing from the
//! table needs a management token, so a new route is closed until it is given its rule.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::acl::{Acl, Capability as C, Need, Policy};
use crate::http::error::ApiError;
use crate::http::HttpContext;
use crate::rpc::service::credential::with_caller_token;
use crate::server::acl::{AclError, Identity};

/// The secret a request carries, if any.
pub fn request_token(headers: &HeaderMap) -> Option<String> {
    if let Some(t) = headers.get("x-nomad-token").and_then(|v| v.to_str().ok()) {
        let t = t.trim();
        if !t.is_empty() {
            return Some(t.to_string());
        }
    }
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().strip_prefix("Bearer "))
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
}

/// Tokens a client-only agent resolved through the servers, with until when each is kept.
#[derive(Default)]
pub struct RemoteTokens {
    by_secret: Mutex<HashMap<String, (Instant, Identity)>>,
}

/// How many tokens a client-only agent keeps resolved.
const MAX_REMOTE_TOKENS: usize = 1024;

impl HttpContext {
    /// Who `secret` is: from the server's state, or through the servers on a client-only
    /// agent; unrestricted when ACLs are off.
    pub async fn resolve_token(&self, secret: Option<&str>) -> Result<Identity, ApiError> {
        if !self.agent().acl.enabled {
            return Ok(Identity::unrestricted());
        }
        if let Ok(endpoints) = self.endpoints() {
            return endpoints.resolve_token(secret).map_err(forbidden);
        }
        let Some(client) = self.client() else {
            return Err(ApiError::internal("the agent is starting"));
        };
        let key = secret.unwrap_or("").to_string();
        let ttl = self.agent().acl.token_ttl;
        if let Some((at, id)) = self
            .remote_tokens()
            .by_secret
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            if Instant::now() < *at {
                return Ok(id.clone());
            }
        }
        let resolved = client.resolve_token(&key).await?;
        let mut policies: Vec<Policy> = Vec::new();
        for p in &resolved.policies {
            if let Ok(parsed) = crate::acl::parse_policy(&p.rules) {
                policies.push(parsed);
            }
        }
        let token = resolved.token.map(Arc::new);
        let claims: Option<Arc<crate::keyring::IdentityClaims>> = resolved
            .workload_claims
            .as_deref()
            .and_then(|c| serde_json::from_str(c).ok())
            .map(Arc::new);
        let acl = if token.as_ref().is_some_and(|t| t.is_management()) {
            Acl::management()
        } else if let Some(c) = &claims {
            Acl::workload(crate::acl::WorkloadClaim {
                namespace: c.nomad_namespace.clone(),
                job: c.nomad_job_id.clone(),
                group: resolved.workload_group.clone(),
                task: c.nomad_task.clone(),
            })
        } else {
            Acl::from_policies(&policies)
        };
        let id = Identity {
            acl: Arc::new(acl),
            token,
            claims,
        };
        let mut cache = self
            .remote_tokens()
            .by_secret
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_REMOTE_TOKENS {
            cache.clear();
        }
        // A workload identity is kept no longer than it is valid.
        let mut keep = ttl;
        if let Some(exp) = id.claims.as_ref().and_then(|c| c.exp) {
            let now = self.clock().now_unix_nanos() / 1_000_000_000;
            keep = keep.min(std::time::Duration::from_secs(
                u64::try_from(exp - now).unwrap_or(0),
            ));
        }
        cache.insert(key, (Instant::now() + keep, id.clone()));
        Ok(id)
    }
}

fn forbidden(e: AclError) -> ApiError {
    ApiError::forbidden(e.to_string())
}

/// The middleware: 403 unless the token allows the matched route.
pub async fn enforce(State(ctx): State<HttpContext>, mut req: Request, next: Next) -> Response {
    if !ctx.agent().acl.enabled {
        req.extensions_mut().insert(Identity::unrestricted());
        return next.run(req).await;
    }
    let secret = request_token(req.headers());
    let matched = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string());
    let identity = match ctx.resolve_token(secret.as_deref()).await {
        Ok(id) => id,
        // A stale or unknown token does not stop what anyone may do (status, health, the
        // bootstrap: Nomad's #16098); it is the anonymous caller there.
        Err(_) if matched.as_deref().is_some_and(is_public) => {
            match ctx.resolve_token(None).await {
                Ok(anon) => anon,
                Err(e) => return e.into_response(),
            }
        }
        Err(e) => return e.into_response(),
    };
    if let Some(pattern) = matched {
        let params = path_params(&pattern, req.uri().path());
        let query = query_pairs(req.uri().query().unwrap_or(""));
        let needs = route_need(&ctx, req.method(), &pattern, &params, &query);
        if !needs.iter().all(|n| identity.acl.allows(n)) {
            tracing::debug!(route = %pattern, "request refused by ACL");
            return forbidden(AclError::PermissionDenied).into_response();
        }
    }
    req.extensions_mut().insert(identity);
    // A call the service layer forwards to the leader carries the same token: the leader
    // checks it again.
    with_caller_token(secret, next.run(req)).await
}

/// Routes anyone may ask, with any token or none.
const PUBLIC: &[&str] = &[
    "/v1/status/leader",
    "/v1/status/peers",
    "/v1/agent/health",
    "/v1/metrics",
    "/v1/regions",
    "/v1/acl/bootstrap",
    // A one-time secret is the credential here; a stale token sent along must not stop it
    // (Nomad's UI re-authenticating sends the one it had).
    "/v1/acl/token/onetime/exchange",
    "/.well-known/jwks.json",
    "/.well-known/openid-configuration",
];

/// The web UI's routes are public too: its page and assets hold no data, and its calls to the
/// API (and the server-to-server `/ui/server/...` relay) carry the token typed into it. So
/// are the Enterprise-only routes, which answer everyone 501 as Nomad's community edition
/// does.
fn is_public(pattern: &str) -> bool {
    PUBLIC.contains(&pattern)
        || pattern == "/ui"
        || pattern.starts_with("/ui/")
        || super::enterprise::PATTERNS.contains(&pattern)
}

/// The values of a route pattern's `{params}` in `path`, percent-decoded; a `{*name}`
/// segment takes the rest of the path.
fn path_params(pattern: &str, path: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut values = path.split('/');
    for p in pattern.split('/') {
        let Some(v) = values.next() else {
            break;
        };
        let Some(name) = p.strip_prefix('{').and_then(|p| p.strip_suffix('}')) else {
            continue;
        };
        if let Some(rest) = name.strip_prefix('*') {
            let tail: Vec<&str> = std::iter::once(v).chain(values.by_ref()).collect();
            out.insert(rest.to_string(), percent_decode(&tail.join("/")));
            break;
        }
        out.insert(name.to_string(), percent_decode(v));
    }
    out
}

/// The query's pairs, percent-decoded (a key given twice keeps every value).
fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                    }
                    None => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The value of `key` as the handlers see it: they read the query into a map, where a key
/// given twice keeps its last value, so the check must read that one too (`?namespace=a&
/// namespace=b` acts on `b`).
fn query_value<'a>(query: &'a [(String, String)], key: &str) -> Option<&'a str> {
    query
        .iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Whether a `DELETE /v1/job/:id` purges, read as the handler reads `purge` (a Go boolean,
/// a bare `?purge` is true); a value it refuses needs the purge capability too.
fn purge_asked(query: &[(String, String)]) -> bool {
    query_value(query, "purge")
        .is_some_and(|v| v.is_empty() || crate::util::go::parse_go_bool(v) != Some(false))
}

/// The namespace a request names (`default` when it names none; `*` for every one).
fn request_namespace(query: &[(String, String)]) -> String {
    query_value(query, "namespace")
        .filter(|n| !n.is_empty())
        .unwrap_or("default")
        .to_string()
}

/// What the route `pattern` asked with `method` needs; every need must be met.
pub fn route_need(
    ctx: &HttpContext,
    method: &Method,
    pattern: &str,
    params: &HashMap<String, String>,
    query: &[(String, String)],
) -> Vec<Need> {
    let read = method == Method::GET || method == Method::HEAD;
    let ns = request_namespace(query);
    let param = |name: &str| params.get(name).cloned().unwrap_or_default();
    // A capability in the request's namespace (every namespace for `*`).
    let in_ns = |caps: &'static [C]| -> Vec<Need> {
        if ns == "*" {
            all_namespaces(ctx)
                .into_iter()
                .map(|n| Need::Namespace(n, caps))
                .collect()
        } else {
            vec![Need::Namespace(ns.clone(), caps)]
        }
    };
    // A capability in the namespace of the object the route names.
    let in_obj = |ns_of: Option<String>, caps: &'static [C]| -> Vec<Need> {
        match ns_of {
            Some(n) => vec![Need::Namespace(n, caps)],
            // Unknown: the handler answers 404 and shows nothing.
            None => vec![],
        }
    };
    // Reading services in the request's namespace (every namespace for `*`).
    let service_read = || -> Vec<Need> {
        if ns == "*" {
            all_namespaces(ctx)
                .into_iter()
                .map(Need::ServiceRead)
                .collect()
        } else {
            vec![Need::ServiceRead(ns.clone())]
        }
    };
    let alloc_ns = || alloc_namespace(ctx, &param("alloc_id"));
    match pattern {
        // Public.
        p if is_public(p) => vec![Need::Nothing],
        // The ACL routes check in their handlers (a token may read itself and its policies).
        p if p.starts_with("/v1/acl/") => vec![Need::Nothing],
        // Jobs.
        "/v1/jobs" if read => in_ns(&[C::ListJobs]),
        "/v1/jobs" => in_ns(&[C::SubmitJob, C::RegisterJob]),
        "/v1/job/{id}" if read => in_ns(&[C::ReadJob]),
        "/v1/job/{id}" if method == Method::DELETE => {
            if purge_asked(query) {
                in_ns(&[C::PurgeJob, C::SubmitJob])
            } else {
                in_ns(&[C::DeregisterJob, C::SubmitJob])
            }
        }
        "/v1/job/{id}" => in_ns(&[C::SubmitJob, C::RegisterJob]),
        "/v1/job/{id}/summary"
        | "/v1/job/{id}/versions"
        | "/v1/job/{id}/allocations"
        | "/v1/job/{id}/evaluations"
        | "/v1/job/{id}/deployments"
        | "/v1/job/{id}/deployment"
        | "/v1/job/{id}/actions" => in_ns(&[C::ReadJob]),
        "/v1/job/{id}/action" => in_ns(&[C::AllocExec]),
        "/v1/job/{id}/evaluate" => in_ns(&[C::SubmitJob, C::EvaluateJob]),
        "/v1/job/{id}/revert" => in_ns(&[C::SubmitJob, C::RevertJob]),
        "/v1/job/{id}/plan" => in_ns(&[C::SubmitJob, C::PlanJob]),
        "/v1/job/{id}/stable" => in_ns(&[C::SubmitJob, C::StableJob]),
        "/v1/job/{id}/periodic/force" => in_ns(&[C::SubmitJob, C::ForcePeriodicJob]),
        "/v1/job/{id}/dispatch" => in_ns(&[C::DispatchJob]),
        "/v1/job/{id}/scale" if read => in_ns(&[C::ReadJob, C::ReadJobScaling]),
        "/v1/job/{id}/scale" => in_ns(&[C::ScaleJob, C::SubmitJob]),
        "/v1/jobs/parse" => in_ns(&[C::ParseJob, C::SubmitJob]),
        "/v1/validate/job" => in_ns(&[C::ReadJob, C::SubmitJob]),
        "/v1/scaling/policies" | "/v1/scaling/policy/{id}" => {
            in_ns(&[C::ListScalingPolicies, C::ReadScalingPolicy])
        }
        // Allocations, evaluations, deployments.
        "/v1/allocations" | "/v1/evaluations" | "/v1/deployments" => in_ns(&[C::ReadJob]),
        "/v1/allocation/{id}" | "/v1/allocation/{id}/services" => in_obj(
            object_namespace(ctx, Object::Alloc, &param("id")),
            &[C::ReadJob],
        ),
        "/v1/allocation/{id}/stop" => in_obj(
            object_namespace(ctx, Object::Alloc, &param("id")),
            &[C::AllocLifecycle],
        ),
        "/v1/evaluation/{id}" | "/v1/evaluation/{id}/allocations" => in_obj(
            object_namespace(ctx, Object::Eval, &param("id")),
            &[C::ReadJob],
        ),
        "/v1/deployment/{id}" | "/v1/deployment/allocations/{id}" => in_obj(
            object_namespace(ctx, Object::Deployment, &param("id")),
            &[C::ReadJob],
        ),
        "/v1/deployment/promote/{id}" => in_obj(
            object_namespace(ctx, Object::Deployment, &param("id")),
            &[C::SubmitJob, C::PromoteDeployment],
        ),
        "/v1/deployment/fail/{id}" => in_obj(
            object_namespace(ctx, Object::Deployment, &param("id")),
            &[C::SubmitJob, C::FailDeployment],
        ),
        "/v1/deployment/unblock/{id}" => in_obj(
            object_namespace(ctx, Object::Deployment, &param("id")),
            &[C::SubmitJob, C::UnblockDeployment],
        ),
        "/v1/deployment/pause/{id}" => in_obj(
            object_namespace(ctx, Object::Deployment, &param("id")),
            &[C::SubmitJob, C::PauseDeployment],
        ),
        "/v1/deployment/allocation-health/{id}" => in_obj(
            object_namespace(ctx, Object::Deployment, &param("id")),
            &[C::SubmitJob, C::SetAllocHealthDeployment],
        ),
        // A client's allocations.
        "/v1/client/allocation/{alloc_id}/restart" | "/v1/client/allocation/{alloc_id}/signal" => {
            in_obj(alloc_ns(), &[C::AllocLifecycle])
        }
        "/v1/client/allocation/{alloc_id}/stats" | "/v1/client/allocation/{alloc_id}/checks" => {
            in_obj(alloc_ns(), &[C::ReadJob])
        }
        "/v1/client/allocation/{alloc_id}/exec" => in_obj(alloc_ns(), &[C::AllocExec]),
        "/v1/client/allocation/{alloc_id}/gc" => {
            in_obj(alloc_ns(), &[C::SubmitJob, C::GcAllocation])
        }
        "/v1/client/gc" => vec![Need::NodeWrite],
        // A migrating disk's data: the handler checks the servers' migrate token instead.
        "/v1/client/allocation/{alloc_id}/snapshot" => vec![Need::Nothing],
        "/v1/client/fs/logs/{alloc_id}" => in_obj(alloc_ns(), &[C::ReadLogs]),
        "/v1/client/fs/cat/{alloc_id}"
        | "/v1/client/fs/ls/{alloc_id}"
        | "/v1/client/fs/stat/{alloc_id}"
        | "/v1/client/fs/readat/{alloc_id}"
        | "/v1/client/fs/stream/{alloc_id}" => in_obj(alloc_ns(), &[C::ReadFs]),
        "/v1/client/stats" => vec![Need::NodeRead],
        // Nodes.
        "/v1/nodes" | "/v1/node/{id}" | "/v1/node/{id}/allocations" => vec![Need::NodeRead],
        "/v1/node/{id}/eligibility"
        | "/v1/node/{id}/drain"
        | "/v1/node/{id}/evaluate"
        | "/v1/node/{id}/purge" => vec![Need::NodeWrite],
        "/v1/agent/members" => vec![Need::NodeRead],
        // Agent.
        "/v1/agent/self" | "/v1/agent/schedulers" => vec![Need::AgentRead],
        "/v1/agent/join" | "/v1/agent/force-leave" => vec![Need::AgentWrite],
        "/v1/agent/servers" | "/v1/agent/schedulers/config" if read => vec![Need::AgentRead],
        "/v1/agent/servers" | "/v1/agent/schedulers/config" => vec![Need::AgentWrite],
        // Operator.
        "/v1/operator/raft/configuration" | "/v1/operator/scheduler/broker" => {
            vec![Need::OperatorRead]
        }
        "/v1/operator/scheduler/configuration" if read => vec![Need::OperatorRead],
        "/v1/operator/autopilot/configuration" if read => vec![Need::OperatorRead],
        "/v1/operator/autopilot/health" => vec![Need::OperatorRead],
        "/v1/operator/autopilot/configuration" => vec![Need::OperatorWrite],
        "/v1/operator/keyring/keys" => vec![Need::OperatorRead],
        // Variables: a list is filtered path by path (`list`), as Nomad's, so anyone may
        // ask; one variable needs its path's capability.
        "/v1/vars" => vec![Need::Nothing],
        "/v1/var/{*path}" => {
            let cap = match *method {
                Method::GET | Method::HEAD => crate::acl::VarCap::Read,
                Method::DELETE => crate::acl::VarCap::Destroy,
                _ => crate::acl::VarCap::Write,
            };
            vec![Need::Variable(ns.clone(), param("path"), cap)]
        }
        "/v1/operator/keyring/rotate" | "/v1/operator/keyring/key/{id}" => {
            vec![Need::OperatorWrite]
        }
        // The public keys that verify workload identities, for anyone (Nomad's).
        "/.well-known/jwks.json" | "/.well-known/openid-configuration" => vec![Need::Nothing],
        "/v1/operator/scheduler/configuration" | "/v1/operator/raft/peer" => {
            vec![Need::OperatorWrite]
        }
        // Namespaces: the list shows what the token can see.
        "/v1/namespaces" => vec![Need::Nothing],
        "/v1/namespace/{name}" if read => vec![Need::NamespaceVisible(param("name"))],
        // Services.
        "/v1/services" | "/v1/service/{name}" => service_read(),
        "/v1/service/{name}/{id}" if read => service_read(),
        "/v1/service/{name}/{id}" => in_ns(&[C::SubmitJob, C::DeleteServiceRegistration]),
        // Search reads jobs, evaluations, allocations, deployments and nodes.
        "/v1/search" | "/v1/search/fuzzy" => {
            let mut needs = in_ns(&[C::ReadJob]);
            needs.push(Need::NodeRead);
            needs
        }
        "/v1/event/stream" => event_stream_needs(query, ctx),
        // Snapshots, garbage collection, namespace writes and everything not listed.
        _ => vec![Need::Management],
    }
}

/// What an event stream asking `query` needs: each topic asked for its read capability in
/// the stream's namespace; no topic or `*` (every topic) a management token, as Nomad's.
/// The stream checks it again whenever the ACLs change.
pub fn event_stream_needs(query: &[(String, String)], ctx: &HttpContext) -> Vec<Need> {
    let ns = request_namespace(query);
    let topics: Vec<&str> = query
        .iter()
        .filter(|(k, _)| k == "topic")
        .map(|(_, v)| v.split(':').next().unwrap_or(""))
        .collect();
    if topics.is_empty() {
        return vec![Need::Management];
    }
    let mut needs = Vec::new();
    for topic in topics {
        match topic {
            "Job" | "Allocation" | "Evaluation" | "Deployment" | "Service" => {
                if ns == "*" {
                    needs.extend(
                        all_namespaces(ctx)
                            .into_iter()
                            .map(|n| Need::Namespace(n, &[C::ReadJob])),
                    );
                } else {
                    needs.push(Need::Namespace(ns.clone(), &[C::ReadJob]));
                }
            }
            "Node" => needs.push(Need::NodeRead),
            // Filtered event by event: only paths the token may list.
            "Variable" => {}
            _ => needs.push(Need::Management),
        }
    }
    needs
}

/// Every namespace that exists (on a client-only agent, `default`).
fn all_namespaces(ctx: &HttpContext) -> Vec<String> {
    match ctx.node() {
        Ok(node) => node
            .state()
            .snapshot()
            .namespaces()
            .iter()
            .map(|n| n.name.clone())
            .collect(),
        Err(_) => vec!["default".into()],
    }
}

enum Object {
    Alloc,
    Eval,
    Deployment,
}

/// The namespace of the object with this ID, from the server's state.
fn object_namespace(ctx: &HttpContext, kind: Object, id: &str) -> Option<String> {
    let node = ctx.node().ok()?;
    let snap = node.state().snapshot();
    match kind {
        Object::Alloc => snap.alloc_by_id(id).map(|a| a.namespace.to_string()),
        Object::Eval => snap.eval_by_id(id).map(|e| e.namespace.to_string()),
        Object::Deployment => snap.deployment_by_id(id).map(|d| d.namespace.to_string()),
    }
}

/// The namespace of an allocation, from the server's state or the client's own.
fn alloc_namespace(ctx: &HttpContext, id: &str) -> Option<String> {
    object_namespace(ctx, Object::Alloc, id)
        .or_else(|| ctx.client().and_then(|c| c.alloc_namespace(id)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_check_reads_the_query_as_the_handlers_do() {
        let q = query_pairs("namespace=a&namespace=b&purge=t");
        assert_eq!(request_namespace(&q), "b", "a repeated key: the last value");
        for purge in [
            "purge",
            "purge=",
            "purge=t",
            "purge=T",
            "purge=1",
            "purge=TRUE",
            "purge=x",
        ] {
            assert!(purge_asked(&query_pairs(purge)), "{purge}");
        }
        for keep in [
            "",
            "purge=false",
            "purge=0",
            "purge=f",
            "purge=t&purge=false",
        ] {
            assert!(!purge_asked(&query_pairs(keep)), "{keep}");
        }
    }

    #[test]
    fn tokens_come_from_either_header() {
        let mut h = HeaderMap::new();
        assert_eq!(request_token(&h), None);
        h.insert("authorization", "Bearer abc".parse().unwrap());
        assert_eq!(request_token(&h).as_deref(), Some("abc"));
        h.insert("x-nomad-token", "def".parse().unwrap());
        assert_eq!(request_token(&h).as_deref(), Some("def"));
    }

    #[test]
    fn params_and_queries_are_decoded() {
        let w = path_params("/v1/var/{*path}", "/v1/var/app/db%2Fx/y");
        assert_eq!(w["path"], "app/db/x/y");
        let p = path_params("/v1/job/{id}/summary", "/v1/job/my%20job/summary");
        assert_eq!(p["id"], "my job");
        let q = query_pairs("namespace=team%2Da&topic=Job&topic=Node&x");
        assert_eq!(query_value(&q, "namespace"), Some("team-a"));
        assert_eq!(q.iter().filter(|(k, _)| k == "topic").count(), 2);
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }
}
