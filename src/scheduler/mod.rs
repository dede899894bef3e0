//! The scheduler role.
