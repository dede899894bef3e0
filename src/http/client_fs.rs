//! An allocation's files, as Nomad's client filesystem API: `GET /v1/client/fs/`
//! `ls/:alloc_id?path=` (entries `{Name, IsDir, Size, FileMode, ModTime}`),
//! `stat/:alloc_id?path=`, `cat/:alloc_id?path=` (plain text), `readat/:alloc_id?path=&offset=&limit=`,
//! `stream/:alloc_id?path=&offset=&origin=&follow=` and
//! `logs/:alloc_id?task=&type=stdout|stderr&offset=&origin=start|end&plain=&follow=`. `stream`
//! and `logs` answer Nomad's frames `{"Offset", "Data": base64, "File"}` one per line, or the
//! bytes themselves with `plain=true`; with `follow=true` they keep sending what the task
//! writes until the caller hangs up.
//!
//! Served by the agent whose client runs the allocation (the directory is
//! `<data_dir>/alloc/<alloc id>/`, a task's logs `<task>/stdout.log` and `<task>/stderr.log`).
//! A server that does not hold the directory looks the allocation up (by ID or unique prefix)
//! and forwards the request once to its node's HTTP address, streaming the answer back
//! ([`client_route`]); anything else is answered 404 with the reason.
//!
//! Every open is confined to the allocation directory by the kernel ([`Beneath`]): a
//! symlink a task made to `/` or to a parent reads nothing outside (400), a FIFO or a device
//! node is refused without blocking, and `ls` lists symlinks without following them.

use std::collections::HashMap;
use std::io::SeekFrom;
use std::path::{Component, Path as FsPath, PathBuf};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{OriginalUri, Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::client_route::{self, Target};
use super::error::ApiError;
use super::HttpContext;
use crate::util::beneath::{Beneath, BeneathError};

/// The largest file served by `cat` (a cat, not a download), and the most `readat` reads.
pub const MAX_CAT_BYTES: u64 = 16 << 20;
/// The largest piece of a file one stream frame carries.
pub(super) const FRAME_BYTES: usize = 64 << 10;
/// How often a followed file is checked for new bytes.
pub(super) const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// The client filesystem routes.
pub fn routes() -> Router<HttpContext> {
    Router::new()
        .route("/v1/client/fs/cat/{alloc_id}", get(cat))
        .route("/v1/client/fs/ls/{alloc_id}", get(ls))
        .route("/v1/client/fs/stat/{alloc_id}", get(stat))
        .route("/v1/client/fs/readat/{alloc_id}", get(readat))
        .route("/v1/client/fs/stream/{alloc_id}", get(stream))
        .route(
            "/v1/client/fs/logs/{alloc_id}",
            get(super::client_logs::logs),
        )
}

/// `path` as a path relative to the allocation directory, refusing `..` early with a clear
/// message. The open itself is what confines it ([`Beneath`]): a symlink a task made that
/// leads out of the directory is refused by the kernel, not by this check.
pub fn relative(path: &str) -> Result<String, ApiError> {
    if path.is_empty() {
        return Err(ApiError::bad_request("must provide a file path"));
    }
    let rel = FsPath::new(path.trim_start_matches('/'));
    if rel
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(ApiError::bad_request(format!(
            "path {path:?} must stay inside the allocation directory"
        )));
    }
    Ok(rel.to_string_lossy().into_owned())
}

/// Runs `f` on the allocation directory `root` opened for confined access, on a blocking
/// thread.
pub(super) async fn beneath<T: Send + 'static>(
    root: PathBuf,
    f: impl FnOnce(&Beneath) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(move || f(&Beneath::open(&root).map_err(fs_error)?))
        .await
        .map_err(|e| ApiError::internal(format!("the file system call failed: {e}")))?
}

/// A confined file system error as Nomad's status codes (a missing path: 404).
pub(super) fn fs_error(e: BeneathError) -> ApiError {
    match e {
        BeneathError::NotFound(_) => ApiError::not_found(e.to_string()),
        BeneathError::Escapes(path) => ApiError::bad_request(format!(
            "path {path:?} leads outside the allocation directory"
        )),
        BeneathError::WrongKind { .. } => ApiError::bad_request(e.to_string()),
        BeneathError::Io { .. } => ApiError::internal(e.to_string()),
    }
}

/// Opens the file at `rel` to read its contents: a missing file is a bad request (as
/// Nomad's `cat`, `readat` and `stream` answer), and nothing in a task's `secrets/` or
/// `private/` is read, however it is reached (a symlink to it is refused too).
pub(super) fn open_readable(b: &Beneath, rel: &str) -> Result<std::fs::File, ApiError> {
    let refuse =
        |path: &str| ApiError::forbidden(format!("Reading secret file prohibited: {path}"));
    if crate::client::allocdir::is_secret(rel) {
        return Err(refuse(rel));
    }
    let file = b.open_file(rel).map_err(|e| match e {
        BeneathError::NotFound(_) => ApiError::bad_request(e.to_string()),
        other => fs_error(other),
    })?;
    match b.relative_of(&file) {
        Some(real) if !crate::client::allocdir::is_secret(&real) => Ok(file),
        Some(_) => Err(refuse(rel)),
        None => Err(ApiError::internal(format!(
            "{rel}: cannot tell where the file is"
        ))),
    }
}

/// Where an allocation's files are for this request.
pub(super) enum Place {
    /// Here, under this directory.
    Local(PathBuf),
    /// On the client at this HTTP address.
    Remote { addr: String, alloc_id: String },
}

/// This agent's directory for `alloc_id`, or the client to forward to
/// ([`client_route::locate_alloc`]).
pub(super) async fn locate(
    ctx: &HttpContext,
    alloc_id: &str,
    headers: &HeaderMap,
) -> Result<Place, ApiError> {
    let root = ctx.agent().data_dir.join("alloc").join(alloc_id);
    match client_route::locate_alloc(ctx, alloc_id, headers, |_| root.is_dir())? {
        Target::Here => Ok(Place::Local(root)),
        Target::Node { addr, alloc_id } => Ok(Place::Remote { addr, alloc_id }),
    }
}

/// The same request sent once to the client that holds the files, its answer streamed back.
pub(super) async fn forward(
    addr: &str,
    op: &str,
    alloc_id: &str,
    uri: &OriginalUri,
) -> Result<Response, ApiError> {
    let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
    client_route::forward(
        addr,
        axum::http::Method::GET,
        &format!("/v1/client/fs/{op}/{alloc_id}{query}"),
        None,
    )
    .await
}

fn text(bytes: Vec<u8>) -> Response {
    let mut resp = bytes.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// What a file holds, from its name and its first 512 bytes (Nomad's `stat` answers it):
/// JSON by its extension, text when the bytes are UTF-8, else bytes. A file that may not be
/// read (a secret) is not looked into.
fn content_type(b: &Beneath, rel: &str) -> String {
    if rel.ends_with(".json") {
        return "application/json".into();
    }
    let Ok(file) = open_readable(b, rel) else {
        return "application/octet-stream".into();
    };
    let mut head = Vec::with_capacity(512);
    if std::io::Read::read_to_end(&mut std::io::Read::take(file, 512), &mut head).is_err() {
        return "application/octet-stream".into();
    }
    let text = match std::str::from_utf8(&head) {
        Ok(_) => true,
        // A character cut at the 512th byte is still text.
        Err(e) => e.error_len().is_none(),
    };
    if text {
        "text/plain; charset=utf-8".into()
    } else {
        "application/octet-stream".into()
    }
}

/// Nomad's `AllocFileInfo` of a file or directory.
fn file_info(name: &str, meta: &std::fs::Metadata) -> Value {
    use std::os::unix::fs::PermissionsExt;
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| teamster_storage::model::Timestamp::from_unix_nanos(d.as_nanos() as i64))
        .unwrap_or_default();
    let mode = meta.permissions().mode() & 0o777;
    let kind = if meta.file_type().is_symlink() {
        "L"
    } else if meta.is_dir() {
        "d"
    } else {
        "-"
    };
    let rwx: String = (0..9)
        .map(|i| {
            let bit = 1 << (8 - i);
            if mode & bit == 0 {
                '-'
            } else {
                ['r', 'w', 'x'][i % 3]
            }
        })
        .collect();
    json!({
        "Name": name,
        "IsDir": meta.is_dir(),
        "Size": meta.len(),
        "FileMode": format!("{kind}{rwx}"),
        "ModTime": modified,
    })
}

pub(super) fn param<'a>(q: &'a HashMap<String, String>, key: &str) -> &'a str {
    q.get(key).map(String::as_str).unwrap_or_default()
}

pub(super) fn number(q: &HashMap<String, String>, key: &str) -> Result<u64, ApiError> {
    match q.get(key).map(String::as_str) {
        None | Some("") => Ok(0),
        Some(v) => v
            .parse()
            .map_err(|_| ApiError::bad_request(format!("{key}: {v:?} is not a number"))),
    }
}

/// A boolean parameter as Go's `strconv.ParseBool` reads it (`true`, `True`, `1`, `t`, …:
/// python-nomad sends Python's `True`/`False`).
pub(super) fn flag(q: &HashMap<String, String>, key: &str) -> Result<bool, ApiError> {
    match q.get(key).map(String::as_str) {
        None | Some("") => Ok(false),
        Some("1" | "t" | "T" | "true" | "True" | "TRUE") => Ok(true),
        Some("0" | "f" | "F" | "false" | "False" | "FALSE") => Ok(false),
        Some(v) => Err(ApiError::bad_request(format!(
            "{key}: {v:?} is not true or false"
        ))),
    }
}

pub(super) type Params = (
    State<HttpContext>,
    Path<String>,
    Query<HashMap<String, String>>,
    HeaderMap,
    OriginalUri,
);

async fn cat(
    (State(ctx), Path(alloc_id), Query(q), headers, uri): Params,
) -> Result<Response, ApiError> {
    let root = match locate(&ctx, &alloc_id, &headers).await? {
        Place::Local(root) => root,
        Place::Remote { addr, alloc_id } => return forward(&addr, "cat", &alloc_id, &uri).await,
    };
    let path = relative(param(&q, "path"))?;
    let bytes = beneath(root, move |b| {
        let mut f = open_readable(b, &path)?;
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len > MAX_CAT_BYTES {
            return Err(ApiError::bad_request(format!(
                "{path} is larger than cat serves (16 MiB); use readat or stream"
            )));
        }
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(&mut f, MAX_CAT_BYTES), &mut buf)
            .map_err(|e| ApiError::internal(format!("{path}: {e}")))?;
        Ok(buf)
    })
    .await?;
    Ok(text(bytes))
}

async fn ls(
    (State(ctx), Path(alloc_id), Query(q), headers, uri): Params,
) -> Result<Response, ApiError> {
    let root = match locate(&ctx, &alloc_id, &headers).await? {
        Place::Local(root) => root,
        Place::Remote { addr, alloc_id } => return forward(&addr, "ls", &alloc_id, &uri).await,
    };
    let path = match param(&q, "path") {
        "" | "/" => ".",
        p => p,
    };
    let path = relative(path)?;
    let entries = beneath(root, move |b| b.read_dir(&path).map_err(fs_error)).await?;
    let out: Vec<Value> = entries
        .iter()
        .map(|(name, meta)| file_info(name, meta))
        .collect();
    Ok(axum::Json(out).into_response())
}

async fn stat(
    (State(ctx), Path(alloc_id), Query(q), headers, uri): Params,
) -> Result<Response, ApiError> {
    let root = match locate(&ctx, &alloc_id, &headers).await? {
        Place::Local(root) => root,
        Place::Remote { addr, alloc_id } => return forward(&addr, "stat", &alloc_id, &uri).await,
    };
    let path = relative(param(&q, "path"))?;
    let name = FsPath::new(&path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (meta, content_type) = beneath(root, move |b| {
        let meta = b.stat(&path).map_err(fs_error)?;
        let content_type = if meta.is_file() {
            content_type(b, &path)
        } else {
            String::new()
        };
        Ok((meta, content_type))
    })
    .await?;
    let mut info = file_info(&name, &meta);
    info["ContentType"] = json!(content_type);
    Ok(axum::Json(info).into_response())
}

async fn readat(
    (State(ctx), Path(alloc_id), Query(q), headers, uri): Params,
) -> Result<Response, ApiError> {
    let root = match locate(&ctx, &alloc_id, &headers).await? {
        Place::Local(root) => root,
        Place::Remote { addr, alloc_id } => return forward(&addr, "readat", &alloc_id, &uri).await,
    };
    let path = param(&q, "path");
    let offset = number(&q, "offset")?;
    let limit = number(&q, "limit")?;
    if limit == 0 || limit > MAX_CAT_BYTES {
        return Err(ApiError::bad_request(format!(
            "limit must be between 1 and {MAX_CAT_BYTES}"
        )));
    }
    let rel = relative(path)?;
    let buf = beneath(root, move |b| {
        let mut f = open_readable(b, &rel)?;
        let io = |e: std::io::Error| ApiError::internal(format!("{rel}: {e}"));
        std::io::Seek::seek(&mut f, SeekFrom::Start(offset)).map_err(io)?;
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(f, limit), &mut buf).map_err(io)?;
        Ok(buf)
    })
    .await?;
    Ok(text(buf))
}

/// What to stream and how.
struct StreamSpec {
    /// The allocation directory.
    root: PathBuf,
    /// The file, relative to it.
    file: String,
    /// The file's name in frames (relative to the allocation directory).
    name: String,
    offset: u64,
    from_end: bool,
    follow: bool,
    plain: bool,
}

async fn stream(
    (State(ctx), Path(alloc_id), Query(q), headers, uri): Params,
) -> Result<Response, ApiError> {
    let root = match locate(&ctx, &alloc_id, &headers).await? {
        Place::Local(root) => root,
        Place::Remote { addr, alloc_id } => return forward(&addr, "stream", &alloc_id, &uri).await,
    };
    let path = param(&q, "path");
    serve_stream(StreamSpec {
        root,
        file: relative(path)?,
        name: path.trim_start_matches('/').to_string(),
        offset: number(&q, "offset")?,
        from_end: origin_is_end(&q)?,
        follow: flag(&q, "follow")?,
        plain: flag(&q, "plain")?,
    })
    .await
}

pub(super) fn origin_is_end(q: &HashMap<String, String>) -> Result<bool, ApiError> {
    match param(q, "origin") {
        "" | "start" => Ok(false),
        "end" => Ok(true),
        other => Err(ApiError::bad_request(format!(
            "origin must be start or end, not {other:?}"
        ))),
    }
}

/// One piece of a streamed file as Nomad frames it.
pub(super) fn frame(data: &[u8], offset: u64, name: &str) -> Bytes {
    use base64::Engine;
    let v = json!({
        "Offset": offset,
        "Data": base64::engine::general_purpose::STANDARD.encode(data),
        "File": name,
    });
    let mut b = serde_json::to_vec(&v).unwrap_or_default();
    b.push(b'\n');
    Bytes::from(b)
}

/// The file from its start offset (counted back from the end with `origin=end`), then, with
/// `follow`, what is appended to it, until the caller hangs up.
async fn serve_stream(spec: StreamSpec) -> Result<Response, ApiError> {
    let rel = spec.file.clone();
    let f = beneath(spec.root.clone(), move |b| open_readable(b, &rel)).await?;
    let mut f = tokio::fs::File::from_std(f);
    let len = f
        .metadata()
        .await
        .map_err(|e| ApiError::internal(format!("{}: {e}", spec.name)))?
        .len();
    let start = if spec.from_end {
        len.saturating_sub(spec.offset)
    } else {
        spec.offset.min(len)
    };
    f.seek(SeekFrom::Start(start))
        .await
        .map_err(|e| ApiError::internal(format!("{}: {e}", spec.name)))?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let mut pos = start;
        let mut buf = vec![0u8; FRAME_BYTES];
        while let Ok(n) = f.read(&mut buf).await {
            if n == 0 {
                if !spec.follow {
                    break;
                }
                tokio::select! {
                    _ = tx.closed() => break,
                    _ = tokio::time::sleep(FOLLOW_POLL) => continue,
                }
            }
            let chunk = if spec.plain {
                Bytes::copy_from_slice(&buf[..n])
            } else {
                frame(&buf[..n], pos + n as u64, &spec.name)
            };
            pos += n as u64;
            if tx.send(chunk).await.is_err() {
                break;
            }
        }
    });
    let body = Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    }));
    let content_type = if spec.plain {
        "text/plain; charset=utf-8"
    } else {
        "application/json"
    };
    Ok(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_inside_the_alloc_dir() {
        assert_eq!(relative("web/stdout.log").unwrap(), "web/stdout.log");
        assert_eq!(relative("/web/x").unwrap(), "web/x");
        assert!(relative("../a2/web/stdout.log").is_err());
        assert!(relative("web/../../etc/passwd").is_err());
        assert!(relative("").is_err());
    }

    #[test]
    fn a_frame_carries_base64_data_its_end_offset_and_file() {
        let f = frame(b"hi\n", 3, "web/stdout.log");
        let v: Value = serde_json::from_slice(&f).unwrap();
        assert_eq!(
            v,
            json!({"Offset": 3, "Data": "aGkK", "File": "web/stdout.log"})
        );
    }
}
