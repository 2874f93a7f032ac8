//! Mip streaming: many ordinary textures whose full mip chains are three times the
//! budget, a camera flying over them, each texture holding only the levels its view needs.
//!
//! ```text
//! cargo run --release --example texture_streaming [-- --textures 200 --side 512 --frames 240 --fps 60 --growths 12]
//! ```
//! `--growths` sets `MipConfig::growths_per_frame` (0: no limit; default: the streamer's).
//! Frames are paced at `--fps` (0: as fast as `update` returns), as an app's are: the
//! streamer's loader threads read the levels of growing textures between frames.
//! Prints `name: value` lines: the budget held every frame
//! (`resident_bytes_max_over_budget` <= 1), uploads within the cap (`uploads_over_cap` 0),
//! no out-of-memory (`ooms` 0), the frames a camera cut takes to settle, and, once settled,
//! the fraction of textures whose every resident level reads back exactly as its source
//! (`settled_exact_fraction` 1.0). Halfway through, the budget is halved (a neighbour took
//! memory): textures shrink, nothing fails. Last, every texture is streamed to its full
//! chain under an unlimited budget, its upload bandwidth set against uploading every level
//! with `Uploader::upload_texture` into textures made once
//! (`fill_streamer_over_upload_texture`, bytes a second over bytes a second): what growing
//! by swaps, GPU copies and source reads included, costs over a plain upload.
//! Exits non-zero when a promise is broken.

use std::sync::Arc;
use std::time::Instant;

use rand::{Rng, SeedableRng};
use vramkit::mips::{wanted_level, MemoryMips, MipConfig, MipId, MipSource, MipStreamer};
use vramkit::Gpu;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn arg(name: &str, default: u32) -> u32 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A texture's levels: a pattern of its own per level, so a wrong level reads back wrong.
fn mips(rng: &mut impl Rng, size: (u32, u32)) -> Res<MemoryMips> {
    let levels = 32 - size.0.max(size.1).leading_zeros();
    let seed: u8 = rng.gen();
    let data = (0..levels)
        .map(|l| {
            let (w, h) = ((size.0 >> l).max(1), (size.1 >> l).max(1));
            let mut v = Vec::with_capacity((w * h * 4) as usize);
            for y in 0..h {
                for x in 0..w {
                    v.extend_from_slice(&[
                        (x as u8).wrapping_mul(3).wrapping_add(seed),
                        (y as u8).wrapping_mul(5),
                        (l as u8).wrapping_mul(40).wrapping_add(seed),
                        255,
                    ]);
                }
            }
            v
        })
        .collect();
    Ok(MemoryMips::new(
        wgpu::TextureFormat::Rgba8Unorm,
        size,
        data,
    )?)
}

/// The four slowest frames of `log`, each as `frame:ms(poll/plan/shrink/land/submit/
/// upload ms)-shrinks+growths`.
fn slowest(log: &mut [(f64, u32, vramkit::mips::LastUpdate)]) -> String {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    log.sort_by(|a, b| b.0.total_cmp(&a.0));
    log.iter()
        .take(4)
        .map(|(total, f, u)| {
            format!(
                "{f}:{total:.3}({:.2}/{:.2}/{:.2}/{:.2}/{:.2}/{:.2})-{}+{}",
                ms(u.poll),
                ms(u.plan),
                ms(u.shrink),
                ms(u.land),
                ms(u.submit),
                ms(u.upload),
                u.shrinks,
                u.growths
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() -> Res<()> {
    let textures = arg("--textures", 200);
    let side = arg("--side", 256).max(8);
    let frames = arg("--frames", 180).max(4);
    let fps = arg("--fps", 60);
    let growths = match arg("--growths", u32::MAX) {
        0 => usize::MAX,
        u32::MAX => MipConfig::default().growths_per_frame,
        g => g as usize,
    };
    let frame_time = std::time::Duration::from_secs_f64(1.0 / f64::from(fps.max(1)));
    // Sleeps out the rest of a frame begun at `start` (nothing when unpaced).
    let pace = |start: Instant| {
        if fps > 0 {
            std::thread::sleep(frame_time.saturating_sub(start.elapsed()));
        }
    };
    let gpu = Gpu::headless()?;
    println!("texture streaming on {}", gpu.describe());
    let mut rng = rand::rngs::SmallRng::seed_from_u64(42);
    let mut sources: Vec<(Arc<MemoryMips>, (u32, u32))> = Vec::new();
    for _ in 0..textures {
        let size = (
            rng.gen_range(side / 4..=side),
            rng.gen_range(side / 4..=side),
        );
        sources.push((Arc::new(mips(&mut rng, size)?), size));
    }
    let full: u64 = sources
        .iter()
        .map(|(s, _)| {
            (0..s.level_count())
                .map(|l| s.read_level(l).map_or(0, |v| v.len() as u64))
                .sum::<u64>()
        })
        .sum();
    let budget = full / 3;
    let largest_level = u64::from(side) * u64::from(side) * 4;
    let cap = (budget / 16).max(largest_level);
    let mut streamer = MipStreamer::new(
        &gpu,
        MipConfig {
            budget,
            upload_cap: cap,
            growths_per_frame: growths,
            ..Default::default()
        },
    )?;
    let mut ids: Vec<(MipId, (u32, u32))> = Vec::new();
    for (i, (s, size)) in sources.iter().enumerate() {
        ids.push((streamer.add(s.clone(), &format!("texture {i}"))?, *size));
    }
    // The textures on a grid; the camera flies over it and each is drawn at a size that
    // falls with its distance; importance is the screen area it covers.
    let columns = (textures as f32).sqrt().ceil() as usize;
    let place = |i: usize| ((i % columns) as f32, (i / columns) as f32);
    let view = |streamer: &mut MipStreamer, cam: (f32, f32)| -> Res<()> {
        for (i, (id, size)) in ids.iter().enumerate() {
            let (x, y) = place(i);
            let d = ((x - cam.0).powi(2) + (y - cam.1).powi(2)).sqrt();
            let pixels = side as f32 * 1.5 / (1.0 + d);
            streamer.set_wanted(*id, wanted_level(*size, pixels), pixels * pixels)?;
        }
        Ok(())
    };
    let mut cpu_ms = Vec::new();
    // Each frame's time and what it did, to name the slowest ones.
    let mut frame_log: Vec<(f64, u32, vramkit::mips::LastUpdate)> = Vec::new();
    let mut resident_max = 0u64;
    let mut upload_max = 0u64;
    let mut over_budget_frames = 0;
    let rows = (textures as usize).div_ceil(columns) as f32;
    for f in 0..frames {
        if f == frames / 2 {
            streamer.set_budget(budget / 2)?;
        }
        let t = f as f32 / frames as f32;
        let cam = (
            columns as f32 * t,
            rows / 2.0 + rows / 3.0 * (6.0 * t).sin(),
        );
        view(&mut streamer, cam)?;
        let start = Instant::now();
        let uploaded = streamer.update()?;
        cpu_ms.push(start.elapsed().as_secs_f64() * 1e3);
        pace(start);
        let s = streamer.stats();
        frame_log.push((*cpu_ms.last().unwrap_or(&0.0), f, s.last_update));
        let limit = if f >= frames / 2 { budget / 2 } else { budget };
        resident_max = resident_max.max(s.resident_bytes * budget / limit);
        if s.resident_bytes > limit {
            over_budget_frames += 1;
        }
        upload_max = upload_max.max(uploaded);
    }
    // A camera cut to the grid's far corner, at the full budget again: frames to settle.
    streamer.set_budget(budget)?;
    view(&mut streamer, (columns as f32 - 1.0, rows - 1.0))?;
    let mut settle_frames = 0;
    while !streamer.settled() && settle_frames < 10_000 {
        let start = Instant::now();
        streamer.update()?;
        settle_frames += 1;
        pace(start);
    }
    // Every resident level of every texture against its source.
    let mut exact = 0;
    for (i, (id, _)) in ids.iter().enumerate() {
        let shown = streamer.texture(*id)?;
        let mut same = true;
        for l in 0..shown.texture.mip_level_count() {
            let got = vramkit::readback::read_texture_level(&gpu, &shown.texture, l)?;
            same &= got == sources[i].0.read_level(shown.resident + l)?;
        }
        exact += usize::from(same);
    }
    let s = streamer.stats();
    let ledger = gpu.ledger().report();
    let streamed_line = ledger
        .line(vramkit::ledger::Part::Vramkit, "mip-streamed textures")
        .map_or(0, |l| l.bytes);
    drop(streamer);
    let (fill_streamer_s, fill_bytes) = fill_by_streaming(&gpu, &sources, full)?;
    let fill_upload_s = fill_by_upload_texture(&gpu, &sources)?;
    let figures = [
        ("textures", textures.to_string()),
        ("full_chain_bytes", full.to_string()),
        ("budget_bytes", budget.to_string()),
        ("resident_bytes_max", resident_max.to_string()),
        (
            "resident_bytes_max_over_budget",
            format!("{:.4}", resident_max as f64 / budget as f64),
        ),
        ("frames_over_budget", over_budget_frames.to_string()),
        ("upload_cap_bytes", cap.to_string()),
        ("uploads_max_per_frame", upload_max.to_string()),
        ("uploads_over_cap", s.uploads_over_cap.to_string()),
        ("ooms", s.ooms.to_string()),
        ("swaps", s.swaps.to_string()),
        (
            "update_cpu_ms_p50",
            format!("{:.3}", percentile(&mut cpu_ms, 0.5)),
        ),
        (
            "update_cpu_ms_p99",
            format!("{:.3}", percentile(&mut cpu_ms, 0.99)),
        ),
        ("update_cpu_ms_slowest", slowest(&mut frame_log)),
        ("frames_to_settle_after_cut", settle_frames.to_string()),
        (
            "settled_exact_fraction",
            format!("{:.6}", exact as f64 / textures as f64),
        ),
        (
            "bytes_kept_over_no_streaming",
            format!("{:.4}", s.resident_bytes as f64 / full as f64),
        ),
        (
            "ledger_line_equals_resident",
            (streamed_line == s.resident_bytes).to_string(),
        ),
        ("fill_bytes", fill_bytes.to_string()),
        ("fill_loader_threads", fill_loader_threads().to_string()),
        (
            "fill_streamer_gb_s",
            format!("{:.2}", fill_bytes as f64 / fill_streamer_s / 1e9),
        ),
        (
            "fill_upload_texture_gb_s",
            format!("{:.2}", full as f64 / fill_upload_s / 1e9),
        ),
        (
            "fill_streamer_over_upload_texture",
            format!(
                "{:.3}",
                (fill_bytes as f64 / fill_streamer_s) / (full as f64 / fill_upload_s)
            ),
        ),
    ];
    for (k, v) in &figures {
        println!("{k}: {v}");
    }
    let ok = resident_max <= budget
        && over_budget_frames == 0
        && s.uploads_over_cap == 0
        && s.ooms == 0
        && exact == textures as usize
        && settle_frames < 10_000
        && streamed_line == s.resident_bytes
        && fill_bytes > 0;
    if !ok {
        eprintln!("a promise was broken (see the figures above)");
        std::process::exit(1);
    }
    Ok(())
}

/// Streams every texture from its coarse tail to its full chain with no budget or upload
/// limit (a loading screen), until settled and the GPU idle; returns the seconds and the
/// bytes uploaded.
fn fill_by_streaming(
    gpu: &Gpu,
    sources: &[(Arc<MemoryMips>, (u32, u32))],
    full: u64,
) -> Res<(f64, u64)> {
    let mut streamer = MipStreamer::new(
        gpu,
        MipConfig {
            budget: full,
            upload_cap: full,
            // Not two caps of host staging (twice every chain): loads beyond it wait.
            staging_bytes: 256 << 20,
            // A loading screen: no frame time to keep.
            growths_per_frame: usize::MAX,
            update_time_target: None,
            // A loading screen has the machine to itself: a loader per core, up to 8.
            loader_threads: fill_loader_threads(),
            ..Default::default()
        },
    )?;
    for (i, (s, size)) in sources.iter().enumerate() {
        let id = streamer.add(s.clone(), &format!("fill {i}"))?;
        streamer.set_wanted(id, 0, (size.0 * size.1) as f32)?;
    }
    gpu.wait_idle()?;
    let start = Instant::now();
    let mut bytes = 0;
    let mut rounds = 0;
    while !streamer.settled() && rounds < 1000 {
        // A loading screen: each round lands what the loaders have read.
        streamer.wait_for_loads(std::time::Duration::from_secs(10))?;
        bytes += streamer.update()?;
        rounds += 1;
    }
    gpu.wait_idle()?;
    Ok((start.elapsed().as_secs_f64(), bytes))
}

/// Loader threads for the loading screen: one per core, at most 8.
fn fill_loader_threads() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get().min(8))
}

/// The same levels uploaded with `upload_texture` into full-chain textures made before
/// the clock starts, the levels read from the same sources; returns the seconds.
fn fill_by_upload_texture(gpu: &Gpu, sources: &[(Arc<MemoryMips>, (u32, u32))]) -> Res<f64> {
    let uploader = vramkit::stream::Uploader::new(gpu, Default::default());
    let textures: Vec<wgpu::Texture> = sources
        .iter()
        .map(|(s, size)| {
            gpu.device().create_texture(&wgpu::TextureDescriptor {
                label: Some("upload_texture peer"),
                size: wgpu::Extent3d {
                    width: size.0,
                    height: size.1,
                    depth_or_array_layers: 1,
                },
                mip_level_count: s.level_count(),
                sample_count: 1,
                dimension: wgpu::TextureDimension::D2,
                format: wgpu::TextureFormat::Rgba8Unorm,
                usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
                view_formats: &[],
            })
        })
        .collect();
    gpu.wait_idle()?;
    let start = Instant::now();
    for ((s, size), texture) in sources.iter().zip(&textures) {
        for l in 0..s.level_count() {
            let texels = s.read_level(l)?;
            let extent = wgpu::Extent3d {
                width: (size.0 >> l).max(1),
                height: (size.1 >> l).max(1),
                depth_or_array_layers: 1,
            };
            uploader.upload_texture(
                wgpu::TexelCopyTextureInfo {
                    texture,
                    mip_level: l,
                    origin: wgpu::Origin3d::ZERO,
                    aspect: wgpu::TextureAspect::All,
                },
                extent,
                &texels,
            )?;
        }
    }
    gpu.wait_idle()?;
    Ok(start.elapsed().as_secs_f64())
}
