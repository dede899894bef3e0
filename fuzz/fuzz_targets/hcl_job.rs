//! An HCL2 job file as `job run` and `/v1/jobs/parse` read it: variables, locals,
//! functions, `dynamic` blocks and the job schema, then the JSON it yields decoded into the
//! model. Any input must end in a job or an error naming the problem, never a panic or a
//! hang.
#![no_main]

use libfuzzer_sys::fuzz_target;
use teamster::jobspec::hcl::{parse_job, VarInputs};
use teamster_storage::model::Job;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // File functions stay off, as for `/v1/jobs/parse`.
    let Ok(value) = parse_job("fuzz.nomad.hcl", text, &VarInputs::default()) else {
        return;
    };
    if let Ok(mut job) = serde_json::from_value::<Job>(value) {
        job.canonicalize();
        let _ = job.validate();
    }
});
