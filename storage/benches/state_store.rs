//! State store benchmarks (figures in docs/benchmarks.md, section "State store"):
//!
//! - `snapshot/1M_allocs`: taking a snapshot with a million allocations stored (aim < 1 µs);
//! - `apply_plan_1000/1M_allocs`: applying an `ApplyPlanResults` of 1 000 new allocations to
//!   that store (the placements are garbage-collected again between iterations, untimed, so
//!   the store keeps its size); `apply_plan_1000/empty`: the same on a store holding only
//!   the nodes and the job;
//! - `encode_image/1M_allocs`: encoding the whole state as a snapshot image.
//!
//! Building the store also reports the resident memory per allocation.
//! Run: `cargo bench -p teamster-storage --bench state_store`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use common::*;
use criterion::{criterion_group, criterion_main, Criterion};
use teamster_storage::fsm::{Command, EvalDelete};

/// Applies a fresh plan of 1 000 placements per iteration (timed), then deletes them again
/// (untimed) so the store keeps its size.
fn bench_plan(
    b: &mut criterion::Bencher<'_>,
    store: &teamster_storage::state::StateStore,
    index: &mut u64,
    next_alloc: &mut u64,
) {
    let job = job("job-0", C1M_ALLOCS_PER_JOB as u32);
    b.iter_custom(|iters| {
        let mut total = Duration::ZERO;
        for _ in 0..iters {
            let ids: Vec<u64> = (*next_alloc..*next_alloc + 1000).collect();
            *next_alloc += 1000;
            let allocs = ids
                .iter()
                .map(|n| {
                    alloc(
                        *n,
                        &job,
                        &node_id(n % C1M_NODES),
                        &eval_id(0),
                        (*n % 1000) as u32,
                    )
                })
                .collect();
            let command = place(&eval_id(0), allocs);
            let start = Instant::now();
            let response = store.apply(*index, command);
            total += start.elapsed();
            assert!(response.rejection().is_none());
            *index += 1;
            store.apply(
                *index,
                Command::EvalDelete(EvalDelete {
                    evals: vec![],
                    allocs: ids.iter().map(|n| alloc_id(*n)).collect(),
                }),
            );
            *index += 1;
        }
        total
    })
}

fn state_store(c: &mut Criterion) {
    // The same plan against a store holding only the nodes and the job, for comparison.
    let small = teamster_storage::state::StateStore::new();
    let mut small_index = 1;
    for n in 0..C1M_NODES {
        small.apply(small_index, register_node(&node(n)));
        small_index += 1;
    }
    let job0 = job("job-0", C1M_ALLOCS_PER_JOB as u32);
    small.apply(small_index, register(&job0, Some(eval_for(&job0, 0))));
    small_index += 1;
    let mut small_next = 0;
    c.bench_function("apply_plan_1000/empty", |b| {
        bench_plan(b, &small, &mut small_index, &mut small_next)
    });
    drop(small);

    let before = resident_bytes();
    let started = Instant::now();
    let (store, mut index) = million_allocations();
    let built_in = started.elapsed();
    let after = resident_bytes();
    let allocs = store.snapshot().alloc_count();
    println!(
        "built {allocs} allocations in {built_in:.1?}; resident growth {:.0} bytes per allocation",
        (after - before) as f64 / allocs as f64
    );

    c.bench_function("snapshot/1M_allocs", |b| {
        b.iter(|| black_box(store.snapshot()))
    });

    let mut next_alloc = C1M_JOBS * C1M_ALLOCS_PER_JOB;
    c.bench_function("apply_plan_1000/1M_allocs", |b| {
        bench_plan(b, &store, &mut index, &mut next_alloc)
    });

    let mut group = c.benchmark_group("encode_image");
    group.sample_size(10);
    group.bench_function("1M_allocs", |b| {
        b.iter(|| black_box(store.snapshot().encode_image().unwrap().len()))
    });
    group.finish();
}

criterion_group!(benches, state_store);
criterion_main!(benches);
