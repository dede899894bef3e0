//! The rpc role.
