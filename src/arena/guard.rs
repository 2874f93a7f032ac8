//! Guard bytes: a debug option that surrounds every allocation with a known pattern and
//! checks it on the GPU, so a kernel that writes past its range is caught and named.

use std::collections::BTreeMap;

use super::Arena;
use crate::shaders::{shader, Shader};
use crate::{readback, Error, Gpu, Result};

/// Checks guard bytes around arena allocations.
pub(crate) const GUARD_CHECK: Shader = shader!("guard_check.wgsl", "memory/guard_check.wgsl");

/// The 32-bit word guard bytes are filled with; `shaders/memory/guard_check.wgsl` has the same.
pub const GUARD_PATTERN: u32 = 0xA5C3_5A3C;

/// Which side of an allocation was overwritten.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The guard before the allocation (an underrun).
    Before,
    /// The guard after the allocation (an overrun).
    After,
}

/// A damaged guard: some kernel or copy wrote outside the allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuardViolation {
    /// The allocation's id.
    pub id: u64,
    /// The allocation's label.
    pub label: String,
    /// Its size.
    pub size: u64,
    /// Which guard.
    pub side: Side,
    /// How many 4-byte guard words no longer hold the pattern.
    pub corrupted_words: u32,
}

impl std::fmt::Display for GuardViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.side {
            Side::Before => "underrun: the guard before",
            Side::After => "overrun: the guard after",
        };
        write!(
            f,
            "{what} allocation #{} '{}' ({} bytes) has {} corrupted word(s)",
            self.id, self.label, self.size, self.corrupted_words
        )
    }
}

/// A window of a block's buffer (offset, size: at most the storage-binding limit) and the
/// guard regions in it as `[first word within the window, words, region index, 0]`.
type Window = (wgpu::Buffer, u64, u64, Vec<[u32; 4]>);
/// A block's buffer and its guard regions as (byte offset, bytes, region index).
type BlockGuards = (wgpu::Buffer, Vec<(u64, u64, u32)>);

/// The guards of a new allocation, to be filled with the pattern once the arena's lock is
/// released (filling queues a write, which takes the queue lock: it ranks below the
/// arena's).
pub(super) struct Fill {
    pub buffer: std::sync::Arc<super::block::BlockBuffer>,
    pub front: u64,
    pub front_len: u64,
    pub back: u64,
    pub back_len: u64,
}

impl Fill {
    /// Queues the pattern into both guards; it lands before the next submission.
    pub fn write(&self, gpu: &Gpu) {
        for (offset, len) in [(self.front, self.front_len), (self.back, self.back_len)] {
            if len == 0 {
                continue;
            }
            let words = vec![GUARD_PATTERN; (len / 4) as usize];
            gpu.write_buffer(self.buffer.buffer(), offset, bytemuck::cast_slice(&words));
        }
    }
}

impl Arena {
    /// Checks the guards of every live allocation on the GPU and returns the damaged ones
    /// (empty when all are intact). Needs `ArenaConfig::guard_bytes > 0`. Blocks until the
    /// check has run. Blocks larger than the device's storage-binding limit are checked
    /// through windows of them that fit it.
    pub fn check_guards(&self) -> Result<Vec<GuardViolation>> {
        let shared = self.shared();
        let guard = shared.config.guard_bytes;
        if guard == 0 {
            return Err(Error::invalid(
                "guard checking is off for this arena",
                "create the arena with ArenaConfig { guard_bytes: 256, .. }",
            ));
        }
        if shared.config.dry_run {
            // Nothing was written in a dry run: no guard can have been overwritten.
            return Ok(Vec::new());
        }
        let gpu = &shared.gpu;
        let max_binding = gpu
            .limits()
            .max_storage_buffer_binding_size
            .min(gpu.limits().max_buffer_size);
        let align = u64::from(gpu.limits().min_storage_buffer_offset_alignment).max(4);
        // Guard regions by block, in address order.
        let mut per_block: BTreeMap<(usize, u32), BlockGuards> = BTreeMap::new();
        let mut meta: Vec<(u64, String, u64, Side)> = Vec::new();
        {
            let st = shared.state.lock();
            for (id, r) in st.live.iter() {
                // Its guards are not queued yet (see `Fill`): nothing to check.
                if st.guards_unfilled.contains(id) {
                    continue;
                }
                let pool = &st.pools[r.pool];
                let Some(buffer) = pool.buffer(r.block()).map(|b| b.buffer()) else {
                    continue;
                };
                let g = r.offset - r.range_offset;
                let entry = per_block
                    .entry((r.pool, r.block().0))
                    .or_insert_with(|| (wgpu::Buffer::clone(buffer), Vec::new()));
                for (side, start) in [
                    (Side::Before, r.range_offset),
                    (Side::After, r.offset + r.size),
                ] {
                    entry.1.push((start, g, meta.len() as u32));
                    meta.push((
                        *id,
                        st.label_stats[r.label as usize].0.to_string(),
                        r.size,
                        side,
                    ));
                }
            }
        }
        // Each block in windows no larger than the binding limit, each window starting
        // at an aligned offset at or before its first region.
        let mut windows: Vec<Window> = Vec::new();
        for (_, (buffer, mut regions)) in per_block {
            regions.sort_unstable();
            for (start, len, region) in regions {
                let fits = windows.last().is_some_and(|(b, at, size, _)| {
                    b == &buffer && start >= *at && start + len <= at + size
                });
                if !fits {
                    let at = start / align * align;
                    let size = max_binding.min(buffer.size() - at) / 4 * 4;
                    if start + len > at + size {
                        return Err(Error::misuse(
                            crate::Misuse::Length,
                            format!("a guard of {len} bytes does not fit one storage binding"),
                            "use guard_bytes well below the device's storage-binding limit",
                        ));
                    }
                    windows.push((buffer.clone(), at, size, Vec::new()));
                }
                if let Some((_, at, _, list)) = windows.last_mut() {
                    list.push([((start - *at) / 4) as u32, (len / 4) as u32, region, 0]);
                }
            }
        }
        let pipeline = gpu.pipeline(&GUARD_CHECK, "check")?;
        let mut violations = Vec::new();
        for (buffer, at, size, regions) in windows {
            let counts = self.run_check(&pipeline, &buffer, at, size, &regions)?;
            for (region, bad) in regions.iter().zip(counts) {
                if bad > 0 {
                    let (id, label, size, side) = meta[region[2] as usize].clone();
                    violations.push(GuardViolation {
                        id,
                        label,
                        size,
                        side,
                        corrupted_words: bad,
                    });
                }
            }
        }
        violations.sort_by_key(|v| (v.id, v.side == Side::After));
        Ok(violations)
    }

    fn run_check(
        &self,
        pipeline: &wgpu::ComputePipeline,
        block: &wgpu::Buffer,
        at: u64,
        size: u64,
        regions: &[[u32; 4]],
    ) -> Result<Vec<u32>> {
        use wgpu::util::DeviceExt;
        let gpu = self.gpu();
        let device = gpu.device();
        let regions_buf = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("vramkit guard regions"),
            contents: bytemuck::cast_slice(regions),
            usage: wgpu::BufferUsages::STORAGE,
        });
        let counts = device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("vramkit guard counts"),
            contents: bytemuck::cast_slice(&vec![0u32; regions.len()]),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        });
        gpu.dispatch_once(
            "checking arena guards",
            pipeline,
            &[
                wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: block,
                    offset: at,
                    size: std::num::NonZeroU64::new(size),
                }),
                regions_buf.as_entire_binding(),
                counts.as_entire_binding(),
            ],
            crate::gpu::grid(regions.len() as u64, 1, gpu),
        )?;
        readback::read_as::<u32>(gpu, &counts, 0, regions.len())
    }
}
