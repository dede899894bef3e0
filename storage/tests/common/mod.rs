//! Fixtures shared by the integration tests and the benches: deterministic ids and
//! canonical jobs, nodes, evaluations and allocations.
#![allow(dead_code)]

use teamster_storage::fsm::{
    AllocClientReport, AllocClientUpdate, ApplyPlanResults, Command, JobRegister, NodeRegister,
};
use teamster_storage::model::{
    AllocId, Allocation, ClientStatus, EvalId, EvalStatus, EvalTrigger, Evaluation, Job, JobId,
    Node, NodeId, NodeResources, NodeStatus, Resources, Task, TaskGroup,
};

/// A UUID-shaped id that is a pure function of `kind` and `n`.
pub fn uuid(kind: u32, n: u64) -> String {
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        kind,
        (n >> 48) & 0xffff,
        (n >> 36) & 0xfff,
        (n >> 24) & 0xfff,
        n & 0xff_ffff_ffff
    )
}

pub fn node_id(n: u64) -> NodeId {
    NodeId::new(uuid(1, n))
}

pub fn eval_id(n: u64) -> EvalId {
    EvalId::new(uuid(2, n))
}

pub fn alloc_id(n: u64) -> AllocId {
    AllocId::new(uuid(3, n))
}

/// A canonical service job with one task group `web` of `count` allocations.
pub fn job(id: &str, count: u32) -> Job {
    let mut job = Job {
        id: JobId::new(id),
        datacenters: vec!["dc1".into()],
        task_groups: vec![TaskGroup {
            name: "web".into(),
            count,
            tasks: vec![Task {
                name: "server".into(),
                driver: "mock".into(),
                resources: Resources {
                    cpu: 100,
                    memory_mb: 64,
                    disk_mb: 0,
                },
                ..Task::default()
            }],
            ..TaskGroup::default()
        }],
        ..Job::default()
    };
    job.canonicalize();
    job.validate().expect("fixture job is valid");
    job
}

/// A ready node in dc1 with room for many allocations.
pub fn node(n: u64) -> Node {
    let mut node = Node {
        id: node_id(n),
        name: format!("node-{n}"),
        datacenter: "dc1".into(),
        status: NodeStatus::Ready,
        node_resources: NodeResources::default(),
        ..Node::default()
    };
    node.node_resources.cpu.cpu_shares = 1_000_000;
    node.node_resources.memory.memory_mb = 1_000_000;
    node.attributes.insert("kernel.name".into(), "linux".into());
    node.attributes
        .insert("unique.hostname".into(), format!("host-{n}"));
    node.canonicalize();
    node
}

/// A pending job-register evaluation for `job`.
pub fn eval_for(job: &Job, n: u64) -> Evaluation {
    Evaluation {
        id: eval_id(n),
        namespace: job.namespace.clone(),
        priority: job.priority,
        eval_type: job.job_type,
        triggered_by: EvalTrigger::JobRegister,
        job_id: job.id.clone(),
        status: EvalStatus::Pending,
        create_time: 1_700_000_000_000_000_000 + n as i64,
        modify_time: 1_700_000_000_000_000_000 + n as i64,
        ..Evaluation::default()
    }
}

/// A new allocation of `job`'s group `web` on `node`.
pub fn alloc(n: u64, job: &Job, node: &NodeId, eval: &EvalId, index: u32) -> Allocation {
    Allocation {
        id: alloc_id(n),
        namespace: job.namespace.clone(),
        eval_id: eval.clone(),
        name: format!("{}.web[{index}]", job.id),
        node_id: node.clone(),
        job_id: job.id.clone(),
        job_version: job.version,
        task_group: "web".into(),
        resources: job.task_groups[0].combined_resources(),
        create_time: 1_700_000_000_000_000_000 + n as i64,
        modify_time: 1_700_000_000_000_000_000 + n as i64,
        ..Allocation::default()
    }
}

pub fn register(job: &Job, eval: Option<Evaluation>) -> Command {
    Command::JobRegister(JobRegister {
        job: job.clone(),
        eval,
        enforce_index: None,
    })
}

pub fn register_node(node: &Node) -> Command {
    Command::NodeRegister(NodeRegister {
        node: node.clone(),
        evals: Vec::new(),
    })
}

pub fn place(eval: &EvalId, allocs: Vec<Allocation>) -> Command {
    Command::ApplyPlanResults(ApplyPlanResults {
        eval_id: eval.clone(),
        allocs_updated: allocs,
        allocs_stopped: Vec::new(),
        allocs_preempted: Vec::new(),
        evals: Vec::new(),
        ineligible_nodes: Vec::new(),
        updated_at: 1_700_000_000,
    })
}

pub fn client_update(id: &AllocId, status: ClientStatus) -> Command {
    Command::AllocClientUpdate(AllocClientUpdate {
        allocs: vec![AllocClientReport {
            id: id.clone(),
            client_status: status,
            client_description: String::new(),
            task_states: Default::default(),
            modify_time: 1_700_000_001_000_000_000,
        }],
        evals: Vec::new(),
    })
}
