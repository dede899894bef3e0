//! `teamster operator snapshot save|restore FILE`: back up the cluster's state to a file and
//! restore it (through raft, so every server gets it).
//!
//! `save` writes to `FILE.tmp`, fsyncs, and renames, so a failed save never leaves a
//! half-written file under the real name.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use serde::Deserialize;

use super::args::ApiArgs;

/// `operator snapshot …`.
#[derive(Debug, Subcommand)]
pub enum SnapshotCommand {
    /// Save a consistent snapshot of the cluster's state to a file.
    Save(SaveArgs),
    /// Replace the cluster's state with a saved snapshot (every server applies it).
    Restore(RestoreArgs),
}

/// `operator snapshot save`.
#[derive(Debug, Args)]
pub struct SaveArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// Save the contacted server's local state, even without a leader.
    #[arg(long)]
    stale: bool,
    /// The file to write.
    file: PathBuf,
}

/// `operator snapshot restore`.
#[derive(Debug, Args)]
pub struct RestoreArgs {
    #[command(flatten)]
    api: ApiArgs,
    /// The file `snapshot save` wrote.
    file: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RestoreAnswer {
    index: u64,
    snapshot_index: u64,
}

/// Run a snapshot command.
pub async fn run(cmd: SnapshotCommand) -> anyhow::Result<()> {
    match cmd {
        SnapshotCommand::Save(args) => save(args).await,
        SnapshotCommand::Restore(args) => restore(args).await,
    }
}

/// How long a snapshot may take to arrive or to be restored.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(600);

async fn error_of(resp: reqwest::Response) -> anyhow::Error {
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    anyhow::anyhow!("{} (HTTP {status})", text.trim())
}

async fn save(args: SaveArgs) -> anyhow::Result<()> {
    let api = args.api.client()?;
    let path = if args.stale {
        "/v1/operator/snapshot?stale=true"
    } else {
        "/v1/operator/snapshot"
    };
    let resp = api
        .raw(reqwest::Method::GET, path)
        .timeout(SNAPSHOT_TIMEOUT)
        .send()
        .await
        .with_context(|| format!("cannot reach {}", api.address()))?;
    if !resp.status().is_success() {
        return Err(error_of(resp).await).context("saving the snapshot");
    }
    let index = resp
        .headers()
        .get("X-Nomad-Index")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("?")
        .to_string();
    let bytes = resp.bytes().await.context("reading the snapshot")?;
    write_atomically(&args.file, &bytes)?;
    if args.api.structured() {
        args.api.print(&serde_json::json!({
            "Index": index.parse::<u64>().ok(),
            "Bytes": bytes.len(),
            "File": args.file.display().to_string()
        }))?;
    } else {
        println!(
            "Saved snapshot of index {index} to {} ({} bytes)",
            args.file.display(),
            bytes.len()
        );
    }
    Ok(())
}

fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    drop(f);
    std::fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    Ok(())
}

async fn restore(args: RestoreArgs) -> anyhow::Result<()> {
    let bytes =
        std::fs::read(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    if bytes.is_empty() {
        bail!("{} is empty", args.file.display());
    }
    let api = args.api.client()?;
    let resp = api
        .raw(reqwest::Method::PUT, "/v1/operator/snapshot")
        .timeout(SNAPSHOT_TIMEOUT)
        .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
        .body(bytes)
        .send()
        .await
        .with_context(|| format!("cannot reach {}", api.address()))?;
    if !resp.status().is_success() {
        return Err(error_of(resp).await).context("restoring the snapshot");
    }
    let answer: RestoreAnswer = resp.json().await.context("reading the answer")?;
    if args.api.structured() {
        args.api.print(
            &serde_json::json!({ "Index": answer.index, "SnapshotIndex": answer.snapshot_index }),
        )?;
    } else {
        println!(
            "Restored the snapshot of index {} at index {}",
            answer.snapshot_index, answer.index
        );
    }
    Ok(())
}
