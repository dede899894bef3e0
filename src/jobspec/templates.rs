//! Tasks' templates checked when a job is submitted: every embedded template must parse with
//! its delimiters, and call only functions a teamster client has. Nomad finds a template
//! that does not parse only when the task starts; teamster refuses it up front, with a 400
//! naming the task, the template and the problem. Functions that need Consul or Vault are
//! accepted, as Nomad accepts them (the task then waits for them); consul-template
//! functions teamster does not implement are refused by name.

use teamster_storage::model::Job;

use crate::gotemplate::funcs::{kind, Kind};
use crate::gotemplate::{Syntax, Template};

/// The problems of `job`'s embedded templates, one message each.
pub fn template_problems(job: &Job) -> Vec<String> {
    let mut out = Vec::new();
    for group in job.task_groups.iter() {
        for task in &group.tasks {
            for (i, t) in task.templates.iter().enumerate() {
                if t.embedded_tmpl.is_empty() {
                    continue;
                }
                let at = format!(
                    "group {:?} task {:?}: Template {}",
                    group.name,
                    task.name,
                    i + 1
                );
                if let Err(problem) = check(&t.embedded_tmpl, &t.left_delim, &t.right_delim) {
                    out.push(format!("{at}: {problem}"));
                }
            }
            for (i, t) in task.templates.iter().enumerate() {
                // A change script runs in the task's place: teamster runs it as a
                // `raw_exec` task runs (on the host, as the agent's user), so only for
                // `raw_exec` tasks, never for one a node confines (a container, mock).
                if t.change_mode == "script" && task.driver != "raw_exec" {
                    out.push(format!(
                        "group {:?} task {:?}: Template {}: change_mode \"script\" is \
                         supported by teamster for raw_exec tasks only",
                        group.name,
                        task.name,
                        i + 1
                    ));
                }
            }
        }
    }
    out
}

/// Whether a template's text parses and calls only functions teamster has.
pub fn check(text: &str, left: &str, right: &str) -> Result<(), String> {
    let known = |name: &str| kind(name).is_some();
    let syntax = Syntax {
        left: if left.is_empty() { "{{" } else { left },
        right: if right.is_empty() { "}}" } else { right },
        known: &known,
    };
    let template = Template::parse_with(text, &syntax).map_err(|e| e.to_string())?;
    let unsupported: Vec<String> = template
        .functions()
        .into_iter()
        .filter(|f| kind(f) == Some(Kind::Unsupported))
        .collect();
    if unsupported.is_empty() {
        Ok(())
    } else {
        let names: Vec<String> = unsupported.iter().map(|f| format!("{f:?}")).collect();
        let (noun, verb) = if names.len() == 1 {
            ("function", "is")
        } else {
            ("functions", "are")
        };
        Err(format!(
            "template {noun} {} {verb} not supported by teamster",
            names.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_parsed_at_submit() {
        assert_eq!(
            check(
                r#"{{ with nomadVar "nomad/jobs/x" }}{{ .a }}{{ end }}"#,
                "",
                ""
            ),
            Ok(())
        );
        assert_eq!(
            check(r#"[[ key "a" ]] {{ not an action }}"#, "[[", "]]"),
            Ok(())
        );
        let err = check("{{ nosuch 1 }}", "{{", "}}").unwrap_err();
        assert!(err.contains("function \"nosuch\" not defined"), "{err}");
        let err = check("{{ sprig_env \"HOME\" }}", "{{", "}}").unwrap_err();
        assert!(err.contains("function \"sprig_env\" not defined"), "{err}");
        let err = check("{{ if .x }}", "{{", "}}").unwrap_err();
        assert!(err.contains("missing {{end}}"), "{err}");
        let err = check(
            r#"{{ sockaddr "GetPrivateIP" }}{{ sprig_semver "1.0.0" }}{{ sprig_upper "a" }}"#,
            "{{",
            "}}",
        )
        .unwrap_err();
        assert_eq!(
            err,
            "template functions \"sockaddr\", \"sprig_semver\" are not supported by teamster"
        );
    }
}
