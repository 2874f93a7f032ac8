//! The virtual-texture demo's host side, shared by `examples/virtual_texture.rs` and
//! `bench vt`: a render pipeline of the host's own whose fragment shader calls `vt_sample`
//! and `vt_feedback`, an offscreen target, and the camera path.
#![allow(dead_code)]

use vramkit::ledger::Tracked;
use vramkit::vt::{ProceduralSource, TileSource, VirtualTexture};
use vramkit::{Arena, Gpu};

pub const SHADER: &str = r#"
struct Camera { origin: vec2<f32>, scale: f32, pad: f32 }
@group(0) @binding(0) var<uniform> cam: Camera;

@vertex
fn vs(@builtin(vertex_index) i: u32) -> @builtin(position) vec4<f32> {
    let p = vec2<f32>(f32((i << 1u) & 2u), f32(i & 2u));
    return vec4<f32>(p * 2.0 - 1.0, 0.0, 1.0);
}

@fragment
fn fs(@builtin(position) pos: vec4<f32>) -> @location(0) vec4<f32> {
    let uv = cam.origin + pos.xy * cam.scale;
    let ddx = dpdx(uv);
    let ddy = dpdy(uv);
    vt_feedback(vec2<u32>(pos.xy), uv, ddx, ddy);
    let texel = vt_sample(uv, ddx, ddy);
    // Outside the image a plain background, not its edge texels stretched into streaks
    // (sampled anyway: derivatives and sampling stay in uniform control flow).
    let inside = all(uv >= vec2<f32>(0.0)) && all(uv <= vec2<f32>(1.0));
    return select(vec4<f32>(0.063, 0.075, 0.11, 1.0), texel, inside);
}
"#;

/// The camera at frame `f` of `n`: uv origin and uv per pixel. A fly-over at a coarse
/// level, a zoom to level 0 at 1.5 texels per pixel, then still for the last fifth.
pub fn camera(f: u32, n: u32, size: (u32, u32), texels: f32, coarse: f32) -> ([f32; 2], f32) {
    camera_towards(f, n, size, texels, coarse, [0.65, 0.42])
}

/// [`camera`] ending its zoom at `target` (uv), the fly-over along its row from 0.35 to
/// the left of it.
pub fn camera_towards(
    f: u32,
    n: u32,
    size: (u32, u32),
    texels: f32,
    coarse: f32,
    target: [f32; 2],
) -> ([f32; 2], f32) {
    let t = f as f32 / n as f32;
    let (fly, zoom) = (0.4, 0.8);
    let fine = 1.5f32;
    let (texels_per_px, cx, cy) = if t < fly {
        (coarse, target[0] - 0.35 + 0.35 * t / fly, target[1])
    } else {
        let z = ((t - fly) / (zoom - fly)).min(1.0);
        // Exponential zoom: every frame the same relative step.
        (coarse * (fine / coarse).powf(z), target[0], target[1])
    };
    let scale = texels_per_px / texels;
    let origin = [
        cx - scale * size.0 as f32 / 2.0,
        cy - scale * size.1 as f32 / 2.0,
    ];
    (origin, scale)
}

/// A render pipeline drawing one full-screen triangle: vertex entry `vs` (no vertex
/// buffers), fragment entry `fs` writing one target of `format`; `layout` `None` lets
/// wgpu derive it from the shader.
pub fn fullscreen_pipeline(
    device: &wgpu::Device,
    label: &str,
    module: &wgpu::ShaderModule,
    layout: Option<&wgpu::PipelineLayout>,
    format: wgpu::TextureFormat,
) -> wgpu::RenderPipeline {
    device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
        label: Some(label),
        layout,
        vertex: wgpu::VertexState {
            module,
            entry_point: Some("vs"),
            compilation_options: Default::default(),
            buffers: &[],
        },
        fragment: Some(wgpu::FragmentState {
            module,
            entry_point: Some("fs"),
            compilation_options: Default::default(),
            targets: &[Some(format.into())],
        }),
        primitive: Default::default(),
        depth_stencil: None,
        multisample: Default::default(),
        multiview_mask: None,
        cache: None,
    })
}

/// The host app's pipeline, camera and offscreen target (the camera and the target on the
/// device ledger, under the owner "vt demo host").
pub struct Demo {
    pipeline: wgpu::RenderPipeline,
    camera_buf: Tracked<wgpu::Buffer>,
    cam_group: wgpu::BindGroup,
    target: Tracked<wgpu::Texture>,
    target_view: wgpu::TextureView,
    readback: vramkit::Allocation,
    pub size: (u32, u32),
}

impl Demo {
    pub fn new(
        gpu: &Gpu,
        arena: &Arena,
        vt: &VirtualTexture,
        size: (u32, u32),
    ) -> vramkit::Result<Demo> {
        let device = gpu.device();
        // The host's own render pipeline: its camera at group 0, the virtual texture at 1.
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("virtual texture demo"),
            source: wgpu::ShaderSource::Wgsl(format!("{}\n{SHADER}", vt.wgsl(1)).into()),
        });
        let cam_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("camera"),
            entries: &[wgpu::BindGroupLayoutEntry {
                binding: 0,
                visibility: wgpu::ShaderStages::FRAGMENT,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Uniform,
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            }],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("virtual texture demo"),
            bind_group_layouts: &[Some(&cam_layout), Some(vt.bind_group_layout())],
            immediate_size: 0,
        });
        let format = wgpu::TextureFormat::Rgba8Unorm;
        let pipeline = fullscreen_pipeline(
            device,
            "virtual texture demo",
            &module,
            Some(&pipeline_layout),
            format,
        );
        let host = gpu.ledger().owner("vt demo host");
        let camera_buf = host.create_buffer(&wgpu::BufferDescriptor {
            label: Some("camera"),
            size: 16,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })?;
        let cam_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("camera"),
            layout: &cam_layout,
            entries: &[wgpu::BindGroupEntry {
                binding: 0,
                resource: camera_buf.as_entire_binding(),
            }],
        });
        let (w, h) = size;
        let target = host.create_texture(&wgpu::TextureDescriptor {
            label: Some("frame"),
            size: wgpu::Extent3d {
                width: w,
                height: h,
                depth_or_array_layers: 1,
            },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format,
            usage: wgpu::TextureUsages::RENDER_ATTACHMENT
                | wgpu::TextureUsages::COPY_SRC
                | wgpu::TextureUsages::TEXTURE_BINDING,
            view_formats: &[],
        })?;
        let target_view = target.create_view(&Default::default());
        let readback = arena.alloc(u64::from(w * h * 4), "frame readback")?;
        Ok(Demo {
            pipeline,
            camera_buf,
            cam_group,
            target,
            target_view,
            readback,
            size,
        })
    }

    /// One frame: the virtual texture's begin, a render pass at this camera, its end.
    pub fn frame(
        &self,
        gpu: &Gpu,
        vt: &mut VirtualTexture,
        origin: [f32; 2],
        scale: f32,
    ) -> vramkit::Result<()> {
        vt.begin_frame()?;
        gpu.write_buffer(
            &self.camera_buf,
            0,
            bytemuck::cast_slice(&[origin[0], origin[1], scale, 0.0]),
        );
        let mut e = gpu.device().create_command_encoder(&Default::default());
        {
            let mut pass = cleared_pass(&mut e, &self.target_view, "frame");
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &self.cam_group, &[]);
            pass.set_bind_group(1, vt.bind_group(), &[]);
            pass.draw(0..3, 0..1);
        }
        gpu.submit([e.finish()]);
        vt.end_frame()
    }

    /// The offscreen target (RGBA8) the frames are drawn into: a page copies it onto its
    /// canvas.
    pub fn target(&self) -> &wgpu::Texture {
        &self.target
    }

    /// The last frame's RGBA8 pixels, rows top to bottom.
    pub fn read(&self, gpu: &Gpu) -> vramkit::Result<Vec<u8>> {
        self.copy_to_readback(gpu);
        vramkit::readback::read_buffer(
            gpu,
            self.readback.buffer(),
            self.readback.offset(),
            self.readback.size(),
        )
    }

    /// [`read`](Self::read) without blocking (the browser's way).
    pub async fn read_async(
        &self,
        gpu: &Gpu,
        downloader: &vramkit::stream::Downloader,
    ) -> vramkit::Result<Vec<u8>> {
        self.copy_to_readback(gpu);
        let view = downloader.download_async(&self.readback, 0, self.readback.size())?;
        Ok(view.await?.to_vec())
    }

    fn copy_to_readback(&self, gpu: &Gpu) {
        let (w, h) = self.size;
        let mut e = gpu.device().create_command_encoder(&Default::default());
        e.copy_texture_to_buffer(
            self.target.as_image_copy(),
            wgpu::TexelCopyBufferInfo {
                buffer: self.readback.buffer(),
                layout: wgpu::TexelCopyBufferLayout {
                    offset: self.readback.offset(),
                    bytes_per_row: Some(w * 4),
                    rows_per_image: Some(h),
                },
            },
            wgpu::Extent3d {
                width: w,
                height: h,
                depth_or_array_layers: 1,
            },
        );
        gpu.submit([e.finish()]);
    }
}

/// Bilinear sampling of the whole level image, clamped at its edges, straight from the
/// procedural texels: no tiles, so a seam at a page border would show.
pub fn full_image_sample(src: &ProceduralSource, uv: [f32; 2], level: u32) -> [f32; 4] {
    let layout = src.layout();
    let level = level.min(layout.levels - 1);
    let (w, h) = layout.level_size(level);
    let t = [
        uv[0].clamp(0.0, 1.0) * w as f32 - 0.5,
        uv[1].clamp(0.0, 1.0) * h as f32 - 0.5,
    ];
    let (x0, y0) = (t[0].floor(), t[1].floor());
    let (fx, fy) = (t[0] - x0, t[1] - y0);
    let at = |x: f32, y: f32, c: usize| {
        let x = (x as i64).clamp(0, i64::from(w) - 1) as u32;
        let y = (y as i64).clamp(0, i64::from(h) - 1) as u32;
        f32::from(src.texel(level, x, y)[c]) / 255.0
    };
    let mut out = [0.0; 4];
    for (c, o) in out.iter_mut().enumerate() {
        let top = at(x0, y0, c) * (1.0 - fx) + at(x0 + 1.0, y0, c) * fx;
        let bottom = at(x0, y0 + 1.0, c) * (1.0 - fx) + at(x0 + 1.0, y0 + 1.0, c) * fx;
        *o = top * (1.0 - fy) + bottom * fy;
    }
    out
}

/// Pixels of an RGBA8 frame of `size` drawn at `origin` and `scale` (uv per pixel) that
/// match [`full_image_sample`] of level 0 within `tol` in every channel.
pub fn exact_pixels(
    pixels: &[u8],
    size: (u32, u32),
    origin: [f32; 2],
    scale: f32,
    source: &ProceduralSource,
    tol: f32,
) -> usize {
    let mut exact = 0;
    for y in 0..size.1 {
        for x in 0..size.0 {
            let uv = [
                origin[0] + (x as f32 + 0.5) * scale,
                origin[1] + (y as f32 + 0.5) * scale,
            ];
            let want = full_image_sample(source, uv, 0);
            let at = ((y * size.0 + x) * 4) as usize;
            exact += usize::from(
                (0..4).all(|c| (f32::from(pixels[at + c]) / 255.0 - want[c]).abs() <= tol),
            );
        }
    }
    exact
}

/// A render pass drawing into `view`, cleared to black first.
pub fn cleared_pass<'e>(
    encoder: &'e mut wgpu::CommandEncoder,
    view: &wgpu::TextureView,
    label: &str,
) -> wgpu::RenderPass<'e> {
    encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
        label: Some(label),
        color_attachments: &[Some(wgpu::RenderPassColorAttachment {
            view,
            depth_slice: None,
            resolve_target: None,
            ops: wgpu::Operations {
                load: wgpu::LoadOp::Clear(wgpu::Color::BLACK),
                store: wgpu::StoreOp::Store,
            },
        })],
        ..Default::default()
    })
}
