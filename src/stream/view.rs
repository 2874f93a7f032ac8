//! `DownloadView`: downloaded bytes read in place from mapped staging memory.

use std::ops::Deref;
use std::sync::Arc;

use crate::sync::rank::Mutex;

use super::staging::{ReadBytes, Staging};

/// Staging buffers kept for views, returned when a view drops.
pub(crate) type ViewPool = Arc<Mutex<Vec<Staging>>>;

/// Bytes of an allocation as they were on the GPU, read in place from a staging buffer
/// (no copy into a `Vec`). Dereferences to `[u8]`. Dropping it gives the staging buffer
/// back to the [`Downloader`](super::Downloader) for the next view;
/// keep views short-lived, as each holds one staging buffer.
///
/// ```no_run
/// # let gpu = vramkit::Gpu::headless()?;
/// # let arena = vramkit::Arena::new(&gpu, Default::default())?;
/// # let a = arena.alloc(1024, "result")?;
/// let downloader = vramkit::stream::Downloader::new(&gpu, Default::default());
/// let view = downloader.download_view(&a, 0, a.size())?;
/// let first: f32 = bytemuck::pod_read_unaligned(&view[..4]);
/// # Ok::<(), vramkit::Error>(())
/// ```
pub struct DownloadView {
    /// `None` for an empty view, which needs no buffer.
    mapped: Option<(ReadBytes, Staging)>,
    /// Bytes before the requested offset (copies start on a 4-byte boundary).
    skip: usize,
    len: usize,
    pool: ViewPool,
    keep: usize,
}

impl DownloadView {
    pub(crate) fn new(
        view: ReadBytes,
        buffer: Staging,
        skip: usize,
        len: usize,
        pool: ViewPool,
        keep: usize,
    ) -> DownloadView {
        DownloadView {
            mapped: Some((view, buffer)),
            skip,
            len,
            pool,
            keep,
        }
    }

    pub(crate) fn empty(pool: ViewPool) -> DownloadView {
        DownloadView {
            mapped: None,
            skip: 0,
            len: 0,
            pool,
            keep: 0,
        }
    }
}

impl Deref for DownloadView {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.mapped {
            Some((view, _)) => &view[self.skip..self.skip + self.len],
            None => &[],
        }
    }
}

impl std::fmt::Debug for DownloadView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DownloadView")
            .field("len", &self.len)
            .finish()
    }
}

impl Drop for DownloadView {
    fn drop(&mut self) {
        if let Some((view, buffer)) = self.mapped.take() {
            // The view must be released before the buffer can be unmapped.
            drop(view);
            buffer.to_gpu();
            let mut pool = self.pool.lock();
            if pool.len() < self.keep {
                pool.push(buffer);
            } else {
                buffer.destroy();
            }
        }
    }
}
