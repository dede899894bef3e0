//! `teamster job plan FILE`: what `job run` would do, without doing it (`nomad job plan`):
//! the diff from the registered version in `+`/`-`/`+/-` lines, the scheduler's dry run per
//! task group, and the `JobModifyIndex` for `job run --check-index`.
//!
//! Exit codes as Nomad's: 0 when no allocation would be created or destroyed, 1 when some
//! would, 255 on an error (a bad file, a refused job, no server).

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use reqwest::Method;
use serde_json::{json, Value};

use super::args::ApiArgs;
use super::job_file::{read_job_file, JobFileArgs};
use super::output::alloc_metrics;
use crate::api::urlencode;

/// `job plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    api: ApiArgs,
    #[command(flatten)]
    job: JobFileArgs,
    /// Show the unchanged fields of changed objects too.
    #[arg(long, short = 'v')]
    verbose: bool,
}

/// Runs `job plan`: 0 (nothing created or destroyed), 1 (allocations would be created or
/// destroyed) or 255 (an error, printed).
pub async fn plan(args: PlanArgs) -> ExitCode {
    match plan_inner(&args).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("Error: {e:#}");
            ExitCode::from(255)
        }
    }
}

async fn plan_inner(args: &PlanArgs) -> anyhow::Result<ExitCode> {
    let api = args.api.client()?;
    let job = read_job_file(&args.job)?;
    let id = job["ID"]
        .as_str()
        .filter(|id| !id.is_empty())
        .context("the job has no ID")?
        .to_string();
    let resp: Value = api
        .request(
            Method::POST,
            &format!("/v1/job/{}/plan", urlencode(&id)),
            Some(&json!({ "Job": job, "Diff": true })),
        )
        .await
        .context("planning the job")?;
    let changes = creates_or_destroys(&resp);
    if args.api.structured() {
        args.api.print(&resp)?;
    } else {
        print!(
            "{}",
            render(&resp, args.verbose, &args.job.file.display().to_string())
        );
    }
    Ok(if changes {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Whether any group would get allocations created or destroyed.
pub fn creates_or_destroys(resp: &Value) -> bool {
    let Some(groups) = resp["Annotations"]["DesiredTGUpdates"].as_object() else {
        return false;
    };
    groups.values().any(|u| {
        ["Stop", "Place", "Migrate", "DestructiveUpdate", "Canary"]
            .iter()
            .any(|k| u[k].as_u64().unwrap_or(0) > 0)
    })
}

fn sign(diff_type: &Value) -> &'static str {
    match diff_type.as_str() {
        Some("Added") => "+",
        Some("Deleted") => "-",
        Some("Edited") => "+/-",
        _ => "",
    }
}

fn prefixed(indent: usize, diff_type: &Value) -> String {
    let s = sign(diff_type);
    let pad = " ".repeat(indent);
    if s.is_empty() {
        format!("{pad}    ")
    } else {
        format!("{pad}{s:<3} ")
    }
}

fn field_line(out: &mut String, indent: usize, f: &Value) {
    let (old, new) = (
        f["Old"].as_str().unwrap_or_default(),
        f["New"].as_str().unwrap_or_default(),
    );
    let value = match f["Type"].as_str() {
        Some("Added") => format!("{new:?}"),
        Some("Deleted") => format!("{old:?}"),
        Some("Edited") => format!("{old:?} => {new:?}"),
        _ => format!("{new:?}"),
    };
    let notes = notes(&f["Annotations"]);
    out.push_str(&format!(
        "{}{}: {value}{notes}\n",
        prefixed(indent, &f["Type"]),
        f["Name"].as_str().unwrap_or_default()
    ));
}

fn notes(annotations: &Value) -> String {
    let list: Vec<&str> = annotations
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if list.is_empty() {
        String::new()
    } else {
        format!(" ({})", list.join(", "))
    }
}

fn fields_and_objects(out: &mut String, indent: usize, d: &Value, verbose: bool) {
    for f in d["Fields"].as_array().into_iter().flatten() {
        if verbose || f["Type"].as_str() != Some("None") {
            field_line(out, indent, f);
        }
    }
    for o in d["Objects"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{}{} {{\n",
            prefixed(indent, &o["Type"]),
            o["Name"].as_str().unwrap_or_default()
        ));
        fields_and_objects(out, indent + 2, o, verbose);
        out.push_str(&format!("{}    }}\n", " ".repeat(indent)));
    }
}

/// The diff in Nomad's plan layout.
pub fn render_diff(diff: &Value, verbose: bool) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{}Job: {:?}\n",
        prefixed(0, &diff["Type"]),
        diff["ID"].as_str().unwrap_or_default()
    ));
    fields_and_objects(&mut out, 0, diff, verbose);
    for g in diff["TaskGroups"].as_array().into_iter().flatten() {
        let updates: Vec<String> = g["Updates"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        let updates = if updates.is_empty() {
            String::new()
        } else {
            format!(" ({})", updates.join(", "))
        };
        out.push_str(&format!(
            "{}Task Group: {:?}{updates}\n",
            prefixed(0, &g["Type"]),
            g["Name"].as_str().unwrap_or_default()
        ));
        fields_and_objects(&mut out, 2, g, verbose);
        for t in g["Tasks"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "{}Task: {:?}{}\n",
                prefixed(2, &t["Type"]),
                t["Name"].as_str().unwrap_or_default(),
                notes(&t["Annotations"])
            ));
            fields_and_objects(&mut out, 4, t, verbose);
        }
    }
    out
}

/// The allocations the placements would evict, one line each (Nomad's `Preemptions:`
/// table); empty when there are none.
fn render_preemptions(preempted: &Value) -> String {
    let Some(allocs) = preempted.as_array().filter(|a| !a.is_empty()) else {
        return String::new();
    };
    let rows: Vec<[&str; 4]> = allocs
        .iter()
        .map(|a| {
            [
                a["ID"].as_str().unwrap_or_default(),
                a["JobID"].as_str().unwrap_or_default(),
                a["Namespace"].as_str().unwrap_or_default(),
                a["TaskGroup"].as_str().unwrap_or_default(),
            ]
        })
        .collect();
    let header = ["Alloc ID", "Job ID", "Namespace", "Task Group"];
    let widths: Vec<usize> = (0..4)
        .map(|i| {
            rows.iter()
                .map(|r| r[i].len())
                .chain([header[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: [&str; 4]| -> String {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = String::from("\nPreemptions:\n\n");
    out.push_str(&line(header));
    for row in rows {
        out.push_str(&line(row));
    }
    out
}

/// The whole `job plan` output.
fn render(resp: &Value, verbose: bool, file: &str) -> String {
    let mut out = String::new();
    if !resp["Diff"].is_null() {
        out.push_str(&render_diff(&resp["Diff"], verbose));
        out.push('\n');
    }
    out.push_str("Scheduler dry-run:\n");
    let failed = resp["FailedTGAllocs"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    if failed.is_empty() {
        out.push_str("- All tasks successfully allocated.\n");
    } else {
        out.push_str("- WARNING: Failed to place all allocations.\n");
        for (group, metric) in &failed {
            let unplaced = resp["Annotations"]["DesiredTGUpdates"][group]["Place"]
                .as_u64()
                .unwrap_or(0);
            out.push_str(&format!(
                "  Task Group {group:?} (failed to place {} allocation{}):\n",
                unplaced.max(1),
                if unplaced == 1 { "" } else { "s" }
            ));
            out.push_str(&alloc_metrics(metric, "    "));
        }
    }
    out.push_str(&render_preemptions(&resp["Annotations"]["PreemptedAllocs"]));
    let index = resp["JobModifyIndex"].as_u64().unwrap_or(0);
    out.push_str(&format!(
        "\nJob Modify Index: {index}\n\
         To submit the job with version verification run:\n\n\
         teamster job run --check-index {index} {file}\n\n\
         When running the job with the check-index flag, the job will only be run if the\n\
         job modify index given matches the server-side version. If the index has\n\
         changed, another user has modified the job and the plan's results are\n\
         potentially invalid.\n"
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preemptions_are_listed_after_the_dry_run() {
        let resp = json!({
            "Annotations": {
                "DesiredTGUpdates": {"web": {"Place": 1, "Preemptions": 1}},
                "PreemptedAllocs": [
                    {"ID": "0b2a2f2e-0000-4000-8000-000000000001", "JobID": "batch-low",
                     "Namespace": "default", "TaskGroup": "crunch"}
                ]
            },
            "JobModifyIndex": 7,
        });
        let out = render(&resp, false, "high.hcl");
        let at = out.find("Preemptions:").expect("a preemptions section");
        assert!(out.find("Scheduler dry-run:").unwrap() < at);
        assert!(out.contains(
            "Alloc ID                              Job ID     Namespace  Task Group\n\
             0b2a2f2e-0000-4000-8000-000000000001  batch-low  default    crunch\n"
        ));
        let none = render(&json!({"Annotations": {"PreemptedAllocs": []}}), false, "f");
        assert!(!none.contains("Preemptions"));
    }

    #[test]
    fn a_diff_renders_with_nomads_signs_and_annotations() {
        let diff = json!({
            "Type": "Edited", "ID": "web", "Fields": [], "Objects": [],
            "TaskGroups": [{
                "Type": "Edited", "Name": "api",
                "Fields": [{"Type": "Edited", "Name": "Count", "Old": "1", "New": "3",
                            "Annotations": ["forces create"]}],
                "Objects": [], "Updates": {"create": 2, "ignore": 1},
                "Tasks": [{"Type": "Edited", "Name": "t", "Fields": [],
                    "Objects": [{"Type": "Edited", "Name": "Config", "Objects": [], "Fields": [
                        {"Type": "Edited", "Name": "args[0]", "Old": "1", "New": "2", "Annotations": []},
                        {"Type": "None", "Name": "command", "Old": "sleep", "New": "sleep", "Annotations": []}]}],
                    "Annotations": ["forces create/destroy update"]}]
            }]
        });
        let text = render_diff(&diff, false);
        assert!(text.contains("+/- Job: \"web\""), "{text}");
        assert!(
            text.contains("+/- Task Group: \"api\" (2 create, 1 ignore)"),
            "{text}"
        );
        assert!(
            text.contains("+/- Count: \"1\" => \"3\" (forces create)"),
            "{text}"
        );
        assert!(
            text.contains("+/- Task: \"t\" (forces create/destroy update)"),
            "{text}"
        );
        assert!(text.contains("+/- args[0]: \"1\" => \"2\""), "{text}");
        assert!(
            !text.contains("command"),
            "unchanged fields only with -verbose: {text}"
        );
        assert!(render_diff(&diff, true).contains("command: \"sleep\""));
    }

    #[test]
    fn exit_code_follows_creates_and_destroys() {
        let none =
            json!({"Annotations": {"DesiredTGUpdates": {"g": {"Ignore": 3, "InPlaceUpdate": 2}}}});
        assert!(!creates_or_destroys(&none));
        let place = json!({"Annotations": {"DesiredTGUpdates": {"g": {"Place": 1}}}});
        assert!(creates_or_destroys(&place));
        let destructive =
            json!({"Annotations": {"DesiredTGUpdates": {"g": {"DestructiveUpdate": 2}}}});
        assert!(creates_or_destroys(&destructive));
    }
}
