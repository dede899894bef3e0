//! [`Snapshot`]: a consistent, read-only view of every table at one raft index.
//!
//! Taking one is O(1) (one `Arc` clone) and it never sees later writes: the writer builds new
//! versions of the persistent maps and publishes them; a snapshot keeps the old ones alive.
//! Schedulers plan against a snapshot, the HTTP API answers from one, the broker restores
//! from one.

use std::ops::Bound;
use std::sync::Arc;

use crate::model::{
    AclPolicy, AclToken, AllocId, Allocation, ClusterMeta, Deployment, Evaluation, Job, JobId,
    JobSummary, Namespace, NamespaceSpec, Node, OneTimeToken, PeriodicLaunch, Resources, RootKey,
    RootKeyState, SchedulerConfiguration, ServiceRegistration, VariableEncrypted,
    DEFAULT_NAMESPACE,
};
use crate::state::tables::{SecondaryIndex, Table, Tables};

/// A read-only view of the whole state at one index.
#[derive(Clone)]
pub struct Snapshot {
    pub(crate) tables: Arc<Tables>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("index", &self.tables.index)
            .field("jobs", &self.tables.jobs.len())
            .field("nodes", &self.tables.nodes.len())
            .field("evals", &self.tables.evals.len())
            .field("allocs", &self.tables.allocs.len())
            .finish()
    }
}

impl Snapshot {
    pub(crate) fn new(tables: Arc<Tables>) -> Self {
        Self { tables }
    }

    /// What this view would be with `command` applied at the next index: a private copy
    /// (O(1), the tables are persistent maps) that is neither published nor persisted.
    /// `job plan` schedules on it to see what a registration would do.
    pub fn with_applied(
        &self,
        command: crate::fsm::Command,
    ) -> (Snapshot, crate::fsm::CommandResponse) {
        let mut tables = (*self.tables).clone();
        let index = tables.index + 1;
        let mut changes = Vec::new();
        let response = crate::state::apply::apply(&mut tables, index, command, &mut changes);
        tables.index = index;
        (Snapshot::new(Arc::new(tables)), response)
    }

    /// The raft index of the last entry applied to this view.
    pub fn latest_index(&self) -> u64 {
        self.tables.index
    }

    /// The raft index of the last change to `table` (0: never changed).
    pub fn table_index(&self, table: Table) -> u64 {
        self.tables.table_index[table.slot()]
    }

    /// The highest index of the given tables: what a blocking query reports as
    /// `X-Nomad-Index` (Nomad reports at least 1, which the caller applies).
    pub fn max_index(&self, tables: &[Table]) -> u64 {
        tables
            .iter()
            .map(|t| self.table_index(*t))
            .max()
            .unwrap_or(0)
    }

    // ---- jobs ------------------------------------------------------------------------------

    /// The current version of a job.
    pub fn job_by_id(&self, namespace: &str, id: &str) -> Option<&Arc<Job>> {
        self.tables
            .jobs
            .get(&(Namespace::new(namespace), JobId::new(id)))
    }

    /// The children of a periodic or parameterized parent, ordered by ID.
    pub fn job_children<'a>(
        &'a self,
        namespace: &str,
        parent: &str,
    ) -> impl Iterator<Item = &'a Arc<Job>> + 'a {
        let ns = Namespace::new(namespace);
        self.tables
            .jobs_by_parent
            .get(&(ns.clone(), JobId::new(parent)))
            .filter_map(move |id| self.tables.jobs.get(&(ns.clone(), id.clone())))
    }

    /// The dispatched child of `parent` created with idempotency `token`.
    pub fn dispatched_child_by_token(
        &self,
        namespace: &str,
        parent: &str,
        token: &str,
    ) -> Option<&Arc<Job>> {
        let ns = Namespace::new(namespace);
        let id =
            self.tables
                .dispatch_tokens
                .get(&(ns.clone(), JobId::new(parent), token.to_owned()))?;
        self.tables.jobs.get(&(ns, id.clone()))
    }

    /// The recorded last launch of a periodic parent.
    pub fn periodic_launch(&self, namespace: &str, id: &str) -> Option<&Arc<PeriodicLaunch>> {
        self.tables
            .periodic_launches
            .get(&(Namespace::new(namespace), JobId::new(id)))
    }

    /// Every recorded periodic launch.
    pub fn periodic_launches(&self) -> impl Iterator<Item = &Arc<PeriodicLaunch>> + '_ {
        self.tables.periodic_launches.values()
    }

    /// How many jobs there are (O(1)).
    pub fn job_count(&self) -> usize {
        self.tables.jobs.len()
    }

    /// Every job, ordered by (namespace, ID).
    pub fn jobs(&self) -> impl Iterator<Item = &Arc<Job>> + '_ {
        self.tables.jobs.values()
    }

    /// The jobs of one namespace whose ID starts with `prefix` (all of them for `""`),
    /// ordered by ID.
    pub fn jobs_by_prefix<'a>(
        &'a self,
        namespace: &str,
        prefix: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Job>> + 'a {
        let ns = Namespace::new(namespace);
        let start = (ns.clone(), JobId::new(prefix));
        self.tables
            .jobs
            .range(start..)
            .take_while(move |((n, id), _)| *n == ns && id.starts_with(prefix))
            .map(|(_, job)| job)
    }

    /// Every kept version of a job, newest first.
    pub fn job_versions(&self, namespace: &str, id: &str) -> Vec<Arc<Job>> {
        let (ns, id) = (Namespace::new(namespace), JobId::new(id));
        self.tables
            .job_versions
            .range((ns.clone(), id.clone(), 0)..=(ns, id, u64::MAX))
            .rev()
            .map(|(_, job)| job.clone())
            .collect()
    }

    /// One version of a job, if still kept.
    pub fn job_by_version(&self, namespace: &str, id: &str, version: u64) -> Option<&Arc<Job>> {
        self.tables
            .job_versions
            .get(&(Namespace::new(namespace), JobId::new(id), version))
    }

    /// The job version an allocation runs: how an allocation reaches its spec.
    pub fn alloc_job(&self, alloc: &Allocation) -> Option<&Arc<Job>> {
        self.tables.job_versions.get(&(
            alloc.namespace.clone(),
            alloc.job_id.clone(),
            alloc.job_version,
        ))
    }

    /// A job's allocation counts per task group.
    pub fn job_summary(&self, namespace: &str, id: &str) -> Option<&Arc<JobSummary>> {
        self.tables
            .job_summaries
            .get(&(Namespace::new(namespace), JobId::new(id)))
    }

    /// Every job summary, ordered by (namespace, job ID).
    pub fn job_summaries(&self) -> impl Iterator<Item = &Arc<JobSummary>> + '_ {
        self.tables.job_summaries.values()
    }

    // ---- nodes -----------------------------------------------------------------------------

    /// One node.
    pub fn node_by_id(&self, id: &str) -> Option<&Arc<Node>> {
        self.tables.nodes.get(id)
    }

    /// Every node, ordered by ID.
    pub fn nodes(&self) -> impl Iterator<Item = &Arc<Node>> + '_ {
        self.tables.nodes.values()
    }

    /// This snapshot's nodes table alone, to recognise it later ([`NodesVersion::is_of`],
    /// O(1)) without keeping the rest of the state alive. Views made from one snapshot by
    /// [`Snapshot::with_applied`] share the table until a command changes a node.
    pub fn nodes_version(&self) -> NodesVersion {
        NodesVersion(self.tables.nodes.clone())
    }

    /// Nodes whose ID starts with `prefix`, ordered by ID.
    pub fn nodes_by_prefix<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Node>> + 'a {
        self.tables
            .nodes
            .range::<_, str>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(move |(id, _)| id.starts_with(prefix))
            .map(|(_, n)| n)
    }

    /// How many nodes are registered.
    pub fn node_count(&self) -> usize {
        self.tables.nodes.len()
    }

    // ---- evaluations -----------------------------------------------------------------------

    /// One evaluation.
    pub fn eval_by_id(&self, id: &str) -> Option<&Arc<Evaluation>> {
        self.tables.evals.get(id)
    }

    /// Every evaluation, ordered by ID.
    pub fn evals(&self) -> impl Iterator<Item = &Arc<Evaluation>> + '_ {
        self.tables.evals.values()
    }

    /// Evaluations whose ID starts with `prefix`, ordered by ID.
    pub fn evals_by_prefix<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Evaluation>> + 'a {
        self.tables
            .evals
            .range::<_, str>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(move |(id, _)| id.starts_with(prefix))
            .map(|(_, e)| e)
    }

    /// A job's evaluations, ordered by eval ID.
    pub fn evals_by_job<'a>(
        &'a self,
        namespace: &str,
        job_id: &str,
    ) -> impl Iterator<Item = &'a Arc<Evaluation>> + 'a {
        let key = (Namespace::new(namespace), JobId::new(job_id));
        let evals = &self.tables.evals;
        self.tables
            .evals_by_job
            .get(&key)
            .filter_map(move |id| evals.get(id))
    }

    /// How many evaluations exist.
    pub fn eval_count(&self) -> usize {
        self.tables.evals.len()
    }

    // ---- allocations -----------------------------------------------------------------------

    /// One allocation.
    pub fn alloc_by_id(&self, id: &str) -> Option<&Arc<Allocation>> {
        self.tables.allocs.get(id)
    }

    /// Every allocation, ordered by ID.
    pub fn allocs(&self) -> impl Iterator<Item = &Arc<Allocation>> + '_ {
        self.tables.allocs.values()
    }

    /// Allocations whose ID starts with `prefix`, ordered by ID.
    pub fn allocs_by_prefix<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Allocation>> + 'a {
        self.tables
            .allocs
            .range::<_, str>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(move |(id, _)| id.starts_with(prefix))
            .map(|(_, a)| a)
    }

    /// A job's allocations (every version, terminal ones included), ordered by alloc ID.
    pub fn allocs_by_job<'a>(
        &'a self,
        namespace: &str,
        job_id: &str,
    ) -> impl Iterator<Item = &'a Arc<Allocation>> + 'a {
        let key = (Namespace::new(namespace), JobId::new(job_id));
        let allocs = &self.tables.allocs;
        self.tables
            .allocs_by_job
            .get(&key)
            .filter_map(move |id| allocs.get(id))
    }

    /// What the node's non-terminal allocations take, summed (kept by the state store as
    /// allocations change, so reading it does not walk them).
    pub fn node_usage(&self, node_id: &str) -> Resources {
        self.tables
            .node_usage
            .get(node_id)
            .map_or(Resources::ZERO, |u| u.resources())
    }

    /// The highest `alloc_modify_index` any allocation of the node has been written with,
    /// 0 for none (an allocation removed since still counts): a node has an allocation
    /// changed past `i` only if this is past `i`. O(1) in the node's allocations.
    pub fn node_alloc_index(&self, node_id: &str) -> u64 {
        self.tables
            .node_alloc_index
            .get(node_id)
            .copied()
            .unwrap_or(0)
    }

    /// The allocations placed on a node, ordered by alloc ID.
    pub fn allocs_by_node<'a>(
        &'a self,
        node_id: &str,
    ) -> impl Iterator<Item = &'a Arc<Allocation>> + 'a {
        self.allocs_under(&self.tables.allocs_by_node, node_id)
    }

    /// The allocations a secondary index holds under `key`, in its order.
    fn allocs_under<'a, K: Ord + Clone + std::borrow::Borrow<str>>(
        &'a self,
        index: &'a SecondaryIndex<K, AllocId>,
        key: &str,
    ) -> impl Iterator<Item = &'a Arc<Allocation>> + 'a {
        let allocs = &self.tables.allocs;
        index.get(key).filter_map(move |id| allocs.get(id))
    }

    /// The ids of the allocations on node `node_id` (in any status), to test membership
    /// in: a search of the node's few allocations, where [`Snapshot::alloc_by_id`] searches
    /// all of them.
    pub fn alloc_ids_on_node(&self, node_id: &str) -> NodeAllocIds<'_> {
        NodeAllocIds(self.tables.allocs_by_node.set(node_id))
    }

    /// The allocations an evaluation placed or last updated, ordered by alloc ID.
    pub fn allocs_by_eval<'a>(
        &'a self,
        eval_id: &str,
    ) -> impl Iterator<Item = &'a Arc<Allocation>> + 'a {
        self.allocs_under(&self.tables.allocs_by_eval, eval_id)
    }

    /// How many allocations exist.
    pub fn alloc_count(&self) -> usize {
        self.tables.allocs.len()
    }

    // ---- deployments -----------------------------------------------------------------------

    /// The deployment with this ID.
    pub fn deployment_by_id(&self, id: &str) -> Option<&Arc<Deployment>> {
        self.tables.deployments.get(id)
    }

    /// Every deployment, ordered by ID.
    pub fn deployments(&self) -> impl Iterator<Item = &Arc<Deployment>> + '_ {
        self.tables.deployments.values()
    }

    /// The deployments whose ID starts with `prefix`, ordered by ID.
    pub fn deployments_by_prefix<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Deployment>> + 'a {
        self.tables
            .deployments
            .range::<_, str>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(move |(id, _)| id.starts_with(prefix))
            .map(|(_, d)| d)
    }

    /// Every namespace, by name, `default` among them (as described, or as it is before).
    pub fn namespaces(&self) -> Vec<Arc<NamespaceSpec>> {
        let mut out: Vec<Arc<NamespaceSpec>> = self.tables.namespaces.values().cloned().collect();
        if !out.iter().any(|n| n.name == DEFAULT_NAMESPACE) {
            out.push(Arc::new(NamespaceSpec::default_namespace()));
            out.sort_by(|a, b| a.name.cmp(&b.name));
        }
        out
    }

    /// The namespace `name`, if it exists (`default` always does).
    pub fn namespace(&self, name: &str) -> Option<Arc<NamespaceSpec>> {
        match self.tables.namespaces.get(name) {
            Some(ns) => Some(ns.clone()),
            None if name == DEFAULT_NAMESPACE => Some(Arc::new(NamespaceSpec::default_namespace())),
            None => None,
        }
    }

    /// Every ACL policy, by name.
    pub fn acl_policies(&self) -> impl Iterator<Item = &Arc<AclPolicy>> + '_ {
        self.tables.acl_policies.values()
    }

    /// The ACL policy `name`.
    pub fn acl_policy(&self, name: &str) -> Option<&Arc<AclPolicy>> {
        self.tables.acl_policies.get(name)
    }

    /// Every ACL token, by accessor ID.
    pub fn acl_tokens(&self) -> impl Iterator<Item = &Arc<AclToken>> + '_ {
        self.tables.acl_tokens.values()
    }

    /// The ACL token with this accessor ID.
    pub fn acl_token_by_accessor(&self, accessor_id: &str) -> Option<&Arc<AclToken>> {
        self.tables.acl_tokens.get(accessor_id)
    }

    /// The ACL token with this secret ID.
    pub fn acl_token_by_secret(&self, secret_id: &str) -> Option<&Arc<AclToken>> {
        let accessor = self.tables.acl_secrets.get(secret_id)?;
        self.tables.acl_tokens.get(accessor)
    }

    /// The raft index of the ACL bootstrap (Nomad's reset index), 0 before it.
    pub fn acl_bootstrap_index(&self) -> u64 {
        self.tables.acl_bootstrap_index
    }

    /// The one-time token with this secret.
    pub fn one_time_token(&self, secret: &str) -> Option<&Arc<OneTimeToken>> {
        self.tables.one_time_tokens.get(secret)
    }

    /// Every root key, by key ID.
    pub fn root_keys(&self) -> impl Iterator<Item = &Arc<RootKey>> + '_ {
        self.tables.root_keys.values()
    }

    /// The root key `key_id`.
    pub fn root_key(&self, key_id: &str) -> Option<&Arc<RootKey>> {
        self.tables.root_keys.get(key_id)
    }

    /// The variable at `path` in `namespace`.
    pub fn variable(&self, namespace: &str, path: &str) -> Option<&Arc<VariableEncrypted>> {
        self.tables
            .variables
            .get(&(namespace.to_string(), path.to_string()))
    }

    /// The variables of `namespace` (every namespace for `None`) whose path starts with
    /// `prefix`, by namespace and path.
    pub fn variables<'a>(
        &'a self,
        namespace: Option<&'a str>,
        prefix: &'a str,
    ) -> impl Iterator<Item = &'a Arc<VariableEncrypted>> + 'a {
        let start = (namespace.unwrap_or("").to_string(), String::new());
        self.tables
            .variables
            .range(start..)
            .take_while(move |((ns, _), _)| namespace.is_none_or(|n| ns == n))
            .filter(move |((_, path), _)| path.starts_with(prefix))
            .map(|(_, v)| v)
    }

    /// The active root key (the one that signs), if the keyring is initialized.
    pub fn active_root_key(&self) -> Option<&Arc<RootKey>> {
        self.tables
            .root_keys
            .values()
            .find(|k| k.meta.state == RootKeyState::Active)
    }

    /// Every service registration, by namespace, service name and ID.
    pub fn service_registrations(&self) -> impl Iterator<Item = &Arc<ServiceRegistration>> + '_ {
        self.tables.services.values()
    }

    /// The registrations of the service `name` in `namespace`, by ID.
    pub fn services_by_name<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> impl Iterator<Item = &'a Arc<ServiceRegistration>> + 'a {
        let start = (Namespace::new(namespace), name.to_string(), String::new());
        self.tables
            .services
            .range(start..)
            .take_while(move |((ns, n, _), _)| ns.as_str() == namespace && n == name)
            .map(|(_, r)| r)
    }

    /// The registrations of the allocations on a node.
    pub fn services_by_node(&self, node_id: &str) -> Vec<Arc<ServiceRegistration>> {
        self.tables
            .services_by_node
            .get(node_id)
            .filter_map(|k| self.tables.services.get(k).cloned())
            .collect()
    }

    /// The registrations of an allocation.
    pub fn services_by_alloc(&self, alloc_id: &str) -> Vec<Arc<ServiceRegistration>> {
        self.tables
            .services_by_alloc
            .get(alloc_id)
            .filter_map(|k| self.tables.services.get(k).cloned())
            .collect()
    }

    /// A job's deployments, newest (highest create index) first.
    pub fn deployments_by_job(&self, namespace: &str, job_id: &str) -> Vec<Arc<Deployment>> {
        let key = (Namespace::new(namespace), JobId::new(job_id));
        let mut found: Vec<Arc<Deployment>> = self
            .tables
            .deployments_by_job
            .get(&key)
            .filter_map(|id| self.tables.deployments.get(id).cloned())
            .collect();
        found.sort_by(|a, b| b.create_index.cmp(&a.create_index).then(a.id.cmp(&b.id)));
        found
    }

    /// A job's newest deployment (Nomad's `LatestDeploymentByJobID`).
    pub fn latest_deployment(&self, namespace: &str, job_id: &str) -> Option<Arc<Deployment>> {
        self.deployments_by_job(namespace, job_id)
            .into_iter()
            .next()
    }

    /// The allocations a deployment placed (or took over in place), ordered by alloc ID.
    pub fn allocs_by_deployment<'a>(
        &'a self,
        deployment_id: &str,
    ) -> impl Iterator<Item = &'a Arc<Allocation>> + 'a {
        self.allocs_under(&self.tables.allocs_by_deployment, deployment_id)
    }

    /// The allocations of a deployment that [`Allocation::counts_unhealthy`], ordered by
    /// alloc ID: kept by the store, so reading them costs what they are, not what the
    /// deployment placed.
    pub fn unhealthy_allocs_by_deployment<'a>(
        &'a self,
        deployment_id: &str,
    ) -> impl Iterator<Item = &'a Arc<Allocation>> + 'a {
        self.allocs_under(&self.tables.unhealthy_by_deployment, deployment_id)
    }

    // ---- cluster ---------------------------------------------------------------------------

    /// The scheduler configuration (Nomad's defaults until an operator sets one).
    pub fn scheduler_config(&self) -> &SchedulerConfiguration {
        &self.tables.scheduler_config
    }

    /// Autopilot's configuration (Nomad's defaults until an operator sets one).
    pub fn autopilot_config(&self) -> &crate::model::AutopilotConfig {
        &self.tables.autopilot_config
    }

    /// The cluster's identity, once the first leader wrote it.
    pub fn cluster_meta(&self) -> Option<&ClusterMeta> {
        self.tables.cluster_meta.as_deref()
    }
}

/// One version of the nodes table (see [`Snapshot::nodes_version`]): holds that table only,
/// so a long-lived cache keyed by it pins no jobs, allocations or evaluations.
#[derive(Clone)]
pub struct NodesVersion(imbl::OrdMap<crate::model::NodeId, Arc<Node>>);

impl std::fmt::Debug for NodesVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodesVersion")
            .field("nodes", &self.0.len())
            .finish()
    }
}

impl NodesVersion {
    /// Whether `snapshot` holds this very nodes table (O(1)).
    pub fn is_of(&self, snapshot: &Snapshot) -> bool {
        self.0.ptr_eq(&snapshot.tables.nodes)
    }
}

/// The ids of one node's allocations ([`Snapshot::alloc_ids_on_node`]).
#[derive(Debug, Clone, Copy)]
pub struct NodeAllocIds<'a>(Option<&'a imbl::OrdSet<AllocId>>);

impl NodeAllocIds<'_> {
    /// True when the node has allocation `id`.
    pub fn contains(&self, id: &str) -> bool {
        self.0.is_some_and(|set| set.contains(id))
    }
}
