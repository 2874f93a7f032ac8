//! The tour: one short chapter per thing vramkit does, each with a figure measured in this
//! run against the plain-wgpu way, every GPU result checked against the CPU, and the
//! pictures written into one folder whose paths it prints at the end.
//!
//! ```text
//! cargo run --release --example demo                  # pictures into ./vramkit-tour
//! cargo run --release --example demo -- --out DIR
//! ```
//!
//! Under a minute on lavapipe (a CPU), seconds on a GPU. Exits non-zero when a result does
//! not match the CPU.

#[path = "support/vt_demo.rs"]
mod vt_demo;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng};
use vramkit::arena::{ArenaConfig, Budget, HistoryConfig};
use vramkit::kernels::{MatmulShape, Reduce};
use vramkit::tier::{TierConfig, Tiers};
use vramkit::vt::{Mandelbrot, VirtualTexture, VtConfig};

/// Texels a side of the tour's Mandelbrot.
const MANDELBROT: u32 = 1 << 15;
use vramkit::{fmt_bytes, Runtime, RuntimeConfig};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let mut out = PathBuf::from("vramkit-tour");
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--out" => out = args.next().map(PathBuf::from).unwrap_or(out),
            other => {
                eprintln!("unknown argument {other:?}; usage: demo [--out DIR]");
                std::process::exit(2);
            }
        }
    }
    // Errors are printed with Display: each says what was asked and what to do.
    match run(&out) {
        Ok(0) => {}
        Ok(wrong) => {
            eprintln!("{wrong} result(s) did not match the CPU");
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}

/// Prints a chapter's heading.
fn chapter(n: u32, title: &str) {
    println!("\n{n}. {title}");
}

/// Prints a checked line; counts it when wrong.
fn check(wrong: &mut u32, ok: bool, line: String) {
    println!("   {} {line}", if ok { "ok   " } else { "WRONG" });
    *wrong += u32::from(!ok);
}

/// A bar on a terminal (stderr), nothing otherwise: the chapters' lines are plain text.
fn bar(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("   {msg} {bar:30} {pos}/{len}") {
        bar.set_style(style);
    }
    bar.set_message(what.to_string());
    bar
}

fn run(out: &Path) -> Res<u32> {
    std::fs::create_dir_all(out)?;
    let start = Instant::now();
    let mut wrong = 0;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let rt = Runtime::new(
        &vramkit::Gpu::headless()?,
        RuntimeConfig {
            arena: ArenaConfig {
                name: "tour".into(),
                ..Default::default()
            },
            ..Default::default()
        },
    )?;
    rt.arena().record_history(Some(HistoryConfig::default()));
    let gpu = rt.gpu().clone();
    println!("vramkit tour on {}", gpu.describe());
    // What the figures below measure, and why this adapter.
    let info = gpu.info();
    if info.backend == wgpu::Backend::Gl && std::env::var_os("VRAMKIT_BACKEND").is_none() {
        println!(
            "   on OpenGL because no Vulkan, Metal or DX12 adapter was found: {}",
            vramkit::INSTALL_HINT
        );
    }
    if gpu.is_cpu() {
        println!(
            "   a CPU driver: \"GPU\" work runs on this machine's cores, so the timings compare \
             CPU code paths; every result is still checked"
        );
    }

    chapter(
        1,
        "The arena: allocations in a hot loop, against wgpu's create_buffer",
    );
    {
        // Each iteration takes a fresh 1 MiB buffer, writes into it and lets it go; a
        // submit every 64 (as a loop of kernels would), the same work both ways.
        let (n, size) = (2048, 1u64 << 20);
        let payload = [7u8; 256];
        let arena_loop = || -> vramkit::Result<f64> {
            let t = Instant::now();
            for i in 0..n {
                let a = rt.arena().alloc(size, "loop temporary")?;
                gpu.write_buffer(a.buffer(), a.offset(), &payload);
                if i % 64 == 63 {
                    gpu.submit([]);
                }
            }
            Ok(t.elapsed().as_secs_f64() * 1e6 / f64::from(n))
        };
        // The first run grows the arena to what the loop keeps in flight; the second
        // reuses it, as every later iteration of a real loop does.
        let warm_up = arena_loop()?;
        let before = rt.arena().stats().blocks_created;
        let mut arena_us = f64::MAX;
        for _ in 0..3 {
            arena_us = arena_us.min(arena_loop()?);
        }
        let made = rt.arena().stats().blocks_created - before;
        let plain_loop = || {
            let t = Instant::now();
            for i in 0..n {
                let b = gpu.device().create_buffer(&wgpu::BufferDescriptor {
                    label: None,
                    size,
                    usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                });
                gpu.write_buffer(&b, 0, &payload);
                b.destroy();
                if i % 64 == 63 {
                    gpu.submit([]);
                }
            }
            t.elapsed().as_secs_f64() * 1e6 / f64::from(n)
        };
        let plain_us = (0..3).map(|_| plain_loop()).fold(f64::MAX, f64::min);
        // The allocation alone, without the write each iteration does: what the arena
        // saves (the write costs the same both ways).
        let alone = |arena: bool| -> vramkit::Result<f64> {
            let t = Instant::now();
            for _ in 0..n {
                if arena {
                    drop(rt.arena().alloc(size, "loop temporary")?);
                } else {
                    gpu.device()
                        .create_buffer(&wgpu::BufferDescriptor {
                            label: None,
                            size,
                            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                            mapped_at_creation: false,
                        })
                        .destroy();
                }
            }
            Ok(t.elapsed().as_secs_f64() * 1e6 / f64::from(n))
        };
        let (mut arena_alone, mut plain_alone) = (f64::MAX, f64::MAX);
        for _ in 0..3 {
            arena_alone = arena_alone.min(alone(true)?);
            plain_alone = plain_alone.min(alone(false)?);
        }
        rt.synchronize()?;
        println!(
            "   {n} iterations taking a fresh {} and writing 256 B into it: arena {arena_us:.2} us \
             each, create_buffer {plain_us:.2} us (best of 3 runs each): {}",
            fmt_bytes(size),
            compared(plain_us, arena_us),
        );
        println!(
            "   the allocation alone (alloc and free against create_buffer and destroy): arena \
             {arena_alone:.3} us, create_buffer {plain_alone:.3} us: {}",
            compared(plain_alone, arena_alone),
        );
        println!(
            "   the arena made {made} wgpu buffers in that run (create_buffer {n}); its first \
             run, growing to what the loop keeps in flight: {warm_up:.2} us each, {} buffers",
            before
        );
    }

    let mut pictures = Vec::new();
    chapter(2, "A budget: a clear out-of-memory error, and recovery");
    {
        let small = vramkit::Arena::new(
            &gpu,
            ArenaConfig {
                name: "budgeted".into(),
                budget: Budget::Bytes(16 << 20),
                ..Default::default()
            },
        )?;
        small.record_history(Some(HistoryConfig::default()));
        let mut held = Vec::new();
        // Paced a little, so that the timeline shows the steps apart.
        let pace = || std::thread::sleep(std::time::Duration::from_millis(5));
        let err = loop {
            pace();
            match small.alloc(3 << 20, "activations") {
                Ok(a) => held.push(a),
                Err(e) => break e,
            }
        };
        println!("   after {} allocations of 3 MiB under 16 MiB:", held.len());
        println!("   {err}");
        pace();
        held.truncate(1);
        pace();
        let again = small.alloc(3 << 20, "activations");
        pace();
        if let Some(history) = small.history() {
            let timeline = out.join("budget_timeline.svg");
            history.write_timeline_svg(&timeline)?;
            println!(
                "   the refusal on the timeline (a red bar): {}",
                timeline.display()
            );
            pictures.push(timeline);
        }
        check(
            &mut wrong,
            again.is_ok(),
            format!(
                "dropped all but one: the same request now fits ({} live)",
                fmt_bytes(small.stats().allocated)
            ),
        );
    }

    chapter(
        3,
        "Uploads and downloads, against Queue::write_buffer and a mapped buffer",
    );
    {
        let n = 16usize << 20;
        let data: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let bytes = (4 * n) as f64;
        let dst = rt.alloc::<f32>(n, "upload target")?;
        rt.upload(&dst, &data)?; // warm the ring
        rt.synchronize()?;
        let t = Instant::now();
        rt.upload(&dst, &data)?;
        rt.synchronize()?;
        let ours = bytes / t.elapsed().as_secs_f64() / 1e9;
        let t = Instant::now();
        gpu.queue().write_buffer(
            dst.allocation().buffer(),
            dst.allocation().offset(),
            bytemuck::cast_slice(&data),
        );
        gpu.queue().submit([]);
        gpu.wait_idle()?;
        let plain = bytes / t.elapsed().as_secs_f64() / 1e9;
        println!(
            "   upload {}: {ours:.2} GB/s, write_buffer {plain:.2} GB/s ({:.2}x)",
            fmt_bytes(4 * n as u64),
            ours / plain
        );
        let mut host = vec![0f32; n];
        rt.downloader()
            .download_into(dst.allocation(), 0, bytemuck::cast_slice_mut(&mut host))?;
        let t = Instant::now();
        rt.downloader()
            .download_into(dst.allocation(), 0, bytemuck::cast_slice_mut(&mut host))?;
        let ours = bytes / t.elapsed().as_secs_f64() / 1e9;
        let t = Instant::now();
        let plain_bytes = plain_readback(&gpu, dst.allocation())?;
        let plain = bytes / t.elapsed().as_secs_f64() / 1e9;
        println!(
            "   download: {ours:.2} GB/s, a mapped buffer {plain:.2} GB/s ({:.2}x)",
            ours / plain
        );
        check(
            &mut wrong,
            host == data && plain_bytes == bytemuck::cast_slice::<f32, u8>(&data),
            "both read back what was uploaded".into(),
        );
    }

    chapter(4, "Kernels on arena allocations, checked against the CPU");
    {
        let (m, k, n) = (96usize, 160, 128);
        let a: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.gen_range(-1.0..1.0)).collect();
        let x = rt.alloc_from(&a, "a")?;
        let y = rt.alloc_from(&b, "b")?;
        let c = rt.alloc::<f32>(m * n, "c")?;
        let soft = rt.alloc::<f32>(m * k, "softmax")?;
        let total = rt.alloc::<f32>(1, "sum")?;
        let mut batch = rt.batch();
        batch
            .matmul::<f32>(
                MatmulShape {
                    m: m as u64,
                    k: k as u64,
                    n: n as u64,
                },
                &x,
                &y,
                &c,
            )?
            .softmax_rows(m as u64, &x, &soft)?
            .reduce(Reduce::Sum, &x, &total)?;
        batch.submit()?;
        let got = rt.download(&c)?;
        let mut worst = 0f64;
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k)
                    .map(|l| f64::from(a[i * k + l]) * f64::from(b[l * n + j]))
                    .sum();
                worst = worst.max((f64::from(got[i * n + j]) - want).abs());
            }
        }
        check(
            &mut wrong,
            worst < 1e-3,
            format!("matmul {m}x{k} by {k}x{n}: largest error {worst:.1e}"),
        );
        let soft_got = rt.download(&soft)?;
        let mut worst = 0f64;
        for (row, got) in a.chunks(k).zip(soft_got.chunks(k)) {
            let max = row.iter().copied().fold(f32::MIN, f32::max);
            let e: Vec<f64> = row.iter().map(|&v| f64::from(v - max).exp()).collect();
            let s: f64 = e.iter().sum();
            for (g, e) in got.iter().zip(&e) {
                worst = worst.max((f64::from(*g) - e / s).abs());
            }
        }
        check(
            &mut wrong,
            worst < 1e-5,
            format!("softmax of {m} rows of {k}: largest error {worst:.1e}"),
        );
        let sum: f64 = a.iter().map(|&v| f64::from(v)).sum();
        let got = f64::from(rt.download(&total)?[0]);
        check(
            &mut wrong,
            (got - sum).abs() < 1e-3,
            format!("sum of {}: GPU {got:.4}, CPU {sum:.4}", m * k),
        );
    }

    chapter(
        5,
        "A virtual texture: a 32768 x 32768 Mandelbrot image, computed tile by tile",
    );
    {
        let size = (640, 400);
        let source = Arc::new(Mandelbrot::new(MANDELBROT)?);
        let mut vt = VirtualTexture::new(
            &gpu,
            rt.arena(),
            source,
            VtConfig {
                render_size: size,
                ..Default::default()
            },
        )?;
        let demo = vt_demo::Demo::new(&gpu, rt.arena(), &vt, size)?;
        let whole = MANDELBROT as f32 / size.0 as f32;
        let views = [
            ("vt_whole.png", [0.5f32, 0.5], whole),
            (
                "vt_seahorse_valley.png",
                Mandelbrot::uv(-0.7453, 0.1127),
                1.5,
            ),
        ];
        let progress = bar(views.len() as u64, "settling views");
        for (file, centre, texels_per_px) in views {
            let scale = texels_per_px / MANDELBROT as f32;
            let origin = [
                centre[0] - scale * size.0 as f32 / 2.0,
                centre[1] - scale * size.1 as f32 / 2.0,
            ];
            let t = Instant::now();
            let mut frames = 0;
            for _ in 0..40 {
                demo.frame(&gpu, &mut vt, origin, scale)?;
                frames += 1;
                gpu.wait_idle()?;
                if vt.settle(8)? == 0 && frames > 2 {
                    break;
                }
            }
            demo.frame(&gpu, &mut vt, origin, scale)?;
            let pixels = demo.read(&gpu)?;
            let path = out.join(file);
            image::save_buffer(
                &path,
                &pixels,
                size.0,
                size.1,
                image::ExtendedColorType::Rgba8,
            )?;
            let colours: std::collections::HashSet<&[u8]> = pixels.chunks(4).collect();
            check(
                &mut wrong,
                colours.len() > 64,
                format!(
                    "{texels_per_px:.1} texels a pixel: settled in {frames} frames ({:.1} s), \
                     {} colours: {}",
                    t.elapsed().as_secs_f64(),
                    colours.len(),
                    path.display()
                ),
            );
            pictures.push(path);
            progress.inc(1);
        }
        progress.finish_and_clear();
        let s = vt.stats();
        println!(
            "   {} tiles uploaded ({}) for an image of {} as RGBA8; {} slots of {} resident",
            s.uploads,
            fmt_bytes(s.bytes_streamed),
            fmt_bytes(u64::from(MANDELBROT).pow(2) * 4 * 4 / 3),
            s.resident_tiles,
            s.cache_slots
        );
    }

    chapter(
        6,
        "A working set three times the budget, through tiered memory",
    );
    {
        let budget = 24u64 << 20;
        let trt = Runtime::new(
            &gpu,
            RuntimeConfig {
                arena: ArenaConfig {
                    name: "tiered".into(),
                    budget: Budget::Bytes(budget),
                    ..Default::default()
                },
                ..Default::default()
            },
        )?;
        trt.arena().record_history(Some(HistoryConfig::default()));
        let tiers = Tiers::new(trt.arena(), TierConfig::default())?;
        let len = 1usize << 20; // 4 MiB each
        let count = 18; // 72 MiB of movables
        let movables: Vec<_> = (0..count)
            .map(|i| tiers.alloc(4 * len as u64, &format!("layer {i}")))
            .collect::<vramkit::Result<_>>()?;
        let progress = bar(2 * count as u64, "touching layers");
        for (i, m) in movables.iter().enumerate() {
            let r = tiers.make_resident(&[m])?;
            let mut batch = trt.batch();
            batch.fill(i as f32, r.elements::<f32>(m)?)?;
            batch.submit()?;
            progress.inc(1);
        }
        let mut ok = true;
        for (i, m) in movables.iter().enumerate() {
            let r = tiers.make_resident(&[m])?;
            let back = trt.download(r.elements::<f32>(m)?)?;
            ok &= back.iter().all(|&v| v == i as f32);
            progress.inc(1);
        }
        progress.finish_and_clear();
        // The pictures while the layers are held: which block holds what, and how the
        // budget held over the run.
        let map = out.join("tiered_block_map.svg");
        std::fs::write(&map, trt.arena().to_svg())?;
        pictures.push(map);
        if let Some(history) = trt.arena().history() {
            let timeline = out.join("tiered_timeline.svg");
            history.write_timeline_svg(&timeline)?;
            pictures.push(timeline);
        }
        let s = tiers.stats();
        check(
            &mut wrong,
            ok && trt.arena().stats().peak_reserved <= budget,
            format!(
                "{count} layers of 4 MiB under a {} budget, every value intact; peak reserved {}, \
                 {} evictions, {} restores",
                fmt_bytes(budget),
                fmt_bytes(trt.arena().stats().peak_reserved),
                s.evictions,
                s.restores
            ),
        );
    }

    chapter(
        7,
        "Mip streaming: ordinary textures holding only the levels the view needs",
    );
    mip_chapter(&gpu, &mut wrong)?;

    chapter(
        8,
        "Planning: a dry run's peaks, and the largest batch that fits a budget",
    );
    {
        let step = |rt: &Runtime, batch: usize| -> vramkit::Result<()> {
            let x = rt.alloc::<f32>(batch * 4096, "input")?;
            let h = rt.alloc::<f32>(batch * 16384, "hidden")?;
            let mut b = rt.batch();
            b.fill(1.0, &x)?.fill(0.0, &h)?;
            b.submit()?;
            drop(x);
            let y = rt.alloc::<f32>(batch * 1024, "output")?;
            let mut b = rt.batch();
            b.fill(2.0, &y)?;
            b.submit()?;
            Ok(())
        };
        // On a runtime of its own (the same device), so that its peaks are this step's
        // alone and the tour's arena keeps its own for chapter 9.
        let own = Runtime::new(&gpu, RuntimeConfig::default())?;
        let plan = own.dry_run(|rt| step(rt, 64))?;
        println!(
            "   batch 64, without touching the GPU: peak allocated {}, peak reserved {}",
            fmt_bytes(plan.peak_allocated),
            fmt_bytes(plan.peak_reserved)
        );
        step(&own, 64)?;
        let real = own.arena().stats().peak_allocated;
        check(
            &mut wrong,
            real == plan.peak_allocated,
            format!("the real run's peak allocated: {}", fmt_bytes(real)),
        );
        let best = own.max_batch(64 << 20, 1..=1024, step)?;
        println!(
            "   largest batch under 64 MiB: {} (peak reserved {}, {} probes)",
            best.batch,
            fmt_bytes(best.peak_reserved),
            best.probes.len()
        );
    }

    chapter(
        9,
        "What the arena saw: summary, timeline, trace, memory_viz; the device ledger",
    );
    rt.synchronize()?;
    println!(
        "   trim gave {} of empty blocks back to the device",
        fmt_bytes(rt.arena().trim())
    );
    println!("{}", rt.arena().summary());
    if let Some(history) = rt.arena().history() {
        let timeline = out.join("memory_timeline.svg");
        history.write_timeline_svg(&timeline)?;
        let trace = out.join("memory_trace.json");
        history.write_chrome_trace(&trace)?;
        let snapshot = out.join("memory_viz.pickle");
        rt.arena().write_memory_viz_snapshot(&snapshot)?;
        pictures.extend([timeline, trace, snapshot]);
    }
    // All of the device, the tour's own textures and buffers beside vramkit's.
    println!("{}", gpu.ledger().report());
    println!("written (open the .svg in a browser, the .json in ui.perfetto.dev, the .pickle in pytorch.org/memory_viz):");
    for p in &pictures {
        println!("   {}", p.display());
    }
    println!(
        "\ntour done in {:.1} s, {} result(s) wrong",
        start.elapsed().as_secs_f64(),
        wrong
    );
    Ok(wrong)
}

/// Chapter 7: 64 textures whose full chains are three times the budget, the camera at one
/// corner of their grid; the plain-wgpu way loads every full chain.
fn mip_chapter(gpu: &vramkit::Gpu, wrong: &mut u32) -> Res<()> {
    use vramkit::mips::{wanted_level, MemoryMips, MipConfig, MipSource, MipStreamer};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let mut sources = Vec::new();
    for _ in 0..64 {
        let size: (u32, u32) = (rng.gen_range(64..=256), rng.gen_range(64..=256));
        let seed: u8 = rng.gen();
        let levels = (0..32 - size.0.max(size.1).leading_zeros())
            .map(|l| {
                let (w, h) = ((size.0 >> l).max(1), (size.1 >> l).max(1));
                (0..w * h)
                    .flat_map(|i| [(i as u8).wrapping_add(seed), (i >> 8) as u8, l as u8, 255])
                    .collect()
            })
            .collect();
        let mips = MemoryMips::new(wgpu::TextureFormat::Rgba8Unorm, size, levels)?;
        sources.push((Arc::new(mips), size));
    }
    let full: u64 = sources
        .iter()
        .flat_map(|(m, _)| (0..m.level_count()).map(|l| m.read_level(l)))
        .map(|l| l.map_or(0, |v| v.len() as u64))
        .sum();
    let budget = full / 3;
    let mut streamer = MipStreamer::new(
        gpu,
        MipConfig {
            budget,
            upload_cap: budget / 4,
            ..Default::default()
        },
    )?;
    for (i, (m, size)) in sources.iter().enumerate() {
        let id = streamer.add(m.clone(), &format!("tour texture {i}"))?;
        // An 8 x 8 grid seen from its corner: near textures large on screen, far ones small.
        let d = ((i % 8) as f32).hypot((i / 8) as f32);
        let pixels = 256.0 / (1.0 + d);
        streamer.set_wanted(id, wanted_level(*size, pixels), pixels * pixels)?;
    }
    let mut frames = 0;
    while !streamer.settled() && frames < 1000 {
        streamer.wait_for_loads(std::time::Duration::from_secs(10))?;
        streamer.update()?;
        frames += 1;
    }
    let s = streamer.stats();
    let mut exact = 0;
    for (i, (id, _)) in streamer.texture_stats().into_iter().enumerate() {
        let shown = streamer.texture(id)?;
        let mut same = true;
        for l in 0..shown.texture.mip_level_count() {
            let got = vramkit::readback::read_texture_level(gpu, &shown.texture, l)?;
            same &= got == sources[i].0.read_level(shown.resident + l)?;
        }
        exact += usize::from(same);
    }
    println!(
        "   64 textures, every full chain {}: streamed under a budget of {} in {frames} frames",
        fmt_bytes(full),
        fmt_bytes(budget)
    );
    check(
        wrong,
        s.peak_resident_bytes <= budget && exact == sources.len(),
        format!(
            "holds {} against the plain way's {} ({:.1}x less), {exact} of 64 textures' levels exact",
            fmt_bytes(s.resident_bytes),
            fmt_bytes(full),
            full as f64 / s.resident_bytes.max(1) as f64
        ),
    );
    Ok(())
}

/// `theirs` against `ours` (times, lower is better), worded the right way round.
fn compared(theirs: f64, ours: f64) -> String {
    let r = theirs / ours;
    if r >= 1.0 {
        format!("the arena {r:.1}x faster")
    } else {
        format!("the arena {:.1}x slower", 1.0 / r)
    }
}

/// The plain-wgpu readback: a MAP_READ buffer, a copy, a blocking map.
fn plain_readback(gpu: &vramkit::Gpu, a: &vramkit::Allocation) -> Res<Vec<u8>> {
    let staging = gpu.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("plain readback"),
        size: a.size(),
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut e = gpu.device().create_command_encoder(&Default::default());
    e.copy_buffer_to_buffer(a.buffer(), a.offset(), &staging, 0, a.size());
    gpu.queue().submit([e.finish()]);
    staging.slice(..).map_async(wgpu::MapMode::Read, |_| {});
    gpu.wait_idle()?;
    let bytes = staging.slice(..).get_mapped_range()?.to_vec();
    staging.unmap();
    Ok(bytes)
}
