//! The client role.

pub mod driver;
pub mod restart;
