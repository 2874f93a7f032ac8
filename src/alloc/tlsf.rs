//! `RangeAllocator`: an O(1) allocator of byte ranges inside one block.
//!
//! # Design
//! Free ranges are filed in segregated lists, one per size bin ([`super::bins`]); a 64-bit
//! top bitmap says which classes hold any free range and a `u8` per class says which of its
//! eight bins do, so finding a non-empty bin is two `trailing_zeros`. Every range, used or
//! free, is a node in a slab with links to its address-order neighbours, so a free merges
//! with free neighbours in O(1).
//!
//! # Invariants (checked by [`RangeAllocator::check_invariants`])
//! 1. The nodes, in address order, tile `[0, capacity)` exactly: no gap, no overlap.
//! 2. No two address-adjacent nodes are both free (frees merge immediately).
//! 3. A free node is in exactly the list of `bin_round_down(size)`; bitmaps mark exactly the
//!    non-empty lists.
//! 4. `used_bytes + free_bytes == capacity`, and the counters equal what the nodes say.
//! 5. A handle names a live used node only while its generation matches: a stale, double or
//!    foreign free is an error, never corruption.

use std::sync::atomic::{AtomicU32, Ordering};

use super::bins::{bin_round_down, bin_round_up, bin_size, BINS, SUB_BINS, TOP_BINS};
use super::AllocError;

const NONE: u32 = u32::MAX;
/// `bin_prev` of a used node: used nodes are in no bin, so the link carries the state and
/// the hot merge checks read one field of a 32-byte node.
const USED: u32 = u32::MAX - 1;
/// `bin_prev` of a released (spare) slot.
const DEAD: u32 = u32::MAX - 2;
/// Smallest alignment and size granule: every offset and size is a multiple of this.
pub const MIN_ALIGN: u64 = 4;
/// Largest alignment accepted.
pub const MAX_ALIGN: u64 = 64 * 1024;
/// How many nodes best-fit inspects in the boundary bin before falling back to good-fit:
/// the bound that keeps best-fit O(1).
const BEST_FIT_SCAN: usize = 16;

static NEXT_ALLOCATOR_ID: AtomicU32 = AtomicU32::new(1);

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

/// Names one live allocation. Cheap to copy; only the allocator that issued it accepts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RangeHandle {
    index: u32,
    generation: u32,
    allocator: u32,
}

/// A successful allocation: where it lives and how to free it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// Byte offset inside the block, a multiple of the requested alignment.
    pub offset: u64,
    /// Bytes reserved (the request rounded up to 4).
    pub size: u64,
    /// Pass to [`RangeAllocator::free`].
    pub handle: RangeHandle,
}

/// 32 bytes, two per cache line. Generations live in a parallel vector: only `free` and
/// `range_of` read them.
#[derive(Clone, Copy, Debug)]
struct Node {
    offset: u64,
    size: u64,
    /// Previous node in the bin list, or `NONE`; `USED` for used nodes, `DEAD` for spares.
    bin_prev: u32,
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
#[derive(Clone, Debug)]
pub struct RangeAllocator {
    id: u32,
    capacity: u64,
    placement: Placement,
    nodes: Vec<Node>,
    generations: Vec<u32>,
    spare: Vec<u32>,
    heads: Box<[u32; BINS]>,
    sub_bits: [u8; TOP_BINS],
    top_bits: u64,
    used_bytes: u64,
    used_count: usize,
    free_count: usize,
}

impl RangeAllocator {
    /// An allocator over `[0, capacity)` with the default placement. `capacity` is rounded
    /// down to a multiple of 4.
    pub fn new(capacity: u64) -> Self {
        Self::with_placement(capacity, Placement::default())
    }

    /// An allocator with an explicit placement policy.
    pub fn with_placement(capacity: u64, placement: Placement) -> Self {
        let capacity = capacity / MIN_ALIGN * MIN_ALIGN;
        let mut a = RangeAllocator {
            id: NEXT_ALLOCATOR_ID.fetch_add(1, Ordering::Relaxed),
            capacity,
            placement,
            nodes: Vec::new(),
            generations: Vec::new(),
            spare: Vec::new(),
            heads: Box::new([NONE; BINS]),
            sub_bits: [0; TOP_BINS],
            top_bits: 0,
            used_bytes: 0,
            used_count: 0,
            free_count: 0,
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
        self.generations.reserve(ranges);
        self.spare.reserve(ranges);
    }

    /// Bytes managed.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bytes in live allocations (after rounding to 4 and alignment padding that was not
    /// returned to the free lists).
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

    /// Number of free ranges (after merging).
    pub fn free_range_count(&self) -> usize {
        self.free_count
    }

    /// True when nothing is allocated.
    pub fn is_empty(&self) -> bool {
        self.used_count == 0
    }

    /// The largest free range. Reads the highest non-empty bin: O(1) bitmap work plus a walk
    /// of that one bin, which holds only ranges within 12.5 % of each other.
    pub fn largest_free(&self) -> u64 {
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

    /// Allocates `size` bytes aligned to `align` (a power of two from 1 to 64 KiB; below 4
    /// it is raised to 4).
    ///
    /// Errors: [`AllocError::ZeroSize`], [`AllocError::BadAlignment`],
    /// [`AllocError::TooLarge`] (larger than the whole block), and
    /// [`AllocError::OutOfSpace`] (fits the block but no free range is large enough; it
    /// carries the largest free range). The allocator is unchanged by any error.
    pub fn allocate(&mut self, size: u64, align: u64) -> Result<Range, AllocError> {
        let size = validate(size, align, self.capacity)?;
        let align = align.max(MIN_ALIGN);
        let needed = size + (align - MIN_ALIGN);
        let Some(node) = self.find(size, needed, align) else {
            return Err(AllocError::OutOfSpace {
                size,
                align,
                largest_free: self.largest_free(),
                free_bytes: self.free_bytes(),
            });
        };
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
        n.bin_prev = USED;
        self.used_bytes += size;
        self.used_count += 1;
        Ok(Range {
            offset: aligned,
            size,
            handle: RangeHandle {
                index: node,
                generation: self.generations[node as usize],
                allocator: self.id,
            },
        })
    }

    /// Frees the range `handle` names and merges it with free neighbours.
    ///
    /// A handle from another allocator, or one already freed, is
    /// [`AllocError::InvalidHandle`] and changes nothing.
    pub fn free(&mut self, handle: RangeHandle) -> Result<u64, AllocError> {
        let mut node = self.resolve(handle)?;
        let size = self.nodes[node as usize].size;
        self.used_bytes -= size;
        self.used_count -= 1;
        self.nodes[node as usize].bin_prev = NONE;
        self.generations[node as usize] = self.generations[node as usize].wrapping_add(1);
        let prev = self.nodes[node as usize].addr_prev;
        if prev != NONE && !self.nodes[prev as usize].used() {
            // Absorb into the previous free range, which keeps its slot.
            self.remove_free(prev);
            self.nodes[prev as usize].size += self.nodes[node as usize].size;
            self.unlink_and_release(node);
            node = prev;
        }
        let next = self.nodes[node as usize].addr_next;
        if next != NONE && !self.nodes[next as usize].used() {
            self.remove_free(next);
            self.nodes[node as usize].size += self.nodes[next as usize].size;
            self.unlink_and_release(next);
        }
        self.insert_free(node);
        Ok(size)
    }

    /// Offset and size of a live allocation.
    pub fn range_of(&self, handle: RangeHandle) -> Result<(u64, u64), AllocError> {
        let n = &self.nodes[self.resolve(handle)? as usize];
        Ok((n.offset, n.size))
    }

    /// Visits every range in address order as `(offset, size, used)`.
    pub fn for_each_range(&self, mut f: impl FnMut(u64, u64, bool)) {
        let mut n = self.first_node();
        while n != NONE {
            let node = &self.nodes[n as usize];
            f(node.offset, node.size, node.used());
            n = node.addr_next;
        }
    }

    fn first_node(&self) -> u32 {
        // The node at offset 0 is never released: merges always absorb into the left node.
        self.nodes
            .iter()
            .position(|n| n.live() && n.offset == 0)
            .map_or(NONE, |i| i as u32)
    }

    fn resolve(&self, handle: RangeHandle) -> Result<u32, AllocError> {
        if handle.allocator != self.id {
            return Err(AllocError::InvalidHandle {
                reason: "the handle was issued by a different allocator",
            });
        }
        match self.nodes.get(handle.index as usize) {
            Some(n) if n.used() && self.generations[handle.index as usize] == handle.generation => {
                Ok(handle.index)
            }
            _ => Err(AllocError::InvalidHandle {
                reason: "the range was already freed (double free or stale handle)",
            }),
        }
    }

    fn find(&self, size: u64, needed: u64, align: u64) -> Option<u32> {
        let tight = || self.scan_boundary_bin(size, needed, align);
        let first_fit = || {
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
            self.head_at_or_above(needed)
        };
        match self.placement {
            Placement::BestFit => tight().or_else(first_fit),
            // Good-fit still looks at the boundary bin last, so a range that fits exactly
            // (a fresh block the size of the request) is never refused.
            Placement::GoodFit => first_fit().or_else(tight),
        }
    }

    fn head_at_or_above(&self, size: u64) -> Option<u32> {
        let bin = bin_round_up(size);
        if bin >= BINS {
            return None;
        }
        self.first_nonempty_at_or_above(bin).map(|b| self.heads[b])
    }

    fn fits(&self, n: u32, size: u64, align: u64) -> bool {
        let node = &self.nodes[n as usize];
        let pad = align_up(node.offset, align) - node.offset;
        node.size >= size + pad
    }

    /// The tightest fitting range among the first few of the boundary bin, whose ranges
    /// may or may not fit `size` after alignment padding.
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
                self.nodes.push(node);
                self.generations.push(0);
                (self.nodes.len() - 1) as u32
            }
        }
    }

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
        self.generations[n as usize] = self.generations[n as usize].wrapping_add(1);
        self.spare.push(n);
    }

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
        self.sub_bits[bin / SUB_BINS] |= 1 << (bin % SUB_BINS);
        self.top_bits |= 1 << (bin / SUB_BINS);
        self.free_count += 1;
    }

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
        self.free_count -= 1;
    }

    /// Checks every invariant in the module docs; returns a description of the first one
    /// broken. O(n): for tests and debugging.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut pos = 0u64;
        let mut n = self.first_node();
        let mut prev = NONE;
        let (mut used, mut used_count, mut free_count, mut seen) = (0u64, 0usize, 0usize, 0usize);
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
            } else {
                if prev_free {
                    return Err(format!("two adjacent free ranges at {}", node.offset));
                }
                free_count += 1;
                if !self.bin_contains(bin_round_down(node.size), n) {
                    return Err(format!("free node {n} is not in its bin"));
                }
            }
            prev_free = !node.used();
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
        Ok(())
    }

    fn bin_contains(&self, bin: usize, n: u32) -> bool {
        let mut m = self.heads[bin];
        while m != NONE {
            if m == n {
                return true;
            }
            m = self.nodes[m as usize].bin_next;
        }
        false
    }
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
    let rounded = size.checked_next_multiple_of(MIN_ALIGN).unwrap_or(u64::MAX);
    if rounded > capacity {
        return Err(AllocError::TooLarge { size, capacity });
    }
    Ok(rounded)
}
