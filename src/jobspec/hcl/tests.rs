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
                { "LTarget": "${attr.kernel.name}", "Operand": "=", "RTarget": "linux" },
                { "Operand": "distinct_hosts", "RTarget": "true" }
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
        allow_fs: false,
        budget: Default::default(),
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
    // An unclosed block is named where it opens.
    let e = err("job \"a\" {\n  group \"g\" {\n  }\n");
    assert!(
        e.starts_with("job.hcl:1:9:") && e.contains("invalid HCL: unclosed `{`"),
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
              service {
                name     = "web"
                provider = "nomad"
                check {
                  type      = "http"
                  path      = "/"
                  advertise = "10.0.0.1"
                }
              }
              resources {
                memory_max = 128
                cores      = 2
                device "nvidia/gpu" {}
              }
            }
          }
        }
        "#,
    )
    .unwrap();
    let refused: Vec<String> = crate::jobspec::unsupported::unsupported_fields(&job)
        .iter()
        .map(|u| format!("{}: {}", u.path, u.field))
        .collect();
    assert_eq!(
        refused,
        [
            "job → group \"g\" → task \"t\" → service \"web\" → check #0: Advertise",
            "job → group \"g\" → task \"t\" → Resources: Devices",
        ]
    );
    // Ports are acted on now: the network block is kept as Nomad's JSON, not refused.
    let port = &job["TaskGroups"][0]["Networks"][0]["DynamicPorts"][0];
    assert_eq!(
        (&port["Label"], &port["To"]),
        (&json!("http"), &json!(8080))
    );
    assert_eq!(job["Periodic"]["ProhibitOverlap"], json!(true));
    // `update` is acted on (deployments), so it reaches the job: there, a batch job's is
    // refused by validation.
    assert_eq!(job["TaskGroups"][0]["Update"]["Canary"], json!(1));
}

#[test]
fn variable_blocks_take_only_what_is_acted_on_and_values_must_fit_their_type() {
    let e = err("variable \"x\" {\n  sensitive = true\n}\njob \"j\" {}\n");
    assert!(e.contains("unknown argument \"sensitive\""), "{e}");
    let e = err("variable \"x\" {\n  type = strng\n}\njob \"j\" {}\n");
    assert!(e.contains("unknown type \"strng\""), "{e}");
    let e = err("variable \"x\" {\n  type    = number\n  default = \"many\"\n}\njob \"j\" {}\n");
    assert!(e.contains("is not of type number"), "{e}");
    // Primitives convert as HCL converts them: a number in a string is a number, a number
    // where a string is wanted its text.
    let job = parse(
        "variable \"port\" {\n  type    = number\n  default = \"7511\"\n}\n\
         variable \"on\" {\n  type    = bool\n  default = \"true\"\n}\n\
         variable \"name\" {\n  type    = string\n  default = 42\n}\n\
         job \"j\" {\n  meta {\n    next = var.port + 1\n    on = var.on\n    \
         name = \"${var.name}x\"\n  }\n}\n",
    )
    .unwrap();
    assert_eq!(
        job["Meta"],
        json!({ "next": "7512", "on": "true", "name": "42x" })
    );
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
    use crate::jobspec::schema::{
        CHANGE_SCRIPT, SPREAD, SPREAD_TARGET, TASK, TEMPLATE, TEMPLATE_WAIT,
    };
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
    let cases: [(&str, &Spec, Vec<String>, &[&str]); 11] = [
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
            &[],
        ),
        ("template", &TEMPLATE, keys(model::Template::default()), &[]),
        (
            "change_script",
            &CHANGE_SCRIPT,
            keys(model::ChangeScript::default()),
            &[],
        ),
        (
            "wait",
            &TEMPLATE_WAIT,
            keys(model::TemplateWait::default()),
            &[],
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
            // A job-level task is moved into a group of its own, and a job's or group's
            // vault block into the tasks.
            .filter(|json| !(block == "job" && *json == "Tasks"))
            .filter(|json| !(matches!(block, "job" | "group") && *json == "Vault"));
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
    let job = parse("job \"f\" {\n  meta {\n    a = format(\"%s-%y\", \"x\", 7)\n  }\n}\n");
    // `%y` is not a verb format knows: refused with a message, not guessed.
    let e = job.unwrap_err().to_string();
    assert!(e.contains("unsupported verb %y"), "{e}");
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

#[test]
fn env_and_meta_may_be_written_as_arguments_for_keys_a_block_cannot_spell() {
    let job = parse(
        r#"
        job "j" {
          meta = { "owner.team" = "web", build = 7, on = true }
          group "g" {
            meta = { "team.name" = "web" }
            task "t" {
              driver = "raw_exec"
              env    = merge({ APP_ENV = "prod" }, { "log.level" = "info" })
              meta   = { "build.id" = "42" }
            }
          }
        }
        "#,
    )
    .unwrap();
    assert_eq!(
        job["Meta"],
        json!({ "owner.team": "web", "build": "7", "on": "true" })
    );
    let group = &job["TaskGroups"][0];
    assert_eq!(group["Meta"], json!({ "team.name": "web" }));
    assert_eq!(
        group["Tasks"][0]["Env"],
        json!({ "APP_ENV": "prod", "log.level": "info" })
    );
    assert_eq!(group["Tasks"][0]["Meta"], json!({ "build.id": "42" }));
    // One form or the other, not both; and a map of strings, not a list.
    let e = err("job \"j\" {\n  meta = { a = \"1\" }\n  meta {\n    b = \"2\"\n  }\n}\n");
    assert!(e.contains("only one \"meta\" block"), "{e}");
    let e = err("job \"j\" {\n  meta {\n    b = \"2\"\n  }\n  meta = { a = \"1\" }\n}\n");
    assert!(e.contains("5:3") && e.contains("more than once"), "{e}");
    let e = err("job \"j\" {\n  meta = [\"a\"]\n}\n");
    assert!(e.contains("expected a map of strings"), "{e}");
    // Other blocks still take no argument form.
    let e = err("job \"j\" {\n  update = { canary = 1 }\n}\n");
    assert!(e.contains("unknown argument \"update\""), "{e}");
}

#[test]
fn constraints_and_affinities_get_nomads_operand_and_rtarget() {
    let job = parse(
        r#"
        job "j" {
          constraint { distinct_hosts = true }
          constraint { distinct_hosts = false }
          constraint {
            attribute = "${attr.os.name}"
            value     = "linux"
          }
          constraint {
            regexp    = "^ubuntu"
            attribute = "${attr.os.name}"
            operator  = "!="
          }
          constraint {
            operator          = "="
            distinct_property = "${meta.rack}"
            value             = "2"
          }
          constraint {
            attribute = "${attr.os.version}"
            version   = ">= 20"
          }
          affinity {
            attribute = "${node.class}"
            value     = "big"
            weight    = 50
          }
          affinity {
            attribute        = "${meta.tags}"
            set_contains_any = "a,b"
          }
        }
        "#,
    )
    .unwrap();
    assert_eq!(
        job["Constraints"],
        json!([
            { "Operand": "distinct_hosts", "RTarget": "true" },
            { "Operand": "distinct_hosts", "RTarget": "false" },
            { "LTarget": "${attr.os.name}", "Operand": "=", "RTarget": "linux" },
            { "LTarget": "${attr.os.name}", "Operand": "regexp", "RTarget": "^ubuntu" },
            { "LTarget": "${meta.rack}", "Operand": "distinct_property", "RTarget": "2" },
            { "LTarget": "${attr.os.version}", "Operand": "version", "RTarget": ">= 20" }
        ])
    );
    assert_eq!(
        job["Affinities"],
        json!([
            { "LTarget": "${node.class}", "Operand": "=", "RTarget": "big", "Weight": 50 },
            { "LTarget": "${meta.tags}", "Operand": "set_contains_any", "RTarget": "a,b" }
        ])
    );
    let e = err("job \"j\" {\n  affinity {\n    distinct_hosts = true\n  }\n}\n");
    assert!(e.contains("unknown argument \"distinct_hosts\""), "{e}");
}

#[test]
fn scaling_and_periodic_get_nomads_parse_time_defaults() {
    let job = parse(
        r#"
        job "j" {
          type = "batch"
          periodic {
            cron             = "*/5 * * * *"
            prohibit_overlap = true
          }
          group "g" {
            scaling {
              min = 1
              max = 5
            }
          }
          group "h" {
            scaling {
              type = "horizontal"
              max  = 2
            }
          }
        }
        "#,
    )
    .unwrap();
    assert_eq!(
        job["Periodic"],
        json!({ "Spec": "*/5 * * * *", "SpecType": "cron", "ProhibitOverlap": true })
    );
    assert_eq!(
        job["TaskGroups"][0]["Scaling"],
        json!({ "Min": 1, "Max": 5, "Type": "horizontal" })
    );
    assert_eq!(
        job["TaskGroups"][1]["Scaling"],
        json!({ "Max": 2, "Type": "horizontal" })
    );
    let job = parse(
        "job \"j\" {\n  periodic {\n    crons     = [\"0 1 * * *\", \"0 2 * * *\"]\n    time_zone = \"UTC\"\n  }\n}\n",
    )
    .unwrap();
    assert_eq!(
        job["Periodic"],
        json!({ "Specs": ["0 1 * * *", "0 2 * * *"], "SpecType": "cron", "TimeZone": "UTC" })
    );
    // Without a spec there is no SpecType to set.
    let job = parse("job \"j\" {\n  periodic {\n    enabled = false\n  }\n}\n").unwrap();
    assert_eq!(job["Periodic"], json!({ "Enabled": false }));
}

#[test]
fn jsonencode_keys_and_values_order_object_keys_as_cty_does() {
    let job = parse(
        r#"
        locals {
          labels = merge({ team = "web" }, { app = "shop", nested = { z = 1, a = [{ y = 1, b = 2 }] } })
        }
        job "j" {
          meta {
            labels = jsonencode(local.labels)
            keys   = join(",", keys({ b = 1, a = 2, c = 3 }))
            values = join(",", values({ b = 1, a = 2, c = 3 }))
          }
        }
        "#,
    )
    .unwrap();
    assert_eq!(
        job["Meta"],
        json!({
            "labels": r#"{"app":"shop","nested":{"a":[{"b":2,"y":1}],"z":1},"team":"web"}"#,
            "keys": "a,b,c",
            "values": "2,1,3"
        })
    );
}

#[test]
fn format_takes_go_flags_width_precision_and_argument_indexes() {
    let job = parse(
        r#"
        job "j" {
          meta {
            padded   = format("%03d", 7)
            negative = format("%05d|%+d|% d", -42, 5, 5)
            fixed    = format("%.2f", 3.14159)
            wide     = format("%5.1f|%-6.2f|%08.3f", 3.14159, 2.5, -1.5)
            left     = format("%-4s|%4s|%.2s", "ab", "cd", "xyz")
            percent  = format("100%% %s", "done")
            bool     = format("%t/%v", true, false)
            hex      = format("%x %X %#x %o %b", 255, 255, 255, 8, 5)
            exp      = format("%e|%.2E", 1234.5678, 0.000123)
            general  = format("%g|%g|%g|%.3g", 1234.5678, 0.00001, 100000000, 3.14159)
            verb_v   = format("%v|%v|%#v", "s", 1.5, "q")
            quoted   = format("%q", "a\"b")
            indexed  = format("%[2]s-%[1]s-%s", "a", "b")
          }
        }
        "#,
    )
    .unwrap();
    assert_eq!(
        job["Meta"],
        json!({
            "padded": "007",
            "negative": "-0042|+5| 5",
            "fixed": "3.14",
            "wide": "  3.1|2.50  |-001.500",
            "left": "ab  |  cd|xy",
            "percent": "100% done",
            "bool": "true/false",
            "hex": "ff FF 0xff 10 101",
            "exp": "1.234568e+03|1.23E-04",
            "general": "1234.5678|1e-05|1e+08|3.14",
            "verb_v": "s|1.5|\"q\"",
            "quoted": "\"a\\\"b\"",
            "indexed": "b-a-b"
        })
    );
    for (call, want) in [
        ("format(\"%d\", 1.5)", "whole number"),
        ("format(\"%d\", \"x\")", "needs a number"),
        ("format(\"%s %s\", \"x\")", "not enough arguments"),
        ("format(\"%s\", \"x\", \"y\")", "too many arguments"),
        ("format(\"%t\", 1)", "needs a bool"),
    ] {
        let e = err(&format!(
            "job \"j\" {{\n  meta {{\n    a = {call}\n  }}\n}}\n"
        ));
        assert!(e.contains(want), "{call}: {e}");
    }
}

#[test]
fn for_variables_are_evaluated_inside_strings_and_unknown_roots_stay_for_the_client() {
    let job = parse(
        r#"
        variable "paths" {
          default = ["/a", "/b"]
        }
        locals {
          node = "not the client's"
        }
        job "j" {
          meta {
            flags   = join(" ", [for p in var.paths : "--path=${p}"])
            keyed   = join(",", [for i, p in var.paths : "${i}=${p}" if p != "/b"])
            mapped  = jsonencode({ for p in var.paths : p => "${p}@${node.unique.name}" })
            list    = "%{for p in var.paths}${p};%{endfor}"
            nested  = "%{for p in var.paths}%{if p == "/a"}${upper(p)}%{else}${p}-${NOMAD_ALLOC_ID}%{endif} %{endfor}"
            runtime = "${attr.kernel.name}/${meta.rack}/${env["HOME"]}/${NOMAD_PORT_http}"
            local   = "${local.node}"
            escaped = "$${p} and %%{x}"
          }
          group "g" {
            task "t" {
              driver = "raw_exec"
              template {
                data = <<EOF
%{for p in var.paths}path ${p} on ${node.unique.name}
%{endfor~}
EOF
                destination = "local/x"
              }
            }
          }
        }
        "#,
    )
    .unwrap();
    assert_eq!(
        job["Meta"],
        json!({
            "flags": "--path=/a --path=/b",
            "keyed": "0=/a",
            "mapped": r#"{"/a":"/a@${node.unique.name}","/b":"/b@${node.unique.name}"}"#,
            "list": "/a;/b;",
            "nested": "/A /b-${NOMAD_ALLOC_ID} ",
            "runtime": "${attr.kernel.name}/${meta.rack}/${env[\"HOME\"]}/${NOMAD_PORT_http}",
            "local": "not the client's",
            "escaped": "${p} and %{x}"
        })
    );
    assert_eq!(
        job["TaskGroups"][0]["Tasks"][0]["Templates"][0]["EmbeddedTmpl"],
        json!("path /a on ${node.unique.name}\npath /b on ${node.unique.name}\n")
    );
    // A for variable is not in scope outside its expression: `p` here is the client's.
    let job = parse(
        "job \"j\" {\n  meta {\n    a = join(\",\", [for p in [\"x\"] : p])\n    b = \"${p}\"\n  }\n}\n",
    )
    .unwrap();
    assert_eq!(job["Meta"], json!({ "a": "x", "b": "${p}" }));
    // Anywhere an expression names an undefined root, Nomad's parser puts "${<the text>}".
    let job = parse(
        "job \"j\" {\n  meta {\n    a = node.class\n    b = lower(\"X-${NOMAD_JOB_NAME}\")\n    c = join(\"\", [for n in [\"x\"] : \"${n}${attr.cpu[\"n\"]}\"])\n  }\n}\n",
    )
    .unwrap();
    assert_eq!(
        job["Meta"],
        json!({ "a": "${node.class}", "b": "x-${nomad_job_name}", "c": "x${attr.cpu[\"n\"]}" })
    );
    // A computed index is not part of the reference: it indexes the string, an error.
    let e = err("job \"j\" {\n  meta {\n    a = join(\"\", [for n in [\"x\"] : \"${attr.cpu[n]}\"])\n  }\n}\n");
    assert!(e.contains("3:5"), "{e}");
}

#[test]
fn a_task_scaling_block_is_typed_by_its_label() {
    let job = parse(
        r#"
        job "j" {
          group "g" {
            task "t" {
              driver = "raw_exec"
              scaling "CPU" {
                enabled = true
                min     = 100
                max     = 500
                policy {
                  cooldown = "5m"
                }
              }
              scaling "mem" {
                type = "vertical_mem"
                max  = 1024
              }
            }
          }
        }
        "#,
    )
    .unwrap();
    assert_eq!(
        job["TaskGroups"][0]["Tasks"][0]["ScalingPolicies"],
        json!([
            {
                "Type": "vertical_cpu", "Enabled": true, "Min": 100, "Max": 500,
                "Policy": { "cooldown": "5m" }
            },
            { "Type": "vertical_mem", "Max": 1024 }
        ])
    );
    let task = |body: &str| {
        err(&format!(
            "job \"j\" {{\n  group \"g\" {{\n    task \"t\" {{\n{body}\n    }}\n  }}\n}}\n"
        ))
    };
    let e = task("scaling \"disk\" {\n  max = 1\n}");
    assert!(e.contains("must be \"cpu\" or \"mem\""), "{e}");
    let e = task("scaling \"cpu\" {\n  max = 1\n}\nscaling \"cpu\" {\n  max = 2\n}");
    assert!(e.contains("Duplicate scaling \"cpu\" block"), "{e}");
    let e = task("scaling \"cpu\" {\n  type = \"vertical_mem\"\n}");
    assert!(e.contains("expected \"vertical_cpu\""), "{e}");
    let e = task("scaling {\n  max = 1\n}");
    assert!(e.contains("needs a label"), "{e}");
}

#[test]
fn dynamic_blocks_expand_over_lists_and_maps_with_their_iterator_and_labels() {
    let job = parse(
        r#"
        variable "racks" {
          default = ["r1", "r2"]
        }
        locals {
          ports = { http = 8080, admin = 9000 }
        }
        job "j" {
          group "g" {
            dynamic "constraint" {
              for_each = var.racks
              content {
                attribute = "${meta.rack}"
                operator  = "!="
                value     = "${constraint.value}-${constraint.key}"
              }
            }
            network {
              dynamic "port" {
                for_each = local.ports
                iterator = p
                labels   = [p.key]
                content {
                  to = p.value
                }
              }
            }
            task "t" {
              driver = "raw_exec"
              config {
                command = "/bin/true"
                dynamic "mount" {
                  for_each = ["/a"]
                  content {
                    source = mount.value
                  }
                }
              }
            }
          }
        }
        "#,
    )
    .unwrap();
    let group = &job["TaskGroups"][0];
    assert_eq!(
        group["Constraints"],
        json!([
            { "LTarget": "${meta.rack}", "Operand": "!=", "RTarget": "r1-0" },
            { "LTarget": "${meta.rack}", "Operand": "!=", "RTarget": "r2-1" }
        ])
    );
    // A map iterates in key order, as cty does.
    assert_eq!(
        group["Networks"][0]["DynamicPorts"],
        json!([{ "Label": "admin", "To": 9000 }, { "Label": "http", "To": 8080 }])
    );
    assert_eq!(
        group["Tasks"][0]["Config"]["mount"],
        json!([{ "source": "/a" }])
    );
}

#[test]
fn a_dynamic_block_names_what_is_wrong_with_it() {
    let e =
        err("job \"j\" {\n  dynamic \"constrant\" {\n    for_each = [1]\n    content {}\n  }\n}\n");
    assert!(
        e.contains("job.hcl:2:3") && e.contains("unknown block \"constrant\""),
        "{e}"
    );
    let e = err("job \"j\" {\n  dynamic \"constraint\" {\n    for_each = [1]\n  }\n}\n");
    assert!(e.contains("missing required block \"content\""), "{e}");
    let e = err("job \"j\" {\n  dynamic \"constraint\" {\n    content {}\n  }\n}\n");
    assert!(e.contains("missing required argument \"for_each\""), "{e}");
    let e = err(
        "job \"j\" {\n  dynamic \"constraint\" {\n    for_each = \"x\"\n    content {}\n  }\n}\n",
    );
    assert!(
        e.contains("for_each: expected a list, a set or a map"),
        "{e}"
    );
    let e = err("job \"j\" {\n  dynamic \"constraint\" {\n    for_each = [1]\n    iterator = var\n    content {}\n  }\n}\n");
    assert!(e.contains("would hide"), "{e}");
    // An error inside the content names the dynamic block's place and the argument.
    let e = err("job \"j\" {\n  dynamic \"constraint\" {\n    for_each = [1]\n    content {\n      atribute = \"x\"\n    }\n  }\n}\n");
    assert!(
        e.contains("job.hcl:5:7") && e.contains("unknown argument \"atribute\""),
        "{e}"
    );
    // The iterator is gone after the block: a later reference is left for run time.
    let job = parse("job \"j\" {\n  dynamic \"constraint\" {\n    for_each = [1]\n    content {\n      value = constraint.value\n    }\n  }\n  meta { m = constraint.value }\n}\n").unwrap();
    assert_eq!(job["Constraints"][0]["RTarget"], json!("1"));
    assert_eq!(job["Meta"]["m"], json!("${constraint.value}"));
}

#[test]
fn variable_validation_fails_the_parse_with_its_message() {
    let text = "variable \"n\" {\n  type = number\n  default = 2\n  validation {\n    condition     = var.n > 0\n    error_message = \"n must be positive\"\n  }\n}\njob \"j\" {\n  meta { n = var.n }\n}\n";
    assert_eq!(parse(text).unwrap()["Meta"]["n"], json!("2"));
    let inputs = VarInputs {
        flags: vec![("n".into(), "0".into())],
        ..Default::default()
    };
    let e = parse_job("job.hcl", text, &inputs).unwrap_err().to_string();
    assert!(
        e.contains("job.hcl:5:5")
            && e.contains("variable \"n\" → validation")
            && e.contains("Invalid value for variable: n must be positive"),
        "{e}"
    );
    let e = err("variable \"n\" {\n  default = 1\n  validation {\n    condition = \"yes\"\n    error_message = \"m\"\n  }\n}\njob \"j\" {}\n");
    assert!(e.contains("condition: expected a bool"), "{e}");
    let e = err("variable \"n\" {\n  default = 1\n  validation {\n    condition = true\n  }\n}\njob \"j\" {}\n");
    assert!(
        e.contains("needs both \"condition\" and \"error_message\""),
        "{e}"
    );
}

#[test]
fn workload_blocks_get_nomads_names_defaults_and_port_split() {
    let job = parse(
        r#"
        job "j" {
          update {
            max_parallel     = 2
            min_healthy_time = "10s"
          }
          group "g" {
            ephemeral_disk { size = 300 }
            network {
              mode     = "bridge"
              hostname = "web-${NOMAD_ALLOC_INDEX}"
              port "http" { to = 8080 }
              port "metrics" { static = 9102 }
              dns {
                servers  = ["10.0.0.2"]
                searches = ["svc.test"]
                options  = ["ndots:2"]
              }
            }
            service {
              name = "web"
              port = "http"
              check {
                type     = "http"
                path     = "/"
                interval = "10s"
                timeout  = "2s"
                header { X-Probe = ["1"] }
                check_restart { grace = "30s" }
              }
            }
            task "t" {
              driver = "raw_exec"
              template {
                data        = "x"
                destination = "local/x"
                wait {
                  min = "1s"
                  max = "2s"
                }
              }
              artifact {
                source  = "https://example.com/a.tgz"
                options { checksum = "md5:00" }
              }
              vault { role = "r" }
              logs { max_file_size = 20 }
              resources {
                device "nvidia/gpu" {
                  count = 2
                  constraint {
                    attribute = "${device.attr.memory}"
                    operator  = ">="
                    value     = "2 GiB"
                  }
                }
              }
            }
          }
        }
        "#,
    )
    .unwrap();
    assert_eq!(
        job["Update"],
        json!({ "MaxParallel": 2, "MinHealthyTime": 10_000_000_000_i64 })
    );
    let group = &job["TaskGroups"][0];
    assert_eq!(group["EphemeralDisk"], json!({ "SizeMB": 300 }));
    assert_eq!(
        group["Networks"][0],
        json!({
            "Mode": "bridge",
            "Hostname": "web-${NOMAD_ALLOC_INDEX}",
            "DynamicPorts": [{ "Label": "http", "To": 8080 }],
            "ReservedPorts": [{ "Label": "metrics", "Value": 9102 }],
            "DNS": { "Servers": ["10.0.0.2"], "Searches": ["svc.test"], "Options": ["ndots:2"] }
        })
    );
    assert_eq!(
        group["Services"][0],
        json!({
            "Name": "web",
            "PortLabel": "http",
            "Checks": [{
                "Type": "http", "Path": "/", "Interval": 10_000_000_000_i64,
                "Timeout": 2_000_000_000_i64, "Header": { "X-Probe": ["1"] },
                "CheckRestart": { "Grace": 30_000_000_000_i64 }
            }]
        })
    );
    let task = &group["Tasks"][0];
    assert_eq!(
        task["Templates"][0],
        json!({
            "EmbeddedTmpl": "x", "DestPath": "local/x", "ChangeMode": "restart",
            "Perms": "0644", "Splay": 5_000_000_000_i64, "ErrMissingKey": false,
            "Wait": { "Min": 1_000_000_000_i64, "Max": 2_000_000_000_i64 }
        })
    );
    assert_eq!(
        task["Artifacts"][0],
        json!({ "GetterSource": "https://example.com/a.tgz", "GetterOptions": { "checksum": "md5:00" } })
    );
    assert_eq!(
        task["Vault"],
        json!({ "Role": "r", "Env": true, "DisableFile": false, "ChangeMode": "restart" })
    );
    assert_eq!(task["LogConfig"], json!({ "MaxFileSizeMB": 20 }));
    assert_eq!(
        task["Resources"]["Devices"][0],
        json!({
            "Name": "nvidia/gpu", "Count": 2,
            "Constraints": [{ "LTarget": "${device.attr.memory}", "Operand": ">=", "RTarget": "2 GiB" }]
        })
    );
    // A typo inside these blocks is an error with its path, as anywhere else.
    let e = err("job \"j\" {\n  group \"g\" {\n    service {\n      check { intervall = \"1s\" }\n    }\n  }\n}\n");
    assert!(
        e.contains("group \"g\" → service → check") && e.contains("unknown argument \"intervall\""),
        "{e}"
    );
}

/// Evaluates `name = expr` lines as a job's meta (`allow_fs` as the CLI has it).
fn meta_of(lines: &str, allow_fs: bool) -> Result<Value, JobspecError> {
    let inputs = VarInputs {
        allow_fs,
        ..Default::default()
    };
    parse_job(
        "job.hcl",
        &format!("job \"j\" {{\n  meta = {{\n{lines}\n  }}\n}}\n"),
        &inputs,
    )
    .map(|job| job["Meta"].clone())
}

#[test]
fn hash_uuid_and_cidr_functions_give_hcls_results() {
    let meta = meta_of(
        r#"
    md5     = md5("hello")
    sha1    = sha1("hello")
    sha256  = sha256("hello")
    b64     = base64sha256("hello")
    sha512  = substr(sha512("hello"), 0, 16)
    v5      = uuidv5("dns", "www.example.com")
    v4      = length(uuidv4())
    host    = cidrhost("10.12.112.0/20", 268)
    last    = cidrhost("10.12.112.0/20", -1)
    host6   = cidrhost("fd00:fd12:3456:7890:00a2::/72", 34)
    mask    = cidrnetmask("172.16.0.0/12")
    subnet  = cidrsubnet("172.16.0.0/12", 4, 2)
    subnet6 = cidrsubnet("fd00:fd12:3456:7890::/56", 16, 162)
    subnets = join(",", cidrsubnets("10.1.0.0/16", 4, 4, 8, 4))"#,
        false,
    )
    .unwrap();
    assert_eq!(
        meta,
        json!({
            "md5": "5d41402abc4b2a76b9719d911017c592",
            "sha1": "aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d",
            "sha256": "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
            "b64": "LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ=",
            "sha512": "9b71d224bd62f378",
            "v5": "2ed6657d-e927-568b-95e1-2665a8aea6a2",
            "v4": "36",
            "host": "10.12.113.12",
            "last": "10.12.127.255",
            "host6": "fd00:fd12:3456:7890::22",
            "mask": "255.240.0.0",
            "subnet": "172.18.0.0/16",
            "subnet6": "fd00:fd12:3456:7800:a200::/72",
            "subnets": "10.1.0.0/20,10.1.16.0/20,10.1.32.0/24,10.1.48.0/20"
        })
    );
    for (expr, wanted) in [
        (
            "cidrhost(\"10.0.0.0/30\", 4)",
            "cannot hold a host numbered 4",
        ),
        ("cidrsubnet(\"10.0.0.0/30\", 3, 0)", "go past 32 bits"),
        (
            "cidrsubnet(\"10.0.0.0/8\", 2, 4)",
            "cannot number a subnet 4",
        ),
        (
            "cidrnetmask(\"10.0.0.0/33\")",
            "prefix length must be 0 to 32",
        ),
        ("cidrsubnets(\"10.0.0.0/30\", 1, 1, 1)", "not enough room"),
        ("uuidv5(\"nope\", \"x\")", "uuidv5: the namespace must be"),
    ] {
        let e = meta_of(&format!("    x = {expr}"), false)
            .unwrap_err()
            .to_string();
        assert!(e.contains(wanted), "{expr}: {e}");
    }
}

#[test]
fn collection_string_and_conversion_functions_give_hcls_results() {
    let meta = meta_of(
        r##"
    sort     = join(",", sort(["b", "a", "c"]))
    compact  = join(",", compact(["a", "", "b"]))
    zipmap   = jsonencode(zipmap(["a", "b"], [1, 2]))
    slice    = join(",", slice(["a", "b", "c", "d"], 1, 3))
    index    = index(["a", "b"], "b")
    chunks   = jsonencode(chunklist(["a", "b", "c"], 2))
    coalesce = join(",", coalescelist([], ["x"]))
    union    = join(",", setunion(["a", "b"], ["b", "c"]))
    inter    = join(",", setintersection(["a", "b"], ["b", "c"]))
    minus    = join(",", setsubtract(["a", "b"], ["b"]))
    flist    = join(",", formatlist("%s=%d", ["a", "b"], [1, 2]))
    conv     = "${tostring(1)}/${tonumber("2") + 1}/${tobool("true")}"
    sets     = length(toset(["a", "a"]))
    trim     = trim("?!hi!?", "!?")
    chomp    = chomp("x\n\n")
    indent   = indent(2, "a\nb")
    url      = urlencode("a b&c/d")
    re       = regex("[a-z]+", "123abc456")
    regroups = jsonencode(regex("(\\d+)-(\\d+)", "10-20"))
    renamed  = jsonencode(regex("(?P<k>\\w+)=(?P<v>\\w+)", "a=b"))
    reall    = join(",", regexall("\\d", "a1b2"))
    replace  = regex_replace("a1b22", "\\d+", "#")
    math     = "${pow(2, 10)}/${log(8, 2)}/${signum(-3)}"
    ordered  = join(",", [for k, v in { b = 1, a = 2 } : "${k}${v}"])
    tmpl     = "%{for k, v in { z = 1, y = 2 }}${k}%{endfor}""##,
        false,
    )
    .unwrap();
    assert_eq!(
        meta,
        json!({
            "sort": "a,b,c", "compact": "a,b", "zipmap": "{\"a\":1,\"b\":2}",
            "slice": "b,c", "index": "1", "chunks": "[[\"a\",\"b\"],[\"c\"]]",
            "coalesce": "x", "union": "a,b,c", "inter": "b", "minus": "a",
            "flist": "a=1,b=2", "conv": "1/3/true", "sets": "1", "trim": "hi",
            "chomp": "x", "indent": "a\n  b", "url": "a+b%26c%2Fd", "re": "abc",
            "regroups": "[\"10\",\"20\"]", "renamed": "{\"k\":\"a\",\"v\":\"b\"}",
            "reall": "1,2", "replace": "a#b#", "math": "1024/3/-1",
            "ordered": "a2,b1", "tmpl": "yz"
        })
    );
}

#[test]
fn file_functions_read_local_files_in_the_cli_only() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("motd.txt");
    std::fs::write(&plain, "hello\n").unwrap();
    let tpl = dir.path().join("app.tpl");
    std::fs::write(&tpl, "port=${port}\n%{for h in hosts}${upper(h)} %{endfor}").unwrap();
    let lines = format!(
        "    text   = file({plain:?})\n    exists = fileexists({plain:?})\n    \
         absent = fileexists({missing:?})\n    \
         tpl    = templatefile({tpl:?}, {{ port = 80, hosts = [\"a\", \"b\"] }})",
        missing = dir.path().join("nope").display().to_string(),
        plain = plain.display().to_string(),
        tpl = tpl.display().to_string(),
    );
    let meta = meta_of(&lines, true).unwrap();
    assert_eq!(
        meta,
        json!({ "text": "hello\n", "exists": "true", "absent": "false", "tpl": "port=80\nA B " })
    );
    // Parsed by the servers: the file functions refuse, naming why.
    let e = meta_of(&lines, false).unwrap_err().to_string();
    assert!(e.contains("they work in the CLI"), "{e}");
    let e = meta_of("    x = file(\"/nonexistent/teamster\")", true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("file: \"/nonexistent/teamster\""), "{e}");
}

/// Nomad's path functions and `filebase64`, also in the CLI only.
#[test]
fn path_functions_expand_and_split_paths_in_the_cli_only() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("key.bin");
    std::fs::write(&bin, [0u8, 159, 146, 150]).unwrap();
    let home = std::env::var("HOME").unwrap_or_default();
    let lines = format!(
        "    home = pathexpand(\"~/.ssh/id\")\n    same = pathexpand(\"/etc/x\")\n    \
         base = basename(\"/srv/app/config.hcl\")\n    dir  = dirname(\"/srv/app//config.hcl\")\n    \
         abs  = abspath(\"/srv/../etc/./hosts\")\n    b64  = filebase64({bin:?})",
        bin = bin.display().to_string(),
    );
    let meta = meta_of(&lines, true).unwrap();
    if !home.is_empty() {
        assert_eq!(meta["home"], json!(format!("{home}/.ssh/id")));
    }
    assert_eq!(meta["same"], "/etc/x");
    assert_eq!(meta["base"], "config.hcl");
    assert_eq!(meta["dir"], "/srv/app");
    assert_eq!(meta["abs"], "/etc/hosts");
    assert_eq!(meta["b64"], "AJ+Slg==");
    let e = meta_of("    x = pathexpand(\"~root/x\")", true)
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot expand user-specific home dir"), "{e}");
    let e = meta_of(&lines, false).unwrap_err().to_string();
    assert!(e.contains("they work in the CLI"), "{e}");
}

/// Regression for the `hcl_job` fuzz target's crash: nesting a few thousand levels deep
/// overflowed the stack and aborted the agent (`/v1/jobs/parse`). It is refused with a
/// syntax error naming where, and the deepest nesting allowed still parses on a thread with
/// the 2 MiB stack of a tokio worker.
#[test]
fn nesting_past_the_limit_is_refused_and_the_limit_fits_a_small_stack() {
    let deep = |open: &str, inner: &str, close: &str, n: usize| {
        format!(
            "locals {{\n  a = {}{inner}{}\n}}\njob \"x\" {{}}\n",
            open.repeat(n),
            close.repeat(n)
        )
    };
    for text in [
        deep("(", "1", ")", 50_000),
        deep("[", "", "]", 50_000),
        deep("{b = ", "1", "}", 20_000),
        deep("-", "1", "", 50_000),
        deep("\"${", "1", "}\"", 20_000),
        format!(
            "job \"x\" {{\n{}{}}}\n",
            "a {\n".repeat(20_000),
            "}\n".repeat(20_000)
        ),
    ] {
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("nesting deeper than 64 levels"), "{e}");
        assert!(e.starts_with("job.hcl:"), "names the place: {e}");
    }
    let limit = nesting::MAX_NESTING - 2;
    let texts = vec![
        deep("(", "1", ")", limit),
        deep("[", "", "]", limit),
        deep("{b = ", "1", "}", limit),
        deep("-", "1", "", limit),
        deep("\"${", "1", "}\"", limit / 2),
    ];
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            for text in texts {
                // Parsed (or refused for another reason), never a stack overflow.
                let _ = parse(&text);
            }
        })
        .unwrap()
        .join()
        .unwrap();
}

/// Regression for the `hcl_job` fuzz target's second find: arithmetic the HCL library
/// panics on (a division or modulo by zero) is an error naming the file, not a panic.
#[test]
fn arithmetic_the_hcl_library_panics_on_is_an_error() {
    for expr in ["8/0", "1 % 0", "-8/0", "0/0"] {
        let text = format!("job \"x\" {{\n  priority = {expr}\n}}\n");
        let r = std::panic::catch_unwind(|| parse(&text));
        let e = r.expect("no panic escapes").expect_err(expr).to_string();
        assert!(
            e.starts_with("job.hcl: cannot evaluate the job file"),
            "{expr}: {e}"
        );
    }
}

/// Regression for the `hcl_job` fuzz target's third find: 3.4 KB of unclosed brackets kept
/// the parser backtracking for over 10 s. Unclosed constructs are now refused by a linear
/// scan before the parser runs.
#[test]
fn unclosed_brackets_are_refused_at_once() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fuzz/regressions/hcl_job-unclosed-brackets-timeout.hcl"
    ))
    .unwrap();
    let e = parse(&text).unwrap_err().to_string();
    assert!(e.contains("invalid HCL: unclosed `[`"), "{e}");
}

#[test]
fn a_disconnect_block_and_max_client_disconnect_become_nomads_json() {
    let job = parse(
        r#"
        job "web" {
          group "g" {
            max_client_disconnect = "2m"
            disconnect {
              lost_after = "1h"
              replace    = false
              reconcile  = "keep_original"
            }
            task "t" { driver = "raw_exec" }
          }
        }
        "#,
    )
    .unwrap();
    let g = &job["TaskGroups"][0];
    assert_eq!(g["Disconnect"]["LostAfter"], json!(3_600_000_000_000u64));
    assert_eq!(g["Disconnect"]["Replace"], json!(false));
    assert_eq!(g["Disconnect"]["Reconcile"], json!("keep_original"));
    assert_eq!(g["MaxClientDisconnect"], json!(120_000_000_000u64));
    assert!(crate::jobspec::unsupported::unsupported_fields(&job).is_empty());
    assert_eq!(
        crate::jobspec::unsupported::job_warnings(&job),
        ["job → group \"g\": max_client_disconnect is deprecated; the group's disconnect block is used instead"]
    );
}

#[test]
fn stop_after_client_disconnect_is_nomad_s_old_stop_on_client_after() {
    let job = parse(
        r#"
        job "web" {
          group "g" {
            stop_after_client_disconnect = "90s"
            task "t" { driver = "raw_exec" }
          }
        }
        "#,
    )
    .unwrap();
    assert_eq!(
        job["TaskGroups"][0]["StopAfterClientDisconnect"],
        json!(90_000_000_000u64)
    );
    assert!(crate::jobspec::unsupported::unsupported_fields(&job).is_empty());
    assert_eq!(
        crate::jobspec::unsupported::job_warnings(&job),
        ["job → group \"g\": stop_after_client_disconnect is deprecated; it is used as disconnect.stop_on_client_after"]
    );
    let mut model: teamster_storage::model::Job =
        serde_json::from_value(job).expect("the model reads it");
    model.canonicalize();
    let group = &model.task_groups[0];
    assert_eq!(group.stop_after_client_disconnect, None, "folded");
    let disconnect = group.disconnect.as_ref().expect("a disconnect block");
    assert_eq!(disconnect.stop_on_client_after, Some(90_000_000_000));
    assert_eq!(disconnect.lost_after, 0);
    model.validate().expect("valid");
}

#[test]
fn a_locality_block_becomes_levels_with_waits_in_nanoseconds() {
    let job = parse(
        r#"
        job "build" {
          datacenters = ["dc1"]
          type        = "batch"
          group "compile" {
            locality {
              level {
                attribute = "${meta.cache}"
                operator  = "set_contains"
                value     = "src-4f2a"
                wait      = "5s"
              }
              level {
                attribute = "${meta.deps}"
                value     = "toolchain-1"
                wait      = "1m"
              }
            }
            task "cc" {
              driver = "raw_exec"
              config { command = "/bin/true" }
            }
          }
        }
        "#,
    )
    .unwrap();
    assert_eq!(
        job["TaskGroups"][0]["Locality"],
        json!({"Levels": [
            {"LTarget": "${meta.cache}", "Operand": "set_contains", "RTarget": "src-4f2a",
             "Wait": 5_000_000_000u64},
            {"LTarget": "${meta.deps}", "Operand": "=", "RTarget": "toolchain-1",
             "Wait": 60_000_000_000u64},
        ]})
    );
    let mut model: teamster_storage::model::Job = serde_json::from_value(job).unwrap();
    model.canonicalize();
    let locality = model.task_groups[0].locality.as_ref().unwrap();
    assert_eq!(locality.levels.len(), 2);
    assert_eq!(locality.levels[1].wait, 60_000_000_000);
    model.validate().unwrap();
    let bad = err(r#"
        job "build" {
          group "g" {
            locality {
              level {
                attribute = "${meta.cache}"
                wait      = "5s"
                weight    = 3
              }
            }
            task "t" { driver = "raw_exec" }
          }
        }
    "#);
    assert!(bad.contains("weight"), "{bad}");
}

/// Three nested `for` expressions over `range(1024)`: a billion iterations from 300 bytes.
const NESTED_FOR_BOMB: &str = r#"
locals {
  r = range(1024)
  x = [for a in local.r : [for b in local.r : [for c in local.r : "${a}${b}${c}"]]]
}
job "bomb" {
  group "g" {
    task "t" { driver = "mock" }
  }
}
"#;

/// Twenty locals, each twice the one before: a gigabyte from under 2 KB.
fn doubling_bomb() -> String {
    let mut text = format!("locals {{\n  s0 = \"{}\"\n", "x".repeat(1024));
    for i in 1..=20 {
        text.push_str(&format!(
            "  s{i} = \"${{local.s{}}}${{local.s{}}}\"\n",
            i - 1,
            i - 1
        ));
    }
    text.push_str("}\njob \"bomb\" {\n  meta { s = local.s20 }\n  group \"g\" {\n    task \"t\" { driver = \"mock\" }\n  }\n}\n");
    text
}

#[test]
fn an_evaluation_past_its_step_budget_is_an_error_naming_the_limit() {
    let e = err(NESTED_FOR_BOMB);
    assert!(e.contains("budget of 1000000 steps"), "{e}");
    assert!(
        e.contains("locals: x: the evaluation took more than"),
        "the parser's own function is not named: {e}"
    );
}

#[test]
fn an_evaluation_past_its_memory_budget_is_an_error_naming_the_limit() {
    let text = doubling_bomb();
    assert!(text.len() < 2048, "{}", text.len());
    let e = err(&text);
    assert!(e.contains("budget of 64 MiB"), "{e}");
}

#[test]
fn an_evaluation_within_its_budget_gives_the_same_job_as_before() {
    // Large but honest: 100 × 100 for-elements and a 32 KiB string.
    let text = r#"
        locals {
          r = range(100)
          grid = flatten([for a in local.r : [for b in local.r : a * b]])
          s0 = "abcdefgh"
          s1 = "${local.s0}${local.s0}${local.s0}${local.s0}"
          s2 = "${local.s1}${local.s1}${local.s1}${local.s1}"
          s3 = "${local.s2}${local.s2}${local.s2}${local.s2}"
          s4 = "${local.s3}${local.s3}${local.s3}${local.s3}"
          s5 = "${local.s4}${local.s4}${local.s4}${local.s4}"
        }
        job "ok" {
          meta {
            n    = length(local.grid)
            last = local.grid[9999]
            len  = length(local.s5)
            port = "${NOMAD_PORT_http}"
          }
          group "g" {
            task "t" { driver = "mock" }
          }
        }
    "#;
    let job = parse(text).unwrap();
    assert_eq!(
        job["Meta"],
        json!({"n": "10000", "last": "9801", "len": "8192", "port": "${NOMAD_PORT_http}"})
    );
    let tight = VarInputs {
        budget: crate::jobspec::budget::EvalBudget {
            max_steps: 1000,
            ..Default::default()
        },
        ..Default::default()
    };
    let e = parse_job("job.hcl", text, &tight).unwrap_err().to_string();
    assert!(e.contains("budget of 1000 steps"), "{e}");
}

/// An evaluation error names what went wrong and where, not the parser's own wrappers
/// around the expression (`pathexpand` is a CLI-only function, as Nomad's HTTP parse
/// refuses it).
#[test]
fn evaluation_errors_do_not_show_the_parser_s_own_functions() {
    for text in [
        r#"
        locals { key = pathexpand("~/.ssh/id") }
        job "j" {
          group "g" {
            task "t" { driver = "raw_exec" }
          }
        }
        "#,
        r#"
        job "j" {
          meta { key = pathexpand("~/.ssh/id") }
          group "g" {
            task "t" { driver = "raw_exec" }
          }
        }
        "#,
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(
            e.contains("undefined function `pathexpand`") || e.contains("pathexpand"),
            "{e}"
        );
        assert!(!e.contains("teamster_"), "{e}");
    }
}
