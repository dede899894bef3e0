//! Nomad's metric families that no teamster metric stands behind, computed when
//! `/v1/metrics` is read and appended to the recorder's exposition: the job summaries and
//! job statuses (on the leader, as Nomad publishes them), the runtime's figures (every
//! agent), the node's and the host's figures (`telemetry.publish_node_metrics`) and each
//! running allocation's usage (`telemetry.publish_allocation_metrics`).
//!
//! Names, labels and units are Nomad's (`nomad_client_host_memory_used` in bytes,
//! `nomad_client_allocated_memory` in MB). A figure the agent does not measure is left out,
//! not written as 0: a task's memory figures are those its driver measured, and a Rust
//! process has no garbage collector, so `nomad_runtime_gc_*` is never written.

use std::fmt::Write as _;

use serde_json::Value;
use teamster_storage::model::{JobStatus, TaskStateValue};

use super::HttpContext;
use crate::client::ops::{AllocPhase, ClientFigures};

/// Which of these families an agent publishes (from its `[telemetry]` section).
#[derive(Debug, Clone, Default)]
pub struct NomadMetrics {
    /// Nomad's names at all (`telemetry.nomad_names`).
    pub enabled: bool,
    /// The `host` label's value; empty: no `host` label.
    pub host: String,
    /// `telemetry.publish_allocation_metrics`.
    pub publish_allocation_metrics: bool,
    /// `telemetry.publish_node_metrics`.
    pub publish_node_metrics: bool,
}

/// One sample: its labels and value.
type Sample = (Vec<(&'static str, String)>, f64);

/// Prometheus text being written, one family at a time.
struct Exposition {
    out: String,
    host: String,
}

impl Exposition {
    /// Write a family (nothing when it has no samples), each sample with the `host` label.
    fn family(&mut self, name: &str, kind: &str, help: &str, samples: Vec<Sample>) {
        if samples.is_empty() {
            return;
        }
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        for (mut labels, value) in samples {
            if !self.host.is_empty() {
                labels.push(("host", self.host.clone()));
            }
            self.out.push_str(name);
            if !labels.is_empty() {
                self.out.push('{');
                for (i, (k, v)) in labels.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    let _ = write!(self.out, "{k}=\"{}\"", escape(v));
                }
                self.out.push('}');
            }
            let _ = writeln!(self.out, " {value}");
        }
        self.out.push('\n');
    }

    /// A family of one unlabelled gauge.
    fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.family(name, "gauge", help, vec![(Vec::new(), value)]);
    }
}

/// A label value as the exposition format writes it.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The families this agent publishes now, as Prometheus text (empty when Nomad's names
/// are off).
pub async fn render(ctx: &HttpContext) -> String {
    let opts = &ctx.agent().nomad_metrics;
    if !opts.enabled {
        return String::new();
    }
    let mut exp = Exposition {
        out: String::new(),
        host: opts.host.clone(),
    };
    runtime(&mut exp);
    if let Ok(server) = ctx.server() {
        if server.leadership.is_established() {
            jobs(&mut exp, &server.node.state().snapshot());
        }
    }
    if let Some(client) = ctx.client() {
        let client = client.for_metrics();
        let figures = client.figures();
        if opts.publish_node_metrics {
            let this = client.clone();
            let host = tokio::task::spawn_blocking(move || this.host_stats())
                .await
                .unwrap_or(Value::Null);
            node(&mut exp, &figures, &host);
        }
        if opts.publish_allocation_metrics {
            let usage = usage_of_running(&client, &figures).await;
            allocations(&mut exp, &figures, &usage);
        }
    }
    exp.out
}

/// How many allocations' usage is read at once during a scrape.
const USAGE_READS_AT_ONCE: usize = 8;
/// How long a scrape waits for the allocations' usage: those not read by then are left out
/// of this scrape (Prometheus's own scrape timeout is 10 s by default).
const USAGE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(2);

/// The usage of the running allocations, read a few at a time, as many as come in before
/// [`USAGE_DEADLINE`].
async fn usage_of_running(
    client: &crate::client::ops::ClientHandle,
    figures: &ClientFigures,
) -> Vec<(String, Value)> {
    use futures::StreamExt;
    let running: Vec<String> = figures
        .allocs
        .iter()
        .filter(|a| a.phase == AllocPhase::Running)
        .map(|a| a.alloc_id.clone())
        .collect();
    let mut reads = futures::stream::iter(running)
        .map(|id| async move {
            let usage = client.alloc_stats(&id).await.ok();
            (id, usage)
        })
        .buffer_unordered(USAGE_READS_AT_ONCE);
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + USAGE_DEADLINE;
    while let Ok(Some((id, usage))) = tokio::time::timeout_at(deadline, reads.next()).await {
        if let Some(u) = usage {
            out.push((id, u));
        }
    }
    out
}

/// `nomad_runtime_*`: the process's tasks and memory.
fn runtime(exp: &mut Exposition) {
    let tasks = tokio::runtime::Handle::try_current()
        .map(|h| h.metrics().num_alive_tasks())
        .unwrap_or(0);
    exp.gauge(
        "nomad_runtime_num_goroutines",
        "Tasks alive on the agent's async runtime (Nomad's goroutines).",
        tasks as f64,
    );
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map(|k| k * 1024.0)
    };
    if let Some(rss) = kib("VmRSS:") {
        exp.gauge(
            "nomad_runtime_alloc_bytes",
            "Bytes of memory the agent's process holds (its resident set).",
            rss,
        );
    }
    if let Some(rss) = kib("VmRSS:") {
        exp.gauge(
            "nomad_runtime_sys_bytes",
            "Bytes of memory the agent's process has from the system (resident and swapped out).",
            rss + kib("VmSwap:").unwrap_or(0.0),
        );
    }
}

/// The labels Nomad gives a dispatched or periodic child job's summary.
fn job_labels(job: &str, group: &str, namespace: &str) -> Vec<(&'static str, String)> {
    let mut labels = vec![
        ("job", job.to_string()),
        ("task_group", group.to_string()),
        ("namespace", namespace.to_string()),
    ];
    // The first marker only: a label may not be written twice.
    let child = [("/dispatch-", "dispatch_id"), ("/periodic-", "periodic_id")]
        .into_iter()
        .filter_map(|(marker, label)| Some((job.find(marker)?, marker, label)))
        .min_by_key(|(at, _, _)| *at);
    if let Some((at, marker, label)) = child {
        labels.push(("parent_id", job[..at].to_string()));
        labels.push((label, job[at + marker.len()..].to_string()));
    }
    labels
}

/// `nomad_nomad_job_summary_*` per job and group, and `nomad_nomad_job_status_*`.
fn jobs(exp: &mut Exposition, snap: &teamster_storage::state::Snapshot) {
    type Field = fn(&teamster_storage::model::TaskGroupSummary) -> u64;
    let fields: [(&str, &str, Field); 7] = [
        ("queued", "waiting to be placed", |s| s.queued),
        ("complete", "complete", |s| s.complete),
        ("failed", "failed", |s| s.failed),
        ("running", "running", |s| s.running),
        ("starting", "placed and not running yet", |s| s.starting),
        ("lost", "lost with their node", |s| s.lost),
        ("unknown", "on a disconnected node", |s| s.unknown),
    ];
    for (name, what, field) in fields {
        let samples = snap
            .job_summaries()
            .flat_map(|summary| {
                summary.summary.iter().map(move |(group, counts)| {
                    (
                        job_labels(summary.job_id.as_str(), group, summary.namespace.as_str()),
                        field(counts) as f64,
                    )
                })
            })
            .collect();
        exp.family(
            &format!("nomad_nomad_job_summary_{name}"),
            "gauge",
            &format!("Allocations of a job's group {what}."),
            samples,
        );
    }
    let (mut pending, mut running, mut dead) = (0u64, 0u64, 0u64);
    for job in snap.jobs() {
        match job.status {
            JobStatus::Pending => pending += 1,
            JobStatus::Running => running += 1,
            JobStatus::Dead => dead += 1,
        }
    }
    exp.gauge(
        "nomad_nomad_job_status_pending",
        "Jobs pending.",
        pending as f64,
    );
    exp.gauge(
        "nomad_nomad_job_status_running",
        "Jobs running.",
        running as f64,
    );
    exp.gauge("nomad_nomad_job_status_dead", "Jobs dead.", dead as f64);
}

/// The labels of a node's figures.
fn node_labels(f: &ClientFigures) -> Vec<(&'static str, String)> {
    vec![
        ("node_id", f.node_id.clone()),
        ("datacenter", f.datacenter.clone()),
        ("node_class", f.node_class.clone()),
        ("node_pool", f.node_pool.clone()),
    ]
}

/// The node's figures: host CPU, memory, disks and uptime, what is allocated, and the
/// allocations and tasks by state.
fn node(exp: &mut Exposition, f: &ClientFigures, host: &Value) {
    let labels = node_labels(f);
    let one = |v: f64| vec![(labels.clone(), v)];
    for (key, name) in [
        ("Total", "total"),
        ("User", "user"),
        ("System", "system"),
        ("Idle", "idle"),
    ] {
        let samples = host["CPU"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| {
                let mut l = labels.clone();
                l.push(("cpu", c["CPU"].as_str()?.to_string()));
                Some((l, c[key].as_f64()?))
            })
            .collect();
        exp.family(
            &format!("nomad_client_host_cpu_{name}"),
            "gauge",
            &format!("Percent of one core's time, {name}, since the previous reading."),
            samples,
        );
    }
    for (key, name) in [
        ("Total", "total"),
        ("Available", "available"),
        ("Used", "used"),
        ("Free", "free"),
    ] {
        if let Some(v) = host["Memory"][key].as_f64() {
            exp.family(
                &format!("nomad_client_host_memory_{name}"),
                "gauge",
                &format!("Bytes of the host's memory, {name}."),
                one(v),
            );
        }
    }
    for (key, name, help) in [
        ("Size", "size", "Bytes a disk holds."),
        ("Used", "used", "Bytes used on a disk."),
        ("Available", "available", "Bytes available on a disk."),
        ("UsedPercent", "used_percent", "Percent of a disk used."),
        (
            "InodesUsedPercent",
            "inodes_percent",
            "Percent of a disk's inodes used.",
        ),
    ] {
        let samples = host["DiskStats"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| {
                let mut l = labels.clone();
                l.push(("disk", d["Device"].as_str()?.to_string()));
                Some((l, d[key].as_f64()?))
            })
            .collect();
        exp.family(
            &format!("nomad_client_host_disk_{name}"),
            "gauge",
            help,
            samples,
        );
    }
    if let Some(uptime) = host["Uptime"].as_f64() {
        exp.family(
            "nomad_client_uptime",
            "gauge",
            "Seconds since the host booted.",
            one(uptime),
        );
    }
    let live = f.allocs.iter().filter(|a| a.phase != AllocPhase::Terminal);
    let (cpu, memory, disk) = live.fold((0u64, 0u64, 0u64), |(c, m, d), a| {
        (
            c + a.resources.cpu,
            m + a.resources.memory_mb,
            d + a.resources.disk_mb,
        )
    });
    for (name, given, offered, unit) in [
        ("cpu", cpu, f.capacity.cpu, "MHz"),
        ("memory", memory, f.capacity.memory_mb, "MB"),
        ("disk", disk, f.capacity.disk_mb, "MB"),
    ] {
        exp.family(
            &format!("nomad_client_allocated_{name}"),
            "gauge",
            &format!("{unit} of {name} given to the node's allocations that are not terminal."),
            one(given as f64),
        );
        exp.family(
            &format!("nomad_client_unallocated_{name}"),
            "gauge",
            &format!("{unit} of {name} the node offers that no allocation holds."),
            one(offered.saturating_sub(given) as f64),
        );
    }
    for (phase, name, help) in [
        (
            AllocPhase::Blocked,
            "blocked",
            "waiting for their previous allocation to stop",
        ),
        (
            AllocPhase::Migrating,
            "migrating",
            "taking their previous allocation's disk",
        ),
        (
            AllocPhase::Pending,
            "pending",
            "placed here and not running yet",
        ),
        (AllocPhase::Running, "running", "running"),
        (AllocPhase::Terminal, "terminal", "finished and kept"),
    ] {
        let n = f.allocs.iter().filter(|a| a.phase == phase).count();
        exp.family(
            &format!("nomad_client_allocations_{name}"),
            "gauge",
            &format!("Allocations on the node {help}."),
            one(n as f64),
        );
    }
    for (state, name) in [
        (TaskStateValue::Pending, "pending"),
        (TaskStateValue::Running, "running"),
        (TaskStateValue::Dead, "dead"),
    ] {
        let n = f
            .allocs
            .iter()
            .flat_map(|a| &a.tasks)
            .filter(|t| t.state == state)
            .count();
        exp.family(
            &format!("nomad_client_tasks_{name}"),
            "gauge",
            &format!("Tasks on the node {name}."),
            one(n as f64),
        );
    }
}

/// Each running allocation's tasks: what they were given and what they use (the figures
/// their driver measured).
fn allocations(exp: &mut Exposition, f: &ClientFigures, usage: &[(String, Value)]) {
    let mut families: std::collections::BTreeMap<&str, (&str, Vec<Sample>)> = Default::default();
    let mut add =
        |name: &'static str, help: &'static str, labels: &Vec<(&'static str, String)>, v: f64| {
            families
                .entry(name)
                .or_insert_with(|| (help, Vec::new()))
                .1
                .push((labels.clone(), v));
        };
    for alloc in f.allocs.iter().filter(|a| a.phase == AllocPhase::Running) {
        let used = usage
            .iter()
            .find(|(id, _)| *id == alloc.alloc_id)
            .map(|(_, u)| u);
        for task in &alloc.tasks {
            let labels = vec![
                ("job", alloc.job.clone()),
                ("task_group", alloc.task_group.clone()),
                ("alloc_id", alloc.alloc_id.clone()),
                ("task", task.task.clone()),
                ("namespace", alloc.namespace.clone()),
            ];
            add(
                "nomad_client_allocs_cpu_allocated",
                "MHz of CPU the task was given.",
                &labels,
                task.cpu_mhz as f64,
            );
            add(
                "nomad_client_allocs_memory_allocated",
                "Bytes of memory the task was given.",
                &labels,
                (task.memory_mb << 20) as f64,
            );
            if task.state != TaskStateValue::Running {
                continue;
            }
            let Some(u) = used.map(|u| &u["Tasks"][&task.task]["ResourceUsage"]) else {
                continue;
            };
            let measured = |part: &str, figure: &str| {
                u[part]["Measured"]
                    .as_array()
                    .is_some_and(|m| m.iter().any(|x| x == figure))
            };
            let mem = &u["MemoryStats"];
            for (figure, key, name, help) in [
                (
                    "RSS",
                    "RSS",
                    "nomad_client_allocs_memory_rss",
                    "Bytes of the task's resident set.",
                ),
                (
                    "Cache",
                    "Cache",
                    "nomad_client_allocs_memory_cache",
                    "Bytes of the task's page cache.",
                ),
                (
                    "Swap",
                    "Swap",
                    "nomad_client_allocs_memory_swap",
                    "Bytes of the task's memory swapped out.",
                ),
                (
                    "Usage",
                    "Usage",
                    "nomad_client_allocs_memory_usage",
                    "Bytes of memory the task uses.",
                ),
                (
                    "Max Usage",
                    "MaxUsage",
                    "nomad_client_allocs_memory_max_usage",
                    "The most bytes of memory the task has used.",
                ),
            ] {
                if measured("MemoryStats", figure) {
                    if let Some(v) = mem[key].as_f64() {
                        add(name, help, &labels, v);
                    }
                }
            }
            let cpu = &u["CpuStats"];
            for (figure, key, name, help) in [
                (
                    "Percent",
                    "Percent",
                    "nomad_client_allocs_cpu_total_percent",
                    "Percent of one core the task used since the previous reading.",
                ),
                (
                    "System Mode",
                    "SystemMode",
                    "nomad_client_allocs_cpu_system",
                    "Percent of one core the task used in the kernel.",
                ),
                (
                    "User Mode",
                    "UserMode",
                    "nomad_client_allocs_cpu_user",
                    "Percent of one core the task used in user space.",
                ),
                (
                    "Throttled Time",
                    "ThrottledTime",
                    "nomad_client_allocs_cpu_throttled_time",
                    "Nanoseconds the task was throttled.",
                ),
                (
                    "Throttled Periods",
                    "ThrottledPeriods",
                    "nomad_client_allocs_cpu_throttled_periods",
                    "Periods in which the task was throttled.",
                ),
            ] {
                if measured("CpuStats", figure) {
                    if let Some(v) = cpu[key].as_f64() {
                        add(name, help, &labels, v);
                    }
                }
            }
            if measured("CpuStats", "Percent") {
                if let Some(v) = cpu["TotalTicks"].as_f64() {
                    add(
                        "nomad_client_allocs_cpu_total_ticks",
                        "MHz-ticks of CPU the task used since the previous reading.",
                        &labels,
                        v,
                    );
                }
            }
        }
    }
    for (name, (help, samples)) in families {
        exp.family(name, "gauge", help, samples);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_is_written_with_help_type_and_escaped_labels() {
        let mut exp = Exposition {
            out: String::new(),
            host: "h1".into(),
        };
        exp.family(
            "nomad_x",
            "gauge",
            "An x.",
            vec![(vec![("job", "a\"b\\c\nd".into())], 2.5)],
        );
        exp.family("nomad_empty", "gauge", "Nothing.", Vec::new());
        assert_eq!(
            exp.out,
            "# HELP nomad_x An x.\n# TYPE nomad_x gauge\nnomad_x{job=\"a\\\"b\\\\c\\nd\",host=\"h1\"} 2.5\n\n"
        );
    }

    #[test]
    fn a_child_job_s_summary_names_its_parent() {
        let labels = job_labels("batch/dispatch-1700000000-abcd1234", "g", "default");
        assert!(labels.contains(&("parent_id", "batch".into())));
        assert!(labels.contains(&("dispatch_id", "1700000000-abcd1234".into())));
        assert!(labels.contains(&("job", "batch/dispatch-1700000000-abcd1234".into())));
        let labels = job_labels("cron/periodic-1700000000", "g", "default");
        assert!(labels.contains(&("periodic_id", "1700000000".into())));
        assert_eq!(job_labels("web", "g", "default").len(), 3);
        // A dispatched child of a periodic child: its labels once each.
        let labels = job_labels("cron/periodic-17/dispatch-18-ab", "g", "default");
        assert_eq!(labels.len(), 5, "{labels:?}");
        assert!(labels.contains(&("parent_id", "cron".into())));
        assert!(labels.contains(&("periodic_id", "17/dispatch-18-ab".into())));
    }
}
