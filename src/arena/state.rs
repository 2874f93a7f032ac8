//! The arena's shared state: pools of blocks, live allocations, deferred frees, counters.
//!
//! Everything here runs under the arena's one mutex, and nothing here calls into wgpu in a
//! way that can run a callback: polls, waits and buffer destroys happen after the lock is
//! released (see `acquire.rs`).

use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::alloc::{pick_to_close, BlockAlloc, BlockId, BlockSet, RangeHandle};

use super::allocation::Held;
use super::block::BlockBuffer;
use super::config::PoolConfig;
use super::history::EventKind;

pub(crate) type Placed = BlockAlloc<RangeHandle>;

/// A pool: its own block set and the wgpu buffers behind the blocks.
pub(crate) struct Pool {
    pub name: String,
    pub config: PoolConfig,
    pub set: BlockSet,
    /// One `Arc` per block, so an allocation holds its buffer with one atomic increment.
    pub buffers: Vec<Option<Arc<BlockBuffer>>>,
    pub alignment: u64,
    /// Keep one empty block when giving empty blocks back (the kernels' parameter ring:
    /// recreating its block after every batch under a full budget would make it trade
    /// blocks with the allocations that need the room).
    pub keep_one: bool,
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

/// Where a record's range is in its life after placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Held by an [`super::Allocation`].
    Live,
    /// Dropped; waits in an epoch for the GPU work submitted before the drop.
    Pending,
    /// The GPU is done with it; cached in [`State::ready`] for a request of its size.
    Ready,
}

/// One range's record, kept from its placement until the range goes back to its block:
/// while an allocation holds it (what the leak report and dumps show), while its free
/// waits for the GPU, and while it waits in the ready cache. The range and its block's
/// buffer stay here throughout, so a free, a harvest and a reuse move only the record's
/// slot number (moving the range and its buffer from list to list took a third of an
/// alloc+free pair's time).
pub(crate) struct LiveRecord {
    pub phase: Phase,
    pub id: u64,
    /// Index into `State::label_stats`.
    pub label: u32,
    pub size: u64,
    pub pool: usize,
    /// Where the user range starts.
    pub offset: u64,
    /// Where the block range starts (before the leading guard).
    pub range_offset: u64,
    /// When it was allocated, from the coarse clock (a few ms resolution): reading it
    /// costs a fraction of `Instant::now` and this runs on every allocation.
    pub created: coarsetime::Instant,
    /// Boxed: the record is written on every allocation and backtraces are rare.
    pub backtrace: Option<Box<std::backtrace::Backtrace>>,
    /// The range in its block, or a planned allocation's place (`planned.rs`).
    pub held: Held,
    /// The buffer of its block. The allocation's handle points into it: the record keeps
    /// it alive for as long as the handle can exist.
    pub buffer: Arc<BlockBuffer>,
    /// The request size the range is cached under when freed ([`State::ready`]); `None`
    /// sends it back to its block.
    pub class: Option<u64>,
}

impl LiveRecord {
    /// Bytes the range takes in its block (guards included).
    pub fn placed_size(&self) -> u64 {
        self.held.size()
    }

    /// The block the range lies in.
    pub fn block(&self) -> BlockId {
        self.held.block()
    }

    /// A planned allocation's record (`planned.rs`), not a range of a block.
    pub fn is_planned(&self) -> bool {
        matches!(self.held, Held::Planned(_))
    }
}

/// A range with the buffer of its block, as the allocation path places it.
pub(crate) struct CachedRange {
    pub placed: Placed,
    pub buffer: Arc<BlockBuffer>,
}

/// Slots of freed records of one pool and request size whose ranges the GPU has
/// finished with, ready to be handed out again without touching the range allocator.
pub(crate) struct ReadyList {
    pub slots: Vec<u32>,
    /// `State::harvests` when a range was last taken; lists idle for two harvests go back
    /// to their blocks.
    pub used_at: u64,
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
    /// Bytes in [`State::ready`] lists.
    pub cached: u64,
}

/// Records in slots reused LIFO: O(1) insert and remove without hashing. A slot is
/// taken from placement to the range's return to its block ([`LiveRecord`]); `len` and
/// `iter` count and show only the live ones.
#[derive(Default)]
pub(crate) struct LiveSlab {
    slots: Vec<Option<LiveRecord>>,
    free: Vec<u32>,
    live: usize,
}

impl LiveSlab {
    /// Files a live record; returns its slot.
    pub fn insert(&mut self, record: LiveRecord) -> u32 {
        debug_assert_eq!(record.phase, Phase::Live);
        self.live += 1;
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

    pub fn get(&self, slot: u32) -> Option<&LiveRecord> {
        self.slots.get(slot as usize)?.as_ref()
    }

    pub fn get_mut(&mut self, slot: u32) -> Option<&mut LiveRecord> {
        self.slots.get_mut(slot as usize)?.as_mut()
    }

    /// Moves a record between phases, keeping the live count.
    pub fn set_phase(&mut self, slot: u32, phase: Phase) -> Option<&mut LiveRecord> {
        let record = self.slots.get_mut(slot as usize)?.as_mut()?;
        match (record.phase == Phase::Live, phase == Phase::Live) {
            (true, false) => self.live -= 1,
            (false, true) => self.live += 1,
            _ => {}
        }
        record.phase = phase;
        Some(record)
    }

    /// Empties a slot (the range went back to its block) and returns its record.
    pub fn remove(&mut self, slot: u32) -> Option<LiveRecord> {
        let record = self.slots.get_mut(slot as usize)?.take()?;
        if record.phase == Phase::Live {
            self.live -= 1;
        }
        self.free.push(slot);
        Some(record)
    }

    /// Live records.
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// `(id, record)` of every live allocation.
    pub fn iter(&self) -> impl Iterator<Item = (&u64, &LiveRecord)> {
        self.slots
            .iter()
            .flatten()
            .filter(|r| r.phase == Phase::Live)
            .map(|r| (&r.id, r))
    }
}

pub(crate) struct State {
    /// The budget in bytes (`None`: unlimited); `Arena::set_budget` changes it.
    pub budget: Option<u64>,
    pub pools: Vec<Pool>,
    /// Slots of records freed since the last seal ([`Phase::Pending`]).
    pub open: Vec<u32>,
    /// Emptied epoch vectors, kept for the next seals (`seal`, `harvest`).
    pub spare_epochs: Vec<Vec<u32>>,
    /// Epochs of pending records, oldest first.
    pub sealed: VecDeque<(u64, Vec<u32>)>,
    pub next_epoch: u64,
    pub live: LiveSlab,
    pub next_id: u64,
    /// `counters.allocations` at the last poll made to reclaim frees before growing.
    pub last_poll_at: u64,
    /// [`Completion::returned_alone`] after the last flushing poll
    /// (`Shared::poll_unlocked`): a higher count since means frees come back without the
    /// arena's polls (see `Shared::before_growing`).
    pub returned_alone_at_flush: u64,
    pub counters: Counters,
    /// Label -> index into `label_stats`; labels are interned once and counted by index
    /// so the hot path hashes a label once per allocation and never on free.
    pub labels: rustc_hash::FxHashMap<Arc<str>, u32>,
    pub label_stats: Vec<(Arc<str>, LabelStats)>,
    /// The label interned last (most loops allocate under one label).
    pub last_label: u32,
    /// Freed ranges the GPU is done with, by (pool, request size).
    pub ready: rustc_hash::FxHashMap<(usize, u64), ReadyList>,
    /// Harvests that returned ranges; ages [`ReadyList`]s.
    pub harvests: u64,
    /// Arena references given back by dropped allocations (see `Shared::release`). They
    /// point at the arena that owns this state, a cycle the arena's drop breaks by
    /// clearing the stock and setting `closed`.
    pub stock: Vec<Arc<super::Shared>>,
    pub closed: bool,
    /// Ranges collected by [`harvest`](Self::harvest) so far.
    pub harvested: u64,
    /// Blocks given back while the lock was held, destroyed once it is released
    /// (`Shared::unlock`): destroying a buffer may run a wgpu map callback.
    pub doomed: Vec<Arc<BlockBuffer>>,
    /// The memory history, while recording (`Arena::record_history`).
    pub history: Option<Box<super::history::HistoryRing>>,
    /// The planned loop iteration running on this arena, if any (`planned.rs`).
    pub loop_hook: Option<Box<super::planned::LoopHook>>,
    /// Blocks held by planned loops (`planned.rs`).
    pub loop_blocks: Vec<super::planned::LoopBlock>,
}

/// Emptied epoch vectors up to this capacity are kept for the next seals...
const MAX_SPARE_EPOCH: usize = 4096;
/// ...and at most this many of them.
const MAX_SPARE_EPOCHS: usize = 4;

/// At most this many arena references are kept in [`State::stock`].
pub(crate) const MAX_SPARES: usize = 1024;

impl State {
    pub fn new(budget: Option<u64>) -> Self {
        State {
            budget,
            pools: Vec::new(),
            open: Vec::new(),
            spare_epochs: Vec::new(),
            sealed: VecDeque::new(),
            next_epoch: 1,
            live: LiveSlab::default(),
            next_id: 1,
            last_poll_at: 0,
            returned_alone_at_flush: 0,
            counters: Counters::default(),
            labels: Default::default(),
            label_stats: Vec::new(),
            last_label: u32::MAX,
            ready: Default::default(),
            harvests: 0,
            stock: Vec::new(),
            closed: false,
            harvested: 0,
            doomed: Vec::new(),
            history: None,
            loop_hook: None,
            loop_blocks: Vec::new(),
        }
    }

    pub fn reserved(&self) -> u64 {
        self.pools.iter().map(|p| p.set.stats().reserved).sum()
    }

    /// The index of `label` in `label_stats`, and the label's text there, which lives as
    /// long as the state (labels are never removed): allocations point at it instead of
    /// counting references to it.
    pub fn intern(&mut self, label: &str) -> (NonNull<str>, u32) {
        let i = match self.label_stats.get(self.last_label as usize) {
            Some((l, _)) if **l == *label => self.last_label,
            _ => match self.labels.get(label) {
                Some(&i) => i,
                None => {
                    let k: Arc<str> = Arc::from(label);
                    let i = self.label_stats.len() as u32;
                    self.labels.insert(k.clone(), i);
                    self.label_stats.push((k, LabelStats::default()));
                    i
                }
            },
        };
        self.last_label = i;
        (NonNull::from(&*self.label_stats[i as usize].0), i)
    }

    /// Takes the slot of a ready range of `size` bytes in `pool`, if one is cached. Its
    /// record is still [`Phase::Ready`]: the caller makes it live.
    pub fn take_ready(&mut self, pool: usize, size: u64) -> Option<u32> {
        let list = self.ready.get_mut(&(pool, size))?;
        let slot = list.slots.pop()?;
        list.used_at = self.harvests;
        let bytes = self.live.get(slot).map_or(0, LiveRecord::placed_size);
        self.counters.cached -= bytes;
        Some(slot)
    }

    /// Returns every ready range to its block (before growing, trimming or failing: cached
    /// ranges must never be why the arena holds more memory).
    pub fn flush_ready(&mut self) -> usize {
        self.release_ready(|_| false)
    }

    /// Returns the ranges of every ready list `keep` rejects to their blocks and drops the
    /// list; returns how many ranges went back.
    fn release_ready(&mut self, keep: impl Fn(&ReadyList) -> bool) -> usize {
        let mut n = 0;
        let (pools, live) = (&mut self.pools, &mut self.live);
        let cached = &mut self.counters.cached;
        self.ready.retain(|_, list| {
            if keep(list) {
                return true;
            }
            for slot in list.slots.drain(..) {
                *cached -= return_to_block(live, pools, slot);
                n += 1;
            }
            false
        });
        n
    }

    pub fn note_alloc(&mut self, label: u32, size: u64) {
        let c = &mut self.counters;
        c.allocations += 1;
        c.allocated += size;
        c.peak_allocated = c.peak_allocated.max(c.allocated);
        c.peak_active = c.peak_active.max(c.allocated + c.pending);
        if let Some((_, l)) = self.label_stats.get_mut(label as usize) {
            l.count += 1;
            l.bytes += size;
            l.peak_bytes = l.peak_bytes.max(l.bytes);
        }
    }

    /// The bookkeeping of a dropped allocation: its record stops being live (recorded as a
    /// free in the history, and [`Phase::Pending`] until the caller says where its range
    /// goes), and the counters and its label's totals lose its bytes. Returns the record.
    pub fn forget_live(&mut self, slot: u32) -> Option<&mut LiveRecord> {
        let record = self.live.set_phase(slot, Phase::Pending)?;
        let size = record.held.size();
        if let Some(h) = self.history.as_mut() {
            let r = &*record;
            h.push(
                EventKind::Free,
                r.id,
                size,
                r.label,
                r.pool,
                r.block().0,
                r.offset,
            );
        }
        self.counters.frees += 1;
        self.counters.allocated -= size;
        if let Some((_, l)) = self.label_stats.get_mut(record.label as usize) {
            l.count -= 1;
            l.bytes -= size;
        }
        Some(record)
    }

    /// Empties the slot of a planned allocation's record (its bytes go back with its loop
    /// block, not through an epoch) and returns its place; `None`, leaving the slot, for a
    /// range of a block.
    pub fn take_planned(&mut self, slot: u32) -> Option<super::planned::PlannedRange> {
        if !self.live.get(slot)?.is_planned() {
            return None;
        }
        match self.live.remove(slot)?.held {
            Held::Planned(planned) => Some(planned),
            Held::Range(_) => None,
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
        let spare = self.spare_epochs.pop().unwrap_or_default();
        let frees = std::mem::replace(&mut self.open, spare);
        self.sealed.push_back((epoch, frees));
        Some(epoch)
    }

    /// Returns the ranges of every epoch up to `completed` to their blocks.
    #[inline]
    pub fn harvest(&mut self, completed: u64) -> usize {
        // Inlined test: on most allocations no epoch has completed since the last call.
        if self.sealed.front().is_some_and(|(e, _)| *e <= completed) {
            self.harvest_completed(completed)
        } else {
            0
        }
    }

    #[inline(never)]
    fn harvest_completed(&mut self, completed: u64) -> usize {
        let mut n = 0;
        while self.sealed.front().is_some_and(|(e, _)| *e <= completed) {
            let Some((_, mut frees)) = self.sealed.pop_front() else {
                break;
            };
            let used_at = self.harvests;
            let (pools, ready, counters) = (&mut self.pools, &mut self.ready, &mut self.counters);
            let live = &mut self.live;
            // Frees of a loop come in runs of one size: one lookup per run, not per free.
            let mut run: Option<((usize, u64), &mut ReadyList)> = None;
            for slot in frees.drain(..) {
                n += 1;
                let Some(record) = live.get_mut(slot) else {
                    continue;
                };
                let size = record.placed_size();
                counters.pending -= size;
                let Some(class) = record.class else {
                    return_to_block(live, pools, slot);
                    continue;
                };
                record.phase = Phase::Ready;
                counters.cached += size;
                let key = (record.pool, class);
                let list = match run.take() {
                    Some((k, list)) if k == key => list,
                    _ => ready.entry(key).or_insert_with(|| ReadyList {
                        slots: Vec::new(),
                        used_at,
                    }),
                };
                list.slots.push(slot);
                run = Some((key, list));
            }
            // The emptied vector serves the next epoch: no allocation per seal.
            if self.spare_epochs.len() < MAX_SPARE_EPOCHS && frees.capacity() <= MAX_SPARE_EPOCH {
                self.spare_epochs.push(frees);
            }
        }
        if n > 0 {
            self.harvests += 1;
            self.harvested += n as u64;
            self.age_ready();
        }
        n
    }

    /// Sends lists nobody took from in the last two harvests back to their blocks, so
    /// sizes a program stopped asking for do not stay reserved.
    fn age_ready(&mut self) {
        let now = self.harvests;
        self.release_ready(|list| list.used_at + 2 >= now);
    }

    /// Gives back empty blocks until the budget leaves room for a new block of `need`
    /// bytes: the smallest empty block that closes the gap alone, else the largest ones
    /// first. Empty blocks that are not in the way stay for the requests that fit them.
    /// Without a budget, every empty block goes. Returns bytes released.
    pub fn release_empty_for(&mut self, need: u64) -> u64 {
        let Some(budget) = self.budget else {
            return self.release_empty(0);
        };
        let mut empties: Vec<(u64, (usize, BlockId))> = Vec::new();
        for (index, p) in self.pools.iter().enumerate() {
            let mut pool_empties: Vec<(u64, (usize, BlockId))> = p
                .set
                .blocks()
                .filter(|b| b.3 == 0)
                .map(|(id, size, ..)| (size, (index, id)))
                .collect();
            if p.keep_one {
                pool_empties.sort_unstable();
                if !pool_empties.is_empty() {
                    pool_empties.remove(0);
                }
            }
            empties.extend(pool_empties);
        }
        empties.sort_unstable();
        let mut released = 0;
        loop {
            let gap = (self.reserved() + need).saturating_sub(budget);
            if gap == 0 || empties.is_empty() {
                break;
            }
            let (_, (pool, id)) = empties.remove(pick_to_close(&empties, gap));
            if let Some(bytes) = self.pools[pool].set.release_block(id) {
                self.retire_block(pool, id);
                released += bytes;
            }
        }
        released
    }

    /// Gives back empty blocks beyond `keep` bytes in every pool; returns bytes released.
    pub fn release_empty(&mut self, keep: u64) -> u64 {
        let mut total = 0;
        for index in 0..self.pools.len() {
            let mut gone = Vec::new();
            let p = &mut self.pools[index];
            let keep = if p.keep_one {
                keep.max(p.set.policy().min_block)
            } else {
                keep
            };
            total += p.set.release_empty(keep, |id| gone.push(id));
            for id in gone {
                self.retire_block(index, id);
            }
        }
        total
    }

    /// Puts the buffer of block `id` of `pool`, which its block set just created, beside
    /// it: counted, and recorded in the history.
    pub fn install_block(&mut self, pool: usize, id: BlockId, buffer: BlockBuffer) {
        let i = id.0 as usize;
        let p = &mut self.pools[pool];
        if p.buffers.len() <= i {
            p.buffers.resize_with(i + 1, || None);
        }
        if let Some(h) = self.history.as_mut() {
            h.push_block(EventKind::BlockCreate, buffer.buffer().size(), pool, id.0);
        }
        p.buffers[i] = Some(Arc::new(buffer));
        self.counters.blocks_created += 1;
        // Reserved bytes only grow here: the peak is kept here, not on every allocation.
        let reserved = self.reserved();
        let c = &mut self.counters;
        c.peak_reserved = c.peak_reserved.max(reserved);
    }

    /// Takes the buffer of block `id` of `pool`, which its block set just released: it is
    /// destroyed once the lock is released (`doomed`), counted, and recorded.
    pub fn retire_block(&mut self, pool: usize, id: BlockId) {
        let Some(b) = self.pools[pool]
            .buffers
            .get_mut(id.0 as usize)
            .and_then(Option::take)
        else {
            return;
        };
        if let Some(h) = self.history.as_mut() {
            h.push_block(EventKind::BlockRelease, b.buffer().size(), pool, id.0);
        }
        self.doomed.push(b);
        self.counters.blocks_released += 1;
    }
}

/// Empties `slot` and gives its range back to its block (a planned allocation's place
/// needs nothing: its bytes go back with the loop block). Returns the bytes the range
/// took, 0 for an empty slot.
pub(crate) fn return_to_block(live: &mut LiveSlab, pools: &mut [Pool], slot: u32) -> u64 {
    let Some(record) = live.remove(slot) else {
        return 0;
    };
    let size = record.placed_size();
    if let Held::Range(placed) = record.held {
        pools[record.pool].set.free(placed);
    }
    size
}

/// Completion marker shared with wgpu's `on_submitted_work_done` callbacks: the newest
/// epoch known complete, whether the allocation path's callback is armed
/// (`Shared::seal_lazily`), and how many armed callbacks ran outside the arena's own polls
/// (in the program's submits or polls).
#[derive(Default)]
pub(crate) struct Completion {
    done: AtomicU64,
    armed: AtomicBool,
    returned_alone: AtomicU64,
}

impl Completion {
    pub fn get(&self) -> u64 {
        self.done.load(Ordering::Acquire)
    }
    pub fn mark(&self, epoch: u64) {
        self.done.fetch_max(epoch, Ordering::AcqRel);
    }
    pub fn armed(&self) -> bool {
        self.armed.load(Ordering::Acquire)
    }
    pub fn set_armed(&self, armed: bool) {
        self.armed.store(armed, Ordering::Release);
    }
    pub fn returned_alone(&self) -> u64 {
        self.returned_alone.load(Ordering::Acquire)
    }
    pub fn note_returned_alone(&self) {
        self.returned_alone.fetch_add(1, Ordering::AcqRel);
    }
}
