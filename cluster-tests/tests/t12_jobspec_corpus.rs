//! The job file corpus in `deploy/jobs/`: every `X.nomad.hcl` has a hand-written `X.json`
//! twin (`{"Job": …}`, Nomad's API shape: what Nomad's own parser gives for the file, with
//! the defaults it fills in at parse time), and
//!
//! - the HCL parser gives the twin, field for field (after dropping nulls and empty lists,
//!   which Nomad's API treats as unset, and the defaults written out in the oldest twins,
//!   [`EXPLICIT_DEFAULTS`]);
//! - the corpus sets every jobspec block at least once, so it cannot silently lose coverage;
//! - against a live one-server cluster: a twin that sets fields teamster does not act on is
//!   refused with a 400 that names every such field and nothing is written; any other twin
//!   is registered and read back with every field it set; and `/v1/jobs/parse` gives the
//!   same job as the local parser.
//!
//! The tests at the end pin, construct by construct, what Nomad's parser gives where the
//! parser once differed (dynamic blocks, variable validation, constraint shortcuts, …).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};
use teamster::jobspec::hcl::{parse_job, VarInputs};
use teamster::jobspec::unsupported_fields;
use teamster_cluster_tests::process::{ClusterOptions, ProcessCluster};

fn jobs_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/jobs")
}

/// One HCL file and its JSON twin.
struct Pair {
    /// `X` of `X.nomad.hcl` / `X.json`.
    stem: String,
    /// `X.nomad.hcl`.
    hcl_name: String,
    /// The HCL text.
    hcl: String,
    /// The twin's `Job` object.
    twin: Value,
}

impl Pair {
    /// The file parsed as the CLI parses it (strict, no variables from outside).
    fn parsed(&self) -> Value {
        let inputs = VarInputs {
            strict: true,
            ..Default::default()
        };
        parse_job(&self.hcl_name, &self.hcl, &inputs)
            .unwrap_or_else(|e| panic!("{}: {e}", self.hcl_name))
    }

    fn id(&self) -> &str {
        self.twin["ID"]
            .as_str()
            .unwrap_or_else(|| panic!("{}.json: no Job.ID", self.stem))
    }
}

/// Every pair in `deploy/jobs/`, sorted by name. Panics unless every HCL file has a JSON
/// twin and every JSON file an HCL twin.
fn corpus() -> Vec<Pair> {
    let mut hcl = BTreeSet::new();
    let mut json = BTreeSet::new();
    for entry in std::fs::read_dir(jobs_dir()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        if let Some(stem) = name.strip_suffix(".nomad.hcl") {
            hcl.insert(stem.to_string());
        } else if let Some(stem) = name.strip_suffix(".json") {
            json.insert(stem.to_string());
        }
    }
    let lone_hcl: Vec<_> = hcl.difference(&json).collect();
    let lone_json: Vec<_> = json.difference(&hcl).collect();
    assert!(
        lone_hcl.is_empty() && lone_json.is_empty(),
        "HCL files without a JSON twin: {lone_hcl:?}; JSON files without an HCL twin: {lone_json:?}"
    );
    hcl.into_iter()
        .map(|stem| {
            let hcl_name = format!("{stem}.nomad.hcl");
            let text = std::fs::read_to_string(jobs_dir().join(&hcl_name)).unwrap();
            let twin_text =
                std::fs::read_to_string(jobs_dir().join(format!("{stem}.json"))).unwrap();
            let wrapped: Value = serde_json::from_str(&twin_text)
                .unwrap_or_else(|e| panic!("{stem}.json is not JSON: {e}"));
            let twin = wrapped
                .get("Job")
                .filter(|j| j.is_object())
                .unwrap_or_else(|| panic!("{stem}.json is not {{\"Job\": {{…}}}}"))
                .clone();
            Pair {
                stem,
                hcl_name,
                hcl: text,
                twin,
            }
        })
        .collect()
}

/// `v` without `null`s and empty lists, recursively: Nomad's API reads both as unset, and a
/// hand-written job leaves them out. Empty objects stay (an empty block is set: `update {}`
/// turns rolling updates on), and so do zeros, `false` and `""`.
fn normalized(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null() && v.as_array().is_none_or(|a| !a.is_empty()))
                .map(|(k, v)| (k.clone(), normalized(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

/// The JSON pointers (RFC 6901) at which `a` and `b` differ, as deep as they can be told
/// apart: a key on one side only, lists of different lengths, unequal scalars.
fn differences(a: &Value, b: &Value, at: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let here = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => differences(p, q, &here, out),
                    (Some(p), None) => out.push(format!("{here}: only in the HCL parse: {p}")),
                    (None, Some(q)) => out.push(format!("{here}: only in the twin: {q}")),
                    (None, None) => unreachable!(),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                differences(p, q, &format!("{at}/{i}"), out);
            }
        }
        _ if a == b => {}
        _ => out.push(format!("{at}: the HCL parse gives {a}, the twin {b}")),
    }
}

/// Removes and returns the value at a JSON pointer.
fn take(v: &mut Value, pointer: &str) -> Option<Value> {
    let (parent, last) = pointer.rsplit_once('/')?;
    let last = last.replace("~1", "/").replace("~0", "~");
    match v.pointer_mut(parent)? {
        Value::Object(map) => map.remove(&last),
        Value::Array(items) => {
            let i: usize = last.parse().ok()?;
            (i < items.len()).then(|| items.remove(i))
        }
        _ => None,
    }
}

/// Values a twin spells out where its HCL file leaves the default (in the five pairs that
/// predate the corpus, which stay as they are): the HCL parse lacks them, and the job the
/// model makes of the HCL parse (canonicalized, as the server stores it) has the twin's value.
const EXPLICIT_DEFAULTS: &[(&str, &str)] = &[
    ("node-agent-system", "/TaskGroups/0/Count"),
    ("sleep", "/Type"),
];

/// The job the servers would store for `job`: decoded by the model and canonicalized.
fn canonical(job: &Value, what: &str) -> Value {
    let mut model: teamster_storage::model::Job =
        serde_json::from_value(job.clone()).unwrap_or_else(|e| panic!("{what}: {e}"));
    model.canonicalize();
    serde_json::to_value(&model).unwrap()
}

#[test]
fn every_hcl_file_parses_to_its_json_twin() {
    let pairs = corpus();
    assert!(
        pairs.len() >= 26,
        "the corpus should hold at least 26 HCL/JSON pairs, found {}",
        pairs.len()
    );
    let mut failures = Vec::new();
    for pair in &pairs {
        let parsed = pair.parsed();
        // Whatever the shape, the same fields are refused in the same places.
        let refused = |job: &Value| -> Vec<String> {
            unsupported_fields(job)
                .iter()
                .map(|u| format!("{}: {}", u.path, u.field))
                .collect()
        };
        if refused(&parsed) != refused(&pair.twin) {
            failures.push(format!(
                "{}: the HCL parse refuses {:?}, the twin {:?}",
                pair.stem,
                refused(&parsed),
                refused(&pair.twin)
            ));
        }
        let mut from_hcl = normalized(&parsed);
        let mut twin = normalized(&pair.twin);
        for (_, pointer) in EXPLICIT_DEFAULTS.iter().filter(|(f, _)| *f == pair.stem) {
            let hcl_side = take(&mut from_hcl, pointer);
            let twin_side = take(&mut twin, pointer);
            let stored = canonical(&parsed, &pair.hcl_name).pointer(pointer).cloned();
            if hcl_side.is_some() || twin_side.is_none() || stored != twin_side {
                failures.push(format!(
                    "{} {pointer}: listed in EXPLICIT_DEFAULTS, but the HCL parse gives {hcl_side:?}, \
                     the twin {twin_side:?} and the stored job {stored:?}",
                    pair.stem
                ));
            }
        }
        let mut diffs = Vec::new();
        differences(&from_hcl, &twin, "", &mut diffs);
        for d in diffs {
            failures.push(format!("{} {d}", pair.stem));
        }
    }
    for (file, _) in EXPLICIT_DEFAULTS {
        if !pairs.iter().any(|p| p.stem == *file) {
            failures.push(format!(
                "{file} is listed in EXPLICIT_DEFAULTS but is not in the corpus"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Whether `job` sets the field at `path` (`.`-separated, `[]` for any element of a list:
/// `TaskGroups[].Update`) to something other than null, an empty list, map or string, `false`
/// or zero.
fn set_at(job: &Value, path: &str) -> bool {
    fn walk(v: &Value, segments: &[&str]) -> bool {
        let Some((first, rest)) = segments.split_first() else {
            return match v {
                Value::Null => false,
                Value::Array(a) => !a.is_empty(),
                Value::Object(o) => !o.is_empty(),
                Value::String(s) => !s.is_empty(),
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64() != Some(0.0),
            };
        };
        match first.strip_suffix("[]") {
            Some(key) => v
                .get(key)
                .and_then(Value::as_array)
                .is_some_and(|items| items.iter().any(|i| walk(i, rest))),
            None => v.get(*first).is_some_and(|inner| walk(inner, rest)),
        }
    }
    walk(job, &path.split('.').collect::<Vec<_>>())
}

/// The fields of Nomad's job the corpus must set somewhere (in a twin), one per jobspec
/// block or argument that matters: the `job`, `group` and `task` blocks with `constraint`,
/// `affinity`, `spread`, `resources`, `restart`, `reschedule`, `update`, `migrate`,
/// `periodic`, `parameterized`, `network`/`port`, `service`/`check`, `lifecycle`, `meta`,
/// `env`, `template`, `artifact`, `volume`, `scaling` and the rest.
const REQUIRED_FIELDS: &[&str] = &[
    "Region",
    "Namespace",
    "NodePool",
    "Priority",
    "AllAtOnce",
    "Datacenters",
    "Constraints",
    "Affinities",
    "Spreads[].SpreadTarget",
    "Meta",
    "Update",
    "Migrate",
    "Reschedule",
    "Periodic",
    "ParameterizedJob",
    "UI",
    "TaskGroups[].Count",
    "TaskGroups[].Constraints",
    "TaskGroups[].Affinities",
    "TaskGroups[].Spreads",
    "TaskGroups[].RestartPolicy",
    "TaskGroups[].ReschedulePolicy",
    "TaskGroups[].Meta",
    "TaskGroups[].Update",
    "TaskGroups[].Migrate",
    "TaskGroups[].Networks[].Mode",
    "TaskGroups[].Networks[].DNS",
    "TaskGroups[].Networks[].DynamicPorts",
    "TaskGroups[].Networks[].ReservedPorts",
    "TaskGroups[].Services[].Checks",
    "TaskGroups[].Services[].Checks[].CheckRestart",
    "TaskGroups[].Volumes",
    "TaskGroups[].Scaling",
    "TaskGroups[].Scaling.Policy",
    "TaskGroups[].EphemeralDisk",
    "TaskGroups[].Disconnect",
    "TaskGroups[].ShutdownDelay",
    "TaskGroups[].MaxRunDuration",
    "TaskGroups[].Services[].Checks[].GRPCService",
    "TaskGroups[].Services[].Checks[].Expose",
    "TaskGroups[].Services[].Connect.SidecarService.Proxy.Upstreams",
    "TaskGroups[].Services[].Connect.SidecarTask",
    "TaskGroups[].Services[].Connect.Gateway.Ingress",
    "TaskGroups[].Consul",
    "TaskGroups[].Tasks[].Consul",
    "TaskGroups[].Tasks[].Config",
    "TaskGroups[].Tasks[].Env",
    "TaskGroups[].Tasks[].Meta",
    "TaskGroups[].Tasks[].Resources.CPU",
    "TaskGroups[].Tasks[].Resources.MemoryMB",
    "TaskGroups[].Tasks[].Resources.DiskMB",
    "TaskGroups[].Tasks[].Resources.Cores",
    "TaskGroups[].Tasks[].Resources.MemoryMaxMB",
    "TaskGroups[].Tasks[].Resources.Devices",
    "TaskGroups[].Tasks[].Constraints",
    "TaskGroups[].Tasks[].Affinities",
    "TaskGroups[].Tasks[].RestartPolicy",
    "TaskGroups[].Tasks[].KillTimeout",
    "TaskGroups[].Tasks[].KillSignal",
    "TaskGroups[].Tasks[].Leader",
    "TaskGroups[].Tasks[].User",
    "TaskGroups[].Tasks[].ShutdownDelay",
    "TaskGroups[].Tasks[].Lifecycle",
    "TaskGroups[].Tasks[].Services[].Checks",
    "TaskGroups[].Tasks[].Templates",
    "TaskGroups[].Tasks[].Artifacts",
    "TaskGroups[].Tasks[].VolumeMounts",
    "TaskGroups[].Tasks[].DispatchPayload",
    "TaskGroups[].Tasks[].Vault",
    "TaskGroups[].Tasks[].LogConfig",
    "TaskGroups[].Tasks[].Identity",
];

/// What the corpus's HCL must contain somewhere, outside comments: the language features
/// (variables with types and defaults, `variables`, `locals`, references, functions,
/// heredocs, escapes, runtime interpolations) and every block.
const REQUIRED_HCL: &[&str] = &[
    "variable \"",
    "variables {",
    "locals {",
    "default",
    "description",
    "= string",
    "= number",
    "= bool",
    "= list(string)",
    "= map(string)",
    "= object({",
    "var.",
    "local.",
    "format(",
    "join(",
    "lower(",
    "upper(",
    "concat(",
    "merge(",
    "jsonencode(",
    "lookup(",
    "replace(",
    " ? ",
    "<<-",
    "$${",
    "${NOMAD_",
    "${attr.",
    "${node.",
    "${meta.",
    "job \"",
    "group \"",
    "task \"",
    "constraint {",
    "affinity {",
    "spread {",
    "target \"",
    "resources {",
    "restart {",
    "reschedule {",
    "update {",
    "migrate {",
    "periodic {",
    "parameterized {",
    "network {",
    "port \"",
    "dns {",
    "service {",
    "check {",
    "check_restart {",
    "lifecycle {",
    "meta {",
    "env {",
    "config {",
    "template {",
    "artifact {",
    "volume \"",
    "volume_mount {",
    "scaling {",
    "policy {",
    "ephemeral_disk {",
    "dispatch_payload {",
    "disconnect {",
    "logs {",
    "vault {",
    "identity {",
    "device \"",
    "ui {",
    "connect {",
    "sidecar_service {",
    "upstreams {",
    "gateway {",
    "consul {",
];

/// The HCL text without its comment lines (Nomad's example comments out many blocks).
fn without_comments(text: &str) -> String {
    text.lines()
        .filter(|l| {
            let t = l.trim_start();
            !t.starts_with('#') && !t.starts_with("//")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_corpus_sets_every_jobspec_block_and_language_feature() {
    let pairs = corpus();
    let mut missing = Vec::new();
    for field in REQUIRED_FIELDS {
        if !pairs.iter().any(|p| set_at(&p.twin, field)) {
            missing.push(format!("no twin sets {field}"));
        }
    }
    let texts: Vec<String> = pairs.iter().map(|p| without_comments(&p.hcl)).collect();
    for token in REQUIRED_HCL {
        if !texts.iter().any(|t| t.contains(token)) {
            missing.push(format!("no HCL file has {token:?} outside comments"));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));

    // A job of several groups, a group of several tasks, a task at the job level.
    let groups = |p: &Pair| p.twin["TaskGroups"].as_array().cloned().unwrap_or_default();
    assert!(
        pairs.iter().any(|p| groups(p).len() > 1),
        "no job with several groups"
    );
    assert!(
        pairs.iter().any(|p| groups(p)
            .iter()
            .any(|g| g["Tasks"].as_array().is_some_and(|t| t.len() > 2))),
        "no group with more than two tasks"
    );
    assert!(
        texts
            .iter()
            .any(|t| t.lines().any(|l| l.starts_with("  task \""))),
        "no job-level task block"
    );
    // Every job type.
    let types: BTreeSet<&str> = pairs
        .iter()
        .map(|p| p.twin["Type"].as_str().unwrap_or("service"))
        .collect();
    assert_eq!(
        types,
        BTreeSet::from(["batch", "service", "system", "sysbatch"]),
        "job types in the corpus"
    );
    // Jobs teamster runs and jobs it refuses, both in number.
    let refused = pairs
        .iter()
        .filter(|p| !unsupported_fields(&p.twin).is_empty())
        .count();
    let accepted = pairs.len() - refused;
    assert!(
        accepted >= 10,
        "only {accepted} accepted jobs in the corpus"
    );
    // (As teamster learns to act on more fields, refused jobs become accepted ones.)
    assert!(
        refused > 0,
        "no corpus job exercises the refusal of a field"
    );
    // Job IDs are unique, so the whole corpus can be registered in one cluster.
    let ids: BTreeSet<&str> = pairs.iter().map(Pair::id).collect();
    assert_eq!(ids.len(), pairs.len(), "job IDs repeat in the corpus");
    // Nomad's own `nomad job init` example is among them.
    let example = pairs
        .iter()
        .find(|p| p.stem == "example")
        .expect("deploy/jobs/example.nomad.hcl, Nomad's `job init` example");
    assert!(example
        .hcl
        .contains("# There can only be a single job definition per file. This job is named"));
    assert_eq!(example.id(), "example");
    assert_eq!(example.twin["TaskGroups"][0]["Name"], "cache");
}

/// Where `submitted` (nulls and empty lists dropped) is not contained in `stored`: every
/// field it sets must be there with an equal value; lists must have the same length.
/// The job as Nomad's servers keep it: a job-level `Reschedule` is merged into every
/// group's `ReschedulePolicy` (the group's own fields first) and not kept at the job level,
/// a `ui` link's `URL` (its API's spelling) is answered as `Url`, and a group's deprecated
/// `PreventRescheduleOnLost` is kept as `Disconnect.Replace = false`.
fn as_nomad_stores(mut job: Value) -> Value {
    let groups = job.pointer_mut("/TaskGroups").and_then(Value::as_array_mut);
    for group in groups.into_iter().flatten() {
        let Some(map) = group.as_object_mut() else {
            continue;
        };
        if map.remove("PreventRescheduleOnLost") == Some(Value::Bool(true)) {
            map.insert("Disconnect".into(), json!({ "Replace": false }));
        }
    }
    let links = job.pointer_mut("/UI/Links").and_then(Value::as_array_mut);
    for link in links.into_iter().flatten() {
        if let Some(url) = link.as_object_mut().and_then(|l| l.remove("URL")) {
            link["Url"] = url;
        }
    }
    let Some(Value::Object(job_policy)) = job.as_object_mut().and_then(|j| j.remove("Reschedule"))
    else {
        return job;
    };
    let groups = job.pointer_mut("/TaskGroups").and_then(Value::as_array_mut);
    for group in groups.into_iter().flatten() {
        let mut merged = job_policy.clone();
        if let Some(Value::Object(own)) = group.get("ReschedulePolicy") {
            merged.extend(own.clone());
        }
        group["ReschedulePolicy"] = Value::Object(merged);
    }
    job
}

fn not_contained(submitted: &Value, stored: &Value, at: &str, out: &mut Vec<String>) {
    match (submitted, stored) {
        (Value::Object(sub), Value::Object(sup)) => {
            for (k, v) in sub {
                let here = format!("{at}/{k}");
                match sup.get(k) {
                    Some(s) => not_contained(v, s, &here, out),
                    None => out.push(format!("{here}: submitted {v}, not stored")),
                }
            }
        }
        (Value::Array(sub), Value::Array(sup)) if sub.len() == sup.len() => {
            for (i, (v, s)) in sub.iter().zip(sup).enumerate() {
                not_contained(v, s, &format!("{at}/{i}"), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(format!("{at}: submitted {a}, stored {b}")),
    }
}

/// POST `body` as JSON; the status and the body text.
async fn post(
    http: &reqwest::Client,
    url: String,
    body: &Value,
) -> anyhow::Result<(StatusCode, String)> {
    let resp = http.post(url).json(body).send().await?;
    let status = resp.status();
    Ok((status, resp.text().await?))
}

#[tokio::test]
async fn every_corpus_job_is_stored_as_submitted_or_refused_by_name() -> anyhow::Result<()> {
    let pairs = corpus();
    let mut c = ProcessCluster::start(1, ClusterOptions::default())?;
    c.wait_leader(Duration::from_secs(30)).await?;
    let base = c.servers[0].http_addr();
    let http = reqwest::Client::new();
    let mut failures = Vec::new();
    let mut accepted = BTreeSet::new();
    for pair in &pairs {
        let id = pair.id();
        // The server's parser gives what the local one gives.
        let (status, body) = post(
            &http,
            format!("{base}/v1/jobs/parse"),
            &json!({ "JobHCL": pair.hcl, "Canonicalize": false }),
        )
        .await?;
        if status != StatusCode::OK {
            failures.push(format!(
                "{}: /v1/jobs/parse answered {status}: {body}",
                pair.hcl_name
            ));
        } else if serde_json::from_str::<Value>(&body)? != pair.parsed() {
            failures.push(format!(
                "{}: /v1/jobs/parse gave {body}, the local parser {}",
                pair.hcl_name,
                pair.parsed()
            ));
        }

        let refused = unsupported_fields(&pair.twin);
        if refused.is_empty() {
            // Planned first, as `job plan` does before a run: a new job, every group added.
            let (status, body) = post(
                &http,
                format!("{base}/v1/job/{id}/plan"),
                &json!({ "Job": pair.twin, "Diff": true }),
            )
            .await?;
            let planned: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            if status != StatusCode::OK || planned["Diff"]["Type"] != "Added" {
                failures.push(format!(
                    "{}.json: planning answered {status}: {body:.300}",
                    pair.stem
                ));
            }
        }
        let (status, body) = post(
            &http,
            format!("{base}/v1/jobs"),
            &json!({ "Job": pair.twin }),
        )
        .await?;
        if refused.is_empty() {
            if status != StatusCode::OK {
                failures.push(format!(
                    "{}.json: registering answered {status}: {body}",
                    pair.stem
                ));
                continue;
            }
            accepted.insert(id.to_string());
            let url = format!("{base}/v1/job/{id}");
            let stored: Value = teamster_cluster_tests::wait_for(
                Duration::from_secs(10),
                &format!("job {id} readable"),
                || {
                    let (http, url) = (http.clone(), url.clone());
                    async move {
                        let resp = http.get(url).send().await.ok()?;
                        if resp.status() != StatusCode::OK {
                            return None;
                        }
                        resp.json().await.ok()
                    }
                },
            )
            .await?;
            let mut lost = Vec::new();
            not_contained(
                &as_nomad_stores(normalized(&pair.twin)),
                &stored,
                "",
                &mut lost,
            );
            for l in lost {
                failures.push(format!("{}.json: {l}", pair.stem));
            }
        } else {
            if status != StatusCode::BAD_REQUEST {
                failures.push(format!(
                    "{}.json sets {} field(s) teamster refuses, but registering answered \
                     {status}: {body}",
                    pair.stem,
                    refused.len()
                ));
                continue;
            }
            let count = format!("{} error(s) occurred", refused.len());
            if !body.starts_with(&count) {
                failures.push(format!("{}.json: expected {count:?}: {body}", pair.stem));
            }
            for field in &refused {
                if !body.contains(&field.to_string()) {
                    failures.push(format!(
                        "{}.json: the 400 does not name {field}: {body}",
                        pair.stem
                    ));
                }
            }
            let resp = http.get(format!("{base}/v1/job/{id}")).send().await?;
            if resp.status() != StatusCode::NOT_FOUND {
                failures.push(format!(
                    "{}.json was refused but GET /v1/job/{id} answered {}",
                    pair.stem,
                    resp.status()
                ));
            }
        }
    }
    // Nothing but the accepted jobs was written.
    let listed: Vec<Value> = http
        .get(format!("{base}/v1/jobs"))
        .send()
        .await?
        .json()
        .await?;
    let listed: BTreeSet<String> = listed
        .iter()
        .filter_map(|j| j["ID"].as_str().map(str::to_string))
        .collect();
    if listed != accepted {
        failures.push(format!(
            "the cluster holds {listed:?}, the accepted jobs are {accepted:?}"
        ));
    }
    assert!(
        accepted.len() >= 10,
        "only {} jobs were accepted",
        accepted.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

// Constructs where the parser once differed from Nomad's: each test says what Nomad's
// parser gives.

/// Parse a job text as the CLI does (strict), with `-var` flags.
fn parse_with(text: &str, flags: &[(&str, &str)]) -> Result<Value, String> {
    let inputs = VarInputs {
        strict: true,
        flags: flags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Default::default()
    };
    parse_job("gap.nomad.hcl", text, &inputs).map_err(|e| e.to_string())
}

fn parse(text: &str) -> Value {
    parse_with(text, &[]).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn nomad_parity_for_expression_variables_are_evaluated_inside_strings() {
    let job = parse(
        r#"
variable "paths" {
  default = ["/a", "/b"]
}

job "j" {
  meta {
    flags = join(" ", [for p in var.paths : "--path=${p}"])
    list  = "%{for p in var.paths}${p};%{endfor}"
  }
}
"#,
    );
    assert_eq!(
        job["Meta"],
        json!({ "flags": "--path=/a --path=/b", "list": "/a;/b;" })
    );
}

#[test]
fn nomad_parity_jsonencode_and_keys_sort_keys_as_nomad_does() {
    let job = parse(
        r#"
locals {
  labels = merge({ team = "web" }, { app = "shop" })
}

job "j" {
  meta {
    labels = jsonencode(local.labels)
    keys   = join(",", keys({ b = 1, a = 2 }))
  }
}
"#,
    );
    assert_eq!(
        job["Meta"],
        json!({ "labels": "{\"app\":\"shop\",\"team\":\"web\"}", "keys": "a,b" })
    );
}

#[test]
fn nomad_parity_env_and_meta_as_attributes() {
    let job = parse(
        r#"
job "j" {
  group "g" {
    meta = { "team.name" = "web" }

    task "t" {
      driver = "raw_exec"
      env    = merge({ APP_ENV = "prod" }, { "log.level" = "info" })
      meta   = { "build.id" = "42" }

      config {
        command = "/bin/sleep"
        args    = ["60"]
      }
    }
  }
}
"#,
    );
    let group = &job["TaskGroups"][0];
    assert_eq!(group["Meta"], json!({ "team.name": "web" }));
    assert_eq!(
        group["Tasks"][0]["Env"],
        json!({ "APP_ENV": "prod", "log.level": "info" })
    );
    assert_eq!(group["Tasks"][0]["Meta"], json!({ "build.id": "42" }));
}

#[test]
fn nomad_parity_format_takes_flags_width_and_precision() {
    let job = parse(
        r#"
job "j" {
  meta {
    padded = format("%03d", 7)
    fixed  = format("%.2f", 3.14159)
    left   = format("%-4s|", "ab")
    wide   = format("%5.1f", 3.14159)
  }
}
"#,
    );
    assert_eq!(
        job["Meta"],
        json!({ "padded": "007", "fixed": "3.14", "left": "ab  |", "wide": "  3.1" })
    );
}

#[test]
fn nomad_parity_distinct_hosts_shortcut_sets_rtarget() {
    let job = parse(
        r#"
job "j" {
  group "g" {
    constraint {
      distinct_hosts = true
    }

    task "t" {
      driver = "raw_exec"
    }
  }
}
"#,
    );
    assert_eq!(
        job["TaskGroups"][0]["Constraints"],
        json!([{ "Operand": "distinct_hosts", "RTarget": "true" }])
    );
}

#[test]
fn nomad_parity_task_scaling_blocks_are_typed_by_their_label() {
    let job = parse(
        r#"
job "j" {
  group "g" {
    task "t" {
      driver = "raw_exec"

      scaling "cpu" {
        enabled = true
        min     = 100
        max     = 500

        policy {
          cooldown = "5m"
        }
      }
    }
  }
}
"#,
    );
    assert_eq!(
        job["TaskGroups"][0]["Tasks"][0]["ScalingPolicies"],
        json!([{
            "Type": "vertical_cpu",
            "Enabled": true,
            "Min": 100,
            "Max": 500,
            "Policy": { "cooldown": "5m" }
        }])
    );
}

#[test]
fn nomad_parity_dynamic_blocks_are_expanded() {
    let job = parse(
        r#"
variable "avoid_racks" {
  type    = list(string)
  default = ["r1", "r2"]
}

job "j" {
  group "g" {
    dynamic "constraint" {
      for_each = var.avoid_racks

      content {
        attribute = "${meta.rack}"
        operator  = "!="
        value     = constraint.value
      }
    }

    task "t" {
      driver = "raw_exec"
    }
  }
}
"#,
    );
    assert_eq!(
        job["TaskGroups"][0]["Constraints"],
        json!([
            { "LTarget": "${meta.rack}", "Operand": "!=", "RTarget": "r1" },
            { "LTarget": "${meta.rack}", "Operand": "!=", "RTarget": "r2" }
        ])
    );
}

#[test]
fn nomad_parity_variable_validation_is_checked() {
    let text = r#"
variable "replicas" {
  type    = number
  default = 2

  validation {
    condition     = var.replicas > 0
    error_message = "replicas must be positive"
  }
}

job "j" {
  group "g" {
    count = var.replicas

    task "t" {
      driver = "raw_exec"
    }
  }
}
"#;
    assert_eq!(parse(text)["TaskGroups"][0]["Count"], json!(2));
    let e = parse_with(text, &[("replicas", "0")]).expect_err("replicas = 0 fails validation");
    assert!(e.contains("replicas must be positive"), "{e}");
}
