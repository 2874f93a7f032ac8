//! The download ring.
//!
//! Its rings and view pool rank `lock_rank::STAGING`: above the queue lock, under which a
//! callback returns a staging buffer, and below the tiers' and the arena's locks
//! (`src/sync/rank.rs`).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};

use crate::sync::rank::{self as lock_rank, Mutex};
use futures::channel::oneshot;

use super::host_copy::copy_out_parallel;
use super::staging::Staging;
use super::view::{DownloadView, ViewPool};
use crate::arena::Allocation;
use crate::{Error, Gpu, Result};

/// Settings of a [`Downloader`].
#[derive(Clone, Debug)]
pub struct DownloaderConfig {
    /// Bytes per staging buffer (and per copy command). Rounded up to 4 and capped at the
    /// device's largest buffer.
    pub chunk_size: u64,
    /// Staging buffers in the ring: how many chunk copies may be in flight at once.
    pub depth: usize,
    /// Threads that copy one mapped chunk out when it is large (1 = no threads).
    pub copy_threads: usize,
    /// Put staging in plain host memory that the GPU copies into directly (Vulkan; the
    /// counterpart of CUDA's pinned memory) instead of wgpu's `MAP_READ` buffers: no map
    /// or unmap per chunk. Falls back to wgpu buffers on other backends.
    pub host_staging: bool,
}

impl Default for DownloaderConfig {
    fn default() -> Self {
        // 16 MiB chunks: smaller ones lose to the cost per chunk, larger ones gain nothing,
        // and shorter first and last chunks measured the same (BENCHMARKS.md, Streaming).
        DownloaderConfig {
            chunk_size: 16 << 20,
            depth: 4,
            copy_threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(16)),
            host_staging: true,
        }
    }
}

/// Reads arena allocations back to host memory through a ring of staging buffers (host
/// memory the GPU writes directly on Vulkan, `MAP_READ` buffers elsewhere): the copies of the next chunks are in flight on the GPU while the current one
/// is copied out of mapped memory. Staging buffers are created once and reused. Calls from
/// several threads are serialised.
///
/// ```no_run
/// # let gpu = vramkit::Gpu::headless()?;
/// # let arena = vramkit::Arena::new(&gpu, Default::default())?;
/// # let a = arena.alloc(1024, "result")?;
/// let downloader = vramkit::stream::Downloader::new(&gpu, Default::default());
/// let bytes: Vec<u8> = downloader.download(&a, 0, a.size())?;
/// # Ok::<(), vramkit::Error>(())
/// ```
pub struct Downloader {
    gpu: Gpu,
    config: DownloaderConfig,
    /// Idle rings of `depth` staging buffers. A download takes one out for its whole
    /// length and puts it back after, so no lock of ours is held while it waits for the
    /// GPU (wgpu runs callbacks inside that wait, and one may download too); concurrent
    /// downloads each use a ring of their own.
    rings: Mutex<Vec<Vec<Staging>>>,
    /// Staging buffers of dropped views, kept for the next ones (at most `depth`).
    views: ViewPool,
    /// Reads served straight from host-visible arena memory.
    direct: AtomicU64,
}

impl std::fmt::Debug for Downloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Downloader")
            .field("config", &self.config)
            .finish()
    }
}

impl Downloader {
    /// A ring whose staging buffers are created on first use.
    pub fn new(gpu: &Gpu, config: DownloaderConfig) -> Downloader {
        let config = DownloaderConfig {
            chunk_size: super::chunk_size(gpu, config.chunk_size),
            depth: config.depth.max(1),
            copy_threads: config.copy_threads.max(1),
            host_staging: config.host_staging,
        };
        Downloader {
            gpu: gpu.clone(),
            config,
            rings: Mutex::new(lock_rank::STAGING, Vec::new()),
            views: Arc::new(Mutex::new(lock_rank::STAGING, Vec::new())),
            direct: AtomicU64::new(0),
        }
    }

    /// How many downloads were read straight out of a host-visible arena block (one host
    /// copy, no staging; see [`crate::arena::BlockMemory`]) because no GPU work was in
    /// flight.
    pub fn direct_reads(&self) -> u64 {
        self.direct.load(Ordering::Relaxed)
    }

    /// Staging buffers kept for views (at most `depth`).
    pub fn view_buffers(&self) -> usize {
        self.views.lock().len()
    }

    /// Reads `len` bytes of `src` from byte `offset` into a [`DownloadView`] that points
    /// into mapped staging memory: no copy into host memory of its own. Blocks until the
    /// bytes are there; sees all GPU work submitted before the call. The range goes
    /// through one staging buffer, so it may be at most the device's largest buffer
    /// ([`download`](Self::download) has no such limit).
    pub fn download_view(&self, src: &Allocation, offset: u64, len: u64) -> Result<DownloadView> {
        let Some(plan) = self.plan_view(src, offset, len)? else {
            return Ok(DownloadView::empty(self.views.clone()));
        };
        let index = self.copy_into_staging(
            src,
            plan.start,
            &plan.staging,
            plan.bytes,
            "submitting a download view",
            |_| {},
        )?;
        // The copy's own wait, then the buffer itself: not the map callback, which another
        // thread's poll may hold while it waits for a lock this thread has (see
        // `Staging::owned_after_wait`).
        self.gpu.wait_for(index)?;
        if !plan.staging.owned_after_wait() {
            return Err(self.gpu.explain(view_unmapped()));
        }
        plan.into_view(len, self.views.clone(), self.config.depth)
    }

    /// Checks a download view's arguments and takes its staging buffer; `None` for an
    /// empty range.
    fn plan_view(&self, src: &Allocation, offset: u64, len: u64) -> Result<Option<ViewPlan>> {
        let end = self.check_and_count_src(src, offset, len)?;
        if src.is_virtual() {
            return Err(Error::invalid(
                format!(
                    "a download view of '{}' in a dry run, which has no bytes to map",
                    src.label()
                ),
                "read with Downloader::download or download_into, which give zeros in a dry \
                 run, or skip the read when Allocation::is_virtual() is true",
            ));
        }
        if len == 0 {
            return Ok(None);
        }
        let start = offset / 4 * 4;
        let bytes = end.next_multiple_of(4) - start;
        let max = self.gpu.limits().max_buffer_size;
        if bytes > max {
            return Err(Error::misuse(
                crate::Misuse::Length,
                format!("a download view of {len} bytes (the device's largest buffer is {max})"),
                "use Downloader::download, which streams in chunks",
            ));
        }
        Ok(Some(ViewPlan {
            staging: self.view_buffer(bytes)?,
            start,
            bytes,
            skip: (offset - start) as usize,
        }))
    }

    /// [`download_view`](Self::download_view) without blocking: records and submits the
    /// copy now and returns a future that resolves once the bytes are mapped. The device's
    /// polling thread drives it while such futures are pending, so they resolve on any
    /// executor without anyone calling into wgpu. Errors in the
    /// arguments come back at once; a failed mapping resolves to an error.
    ///
    /// ```no_run
    /// # let gpu = vramkit::Gpu::headless()?;
    /// # let arena = vramkit::Arena::new(&gpu, Default::default())?;
    /// # let (a, b) = (arena.alloc(1024, "a")?, arena.alloc(1024, "b")?);
    /// let downloader = vramkit::stream::Downloader::new(&gpu, Default::default());
    /// let both = futures::future::try_join(
    ///     downloader.download_async(&a, 0, a.size())?,
    ///     downloader.download_async(&b, 0, b.size())?,
    /// );
    /// let (va, vb) = pollster::block_on(both)?;
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn download_async(
        &self,
        src: &Allocation,
        offset: u64,
        len: u64,
    ) -> Result<impl Future<Output = Result<DownloadView>> + Send + 'static> {
        let pool = self.views.clone();
        let keep = self.config.depth;
        let Some(plan) = self.plan_view(src, offset, len)? else {
            return Ok(futures::future::Either::Left(futures::future::ready(Ok(
                DownloadView::empty(pool),
            ))));
        };
        let poller = self.gpu.poller()?;
        let (tx, rx) = oneshot::channel();
        let pending = poller.begin();
        self.copy_into_staging(
            src,
            plan.start,
            &plan.staging,
            plan.bytes,
            "submitting a download view",
            move |ok| {
                let _ = tx.send(ok);
                pending.done();
            },
        )?;
        let gpu = self.gpu.clone();
        // A loss resolves it even where wgpu never runs (or drops) the map callback.
        Ok(futures::future::Either::Right(self.gpu.or_lost(
            async move {
                // Keeps the polling thread alive until this download has resolved.
                let _poller = poller;
                if !rx.await.unwrap_or(false) {
                    return Err(gpu.explain(view_unmapped()));
                }
                plan.into_view(len, pool, keep)
            },
        )))
    }

    /// Submits a copy of `len` bytes of `src` from byte `from` into the start of `staging`,
    /// and registers `done(ok)` to run once the CPU owns those bytes again. `done` is
    /// registered even when the submit fails (it then reports the buffer back or drops its
    /// sender), so a caller's channel never waits forever.
    fn copy_into_staging(
        &self,
        src: &Allocation,
        from: u64,
        staging: &Staging,
        len: u64,
        during: &str,
        done: impl FnOnce(bool) + Send + 'static,
    ) -> Result<wgpu::SubmissionIndex> {
        let mut encoder = self
            .gpu
            .device()
            .create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(src.buffer(), src.offset() + from, staging.buffer(), 0, len);
        // Memory vramkit maps itself needs a HOST_READ barrier after the copy (see
        // `gpu::submit`); wgpu's own MAP_READ buffers are synchronised by wgpu.
        let barrier = staging
            .is_host()
            .then(|| self.gpu.host_read_barrier())
            .flatten();
        let submitted = self.gpu.scoped(during, || {
            self.gpu
                .submit_timed("download", std::iter::once(encoder.finish()).chain(barrier))
        });
        staging.when_cpu_owned(&self.gpu, wgpu::MapMode::Read, len, done);
        submitted
    }

    /// A pooled view buffer of at least `bytes`, the smallest that fits, or a new one
    /// rounded up to a power of two so that views of similar sizes share buffers.
    fn view_buffer(&self, bytes: u64) -> Result<Staging> {
        let mut pool = self.views.lock();
        let best = pool
            .iter()
            .enumerate()
            .filter(|(_, b)| b.size() >= bytes)
            .min_by_key(|(_, b)| b.size())
            .map(|(i, _)| i);
        if let Some(i) = best {
            return Ok(pool.swap_remove(i));
        }
        drop(pool);
        let size = bytes
            .next_power_of_two()
            .clamp(64 << 10, self.gpu.limits().max_buffer_size.max(bytes));
        Staging::new(
            &self.gpu,
            size,
            wgpu::MapMode::Read,
            self.config.host_staging,
            "vramkit download view",
        )
    }

    pub(super) fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// [`super::check_range`] for a download from `src`: same device, inside, `COPY_SRC`.
    /// Returns the range's end.
    fn check_src(&self, src: &Allocation, offset: u64, len: u64) -> Result<u64> {
        super::check_range(
            &self.gpu,
            src,
            offset,
            len,
            wgpu::BufferUsages::COPY_SRC,
            "download",
        )
    }

    /// [`check_src`](Self::check_src), then counts the bytes for the `metrics` facade: every
    /// path that moves a download's bytes starts here, once (`download` checks first and
    /// then moves them through `download_into`).
    pub(super) fn check_and_count_src(
        &self,
        src: &Allocation,
        offset: u64,
        len: u64,
    ) -> Result<u64> {
        let end = self.check_src(src, offset, len)?;
        super::publish_moved(super::DOWNLOADED, len);
        Ok(end)
    }

    /// Staging buffers of the idle rings (`depth` per ring; one ring per download that
    /// ran concurrently with another).
    pub fn staging_buffers(&self) -> usize {
        self.rings.lock().iter().map(Vec::len).sum()
    }

    /// Reads `len` bytes of `src` from byte `offset` into a new `Vec`. Sees all GPU work
    /// submitted before the call. Any offset and length work (the covering whole words
    /// are copied; the allocation's size is a multiple of 4, so they lie inside it).
    pub fn download(&self, src: &Allocation, offset: u64, len: u64) -> Result<Vec<u8>> {
        self.check_src(src, offset, len)?;
        let len = usize::try_from(len).map_err(|_| {
            Error::invalid(
                format!("a download of {len} bytes (more than this host can address)"),
                "download in parts with Downloader::download_into",
            )
        })?;
        let mut out = vec![0u8; len];
        self.download_into(src, offset, &mut out)?;
        Ok(out)
    }

    /// Reads typed elements (a whole [`Typed`](crate::arena::Typed) or its first elements)
    /// into a new `Vec<T>`.
    ///
    /// ```no_run
    /// # let gpu = vramkit::Gpu::headless()?;
    /// # let arena = vramkit::Arena::new(&gpu, Default::default())?;
    /// # let x = arena.alloc_typed::<f32>(3, "x")?;
    /// let downloader = vramkit::stream::Downloader::new(&gpu, Default::default());
    /// let values: Vec<f32> = downloader.download_typed(&x)?;
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn download_typed<'a, T: bytemuck::Pod>(
        &self,
        src: impl Into<crate::arena::Elements<'a, T>>,
    ) -> Result<Vec<T>> {
        let src = src.into();
        let mut out = vec![T::zeroed(); src.len()];
        self.download_into(src.allocation(), 0, bytemuck::cast_slice_mut(&mut out))?;
        Ok(out)
    }

    /// Reads `out.len()` bytes of `src` from byte `offset` into `out`, the way
    /// [`download`](Self::download) does, into memory the caller keeps: a buffer reused
    /// across downloads is written at memory speed, where a fresh `Vec` first pays a page
    /// fault per 4 KiB. On error `out` holds the chunks read so far.
    ///
    /// ```no_run
    /// # let gpu = vramkit::Gpu::headless()?;
    /// # let arena = vramkit::Arena::new(&gpu, Default::default())?;
    /// # let a = arena.alloc(1 << 20, "result")?;
    /// let downloader = vramkit::stream::Downloader::new(&gpu, Default::default());
    /// let mut host = vec![0u8; 1 << 20];
    /// for _step in 0..10 {
    ///     // ... GPU work that updates `a` ...
    ///     downloader.download_into(&a, 0, &mut host)?;
    /// }
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn download_into(&self, src: &Allocation, offset: u64, out: &mut [u8]) -> Result<()> {
        let len = out.len() as u64;
        let end = self.check_and_count_src(src, offset, len)?;
        if src.is_virtual() {
            // A dry run has no bytes to read: it reads zeros (see `crate::plan`).
            out.fill(0);
            return Ok(());
        }
        if len == 0 {
            return Ok(());
        }
        let threads = self.config.copy_threads;
        if src
            .read_in_place(offset..end, |bytes| copy_out_parallel(out, bytes, threads))
            .is_some()
        {
            self.direct.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let mut ring = self.rings.lock().pop().unwrap_or_default();
        while ring.len() < self.config.depth {
            ring.push(Staging::new(
                &self.gpu,
                self.config.chunk_size,
                wgpu::MapMode::Read,
                self.config.host_staging,
                "vramkit download staging",
            )?);
        }
        let result = self.download_chunks(src, offset, out, &ring);
        // After an error some copies may still be in flight or mapped: that ring is
        // dropped rather than reused.
        if result.is_ok() {
            self.rings.lock().push(ring);
        }
        result
    }

    /// The chunked copy of [`download_into`](Self::download_into) through `ring`.
    fn download_chunks(
        &self,
        src: &Allocation,
        offset: u64,
        out: &mut [u8],
        ring: &[Staging],
    ) -> Result<()> {
        let end = offset + out.len() as u64;
        let start = offset / 4 * 4;
        let stop = end.next_multiple_of(4);
        let chunks: Vec<(u64, u64)> = (start..stop)
            .step_by(self.config.chunk_size as usize)
            .map(|c| (c, (c + self.config.chunk_size).min(stop)))
            .collect();
        let (tx, rx) = mpsc::channel();
        // Map results by chunk; callbacks may arrive in any order.
        let mut resolved: Vec<Option<bool>> = vec![None; chunks.len()];
        let mut submitted: Vec<Option<wgpu::SubmissionIndex>> = vec![None; chunks.len()];
        let mut next = 0;
        for (done, &(c0, c1)) in chunks.iter().enumerate() {
            // Keep up to `depth` copies submitted ahead of the chunk being read.
            while next < chunks.len() && next < done + self.config.depth {
                let (n0, n1) = chunks[next];
                let staging = &ring[next % self.config.depth];
                let tx = tx.clone();
                let id = next;
                let index = self.copy_into_staging(
                    src,
                    n0,
                    staging,
                    n1 - n0,
                    "submitting a download chunk",
                    move |ok| {
                        let _ = tx.send((id, ok));
                    },
                )?;
                submitted[next] = Some(index);
                next += 1;
            }
            // Wait until this chunk's mapping has resolved.
            while resolved[done].is_none() {
                match rx.try_recv() {
                    Ok((id, ok)) => resolved[id] = Some(ok),
                    // Wait for this chunk's copy only, so the later ones stay in flight
                    // while this one is copied out.
                    Err(_) => match submitted[done].take() {
                        Some(index) => self.gpu.wait_for(index)?,
                        // The copy is done, and its callback ran on another thread or
                        // waits there: the buffer itself says whether it is ours (see
                        // `Staging::owned_after_wait`; waiting for the callback hung).
                        None => {
                            resolved[done] = Some(ring[done % self.config.depth].owned_after_wait())
                        }
                    },
                }
            }
            if resolved[done] != Some(true) {
                // A mapping fails on a lost device: say so, not just that it failed.
                return Err(self.gpu.explain(Error::Device {
                    during: "mapping a download chunk".into(),
                    message: "the staging buffer could not be mapped".into(),
                }));
            }
            let staging = &ring[done % self.config.depth];
            // Bytes of this chunk that belong to [offset, end).
            let lo = offset.max(c0);
            let hi = end.min(c1);
            let dst_bytes = &mut out[(lo - offset) as usize..(hi - offset) as usize];
            // SAFETY: this chunk's copy has finished (its callback ran) and the next copy
            // into the same buffer is submitted only after this read.
            let read = unsafe { staging.read(lo - c0, dst_bytes, self.config.copy_threads) };
            staging.to_gpu();
            read?;
        }
        Ok(())
    }
}

/// A download view's staging buffer and where its bytes lie in it.
struct ViewPlan {
    staging: Staging,
    /// First byte copied from the source (the offset rounded down to a word).
    start: u64,
    /// Bytes copied (whole words).
    bytes: u64,
    /// Bytes of the copy before the requested offset.
    skip: usize,
}

impl ViewPlan {
    /// The view of `len` bytes, once the copy has finished and the CPU owns the buffer.
    fn into_view(self, len: u64, pool: ViewPool, keep: usize) -> Result<DownloadView> {
        // SAFETY: callers come here after the copy into `staging` finished (its wait
        // returned and the buffer said it is mapped, or its callback ran) and no other copy
        // uses it: the view owns it until it drops.
        let view = unsafe { self.staging.bytes(0..self.bytes) }?;
        Ok(DownloadView::new(
            view,
            self.staging,
            self.skip,
            len as usize,
            pool,
            keep,
        ))
    }
}

fn view_unmapped() -> Error {
    Error::Device {
        during: "mapping a download view".into(),
        message: "the staging buffer could not be mapped".into(),
    }
}
