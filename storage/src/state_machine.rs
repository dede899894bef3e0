//! The openraft state machine over the state store.
