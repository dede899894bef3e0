//! The JSON form of `/v1/metrics` (Nomad's default, go-metrics' in-memory sink layout:
//! `{Timestamp, Gauges, Counters, Samples, Points}`), made from the Prometheus text the
//! exporter renders, so both forms show the same figures. Gauges carry `Value`; counters
//! (cumulative since the agent started, not per interval as go-metrics reports them) carry
//! `Count` (an integer, as go-metrics has it) and `Sum`, both the total; summaries and
//! histograms become samples with an integer `Count`,
//! `Sum` and `Mean`. Every entry has its `Labels`.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

/// One sample line: name, labels, value.
fn sample(line: &str) -> Option<(String, BTreeMap<String, String>, f64)> {
    let (head, value) = line.rsplit_once(' ')?;
    let value: f64 = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    let (name, labels) = match head.split_once('{') {
        None => (head.to_string(), BTreeMap::new()),
        Some((name, rest)) => (name.to_string(), labels(rest.strip_suffix('}')?)?),
    };
    Some((name, labels, value))
}

/// `a="x",b="y \"q\""` → the map.
fn labels(text: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => {
                    end = Some(i);
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(key.trim_start_matches(',').to_string(), value);
        rest = after[end? + 1..].trim_start_matches(',');
    }
    Some(out)
}

/// A count as the integer go-metrics' `Count` is (Nomad's clients decode it into an `int`).
fn whole(count: f64) -> u64 {
    if count.is_finite() && count > 0.0 {
        count.round() as u64
    } else {
        0
    }
}

/// The JSON metrics for Prometheus `text`, stamped `timestamp`.
pub fn from_prometheus(text: &str, timestamp: &str) -> Value {
    let mut kinds: BTreeMap<String, String> = BTreeMap::new();
    let mut gauges = Vec::new();
    let mut counters = Vec::new();
    // Summaries and histograms: (name, labels without quantile/le) → (count, sum).
    let mut samples: BTreeMap<(String, BTreeMap<String, String>), (f64, f64)> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some((name, kind)) = rest.split_once(' ') {
                kinds.insert(name.to_string(), kind.trim().to_string());
            }
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let Some((name, labels, value)) = sample(line) else {
            continue;
        };
        let base = |suffix: &str| name.strip_suffix(suffix).map(str::to_string);
        let family = [("_count", 0), ("_sum", 1), ("_bucket", 2)]
            .iter()
            .find_map(|(s, k)| base(s).map(|b| (b, *k)))
            .filter(|(b, _)| {
                matches!(
                    kinds.get(b).map(String::as_str),
                    Some("summary" | "histogram")
                )
            });
        match (kinds.get(&name).map(String::as_str), family) {
            (_, Some((base, part))) => {
                let entry = samples.entry((base, labels)).or_insert((0.0, 0.0));
                match part {
                    0 => entry.0 = value,
                    1 => entry.1 = value,
                    _ => {}
                }
            }
            (Some("counter"), None) => counters.push(json!({
                "Name": name, "Count": whole(value), "Sum": value, "Labels": labels,
            })),
            (Some("summary" | "histogram"), None) => {} // quantiles: the mean is given
            _ => gauges.push(json!({ "Name": name, "Value": value, "Labels": labels })),
        }
    }
    let samples: Vec<Value> = samples
        .into_iter()
        .map(|((name, labels), (count, sum))| {
            let labels: Map<String, Value> = labels
                .into_iter()
                .filter(|(k, _)| k != "le" && k != "quantile")
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            let mean = if count > 0.0 { sum / count } else { 0.0 };
            json!({ "Name": name, "Count": whole(count), "Sum": sum, "Mean": mean, "Labels": labels })
        })
        .collect();
    json!({
        "Timestamp": timestamp,
        "Gauges": gauges,
        "Counters": counters,
        "Samples": samples,
        "Points": [],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_text_becomes_gauges_counters_and_samples() {
        let text = "\
# TYPE teamster_raft_is_leader gauge
teamster_raft_is_leader 1
# TYPE teamster_evals_total counter
teamster_evals_total{kind=\"batch\",note=\"a \\\"q\\\"\"} 7
# TYPE teamster_plan_seconds summary
teamster_plan_seconds{quantile=\"0.5\"} 0.1
teamster_plan_seconds_sum 3
teamster_plan_seconds_count 6
";
        let v = from_prometheus(text, "t");
        assert_eq!(
            v["Gauges"],
            json!([{ "Name": "teamster_raft_is_leader", "Value": 1.0, "Labels": {} }])
        );
        assert_eq!(
            v["Counters"],
            json!([{ "Name": "teamster_evals_total", "Count": 7, "Sum": 7.0,
                     "Labels": { "kind": "batch", "note": "a \"q\"" } }])
        );
        assert_eq!(
            v["Samples"],
            json!([{ "Name": "teamster_plan_seconds", "Count": 6, "Sum": 3.0, "Mean": 0.5,
                     "Labels": {} }])
        );
        assert_eq!(v["Timestamp"], json!("t"));
    }
}
