//! Job diffs in Nomad's shape (`structs.JobDiff`): what `job plan` and `job history` show
//! between two versions of a job.
//!
//! The diff walks the two jobs' API JSON (the same names `inspect` shows), so every field
//! the model has is covered without a hand-written case per field:
//!
//! - scalars become a [`FieldDiff`] named by their key; `Meta` and `Env` entries become
//!   fields named `Meta[key]` and `Env[KEY]` on their owner, as Nomad flattens them;
//! - a nested struct (`RestartPolicy`, `Resources`, …) becomes an [`ObjectDiff`] named by its
//!   key, and `Task.Config` an object `Config` with flattened keys (`args[0]`);
//! - a list of scalars (`Datacenters`) is a set: an object of that name whose fields are the
//!   values added or deleted; a list of structs (`Constraints`, `Affinities`, `Spreads`) is a
//!   set of objects named in the singular (`Constraint`), each added or deleted whole;
//! - task groups and tasks are matched by name.
//!
//! Diffs are contextual, as the plan endpoint asks Nomad for: a changed object lists its
//! unchanged fields too, typed `None`. Unchanged objects are left out; every task group is
//! listed (unchanged ones typed `None`), and every task of a changed group.
//! Values are strings as in Nomad (`"true"`, `"30000000000"` for 30 s of nanoseconds).
//! The fields Nomad skips are skipped: identity, status, version, stability, indexes and
//! submit time.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::model::job::Job;

/// How something changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum DiffType {
    /// It is new.
    Added,
    /// It is gone.
    Deleted,
    /// It changed.
    Edited,
    /// It did not change (shown for context).
    #[default]
    None,
}

/// One scalar field.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct FieldDiff {
    /// How it changed.
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    /// Its name (`Count`, `Meta[owner]`).
    pub name: String,
    /// The old value ("" when added).
    pub old: String,
    /// The new value ("" when deleted).
    pub new: String,
    /// What the change forces (`forces create`, …).
    pub annotations: Vec<String>,
}

/// A nested object.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct ObjectDiff {
    /// How it changed.
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    /// Its name (`RestartPolicy`, `Constraint`).
    pub name: String,
    /// Its scalar fields.
    pub fields: Vec<FieldDiff>,
    /// Its nested objects.
    pub objects: Vec<ObjectDiff>,
}

/// One task.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskDiff {
    /// How it changed.
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    /// The task's name.
    pub name: String,
    /// Its scalar fields.
    pub fields: Vec<FieldDiff>,
    /// Its nested objects.
    pub objects: Vec<ObjectDiff>,
    /// What the change forces (`forces create/destroy update`, `forces in-place update`).
    pub annotations: Vec<String>,
}

/// One task group.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct TaskGroupDiff {
    /// How it changed.
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    /// The group's name.
    pub name: String,
    /// Its scalar fields.
    pub fields: Vec<FieldDiff>,
    /// Its nested objects.
    pub objects: Vec<ObjectDiff>,
    /// Its tasks.
    pub tasks: Vec<TaskDiff>,
    /// What the scheduler would do, by kind (`create`, `destroy`, `in-place update`,
    /// `create/destroy update`, `ignore`, `migrate`, `canary`), non-zero counts only.
    pub updates: BTreeMap<String, u64>,
}

/// Two versions of a job compared.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct JobDiff {
    /// How it changed.
    #[serde(rename = "Type")]
    pub diff_type: DiffType,
    /// The job's ID.
    #[serde(rename = "ID")]
    pub id: String,
    /// Its scalar fields.
    pub fields: Vec<FieldDiff>,
    /// Its nested objects.
    pub objects: Vec<ObjectDiff>,
    /// Its task groups, by name.
    pub task_groups: Vec<TaskGroupDiff>,
}

/// Job fields that are not part of the spec (Nomad's skip list), plus the groups diffed on
/// their own.
const JOB_SKIP: &[&str] = &[
    "ID",
    "Status",
    "StatusDescription",
    "Version",
    "Stable",
    "CreateIndex",
    "ModifyIndex",
    "JobModifyIndex",
    "SubmitTime",
    "TaskGroups",
];
const GROUP_SKIP: &[&str] = &["Name", "Tasks"];
const TASK_SKIP: &[&str] = &["Name"];
/// Maps whose entries are flattened into their owner's fields as `Key[entry]`.
const FLAT_MAPS: &[&str] = &["Meta", "Env"];

impl Job {
    /// The diff from `self` (the old version; `None`: the job is new) to `new`.
    pub fn diff_to(old: Option<&Job>, new: &Job) -> JobDiff {
        let old_v = old.map(|j| serde_json::to_value(j).unwrap_or(Value::Null));
        let new_v = serde_json::to_value(new).unwrap_or(Value::Null);
        let (fields, objects, changed) = diff_members(
            old_v.as_ref().and_then(Value::as_object),
            new_v.as_object(),
            JOB_SKIP,
        );
        let old_groups: BTreeMap<&str, &Value> = old_v
            .as_ref()
            .map(|v| named(&v["TaskGroups"]))
            .unwrap_or_default();
        let new_groups = named(&new_v["TaskGroups"]);
        let mut task_groups = Vec::new();
        for name in old_groups
            .keys()
            .chain(new_groups.keys())
            .collect::<BTreeSet<_>>()
        {
            task_groups.push(group_diff(
                name,
                old_groups.get(name).copied(),
                new_groups.get(name).copied(),
            ));
        }
        let diff_type = match old {
            None => DiffType::Added,
            Some(_) if changed || task_groups.iter().any(|g| g.diff_type != DiffType::None) => {
                DiffType::Edited
            }
            Some(_) => DiffType::None,
        };
        JobDiff {
            diff_type,
            id: new.id.to_string(),
            fields,
            objects,
            task_groups,
        }
    }
}

/// The elements of a JSON list of named objects, by `Name`.
fn named(list: &Value) -> BTreeMap<&str, &Value> {
    list.as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| Some((item["Name"].as_str()?, item)))
                .collect()
        })
        .unwrap_or_default()
}

fn kind(old: Option<&Value>, new: Option<&Value>, changed: bool) -> DiffType {
    match (old, new) {
        (None, Some(_)) => DiffType::Added,
        (Some(_), None) => DiffType::Deleted,
        _ if changed => DiffType::Edited,
        _ => DiffType::None,
    }
}

fn group_diff(name: &str, old: Option<&Value>, new: Option<&Value>) -> TaskGroupDiff {
    let (fields, objects, mut changed) = diff_members(
        old.and_then(Value::as_object),
        new.and_then(Value::as_object),
        GROUP_SKIP,
    );
    let old_tasks = old.map(|g| named(&g["Tasks"])).unwrap_or_default();
    let new_tasks = new.map(|g| named(&g["Tasks"])).unwrap_or_default();
    let mut tasks = Vec::new();
    for task in old_tasks
        .keys()
        .chain(new_tasks.keys())
        .collect::<BTreeSet<_>>()
    {
        let (o, n) = (old_tasks.get(task).copied(), new_tasks.get(task).copied());
        let (fields, objects, task_changed) = diff_members(
            o.and_then(Value::as_object),
            n.and_then(Value::as_object),
            TASK_SKIP,
        );
        let diff_type = kind(o, n, task_changed);
        changed |= diff_type != DiffType::None;
        tasks.push(TaskDiff {
            diff_type,
            name: (*task).to_owned(),
            fields,
            objects,
            annotations: Vec::new(),
        });
    }
    let diff_type = kind(old, new, changed);
    if diff_type == DiffType::None {
        tasks.clear();
    }
    TaskGroupDiff {
        diff_type,
        name: name.to_owned(),
        fields: if diff_type == DiffType::None {
            Vec::new()
        } else {
            fields
        },
        objects,
        tasks,
        updates: BTreeMap::new(),
    }
}

/// A scalar as Nomad's diff writes it; `None` for null, absent and "" (Nomad's flattened
/// structs do not tell an empty string from an unset one).
fn scalar(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::Null => None,
        Value::String(s) if s.is_empty() => None,
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        other => Some(other.to_string()),
    }
}

fn is_scalar(v: Option<&Value>) -> bool {
    !matches!(v, Some(Value::Object(_) | Value::Array(_)))
}

/// The empty containers and null are "not set".
fn present(v: Option<&Value>) -> Option<&Value> {
    match v? {
        Value::Null => None,
        Value::Object(m) if m.is_empty() => None,
        Value::Array(a) if a.is_empty() => None,
        other => Some(other),
    }
}

fn field(name: String, old: Option<String>, new: Option<String>) -> FieldDiff {
    let diff_type = match (&old, &new) {
        (None, Some(_)) => DiffType::Added,
        (Some(_), None) => DiffType::Deleted,
        (Some(a), Some(b)) if a != b => DiffType::Edited,
        _ => DiffType::None,
    };
    FieldDiff {
        diff_type,
        name,
        old: old.unwrap_or_default(),
        new: new.unwrap_or_default(),
        annotations: Vec::new(),
    }
}

/// Diffs the members of two objects (either may be absent): the scalar fields (with the
/// unchanged ones typed `None`), the changed nested objects, and whether anything changed.
fn diff_members(
    old: Option<&Map<String, Value>>,
    new: Option<&Map<String, Value>>,
    skip: &[&str],
) -> (Vec<FieldDiff>, Vec<ObjectDiff>, bool) {
    let keys: BTreeSet<&String> = old
        .into_iter()
        .flat_map(|m| m.keys())
        .chain(new.into_iter().flat_map(|m| m.keys()))
        .filter(|k| !skip.contains(&k.as_str()))
        .collect();
    let mut fields = Vec::new();
    let mut objects = Vec::new();
    for key in keys {
        let o = present(old.and_then(|m| m.get(key)));
        let n = present(new.and_then(|m| m.get(key)));
        if FLAT_MAPS.contains(&key.as_str()) {
            let mut entries = BTreeMap::new();
            flatten(key, o, &mut entries, 0);
            let mut new_entries = BTreeMap::new();
            flatten(key, n, &mut new_entries, 0);
            push_flat(&mut fields, entries, new_entries);
            continue;
        }
        if is_scalar(o) && is_scalar(n) {
            let f = field(key.clone(), scalar(o), scalar(n));
            if o.is_some() || n.is_some() {
                fields.push(f);
            }
            continue;
        }
        if o == n {
            continue;
        }
        objects.extend(object_diffs(key, o, n));
    }
    fields.sort_by(|a, b| a.name.cmp(&b.name));
    objects.sort_by(|a, b| a.name.cmp(&b.name));
    let changed = fields.iter().any(|f| f.diff_type != DiffType::None) || !objects.is_empty();
    (fields, objects, changed)
}

/// Flattens nested JSON into `prefix[key]`/`prefix[i]` scalar entries (top level) or
/// `key.sub`/`key[i]` (below, as Nomad's flatmap writes task configs).
fn flatten(prefix: &str, v: Option<&Value>, out: &mut BTreeMap<String, String>, depth: usize) {
    let Some(v) = v else { return };
    match v {
        Value::Object(m) => {
            for (k, sub) in m {
                let name = if depth == 0 {
                    format!("{prefix}[{k}]")
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&name, Some(sub), out, depth + 1);
            }
        }
        Value::Array(items) => {
            for (i, sub) in items.iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), Some(sub), out, depth + 1);
            }
        }
        Value::Null => {}
        other => {
            out.insert(prefix.to_owned(), scalar(Some(other)).unwrap_or_default());
        }
    }
}

fn push_flat(
    fields: &mut Vec<FieldDiff>,
    old: BTreeMap<String, String>,
    mut new: BTreeMap<String, String>,
) {
    for (name, value) in old {
        let n = new.remove(&name);
        fields.push(field(name, Some(value), n));
    }
    for (name, value) in new {
        fields.push(field(name, None, Some(value)));
    }
}

/// The singular object name Nomad gives the members of a list.
fn singular(key: &str) -> &str {
    match key {
        "Constraints" => "Constraint",
        "Affinities" => "Affinity",
        "Spreads" => "Spread",
        "SpreadTarget" => "SpreadTarget",
        other => other,
    }
}

/// The object diffs of one non-scalar member that changed.
fn object_diffs(key: &str, old: Option<&Value>, new: Option<&Value>) -> Vec<ObjectDiff> {
    let list = |v: Option<&Value>| v.and_then(Value::as_array).cloned().unwrap_or_default();
    let is_list = matches!(old, Some(Value::Array(_))) || matches!(new, Some(Value::Array(_)));
    if !is_list {
        if key == "Config" {
            let (mut o, mut n) = (BTreeMap::new(), BTreeMap::new());
            flatten_config(old, &mut o);
            flatten_config(new, &mut n);
            let mut fields = Vec::new();
            push_flat(&mut fields, o, n);
            fields.sort_by(|a, b| a.name.cmp(&b.name));
            return vec![ObjectDiff {
                diff_type: kind(old, new, true),
                name: key.to_owned(),
                fields,
                objects: Vec::new(),
            }];
        }
        let (fields, objects, changed) = diff_members(
            old.and_then(Value::as_object),
            new.and_then(Value::as_object),
            &[],
        );
        return vec![ObjectDiff {
            diff_type: kind(old, new, changed),
            name: key.to_owned(),
            fields,
            objects,
        }];
    }
    let (old_items, new_items) = (list(old), list(new));
    if old_items
        .iter()
        .chain(&new_items)
        .all(|v| is_scalar(Some(v)))
    {
        // A set of scalars: one object, a field per value added or deleted.
        let olds: BTreeSet<String> = old_items.iter().filter_map(|v| scalar(Some(v))).collect();
        let news: BTreeSet<String> = new_items.iter().filter_map(|v| scalar(Some(v))).collect();
        let mut fields = Vec::new();
        for v in olds.union(&news) {
            let f = field(
                key.to_owned(),
                olds.contains(v).then(|| v.clone()),
                news.contains(v).then(|| v.clone()),
            );
            fields.push(f);
        }
        return vec![ObjectDiff {
            diff_type: kind(old, new, true),
            name: key.to_owned(),
            fields,
            objects: Vec::new(),
        }];
    }
    // A set of objects: each one only on one side is added or deleted whole.
    let mut out = Vec::new();
    for item in old_items.iter().filter(|i| !new_items.contains(i)) {
        out.extend(object_diffs(singular(key), Some(item), None));
    }
    for item in new_items.iter().filter(|i| !old_items.contains(i)) {
        out.extend(object_diffs(singular(key), None, Some(item)));
    }
    out
}

/// A task config flattened as Nomad's flatmap does: `command`, `args[0]`, `mount[0].source`.
fn flatten_config(v: Option<&Value>, out: &mut BTreeMap<String, String>) {
    if let Some(Value::Object(m)) = v {
        for (k, sub) in m {
            match sub {
                Value::Object(_) | Value::Array(_) => {
                    let mut inner = BTreeMap::new();
                    flatten(k, Some(sub), &mut inner, 1);
                    out.extend(inner);
                }
                other => {
                    out.insert(k.clone(), scalar(Some(other)).unwrap_or_default());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::job::{Constraint, Task, TaskGroup};

    fn job() -> Job {
        let mut job = Job {
            id: "web".into(),
            datacenters: vec!["dc1".into()],
            task_groups: vec![TaskGroup {
                name: "api".into(),
                count: 2,
                tasks: vec![Task {
                    name: "server".into(),
                    driver: "raw_exec".into(),
                    config: serde_json::from_value(serde_json::json!({
                        "command": "/bin/sleep", "args": ["60"]
                    }))
                    .unwrap(),
                    ..Task::default()
                }],
                ..TaskGroup::default()
            }]
            .into(),
            ..Job::default()
        };
        job.canonicalize();
        job
    }

    #[test]
    fn an_unchanged_job_is_none_and_lists_its_groups_as_none() {
        let d = Job::diff_to(Some(&job()), &job());
        assert_eq!(d.diff_type, DiffType::None);
        assert!(d.objects.is_empty());
        assert!(d.fields.iter().all(|f| f.diff_type == DiffType::None));
        assert_eq!(d.task_groups.len(), 1);
        assert_eq!(d.task_groups[0].diff_type, DiffType::None);
        assert!(d.task_groups[0].tasks.is_empty());
    }

    #[test]
    fn a_new_job_is_added_with_its_fields() {
        let d = Job::diff_to(None, &job());
        assert_eq!(d.diff_type, DiffType::Added);
        let prio = d.fields.iter().find(|f| f.name == "Priority").unwrap();
        assert_eq!(
            (prio.diff_type, prio.old.as_str(), prio.new.as_str()),
            (DiffType::Added, "", "50")
        );
        assert_eq!(d.task_groups[0].diff_type, DiffType::Added);
        assert_eq!(d.task_groups[0].tasks[0].diff_type, DiffType::Added);
    }

    #[test]
    fn count_meta_config_and_constraints_show_as_nomad_names_them() {
        let old = job();
        let mut new = job();
        new.task_groups_mut()[0].count = 3;
        new.meta.insert("owner".into(), "ops".into());
        new.datacenters.push("dc2".into());
        new.constraints.push(Constraint {
            l_target: "${attr.kernel.name}".into(),
            r_target: "linux".into(),
            operand: "=".into(),
        });
        new.task_groups_mut()[0].tasks[0].config = serde_json::from_value(serde_json::json!({
            "command": "/bin/sleep", "args": ["61"]
        }))
        .unwrap();
        let d = Job::diff_to(Some(&old), &new);
        assert_eq!(d.diff_type, DiffType::Edited);
        let meta = d.fields.iter().find(|f| f.name == "Meta[owner]").unwrap();
        assert_eq!(
            (meta.diff_type, meta.new.as_str()),
            (DiffType::Added, "ops")
        );
        let dcs = d.objects.iter().find(|o| o.name == "Datacenters").unwrap();
        assert!(dcs
            .fields
            .iter()
            .any(|f| f.diff_type == DiffType::Added && f.new == "dc2"));
        assert!(dcs
            .fields
            .iter()
            .any(|f| f.diff_type == DiffType::None && f.old == "dc1"));
        let c = d.objects.iter().find(|o| o.name == "Constraint").unwrap();
        assert_eq!(c.diff_type, DiffType::Added);
        assert!(c
            .fields
            .iter()
            .any(|f| f.name == "RTarget" && f.new == "linux"));

        let g = &d.task_groups[0];
        assert_eq!(g.diff_type, DiffType::Edited);
        let count = g.fields.iter().find(|f| f.name == "Count").unwrap();
        assert_eq!(
            (count.diff_type, count.old.as_str(), count.new.as_str()),
            (DiffType::Edited, "2", "3")
        );
        let t = &g.tasks[0];
        assert_eq!(t.diff_type, DiffType::Edited);
        let cfg = t.objects.iter().find(|o| o.name == "Config").unwrap();
        let arg = cfg.fields.iter().find(|f| f.name == "args[0]").unwrap();
        assert_eq!(
            (arg.diff_type, arg.old.as_str(), arg.new.as_str()),
            (DiffType::Edited, "60", "61")
        );
        assert!(cfg
            .fields
            .iter()
            .any(|f| f.name == "command" && f.diff_type == DiffType::None));
    }

    #[test]
    fn a_removed_group_is_deleted_and_a_nested_policy_edit_is_an_object() {
        let old = job();
        let mut new = job();
        new.task_groups_mut()[0].name = "other".into();
        let d = Job::diff_to(Some(&old), &new);
        let kinds: Vec<(&str, DiffType)> = d
            .task_groups
            .iter()
            .map(|g| (g.name.as_str(), g.diff_type))
            .collect();
        assert_eq!(
            kinds,
            vec![("api", DiffType::Deleted), ("other", DiffType::Added)]
        );

        let mut new = job();
        new.task_groups_mut()[0]
            .restart_policy
            .as_mut()
            .unwrap()
            .attempts = Some(7);
        let d = Job::diff_to(Some(&old), &new);
        let rp = d.task_groups[0]
            .objects
            .iter()
            .find(|o| o.name == "RestartPolicy")
            .unwrap();
        assert_eq!(rp.diff_type, DiffType::Edited);
        assert!(rp
            .fields
            .iter()
            .any(|f| f.name == "Attempts" && f.diff_type == DiffType::Edited && f.new == "7"));
    }

    #[test]
    fn a_diff_survives_json() {
        let d = Job::diff_to(None, &job());
        let back: JobDiff = serde_json::from_value(serde_json::to_value(&d).unwrap()).unwrap();
        assert_eq!(back, d);
        assert_eq!(serde_json::to_value(&d).unwrap()["Type"], "Added");
    }
}
