//! `Link`: copies from one device of a set to another through host memory both GPUs copy
//! directly, chunked so that one GPU's download and the other's upload run at once.
//!
//! # How it works
//! A link from device `s` to device `d` owns `depth` slots of `chunk` bytes of host
//! memory. Where both devices were opened with `VK_EXT_external_memory_host`
//! (`gpu::host_import`), a slot is *one* host allocation imported into both devices as a
//! buffer: `s` copies a chunk of the source into it, and `d` copies the same bytes out of
//! it, with no copy on the host. Elsewhere a slot is two staging buffers (`HostBuffer`,
//! each in its device's system memory) and the host copies between them, on the
//! parallel copy threads of `stream::host_copy`.
//!
//! The chunks are a pipeline. All slots start filling on `s`; then, for chunk `i`: wait
//! for its download on `s`, submit its upload on `d`, then wait for chunk `i - 1`'s upload
//! (by now `d` is busy with chunk `i`) and refill that slot with chunk `i - 1 + depth`
//! on `s`. So `s` always has `depth - 2` chunks queued and `d` one, and the rate is the
//! slower of the two links (plus one chunk of latency), not their sum.
//!
//! # What it promises
//! - [`Link::copy`] returns once every chunk has landed on `d` (the slots are free
//!   again): work submitted on `d` afterwards sees the bytes, and the caller may drop or
//!   reuse both allocations at once.
//! - It submits on `s` after the caller's earlier submissions there, so the bytes copied
//!   are those all work submitted on `s` before the call wrote.
//! - No lock of vramkit's is held while it waits; a link is used by one copy at a time
//!   (`DeviceSet` hands each copy a link of its own).
//! - On an error (a lost device, say) it waits for both devices to finish what it
//!   submitted before it returns the error, so no GPU copy outlives the call.

use std::ops::Range;
use std::sync::Arc;

use crate::gpu::{HostBuffer, HostMemory, HostPlacement};
use crate::{Allocation, Error, Gpu, Result};

/// The smallest chunk a copy is cut into (unless a slot is smaller). On two H200s, 32 MiB
/// copies read 32.7 GB/s with 8 MiB chunks, 34.0 with 4 and 28.8 with 16, and the
/// data-parallel step's all-reduce took 9.9 ms against 11.4 (16) and 12.8 (4).
const MIN_CHUNK: u64 = 8 << 20;

/// How the devices of a set copy to each other.
#[derive(Clone, Debug)]
pub struct TransferConfig {
    /// Bytes per chunk. Large enough that a chunk's submission and wake-up (tens of
    /// microseconds) hide behind its copy; small enough that the first chunk, which
    /// nothing overlaps, is short. `None`: 64 MiB on GPUs, 4 MiB on CPU adapters.
    pub chunk: Option<u64>,
    /// Chunks in flight per link (at least 2; 3 or more keeps the source busy while the
    /// destination's last upload is waited for). Default 4.
    pub depth: usize,
    /// Use one host allocation imported into both devices where they can
    /// (`VK_EXT_external_memory_host`); `false` forces the host copy between two staging
    /// buffers, for comparison. Default `true`.
    pub shared_host_memory: bool,
    /// Overlap the source's downloads with the destination's uploads (the pipeline of the
    /// module docs). `false` copies one chunk after the other, each downloaded and then
    /// uploaded, for comparison: the serial host path. Default `true`.
    pub overlap: bool,
}

impl Default for TransferConfig {
    fn default() -> Self {
        TransferConfig {
            chunk: None,
            depth: 4,
            shared_host_memory: true,
            overlap: true,
        }
    }
}

/// One slot of host memory: what the source copies into and the destination out of.
struct Slot {
    /// The source device's buffer of the slot.
    on_src: HostBuffer,
    /// The destination's buffer: the same memory imported again, or a second staging
    /// buffer the host copies into.
    on_dst: HostBuffer,
    shared: bool,
}

/// Host memory and buffers for copies from one device to another; see the module docs.
pub(crate) struct Link {
    src: Gpu,
    dst: Gpu,
    chunk: u64,
    overlap: bool,
    slots: Vec<Slot>,
}

impl Link {
    /// A link from `src` to `dst` with `config`'s slots.
    pub(crate) fn new(src: &Gpu, dst: &Gpu, config: &TransferConfig) -> Result<Link> {
        let cpu = src.is_cpu() || dst.is_cpu();
        let chunk = config
            .chunk
            .unwrap_or(if cpu { 4 << 20 } else { 64 << 20 })
            .max(4)
            .next_multiple_of(4);
        let depth = config.depth.max(2);
        let import_align = match (src.host_import_alignment(), dst.host_import_alignment()) {
            (Some(a), Some(b)) if config.shared_host_memory => Some(a.max(b)),
            _ => None,
        };
        let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
        let mut slots = Vec::with_capacity(depth);
        for i in 0..depth {
            let label = format!("vramkit link slot {i}");
            let imported = import_align.and_then(|align| {
                let host = Arc::new(HostMemory::new(chunk, align)?);
                let on_src = HostBuffer::import(src, &host, usage, &label)?;
                let on_dst = HostBuffer::import(dst, &host, usage, &label)?;
                Some(Slot {
                    on_src,
                    on_dst,
                    shared: true,
                })
            });
            let slot = match imported {
                Some(slot) => slot,
                None => {
                    let staging = |gpu: &Gpu| {
                        HostBuffer::new(gpu, chunk, usage, HostPlacement::System, &label)
                            .ok_or_else(|| {
                                Error::invalid(
                                    format!(
                                        "{} bytes of host staging on {} for a copy between \
                                         devices",
                                        chunk,
                                        gpu.info().name
                                    ),
                                    "transfers between devices need Vulkan host-visible memory \
                                     and enough host RAM; try a smaller TransferConfig::chunk",
                                )
                            })
                    };
                    Slot {
                        on_src: staging(src)?,
                        on_dst: staging(dst)?,
                        shared: false,
                    }
                }
            };
            slots.push(slot);
        }
        log::debug!(
            "link {} -> {}: {depth} x {} {}",
            src.info().name,
            dst.info().name,
            crate::fmt_bytes(chunk),
            if slots.iter().all(|s| s.shared) {
                "of host memory imported into both devices"
            } else {
                "of staging with a host copy between them"
            }
        );
        Ok(Link {
            src: src.clone(),
            dst: dst.clone(),
            chunk,
            overlap: config.overlap,
            slots,
        })
    }

    /// Whether the slots are host memory shared by both devices (no host copy).
    pub(crate) fn shares_host_memory(&self) -> bool {
        self.slots.iter().all(|s| s.shared)
    }

    /// Copies `len` bytes of `src` at `src_offset` to `dst` at `dst_offset`; see the
    /// module docs. The caller checked devices, ranges, alignment and usage.
    pub(crate) fn copy(
        &self,
        (src, src_offset): (&Allocation, u64),
        (dst, dst_offset): (&Allocation, u64),
        len: u64,
    ) -> Result<()> {
        if !self.overlap {
            return self.copy_serially((src, src_offset), (dst, dst_offset), len);
        }
        let depth = self.slots.len();
        // At least two chunks per slot where the copy is long enough, so that a copy of
        // a few slots' worth still overlaps its two halves; never below 8 MiB (each chunk
        // costs a submission and a wake-up), never above a slot.
        let chunk = len
            .div_ceil(2 * depth as u64)
            .max(MIN_CHUNK)
            .next_multiple_of(256)
            .min(self.chunk);
        let started = web_time::Instant::now();
        let chunks: Vec<Range<u64>> = (0..len.div_ceil(chunk))
            .map(|i| i * chunk..((i + 1) * chunk).min(len))
            .collect();
        let mut downs: Vec<Option<wgpu::SubmissionIndex>> = vec![None; chunks.len()];
        let mut ups: Vec<Option<wgpu::SubmissionIndex>> = vec![None; chunks.len()];
        let result = (|| {
            for (i, r) in chunks.iter().enumerate().take(depth) {
                downs[i] = Some(self.download(src, src_offset, i % depth, r)?);
            }
            for (i, r) in chunks.iter().enumerate() {
                if let Some(index) = downs[i].take() {
                    self.src.wait_for(index)?;
                }
                // SAFETY: the source's copy into the slot has completed (waited for
                // above) and its last upload completed before the slot was refilled.
                unsafe { self.across_host(i % depth, r) };
                ups[i] = Some(self.upload(dst, dst_offset, i % depth, r)?);
                let refill = i + depth - 1;
                if i >= 1 && refill < chunks.len() {
                    if let Some(index) = ups[i - 1].take() {
                        self.dst.wait_for(index)?;
                    }
                    downs[refill] =
                        Some(self.download(src, src_offset, refill % depth, &chunks[refill])?);
                }
            }
            if let Some(index) = ups.iter_mut().rev().find_map(Option::take) {
                self.dst.wait_for(index)?;
            }
            Ok(())
        })();
        log::debug!(
            "link copy of {len} bytes in {} chunks of {chunk}: {:?}",
            chunks.len(),
            started.elapsed()
        );
        self.settle(result)
    }

    /// `result`, after waiting for both devices where it is an error: no copy may
    /// outlive the caller's borrows (a device that is gone runs nothing more).
    fn settle(&self, result: Result<()>) -> Result<()> {
        if result.is_err() {
            let _ = self.src.wait_idle();
            let _ = self.dst.wait_idle();
        }
        result
    }

    /// Where the slot is two staging buffers, copies chunk `r`'s bytes from the source's
    /// buffer to the destination's on the host (shared memory needs nothing).
    ///
    /// # Safety
    /// No GPU work may use the slot's bytes meanwhile: the source's copy into it has
    /// completed and the destination's last upload out of it too.
    unsafe fn across_host(&self, slot: usize, r: &Range<u64>) {
        let slot = &self.slots[slot];
        if !slot.shared {
            let n = (r.end - r.start) as usize;
            // SAFETY: the caller's promise.
            unsafe {
                crate::stream::host_copy::copy_parallel(
                    slot.on_dst.bytes_mut(0..n),
                    slot.on_src.bytes(0..n),
                    rayon::current_num_threads(),
                );
            }
        }
    }

    /// [`copy`](Self::copy) one slot-sized chunk after the other: download, wait, host
    /// copy where needed, upload, wait.
    fn copy_serially(
        &self,
        (src, src_offset): (&Allocation, u64),
        (dst, dst_offset): (&Allocation, u64),
        len: u64,
    ) -> Result<()> {
        let result = (|| {
            let mut start = 0;
            while start < len {
                let r = start..(start + self.chunk).min(len);
                self.src.wait_for(self.download(src, src_offset, 0, &r)?)?;
                // SAFETY: both copies that touch the slot have completed.
                unsafe { self.across_host(0, &r) };
                self.dst.wait_for(self.upload(dst, dst_offset, 0, &r)?)?;
                start = r.end;
            }
            Ok(())
        })();
        self.settle(result)
    }

    /// Submits the copy of chunk `r` of `src` into slot `slot` on the source device.
    fn download(
        &self,
        src: &Allocation,
        src_offset: u64,
        slot: usize,
        r: &Range<u64>,
    ) -> Result<wgpu::SubmissionIndex> {
        self.src.submit_copy(
            "copying between devices: the source's download",
            (src.buffer(), src.offset() + src_offset + r.start),
            (self.slots[slot].on_src.buffer(), 0),
            r.end - r.start,
        )
    }

    /// Submits the copy of slot `slot` into chunk `r` of `dst` on the destination.
    fn upload(
        &self,
        dst: &Allocation,
        dst_offset: u64,
        slot: usize,
        r: &Range<u64>,
    ) -> Result<wgpu::SubmissionIndex> {
        self.dst.submit_copy(
            "copying between devices: the destination's upload",
            (self.slots[slot].on_dst.buffer(), 0),
            (dst.buffer(), dst.offset() + dst_offset + r.start),
            r.end - r.start,
        )
    }
}
