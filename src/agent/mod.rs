//! The agent role.
