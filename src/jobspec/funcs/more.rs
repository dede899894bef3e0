//! The rest of HCL's standard library that job files use: lists (`sort`, `compact`,
//! `zipmap`, `slice`, `index`, `chunklist`, `coalescelist`, `setunion`, `setintersection`,
//! `setsubtract`, `formatlist`), conversions (`tostring`, `tonumber`, `tobool`, `tolist`,
//! `toset`, `tomap`), strings (`trim`, `chomp`, `indent`, `urlencode`, `regex`, `regexall`,
//! `regex_replace`) and numbers (`pow`, `log`, `signum`).

use hcl::eval::FuncArgs;
use hcl::{Map, Value};

use super::{arr, n, num_value, s, text, Out};

pub(super) fn sort(a: FuncArgs) -> Out {
    let mut items = Vec::new();
    for v in arr(&a[0]) {
        match v {
            Value::String(t) => items.push(t.clone()),
            Value::Number(_) | Value::Bool(_) => items.push(text(v)),
            other => return Err(format!("sort: only strings can be sorted, got {other}")),
        }
    }
    items.sort();
    Ok(Value::Array(items.into_iter().map(Value::from).collect()))
}

pub(super) fn compact(a: FuncArgs) -> Out {
    Ok(Value::Array(
        arr(&a[0])
            .iter()
            .filter(|v| !v.is_null() && v.as_str() != Some(""))
            .cloned()
            .collect(),
    ))
}

pub(super) fn zipmap(a: FuncArgs) -> Out {
    let (keys, values) = (arr(&a[0]), arr(&a[1]));
    if keys.len() != values.len() {
        return Err(format!(
            "zipmap: {} keys for {} values",
            keys.len(),
            values.len()
        ));
    }
    Ok(Value::Object(
        keys.iter()
            .zip(values)
            .map(|(k, v)| (text(k), v.clone()))
            .collect(),
    ))
}

pub(super) fn slice(a: FuncArgs) -> Out {
    let list = arr(&a[0]);
    let (start, end) = (n(&a[1]), n(&a[2]));
    if start < 0.0 || end < start || end > list.len() as f64 {
        return Err(format!(
            "slice: [{start}, {end}) is not within a list of {}",
            list.len()
        ));
    }
    Ok(Value::Array(list[start as usize..end as usize].to_vec()))
}

pub(super) fn index(a: FuncArgs) -> Out {
    arr(&a[0])
        .iter()
        .position(|v| *v == a[1])
        .map(|i| Value::from(i as u64))
        .ok_or_else(|| format!("index: {} is not in the list", text(&a[1])))
}

pub(super) fn chunklist(a: FuncArgs) -> Out {
    let size = n(&a[1]);
    let list = arr(&a[0]);
    if size < 0.0 {
        return Err("chunklist: the size must not be negative".into());
    }
    if size == 0.0 {
        return Ok(Value::Array(vec![Value::Array(list.to_vec())]));
    }
    Ok(Value::Array(
        list.chunks(size as usize)
            .map(|c| Value::Array(c.to_vec()))
            .collect(),
    ))
}

pub(super) fn coalescelist(a: FuncArgs) -> Out {
    a.iter()
        .find(|l| !arr(l).is_empty())
        .cloned()
        .ok_or_else(|| "coalescelist: every list is empty".into())
}

fn distinct_of<'v>(items: impl Iterator<Item = &'v Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    for v in items {
        if !out.contains(v) {
            out.push(v.clone());
        }
    }
    out
}

pub(super) fn setunion(a: FuncArgs) -> Out {
    Ok(Value::Array(distinct_of(
        a.iter().flat_map(|l| arr(l).iter()),
    )))
}

pub(super) fn setintersection(a: FuncArgs) -> Out {
    let first = a.iter().next().map(arr).unwrap_or_default();
    Ok(Value::Array(distinct_of(
        first
            .iter()
            .filter(|v| a.iter().skip(1).all(|l| arr(l).contains(v))),
    )))
}

pub(super) fn setsubtract(a: FuncArgs) -> Out {
    let minus = arr(&a[1]);
    Ok(Value::Array(distinct_of(
        arr(&a[0]).iter().filter(|v| !minus.contains(v)),
    )))
}

/// `format` applied element-wise: list arguments go along (all of one length), others repeat.
pub(super) fn formatlist(a: FuncArgs) -> Out {
    let args: Vec<&Value> = a.variadic_args().collect();
    let mut len: Option<usize> = None;
    for v in &args {
        if let Value::Array(items) = v {
            match len {
                Some(l) if l != items.len() => {
                    return Err("formatlist: the list arguments differ in length".into())
                }
                _ => len = Some(items.len()),
            }
        }
    }
    let Some(len) = len else {
        return Err("formatlist: at least one argument must be a list".into());
    };
    let mut out = Vec::with_capacity(len);
    for i in 0..len {
        let row: Vec<Value> = args
            .iter()
            .map(|v| match v {
                Value::Array(items) => items[i].clone(),
                other => (*other).clone(),
            })
            .collect();
        out.push(super::format_values(s(&a[0]), &row)?);
    }
    Ok(Value::Array(out))
}

pub(super) fn tostring(a: FuncArgs) -> Out {
    match &a[0] {
        Value::String(_) | Value::Null => Ok(a[0].clone()),
        Value::Number(_) | Value::Bool(_) => Ok(text(&a[0]).into()),
        other => Err(format!("tostring: {other} cannot be a string")),
    }
}

pub(super) fn tonumber(a: FuncArgs) -> Out {
    match &a[0] {
        Value::Number(_) | Value::Null => Ok(a[0].clone()),
        Value::String(t) => t
            .trim()
            .parse::<f64>()
            .map_err(|_| format!("tonumber: {t:?} is not a number"))
            .and_then(num_value),
        other => Err(format!("tonumber: {other} cannot be a number")),
    }
}

pub(super) fn tobool(a: FuncArgs) -> Out {
    match &a[0] {
        Value::Bool(_) | Value::Null => Ok(a[0].clone()),
        Value::String(t) if t == "true" || t == "false" => Ok((t == "true").into()),
        other => Err(format!("tobool: {other} cannot be a bool")),
    }
}

pub(super) fn tolist(a: FuncArgs) -> Out {
    match &a[0] {
        Value::Array(_) => Ok(a[0].clone()),
        other => Err(format!("tolist: {other} is not a list")),
    }
}

pub(super) fn toset(a: FuncArgs) -> Out {
    match &a[0] {
        Value::Array(items) => Ok(Value::Array(distinct_of(items.iter()))),
        other => Err(format!("toset: {other} is not a list")),
    }
}

pub(super) fn tomap(a: FuncArgs) -> Out {
    match &a[0] {
        Value::Object(_) => Ok(a[0].clone()),
        other => Err(format!("tomap: {other} is not a map")),
    }
}

pub(super) fn trim(a: FuncArgs) -> Out {
    let cut: Vec<char> = s(&a[1]).chars().collect();
    Ok(s(&a[0]).trim_matches(|c| cut.contains(&c)).into())
}

pub(super) fn chomp(a: FuncArgs) -> Out {
    Ok(s(&a[0]).trim_end_matches(['\n', '\r']).into())
}

/// Every line but the first indented by `n` spaces.
pub(super) fn indent(a: FuncArgs) -> Out {
    let pad = " ".repeat(n(&a[0]).max(0.0) as usize);
    Ok(s(&a[1]).replace('\n', &format!("\n{pad}")).into())
}

pub(super) fn urlencode(a: FuncArgs) -> Out {
    let mut out = String::new();
    for b in s(&a[0]).bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    Ok(out.into())
}

fn compile(fname: &str, pattern: &str) -> Result<regex::Regex, String> {
    regex::Regex::new(pattern).map_err(|e| format!("{fname}: {e}"))
}

/// A match as HCL's `regex` gives it: the text without groups, a list of unnamed groups, a
/// map of named ones.
fn captured(re: &regex::Regex, caps: &regex::Captures) -> Value {
    if re.captures_len() == 1 {
        return caps.get(0).map_or("", |m| m.as_str()).into();
    }
    let group = |m: Option<regex::Match>| m.map_or(Value::Null, |m| m.as_str().into());
    if re.capture_names().flatten().next().is_some() {
        let mut out = Map::new();
        for name in re.capture_names().flatten() {
            out.insert(name.to_string(), group(caps.name(name)));
        }
        Value::Object(out)
    } else {
        Value::Array(caps.iter().skip(1).map(group).collect())
    }
}

pub(super) fn regex(a: FuncArgs) -> Out {
    let re = compile("regex", s(&a[0]))?;
    let caps = re
        .captures(s(&a[1]))
        .ok_or_else(|| format!("regex: {:?} does not match {:?}", s(&a[0]), s(&a[1])))?;
    Ok(captured(&re, &caps))
}

pub(super) fn regexall(a: FuncArgs) -> Out {
    let re = compile("regexall", s(&a[0]))?;
    Ok(Value::Array(
        re.captures_iter(s(&a[1]))
            .map(|c| captured(&re, &c))
            .collect(),
    ))
}

pub(super) fn regex_replace(a: FuncArgs) -> Out {
    let re = compile("regex_replace", s(&a[1]))?;
    Ok(re.replace_all(s(&a[0]), s(&a[2])).into_owned().into())
}

pub(super) fn pow(a: FuncArgs) -> Out {
    num_value(n(&a[0]).powf(n(&a[1])))
}

pub(super) fn log(a: FuncArgs) -> Out {
    num_value(n(&a[0]).log(n(&a[1])))
}

pub(super) fn signum(a: FuncArgs) -> Out {
    let x = n(&a[0]);
    num_value(if x > 0.0 {
        1.0
    } else if x < 0.0 {
        -1.0
    } else {
        0.0
    })
}

/// Keys of a map for a `for` expression, in the order cty iterates them.
pub(super) fn sorted_keys_object(a: FuncArgs) -> Out {
    // Every element of a `for` collection is an iteration of the evaluation's budget.
    let elements = match &a[0] {
        Value::Object(m) => m.len(),
        Value::Array(items) => items.len(),
        _ => 0,
    };
    crate::jobspec::budget::charge(1 + elements as u64, 0)?;
    match &a[0] {
        Value::Object(m) => {
            let mut entries: Vec<_> = m.iter().collect();
            entries.sort_by(|x, y| x.0.cmp(y.0));
            Ok(Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ))
        }
        other => Ok(other.clone()),
    }
}
