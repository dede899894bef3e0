//! The client role.
