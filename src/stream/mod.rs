//! Streaming data between host and GPU memory.
//!
//! [`Uploader`] moves host bytes into arena allocations through a ring of staging buffers:
//! large transfers are cut into chunks, so filling chunk `k + 1` on the CPU overlaps the
//! GPU's copy of chunk `k`; staging memory is bounded (a full ring waits for the GPU
//! instead of growing); and after warm-up no buffer is created. On Vulkan the staging
//! lives in plain host memory that the GPU's copy engine reads directly (the counterpart
//! of CUDA's pinned memory, allocated through wgpu-hal); wgpu's own `MAP_WRITE` buffers
//! sit in device memory the CPU writes across the bus where the GPU offers it, which
//! halves the rate (BENCHMARKS.md). Other backends use wgpu mapped buffers. An
//! [`UploadBatch`] gathers many small uploads into shared staging and one submit;
//! [`Uploader::upload_texture`] lays tightly packed rows out at the 256-byte pitch that
//! texture copies need.
//!
//! [`Downloader`] is the reverse: a ring of staging buffers with several chunk copies in
//! flight while the current chunk is copied out, into a new `Vec` or memory the caller
//! keeps; or, with no copy at all, a [`DownloadView`] of staging memory, blocking or as a
//! future that a polling thread resolves.
//!
//! [`PinnedBuffer`] is host memory the GPU copies from and into directly (CUDA's pinned
//! memory): a program that produces its data there, or reads results from there, moves
//! it with one GPU copy and no host copy ([`Uploader::upload_pinned`],
//! [`Downloader::download_pinned`]).
//!
//! [`Pipeline`] streams a source larger than GPU memory (a memory-mapped file, any
//! `Read`) through a fixed window of device chunks, overlapping the upload of chunk `k + 1`
//! with the kernels on chunk `k` and the readback of chunk `k - 1`'s result.

mod batch;
mod downloader;
pub(crate) mod host_copy;
mod pinned;
mod pipeline;
mod staging;
mod texture;
pub(crate) mod uploader;
mod view;

pub use batch::UploadBatch;
pub use downloader::{Downloader, DownloaderConfig};
pub use pinned::PinnedBuffer;
pub use pipeline::{Pipeline, PipelineConfig, PipelineReport, Source};
pub use uploader::{Uploader, UploaderConfig, UploaderStats, SMALL_UPLOAD};
pub use view::DownloadView;

use crate::arena::Allocation;
use crate::{Error, Result};

/// The `metrics` counter of bytes uploaded by every [`Uploader`].
pub(crate) const UPLOADED: &str = "vramkit_uploaded_bytes_total";
/// The `metrics` counter of bytes downloaded by every [`Downloader`].
pub(crate) const DOWNLOADED: &str = "vramkit_downloaded_bytes_total";

/// Adds `bytes` to the `metrics` counter `name` (cargo feature `metrics`; nothing
/// without it).
#[inline]
pub(crate) fn publish_moved(name: &'static str, bytes: u64) {
    #[cfg(feature = "metrics")]
    metrics::counter!(name).increment(bytes);
    #[cfg(not(feature = "metrics"))]
    let _ = (name, bytes);
}

/// A ring's chunk size: `requested` rounded up to whole words and capped at the device's
/// largest buffer (a larger staging buffer would fail to create).
fn chunk_size(gpu: &crate::Gpu, requested: u64) -> u64 {
    requested
        .clamp(4, (gpu.limits().max_buffer_size / 4 * 4).max(4))
        .next_multiple_of(4)
}

/// Checks that `a` lives on `gpu`'s device, that `[offset, offset + len)` lies inside it
/// and that its buffer has `usage` (the copy direction); returns the end of the range.
fn check_range(
    gpu: &crate::Gpu,
    a: &Allocation,
    offset: u64,
    len: u64,
    usage: wgpu::BufferUsages,
    what: &str,
) -> Result<u64> {
    gpu.check_alive()?;
    a.check_device(gpu, what)?;
    let end = offset
        .checked_add(len)
        .filter(|&e| e <= a.size())
        .ok_or_else(|| {
            Error::misuse(
                crate::Misuse::Length,
                format!(
                    "{what} of {len} bytes at offset {offset} in '{}' of {} bytes",
                    a.label(),
                    a.size()
                ),
                "keep offset + length within the allocation",
            )
        })?;
    if !a.buffer().usage().contains(usage) {
        return Err(Error::misuse(
            crate::Misuse::Usage,
            format!(
                "allocation '{}' lives in a buffer without {usage:?} usage",
                a.label()
            ),
            format!("allocate it from a pool whose usage includes {usage:?}"),
        ));
    }
    Ok(end)
}
