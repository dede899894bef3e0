//! `teamster alloc logs ID TASK`: a task's stdout (or `--stderr`), read through any agent's
//! `/v1/client/fs/cat` (a server forwards to the client that runs the allocation).

use anyhow::Context;
use clap::Args;

use super::{ApiArgs, ApiClient};

/// `alloc logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Show stderr instead of stdout.
    #[arg(long)]
    stderr: bool,
    /// The allocation ID (or a unique prefix).
    id: String,
    /// The task.
    task: String,
}

/// Print a task's log.
pub async fn logs(a: LogsArgs) -> anyhow::Result<()> {
    let api = ApiClient::new(&a.api.address);
    let file = if a.stderr {
        crate::client::driver::STDERR_FILE
    } else {
        crate::client::driver::STDOUT_FILE
    };
    let path = format!("{}/{file}", a.task);
    let text = api
        .request_text::<()>(
            reqwest::Method::GET,
            &format!("/v1/client/fs/cat/{}?path={path}", a.id),
            None,
        )
        .await
        .with_context(|| format!("reading {path} of allocation {}", a.id))?;
    print!("{text}");
    Ok(())
}
