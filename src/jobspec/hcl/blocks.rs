//! Blocks converted by the schema of [`super::super::schema`]: arguments typed and renamed,
//! nested blocks placed (one, a list, a map by label), labels turned into names, `dynamic`
//! blocks expanded, free maps (`meta`, `env`, `config`) and constraint shortcuts read, and the
//! parse-time defaults Nomad's parser fills in.

use std::collections::BTreeMap;

use hcl::edit::structure::{Block, Body, Structure};
use hcl::edit::Span;
use serde_json::{Map, Value};

use super::super::schema::{Content, Nested, Place, Spec, Ty, SCALING};
use super::{pascal, JobspecError, Parser, View};

impl Parser<'_> {
    /// The block's one label.
    pub(super) fn one_label(&self, b: &Block, path: &str) -> Result<String, JobspecError> {
        self.view_label(&View::of(b), path)
    }

    pub(super) fn view_label(&self, b: &View, path: &str) -> Result<String, JobspecError> {
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

    pub(super) fn spec_body(
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

    pub(super) fn nested(
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
    pub(super) fn vertical_scaling(
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
    pub(super) fn each_dynamic(
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
    pub(super) fn free_map(
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
    pub(super) fn free_map_block(
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
    pub(super) fn generic(
        &self,
        body: &Body,
        path: &str,
    ) -> Result<Map<String, Value>, JobspecError> {
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
    pub(super) fn constraint(
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
}
