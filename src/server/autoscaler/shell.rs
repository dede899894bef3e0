//! The autoscaler's shell: one task, started while leadership is established, that every
//! `interval` lists the provider's instances, reads the nodes and blocked evaluations from
//! the state, steps the [`AutoscalerCore`] and carries out its actions through the
//! [`Provider`] and the node endpoints ([`NodeOps`]).

use std::sync::Arc;

use futures::future::BoxFuture;
use teamster_storage::model::{
    Allocation, EvalStatus, Evaluation, JobType, NodeId, SchedulingEligibility,
};
use teamster_storage::state::{Snapshot, StateStore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use super::core::{Action, AutoscalerCore, BlockedView, NodeView, Observation};
use super::provider::{NodeSpec, Owner, Provider};
use crate::rpc::service::node::{NodeDeregisterRequest, NodeUpdateEligibilityRequest};
use crate::rpc::{ServiceError, ServiceRequest};
use crate::server::config::AutoscalerConfig;
use crate::server::endpoints::{Endpoints, Origin};
use crate::server::leader::LeaderDuty;
use crate::server::leader_service::{ticker, LeaderService};
use crate::util::RngSource;

/// How the autoscaler changes nodes: through the service layer on a server (the same calls
/// as `teamster node eligibility` and `node purge`), so heartbeat timers and node
/// evaluations follow as for an operator's call.
pub trait NodeOps: Send + Sync + 'static {
    /// The state the observations are read from.
    fn state(&self) -> &StateStore;
    /// Mark a node ineligible for new placements.
    fn set_ineligible<'a>(&'a self, node: &'a NodeId) -> BoxFuture<'a, Result<(), String>>;
    /// Deregister (purge) a node; one already gone is `Ok`.
    fn deregister<'a>(&'a self, node: &'a NodeId) -> BoxFuture<'a, Result<(), String>>;
}

impl NodeOps for Endpoints {
    fn state(&self) -> &StateStore {
        self.node().state()
    }

    fn set_ineligible<'a>(&'a self, node: &'a NodeId) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let req = ServiceRequest::NodeUpdateEligibility(NodeUpdateEligibilityRequest {
                node_id: node.clone(),
                eligibility: SchedulingEligibility::Ineligible,
            });
            self.call(Origin::Local, req)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        })
    }

    fn deregister<'a>(&'a self, node: &'a NodeId) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let req = ServiceRequest::NodeDeregister(NodeDeregisterRequest {
                node_id: node.clone(),
            });
            match self.call(Origin::Local, req).await {
                Ok(_) | Err(ServiceError::NotFound { .. }) => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        })
    }
}

/// The autoscaler as a leader duty.
pub struct AutoscalerDuty {
    cfg: AutoscalerConfig,
    provider: Arc<dyn Provider>,
    ops: Arc<dyn NodeOps>,
    rng: RngSource,
    tasks: LeaderService,
}

impl AutoscalerDuty {
    /// An autoscaler for `cfg` creating nodes through `provider`.
    pub fn new(
        cfg: AutoscalerConfig,
        provider: Arc<dyn Provider>,
        ops: Arc<dyn NodeOps>,
        rng: RngSource,
    ) -> AutoscalerDuty {
        AutoscalerDuty {
            cfg,
            provider,
            ops,
            rng,
            tasks: LeaderService::new(),
        }
    }
}

impl LeaderDuty for AutoscalerDuty {
    fn name(&self) -> &'static str {
        "autoscaler"
    }

    fn establish(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            // The monitor writes the cluster metadata before any duty starts.
            let cluster_id = self
                .ops
                .state()
                .snapshot()
                .cluster_meta()
                .map(|m| m.cluster_id.clone())
                .ok_or_else(|| "the cluster has no id yet".to_string())?;
            let scaler = Autoscaler {
                core: AutoscalerCore::new(
                    self.cfg.clone(),
                    name_prefix(&self.cfg.node_class, &cluster_id),
                ),
                owner: Owner {
                    cluster_id,
                    node_class: self.cfg.node_class.clone(),
                },
                interval: self.cfg.interval,
                provider: self.provider.clone(),
                ops: self.ops.clone(),
                rng: self.rng.clone(),
            };
            let span = tracing::info_span!(
                "autoscaler",
                provider = self.provider.name(),
                node_class = %self.cfg.node_class
            );
            self.tasks
                .restart(|set| set.spawn(|stop| scaler.run(stop).instrument(span)))
                .await;
            Ok(())
        })
    }

    fn revoke(&self) -> BoxFuture<'_, ()> {
        // The instances stay: the next leader adopts them.
        Box::pin(self.tasks.stop())
    }
}

/// `teamster-<class>-<first 8 of the cluster id>-`: the start of every name the autoscaler
/// gives, so names are unique per engine across clusters, and a node left over is
/// recognised. Characters a container name cannot hold become `-`.
pub fn name_prefix(node_class: &str, cluster_id: &str) -> String {
    let class: String = node_class
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let cluster: String = cluster_id.chars().filter(|c| *c != '-').take(8).collect();
    format!("teamster-{class}-{cluster}-")
}

/// What the state says about the class: its nodes, and the blocked evaluations of service
/// and batch jobs (system jobs place on every node: a new node gets its own).
pub fn observe(snapshot: &Snapshot, node_class: &str) -> (Vec<NodeView>, Vec<BlockedView>) {
    let nodes = snapshot
        .nodes()
        .filter(|n| n.node_class == node_class)
        .map(|n| NodeView {
            id: n.id.clone(),
            name: n.name.clone(),
            status: n.status,
            computed_class: n.computed_class.clone(),
            busy: snapshot
                .allocs_by_node(n.id.as_str())
                .any(|a| holds_node(a, snapshot.alloc_job(a).map(|job| job.job_type))),
        })
        .collect();
    let blocked = snapshot
        .evals()
        .filter(|e| is_demand(e))
        .map(|e| BlockedView {
            id: e.id.clone(),
            class_eligibility: e.class_eligibility.clone(),
            escaped: e.escaped_computed_class,
        })
        .collect();
    (nodes, blocked)
}

/// Whether `alloc` keeps its node from being idle: it runs, or is about to, and is not of a
/// system or sysbatch job (those run on every node). An allocation whose job version is gone
/// counts (`job_type` `None`).
pub fn holds_node(alloc: &Allocation, job_type: Option<JobType>) -> bool {
    !alloc.client_terminal_status()
        && !matches!(job_type, Some(JobType::System | JobType::SysBatch))
}

/// Whether `eval` is demand for capacity: blocked, and not of a system or sysbatch job (a
/// new node gets those jobs' allocations anyway).
pub fn is_demand(eval: &Evaluation) -> bool {
    eval.status == EvalStatus::Blocked
        && !matches!(eval.eval_type, JobType::System | JobType::SysBatch)
}

struct Autoscaler {
    core: AutoscalerCore,
    owner: Owner,
    interval: std::time::Duration,
    provider: Arc<dyn Provider>,
    ops: Arc<dyn NodeOps>,
    rng: RngSource,
}

fn count(name: &'static str, provider: &'static str) {
    metrics::counter!(name, "provider" => provider).increment(1);
}

impl Autoscaler {
    async fn run(mut self, stop: CancellationToken) {
        info!("autoscaler started");
        let mut ticker = ticker(self.interval);
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = ticker.tick() => {}
            }
            // A round cut short by a revoke leaves at most a half-made instance, which the
            // next leader lists and stops.
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = self.round() => {}
            }
        }
        info!("autoscaler stopped");
    }

    async fn round(&mut self) {
        let provider = self.provider.name();
        let instances = match self.provider.list(&self.owner).await {
            Ok(list) => Some(list),
            Err(error) => {
                warn!(%error, "listing the provider's instances failed");
                metrics::counter!("teamster_autoscaler_provider_errors_total", "provider" => provider, "op" => "list")
                    .increment(1);
                None
            }
        };
        let (nodes, blocked) = observe(&self.ops.state().snapshot(), &self.owner.node_class);
        let obs = Observation {
            instances,
            nodes,
            blocked,
        };
        let actions = self.core.step(&obs, Instant::now(), &mut self.rng.fork());
        for action in actions {
            self.carry_out(action).await;
        }
        let stats = self.core.stats();
        metrics::gauge!("teamster_autoscaler_nodes_owned", "provider" => provider)
            .set(stats.owned as f64);
        metrics::gauge!("teamster_autoscaler_nodes_starting", "provider" => provider)
            .set(stats.starting as f64);
        metrics::gauge!("teamster_autoscaler_blocked_evals", "provider" => provider)
            .set(stats.demand as f64);
        debug!(
            owned = stats.owned,
            starting = stats.starting,
            stopping = stats.stopping,
            demand = stats.demand,
            "autoscaler round"
        );
    }

    async fn carry_out(&mut self, action: Action) {
        let provider = self.provider.name();
        match action {
            Action::Create { names } => {
                for name in names {
                    count("teamster_autoscaler_nodes_requested_total", provider);
                    let spec = NodeSpec {
                        name: name.clone(),
                        node_class: self.owner.node_class.clone(),
                        cluster_id: self.owner.cluster_id.clone(),
                    };
                    match self.provider.create(&spec).await {
                        Ok(instance) => {
                            info!(node_name = %name, instance = %instance.id, "node created");
                            count("teamster_autoscaler_nodes_created_total", provider);
                            self.core.created(instance, Instant::now());
                        }
                        Err(error) => {
                            warn!(node_name = %name, %error, "creating a node failed; backing off");
                            count("teamster_autoscaler_nodes_failed_total", provider);
                            metrics::counter!("teamster_autoscaler_provider_errors_total", "provider" => provider, "op" => "create")
                                .increment(1);
                            self.core.create_failed(Instant::now());
                        }
                    }
                }
            }
            Action::Cordon { instance, node } => {
                let result = self.ops.set_ineligible(&node).await;
                if let Err(error) = &result {
                    warn!(node_id = %node, %error, "marking an idle node ineligible failed");
                } else {
                    info!(node_id = %node, instance = %instance, "idle node marked ineligible");
                }
                self.core
                    .cordoned(&instance, result.is_ok(), Instant::now());
            }
            Action::Stop {
                instance,
                name,
                node,
                reason,
                retry,
            } => {
                if !retry && reason.is_failure() {
                    warn!(node_name = %name, instance = %instance, reason = reason.as_str(), "node failed; shutting it down");
                    count("teamster_autoscaler_nodes_failed_total", provider);
                }
                match self.stop(&instance, node.as_ref()).await {
                    Ok(()) => {
                        info!(node_name = %name, instance = %instance, reason = reason.as_str(), "node stopped");
                        metrics::counter!("teamster_autoscaler_nodes_stopped_total", "provider" => provider, "reason" => reason.as_str())
                            .increment(1);
                        self.core.stopped(&instance);
                    }
                    Err(error) => {
                        warn!(node_name = %name, instance = %instance, %error, "stopping a node failed; retrying");
                        self.core.stop_failed(&instance, Instant::now());
                    }
                }
            }
            Action::Purge { node } => match self.ops.deregister(&node).await {
                Ok(()) => info!(node_id = %node, "left-over down node purged"),
                Err(error) => {
                    warn!(node_id = %node, %error, "purging a left-over node failed");
                    self.core.purge_failed(&node, Instant::now());
                }
            },
            Action::Lost { instance, name } => {
                warn!(node_name = %name, instance = %instance, "instance vanished from the provider");
                count("teamster_autoscaler_nodes_failed_total", provider);
            }
        }
    }

    /// Destroy the instance, then deregister its node (in that order: a running client
    /// whose node is deregistered registers again).
    async fn stop(&self, instance: &str, node: Option<&NodeId>) -> Result<(), String> {
        self.provider.destroy(instance).await.map_err(|e| {
            metrics::counter!("teamster_autoscaler_provider_errors_total", "provider" => self.provider.name(), "op" => "destroy")
                .increment(1);
            e.to_string()
        })?;
        if let Some(node) = node {
            self.ops.deregister(node).await?;
        }
        Ok(())
    }
}
