//! Level staging: host memory the loader threads write mip levels into and the GPU copies
//! them out of, so the thread that calls `update` moves no texel bytes.
//!
//! # How it works
//! One [`HostBuffer`] (Vulkan: plain host memory the GPU's copy engine reads directly,
//! mapped for its whole life), handed out in ranges by the crate's own range allocator
//! (`alloc/tlsf.rs`). A loader takes a range for a whole load (every level it brings, each
//! at a 256-byte boundary with rows padded to the copy pitch) as a [`StagedRange`], writes
//! the levels, records one `copy_buffer_to_texture` per level and submits them, notes that
//! submission on the handle ([`StagedRange::copied_by`]) and passes it to the frame
//! thread, which drops it when the growth lands or is given up. Dropping the handle frees
//! the range once its copies are done: at once if they are, else in their work-done
//! callback.
//!
//! # Promises
//! - A range has one owner at a time: the allocator, one `StagedRange`, or a work-done
//!   callback; bytes are written only through [`StagedRange::bytes_mut`] (`&mut self`),
//!   by the loader before it submits the copies, and the range comes back only after
//!   they are done, so the CPU and the GPU never touch a range at the same time.
//! - A full staging is back-pressure: a loader waits in [`LevelStaging::take_waiting`]
//!   until a range comes back (or the streamer stops).
//! - Where the device cannot give host memory (not Vulkan, a Vulkan call fails),
//!   [`LevelStaging::new`] returns `None` and loads come back in ordinary memory, uploaded
//!   by the frame thread through the uploader.
//!
//! The allocator's lock ranks `lock_rank::STAGING`: a work-done callback frees ranges.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Condvar;

use crate::alloc::{RangeAllocator, RangeHandle};
use crate::gpu::accounts::{Charge, MemoryKind, Part};
use crate::gpu::{Epoch, HostBuffer, HostPlacement};
use crate::sync::rank::{self as lock_rank, Mutex};
use crate::Gpu;

/// The host buffer and its ranges, shared by every [`StagedRange`].
pub(crate) struct LevelStaging {
    host: HostBuffer,
    _charge: Charge,
    ranges: Mutex<RangeAllocator>,
    /// Signalled when a range comes back.
    returned: Condvar,
    /// Loaders waiting for room now.
    waiting: AtomicUsize,
}

impl LevelStaging {
    /// `bytes` of level staging, or `None` where loads must come back in ordinary memory.
    pub fn new(gpu: &Gpu, bytes: u64) -> Option<Arc<Self>> {
        let bytes = bytes.next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT.max(256));
        let host = HostBuffer::new(
            gpu,
            bytes,
            wgpu::BufferUsages::COPY_SRC,
            HostPlacement::System,
            "vramkit mip level staging",
        )?;
        let charge = gpu
            .accounts()
            .account(Part::Vramkit, MemoryKind::Host, "mip level staging")
            .charge(bytes);
        Some(Arc::new(LevelStaging {
            host,
            _charge: charge,
            ranges: Mutex::new(lock_rank::STAGING, RangeAllocator::new(bytes)),
            returned: Condvar::new(),
            waiting: AtomicUsize::new(0),
        }))
    }

    /// Bytes the staging holds.
    pub fn capacity(&self) -> u64 {
        self.ranges.lock().capacity()
    }

    /// A range of `bytes` (at a 256-byte boundary), waiting while none is free; `None`
    /// once `stop` is set (checked every few milliseconds) or for more than the capacity.
    pub fn take_waiting(self: &Arc<Self>, bytes: u64, stop: &AtomicBool) -> Option<StagedRange> {
        let mut ranges = self.ranges.lock();
        if bytes == 0 || bytes > ranges.capacity() {
            return None;
        }
        let mut counted = false;
        let taken = loop {
            if let Ok(r) = ranges.allocate(bytes, 256) {
                break Some(StagedRange {
                    pool: self.clone(),
                    offset: r.offset,
                    len: bytes,
                    handle: Some(r.handle),
                    copied_by: None,
                });
            }
            if stop.load(Ordering::Acquire) {
                break None;
            }
            if !counted {
                self.waiting.fetch_add(1, Ordering::AcqRel);
                counted = true;
            }
            self.returned
                .wait_for(&mut ranges.guard, Duration::from_millis(5));
        };
        if counted {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
        }
        taken
    }

    /// Whether a loader waits for room now.
    pub fn starved(&self) -> bool {
        self.waiting.load(Ordering::Acquire) > 0
    }
}

/// One range of [`LevelStaging`], owned; dropping it gives the range back, at once or,
/// once its copies are submitted ([`copied_by`](Self::copied_by)), when they are done.
pub(crate) struct StagedRange {
    pool: Arc<LevelStaging>,
    offset: u64,
    len: u64,
    handle: Option<RangeHandle>,
    /// The device and epoch after the submission that copies out of the range.
    copied_by: Option<(Gpu, Epoch)>,
}

impl StagedRange {
    /// The range's bytes, for the loader to write.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let (start, end) = (self.offset as usize, (self.offset + self.len) as usize);
        // SAFETY: this handle is the range's only owner (module docs); the GPU copies the
        // range only once the loader that wrote it has submitted the copy, and nothing
        // calls this after that.
        unsafe { self.pool.host.bytes_mut(start..end) }
    }

    /// Byte offset of the range in [`buffer`](Self::buffer).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The buffer the range lives in.
    pub fn buffer(&self) -> &wgpu::Buffer {
        self.pool.host.buffer()
    }

    /// Notes that copies out of the range were submitted on `gpu` before `epoch` was
    /// handed out: dropped before that epoch is done (a growth the plan gave up), the
    /// range comes back only then.
    pub fn copied_by(&mut self, gpu: &Gpu, epoch: Epoch) {
        self.copied_by = Some((gpu.clone(), epoch));
    }
}

impl Drop for StagedRange {
    fn drop(&mut self) {
        let Some(handle) = self.handle.take() else {
            return;
        };
        let free = {
            let pool = self.pool.clone();
            move || {
                // A handle this allocator returned and nobody freed: cannot fail.
                let _ = pool.ranges.lock().free(handle);
                pool.returned.notify_all();
            }
        };
        match self.copied_by.take() {
            Some((gpu, epoch)) if !gpu.work_done().is_done(epoch) => {
                // On a lost device the callback never runs: nothing is copied any more,
                // and the staging goes with the device.
                gpu.work_epoch_then(free);
            }
            _ => free(),
        }
    }
}
