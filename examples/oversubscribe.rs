//! A working set several times the arena's device budget, processed by kernels in an
//! order that makes every visit a miss: movable arrays spill to host memory and come back
//! as they are used, and every result is checked against a CPU reference. Then the spill
//! rates against the transfer rings, the same loop with the budget lifted, and a
//! defragmentation of many small movables after freeing a random half.
//!
//! ```text
//! cargo run --release --example oversubscribe                  # sized for the adapter
//! cargo run --release --example oversubscribe -- --budget-mib 8192 --arrays 96 --array-mib 256
//! ```
//!
//! Defaults: on a CPU adapter (lavapipe) a 32 MiB budget and 12 arrays of 8 MiB; on a GPU
//! an 8 GiB budget and 96 arrays of 256 MiB (24 GiB). Flags: `--budget-mib`, `--arrays`,
//! `--array-mib`, `--passes` (visits of every array, default 2), `--work` (kernel passes
//! per visit: the loop's arithmetic intensity, default 4 on a CPU adapter and 64 on a
//! GPU), `--small` (movables in the defragmentation phase).

#[path = "support/defrag_measure.rs"]
mod defrag_measure;

use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use vramkit::arena::Budget;
use vramkit::tier::{Movable, TierConfig, Tiers};
use vramkit::{Gpu, Runtime, RuntimeConfig};

const MIB: u64 = 1 << 20;

struct Args {
    budget_mib: u64,
    arrays: usize,
    array_mib: u64,
    passes: u32,
    work: u32,
    small: usize,
}

fn parse(gpu: &Gpu) -> Result<Args, String> {
    let cpu = gpu.is_cpu();
    let mut a = Args {
        budget_mib: if cpu { 32 } else { 8192 },
        arrays: if cpu { 12 } else { 96 },
        array_mib: if cpu { 8 } else { 256 },
        passes: 2,
        work: if cpu { 4 } else { 64 },
        small: if cpu { 2048 } else { 16384 },
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let bad = |e: std::num::ParseIntError| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--budget-mib" => a.budget_mib = value.parse().map_err(bad)?,
            "--arrays" => a.arrays = value.parse().map_err(bad)?,
            "--array-mib" => a.array_mib = value.parse().map_err(bad)?,
            "--passes" => a.passes = value.parse().map_err(bad)?,
            "--work" => a.work = value.parse().map_err(bad)?,
            "--small" => a.small = value.parse().map_err(bad)?,
            _ => return Err(format!("unknown flag {flag} (see the example's docs)")),
        }
    }
    if a.arrays == 0 || a.array_mib == 0 || a.budget_mib < 2 * a.array_mib {
        return Err("need at least one array and a budget of two arrays or more".into());
    }
    Ok(a)
}

/// Array `k`'s initial element `i`: small integers, so adding whole numbers stays exact.
fn initial(k: usize, i: usize) -> f32 {
    ((i.wrapping_mul(7) + k * 131) % 2048) as f32 - 1024.0
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let gpu = Gpu::headless()?;
    let args = parse(&gpu)?;
    let budget = args.budget_mib * MIB;
    let rt = Runtime::new(
        &gpu,
        RuntimeConfig {
            arena: vramkit::ArenaConfig {
                name: "oversubscribe".into(),
                budget: Budget::Bytes(budget),
                ..Default::default()
            },
            ..Default::default()
        },
    )?;
    let len = (args.array_mib * MIB / 4) as usize;
    let bytes = 4 * len as u64;
    let tiers = Tiers::new(rt.arena(), TierConfig::default())?;
    let working_set = bytes * args.arrays as u64;
    eprintln!("adapter: {}", gpu.describe());
    eprintln!(
        "working set: {} arrays of {} MiB = {} over a {} budget",
        args.arrays,
        args.array_mib,
        vramkit::fmt_bytes(working_set),
        vramkit::fmt_bytes(budget)
    );
    let bar = indicatif::ProgressBar::new((args.arrays * (2 + args.passes as usize)) as u64);

    // Fill: each new array may push older ones to the host.
    let mut arrays: Vec<Movable> = Vec::with_capacity(args.arrays);
    let mut host = vec![0f32; len];
    for k in 0..args.arrays {
        let m = tiers.alloc(bytes, &format!("array{k}"))?;
        host.par_iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v = initial(k, i));
        let r = tiers.make_resident(&[&m])?;
        rt.upload(r.elements::<f32>(&m)?, &host)?;
        drop(r);
        arrays.push(m);
        bar.inc(1);
    }

    // The loop: visit every array in order, `work` kernel passes each; with more arrays
    // than fit, least-recently-used eviction makes every visit a restore.
    let pass = |bar: &indicatif::ProgressBar| -> vramkit::Result<()> {
        for m in &arrays {
            let r = tiers.make_resident(&[m])?;
            let x = r.elements::<f32>(m)?;
            let mut batch = rt.batch();
            for _ in 0..args.work {
                batch.scale(1.0, 1.0, x, x)?;
            }
            batch.submit()?;
            bar.inc(1);
        }
        Ok(())
    };
    rt.synchronize()?;
    let before = tiers.stats();
    let start = Instant::now();
    for _ in 0..args.passes {
        pass(&bar)?;
    }
    rt.synchronize()?;
    let loop_tight = start.elapsed();
    let during = tiers.stats();

    // Check every array against the CPU reference.
    let added = (args.passes * args.work) as f32;
    let mut mismatches = 0u64;
    for (k, m) in arrays.iter().enumerate() {
        let r = tiers.make_resident(&[m])?;
        rt.downloader()
            .download_into(r.get(m)?, 0, bytemuck::cast_slice_mut(&mut host))?;
        drop(r);
        mismatches += host
            .par_iter()
            .enumerate()
            .filter(|&(i, &v)| v != initial(k, i) + added)
            .count() as u64;
        bar.inc(1);
    }
    bar.finish_and_clear();

    // Spill rates: evict and restore as many arrays as half the budget holds, against the
    // Uploader and Downloader moving the same bytes in the same run.
    let n = ((budget / 2 / bytes) as usize).clamp(1, arrays.len());
    let set: Vec<&Movable> = arrays[..n].iter().collect();
    let moved = bytes * n as u64;
    let mut spill = (Duration::ZERO, Duration::ZERO);
    let mut rings = (Duration::ZERO, Duration::ZERO);
    for round in 0..3 {
        tiers.make_resident(&set).map(drop)?;
        rt.synchronize()?;
        let t = Instant::now();
        tiers.evict(&set)?;
        gpu.wait_idle()?;
        let evict = t.elapsed();
        let t = Instant::now();
        tiers.make_resident(&set).map(drop)?;
        gpu.wait_idle()?;
        let restore = t.elapsed();
        let r = tiers.make_resident(&set)?;
        let t = Instant::now();
        for m in &set {
            rt.uploader()
                .upload(r.get(m)?, 0, bytemuck::cast_slice(&host))?;
        }
        gpu.wait_idle()?;
        let upload = t.elapsed();
        let t = Instant::now();
        for m in &set {
            rt.downloader()
                .download_into(r.get(m)?, 0, bytemuck::cast_slice_mut(&mut host))?;
        }
        let download = t.elapsed();
        drop(r);
        // The first round warms the host blocks and staging rings.
        if round > 0 {
            spill = (spill.0 + evict, spill.1 + restore);
            rings = (rings.0 + download, rings.1 + upload);
        }
    }
    let gbps = |bytes: u64, d: Duration| bytes as f64 * 2.0 / d.as_secs_f64() / 1e9;
    let (evict_gbps, restore_gbps) = (gbps(moved, spill.0), gbps(moved, spill.1));
    let (download_gbps, upload_gbps) = (gbps(moved, rings.0), gbps(moved, rings.1));
    let spill_gbps = gbps(2 * moved, spill.0 + spill.1);

    // The same loop with the budget lifted (everything resident).
    rt.arena().set_budget(Budget::Unlimited)?;
    let all: Vec<&Movable> = arrays.iter().collect();
    tiers.make_resident(&all).map(drop)?;
    rt.synchronize()?;
    let quiet = indicatif::ProgressBar::hidden();
    let start = Instant::now();
    for _ in 0..args.passes {
        pass(&quiet)?;
    }
    rt.synchronize()?;
    let loop_unlimited = start.elapsed();
    drop(arrays);

    // Defragmentation: many small movables, a random half freed.
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let mut small: Vec<Option<(Movable, f32)>> = Vec::with_capacity(args.small);
    for j in 0..args.small {
        let size = rng.gen_range(4u64..64) * 4096;
        let m = tiers.alloc(size, &format!("small{}", j % 16))?;
        let value = j as f32;
        {
            let r = tiers.make_resident(&[&m])?;
            let mut batch = rt.batch();
            batch.fill(value, r.elements::<f32>(&m)?)?;
            batch.submit()?;
        }
        small.push(Some((m, value)));
    }
    for s in small.iter_mut() {
        if rng.gen_bool(0.5) {
            *s = None;
        }
    }
    let (report, defrag_gpu_ns) = defrag_measure::timed_defragment(&rt, &tiers)?;
    for (m, value) in small.iter().flatten() {
        let r = tiers.make_resident(&[m])?;
        let got = rt.download(r.elements::<f32>(m)?)?;
        mismatches += got.iter().filter(|v| **v != *value).count() as u64;
    }
    // The device's copy bandwidth, read the same way: one copy of as many bytes.
    let (copy_bytes, copy_s) = defrag_measure::device_copy_secs(&rt, report.bytes_moved)?;
    let copy_ns = (copy_s * 1e9) as u64;
    let defrag_gbps = report.bytes_moved as f64 * 2.0 / defrag_gpu_ns.max(1) as f64;
    let copy_gbps = copy_bytes as f64 * 2.0 / copy_ns.max(1) as f64;

    println!(
        "working_set_over_budget: {:.2}",
        working_set as f64 / budget as f64
    );
    println!("mismatches: {mismatches}");
    println!("evictions_in_loop: {}", during.evictions - before.evictions);
    println!("restores_in_loop: {}", during.restores - before.restores);
    println!("spill_gbps: {spill_gbps:.2}");
    println!(
        "spill_vs_upload: {:.2}",
        restore_gbps / upload_gbps.max(f64::MIN_POSITIVE)
    );
    println!(
        "spill_vs_download: {:.2}",
        evict_gbps / download_gbps.max(f64::MIN_POSITIVE)
    );
    println!("restore_gbps: {restore_gbps:.2}  (uploader {upload_gbps:.2})");
    println!("evict_gbps: {evict_gbps:.2}  (downloader {download_gbps:.2})");
    println!(
        "loop_vs_unlimited: {:.2}  ({} kernel passes per visit; {:.1} ms vs {:.1} ms)",
        loop_unlimited.as_secs_f64() / loop_tight.as_secs_f64(),
        args.work,
        loop_tight.as_secs_f64() * 1e3,
        loop_unlimited.as_secs_f64() * 1e3
    );
    println!(
        "defrag_reserved_over_allocated_before: {:.3}",
        report.ratio_before()
    );
    println!(
        "defrag_reserved_over_allocated_after: {:.3}",
        report.ratio_after()
    );
    println!(
        "defrag_moves: {} ({}, {} blocks freed)",
        report.moves,
        vramkit::fmt_bytes(report.bytes_moved),
        report.blocks_freed
    );
    // The moves' GPU time: one compute dispatch copying every moved range, against one
    // copy_buffer_to_buffer of as many bytes. Many small ranges in a shader copy run far
    // below a device copy on a CPU adapter (lavapipe's copy is one memcpy, its shader a
    // loop per range), much closer on a GPU.
    println!(
        "defrag_copy_vs_device_copy: {:.2}  ({defrag_gbps:.1} vs {copy_gbps:.1} GB/s, read+write; \
         {} ranges in one shader dispatch against one buffer copy)",
        defrag_gbps / copy_gbps.max(f64::MIN_POSITIVE),
        report.moves
    );
    if mismatches > 0 {
        return Err(format!("{mismatches} elements differ from the CPU reference").into());
    }
    Ok(())
}
