//! The provider interface: how the autoscaler creates, lists and destroys the machines (or
//! containers) its nodes run on. The autoscaler knows nothing else of a provider.
//!
//! A provider implements three calls, each safe to retry:
//!
//! - [`Provider::create`] starts one node named [`NodeSpec::name`] of class
//!   [`NodeSpec::node_class`]: a client agent that registers with the cluster under that
//!   name and class. It returns once the machine is started (not once the node is ready);
//!   the autoscaler waits for the node itself (`register_timeout`). It must tag what it
//!   creates with [`NodeSpec::cluster_id`] and the class, so that [`Provider::list`] finds
//!   it again, and leave nothing behind when it fails half-way.
//! - [`Provider::list`] returns every instance it created for a cluster and class, running
//!   or not: a new leader adopts the instances of the previous one, and an instance that
//!   stopped running is noticed.
//! - [`Provider::destroy`] stops and removes an instance; an instance already gone is a
//!   success.
//!
//! Errors are [`AutoscalerError::Provider`]: the autoscaler logs them, counts them and
//! backs off. To add a provider, implement the trait, add its name to
//! `server::config::KNOWN_PROVIDERS` with a config section of its own, and build it in
//! [`super::build_provider`].

use futures::future::BoxFuture;

use super::AutoscalerError;

/// What a provider is asked to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    /// The node's (and the instance's) name, unique: chosen by the autoscaler.
    pub name: String,
    /// The class the node registers with (`server.autoscaler.node_class`).
    pub node_class: String,
    /// The cluster the node joins (`ClusterMeta.cluster_id`), to tag the instance with.
    pub cluster_id: String,
}

/// Which instances [`Provider::list`] returns: those created for this cluster and class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The cluster id the instances are tagged with.
    pub cluster_id: String,
    /// The node class they are tagged with.
    pub node_class: String,
}

/// One instance a provider created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// The provider's id for it (a container id), what [`Provider::destroy`] takes.
    pub id: String,
    /// The name its node registers with.
    pub name: String,
    /// Whether it is running: an instance that stopped (exited, crashed) is failed capacity.
    pub running: bool,
}

/// Something that creates and destroys client nodes.
pub trait Provider: Send + Sync + 'static {
    /// The provider's name (`docker`), for logs and metrics.
    fn name(&self) -> &'static str;

    /// Starts one node; the instance, running.
    fn create<'a>(&'a self, spec: &'a NodeSpec)
        -> BoxFuture<'a, Result<Instance, AutoscalerError>>;

    /// Stops and removes an instance (one already gone is `Ok`).
    fn destroy<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), AutoscalerError>>;

    /// Every instance created for `owner`, running or not.
    fn list<'a>(
        &'a self,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<Vec<Instance>, AutoscalerError>>;
}
