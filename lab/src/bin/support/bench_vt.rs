//! `bench vt`: virtual-texture figures against their peers, measured in the same run.

use std::sync::Arc;

use super::bench_gpu::{best_of as best, warm_until_steady};
use super::vt_demo::{camera, Demo};
use super::Figures;
use std::time::Instant;
use vramkit::vt::{
    ProceduralSource, ReferenceSampler, TileSource, VirtualTexture, VtConfig, TILE, TILE_BYTES,
};
use vramkit::{Arena, Gpu};

fn percentile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[((s.len() as f64 * p) as usize).min(s.len() - 1)]
}

/// The pages of the demo's camera path (CPU only): what a path visits.
fn visited(source: &dyn TileSource, frames: u32, size: (u32, u32)) -> usize {
    let layout = source.layout();
    let texels = layout.width.max(layout.height) as f32;
    let coarse = (1u32 << (layout.levels - 1).min(5)) as f32 * 1.5;
    let reference = ReferenceSampler::new(source);
    let mut seen = std::collections::HashSet::new();
    for f in 0..frames {
        let (o, s) = camera(f, frames, size, texels, coarse);
        let level = reference.level_for([s, 0.0], [0.0, s]);
        let a = layout.page_at(level, o);
        let b = layout.page_at(level, [o[0] + s * size.0 as f32, o[1] + s * size.1 as f32]);
        for y in a.y..=b.y {
            for x in a.x..=b.x {
                seen.insert((level, x, y));
            }
        }
    }
    seen.len()
}

/// CPU figures of a fly-over: frames measured after the first 20.
struct FlyOver {
    /// CPU ms of frames that uploaded 64 tiles, and by phase.
    busy: Vec<f64>,
    phases: [Vec<f64>; 4],
    /// CPU ms of every measured frame, and the time waited for old feedback.
    all: Vec<f64>,
    waits: Vec<f64>,
    uploads: u64,
    staged: u64,
    uploads_max: u32,
}

/// Pans eight level-1 pages a frame over `source` (the 64-tile budget is the limit);
/// `None` when no frame uploaded 64 tiles.
fn fly_over(
    gpu: &Gpu,
    arena: &Arena,
    source: &Arc<ProceduralSource>,
    config: VtConfig,
    frames: u32,
) -> Option<FlyOver> {
    let size = config.render_size;
    let mut vt = VirtualTexture::new(gpu, arena, source.clone(), config).expect("vt");
    let demo = Demo::new(gpu, arena, &vt, size).expect("demo");
    let mut fly = FlyOver {
        busy: Vec::new(),
        phases: Default::default(),
        all: Vec::new(),
        waits: Vec::new(),
        uploads: 0,
        staged: 0,
        uploads_max: 0,
    };
    let scale = 3.0 / (1u32 << 20) as f32; // level 1
    for f in 0..frames {
        let origin = [0.1 + f as f32 * 240.0 * 8.0 / (1u32 << 20) as f32, 0.5];
        demo.frame(gpu, &mut vt, origin, scale).expect("frame");
        let s = vt.stats();
        if f >= 20 {
            fly.all.push(s.cpu_ms_last);
            fly.waits.push(s.wait_ms_last);
            if s.uploads_last >= 64 {
                fly.busy.push(s.cpu_ms_last);
                for (p, v) in fly.phases.iter_mut().zip(s.cpu_ms_phases_last) {
                    p.push(v);
                }
            }
        }
    }
    let s = vt.stats();
    fly.uploads = s.uploads;
    fly.staged = s.uploads_staged;
    fly.uploads_max = s.uploads_max;
    (!fly.busy.is_empty()).then_some(fly)
}

pub fn suite_vt(gpu: &Gpu, figures: &mut Figures) {
    let cpu = gpu.is_cpu();
    let arena = Arena::new(gpu, Default::default()).expect("arena");
    let source = Arc::new(ProceduralSource::new(1 << 20, 1 << 20).expect("source"));

    // Tile uploads into a cache texture against one upload_texture of the same bytes.
    let uploader = vramkit::stream::Uploader::new(gpu, Default::default());
    let side = if cpu { 1024 } else { 4096 };
    let cache = gpu.device().create_texture(&wgpu::TextureDescriptor {
        label: Some("bench vt cache"),
        size: wgpu::Extent3d {
            width: side,
            height: side,
            depth_or_array_layers: 1,
        },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: wgpu::TextureFormat::Rgba8Unorm,
        usage: wgpu::TextureUsages::COPY_DST | wgpu::TextureUsages::TEXTURE_BINDING,
        view_formats: &[],
    });
    let per_side = side / TILE;
    let tiles: Vec<Vec<u8>> = (0..per_side * per_side)
        .map(|i| vec![(i % 251) as u8; TILE_BYTES])
        .collect();
    let regions: Vec<_> = tiles
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let i = i as u32;
            (
                wgpu::Origin3d {
                    x: (i % per_side) * TILE,
                    y: (i / per_side) * TILE,
                    z: 0,
                },
                wgpu::Extent3d {
                    width: TILE,
                    height: TILE,
                    depth_or_array_layers: 1,
                },
                &t[..],
            )
        })
        .collect();
    let whole: Vec<u8> = vec![77u8; (side * side * 4) as usize];
    let bytes = whole.len() as f64;
    let reps = if cpu { 3 } else { 10 };
    let tile = wgpu::Extent3d {
        width: TILE,
        height: TILE,
        depth_or_array_layers: 1,
    };
    let in_order: Vec<_> = regions.iter().map(|r| (r.0, r.2)).collect();
    warm_until_steady("vt", figures, || {
        let t = Instant::now();
        uploader
            .upload_texture_tiles(&cache, tile, &in_order)
            .expect("tiles");
        gpu.wait_idle().expect("wait");
        t.elapsed().as_secs_f64()
    });
    let tiled = best(gpu, reps, &mut || {
        uploader
            .upload_texture_tiles(&cache, tile, &in_order)
            .expect("tiles")
    });
    let regions_batched = best(gpu, reps, &mut || {
        uploader
            .upload_texture_regions(&cache, &regions)
            .expect("regions")
    });
    let image = best(gpu, reps, &mut || {
        uploader
            .upload_texture(
                cache.as_image_copy(),
                wgpu::Extent3d {
                    width: side,
                    height: side,
                    depth_or_array_layers: 1,
                },
                &whole,
            )
            .expect("image")
    });
    let one_by_one = best(gpu, reps, &mut || {
        for (origin, size, data) in &regions {
            let dst = wgpu::TexelCopyTextureInfo {
                texture: &cache,
                mip_level: 0,
                origin: *origin,
                aspect: wgpu::TextureAspect::All,
            };
            uploader.upload_texture(dst, *size, data).expect("tile");
        }
    });
    println!(
        "\nvt: {} tiles ({}) into a {side}x{side} cache: neighbouring slots {:.2} GB/s, one copy per tile {:.2} GB/s, one upload_texture of the same bytes {:.2} GB/s, tile by tile {:.2} GB/s",
        regions.len(),
        vramkit::fmt_bytes(whole.len() as u64),
        bytes / tiled / 1e9,
        bytes / regions_batched / 1e9,
        bytes / image / 1e9,
        bytes / one_by_one / 1e9
    );
    figures.add("vt_tile_upload_gbps", format!("{:.2}", bytes / tiled / 1e9));
    figures.add(
        "vt_tile_upload_one_copy_per_tile_gbps",
        format!("{:.2}", bytes / regions_batched / 1e9),
    );
    figures.add(
        "vt_tile_upload_vs_upload_texture",
        format!("{:.2}", image / tiled),
    );
    figures.add(
        "vt_tile_by_tile_vs_batched",
        format!("{:.2}", tiled / one_by_one),
    );

    // Frames of a fast fly-over at the real size: CPU per frame when 64 tiles arrive,
    // with tiles decoded into staging by the loaders (the default) and, as the peer in
    // the same run, with every tile copied into the uploader's staging by the frame.
    let size = if cpu { (640, 360) } else { (1920, 1080) };
    let frames = if cpu { 120 } else { 600 };
    let mut uploader_p = None;
    for staged_tiles in [0, 512] {
        let config = VtConfig {
            cache_slots: 1024,
            render_size: size,
            staged_tiles,
            ..Default::default()
        };
        let fly = fly_over(gpu, &arena, &source, config, frames);
        let path = if staged_tiles > 0 {
            "staged tiles"
        } else {
            "through the uploader"
        };
        let Some(fly) = fly else {
            println!("vt frames ({path}): no frame uploaded 64 tiles");
            continue;
        };
        println!(
            "vt frames at {}x{}, {path}: {} of {} measured frames uploaded 64 tiles ({} of {} tiles staged); CPU per such frame p50 {:.3} ms, p99 {:.3} ms (all frames p99 {:.3} ms)",
            size.0, size.1, fly.busy.len(), fly.all.len(), fly.staged, fly.uploads,
            percentile(&fly.busy, 0.5),
            percentile(&fly.busy, 0.99),
            percentile(&fly.all, 0.99)
        );
        let p = |k: usize, q| percentile(&fly.phases[k], q);
        println!(
            "  by phase, p50 / p99 ms: residency {:.3} / {:.3}, uploads {:.3} / {:.3}, page table {:.3} / {:.3}, end_frame {:.3} / {:.3}; waited for old feedback p50 {:.3}, p99 {:.3}",
            p(0, 0.5), p(0, 0.99), p(1, 0.5), p(1, 0.99), p(2, 0.5), p(2, 0.99), p(3, 0.5), p(3, 0.99),
            percentile(&fly.waits, 0.5),
            percentile(&fly.waits, 0.99)
        );
        let (p50, p99) = (percentile(&fly.busy, 0.5), percentile(&fly.busy, 0.99));
        if staged_tiles == 0 {
            uploader_p = Some((p50, p99));
            figures.add(
                "vt_cpu_ms_per_64_upload_frame_p50_uploader",
                format!("{p50:.3}"),
            );
            figures.add(
                "vt_cpu_ms_per_64_upload_frame_p99_uploader",
                format!("{p99:.3}"),
            );
            continue;
        }
        figures.add("vt_cpu_ms_per_64_upload_frame_p50", format!("{p50:.3}"));
        figures.add("vt_cpu_ms_per_64_upload_frame_p99", format!("{p99:.3}"));
        figures.add("vt_frames_with_64_uploads", fly.busy.len());
        figures.add("vt_uploads_max_per_frame", fly.uploads_max);
        figures.add(
            "vt_tiles_staged_fraction",
            format!("{:.3}", fly.staged as f64 / fly.uploads.max(1) as f64),
        );
        if let Some((u50, u99)) = uploader_p {
            figures.add("vt_staged_speedup_p50", format!("{:.2}", u50 / p50));
            figures.add("vt_staged_speedup_p99", format!("{:.2}", u99 / p99));
        }
    }
    {
        let config = VtConfig {
            cache_slots: 1024,
            render_size: size,
            ..Default::default()
        };
        let vt = VirtualTexture::new(gpu, &arena, source.clone(), config).expect("vt");
        let resolve: Vec<f64> = (0..20)
            .map(|_| vt.time_feedback_resolve().expect("time").seconds * 1e3)
            .collect();
        let r = resolve.iter().copied().fold(f64::MAX, f64::min);
        println!(
            "vt feedback compaction + clears at {}x{}: {r:.4} ms GPU",
            size.0, size.1
        );
        figures.add("vt_feedback_resolve_ms", format!("{r:.4}"));
    }

    // The demo path with a cache of a half and a quarter of what it visits.
    let path_size = if cpu { (512, 384) } else { (1920, 1088) };
    let path_frames = 240;
    let n = visited(source.as_ref(), path_frames, path_size);
    for over in [2u32, 4] {
        let slots = ((n as u32) / over).clamp(128, 4096);
        let config = VtConfig {
            cache_slots: slots,
            render_size: path_size,
            ..Default::default()
        };
        let mut vt = VirtualTexture::new(gpu, &arena, source.clone(), config).expect("vt");
        let demo = Demo::new(gpu, &arena, &vt, path_size).expect("demo");
        let texels = (1u32 << 20) as f32;
        for f in 0..path_frames {
            let (o, s) = camera(f, path_frames, path_size, texels, 48.0);
            demo.frame(gpu, &mut vt, o, s).expect("frame");
        }
        let unmapped = vt.unmapped_samples().expect("counter");
        println!(
            "vt path at {:.2}x oversubscription ({n} tiles visited, {slots} slots): {unmapped} unmapped samples, hit rate {:.3}, bias {}",
            n as f64 / f64::from(slots),
            vt.stats().hit_rate(),
            vt.stats().bias
        );
        figures.add(
            format!("vt_oversubscription_{over}x"),
            format!("{:.2}", n as f64 / f64::from(slots)),
        );
        figures.add(format!("vt_unmapped_samples_{over}x"), unmapped);
    }
}
