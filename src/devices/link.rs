//! `Link`: copies from one device of a set to another through host memory both GPUs copy
//! directly, chunked so that one GPU's download and the other's upload run at once.
//!
//! # How it works
//! A link from device `s` to device `d` owns `depth` slots of `chunk` bytes, of one of
//! three kinds ([`TransferPath`]):
//! - where both devices were opened with `VK_EXT_external_memory_host`
//!   (`gpu::host_import`), a slot is *one* host allocation imported into both devices as
//!   a buffer: `s` copies a chunk of the source into it, and `d` copies the same bytes out
//!   of it, with no copy on the host;
//! - elsewhere on Vulkan, two staging buffers (`HostBuffer`, each in its device's system
//!   memory) and a host copy between them, on the parallel copy threads of
//!   `stream::host_copy`;
//! - on other backends (Metal, DX12, GL), a mapped read-back buffer on `s`, whose chunk is
//!   handed to `d` as a queued write (`Queue::write_buffer`): what wgpu offers everywhere.
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
use crate::{Allocation, Gpu, Result};

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
    /// Which way the bytes go through the host; [`TransferPath::Fastest`] by default.
    pub path: TransferPath,
    /// Overlap the source's downloads with the destination's uploads (the pipeline of the
    /// module docs). `false` copies one chunk after the other, each downloaded and then
    /// uploaded, for comparison: the serial host path. Default `true`.
    pub overlap: bool,
    /// How all-reduces run ([`AllReduceAlgorithm::Fastest`](super::AllReduceAlgorithm)
    /// by default).
    pub all_reduce: super::AllReduceAlgorithm,
}

impl Default for TransferConfig {
    fn default() -> Self {
        TransferConfig {
            chunk: None,
            depth: 4,
            path: TransferPath::Fastest,
            overlap: true,
            all_reduce: super::AllReduceAlgorithm::Fastest,
        }
    }
}

/// Which way a copy between devices goes through the host ([`TransferConfig::path`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TransferPath {
    /// The fastest the devices allow: one host allocation imported into both (Vulkan with
    /// `VK_EXT_external_memory_host`), else [`HostCopy`](Self::HostCopy) where both are
    /// Vulkan, else [`Portable`](Self::Portable).
    #[default]
    Fastest,
    /// Two staging buffers in host memory each GPU copies directly, and a copy between
    /// them on the host (Vulkan; elsewhere [`Portable`](Self::Portable)).
    HostCopy,
    /// wgpu's own means on every backend (Metal, DX12, GL): the source's chunk read back
    /// through a mapped buffer, the destination's written with `Queue::write_buffer`. Two
    /// host copies per chunk.
    Portable,
}

/// One slot: what the source copies into and the destination copies out of.
enum Slot {
    /// One host allocation imported into both devices: nothing to do on the host.
    Shared {
        on_src: HostBuffer,
        on_dst: HostBuffer,
    },
    /// A staging buffer on each device and a host copy between them.
    Staged {
        on_src: HostBuffer,
        on_dst: HostBuffer,
    },
    /// A mapped read-back buffer on the source; the destination gets a queued write.
    Mapped { readback: wgpu::Buffer },
}

impl Slot {
    /// The buffer the source's download lands in.
    fn src_buffer(&self) -> &wgpu::Buffer {
        match self {
            Slot::Shared { on_src, .. } | Slot::Staged { on_src, .. } => on_src.buffer(),
            Slot::Mapped { readback } => readback,
        }
    }
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
            (Some(a), Some(b)) if config.path == TransferPath::Fastest => Some(a.max(b)),
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
                Some(Slot::Shared { on_src, on_dst })
            });
            let staged = || {
                if config.path == TransferPath::Portable {
                    return None;
                }
                let staging =
                    |gpu: &Gpu| HostBuffer::new(gpu, chunk, usage, HostPlacement::System, &label);
                Some(Slot::Staged {
                    on_src: staging(src)?,
                    on_dst: staging(dst)?,
                })
            };
            let slot = match imported.or_else(staged) {
                Some(slot) => slot,
                None => Slot::Mapped {
                    readback: src.scoped(
                        "a read-back buffer for copies between devices",
                        || {
                            src.device().create_buffer(&wgpu::BufferDescriptor {
                                label: Some(&label),
                                size: chunk,
                                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                                mapped_at_creation: false,
                            })
                        },
                    )?,
                },
            };
            slots.push(slot);
        }
        log::debug!(
            "link {} -> {}: {depth} x {} {}",
            src.info().name,
            dst.info().name,
            crate::fmt_bytes(chunk),
            match slots.first() {
                Some(Slot::Shared { .. }) => "of host memory imported into both devices",
                Some(Slot::Staged { .. }) => "of staging with a host copy between them",
                _ => "of mapped read-back buffers and queued writes",
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
        self.slots.iter().all(|s| matches!(s, Slot::Shared { .. }))
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
                // The source's copy into the slot has completed (waited for above) and
                // its last upload completed before the slot was refilled.
                ups[i] = Some(self.land(dst, dst_offset, i % depth, r)?);
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
                self.dst.wait_for(self.land(dst, dst_offset, 0, &r)?)?;
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
        // Host memory the host copies out of (staged) or the other device reads (shared):
        // the source's writes are made available to the host first (`gpu::submit`, "GPU
        // writes and host reads"). wgpu's own mapped read-back needs no barrier of ours.
        let to_host = !matches!(self.slots[slot], Slot::Mapped { .. });
        let during = "copying between devices: the source's download";
        let from = (src.buffer(), src.offset() + src_offset + r.start);
        let into = (self.slots[slot].src_buffer(), 0);
        if to_host {
            self.src
                .submit_copy_for_host(during, from, into, r.end - r.start)
        } else {
            self.src.submit_copy(during, from, into, r.end - r.start)
        }
    }

    /// Moves chunk `r`, which the source has finished copying into slot `slot`, on to
    /// `dst`: submits the destination's copy out of shared memory, copies between the
    /// staging buffers on the host first, or reads the mapped chunk back and queues it as
    /// a write. The slot's last upload has completed.
    fn land(
        &self,
        dst: &Allocation,
        dst_offset: u64,
        slot: usize,
        r: &Range<u64>,
    ) -> Result<wgpu::SubmissionIndex> {
        const DURING: &str = "copying between devices: the destination's upload";
        let n = r.end - r.start;
        let at = dst.offset() + dst_offset + r.start;
        let on_dst = match &self.slots[slot] {
            Slot::Shared { on_dst, .. } => on_dst,
            Slot::Staged { on_src, on_dst } => {
                // SAFETY: no GPU work uses either buffer's bytes now (the caller's
                // promise), and this thread is the link's only user.
                unsafe {
                    crate::stream::host_copy::copy_parallel(
                        on_dst.bytes_mut(0..n as usize),
                        on_src.bytes(0..n as usize),
                        rayon::current_num_threads(),
                    );
                }
                on_dst
            }
            Slot::Mapped { readback } => {
                let bytes = self.src.map_read(readback, 0, n)?;
                self.dst.write_buffer(dst.buffer(), at, &bytes);
                // The queued write goes to the GPU with the next submission.
                return self
                    .dst
                    .scoped(DURING, || self.dst.submit(std::iter::empty()));
            }
        };
        self.dst
            .submit_copy(DURING, (on_dst.buffer(), 0), (dst.buffer(), at), n)
    }
}
