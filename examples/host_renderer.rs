//! A host renderer that shares its device with vramkit: the application owns the wgpu
//! instance, adapter, device and its render pipeline (drawing offscreen); vramkit gets
//! clones of the device and queue, computes a palette with its kernels into an arena
//! allocation the host's fragment shader reads, and streams a virtual texture the same
//! shader samples. The frame is written to a PNG and checked against the CPU.
//!
//! ```text
//! cargo run --release --example host_renderer -- [out.png]    # default: host_renderer.png
//! ```
//!
//! Exits non-zero when fewer than 99 % of the pixels match the CPU's reference (the
//! texture's texels through the same palette).

#[path = "support/vt_demo.rs"]
mod vt_demo;

use std::sync::Arc;

use vramkit::kernels::Unary;
use vramkit::vt::{ProceduralSource, VirtualTexture, VtConfig};
use vramkit::Runtime;
use vt_demo::fullscreen_pipeline;

const SIZE: (u32, u32) = (512, 384);
const TEXELS: u32 = 1 << 16;

/// The host's shader: group 0 is its own (camera and the palette vramkit computed),
/// group 1 the virtual texture (`VirtualTexture::wgsl` declares it).
const SHADER: &str = r#"
struct Camera { origin: vec2<f32>, scale: f32, pad: f32 }
@group(0) @binding(0) var<uniform> cam: Camera;
@group(0) @binding(1) var<storage, read> palette: array<f32>;

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
    let c = vt_sample(uv, ddx, ddy);
    // The palette (computed by vramkit's kernels) shades by the texel's red channel.
    let shade = palette[u32(round(c.r * 255.0))];
    return vec4<f32>(c.rgb * shade, 1.0);
}
"#;

fn main() {
    let out = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "host_renderer.png".into());
    if let Err(e) = run(&out) {
        eprintln!("host_renderer: {e}");
        std::process::exit(1);
    }
}

fn run(out: &str) -> Result<(), Box<dyn std::error::Error>> {
    // --- The application's own device, as any wgpu renderer makes it. ---
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let adapter = pollster::block_on(instance.request_adapter(&Default::default()))?;
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("host"),
        required_limits: adapter.limits(),
        ..Default::default()
    }))?;
    println!("host device: {}", adapter.get_info().name);

    // --- vramkit on the same device: handles are cheap clones. ---
    let rt = Runtime::from_wgpu_with_adapter(&adapter, device.clone(), queue.clone())?;
    let gpu = rt.gpu().clone();

    // A palette of 256 shades computed by vramkit's kernels: sigmoid((i - 128) / 32),
    // kept in an arena allocation the host binds as storage.
    let ramp: Vec<f32> = (0..256).map(|i| i as f32).collect();
    let ramp = rt.alloc_from(&ramp, "ramp")?;
    let scaled = rt.alloc::<f32>(256, "scaled")?;
    let palette = rt.alloc::<f32>(256, "palette")?;
    let mut batch = rt.batch();
    batch
        .scale(1.0 / 32.0, -4.0, &ramp, &scaled)?
        .map(Unary::Sigmoid, &scaled, &palette)?;
    batch.submit()?;

    // A 65536^2 procedural virtual texture, streamed as the frame asks.
    let source = Arc::new(ProceduralSource::new(TEXELS, TEXELS)?);
    let mut vt = VirtualTexture::new(
        &gpu,
        rt.arena(),
        source.clone(),
        VtConfig {
            render_size: SIZE,
            ..Default::default()
        },
    )?;

    // --- The host's render pipeline: its group 0, the texture's group 1. ---
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("host frame"),
        source: wgpu::ShaderSource::Wgsl(format!("{}\n{SHADER}", vt.wgsl(1)).into()),
    });
    let own_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("host camera and palette"),
        entries: &[
            layout_entry(0, wgpu::BufferBindingType::Uniform),
            layout_entry(1, wgpu::BufferBindingType::Storage { read_only: true }),
        ],
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some("host frame"),
        bind_group_layouts: &[Some(&own_layout), Some(vt.bind_group_layout())],
        immediate_size: 0,
    });
    let format = wgpu::TextureFormat::Rgba8Unorm;
    let pipeline = fullscreen_pipeline(
        &device,
        "host frame",
        &module,
        Some(&pipeline_layout),
        format,
    );
    // Level 0 at 1.5 texels a pixel, somewhere inside the texture.
    let scale = 1.5 / TEXELS as f32;
    let origin = [0.41f32, 0.27];
    let camera = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("camera"),
        size: 16,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    queue.write_buffer(
        &camera,
        0,
        bytemuck::cast_slice(&[origin[0], origin[1], scale, 0.0]),
    );
    let palette_range = palette.allocation();
    let own_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("host camera and palette"),
        layout: &own_layout,
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: camera.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: palette_range.buffer(),
                    offset: palette_range.offset(),
                    size: std::num::NonZeroU64::new(palette_range.size()),
                }),
            },
        ],
    });
    let target = device.create_texture(&wgpu::TextureDescriptor {
        label: Some("host frame"),
        size: wgpu::Extent3d {
            width: SIZE.0,
            height: SIZE.1,
            depth_or_array_layers: 1,
        },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format,
        usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
        view_formats: &[],
    });
    let view = target.create_view(&Default::default());

    // --- Frames: the texture's begin, the host's pass, the texture's end. ---
    let draw = |vt: &mut VirtualTexture| -> vramkit::Result<()> {
        vt.begin_frame()?;
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = vt_demo::cleared_pass(&mut encoder, &view, "host frame");
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &own_group, &[]);
            pass.set_bind_group(1, vt.bind_group(), &[]);
            pass.draw(0..3, 0..1);
        }
        gpu.submit([encoder.finish()]);
        vt.end_frame()
    };
    let mut frames = 0;
    for _ in 0..30 {
        draw(&mut vt)?;
        frames += 1;
        gpu.wait_idle()?;
        if vt.settle(8)? == 0 && frames > 3 {
            break;
        }
    }
    draw(&mut vt)?;

    // --- Read the frame back through vramkit and check it. ---
    let readback = rt.arena().alloc(u64::from(SIZE.0 * SIZE.1 * 4), "frame")?;
    let mut encoder = device.create_command_encoder(&Default::default());
    encoder.copy_texture_to_buffer(
        target.as_image_copy(),
        wgpu::TexelCopyBufferInfo {
            buffer: readback.buffer(),
            layout: wgpu::TexelCopyBufferLayout {
                offset: readback.offset(),
                bytes_per_row: Some(SIZE.0 * 4),
                rows_per_image: Some(SIZE.1),
            },
        },
        wgpu::Extent3d {
            width: SIZE.0,
            height: SIZE.1,
            depth_or_array_layers: 1,
        },
    );
    gpu.submit([encoder.finish()]);
    let pixels = rt.downloader().download(&readback, 0, readback.size())?;
    let shades = rt.download(&palette)?;
    let mut exact = 0usize;
    for y in 0..SIZE.1 {
        for x in 0..SIZE.0 {
            let uv = [
                origin[0] + (x as f32 + 0.5) * scale,
                origin[1] + (y as f32 + 0.5) * scale,
            ];
            let texel = vt_demo::full_image_sample(&source, uv, 0);
            let shade = shades[(texel[0] * 255.0).round() as usize];
            let at = ((y * SIZE.0 + x) * 4) as usize;
            exact += usize::from((0..3).all(|c| {
                (f32::from(pixels[at + c]) / 255.0 - texel[c] * shade).abs() <= 4.0 / 255.0
            }));
        }
    }
    image::save_buffer(
        out,
        &pixels,
        SIZE.0,
        SIZE.1,
        image::ExtendedColorType::Rgba8,
    )?;
    let total = (SIZE.0 * SIZE.1) as usize;
    println!(
        "{frames} frames; {exact} of {total} pixels match the CPU ({:.2} %); wrote {out}",
        100.0 * exact as f64 / total as f64
    );
    println!("{}", vt.stats());
    println!("{}", rt.arena().summary());
    if exact * 100 < total * 99 {
        return Err(format!("only {exact} of {total} pixels match the CPU").into());
    }
    Ok(())
}

fn layout_entry(binding: u32, ty: wgpu::BufferBindingType) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::FRAGMENT,
        ty: wgpu::BindingType::Buffer {
            ty,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}
