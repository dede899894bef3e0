use serde_json::json;

use super::*;

fn parse(text: &str) -> Result<Value, JobspecError> {
    parse_job("job.hcl", text, &VarInputs::default())
}

fn err(text: &str) -> String {
    parse(text).expect_err("an error").to_string()
}

#[test]
fn a_job_becomes_nomads_json_with_labels_as_names_and_durations_in_nanoseconds() {
    let job = parse(
        r#"
        job "web" {
          datacenters = ["dc1"]
          type        = "service"
          priority    = 70
          meta {
            team  = "a"
            build = 7
          }
          constraint {
            attribute = "${attr.kernel.name}"
            value     = "linux"
          }
          constraint { distinct_hosts = true }
          group "api" {
            count = 3
            restart {
              attempts = 2
              interval = "30m"
              delay    = "15s"
              mode     = "fail"
            }
            spread {
              attribute = "${node.datacenter}"
              weight    = 100
              target "dc1" { percent = 60 }
            }
            task "server" {
              driver = "raw_exec"
              config {
                command = "/bin/sleep"
                args    = ["${NOMAD_ALLOC_ID}", "1h"]
              }
              env { PORT = 8080 }
              kill_timeout = "1m30s"
              resources {
                cpu    = 100
                memory = 64
              }
              affinity {
                attribute = "${meta.rack}"
                operator  = "="
                value     = "r1"
                weight    = 50
              }
            }
          }
        }
        "#,
    )
    .unwrap();
    assert_eq!(
        job,
        json!({
            "ID": "web",
            "Name": "web",
            "Datacenters": ["dc1"],
            "Type": "service",
            "Priority": 70,
            "Meta": { "team": "a", "build": "7" },
            "Constraints": [
                { "LTarget": "${attr.kernel.name}", "RTarget": "linux" },
                { "Operand": "distinct_hosts" }
            ],
            "TaskGroups": [{
                "Name": "api",
                "Count": 3,
                "RestartPolicy": {
                    "Attempts": 2, "Interval": 1_800_000_000_000i64,
                    "Delay": 15_000_000_000i64, "Mode": "fail"
                },
                "Spreads": [{
                    "Attribute": "${node.datacenter}", "Weight": 100,
                    "SpreadTarget": [{ "Value": "dc1", "Percent": 60 }]
                }],
                "Tasks": [{
                    "Name": "server",
                    "Driver": "raw_exec",
                    "Config": { "command": "/bin/sleep", "args": ["${NOMAD_ALLOC_ID}", "1h"] },
                    "Env": { "PORT": "8080" },
                    "KillTimeout": 90_000_000_000i64,
                    "Resources": { "CPU": 100, "MemoryMB": 64 },
                    "Affinities": [{
                        "LTarget": "${meta.rack}", "Operand": "=", "RTarget": "r1", "Weight": 50
                    }]
                }]
            }]
        })
    );
}

#[test]
fn variables_take_defaults_then_environment_then_files_then_flags() {
    let text = r#"
        variable "dc" {
          type    = string
          default = "dc1"
        }
        variable "count" { type = number }
        variable "tags" {
          type    = list(string)
          default = []
        }
        variable "image" { default = "a" }
        locals {
          name  = "${local.prefix}-${var.dc}"
          prefix = upper("web")
        }
        job "j" {
          datacenters = [var.dc]
          meta {
            name  = local.name
            tags  = join(",", var.tags)
            image = var.image
            both  = format("%s/%d", var.dc, var.count)
          }
          group "g" {
            count = var.count
            task "t" { driver = "mock" }
          }
        }
    "#;
    let inputs = VarInputs {
        env: vec![
            ("count".into(), "2".into()),
            ("image".into(), "from-env".into()),
        ],
        files: vec![(
            "vars.hcl".into(),
            "image = \"from-file\"\ntags = [\"x\", \"y\"]\n".into(),
        )],
        flags: vec![
            ("dc".into(), "dc9".into()),
            ("tags".into(), "[\"z\"]".into()),
        ],
        strict: true,
    };
    let job = parse_job("job.hcl", text, &inputs).unwrap();
    assert_eq!(job["Datacenters"], json!(["dc9"]));
    assert_eq!(job["TaskGroups"][0]["Count"], json!(2));
    assert_eq!(
        job["Meta"],
        json!({ "name": "WEB-dc9", "tags": "z", "image": "from-file", "both": "dc9/2" })
    );

    // Without the environment, `count` has no value at all.
    let inputs = VarInputs::default();
    let e = parse_job("job.hcl", text, &inputs).unwrap_err().to_string();
    assert!(e.contains("variable \"count\""), "{e}");
    assert!(e.contains("Unset variable"), "{e}");
    assert!(e.starts_with("job.hcl:6:9:"), "{e}");

    // A flag for a variable the file does not declare is an error in strict mode.
    let inputs = VarInputs {
        env: vec![
            ("count".into(), "1".into()),
            ("undeclared".into(), "x".into()),
        ],
        flags: vec![("nope".into(), "1".into())],
        strict: true,
        ..VarInputs::default()
    };
    let e = parse_job("job.hcl", text, &inputs).unwrap_err().to_string();
    assert!(e.contains("Undefined variable \"nope\""), "{e}");
    // … and a number that is not one is named.
    let inputs = VarInputs {
        flags: vec![("count".into(), "three".into())],
        ..VarInputs::default()
    };
    let e = parse_job("job.hcl", text, &inputs).unwrap_err().to_string();
    assert!(e.contains("count") && e.contains("not a number"), "{e}");
}

#[test]
fn runtime_interpolations_stay_for_the_client_and_parse_time_ones_are_evaluated() {
    let job = parse(
        r#"
        variable "port" { default = "8080" }
        job "j" {
          group "g" {
            task "t" {
              driver = "raw_exec"
              config {
                command = "run"
                args = ["--addr=${NOMAD_IP_http}:${var.port}", "$${literal}", "${upper("x")}"]
              }
            }
          }
        }
        "#,
    )
    .unwrap();
    assert_eq!(
        job["TaskGroups"][0]["Tasks"][0]["Config"]["args"],
        json!(["--addr=${NOMAD_IP_http}:8080", "${literal}", "X"])
    );
}

#[test]
fn unknown_arguments_and_blocks_name_the_file_line_column_and_block_path() {
    let e = err(
        "job \"web\" {\n  group \"api\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      comand = \"x\"\n    }\n  }\n}\n",
    );
    assert_eq!(
        e,
        "job.hcl:5:7: job \"web\" → group \"api\" → task \"t\": unknown argument \"comand\""
    );
    let e = err("job \"web\" {\n  grup \"api\" {}\n}\n");
    assert_eq!(e, "job.hcl:2:3: job \"web\": unknown block \"grup\"");
    // Positions count the original text, even after runtime interpolations were escaped.
    let e = err("job \"web\" {\n  meta { a = \"${attr.x}${node.y}\" }\n  bad = 1\n}\n");
    assert_eq!(e, "job.hcl:3:3: job \"web\": unknown argument \"bad\"");
    let e = err("job \"web\" {\n  group {}\n}\n");
    assert!(e.contains("needs a label"), "{e}");
    assert_eq!(
        err("job \"a\" {}\njob \"b\" {}\n"),
        "job.hcl:2:1: (top level): Duplicate job block"
    );
    assert_eq!(
        err("variable \"x\" { default = 1 }\n"),
        "job.hcl: Missing job block"
    );
    let e = err("job \"a\" {\n  group \"g\" {\n    count = \"three\"\n  }\n}\n");
    assert!(e.contains("count: expected a whole number"), "{e}");
    let e = err("job \"a\" {\n  group \"g\" {\n    restart { delay = \"5 days\" }\n  }\n}\n");
    assert!(e.contains("delay: expected a duration"), "{e}");
    let e = err("job \"a\" {\n  meta { x = nosuchfn(1) }\n}\n");
    assert!(e.contains("nosuchfn"), "{e}");
    let e = err("job \"a\" {\n  group \"g\" {\n  }\n");
    assert!(
        e.starts_with("job.hcl:3:") && e.contains("invalid HCL") && e.contains("expected `}`"),
        "{e}"
    );
}

#[test]
fn blocks_teamster_does_not_act_on_are_kept_so_that_they_are_refused_by_name() {
    let job = parse(
        r#"
        job "cron" {
          type = "batch"
          periodic {
            crons            = ["*/5 * * * *"]
            prohibit_overlap = true
          }
          group "g" {
            update { canary = 1 }
            network {
              port "http" { to = 8080 }
            }
            task "t" {
              driver = "raw_exec"
              service { name = "web" }
              resources { memory_max = 128 }
            }
          }
        }
        "#,
    )
    .unwrap();
    let refused: Vec<String> = crate::jobspec::unsupported_fields(&job)
        .iter()
        .map(|u| format!("{}: {}", u.path, u.field))
        .collect();
    assert_eq!(
        refused,
        [
            "job: Periodic",
            "job → group \"g\": Update",
            "job → group \"g\": Networks",
            "job → group \"g\" → task \"t\": Services",
            "job → group \"g\" → task \"t\" → Resources: MemoryMaxMB",
        ]
    );
    assert_eq!(job["Periodic"]["ProhibitOverlap"], json!(true));
}

#[test]
fn variable_blocks_take_only_what_is_acted_on_and_values_must_fit_their_type() {
    let e = err("variable \"x\" {\n  default = 1\n  validation {\n    condition = true\n  }\n}\njob \"j\" {}\n");
    assert!(e.contains("validation blocks are not supported yet"), "{e}");
    let e = err("variable \"x\" {\n  sensitive = true\n}\njob \"j\" {}\n");
    assert!(e.contains("unknown argument \"sensitive\""), "{e}");
    let e = err("variable \"x\" {\n  type = strng\n}\njob \"j\" {}\n");
    assert!(e.contains("unknown type \"strng\""), "{e}");
    let e = err("variable \"x\" {\n  type    = number\n  default = \"many\"\n}\njob \"j\" {}\n");
    assert!(e.contains("is not of type number"), "{e}");
    let e = err("variables {\n  a = 1\n}\nvariables {\n  a = 2\n}\njob \"j\" {}\n");
    assert!(e.contains("duplicate name \"a\""), "{e}");
    // An `id` argument names the job; the label stays its Name.
    let job = parse("job \"label\" {\n  id = \"real\"\n}\n").unwrap();
    assert_eq!(
        (&job["ID"], &job["Name"]),
        (&json!("real"), &json!("label"))
    );
}

/// Every JSON field the HCL schema writes is one the model stores or one the check refuses:
/// nothing read from a job file can be dropped silently on the way to the cluster.
#[test]
fn every_field_the_schema_writes_is_stored_or_refused() {
    use teamster_storage::model;

    use crate::jobspec::schema::{Content, Spec, GROUP, JOB, RESCHEDULE, RESOURCES, RESTART};
    use crate::jobspec::schema::{SPREAD, SPREAD_TARGET, TASK};
    use crate::jobspec::unsupported as refused;

    fn keys<T: serde::Serialize>(v: T) -> Vec<String> {
        serde_json::to_value(v)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect()
    }
    let cases: [(&str, &Spec, Vec<String>, &[&str]); 8] = [
        ("job", &JOB, keys(model::Job::default()), refused::JOB),
        (
            "group",
            &GROUP,
            keys(model::TaskGroup::default()),
            refused::GROUP,
        ),
        ("task", &TASK, keys(model::Task::default()), refused::TASK),
        (
            "resources",
            &RESOURCES,
            keys(model::Resources::default()),
            refused::RESOURCES,
        ),
        (
            "restart",
            &RESTART,
            keys(model::RestartPolicy::default()),
            refused::GROUP_RESTART,
        ),
        (
            "reschedule",
            &RESCHEDULE,
            keys(model::ReschedulePolicy::default()),
            &[],
        ),
        ("spread", &SPREAD, keys(model::Spread::default()), &[]),
        (
            "target",
            &SPREAD_TARGET,
            keys(model::SpreadTarget::default()),
            &[],
        ),
    ];
    let mut lost = Vec::new();
    for (block, spec, stored, refused) in cases {
        let written = spec
            .args
            .iter()
            .map(|(_, json, _)| *json)
            .chain(
                spec.blocks
                    .iter()
                    .filter(|n| !matches!(n.content, Content::Constraint { .. }))
                    .map(|n| n.json),
            )
            // A job-level task is moved into a group of its own.
            .filter(|json| !(block == "job" && *json == "Tasks"));
        for json in written {
            if !stored.iter().any(|k| k == json) && !refused.contains(&json) {
                lost.push(format!("{block}: {json}"));
            }
        }
    }
    assert!(
        lost.is_empty(),
        "written by the parser, neither stored nor refused: {lost:?}"
    );
}

#[test]
fn a_job_level_task_becomes_a_group_of_one() {
    let job =
        parse("job \"solo\" {\n  task \"t\" { driver = \"mock\" }\n  group \"g\" {}\n}\n").unwrap();
    assert_eq!(job["TaskGroups"][0]["Name"], json!("t"));
    assert_eq!(job["TaskGroups"][0]["Tasks"][0]["Driver"], json!("mock"));
    assert_eq!(job["TaskGroups"][1]["Name"], json!("g"));
    assert!(job.get("Tasks").is_none());
}

#[test]
fn functions_cover_strings_collections_numbers_and_encodings() {
    let job = parse("job \"f\" {\n  meta {\n    a = format(\"%s-%03d\", \"x\", 7)\n  }\n}\n");
    // `%03d` is not a verb this format knows: refused with a message, not guessed.
    let e = job.unwrap_err().to_string();
    assert!(e.contains("unsupported verb %0"), "{e}");
    let job = parse(
        r#"
        locals {
          m = merge({ a = 1 }, { b = 2 })
        }
        job "f" {
          meta {
            a = format("%s-%d%%", "x", 7)
            b = jsonencode(local.m)
            c = length(concat([1], [2, 3]))
            d = title("hello world")
            e = trimspace("  x ")
            f = max(3, 9, 4)
            g = lookup(local.m, "z", "none")
            h = base64encode("teamster")
            i = base64decode(base64encode("round trip"))
            j = join("+", reverse(split(",", "a,b,c")))
          }
        }
        "#,
    )
    .unwrap();
    assert_eq!(
        job["Meta"],
        json!({
            "a": "x-7%", "b": "{\"a\":1,\"b\":2}", "c": "3", "d": "Hello World", "e": "x",
            "f": "9", "g": "none", "h": "dGVhbXN0ZXI=", "i": "round trip", "j": "c+b+a"
        })
    );
}

#[test]
fn go_durations_parse_like_go() {
    assert_eq!(parse_go_duration("30s"), Some(30_000_000_000));
    assert_eq!(parse_go_duration("1h30m"), Some(5_400_000_000_000));
    assert_eq!(parse_go_duration("1.5s"), Some(1_500_000_000));
    assert_eq!(parse_go_duration("250ms"), Some(250_000_000));
    assert_eq!(parse_go_duration("0"), Some(0));
    assert_eq!(parse_go_duration("10"), None);
    assert_eq!(parse_go_duration("1d"), None);
    assert_eq!(parse_go_duration(""), None);
}

#[test]
fn a_file_over_the_limit_is_refused_before_parsing() {
    let big = format!(
        "job \"x\" {{\n  meta {{ a = \"{}\" }}\n}}\n",
        "a".repeat(MAX_SOURCE_BYTES)
    );
    let e = err(&big);
    assert!(e.contains("the limit is 1048576"), "{e}");
}
