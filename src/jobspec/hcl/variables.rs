//! `variable` blocks, `variables { }` and `locals { }`: values from the file, the
//! environment, var files and `-var` flags in Nomad's order of precedence, declared types
//! checked, `validation` rules applied, locals resolved in dependency order.

use std::collections::BTreeMap;

use hcl::edit::expr::Expression as EditExpr;
use hcl::edit::structure::{Block, Body, Structure};
use hcl::edit::Span;
use hcl::eval::Evaluate;
use serde_json::Value;

use super::super::funcs;
use super::super::schema::Ty;
use super::interpolate::parse_time;
use super::{from_json, to_json, JobspecError, Parser, VarInputs};

impl Parser<'_> {
    /// The `name = expr` lines of a `variables` or `locals` block, appended to `into`; a
    /// nested block or a name given twice (in any block of the kind) is an error.
    pub(super) fn named_values(
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

    pub(super) fn resolve_variables(
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
            if let (Some(ty), Some(v)) = (types.get(name), values.get_mut(name)) {
                match convert(ty, v) {
                    Some(converted) => *v = converted,
                    None => {
                        return Err(self.at(
                            block.span(),
                            &format!("variable {name:?}"),
                            format!("the value {v} is not of type {ty}"),
                        ))
                    }
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
    pub(super) fn validate_variable(&self, name: &str, block: &Block) -> Result<(), JobspecError> {
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
    pub(super) fn raw_value(
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

    pub(super) fn resolve_locals(
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
                        last_error = Some(self.at(
                            span.clone(),
                            "locals",
                            format!("{name}: {}", funcs::describe(&err)),
                        ));
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
}

/// The kinds of type a `variable` may declare.
const KNOWN_TYPES: &[&str] = &[
    "string", "number", "bool", "list", "set", "tuple", "map", "object", "any",
];

/// A variable's value as its declared `type` (checked by the type's kind: `string`,
/// `number`, `bool`, `list(…)`/`set(…)`/`tuple(…)`, `map(…)`/`object(…)`, `any`), converted
/// as HCL converts primitives: a number or bool where a string is wanted becomes its text,
/// a string holding a number or `true`/`false` becomes that number or bool. `None` when it
/// does not fit.
fn convert(ty: &str, v: &Value) -> Option<Value> {
    let kind = ty.split('(').next().unwrap_or(ty).trim();
    match (kind, v) {
        ("string", Value::String(_)) => Some(v.clone()),
        ("string", Value::Number(n)) => Some(Value::String(n.to_string())),
        ("string", Value::Bool(b)) => Some(Value::String(b.to_string())),
        ("number", Value::Number(_)) => Some(v.clone()),
        ("number", Value::String(s)) => {
            let s = s.trim();
            let n = match s.parse::<i64>() {
                Ok(i) => serde_json::Number::from(i),
                Err(_) => serde_json::Number::from_f64(s.parse::<f64>().ok()?)?,
            };
            Some(Value::Number(n))
        }
        ("bool", Value::Bool(_)) => Some(v.clone()),
        ("bool", Value::String(s)) => match s.as_str() {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        ("list" | "set" | "tuple", Value::Array(_)) => Some(v.clone()),
        ("map" | "object", Value::Object(_)) => Some(v.clone()),
        ("string" | "number" | "bool" | "list" | "set" | "tuple" | "map" | "object", _) => None,
        _ => Some(v.clone()),
    }
}
