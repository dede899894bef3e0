//! The http role.
