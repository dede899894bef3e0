//! The server role.

pub mod plan_apply;
