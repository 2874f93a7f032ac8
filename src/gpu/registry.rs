//! One [`Gpu`] per wgpu device: every `Gpu` built is filed here (weakly), and wrapping a
//! device that a live `Gpu` already wraps ([`Gpu::from_wgpu`]) returns that `Gpu`.
//!
//! # Why
//! The queue lock (`submit.rs`) guards a race inside one wgpu-core device, so it must be
//! one per device, not one per wrapper; and every "same device?" check of vramkit's
//! ([`Gpu::same_device`]) must say yes for two wrappers of one device, or a device set
//! would take them for two GPUs and their allocations would be refused by each other.
//!
//! # How a device is recognised
//! wgpu compares devices by an id that repeats across instances, so equal ids are only a
//! first filter. The proof is wgpu's error sink, which belongs to the device (clones
//! share it): with an error scope pushed through each handle, a validation error raised
//! through the second lands in the innermost scope of its own device's sink. If the two
//! handles share a sink, the scope pushed through the first (the innermost) catches it;
//! otherwise the second's own scope does. Nothing is created but an invalid 4-byte
//! buffer, and no error escapes the two scopes.
//!
//! Wrapping runs under the lifecycle lock (`lifecycle.rs`), as opening a device does, so
//! two threads wrapping one device at once get one `Gpu`; the candidates that were not
//! it are let go after that lock (one may be the last handle of its device, whose drop
//! takes it). Dead entries are dropped whenever one is filed.

use std::sync::{Arc, Weak};

use super::{lifecycle, Gpu, GpuInner};
use crate::sync::rank::{self as lock_rank, Mutex};

static LIVE: Mutex<Vec<Weak<GpuInner>>> = Mutex::new(lock_rank::GPU_REGISTRY, Vec::new());

/// Files `gpu` (weakly).
pub(super) fn register(gpu: &Gpu) {
    let mut live = LIVE.lock();
    live.retain(|w| w.strong_count() > 0);
    live.push(Arc::downgrade(&gpu.inner));
}

/// The live `Gpu` that wraps `device`, or a new one from `build` (which files it).
pub(super) fn wrap(device: &wgpu::Device, build: impl FnOnce() -> Gpu) -> Gpu {
    let mut others: Vec<Gpu> = Vec::new();
    let gpu = {
        let _lifecycle = lifecycle::lock();
        others.extend(LIVE.lock().iter().filter_map(|w| {
            w.upgrade().map(|inner| Gpu {
                inner: std::mem::ManuallyDrop::new(inner),
            })
        }));
        let found = others
            .iter()
            .position(|g| g.device() == device && same_sink(g.device(), device));
        match found {
            Some(i) => others.swap_remove(i),
            None => build(),
        }
    };
    // After the lifecycle lock: one of them may be its device's last handle.
    drop(others);
    gpu
}

/// Whether `a` and `b` share wgpu's error sink, i.e. are one device (module docs).
fn same_sink(a: &wgpu::Device, b: &wgpu::Device) -> bool {
    let outer = b.push_error_scope(wgpu::ErrorFilter::Validation);
    let inner = a.push_error_scope(wgpu::ErrorFilter::Validation);
    // No usage at all is invalid on every device.
    drop(b.create_buffer(&wgpu::BufferDescriptor {
        label: Some("vramkit device identity check (invalid on purpose)"),
        size: 4,
        usage: wgpu::BufferUsages::empty(),
        mapped_at_creation: false,
    }));
    let caught_by_a = pollster::block_on(inner.pop()).is_some();
    drop(pollster::block_on(outer.pop()));
    caught_by_a
}

/// How many `Gpu`s are alive (filed and not yet dropped).
pub(super) fn live() -> usize {
    LIVE.lock().iter().filter(|w| w.strong_count() > 0).count()
}
