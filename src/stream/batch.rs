//! `UploadBatch`: many small uploads through shared staging buffers and one submit.

use std::marker::PhantomData;

use super::staging::{Staging, Writer};
use super::uploader::Uploader;
use crate::arena::Allocation;
use crate::Result;

/// A staging buffer being filled: its ring slot, the buffer, the bytes used, and the
/// copies recorded out of it.
struct Open {
    index: usize,
    staging: Staging,
    /// The whole buffer, opened once: one mapped view per upload would cost a map-range
    /// validation each.
    writer: Writer,
    used: u64,
    encoder: wgpu::CommandEncoder,
    /// The last copy, not yet recorded: (destination buffer, its offset, staging offset,
    /// length). An upload that continues it (next to it in the same buffer, as arena
    /// allocations made one after another usually are) lengthens it instead of recording
    /// a copy of its own; recording a copy costs wgpu microseconds of validation.
    pending: Option<(wgpu::Buffer, u64, u64, u64)>,
}

impl Open {
    fn record_pending(&mut self) {
        if let Some((dst, dst_offset, staging_offset, len)) = self.pending.take() {
            self.encoder.copy_buffer_to_buffer(
                self.staging.buffer(),
                staging_offset,
                &dst,
                dst_offset,
                len,
            );
        }
    }
}

/// Gathers many small uploads into shared staging buffers and submits their copies
/// together: one submission per staging buffer filled instead of one per upload, which is
/// what a loop of small [`Uploader::upload`] or `Queue::write_buffer` calls pays for.
///
/// Uploads take effect in the order they were added. Word-aligned uploads that fit a
/// staging buffer are gathered; others (unaligned edges, larger than a staging buffer)
/// first submit what is gathered, then go through [`Uploader::upload`], so the order
/// holds. [`submit`](Self::submit) submits the rest; dropping an unsubmitted batch submits
/// it too (and logs an error it cannot return), so no added upload is silently lost.
///
/// The batch borrows every allocation it is given until it is submitted or dropped: the
/// copies are recorded but not yet submitted, and an allocation dropped meanwhile could be
/// handed out again before the copy lands in it. This does not compile:
///
/// ```compile_fail,E0505
/// # let gpu = vramkit::Gpu::headless()?;
/// # let arena = vramkit::Arena::new(&gpu, Default::default())?;
/// # let uploader = vramkit::stream::Uploader::new(&gpu, Default::default());
/// let a = arena.alloc(4096, "a")?;
/// let mut batch = uploader.batch();
/// batch.add(&a, 0, &[0xaa; 4096])?;
/// drop(a); // error: `a` is still borrowed by the batch
/// batch.submit()?;
/// # Ok::<(), vramkit::Error>(())
/// ```
///
/// ```no_run
/// # let gpu = vramkit::Gpu::headless()?;
/// # let arena = vramkit::Arena::new(&gpu, Default::default())?;
/// let uploader = vramkit::stream::Uploader::new(&gpu, Default::default());
/// let params: Vec<_> = (0..1000)
///     .map(|i| arena.alloc(256, "params"))
///     .collect::<Result<_, _>>()?;
/// let mut batch = uploader.batch();
/// for (i, p) in params.iter().enumerate() {
///     batch.add(p, 0, &[i as u8; 256])?;
/// }
/// batch.submit()?;
/// # Ok::<(), vramkit::Error>(())
/// ```
pub struct UploadBatch<'a> {
    uploader: &'a Uploader,
    open: Option<Open>,
    bytes: u64,
    /// The allocations added, borrowed until the batch is submitted.
    _borrows: PhantomData<&'a Allocation>,
}

impl Uploader {
    /// An empty batch of uploads; see [`UploadBatch`].
    pub fn batch(&self) -> UploadBatch<'_> {
        UploadBatch {
            uploader: self,
            open: None,
            bytes: 0,
            _borrows: PhantomData,
        }
    }
}

impl<'a> UploadBatch<'a> {
    /// Adds an upload of `data` into `dst` at byte `offset`, with the same checks and the
    /// same any-size, any-offset behaviour as [`Uploader::upload`]. On error nothing of
    /// this upload is recorded; earlier ones stay in the batch. `dst` stays borrowed until
    /// the batch is submitted.
    pub fn add(&mut self, dst: &'a Allocation, offset: u64, data: &[u8]) -> Result<&mut Self> {
        let len = data.len() as u64;
        self.uploader.check_dst(dst, offset, len)?;
        if len == 0 || dst.is_virtual() {
            return Ok(self);
        }
        let chunk = self.uploader.chunk_size();
        if !offset.is_multiple_of(4) || !len.is_multiple_of(4) || len > chunk {
            self.flush()?;
            self.uploader.upload(dst, offset, data)?;
            return Ok(self);
        }
        if self
            .open
            .as_ref()
            .is_some_and(|o| o.used + len > o.staging.size())
        {
            self.flush()?;
        }
        let mut open = match self.open.take() {
            Some(open) => open,
            None => {
                // Room for this upload and the next ones: gathering is the point.
                let (index, staging) = self
                    .uploader
                    .acquire(len.max(super::uploader::MIN_STAGING))?;
                // SAFETY: an acquired slot is owned by the CPU until it is submitted.
                let writer = match unsafe { staging.writer(0..staging.size()) } {
                    Ok(writer) => writer,
                    Err(e) => {
                        self.uploader.return_unsubmitted(index);
                        return Err(e);
                    }
                };
                let encoder = self.uploader.gpu().device().create_command_encoder(
                    &wgpu::CommandEncoderDescriptor {
                        label: Some("vramkit upload batch"),
                    },
                );
                Open {
                    index,
                    staging,
                    writer,
                    used: 0,
                    encoder,
                    pending: None,
                }
            }
        };
        let at = open.used as usize;
        open.writer.copy_at(at, data, 1);
        let target = dst.offset() + offset;
        match &mut open.pending {
            Some((buffer, at, from, n))
                if buffer == dst.buffer() && *at + *n == target && *from + *n == open.used =>
            {
                *n += len;
            }
            _ => {
                open.record_pending();
                open.pending = Some((dst.buffer().clone(), target, open.used, len));
            }
        }
        open.used += len;
        self.bytes += len;
        self.open = Some(open);
        Ok(self)
    }

    /// Submits every gathered upload. GPU work submitted afterwards sees the data.
    pub fn submit(mut self) -> Result<()> {
        self.flush()
    }

    fn flush(&mut self) -> Result<()> {
        if let Some(mut open) = self.open.take() {
            open.record_pending();
            drop(open.writer);
            self.uploader
                .submit_staged(open.index, &open.staging, open.encoder)?;
            self.uploader.count_bytes(std::mem::take(&mut self.bytes));
        }
        Ok(())
    }
}

impl Drop for UploadBatch<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            log::error!("an upload batch dropped unsubmitted failed to submit: {e}");
        }
    }
}
