//! The block policy and the set of blocks it manages.
//!
//! A new shared block holds a sixteenth of what the shared blocks already hold (at least
//! `min_block`, at most `max_block`): growth is geometric, so a big app reaches the cap in
//! a few dozen blocks, but each step adds at most about 6 % to what is reserved, where
//! doubling could leave the newest, nearly empty block as large as all the others.
//!
//! Requests that are large *for the program* get a block of their own: at least the
//! policy's fixed threshold, or at least 1/`dedicated_share` of everything reserved (and
//! 512 KiB). A tensor that large in a shared block leaves a hole that small requests
//! split when it goes, and the next large one no longer fits: a fixed threshold alone
//! misses the large tensors of programs with small peaks (what each reserves over its
//! peak on the recorded traces at every scale is in BENCHMARKS.md, Allocator core).
//! Blocks dedicated by the share are exact (under a budget every byte counts); those over
//! the fixed threshold are rounded up to 1/64 of the request's power of two, so a tensor
//! that grows a little each step (a KV cache) finds last step's block big enough.
//!
//! Empty blocks stay cached for reuse until the owner trims them, or until reserving a new
//! block would push the total past its peak: then just enough of them are given back.
//!
//! # Invariants (checked by [`BlockSet::check_invariants`])
//! 1. `stats.blocks` is the number of live blocks, `stats.reserved` the sum of their sizes,
//!    and `shared_reserved` the sum of the sizes of those not dedicated.
//! 2. `stats.blocks_created - stats.blocks_released == stats.blocks`.
//! 3. Each live block's count of live ranges equals its sub-allocator's, and its
//!    sub-allocator keeps its own invariants (the range allocator's are in `tlsf.rs`).
//! 4. `stats.allocated` is zero when no block holds a live range, and never more than
//!    what the sub-allocators hold (each range is at least its request).
//! 5. The peaks are at least the current values.
//! 6. `refused` has an entry per slot of `blocks`; an empty slot or a dedicated block
//!    refuses every shared request, and a shared block at least every request larger
//!    than itself ([`Refused`]).

use super::{AllocError, RangeAllocator, RangeHandle};

/// A sub-allocator that manages ranges inside one block. [`RangeAllocator`] is the one
/// vramkit uses; the trace replay also plugs in other crates to compare under the same
/// policy.
pub trait SubAllocator {
    /// Handle that frees an allocation.
    type Handle: Copy;
    /// A sub-allocator over `capacity` bytes.
    fn with_capacity(capacity: u64) -> Self;
    /// The smallest capacity whose allocator can serve one request of `size` bytes. Exact
    /// by default; allocators that round requests up a size class say how far, so blocks
    /// are sized for them instead of retried larger.
    fn min_capacity(size: u64) -> u64 {
        size
    }
    /// Allocates `size` bytes aligned to `align`, or `None` when no range fits.
    fn allocate(&mut self, size: u64, align: u64) -> Option<(u64, Self::Handle)>;
    /// Frees an allocation; false when the handle is not live here (already freed, or
    /// from another allocator), in which case nothing changed.
    fn free(&mut self, handle: Self::Handle) -> bool;
    /// Live allocations and the bytes they hold, where the allocator counts them.
    fn usage(&self) -> Option<(usize, u64)> {
        None
    }
    /// Checks the allocator's own invariants; a description of the first broken one.
    fn check_invariants(&self) -> Result<(), String> {
        Ok(())
    }
}

impl SubAllocator for RangeAllocator {
    type Handle = RangeHandle;
    fn with_capacity(capacity: u64) -> Self {
        RangeAllocator::new(capacity)
    }
    fn allocate(&mut self, size: u64, align: u64) -> Option<(u64, RangeHandle)> {
        RangeAllocator::try_allocate(self, size, align).map(|r| (r.offset, r.handle))
    }
    fn free(&mut self, handle: RangeHandle) -> bool {
        // Stamped handles: a stale or foreign one is rejected, not misread.
        RangeAllocator::free(self, handle).is_ok()
    }
    fn usage(&self) -> Option<(usize, u64)> {
        Some((self.allocation_count(), self.used_bytes()))
    }
    fn check_invariants(&self) -> Result<(), String> {
        RangeAllocator::check_invariants(self)
    }
}

/// Which of `empties` (`(size, _)`, sorted by size, not empty) to give back towards
/// closing a gap of `gap` bytes: the smallest that closes it alone, else the largest.
pub(crate) fn pick_to_close<T>(empties: &[(u64, T)], gap: u64) -> usize {
    empties
        .iter()
        .position(|e| e.0 >= gap)
        .unwrap_or(empties.len() - 1)
}

/// A new shared block is this fraction (1/N) of the shared bytes already reserved.
const GROWTH_DIVISOR: u64 = 16;
/// Below this, a request shares a block whatever [`BlockPolicy::dedicated_share`] says: a
/// buffer per half-MiB tensor costs more than the fragments it saves.
const MIN_SHARE_DEDICATED: u64 = 512 << 10;
/// A dedicated block is rounded up to a multiple of 1/N of the request's power of two.
const DEDICATED_ROUNDING: u64 = 64;

/// How blocks are sized and when a request gets its own block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockPolicy {
    /// Size of the first shared block.
    pub min_block: u64,
    /// Largest shared block; also the largest request a shared block serves.
    pub max_block: u64,
    /// Requests of at least this many bytes get a dedicated block.
    pub dedicated_threshold: u64,
    /// Requests of at least 1/N of the bytes reserved get a dedicated block too (if at
    /// least 512 KiB); 0 turns this off. Large tensors then never fragment the shared
    /// blocks, whatever the program's scale (see the module docs).
    pub dedicated_share: u64,
    /// Dedicated blocks of at least `dedicated_threshold` bytes are rounded up to a
    /// multiple of this (and of 1/64 of the request's power of two); those dedicated by
    /// their share are exact.
    pub dedicated_granularity: u64,
    /// Give cached empty blocks back before reserving a new one that would raise reserved
    /// memory past its peak: just enough of them that the peak holds, if they can.
    /// Keeps the peak near the live peak; below it, empty blocks stay cached for reuse.
    pub release_empty_before_grow: bool,
}

impl BlockPolicy {
    /// The arena's default policy for a device whose largest storage binding is
    /// `max_binding` bytes: shared blocks from 4 MiB growing to min(256 MiB, max_binding),
    /// dedicated blocks for requests of an eighth of the cap or of 1/384 of what is
    /// reserved, whichever is smaller.
    pub fn for_max_binding(max_binding: u64) -> Self {
        let max_block = (256u64 << 20).min(max_binding.max(1 << 20));
        BlockPolicy {
            min_block: (4u64 << 20).min(max_block),
            max_block,
            dedicated_threshold: max_block / 8,
            // Swept from 256 to 1024 over 22 scales of the first twelve traces (peaks of
            // 100 MiB-60 GiB): 256 left 25 replays over 1.05, 320 left 9, 384 none; 768
            // none either, with a third more blocks.
            dedicated_share: 384,
            dedicated_granularity: 64 << 10,
            release_empty_before_grow: true,
        }
    }

    /// Whether a request of `size` bytes gets a dedicated block while `reserved` bytes
    /// are reserved.
    pub fn is_dedicated(&self, size: u64, reserved: u64) -> bool {
        size >= self.dedicated_threshold
            || size > self.max_block
            || (self.dedicated_share > 0
                && size >= MIN_SHARE_DEDICATED
                && size >= reserved / self.dedicated_share)
    }

    /// The size of a dedicated block for `need` bytes aligned to `align`. A request
    /// dedicated by its share alone gets exactly its size: such blocks are small, and
    /// under a budget rounding them would cost whole requests. Larger ones are rounded
    /// to the granularity and to 1/64 of their power of two, so a tensor that grows a
    /// little each step finds the block it left big enough.
    fn dedicated_block_size(&self, need: u64, align: u64) -> u64 {
        if need < self.dedicated_threshold && need <= self.max_block {
            return need.next_multiple_of(align);
        }
        let power = 1u64 << (63 - need.leading_zeros());
        let granule = self
            .dedicated_granularity
            .max(power / DEDICATED_ROUNDING)
            .max(align);
        need.next_multiple_of(granule)
    }
}

impl Default for BlockPolicy {
    fn default() -> Self {
        Self::for_max_binding(u64::MAX)
    }
}

/// Identifies a block in a [`BlockSet`]; stable while the block lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(pub u32);

/// Where an allocation landed. Neither `Copy` nor `Clone`, and (outside this crate) made
/// only by [`BlockSet::allocate`]: [`BlockSet::free`] takes it by value, so freeing one
/// twice does not compile.
#[derive(Debug)]
#[non_exhaustive]
pub struct BlockAlloc<H> {
    /// The block.
    pub block: BlockId,
    /// Byte offset inside the block.
    pub offset: u64,
    /// Bytes requested.
    pub size: u64,
    /// Sub-allocator handle.
    pub handle: H,
}

/// Totals of a [`BlockSet`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockSetStats {
    /// Bytes in live allocations (as requested).
    pub allocated: u64,
    /// Bytes held in blocks.
    pub reserved: u64,
    /// Peak of `allocated`.
    pub peak_allocated: u64,
    /// Peak of `reserved`.
    pub peak_reserved: u64,
    /// Blocks currently held.
    pub blocks: usize,
    /// Blocks ever created.
    pub blocks_created: u64,
    /// Blocks given back.
    pub blocks_released: u64,
}

/// The smallest shared request a block refused since its last free (with its
/// alignment): allocations only take free space away, so until a range of the block is
/// freed it refuses any request at least that large and at least that aligned, and the
/// search of the existing blocks passes it over without touching it. Kept apart from the
/// blocks, eight of them to a cache line: a defragmentation's request walked some hundred
/// full blocks, each a sub-allocator in its own cache lines (callgrind on lavapipe: 55 %
/// of a pass's planning).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Refused {
    size: u64,
    align: u64,
}

impl Refused {
    /// Refuses every request: an empty slot, or a dedicated block (never shared).
    const ALL: Refused = Refused { size: 0, align: 0 };

    /// What a block refuses as long as nothing is known of its free space: requests
    /// larger than itself (shared blocks), everything (dedicated ones).
    fn fresh<A>(block: &Block<A>) -> Refused {
        if block.dedicated {
            return Refused::ALL;
        }
        Refused {
            size: block.size.saturating_add(1),
            align: 1,
        }
    }

    /// Whether a request of `size` bytes at `align` is known to be refused.
    #[inline(always)]
    fn covers(self, size: u64, align: u64) -> bool {
        size >= self.size && align >= self.align
    }

    /// Notes a refusal of `size` at `align` (the smaller refusal is the one kept).
    fn note(&mut self, size: u64, align: u64) {
        if size < self.size {
            *self = Refused { size, align };
        }
    }
}

struct Block<A> {
    allocator: A,
    size: u64,
    dedicated: bool,
    live: usize,
    /// Being emptied by a defragmentation: no new range goes here.
    draining: bool,
}

/// A set of blocks run by a [`BlockPolicy`]; the caller backs each block with memory.
///
/// `allocate` calls `reserve(id, size)` when it needs a new block (the arena creates a
/// `wgpu::Buffer` there and may refuse with its own error), and `release(id)` for blocks
/// it gives back.
pub struct BlockSet<A: SubAllocator = RangeAllocator> {
    policy: BlockPolicy,
    blocks: Vec<Option<Block<A>>>,
    /// One per slot of `blocks`: what it is known to refuse ([`Refused`]).
    refused: Vec<Refused>,
    /// Bytes in shared (not dedicated) blocks: what the next shared block grows from.
    shared_reserved: u64,
    stats: BlockSetStats,
}

impl<A: SubAllocator> BlockSet<A> {
    /// An empty set.
    pub fn new(policy: BlockPolicy) -> Self {
        BlockSet {
            policy,
            blocks: Vec::new(),
            refused: Vec::new(),
            shared_reserved: 0,
            stats: BlockSetStats::default(),
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> &BlockPolicy {
        &self.policy
    }

    /// Current totals.
    pub fn stats(&self) -> BlockSetStats {
        self.stats
    }

    /// Resets the peaks to the current values.
    pub fn reset_peak(&mut self) {
        self.stats.peak_allocated = self.stats.allocated;
        self.stats.peak_reserved = self.stats.reserved;
    }

    /// The sub-allocator of a live block.
    pub fn block(&self, id: BlockId) -> Option<&A> {
        self.blocks
            .get(id.0 as usize)?
            .as_ref()
            .map(|b| &b.allocator)
    }

    /// `(id, size, dedicated, live allocations)` of every block.
    pub fn blocks(&self) -> impl Iterator<Item = (BlockId, u64, bool, usize)> + '_ {
        self.blocks.iter().enumerate().filter_map(|(i, b)| {
            b.as_ref()
                .map(|b| (BlockId(i as u32), b.size, b.dedicated, b.live))
        })
    }

    /// Allocates `size` bytes aligned to `align`, reserving a block through `reserve` when
    /// none has room, after giving back empty blocks through `release` if the policy says
    /// so. An error from `reserve` is returned unchanged and leaves the set as it was
    /// (except for empty blocks already released).
    pub fn allocate<E>(
        &mut self,
        size: u64,
        align: u64,
        reserve: impl FnMut(BlockId, u64) -> Result<(), E>,
        release: impl FnMut(BlockId),
    ) -> Result<BlockAlloc<A::Handle>, E>
    where
        E: From<AllocError>,
    {
        self.allocate_within(size, align, u64::MAX, reserve, release)
    }

    /// [`allocate`](Self::allocate) under a limit: a new shared block is no larger than
    /// `room` bytes (what a budget or quota has left), though never smaller than the
    /// request and its alignment. Geometric growth alone would stop a limit at about half
    /// of what it allows (the next doubled block no longer fits); sized to the room, live
    /// data can reach the limit minus one request's alignment and bin slack. `reserve`
    /// still decides whether a block that does not fit the room is refused.
    pub fn allocate_within<E>(
        &mut self,
        size: u64,
        align: u64,
        room: u64,
        reserve: impl FnMut(BlockId, u64) -> Result<(), E>,
        release: impl FnMut(BlockId),
    ) -> Result<BlockAlloc<A::Handle>, E>
    where
        E: From<AllocError>,
    {
        self.allocate_placed(size, align, room, false, reserve, release)
    }

    /// [`allocate_within`](Self::allocate_within), with `own`: in a dedicated block of
    /// its own whatever its size (an empty dedicated block, or a new one), which nothing
    /// else is placed in while it lives.
    pub fn allocate_placed<E>(
        &mut self,
        size: u64,
        align: u64,
        room: u64,
        own: bool,
        mut reserve: impl FnMut(BlockId, u64) -> Result<(), E>,
        mut release: impl FnMut(BlockId),
    ) -> Result<BlockAlloc<A::Handle>, E>
    where
        E: From<AllocError>,
    {
        if size == 0 {
            return Err(AllocError::ZeroSize.into());
        }
        if !align.is_power_of_two() || align > super::MAX_ALIGN {
            return Err(AllocError::BadAlignment { align }.into());
        }
        // Block sizes are computed from the request: keep that arithmetic in range.
        if size > super::MAX_CAPACITY {
            return Err(AllocError::TooLarge {
                size,
                capacity: super::MAX_CAPACITY,
            }
            .into());
        }
        let dedicated = own || self.is_dedicated(size);
        // Existing blocks of the right kind, smallest-first for dedicated reuse.
        if let Some(found) = self.try_existing(size, align, dedicated, own) {
            return Ok(found);
        }
        let need = A::min_capacity(size).max(size);
        let block_size = if dedicated {
            self.policy.dedicated_block_size(need, align)
        } else {
            self.shared_block_size(need, align, room)
        };
        if self.policy.release_empty_before_grow {
            // Saturating: a dedicated block near u64::MAX is refused just below, after
            // the empty blocks went back; the sum must not overflow before that.
            let over_peak = (self.stats.reserved.saturating_add(block_size))
                .saturating_sub(self.stats.peak_reserved);
            self.release_empty_for(over_peak, &mut release);
        }
        // A retry below may ask for an eighth more: the totals must stay countable.
        let headroom = u64::MAX - self.stats.reserved;
        if block_size.saturating_add(block_size / 8 + align) > headroom {
            return Err(AllocError::TooLarge {
                size,
                capacity: headroom,
            }
            .into());
        }
        let id = self.free_slot();
        reserve(id, block_size)?;
        let mut allocator = A::with_capacity(block_size);
        let mut placed = allocator.allocate(size, align);
        let mut block_size = block_size;
        if placed.is_none() {
            // A sub-allocator that rounds requests up a size class (offset-allocator does)
            // cannot fill a block exactly; give it one size class (12.5 %) of room.
            release(id);
            block_size += block_size / 8 + align;
            reserve(id, block_size)?;
            allocator = A::with_capacity(block_size);
            placed = allocator.allocate(size, align);
        }
        let Some((offset, handle)) = placed else {
            release(id);
            return Err(AllocError::TooLarge {
                size,
                capacity: block_size,
            }
            .into());
        };
        self.insert_block(
            id,
            Block {
                allocator,
                size: block_size,
                dedicated,
                live: 1,
                draining: false,
            },
        );
        self.note_alloc(size);
        Ok(BlockAlloc {
            block: id,
            offset,
            size,
            handle,
        })
    }

    fn try_existing(
        &mut self,
        size: u64,
        align: u64,
        dedicated: bool,
        own: bool,
    ) -> Option<BlockAlloc<A::Handle>> {
        let slack = self.policy.dedicated_granularity;
        let index = if dedicated {
            // Reuse the smallest empty block at most an eighth (plus one granule) larger:
            // a quarter left up to 20 % of such a block unused. An empty shared block
            // serves too (nothing else is in it), rather than go and make way for a new one.
            self.blocks
                .iter()
                .enumerate()
                .filter_map(|(i, b)| b.as_ref().map(|b| (i, b)))
                .filter(|(_, b)| b.live == 0 && !b.draining && (b.dedicated || !own))
                .filter(|(_, b)| b.size >= size && b.size <= size + size / 8 + slack)
                .min_by_key(|(_, b)| b.size)
                .map(|(i, _)| i)?
        } else {
            // Shared blocks in creation order: older blocks fill up first, so the newest
            // (largest) block is the one that empties and can be trimmed.
            let mut hit = None;
            for (i, refused) in self.refused.iter_mut().enumerate() {
                if refused.covers(size, align) {
                    continue;
                }
                let Some(Some(b)) = self.blocks.get_mut(i) else {
                    continue;
                };
                if b.draining {
                    continue;
                }
                match b.allocator.allocate(size, align) {
                    Some(found) => {
                        hit = Some((i, found));
                        break;
                    }
                    None => refused.note(size, align),
                }
            }
            let (i, (offset, handle)) = hit?;
            if let Some(b) = self.blocks[i].as_mut() {
                b.live += 1;
            }
            self.note_alloc(size);
            return Some(BlockAlloc {
                block: BlockId(i as u32),
                offset,
                size,
                handle,
            });
        };
        let b = self.blocks[index].as_mut()?;
        let (offset, handle) = b.allocator.allocate(size, align)?;
        b.live += 1;
        self.note_alloc(size);
        Some(BlockAlloc {
            block: BlockId(index as u32),
            offset,
            size,
            handle,
        })
    }

    /// A new shared block for a request of `need` bytes: the geometric schedule's size,
    /// made a whole number of such requests (each takes `need` rounded up to `align`), so
    /// a steady stream of one size leaves no tail in any block; within `room` when the
    /// schedule would cross it (a budget or quota then fills to its last request), and
    /// within `max_block`; never less than one request (then `reserve` decides).
    fn shared_block_size(&self, need: u64, align: u64, room: u64) -> u64 {
        let unit = need.next_multiple_of(align);
        let grown = self.next_shared_size(unit);
        let cap = self.policy.max_block.max(unit).min(room.max(unit));
        let whole = grown.div_ceil(unit).saturating_mul(unit);
        if whole <= cap {
            whole
        } else {
            (cap / unit * unit).max(unit)
        }
    }

    /// A sixteenth of the shared bytes reserved, in whole MiB, within the policy's bounds,
    /// and at least `need` (see the module docs).
    fn next_shared_size(&self, need: u64) -> u64 {
        let grown = (self.shared_reserved / GROWTH_DIVISOR)
            .next_multiple_of(1 << 20)
            .clamp(
                self.policy.min_block,
                self.policy.max_block.max(self.policy.min_block),
            );
        grown.max(need)
    }

    /// Whether a request of `size` bytes gets a dedicated block now (see
    /// [`BlockPolicy::is_dedicated`]).
    pub fn is_dedicated(&self, size: u64) -> bool {
        self.policy.is_dedicated(size, self.stats.reserved)
    }

    /// Gives back empty blocks until `bytes` are released or none is left: the smallest
    /// that releases enough alone, else the largest first.
    fn release_empty_for(&mut self, bytes: u64, release: &mut impl FnMut(BlockId)) {
        if bytes == 0 {
            return;
        }
        let mut empties = self.empty_blocks();
        empties.sort_unstable();
        let mut released = 0;
        while released < bytes && !empties.is_empty() {
            let (_, i) = empties.remove(pick_to_close(&empties, bytes - released));
            released += self.drop_block(i, release);
        }
    }

    /// `(size, slot)` of every empty block.
    fn empty_blocks(&self) -> Vec<(u64, usize)> {
        self.blocks
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.as_ref().filter(|b| b.live == 0).map(|b| (b.size, i)))
            .collect()
    }

    /// Releases the empty block in slot `i` and tells `release`; returns its size.
    fn drop_block(&mut self, i: usize, release: &mut impl FnMut(BlockId)) -> u64 {
        let id = BlockId(i as u32);
        let Some(size) = self.release_block(id) else {
            return 0;
        };
        release(id);
        size
    }

    fn note_alloc(&mut self, size: u64) {
        self.stats.allocated += size;
        self.stats.peak_allocated = self.stats.peak_allocated.max(self.stats.allocated);
    }

    fn free_slot(&self) -> BlockId {
        let i = self
            .blocks
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.blocks.len());
        BlockId(i as u32)
    }

    /// Reserves an empty shared block of exactly `block_size` bytes through `reserve`
    /// (for a repacking that fills it with [`allocate_in`](Self::allocate_in)); the
    /// growth schedule is not consulted.
    pub fn reserve_block<E>(
        &mut self,
        block_size: u64,
        reserve: impl FnOnce(BlockId, u64) -> Result<(), E>,
    ) -> Result<BlockId, E>
    where
        E: From<AllocError>,
    {
        if block_size == 0 || block_size > super::MAX_CAPACITY {
            return Err(AllocError::TooLarge {
                size: block_size,
                capacity: super::MAX_CAPACITY,
            }
            .into());
        }
        let id = self.free_slot();
        reserve(id, block_size)?;
        self.insert_block(
            id,
            Block {
                allocator: A::with_capacity(block_size),
                size: block_size,
                dedicated: false,
                live: 0,
                draining: false,
            },
        );
        Ok(id)
    }

    /// Puts a block the caller just reserved into slot `id` ([`free_slot`](Self::free_slot))
    /// and counts it.
    fn insert_block(&mut self, id: BlockId, block: Block<A>) {
        if !block.dedicated {
            self.shared_reserved += block.size;
        }
        self.stats.blocks += 1;
        self.stats.blocks_created += 1;
        self.stats.reserved += block.size;
        self.stats.peak_reserved = self.stats.peak_reserved.max(self.stats.reserved);
        let refused = Refused::fresh(&block);
        if (id.0 as usize) == self.blocks.len() {
            self.blocks.push(Some(block));
            self.refused.push(refused);
        } else {
            self.blocks[id.0 as usize] = Some(block);
            self.refused[id.0 as usize] = refused;
        }
    }

    /// Allocates `size` bytes aligned to `align` in block `id` only; `None` when it has no
    /// room (or is not a live block).
    pub fn allocate_in(
        &mut self,
        id: BlockId,
        size: u64,
        align: u64,
    ) -> Option<BlockAlloc<A::Handle>> {
        let b = self.blocks.get_mut(id.0 as usize)?.as_mut()?;
        let (offset, handle) = b.allocator.allocate(size, align)?;
        b.live += 1;
        self.note_alloc(size);
        Some(BlockAlloc {
            block: id,
            offset,
            size,
            handle,
        })
    }

    /// Allocates `size` bytes aligned to `align` in the free space of an existing shared
    /// block that is not draining, oldest block first, as [`allocate`](Self::allocate)
    /// tries before it grows; `None` when none has room, changing nothing (no block is
    /// reserved or given back). A size that would get a dedicated block finds none.
    pub fn allocate_existing(&mut self, size: u64, align: u64) -> Option<BlockAlloc<A::Handle>> {
        if size == 0 || !align.is_power_of_two() || align > super::MAX_ALIGN {
            return None;
        }
        if self.is_dedicated(size) {
            return None;
        }
        self.try_existing(size, align, false, false)
    }

    /// Marks block `id` as being emptied (`on`) or not: while it drains, no new range is
    /// placed in it, so moving its allocations elsewhere leaves it empty. Returns false
    /// when `id` is not a live block.
    pub fn set_draining(&mut self, id: BlockId, on: bool) -> bool {
        match self.blocks.get_mut(id.0 as usize) {
            Some(Some(b)) => {
                b.draining = on;
                true
            }
            _ => false,
        }
    }

    /// Whether block `id` is draining ([`set_draining`](Self::set_draining)); false for
    /// an id that is not a live block.
    pub fn is_draining(&self, id: BlockId) -> bool {
        matches!(self.blocks.get(id.0 as usize), Some(Some(b)) if b.draining)
    }

    /// Frees an allocation made by [`allocate`](Self::allocate). Empty blocks stay cached.
    /// Returns false, changing nothing, when `alloc` is not live in this set (made by
    /// another set, or its block was released).
    pub fn free(&mut self, alloc: BlockAlloc<A::Handle>) -> bool {
        let Some(Some(b)) = self.blocks.get_mut(alloc.block.0 as usize) else {
            return false;
        };
        if b.live == 0 || !b.allocator.free(alloc.handle) {
            return false;
        }
        b.live -= 1;
        self.refused[alloc.block.0 as usize] = Refused::fresh(b);
        self.stats.allocated -= alloc.size;
        true
    }

    /// Gives back block `id` if it is empty; returns its bytes (`None`: not an empty block
    /// of this set).
    pub fn release_block(&mut self, id: BlockId) -> Option<u64> {
        let slot = self.blocks.get_mut(id.0 as usize)?;
        if slot.as_ref()?.live != 0 {
            return None;
        }
        let b = slot.take()?;
        self.refused[id.0 as usize] = Refused::ALL;
        if !b.dedicated {
            self.shared_reserved -= b.size;
        }
        self.stats.reserved -= b.size;
        self.stats.blocks -= 1;
        self.stats.blocks_released += 1;
        Some(b.size)
    }

    /// Checks every invariant in the module docs; returns a description of the first one
    /// broken. Cost: linear in the blocks and their ranges (a test and `heavy-checks` tool).
    pub fn check_invariants(&self) -> Result<(), String> {
        let live: Vec<(usize, &Block<A>)> = self
            .blocks
            .iter()
            .enumerate()
            .filter_map(|(i, b)| Some((i, b.as_ref()?)))
            .collect();
        let reserved: u64 = live.iter().map(|(_, b)| b.size).sum();
        let shared: u64 = live
            .iter()
            .filter(|(_, b)| !b.dedicated)
            .map(|(_, b)| b.size)
            .sum();
        let s = &self.stats;
        if s.blocks != live.len() || s.reserved != reserved || self.shared_reserved != shared {
            return Err(format!(
                "1: counted {} blocks, {} reserved, {} shared; the blocks say {}, {}, {}",
                s.blocks,
                s.reserved,
                self.shared_reserved,
                live.len(),
                reserved,
                shared
            ));
        }
        if s.blocks_created.checked_sub(s.blocks_released) != Some(s.blocks as u64) {
            return Err(format!(
                "2: {} blocks created, {} released, {} live",
                s.blocks_created, s.blocks_released, s.blocks
            ));
        }
        let mut held = Some(0u64);
        for (i, b) in &live {
            b.allocator
                .check_invariants()
                .map_err(|e| format!("3: block {i}: {e}"))?;
            match b.allocator.usage() {
                Some((count, bytes)) => {
                    if count != b.live {
                        return Err(format!(
                            "3: block {i} counts {} live ranges, its allocator {count}",
                            b.live
                        ));
                    }
                    held = held.map(|h| h + bytes);
                }
                None => held = None,
            }
        }
        let any_live = live.iter().any(|(_, b)| b.live > 0);
        if (!any_live && s.allocated != 0) || held.is_some_and(|h| s.allocated > h) {
            return Err(format!(
                "4: {} bytes allocated; ranges live: {any_live}, held by allocators: {held:?}",
                s.allocated
            ));
        }
        if s.peak_allocated < s.allocated || s.peak_reserved < s.reserved {
            return Err(format!(
                "5: peaks {} / {} below current {} / {}",
                s.peak_allocated, s.peak_reserved, s.allocated, s.reserved
            ));
        }
        if self.refused.len() != self.blocks.len() {
            return Err(format!(
                "6: {} refusal hints for {} block slots",
                self.refused.len(),
                self.blocks.len()
            ));
        }
        for (i, (b, r)) in self.blocks.iter().zip(&self.refused).enumerate() {
            let right = match b {
                Some(b) if !b.dedicated => r.size <= b.size.saturating_add(1),
                _ => *r == Refused::ALL,
            };
            if !right {
                return Err(format!("6: block slot {i} refuses {r:?}"));
            }
        }
        Ok(())
    }

    /// Gives back empty blocks while more than `keep` bytes of empty blocks are cached,
    /// largest first. Returns the bytes released.
    pub fn release_empty(&mut self, keep: u64, mut release: impl FnMut(BlockId)) -> u64 {
        let mut empties = self.empty_blocks();
        let mut cached: u64 = empties.iter().map(|e| e.0).sum();
        empties.sort_unstable_by(|a, b| b.cmp(a));
        let mut released = 0;
        for (size, i) in empties {
            if cached <= keep {
                break;
            }
            cached -= size;
            released += self.drop_block(i, &mut release);
        }
        released
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each counter the checker reads, broken on purpose, fails it under its number.
    #[test]
    fn a_broken_counter_fails_the_check() {
        let fresh = || {
            let mut set: BlockSet = BlockSet::new(BlockPolicy::default());
            let a = set
                .allocate::<AllocError>(4096, 256, |_, _| Ok(()), |_| {})
                .expect("an allocation in an empty set");
            assert_eq!(set.check_invariants(), Ok(()));
            (set, a)
        };
        type Edit = fn(&mut BlockSet);
        let breaks: [(&str, Edit); 5] = [
            ("1:", |s| s.stats.reserved += 256),
            ("1:", |s| s.shared_reserved += 256),
            ("2:", |s| s.stats.blocks_created += 1),
            ("3:", |s| s.blocks[0].as_mut().expect("block 0").live += 1),
            ("5:", |s| s.stats.peak_allocated = 0),
        ];
        for (number, break_it) in breaks {
            let (mut set, _a) = fresh();
            break_it(&mut set);
            let broken = set.check_invariants().expect_err("a broken counter passed");
            assert!(
                broken.starts_with(number),
                "{number} expected, got {broken}"
            );
        }
        let (mut set, a) = fresh();
        assert!(set.free(a));
        set.stats.allocated = 7;
        let broken = set
            .check_invariants()
            .expect_err("allocated bytes with nothing live");
        assert!(broken.starts_with("4:"), "{broken}");
    }
}
