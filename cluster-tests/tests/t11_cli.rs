//! The `teamster` binary's command line: config errors name the file and the key and exit
//! non-zero; API commands fail cleanly without a server; usage errors exit 2. And the example
//! jobs in `deploy/jobs/` that teamster runs parse as Nomad JSON and pass validation, and each
//! HCL file gives the same job as its JSON twin, so the docs and the tests that use them stay
//! honest (the ones that set fields teamster refuses are checked by t12_jobspec_corpus).

use std::process::Command;

fn teamster() -> Command {
    Command::new(teamster_cluster_tests::process::teamster_bin())
}

/// A `teamster agent --dev` on its own loopback address, killed when dropped, with its ready
/// node's ID; `run` runs the CLI against it.
struct DevAgent {
    child: std::process::Child,
    addr: String,
    node_id: String,
    _log: tempfile::NamedTempFile,
}

impl Drop for DevAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl DevAgent {
    /// Start one on `127.X.Y.host` (X, Y from the test process's ID, so runs in parallel do
    /// not share it) and wait for its node to be ready.
    async fn start(host: u32, third: u32) -> anyhow::Result<DevAgent> {
        use std::process::Stdio;
        use std::time::Duration;
        let pid = std::process::id();
        let ip = format!(
            "127.{}.{}.{host}",
            10 + (pid % 200),
            third - (pid / 200 % 5)
        );
        let log = tempfile::NamedTempFile::new()?;
        let child = teamster()
            .args(["agent", "--dev", "--bind", &ip])
            .stdin(Stdio::null())
            .stdout(log.reopen()?)
            .stderr(log.reopen()?)
            .spawn()?;
        let mut agent = DevAgent {
            child,
            addr: format!("http://{ip}:4646"),
            node_id: String::new(),
            _log: log,
        };
        let api = teamster::api::ApiClient::new(&agent.addr);
        agent.node_id = teamster_cluster_tests::wait_for(
            Duration::from_secs(30),
            "the dev node ready",
            || async {
                let nodes: Vec<serde_json::Value> = api.get("/v1/nodes").await.ok()?;
                nodes
                    .iter()
                    .find(|n| n["Status"] == "ready")
                    .map(|n| n["ID"].as_str().unwrap_or_default().to_string())
            },
        )
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "{e}\n{}",
                std::fs::read_to_string(agent._log.path()).unwrap_or_default()
            )
        })?;
        Ok(agent)
    }

    /// Run the CLI with `TEAMSTER_ADDR` set to this agent: exit code, stdout, stderr.
    fn run(&self, args: &[&str]) -> (Option<i32>, String, String) {
        self.run_env(args, &[])
    }

    /// [`DevAgent::run`] with more environment variables.
    fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
        let out = teamster()
            .args(args)
            .env("TEAMSTER_ADDR", &self.addr)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

fn write_config(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.toml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

#[test]
fn an_unknown_config_key_names_the_key_and_the_file_and_exits_non_zero() {
    let (_d, path) =
        write_config("data_dir = \"/tmp/x\"\n[server]\nenabled = true\nnum_schedulerz = 4\n");
    let out = teamster()
        .arg("agent")
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("num_schedulerz"), "{err}");
    assert!(err.contains(&path.display().to_string()), "{err}");
}

#[test]
fn a_bad_config_value_names_the_key_and_exits_non_zero() {
    let (_d, path) =
        write_config("data_dir = \"/tmp/x\"\n[server]\nenabled = true\nnum_schedulers = 9000\n");
    let out = teamster()
        .arg("agent")
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("server.num_schedulers"), "{err}");
    assert!(err.contains("9000"), "{err}");
}

#[test]
fn a_missing_config_file_is_named() {
    let out = teamster()
        .args(["agent", "--config", "/nonexistent/agent.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/agent.toml"));
}

#[test]
fn api_commands_without_a_server_fail_with_one_line_and_exit_one() {
    let out = teamster()
        .args(["status", "--address", "http://127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("Error: "), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "{err}"
    );
}

/// `job run -output` prints the job as the API takes it and registers nothing: no server
/// is reached (python-nomad's CI makes its `example.json` this way from `job init`'s file).
#[test]
fn job_run_output_prints_the_api_json_without_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let init = teamster()
        .current_dir(dir.path())
        .args(["job", "init", "-short"])
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");
    let out = teamster()
        .current_dir(dir.path())
        .args([
            "job",
            "run",
            "-output",
            "-address=http://127.0.0.1:1",
            "example.nomad.hcl",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(body["Job"]["ID"], "example");
    assert_eq!(body["Job"]["TaskGroups"][0]["Name"], "cache");
    assert_eq!(body["Job"]["TaskGroups"][0]["Tasks"][0]["Name"], "redis");
    assert_eq!(body.as_object().map(|o| o.len()), Some(1), "{body}");
}

/// The address comes from `--address` (or Nomad's `-address=`), else `TEAMSTER_ADDR`, else
/// `NOMAD_ADDR`; an unreachable one is named once, with the cause once and a hint.
#[test]
fn the_address_follows_nomads_flags_and_environment_and_an_unreachable_one_is_named_once() {
    let attempt = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = teamster();
        cmd.args(args)
            .env_remove("TEAMSTER_ADDR")
            .env_remove("NOMAD_ADDR");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let err = attempt(&["job", "status"], &[("NOMAD_ADDR", "http://127.0.0.1:2")]);
    assert!(err.contains("cannot reach http://127.0.0.1:2"), "{err}");
    assert!(err.contains("is an agent running there?"), "{err}");
    assert_eq!(err.matches("Connection refused").count(), 1, "{err}");
    assert!(!err.contains("error sending request"), "{err}");
    let err = attempt(
        &["job", "status"],
        &[
            ("NOMAD_ADDR", "http://127.0.0.1:2"),
            ("TEAMSTER_ADDR", "http://127.0.0.1:3"),
        ],
    );
    assert!(err.contains("http://127.0.0.1:3"), "{err}");
    let err = attempt(
        &["job", "status", "-address=http://127.0.0.1:4", "-json"],
        &[("TEAMSTER_ADDR", "http://127.0.0.1:3")],
    );
    assert!(err.contains("http://127.0.0.1:4"), "{err}");
}

#[test]
fn remove_peer_needs_an_address_or_an_id() {
    let out = teamster()
        .args(["operator", "raft", "remove-peer"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "usage errors exit 2");
}

#[test]
fn every_example_job_parses_and_validates() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/jobs");
    let (mut seen, mut refused) = (0, 0);
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        // Jobs that set fields teamster refuses are there to be refused: t12_jobspec_corpus
        // checks that the API answers 400 naming each one.
        if !teamster::jobspec::unsupported_fields(&value["Job"]).is_empty() {
            refused += 1;
            continue;
        }
        let mut job = teamster::http::job_from_api_json(value["Job"].clone())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        job.canonicalize();
        job.validate()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!job.task_groups.is_empty(), "{}", path.display());
        seen += 1;
    }
    assert!(
        seen >= 3,
        "expected at least three example jobs teamster runs, found {seen} ({refused} refused)"
    );
}

/// A model job, canonicalized, as JSON: what the cluster would store.
fn canonical(job: serde_json::Value, what: &str) -> serde_json::Value {
    let mut job = teamster::http::job_from_api_json(job).unwrap_or_else(|e| panic!("{what}: {e}"));
    job.canonicalize();
    job.validate().unwrap_or_else(|e| panic!("{what}: {e}"));
    serde_json::to_value(&job).unwrap()
}

#[test]
fn every_example_hcl_job_gives_the_same_job_as_its_json_twin() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/jobs");
    let mut pairs = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let Some(stem) = name.strip_suffix(".nomad.hcl") else {
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap();
        let inputs = teamster::jobspec::hcl::VarInputs {
            strict: true,
            ..Default::default()
        };
        let from_hcl = teamster::jobspec::hcl::parse_job(&name, &text, &inputs)
            .unwrap_or_else(|e| panic!("{e}"));
        let twin = dir.join(format!("{stem}.json"));
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&twin).unwrap()).unwrap();
        // A job that sets fields teamster refuses has no model job to compare: its HCL must
        // be refused for the same fields, and t12_jobspec_corpus compares the two as JSON.
        let refused = |job: &serde_json::Value| -> Vec<String> {
            teamster::jobspec::unsupported_fields(job)
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        let twin_refused = refused(&json["Job"]);
        assert_eq!(refused(&from_hcl), twin_refused, "{name} and its JSON twin");
        if !twin_refused.is_empty() {
            continue;
        }
        assert_eq!(
            canonical(from_hcl, &name),
            canonical(json["Job"].clone(), &twin.display().to_string()),
            "{name} and its JSON twin differ"
        );
        pairs += 1;
    }
    assert!(
        pairs >= 5,
        "expected at least five HCL/JSON pairs, found {pairs}"
    );
}

#[test]
fn an_hcl_job_file_with_a_typo_is_refused_with_its_place_and_exit_code_1() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("typo.nomad.hcl");
    std::fs::write(
        &file,
        "job \"web\" {\n  group \"api\" {\n    task \"t\" {\n      driver = \"raw_exec\"\n      comand = \"x\"\n    }\n  }\n}\n",
    )
    .unwrap();
    // The file is refused before any server is asked: no agent listens on this address.
    let out = teamster()
        .args(["job", "run", "--address", "http://127.0.0.1:1"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "typo.nomad.hcl:5:7: job \"web\" → group \"api\" → task \"t\": unknown argument \"comand\""
        ),
        "{stderr}"
    );
    // An unset variable is named too.
    std::fs::write(&file, "variable \"n\" { type = number }\njob \"j\" {}\n").unwrap();
    let out = teamster()
        .args(["job", "validate", "--address", "http://127.0.0.1:1"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("Unset variable"), "{stderr}");
}

/// Nomad's `-t` renders a command's value through a Go template: `job status -t` the job,
/// `node status -t` with a range the node list; `-t` beside `-json` and a template that does
/// not parse are errors (exit 1) before any output; `alloc exec -t` still means a tty.
#[tokio::test]
async fn templates_render_a_commands_value_and_bad_ones_are_refused() -> anyhow::Result<()> {
    let agent = DevAgent::start(5, 251).await?;
    let node_id = agent.node_id.clone();

    let dir = tempfile::tempdir()?;
    let job_file = dir.path().join("tmpl.json");
    std::fs::write(
        &job_file,
        serde_json::json!({"Job": {
            "ID": "tmpl", "Type": "service", "Datacenters": ["dc1"],
            "Meta": {"owner": "ops", "zone": "b"},
            "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
                "Name": "t", "Driver": "raw_exec",
                "Config": {"command": "/bin/sleep", "args": ["60"]},
                "Resources": {"CPU": 10, "MemoryMB": 10}
            }]}]
        }})
        .to_string(),
    )?;
    let run = |args: &[&str]| agent.run(args);
    let (code, _, err) = run(&["job", "run", "-detach", job_file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");

    let (code, out, err) = run(&[
        "job",
        "status",
        "-t",
        "{{.ID}} {{.Type}} {{range $k, $v := .Meta}}{{$k}}={{$v}},{{end}} {{.Nope}}",
        "tmpl",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, "tmpl service owner=ops,zone=b, <no value>\n");

    let (code, out, err) = run(&[
        "node",
        "status",
        "-t",
        r#"{{range .}}{{.ID}} {{.Status}}{{"\n"}}{{end}}"#,
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out, format!("{node_id} ready\n\n"));
    // Nomad's long spelling, single-dash, works too.
    let (code, out, err) = run(&["node", "status", "-template={{len .}}"]);
    assert_eq!((code, out.as_str()), (Some(0), "1\n"), "{err}");

    let (code, out, err) = run(&["job", "status", "-json", "-t", "{{.ID}}", "tmpl"]);
    assert_eq!(code, Some(1));
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("Both json and template formatting are not allowed"),
        "{err}"
    );
    let (code, out, err) = run(&["job", "status", "-t", "{{if .ID}}", "tmpl"]);
    assert_eq!(code, Some(1));
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("missing {{end}}"), "{err}");

    // `alloc exec -t` is still the tty flag: it parses as one (`-t=false`) and takes no
    // template; the allocation is looked up, so a bad ID is the error.
    let (code, _, err) = run(&[
        "alloc",
        "exec",
        "-t=false",
        "-i=false",
        "nosuchalloc",
        "echo",
    ]);
    assert_eq!(code, Some(1), "{err}");
    assert!(!err.contains("template"), "{err}");
    let (code, _, err) = run(&["alloc", "exec", "-json", "nosuchalloc", "echo"]);
    assert_eq!(code, Some(2), "alloc exec takes no --json: {err}");
    Ok(())
}

/// `deployment list|status|promote|fail|pause|resume` against a dev agent where nothing has a
/// deployment: an empty list, and every command naming a deployment that does not exist
/// fails with Nomad's message and exit 1; `job run` of a batch job is not held by
/// deployments, and `job status` of a job without one shows no "Latest Deployment".
#[tokio::test]
async fn deployment_commands_answer_for_deployments_that_do_not_exist() -> anyhow::Result<()> {
    let agent = DevAgent::start(7, 245).await?;
    let run = |args: &[&str]| agent.run(args);

    let (code, out, err) = run(&["deployment", "list"]);
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "No deployments found\n"),
        "{err}"
    );
    let (code, out, err) = run(&["deployment", "list", "-json"]);
    assert_eq!((code, out.trim()), (Some(0), "[]"), "{err}");
    for args in [
        &["deployment", "status", "0123"][..],
        &["deployment", "status", "-monitor", "0123"],
        &["deployment", "promote", "-group", "web", "0123"],
        &["deployment", "fail", "-detach", "0123"],
        &["deployment", "pause", "0123"],
        &["deployment", "resume", "0123"],
    ] {
        let (code, out, err) = run(args);
        assert_eq!(code, Some(1), "{args:?}: {out}{err}");
        assert!(
            err.contains("No deployment(s) with prefix or id \"0123\" found"),
            "{args:?}: {err}"
        );
    }

    // A batch job's `job run` follows its evaluation only.
    let dir = tempfile::tempdir()?;
    let job_file = dir.path().join("once.json");
    std::fs::write(
        &job_file,
        serde_json::json!({"Job": {
            "ID": "once", "Type": "batch", "Datacenters": ["dc1"],
            "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
                "Name": "t", "Driver": "mock", "Config": {"run_for": "1s"},
                "Resources": {"CPU": 10, "MemoryMB": 10}
            }]}]
        }})
        .to_string(),
    )?;
    let (code, out, err) = run(&["job", "run", job_file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(!out.contains("Monitoring deployment"), "{out}");
    let (code, out, err) = run(&["job", "status", "once"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("Summary"), "{out}");
    assert!(!out.contains("Latest Deployment"), "{out}");
    Ok(())
}

/// Nomad's `-namespace`, `-region` and `-token` (and `NOMAD_NAMESPACE`, `NOMAD_REGION`,
/// `NOMAD_TOKEN`) scope every request: a job file that names no namespace is registered in
/// the flag's, found there and not in `default`; another region is refused by the server
/// instead of answered with this one's data; a token is sent and, with no ACLs, accepted.
/// `event stream` prints the job's events as JSON lines, from an index.
#[tokio::test]
async fn namespace_region_and_token_scope_every_request_and_events_stream() -> anyhow::Result<()> {
    let agent = DevAgent::start(11, 233).await?;
    let dir = tempfile::tempdir()?;
    let job_file = dir.path().join("scoped.json");
    std::fs::write(
        &job_file,
        serde_json::json!({"Job": {
            "ID": "scoped", "Type": "batch", "Datacenters": ["dc1"],
            "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
                "Name": "t", "Driver": "mock", "Config": {"run_for": "1s"},
                "Resources": {"CPU": 10, "MemoryMB": 10}
            }]}]
        }})
        .to_string(),
    )?;
    let file = job_file.to_str().unwrap();
    // The namespace does not exist yet: the job is refused, naming it.
    let (code, _, err) = agent.run(&["job", "run", "-detach", "-namespace=ops", file]);
    assert_eq!(code, Some(1));
    assert!(err.contains("nonexistent namespace \"ops\""), "{err}");
    let (code, out, err) = agent.run(&[
        "namespace",
        "apply",
        "-description",
        "operations",
        "-meta",
        "team=sre",
        "ops",
    ]);
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, out, err) = agent.run(&["namespace", "list"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("default") && out.contains("ops") && out.contains("operations"),
        "{out}"
    );
    let (code, out, err) = agent.run(&[
        "job",
        "run",
        "-detach",
        "-namespace=ops",
        "-token=s3cret",
        file,
    ]);
    assert_eq!(code, Some(0), "{out}{err}");

    let (code, out, err) = agent.run(&["job", "status", "-json", "-namespace", "ops", "scoped"]);
    assert_eq!(code, Some(0), "{err}");
    let job: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(job["Job"]["Namespace"], "ops", "{out}");
    let (code, _, err) = agent.run_env(&["job", "status", "scoped"], &[("NOMAD_NAMESPACE", "ops")]);
    assert_eq!(code, Some(0), "NOMAD_NAMESPACE: {err}");
    let (code, _, err) = agent.run(&["job", "status", "scoped"]);
    assert_eq!(code, Some(1), "the job is not in default");
    assert!(err.contains("No job with ID \"scoped\" found"), "{err}");
    // The flag wins over the environment.
    let (code, _, err) = agent.run_env(
        &["job", "status", "-namespace=ops", "scoped"],
        &[("NOMAD_NAMESPACE", "elsewhere")],
    );
    assert_eq!(code, Some(0), "{err}");

    let (code, _, err) = agent.run(&["job", "status", "-region=eu", "-namespace=ops", "scoped"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("No path to region"), "{err}");
    let (code, _, err) = agent.run_env(&["node", "status"], &[("NOMAD_REGION", "eu")]);
    assert_eq!(code, Some(1), "NOMAD_REGION");
    assert!(err.contains("No path to region"), "{err}");
    let (code, _, err) = agent.run_env(
        &["node", "status", "-region", "global"],
        &[("NOMAD_TOKEN", "s3cret")],
    );
    assert_eq!(code, Some(0), "{err}");

    // The job's registration, replayed from index 1, as a JSON line; other topics and
    // namespaces are left out.
    let (code, out, err) = agent.run(&[
        "event",
        "stream",
        "-topic",
        "Job:scoped",
        "-namespace",
        "ops",
        "-index",
        "1",
        "-count",
        "1",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    let event: serde_json::Value = serde_json::from_str(lines[0])?;
    assert_eq!(event["Topic"], "Job", "{out}");
    assert_eq!(event["Key"], "scoped", "{out}");
    assert_eq!(event["Namespace"], "ops", "{out}");
    // A namespace with a job stays; `default` always does; status shows what apply set.
    let (code, out, err) = agent.run(&["namespace", "status", "ops"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("operations") && out.contains("Meta team") && out.contains("sre"),
        "{out}"
    );
    let (code, _, err) = agent.run(&["namespace", "delete", "ops"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("has 1 job(s)"), "{err}");
    let (code, _, err) = agent.run(&["namespace", "delete", "default"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("default namespace can not be deleted"),
        "{err}"
    );
    let (code, _, err) = agent.run(&[
        "job",
        "stop",
        "-purge",
        "-detach",
        "-namespace=ops",
        "scoped",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = agent.run(&["namespace", "delete", "ops"]);
    assert_eq!(code, Some(0), "{out}{err}");
    let (code, _, err) = agent.run(&["namespace", "status", "ops"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("Namespace \"ops\" not found"), "{err}");
    let (code, _, err) = agent.run(&["event", "stream", "-topic", "Nope"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("unknown topic"), "{err}");
    Ok(())
}

/// A job that needs what this cluster lacks is treated as Nomad treats it: Consul services
/// are accepted with Nomad's implied constraint and stay pending with its reason, a driver
/// no node has is "missing drivers" (`job plan` and `job status` name them, and nothing is
/// registered anywhere), and a `vault` block is refused with Nomad's message for servers
/// without Vault.
#[tokio::test]
async fn jobs_needing_consul_or_a_missing_driver_stay_pending_and_vault_is_refused_as_nomad_does(
) -> anyhow::Result<()> {
    use std::time::Duration;
    let agent = DevAgent::start(13, 239).await?;
    let jobs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/jobs");
    let file = jobs.join("consul-api.nomad.hcl");
    let file = file.to_str().unwrap();
    // Plan: the implied constraint on the group and on the task with a service.
    let (code, out, err) = agent.run(&["job", "plan", file]);
    assert_eq!(
        code,
        Some(1),
        "a plan that cannot place exits 1: {out}{err}"
    );
    for want in [
        "LTarget: \"${attr.consul.version}\"",
        "RTarget: \">= 1.8.0\"",
        "Provider: \"consul\"",
        "Name: \"consul-api-api\"",
        "Constraint \"${attr.consul.version} semver >= 1.8.0\": 1 nodes excluded by filter",
    ] {
        assert!(out.contains(want), "{want} in {out}");
    }
    let (code, out, err) = agent.run(&["job", "run", "-detach", file]);
    assert_eq!(code, Some(0), "{out}{err}");
    let api = teamster::api::ApiClient::new(&agent.addr);
    teamster_cluster_tests::wait_for(Duration::from_secs(30), "a blocked evaluation", || async {
        let evals: Vec<serde_json::Value> = api.get("/v1/job/consul-api/evaluations").await.ok()?;
        evals.iter().any(|e| e["Status"] == "blocked").then_some(())
    })
    .await?;
    let (code, out, err) = agent.run(&["job", "status", "consul-api"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("Status      = pending"), "{out}");
    assert!(
        out.contains(
            "Placement Failure\nTask Group \"api\":\n  * Constraint \"${attr.consul.version} semver >= 1.8.0\": 1 nodes excluded by filter"
        ),
        "{out}"
    );
    assert!(out.contains("No allocations placed"), "{out}");
    // Its ui block.
    assert!(
        out.contains(
            "Description\nThe shop's API, registered in Consul.\n\nLinks\nLabel    URL\nRunbook  https://example.com/runbooks/consul-api\n"
        ),
        "{out}"
    );
    // The task's own Consul service constrains the task too; nothing is registered.
    let job: serde_json::Value = api.get("/v1/job/consul-api").await?;
    let metrics = &job["TaskGroups"][0]["Tasks"][1];
    assert_eq!(
        metrics["Constraints"][0]["LTarget"], "${attr.consul.version}",
        "{metrics}"
    );
    assert_eq!(
        job["UI"]["Links"][0]["Url"],
        "https://example.com/runbooks/consul-api"
    );
    let services: Vec<serde_json::Value> = api.get("/v1/services").await?;
    assert!(services.is_empty(), "nothing registered: {services:?}");

    // Consul Connect (sidecars, upstreams, an ingress gateway alone in its group) and
    // `consul` blocks: accepted, kept as sent, every group pending for Consul.
    let mesh = jobs.join("mesh-checkout.nomad.hcl");
    let (code, out, err) = agent.run(&["job", "run", "-detach", mesh.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");
    teamster_cluster_tests::wait_for(Duration::from_secs(30), "a blocked evaluation", || async {
        let evals: Vec<serde_json::Value> =
            api.get("/v1/job/mesh-checkout/evaluations").await.ok()?;
        evals.iter().any(|e| e["Status"] == "blocked").then_some(())
    })
    .await?;
    let (code, out, err) = agent.run(&["job", "status", "mesh-checkout"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("Status      = pending"), "{out}");
    // The first constraint a node fails is the reason, in Nomad's order: the partition,
    // then Consul (then the CNI plugins of bridge mode).
    for (group, constraint) in [
        ("payments", "${attr.consul.partition} = retail"),
        ("checkout", "${attr.consul.version} semver >= 1.8.0"),
        ("ingress", "${attr.consul.version} semver >= 1.8.0"),
    ] {
        let failure = format!(
            "Task Group \"{group}\":\n  * Constraint \"{constraint}\": 1 nodes excluded by filter"
        );
        assert!(out.contains(&failure), "{failure} in {out}");
    }
    let job: serde_json::Value = api.get("/v1/job/mesh-checkout").await?;
    let payments = &job["TaskGroups"][0];
    assert_eq!(payments["Consul"]["Cluster"], "default", "{payments}");
    assert!(
        payments["Constraints"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["LTarget"] == "${attr.consul.partition}" && c["RTarget"] == "retail"),
        "{payments}"
    );
    assert_eq!(payments["Services"][0]["Checks"][0]["Expose"], true);
    let upstreams =
        &job["TaskGroups"][1]["Services"][0]["Connect"]["SidecarService"]["Proxy"]["Upstreams"];
    assert_eq!(upstreams[1]["MeshGateway"]["Mode"], "local", "{upstreams}");
    let ingress = &job["TaskGroups"][2];
    assert_eq!(ingress["Tasks"], serde_json::json!([]), "{ingress}");
    assert_eq!(
        ingress["Services"][0]["Connect"]["Gateway"]["Ingress"]["Listeners"][0]["Port"],
        8443
    );
    let services: Vec<serde_json::Value> = api.get("/v1/services").await?;
    assert!(services.is_empty(), "nothing registered: {services:?}");
    // Nomad's community edition knows only the default Consul cluster; a Connect sidecar
    // needs the group's network namespace.
    let dir = tempfile::tempdir()?;
    for (name, group, want) in [
        (
            "elsewhere",
            "consul {\n      cluster = \"east\"\n    }\n",
            "non-default Consul cluster requires Nomad Enterprise",
        ),
        (
            "hostmesh",
            "service {\n      name = \"a\"\n      port = \"80\"\n      connect {\n        sidecar_service {}\n      }\n    }\n",
            "connect sidecar: invalid network mode for Consul Connect: group \"g\" uses network mode \"host\"",
        ),
    ] {
        let file = dir.path().join(format!("{name}.nomad.hcl"));
        std::fs::write(
            &file,
            format!(
                "job \"{name}\" {{\n  group \"g\" {{\n    network {{\n      mode = \"host\"\n    }}\n    {group}    task \"t\" {{\n      driver = \"raw_exec\"\n      config {{\n        command = \"true\"\n      }}\n    }}\n  }}\n}}\n"
            ),
        )?;
        let (code, out, err) = agent.run(&["job", "run", "-detach", file.to_str().unwrap()]);
        assert_eq!(code, Some(1), "{out}{err}");
        assert!(err.contains(want), "{want} in {err}");
    }

    // A driver no node has: accepted, placed nowhere, "missing drivers".
    let podman = dir.path().join("podman.nomad.hcl");
    std::fs::write(
        &podman,
        "job \"pod\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"podman\"\n      config {\n        image = \"busybox\"\n      }\n    }\n  }\n}\n",
    )?;
    let (code, out, err) = agent.run(&["job", "plan", podman.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("Constraint \"missing drivers\": 1 nodes excluded by filter"),
        "{out}"
    );

    // Vault: refused, as Nomad's servers refuse it without Vault; a group's block is its
    // tasks' default, as Nomad's parser makes it.
    let vault = dir.path().join("vault.nomad.hcl");
    std::fs::write(
        &vault,
        "job \"v\" {\n  group \"g\" {\n    vault {\n      role = \"r\"\n    }\n    task \"t\" {\n      driver = \"raw_exec\"\n      config {\n        command = \"true\"\n      }\n    }\n  }\n}\n",
    )?;
    let (code, out, err) = agent.run(&["job", "run", "-detach", vault.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("task \"t\" → Vault: Vault \"default\" not enabled but used in the job"),
        "{err}"
    );
    Ok(())
}

/// A command whose output goes to a pipe nobody reads any more (`teamster … | head -1`)
/// ends quietly, exit code 0, as Unix tools do: no panic, no backtrace. The pipe's read end
/// is closed before the command starts, so its first line already meets the closed pipe.
#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let init = teamster()
        .current_dir(dir.path())
        .args(["job", "init", "-short"])
        .output()
        .unwrap();
    assert!(init.status.success(), "{init:?}");
    for args in [
        &["job", "run", "-output", "example.nomad.hcl"][..],
        &["job", "validate", "example.nomad.hcl"],
        &["job", "inspect", "-address=http://127.0.0.1:1", "example"],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = teamster()
            .current_dir(dir.path())
            .args(args)
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{args:?}: {:?} {stderr}",
            out.status
        );
    }
}

/// A task's `action` blocks: listed by `GET /v1/job/:id/actions`, run by `teamster action`
/// (and `job action`) in one of the group's running allocations, their output and exit code
/// the command's; an unknown action is refused with Nomad's words.
#[tokio::test]
async fn a_job_action_runs_in_a_running_allocation_of_its_group() -> anyhow::Result<()> {
    use std::time::Duration;
    let agent = DevAgent::start(17, 221).await?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("acts.nomad.hcl");
    std::fs::write(
        &file,
        r#"job "acts" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "exec sleep 600"]
      }
      action "greet" {
        command = "/bin/sh"
        args    = ["-c", "echo hi from $NOMAD_TASK_NAME; exit 3"]
      }
    }
  }
}
"#,
    )?;
    let (code, out, err) = agent.run(&["job", "run", "-detach", file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");
    let api = teamster::api::ApiClient::new(&agent.addr);
    teamster_cluster_tests::wait_for(Duration::from_secs(60), "a running allocation", || async {
        let allocs: Vec<serde_json::Value> = api.get("/v1/job/acts/allocations").await.ok()?;
        allocs
            .iter()
            .any(|a| a["ClientStatus"] == "running")
            .then_some(())
    })
    .await?;
    let listed: serde_json::Value = api.get("/v1/job/acts/actions").await?;
    assert_eq!(
        listed,
        serde_json::json!([{ "Name": "greet", "Command": "/bin/sh",
            "Args": ["-c", "echo hi from $NOMAD_TASK_NAME; exit 3"],
            "TaskName": "t", "TaskGroupName": "g" }])
    );
    for cmd in [&["action"][..], &["job", "action"][..]] {
        let mut args = cmd.to_vec();
        args.extend([
            "-job", "acts", "-group", "g", "-task", "t", "-i=false", "greet",
        ]);
        let (code, out, err) = agent.run(&args);
        assert_eq!(code, Some(3), "{out}{err}");
        assert_eq!(out, "hi from t\n", "{err}");
    }
    let (code, _, err) = agent.run(&[
        "action", "-job", "acts", "-group", "g", "-task", "t", "-i=false", "nope",
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("action nope not found in task t"), "{err}");
    let (code, _, err) = agent.run(&["action", "-job", "acts", "greet"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("-group"), "{err}");
    // With -alloc, a -group it is not in is refused, not ignored.
    let allocs: Vec<serde_json::Value> = api.get("/v1/job/acts/allocations").await?;
    let id = allocs[0]["ID"].as_str().unwrap().to_string();
    let (code, out, err) = agent.run(&[
        "action", "-job", "acts", "-alloc", &id, "-task", "t", "-i=false", "greet",
    ]);
    assert_eq!((code, out.as_str()), (Some(3), "hi from t\n"), "{err}");
    let (code, _, err) = agent.run(&[
        "action", "-job", "acts", "-alloc", &id, "-group", "other", "-task", "t", "greet",
    ]);
    assert_eq!(code, Some(1));
    assert!(err.contains("is not of group \"other\""), "{err}");
    Ok(())
}
