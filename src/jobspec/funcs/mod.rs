//! The functions a job file may call, with the names and meanings of Nomad's jobspec2 (HCL's
//! standard library): strings (`format`, `join`, `split`, `lower`, `upper`, `title`,
//! `replace`, `trimspace`, `trimprefix`, `trimsuffix`, `substr`, `strrev`), collections
//! (`concat`, `merge`, `length`, `keys`, `values`, `lookup`, `element`, `contains`,
//! `distinct`, `flatten`, `reverse`, `range`, `coalesce`), numbers (`min`, `max`, `abs`,
//! `ceil`, `floor`, `parseint`) and encodings (`jsonencode`, `jsondecode`, `base64encode`,
//! `base64decode`); hashes and identifiers (`hash`), CIDR arithmetic (`cidr`), local
//! files and paths (`file`: the CLI only) and the rest of the standard library (`more`). A call of
//! any other function is an error that names it.

mod cidr;
mod file;
mod hash;
mod more;

use hcl::eval::{Context, FuncArgs, FuncDef, ParamType};
use hcl::{Map, Value};

type Out = Result<Value, String>;

/// The name of the function the parser wraps around a `for` expression's collection so that
/// a map is iterated in key order, as cty iterates it (HCL's own evaluation keeps the order
/// the map was written in).
pub const FOR_ORDER: &str = "teamster_for_order";

/// The name of the function the parser wraps around every reference to a parse-time value
/// and every function call: it returns its argument and charges it to the evaluation's
/// budget ([`super::budget`]).
pub const CHARGE: &str = "teamster_charge";

/// What an evaluation error says, without the parser's own wrappers ([`CHARGE`],
/// [`FOR_ORDER`]) that the expression it quotes would show: then just what went wrong (the
/// caller names the file, line and attribute).
pub fn describe(err: &hcl::eval::Error) -> String {
    let full = err.to_string();
    if full.contains(CHARGE) || full.contains(FOR_ORDER) {
        err.kind().to_string()
    } else {
        full
    }
}

/// A context that knows every function of this module (and no variables yet). `files`: whether
/// `file`, `fileexists` and `templatefile` may read the local filesystem.
pub fn context(files: bool) -> Context<'static> {
    use ParamType::{Any, Array, Number, Object, String as Str};
    let mut ctx = Context::new();
    let mut def = |name: &str,
                   params: Vec<ParamType>,
                   variadic: Option<ParamType>,
                   f: fn(FuncArgs) -> Out| {
        let mut b = FuncDef::builder().params(params);
        if let Some(v) = variadic {
            b = b.variadic_param(v);
        }
        ctx.declare_func(name, b.build(f));
    };
    def("format", vec![Str], Some(Any), format);
    def("join", vec![Str], Some(Array(Box::new(Any))), join);
    def("split", vec![Str, Str], None, split);
    def("lower", vec![Str], None, |a| {
        Ok(s(&a[0]).to_lowercase().into())
    });
    def("upper", vec![Str], None, |a| {
        Ok(s(&a[0]).to_uppercase().into())
    });
    def("title", vec![Str], None, title);
    def("replace", vec![Str, Str, Str], None, |a| {
        Ok(s(&a[0]).replace(s(&a[1]), s(&a[2])).into())
    });
    def("trimspace", vec![Str], None, |a| Ok(s(&a[0]).trim().into()));
    def("trimprefix", vec![Str, Str], None, |a| {
        Ok(s(&a[0]).strip_prefix(s(&a[1])).unwrap_or(s(&a[0])).into())
    });
    def("trimsuffix", vec![Str, Str], None, |a| {
        Ok(s(&a[0]).strip_suffix(s(&a[1])).unwrap_or(s(&a[0])).into())
    });
    def("substr", vec![Str, Number, Number], None, substr);
    def("strrev", vec![Str], None, |a| {
        Ok(s(&a[0]).chars().rev().collect::<String>().into())
    });
    def("concat", vec![], Some(Array(Box::new(Any))), concat);
    def("merge", vec![], Some(Object(Box::new(Any))), merge);
    def("length", vec![Any], None, length);
    // cty's maps and objects are ordered by key: keys(), values() and jsonencode() give
    // them in that order whatever order they were written in.
    def("keys", vec![Object(Box::new(Any))], None, |a| {
        Ok(Value::Array(
            sorted(obj(&a[0]))
                .map(|(k, _)| Value::from(k.as_str()))
                .collect(),
        ))
    });
    def("values", vec![Object(Box::new(Any))], None, |a| {
        Ok(Value::Array(
            sorted(obj(&a[0])).map(|(_, v)| v.clone()).collect(),
        ))
    });
    def(
        "lookup",
        vec![Object(Box::new(Any)), Str],
        Some(Any),
        lookup,
    );
    def("element", vec![Array(Box::new(Any)), Number], None, element);
    def("contains", vec![Array(Box::new(Any)), Any], None, |a| {
        Ok(arr(&a[0]).contains(&a[1]).into())
    });
    def("distinct", vec![Array(Box::new(Any))], None, distinct);
    def("flatten", vec![Array(Box::new(Any))], None, |a| {
        Ok(Value::Array(flatten(arr(&a[0]))))
    });
    def("reverse", vec![Array(Box::new(Any))], None, |a| {
        Ok(Value::Array(arr(&a[0]).iter().rev().cloned().collect()))
    });
    def("range", vec![Number], Some(Number), range);
    def("coalesce", vec![], Some(Any), coalesce);
    def("min", vec![], Some(Number), |a| fold_numbers(a, f64::min));
    def("max", vec![], Some(Number), |a| fold_numbers(a, f64::max));
    def("abs", vec![Number], None, |a| num_value(n(&a[0]).abs()));
    def("ceil", vec![Number], None, |a| num_value(n(&a[0]).ceil()));
    def("floor", vec![Number], None, |a| num_value(n(&a[0]).floor()));
    def("parseint", vec![Str, Number], None, parseint);
    def("jsonencode", vec![Any], None, |a| {
        serde_json::to_string(&keys_sorted(&a[0]))
            .map(Value::from)
            .map_err(|e| e.to_string())
    });
    def("jsondecode", vec![Str], None, |a| {
        serde_json::from_str::<serde_json::Value>(s(&a[0]))
            .map_err(|e| format!("jsondecode: {e}"))
            .and_then(|v| hcl::to_value(v).map_err(|e| e.to_string()))
    });
    def("base64encode", vec![Str], None, |a| {
        Ok(base64_encode(s(&a[0]).as_bytes()).into())
    });
    def("base64decode", vec![Str], None, |a| {
        let bytes = base64_decode(s(&a[0])).ok_or("base64decode: not valid base64")?;
        String::from_utf8(bytes)
            .map(Value::from)
            .map_err(|_| "base64decode: the result is not UTF-8".to_string())
    });
    let list = || Array(Box::new(Any));
    def("md5", vec![Str], None, hash::md5);
    def("sha1", vec![Str], None, hash::sha1);
    def("sha256", vec![Str], None, hash::sha256);
    def("sha512", vec![Str], None, hash::sha512);
    def("base64sha256", vec![Str], None, hash::base64sha256);
    def("base64sha512", vec![Str], None, hash::base64sha512);
    def("uuidv4", vec![], None, hash::uuidv4);
    def("uuidv5", vec![Str, Str], None, hash::uuidv5);
    def("cidrhost", vec![Str, Number], None, cidr::cidrhost);
    def("cidrnetmask", vec![Str], None, cidr::cidrnetmask);
    def(
        "cidrsubnet",
        vec![Str, Number, Number],
        None,
        cidr::cidrsubnet,
    );
    def("cidrsubnets", vec![Str], Some(Number), cidr::cidrsubnets);
    if files {
        def("file", vec![Str], None, file::file);
        def("filebase64", vec![Str], None, file::filebase64);
        def("fileexists", vec![Str], None, file::fileexists);
        def("abspath", vec![Str], None, file::abspath);
        def("basename", vec![Str], None, file::basename);
        def("dirname", vec![Str], None, file::dirname);
        def("pathexpand", vec![Str], None, file::pathexpand);
        def(
            "templatefile",
            vec![Str, Object(Box::new(Any))],
            None,
            file::templatefile,
        );
    } else {
        for name in [
            "file",
            "filebase64",
            "fileexists",
            "abspath",
            "basename",
            "dirname",
            "pathexpand",
        ] {
            def(name, vec![Any], None, file::disabled);
        }
        def("templatefile", vec![Any, Any], None, file::disabled);
    }
    def("sort", vec![list()], None, more::sort);
    def("compact", vec![list()], None, more::compact);
    def("zipmap", vec![list(), list()], None, more::zipmap);
    def("slice", vec![list(), Number, Number], None, more::slice);
    def("index", vec![list(), Any], None, more::index);
    def("chunklist", vec![list(), Number], None, more::chunklist);
    def("coalescelist", vec![], Some(list()), more::coalescelist);
    def("setunion", vec![], Some(list()), more::setunion);
    def(
        "setintersection",
        vec![list()],
        Some(list()),
        more::setintersection,
    );
    def("setsubtract", vec![list(), list()], None, more::setsubtract);
    def("formatlist", vec![Str], Some(Any), more::formatlist);
    def("tostring", vec![Any], None, more::tostring);
    def("tonumber", vec![Any], None, more::tonumber);
    def("tobool", vec![Any], None, more::tobool);
    def("tolist", vec![Any], None, more::tolist);
    def("toset", vec![Any], None, more::toset);
    def("tomap", vec![Any], None, more::tomap);
    def("trim", vec![Str, Str], None, more::trim);
    def("chomp", vec![Str], None, more::chomp);
    def("indent", vec![Number, Str], None, more::indent);
    def("urlencode", vec![Str], None, more::urlencode);
    def("regex", vec![Str, Str], None, more::regex);
    def("regexall", vec![Str, Str], None, more::regexall);
    def(
        "regex_replace",
        vec![Str, Str, Str],
        None,
        more::regex_replace,
    );
    def("pow", vec![Number, Number], None, more::pow);
    def("log", vec![Number, Number], None, more::log);
    def("signum", vec![Number], None, more::signum);
    def(FOR_ORDER, vec![Any], None, more::sorted_keys_object);
    def(CHARGE, vec![Any], None, |a| {
        super::budget::charge_value(&a[0])?;
        Ok(a[0].clone())
    });
    ctx
}

// The parameter types are checked before a function runs, so these accessors never see the
// wrong kind of value.
fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn n(v: &Value) -> f64 {
    v.as_f64().unwrap_or_default()
}

fn arr(v: &Value) -> &[Value] {
    v.as_array().map(Vec::as_slice).unwrap_or_default()
}

fn obj(v: &Value) -> &Map<String, Value> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    v.as_object().unwrap_or_else(|| EMPTY.get_or_init(Map::new))
}

/// An object's entries in key order.
fn sorted(m: &Map<String, Value>) -> impl Iterator<Item = (&String, &Value)> {
    let mut entries: Vec<_> = m.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries.into_iter()
}

/// `v` with every object's keys in order, at every depth.
fn keys_sorted(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            sorted(m)
                .map(|(k, v)| (k.clone(), keys_sorted(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(keys_sorted).collect()),
        other => other.clone(),
    }
}

fn num_value(f: f64) -> Out {
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        Ok(Value::from(f as i64))
    } else {
        hcl::Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| format!("{f} is not a finite number"))
    }
}

/// The text of a value as `format`'s `%s`/`%v` and `join` show it.
fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        other => serde_json::to_string(&keys_sorted(other)).unwrap_or_default(),
    }
}

/// One `%…` directive of `format`: flags, width, precision.
#[derive(Default)]
struct Directive {
    minus: bool,
    plus: bool,
    space: bool,
    zero: bool,
    sharp: bool,
    width: Option<usize>,
    precision: Option<usize>,
}

impl Directive {
    /// `body` padded to the width: spaces on the left (or the right with `-`), or zeros
    /// after the sign with `0` (numbers only).
    fn pad(&self, body: String, numeric: bool) -> String {
        let len = body.chars().count();
        let Some(width) = self.width.filter(|w| *w > len) else {
            return body;
        };
        let fill = width - len;
        if self.minus {
            body + &" ".repeat(fill)
        } else if self.zero && numeric {
            let sign_len = usize::from(body.starts_with(['+', '-', ' ']));
            let (sign, digits) = body.split_at(sign_len);
            format!("{sign}{}{digits}", "0".repeat(fill))
        } else {
            " ".repeat(fill) + &body
        }
    }

    /// The sign of a non-negative number: `+`, ` ` or nothing, per the flags.
    fn sign(&self, negative: bool) -> &'static str {
        if negative {
            "-"
        } else if self.plus {
            "+"
        } else if self.space {
            " "
        } else {
            ""
        }
    }
}

/// `d.ddde±XX` as Go writes it: at least two exponent digits.
fn go_exp(f: f64, precision: usize, upper: bool) -> String {
    let s = format!("{:.*e}", precision, f.abs());
    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let e = if upper { 'E' } else { 'e' };
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}{e}{sign}{:02}", exp.abs())
}

/// `%g`: the shorter of `%e` and `%f` as Go chooses it (shortest digits without precision).
fn go_general(f: f64, precision: Option<usize>, upper: bool) -> String {
    let f = f.abs();
    if f == 0.0 {
        return "0".into();
    }
    let strip = |s: String| -> String {
        if !s.contains('.') {
            return s;
        }
        let (m, rest) = match s.find(['e', 'E']) {
            Some(i) => (s[..i].to_string(), s[i..].to_string()),
            None => (s.clone(), String::new()),
        };
        let m = m.trim_end_matches('0').trim_end_matches('.');
        format!("{m}{rest}")
    };
    match precision {
        Some(p) => {
            let p = p.max(1);
            let exp = format!("{:.*e}", p - 1, f)
                .split_once('e')
                .and_then(|(_, e)| e.parse::<i32>().ok())
                .unwrap_or(0);
            if exp < -4 || exp >= p as i32 {
                strip(go_exp(f, p - 1, upper))
            } else {
                strip(format!("{:.*}", (p as i32 - 1 - exp).max(0) as usize, f))
            }
        }
        None => {
            let shortest = format!("{f:e}");
            let (digits, exp) = shortest.split_once('e').unwrap_or((&shortest, "0"));
            let exp: i32 = exp.parse().unwrap_or(0);
            let ndigits = digits.chars().filter(char::is_ascii_digit).count() as i32;
            let mut eprec = 6;
            if eprec > ndigits && ndigits > exp {
                eprec = ndigits;
            }
            if exp < -4 || exp >= eprec {
                go_exp(f, (ndigits - 1).max(0) as usize, upper)
            } else {
                format!("{f}")
            }
        }
    }
}

/// `format(spec, args...)`, as cty's (Go's fmt verbs): `%v` `%#v` `%t` `%b` `%d` `%o` `%x`
/// `%X` `%e` `%E` `%f` `%F` `%g` `%G` `%s` `%q` and `%%`, with the flags `-` `+` ` ` `0`
/// `#`, a width, a precision and an explicit argument index (`%[2]s`).
fn format(args: FuncArgs) -> Out {
    let rest: Vec<Value> = args.variadic_args().cloned().collect();
    format_values(s(&args[0]), &rest)
}

/// `format(spec, rest...)`.
fn format_values(spec: &str, rest: &[Value]) -> Out {
    let mut next_arg = 0;
    let mut used = vec![false; rest.len()];
    let mut out = String::new();
    let mut chars = spec.chars().peekable();
    let number = |c: &mut std::iter::Peekable<std::str::Chars>| -> Option<usize> {
        let mut digits = String::new();
        while let Some(d) = c.peek().filter(|d| d.is_ascii_digit()) {
            digits.push(*d);
            c.next();
        }
        digits.parse().ok()
    };
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut d = Directive::default();
        while let Some(&f) = chars.peek() {
            match f {
                '-' => d.minus = true,
                '+' => d.plus = true,
                ' ' => d.space = true,
                '0' => d.zero = true,
                '#' => d.sharp = true,
                _ => break,
            }
            chars.next();
        }
        if chars.peek() == Some(&'[') {
            chars.next();
            let i = number(&mut chars).filter(|i| *i >= 1);
            if chars.next() != Some(']') || i.is_none() {
                return Err(format!("format: invalid argument index in {spec:?}"));
            }
            next_arg = i.unwrap_or(1) - 1;
        }
        d.width = number(&mut chars);
        if chars.peek() == Some(&'.') {
            chars.next();
            d.precision = Some(number(&mut chars).unwrap_or(0));
        }
        let verb = chars.next().ok_or("format: the spec ends with a lone %")?;
        if verb == '%' {
            out.push('%');
            continue;
        }
        let arg = rest
            .get(next_arg)
            .ok_or_else(|| format!("format: not enough arguments for {spec:?}"))?;
        used[next_arg] = true;
        next_arg += 1;
        out.push_str(&format_one(&d, verb, arg)?);
    }
    if used.iter().any(|u| !u) {
        return Err(format!("format: too many arguments for {spec:?}"));
    }
    Ok(out.into())
}

/// One argument formatted by one directive.
fn format_one(d: &Directive, verb: char, arg: &Value) -> Result<String, String> {
    let need_number = || -> Result<f64, String> {
        match arg {
            Value::Number(n) => n.as_f64().ok_or_else(|| "format: bad number".to_string()),
            Value::String(s) => s
                .trim()
                .parse::<f64>()
                .map_err(|_| format!("format: %{verb} needs a number, got {s:?}")),
            other => Err(format!(
                "format: %{verb} needs a number, got {}",
                text(other)
            )),
        }
    };
    let truncate = |t: String| match d.precision {
        Some(p) => t.chars().take(p).collect(),
        None => t,
    };
    Ok(match verb {
        'v' if d.sharp => d.pad(serde_json::to_string(arg).unwrap_or_default(), false),
        // Numbers as cty converts them to strings: decimal digits, never an exponent.
        'v' => d.pad(text(arg), matches!(arg, Value::Number(_))),
        's' => match arg {
            Value::String(_) | Value::Number(_) | Value::Bool(_) => {
                d.pad(truncate(text(arg)), false)
            }
            other => return Err(format!("format: %s needs a string, got {}", text(other))),
        },
        'q' => match arg {
            Value::String(_) | Value::Number(_) | Value::Bool(_) => d.pad(
                serde_json::to_string(&truncate(text(arg))).unwrap_or_default(),
                false,
            ),
            other => return Err(format!("format: %q needs a string, got {}", text(other))),
        },
        't' => match arg {
            Value::Bool(b) => d.pad(b.to_string(), false),
            Value::String(s) if s == "true" || s == "false" => d.pad(s.clone(), false),
            other => return Err(format!("format: %t needs a bool, got {}", text(other))),
        },
        'b' | 'd' | 'o' | 'x' | 'X' => {
            let f = need_number()?;
            if f.fract() != 0.0 || !f.is_finite() {
                return Err(format!(
                    "format: %{verb} needs a whole number, got {}",
                    text(arg)
                ));
            }
            let magnitude = f.abs() as u128;
            let mut digits = match verb {
                'b' => format!("{magnitude:b}"),
                'o' => format!("{magnitude:o}"),
                'x' => format!("{magnitude:x}"),
                'X' => format!("{magnitude:X}"),
                _ => magnitude.to_string(),
            };
            if let Some(p) = d.precision {
                if digits.len() < p {
                    digits = "0".repeat(p - digits.len()) + &digits;
                }
            }
            let prefix = match (d.sharp, verb) {
                (true, 'x') => "0x",
                (true, 'X') => "0X",
                (true, 'o') if !digits.starts_with('0') => "0",
                _ => "",
            };
            let body = format!("{}{prefix}{digits}", d.sign(f < 0.0));
            // Go ignores the 0 flag when a precision is given for integers.
            if d.precision.is_some() {
                Directive { zero: false, ..*d }.pad(body, true)
            } else {
                d.pad(body, true)
            }
        }
        'e' | 'E' | 'f' | 'F' | 'g' | 'G' => {
            let f = need_number()?;
            let body = match verb {
                'e' | 'E' => go_exp(f, d.precision.unwrap_or(6), verb == 'E'),
                'f' | 'F' => format!("{:.*}", d.precision.unwrap_or(6), f.abs()),
                _ => go_general(f, d.precision, verb == 'G'),
            };
            d.pad(format!("{}{body}", d.sign(f < 0.0)), true)
        }
        other => return Err(format!("format: unsupported verb %{other}")),
    })
}

fn join(args: FuncArgs) -> Out {
    let sep = s(&args[0]);
    let parts: Vec<String> = args
        .variadic_args()
        .flat_map(|list| arr(list).iter().map(text))
        .collect();
    Ok(parts.join(sep).into())
}

fn split(args: FuncArgs) -> Out {
    let (sep, text) = (s(&args[0]), s(&args[1]));
    if text.is_empty() {
        return Ok(Value::Array(vec![Value::from("")]));
    }
    Ok(Value::Array(text.split(sep).map(Value::from).collect()))
}

fn title(args: FuncArgs) -> Out {
    let mut out = String::new();
    let mut start = true;
    for c in s(&args[0]).chars() {
        if start && c.is_alphabetic() {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        start = !c.is_alphanumeric();
    }
    Ok(out.into())
}

fn substr(args: FuncArgs) -> Out {
    let chars: Vec<char> = s(&args[0]).chars().collect();
    let offset = n(&args[1]) as i64;
    let length = n(&args[2]) as i64;
    let len = chars.len() as i64;
    let start = if offset < 0 { len + offset } else { offset };
    if start < 0 || start > len {
        return Err(format!("substr: offset {offset} is outside the string"));
    }
    let end = if length < 0 {
        len
    } else {
        (start + length).min(len)
    };
    Ok(chars[start as usize..end as usize]
        .iter()
        .collect::<String>()
        .into())
}

fn concat(args: FuncArgs) -> Out {
    Ok(Value::Array(
        args.iter().flat_map(|l| arr(l).iter().cloned()).collect(),
    ))
}

fn merge(args: FuncArgs) -> Out {
    let mut out = Map::new();
    for m in args.iter() {
        for (k, v) in obj(m) {
            out.insert(k.clone(), v.clone());
        }
    }
    Ok(Value::Object(out))
}

fn length(args: FuncArgs) -> Out {
    match &args[0] {
        Value::String(s) => Ok(Value::from(s.chars().count() as u64)),
        Value::Array(a) => Ok(Value::from(a.len() as u64)),
        Value::Object(o) => Ok(Value::from(o.len() as u64)),
        other => Err(format!(
            "length: a string, list or map is needed, got {}",
            text(other)
        )),
    }
}

fn lookup(args: FuncArgs) -> Out {
    let key = s(&args[1]);
    if let Some(v) = obj(&args[0]).get(key) {
        return Ok(v.clone());
    }
    args.variadic_args()
        .next()
        .cloned()
        .ok_or_else(|| format!("lookup: no key {key:?} and no default"))
}

fn element(args: FuncArgs) -> Out {
    let list = arr(&args[0]);
    if list.is_empty() {
        return Err("element: the list is empty".into());
    }
    let i = n(&args[1]) as i64;
    if i < 0 {
        return Err("element: the index must not be negative".into());
    }
    Ok(list[i as usize % list.len()].clone())
}

fn distinct(args: FuncArgs) -> Out {
    let mut out: Vec<Value> = Vec::new();
    for v in arr(&args[0]) {
        if !out.contains(v) {
            out.push(v.clone());
        }
    }
    Ok(Value::Array(out))
}

fn flatten(list: &[Value]) -> Vec<Value> {
    list.iter()
        .flat_map(|v| match v {
            Value::Array(inner) => flatten(inner),
            other => vec![other.clone()],
        })
        .collect()
}

fn range(args: FuncArgs) -> Out {
    let nums: Vec<f64> = args.iter().map(n).collect();
    let (start, end, step) = match nums.as_slice() {
        [end] => (0.0, *end, 1.0),
        [start, end] => (*start, *end, if end >= start { 1.0 } else { -1.0 }),
        [start, end, step] => (*start, *end, *step),
        _ => return Err("range: takes one to three numbers".into()),
    };
    if step == 0.0 {
        return Err("range: the step must not be zero".into());
    }
    let mut out = Vec::new();
    let mut x = start;
    while (step > 0.0 && x < end) || (step < 0.0 && x > end) {
        out.push(num_value(x)?);
        if out.len() > 1024 {
            return Err("range: more than 1024 elements".into());
        }
        x += step;
    }
    Ok(Value::Array(out))
}

fn coalesce(args: FuncArgs) -> Out {
    args.iter()
        .find(|v| !v.is_null() && v.as_str() != Some(""))
        .cloned()
        .ok_or_else(|| "coalesce: no non-null, non-empty argument".into())
}

fn fold_numbers(args: FuncArgs, f: fn(f64, f64) -> f64) -> Out {
    let mut it = args.iter().map(n);
    let first = it.next().ok_or("needs at least one number")?;
    num_value(it.fold(first, f))
}

fn parseint(args: FuncArgs) -> Out {
    let base = n(&args[1]) as u32;
    if !(2..=36).contains(&base) {
        return Err(format!("parseint: base {base} is not between 2 and 36"));
    }
    i64::from_str_radix(s(&args[0]), base)
        .map(Value::from)
        .map_err(|e| format!("parseint: {e}"))
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}
