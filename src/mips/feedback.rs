//! [`MipFeedback`]: the GPU says which level of each streamed texture a frame sampled and
//! how much of the screen it covered, instead of the host estimating it.
//!
//! The host's fragment shader calls `mip_feedback_write(id, uv, texels)` (WGSL from
//! [`MipFeedback::wgsl`]) where it samples streamed texture `id`: the derivatives of the
//! texel coordinates give the full-chain level the hardware picks, an `atomicMin` keeps the
//! finest per texture and an `atomicAdd` counts its fragments. [`MipFeedback::end_frame`]
//! copies the words to a readback buffer and maps it; a later
//! [`MipFeedback::apply`] (never blocking: it polls the device once and returns `false`
//! while the copy is on its way) hands each texture's level and area to the streamer.
//! Textures no fragment sampled get their coarsest level and no importance.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::{MipId, MipStreamer};
use crate::{Error, Gpu, Misuse, Result};

const FEEDBACK_WGSL: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/shaders/shared/mip_feedback.wgsl"
));

/// The feedback buffer of a frame loop (module docs).
///
/// ```no_run
/// # fn f(gpu: &vramkit::Gpu, streamer: &mut vramkit::mips::MipStreamer) -> vramkit::Result<()> {
/// let mut feedback = vramkit::mips::MipFeedback::new(gpu, 1024)?;
/// let wgsl = feedback.wgsl(2); // in the host's shader, beside its own bindings
/// // each frame: feedback.begin_frame(); draw with feedback.bind_group() at group 2;
/// feedback.end_frame();
/// feedback.apply(streamer)?; // the levels of a frame or two ago, when they arrived
/// streamer.update()?;
/// # Ok(()) }
/// ```
pub struct MipFeedback {
    gpu: Gpu,
    capacity: u32,
    buffer: wgpu::Buffer,
    layout: wgpu::BindGroupLayout,
    group: wgpu::BindGroup,
    /// The readback in flight, and whether its map is done.
    pending: Option<(wgpu::Buffer, Arc<AtomicBool>)>,
}

impl MipFeedback {
    /// Feedback for texture ids below `capacity`.
    pub fn new(gpu: &Gpu, capacity: u32) -> Result<MipFeedback> {
        if capacity == 0 {
            return Err(Error::misuse(
                Misuse::Length,
                "mip feedback for 0 textures",
                "give the number of texture ids the streamer hands out",
            ));
        }
        let size = u64::from(capacity) * 8;
        let buffer = gpu.scoped("creating the mip feedback buffer", || {
            gpu.device().create_buffer(&wgpu::BufferDescriptor {
                label: Some("vramkit mip feedback"),
                size,
                usage: wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })?;
        let layout = gpu
            .device()
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some("vramkit mip feedback"),
                entries: &[wgpu::BindGroupLayoutEntry {
                    binding: 0,
                    visibility: wgpu::ShaderStages::FRAGMENT,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Storage { read_only: false },
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                }],
            });
        let group = gpu.device().create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("vramkit mip feedback"),
            layout: &layout,
            entries: &[wgpu::BindGroupEntry {
                binding: 0,
                resource: buffer.as_entire_binding(),
            }],
        });
        let feedback = MipFeedback {
            gpu: gpu.clone(),
            capacity,
            buffer,
            layout,
            group,
            pending: None,
        };
        feedback.begin_frame();
        Ok(feedback)
    }

    /// The WGSL the host's shader includes: the binding at `group` and
    /// `fn mip_feedback_write(id: u32, uv: vec2<f32>, texels: vec2<f32>)`.
    pub fn wgsl(&self, group: u32) -> String {
        FEEDBACK_WGSL.replace("@group(0)", &format!("@group({group})"))
    }

    /// The layout of [`bind_group`](Self::bind_group), for the host's pipeline layout.
    pub fn bind_group_layout(&self) -> &wgpu::BindGroupLayout {
        &self.layout
    }

    /// The bind group the WGSL of [`wgsl`](Self::wgsl) expects.
    pub fn bind_group(&self) -> &wgpu::BindGroup {
        &self.group
    }

    /// Clears the words for a new frame (queued before the frame's draws).
    pub fn begin_frame(&self) {
        let words: Vec<u32> = (0..self.capacity).flat_map(|_| [u32::MAX, 0]).collect();
        self.gpu
            .queue()
            .write_buffer(&self.buffer, 0, bytemuck::cast_slice(&words));
    }

    /// Copies this frame's words out (submitted after the frame's draws) and maps them;
    /// a frame whose readback is still in flight keeps the older one and skips this copy.
    pub fn end_frame(&mut self) {
        if self.pending.is_some() {
            return;
        }
        let size = self.buffer.size();
        let readback = self.gpu.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("vramkit mip feedback readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder =
            self.gpu
                .device()
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("vramkit mip feedback"),
                });
        encoder.copy_buffer_to_buffer(&self.buffer, 0, &readback, 0, size);
        self.gpu.submit([encoder.finish()]);
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        readback.map_async(wgpu::MapMode::Read, .., move |r| {
            flag.store(r.is_ok(), Ordering::Release);
        });
        self.pending = Some((readback, done));
    }

    /// Hands the newest arrived frame's levels and areas to `streamer` (ids below the
    /// capacity that the streamer holds); `Ok(false)` when none has arrived yet. Polls the
    /// device once and never waits.
    pub fn apply(&mut self, streamer: &mut MipStreamer) -> Result<bool> {
        let Some(words) = self.take()? else {
            return Ok(false);
        };
        for (i, pair) in words.chunks_exact(2).enumerate() {
            let id = MipId(i as u32);
            if streamer.texture(id).is_err() {
                continue;
            }
            let (level, area) = (pair[0], pair[1]);
            if area == 0 {
                streamer.set_wanted(id, u32::MAX, 0.0)?;
            } else {
                streamer.set_wanted(id, level, area as f32)?;
            }
        }
        Ok(true)
    }

    /// The words of the readback in flight once it is mapped (`[level, area]` per id).
    pub fn take(&mut self) -> Result<Option<Vec<u32>>> {
        self.gpu.check_alive()?;
        let Some((_, done)) = &self.pending else {
            return Ok(None);
        };
        if !done.load(Ordering::Acquire) {
            let _ = self.gpu.poll_device(wgpu::PollType::Poll);
            if !done.load(Ordering::Acquire) {
                return Ok(None);
            }
        }
        let Some((readback, _)) = self.pending.take() else {
            return Ok(None);
        };
        let words: Vec<u32> = {
            let view = readback.slice(..).get_mapped_range().map_err(|e| {
                Error::invalid(
                    format!("reading the mip feedback after its map: {e}"),
                    "a device lost meanwhile: recover, then make a new MipFeedback",
                )
            })?;
            bytemuck::pod_collect_to_vec(&view[..])
        };
        readback.unmap();
        Ok(Some(words))
    }
}
