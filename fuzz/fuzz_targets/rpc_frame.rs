//! The RPC port's decoders on arbitrary bytes: the frame codec (length prefix, header,
//! limits) over a byte stream, and every frame body decoded as a request (what a server
//! reads) and as a reply (what a caller reads). The stream arrives in pieces cut where the
//! input says, as TCP delivers it, so frames are decoded from partial buffers: the buffer
//! never grows far past the bytes received (whatever length a prefix declares), and the
//! codec knows a frame is in progress exactly when bytes wait in it. Any input must end in a
//! frame or an error, never a panic, a hang or an allocation beyond the decode budget.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use teamster::rpc::frame::{decode_body, FrameCodec};
use teamster::rpc::message::{RpcRequest, RpcResponse};
use teamster::rpc::RpcError;
use tokio_util::codec::Decoder;

/// The frame limit the fuzzer runs with: small, so length checks are reached often.
const MAX_FRAME: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode % 2 == 0 {
        // A body alone: the two message types a peer can make us decode.
        let _ = decode_body::<RpcRequest>(rest);
        let _ = decode_body::<Result<RpcResponse, RpcError>>(rest);
        return;
    }
    // A stream of frames, delivered in pieces: the first byte of `rest` sets the piece
    // size (1..=256 bytes).
    let Some((&piece, stream)) = rest.split_first() else {
        return;
    };
    let piece = usize::from(piece) + 1;
    let mut codec = FrameCodec::new(MAX_FRAME);
    let mut buf = BytesMut::new();
    let mut received = 0usize;
    for chunk in stream.chunks(piece) {
        buf.extend_from_slice(chunk);
        received += chunk.len();
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(frame)) => {
                    let _ = decode_body::<RpcRequest>(&frame.body);
                    let _ = decode_body::<Result<RpcResponse, RpcError>>(&frame.body);
                }
                Ok(None) => {
                    assert_eq!(codec.partial_since().is_some(), !buf.is_empty());
                    assert!(
                        buf.capacity() <= 2 * received + (128 << 10),
                        "{} bytes reserved for {received} received",
                        buf.capacity()
                    );
                    break;
                }
                Err(_) => return,
            }
        }
    }
});
