//! The server role.

pub mod blocked_evals;
pub mod eval_broker;
