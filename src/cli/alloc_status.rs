//! `teamster alloc status ID [-stats]`: one allocation as `nomad alloc status` shows it: its
//! fields, its tasks' states and recent events, and for each running task the resources it
//! uses of what it was given (`Task Resources`), read from the client's
//! `/v1/client/allocation/:id/stats`. With `-stats` the detailed memory and CPU figures
//! follow, each table holding only what the task's driver measures.

use std::collections::BTreeMap;

use anyhow::Context;
use clap::Args;
use serde_json::Value;

use super::args::ApiArgs;
use super::output::{human_bytes, table, text, unix_nanos};

/// `alloc status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Show the detailed resource usage of each running task.
    #[arg(long)]
    stats: bool,
    /// The ID or a unique prefix of it.
    id: String,
}

/// Run `alloc status`.
pub async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let id = super::args::resolve(&api, "/v1/allocations", "allocation", &args.id).await?;
    let a: Value = api
        .get(&format!("/v1/allocation/{id}"))
        .await
        .context("reading the allocation")?;
    if args.api.structured() {
        args.api.print(&a)?;
        return Ok(());
    }
    let fields = [
        ("ID", "ID"),
        ("Eval ID", "EvalID"),
        ("Name", "Name"),
        ("Node ID", "NodeID"),
        ("Node Name", "NodeName"),
        ("Job ID", "JobID"),
        ("Job Version", "JobVersion"),
        ("Client Status", "ClientStatus"),
        ("Client Description", "ClientDescription"),
        ("Desired Status", "DesiredStatus"),
        ("Desired Description", "DesiredDescription"),
        ("Create Index", "CreateIndex"),
        ("Modify Index", "ModifyIndex"),
    ];
    for (label, key) in fields {
        println!("{label:<20}= {}", text(&a[key]));
    }
    let now = crate::util::system_clock().now_unix_nanos();
    for (label, key) in [("Created", "CreateTime"), ("Modified", "ModifyTime")] {
        let at = a[key].as_i64().unwrap_or(0);
        println!("{label:<20}= {}", ago(now, at));
    }
    if let Some(addresses) = addresses(&a) {
        println!("\nAllocation Addresses (mode = \"host\"):");
        print!("{}", table(&addresses));
    }
    let Some(states) = a["TaskStates"].as_object().filter(|m| !m.is_empty()) else {
        return Ok(());
    };
    let lifecycles = lifecycles(&a);
    let states = in_lifecycle_order(states, &lifecycles);
    let mut rows = vec![["Task", "State", "Failed", "Restarts", "Lifecycle"]
        .map(String::from)
        .to_vec()];
    for &(task, s) in &states {
        rows.push(vec![
            task.clone(),
            text(&s["State"]),
            text(&s["Failed"]),
            text(&s["Restarts"]),
            lifecycle_name(lifecycles.get(task)),
        ]);
    }
    println!();
    print!("{}", table(&rows));
    // The usage of a running allocation, from its client; without it the rest is shown.
    let usage = if a["ClientStatus"] == "running" {
        match api
            .get::<Value>(&format!("/v1/client/allocation/{id}/stats"))
            .await
        {
            Ok(u) => Some(u),
            Err(e) if args.stats => {
                println!();
                println!("Couldn't retrieve stats: {e}");
                None
            }
            Err(_) => None,
        }
    } else {
        None
    };
    for &(task, s) in &states {
        println!();
        let indicator = match lifecycles.get(task) {
            Some(lc) => format!(" ({})", lifecycle_name(Some(lc))),
            None => String::new(),
        };
        println!("Task {task:?}{indicator} is {:?}", text(&s["State"]));
        let task_usage = usage
            .as_ref()
            .map(|u| &u["Tasks"][task]["ResourceUsage"])
            .filter(|u| u.is_object() && s["State"] == "running");
        if let Some(u) = task_usage {
            print!("{}", resources(&a, task, u));
            if args.stats {
                print!("{}", detailed(u));
            }
        }
        let events = s["Events"].as_array().cloned().unwrap_or_default();
        if events.is_empty() {
            continue;
        }
        println!("Recent Events:");
        let mut rows = vec![["Time", "Type", "Description"].map(String::from).to_vec()];
        for e in events.iter().rev() {
            rows.push(vec![unix_nanos(&e["Time"]), text(&e["Type"]), describe(e)]);
        }
        print!("{}", table(&rows));
    }
    Ok(())
}

/// `Task Resources`: CPU MHz used of those given, memory used of that given, the group's
/// disk.
fn resources(alloc: &Value, task: &str, usage: &Value) -> String {
    let given = &alloc["AllocatedResources"]["Tasks"][task];
    let cpu = &usage["CpuStats"];
    let mem = &usage["MemoryStats"];
    let mb = |v: &Value| v.as_u64().unwrap_or(0) << 20;
    // What the driver measures: the resident set of processes, the cgroup's usage of a
    // container.
    let used = match mem["RSS"].as_u64().filter(|rss| *rss > 0) {
        Some(rss) => rss,
        None => mem["Usage"].as_u64().unwrap_or(0),
    };
    let rows = vec![
        ["CPU", "Memory", "Disk"].map(String::from).to_vec(),
        vec![
            format!(
                "{}/{} MHz",
                cpu["TotalTicks"].as_f64().unwrap_or(0.0).round() as u64,
                text(&given["Cpu"]["CpuShares"])
            ),
            format!(
                "{}/{}",
                human_bytes(used),
                human_bytes(mb(&given["Memory"]["MemoryMB"]))
            ),
            human_bytes(mb(&alloc["AllocatedResources"]["Shared"]["DiskMB"])),
        ],
    ];
    format!("Task Resources:\n{}", table(&rows))
}

/// The `Memory Stats` and `CPU Stats` tables of `-stats`: the figures the driver lists in
/// `Measured`, in Nomad's order.
fn detailed(usage: &Value) -> String {
    let measured = |v: &Value| -> Vec<String> {
        v["Measured"]
            .as_array()
            .map(|m| {
                m.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out = String::new();
    let mem = &usage["MemoryStats"];
    let names = measured(mem);
    if !names.is_empty() {
        let value = |name: &str| {
            let key = match name {
                "Max Usage" => "MaxUsage",
                "Kernel Usage" => "KernelUsage",
                "Kernel Max Usage" => "KernelMaxUsage",
                "Mapped File" => "MappedFile",
                other => other,
            };
            human_bytes(mem[key].as_u64().unwrap_or(0))
        };
        out.push_str("\nMemory Stats\n");
        out.push_str(&table(&[
            names.clone(),
            names.iter().map(|n| value(n)).collect(),
        ]));
    }
    let cpu = &usage["CpuStats"];
    let names = measured(cpu);
    if !names.is_empty() {
        let value = |name: &str| match name {
            "Percent" => format!("{:.2}%", cpu["Percent"].as_f64().unwrap_or(0.0)),
            "System Mode" => format!("{:.2}%", cpu["SystemMode"].as_f64().unwrap_or(0.0)),
            "User Mode" => format!("{:.2}%", cpu["UserMode"].as_f64().unwrap_or(0.0)),
            "Total Ticks" => format!("{:.0}", cpu["TotalTicks"].as_f64().unwrap_or(0.0)),
            "Throttled Periods" => text(&cpu["ThrottledPeriods"]),
            "Throttled Time" => text(&cpu["ThrottledTime"]),
            other => text(&cpu[other]),
        };
        out.push_str("\nCPU Stats\n");
        out.push_str(&table(&[
            names.clone(),
            names.iter().map(|n| value(n)).collect(),
        ]));
    }
    out.push('\n');
    out
}

/// How long before `now` the time `at` was (Unix nanoseconds), as Nomad's CLI says it: the
/// two largest units (`3m40s ago`, `1h2m ago`, `10s ago`).
fn ago(now: i64, at: i64) -> String {
    if at <= 0 {
        return "<none>".into();
    }
    let secs = (now.saturating_sub(at) / 1_000_000_000).max(0);
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    let text = match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m{s}s"),
        (0, _, _) => format!("{h}h{m}m"),
        _ => format!("{d}d{h}h"),
    };
    format!("{text} ago")
}

/// The allocation's ports as Nomad's `Allocation Addresses` table lists them (label marked
/// `*`, dynamic or not by the group's network, `address:port`, `-> to` when mapped);
/// `None` without ports.
fn addresses(alloc: &Value) -> Option<Vec<Vec<String>>> {
    let ports = alloc["AllocatedResources"]["Shared"]["Ports"]
        .as_array()
        .filter(|p| !p.is_empty())?;
    let group = alloc["Job"]["TaskGroups"]
        .as_array()
        .and_then(|gs| gs.iter().find(|g| g["Name"] == alloc["TaskGroup"]));
    let reserved = |label: &str| {
        group
            .and_then(|g| g["Networks"].as_array())
            .into_iter()
            .flatten()
            .filter_map(|n| n["ReservedPorts"].as_array())
            .flatten()
            .any(|p| p["Label"] == label)
    };
    let mut rows = vec![["Label", "Dynamic", "Address"].map(String::from).to_vec()];
    for p in ports {
        let label = text(&p["Label"]);
        let to = match p["To"].as_i64() {
            Some(to) if to > 0 => format!(" -> {to}"),
            _ => String::new(),
        };
        let dynamic = if reserved(&label) { "no" } else { "yes" };
        let address = format!("{}:{}{to}", text(&p["HostIP"]), text(&p["Value"]));
        rows.push(vec![format!("*{label}"), dynamic.into(), address]);
    }
    Some(rows)
}

/// What an event says, as `nomad alloc status` describes it: the exit code and signal of a
/// termination, the driver's error, else its display message (a restart's says its reason
/// and delay).
fn describe(e: &Value) -> String {
    let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
    match e["Type"].as_str().unwrap_or_default() {
        "Terminated" => {
            let mut d = format!("Exit Code: {}", e["ExitCode"].as_i64().unwrap_or(0));
            if let Some(sig) = e["Signal"].as_i64().filter(|s| *s != 0) {
                d.push_str(&format!(", Signal: {sig}"));
            }
            if !s("Message").is_empty() {
                d.push_str(&format!(", Exit Message: {:?}", s("Message")));
            }
            d
        }
        "Driver Failure" if !s("DriverError").is_empty() => s("DriverError"),
        "Setup Failure" if !s("SetupError").is_empty() => s("SetupError"),
        _ if !s("DisplayMessage").is_empty() => s("DisplayMessage"),
        _ => s("Message"),
    }
}

/// The `Lifecycle` block of each task of the allocation's group that has one.
fn lifecycles(alloc: &Value) -> BTreeMap<String, Value> {
    let group = alloc["TaskGroup"].as_str().unwrap_or_default();
    alloc["Job"]["TaskGroups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["Name"] == group)
        .flat_map(|g| g["Tasks"].as_array().cloned().unwrap_or_default())
        .filter(|t| {
            t["Lifecycle"]["Hook"]
                .as_str()
                .is_some_and(|h| !h.is_empty())
        })
        .filter_map(|t| Some((t["Name"].as_str()?.to_string(), t["Lifecycle"].clone())))
        .collect()
}

/// Nomad's name of a lifecycle: `prestart`, `poststart sidecar`, `main` without one.
fn lifecycle_name(lifecycle: Option<&Value>) -> String {
    match lifecycle {
        None => "main".into(),
        Some(lc) => {
            let hook = lc["Hook"].as_str().unwrap_or_default();
            if lc["Sidecar"] == true {
                format!("{hook} sidecar")
            } else {
                hook.to_string()
            }
        }
    }
}

/// The tasks as Nomad lists them: lifecycle tasks first (those that complete before the
/// sidecars), then the main tasks, each by name.
fn in_lifecycle_order<'a>(
    states: &'a serde_json::Map<String, Value>,
    lifecycles: &BTreeMap<String, Value>,
) -> Vec<(&'a String, &'a Value)> {
    let mut out: Vec<(&String, &Value)> = states.iter().collect();
    out.sort_by_key(|(task, _)| match lifecycles.get(*task) {
        Some(lc) if lc["Sidecar"] != true => 0,
        Some(_) => 1,
        None => 2,
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Issue 54: `alloc status` says when the allocation was made and changed, and where
    /// its ports are, as Nomad's does.
    #[test]
    fn times_and_addresses_are_shown_as_nomad_shows_them() {
        let s = 1_000_000_000i64;
        let now = 100_000 * s;
        assert_eq!(ago(now, now - 10 * s), "10s ago");
        assert_eq!(ago(now, now - 220 * s), "3m40s ago");
        assert_eq!(ago(now, now - 3720 * s), "1h2m ago");
        assert_eq!(ago(now, now - 90_000 * s), "1d1h ago");
        assert_eq!(ago(now, 0), "<none>");
        let alloc = json!({
            "TaskGroup": "web",
            "Job": {"TaskGroups": [{"Name": "web", "Networks": [
                {"ReservedPorts": [{"Label": "admin", "Value": 8081}],
                 "DynamicPorts": [{"Label": "http", "To": 8080}]}]}]},
            "AllocatedResources": {"Shared": {"Ports": [
                {"Label": "http", "Value": 23456, "To": 8080, "HostIP": "10.0.0.5"},
                {"Label": "admin", "Value": 8081, "To": 0, "HostIP": "10.0.0.5"}
            ]}}
        });
        assert_eq!(
            addresses(&alloc).unwrap(),
            vec![
                vec!["Label", "Dynamic", "Address"],
                vec!["*http", "yes", "10.0.0.5:23456 -> 8080"],
                vec!["*admin", "no", "10.0.0.5:8081"],
            ]
        );
        assert!(addresses(&json!({})).is_none());
    }

    /// Issue 54: an exit says its code once (no `Exit Message` repeating it), a restart
    /// says its delay.
    #[test]
    fn events_are_described_as_nomad_describes_them() {
        use crate::client::types::ExitResult;
        let exit = ExitResult {
            exit_code: 3,
            signal: 0,
            unknown: false,
            oom_killed: false,
        };
        let terminated = crate::client::task_runner::core::TaskCore::terminated(&exit, 1);
        let v = serde_json::to_value(&terminated).unwrap();
        assert_eq!(describe(&v), "Exit Code: 3");
        assert_eq!(v["DisplayMessage"], "Exit Code: 3");
        let killed = ExitResult { signal: 9, ..exit };
        let v = serde_json::to_value(crate::client::task_runner::core::TaskCore::terminated(
            &killed, 1,
        ))
        .unwrap();
        assert_eq!(describe(&v), "Exit Code: 3, Signal: 9");
        let restarting = json!({"Type": "Restarting", "RestartReason": "Restart within policy",
                                "DisplayMessage": "Task restarting in 5s"});
        assert_eq!(describe(&restarting), "Task restarting in 5s");
    }

    #[test]
    fn tasks_are_listed_and_named_by_lifecycle_as_nomad_lists_them() {
        let alloc = json!({
            "TaskGroup": "g",
            "Job": {"TaskGroups": [{"Name": "g", "Tasks": [
                {"Name": "a-web"},
                {"Name": "b-proxy", "Lifecycle": {"Hook": "prestart", "Sidecar": true}},
                {"Name": "c-init", "Lifecycle": {"Hook": "prestart", "Sidecar": false}},
                {"Name": "d-plain", "Lifecycle": null}
            ]}]}
        });
        let lifecycles = lifecycles(&alloc);
        let states: serde_json::Map<String, Value> = ["a-web", "b-proxy", "c-init", "d-plain"]
            .iter()
            .map(|t| (t.to_string(), json!({})))
            .collect();
        let order: Vec<&str> = in_lifecycle_order(&states, &lifecycles)
            .iter()
            .map(|(t, _)| t.as_str())
            .collect();
        assert_eq!(order, ["c-init", "b-proxy", "a-web", "d-plain"]);
        let names: Vec<String> = order
            .iter()
            .map(|t| lifecycle_name(lifecycles.get(*t)))
            .collect();
        assert_eq!(names, ["prestart", "prestart sidecar", "main", "main"]);
    }

    #[test]
    fn task_resources_show_used_of_given() {
        let alloc = json!({"AllocatedResources": {
            "Tasks": {"web": {"Cpu": {"CpuShares": 500}, "Memory": {"MemoryMB": 256}}},
            "Shared": {"DiskMB": 300}
        }});
        let usage = json!({
            "CpuStats": {"TotalTicks": 12.4},
            "MemoryStats": {"RSS": 0, "Usage": 6_500_000}
        });
        let shown = resources(&alloc, "web", &usage);
        assert!(shown.starts_with("Task Resources:\n"), "{shown}");
        assert!(shown.contains("12/500 MHz"), "{shown}");
        assert!(shown.contains("6.2 MiB/256.0 MiB"), "{shown}");
        assert!(shown.contains("300.0 MiB"), "{shown}");
    }

    #[test]
    fn detailed_stats_list_only_what_is_measured() {
        let usage = json!({
            "MemoryStats": {"RSS": 2048, "Cache": 0, "Swap": 0, "Usage": 4096, "MaxUsage": 8192,
                            "Measured": ["RSS", "Usage", "Max Usage"]},
            "CpuStats": {"Percent": 1.5, "ThrottledPeriods": 3, "ThrottledTime": 40,
                         "Measured": ["Throttled Periods", "Throttled Time", "Percent"]}
        });
        let shown = detailed(&usage);
        assert!(
            shown
                .contains("Memory Stats\nRSS      Usage    Max Usage\n2.0 KiB  4.0 KiB  8.0 KiB\n"),
            "{shown}"
        );
        assert!(shown.contains("CPU Stats\nThrottled Periods  Throttled Time  Percent\n3                  40              1.50%\n"), "{shown}");
        assert!(!shown.contains("Swap"), "{shown}");
        // Nothing measured, no tables.
        assert_eq!(
            detailed(&json!({"MemoryStats": {"Measured": []}, "CpuStats": {}})),
            "\n"
        );
    }
}
