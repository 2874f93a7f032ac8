//! The allocator core: pure CPU, knows nothing of wgpu.
//!
//! - [`RangeAllocator`] hands out aligned byte ranges inside one block in O(1).
//! - [`BlockSet`] applies the block policy ([`BlockPolicy`]): which block serves a request,
//!   when to reserve another block and how large, and when a request gets a dedicated
//!   block. The GPU arena and the trace replay both run on it, so what the replay measures
//!   is what the arena does.

mod bins;
mod block_set;
pub mod plan;
mod tlsf;
pub mod trace;

pub(crate) use block_set::pick_to_close;
pub use block_set::{BlockAlloc, BlockId, BlockPolicy, BlockSet, BlockSetStats, SubAllocator};
pub use tlsf::{Placement, Range, RangeAllocator, RangeHandle, MAX_ALIGN, MAX_CAPACITY, MIN_ALIGN};

/// Why the allocator core refused a request. The allocator is unchanged by every error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// A zero-byte request.
    #[error("cannot allocate 0 bytes: request at least 1 byte")]
    ZeroSize,
    /// The alignment is not a power of two, or above 64 KiB.
    #[error("alignment {align} is not a power of two between 1 and 65536: pass e.g. 4, 16 or 256")]
    BadAlignment {
        /// The alignment asked for.
        align: u64,
    },
    /// Larger than the whole block: no amount of freeing helps.
    #[error("request of {size} bytes exceeds the block capacity of {capacity} bytes: use a larger block or a dedicated allocation")]
    TooLarge {
        /// Bytes asked for.
        size: u64,
        /// Bytes the block has.
        capacity: u64,
    },
    /// Fits the block, but no free range is large enough right now.
    #[error("no free range of {size} bytes (alignment {align}): largest free range is {largest_free} of {free_bytes} free bytes; free something or defragment")]
    OutOfSpace {
        /// Bytes asked for (rounded up to the alignment, at least 4).
        size: u64,
        /// Alignment asked for.
        align: u64,
        /// The largest free range.
        largest_free: u64,
        /// All free bytes.
        free_bytes: u64,
    },
    /// The handle is not a live allocation of this allocator.
    #[error("invalid free: {reason}")]
    InvalidHandle {
        /// Why it was rejected.
        reason: &'static str,
    },
}
