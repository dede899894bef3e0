//! The RPC port's decoders on arbitrary bytes: the frame codec (length prefix, header,
//! limits) over a byte stream, and every frame body decoded as a request (what a server
//! reads) and as a reply (what a caller reads). Any input must end in a frame or an error,
//! never a panic, a hang or an allocation beyond the decode budget.
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
    // A stream of frames.
    let mut codec = FrameCodec::new(MAX_FRAME);
    let mut buf = BytesMut::from(rest);
    loop {
        match codec.decode(&mut buf) {
            Ok(Some(frame)) => {
                let _ = decode_body::<RpcRequest>(&frame.body);
                let _ = decode_body::<Result<RpcResponse, RpcError>>(&frame.body);
            }
            Ok(None) | Err(_) => break,
        }
    }
});
