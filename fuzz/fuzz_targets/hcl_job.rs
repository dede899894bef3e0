//! An HCL2 job file as `job run` and `/v1/jobs/parse` read it: variables, locals,
//! functions, `dynamic` blocks and the job schema, then the JSON it yields decoded into the
//! model, under an evaluation budget smaller than the servers' (so that the budget's own
//! checks are reached often). Any input must end in a job or an error naming the problem,
//! never a panic, a hang or an allocation past the budget.
#![no_main]

use libfuzzer_sys::fuzz_target;
use teamster::jobspec::budget::EvalBudget;
use teamster::jobspec::hcl::{parse_job, VarInputs};
use teamster_storage::model::Job;

fuzz_target!(|data: &[u8]| {
    // libFuzzer's panic hook aborts before unwinding; `parse_job` catches the HCL library's
    // own panics (and answers an error), so give it back the default hook. A panic that
    // escapes `parse_job` still aborts: the harness catches it and calls abort.
    static DEFAULT_HOOK: std::sync::Once = std::sync::Once::new();
    DEFAULT_HOOK.call_once(|| drop(std::panic::take_hook()));
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // File functions stay off, as for `/v1/jobs/parse`.
    let inputs = VarInputs {
        budget: EvalBudget {
            max_steps: 100_000,
            max_bytes: 8 << 20,
            max_duration: std::time::Duration::from_secs(2),
        },
        ..VarInputs::default()
    };
    let Ok(value) = parse_job("fuzz.nomad.hcl", text, &inputs) else {
        return;
    };
    if let Ok(mut job) = serde_json::from_value::<Job>(value) {
        job.canonicalize();
        let _ = job.validate();
    }
});
