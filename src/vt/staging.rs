//! Tile staging: host memory the loader threads decode tiles into and the GPU copies
//! them out of, so the frame thread moves no tile bytes.
//!
//! # How it works
//! One [`HostBuffer`] (Vulkan: plain host memory the GPU's copy engine reads directly,
//! mapped for its whole life) cut into `count` tile-sized slots. A loader thread takes a
//! free slot as a [`StagedTile`], writes the tile into it with
//! [`TileSource::read_tile_into`](super::TileSource::read_tile_into), and hands the
//! handle to the frame thread, which records one `copy_buffer_to_texture` per tile and
//! moves the handles into the queue's "work done" callback of that submission. Dropping a
//! handle gives its slot back: at once for a tile that was never uploaded (the view moved
//! on), after the GPU's copy for one that was.
//!
//! # Promises
//! - A slot has one owner at a time: the free list, one `StagedTile`, or the callback of
//!   the one submission that copies it. Bytes are written only through
//!   [`StagedTile::bytes_mut`], which takes the handle by `&mut`, and the GPU reads them
//!   only after the handle has moved into the callback: the CPU and the GPU never touch a
//!   slot at the same time.
//! - An empty free list is back-pressure, not an error: a loader waits in
//!   [`TileStaging::take_waiting`] until the GPU has copied a slot out or a waiting tile is
//!   dropped. (Falling back to ordinary memory there put the copy back on the frame
//!   thread exactly when it was busiest; BENCHMARKS.md, Virtual textures.)
//! - Where the device cannot give host memory (not Vulkan, or a Vulkan call fails) or a
//!   tile row is not a multiple of the 256-byte copy pitch (R8 and RG8 tiles),
//!   [`TileStaging::new`] returns `None` and every tile takes the uploader's path.
//!
//! The free-slot list ranks `lock_rank::STAGING` (`src/sync/rank.rs`): a work-done
//! callback returns slots to it.

use std::sync::Arc;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Condvar;

use crate::sync::rank::{self as lock_rank, Mutex};

use crate::gpu::accounts::{Charge, MemoryKind, Part};
use crate::gpu::{HostBuffer, HostPlacement};
use crate::Gpu;

/// The slots and their free list, shared by every [`StagedTile`].
pub(crate) struct TileStaging {
    host: HostBuffer,
    /// Its line in the device ledger (host memory).
    _charge: Charge,
    tile_bytes: usize,
    free: Mutex<Vec<u32>>,
    /// Signalled when a slot comes back.
    returned: Condvar,
}

impl TileStaging {
    /// `count` slots of `tile_bytes` (rows of `row_bytes`), or `None` where tiles must take
    /// the uploader's path (see the module docs).
    pub fn new(gpu: &Gpu, count: u32, tile_bytes: usize, row_bytes: u32) -> Option<Arc<Self>> {
        if count == 0 || !row_bytes.is_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT) {
            return None;
        }
        let size = u64::from(count).checked_mul(tile_bytes as u64)?;
        let host = HostBuffer::new(
            gpu,
            size,
            wgpu::BufferUsages::COPY_SRC,
            HostPlacement::System,
            "vramkit vt tile staging",
        )?;
        let charge = gpu
            .accounts()
            .account(
                Part::Vramkit,
                MemoryKind::Host,
                "virtual-texture tile staging",
            )
            .charge(size);
        Some(Arc::new(TileStaging {
            host,
            _charge: charge,
            tile_bytes,
            free: Mutex::new(lock_rank::STAGING, (0..count).rev().collect()),
            returned: Condvar::new(),
        }))
    }

    /// A free slot, waiting for one to come back while every slot is taken; `None` once
    /// `stop` is set (checked every few milliseconds).
    pub fn take_waiting(self: &Arc<Self>, stop: &AtomicBool) -> Option<StagedTile> {
        let mut free = self.free.lock();
        loop {
            if let Some(slot) = free.pop() {
                return Some(StagedTile {
                    pool: self.clone(),
                    slot,
                });
            }
            if stop.load(Ordering::Acquire) {
                return None;
            }
            self.returned
                .wait_for(&mut free.guard, Duration::from_millis(5));
        }
    }

    /// The buffer the GPU copies from.
    pub fn buffer(&self) -> &wgpu::Buffer {
        self.host.buffer()
    }

    /// Free slots now (for tests and statistics).
    pub fn free_slots(&self) -> usize {
        self.free.lock().len()
    }
}

/// One slot of [`TileStaging`], owned; dropping it gives the slot back.
pub(crate) struct StagedTile {
    pool: Arc<TileStaging>,
    slot: u32,
}

impl StagedTile {
    /// The slot's bytes, one tile long, for the loader to write.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        let start = self.slot as usize * self.pool.tile_bytes;
        // SAFETY: this handle is the slot's only owner (module docs); the GPU copies the
        // slot only after the handle has moved into the callback of that copy's
        // submission, where nothing calls this.
        unsafe {
            self.pool
                .host
                .bytes_mut(start..start + self.pool.tile_bytes)
        }
    }

    /// Byte offset of the slot in [`TileStaging::buffer`].
    pub fn offset(&self) -> u64 {
        u64::from(self.slot) * self.pool.tile_bytes as u64
    }

    /// The buffer the slot lives in.
    pub fn buffer(&self) -> &wgpu::Buffer {
        self.pool.buffer()
    }
}

impl Drop for StagedTile {
    fn drop(&mut self) {
        self.pool.free.lock().push(self.slot);
        self.pool.returned.notify_one();
    }
}
