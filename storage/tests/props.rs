//! Property tests of the state store over random command sequences (valid and invalid):
//! determinism, snapshot → restore fidelity, and snapshot isolation.

mod common;

use common::*;
use proptest::prelude::*;
use teamster_storage::fsm::{
    AllocClientReport, AllocClientUpdate, ApplyPlanResults, Command, CommandResponse, EvalDelete,
    EvalUpsert, JobDeregister, JobRegister, NodeDeregister, NodeUpdateEligibility,
    NodeUpdateStatus,
};
use teamster_storage::model::{
    AllocDeploymentStatus, AllocStop, ClientStatus, DesiredStatus, EvalStatus, NodeStatus,
    SchedulingEligibility,
};
use teamster_storage::state::{StateEvent, StateStore};

#[derive(Debug, Clone)]
enum Op {
    RegisterNode(u64, NodeStatus),
    NodeStatus(u64, NodeStatus),
    NodeEligibility(u64, bool),
    DeregisterNode(u64),
    RegisterJob {
        job: u64,
        count: u32,
        eval: Option<u64>,
        enforce: Option<u64>,
    },
    DeregisterJob {
        job: u64,
        purge: bool,
        eval: Option<u64>,
    },
    UpsertEval {
        eval: u64,
        job: u64,
        status: EvalStatus,
        queued: u64,
    },
    Place {
        eval: Option<u64>,
        job: u64,
        version: u64,
        allocs: Vec<(u64, u64)>,
        stops: Vec<u64>,
    },
    /// A client report: the allocation, its status, and a health verdict if any.
    Client(u64, ClientStatus, Option<bool>),
    Delete {
        evals: Vec<u64>,
        allocs: Vec<u64>,
    },
    Batch(Vec<Op>),
}

fn node_status() -> impl Strategy<Value = NodeStatus> {
    prop_oneof![
        Just(NodeStatus::Initializing),
        Just(NodeStatus::Ready),
        Just(NodeStatus::Down),
        Just(NodeStatus::Disconnected)
    ]
}

fn eval_status() -> impl Strategy<Value = EvalStatus> {
    prop_oneof![
        Just(EvalStatus::Pending),
        Just(EvalStatus::Blocked),
        Just(EvalStatus::Complete),
        Just(EvalStatus::Failed),
        Just(EvalStatus::Canceled)
    ]
}

fn client_status() -> impl Strategy<Value = ClientStatus> {
    prop_oneof![
        Just(ClientStatus::Pending),
        Just(ClientStatus::Running),
        Just(ClientStatus::Complete),
        Just(ClientStatus::Failed),
        Just(ClientStatus::Lost),
    ]
}

fn simple_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..4u64, prop_oneof![3 => Just(NodeStatus::Ready), 1 => node_status()])
            .prop_map(|(n, s)| Op::RegisterNode(n, s)),
        1 => (0..5u64, node_status()).prop_map(|(n, s)| Op::NodeStatus(n, s)),
        1 => (0..5u64, any::<bool>()).prop_map(|(n, e)| Op::NodeEligibility(n, e)),
        1 => (0..5u64).prop_map(Op::DeregisterNode),
        2 => (0..3u64, 0..4u32, proptest::option::of(0..6u64), proptest::option::weighted(0.2, 0..12u64))
            .prop_map(|(job, count, eval, enforce)| Op::RegisterJob { job, count, eval, enforce }),
        1 => (0..4u64, any::<bool>(), proptest::option::of(0..6u64))
            .prop_map(|(job, purge, eval)| Op::DeregisterJob { job, purge, eval }),
        1 => (0..6u64, 0..3u64, eval_status(), 0..3u64)
            .prop_map(|(eval, job, status, queued)| Op::UpsertEval { eval, job, status, queued }),
        4 => (
            prop_oneof![3 => Just(None), 1 => (0..6u64).prop_map(Some)],
            0..3u64,
            prop_oneof![3 => Just(0u64), 1 => 1..3u64],
            proptest::collection::vec((0..12u64, 0..3u64), 1..4),
            prop_oneof![3 => Just(vec![]), 1 => proptest::collection::vec(0..12u64, 1..2)]
        )
            .prop_map(|(eval, job, version, allocs, stops)| Op::Place { eval, job, version, allocs, stops }),
        3 => (0..12u64, client_status(), proptest::option::weighted(0.3, any::<bool>()))
            .prop_map(|(a, s, h)| Op::Client(a, s, h)),
        1 => (proptest::collection::vec(0..6u64, 0..3), proptest::collection::vec(0..12u64, 0..3))
            .prop_map(|(evals, allocs)| Op::Delete { evals, allocs }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => simple_op(),
        1 => proptest::collection::vec(simple_op(), 1..4).prop_map(Op::Batch),
    ]
}

/// A cluster to start from (three ready nodes, three jobs with pending evaluations), then
/// random operations, so that placements and client updates usually find what they need.
fn ops() -> impl Strategy<Value = Vec<Op>> {
    let mut setup: Vec<Op> = (0..3)
        .map(|n| Op::RegisterNode(n, NodeStatus::Ready))
        .collect();
    setup.extend((0..3).map(|j| Op::RegisterJob {
        job: j,
        count: 2,
        eval: Some(j),
        enforce: None,
    }));
    proptest::collection::vec(op(), 1..40).prop_map(move |random| {
        let mut all = setup.clone();
        all.extend(random);
        all
    })
}

fn job_name(j: u64) -> String {
    format!("job-{j}")
}

/// Turns an op into a command without looking at any state, so both stores get the same.
fn command(op: &Op) -> Command {
    match op {
        Op::RegisterNode(n, status) => {
            let mut node = node(*n);
            node.status = *status;
            register_node(&node)
        }
        Op::NodeStatus(n, status) => Command::NodeUpdateStatus(NodeUpdateStatus {
            node_id: node_id(*n),
            status: *status,
            updated_at: 1_700_000_000 + *n as i64,
            evals: vec![],
        }),
        Op::NodeEligibility(n, eligible) => Command::NodeUpdateEligibility(NodeUpdateEligibility {
            node_id: node_id(*n),
            eligibility: if *eligible {
                SchedulingEligibility::Eligible
            } else {
                SchedulingEligibility::Ineligible
            },
            updated_at: 1_700_000_000,
            evals: vec![],
        }),
        Op::DeregisterNode(n) => Command::NodeDeregister(NodeDeregister {
            node_ids: vec![node_id(*n)],
        }),
        Op::RegisterJob {
            job: j,
            count,
            eval,
            enforce,
        } => {
            let job = job(&job_name(*j), *count);
            Command::JobRegister(JobRegister {
                eval: eval.map(|e| eval_for(&job, e)),
                job,
                enforce_index: *enforce,
                tracked_versions: 0,
            })
        }
        Op::DeregisterJob {
            job: j,
            purge,
            eval,
        } => {
            let job = job(&job_name(*j), 1);
            Command::JobDeregister(JobDeregister {
                namespace: job.namespace.clone(),
                job_id: job.id.clone(),
                purge: *purge,
                eval: eval.map(|e| eval_for(&job, e)),
                submit_time: 1_700_000_000_000_000_000,
                tracked_versions: 0,
            })
        }
        Op::UpsertEval {
            eval,
            job: j,
            status,
            queued,
        } => {
            let job = job(&job_name(*j), 1);
            let mut e = eval_for(&job, *eval);
            e.status = *status;
            e.queued_allocations.insert("web".into(), *queued);
            Command::EvalUpsert(EvalUpsert { evals: vec![e] })
        }
        Op::Place {
            eval,
            job: j,
            version,
            allocs,
            stops,
        } => {
            let mut job = job(&job_name(*j), 1);
            job.version = *version;
            let eval = eval.map(eval_id).unwrap_or_default();
            Command::ApplyPlanResults(ApplyPlanResults {
                eval_id: eval.clone(),
                allocs_updated: allocs
                    .iter()
                    .map(|(a, n)| {
                        let mut alloc = alloc(*a, &job, &node_id(*n), &eval, *a as u32);
                        // Half of them belong to the job's deployment.
                        if a % 2 == 0 {
                            alloc.deployment_id = format!("dep-{j}").as_str().into();
                        }
                        alloc
                    })
                    .collect(),
                allocs_stopped: stops
                    .iter()
                    .map(|a| AllocStop {
                        id: alloc_id(*a),
                        desired_status: DesiredStatus::Stop,
                        desired_description: "scaled down".into(),
                        client_status: None,
                        followup_eval_id: Default::default(),
                        modify_time: 5,
                        preempted_by_allocation: Default::default(),
                    })
                    .collect(),
                allocs_preempted: vec![],
                evals: vec![],
                ineligible_nodes: vec![],
                updated_at: 1_700_000_000,
                deployment: None,
                deployment_updates: vec![],
            })
        }
        Op::Client(a, status, health) => Command::AllocClientUpdate(AllocClientUpdate {
            allocs: vec![AllocClientReport {
                id: alloc_id(*a),
                client_status: *status,
                client_description: status.as_str().to_owned(),
                task_states: Default::default(),
                modify_time: 7,
                seq: 0,
                deployment_status: health.map(|healthy| AllocDeploymentStatus {
                    healthy: Some(healthy),
                    ..AllocDeploymentStatus::default()
                }),
            }],
            evals: vec![],
        }),
        Op::Delete { evals, allocs } => Command::EvalDelete(EvalDelete {
            evals: evals.iter().map(|e| eval_id(*e)).collect(),
            allocs: allocs.iter().map(|a| alloc_id(*a)).collect(),
        }),
        Op::Batch(ops) => Command::Batch(ops.iter().map(command).collect()),
    }
}

/// Applies ops at indexes 1.. (every fifth index is a blank entry, as raft writes them).
fn run(store: &StateStore, ops: &[Op], first_index: u64) -> Vec<CommandResponse> {
    let mut responses = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let index = first_index + 2 * i as u64;
        if i % 5 == 4 {
            store.advance_index(index);
        }
        responses.push(store.apply(index + 1, command(op)));
    }
    responses
}

fn drain(sub: &mut teamster_storage::state::Subscription) -> Vec<StateEvent> {
    let mut events = Vec::new();
    while let Ok(Some(event)) = sub.try_recv() {
        events.push(event);
    }
    events
}

/// Each node's usage as the state store keeps it equals the sum over its non-terminal
/// allocations.
fn usage_matches_the_allocations(store: &StateStore) -> Result<(), TestCaseError> {
    use teamster_storage::model::Resources;
    let snap = store.snapshot();
    let mut nodes: std::collections::BTreeSet<String> =
        snap.nodes().map(|n| n.id.to_string()).collect();
    nodes.extend(snap.allocs().map(|a| a.node_id.to_string()));
    for node in nodes {
        let summed = snap
            .allocs_by_node(&node)
            .filter(|a| !a.terminal_status())
            .fold(Resources::ZERO, |acc, a| acc.add(&a.resources));
        prop_assert_eq!(snap.node_usage(&node), summed, "node {}", node);
    }
    Ok(())
}

/// Each deployment's unhealthy allocations as the state store keeps them are exactly its
/// allocations that count as unhealthy.
fn unhealthy_matches_the_allocations(store: &StateStore) -> Result<(), TestCaseError> {
    let snap = store.snapshot();
    let deployments: std::collections::BTreeSet<String> = snap
        .allocs()
        .filter(|a| !a.deployment_id.is_empty())
        .map(|a| a.deployment_id.to_string())
        .collect();
    for d in deployments {
        let kept: Vec<String> = snap
            .unhealthy_allocs_by_deployment(&d)
            .map(|a| a.id.to_string())
            .collect();
        let walked: Vec<String> = snap
            .allocs_by_deployment(&d)
            .filter(|a| a.counts_unhealthy())
            .map(|a| a.id.to_string())
            .collect();
        prop_assert_eq!(kept, walked, "deployment {}", d);
    }
    Ok(())
}

fn image(store: &StateStore) -> Vec<u8> {
    store.snapshot().encode_image().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn the_same_commands_give_the_same_state(ops in ops()) {
        let (a, b) = (StateStore::new(), StateStore::new());
        let (mut sub_a, mut sub_b) = (a.subscribe(), b.subscribe());
        let ra = run(&a, &ops, 1);
        let rb = run(&b, &ops, 1);
        prop_assert_eq!(ra, rb);
        prop_assert_eq!(image(&a), image(&b));
        prop_assert_eq!(drain(&mut sub_a), drain(&mut sub_b));
        usage_matches_the_allocations(&a)?;
        unhealthy_matches_the_allocations(&a)?;
    }

    #[test]
    fn a_batch_gives_what_its_commands_give_one_by_one(
        ops in ops(),
        cuts in proptest::collection::vec(1usize..12, 1..8),
    ) {
        // The same commands cut into batches (applied as one command, owned and shared, as
        // the raft log hands them over) and applied one at a time at the batch's index.
        let (batched, shared, single) = (StateStore::new(), StateStore::new(), StateStore::new());
        let (mut sub_b, mut sub_s) = (batched.subscribe(), single.subscribe());
        let mut rest: &[Op] = &ops;
        for (index, cut) in (1..).zip(cuts.iter().cycle()) {
            if rest.is_empty() {
                break;
            }
            let (chunk, tail) = rest.split_at((*cut).min(rest.len()));
            rest = tail;
            let commands: Vec<Command> = chunk.iter().map(command).collect();
            let batch = Command::Batch(commands.clone());
            let one_by_one: Vec<CommandResponse> =
                commands.into_iter().map(|c| single.apply(index, c)).collect();
            prop_assert_eq!(&shared.apply_shared(index, &batch), &CommandResponse::Batch(one_by_one.clone()));
            prop_assert_eq!(batched.apply(index, batch), CommandResponse::Batch(one_by_one));
        }
        prop_assert_eq!(image(&batched), image(&single));
        prop_assert_eq!(image(&shared), image(&single));
        prop_assert_eq!(drain(&mut sub_b), drain(&mut sub_s));
        usage_matches_the_allocations(&batched)?;
        unhealthy_matches_the_allocations(&batched)?;
    }

    #[test]
    fn snapshot_then_restore_gives_the_same_state(
        ops in ops(),
        split in 0usize..46,
    ) {
        let split = split.min(ops.len());
        let (head, tail) = ops.split_at(split);
        let original = StateStore::new();
        run(&original, head, 1);
        let bytes = image(&original);

        let restored = StateStore::new();
        restored.apply(1, register_node(&node(77)));
        restored.restore_image(&bytes).unwrap();
        prop_assert_eq!(restored.latest_index(), original.latest_index());
        prop_assert_eq!(image(&restored), bytes);

        // Both keep evolving identically from there.
        let next = original.latest_index() + 1;
        let ra = run(&original, tail, next);
        let rb = run(&restored, tail, next);
        prop_assert_eq!(ra, rb);
        prop_assert_eq!(image(&original), image(&restored));
        usage_matches_the_allocations(&restored)?;
        unhealthy_matches_the_allocations(&restored)?;
    }

    #[test]
    fn a_held_snapshot_never_sees_later_writes(
        ops in ops(),
        split in 0usize..46,
    ) {
        let split = split.min(ops.len());
        let (head, tail) = ops.split_at(split);
        let store = StateStore::new();
        run(&store, head, 1);
        let held = store.snapshot();
        let at_split = held.encode_image().unwrap();
        let counts = (held.alloc_count(), held.eval_count(), held.node_count(), held.latest_index());
        run(&store, tail, store.latest_index() + 1);
        prop_assert_eq!(held.encode_image().unwrap(), at_split);
        prop_assert_eq!(
            (held.alloc_count(), held.eval_count(), held.node_count(), held.latest_index()),
            counts
        );
    }
}
