//! # vramkit
//!
//! A cross-vendor GPU memory and compute runtime over [wgpu]: a sub-allocating buffer
//! arena with budgets, statistics and leak reports, and WGSL compute kernels dispatched on
//! its allocations, on every GPU wgpu reaches (Vulkan, Metal, DX12, GL).
//!
//! Layers, bottom up:
//! - [`alloc`]: the pure-CPU allocator core (O(1) range allocator, block policy);
//! - [`Gpu`]: the device context, headless or borrowed from a host app;
//! - [`shaders`]: the embedded WGSL, its pipeline cache and portability checker;
//! - [`arena`]: GPU buffers sub-allocated with safe reuse, budgets and reports;
//! - [`kernels`]: compute kernels on arena allocations;
//! - [`stream`]: upload and download rings of staging buffers (host memory the GPU copies
//!   directly on Vulkan), texture uploads, and the streaming pipeline;
//! - [`readback`]: the plain blocking read path (the reference the rings are checked against).

#![warn(missing_docs)]

pub mod alloc;
pub mod arena;
mod error;
mod gpu;
pub mod kernels;
pub mod readback;
pub mod shaders;
pub mod stream;

pub use arena::{Allocation, Arena, ArenaConfig};
pub use error::{Error, Result};
pub use gpu::{
    parse_backends, Gpu, GpuOptions, Timing, TimingSource, INSTALL_HINT, OPTIONAL_FEATURES,
};

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
