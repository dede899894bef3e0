//! A task's logs through the file API, as Nomad's: `GET /v1/client/fs/logs/:alloc_id?task=&
//! type=stdout|stderr&offset=&origin=start|end&follow=&plain=`, read across the rotated files
//! `alloc/logs/<task>.<type>.<n>` oldest first as one stream.
//!
//! - `origin=start` counts `offset` from the start of the oldest file kept, `origin=end` back
//!   from the end of the newest (across files).
//! - Frames name the file they come from (`alloc/logs/web.stdout.3`) and the offset in it
//!   after their data; `plain=true` sends the bytes alone.
//! - With `follow=true` the stream moves to the next file once the collector starts it, and
//!   keeps sending what the task writes until the caller hangs up.
//! - Nomad's answers: no task 400 `must provide task name`, a bad type 400, a task the
//!   allocation does not have 400 `unknown task name`, one that never started 404, no log
//!   file 404.

use std::io::SeekFrom;
use std::path::PathBuf;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use super::client_fs::{
    beneath, flag, forward, frame, fs_error, locate, number, open_readable, origin_is_end, param,
    Params, Place, FOLLOW_POLL, FRAME_BYTES,
};
use super::error::ApiError;
use crate::client::allocdir::{LOGS_DIR, SHARED_DIR};
use crate::client::logmon::rotator;

/// A log file: its index and size.
type LogFile = (u64, u64);

/// The files of stream `base` in the allocation at `root`, oldest first.
async fn list(root: PathBuf, base: String) -> Result<Vec<LogFile>, ApiError> {
    beneath(root, move |b| {
        let entries = b
            .read_dir(&format!("{SHARED_DIR}/{LOGS_DIR}"))
            .map_err(fs_error)?;
        let mut files: Vec<LogFile> = entries
            .iter()
            .filter(|(_, meta)| meta.is_file())
            .filter_map(|(name, meta)| rotator::index_of(&base, name).map(|i| (i, meta.len())))
            .collect();
        files.sort();
        Ok(files)
    })
    .await
}

/// Where a read of `files` starts: `offset` from the start of the oldest, or back from the
/// end of the newest.
fn start_at(files: &[LogFile], offset: u64, from_end: bool) -> (u64, u64) {
    let Some(&(first, _)) = files.first() else {
        return (0, 0);
    };
    if from_end {
        let mut left = offset;
        for &(index, size) in files.iter().rev() {
            if left <= size {
                return (index, size - left);
            }
            left -= size;
        }
        (first, 0)
    } else {
        let mut left = offset;
        for &(index, size) in files {
            if left <= size {
                return (index, left);
            }
            left -= size;
        }
        let &(last, size) = files.last().unwrap_or(&(first, 0));
        (last, size)
    }
}

/// The `logs` route.
pub(super) async fn logs(
    (State(ctx), Path(alloc_id), Query(q), headers, uri): Params,
) -> Result<Response, ApiError> {
    let root = match locate(&ctx, &alloc_id, &headers).await? {
        Place::Local(root) => root,
        Place::Remote { addr, alloc_id } => return forward(&addr, "logs", &alloc_id, &uri).await,
    };
    let task = param(&q, "task").to_string();
    if task.is_empty() {
        return Err(ApiError::bad_request("must provide task name"));
    }
    let kind = param(&q, "type");
    if kind != "stdout" && kind != "stderr" {
        return Err(ApiError::bad_request(
            "must provide log type (stdout/stderr)",
        ));
    }
    let offset = number(&q, "offset")?;
    let from_end = origin_is_end(&q)?;
    let follow = flag(&q, "follow")?;
    let plain = flag(&q, "plain")?;
    if let Some(tasks) = ctx.client().and_then(|c| c.alloc_tasks(&alloc_id)) {
        match tasks.iter().find(|(name, _)| *name == task) {
            None => return Err(ApiError::bad_request(format!("unknown task name {task:?}"))),
            Some((_, false)) => {
                return Err(ApiError::not_found(format!(
                    "task {task:?} not started yet. No logs available"
                )))
            }
            Some(_) => {}
        }
    }
    let base = rotator::base_name(&task, kind);
    let files = list(root.clone(), base.clone()).await?;
    if files.is_empty() {
        return Err(ApiError::not_found(format!(
            "log entry for task {task:?} and log type {kind:?} not found"
        )));
    }
    let (index, pos) = start_at(&files, offset, from_end);
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    tokio::spawn(pump(
        Cursor {
            root,
            base,
            index,
            pos,
        },
        follow,
        plain,
        tx,
    ));
    let body = Body::from_stream(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    }));
    let content_type = if plain {
        "text/plain; charset=utf-8"
    } else {
        "application/json"
    };
    Ok(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

/// Where the stream is.
struct Cursor {
    root: PathBuf,
    base: String,
    index: u64,
    pos: u64,
}

impl Cursor {
    fn rel(&self) -> String {
        format!("{SHARED_DIR}/{LOGS_DIR}/{}.{}", self.base, self.index)
    }

    /// The next file after the current one, if the collector has started one.
    async fn next(&self) -> Option<u64> {
        let files = list(self.root.clone(), self.base.clone()).await.ok()?;
        files.iter().map(|(i, _)| *i).find(|&i| i > self.index)
    }
}

/// Sends the stream from `cursor` until its end (or, with `follow`, until the caller hangs
/// up).
async fn pump(mut cursor: Cursor, follow: bool, plain: bool, tx: tokio::sync::mpsc::Sender<Bytes>) {
    let mut buf = vec![0u8; FRAME_BYTES];
    'files: loop {
        let rel = cursor.rel();
        let opened = beneath(cursor.root.clone(), move |b| open_readable(b, &rel)).await;
        let mut file = match opened {
            Ok(f) => tokio::fs::File::from_std(f),
            // Removed by the rotation before it was read: go on with the next one.
            Err(_) => match cursor.next().await {
                Some(next) => {
                    cursor.index = next;
                    cursor.pos = 0;
                    continue;
                }
                None => return,
            },
        };
        if file.seek(SeekFrom::Start(cursor.pos)).await.is_err() {
            return;
        }
        // The next file, once the collector started one: this one is read to its end once
        // more before the stream moves on (what was written just before the switch).
        let mut next = None;
        loop {
            let n = match file.read(&mut buf).await {
                Ok(n) => n,
                Err(_) => return,
            };
            if n > 0 {
                cursor.pos += n as u64;
                let chunk = if plain {
                    Bytes::copy_from_slice(&buf[..n])
                } else {
                    frame(&buf[..n], cursor.pos, &cursor.rel())
                };
                if tx.send(chunk).await.is_err() {
                    return;
                }
                continue;
            }
            if let Some(index) = next {
                cursor.index = index;
                cursor.pos = 0;
                continue 'files;
            }
            next = cursor.next().await;
            if next.is_some() {
                continue;
            }
            if !follow {
                return;
            }
            tokio::select! {
                _ = tx.closed() => return,
                _ = tokio::time::sleep(FOLLOW_POLL) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_start_across_the_rotated_files() {
        let files = [(3, 10), (4, 10), (5, 4)];
        assert_eq!(start_at(&files, 0, false), (3, 0));
        assert_eq!(start_at(&files, 12, false), (4, 2));
        assert_eq!(start_at(&files, 100, false), (5, 4));
        assert_eq!(start_at(&files, 0, true), (5, 4));
        assert_eq!(start_at(&files, 6, true), (4, 8));
        assert_eq!(start_at(&files, 100, true), (3, 0));
        assert_eq!(start_at(&[], 5, true), (0, 0));
    }
}
