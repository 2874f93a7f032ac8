//! Virtual textures on a real adapter, against the CPU reference sampler.

use crate::common;
#[path = "../../examples/support/vt_demo.rs"]
mod vt_demo;

use std::collections::HashSet;
use std::sync::Arc;

use rand::Rng;
use vramkit::vt::{
    write_pack, Compression, FnSource, ImageSource, PackFile, ProceduralSource, ReferenceSampler,
    TileId, TileSource, VirtualTexture, VtConfig, INNER, TILE_BYTES,
};
use vramkit::{Arena, Error};

/// Bilinear weights differ by a few 1/256 steps between GPUs and the f32 reference.
const TOL: f32 = 3.0 / 255.0;

fn arena() -> Arena {
    Arena::new(common::gpu(), Default::default()).unwrap()
}

fn config(slots: u32) -> VtConfig {
    VtConfig {
        cache_slots: slots,
        render_size: (256, 256),
        loader_threads: 16,
        ..Default::default()
    }
}

fn all_tiles(source: &dyn TileSource, from: u32) -> Vec<TileId> {
    let layout = source.layout();
    (from..layout.levels)
        .flat_map(|l| {
            let (px, py) = layout.pages(l);
            (0..py).flat_map(move |y| (0..px).map(move |x| TileId::new(l, x, y)))
        })
        .collect()
}

use vt_demo::full_image_sample;

fn assert_near(got: [f32; 4], want: [f32; 4], what: &str) {
    for c in 0..4 {
        assert!(
            (got[c] - want[c]).abs() <= TOL,
            "{what}: got {got:?}, want {want:?}"
        );
    }
}

/// Points on page borders of every level (both sides, and the texture's edges), plus
/// random ones.
fn points(source: &dyn TileSource, n_random: usize) -> Vec<([f32; 2], u32)> {
    let layout = source.layout();
    let mut rng = common::rng();
    let mut out = Vec::new();
    for level in 0..layout.levels {
        let (w, h) = layout.level_size(level);
        let (px, py) = layout.pages(level);
        for k in 0..=px.min(6) {
            for d in [-0.75f32, -0.25, 0.0, 0.25, 0.75] {
                let x = ((k * INNER) as f32 + d).clamp(0.0, w as f32) / w as f32;
                let y = rng.gen_range(0.0..1.0f32);
                out.push(([x, y], level));
            }
        }
        for k in 0..=py.min(6) {
            let y = ((k * INNER) as f32 + 0.5).min(h as f32) / h as f32;
            out.push(([rng.gen_range(0.0..1.0f32), y], level));
        }
        out.push(([0.0, 0.0], level));
        out.push(([1.0, 1.0], level));
        for _ in 0..n_random {
            out.push(([rng.gen_range(0.0..1.0), rng.gen_range(0.0..1.0)], level));
        }
    }
    out
}

/// Every tile-staging slot is back once the GPU is idle and nothing waits for a cache
/// slot; and on Vulkan with staging on, tiles really went through it.
fn assert_staging_whole(vt: &VirtualTexture, staged_tiles: u32) {
    common::gpu().wait_idle().unwrap();
    let s = vt.stats();
    if staged_tiles > 0 && common::gpu().info().backend == wgpu::Backend::Vulkan {
        assert_eq!(s.staging_slots, staged_tiles, "{s:?}");
        assert!(s.uploads_staged > 0, "no tile went through staging: {s:?}");
    }
    if staged_tiles == 0 {
        assert_eq!((s.staging_slots, s.uploads_staged), (0, 0), "{s:?}");
    }
    assert_eq!(
        s.staging_slots_free, s.staging_slots,
        "staging slots still held after settle: {s:?}"
    );
}

#[test]
fn every_level_and_page_border_matches_the_reference_when_resident() {
    let arena = arena();
    let source = Arc::new(ProceduralSource::new(3000, 1700).unwrap());
    // Tiles decoded into staging by the loaders, and tiles through the uploader.
    for staged_tiles in [512, 0] {
        let cfg = VtConfig {
            staged_tiles,
            ..config(1024)
        };
        let mut vt = VirtualTexture::new(common::gpu(), &arena, source.clone(), cfg).unwrap();
        vt.prefetch(&all_tiles(source.as_ref(), 0));
        let frames = vt.settle(200).unwrap();
        let missing: Vec<TileId> = all_tiles(source.as_ref(), 0)
            .into_iter()
            .filter(|&t| !vt.is_resident(t))
            .collect();
        assert!(
            missing.is_empty(),
            "{} tiles not resident after settle ({frames} frames), first {:?}; {}",
            missing.len(),
            missing.first(),
            vt.stats()
        );
        let pts = points(source.as_ref(), 40);
        let got = vt.sample_points(&arena, &pts).unwrap();
        let mut reference = ReferenceSampler::new(source.as_ref());
        for (&(uv, level), g) in pts.iter().zip(&got) {
            let want = reference.sample(uv, level).unwrap();
            let what = format!("staged_tiles {staged_tiles}, uv {uv:?} level {level}");
            assert_near(*g, want, &what);
            // Seamless: the same as filtering the whole level image, borders and all.
            let whole = full_image_sample(&source, uv, level);
            assert_near(*g, whole, &format!("whole image, {what}"));
        }
        assert_eq!(vt.unmapped_samples().unwrap(), 0);
        let s = vt.stats();
        assert_eq!(s.load_errors, 0);
        assert!(s.uploads >= all_tiles(source.as_ref(), 0).len() as u64);
        assert_staging_whole(&vt, staged_tiles);
    }
}

#[test]
fn missing_tiles_fall_back_to_their_nearest_resident_ancestor() {
    let arena = arena();
    let source = Arc::new(ProceduralSource::new(1 << 16, 1 << 15).unwrap());
    let vt = VirtualTexture::new(common::gpu(), &arena, source.clone(), config(64)).unwrap();
    // Only the pinned coarsest levels are resident.
    let layout = source.layout();
    let pinned = vt.stats().pinned_tiles;
    assert!((1..=48).contains(&pinned), "{pinned}");
    let pts = points(source.as_ref(), 20);
    let got = vt.sample_points(&arena, &pts).unwrap();
    let mut reference = ReferenceSampler::new(source.as_ref());
    for (&(uv, level), g) in pts.iter().zip(&got) {
        // The CPU walk the shader does: the wanted page, then its parents.
        let mut t = layout.page_at(level, uv);
        while !vt.is_resident(t) {
            t = layout.page_at(t.level + 1, uv);
        }
        let want = reference.sample(uv, t.level).unwrap();
        assert_near(
            *g,
            want,
            &format!("uv {uv:?} level {level} from level {}", t.level),
        );
    }
    assert_eq!(
        vt.unmapped_samples().unwrap(),
        0,
        "a sample is never unmapped"
    );
}

const FEEDBACK_SHADER: &str = r#"
struct Req { uv: vec2<f32>, ddx: vec2<f32> }
@group(1) @binding(0) var<storage, read> reqs: array<Req>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    if i < arrayLength(&reqs) {
        // One "pixel" per request in a 16-wide grid, feedback factor 1.
        let r = reqs[i];
        vt_feedback(vec2<u32>(i % 16u, i / 16u), r.uv, r.ddx, vec2<f32>(0.0, r.ddx.x));
    }
}
"#;

#[test]
fn feedback_is_compacted_without_duplicates_and_streams_what_was_asked() {
    let gpu = common::gpu();
    let arena = arena();
    let source = Arc::new(ProceduralSource::new(1 << 18, 1 << 18).unwrap());
    let cfg = VtConfig {
        feedback_factor: 1,
        render_size: (16, 16),
        ..config(512)
    };
    let mut vt = VirtualTexture::new(gpu, &arena, source.clone(), cfg).unwrap();
    let layout = source.layout();
    let reference = ReferenceSampler::new(source.as_ref());
    let mut rng = common::rng();
    // 256 requests over a few pages of a few levels: many duplicates.
    let mut expected = HashSet::new();
    let mut data = Vec::new();
    for _ in 0..256 {
        let uv = [rng.gen_range(0.40..0.42f32), rng.gen_range(0.60..0.61f32)];
        let ddx = [(1u32 << rng.gen_range(0..4)) as f32 / (1 << 18) as f32, 0.0];
        let level = reference.level_for(ddx, [0.0, ddx[0]]);
        expected.insert(layout.page_at(level, uv));
        data.extend_from_slice(&[uv[0], uv[1], ddx[0], ddx[1]]);
    }
    let device = gpu.device();
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("feedback test"),
        source: wgpu::ShaderSource::Wgsl(format!("{}\n{FEEDBACK_SHADER}", vt.wgsl(0)).into()),
    });
    let reqs_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: None,
        entries: &[wgpu::BindGroupLayoutEntry {
            binding: 0,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only: true },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        }],
    });
    let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: None,
        bind_group_layouts: &[Some(vt.bind_group_layout()), Some(&reqs_layout)],
        immediate_size: 0,
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: None,
        layout: Some(&pipeline_layout),
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let reqs = arena.alloc((data.len() * 4) as u64, "reqs").unwrap();
    gpu.write_buffer(reqs.buffer(), reqs.offset(), bytemuck::cast_slice(&data));
    let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &reqs_layout,
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: reqs.binding_resource(),
        }],
    });
    vt.begin_frame().unwrap();
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, vt.bind_group(), &[]);
        pass.set_bind_group(1, &group, &[]);
        pass.dispatch_workgroups(4, 1, 1);
    }
    gpu.submit([encoder.finish()]);
    vt.end_frame().unwrap();
    // The list comes back within a few frames.
    for _ in 0..50 {
        gpu.wait_idle().unwrap();
        vt.begin_frame().unwrap();
        if vt.stats().requests > 0 {
            break;
        }
        vt.end_frame().unwrap();
    }
    let s = vt.stats();
    assert_eq!(
        s.requests_last as usize,
        expected.len(),
        "one entry per distinct tile"
    );
    assert_eq!(s.feedback_bytes_last, 4 * (1 + expected.len() as u64));
    vt.settle(200).unwrap();
    for t in &expected {
        assert!(vt.is_resident(*t), "{t} was asked for and is resident");
    }
}

#[test]
fn a_failing_source_is_a_counted_miss_and_the_page_table_stays_whole() {
    let arena = arena();
    let good = ProceduralSource::new(2000, 2000).unwrap();
    let layout = good.layout();
    let bad = Arc::new(FnSource::new(layout, move |t: TileId| {
        match (t.level, t.x % 3) {
            (0, 1) => Err(Error::Tile {
                place: t.to_string(),
                what: "disk read failed".into(),
                hint: "test".into(),
            }),
            (0, 2) => Ok(vec![7u8; 100]), // wrong size
            _ => good.read_tile(t),
        }
    }));
    let mut vt = VirtualTexture::new(common::gpu(), &arena, bad.clone(), config(512)).unwrap();
    let level0 = all_tiles(bad.as_ref(), 0)
        .into_iter()
        .filter(|t| t.level == 0)
        .collect::<Vec<_>>();
    vt.prefetch(&level0);
    let frames = vt.settle(200).unwrap();
    let failing = level0.iter().filter(|t| t.x % 3 != 0).count() as u64;
    assert_eq!(
        vt.stats().load_errors,
        failing,
        "after {frames} frames: {}",
        vt.stats()
    );
    let pts = points(bad.as_ref(), 30);
    let got = vt.sample_points(&arena, &pts).unwrap();
    let mut reference = ReferenceSampler::new(&good);
    for (&(uv, level), g) in pts.iter().zip(&got) {
        let mut t = layout.page_at(level, uv);
        while !vt.is_resident(t) {
            t = layout.page_at(t.level + 1, uv);
        }
        assert!(level > 0 || t.level > 0 || t.x.is_multiple_of(3));
        assert_near(
            *g,
            reference.sample(uv, t.level).unwrap(),
            &format!("{uv:?} {level}"),
        );
    }
    assert_eq!(vt.unmapped_samples().unwrap(), 0);
    // Failed reads gave their staging slots back.
    assert_staging_whole(&vt, config(512).staged_tiles);
}

#[test]
fn pack_files_round_trip_and_damaged_ones_are_typed_errors() {
    let mut rng = common::rng();
    let (w, h) = (700u32, 500u32);
    // Smooth with noise: compressible, not trivially.
    let rgba: Vec<u8> = (0..w * h)
        .flat_map(|i| {
            let (x, y) = (i % w, i / w);
            [(x / 3) as u8, (y / 2) as u8, rng.gen_range(0..16u8), 255]
        })
        .collect();
    let image = ImageSource::from_rgba8(w, h, rgba).unwrap();
    let dir = std::env::temp_dir().join(format!("vramkit-vt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for compression in [Compression::None, Compression::Lz4] {
        let path = dir.join(format!("{compression:?}.vtpack"));
        let size = write_pack(&path, &image, compression).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
        let pack = PackFile::open(&path).unwrap();
        assert_eq!(pack.layout(), image.layout());
        for t in all_tiles(&image, 0) {
            assert_eq!(
                pack.read_tile(t).unwrap(),
                image.read_tile(t).unwrap(),
                "{t}"
            );
        }
        assert!(pack.read_tile(TileId::new(9, 0, 0)).is_err());
        // Truncations and random damage: errors, never a panic or a wrong-sized tile.
        let bytes = std::fs::read(&path).unwrap();
        let broken = dir.join("broken.vtpack");
        for trial in 0..120 {
            let mut b = bytes.clone();
            if trial < 20 {
                b.truncate(rng.gen_range(0..bytes.len()));
            } else {
                for _ in 0..rng.gen_range(1..8) {
                    let at = if trial % 2 == 0 {
                        rng.gen_range(0..64.min(b.len()))
                    } else {
                        rng.gen_range(0..b.len())
                    };
                    b[at] = rng.gen();
                }
            }
            std::fs::write(&broken, &b).unwrap();
            match PackFile::open(&broken) {
                Err(e) => assert!(matches!(e, Error::Tile { .. }), "{e}"),
                Ok(p) => {
                    for t in all_tiles(&p, 0) {
                        if let Ok(tile) = p.read_tile(t) {
                            assert_eq!(tile.len(), TILE_BYTES);
                        }
                    }
                }
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_host_render_pass_on_a_shared_device_settles_on_the_exact_image() {
    // The host app's own device (WebGPU default limits) and render pipeline.
    let (device, queue) = common::host_device(wgpu::Limits::default());
    let gpu = vramkit::Gpu::from_wgpu(device, queue);
    let arena = Arena::new(&gpu, Default::default()).unwrap();
    let source = Arc::new(ProceduralSource::new(1 << 20, 1 << 20).unwrap());
    let size = (256, 192);
    let cfg = VtConfig {
        cache_slots: 256,
        render_size: size,
        feedback_factor: 8,
        loader_threads: 2,
        ..Default::default()
    };
    let mut vt = VirtualTexture::new(&gpu, &arena, source.clone(), cfg).unwrap();
    let demo = vt_demo::Demo::new(&gpu, &arena, &vt, size).unwrap();
    // Level 0 at 1.5 texels per pixel, deep inside the texture.
    let scale = 1.5 / (1u32 << 20) as f32;
    let origin = [0.37, 0.61];
    for _ in 0..40 {
        demo.frame(&gpu, &mut vt, origin, scale).unwrap();
        gpu.wait_idle().unwrap();
        vt.settle(4).unwrap();
    }
    demo.frame(&gpu, &mut vt, origin, scale).unwrap();
    gpu.wait_idle().unwrap();
    let pixels = demo.read(&gpu).unwrap();
    let exact = vt_demo::exact_pixels(&pixels, size, origin, scale, &source, TOL);
    let total = (size.0 * size.1) as usize;
    assert!(
        exact * 100 >= total * 99,
        "{exact} of {total} pixels exact; {}",
        vt.stats()
    );
    assert_eq!(vt.unmapped_samples().unwrap(), 0);
    let s = vt.stats();
    assert!(s.requests > 0 && s.uploads > s.pinned_tiles as u64, "{s}");
}

#[test]
fn tiles_of_other_formats_sample_like_the_reference() {
    use wgpu::TextureFormat as F;
    let arena = arena();
    let rgba = ProceduralSource::new(900, 700).unwrap();
    let layout = rgba.layout();
    for format in [F::R8Unorm, F::Rg8Unorm, F::Rgba16Float, F::Rg16Float] {
        let texel = vramkit::vt::texel_bytes(format).unwrap();
        // Each texel derived from the RGBA8 procedural one: unorm channels kept, float
        // channels as value / 255 in f16.
        let source = Arc::new(
            FnSource::new(layout, move |t: TileId| {
                let tile = rgba.read_tile(t)?;
                Ok(tile
                    .chunks_exact(4)
                    .flat_map(|p| -> Vec<u8> {
                        match format {
                            F::R8Unorm => vec![p[0]],
                            F::Rg8Unorm => vec![p[0], p[1]],
                            _ => p[..texel / 2]
                                .iter()
                                .flat_map(|&c| {
                                    half::f16::from_f32(f32::from(c) / 255.0).to_le_bytes()
                                })
                                .collect(),
                        }
                    })
                    .collect())
            })
            .with_format(format),
        );
        let mut vt =
            VirtualTexture::new(common::gpu(), &arena, source.clone(), config(256)).unwrap();
        vt.prefetch(&all_tiles(source.as_ref(), 0));
        vt.settle(100).unwrap();
        let pts = points(source.as_ref(), 20);
        let got = vt.sample_points(&arena, &pts).unwrap();
        let mut reference = ReferenceSampler::new(source.as_ref());
        for (&(uv, level), g) in pts.iter().zip(&got) {
            let want = reference.sample(uv, level).unwrap();
            assert_near(*g, want, &format!("{format:?} uv {uv:?} level {level}"));
        }
        assert_eq!(vt.stats().load_errors, 0, "{format:?}");
        // Pack files keep the format.
        let path =
            std::env::temp_dir().join(format!("vramkit-{}-{format:?}.vtpack", std::process::id()));
        write_pack(&path, source.as_ref(), Compression::Lz4).unwrap();
        let pack = PackFile::open(&path).unwrap();
        assert_eq!(pack.format(), format);
        let t = TileId::new(0, 1, 1);
        assert_eq!(pack.read_tile(t).unwrap(), source.read_tile(t).unwrap());
        std::fs::remove_file(&path).ok();
    }
    // A source of a format tiles cannot have is refused up front.
    let bad = Arc::new(FnSource::new(layout, |_| Ok(Vec::new())).with_format(F::Depth32Float));
    assert!(VirtualTexture::new(common::gpu(), &arena, bad, config(64)).is_err());
}

#[test]
fn srgb_tiles_are_decoded_to_linear_like_the_reference() {
    let arena = arena();
    let plain = Arc::new(ProceduralSource::new(700, 500).unwrap());
    let layout = plain.layout();
    // The same bytes declared sRGB: the reference decodes them to linear.
    let p2 = plain.clone();
    let srgb = Arc::new(
        FnSource::new(layout, move |t: TileId| p2.read_tile(t))
            .with_format(wgpu::TextureFormat::Rgba8UnormSrgb),
    );
    let mut reference = ReferenceSampler::new(srgb.as_ref());
    // An sRGB source, and an RGBA8 source sampled through an sRGB cache.
    let cases: [(Arc<dyn TileSource>, Option<wgpu::TextureFormat>); 2] = [
        (srgb.clone(), None),
        (plain.clone(), Some(wgpu::TextureFormat::Rgba8UnormSrgb)),
    ];
    for (source, format) in cases {
        let cfg = VtConfig {
            format,
            ..config(256)
        };
        let mut vt = VirtualTexture::new(common::gpu(), &arena, source.clone(), cfg).unwrap();
        vt.prefetch(&all_tiles(source.as_ref(), 0));
        vt.settle(100).unwrap();
        let pts = points(source.as_ref(), 20);
        let got = vt.sample_points(&arena, &pts).unwrap();
        for (&(uv, level), g) in pts.iter().zip(&got) {
            let want = reference.sample(uv, level).unwrap();
            assert_near(*g, want, &format!("{format:?} uv {uv:?} level {level}"));
        }
    }
    // sRGB is a view of RGBA8 tiles only.
    let r8 = Arc::new(
        FnSource::new(layout, |_| Ok(vec![0u8; 128 * 128]))
            .with_format(wgpu::TextureFormat::R8Unorm),
    );
    let cfg = VtConfig {
        format: Some(wgpu::TextureFormat::Rgba8UnormSrgb),
        ..config(64)
    };
    assert!(VirtualTexture::new(common::gpu(), &arena, r8, cfg).is_err());
}

#[test]
fn prefetched_tiles_survive_feedback_lists_that_do_not_ask_for_them() {
    let gpu = common::gpu();
    let arena = arena();
    let source = Arc::new(ProceduralSource::new(1 << 16, 1 << 16).unwrap());
    let mut vt = VirtualTexture::new(gpu, &arena, source, config(1024)).unwrap();
    // More than the loader takes at once (4 x 64): the rest waits in the wanted queue.
    let wanted: Vec<TileId> = (0..400).map(|i| TileId::new(0, 100 + i, 200)).collect();
    vt.prefetch(&wanted);
    // Frames whose feedback is empty (nothing samples): each list that comes back must
    // not drop the prefetch.
    for _ in 0..100 {
        vt.end_frame().unwrap();
        gpu.wait_idle().unwrap();
        vt.begin_frame().unwrap();
        if wanted.iter().all(|t| vt.is_resident(*t)) {
            break;
        }
    }
    let missing = wanted.iter().filter(|t| !vt.is_resident(**t)).count();
    assert_eq!(missing, 0, "{}", vt.stats());
    assert!(vt.stats().requests == 0, "the feedback lists were empty");
}

/// Issue 61, recovery: a virtual texture whose device was lost is rebuilt on the
/// recovered runtime's device, the tiles it had read again from the source, and every
/// level and page border matches the CPU reference again.
#[test]
fn a_virtual_texture_comes_back_on_a_recovered_device() {
    common::gpu();
    let gpu = vramkit::Gpu::headless().unwrap();
    let mut rt = vramkit::Runtime::new(&gpu, Default::default()).unwrap();
    let source = Arc::new(ProceduralSource::new(1500, 900).unwrap());
    let tiles = all_tiles(source.as_ref(), 0);
    let mut vt = VirtualTexture::new(rt.gpu(), rt.arena(), source.clone(), config(512)).unwrap();
    vt.prefetch(&tiles);
    vt.settle(200).unwrap();
    assert!(tiles.iter().all(|&t| vt.is_resident(t)));
    gpu.device().destroy();
    let lost = vt
        .settle(2)
        .and_then(|_| vt.sample_points(rt.arena(), &[([0.5, 0.5], 0)]));
    assert!(matches!(lost, Err(Error::DeviceLost { .. })), "{lost:?}");
    rt.recover().unwrap();
    vt.recover(rt.gpu(), rt.arena()).unwrap();
    let frames = vt.settle(200).unwrap();
    let missing = tiles.iter().filter(|&&t| !vt.is_resident(t)).count();
    assert_eq!(missing, 0, "after {frames} frames: {}", vt.stats());
    let pts = points(source.as_ref(), 20);
    let got = vt.sample_points(rt.arena(), &pts).unwrap();
    let mut reference = ReferenceSampler::new(source.as_ref());
    for (&(uv, level), g) in pts.iter().zip(&got) {
        assert_near(
            *g,
            reference.sample(uv, level).unwrap(),
            &format!("uv {uv:?} level {level}"),
        );
    }
    assert_eq!(vt.unmapped_samples().unwrap(), 0);
}
