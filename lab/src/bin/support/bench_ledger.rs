//! The `ledger` suite: what registering a resource with the device ledger costs, against
//! creating it with plain wgpu in the same run (the target: under 1 µs per
//! resource). Four loops of `n` textures (64x64 RGBA8): plain `create_texture` + drop;
//! the same through `Owner::create_texture` (the size, an error scope, the charge);
//! `Owner::track_texture` alone on a texture made once (the size and two atomic adds, and
//! the drop's two); and `Ledger::track_texture` by owner name (one lookup more).

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
