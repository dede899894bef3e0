//! Service health checks run by the client (Nomad's native `http` and `tcp` checks): every
//! check of a service that runs ([`checks_of`]) is probed every `interval` within its
//! `timeout`; its latest result ([`CheckResult`], what `/v1/client/allocation/:id/checks`
//! answers) goes in the client's shared results, a change of status wakes the service
//! registrar (the registration carries it) and the health watcher (`health_check =
//! "checks"`), and `check_restart` restarts the task after `limit` failures in a row past its
//! `grace` ([`RestartWatch`]), the restart policy deciding as for a crash.
//!
//! ```text
//!  alloc changes ─▶ checks_of(every allocation) ─▶ start / stop one prober per check
//!  prober: probe ─▶ outcome ─▶ results[alloc][check] ─(status changed)─▶ alloc_changes
//!                          └─▶ RestartWatch ─(limit reached)─▶ TaskControl::CheckRestart
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use teamster_storage::model::{CheckRestart, CHECK_FAILURE, CHECK_PENDING, CHECK_SUCCESS};
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use crate::client::services::{check_id, live_services, port_address, NodeFacts};
use crate::client::shared::{lock, Shared};
use crate::client::types::{CheckResult, LocalAlloc, TaskControl};

/// The most of a failing HTTP answer's body kept as the check's output (Nomad's 3 KiB).
const MAX_OUTPUT: usize = 3 * 1024;

/// One check to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckDef {
    /// `<registration ID>/<check name>`.
    pub id: String,
    /// The allocation.
    pub alloc_id: String,
    /// Its group.
    pub group: String,
    /// The task the service runs with (restarted by `check_restart`).
    pub task: String,
    /// The service's name.
    pub service: String,
    /// The check's name.
    pub name: String,
    /// What to probe.
    pub probe: Probe,
    /// How often.
    pub interval: Duration,
    /// How long one probe may take.
    pub timeout: Duration,
    /// When to restart the task.
    pub restart: Option<CheckRestart>,
    /// A readiness check (`on_update = "ignore"`): shown, not counted in the
    /// allocation's health.
    pub readiness: bool,
}

/// What a check probes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// An HTTP request; a status below 400 passes.
    Http {
        /// `http://host:port/path` (or `https://`, the check's `protocol`).
        url: String,
        /// Accept any certificate (`tls_skip_verify`); otherwise it must chain to a root
        /// of the node's bundle.
        insecure: bool,
        /// The method.
        method: String,
        /// Headers sent.
        headers: Vec<(String, String)>,
        /// A body sent.
        body: String,
    },
    /// A TCP connection to `host:port`.
    Tcp {
        /// Where.
        addr: String,
    },
}

/// The checks `local`'s running services have.
pub fn checks_of(local: &LocalAlloc, node: &NodeFacts) -> Vec<CheckDef> {
    let alloc = &local.alloc;
    let mut out = Vec::new();
    for live in live_services(local) {
        if live.service.checks.is_empty() {
            continue;
        }
        // The registration's ID names the checks (the service's name as registered).
        let reg = crate::client::services::desired_one(local, node, live);
        for check in &live.service.checks {
            let name = check.name_in(&reg.service_name);
            let label = if check.port_label.is_empty() {
                &live.service.port_label
            } else {
                &check.port_label
            };
            let (ip, port) = port_address(alloc, label, node.ip);
            let ip = if live.service.address.is_empty() {
                ip
            } else {
                live.service.address.clone()
            };
            let host = if ip.contains(':') {
                format!("[{ip}]:{port}")
            } else {
                format!("{ip}:{port}")
            };
            let probe = match check.r#type.as_str() {
                "http" => Probe::Http {
                    url: format!(
                        "{}://{host}{}",
                        if check.protocol == "https" {
                            "https"
                        } else {
                            "http"
                        },
                        check.path
                    ),
                    insecure: check.tls_skip_verify,
                    method: if check.method.is_empty() {
                        "GET".into()
                    } else {
                        check.method.clone()
                    },
                    headers: check
                        .header
                        .iter()
                        .flat_map(|(k, vs)| vs.iter().map(move |v| (k.clone(), v.clone())))
                        .collect(),
                    body: check.body.clone(),
                },
                _ => Probe::Tcp { addr: host },
            };
            out.push(CheckDef {
                readiness: check.is_readiness(),
                id: check_id(&reg.id, &name),
                alloc_id: alloc.id.to_string(),
                group: alloc.task_group.to_string(),
                task: live.task.name.clone(),
                service: reg.service_name.clone(),
                name,
                probe,
                interval: Duration::from_nanos(check.interval.max(1_000_000_000)),
                timeout: Duration::from_nanos(check.timeout.max(1_000_000_000)),
                restart: check
                    .check_restart
                    .clone()
                    .or_else(|| live.service.check_restart.clone())
                    .filter(|r| r.limit > 0),
            });
        }
    }
    out
}

/// What one probe found: `Ok((HTTP status, body))` (status 0 for tcp) or why it failed.
pub type ProbeOutcome = Result<(u16, String), String>;

/// The status, HTTP status and output of a probe's outcome, as Nomad words them.
pub fn judge(probe: &Probe, outcome: &ProbeOutcome) -> (&'static str, u16, String) {
    match (probe, outcome) {
        (Probe::Tcp { addr }, Ok(_)) => (CHECK_SUCCESS, 0, format!("nomad: tcp ok: {addr}")),
        (Probe::Http { .. }, Ok((code, body))) if *code < 400 => {
            let output = if *code == 200 {
                "nomad: http ok".to_string()
            } else {
                format!("nomad: http status {code}")
            };
            let _ = body;
            (CHECK_SUCCESS, *code, output)
        }
        (Probe::Http { .. }, Ok((code, body))) => {
            let mut output = body.clone();
            if output.len() > MAX_OUTPUT {
                let mut end = MAX_OUTPUT;
                while !output.is_char_boundary(end) {
                    end -= 1;
                }
                output.truncate(end);
            }
            (CHECK_FAILURE, *code, output)
        }
        (_, Err(e)) => (CHECK_FAILURE, 0, e.clone()),
    }
}

/// Counts a check's failures for `check_restart`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestartWatch {
    failures: u32,
}

impl RestartWatch {
    /// Record one result at `now` for a task running since `running_since` (Unix
    /// nanoseconds); true when the task must be restarted (the count starts over).
    pub fn observe(
        &mut self,
        passed: bool,
        now: i64,
        running_since: i64,
        restart: &CheckRestart,
    ) -> bool {
        if passed {
            self.failures = 0;
            return false;
        }
        let grace_ends =
            running_since.saturating_add(i64::try_from(restart.grace).unwrap_or(i64::MAX));
        if now < grace_ends {
            return false;
        }
        self.failures += 1;
        if restart.limit > 0 && self.failures >= restart.limit {
            self.failures = 0;
            return true;
        }
        false
    }
}

/// Start and stop one prober per check of the running services, as allocations change.
pub(crate) async fn check_loop(shared: Arc<Shared>, shutdown: CancellationToken) {
    let mut changes = shared.alloc_changes.subscribe();
    let mut running: HashMap<String, (CheckDef, CancellationToken)> = HashMap::new();
    let http = HttpClients::new();
    loop {
        let desired: BTreeMap<String, CheckDef> = {
            let st = shared.state();
            let node = NodeFacts::of(&shared, &st.node_id);
            st.allocs
                .values()
                .flat_map(|l| checks_of(l, &node))
                .map(|d| (d.id.clone(), d))
                .collect()
        };
        let gone: Vec<String> = running
            .iter()
            .filter(|(id, (def, _))| desired.get(*id) != Some(def))
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            if let Some((def, stop)) = running.remove(&id) {
                stop.cancel();
                let mut results = lock(&shared.check_results);
                if let Some(of_alloc) = results.get_mut(&def.alloc_id) {
                    of_alloc.remove(&def.id);
                    if of_alloc.is_empty() {
                        results.remove(&def.alloc_id);
                    }
                }
            }
        }
        for (id, def) in desired {
            if running.contains_key(&id) {
                continue;
            }
            let stop = shutdown.child_token();
            let span = tracing::info_span!("check", alloc_id = %def.alloc_id, check = %def.name);
            tokio::spawn(
                prober(shared.clone(), http.clone(), def.clone(), stop.clone()).instrument(span),
            );
            running.insert(id, (def, stop));
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            r = changes.changed() => {
                if r.is_err() {
                    return;
                }
            }
        }
    }
}

/// Where a node keeps its bundle of trusted roots (Debian's, then Red Hat's).
const ROOT_BUNDLES: [&str; 2] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

/// The HTTP clients checks use: one verifying `https` certificates against the node's
/// roots, one accepting any (`tls_skip_verify`). Neither follows a redirect's TLS any
/// differently from the first request; both keep connections pooled.
#[derive(Clone)]
pub(crate) struct HttpClients {
    verified: reqwest::Client,
    insecure: reqwest::Client,
}

impl HttpClients {
    /// The clients; never fails, so that no trouble with TLS stops the other checks (a
    /// verifying client it cannot build trusts nothing: its https checks fail, naming why).
    pub(crate) fn new() -> Self {
        Self::with_roots(&ROOT_BUNDLES)
    }

    /// Clients trusting the certificates of the first bundle of `bundles` that reads (those
    /// it can use: a bundle's unusable certificates are left out, as Go's pool leaves them).
    pub(crate) fn with_roots(bundles: &[&str]) -> Self {
        use rustls::pki_types::{pem::PemObject, CertificateDer};
        let mut roots = rustls::RootCertStore::empty();
        if let Some(pem) = bundles.iter().find_map(|path| std::fs::read(path).ok()) {
            let certs = CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok);
            let (_, ignored) = roots.add_parsable_certificates(certs);
            if ignored > 0 {
                debug!(
                    ignored,
                    "unusable certificates left out of the trusted roots"
                );
            }
        }
        if roots.is_empty() {
            warn!("no trusted roots found: https checks that verify certificates will fail");
        }
        let provider = crate::util::tls::provider();
        let verified = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map(|b| b.with_root_certificates(roots).with_no_client_auth())
            .map_err(|e| e.to_string());
        let insecure = crate::util::tls::insecure_client_config(None).map_err(|e| e.to_string());
        // A client with `config`'s TLS, or (logged) a plain one whose https checks fail.
        let client = |which: &str, config: Result<rustls::ClientConfig, String>| {
            config
                .and_then(|config| {
                    reqwest::Client::builder()
                        .use_preconfigured_tls(config)
                        .build()
                        .map_err(|e| e.to_string())
                })
                .unwrap_or_else(|e| {
                    warn!(error = %e, "no {which} HTTPS client for service checks");
                    reqwest::Client::new()
                })
        };
        Self {
            verified: client("verifying", verified),
            insecure: client("insecure", insecure),
        }
    }
}

/// Probe `def` every interval until stopped.
async fn prober(shared: Arc<Shared>, http: HttpClients, def: CheckDef, stop: CancellationToken) {
    let mut watch = RestartWatch::default();
    {
        let mut results = lock(&shared.check_results);
        results.entry(def.alloc_id.clone()).or_default().insert(
            def.id.clone(),
            result(&def, CHECK_PENDING, 0, String::new(), &shared, None),
        );
    }
    loop {
        let outcome = tokio::select! {
            _ = stop.cancelled() => return,
            o = probe(&http, &def) => o,
        };
        let (status, code, output) = judge(&def.probe, &outcome);
        let now = shared.clock.now_unix_nanos();
        let changed = {
            let mut results = lock(&shared.check_results);
            let of_alloc = results.entry(def.alloc_id.clone()).or_default();
            let previous = of_alloc.get(&def.id);
            let changed = previous.is_none_or(|p| p.status != status);
            let since = match previous.and_then(|p| p.success_since) {
                Some(t) if status == CHECK_SUCCESS => Some(t),
                _ if status == CHECK_SUCCESS => Some(now),
                _ => None,
            };
            of_alloc.insert(
                def.id.clone(),
                result(&def, status, code, output.clone(), &shared, since),
            );
            changed
        };
        if changed {
            debug!(status, %output, "check status changed");
            metrics::counter!("teamster_client_check_transitions_total", "status" => status)
                .increment(1);
            shared.alloc_changes.send_replace(());
        }
        if let Some(restart) = &def.restart {
            let since = running_since(&shared, &def);
            if watch.observe(status == CHECK_SUCCESS, now, since, restart) {
                info!(task = %def.task, "restarting the task: its check keeps failing");
                restart_task(&shared, &def).await;
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(def.interval) => {}
        }
    }
}

fn result(
    def: &CheckDef,
    status: &str,
    status_code: u16,
    output: String,
    shared: &Shared,
    success_since: Option<i64>,
) -> CheckResult {
    CheckResult {
        id: def.id.clone(),
        mode: if def.readiness {
            "readiness"
        } else {
            "healthiness"
        }
        .into(),
        status: status.into(),
        status_code,
        output,
        timestamp: shared.clock.now_unix_nanos() / 1_000_000_000,
        group: def.group.clone(),
        task: def.task.clone(),
        service: def.service.clone(),
        check: def.name.clone(),
        success_since,
    }
}

/// One probe within the check's timeout.
async fn probe(http: &HttpClients, def: &CheckDef) -> ProbeOutcome {
    let run = async {
        match &def.probe {
            Probe::Tcp { addr } => {
                let mut conn = tokio::net::TcpStream::connect(addr.as_str())
                    .await
                    .map_err(|e| format!("dial tcp {addr}: {e}"))?;
                let _ = conn.shutdown().await;
                Ok((0, String::new()))
            }
            Probe::Http {
                url,
                insecure,
                method,
                headers,
                body,
            } => {
                let method = reqwest::Method::from_bytes(method.as_bytes())
                    .map_err(|e| format!("method {method:?}: {e}"))?;
                let client = if *insecure {
                    &http.insecure
                } else {
                    &http.verified
                };
                let mut req = client.request(method, url.as_str());
                for (k, v) in headers {
                    req = req.header(k.as_str(), v.as_str());
                }
                if !body.is_empty() {
                    req = req.body(body.clone());
                }
                let resp = req.send().await.map_err(|e| {
                    let mut cause: &dyn std::error::Error = &e;
                    while let Some(inner) = cause.source() {
                        cause = inner;
                    }
                    format!("{url}: {cause}")
                })?;
                let code = resp.status().as_u16();
                let text = resp.text().await.unwrap_or_default();
                Ok((code, text))
            }
        }
    };
    match tokio::time::timeout(def.timeout, run).await {
        Ok(outcome) => outcome,
        Err(_) => Err(format!(
            "timed out after {}",
            humantime::format_duration(def.timeout)
        )),
    }
}

/// Since when the check's task has run, Unix nanoseconds.
fn running_since(shared: &Shared, def: &CheckDef) -> i64 {
    shared
        .state()
        .allocs
        .get(&def.alloc_id)
        .and_then(|l| l.task_states.get(&def.task))
        .map(crate::client::health::running_since)
        .unwrap_or(i64::MIN)
}

/// Ask the task's runner to restart it for its failing check.
async fn restart_task(shared: &Shared, def: &CheckDef) {
    let tx = lock(&shared.runners)
        .get(&def.alloc_id)
        .and_then(|r| r.task(&def.task));
    let Some(tx) = tx else {
        return;
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    let asked = tx
        .send(TaskControl::CheckRestart {
            check: def.name.clone(),
            reply,
        })
        .await;
    if asked.is_ok() {
        let _ = answer.await;
    }
}

/// The check results of `alloc_id`, for `/v1/client/allocation/:id/checks`.
pub fn results_of(shared: &Shared, alloc_id: &str) -> BTreeMap<String, CheckResult> {
    lock(&shared.check_results)
        .get(alloc_id)
        .cloned()
        .unwrap_or_default()
}

/// What the health watcher sees of an allocation's checks: `None` when it has none to
/// judge by, else since when every one of them has passed (`None` inside: not all pass).
/// Called with the client's state locked (it locks the results after it, as every caller
/// does).
pub fn passing_since(shared: &Shared, node_id: &str, local: &LocalAlloc) -> Option<Option<i64>> {
    // Readiness checks (`on_update = "ignore"`) do not count, as in Nomad.
    let defs: Vec<CheckDef> = checks_of(local, &NodeFacts::of(shared, node_id))
        .into_iter()
        .filter(|d| !d.readiness)
        .collect();
    if defs.is_empty() {
        return None;
    }
    let results = lock(&shared.check_results);
    let of_alloc = results.get(local.alloc.id.as_str());
    let mut latest = i64::MIN;
    for def in &defs {
        match of_alloc
            .and_then(|r| r.get(&def.id))
            .and_then(|r| r.success_since)
        {
            Some(t) => latest = latest.max(t),
            None => return Some(None),
        }
    }
    Some(Some(latest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn restart(limit: u32, grace_s: u64) -> CheckRestart {
        CheckRestart {
            limit,
            grace: grace_s * 1_000_000_000,
            ignore_warnings: false,
        }
    }

    const S: i64 = 1_000_000_000;

    /// An HTTPS server on loopback answering every request 200, with a self-signed
    /// certificate for 127.0.0.1; returns its port and the certificate's PEM.
    async fn https_server() -> (u16, String) {
        use tokio::io::AsyncReadExt;
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let config = rustls::ServerConfig::builder_with_provider(crate::util::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut buf = vec![0u8; 4096];
                    let mut got = Vec::new();
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let answer =
                        "HTTP/1.1 200 OK\r\nContent-Length: 6\r\nConnection: close\r\n\r\nsecure";
                    let _ = tls.write_all(answer.as_bytes()).await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        (port, cert.pem())
    }

    fn https_check(port: u16, insecure: bool) -> CheckDef {
        CheckDef {
            id: "r/c".into(),
            alloc_id: "a".into(),
            group: "g".into(),
            task: "t".into(),
            service: "web".into(),
            name: "c".into(),
            probe: Probe::Http {
                url: format!("https://127.0.0.1:{port}/health"),
                insecure,
                method: "GET".into(),
                headers: vec![],
                body: String::new(),
            },
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(10),
            restart: None,
            readiness: false,
        }
    }

    #[tokio::test]
    async fn an_https_check_verifies_the_certificate_unless_told_to_skip() {
        let (port, pem) = https_server().await;
        let dir = tempfile::tempdir().unwrap();
        let bundle = dir.path().join("roots.pem");
        std::fs::write(&bundle, pem).unwrap();
        let bundle = bundle.to_str().unwrap();
        // Roots without the server's certificate: the handshake fails, the check fails.
        let strangers = HttpClients::with_roots(&["/nonexistent/roots.pem"]);
        let outcome = probe(&strangers, &https_check(port, false)).await;
        let (status, _, output) = judge(&https_check(port, false).probe, &outcome);
        assert_eq!(status, CHECK_FAILURE, "{output}");
        assert!(output.contains("certificate"), "{output}");
        // tls_skip_verify: the same server passes.
        let outcome = probe(&strangers, &https_check(port, true)).await;
        assert_eq!(outcome, Ok((200, "secure".into())));
        // A bundle that holds the certificate: verified and passing.
        let trusting = HttpClients::with_roots(&["/nonexistent/roots.pem", bundle]);
        let outcome = probe(&trusting, &https_check(port, false)).await;
        assert_eq!(outcome, Ok((200, "secure".into())));
    }

    #[test]
    fn http_below_400_passes_and_above_fails_with_its_body_cut() {
        let http = Probe::Http {
            url: "http://x/".into(),
            insecure: false,
            method: "GET".into(),
            headers: vec![],
            body: String::new(),
        };
        assert_eq!(
            judge(&http, &Ok((200, "hi".into()))),
            (CHECK_SUCCESS, 200, "nomad: http ok".into())
        );
        assert_eq!(judge(&http, &Ok((302, String::new()))).0, CHECK_SUCCESS);
        let long = "é".repeat(4000);
        let (status, code, output) = judge(&http, &Ok((503, long)));
        assert_eq!((status, code), (CHECK_FAILURE, 503));
        assert!(output.len() <= MAX_OUTPUT && output.starts_with('é'));
        assert_eq!(
            judge(&http, &Err("refused".into())),
            (CHECK_FAILURE, 0, "refused".into())
        );
        let tcp = Probe::Tcp { addr: "a:1".into() };
        assert_eq!(judge(&tcp, &Ok((0, String::new()))).0, CHECK_SUCCESS);
    }

    #[test]
    fn check_restart_counts_failures_in_a_row_past_the_grace() {
        let r = restart(3, 10);
        let mut w = RestartWatch::default();
        let started = 100 * S;
        // Within the grace nothing counts.
        for t in 101..110 {
            assert!(!w.observe(false, t * S, started, &r));
        }
        assert!(!w.observe(false, 110 * S, started, &r));
        assert!(!w.observe(false, 111 * S, started, &r));
        // A pass starts the count over.
        assert!(!w.observe(true, 112 * S, started, &r));
        assert!(!w.observe(false, 113 * S, started, &r));
        assert!(!w.observe(false, 114 * S, started, &r));
        assert!(w.observe(false, 115 * S, started, &r));
        // And after a restart it starts over.
        assert!(!w.observe(false, 116 * S, started, &r));
    }
}
