//! Reading what the servers measured: Prometheus counters and histograms (summed over
//! labels, differenced between scrapes, quantiles interpolated within a bucket), percentiles
//! of samples, and the CPU time and peak RSS of a server process from `/proc`.

/// The sum of a Prometheus counter over its labels (0 when absent).
pub fn prom_sum(text: &str, name: &str) -> u64 {
    text.lines()
        .filter(|l| {
            l.starts_with(name) && matches!(l.as_bytes().get(name.len()), Some(b' ') | Some(b'{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// A Prometheus histogram's cumulative buckets, `(le, count)`, `+Inf` as infinity (empty
/// when absent).
pub fn prom_buckets(text: &str, name: &str) -> Vec<(f64, u64)> {
    let prefix = format!("{name}_bucket{{le=\"");
    text.lines()
        .filter_map(|l| {
            let (le, rest) = l.strip_prefix(&prefix)?.split_once("\"}")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, rest.trim().parse::<f64>().ok()? as u64))
        })
        .collect()
}

/// `a + sign · b` bucket by bucket (buckets missing from `b` count 0; a negative result is 0).
pub(super) fn buckets_add(a: &[(f64, u64)], b: &[(f64, u64)], subtract: bool) -> Vec<(f64, u64)> {
    let mut out: Vec<(f64, u64)> = if a.is_empty() {
        b.iter().map(|(le, _)| (*le, 0)).collect()
    } else {
        a.to_vec()
    };
    for (le, n) in &mut out {
        let other = b.iter().find(|(l, _)| l == le).map_or(0, |(_, c)| *c);
        *n = if subtract {
            n.saturating_sub(other)
        } else {
            *n + other
        };
    }
    out
}

/// The `q` quantile (0..=1) of cumulative buckets, interpolated linearly within its bucket
/// as Prometheus' `histogram_quantile` does; 0 when empty.
pub fn bucket_quantile(buckets: &[(f64, u64)], q: f64) -> f64 {
    let total = buckets.last().map_or(0, |(_, c)| *c);
    if total == 0 {
        return 0.0;
    }
    let rank = q * total as f64;
    let (mut prev_le, mut prev_c) = (0.0, 0u64);
    for &(le, c) in buckets {
        if c as f64 >= rank && c > prev_c {
            if le.is_infinite() {
                return prev_le;
            }
            let frac = (rank - prev_c as f64) / (c - prev_c) as f64;
            return prev_le + (le - prev_le) * frac.clamp(0.0, 1.0);
        }
        if le.is_finite() {
            prev_le = le;
        }
        prev_c = c;
    }
    prev_le
}

/// Percentile of sorted values.
pub(super) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// User + system CPU seconds of a process (0 when unreadable).
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz.max(1.0)
}

/// Peak resident set size of a process in MB (`VmHWM`; 0 when unreadable).
pub fn peak_rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kb| kb / 1024.0)
}
