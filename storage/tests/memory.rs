//! Resident memory per allocation with a million allocations in the state store.
//!
//! Ignored by default (it takes a few seconds and ~1 GB); run it in release:
//! `cargo test --release -p teamster-storage --test memory -- --ignored --nocapture`.
//! It measures the growth of the resident set (`/proc/self/statm`) while 1 000 jobs of
//! 1 000 allocations each are placed through `ApplyPlanResults`, i.e. including every
//! secondary index and the allocator's overhead, and fails above 512 bytes per allocation
//! (issue 21's aim; it was 812 before ids became one pointer wide).

mod common;

use common::*;

/// The allocator of the `teamster` binary, so that the test measures what a server holds.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
#[test]
#[ignore = "measures a million allocations; run in release with --ignored"]
fn resident_memory_per_allocation_stays_within_512_bytes() {
    let before = resident_bytes();
    let (store, _) = million_allocations();
    let after = resident_bytes();
    let total = C1M_JOBS * C1M_ALLOCS_PER_JOB;
    assert_eq!(store.snapshot().alloc_count() as u64, total);
    let per_alloc = (after - before) as f64 / total as f64;
    println!(
        "resident growth {:.1} MiB for {total} allocations ({C1M_JOBS} jobs, {C1M_NODES} nodes): {per_alloc:.0} bytes per allocation",
        (after - before) as f64 / (1 << 20) as f64
    );
    println!(
        "size_of::<Allocation>() = {} bytes",
        std::mem::size_of::<teamster_storage::model::Allocation>()
    );
    assert!(per_alloc <= 512.0, "{per_alloc:.0} bytes per allocation");
    // A snapshot image does not carry the job per allocation either.
    let image = store.snapshot().encode_image().unwrap();
    println!(
        "snapshot image: {:.1} MiB, {:.0} bytes per allocation",
        image.len() as f64 / (1 << 20) as f64,
        image.len() as f64 / total as f64
    );
}
