//! `teamster alloc logs [-f] [-tail] [-n N | -c BYTES] [-stderr] ALLOC [TASK]`: a task's
//! stdout (or stderr), read through any agent's `/v1/client/fs/logs` (a server forwards to
//! the client that runs the allocation) across its rotated files in `alloc/logs`. The task
//! may be left out when the allocation's group has one. `-tail` prints the last `-n` lines
//! (10), or the last `-c` bytes; `-f` then keeps printing what the task writes until
//! interrupted.

use std::io::Write;

use anyhow::{bail, Context};
use clap::Args;
use serde_json::Value;

use super::args::ApiArgs;
use crate::api::ApiClient;

/// `alloc logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Show stderr instead of stdout.
    #[arg(long)]
    stderr: bool,
    /// Keep printing what the task writes (Nomad's `-f`).
    #[arg(short = 'f', long)]
    follow: bool,
    #[command(flatten)]
    end: TailArgs,
    /// The allocation ID (or a unique prefix).
    id: String,
    /// The task (optional when the allocation's group has one).
    task: Option<String>,
}

/// `-tail [-n N | -c BYTES]`: the end of a log or a file (`alloc logs`, `alloc fs`).
#[derive(Debug, Args)]
pub(super) struct TailArgs {
    /// Print only the end: the last `-n` lines.
    #[arg(long)]
    pub(super) tail: bool,
    /// Lines printed by `-tail` (refused without it: it would change nothing).
    #[arg(short = 'n', default_value_t = 10, requires = "tail")]
    pub(super) lines: usize,
    /// Bytes printed by `-tail`, counted back from the end (instead of `-n` lines).
    #[arg(short = 'c', requires = "tail", conflicts_with = "lines")]
    pub(super) bytes: Option<u64>,
}

/// The last `n` lines of `text` (a final line without its newline counts).
pub(super) fn last_lines(text: &str, n: usize) -> &str {
    let body = text.strip_suffix('\n').unwrap_or(text);
    match body.rmatch_indices('\n').nth(n.saturating_sub(1)) {
        Some((i, _)) if n > 0 => &text[i + 1..],
        _ if n == 0 => "",
        _ => text,
    }
}

/// The task to read: the one named, or the only one of the allocation's group.
async fn task_of(api: &ApiClient, alloc_id: &str, named: Option<String>) -> anyhow::Result<String> {
    if let Some(t) = named {
        return Ok(t);
    }
    let alloc: Value = api
        .get(&format!("/v1/allocation/{alloc_id}"))
        .await
        .with_context(|| format!("reading allocation {alloc_id}"))?;
    let group = alloc["TaskGroup"].as_str().unwrap_or_default();
    let tasks: Vec<String> = alloc["Job"]["TaskGroups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|g| g["Name"] == group)
        .flat_map(|g| g["Tasks"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["Name"].as_str().map(str::to_string))
        .collect();
    match tasks.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!("allocation {alloc_id} has no tasks"),
        many => bail!(
            "allocation {alloc_id} has several tasks; name one of: {}",
            many.join(", ")
        ),
    }
}

/// Print a task's log.
pub async fn logs(a: LogsArgs) -> anyhow::Result<()> {
    let api = a.api.client()?;
    let alloc_id = super::args::resolve(&api, "/v1/allocations", "allocation", &a.id).await?;
    let task = task_of(&api, &alloc_id, a.task).await?;
    let kind = if a.stderr { "stderr" } else { "stdout" };
    let base = format!("/v1/client/fs/logs/{alloc_id}?task={task}&type={kind}&plain=true");
    let first = match (a.end.tail, a.end.bytes) {
        (true, Some(c)) => format!("{base}&origin=end&offset={c}"),
        _ => base.clone(),
    };
    let text = api
        .request_text::<()>(reqwest::Method::GET, &first, None)
        .await
        .with_context(|| format!("reading the {kind} of task {task} of allocation {alloc_id}"))?;
    let shown = if a.end.tail && a.end.bytes.is_none() {
        last_lines(&text, a.end.lines)
    } else {
        &text
    };
    let mut out = std::io::stdout();
    out.write_all(shown.as_bytes())?;
    out.flush()?;
    if !a.follow {
        return Ok(());
    }
    // Everything after what was printed, as it is written.
    let follow = match (a.end.tail, a.end.bytes) {
        (true, Some(_)) => format!("{base}&follow=true&origin=end&offset=0"),
        _ => format!("{base}&follow=true&offset={}", text.len()),
    };
    let mut resp = api
        .get_stream(&follow)
        .await
        .with_context(|| format!("following the {kind} of task {task}"))?;
    while let Some(chunk) = resp
        .chunk()
        .await
        .with_context(|| format!("following the {kind} of task {task}"))?
    {
        out.write_all(&chunk)?;
        out.flush()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::last_lines;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(last_lines("a\nb\nc", 2), "b\nc");
        assert_eq!(last_lines("a\nb\n", 5), "a\nb\n");
        assert_eq!(last_lines("a\nb\n", 0), "");
        assert_eq!(last_lines("", 3), "");
    }
}
