//! A native service check's `on_update` and `initial_status`, as Nomad reads them: a check
//! takes its service's `on_update` (`require_healthy` by default); `ignore` makes it a
//! readiness check, which cannot restart its task; `ignore_warnings` is Consul's and
//! refused for native checks; `initial_status` takes Consul's three values. And a system
//! job's `update` block (last test) refuses the health settings it would not act on.

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
    let mut job: Job = serde_json::from_value(json!({
        "ID": "j", "Name": "j", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1,
            "Networks": [{"DynamicPorts": [{"Label": "http"}]}],
            "Services": [s],
            "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "true"}}]}]
    }))
    .unwrap();
    job.canonicalize();
    job
}

fn errors(job: &Job) -> String {
    job.validate()
        .map(|()| String::new())
        .unwrap_or_else(|e| e.to_string())
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

/// A system job's update block takes nothing it would not act on: its health settings other
/// than Nomad's defaults are refused by name (nothing waits for health in a system roll).
#[test]
fn a_system_job_s_update_refuses_health_settings() {
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
    let e = errors(&job(
        json!({"MaxParallel": 1, "MinHealthyTime": 1_000_000_000u64}),
    ));
    assert!(
        e.contains("min_healthy_time is not supported for system jobs"),
        "{e}"
    );
}
