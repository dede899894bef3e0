//! A native service check's `on_update` and `initial_status`, as Nomad reads them: a check
//! takes its service's `on_update` (`require_healthy` by default); `ignore` makes it a
//! readiness check, which cannot restart its task; `ignore_warnings` is Consul's and
//! refused for native checks; `initial_status` takes Consul's three values. A Consul
//! service's checks may be `script` and `grpc` with Consul's thresholds; a native one's are
//! refused with Nomad's words. And a system
//! job's `update` block (last test) refuses the health settings it would not act on.

mod common;

use common::validation_errors as errors;

use serde_json::{json, Value};
use teamster_storage::model::Job;

/// A job with one native service of `service` (merged over the defaults) whose one check
/// is `check` (merged over an http check's defaults); canonicalized.
fn job(service: Value, check: Value) -> Job {
    let mut c = json!({"Type": "http", "Path": "/health", "Interval": 10_000_000_000u64,
                       "Timeout": 2_000_000_000u64});
    for (k, v) in check.as_object().unwrap() {
        c[k] = v.clone();
    }
    let mut s = json!({"Name": "web", "Provider": "nomad", "PortLabel": "http", "Checks": [c]});
    for (k, v) in service.as_object().unwrap() {
        s[k] = v.clone();
    }
    common::job_json(json!({
        "ID": "j", "Name": "j", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1,
            "Networks": [{"DynamicPorts": [{"Label": "http"}]}],
            "Services": [s],
            "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "true"}}]}]
    }))
}

#[test]
fn a_check_takes_its_service_s_on_update_and_require_healthy_by_default() {
    let j = job(json!({}), json!({}));
    let service = &j.task_groups[0].services[0];
    assert_eq!(service.on_update, "require_healthy");
    assert_eq!(service.checks[0].on_update, "require_healthy");
    assert!(!service.checks[0].is_readiness());
    assert_eq!(errors(&j), "");

    let j = job(json!({"OnUpdate": "ignore"}), json!({}));
    assert!(j.task_groups[0].services[0].checks[0].is_readiness());
    assert_eq!(errors(&j), "");

    // The check's own wins.
    let j = job(
        json!({"OnUpdate": "ignore"}),
        json!({"OnUpdate": "require_healthy"}),
    );
    assert!(!j.task_groups[0].services[0].checks[0].is_readiness());
}

#[test]
fn nomad_s_refusals_for_on_update_and_initial_status() {
    let e = errors(&job(json!({}), json!({"OnUpdate": "ignore_warnings"})));
    assert!(
        e.contains("on_update may only be set to ignore_warnings for Consul service checks"),
        "{e}"
    );
    let e = errors(&job(json!({}), json!({"OnUpdate": "sometimes"})));
    assert!(e.contains("on_update must be"), "{e}");
    let e = errors(&job(json!({"OnUpdate": "bogus", "Checks": []}), json!({})));
    assert!(
        e.contains("Service on_update must be"),
        "a service without checks too: {e}"
    );
    // Consul's value is Consul's: a Consul service may say it (and waits for Consul).
    let consul = job(
        json!({"Provider": "consul", "OnUpdate": "ignore_warnings"}),
        json!({}),
    );
    assert_eq!(
        consul.task_groups[0].services[0].checks[0].on_update,
        "ignore_warnings"
    );
    assert!(
        !errors(&consul).contains("on_update"),
        "{}",
        errors(&consul)
    );
    // A service's check_restart is its checks' too.
    let e = errors(&job(
        json!({"OnUpdate": "ignore", "CheckRestart": {"Limit": 0}}),
        json!({}),
    ));
    assert!(e.contains("not compatible with check_restart"), "{e}");
    let e = errors(&job(
        json!({}),
        json!({"OnUpdate": "ignore", "CheckRestart": {"Limit": 3}}),
    ));
    assert!(
        e.contains("on_update value \"ignore\" is not compatible with check_restart"),
        "{e}"
    );
    for ok in ["passing", "warning", "critical"] {
        assert_eq!(
            errors(&job(json!({}), json!({"InitialStatus": ok}))),
            "",
            "{ok}"
        );
    }
    let e = errors(&job(json!({}), json!({"InitialStatus": "green"})));
    assert!(e.contains("invalid initial check state (green)"), "{e}");
}

/// A system job's update block is Nomad's, canaries as a percentage of the nodes: health
/// settings are taken (its deployment waits for health) and checked as a service job's are.
#[test]
fn a_system_job_s_update_takes_health_settings_and_canary_percentages() {
    let job = |update: Value| {
        let mut job: Job = serde_json::from_value(json!({
            "ID": "s", "Name": "s", "Type": "system", "Datacenters": ["dc1"],
            "Update": update,
            "TaskGroups": [{"Name": "g", "Count": 1,
                "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "true"}}]}]
        }))
        .unwrap();
        job.canonicalize();
        job
    };
    assert_eq!(
        errors(&job(json!({"MaxParallel": 2, "Stagger": 5_000_000_000u64}))),
        ""
    );
    assert_eq!(
        errors(&job(json!({
            "MaxParallel": 1, "Canary": 50, "AutoPromote": true, "AutoRevert": true,
            "MinHealthyTime": 1_000_000_000u64, "HealthyDeadline": 60_000_000_000u64
        }))),
        ""
    );
    let e = errors(&job(json!({
        "MaxParallel": 1, "MinHealthyTime": 90_000_000_000u64, "HealthyDeadline": 60_000_000_000u64
    })));
    assert!(
        e.contains("min_healthy_time must be less than healthy_deadline"),
        "{e}"
    );
}

/// The same job with a group service in Consul (whose checks teamster keeps, never runs).
fn consul_job(service: Value, check: Value) -> Job {
    let mut s = json!({"Provider": "consul"});
    for (k, v) in service.as_object().unwrap() {
        s[k] = v.clone();
    }
    job(s, check)
}

#[test]
fn a_consul_service_keeps_script_and_grpc_checks_and_consul_s_thresholds() {
    let j = consul_job(
        json!({}),
        json!({"Type": "script", "Command": "/bin/check", "Args": ["-q"], "TaskName": "t",
               "Path": "", "SuccessBeforePassing": 0, "FailuresBeforeCritical": 0,
               "Notes": "runs in t"}),
    );
    assert_eq!(errors(&j), "");
    let check = &j.task_groups[0].services[0].checks[0];
    assert_eq!(
        (check.command.as_str(), check.args.as_slice()),
        ("/bin/check", ["-q".to_string()].as_slice())
    );
    let j = consul_job(
        json!({"CheckRestart": {"Limit": 3, "IgnoreWarnings": true}}),
        json!({"Type": "grpc", "GRPCService": "health", "GRPCUseTLS": true,
               "TLSServerName": "api.internal", "TLSSkipVerify": true,
               "SuccessBeforePassing": 2, "FailuresBeforeCritical": 3,
               "FailuresBeforeWarning": 1, "OnUpdate": "ignore_warnings"}),
    );
    assert_eq!(errors(&j), "");
    let check = &j.task_groups[0].services[0].checks[0];
    assert_eq!(
        (
            check.grpc_service.as_str(),
            check.grpc_use_tls,
            check.success_before_passing
        ),
        ("health", true, 2)
    );
    let json = serde_json::to_value(check).unwrap();
    assert_eq!(json["GRPCService"], "health");
    assert_eq!(json["TLSServerName"], "api.internal");

    // Consul's own rules.
    let e = errors(&consul_job(
        json!({}),
        json!({"Type": "script", "Path": ""}),
    ));
    assert!(
        e.contains("script type must have a valid script path"),
        "{e}"
    );
    assert!(
        e.contains("Service [g]->web or Check service: \"web\" check must specify task parameter"),
        "{e}"
    );
    let e = errors(&consul_job(
        json!({}),
        json!({"Type": "script", "Command": "x", "TaskName": "t",
               "SuccessBeforePassing": 1}),
    ));
    assert!(
        e.contains("success_before_passing not supported for check of type \"script\""),
        "{e}"
    );
    let e = errors(&consul_job(
        json!({}),
        json!({"Type": "script", "Command": "x", "TaskName": "nope"}),
    ));
    assert!(e.contains("refers to non-existent task nope"), "{e}");
    let e = errors(&consul_job(json!({}), json!({"Notes": "n".repeat(256)})));
    assert!(
        e.contains("notes must not be longer than 255 characters"),
        "{e}"
    );
    let e = errors(&consul_job(
        json!({"CheckRestart": {"Limit": 3}}),
        json!({"OnUpdate": "ignore_warnings"}),
    ));
    assert!(
        e.contains("not supported with check_restart ignore_warnings"),
        "{e}"
    );
    let e = errors(&consul_job(json!({}), json!({"Type": "docker"})));
    assert!(
        e.contains("invalid check type (\"docker\"), must be one of grpc, tcp, http, script"),
        "{e}"
    );
}

#[test]
fn a_native_service_refuses_consul_s_check_kinds_and_thresholds_with_nomad_s_words() {
    let e = errors(&job(json!({}), json!({"Type": "script", "Command": "x"})));
    assert!(
        e.contains("invalid check type (\"script\"), must be one of tcp, http"),
        "{e}"
    );
    let e = errors(&job(json!({}), json!({"Type": "grpc"})));
    assert!(e.contains("invalid check type (\"grpc\")"), "{e}");
    for (field, name) in [
        ("SuccessBeforePassing", "success_before_passing"),
        ("FailuresBeforeCritical", "failures_before_critical"),
        ("FailuresBeforeWarning", "failures_before_warning"),
    ] {
        let e = errors(&job(json!({}), json!({ field: 2 })));
        assert!(
            e.contains(&format!("{name} may only be set for Consul service checks")),
            "{e}"
        );
    }
    let e = errors(&job(json!({}), json!({"TLSServerName": "x"})));
    assert!(
        e.contains("tls_server_name may only be set for Consul service checks"),
        "{e}"
    );
    let e = errors(&job(
        json!({"CheckRestart": {"Limit": 1, "IgnoreWarnings": true}}),
        json!({}),
    ));
    assert!(
        e.contains("ignore_warnings on check_restart only supported for Consul service checks"),
        "{e}"
    );
    // As in Nomad: accepted, and a plain-http check has no certificate to skip.
    assert_eq!(errors(&job(json!({}), json!({"TLSSkipVerify": true}))), "");
    // A group service's check may only name a task of its group.
    let e = errors(&job(json!({}), json!({"TaskName": "nope"})));
    assert!(e.contains("refers to non-existent task nope"), "{e}");
}
