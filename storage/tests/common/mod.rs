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

/// splitmix64: a bijection on u64 that scatters consecutive inputs.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A UUID-v4-shaped id that is a pure function of `kind` and `n`: distinct for distinct
/// inputs, and scattered like random UUIDs so tree shapes match production.
pub fn uuid(kind: u32, n: u64) -> String {
    let hi = mix(n ^ (u64::from(kind) << 56));
    let lo = mix(hi);
    format!(
        "{:08x}-{:04x}-4{:03x}-{:x}{:03x}-{:012x}",
        hi >> 32,
        (hi >> 16) & 0xffff,
        hi & 0xfff,
        8 + (lo >> 62),
        (lo >> 48) & 0xfff,
        lo & 0xffff_ffff_ffff
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
        tracked_versions: 0,
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
        deployment: None,
        deployment_updates: Vec::new(),
    })
}

pub fn client_update(id: &AllocId, status: ClientStatus) -> Command {
    client_update_seq(id, status, 0)
}

/// A client's report carrying its sequence number `seq` for the allocation.
pub fn client_update_seq(id: &AllocId, status: ClientStatus, seq: u32) -> Command {
    Command::AllocClientUpdate(AllocClientUpdate {
        allocs: vec![AllocClientReport {
            id: id.clone(),
            client_status: status,
            client_description: String::new(),
            task_states: Default::default(),
            modify_time: 1_700_000_001_000_000_000,
            seq,
            deployment_status: None,
        }],
        evals: Vec::new(),
    })
}

/// Nodes, jobs and allocations of the million-allocation store (C1M's shape: 1 000 jobs of
/// 1 000 allocations each, over 1 000 nodes).
pub const C1M_NODES: u64 = 1_000;
/// See [`C1M_NODES`].
pub const C1M_JOBS: u64 = 1_000;
/// See [`C1M_NODES`].
pub const C1M_ALLOCS_PER_JOB: u64 = 1_000;

/// Builds the million-allocation store through the real apply path (`ApplyPlanResults` of
/// 1 000 allocations per job); returns it and the next free raft index.
pub fn million_allocations() -> (teamster_storage::state::StateStore, u64) {
    let store = teamster_storage::state::StateStore::new();
    let mut index = 1;
    for n in 0..C1M_NODES {
        store.apply(index, register_node(&node(n)));
        index += 1;
    }
    for j in 0..C1M_JOBS {
        let job = job(&format!("job-{j}"), C1M_ALLOCS_PER_JOB as u32);
        store.apply(index, register(&job, Some(eval_for(&job, j))));
        index += 1;
        let allocs = (0..C1M_ALLOCS_PER_JOB)
            .map(|i| {
                let n = j * C1M_ALLOCS_PER_JOB + i;
                alloc(n, &job, &node_id(n % C1M_NODES), &eval_id(j), i as u32)
            })
            .collect();
        let resp = store.apply(index, place(&eval_id(j), allocs));
        assert!(resp.rejection().is_none(), "{resp:?}");
        index += 1;
    }
    (store, index)
}

/// The resident set size of this process, from `/proc/self/statm`.
pub fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("statm resident field");
    pages * 4096
}

/// A job read from Nomad's JSON and canonicalized, as registration reads it.
pub fn job_json(value: serde_json::Value) -> Job {
    let mut job: Job = serde_json::from_value(value).expect("a job");
    job.canonicalize();
    job
}

/// What validation says of `job`: its errors, or nothing when it passes.
pub fn validation_errors(job: &Job) -> String {
    job.validate()
        .map(|()| String::new())
        .unwrap_or_else(|e| e.to_string())
}
