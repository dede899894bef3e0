//! A job's API JSON as `PUT /v1/jobs` takes it: parsed, checked for fields teamster refuses
//! (`unsupported_fields`), decoded into the model, canonicalized and validated. Any input
//! must end in a job or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use teamster_storage::model::Job;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let _ = teamster::jobspec::unsupported_fields(&value);
    let job_value = value.get("Job").cloned().unwrap_or(value);
    let _ = teamster::jobspec::unsupported_fields(&job_value);
    if let Ok(mut job) = serde_json::from_value::<Job>(job_value) {
        job.canonicalize();
        let _ = job.validate();
    }
});
