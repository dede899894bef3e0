//! The state store.
