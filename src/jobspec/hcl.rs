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
//! argument "comand"`), as Nomad's parser does. Blocks teamster does not act on (`update`,
//! `periodic`, `network`, `service`, …) are converted to their JSON field all the same, so
//! that [`super::unsupported_fields`] refuses them by name rather than losing them here.

use std::cell::RefCell;
use std::collections::BTreeMap;

use hcl::edit::expr::Expression as EditExpr;
use hcl::edit::structure::{Block, Body, Structure};
use hcl::edit::Span;
use hcl::eval::{Context, Evaluate};
use serde_json::{Map, Value};

use super::funcs;
use super::schema::{Content, Nested, Place, Spec, Ty, JOB, SCALING};

/// The largest job file read (Nomad's `job_max_source_size` is 1 MB).
pub const MAX_SOURCE_BYTES: usize = 1 << 20;

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
}

/// Parse an HCL job file into Nomad's JSON job object (without the `{"Job": …}` wrapper).
pub fn parse_job(file: &str, text: &str, inputs: &VarInputs) -> Result<Value, JobspecError> {
    if text.len() > MAX_SOURCE_BYTES {
        return Err(JobspecError::File {
            file: file.to_string(),
            message: format!(
                "the job file is {} bytes; the limit is {MAX_SOURCE_BYTES}",
                text.len()
            ),
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

/// The names an expression may refer to at parse time: `var`, `local` and the variables of
/// the for-expressions and `%{for}` directives around it.
type Scope = Vec<String>;

/// `expr` with every reference to a name not in `scope` (`${node.unique.name}`,
/// `${attr.kernel.name}`, `${NOMAD_PORT_http}`, `${meta.rack}`, or a bare `node.class`)
/// replaced by the string `"${<its text>}"`, so that it stays in the value for the client to
/// fill in at run time, as Nomad's parser does with undefined variables. References to names
/// in scope are evaluated.
fn keep_runtime_interpolations(expr: &hcl::Expression, scope: &mut Scope) -> hcl::Expression {
    use hcl::expr::{Operation, TemplateExpr, TraversalOperator};
    use hcl::Expression as E;
    if let Some(kept) = runtime_reference(expr, scope) {
        // A computed index after the reference may still name things in scope.
        return match kept {
            E::Traversal(mut t) => {
                for op in &mut t.operators {
                    if let TraversalOperator::Index(i) = op {
                        *i = keep_runtime_interpolations(i, scope);
                    }
                }
                E::Traversal(t)
            }
            other => other,
        };
    }
    let mut e = expr.clone();
    match &mut e {
        E::Array(items) => {
            for i in items {
                *i = keep_runtime_interpolations(i, scope);
            }
        }
        E::Object(map) => {
            *map = std::mem::take(map)
                .into_iter()
                .map(|(k, v)| {
                    let k = match k {
                        hcl::ObjectKey::Expression(k) => {
                            hcl::ObjectKey::Expression(keep_runtime_interpolations(&k, scope))
                        }
                        other => other,
                    };
                    (k, keep_runtime_interpolations(&v, scope))
                })
                .collect();
        }
        E::TemplateExpr(t) => {
            let Ok(mut template) = hcl::Template::from_expr(t) else {
                // Left for the evaluation to report.
                return e;
            };
            if !keep_in_template(&mut template, scope) {
                return e;
            }
            let text = template.to_string();
            **t = match &**t {
                TemplateExpr::QuotedString(_) => TemplateExpr::QuotedString(text),
                TemplateExpr::Heredoc(h) => {
                    let mut h = h.clone();
                    h.template = text;
                    TemplateExpr::Heredoc(h)
                }
            };
        }
        E::Traversal(t) => {
            t.expr = keep_runtime_interpolations(&t.expr, scope);
            for op in &mut t.operators {
                if let TraversalOperator::Index(i) = op {
                    *i = keep_runtime_interpolations(i, scope);
                }
            }
        }
        E::FuncCall(f) => {
            for a in &mut f.args {
                *a = keep_runtime_interpolations(a, scope);
            }
        }
        E::Parenthesis(inner) => **inner = keep_runtime_interpolations(inner, scope),
        E::Conditional(c) => {
            c.cond_expr = keep_runtime_interpolations(&c.cond_expr, scope);
            c.true_expr = keep_runtime_interpolations(&c.true_expr, scope);
            c.false_expr = keep_runtime_interpolations(&c.false_expr, scope);
        }
        E::Operation(op) => match &mut **op {
            Operation::Unary(u) => u.expr = keep_runtime_interpolations(&u.expr, scope),
            Operation::Binary(b) => {
                b.lhs_expr = keep_runtime_interpolations(&b.lhs_expr, scope);
                b.rhs_expr = keep_runtime_interpolations(&b.rhs_expr, scope);
            }
        },
        E::ForExpr(f) => {
            f.collection_expr =
                in_key_order(keep_runtime_interpolations(&f.collection_expr, scope));
            let before = scope.len();
            scope.extend(f.key_var.iter().map(|k| k.to_string()));
            scope.push(f.value_var.to_string());
            if let Some(k) = &mut f.key_expr {
                *k = keep_runtime_interpolations(k, scope);
            }
            f.value_expr = keep_runtime_interpolations(&f.value_expr, scope);
            if let Some(c) = &mut f.cond_expr {
                *c = keep_runtime_interpolations(c, scope);
            }
            scope.truncate(before);
        }
        _ => {}
    }
    e
}

/// A `for` collection iterated in key order when it is a map, as cty iterates maps (HCL's
/// evaluation keeps the order they were written in).
fn in_key_order(collection: hcl::Expression) -> hcl::Expression {
    hcl::Expression::FuncCall(Box::new(
        hcl::expr::FuncCall::builder(funcs::FOR_ORDER)
            .arg(collection)
            .build(),
    ))
}

/// A job file expression as it is evaluated: runtime interpolations kept as text. `var`,
/// `local` and `iterators` (of the `dynamic` blocks around it) are in scope.
fn parse_time(expr: &EditExpr, iterators: &[String]) -> hcl::Expression {
    let e: hcl::Expression = expr.clone().into();
    let mut scope: Scope = vec!["var".into(), "local".into()];
    scope.extend(iterators.iter().cloned());
    keep_runtime_interpolations(&e, &mut scope)
}

/// [`keep_runtime_interpolations`] in a template; whether anything changed.
fn keep_in_template(template: &mut hcl::Template, scope: &mut Scope) -> bool {
    use hcl::template::{Directive, Element};
    let mut changed = false;
    for element in template.elements_mut() {
        match element {
            Element::Literal(_) => {}
            Element::Interpolation(i) => {
                let new = keep_runtime_interpolations(&i.expr, scope);
                changed |= new != i.expr;
                i.expr = new;
            }
            Element::Directive(Directive::If(d)) => {
                let new = keep_runtime_interpolations(&d.cond_expr, scope);
                changed |= new != d.cond_expr;
                d.cond_expr = new;
                changed |= keep_in_template(&mut d.true_template, scope);
                if let Some(f) = &mut d.false_template {
                    changed |= keep_in_template(f, scope);
                }
            }
            Element::Directive(Directive::For(d)) => {
                let new = in_key_order(keep_runtime_interpolations(&d.collection_expr, scope));
                changed |= new != d.collection_expr;
                d.collection_expr = new;
                let before = scope.len();
                scope.extend(d.key_var.iter().map(|k| k.to_string()));
                scope.push(d.value_var.to_string());
                changed |= keep_in_template(&mut d.template, scope);
                scope.truncate(before);
            }
        }
    }
    changed
}

/// If `expr` is a reference (`a`, `a.b.c`, `a["b"]`, `a.0`) to a name not in scope: the
/// expression to evaluate instead, the string `"${<its text>}"`. Like HCL, a reference ends
/// at the first splat or computed index (`a.b[local.i]`), which then applies to that string.
fn runtime_reference(expr: &hcl::Expression, scope: &Scope) -> Option<hcl::Expression> {
    use hcl::expr::{Traversal, TraversalOperator as Op};
    use hcl::Expression as E;
    let (root, operators) = match expr {
        E::Variable(v) => (v, &[][..]),
        E::Traversal(t) => match &t.expr {
            E::Variable(v) => (v, t.operators.as_slice()),
            _ => return None,
        },
        _ => return None,
    };
    if scope.iter().any(|s| s == root.as_str()) {
        return None;
    }
    let static_len = operators
        .iter()
        .take_while(|op| match op {
            Op::GetAttr(_) | Op::LegacyIndex(_) => true,
            Op::Index(i) => matches!(i, E::Number(_) | E::String(_)),
            Op::AttrSplat | Op::FullSplat => false,
        })
        .count();
    let (reference, rest) = operators.split_at(static_len);
    let reference = if reference.is_empty() {
        E::Variable(root.clone())
    } else {
        E::Traversal(Box::new(Traversal::new(
            E::Variable(root.clone()),
            reference.to_vec(),
        )))
    };
    let text = E::String(format!("${{{}}}", hcl::format::to_string(&reference).ok()?));
    Some(if rest.is_empty() {
        text
    } else {
        E::Traversal(Box::new(Traversal::new(text, rest.to_vec())))
    })
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
        Ok(Value::Object(out))
    }

    /// The `name = expr` lines of a `variables` or `locals` block, appended to `into`; a
    /// nested block or a name given twice (in any block of the kind) is an error.
    fn named_values(
        &self,
        b: &Block,
        what: &str,
        into: &mut Vec<(String, EditExpr, Option<std::ops::Range<usize>>)>,
    ) -> Result<(), JobspecError> {
        for s in b.body.iter() {
            match s {
                Structure::Attribute(a) => {
                    let name = a.key.as_str().to_string();
                    if into.iter().any(|(n, _, _)| *n == name) {
                        return Err(self.at(a.span(), what, format!("duplicate name {name:?}")));
                    }
                    into.push((name, a.value.clone(), a.span()));
                }
                Structure::Block(inner) => {
                    return Err(self.at(
                        inner.span(),
                        what,
                        format!("unexpected block {:?}", inner.ident.as_str()),
                    ))
                }
            }
        }
        Ok(())
    }

    fn resolve_variables(
        &mut self,
        declared: &[(&Block, String)],
        defaults: &[(String, EditExpr, Option<std::ops::Range<usize>>)],
        inputs: &VarInputs,
    ) -> Result<(), JobspecError> {
        let mut values: BTreeMap<String, Value> = BTreeMap::new();
        let mut types: BTreeMap<String, String> = BTreeMap::new();
        let mut validations: Vec<(&str, &Block)> = Vec::new();
        for (block, name) in declared {
            let path = format!("variable {name:?}");
            for s in block.body.iter() {
                match s {
                    Structure::Attribute(a) => match a.key.as_str() {
                        "default" => {
                            let v = self.eval(&a.value, a.span(), &path)?;
                            values.insert(name.clone(), v);
                        }
                        "type" => {
                            let expr: hcl::Expression = a.value.clone().into();
                            let text = hcl::format::to_string(&expr).unwrap_or_default();
                            let text = text.trim().to_string();
                            let kind = text.split('(').next().unwrap_or_default().trim();
                            if !KNOWN_TYPES.contains(&kind) {
                                return Err(self.at(
                                    a.span(),
                                    &path,
                                    format!("unknown type {text:?}"),
                                ));
                            }
                            types.insert(name.clone(), text);
                        }
                        // Documentation only: nothing to act on.
                        "description" => {}
                        other => {
                            return Err(self.at(
                                a.span(),
                                &path,
                                format!("unknown argument {other:?}"),
                            ))
                        }
                    },
                    Structure::Block(b) if b.ident.as_str() == "validation" => {
                        validations.push((name, b));
                    }
                    Structure::Block(b) => {
                        return Err(self.at(
                            b.span(),
                            &path,
                            format!("unknown block {:?}", b.ident.as_str()),
                        ))
                    }
                }
            }
        }
        // `variables { name = default }` declares untyped variables with their defaults.
        for (name, expr, span) in defaults {
            let v = self.eval(expr, span.clone(), "variables")?;
            values.insert(name.clone(), v);
        }
        let declared_names: Vec<String> = declared.iter().map(|(_, n)| n.clone()).collect();
        let all_declared = |n: &str| {
            declared_names.iter().any(|d| d == n) || defaults.iter().any(|(d, _, _)| d == n)
        };
        for (name, raw) in &inputs.env {
            if all_declared(name) {
                let v = self.raw_value(name, raw, types.get(name), "NOMAD_VAR_")?;
                values.insert(name.clone(), v);
            }
        }
        for (file, text) in &inputs.files {
            let body: Body =
                text.parse()
                    .map_err(|e: hcl::edit::parser::Error| JobspecError::Syntax {
                        file: file.clone(),
                        line: e.location().line(),
                        col: e.location().column(),
                        message: format!("invalid HCL: {}", e.message()),
                    })?;
            for s in body.iter() {
                let Structure::Attribute(a) = s else {
                    return Err(JobspecError::File {
                        file: file.clone(),
                        message: "a var file holds only `name = value` lines".into(),
                    });
                };
                let name = a.key.as_str().to_string();
                if !all_declared(&name) {
                    if inputs.strict {
                        return Err(JobspecError::File {
                            file: file.clone(),
                            message: format!(
                                "Undefined variable {name:?}: it is not declared in the job file"
                            ),
                        });
                    }
                    continue;
                }
                let expr: hcl::Expression = a.value.clone().into();
                let v =
                    expr.evaluate(&funcs::context(self.files))
                        .map_err(|e| JobspecError::File {
                            file: file.clone(),
                            message: format!("{name}: {e}"),
                        })?;
                values.insert(name, to_json(v));
            }
        }
        for (name, raw) in &inputs.flags {
            if !all_declared(name) {
                if inputs.strict {
                    return Err(JobspecError::File {
                        file: self.file.to_string(),
                        message: format!(
                            "-var {name}: Undefined variable {name:?}: it is not declared in the job file"
                        ),
                    });
                }
                continue;
            }
            let v = self.raw_value(name, raw, types.get(name), "-var ")?;
            values.insert(name.clone(), v);
        }
        for (block, name) in declared {
            if let (Some(ty), Some(v)) = (types.get(name), values.get(name)) {
                if !fits(ty, v) {
                    return Err(self.at(
                        block.span(),
                        &format!("variable {name:?}"),
                        format!("the value {v} is not of type {ty}"),
                    ));
                }
            }
            if !values.contains_key(name) {
                return Err(self.at(
                    block.span(),
                    &format!("variable {name:?}"),
                    "Unset variable: give it a default, -var, a var file or NOMAD_VAR_".to_string()
                        + name,
                ));
            }
        }
        let object: hcl::Map<String, hcl::Value> =
            values.into_iter().map(|(k, v)| (k, from_json(v))).collect();
        self.ctx.declare_var("var", hcl::Value::Object(object));
        for (name, block) in validations {
            self.validate_variable(name, block)?;
        }
        Ok(())
    }

    /// A variable's `validation { condition = …, error_message = … }`, checked once every
    /// variable has its value: a condition that is false fails the parse with the message.
    fn validate_variable(&self, name: &str, block: &Block) -> Result<(), JobspecError> {
        let path = format!("variable {name:?} → validation");
        let mut condition = None;
        let mut message = None;
        for s in block.body.iter() {
            match s {
                Structure::Attribute(a) if a.key.as_str() == "condition" => condition = Some(a),
                Structure::Attribute(a) if a.key.as_str() == "error_message" => message = Some(a),
                Structure::Attribute(a) => {
                    return Err(self.at(
                        a.span(),
                        &path,
                        format!("unknown argument {:?}", a.key.as_str()),
                    ))
                }
                Structure::Block(b) => {
                    return Err(self.at(
                        b.span(),
                        &path,
                        format!("unknown block {:?}", b.ident.as_str()),
                    ))
                }
            }
        }
        let (Some(condition), Some(message)) = (condition, message) else {
            return Err(self.at(
                block.span(),
                &path,
                "a validation needs both \"condition\" and \"error_message\"".into(),
            ));
        };
        let message = self.eval(&message.value, message.span(), &path)?;
        let message = self.typed(message, Ty::Str, None, &path, "error_message")?;
        match self.eval(&condition.value, condition.span(), &path)? {
            Value::Bool(true) => Ok(()),
            Value::Bool(false) => Err(self.at(
                condition.span(),
                &path,
                format!(
                    "Invalid value for variable: {}",
                    message.as_str().unwrap_or_default()
                ),
            )),
            other => Err(self.at(
                condition.span(),
                &path,
                format!("condition: expected a bool, got {other}"),
            )),
        }
    }

    /// A variable's value given as text from outside the file: literal for strings, numbers
    /// and untyped variables, HCL for lists, maps and objects.
    fn raw_value(
        &self,
        name: &str,
        raw: &str,
        ty: Option<&String>,
        origin: &str,
    ) -> Result<Value, JobspecError> {
        let fail = |message: String| JobspecError::File {
            file: self.file.to_string(),
            message: format!("{origin}{name}: {message}"),
        };
        match ty.map(String::as_str) {
            None | Some("string") | Some("any") => Ok(Value::String(raw.to_string())),
            Some("number") => raw
                .trim()
                .parse::<serde_json::Number>()
                .map(Value::Number)
                .map_err(|_| fail(format!("{raw:?} is not a number"))),
            Some("bool") => match raw.trim() {
                "true" => Ok(Value::Bool(true)),
                "false" => Ok(Value::Bool(false)),
                _ => Err(fail(format!("{raw:?} is not a bool"))),
            },
            Some(_) => {
                let body: Body = format!("v = {raw}\n")
                    .parse()
                    .map_err(|e: hcl::edit::parser::Error| fail(e.to_string()))?;
                let Some(Structure::Attribute(a)) = body.iter().next() else {
                    return Err(fail("no value".into()));
                };
                let expr: hcl::Expression = a.value.clone().into();
                expr.evaluate(&funcs::context(self.files))
                    .map(to_json)
                    .map_err(|e| fail(e.to_string()))
            }
        }
    }

    fn resolve_locals(
        &mut self,
        mut pending: Vec<(String, EditExpr, Option<std::ops::Range<usize>>)>,
    ) -> Result<(), JobspecError> {
        let mut done: hcl::Map<String, hcl::Value> = hcl::Map::new();
        while !pending.is_empty() {
            self.ctx
                .declare_var("local", hcl::Value::Object(done.clone()));
            let before = pending.len();
            let mut last_error = None;
            let mut still = Vec::new();
            for (name, expr, span) in pending {
                let e = parse_time(&expr, &[]);
                match e.evaluate(&self.ctx) {
                    Ok(v) => {
                        done.insert(name, v);
                    }
                    Err(err) => {
                        last_error =
                            Some(self.at(span.clone(), "locals", format!("{name}: {err}")));
                        still.push((name, expr, span));
                    }
                }
            }
            pending = still;
            if pending.len() == before {
                return Err(last_error.expect("an error for every unresolved local"));
            }
        }
        self.ctx.declare_var("local", hcl::Value::Object(done));
        Ok(())
    }

    /// The block's one label.
    fn one_label(&self, b: &Block, path: &str) -> Result<String, JobspecError> {
        self.view_label(&View::of(b), path)
    }

    fn view_label(&self, b: &View, path: &str) -> Result<String, JobspecError> {
        match b.labels.as_slice() {
            [label] => Ok(label.clone()),
            [] => Err(self.at(
                b.span.clone(),
                path,
                format!("block {:?} needs a label (its name)", b.ident),
            )),
            _ => Err(self.at(
                b.span.clone(),
                path,
                format!("block {:?} takes one label", b.ident),
            )),
        }
    }

    fn spec_body(
        &self,
        body: &Body,
        spec: &Spec,
        path: &str,
    ) -> Result<Map<String, Value>, JobspecError> {
        let mut out = Map::new();
        for s in body.iter() {
            match s {
                Structure::Attribute(a) => {
                    let key = a.key.as_str();
                    let Some((_, json, ty)) = spec.args.iter().find(|(h, _, _)| *h == key) else {
                        // `env = { … }` / `meta = { … }`: a map of strings may be written as
                        // an argument too (for keys a block cannot spell, `"log.level"`).
                        let map_block = spec
                            .blocks
                            .iter()
                            .find(|n| n.hcl == key && matches!(n.content, Content::StrMap));
                        let Some(nested) = map_block else {
                            return Err(self.at(
                                a.span(),
                                path,
                                format!("unknown argument {key:?}"),
                            ));
                        };
                        if out.contains_key(nested.json) {
                            return Err(self.at(
                                a.span(),
                                path,
                                format!("{key:?} may not be defined more than once"),
                            ));
                        }
                        let v = self.eval(&a.value, a.span(), path)?;
                        let Value::Object(map) = v else {
                            return Err(self.at(
                                a.span(),
                                path,
                                format!("{key}: expected a map of strings, got {v}"),
                            ));
                        };
                        let mut strings = Map::new();
                        for (k, v) in map {
                            let v =
                                self.typed(v, Ty::Str, a.span(), path, &format!("{key}.{k}"))?;
                            strings.insert(k, v);
                        }
                        out.insert(nested.json.to_string(), Value::Object(strings));
                        continue;
                    };
                    if out.contains_key(*json) {
                        return Err(self.at(
                            a.span(),
                            path,
                            format!("argument {key:?} given twice"),
                        ));
                    }
                    let v = self.eval(&a.value, a.span(), path)?;
                    let v = self.typed(v, *ty, a.span(), path, key)?;
                    out.insert((*json).to_string(), v);
                }
                Structure::Block(b) => {
                    let ident = b.ident.as_str();
                    if ident == "dynamic" {
                        let kind = self.one_label(b, path)?;
                        let Some(nested) = spec.blocks.iter().find(|n| n.hcl == kind) else {
                            return Err(self.at(
                                b.span(),
                                path,
                                format!("unknown block {kind:?} in a dynamic block"),
                            ));
                        };
                        self.each_dynamic(b, &kind, path, |view| {
                            self.nested(&view, nested, path, &mut out)
                        })?;
                        continue;
                    }
                    let Some(nested) = spec.blocks.iter().find(|n| n.hcl == ident) else {
                        return Err(self.at(b.span(), path, format!("unknown block {ident:?}")));
                    };
                    self.nested(&View::of(b), nested, path, &mut out)?;
                }
            }
        }
        Ok(out)
    }

    fn nested(
        &self,
        b: &View,
        nested: &Nested,
        path: &str,
        out: &mut Map<String, Value>,
    ) -> Result<(), JobspecError> {
        let ident = b.ident;
        let label = match nested.label {
            Some(_) => Some(self.view_label(b, path)?),
            None if nested.place == Place::ByLabel => Some(self.view_label(b, path)?),
            None if matches!(nested.content, Content::VerticalScaling) => {
                Some(self.view_label(b, path)?)
            }
            None if !b.labels.is_empty() && !matches!(nested.content, Content::Generic) => {
                return Err(self.at(
                    b.span.clone(),
                    path,
                    format!("block {ident:?} takes no label"),
                ))
            }
            None => None,
        };
        let here = match &label {
            Some(l) => format!("{path} → {ident} {l:?}"),
            None => format!("{path} → {ident}"),
        };
        let mut value = match nested.content {
            Content::Spec(spec) => Value::Object(self.spec_body(b.body, spec, &here)?),
            Content::StrMap => Value::Object(self.free_map(b.body, &here, true)?),
            Content::AnyMap => Value::Object(self.free_map(b.body, &here, false)?),
            Content::Generic => Value::Object(self.generic(b.body, &here)?),
            Content::Constraint { weight } => {
                Value::Object(self.constraint(b.body, &here, weight)?)
            }
            Content::VerticalScaling => {
                Value::Object(self.vertical_scaling(b, label.as_deref(), &here, path, out)?)
            }
        };
        if let (Some(field), Some(l), Value::Object(map)) = (nested.label, &label, &mut value) {
            map.insert(field.to_string(), Value::String(l.clone()));
        }
        // The defaults Nomad's parser fills in and the fields it moves (constraints and
        // affinities get theirs in `constraint`).
        if let (Content::Spec(spec), Value::Object(map)) = (nested.content, &mut value) {
            if let Some(fixup) = spec.fixup {
                fixup(map);
            }
        }
        match nested.place {
            Place::One => {
                if out.contains_key(nested.json) {
                    return Err(self.at(
                        b.span.clone(),
                        path,
                        format!("only one {ident:?} block is allowed"),
                    ));
                }
                out.insert(nested.json.to_string(), value);
            }
            Place::List => {
                let list = out
                    .entry(nested.json)
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(items) = list {
                    if let Some(field) = nested.label {
                        if items.iter().any(|i| i[field] == value[field]) {
                            return Err(self.at(
                                b.span.clone(),
                                path,
                                format!("duplicate {ident} {:?}", label.unwrap_or_default()),
                            ));
                        }
                    }
                    items.push(value);
                }
            }
            Place::ByLabel => {
                let map = out
                    .entry(nested.json)
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(m) = map {
                    m.insert(label.unwrap_or_default(), value);
                }
            }
        }
        Ok(())
    }

    /// A task's `scaling "cpu"` or `scaling "mem"` block (the label, in any case, gives the
    /// Type `vertical_cpu` or `vertical_mem`; a `type` that says otherwise is an error, and so
    /// is a second block of a label). `out` is the task so far.
    fn vertical_scaling(
        &self,
        b: &View,
        label: Option<&str>,
        here: &str,
        path: &str,
        out: &Map<String, Value>,
    ) -> Result<Map<String, Value>, JobspecError> {
        let label = label.unwrap_or_default().to_ascii_lowercase();
        let ty = match label.as_str() {
            "cpu" => "vertical_cpu",
            "mem" => "vertical_mem",
            _ => {
                return Err(self.at(
                    b.span.clone(),
                    path,
                    "scaling policy name must be \"cpu\" or \"mem\"".into(),
                ))
            }
        };
        if let Some(Value::Array(items)) = out.get("ScalingPolicies") {
            if items.iter().any(|i| i["Type"] == ty) {
                return Err(self.at(
                    b.span.clone(),
                    path,
                    format!("Duplicate scaling {label:?} block"),
                ));
            }
        }
        let mut map = self.spec_body(b.body, &SCALING, here)?;
        match map.get("Type").and_then(Value::as_str) {
            None => {
                map.insert("Type".into(), Value::String(ty.into()));
            }
            Some(given) if given == ty => {}
            Some(given) => {
                return Err(self.at(
                    b.span.clone(),
                    here,
                    format!("Invalid policy type, expected {ty:?} but found {given:?}"),
                ))
            }
        }
        Ok(map)
    }

    /// Expands `dynamic "<kind>" { for_each = …, iterator = …, labels = […], content { … } }`
    /// as HCL does: one `<kind>` block per element of `for_each` (a list, a set or a map),
    /// with the content's body, while the iterator (named `iterator`, else `<kind>`) is
    /// `{key, value}` of that element; `f` converts each block.
    fn each_dynamic(
        &self,
        b: &Block,
        kind: &str,
        path: &str,
        mut f: impl FnMut(View) -> Result<(), JobspecError>,
    ) -> Result<(), JobspecError> {
        let here = format!("{path} → dynamic {kind:?}");
        let mut for_each = None;
        let mut labels = None;
        let mut iterator = kind.to_string();
        let mut content: Option<&Block> = None;
        for s in b.body.iter() {
            match s {
                Structure::Attribute(a) => match a.key.as_str() {
                    "for_each" => for_each = Some(a),
                    "labels" => labels = Some(a),
                    "iterator" => {
                        let e: hcl::Expression = a.value.clone().into();
                        let hcl::Expression::Variable(name) = e else {
                            return Err(self.at(
                                a.span(),
                                &here,
                                "iterator: expected a bare name".into(),
                            ));
                        };
                        iterator = name.to_string();
                    }
                    other => {
                        return Err(self.at(a.span(), &here, format!("unknown argument {other:?}")))
                    }
                },
                Structure::Block(c) if c.ident.as_str() == "content" => {
                    if content.is_some() {
                        return Err(self.at(
                            c.span(),
                            &here,
                            "only one \"content\" block is allowed".into(),
                        ));
                    }
                    content = Some(c);
                }
                Structure::Block(c) => {
                    return Err(self.at(
                        c.span(),
                        &here,
                        format!("unknown block {:?}", c.ident.as_str()),
                    ))
                }
            }
        }
        let Some(for_each) = for_each else {
            return Err(self.at(
                b.span(),
                &here,
                "missing required argument \"for_each\"".into(),
            ));
        };
        let Some(content) = content else {
            return Err(self.at(b.span(), &here, "missing required block \"content\"".into()));
        };
        if iterator == "var" || iterator == "local" {
            return Err(self.at(
                b.span(),
                &here,
                format!("iterator: {iterator:?} would hide the file's {iterator}.* values"),
            ));
        }
        let elements: Vec<(Value, Value)> =
            match self.eval(&for_each.value, for_each.span(), &here)? {
                Value::Array(items) => items
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| (Value::from(i), v))
                    .collect(),
                Value::Object(map) => map
                    .into_iter()
                    .map(|(k, v)| (Value::String(k), v))
                    .collect(),
                other => {
                    return Err(self.at(
                        for_each.span(),
                        &here,
                        format!("for_each: expected a list, a set or a map, got {other}"),
                    ))
                }
            };
        for (key, value) in elements {
            let mut element = Map::new();
            element.insert("key".into(), key);
            element.insert("value".into(), value);
            self.iterators
                .borrow_mut()
                .push((iterator.clone(), Value::Object(element)));
            let result = labels
                .map(|a| {
                    let v = self.eval(&a.value, a.span(), &here)?;
                    match self.typed(v, Ty::StrList, a.span(), &here, "labels")? {
                        Value::Array(items) => Ok(items
                            .into_iter()
                            .filter_map(|l| l.as_str().map(str::to_string))
                            .collect()),
                        _ => Ok(Vec::new()),
                    }
                })
                .unwrap_or(Ok(Vec::new()))
                .and_then(|labels| {
                    f(View {
                        ident: kind,
                        labels,
                        body: &content.body,
                        span: b.span(),
                    })
                });
            self.iterators.borrow_mut().pop();
            result?;
        }
        Ok(())
    }

    /// `meta`, `env` (strings) and `config` (any value; nested blocks as lists of objects).
    fn free_map(
        &self,
        body: &Body,
        path: &str,
        strings: bool,
    ) -> Result<Map<String, Value>, JobspecError> {
        let mut out = Map::new();
        for s in body.iter() {
            match s {
                Structure::Attribute(a) => {
                    let key = a.key.as_str();
                    let v = self.eval(&a.value, a.span(), path)?;
                    let v = if strings {
                        self.typed(v, Ty::Str, a.span(), path, key)?
                    } else {
                        v
                    };
                    out.insert(key.to_string(), v);
                }
                Structure::Block(b) if !strings && b.ident.as_str() == "dynamic" => {
                    let kind = self.one_label(b, path)?;
                    self.each_dynamic(b, &kind, path, |view| {
                        self.free_map_block(&view, path, &mut out)
                    })?;
                }
                Structure::Block(b) if !strings => {
                    self.free_map_block(&View::of(b), path, &mut out)?;
                }
                Structure::Block(b) => {
                    return Err(self.at(
                        b.span(),
                        path,
                        format!(
                            "unexpected block {:?}: this map takes only arguments",
                            b.ident.as_str()
                        ),
                    ))
                }
            }
        }
        Ok(out)
    }

    /// A block in a free map: appended to the list under its name, its labels nesting as
    /// Nomad's HCL decoding writes them: `check "cpu" { … }` → "check": [{"cpu": [{…}]}].
    fn free_map_block(
        &self,
        b: &View,
        path: &str,
        out: &mut Map<String, Value>,
    ) -> Result<(), JobspecError> {
        let inner = self.free_map(b.body, &format!("{path} → {}", b.ident), false)?;
        let mut value = Value::Object(inner);
        for label in b.labels.iter().rev() {
            let mut wrap = Map::new();
            wrap.insert(label.clone(), Value::Array(vec![value]));
            value = Value::Object(wrap);
        }
        let list = out
            .entry(b.ident)
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(items) = list {
            items.push(value);
        }
        Ok(())
    }

    /// A block teamster refuses: kept whole, names in PascalCase, so the check names it.
    fn generic(&self, body: &Body, path: &str) -> Result<Map<String, Value>, JobspecError> {
        let mut out = Map::new();
        for s in body.iter() {
            match s {
                Structure::Attribute(a) => {
                    let v = self.eval(&a.value, a.span(), path)?;
                    out.insert(pascal(a.key.as_str()), v);
                }
                Structure::Block(b) => {
                    let inner = self.generic(&b.body, &format!("{path} → {}", b.ident.as_str()))?;
                    let list = out
                        .entry(pascal(b.ident.as_str()))
                        .or_insert_with(|| Value::Array(Vec::new()));
                    if let Value::Array(items) = list {
                        items.push(Value::Object(inner));
                    }
                }
            }
        }
        Ok(out)
    }

    /// `constraint` / `affinity`: `attribute`, `operator`, `value` (and `weight`), or one of
    /// the shortcuts `distinct_hosts = <bool>`, `distinct_property = "<attr>"`, `regexp`,
    /// `version`, `semver`, `set_contains`, `set_contains_any`, `set_contains_all`. As in
    /// Nomad's parser, a shortcut overrides `operator`/`value` whatever the order they are
    /// written in (`distinct_hosts` after the others, `distinct_property` last), an empty
    /// shortcut string is ignored, `distinct_hosts` sets RTarget to "true" or "false", and
    /// a block that ends without an operator gets Operand "=".
    fn constraint(
        &self,
        body: &Body,
        path: &str,
        weight: bool,
    ) -> Result<Map<String, Value>, JobspecError> {
        const SHORTCUTS: &[&str] = &[
            "version",
            "semver",
            "regexp",
            "set_contains_any",
            "set_contains_all",
            "set_contains",
        ];
        let mut given: BTreeMap<&str, Value> = BTreeMap::new();
        for s in body.iter() {
            let Structure::Attribute(a) = s else {
                let Structure::Block(b) = s else {
                    unreachable!()
                };
                return Err(self.at(
                    b.span(),
                    path,
                    format!("unknown block {:?}", b.ident.as_str()),
                ));
            };
            let key = a.key.as_str();
            let ty = match key {
                "attribute" | "value" | "operator" => Ty::Str,
                "weight" if weight => Ty::Int,
                "distinct_hosts" if !weight => Ty::Bool,
                "distinct_property" if !weight => Ty::Str,
                k if SHORTCUTS.contains(&k) => Ty::Str,
                other => {
                    return Err(self.at(a.span(), path, format!("unknown argument {other:?}")));
                }
            };
            if given.contains_key(key) {
                return Err(self.at(a.span(), path, format!("argument {key:?} given twice")));
            }
            let v = self.eval(&a.value, a.span(), path)?;
            given.insert(key, self.typed(v, ty, a.span(), path, key)?);
        }
        let mut out = Map::new();
        for (key, json) in [
            ("attribute", "LTarget"),
            ("value", "RTarget"),
            ("operator", "Operand"),
            ("weight", "Weight"),
        ] {
            if let Some(v) = given.get(key) {
                out.insert(json.into(), v.clone());
            }
        }
        let nonempty = |k: &str| {
            given
                .get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(|s| Value::String(s.to_string()))
        };
        for key in SHORTCUTS {
            if let Some(v) = nonempty(key) {
                out.insert("Operand".into(), Value::String((*key).into()));
                out.insert("RTarget".into(), v);
            }
        }
        if let Some(Value::Bool(b)) = given.get("distinct_hosts") {
            out.insert("Operand".into(), Value::String("distinct_hosts".into()));
            out.insert("RTarget".into(), Value::String(b.to_string()));
        }
        if let Some(v) = nonempty("distinct_property") {
            out.insert("Operand".into(), Value::String("distinct_property".into()));
            out.insert("LTarget".into(), v);
        }
        if out
            .get("Operand")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            out.insert("Operand".into(), Value::String("=".into()));
        }
        Ok(out)
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
            .map_err(|err| self.at(span, path, err.to_string()))
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

/// The kinds of type a `variable` may declare.
const KNOWN_TYPES: &[&str] = &[
    "string", "number", "bool", "list", "set", "tuple", "map", "object", "any",
];

/// Whether a variable's value fits its declared `type` (checked by the type's kind:
/// `string`, `number`, `bool`, `list(…)`/`set(…)`/`tuple(…)`, `map(…)`/`object(…)`, `any`).
fn fits(ty: &str, v: &Value) -> bool {
    let kind = ty.split('(').next().unwrap_or(ty).trim();
    match kind {
        // HCL converts numbers and bools to strings where a string is wanted.
        "string" => v.is_string() || v.is_number() || v.is_boolean(),
        "number" => v.is_number(),
        "bool" => v.is_boolean(),
        "list" | "set" | "tuple" => v.is_array(),
        "map" | "object" => v.is_object(),
        _ => true,
    }
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

#[cfg(test)]
mod tests;
