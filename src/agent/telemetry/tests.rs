use std::collections::BTreeSet;
use std::path::Path;

use super::*;

/// Every `.rs` file under `dir`, with its text.
fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("a source file");
            out.push((path.display().to_string(), text));
        }
    }
}

/// The metric names the sources write: literals in `counter!`/`gauge!`/`histogram!` (and
/// the autoscaler's `count`), and constants named in them.
fn names_in_sources() -> BTreeSet<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    sources(&root.join("src"), &mut files);
    sources(&root.join("storage/src"), &mut files);
    let literal = regex::Regex::new(
        r#"(?:counter|gauge|histogram)!\(\s*"([^"]+)"|\bcount\(\s*"(teamster_[^"]+)""#,
    )
    .unwrap();
    let by_const =
        regex::Regex::new(r#"(?:counter|gauge|histogram)!\(\s*(?:\w+::)*([A-Z][A-Z_]+)\b"#)
            .unwrap();
    let consts = regex::Regex::new(r#"const ([A-Z][A-Z_]+): &str = "(teamster[^"]*)""#).unwrap();
    let mut named = BTreeSet::new();
    let mut constants = std::collections::BTreeMap::new();
    let mut out = BTreeSet::new();
    for (path, text) in &files {
        if path.ends_with("telemetry/tests.rs") {
            continue;
        }
        for c in literal.captures_iter(text) {
            let name = c.get(1).or(c.get(2)).unwrap().as_str();
            if name.starts_with("teamster") {
                out.insert(name.to_string());
            }
        }
        for c in by_const.captures_iter(text) {
            named.insert(c[1].to_string());
        }
        for c in consts.captures_iter(text) {
            constants.insert(c[1].to_string(), c[2].to_string());
        }
    }
    for name in named {
        if let Some(value) = constants.get(&name) {
            out.insert(value.clone());
        }
    }
    out
}

#[test]
fn every_metric_the_code_writes_has_help_text_and_every_listed_one_is_written() {
    let written = names_in_sources();
    assert!(written.len() > 80, "the scan found too few: {written:?}");
    let listed: BTreeSet<String> = HELP.iter().map(|(_, n, _)| n.to_string()).collect();
    let missing: Vec<_> = written.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "written without help text in HELP: {missing:?}"
    );
    let gone: Vec<_> = listed.difference(&written).collect();
    assert!(gone.is_empty(), "listed in HELP, written nowhere: {gone:?}");
    for (kind, name, help) in HELP {
        assert!(!help.is_empty(), "{name}");
        let exposed = name.replace('.', "_");
        assert_eq!(
            *kind == Kind::Counter,
            exposed.ends_with("_total"),
            "{name}: counters, and only counters, end with _total"
        );
    }
}

#[test]
fn every_alias_names_a_listed_metric_of_a_fitting_kind() {
    for (kind, name, _) in HELP {
        match alias(name) {
            Some(Alias::Millis(_) | Alias::MillisByLabel(..) | Alias::Count(_)) => {
                assert_eq!(*kind, Kind::Histogram, "{name}")
            }
            Some(Alias::SameByLabel(..)) => assert_eq!(*kind, Kind::Gauge, "{name}"),
            Some(Alias::Same(n)) => {
                assert_ne!(*kind, Kind::Histogram, "{name}");
                assert!(n.starts_with("nomad_"), "{n}");
            }
            None => {}
        }
    }
}

/// The value of the sample `line_start` (name and labels, up to the value) in `text`.
fn sample(text: &str, line_start: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(line_start))
        .and_then(|v| v.trim().parse().ok())
}

#[test]
fn nomad_names_carry_nomad_units_and_help_text_beside_teamster_s() {
    static TEST: Settings = Settings::new();
    TEST.set(true, "node-a".into());
    let prometheus = PrometheusBuilder::new().build_recorder();
    let handle = prometheus.handle();
    let recorder = NomadNames::new(prometheus, &TEST);
    recorder.describe_all();
    metrics::with_local_recorder(&recorder, || {
        metrics::histogram!("teamster_plan_apply_seconds").record(0.25);
        metrics::histogram!("teamster_worker_schedule_seconds", "type" => "service").record(0.5);
        metrics::gauge!("teamster.broker.ready", "scheduler" => "batch").set(3.0);
        metrics::gauge!("teamster.broker.total_ready").set(4.0);
        metrics::counter!("teamster_plan_node_rejected_total").increment(2);
        metrics::counter!("teamster_raft_applies_total").increment(2);
        metrics::histogram!("teamster_worker_schedule_seconds", "type" => "batch_round")
            .record(0.1);
        metrics::counter!("teamster_dispatches_total").increment(1);
    });
    let text = handle.render();
    let h = "host=\"node-a\"".to_string();
    // Teamster's own, in seconds.
    assert_eq!(
        sample(&text, "teamster_plan_apply_seconds_sum "),
        Some(0.25),
        "{text}"
    );
    // Nomad's, in milliseconds, with the host label.
    let with = |extra: &str| {
        let labels: Vec<&str> = [h.as_str(), extra]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect();
        if labels.is_empty() {
            String::new()
        } else {
            format!("{{{}}}", labels.join(","))
        }
    };
    assert_eq!(
        sample(&text, &format!("nomad_nomad_plan_apply_sum{} ", with(""))),
        Some(250.0),
        "{text}"
    );
    assert!(
        text.contains("# TYPE nomad_nomad_plan_apply summary"),
        "{text}"
    );
    assert!(
        text.contains("# HELP nomad_nomad_plan_apply Time to commit a checked plan through raft. (Nomad's name; in milliseconds)"),
        "{text}"
    );
    // The scheduler type goes into the name, as Nomad writes it.
    assert_eq!(
        sample(
            &text,
            &format!(
                "nomad_nomad_worker_invoke_scheduler_service_sum{} ",
                with("")
            )
        ),
        Some(500.0),
        "{text}"
    );
    assert!(
        text.contains("# HELP nomad_nomad_worker_invoke_scheduler_service "),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            &format!("nomad_nomad_broker_batch_ready{} ", with(""))
        ),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            &format!("nomad_nomad_broker_total_ready{} ", with(""))
        ),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "teamster_broker_total_ready "),
        Some(4.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            &format!("nomad_nomad_plan_node_rejected{} ", with(""))
        ),
        Some(2.0),
        "{text}"
    );
    // A batched scheduling round has no Nomad name.
    assert!(!text.contains("invoke_scheduler_batch_round"), "{text}");
    assert!(
        text.contains("teamster_worker_schedule_seconds_count{type=\"batch_round\"} 1"),
        "{text}"
    );
    assert_eq!(
        sample(&text, &format!("nomad_raft_apply{} ", with(""))),
        Some(2.0),
        "{text}"
    );
    // A metric without a Nomad counterpart is written once.
    assert!(text.contains("teamster_dispatches_total 1"), "{text}");
    assert!(!text.contains("nomad_nomad_dispatch"), "{text}");
    assert!(
        text.contains("# HELP teamster_dispatches_total Parameterized jobs dispatched."),
        "{text}"
    );
}

#[test]
fn disable_hostname_leaves_the_host_label_off_and_nomad_names_false_leaves_them_out() {
    static TEST: Settings = Settings::new();
    let prometheus = PrometheusBuilder::new().build_recorder();
    let handle = prometheus.handle();
    let recorder = NomadNames::new(prometheus, &TEST);
    TEST.set(true, String::new());
    metrics::with_local_recorder(&recorder, || {
        metrics::gauge!("teamster_plan_queue_depth").set(5.0);
    });
    let text = handle.render();
    assert_eq!(
        sample(&text, "nomad_nomad_plan_queue_depth "),
        Some(5.0),
        "{text}"
    );
    assert!(!text.contains("host="), "{text}");
    // Changed at run time: the handles made before are made again.
    TEST.set(false, "node-b".into());
    metrics::with_local_recorder(&recorder, || {
        metrics::gauge!("teamster_plan_queue_depth").set(6.0);
    });
    let text = handle.render();
    assert_eq!(
        sample(&text, "teamster_plan_queue_depth "),
        Some(6.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "nomad_nomad_plan_queue_depth "),
        Some(5.0),
        "{text}"
    );
    assert!(!text.contains("node-b"), "{text}");
}
