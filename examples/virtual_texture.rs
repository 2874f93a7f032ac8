//! A camera flies over, then zooms deep into, a virtual texture of 2^20 x 2^20 texels (or
//! a pack file), rendered each frame by a real render pass whose fragment shader calls
//! `vt_sample` and `vt_feedback`, with a tile cache far smaller than what the path visits.
//! It writes a PNG contact sheet of four frames and prints `name: value` lines; after the
//! camera stops it compares every pixel with the CPU reference sampler.
//!
//! ```text
//! cargo run --release --example virtual_texture                      # procedural 2^20
//! cargo run --release --example virtual_texture -- --pack big.vtpack # a pack file
//! options: --frames N  --size WxH  --slots N  --out contact.png
//! ```

use std::sync::Arc;
use std::time::Instant;

use vramkit::vt::{PackFile, ProceduralSource, ReferenceSampler, TileSource, VirtualTexture, VtConfig};
use vramkit::{Arena, Gpu};

const SHADER: &str = r#"
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
    return vt_sample(uv, ddx, ddy);
}
"#;

struct Args {
    pack: Option<String>,
    frames: u32,
    size: (u32, u32),
    slots: u32,
    out: std::path::PathBuf,
}

fn args() -> Result<Args, Box<dyn std::error::Error>> {
    let mut a = Args {
        pack: None,
        frames: 240,
        size: (512, 384),
        slots: 256,
        out: std::env::temp_dir().join("vramkit_vt_contact.png"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        match k.as_str() {
            "--pack" => a.pack = Some(v()?),
            "--frames" => a.frames = v()?.parse()?,
            "--slots" => a.slots = v()?.parse()?,
            "--out" => a.out = v()?.into(),
            "--size" => {
                let s = v()?;
                let (w, h) = s.split_once('x').ok_or("--size is WxH")?;
                a.size = (w.parse::<u32>()?.next_multiple_of(64), h.parse()?);
            }
            _ => return Err(format!("unknown argument {k}").into()),
        }
    }
    Ok(a)
}

/// The camera at frame `f` of `n`: uv origin and uv per pixel. A fly-over at a coarse
/// level, a zoom to level 0 at 1.5 texels per pixel, then still for the last fifth.
fn camera(f: u32, n: u32, size: (u32, u32), texels: f32, coarse: f32) -> ([f32; 2], f32) {
    let t = f as f32 / n as f32;
    let (fly, zoom) = (0.4, 0.8);
    let fine = 1.5f32;
    let (texels_per_px, cx, cy) = if t < fly {
        (coarse, 0.30 + 0.35 * t / fly, 0.42)
    } else {
        let z = ((t - fly) / (zoom - fly)).min(1.0);
        // Exponential zoom: every frame the same relative step.
        (coarse * (fine / coarse).powf(z), 0.65, 0.42)
    };
    let scale = texels_per_px / texels;
    let origin = [cx - scale * size.0 as f32 / 2.0, cy - scale * size.1 as f32 / 2.0];
    (origin, scale)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let a = args()?;
    let gpu = Gpu::headless()?;
    println!("{}", gpu.describe());
    let arena = Arena::new(&gpu, Default::default())?;
    let source: Arc<dyn TileSource> = match &a.pack {
        Some(p) => Arc::new(PackFile::open(p)?),
        None => Arc::new(ProceduralSource::new(1 << 20, 1 << 20)?),
    };
    let layout = source.layout();
    let config = VtConfig {
        cache_slots: a.slots,
        render_size: a.size,
        ..Default::default()
    };
    let mut vt = VirtualTexture::new(&gpu, &arena, source.clone(), config)?;
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
    let pipeline = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
        label: Some("virtual texture demo"),
        layout: Some(&pipeline_layout),
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
        multisample: Default::default(),
        multiview_mask: None,
        cache: None,
    });
    let camera_buf = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("camera"),
        size: 16,
        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let cam_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("camera"),
        layout: &cam_layout,
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: camera_buf.as_entire_binding(),
        }],
    });
    let (w, h) = a.size;
    let target = device.create_texture(&wgpu::TextureDescriptor {
        label: Some("frame"),
        size: wgpu::Extent3d { width: w, height: h, depth_or_array_layers: 1 },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format,
        usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
        view_formats: &[],
    });
    let target_view = target.create_view(&Default::default());
    let readback = arena.alloc(u64::from(w * h * 4), "frame readback")?;
    let read_frame = || -> Result<Vec<u8>, vramkit::Error> {
        let mut e = device.create_command_encoder(&Default::default());
        e.copy_texture_to_buffer(
            target.as_image_copy(),
            wgpu::TexelCopyBufferInfo {
                buffer: readback.buffer(),
                layout: wgpu::TexelCopyBufferLayout {
                    offset: readback.offset(),
                    bytes_per_row: Some(w * 4),
                    rows_per_image: Some(h),
                },
            },
            wgpu::Extent3d { width: w, height: h, depth_or_array_layers: 1 },
        );
        gpu.submit([e.finish()]);
        vramkit::readback::read_buffer(&gpu, readback.buffer(), readback.offset(), readback.size())
    };

    let texels = layout.width.max(layout.height) as f32;
    let coarse = (1u32 << (layout.levels - 1).min(5)) as f32 * 1.5;
    let bar = indicatif::ProgressBar::new(u64::from(a.frames));
    let mut cpu_ms = Vec::new();
    let mut shots = Vec::new();
    let mut visited = std::collections::HashSet::new();
    let start = Instant::now();
    for f in 0..a.frames {
        vt.begin_frame()?;
        let (origin, scale) = camera(f, a.frames, a.size, texels, coarse);
        gpu.write_buffer(&camera_buf, 0, bytemuck::cast_slice(&[origin[0], origin[1], scale, 0.0]));
        let mut e = device.create_command_encoder(&Default::default());
        {
            let mut pass = e.begin_render_pass(&wgpu::RenderPassDescriptor {
                label: Some("frame"),
                color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                    view: &target_view,
                    depth_slice: None,
                    resolve_target: None,
                    ops: wgpu::Operations {
                        load: wgpu::LoadOp::Clear(wgpu::Color::BLACK),
                        store: wgpu::StoreOp::Store,
                    },
                })],
                ..Default::default()
            });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &cam_group, &[]);
            pass.set_bind_group(1, vt.bind_group(), &[]);
            pass.draw(0..3, 0..1);
        }
        gpu.submit([e.finish()]);
        vt.end_frame()?;
        let s = vt.stats();
        cpu_ms.push(s.cpu_ms_last);
        // Tiles the path needs: every page of the view at the level it samples.
        let level = ReferenceSampler::new(source.as_ref()).level_for([scale, 0.0], [0.0, scale]);
        let (c0, c1) = (
            layout.page_at(level, origin),
            layout.page_at(level, [origin[0] + scale * w as f32, origin[1] + scale * h as f32]),
        );
        for y in c0.y..=c1.y {
            for x in c0.x..=c1.x {
                visited.insert((level, x, y));
            }
        }
        if [a.frames / 4, a.frames / 2, 3 * a.frames / 4].contains(&f) {
            gpu.wait_idle()?;
            shots.push(read_frame()?);
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let seconds = start.elapsed().as_secs_f64();

    // Settled: let every requested tile arrive, render once more, compare every pixel.
    let (origin, scale) = camera(a.frames, a.frames, a.size, texels, coarse);
    for _ in 0..4 {
        gpu.wait_idle()?;
        vt.settle(64)?;
        vt.begin_frame()?;
        let mut e = device.create_command_encoder(&Default::default());
        {
            let mut pass = e.begin_render_pass(&wgpu::RenderPassDescriptor {
                color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                    view: &target_view,
                    depth_slice: None,
                    resolve_target: None,
                    ops: wgpu::Operations { load: wgpu::LoadOp::Clear(wgpu::Color::BLACK), store: wgpu::StoreOp::Store },
                })],
                ..Default::default()
            });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &cam_group, &[]);
            pass.set_bind_group(1, vt.bind_group(), &[]);
            pass.draw(0..3, 0..1);
        }
        gpu.submit([e.finish()]);
        vt.end_frame()?;
    }
    gpu.wait_idle()?;
    let last = read_frame()?;
    let mut reference = ReferenceSampler::new(source.as_ref());
    let level = reference.level_for([scale, 0.0], [0.0, scale]);
    let mut exact = 0u64;
    for y in 0..h {
        for x in 0..w {
            let uv = [origin[0] + (x as f32 + 0.5) * scale, origin[1] + (y as f32 + 0.5) * scale];
            let want = reference.sample(uv, level)?;
            let at = ((y * w + x) * 4) as usize;
            let ok = (0..4).all(|c| (f32::from(last[at + c]) / 255.0 - want[c]).abs() <= 3.0 / 255.0);
            exact += u64::from(ok);
        }
    }
    shots.push(last);
    contact_sheet(&shots, w, h, &a.out)?;

    let s = vt.stats();
    let mut sorted = cpu_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let p99 = sorted[((sorted.len() as f64 * 0.99) as usize).min(sorted.len() - 1)];
    println!("{s}");
    println!("contact_sheet: {}", a.out.display());
    println!("frames: {}", a.frames);
    println!("seconds: {seconds:.2}");
    println!("virtual_texels: {}x{}", layout.width, layout.height);
    println!("cache_slots: {}", a.slots);
    println!("tiles_visited: {}", visited.len());
    println!("oversubscription: {:.2}", visited.len() as f64 / f64::from(a.slots));
    println!("unmapped_samples: {}", vt.unmapped_samples()?);
    println!("settled_exact_fraction: {:.4}", exact as f64 / f64::from(w * h));
    println!("feedback_latency_frames_max: {}", s.feedback_latency_frames_max);
    println!("upload_wait_frames_max: {}", s.upload_wait_frames_max);
    println!("tiles_uploaded_per_frame_max: {}", s.uploads_max);
    println!("cpu_ms_per_frame_p99: {p99:.3}");
    println!("hit_rate: {:.3}", s.hit_rate());
    println!("load_errors: {}", s.load_errors);
    Ok(())
}

/// Four frames, half size, two by two, as a PNG.
fn contact_sheet(shots: &[Vec<u8>], w: u32, h: u32, out: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let (hw, hh) = (w / 2, h / 2);
    let mut sheet = image::RgbaImage::new(hw * 2, hh * 2);
    for (k, shot) in shots.iter().take(4).enumerate() {
        let (ox, oy) = ((k as u32 % 2) * hw, (k as u32 / 2) * hh);
        for y in 0..hh {
            for x in 0..hw {
                let at = (((2 * y) * w + 2 * x) * 4) as usize;
                sheet.put_pixel(ox + x, oy + y, image::Rgba([shot[at], shot[at + 1], shot[at + 2], 255]));
            }
        }
    }
    sheet.save(out)?;
    Ok(())
}
