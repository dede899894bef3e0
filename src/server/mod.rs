//! The server role: the raft node, leadership, and (on the leader) the eval broker, blocked
//! evals, plan queue and applier, heartbeat timers; on every server the scheduler workers.

pub mod formation;
pub mod write_batcher;
