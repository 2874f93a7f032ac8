//! Pinned host buffers: host memory the GPU copies from and into directly.
//!
//! [`PinnedBuffer`] is the counterpart of a CUDA pinned (page-locked) host allocation.
//! The program writes its data into it (or reads results out of it) through ordinary
//! slices, and [`Uploader::upload_pinned`] / [`Downloader::download_pinned`] move bytes
//! between it and an arena allocation with one GPU copy and no host copy: the link's speed
//! is the limit. [`Uploader::upload`] from an ordinary slice must first copy the bytes
//! into staging on the CPU, which is what holds it below the link on fast links
//! (BENCHMARKS.md).
//!
//! # What it promises
//! - The CPU and the GPU never touch the bytes at the same time. The transfer calls borrow
//!   the buffer (shared for an upload, which only reads it; exclusive for a download) and
//!   return only once the GPU copy has completed, so while any slice of the buffer is
//!   alive no copy is in flight.
//! - On Vulkan the memory is host memory allocated through wgpu-hal, host-visible and
//!   coherent, mapped for the buffer's whole life (`HostBuffer`). Elsewhere, or where
//!   the Vulkan calls fail, it is an ordinary `Vec` and the transfers go through the
//!   staging rings: same results, one host copy more ([`PinnedBuffer::is_pinned`] says
//!   which).
//! - Transfers move whole words: offsets and lengths are multiples of 4 (a GPU copy's
//!   alignment); anything else is an error that says so.

use std::ops::Range;

use super::{Downloader, Uploader};
use crate::arena::Allocation;
use crate::gpu::{HostBuffer, HostPlacement};
use crate::{Error, Gpu, Result};

/// Host memory for transfers without a host copy: the counterpart of a CUDA pinned host
/// allocation. Fill it (or read results from it) through [`as_mut_slice`](Self::as_mut_slice)
/// and [`as_slice`](Self::as_slice); [`Uploader::upload_pinned`] and
/// [`Downloader::download_pinned`] move whole words between it and an allocation with one
/// GPU copy, borrowing the buffer until the copy has completed, so the CPU and the GPU
/// never touch the bytes at once. On Vulkan it is host memory the GPU reads and writes
/// directly; elsewhere an ordinary allocation whose transfers take the staging rings
/// ([`is_pinned`](Self::is_pinned) says which).
///
/// ```no_run
/// # let gpu = vramkit::Gpu::headless()?;
/// # let arena = vramkit::Arena::new(&gpu, Default::default())?;
/// use vramkit::stream::{Downloader, PinnedBuffer, Uploader};
/// let uploader = Uploader::new(&gpu, Default::default());
/// let downloader = Downloader::new(&gpu, Default::default());
/// let x = arena.alloc(64 << 20, "x")?;
/// let mut pinned = PinnedBuffer::new(&gpu, 64 << 20, "frames")?;
/// pinned.as_mut_slice().fill(7); // produce the data in place
/// uploader.upload_pinned(&x, 0, &pinned, 0..64 << 20)?;
/// downloader.download_pinned(&x, 0, &mut pinned, 0..64 << 20)?;
/// assert!(pinned.as_slice().iter().all(|&b| b == 7));
/// # Ok::<(), vramkit::Error>(())
/// ```
pub struct PinnedBuffer {
    gpu: Gpu,
    memory: Memory,
}

enum Memory {
    /// Host memory the GPU copies from and into directly.
    Host(HostBuffer),
    /// Where no such memory could be had: transfers go through the staging rings.
    Plain(Vec<u8>),
}

impl std::fmt::Debug for PinnedBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("len", &self.len())
            .field("pinned", &self.is_pinned())
            .finish()
    }
}

impl PinnedBuffer {
    /// `len` zeroed bytes of pinned host memory on `gpu`'s device (`label` names it in
    /// logs). `len` must be a non-zero multiple of 4 and at most the device's largest
    /// buffer.
    pub fn new(gpu: &Gpu, len: u64, label: &str) -> Result<PinnedBuffer> {
        gpu.check_alive()?;
        let max = gpu.limits().max_buffer_size;
        if len == 0 || !len.is_multiple_of(4) || len > max {
            return Err(Error::misuse(
 crate::Misuse::Alignment,
                format!("a pinned buffer of {len} bytes"),
                format!("ask for a non-zero multiple of 4 bytes, at most {max} (the device's largest buffer)"),
            ));
        }
        let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
        let memory = match HostBuffer::new(gpu, len, usage, HostPlacement::System, label) {
            Some(host) => {
                // Zeroed like the Vec fallback, so both read the same before any write.
                // SAFETY: the buffer is new: no GPU work uses it and no other slice exists.
                unsafe { host.bytes_mut(0..host_len(len)?) }.fill(0);
                Memory::Host(host)
            }
            None => Memory::Plain(vec![0; host_len(len)?]),
        };
        Ok(PinnedBuffer {
            gpu: gpu.clone(),
            memory,
        })
    }

    /// Bytes in the buffer.
    pub fn len(&self) -> u64 {
        match &self.memory {
            Memory::Host(h) => h.buffer().size(),
            Memory::Plain(v) => v.len() as u64,
        }
    }

    /// Always false: a pinned buffer holds at least 4 bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True when the GPU copies from and into this memory directly; false when it is an
    /// ordinary allocation and transfers take one host copy more.
    pub fn is_pinned(&self) -> bool {
        matches!(self.memory, Memory::Host(_))
    }

    /// The bytes, for reading.
    pub fn as_slice(&self) -> &[u8] {
        match &self.memory {
            // SAFETY: GPU copies into this memory run only inside `download_pinned`,
            // which holds `&mut self` until they complete; this `&self` excludes that.
            Memory::Host(h) => unsafe { h.bytes(0..usize::MAX) },
            Memory::Plain(v) => v,
        }
    }

    /// The bytes, for writing.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.memory {
            // SAFETY: every GPU copy of this memory runs inside a transfer call that
            // borrows `self` until it completes; this `&mut self` excludes them all, and
            // the returned slice is the only one.
            Memory::Host(h) => unsafe { h.bytes_mut(0..usize::MAX) },
            Memory::Plain(v) => v,
        }
    }

    /// Checks that a transfer of `range` (of this buffer) with the allocation at `offset`
    /// runs on this buffer's device and moves whole words inside the buffer.
    fn check(&self, gpu: &Gpu, offset: u64, range: &Range<u64>, what: &str) -> Result<u64> {
        if !self.gpu.same_device(gpu) {
            return Err(Error::misuse(
                crate::Misuse::Foreign,
                format!("{what}: the pinned buffer belongs to another device"),
                "create the PinnedBuffer with the Gpu of the uploader or downloader",
            ));
        }
        let len = range
            .end
            .checked_sub(range.start)
            .filter(|_| range.end <= self.len());
        let Some(len) = len else {
            return Err(Error::misuse(
                crate::Misuse::Length,
                format!(
                    "{what}: bytes {}..{} of a pinned buffer of {} bytes",
                    range.start,
                    range.end,
                    self.len()
                ),
                "pass a range inside the pinned buffer",
            ));
        };
        if !(offset.is_multiple_of(4) && range.start.is_multiple_of(4) && len.is_multiple_of(4)) {
            return Err(Error::misuse(
                crate::Misuse::Alignment,
                format!(
                    "{what}: {len} bytes between pinned offset {} and allocation offset \
                     {offset} (not whole words)",
                    range.start
                ),
                "use offsets and lengths that are multiples of 4 (Uploader::upload and \
                 Downloader::download_into take any)",
            ));
        }
        Ok(len)
    }
}

/// `len` as a host length.
fn host_len(len: u64) -> Result<usize> {
    usize::try_from(len).map_err(|_| {
        Error::invalid(
            format!("a pinned buffer of {len} bytes"),
            "this host cannot address that many bytes",
        )
    })
}

/// Which way a pinned copy goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    Upload,
    /// Into the pinned buffer, which the host then reads: the host-read barrier follows
    /// the copy (`gpu::submit`, "GPU writes and host reads").
    Download,
}

/// Records one copy, submits it and waits for it to complete (so the caller's borrow of
/// the pinned buffer outlives the GPU's use of it).
fn copy_and_wait(
    gpu: &Gpu,
    during: &str,
    direction: Direction,
    src: (&wgpu::Buffer, u64),
    dst: (&wgpu::Buffer, u64),
    len: u64,
) -> Result<()> {
    let index = match direction {
        Direction::Upload => gpu.submit_copy(during, src, dst, len)?,
        Direction::Download => gpu.submit_copy_for_host(during, src, dst, len)?,
    };
    if let Err(e) = gpu.wait_for(index) {
        // Keep the promise before reporting: no copy may outlive the borrow. If even this
        // fails, the device is gone and runs nothing more.
        let _ = gpu.wait_idle();
        return Err(e);
    }
    Ok(())
}

impl Uploader {
    /// Copies bytes `range` of `src` into `dst` at `offset` with one GPU copy and no host
    /// copy (see [`PinnedBuffer`]); returns once they have landed, so `src` may be
    /// refilled at once. Offsets and the length must be multiples of 4.
    ///
    /// Errors: a range past the end of `src` or `dst`, unaligned offsets or length, a
    /// `src` of another device, a `dst` whose buffer lacks `COPY_DST`.
    pub fn upload_pinned(
        &self,
        dst: &Allocation,
        offset: u64,
        src: &PinnedBuffer,
        range: Range<u64>,
    ) -> Result<()> {
        let len = src.check(self.gpu(), offset, &range, "upload_pinned")?;
        let host = match &src.memory {
            Memory::Host(h) => h,
            // Through the staging rings, which check `dst` and count the bytes. `upload`
            // may return with its last chunk in flight; it copied the bytes out of `v`
            // already, so nothing reads `src` after this.
            Memory::Plain(v) => {
                return self.upload(dst, offset, &v[range.start as usize..range.end as usize])
            }
        };
        self.check_dst(dst, offset, len)?;
        if len == 0 || dst.is_virtual() {
            // A dry run moves no bytes (see `crate::plan`).
            return Ok(());
        }
        copy_and_wait(
            self.gpu(),
            "uploading from a pinned buffer",
            Direction::Upload,
            (host.buffer(), range.start),
            (dst.buffer(), dst.offset() + offset),
            len,
        )?;
        self.count_bytes(len);
        Ok(())
    }
}

impl Downloader {
    /// Copies `range.len()` bytes of `src` at `offset` into bytes `range` of `dst` with one
    /// GPU copy and no host copy (see [`PinnedBuffer`]); returns once they have landed.
    /// Offsets and the length must be multiples of 4.
    ///
    /// Errors: a range past the end of `src` or `dst`, unaligned offsets or length, a
    /// `dst` of another device, a `src` whose buffer lacks `COPY_SRC`.
    pub fn download_pinned(
        &self,
        src: &Allocation,
        offset: u64,
        dst: &mut PinnedBuffer,
        range: Range<u64>,
    ) -> Result<()> {
        let len = dst.check(self.gpu(), offset, &range, "download_pinned")?;
        if let Memory::Plain(v) = &mut dst.memory {
            // Through the staging rings, which check `src` and count the bytes.
            let out = &mut v[range.start as usize..range.end as usize];
            return self.download_into(src, offset, out);
        }
        self.check_and_count_src(src, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        if src.is_virtual() {
            // A dry run has no bytes to read: it reads zeros (see `crate::plan`).
            dst.as_mut_slice()[range.start as usize..range.end as usize].fill(0);
            return Ok(());
        }
        if let Memory::Host(host) = &dst.memory {
            copy_and_wait(
                self.gpu(),
                "downloading into a pinned buffer",
                Direction::Download,
                (src.buffer(), src.offset() + offset),
                (host.buffer(), range.start),
                len,
            )?;
        }
        Ok(())
    }
}
