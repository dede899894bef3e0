//! The server role.
