//! The wire format of the RPC port.
//!
//! A frame is a 4-byte big-endian length prefix (the layout of tokio-util's default
//! `LengthDelimitedCodec`) followed by that many bytes: a fixed 26-byte header, then a bincode
//! body.
//!
//! ```text
//!  0      4        5      6            14          22          30
//!  ├ len ─┼ version┼ kind ┼ request id ┼ sender    ┼ target    ┼ body (bincode, standard()) …
//!  u32 BE   u8       u8     u64 BE       u64 BE      u64 BE
//! ```
//!
//! - `len` counts header + body and is checked against the configured maximum *before* the
//!   frame is buffered, so a forged prefix costs nothing.
//! - `version` is [`PROTOCOL_VERSION`]; any other value is refused.
//! - `kind` is 0 for a request, 1 for a response.
//! - `request id` is chosen by the caller and echoed by the response; it is unique per
//!   connection and lets many calls share one connection and complete out of order.
//! - `sender` is the raft id of whoever sent the frame (0 for a client agent, which is no
//!   raft member); `target` is the raft id the frame is for. A server refuses a request for
//!   another id; 0 means "whichever server this is" and is allowed only for requests that do
//!   not [require a target](crate::rpc::RpcRequest::requires_target) (raft traffic must name
//!   its target: a wrong address must never make a leader replicate to the wrong server).
//!   A response's target is the request's sender.
//!
//! The header is fixed-width and not bincode so it can be checked without decoding the body.
//! The body is bincode 2 with `standard()` (little-endian varints), decoded with a byte budget
//! of [`DECODE_LIMIT`] and required to consume the body exactly.

use bincode::config::{Configuration, Limit, LittleEndian, Varint};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use serde::de::DeserializeOwned;
use serde::Serialize;
use teamster_storage::raft_types::ServerId;
use tokio_util::codec::Decoder;

use crate::rpc::MAX_FRAME_LEN_CEILING;

/// The protocol version this build speaks; bumped on any incompatible change of the header
/// or of the meaning of existing message variants.
pub const PROTOCOL_VERSION: u8 = 14;

/// Bytes of the length prefix in front of every frame.
pub const LENGTH_PREFIX_LEN: usize = 4;

/// Bytes of the fixed header at the start of every frame.
pub const HEADER_LEN: usize = 26;

/// bincode's byte budget for decoding one body. It bounds what a body may make us allocate
/// (bincode charges every container its in-memory size up front), not the body's wire size,
/// which the frame limit bounds; 4× the largest frame leaves room for legitimate expansion.
pub const DECODE_LIMIT: usize = 4 * MAX_FRAME_LEN_CEILING;

/// The bincode configuration of every body: `standard()` with the decode budget.
pub type WireConfig = Configuration<LittleEndian, Varint, Limit<DECODE_LIMIT>>;

/// The bincode configuration of every body (see [`WireConfig`]).
pub const fn wire_config() -> WireConfig {
    bincode::config::standard().with_limit::<DECODE_LIMIT>()
}

/// Whether a frame asks or answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// A call; the body is an [`RpcRequest`](crate::rpc::RpcRequest).
    Request,
    /// An answer; the body is a `Result<RpcResponse, RpcError>`.
    Response,
}

impl FrameKind {
    fn to_byte(self) -> u8 {
        match self {
            FrameKind::Request => 0,
            FrameKind::Response => 1,
        }
    }

    fn from_byte(b: u8) -> Result<Self, FrameError> {
        match b {
            0 => Ok(FrameKind::Request),
            1 => Ok(FrameKind::Response),
            got => Err(FrameError::BadKind { got }),
        }
    }
}

/// The fixed header of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Request or response.
    pub kind: FrameKind,
    /// Chosen by the caller, echoed by the response.
    pub request_id: u64,
    /// The sender's raft id (0: a client agent).
    pub sender: ServerId,
    /// The raft id the frame is for (0 on a request: whichever server this is).
    pub target: ServerId,
}

impl Header {
    /// The header of a call from `sender` to `target`.
    pub fn request(request_id: u64, sender: ServerId, target: ServerId) -> Self {
        Self {
            kind: FrameKind::Request,
            request_id,
            sender,
            target,
        }
    }

    /// The header of the answer to `request`, sent by `me`.
    pub fn response_to(request: &Header, me: ServerId) -> Self {
        Self {
            kind: FrameKind::Response,
            request_id: request.request_id,
            sender: me,
            target: request.sender,
        }
    }

    fn put(&self, dst: &mut BytesMut) {
        dst.put_u8(PROTOCOL_VERSION);
        dst.put_u8(self.kind.to_byte());
        dst.put_u64(self.request_id);
        dst.put_u64(self.sender);
        dst.put_u64(self.target);
    }

    /// Parse the header at the start of `src` (at least [`HEADER_LEN`] bytes).
    fn parse(mut src: &[u8]) -> Result<Self, FrameError> {
        if src.len() < HEADER_LEN {
            return Err(FrameError::Truncated { len: src.len() });
        }
        let version = src.get_u8();
        if version != PROTOCOL_VERSION {
            return Err(FrameError::BadVersion { got: version });
        }
        let kind = FrameKind::from_byte(src.get_u8())?;
        Ok(Self {
            kind,
            request_id: src.get_u64(),
            sender: src.get_u64(),
            target: src.get_u64(),
        })
    }
}

/// One decoded frame: its header and its still-encoded body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The checked header.
    pub header: Header,
    /// The bincode body; decode it with [`decode_body`].
    pub body: Bytes,
}

/// Why a frame was refused. Any of these closes the connection it arrived on.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The header's version byte is not [`PROTOCOL_VERSION`].
    #[error("unsupported protocol version {got} (this build speaks {PROTOCOL_VERSION})")]
    BadVersion {
        /// The version byte received.
        got: u8,
    },
    /// The header's kind byte is neither request nor response.
    #[error("unknown frame kind {got}")]
    BadKind {
        /// The kind byte received.
        got: u8,
    },
    /// The frame is shorter than its header.
    #[error("frame of {len} bytes is shorter than the {HEADER_LEN}-byte header")]
    Truncated {
        /// The frame's length.
        len: usize,
    },
    /// The length prefix (or an outgoing message) exceeds the frame limit.
    #[error("frame of {len} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// The frame's length (header + body).
        len: usize,
        /// The limit in force.
        max: usize,
    },
    /// A request for another server id.
    #[error("frame for server {target} arrived at server {me}")]
    WrongTarget {
        /// The target named by the frame.
        target: ServerId,
        /// This server's id.
        me: ServerId,
    },
    /// A raft request addressed to "any server" (target 0).
    #[error("{kind} must name its target server")]
    TargetRequired {
        /// The request's kind.
        kind: &'static str,
    },
    /// A frame of the wrong kind for this side (a response sent to a server, or a request
    /// or a foreign response on a client connection).
    #[error("unexpected frame: {0}")]
    Unexpected(String),
    /// The body is not a valid bincode encoding of the expected message, or exceeds the
    /// decode budget.
    #[error("body does not decode: {0}")]
    Decode(#[from] bincode::error::DecodeError),
    /// The body decoded but left bytes unread.
    #[error("{0} trailing bytes after the body")]
    TrailingBytes(usize),
    /// A message could not be encoded.
    #[error("message does not encode: {0}")]
    Encode(bincode::error::EncodeError),
    /// The connection failed while reading.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl FrameError {
    /// A short stable name for metrics labels.
    pub fn reason(&self) -> &'static str {
        match self {
            FrameError::BadVersion { .. } => "bad_version",
            FrameError::BadKind { .. } => "bad_kind",
            FrameError::Truncated { .. } => "truncated",
            FrameError::TooLarge { .. } => "too_large",
            FrameError::WrongTarget { .. } => "wrong_target",
            FrameError::TargetRequired { .. } => "target_required",
            FrameError::Unexpected(_) => "unexpected",
            FrameError::Decode(_) => "decode",
            FrameError::TrailingBytes(_) => "trailing_bytes",
            FrameError::Encode(_) => "encode",
            FrameError::Io(_) => "io",
        }
    }
}

/// Encode `body` behind `header` into one complete frame, length prefix included.
///
/// Fails with [`FrameError::TooLarge`] when header + body exceed `max_frame_len`; the
/// encoder stops buffering at the limit, so an oversized message never costs more than
/// `max_frame_len` bytes of memory.
pub fn encode_frame<T: Serialize + ?Sized>(
    header: &Header,
    body: &T,
    max_frame_len: usize,
) -> Result<Bytes, FrameError> {
    let mut w = CappedWriter {
        buf: BytesMut::with_capacity(LENGTH_PREFIX_LEN + HEADER_LEN + 64),
        cap: LENGTH_PREFIX_LEN + max_frame_len,
        len: 0,
    };
    w.buf.put_u32(0);
    header.put(&mut w.buf);
    w.len = w.buf.len();
    bincode::serde::encode_into_writer(body, &mut w, wire_config()).map_err(FrameError::Encode)?;
    let frame_len = w.len - LENGTH_PREFIX_LEN;
    if w.len > w.cap {
        return Err(FrameError::TooLarge {
            len: frame_len,
            max: max_frame_len,
        });
    }
    let prefix = u32::try_from(frame_len).map_err(|_| FrameError::TooLarge {
        len: frame_len,
        max: max_frame_len,
    })?;
    w.buf[..LENGTH_PREFIX_LEN].copy_from_slice(&prefix.to_be_bytes());
    Ok(w.buf.freeze())
}

/// Decode a frame body as `T`, within the decode budget, consuming it exactly.
pub fn decode_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, FrameError> {
    let (value, used) = bincode::serde::decode_from_slice(body, wire_config())?;
    if used != body.len() {
        return Err(FrameError::TrailingBytes(body.len() - used));
    }
    Ok(value)
}

/// A bincode writer that stops storing bytes past its cap but keeps counting them, so the
/// caller learns the full size of an oversized message without holding it.
struct CappedWriter {
    buf: BytesMut,
    cap: usize,
    len: usize,
}

impl bincode::enc::write::Writer for CappedWriter {
    fn write(&mut self, bytes: &[u8]) -> Result<(), bincode::error::EncodeError> {
        self.len = self.len.saturating_add(bytes.len());
        if self.len <= self.cap {
            self.buf.extend_from_slice(bytes);
        } else if !self.buf.is_empty() {
            // Over the limit: the frame will be refused, drop what we held.
            self.buf = BytesMut::new();
        }
        Ok(())
    }
}

/// The decoding half of the wire format, for `FramedRead`: yields [`Frame`]s whose length
/// and header (version, kind) are already checked.
///
/// The buffer grows with the bytes that arrive, never ahead of them to the length a prefix
/// declares, and the codec remembers when the frame it holds in part began
/// ([`FrameCodec::partial_since`]) so that the reader can close a connection whose frame
/// never completes.
#[derive(Debug, Clone)]
pub struct FrameCodec {
    max_frame_len: usize,
    partial_since: Option<tokio::time::Instant>,
}

/// The most buffer reserved ahead of the bytes received for a frame in progress.
const RESERVE_AHEAD: usize = 64 << 10;

impl FrameCodec {
    /// A decoder refusing frames longer than `max_frame_len` (header + body).
    pub fn new(max_frame_len: usize) -> Self {
        Self {
            max_frame_len,
            partial_since: None,
        }
    }

    /// When the bytes of a frame not yet complete began to arrive, if some have.
    pub fn partial_since(&self) -> Option<tokio::time::Instant> {
        self.partial_since
    }
}

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        let frame = self.decode_frame(src);
        self.partial_since = match (&frame, src.is_empty()) {
            (Ok(None), false) => Some(self.partial_since.unwrap_or_else(tokio::time::Instant::now)),
            _ if src.is_empty() => None,
            // A frame came out and the next one has begun: its clock starts now.
            _ => Some(tokio::time::Instant::now()),
        };
        frame
    }
}

impl FrameCodec {
    fn decode_frame(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        if src.len() < LENGTH_PREFIX_LEN {
            return Ok(None);
        }
        let mut prefix = [0u8; LENGTH_PREFIX_LEN];
        prefix.copy_from_slice(&src[..LENGTH_PREFIX_LEN]);
        let len = u32::from_be_bytes(prefix) as usize;
        if len > self.max_frame_len {
            return Err(FrameError::TooLarge {
                len,
                max: self.max_frame_len,
            });
        }
        if len < HEADER_LEN {
            return Err(FrameError::Truncated { len });
        }
        if src.len() < LENGTH_PREFIX_LEN + len {
            // Refuse a bad version or kind byte as soon as it is here, before waiting for
            // the rest of the header and a possibly large body.
            if let Some(&version) = src.get(LENGTH_PREFIX_LEN) {
                if version != PROTOCOL_VERSION {
                    return Err(FrameError::BadVersion { got: version });
                }
            }
            if let Some(&kind) = src.get(LENGTH_PREFIX_LEN + 1) {
                FrameKind::from_byte(kind)?;
            }
            // Room for what may come next, not for what the prefix claims will.
            src.reserve((LENGTH_PREFIX_LEN + len - src.len()).min(RESERVE_AHEAD));
            return Ok(None);
        }
        src.advance(LENGTH_PREFIX_LEN);
        let mut frame = src.split_to(len).freeze();
        let header = Header::parse(&frame[..HEADER_LEN])?;
        frame.advance(HEADER_LEN);
        Ok(Some(Frame {
            header,
            body: frame,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 4096;

    fn decode_all(bytes: &[u8]) -> Result<Option<Frame>, FrameError> {
        let mut buf = BytesMut::from(bytes);
        FrameCodec::new(MAX).decode(&mut buf)
    }

    /// Issue 52: a prefix declaring a large frame must not reserve its length up front.
    #[test]
    fn a_declared_length_reserves_nothing_ahead_of_the_bytes_received() {
        let max = 64 << 20;
        let mut codec = FrameCodec::new(max);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&((max - 8) as u32).to_be_bytes());
        buf.extend_from_slice(&[PROTOCOL_VERSION, 0]);
        buf.extend_from_slice(&[0u8; 100]);
        assert!(codec.decode(&mut buf).unwrap().is_none());
        assert!(buf.capacity() < 1 << 20, "reserved {}", buf.capacity());
        assert!(codec.partial_since().is_some());
        let header = Header::request(7, 3, 9);
        let whole = encode_frame(&header, &1u8, MAX).unwrap();
        let mut buf = BytesMut::from(&whole[..]);
        let mut codec = FrameCodec::new(MAX);
        assert!(codec.decode(&mut buf).unwrap().is_some());
        assert!(codec.partial_since().is_none());
    }

    #[test]
    fn round_trip_keeps_header_and_body() {
        let header = Header::request(7, 3, 9);
        let body = (42u64, String::from("hello"));
        let bytes = encode_frame(&header, &body, MAX).expect("encode");
        assert_eq!(
            u32::from_be_bytes(bytes[..4].try_into().expect("4 bytes")) as usize,
            bytes.len() - LENGTH_PREFIX_LEN
        );
        let frame = decode_all(&bytes).expect("decode").expect("complete");
        assert_eq!(frame.header, header);
        let decoded: (u64, String) = decode_body(&frame.body).expect("body");
        assert_eq!(decoded, body);
    }

    #[test]
    fn partial_input_waits_for_more_and_then_decodes() {
        let bytes = encode_frame(&Header::request(1, 1, 2), &vec![7u32; 100], MAX).expect("enc");
        let mut codec = FrameCodec::new(MAX);
        let mut buf = BytesMut::new();
        for (i, b) in bytes.iter().enumerate() {
            buf.put_u8(*b);
            let got = codec.decode(&mut buf).expect("no error on a prefix");
            if i + 1 < bytes.len() {
                assert!(
                    got.is_none(),
                    "frame yielded after {} of {} bytes",
                    i + 1,
                    bytes.len()
                );
            } else {
                let frame = got.expect("complete frame");
                assert_eq!(frame.header.request_id, 1);
                assert_eq!(
                    decode_body::<Vec<u32>>(&frame.body).expect("body"),
                    vec![7u32; 100]
                );
            }
        }
        assert!(buf.is_empty());
    }

    #[test]
    fn two_frames_in_one_buffer_decode_in_order() {
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&encode_frame(&Header::request(1, 0, 0), &1u8, MAX).expect("e"));
        buf.extend_from_slice(&encode_frame(&Header::request(2, 0, 0), &2u8, MAX).expect("e"));
        let mut codec = FrameCodec::new(MAX);
        let a = codec.decode(&mut buf).expect("ok").expect("first");
        let b = codec.decode(&mut buf).expect("ok").expect("second");
        assert_eq!((a.header.request_id, b.header.request_id), (1, 2));
        assert!(codec.decode(&mut buf).expect("ok").is_none());
    }

    #[test]
    fn oversized_length_prefix_is_refused_before_buffering() {
        let mut bytes = vec![0xff, 0xff, 0xff, 0xf0];
        bytes.extend_from_slice(&[0u8; 8]);
        match decode_all(&bytes) {
            Err(FrameError::TooLarge { len, max }) => {
                assert_eq!(len, 0xffff_fff0);
                assert_eq!(max, MAX);
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
    }

    #[test]
    fn frame_shorter_than_header_is_truncated() {
        let mut bytes = 10u32.to_be_bytes().to_vec();
        bytes.extend_from_slice(&[PROTOCOL_VERSION; 10]);
        assert!(matches!(
            decode_all(&bytes),
            Err(FrameError::Truncated { len: 10 })
        ));
    }

    #[test]
    fn wrong_version_is_refused_as_soon_as_its_byte_arrives() {
        let mut bytes = encode_frame(&Header::request(1, 1, 1), &vec![0u8; 1000], MAX)
            .expect("e")
            .to_vec();
        bytes[LENGTH_PREFIX_LEN] = PROTOCOL_VERSION + 1;
        // Only the version byte is here; the rest of the header and the body are not.
        let partial = &bytes[..LENGTH_PREFIX_LEN + 1];
        assert!(matches!(
            decode_all(partial),
            Err(FrameError::BadVersion { got }) if got == PROTOCOL_VERSION + 1
        ));
        // A whole frame with the wrong version is refused the same way.
        assert!(matches!(
            decode_all(&bytes),
            Err(FrameError::BadVersion { got }) if got == PROTOCOL_VERSION + 1
        ));
    }

    #[test]
    fn unknown_kind_is_refused() {
        let mut bytes = encode_frame(&Header::request(1, 1, 1), &(), MAX)
            .expect("e")
            .to_vec();
        bytes[LENGTH_PREFIX_LEN + 1] = 9;
        assert!(matches!(
            decode_all(&bytes),
            Err(FrameError::BadKind { got: 9 })
        ));
    }

    #[test]
    fn encoding_over_the_limit_is_too_large_with_the_full_length() {
        let body = vec![1u8; 10_000];
        match encode_frame(&Header::request(1, 1, 1), &body, MAX) {
            Err(FrameError::TooLarge { len, max }) => {
                // 10_000 one-byte varints + a 3-byte length + the header.
                assert_eq!(len, HEADER_LEN + 3 + 10_000);
                assert_eq!(max, MAX);
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        // Exactly at the limit is fine.
        let fits = vec![1u8; MAX - HEADER_LEN - 3];
        let bytes = encode_frame(&Header::request(1, 1, 1), &fits, MAX).expect("fits");
        assert_eq!(bytes.len(), LENGTH_PREFIX_LEN + MAX);
        assert!(decode_all(&bytes).expect("decodes").is_some());
    }

    #[test]
    fn garbage_body_is_a_decode_error_not_a_panic() {
        // A Vec<u64> claiming 2^60 elements: refused by the budget, nothing allocated.
        let mut body = BytesMut::new();
        body.put_u8(253); // varint marker: a u64 follows
        body.put_u64_le(1 << 60);
        assert!(matches!(
            decode_body::<Vec<u64>>(&body),
            Err(FrameError::Decode(_))
        ));
        // A String that is not UTF-8.
        assert!(matches!(
            decode_body::<String>(&[2, 0xff, 0xfe]),
            Err(FrameError::Decode(_))
        ));
        // Trailing bytes are refused.
        assert!(matches!(
            decode_body::<u8>(&[1, 2]),
            Err(FrameError::TrailingBytes(1))
        ));
    }
}
