//! The host tier: host memory that evicted bytes live in, sub-allocated by the allocator
//! core like the arena's device blocks.
//!
//! On Vulkan a host block is a [`HostBuffer`] in system memory (the staging memory the
//! stream module uses): the GPU's copy engine writes evicted bytes straight into it and
//! reads them straight back, one copy each way, no CPU `memcpy`, at link speed. Other
//! backends give no way to ask for that memory, and there a host block is an ordinary
//! wgpu buffer wherever the driver puts it (on Apple's unified memory, the same memory).
//!
//! Only the GPU touches host blocks, through copies on the one queue, so a range freed
//! here may be handed out again at once: wgpu orders a later copy into it after an
//! earlier copy out of it (both use the same buffer, and wgpu places a barrier between
//! them). Empty blocks stay cached (creating pinned host memory costs milliseconds per
//! hundred MiB) and go back on [`HostTier::trim`] or when the host budget needs room.

use crate::gpu::accounts::{Charge, MemoryKind, Part};
use std::sync::Arc;

use crate::alloc::{BlockAlloc, BlockId, BlockPolicy, BlockSet, RangeHandle};
use crate::error::{Limit, OutOfMemory};
use crate::gpu::{HostBuffer, HostPlacement};
use crate::{Error, Gpu, Result};

/// What to do when an eviction to the host tier is refused while the device is full.
pub(crate) const BOTH_FULL_HINT: &str = "the device budget and the host tier are both full: \
     drop movable allocations you no longer need, or raise TierConfig::host_budget or the \
     arena budget";

/// Alignment of host ranges: a copy needs 4; 256 keeps ranges on cache-line groups.
const HOST_ALIGN: u64 = 256;

/// One host block's buffer.
pub(crate) enum HostBlock {
    /// Host memory the GPU copies into and out of directly (Vulkan).
    Pinned(HostBuffer),
    /// An ordinary wgpu buffer (other backends).
    Plain(wgpu::Buffer),
}

impl HostBlock {
    pub(crate) fn buffer(&self) -> &wgpu::Buffer {
        match self {
            HostBlock::Pinned(h) => h.buffer(),
            HostBlock::Plain(b) => b,
        }
    }
}

/// A range of the host tier.
pub(crate) struct HostRange {
    pub placed: BlockAlloc<RangeHandle>,
    pub block: Arc<HostBlock>,
}

impl HostRange {
    pub(crate) fn offset(&self) -> u64 {
        self.placed.offset
    }
}

/// The host tier's blocks and budget.
pub(crate) struct HostTier {
    gpu: Gpu,
    set: BlockSet,
    blocks: Vec<Option<Arc<HostBlock>>>,
    budget: Option<u64>,
    /// Blocks given back, destroyed by the caller once its lock is released.
    pub doomed: Vec<Arc<HostBlock>>,
    /// At least one block fell back to a plain wgpu buffer.
    pub plain_blocks: bool,
    /// The tier's line in the device ledger: its reserved bytes.
    charge: Charge,
}

impl HostTier {
    pub(crate) fn new(gpu: &Gpu, budget: Option<u64>) -> HostTier {
        let max_block = (256u64 << 20).min(gpu.limits().max_buffer_size);
        HostTier {
            gpu: gpu.clone(),
            set: BlockSet::new(BlockPolicy {
                min_block: (16u64 << 20).min(max_block),
                max_block,
                dedicated_threshold: max_block / 4,
                dedicated_share: 0,
                dedicated_granularity: 1 << 20,
                // Empty blocks are kept for the next eviction; the budget check below
                // gives them back when they are in the way.
                release_empty_before_grow: false,
            }),
            blocks: Vec::new(),
            budget,
            doomed: Vec::new(),
            plain_blocks: false,
            charge: gpu
                .accounts()
                .account(Part::Vramkit, MemoryKind::Host, "host tier")
                .charge(0),
        }
    }

    /// Checks the host block set's invariants, and that every block it holds has its
    /// memory (`state.rs`).
    pub(crate) fn check_invariants(&self) -> std::result::Result<(), String> {
        self.set.check_invariants()?;
        for (id, ..) in self.set.blocks() {
            if self.blocks.get(id.0 as usize).is_none_or(Option::is_none) {
                return Err(format!("host block {} has no memory", id.0));
            }
        }
        Ok(())
    }

    /// Whether `range` lies in a live host block and holds that block's memory.
    pub(crate) fn holds(&self, range: &HostRange) -> bool {
        let id = range.placed.block;
        self.set.block(id).is_some()
            && self
                .blocks
                .get(id.0 as usize)
                .and_then(Option::as_ref)
                .is_some_and(|b| Arc::ptr_eq(b, &range.block))
    }

    /// `(block, live ranges)` of every host block.
    pub(crate) fn live_ranges(&self) -> impl Iterator<Item = (u32, usize)> + '_ {
        self.set.blocks().map(|(id, _, _, live)| (id.0, live))
    }

    /// Bytes held in host blocks.
    pub(crate) fn reserved(&self) -> u64 {
        self.set.stats().reserved
    }

    /// Bytes of evicted allocations.
    pub(crate) fn allocated(&self) -> u64 {
        self.set.stats().allocated
    }

    pub(crate) fn budget(&self) -> Option<u64> {
        self.budget
    }

    pub(crate) fn set_budget(&mut self, budget: Option<u64>) {
        self.budget = budget;
    }

    /// Blocks held.
    pub(crate) fn blocks(&self) -> usize {
        self.set.stats().blocks
    }

    /// `(block, bytes)` of every host block.
    pub(crate) fn block_sizes(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.set.blocks().map(|(id, size, ..)| (id.0, size))
    }

    /// A host range of `size` bytes (a multiple of 4) for the evicted bytes of `label`,
    /// or a typed out-of-memory error naming the host budget. Empty blocks are given back
    /// first when a new one would cross the budget.
    pub(crate) fn alloc(&mut self, size: u64, label: &str) -> Result<HostRange> {
        let result = match self.try_alloc(size, label) {
            Err(Error::OutOfMemory(_)) if self.set.stats().blocks > 0 => {
                self.release_empty(0);
                self.try_alloc(size, label)
            }
            other => other,
        };
        let reserved = self.reserved();
        self.charge.set(reserved);
        result
    }

    fn try_alloc(&mut self, size: u64, label: &str) -> Result<HostRange> {
        let reserved = self.reserved();
        let room = self.budget.map_or(u64::MAX, |b| b.saturating_sub(reserved));
        let gpu = &self.gpu;
        let budget = self.budget;
        let mut created: Option<HostBlock> = None;
        let mut plain = false;
        let mut released = Vec::new();
        let result = self.set.allocate_within(
            size,
            HOST_ALIGN,
            room,
            |id: BlockId, block_size| {
                if block_size > room {
                    return Err(host_oom(size, label, reserved, budget, block_size));
                }
                let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
                let name = format!("vramkit host tier block{} ({label})", id.0);
                let block =
                    match HostBuffer::new(gpu, block_size, usage, HostPlacement::System, &name) {
                        Some(h) => HostBlock::Pinned(h),
                        None => {
                            plain = true;
                            let b = gpu.scoped("creating a host tier block", || {
                                gpu.device().create_buffer(&wgpu::BufferDescriptor {
                                    label: Some(&name),
                                    size: block_size,
                                    usage,
                                    mapped_at_creation: false,
                                })
                            })?;
                            HostBlock::Plain(b)
                        }
                    };
                if let Some(old) = created.replace(block) {
                    old.buffer().destroy();
                }
                Ok(())
            },
            |id| released.push(id),
        );
        for id in released {
            self.retire(id);
        }
        self.plain_blocks |= plain;
        let placed = match result {
            Ok(p) => p,
            Err(e) => {
                if let Some(b) = created {
                    b.buffer().destroy();
                }
                return Err(e);
            }
        };
        if let Some(block) = created {
            let i = placed.block.0 as usize;
            if self.blocks.len() <= i {
                self.blocks.resize_with(i + 1, || None);
            }
            self.blocks[i] = Some(Arc::new(block));
        }
        match self
            .blocks
            .get(placed.block.0 as usize)
            .and_then(Option::clone)
        {
            Some(block) => Ok(HostRange { placed, block }),
            None => {
                self.set.free(placed);
                Err(Error::Device {
                    during: "allocating in the host tier".into(),
                    message: "host block without a buffer".into(),
                })
            }
        }
    }

    /// Returns a range to its block.
    /// Whether the host can read `range` itself: for a recovery, when the device that
    /// copied its bytes is gone. Not where the block is a wgpu buffer (only the GPU reads
    /// those).
    pub(crate) fn readable(&self, range: &HostRange) -> bool {
        matches!(range.block.as_ref(), HostBlock::Pinned(_))
    }

    /// Copies the bytes of `from` (a range of this tier, [`readable`](Self::readable))
    /// into `to`, a new range of another device's host tier no GPU work uses yet.
    pub(crate) fn copy_into(&self, from: &HostRange, gpu: &Gpu, to: &HostRange) {
        let HostBlock::Pinned(h) = from.block.as_ref() else {
            return;
        };
        let start = from.offset() as usize;
        let end = start + from.placed.size as usize;
        // SAFETY: the device that copied into this memory is lost (the caller's promise,
        // `recover.rs`): no GPU work touches it any more, and the memory is vramkit's
        // own, mapped for the block's life.
        let bytes = unsafe { h.bytes(start..end) };
        let _ = fill_with(gpu, to, |dst| {
            crate::stream::host_copy::copy_parallel(dst, bytes, rayon::current_num_threads());
            Ok(())
        });
    }

    pub(crate) fn free(&mut self, range: HostRange) {
        self.set.free(range.placed);
    }

    /// Gives back empty blocks beyond `keep` bytes; returns the bytes given back.
    pub(crate) fn release_empty(&mut self, keep: u64) -> u64 {
        let mut gone = Vec::new();
        let bytes = self.set.release_empty(keep, |id| gone.push(id));
        for id in gone {
            self.retire(id);
        }
        let reserved = self.reserved();
        self.charge.set(reserved);
        bytes
    }

    fn retire(&mut self, id: BlockId) {
        if let Some(b) = self.blocks.get_mut(id.0 as usize).and_then(Option::take) {
            self.doomed.push(b);
        }
    }
}

fn host_oom(size: u64, label: &str, reserved: u64, budget: Option<u64>, block: u64) -> Error {
    Error::OutOfMemory(Box::new(OutOfMemory {
        requested: size,
        label: label.to_string(),
        pool: "host tier".to_string(),
        limit: Limit::HostTier,
        allocated: 0,
        reserved,
        limit_bytes: budget,
        largest_free: 0,
        free_range_unusable: None,
        new_block: Some(block),
        retries: 0,
        top_labels: Vec::new(),
        hint: BOTH_FULL_HINT.to_string(),
    }))
}

/// Lets `fill` write the bytes of `range`, a range of a host block no GPU work uses yet
/// (a recovery's new host tier): in place where the block is mapped memory, else into a
/// buffer that is then queued as a write into the wgpu buffer.
pub(crate) fn fill_with(
    gpu: &Gpu,
    range: &HostRange,
    fill: impl FnOnce(&mut [u8]) -> Result<()>,
) -> Result<()> {
    let len = range.placed.size as usize;
    match range.block.as_ref() {
        HostBlock::Pinned(h) => {
            let start = range.offset() as usize;
            // SAFETY: the range is new and no submitted work uses it (the caller's
            // promise); it lies inside the block, and no other range overlaps it.
            fill(unsafe { h.bytes_mut(start..start + len) })
        }
        HostBlock::Plain(b) => {
            let mut bytes = vec![0u8; len];
            fill(&mut bytes)?;
            gpu.write_buffer(b, range.offset(), &bytes);
            Ok(())
        }
    }
}
