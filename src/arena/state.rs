//! The arena's shared state: pools of blocks, live allocations, deferred frees, counters.
//!
//! Everything here runs under the arena's one mutex; GPU calls made while holding it never
//! wait on callbacks that take it (the completion callback only touches an atomic).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::alloc::{BlockAlloc, BlockId, BlockSet, RangeHandle};

use super::block::BlockBuffer;
use super::config::PoolConfig;

pub(crate) type Placed = BlockAlloc<RangeHandle>;

/// A pool: its own block set and the wgpu buffers behind the blocks.
pub(crate) struct Pool {
    pub name: String,
    pub config: PoolConfig,
    pub set: BlockSet,
    /// One `Arc` per block, so an allocation holds its buffer with one atomic increment.
    pub buffers: Vec<Option<Arc<BlockBuffer>>>,
    pub alignment: u64,
}

impl Pool {
    pub fn buffer(&self, id: BlockId) -> Option<&Arc<BlockBuffer>> {
        self.buffers.get(id.0 as usize)?.as_ref()
    }

    pub fn largest_free(&self) -> u64 {
        self.set
            .blocks()
            .filter_map(|(id, ..)| self.set.block(id).map(|a| a.largest_free()))
            .max()
            .unwrap_or(0)
    }
}

/// What the leak report and dumps know of a live allocation.
pub(crate) struct LiveRecord {
    pub id: u64,
    /// Index into `State::label_stats`.
    pub label: u32,
    pub size: u64,
    pub pool: usize,
    pub block: BlockId,
    /// Where the user range starts.
    pub offset: u64,
    /// Where the block range starts (before the leading guard).
    pub range_offset: u64,
    pub created: Instant,
    pub backtrace: Option<std::backtrace::Backtrace>,
}

/// A dropped allocation whose range waits for the GPU work submitted before the drop.
pub(crate) struct PendingFree {
    pub pool: usize,
    pub placed: Placed,
}

/// Per-label totals.
#[derive(Clone, Copy, Debug, Default)]
pub struct LabelStats {
    /// Live allocations with this label.
    pub count: u64,
    /// Live bytes with this label.
    pub bytes: u64,
    /// Peak of `bytes`.
    pub peak_bytes: u64,
}

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters {
    pub allocations: u64,
    pub frees: u64,
    pub retries: u64,
    pub ooms: u64,
    pub waits: u64,
    pub seals: u64,
    pub blocks_created: u64,
    pub blocks_released: u64,
    pub allocated: u64,
    pub peak_allocated: u64,
    pub pending: u64,
    pub peak_active: u64,
    pub peak_reserved: u64,
}

/// Live allocations in slots reused LIFO: O(1) insert and remove without hashing.
#[derive(Default)]
pub(crate) struct LiveSlab {
    slots: Vec<Option<LiveRecord>>,
    free: Vec<u32>,
    len: usize,
}

impl LiveSlab {
    pub fn insert(&mut self, record: LiveRecord) -> u32 {
        self.len += 1;
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Some(record);
                i
            }
            None => {
                self.slots.push(Some(record));
                (self.slots.len() - 1) as u32
            }
        }
    }

    pub fn remove(&mut self, slot: u32) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            if s.take().is_some() {
                self.len -= 1;
                self.free.push(slot);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `(id, record)` of every live allocation.
    pub fn iter(&self) -> impl Iterator<Item = (&u64, &LiveRecord)> {
        self.slots.iter().flatten().map(|r| (&r.id, r))
    }
}

pub(crate) struct State {
    pub pools: Vec<Pool>,
    pub open: Vec<PendingFree>,
    pub sealed: VecDeque<(u64, Vec<PendingFree>)>,
    pub next_epoch: u64,
    pub live: LiveSlab,
    pub next_id: u64,
    /// `counters.allocations` at the last poll made to reclaim frees before growing.
    pub last_poll_at: u64,
    pub counters: Counters,
    /// Label -> index into `label_stats`; labels are interned once and counted by index
    /// so the hot path hashes a label once per allocation and never on free.
    pub labels: rustc_hash::FxHashMap<Arc<str>, u32>,
    pub label_stats: Vec<(Arc<str>, LabelStats)>,
}

impl State {
    pub fn new() -> Self {
        State {
            pools: Vec::new(),
            open: Vec::new(),
            sealed: VecDeque::new(),
            next_epoch: 1,
            live: LiveSlab::default(),
            next_id: 1,
            last_poll_at: 0,
            counters: Counters::default(),
            labels: Default::default(),
            label_stats: Vec::new(),
        }
    }

    pub fn reserved(&self) -> u64 {
        self.pools.iter().map(|p| p.set.stats().reserved).sum()
    }

    pub fn intern(&mut self, label: &str) -> (Arc<str>, u32) {
        if let Some(&i) = self.labels.get(label) {
            return (self.label_stats[i as usize].0.clone(), i);
        }
        let k: Arc<str> = Arc::from(label);
        let i = self.label_stats.len() as u32;
        self.labels.insert(k.clone(), i);
        self.label_stats.push((k.clone(), LabelStats::default()));
        (k, i)
    }

    pub fn note_alloc(&mut self, label: u32, size: u64) {
        let c = &mut self.counters;
        c.allocations += 1;
        c.allocated += size;
        c.peak_allocated = c.peak_allocated.max(c.allocated);
        c.peak_active = c.peak_active.max(c.allocated + c.pending);
        let reserved = self.reserved();
        let c = &mut self.counters;
        c.peak_reserved = c.peak_reserved.max(reserved);
        if let Some((_, l)) = self.label_stats.get_mut(label as usize) {
            l.count += 1;
            l.bytes += size;
            l.peak_bytes = l.peak_bytes.max(l.bytes);
        }
    }

    /// Moves the open frees into a new epoch that completes once all work submitted so far
    /// has finished. Returns the epoch to register the completion callback for.
    pub fn seal(&mut self) -> Option<u64> {
        if self.open.is_empty() {
            return None;
        }
        let epoch = self.next_epoch;
        self.next_epoch += 1;
        self.counters.seals += 1;
        let frees = std::mem::take(&mut self.open);
        self.sealed.push_back((epoch, frees));
        Some(epoch)
    }

    /// Returns the ranges of every epoch up to `completed` to their blocks.
    pub fn harvest(&mut self, completed: u64) -> usize {
        let mut n = 0;
        while self.sealed.front().is_some_and(|(e, _)| *e <= completed) {
            let Some((_, frees)) = self.sealed.pop_front() else {
                break;
            };
            for f in frees {
                self.pools[f.pool].set.free(&f.placed);
                self.counters.pending -= f.placed.size;
                n += 1;
            }
        }
        n
    }

    /// Gives back empty blocks beyond `keep` bytes in every pool; returns bytes released.
    pub fn release_empty(&mut self, keep: u64) -> u64 {
        let mut total = 0;
        for pool in &mut self.pools {
            let mut gone = Vec::new();
            total += pool.set.release_empty(keep, |id| gone.push(id));
            for id in gone {
                if let Some(b) = pool.buffers.get_mut(id.0 as usize).and_then(Option::take) {
                    b.destroy();
                    self.counters.blocks_released += 1;
                }
            }
        }
        total
    }
}

/// Completion marker shared with wgpu's `on_submitted_work_done` callbacks.
#[derive(Default)]
pub(crate) struct Completion(AtomicU64);

impl Completion {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
    pub fn mark(&self, epoch: u64) {
        self.0.fetch_max(epoch, Ordering::AcqRel);
    }
}
