//! Job specifications as users write them, before they become a [`Job`] of the model.
//!
//! - [`unsupported`]: the Nomad job fields teamster does not act on, found in a job's JSON so
//!   that the API refuses the job with a 400 that names them instead of dropping them
//!   silently (the model ignores keys it has no field for, as Nomad ignores keys it does not
//!   know).
//!
//! May import: `teamster_storage::model`, `util`.
//!
//! [`Job`]: teamster_storage::model::Job

pub mod unsupported;

pub use unsupported::{unsupported_fields, UnsupportedField};
