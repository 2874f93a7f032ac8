//! Allocation traces: parse PyTorch-style `seq,action,addr,size` CSV and replay it through a
//! [`BlockSet`] under any [`SubAllocator`], measuring reserved-over-allocated and speed.

use std::collections::HashMap;
use std::io::BufRead;
use std::time::Instant;

use super::{AllocError, BlockPolicy, BlockSet, SubAllocator};

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
                next_id += 1;
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
    let max_id = events
        .iter()
        .map(|e| match e {
            TraceEvent::Alloc { id, .. } | TraceEvent::Free { id } => *id,
        })
        .max()
        .unwrap_or(0);
    let mut live = vec![None; max_id as usize + 1];
    let mut set: BlockSet<A> = BlockSet::new(policy.clone());
    let mut failures = 0;
    let start = Instant::now();
    for e in events {
        match *e {
            TraceEvent::Alloc { id, size } => {
                match set.allocate::<AllocError>(size, align, |_, _| Ok(()), |_| {}) {
                    Ok(a) => live[id as usize] = Some(a),
                    Err(_) => failures += 1,
                }
            }
            TraceEvent::Free { id } => {
                if let Some(a) = live[id as usize].take() {
                    set.free(&a);
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
