//! What both ends of a connection share: the writer loop that turns a queue of encoded
//! frames into socket writes with one flush per drained queue, the byte accounting, and the
//! TLS handshakes of both ends (bounded in time; a failed one closes that connection only).

use bytes::Bytes;
use futures::SinkExt;
use tokio::io::AsyncWrite;
use tokio::sync::mpsc;
use tokio_util::codec::{BytesCodec, FramedWrite};
use tokio_util::sync::CancellationToken;

use crate::rpc::metric;

/// Write every frame queued on `rx` to `half` until the queue closes or `token` is
/// cancelled. Frames already queued when one arrives are `feed`-ed together and flushed once,
/// so a burst of small calls costs one write syscall. Returns why it stopped.
pub(crate) async fn write_loop<W: AsyncWrite + Unpin>(
    half: W,
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

/// The handshake of an accepted connection on a TLS port, within `timeout` (the agent's
/// `limits.rpc_handshake_timeout`): the stream and the role the
/// peer's certificate names. Plain TCP, garbage, an oversized or a foreign-CA handshake all
/// fail here with the reason, for the log.
pub(crate) async fn accept_tls(
    tls: &crate::util::tls::AgentTls,
    stream: tokio::net::TcpStream,
    timeout: std::time::Duration,
) -> Result<
    (
        tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
        Option<crate::util::tls::PeerRole>,
    ),
    String,
> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.configs().rpc_server.clone());
    let stream = match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(format!("tls handshake failed: {e}")),
        Err(_) => return Err("tls handshake timed out".into()),
    };
    let role = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|certs| certs.first())
        .and_then(|cert| tls.role_of(cert));
    Ok((stream, role))
}
