//! Go's spellings of booleans and durations, which Nomad's API and job files use:
//! `strconv.ParseBool` and `time.ParseDuration`.

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
