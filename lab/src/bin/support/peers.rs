//! Peer allocators wrapped in vramkit's `SubAllocator`, so they run under the same block
//! policy; shared by the replay example and the benchmarks.
#![allow(dead_code)]

use vramkit::alloc::SubAllocator;

/// Units offset-allocator counts in: it has no alignment parameter, so every offset is a
/// multiple of this (the arena's usual 256-byte storage alignment).
pub const OFFSET_UNIT: u64 = 256;

/// The `offset-allocator` crate (a port of Sebastian Aaltonen's OffsetAllocator).
pub struct OffsetAlloc(offset_allocator::Allocator);

impl SubAllocator for OffsetAlloc {
    type Handle = offset_allocator::Allocation;
    fn with_capacity(capacity: u64) -> Self {
        let units = (capacity / OFFSET_UNIT).min(u32::MAX as u64 - 1) as u32;
        // The crate's default node capacity (128 Ki allocations per block).
        OffsetAlloc(offset_allocator::Allocator::new(units))
    }
    fn min_capacity(size: u64) -> u64 {
        // The crate's own answer: it rounds requests up to its float size classes.
        let units = size.div_ceil(OFFSET_UNIT).min(u32::MAX as u64 / 2) as u32;
        offset_allocator::ext::min_allocator_size(units) as u64 * OFFSET_UNIT
    }
    fn allocate(&mut self, size: u64, align: u64) -> Option<(u64, Self::Handle)> {
        debug_assert!(align <= OFFSET_UNIT);
        let units = size.div_ceil(OFFSET_UNIT).try_into().ok()?;
        let a = self.0.allocate(units)?;
        Some((a.offset as u64 * OFFSET_UNIT, a))
    }
    fn free(&mut self, handle: Self::Handle) -> bool {
        // offset-allocator has no stale-handle check; the block set frees each handle once.
        self.0.free(handle);
        true
    }
}

/// `reserved_bytes.all.peak / allocated_bytes.all.peak` from PyTorch's JSON beside a trace.
pub fn pytorch_ratio(json: &str) -> Option<f64> {
    let field = |name: &str| -> Option<f64> {
        let at = json.find(&format!("\"{name}\""))?;
        let rest = &json[at + name.len() + 2..];
        let rest = rest.trim_start().strip_prefix(':')?.trim_start();
        let end = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    };
    Some(field("reserved_bytes.all.peak")? / field("allocated_bytes.all.peak")?)
}
