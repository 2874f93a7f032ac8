//! Mip streaming on a real adapter: 200 textures whose full chains total 3x the budget, a
//! camera moving through them; every frame within the budget and the upload cap; once the
//! camera rests every texture reaches the level it wants as far as the budget allows, and
//! every resident level reads back exactly as its source; halving the budget mid-run
//! shrinks textures, with no out-of-memory error.

use std::sync::Arc;

use rand::{Rng, SeedableRng};
use vramkit::mips::{wanted_level, MemoryMips, MipConfig, MipId, MipStreamer};

use crate::common;

/// How long a test waits for the loader threads to read what an update started.
const LOADS: std::time::Duration = std::time::Duration::from_secs(30);

/// A texture's random levels (each level its own random bytes: what matters is that each
/// resident level holds its source's bytes).
fn random_mips(rng: &mut impl Rng, size: (u32, u32)) -> MemoryMips {
    let levels = 32 - size.0.max(size.1).leading_zeros();
    let data = (0..levels)
        .map(|l| {
            let (w, h) = ((size.0 >> l).max(1), (size.1 >> l).max(1));
            (0..w * h * 4).map(|_| rng.gen()).collect()
        })
        .collect();
    MemoryMips::new(wgpu::TextureFormat::Rgba8Unorm, size, data).unwrap()
}

/// Registers `sources` as `t0`, `t1`, ...
fn register(streamer: &mut MipStreamer, sources: &[Arc<MemoryMips>]) -> Vec<MipId> {
    sources
        .iter()
        .enumerate()
        .map(|(i, s)| streamer.add(s.clone(), &format!("t{i}")).unwrap())
        .collect()
}

/// Every level `shown` holds, read back, is its source's level of the same chain index.
fn assert_levels_are_the_source(
    gpu: &vramkit::Gpu,
    shown: &vramkit::mips::StreamedTexture,
    source: &dyn vramkit::mips::MipSource,
    what: &str,
) {
    for l in 0..shown.texture.mip_level_count() {
        let got = vramkit::readback::read_texture_level(gpu, &shown.texture, l).unwrap();
        let want = source.read_level(shown.resident + l).unwrap();
        assert!(got == want, "{what}: level {} differs", shown.resident + l);
    }
}

#[test]
fn two_hundred_textures_at_three_times_the_budget_stay_within_it_and_settle_exactly() {
    let gpu = common::gpu();
    let mut rng = common::rng();
    let mut sources = Vec::new();
    for _ in 0..200 {
        let size = (rng.gen_range(8..=128), rng.gen_range(8..=128));
        sources.push((Arc::new(random_mips(&mut rng, size)), size));
    }
    let full: u64 = sources
        .iter()
        .map(|(_, (w, h))| {
            let levels = 32 - w.max(h).leading_zeros();
            (0..levels)
                .map(|l| u64::from((w >> l).max(1) * (h >> l).max(1) * 4))
                .sum::<u64>()
        })
        .sum();
    let budget = full / 3;
    let cap = (full / 40).max(128 * 128 * 4);
    let mut streamer = MipStreamer::new(
        gpu,
        MipConfig {
            budget,
            upload_cap: cap,
            // Frames are counted below: the CPU's speed must not change how many.
            update_time_target: None,
            ..Default::default()
        },
    )
    .unwrap();
    let ids: Vec<(MipId, (u32, u32))> = sources
        .iter()
        .enumerate()
        .map(|(i, (s, size))| (streamer.add(s.clone(), &format!("t{i}")).unwrap(), *size))
        .collect();
    // Textures on a 20 x 10 grid; the camera flies along it, nearer ones drawn larger
    // (importance: the screen area a texture covers).
    let place = |i: usize| ((i % 20) as f32, (i / 20) as f32);
    let view = |streamer: &mut MipStreamer, cam: (f32, f32)| {
        for (i, (id, size)) in ids.iter().enumerate() {
            let (x, y) = place(i);
            let d = ((x - cam.0).powi(2) + (y - cam.1).powi(2)).sqrt();
            let pixels = 256.0 / (1.0 + d);
            streamer
                .set_wanted(*id, wanted_level(*size, pixels), pixels * pixels)
                .unwrap();
        }
    };
    let mut frames = 0;
    for f in 0..60 {
        let t = f as f32 / 60.0;
        view(&mut streamer, (20.0 * t, 5.0 + 4.0 * (6.0 * t).sin()));
        // Frames slower than the loaders, as below: how far the flight gets must not
        // depend on how fast this machine's loaders are, since the frames to settle
        // at rest are counted from where it ends.
        streamer.wait_for_loads(LOADS).unwrap();
        let uploaded = streamer.update().unwrap();
        frames += 1;
        let s = streamer.stats();
        assert!(
            s.resident_bytes <= budget,
            "frame {f}: {} > {budget}",
            s.resident_bytes
        );
        assert!(
            uploaded <= cap,
            "frame {f}: uploaded {uploaded} > cap {cap}"
        );
        if f == 40 {
            // A neighbour took memory: half the budget from now on.
            streamer.set_budget(budget / 2).unwrap();
        }
        if f > 40 {
            assert!(
                s.resident_bytes <= budget / 2,
                "frame {f}: {}",
                s.resident_bytes
            );
        }
    }
    streamer.set_budget(budget).unwrap();
    // The camera rests: settled within the frames the cap (or the growths per frame)
    // needs, plus three.
    let rest = (10.0, 5.0);
    view(&mut streamer, rest);
    let mut rest_frames = 0;
    while !streamer.settled() {
        // Frames slower than the loaders: each update lands what the last one started.
        streamer.wait_for_loads(LOADS).unwrap();
        streamer.update().unwrap();
        rest_frames += 1;
        assert!(
            // Frames the cap needs, and those the growths per frame need (every texture
            // may grow).
            rest_frames <= budget / cap + 200 / MipConfig::default().growths_per_frame as u64 + 3,
            "not settled after {rest_frames} frames"
        );
    }
    let s = streamer.stats();
    assert_eq!(s.ooms, 0);
    assert_eq!(s.uploads_over_cap, 0);
    assert!(s.resident_bytes <= budget);
    assert!(
        s.full_bytes >= 3 * budget - 3,
        "{} vs {budget}",
        s.full_bytes
    );
    eprintln!(
        "{frames} frames moving, {rest_frames} to settle; {} of {} bytes resident (budget {budget}), {} swaps, {} short",
        s.resident_bytes, s.full_bytes, s.swaps, s.short
    );
    // The nearest textures hold what they want (the budget gives the most important
    // first); every resident level of a random third of them reads back exactly.
    for (i, (id, size)) in ids.iter().enumerate() {
        let (x, y) = place(i);
        let d = ((x - rest.0).powi(2) + (y - rest.1).powi(2)).sqrt();
        let shown = streamer.texture(*id).unwrap();
        if d <= 1.0 {
            assert_eq!(
                shown.resident,
                wanted_level(*size, 256.0 / (1.0 + d)),
                "t{i}"
            );
        }
        if rng.gen_range(0..3) == 0 || d <= 1.0 {
            assert_levels_are_the_source(gpu, &shown, sources[i].0.as_ref(), &format!("t{i}"));
        }
    }
}

#[test]
fn a_time_target_too_small_for_any_copy_lands_one_growth_per_update_and_still_settles() {
    let gpu = common::gpu();
    let mut rng = common::rng();
    let n = 24;
    let sources: Vec<Arc<MemoryMips>> = (0..n)
        .map(|_| {
            let size = (rng.gen_range(16..=64), rng.gen_range(16..=64));
            Arc::new(random_mips(&mut rng, size))
        })
        .collect();
    let mut streamer = MipStreamer::new(
        gpu,
        MipConfig {
            budget: 1 << 30,
            upload_cap: 1 << 30,
            update_time_target: Some(std::time::Duration::ZERO),
            ..Default::default()
        },
    )
    .unwrap();
    let ids = register(&mut streamer, &sources);
    for id in &ids {
        streamer.set_wanted(*id, 0, 1.0).unwrap();
    }
    let mut updates = 0;
    while !streamer.settled() {
        // Every growth loaded before the update: only the time target holds them back.
        streamer.wait_for_loads(LOADS).unwrap();
        let before = streamer.stats().swaps;
        streamer.update().unwrap();
        let landed = streamer.stats().swaps - before;
        assert!(landed <= 1, "update {updates} landed {landed} growths");
        updates += 1;
        assert!(updates <= 2 * n, "not settled after {updates} updates");
    }
    // Each texture grew in one swap, at least one per update.
    assert_eq!(streamer.stats().swaps, n as u64);
    for (id, source) in ids.iter().zip(&sources) {
        let shown = streamer.texture(*id).unwrap();
        assert_eq!(shown.resident, 0);
        assert_levels_are_the_source(gpu, &shown, source.as_ref(), "the texture");
    }
}

/// A frame loop's update makes at most three shrinks the budget does not need at once:
/// the loaders prepare the rest (a texture and copies, no levels to read), which land in
/// the next updates holding exactly their sources' levels, and the growths that need
/// their room wait for them.
#[test]
fn shrinks_past_three_a_frame_are_prepared_by_the_loaders_and_land_exactly() {
    let gpu = common::gpu();
    let mut rng = common::rng();
    let n = 12;
    // Twelve textures that will give levels back (a) and twelve of the same sizes that
    // will want them (b), so that a fits whole beside b's coarsest levels.
    let mut sizes: Vec<(u32, u32)> = (0..n)
        .map(|_| (rng.gen_range(32..=64), rng.gen_range(32..=64)))
        .collect();
    sizes.extend_from_within(..);
    let sources: Vec<Arc<MemoryMips>> = sizes
        .iter()
        .map(|&size| Arc::new(random_mips(&mut rng, size)))
        .collect();
    let chain_from = |(w, h): (u32, u32), from: u32| -> u64 {
        (from..32 - w.max(h).leading_zeros())
            .map(|l| u64::from((w >> l).max(1) * (h >> l).max(1) * 4))
            .sum()
    };
    // Room for a at level 3 and b whole: b grows only as a shrinks.
    let budget: u64 = sizes[..n].iter().map(|&s| chain_from(s, 3)).sum::<u64>()
        + sizes[n..].iter().map(|&s| chain_from(s, 0)).sum::<u64>();
    let mut streamer = MipStreamer::new(
        gpu,
        MipConfig {
            budget,
            upload_cap: 1 << 30,
            update_time_target: None,
            loader_threads: 2,
            ..Default::default()
        },
    )
    .unwrap();
    let ids = register(&mut streamer, &sources);
    // A frame loop's updates: a frame apart (the gate tells them from back-to-back ones).
    let frame = |streamer: &mut MipStreamer| {
        streamer.wait_for_loads(LOADS).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(5));
        streamer.update().unwrap();
    };
    let coarsest = |&(w, h): &(u32, u32)| 31 - w.max(h).leading_zeros();
    let want = |streamer: &mut MipStreamer, a: u32, b_sharp: bool| {
        for (k, id) in ids.iter().enumerate() {
            let (level, importance) = match (k < n, b_sharp) {
                (true, _) => (a, 1.0),
                (false, true) => (0, 10.0),
                (false, false) => (coarsest(&sizes[k]), 1.0),
            };
            streamer.set_wanted(*id, level, importance).unwrap();
        }
    };
    want(&mut streamer, 0, false);
    let mut frames = 0;
    while !streamer.settled() {
        frame(&mut streamer);
        frames += 1;
        assert!(frames <= 10, "a not sharp after {frames} frames");
    }
    for id in &ids[..n] {
        assert_eq!(streamer.texture(*id).unwrap().resident, 0);
    }
    // Now b wants everything and a gives way: twelve shrinks, none of them needed for
    // the budget, which holds.
    want(&mut streamer, 3, true);
    frame(&mut streamer);
    let s = streamer.stats();
    assert_eq!(s.last_update.shrinks, 3, "{:?}", s.last_update);
    assert!(
        s.loading >= n - 3,
        "{} swaps prepared by the loaders",
        s.loading
    );
    assert!(s.resident_bytes <= budget);
    let mut frames = 0;
    while !streamer.settled() {
        frame(&mut streamer);
        frames += 1;
        let s = streamer.stats();
        assert!(
            s.resident_bytes <= budget,
            "{} > {budget}",
            s.resident_bytes
        );
        assert!(frames <= 8, "not settled: {s:?}");
    }
    assert_eq!(streamer.stats().ooms, 0);
    for (k, (id, source)) in ids.iter().zip(&sources).enumerate() {
        let shown = streamer.texture(*id).unwrap();
        assert_eq!(shown.resident, if k < n { 3 } else { 0 }, "t{k}");
        assert_levels_are_the_source(gpu, &shown, source.as_ref(), &format!("t{k}"));
    }
}

#[test]
fn bad_sources_and_budgets_are_errors_that_change_nothing() {
    let gpu = common::gpu();
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let mut streamer = MipStreamer::new(
        gpu,
        MipConfig {
            budget: 1 << 20,
            upload_cap: 64 << 10,
            ..Default::default()
        },
    )
    .unwrap();
    // A level larger than the cap.
    let big = Arc::new(random_mips(&mut rng, (256, 256)));
    let e = streamer.add(big, "big").unwrap_err();
    assert!(e.to_string().contains("upload cap"), "{e}");
    // A level of the wrong length.
    let e =
        MemoryMips::new(wgpu::TextureFormat::Rgba8Unorm, (4, 4), vec![vec![0; 10]]).unwrap_err();
    assert!(e.to_string().contains("64 bytes"), "{e}");
    let id = streamer
        .add(Arc::new(random_mips(&mut rng, (64, 64))), "small")
        .unwrap();
    // A budget below the coarsest levels is refused; the streamer still works.
    assert!(streamer.set_budget(1).is_err());
    streamer.set_wanted(id, 0, 1.0).unwrap();
    while !streamer.settled() {
        streamer.wait_for_loads(LOADS).unwrap();
        streamer.update().unwrap();
    }
    assert_eq!(streamer.texture(id).unwrap().resident, 0);
    streamer.remove(id).unwrap();
    assert!(streamer.texture(id).is_err());
    assert_eq!(streamer.stats().resident_bytes, 0);
}

const SAMPLE_WGSL: &str = r#"
@group(0) @binding(0) var t: texture_2d<f32>;
@group(0) @binding(1) var s: sampler;
struct VOut { @builtin(position) pos: vec4f, @location(0) uv: vec2f };
@vertex fn vs(@builtin(vertex_index) i: u32) -> VOut {
    let p = vec2f(f32((i << 1u) & 2u), f32(i & 2u));
    var o: VOut;
    o.pos = vec4f(p * 2.0 - 1.0, 0.0, 1.0);
    o.uv = vec2f(p.x, 1.0 - p.y);
    return o;
}
@fragment fn fs(v: VOut) -> @location(0) vec4f {
    // The hardware's own level selection: nothing tells it the chain starts elsewhere.
    return textureSample(t, s, v.uv);
}
"#;

/// Draws `texture` over a target of `size` with ordinary sampling (nearest texels and
/// levels, the level picked by the hardware from the derivatives) and reads it back.
fn draw(gpu: &vramkit::Gpu, texture: &wgpu::Texture, size: (u32, u32)) -> Vec<u8> {
    let device = gpu.device();
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("mip sample"),
        source: wgpu::ShaderSource::Wgsl(SAMPLE_WGSL.into()),
    });
    let pipeline = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
        label: Some("mip sample"),
        layout: None,
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
            targets: &[Some(wgpu::TextureFormat::Rgba8Unorm.into())],
        }),
        primitive: Default::default(),
        depth_stencil: None,
        multisample: Default::default(),
        multiview_mask: None,
        cache: None,
    });
    let sampler = device.create_sampler(&wgpu::SamplerDescriptor::default());
    let view = texture.create_view(&Default::default());
    let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: wgpu::BindingResource::TextureView(&view),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: wgpu::BindingResource::Sampler(&sampler),
            },
        ],
    });
    let target = device.create_texture(&wgpu::TextureDescriptor {
        label: Some("mip sample target"),
        size: wgpu::Extent3d {
            width: size.0,
            height: size.1,
            depth_or_array_layers: 1,
        },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: wgpu::TextureFormat::Rgba8Unorm,
        usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
        view_formats: &[],
    });
    let target_view = target.create_view(&Default::default());
    let mut e = device.create_command_encoder(&Default::default());
    {
        let mut pass = e.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: None,
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
        pass.set_bind_group(0, &group, &[]);
        pass.draw(0..3, 0..1);
    }
    gpu.submit([e.finish()]);
    vramkit::readback::read_texture_level(gpu, &target, 0).unwrap()
}

#[test]
fn a_streamed_texture_samples_as_its_full_chain_would_with_no_change_to_the_shader() {
    let gpu = common::gpu();
    let mut rng = common::rng();
    // Power-of-two sides: each level exactly half the one above, so the level the
    // hardware picks for a target of level L's size is L on any adapter.
    let size = (1 << rng.gen_range(5..8), 1 << rng.gen_range(5..8));
    let source = Arc::new(random_mips(&mut rng, size));
    let levels = vramkit::mips::MipSource::level_count(source.as_ref());
    let mut streamer = MipStreamer::new(gpu, MipConfig::default()).unwrap();
    let id = streamer.add(source.clone(), "sampled").unwrap();
    let resident = rng.gen_range(0..levels - 1);
    streamer.set_wanted(id, resident, 1.0).unwrap();
    while !streamer.settled() {
        streamer.wait_for_loads(LOADS).unwrap();
        streamer.update().unwrap();
    }
    let shown = streamer.texture(id).unwrap();
    assert_eq!(shown.resident, resident);
    // Every full-chain level the texture holds, drawn at that level's size.
    for level in resident..levels {
        let (w, h) = ((size.0 >> level).max(1), (size.1 >> level).max(1));
        let got = draw(gpu, &shown.texture, (w, h));
        let want = vramkit::mips::MipSource::read_level(source.as_ref(), level).unwrap();
        let off = got
            .chunks(4)
            .zip(want.chunks(4))
            .filter(|(a, b)| a != b)
            .count();
        assert_eq!(
            off, 0,
            "level {level} ({w}x{h}) of a {size:?} texture holding from {resident}"
        );
    }
}

#[test]
fn a_block_compressed_texture_streams_down_to_levels_smaller_than_a_block_exactly() {
    let gpu = common::gpu();
    if !gpu
        .features()
        .contains(wgpu::Features::TEXTURE_COMPRESSION_BC)
    {
        eprintln!("skipped: this adapter has no BC textures");
        return;
    }
    if gpu.info().backend == wgpu::Backend::Gl {
        // wgpu's GL backend reads a compressed texture back through a framebuffer, which
        // cannot hold one: every byte comes back 0 (seen on llvmpipe's OpenGL). The
        // streaming itself is checked on the other backends.
        eprintln!("skipped: wgpu's GL backend cannot read compressed textures back");
        return;
    }
    let mut rng = common::rng();
    // BC1: 8 bytes per 4x4 block; any bytes are valid blocks. Levels down to 1x1 (one
    // block each below 4x4).
    let side = 1u32 << rng.gen_range(4..8);
    let levels = 32 - side.leading_zeros();
    let data: Vec<Vec<u8>> = (0..levels)
        .map(|l| {
            let blocks = (side >> l).max(1).div_ceil(4).pow(2);
            (0..blocks * 8).map(|_| rng.gen()).collect()
        })
        .collect();
    let source = Arc::new(
        MemoryMips::new(
            wgpu::TextureFormat::Bc1RgbaUnorm,
            (side, side),
            data.clone(),
        )
        .unwrap(),
    );
    let mut streamer = MipStreamer::new(gpu, MipConfig::default()).unwrap();
    let id = streamer.add(source, "bc1").unwrap();
    // Coarsest first (the last level whose size is whole blocks: 4x4), then all of it,
    // then back to a middle level: a budget of exactly its levels from there (with room to
    // spare, a texture keeps the levels it holds).
    assert_eq!(streamer.texture(id).unwrap().resident, levels - 3);
    for wanted in [0, rng.gen_range(1..levels - 3)] {
        let bytes: usize = data[wanted as usize..].iter().map(Vec::len).sum();
        streamer.set_budget(bytes as u64).unwrap();
        streamer.set_wanted(id, wanted, 1.0).unwrap();
        while !streamer.settled() {
            streamer.wait_for_loads(LOADS).unwrap();
            streamer.update().unwrap();
        }
        let shown = streamer.texture(id).unwrap();
        assert_eq!(shown.resident, wanted);
        for l in 0..shown.texture.mip_level_count() {
            let got = vramkit::readback::read_texture_level(gpu, &shown.texture, l).unwrap();
            let want = &data[(wanted + l) as usize];
            assert!(
                got == *want,
                "level {} of {side}x{side}: got {:?}, want {:?}",
                wanted + l,
                &got[..16.min(got.len())],
                &want[..16.min(want.len())]
            );
        }
    }
}

#[test]
fn the_gpus_feedback_sets_each_textures_wanted_level_from_what_it_sampled() {
    use vramkit::mips::MipFeedback;
    let gpu = common::gpu();
    let mut rng = common::rng();
    let mut streamer = MipStreamer::new(gpu, MipConfig::default()).unwrap();
    let ids: Vec<MipId> = (0..4)
        .map(|i| {
            streamer
                .add(
                    Arc::new(random_mips(&mut rng, (256, 256))),
                    &format!("f{i}"),
                )
                .unwrap()
        })
        .collect();
    let mut feedback = MipFeedback::new(gpu, 8).unwrap();
    // Texture i drawn over a square target of 256 >> k texels: 2^k texels a pixel, level k;
    // the last one not drawn at all.
    let ks: Vec<u32> = (0..3).map(|_| rng.gen_range(0..6)).collect();
    let wgsl = format!(
        "{}\n{}",
        feedback.wgsl(0),
        r#"
struct VOut { @builtin(position) pos: vec4f, @location(0) uv: vec2f, @location(1) @interpolate(flat) id: u32 };
@vertex fn vs(@builtin(vertex_index) i: u32, @builtin(instance_index) id: u32) -> VOut {
    let p = vec2f(f32((i << 1u) & 2u), f32(i & 2u));
    var o: VOut;
    o.pos = vec4f(p * 2.0 - 1.0, 0.0, 1.0);
    o.uv = vec2f(p.x, 1.0 - p.y);
    o.id = id;
    return o;
}
@fragment fn fs(v: VOut) -> @location(0) vec4f {
    mip_feedback_write(v.id, v.uv, vec2f(256.0, 256.0));
    return vec4f(v.uv, 0.0, 1.0);
}
"#
    );
    let device = gpu.device();
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("mip feedback test"),
        source: wgpu::ShaderSource::Wgsl(wgsl.into()),
    });
    let layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: None,
        bind_group_layouts: &[Some(feedback.bind_group_layout())],
        immediate_size: 0,
    });
    let pipeline = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
        label: Some("mip feedback test"),
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
            targets: &[Some(wgpu::TextureFormat::Rgba8Unorm.into())],
        }),
        primitive: Default::default(),
        depth_stencil: None,
        multisample: Default::default(),
        multiview_mask: None,
        cache: None,
    });
    feedback.begin_frame();
    let mut e = device.create_command_encoder(&Default::default());
    let mut targets = Vec::new();
    for (i, k) in ks.iter().enumerate() {
        let side = 256 >> k;
        let target = device.create_texture(&wgpu::TextureDescriptor {
            label: None,
            size: wgpu::Extent3d {
                width: side,
                height: side,
                depth_or_array_layers: 1,
            },
            mip_level_count: 1,
            sample_count: 1,
            dimension: wgpu::TextureDimension::D2,
            format: wgpu::TextureFormat::Rgba8Unorm,
            usage: wgpu::TextureUsages::RENDER_ATTACHMENT,
            view_formats: &[],
        });
        let view = target.create_view(&Default::default());
        {
            let mut pass = e.begin_render_pass(&wgpu::RenderPassDescriptor {
                label: None,
                color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                    view: &view,
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
            pass.set_bind_group(0, feedback.bind_group(), &[]);
            let id = ids[i].index();
            pass.draw(0..3, id..id + 1);
        }
        targets.push(target);
    }
    gpu.submit([e.finish()]);
    feedback.end_frame();
    let mut tries = 0;
    while !feedback.apply(&mut streamer).unwrap() {
        tries += 1;
        assert!(tries < 5000, "the feedback never arrived");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let stats = streamer.texture_stats();
    for (i, k) in ks.iter().enumerate() {
        assert_eq!(
            stats[i].1.wanted, *k,
            "texture {i} drawn at 2^{k} texels a pixel"
        );
    }
    assert_eq!(
        stats[3].1.wanted,
        stats[3].1.levels - 1,
        "not drawn: its coarsest"
    );
    while !streamer.settled() {
        streamer.wait_for_loads(LOADS).unwrap();
        streamer.update().unwrap();
    }
    for (i, k) in ks.iter().enumerate() {
        assert_eq!(streamer.texture(ids[i]).unwrap().resident, *k);
    }
}
