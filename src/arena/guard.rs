//! Guard bytes: a debug option that surrounds every allocation with a known pattern and
//! checks it on the GPU, so a kernel that writes past its range is caught and named.

use std::collections::BTreeMap;

use super::Arena;
use crate::{readback, shaders, Error, Gpu, Result};

/// The 32-bit word guard bytes are filled with; `shaders/guard_check.wgsl` has the same.
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

/// A block's buffer and its guard regions as `[first word, words, region index, 0]`.
type BlockRegions = (wgpu::Buffer, Vec<[u32; 4]>);

/// Writes the pattern into the guards before and after a new allocation.
pub(super) fn fill(
    gpu: &Gpu,
    buffer: &wgpu::Buffer,
    front: u64,
    front_len: u64,
    back: u64,
    back_len: u64,
) {
    for (offset, len) in [(front, front_len), (back, back_len)] {
        if len == 0 {
            continue;
        }
        let words = vec![GUARD_PATTERN; (len / 4) as usize];
        gpu.queue()
            .write_buffer(buffer, offset, bytemuck::cast_slice(&words));
    }
}

impl Arena {
    /// Checks the guards of every live allocation on the GPU and returns the damaged ones
    /// (empty when all are intact). Needs `ArenaConfig::guard_bytes > 0`. Blocks until the
    /// check has run. Blocks larger than the device's storage-binding limit are skipped.
    pub fn check_guards(&self) -> Result<Vec<GuardViolation>> {
        let shared = self.shared();
        let guard = shared.config.guard_bytes;
        if guard == 0 {
            return Err(Error::invalid(
                "guard checking is off for this arena",
                "create the arena with ArenaConfig { guard_bytes: 256, .. }",
            ));
        }
        let gpu = &shared.gpu;
        let mut per_block: BTreeMap<(usize, u32), BlockRegions> = BTreeMap::new();
        let mut meta: Vec<(u64, String, u64, Side)> = Vec::new();
        {
            let st = shared.state.lock();
            for (id, r) in st.live.iter() {
                let pool = &st.pools[r.pool];
                let Some(buffer) = pool.buffer(r.block).map(|b| b.buffer()) else {
                    continue;
                };
                if buffer.size() > gpu.limits().max_storage_buffer_binding_size {
                    continue;
                }
                let g = r.offset - r.range_offset;
                let entry = per_block
                    .entry((r.pool, r.block.0))
                    .or_insert_with(|| (wgpu::Buffer::clone(buffer), Vec::new()));
                for (side, start) in [
                    (Side::Before, r.range_offset),
                    (Side::After, r.offset + r.size),
                ] {
                    let region = meta.len() as u32;
                    entry
                        .1
                        .push([(start / 4) as u32, (g / 4) as u32, region, 0]);
                    meta.push((
                        *id,
                        st.label_stats[r.label as usize].0.to_string(),
                        r.size,
                        side,
                    ));
                }
            }
        }
        let pipeline = gpu.pipeline(&shaders::GUARD_CHECK, "check")?;
        let mut violations = Vec::new();
        for ((_, _), (buffer, regions)) in per_block {
            let counts = self.run_check(&pipeline, &buffer, &regions)?;
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
                block.as_entire_binding(),
                regions_buf.as_entire_binding(),
                counts.as_entire_binding(),
            ],
            crate::kernels::grid(regions.len() as u64, 1, gpu),
        )?;
        readback::read_as::<u32>(gpu, &counts, 0, regions.len())
    }
}
