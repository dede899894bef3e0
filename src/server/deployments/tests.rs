//! The deployment operations against a real state store: what they build, what they
//! refuse, and what the state makes of the commands they build.

use rand::rngs::StdRng;
use rand::SeedableRng;
use teamster_storage::fsm::{
    ApplyPlanResults, Command, CommandResponse, JobRegister, JobStability, NodeRegister,
};
use teamster_storage::model::deployment::{DESC_FAILED_BY_USER, DESC_PROGRESS_DEADLINE};
use teamster_storage::model::{
    AllocDeploymentStatus, AllocId, Allocation, Deployment, DeploymentId, DeploymentState,
    DeploymentStatus, EvalId, EvalStatus, EvalTrigger, Evaluation, Job, Namespace,
};
use teamster_storage::state::StateStore;

use super::ops::{self, DeploymentOpError};
use crate::scheduler::harness::{mock_job, mock_node};

const SEC: i64 = 1_000_000_000;
const NOW: i64 = 1_700_000_000 * SEC;
const DEP: &str = "dep-1";

/// A state store and its next raft index.
struct Fixture {
    store: StateStore,
    index: u64,
    rng: StdRng,
}

/// How the fixture's deployment is made.
#[derive(Clone, Copy)]
struct Shape {
    canaries: u32,
    auto_revert: bool,
    /// Version 0 is marked stable.
    stable_v0: bool,
    /// Version 1 (the deployment's) has version 0's spec again: registered as 0, 1 (count
    /// 5), then 0's spec as version 2, whose deployment it is.
    same_spec: bool,
}

const PLAIN: Shape = Shape {
    canaries: 0,
    auto_revert: false,
    stable_v0: true,
    same_spec: false,
};

impl Fixture {
    fn apply(&mut self, command: Command) -> CommandResponse {
        self.index += 1;
        self.store.apply(self.index, command)
    }

    fn ok(&mut self, command: Command) {
        let response = self.apply(command);
        assert!(response.rejection().is_none(), "{response:?}");
    }

    fn register(&mut self, job: &Job, eval: &str) {
        let eval = Evaluation {
            id: EvalId::new(eval),
            namespace: job.namespace.clone(),
            priority: job.priority,
            eval_type: job.job_type,
            triggered_by: EvalTrigger::JobRegister,
            job_id: job.id.clone(),
            status: EvalStatus::Pending,
            ..Evaluation::default()
        };
        self.ok(Command::JobRegister(JobRegister {
            job: job.clone(),
            eval: Some(eval),
            enforce_index: None,
            tracked_versions: 0,
        }));
    }

    fn deployment(&self) -> Deployment {
        (**self
            .store
            .snapshot()
            .deployment_by_id(DEP)
            .expect("deployment"))
        .clone()
    }

    fn job(&self) -> Job {
        (**self
            .store
            .snapshot()
            .job_by_id("default", "web")
            .expect("job"))
        .clone()
    }
}

fn alloc_id(n: u32) -> AllocId {
    AllocId::new(format!("alloc-{n}"))
}

/// The job `web` registered at count 2 (version 0), then at count 3 (version 1) with a
/// deployment that placed two allocations, the first a canary when the shape has canaries.
fn fixture(shape: Shape) -> Fixture {
    let mut f = Fixture {
        store: StateStore::new(),
        index: 0,
        rng: StdRng::seed_from_u64(7),
    };
    f.ok(Command::NodeRegister(NodeRegister {
        node: mock_node(1),
        evals: Vec::new(),
    }));
    let v0 = mock_job("web", 2);
    f.register(&v0, "eval-0");
    if shape.stable_v0 {
        f.ok(Command::JobStability(JobStability {
            namespace: Namespace::new("default"),
            job_id: v0.id.clone(),
            version: 0,
            stable: true,
        }));
    }
    let next = if shape.same_spec {
        f.register(&mock_job("web", 5), "eval-1");
        v0.clone()
    } else {
        mock_job("web", 3)
    };
    f.register(&next, "eval-2");
    let job = f.job();
    let node = mock_node(1);
    let allocs = (0..2)
        .map(|n| Allocation {
            id: alloc_id(n),
            namespace: job.namespace.clone(),
            eval_id: EvalId::new("eval-2"),
            name: format!("web.web[{n}]"),
            node_id: node.id.clone(),
            job_id: job.id.clone(),
            job_version: job.version,
            task_group: "web".into(),
            resources: job.task_groups[0].combined_resources(),
            create_time: NOW,
            modify_time: NOW,
            deployment_id: DeploymentId::new(DEP),
            deployment_status: (n == 0 && shape.canaries > 0).then(|| {
                Box::new(AllocDeploymentStatus {
                    canary: true,
                    ..AllocDeploymentStatus::default()
                })
            }),
            ..Allocation::default()
        })
        .collect();
    let deployment = Deployment {
        id: DeploymentId::new(DEP),
        namespace: job.namespace.clone(),
        job_id: job.id.clone(),
        job_version: job.version,
        job_modify_index: job.modify_index,
        job_spec_modify_index: job.job_modify_index,
        job_create_index: job.create_index,
        eval_priority: 70,
        task_groups: [(
            "web".to_owned(),
            DeploymentState {
                desired_total: job.task_groups[0].count,
                desired_canaries: shape.canaries,
                auto_revert: shape.auto_revert,
                progress_deadline: 600 * SEC as u64,
                ..DeploymentState::default()
            },
        )]
        .into(),
        status: DeploymentStatus::Running,
        status_description: "Deployment is running".into(),
        create_time: NOW,
        modify_time: NOW,
        ..Deployment::default()
    };
    f.ok(Command::ApplyPlanResults(ApplyPlanResults {
        eval_id: EvalId::new("eval-2"),
        allocs_updated: allocs,
        allocs_stopped: Vec::new(),
        allocs_preempted: Vec::new(),
        evals: Vec::new(),
        ineligible_nodes: Vec::new(),
        updated_at: NOW / SEC,
        deployment: Some(deployment),
        deployment_updates: Vec::new(),
    }));
    f
}

/// The evaluation a write created, as the state holds it.
fn eval_of(f: &Fixture, write: &ops::DeploymentWrite) -> Evaluation {
    let id = write.eval_id.as_ref().expect("an evaluation");
    (**f.store
        .snapshot()
        .eval_by_id(id.as_str())
        .expect("eval committed"))
    .clone()
}

#[test]
fn fail_without_auto_revert_fails_with_an_evaluation() {
    let mut f = fixture(PLAIN);
    let d = f.deployment();
    let snap = f.store.snapshot();
    let write = ops::fail(&snap, &d, DESC_FAILED_BY_USER, NOW, &mut f.rng, 0).unwrap();
    assert_eq!(write.reverted_job_version, None);
    f.ok(write.command.clone());
    let d = f.deployment();
    assert_eq!(d.status, DeploymentStatus::Failed);
    assert_eq!(d.status_description, DESC_FAILED_BY_USER);
    let eval = eval_of(&f, &write);
    assert_eq!(eval.triggered_by, EvalTrigger::DeploymentWatcher);
    assert_eq!(eval.priority, 70, "the deployment's EvalPriority");
    assert_eq!(eval.deployment_id, DEP);
    assert_eq!(eval.job_id.as_str(), "web");
    assert_eq!(f.job().version, 1, "nothing reverted");

    // A finished deployment is refused, with Nomad's message, and nothing is built.
    let snap = f.store.snapshot();
    let err = ops::fail(&snap, &d, DESC_FAILED_BY_USER, NOW, &mut f.rng, 0).unwrap_err();
    assert_eq!(err.to_string(), "can't fail terminal deployment");
    let err = ops::pause(&snap, &d, true, NOW, &mut f.rng).unwrap_err();
    assert_eq!(err.to_string(), "can't pause terminal deployment");
    let err = ops::pause(&snap, &d, false, NOW, &mut f.rng).unwrap_err();
    assert_eq!(err.to_string(), "can't resume terminal deployment");
    assert!(matches!(err, DeploymentOpError::Terminal(_)));
}

#[test]
fn fail_with_auto_revert_registers_the_stable_version_again() {
    let mut f = fixture(Shape {
        auto_revert: true,
        ..PLAIN
    });
    let d = f.deployment();
    let before = f.job();
    let snap = f.store.snapshot();
    let write = ops::fail(&snap, &d, DESC_PROGRESS_DEADLINE, NOW, &mut f.rng, 0).unwrap();
    drop(snap);
    assert_eq!(write.reverted_job_version, Some(0));
    f.ok(write.command.clone());
    let d = f.deployment();
    assert_eq!(d.status, DeploymentStatus::Failed);
    assert_eq!(
        d.status_description,
        "Failed due to progress deadline - rolling back to job version 0"
    );
    let job = f.job();
    assert_eq!(job.version, 2, "the revert is a new version");
    assert_eq!(job.task_groups[0].count, 2, "with version 0's spec");
    assert!(!job.stable);
    assert_eq!(job.create_index, before.create_index);
    let eval = eval_of(&f, &write);
    assert_eq!(eval.triggered_by, EvalTrigger::DeploymentWatcher);
    assert_eq!(
        eval.job_modify_index, job.job_modify_index,
        "the evaluation is for the reverted version"
    );
}

#[test]
fn fail_says_why_it_does_not_revert() {
    // No stable version before the deployment's.
    let mut f = fixture(Shape {
        auto_revert: true,
        stable_v0: false,
        ..PLAIN
    });
    let d = f.deployment();
    let snap = f.store.snapshot();
    let write = ops::fail(&snap, &d, DESC_FAILED_BY_USER, NOW, &mut f.rng, 0).unwrap();
    drop(snap);
    assert_eq!(write.reverted_job_version, None);
    f.ok(write.command.clone());
    assert_eq!(
        f.deployment().status_description,
        "Deployment marked as failed - no stable job version to auto revert to"
    );
    assert_eq!(f.job().version, 1);
    eval_of(&f, &write);

    // The stable version has the current spec: reverting would only fail again.
    let mut f = fixture(Shape {
        auto_revert: true,
        same_spec: true,
        ..PLAIN
    });
    let d = f.deployment();
    assert_eq!(d.job_version, 2);
    let snap = f.store.snapshot();
    let write = ops::fail(&snap, &d, DESC_FAILED_BY_USER, NOW, &mut f.rng, 0).unwrap();
    drop(snap);
    assert_eq!(write.reverted_job_version, None);
    f.ok(write.command.clone());
    assert_eq!(
        f.deployment().status_description,
        "Deployment marked as failed - not rolling back to stable job version 0 as current \
         job has same specification"
    );
    assert_eq!(f.job().version, 2);
}

#[test]
fn promote_needs_healthy_canaries_of_known_groups() {
    let mut f = fixture(PLAIN);
    let d = f.deployment();
    let snap = f.store.snapshot();
    assert_eq!(
        ops::promote(&snap, &d, true, &[], NOW, &mut f.rng).unwrap_err(),
        DeploymentOpError::NoCanaries
    );

    let mut f = fixture(Shape {
        canaries: 1,
        ..PLAIN
    });
    let d = f.deployment();
    let snap = f.store.snapshot();
    let err = ops::promote(&snap, &d, true, &[], NOW, &mut f.rng).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Task group \"web\" has 0/1 healthy allocations"
    );
    let err = ops::promote(&snap, &d, false, &["api".into()], NOW, &mut f.rng).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Deployment \"dep-1\" has no task group \"api\""
    );
    assert_eq!(
        ops::promote(&snap, &d, false, &[], NOW, &mut f.rng).unwrap_err(),
        DeploymentOpError::NoGroups
    );
    drop(snap);

    // The canary turns healthy (an operator says so); then the group promotes.
    let write = ops::set_alloc_health(
        &f.store.snapshot(),
        &d,
        &[alloc_id(0)],
        &[],
        NOW,
        &mut f.rng,
        0,
    )
    .unwrap();
    assert_eq!(write.reverted_job_version, None);
    f.ok(write.command);
    let d = f.deployment();
    assert_eq!(d.status, DeploymentStatus::Running, "healthy fails nothing");
    assert_eq!(d.task_groups["web"].healthy_allocs, 1);
    let snap = f.store.snapshot();
    let write = ops::promote(&snap, &d, false, &["web".into()], NOW, &mut f.rng).unwrap();
    drop(snap);
    f.ok(write.command.clone());
    let d = f.deployment();
    assert!(d.task_groups["web"].promoted);
    assert_eq!(d.status_description, "Deployment is running");
    assert_eq!(
        eval_of(&f, &write).triggered_by,
        EvalTrigger::DeploymentWatcher
    );
}

#[test]
fn pause_and_resume() {
    let mut f = fixture(Shape {
        canaries: 1,
        ..PLAIN
    });
    let d = f.deployment();
    let snap = f.store.snapshot();
    let write = ops::pause(&snap, &d, true, NOW, &mut f.rng).unwrap();
    drop(snap);
    assert_eq!(write.eval_id, None, "a pause creates no evaluation");
    f.ok(write.command);
    let d = f.deployment();
    assert_eq!(d.status, DeploymentStatus::Paused);
    assert_eq!(d.status_description, "Deployment is paused");

    let later = NOW + 100 * SEC;
    let snap = f.store.snapshot();
    let write = ops::pause(&snap, &d, false, later, &mut f.rng).unwrap();
    drop(snap);
    f.ok(write.command.clone());
    let d = f.deployment();
    assert_eq!(d.status, DeploymentStatus::Running);
    assert_eq!(
        d.status_description, "Deployment is running but requires manual promotion",
        "the description of its promotion state"
    );
    assert_eq!(
        d.task_groups["web"].require_progress_by.unix_nanos(),
        Some(later + 600 * SEC),
        "a resume restarts the progress deadline"
    );
    eval_of(&f, &write);
}

#[test]
fn allocation_health_checks_membership_and_fails_on_unhealthy() {
    let mut f = fixture(Shape {
        auto_revert: true,
        ..PLAIN
    });
    let d = f.deployment();
    let snap = f.store.snapshot();
    assert_eq!(
        ops::set_alloc_health(&snap, &d, &[], &[], NOW, &mut f.rng, 0).unwrap_err(),
        DeploymentOpError::NoAllocations
    );
    let err = ops::set_alloc_health(&snap, &d, &[AllocId::new("nope")], &[], NOW, &mut f.rng, 0)
        .unwrap_err();
    assert_eq!(err.to_string(), "unknown alloc \"nope\"");
    let err = ops::set_alloc_health(
        &snap,
        &d,
        &[alloc_id(0)],
        &[alloc_id(0)],
        NOW,
        &mut f.rng,
        0,
    )
    .unwrap_err();
    assert!(matches!(err, DeploymentOpError::HealthyAndUnhealthy { .. }));
    // An allocation of another deployment.
    let other = Deployment {
        id: DeploymentId::new("dep-2"),
        ..d.clone()
    };
    let err =
        ops::set_alloc_health(&snap, &other, &[alloc_id(1)], &[], NOW, &mut f.rng, 0).unwrap_err();
    assert_eq!(
        err.to_string(),
        "alloc \"alloc-1\" is not part of deployment \"dep-2\""
    );

    let write = ops::set_alloc_health(
        &snap,
        &d,
        &[alloc_id(0)],
        &[alloc_id(1)],
        NOW,
        &mut f.rng,
        0,
    )
    .unwrap();
    drop(snap);
    assert_eq!(write.reverted_job_version, Some(0));
    f.ok(write.command.clone());
    let d = f.deployment();
    assert_eq!(d.status, DeploymentStatus::Failed);
    assert_eq!(
        d.status_description,
        "Failed due to unhealthy allocations - rolling back to job version 0"
    );
    let snap = f.store.snapshot();
    let unhealthy = snap.alloc_by_id("alloc-1").unwrap();
    assert!(unhealthy.is_unhealthy());
    assert!(snap.alloc_by_id("alloc-0").unwrap().is_healthy());
    assert_eq!(f.job().task_groups[0].count, 2, "reverted to version 0");
    eval_of(&f, &write);
}
