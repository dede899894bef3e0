//! The tables of the state store and their secondary indexes, all on `imbl` persistent maps.
//!
//! `Tables` is cloned for every snapshot and every write transaction. Every field is a
//! persistent map or an `Arc`, so a clone is a handful of reference-count bumps and a write
//! copies only the tree paths it touches. Values are `Arc<T>` so path copies never deep-copy
//! a job or an allocation. A secondary index maps a secondary key to the ordered set of
//! primary keys ([`SecondaryIndex`]); the ids in it are clones of the record's own
//! shared ids (one pointer each), so an index entry costs one 8-byte id in a shared tree node.

use std::borrow::Borrow;
use std::sync::Arc;

use imbl::{OrdMap, OrdSet};

use crate::model::{
    AclPolicy, AclToken, AllocId, Allocation, AutopilotConfig, ClusterMeta, Deployment,
    DeploymentId, EvalId, Evaluation, Job, JobId, JobSummary, Namespace, NamespaceSpec, Node,
    NodeId, OneTimeToken, PeriodicLaunch, Resources, RootKey, SchedulerConfiguration,
    ServiceRegistration, SharedStr, VariableEncrypted,
};

/// Primary key of a job and of its summary.
pub(crate) type JobKey = (Namespace, JobId);
/// Primary key of a job version.
pub(crate) type JobVersionKey = (Namespace, JobId, u64);
/// Primary key of a service registration: namespace, service name, registration ID.
pub(crate) type ServiceKey = (Namespace, String, String);

/// The tables a blocking query can wait on, each with the raft index of its last change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// Current job specs.
    Jobs,
    /// Kept job versions (the 6 newest per job, plus any a live allocation runs).
    JobVersions,
    /// Per-job allocation counts.
    JobSummaries,
    /// Client nodes.
    Nodes,
    /// Evaluations.
    Evals,
    /// Allocations.
    Allocs,
    /// The scheduler configuration.
    SchedulerConfig,
    /// The cluster's identity.
    ClusterMeta,
    /// The last launch of each periodic parent.
    PeriodicLaunches,
    /// Deployments.
    Deployments,
    /// Service registrations (native service discovery).
    Services,
    /// Namespaces.
    Namespaces,
    /// ACL policies.
    AclPolicies,
    /// ACL tokens (and the bootstrap record).
    AclTokens,
    /// The root keyring.
    RootKeys,
    /// Variables.
    Variables,
    /// Autopilot's configuration.
    AutopilotConfig,
}

impl Table {
    /// How many tables there are.
    pub const COUNT: usize = 17;

    /// Every table, in index order.
    pub const ALL: [Table; Table::COUNT] = [
        Table::Jobs,
        Table::JobVersions,
        Table::JobSummaries,
        Table::Nodes,
        Table::Evals,
        Table::Allocs,
        Table::SchedulerConfig,
        Table::ClusterMeta,
        Table::PeriodicLaunches,
        Table::Deployments,
        Table::Services,
        Table::Namespaces,
        Table::AclPolicies,
        Table::AclTokens,
        Table::RootKeys,
        Table::Variables,
        Table::AutopilotConfig,
    ];

    /// Position in per-table index arrays.
    pub(crate) fn slot(self) -> usize {
        self as usize
    }

    /// Nomad's name for the table (used in logs and metrics).
    pub fn name(self) -> &'static str {
        match self {
            Table::Jobs => "jobs",
            Table::JobVersions => "job_version",
            Table::JobSummaries => "job_summary",
            Table::Nodes => "nodes",
            Table::Evals => "evals",
            Table::Allocs => "allocs",
            Table::SchedulerConfig => "scheduler_config",
            Table::ClusterMeta => "cluster_meta",
            Table::PeriodicLaunches => "periodic_launch",
            Table::Deployments => "deployment",
            Table::Services => "service_registrations",
            Table::Namespaces => "namespaces",
            Table::AclPolicies => "acl_policy",
            Table::AclTokens => "acl_token",
            Table::RootKeys => "root_keys",
            Table::Variables => "variables",
            Table::AutopilotConfig => "autopilot-config",
        }
    }
}

/// The summed resources of a node's non-terminal allocations. Kept in wide integers, so
/// removing an allocation exactly undoes adding it; read as [`Resources`] it saturates, as
/// summing the allocations with [`Resources::add`] does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NodeUsage {
    cpu: u128,
    memory_mb: u128,
    disk_mb: u128,
}

impl NodeUsage {
    fn apply(&mut self, r: &Resources, add: bool) {
        let step = |sum: &mut u128, v: u64| {
            if add {
                *sum += u128::from(v);
            } else {
                *sum = sum.saturating_sub(u128::from(v));
            }
        };
        step(&mut self.cpu, r.cpu);
        step(&mut self.memory_mb, r.memory_mb);
        step(&mut self.disk_mb, r.disk_mb);
    }

    fn is_zero(&self) -> bool {
        *self == NodeUsage::default()
    }

    /// The usage as resources (each dimension saturating at `u64::MAX`).
    pub fn resources(&self) -> Resources {
        let narrow = |v: u128| u64::try_from(v).unwrap_or(u64::MAX);
        Resources {
            cpu: narrow(self.cpu),
            memory_mb: narrow(self.memory_mb),
            disk_mb: narrow(self.disk_mb),
            memory_max_mb: 0,
            cores: 0,
        }
    }
}

/// Every table of the state at one raft index.
#[derive(Clone, Default)]
pub(crate) struct Tables {
    /// The raft index of the last applied entry (any kind).
    pub index: u64,
    /// The raft index of the last change of each table, by [`Table::slot`].
    pub table_index: [u64; Table::COUNT],
    pub jobs: OrdMap<JobKey, Arc<Job>>,
    pub job_versions: OrdMap<JobVersionKey, Arc<Job>>,
    pub job_summaries: OrdMap<JobKey, Arc<JobSummary>>,
    /// Periodic and dispatched children by their parent.
    pub jobs_by_parent: SecondaryIndex<JobKey, JobId>,
    /// Dispatched children by (namespace, parent, idempotency token).
    pub dispatch_tokens: OrdMap<(Namespace, JobId, String), JobId>,
    pub periodic_launches: OrdMap<JobKey, Arc<PeriodicLaunch>>,
    pub nodes: OrdMap<NodeId, Arc<Node>>,
    pub evals: OrdMap<EvalId, Arc<Evaluation>>,
    pub evals_by_job: SecondaryIndex<JobKey, EvalId>,
    pub allocs: OrdMap<AllocId, Arc<Allocation>>,
    pub allocs_by_job: SecondaryIndex<JobKey, AllocId>,
    pub allocs_by_node: SecondaryIndex<NodeId, AllocId>,
    /// The highest `alloc_modify_index` any allocation of each node has been written with
    /// (never lowered: an allocation removed since still counts). A client's allocation
    /// query checks it instead of walking the node's allocations.
    pub node_alloc_index: OrdMap<NodeId, u64>,
    /// What each node's non-terminal allocations take, summed (nodes with none are absent):
    /// the schedulers read a node's usage here instead of summing its allocations.
    pub node_usage: OrdMap<NodeId, NodeUsage>,
    pub allocs_by_eval: SecondaryIndex<EvalId, AllocId>,
    pub scheduler_config: Arc<SchedulerConfiguration>,
    pub autopilot_config: Arc<AutopilotConfig>,
    pub cluster_meta: Option<Arc<ClusterMeta>>,
    pub deployments: OrdMap<DeploymentId, Arc<Deployment>>,
    pub deployments_by_job: SecondaryIndex<JobKey, DeploymentId>,
    /// Allocations by the deployment that placed them.
    pub allocs_by_deployment: SecondaryIndex<DeploymentId, AllocId>,
    /// The subset of `allocs_by_deployment` that [`Allocation::counts_unhealthy`]: what the
    /// deployment watcher acts on, without walking every allocation of every deployment.
    pub unhealthy_by_deployment: SecondaryIndex<DeploymentId, AllocId>,
    /// Service registrations by namespace, name and ID.
    pub services: OrdMap<ServiceKey, Arc<ServiceRegistration>>,
    /// Registrations by the allocation they are for.
    pub services_by_alloc: SecondaryIndex<AllocId, ServiceKey>,
    /// Registrations by the node their allocation runs on.
    pub services_by_node: SecondaryIndex<NodeId, ServiceKey>,
    /// Namespaces by name (`default` is there once described; it exists either way).
    pub namespaces: OrdMap<Namespace, Arc<NamespaceSpec>>,
    /// ACL policies by name.
    pub acl_policies: OrdMap<String, Arc<AclPolicy>>,
    /// ACL tokens by accessor ID.
    pub acl_tokens: OrdMap<String, Arc<AclToken>>,
    /// Accessor IDs by secret ID (rebuilt from `acl_tokens`, never encoded).
    pub acl_secrets: OrdMap<String, String>,
    /// The raft index of the ACL bootstrap, 0 before it (Nomad's reset index).
    pub acl_bootstrap_index: u64,
    /// Root keys by key ID.
    pub root_keys: OrdMap<String, Arc<RootKey>>,
    /// Variables by namespace and path.
    pub variables: OrdMap<(String, String), Arc<VariableEncrypted>>,
    /// One-time tokens by their secret (part of the ACL tokens table's index).
    pub one_time_tokens: OrdMap<String, Arc<OneTimeToken>>,
}

impl Tables {
    /// Records that `table` changed at `index`.
    pub fn touch(&mut self, table: Table, index: u64) {
        self.table_index[table.slot()] = index;
    }

    /// Adds an allocation's secondary index entries.
    pub fn index_alloc(&mut self, alloc: &Allocation) {
        self.allocs_by_job.insert(
            (alloc.namespace.clone(), alloc.job_id.clone()),
            alloc.id.clone(),
        );
        self.allocs_by_node
            .insert(alloc.node_id.clone(), alloc.id.clone());
        self.account_usage(alloc, true);
        self.allocs_by_eval
            .insert(alloc.eval_id.clone(), alloc.id.clone());
        if !alloc.deployment_id.is_empty() {
            self.allocs_by_deployment
                .insert(alloc.deployment_id.clone(), alloc.id.clone());
        }
        self.account_unhealthy(alloc, true);
    }

    /// Raises [`Tables::node_alloc_index`] for the allocation's node to its
    /// `alloc_modify_index`.
    pub fn note_node_alloc(&mut self, alloc: &Allocation) {
        let index = alloc.alloc_modify_index;
        if self
            .node_alloc_index
            .get(alloc.node_id.as_str())
            .is_none_or(|&known| known < index)
        {
            self.node_alloc_index.insert(alloc.node_id.clone(), index);
        }
    }

    /// Removes an allocation's secondary index entries.
    pub fn unindex_alloc(&mut self, alloc: &Allocation) {
        self.allocs_by_job
            .remove(&(alloc.namespace.clone(), alloc.job_id.clone()), &alloc.id);
        self.allocs_by_node
            .remove(alloc.node_id.as_str(), &alloc.id);
        self.account_usage(alloc, false);
        self.allocs_by_eval
            .remove(alloc.eval_id.as_str(), &alloc.id);
        if !alloc.deployment_id.is_empty() {
            self.allocs_by_deployment
                .remove(alloc.deployment_id.as_str(), &alloc.id);
        }
        self.account_unhealthy(alloc, false);
    }

    /// Adds (or, with `add` false, removes) an allocation to its deployment's unhealthy
    /// set, if it has a deployment and [`Allocation::counts_unhealthy`].
    pub fn account_unhealthy(&mut self, alloc: &Allocation, add: bool) {
        if alloc.deployment_id.is_empty() || !alloc.counts_unhealthy() {
            return;
        }
        if add {
            self.unhealthy_by_deployment
                .insert(alloc.deployment_id.clone(), alloc.id.clone());
        } else {
            self.unhealthy_by_deployment
                .remove(alloc.deployment_id.as_str(), &alloc.id);
        }
    }

    /// Adds (or, with `add` false, removes) a non-terminal allocation's resources to its
    /// node's usage; terminal allocations take nothing.
    pub fn account_usage(&mut self, alloc: &Allocation, add: bool) {
        if alloc.terminal_status() {
            return;
        }
        let mut usage = self
            .node_usage
            .get(alloc.node_id.as_str())
            .copied()
            .unwrap_or_default();
        usage.apply(&alloc.resources, add);
        if usage.is_zero() {
            self.node_usage.remove(alloc.node_id.as_str());
        } else {
            self.node_usage.insert(alloc.node_id.clone(), usage);
        }
    }

    /// Makes the allocation's ids clones of the ids already stored for its job, node and
    /// evaluation, so a million allocations share their few distinct id strings.
    pub fn intern_alloc_ids(&self, alloc: &mut Allocation) {
        let job_key = (alloc.namespace.clone(), alloc.job_id.clone());
        if let Some((ns, id)) = self.jobs.get_key_value(&job_key).map(|(k, _)| k) {
            alloc.namespace = ns.clone();
            alloc.job_id = id.clone();
        }
        if let Some((id, _)) = self.nodes.get_key_value(alloc.node_id.as_str()) {
            alloc.node_id = id.clone();
        }
        if let Some((id, _)) = self.evals.get_key_value(alloc.eval_id.as_str()) {
            alloc.eval_id = id.clone();
        }
        if let Some((id, _)) = self.evals.get_key_value(alloc.followup_eval_id.as_str()) {
            alloc.followup_eval_id = id.clone();
        }
        if let Some((id, _)) = self.deployments.get_key_value(alloc.deployment_id.as_str()) {
            alloc.deployment_id = id.clone();
        }
    }

    /// A stored allocation of the job whose task group is named `group`, if one of the job's
    /// first few allocations has it: its name, so a new allocation shares those bytes.
    pub fn stored_task_group(&self, key: &JobKey, group: &str) -> Option<SharedStr> {
        self.allocs_by_job
            .get(key)
            .take(4)
            .filter_map(|id| self.allocs.get(id.as_str()))
            .find(|a| a.task_group.as_str() == group)
            .map(|a| a.task_group.clone())
    }

    /// Makes an evaluation's job and node ids clones of the stored ones.
    pub fn intern_eval_ids(&self, eval: &mut Evaluation) {
        let job_key = (eval.namespace.clone(), eval.job_id.clone());
        if let Some((ns, id)) = self.jobs.get_key_value(&job_key).map(|(k, _)| k) {
            eval.namespace = ns.clone();
            eval.job_id = id.clone();
        }
        if let Some((id, _)) = self.nodes.get_key_value(eval.node_id.as_str()) {
            eval.node_id = id.clone();
        }
    }

    /// Rebuilds every secondary index from the primary tables (after a restore).
    pub fn rebuild_indexes(&mut self) {
        let mut jobs_by_parent = SecondaryIndex::default();
        for job in self.jobs.values().filter(|j| !j.parent_id.is_empty()) {
            jobs_by_parent.insert(
                (job.namespace.clone(), job.parent_id.clone()),
                job.id.clone(),
            );
        }
        self.jobs_by_parent = jobs_by_parent;
        self.dispatch_tokens = self
            .jobs
            .values()
            .filter_map(|j| token_key(j).map(|k| (k, j.id.clone())))
            .collect();
        let mut evals_by_job = SecondaryIndex::default();
        for eval in self.evals.values() {
            evals_by_job.insert(
                (eval.namespace.clone(), eval.job_id.clone()),
                eval.id.clone(),
            );
        }
        self.evals_by_job = evals_by_job;
        self.allocs_by_job = SecondaryIndex::default();
        self.allocs_by_node = SecondaryIndex::default();
        self.node_alloc_index = OrdMap::new();
        self.node_usage = OrdMap::new();
        self.allocs_by_eval = SecondaryIndex::default();
        self.allocs_by_deployment = SecondaryIndex::default();
        self.unhealthy_by_deployment = SecondaryIndex::default();
        let mut deployments_by_job = SecondaryIndex::default();
        for d in self.deployments.values() {
            deployments_by_job.insert((d.namespace.clone(), d.job_id.clone()), d.id.clone());
        }
        self.deployments_by_job = deployments_by_job;
        let allocs = self.allocs.clone();
        for alloc in allocs.values() {
            self.index_alloc(alloc);
            self.note_node_alloc(alloc);
        }
        self.services_by_alloc = SecondaryIndex::default();
        self.services_by_node = SecondaryIndex::default();
        let services = self.services.clone();
        for (key, reg) in services.iter() {
            self.services_by_alloc
                .insert(reg.alloc_id.clone(), key.clone());
            self.services_by_node
                .insert(reg.node_id.clone(), key.clone());
        }
    }
}

/// The key of a dispatched child in [`Tables::dispatch_tokens`] (`None` without a token).
pub(crate) fn token_key(job: &Job) -> Option<(Namespace, JobId, String)> {
    (job.dispatched && !job.dispatch_idempotency_token.is_empty()).then(|| {
        (
            job.namespace.clone(),
            job.parent_id.clone(),
            job.dispatch_idempotency_token.clone(),
        )
    })
}

/// A secondary index: each secondary key maps to the ordered set of primary keys of the rows
/// that have it. Empty sets are removed, so the outer map only holds live keys.
#[derive(Clone)]
pub(crate) struct SecondaryIndex<K: Ord + Clone, I: Ord + Clone> {
    map: OrdMap<K, OrdSet<I>>,
}

impl<K: Ord + Clone, I: Ord + Clone> Default for SecondaryIndex<K, I> {
    fn default() -> Self {
        Self { map: OrdMap::new() }
    }
}

impl<K: Ord + Clone, I: Ord + Clone> SecondaryIndex<K, I> {
    /// Adds `id` under `key`.
    pub fn insert(&mut self, key: K, id: I) {
        match self.map.get_mut(&key) {
            Some(set) => {
                set.insert(id);
            }
            None => {
                self.map.insert(key, OrdSet::unit(id));
            }
        }
    }

    /// Removes `id` from under `key` (and `key` once nothing is left under it).
    pub fn remove<Q>(&mut self, key: &Q, id: &I)
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        let emptied = match self.map.get_mut(key) {
            Some(set) => {
                set.remove(id);
                set.is_empty()
            }
            None => false,
        };
        if emptied {
            self.map.remove(key);
        }
    }

    /// The set of primary keys under `key`, if any.
    pub fn set<Q>(&self, key: &Q) -> Option<&OrdSet<I>>
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.map.get(key)
    }

    /// The primary keys under `key`, in order.
    pub fn get<Q>(&self, key: &Q) -> impl Iterator<Item = &I> + '_
    where
        K: Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.map.get(key).into_iter().flat_map(|set| set.iter())
    }
}
