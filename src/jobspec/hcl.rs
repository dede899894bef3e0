//! HCL2 job files, in the shape of Nomad's jobspec2, turned into Nomad's JSON job.
//!
//! A file holds `variable "<name>"` blocks, `variables { }`, `locals { }` and exactly one
//! `job "<id>"`. Expressions are evaluated (with `var.*`, `local.*` and the functions of
//! [`super::funcs`]); any other interpolation (`${attr.kernel.name}`, `${node.unique.id}`,
//! `${NOMAD_PORT_http}`) is left in the string for the client to fill in at run time, as
//! Nomad does. Every block label becomes the name it stands for; durations are Go duration
//! strings (`"30s"`) or nanoseconds.
//!
//! An argument or a block that the schema does not know is an error that names the file,
//! the line and column, and the block path (`job "web" → group "api" → task "t": unknown
//! argument "comand"`), as Nomad's parser does. Blocks teamster does not act on (`multiregion`,
//! `network`, `service`, `template`, …) are converted to their JSON field all the same, so
//! that [`super::unsupported_fields`] refuses them by name rather than losing them here.
//!
//! `variables` gives `var.*` and `local.*` their values, `interpolate` decides what is
//! evaluated now and what is left for run time, and `blocks` converts the `job` block by
//! the schema of `schema`.

use std::cell::RefCell;

use hcl::edit::expr::Expression as EditExpr;
use hcl::edit::structure::{Block, Body, Structure};
use hcl::edit::Span;
use hcl::eval::{Context, Evaluate};
use serde_json::{Map, Value};

use super::funcs;
use super::schema::{Ty, JOB};
use interpolate::parse_time;

pub use super::budget::MAX_SOURCE_BYTES;

/// Why a job file could not be turned into a job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobspecError {
    /// The text is not HCL.
    #[error("{file}:{line}:{col}: {message}")]
    Syntax {
        /// The file name as given.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// The parser's message.
        message: String,
    },
    /// A problem at a place in the file.
    #[error("{file}:{line}:{col}: {path}: {message}")]
    At {
        /// The file name as given.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        col: usize,
        /// The block path, `job "web" → group "api"`.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A problem of the file as a whole or of a variable's value from outside the file.
    #[error("{file}: {message}")]
    File {
        /// The file name as given.
        file: String,
        /// What is wrong.
        message: String,
    },
}

impl JobspecError {
    /// The error without the names of the functions the parser wraps around expressions
    /// ([`super::funcs::CHARGE`], [`super::funcs::FOR_ORDER`]): the HCL library names the
    /// function a failure came from, and those are not the user's.
    fn without_internal_names(self) -> JobspecError {
        let clean = |m: String| {
            [super::funcs::CHARGE, super::funcs::FOR_ORDER]
                .iter()
                .fold(m, |m, f| {
                    m.replace(&format!("error calling function `{f}`: "), "")
                })
        };
        match self {
            JobspecError::Syntax {
                file,
                line,
                col,
                message,
            } => JobspecError::Syntax {
                file,
                line,
                col,
                message: clean(message),
            },
            JobspecError::At {
                file,
                line,
                col,
                path,
                message,
            } => JobspecError::At {
                file,
                line,
                col,
                path,
                message: clean(message),
            },
            JobspecError::File { file, message } => JobspecError::File {
                file,
                message: clean(message),
            },
        }
    }
}

/// Values for the file's variables from outside it, in Nomad's order of precedence: the
/// environment (`NOMAD_VAR_<name>`), then var files in order, then `-var` flags; the last one
/// wins.
#[derive(Debug, Clone, Default)]
pub struct VarInputs {
    /// `NOMAD_VAR_<name>` values, the prefix stripped. Undeclared ones are ignored.
    pub env: Vec<(String, String)>,
    /// Var files: (file name, HCL text of `name = value` lines).
    pub files: Vec<(String, String)>,
    /// `-var name=value` flags.
    pub flags: Vec<(String, String)>,
    /// Whether a var file or flag naming an undeclared variable is an error (the CLI's
    /// default, as `-hcl2-strict`); otherwise it is ignored.
    pub strict: bool,
    /// Whether `file`, `fileexists` and `templatefile` may read this machine's files (paths
    /// relative to the working directory): the CLI's parse, not the servers' (Nomad's
    /// `AllowFS`).
    pub allow_fs: bool,
    /// What the evaluation may spend before it is stopped with an error naming the limit.
    pub budget: super::budget::EvalBudget,
}

/// Parse an HCL job file into Nomad's JSON job object (without the `{"Job": …}` wrapper).
///
/// The HCL library panics on some arithmetic (`8/0`, `1 % 0`: a non-finite or undefined
/// number, found by the `hcl_job` fuzz target); such a panic is caught here and answered as
/// an error naming the file, so a job file can never take a server's request down with it.
/// The evaluation runs under `inputs.budget` ([`super::budget`]); it is synchronous and may
/// take up to the budget's wall time, so async callers run it on a blocking thread.
pub fn parse_job(file: &str, text: &str, inputs: &VarInputs) -> Result<Value, JobspecError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        super::budget::with_budget(inputs.budget, || parse_job_unguarded(file, text, inputs))
            .map_err(JobspecError::without_internal_names)
    }))
    .unwrap_or_else(|payload| {
        let raw = crate::util::panic_message(payload.as_ref()).unwrap_or_default();
        let reason = if raw.contains("is_finite") || raw.contains("divisor of zero") {
            "an arithmetic result is not a finite number (a division or modulo by zero?)".into()
        } else if raw.contains("overflow") {
            "an arithmetic result overflows".into()
        } else {
            format!("the HCL library failed: {raw}")
        };
        Err(JobspecError::File {
            file: file.to_string(),
            message: format!("cannot evaluate the job file: {reason}"),
        })
    })
}

fn parse_job_unguarded(file: &str, text: &str, inputs: &VarInputs) -> Result<Value, JobspecError> {
    if text.len() > MAX_SOURCE_BYTES {
        return Err(JobspecError::File {
            file: file.to_string(),
            message: format!(
                "the job file is {} bytes; the limit is {MAX_SOURCE_BYTES}",
                text.len()
            ),
        });
    }
    if let Some(problem) = nesting::scan(text, nesting::MAX_NESTING) {
        let (at, message) = match problem {
            nesting::Problem::TooDeep(at) => (
                at,
                format!(
                    "nesting deeper than {} levels (brackets, blocks, strings, unary operators)",
                    nesting::MAX_NESTING
                ),
            ),
            nesting::Problem::Unclosed(at, what) => (at, format!("invalid HCL: unclosed {what}")),
        };
        let (line, col) = line_col(text, at);
        return Err(JobspecError::Syntax {
            file: file.to_string(),
            line,
            col,
            message,
        });
    }
    let body: Body = text.parse().map_err(|e: hcl::edit::parser::Error| {
        let (line, col) = line_col(text, e.location().offset());
        JobspecError::Syntax {
            file: file.to_string(),
            line,
            col,
            message: format!("invalid HCL: {}", e.message()),
        }
    })?;
    let mut p = Parser {
        file,
        source: text,
        ctx: funcs::context(inputs.allow_fs),
        files: inputs.allow_fs,
        iterators: RefCell::new(Vec::new()),
    };
    p.run(&body, inputs)
}

struct Parser<'a> {
    file: &'a str,
    source: &'a str,
    ctx: Context<'static>,
    /// Whether the file functions may read files ([`VarInputs::allow_fs`]).
    files: bool,
    /// The iterators of the `dynamic` blocks being expanded, innermost last: name and
    /// `{key, value}`.
    iterators: RefCell<Vec<(String, Value)>>,
}

/// A block as the converter reads it: one written in the file, or one a `dynamic` block
/// makes (its content's body, at the `dynamic` block's place).
struct View<'b> {
    ident: &'b str,
    labels: Vec<String>,
    body: &'b Body,
    span: Option<std::ops::Range<usize>>,
}

impl<'b> View<'b> {
    fn of(b: &'b Block) -> Self {
        View {
            ident: b.ident.as_str(),
            labels: b.labels.iter().map(|l| l.as_str().to_string()).collect(),
            body: &b.body,
            span: b.span(),
        }
    }
}

impl Parser<'_> {
    fn run(&mut self, body: &Body, inputs: &VarInputs) -> Result<Value, JobspecError> {
        let mut declared: Vec<(&Block, String)> = Vec::new();
        let mut defaults: Vec<(String, EditExpr, Option<std::ops::Range<usize>>)> = Vec::new();
        let mut locals: Vec<(String, EditExpr, Option<std::ops::Range<usize>>)> = Vec::new();
        let mut job: Option<&Block> = None;
        for structure in body.iter() {
            match structure {
                Structure::Attribute(a) => {
                    return Err(self.at(
                        a.span(),
                        "",
                        format!("unknown argument {:?} at the top level", a.key.as_str()),
                    ))
                }
                Structure::Block(b) => match b.ident.as_str() {
                    "variable" => {
                        let name = self.one_label(b, "")?;
                        if declared.iter().any(|(_, n)| *n == name) {
                            return Err(self.at(
                                b.span(),
                                "",
                                format!("duplicate variable {name:?}"),
                            ));
                        }
                        declared.push((b, name));
                    }
                    "variables" => self.named_values(b, "variables", &mut defaults)?,
                    "locals" => self.named_values(b, "locals", &mut locals)?,
                    "job" => {
                        if job.is_some() {
                            return Err(self.at(b.span(), "", "Duplicate job block".into()));
                        }
                        job = Some(b);
                    }
                    other => {
                        return Err(self.at(
                            b.span(),
                            "",
                            format!("unknown block {other:?} at the top level"),
                        ))
                    }
                },
            }
        }
        let job = job.ok_or_else(|| JobspecError::File {
            file: self.file.to_string(),
            message: "Missing job block".into(),
        })?;
        self.resolve_variables(&declared, &defaults, inputs)?;
        self.resolve_locals(locals)?;
        let id = self.one_label(job, "")?;
        let path = format!("job {id:?}");
        let mut out = self.spec_body(&job.body, &JOB, &path)?;
        // The label is the ID and the Name unless `id` or `name` says otherwise.
        out.entry("ID").or_insert(Value::String(id.clone()));
        out.entry("Name").or_insert(Value::String(id));
        // Job-level tasks become groups of one task, ahead of the declared groups.
        if let Some(Value::Array(tasks)) = out.remove("Tasks") {
            let mut groups: Vec<Value> = tasks
                .into_iter()
                .map(|task| {
                    let mut g = Map::new();
                    g.insert("Name".into(), task["Name"].clone());
                    g.insert("Tasks".into(), Value::Array(vec![task]));
                    Value::Object(g)
                })
                .collect();
            if let Some(Value::Array(declared)) = out.remove("TaskGroups") {
                groups.extend(declared);
            }
            out.insert("TaskGroups".into(), Value::Array(groups));
        }
        vault_to_tasks(&mut out);
        Ok(Value::Object(out))
    }

    fn eval(
        &self,
        expr: &EditExpr,
        span: Option<std::ops::Range<usize>>,
        path: &str,
    ) -> Result<Value, JobspecError> {
        let iterators = self.iterators.borrow();
        let result = if iterators.is_empty() {
            parse_time(expr, &[]).evaluate(&self.ctx)
        } else {
            // Inside a `dynamic` block: its iterators are in scope too.
            let mut ctx = self.ctx.clone();
            for (name, value) in iterators.iter() {
                ctx.declare_var(name.as_str(), from_json(value.clone()));
            }
            let names: Vec<String> = iterators.iter().map(|(n, _)| n.clone()).collect();
            parse_time(expr, &names).evaluate(&ctx)
        };
        result
            .map(to_json)
            .map_err(|err| self.at(span, path, funcs::describe(&err)))
    }

    fn typed(
        &self,
        v: Value,
        ty: Ty,
        span: Option<std::ops::Range<usize>>,
        path: &str,
        key: &str,
    ) -> Result<Value, JobspecError> {
        let wrong = |want: &str, v: &Value| {
            self.at(
                span.clone(),
                path,
                format!("{key}: expected {want}, got {v}"),
            )
        };
        match ty {
            Ty::Str => match v {
                Value::String(_) => Ok(v),
                Value::Number(n) => Ok(Value::String(n.to_string())),
                Value::Bool(b) => Ok(Value::String(b.to_string())),
                other => Err(wrong("a string", &other)),
            },
            Ty::Int => match &v {
                Value::Number(n) if n.is_i64() || n.is_u64() => Ok(v),
                Value::String(s) => s
                    .trim()
                    .parse::<i64>()
                    .map(Value::from)
                    .map_err(|_| wrong("a whole number", &v)),
                _ => Err(wrong("a whole number", &v)),
            },
            Ty::Bool => match &v {
                Value::Bool(_) => Ok(v),
                Value::String(s) if s == "true" || s == "false" => Ok(Value::Bool(s == "true")),
                _ => Err(wrong("a bool", &v)),
            },
            Ty::Dur => match &v {
                Value::Number(n) if n.is_i64() || n.is_u64() => Ok(v),
                Value::String(s) => parse_go_duration(s)
                    .map(Value::from)
                    .ok_or_else(|| wrong("a duration such as \"30s\" or \"1h30m\"", &v)),
                _ => Err(wrong("a duration such as \"30s\"", &v)),
            },
            Ty::StrList => match v {
                Value::Array(items) => items
                    .into_iter()
                    .map(|i| self.typed(i, Ty::Str, span.clone(), path, key))
                    .collect::<Result<Vec<_>, _>>()
                    .map(Value::Array),
                other => Err(wrong("a list of strings", &other)),
            },
            Ty::IntList => match v {
                Value::Array(items) => items
                    .into_iter()
                    .map(|i| self.typed(i, Ty::Int, span.clone(), path, key))
                    .collect::<Result<Vec<_>, _>>()
                    .map(Value::Array),
                other => Err(wrong("a list of whole numbers", &other)),
            },
        }
    }

    /// An error at a place of the file.
    fn at(
        &self,
        span: Option<std::ops::Range<usize>>,
        path: &str,
        message: String,
    ) -> JobspecError {
        let (line, col) = span
            .map(|s| line_col(self.source, s.start))
            .unwrap_or((0, 0));
        JobspecError::At {
            file: self.file.to_string(),
            line,
            col,
            path: if path.is_empty() {
                "(top level)".into()
            } else {
                path.to_string()
            },
            message,
        }
    }
}

/// 1-based line and column of an offset of `source`.
fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(source.len());
    let before = &source[..floor_char_boundary(source, offset)];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// `snake_case` → `PascalCase`, with Nomad's initialisms (`id` → `ID`, `mb` → `MB`).
fn pascal(snake: &str) -> String {
    snake
        .split('_')
        .map(|w| match w {
            "id" | "cpu" | "mb" | "ui" | "tls" | "url" | "ttl" | "dns" | "ip" | "csi" | "numa" => {
                w.to_ascii_uppercase()
            }
            _ => {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            }
        })
        .collect()
}

/// A Go duration (`"1h30m"`, `"250ms"`, `"1.5s"`, `"0"`) in nanoseconds.
pub fn parse_go_duration(s: &str) -> Option<i64> {
    crate::util::go::parse_go_duration(s).and_then(|d| i64::try_from(d.as_nanos()).ok())
}

fn to_json(v: hcl::Value) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn from_json(v: Value) -> hcl::Value {
    hcl::to_value(v).unwrap_or(hcl::Value::Null)
}

mod blocks;
mod interpolate;
use crate::util::hcl_nesting as nesting;
mod variables;

/// A job's or group's `vault` block is the default of its tasks, as in Nomad's parser: a task
/// without its own gets its group's, else the job's, and neither stays in the job (Nomad's
/// API has `Vault` on tasks only).
fn vault_to_tasks(job: &mut Map<String, Value>) {
    let job_vault = job.remove("Vault");
    let Some(Value::Array(groups)) = job.get_mut("TaskGroups") else {
        return;
    };
    for group in groups.iter_mut().filter_map(Value::as_object_mut) {
        let group_vault = group.remove("Vault");
        let Some(default) = group_vault.as_ref().or(job_vault.as_ref()) else {
            continue;
        };
        let Some(Value::Array(tasks)) = group.get_mut("Tasks") else {
            continue;
        };
        for task in tasks.iter_mut().filter_map(Value::as_object_mut) {
            if task.get("Vault").is_none_or(Value::is_null) {
                task.insert("Vault".into(), default.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests;
