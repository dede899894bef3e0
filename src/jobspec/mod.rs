//! Job specifications as users write them, before they become a [`Job`] of the model.
//!
//! - [`hcl`]: HCL2 job files (Nomad's jobspec2) → Nomad's JSON job, with variables, locals
//!   and [`funcs`], errors that name the file, line, column and block path.
//! - [`budget`]: the steps, bytes and wall time one evaluation may spend.
//! - `schema`: the blocks and arguments of a job file, for the parser.
//! - [`unsupported`]: the Nomad job fields teamster does not act on, found in a job's JSON so
//!   that the API refuses the job with a 400 that names them instead of dropping them
//!   silently (the model ignores keys it has no field for, as Nomad ignores keys it does not
//!   know).
//!
//! May import: `teamster_storage::model`, `util`.
//!
//! [`Job`]: teamster_storage::model::Job

pub mod budget;
pub mod funcs;
pub mod hcl;
mod schema;
pub mod templates;
pub mod unsupported;

use serde_json::Value;

pub use unsupported::{job_warnings, unsupported_fields, UnsupportedField};

/// The largest job file the CLI reads (the API's request body limit is the same 4 MiB).
pub const MAX_JOB_FILE_BYTES: u64 = 4 << 20;

/// Copies into `base` every member of `extra` it lacks, recursively through objects and
/// through arrays element by element: a canonicalized job (`base`) keeps the fields the
/// model has no place for.
pub fn overlay_missing(base: &mut Value, extra: &Value) {
    match (base, extra) {
        (Value::Object(b), Value::Object(e)) => {
            for (k, v) in e {
                match b.get_mut(k) {
                    Some(existing) => overlay_missing(existing, v),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (Value::Array(b), Value::Array(e)) => {
            for (bv, ev) in b.iter_mut().zip(e) {
                overlay_missing(bv, ev);
            }
        }
        _ => {}
    }
}
