//! `alloc exec`: `GET /v1/client/allocation/:id/exec?task=&command=["echo","hi"]&tty=false`,
//! a websocket that runs a command in the place of a running task (its directory and
//! environment) and carries Nomad's frames:
//!
//! ```text
//!  caller ─▶ {"stdin": {"data": base64}} | {"stdin": {"close": true}}
//!            | {"tty_size": {"height": H, "width": W}}
//!  caller ◀─ {"stdout": {"data": base64}} | {"stderr": {"data": …}} | {"stdout": {"close": true}}
//!            … then {"exited": true, "result": {"exit_code": N}} and a close frame
//! ```
//!
//! A bad request (no command, an unknown or stopped task, an allocation the client does not
//! hold) is answered with Nomad's HTTP status before any upgrade. The command runs in a
//! process group of its own, killed when the caller goes away. With `tty=true` it gets a
//! terminal (its output, stderr included, comes as `stdout`; `tty_size` resizes it). In a
//! docker task the command runs inside its container through the engine's exec API
//! ([`crate::client::docker::exec`]), with the same frames. Served
//! by the agent whose client runs the allocation; a server connects to the node's agent first
//! (so its refusal reaches the caller as is) and then relays the frames both ways
//! ([`client_route`]).

use std::collections::HashMap;
use std::process::Stdio;

use axum::extract::ws::{self, rejection::WebSocketUpgradeRejection, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use base64::Engine;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite;

use super::client_alloc::op_error;
use super::client_route::{self, Target, FORWARDED};
use super::error::ApiError;
use super::HttpContext;
use crate::client::docker::exec::{ContainerExec, ExecOutput};
use crate::client::ops::ExecProcess;

/// The exec route.
pub fn routes() -> Router<HttpContext> {
    Router::new()
        .route("/v1/client/allocation/{alloc_id}/exec", get(exec))
        .route("/v1/job/{id}/action", get(job_action))
}

/// The largest piece of output one frame carries.
const CHUNK: usize = 16 << 10;
/// How long the output of an exited command is still read (a background child may hold it).
const DRAIN: std::time::Duration = std::time::Duration::from_secs(2);
/// Frames waiting to be sent to the caller.
const OUT_QUEUE: usize = 32;
/// How long the caller has to answer the closing frame before the connection is dropped.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);
/// How long a relay still carries the node's frames once the caller's side has ended.
const RELAY_DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

/// The query of an exec request.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ExecParams {
    task: Option<String>,
    /// The command, or (empty) the task's `action` names it.
    command: Vec<String>,
    /// A job action of the task, run instead of `command` (Nomad's `action`).
    action: Option<String>,
    tty: bool,
}

impl ExecParams {
    fn parse(q: &HashMap<String, String>) -> Result<ExecParams, ApiError> {
        let tty = parse_tty(q)?;
        let task = q.get("task").filter(|t| !t.is_empty()).cloned();
        if let Some(action) = q.get("action").filter(|a| !a.is_empty()) {
            return Ok(ExecParams {
                task,
                command: Vec::new(),
                action: Some(action.clone()),
                tty,
            });
        }
        let raw = q.get("command").map(String::as_str).unwrap_or_default();
        if raw.is_empty() {
            return Err(ApiError::bad_request("command is not present"));
        }
        let command: Vec<String> = serde_json::from_str(raw).map_err(|e| {
            ApiError::bad_request(format!(
                "command {raw:?} is not a JSON array of strings: {e}"
            ))
        })?;
        if command.is_empty() {
            return Err(ApiError::bad_request("command is empty"));
        }
        Ok(ExecParams {
            task,
            command,
            action: None,
            tty,
        })
    }

    /// The query that asks the node's agent for the same.
    fn to_query(&self) -> String {
        let mut query = format!("?tty={}", self.tty);
        if let Some(task) = &self.task {
            query.push_str(&format!("&task={}", crate::api::urlencode(task)));
        }
        match &self.action {
            Some(action) => query.push_str(&format!("&action={}", crate::api::urlencode(action))),
            None => {
                let command = serde_json::to_string(&self.command).unwrap_or_default();
                query.push_str(&format!("&command={}", crate::api::urlencode(&command)));
            }
        }
        query
    }
}

fn parse_tty(q: &HashMap<String, String>) -> Result<bool, ApiError> {
    match q.get("tty").map(String::as_str) {
        None | Some("") => Ok(false),
        Some(v) => super::query::parse_go_bool(v)
            .ok_or_else(|| ApiError::bad_request(format!("tty: {v:?} is not a boolean"))),
    }
}

async fn exec(
    State(ctx): State<HttpContext>,
    Path(alloc_id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let params = ExecParams::parse(&q)?;
    exec_in(&ctx, &alloc_id, &params, &headers, upgrade).await
}

/// `GET /v1/job/:id/action?allocID=&task=&action=&tty=[&group=]` (Nomad's job actions):
/// runs the task's action in the allocation, which must be the job's (and the group's), as
/// `alloc exec` runs a command.
async fn job_action(
    State(ctx): State<HttpContext>,
    Path(job_id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let action = q
        .get("action")
        .filter(|a| !a.is_empty())
        .ok_or_else(|| ApiError::bad_request("action is not present"))?;
    let alloc_id = q
        .get("allocID")
        .filter(|a| !a.is_empty())
        .ok_or_else(|| ApiError::bad_request("allocID is not present"))?;
    let params = ExecParams {
        task: q.get("task").filter(|t| !t.is_empty()).cloned(),
        command: Vec::new(),
        action: Some(action.clone()),
        tty: parse_tty(&q)?,
    };
    // The allocation (its full ID) must be the job's, and the group's when one is named:
    // from the servers' state, else from this agent's client.
    let placement = match ctx.server() {
        Ok(server) => server
            .node
            .state()
            .snapshot()
            .alloc_by_id(alloc_id)
            .map(|a| (a.job_id.to_string(), a.task_group.to_string())),
        Err(_) => ctx.client().and_then(|c| c.alloc_job_and_group(alloc_id)),
    };
    let Some((alloc_job, alloc_group)) = placement else {
        return Err(ApiError::not_found(format!(
            "Unknown allocation {alloc_id:?}"
        )));
    };
    if alloc_job != job_id {
        return Err(ApiError::bad_request(format!(
            "allocation {alloc_id} is not of job {job_id:?}"
        )));
    }
    if let Some(group) = q.get("group").filter(|g| !g.is_empty()) {
        if *group != alloc_group {
            return Err(ApiError::bad_request(format!(
                "allocation {alloc_id} is not of group {group:?}"
            )));
        }
    }
    exec_in(&ctx, alloc_id, &params, &headers, upgrade).await
}

/// Runs `params` in the allocation, here or through the node's agent.
async fn exec_in(
    ctx: &HttpContext,
    alloc_id: &str,
    params: &ExecParams,
    headers: &HeaderMap,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let held = |id: &str| ctx.client().is_some_and(|c| c.has_alloc(id));
    match client_route::locate_alloc(ctx, alloc_id, headers, held)? {
        Target::Here => {
            let client = ctx
                .client()
                .ok_or_else(|| ApiError::not_found("this agent's client has not started"))?;
            let upgrade = upgrade
                .map_err(|e| ApiError::bad_request(format!("exec is a websocket request: {e}")))?;
            let command = match &params.action {
                Some(action) => client
                    .action_command(alloc_id, params.task.as_deref(), action)
                    .map_err(op_error)?,
                None => params.command.clone(),
            };
            let process = client
                .exec_command(alloc_id, params.task.as_deref(), &command, params.tty)
                .await
                .map_err(op_error)?;
            Ok(upgrade.on_upgrade(move |socket| run(socket, process)))
        }
        Target::Node { addr, alloc_id } => {
            let upgrade = upgrade
                .map_err(|e| ApiError::bad_request(format!("exec is a websocket request: {e}")))?;
            let query = params.to_query();
            let (tls, io) = client_route::dial(&addr).await?;
            let scheme = if tls { "wss" } else { "ws" };
            let url = format!("{scheme}://{addr}/v1/client/allocation/{alloc_id}/exec{query}");
            let upstream = connect(&url, io).await?;
            Ok(upgrade.on_upgrade(move |socket| relay(socket, upstream)))
        }
    }
}

type Upstream = tokio_tungstenite::WebSocketStream<Box<dyn crate::util::net::HttpIo>>;

/// The node agent's exec websocket over `io`, or its refusal with its status.
async fn connect(url: &str, io: Box<dyn crate::util::net::HttpIo>) -> Result<Upstream, ApiError> {
    use tungstenite::client::IntoClientRequest;
    let mut req = url
        .into_client_request()
        .map_err(|e| ApiError::internal(format!("{url}: {e}")))?;
    req.headers_mut()
        .insert(FORWARDED, axum::http::HeaderValue::from_static("1"));
    if let Some(token) = crate::rpc::service::credential::caller_token() {
        let value = axum::http::HeaderValue::from_str(&token)
            .map_err(|_| ApiError::bad_request("the ACL token is not a valid header value"))?;
        req.headers_mut().insert(client_route::TOKEN_HEADER, value);
    }
    match tokio_tungstenite::client_async(req, io).await {
        Ok((stream, _)) => Ok(stream),
        Err(tungstenite::Error::Http(resp)) => Err(ApiError {
            status: resp.status(),
            message: resp
                .body()
                .as_deref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default(),
        }),
        Err(e) => Err(ApiError::internal(format!(
            "cannot reach the client for {url}: {e}"
        ))),
    }
}

/// Relays frames between the caller and the node's agent until either side closes.
async fn relay(socket: WebSocket, upstream: Upstream) {
    let (mut down_tx, mut down_rx) = socket.split();
    let (mut up_tx, mut up_rx) = upstream.split();
    let to_node = async {
        while let Some(Ok(msg)) = down_rx.next().await {
            let Some(msg) = to_tungstenite(msg) else {
                continue;
            };
            let closing = msg.is_close();
            if up_tx.send(msg).await.is_err() || closing {
                break;
            }
        }
        let _ = up_tx.close().await;
    };
    let to_caller = async {
        while let Some(Ok(msg)) = up_rx.next().await {
            let Some(msg) = from_tungstenite(msg) else {
                continue;
            };
            let closing = matches!(msg, ws::Message::Close(_));
            if down_tx.send(msg).await.is_err() || closing {
                break;
            }
        }
        let _ = down_tx.close().await;
    };
    // The node's side ends the relay: its exit frame and close are what the caller waits
    // for. When the caller's side ends first (it closed, or the node stopped taking input
    // because the command already exited), what the node said is still relayed, up to its
    // own close (bounded, should the node never close).
    tokio::pin!(to_node);
    tokio::pin!(to_caller);
    tokio::select! {
        _ = &mut to_caller => {
            // The closing handshake with the caller (see `run`): its close, relayed, ends
            // the relay.
            let _ = tokio::time::timeout(CLOSE_WAIT, &mut to_node).await;
        }
        _ = &mut to_node => {
            let _ = tokio::time::timeout(RELAY_DRAIN, &mut to_caller).await;
        }
    }
}

fn to_tungstenite(msg: ws::Message) -> Option<tungstenite::Message> {
    Some(match msg {
        ws::Message::Text(t) => tungstenite::Message::Text(t.as_str().into()),
        ws::Message::Binary(b) => tungstenite::Message::Binary(b),
        ws::Message::Ping(b) => tungstenite::Message::Ping(b),
        ws::Message::Pong(b) => tungstenite::Message::Pong(b),
        ws::Message::Close(frame) => {
            tungstenite::Message::Close(frame.map(|f| tungstenite::protocol::CloseFrame {
                code: f.code.into(),
                reason: f.reason.as_str().into(),
            }))
        }
    })
}

fn from_tungstenite(msg: tungstenite::Message) -> Option<ws::Message> {
    Some(match msg {
        tungstenite::Message::Text(t) => ws::Message::Text(t.as_str().into()),
        tungstenite::Message::Binary(b) => ws::Message::Binary(b),
        tungstenite::Message::Ping(b) => ws::Message::Ping(b),
        tungstenite::Message::Pong(b) => ws::Message::Pong(b),
        tungstenite::Message::Close(frame) => ws::Message::Close(frame.map(|f| ws::CloseFrame {
            code: f.code.into(),
            reason: f.reason.as_str().into(),
        })),
        tungstenite::Message::Frame(_) => return None,
    })
}

/// One of Nomad's output frames.
fn output_frame(stream: &str, data: &[u8]) -> ws::Message {
    let b64 = base64::engine::general_purpose::STANDARD.encode(data);
    ws::Message::Text(json!({ stream: { "data": b64 } }).to_string().into())
}

/// What a caller's frame asks for.
#[derive(Debug, PartialEq, Eq)]
enum Input {
    /// Bytes for the command's stdin.
    Stdin(Vec<u8>),
    /// The end of its stdin.
    StdinClose,
    /// Its terminal's new size (rows, columns).
    Resize(u16, u16),
    /// Anything else (a heartbeat `{}`).
    Ignored,
}

/// Reads a caller's frame (Nomad's `ExecStreamingInput`).
fn parse_input(text: &str) -> Result<Input, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("bad frame: {e}"))?;
    let stdin = &v["stdin"];
    if stdin["close"] == true {
        return Ok(Input::StdinClose);
    }
    let size = &v["tty_size"];
    if let (Some(h), Some(w)) = (size["height"].as_u64(), size["width"].as_u64()) {
        let clamp = |n: u64| n.min(u64::from(u16::MAX)) as u16;
        return Ok(Input::Resize(clamp(h), clamp(w)));
    }
    match stdin["data"].as_str() {
        Some(data) => base64::engine::general_purpose::STANDARD
            .decode(data)
            .map(Input::Stdin)
            .map_err(|e| format!("bad stdin data: {e}")),
        None => Ok(Input::Ignored),
    }
}

/// Sends what `reader` gives as `stream` frames, then its close frame.
async fn pump<R: tokio::io::AsyncRead + Unpin>(
    mut reader: R,
    stream: &'static str,
    out: mpsc::Sender<ws::Message>,
) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if out.send(output_frame(stream, &buf[..n])).await.is_err() {
                    return;
                }
            }
        }
    }
    let close = json!({ stream: { "close": true } }).to_string();
    let _ = out.send(ws::Message::Text(close.into())).await;
}

/// Kills the command's process group (it leads one, or a session).
fn kill_group(child: &tokio::process::Child) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) has no memory effects; the negative pid names the group the
        // command leads.
        unsafe {
            libc::kill(-(pid as i32), libc::SIGKILL);
        }
    }
}

type StdinSink = Box<dyn tokio::io::AsyncWrite + Unpin + Send>;

/// The command a session runs: a host process, or an exec in a container.
enum Proc {
    Host {
        child: tokio::process::Child,
        pty: Option<crate::client::pty::Master>,
    },
    Container {
        exec: ContainerExec,
        /// Carries its output to the caller; ends when the command's output does (true)
        /// or the caller is gone (false).
        output: tokio::task::JoinHandle<bool>,
    },
}

impl Proc {
    /// Resolves when the command has ended, or (a container's) when its output could no
    /// longer be sent because the caller is gone: false then (cancel-safe: the select
    /// loop polls it again).
    async fn ended(&mut self) -> bool {
        match self {
            Proc::Host { child, .. } => {
                let _ = child.wait().await;
                true
            }
            Proc::Container { output, .. } => output.await.unwrap_or(true),
        }
    }

    async fn resize(&self, rows: u16, cols: u16) {
        let resized = match self {
            Proc::Host { pty: Some(m), .. } => m.resize(rows, cols).map_err(|e| e.to_string()),
            Proc::Host { pty: None, .. } => Ok(()),
            Proc::Container { exec, .. } => {
                exec.resize(rows, cols).await.map_err(|e| e.to_string())
            }
        };
        if let Err(error) = resized {
            tracing::debug!(%error, "alloc exec: resize failed");
        }
    }

    /// Stops the command: its caller went away, and nothing is to outlive it.
    async fn kill(&mut self) {
        match self {
            Proc::Host { child, .. } => {
                kill_group(child);
                let _ = child.wait().await;
            }
            Proc::Container { exec, output } => {
                exec.kill().await;
                output.abort();
            }
        }
    }

    /// How it ended, once [`Proc::ended`]: its exit code (128 + the signal that killed a
    /// host process), or -1 when that cannot be told.
    async fn exit_code(&mut self) -> i64 {
        match self {
            Proc::Host { child, .. } => child.wait().await.ok().map_or(-1, |s| {
                use std::os::unix::process::ExitStatusExt;
                i64::from(s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)))
            }),
            Proc::Container { exec, .. } => exec.exit_code().await.unwrap_or(-1),
        }
    }
}

/// Sends a container exec's output frames to the caller as Nomad's `stdout`/`stderr`
/// frames (a terminal's output is `stdout`), then both streams' close frames. False when
/// the caller is gone before the output ended.
async fn pump_container(mut output: ExecOutput, out: mpsc::Sender<ws::Message>) -> bool {
    use bollard::container::LogOutput;
    while let Some(Ok(frame)) = output.next().await {
        let (stream, message) = match frame {
            LogOutput::StdOut { message } | LogOutput::Console { message } => ("stdout", message),
            LogOutput::StdErr { message } => ("stderr", message),
            LogOutput::StdIn { .. } => continue,
        };
        for piece in message.chunks(CHUNK) {
            if out.send(output_frame(stream, piece)).await.is_err() {
                return false;
            }
        }
    }
    for stream in ["stdout", "stderr"] {
        let close = json!({ stream: { "close": true } }).to_string();
        let _ = out.send(ws::Message::Text(close.into())).await;
    }
    true
}

/// Starts what `process` runs, with its output going to `out`: the command and its stdin,
/// the pumps of a host command's output, and whether it has a terminal.
#[allow(clippy::type_complexity)]
async fn start(
    process: ExecProcess,
    out: &mpsc::Sender<ws::Message>,
) -> Result<
    (
        Proc,
        Option<StdinSink>,
        Vec<tokio::task::JoinHandle<()>>,
        bool,
    ),
    String,
> {
    match process {
        ExecProcess::Host { mut cmd, pty, .. } => {
            if pty.is_none() {
                cmd.stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
            }
            let mut child = cmd.spawn().map_err(|e| e.to_string())?;
            // The terminal's far end must not stay open here, or its output would never end.
            drop(cmd);
            let mut pumps = Vec::new();
            let stdin: Option<StdinSink> = match &pty {
                Some(m) => {
                    let reader = m.reader().map_err(|e| e.to_string())?;
                    let writer = m.writer().map_err(|e| e.to_string())?;
                    pumps.push(tokio::spawn(pump(reader, "stdout", out.clone())));
                    Some(Box::new(writer))
                }
                None => {
                    if let Some(stdout) = child.stdout.take() {
                        pumps.push(tokio::spawn(pump(stdout, "stdout", out.clone())));
                    }
                    if let Some(stderr) = child.stderr.take() {
                        pumps.push(tokio::spawn(pump(stderr, "stderr", out.clone())));
                    }
                    child.stdin.take().map(|w| Box::new(w) as StdinSink)
                }
            };
            let tty = pty.is_some();
            Ok((Proc::Host { child, pty }, stdin, pumps, tty))
        }
        ExecProcess::Container { exec, .. } => {
            let tty = exec.tty();
            let (exec, output, input) = exec.start().await.map_err(|e| e.to_string())?;
            let output = tokio::spawn(pump_container(output, out.clone()));
            Ok((
                Proc::Container { exec, output },
                Some(Box::new(input) as StdinSink),
                Vec::new(),
                tty,
            ))
        }
    }
}

/// Runs the command for the caller at `socket`: its stdin from the caller's frames, its
/// output to them, its exit code last. The command is killed if the caller goes away first.
async fn run(socket: WebSocket, process: ExecProcess) {
    let (mut sink, mut frames) = socket.split();
    let (out_tx, mut out_rx) = mpsc::channel::<ws::Message>(OUT_QUEUE);
    let (mut proc, mut stdin, pumps, terminal) = match start(process, &out_tx).await {
        Ok(started) => started,
        Err(e) => {
            let reason = format!("failed to start the command: {e}");
            tracing::info!(error = %e, "alloc exec could not start its command");
            let _ = sink
                .send(ws::Message::Close(Some(ws::CloseFrame {
                    code: ws::close_code::ERROR,
                    reason: reason.into(),
                })))
                .await;
            return;
        }
    };
    drop(out_tx);
    let writer = tokio::spawn(async move {
        while let Some(msg) = out_rx.recv().await {
            if sink.send(msg).await.is_err() {
                break;
            }
        }
        sink
    });
    loop {
        tokio::select! {
            output_ended = proc.ended() => {
                if output_ended {
                    break;
                }
                // The caller is gone while the command still writes: it must not go on.
                tracing::info!("alloc exec: the caller went away; its command is killed");
                proc.kill().await;
                return;
            }
            frame = frames.next() => match frame {
                Some(Ok(ws::Message::Text(text))) => match parse_input(text.as_str()) {
                    Ok(Input::Stdin(data)) => {
                        if let Some(w) = stdin.as_mut() {
                            let written = w.write_all(&data).await.and(w.flush().await);
                            if written.is_err() {
                                stdin = None;
                            }
                        }
                    }
                    // A terminal's input ends with its end-of-file character, not a close.
                    Ok(Input::StdinClose) if !terminal => {
                        if let Some(mut w) = stdin.take() {
                            // A container's stdin ends with the write side's shutdown.
                            let _ = w.shutdown().await;
                        }
                    }
                    Ok(Input::StdinClose) => {}
                    Ok(Input::Resize(rows, cols)) => proc.resize(rows, cols).await,
                    Ok(Input::Ignored) => {}
                    Err(reason) => tracing::debug!(%reason, "alloc exec: frame ignored"),
                },
                Some(Ok(ws::Message::Close(_))) | Some(Err(_)) | None => {
                    // The caller left: nothing is to outlive it.
                    tracing::info!("alloc exec: the caller went away; its command is killed");
                    proc.kill().await;
                    return;
                }
                Some(Ok(_)) => {}
            },
        }
    }
    drop(stdin);
    // The output written before the exit goes out before the exit code.
    for p in pumps {
        let _ = tokio::time::timeout(DRAIN, p).await;
    }
    let code = proc.exit_code().await;
    let Ok(mut sink) = writer.await else {
        return;
    };
    let exited = json!({ "exited": true, "result": { "exit_code": code } }).to_string();
    let _ = sink.send(ws::Message::Text(exited.into())).await;
    let _ = sink
        .send(ws::Message::Close(Some(ws::CloseFrame {
            code: ws::close_code::NORMAL,
            reason: "".into(),
        })))
        .await;
    // The closing handshake: the caller's own close ends the connection. Dropping it at
    // once would reset it under a frame the caller still sends (a late stdin close), and a
    // reset loses the frames the caller has not read yet, the exit frame among them.
    let _ = tokio::time::timeout(CLOSE_WAIT, async {
        while let Some(Ok(msg)) = frames.next().await {
            if matches!(msg, ws::Message::Close(_)) {
                break;
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_query_names_a_command_and_maybe_a_terminal() {
        let p = ExecParams::parse(&q(&[("task", "web"), ("command", r#"["echo","hi"]"#)])).unwrap();
        assert_eq!(p.task.as_deref(), Some("web"));
        assert_eq!(p.command, ["echo", "hi"]);
        assert!(!p.tty);
        let p = ExecParams::parse(&q(&[("command", r#"["sh"]"#), ("tty", "True")])).unwrap();
        assert_eq!((p.task, p.tty), (None, true));
        for bad in [
            q(&[]),
            q(&[("command", "[]")]),
            q(&[("command", "echo hi")]),
            q(&[("command", r#"["sh"]"#), ("tty", "maybe")]),
        ] {
            assert!(ExecParams::parse(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn frames_are_nomads() {
        assert_eq!(
            parse_input(r#"{"stdin":{"data":"aGkK"}}"#),
            Ok(Input::Stdin(b"hi\n".to_vec()))
        );
        assert_eq!(
            parse_input(r#"{"stdin":{"close":true}}"#),
            Ok(Input::StdinClose)
        );
        assert_eq!(
            parse_input(r#"{"tty_size":{"height":24,"width":80}}"#),
            Ok(Input::Resize(24, 80))
        );
        assert_eq!(parse_input("{}"), Ok(Input::Ignored));
        assert!(parse_input(r#"{"stdin":{"data":"%%%"}}"#).is_err());
        let ws::Message::Text(t) = output_frame("stdout", b"hi\n") else {
            panic!("a text frame");
        };
        assert_eq!(t.as_str(), r#"{"stdout":{"data":"aGkK"}}"#);
    }
}
