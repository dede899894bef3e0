//! `teamster event stream`: follow the cluster's event stream (`GET /v1/event/stream`), one
//! event a line as JSON, as a Nomad user reads it with `curl` or python-nomad's
//! `event.stream.get_stream`. Topics as the API takes them (`Job`, `Job:web`, `*`), `--index`
//! to resume after a raft index, `--namespace` from the shared flags (`*` for every one);
//! `--count N` stops after N events. Heartbeat frames are not printed; an error frame (a
//! consumer the server dropped) ends the command with exit 1, naming the index to resume
//! from.

use std::io::Write;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use serde_json::Value;

use super::args::ApiArgs;

/// `event …`.
#[derive(Debug, Subcommand)]
pub enum EventCommand {
    /// Print the cluster's events as they happen, one JSON object a line.
    Stream(StreamArgs),
}

/// `event stream`.
#[derive(Debug, Args)]
pub struct StreamArgs {
    /// A topic to follow, optionally with a key: `Job`, `Job:web`, `Allocation:*`, `*`
    /// (repeatable; default every topic).
    #[arg(long = "topic", value_name = "TOPIC[:KEY]")]
    topics: Vec<String>,
    /// Send the objects changed after this raft index first, then the live events.
    #[arg(long, default_value_t = 0)]
    index: u64,
    /// Stop after this many events (0: follow until interrupted).
    #[arg(long, default_value_t = 0)]
    count: u64,
    #[command(flatten)]
    api: ApiArgs,
}

/// The stream's path for these arguments.
pub(super) fn stream_path(a: &StreamArgs) -> String {
    let mut path = format!("/v1/event/stream?index={}", a.index);
    for topic in &a.topics {
        path.push_str("&topic=");
        path.push_str(&topic.replace('*', "%2A").replace(':', "%3A"));
    }
    path
}

/// What one frame of the stream holds.
#[derive(Debug, PartialEq)]
enum Frame {
    /// `{}`: nothing happened.
    Heartbeat,
    /// The events of one raft index.
    Events(Vec<Value>),
    /// The server ended the stream.
    Error(String),
}

/// Decode one line of the stream.
fn frame(line: &str) -> anyhow::Result<Frame> {
    let v: Value =
        serde_json::from_str(line).with_context(|| format!("a frame that is not JSON: {line}"))?;
    if let Some(err) = v.get("Error").filter(|e| !e.is_null()) {
        let text = err.as_str().map(str::to_string).unwrap_or(err.to_string());
        return Ok(Frame::Error(text));
    }
    match v.get("Events").and_then(Value::as_array) {
        Some(events) => Ok(Frame::Events(events.clone())),
        None => Ok(Frame::Heartbeat),
    }
}

/// Run an `event` command.
pub async fn run(cmd: EventCommand) -> anyhow::Result<()> {
    let EventCommand::Stream(a) = cmd;
    if a.api.template.is_some() {
        bail!("event stream prints JSON lines; -t is not supported here");
    }
    let api = a.api.client()?;
    let mut resp = api
        .get_stream(&stream_path(&a))
        .await
        .context("opening the event stream")?;
    let mut out = std::io::stdout().lock();
    let mut pending = Vec::new();
    let mut printed = 0u64;
    while let Some(chunk) = resp.chunk().await.context("reading the event stream")? {
        pending.extend_from_slice(&chunk);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            if line.trim().is_empty() {
                continue;
            }
            match frame(line.trim())? {
                Frame::Heartbeat => {}
                Frame::Error(e) => bail!("the server ended the event stream: {e}"),
                Frame::Events(events) => {
                    for event in events {
                        writeln!(out, "{}", serde_json::to_string(&event)?)?;
                        printed += 1;
                        if a.count != 0 && printed >= a.count {
                            out.flush()?;
                            return Ok(());
                        }
                    }
                    out.flush()?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn frames_are_told_apart() {
        assert_eq!(frame("{}").unwrap(), Frame::Heartbeat);
        assert_eq!(
            frame(r#"{"Index":7,"Events":[{"Topic":"Job"}]}"#).unwrap(),
            Frame::Events(vec![json!({"Topic": "Job"})])
        );
        assert_eq!(
            frame(r#"{"Error":"too slow; resume from 9"}"#).unwrap(),
            Frame::Error("too slow; resume from 9".into())
        );
        assert!(frame("not json").is_err());
    }
}
