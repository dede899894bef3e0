//! The heartbeat shell on a real lone server (openraft, sled): expiry marks a node down with
//! its evaluations, a revoked table never fires, heartbeats keep a node up.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use teamster_storage::fsm::{Command, JobRegister, NodeRegister};
use teamster_storage::model::{Node, NodeStatus};

use super::LoneServer;
use crate::scheduler::harness::mock_system_job;
use crate::server::config::ServerConfig;
use crate::server::heartbeat::{HeartbeatError, Heartbeats};
use crate::server::leader::LeaderDuty;
use crate::server::raft::RaftNode;

fn config(failover_ms: u64) -> ServerConfig {
    ServerConfig {
        min_heartbeat_ttl: Duration::from_millis(200),
        max_heartbeats_per_second: 50.0,
        heartbeat_grace: Duration::from_millis(100),
        failover_heartbeat_ttl: Duration::from_millis(failover_ms),
        ..ServerConfig::default()
    }
}

/// A ready node and a system job, written straight through raft (so the agent's own
/// timers do not track the node).
async fn seed(node: &RaftNode, id: &str) {
    let mut n = Node {
        id: id.into(),
        name: id.into(),
        datacenter: "dc1".into(),
        status: NodeStatus::Ready,
        ..Node::default()
    };
    n.canonicalize();
    node.write_local(Command::NodeRegister(NodeRegister {
        node: n,
        evals: vec![],
    }))
    .await
    .unwrap();
    let job = mock_system_job(&format!("sys-{id}"));
    node.write_local(Command::JobRegister(JobRegister {
        job,
        eval: None,
        enforce_index: None,
        tracked_versions: 0,
    }))
    .await
    .unwrap();
}

fn status(node: &RaftNode, id: &str) -> NodeStatus {
    node.state().snapshot().node_by_id(id).unwrap().status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_node_is_marked_down_with_evals_and_a_revoked_table_never_fires() {
    let lone = LoneServer::start().await;
    let node = lone.server.node().clone();
    seed(&node, "n-expire").await;
    seed(&node, "n-revoked").await;
    let clock = crate::util::system_clock();

    // Revoked right after establishing: the failover timers must not fire.
    let revoked = Heartbeats::new(
        node.clone(),
        config(300),
        clock.clone(),
        StdRng::seed_from_u64(1),
    );
    revoked.establish().await.unwrap();
    assert_eq!(revoked.tracked(), 2);
    revoked.revoke().await;
    assert_eq!(
        revoked.reset(&"n-revoked".into()),
        Err(HeartbeatError::NotLeader)
    );

    // Established and left alone: n-expire times out; n-revoked keeps heartbeating.
    let live = Heartbeats::new(node.clone(), config(300), clock, StdRng::seed_from_u64(2));
    live.establish().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while status(&node, "n-expire") != NodeStatus::Down {
        assert!(std::time::Instant::now() < deadline, "never marked down");
        live.reset(&"n-revoked".into()).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status(&node, "n-revoked"), NodeStatus::Ready);
    let snap = node.state().snapshot();
    let evals: Vec<_> = snap
        .evals()
        .filter(|e| e.node_id == "n-expire")
        .map(|e| e.job_id.to_string())
        .collect();
    assert!(evals.contains(&"sys-n-expire".to_string()), "{evals:?}");
    live.revoke().await;
    lone.shutdown().await;
}
