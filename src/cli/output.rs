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
                line.push_str(&format!("{cell:<w$}  ", w = widths[c]));
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
