//! Offline memory planning: given every allocation of a program with its size, alignment
//! and lifetime, offsets in one block that keep the peak near the least possible. What
//! compilers do for static graphs (TFLite's arena planner, XLA's buffer assignment),
//! for a recorded loop iteration of eager code.
//!
//! # How it works
//! An [`Interval`] is live from step `first` to step `last`, inclusive. Each heuristic
//! orders the intervals, then places each one, in that order, at the lowest aligned
//! offset where it fits between the intervals already placed that overlap it in time
//! (best fit among the gaps, else above them all). The orders ([`Heuristic`]):
//! - **by size**: largest first (Pisarchyk and Lee's greedy by size, TFLite's default);
//! - **by breadth**: largest size x lifetime first;
//! - **by lifetime**: longest-lived first, so that short-lived intervals pack around them;
//! - **by pressure**: first those live where the most bytes are live at once (the most,
//!   over their lifetime, of the bytes live per step), then by size: the steps that set
//!   the bound are packed before anything can fragment them;
//! - **by conflict**: by pressure, then, while the peak is above the bound, rounds that
//!   find the interval on top of the plan, move every interval live beside it ahead of
//!   the others (boosts add up over rounds) and plan again. A step below the bound can
//!   still set the peak when the packing of the bound's step left gaps in its way; the
//!   rounds pack that step first. It took the bf16 transformer trace from 1.045 to
//!   1.0000 of the bound in one round, where every plain order was 1.045 or worse.
//!
//! [`plan_in_blocks`] places no interval across a multiple of a block size, for memory
//! that comes in buffers of bounded size.
//!
//! [`plan`] runs the first order of [`HEURISTICS`] and stops there when it is within
//! 1/[`GOOD_ENOUGH`] of the bound; otherwise it runs the others in parallel and keeps the
//! lowest peak. [`lower_bound`] is the most bytes
//! live at any step: no placement can peak below it.
//!
//! Placed intervals are indexed by time in buckets of [`BUCKET`] steps, so finding those
//! that overlap a new one looks at nearby buckets, not at everything placed. A bucket
//! keeps the intervals live at every one of its steps as the union of their byte ranges
//! (long-lived intervals packed side by side join into a few ranges), and the others one
//! by one, sorted by offset with their lifetimes inline. An interval in several buckets
//! is taken only from the first one the query covers, so each bucket gives two sorted
//! runs, and the runs are merged, not sorted. Buckets are large (512 steps): small ones
//! made most queries span many buckets; the unions halved what was left.
//!
//! # Promises
//! Two intervals that overlap in time never overlap in memory; every offset is a
//! multiple of its interval's alignment; no interval crosses a multiple of the plan's
//! block; the peak is at least the lower bound; the same input gives the same plan.

use std::cmp::Reverse;

use super::trace::TraceEvent;

/// Steps per time bucket of the index of placed intervals.
pub const BUCKET: u32 = 512;

/// One allocation to place: `size` bytes aligned to `align` (a power of two), live from
/// step `first` to step `last` inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    /// Bytes.
    pub size: u64,
    /// Alignment of the offset (a power of two; 0 and 1 mean none).
    pub align: u64,
    /// First step it is live.
    pub first: u32,
    /// Last step it is live (>= `first`).
    pub last: u32,
}

/// The order in which a greedy planner places intervals (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heuristic {
    /// Largest first.
    BySize,
    /// Largest size x lifetime first.
    ByBreadth,
    /// Longest-lived first.
    ByLifetime,
    /// Most bytes live at once during the lifetime first, then largest.
    ByPressure,
    /// By pressure, then up to [`REFINE_ROUNDS`] rounds that each move every interval
    /// live beside the one on top of the plan ahead of the rest (cumulatively) and plan
    /// again, keeping the lowest peak; it stops at a plan within 1/[`GOOD_ENOUGH`] of the
    /// bound.
    ByConflict,
}

/// Rounds of [`Heuristic::ByConflict`] at most; it also stops after two rounds in a row
/// that did not lower the peak. One or two reached the bound on every recorded trace
/// the pressure order missed it on but one (a ViT, 1.0029 after the first round).
pub const REFINE_ROUNDS: usize = 8;

/// Every heuristic, in the order [`plan`] tries them: by conflict first (by pressure,
/// refined only when that misses the bound), since pressure alone reached the bound on
/// most recorded traces (it packs the steps that set the bound before anything can
/// fragment them) and one or two refining rounds on the rest.
pub const HEURISTICS: [Heuristic; 4] = [
    Heuristic::ByConflict,
    Heuristic::BySize,
    Heuristic::ByBreadth,
    Heuristic::ByLifetime,
];

/// A plan within this fraction (1/N) of the lower bound ends the search: alignment
/// padding alone keeps most plans a few hundred bytes above it, and no order can gain
/// more than that.
pub const GOOD_ENOUGH: u64 = 4096;

/// Offsets for every interval, in input order, and the bytes they span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Offset of each interval, in the order given.
    pub offsets: Vec<u64>,
    /// The highest end of any interval: the bytes the plan needs.
    pub peak: u64,
    /// The order that produced it.
    pub heuristic: Heuristic,
    /// No interval crosses a multiple of this many bytes ([`plan_in_blocks`]): the plan
    /// lives in `peak.div_ceil(block)` blocks, offset `o` at `o % block` of block
    /// `o / block`. `u64::MAX` for one block.
    pub block: u64,
}

/// The most bytes live at any step: no plan peaks below it.
pub fn lower_bound(intervals: &[Interval]) -> u64 {
    let mut deltas: Vec<(u32, i128)> = Vec::with_capacity(2 * intervals.len());
    for i in intervals {
        deltas.push((i.first, i128::from(i.size)));
        deltas.push((i.last.saturating_add(1), -i128::from(i.size)));
    }
    // Frees at a step come before allocations at the same step (`last` is inclusive, so
    // an interval ending at s - 1 is gone at s).
    deltas.sort_unstable_by_key(|&(t, d)| (t, d > 0));
    let (mut live, mut peak) = (0i128, 0i128);
    for (_, d) in deltas {
        live += d;
        peak = peak.max(live);
    }
    peak as u64
}

/// The best plan of the [`Heuristic`]s: the first order's plan if it is within
/// 1/[`GOOD_ENOUGH`] of the [`lower_bound`], else the lowest peak of all of them (the
/// first in [`HEURISTICS`] order on ties), the others planned in parallel.
///
/// ```
/// use vramkit::alloc::plan::{lower_bound, plan, Interval};
/// let i = |size, first, last| Interval { size, align: 256, first, last };
/// let intervals = [i(1000, 0, 1), i(3000, 1, 2), i(1000, 2, 3)];
/// let p = plan(&intervals);
/// assert!(p.peak >= lower_bound(&intervals));
/// // The first and last never meet: they can share bytes.
/// assert_eq!(p.offsets[0], p.offsets[2]);
/// ```
pub fn plan(intervals: &[Interval]) -> Plan {
    plan_in_blocks(intervals, u64::MAX)
}

/// [`plan`] for memory that comes in blocks of at most `block` bytes (a device's largest
/// buffer): no interval is placed across a multiple of `block`. `block` must be at least
/// the largest interval and a multiple of every alignment; it is rounded down to a
/// multiple of [`super::MAX_ALIGN`] and raised to the largest interval if smaller.
pub fn plan_in_blocks(intervals: &[Interval], block: u64) -> Plan {
    use rayon::prelude::*;
    let largest = intervals.iter().map(|v| v.size).max().unwrap_or(0);
    let block = if block == u64::MAX {
        block
    } else {
        (block / super::MAX_ALIGN * super::MAX_ALIGN)
            .max(largest.next_multiple_of(super::MAX_ALIGN))
    };
    let bound = lower_bound(intervals);
    let good_enough = bound + bound / GOOD_ENOUGH;
    let first = plan_with_blocks(intervals, HEURISTICS[0], block, Some(bound));
    if first.peak <= good_enough {
        return first;
    }
    // The other orders share nothing but the input: one thread each. Collected in
    // `HEURISTICS` order, so the first lowest peak wins as it would one after another.
    let rest: Vec<Plan> = HEURISTICS[1..]
        .par_iter()
        .map(|&h| plan_with_blocks(intervals, h, block, Some(bound)))
        .collect();
    std::iter::once(first)
        .chain(rest)
        .reduce(|best, p| if p.peak < best.peak { p } else { best })
        .unwrap_or(Plan {
            offsets: Vec::new(),
            peak: 0,
            heuristic: Heuristic::BySize,
            block,
        })
}

/// The plan of one heuristic.
pub fn plan_with(intervals: &[Interval], heuristic: Heuristic) -> Plan {
    plan_with_blocks(intervals, heuristic, u64::MAX, None)
}

/// Sorts `v`, made of sorted runs that end at the indices in `ends`, by merging
/// neighbouring runs until one is left (`scratch` is reused between calls).
fn merge_runs(v: &mut Vec<(u64, u64)>, ends: &mut Vec<usize>, scratch: &mut Vec<(u64, u64)>) {
    while ends.len() > 1 {
        scratch.clear();
        let mut start = 0;
        let mut merged_ends = Vec::with_capacity(ends.len().div_ceil(2));
        for pair in ends.chunks(2) {
            let mid = pair[0];
            let end = *pair.last().unwrap_or(&mid);
            let (mut a, mut b) = (start, mid);
            while a < mid && b < end {
                if v[b] < v[a] {
                    scratch.push(v[b]);
                    b += 1;
                } else {
                    scratch.push(v[a]);
                    a += 1;
                }
            }
            scratch.extend_from_slice(&v[a..mid]);
            scratch.extend_from_slice(&v[b..end]);
            merged_ends.push(end);
            start = end;
        }
        std::mem::swap(v, scratch);
        *ends = merged_ends;
    }
}

/// A placed interval as the time buckets hold it.
#[derive(Clone, Copy)]
struct Placed {
    at: u64,
    end: u64,
    first: u32,
    last: u32,
}

/// The lowest offset from `at` up, aligned to `align`, where `size` bytes do not cross a
/// multiple of `block` (the next multiple of `block` when the aligned `at` would).
fn fit_from(at: u64, size: u64, align: u64, block: u64) -> u64 {
    // `align` is a power of two: a mask, not a division (this runs once per neighbour).
    let at = (at + align - 1) & !(align - 1);
    if block == u64::MAX || at / block == (at + size.max(1) - 1) / block {
        at
    } else {
        (at / block + 1) * block
    }
}

/// The plan of one heuristic in blocks of `block` bytes (see [`plan_in_blocks`]).
fn plan_with_blocks(
    intervals: &[Interval],
    heuristic: Heuristic,
    block: u64,
    bound: Option<u64>,
) -> Plan {
    let by_pressure = matches!(heuristic, Heuristic::ByPressure | Heuristic::ByConflict);
    let pressure = by_pressure.then(|| pressure(intervals));
    let order = order_by(intervals, |i, v| {
        let life = u64::from(v.last.saturating_sub(v.first)) + 1;
        match heuristic {
            Heuristic::BySize => u128::from(v.size),
            Heuristic::ByBreadth => u128::from(v.size) * u128::from(life),
            Heuristic::ByLifetime => (u128::from(life) << 64) | u128::from(v.size),
            Heuristic::ByPressure | Heuristic::ByConflict => {
                let p = pressure.as_ref().map_or(0, |p| p[i]);
                (u128::from(p) << 64) | u128::from(v.size)
            }
        }
    });
    let (offsets, peak) = place(intervals, &order, block);
    let plan = Plan {
        offsets,
        peak,
        heuristic,
        block,
    };
    match (heuristic, pressure) {
        (Heuristic::ByConflict, Some(pressure)) => {
            let bound = bound.unwrap_or_else(|| lower_bound(intervals));
            refine(intervals, &pressure, bound, plan)
        }
        _ => plan,
    }
}

/// The intervals' indices by `key` descending, then by start and input order
/// (deterministic). Keys are computed once, so the sort compares plain tuples.
fn order_by<K: Ord>(intervals: &[Interval], key: impl Fn(usize, &Interval) -> K) -> Vec<u32> {
    let mut keyed: Vec<(Reverse<K>, u32, u32)> = intervals
        .iter()
        .enumerate()
        .map(|(i, v)| (Reverse(key(i, v)), v.first, i as u32))
        .collect();
    keyed.sort_unstable();
    keyed.into_iter().map(|k| k.2).collect()
}

/// The rounds of [`Heuristic::ByConflict`] from the pressure order's plan `start`, against
/// the lower `bound`.
fn refine(intervals: &[Interval], pressure: &[u64], bound: u64, start: Plan) -> Plan {
    let n = intervals.len();
    let good_enough = bound + bound / GOOD_ENOUGH;
    let mut boost = vec![0u32; n];
    let mut best = start;
    let mut offsets = best.offsets.clone();
    let mut stale = 0;
    for _ in 0..REFINE_ROUNDS {
        // Two rounds in a row that found nothing lower end it: later ones repeated them
        // on every trace recorded.
        if best.peak <= good_enough || stale >= 2 {
            break;
        }
        // The interval on top of the last plan, and everything live beside it: what
        // stacked up to the peak. They go first next time (ahead of those boosted less).
        let Some(top) = (0..n).max_by_key(|&i| (offsets[i] + intervals[i].size, Reverse(i))) else {
            break;
        };
        let t = intervals[top];
        for (k, w) in intervals.iter().enumerate() {
            if w.first <= t.last && t.first <= w.last {
                boost[k] += 1;
            }
        }
        let order = order_by(intervals, |k, v| (boost[k], pressure[k], v.size));
        let peak;
        (offsets, peak) = place(intervals, &order, best.block);
        if peak < best.peak {
            best.offsets.clone_from(&offsets);
            best.peak = peak;
            stale = 0;
        } else {
            stale += 1;
        }
    }
    best
}

/// Places the intervals in `order`, each at the best-fitting gap among those placed
/// before it that overlap it in time (else above them all); returns the offsets (in input
/// order) and the peak.
fn place(intervals: &[Interval], order: &[u32], block: u64) -> (Vec<u64>, u64) {
    let n = intervals.len();
    let steps = intervals.iter().map(|v| v.last).max().map_or(0, |m| m + 1);
    let mut buckets: Vec<Bucket> = vec![Bucket::default(); steps.div_ceil(BUCKET).max(1) as usize];
    let mut offsets = vec![0u64; n];
    let mut peak = 0u64;
    let mut neighbours: Vec<(u64, u64)> = Vec::new();
    let (mut runs, mut merged) = (Vec::new(), Vec::new());
    for &i in order {
        let v = intervals[i as usize];
        let (b0, b1) = ((v.first / BUCKET) as usize, (v.last / BUCKET) as usize);
        neighbours.clear();
        runs.clear();
        for (b, bucket) in buckets[b0..=b1].iter().enumerate() {
            // Whatever spans the bucket is live beside the query (repeats from the
            // bucket before are harmless: ranges may overlap in the search).
            neighbours.extend_from_slice(&bucket.full);
            runs.push(neighbours.len());
            // An interval in several buckets is taken from the first of them that the
            // query covers: in a later one, only those that begin there.
            let from = if b == 0 { 0 } else { (b0 + b) as u32 * BUCKET };
            for w in &bucket.partial {
                if w.first <= v.last && v.first <= w.last && w.first >= from {
                    neighbours.push((w.at, w.end));
                }
            }
            runs.push(neighbours.len());
        }
        // Sorted runs (two per bucket): merged pairwise (a sort cost a third of the time).
        merge_runs(&mut neighbours, &mut runs, &mut merged);
        let align = v.align.max(1);
        // Best fit: the smallest gap between neighbours that holds it; else above all.
        let (mut best, mut best_gap) = (None, u64::MAX);
        let mut floor = 0u64;
        for &(start, end) in &neighbours {
            let at = fit_from(floor, v.size, align, block);
            if start > at && start - at >= v.size && start - floor < best_gap {
                best = Some(at);
                best_gap = start - floor;
            }
            floor = floor.max(end);
        }
        let at = best.unwrap_or_else(|| fit_from(floor, v.size, align, block));
        offsets[i as usize] = at;
        peak = peak.max(at + v.size);
        let placed = Placed {
            at,
            end: at + v.size,
            first: v.first,
            last: v.last,
        };
        for (b, bucket) in buckets[b0..=b1].iter_mut().enumerate() {
            let start = (b0 + b) as u32 * BUCKET;
            if v.first <= start && v.last >= start + (BUCKET - 1) {
                bucket.cover(at, at + v.size);
            } else {
                let k = bucket.partial.partition_point(|w| w.at < at);
                bucket.partial.insert(k, placed);
            }
        }
    }
    (offsets, peak)
}

/// The placed intervals live in one time bucket: those live at every step of it as the
/// union of their byte ranges (disjoint, sorted, adjacent ones joined: a tightly packed
/// set of long-lived intervals is a handful of ranges, not hundreds of neighbours), the
/// others one by one, by offset.
#[derive(Clone, Default)]
struct Bucket {
    full: Vec<(u64, u64)>,
    partial: Vec<Placed>,
}

impl Bucket {
    /// Adds `[start, end)` to the union of ranges of intervals spanning the bucket.
    fn cover(&mut self, start: u64, end: u64) {
        // The first range that ends at or after `start`, and the first that begins after
        // `end`: everything between touches the new one and joins it.
        let k = self.full.partition_point(|r| r.1 < start);
        let m = k + self.full[k..].partition_point(|r| r.0 <= end);
        if k == m {
            self.full.insert(k, (start, end));
        } else {
            let joined = (start.min(self.full[k].0), end.max(self.full[m - 1].1));
            self.full.splice(k..m, std::iter::once(joined));
        }
    }
}

/// For each interval, the most bytes live at once at any step of its lifetime: the live
/// bytes per step from a prefix sum, then a range maximum per interval over a segment tree
/// of the steps (O((n + steps) log steps)).
fn pressure(intervals: &[Interval]) -> Vec<u64> {
    let steps = intervals
        .iter()
        .map(|v| v.last as usize + 1)
        .max()
        .unwrap_or(0);
    let mut delta = vec![0i128; steps + 1];
    for v in intervals {
        delta[v.first as usize] += i128::from(v.size);
        delta[v.last as usize + 1] -= i128::from(v.size);
    }
    // Leaves at size.., inner nodes below: tree[k] = max(tree[2k], tree[2k + 1]).
    let size = steps.next_power_of_two().max(1);
    let mut tree = vec![0u64; 2 * size];
    let mut live = 0i128;
    for t in 0..steps {
        live += delta[t];
        tree[size + t] = live.max(0) as u64;
    }
    for k in (1..size).rev() {
        tree[k] = tree[2 * k].max(tree[2 * k + 1]);
    }
    intervals
        .iter()
        .map(|v| {
            let (mut a, mut b) = (v.first as usize + size, v.last as usize + size + 1);
            let mut most = 0;
            while a < b {
                if a & 1 == 1 {
                    most = most.max(tree[a]);
                    a += 1;
                }
                if b & 1 == 1 {
                    b -= 1;
                    most = most.max(tree[b]);
                }
                a /= 2;
                b /= 2;
            }
            most
        })
        .collect()
}

/// The intervals of a recorded trace, one per allocation in the order they were made,
/// with step = event index and every allocation aligned to `align`. An allocation never
/// freed lives to the end; an id allocated again before its free ends the first one there
/// (as the replay does).
pub fn intervals_from_trace(events: &[TraceEvent], align: u64) -> Vec<Interval> {
    let end = events.len().saturating_sub(1) as u32;
    // Id -> index of its open interval.
    let mut open: std::collections::HashMap<u32, usize> = Default::default();
    let mut out: Vec<Interval> = Vec::new();
    for (step, e) in events.iter().enumerate() {
        let step = step as u32;
        match *e {
            TraceEvent::Alloc { id, size } => {
                if let Some(old) = open.insert(id, out.len()) {
                    out[old].last = step.max(out[old].first);
                }
                out.push(Interval {
                    size,
                    align,
                    first: step,
                    last: end,
                });
            }
            TraceEvent::Free { id } => {
                if let Some(k) = open.remove(&id) {
                    out[k].last = step;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::Bucket;

    /// The union kept by `Bucket::cover` is the union of the ranges given, whatever the
    /// order: bytes covered checked one by one against a bitmap.
    #[test]
    fn cover_keeps_the_union_of_ranges() {
        let mut seed = 12345u64;
        let mut next = |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        for _ in 0..200 {
            let mut b = Bucket::default();
            let mut bits = vec![false; 300];
            for _ in 0..next(12) + 1 {
                let start = next(280);
                let end = start + 1 + next(20);
                b.cover(start, end);
                bits[start as usize..end as usize]
                    .iter_mut()
                    .for_each(|x| *x = true);
            }
            for w in b.full.windows(2) {
                assert!(w[0].1 < w[1].0, "ranges touch or overlap: {:?}", b.full);
            }
            for (x, &set) in bits.iter().enumerate() {
                let x = x as u64;
                let covered = b.full.iter().any(|r| r.0 <= x && x < r.1);
                assert_eq!(covered, set, "byte {x} in {:?}", b.full);
            }
        }
    }
}
