//! Sprig's functions as consul-template offers them: `sprig_<name>`, the hermetic ones
//! (no clock, randomness, environment or network). [`SPRIG`] names those teamster
//! implements, with Sprig's argument order and its forgiving conversions (a string that
//! is no number is 0, `b64dec` of bad input answers the error's text). The rest of
//! Sprig's hermetic set is refused when a job is submitted ([`UNSUPPORTED`]): its dates and
//! durations (Go time values), types (Go type names), `semver*`, `url*`, the
//! case-conversion and wrapping helpers, the certificate and password functions, and
//! `set`/`unset`, which in Go change a map that template variables share.

use std::collections::BTreeSet;

use base64::Engine as _;
use serde_json::{Map, Number, Value};
use sha1::Digest as _;

use super::funcs::{hex, json_out, merge};
use super::{go_text, truth, Val};

/// The Sprig functions teamster implements (without the `sprig_` prefix).
pub const SPRIG: &[&str] = &[
    "hello",
    // Strings.
    "abbrev",
    "abbrevboth",
    "trunc",
    "trim",
    "upper",
    "lower",
    "title",
    "untitle",
    "substr",
    "repeat",
    "trimall",
    "trimAll",
    "trimSuffix",
    "trimPrefix",
    "nospace",
    "initials",
    "contains",
    "hasPrefix",
    "hasSuffix",
    "quote",
    "squote",
    "cat",
    "indent",
    "nindent",
    "replace",
    "plural",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "adler32sum",
    "toString",
    "atoi",
    "int64",
    "int",
    "float64",
    "seq",
    "toDecimal",
    "split",
    "splitList",
    "splitn",
    "toStrings",
    "until",
    "untilStep",
    // Arithmetic.
    "add1",
    "add",
    "sub",
    "div",
    "mod",
    "mul",
    "add1f",
    "addf",
    "subf",
    "divf",
    "mulf",
    "biggest",
    "max",
    "min",
    "maxf",
    "minf",
    "ceil",
    "floor",
    "round",
    "join",
    "sortAlpha",
    // Defaults and flow.
    "default",
    "empty",
    "coalesce",
    "all",
    "any",
    "compact",
    "mustCompact",
    "ternary",
    "fail",
    "deepEqual",
    "deepCopy",
    "mustDeepCopy",
    // Encodings.
    "fromJson",
    "mustFromJson",
    "toJson",
    "mustToJson",
    "toPrettyJson",
    "mustToPrettyJson",
    "toRawJson",
    "mustToRawJson",
    "b64enc",
    "b64dec",
    "b32enc",
    "b32dec",
    // Paths.
    "base",
    "dir",
    "clean",
    "ext",
    "isAbs",
    "osBase",
    "osClean",
    "osDir",
    "osExt",
    "osIsAbs",
    // Lists.
    "tuple",
    "list",
    "append",
    "push",
    "mustAppend",
    "mustPush",
    "prepend",
    "mustPrepend",
    "first",
    "mustFirst",
    "rest",
    "mustRest",
    "last",
    "mustLast",
    "initial",
    "mustInitial",
    "reverse",
    "mustReverse",
    "uniq",
    "mustUniq",
    "without",
    "mustWithout",
    "has",
    "mustHas",
    "slice",
    "mustSlice",
    "concat",
    "chunk",
    "mustChunk",
    // Maps.
    "dict",
    "get",
    "hasKey",
    "pluck",
    "keys",
    "pick",
    "omit",
    "merge",
    "mustMerge",
    "mergeOverwrite",
    "mustMergeOverwrite",
    "values",
    "dig",
    // Regular expressions.
    "regexMatch",
    "mustRegexMatch",
    "regexFindAll",
    "mustRegexFindAll",
    "regexFind",
    "mustRegexFind",
    "regexReplaceAll",
    "mustRegexReplaceAll",
    "regexReplaceAllLiteral",
    "mustRegexReplaceAllLiteral",
    "regexSplit",
    "mustRegexSplit",
    "regexQuoteMeta",
];

/// Sprig's hermetic functions teamster does not implement (refused at submit).
pub const UNSUPPORTED: &[&str] = &[
    "ago",
    "duration",
    "durationRound",
    "must_date_modify",
    "mustDateModify",
    "mustToDate",
    "toDate",
    "unixEpoch",
    "swapcase",
    "shuffle",
    "snakecase",
    "camelcase",
    "kebabcase",
    "wrap",
    "wrapWith",
    "randInt",
    "toDecimal128",
    "typeOf",
    "typeIs",
    "typeIsLike",
    "kindOf",
    "kindIs",
    "set",
    "unset",
    "bcrypt",
    "htpasswd",
    "genPrivateKey",
    "derivePassword",
    "buildCustomCert",
    "genCA",
    "genCAWithKey",
    "genSelfSignedCert",
    "genSelfSignedCertWithKey",
    "genSignedCert",
    "genSignedCertWithKey",
    "encryptAES",
    "decryptAES",
    "semver",
    "semverCompare",
    "urlParse",
    "urlJoin",
];

/// The longest list a function makes (`until`, `seq`, `split`, …).
const MAX_SEQ: i64 = 1_000_000;
/// The deepest a value made by these functions may nest (JSON read by `parseJSON` nests
/// 128 deep at most).
const MAX_DEPTH: usize = 200;

fn ok(v: Value) -> Result<Val, String> {
    Ok(Some(v))
}

fn string(s: impl Into<String>) -> Result<Val, String> {
    ok(Value::String(s.into()))
}

/// Sprig's `strval`: a string as is, anything else as Go prints it.
fn strval(v: &Val) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        other => go_text(other),
    }
}

/// cast's `ToInt64`: numbers truncated, strings parsed (base prefixes, a zero decimal
/// part), booleans 1 or 0, anything else 0.
fn to_i64(v: &Val) -> i64 {
    match v {
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_u64().map(|u| u as i64))
            .unwrap_or_else(|| n.as_f64().unwrap_or(0.0) as i64),
        Some(Value::Bool(b)) => i64::from(*b),
        Some(Value::String(s)) => parse_go_int(s).unwrap_or(0),
        _ => 0,
    }
}

/// `strconv.ParseInt(s, 0, 64)` after cast trims a `.0…` decimal part.
fn parse_go_int(s: &str) -> Option<i64> {
    let s = match s.split_once('.') {
        Some((int, frac)) if frac.chars().all(|c| c == '0') => int,
        _ => s,
    };
    let (neg, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let digits = digits.replace('_', "");
    let lower = digits.to_ascii_lowercase();
    let (radix, body) = if let Some(b) = lower.strip_prefix("0x") {
        (16, b.to_string())
    } else if let Some(b) = lower.strip_prefix("0b") {
        (2, b.to_string())
    } else if let Some(b) = lower.strip_prefix("0o") {
        (8, b.to_string())
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, lower[1..].to_string())
    } else {
        (10, lower)
    };
    if body.starts_with(['+', '-']) {
        return None;
    }
    // Through i128 so that "-9223372036854775808" reads and nothing overflows.
    let n = i128::from_str_radix(&body, radix).ok()?;
    i64::try_from(if neg { -n } else { n }).ok()
}

/// cast's `ToFloat64`.
fn to_f64(v: &Val) -> f64 {
    match v {
        Some(Value::Number(n)) => n.as_f64().unwrap_or(0.0),
        Some(Value::Bool(b)) => f64::from(u8::from(*b)),
        Some(Value::String(s)) => s.parse().unwrap_or(0.0),
        _ => 0.0,
    }
}

/// `f` rounded to 15 significant digits (what a decimal sum or product of the inputs'
/// shortest forms reads back as).
fn decimal(f: f64) -> f64 {
    if !f.is_finite() || f == 0.0 {
        return f;
    }
    format!("{f:.14e}").parse().unwrap_or(f)
}

fn float(f: f64) -> Result<Val, String> {
    Ok(Number::from_f64(f).map(Value::Number))
}

/// Sprig's `empty`: nil, false, 0, "", and empty lists and maps.
fn is_empty(v: &Val) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => !b,
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(o)) => o.is_empty(),
    }
}

/// A list argument; `must` variants fail on anything else, the others panic in Sprig
/// (which the template reports as an error too).
fn list(name: &str, v: &Val) -> Result<Vec<Value>, String> {
    match v {
        Some(Value::Array(a)) => Ok(a.clone()),
        None | Some(Value::Null) => Ok(Vec::new()),
        other => Err(format!(
            "Cannot {} type {}",
            name.trim_start_matches("must").to_ascii_lowercase(),
            go_text(other)
        )),
    }
}

fn map(v: &Val) -> Result<Map<String, Value>, String> {
    match v {
        Some(Value::Object(o)) => Ok(super::without_hidden(&Value::Object(o.clone()))
            .as_object()
            .cloned()
            .unwrap_or_default()),
        None | Some(Value::Null) => Ok(Map::new()),
        other => Err(format!("expected a map; got {}", go_text(other))),
    }
}

fn need(name: &str, args: &[Val], n: usize) -> Result<(), String> {
    if args.len() == n {
        Ok(())
    } else {
        Err(format!(
            "wrong number of args for {name}: want {n} got {}",
            args.len()
        ))
    }
}

fn at_least(name: &str, args: &[Val], n: usize) -> Result<(), String> {
    if args.len() >= n {
        Ok(())
    } else {
        Err(format!(
            "wrong number of args for {name}: want at least {n} got {}",
            args.len()
        ))
    }
}

fn regex(pattern: &str) -> Result<regex::Regex, String> {
    regex::Regex::new(pattern).map_err(|e| format!("error parsing regexp: {e}"))
}

/// Go's `path.Clean`: the shortest equivalent path by lexical processing alone (also the
/// job file's path functions).
pub fn path_clean(p: &str) -> String {
    if p.is_empty() {
        return ".".into();
    }
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

/// Go's `path.Base`: the last element, "." for an empty path, "/" for the root, trailing
/// slashes ignored.
pub fn path_base(p: &str) -> String {
    if p.is_empty() {
        return ".".into();
    }
    let t = p.trim_end_matches('/');
    if t.is_empty() {
        return "/".into();
    }
    t.rsplit('/').next().unwrap_or(t).to_string()
}

/// Go's `path.Dir`: all but the last element, cleaned.
pub fn path_dir(p: &str) -> String {
    let cut = p.rfind('/').map_or(0, |i| i + 1);
    path_clean(&p[..cut])
}

/// Go's `path.Ext`.
fn ext(p: &str) -> String {
    for (i, c) in p.char_indices().rev() {
        if c == '/' {
            break;
        }
        if c == '.' {
            return p[i..].to_string();
        }
    }
    String::new()
}

const B32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

fn b32_encode(data: &[u8]) -> String {
    let mut out = String::new();
    for chunk in data.chunks(5) {
        let mut buf = [0u8; 5];
        buf[..chunk.len()].copy_from_slice(chunk);
        let bits = buf.iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        let chars = (chunk.len() * 8).div_ceil(5);
        for i in 0..8 {
            if i < chars {
                out.push(B32[((bits >> (35 - i * 5)) & 31) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn b32_decode(s: &str) -> Result<Vec<u8>, String> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::new();
    let (mut acc, mut nbits) = (0u64, 0u32);
    for (i, c) in s.bytes().enumerate() {
        let v = B32
            .iter()
            .position(|b| *b == c)
            .ok_or_else(|| format!("illegal base32 data at input byte {i}"))?;
        acc = (acc << 5) | v as u64;
        nbits += 5;
        if nbits >= 8 {
            nbits -= 8;
            out.push((acc >> nbits) as u8);
            acc &= (1 << nbits) - 1;
        }
    }
    Ok(out)
}

fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for byte in data {
        a = (a + u32::from(*byte)) % 65_521;
        b = (b + a) % 65_521;
    }
    (b << 16) | a
}

/// Go's `%q` of a string.
fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if c.is_control() => {
                let n = c as u32;
                if n < 0x80 {
                    out.push_str(&format!("\\x{n:02x}"));
                } else {
                    out.push_str(&format!("\\u{n:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn indent(spaces: i64, s: &str) -> Result<String, String> {
    let spaces = usize::try_from(spaces).unwrap_or(0);
    let lines = s.split('\n').count();
    if spaces.saturating_mul(lines).saturating_add(s.len()) > super::MAX_OUTPUT {
        return Err("indent: the result is too large".into());
    }
    let pad = " ".repeat(spaces);
    Ok(format!("{pad}{}", s.replace('\n', &format!("\n{pad}"))))
}

/// A list of integers from `start` towards `stop` by `step` (Sprig's `untilStep`).
fn until_step(start: i64, stop: i64, step: i64) -> Result<Val, String> {
    let mut out = Vec::new();
    if step == 0 || (step > 0 && start >= stop) || (step < 0 && start <= stop) {
        return ok(Value::Array(out));
    }
    let mut i = start;
    while (step > 0 && i < stop) || (step < 0 && i > stop) {
        if out.len() as i64 >= MAX_SEQ {
            return Err(format!("untilStep: more than {MAX_SEQ} numbers"));
        }
        out.push(Value::from(i));
        i = match i.checked_add(step) {
            Some(n) => n,
            None => break,
        };
    }
    ok(Value::Array(out))
}

/// Sprig's `seq`: as the shell's, `seq last`, `seq first last`, `seq first step last`,
/// the numbers joined by spaces.
fn seq(args: &[Val]) -> Result<Val, String> {
    let ints: Vec<i64> = args.iter().map(to_i64).collect();
    let (start, end, step) = match ints.as_slice() {
        [end] => (1, *end, if *end < 1 { -1 } else { 1 }),
        [start, end] => (*start, *end, if end < start { -1 } else { 1 }),
        [start, step, end] => {
            if end < start && *step > 0 {
                return string("");
            }
            (*start, *end, *step)
        }
        _ => return string(""),
    };
    let toward = if end < start { -1 } else { 1 };
    let Some(Value::Array(nums)) = until_step(start, end.saturating_add(toward), step)? else {
        return string("");
    };
    string(
        nums.iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// Sprig's `substr start end s`: runes are bytes here as in Sprig; out of range is whole.
fn substr(start: i64, end: i64, s: &str) -> String {
    let len = s.len() as i64;
    let slice = |a: i64, b: i64| {
        s.get(a as usize..b as usize)
            .map(str::to_string)
            .unwrap_or_else(|| {
                String::from_utf8_lossy(&s.as_bytes()[a as usize..b as usize]).into()
            })
    };
    if start < 0 {
        return slice(0, end.clamp(0, len));
    }
    if end < 0 || end > len {
        return slice(start.min(len), len);
    }
    slice(start.min(end), end)
}

fn trunc(c: i64, s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let n = chars.len() as i64;
    if c < 0 && n + c > 0 {
        chars[(n + c) as usize..].iter().collect()
    } else if c >= 0 && n > c {
        chars[..c as usize].iter().collect()
    } else {
        s.to_string()
    }
}

/// goutils' `Abbreviate`/`AbbreviateFull` as Sprig calls them.
fn abbreviate(s: &str, offset: i64, width: i64) -> Result<String, String> {
    let chars: Vec<char> = s.chars().collect();
    let n = chars.len() as i64;
    if width < 4 {
        return Err("Minimum abbreviation width is 4".into());
    }
    if n <= width {
        return Ok(s.to_string());
    }
    let mut offset = offset.clamp(0, n);
    if n - offset < width - 3 {
        offset = n - (width - 3);
    }
    let dots = "...";
    if offset <= 4 {
        let keep: String = chars[..(width - 3) as usize].iter().collect();
        return Ok(format!("{keep}{dots}"));
    }
    if width < 7 {
        return Err("Minimum abbreviation width with offset is 7".into());
    }
    if offset + width - 3 < n {
        let rest: String = chars[offset as usize..].iter().collect();
        let inner = abbreviate(&rest, 0, width - 3)?;
        return Ok(format!("{dots}{inner}"));
    }
    let tail: String = chars[(n - (width - 3)) as usize..].iter().collect();
    Ok(format!("{dots}{tail}"))
}

/// Go's `strings.Title`: the first letter of each word upper-cased.
pub(super) fn title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_sep = true;
    for c in s.chars() {
        if prev_sep {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        prev_sep = is_separator(c);
    }
    out
}

/// Go's `isSeparator` of `strings.Title`: ASCII letters, digits and `_` are not, other
/// ASCII is; beyond ASCII, letters and digits are not, spaces are.
fn is_separator(c: char) -> bool {
    if c.is_ascii() {
        return !(c.is_ascii_alphanumeric() || c == '_');
    }
    if c.is_alphanumeric() {
        return false;
    }
    c.is_whitespace()
}

fn untitle(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_space = true;
    for c in s.chars() {
        if prev_space {
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
        prev_space = c.is_whitespace();
    }
    out
}

fn sort_strings(v: &Val) -> Vec<String> {
    let mut l: Vec<String> = match v {
        Some(Value::Array(a)) => a.iter().map(|e| strval(&Some(e.clone()))).collect(),
        other => vec![strval(other)],
    };
    l.sort();
    l
}

/// Sprig's `strslice`: a list's elements as strings (nil elements left out).
fn strslice(v: &Val) -> Vec<String> {
    match v {
        Some(Value::Array(a)) => a
            .iter()
            .filter(|e| !e.is_null())
            .map(|e| strval(&Some(e.clone())))
            .collect(),
        None | Some(Value::Null) => Vec::new(),
        other => vec![strval(other)],
    }
}

/// Go's `strings.SplitN` (`n < 0`: all of them): an empty separator splits after each
/// character; more than [`MAX_SEQ`] parts is an error.
fn go_split(text: &str, sep: &str, n: i64) -> Result<Vec<String>, String> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let parts: Vec<String> = if sep.is_empty() {
        let chars: Vec<char> = text.chars().collect();
        let limit = if n < 0 {
            chars.len()
        } else {
            (n as usize).min(chars.len())
        };
        if limit == 0 {
            Vec::new()
        } else {
            let mut out: Vec<String> = chars[..limit - 1].iter().map(char::to_string).collect();
            out.push(chars[limit - 1..].iter().collect());
            out
        }
    } else if n < 0 {
        if text.matches(sep).count() as i64 >= MAX_SEQ {
            return Err(format!("split: more than {MAX_SEQ} parts"));
        }
        text.split(sep).map(str::to_string).collect()
    } else {
        text.splitn(n as usize, sep).map(str::to_string).collect()
    };
    if parts.len() as i64 > MAX_SEQ {
        return Err(format!("split: more than {MAX_SEQ} parts"));
    }
    Ok(parts)
}

/// Sprig's `split`-style map: `_0`, `_1`, … for each part.
fn parts_map(parts: Vec<String>) -> Value {
    Value::Object(
        parts
            .into_iter()
            .enumerate()
            .map(|(i, p)| (format!("_{i}"), Value::String(p)))
            .collect(),
    )
}

/// Calls Sprig's `name` (without its prefix); `None` when teamster does not implement it.
pub fn call(name: &str, args: &[Val]) -> Option<Result<Val, String>> {
    if !SPRIG.contains(&name) {
        return None;
    }
    Some(sprig(name, args).and_then(|v| {
        // Lists and maps of lists and maps, made in a loop, could nest without end (and
        // every later clone or drop of them recurse as deep).
        match &v {
            Some(v @ (Value::Array(_) | Value::Object(_))) if depth(v, MAX_DEPTH) > MAX_DEPTH => {
                Err(format!("sprig_{name}: values nest deeper than {MAX_DEPTH}"))
            }
            Some(Value::Array(a)) if a.len() as i64 > MAX_SEQ => {
                Err(format!("sprig_{name}: more than {MAX_SEQ} elements"))
            }
            _ => Ok(v),
        }
    }))
}

/// How deep `v` nests, counted up to just past `limit`.
fn depth(v: &Value, limit: usize) -> usize {
    if limit == 0 {
        return 1;
    }
    match v {
        Value::Array(a) => 1 + a.iter().map(|e| depth(e, limit - 1)).max().unwrap_or(0),
        Value::Object(o) => 1 + o.values().map(|e| depth(e, limit - 1)).max().unwrap_or(0),
        _ => 0,
    }
}

/// An error when a result of `len` bytes would be larger than a render may write.
fn fits(len: usize) -> Result<(), String> {
    if len > super::MAX_OUTPUT {
        Err(format!(
            "the result would be larger than {} bytes",
            super::MAX_OUTPUT
        ))
    } else {
        Ok(())
    }
}

fn sprig(name: &str, args: &[Val]) -> Result<Val, String> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let s = |i: usize| args.get(i).map(strval).unwrap_or_default();
    let must = name.starts_with("must");
    match name {
        "hello" => string("Hello!"),
        // goutils' errors come out as "" (Sprig drops them); its widths too small to
        // abbreviate leave the string as it is.
        "abbrev" => {
            need(name, args, 2)?;
            let width = to_i64(&args[0]);
            if width < 4 {
                return string(s(1));
            }
            string(abbreviate(&s(1), 0, width).unwrap_or_default())
        }
        "abbrevboth" => {
            need(name, args, 3)?;
            let (left, right) = (to_i64(&args[0]), to_i64(&args[1]));
            if right < 4 || (left > 0 && right < 7) {
                return string(s(2));
            }
            string(abbreviate(&s(2), left, right).unwrap_or_default())
        }
        "trunc" => {
            need(name, args, 2)?;
            string(trunc(to_i64(&args[0]), &s(1)))
        }
        "trim" => {
            need(name, args, 1)?;
            string(s(0).trim())
        }
        "upper" => {
            need(name, args, 1)?;
            string(s(0).to_uppercase())
        }
        "lower" => {
            need(name, args, 1)?;
            string(s(0).to_lowercase())
        }
        "title" => {
            need(name, args, 1)?;
            string(title(&s(0)))
        }
        "untitle" => {
            need(name, args, 1)?;
            string(untitle(&s(0)))
        }
        "substr" => {
            need(name, args, 3)?;
            string(substr(to_i64(&args[0]), to_i64(&args[1]), &s(2)))
        }
        "repeat" => {
            need(name, args, 2)?;
            let count = usize::try_from(to_i64(&args[0])).unwrap_or(0);
            let text = s(1);
            if count.saturating_mul(text.len()) > super::MAX_OUTPUT {
                return Err("repeat: the result is too large".into());
            }
            string(text.repeat(count))
        }
        "trimall" | "trimAll" => {
            need(name, args, 2)?;
            let cut: Vec<char> = s(0).chars().collect();
            string(s(1).trim_matches(cut.as_slice()))
        }
        "trimSuffix" => {
            need(name, args, 2)?;
            let (cut, text) = (s(0), s(1));
            string(text.strip_suffix(cut.as_str()).unwrap_or(&text))
        }
        "trimPrefix" => {
            need(name, args, 2)?;
            let (cut, text) = (s(0), s(1));
            string(text.strip_prefix(cut.as_str()).unwrap_or(&text))
        }
        "nospace" => {
            need(name, args, 1)?;
            string(
                s(0).chars()
                    .filter(|c| !c.is_whitespace())
                    .collect::<String>(),
            )
        }
        "initials" => {
            need(name, args, 1)?;
            string(
                s(0).split_whitespace()
                    .filter_map(|w| w.chars().next())
                    .collect::<String>(),
            )
        }
        "contains" | "hasPrefix" | "hasSuffix" => {
            need(name, args, 2)?;
            let (needle, hay) = (s(0), s(1));
            ok(Value::Bool(match name {
                "contains" => hay.contains(&needle),
                "hasPrefix" => hay.starts_with(&needle),
                _ => hay.ends_with(&needle),
            }))
        }
        "quote" | "squote" => string(
            args.iter()
                .filter(|a| a.as_ref().is_some_and(|v| !v.is_null()))
                .map(|a| {
                    if name == "quote" {
                        go_quote(&strval(a))
                    } else {
                        format!("'{}'", strval(a))
                    }
                })
                .collect::<Vec<_>>()
                .join(" "),
        ),
        "cat" => string(
            args.iter()
                .filter(|a| a.as_ref().is_some_and(|v| !v.is_null()))
                .map(strval)
                .collect::<Vec<_>>()
                .join(" "),
        ),
        "indent" | "nindent" => {
            need(name, args, 2)?;
            let text = indent(to_i64(&args[0]), &s(1))?;
            string(if name == "nindent" {
                format!("\n{text}")
            } else {
                text
            })
        }
        "replace" => {
            need(name, args, 3)?;
            let (old, new, text) = (s(0), s(1), s(2));
            let times = if old.is_empty() {
                text.chars().count() + 1
            } else {
                text.matches(old.as_str()).count()
            };
            fits(text.len().saturating_add(times.saturating_mul(new.len())))?;
            string(text.replace(&old, &new))
        }
        "plural" => {
            need(name, args, 3)?;
            string(if to_i64(&args[2]) == 1 { s(0) } else { s(1) })
        }
        "sha1sum" => {
            need(name, args, 1)?;
            string(hex(&sha1::Sha1::digest(s(0).as_bytes())))
        }
        "sha256sum" => {
            need(name, args, 1)?;
            string(hex(&sha2::Sha256::digest(s(0).as_bytes())))
        }
        "sha512sum" => {
            need(name, args, 1)?;
            string(hex(&sha2::Sha512::digest(s(0).as_bytes())))
        }
        "adler32sum" => {
            need(name, args, 1)?;
            string(adler32(s(0).as_bytes()).to_string())
        }
        "toString" => {
            need(name, args, 1)?;
            string(s(0))
        }
        "atoi" => {
            need(name, args, 1)?;
            ok(Value::from(s(0).parse::<i64>().unwrap_or(0)))
        }
        "int" | "int64" => {
            need(name, args, 1)?;
            ok(Value::from(to_i64(&args[0])))
        }
        "float64" => {
            need(name, args, 1)?;
            float(to_f64(&args[0]))
        }
        "toDecimal" => {
            need(name, args, 1)?;
            ok(Value::from(i64::from_str_radix(&s(0), 8).unwrap_or(0)))
        }
        "seq" => seq(args),
        "split" => {
            need(name, args, 2)?;
            ok(parts_map(go_split(&s(1), &s(0), -1)?))
        }
        "splitList" => {
            need(name, args, 2)?;
            ok(Value::Array(
                go_split(&s(1), &s(0), -1)?
                    .into_iter()
                    .map(Value::String)
                    .collect(),
            ))
        }
        "splitn" => {
            need(name, args, 3)?;
            ok(parts_map(go_split(&s(2), &s(0), to_i64(&args[1]))?))
        }
        "toStrings" => {
            need(name, args, 1)?;
            ok(Value::Array(
                strslice(&args[0]).into_iter().map(Value::String).collect(),
            ))
        }
        "until" => {
            need(name, args, 1)?;
            let n = to_i64(&args[0]);
            until_step(0, n, if n < 0 { -1 } else { 1 })
        }
        "untilStep" => {
            need(name, args, 3)?;
            until_step(to_i64(&args[0]), to_i64(&args[1]), to_i64(&args[2]))
        }
        "add1" => {
            need(name, args, 1)?;
            ok(Value::from(to_i64(&args[0]).wrapping_add(1)))
        }
        "add" => ok(Value::from(
            args.iter().fold(0i64, |a, b| a.wrapping_add(to_i64(b))),
        )),
        "mul" => {
            at_least(name, args, 1)?;
            ok(Value::from(
                args[1..]
                    .iter()
                    .fold(to_i64(&args[0]), |a, b| a.wrapping_mul(to_i64(b))),
            ))
        }
        "sub" | "div" | "mod" => {
            need(name, args, 2)?;
            let (a, b) = (to_i64(&args[0]), to_i64(&args[1]));
            if name != "sub" && b == 0 {
                return Err("runtime error: integer divide by zero".into());
            }
            ok(Value::from(match name {
                "sub" => a.wrapping_sub(b),
                "div" => a.wrapping_div(b),
                _ => a.wrapping_rem(b),
            }))
        }
        // Sprig computes these in decimal: the binary result rounded to 15 significant
        // digits (sums and products), a quotient to 16 decimal places, as its decimals.
        "add1f" => {
            need(name, args, 1)?;
            float(decimal(to_f64(&args[0]) + 1.0))
        }
        "addf" => float(decimal(args.iter().map(to_f64).sum())),
        "subf" | "mulf" | "divf" => {
            at_least(name, args, 1)?;
            let mut acc = to_f64(&args[0]);
            for b in &args[1..] {
                let b = to_f64(b);
                acc = match name {
                    "subf" => decimal(acc - b),
                    "mulf" => decimal(acc * b),
                    _ if b == 0.0 => return Err("decimal division by 0".into()),
                    _ => format!("{:.16}", acc / b).parse().unwrap_or(acc / b),
                };
            }
            float(acc)
        }
        "biggest" | "max" | "min" => {
            at_least(name, args, 1)?;
            let nums = args.iter().map(to_i64);
            ok(Value::from(if name == "min" {
                nums.min().unwrap_or(0)
            } else {
                nums.max().unwrap_or(0)
            }))
        }
        "maxf" | "minf" => {
            at_least(name, args, 1)?;
            let nums = args.iter().map(to_f64);
            float(if name == "minf" {
                nums.fold(f64::INFINITY, f64::min)
            } else {
                nums.fold(f64::NEG_INFINITY, f64::max)
            })
        }
        "ceil" | "floor" => {
            need(name, args, 1)?;
            let f = to_f64(&args[0]);
            float(if name == "ceil" { f.ceil() } else { f.floor() })
        }
        "round" => {
            if !(2..=3).contains(&args.len()) {
                return Err(format!(
                    "wrong number of args for round: want 2 or 3 got {}",
                    args.len()
                ));
            }
            let value = to_f64(&args[0]);
            let round_on = args.get(2).map_or(0.5, to_f64);
            let pow = 10f64.powf(to_i64(&args[1]) as f64);
            let digit = pow * value;
            let rounded = if digit.fract() >= round_on {
                digit.ceil()
            } else {
                digit.floor()
            };
            float(rounded / pow)
        }
        "join" => {
            need(name, args, 2)?;
            let (sep, parts) = (s(0), strslice(&args[1]));
            let len = parts.iter().map(String::len).sum::<usize>();
            fits(len.saturating_add(sep.len().saturating_mul(parts.len())))?;
            string(parts.join(&sep))
        }
        "sortAlpha" => {
            need(name, args, 1)?;
            ok(Value::Array(
                sort_strings(&args[0])
                    .into_iter()
                    .map(Value::String)
                    .collect(),
            ))
        }
        "default" => {
            at_least(name, args, 1)?;
            let given = args.get(1).cloned().flatten();
            Ok(if args.len() < 2 || is_empty(&given) {
                args[0].clone()
            } else {
                given
            })
        }
        "empty" => {
            need(name, args, 1)?;
            ok(Value::Bool(is_empty(&args[0])))
        }
        "coalesce" => Ok(args.iter().find(|a| !is_empty(a)).cloned().flatten()),
        "all" => ok(Value::Bool(args.iter().all(|a| !is_empty(a)))),
        "any" => ok(Value::Bool(args.iter().any(|a| !is_empty(a)))),
        "compact" | "mustCompact" => {
            need(name, args, 1)?;
            ok(Value::Array(
                list(name, &args[0])?
                    .into_iter()
                    .filter(|v| !is_empty(&Some(v.clone())))
                    .collect(),
            ))
        }
        "ternary" => {
            need(name, args, 3)?;
            Ok(if truth(&args[2]) {
                args[0].clone()
            } else {
                args[1].clone()
            })
        }
        "fail" => {
            need(name, args, 1)?;
            Err(s(0))
        }
        "deepEqual" => {
            need(name, args, 2)?;
            ok(Value::Bool(args[0] == args[1]))
        }
        "deepCopy" | "mustDeepCopy" => {
            need(name, args, 1)?;
            if must && args[0].as_ref().is_none_or(Value::is_null) {
                return Err("must pass a non-nil value to deepCopy".into());
            }
            Ok(args[0].clone())
        }
        "fromJson" | "mustFromJson" => {
            need(name, args, 1)?;
            match serde_json::from_str::<Value>(&s(0)) {
                Ok(v) => ok(v),
                Err(e) if must => Err(e.to_string()),
                Err(_) => ok(Value::Null),
            }
        }
        "toJson" | "mustToJson" | "toPrettyJson" | "mustToPrettyJson" | "toRawJson"
        | "mustToRawJson" => {
            need(name, args, 1)?;
            let pretty = name.contains("Pretty");
            let raw = name.contains("Raw");
            match json_out(&args[0], pretty, raw) {
                Ok(text) => Ok(text),
                Err(e) if must => Err(e),
                Err(_) => string(""),
            }
        }
        "b64enc" => {
            need(name, args, 1)?;
            string(b64.encode(s(0)))
        }
        "b64dec" => {
            need(name, args, 1)?;
            string(match b64.decode(s(0)) {
                Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                Err(e) => e.to_string(),
            })
        }
        "b32enc" => {
            need(name, args, 1)?;
            string(b32_encode(s(0).as_bytes()))
        }
        "b32dec" => {
            need(name, args, 1)?;
            string(match b32_decode(&s(0)) {
                Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                Err(e) => e,
            })
        }
        "base" | "osBase" => {
            need(name, args, 1)?;
            string(path_base(&s(0)))
        }
        "dir" | "osDir" => {
            need(name, args, 1)?;
            string(path_dir(&s(0)))
        }
        "clean" | "osClean" => {
            need(name, args, 1)?;
            string(path_clean(&s(0)))
        }
        "ext" | "osExt" => {
            need(name, args, 1)?;
            string(ext(&s(0)))
        }
        "isAbs" | "osIsAbs" => {
            need(name, args, 1)?;
            ok(Value::Bool(s(0).starts_with('/')))
        }
        "tuple" | "list" => ok(Value::Array(
            args.iter()
                .map(|a| a.clone().unwrap_or(Value::Null))
                .collect(),
        )),
        "append" | "push" | "mustAppend" | "mustPush" => {
            need(name, args, 2)?;
            let mut l = list(name, &args[0])?;
            l.push(args[1].clone().unwrap_or(Value::Null));
            ok(Value::Array(l))
        }
        "prepend" | "mustPrepend" => {
            need(name, args, 2)?;
            let mut l = list(name, &args[0])?;
            l.insert(0, args[1].clone().unwrap_or(Value::Null));
            ok(Value::Array(l))
        }
        "first" | "mustFirst" | "last" | "mustLast" => {
            need(name, args, 1)?;
            let l = list(name, &args[0])?;
            Ok(if name.ends_with("irst") {
                l.first().cloned()
            } else {
                l.last().cloned()
            })
        }
        "rest" | "mustRest" | "initial" | "mustInitial" => {
            need(name, args, 1)?;
            let l = list(name, &args[0])?;
            if l.is_empty() {
                return Ok(None);
            }
            ok(Value::Array(if name.ends_with("est") {
                l[1..].to_vec()
            } else {
                l[..l.len() - 1].to_vec()
            }))
        }
        "reverse" | "mustReverse" => {
            need(name, args, 1)?;
            let mut l = list(name, &args[0])?;
            l.reverse();
            ok(Value::Array(l))
        }
        "uniq" | "mustUniq" => {
            need(name, args, 1)?;
            let mut seen = std::collections::HashSet::new();
            let mut out: Vec<Value> = Vec::new();
            for v in list(name, &args[0])? {
                if seen.insert(v.to_string()) {
                    out.push(v);
                }
            }
            ok(Value::Array(out))
        }
        "without" | "mustWithout" => {
            at_least(name, args, 1)?;
            let omit: Vec<Value> = args[1..]
                .iter()
                .map(|a| a.clone().unwrap_or(Value::Null))
                .collect();
            ok(Value::Array(
                list(name, &args[0])?
                    .into_iter()
                    .filter(|v| !omit.contains(v))
                    .collect(),
            ))
        }
        "has" | "mustHas" => {
            need(name, args, 2)?;
            let needle = args[0].clone().unwrap_or(Value::Null);
            ok(Value::Bool(list(name, &args[1])?.contains(&needle)))
        }
        "slice" | "mustSlice" => {
            at_least(name, args, 1)?;
            let l = list(name, &args[0])?;
            let len = l.len() as i64;
            let start = args.get(1).map_or(0, to_i64);
            let end = args.get(2).map_or(len, to_i64);
            if start < 0 || end > len || start > end {
                return Err(format!("slice bounds out of range [{start}:{end}]"));
            }
            ok(Value::Array(l[start as usize..end as usize].to_vec()))
        }
        "concat" => {
            let mut out = Vec::new();
            for a in args {
                out.extend(list(name, a)?);
            }
            ok(Value::Array(out))
        }
        "chunk" | "mustChunk" => {
            need(name, args, 2)?;
            let size = to_i64(&args[0]);
            if size <= 0 {
                return Err("chunk: the size must be positive".into());
            }
            ok(Value::Array(
                list(name, &args[1])?
                    .chunks(size as usize)
                    .map(|c| Value::Array(c.to_vec()))
                    .collect(),
            ))
        }
        "dict" => {
            let mut out = Map::new();
            for pair in args.chunks(2) {
                let key = strval(&pair[0]);
                let value = pair
                    .get(1)
                    .cloned()
                    .flatten()
                    .unwrap_or(Value::String(String::new()));
                out.insert(key, value);
            }
            ok(Value::Object(out))
        }
        "get" => {
            need(name, args, 2)?;
            Ok(Some(
                map(&args[0])?
                    .get(&s(1))
                    .cloned()
                    .unwrap_or(Value::String(String::new())),
            ))
        }
        "hasKey" => {
            need(name, args, 2)?;
            ok(Value::Bool(map(&args[0])?.contains_key(&s(1))))
        }
        "pluck" => {
            at_least(name, args, 1)?;
            let key = s(0);
            let mut out = Vec::new();
            for d in &args[1..] {
                if let Some(v) = map(d)?.get(&key) {
                    out.push(v.clone());
                }
            }
            ok(Value::Array(out))
        }
        "keys" => {
            let mut out = Vec::new();
            for d in args {
                out.extend(map(d)?.keys().map(|k| Value::String(k.clone())));
            }
            ok(Value::Array(out))
        }
        "values" => {
            need(name, args, 1)?;
            ok(Value::Array(map(&args[0])?.values().cloned().collect()))
        }
        "pick" | "omit" => {
            at_least(name, args, 1)?;
            let keys: BTreeSet<String> = args[1..].iter().map(strval).collect();
            let keep = name == "pick";
            ok(Value::Object(
                map(&args[0])?
                    .into_iter()
                    .filter(|(k, _)| keys.contains(k) == keep)
                    .collect(),
            ))
        }
        "merge" | "mustMerge" | "mergeOverwrite" | "mustMergeOverwrite" => {
            at_least(name, args, 1)?;
            let over = name.contains("Overwrite");
            let mut dst = map(&args[0])?;
            for src in &args[1..] {
                merge(&mut dst, &map(src)?, over);
            }
            ok(Value::Object(dst))
        }
        "dig" => {
            at_least(name, args, 2)?;
            let (keys, rest) = args.split_at(args.len() - 2);
            let (default, mut at) = (rest[0].clone(), map(&rest[1])?);
            for (i, k) in keys.iter().enumerate() {
                match at.get(&strval(k)) {
                    Some(v) if i + 1 == keys.len() => return Ok(Some(v.clone())),
                    Some(Value::Object(o)) => at = o.clone(),
                    _ => return Ok(default),
                }
            }
            Ok(default)
        }
        "regexMatch" | "mustRegexMatch" => {
            need(name, args, 2)?;
            match regex(&s(0)) {
                Ok(re) => ok(Value::Bool(re.is_match(&s(1)))),
                Err(e) if must => Err(e),
                Err(_) => ok(Value::Bool(false)),
            }
        }
        "regexFindAll" | "mustRegexFindAll" => {
            need(name, args, 3)?;
            let re = regex(&s(0))?;
            let text = s(1);
            let n = to_i64(&args[2]);
            let most = if n < 0 {
                MAX_SEQ + 1
            } else {
                n.min(MAX_SEQ + 1)
            };
            ok(Value::Array(
                re.find_iter(&text)
                    .take(most as usize)
                    .map(|m| Value::String(m.as_str().into()))
                    .collect(),
            ))
        }
        "regexFind" | "mustRegexFind" => {
            need(name, args, 2)?;
            let text = s(1);
            string(
                regex(&s(0))?
                    .find(&text)
                    .map(|m| m.as_str().to_string())
                    .unwrap_or_default(),
            )
        }
        "regexReplaceAll"
        | "mustRegexReplaceAll"
        | "regexReplaceAllLiteral"
        | "mustRegexReplaceAllLiteral" => {
            need(name, args, 3)?;
            let (re, text, repl) = (regex(&s(0))?, s(1), s(2));
            let literal = name.ends_with("Literal");
            // Each replacement is made by hand, so the result stops growing at the bound.
            let mut out = String::new();
            let mut last = 0;
            for caps in re.captures_iter(&text) {
                let Some(m) = caps.get(0) else { continue };
                out.push_str(&text[last..m.start()]);
                if literal {
                    out.push_str(&repl);
                } else {
                    caps.expand(&repl, &mut out);
                }
                last = m.end();
                fits(out.len())?;
            }
            out.push_str(&text[last..]);
            fits(out.len())?;
            string(out)
        }
        "regexSplit" | "mustRegexSplit" => {
            need(name, args, 3)?;
            let re = regex(&s(0))?;
            let text = s(1);
            let n = to_i64(&args[2]);
            // Go's `Regexp.Split`: an empty match at the start splits nothing off.
            let mut parts: Vec<Value> = Vec::new();
            if n == 0 {
                return ok(Value::Array(parts));
            }
            if !re.as_str().is_empty() && text.is_empty() {
                return ok(Value::Array(vec![Value::String(String::new())]));
            }
            let (mut beg, mut end) = (0, 0);
            for m in re.find_iter(&text) {
                if (n > 0 && parts.len() as i64 == n - 1) || parts.len() as i64 > MAX_SEQ {
                    break;
                }
                end = m.start();
                if m.end() != 0 {
                    parts.push(Value::String(text[beg..end].to_string()));
                }
                beg = m.end();
            }
            if end != text.len() {
                parts.push(Value::String(text[beg..].to_string()));
            }
            ok(Value::Array(parts))
        }
        "regexQuoteMeta" => {
            need(name, args, 1)?;
            // Go's `regexp.QuoteMeta`: only `\.+*?()|[]{}^$`.
            let mut out = String::new();
            for c in s(0).chars() {
                if "\\.+*?()|[]{}^$".contains(c) {
                    out.push('\\');
                }
                out.push(c);
            }
            string(out)
        }
        other => Err(format!("function \"sprig_{other}\" not defined")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::funcs::{call_data, kind};
    use super::super::{Funcs, RenderOptions, Syntax, Template, Val};

    /// The template functions of a task's templates (`sprig_*` among them).
    struct Data;
    impl Funcs for Data {
        fn call(&self, name: &str, args: &[Val]) -> Option<Result<Val, String>> {
            call_data(name, args)
        }
    }

    fn run(text: &str, d: serde_json::Value) -> Result<String, String> {
        let known = |n: &str| kind(n).is_some();
        let syntax = Syntax {
            known: &known,
            ..Syntax::default()
        };
        let t = Template::parse_with(text, &syntax).map_err(|e| e.to_string())?;
        t.render_with(
            &d,
            RenderOptions {
                funcs: &Data,
                missing_key_error: false,
            },
        )
        .map_err(|e| e.to_string())
    }

    fn r(text: &str, d: serde_json::Value) -> String {
        run(text, d).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn err(text: &str) -> String {
        run(text, json!({})).expect_err(text)
    }

    /// Cases from Sprig's documentation, with their documented results.
    #[test]
    fn sprig_strings_as_documented() {
        let d = json!({});
        for (tpl, want) in [
            (r#"{{ sprig_trim "   hello    " }}"#, "hello"),
            (r#"{{ sprig_trimAll "$" "$5.00" }}"#, "5.00"),
            (r#"{{ sprig_trimSuffix "-" "hello-" }}"#, "hello"),
            (r#"{{ sprig_trimPrefix "-" "-hello" }}"#, "hello"),
            (r#"{{ sprig_upper "hello" }}"#, "HELLO"),
            (r#"{{ sprig_lower "HELLO" }}"#, "hello"),
            (r#"{{ sprig_title "hello world" }}"#, "Hello World"),
            (r#"{{ sprig_untitle "Hello World" }}"#, "hello world"),
            (r#"{{ sprig_repeat 3 "hello" }}"#, "hellohellohello"),
            (r#"{{ sprig_substr 0 5 "hello world" }}"#, "hello"),
            (r#"{{ sprig_nospace "hello w o r l d" }}"#, "helloworld"),
            (r#"{{ sprig_trunc 5 "hello world" }}"#, "hello"),
            (r#"{{ sprig_trunc -5 "hello world" }}"#, "world"),
            (r#"{{ sprig_abbrev 5 "hello world" }}"#, "he..."),
            (
                r#"{{ sprig_abbrevboth 5 10 "1234 5678 9123" }}"#,
                "...5678...",
            ),
            (r#"{{ sprig_initials "First Try" }}"#, "FT"),
            (r#"{{ sprig_contains "cat" "catch" }}"#, "true"),
            (r#"{{ sprig_hasPrefix "cat" "catch" }}"#, "true"),
            (r#"{{ sprig_hasSuffix "cat" "catch" }}"#, "false"),
            (r#"{{ sprig_quote "a" "b\"c" }}"#, r#""a" "b\"c""#),
            (r#"{{ sprig_squote "a" }}"#, "'a'"),
            (
                r#"{{ sprig_cat "hello" "beautiful" "world" }}"#,
                "hello beautiful world",
            ),
            (r#"{{ sprig_indent 4 "a\nb" }}"#, "    a\n    b"),
            (r#"{{ sprig_nindent 2 "a" }}"#, "\n  a"),
            (
                r#"{{ "I Am Henry VIII" | sprig_replace " " "-" }}"#,
                "I-Am-Henry-VIII",
            ),
            (
                r#"{{ sprig_plural "one anchovy" "many anchovies" 1 }}"#,
                "one anchovy",
            ),
            (
                r#"{{ sprig_plural "one anchovy" "many anchovies" 2 }}"#,
                "many anchovies",
            ),
            (
                r#"{{ sprig_sha1sum "Hello world!" }}"#,
                "d3486ae9136e7856bc42212385ea797094475802",
            ),
            (
                r#"{{ sprig_sha256sum "Hello world!" }}"#,
                "c0535e4be2b79ffd93291305436bf889314e4a3faec05ecffcbb7df31ad9e51a",
            ),
            (r#"{{ sprig_adler32sum "Hello world!" }}"#, "487130206"),
            (r#"{{ sprig_b64enc "hello" }}"#, "aGVsbG8="),
            (r#"{{ sprig_b64dec "aGVsbG8=" }}"#, "hello"),
            (r#"{{ sprig_b32enc "hello" }}"#, "NBSWY3DP"),
            (r#"{{ sprig_b32dec "NBSWY3DP" }}"#, "hello"),
            (r#"{{ sprig_b32enc "hi" }}"#, "NBUQ===="),
            (r#"{{ sprig_b32dec "NBUQ====" }}"#, "hi"),
            (
                r#"{{ $a := sprig_split "$" "foo$bar$baz" }}{{ $a._0 }}{{ $a._2 }}"#,
                "foobaz",
            ),
            (
                r#"{{ sprig_splitList "$" "foo$bar$baz" | sprig_join "," }}"#,
                "foo,bar,baz",
            ),
            (
                r#"{{ $a := sprig_splitn "$" 2 "foo$bar$baz" }}{{ $a._1 }}"#,
                "bar$baz",
            ),
            (r#"{{ sprig_base "foo/bar/baz" }}"#, "baz"),
            (r#"{{ sprig_dir "/foo/bar/baz" }}"#, "/foo/bar"),
            (r#"{{ sprig_clean "foo/bar/../baz" }}"#, "foo/baz"),
            (r#"{{ sprig_ext "foo.bar" }}"#, ".bar"),
            (r#"{{ sprig_isAbs "/x" }}"#, "true"),
            (
                r#"{{ sprig_regexMatch "^[a-z]+@[a-z]+\\.com$" "test@acme.com" }}"#,
                "true",
            ),
            (
                r#"{{ sprig_regexFindAll "[2,4,6,8]" "123456789" -1 }}"#,
                "[2 4 6 8]",
            ),
            (r#"{{ sprig_regexFind "[a-zA-Z][1-9]" "abcd1234" }}"#, "d1"),
            (
                r#"{{ sprig_regexReplaceAll "a(x*)b" "-ab-axxb-" "${1}W" }}"#,
                "-W-xxW-",
            ),
            (
                r#"{{ sprig_regexReplaceAllLiteral "a(x*)b" "-ab-axxb-" "${1}" }}"#,
                "-${1}-${1}-",
            ),
            (r#"{{ sprig_regexSplit "z+" "pizza" -1 }}"#, "[pi a]"),
            (r#"{{ sprig_regexQuoteMeta "1.2.3" }}"#, "1\\.2\\.3"),
            (r#"{{ sprig_toString 12 }}"#, "12"),
            (r#"{{ sprig_seq 5 }}"#, "1 2 3 4 5"),
            (r#"{{ sprig_seq -3 }}"#, "1 0 -1 -2 -3"),
            (r#"{{ sprig_seq 0 2 }}"#, "0 1 2"),
            (r#"{{ sprig_seq 2 -2 }}"#, "2 1 0 -1 -2"),
            (r#"{{ sprig_seq 0 2 10 }}"#, "0 2 4 6 8 10"),
            (r#"{{ sprig_seq 0 -5 -10 }}"#, "0 -5 -10"),
            (r#"{{ sprig_float64 "1234567" }}"#, "1.234567e+06"),
            (r#"{{ sprig_float64 "0.00001" }}"#, "1e-05"),
            (r#"{{ sprig_float64 "0.5" }}"#, "0.5"),
            (r#"{{ sprig_hello }}"#, "Hello!"),
        ] {
            assert_eq!(r(tpl, d.clone()), want, "{tpl}");
        }
    }

    /// Sprig's behaviour where it is easy to get wrong: its forgiving edges and Go's
    /// splitting, rounding and quoting.
    #[test]
    fn sprig_edges_as_sprig_v3_answers_them() {
        let d = json!({});
        for (tpl, want) in [
            (r#"{{ sprig_abbrev 3 "hello world" }}"#, "hello world"),
            (r#"{{ sprig_abbrevboth 0 3 "hello world" }}"#, "hello world"),
            (r#"{{ sprig_abbrevboth 5 6 "hello world" }}"#, "hello world"),
            (
                r#"{{ sprig_abbrevboth -9223372036854775807 10 "1234 5678 9123" }}"#,
                "1234 56...",
            ),
            (r#"{{ sprig_splitList "" "abc" }}"#, "[a b c]"),
            (
                r#"{{ $a := sprig_splitn "" 2 "abc" }}{{ $a._0 }}/{{ $a._1 }}"#,
                "a/bc",
            ),
            (r#"{{ sprig_regexSplit "x*" "axbc" -1 }}"#, "[a b c]"),
            (r#"{{ sprig_regexSplit "," "" -1 | len }}"#, "1"),
            (r#"{{ sprig_round -1.2 0 }}"#, "-2"),
            (r#"{{ sprig_round 2 0 0 }}"#, "2"),
            (r#"{{ sprig_round 1234.5 -2 }}"#, "1200"),
            (r#"{{ sprig_seq 5 -1 5 }}"#, ""),
            (r#"{{ sprig_seq 5 2 }}"#, "5 4 3 2"),
            (r#"{{ sprig_addf 0.1 0.2 }}"#, "0.3"),
            (r#"{{ sprig_divf 1 3 }}"#, "0.3333333333333333"),
            (r#"{{ sprig_regexMatch "(" "x" }}"#, "false"),
            (r#"{{ sprig_regexQuoteMeta "a-b.c#~" }}"#, "a-b\\.c#~"),
            (r#"{{ sprig_title "it's a_b-c" }}"#, "It'S A_b-C"),
            (r#"{{ sprig_atoi " 12" }}"#, "0"),
            (
                r#"{{ sprig_int "-9223372036854775808" }}"#,
                "-9223372036854775808",
            ),
            (r#"{{ sprig_int "--5" }}"#, "0"),
            (r#"{{ sprig_int "0o17" }}"#, "15"),
            (
                r#"{{ sprig_uniq (sprig_list 1 "1" 1 "a" "a") }}"#,
                "[1 1 a]",
            ),
        ] {
            assert_eq!(r(tpl, d.clone()), want, "{tpl}");
        }
    }

    /// A template is input from whoever submits a job: no function may build values that
    /// exhaust the client's memory or stack.
    #[test]
    fn hostile_sprig_calls_are_errors_not_crashes() {
        for (tpl, want) in [
            (
                r#"{{ sprig_replace "" (sprig_repeat 2000 "y") (sprig_repeat 10000 "x") }}"#,
                "larger than",
            ),
            (
                r#"{{ $x := sprig_list }}{{ range sprig_until 100000 }}{{ $x = sprig_list $x }}{{ end }}"#,
                "nest deeper",
            ),
            (
                r#"{{ $x := sprig_dict }}{{ range sprig_until 100000 }}{{ $x = sprig_dict "k" $x }}{{ end }}"#,
                "nest deeper",
            ),
            (
                r#"{{ sprig_join (sprig_repeat 1000000 "x") (sprig_until 100) }}"#,
                "larger than",
            ),
            (
                r#"{{ sprig_regexReplaceAll "" (sprig_repeat 20000 "a") "${0}bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb" }}"#,
                "larger than",
            ),
        ] {
            let e = err(tpl);
            assert!(e.contains(want), "{tpl:.60}: {e}");
        }
    }

    #[test]
    fn sprig_numbers_lists_and_maps_as_documented() {
        let d = json!({ "m": { "name1": "value1", "name2": "value2" }, "s": "7" });
        for (tpl, want) in [
            (r#"{{ sprig_add 1 2 3 }}"#, "6"),
            (r#"{{ sprig_add1 .s }}"#, "8"),
            (r#"{{ sprig_sub 5 2 }}"#, "3"),
            (r#"{{ sprig_div 7 2 }}"#, "3"),
            (r#"{{ sprig_mod 7 2 }}"#, "1"),
            (r#"{{ sprig_mul 2 3 4 }}"#, "24"),
            (r#"{{ sprig_max 1 2 3 }}"#, "3"),
            (r#"{{ sprig_min 1 2 3 }}"#, "1"),
            (r#"{{ sprig_maxf 1 2.5 3 }}"#, "3"),
            (r#"{{ sprig_addf 1.5 2 2 }}"#, "5.5"),
            (r#"{{ sprig_subf 7.5 2 3 }}"#, "2.5"),
            (r#"{{ sprig_divf 10 4 }}"#, "2.5"),
            (r#"{{ sprig_mulf 1.5 2 2 }}"#, "6"),
            (r#"{{ sprig_ceil 1.23 }}"#, "2"),
            (r#"{{ sprig_floor 1.23 }}"#, "1"),
            (r#"{{ sprig_round 123.555555 3 }}"#, "123.556"),
            (r#"{{ sprig_int "0x1f" }}"#, "31"),
            (r#"{{ sprig_atoi "12" | sprig_add1 }}"#, "13"),
            (r#"{{ sprig_toDecimal "0777" }}"#, "511"),
            (r#"{{ sprig_until 3 }}"#, "[0 1 2]"),
            (r#"{{ sprig_untilStep 3 6 2 }}"#, "[3 5]"),
            (r#"{{ sprig_list 1 2 3 | sprig_first }}"#, "1"),
            (r#"{{ sprig_list 1 2 3 | sprig_rest }}"#, "[2 3]"),
            (r#"{{ sprig_list 1 2 3 | sprig_last }}"#, "3"),
            (r#"{{ sprig_list 1 2 3 | sprig_initial }}"#, "[1 2]"),
            (r#"{{ sprig_append (sprig_list 1 2) 3 }}"#, "[1 2 3]"),
            (r#"{{ sprig_prepend (sprig_list 1 2) 0 }}"#, "[0 1 2]"),
            (
                r#"{{ sprig_concat (sprig_list 1 2) (sprig_list 3) }}"#,
                "[1 2 3]",
            ),
            (r#"{{ sprig_reverse (sprig_list 1 2 3) }}"#, "[3 2 1]"),
            (r#"{{ sprig_uniq (sprig_list 1 1 1 2 2 2) }}"#, "[1 2]"),
            (
                r#"{{ sprig_without (sprig_list 1 2 3 4 5) 1 3 5 }}"#,
                "[2 4]",
            ),
            (r#"{{ sprig_has 4 (sprig_list 1 2 3 4) }}"#, "true"),
            (
                r#"{{ sprig_compact (sprig_list 1 "a" "foo" "") }}"#,
                "[1 a foo]",
            ),
            (r#"{{ sprig_slice (sprig_list 1 2 3 4 5) 1 3 }}"#, "[2 3]"),
            (
                r#"{{ sprig_chunk 3 (sprig_list 1 2 3 4 5 6 7 8) }}"#,
                "[[1 2 3] [4 5 6] [7 8]]",
            ),
            (
                r#"{{ sprig_list "b" "a" "c" | sprig_sortAlpha }}"#,
                "[a b c]",
            ),
            (r#"{{ sprig_join "-" (sprig_list "a" "b") }}"#, "a-b"),
            (r#"{{ sprig_get .m "name1" }}"#, "value1"),
            (r#"{{ sprig_get .m "missing" }}"#, ""),
            (r#"{{ sprig_hasKey .m "name1" }}"#, "true"),
            (r#"{{ sprig_keys .m | sprig_sortAlpha }}"#, "[name1 name2]"),
            (r#"{{ sprig_pick .m "name1" }}"#, "map[name1:value1]"),
            (r#"{{ sprig_omit .m "name1" }}"#, "map[name2:value2]"),
            (r#"{{ sprig_pluck "name1" .m .m }}"#, "[value1 value1]"),
            (
                r#"{{ sprig_values .m | sprig_sortAlpha }}"#,
                "[value1 value2]",
            ),
            (r#"{{ (sprig_dict "a" 1 "b" "x").b }}"#, "x"),
            (
                r#"{{ sprig_merge (sprig_dict "a" 1) (sprig_dict "a" 2 "b" 3) | sprig_toJson }}"#,
                r#"{"a":1,"b":3}"#,
            ),
            (
                r#"{{ sprig_mergeOverwrite (sprig_dict "a" 1) (sprig_dict "a" 2) | sprig_toJson }}"#,
                r#"{"a":2}"#,
            ),
            (
                r#"{{ sprig_dig "a" "b" "none" (sprig_dict "a" (sprig_dict "b" "found")) }}"#,
                "found",
            ),
            (
                r#"{{ sprig_dig "a" "x" "none" (sprig_dict "a" (sprig_dict "b" 1)) }}"#,
                "none",
            ),
            (r#"{{ sprig_default "foo" .nothing }}"#, "foo"),
            (r#"{{ sprig_default "foo" "bar" }}"#, "bar"),
            (r#"{{ sprig_empty "" }}"#, "true"),
            (r#"{{ sprig_coalesce 0 "" "x" }}"#, "x"),
            (r#"{{ sprig_all 1 "a" }}"#, "true"),
            (r#"{{ sprig_any 0 "" }}"#, "false"),
            (r#"{{ true | sprig_ternary "yes" "no" }}"#, "yes"),
            (
                r#"{{ sprig_toJson (sprig_dict "a" "<b>") }}"#,
                r#"{"a":"\u003cb\u003e"}"#,
            ),
            (
                r#"{{ sprig_toRawJson (sprig_dict "a" "<b>") }}"#,
                r#"{"a":"<b>"}"#,
            ),
            (r#"{{ (sprig_fromJson "{\"x\": 5}").x }}"#, "5"),
            (
                r#"{{ sprig_deepEqual (sprig_list 1 2) (sprig_list 1 2) }}"#,
                "true",
            ),
        ] {
            assert_eq!(r(tpl, d.clone()), want, "{tpl}");
        }
        assert!(err(r#"{{ sprig_fail "no way" }}"#).contains("no way"));
        assert!(err(r#"{{ sprig_mustRegexMatch "(" "x" }}"#).contains("regexp"));
        assert!(err(r#"{{ sprig_mustFromJson "{" }}"#).contains("EOF"));
        assert!(err(r#"{{ sprig_div 1 0 }}"#).contains("divide by zero"));
        assert!(err(r#"{{ sprig_repeat 100000000 "xxxxxxxxxx" }}"#).contains("too large"));
        assert!(err(r#"{{ sprig_until 100000000 }}"#).contains("more than"));
    }
}

#[cfg(test)]
mod cli_tests {
    use serde_json::json;

    use super::super::Template;

    #[test]
    fn the_cli_formats_with_sprig_and_refuses_what_it_lacks() {
        let t =
            Template::parse_with_sprig(r#"{{ .ID | sprig_upper }} {{ sprig_default "none" .X }}"#)
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            t.render_with_sprig(&json!({ "ID": "web" }))
                .unwrap_or_default(),
            "WEB none"
        );
        let e = Template::parse_with_sprig("{{ sprig_now }}")
            .map(|_| ())
            .unwrap_err();
        assert!(e.to_string().contains("sprig_now"), "{e}");
    }
}
