//! Criterion benchmark of the allocator core against offset-allocator and range-alloc on
//! the synthetic workloads of `bench alloc` (same generators, smaller sizes).
//!
//! ```text
//! cargo bench -p vramkit-lab
//! ```

#[path = "../src/bin/support/alloc_bench.rs"]
mod alloc_bench;

use alloc_bench::{churn, fifo, lifo, run_once, Bench, Offset, RangeAlloc, Workload};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::time::Duration;

use vramkit::alloc::RangeAllocator;

/// Times only the allocations and frees: `run_once` builds each allocator before its
/// clock starts (offset-allocator's constructor fills its whole node table, which is not
/// a per-operation cost), so the criterion timer takes `run_once`'s own measurement.
fn timed<B: Bench>(iters: u64, w: &Workload) -> Duration {
    (0..iters)
        .map(|_| Duration::from_secs_f64(run_once::<B>(w).0))
        .sum()
}

fn workload<B: Bench>(c: &mut Criterion, group: &str, w: &Workload, with_range_alloc: bool) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(w.ops.len() as u64));
    g.bench_with_input(BenchmarkId::new("vramkit", w.name), w, |b, w| {
        b.iter_custom(|iters| timed::<RangeAllocator>(iters, w))
    });
    g.bench_with_input(BenchmarkId::new("offset-allocator", w.name), w, |b, w| {
        b.iter_custom(|iters| timed::<Offset>(iters, w))
    });
    if with_range_alloc {
        g.bench_with_input(BenchmarkId::new("range-alloc", w.name), w, |b, w| {
            b.iter_custom(|iters| timed::<RangeAlloc>(iters, w))
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    // range-alloc is O(n) per free list walk: only on the workloads where it finishes.
    workload::<RangeAllocator>(c, "churn80", &churn(20_000, 1), false);
    workload::<RangeAllocator>(c, "lifo", &lifo(20_000, 2), true);
    workload::<RangeAllocator>(c, "fifo", &fifo(20_000, 3), true);
}

criterion_group!(alloc, benches);
criterion_main!(alloc);
