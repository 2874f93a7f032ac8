//! The `tier` suite: spill traffic against the transfer rings, a kernel loop whose working
//! set is twice the budget against the same loop with the budget lifted, and a
//! defragmentation against the device's copy bandwidth.

use std::time::Instant;

use rand::{Rng, SeedableRng};
use vramkit::arena::{Budget, HistoryConfig};
use vramkit::tier::{Movable, TierConfig, Tiers};
use vramkit::{Gpu, Runtime, RuntimeConfig};

use crate::bench_gpu::warm_until_steady;
use crate::Figures;

const MIB: u64 = 1 << 20;

/// `name` from the environment, parsed, or `default` (the suites' size knobs).
pub(crate) fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn suite_tier(gpu: &Gpu, figures: &mut Figures) {
    let cpu = gpu.is_cpu();
    let array_mib: u64 = env_or("VRAMKIT_TIER_ARRAY_MIB", if cpu { 8 } else { 256 });
    let budget_mib: u64 = env_or("VRAMKIT_TIER_BUDGET_MIB", if cpu { 64 } else { 4096 });
    // Kernel passes per array visit: the loop's arithmetic intensity.
    let work: u32 = env_or("VRAMKIT_TIER_WORK", if cpu { 8 } else { 64 });
    let (bytes, budget) = (array_mib * MIB, budget_mib * MIB);
    let len = (bytes / 4) as usize;
    let rt = Runtime::new(
        gpu,
        RuntimeConfig {
            arena: vramkit::ArenaConfig {
                name: "bench-tier".into(),
                budget: Budget::Bytes(budget),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .expect("runtime");
    let tiers = Tiers::new(rt.arena(), TierConfig::default()).expect("tiers");
    let host: Vec<f32> = (0..len).map(|i| (i % 1000) as f32).collect();
    let mut out = vec![0f32; len];

    // 1. Spill traffic: as many arrays as half the budget holds, evicted and restored,
    // against the Uploader and Downloader moving the same bytes in the same process.
    let n = ((budget / 2 / bytes) as usize).max(1);
    let arrays: Vec<Movable> = (0..2 * (budget / bytes) as usize)
        .map(|k| tiers.alloc(bytes, &format!("array{k}")).expect("alloc"))
        .collect();
    for m in &arrays {
        let r = tiers.make_resident(&[m]).expect("resident");
        rt.upload(r.elements::<f32>(m).expect("elements"), &host)
            .expect("upload");
    }
    let set: Vec<&Movable> = arrays[..n].iter().collect();
    let moved = bytes * n as u64;
    let time = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        gpu.wait_idle().expect("wait");
        t.elapsed().as_secs_f64()
    };
    let spill_round = || {
        tiers.make_resident(&set).map(drop).expect("resident");
        gpu.wait_idle().expect("wait");
        let evict = time(&mut || {
            tiers.evict(&set).expect("evict");
        });
        let restore = time(&mut || tiers.make_resident(&set).map(drop).expect("restore"));
        (evict, restore)
    };
    warm_until_steady("tier_spill", figures, || {
        let (e, r) = spill_round();
        e + r
    });
    let reps = 5;
    let (mut evict, mut restore, mut upload, mut download) =
        (f64::MAX, f64::MAX, f64::MAX, f64::MAX);
    for _ in 0..reps {
        let (e, r) = spill_round();
        evict = evict.min(e);
        restore = restore.min(r);
        let resident = tiers.make_resident(&set).expect("resident");
        upload = upload.min(time(&mut || {
            for m in &set {
                rt.upload(resident.elements::<f32>(m).expect("elements"), &host)
                    .expect("upload");
            }
        }));
        download = download.min(time(&mut || {
            for m in &set {
                rt.downloader()
                    .download_into(
                        resident.get(m).expect("get"),
                        0,
                        bytemuck::cast_slice_mut(&mut out),
                    )
                    .expect("download");
            }
        }));
    }
    let gbps = |t: f64| moved as f64 / t / 1e9;
    println!(
        "\n== tier: spill traffic, {n} x {array_mib} MiB, best of {reps} (GB/s, higher is better) =="
    );
    println!(
        "{:<22} {:>10} {:>10} {:>8}",
        "direction", "tier", "ring", "ratio"
    );
    for (what, t, peer, peer_name) in [
        ("host -> device", restore, upload, "uploader"),
        ("device -> host", evict, download, "downloader"),
    ] {
        println!(
            "{:<22} {:>10.2} {:>10.2} {:>7.2}x   (peer: {peer_name})",
            what,
            gbps(t),
            gbps(peer),
            peer / t
        );
    }
    figures.add("tier_restore_gbps", format!("{:.2}", gbps(restore)));
    figures.add("tier_evict_gbps", format!("{:.2}", gbps(evict)));
    figures.add("tier_uploader_gbps", format!("{:.2}", gbps(upload)));
    figures.add("tier_downloader_gbps", format!("{:.2}", gbps(download)));
    figures.add(
        "tier_restore_vs_uploader",
        format!("{:.2}", upload / restore),
    );
    figures.add(
        "tier_evict_vs_downloader",
        format!("{:.2}", download / evict),
    );

    // 2. The loop: every array visited in order, `work` scale passes each. The working
    // set is twice the budget, so least-recently-used eviction makes every visit a miss.
    // `ahead` 1: once a visit's kernels are submitted, the next array is prefetched
    // (its restore queued behind them); 2: and the array the visit after will evict is
    // evicted now, so that prefetch finds its room without waiting for a copy out.
    let visit_ahead = |ahead: u32| {
        for (k, m) in arrays.iter().enumerate() {
            let r = tiers.make_resident(&[m]).expect("resident");
            let x = r.elements::<f32>(m).expect("elements");
            let mut batch = rt.batch();
            for _ in 0..work {
                batch.scale(1.0, 0.0, x, x).expect("scale");
            }
            batch.submit().expect("submit");
            drop(r);
            if ahead >= 1 {
                tiers
                    .prefetch(&[&arrays[(k + 1) % arrays.len()]])
                    .expect("prefetch");
            }
            if ahead >= 2 {
                tiers.evict_bytes(bytes);
            }
        }
        gpu.wait_idle().expect("wait");
    };
    let visit_all = || visit_ahead(0);
    let passes = 2;
    let (t0, a0) = (tiers.stats(), rt.arena().stats());
    let mut tight = f64::MAX;
    for _ in 0..passes {
        tight = tight.min(time(&mut || visit_all()));
    }
    let (t1, a1) = (tiers.stats(), rt.arena().stats());
    let restores = (t1.restores - t0.restores).max(1) as f64;
    println!(
        "per restore: {:.2} evictions under pressure, {:.2} arena waits, {:.2} blocks created, \
         {:.3} ms in make_resident",
        (t1.pressure_evictions - t0.pressure_evictions) as f64 / restores,
        (a1.waits - a0.waits) as f64 / restores,
        (a1.blocks_created - a0.blocks_created) as f64 / restores,
        (t1.restore_stall - t0.restore_stall).as_secs_f64() * 1e3 / restores
    );
    let (mut prefetched, mut evicted_ahead) = (f64::MAX, f64::MAX);
    for _ in 0..passes {
        prefetched = prefetched.min(time(&mut || visit_ahead(1)));
        evicted_ahead = evicted_ahead.min(time(&mut || visit_ahead(2)));
    }
    rt.arena().record_history(Some(HistoryConfig::default()));
    gpu.set_profiling(true).expect("profiling");
    let profiled = time(&mut || visit_all());
    gpu.collect_profile(true).expect("profile");
    gpu.set_profiling(false).expect("profiling");
    let mut gpu_ms = std::collections::BTreeMap::<String, f64>::new();
    if let Some(h) = rt.arena().history() {
        for s in &h.gpu_spans {
            *gpu_ms.entry(s.name.clone()).or_default() += s.dur_ns as f64 * 1e-6;
        }
    }
    rt.arena().record_history(None);
    rt.arena().set_budget(Budget::Unlimited).expect("budget");
    let all: Vec<&Movable> = arrays.iter().collect();
    tiers.make_resident(&all).map(drop).expect("resident");
    gpu.wait_idle().expect("wait");
    let mut free = f64::MAX;
    for _ in 0..passes {
        free = free.min(time(&mut || visit_all()));
    }
    let visits = arrays.len() as f64;
    let per_visit = |t: f64| t / visits * 1e3;
    println!(
        "\n== tier: loop over {} x {array_mib} MiB (2x a {budget_mib} MiB budget), {work} scale \
         passes per visit ==",
        arrays.len()
    );
    println!(
        "{:<22} {:>10.3} ms per visit\n{:<22} {:>10.3} ms per visit\n{:<22} {:>10.2}x   \
         (target >= 0.5x)",
        "budget 2x over",
        per_visit(tight),
        "budget lifted",
        per_visit(free),
        "speed vs lifted",
        free / tight,
    );
    let busy: f64 = gpu_ms.values().sum();
    println!(
        "GPU time per visit (profiled pass, {:.3} ms per visit wall): {} = {:.3} ms busy",
        per_visit(profiled),
        gpu_ms
            .iter()
            .map(|(k, v)| format!("{k} {:.3}", v / visits))
            .collect::<Vec<_>>()
            .join(", "),
        busy / visits
    );
    println!(
        "{:<22} {:>10.3} ms per visit, {:.3}x\n{:<22} {:>10.3} ms per visit, {:.3}x   \
         (target >= 0.7x)",
        "next prefetched",
        per_visit(prefetched),
        free / prefetched,
        "and evicted ahead",
        per_visit(evicted_ahead),
        free / evicted_ahead,
    );
    figures.add("tier_loop_vs_unlimited", format!("{:.3}", free / tight));
    figures.add(
        "tier_loop_prefetch_vs_unlimited",
        format!("{:.3}", free / prefetched),
    );
    figures.add(
        "tier_loop_prefetch_evict_ahead_vs_unlimited",
        format!("{:.3}", free / evicted_ahead),
    );
    figures.add("tier_loop_ms_per_visit", format!("{:.3}", per_visit(tight)));
    figures.add(
        "tier_loop_unlimited_ms_per_visit",
        format!("{:.3}", per_visit(free)),
    );
    figures.add(
        "tier_loop_gpu_busy_ms_per_visit",
        format!("{:.3}", busy / visits),
    );
    // The copies' share of the GPU's time, and what the loop could reach with every copy
    // overlapped with the kernels (the copies still one after the other): the lifted
    // loop's time over the longer of the two.
    let copies: f64 = ["evict", "restore"]
        .iter()
        .filter_map(|k| gpu_ms.get(*k))
        .sum();
    if copies > 0.0 {
        let kernels = busy - copies;
        let ceiling = per_visit(free) / (kernels.max(copies) / visits);
        println!(
            "copies {:.3} ms a visit, kernels {:.3}: with copies overlapped with kernels the \
             loop could reach {ceiling:.3}x",
            copies / visits,
            kernels / visits
        );
        figures.add(
            "tier_loop_copy_ms_per_visit",
            format!("{:.3}", copies / visits),
        );
        figures.add("tier_loop_overlap_ceiling", format!("{ceiling:.3}"));
    }
    figures.add("tier_loop_work", work);
    drop(all);
    drop(set);
    drop(arrays);

    // 3. Defragmentation: many small movables of mixed sizes, a random half freed.
    let count: usize = env_or("VRAMKIT_TIER_SMALL", if cpu { 4096 } else { 32768 });
    let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
    let mut small: Vec<Option<Movable>> = (0..count)
        .map(|j| {
            let size = rng.gen_range(4u64..64) * 4096;
            Some(
                tiers
                    .alloc(size, &format!("small{}", j % 16))
                    .expect("alloc"),
            )
        })
        .collect();
    for s in small.iter_mut() {
        if rng.gen_bool(0.5) {
            *s = None;
        }
    }
    let (report, gpu_ns) =
        crate::defrag_measure::timed_defragment(&rt, &tiers).expect("defragment");
    drop(small);
    let (copy_bytes, copy) =
        crate::defrag_measure::device_copy_secs(&rt, report.bytes_moved).expect("copy peer");
    let defrag_gbps = report.bytes_moved as f64 / (gpu_ns.max(1) as f64 * 1e-9) / 1e9;
    let copy_gbps = copy_bytes as f64 / copy / 1e9;
    println!("\n== tier: defragment {count} movables of 16-252 KiB after freeing a random half ==");
    println!(
        "reserved/allocated {:.3} -> {:.3} (target <= 1.05); {} moves, {}, {} blocks freed, \
         {:.1} ms wall\nmoved at {:.1} GB/s on the GPU vs one copy of as many bytes {:.1} GB/s: \
         {:.2}x (target >= 0.5x)",
        report.ratio_before(),
        report.ratio_after(),
        report.moves,
        vramkit::fmt_bytes(report.bytes_moved),
        report.blocks_freed,
        report.elapsed.as_secs_f64() * 1e3,
        defrag_gbps,
        copy_gbps,
        defrag_gbps / copy_gbps
    );
    figures.add(
        "tier_defrag_ratio_before",
        format!("{:.3}", report.ratio_before()),
    );
    figures.add(
        "tier_defrag_ratio_after",
        format!("{:.3}", report.ratio_after()),
    );
    figures.add("tier_defrag_moves", report.moves);
    figures.add(
        "tier_defrag_wall_ms",
        format!("{:.1}", report.elapsed.as_secs_f64() * 1e3),
    );
    figures.add("tier_defrag_gpu_gbps", format!("{defrag_gbps:.1}"));
    figures.add("tier_device_copy_gbps", format!("{copy_gbps:.1}"));
    figures.add(
        "tier_defrag_vs_copy",
        format!("{:.3}", defrag_gbps / copy_gbps),
    );
}
