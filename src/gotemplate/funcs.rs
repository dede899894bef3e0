//! consul-template's functions for tasks' `template` blocks (Nomad renders templates with
//! consul-template): which names exist ([`kind`]), and the pure data functions
//! ([`call_data`]): encodings, strings, lists and maps, parsing, JSON/YAML/TOML output,
//! hashes, arithmetic, and Sprig's (`sprig_*`, [`super::sprig`]). The functions that read the task's environment, files, Variables and
//! services are the client's (they need the allocation); those that need Consul or Vault
//! exist but never resolve on a teamster client, as on a Nomad client without them.
//!
//! Argument order is consul-template's: the value a pipeline passes comes last
//! (`{{ .x | split "," }}` is `split "," .x`).

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::{Map, Number, Value};

use super::sprig::title;
use super::{go_text, without_hidden, Val, STRINGER};

/// What a template function is, on a teamster client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One of Go's builtins.
    Builtin,
    /// A pure data function ([`call_data`]).
    Data,
    /// Reads the task's environment or a file: `env`, `mustEnv`, `envOrDefault`, `file`,
    /// `timestamp`.
    Task,
    /// Reads Nomad: Variables and services.
    Nomad,
    /// Needs Consul (`key`, `service`, …): waits forever on a client without Consul.
    Consul,
    /// Needs Vault (`secret`, `pkiCert`, …): waits forever on a client without Vault.
    Vault,
    /// In Nomad's default `function_denylist` (`executeTemplate`, `plugin`,
    /// `writeToFile`): rendering fails with "function is disabled".
    Denied,
    /// A consul-template function teamster does not implement: refused at submit.
    Unsupported,
}

const DATA: &[&str] = &[
    "base64Decode",
    "base64Encode",
    "base64URLDecode",
    "base64URLEncode",
    "contains",
    "containsAll",
    "containsAny",
    "containsNone",
    "containsNotAll",
    "explodeMap",
    "mergeMap",
    "mergeMapWithOverride",
    "in",
    "indent",
    "loop",
    "join",
    "trim",
    "trimPrefix",
    "trimSuffix",
    "trimSpace",
    "parseBool",
    "parseFloat",
    "parseInt",
    "parseJSON",
    "parseUint",
    "regexReplaceAll",
    "regexMatch",
    "replaceAll",
    "sha256Hex",
    "md5sum",
    "hmacSHA256Hex",
    "toLower",
    "toJSON",
    "toJSONPretty",
    "toUnescapedJSON",
    "toUnescapedJSONPretty",
    "toTitle",
    "toTOML",
    "toUpper",
    "toYAML",
    "split",
    "splitToMap",
    "add",
    "subtract",
    "multiply",
    "divide",
    "modulo",
    "minimum",
    "maximum",
];
const TASK: &[&str] = &["env", "mustEnv", "envOrDefault", "file", "timestamp"];
const NOMAD: &[&str] = &[
    "nomadVar",
    "nomadVarExists",
    "nomadVarList",
    "nomadVarListSafe",
    "nomadService",
    "nomadServices",
];
const CONSUL: &[&str] = &[
    "datacenters",
    "exportedServices",
    "importedServices",
    "key",
    "keyExists",
    "keyOrDefault",
    "ls",
    "safeLs",
    "node",
    "nodes",
    "partitions",
    "peerings",
    "service",
    "connect",
    "services",
    "tree",
    "safeTree",
    "caRoots",
    "caLeaf",
];
const VAULT: &[&str] = &["secret", "secrets", "pkiCert"];
/// Nomad's default `function_denylist`.
pub const DEFAULT_DENYLIST: &[&str] = &["executeTemplate", "plugin", "writeToFile"];
const UNSUPPORTED: &[&str] = &[
    "scratch",
    "byKey",
    "byPort",
    "byTag",
    "byMeta",
    "explode",
    "parseYAML",
    "sockaddr",
    "spew_dump",
    "spew_printf",
    "spew_sdump",
    "spew_sprintf",
];

/// What `name` is; `None` when consul-template has no such function.
pub fn kind(name: &str) -> Option<Kind> {
    let is = |set: &[&str]| set.contains(&name);
    Some(if super::is_builtin(name) {
        Kind::Builtin
    } else if is(DATA) {
        Kind::Data
    } else if is(TASK) {
        Kind::Task
    } else if is(NOMAD) {
        Kind::Nomad
    } else if is(CONSUL) {
        Kind::Consul
    } else if is(VAULT) {
        Kind::Vault
    } else if is(DEFAULT_DENYLIST) {
        Kind::Denied
    } else if let Some(sprig) = name.strip_prefix("sprig_") {
        if super::sprig::SPRIG.contains(&sprig) {
            Kind::Data
        } else if super::sprig::UNSUPPORTED.contains(&sprig) {
            Kind::Unsupported
        } else {
            // Not among Sprig's hermetic functions (`sprig_env`, `sprig_now`, …):
            // consul-template does not define it.
            return None;
        }
    } else if is(UNSUPPORTED) {
        Kind::Unsupported
    } else {
        return None;
    })
}

/// A string argument (a value with a `String()` method gives that string).
fn text(v: &Val) -> Result<String, String> {
    match v {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Object(o)) if o.contains_key(STRINGER) => Ok(go_text(v)),
        other => Err(format!("expected string; got {}", go_text(other))),
    }
}

fn int(v: &Val) -> Result<i64, String> {
    match v {
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
            .ok_or_else(|| format!("expected integer; got {n}")),
        Some(Value::String(s)) => parse_int(s),
        other => Err(format!("expected integer; got {}", go_text(other))),
    }
}

fn strings(v: &Val) -> Result<Vec<String>, String> {
    match v {
        Some(Value::Array(a)) => a.iter().map(|e| text(&Some(e.clone()))).collect(),
        None | Some(Value::Null) => Ok(Vec::new()),
        other => Err(format!(
            "expected a list of strings; got {}",
            go_text(other)
        )),
    }
}

fn want(args: &[Val], n: usize) -> Result<(), String> {
    if args.len() == n {
        Ok(())
    } else {
        Err(format!("wrong number of args: want {n} got {}", args.len()))
    }
}

fn string(s: impl Into<String>) -> Result<Val, String> {
    Ok(Some(Value::String(s.into())))
}

/// consul-template's `parseInt`: base 10, empty is 0.
fn parse_int(s: &str) -> Result<i64, String> {
    if s.is_empty() {
        return Ok(0);
    }
    s.parse::<i64>()
        .map_err(|e| format!("strconv.ParseInt: parsing {s:?}: {e}"))
}

/// Whether list (or string) `l` holds `v`, as consul-template's `in`.
fn holds(l: &Val, v: &Val) -> bool {
    match (l, v) {
        (Some(Value::Array(a)), Some(v)) => a.iter().any(|e| match (e, v) {
            (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
            (Value::String(x), Value::String(y)) => x == y,
            _ => false,
        }),
        (Some(Value::String(s)), Some(Value::String(v))) => s.contains(v.as_str()),
        _ => false,
    }
}

/// A number as Go's arithmetic sees it.
#[derive(Clone, Copy)]
enum Num {
    Int(i64),
    Float(f64),
}

fn num(v: &Val) -> Result<Num, String> {
    match v {
        Some(Value::Number(n)) => Ok(match n.as_i64() {
            Some(i) => Num::Int(i),
            None => Num::Float(n.as_f64().unwrap_or(0.0)),
        }),
        other => Err(format!("unknown type for {:?}", go_text(other))),
    }
}

fn float_value(f: f64) -> Val {
    Number::from_f64(f).map(Value::Number)
}

/// `a op b`, integers staying integers (Go's arithmetic on `int64`).
fn arith(name: &str, args: &[Val]) -> Result<Val, String> {
    want(args, 2)?;
    // consul-template's order: `add b a` is `a + b`, so `{{ 5 | subtract 2 }}` is 3.
    let (b, a) = (num(&args[0])?, num(&args[1])?);
    match (a, b) {
        (Num::Int(a), Num::Int(b)) => {
            let r = match name {
                "add" => a.checked_add(b),
                "subtract" => a.checked_sub(b),
                "multiply" => a.checked_mul(b),
                "divide" if b == 0 => return Err("divide by zero".into()),
                "divide" => a.checked_div(b),
                "modulo" if b == 0 => return Err("modulo by zero".into()),
                "modulo" => a.checked_rem(b),
                "minimum" => Some(a.min(b)),
                _ => Some(a.max(b)),
            };
            r.map(|r| Some(Value::from(r)))
                .ok_or_else(|| "integer overflow".into())
        }
        (a, b) => {
            let f = |n: Num| match n {
                Num::Int(i) => i as f64,
                Num::Float(f) => f,
            };
            let (a, b) = (f(a), f(b));
            let r = match name {
                "add" => a + b,
                "subtract" => a - b,
                "multiply" => a * b,
                "divide" if b == 0.0 => return Err("divide by zero".into()),
                "divide" => a / b,
                "modulo" => return Err("modulo of a float".into()),
                "minimum" => a.min(b),
                _ => a.max(b),
            };
            Ok(float_value(r))
        }
    }
}

/// Deep merge of `src` into `dst`: keys `dst` lacks are added; with `over`, `src` wins.
pub(super) fn merge(dst: &mut Map<String, Value>, src: &Map<String, Value>, over: bool) {
    for (k, v) in src {
        match (dst.get_mut(k), v) {
            (Some(Value::Object(d)), Value::Object(s)) => merge(d, s, over),
            (Some(_), _) if !over => {}
            _ => {
                dst.insert(k.clone(), v.clone());
            }
        }
    }
}

fn object(v: &Val) -> Result<Map<String, Value>, String> {
    match v {
        Some(Value::Object(o)) => Ok(o.clone()),
        None | Some(Value::Null) => Ok(Map::new()),
        other => Err(format!("expected a map; got {}", go_text(other))),
    }
}

/// Go's JSON encoding: `<`, `>` and `&` escaped unless `unescaped`.
pub(super) fn json_out(v: &Val, pretty: bool, unescaped: bool) -> Result<Val, String> {
    let v = without_hidden(v.as_ref().unwrap_or(&Value::Null));
    let mut s = if pretty {
        let mut buf = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(b"  ");
        let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
        serde::Serialize::serialize(&v, &mut ser).map_err(|e| e.to_string())?;
        String::from_utf8(buf).map_err(|e| e.to_string())?
    } else {
        serde_json::to_string(&v).map_err(|e| e.to_string())?
    };
    if !unescaped {
        s = s
            .replace('<', "\\u003c")
            .replace('>', "\\u003e")
            .replace('&', "\\u0026");
    }
    string(s)
}

/// YAML as go-yaml writes it: maps in key order, lists as `- ` items.
fn yaml(v: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match v {
        Value::Object(o) if !o.is_empty() => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            for k in keys {
                let e = &o[k];
                out.push_str(&pad);
                out.push_str(&yaml_scalar_text(k));
                out.push(':');
                match e {
                    Value::Object(m) if !m.is_empty() => {
                        out.push('\n');
                        yaml(e, indent + 2, out);
                    }
                    Value::Array(a) if !a.is_empty() => {
                        out.push('\n');
                        yaml(e, indent, out);
                    }
                    _ => {
                        out.push(' ');
                        out.push_str(&yaml_inline(e));
                        out.push('\n');
                    }
                }
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for e in a {
                out.push_str(&pad);
                out.push('-');
                match e {
                    Value::Object(m) if !m.is_empty() => {
                        let mut inner = String::new();
                        yaml(e, indent + 2, &mut inner);
                        out.push(' ');
                        out.push_str(inner.trim_start());
                    }
                    Value::Array(l) if !l.is_empty() => {
                        out.push('\n');
                        yaml(e, indent + 2, out);
                    }
                    _ => {
                        out.push(' ');
                        out.push_str(&yaml_inline(e));
                        out.push('\n');
                    }
                }
            }
        }
        other => {
            out.push_str(&pad);
            out.push_str(&yaml_inline(other));
            out.push('\n');
        }
    }
}

fn yaml_inline(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => yaml_scalar_text(s),
        Value::Array(_) => "[]".into(),
        Value::Object(_) => "{}".into(),
    }
}

/// A string plain when YAML reads it back as the same string, else double-quoted.
fn yaml_scalar_text(s: &str) -> String {
    let reserved = matches!(
        s.to_ascii_lowercase().as_str(),
        "" | "~"
            | "null"
            | "true"
            | "false"
            | "yes"
            | "no"
            | "on"
            | "off"
            | "y"
            | "n"
            | ".nan"
            | ".inf"
            | "-.inf"
    );
    let numeric = s.parse::<f64>().is_ok() || parse_int(s).is_ok();
    let special_start = s.starts_with(|c: char| "-?:,[]{}#&*!|>'\"%@` ".contains(c));
    let special = s.contains(": ")
        || s.contains(" #")
        || s.ends_with(' ')
        || s.ends_with(':')
        || s.chars().any(char::is_control);
    if reserved || numeric || special_start || special {
        serde_json::to_string(s).unwrap_or_default()
    } else {
        s.to_string()
    }
}

fn indent(spaces: i64, s: &str) -> Result<Val, String> {
    if spaces < 0 {
        return Err("indent value must be a positive integer".into());
    }
    let lines = s.split('\n').count();
    let size = (spaces as u128) * (lines as u128) + s.len() as u128;
    if size > super::MAX_OUTPUT as u128 {
        return Err(format!(
            "indent: the result would be larger than {} bytes",
            super::MAX_OUTPUT
        ));
    }
    let prefix = " ".repeat(spaces as usize);
    let mut out = String::with_capacity(s.len());
    let mut at_line_start = true;
    for c in s.chars() {
        if at_line_start && c != '\n' {
            out.push_str(&prefix);
        }
        out.push(c);
        at_line_start = c == '\n';
    }
    string(out)
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `explodeMap`: keys split on `/` into nested maps.
fn explode_map(src: &Map<String, Value>) -> Value {
    let mut root = Map::new();
    for (k, v) in src {
        let parts: Vec<&str> = k.trim_matches('/').split('/').collect();
        let mut at = &mut root;
        for (i, part) in parts.iter().enumerate() {
            if i + 1 == parts.len() {
                at.insert((*part).to_string(), v.clone());
            } else {
                let next = at
                    .entry((*part).to_string())
                    .or_insert_with(|| Value::Object(Map::new()));
                if !next.is_object() {
                    *next = Value::Object(Map::new());
                }
                at = next.as_object_mut().expect("just made an object");
            }
        }
    }
    Value::Object(root)
}

/// A pure data function of consul-template (`None`: `name` is not one).
pub fn call_data(name: &str, args: &[Val]) -> Option<Result<Val, String>> {
    if kind(name) != Some(Kind::Data) {
        return None;
    }
    if let Some(sprig) = name.strip_prefix("sprig_") {
        return super::sprig::call(sprig, args);
    }
    Some(data(name, args))
}

fn data(name: &str, args: &[Val]) -> Result<Val, String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let b64url = base64::engine::general_purpose::URL_SAFE;
    let one = |args: &[Val]| -> Result<String, String> {
        want(args, 1)?;
        text(&args[0])
    };
    match name {
        "base64Encode" => string(b64.encode(one(args)?)),
        "base64URLEncode" => string(b64url.encode(one(args)?)),
        "base64Decode" | "base64URLDecode" => {
            let engine = if name == "base64Decode" { b64 } else { b64url };
            let bytes = engine
                .decode(one(args)?)
                .map_err(|e| format!("{name}: {e}"))?;
            string(String::from_utf8_lossy(&bytes))
        }
        "contains" => {
            want(args, 2)?;
            Ok(Some(Value::Bool(holds(&args[1], &args[0]))))
        }
        "in" => {
            want(args, 2)?;
            Ok(Some(Value::Bool(holds(&args[0], &args[1]))))
        }
        "containsAll" | "containsAny" | "containsNone" | "containsNotAll" => {
            want(args, 2)?;
            let (ret_true, invert) = match name {
                "containsAll" => (true, true),
                "containsAny" => (false, false),
                "containsNone" => (true, false),
                _ => (false, true),
            };
            let wanted = match &args[0] {
                Some(Value::Array(a)) => a.clone(),
                other => return Err(format!("expected a list; got {}", go_text(other))),
            };
            for w in wanted {
                if holds(&args[1], &Some(w)) != invert {
                    return Ok(Some(Value::Bool(!ret_true)));
                }
            }
            Ok(Some(Value::Bool(ret_true)))
        }
        "explodeMap" => {
            want(args, 1)?;
            Ok(Some(explode_map(&object(&args[0])?)))
        }
        "mergeMap" | "mergeMapWithOverride" => {
            want(args, 2)?;
            let mut dst = object(&args[0])?;
            merge(&mut dst, &object(&args[1])?, name == "mergeMapWithOverride");
            Ok(Some(Value::Object(dst)))
        }
        "indent" => {
            want(args, 2)?;
            indent(int(&args[0])?, &text(&args[1])?)
        }
        "loop" => {
            let (start, stop) = match args {
                [stop] => (0, int(stop)?),
                [start, stop] => (int(start)?, int(stop)?),
                _ => {
                    return Err(format!(
                        "loop: wrong number of arguments, expected 1 or 2, but got {}",
                        args.len()
                    ))
                }
            };
            if stop.saturating_sub(start) > 1_000_000 {
                return Err("loop: more than 1000000 iterations".into());
            }
            Ok(Some(Value::Array((start..stop).map(Value::from).collect())))
        }
        "join" => {
            want(args, 2)?;
            string(strings(&args[1])?.join(&text(&args[0])?))
        }
        "trim" => {
            want(args, 2)?;
            let cut: Vec<char> = text(&args[0])?.chars().collect();
            string(text(&args[1])?.trim_matches(cut.as_slice()))
        }
        "trimPrefix" | "trimSuffix" => {
            want(args, 2)?;
            let (affix, s) = (text(&args[0])?, text(&args[1])?);
            let cut = if name == "trimPrefix" {
                s.strip_prefix(affix.as_str())
            } else {
                s.strip_suffix(affix.as_str())
            };
            string(cut.unwrap_or(&s))
        }
        "trimSpace" => string(one(args)?.trim()),
        "toLower" => string(one(args)?.to_lowercase()),
        "toUpper" => string(one(args)?.to_uppercase()),
        "toTitle" => string(title(&one(args)?)),
        "parseBool" => {
            let s = one(args)?;
            let b = match s.as_str() {
                "" => false,
                "1" | "t" | "T" | "TRUE" | "true" | "True" => true,
                "0" | "f" | "F" | "FALSE" | "false" | "False" => false,
                _ => return Err(format!("strconv.ParseBool: parsing {s:?}: invalid syntax")),
            };
            Ok(Some(Value::Bool(b)))
        }
        "parseInt" => Ok(Some(Value::from(parse_int(&one(args)?)?))),
        "parseUint" => {
            let s = one(args)?;
            if s.is_empty() {
                return Ok(Some(Value::from(0u64)));
            }
            let n = s
                .parse::<u64>()
                .map_err(|e| format!("strconv.ParseUint: parsing {s:?}: {e}"))?;
            Ok(Some(Value::from(n)))
        }
        "parseFloat" => {
            let s = one(args)?;
            if s.is_empty() {
                return Ok(float_value(0.0));
            }
            let f = s
                .parse::<f64>()
                .map_err(|e| format!("strconv.ParseFloat: parsing {s:?}: {e}"))?;
            Ok(float_value(f))
        }
        "parseJSON" => {
            let s = one(args)?;
            if s.is_empty() {
                return Ok(Some(Value::Object(Map::new())));
            }
            serde_json::from_str(&s)
                .map(Some)
                .map_err(|e| format!("parseJSON: {e}"))
        }
        "regexReplaceAll" => {
            want(args, 3)?;
            let re = regex::Regex::new(&text(&args[0])?).map_err(|e| e.to_string())?;
            let (with, s) = (text(&args[1])?, text(&args[2])?);
            // Each match's replacement is at most the replacement text with every group
            // reference expanded to the whole input.
            let matches = re.find_iter(&s).count() as u128;
            let bound = s.len() as u128 + matches * (with.len() as u128) * (s.len() as u128 + 1);
            if bound > super::MAX_OUTPUT as u128 {
                return Err(format!(
                    "regexReplaceAll: the result could be larger than {} bytes",
                    super::MAX_OUTPUT
                ));
            }
            // Go's `$1` / `${name}` expansion is the regex crate's too.
            string(re.replace_all(&s, with.as_str()).into_owned())
        }
        "regexMatch" => {
            want(args, 2)?;
            let re = regex::Regex::new(&text(&args[0])?).map_err(|e| e.to_string())?;
            Ok(Some(Value::Bool(re.is_match(&text(&args[1])?))))
        }
        "replaceAll" => {
            want(args, 3)?;
            let (from, to, s) = (text(&args[0])?, text(&args[1])?, text(&args[2])?);
            let hits = if from.is_empty() {
                s.chars().count() + 1
            } else {
                s.matches(from.as_str()).count()
            };
            let size = s.len() as u128 + hits as u128 * to.len() as u128;
            if size > super::MAX_OUTPUT as u128 {
                return Err(format!(
                    "replaceAll: the result would be larger than {} bytes",
                    super::MAX_OUTPUT
                ));
            }
            string(s.replace(&from, &to))
        }
        "split" => {
            want(args, 2)?;
            let (sep, s) = (text(&args[0])?, text(&args[1])?);
            let s = s.trim();
            let parts: Vec<Value> = if s.is_empty() {
                Vec::new()
            } else if sep.is_empty() {
                s.chars().map(|c| Value::String(c.to_string())).collect()
            } else {
                s.split(sep.as_str())
                    .map(|p| Value::String(p.into()))
                    .collect()
            };
            Ok(Some(Value::Array(parts)))
        }
        "splitToMap" => {
            want(args, 3)?;
            let (sep1, sep2, s) = (text(&args[0])?, text(&args[1])?, text(&args[2])?);
            let mut out = Map::new();
            let s = s.trim();
            if !s.is_empty() {
                for part in s.split(sep1.as_str()) {
                    if let Some((k, v)) = part.split_once(sep2.as_str()) {
                        out.insert(k.to_string(), Value::String(v.to_string()));
                    }
                }
            }
            Ok(Some(Value::Object(out)))
        }
        "sha256Hex" => {
            use sha2::Digest as _;
            string(hex(&sha2::Sha256::digest(one(args)?.as_bytes())))
        }
        "md5sum" => {
            use md5::Digest as _;
            string(hex(&md5::Md5::digest(one(args)?.as_bytes())))
        }
        "hmacSHA256Hex" => {
            use hmac::Mac as _;
            want(args, 2)?;
            let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(text(&args[1])?.as_bytes())
                .map_err(|e| e.to_string())?;
            mac.update(text(&args[0])?.as_bytes());
            string(hex(&mac.finalize().into_bytes()))
        }
        "toJSON" | "toJSONPretty" | "toUnescapedJSON" | "toUnescapedJSONPretty" => {
            want(args, 1)?;
            json_out(
                &args[0],
                name.ends_with("Pretty"),
                name.contains("Unescaped"),
            )
        }
        "toYAML" => {
            want(args, 1)?;
            let mut out = String::new();
            yaml(
                &without_hidden(args[0].as_ref().unwrap_or(&Value::Null)),
                0,
                &mut out,
            );
            string(out.trim_end_matches('\n'))
        }
        "toTOML" => {
            want(args, 1)?;
            let v = without_hidden(args[0].as_ref().unwrap_or(&Value::Null));
            let table: BTreeMap<String, Value> = match v {
                Value::Object(o) => o.into_iter().collect(),
                other => return Err(format!("toTOML: expected a map; got {other}")),
            };
            let out = toml::to_string(&table).map_err(|e| format!("toTOML: {e}"))?;
            string(out.trim_end_matches('\n'))
        }
        "add" | "subtract" | "multiply" | "divide" | "modulo" | "minimum" | "maximum" => {
            arith(name, args)
        }
        other => Err(format!("function {other:?} not defined")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::gotemplate::{RenderOptions, Syntax, Template};

    struct Data;
    impl crate::gotemplate::Funcs for Data {
        fn call(&self, name: &str, args: &[Val]) -> Option<Result<Val, String>> {
            call_data(name, args)
        }
    }

    fn render(src: &str, data: Value) -> String {
        let known = |n: &str| kind(n).is_some();
        let syntax = Syntax {
            known: &known,
            ..Syntax::default()
        };
        Template::parse_with(src, &syntax)
            .unwrap_or_else(|e| panic!("{src:?}: {e}"))
            .render_with(
                &data,
                RenderOptions {
                    funcs: &Data,
                    missing_key_error: false,
                },
            )
            .unwrap_or_else(|e| panic!("{src:?}: {e}"))
    }

    #[test]
    fn strings_and_lists_take_the_piped_value_last() {
        let d = json!({"csv": "a,b,c", "tags": ["x", "y"], "s": "  Hello World  "});
        assert_eq!(
            render(r#"{{ .csv | split "," | join ";" }}"#, d.clone()),
            "a;b;c"
        );
        assert_eq!(
            render(r#"{{ .s | trimSpace | toUpper }}"#, d.clone()),
            "HELLO WORLD"
        );
        assert_eq!(
            render(r#"{{ .s | trimSpace | toLower }}"#, d.clone()),
            "hello world"
        );
        assert_eq!(
            render(r#"{{ "hello wide world" | toTitle }}"#, d.clone()),
            "Hello Wide World"
        );
        assert_eq!(
            render(r#"{{ "a-b-c" | replaceAll "-" "+" }}"#, d.clone()),
            "a+b+c"
        );
        assert_eq!(
            render(
                r#"{{ "v1.2.3" | regexReplaceAll "v(\\d+)\\..*" "major=$1" }}"#,
                d.clone()
            ),
            "major=1"
        );
        assert_eq!(
            render(r#"{{ "abc" | regexMatch "^a" }}"#, d.clone()),
            "true"
        );
        assert_eq!(
            render(r#"{{ if .tags | contains "y" }}yes{{ end }}"#, d.clone()),
            "yes"
        );
        assert_eq!(
            render(
                r#"{{ if in .tags "z" }}yes{{ else }}no{{ end }}"#,
                d.clone()
            ),
            "no"
        );
        assert_eq!(
            render(r#"{{ .tags | containsAll (split "," "x,y") }}"#, d.clone()),
            "true"
        );
        assert_eq!(
            render(r#"{{ .tags | containsAny (split "," "q,y") }}"#, d.clone()),
            "true"
        );
        assert_eq!(
            render(r#"{{ .tags | containsNone (split "," "q") }}"#, d.clone()),
            "true"
        );
        assert_eq!(
            render(
                r#"{{ .tags | containsNotAll (split "," "x,q") }}"#,
                d.clone()
            ),
            "true"
        );
        assert_eq!(
            render(
                r#"{{ "xxhixx" | trim "x" }}/{{ "pre-x" | trimPrefix "pre-" }}"#,
                d.clone()
            ),
            "hi/x"
        );
        assert_eq!(render("{{ \"a\\nb\" | indent 2 }}", d.clone()), "  a\n  b");
        assert_eq!(
            render(
                r#"{{ range loop 3 }}{{ . }}{{ end }}|{{ range loop 2 4 }}{{ . }}{{ end }}"#,
                d.clone()
            ),
            "012|23"
        );
        assert_eq!(
            render(
                r#"{{ with splitToMap "," "=" "a=1,b=2" }}{{ .b }}{{ end }}"#,
                d
            ),
            "2"
        );
    }

    #[test]
    fn parsing_encoding_and_hashes() {
        let d = json!({});
        assert_eq!(render(r#"{{ "42" | parseInt | add 1 }}"#, d.clone()), "43");
        // Base 10, as consul-template's.
        assert_eq!(render(r#"{{ "010" | parseInt }}"#, d.clone()), "10");
        assert_eq!(render(r#"{{ "true" | parseBool }}"#, d.clone()), "true");
        assert_eq!(render(r#"{{ "2.5" | parseFloat }}"#, d.clone()), "2.5");
        assert_eq!(
            render(
                r#"{{ with parseJSON `{"a":{"b":[1,2]}}` }}{{ index .a.b 1 }}{{ end }}"#,
                d.clone()
            ),
            "2"
        );
        assert_eq!(
            render(
                r#"{{ "hi" | base64Encode }}|{{ "aGk=" | base64Decode }}"#,
                d.clone()
            ),
            "aGk=|hi"
        );
        assert_eq!(
            render(r#"{{ "abc" | sha256Hex }}"#, d.clone()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            render(r#"{{ "abc" | md5sum }}"#, d.clone()),
            "900150983cd24fb0d6963f7d28e17f72"
        );
        // RFC 4231 test case 2.
        assert_eq!(
            render(
                r#"{{ hmacSHA256Hex "what do ya want for nothing?" "Jefe" }}"#,
                d
            ),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn arithmetic_in_consul_template_order() {
        let d = json!({});
        assert_eq!(
            render(
                "{{ 5 | subtract 2 }} {{ 2 | multiply 4 }} {{ 7 | divide 2 }} {{ 7 | modulo 4 }}",
                d.clone()
            ),
            "3 8 3 3"
        );
        assert_eq!(
            render(
                "{{ 1.5 | add 1 }} {{ minimum 3 9 }} {{ maximum 3 9 }}",
                d.clone()
            ),
            "2.5 3 9"
        );
        let known = |n: &str| kind(n).is_some();
        let t = Template::parse_with(
            "{{ 1 | divide 0 }}",
            &Syntax {
                known: &known,
                ..Syntax::default()
            },
        )
        .unwrap();
        let err = t
            .render_with(
                &d,
                RenderOptions {
                    funcs: &Data,
                    missing_key_error: false,
                },
            )
            .unwrap_err();
        assert!(err.to_string().contains("divide by zero"), "{err}");
    }

    #[test]
    fn json_yaml_and_toml_output() {
        let d = json!({"m": {"b": [1, "two"], "a": "x<y", "c": {"d": true}}});
        assert_eq!(
            render("{{ .m | toJSON }}", d.clone()),
            r#"{"a":"x\u003cy","b":[1,"two"],"c":{"d":true}}"#
        );
        assert_eq!(
            render("{{ .m | toUnescapedJSON }}", d.clone()),
            r#"{"a":"x<y","b":[1,"two"],"c":{"d":true}}"#
        );
        assert_eq!(
            render("{{ .m.c | toJSONPretty }}", d.clone()),
            "{\n  \"d\": true\n}"
        );
        assert_eq!(
            render("{{ .m | toYAML }}", d.clone()),
            "a: x<y\nb:\n- 1\n- two\nc:\n  d: true"
        );
        assert_eq!(
            render(
                r#"{{ parseJSON `{"v":"true","num":"12"}` | toYAML }}"#,
                d.clone()
            ),
            "num: \"12\"\nv: \"true\""
        );
        assert_eq!(render("{{ .m.c | toTOML }}", d.clone()), "d = true");
        assert_eq!(
            render(
                r#"{{ mergeMap (parseJSON `{"a":1}`) (parseJSON `{"a":2,"b":3}`) | toJSON }}"#,
                d.clone()
            ),
            r#"{"a":1,"b":3}"#
        );
        assert_eq!(
            render(
                r#"{{ mergeMapWithOverride (parseJSON `{"a":1}`) (parseJSON `{"a":2}`) | toJSON }}"#,
                d.clone()
            ),
            r#"{"a":2}"#
        );
        assert_eq!(
            render(
                r#"{{ explodeMap (parseJSON `{"a/b":1,"a/c":2}`) | toJSON }}"#,
                d
            ),
            r#"{"a":{"b":1,"c":2}}"#
        );
    }

    #[test]
    fn every_name_has_a_kind() {
        assert_eq!(kind("nomadVar"), Some(Kind::Nomad));
        assert_eq!(kind("key"), Some(Kind::Consul));
        assert_eq!(kind("secret"), Some(Kind::Vault));
        assert_eq!(kind("writeToFile"), Some(Kind::Denied));
        assert_eq!(kind("sprig_upper"), Some(Kind::Data));
        assert_eq!(kind("sprig_semver"), Some(Kind::Unsupported));
        assert_eq!(kind("sprig_env"), None);
        assert_eq!(kind("printf"), Some(Kind::Builtin));
        assert_eq!(kind("env"), Some(Kind::Task));
        assert_eq!(kind("nosuch"), None);
        for name in DATA {
            assert!(
                !matches!(data(name, &[]), Err(e) if e.contains("not defined")),
                "{name} is listed but not implemented"
            );
        }
    }
}
