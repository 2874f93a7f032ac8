//! Recovery: a runtime whose device was lost continues on a new one.
//!
//! wgpu has no recovery of its own: after a loss every object of the device is dead, and
//! an application must "detect the loss, request a new adapter and device, re-upload all
//! necessary GPU resources" itself (zed-industries/zed#43070). [`Runtime::recover`] does
//! that for what the runtime owns and what is built on its arena.
//!
//! # What it does
//! 1. Opens a new device ([`Gpu::reopen`]: the same adapter where it is still there, else
//!    the best the options allow), or takes the one the host app hands over
//!    ([`Runtime::recover_with`]).
//! 2. Rebuilds the arena (same configuration, same pools in the same order, same identity,
//!    so every `PoolId` still works), the kernels (pipelines compile again on first use)
//!    and the transfer rings.
//! 3. Moves the tiers built on the arena, if any, onto the new one: every movable comes
//!    back from its host copy or its restore function, or is marked lost
//!    ([`crate::tier`]'s `recover.rs`).
//! 4. Returns a [`Recovery`] report: what came back, what was lost, how long each part
//!    took.
//!
//! # What a program can rely on afterwards
//! - `rt.gpu()`, `rt.arena()` and the rest are the new device's; plain allocations made
//!   before the loss belong to the lost device and fail every use with
//!   [`Error::DeviceLost`] (their bytes are gone; drop them and allocate again).
//! - Every [`Movable`](crate::tier::Movable) handle stays valid: it holds its old bytes,
//!   or its next use fails with [`Error::DeviceLost`], never wrong bytes.
//! - Virtual textures are rebuilt by [`VirtualTexture::recover`](crate::vt::VirtualTexture::recover)
//!   on the new device, their tiles read again from their source as frames ask.
//! - Recovery takes `&mut self`: no other thread uses the runtime meanwhile (share it as
//!   `RwLock<Runtime>`, and take the write lock to recover). Handles of the old parts that
//!   other threads hold (a `Gpu` clone, an `Arena` clone) stay the lost device's.

use web_time::{Duration, Instant};

use super::Runtime;
use crate::kernels::Kernels;
use crate::stream::{Downloader, Uploader};
use crate::tier::MovablesRecovered;
use crate::{Error, Gpu, Result};

/// What [`Runtime::recover`] did.
#[derive(Clone, Debug, Default)]
pub struct Recovery {
    /// The adapter of the new device.
    pub adapter: String,
    /// Time to open the new device (0 when the host handed it over).
    pub open_device: Duration,
    /// Time to rebuild the arena, kernels and rings.
    pub rebuild: Duration,
    /// Time to bring the movables back (host copies, restore functions, copies to the new
    /// device).
    pub movables_time: Duration,
    /// The whole call.
    pub total: Duration,
    /// What happened to the movables of the tiers on the arena (empty without tiers).
    pub movables: MovablesRecovered,
}

impl std::fmt::Display for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "recovered on '{}' in {:.1} ms (device {:.1} ms, rebuild {:.1} ms, movables {:.1} \
             ms): {} movables back ({}), {} lost ({})",
            self.adapter,
            self.total.as_secs_f64() * 1e3,
            self.open_device.as_secs_f64() * 1e3,
            self.rebuild.as_secs_f64() * 1e3,
            self.movables_time.as_secs_f64() * 1e3,
            self.movables.restored.len(),
            crate::fmt_bytes(self.movables.bytes_restored),
            self.movables.lost.len(),
            crate::fmt_bytes(self.movables.bytes_lost),
        )
    }
}

impl Runtime {
    /// Continues on a new device after this one's loss (module docs of
    /// `runtime::recover`): a new device on the same adapter, the arena, kernels and rings
    /// rebuilt, and the movables of the arena's tiers brought back. Only after a loss (the
    /// device's [`Gpu::lost`] says why), and only for a device vramkit opened; a host
    /// app's device comes back with [`recover_with`](Self::recover_with).
    ///
    /// ```no_run
    /// # fn main() -> vramkit::Result<()> {
    /// let mut rt = vramkit::Runtime::headless()?;
    /// let x = rt.alloc_from(&[1.0f32; 1024], "x");
    /// match x {
    ///     Err(vramkit::Error::DeviceLost { .. }) => {
    ///         let report = rt.recover()?;
    ///         println!("{report}");
    ///     }
    ///     other => drop(other?),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn recover(&mut self) -> Result<Recovery> {
        self.check_lost()?;
        let start = Instant::now();
        let gpu = self.gpu.reopen()?;
        let opened = start.elapsed();
        self.continue_on(gpu, start, opened)
    }

    /// [`recover`](Self::recover) for a runtime on a host app's device
    /// ([`Runtime::from_wgpu`]): the host made a new device and queue after the loss (and
    /// its own resources again) and hands them over.
    ///
    /// ```no_run
    /// # fn host_device_again() -> (wgpu::Device, wgpu::Queue) { unimplemented!() }
    /// # fn main() -> vramkit::Result<()> {
    /// # let (device, queue) = host_device_again();
    /// let mut rt = vramkit::Runtime::from_wgpu(device, queue)?;
    /// // ... the host's device-lost callback fired and forwarded it: rt.gpu().mark_lost(...)
    /// let (device, queue) = host_device_again();
    /// let report = rt.recover_with(device, queue)?;
    /// println!("{report}");
    /// # Ok(()) }
    /// ```
    pub fn recover_with(&mut self, device: wgpu::Device, queue: wgpu::Queue) -> Result<Recovery> {
        self.check_lost()?;
        let start = Instant::now();
        let gpu = Gpu::from_wgpu(device, queue);
        self.continue_on(gpu, start, Duration::ZERO)
    }

    fn check_lost(&self) -> Result<()> {
        if self.gpu.lost().is_none() {
            return Err(Error::invalid(
                format!(
                    "recovering a runtime whose device '{}' is not lost",
                    self.gpu.info().name
                ),
                "recover after a call returned Error::DeviceLost (Gpu::lost says why); \
                 Gpu::mark_lost records a loss the host noticed",
            ));
        }
        Ok(())
    }

    fn continue_on(&mut self, gpu: Gpu, start: Instant, opened: Duration) -> Result<Recovery> {
        if gpu.same_device(&self.gpu) {
            return Err(Error::invalid(
                "recovering onto the device that was lost",
                "hand over a new device and queue",
            ));
        }
        let arena = self.arena.successor(&gpu)?;
        let kernels = Kernels::with_options(&arena, self.config.kernels)?;
        let uploader = Uploader::new(&gpu, self.config.uploader.clone());
        let downloader = Downloader::new(&gpu, self.config.downloader.clone());
        let rebuilt = start.elapsed();
        let tiers = self
            .arena
            .tier_hook()
            .and_then(|hook| hook.as_any().downcast::<crate::tier::TierShared>().ok());
        let old = std::mem::replace(
            self,
            Runtime {
                gpu: gpu.clone(),
                config: self.config.clone(),
                arena: arena.clone(),
                kernels,
                uploader,
                downloader,
            },
        );
        drop(old);
        let movables = match tiers {
            Some(tiers) => tiers.recover_onto(&arena)?,
            None => MovablesRecovered::default(),
        };
        let total = start.elapsed();
        Ok(Recovery {
            adapter: gpu.info().name.clone(),
            open_device: opened,
            rebuild: rebuilt - opened,
            movables_time: total - rebuilt,
            total,
            movables,
        })
    }
}
