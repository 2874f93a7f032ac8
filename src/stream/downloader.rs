//! The download ring.

use std::future::Future;
use std::sync::{mpsc, Arc};

use futures::channel::oneshot;
use parking_lot::Mutex;

use super::poller::Poller;
use super::view::{DownloadView, ViewPool};
use crate::arena::Allocation;
use crate::{Error, Gpu, Result};

/// Settings of a [`Downloader`].
#[derive(Clone, Debug)]
pub struct DownloaderConfig {
    /// Bytes per staging buffer (and per copy command). Rounded up to 4.
    pub chunk_size: u64,
    /// Staging buffers in the ring: how many chunk copies may be in flight at once.
    pub depth: usize,
    /// Threads that copy one mapped chunk out when it is large (1 = no threads).
    pub copy_threads: usize,
}

impl Default for DownloaderConfig {
    fn default() -> Self {
        DownloaderConfig {
            chunk_size: 32 << 20,
            depth: 4,
            copy_threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(16)),
        }
    }
}

/// Reads arena allocations back to host memory through a ring of `MAP_READ` staging
/// buffers: the copies of the next chunks are in flight on the GPU while the current one
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
    ring: Mutex<Vec<wgpu::Buffer>>,
    /// Staging buffers of dropped views, kept for the next ones (at most `depth`).
    views: ViewPool,
    /// Drives asynchronous downloads; started on first use.
    poller: Mutex<Option<Arc<Poller>>>,
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
            chunk_size: config.chunk_size.max(4).next_multiple_of(4),
            depth: config.depth.max(1),
            copy_threads: config.copy_threads.max(1),
        };
        Downloader {
            gpu: gpu.clone(),
            config,
            ring: Mutex::new(Vec::new()),
            views: Arc::new(Mutex::new(Vec::new())),
            poller: Mutex::new(None),
        }
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
        let view = self.download_async(src, offset, len)?;
        // Wait here rather than on the polling thread: the map callback runs in whichever
        // poll sees the copy finish.
        self.gpu.wait_idle()?;
        pollster::block_on(view)
    }

    /// [`download_view`](Self::download_view) without blocking: records and submits the
    /// copy now and returns a future that resolves once the bytes are mapped. A polling
    /// thread owned by the downloader drives the device while such futures are pending, so
    /// they resolve on any executor without anyone calling into wgpu. Errors in the
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
        let end = super::check_range(src, offset, len, wgpu::BufferUsages::COPY_SRC, "download")?;
        let pool = self.views.clone();
        let keep = self.config.depth;
        if len == 0 {
            return Ok(futures::future::Either::Left(futures::future::ready(Ok(
                DownloadView::empty(pool),
            ))));
        }
        let start = offset / 4 * 4;
        let bytes = end.next_multiple_of(4) - start;
        let max = self.gpu.limits().max_buffer_size;
        if bytes > max {
            return Err(Error::invalid(
                format!("a download view of {len} bytes (the device's largest buffer is {max})"),
                "use Downloader::download, which streams in chunks",
            ));
        }
        let poller = self.poller();
        if !poller.running() {
            return Err(Error::Device {
                during: "starting the download polling thread".into(),
                message: "the thread could not be spawned".into(),
            });
        }
        let staging = self.view_buffer(bytes);
        let mut encoder = self
            .gpu
            .device()
            .create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(src.buffer(), src.offset() + start, &staging, 0, bytes);
        self.gpu.scoped("submitting a download view", || {
            self.gpu.queue().submit([encoder.finish()])
        })?;
        let (tx, rx) = oneshot::channel();
        let pending = poller.begin();
        staging.map_async(wgpu::MapMode::Read, ..bytes, move |r| {
            let _ = tx.send(r.is_ok());
            pending.done();
        });
        let skip = (offset - start) as usize;
        Ok(futures::future::Either::Right(async move {
            // Keeps the polling thread alive until this download has resolved.
            let _poller = poller;
            let mapped = rx.await.unwrap_or(false);
            let failed = || Error::Device {
                during: "mapping a download view".into(),
                message: "the staging buffer could not be mapped".into(),
            };
            if !mapped {
                return Err(failed());
            }
            let view = staging
                .get_mapped_range(..bytes)
                .map_err(|e| Error::Device {
                    during: "reading a download view".into(),
                    message: e.to_string(),
                })?;
            Ok(DownloadView::new(
                view,
                staging,
                skip,
                len as usize,
                pool,
                keep,
            ))
        }))
    }

    /// A pooled view buffer of at least `bytes`, the smallest that fits, or a new one
    /// rounded up to a power of two so that views of similar sizes share buffers.
    fn view_buffer(&self, bytes: u64) -> wgpu::Buffer {
        let mut pool = self.views.lock();
        let best = pool
            .iter()
            .enumerate()
            .filter(|(_, b)| b.size() >= bytes)
            .min_by_key(|(_, b)| b.size())
            .map(|(i, _)| i);
        if let Some(i) = best {
            return pool.swap_remove(i);
        }
        drop(pool);
        let size = bytes
            .next_power_of_two()
            .clamp(64 << 10, self.gpu.limits().max_buffer_size.max(bytes));
        self.gpu.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("vramkit download view"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    }

    fn poller(&self) -> Arc<Poller> {
        let mut p = self.poller.lock();
        match p.as_ref() {
            Some(poller) if poller.running() => poller.clone(),
            _ => {
                let poller = Arc::new(Poller::new(&self.gpu));
                *p = Some(poller.clone());
                poller
            }
        }
    }

    /// Staging buffers created so far (at most `depth`).
    pub fn staging_buffers(&self) -> usize {
        self.ring.lock().len()
    }

    /// Reads `len` bytes of `src` from byte `offset`. Sees all GPU work submitted before
    /// the call. Any offset and length work (the covering whole words are copied; the
    /// allocation's size is a multiple of 4, so they lie inside it).
    pub fn download(&self, src: &Allocation, offset: u64, len: u64) -> Result<Vec<u8>> {
        let end = super::check_range(src, offset, len, wgpu::BufferUsages::COPY_SRC, "download")?;
        let mut out = vec![0u8; len as usize];
        if len == 0 {
            return Ok(out);
        }
        let start = offset / 4 * 4;
        let stop = end.next_multiple_of(4);
        let mut ring = self.ring.lock();
        while ring.len() < self.config.depth {
            ring.push(self.gpu.device().create_buffer(&wgpu::BufferDescriptor {
                label: Some("vramkit download staging"),
                size: self.config.chunk_size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }));
        }
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
                let mut encoder = self
                    .gpu
                    .device()
                    .create_command_encoder(&Default::default());
                encoder.copy_buffer_to_buffer(src.buffer(), src.offset() + n0, staging, 0, n1 - n0);
                let index = self.gpu.scoped("submitting a download chunk", || {
                    self.gpu.queue().submit([encoder.finish()])
                })?;
                submitted[next] = Some(index);
                let tx = tx.clone();
                let id = next;
                staging.map_async(wgpu::MapMode::Read, ..n1 - n0, move |r| {
                    let _ = tx.send((id, r.is_ok()));
                });
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
                        None => self.gpu.wait_idle()?,
                    },
                }
            }
            if resolved[done] != Some(true) {
                return Err(Error::Device {
                    during: "mapping a download chunk".into(),
                    message: "the staging buffer could not be mapped".into(),
                });
            }
            let staging = &ring[done % self.config.depth];
            {
                let view = staging
                    .get_mapped_range(..c1 - c0)
                    .map_err(|e| Error::Device {
                        during: "reading a download chunk".into(),
                        message: e.to_string(),
                    })?;
                // Bytes of this chunk that belong to [offset, end).
                let lo = offset.max(c0);
                let hi = end.min(c1);
                let src_bytes = &view[(lo - c0) as usize..(hi - c0) as usize];
                let dst_bytes = &mut out[(lo - offset) as usize..(hi - offset) as usize];
                copy_parallel(dst_bytes, src_bytes, self.config.copy_threads);
            }
            staging.unmap();
        }
        Ok(out)
    }
}

fn copy_parallel(dst: &mut [u8], src: &[u8], threads: usize) {
    if threads <= 1 || dst.len() < (1 << 20) {
        dst.copy_from_slice(src);
        return;
    }
    let part = dst.len().div_ceil(threads);
    std::thread::scope(|s| {
        for (d, c) in dst.chunks_mut(part).zip(src.chunks(part)) {
            s.spawn(move || d.copy_from_slice(c));
        }
    });
}
