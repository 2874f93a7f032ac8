//! Binding: how a kernel's buffers reach its bind group. A [`Bound`] is a buffer range as a
//! bind group sees it, [`Bindings`] the two or three of one dispatch with their access
//! (read-only where the input lies in another buffer than the output), and the bind-group
//! cache keyed by both, so a loop of one kernel on the same buffers builds its bind group
//! once.

use std::collections::HashMap;
use std::num::NonZeroU64;

use super::{Kernels, BIND_CACHE_LIMIT, PARAMS_SIZE};
use crate::arena::Allocation;

/// A buffer range as a bind group sees it. Owned (a buffer handle is a cheap clone), so the
/// batch can bind buffers the kernels own themselves (the reductions' and scans' state).
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct Bound {
    pub(super) buffer: wgpu::Buffer,
    pub(super) offset: u64,
    pub(super) size: u64,
}

impl Bound {
    pub(super) fn of(a: &Allocation) -> Bound {
        Bound {
            buffer: a.buffer().clone(),
            offset: a.offset(),
            size: a.size(),
        }
    }

    /// The first `n` words of the range bound up to the next 16 bytes, for shaders that
    /// read and write it as `vec4` words; `None` where the buffer ends before that.
    pub(super) fn widened(mut self, n: u64) -> Option<Bound> {
        let size = (4 * n).next_multiple_of(16);
        (self.offset + size <= self.buffer.size()).then(|| {
            self.size = size;
            self
        })
    }

    pub(super) fn resource(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &self.buffer,
            offset: self.offset,
            size: NonZeroU64::new(self.size),
        })
    }
}

/// The storage ranges of one dispatch: bindings 1, 2 and 3.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct Bindings {
    pub(super) x: Bound,
    pub(super) y: Bound,
    pub(super) z: Bound,
    /// Which bindings are read-only (the layout; see [`Shared`]).
    pub(super) access: Access,
}

/// Which storage bindings a dispatch binds read-only: one pipeline layout each. A range
/// may be bound read-only only where it shares no buffer with a writable one: WebGPU
/// refuses one buffer bound both read-only and writable in a dispatch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub(super) enum Access {
    /// Every binding writable (arena ranges share buffers; see `shaders/elementwise/elementwise.wgsl`).
    #[default]
    Writable,
    /// `x` read-only; `y` and `z` writable.
    ReadOnlyX,
    /// `x` and `y` read-only; `z` writable.
    ReadOnlyXY,
}

impl Access {
    pub(super) const ALL: [Access; 3] = [Access::Writable, Access::ReadOnlyX, Access::ReadOnlyXY];

    /// Whether storage binding `binding` (1, 2 or 3) is read-only.
    pub(super) fn read_only(self, binding: u32) -> bool {
        match self {
            Access::Writable => false,
            Access::ReadOnlyX => binding == 1,
            Access::ReadOnlyXY => binding < 3,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Access::Writable => "kernels",
            Access::ReadOnlyX => "kernels (read-only x)",
            Access::ReadOnlyXY => "kernels (read-only x, y)",
        }
    }
}

/// Bytes of the kernels' spare buffer: two ranges of 256 (the largest storage offset
/// alignment WebGPU allows), one per binding a kernel leaves unused.
pub(super) const SPARE_BYTES: u64 = 512;

/// Range `k` (0 or 1) of the spare buffer, bound where a kernel uses fewer than three
/// ranges. Not a repeat of a used range: WebGPU (Chromium's Dawn, not wgpu-core) refuses a
/// dispatch whose writable storage bindings overlap, and every binding of the writable
/// layout is writable.
pub(super) fn spare(buffer: &wgpu::Buffer, k: u64) -> Bound {
    Bound {
        buffer: buffer.clone(),
        offset: 256 * k,
        size: 256,
    }
}

impl Bindings {
    /// `x` and `y`, with `z` the spare range (the kernels that bind two ranges).
    pub(super) fn two(x: Bound, y: Bound, spare: Bound) -> Bindings {
        Bindings {
            z: spare,
            x,
            y,
            access: Access::Writable,
        }
    }

    /// `x`, `y` and `z`, all writable.
    pub(super) fn three(x: Bound, y: Bound, z: Bound) -> Bindings {
        Bindings {
            x,
            y,
            z,
            access: Access::Writable,
        }
    }

    /// These bindings with `x` read-only where its buffer holds neither `y` nor `z`.
    pub(super) fn reading_x_only(mut self) -> Bindings {
        if self.x.buffer != self.y.buffer && self.x.buffer != self.z.buffer {
            self.access = Access::ReadOnlyX;
        }
        self
    }

    /// These bindings with `x` and `y` read-only where neither buffer holds `z`.
    pub(super) fn reading_x_and_y_only(mut self) -> Bindings {
        if self.x.buffer != self.z.buffer && self.y.buffer != self.z.buffer {
            self.access = Access::ReadOnlyXY;
        }
        self
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct BindKey {
    pub(super) params: Bound,
    pub(super) io: Bindings,
}

pub(super) struct BindCache {
    pub(super) released: u64,
    pub(super) groups: HashMap<BindKey, wgpu::BindGroup>,
}

impl Kernels {
    pub(super) fn bind_group(&self, params: &Allocation, io: Bindings) -> wgpu::BindGroup {
        let key = BindKey {
            params: Bound {
                size: PARAMS_SIZE,
                ..Bound::of(params)
            },
            io,
        };
        let released = self.arena.blocks_released();
        let mut cache = self.shared.cache.lock();
        if cache.released != released || cache.groups.len() >= BIND_CACHE_LIMIT {
            // A block was destroyed (its bind groups are dead) or the cache is full.
            cache.groups.clear();
            cache.released = released;
        }
        if let Some(g) = cache.groups.get(&key) {
            return g.clone();
        }
        let group = self
            .arena
            .gpu()
            .device()
            .create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("vramkit kernels"),
                layout: &self.shared.layouts[key.io.access as usize].0,
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: key.params.resource(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: key.io.x.resource(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 2,
                        resource: key.io.y.resource(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 3,
                        resource: key.io.z.resource(),
                    },
                ],
            });
        cache.groups.insert(key, group.clone());
        group
    }
}
