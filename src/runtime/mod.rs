//! `Runtime`: the one entry point. It owns a [`Gpu`], an [`Arena`], the [`Kernels`] and
//! the upload and download rings, with defaults that suit most programs, and offers the
//! typed API on top of them: typed allocations, typed transfers and kernel [`Batch`](crate::kernels::Batch)es.
//!
//! The five parts stay available ([`Runtime::arena`], [`Runtime::kernels`], ...) for the
//! byte-level calls, and each can be configured through [`RuntimeConfig`]. A host
//! renderer shares its device with [`Runtime::from_wgpu`].
//!
//! ```no_run
//! # fn main() -> vramkit::Result<()> {
//! use vramkit::{kernels::Reduce, Runtime};
//!
//! let rt = Runtime::headless()?;
//! let x = rt.alloc_from(&vec![1.0f32; 1 << 20], "x")?;
//! let y = rt.alloc::<f32>(1 << 20, "y")?;
//! let total = rt.alloc::<f32>(1, "total")?;
//! let mut batch = rt.batch();
//! batch.fill(0.5, &y)?.axpy(2.0, &x, &y)?.reduce(Reduce::Sum, &y, &total)?;
//! batch.submit()?;
//! assert_eq!(rt.download(&total)?, vec![2.5 * (1 << 20) as f32]);
//! println!("{}", rt.arena().summary());
//! # Ok(()) }
//! ```

mod recover;

pub use recover::Recovery;

use crate::arena::{ArenaConfig, Budget, Elements, Typed};
use crate::kernels::{Batch, KernelOptions, Kernels};
use crate::plan::{search_max_batch, DryRun, MaxBatch};
use crate::stream::{Downloader, DownloaderConfig, Uploader, UploaderConfig};
use crate::{Arena, Error, Gpu, Result};

/// How a [`Runtime`]'s parts are configured; `Default` suits most programs.
#[derive(Clone, Debug, Default)]
pub struct RuntimeConfig {
    /// The arena: budget, block policy, guards, ...
    pub arena: ArenaConfig,
    /// Kernel variants (subgroups, native f16; by default every feature the device has).
    pub kernels: KernelOptions,
    /// The upload ring.
    pub uploader: UploaderConfig,
    /// The download ring.
    pub downloader: DownloaderConfig,
}

/// A GPU, an arena on it, the kernel library and the transfer rings; see the module docs.
/// `Send + Sync`: share it between threads by reference or in an `Arc`.
pub struct Runtime {
    gpu: Gpu,
    /// What it was made with: a dry run makes its copy from it.
    config: RuntimeConfig,
    arena: Arena,
    kernels: Kernels,
    uploader: Uploader,
    downloader: Downloader,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("gpu", &self.gpu)
            .field("arena", &self.arena)
            .finish()
    }
}

impl Runtime {
    /// The best adapter with no window ([`Gpu::headless`]) and default settings.
    pub fn headless() -> Result<Runtime> {
        Runtime::new(&Gpu::headless()?, RuntimeConfig::default())
    }

    /// [`headless`](Self::headless) without blocking: what a browser page calls (the
    /// page's WebGPU adapter), or an async task natively.
    ///
    /// ```no_run
    /// # async fn page() -> vramkit::Result<()> {
    /// let rt = vramkit::Runtime::headless_async().await?;
    /// let x = rt.alloc_from(&[1.0f32, 2.0, 3.0], "x")?;
    /// let y = rt.alloc::<f32>(3, "y")?;
    /// let mut batch = rt.batch();
    /// batch.fill(0.0, &y)?.axpy(2.0, &x, &y)?;
    /// batch.submit()?;
    /// assert_eq!(rt.download_async(&y).await?, vec![2.0, 4.0, 6.0]);
    /// # Ok(()) }
    /// ```
    pub async fn headless_async() -> Result<Runtime> {
        Runtime::new(&Gpu::headless_async().await?, RuntimeConfig::default())
    }

    /// A runtime on `gpu` (a clone of it is kept).
    pub fn new(gpu: &Gpu, config: RuntimeConfig) -> Result<Runtime> {
        let arena = Arena::new(gpu, config.arena.clone())?;
        let kernels = Kernels::with_options(&arena, config.kernels)?;
        Ok(Runtime {
            gpu: gpu.clone(),
            uploader: Uploader::new(gpu, config.uploader.clone()),
            downloader: Downloader::new(gpu, config.downloader.clone()),
            arena,
            kernels,
            config,
        })
    }

    /// A runtime on a device and queue a host application owns ([`Gpu::from_wgpu`]);
    /// vramkit uses exactly the limits and features the host enabled. `wgpu::Device` and
    /// `wgpu::Queue` are reference-counted handles: pass clones and keep using your own.
    /// For the host's own bind groups of arena allocations, see
    /// [`BindGroup`](crate::arena::BindGroup) and the README's "Embedding vramkit in a
    /// wgpu app".
    pub fn from_wgpu(device: wgpu::Device, queue: wgpu::Queue) -> Result<Runtime> {
        Runtime::new(&Gpu::from_wgpu(device, queue), RuntimeConfig::default())
    }

    /// [`from_wgpu`](Self::from_wgpu) with the adapter the device came from
    /// ([`Gpu::from_wgpu_with_adapter`]), so that the f16 matmul may run on the matrix
    /// units where the host enabled them.
    ///
    /// ```no_run
    /// # fn host() -> (wgpu::Adapter, wgpu::Device, wgpu::Queue) { unimplemented!() }
    /// let (adapter, device, queue) = host();
    /// let rt = vramkit::Runtime::from_wgpu_with_adapter(&adapter, device.clone(), queue.clone())?;
    /// println!("matrix units: {}", rt.gpu().has_matrix_units());
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn from_wgpu_with_adapter(
        adapter: &wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
    ) -> Result<Runtime> {
        Runtime::new(
            &Gpu::from_wgpu_with_adapter(adapter, device, queue),
            RuntimeConfig::default(),
        )
    }

    /// The GPU context.
    pub fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// The arena.
    pub fn arena(&self) -> &Arena {
        &self.arena
    }

    /// The kernel library (byte-level [`Kernels::batch`]).
    pub fn kernels(&self) -> &Kernels {
        &self.kernels
    }

    /// The upload ring.
    pub fn uploader(&self) -> &Uploader {
        &self.uploader
    }

    /// The download ring.
    pub fn downloader(&self) -> &Downloader {
        &self.downloader
    }

    /// Room for `len` elements of `T` in the arena's default pool (`f32`, `u32`,
    /// `half::f16`, any `Pod` type); the contents are undefined until written.
    pub fn alloc<T: bytemuck::Pod>(&self, len: usize, label: &str) -> Result<Typed<T>> {
        self.arena.alloc_typed(len, label)
    }

    /// A typed allocation holding a copy of `data`.
    pub fn alloc_from<T: bytemuck::Pod>(&self, data: &[T], label: &str) -> Result<Typed<T>> {
        let a = self.alloc(data.len(), label)?;
        self.upload(&a, data)?;
        Ok(a)
    }

    /// Uploads `data` into `dst` (exactly as many elements as it holds). GPU work
    /// submitted afterwards sees the data.
    pub fn upload<'a, T: bytemuck::Pod>(
        &self,
        dst: impl Into<Elements<'a, T>>,
        data: &[T],
    ) -> Result<()> {
        self.uploader.upload_typed(dst, data)
    }

    /// Reads `src` back after all GPU work submitted so far.
    pub fn download<'a, T: bytemuck::Pod>(
        &self,
        src: impl Into<Elements<'a, T>>,
    ) -> Result<Vec<T>> {
        self.downloader.download_typed(src)
    }

    /// [`download`](Self::download) without blocking: the copy is submitted now (seeing
    /// all work submitted before) and the future resolves once its bytes are mapped. The
    /// browser's way to read results; natively the device's polling thread drives it
    /// meanwhile. The range goes through one staging buffer, so it may be at most
    /// the device's largest buffer (in the browser usually 1 to 4 GiB).
    pub async fn download_async<'a, T: bytemuck::Pod>(
        &self,
        src: impl Into<Elements<'a, T>>,
    ) -> Result<Vec<T>> {
        let src = src.into();
        let bytes = (src.len() * std::mem::size_of::<T>()) as u64;
        let view = self.downloader.download_async(src.allocation(), 0, bytes)?;
        let view = view.await?;
        let mut out = vec![T::zeroed(); src.len()];
        bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(&view[..]);
        Ok(out)
    }

    /// [`synchronize`](Self::synchronize) without blocking: all submitted work done and
    /// every pending free back in the arena.
    pub async fn synchronize_async(&self) -> Result<()> {
        self.arena.synchronize_async().await
    }

    /// A batch of kernels on typed allocations, submitted together.
    pub fn batch(&self) -> Batch<'_> {
        self.kernels.batch()
    }

    /// Waits for all submitted work and returns every pending free to the arena.
    pub fn synchronize(&self) -> Result<()> {
        self.arena.synchronize()
    }

    /// Runs `f` against a dry copy of this runtime (same device, same settings, the
    /// arena's budget as it is now) and reports what it allocated: peaks overall, per
    /// label and per pool, and the memory history. No device memory is taken and no
    /// GPU work is recorded; see the [`plan`](crate::plan) module for exactly what runs.
    /// `f` is the same code a real run calls with the real runtime.
    ///
    /// ```no_run
    /// # fn main() -> vramkit::Result<()> {
    /// let rt = vramkit::Runtime::headless()?;
    /// let step = |rt: &vramkit::Runtime| -> vramkit::Result<()> {
    ///     let h = rt.alloc::<f32>(1 << 24, "activations")?;
    ///     let mut batch = rt.batch();
    ///     batch.fill(0.0, &h)?;
    ///     batch.submit()?;
    ///     Ok(())
    /// };
    /// let plan = rt.dry_run(step)?;
    /// println!("{plan}"); // peak allocated, reserved, per pool and label
    /// step(&rt)?; // the same code, for real
    /// # Ok(()) }
    /// ```
    pub fn dry_run<R>(&self, f: impl FnOnce(&Runtime) -> Result<R>) -> Result<DryRun<R>> {
        let budget = match self.arena.budget() {
            Some(bytes) => Budget::Bytes(bytes),
            None => Budget::Unlimited,
        };
        self.dry_run_under(budget, f)
    }

    /// [`dry_run`](Self::dry_run) with the dry arena's budget set to `budget`.
    fn dry_run_under<R>(
        &self,
        budget: Budget,
        f: impl FnOnce(&Runtime) -> Result<R>,
    ) -> Result<DryRun<R>> {
        let mut config = self.config.clone();
        config.arena.dry_run = true;
        config.arena.budget = budget;
        config.arena.name = format!("{} (dry run)", self.arena.name());
        let dry = Runtime::new(&self.gpu, config)?;
        dry.arena
            .record_history(Some(crate::arena::HistoryConfig::default()));
        let value = f(&dry)?;
        DryRun::collect(&dry.arena, value)
    }

    /// The largest batch size in `batches` whose dry run ([`dry_run`](Self::dry_run) of
    /// `f(rt, batch)`) reserves at most `budget` less a safety margin of 1/32 of it, in
    /// O(log n) dry runs; [`max_batch_with_margin`](Self::max_batch_with_margin) sets the
    /// margin. Memory must not shrink as the batch grows. The answer reports the margin,
    /// the peaks and every probe. A probe that runs out of memory (an allocation above the
    /// device's largest buffer) does not fit; any other error ends the search with that
    /// error, so keep `batches` within what the code can run at all (a kernel operand
    /// is at most `Gpu::limits().max_storage_buffer_binding_size` bytes).
    ///
    /// ```no_run
    /// # fn main() -> vramkit::Result<()> {
    /// let rt = vramkit::Runtime::headless()?;
    /// let step = |rt: &vramkit::Runtime, batch: usize| -> vramkit::Result<()> {
    ///     let x = rt.alloc::<f32>(batch * 4096, "inputs")?;
    ///     let y = rt.alloc::<f32>(batch * 4096, "outputs")?;
    ///     let mut b = rt.batch();
    ///     b.copy(&x, &y)?;
    ///     b.submit()?;
    ///     Ok(())
    /// };
    /// let most = rt.gpu().limits().max_storage_buffer_binding_size as usize / (4096 * 4);
    /// let fit = rt.max_batch(1 << 30, 1..=most, step)?;
    /// println!("{fit}");
    /// step(&rt, fit.batch)?;
    /// # Ok(()) }
    /// ```
    pub fn max_batch(
        &self,
        budget: u64,
        batches: std::ops::RangeInclusive<usize>,
        f: impl FnMut(&Runtime, usize) -> Result<()>,
    ) -> Result<MaxBatch> {
        self.max_batch_with_margin(budget, budget / 32, batches, f)
    }

    /// [`max_batch`](Self::max_batch) keeping `margin` bytes of the budget free.
    pub fn max_batch_with_margin(
        &self,
        budget: u64,
        margin: u64,
        batches: std::ops::RangeInclusive<usize>,
        mut f: impl FnMut(&Runtime, usize) -> Result<()>,
    ) -> Result<MaxBatch> {
        search_max_batch(*batches.start(), *batches.end(), budget, margin, |batch| {
            // The probes measure what a batch needs; the search compares it with `budget`.
            match self.dry_run_under(Budget::Unlimited, |rt| f(rt, batch)) {
                Ok(run) => Ok(Some((run.peak_reserved, run.peak_allocated))),
                Err(Error::OutOfMemory(_)) => Ok(None),
                Err(e) => Err(e),
            }
        })
    }
}

// The runtime is shared between threads; make the promise checked.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Runtime>();
};
