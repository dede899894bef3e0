//! The example jobs in `deploy/jobs/` parse as Nomad JSON and pass validation, so the docs and
//! the tests that use them stay honest.

use teamster_storage::model::Job;

#[test]
fn every_example_job_parses_and_validates() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/jobs");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut job: Job = serde_json::from_value(value["Job"].clone())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        job.canonicalize();
        job.validate()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!job.task_groups.is_empty(), "{}", path.display());
        seen += 1;
    }
    assert!(
        seen >= 3,
        "expected at least three example jobs, found {seen}"
    );
}
