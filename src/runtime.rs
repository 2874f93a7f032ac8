//! `Runtime`: the one entry point. It owns a [`Gpu`], an [`Arena`], the [`Kernels`] and
//! the upload and download rings, with defaults that suit most programs, and offers the
//! typed API on top of them: typed allocations, typed transfers and [`TypedBatch`]es.
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

use crate::arena::{ArenaConfig, Elements, Typed};
use crate::kernels::{KernelOptions, Kernels, TypedBatch};
use crate::stream::{Downloader, DownloaderConfig, Uploader, UploaderConfig};
use crate::{Arena, Gpu, Result};

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

    /// A runtime on `gpu` (a clone of it is kept).
    pub fn new(gpu: &Gpu, config: RuntimeConfig) -> Result<Runtime> {
        let arena = Arena::new(gpu, config.arena)?;
        let kernels = Kernels::with_options(&arena, config.kernels)?;
        Ok(Runtime {
            gpu: gpu.clone(),
            uploader: Uploader::new(gpu, config.uploader),
            downloader: Downloader::new(gpu, config.downloader),
            arena,
            kernels,
        })
    }

    /// A runtime on a device and queue a host application owns ([`Gpu::from_wgpu`]);
    /// vramkit uses exactly the limits and features the host enabled.
    pub fn from_wgpu(device: wgpu::Device, queue: wgpu::Queue) -> Result<Runtime> {
        Runtime::new(&Gpu::from_wgpu(device, queue), RuntimeConfig::default())
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

    /// A batch of kernels on typed allocations, submitted together.
    pub fn batch(&self) -> TypedBatch<'_> {
        self.kernels.typed_batch()
    }

    /// Waits for all submitted work and returns every pending free to the arena.
    pub fn synchronize(&self) -> Result<()> {
        self.arena.synchronize()
    }
}

// The runtime is shared between threads; make the promise checked.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Runtime>();
};
