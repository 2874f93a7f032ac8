//! `RangeAllocator`: an O(1) allocator of byte ranges inside one block. One concept in
//! one file, over 800 lines: the allocator, its two machine-code builds, its invariant
//! checker and its unit tests belong together.
//!
//! # Design
//! Free ranges are filed in segregated lists, one per size bin ([`super::bins`]); a 64-bit
//! top bitmap says which classes hold any free range and a `u8` per class says which of its
//! eight bins do, so finding a non-empty bin is two `trailing_zeros`. Every range, used or
//! free, is a node in a slab with links to its address-order neighbours, so a free merges
//! with free neighbours in O(1).
//!
//! An allocation reserves its size rounded up to its alignment. Otherwise a request of an
//! unaligned size (a quarter to two fifths of those in the generation and MoE traces)
//! leaves the free range after it unaligned, and the next request splits a padding range
//! off it: two more nodes and bin insertions, and a sliver of under 256 bytes in the bins.
//! Rounding wastes no more: the padding was as unusable to requests of that alignment,
//! and it made those traces' replays faster (BENCHMARKS.md, Allocator core).
//!
//! # Parked frees
//! A freed range with no free neighbour (nothing to merge it with yet) and at most 1/256
//! of the block is *parked* instead of filed: put on a short list under a slot chosen by
//! hashing its exact size. The next request of exactly that size, whose range would start
//! aligned, takes the latest range parked there, before any bin is searched. Programs free
//! and ask again for the same sizes over and over (a generation step, a training
//! iteration, a layer's activations): in the recorded traces most parked ranges are taken
//! again this way (one block, `examples/data`). A request that
//! finds its slot empty or holding another size costs a hash and a compare more.
//!
//! Parked ranges count as free everywhere: in [`RangeAllocator::free_bytes`], and merged
//! with their free neighbours in [`RangeAllocator::largest_free`],
//! [`RangeAllocator::free_range_count`] and [`RangeAllocator::for_each_range`], which
//! report what the allocator will have once they are merged. They are merged (*settled*)
//! before a request is refused, so a request is refused only when the merged free space
//! cannot hold it, exactly as without parking, and when a 513th would be parked. A
//! settle merges each parked range as `free` would have: at most 512 merges at once, the
//! same work deferred. Parking changes only where later ranges go: exact sizes come back
//! to their old place, much like PyTorch's caching allocator reuses a cached block of the
//! size asked for; what that does to peak reserved over peak allocated on the scaled
//! trace replays is in BENCHMARKS.md (Allocator core).
//!
//! Why: the generation traces hold few ranges at a time, so the filed path was already
//! bound by instructions (see "Machine code"); a parked range skips the bin arithmetic,
//! the bitmaps and the list links of both the free and the next allocation (the replay
//! speeds against offset-allocator are in BENCHMARKS.md, Allocator core). The cap of 512
//! was the fastest of 32, 128, 256 and 512 on the recorded traces: with a small cap,
//! ranges were settled before their size came back.
//!
//! # Machine code
//! `allocate` and `free` are never inlined into their callers, and an allocation's rare
//! paths (an exact fit or leading padding, no room, the boundary-bin scan) are functions
//! of their own. Inlined whole, `allocate` made the trace replay's loop slower than a lab
//! program that called it out of line: the loop's own code stays small and in registers.
//!
//! On x86-64 each hot path is compiled twice, and the allocator picks one at
//! construction: for CPUs with BMI1, BMI2 and LZCNT (every x86-64 CPU since 2013-2015,
//! the x86-64-v3 level) and for any other. The bin arithmetic and the bitmaps count
//! leading and trailing zeros and shift by a variable amount on every allocation and
//! free: one instruction each with those extensions, a zero test or several micro-ops
//! without them. The generation traces hold few ranges at a time (at most 82-396 live),
//! so every node is in the L1 cache and their replays are bound by instructions, not
//! misses, which the extensions cut. The price of both builds is a call per operation,
//! visible only in a loop that frees each range before the next allocation (`bench
//! alloc`'s lifo; BENCHMARKS.md, Allocator core). Both builds run the same source, so they
//! place every range identically (a unit test replays random requests through both and
//! compares).
//!
//! # Invariants (checked by [`RangeAllocator::check_invariants`])
//! 1. The nodes, in address order, tile `[0, capacity)` exactly: no gap, no overlap.
//! 2. No two address-adjacent nodes are both filed free (a filed free merges at once;
//!    a parked one merges when it is settled).
//! 3. A filed free node is in exactly the list of `bin_round_down(size)`; bitmaps mark
//!    exactly the non-empty lists, and the free bitmap marks exactly the filed free nodes.
//!    A parked node is in exactly the list of its size's slot, and at most 1/256 of the
//!    capacity.
//! 4. `used_bytes + free_bytes == capacity`, and the counters equal what the nodes say.
//! 5. A handle names a live used node only while its stamp matches: a stale, double or
//!    foreign free is an error, never corruption. Stamps are unique across every allocator
//!    in the process (each allocator takes runs of them from one atomic counter), so a
//!    handle from another allocator never matches; the 32-bit counter wraps only after
//!    four billion allocations process-wide, after which a stale handle would have to
//!    meet its own node holding exactly its old stamp to pass.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU32, Ordering};

use super::bins::{bin_round_down, bin_round_up, bin_size, BINS, SUB_BINS, TOP_BINS};
use super::AllocError;

const NONE: u32 = u32::MAX;
/// `bin_prev` of a used node: used nodes are in no bin, so the link carries the state and
/// the hot merge checks read one field of a 32-byte node.
const USED: u32 = u32::MAX - 1;
/// `bin_prev` of a released (spare) slot.
const DEAD: u32 = u32::MAX - 2;
/// `bin_prev` of a parked range (see the module docs, "Parked frees"); its `bin_next`
/// links the next range parked under the same slot.
const PARKED: u32 = u32::MAX - 3;
/// Slots of the parked ranges, by hash of the exact size.
const PARK_SLOTS: usize = 64;
/// Ranges parked at most: the next park first merges them all ([`RangeAllocator::settle`]).
const PARK_CAP: u32 = 512;
/// Smallest alignment and size granule: every offset and size is a multiple of this.
pub const MIN_ALIGN: u64 = 4;
/// Largest alignment accepted.
pub const MAX_ALIGN: u64 = 64 * 1024;
/// Largest capacity (and so request) an allocator manages: 2^62 bytes. Larger capacities
/// are clamped to it, so that offset + size + alignment never overflows a `u64`.
pub const MAX_CAPACITY: u64 = 1 << 62;
/// How many nodes best-fit inspects in the boundary bin before falling back to good-fit:
/// the bound that keeps best-fit O(1).
const BEST_FIT_SCAN: usize = 16;

/// The next run of stamps to hand out, process-wide. Starts at one run in, so no stamp is 0.
static NEXT_STAMP_RUN: AtomicU32 = AtomicU32::new(STAMP_RUN);
/// Stamps an allocator takes from [`NEXT_STAMP_RUN`] at a time: one atomic operation per
/// this many allocations.
const STAMP_RUN: u32 = 4096;

/// How a free range is chosen for a request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    /// Take the first range of the first bin whose every range fits (pure O(1); may use a
    /// range up to one bin, 12.5 %, larger than best-fit would). The default: on the
    /// ResNet-50 trace it reserves exactly what best-fit reserves and is faster (see
    /// BENCHMARKS.md).
    #[default]
    GoodFit,
    /// First inspect up to 16 ranges of the boundary bin for the tightest fit, then fall
    /// back to good-fit. Still O(1), but walks a list on every allocation.
    BestFit,
}

/// Names one live allocation. Cheap to copy (8 bytes, and so is an `Option` of it); only
/// the allocator that issued it accepts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RangeHandle {
    index: u32,
    /// The allocation's stamp, unique in the process (see invariant 5) and kept in its node
    /// while it lives. Never zero, so an `Option<RangeHandle>` is as small as the handle.
    stamp: NonZeroU32,
}

/// A successful allocation: where it lives and how to free it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// Byte offset inside the block, a multiple of the requested alignment.
    pub offset: u64,
    /// Bytes reserved: the request rounded up to its alignment (at least 4).
    pub size: u64,
    /// Pass to [`RangeAllocator::free`].
    pub handle: RangeHandle,
}

/// 32 bytes, two per cache line. A used node keeps its allocation's stamp in `bin_next`, so
/// checking a handle reads the node that `free` touches anyway.
#[derive(Clone, Copy, Debug)]
struct Node {
    offset: u64,
    size: u64,
    /// Previous node in the bin list, or `NONE`; `USED` for used nodes, `DEAD` for spares.
    bin_prev: u32,
    /// Next node in the bin list, or `NONE`; a used node's stamp.
    bin_next: u32,
    addr_prev: u32,
    addr_next: u32,
}

impl Node {
    fn used(&self) -> bool {
        self.bin_prev == USED
    }
    fn live(&self) -> bool {
        self.bin_prev != DEAD
    }
    fn parked(&self) -> bool {
        self.bin_prev == PARKED
    }
}

/// Defines `$name` as a call to one of two out-of-line builds of `$body` (an
/// `#[inline(always)]` method): `$portable` for any CPU of the target and, on x86-64,
/// `$bit_ops` compiled with BMI1, BMI2 and LZCNT, chosen by `self.bit_ops` (see the
/// module docs, "Machine code"). Attributes before `fn`, such as the docs, go to `$name`.
macro_rules! two_builds {
    ($(#[$attr:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),*) $(-> $ret:ty)?,
        $portable:ident, $bit_ops:ident => $body:ident) => {
        $(#[$attr])*
        #[inline]
        $vis fn $name(&mut self, $($arg: $ty),*) $(-> $ret)? {
            #[cfg(target_arch = "x86_64")]
            if self.bit_ops {
                // SAFETY: `bit_ops` is set only where `bit_instructions` found the
                // instructions `$bit_ops` is compiled for.
                return unsafe { self.$bit_ops($($arg),*) };
            }
            self.$portable($($arg),*)
        }

        #[inline(never)]
        fn $portable(&mut self, $($arg: $ty),*) $(-> $ret)? {
            self.$body($($arg),*)
        }

        // The feature list is `bit_instructions`' (keep them together).
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "bmi1,bmi2,lzcnt")]
        #[inline(never)]
        unsafe fn $bit_ops(&mut self, $($arg: $ty),*) $(-> $ret)? {
            self.$body($($arg),*)
        }
    };
}

/// O(1) allocator of aligned byte ranges inside a block of `capacity` bytes.
///
/// ```
/// use vramkit::alloc::RangeAllocator;
/// let mut a = RangeAllocator::new(1 << 20);
/// let r = a.allocate(1000, 256).unwrap();
/// assert_eq!(r.offset % 256, 0);
/// a.free(r.handle).unwrap();
/// assert_eq!(a.used_bytes(), 0);
/// ```
#[derive(Debug)]
pub struct RangeAllocator {
    capacity: u64,
    placement: Placement,
    nodes: Vec<Node>,
    /// Stamp of the latest allocation; each allocation takes the next one until
    /// `stamp_end`, then a new run from [`NEXT_STAMP_RUN`].
    stamp: u32,
    stamp_end: u32,
    spare: Vec<u32>,
    /// One bit per node slot, set while the node is a free range: `free` asks whether its
    /// neighbours are free here, in a bitmap that stays in L1, and touches a neighbour's
    /// node only to merge it (at 80 % occupancy most neighbours are used).
    free_bits: Vec<u64>,
    heads: Box<[u32; BINS]>,
    sub_bits: [u8; TOP_BINS],
    top_bits: u64,
    used_bytes: u64,
    used_count: usize,
    free_count: usize,
    /// Parked ranges (module docs, "Parked frees"): the latest parked under each slot,
    /// newest first, linked through `bin_next`.
    parked: [u32; PARK_SLOTS],
    parked_count: u32,
    /// Ranges up to this size are parked: `capacity / 256`.
    park_max: u64,
    /// The CPU has BMI1, BMI2 and LZCNT ([`bit_instructions`]): which build of the hot
    /// paths runs (see the module docs). Asked once, at construction: asking `std` on
    /// every call is a measurable share of an operation.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    bit_ops: bool,
}

impl Clone for RangeAllocator {
    /// A copy of the allocator's state: handles of the original's live allocations are
    /// valid in the copy too, and the copy takes its own stamps for new allocations.
    fn clone(&self) -> Self {
        RangeAllocator {
            capacity: self.capacity,
            placement: self.placement,
            nodes: self.nodes.clone(),
            stamp: 0,
            stamp_end: 0,
            spare: self.spare.clone(),
            free_bits: self.free_bits.clone(),
            heads: self.heads.clone(),
            sub_bits: self.sub_bits,
            top_bits: self.top_bits,
            used_bytes: self.used_bytes,
            used_count: self.used_count,
            free_count: self.free_count,
            parked: self.parked,
            parked_count: self.parked_count,
            park_max: self.park_max,
            bit_ops: self.bit_ops,
        }
    }
}

impl RangeAllocator {
    /// An allocator over `[0, capacity)` with the default placement. `capacity` is rounded
    /// down to a multiple of 4 and clamped to [`MAX_CAPACITY`].
    pub fn new(capacity: u64) -> Self {
        Self::with_placement(capacity, Placement::default())
    }

    /// An allocator with an explicit placement policy.
    pub fn with_placement(capacity: u64, placement: Placement) -> Self {
        let capacity = capacity.min(MAX_CAPACITY) / MIN_ALIGN * MIN_ALIGN;
        let mut a = RangeAllocator {
            capacity,
            placement,
            nodes: Vec::new(),
            stamp: 0,
            stamp_end: 0,
            spare: Vec::new(),
            free_bits: Vec::new(),
            heads: Box::new([NONE; BINS]),
            sub_bits: [0; TOP_BINS],
            top_bits: 0,
            used_bytes: 0,
            used_count: 0,
            free_count: 0,
            parked: [NONE; PARK_SLOTS],
            parked_count: 0,
            park_max: capacity / 256,
            bit_ops: bit_instructions(),
        };
        if capacity > 0 {
            let n = a.new_node(0, capacity, NONE, NONE);
            a.insert_free(n);
        }
        a
    }

    /// Pre-allocates bookkeeping for `ranges` more ranges (used plus free), so a hot loop
    /// that reaches that many never grows a vector (offset-allocator's `max_allocs` does the
    /// same up front).
    pub fn reserve_ranges(&mut self, ranges: usize) {
        self.nodes.reserve(ranges);
        self.spare.reserve(ranges);
        self.free_bits.reserve(ranges.div_ceil(64));
    }

    /// Bytes managed.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes in live allocations (each rounded up to its alignment, plus alignment padding
    /// that was not returned to the free lists).
    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    /// Bytes not allocated.
    pub fn free_bytes(&self) -> u64 {
        self.capacity - self.used_bytes
    }

    /// Number of live allocations.
    pub fn allocation_count(&self) -> usize {
        self.used_count
    }

    /// Number of free ranges, counting free neighbours as one range (as they will be once
    /// the parked ranges among them are merged).
    pub fn free_range_count(&self) -> usize {
        let (mut runs, mut filed_in_runs) = (0, 0);
        self.for_each_parked_run(|_, filed| {
            runs += 1;
            filed_in_runs += filed;
        });
        self.free_count - filed_in_runs + runs
    }

    /// True when nothing is allocated.
    pub fn is_empty(&self) -> bool {
        self.used_count == 0
    }

    /// The largest free range (free neighbours counted as one, as they will be once the
    /// parked ranges among them are merged). Reads the highest non-empty bin: O(1) bitmap
    /// work plus a walk of that one bin, which holds only ranges within 12.5 % of each
    /// other, and of the parked ranges and their neighbours (at most 512 and 513).
    pub fn largest_free(&self) -> u64 {
        let mut best = self.largest_filed_free();
        self.for_each_parked_run(|bytes, _| best = best.max(bytes));
        best
    }

    /// The largest range in the free lists.
    fn largest_filed_free(&self) -> u64 {
        if self.top_bits == 0 {
            return 0;
        }
        let top = 63 - self.top_bits.leading_zeros() as usize;
        let sub = 7 - self.sub_bits[top].leading_zeros() as usize;
        let mut n = self.heads[top * SUB_BINS + sub];
        let mut best = 0;
        while n != NONE {
            best = best.max(self.nodes[n as usize].size);
            n = self.nodes[n as usize].bin_next;
        }
        best
    }

    /// `1 - largest free / total free`: 0 when all free space is one range.
    pub fn fragmentation(&self) -> f64 {
        let free = self.free_bytes();
        if free == 0 {
            0.0
        } else {
            1.0 - self.largest_free() as f64 / free as f64
        }
    }

    two_builds!(
        /// Allocates `size` bytes aligned to `align` (a power of two from 1 to 64 KiB; below 4
        /// it is raised to 4). The range reserved is `size` rounded up to `align`, so the free
        /// range after it starts aligned: the next request of that alignment is carved off its
        /// front, with no padding range between them (see the module docs).
        ///
        /// Errors: [`AllocError::ZeroSize`], [`AllocError::BadAlignment`],
        /// [`AllocError::TooLarge`] (larger than the whole block), and
        /// [`AllocError::OutOfSpace`] (fits the block but no free range is large enough; it
        /// carries the largest free range). The allocator is unchanged by any error.
        pub fn allocate(size: u64, align: u64) -> Result<Range, AllocError>,
        allocate_portable, allocate_bit_ops => allocate_body);

    #[inline(always)]
    fn allocate_body(&mut self, size: u64, align: u64) -> Result<Range, AllocError> {
        match self.try_allocate_body(size, align) {
            Some(range) => Ok(range),
            None => Err(self.miss(size, align)),
        }
    }

    two_builds!(
        /// [`allocate`](Self::allocate) for a caller that only needs to know whether the
        /// request fits: `None` for any error, without the error's description. A miss
        /// of `allocate` reads the largest free range for its error (a walk of one bin
        /// and of the parked ranges); a search across blocks (`BlockSet`), which misses
        /// in every full block it passes, spent a third of a defragmentation pass's
        /// planning on those walks.
        pub fn try_allocate(size: u64, align: u64) -> Option<Range>,
        try_allocate_portable, try_allocate_bit_ops => try_allocate_body);

    #[inline(always)]
    fn try_allocate_body(&mut self, size: u64, align: u64) -> Option<Range> {
        let size = validate(size, align, self.capacity).ok()?;
        let align = align.max(MIN_ALIGN);
        if self.parked_count != 0 {
            if let Some(node) = self.unpark(size, align) {
                return Some(self.mark_used(node, size));
            }
        }
        let needed = size + (align - MIN_ALIGN);
        let Some(node) = self.find(size, needed, align) else {
            return self.settle_and_find(size, align);
        };
        self.place(node, size, align).ok()
    }

    /// Allocates from the free range `node`, which `find` chose.
    #[inline(always)]
    fn place(&mut self, node: u32, size: u64, align: u64) -> Result<Range, AllocError> {
        if let Some(range) = self.carve_front(node, size, align) {
            return Ok(range);
        }
        // The range comes back through `node`, marked here: returned from the out-of-line
        // call, the 24-byte `Range` went through memory, and reading it back stalled on
        // the stores that wrote it.
        self.take_or_split(node, size, align);
        Ok(self.mark_used(node, size))
    }

    /// Takes the range parked last under `size`'s slot if it is exactly `size` and starts
    /// aligned; the caller marks it used.
    #[inline(always)]
    fn unpark(&mut self, size: u64, align: u64) -> Option<u32> {
        let slot = park_slot(size);
        let node = self.parked[slot];
        if node == NONE {
            return None;
        }
        let n = &self.nodes[node as usize];
        if n.size != size || n.offset & (align - 1) != 0 {
            return None;
        }
        self.parked[slot] = n.bin_next;
        self.parked_count -= 1;
        Some(node)
    }

    /// No free range fits: merge the parked ranges and look once more (`None`: still none).
    #[cold]
    #[inline(never)]
    fn settle_and_find(&mut self, size: u64, align: u64) -> Option<Range> {
        if self.parked_count != 0 {
            self.settle();
            let needed = size + (align - MIN_ALIGN);
            if let Some(node) = self.find(size, needed, align) {
                return self.place(node, size, align).ok();
            }
        }
        None
    }

    /// Merges every parked range into the free lists, as [`free`](Self::free) would have
    /// when it was freed. Placement is the only thing parking changes, so this changes
    /// nothing any query reports. O(parked ranges), at most 512.
    #[cold]
    #[inline(never)]
    fn settle(&mut self) {
        for slot in 0..PARK_SLOTS {
            let mut n = std::mem::replace(&mut self.parked[slot], NONE);
            while n != NONE {
                let next = self.nodes[n as usize].bin_next;
                self.merge_free(n, false);
                n = next;
            }
        }
        self.parked_count = 0;
    }

    /// Why [`try_allocate`](Self::try_allocate) found nothing for this request: a bad
    /// request, or no free range large enough, described with the largest free range
    /// (after the parked ranges were merged, as the miss left them).
    #[cold]
    #[inline(never)]
    fn miss(&self, size: u64, align: u64) -> AllocError {
        let size = match validate(size, align, self.capacity) {
            Err(e) => return e,
            Ok(size) => size,
        };
        let align = align.max(MIN_ALIGN);
        AllocError::OutOfSpace {
            size,
            align,
            largest_free: self.largest_free(),
            free_bytes: self.free_bytes(),
        }
    }

    two_builds!(
        /// An allocation [`carve_front`](Self::carve_front) cannot take in place: the free
        /// range `node` fits exactly, or needs leading padding to reach `align`. The range
        /// leaves its bin, padding and the rest become free ranges of their own, and `node`
        /// is left holding the allocation (offset and size set) for the caller to mark used.
        /// Out of line (kept apart from the common case), in the same two builds as
        /// `allocate`.
        fn take_or_split(node: u32, size: u64, align: u64),
        take_or_split_portable, take_or_split_bit_ops => take_or_split_body);

    #[inline(always)]
    fn take_or_split_body(&mut self, node: u32, size: u64, align: u64) {
        self.remove_free(node);
        // Leading padding to reach the alignment becomes its own free range.
        let (offset, avail) = {
            let n = &self.nodes[node as usize];
            (n.offset, n.size)
        };
        let aligned = align_up(offset, align);
        let pad = aligned - offset;
        if pad > 0 {
            let prev = self.nodes[node as usize].addr_prev;
            let p = self.new_node(offset, pad, prev, node);
            if prev != NONE {
                self.nodes[prev as usize].addr_next = p;
            }
            self.nodes[node as usize].addr_prev = p;
            self.insert_free(p);
        }
        let rest = avail - pad - size;
        if rest > 0 {
            let next = self.nodes[node as usize].addr_next;
            let r = self.new_node(aligned + size, rest, node, next);
            if next != NONE {
                self.nodes[next as usize].addr_prev = r;
            }
            self.nodes[node as usize].addr_next = r;
            self.insert_free(r);
        }
        let n = &mut self.nodes[node as usize];
        n.offset = aligned;
        n.size = size;
    }

    /// The common case of an allocation, done in place: the free range `node` starts
    /// aligned and is larger than `size`. The allocation becomes a new node in front and
    /// `node` keeps the rest, staying in its bin list when the rest falls in the same bin
    /// (a large range shrinking by a small request nearly always does). That skips the
    /// removal and re-insertion which each write to another node of the bin list.
    #[inline(always)]
    fn carve_front(&mut self, node: u32, size: u64, align: u64) -> Option<Range> {
        let (offset, avail, prev) = {
            let n = &self.nodes[node as usize];
            (n.offset, n.size, n.addr_prev)
        };
        // `align` is a validated power of two: a mask, not `is_multiple_of`, which
        // compiles to a division, a large share of an allocation's time.
        if offset & (align - 1) != 0 || avail == size {
            return None;
        }
        self.reshape_free(node, offset + size, avail - size);
        let used = self.new_node(offset, size, prev, node);
        if prev != NONE {
            self.nodes[prev as usize].addr_next = used;
        }
        self.nodes[node as usize].addr_prev = used;
        Some(self.mark_used(used, size))
    }

    /// Moves or resizes the free range `n`, refiling it only if its bin changes: a
    /// refile writes to two other nodes of the bin lists, which are rarely in cache.
    #[inline(always)]
    fn reshape_free(&mut self, n: u32, offset: u64, size: u64) {
        let same_bin = bin_round_down(size) == bin_round_down(self.nodes[n as usize].size);
        if !same_bin {
            self.remove_free(n);
        }
        let node = &mut self.nodes[n as usize];
        node.offset = offset;
        node.size = size;
        if !same_bin {
            self.insert_free(n);
        }
    }

    /// Marks `node` (offset and size set, in no bin list) as a live allocation.
    #[inline(always)]
    fn mark_used(&mut self, node: u32, size: u64) -> Range {
        if self.stamp == self.stamp_end {
            self.take_stamp_run();
        }
        // Runs never contain 0 (`take_stamp_run` skips the one that would).
        let stamp = NonZeroU32::new(self.stamp).unwrap_or(NonZeroU32::MIN);
        self.stamp = self.stamp.wrapping_add(1);
        let n = &mut self.nodes[node as usize];
        n.bin_prev = USED;
        n.bin_next = stamp.get();
        self.used_bytes += size;
        self.used_count += 1;
        Range {
            offset: n.offset,
            size,
            handle: RangeHandle { index: node, stamp },
        }
    }

    /// Takes the next run of process-unique stamps, `start..start + STAMP_RUN` (see
    /// invariant 5). Runs are aligned to `STAMP_RUN`, so only the run at 0 holds stamp 0;
    /// it is skipped when the counter wraps round to it.
    #[cold]
    fn take_stamp_run(&mut self) {
        let mut start = NEXT_STAMP_RUN.fetch_add(STAMP_RUN, Ordering::Relaxed);
        if start == 0 {
            start = NEXT_STAMP_RUN.fetch_add(STAMP_RUN, Ordering::Relaxed);
        }
        self.stamp = start;
        self.stamp_end = start.wrapping_add(STAMP_RUN);
    }

    two_builds!(
        /// Frees the range `handle` names and merges it with free neighbours.
        ///
        /// A handle from another allocator, or one already freed, is
        /// [`AllocError::InvalidHandle`] and changes nothing.
        pub fn free(handle: RangeHandle) -> Result<u64, AllocError>,
        free_portable, free_bit_ops => free_body);

    #[inline(always)]
    fn free_body(&mut self, handle: RangeHandle) -> Result<u64, AllocError> {
        let node = self.resolve(handle)?;
        let size = self.nodes[node as usize].size;
        self.used_bytes -= size;
        self.used_count -= 1;
        self.merge_free(node, true);
        Ok(size)
    }

    /// Files the range `node` (no longer counted as used) as free, merged with its free
    /// neighbours; with `may_park`, a range with none is parked instead if small enough.
    #[inline(always)]
    fn merge_free(&mut self, node: u32, may_park: bool) {
        let (size, prev, next) = {
            let n = &self.nodes[node as usize];
            (n.size, n.addr_prev, n.addr_next)
        };
        // Both neighbours are read before either branch is taken, so their cache misses
        // overlap instead of following one another (a random free misses on each).
        // Parked neighbours count as used: they merge when they are settled.
        let prev_free = prev != NONE && self.is_free(prev);
        let next_free = next != NONE && self.is_free(next);
        // A free neighbour absorbs the range (and the other neighbour, if it is free too)
        // and keeps its slot and, usually, its bin.
        match (prev_free, next_free) {
            (false, false) if may_park && size <= self.park_max => self.park(node, size),
            (false, false) => self.insert_free(node),
            (true, false) => {
                let grown = self.nodes[prev as usize].size + size;
                let offset = self.nodes[prev as usize].offset;
                self.unlink_and_release(node);
                self.reshape_free(prev, offset, grown);
            }
            (false, true) => {
                let grown = self.nodes[next as usize].size + size;
                let offset = self.nodes[node as usize].offset;
                self.unlink_and_release(node);
                self.reshape_free(next, offset, grown);
            }
            (true, true) => {
                let grown = self.nodes[prev as usize].size + size + self.nodes[next as usize].size;
                let offset = self.nodes[prev as usize].offset;
                self.remove_free(next);
                self.unlink_and_release(node);
                self.unlink_and_release(next);
                self.reshape_free(prev, offset, grown);
            }
        }
    }

    /// Parks the freed range `node`, which has no free neighbour, under its size's slot.
    #[inline(always)]
    fn park(&mut self, node: u32, size: u64) {
        if self.parked_count == PARK_CAP {
            self.settle();
        }
        let slot = park_slot(size);
        let n = &mut self.nodes[node as usize];
        n.bin_prev = PARKED;
        n.bin_next = self.parked[slot];
        self.parked[slot] = node;
        self.parked_count += 1;
    }

    /// Offset and size of a live allocation.
    pub fn range_of(&self, handle: RangeHandle) -> Result<(u64, u64), AllocError> {
        let n = &self.nodes[self.resolve(handle)? as usize];
        Ok((n.offset, n.size))
    }

    /// Visits every range in address order as `(offset, size, used)`. Free neighbours are
    /// visited as one range, as they will be once the parked ranges among them are merged.
    pub fn for_each_range(&self, mut f: impl FnMut(u64, u64, bool)) {
        let mut n = self.first_node();
        // The free run being gathered, as (offset, size).
        let mut run: Option<(u64, u64)> = None;
        while n != NONE {
            let node = &self.nodes[n as usize];
            if node.used() {
                if let Some((offset, size)) = run.take() {
                    f(offset, size, false);
                }
                f(node.offset, node.size, true);
            } else {
                let (offset, size) = run.unwrap_or((node.offset, 0));
                run = Some((offset, size + node.size));
            }
            n = node.addr_next;
        }
        if let Some((offset, size)) = run {
            f(offset, size, false);
        }
    }

    /// Calls `f(bytes, filed)` once for each run of free neighbours that holds a parked
    /// range: its bytes, and how many of its ranges are in the free lists. Visits each
    /// parked range, and each run from its first range: O(parked ranges).
    fn for_each_parked_run(&self, mut f: impl FnMut(u64, usize)) {
        let free_or_parked =
            |n: u32| n != NONE && (self.is_free(n) || self.nodes[n as usize].parked());
        for &head in self.parked.iter() {
            let mut p = head;
            while p != NONE {
                let next_parked = self.nodes[p as usize].bin_next;
                // A run starts at a parked range, or at a free one (never next to another
                // free one) followed by a parked one; each run is walked from its start only.
                let prev = self.nodes[p as usize].addr_prev;
                let start = if !free_or_parked(prev) {
                    Some(p)
                } else if self.is_free(prev) && !free_or_parked(self.nodes[prev as usize].addr_prev)
                {
                    Some(prev)
                } else {
                    None
                };
                if let Some(mut n) = start {
                    let (mut bytes, mut filed) = (0, 0);
                    while free_or_parked(n) {
                        bytes += self.nodes[n as usize].size;
                        filed += usize::from(self.is_free(n));
                        n = self.nodes[n as usize].addr_next;
                    }
                    f(bytes, filed);
                }
                p = next_parked;
            }
        }
    }

    fn first_node(&self) -> u32 {
        // Merges may release the node at offset 0 (a free right neighbour absorbs it), so
        // look it up; O(n), like the walks that call this.
        self.nodes
            .iter()
            .position(|n| n.live() && n.offset == 0)
            .map_or(NONE, |i| i as u32)
    }

    #[inline(always)]
    fn resolve(&self, handle: RangeHandle) -> Result<u32, AllocError> {
        match self.nodes.get(handle.index as usize) {
            Some(n) if n.used() && n.bin_next == handle.stamp.get() => Ok(handle.index),
            _ => Err(AllocError::InvalidHandle {
                reason: "the range is not live here: already freed (double free or stale \
                         handle), or the handle was issued by a different allocator",
            }),
        }
    }

    #[inline(always)]
    fn find(&self, size: u64, needed: u64, align: u64) -> Option<u32> {
        if self.placement == Placement::BestFit {
            if let Some(n) = self.scan_boundary_bin(size, needed, align) {
                return Some(n);
            }
        }
        // Most ranges are already aligned (offsets of same-alignment requests stay
        // aligned), so first try the bin for the bare size and check the padding of its
        // head; only if that head cannot take the padding, search for size + align.
        if needed > size {
            if let Some(n) = self.head_at_or_above(size) {
                if self.fits(n, size, align) {
                    return Some(n);
                }
            }
        }
        if let Some(n) = self.head_at_or_above(needed) {
            return Some(n);
        }
        // Good-fit looks at the boundary bin last, so a range that fits exactly (a fresh
        // block the size of the request) is never refused.
        match self.placement {
            Placement::GoodFit => self.scan_boundary_bin(size, needed, align),
            Placement::BestFit => None,
        }
    }

    #[inline(always)]
    fn head_at_or_above(&self, size: u64) -> Option<u32> {
        let bin = bin_round_up(size);
        if bin >= BINS {
            return None;
        }
        self.first_nonempty_at_or_above(bin).map(|b| self.heads[b])
    }

    #[inline(always)]
    fn fits(&self, n: u32, size: u64, align: u64) -> bool {
        let node = &self.nodes[n as usize];
        let pad = align_up(node.offset, align) - node.offset;
        node.size >= size + pad
    }

    /// The tightest fitting range among the first few of the boundary bin, whose ranges
    /// may or may not fit `size` after alignment padding.
    #[inline(never)]
    fn scan_boundary_bin(&self, size: u64, needed: u64, align: u64) -> Option<u32> {
        let mut n = self.heads[bin_round_down(needed)];
        let mut best: Option<(u64, u32)> = None;
        for _ in 0..BEST_FIT_SCAN {
            if n == NONE {
                break;
            }
            let node = &self.nodes[n as usize];
            let pad = align_up(node.offset, align) - node.offset;
            if node.size >= size + pad && best.is_none_or(|(s, _)| node.size < s) {
                best = Some((node.size, n));
            }
            n = node.bin_next;
        }
        best.map(|(_, n)| n)
    }

    #[inline(always)]
    fn first_nonempty_at_or_above(&self, bin: usize) -> Option<usize> {
        let top = bin / SUB_BINS;
        let sub = bin % SUB_BINS;
        let here = self.sub_bits[top] & (0xffu8 << sub);
        if here != 0 {
            return Some(top * SUB_BINS + here.trailing_zeros() as usize);
        }
        let higher = if top + 1 >= TOP_BINS {
            0
        } else {
            self.top_bits & (!0u64 << (top + 1))
        };
        if higher == 0 {
            return None;
        }
        let t = higher.trailing_zeros() as usize;
        Some(t * SUB_BINS + self.sub_bits[t].trailing_zeros() as usize)
    }

    #[inline(always)]
    fn is_free(&self, n: u32) -> bool {
        self.free_bits[n as usize / 64] & (1 << (n % 64)) != 0
    }

    #[inline(always)]
    fn new_node(&mut self, offset: u64, size: u64, addr_prev: u32, addr_next: u32) -> u32 {
        let node = Node {
            offset,
            size,
            bin_prev: NONE,
            bin_next: NONE,
            addr_prev,
            addr_next,
        };
        match self.spare.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                if self.nodes.len().is_multiple_of(64) {
                    self.free_bits.push(0);
                }
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        }
    }

    #[inline(always)]
    fn unlink_and_release(&mut self, n: u32) {
        let (prev, next) = {
            let node = &self.nodes[n as usize];
            (node.addr_prev, node.addr_next)
        };
        if prev != NONE {
            self.nodes[prev as usize].addr_next = next;
        }
        if next != NONE {
            self.nodes[next as usize].addr_prev = prev;
        }
        self.nodes[n as usize].bin_prev = DEAD;
        self.spare.push(n);
    }

    #[inline(always)]
    fn insert_free(&mut self, n: u32) {
        let bin = bin_round_down(self.nodes[n as usize].size);
        let head = self.heads[bin];
        {
            let node = &mut self.nodes[n as usize];
            node.bin_prev = NONE;
            node.bin_next = head;
        }
        if head != NONE {
            self.nodes[head as usize].bin_prev = n;
        }
        self.heads[bin] = n;
        self.free_bits[n as usize / 64] |= 1 << (n % 64);
        self.sub_bits[bin / SUB_BINS] |= 1 << (bin % SUB_BINS);
        self.top_bits |= 1 << (bin / SUB_BINS);
        self.free_count += 1;
    }

    #[inline(always)]
    fn remove_free(&mut self, n: u32) {
        let (size, prev, next) = {
            let node = &self.nodes[n as usize];
            (node.size, node.bin_prev, node.bin_next)
        };
        let bin = bin_round_down(size);
        if prev != NONE {
            self.nodes[prev as usize].bin_next = next;
        } else {
            self.heads[bin] = next;
            if next == NONE {
                self.sub_bits[bin / SUB_BINS] &= !(1 << (bin % SUB_BINS));
                if self.sub_bits[bin / SUB_BINS] == 0 {
                    self.top_bits &= !(1 << (bin / SUB_BINS));
                }
            }
        }
        if next != NONE {
            self.nodes[next as usize].bin_prev = prev;
        }
        self.free_bits[n as usize / 64] &= !(1 << (n % 64));
        self.free_count -= 1;
    }

    /// Checks every invariant in the module docs; returns a description of the first one
    /// broken. O(n): for tests and debugging.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut pos = 0u64;
        let mut n = self.first_node();
        let mut prev = NONE;
        let (mut used, mut used_count, mut free_count, mut seen) = (0u64, 0usize, 0usize, 0usize);
        let mut parked_count = 0;
        let mut prev_free = false;
        while n != NONE {
            let node = &self.nodes[n as usize];
            if !node.live() {
                return Err(format!("node {n} is linked but released"));
            }
            if node.offset != pos {
                return Err(format!(
                    "gap or overlap at {pos}: node starts at {}",
                    node.offset
                ));
            }
            if node.addr_prev != prev {
                return Err(format!("node {n} has a wrong previous link"));
            }
            if node.size == 0
                || !node.offset.is_multiple_of(MIN_ALIGN)
                || !node.size.is_multiple_of(MIN_ALIGN)
            {
                return Err(format!("node {n} has a bad size or offset"));
            }
            if node.used() {
                used += node.size;
                used_count += 1;
            } else if node.parked() {
                parked_count += 1;
                if node.size > self.park_max {
                    return Err(format!("parked node {n} is larger than {}", self.park_max));
                }
                if !self.list_contains(self.parked[park_slot(node.size)], n) {
                    return Err(format!("parked node {n} is not in its slot"));
                }
            } else {
                if prev_free {
                    return Err(format!("two adjacent free ranges at {}", node.offset));
                }
                free_count += 1;
                if !self.list_contains(self.heads[bin_round_down(node.size)], n) {
                    return Err(format!("free node {n} is not in its bin"));
                }
            }
            let filed = !node.used() && !node.parked();
            if self.is_free(n) != filed {
                return Err(format!("the free bitmap disagrees with node {n}"));
            }
            prev_free = filed;
            pos += node.size;
            prev = n;
            n = node.addr_next;
            seen += 1;
        }
        if pos != self.capacity {
            return Err(format!("ranges cover {pos} of {} bytes", self.capacity));
        }
        if seen + self.spare.len() != self.nodes.len() {
            return Err("a live node is not reachable in address order".into());
        }
        if let Some(&dead) = self.spare.iter().find(|&&d| self.is_free(d)) {
            return Err(format!("released node {dead} is marked free"));
        }
        if used != self.used_bytes || used_count != self.used_count || free_count != self.free_count
        {
            return Err(format!(
                "counters disagree: used {used}/{}, count {used_count}/{}, free ranges {free_count}/{}",
                self.used_bytes, self.used_count, self.free_count
            ));
        }
        let mut listed = 0;
        for bin in 0..BINS {
            let marked = self.sub_bits[bin / SUB_BINS] & (1 << (bin % SUB_BINS)) != 0;
            if marked != (self.heads[bin] != NONE) {
                return Err(format!("bitmap disagrees with list for bin {bin}"));
            }
            let mut m = self.heads[bin];
            while m != NONE {
                let node = &self.nodes[m as usize];
                if node.used()
                    || !node.live()
                    || bin_round_down(node.size) != bin
                    || node.size < bin_size(bin)
                {
                    return Err(format!("bin {bin} holds a wrong node {m}"));
                }
                listed += 1;
                m = node.bin_next;
            }
        }
        for top in 0..TOP_BINS {
            if (self.top_bits >> top & 1 == 1) != (self.sub_bits[top] != 0) {
                return Err(format!("top bitmap disagrees for class {top}"));
            }
        }
        if listed != free_count {
            return Err(format!("{listed} nodes in bins, {free_count} free ranges"));
        }
        let mut listed = 0;
        for slot in 0..PARK_SLOTS {
            let mut m = self.parked[slot];
            while m != NONE {
                listed += 1;
                let node = &self.nodes[m as usize];
                if listed > parked_count || !node.parked() || park_slot(node.size) != slot {
                    return Err(format!("park slot {slot} lists a wrong node {m}"));
                }
                m = node.bin_next;
            }
        }
        if listed != parked_count || parked_count != self.parked_count as usize {
            return Err(format!(
                "{listed} parked in slots, {parked_count} in address order, count {}",
                self.parked_count
            ));
        }
        Ok(())
    }

    /// Whether the list that starts at `head` and follows `bin_next` (a bin's free ranges
    /// or a slot's parked ones) holds `n`.
    fn list_contains(&self, head: u32, n: u32) -> bool {
        let mut m = head;
        while m != NONE {
            if m == n {
                return true;
            }
            m = self.nodes[m as usize].bin_next;
        }
        false
    }
}

/// Whether this CPU has BMI1, BMI2 and LZCNT (x86-64-v3's bit instructions): one
/// instruction for a count of leading or trailing zeros and for a shift by a variable
/// amount, where baseline x86-64 needs a zero test or several micro-ops. The bin
/// arithmetic and the bitmaps use both on every allocation and free. The features asked
/// for here are those `two_builds!` compiles for (keep them together).
fn bit_instructions() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("bmi1")
            && std::is_x86_feature_detected!("bmi2")
            && std::is_x86_feature_detected!("lzcnt")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The slot ranges of `size` bytes park under: a multiplicative (Fibonacci) hash of the
/// size, so that the sizes a program frees spread over the slots whatever their spacing.
#[inline(always)]
fn park_slot(size: u64) -> usize {
    ((size / MIN_ALIGN).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - PARK_SLOTS.trailing_zeros()))
        as usize
}

/// Rounds `value` up to a power-of-two `align` with a mask: `next_multiple_of` divides,
/// which costs more than the rest of an allocation.
#[inline]
fn align_up(value: u64, align: u64) -> u64 {
    debug_assert!(align.is_power_of_two());
    (value + align - 1) & !(align - 1)
}

fn validate(size: u64, align: u64, capacity: u64) -> Result<u64, AllocError> {
    if size == 0 {
        return Err(AllocError::ZeroSize);
    }
    if !align.is_power_of_two() || align > MAX_ALIGN {
        return Err(AllocError::BadAlignment { align });
    }
    // A mask, not `checked_next_multiple_of`, which divides by the run-time alignment.
    let mask = align.max(MIN_ALIGN) - 1;
    let rounded = size.checked_add(mask).map_or(u64::MAX, |s| s & !mask);
    if rounded > capacity {
        return Err(AllocError::TooLarge { size, capacity });
    }
    Ok(rounded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// A freed range with no free neighbour is parked: the next request of its exact size
    /// gets it back, a stale handle to it is refused, and at most `PARK_CAP` are parked.
    /// A request that only their merged space can hold merges them and succeeds.
    #[test]
    fn parked_ranges_are_reused_merged_and_bounded() {
        let mut a = RangeAllocator::new(1 << 20);
        let ranges: Vec<Range> = (0..1024).map(|_| a.allocate(1024, 256).unwrap()).collect();
        assert_eq!(a.free_bytes(), 0);
        // Every other range: none has a free neighbour, so each is parked.
        for r in ranges.iter().step_by(2) {
            a.free(r.handle).unwrap();
            assert!(a.parked_count <= PARK_CAP);
        }
        assert!(a.parked_count > 0);
        a.check_invariants().unwrap();
        assert!(
            a.free(ranges[0].handle).is_err(),
            "double free of a parked range"
        );
        assert_eq!(a.largest_free(), 1024);
        assert_eq!(a.free_range_count(), 512);
        // The latest freed comes back first, at its offset.
        let again = a.allocate(1024, 256).unwrap();
        assert_eq!(again.offset, ranges[1022].offset);
        a.free(again.handle).unwrap();
        // Freeing the rest leaves one free run in the reports; a request of the whole
        // block merges what is parked and is served.
        for r in ranges.iter().skip(1).step_by(2) {
            a.free(r.handle).unwrap();
        }
        a.check_invariants().unwrap();
        assert_eq!((a.free_range_count(), a.largest_free()), (1, 1 << 20));
        let whole = a.allocate(1 << 20, 256).unwrap();
        assert_eq!((whole.offset, a.parked_count), (0, 0));
        a.check_invariants().unwrap();
    }

    /// Both builds of the hot paths place every range alike: random requests (1 byte to
    /// 4 MiB, every alignment; some refused for want of room) and frees through each,
    /// compared one by one, under both placements, with the invariants checked along
    /// the way.
    #[test]
    fn both_builds_place_ranges_alike() {
        for placement in [Placement::GoodFit, Placement::BestFit] {
            let mut chosen = RangeAllocator::with_placement(128 << 20, placement);
            let mut portable = RangeAllocator::with_placement(128 << 20, placement);
            portable.bit_ops = false;
            if !chosen.bit_ops {
                eprintln!("this CPU lacks BMI1, BMI2 or LZCNT: the portable build runs twice");
            }
            let mut rng = SmallRng::seed_from_u64(20);
            let mut live: Vec<(RangeHandle, RangeHandle)> = Vec::new();
            let (mut placed, mut refused) = (0, 0);
            for step in 0..100_000 {
                let grow = if live.len() < 1000 { 0.7 } else { 0.3 };
                if live.is_empty() || rng.gen_bool(grow) {
                    let scale = rng.gen_range(0..=22);
                    let size = rng.gen_range(1..=1u64 << scale);
                    let align = 1u64 << rng.gen_range(0..=16);
                    match (chosen.allocate(size, align), portable.allocate(size, align)) {
                        (Ok(a), Ok(b)) => {
                            assert_eq!((a.offset, a.size), (b.offset, b.size), "step {step}");
                            live.push((a.handle, b.handle));
                            placed += 1;
                        }
                        (Err(a), Err(b)) => {
                            assert_eq!(a, b, "step {step}");
                            refused += 1;
                        }
                        (a, b) => panic!("step {step}: {a:?} against {b:?}"),
                    }
                } else {
                    let (a, b) = live.swap_remove(rng.gen_range(0..live.len()));
                    assert_eq!(chosen.free(a), portable.free(b), "step {step}");
                    // A second free of the same handle is refused by both.
                    assert_eq!(chosen.free(a), portable.free(b), "step {step}");
                }
                if step % 10_000 == 0 {
                    chosen.check_invariants().unwrap();
                    portable.check_invariants().unwrap();
                }
            }
            chosen.check_invariants().unwrap();
            portable.check_invariants().unwrap();
            assert_eq!(chosen.free_range_count(), portable.free_range_count());
            assert!(placed > 40_000, "{placed} placed");
            eprintln!("{placement:?}: {placed} placed, {refused} refused");
        }
    }
}
