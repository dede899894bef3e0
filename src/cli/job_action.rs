//! `teamster action` (and `job action`): run a task's `action` (Nomad 1.7's job actions) in
//! one of the job's running allocations, as `alloc exec` runs a command, with Nomad's flags:
//! `-job`, and `-alloc` or `-group` with `-task` (an allocation of the group is picked).

use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::Args;
use serde_json::Value;

use super::args::ConnArgs;

/// `action` / `job action`.
#[derive(Debug, Args)]
pub struct ActionArgs {
    /// Address, token and TLS.
    #[command(flatten)]
    conn: ConnArgs,
    /// The job the action is defined in.
    #[arg(long)]
    job: String,
    /// The allocation to run it in (an ID or a unique prefix); else one of the group's
    /// running allocations.
    #[arg(long)]
    alloc: Option<String>,
    /// The group (needed without `-alloc`).
    #[arg(long)]
    group: Option<String>,
    /// The task the action is defined in (needed without `-alloc`).
    #[arg(long)]
    task: Option<String>,
    /// Send this process's stdin to the action (on unless `-i=false`).
    #[arg(
        short = 'i',
        num_args = 0..=1,
        require_equals = true,
        default_value_t = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    stdin: bool,
    /// Give the action a terminal (`-t=false` not to; off by default).
    #[arg(
        short = 't',
        num_args = 0..=1,
        require_equals = true,
        default_value_t = false,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    tty: bool,
    /// The action's name.
    action: String,
}

/// Run the action; its exit code is the answer.
pub async fn run(a: ActionArgs) -> anyhow::Result<ExitCode> {
    if a.tty && !a.stdin {
        bail!("-i must be enabled if running with tty");
    }
    let api = a.conn.client()?;
    let alloc_id = match &a.alloc {
        Some(prefix) => super::args::resolve(&api, "/v1/allocations", "allocation", prefix).await?,
        None => {
            let (Some(group), Some(_)) = (&a.group, &a.task) else {
                bail!("a group name (-group) and a task name (-task) are required if no allocation is provided");
            };
            let allocs: Vec<Value> = api
                .get(&format!(
                    "/v1/job/{}/allocations",
                    crate::api::urlencode(&a.job)
                ))
                .await
                .with_context(|| format!("fetching the allocations of job {:?}", a.job))?;
            let running: Vec<&str> = allocs
                .iter()
                .filter(|x| x["TaskGroup"] == group.as_str() && x["ClientStatus"] == "running")
                .filter_map(|x| x["ID"].as_str())
                .collect();
            if running.is_empty() {
                bail!(
                    "no running allocation of group {group:?} in job {:?}",
                    a.job
                );
            }
            // Nomad picks one at random.
            let pick = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos() as usize)
                .unwrap_or(0)
                % running.len();
            running[pick].to_string()
        }
    };
    let mut path = format!(
        "/v1/job/{}/action?action={}&allocID={alloc_id}&tty={}",
        crate::api::urlencode(&a.job),
        crate::api::urlencode(&a.action),
        a.tty
    );
    if let Some(task) = &a.task {
        path.push_str(&format!("&task={}", crate::api::urlencode(task)));
    }
    if let Some(group) = &a.group {
        path.push_str(&format!("&group={}", crate::api::urlencode(group)));
    }
    let url = super::alloc_exec::ws_url(api.address(), &api.scope().apply(&path));
    super::alloc_exec::stream(&api, &url, &alloc_id, a.stdin, a.tty).await
}
