//! `GET /v1/event/stream`: Nomad's event stream, as newline-delimited JSON frames
//! `{"Index": N, "Events": [...]}` with a `{}` heartbeat every ten seconds.
//!
//! It is fed by this server's own state store (its [`Subscription`] to applied changes), so
//! any server answers without forwarding. Topics: `Job` (`JobRegistered`, `JobDeregistered`),
//! `Evaluation` (`EvaluationUpdated`), `Allocation` (`AllocationUpdated`), `Deployment`
//! (`PlanResult`, `DeploymentStatusUpdate`, `DeploymentPromotion`, `DeploymentAllocHealth`:
//! what changed since the version the stream sent before) and `Node` (`NodeRegistration`,
//! `NodeDeregistration`, `NodeEligibility`, `NodeDrain`, `NodeEvent`) and `Variable`
//! (`VariableUpdated`, for writes, locks, releases and deletes, with `{Metadata, Deleted}`:
//! never the items nor a lock's ID; only paths the token may list), each `Topic`,
//! `Topic:*` or `Topic:<key>` (an object's ID, or for evaluations, allocations and
//! deployments their job's ID), `*` for all; `namespace` (`*` for every one; node events
//! have none); `index` to resume: the objects changed after that index are sent first, each
//! once in its latest version (teamster keeps no event buffer), then the live events.
//! Payloads are the objects as the state holds them when the event is sent.
//!
//! With ACLs on, the stream ends with an `{"Error": …}` frame when its token is deleted,
//! expires, or its policies stop allowing what the stream sends (checked whenever an ACL
//! policy or token changes).
//!
//! A consumer that reads too slowly (its frames fill the send buffer) or that the state's
//! change stream outran gets an `{"Error": …}` frame naming the index to resume from, and the
//! stream ends; the servers never wait for it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use bytes::Bytes;
use serde_json::{json, Value};
use teamster_storage::model::{Deployment, DeploymentId};
use teamster_storage::state::{Snapshot, StateChange, StateEvent, SubscriptionError};
use tokio::sync::mpsc;

use super::acl::{event_stream_needs, request_token};
use super::error::ApiError;
use super::HttpContext;
use crate::server::acl::Identity;

/// Frames buffered for a consumer before it counts as too slow.
const SEND_BUFFER: usize = 256;
/// How often an idle stream sends `{}`.
const HEARTBEAT: Duration = Duration::from_secs(10);

/// The topics an event can have.
const TOPICS: &[&str] = &[
    "Job",
    "Evaluation",
    "Allocation",
    "Deployment",
    "Node",
    "Variable",
];

/// What a stream sends: topics (with their keys) and namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    /// `(topic, key)`; `*` for any.
    topics: Vec<(String, String)>,
    /// A namespace, or `*`.
    namespace: String,
    /// Resume after this index (0: live events only).
    index: u64,
}

impl Filter {
    /// From the query's `key=value` pairs (decoded, repeated keys kept); an unknown topic or
    /// a bad index is an error.
    pub fn parse(query: Vec<(String, String)>) -> Result<Filter, String> {
        let mut topics = Vec::new();
        let mut namespace = "default".to_string();
        let mut index = 0;
        for (k, v) in query {
            match k.as_str() {
                "topic" => {
                    let (topic, key) = v.split_once(':').unwrap_or((v.as_str(), "*"));
                    if topic != "*" && !TOPICS.contains(&topic) {
                        return Err(format!(
                            "unknown topic {topic:?} (known: {}, or *)",
                            TOPICS.join(", ")
                        ));
                    }
                    topics.push((topic.to_string(), key.to_string()));
                }
                "namespace" => namespace = v,
                "index" => {
                    index = v
                        .parse()
                        .map_err(|_| format!("index: {v:?} is not a raft index"))?
                }
                _ => {}
            }
        }
        if topics.is_empty() {
            topics.push(("*".into(), "*".into()));
        }
        Ok(Filter {
            topics,
            namespace,
            index,
        })
    }

    fn wants(&self, event: &Value) -> bool {
        let topic = event["Topic"].as_str().unwrap_or_default();
        let ns = event["Namespace"].as_str().unwrap_or_default();
        if !ns.is_empty() && self.namespace != "*" && ns != self.namespace {
            return false;
        }
        let key = event["Key"].as_str().unwrap_or_default();
        let filter_keys: Vec<&str> = event["FilterKeys"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        self.topics.iter().any(|(t, k)| {
            (t == "*" || t == topic) && (k == "*" || k == key || filter_keys.contains(&k.as_str()))
        })
    }
}

fn event(
    topic: &str,
    kind: &str,
    key: &str,
    ns: &str,
    index: u64,
    filter_keys: Vec<String>,
    payload: Value,
) -> Value {
    json!({
        "Topic": topic,
        "Type": kind,
        "Key": key,
        "Namespace": ns,
        "FilterKeys": filter_keys,
        "Index": index,
        "Payload": payload,
    })
}

/// The deployments a stream has sent: the raft index and the version of the last event of
/// each, so that the next one is named by what changed, and one raft entry that changes a
/// deployment several times (a plan's placements, health reports) sends it once.
#[derive(Debug, Default)]
pub struct SentDeployments(HashMap<DeploymentId, (u64, Arc<Deployment>)>);

impl SentDeployments {
    /// What a stream starting from `snap` knows: every deployment as it is there.
    pub fn from_snapshot(snap: &Snapshot) -> SentDeployments {
        SentDeployments(
            snap.deployments()
                .map(|d| (d.id.clone(), (0, d.clone())))
                .collect(),
        )
    }
}

/// Nomad's event type of a deployment's change from `previous` (the version last sent) to
/// `now` at `index`: created by a plan, canaries promoted, allocation health, or status.
pub fn deployment_event_type(
    previous: Option<&Deployment>,
    now: &Deployment,
    index: u64,
) -> &'static str {
    let Some(prev) = previous else {
        return if now.create_index == index {
            "PlanResult"
        } else {
            "DeploymentStatusUpdate"
        };
    };
    let promoted = |d: &Deployment| d.task_groups.values().filter(|g| g.promoted).count();
    let health = |d: &Deployment| {
        d.task_groups
            .values()
            .map(|g| (g.healthy_allocs, g.unhealthy_allocs))
            .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    };
    if promoted(now) > promoted(prev) {
        "DeploymentPromotion"
    } else if health(now) != health(prev) {
        "DeploymentAllocHealth"
    } else if now.status != prev.status || now.status_description != prev.status_description {
        "DeploymentStatusUpdate"
    } else {
        "PlanResult"
    }
}

fn deployment_event(kind: &str, d: &Deployment, index: u64) -> Value {
    event(
        "Deployment",
        kind,
        d.id.as_str(),
        d.namespace.as_str(),
        index,
        vec![d.job_id.to_string()],
        json!({ "Deployment": d }),
    )
}

/// The Nomad events of one applied change, read from `snap` (a snapshot at or after it);
/// `sent` remembers the deployments this stream sent.
pub fn events_of(
    change: &StateChange,
    index: u64,
    snap: &Snapshot,
    sent: &mut SentDeployments,
) -> Vec<Value> {
    match change {
        StateChange::DeploymentUpserted { deployment } => {
            let now = snap
                .deployment_by_id(deployment.id.as_str())
                .cloned()
                .unwrap_or_else(|| deployment.clone());
            let previous = sent.0.get(&now.id);
            if previous.is_some_and(|(at, _)| *at == index) {
                return Vec::new();
            }
            let kind = deployment_event_type(previous.map(|(_, d)| d.as_ref()), &now, index);
            let e = deployment_event(kind, &now, index);
            sent.0.insert(now.id.clone(), (index, now));
            vec![e]
        }
        StateChange::JobUpserted {
            namespace,
            job_id,
            stopped,
            ..
        } => {
            let job = snap.job_by_id(namespace.as_str(), job_id.as_str());
            let kind = if *stopped {
                "JobDeregistered"
            } else {
                "JobRegistered"
            };
            vec![event(
                "Job",
                kind,
                job_id.as_str(),
                namespace.as_str(),
                index,
                vec![],
                json!({ "Job": job.map(|j| json!(j)).unwrap_or(json!({"ID": job_id, "Namespace": namespace})) }),
            )]
        }
        StateChange::JobDeleted { namespace, job_id } => vec![event(
            "Job",
            "JobDeregistered",
            job_id.as_str(),
            namespace.as_str(),
            index,
            vec![],
            json!({ "Job": { "ID": job_id, "Namespace": namespace } }),
        )],
        StateChange::EvalUpserted { eval } => vec![eval_event(eval, index)],
        StateChange::AllocsUpserted { alloc_ids } => alloc_ids
            .iter()
            .filter_map(|id| snap.alloc_by_id(id.as_str()))
            .map(|a| alloc_event(a, index))
            .collect(),
        StateChange::NodeUpserted { node, previous } => {
            let kind = match previous {
                None => "NodeRegistration",
                Some(p) if p.eligibility != node.scheduling_eligibility => "NodeEligibility",
                Some(p) if p.draining != node.drain_strategy.is_some() => "NodeDrain",
                Some(_) => "NodeEvent",
            };
            vec![event(
                "Node",
                kind,
                node.id.as_str(),
                "",
                index,
                vec![],
                json!({ "Node": node }),
            )]
        }
        StateChange::VariableChanged {
            namespace,
            path,
            deleted,
        } => {
            let meta = snap
                .variable(namespace, path)
                .filter(|_| !*deleted)
                .map(|v| super::variables::meta_json(&v.meta))
                .unwrap_or_else(|| json!({ "Namespace": namespace, "Path": path }));
            vec![variable_event(namespace, path, index, meta, *deleted)]
        }
        StateChange::NodeDeregistered { node_id } => vec![event(
            "Node",
            "NodeDeregistration",
            node_id.as_str(),
            "",
            index,
            vec![],
            json!({ "Node": { "ID": node_id } }),
        )],
        _ => Vec::new(),
    }
}

fn variable_event(namespace: &str, path: &str, index: u64, meta: Value, deleted: bool) -> Value {
    event(
        "Variable",
        "VariableUpdated",
        path,
        namespace,
        index,
        vec![],
        json!({ "Metadata": meta, "Deleted": deleted }),
    )
}

/// Whether `identity` may see `e`: a `Variable` event only when it may list the path.
fn visible(identity: &Identity, e: &Value) -> bool {
    if e["Topic"] != "Variable" {
        return true;
    }
    identity.acl.allows(&crate::acl::Need::Variable(
        e["Namespace"].as_str().unwrap_or_default().to_string(),
        e["Key"].as_str().unwrap_or_default().to_string(),
        crate::acl::VarCap::List,
    ))
}

fn eval_event(eval: &teamster_storage::model::Evaluation, index: u64) -> Value {
    event(
        "Evaluation",
        "EvaluationUpdated",
        eval.id.as_str(),
        eval.namespace.as_str(),
        index,
        vec![eval.job_id.to_string()],
        json!({ "Evaluation": eval }),
    )
}

fn alloc_event(a: &teamster_storage::model::Allocation, index: u64) -> Value {
    event(
        "Allocation",
        "AllocationUpdated",
        a.id.as_str(),
        a.namespace.as_str(),
        index,
        vec![a.job_id.to_string()],
        json!({ "Allocation": a }),
    )
}

/// The objects `snap` holds that changed after `after`, as events, oldest first: what a
/// stream resuming from `after` is sent before the live events.
pub fn replay(snap: &Snapshot, after: u64) -> Vec<Value> {
    let mut out: Vec<(u64, Value)> = Vec::new();
    for j in snap.jobs().filter(|j| j.modify_index > after) {
        let kind = if j.stop {
            "JobDeregistered"
        } else {
            "JobRegistered"
        };
        let e = event(
            "Job",
            kind,
            j.id.as_str(),
            j.namespace.as_str(),
            j.modify_index,
            vec![],
            json!({ "Job": j }),
        );
        out.push((j.modify_index, e));
    }
    for e in snap.evals().filter(|e| e.modify_index > after) {
        out.push((e.modify_index, eval_event(e, e.modify_index)));
    }
    for a in snap.allocs().filter(|a| a.modify_index > after) {
        out.push((a.modify_index, alloc_event(a, a.modify_index)));
    }
    for d in snap.deployments().filter(|d| d.modify_index > after) {
        let kind = deployment_event_type(None, d, d.modify_index);
        out.push((d.modify_index, deployment_event(kind, d, d.modify_index)));
    }
    for v in snap
        .variables(None, "")
        .filter(|v| v.meta.modify_index > after)
    {
        let e = variable_event(
            &v.meta.namespace,
            &v.meta.path,
            v.meta.modify_index,
            super::variables::meta_json(&v.meta),
            false,
        );
        out.push((v.meta.modify_index, e));
    }
    for n in snap.nodes().filter(|n| n.modify_index > after) {
        let e = event(
            "Node",
            "NodeEvent",
            n.id.as_str(),
            "",
            n.modify_index,
            vec![],
            json!({ "Node": n }),
        );
        out.push((n.modify_index, e));
    }
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, e)| e).collect()
}

/// Frames of `events` (each already filtered), one per index, in order.
fn frames(events: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for e in events {
        let index = e["Index"].as_u64().unwrap_or(0);
        match out.last_mut() {
            Some(f) if f["Index"].as_u64() == Some(index) => {
                if let Some(list) = f["Events"].as_array_mut() {
                    list.push(e);
                }
            }
            _ => out.push(json!({ "Index": index, "Events": [e] })),
        }
    }
    out
}

fn line(v: &Value) -> Bytes {
    let mut b = serde_json::to_vec(v).unwrap_or_default();
    b.push(b'\n');
    Bytes::from(b)
}

/// Why a stream ends when its token stops allowing it (Nomad closes the subscription too).
const TOKEN_REVOKED: &str = "subscription closed by server: the ACL token was deleted, \
                             expired or no longer allows this stream; start a new stream";

/// The token a stream runs on behalf of, checked again when the ACLs change and when it
/// expires (ACLs on).
struct StreamToken {
    ctx: HttpContext,
    secret: Option<String>,
    query: Vec<(String, String)>,
    /// When the token expires, if it does.
    expires: Option<tokio::time::Instant>,
}

impl StreamToken {
    /// The stream's token as the ACL middleware resolved it (`identity`); `None` when ACLs
    /// are off: nothing to check.
    fn of(
        ctx: &HttpContext,
        identity: &Identity,
        headers: &HeaderMap,
        query: &[(String, String)],
    ) -> Option<StreamToken> {
        if !ctx.agent().acl.enabled {
            return None;
        }
        let expires = identity
            .token
            .as_ref()
            .and_then(|t| t.expiration_time)
            .and_then(|t| t.unix_nanos())
            .map(|exp| {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as i64);
                let left = Duration::from_nanos(exp.saturating_sub(now).max(0) as u64);
                tokio::time::Instant::now() + left
            });
        Some(StreamToken {
            ctx: ctx.clone(),
            secret: request_token(headers),
            query: query.to_vec(),
            expires,
        })
    }

    /// Whether the token still exists, is unexpired, and allows what the stream sends.
    async fn still_allows(&self) -> bool {
        match self.ctx.resolve_token(self.secret.as_deref()).await {
            Ok(identity) => event_stream_needs(&self.query, &self.ctx)
                .iter()
                .all(|need| identity.acl.allows(need)),
            Err(_) => false,
        }
    }
}

/// `GET /v1/event/stream`.
pub async fn stream(
    State(ctx): State<HttpContext>,
    Extension(identity): Extension<Identity>,
    headers: HeaderMap,
    Query(query): Query<Vec<(String, String)>>,
) -> Result<Response, ApiError> {
    let token = StreamToken::of(&ctx, &identity, &headers, &query);
    let filter = Filter::parse(query).map_err(ApiError::bad_request)?;
    let state = ctx.node()?.state().clone();
    let (snap, mut sub) = state.subscribe_with_snapshot();
    let (tx, rx) = mpsc::channel::<Bytes>(SEND_BUFFER);
    let mut last_index = snap.latest_index();
    let mut sent = SentDeployments::from_snapshot(&snap);
    let backlog: Vec<Value> = if filter.index > 0 {
        replay(&snap, filter.index)
            .into_iter()
            .filter(|e| filter.wants(e) && visible(&identity, e))
            .collect()
    } else {
        Vec::new()
    };
    drop(snap);
    tokio::spawn(async move {
        metrics::gauge!("teamster_event_streams").increment(1.0);
        // Room for the error frame is kept: a consumer never misses why it was dropped.
        let send = |tx: &mpsc::Sender<Bytes>, frame: &Value| -> bool {
            tx.capacity() > 1 && tx.try_send(line(frame)).is_ok()
        };
        let too_slow = |tx: &mpsc::Sender<Bytes>, index: u64| {
            metrics::counter!("teamster_event_streams_dropped_total").increment(1);
            let _ = tx.try_send(line(&json!({
                "Error": format!("the consumer fell behind; resume with index={index}")
            })));
        };
        let mut ok = true;
        for f in frames(backlog) {
            if !send(&tx, &f) {
                too_slow(&tx, filter.index);
                ok = false;
                break;
            }
        }
        let mut heartbeat =
            tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
        let expires = token.as_ref().and_then(|t| t.expires);
        let revoked = |tx: &mpsc::Sender<Bytes>| {
            metrics::counter!("teamster_event_streams_revoked_total").increment(1);
            let _ = tx.try_send(line(&json!({ "Error": TOKEN_REVOKED })));
        };
        while ok {
            tokio::select! {
                _ = tx.closed() => break,
                _ = tokio::time::sleep_until(expires.unwrap_or_else(tokio::time::Instant::now)),
                    if expires.is_some() =>
                {
                    revoked(&tx);
                    break;
                }
                _ = heartbeat.tick() => {
                    if !send(&tx, &json!({})) {
                        too_slow(&tx, last_index);
                        break;
                    }
                }
                got = sub.recv() => match got {
                    Ok(StateEvent { index, change, .. }) => {
                        if matches!(change, StateChange::AclChanged) {
                            if let Some(token) = &token {
                                if !token.still_allows().await {
                                    revoked(&tx);
                                    break;
                                }
                            }
                        }
                        if matches!(change, StateChange::Restored) {
                            let _ = tx.try_send(line(&json!({
                                "Error": "the state was restored from a snapshot; start a new stream"
                            })));
                            break;
                        }
                        let snap = state.snapshot();
                        let events: Vec<Value> = events_of(&change, index, &snap, &mut sent)
                            .into_iter()
                            .filter(|e| filter.wants(e) && visible(&identity, e))
                            .collect();
                        drop(snap);
                        for f in frames(events) {
                            if !send(&tx, &f) {
                                too_slow(&tx, last_index);
                                ok = false;
                                break;
                            }
                        }
                        last_index = index;
                    }
                    Err(SubscriptionError::Lagged { .. }) => {
                        too_slow(&tx, last_index);
                        break;
                    }
                    Err(SubscriptionError::Closed) => break,
                },
            }
        }
        metrics::gauge!("teamster_event_streams").decrement(1.0);
    });
    let body = Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    }));
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(topic: &str, key: &str, ns: &str, filter_keys: &[&str]) -> Value {
        event(
            topic,
            "X",
            key,
            ns,
            1,
            filter_keys.iter().map(|s| s.to_string()).collect(),
            json!({}),
        )
    }

    /// The filter of a query string, decoded as the handler's extractor decodes it.
    fn filter(query: &str) -> Result<Filter, String> {
        let uri: axum::http::Uri = format!("/v1/event/stream?{query}").parse().unwrap();
        let Query(pairs) = Query::<Vec<(String, String)>>::try_from_uri(&uri).unwrap();
        Filter::parse(pairs)
    }

    #[test]
    fn variable_events_go_only_to_tokens_that_may_list_the_path() {
        let e = variable_event(
            "default",
            "app/db",
            9,
            json!({ "Namespace": "default", "Path": "app/db" }),
            true,
        );
        assert_eq!(e["Topic"], "Variable");
        assert_eq!(e["Type"], "VariableUpdated");
        assert_eq!(e["Key"], "app/db");
        assert_eq!(e["Payload"]["Deleted"], true);
        assert!(visible(&Identity::unrestricted(), &e));
        let nobody = Identity {
            acl: std::sync::Arc::new(crate::acl::Acl::default()),
            token: None,
            claims: None,
        };
        assert!(!visible(&nobody, &e));
        let other = event(
            "Job",
            "JobRegistered",
            "web",
            "default",
            9,
            vec![],
            json!({}),
        );
        assert!(
            visible(&nobody, &other),
            "other topics are checked up front"
        );
        assert!(filter("topic=Variable:app/db").unwrap().wants(&e));
    }

    #[test]
    fn topics_keys_and_namespaces_filter_events() {
        let f = filter("topic=Job:web&topic=Allocation&index=7").unwrap();
        assert_eq!(f.index, 7);
        assert!(f.wants(&ev("Job", "web", "default", &[])));
        assert!(!f.wants(&ev("Job", "api", "default", &[])));
        assert!(f.wants(&ev("Allocation", "a1", "default", &["api"])));
        assert!(!f.wants(&ev("Evaluation", "e1", "default", &["web"])));
        assert!(!f.wants(&ev("Allocation", "a1", "other", &["api"])));
        // An evaluation's or allocation's job is a key too; node events have no namespace.
        let f = filter("topic=Evaluation%3Aweb&topic=Node&namespace=prod").unwrap();
        assert!(f.wants(&ev("Evaluation", "e1", "prod", &["web"])));
        assert!(f.wants(&ev("Node", "n1", "", &[])));
        let all = filter("namespace=*").unwrap();
        assert!(all.wants(&ev("Job", "x", "anything", &[])));
        assert!(filter("topic=Jobz").unwrap_err().contains("unknown topic"));
        assert!(filter("index=x").unwrap_err().contains("index"));
    }

    #[test]
    fn deployment_events_are_named_by_what_changed() {
        use teamster_storage::model::{DeploymentState, DeploymentStatus};
        let mut d = Deployment {
            id: DeploymentId::new("d1"),
            create_index: 5,
            task_groups: [("web".to_owned(), DeploymentState::default())].into(),
            ..Deployment::default()
        };
        assert_eq!(deployment_event_type(None, &d, 5), "PlanResult");
        assert_eq!(deployment_event_type(None, &d, 6), "DeploymentStatusUpdate");
        let prev = d.clone();
        d.task_groups.get_mut("web").unwrap().placed_allocs = 2;
        assert_eq!(deployment_event_type(Some(&prev), &d, 6), "PlanResult");
        d.task_groups.get_mut("web").unwrap().healthy_allocs = 1;
        assert_eq!(
            deployment_event_type(Some(&prev), &d, 6),
            "DeploymentAllocHealth"
        );
        let prev = d.clone();
        d.task_groups.get_mut("web").unwrap().promoted = true;
        d.status_description = "Deployment is running".into();
        assert_eq!(
            deployment_event_type(Some(&prev), &d, 7),
            "DeploymentPromotion"
        );
        let prev = d.clone();
        d.status = DeploymentStatus::Failed;
        assert_eq!(
            deployment_event_type(Some(&prev), &d, 8),
            "DeploymentStatusUpdate"
        );
        // Keyed by the deployment, filtered by its job too.
        d.job_id = "web".into();
        let e = deployment_event("DeploymentStatusUpdate", &d, 8);
        assert!(filter("topic=Deployment:web").unwrap().wants(&e));
        assert!(filter("topic=Deployment:d1").unwrap().wants(&e));
        assert!(!filter("topic=Deployment:api").unwrap().wants(&e));
    }

    #[test]
    fn events_of_one_index_share_a_frame() {
        let mut a = ev("Job", "a", "default", &[]);
        let mut b = ev("Job", "b", "default", &[]);
        let mut c = ev("Job", "c", "default", &[]);
        a["Index"] = json!(5);
        b["Index"] = json!(5);
        c["Index"] = json!(6);
        let f = frames(vec![a, b, c]);
        assert_eq!(f.len(), 2);
        assert_eq!(f[0]["Index"], json!(5));
        assert_eq!(f[0]["Events"].as_array().unwrap().len(), 2);
        assert_eq!(f[1]["Events"][0]["Key"], json!("c"));
    }
}
