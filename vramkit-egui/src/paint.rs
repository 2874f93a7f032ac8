//! The virtual image in egui's render pass: a render pipeline of the widget's own (its
//! view at group 0, the virtual texture at group 1) and the paint callback that runs the
//! virtual texture's frame inside egui-wgpu's.

use std::sync::Arc;

use parking_lot::Mutex;
use vramkit::vt::VirtualTexture;
use web_time::Instant;

/// The widget's parameters, mirrored by `struct View` in [`SHADER`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct ViewUniform {
    /// uv at the widget's top-left pixel corner.
    pub origin: [f32; 2],
    /// uv per pixel.
    pub scale: [f32; 2],
    /// The widget's top-left corner in framebuffer pixels.
    pub rect_min: [f32; 2],
    pub pad: [f32; 2],
    /// Drawn outside the image.
    pub background: [f32; 4],
}

/// The widget's shader; [`VirtualTexture::wgsl`] is put before it.
const SHADER: &str = r#"
struct View {
    origin: vec2<f32>,
    scale: vec2<f32>,
    rect_min: vec2<f32>,
    pad: vec2<f32>,
    background: vec4<f32>,
}
@group(0) @binding(0) var<uniform> view: View;

@vertex
fn vs(@builtin(vertex_index) i: u32) -> @builtin(position) vec4<f32> {
    let p = vec2<f32>(f32((i << 1u) & 2u), f32(i & 2u));
    return vec4<f32>(p * 2.0 - 1.0, 0.0, 1.0);
}

@fragment
fn fs(@builtin(position) pos: vec4<f32>) -> @location(0) vec4<f32> {
    let local = pos.xy - view.rect_min;
    let uv = view.origin + local * view.scale;
    // The mapping is affine: its derivatives are exact, with no dpdx in the way of the
    // CPU reference (and no uniform control flow needed).
    let ddx = vec2<f32>(view.scale.x, 0.0);
    let ddy = vec2<f32>(0.0, view.scale.y);
    let inside = all(uv >= vec2<f32>(0.0)) && all(uv <= vec2<f32>(1.0));
    if !inside {
        return view.background;
    }
    vt_feedback(vec2<u32>(max(local, vec2<f32>(0.0))), uv, ddx, ddy);
    return vt_sample(uv, ddx, ddy);
}
"#;

/// What the callback and the widget share: the virtual texture and the widget's GPU
/// objects.
pub(crate) struct Shared {
    pub vt: VirtualTexture,
    /// The virtual texture's frame was begun and egui has drawn it: `end_frame` is due
    /// before the next `begin_frame`.
    pub frame_open: bool,
    /// The last error a frame met, for the widget to show.
    pub error: Option<String>,
    /// CPU time of the last `prepare`.
    pub prepare_ms: f64,
}

/// The widget's render objects, made once for egui's target format.
pub(crate) struct Gpu {
    pub pipeline: wgpu::RenderPipeline,
    pub uniform: wgpu::Buffer,
    pub view_group: wgpu::BindGroup,
}

impl Gpu {
    pub fn new(
        device: &wgpu::Device,
        vt: &VirtualTexture,
        format: wgpu::TextureFormat,
        msaa_samples: u32,
    ) -> Gpu {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("vramkit-egui virtual image"),
            source: wgpu::ShaderSource::Wgsl(format!("{}\n{SHADER}", vt.wgsl(1)).into()),
        });
        let view_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("vramkit-egui view"),
            entries: &[wgpu::BindGroupLayoutEntry {
                binding: 0,
                visibility: wgpu::ShaderStages::FRAGMENT,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Uniform,
                    has_dynamic_offset: false,
                    min_binding_size: wgpu::BufferSize::new(
                        std::mem::size_of::<ViewUniform>() as u64
                    ),
                },
                count: None,
            }],
        });
        let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("vramkit-egui virtual image"),
            bind_group_layouts: &[Some(&view_layout), Some(vt.bind_group_layout())],
            immediate_size: 0,
        });
        let pipeline = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
            label: Some("vramkit-egui virtual image"),
            layout: Some(&layout),
            vertex: wgpu::VertexState {
                module: &module,
                entry_point: Some("vs"),
                compilation_options: Default::default(),
                buffers: &[],
            },
            fragment: Some(wgpu::FragmentState {
                module: &module,
                entry_point: Some("fs"),
                compilation_options: Default::default(),
                targets: &[Some(format.into())],
            }),
            primitive: Default::default(),
            depth_stencil: None,
            multisample: wgpu::MultisampleState {
                count: msaa_samples.max(1),
                ..Default::default()
            },
            multiview_mask: None,
            cache: None,
        });
        let uniform = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("vramkit-egui view"),
            size: std::mem::size_of::<ViewUniform>() as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let view_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("vramkit-egui view"),
            layout: &view_layout,
            entries: &[wgpu::BindGroupEntry {
                binding: 0,
                resource: uniform.as_entire_binding(),
            }],
        });
        Gpu {
            pipeline,
            uniform,
            view_group,
        }
    }
}

/// One frame's paint callback: the view to draw, and clones of what `paint` binds (wgpu
/// handles are reference-counted, so the bind groups live as long as egui needs them).
pub(crate) struct Callback {
    pub shared: Arc<Mutex<Shared>>,
    pub view: ViewUniform,
    pub pipeline: wgpu::RenderPipeline,
    pub uniform: wgpu::Buffer,
    pub view_group: wgpu::BindGroup,
    pub vt_group: wgpu::BindGroup,
}

impl egui_wgpu::CallbackTrait for Callback {
    fn prepare(
        &self,
        _device: &wgpu::Device,
        queue: &wgpu::Queue,
        _screen: &egui_wgpu::ScreenDescriptor,
        _encoder: &mut wgpu::CommandEncoder,
        _resources: &mut egui_wgpu::CallbackResources,
    ) -> Vec<wgpu::CommandBuffer> {
        let start = Instant::now();
        let mut s = self.shared.lock();
        // The previous frame's sampling was submitted with egui's previous frame: its
        // feedback can be compacted now, in queue order after it.
        let ended = if s.frame_open {
            s.frame_open = false;
            s.vt.end_frame()
        } else {
            Ok(())
        };
        match ended.and_then(|()| s.vt.begin_frame()) {
            Ok(()) => s.frame_open = true,
            Err(e) => s.error = Some(e.to_string()),
        }
        queue.write_buffer(&self.uniform, 0, bytemuck::bytes_of(&self.view));
        s.prepare_ms = start.elapsed().as_secs_f64() * 1e3;
        Vec::new()
    }

    fn paint(
        &self,
        _info: egui::PaintCallbackInfo,
        pass: &mut wgpu::RenderPass<'static>,
        _resources: &egui_wgpu::CallbackResources,
    ) {
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, &self.view_group, &[]);
        pass.set_bind_group(1, &self.vt_group, &[]);
        pass.draw(0..3, 0..1);
    }
}
