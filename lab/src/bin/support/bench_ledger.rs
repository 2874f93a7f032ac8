//! The `ledger` suite: what registering a resource with the device ledger costs, against
//! creating it with plain wgpu in the same run (the target: under 1 µs per
//! resource). Four loops of `n` textures (64x64 RGBA8): plain `create_texture` + drop;
//! the same through `Owner::create_texture` (the size, an error scope, the charge);
//! `Owner::track_texture` alone on a texture made once (the size and two atomic adds, and
//! the drop's two); and `Ledger::track_texture` by owner name (one lookup more).
//!
//! Then the ledger against the driver (run it first on a fresh device, `bench ledger`): the
//! report of the bare device (what wgpu and the driver hold before the app makes
//! anything), then of a scene of `VRAMKIT_LEDGER_SCENE_MB` (256) MiB of registered
//! textures and an arena, with the driver's usage delta against the ledger's; and a
//! forgotten-texture loop, with the frame at which the growth watch names it.

use std::time::Instant;

use vramkit::Gpu;

use crate::Figures;

fn desc() -> wgpu::TextureDescriptor<'static> {
    wgpu::TextureDescriptor {
        label: Some("ledger bench"),
        size: wgpu::Extent3d {
            width: 64,
            height: 64,
            depth_or_array_layers: 1,
        },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: wgpu::TextureFormat::Rgba8Unorm,
        usage: wgpu::TextureUsages::TEXTURE_BINDING,
        view_formats: &[],
    }
}

/// Nanoseconds per iteration of `f`, the best of 5 rounds of `n`.
fn best_ns(n: u32, mut f: impl FnMut()) -> f64 {
    (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed().as_nanos() as f64 / f64::from(n)
        })
        .fold(f64::INFINITY, f64::min)
}

pub fn suite_ledger(gpu: &Gpu, figures: &mut Figures) {
    let n: u32 = std::env::var("VRAMKIT_LEDGER_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let ledger = gpu.ledger();
    against_the_driver(gpu, figures);
    let owner = ledger.owner("bench");
    let d = desc();
    let plain = best_ns(n, || drop(gpu.device().create_texture(&d)));
    let tracked_create = best_ns(n, || {
        drop(
            owner
                .create_texture(&d)
                .unwrap_or_else(|e| panic!("ledger suite: {e}")),
        )
    });
    let texture = gpu.device().create_texture(&d);
    let track = best_ns(n * 20, || {
        drop(
            owner
                .track_texture(texture.clone())
                .unwrap_or_else(|e| panic!("ledger suite: {e}")),
        )
    });
    let by_name = best_ns(n * 20, || {
        drop(
            ledger
                .track_texture(texture.clone(), "bench")
                .unwrap_or_else(|e| panic!("ledger suite: {e}")),
        )
    });
    let report = best_ns(50, || drop(ledger.report()));
    println!("\nledger ({n} textures of 64x64 RGBA8 a round, best of 5)");
    println!("  plain create_texture + drop      {plain:>10.0} ns");
    println!("  Owner::create_texture + drop     {tracked_create:>10.0} ns");
    println!("  Owner::track_texture + drop      {track:>10.1} ns");
    println!("  Ledger::track_texture (by name)  {by_name:>10.1} ns");
    println!("  Ledger::report                   {report:>10.0} ns");
    figures.add("ledger_create_texture_ns", format!("{plain:.0}"));
    figures.add(
        "ledger_tracked_create_texture_ns",
        format!("{tracked_create:.0}"),
    );
    figures.add("ledger_track_ns", format!("{track:.1}"));
    figures.add("ledger_track_by_name_ns", format!("{by_name:.1}"));
    figures.add("ledger_track_over_create", format!("{:.4}", track / plain));
    figures.add("ledger_report_ns", format!("{report:.0}"));
}

/// The bare device, a scene, and a forgotten loop, against the driver (module docs).
fn against_the_driver(gpu: &Gpu, figures: &mut Figures) {
    let ledger = gpu.ledger();
    let bare = ledger.report();
    println!("\nthe bare device:\n{bare}");
    let opt = |v: Option<u64>| v.map_or_else(|| "none".to_string(), |v| v.to_string());
    figures.add(
        "ledger_bare_driver_usage",
        opt(bare.driver.map(|d| d.usage)),
    );
    figures.add("ledger_bare_wgpu_internal", opt(bare.wgpu_internal()));
    figures.add("ledger_bare_untracked", opt(bare.untracked()));
    let mb: u64 = std::env::var("VRAMKIT_LEDGER_SCENE_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let scene = ledger.owner("scene");
    let mut held = Vec::new();
    // 1024 x 1024 RGBA8 with its 11 levels: 5.33 MiB each.
    let mut d = desc();
    d.size = wgpu::Extent3d {
        width: 1024,
        height: 1024,
        depth_or_array_layers: 1,
    };
    d.mip_level_count = 11;
    d.label = Some("scene texture");
    while held
        .iter()
        .map(|t: &vramkit::ledger::Tracked<wgpu::Texture>| t.bytes())
        .sum::<u64>()
        < mb << 20
    {
        held.push(
            scene
                .create_texture(&d)
                .unwrap_or_else(|e| panic!("ledger suite: {e}")),
        );
    }
    let arena = vramkit::Arena::new(gpu, Default::default())
        .unwrap_or_else(|e| panic!("ledger suite: {e}"));
    let weights = arena
        .alloc(mb << 19, "weights")
        .unwrap_or_else(|e| panic!("ledger suite: {e}"));
    let with = ledger.report();
    println!("\nwith the scene:\n{with}");
    let app = with.bytes(
        vramkit::ledger::Part::App,
        vramkit::ledger::MemoryKind::Device,
    );
    figures.add("ledger_scene_app_bytes", app);
    figures.add("ledger_scene_untracked", opt(with.untracked()));
    if let (Some(b), Some(w)) = (bare.driver, with.driver) {
        let ledger_delta = app + arena.stats().reserved;
        let driver_delta = w.usage.saturating_sub(b.usage);
        figures.add("ledger_scene_driver_delta", driver_delta);
        figures.add("ledger_scene_ledger_delta", ledger_delta);
        figures.add(
            "ledger_scene_driver_over_ledger",
            format!("{:.4}", driver_delta as f64 / ledger_delta.max(1) as f64),
        );
    }
    drop((held, weights, arena));
    // A texture made every frame and kept: named at which frame?
    let leaky = ledger.owner("forgotten loop");
    let mut kept = Vec::new();
    let mut named = None;
    for frame in 1..=10u32 {
        kept.push(
            leaky
                .create_texture(&desc())
                .unwrap_or_else(|e| panic!("ledger suite: {e}")),
        );
        if ledger
            .end_frame()
            .iter()
            .any(|g| g.owner == "forgotten loop")
        {
            named = Some(frame);
            break;
        }
    }
    figures.add(
        "ledger_forgotten_loop_named_at_frame",
        opt(named.map(u64::from)),
    );
}
