//! Human output: aligned columns, like the nomad CLI's tables, and JSON values as cell text.

use serde_json::Value;

/// A JSON value as plain text: strings without quotes, null as "".
pub fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The first 8 characters of an ID value, as the nomad CLI shows them.
pub fn short_id(id: &Value) -> String {
    text(id).chars().take(8).collect()
}

/// Why an allocation could not be placed (an `AllocationMetric` of an evaluation's
/// `FailedTGAllocs` or a plan's), one `* …` line each, as Nomad's CLI words them.
pub fn alloc_metrics(metric: &Value, prefix: &str) -> String {
    let mut out = String::new();
    let mut line = |text: String| {
        out.push_str(prefix);
        out.push_str("* ");
        out.push_str(&text);
        out.push('\n');
    };
    let counts = |field: &str| -> Vec<(String, u64)> {
        metric[field]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, n)| (k.clone(), n.as_u64().unwrap_or(0)))
            .collect()
    };
    if metric["NodesEvaluated"].as_u64().unwrap_or(0) == 0 {
        line("No nodes were eligible for evaluation".into());
    }
    for (dc, available) in counts("NodesAvailable") {
        if available == 0 {
            line(format!("No nodes are available in datacenter {dc:?}"));
        }
    }
    for (class, n) in counts("ClassFiltered") {
        line(format!("Class {class:?}: {n} nodes excluded by filter"));
    }
    for (constraint, n) in counts("ConstraintFiltered") {
        line(format!(
            "Constraint {constraint:?}: {n} nodes excluded by filter"
        ));
    }
    let exhausted = metric["NodesExhausted"].as_u64().unwrap_or(0);
    if exhausted > 0 {
        line(format!("Resources exhausted on {exhausted} nodes"));
    }
    for (class, n) in counts("ClassExhausted") {
        line(format!("Class {class:?} exhausted on {n} nodes"));
    }
    for (dim, n) in counts("DimensionExhausted") {
        line(format!("Dimension {dim:?} exhausted on {n} nodes"));
    }
    out
}

/// Format rows as left-aligned columns separated by two spaces; the first row is the header.
pub fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == r.len() {
                line.push_str(cell);
            } else {
                // A `key = value` row is glued with single spaces, as Nomad's columnize
                // writes it (`ID          = web`); other columns are two apart.
                let around_eq = cell == "=" || r.get(c + 1).is_some_and(|n| n == "=");
                let gap = if around_eq { " " } else { "  " };
                line.push_str(&format!("{cell:<w$}{gap}", w = widths[c]));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A size as Nomad's CLI shows one (`512 B`, `4.0 KiB`, `10.0 MiB`).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A Unix-nanosecond timestamp (`SubmitTime`) as RFC 3339 UTC to the second; other values
/// as [`text`].
pub fn unix_nanos(v: &Value) -> String {
    match v.as_i64() {
        Some(nanos) if nanos > 0 => humantime::format_rfc3339_seconds(
            std::time::UNIX_EPOCH + std::time::Duration::from_nanos(nanos.unsigned_abs()),
        )
        .to_string(),
        _ => text(v),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn columns_are_aligned() {
        let t = super::table(&[
            vec!["Name".into(), "Status".into()],
            vec!["server-1".into(), "alive".into()],
        ]);
        assert_eq!(t, "Name      Status\nserver-1  alive\n");
    }
}
