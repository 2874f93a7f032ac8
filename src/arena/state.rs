//! The arena's shared state: pools of blocks, live allocations, deferred frees, counters.
//!
//! Everything here runs under the arena's one mutex, and nothing here calls into wgpu in a
//! way that can run a callback: polls, waits and buffer destroys happen after the lock is
//! released (see `acquire.rs`).
//!
//! Its invariants, numbered, and their checker are in `invariants.rs`.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::alloc::{pick_to_close, BlockAlloc, BlockId, BlockSet, RangeHandle};
use crate::gpu::Epoch;

use super::allocation::Held;
use super::block::BlockBuffer;
use super::config::PoolConfig;
use super::history::{EventKind, HistoryRing};
use super::ready::{ReadyCache, ReadyKey, ReadyList};

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
    pub created: crate::gpu::clock::Stamp,
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
/// taken from placement to the range's return to its block ([`LiveRecord`]); `iter`
/// shows only the live ones. It keeps no count of them: the state's counters do
/// ([`State::live_allocations`]), and a count here was two more stores per alloc+free.
#[derive(Default)]
pub(crate) struct LiveSlab {
    slots: Vec<Option<LiveRecord>>,
    free: Vec<u32>,
}

impl LiveSlab {
    /// Files a live record; returns its slot.
    pub fn insert(&mut self, record: LiveRecord) -> u32 {
        debug_assert_eq!(record.phase, Phase::Live);
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

    /// Moves the record in `slot` from phase `from` to `to`; `None`, changing nothing,
    /// if the slot holds no record or one in another phase.
    #[inline(always)]
    pub fn set_phase(&mut self, slot: u32, from: Phase, to: Phase) -> Option<&mut LiveRecord> {
        let record = self.slots.get_mut(slot as usize)?.as_mut()?;
        if record.phase != from {
            return None;
        }
        record.phase = to;
        Some(record)
    }

    /// Empties a slot (the range went back to its block) and returns its record.
    pub fn remove(&mut self, slot: u32) -> Option<LiveRecord> {
        let record = self.slots.get_mut(slot as usize)?.take()?;
        debug_assert_ne!(
            record.phase,
            Phase::Live,
            "a live record leaves through forget_live"
        );
        self.free.push(slot);
        Some(record)
    }

    /// `(slot, record)` of every record, whatever its phase.
    pub fn records(&self) -> impl Iterator<Item = (u32, &LiveRecord)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, r)| Some((i as u32, r.as_ref()?)))
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
    /// Batches of pending records with the work-done epoch each waits for, oldest first.
    pub sealed: VecDeque<(Epoch, Vec<u32>)>,
    /// Bytes of the records in `sealed` (the rest of `counters.pending` is open).
    pub sealed_bytes: u64,
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
    /// so the hot path hashes a label once per allocation and never on free. Labels with
    /// nothing live are folded away (`labels.rs`).
    pub labels: rustc_hash::FxHashMap<Arc<str>, u32>,
    pub label_stats: Vec<(Arc<str>, LabelStats)>,
    /// The label interned last (most loops allocate under one label).
    pub last_label: u32,
    /// Indices of `label_stats` folded away, for the next new labels.
    pub free_labels: Vec<u32>,
    /// `label_stats` this long with no free index: look for labels to fold.
    pub label_sweep_at: usize,
    /// Labels folded away so far, and the largest peak among them.
    pub folded_labels: super::labels::Folded,
    /// Freed ranges the GPU is done with, by (pool, request size).
    pub ready: ReadyCache,
    /// Harvests that returned ranges; ages the ready lists.
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
    /// Ids of allocations handed out whose guards are not queued yet (guard bytes on;
    /// `guard::Fill`): at most one per thread allocating right now.
    pub guards_unfilled: Vec<u64>,
    /// The memory history, while recording (`Arena::record_history`).
    pub history: Option<Box<super::history::HistoryRing>>,
    /// The planned loop iteration running on this arena, if any (`planned.rs`).
    pub loop_hook: Option<Box<super::planned::LoopHook>>,
    /// Blocks held by planned loops (`planned.rs`).
    pub loop_blocks: Vec<super::planned::LoopBlock>,
}

/// Open frees of at least this many bytes make a batch ([`State::open_batch_full`])...
const SEAL_BYTES: u64 = 1 << 20;
/// ...as do this many frees of any size.
const SEAL_BATCH_MAX: usize = 4096;

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
            sealed_bytes: 0,
            live: LiveSlab::default(),
            next_id: 1,
            last_poll_at: 0,
            returned_alone_at_flush: 0,
            counters: Counters::default(),
            labels: Default::default(),
            label_stats: Vec::new(),
            last_label: u32::MAX,
            free_labels: Vec::new(),
            label_sweep_at: super::labels::LABELS_KEPT,
            folded_labels: Default::default(),
            ready: Default::default(),
            harvests: 0,
            stock: Vec::new(),
            closed: false,
            harvested: 0,
            doomed: Vec::new(),
            guards_unfilled: Vec::new(),
            history: None,
            loop_hook: None,
            loop_blocks: Vec::new(),
        }
    }

    /// Allocations handed out and not yet dropped. Every record filed is handed out
    /// (`Shared::hand_out` counts it in `allocations`) and every live record leaves
    /// through [`forget_live`](Self::forget_live) (counted in `frees`), which takes only
    /// live ones.
    pub fn live_allocations(&self) -> usize {
        (self.counters.allocations - self.counters.frees) as usize
    }

    pub fn reserved(&self) -> u64 {
        self.pools.iter().map(|p| p.set.stats().reserved).sum()
    }

    /// Makes the ready record in `slot` live for a new allocation of `size` bytes (its
    /// request size: cached ranges have no guards), under the next id, which it returns;
    /// `None` if the slot holds no record.
    #[inline(always)]
    pub fn revive(
        &mut self,
        slot: u32,
        size: u64,
        label: u32,
        created: crate::gpu::clock::Stamp,
        backtrace: Option<Box<std::backtrace::Backtrace>>,
    ) -> Option<u64> {
        let id = self.next_id;
        let record = self.live.set_phase(slot, Phase::Ready, Phase::Live)?;
        self.next_id += 1;
        record.id = id;
        record.created = created;
        // What a loop's reuse leaves as it was is not written again (see `note_alloc`):
        // the size is the list's, and the label and the absent backtrace most often too.
        debug_assert_eq!(record.size, size, "a ready list holds one request size");
        if record.size != size {
            record.size = size;
        }
        if record.label != label {
            record.label = label;
        }
        if backtrace.is_some() || record.backtrace.is_some() {
            record.backtrace = backtrace;
        }
        Some(id)
    }

    /// Takes the slot of a ready range of `size` bytes in `pool`, if one is cached. Its
    /// record is still [`Phase::Ready`]: the caller makes it live.
    #[inline(always)]
    pub fn take_ready(&mut self, pool: usize, size: u64) -> Option<u32> {
        let slot = self.ready.take((pool, size), self.harvests)?;
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
        self.ready.retain(|list| {
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

    #[inline(always)]
    pub fn note_alloc(&mut self, label: u32, size: u64) {
        // Peaks are written only when they move: every store here is one the next lock
        // operation waits for, and in a steady loop the peaks stay put.
        let c = &mut self.counters;
        c.allocations += 1;
        c.allocated += size;
        if c.allocated > c.peak_allocated {
            c.peak_allocated = c.allocated;
        }
        if c.allocated + c.pending > c.peak_active {
            c.peak_active = c.allocated + c.pending;
        }
        if let Some((_, l)) = self.label_stats.get_mut(label as usize) {
            l.count += 1;
            l.bytes += size;
            if l.bytes > l.peak_bytes {
                l.peak_bytes = l.bytes;
            }
        }
    }

    /// The bookkeeping of a dropped allocation: its record stops being live (recorded as a
    /// free in the history, and [`Phase::Pending`] until the caller says where its range
    /// goes), and the counters and its label's totals lose its bytes. Returns the record;
    /// `None`, changing nothing, for a slot without a live record.
    #[inline(always)]
    pub fn forget_live(&mut self, slot: u32) -> Option<&mut LiveRecord> {
        let record = self.live.set_phase(slot, Phase::Live, Phase::Pending)?;
        let size = record.held.size();
        if let Some(h) = self.history.as_mut() {
            record_event(h, EventKind::Free, record);
        }
        self.counters.frees += 1;
        self.counters.allocated -= size;
        if let Some((_, l)) = self.label_stats.get_mut(record.label as usize) {
            l.count -= 1;
            l.bytes -= size;
        }
        Some(record)
    }

    /// Sends a dropped planned allocation's bytes back with its loop block
    /// (`planned.rs`), not through an epoch.
    #[cold]
    pub fn release_planned(&mut self, slot: u32) {
        let Some(pool) = self.live.get(slot).map(|r| r.pool) else {
            return;
        };
        if let Some(planned) = self.take_planned(slot) {
            self.forget_planned(pool, &planned);
        }
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

    /// Moves the open frees into a batch that waits for `epoch` (of the device's
    /// work-done tracker, `gpu/work_done.rs`): one that completes once all work submitted
    /// before the frees has finished. Returns false, sealing nothing, when none are open.
    /// Epochs never go down from one seal to the next (batches complete in order).
    pub fn seal_at(&mut self, epoch: Epoch) -> bool {
        if self.open.is_empty() {
            return false;
        }
        debug_assert!(self.sealed.back().is_none_or(|&(e, _)| e <= epoch));
        self.counters.seals += 1;
        // With no spare (more epochs in flight than are kept), the new vector starts at
        // the size a batch reaches: growing one from empty reallocated five times per
        // epoch, a tenth of a 256-byte pair's time on a loop that submits nothing.
        let spare = self
            .spare_epochs
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(super::SEAL_BATCH));
        let frees = std::mem::replace(&mut self.open, spare);
        self.sealed.push_back((epoch, frees));
        self.sealed_bytes = self.counters.pending;
        true
    }

    /// Whether frees are open (freed since the last seal).
    #[inline]
    pub fn has_open(&self) -> bool {
        !self.open.is_empty()
    }

    /// The open frees make a batch worth its own epoch while others are in flight:
    /// [`SEAL_BATCH`](super::SEAL_BATCH) of them holding [`SEAL_BYTES`] or more, or
    /// [`SEAL_BATCH_MAX`] of any size. Small frees wait for more: an epoch costs a
    /// completion callback, and holding a few more small ranges back costs nothing.
    #[inline]
    pub fn open_batch_full(&self) -> bool {
        let n = self.open.len();
        n >= super::SEAL_BATCH
            && (n >= SEAL_BATCH_MAX || self.counters.pending - self.sealed_bytes >= SEAL_BYTES)
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
            let (pools, ready, live) = (&mut self.pools, &mut self.ready, &mut self.live);
            // Frees of a loop come in runs of one size: one lookup per run, not per free.
            let mut run: Option<(ReadyKey, usize)> = None;
            // Summed here and counted once per epoch, not once per free.
            let (mut freed, mut cached) = (0, 0);
            for slot in frees.drain(..) {
                n += 1;
                let Some(record) = live.get_mut(slot) else {
                    continue;
                };
                let size = record.placed_size();
                freed += size;
                let Some(class) = record.class else {
                    return_to_block(live, pools, slot);
                    continue;
                };
                record.phase = Phase::Ready;
                cached += size;
                let key = (record.pool, class);
                let at = match run {
                    Some((k, at)) if k == key => at,
                    _ => ready.list_for(key, used_at),
                };
                ready.push(at, slot);
                run = Some((key, at));
            }
            self.counters.pending -= freed;
            self.sealed_bytes -= freed;
            self.counters.cached += cached;
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

/// Appends `kind` for `record` to the memory history.
#[inline(always)]
pub(crate) fn record_event(h: &mut HistoryRing, kind: EventKind, r: &LiveRecord) {
    let block = r.block().0;
    h.push(
        kind,
        r.id,
        r.placed_size(),
        r.label,
        r.pool,
        block,
        r.offset,
    );
}
