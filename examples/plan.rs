//! Plans a real allocator trace as if it were one loop iteration (`vramkit::alloc::plan`),
//! replays it from the plan, and compares with the arena's online policy on the same
//! trace in the same run.
//!
//! ```text
//! cargo run --release --example plan [TRACE.csv.gz]     # default: the ResNet-50 trace
//! cargo run --release --example plan -- --all           # every trace in examples/data
//! ```

use std::time::Instant;

use vramkit::alloc::plan::{intervals_from_trace, lower_bound, plan, Interval};
use vramkit::alloc::trace::{replay, replay_in_one_block, TraceEvent};
use vramkit::alloc::{BlockPolicy, RangeAllocator};

#[path = "support/traces.rs"]
mod traces;

const ALIGN: u64 = 256;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let paths: Vec<std::path::PathBuf> = if args.iter().any(|a| a == "--all") {
        traces::all()?
    } else {
        vec![args
            .iter()
            .find(|a| !a.starts_with("--"))
            .map_or_else(
                || format!("{}/trace_resnet50_train.csv.gz", traces::DATA),
                Clone::clone,
            )
            .into()]
    };
    let mut worst = 0.0f64;
    for path in &paths {
        let events = traces::load(path)?;
        println!("\ntrace: {}", path.display());
        worst = worst.max(one(&events)?);
    }
    if paths.len() > 1 {
        println!("\ntraces: {}", paths.len());
        println!("worst_planned_peak_over_lower_bound: {worst:.4}");
    }
    Ok(())
}

/// Plans and replays one trace; returns planned peak over the lower bound.
fn one(events: &[TraceEvent]) -> Result<f64, Box<dyn std::error::Error>> {
    let intervals = intervals_from_trace(events, ALIGN);
    let bound = lower_bound(&intervals);
    let start = Instant::now();
    let p = plan(&intervals);
    let plan_ms = start.elapsed().as_secs_f64() * 1e3;
    check(&intervals, &p.offsets)?;
    // A planned iteration: every allocation is a lookup of its offset, in event order
    // (allocations are numbered in the order they appear, as `intervals_from_trace` does).
    let reps = 20;
    let mut sink = 0u64;
    let start = Instant::now();
    for _ in 0..reps {
        let mut k = 0;
        for e in events {
            if let TraceEvent::Alloc { .. } = e {
                sink = sink.wrapping_add(std::hint::black_box(p.offsets[k]));
                k += 1;
            }
        }
    }
    let planned_ns = start.elapsed().as_nanos() as f64 / (reps * events.len()) as f64;
    std::hint::black_box(sink);
    let online = replay::<RangeAllocator>(events, &BlockPolicy::for_max_binding(2 << 30), ALIGN);
    let online_raw = (0..5)
        .map(|_| replay_in_one_block::<RangeAllocator>(events, 64 << 30, ALIGN).ns_per_op)
        .fold(f64::MAX, f64::min);
    let ratio = p.peak as f64 / bound.max(1) as f64;
    println!("events: {}", events.len());
    println!("allocations: {}", intervals.len());
    println!("heuristic: {:?}", p.heuristic);
    println!("lower_bound_bytes: {bound}");
    println!("planned_peak_bytes: {}", p.peak);
    println!("planned_peak_over_lower_bound: {ratio:.4}");
    println!("online_peak_reserved_over_allocated: {:.4}", online.ratio());
    println!("plan_ms: {plan_ms:.1}");
    println!("planned_replay_ns_per_op: {planned_ns:.2}");
    println!("online_ns_per_op: {online_raw:.2}");
    Ok(ratio)
}

/// The plan's promise, checked by a sweep: no two intervals live at once share a byte,
/// and every offset is aligned.
fn check(intervals: &[Interval], offsets: &[u64]) -> Result<(), String> {
    let mut by_start: Vec<usize> = (0..intervals.len()).collect();
    by_start.sort_by_key(|&i| intervals[i].first);
    // Live intervals as (offset, end, last); checked against each newcomer.
    let mut live: Vec<(u64, u64, u32)> = Vec::new();
    for i in by_start {
        let v = intervals[i];
        let at = offsets[i];
        if !at.is_multiple_of(v.align.max(1)) {
            return Err(format!(
                "interval {i} at {at} is not aligned to {}",
                v.align
            ));
        }
        live.retain(|&(_, _, last)| last >= v.first);
        if let Some(o) = live.iter().find(|&&(s, e, _)| s < at + v.size && at < e) {
            return Err(format!("interval {i} at {at} overlaps a live one at {o:?}"));
        }
        live.push((at, at + v.size, v.last));
    }
    Ok(())
}
