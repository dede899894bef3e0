//! Nomad's JSON shapes: the register body and evaluation samples from the reference notes,
//! with explicit nulls and unknown keys added, decode into the model and encode back with
//! Nomad's field names; the same values round-trip through bincode.

use serde_json::{json, Value};
use teamster_storage::model::{
    Allocation, ConfigValue, DelayFunction, EvalStatus, EvalTrigger, Evaluation, Job, JobType,
    ModelError, Node, NodeStatus, ReschedulePolicy, RestartMode, RestartPolicy, Timestamp,
};

/// §3.1 of the API notes, plus nulls and keys Nomad has but we do not model.
const REGISTER_BODY: &str = r#"{"Job": {"ID": "sleepy", "Name": "sleepy", "Type": "batch", "Priority": 50,
  "Datacenters": ["dc1"], "Namespace": "default", "Region": "global",
  "Constraints": [{"LTarget": "${attr.kernel.name}", "Operand": "=", "RTarget": "linux"}],
  "Affinities": null, "Spreads": null, "Meta": null, "Periodic": null, "ParameterizedJob": null,
  "Update": null, "Multiregion": null, "VaultNamespace": "", "UI": {"Description": "x"},
  "TaskGroups": [{"Name": "g", "Count": 2,
    "RestartPolicy": {"Attempts": 3, "Interval": 86400000000000, "Delay": 15000000000, "Mode": "fail"},
    "ReschedulePolicy": {"Attempts": 1, "Interval": 86400000000000, "Delay": 5000000000,
                         "DelayFunction": "constant", "Unlimited": false, "MaxDelay": null},
    "EphemeralDisk": {"SizeMB": 300}, "Networks": null, "Services": null, "Meta": null,
    "Tasks": [{"Name": "t", "Driver": "exec", "Config": {"command": "/bin/sleep", "args": ["30"]},
               "Env": {"FOO": "bar"}, "Resources": {"CPU": 100, "MemoryMB": 64, "DiskMB": 10,
               "Networks": null, "Devices": null, "Cores": 0},
               "Templates": null, "Artifacts": null, "Constraints": null, "User": null,
               "KillTimeout": 5000000000, "LogConfig": {"MaxFiles": 10}}]}]},
  "EnforceIndex": false, "JobModifyIndex": 0}"#;

/// §3.5 of the API notes, plus an unknown key.
const EVAL_SAMPLE: &str = r#"{"ID":"8a4b2f6c-0000-4000-8000-000000000001","Namespace":"default","Priority":50,"Type":"batch","TriggeredBy":"job-register",
 "JobID":"sleepy","JobModifyIndex":42,"NodeID":"","NodeModifyIndex":0,"DeploymentID":"",
 "Status":"complete","StatusDescription":"","Wait":0,"WaitUntil":"0001-01-01T00:00:00Z",
 "NextEval":"","PreviousEval":"","BlockedEval":"","FailedTGAllocs":null,"ClassEligibility":null,
 "QueuedAllocations":{"g":0},"SnapshotIndex":42,"CreateIndex":42,"ModifyIndex":44,
 "CreateTime":1700000000000000000,"ModifyTime":1700000000100000000,
 "RelatedEvals":null,"LeaderACL":"","QuotaLimitReached":""}"#;

fn bincode_round_trip<T>(value: &T) -> T
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let cfg = bincode::config::standard();
    let bytes = bincode::serde::encode_to_vec(value, cfg).unwrap();
    let (back, used): (T, usize) = bincode::serde::decode_from_slice(&bytes, cfg).unwrap();
    assert_eq!(used, bytes.len());
    back
}

/// Every key of `sample` appears in `out` with the same value, treating `null` as equal to
/// an empty list, map or string (Go writes nil collections as null) and ignoring the listed keys we
/// do not model.
fn assert_subset(sample: &Value, out: &Value, path: &str, unmodeled: &[&str]) {
    match (sample, out) {
        (Value::Object(s), Value::Object(o)) => {
            for (k, v) in s {
                if unmodeled.contains(&k.as_str()) {
                    continue;
                }
                let got = o
                    .get(k)
                    .unwrap_or_else(|| panic!("{path}.{k} missing from {out}"));
                assert_subset(v, got, &format!("{path}.{k}"), unmodeled);
            }
        }
        (Value::Array(s), Value::Array(o)) => {
            assert_eq!(s.len(), o.len(), "{path}");
            for (i, (a, b)) in s.iter().zip(o).enumerate() {
                assert_subset(a, b, &format!("{path}[{i}]"), unmodeled);
            }
        }
        (Value::Null, Value::Array(o)) => assert!(o.is_empty(), "{path}"),
        (Value::Null, Value::Object(o)) => assert!(o.is_empty(), "{path}"),
        (Value::Null, Value::String(o)) => assert!(o.is_empty(), "{path}"),
        (a, b) => assert_eq!(a, b, "{path}"),
    }
}

const UNMODELED_JOB_KEYS: &[&str] = &[
    "Periodic",
    "ParameterizedJob",
    "Multiregion",
    "VaultNamespace",
    "UI",
    "EphemeralDisk",
    "Networks",
    "Services",
    "Devices",
    "Cores",
    "Templates",
    "Artifacts",
    "LogConfig",
    // A null MaxDelay is filled with the default by canonicalize, so it is compared apart.
    "MaxDelay",
];

#[test]
fn the_register_sample_decodes_with_nulls_and_unknown_keys() {
    let body: Value = serde_json::from_str(REGISTER_BODY).unwrap();
    let mut job: Job = serde_json::from_value(body["Job"].clone()).unwrap();
    assert_eq!(job.id, "sleepy");
    assert_eq!(job.job_type, JobType::Batch);
    assert_eq!(job.datacenters, vec!["dc1"]);
    assert_eq!(job.constraints[0].l_target, "${attr.kernel.name}");
    let group = &job.task_groups[0];
    assert_eq!((group.name.as_str(), group.count), ("g", 2));
    let task = &group.tasks[0];
    assert_eq!(task.config["command"], ConfigValue::from("/bin/sleep"));
    assert_eq!(
        task.config["args"],
        ConfigValue::List(vec![ConfigValue::from("30")])
    );
    assert_eq!(task.env["FOO"], "bar");
    assert_eq!(
        (
            task.resources.cpu,
            task.resources.memory_mb,
            task.resources.disk_mb
        ),
        (100, 64, 10)
    );
    assert_eq!(task.user, "", "null user is the default");
    assert_eq!(task.kill_timeout, 5_000_000_000);
    assert_eq!(
        group.reschedule_policy.as_ref().unwrap().max_delay,
        None,
        "null is the same as absent"
    );

    job.canonicalize();
    job.validate().unwrap();
    let out = serde_json::to_value(&job).unwrap();
    assert_subset(&body["Job"], &out, "Job", UNMODELED_JOB_KEYS);
    // Go-style names, not serde's PascalCase guesses.
    for key in [
        "ID",
        "TaskGroups",
        "JobModifyIndex",
        "SubmitTime",
        "AllAtOnce",
    ] {
        assert!(out.get(key).is_some(), "{key} missing");
    }
    let res = &out["TaskGroups"][0]["Tasks"][0]["Resources"];
    assert_eq!(
        res,
        &json!({"CPU": 100, "MemoryMB": 64, "DiskMB": 10, "MemoryMaxMB": 0, "Cores": 0})
    );
    assert_eq!(
        out["TaskGroups"][0]["ReschedulePolicy"]["MaxDelay"],
        json!(0),
        "batch default merged into the partial policy"
    );

    assert_eq!(bincode_round_trip(&job), job);
    // And the decoded output reads back as the same job.
    assert_eq!(serde_json::from_value::<Job>(out).unwrap(), job);
}

#[test]
fn an_evaluation_round_trips_with_nomads_field_names() {
    let sample: Value = serde_json::from_str(EVAL_SAMPLE).unwrap();
    let eval: Evaluation = serde_json::from_value(sample.clone()).unwrap();
    assert_eq!(eval.status, EvalStatus::Complete);
    assert_eq!(eval.triggered_by, EvalTrigger::JobRegister);
    assert_eq!(eval.job_id, "sleepy");
    assert!(eval.wait_until.is_zero());
    assert_eq!(eval.queued_allocations["g"], 0);
    assert_eq!((eval.create_index, eval.modify_index), (42, 44));
    let out = serde_json::to_value(&eval).unwrap();
    assert_subset(
        &sample,
        &out,
        "Eval",
        &["RelatedEvals", "LeaderACL", "QuotaLimitReached"],
    );
    assert_eq!(out["WaitUntil"], "0001-01-01T00:00:00Z");
    assert_eq!(bincode_round_trip(&eval), eval);
}

#[test]
fn absent_and_null_fields_take_nomads_defaults() {
    let job: Job = serde_json::from_str(
        r#"{"ID": "d", "Priority": null, "Type": null, "TaskGroups": [
              {"Name": "g", "Count": null, "Tasks": [{"Name": "t", "Driver": "mock",
                "Resources": {"CPU": null, "MemoryMB": null}}]},
              {"Name": "h", "Tasks": [{"Name": "t", "Driver": "mock"}]},
              {"Name": "zero", "Count": 0, "Tasks": [{"Name": "t", "Driver": "mock", "Resources": null}]}]}"#,
    )
    .unwrap();
    assert_eq!(job.priority, 50);
    assert_eq!(job.job_type, JobType::Service);
    for (i, count) in [(0, 1), (1, 1), (2, 0)] {
        let g = &job.task_groups[i];
        assert_eq!(g.count, count, "group {}", g.name);
        let r = g.tasks[0].resources;
        assert_eq!(
            (r.cpu, r.memory_mb, r.disk_mb),
            (100, 300, 0),
            "group {}",
            g.name
        );
    }
    // Everything optional: an empty object is a (not yet valid) job.
    let empty: Job = serde_json::from_str("{}").unwrap();
    assert_eq!(empty.priority, 50);
    assert!(empty.validate().is_err());
}

#[test]
fn canonicalize_fills_nomads_defaults_by_job_type() {
    let mut job: Job = serde_json::from_str(
        r#"{"ID": "svc", "TaskGroups": [{"Name": "g", "RestartPolicy": {"Attempts": 7},
              "Affinities": [{"LTarget": "${node.class}", "RTarget": "big"}],
              "Tasks": [{"Name": "t", "Driver": "mock",
              "Constraints": [{"LTarget": "${attr.os}", "RTarget": "linux"}]}]}]}"#,
    )
    .unwrap();
    job.canonicalize();
    assert_eq!(job.name, "svc");
    assert_eq!(job.namespace, "default");
    assert_eq!(job.region, "global");
    assert_eq!(job.node_pool, "default");
    assert_eq!(job.datacenters, vec!["*"]);
    let g = &job.task_groups[0];
    assert_eq!(
        g.restart_policy,
        Some(RestartPolicy {
            attempts: Some(7),
            interval: Some(30 * 60 * 1_000_000_000),
            delay: Some(15_000_000_000),
            mode: Some(RestartMode::Fail),
            render_templates: Some(false),
        })
    );
    assert_eq!(
        g.reschedule_policy,
        ReschedulePolicy::default_for(JobType::Service)
    );
    assert_eq!(
        g.reschedule_policy.as_ref().unwrap().delay_function,
        Some(DelayFunction::Exponential)
    );
    assert_eq!(g.affinities[0].weight, 50);
    assert_eq!(g.affinities[0].operand, "=");
    assert_eq!(g.tasks[0].constraints[0].operand, "=");
    job.validate().unwrap();
    let once = job.clone();
    job.canonicalize();
    assert_eq!(job, once, "canonicalize is idempotent");

    let mut system: Job = serde_json::from_str(
        r#"{"ID": "sys", "Type": "system", "TaskGroups": [{"Name": "g",
              "Tasks": [{"Name": "t", "Driver": "mock"}]}]}"#,
    )
    .unwrap();
    system.canonicalize();
    assert_eq!(system.task_groups[0].reschedule_policy, None);
    assert_eq!(
        system.task_groups[0]
            .restart_policy
            .as_ref()
            .unwrap()
            .attempts,
        Some(2)
    );
}

/// A job-level `reschedule` block is merged into every group's, under the group's own, and
/// none is kept at the job level (Nomad's API); a system or sysbatch job with one, at either
/// level, is refused as Nomad refuses it.
#[test]
fn a_job_level_reschedule_block_is_every_groups_default() {
    let mut job: Job = serde_json::from_str(
        r#"{"ID": "b", "Type": "batch", "Reschedule": {"Attempts": 5, "Delay": 60000000000},
              "TaskGroups": [
                {"Name": "own", "ReschedulePolicy": {"Attempts": 9},
                 "Tasks": [{"Name": "t", "Driver": "mock"}]},
                {"Name": "inherits", "Tasks": [{"Name": "t", "Driver": "mock"}]}]}"#,
    )
    .unwrap();
    job.canonicalize();
    assert_eq!(job.reschedule, None);
    let batch = ReschedulePolicy::default_for(JobType::Batch).unwrap();
    let own = job.task_groups[0].reschedule_policy.clone().unwrap();
    assert_eq!(
        (own.attempts, own.delay, own.interval),
        (Some(9), Some(60_000_000_000), batch.interval)
    );
    let inherits = job.task_groups[1].reschedule_policy.clone().unwrap();
    assert_eq!(
        (inherits.attempts, inherits.delay, inherits.delay_function),
        (Some(5), Some(60_000_000_000), batch.delay_function)
    );
    job.validate().unwrap();
    let once = job.clone();
    job.canonicalize();
    assert_eq!(job, once, "canonicalize is idempotent");

    for json in [
        r#"{"ID": "s", "Type": "system", "Reschedule": {"Attempts": 1},
            "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "mock"}]}]}"#,
        r#"{"ID": "s", "Type": "sysbatch",
            "TaskGroups": [{"Name": "g", "ReschedulePolicy": {"Attempts": 1},
                            "Tasks": [{"Name": "t", "Driver": "mock"}]}]}"#,
    ] {
        let mut system: Job = serde_json::from_str(json).unwrap();
        system.canonicalize();
        let err = system.validate().unwrap_err().to_string();
        assert!(
            err.contains("System or sysbatch jobs should not have a reschedule policy"),
            "{err}"
        );
    }
}

/// IDs that read as paths or patterns and resources no node has are refused by name
/// (issue 52); a child's `<parent>/periodic-<n>` shape stays valid.
#[test]
fn path_like_ids_and_impossible_resources_are_refused() {
    let job_with = |id: &str, cpu: u64, memory: u64| -> Job {
        let mut job: Job = serde_json::from_value(json!({
            "ID": id, "Datacenters": ["dc1"],
            "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{"Name": "t", "Driver": "mock",
                "Resources": {"CPU": cpu, "MemoryMB": memory}}]}]
        }))
        .unwrap();
        job.canonicalize();
        job
    };
    let refused = |job: Job| match job.validate() {
        Err(ModelError::Invalid { errors }) => errors.join("\n"),
        Ok(()) => panic!("{:?} was accepted", job.id),
        Err(e) => panic!("{e}"),
    };
    for (id, why) in [
        ("../../etc", "path segment"),
        ("a/./b", "path segment"),
        ("/abs", "empty path segment"),
        ("a//b", "empty path segment"),
        ("trailing/", "empty path segment"),
        ("*", "wildcard"),
        ("a\\b", "path separator"),
        ("bell\u{7}", "control character"),
    ] {
        let text = refused(job_with(id, 100, 300));
        assert!(text.contains(why), "{id:?}: {text}");
    }
    for id in [
        "web",
        "a/b",
        "batch/periodic-1700000000",
        "x.y-z_1",
        "..dots..ok",
    ] {
        job_with(id, 100, 300).validate().unwrap();
    }
    let text = refused(job_with("big", 1 << 40, 300));
    assert!(
        text.contains("CPU 1099511627776 is more than any node offers"),
        "{text}"
    );
    let text = refused(job_with("big", 100, 1 << 63));
    assert!(
        text.contains("MemoryMB 9223372036854775808 is more than any node"),
        "{text}"
    );
}

#[test]
fn validation_reports_every_problem() {
    let mut job: Job = serde_json::from_str(
        r#"{"ID": "bad id", "Priority": 101, "Datacenters": [""], "TaskGroups": [
              {"Name": "g", "Tasks": [{"Name": "t", "Resources": {"CPU": 0, "MemoryMB": 5}}],
               "Constraints": [{"LTarget": "${attr.x}", "Operand": "nope", "RTarget": "y"},
                               {"Operand": ">", "LTarget": "${attr.y}"}]},
              {"Name": "g", "Tasks": []}]}"#,
    )
    .unwrap();
    job.canonicalize();
    let Err(ModelError::Invalid { errors }) = job.validate() else {
        panic!("expected validation errors");
    };
    let text = errors.join("\n");
    for needle in [
        "job ID contains a space",
        "priority must be between [1, 100]",
        "datacenter must be non-empty",
        "missing driver",
        "minimum CPU value is 1",
        "minimum MemoryMB value is 10",
        "unknown constraint type \"nope\"",
        "operator \">\" requires an RTarget",
        "redefines a task group",
        "missing tasks",
    ] {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }
    let message = ModelError::Invalid {
        errors: errors.clone(),
    }
    .to_string();
    assert!(message.starts_with(&format!("{} error(s) occurred:\n\t* ", errors.len())));
}

#[test]
fn nodes_and_allocations_use_nomads_names() {
    let node: Node = serde_json::from_str(
        r#"{"ID": "n1", "SecretID": "s", "Datacenter": "dc1", "Name": "host", "HTTPAddr": "10.0.0.5:4646",
            "TLSEnabled": false, "Attributes": {"kernel.name": "linux", "unique.hostname": "host"},
            "NodeResources": {"Cpu": {"CpuShares": 4000, "TotalCpuCores": 4, "ReservableCpuCores": [0,1,2,3]},
                              "Memory": {"MemoryMB": 8000}, "Disk": {"DiskMB": 50000}, "Networks": [],
                              "Devices": null, "MinDynamicPort": 20000, "MaxDynamicPort": 32000},
            "ReservedResources": {"Cpu": {"CpuShares": 100}, "Memory": {"MemoryMB": 256}, "Disk": {"DiskMB": 0}},
            "Drivers": {"exec": {"Attributes": {"driver.exec": "1"}, "Detected": true, "Healthy": true,
                        "HealthDescription": "Healthy", "UpdateTime": "2024-05-01T10:00:00.5+02:00"}},
            "Status": "ready", "SchedulingEligibility": "eligible", "DrainStrategy": null,
            "NodeClass": "", "NodePool": "default", "Events": null, "HostVolumes": null}"#,
    )
    .unwrap();
    assert_eq!(node.status, NodeStatus::Ready);
    assert_eq!(node.node_resources.cpu.cpu_shares, 4000);
    assert_eq!(node.reserved_resources.memory.memory_mb, 256);
    assert_eq!(
        node.drivers["exec"].update_time,
        Timestamp::parse_rfc3339("2024-05-01T08:00:00.5Z").unwrap()
    );
    let out = serde_json::to_value(&node).unwrap();
    assert_eq!(out["HTTPAddr"], "10.0.0.5:4646");
    assert_eq!(out["NodeResources"]["Memory"]["MemoryMB"], 8000);
    assert_eq!(
        out["Drivers"]["exec"]["UpdateTime"],
        "2024-05-01T08:00:00.5Z"
    );
    assert_eq!(bincode_round_trip(&node), node);

    let alloc: Allocation = serde_json::from_str(
        r#"{"ID": "a1", "EvalID": "e1", "NodeID": "n1", "JobID": "j", "JobVersion": 3,
            "TaskGroup": "g", "DesiredStatus": "run", "ClientStatus": "running",
            "Resources": {"CPU": 250, "MemoryMB": 128}, "FollowupEvalID": "",
            "TaskStates": {"t": {"State": "running", "Failed": false, "Restarts": 1,
                "StartedAt": "2024-01-01T00:00:00Z", "FinishedAt": "0001-01-01T00:00:00Z",
                "LastRestart": null, "Events": [{"Type": "Started", "Time": 1704067200000000000,
                "ExitCode": 0, "Details": {"k": "v"}}]}},
            "RescheduleTracker": null, "Job": {"ID": "ignored: allocations do not embed jobs"}}"#,
    )
    .unwrap();
    assert_eq!(alloc.job_version, 3);
    assert_eq!(alloc.resources.disk_mb, 0);
    assert_eq!(alloc.task_states["t"].restarts, 1);
    assert!(alloc.task_states["t"].last_restart.is_zero());
    let out = serde_json::to_value(&alloc).unwrap();
    for key in [
        "ID",
        "EvalID",
        "NodeID",
        "JobID",
        "FollowupEvalID",
        "AllocModifyIndex",
    ] {
        assert!(out.get(key).is_some(), "{key} missing");
    }
    assert!(out.get("Job").is_none());
    assert_eq!(out["TaskStates"]["t"]["StartedAt"], "2024-01-01T00:00:00Z");
    assert_eq!(bincode_round_trip(&alloc), alloc);
}

#[test]
fn wrong_types_are_clear_errors() {
    let err = serde_json::from_str::<Job>(r#"{"ID": "x", "Type": "sometimes"}"#).unwrap_err();
    assert!(
        err.to_string().contains("unknown variant `sometimes`"),
        "{err}"
    );
    let err = serde_json::from_str::<Job>(r#"{"ID": "x", "Priority": -1}"#).unwrap_err();
    assert!(err.to_string().contains("invalid value"), "{err}");
    let err = serde_json::from_str::<Evaluation>(r#"{"WaitUntil": "yesterday"}"#).unwrap_err();
    assert!(err.to_string().contains("invalid RFC 3339 time"), "{err}");
}

/// A group's `disconnect` block in Nomad's JSON shape; the deprecated
/// `MaxClientDisconnect` becomes its `LostAfter`; bad values and job types are named.
#[test]
fn the_disconnect_block_decodes_and_is_checked() {
    let group = |extra: Value, job_type: &str| {
        let mut g = json!({"Name": "g", "Tasks": [{"Name": "t", "Driver": "mock"}]});
        for (k, v) in extra.as_object().unwrap() {
            g[k] = v.clone();
        }
        let mut job: Job = serde_json::from_value(json!({
            "ID": "j", "Type": job_type, "Datacenters": ["dc1"], "TaskGroups": [g]
        }))
        .unwrap();
        job.canonicalize();
        job
    };
    let job = group(
        json!({"Disconnect": {"LostAfter": 60_000_000_000u64, "Replace": false,
                              "Reconcile": "longest_running", "StopOnClientAfter": null}}),
        "service",
    );
    job.validate().unwrap();
    let d = job.task_groups[0].disconnect.clone().unwrap();
    assert_eq!(
        (d.lost_after, d.replace(), d.reconcile()),
        (60_000_000_000, false, "longest_running")
    );
    assert_eq!(bincode_round_trip(&job), job);

    let job = group(json!({"MaxClientDisconnect": 30_000_000_000u64}), "batch");
    job.validate().unwrap();
    assert_eq!(job.task_groups[0].lost_after(), 30_000_000_000);
    assert_eq!(job.task_groups[0].max_client_disconnect, None, "folded in");

    let refused = |job: Job| match job.validate() {
        Err(ModelError::Invalid { errors }) => errors.join("\n"),
        other => panic!("expected a refusal, got {other:?}"),
    };
    let text = refused(group(
        json!({"Disconnect": {"Reconcile": "coin_flip", "LostAfter": 1,
                              "StopOnClientAfter": 1}}),
        "service",
    ));
    assert!(
        text.contains("disconnect.reconcile \"coin_flip\""),
        "{text}"
    );
    assert!(text.contains("cannot both be set"), "{text}");
    let text = refused(group(json!({"Disconnect": {"LostAfter": 1}}), "system"));
    assert!(
        text.contains(
            "disconnect: teamster supports the block for service and batch jobs, not system"
        ),
        "{text}"
    );

    // Nomad's deprecated `prevent_reschedule_on_lost` is `replace = false`, unless the
    // group's block says; a system job is never rescheduled, so it changes nothing there.
    let job = group(json!({"PreventRescheduleOnLost": true}), "service");
    job.validate().unwrap();
    assert!(!job.task_groups[0].replaces_lost());
    assert!(!job.task_groups[0].prevent_reschedule_on_lost, "folded in");
    let job = group(
        json!({"PreventRescheduleOnLost": true, "Disconnect": {"Replace": true}}),
        "batch",
    );
    assert!(job.task_groups[0].replaces_lost());
    let job = group(json!({"PreventRescheduleOnLost": true}), "system");
    job.validate().unwrap();
    assert!(job.task_groups[0].disconnect.is_none());
    assert!(group(json!({}), "service").task_groups[0].replaces_lost());
}

/// Nomad's group `max_run_duration`: batch and sysbatch jobs only, more than zero.
#[test]
fn max_run_duration_is_for_batch_jobs() {
    let job = |ty: &str, limit: u64| {
        let mut job: Job = serde_json::from_value(json!({
            "ID": "j", "Type": ty, "Datacenters": ["dc1"],
            "TaskGroups": [{"Name": "g", "MaxRunDuration": limit,
                            "Tasks": [{"Name": "t", "Driver": "mock"}]}]
        }))
        .unwrap();
        job.canonicalize();
        job
    };
    for ty in ["batch", "sysbatch"] {
        let j = job(ty, 60_000_000_000);
        j.validate().unwrap();
        assert_eq!(j.task_groups[0].max_run_duration, Some(60_000_000_000));
        assert_eq!(bincode_round_trip(&j), j);
    }
    for ty in ["service", "system"] {
        let err = job(ty, 1).validate().unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "Job type \"{ty}\" does not allow max_run_duration"
            )),
            "{err}"
        );
    }
    let err = job("batch", 0).validate().unwrap_err().to_string();
    assert!(
        err.contains("MaxRunDuration must be greater than zero"),
        "{err}"
    );
}

/// Nomad's `cores`: a task asks for whole cores or for MHz, not both; with `cores` the
/// default `cpu` is not taken.
#[test]
fn a_task_asks_for_cores_or_cpu() {
    let job = |resources: Value| {
        let mut job: Job = serde_json::from_value(json!({
            "ID": "j", "Type": "service", "Datacenters": ["dc1"],
            "TaskGroups": [{"Name": "g",
                            "Tasks": [{"Name": "t", "Driver": "mock", "Resources": resources}]}]
        }))
        .unwrap();
        job.canonicalize();
        job
    };
    let j = job(json!({"Cores": 2, "MemoryMB": 64}));
    j.validate().unwrap();
    let r = j.task_groups[0].tasks[0].resources;
    assert_eq!((r.cpu, r.cores), (0, 2));
    assert_eq!(bincode_round_trip(&j), j);
    let err = job(json!({"Cores": 2, "CPU": 500}))
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("Task can only ask for 'cpu' or 'cores' resource, not both."),
        "{err}"
    );
    let err = job(json!({"CPU": 0})).validate().unwrap_err().to_string();
    assert!(err.contains("minimum CPU value is 1"), "{err}");
}

/// Nomad's `memory_max = -1`: no hard limit; read and written back as -1, kept apart from
/// the "larger than memory" rule; any other negative value is refused.
#[test]
fn memory_max_of_minus_one_is_no_limit() {
    let job = |max: Value| {
        serde_json::from_value::<Job>(json!({
            "ID": "j", "Type": "service", "Datacenters": ["dc1"],
            "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "mock",
                "Resources": {"CPU": 100, "MemoryMB": 256, "MemoryMaxMB": max}}]}]
        }))
    };
    let mut j = job(json!(-1)).unwrap();
    j.canonicalize();
    j.validate().unwrap();
    let r = j.task_groups[0].tasks[0].resources;
    assert_eq!(r.memory_max_mb, teamster_storage::model::MEMORY_NO_LIMIT);
    let out = serde_json::to_value(&j).unwrap();
    assert_eq!(
        out["TaskGroups"][0]["Tasks"][0]["Resources"]["MemoryMaxMB"],
        -1
    );
    assert_eq!(bincode_round_trip(&j), j);
    assert_eq!(
        j.memory_max_warnings(false).len(),
        1,
        "ignored without oversubscription, with Nomad's warning"
    );
    let err = job(json!(-2)).unwrap_err().to_string();
    assert!(err.contains("MemoryMaxMB -2"), "{err}");
}
