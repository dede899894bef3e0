//! The core's rules on explicit instants, and the shell's round trip on paused time with an
//! in-memory provider and state store.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use teamster_storage::model::{EvalId, NodeId, NodeStatus};
use tokio::time::Instant;

use super::core::{Action, AutoscalerCore, BlockedView, NodeView, Observation, StopReason};
use super::provider::Instance;
use crate::server::config::AutoscalerConfig;

const PREFIX: &str = "teamster-auto-abcd1234-";

fn cfg() -> AutoscalerConfig {
    AutoscalerConfig {
        enabled: true,
        node_class: "auto".into(),
        min_nodes: 0,
        max_nodes: 2,
        blocked_for: secs(5),
        idle_timeout: secs(30),
        register_timeout: secs(60),
        interval: secs(1),
        backoff: secs(2),
        max_backoff: secs(16),
        ..AutoscalerConfig::default()
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn blocked(id: &str) -> BlockedView {
    BlockedView {
        id: EvalId::new(id),
        class_eligibility: BTreeMap::new(),
        escaped: false,
    }
}

fn node(name: &str, status: NodeStatus, busy: bool) -> NodeView {
    NodeView {
        id: NodeId::new(format!("node-{name}")),
        name: name.into(),
        status,
        computed_class: "v1:42".into(),
        busy,
    }
}

fn inst(id: &str, name: &str) -> Instance {
    Instance {
        id: id.into(),
        name: name.into(),
        running: true,
    }
}

/// A core, a seeded rng and the start instant.
struct Fixture {
    core: AutoscalerCore,
    rng: StdRng,
    t0: Instant,
}

impl Fixture {
    fn new(cfg: AutoscalerConfig) -> Fixture {
        Fixture {
            core: AutoscalerCore::new(cfg, PREFIX.into()),
            rng: StdRng::seed_from_u64(7),
            t0: Instant::now(),
        }
    }

    fn at(&self, s: u64) -> Instant {
        self.t0 + secs(s)
    }

    fn step(&mut self, s: u64, obs: &Observation) -> Vec<Action> {
        let now = self.at(s);
        self.core.step(obs, now, &mut self.rng)
    }

    /// Steps at `s`, expects one `Create`, reports each name created as instance
    /// `i<name>`; the names.
    fn create(&mut self, s: u64, obs: &Observation) -> Vec<String> {
        let actions = self.step(s, obs);
        let [Action::Create { names }] = actions.as_slice() else {
            panic!("expected one create at {s}s, got {actions:?}");
        };
        let names = names.clone();
        for name in &names {
            self.core
                .created(inst(&format!("i{name}"), name), self.at(s));
        }
        names
    }
}

fn creates(actions: &[Action]) -> usize {
    actions
        .iter()
        .map(|a| match a {
            Action::Create { names } => names.len(),
            _ => 0,
        })
        .sum()
}

fn listed(names: &[&str]) -> Option<Vec<Instance>> {
    Some(names.iter().map(|n| inst(&format!("i{n}"), n)).collect())
}

#[test]
fn a_node_is_created_only_once_blocked_evals_persist_and_never_above_the_quota() {
    let mut f = Fixture::new(cfg());
    let demand = Observation {
        instances: Some(Vec::new()),
        blocked: vec![blocked("e1")],
        ..Observation::default()
    };
    // Not before the evaluation has been blocked for `blocked_for`.
    for s in [0, 2, 4] {
        assert_eq!(creates(&f.step(s, &demand)), 0, "at {s}s");
    }
    let first = f.create(5, &demand);
    assert_eq!(first.len(), 1);
    assert!(first[0].starts_with(PREFIX), "{first:?}");
    let a = first[0].as_str();
    // Starting (listed, no node yet): nothing more is asked for, however long the demand.
    let starting = Observation {
        instances: listed(&[a]),
        blocked: vec![blocked("e1")],
        ..Observation::default()
    };
    assert_eq!(creates(&f.step(7, &starting)), 0);
    // Ready at 9 s: its capacity gets `blocked_for` to be used before another is created.
    let ready = Observation {
        instances: listed(&[a]),
        nodes: vec![node(a, NodeStatus::Ready, true)],
        blocked: vec![blocked("e1")],
    };
    assert_eq!(creates(&f.step(9, &ready)), 0);
    assert_eq!(creates(&f.step(13, &ready)), 0);
    let second = f.create(14, &ready);
    let b = second[0].as_str();
    assert_ne!(a, b);
    assert_eq!(f.core.stats().owned, 2);
    // At the quota: nothing more, whatever the demand.
    let both = Observation {
        instances: listed(&[a, b]),
        nodes: vec![
            node(a, NodeStatus::Ready, true),
            node(b, NodeStatus::Ready, true),
        ],
        blocked: vec![blocked("e1"), blocked("e2")],
    };
    for s in [15, 30, 100] {
        assert_eq!(creates(&f.step(s, &both)), 0, "at {s}s");
    }
}

#[test]
fn creates_in_flight_count_against_the_quota_and_min_nodes_need_no_demand() {
    let mut f = Fixture::new(AutoscalerConfig {
        min_nodes: 2,
        max_nodes: 3,
        ..cfg()
    });
    let empty = Observation {
        instances: Some(Vec::new()),
        ..Observation::default()
    };
    let actions = f.step(0, &empty);
    assert_eq!(creates(&actions), 2, "{actions:?}");
    // Not reported yet: still counted.
    assert_eq!(creates(&f.step(1, &empty)), 0);
    assert_eq!(f.core.stats().owned, 2);
}

#[test]
fn an_idle_node_is_cordoned_then_stopped_but_never_below_min_nodes() {
    let mut f = Fixture::new(AutoscalerConfig {
        min_nodes: 1,
        ..cfg()
    });
    let names = f.create(
        0,
        &Observation {
            instances: Some(Vec::new()),
            ..Observation::default()
        },
    );
    let a = names[0].clone();
    let demand = |busy_a: bool, nodes_b: Option<(&str, bool)>| {
        let mut nodes = vec![node(&a, NodeStatus::Ready, busy_a)];
        let mut inst = vec![a.as_str()];
        if let Some((b, busy)) = nodes_b {
            nodes.push(node(b, NodeStatus::Ready, busy));
            inst.push(b);
        }
        Observation {
            instances: listed(&inst),
            nodes,
            blocked: vec![blocked("e1")],
        }
    };
    f.step(1, &demand(true, None));
    let names = f.create(6, &demand(true, None));
    let b = names[0].clone();
    // Both run work until 10 s; then both are idle.
    f.step(10, &demand(true, Some((&b, true))));
    let idle = Observation {
        instances: listed(&[&a, &b]),
        nodes: vec![
            node(&a, NodeStatus::Ready, false),
            node(&b, NodeStatus::Ready, false),
        ],
        blocked: Vec::new(),
    };
    assert!(f.step(11, &idle).is_empty());
    // Busy again for a moment at 20 s: the idle clock restarts.
    f.step(20, &demand(true, Some((&b, true))));
    assert!(f.step(21, &idle).is_empty());
    assert!(f.step(50, &idle).is_empty(), "idle for 29 s only");
    // Idle for 30 s: one is cordoned (min_nodes keeps the other).
    let actions = f.step(51, &idle);
    let [Action::Cordon {
        instance,
        node: cordoned,
    }] = actions.as_slice()
    else {
        panic!("expected one cordon, got {actions:?}");
    };
    let instance = instance.clone();
    assert_eq!(
        cordoned.as_str(),
        format!("node-{}", instance.trim_start_matches('i'))
    );
    f.core.cordoned(&instance, true, f.at(51));
    // Stopped once it stayed idle for one more interval; never the last one.
    assert!(f.step(51, &idle).is_empty());
    let actions = f.step(52, &idle);
    let [Action::Stop {
        instance: stopped,
        reason: StopReason::Idle,
        retry: false,
        node: Some(_),
        ..
    }] = actions.as_slice()
    else {
        panic!("expected one idle stop, got {actions:?}");
    };
    assert_eq!(*stopped, instance);
    f.core.stopped(&instance);
    let left = if instance == format!("i{a}") { &b } else { &a };
    let one = Observation {
        instances: listed(&[left]),
        nodes: vec![node(left, NodeStatus::Ready, false)],
        blocked: Vec::new(),
    };
    for s in [60, 200, 1000] {
        assert!(f.step(s, &one).is_empty(), "at {s}s");
    }
    assert_eq!(f.core.stats().owned, 1);
}

#[test]
fn a_cordoned_node_that_got_work_is_stopped_only_once_that_work_ends() {
    let mut f = Fixture::new(cfg());
    let demand = Observation {
        instances: Some(Vec::new()),
        blocked: vec![blocked("e1")],
        ..Observation::default()
    };
    f.step(0, &demand);
    let names = f.create(5, &demand);
    let a = names[0].as_str();
    let with = |busy| Observation {
        instances: listed(&[a]),
        nodes: vec![node(a, NodeStatus::Ready, busy)],
        blocked: Vec::new(),
    };
    f.step(6, &with(false));
    let actions = f.step(36, &with(false));
    assert!(
        matches!(actions.as_slice(), [Action::Cordon { .. }]),
        "{actions:?}"
    );
    f.core.cordoned(&format!("i{a}"), true, f.at(36));
    // A plan in flight placed something on it before the cordon took.
    assert!(f.step(37, &with(true)).is_empty());
    assert!(f.step(100, &with(true)).is_empty());
    let actions = f.step(101, &with(false));
    assert!(
        matches!(
            actions.as_slice(),
            [Action::Stop {
                reason: StopReason::Idle,
                ..
            }]
        ),
        "{actions:?}"
    );
}

#[test]
fn provider_errors_back_off_exponentially_up_to_the_limit() {
    let mut f = Fixture::new(cfg());
    let demand = Observation {
        instances: Some(Vec::new()),
        blocked: vec![blocked("e1")],
        ..Observation::default()
    };
    f.step(0, &demand);
    let mut at = 5;
    // Back-offs: 2, 4, 8, 16, 16 s.
    for wait in [2, 4, 8, 16, 16] {
        assert_eq!(creates(&f.step(at, &demand)), 1, "a create at {at}s");
        f.core.create_failed(f.at(at));
        assert_eq!(
            creates(&f.step(at + wait - 1, &demand)),
            0,
            "backing off at {}s",
            at + wait - 1
        );
        at += wait;
    }
    assert_eq!(creates(&f.step(at, &demand)), 1);
    assert_eq!(f.core.backoff(1), secs(2));
    assert_eq!(f.core.backoff(40), secs(16));
}

#[test]
fn failed_instances_are_shut_down_counted_and_back_off_creation() {
    let mut f = Fixture::new(AutoscalerConfig {
        max_nodes: 3,
        ..cfg()
    });
    let demand = |inst: Option<Vec<Instance>>, nodes: Vec<NodeView>| Observation {
        instances: inst,
        nodes,
        blocked: vec![blocked("e1")],
    };
    f.step(0, &demand(Some(Vec::new()), Vec::new()));
    let a = f.create(5, &demand(Some(Vec::new()), Vec::new()))[0].clone();
    // Never ready: shut down once `register_timeout` (60 s) has passed since its create.
    assert!(f.step(64, &demand(listed(&[&a]), Vec::new())).is_empty());
    let actions = f.step(65, &demand(listed(&[&a]), Vec::new()));
    assert!(
        matches!(
            actions.as_slice(),
            [Action::Stop {
                reason: StopReason::NeverReady,
                node: None,
                retry: false,
                ..
            }]
        ),
        "{actions:?}"
    );
    // Destroying it fails: retried after a back-off, as a retry.
    f.core.stop_failed(&format!("i{a}"), f.at(65));
    assert!(f.step(66, &demand(listed(&[&a]), Vec::new())).is_empty());
    // The failure backed creation off for 2 s from 65 s: the retry and a new create.
    let actions = f.step(67, &demand(listed(&[&a]), Vec::new()));
    let [Action::Stop { retry: true, .. }, Action::Create { names }] = actions.as_slice() else {
        panic!("expected a stop retry and a create, got {actions:?}");
    };
    let b = names[0].clone();
    f.core.stopped(&format!("i{a}"));
    f.core.created(inst(&format!("i{b}"), &b), f.at(67));
    // An instance that stops running is failed at once; so is one whose node goes down.
    let mut exited = inst(&format!("i{b}"), &b);
    exited.running = false;
    let actions = f.step(68, &demand(Some(vec![exited]), Vec::new()));
    assert!(
        matches!(
            actions.as_slice(),
            [Action::Stop {
                reason: StopReason::Exited,
                ..
            }]
        ),
        "{actions:?}"
    );
    f.core.stopped(&format!("i{b}"));
    // Second failure in a row: 4 s.
    assert_eq!(
        creates(&f.step(71, &demand(Some(Vec::new()), Vec::new()))),
        0
    );
    let c = f.create(72, &demand(Some(Vec::new()), Vec::new()))[0].clone();
    let ready = f.step(
        73,
        &demand(listed(&[&c]), vec![node(&c, NodeStatus::Ready, true)]),
    );
    assert!(ready.is_empty(), "{ready:?}");
    let actions = f.step(
        74,
        &demand(listed(&[&c]), vec![node(&c, NodeStatus::Down, true)]),
    );
    assert!(
        matches!(
            actions.as_slice(),
            [Action::Stop {
                reason: StopReason::NodeDown,
                node: Some(_),
                ..
            }]
        ),
        "{actions:?}"
    );
}

#[test]
fn evaluations_a_class_cannot_help_do_not_count() {
    let mut f = Fixture::new(cfg());
    let demand = Observation {
        instances: Some(Vec::new()),
        blocked: vec![blocked("e0")],
        ..Observation::default()
    };
    f.step(0, &demand);
    let a = f.create(5, &demand)[0].clone();
    // The job's constraints rule out this class's computed class: no more nodes for it.
    let mut ruled_out = blocked("e1");
    ruled_out.class_eligibility.insert("v1:42".into(), false);
    let obs = Observation {
        instances: listed(&[&a]),
        nodes: vec![node(&a, NodeStatus::Ready, true)],
        blocked: vec![ruled_out.clone()],
    };
    for s in [6, 20, 60] {
        assert_eq!(creates(&f.step(s, &obs)), 0, "at {s}s");
    }
    assert_eq!(f.core.stats().demand, 0);
    // Escaped evaluations (unique constraints) always count.
    ruled_out.escaped = true;
    let obs = Observation {
        blocked: vec![ruled_out],
        ..obs
    };
    // (It has been blocked since 6 s.)
    assert_eq!(creates(&f.step(61, &obs)), 1);
    assert_eq!(f.core.stats().demand, 1);
}

#[test]
fn a_new_leader_adopts_listed_instances_and_notices_lost_ones_and_orphans() {
    let mut f = Fixture::new(cfg());
    let a = format!("{PREFIX}0000000a");
    let b = format!("{PREFIX}0000000b");
    let stale = format!("{PREFIX}0000000c");
    let obs = Observation {
        instances: listed(&[&a, &b]),
        nodes: vec![
            node(&a, NodeStatus::Ready, true),
            node(&stale, NodeStatus::Down, false),
            node("static-client", NodeStatus::Down, false),
        ],
        blocked: vec![blocked("e1")],
    };
    let actions = f.step(0, &obs);
    // The down node named like the autoscaler's, with no instance, is purged; a node of the
    // class it did not create is left alone.
    assert_eq!(
        actions,
        [Action::Purge {
            node: NodeId::new(format!("node-{stale}"))
        }]
    );
    assert_eq!(f.core.stats().owned, 2);
    // Not purged again before a round has passed.
    assert!(f
        .step(0, &obs)
        .iter()
        .all(|a| !matches!(a, Action::Purge { .. })));
    // Listing failed: nothing is concluded from it.
    let blind = Observation {
        instances: None,
        ..obs.clone()
    };
    assert!(f
        .step(1, &blind)
        .iter()
        .all(|a| !matches!(a, Action::Lost { .. })));
    // b is no longer listed: lost.
    let obs = Observation {
        instances: listed(&[&a]),
        nodes: vec![node(&a, NodeStatus::Ready, true)],
        blocked: vec![blocked("e1")],
    };
    let actions = f.step(2, &obs);
    assert!(
        actions.contains(&Action::Lost {
            instance: format!("i{b}"),
            name: b.clone()
        }),
        "{actions:?}"
    );
    assert_eq!(f.core.stats().owned, 1);
}

#[test]
fn only_live_allocations_of_service_and_batch_jobs_keep_a_node_busy() {
    use teamster_storage::model::{Allocation, ClientStatus, DesiredStatus, JobType};

    use super::shell::holds_node;
    let running = Allocation {
        client_status: ClientStatus::Running,
        ..Allocation::default()
    };
    assert!(holds_node(&running, Some(JobType::Service)));
    assert!(holds_node(&running, Some(JobType::Batch)));
    // Its job version was collected: it still counts.
    assert!(holds_node(&running, None));
    assert!(!holds_node(&running, Some(JobType::System)));
    assert!(!holds_node(&running, Some(JobType::SysBatch)));
    // Placed, not started yet: it counts; stopped by the servers but still running on the
    // client: it counts until the client reports it done.
    let pending = Allocation {
        client_status: ClientStatus::Pending,
        desired_status: DesiredStatus::Stop,
        ..Allocation::default()
    };
    assert!(holds_node(&pending, Some(JobType::Service)));
    for done in [
        ClientStatus::Complete,
        ClientStatus::Failed,
        ClientStatus::Lost,
    ] {
        let a = Allocation {
            client_status: done,
            ..Allocation::default()
        };
        assert!(!holds_node(&a, Some(JobType::Service)), "{done:?}");
    }
}

#[test]
fn blocked_evaluations_of_system_jobs_are_no_demand() {
    use teamster_storage::model::{EvalStatus, Evaluation, JobType};

    use super::shell::is_demand;
    let eval = |status, eval_type| Evaluation {
        status,
        eval_type,
        ..Evaluation::default()
    };
    assert!(is_demand(&eval(EvalStatus::Blocked, JobType::Service)));
    assert!(is_demand(&eval(EvalStatus::Blocked, JobType::Batch)));
    assert!(!is_demand(&eval(EvalStatus::Blocked, JobType::System)));
    assert!(!is_demand(&eval(EvalStatus::Blocked, JobType::SysBatch)));
    assert!(!is_demand(&eval(EvalStatus::Pending, JobType::Service)));
    assert!(!is_demand(&eval(EvalStatus::Canceled, JobType::Service)));
}

#[tokio::test(start_paused = true)]
async fn the_shell_creates_on_demand_and_stops_idle_nodes_through_the_provider() {
    shell_tests::round_trip().await;
}

mod shell_tests {
    //! The duty against an in-memory provider and a state store written directly.

    use std::sync::{Arc, Mutex};

    use futures::future::BoxFuture;
    use teamster_storage::fsm::{Command, EvalUpsert, NodeDeregister, NodeRegister};
    use teamster_storage::model::{
        ClusterMeta, EvalStatus, Evaluation, JobType, Node, NodeId, NodeStatus,
        SchedulingEligibility,
    };
    use teamster_storage::state::StateStore;

    use super::super::provider::{Instance, NodeSpec, Owner, Provider};
    use super::super::shell::{AutoscalerDuty, NodeOps};
    use super::super::AutoscalerError;
    use super::*;
    use crate::server::leader::LeaderDuty;
    use crate::util::RngSource;

    #[derive(Default)]
    struct FakeProvider {
        instances: Mutex<Vec<Instance>>,
        created: Mutex<Vec<NodeSpec>>,
        destroyed: Mutex<Vec<String>>,
    }

    impl Provider for FakeProvider {
        fn name(&self) -> &'static str {
            "fake"
        }

        fn create<'a>(
            &'a self,
            spec: &'a NodeSpec,
        ) -> BoxFuture<'a, Result<Instance, AutoscalerError>> {
            Box::pin(async move {
                let i = Instance {
                    id: format!("c-{}", spec.name),
                    name: spec.name.clone(),
                    running: true,
                };
                self.instances.lock().unwrap().push(i.clone());
                self.created.lock().unwrap().push(spec.clone());
                Ok(i)
            })
        }

        fn destroy<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), AutoscalerError>> {
            Box::pin(async move {
                self.instances.lock().unwrap().retain(|i| i.id != id);
                self.destroyed.lock().unwrap().push(id.to_string());
                Ok(())
            })
        }

        fn list<'a>(
            &'a self,
            owner: &'a Owner,
        ) -> BoxFuture<'a, Result<Vec<Instance>, AutoscalerError>> {
            assert_eq!(owner.node_class, "auto");
            Box::pin(async move { Ok(self.instances.lock().unwrap().clone()) })
        }
    }

    struct Ops {
        state: StateStore,
        index: Mutex<u64>,
        ineligible: Mutex<Vec<NodeId>>,
    }

    impl Ops {
        fn apply(&self, cmd: Command) {
            let mut index = self.index.lock().unwrap();
            *index += 1;
            self.state.apply(*index, cmd);
        }
    }

    impl NodeOps for Ops {
        fn state(&self) -> &StateStore {
            &self.state
        }

        fn set_ineligible<'a>(&'a self, node: &'a NodeId) -> BoxFuture<'a, Result<(), String>> {
            self.ineligible.lock().unwrap().push(node.clone());
            Box::pin(async { Ok(()) })
        }

        fn deregister<'a>(&'a self, node: &'a NodeId) -> BoxFuture<'a, Result<(), String>> {
            self.apply(Command::NodeDeregister(NodeDeregister {
                node_ids: vec![node.clone()],
            }));
            Box::pin(async { Ok(()) })
        }
    }

    fn register(ops: &Ops, name: &str) {
        let mut node = Node {
            id: NodeId::new(format!("node-{name}")),
            name: name.to_string(),
            node_class: "auto".into(),
            datacenter: "dc1".into(),
            status: NodeStatus::Ready,
            scheduling_eligibility: SchedulingEligibility::Eligible,
            ..Node::default()
        };
        node.canonicalize();
        ops.apply(Command::NodeRegister(NodeRegister {
            node,
            evals: Vec::new(),
        }));
    }

    fn blocked_eval(status: EvalStatus) -> Evaluation {
        Evaluation {
            id: teamster_storage::model::EvalId::new("e1"),
            job_id: teamster_storage::model::JobId::new("work"),
            eval_type: JobType::Batch,
            status,
            ..Evaluation::default()
        }
    }

    pub(super) async fn round_trip() {
        let ops = Arc::new(Ops {
            state: StateStore::new(),
            index: Mutex::new(0),
            ineligible: Mutex::new(Vec::new()),
        });
        ops.apply(Command::ClusterMeta(ClusterMeta {
            cluster_id: "abcd1234-5678".into(),
            create_time: 1,
        }));
        let provider = Arc::new(FakeProvider::default());
        let duty = AutoscalerDuty::new(
            AutoscalerConfig {
                max_nodes: 1,
                ..cfg()
            },
            provider.clone(),
            ops.clone(),
            RngSource::seeded(3),
        );
        duty.establish().await.unwrap();
        ops.apply(Command::EvalUpsert(EvalUpsert {
            evals: vec![blocked_eval(EvalStatus::Blocked)],
        }));
        // Blocked for 5 s (seen at the first round, 1 s in): created at 6 s.
        tokio::time::sleep(secs(5) + Duration::from_millis(500)).await;
        assert!(provider.created.lock().unwrap().is_empty());
        tokio::time::sleep(secs(1)).await;
        let created = provider.created.lock().unwrap().clone();
        assert_eq!(created.len(), 1, "{created:?}");
        assert_eq!(created[0].cluster_id, "abcd1234-5678");
        assert!(
            created[0].name.starts_with("teamster-auto-abcd1234-"),
            "{created:?}"
        );
        // The node registers; the evaluation completes; the node stays idle.
        register(&ops, &created[0].name);
        ops.apply(Command::EvalUpsert(EvalUpsert {
            evals: vec![blocked_eval(EvalStatus::Complete)],
        }));
        tokio::time::sleep(secs(30)).await;
        assert!(provider.destroyed.lock().unwrap().is_empty(), "idle 29 s");
        // Idle 30 s: cordoned; one interval later destroyed and deregistered.
        tokio::time::sleep(secs(3)).await;
        let node_id = NodeId::new(format!("node-{}", created[0].name));
        assert_eq!(
            ops.ineligible.lock().unwrap().as_slice(),
            std::slice::from_ref(&node_id)
        );
        assert_eq!(
            *provider.destroyed.lock().unwrap(),
            [format!("c-{}", created[0].name)]
        );
        assert!(ops.state.snapshot().node_by_id(node_id.as_str()).is_none());
        duty.revoke().await;
    }
}
