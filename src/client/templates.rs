//! Rendering a task's templates (the sans-IO core of the `template` hook): consul-template's
//! functions over what the servers answered so far ([`Brain`]), the dependencies a render
//! read and those still missing (named as consul-template names them, for Nomad's
//! `Missing: …` event), go-envparse's `KEY=value` files for `env = true`, and the sandbox
//! that keeps `source`, `destination` and `file` inside the allocation directory.
//!
//! ```text
//!  template text ─parse─▶ Template ─render(brain)─▶ Outcome { text | missing, deps }
//!        the hook fetches `deps` (Template.Read) into the brain and renders again
//! ```
//!
//! A render with a missing dependency is thrown away, as consul-template throws it away:
//! the task starts only once every template rendered with everything it reads.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};

use serde_json::{json, Map, Value};
use teamster_storage::model::{ServiceRegistration, VariableMetadata};

use crate::client::allocdir::read_file_under;
use crate::gotemplate::funcs::{call_data, kind, Kind};
use crate::gotemplate::{
    method_key, Funcs, RenderOptions, Syntax, Template, Val, MAX_OUTPUT, STRINGER,
};
use crate::rpc::service::variables::{TemplateData, TemplateDep, TemplateVar};

/// The region consul-template names in dependency keys.
const REGION: &str = "global";

/// What the servers answered for each dependency so far.
pub type Brain = HashMap<TemplateDep, TemplateData>;

/// One render of one template.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    /// The text, when nothing it reads is missing.
    pub text: Option<String>,
    /// The Nomad dependencies it read (to fetch, and to watch).
    pub deps: BTreeSet<TemplateDep>,
    /// What it waits for, as consul-template names it (`nomad.var.block(p@default.global)`).
    pub missing: BTreeSet<String>,
    /// Dependencies the task may not read (a 403 from the servers).
    pub denied: BTreeSet<String>,
    /// Files it read (`file`), which the hook re-reads to see changes.
    pub files: BTreeSet<PathBuf>,
}

/// Why a template cannot be rendered at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// It does not parse, or failed while executing.
    #[error("{0}")]
    Template(String),
    /// A path leaves the allocation directory.
    #[error("{0}")]
    Sandbox(String),
}

/// What a render may see besides the servers' answers.
#[derive(Debug, Clone)]
pub struct RenderEnv<'a> {
    /// The task's environment (the `env` function sees nothing else).
    pub env: &'a BTreeMap<String, String>,
    /// The job's namespace (a dependency's default).
    pub namespace: &'a str,
    /// The task's directory (relative `file` paths start there).
    pub task_dir: &'a Path,
    /// Whether `file` is confined to the task directory (unless the client disabled the
    /// sandbox).
    pub sandboxed: bool,
    /// Functions the client denies (globs allowed, as Nomad's `function_denylist`).
    pub denylist: &'a [String],
    /// Now, in Unix seconds (`timestamp`).
    pub now_unix: i64,
}

/// Parse a template's text with its delimiters and consul-template's function names.
pub fn parse(text: &str, left: &str, right: &str) -> Result<Template, RenderError> {
    let known = |name: &str| kind(name).is_some();
    let syntax = Syntax {
        left: if left.is_empty() { "{{" } else { left },
        right: if right.is_empty() { "}}" } else { right },
        known: &known,
    };
    Template::parse_with(text, &syntax).map_err(|e| RenderError::Template(e.to_string()))
}

/// Render `template` over `brain`.
pub fn render(
    template: &Template,
    brain: &Brain,
    env: &RenderEnv<'_>,
    missing_key_error: bool,
) -> Result<Outcome, RenderError> {
    let funcs = TaskFuncs {
        brain,
        env,
        seen: RefCell::new(Outcome::default()),
    };
    let text = template
        .render_with(
            &Value::Null,
            RenderOptions {
                funcs: &funcs,
                missing_key_error,
            },
        )
        .map_err(|e| RenderError::Template(e.to_string()))?;
    let mut outcome = funcs.seen.into_inner();
    if outcome.missing.is_empty() {
        outcome.text = Some(text);
    }
    Ok(outcome)
}

/// Nomad's `Missing: a, b, c, and N more` (sorted, three named).
pub fn missing_message(missing: &BTreeSet<String>) -> String {
    let mut names: Vec<String> = missing.iter().take(3).cloned().collect();
    if missing.len() > 3 {
        names.push(format!("and {} more", missing.len() - 3));
    }
    format!("Missing: {}", names.join(", "))
}

/// Whether `name` matches a denylist pattern (`*` globs, as Nomad's).
fn denied(name: &str, denylist: &[String]) -> bool {
    denylist.iter().any(|pattern| glob_match(pattern, name))
}

fn glob_match(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            let Some(rest) = name.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len())
                .filter(|i| rest.is_char_boundary(*i))
                .any(|i| glob_match(tail, &rest[i..]))
        }
    }
}

/// `path@namespace.region` as consul-template splits it (the region is ignored: one region).
fn split_query(arg: &str, default_ns: &str) -> (String, String) {
    let arg = arg.trim().trim_matches('/');
    match arg.split_once('@') {
        Some((path, rest)) => {
            let ns = rest.split('.').next().unwrap_or_default();
            let ns = if ns.is_empty() { default_ns } else { ns };
            (path.to_string(), ns.to_string())
        }
        None => (arg.to_string(), default_ns.to_string()),
    }
}

/// `${NAME}` (and `${env.NAME}`) in `s` replaced by the task's environment, as Nomad
/// interpolates a template's `source` and `destination`; unknown names are left as written.
pub fn interpolate(s: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find('}') {
            Some(end) => {
                let name = &after[..end];
                let key = name.strip_prefix("env.").unwrap_or(name);
                match env.get(key) {
                    Some(v) => out.push_str(v),
                    None => out.push_str(&rest[start..start + 3 + end]),
                }
                rest = &after[end + 1..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// Where `path` (interpolated) is: relative to `base`; an absolute path inside `sandbox`
/// as written, any other absolute path relative to `base` (Nomad's rule) — or as written
/// when there is no sandbox. `..` never leads out of the sandbox; symlinks are refused
/// when the file is opened ([`read_in`], `write_file_under`).
pub fn resolve(base: &Path, sandbox: Option<&Path>, path: &str) -> Result<PathBuf, String> {
    let p = Path::new(path);
    let joined = match sandbox {
        None if p.is_absolute() => p.to_path_buf(),
        Some(root) if p.is_absolute() && p.starts_with(root) => p.to_path_buf(),
        _ => base.join(path.trim_start_matches('/')),
    };
    let mut clean = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                clean.pop();
            }
            Component::CurDir => {}
            other => clean.push(other),
        }
    }
    match sandbox {
        Some(root) if !clean.starts_with(root) || clean == root => {
            Err(format!("path {path:?} escapes the allocation directory"))
        }
        _ => Ok(clean),
    }
}

/// The text of the file at `path` (at most `max` bytes), read without following a symlink
/// below `sandbox` (when there is one): `None` when it does not exist.
pub fn read_in(sandbox: Option<&Path>, path: &Path, max: u64) -> Result<Option<String>, String> {
    let bytes = match sandbox {
        Some(root) => {
            let rel = path
                .strip_prefix(root)
                .map_err(|_| format!("{} is outside {}", path.display(), root.display()))?;
            read_file_under(root, &rel.to_string_lossy(), max)
                .map_err(|e| format!("{}: {e}", path.display()))?
        }
        None => match std::fs::read(path) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("{}: {e}", path.display())),
        },
    };
    bytes
        .map(|b| String::from_utf8(b).map_err(|_| format!("{} is not UTF-8", path.display())))
        .transpose()
}

struct TaskFuncs<'a> {
    brain: &'a Brain,
    env: &'a RenderEnv<'a>,
    seen: RefCell<Outcome>,
}

fn arg_text(v: &Val) -> Result<String, String> {
    match v {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Number(n)) => Ok(n.to_string()),
        other => Err(format!(
            "expected string; got {}",
            other.as_ref().map_or("no value".into(), |v| v.to_string())
        )),
    }
}

/// A variable's items as consul-template's `NomadVarItems`: a map of items that print as
/// their value (`.Key`, `.Value`, `.Parent`), with the methods `Keys`, `Values`, `Tuples`,
/// `Metadata` and `Parent`.
fn var_items(var: &TemplateVar) -> Value {
    let meta = var_meta(&var.meta);
    let mut items = Map::new();
    for (k, v) in &var.items {
        items.insert(
            k.clone(),
            json!({ STRINGER: v, "Key": k, "Value": v, "Parent": meta.clone() }),
        );
    }
    let tuples: Vec<Value> = var
        .items
        .iter()
        .map(|(k, v)| json!({ STRINGER: v, "Key": k, "Value": v }))
        .collect();
    items.insert(
        method_key("Keys"),
        json!(var.items.keys().collect::<Vec<_>>()),
    );
    items.insert(
        method_key("Values"),
        json!(var.items.values().collect::<Vec<_>>()),
    );
    items.insert(method_key("Tuples"), Value::Array(tuples));
    items.insert(method_key("Metadata"), meta.clone());
    items.insert(method_key("Parent"), meta);
    Value::Object(items)
}

fn var_meta(m: &VariableMetadata) -> Value {
    json!({
        "Namespace": m.namespace,
        "Path": m.path,
        "CreateIndex": m.create_index,
        "ModifyIndex": m.modify_index,
        "CreateTime": m.create_time,
        "ModifyTime": m.modify_time,
    })
}

fn service_value(r: &ServiceRegistration) -> Value {
    json!({
        "ID": r.id,
        "Name": r.service_name,
        "Namespace": r.namespace.as_str(),
        "Node": r.node_id.as_str(),
        "Datacenter": r.datacenter,
        "JobID": r.job_id.as_str(),
        "AllocID": r.alloc_id.as_str(),
        "Tags": r.tags,
        "Address": r.address,
        "Port": r.port,
    })
}

/// consul-template's rendezvous choice of `count` of `services` for `key`: each ranked by a
/// hash of the key and its ID, the best `count` kept.
fn choose(services: Vec<Value>, count: usize, key: &str) -> Vec<Value> {
    use sha2::Digest as _;
    let mut ranked: Vec<(Vec<u8>, Value)> = services
        .into_iter()
        .map(|s| {
            let id = s["ID"].as_str().unwrap_or_default().to_string();
            let h = sha2::Sha256::digest(format!("{key}{id}").as_bytes()).to_vec();
            (h, s)
        })
        .collect();
    ranked.sort_by(|a, b| a.0.cmp(&b.0));
    ranked.into_iter().take(count).map(|(_, s)| s).collect()
}

impl TaskFuncs<'_> {
    fn missing(&self, key: String) {
        self.seen.borrow_mut().missing.insert(key);
    }

    /// What the brain holds for `dep` (recorded as read); `None`: not fetched yet, denied or
    /// unavailable (recorded as missing under `key`).
    fn fetch(&self, dep: TemplateDep, key: &str) -> Option<TemplateData> {
        let mut seen = self.seen.borrow_mut();
        seen.deps.insert(dep.clone());
        match self.brain.get(&dep) {
            None => {
                seen.missing.insert(key.to_string());
                None
            }
            Some(TemplateData::Denied) => {
                seen.missing.insert(key.to_string());
                seen.denied.insert(key.to_string());
                None
            }
            Some(TemplateData::Unavailable) => {
                seen.missing.insert(key.to_string());
                None
            }
            Some(data) => Some(data.clone()),
        }
    }

    fn nomad(&self, name: &str, args: &[Val]) -> Result<Val, String> {
        let ns = self.env.namespace;
        let texts = args.iter().map(arg_text).collect::<Result<Vec<_>, _>>();
        match name {
            "nomadVar" | "nomadVarExists" => {
                let [arg] = args else {
                    return Err(format!("{name}: expected 1 argument, got {}", args.len()));
                };
                let (path, ns) =
                    split_query(&arg_text(&Some(arg.clone().unwrap_or_default()))?, ns);
                let key = format!("{path}@{ns}.{REGION}");
                let blocking = name == "nomadVar";
                let key = if blocking {
                    format!("nomad.var.block({key})")
                } else {
                    format!("nomad.var.get({key})")
                };
                let dep = TemplateDep::Var {
                    namespace: ns,
                    path,
                };
                match (self.fetch(dep, &key), blocking) {
                    (Some(TemplateData::Var(Some(var))), true) => Ok(Some(var_items(&var))),
                    (Some(TemplateData::Var(None)), true) => {
                        self.missing(key);
                        Ok(Some(Value::Object(Map::new())))
                    }
                    (Some(TemplateData::Var(found)), false) => {
                        Ok(Some(Value::Bool(found.is_some())))
                    }
                    (_, true) => Ok(Some(Value::Object(Map::new()))),
                    (_, false) => Ok(Some(Value::Bool(false))),
                }
            }
            "nomadVarList" | "nomadVarListSafe" => {
                let texts = texts?;
                if texts.len() > 1 {
                    return Err(format!(
                        "{name}: expected 0 or 1 arguments, got {}",
                        texts.len()
                    ));
                }
                let (prefix, ns) = split_query(texts.first().map_or("", String::as_str), ns);
                let key = format!("nomad.var.list({prefix}@{ns}.{REGION})");
                let dep = TemplateDep::VarList {
                    namespace: ns,
                    prefix,
                };
                let list = match self.fetch(dep, &key) {
                    Some(TemplateData::VarList(list)) => list,
                    _ => Vec::new(),
                };
                if list.is_empty() && name == "nomadVarListSafe" {
                    self.missing(key);
                }
                Ok(Some(Value::Array(list.iter().map(var_meta).collect())))
            }
            "nomadServices" => {
                let texts = texts?;
                if texts.len() > 1 {
                    return Err(format!(
                        "{name}: expected 0 or 1 arguments, got {}",
                        texts.len()
                    ));
                }
                let dep = TemplateDep::Services {
                    namespace: ns.to_string(),
                };
                let out = match self.fetch(dep, "nomad.services") {
                    Some(TemplateData::Services(list)) => list
                        .into_iter()
                        .map(|(name, tags)| json!({ "Name": name, "Tags": tags }))
                        .collect(),
                    _ => Vec::new(),
                };
                Ok(Some(Value::Array(out)))
            }
            "nomadService" => {
                let (count, key, query) = match args {
                    [q] => (None, String::new(), arg_text(q)?),
                    [count, key, q] => {
                        let n = match count {
                            Some(Value::Number(n)) => n.as_u64().unwrap_or(0) as usize,
                            other => arg_text(other)?
                                .parse()
                                .map_err(|_| format!("{name}: the count must be a number"))?,
                        };
                        (Some(n), arg_text(key)?, arg_text(q)?)
                    }
                    _ => {
                        return Err(format!(
                            "{name}: expected 1 or 3 arguments, got {}",
                            args.len()
                        ))
                    }
                };
                let (query, _) = split_query(&query, ns);
                let (tag, service) = match query.rsplit_once('.') {
                    Some((tag, service)) => (Some(tag.to_string()), service.to_string()),
                    None => (None, query.clone()),
                };
                let dep = TemplateDep::Service {
                    namespace: ns.to_string(),
                    name: service,
                };
                let regs = match self.fetch(dep, &format!("nomad.service({query})")) {
                    Some(TemplateData::Service(regs)) => regs,
                    _ => Vec::new(),
                };
                // The rendezvous choice is made over every registration, then the tag
                // filters (Nomad chooses on the servers, consul-template filters after).
                let mut out: Vec<Value> = regs.iter().map(service_value).collect();
                if let Some(count) = count {
                    out = choose(out, count, &key);
                }
                out.retain(|s| {
                    tag.as_ref().is_none_or(|t| {
                        s["Tags"]
                            .as_array()
                            .is_some_and(|tags| tags.iter().any(|x| x == t.as_str()))
                    })
                });
                Ok(Some(Value::Array(out)))
            }
            other => Err(format!("function {other:?} not defined")),
        }
    }

    fn task(&self, name: &str, args: &[Val]) -> Result<Val, String> {
        let texts = args.iter().map(arg_text).collect::<Result<Vec<_>, _>>()?;
        let env = |k: &str| self.env.env.get(k).cloned();
        match (name, texts.as_slice()) {
            ("env", [k]) => Ok(Some(Value::String(env(k).unwrap_or_default()))),
            ("mustEnv", [k]) => env(k)
                .filter(|v| !v.is_empty())
                .map(|v| Some(Value::String(v)))
                .ok_or_else(|| format!("mustEnv: environment variable {k:?} is not set")),
            // A variable set to "" is set: its default is for unset ones only.
            ("envOrDefault", [k, default]) => Ok(Some(Value::String(
                env(k).unwrap_or_else(|| default.clone()),
            ))),
            ("file", [path]) => {
                // Nomad's sandbox for `file` is the task directory.
                let root = self.env.sandboxed.then_some(self.env.task_dir);
                let full = resolve(self.env.task_dir, root, path)?;
                self.seen.borrow_mut().files.insert(full.clone());
                match read_in(root, &full, MAX_OUTPUT as u64) {
                    Ok(Some(text)) => Ok(Some(Value::String(text))),
                    Ok(None) => {
                        self.missing(format!("file({path})"));
                        Ok(Some(Value::String(String::new())))
                    }
                    Err(e) => Err(format!("file: {e}")),
                }
            }
            ("timestamp", []) => Ok(Some(Value::String(format_time(self.env.now_unix, None)))),
            ("timestamp", [layout]) if layout == "unix" => {
                Ok(Some(Value::String(self.env.now_unix.to_string())))
            }
            ("timestamp", [layout]) => Ok(Some(Value::String(format_time(
                self.env.now_unix,
                Some(layout),
            )))),
            _ => Err(format!(
                "{name}: wrong number of arguments ({})",
                texts.len()
            )),
        }
    }

    /// A Consul or Vault dependency: never answered on a teamster client.
    fn integration(&self, name: &str, args: &[Val]) -> Result<Val, String> {
        let first = args
            .first()
            .and_then(|a| arg_text(a).ok())
            .unwrap_or_default();
        let key = match name {
            "key" => format!("kv.block({first})"),
            "keyExists" | "keyOrDefault" => format!("kv.get({first})"),
            "ls" | "safeLs" | "tree" | "safeTree" => format!("kv.list({first})"),
            "service" => format!("health.service({first}|passing)"),
            "connect" => format!("health.connect({first}|passing)"),
            "services" => "catalog.services".into(),
            "node" => format!("catalog.node({first})"),
            "nodes" => "catalog.nodes".into(),
            "datacenters" => "catalog.datacenters".into(),
            "secret" => format!("vault.read({first})"),
            "secrets" => format!("vault.list({first})"),
            "pkiCert" => format!("vault.pki({first})"),
            other => format!("{other}({first})"),
        };
        self.missing(key);
        Ok(match name {
            "keyExists" => Some(Value::Bool(false)),
            "keyOrDefault" => args.get(1).cloned().flatten(),
            "key" | "pkiCert" => Some(Value::String(String::new())),
            "secret" | "node" => Some(Value::Object(Map::new())),
            _ => Some(Value::Array(Vec::new())),
        })
    }
}

impl Funcs for TaskFuncs<'_> {
    fn call(&self, name: &str, args: &[Val]) -> Option<Result<Val, String>> {
        if denied(name, self.env.denylist) {
            return Some(Err("function is disabled".into()));
        }
        Some(match kind(name)? {
            Kind::Builtin => return None,
            Kind::Data => return call_data(name, args),
            Kind::Task => self.task(name, args),
            Kind::Nomad => self.nomad(name, args),
            Kind::Consul | Kind::Vault => self.integration(name, args),
            Kind::Denied | Kind::Unsupported => {
                Err(format!("function {name:?} is not implemented by teamster"))
            }
        })
    }
}

/// Unix seconds as Go formats a time in UTC with `layout` (RFC 3339 when `None`), for
/// Go's common layout elements.
pub fn format_time(unix: i64, layout: Option<&str>) -> String {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    let (year, month, day) = crate::util::clock::civil_from_days(days);
    let (year, month, day) = (i64::from(year), i64::from(month), i64::from(day));
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let layout = layout.unwrap_or("2006-01-02T15:04:05Z07:00");
    let month_name = MONTHS[(month - 1) as usize];
    let day_name = DAYS[days.rem_euclid(7) as usize];
    let tokens: [(&str, String); 23] = [
        ("2006", format!("{year:04}")),
        ("January", month_name.to_string()),
        ("Monday", day_name.to_string()),
        ("Z07:00", "Z".into()),
        ("-07:00", "+00:00".into()),
        ("-0700", "+0000".into()),
        ("Jan", month_name[..3].to_string()),
        ("Mon", day_name[..3].to_string()),
        ("MST", "UTC".into()),
        ("01", format!("{month:02}")),
        ("02", format!("{day:02}")),
        ("15", format!("{h:02}")),
        (
            "03",
            format!("{:02}", if h % 12 == 0 { 12 } else { h % 12 }),
        ),
        ("04", format!("{m:02}")),
        ("05", format!("{s:02}")),
        ("PM", if h >= 12 { "PM" } else { "AM" }.into()),
        ("06", format!("{:02}", year % 100)),
        ("_2", format!("{day:>2}")),
        ("1", month.to_string()),
        ("2", day.to_string()),
        ("3", (if h % 12 == 0 { 12 } else { h % 12 }).to_string()),
        ("4", m.to_string()),
        ("5", s.to_string()),
    ];
    let mut out = String::new();
    let mut rest = layout;
    'outer: while !rest.is_empty() {
        for (token, value) in &tokens {
            if let Some(after) = rest.strip_prefix(token) {
                out.push_str(value);
                rest = after;
                continue 'outer;
            }
        }
        let c = rest.chars().next().expect("not empty");
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// A rendered `env = true` file as go-envparse reads it: `KEY=value` lines, `#` comments,
/// an optional `export `, values unquoted or in single or double quotes (double quotes
/// take `\n \t \\ \"` escapes), no interpolation.
pub fn parse_env_file(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut out = BTreeMap::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let Some((key, value)) = line.split_once('=') else {
            return Err(format!("line {}: no \"=\" in {raw:?}", n + 1));
        };
        let key = key.trim();
        let valid = key.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!("line {}: invalid key {key:?}", n + 1));
        }
        out.insert(key.to_string(), env_value(value.trim_start(), n + 1)?);
    }
    Ok(out)
}

fn env_value(v: &str, line: usize) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = v.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => loop {
                match chars.next() {
                    Some('\'') => break,
                    Some(c) => out.push(c),
                    None => return Err(format!("line {line}: unterminated single quote")),
                }
            },
            '"' => loop {
                match chars.next() {
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some('n') => out.push('\n'),
                        Some('t') => out.push('\t'),
                        Some('\\') => out.push('\\'),
                        Some('"') => out.push('"'),
                        Some(other) => {
                            return Err(format!("line {line}: invalid escape \\{other}"))
                        }
                        None => return Err(format!("line {line}: unterminated double quote")),
                    },
                    Some(c) => out.push(c),
                    None => return Err(format!("line {line}: unterminated double quote")),
                }
            },
            '#' if out.ends_with(char::is_whitespace) || out.is_empty() => break,
            c => out.push(c),
        }
    }
    Ok(out.trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use teamster_storage::model::{AllocId, JobId, Namespace, NodeId};

    fn env() -> BTreeMap<String, String> {
        BTreeMap::from([("NOMAD_JOB_ID".to_string(), "web".to_string())])
    }

    fn run(text: &str, brain: &Brain) -> Outcome {
        let e = env();
        let tmp = std::env::temp_dir();
        let renv = RenderEnv {
            env: &e,
            namespace: "default",
            task_dir: &tmp,
            sandboxed: true,
            denylist: &["writeToFile".to_string(), "sprig_*".to_string()],
            now_unix: 1_700_000_000,
        };
        render(&parse(text, "{{", "}}").unwrap(), brain, &renv, false).unwrap()
    }

    fn var(path: &str, items: &[(&str, &str)]) -> TemplateData {
        TemplateData::Var(Some(TemplateVar {
            meta: VariableMetadata {
                namespace: "default".into(),
                path: path.into(),
                ..VariableMetadata::default()
            },
            items: items
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }))
    }

    fn var_dep(path: &str) -> TemplateDep {
        TemplateDep::Var {
            namespace: "default".into(),
            path: path.into(),
        }
    }

    #[test]
    fn a_variable_not_yet_read_is_missing_and_then_renders() {
        let text = r#"{{ with nomadVar "nomad/jobs/web" }}pw={{ .password }};{{ .password.Value }}{{ end }}"#;
        let first = run(text, &Brain::new());
        assert_eq!(first.text, None);
        assert_eq!(
            first.missing,
            BTreeSet::from(["nomad.var.block(nomad/jobs/web@default.global)".to_string()])
        );
        assert_eq!(first.deps, BTreeSet::from([var_dep("nomad/jobs/web")]));

        let brain = Brain::from([(
            var_dep("nomad/jobs/web"),
            var("nomad/jobs/web", &[("password", "s3")]),
        )]);
        assert_eq!(run(text, &brain).text.as_deref(), Some("pw=s3;s3"));
        let ranged = run(
            r#"{{ range $k, $v := nomadVar "nomad/jobs/web" }}{{ $k }}={{ $v }} {{ end }}{{ (nomadVar "nomad/jobs/web").Keys }}"#,
            &brain,
        );
        assert_eq!(ranged.text.as_deref(), Some("password=s3 [password]"));

        // An absent variable blocks `nomadVar`; `nomadVarExists` answers false.
        let absent = Brain::from([(var_dep("nomad/jobs/web"), TemplateData::Var(None))]);
        assert!(run(text, &absent).text.is_none());
        let exists = run(
            r#"{{ if nomadVarExists "nomad/jobs/web" }}y{{ else }}n{{ end }}"#,
            &absent,
        );
        assert_eq!(exists.text.as_deref(), Some("n"));
        // A denied one stays missing, and is named.
        let denied = Brain::from([(var_dep("nomad/jobs/web"), TemplateData::Denied)]);
        let out = run(text, &denied);
        assert!(out.text.is_none());
        assert_eq!(out.denied.len(), 1);
    }

    #[test]
    fn services_lists_env_and_integrations() {
        let reg = ServiceRegistration {
            id: "_nomad-task-1".into(),
            service_name: "redis".into(),
            namespace: Namespace::new("default"),
            node_id: NodeId::new("n1"),
            job_id: JobId::new("cache"),
            alloc_id: AllocId::new("a1"),
            tags: vec!["primary".into()],
            address: "10.0.0.1".into(),
            port: 6379,
            ..ServiceRegistration::default()
        };
        let brain = Brain::from([
            (
                TemplateDep::Service {
                    namespace: "default".into(),
                    name: "redis".into(),
                },
                TemplateData::Service(vec![reg]),
            ),
            (
                TemplateDep::Services {
                    namespace: "default".into(),
                },
                TemplateData::Services(vec![("redis".into(), vec!["primary".into()])]),
            ),
        ]);
        let out = run(
            r#"{{ range nomadService "redis" }}{{ .Address }}:{{ .Port }}{{ end }}|{{ range nomadService "replica.redis" }}x{{ end }}|{{ range nomadServices }}{{ .Name }}{{ .Tags }}{{ end }}|{{ env "NOMAD_JOB_ID" }}{{ env "HOME" }}"#,
            &brain,
        );
        assert_eq!(
            out.text.as_deref(),
            Some("10.0.0.1:6379||redis[primary]|web")
        );
        let consul = run(
            r#"{{ key "app/config" }}{{ with secret "kv/x" }}{{ end }}"#,
            &brain,
        );
        assert!(consul.text.is_none());
        assert_eq!(
            missing_message(&consul.missing),
            "Missing: kv.block(app/config), vault.read(kv/x)"
        );
        let four: BTreeSet<String> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(missing_message(&four), "Missing: a, b, c, and 2 more");
    }

    #[test]
    fn denied_functions_fail_the_render() {
        let e = env();
        let tmp = std::env::temp_dir();
        let renv = RenderEnv {
            env: &e,
            namespace: "default",
            task_dir: &tmp,
            sandboxed: true,
            denylist: &["writeToFile".to_string()],
            now_unix: 0,
        };
        let t = parse(r#"{{ writeToFile "/etc/x" "" "" "0644" }}"#, "{{", "}}").unwrap();
        let err = render(&t, &Brain::new(), &renv, false).unwrap_err();
        assert!(err.to_string().contains("function is disabled"), "{err}");
    }

    #[test]
    fn go_times_and_env_files() {
        assert_eq!(format_time(1_700_000_000, None), "2023-11-14T22:13:20Z");
        assert_eq!(
            format_time(0, Some("Mon Jan 2 15:04:05 2006")),
            "Thu Jan 1 00:00:00 1970"
        );
        let parsed = parse_env_file(
            "# comment\nA=1\nexport B='two words'\nC=\"x\\ny\" # note\n\nD=plain value\n",
        )
        .unwrap();
        assert_eq!(parsed["A"], "1");
        assert_eq!(parsed["B"], "two words");
        assert_eq!(parsed["C"], "x\ny");
        assert_eq!(parsed["D"], "plain value");
        assert!(parse_env_file("1BAD=x").is_err());
        assert!(parse_env_file("NOEQUALS").is_err());
    }

    #[test]
    fn the_sandbox_keeps_paths_in_the_allocation() {
        let root = tempfile::tempdir().unwrap();
        let alloc = root.path();
        let task = alloc.join("web");
        std::fs::create_dir_all(task.join("local")).unwrap();
        let inside = |p: &str| resolve(&task, Some(alloc), p);
        assert_eq!(inside("local/a.conf").unwrap(), task.join("local/a.conf"));
        assert_eq!(inside("/local/a.conf").unwrap(), task.join("local/a.conf"));
        assert_eq!(inside("../alloc/x").unwrap(), alloc.join("alloc/x"));
        let absolute = task.join("secrets/x");
        assert_eq!(inside(absolute.to_str().unwrap()).unwrap(), absolute);
        assert!(inside("../../etc/passwd").is_err());
        assert!(inside("/etc/passwd").unwrap().starts_with(&task));
        assert_eq!(
            resolve(&task, None, "/etc/hostname").unwrap(),
            PathBuf::from("/etc/hostname")
        );
        // A symlink a task planted is never followed on read.
        std::os::unix::fs::symlink("/etc/hostname", task.join("local/out")).unwrap();
        assert!(read_in(Some(alloc), &task.join("local/out"), 1024).is_err());
        std::fs::write(task.join("local/in"), "ok").unwrap();
        assert_eq!(
            read_in(Some(alloc), &task.join("local/in"), 1024)
                .unwrap()
                .as_deref(),
            Some("ok")
        );
        assert_eq!(
            read_in(Some(alloc), &task.join("local/none"), 1024).unwrap(),
            None
        );
        assert!(read_in(Some(alloc), &task.join("local/in"), 1).is_err());
        let env = BTreeMap::from([("NOMAD_SECRETS_DIR".to_string(), "/a/s".to_string())]);
        assert_eq!(
            interpolate("${NOMAD_SECRETS_DIR}/x.env", &env),
            "/a/s/x.env"
        );
        assert_eq!(
            interpolate("${env.NOMAD_SECRETS_DIR}/${NOPE}", &env),
            "/a/s/${NOPE}"
        );
    }
}
