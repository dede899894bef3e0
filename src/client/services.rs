//! Native service discovery on the client: the registrations this node's allocations should
//! have ([`desired`]: a group's services while the allocation runs, a task's while the task
//! runs), kept in step with what was sent ([`Registrar`]), and the loop that sends the
//! difference (`ServiceRegistration.Upsert` / `DeleteByID`) whenever an allocation changes.
//!
//! ```text
//!  alloc changes ─▶ desired(every local allocation) ─▶ Registrar::plan ─▶ upsert, delete
//!                                                    ◀─ Registrar::sent (on success)
//! ```
//!
//! The servers remove the registrations of an allocation that stops on its client, whose
//! node goes down or that is collected, so a client that dies leaves nothing behind for long.
//! A restarted client first reads what the servers hold for its node
//! (`ServiceRegistration.ListByNode`), so a service whose task stopped while it was down is
//! removed, and what it should have is not sent again.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use teamster_storage::model::{
    Allocation, CheckStatus, ClientStatus, Service, ServiceRegistration, Task, TaskStateValue,
    ADDRESS_MODE_ALLOC, CHECK_PENDING,
};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::client::allocdir::AllocDir;
use crate::client::servers::Servers;
use crate::client::shared::Shared;
use crate::client::taskenv::{TaskDirs, TaskEnv};
use crate::client::types::LocalAlloc;
use crate::rpc::service::service_reg::{
    ServiceRegistrationDeleteRequest, ServiceRegistrationListRequest,
    ServiceRegistrationUpsertRequest,
};
use crate::rpc::Services;

/// Wait after a failed call to the servers before sending again.
const RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// What a node knows of itself when it registers services.
#[derive(Debug, Clone)]
pub struct NodeFacts<'a> {
    /// The node's ID.
    pub node_id: &'a str,
    /// Its datacenter.
    pub datacenter: &'a str,
    /// Its address (for services without a port of the group's network).
    pub ip: &'a str,
    /// What `${node.*}`, `${attr.*}` and `${meta.*}` read.
    pub node_values: &'a BTreeMap<String, String>,
    /// Where allocation directories live (for the task environment).
    pub alloc_root: &'a Path,
}

impl<'a> NodeFacts<'a> {
    /// This client's facts, as node `node_id`.
    pub(crate) fn of(shared: &'a Shared, node_id: &'a str) -> NodeFacts<'a> {
        NodeFacts {
            node_id,
            datacenter: &shared.config.datacenter,
            ip: shared
                .node_values
                .get("attr.unique.network.ip-address")
                .map_or("", String::as_str),
            node_values: &shared.node_values,
            alloc_root: &shared.alloc_root,
        }
    }
}

/// A service of a running allocation: the task it runs with (whose environment fills its
/// name and tags, and which a failing check restarts), and the task that registers it
/// (`None`: the group).
#[derive(Debug, Clone, Copy)]
pub struct LiveService<'a> {
    /// The task the service belongs to.
    pub task: &'a Task,
    /// The registering task, or `None` for a group service.
    pub owner: Option<&'a str>,
    /// The service.
    pub service: &'a Service,
}

/// The services `local`'s allocation runs now, as its hooks registered them: a group's
/// while the allocation runs (with `task = "x"`, while that task runs), a task's while the
/// task runs, neither once the servers stopped the allocation.
pub fn live_services(local: &LocalAlloc) -> Vec<LiveService<'_>> {
    let alloc = &local.alloc;
    if alloc.server_terminal_status() {
        return Vec::new();
    }
    let group_live = local.registered.group && local.client_status == ClientStatus::Running;
    let Some(group) = local
        .job
        .task_groups
        .iter()
        .find(|g| g.name == alloc.task_group)
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    // Only teamster's own services: a Consul service's job never reaches a node (it needs
    // `${attr.consul.version}`), and if one did, nothing would be registered for it.
    for service in group.services.iter().filter(|s| group_live && s.is_nomad()) {
        let task = if service.task_name.is_empty() {
            group.tasks.first()
        } else {
            group.tasks.iter().find(|t| t.name == service.task_name)
        };
        let running = service.task_name.is_empty() || task.is_some_and(|t| task_running(local, t));
        if let (Some(task), true) = (task, running) {
            out.push(LiveService {
                task,
                owner: None,
                service,
            });
        }
    }
    for task in &group.tasks {
        if !local.registered.tasks.contains(&task.name) || !task_running(local, task) {
            continue;
        }
        for service in task.services.iter().filter(|s| s.is_nomad()) {
            out.push(LiveService {
                task,
                owner: Some(&task.name),
                service,
            });
        }
    }
    out
}

/// The registrations `local`'s allocation should have now, each with the statuses of its
/// checks as `check_status` tells them (by check ID; `pending` until one ran).
pub fn desired(
    local: &LocalAlloc,
    node: &NodeFacts,
    check_status: &dyn Fn(&str) -> Option<String>,
) -> Vec<ServiceRegistration> {
    live_services(local)
        .into_iter()
        .map(|live| {
            let mut reg = desired_one(local, node, live);
            reg.checks = live
                .service
                .checks
                .iter()
                .map(|c| {
                    let name = c.name_in(&reg.service_name);
                    CheckStatus {
                        status: check_status(&check_id(&reg.id, &name))
                            .unwrap_or_else(|| CHECK_PENDING.to_string()),
                        name,
                    }
                })
                .collect();
            reg
        })
        .collect()
}

/// The registration of one live service, without its checks' statuses.
pub fn desired_one(
    local: &LocalAlloc,
    node: &NodeFacts,
    live: LiveService<'_>,
) -> ServiceRegistration {
    registration(local, node, live.task, live.owner, live.service)
}

/// The ID of check `name` of registration `registration_id`.
pub fn check_id(registration_id: &str, name: &str) -> String {
    format!("{registration_id}/{name}")
}

fn task_running(local: &LocalAlloc, task: &Task) -> bool {
    local
        .task_states
        .get(&task.name)
        .is_some_and(|s| s.state == TaskStateValue::Running)
}

/// One registration: the name and tags interpolated in the task's environment, the address
/// and port of the service's port label.
fn registration(
    local: &LocalAlloc,
    node: &NodeFacts,
    task: &Task,
    owner: Option<&str>,
    service: &Service,
) -> ServiceRegistration {
    let alloc = &local.alloc;
    let alloc_id = alloc.id.to_string();
    let alloc_dir = AllocDir::new(node.alloc_root, &alloc_id);
    let task_dir = alloc_dir.task(&task.name);
    let env = TaskEnv::in_network(
        node.node_values.clone(),
        alloc,
        &local.job,
        task,
        TaskDirs {
            alloc: &alloc_dir.shared(),
            task: &task_dir.local(),
            secrets: &task_dir.secrets(),
        },
        local
            .network
            .as_ref()
            .filter(|n| !n.address.is_empty())
            .map(|n| (n.interface.as_str(), n.address.as_str())),
    );
    let mut service = service.clone();
    service.name = env.interpolate(&service.name);
    let (address, port) = if service.address_mode == ADDRESS_MODE_ALLOC {
        alloc_address(local, &service.port_label)
    } else {
        address_of(alloc, &service, node.ip)
    };
    ServiceRegistration {
        id: ServiceRegistration::make_id(&alloc_id, owner, &alloc.task_group, &service),
        service_name: service.name.clone(),
        namespace: alloc.namespace.clone(),
        node_id: node.node_id.into(),
        datacenter: node.datacenter.to_string(),
        job_id: alloc.job_id.clone(),
        alloc_id: alloc.id.clone(),
        // A canary's `canary_tags`, once it has them, until its deployment promotes it.
        tags: if alloc.is_canary() && !service.canary_tags.is_empty() {
            &service.canary_tags
        } else {
            &service.tags
        }
        .iter()
        .map(|t| env.interpolate(t))
        .collect(),
        address,
        port,
        checks: Vec::new(),
        create_index: 0,
        modify_index: 0,
    }
}

/// The address and port a service is reached on: its port label's host address and port,
/// a literal port number on the node's address, or port 0; an `address` given in the job
/// wins over the node's.
fn address_of(alloc: &Allocation, service: &Service, node_ip: &str) -> (String, u32) {
    let (ip, port) = port_address(alloc, &service.port_label, node_ip);
    let ip = if service.address.is_empty() {
        ip
    } else {
        service.address.clone()
    };
    (ip, port)
}

/// The allocation's own address (bridge mode) and the port inside its namespace of `label`
/// (its `to`, else its host port; or a number).
fn alloc_address(local: &LocalAlloc, label: &str) -> (String, u32) {
    let ip = local
        .network
        .as_ref()
        .map(|n| n.address.clone())
        .unwrap_or_default();
    let mapped = local
        .alloc
        .allocated_resources
        .shared
        .ports
        .iter()
        .find(|p| p.label == label);
    let port = match mapped {
        Some(p) if p.to > 0 => p.to as u32,
        Some(p) => p.value,
        None => label.parse::<u32>().unwrap_or(0),
    };
    (ip, port)
}

/// The host address and port of `label` (a port label of the allocation, or a number on
/// the node's address; port 0 when it is neither).
pub fn port_address(alloc: &Allocation, label: &str, node_ip: &str) -> (String, u32) {
    let mapped = alloc
        .allocated_resources
        .shared
        .ports
        .iter()
        .find(|p| p.label == label);
    match mapped {
        Some(p) => (p.host_ip.clone(), p.value),
        None => (node_ip.to_string(), label.parse::<u32>().unwrap_or(0)),
    }
}

/// What this client sent, and what to send next.
#[derive(Debug, Default)]
pub struct Registrar {
    /// Registrations the servers acknowledged, by ID.
    sent: BTreeMap<String, ServiceRegistration>,
}

/// One round's calls.
#[derive(Debug, Default, PartialEq)]
pub struct Round {
    /// New or changed registrations.
    pub upsert: Vec<ServiceRegistration>,
    /// `(namespace, service name, ID)` of registrations no longer wanted.
    pub delete: Vec<(String, String, String)>,
}

impl Registrar {
    /// The calls that bring the servers from what was sent to `desired`.
    pub fn plan(&self, desired: &[ServiceRegistration]) -> Round {
        let wanted: BTreeMap<&str, &ServiceRegistration> =
            desired.iter().map(|r| (r.id.as_str(), r)).collect();
        let upsert = desired
            .iter()
            .filter(|r| self.sent.get(&r.id).is_none_or(|s| !s.same_as(r)))
            .cloned()
            .collect();
        let delete = self
            .sent
            .values()
            .filter(|s| !wanted.contains_key(s.id.as_str()))
            .map(|s| {
                (
                    s.namespace.to_string(),
                    s.service_name.clone(),
                    s.id.clone(),
                )
            })
            .collect();
        Round { upsert, delete }
    }

    /// What the servers hold for this node when the client starts: registrations it no
    /// longer wants (a task that stopped while the client was down) are deleted by the next
    /// round, the others are not sent again.
    pub fn seed(&mut self, held: Vec<ServiceRegistration>) {
        for r in held {
            self.sent.entry(r.id.clone()).or_insert(r);
        }
    }

    /// The servers took `upserted`.
    pub fn upserted(&mut self, upserted: &[ServiceRegistration]) {
        for r in upserted {
            self.sent.insert(r.id.clone(), r.clone());
        }
    }

    /// The servers removed `deleted`.
    pub fn deleted(&mut self, deleted: &[(String, String, String)]) {
        for (_, _, id) in deleted {
            self.sent.remove(id);
        }
    }
}

/// Whenever an allocation changes, send the registrations that changed; retried after a
/// failure.
pub(crate) async fn service_loop(
    shared: Arc<Shared>,
    servers: Arc<Servers>,
    shutdown: CancellationToken,
) {
    let mut changes = shared.alloc_changes.subscribe();
    let mut registrar = Registrar::default();
    let mut seeded = false;
    loop {
        if !seeded {
            let node_id = shared.state().node_id.clone();
            match servers
                .service_registration_list_by_node(ServiceRegistrationListRequest { node_id })
                .await
            {
                Ok(held) => {
                    registrar.seed(held);
                    seeded = true;
                }
                Err(e) => debug!(error = %e, "reading this node's registrations failed"),
            }
        }
        let desired: Vec<ServiceRegistration> = {
            let st = shared.state();
            let node = NodeFacts::of(&shared, &st.node_id);
            let results = crate::client::shared::lock(&shared.check_results);
            st.allocs
                .values()
                .flat_map(|l| {
                    let of_alloc = results.get(l.alloc.id.as_str());
                    let status =
                        |id: &str| of_alloc.and_then(|r| r.get(id)).map(|r| r.status.clone());
                    desired(l, &node, &status)
                })
                .collect()
        };
        let round = registrar.plan(&desired);
        let mut failed = false;
        if !round.upsert.is_empty() {
            let sent = servers
                .service_registration_upsert(ServiceRegistrationUpsertRequest {
                    services: round.upsert.clone(),
                })
                .await;
            match sent {
                Ok(_) => {
                    debug!(services = round.upsert.len(), "services registered");
                    metrics::counter!("teamster_client_service_registrations_total")
                        .increment(round.upsert.len() as u64);
                    registrar.upserted(&round.upsert);
                }
                Err(e) => {
                    warn!(error = %e, "registering services failed; retrying");
                    failed = true;
                }
            }
        }
        let mut by_ns: BTreeMap<&str, Vec<(String, String, String)>> = BTreeMap::new();
        for d in &round.delete {
            by_ns.entry(d.0.as_str()).or_default().push(d.clone());
        }
        for (ns, ids) in by_ns {
            let sent = servers
                .service_registration_delete(ServiceRegistrationDeleteRequest {
                    namespace: ns.to_string(),
                    ids: ids.iter().map(|(_, n, i)| (n.clone(), i.clone())).collect(),
                    must_exist: false,
                })
                .await;
            match sent {
                Ok(_) => registrar.deleted(&ids),
                Err(e) => {
                    warn!(error = %e, "removing services failed; retrying");
                    failed = true;
                }
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(RETRY), if failed => {}
            r = changes.changed(), if !failed => {
                if r.is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use teamster_storage::model::{
        AllocatedPortMapping, Job, TaskGroup, PROVIDER_CONSUL, PROVIDER_NOMAD,
    };

    use super::*;
    use crate::client::types::ServiceOwner;

    fn service(name: &str, port: &str) -> Service {
        Service {
            name: name.into(),
            port_label: port.into(),
            provider: PROVIDER_NOMAD.into(),
            tags: vec!["v${NOMAD_ALLOC_INDEX}".into()],
            ..Service::default()
        }
    }

    fn local(task_running: [bool; 2]) -> LocalAlloc {
        let task = |name: &str, services| Task {
            name: name.into(),
            driver: "mock".into(),
            services,
            ..Task::default()
        };
        let group = TaskGroup {
            name: "g".into(),
            tasks: vec![
                task("web", vec![service("api", "http")]),
                task("side", vec![service("side-${NOMAD_JOB_ID}", "9100")]),
            ],
            services: vec![service("shop", "http")],
            ..TaskGroup::default()
        };
        let mut job = Job {
            task_groups: vec![group].into(),
            ..Job::default()
        };
        job.id = "shop".into();
        job.namespace = "default".into();
        let mut alloc = Allocation {
            id: "a1".into(),
            name: "shop.g[2]".into(),
            job_id: "shop".into(),
            namespace: "default".into(),
            task_group: "g".into(),
            ..Allocation::default()
        };
        alloc.allocated_resources.shared.ports = vec![AllocatedPortMapping {
            label: "http".into(),
            value: 23000,
            to: 0,
            host_ip: "10.0.0.5".into(),
        }]
        .into();
        let mut l = LocalAlloc::received(alloc, job, 0);
        // Registered as the hooks do: the group's from the start, a task's while it runs.
        l.registered.group = true;
        for (name, running) in ["web", "side"].into_iter().zip(task_running) {
            let state = l.task_states.entry(name.into()).or_default();
            state.state = if running {
                l.registered.tasks.insert(name.into());
                TaskStateValue::Running
            } else {
                TaskStateValue::Dead
            };
        }
        l.recompute();
        l
    }

    #[test]
    fn only_what_the_hooks_registered_is_sent() {
        let values = BTreeMap::new();
        let names = |l: &LocalAlloc| -> Vec<String> {
            desired(l, &facts(&values), &|_| None)
                .into_iter()
                .map(|r| r.service_name)
                .collect()
        };
        // The group's hook withdrew its services (a stop was asked): the tasks' stay until
        // their own hooks withdraw them, before their shutdown delay.
        let mut l = local([true, true]);
        l.registered.set(ServiceOwner::Group, false);
        assert_eq!(names(&l), ["api", "side-shop"]);
        l.registered.set(ServiceOwner::Task("web"), false);
        assert_eq!(names(&l), ["side-shop"]);
        // Registered, but nothing runs yet: nothing is sent.
        let mut pending = local([false, false]);
        pending.registered.set(ServiceOwner::Task("web"), true);
        assert!(names(&pending).is_empty());
    }

    fn facts<'a>(values: &'a BTreeMap<String, String>) -> NodeFacts<'a> {
        NodeFacts {
            node_id: "n1",
            datacenter: "dc1",
            ip: "10.0.0.5",
            node_values: values,
            alloc_root: Path::new("/data/alloc"),
        }
    }

    #[test]
    fn running_allocations_register_group_and_task_services_on_their_ports() {
        let values = BTreeMap::new();
        let regs = desired(&local([true, true]), &facts(&values), &|_| None);
        let by_name: BTreeMap<&str, &ServiceRegistration> =
            regs.iter().map(|r| (r.service_name.as_str(), r)).collect();
        assert_eq!(by_name.len(), 3, "{regs:?}");
        let shop = by_name["shop"];
        assert_eq!(shop.id, "_nomad-task-a1-group-g-shop-http");
        assert_eq!((shop.address.as_str(), shop.port), ("10.0.0.5", 23000));
        assert_eq!(shop.tags, ["v2"]);
        assert_eq!(
            (shop.node_id.as_str(), shop.datacenter.as_str()),
            ("n1", "dc1")
        );
        assert_eq!(by_name["api"].id, "_nomad-task-a1-web-api-http");
        // A port number instead of a label, and a name interpolated.
        let side = by_name["side-shop"];
        assert_eq!((side.address.as_str(), side.port), ("10.0.0.5", 9100));
    }

    /// As Nomad's native service discovery: a canary registers its service's
    /// `canary_tags` (when it has some) until its deployment promotes it; a consul-provider
    /// service is never registered by the client.
    #[test]
    fn a_canary_registers_its_canary_tags_and_consul_services_are_never_registered() {
        let values = BTreeMap::new();
        let tags = |l: &LocalAlloc| -> BTreeMap<String, Vec<String>> {
            desired(l, &facts(&values), &|_| None)
                .into_iter()
                .map(|r| (r.service_name, r.tags))
                .collect()
        };
        let mut l = local([true, true]);
        let group = &mut l.job.task_groups_mut()[0];
        group.services[0].canary_tags = vec!["canary-${NOMAD_ALLOC_INDEX}".into()];
        group.tasks[1].services[0].provider = PROVIDER_CONSUL.into();
        let before = tags(&l);
        assert_eq!(before["shop"], ["v2"]);
        assert!(
            !before.contains_key("side-shop"),
            "a consul service: {before:?}"
        );
        l.alloc.deployment_status =
            Some(Box::new(teamster_storage::model::AllocDeploymentStatus {
                canary: true,
                ..Default::default()
            }));
        let canary = tags(&l);
        assert_eq!(canary["shop"], ["canary-2"]);
        // No canary_tags: a canary keeps the service's tags.
        assert_eq!(canary["api"], ["v2"]);
    }

    #[test]
    fn a_stopped_task_takes_its_services_and_a_stopped_allocation_all_of_them() {
        let values = BTreeMap::new();
        let regs = desired(&local([true, false]), &facts(&values), &|_| None);
        let names: Vec<&str> = regs.iter().map(|r| r.service_name.as_str()).collect();
        assert_eq!(names, ["shop", "api"]);
        let mut stopping = local([true, true]);
        stopping.alloc.desired_status = teamster_storage::model::DesiredStatus::Stop;
        assert!(desired(&stopping, &facts(&values), &|_| None).is_empty());
        assert!(desired(&local([false, false]), &facts(&values), &|_| None).is_empty());
    }

    #[test]
    fn a_seeded_registrar_removes_what_stopped_while_the_client_was_away() {
        let values = BTreeMap::new();
        let held = desired(&local([true, true]), &facts(&values), &|_| None);
        let mut r = Registrar::default();
        // The servers held both tasks' services; only the first task still runs.
        r.seed(held);
        let now = desired(&local([true, false]), &facts(&values), &|_| None);
        let round = r.plan(&now);
        assert!(round.upsert.is_empty(), "nothing is sent again: {round:?}");
        assert_eq!(round.delete.len(), 1);
        assert_eq!(round.delete[0].1, "side-shop");
    }

    #[test]
    fn the_registrar_sends_only_changes_and_deletes_what_went() {
        let values = BTreeMap::new();
        let all = desired(&local([true, true]), &facts(&values), &|_| None);
        let mut r = Registrar::default();
        let round = r.plan(&all);
        assert_eq!(round.upsert.len(), 3);
        assert!(round.delete.is_empty());
        r.upserted(&round.upsert);
        assert_eq!(r.plan(&all), Round::default());
        // The side task stopped: its service is deleted, nothing re-sent.
        let fewer = desired(&local([true, false]), &facts(&values), &|_| None);
        let round = r.plan(&fewer);
        assert!(round.upsert.is_empty());
        assert_eq!(
            round.delete,
            [(
                "default".to_string(),
                "side-shop".to_string(),
                "_nomad-task-a1-side-side-shop-9100".to_string()
            )]
        );
        r.deleted(&round.delete);
        assert_eq!(r.plan(&fewer), Round::default());
    }
}
