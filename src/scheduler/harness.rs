//! Test support: a [`Planner`] over a real [`StateStore`], and small fixtures.
//!
//! The [`Harness`] plays the leader for one scheduler at a time: a submitted plan is
//! verified with the plan applier's own core ([`evaluate_plan`]) against the store's latest
//! state, the accepted part is committed as a [`Command::ApplyPlanResults`] at the next raft
//! index, and a partial commit is answered with a `RefreshIndex` and a fresh snapshot —
//! exactly the contract the worker's RPC planner has. Evaluation updates, creations and
//! reblocks are committed as [`Command::EvalUpsert`]. Everything is recorded for assertions.
//!
//! [`Harness::interfere_before_next_plan`] applies commands between planning and
//! verification, which is how tests stage a conflicting commit from another worker.
//!
//! It does no I/O: the state store is in memory and only its synchronous methods are used.

use std::collections::VecDeque;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::SeedableRng;
use teamster_storage::fsm::{
    AllocClientReport, AllocClientUpdate, ApplyPlanResults, Command, CommandResponse, EvalUpsert,
    JobRegister, NodeRegister,
};
use teamster_storage::model::{
    Allocation, ClientStatus, EvalStatus, EvalTrigger, Evaluation, Job, JobId, JobType, Node,
    NodeId, NodeResources, Plan, PlanResult, Resources, Task, TaskGroup,
};
use teamster_storage::state::{Snapshot, StateStore};

use crate::scheduler::verify::{evaluate_plan, PlanEvaluation, PlanOverlay};
use crate::scheduler::{
    new_scheduler, Planner, ReadyNodesCache, SchedulerEnv, SchedulerError, SchedulerSettings,
};

/// 2024-01-01T00:00:00Z in Unix nanoseconds: the harness's default "now".
pub const HARNESS_EPOCH: i64 = 1_704_067_200_000_000_000;

/// A planner over an in-memory state store that records what schedulers do.
pub struct Harness {
    store: StateStore,
    index: u64,
    seed: u64,
    ids: u64,
    /// "Now" handed to schedulers and stamped on commits, Unix nanoseconds.
    pub now: i64,
    /// Settings handed to schedulers.
    pub settings: SchedulerSettings,
    /// Every plan submitted, in order.
    pub plans: Vec<Plan>,
    /// The applier's verdict on each plan.
    pub evaluations: Vec<PlanEvaluation>,
    /// The result returned for each plan.
    pub results: Vec<PlanResult>,
    /// Evaluations passed to `update_eval`.
    pub updated_evals: Vec<Evaluation>,
    /// Evaluations passed to `create_eval`.
    pub created_evals: Vec<Evaluation>,
    /// Evaluations passed to `reblock_eval`.
    pub reblocked_evals: Vec<Evaluation>,
    interference: VecDeque<Interference>,
    /// Ready nodes remembered across evaluations, as a worker pool remembers them.
    ready_nodes: Arc<ReadyNodesCache>,
}

/// Commands to apply between planning and verification, computed from the plan and the
/// state it is about to be verified against.
pub type Interference = Box<dyn FnOnce(&Plan, &Snapshot) -> Vec<Command> + Send>;

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}

impl Harness {
    /// An empty store at index 0, RNG seed 1, "now" [`HARNESS_EPOCH`].
    pub fn new() -> Self {
        Harness {
            store: StateStore::new(),
            index: 0,
            seed: 1,
            ids: 0,
            now: HARNESS_EPOCH,
            settings: SchedulerSettings::default(),
            plans: Vec::new(),
            evaluations: Vec::new(),
            results: Vec::new(),
            updated_evals: Vec::new(),
            created_evals: Vec::new(),
            reblocked_evals: Vec::new(),
            interference: VecDeque::new(),
            ready_nodes: Arc::default(),
        }
    }

    /// Sets the seed of the RNG handed to the next scheduler (each `process` advances it).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The state store.
    pub fn store(&self) -> &StateStore {
        &self.store
    }

    /// The latest state.
    pub fn snapshot(&self) -> Snapshot {
        self.store.snapshot()
    }

    /// Applies a command at the next index; a rejected command is an error.
    pub fn apply(&mut self, command: Command) -> Result<CommandResponse, SchedulerError> {
        self.index += 1;
        let response = self.store.apply(self.index, command);
        if let Some(error) = response.rejection() {
            return Err(SchedulerError::Planner {
                operation: "apply a command",
                reason: error.to_string(),
            });
        }
        Ok(response)
    }

    /// Registers (or re-registers) a node.
    pub fn register_node(&mut self, node: Node) -> Result<(), SchedulerError> {
        self.apply(Command::NodeRegister(NodeRegister {
            node,
            evals: Vec::new(),
        }))
        .map(|_| ())
    }

    /// A fresh evaluation id (deterministic).
    pub fn next_eval_id(&mut self) -> String {
        self.ids += 1;
        format!("00000000-0000-4000-8000-{:012x}", self.ids)
    }

    /// Registers `job` with a pending `job-register` evaluation, as the Job.Register
    /// endpoint does; returns the stored job and evaluation.
    pub fn register_job(&mut self, mut job: Job) -> Result<(Arc<Job>, Evaluation), SchedulerError> {
        // As the register endpoint does: the version is submitted now.
        job.submit_time = self.now;
        let eval = Evaluation {
            id: self.next_eval_id().into(),
            namespace: job.namespace.clone(),
            priority: job.priority,
            eval_type: job.job_type,
            triggered_by: EvalTrigger::JobRegister,
            job_id: job.id.clone(),
            status: EvalStatus::Pending,
            create_time: self.now,
            modify_time: self.now,
            ..Evaluation::default()
        };
        let (namespace, id, eval_id) = (job.namespace.clone(), job.id.clone(), eval.id.clone());
        self.apply(Command::JobRegister(JobRegister {
            job,
            eval: Some(eval),
            enforce_index: None,
            tracked_versions: 0,
        }))?;
        let snapshot = self.snapshot();
        let stored = snapshot.job_by_id(&namespace, &id).cloned();
        let eval = snapshot.eval_by_id(&eval_id).map(|e| (**e).clone());
        match (stored, eval) {
            (Some(job), Some(eval)) => Ok((job, eval)),
            _ => Err(SchedulerError::Planner {
                operation: "apply a command",
                reason: "registered job or evaluation not found".to_owned(),
            }),
        }
    }

    /// Creates a pending evaluation of `job` (a node update, an alloc failure, …).
    pub fn create_pending_eval(
        &mut self,
        job: &Job,
        triggered_by: EvalTrigger,
        node_id: Option<&NodeId>,
    ) -> Result<Evaluation, SchedulerError> {
        let eval = Evaluation {
            id: self.next_eval_id().into(),
            namespace: job.namespace.clone(),
            priority: job.priority,
            eval_type: job.job_type,
            triggered_by,
            job_id: job.id.clone(),
            job_modify_index: job.job_modify_index,
            node_id: node_id.cloned().unwrap_or_default(),
            status: EvalStatus::Pending,
            create_time: self.now,
            modify_time: self.now,
            ..Evaluation::default()
        };
        let id = eval.id.clone();
        self.apply(Command::EvalUpsert(EvalUpsert { evals: vec![eval] }))?;
        self.snapshot()
            .eval_by_id(&id)
            .map(|e| (**e).clone())
            .ok_or(SchedulerError::Planner {
                operation: "apply a command",
                reason: "evaluation not found".to_owned(),
            })
    }

    /// Writes allocations directly (no verification), e.g. to stage existing load.
    pub fn upsert_allocs(&mut self, allocs: Vec<Allocation>) -> Result<(), SchedulerError> {
        self.apply(Command::ApplyPlanResults(ApplyPlanResults {
            eval_id: Default::default(),
            allocs_updated: allocs,
            allocs_stopped: Vec::new(),
            allocs_preempted: Vec::new(),
            evals: Vec::new(),
            ineligible_nodes: Vec::new(),
            updated_at: self.now / 1_000_000_000,
            deployment: None,
            deployment_updates: Vec::new(),
        }))
        .map(|_| ())
    }

    /// Reports allocations healthy (or not) in their deployment, as client agents do once
    /// their tasks ran for the group's `min_healthy_time`.
    pub fn report_health(
        &mut self,
        ids: &[teamster_storage::model::AllocId],
        healthy: bool,
        at: i64,
    ) -> Result<(), SchedulerError> {
        let snapshot = self.snapshot();
        let allocs = ids
            .iter()
            .filter_map(|id| snapshot.alloc_by_id(id))
            .map(|a| AllocClientReport {
                id: a.id.clone(),
                client_status: a.client_status,
                client_description: a.client_description.to_string(),
                task_states: a.task_states.clone(),
                modify_time: at,
                seq: 0,
                deployment_status: Some(teamster_storage::model::AllocDeploymentStatus {
                    healthy: Some(healthy),
                    timestamp: teamster_storage::model::Timestamp::from_unix_nanos(at),
                    ..Default::default()
                }),
            })
            .collect();
        self.apply(Command::AllocClientUpdate(AllocClientUpdate {
            allocs,
            evals: Vec::new(),
        }))
        .map(|_| ())
    }

    /// Reports every running allocation of `job` healthy and evaluates the job, so its
    /// deployment ends successful (what the deployment watcher's evaluation does).
    pub fn settle_deployment(&mut self, job: &Job) -> Result<(), SchedulerError> {
        let ids: Vec<_> = self
            .running_allocs(job)
            .iter()
            .map(|a| a.id.clone())
            .collect();
        let now = self.now;
        self.report_health(&ids, true, now)?;
        let eval = self.create_pending_eval(job, EvalTrigger::DeploymentWatcher, None)?;
        self.process(&eval)
    }

    /// Reports a client status for allocations, as client agents do.
    pub fn client_update(
        &mut self,
        ids: &[teamster_storage::model::AllocId],
        status: ClientStatus,
        at: i64,
    ) -> Result<(), SchedulerError> {
        let allocs = ids
            .iter()
            .map(|id| AllocClientReport {
                id: id.clone(),
                client_status: status,
                client_description: String::new(),
                task_states: Default::default(),
                modify_time: at,
                seq: 0,
                deployment_status: None,
            })
            .collect();
        self.apply(Command::AllocClientUpdate(AllocClientUpdate {
            allocs,
            evals: Vec::new(),
        }))
        .map(|_| ())
    }

    /// Stages a conflict: `f` sees the next plan submitted (queued interferences apply to
    /// one plan each, in order) and the commands it returns are applied before the plan is
    /// verified, as another worker's commit would be.
    pub fn interfere_before_next_plan(
        &mut self,
        f: impl FnOnce(&Plan, &Snapshot) -> Vec<Command> + Send + 'static,
    ) {
        self.interference.push_back(Box::new(f));
    }

    /// Runs the scheduler for `eval`'s type on the latest state, with this harness as its
    /// planner, a seeded RNG and `now`.
    pub fn process(&mut self, eval: &Evaluation) -> Result<(), SchedulerError> {
        let snapshot = self.snapshot();
        let mut rng = StdRng::seed_from_u64(self.seed);
        self.seed = self.seed.wrapping_add(1);
        let cache = self.ready_nodes.clone();
        let env = SchedulerEnv {
            now: self.now,
            rng: &mut rng,
            settings: self.settings.clone(),
            ready_nodes: Some(&cache),
        };
        let mut scheduler = new_scheduler(eval.eval_type, snapshot, self, env)?;
        scheduler.process(eval)
    }

    /// The job's allocations that are not terminal.
    pub fn running_allocs(&self, job: &Job) -> Vec<Arc<Allocation>> {
        self.snapshot()
            .allocs_by_job(&job.namespace, &job.id)
            .filter(|a| !a.terminal_status())
            .cloned()
            .collect()
    }

    fn upsert_eval(
        &mut self,
        eval: Evaluation,
        operation: &'static str,
    ) -> Result<(), SchedulerError> {
        self.index += 1;
        let response = self.store.apply(
            self.index,
            Command::EvalUpsert(EvalUpsert { evals: vec![eval] }),
        );
        match response.rejection() {
            Some(error) => Err(SchedulerError::Planner {
                operation,
                reason: error.to_string(),
            }),
            None => Ok(()),
        }
    }
}

impl Planner for Harness {
    fn submit_plan(
        &mut self,
        plan: Plan,
    ) -> Result<(PlanResult, Option<Snapshot>), SchedulerError> {
        if let Some(interference) = self.interference.pop_front() {
            for command in interference(&plan, &self.snapshot()) {
                self.apply(command)?;
            }
        }
        let snapshot = self.snapshot();
        let evaluation = evaluate_plan(&snapshot, &PlanOverlay::new(), &plan);
        let mut result = evaluation.plan_result();
        if !evaluation.is_no_op() {
            self.index += 1;
            let response = self.store.apply(
                self.index,
                Command::ApplyPlanResults(evaluation.apply_command(self.now)),
            );
            if let Some(error) = response.rejection() {
                return Err(SchedulerError::Planner {
                    operation: "submit plan",
                    reason: error.to_string(),
                });
            }
            result.alloc_index = self.index;
        }
        let fresh = if evaluation.is_partial() {
            result.refresh_index = evaluation.refresh_index_floor.max(self.index);
            Some(self.snapshot())
        } else {
            None
        };
        self.plans.push(plan);
        self.evaluations.push(evaluation);
        self.results.push(result.clone());
        Ok((result, fresh))
    }

    fn update_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        self.updated_evals.push(eval.clone());
        self.upsert_eval(eval, "update eval")
    }

    fn create_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        self.created_evals.push(eval.clone());
        self.upsert_eval(eval, "create eval")
    }

    fn reblock_eval(&mut self, eval: Evaluation) -> Result<(), SchedulerError> {
        self.reblocked_evals.push(eval.clone());
        self.upsert_eval(eval, "reblock eval")
    }
}

/// A UUID-shaped id that is a pure function of `kind` and `n`.
pub fn fixture_uuid(kind: u32, n: u64) -> String {
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        kind,
        (n >> 48) & 0xffff,
        (n >> 36) & 0xfff,
        (n >> 24) & 0xfff,
        n & 0xff_ffff_ffff
    )
}

/// A ready node `n` in `dc1` with 4000 MHz, 8192 MB, 100 GB, Linux and the `mock` driver.
pub fn mock_node(n: u64) -> Node {
    let mut node = Node {
        id: NodeId::new(fixture_uuid(1, n)),
        name: format!("node-{n}"),
        datacenter: "dc1".into(),
        status: teamster_storage::model::NodeStatus::Ready,
        node_resources: NodeResources::default(),
        ..Node::default()
    };
    node.node_resources.cpu.cpu_shares = 4000;
    node.node_resources.memory.memory_mb = 8192;
    node.node_resources.disk.disk_mb = 100 * 1024;
    node.attributes.insert("kernel.name".into(), "linux".into());
    node.attributes.insert("driver.mock".into(), "1".into());
    node.attributes
        .insert("unique.hostname".into(), format!("node-{n}"));
    node.canonicalize();
    node
}

/// A canonical service job `id` with one group `web` of `count` allocations of one `mock`
/// task using 500 MHz and 256 MB.
pub fn mock_job(id: &str, count: u32) -> Job {
    let mut job = Job {
        id: JobId::new(id),
        datacenters: vec!["dc1".into()],
        task_groups: vec![TaskGroup {
            name: "web".into(),
            count,
            tasks: vec![Task {
                name: "web".into(),
                driver: "mock".into(),
                resources: Resources {
                    cpu: 500,
                    memory_mb: 256,
                    disk_mb: 0,
                    memory_max_mb: 0,
                    cores: 0,
                },
                ..Task::default()
            }],
            ..TaskGroup::default()
        }]
        .into(),
        ..Job::default()
    };
    job.canonicalize();
    job
}

/// [`mock_job`] as a batch job.
pub fn mock_batch_job(id: &str, count: u32) -> Job {
    let mut job = mock_job(id, count);
    job.retype(JobType::Batch);
    job
}

/// [`mock_job`] as a system job (count 1).
pub fn mock_system_job(id: &str) -> Job {
    let mut job = mock_job(id, 1);
    job.retype(JobType::System);
    job
}
