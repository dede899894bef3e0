//! Which parts of an expression are evaluated when the file is parsed (`var.*`, `local.*`,
//! the variables of `for` expressions and `%{for}` directives, `dynamic` iterators) and which
//! stay in the text for the client to fill in at run time (`${attr.kernel.name}`,
//! `${NOMAD_PORT_http}`), as Nomad's parser leaves undefined variables.

use hcl::edit::expr::Expression as EditExpr;

use super::super::funcs;

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
    // What an evaluation produces by reference or by a call is charged to its budget.
    let charged = match expr {
        E::Variable(_) | E::FuncCall(_) => true,
        E::Traversal(t) => matches!(t.expr, E::Variable(_)),
        _ => false,
    };
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
    if charged {
        charge(e)
    } else {
        e
    }
}

/// `expr` wrapped in the call that charges its value to the evaluation's budget.
fn charge(expr: hcl::Expression) -> hcl::Expression {
    hcl::Expression::FuncCall(Box::new(
        hcl::expr::FuncCall::builder(funcs::CHARGE)
            .arg(expr)
            .build(),
    ))
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
pub(super) fn parse_time(expr: &EditExpr, iterators: &[String]) -> hcl::Expression {
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
