//! Go's spellings of booleans and durations, which Nomad's API and job files use:
//! `strconv.ParseBool`, `time.ParseDuration` and `time.Duration`'s `String()`.

use std::time::Duration;

/// Parse a boolean the way Go's `strconv.ParseBool` does: `1 t T TRUE true True` and
/// `0 f F FALSE false False`.
pub fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Parse a Go duration string: a sequence of decimal numbers with units `ns`, `us`, `µs`,
/// `ms`, `s`, `m`, `h` (e.g. `10s`, `1m30s`, `1.5s`). A bare `0` is zero.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = s;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return None;
        }
        let value: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += value * scale;
    }
    (0.0..1e12)
        .contains(&total)
        .then(|| Duration::from_secs_f64(total))
}

/// `ns` as Go prints a `time.Duration` (`10s`, `5m0s`, `1h0m0s`, `1.5s`, `250ms`), as
/// Nomad's messages show durations.
pub fn go_duration(ns: u64) -> String {
    const SEC: u64 = 1_000_000_000;
    if ns == 0 {
        return "0s".into();
    }
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return format!("{}µs", decimal(ns, 1_000));
    }
    if ns < SEC {
        return format!("{}ms", decimal(ns, 1_000_000));
    }
    let total_secs = ns / SEC;
    let (h, m) = (total_secs / 3600, total_secs % 3600 / 60);
    let s = decimal(total_secs % 60 * SEC + ns % SEC, SEC);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, m) => format!("{m}m{s}s"),
        (h, m) => format!("{h}h{m}m{s}s"),
    }
}

/// `v / unit` with the fraction's trailing zeros dropped.
fn decimal(v: u64, unit: u64) -> String {
    let (whole, rest) = (v / unit, v % unit);
    if rest == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let fraction = format!("{rest:0width$}");
    format!("{whole}.{}", fraction.trim_end_matches('0'))
}
