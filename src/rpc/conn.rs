//! What both ends of a connection share: the writer loop that turns a queue of encoded
//! frames into socket writes with one flush per drained queue, and the byte accounting.

use bytes::Bytes;
use futures::SinkExt;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::mpsc;
use tokio_util::codec::{BytesCodec, FramedWrite};
use tokio_util::sync::CancellationToken;

use crate::rpc::metric;

/// Write every frame queued on `rx` to `half` until the queue closes or `token` is
/// cancelled. Frames already queued when one arrives are `feed`-ed together and flushed once,
/// so a burst of small calls costs one write syscall. Returns why it stopped.
pub(crate) async fn write_loop(
    half: OwnedWriteHalf,
    mut rx: mpsc::Receiver<Bytes>,
    token: CancellationToken,
    side: &'static str,
) -> String {
    let mut sink = FramedWrite::new(half, BytesCodec::new());
    loop {
        let first = tokio::select! {
            biased;
            _ = token.cancelled() => return "closed locally".to_string(),
            next = rx.recv() => next,
        };
        let Some(first) = first else {
            return "write queue closed".to_string();
        };
        let batch = async {
            let mut bytes = first.len();
            sink.feed(first).await?;
            while let Ok(next) = rx.try_recv() {
                bytes += next.len();
                sink.feed(next).await?;
            }
            SinkExt::<Bytes>::flush(&mut sink).await?;
            Ok::<usize, std::io::Error>(bytes)
        };
        let written = tokio::select! {
            biased;
            _ = token.cancelled() => return "closed locally".to_string(),
            written = batch => written,
        };
        match written {
            Ok(bytes) => {
                metrics::counter!(metric::BYTES_SENT, "side" => side).increment(bytes as u64)
            }
            Err(e) => return format!("write failed: {e}"),
        }
    }
}

/// Count `len` received bytes (a whole frame, prefix included) for `side`.
pub(crate) fn count_received(side: &'static str, body_len: usize) {
    let frame = body_len + crate::rpc::frame::LENGTH_PREFIX_LEN + crate::rpc::frame::HEADER_LEN;
    metrics::counter!(metric::BYTES_RECEIVED, "side" => side).increment(frame as u64);
}
