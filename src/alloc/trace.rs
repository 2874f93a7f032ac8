//! Allocation traces: parse PyTorch-style `seq,action,addr,size` CSV and replay it through a
//! [`BlockSet`] under any [`SubAllocator`], measuring reserved-over-allocated and speed.

use std::collections::HashMap;
use std::io::BufRead;
use web_time::Instant;

use super::{AllocError, BlockAlloc, BlockPolicy, BlockSet, SubAllocator};

/// One trace event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceEvent {
    /// Allocate `size` bytes; `id` pairs it with its free.
    Alloc {
        /// Pairs the allocation with its free.
        id: u32,
        /// Bytes.
        size: u64,
    },
    /// Free the allocation `id`.
    Free {
        /// The allocation to free.
        id: u32,
    },
}

/// Parses a trace with header `seq,action,addr,size`, where `action` is `alloc` or
/// `free_completed` (or `free`) and `addr` pairs a free with the live allocation at that
/// address. Frees of unknown addresses (allocated before recording began) are skipped.
pub fn parse_csv(reader: impl BufRead) -> std::io::Result<Vec<TraceEvent>> {
    let bad = |line: usize, what: &str| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("trace line {line}: {what}"),
        )
    };
    let mut live: HashMap<u64, u32> = HashMap::new();
    let mut events = Vec::new();
    let mut next_id = 0u32;
    for (n, line) in reader.lines().enumerate() {
        let line = line?;
        if n == 0 && line.starts_with("seq") {
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() < 4 {
            return Err(bad(n + 1, "expected 4 fields: seq,action,addr,size"));
        }
        let addr: u64 = fields[2]
            .trim()
            .parse()
            .map_err(|_| bad(n + 1, "bad addr"))?;
        let size: u64 = fields[3]
            .trim()
            .parse()
            .map_err(|_| bad(n + 1, "bad size"))?;
        match fields[1].trim() {
            "alloc" => {
                if size == 0 {
                    continue;
                }
                live.insert(addr, next_id);
                events.push(TraceEvent::Alloc { id: next_id, size });
                next_id = next_id
                    .checked_add(1)
                    .ok_or_else(|| bad(n + 1, "more than 2^32 allocations"))?;
            }
            "free_completed" | "free" => {
                if let Some(id) = live.remove(&addr) {
                    events.push(TraceEvent::Free { id });
                }
            }
            // Other actions (segment_alloc, free_requested, snapshot, ...) do not change
            // what is live from the program's point of view.
            _ => {}
        }
    }
    Ok(events)
}

/// What a replay measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReplayReport {
    /// Events replayed.
    pub events: usize,
    /// Peak live bytes.
    pub peak_allocated: u64,
    /// Peak bytes held in blocks.
    pub peak_reserved: u64,
    /// Blocks created.
    pub blocks_created: u64,
    /// Nanoseconds per alloc or free, policy included.
    pub ns_per_op: f64,
    /// Allocations that failed (should be 0: blocks are unbounded here).
    pub failures: u64,
}

impl ReplayReport {
    /// Peak reserved over peak allocated.
    pub fn ratio(&self) -> f64 {
        self.peak_reserved as f64 / self.peak_allocated.max(1) as f64
    }
}

/// Replays `events` through a [`BlockSet`] of `A` under `policy`, with every allocation
/// aligned to `align`. Blocks are unbounded (the host stands in for device memory).
pub fn replay<A: SubAllocator>(
    events: &[TraceEvent],
    policy: &BlockPolicy,
    align: u64,
) -> ReplayReport {
    let (slots, count) = dense_slots(events);
    let mut live: Vec<Option<BlockAlloc<A::Handle>>> = Vec::new();
    live.resize_with(count, || None);
    let mut set: BlockSet<A> = BlockSet::new(policy.clone());
    let mut failures = 0;
    let start = Instant::now();
    for (e, slot) in events.iter().zip(slots) {
        let Some(slot) = slot else { continue };
        match *e {
            TraceEvent::Alloc { size, .. } => {
                match set.allocate::<AllocError>(size, align, |_, _| Ok(()), |_| {}) {
                    Ok(a) => {
                        // An id allocated again before its free: the old one is freed.
                        if let Some(old) = live[slot].replace(a) {
                            set.free(old);
                        }
                    }
                    Err(_) => failures += 1,
                }
            }
            TraceEvent::Free { .. } => {
                if let Some(a) = live[slot].take() {
                    set.free(a);
                }
            }
        }
    }
    let elapsed = start.elapsed();
    let stats = set.stats();
    ReplayReport {
        events: events.len(),
        peak_allocated: stats.peak_allocated,
        peak_reserved: stats.peak_reserved,
        blocks_created: stats.blocks_created,
        ns_per_op: elapsed.as_nanos() as f64 / events.len().max(1) as f64,
        failures,
    }
}

/// Ids are whatever the caller chose (`parse_csv` numbers them densely, hand-made events
/// may not): numbers them densely, before any clock starts, so a replay indexes a vector
/// no larger than the events. Returns each event's slot (`None` for a free of an id never
/// allocated) and the number of slots.
fn dense_slots(events: &[TraceEvent]) -> (Vec<Option<usize>>, usize) {
    let mut dense: HashMap<u32, usize> = HashMap::new();
    let slots = events
        .iter()
        .map(|e| match *e {
            TraceEvent::Alloc { id, .. } => {
                let next = dense.len();
                Some(*dense.entry(id).or_insert(next))
            }
            TraceEvent::Free { id } => dense.get(&id).copied(),
        })
        .collect();
    (slots, dense.len())
}

/// Pure sub-allocator speed: replays `events` in one `A` of `capacity` bytes, with no
/// block policy, in the steady state of an allocator that lives as long as its program.
/// One-time setup stays out of the clock on both sides: the allocator is constructed
/// before it starts (offset-allocator's constructor initialises its whole node table),
/// and the trace is replayed once untimed first, everything left freed after it (a
/// `RangeAllocator` grows its node slab on first use, and the page faults of that growth
/// are a large share of a cold replay). So `ns_per_op` counts
/// only allocations and frees. `peak_reserved` is the capacity.
pub fn replay_in_one_block<A: SubAllocator>(
    events: &[TraceEvent],
    capacity: u64,
    align: u64,
) -> ReplayReport {
    let (slots, count) = dense_slots(events);
    let mut allocator = A::with_capacity(capacity);
    let mut live: Vec<Option<A::Handle>> = vec![None; count];
    let mut sizes = vec![0u64; count];
    one_block_pass(&mut allocator, events, &slots, &mut live, &mut sizes, align);
    for handle in live.iter_mut().filter_map(Option::take) {
        allocator.free(handle);
    }
    let start = Instant::now();
    let (peak, failures) =
        one_block_pass(&mut allocator, events, &slots, &mut live, &mut sizes, align);
    let elapsed = start.elapsed();
    ReplayReport {
        events: events.len(),
        peak_allocated: peak,
        peak_reserved: capacity,
        blocks_created: 1,
        ns_per_op: elapsed.as_nanos() as f64 / events.len().max(1) as f64,
        failures,
    }
}

/// One replay of `events` in `allocator`: returns the peak bytes allocated and the
/// allocations that failed. `live` and `sizes` are indexed by slot and start empty.
fn one_block_pass<A: SubAllocator>(
    allocator: &mut A,
    events: &[TraceEvent],
    slots: &[Option<usize>],
    live: &mut [Option<A::Handle>],
    sizes: &mut [u64],
    align: u64,
) -> (u64, u64) {
    let (mut allocated, mut peak, mut failures) = (0u64, 0u64, 0u64);
    for (e, slot) in events.iter().zip(slots) {
        let Some(slot) = *slot else { continue };
        match *e {
            TraceEvent::Alloc { size, .. } => match allocator.allocate(size, align) {
                Some((_, handle)) => {
                    if let Some(old) = live[slot].replace(handle) {
                        allocator.free(old);
                        allocated -= sizes[slot];
                    }
                    sizes[slot] = size;
                    allocated += size;
                    peak = peak.max(allocated);
                }
                None => failures += 1,
            },
            TraceEvent::Free { .. } => {
                if let Some(handle) = live[slot].take() {
                    allocator.free(handle);
                    allocated -= sizes[slot];
                }
            }
        }
    }
    (peak, failures)
}
