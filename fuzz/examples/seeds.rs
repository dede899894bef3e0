//! Writes seed inputs for the fuzz targets into `corpus/<target>/`: the job files of
//! `deploy/jobs/` for `hcl_job` and `job_json`, and encoded frames and bodies of real
//! messages for `rpc_frame`. Run from `fuzz/`: `cargo run --example seeds`.

use std::path::Path;

use teamster::rpc::frame::{encode_frame, Header};
use teamster::rpc::message::{RpcRequest, RpcResponse};
use teamster::rpc::service::eval::EvalDequeueRequest;
use teamster::rpc::service::ServiceRequest;

fn main() -> std::io::Result<()> {
    let jobs = Path::new("../deploy/jobs");
    for dir in ["corpus/hcl_job", "corpus/job_json", "corpus/rpc_frame"] {
        std::fs::create_dir_all(dir)?;
    }
    for entry in std::fs::read_dir(jobs)? {
        let path = entry?.path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let target = if name.ends_with(".hcl") {
            "hcl_job"
        } else if name.ends_with(".json") {
            "job_json"
        } else {
            continue;
        };
        std::fs::copy(&path, format!("corpus/{target}/{name}"))?;
    }
    let requests = [
        RpcRequest::Ping,
        RpcRequest::ServerInfo,
        RpcRequest::ReadIndex,
        RpcRequest::TimeoutNow,
        RpcRequest::Service(ServiceRequest::EvalDequeue(EvalDequeueRequest {
            schedulers: vec!["service".into(), "batch".into()],
            timeout_ms: 500,
            scheduler_version: 1,
        })),
    ];
    for (i, req) in requests.iter().enumerate() {
        let frame = encode_frame(&Header::request(i as u64 + 1, 1, 2), req, 1 << 20)
            .expect("a small frame");
        // Mode byte 1: a frame stream; 0: the body alone.
        let mut stream = vec![1u8];
        stream.extend_from_slice(&frame);
        std::fs::write(format!("corpus/rpc_frame/request-{i}"), &stream)?;
        let mut body = vec![0u8];
        body.extend_from_slice(&frame[4 + 26..]);
        std::fs::write(format!("corpus/rpc_frame/request-body-{i}"), &body)?;
    }
    let reply: Result<RpcResponse, teamster::rpc::RpcError> = Ok(RpcResponse::Ping { server_id: 3 });
    let frame = encode_frame(&Header::request(9, 2, 1), &reply, 1 << 20).expect("a small frame");
    let mut stream = vec![1u8];
    stream.extend_from_slice(&frame);
    std::fs::write("corpus/rpc_frame/reply-0", &stream)?;
    Ok(())
}
