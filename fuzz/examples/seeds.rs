//! Writes seed inputs for the fuzz targets into `corpus/<target>/`: the job files of
//! `deploy/jobs/` for `hcl_job` and `job_json`, and encoded frames and bodies of real
//! messages for `rpc_frame`. Run from `fuzz/`: `cargo run --example seeds`.

use std::path::Path;

use teamster::rpc::frame::{encode_frame, Header};
use teamster::rpc::message::{RpcRequest, RpcResponse};
use teamster::rpc::service::eval::EvalDequeueRequest;
use teamster::rpc::service::ServiceRequest;
use teamster_storage::fsm::Command;
use teamster_storage::model::ClusterMeta;
use teamster_storage::raft_types::{Entry, LogId, Vote};

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
        // Replication with a normal entry: its command travels as encoded bytes.
        RpcRequest::AppendEntries(openraft::raft::AppendEntriesRequest {
            vote: Vote::new_committed(3, 1),
            prev_log_id: Some(LogId::new(openraft::CommittedLeaderId::new(2, 1), 9)),
            entries: vec![
                Entry {
                    log_id: LogId::new(openraft::CommittedLeaderId::new(3, 1), 10),
                    payload: openraft::EntryPayload::Blank,
                },
                Entry {
                    log_id: LogId::new(openraft::CommittedLeaderId::new(3, 1), 11),
                    payload: openraft::EntryPayload::Normal(
                        Command::Batch(vec![Command::ClusterMeta(ClusterMeta {
                            cluster_id: "6b1f0e3c-3d1a-4c55-9a51-0a0a2f6c1d11".into(),
                            create_time: 1,
                        })])
                        .into(),
                    ),
                },
            ],
            leader_commit: Some(LogId::new(openraft::CommittedLeaderId::new(3, 1), 10)),
        }),
    ];
    for (i, req) in requests.iter().enumerate() {
        let frame = encode_frame(&Header::request(i as u64 + 1, 1, 2), req, 1 << 20)
            .expect("a small frame");
        // Mode byte 1: a frame stream (then the piece size less one: 7-byte pieces); 0: the
        // body alone.
        let mut stream = vec![1u8, 6];
        stream.extend_from_slice(&frame);
        std::fs::write(format!("corpus/rpc_frame/request-{i}"), &stream)?;
        let mut body = vec![0u8];
        body.extend_from_slice(&frame[4 + 26..]);
        std::fs::write(format!("corpus/rpc_frame/request-body-{i}"), &body)?;
    }
    let reply: Result<RpcResponse, teamster::rpc::RpcError> =
        Ok(RpcResponse::Ping { server_id: 3 });
    let frame = encode_frame(&Header::request(9, 2, 1), &reply, 1 << 20).expect("a small frame");
    let mut stream = vec![1u8, 6];
    stream.extend_from_slice(&frame);
    std::fs::write("corpus/rpc_frame/reply-0", &stream)?;
    Ok(())
}
