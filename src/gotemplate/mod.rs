//! A Go `text/template` engine: one engine for the CLI's `-t` (Nomad's, rendering the JSON a
//! command's `--json` would print) and for tasks' `template` blocks (consul-template's
//! functions, in [`funcs`], and the client's dependency functions, supplied through
//! [`Funcs`]).
//!
//! - [`Template::parse`] / [`Template::parse_with`] turn the text into a tree of [`Node`]s; a
//!   template that does not parse — or calls a function the [`Syntax`] does not know — is a
//!   [`TemplateError::Parse`] naming the place and the problem, as Go's parser reports.
//! - [`Template::render`] / [`Template::render_with`] walk the tree over a
//!   [`serde_json::Value`].
//!
//! ```text
//! "{{range .}}{{.ID}}{{end}}" --lex/parse--> [Range(.) [Action(.ID)]] --render(json)--> text
//! ```
//!
//! Supported: text, `{{/* comments */}}`, `{{-`/`-}}` trimming, other delimiters, `{{.}}`,
//! `{{.A.B}}`, `$`, `$x := …`, `$x = …` and `{{range $i, $e := …}}`, `if`/`else if`/`else`,
//! `range` (arrays, objects in key order as Go's maps, integers) with `else`, `with` and
//! `else with`, pipelines `a | f`, parentheses, string, number, `true`/`false`/`nil`
//! literals, and Go's functions `and or not len index slice print printf println eq ne lt le
//! gt ge html js urlquery`. Values print as Go's `%v` of the decoded JSON: a missing field as
//! `<no value>` (or an error, with `missingkey=error`), `null` as `<nil>`, arrays as `[a b]`,
//! objects as `map[k:v]`.
//!
//! Go values with methods are JSON objects with hidden keys (starting with [`HIDDEN`]): a
//! field `.Name` is looked up as the hidden `Name` first (a method wins over a map key, as
//! in Go), and an object with the hidden key [`STRINGER`] prints as that string (Go's
//! `String()`). Hidden keys are never ranged over, counted or printed.

pub mod funcs;
pub mod sprig;

use std::fmt::Write as _;

use serde_json::Value;

/// Why a template cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TemplateError {
    /// The text is not a template.
    #[error("template: character {at}: {reason}")]
    Parse {
        /// The character offset of the action at fault.
        at: usize,
        /// What is wrong there.
        reason: String,
    },
    /// The template parsed but cannot be applied to this value.
    #[error("template: executing {action:?}: {reason}")]
    Exec {
        /// The action being executed, as written.
        action: String,
        /// What went wrong.
        reason: String,
    },
}

/// A parsed template.
#[derive(Debug, Clone)]
pub struct Template {
    nodes: Vec<Node>,
}

/// One part of a template's tree.
#[derive(Debug, Clone)]
enum Node {
    Text(String),
    Action(Pipeline),
    /// `if`, `range` and `with`: a pipeline, the body, and the `else` body.
    Block {
        kind: BlockKind,
        pipe: Pipeline,
        body: Vec<Node>,
        other: Vec<Node>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BlockKind {
    If,
    Range,
    With,
}

/// Commands joined by `|`, with the variables they declare (`$i, $e :=`).
#[derive(Debug, Clone)]
struct Pipeline {
    /// The action's text, for error messages.
    source: String,
    decl: Vec<String>,
    /// `$x = …`: `decl` names an existing variable to set, not a new one.
    assign: bool,
    cmds: Vec<Vec<Operand>>,
}

#[derive(Debug, Clone)]
enum Operand {
    /// `.A.B` (empty: `.`).
    Field(Vec<String>),
    /// `$x.A.B` (`$` is the root).
    Var(String, Vec<String>),
    Lit(Value),
    Func(String),
    Paren(Box<Pipeline>),
    /// `(pipeline).A.B`.
    Chain(Box<Pipeline>, Vec<String>),
}

/// A value during rendering: `None` is Go's "no value" (a missing field).
pub type Val = Option<Value>;

/// The first character of a hidden key: a Go method or `String()` of a value.
pub const HIDDEN: char = '\u{1}';
/// The hidden key whose string an object prints as (Go's `String()` method).
pub const STRINGER: &str = "\u{1}";

/// The hidden key of method `name`.
pub fn method_key(name: &str) -> String {
    format!("{HIDDEN}{name}")
}

/// Whether `key` is a hidden key.
fn is_hidden(key: &str) -> bool {
    key.starts_with(HIDDEN)
}

/// The keys and values of an object a template sees (hidden ones left out), in key order.
fn visible(o: &serde_json::Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut kv: Vec<(&String, &Value)> = o.iter().filter(|(k, _)| !is_hidden(k)).collect();
    kv.sort_by(|a, b| a.0.cmp(b.0));
    kv
}

/// `v` without its hidden keys, at every depth (what `toJSON` and friends encode).
pub fn without_hidden(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .filter(|(k, _)| !is_hidden(k))
                .map(|(k, v)| (k.clone(), without_hidden(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_hidden).collect()),
        other => other.clone(),
    }
}

/// Functions beyond Go's builtins, called while rendering.
pub trait Funcs {
    /// The result of `name` on `args` (a piped value comes last), or `None` when `name` is
    /// not one of these functions.
    fn call(&self, name: &str, args: &[Val]) -> Option<Result<Val, String>>;
}

/// No functions beyond Go's builtins.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoFuncs;

impl Funcs for NoFuncs {
    fn call(&self, _name: &str, _args: &[Val]) -> Option<Result<Val, String>> {
        None
    }
}

/// Sprig's functions, `sprig_`-prefixed (Nomad's CLI `-t`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SprigFuncs;

impl Funcs for SprigFuncs {
    fn call(&self, name: &str, args: &[Val]) -> Option<Result<Val, String>> {
        sprig::call(name.strip_prefix("sprig_")?, args)
    }
}

/// How a template is written: its delimiters and the functions it may call.
pub struct Syntax<'a> {
    /// The left delimiter (`{{`).
    pub left: &'a str,
    /// The right delimiter (`}}`).
    pub right: &'a str,
    /// Whether a function beyond Go's builtins is defined.
    pub known: &'a dyn Fn(&str) -> bool,
}

impl Default for Syntax<'_> {
    fn default() -> Self {
        Syntax {
            left: "{{",
            right: "}}",
            known: &|_| false,
        }
    }
}

/// How a template is rendered.
#[derive(Clone, Copy)]
pub struct RenderOptions<'a> {
    /// The functions beyond Go's builtins.
    pub funcs: &'a dyn Funcs,
    /// A missing map key is an error (Go's `missingkey=error`) instead of `<no value>`.
    pub missing_key_error: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Field(Vec<String>),
    /// `.A.B` right after a `)`.
    Chain(Vec<String>),
    Var(String, Vec<String>),
    Ident(String),
    Str(String),
    Num(serde_json::Number),
    Open,
    Close,
    Pipe,
    Comma,
    Declare,
    Assign,
}

fn parse_err(at: usize, reason: impl Into<String>) -> TemplateError {
    TemplateError::Parse {
        at,
        reason: reason.into(),
    }
}

/// The text of one action between its delimiters, with its offset.
struct Action {
    at: usize,
    text: String,
}

enum Item {
    Text(String),
    Action(Action),
}

/// Split the template into text and actions between `left` and `right`, applying `{{-` and
/// `-}}` trimming.
fn split(src: &str, left: &str, right: &str) -> Result<Vec<Item>, TemplateError> {
    if left.is_empty() || right.is_empty() {
        return Err(parse_err(0, "empty delimiter"));
    }
    let mut items = Vec::new();
    let mut rest = src;
    let mut offset = 0;
    let mut trim_next = false;
    while let Some(open) = rest.find(left) {
        let mut text = &rest[..open];
        if trim_next {
            text = text.trim_start();
        }
        let after = &rest[open + left.len()..];
        let trim_left = after.starts_with("- ")
            || after.starts_with("-\t")
            || after.starts_with("-\n")
            || after.starts_with("-\r");
        if trim_left {
            text = text.trim_end();
        }
        if !text.is_empty() {
            items.push(Item::Text(text.to_string()));
        }
        let body_start = if trim_left { 1 } else { 0 };
        let inner = &after[body_start..];
        // A comment ends at its `*/`: quotes inside it are text.
        let comment_end = inner
            .trim_start()
            .starts_with("/*")
            .then(|| inner.find("*/").map(|e| e + 2))
            .flatten();
        let close = match comment_end {
            Some(end) => inner[end..].find(right).map(|c| end + c),
            None => find_close(inner, right),
        }
        .ok_or_else(|| parse_err(offset + open, format!("unclosed action (no {right:?})")))?;
        let mut body = &after[body_start..body_start + close];
        trim_next = body.ends_with(" -")
            || body.ends_with("\t-")
            || body.ends_with("\n-")
            || body.ends_with("\r-");
        if trim_next {
            body = &body[..body.len() - 1];
        }
        let body = body.trim();
        if !(body.starts_with("/*") && body.ends_with("*/")) {
            items.push(Item::Action(Action {
                at: offset + open,
                text: body.to_string(),
            }));
        }
        let consumed = open + left.len() + body_start + close + right.len();
        offset += consumed;
        rest = &rest[consumed..];
    }
    let text = if trim_next { rest.trim_start() } else { rest };
    if !text.is_empty() {
        items.push(Item::Text(text.to_string()));
    }
    Ok(items)
}

/// Where `right` ends an action, outside string and character literals.
fn find_close(s: &str, right: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            q @ (b'"' | b'\'') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'`' => {
                i += 1;
                while i < b.len() && b[i] != b'`' {
                    i += 1;
                }
            }
            _ if b[i..].starts_with(right.as_bytes()) => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Split `.A.B` style chains after a leading `.` or `$name`.
fn field_chain(chars: &[char], i: &mut usize, at: usize) -> Result<Vec<String>, TemplateError> {
    let mut fields = Vec::new();
    while *i < chars.len() && chars[*i] == '.' {
        *i += 1;
        let start = *i;
        while *i < chars.len() && is_ident_char(chars[*i]) {
            *i += 1;
        }
        if start == *i {
            if fields.is_empty() {
                break;
            }
            return Err(parse_err(at, "a field name must follow \".\""));
        }
        fields.push(chars[start..*i].iter().collect());
    }
    Ok(fields)
}

fn lex(action: &Action) -> Result<Vec<Tok>, TemplateError> {
    let at = action.at;
    let chars: Vec<char> = action.text.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            _ if c.is_whitespace() => i += 1,
            '(' => {
                toks.push(Tok::Open);
                i += 1;
            }
            ')' => {
                toks.push(Tok::Close);
                i += 1;
            }
            '|' => {
                toks.push(Tok::Pipe);
                i += 1;
            }
            ',' => {
                toks.push(Tok::Comma);
                i += 1;
            }
            ':' if chars.get(i + 1) == Some(&'=') => {
                toks.push(Tok::Declare);
                i += 2;
            }
            '=' => {
                toks.push(Tok::Assign);
                i += 1;
            }
            '\'' => {
                // A character constant is its code point, as in Go.
                let (ch, len) = match (chars.get(i + 1), chars.get(i + 2), chars.get(i + 3)) {
                    (Some('\\'), Some(e), Some('\'')) => {
                        let ch = match e {
                            'n' => '\n',
                            't' => '\t',
                            'r' => '\r',
                            '0' => '\0',
                            other => *other,
                        };
                        (ch, 4)
                    }
                    (Some(&c), Some('\''), _) if c != '\\' => (c, 3),
                    _ => return Err(parse_err(at, "malformed character constant")),
                };
                toks.push(Tok::Num(serde_json::Number::from(u32::from(ch))));
                i += len;
            }
            '.' => {
                let after_paren = i > 0 && chars[i - 1] == ')';
                let fields = field_chain(&chars, &mut i, at)?;
                toks.push(if after_paren && !fields.is_empty() {
                    Tok::Chain(fields)
                } else {
                    Tok::Field(fields)
                });
            }
            '$' => {
                let start = i;
                i += 1;
                while i < chars.len() && is_ident_char(chars[i]) {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                let fields = field_chain(&chars, &mut i, at)?;
                toks.push(Tok::Var(name, fields));
            }
            '"' => {
                let mut s = String::new();
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(parse_err(at, "unterminated quoted string")),
                        Some('"') => break,
                        Some('\\') => {
                            let esc = chars
                                .get(i + 1)
                                .ok_or_else(|| parse_err(at, "unterminated quoted string"))?;
                            s.push(match esc {
                                'n' => '\n',
                                't' => '\t',
                                'r' => '\r',
                                '\\' => '\\',
                                '"' => '"',
                                '0' => '\0',
                                other => {
                                    return Err(parse_err(
                                        at,
                                        format!("unknown escape sequence \\{other}"),
                                    ))
                                }
                            });
                            i += 2;
                        }
                        Some(&ch) => {
                            s.push(ch);
                            i += 1;
                        }
                    }
                }
                i += 1;
                toks.push(Tok::Str(s));
            }
            '`' => {
                let start = i + 1;
                let end = chars[start..]
                    .iter()
                    .position(|&ch| ch == '`')
                    .ok_or_else(|| parse_err(at, "unterminated raw quoted string"))?;
                toks.push(Tok::Str(chars[start..start + end].iter().collect()));
                i = start + end + 1;
            }
            _ if c.is_ascii_digit()
                || (c == '-' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) =>
            {
                let start = i;
                i += 1;
                while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                    i += 1;
                }
                let text: String = chars[start..i].iter().collect();
                let num = serde_json::from_str::<serde_json::Number>(&text)
                    .map_err(|_| parse_err(at, format!("bad number syntax: {text:?}")))?;
                toks.push(Tok::Num(num));
            }
            _ if is_ident_char(c) => {
                let start = i;
                while i < chars.len() && is_ident_char(chars[i]) {
                    i += 1;
                }
                toks.push(Tok::Ident(chars[start..i].iter().collect()));
            }
            other => {
                return Err(parse_err(
                    at,
                    format!("unexpected {other:?} in {:?}", action.text),
                ))
            }
        }
    }
    Ok(toks)
}

/// The deepest nesting of blocks (`if`, `range`, `with`, `else if` chains) or parentheses a
/// template may have: deeper ones are refused rather than risking the parser's stack.
pub const MAX_NESTING: usize = 100;
/// The most steps (actions, block bodies, iterations) one render may take.
pub const MAX_STEPS: u64 = 10_000_000;
/// The largest text one render may produce, and the largest string a function may return.
pub const MAX_OUTPUT: usize = 16 << 20;

/// Go's builtin functions.
const FUNCS: &[&str] = &[
    "and", "or", "not", "len", "index", "slice", "print", "printf", "println", "eq", "ne", "lt",
    "le", "gt", "ge", "html", "js", "urlquery",
];

/// Whether `name` is one of Go's builtin functions.
pub fn is_builtin(name: &str) -> bool {
    FUNCS.contains(&name)
}

/// What the parser needs to know: which functions exist.
type Known<'a> = &'a dyn Fn(&str) -> bool;

/// Parse a pipeline from `toks[*i..]` up to its end or a `)`.
fn parse_pipeline(
    toks: &[Tok],
    i: &mut usize,
    action: &Action,
    allow_decl: bool,
    known: Known<'_>,
    depth: usize,
) -> Result<Pipeline, TemplateError> {
    let at = action.at;
    if depth > MAX_NESTING {
        return Err(parse_err(
            at,
            format!("more than {MAX_NESTING} nested parentheses"),
        ));
    }
    let mut decl = Vec::new();
    // `$x :=` or `$i, $e :=`
    let lookahead: Vec<&Tok> = toks[*i..].iter().take(4).collect();
    let is_decl = |t: &Tok| matches!(t, Tok::Declare | Tok::Assign);
    let declares = match lookahead.as_slice() {
        [Tok::Var(_, f), d, ..] if f.is_empty() && is_decl(d) => 1,
        [Tok::Var(_, f), Tok::Comma, Tok::Var(_, g), d]
            if f.is_empty() && g.is_empty() && is_decl(d) =>
        {
            2
        }
        _ => 0,
    };
    let assign = declares > 0 && toks[*i + 2 * declares - 1] == Tok::Assign;
    if declares > 0 {
        if !allow_decl {
            return Err(parse_err(at, "a variable cannot be declared here"));
        }
        for k in 0..declares {
            if let Tok::Var(name, _) = &toks[*i + 2 * k] {
                decl.push(name.clone());
            }
        }
        *i += 2 * declares;
    }
    let mut cmds = Vec::new();
    let mut cmd = Vec::new();
    while let Some(tok) = toks.get(*i) {
        *i += 1;
        match tok {
            Tok::Close => {
                *i -= 1;
                break;
            }
            Tok::Pipe => {
                if cmd.is_empty() {
                    return Err(parse_err(at, "missing command before \"|\""));
                }
                cmds.push(std::mem::take(&mut cmd));
            }
            Tok::Field(f) => cmd.push(Operand::Field(f.clone())),
            Tok::Var(v, f) => cmd.push(Operand::Var(v.clone(), f.clone())),
            Tok::Str(s) => cmd.push(Operand::Lit(Value::String(s.clone()))),
            Tok::Num(n) => cmd.push(Operand::Lit(Value::Number(n.clone()))),
            Tok::Ident(name) => cmd.push(match name.as_str() {
                "true" => Operand::Lit(Value::Bool(true)),
                "false" => Operand::Lit(Value::Bool(false)),
                "nil" => Operand::Lit(Value::Null),
                f if FUNCS.contains(&f) || known(f) => Operand::Func(f.to_string()),
                other => return Err(parse_err(at, format!("function {other:?} not defined"))),
            }),
            Tok::Open => {
                let inner = parse_pipeline(toks, i, action, false, known, depth + 1)?;
                if toks.get(*i) != Some(&Tok::Close) {
                    return Err(parse_err(at, "unclosed left paren"));
                }
                *i += 1;
                if let Some(Tok::Chain(fields)) = toks.get(*i) {
                    *i += 1;
                    cmd.push(Operand::Chain(Box::new(inner), fields.clone()));
                } else {
                    cmd.push(Operand::Paren(Box::new(inner)));
                }
            }
            Tok::Chain(_) => {
                return Err(parse_err(
                    at,
                    format!("unexpected field chain in {:?}", action.text),
                ))
            }
            Tok::Comma | Tok::Declare | Tok::Assign => {
                return Err(parse_err(
                    at,
                    format!("unexpected {tok:?} in {:?}", action.text),
                ))
            }
        }
    }
    if cmd.is_empty() {
        return Err(parse_err(at, format!("missing value in {:?}", action.text)));
    }
    cmds.push(cmd);
    for (n, c) in cmds.iter().enumerate() {
        if c.len() > 1 && !matches!(c[0], Operand::Func(_)) {
            return Err(parse_err(
                at,
                format!("can't give argument to non-function in {:?}", action.text),
            ));
        }
        if n > 0 && !matches!(c[0], Operand::Func(_)) {
            return Err(parse_err(
                at,
                format!("non-function in pipeline stage of {:?}", action.text),
            ));
        }
    }
    Ok(Pipeline {
        source: action.text.clone(),
        decl,
        assign,
        cmds,
    })
}

fn whole_pipeline(
    toks: &[Tok],
    action: &Action,
    known: Known<'_>,
) -> Result<Pipeline, TemplateError> {
    let mut i = 0;
    let pipe = parse_pipeline(toks, &mut i, action, true, known, 0)?;
    if i != toks.len() {
        return Err(parse_err(
            action.at,
            format!("unexpected \")\" in {:?}", action.text),
        ));
    }
    Ok(pipe)
}

/// How a list of nodes ended.
enum End {
    Eof,
    /// `{{end}}`.
    Close,
    /// `else`, or `else if PIPE` / `else with PIPE` (carrying the chained block).
    Else(Option<(BlockKind, Pipeline)>),
}

fn parse_list(
    items: &mut std::iter::Peekable<std::vec::IntoIter<Item>>,
    known: Known<'_>,
    depth: usize,
) -> Result<(Vec<Node>, End, usize), TemplateError> {
    let mut nodes = Vec::new();
    while let Some(item) = items.next() {
        let action = match item {
            Item::Text(t) => {
                nodes.push(Node::Text(t));
                continue;
            }
            Item::Action(a) => a,
        };
        let toks = lex(&action)?;
        let keyword = match toks.first() {
            Some(Tok::Ident(k)) => k.as_str(),
            _ => "",
        };
        match keyword {
            "end" if toks.len() == 1 => return Ok((nodes, End::Close, action.at)),
            "else" => {
                let rest = &toks[1..];
                let chained = match rest.first() {
                    None => None,
                    Some(Tok::Ident(k)) if k == "if" => {
                        Some((BlockKind::If, whole_pipeline(&rest[1..], &action, known)?))
                    }
                    Some(Tok::Ident(k)) if k == "with" => {
                        Some((BlockKind::With, whole_pipeline(&rest[1..], &action, known)?))
                    }
                    Some(_) => return Err(parse_err(action.at, "unexpected words after \"else\"")),
                };
                return Ok((nodes, End::Else(chained), action.at));
            }
            "if" | "range" | "with" => {
                let kind = match keyword {
                    "if" => BlockKind::If,
                    "range" => BlockKind::Range,
                    _ => BlockKind::With,
                };
                let pipe = whole_pipeline(&toks[1..], &action, known)?;
                nodes.push(parse_block(kind, pipe, action.at, items, known, depth + 1)?);
            }
            "end" | "define" | "template" | "block" | "break" | "continue" => {
                return Err(parse_err(
                    action.at,
                    format!("unexpected {keyword:?} (or not supported here)"),
                ))
            }
            _ => nodes.push(Node::Action(whole_pipeline(&toks, &action, known)?)),
        }
    }
    Ok((nodes, End::Eof, 0))
}

/// The body and `else` parts of a block whose opening action is at `at`.
fn parse_block(
    kind: BlockKind,
    pipe: Pipeline,
    at: usize,
    items: &mut std::iter::Peekable<std::vec::IntoIter<Item>>,
    known: Known<'_>,
    depth: usize,
) -> Result<Node, TemplateError> {
    if depth > MAX_NESTING {
        return Err(parse_err(
            at,
            format!("more than {MAX_NESTING} nested blocks"),
        ));
    }
    let (body, end, end_at) = parse_list(items, known, depth)?;
    let other = match end {
        End::Eof => return Err(parse_err(at, "unexpected EOF: missing {{end}}")),
        End::Close => Vec::new(),
        End::Else(None) => match parse_list(items, known, depth)? {
            (other, End::Close, _) => other,
            (_, End::Eof, _) => return Err(parse_err(at, "unexpected EOF: missing {{end}}")),
            (_, End::Else(_), at2) => return Err(parse_err(at2, "a second {{else}}")),
        },
        End::Else(Some((chained, cond))) => {
            if kind != chained {
                return Err(parse_err(
                    end_at,
                    "{{else if}} or {{else with}} after another kind of block",
                ));
            }
            vec![parse_block(chained, cond, end_at, items, known, depth + 1)?]
        }
    };
    Ok(Node::Block {
        kind,
        pipe,
        body,
        other,
    })
}

impl Template {
    /// Parse `src` with Go's delimiters and builtin functions only; the error names the
    /// character where the faulty action starts.
    pub fn parse(src: &str) -> Result<Template, TemplateError> {
        Template::parse_with(src, &Syntax::default())
    }

    /// Parse `src` as `syntax` says.
    pub fn parse_with(src: &str, syntax: &Syntax<'_>) -> Result<Template, TemplateError> {
        let mut items = split(src, syntax.left, syntax.right)?
            .into_iter()
            .peekable();
        match parse_list(&mut items, syntax.known, 0)? {
            (nodes, End::Eof, _) => Ok(Template { nodes }),
            (_, End::Close, at) => Err(parse_err(at, "unexpected {{end}}")),
            (_, End::Else(_), at) => Err(parse_err(at, "unexpected {{else}}")),
        }
    }

    /// The names of the functions it calls, builtins included.
    pub fn functions(&self) -> std::collections::BTreeSet<String> {
        fn pipe(p: &Pipeline, out: &mut std::collections::BTreeSet<String>) {
            for op in p.cmds.iter().flatten() {
                match op {
                    Operand::Func(name) => {
                        out.insert(name.clone());
                    }
                    Operand::Paren(inner) | Operand::Chain(inner, _) => pipe(inner, out),
                    _ => {}
                }
            }
        }
        fn walk(nodes: &[Node], out: &mut std::collections::BTreeSet<String>) {
            for node in nodes {
                match node {
                    Node::Text(_) => {}
                    Node::Action(p) => pipe(p, out),
                    Node::Block {
                        pipe: p,
                        body,
                        other,
                        ..
                    } => {
                        pipe(p, out);
                        walk(body, out);
                        walk(other, out);
                    }
                }
            }
        }
        let mut out = std::collections::BTreeSet::new();
        walk(&self.nodes, &mut out);
        out
    }

    /// Parse `src` with Go's builtins and Sprig's functions (`sprig_*`), as Nomad's CLI
    /// formats its `-t` output.
    pub fn parse_with_sprig(src: &str) -> Result<Template, TemplateError> {
        let known = |name: &str| {
            name.strip_prefix("sprig_")
                .is_some_and(|n| sprig::SPRIG.contains(&n))
        };
        Template::parse_with(
            src,
            &Syntax {
                known: &known,
                ..Syntax::default()
            },
        )
    }

    /// Render a template of [`Template::parse_with_sprig`] with `data` as `.` and `$`.
    pub fn render_with_sprig(&self, data: &Value) -> Result<String, TemplateError> {
        self.render_with(
            data,
            RenderOptions {
                funcs: &SprigFuncs,
                missing_key_error: false,
            },
        )
    }

    /// Render the template with `data` as `.` and `$`, with Go's builtin functions.
    pub fn render(&self, data: &Value) -> Result<String, TemplateError> {
        self.render_with(
            data,
            RenderOptions {
                funcs: &NoFuncs,
                missing_key_error: false,
            },
        )
    }

    /// Render the template with `data` as `.` and `$`, as `options` say.
    pub fn render_with(
        &self,
        data: &Value,
        options: RenderOptions<'_>,
    ) -> Result<String, TemplateError> {
        let mut exec = Exec {
            vars: vec![("$".to_string(), Some(data.clone()))],
            out: String::new(),
            options,
            steps: std::cell::Cell::new(0),
        };
        exec.walk(&self.nodes, &Some(data.clone()))?;
        Ok(exec.out)
    }
}

struct Exec<'a> {
    vars: Vec<(String, Val)>,
    out: String,
    options: RenderOptions<'a>,
    /// Steps taken so far (at most [`MAX_STEPS`]).
    steps: std::cell::Cell<u64>,
}

fn exec_err(pipe: &Pipeline, reason: impl Into<String>) -> TemplateError {
    TemplateError::Exec {
        action: pipe.source.clone(),
        reason: reason.into(),
    }
}

/// Go's truth: false, 0, nil, "" and empty collections are false, as is no value.
fn truth(v: &Val) -> bool {
    match v {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => o.contains_key(STRINGER) || o.keys().any(|k| !is_hidden(k)),
    }
}

/// Go's `%v` of a decoded JSON value.
fn go_text(v: &Val) -> String {
    match v {
        None => "<no value>".into(),
        Some(v) => json_text(v),
    }
}

/// A float64 as Go's `%v` prints it: the shortest digits that read back, in exponent form
/// (`1.234567e+06`) when the exponent is below -4 or at least 6.
fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        format!("{f}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

fn json_text(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) if n.is_f64() => go_float(n.as_f64().unwrap_or(0.0)),
        Value::Number(n) => n.to_string(),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(json_text).collect::<Vec<_>>().join(" ")
        ),
        Value::Object(o) => {
            if let Some(Value::String(s)) = o.get(STRINGER) {
                return s.clone();
            }
            let parts: Vec<String> = visible(o)
                .into_iter()
                .map(|(k, v)| format!("{k}:{}", json_text(v)))
                .collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

impl Exec<'_> {
    /// One more step, and the output still within bounds.
    fn step(&self) -> Result<(), TemplateError> {
        let n = self.steps.get() + 1;
        self.steps.set(n);
        if n > MAX_STEPS {
            return Err(TemplateError::Exec {
                action: String::new(),
                reason: format!("the render took more than {MAX_STEPS} steps"),
            });
        }
        if self.out.len() > MAX_OUTPUT {
            return Err(TemplateError::Exec {
                action: String::new(),
                reason: format!("the output is larger than {MAX_OUTPUT} bytes"),
            });
        }
        Ok(())
    }

    fn walk(&mut self, nodes: &[Node], dot: &Val) -> Result<(), TemplateError> {
        for node in nodes {
            self.step()?;
            match node {
                Node::Text(t) => self.out.push_str(t),
                Node::Action(pipe) => {
                    let v = self.pipeline(pipe, dot)?;
                    if pipe.decl.is_empty() {
                        self.out.push_str(&go_text(&v));
                    }
                }
                Node::Block {
                    kind,
                    pipe,
                    body,
                    other,
                } => {
                    let depth = self.vars.len();
                    self.block(*kind, pipe, body, other, dot)?;
                    self.vars.truncate(depth);
                }
            }
        }
        Ok(())
    }

    fn block(
        &mut self,
        kind: BlockKind,
        pipe: &Pipeline,
        body: &[Node],
        other: &[Node],
        dot: &Val,
    ) -> Result<(), TemplateError> {
        if kind != BlockKind::Range {
            let v = self.pipeline(pipe, dot)?;
            if kind == BlockKind::With && truth(&v) {
                return self.walk(body, &v);
            }
            return if truth(&v) && kind == BlockKind::If {
                self.walk(body, dot)
            } else {
                self.walk(other, dot)
            };
        }
        let v = self.eval_pipeline(pipe, dot)?;
        if let Some(Value::Number(n)) = &v {
            // Go 1.22: `range 3` is 0, 1, 2 (one at a time: the count may be huge).
            if pipe.decl.len() == 2 {
                return Err(exec_err(
                    pipe,
                    "can't use two variables ranging over an integer",
                ));
            }
            let Some(count) = n.as_i64() else {
                return Err(exec_err(pipe, format!("range can't iterate over {n}")));
            };
            if count <= 0 {
                return self.walk(other, dot);
            }
            let depth = self.vars.len();
            for i in 0..count {
                self.step()?;
                let elem = Some(Value::from(i));
                if let [e] = pipe.decl.as_slice() {
                    self.vars.push((e.clone(), elem.clone()));
                }
                self.walk(body, &elem)?;
                self.vars.truncate(depth);
            }
            return Ok(());
        }
        let items: Vec<(Value, Value)> = match v {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .into_iter()
                .enumerate()
                .map(|(i, e)| (Value::from(i), e))
                .collect(),
            Some(Value::Object(o)) => visible(&o)
                .into_iter()
                .map(|(k, e)| (Value::String(k.clone()), e.clone()))
                .collect(),
            Some(other) => {
                return Err(exec_err(
                    pipe,
                    format!("range can't iterate over {}", json_text(&other)),
                ))
            }
        };
        if items.is_empty() {
            return self.walk(other, dot);
        }
        let depth = self.vars.len();
        for (key, elem) in items {
            self.step()?;
            match pipe.decl.as_slice() {
                [e] => self.vars.push((e.clone(), Some(elem.clone()))),
                [k, e] => {
                    self.vars.push((k.clone(), Some(key)));
                    self.vars.push((e.clone(), Some(elem.clone())));
                }
                _ => {}
            }
            self.walk(body, &Some(elem))?;
            self.vars.truncate(depth);
        }
        Ok(())
    }

    /// Evaluate a pipeline and bind what it declares or assigns (outside `range`).
    fn pipeline(&mut self, pipe: &Pipeline, dot: &Val) -> Result<Val, TemplateError> {
        let v = self.eval_pipeline(pipe, dot)?;
        for name in &pipe.decl {
            if pipe.assign {
                let slot = self
                    .vars
                    .iter_mut()
                    .rev()
                    .find(|(n, _)| n == name)
                    .ok_or_else(|| exec_err(pipe, format!("undefined variable: {name}")))?;
                slot.1 = v.clone();
            } else {
                self.vars.push((name.clone(), v.clone()));
            }
        }
        Ok(v)
    }

    fn eval_pipeline(&self, pipe: &Pipeline, dot: &Val) -> Result<Val, TemplateError> {
        let mut last: Option<Val> = None;
        for cmd in &pipe.cmds {
            last = Some(self.command(pipe, cmd, dot, last)?);
        }
        Ok(last.flatten())
    }

    fn command(
        &self,
        pipe: &Pipeline,
        cmd: &[Operand],
        dot: &Val,
        piped: Option<Val>,
    ) -> Result<Val, TemplateError> {
        match &cmd[0] {
            // Go evaluates `and` and `or` only as far as their answer needs.
            Operand::Func(name) if name == "and" || name == "or" => {
                let stop = name == "or";
                let mut last: Option<Val> = None;
                for op in &cmd[1..] {
                    let v = self.operand(pipe, op, dot)?;
                    if truth(&v) == stop {
                        return Ok(v);
                    }
                    last = Some(v);
                }
                if let Some(v) = piped {
                    return Ok(v);
                }
                last.ok_or_else(|| {
                    exec_err(pipe, format!("error calling {name}: needs an argument"))
                })
            }
            Operand::Func(name) => {
                let mut args = cmd[1..]
                    .iter()
                    .map(|op| self.operand(pipe, op, dot))
                    .collect::<Result<Vec<_>, _>>()?;
                args.extend(piped);
                self.call(name, &args)
                    .map_err(|reason| exec_err(pipe, format!("error calling {name}: {reason}")))
            }
            op => self.operand(pipe, op, dot),
        }
    }

    fn operand(&self, pipe: &Pipeline, op: &Operand, dot: &Val) -> Result<Val, TemplateError> {
        match op {
            Operand::Field(fields) => self.fields_of(pipe, dot.clone(), fields),
            Operand::Var(name, fields) => {
                let v = self
                    .vars
                    .iter()
                    .rev()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
                    .ok_or_else(|| exec_err(pipe, format!("undefined variable: {name}")))?;
                self.fields_of(pipe, v, fields)
            }
            Operand::Lit(v) => Ok(Some(v.clone())),
            Operand::Paren(inner) => self.eval_pipeline(inner, dot),
            Operand::Chain(inner, fields) => {
                let v = self.eval_pipeline(inner, dot)?;
                self.fields_of(pipe, v, fields)
            }
            Operand::Func(name) => self
                .call(name, &[])
                .map_err(|r| exec_err(pipe, format!("error calling {name}: {r}"))),
        }
    }
    /// A builtin, else one of the caller's functions; a result string over
    /// [`MAX_OUTPUT`] is an error.
    fn call(&self, name: &str, args: &[Val]) -> Result<Val, String> {
        let v = if is_builtin(name) {
            call(name, args)?
        } else {
            self.options
                .funcs
                .call(name, args)
                .unwrap_or_else(|| Err(format!("function {name:?} not defined")))?
        };
        if let Some(Value::String(s)) = &v {
            if s.len() > MAX_OUTPUT {
                return Err(format!("the result is larger than {MAX_OUTPUT} bytes"));
            }
        }
        Ok(v)
    }

    /// `.A.B` of `v`: a method first, then a key; a missing key is no value (or an error
    /// with `missingkey=error`), a field of anything but an object an error.
    fn fields_of(
        &self,
        pipe: &Pipeline,
        mut v: Val,
        fields: &[String],
    ) -> Result<Val, TemplateError> {
        for f in fields {
            v = match v {
                Some(Value::Object(mut o)) => {
                    match o.remove(&method_key(f)).or_else(|| o.remove(f)) {
                        None if self.options.missing_key_error => {
                            return Err(exec_err(pipe, format!("map has no entry for key {f:?}")))
                        }
                        found => found,
                    }
                }
                None | Some(Value::Null) => {
                    return Err(exec_err(pipe, format!("nil pointer evaluating .{f}")))
                }
                Some(other) => {
                    return Err(exec_err(
                        pipe,
                        format!("can't evaluate field {f} in {}", kind_name(&other)),
                    ))
                }
            };
        }
        Ok(v)
    }
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "nil",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn arity(args: &[Val], n: usize) -> Result<(), String> {
    if args.len() == n {
        Ok(())
    } else {
        Err(format!("wrong number of args: want {n} got {}", args.len()))
    }
}

/// Go's builtin functions.
fn call(name: &str, args: &[Val]) -> Result<Val, String> {
    let some = |v: Value| Ok(Some(v));
    match name {
        "and" | "or" => {
            let stop = name != "and";
            match args.iter().find(|a| truth(a) == stop) {
                Some(a) => Ok(a.clone()),
                None => args
                    .last()
                    .cloned()
                    .ok_or_else(|| "needs an argument".into()),
            }
        }
        "not" => {
            arity(args, 1)?;
            some(Value::Bool(!truth(&args[0])))
        }
        "len" => {
            arity(args, 1)?;
            let n = match &args[0] {
                Some(Value::String(s)) => s.len(),
                Some(Value::Array(a)) => a.len(),
                Some(Value::Object(o)) => o.keys().filter(|k| !is_hidden(k)).count(),
                other => return Err(format!("len of {}", go_text(other))),
            };
            some(Value::from(n))
        }
        "index" => {
            let (first, keys) = args.split_first().ok_or("needs a value to index")?;
            let mut v = first.clone();
            for key in keys {
                v = match (v, key) {
                    (Some(Value::Object(mut o)), Some(Value::String(k))) => o.remove(k),
                    (Some(Value::Array(a)), Some(Value::Number(n))) => {
                        let i = n.as_u64().ok_or_else(|| format!("bad index {n}"))?;
                        let len = a.len();
                        Some(
                            a.into_iter()
                                .nth(i as usize)
                                .ok_or_else(|| format!("index out of range: {i} of {len}"))?,
                        )
                    }
                    (None | Some(Value::Null), _) => return Err("index of nil".into()),
                    (Some(other), k) => {
                        return Err(format!(
                            "can't index {} with {}",
                            kind_name(&other),
                            go_text(k)
                        ))
                    }
                };
            }
            Ok(v)
        }
        "slice" => {
            let (first, idx) = args.split_first().ok_or("needs a value to slice")?;
            let bounds = idx
                .iter()
                .map(|i| match i {
                    Some(Value::Number(n)) => n
                        .as_u64()
                        .map(|n| n as usize)
                        .ok_or_else(|| format!("bad index {n}")),
                    other => Err(format!("cannot index slice with {}", go_text(other))),
                })
                .collect::<Result<Vec<usize>, String>>()?;
            if bounds.len() > 2 {
                return Err("too many slice indexes".into());
            }
            let cut = |len: usize| -> Result<(usize, usize), String> {
                let lo = bounds.first().copied().unwrap_or(0);
                let hi = bounds.get(1).copied().unwrap_or(len);
                if lo > hi || hi > len {
                    return Err(format!("index out of range: [{lo}:{hi}] with length {len}"));
                }
                Ok((lo, hi))
            };
            match first {
                Some(Value::String(s)) => {
                    let (lo, hi) = cut(s.len())?;
                    let part = s.get(lo..hi).ok_or("slice splits a character")?;
                    some(Value::String(part.to_string()))
                }
                Some(Value::Array(a)) => {
                    let (lo, hi) = cut(a.len())?;
                    some(Value::Array(a[lo..hi].to_vec()))
                }
                other => Err(format!("can't slice {}", go_text(other))),
            }
        }
        "html" | "js" | "urlquery" => {
            let text: String = args.iter().map(go_text).collect();
            some(Value::String(match name {
                "html" => escape_html(&text),
                "js" => escape_js(&text),
                _ => form_urlencoded::byte_serialize(text.as_bytes()).collect(),
            }))
        }
        "print" => {
            let mut s = String::new();
            for (i, a) in args.iter().enumerate() {
                let is_str = |v: &Val| matches!(v, Some(Value::String(_)));
                if i > 0 && !is_str(a) && !is_str(&args[i - 1]) {
                    s.push(' ');
                }
                s.push_str(&go_text(a));
            }
            some(Value::String(s))
        }
        "println" => {
            let parts: Vec<String> = args.iter().map(go_text).collect();
            some(Value::String(format!("{}\n", parts.join(" "))))
        }
        "printf" => {
            let (format, rest) = args.split_first().ok_or("needs a format")?;
            let Some(Value::String(format)) = format else {
                return Err("the format must be a string".into());
            };
            some(Value::String(printf(format, rest)))
        }
        "eq" => {
            let (first, rest) = args.split_first().ok_or("needs two arguments")?;
            if rest.is_empty() {
                return Err("needs two arguments".into());
            }
            some(Value::Bool(rest.iter().any(|r| same(first, r))))
        }
        "ne" => {
            arity(args, 2)?;
            some(Value::Bool(!same(&args[0], &args[1])))
        }
        "lt" | "le" | "gt" | "ge" => {
            arity(args, 2)?;
            let ord = order(&args[0], &args[1])?;
            some(Value::Bool(match name {
                "lt" => ord.is_lt(),
                "le" => ord.is_le(),
                "gt" => ord.is_gt(),
                _ => ord.is_ge(),
            }))
        }
        other => Err(format!("function {other:?} not defined")),
    }
}

/// Go's `html`: `<>&'"` and NUL escaped.
fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\'' => out.push_str("&#39;"),
            '"' => out.push_str("&#34;"),
            '\0' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Go's `js`: quotes, backslashes, markup characters and control characters escaped.
fn escape_js(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '<' => out.push_str("\\u003C"),
            '>' => out.push_str("\\u003E"),
            '&' => out.push_str("\\u0026"),
            '=' => out.push_str("\\u003D"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

fn same(a: &Val, b: &Val) -> bool {
    match (a, b) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => x.as_f64() == y.as_f64(),
        (None, Some(Value::Null)) | (Some(Value::Null), None) => true,
        _ => a == b,
    }
}

fn order(a: &Val, b: &Val) -> Result<std::cmp::Ordering, String> {
    match (a, b) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => {
            let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
            x.partial_cmp(&y)
                .ok_or_else(|| "incomparable numbers".into())
        }
        (Some(Value::String(x)), Some(Value::String(y))) => Ok(x.cmp(y)),
        _ => Err(format!(
            "incompatible types for comparison: {} and {}",
            go_text(a),
            go_text(b)
        )),
    }
}

/// Go's `fmt.Sprintf` for the verbs `%v %s %d %f %t %q %x %%`, with flags `-`/`0`, width and
/// precision.
fn printf(format: &str, args: &[Val]) -> String {
    let mut out = String::new();
    let mut args = args.iter();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let (mut left, mut zero, mut plus) = (false, false, false);
        while let Some(&f) = chars.peek() {
            match f {
                '-' => left = true,
                '0' => zero = true,
                '+' => plus = true,
                ' ' | '#' => {}
                _ => break,
            }
            chars.next();
        }
        let mut width = String::new();
        while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
            width.push(d);
            chars.next();
        }
        // Go refuses widths and precisions over a million.
        const MAX_FMT: usize = 1_000_000;
        if width
            .parse::<usize>()
            .map_or(!width.is_empty(), |w| w > MAX_FMT)
        {
            out.push_str("%!(BADWIDTH)");
            width.clear();
        }
        let mut precision: Option<usize> = None;
        if chars.peek() == Some(&'.') {
            chars.next();
            let mut p = String::new();
            while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                p.push(d);
                chars.next();
            }
            precision = match p.parse::<usize>() {
                Ok(n) if n <= MAX_FMT => Some(n),
                _ if p.is_empty() => Some(0),
                _ => {
                    out.push_str("%!(BADPREC)");
                    None
                }
            };
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.next() else {
            let _ = write!(out, "%!{verb}(MISSING)");
            continue;
        };
        let number = match arg {
            Some(Value::Number(n)) => n.as_f64(),
            _ => None,
        };
        let text = match (verb, arg) {
            ('v' | 's', _) => {
                let t = go_text(arg);
                match precision {
                    Some(p) if verb == 's' => t.chars().take(p).collect(),
                    _ => t,
                }
            }
            ('q', _) => serde_json::to_string(&go_text(arg)).unwrap_or_default(),
            ('t', Some(Value::Bool(b))) => b.to_string(),
            ('d', Some(Value::Number(n))) if n.is_i64() || n.is_u64() => {
                let t = n.to_string();
                if plus && !t.starts_with('-') {
                    format!("+{t}")
                } else {
                    t
                }
            }
            ('f' | 'F', _) if number.is_some() => {
                format!("{:.*}", precision.unwrap_or(6), number.unwrap_or(0.0))
            }
            ('x', Some(Value::Number(n))) if n.is_u64() => format!("{:x}", n.as_u64().unwrap_or(0)),
            ('x', Some(Value::String(s))) => s.bytes().map(|b| format!("{b:02x}")).collect(),
            (verb, arg) => format!("%!{verb}({})", go_text(arg)),
        };
        let width: usize = width.parse().unwrap_or(0);
        let pad = width.saturating_sub(text.chars().count());
        if left {
            out.push_str(&text);
            out.extend(std::iter::repeat_n(' ', pad));
        } else if zero && number.is_some() {
            let (sign, digits) = match text.strip_prefix('-') {
                Some(d) => ("-", d),
                None => ("", text.as_str()),
            };
            out.push_str(sign);
            out.extend(std::iter::repeat_n('0', pad));
            out.push_str(digits);
        } else {
            out.extend(std::iter::repeat_n(' ', pad));
            out.push_str(&text);
        }
    }
    if args.len() > 0 {
        let extra: Vec<String> = args.map(go_text).collect();
        let _ = write!(out, "%!(EXTRA {})", extra.join(", "));
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{Syntax, Template, TemplateError, MAX_NESTING};

    fn render(src: &str, data: serde_json::Value) -> String {
        Template::parse(src)
            .unwrap_or_else(|e| panic!("{src:?}: {e}"))
            .render(&data)
            .unwrap_or_else(|e| panic!("{src:?}: {e}"))
    }

    fn job() -> serde_json::Value {
        json!({
            "ID": "web",
            "Status": "running",
            "Priority": 50,
            "Stop": false,
            "Meta": {"zone": "b", "owner": "ops"},
            "TaskGroups": [
                {"Name": "api", "Count": 2, "Tasks": [{"Name": "srv", "Driver": "raw_exec"}]},
                {"Name": "db", "Count": 1, "Tasks": []}
            ],
            "Parent": null
        })
    }

    #[test]
    fn fields_nesting_and_dot() {
        assert_eq!(render("{{.ID}} {{.Status}}", job()), "web running");
        assert_eq!(render("{{.Meta.zone}}/{{ .Priority }}", job()), "b/50");
        assert_eq!(render("{{.}}", json!("plain")), "plain");
        assert_eq!(render("{{.Meta}}", job()), "map[owner:ops zone:b]");
        assert_eq!(render("{{.Stop}} {{.Parent}}", job()), "false <nil>");
        assert_eq!(render("{{$.ID}}", job()), "web");
        assert_eq!(render("no actions", job()), "no actions");
    }

    #[test]
    fn a_missing_field_is_no_value() {
        assert_eq!(
            render("{{.Nope}}|{{.Meta.nope}}", job()),
            "<no value>|<no value>"
        );
        // A field of a missing value is an error, as in Go.
        let err = Template::parse("{{.Nope.Deeper}}")
            .unwrap()
            .render(&job())
            .unwrap_err();
        assert!(
            matches!(&err, TemplateError::Exec { reason, .. } if reason.contains("Deeper")),
            "{err}"
        );
    }

    #[test]
    fn range_over_arrays_and_objects_in_key_order() {
        assert_eq!(
            render(
                r#"{{range .TaskGroups}}{{.Name}}={{.Count}}{{"\n"}}{{end}}"#,
                job()
            ),
            "api=2\ndb=1\n"
        );
        assert_eq!(
            render("{{range $k, $v := .Meta}}{{$k}}:{{$v}};{{end}}", job()),
            "owner:ops;zone:b;"
        );
        assert_eq!(
            render(
                "{{range $i, $g := .TaskGroups}}{{$i}}{{$g.Name}} {{end}}",
                job()
            ),
            "0api 1db "
        );
        assert_eq!(
            render(
                "{{range .TaskGroups}}{{range .Tasks}}{{.Driver}}{{else}}none{{end}},{{end}}",
                job()
            ),
            "raw_exec,none,"
        );
        assert_eq!(
            render("{{range .Missing}}x{{else}}empty{{end}}", job()),
            "empty"
        );
        assert_eq!(
            render(
                "{{- range . }}\n{{ .ID }}\n{{- end }}",
                json!([{"ID": "a"}, {"ID": "b"}])
            ),
            "\na\nb"
        );
    }

    #[test]
    fn if_else_and_comparisons() {
        let t = "{{if .Stop}}stopped{{else if eq .Status \"running\"}}up{{else}}other{{end}}";
        assert_eq!(render(t, job()), "up");
        assert_eq!(render(t, json!({"Stop": true})), "stopped");
        assert_eq!(render(t, json!({"Status": "dead"})), "other");
        assert_eq!(render("{{if .Nope}}y{{else}}n{{end}}", job()), "n");
        assert_eq!(
            render("{{if and .ID (gt .Priority 10)}}y{{end}}", job()),
            "y"
        );
        assert_eq!(
            render("{{if not .TaskGroups}}y{{else}}n{{end}}", job()),
            "n"
        );
        assert_eq!(render("{{with .Meta}}{{.owner}}{{end}}", job()), "ops");
    }

    #[test]
    fn functions_printf_len_index() {
        assert_eq!(
            render(
                r#"{{printf "%s has %d groups" .ID (len .TaskGroups)}}"#,
                job()
            ),
            "web has 2 groups"
        );
        assert_eq!(
            render(r#"{{printf "%-5s|%4d|%05.1f" "ab" 7 3.14159}}"#, json!({})),
            "ab   |   7|003.1"
        );
        assert_eq!(
            render(r#"{{printf "%q %v %%" .ID .Stop}}"#, job()),
            r#""web" false %"#
        );
        assert_eq!(render("{{len .Meta}} {{len .ID}}", job()), "2 3");
        assert_eq!(
            render(
                r#"{{index .Meta "zone"}} {{index .TaskGroups 1 "Name"}}"#,
                job()
            ),
            "b db"
        );
        assert_eq!(render(r#"{{index .Meta "nope"}}"#, job()), "<no value>");
        assert_eq!(render(r#"{{.ID | printf "<%s>"}}"#, job()), "<web>");
        assert_eq!(render(r#"{{print .ID 1 2 "x"}}"#, job()), "web1 2x");
        assert_eq!(render("{{$n := len .TaskGroups}}{{$n}}", job()), "2");
        assert_eq!(render("{{/* a comment */}}ok", job()), "ok");
        assert_eq!(render("{{`raw\\n`}}", job()), "raw\\n");
    }

    #[test]
    fn a_template_that_does_not_parse_names_the_problem() {
        for (src, part) in [
            ("{{.ID", "unclosed action"),
            ("{{if .ID}}x", "missing {{end}}"),
            ("x{{end}}", "unexpected {{end}}"),
            ("{{nosuch .ID}}", "function \"nosuch\" not defined"),
            ("{{\"open}}", "unclosed action"),
            ("{{printf \"%s\" \"a\\q\"}}", "unknown escape"),
            ("{{.ID .Status}}", "non-function"),
            ("{{}}", "missing value"),
            ("{{range .}}{{else if .X}}{{end}}", "else if"),
        ] {
            match Template::parse(src) {
                Err(TemplateError::Parse { reason, .. }) => {
                    assert!(reason.contains(part), "{src:?}: {reason:?} lacks {part:?}")
                }
                other => panic!("{src:?} parsed: {other:?}"),
            }
        }
        let err = Template::parse("ab{{if}}").unwrap_err();
        assert!(matches!(err, TemplateError::Parse { at: 2, .. }), "{err:?}");
    }

    /// The examples of Go's `text/template` documentation ("Examples" under Pipelines):
    /// every one prints the quoted word `"output"`.
    #[test]
    fn the_go_documentation_examples_print_what_go_prints() {
        for src in [
            r#"{{"\"output\""}}"#,
            r#"{{`"output"`}}"#,
            r#"{{printf "%q" "output"}}"#,
            r#"{{"output" | printf "%q"}}"#,
            r#"{{printf "%q" (print "out" "put")}}"#,
            r#"{{"put" | printf "%s%s" "out" | printf "%q"}}"#,
            r#"{{"output" | printf "%s" | printf "%q"}}"#,
            r#"{{with "output"}}{{printf "%q" .}}{{end}}"#,
            r#"{{with $x := "output" | printf "%q"}}{{$x}}{{end}}"#,
            r#"{{with $x := "output"}}{{printf "%q" $x}}{{end}}"#,
            r#"{{with $x := "output"}}{{$x | printf "%q"}}{{end}}"#,
        ] {
            assert_eq!(render(src, json!({})), "\"output\"", "{src}");
        }
        // The documentation's text-and-spaces example: trim markers eat the spaces.
        assert_eq!(render("{{23 -}} < {{- 45}}", json!({})), "23<45");
        // Variables declared in a `range` are scoped to it; `$` is the data.
        assert_eq!(
            render(
                "{{range $i, $e := .}}{{$i}}={{$e}} {{end}}{{$}}",
                json!(["a", "b"])
            ),
            "0=a 1=b [a b]"
        );
    }

    #[test]
    fn hostile_templates_are_refused_or_stopped_not_run_away() {
        let deep = "{{if 1}}".repeat(MAX_NESTING + 5) + &"{{end}}".repeat(MAX_NESTING + 5);
        let err = Template::parse(&deep).unwrap_err();
        assert!(err.to_string().contains("nested blocks"), "{err}");
        let chain = format!(
            "{{{{if 0}}}}{}{{{{end}}}}",
            "{{else if 0}}".repeat(MAX_NESTING + 5)
        );
        assert!(Template::parse(&chain).is_err());
        let parens = format!(
            "{{{{{}1{}}}}}",
            "(".repeat(MAX_NESTING + 5),
            ")".repeat(MAX_NESTING + 5)
        );
        let err = Template::parse(&parens).unwrap_err();
        assert!(err.to_string().contains("nested parentheses"), "{err}");
        // Within the limits, nesting works.
        let ok = "{{if 1}}".repeat(50) + "x" + &"{{end}}".repeat(50);
        assert_eq!(render(&ok, json!({})), "x");
        // A huge range stops at the step budget instead of allocating it.
        let err = Template::parse("{{range 1000000000000}}{{end}}")
            .unwrap()
            .render(&json!({}))
            .unwrap_err();
        assert!(err.to_string().contains("steps"), "{err}");
        assert_eq!(render("{{range 3}}{{.}}{{end}}", json!({})), "012");
        // Go's refusal of enormous widths and precisions.
        assert_eq!(
            render(
                r#"{{printf "%99999999999d|%.99999999999f" 1 2.0}}"#,
                json!({})
            ),
            "%!(BADWIDTH)1|%!(BADPREC)2.000000"
        );
    }

    #[test]
    fn go_details_comments_dots_and_short_circuits() {
        assert_eq!(render("a{{/* don't \"quote\" me */}}b", json!({})), "ab");
        assert_eq!(render(r#"{{.|printf "<%v>"}}"#, json!("x")), "<x>");
        assert_eq!(render("{{(.)}}", json!("y")), "y");
        // `and` and `or` stop at their answer: the index is never evaluated.
        assert_eq!(
            render(
                "{{if and .L (index .L 0)}}y{{else}}n{{end}}",
                json!({"L": []})
            ),
            "n"
        );
        assert_eq!(render("{{or 0 \"\" .X \"d\"}}", json!({"X": "x"})), "x");
        assert_eq!(render("{{and 1 2}}", json!({})), "2");
        assert_eq!(render("{{$x := 1}}{{$x = 2}}{{$x}}", json!({})), "2");
        assert_eq!(
            render(
                "{{with .A}}a{{else with .B}}{{.}}{{end}}",
                json!({"B": "b"})
            ),
            "b"
        );
        assert_eq!(render("{{'a'}}", json!({})), "97");
        assert_eq!(render(r#"{{slice "hello" 1 3}}"#, json!({})), "el");
        assert_eq!(render(r#"{{html "<a&b>"}}"#, json!({})), "&lt;a&amp;b&gt;");
        assert_eq!(render(r#"{{urlquery "a b&c"}}"#, json!({})), "a+b%26c");
    }

    #[test]
    fn other_delimiters() {
        let t = Template::parse_with(
            "[[ .A ]] {{ .A }}",
            &Syntax {
                left: "[[",
                right: "]]",
                ..Syntax::default()
            },
        )
        .unwrap();
        assert_eq!(t.render(&json!({"A": 1})).unwrap(), "1 {{ .A }}");
    }

    #[test]
    fn runtime_errors_are_errors() {
        let t = Template::parse("{{range .ID}}{{end}}").unwrap();
        assert!(t.render(&job()).is_err());
        let t = Template::parse("{{len .Priority}}").unwrap();
        assert!(t.render(&job()).is_err());
        let t = Template::parse("{{$x}}").unwrap();
        assert!(t.render(&job()).is_err());
    }
}
