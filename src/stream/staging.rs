//! `Staging`: one staging buffer of an upload or download ring, either host memory the GPU
//! copies directly ([`HostBuffer`], Vulkan) or a wgpu mapped buffer (every backend).
//!
//! The two kinds hand the buffer back and forth between CPU and GPU differently: a mapped
//! buffer is unmapped before its copy is submitted and re-mapped afterwards (wgpu resolves
//! the map once the copy is done); a host buffer stays mapped and is handed back by the
//! queue's "work done" callback. The rings drive both through the same three steps:
//! [`Staging::to_gpu`] before the submit, [`Staging::when_cpu_owned`] after it, and the
//! `unsafe` byte accessors in between (the CPU may touch the bytes only after the callback
//! of the last submission that used the buffer has run).

use std::ops::Range;
use std::sync::Arc;

use rayon::prelude::*;

use super::host_copy::{copy_out_parallel, fill_parallel, PARALLEL_COPY_MIN};
use crate::gpu::accounts::{Charge, MemoryKind, Part};
use crate::gpu::{HostBuffer, HostPlacement};
use crate::{Error, Gpu, Result};

/// One staging buffer. Cheap to clone (the clones share the buffer and its line in the
/// device ledger, given back when the last clone drops).
#[derive(Clone, Debug)]
pub(crate) struct Staging {
    memory: StagingMemory,
    _charge: Arc<Charge>,
}

/// The two kinds of staging memory.
#[derive(Clone, Debug)]
enum StagingMemory {
    /// Host memory, mapped for good (see [`HostBuffer`]).
    Host(Arc<HostBuffer>),
    /// A wgpu buffer with `MAP_WRITE` or `MAP_READ`, mapped while the CPU owns it.
    Mapped(wgpu::Buffer),
}

impl Staging {
    /// A new staging buffer of `size` bytes for `mode` (`Write`: uploads, `Read`:
    /// downloads). Host memory when `prefer_host` and the backend allows; otherwise a wgpu
    /// mapped buffer, mapped at creation for uploads (ready to fill) and unmapped for
    /// downloads (ready to be a copy target). Created inside an error scope: a size the
    /// device refuses is an error, not a panic in wgpu's uncaptured-error handler.
    pub(crate) fn new(
        gpu: &Gpu,
        size: u64,
        mode: wgpu::MapMode,
        prefer_host: bool,
        label: &str,
    ) -> Result<Staging> {
        // Staging is host memory (a mapped wgpu buffer or host memory the GPU copies
        // directly): a line of its own in the ledger, outside the device's budget.
        let account = gpu.accounts().account(
            Part::Vramkit,
            MemoryKind::Host,
            match mode {
                wgpu::MapMode::Write => "upload staging",
                wgpu::MapMode::Read => "download staging",
            },
        );
        let staging = |memory| Staging {
            memory,
            _charge: Arc::new(account.charge(size)),
        };
        if prefer_host {
            let usage = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
            if let Some(host) = HostBuffer::new(gpu, size, usage, HostPlacement::System, label) {
                return Ok(staging(StagingMemory::Host(Arc::new(host))));
            }
        }
        let (usage, mapped_at_creation) = match mode {
            wgpu::MapMode::Write => (
                wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                true,
            ),
            wgpu::MapMode::Read => (
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                false,
            ),
        };
        gpu.scoped("creating a staging buffer", || {
            gpu.device().create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage,
                mapped_at_creation,
            })
        })
        .map(|b| staging(StagingMemory::Mapped(b)))
    }

    /// The wgpu buffer, for recording copies.
    pub(crate) fn buffer(&self) -> &wgpu::Buffer {
        match &self.memory {
            StagingMemory::Host(h) => h.buffer(),
            StagingMemory::Mapped(b) => b,
        }
    }

    /// Size in bytes.
    pub(crate) fn size(&self) -> u64 {
        self.buffer().size()
    }

    /// True for host memory the GPU copies directly.
    pub(crate) fn is_host(&self) -> bool {
        matches!(self.memory, StagingMemory::Host(_))
    }

    /// Hands the buffer to the GPU for the copies about to be submitted: unmaps a mapped
    /// buffer (every view of it must be gone).
    pub(crate) fn to_gpu(&self) {
        if let StagingMemory::Mapped(b) = &self.memory {
            b.unmap();
        }
    }

    /// Call right after the submit whose copies use the buffer: `done(ok)` runs (inside a
    /// later device poll) once the CPU owns the first `len` bytes again, `ok` false when a
    /// mapping failed (a lost device).
    pub(crate) fn when_cpu_owned(
        &self,
        gpu: &Gpu,
        mode: wgpu::MapMode,
        len: u64,
        done: impl FnOnce(bool) + Send + 'static,
    ) {
        match &self.memory {
            StagingMemory::Host(_) => {
                gpu.work_epoch_then(move || done(true));
            }
            StagingMemory::Mapped(b) => b.map_async(mode, ..len.max(4), move |r| done(r.is_ok())),
        }
    }

    /// After a blocking wait for the submission whose copies used the buffer has returned:
    /// whether the CPU owns the buffer again, asked of the buffer itself rather than
    /// learned from the [`when_cpu_owned`](Self::when_cpu_owned) callback.
    ///
    /// wgpu runs that callback on whichever thread's poll resolves the mapping, after the
    /// poll has released its locks; that thread may be inside another callback, waiting
    /// for a lock this thread holds (a download inside a callback of `Gpu::submit` holds
    /// the queue lock: seen on the H100 as three tests hung together). Once the wait has
    /// returned, the mapping is resolved whoever polled (wgpu-core maps buffers under its
    /// lifetime lock, in the poll that finds their submission done), so a mapped buffer
    /// answers here; a host buffer is the CPU's as soon as the submission is done. False
    /// means the mapping failed.
    pub(crate) fn owned_after_wait(&self) -> bool {
        match &self.memory {
            StagingMemory::Host(_) => true,
            StagingMemory::Mapped(b) => b.slice(..4).get_mapped_range().is_ok(),
        }
    }

    /// Gives a mapped buffer back for good (destroys it); a host buffer is freed when its
    /// last clone drops.
    pub(crate) fn destroy(self) {
        if let StagingMemory::Mapped(b) = &self.memory {
            b.destroy();
        }
    }

    /// Write access to the bytes in `range`.
    ///
    /// # Safety
    /// The CPU must own the buffer: no submitted copy uses it (see the module docs), and no
    /// other writer or reader of the same bytes exists while this one lives.
    pub(crate) unsafe fn writer(&self, range: Range<u64>) -> Result<Writer> {
        match &self.memory {
            StagingMemory::Host(h) => Ok(Writer::Host {
                buffer: h.clone(),
                range: host_range(h, range)?,
            }),
            StagingMemory::Mapped(b) => b
                .get_mapped_range_mut(range)
                .map(Writer::Mapped)
                .map_err(|e| map_error("writing a staging buffer", e)),
        }
    }

    /// Copies `dst.len()` bytes from `at` into `dst` (the program's memory), on several
    /// threads and with streaming stores when large (see `host_copy`).
    ///
    /// # Safety
    /// The CPU must own the buffer (see the module docs) and no writer of these bytes
    /// exists.
    pub(crate) unsafe fn read(&self, at: u64, dst: &mut [u8], threads: usize) -> Result<()> {
        let range = at..at + dst.len() as u64;
        match &self.memory {
            StagingMemory::Host(h) => {
                let range = host_range(h, range)?;
                // SAFETY: the caller owns the buffer on the CPU side and nobody writes it.
                let src = unsafe { h.bytes(range) };
                copy_out_parallel(dst, src, threads);
                Ok(())
            }
            StagingMemory::Mapped(b) => {
                // Mapped views start on 8-byte boundaries and span whole words.
                let start = range.start / wgpu::MAP_ALIGNMENT * wgpu::MAP_ALIGNMENT;
                let end = range.end.next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT);
                let view = b
                    .get_mapped_range(start..end)
                    .map_err(|e| map_error("reading a staging buffer", e))?;
                copy_out_parallel(dst, &view[(range.start - start) as usize..], threads);
                Ok(())
            }
        }
    }

    /// The bytes in `range`, read in place: a host buffer's memory, or a mapped buffer's
    /// view (which must be dropped before [`to_gpu`](Self::to_gpu)).
    ///
    /// # Safety
    /// As for [`read`](Self::read), for as long as the returned bytes live.
    pub(crate) unsafe fn bytes(&self, range: Range<u64>) -> Result<ReadBytes> {
        match &self.memory {
            StagingMemory::Host(h) => Ok(ReadBytes::Host {
                buffer: h.clone(),
                range: host_range(h, range)?,
            }),
            StagingMemory::Mapped(b) => b
                .get_mapped_range(range)
                .map(ReadBytes::Mapped)
                .map_err(|e| map_error("reading a staging buffer", e)),
        }
    }
}

/// `range` as indices into a host buffer, checked against its size.
fn host_range(h: &HostBuffer, range: Range<u64>) -> Result<Range<usize>> {
    let size = h.buffer().size();
    if range.start <= range.end && range.end <= size {
        Ok(range.start as usize..range.end as usize)
    } else {
        Err(Error::Device {
            during: "accessing a staging buffer".into(),
            message: format!("range {range:?} outside a staging buffer of {size} bytes"),
        })
    }
}

fn map_error(during: &str, e: wgpu::MapRangeError) -> Error {
    Error::Device {
        during: during.into(),
        message: e.to_string(),
    }
}

/// Write access to part of a staging buffer the CPU owns (see [`Staging::writer`]).
pub(crate) enum Writer {
    Host {
        buffer: Arc<HostBuffer>,
        range: Range<usize>,
    },
    Mapped(wgpu::BufferViewMut),
}

impl Writer {
    /// The bytes, write-only (mapped memory may be write-combined, where reads are slow).
    pub(crate) fn bytes(&mut self) -> wgpu::WriteOnly<'_, [u8]> {
        match self {
            Writer::Host { buffer, range } => {
                // SAFETY: `Staging::writer`'s caller guaranteed exclusive CPU ownership of
                // these bytes for the writer's life; the slice borrows the writer mutably.
                wgpu::WriteOnly::from(unsafe { buffer.bytes_mut(range.clone()) })
            }
            Writer::Mapped(view) => view.slice(..),
        }
    }

    /// Copies the tightly packed rows of `src` (`row` bytes each) to byte `at` of the
    /// writer, one every `pitch` bytes, on up to `threads` threads when large.
    pub(crate) fn copy_rows(
        &mut self,
        at: usize,
        src: &[u8],
        row: usize,
        pitch: usize,
        threads: usize,
    ) {
        if row == 0 {
            return;
        }
        if pitch == row {
            // Rows already at the pitch are one contiguous span: one split copy.
            self.copy_at(at, src, threads);
            return;
        }
        let rows = src.len() / row;
        let span = (rows.saturating_sub(1)) * pitch + row;
        let mut dst = self.bytes().into_slice(at..at + span);
        let per_group = if threads <= 1 || src.len() < PARALLEL_COPY_MIN {
            rows
        } else {
            rows.div_ceil(threads).max(1)
        };
        // Groups of whole rows, each group's staging span split off the front.
        let mut groups = Vec::with_capacity(rows.div_ceil(per_group));
        for (g, rows_src) in src.chunks(per_group * row).enumerate() {
            let n = rows_src.len() / row;
            let last = (g + 1) * per_group >= rows;
            let take = if last { dst.len() } else { n * pitch };
            let (head, rest) = std::mem::take(&mut dst).split_at(take);
            dst = rest;
            groups.push((SendWriteOnly(head), rows_src));
        }
        let copy_group = |(mut d, s): (SendWriteOnly<'_>, &[u8])| {
            for (r, bytes) in s.chunks_exact(row).enumerate() {
                d.0.slice(r * pitch..r * pitch + row).copy_from_slice(bytes);
            }
        };
        if groups.len() == 1 {
            groups.into_iter().for_each(copy_group);
        } else {
            groups.into_par_iter().for_each(copy_group);
        }
    }

    /// Copies `pieces` back to back from byte 0 of the writer (piece `k` at `starts[k]`),
    /// spread over rayon's pool when there is more than one piece: what a batch of tiles
    /// whose rows are already at the copy pitch needs (no row gaps to skip).
    pub(crate) fn copy_pieces(&mut self, starts: &[usize], pieces: &[&[u8]]) {
        let Some(&last) = starts.last() else {
            return;
        };
        let end = last + pieces.last().map_or(0, |p| p.len());
        let mut dst = self.bytes().into_slice(0..end);
        let mut jobs = Vec::with_capacity(pieces.len());
        let mut at = 0;
        for (&start, piece) in starts.iter().zip(pieces) {
            let (_, rest) = std::mem::take(&mut dst).split_at(start - at);
            let (head, rest) = rest.split_at(piece.len());
            jobs.push((SendWriteOnly(head), *piece));
            dst = rest;
            at = start + piece.len();
        }
        if jobs.len() == 1 {
            jobs.into_iter()
                .for_each(|(mut d, s)| d.0.copy_from_slice(s));
        } else {
            jobs.into_par_iter()
                .for_each(|(mut d, s)| d.0.copy_from_slice(s));
        }
    }

    /// Writes runs of equal tiles side by side, as a texture copy of each run reads them:
    /// run `(start, pitch, tiles)` has `rows` rows of `pitch` bytes from byte `start`, and
    /// tile `j` (tightly packed rows of `row` bytes) fills bytes `j * row..(j + 1) * row`
    /// of each. Runs must be in ascending, non-overlapping order. Spread over rayon's pool
    /// in bands of rows.
    pub(crate) fn copy_tile_runs(
        &mut self,
        runs: &[(usize, usize, Vec<&[u8]>)],
        row: usize,
        rows: usize,
    ) {
        let Some((last, last_pitch, _)) = runs.last() else {
            return;
        };
        // Bands of rows of about 256 KiB, several small runs to one job: a rayon job per
        // 8 KiB costs more than it copies.
        const JOB: usize = 256 << 10;
        let mut dst = self.bytes().into_slice(0..last + rows * last_pitch);
        let mut at = 0;
        let mut jobs: Vec<Vec<Band<'_, '_>>> = vec![Vec::new()];
        let mut job_bytes = 0;
        for (start, pitch, tiles) in runs {
            let (_, rest) = std::mem::take(&mut dst).split_at(start - at);
            dst = rest;
            let band_rows = (JOB / pitch).clamp(1, rows);
            let mut r0 = 0;
            while r0 < rows {
                let n = band_rows.min(rows - r0);
                let (band, rest) = std::mem::take(&mut dst).split_at(n * pitch);
                dst = rest;
                if job_bytes >= JOB {
                    jobs.push(Vec::new());
                    job_bytes = 0;
                }
                job_bytes += n * pitch;
                if let Some(job) = jobs.last_mut() {
                    job.push((SendWriteOnly(band), tiles, r0, n, *pitch));
                }
                r0 += n;
            }
            at = start + rows * pitch;
        }
        let copy = |job: Vec<Band<'_, '_>>| {
            for (mut band, tiles, r0, n, pitch) in job {
                for r in 0..n {
                    for (j, t) in tiles.iter().enumerate() {
                        let src = &t[(r0 + r) * row..(r0 + r + 1) * row];
                        band.0
                            .slice(r * pitch + j * row..r * pitch + (j + 1) * row)
                            .copy_from_slice(src);
                    }
                }
            }
        };
        if jobs.len() == 1 {
            jobs.into_iter().for_each(copy);
        } else {
            jobs.into_par_iter().for_each(copy);
        }
    }

    /// Copies `src` to byte `at` of the writer, on up to `threads` threads when large.
    pub(crate) fn copy_at(&mut self, at: usize, src: &[u8], threads: usize) {
        let dst = self.bytes().into_slice(at..at + src.len());
        fill_parallel(dst, src, threads);
    }
}

/// Bytes read in place from a staging buffer (see [`Staging::bytes`]).
pub(crate) enum ReadBytes {
    Host {
        buffer: Arc<HostBuffer>,
        range: Range<usize>,
    },
    Mapped(wgpu::BufferView),
}

impl std::ops::Deref for ReadBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            ReadBytes::Host { buffer, range } => {
                // SAFETY: `Staging::bytes`'s caller guaranteed that nothing writes these
                // bytes while this value lives.
                unsafe { buffer.bytes(range.clone()) }
            }
            ReadBytes::Mapped(view) => view,
        }
    }
}

/// Rows `r0..r0 + n` of one run of tiles (rows of `pitch` bytes), for
/// [`Writer::copy_tile_runs`].
type Band<'w, 't> = (SendWriteOnly<'w>, &'t Vec<&'t [u8]>, usize, usize, usize);

/// `WriteOnly<[u8]>` is an exclusive reference to bytes, as `&mut [u8]` is, and so may move
/// to another thread; wgpu-types' `Send` impl covers only sized targets (`T: Send` with
/// the implicit `Sized` bound), so slices need this wrapper.
struct SendWriteOnly<'a>(wgpu::WriteOnly<'a, [u8]>);

// SAFETY: see the type's docs: the wrapped value is an exclusive, non-aliased byte range.
unsafe impl Send for SendWriteOnly<'_> {}
