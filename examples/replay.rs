//! Replays a real allocation trace through vramkit's allocator core and through the
//! `offset-allocator` crate under the same block policy (the arena's default), and compares
//! reserved-over-allocated with what PyTorch's caching allocator reported for the same run.
//!
//! ```text
//! cargo run --release --example replay [TRACE.csv.gz]   # default: ../shared/traces/trace_resnet50_train.csv.gz
//! ```

#[path = "support/peers.rs"]
mod peers;

use std::io::BufReader;

use vramkit::alloc::trace::{parse_csv, replay, ReplayReport};
use vramkit::alloc::{BlockPolicy, Placement, RangeAllocator, SubAllocator};

/// vramkit's allocator with an explicit placement, to compare good-fit and best-fit.
struct WithPlacement<const BEST: bool>(RangeAllocator);

impl<const BEST: bool> SubAllocator for WithPlacement<BEST> {
    type Handle = vramkit::alloc::RangeHandle;
    fn with_capacity(capacity: u64) -> Self {
        let p = if BEST {
            Placement::BestFit
        } else {
            Placement::GoodFit
        };
        WithPlacement(RangeAllocator::with_placement(capacity, p))
    }
    fn allocate(&mut self, size: u64, align: u64) -> Option<(u64, Self::Handle)> {
        self.0
            .allocate(size, align)
            .ok()
            .map(|r| (r.offset, r.handle))
    }
    fn free(&mut self, handle: Self::Handle) {
        let _ = self.0.free(handle);
    }
}

fn best_of<A: SubAllocator>(
    events: &[vramkit::alloc::trace::TraceEvent],
    policy: &BlockPolicy,
    runs: usize,
) -> ReplayReport {
    let mut best = replay::<A>(events, policy, 256);
    for _ in 1..runs {
        let r = replay::<A>(events, policy, 256);
        if r.ns_per_op < best.ns_per_op {
            best = r;
        }
    }
    best
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "../shared/traces/trace_resnet50_train.csv.gz".to_string());
    let file = std::fs::File::open(&path).map_err(|e| format!("cannot open trace {path}: {e}"))?;
    let events = parse_csv(BufReader::new(flate2::read::GzDecoder::new(file)))?;
    let json_path = path.replace(".csv.gz", ".json");
    let pytorch = std::fs::read_to_string(&json_path)
        .ok()
        .and_then(|j| peers::pytorch_ratio(&j));

    // The arena's default policy on a device with a 4 GiB storage-binding limit (H100).
    let policy = BlockPolicy::for_max_binding(4 << 30);
    let runs = 5;
    // `good` is the default placement (the one the arena uses); `best` the alternative.
    let best = best_of::<WithPlacement<true>>(&events, &policy, runs);
    let good = best_of::<WithPlacement<false>>(&events, &policy, runs);
    let offset = best_of::<peers::OffsetAlloc>(&events, &policy, runs);
    // The trade-off behind release_empty_before_grow: keeping empty blocks cached creates
    // fewer blocks but holds more memory at the peak.
    let keep_policy = BlockPolicy {
        release_empty_before_grow: false,
        ..policy.clone()
    };
    let keep = best_of::<WithPlacement<false>>(&events, &keep_policy, runs);
    // Pure allocator speed: the whole trace in one block, no policy, no block setup.
    let one_block = BlockPolicy {
        min_block: 64 << 30,
        max_block: 64 << 30,
        dedicated_threshold: u64::MAX,
        dedicated_granularity: 64 << 10,
        release_empty_before_grow: false,
    };
    let good_raw = best_of::<WithPlacement<false>>(&events, &one_block, runs * 4);
    let offset_raw = best_of::<peers::OffsetAlloc>(&events, &one_block, runs * 4);

    println!("trace: {path}");
    println!("policy: {policy:?}");
    println!(
        "{:<28} {:>14} {:>14} {:>8} {:>8} {:>10}",
        "allocator", "peak alloc", "peak reserved", "ratio", "blocks", "ns/op"
    );
    for (name, r) in [
        ("vramkit good-fit (default)", &good),
        ("vramkit best-fit", &best),
        ("offset-allocator", &offset),
        ("vramkit, empty blocks kept", &keep),
        ("vramkit, one 64 GiB block", &good_raw),
        ("offset-alloc, one block", &offset_raw),
    ] {
        println!(
            "{:<28} {:>14} {:>14} {:>8.3} {:>8} {:>10.1}",
            name,
            vramkit::fmt_bytes(r.peak_allocated),
            vramkit::fmt_bytes(r.peak_reserved),
            r.ratio(),
            r.blocks_created,
            r.ns_per_op
        );
        if r.failures > 0 {
            println!("  ({} allocations failed)", r.failures);
        }
    }
    println!("events: {}", good.events);
    println!("peak_allocated_bytes: {}", good.peak_allocated);
    println!("peak_reserved_bytes: {}", good.peak_reserved);
    println!("peak_reserved_over_allocated: {:.4}", good.ratio());
    println!("best_fit_reserved_over_allocated: {:.4}", best.ratio());
    println!(
        "offset_allocator_reserved_over_allocated: {:.4}",
        offset.ratio()
    );
    match pytorch {
        Some(r) => println!("pytorch_reserved_over_allocated: {r:.4}"),
        None => println!("pytorch_reserved_over_allocated: n/a (no {json_path})"),
    }
    println!("ns_per_op: {:.2}", good_raw.ns_per_op);
    println!(
        "speed_vs_offset_allocator: {:.3}",
        offset_raw.ns_per_op / good_raw.ns_per_op
    );
    println!("policy_ns_per_op: {:.2}", good.ns_per_op);
    println!(
        "policy_speed_vs_offset_allocator: {:.3}",
        offset.ns_per_op / good.ns_per_op
    );
    Ok(())
}
