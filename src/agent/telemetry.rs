//! The metrics recorder: every metric's help text, and Nomad's names beside teamster's.
//!
//! Every `teamster_*` metric is listed in [`HELP`] with its kind and a help text, so the
//! Prometheus exposition carries `# HELP` for each (a unit test reads the sources and fails
//! on a metric missing from the list, or listed and gone).
//!
//! Nomad's dashboards and alerts query Nomad's names, in Nomad's units: `nomad_raft_commitTime`
//! in milliseconds, `nomad_nomad_broker_total_ready`, `nomad_nomad_worker_invoke_scheduler_service`.
//! [`NomadNames`] wraps the Prometheus recorder: a metric with a Nomad counterpart ([`alias`])
//! is written under both names, a timer in seconds under teamster's and in milliseconds under
//! Nomad's (Nomad's timers are summaries; the recorder renders every histogram without
//! buckets as a summary). Nomad's names carry a `host` label as Nomad's do, unless
//! `telemetry.disable_hostname`. The families Nomad publishes that have no teamster metric
//! behind them (job summaries, client and host figures, runtime) are computed when
//! `/v1/metrics` is read (`crate::http::metrics_nomad`).
//!
//! Nomad's own names break two of Prometheus's naming rules (`commitTime` is camelCase, and
//! Nomad's counters have no `_total`); they are kept as Nomad spells them, because that is
//! what dashboards query. `telemetry.nomad_names = false` leaves only teamster's names.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Label, Metadata,
    Recorder, SharedString, Unit,
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::server::broker::{eval_latency_buckets, EVAL_LATENCY_METRIC};

/// What kind of metric a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// A distribution (rendered as a summary, or with buckets where set).
    Histogram,
}

/// Every teamster metric: its kind, its name as the code writes it (dots become
/// underscores in the exposition), and its help text.
pub const HELP: &[(Kind, &str, &str)] = &[
    (
        Kind::Counter,
        "teamster.broker.nack_timeouts_total",
        "Evaluations whose dequeuer did not ack in time and were handed out again.",
    ),
    (
        Kind::Gauge,
        "teamster.broker.cancelable",
        "Evaluations of one scheduler type superseded and waiting to be canceled.",
    ),
    (
        Kind::Gauge,
        "teamster.broker.pending",
        "Evaluations of one scheduler type waiting behind another of the same job.",
    ),
    (
        Kind::Gauge,
        "teamster.broker.ready",
        "Evaluations of one scheduler type ready to be dequeued.",
    ),
    (
        Kind::Gauge,
        "teamster.broker.unacked",
        "Evaluations of one scheduler type dequeued and not yet acked.",
    ),
    (
        Kind::Gauge,
        "teamster.broker.waiting",
        "Evaluations of one scheduler type waiting for their wait time to pass.",
    ),
    (
        Kind::Gauge,
        "teamster.broker.total_cancelable",
        "Evaluations superseded and waiting to be canceled.",
    ),
    (
        Kind::Gauge,
        "teamster.broker.total_pending",
        "Evaluations waiting behind another of the same job.",
    ),
    (
        Kind::Gauge,
        "teamster.broker.total_ready",
        "Evaluations ready to be dequeued.",
    ),
    (
        Kind::Gauge,
        "teamster.broker.total_unacked",
        "Evaluations dequeued and not yet acked.",
    ),
    (
        Kind::Gauge,
        "teamster.broker.total_waiting",
        "Evaluations waiting for their wait time to pass.",
    ),
    (
        Kind::Gauge,
        "teamster.blocked_evals.duplicates",
        "Blocked evaluations superseded by a newer one of the same job.",
    ),
    (
        Kind::Gauge,
        "teamster.blocked_evals.total_blocked",
        "Evaluations blocked until resources free up.",
    ),
    (
        Kind::Gauge,
        "teamster.blocked_evals.total_escaped",
        "Blocked evaluations whose constraints escape computed node classes.",
    ),
    (
        Kind::Gauge,
        "teamster.blocked_evals.total_system",
        "Blocked evaluations of system jobs.",
    ),
    (
        Kind::Gauge,
        "teamster_autopilot_failure_tolerance",
        "Voters that can fail without losing quorum (on the leader).",
    ),
    (
        Kind::Gauge,
        "teamster_autopilot_healthy",
        "1 when every server is healthy by autopilot's rules (on the leader).",
    ),
    (
        Kind::Gauge,
        "teamster_autoscaler_blocked_evals",
        "Blocked evaluations the node autoscaler counts as demand.",
    ),
    (
        Kind::Gauge,
        "teamster_autoscaler_nodes_owned",
        "Nodes the node autoscaler made and still owns.",
    ),
    (
        Kind::Gauge,
        "teamster_autoscaler_nodes_starting",
        "Nodes the node autoscaler asked for that have not registered yet.",
    ),
    (
        Kind::Counter,
        "teamster_autoscaler_nodes_created_total",
        "Nodes the node autoscaler's provider created.",
    ),
    (
        Kind::Counter,
        "teamster_autoscaler_nodes_failed_total",
        "Node creations or removals the node autoscaler's provider failed.",
    ),
    (
        Kind::Counter,
        "teamster_autoscaler_nodes_requested_total",
        "Nodes the node autoscaler asked its provider for.",
    ),
    (
        Kind::Counter,
        "teamster_autoscaler_nodes_stopped_total",
        "Idle nodes the node autoscaler removed.",
    ),
    (
        Kind::Counter,
        "teamster_autoscaler_provider_errors_total",
        "Errors the node autoscaler's provider answered.",
    ),
    (
        Kind::Histogram,
        "teamster_broker_dequeue_batch_size",
        "Evaluations handed out by one dequeue request.",
    ),
    (
        Kind::Histogram,
        "teamster_broker_eval_latency_seconds",
        "Seconds from an evaluation's enqueue to its ack.",
    ),
    (
        Kind::Counter,
        "teamster_client_alloc_health_total",
        "Deployment health verdicts this client reported, by outcome.",
    ),
    (
        Kind::Counter,
        "teamster_client_alloc_updates_total",
        "Allocation updates this client sent to the servers.",
    ),
    (
        Kind::Counter,
        "teamster_client_allocs_garbage_collected_total",
        "Allocations this client garbage-collected.",
    ),
    (
        Kind::Counter,
        "teamster_client_allocs_oom_killed_total",
        "Tasks this client saw the kernel's OOM killer end (Nomad's client.allocs.oom_killed).",
    ),
    (
        Kind::Counter,
        "teamster_client_check_transitions_total",
        "Health check status changes on this client.",
    ),
    (
        Kind::Counter,
        "teamster_client_heartbeat_failures_total",
        "Heartbeats this client could not deliver.",
    ),
    (
        Kind::Counter,
        "teamster_client_heartbeats_total",
        "Heartbeats this client delivered.",
    ),
    (
        Kind::Counter,
        "teamster_client_service_registrations_total",
        "Service registrations this client wrote or removed.",
    ),
    (
        Kind::Counter,
        "teamster_client_state_writes_total",
        "Writes of this client's local state database.",
    ),
    (
        Kind::Gauge,
        "teamster_client_template_feeds",
        "Open template blocking queries (one per allocation with templates).",
    ),
    (
        Kind::Gauge,
        "teamster_client_template_subscriptions",
        "Tasks whose templates watch the servers' data.",
    ),
    (
        Kind::Counter,
        "teamster_core_gc_evals_total",
        "Evaluations removed by garbage collection.",
    ),
    (
        Kind::Counter,
        "teamster_core_gc_jobs_total",
        "Jobs removed by garbage collection.",
    ),
    (
        Kind::Counter,
        "teamster_deployment_watcher_actions_total",
        "Deployment watcher actions, by kind.",
    ),
    (
        Kind::Counter,
        "teamster_dispatches_total",
        "Parameterized jobs dispatched.",
    ),
    (
        Kind::Counter,
        "teamster_drainer_allocs_marked_total",
        "Allocations the drainer marked to migrate.",
    ),
    (
        Kind::Gauge,
        "teamster_drainer_draining_nodes",
        "Nodes being drained.",
    ),
    (
        Kind::Counter,
        "teamster_drainer_drains_completed_total",
        "Node drains completed.",
    ),
    (
        Kind::Counter,
        "teamster_drainer_write_errors_total",
        "Drainer writes that failed.",
    ),
    (
        Kind::Counter,
        "teamster_raft_applies_total",
        "Raft entries this leader proposed that committed (one per batch of commands).",
    ),
    (Kind::Gauge, "teamster_event_streams", "Open event streams."),
    (
        Kind::Counter,
        "teamster_event_streams_dropped_total",
        "Event streams closed because their reader fell behind.",
    ),
    (
        Kind::Counter,
        "teamster_event_streams_revoked_total",
        "Event streams closed because their token was revoked.",
    ),
    (
        Kind::Gauge,
        "teamster_heartbeat_active",
        "Nodes whose heartbeat timer runs on this leader.",
    ),
    (
        Kind::Counter,
        "teamster_heartbeat_invalidate_total",
        "Nodes marked down for a missed heartbeat.",
    ),
    (
        Kind::Counter,
        "teamster_heartbeat_resets_total",
        "Heartbeat timers reset by a heartbeat.",
    ),
    (
        Kind::Counter,
        "teamster_http_connections_refused_total",
        "HTTP connections refused, by reason.",
    ),
    (
        Kind::Counter,
        "teamster_http_job_stubs_serialized_total",
        "Job list entries serialized (the rest come from the cache).",
    ),
    (
        Kind::Histogram,
        "teamster_leader_barrier_seconds",
        "Seconds a new leader waited for its log to be applied.",
    ),
    (
        Kind::Histogram,
        "teamster_leader_establish_seconds",
        "Seconds a new leader took to establish its duties.",
    ),
    (
        Kind::Gauge,
        "teamster_leader_established",
        "1 while this server's leader duties run.",
    ),
    (
        Kind::Counter,
        "teamster_periodic_launches_total",
        "Periodic job launches.",
    ),
    (
        Kind::Counter,
        "teamster_periodic_write_errors_total",
        "Periodic launches whose write failed.",
    ),
    (
        Kind::Counter,
        "teamster_plan_allocs_committed_total",
        "Allocations committed by the plan applier.",
    ),
    (
        Kind::Counter,
        "teamster_plan_applied_total",
        "Plans the plan applier committed.",
    ),
    (
        Kind::Histogram,
        "teamster_plan_apply_seconds",
        "Seconds to commit a checked plan through raft.",
    ),
    (
        Kind::Histogram,
        "teamster_plan_evaluate_seconds",
        "Seconds to check a plan against the state.",
    ),
    (
        Kind::Counter,
        "teamster_plan_node_rejected_total",
        "Nodes whose part of a plan was rejected.",
    ),
    (
        Kind::Gauge,
        "teamster_plan_queue_depth",
        "Plans waiting for the plan applier.",
    ),
    (
        Kind::Histogram,
        "teamster_plan_wait_seconds",
        "Seconds a plan waited in the plan queue.",
    ),
    (
        Kind::Gauge,
        "teamster_raft_applied_index",
        "The last raft index applied to this server's state.",
    ),
    (
        Kind::Histogram,
        "teamster_raft_commit_seconds",
        "Seconds from proposing a raft entry to its commit and apply on the leader.",
    ),
    (
        Kind::Histogram,
        "teamster_raft_fsm_apply_seconds",
        "Seconds to apply one raft entry to the state.",
    ),
    (
        Kind::Histogram,
        "teamster_raft_handover_seconds",
        "Seconds a leadership handover took.",
    ),
    (
        Kind::Counter,
        "teamster_raft_handovers_total",
        "Leadership handovers.",
    ),
    (
        Kind::Gauge,
        "teamster_raft_is_leader",
        "1 while this server is the raft leader.",
    ),
    (
        Kind::Gauge,
        "teamster_raft_last_log_index",
        "The last index of this server's raft log.",
    ),
    (
        Kind::Histogram,
        "teamster_raft_leader_last_contact_seconds",
        "Seconds since a quorum of followers last acknowledged the leader, sampled every 2 s on the leader.",
    ),
    (
        Kind::Gauge,
        "teamster_raft_leader_lease_held",
        "1 while this leader holds its read lease.",
    ),
    (
        Kind::Counter,
        "teamster_raft_leader_lease_lost_total",
        "Read leases lost.",
    ),
    (
        Kind::Counter,
        "teamster_raft_log_appended_bytes_total",
        "Bytes appended to this server's raft log.",
    ),
    (
        Kind::Counter,
        "teamster_raft_log_appended_entries_total",
        "Entries appended to this server's raft log.",
    ),
    (
        Kind::Gauge,
        "teamster_raft_peers",
        "Voters in the raft configuration.",
    ),
    (
        Kind::Gauge,
        "teamster_raft_snapshot_index",
        "The last raft index in this server's snapshot.",
    ),
    (
        Kind::Gauge,
        "teamster_raft_term",
        "This server's raft term.",
    ),
    (
        Kind::Histogram,
        "teamster_raft_write_batch_size",
        "Commands proposed in one raft entry.",
    ),
    (
        Kind::Counter,
        "teamster_reaper_canceled_evals_total",
        "Evaluations canceled by the reaper.",
    ),
    (
        Kind::Counter,
        "teamster_reaper_duplicate_blocked_total",
        "Duplicate blocked evaluations canceled by the reaper.",
    ),
    (
        Kind::Counter,
        "teamster_reaper_failed_evals_total",
        "Evaluations the reaper marked failed after too many deliveries.",
    ),
    (
        Kind::Counter,
        "teamster_reaper_write_errors_total",
        "Reaper writes that failed.",
    ),
    (
        Kind::Counter,
        "teamster_rpc_bytes_received_total",
        "Bytes received over RPC connections, by side.",
    ),
    (
        Kind::Counter,
        "teamster_rpc_bytes_sent_total",
        "Bytes sent over RPC connections, by side.",
    ),
    (
        Kind::Gauge,
        "teamster_rpc_connections",
        "Open RPC connections.",
    ),
    (
        Kind::Counter,
        "teamster_rpc_errors_total",
        "RPC connection errors, by kind.",
    ),
    (
        Kind::Counter,
        "teamster_rpc_frames_refused_total",
        "RPC frames refused (oversized or malformed), by reason.",
    ),
    (
        Kind::Counter,
        "teamster_rpc_requests_total",
        "RPC requests, by side and call.",
    ),
    (
        Kind::Counter,
        "teamster_rpc_responses_total",
        "RPC responses, by side, call and outcome.",
    ),
    (
        Kind::Histogram,
        "teamster_service_seconds",
        "Seconds a server took to answer a call, by method.",
    ),
    (
        Kind::Counter,
        "teamster_snapshot_restores_total",
        "Raft snapshots restored.",
    ),
    (
        Kind::Counter,
        "teamster_snapshot_saves_total",
        "Raft snapshots saved.",
    ),
    (
        Kind::Histogram,
        "teamster_worker_ack_seconds",
        "Seconds a scheduler worker took to ack or nack an evaluation.",
    ),
    (
        Kind::Counter,
        "teamster_worker_batch_evals_total",
        "Evaluations scheduled in batched rounds.",
    ),
    (
        Kind::Histogram,
        "teamster_worker_batch_size",
        "Evaluations in one batched scheduling round.",
    ),
    (
        Kind::Histogram,
        "teamster_worker_dequeue_seconds",
        "Seconds a scheduler worker waited to dequeue an evaluation.",
    ),
    (
        Kind::Counter,
        "teamster_worker_evals_scheduled_total",
        "Evaluations scheduled, by scheduler type.",
    ),
    (
        Kind::Counter,
        "teamster_worker_evals_total",
        "Evaluations finished by the scheduler workers, by outcome.",
    ),
    (
        Kind::Counter,
        "teamster_worker_index_waits_total",
        "Evaluations whose worker waited for its state to catch up.",
    ),
    (
        Kind::Gauge,
        "teamster_worker_paused",
        "Scheduler workers paused on this server.",
    ),
    (
        Kind::Counter,
        "teamster_worker_raft_sync_timeouts_total",
        "Evaluations nacked because the state did not catch up in time.",
    ),
    (
        Kind::Histogram,
        "teamster_worker_schedule_seconds",
        "Seconds the scheduler took for one evaluation, by type.",
    ),
    (
        Kind::Counter,
        "teamster_worker_scheduler_panics_total",
        "Scheduler runs that panicked (the evaluation is nacked).",
    ),
    (
        Kind::Counter,
        "teamster_worker_stale_snapshot_total",
        "Scheduler runs on a state older than the evaluation wanted.",
    ),
    (
        Kind::Histogram,
        "teamster_worker_submit_plan_seconds",
        "Seconds from submitting a plan to its answer.",
    ),
    (
        Kind::Histogram,
        "teamster_worker_wait_for_index_seconds",
        "Seconds a worker waited for its state to reach an evaluation's index.",
    ),
];

/// How a teamster metric is also written under Nomad's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alias {
    /// The same value under Nomad's name (a counter or a gauge).
    Same(&'static str),
    /// A timer in seconds, written in milliseconds under Nomad's name.
    Millis(&'static str),
    /// Each value recorded counts 1 in Nomad's counter.
    Count(&'static str),
    /// A timer in seconds, in milliseconds under `prefix` + the value of `label` + `suffix`
    /// (Nomad puts the scheduler type in the name); the label is dropped.
    MillisByLabel(&'static str, &'static str, &'static str),
    /// A gauge under `prefix` + the value of `label` + `suffix`; the label is dropped.
    SameByLabel(&'static str, &'static str, &'static str),
}

/// Label values with no Nomad name: teamster's batched scheduling rounds (Nomad schedules
/// one evaluation at a time) stay under `teamster_worker_schedule_seconds` only.
const TEAMSTER_ONLY: &[&str] = &["batch_round"];

/// The Nomad counterpart of a teamster metric, if it has one (Nomad's key joined with `_`,
/// as Nomad's Prometheus sink writes it).
pub fn alias(name: &str) -> Option<Alias> {
    use Alias::*;
    Some(match name {
        "teamster.broker.total_ready" => Same("nomad_nomad_broker_total_ready"),
        "teamster.broker.total_unacked" => Same("nomad_nomad_broker_total_unacked"),
        "teamster.broker.total_pending" => Same("nomad_nomad_broker_total_pending"),
        "teamster.broker.total_waiting" => Same("nomad_nomad_broker_total_waiting"),
        "teamster.broker.total_cancelable" => Same("nomad_nomad_broker_total_cancelable"),
        "teamster.broker.ready" => SameByLabel("nomad_nomad_broker_", "scheduler", "_ready"),
        "teamster.broker.unacked" => SameByLabel("nomad_nomad_broker_", "scheduler", "_unacked"),
        "teamster.blocked_evals.total_blocked" => Same("nomad_nomad_blocked_evals_total_blocked"),
        "teamster.blocked_evals.total_escaped" => Same("nomad_nomad_blocked_evals_total_escaped"),
        "teamster_heartbeat_active" => Same("nomad_nomad_heartbeat_active"),
        "teamster_plan_queue_depth" => Same("nomad_nomad_plan_queue_depth"),
        "teamster_plan_node_rejected_total" => Same("nomad_nomad_plan_node_rejected"),
        "teamster_plan_evaluate_seconds" => Millis("nomad_nomad_plan_evaluate"),
        "teamster_plan_apply_seconds" => Millis("nomad_nomad_plan_apply"),
        "teamster_worker_dequeue_seconds" => Millis("nomad_nomad_worker_dequeue_eval"),
        "teamster_worker_ack_seconds" => Millis("nomad_nomad_worker_send_ack"),
        "teamster_worker_wait_for_index_seconds" => Millis("nomad_nomad_worker_wait_for_index"),
        "teamster_worker_submit_plan_seconds" => Millis("nomad_nomad_worker_submit_plan"),
        "teamster_worker_schedule_seconds" => {
            MillisByLabel("nomad_nomad_worker_invoke_scheduler_", "type", "")
        }
        "teamster_leader_barrier_seconds" => Millis("nomad_nomad_leader_barrier"),
        "teamster_service_seconds" => Count("nomad_nomad_rpc_request"),
        "teamster_raft_commit_seconds" => Millis("nomad_raft_commitTime"),
        "teamster_raft_fsm_apply_seconds" => Millis("nomad_raft_fsm_apply"),
        "teamster_raft_leader_last_contact_seconds" => Millis("nomad_raft_leader_lastContact"),
        "teamster_raft_applies_total" => Same("nomad_raft_apply"),
        _ => return None,
    })
}

/// The help text of a Nomad name that aliases a teamster metric.
fn nomad_help(alias: Alias, teamster_help: &str) -> String {
    match alias {
        Alias::Millis(_) | Alias::MillisByLabel(..) => {
            format!(
                "{} (Nomad's name; in milliseconds)",
                teamster_help.replace("Seconds", "Time")
            )
        }
        Alias::Count(_) => format!("Count of: {}", teamster_help.trim_end_matches('.')),
        Alias::Same(_) | Alias::SameByLabel(..) => format!("{teamster_help} (Nomad's name)"),
    }
}

/// What the recorder does with Nomad's names: whether it writes them, and their `host`
/// label. The process's recorder reads [`SETTINGS`]; the last agent started in a process
/// decides ([`configure`]).
pub struct Settings {
    /// `telemetry.nomad_names`.
    enabled: AtomicBool,
    /// The `host` label: `None` until configured (the host name then), `Some("")` when
    /// `telemetry.disable_hostname`.
    host: RwLock<Option<String>>,
    /// Bumped by each change: the handles made before are made again.
    generation: AtomicU64,
}

impl Settings {
    /// Nomad's names on, with the host name as their `host` label.
    pub const fn new() -> Settings {
        Settings {
            enabled: AtomicBool::new(true),
            host: RwLock::new(None),
            generation: AtomicU64::new(0),
        }
    }

    /// Write Nomad's names or not, and with which `host` label (empty: none).
    pub fn set(&self, enabled: bool, host: String) {
        self.enabled.store(enabled, Ordering::Relaxed);
        *self.host.write().unwrap_or_else(|e| e.into_inner()) = Some(host);
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether Nomad's names are written.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// The `host` label's value now (empty: no label).
    pub fn host(&self) -> String {
        let host = self.host.read().unwrap_or_else(|e| e.into_inner()).clone();
        host.unwrap_or_else(hostname)
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings::new()
    }
}

/// The process recorder's settings.
pub static SETTINGS: Settings = Settings::new();

/// Apply an agent's `[telemetry]` section to the process-wide recorder.
pub fn configure(config: &super::config::TelemetryConfig) {
    let host = if config.disable_hostname {
        String::new()
    } else {
        hostname()
    };
    SETTINGS.set(config.nomad_names, host);
}

/// This machine's host name (what Nomad's `host` label holds).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The process-wide Prometheus recorder (the `metrics` macros write to one global recorder;
/// several in-process agents in a test share it).
pub fn metrics_handle() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full(EVAL_LATENCY_METRIC.into()),
                    &eval_latency_buckets(),
                )
                .ok()?
                .build_recorder();
            let handle = recorder.handle();
            let recorder = NomadNames::new(recorder, &SETTINGS);
            recorder.describe_all();
            metrics::set_global_recorder(recorder).ok()?;
            Some(handle)
        })
        .clone()
}

/// A handle as the recorder keeps it, per key.
#[derive(Clone)]
enum Cached {
    Counter(Counter),
    Gauge(Gauge),
    Histogram(Histogram),
}

/// The recorder: Prometheus's, with Nomad's names written beside teamster's.
pub struct NomadNames<R> {
    inner: R,
    settings: &'static Settings,
    /// The fanned-out handles, by teamster key (aliased metrics only), with the
    /// [`Settings`] generation they were made in.
    cache: RwLock<HashMap<Key, (u64, Cached)>>,
}

impl<R: Recorder> NomadNames<R> {
    /// Wrap `inner`, writing Nomad's names as `settings` say.
    pub fn new(inner: R, settings: &'static Settings) -> Self {
        NomadNames {
            inner,
            settings,
            cache: RwLock::new(HashMap::new()),
        }
    }

    /// Give every teamster metric, and every Nomad name aliasing one, its help text.
    pub fn describe_all(&self) {
        for (kind, name, help) in HELP {
            let key = KeyName::from(*name);
            let help = SharedString::from(*help);
            match kind {
                Kind::Counter => self.inner.describe_counter(key, None, help),
                Kind::Gauge => self.inner.describe_gauge(key, None, help),
                Kind::Histogram => self.inner.describe_histogram(key, None, help),
            }
            let Some(alias) = alias(name) else { continue };
            let text = SharedString::from(nomad_help(alias, help_of(name)));
            let nomad = match alias {
                Alias::Same(n) | Alias::Millis(n) | Alias::Count(n) => n,
                // Named per label value: described when first written.
                Alias::MillisByLabel(..) | Alias::SameByLabel(..) => continue,
            };
            match (alias, kind) {
                (Alias::Count(_), _) | (Alias::Same(_), Kind::Counter) => {
                    self.inner.describe_counter(nomad.into(), None, text)
                }
                (Alias::Same(_), _) => self.inner.describe_gauge(nomad.into(), None, text),
                _ => self.inner.describe_histogram(nomad.into(), None, text),
            }
        }
    }

    /// Nomad's key for `key` under `name`: teamster's labels (less `drop`), plus `host`.
    fn nomad_key(&self, name: String, key: &Key, drop: Option<&str>, host: &str) -> Key {
        let mut labels: Vec<Label> = key
            .labels()
            .filter(|l| Some(l.key()) != drop)
            .cloned()
            .collect();
        if !host.is_empty() {
            labels.push(Label::new("host", host.to_string()));
        }
        Key::from_parts(name, labels)
    }

    /// The Nomad name of `key` under `alias`, with the label it reads dropped; `None` when
    /// the label is missing.
    fn nomad_name(alias: Alias, key: &Key) -> Option<(String, Option<&'static str>)> {
        let label = |l: &str| {
            key.labels()
                .find(|x| x.key() == l)
                .map(|x| x.value().to_string())
        };
        Some(match alias {
            Alias::Same(n) | Alias::Millis(n) | Alias::Count(n) => (n.to_string(), None),
            Alias::MillisByLabel(prefix, l, suffix) | Alias::SameByLabel(prefix, l, suffix) => {
                let value = label(l).filter(|v| !TEAMSTER_ONLY.contains(&v.as_str()))?;
                (format!("{prefix}{value}{suffix}"), Some(l))
            }
        })
    }

    fn cached(&self, key: &Key) -> Option<Cached> {
        let cache = self.cache.read().unwrap_or_else(|e| e.into_inner());
        let (generation, handle) = cache.get(key)?;
        (*generation == self.settings.generation()).then(|| handle.clone())
    }

    fn remember(&self, key: &Key, generation: u64, handle: Cached) {
        let mut cache = self.cache.write().unwrap_or_else(|e| e.into_inner());
        cache.insert(key.clone(), (generation, handle));
    }

    /// Describe a per-label Nomad name the first time it is written.
    fn describe_by_label(&self, kind: Kind, teamster: &str, nomad: &str, alias: Alias) {
        let text = SharedString::from(nomad_help(alias, help_of(teamster)));
        match kind {
            Kind::Gauge => self
                .inner
                .describe_gauge(nomad.to_string().into(), None, text),
            _ => self
                .inner
                .describe_histogram(nomad.to_string().into(), None, text),
        }
    }
}

/// The help text listed for `name` (empty when it is not listed).
fn help_of(name: &str) -> &'static str {
    HELP.iter()
        .find(|(_, n, _)| *n == name)
        .map_or("", |(_, _, h)| h)
}

struct TwoCounters(Counter, Counter);

impl CounterFn for TwoCounters {
    fn increment(&self, value: u64) {
        self.0.increment(value);
        self.1.increment(value);
    }
    fn absolute(&self, value: u64) {
        self.0.absolute(value);
        self.1.absolute(value);
    }
}

struct TwoGauges(Gauge, Gauge);

impl GaugeFn for TwoGauges {
    fn increment(&self, value: f64) {
        self.0.increment(value);
        self.1.increment(value);
    }
    fn decrement(&self, value: f64) {
        self.0.decrement(value);
        self.1.decrement(value);
    }
    fn set(&self, value: f64) {
        self.0.set(value);
        self.1.set(value);
    }
}

/// A teamster histogram and what Nomad's name makes of each value.
enum NomadSide {
    Millis(Histogram),
    Count(Counter),
}

struct HistogramAndNomad(Histogram, NomadSide);

impl HistogramFn for HistogramAndNomad {
    fn record(&self, value: f64) {
        self.0.record(value);
        match &self.1 {
            NomadSide::Millis(h) => h.record(value * 1000.0),
            NomadSide::Count(c) => c.increment(1),
        }
    }
}

impl<R: Recorder> Recorder for NomadNames<R> {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description)
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description)
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description)
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        let Some(alias) = alias(key.name()).filter(|_| self.settings.enabled()) else {
            return self.inner.register_counter(key, metadata);
        };
        if let Some(Cached::Counter(c)) = self.cached(key) {
            return c;
        }
        let generation = self.settings.generation();
        let host = self.settings.host();
        let own = self.inner.register_counter(key, metadata);
        let Some((name, drop)) = Self::nomad_name(alias, key) else {
            return own;
        };
        let nomad = self
            .inner
            .register_counter(&self.nomad_key(name, key, drop, &host), metadata);
        let both = Counter::from_arc(Arc::new(TwoCounters(own, nomad)));
        self.remember(key, generation, Cached::Counter(both.clone()));
        both
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        let Some(alias) = alias(key.name()).filter(|_| self.settings.enabled()) else {
            return self.inner.register_gauge(key, metadata);
        };
        if let Some(Cached::Gauge(g)) = self.cached(key) {
            return g;
        }
        let generation = self.settings.generation();
        let host = self.settings.host();
        let own = self.inner.register_gauge(key, metadata);
        let Some((name, drop)) = Self::nomad_name(alias, key) else {
            return own;
        };
        if drop.is_some() {
            self.describe_by_label(Kind::Gauge, key.name(), &name, alias);
        }
        let nomad = self
            .inner
            .register_gauge(&self.nomad_key(name, key, drop, &host), metadata);
        let both = Gauge::from_arc(Arc::new(TwoGauges(own, nomad)));
        self.remember(key, generation, Cached::Gauge(both.clone()));
        both
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        let Some(alias) = alias(key.name()).filter(|_| self.settings.enabled()) else {
            return self.inner.register_histogram(key, metadata);
        };
        if let Some(Cached::Histogram(h)) = self.cached(key) {
            return h;
        }
        let generation = self.settings.generation();
        let host = self.settings.host();
        let own = self.inner.register_histogram(key, metadata);
        let Some((name, drop)) = Self::nomad_name(alias, key) else {
            return own;
        };
        if drop.is_some() {
            self.describe_by_label(Kind::Histogram, key.name(), &name, alias);
        }
        let nomad_key = self.nomad_key(name, key, drop, &host);
        let side = match alias {
            Alias::Count(_) => NomadSide::Count(self.inner.register_counter(&nomad_key, metadata)),
            _ => NomadSide::Millis(self.inner.register_histogram(&nomad_key, metadata)),
        };
        let both = Histogram::from_arc(Arc::new(HistogramAndNomad(own, side)));
        self.remember(key, generation, Cached::Histogram(both.clone()));
        both
    }
}

#[cfg(test)]
mod tests;
