//! The device ledger on a real adapter: a scene of known resources counted exactly (every
//! mip, layer, sample, compressed and depth format), a drop that removes exactly its
//! bytes, vramkit's arena and staging on lines of their own, wgpu's allocator report
//! sorted (lavapipe's Vulkan has one), and the growth watch naming a forgotten texture
//! loop within five frames. Each test opens its own device: the ledger is per device and
//! the shared one is busy with other tests.

use rand::Rng;
use vramkit::arena::BlockMemory;
use vramkit::ledger::{MemoryKind, Part, GROWTH_FRAMES};
use vramkit::{Arena, ArenaConfig, Gpu};

use crate::common;

fn own_gpu() -> Gpu {
    common::gpu();
    Gpu::headless().expect("a second device on the test adapter")
}

fn texture(
    label: &str,
    (width, height, layers): (u32, u32, u32),
    mips: u32,
    samples: u32,
    dimension: wgpu::TextureDimension,
    format: wgpu::TextureFormat,
) -> wgpu::TextureDescriptor<'_> {
    let mut usage = wgpu::TextureUsages::TEXTURE_BINDING;
    if samples > 1 || format.is_depth_stencil_format() {
        usage = wgpu::TextureUsages::RENDER_ATTACHMENT;
    } else {
        usage |= wgpu::TextureUsages::COPY_DST;
    }
    wgpu::TextureDescriptor {
        label: Some(label),
        size: wgpu::Extent3d {
            width,
            height,
            depth_or_array_layers: layers,
        },
        mip_level_count: mips,
        sample_count: samples,
        dimension,
        format,
        usage,
        view_formats: &[],
    }
}

#[test]
fn a_scene_of_known_resources_is_counted_exactly_and_a_drop_removes_exactly_its_bytes() {
    use wgpu::TextureDimension::{D2, D3};
    use wgpu::TextureFormat as F;
    let gpu = own_gpu();
    let ledger = gpu.ledger();
    let scene = ledger.owner("scene");
    // Bytes worked out by hand, level by level.
    let mut cases = vec![
        // 256x256 RGBA8, 9 levels: 4 * (65536 + 16384 + ... + 1).
        (
            texture("t-mips", (256, 256, 1), 9, 1, D2, F::Rgba8Unorm),
            349_524u64,
        ),
        // 128x128 RGBA8, 4 samples.
        (
            texture("t-msaa", (128, 128, 1), 1, 4, D2, F::Rgba8Unorm),
            262_144,
        ),
        // 64x64 RGBA16F, 6 layers, 2 levels: (4096 + 1024) * 8 * 6.
        (
            texture("t-array", (64, 64, 6), 2, 1, D2, F::Rgba16Float),
            245_760,
        ),
        // 32^3 R16F, 2 levels: 32768 * 2 + 16^3 * 2.
        (texture("t-3d", (32, 32, 32), 2, 1, D3, F::R16Float), 73_728),
        // 640x480 depth 24 + stencil 8: 4 bytes a texel.
        (
            texture("t-depth", (640, 480, 1), 1, 1, D2, F::Depth24PlusStencil8),
            1_228_800,
        ),
        // 128x64 depth 32F, 4 samples.
        (
            texture("t-depth-msaa", (128, 64, 1), 1, 4, D2, F::Depth32Float),
            131_072,
        ),
    ];
    if gpu
        .features()
        .contains(wgpu::Features::TEXTURE_COMPRESSION_BC)
    {
        // BC1 (8 bytes per 4x4 block) 100x60, 3 levels: 25x15 + 13x8 + 7x4 blocks.
        cases.push((
            texture("t-bc1", (100, 60, 1), 3, 1, D2, F::Bc1RgbaUnorm),
            4_056,
        ));
    }
    let mut textures = Vec::new();
    for (desc, expected) in &cases {
        let t = scene.create_texture(desc).expect("a texture of the scene");
        assert_eq!(t.bytes(), *expected, "{:?}", desc.label);
        textures.push(t);
    }
    // Buffers of random sizes under a second owner, and one the app made itself.
    let mut rng = common::rng();
    let ui = ledger.owner("ui");
    let mut buffers = Vec::new();
    for i in 0..20 {
        let size = rng.gen_range(1..200_000u64) * 4;
        let b = ui
            .create_buffer(&wgpu::BufferDescriptor {
                label: Some(&format!("ui-{i}")),
                size,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
            .expect("a buffer");
        buffers.push((b, size));
    }
    let own = gpu.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("made-by-the-app"),
        size: 65_536,
        usage: wgpu::BufferUsages::UNIFORM,
        mapped_at_creation: false,
    });
    let own = ledger.track_buffer(own, "ui");
    // An arena in ordinary wgpu buffers (CPU adapters default to host memory, which a
    // direct write fills without staging), and an upload through a staging ring.
    let arena = Arena::new(
        &gpu,
        ArenaConfig {
            name: "ledger-test".into(),
            block_memory: BlockMemory::Device,
            ..Default::default()
        },
    )
    .expect("an arena");
    let weights = arena.alloc(3 << 20, "weights").expect("weights");
    let acts: Vec<_> = (0..5)
        .map(|_| {
            arena
                .alloc(rng.gen_range(1..100_000), "activations")
                .expect("acts")
        })
        .collect();
    let data: Vec<u8> = (0..weights.size()).map(|_| rng.gen()).collect();
    let uploader = vramkit::stream::Uploader::new(&gpu, Default::default());
    uploader.upload(&weights, 0, &data).expect("an upload");
    // And a texture nobody registers.
    let forgotten = gpu.device().create_texture(&texture(
        "forgotten-texture",
        (512, 512, 1),
        1,
        1,
        D2,
        F::Rgba8Unorm,
    ));

    let report = ledger.report();
    eprintln!("{report}");
    let scene_bytes: u64 = cases.iter().map(|c| c.1).sum();
    let ui_bytes: u64 = buffers.iter().map(|b| b.1).sum::<u64>() + 65_536;
    let line = |name: &str| report.line(Part::App, name).expect("an app line").clone();
    assert_eq!(line("scene").bytes, scene_bytes);
    assert_eq!(line("scene").resources, Some(cases.len() as u64));
    assert_eq!(line("ui").bytes, ui_bytes);
    assert_eq!(line("ui").resources, Some(21));
    assert_eq!(
        report.bytes(Part::App, MemoryKind::Device),
        scene_bytes + ui_bytes
    );
    // vramkit's arena: its reserved bytes, and what each label holds.
    let stats = arena.stats();
    let arena_line = report
        .line(Part::Vramkit, "arena 'ledger-test'")
        .expect("the arena's line");
    assert_eq!(arena_line.bytes, stats.reserved);
    for (label, s) in &stats.per_label {
        let held = arena_line
            .detail
            .iter()
            .find(|(l, _)| l == label)
            .map(|d| d.1);
        assert_eq!(held, Some(s.bytes), "label {label}");
    }
    let staging = report
        .line(Part::Vramkit, "upload staging")
        .expect("the upload ring's line");
    assert!(uploader.stats().staging_bytes > 0);
    assert_eq!(staging.kind, MemoryKind::Host);
    assert_eq!(staging.bytes, uploader.stats().staging_bytes);
    // wgpu's allocator, where the backend reports one: the registered textures are in it
    // at least as large as the ledger counts them, the forgotten one is among the app's,
    // and nothing of the arena is.
    if let Some(w) = &report.wgpu {
        for (desc, expected) in &cases {
            let name = desc.label.unwrap_or_default();
            let real = w.others.iter().find(|o| o.name == name).map(|o| o.bytes);
            assert!(
                real.is_some_and(|r| r >= *expected),
                "{name}: wgpu allocated {real:?}, the ledger counts {expected}"
            );
        }
        let f = w.others.iter().find(|o| o.name == "forgotten-texture");
        assert!(f.is_some_and(|f| f.bytes >= 512 * 512 * 4), "{f:?}");
        assert!(w.others.iter().all(|o| !o.name.starts_with("ledger-test/")));
        assert!(
            w.vramkit >= stats.reserved,
            "{} < {}",
            w.vramkit,
            stats.reserved
        );
        assert!(report
            .untracked_in_wgpu()
            .is_some_and(|u| u >= 512 * 512 * 4));
        assert!(w.reserved >= w.allocated);
    } else {
        assert_ne!(gpu.info().backend, wgpu::Backend::Vulkan);
    }

    // Dropping removes exactly a resource's bytes.
    let gone = textures.swap_remove(rng.gen_range(0..textures.len()));
    let gone_bytes = gone.bytes();
    drop(gone);
    let (b, size) = buffers.swap_remove(rng.gen_range(0..buffers.len()));
    drop(b);
    let report = ledger.report();
    assert_eq!(line_bytes(&report, "scene"), scene_bytes - gone_bytes);
    assert_eq!(line_bytes(&report, "ui"), ui_bytes - size);
    drop((textures, buffers, own));
    let report = ledger.report();
    assert!(
        report.line(Part::App, "scene").is_some(),
        "the owner handle still holds it"
    );
    assert_eq!(report.bytes(Part::App, MemoryKind::Device), 0);
    drop((scene, ui));
    assert!(ledger.report().line(Part::App, "scene").is_none());
    drop((acts, forgotten));
}

fn line_bytes(report: &vramkit::ledger::LedgerReport, name: &str) -> u64 {
    report.line(Part::App, name).map_or(0, |l| l.bytes)
}

#[test]
fn the_growth_watch_names_a_forgotten_texture_loop_within_five_frames_and_nothing_else() {
    let gpu = own_gpu();
    let ledger = gpu.ledger();
    let (leaky, churn, loader) = (
        ledger.owner("leaky"),
        ledger.owner("churn"),
        ledger.owner("loader"),
    );
    let desc = texture(
        "frame",
        (64, 64, 1),
        1,
        1,
        wgpu::TextureDimension::D2,
        wgpu::TextureFormat::Rgba8Unorm,
    );
    let mut kept = Vec::new();
    let mut loaded = Vec::new();
    let mut named_at = None;
    for frame in 1..=12u32 {
        kept.push(leaky.create_texture(&desc).unwrap());
        // Made and dropped each frame: steady.
        drop(churn.create_texture(&desc).unwrap());
        // Two frames of loading, then nothing.
        if frame <= 2 {
            loaded.push(loader.create_texture(&desc).unwrap());
        }
        let growing = ledger.end_frame();
        assert!(growing.iter().all(|g| g.owner == "leaky"), "{growing:?}");
        if let Some(g) = growing.first() {
            named_at.get_or_insert(frame);
            assert_eq!(g.bytes, u64::from(frame) * 64 * 64 * 4);
            assert_eq!(g.held, u64::from(frame));
        }
    }
    assert_eq!(named_at, Some(GROWTH_FRAMES), "named within five frames");
    assert_eq!(ledger.report().growing.len(), 1);
    // Dropping ends the streak.
    kept.pop();
    assert!(ledger.end_frame().is_empty());
    assert!(ledger.report().growing.is_empty());
}

#[test]
fn a_descriptor_wgpu_refuses_is_an_error_and_charges_nothing() {
    let gpu = own_gpu();
    let ledger = gpu.ledger();
    let owner = ledger.owner("bad");
    let too_many_levels = texture(
        "bad",
        (16, 16, 1),
        12,
        1,
        wgpu::TextureDimension::D2,
        wgpu::TextureFormat::Rgba8Unorm,
    );
    let e = owner.create_texture(&too_many_levels).unwrap_err();
    assert!(e.to_string().contains("tracked texture"), "{e}");
    let e = owner
        .create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: gpu.limits().max_buffer_size + 4,
            usage: wgpu::BufferUsages::STORAGE,
            mapped_at_creation: false,
        })
        .unwrap_err();
    assert!(e.to_string().contains("tracked buffer"), "{e}");
    let line = ledger.report().line(Part::App, "bad").cloned().unwrap();
    assert_eq!((line.bytes, line.resources), (0, Some(0)));
}
