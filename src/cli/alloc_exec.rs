//! `teamster alloc exec [-i] [-t] [-task T] ALLOC CMD...`: run a command in the place of a
//! running task, as `nomad alloc exec`, through any agent's
//! `/v1/client/allocation/:id/exec` websocket (a server relays it to the client that runs the
//! allocation). The command's stdout and stderr are printed as they come; this process's
//! stdin is sent to it (`-i=false` to send none); the command's exit code is this command's.
//! Everything after the allocation is the command, flags included. With `-t` (the default
//! when stdin is a terminal, `-t=false` to refuse it) the command gets a terminal of its
//! own, sized as this one, and this terminal is put in raw mode until the command ends.

use std::io::{Read, Write};
use std::process::ExitCode;

use anyhow::{bail, Context};
use base64::Engine;
use clap::Args;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::error::UrlError;
use tokio_tungstenite::tungstenite::Message;

use super::args::ConnArgs;
use crate::api::ApiClient;
use crate::util::net::HttpIo;

/// `alloc exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Address, token and TLS. `alloc exec` takes only these of the shared API flags: its
    /// output is the command's, so `--json` and `-t` (a tty here) do not apply.
    #[command(flatten)]
    conn: ConnArgs,
    /// Send this process's stdin to the command (on unless `-i=false`).
    #[arg(
        short = 'i',
        num_args = 0..=1,
        require_equals = true,
        default_value_t = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub(super) stdin: bool,
    /// Give the command a terminal (the default when stdin is one; `-t=false` not to).
    #[arg(
        short = 't',
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub(super) tty: Option<bool>,
    /// The task to run in (optional when the allocation's group has one).
    #[arg(long)]
    pub(super) task: Option<String>,
    /// The allocation ID (or a unique prefix).
    pub(super) id: String,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub(super) command: Vec<String>,
}

/// The exec websocket's URL on the agent at `base` (`http://host:port`).
fn exec_url(
    base: &str,
    alloc_id: &str,
    task: Option<&str>,
    command: &[String],
    tty: bool,
) -> String {
    let command = serde_json::to_string(command).unwrap_or_default();
    let mut url = ws_url(
        base,
        &format!(
            "/v1/client/allocation/{alloc_id}/exec?command={}&tty={tty}",
            crate::api::urlencode(&command)
        ),
    );
    if let Some(task) = task {
        url.push_str(&format!("&task={}", crate::api::urlencode(task)));
    }
    url
}

/// One stdin frame.
fn stdin_frame(data: &[u8]) -> Message {
    let b64 = base64::engine::general_purpose::STANDARD.encode(data);
    Message::Text(json!({ "stdin": { "data": b64 } }).to_string().into())
}

/// Reads this process's stdin on a thread of its own (a blocked read must not hold the
/// runtime at exit); `None` at its end.
fn read_stdin() -> tokio::sync::mpsc::Receiver<Option<Vec<u8>>> {
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin();
        let mut buf = vec![0u8; 16 << 10];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = tx.blocking_send(None);
                    return;
                }
                Ok(n) => {
                    if tx.blocking_send(Some(buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

/// Whether `fd` is a terminal.
fn is_terminal(fd: i32) -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(fd) == 1 }
}

/// This terminal in raw mode (keys go to the remote command as typed) until dropped.
struct RawMode(libc::termios);

impl RawMode {
    /// Raw mode on stdin, when it is a terminal.
    fn enable() -> Option<RawMode> {
        if !is_terminal(0) {
            return None;
        }
        // SAFETY: tcgetattr/cfmakeraw/tcsetattr read and write the termios we own.
        unsafe {
            let mut saved: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut saved) != 0 {
                return None;
            }
            let mut raw = saved;
            libc::cfmakeraw(&mut raw);
            if libc::tcsetattr(0, libc::TCSANOW, &raw) != 0 {
                return None;
            }
            Some(RawMode(saved))
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: restores the settings read in `enable`.
        unsafe {
            libc::tcsetattr(0, libc::TCSANOW, &self.0);
        }
    }
}

/// This terminal's size as a `tty_size` frame, when stdout is one.
fn size_frame() -> Option<Message> {
    // SAFETY: TIOCGWINSZ writes into the winsize we own.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: as above; fd 1 is only inspected.
    if unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut size) } != 0 || size.ws_row == 0 {
        return None;
    }
    let frame = json!({ "tty_size": { "height": size.ws_row, "width": size.ws_col } });
    Some(Message::Text(frame.to_string().into()))
}

/// Open the exec websocket at `url` as `api` speaks: its token as `X-Nomad-Token`, and over
/// TLS with its certificates for an `https://` agent.
async fn connect(
    api: &ApiClient,
    url: &str,
) -> Result<
    (
        tokio_tungstenite::WebSocketStream<Box<dyn HttpIo>>,
        tokio_tungstenite::tungstenite::handshake::client::Response,
    ),
    tokio_tungstenite::tungstenite::Error,
> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Error as WsError;
    let mut request = url.into_client_request()?;
    if let Some(token) = api.scope().token.as_deref().filter(|t| !t.is_empty()) {
        let value = token
            .parse()
            .map_err(|_| WsError::Url(UrlError::UnableToConnect("a malformed token".into())))?;
        request.headers_mut().insert("X-Nomad-Token", value);
    }
    let host = request
        .uri()
        .host()
        .ok_or(WsError::Url(UrlError::NoHostName))?
        .trim_matches(['[', ']'])
        .to_string();
    let tls = api.tls_config();
    let port = request
        .uri()
        .port_u16()
        .unwrap_or(if tls.is_some() { 443 } else { 80 });
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
    let io: Box<dyn HttpIo> = match tls {
        None => Box::new(tcp),
        Some(tls) => {
            let name = rustls::pki_types::ServerName::try_from(host.clone())
                .map_err(|_| WsError::Url(UrlError::NoHostName))?;
            Box::new(
                tokio_rustls::TlsConnector::from(tls)
                    .connect(name, tcp)
                    .await?,
            )
        }
    };
    tokio_tungstenite::client_async(request, io).await
}

/// Run the command; its exit code is the answer.
pub async fn exec(a: ExecArgs) -> anyhow::Result<ExitCode> {
    let api = a.conn.client()?;
    let alloc_id = super::args::resolve(&api, "/v1/allocations", "allocation", &a.id).await?;
    let tty = a.tty.unwrap_or(a.stdin && is_terminal(0));
    let url = exec_url(api.address(), &alloc_id, a.task.as_deref(), &a.command, tty);
    stream(&api, &url, &alloc_id, a.stdin, tty).await
}

/// The websocket URL for `path_and_query` on the agent at `base` (`http://host:port`).
pub(super) fn ws_url(base: &str, path_and_query: &str) -> String {
    match base.strip_prefix("https://") {
        Some(rest) => format!("wss://{rest}{path_and_query}"),
        None => format!(
            "ws://{}{path_and_query}",
            base.trim_start_matches("http://")
        ),
    }
}

/// Carry an exec websocket at `url` (a command in allocation `alloc_id`): this process's
/// stdin to it (with `stdin`), its output to this process's; its exit code is the answer.
pub(super) async fn stream(
    api: &ApiClient,
    url: &str,
    alloc_id: &str,
    stdin: bool,
    tty: bool,
) -> anyhow::Result<ExitCode> {
    let (socket, _) = match connect(api, url).await {
        Ok(s) => s,
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
            let body = resp
                .body()
                .as_deref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default();
            bail!(
                "running a command in allocation {alloc_id}: {} ({})",
                body.trim(),
                resp.status()
            )
        }
        Err(e) => {
            return Err(e).with_context(|| {
                format!(
                    "running a command in allocation {alloc_id}: cannot reach {}",
                    api.address()
                )
            })
        }
    };
    let (mut tx, mut rx) = socket.split();
    let _raw = if tty {
        if let Some(size) = size_frame() {
            let _ = tx.send(size).await;
        }
        RawMode::enable()
    } else {
        None
    };
    let mut input = if stdin {
        Some(read_stdin())
    } else {
        tx.send(Message::Text(r#"{"stdin":{"close":true}}"#.into()))
            .await
            .context("sending to the command")?;
        None
    };
    let mut code: Option<i64> = None;
    loop {
        tokio::select! {
            chunk = async { input.as_mut()?.recv().await }, if input.is_some() => {
                let frame = match chunk.flatten() {
                    Some(data) => stdin_frame(&data),
                    // A terminal's input ends with its end-of-file character.
                    None if tty => {
                        input = None;
                        stdin_frame(b"\x04")
                    }
                    None => {
                        input = None;
                        Message::Text(r#"{"stdin":{"close":true}}"#.into())
                    }
                };
                // The command may be gone already; its exit frame tells.
                let _ = tx.send(frame).await;
            }
            msg = rx.next() => match msg {
                Some(Ok(Message::Text(text))) => {
                    let v: Value = serde_json::from_str(text.as_str()).unwrap_or_default();
                    for (stream, out) in [("stdout", true), ("stderr", false)] {
                        let Some(data) = v[stream]["data"].as_str() else {
                            continue;
                        };
                        let bytes = base64::engine::general_purpose::STANDARD
                            .decode(data)
                            .context("a malformed output frame")?;
                        if out {
                            let mut o = std::io::stdout();
                            o.write_all(&bytes)?;
                            o.flush()?;
                        } else {
                            let mut e = std::io::stderr();
                            e.write_all(&bytes)?;
                            e.flush()?;
                        }
                    }
                    if v["exited"] == true {
                        code = Some(v["result"]["exit_code"].as_i64().unwrap_or(0));
                    }
                }
                Some(Ok(Message::Close(frame))) => {
                    if code.is_none() {
                        let reason = frame.map(|f| f.reason.to_string()).unwrap_or_default();
                        bail!("the command in allocation {alloc_id} ended without an exit code: {reason}");
                    }
                    break;
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    return Err(e).with_context(|| format!("running a command in allocation {alloc_id}"))
                }
                None => break,
            },
        }
    }
    match code {
        Some(c) => Ok(ExitCode::from(c.clamp(0, 255) as u8)),
        None => bail!("the connection to allocation {alloc_id} closed before the command exited"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_carries_the_command_as_json() {
        let url = exec_url(
            "http://10.0.0.1:4646",
            "a1",
            Some("web"),
            &["sh".into(), "-c".into(), "echo a b".into()],
            false,
        );
        assert_eq!(
            url,
            "ws://10.0.0.1:4646/v1/client/allocation/a1/exec\
             ?command=%5B%22sh%22%2C%22-c%22%2C%22echo%20a%20b%22%5D&tty=false&task=web"
        );
        assert!(exec_url("https://h", "a", None, &["x".into()], true).starts_with("wss://h/"));
    }
}
