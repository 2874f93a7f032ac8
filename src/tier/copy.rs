//! Many buffer-to-buffer copies in few dispatches: how defragmentation moves allocations.
//!
//! One `copy_buffer_to_buffer` per moved allocation is one copy command behind its own
//! barrier, so a pass moving thousands of small allocations ran at a tiny fraction of one
//! large copy's bandwidth. Here the copies are grouped by (source block, destination
//! block) and each group is one dispatch of `shaders/memory/copy_ranges.wgsl`, its ranges cut
//! into chunks of [`CHUNK_WORDS`] words, one per workgroup. A group falls back to copy
//! commands when a block cannot be bound as storage (a pool without `STORAGE` usage, or
//! a block beyond the binding limit) or when it has only a few ranges.

use wgpu::util::DeviceExt;

use crate::shaders::{shader, Shader};
use crate::{Gpu, Result};

/// Copies many ranges between two buffers in one dispatch, word by word (tiered memory's
/// defragmentation).
pub(crate) const COPY_RANGES: Shader = shader!("copy_ranges.wgsl (u32)", "memory/copy_ranges.wgsl");
/// [`COPY_RANGES`] by 16-byte words, for ranges that are all 16-byte aligned.
pub(crate) const COPY_RANGES_VEC4: Shader =
    shader!("copy_ranges.wgsl (vec4)", "memory/copy_ranges.wgsl").with(&[("VEC4", "")]);

/// Words one workgroup copies at most (of 4 or 16 bytes).
const CHUNK_WORDS: u64 = 4096;
/// Groups with fewer ranges use copy commands.
const MIN_RANGES_FOR_KERNEL: usize = 4;

/// One copy: source buffer and offset, destination buffer and offset, bytes (a multiple
/// of 4; offsets too).
pub(super) struct Copy<'a> {
    pub src: &'a wgpu::Buffer,
    pub src_offset: u64,
    pub dst: &'a wgpu::Buffer,
    pub dst_offset: u64,
    pub bytes: u64,
}

impl Copy<'_> {
    /// Records this copy as one copy command.
    pub fn command(&self, encoder: &mut wgpu::CommandEncoder) {
        encoder.copy_buffer_to_buffer(
            self.src,
            self.src_offset,
            self.dst,
            self.dst_offset,
            self.bytes,
        );
    }
}

/// Records `copies` as one copy command each and submits them in one submission, inside
/// an error scope (`during` names it in the error): how evictions and restores move
/// their few large allocations between the tiers. Nothing was copied when it fails.
pub(super) fn submit_commands(
    gpu: &Gpu,
    during: &str,
    name: &'static str,
    copies: &[Copy<'_>],
) -> Result<()> {
    gpu.scoped(during, || {
        let mut encoder = gpu
            .device()
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(name) });
        copies.iter().for_each(|c| c.command(&mut encoder));
        gpu.submit_timed(name, [encoder.finish()]);
    })
}

/// Records `copies` into `encoder`; see the module docs.
pub(super) fn record(
    gpu: &Gpu,
    encoder: &mut wgpu::CommandEncoder,
    copies: &[Copy<'_>],
) -> Result<()> {
    let mut groups: Vec<(&wgpu::Buffer, &wgpu::Buffer, Vec<&Copy<'_>>)> = Vec::new();
    for c in copies {
        match groups.iter_mut().find(|g| g.0 == c.src && g.1 == c.dst) {
            Some(g) => g.2.push(c),
            None => groups.push((c.src, c.dst, vec![c])),
        }
    }
    let max_binding = gpu.limits().max_storage_buffer_binding_size;
    for (src, dst, list) in groups {
        let bindable = |b: &wgpu::Buffer| {
            b.usage().contains(wgpu::BufferUsages::STORAGE) && b.size() <= max_binding
        };
        if list.len() < MIN_RANGES_FOR_KERNEL || !bindable(src) || !bindable(dst) || src == dst {
            list.iter().for_each(|c| c.command(encoder));
            continue;
        }
        dispatch(gpu, encoder, src, dst, &list)?;
    }
    Ok(())
}

fn dispatch(
    gpu: &Gpu,
    encoder: &mut wgpu::CommandEncoder,
    src: &wgpu::Buffer,
    dst: &wgpu::Buffer,
    list: &[&Copy<'_>],
) -> Result<()> {
    let wide = list
        .iter()
        .all(|c| c.src_offset % 16 == 0 && c.dst_offset % 16 == 0 && c.bytes % 16 == 0);
    let unit: u64 = if wide { 16 } else { 4 };
    let mut chunks: Vec<[u32; 4]> = Vec::new();
    for c in list {
        // Inside both buffers, and in words that fit the shader's u32 indices (blocks are
        // at most the binding limit, checked by the caller, but say so here too).
        let in_range = c.src_offset + c.bytes <= src.size() && c.dst_offset + c.bytes <= dst.size();
        if !in_range || (src.size().max(dst.size()) / unit) > u32::MAX as u64 {
            return Err(crate::Error::invalid(
                "a defragmentation copy lies outside its blocks",
                "this is a vramkit bug: please report it",
            ));
        }
        let (s, d, n) = (c.src_offset / unit, c.dst_offset / unit, c.bytes / unit);
        let mut at = 0;
        while at < n {
            let len = (n - at).min(CHUNK_WORDS);
            chunks.push([(s + at) as u32, (d + at) as u32, len as u32, 0]);
            at += len;
        }
    }
    let shader = if wide {
        &COPY_RANGES_VEC4
    } else {
        &COPY_RANGES
    };
    let pipeline = gpu.pipeline(shader, "copy_ranges")?;
    // A bare error scope, not `Gpu::scoped`: this runs inside `record_moves`' scope, whose
    // loss probe follows (each probe makes wgpu build and format two validation errors:
    // a seventh of a pass's instructions on lavapipe, three probes a pass).
    crate::gpu::scoped(gpu.device(), "recording defragmentation copies", || {
        let table = gpu
            .device()
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("vramkit copy ranges"),
                contents: bytemuck::cast_slice(&chunks),
                usage: wgpu::BufferUsages::STORAGE,
            });
        let bind = gpu.device().create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("vramkit copy ranges"),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: table.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: src.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: dst.as_entire_binding(),
                },
            ],
        });
        let (x, y) = crate::gpu::grid(chunks.len() as u64, 1, gpu);
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("vramkit copy ranges"),
            timestamp_writes: None,
        });
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups(x, y, 1);
    })
}
