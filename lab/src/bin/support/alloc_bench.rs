//! Allocator workloads shared by `bench alloc` (examples/bench.rs) and the criterion bench:
//! the same pre-generated operation sequences run through vramkit and its peers.
#![allow(dead_code)]

use rand::{rngs::SmallRng, Rng, SeedableRng};
use std::time::Instant;

use vramkit::alloc::RangeAllocator;

/// One pre-generated operation: allocate into a slot, or free a slot.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// Allocate `size` bytes into `slot`.
    Alloc { slot: u32, size: u64 },
    /// Free `slot`.
    Free { slot: u32 },
}

/// A named workload over a block of `capacity` bytes.
pub struct Workload {
    pub name: &'static str,
    pub capacity: u64,
    pub slots: usize,
    pub ops: Vec<Op>,
}

fn log_uniform(rng: &mut SmallRng, lo: u64, hi: u64) -> u64 {
    let (l, h) = ((lo as f64).ln(), (hi as f64).ln());
    (rng.gen_range(l..h).exp() as u64).max(lo) / 256 * 256 + 256
}

/// Sizes log-uniform in 256 B..64 MiB; random frees keep occupancy near 80 %.
pub fn churn(ops: usize, seed: u64) -> Workload {
    let capacity = 16u64 << 30;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut live: Vec<(u32, u64)> = Vec::new();
    let mut free_slots: Vec<u32> = Vec::new();
    let mut next = 0u32;
    let mut used = 0u64;
    let mut out = Vec::with_capacity(ops);
    while out.len() < ops {
        let size = log_uniform(&mut rng, 256, 64 << 20);
        if used + size <= capacity * 8 / 10 {
            let slot = free_slots.pop().unwrap_or_else(|| {
                next += 1;
                next - 1
            });
            out.push(Op::Alloc { slot, size });
            live.push((slot, size));
            used += size;
        } else {
            let i = rng.gen_range(0..live.len());
            let (slot, s) = live.swap_remove(i);
            out.push(Op::Free { slot });
            free_slots.push(slot);
            used -= s;
        }
    }
    for (slot, _) in live {
        out.push(Op::Free { slot });
    }
    Workload {
        name: "churn80",
        capacity,
        slots: next as usize,
        ops: out,
    }
}

/// Stack order: allocate a burst, free it in reverse, repeat.
pub fn lifo(ops: usize, seed: u64) -> Workload {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(ops);
    while out.len() < ops {
        let depth = rng.gen_range(1..64u32);
        for slot in 0..depth {
            out.push(Op::Alloc {
                slot,
                size: log_uniform(&mut rng, 256, 1 << 20),
            });
        }
        for slot in (0..depth).rev() {
            out.push(Op::Free { slot });
        }
    }
    Workload {
        name: "lifo",
        capacity: 1 << 30,
        slots: 64,
        ops: out,
    }
}

/// Queue order: a sliding window of 256 live allocations, oldest freed first.
pub fn fifo(ops: usize, seed: u64) -> Workload {
    let mut rng = SmallRng::seed_from_u64(seed);
    let window = 256u32;
    let mut out = Vec::with_capacity(ops);
    let mut i = 0u32;
    while out.len() < ops {
        if i >= window {
            out.push(Op::Free {
                slot: (i - window) % window,
            });
        }
        out.push(Op::Alloc {
            slot: i % window,
            size: log_uniform(&mut rng, 256, 1 << 20),
        });
        i += 1;
    }
    for k in i.saturating_sub(window)..i {
        out.push(Op::Free { slot: k % window });
    }
    Workload {
        name: "fifo",
        capacity: 1 << 30,
        slots: window as usize,
        ops: out,
    }
}

/// The real trace as one workload in one block (no block policy).
pub fn from_trace(events: &[vramkit::alloc::trace::TraceEvent]) -> Workload {
    use vramkit::alloc::trace::TraceEvent;
    let mut slots = 0;
    let ops = events
        .iter()
        .map(|e| match *e {
            TraceEvent::Alloc { id, size } => {
                slots = slots.max(id as usize + 1);
                Op::Alloc { slot: id, size }
            }
            TraceEvent::Free { id } => Op::Free { slot: id },
        })
        .collect();
    Workload {
        name: "resnet50",
        capacity: 64 << 30,
        slots,
        ops,
    }
}

/// An allocator under test.
pub trait Bench {
    type H: Copy;
    fn new(capacity: u64) -> Self;
    fn alloc(&mut self, size: u64) -> Option<Self::H>;
    fn free(&mut self, h: Self::H);
}

impl Bench for RangeAllocator {
    type H = vramkit::alloc::RangeHandle;
    fn new(capacity: u64) -> Self {
        // Both allocators get their bookkeeping up front, outside the timed loop.
        let mut a = RangeAllocator::new(capacity);
        a.reserve_ranges(1 << 20);
        a
    }
    fn alloc(&mut self, size: u64) -> Option<Self::H> {
        self.allocate(size, 256).ok().map(|r| r.handle)
    }
    fn free(&mut self, h: Self::H) {
        let _ = RangeAllocator::free(self, h);
    }
}

pub struct Offset(offset_allocator::Allocator);
impl Bench for Offset {
    type H = offset_allocator::Allocation;
    fn new(capacity: u64) -> Self {
        Offset(offset_allocator::Allocator::with_max_allocs(
            (capacity / 256) as u32,
            1 << 20,
        ))
    }
    fn alloc(&mut self, size: u64) -> Option<Self::H> {
        self.0.allocate(size.div_ceil(256) as u32)
    }
    fn free(&mut self, h: Self::H) {
        self.0.free(h);
    }
}

pub struct RangeAlloc(range_alloc::RangeAllocator<u64>);
impl Bench for RangeAlloc {
    type H = (u64, u64);
    fn new(capacity: u64) -> Self {
        RangeAlloc(range_alloc::RangeAllocator::new(0..capacity))
    }
    fn alloc(&mut self, size: u64) -> Option<Self::H> {
        self.0
            .allocate_range_aligned(size, 256)
            .ok()
            .map(|r| (r.start, r.end))
    }
    fn free(&mut self, h: Self::H) {
        self.0.free_range(h.0..h.1);
    }
}

/// Runs `w` once through a fresh `B` (construction not timed); returns (seconds, failed
/// allocations).
pub fn run_once<B: Bench>(w: &Workload) -> (f64, usize) {
    let mut a = B::new(w.capacity);
    let mut slots: Vec<Option<B::H>> = vec![None; w.slots];
    let mut failed = 0;
    let start = Instant::now();
    for op in &w.ops {
        match *op {
            Op::Alloc { slot, size } => match a.alloc(size) {
                Some(h) => slots[slot as usize] = Some(h),
                None => failed += 1,
            },
            Op::Free { slot } => {
                if let Some(h) = slots[slot as usize].take() {
                    a.free(h);
                }
            }
        }
    }
    (start.elapsed().as_secs_f64(), failed)
}

/// Best of `runs`: nanoseconds per operation and failures.
pub fn ns_per_op<B: Bench>(w: &Workload, runs: usize) -> (f64, usize) {
    let mut best = f64::MAX;
    let mut failed = 0;
    for _ in 0..runs {
        let (s, f) = run_once::<B>(w);
        best = best.min(s);
        failed = f;
    }
    (best * 1e9 / w.ops.len() as f64, failed)
}

/// Best of `runs` for two allocators, their runs interleaved so that a machine-wide slow
/// spell (frequent in a shared VM) hits both alike: (ns per op, failures) for each.
pub fn duel<A: Bench, B: Bench>(w: &Workload, runs: usize) -> ((f64, usize), (f64, usize)) {
    let (mut best_a, mut best_b) = (f64::MAX, f64::MAX);
    let (mut failed_a, mut failed_b) = (0, 0);
    for _ in 0..runs {
        let (s, f) = run_once::<A>(w);
        best_a = best_a.min(s);
        failed_a = f;
        let (s, f) = run_once::<B>(w);
        best_b = best_b.min(s);
        failed_b = f;
    }
    let per_op = |s: f64| s * 1e9 / w.ops.len() as f64;
    ((per_op(best_a), failed_a), (per_op(best_b), failed_b))
}
