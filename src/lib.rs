//! # vramkit
//!
//! A cross-vendor GPU memory and compute runtime over [wgpu]: a sub-allocating buffer
//! arena with budgets, statistics and leak reports, and WGSL compute kernels dispatched on
//! its allocations, on every GPU wgpu reaches (Vulkan, Metal, DX12, GL).
//!
//! ## Quick start
//!
//! ```
//! # fn main() -> vramkit::Result<()> {
//! use vramkit::{kernels::Reduce, Runtime};
//!
//! let rt = Runtime::headless()?; // the best adapter, an arena, kernels, transfer rings
//! let x = rt.alloc_from(&[1.0f32, 2.0, 3.0, 4.0], "x")?;
//! let y = rt.alloc_from(&[0.5f32; 4], "y")?;
//! let total = rt.alloc::<f32>(1, "total")?;
//! let mut batch = rt.batch(); // kernels recorded together, submitted once
//! batch.axpy(2.0, &x, &y)?.reduce(Reduce::Sum, &y, &total)?;
//! batch.submit()?;
//! assert_eq!(rt.download(&y)?, vec![2.5, 4.5, 6.5, 8.5]);
//! assert_eq!(rt.download(&total)?, vec![22.0]);
//! # Ok(()) }
//! ```
//!
//! [`Runtime`] is the one entry point; the layers under it stay public for programs that
//! want them one by one.
//!
//! Layers, bottom up:
//! - [`alloc`]: the pure-CPU allocator core (O(1) range allocator, block policy);
//! - [`Gpu`]: the device context, headless or borrowed from a host app;
//! - [`shaders`]: the embedded WGSL, its pipeline cache and portability checker;
//! - [`arena`]: GPU buffers sub-allocated with safe reuse, budgets and reports;
//! - [`kernels`]: compute kernels on arena allocations;
//! - [`stream`]: upload and download rings of staging buffers (host memory the GPU copies
//!   directly on Vulkan), texture uploads, and the streaming pipeline;
//! - [`plan`]: dry runs, the largest batch that fits a budget, and loops replayed from a
//!   planned offset table;
//! - [`tier`]: movable allocations that spill to host memory under budget pressure, come
//!   back on use, and move to defragment;
//! - [`vt`]: tiled virtual textures, images far larger than GPU memory streamed by GPU
//!   feedback and sampled from your own shaders;
//! - [`readback`]: the plain blocking read path (the reference the rings are checked against).

#![warn(missing_docs)]

// The README's example is a doctest, so it cannot rot.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub mod alloc;
pub mod arena;
mod catalogue;
#[cfg(native)]
pub mod devices;
mod error;
mod gpu;
pub mod kernels;
mod knobs;
pub mod ledger;
pub mod mips;
pub mod plan;
pub mod readback;
mod runtime;
pub mod shaders;
pub mod stream;
mod sync;
pub mod tier;
pub mod vt;

pub use arena::{Allocation, Arena, ArenaConfig};
pub use catalogue::SHADERS;
pub use error::{Error, Misuse, Result};
pub use gpu::{
    parse_backends, DriverMemory, DriverMemoryReader, Gpu, GpuOptions, LifecycleGuard, Timing,
    TimingSource, WeakGpu, INSTALL_HINT, OPTIONAL_FEATURES,
};
pub use runtime::{Recovery, Runtime, RuntimeConfig};

/// Formats a byte count with a binary unit (`1.50 GiB`).
pub fn fmt_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}
