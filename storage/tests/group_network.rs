//! A group network's `hostname`, `dns` and `cni` blocks and its `cni/<name>` mode, as the
//! servers check them: the hostname names a namespaced allocation (bridge or cni mode) and
//! must be a DNS name unless it interpolates (the client checks it then); dns servers are
//! addresses; both reach `exec` and `docker` tasks, so a group of only `raw_exec` tasks
//! (which see the host's own files) is refused with them; cni args hold no `;`.

mod common;

use common::validation_errors as errors;

use serde_json::{json, Value};
use teamster_storage::model::{is_dns_name, Job};

/// A job whose one group has `network` (merged over bridge mode with one port) and tasks
/// of `drivers`.
fn job(network: Value, drivers: &[&str]) -> Job {
    let mut n = json!({"Mode": "bridge", "DynamicPorts": [{"Label": "http", "To": 8080}]});
    for (k, v) in network.as_object().unwrap() {
        n[k] = v.clone();
    }
    let tasks: Vec<Value> = drivers
        .iter()
        .enumerate()
        .map(|(i, d)| json!({"Name": format!("t{i}"), "Driver": d, "Config": {"command": "true"}}))
        .collect();
    common::job_json(json!({
        "ID": "j", "Name": "j", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Networks": [n], "Tasks": tasks}]
    }))
}

#[test]
fn hostname_and_dns_are_read_from_nomad_s_json_and_accepted() {
    let j = job(
        json!({"Hostname": "web-${NOMAD_ALLOC_INDEX}",
               "DNS": {"Servers": ["10.0.0.2", "fd00::53"], "Searches": ["svc.test"],
                       "Options": ["ndots:2"]}}),
        &["exec", "raw_exec"],
    );
    assert_eq!(errors(&j), "");
    let net = &j.task_groups[0].networks[0];
    assert_eq!(net.hostname, "web-${NOMAD_ALLOC_INDEX}");
    let dns = net.dns.as_ref().unwrap();
    assert_eq!(dns.servers, ["10.0.0.2", "fd00::53"]);
    assert_eq!(dns.searches, ["svc.test"]);
    assert_eq!(dns.options, ["ndots:2"]);
    // An empty block is a block: the node's own file, copied.
    let j = job(json!({"DNS": {}}), &["docker"]);
    assert_eq!(errors(&j), "");
    assert!(j.task_groups[0].networks[0].dns.is_some());
}

#[test]
fn a_bad_hostname_or_server_is_refused_with_nomad_s_words() {
    let e = errors(&job(json!({"Hostname": "web..0"}), &["exec"]));
    assert!(e.contains("Hostname is not a valid DNS name"), "{e}");
    let e = errors(&job(json!({"Hostname": "web 0"}), &["exec"]));
    assert!(e.contains("Hostname is not a valid DNS name"), "{e}");
    let long = "a".repeat(63) + ".b";
    let e = errors(&job(json!({ "Hostname": long }), &["exec"]));
    assert!(e.contains("at most 64"), "{e}");
    let e = errors(&job(
        json!({"DNS": {"Servers": ["dns.example"]}}),
        &["exec"],
    ));
    assert!(
        e.contains("dns server \"dns.example\" is not an IP address"),
        "{e}"
    );
    // Interpolated values are the client's to check.
    let j = job(
        json!({"DNS": {"Servers": ["${meta.dns}"]}, "Hostname": "${meta.name}"}),
        &["exec"],
    );
    assert_eq!(errors(&j), "");
}

#[test]
fn a_hostname_needs_bridge_mode_and_raw_exec_only_groups_refuse_both() {
    let e = errors(&job(json!({"Mode": "host", "Hostname": "web"}), &["exec"]));
    assert!(e.contains("needs network mode \"bridge\""), "{e}");
    for network in [
        json!({"Hostname": "web"}),
        json!({"DNS": {"Servers": ["10.0.0.2"]}}),
    ] {
        let e = errors(&job(network.clone(), &["raw_exec", "raw_exec"]));
        assert!(
            e.contains("applies to exec and docker tasks; every task of this group is raw_exec"),
            "{network}: {e}"
        );
        assert_eq!(errors(&job(network, &["raw_exec", "docker"])), "");
    }
    // dns works in host mode too (Nomad's exec and docker drivers bind it in any mode).
    let j = job(
        json!({"Mode": "host", "DNS": {"Searches": ["svc"]}}),
        &["exec"],
    );
    assert_eq!(errors(&j), "");
}

#[test]
fn dns_names_are_labels_of_letters_digits_dashes_and_underscores() {
    for good in ["web", "web-0", "a.b.c", "svc_1.example.", "x"] {
        assert!(is_dns_name(good), "{good}");
    }
    let long_label = "a".repeat(64);
    for bad in ["", ".", "a..b", "we b", "a/b", long_label.as_str()] {
        assert!(!is_dns_name(bad), "{bad}");
    }
}

#[test]
fn a_named_cni_network_is_a_namespaced_mode_and_cni_args_are_checked() {
    let j = job(
        json!({"Mode": "cni/lan", "Hostname": "web", "CNI": {"Args": {"IgnoreUnknown": "1"}}}),
        &["exec"],
    );
    assert_eq!(errors(&j), "");
    let net = &j.task_groups[0].networks[0];
    assert_eq!(net.cni.as_ref().unwrap().args["IgnoreUnknown"], "1");
    let e = errors(&job(json!({"Mode": "cni/"}), &["exec"]));
    assert!(e.contains("network mode \"cni/\" is not supported"), "{e}");
    let e = errors(&job(
        json!({"Mode": "cni/lan", "CNI": {"Args": {"a;b": "c", "d": "e;f", "g": "h=i"}}}),
        &["exec"],
    ));
    assert!(
        e.contains("invalid ';' character in CNI arg key \"a;b\""),
        "{e}"
    );
    assert!(
        e.contains("invalid '=' character in CNI arg value \"h=i\""),
        "{e}"
    );
    assert!(
        e.contains("invalid ';' character in CNI arg value \"e;f\""),
        "{e}"
    );
    // No plugin runs in host mode: its args would not be acted on.
    let e = errors(&job(
        json!({"Mode": "host", "CNI": {"Args": {"a": "b"}}}),
        &["exec"],
    ));
    assert!(e.contains("network cni args need network mode"), "{e}");
}
